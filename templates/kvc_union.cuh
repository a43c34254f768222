// The union of the blocks a tile of query tokens selected (paged-cache
// attention): the tokens' top-k slots read into shared memory (with a guess
// for decode batches that overlaps the reads with the tile lookup), then the
// sorted union and each block's token mask, by one warp for up to 32
// candidates or for tokens that share one row, else by every thread. Every bound read from memory is clamped
// or skipped here, as in paged_kv.cuh.
#pragma once
#include "paged_kv.cuh"

namespace fsa {

// Shared memory of a tile's selection (select_union): candidates and their
// first-occurrence bits, the union and its token masks, the tokens' positions.
template <int NC, int TPT>
struct TileSelection {
    int cand[NC];
    u32 first[(NC + 31) / 32];
    int blocks[NC];  // the tile's union of selected blocks, ascending
    u32 masks[NC];   // per union block: the tokens that selected it
    int pos[TPT];    // position of each token in its sequence (-1: no token)
};

// The union of the blocks that the `ntok` query tokens of a tile selected, in
// ascending block order without repeats (sel.blocks), and per block a mask of
// the tokens (bit i = token i) that selected it (sel.masks), in two steps:
//  select_load: the tokens' top-k slots into sel.cand (-1 past ntok and past
//      each token's top-k length). rows: the top-k row of token 0 of the
//      tile; token_stride between tokens. len: the tile's topk_length entries
//      or NULL (all K slots used). It needs no positions, so its reads can be
//      in flight with the read of the sequence's cached length;
//  select_union (after a barrier that also publishes sel.pos, unless
//      select_union_in_warp: a one-token tile with K <= 32, whose union warp
//      wrote its own candidates and position; one warp when the tile holds
//      one token): token i sits at
//      position sel.pos[i] of its sequence; its slot s is valid when
//      0 <= idx <= pos / BK and no earlier slot of its row holds the same
//      block (first occurrence). Returns the number of blocks.
// The union is sorted, so its order, and every split of it, depends only on
// the tile's own top-k rows. Every thread calls both.
// A slot of a token's top-k row and its top-k length, read together (the
// slot need not wait for the length): the slot's block, -1 past the length.
template <int K>
__device__ __forceinline__ int topk_slot(const int *row, const int *len, int s) {
    const int v = __ldg(row + s);
    const int n = len ? min(max(__ldg(len), 0), K) : K;
    return s < n ? v : -1;
}

template <int K, int TPT>
__device__ __forceinline__ void select_load(TileSelection<TPT * K, TPT> &sel, const int *rows, long long token_stride,
                                            const int *len, int ntok) {
    constexpr int N = TPT * K, NW = (N + 31) / 32;
    const int tid = threadIdx.x, nthreads = blockDim.x;
    for (int c = tid; c < N; c += nthreads) {
        const int i = c / K, s = c - i * K;
        sel.cand[c] = i < ntok ? topk_slot<K>(rows + i * token_stride, len ? len + i : nullptr, s) : -1;
        sel.masks[c] = 0;
    }
    for (int w = tid; w < NW; w += nthreads) sel.first[w] = 0;
}

// Decode batches (as many query tokens as sequences) usually hold one token
// per sequence, so a tile's sequence can be guessed from the tile id alone:
// sequence b starting at packed row b has tile id fsa_kvc_first_tile(b, b).
// decode_guess reads the guessed token's top-k slot (thread s < K: slot s)
// and the sequence's cached length before the tile lookup has read
// cu_seqlens_q, so the two reads are in flight together instead of one after
// the other; decode_guess_use, once the tile is known, keeps them when the
// guess was right (the tile is token b of sequence b, alone) and otherwise
// does select_load and reads the cached length as without a guess. It also
// asks L2 for the guessed sequence's page-table row (a line per thread, up
// to 128 lines), so the table reads after the union hit L2 instead of DRAM.
// Every address read stays inside the arrays (b < batch = tq).
// The values are kept as read (no arithmetic on them before the tile lookup,
// which would wait for the reads there).
struct DecodeGuess {
    int b;     // the guessed sequence, -1: no guess
    int slot;  // this thread's top-k slot of token b, as read (thread < K)
    int len;   // token b's top-k length as read, or K
    int used;  // seqused_k[b] as read
};

template <int K, int TPT>
__device__ __forceinline__ DecodeGuess decode_guess(const fsa_kvc_params &p, long long x, int h) {
    DecodeGuess g = {-1, -1, K, 0};
    if (p.tq != p.batch) return g;
    const long long b = x - (x + 1) / (TPT + 1);  // the b with b + b / TPT == x, if any
    if (b >= p.batch || fsa_kvc_first_tile(b, (int)b, TPT) != x) return g;
    g.b = (int)b;
    if (threadIdx.x < K) {
        g.slot = __ldg(view_row<const int>(p.topk, b, h) + threadIdx.x);
        if (p.topk_len) g.len = __ldg((const int *)p.topk_len + b);
    }
    g.used = __ldg((const int *)p.seqused + b);
    const char *row = (const char *)((const int *)p.block_table + b * p.bt_stride), *end = row + 4 * p.max_pages;
    const char *line = (const char *)(((unsigned long long)row & ~127ull) + 128ull * threadIdx.x);
    if (line < end) prefetch_l2(line < row ? row : line);
    return g;
}

// Returns the cached length of sequence b; sel as select_load leaves it.
template <int K, int TPT>
__device__ __forceinline__ int decode_guess_use(TileSelection<TPT * K, TPT> &sel, const DecodeGuess &g,
                                                const fsa_kvc_params &p, int b, long long t0, int ntok, int h) {
    if (g.b == b && t0 == b && ntok == 1) {
        constexpr int N = TPT * K, NW = (N + 31) / 32;
        const int n = min(max(g.len, 0), K);  // as topk_slot and cached_len do
        for (int c = threadIdx.x; c < N; c += blockDim.x) {
            sel.cand[c] = c < n ? g.slot : -1;
            sel.masks[c] = 0;
        }
        for (int w = threadIdx.x; w < NW; w += blockDim.x) sel.first[w] = 0;
        return max(g.used, 0);
    }
    select_load<K, TPT>(sel, view_row<const int>(p.topk, t0, h), p.topk.token_stride,
                        p.topk_len ? (const int *)p.topk_len + t0 : nullptr, ntok);
    return cached_len((const int *)p.seqused, b);
}

// Whether select_union needs no CTA barrier before it: one token and K <= 32,
// so the union warp (warp 0) wrote every candidate it reads and the position.
template <int K>
__device__ __forceinline__ bool select_union_in_warp(int ntok) { return ntok == 1 && K <= 32; }

// The union of the first N candidates (N / K tokens, N <= 32) by warp 0
// alone: every lane reads every candidate from shared memory at once
// (broadcast loads) and compares in registers, so no chain of shuffles or
// of dependent shared-memory reads. A candidate counts when its block is in
// range for its token (a repeat inside a token's row adds the bit its first
// occurrence adds); lane l takes candidates l and l + 32: it keeps a value's
// first occurrence, with the OR of the bits of the tokens holding it, at the
// place given by the number of first occurrences below it. The same union and
// masks as the general path. The candidates and positions must be visible to
// warp 0 (its own writes, or a barrier); the barrier at the end publishes the
// union.
template <int N, int K, int BK, int TPT>
__device__ __forceinline__ int select_union_warp(TileSelection<TPT * K, TPT> &sel) {
    static_assert(N <= 32 && N % K == 0 && N / K <= TPT, "at most 32 candidates of whole tokens (registers)");
    constexpr int NI = N > 32 ? 2 : 1;
    if (threadIdx.x < 32) {
        __syncwarp();  // the warp's own candidate and position writes (select_union_in_warp)
        const int lane = threadIdx.x;
        int own[N / K], w[N];
#pragma unroll
        for (int t = 0; t < N / K; t++) own[t] = sel.pos[t] >= 0 ? sel.pos[t] / BK : -1;
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int raw = sel.cand[j];
            w[j] = raw >= 0 && raw <= own[j / K] ? raw : -1;
        }
        int first[NI];
        u32 mask[NI];
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int c = lane + 32 * i, t = min(c, N - 1) / K;
            const int raw = c < N ? sel.cand[c] : -1, o = sel.pos[t] >= 0 ? sel.pos[t] / BK : -1;
            const int v = raw >= 0 && raw <= o ? raw : -1;
            bool dup = false;
            mask[i] = 0u;
#pragma unroll
            for (int j = 0; j < N; j++) {
                const bool eq = v >= 0 && w[j] == v;
                dup = dup || (eq && j < c);
                mask[i] |= eq ? 1u << (j / K) : 0u;
            }
            first[i] = dup ? -1 : v;
        }
        const u32 f0 = __ballot_sync(0xffffffffu, first[0] >= 0);
        const u32 f1 = NI > 1 ? __ballot_sync(0xffffffffu, first[NI - 1] >= 0) : 0u;
        int rank[NI];
#pragma unroll
        for (int i = 0; i < NI; i++) rank[i] = 0;
#pragma unroll
        for (int j = 0; j < N; j++) {
            const bool is_first = (((j < 32 ? f0 : f1) >> (j & 31)) & 1u) != 0u;
#pragma unroll
            for (int i = 0; i < NI; i++) rank[i] += is_first && w[j] < first[i];
        }
#pragma unroll
        for (int i = 0; i < NI; i++)
            if (first[i] >= 0) {
                sel.blocks[rank[i]] = first[i];
                sel.masks[rank[i]] = mask[i];
            }
        if (lane == 0) sel.first[0] = (u32)(__popc(f0) + __popc(f1));  // first is scratch here
    }
    __syncthreads();
    return (int)sel.first[0];
}

