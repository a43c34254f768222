// The local slots of the FSA-order forward (sel_local_layout.cuh): a query
// tile of one token chunk, and the key stream of a tile with what its rows
// see. The stream is block 0, then the blocks from the one before the
// tile's first own block to its last own block (KS keys per stage, BK a
// multiple of KS); row (token t, own block b) sees key j of block c when
// j <= t and its selection names c among block 0, b - 1 and b.
#pragma once
#include "fsa_mma.cuh"
#include "fsa_qtile.cuh"
#include "sel_common.cuh"
#include "sel_local_layout.cuh"

namespace fsa {

// The query tile of this CTA (blockIdx.x after p.local_x0) cut to the token
// chunk [t0, t0 + tc): not ok when none of its tokens is in the chunk.
template <int TT>
__device__ __forceinline__ QueryTile chunk_query_tile(const fsa_sel_params &p) {
    QueryTile t = query_tile<TT, false>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens,
                                        p.local_x0 + blockIdx.x);
    const long long lo = max(t.tok0, p.t0), hi = min(t.tok0 + t.n_tok, p.t0 + p.tc);
    t.ok = t.ok && lo < hi;
    t.tok0 = lo;
    t.n_tok = t.ok ? (int)(hi - lo) : 0;
    return t;
}

template <int G, int KS, int BK>
struct LocalStream {
    static_assert(BK % KS == 0, "a stage never straddles two blocks");
    int h;                  // the KV head (blockIdx.y)
    int lo, n_blocks;       // the stream's blocks: 0, then lo .. lo + n_blocks - 2
    long long seq_len;
    long long pos[2];       // this lane's rows: position in the sequence (-1: no row)
    int own[2];
    unsigned local[2];      // the local blocks the row's selection names (local_bit)

    __device__ __forceinline__ LocalStream(const fsa_sel_params &p, const QueryTile &tile) : h(blockIdx.y) {
        typedef GroupRows<G> Rows;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        seq_len = tile.end - tile.start;
        const long long first = tile.tok0 - tile.start, last = first + tile.n_tok - 1;
        const int b_first = (int)(first / BK), b_last = (int)(last / BK);
        lo = max(b_first - 1, 1);
        n_blocks = 1 + max(b_last - lo + 1, 0);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = frag_row(lane, 2 * half);
            const bool live = Rows::live(warp, r, tile.n_tok);
            pos[half] = live ? first + Rows::token(warp, r) : -1;
            own[half] = live ? (int)(pos[half] / BK) : -1;
            local[half] = 0;
            if (!live) continue;
            const int *sel = view_row<const int>(p.topk, tile.start + pos[half], h);
            for (int s = 0; s < (int)p.top_k; s++) {
                const int c = __ldg(sel + s);
                if (c >= 0 && c <= own[half]) local[half] |= local_bit(c, own[half]);
            }
        }
    }

    __device__ __forceinline__ int n_stages() const { return n_blocks * (BK / KS); }

    __device__ __forceinline__ int block_of(int j) const { return j < BK ? 0 : lo + j / BK - 1; }
    __device__ __forceinline__ long long key_pos(int j) const { return (long long)block_of(j) * BK + j % BK; }

    // Key j of the stream: its K and V rows (zeros past the sequence's end).
    __device__ __forceinline__ RowPair key_row(const fsa_sel_params &p, const QueryTile &tile, int j) const {
        const long long kp = key_pos(j);
        const bool ok = kp < seq_len;
        const long long t = tile.start + (ok ? kp : 0);
        return RowPair{view_row<const u16>(p.k, t, h), view_row<const u16>(p.v, t, h), ok};
    }

    __device__ __forceinline__ bool sees_block(int c, int half) const { return (local[half] & local_bit(c, own[half])) != 0; }

    __device__ __forceinline__ bool visible(int j, int half) const {
        return key_pos(j) <= pos[half] && sees_block(block_of(j), half);
    }

    // Some row of this warp sees a key of the stage (warp-uniform).
    __device__ __forceinline__ bool warp_sees(int stage) const {
        const int j = stage * KS;
        const long long kp = key_pos(j);
        const int c = block_of(j);
        const bool mine = (kp <= pos[0] && sees_block(c, 0)) || (kp <= pos[1] && sees_block(c, 1));
        return __any_sync(0xffffffffu, mine);
    }
};

}  // namespace fsa
