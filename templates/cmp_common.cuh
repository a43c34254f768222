// What the compressed-attention kernels share: the visibility rule of
// compressed tokens, a sequence's compressed keys, and the stage loader.
#pragma once
#include "cmp_params.cuh"
#include "fsa_mma.cuh"
#include "fsa_qtile.cuh"
#include "fsa_stream.cuh"

namespace fsa {

// The compressed tokens of a tile's sequence: [start, start + count) of the
// [Tc, Hkv, *] tensors, clamped so that a malformed cu_seqlens_c reads
// nothing outside them.
struct CmpKeys {
    long long start;
    int count;
};

__device__ __forceinline__ CmpKeys cmp_keys(const fsa_cmp_params &p, int seq) {
    const int *cu = (const int *)p.cu_seqlens_c;
    const long long s = min(max((long long)__ldg(cu + seq), 0ll), p.total_cmp);
    const long long e = min(max((long long)__ldg(cu + seq + 1), s), p.total_cmp);
    return CmpKeys{s, (int)(e - s)};
}

// Compressed tokens visible to the query at position pos of its sequence:
// token j covers positions j*d .. j*d + l - 1 and is visible once all of them
// are, j*d + l - 1 <= pos; at most the sequence's count.
__device__ __forceinline__ int cmp_visible(long long pos, long long l, long long d, int count) {
    if (pos < l - 1) return 0;
    const long long n = pos - (l - 1);
    // A 32-bit division where both fit (the dK/dV pass divides once per query row and stage).
    const long long q = ((n | d) >> 31) == 0 ? (long long)((unsigned)n / (unsigned)d) : n / d;
    return (int)min(q + 1, (long long)count);
}

// The normalized probabilities exp2(s * scale_log2 - lse2) of MT sets of 16
// rows' raw scores s into p (p may be s); 0 where a row does not see the key
// (key `first` + column; this lane's row slot 2m + half sees the first
// vis[slot]). `whole` (the same on every lane): every row that matters sees
// every key here, so nothing is masked. Not clamped: NaN and Inf pass
// through to Scorer::pack, which takes them as 1.
template <int NJ, int MT>
__device__ __forceinline__ void cmp_probs(float p[MT][NJ][4], const float s[MT][NJ][4], int first, const int vis[2 * MT],
                                          const float lse2[2 * MT], float scale_log2, int lane, bool whole) {
    if (whole) {  // a branch of its own: no compare or select per element
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int jn = 0; jn < NJ; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    p[m][jn][e] = fast_exp2(fmaf(s[m][jn][e], scale_log2, -lse2[2 * m + (e >> 1)]));
        return;
    }
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int jn = 0; jn < NJ; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int slot = 2 * m + (e >> 1);
                p[m][jn][e] = first + frag_col(lane, jn, e) < vis[slot]
                                  ? fast_exp2(fmaf(s[m][jn][e], scale_log2, -lse2[slot]))
                                  : 0.f;
            }
}

// The compressed tokens a query tile's rows see: this lane's two rows (0 for
// a row without a token), the most any row of the warp sees, and what the
// tile's last token (the one that sees the most) sees.
struct CmpTileVis {
    int row[2], warp, tile;
};
template <int G>
__device__ __forceinline__ CmpTileVis cmp_tile_visible(const QueryTile &tile, long long l, long long d, int count) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    CmpTileVis v;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        const long long pos = tile.tok0 + GroupRows<G>::token(warp, r) - tile.start;
        v.row[half] = GroupRows<G>::live(warp, r, tile.n_tok) ? cmp_visible(pos, l, d, count) : 0;
    }
    v.warp = __reduce_max_sync(0xffffffffu, max(v.row[0], v.row[1]));
    v.tile = cmp_visible(tile.tok0 + tile.n_tok - 1 - tile.start, l, d, count);
    return v;
}

// Key j of a tile's stream of compressed tokens, the first `limit` of the sequence.
__device__ __forceinline__ RowPair cmp_key_row(const fsa_cmp_params &p, const CmpKeys &keys, int h, int j, int limit) {
    const bool ok = j < limit;
    return RowPair{ok ? view_row<const u16>(p.k, keys.start + j, h) : (const u16 *)p.k.ptr,
                   ok ? view_row<const u16>(p.v, keys.start + j, h) : (const u16 *)p.v.ptr, ok};
}

// The sequence's compressed keys of KV head h as a strided key stream, the
// first `limit` of them (an empty stream names the tensors' first rows).
__device__ __forceinline__ StridedKeys cmp_strided_keys(const fsa_cmp_params &p, const CmpKeys &keys, int h, int limit) {
    const bool any = keys.count > 0;
    return StridedKeys{any ? view_row<const u16>(p.k, keys.start, h) : (const u16 *)p.k.ptr,
                       any ? view_row<const u16>(p.v, keys.start, h) : (const u16 *)p.v.ptr, p.k.token_stride,
                       p.v.token_stride, any ? limit : 0};
}

// Rows [first, first + ROWS) of the sequence's keys of KV head h into the
// tile at dst (pitch LD), zeros from row `limit` on.
template <int ROWS, int D, int LD>
__device__ __forceinline__ void load_cmp_rows_async(u32 dst, const fsa_kernel_view &t, const CmpKeys &keys, int h,
                                                    int first, int limit) {
    load_tile_async<ROWS, D, LD, FSA_QT_THREADS>(dst, [&](int r) {
        const int j = first + r;
        const bool ok = j < limit;
        return RowSrc{ok ? view_row<const u16>(t, keys.start + j, h) : (const u16 *)t.ptr, ok};
    });
}

}  // namespace fsa
