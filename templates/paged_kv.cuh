// Building blocks for attention over a paged KV cache: clamped sequence
// metadata, tile ids of packed query tokens, the address of a cached key
// through the page table, and the union of the blocks a tile of query tokens
// selected. Every bound read from memory is clamped or skipped here, so no
// metadata can make a kernel built on these read or write out of bounds.
#pragma once
#include "fsa_pipeline.cuh"
#include "kvc_params.cuh"
#include "sel_common.cuh"

namespace fsa {

// New query tokens of sequence b: packed rows [start, start + len), clamped
// into [0, tq) whatever cu_seqlens_q holds.
struct QuerySpan {
    long long start;
    int len;
};

__device__ __forceinline__ QuerySpan query_span(const int *cu_q, long long tq, int b) {
    QuerySpan s;
    s.start = min(max((long long)__ldg(cu_q + b), 0ll), tq);
    const long long end = min(max((long long)__ldg(cu_q + b + 1), s.start), tq);
    s.len = (int)(end - s.start);
    return s;
}

// Cached keys of sequence b (new tokens included); a negative entry counts as 0.
__device__ __forceinline__ int cached_len(const int *seqused, int b) { return max(__ldg(seqused + b), 0); }

// Tile ids: sequence b owns ids first_tile(b) .. first_tile(b) + ceil(len_b /
// tile_tokens) - 1 with first_tile(b) = start_b / tile_tokens + b. The ids
// grow with b and never overlap, and all stay below tq / tile_tokens + batch:
// a grid of that size covers every tile of any batch without a host sync.
// The sequence of tile id x is the number of sequences whose first tile is
// <= x, minus one: all threads count together, so the batch costs one memory
// latency rather than a binary search's chain of them (and a malformed
// cu_seqlens_q still gives some sequence in [0, batch)). Every thread calls
// it (it holds barriers); *tile gets x's tile number in its sequence.
__device__ __forceinline__ int tile_sequence(int *tile, int *counter, const int *cu_q, long long tq, int batch,
                                             long long x, int tile_tokens) {
    if (threadIdx.x == 0) *counter = 0;
    __syncthreads();
    int n = 0;
    for (int i = threadIdx.x; i < batch; i += blockDim.x) n += query_span(cu_q, tq, i).start / tile_tokens + i <= x;
    if (n) atomicAdd(counter, n);
    __syncthreads();
    const int b = max(*counter - 1, 0);
    *tile = (int)(x - (query_span(cu_q, tq, b).start / tile_tokens + b));
    return b;
}

// Where cached position j (>= 0) of a sequence lives: the page number and
// the row inside the page, looked up in the sequence's page-table row
// `table`. page = -1 when the row would be past the table or the page number
// is not a page of the cache.
struct PagedSlot {
    int page, row;
};

template <int PAGE>
__device__ __forceinline__ PagedSlot paged_slot(const int *table, long long max_pages, long long num_pages, int j) {
    const int slot = j / PAGE;
    const int page = slot < max_pages ? __ldg(table + slot) : -1;
    PagedSlot s;
    s.page = page >= 0 && page < num_pages ? page : -1;
    s.row = j - slot * PAGE;
    return s;
}

// The row of KV head h at a resolved slot of a paged cache. 64-bit offsets:
// page * page_stride passes 2^31 elements in large caches.
__device__ __forceinline__ const u16 *paged_row(const fsa_kvc_cache_view &c, PagedSlot s, int h) {
    return (const u16 *)c.ptr + (long long)s.page * c.page_stride + (long long)s.row * c.token_stride +
           (long long)h * c.head_stride;
}

// The union of the blocks that the `ntok` query tokens of a tile selected, in
// ascending block order without repeats, and per block a mask of the tokens
// (bit i = token i) that selected it. Token i sits at position pos[i] of its
// sequence; its slot s (< its top-k length) is valid when 0 <= idx <= pos / BK
// and no earlier slot of its row holds the same block (first occurrence).
// rows: the top-k row of token 0 of the tile; token_stride between tokens.
// len: the tile's topk_length entries or NULL (all K slots used).
// Scratch cand [TPT * K] and first [(TPT * K + 31) / 32] in shared memory.
// The union is sorted, so its order, and every split of it, depends only on
// the tile's own top-k rows.
// Every thread calls it; returns the number of blocks.
template <int K, int TPT, int BK>
__device__ __forceinline__ int select_union(int *blocks, u32 *masks, int *cand, u32 *first, const int *rows,
                                            long long token_stride, const int *len, const int *pos, int ntok) {
    constexpr int N = TPT * K, NW = (N + 31) / 32;
    const int tid = threadIdx.x, nthreads = blockDim.x;
    for (int c = tid; c < N; c += nthreads) {
        const int i = c / K, s = c - i * K;
        int v = -1;
        if (i < ntok) {
            const int n = len ? min(max(__ldg(len + i), 0), K) : K;
            if (s < n) v = __ldg(rows + i * token_stride + s);
        }
        cand[c] = v;
        masks[c] = 0;
    }
    for (int w = tid; w < NW; w += nthreads) first[w] = 0;
    __syncthreads();
    // Validity inside each token's row: in range, not in the future, first occurrence.
    u32 keep = 0;  // bit n: this thread's n-th candidate stays
    for (int c = tid, n = 0; c < N; c += nthreads, n++) {
        const int i = c / K, s = c - i * K;
        if (slot_valid(cand + i * K, s, pos[i] >= 0 ? pos[i] / BK : -1)) keep |= 1u << n;
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
    // Rank = number of distinct blocks below: the sorted union.
    int count = 0;
    for (int w = 0; w < NW; w++) count += __popc(first[w]);
    for (int c = tid; c < N; c += nthreads) {
        if (!((first[c / 32] >> (c % 32)) & 1)) continue;
        const int v = cand[c];
        int rank = 0;
        for (int c2 = 0; c2 < N; c2++) rank += ((first[c2 / 32] >> (c2 % 32)) & 1) && cand[c2] < v;
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

// Stage `stage` (STAGE keys) of the concatenated blocks blocks[u0 ..] of a
// sequence of seq_len cached keys is streamed in two steps, one stage apart,
// so that reading the page table never delays the copies:
//  paged_lookup_stage: each row's page and row in the page (page -1 when the
//      row is not a key: past the blocks, past the sequence, or behind a bad
//      page-table entry) into `slots`, one table read per row, all rows at once;
//  paged_load_stage (after a barrier): each row's position in keypos (INT_MAX
//      when it is not a key) and the mask of the tokens that selected its
//      block in keymask (0 when not a key), and the K and V rows into the
//      tiles at k_dst / v_dst (pitch D + 8; rows that are not keys zero-filled).
template <int BK, int PAGE, int STAGE, int THREADS>
__device__ __forceinline__ void paged_lookup_stage(const fsa_kvc_params &p, PagedSlot *slots, const int *blocks,
                                                   int u0, int stage, int total_keys, const int *table, int seq_len) {
    for (int r = threadIdx.x; r < STAGE; r += THREADS) {
        const int q = stage * STAGE + r;
        PagedSlot s = {-1, 0};
        if (q < total_keys) {
            const int j = blocks[u0 + q / BK] * BK + q % BK;
            if (j < seq_len) s = paged_slot<PAGE>(table, p.max_pages, p.num_pages, j);
        }
        slots[r] = s;
    }
}

template <int D, int BK, int STAGE, int THREADS>
__device__ __forceinline__ void paged_load_stage(const fsa_kvc_params &p, u32 k_dst, u32 v_dst, int *keypos,
                                                 u32 *keymask, const PagedSlot *slots, const int *blocks,
                                                 const u32 *masks, int u0, int stage, int h) {
    for (int r = threadIdx.x; r < STAGE; r += THREADS) {
        const int q = stage * STAGE + r;
        const bool ok = slots[r].page >= 0;  // only rows of keys have a page
        keypos[r] = ok ? blocks[u0 + q / BK] * BK + q % BK : 0x7fffffff;
        keymask[r] = ok ? masks[u0 + q / BK] : 0u;
    }
    load_tile_pair_async<STAGE, D, D + 8, THREADS>(k_dst, v_dst, [&](int r) {
        const PagedSlot s = slots[r];
        RowPair rp;
        rp.ok = s.page >= 0;
        rp.a = rp.ok ? paged_row(p.k, s, h) : (const u16 *)p.k.ptr;
        rp.b = rp.ok ? paged_row(p.v, s, h) : (const u16 *)p.v.ptr;
        return rp;
    });
}

// acc (16 x 8NJ) += A B^T over a depth of K with A already in registers
// (a[kd] = the 16 x 16 fragment of columns 16 kd .., as ldmatrix_x4 gives it)
// and B as 8NJ n-major rows at b_addr (pitch LD, lane offset ldm_lane_b):
// S = Q K^T with the query fragments loaded once for all stages.
template <class DT, int K, int NJ, int LD>
__device__ __forceinline__ void mma_abt_a_regs(float acc[NJ][4], const u32 a[K / 16][4], u32 b_addr) {
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++) {
#pragma unroll
        for (int jn = 0; jn < NJ; jn += 2) {
            u32 b[4];
            ldmatrix_x4(b, b_addr + jn * 8 * LD * 2 + kd * 32);
            DT::mma(acc[jn], a[kd], b[0], b[1]);
            DT::mma(acc[jn + 1], a[kd], b[2], b[3]);
        }
    }
}

}  // namespace fsa
