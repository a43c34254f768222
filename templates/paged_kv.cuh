// Building blocks for attention over a paged KV cache: clamped sequence
// metadata, tile ids of packed query tokens, the address of a cached key
// through the page table, the union of the blocks a tile of query tokens
// selected, and the stream of that union's keys through the page table.
// Every bound read from memory is clamped or skipped here, so no metadata can
// make a kernel built on these read or write out of bounds.
#pragma once
#include "fsa_pipeline.cuh"
#include "kvc_params.cuh"
#include "sel_common.cuh"

namespace fsa {

constexpr int KVC_STAGE = FSA_KVC_STAGE_KEYS;

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

// The sequence of tile id x (fsa_kvc_first_tile) is the number of sequences
// whose first tile is <= x, minus one: all threads count together, so the
// batch costs one memory latency rather than a binary search's chain of them
// (and a malformed cu_seqlens_q still gives some sequence in [0, batch)).
// Every thread calls it (it holds barriers); *tile gets x's tile number in its
// sequence.
__device__ __forceinline__ int tile_sequence(int *tile, int *counter, const int *cu_q, long long tq, int batch,
                                             long long x, int tile_tokens) {
    if (threadIdx.x == 0) *counter = 0;
    __syncthreads();
    int n = 0;
    for (int i = threadIdx.x; i < batch; i += blockDim.x)
        n += fsa_kvc_first_tile(query_span(cu_q, tq, i).start, i, tile_tokens) <= x;
    if (n) atomicAdd(counter, n);
    __syncthreads();
    const int b = max(*counter - 1, 0);
    *tile = (int)(x - fsa_kvc_first_tile(query_span(cu_q, tq, b).start, b, tile_tokens));
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
    return view_row<const u16>(c.rows, s.row, h) + (long long)s.page * c.page_stride;
}

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
// the tokens (bit i = token i) that selected it (sel.masks). Token i sits at
// position sel.pos[i] of its sequence; its slot s (< its top-k length) is
// valid when 0 <= idx <= pos / BK and no earlier slot of its row holds the
// same block (first occurrence). rows: the top-k row of token 0 of the tile;
// token_stride between tokens. len: the tile's topk_length entries or NULL
// (all K slots used). The union is sorted, so its order, and every split of
// it, depends only on the tile's own top-k rows.
// Every thread calls it; returns the number of blocks.
template <int K, int TPT, int BK>
__device__ __forceinline__ int select_union(TileSelection<TPT * K, TPT> &sel, const int *rows, long long token_stride,
                                            const int *len, int ntok) {
    constexpr int N = TPT * K, NW = (N + 31) / 32;
    int *cand = sel.cand, *blocks = sel.blocks;
    u32 *first = sel.first, *masks = sel.masks;
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

// Stage `stage` (KVC_STAGE keys) of the concatenated blocks blocks[u0 ..] of a
// sequence of seq_len cached keys is streamed in two steps, one stage apart,
// so that reading the page table never delays the copies:
//  paged_lookup_stage: each row's page and row in the page (page -1 when the
//      row is not a key: past the blocks, past the sequence, or behind a bad
//      page-table entry) into `slots`, one table read per row, all rows at once;
//  paged_load_stage (after a barrier): each row's position in keypos (INT_MAX
//      when it is not a key) and the mask of the tokens that selected its
//      block in keymask (0 when not a key), and the K and V rows into the
//      tiles at k_dst / v_dst (pitch D + 8 and DV + 8; rows that are not keys
//      zero-filled).
template <int BK, int PAGE>
__device__ __forceinline__ void paged_lookup_stage(const fsa_kvc_params &p, PagedSlot *slots, const int *blocks,
                                                   int u0, int stage, int total_keys, const int *table, int seq_len) {
    for (int r = threadIdx.x; r < KVC_STAGE; r += FSA_KVC_THREADS) {
        const int q = stage * KVC_STAGE + r;
        PagedSlot s = {-1, 0};
        if (q < total_keys) {
            const int j = blocks[u0 + q / BK] * BK + q % BK;
            if (j < seq_len) s = paged_slot<PAGE>(table, p.max_pages, p.num_pages, j);
        }
        slots[r] = s;
    }
}

template <int D, int DV, int BK>
__device__ __forceinline__ void paged_load_stage(const fsa_kvc_params &p, u32 k_dst, u32 v_dst, int *keypos,
                                                 u32 *keymask, const PagedSlot *slots, const int *blocks,
                                                 const u32 *masks, int u0, int stage, int h) {
    for (int r = threadIdx.x; r < KVC_STAGE; r += FSA_KVC_THREADS) {
        const int q = stage * KVC_STAGE + r;
        const bool ok = slots[r].page >= 0;  // only rows of keys have a page
        keypos[r] = ok ? blocks[u0 + q / BK] * BK + q % BK : 0x7fffffff;
        keymask[r] = ok ? masks[u0 + q / BK] : 0u;
    }
    load_tiles_async<KVC_STAGE, D, fsa_pitch(D), DV, fsa_pitch(DV), FSA_KVC_THREADS>(k_dst, v_dst, [&](int r) {
        const PagedSlot s = slots[r];
        RowPair rp;
        rp.ok = s.page >= 0;
        rp.a = rp.ok ? paged_row(p.k, s, h) : (const u16 *)p.k.rows.ptr;
        rp.b = rp.ok ? paged_row(p.v, s, h) : (const u16 *)p.v.rows.ptr;
        return rp;
    });
}

// Shared memory of the key stream: per stage buffer each row's key position
// and token mask, and the page lookups of two stages.
struct PagedStreamShared {
    int keypos[FSA_KVC_STAGES][KVC_STAGE];
    u32 keymask[FSA_KVC_STAGES][KVC_STAGE];
    PagedSlot slots[2][KVC_STAGE];
};

// The key stream of a paged-cache CTA: the union blocks [u_lo, u_hi) of KV
// head h of sequence b, concatenated, in stages of KVC_STAGE keys through the
// sequence's page-table row (lookups one stage ahead of the copies),
// FSA_KVC_STAGES stages in flight at ks and vs (shared byte addresses; K rows
// D wide, V rows DV wide). Use:
//   PagedStream<D, DV, BK, PAGE> in(sh, p, ks, vs, blocks, masks, u_lo, u_hi, b, h, seq_len);
//   ... issue copies that should join stage 0's group ...
//   in.start();                        // every thread
//   for (int st = 0; st < in.n_stages; st++) {
//       const int buf = in.acquire(st);  // stage st is in buffer buf
//       ... in.keypos(buf)[c], in.keymask(buf)[c]: key row c's position and token mask ...
//   }
template <int D, int DV, int BK, int PAGE>
struct PagedStream {
    static_assert(D % 16 == 0 && DV % 16 == 0 && BK % 16 == 0, "head dims and block size are multiples of 16");
    static constexpr u32 K_STAGE_BYTES = fsa_kvc_stage_bytes(D), V_STAGE_BYTES = fsa_kvc_stage_bytes(DV);

    PagedStreamShared &sh;
    const fsa_kvc_params &p;
    u32 ks, vs;
    const int *blocks;
    const u32 *masks;
    const int *table;  // the sequence's page-table row
    int u_lo, h, seq_len;
    int total_keys, n_stages;
    AsyncRing<FSA_KVC_STAGES> ring;

    __device__ __forceinline__ PagedStream(PagedStreamShared &sh_, const fsa_kvc_params &p_, u32 ks_, u32 vs_,
                                           const int *blocks_, const u32 *masks_, int u_lo_, int u_hi, int b, int h_,
                                           int seq_len_)
        : sh(sh_), p(p_), ks(ks_), vs(vs_), blocks(blocks_), masks(masks_), u_lo(u_lo_), h(h_), seq_len(seq_len_) {
        total_keys = (u_hi - u_lo) * BK;
        table = (const int *)p.block_table + (long long)b * p.bt_stride;
        n_stages = (total_keys + KVC_STAGE - 1) / KVC_STAGE;
    }

    // The page lookups of stage 0, then the first copies; copies issued
    // before it join stage 0's group.
    __device__ __forceinline__ void start() {
        if (n_stages > 0) lookup(0);
        __syncthreads();
        ring.start(n_stages, loader());
    }
    __device__ __forceinline__ int acquire(int st) { return ring.acquire(st, loader()); }
    __device__ __forceinline__ const int *keypos(int buf) const { return sh.keypos[buf]; }
    __device__ __forceinline__ const u32 *keymask(int buf) const { return sh.keymask[buf]; }

  private:
    __device__ __forceinline__ void lookup(int stage) {
        paged_lookup_stage<BK, PAGE>(p, sh.slots[stage & 1], blocks, u_lo, stage, total_keys, table, seq_len);
    }
    // Copies of stage `stage` (its page lookups were done a stage earlier),
    // then the lookups of the next one.
    __device__ __forceinline__ auto loader() {
        return [this](int stage, int buf) {
            paged_load_stage<D, DV, BK>(p, ks + buf * K_STAGE_BYTES, vs + buf * V_STAGE_BYTES, sh.keypos[buf],
                                        sh.keymask[buf], sh.slots[stage & 1], blocks, masks, u_lo, stage, h);
            if (stage + 1 < n_stages) lookup(stage + 1);
        };
    }
};

}  // namespace fsa