// The union when every token of the tile holds the same candidates (one
// selection for a sequence's new tokens, e.g. speculative tokens sharing it):
// a block of the row is in the union when it is in range for the latest
// token, and its mask holds the tokens whose own block is not before it. The
// union and masks of the general path (which finds them candidate by
// candidate over all N), from the K candidates of token 0 in warp 0: lane s
// takes slot s, as select_union_warp does for one token. The barrier at the
// end publishes the union.
template <int K, int BK, int TPT>
__device__ __forceinline__ int select_union_one_row(TileSelection<TPT * K, TPT> &sel) {
    static_assert(K <= 32, "a lane per slot");
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int own[TPT], latest = -1;  // own block per token (-1: no token, or no position yet)
#pragma unroll
        for (int t = 0; t < TPT; t++) {
            own[t] = sel.pos[t] >= 0 ? sel.pos[t] / BK : -1;
            latest = max(latest, own[t]);
        }
        int w[K];
#pragma unroll
        for (int j = 0; j < K; j++) {
            const int raw = sel.cand[j];
            w[j] = raw >= 0 && raw <= latest ? raw : -1;
        }
        int v = -1;
#pragma unroll
        for (int j = 0; j < K; j++) v = j == lane ? w[j] : v;
        bool dup = false;
#pragma unroll
        for (int j = 0; j < K; j++) dup = dup || (v >= 0 && j < lane && w[j] == v);
        const int first = dup ? -1 : v;
        const u32 f = __ballot_sync(0xffffffffu, first >= 0);
        int rank = 0;
        u32 mask = 0u;
#pragma unroll
        for (int j = 0; j < K; j++) rank += ((f >> j) & 1u) && w[j] < first;
#pragma unroll
        for (int t = 0; t < TPT; t++) mask |= first >= 0 && first <= own[t] ? 1u << t : 0u;
        if (first >= 0) {
            sel.blocks[rank] = first;
            sel.masks[rank] = mask;
        }
        if (lane == 0) sel.first[0] = (u32)__popc(f);  // first is scratch here
    }
    __syncthreads();
    return (int)sel.first[0];
}

