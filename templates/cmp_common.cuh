// What the compressed-attention kernels share: the visibility rule of
// compressed tokens, a sequence's compressed keys, and the stage loader.
#pragma once
#include "cmp_params.cuh"
#include "fsa_mma.cuh"
#include "fsa_qtile.cuh"

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
    return (int)min((pos - (l - 1)) / d + 1, (long long)count);
}

// The normalized probabilities exp2(s * scale_log2 - lse2) of MT sets of 16
// rows' raw scores, in place; 0 where a row does not see the key (key
// `first` + column; this lane's row slot 2m + half sees the first vis[slot]).
template <int NJ, int MT>
__device__ __forceinline__ void cmp_probs(float s[MT][NJ][4], int first, const int vis[2 * MT],
                                          const float lse2[2 * MT], float scale_log2, int lane) {
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int jn = 0; jn < NJ; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int slot = 2 * m + (e >> 1);
                s[m][jn][e] = first + frag_col(lane, jn, e) < vis[slot]
                                  ? fast_exp2(fmaf(s[m][jn][e], scale_log2, -lse2[slot]))
                                  : 0.f;
            }
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