// ONE_ROW: tiles whose tokens all hold the same candidates take
// select_union_one_row (off only to measure the general path against it).
template <int K, int TPT, int BK, bool ONE_ROW = true>
__device__ __forceinline__ int select_union(TileSelection<TPT * K, TPT> &sel, int ntok) {
    // One token (decode) of K <= 32 slots, or a few tokens of at most 32 candidates: in one warp.
    // (Holding 64 candidates in registers spills at G 4; those tiles take the general path.)
    if constexpr (K <= 32)
        if (ntok == 1) return select_union_warp<K, K, BK, TPT>(sel);
    if constexpr (TPT * K <= 32) return select_union_warp<TPT * K, K, BK, TPT>(sel);
    constexpr int N = TPT * K, NW = (N + 31) / 32;
    int *cand = sel.cand, *blocks = sel.blocks;
    u32 *first = sel.first, *masks = sel.masks;
    const int tid = threadIdx.x, nthreads = blockDim.x;
    // One compare per candidate and a barrier decide whether the tokens share one row.
    if constexpr (ONE_ROW && K <= 32) {
        bool same = true;
        for (int c = K + tid; c < ntok * K; c += nthreads) same = same && cand[c] == cand[c % K];
        if (__syncthreads_and(same)) return select_union_one_row<K, BK, TPT>(sel);
    }
    // Validity inside each token's row: in range, not in the future, first occurrence.
    u32 keep = 0;  // bit n: this thread's n-th candidate stays
    for (int c = tid, n = 0; c < N; c += nthreads, n++) {
        const int i = c / K, s = c - i * K;
        if (slot_valid(cand + i * K, s, sel.pos[i] >= 0 ? sel.pos[i] / BK : -1)) keep |= 1u << n;
    }
    __syncthreads();
    for (int c = tid, n = 0; c < N; c += nthreads, n++)
        if (!((keep >> n) & 1)) cand[c] = -1;
    __syncthreads();
    // First occurrence over the whole tile.
    for (int c = tid; c < N; c += nthreads) {
        const int v = cand[c];
        bool ok = v >= 0;
        for (int c2 = 0; c2 < c && ok; c2++) ok = cand[c2] != v;
        if (ok) atomicOr(first + c / 32, 1u << (c % 32));
    }
    __syncthreads();
    // Rank = number of distinct blocks below: the sorted union. Only the
    // live tokens' candidates can be first occurrences (the rest are -1).
    const int n_live = ntok * K;
    int count = 0;
    for (int w = 0; w < NW; w++) count += __popc(first[w]);
    for (int c = tid; c < n_live; c += nthreads) {
        if (!((first[c / 32] >> (c % 32)) & 1)) continue;
        const int v = cand[c];
        int rank = 0;
        for (int c2 = 0; c2 < n_live; c2++) rank += ((first[c2 / 32] >> (c2 % 32)) & 1) && cand[c2] < v;
        blocks[rank] = v;
    }
    __syncthreads();
    for (int c = tid; c < N; c += nthreads) {
        const int v = cand[c];
        if (v < 0) continue;
        int lo = 0, hi = count - 1;  // v is in blocks[0 .. count)
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            if (blocks[mid] < v) lo = mid + 1;
            else hi = mid;
        }
        atomicOr(masks + lo, 1u << (c / K));
    }
    __syncthreads();
    return count;
}

}  // namespace fsa
