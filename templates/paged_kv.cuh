// Building blocks for attention over a paged KV cache: clamped sequence
// metadata, tile ids of packed query tokens, the address of a cached key
// through the page table, and the stream of a tile's union of selected blocks
// through the page table (the union itself: kvc_union.cuh).
// Every bound read from memory is clamped or skipped here, so no metadata can
// make a kernel built on these read or write out of bounds.
#pragma once
#include "fsa_pipeline.cuh"
#include "fsa_tma.cuh"
#include "fsa_wgmma.cuh"
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
// `table`. paged_slot_fetch only issues the table read (page = -1 when the
// row would be past the table), so the value can stay in flight while other
// work goes on; paged_slot_checked, where it is used, makes page -1 when the
// number is not a page of the cache.
struct PagedSlot {
    int page, row;
};

template <int PAGE>
__device__ __forceinline__ PagedSlot paged_slot_fetch(const int *table, long long max_pages, int j) {
    const int slot = j / PAGE;
    PagedSlot s;
    s.page = slot < max_pages ? __ldg(table + slot) : -1;
    s.row = j - slot * PAGE;
    return s;
}

__device__ __forceinline__ PagedSlot paged_slot_checked(PagedSlot s, long long num_pages) {
    s.page = s.page >= 0 && s.page < num_pages ? s.page : -1;
    return s;
}

// The element offset of KV head h's row at a resolved slot of a paged cache
// (-1 when the slot has no page). 64-bit: page * page_stride passes 2^31
// elements in large caches.
__device__ __forceinline__ long long paged_offset(const fsa_kvc_cache_view &c, PagedSlot s, int h) {
    return s.page >= 0 ? s.row * c.rows.token_stride + h * c.rows.head_stride + (long long)s.page * c.page_stride
                       : -1ll;
}

// Stage `stage` (KVC_STAGE keys) of the concatenated blocks blocks[u0 ..] of a
// sequence of seq_len cached keys is streamed in steps a stage apart, so
// that reading the page table never delays the copies or the math:
//  paged_fetch_row: thread r issues the table read of row r of the stage (a
//      register in flight for a stage; page -1 when the row is not a key:
//      past the blocks, past the sequence or past the table);
//  paged_store_row (before a barrier): thread r turns its lookup into the
//      element offsets of the row in the K and V caches (KeyRow; -1: no key),
//      once per row rather than once per 16-byte piece;
//  paged_load_stage (after that barrier): each row's position in keypos
//      (INT_MAX when it is not a key) and the mask of the tokens that selected
//      its block in keymask (0 when not a key), and the K and V rows into the
//      tiles at k_dst / v_dst (pitch D + 8 and DV + 8; rows that are not keys,
//      or behind a bad page-table entry, zero-filled).
static_assert(KVC_STAGE <= FSA_KVC_THREADS, "a thread per key row of a stage");
template <int BK, int PAGE>
__device__ __forceinline__ PagedSlot paged_fetch_row(const fsa_kvc_params &p, const int *blocks, int u0, int stage,
                                                     int total_keys, const int *table, int seq_len) {
    const int r = threadIdx.x, q = stage * KVC_STAGE + r;
    PagedSlot s = {-1, 0};
    if (r < KVC_STAGE && q < total_keys) {
        const int j = blocks[u0 + q / BK] * BK + q % BK;
        if (j < seq_len) s = paged_slot_fetch<PAGE>(table, p.max_pages, j);
    }
    return s;
}

struct KeyRow {
    long long k, v;  // element offsets in the K and V caches; k = -1: not a key
};

__device__ __forceinline__ KeyRow paged_key_row(const fsa_kvc_params &p, PagedSlot s, int h) {
    s = paged_slot_checked(s, p.num_pages);
    return KeyRow{paged_offset(p.k, s, h), paged_offset(p.v, s, h)};
}

template <int D, int DV, int BK>
__device__ __forceinline__ void paged_load_stage(const fsa_kvc_params &p, u32 k_dst, u32 v_dst, int *keypos,
                                                 u32 *keymask, const KeyRow *rows, const int *blocks,
                                                 const u32 *masks, int u0, int stage) {
    for (int r = threadIdx.x; r < KVC_STAGE; r += FSA_KVC_THREADS) {
        const int q = stage * KVC_STAGE + r;
        const bool ok = rows[r].k >= 0;  // only rows of keys have a page
        keypos[r] = ok ? blocks[u0 + q / BK] * BK + q % BK : 0x7fffffff;
        keymask[r] = ok ? masks[u0 + q / BK] : 0u;
    }
    const u16 *k0 = (const u16 *)p.k.rows.ptr, *v0 = (const u16 *)p.v.rows.ptr;
    load_tiles_async<KVC_STAGE, D, fsa_pitch(D), DV, fsa_pitch(DV), FSA_KVC_THREADS>(k_dst, v_dst, [&](int r) {
        const KeyRow kr = rows[r];
        RowPair rp;
        rp.ok = kr.k >= 0;
        rp.a = k0 + (rp.ok ? kr.k : 0ll);
        rp.b = v0 + (rp.ok ? kr.v : 0ll);
        return rp;
    });
}

// Shared memory of the key stream: per stage buffer the K and V row offsets
// of its checked page lookups (cp.async), each row's key position and token
// mask, and the mbarrier its tensor-map copies complete on; with tensor-map
// copies, the pages of the CTA's next stages (paged_fetch_pages).
constexpr int KVC_RUN_PAGES = FSA_KVC_RUN_PAGES;
template <bool TMA, int STAGES = FSA_KVC_STAGES>
struct PagedStreamShared {
    KeyRow rows[STAGES][TMA ? 1 : KVC_STAGE];
    int keypos[STAGES][KVC_STAGE];
    u32 keymask[STAGES][KVC_STAGE];
    u64 bar[STAGES];
    int pages[TMA ? KVC_RUN_PAGES : 2];
};

// The pages of stages first .. first + count - 1 (count <= the block size) of
// a CTA's run: the union blocks [u_run, u_end) of its shares, concatenated,
// 64 keys a stage; thread t0 + t (t < count) reads the table entry of stage first + t
// into its slot of the ring `pages` (stage % KVC_RUN_PAGES): the page, or -1
// when the stage has no key (past the run, past the sequence, past the table
// row, or a number that is not a page of the cache). Every row of a stage
// lies in one page (fsa_kvc_tma_fits), so its first key's entry serves all.
template <int BK, int PAGE>
__device__ __forceinline__ void paged_fetch_pages(int *pages, const fsa_kvc_params &p, const int *blocks, int u_run,
                                                  int u_end, const int *table, int seq_len, int first, int count,
                                                  int t0 = 0) {
    constexpr int SPB = BK / KVC_STAGE;  // stages per block
    const int t = (int)threadIdx.x - t0;
    if (t < 0 || t >= count) return;
    const int r = first + t, u = u_run + r / SPB;
    int page = -1;
    if (u < u_end) {
        const int j = blocks[u] * BK + (r % SPB) * KVC_STAGE;
        if (j < seq_len) page = paged_slot_checked(paged_slot_fetch<PAGE>(table, p.max_pages, j), p.num_pages).page;
    }
    pages[r % KVC_RUN_PAGES] = page;
}

// The K and V boxes (64 columns x 64 rows of head h each, 128-byte swizzled)
// of the rows from `row` of page `page`, copied into k_dst / v_dst, completing on bar.
// EVICT_FIRST: the boxes' lines are the first L2 evicts (l2_evict_first).
template <int D, int DV, bool EVICT_FIRST = false>
__device__ __forceinline__ void paged_boxes(const fsa_kvc_params &p, int page, int row, int h, u32 k_dst, u32 v_dst,
                                            u32 bar) {
    constexpr u32 PANEL = KVC_STAGE * 128;  // one 64-column panel of a stage
    const int kt = p.k_token_dim == 1, vt = p.v_token_dim == 1;
    if constexpr (EVICT_FIRST) {
        const u64 policy = l2_evict_first();
#pragma unroll
        for (int c = 0; c < D / 64; c++)
            tma_load_4d_hint(k_dst + c * PANEL, &p.k_map, bar, c * 64, kt ? row : h, kt ? h : row, page, policy);
#pragma unroll
        for (int c = 0; c < DV / 64; c++)
            tma_load_4d_hint(v_dst + c * PANEL, &p.v_map, bar, c * 64, vt ? row : h, vt ? h : row, page, policy);
        return;
    }
#pragma unroll
    for (int c = 0; c < D / 64; c++) tma_load_4d(k_dst + c * PANEL, &p.k_map, bar, c * 64, kt ? row : h, kt ? h : row, page);
#pragma unroll
    for (int c = 0; c < DV / 64; c++) tma_load_4d(v_dst + c * PANEL, &p.v_map, bar, c * 64, vt ? row : h, vt ? h : row, page);
}

// A stage of tensor-map copies (sm_90a, fsa_kvc_tma_fits) of the page `page`
// (paged_fetch_pages): thread r < KVC_STAGE writes key row r's position and
// token mask and arrives on the buffer's mbarrier; thread 0 also copies the K
// and V boxes of the page (64 columns x 64 rows of head h each, 128-byte
// swizzled) into k_dst / v_dst, or copies nothing when the stage has no key.
// A row that is not a key (past the sequence, or the stage has no page) gets
// position INT_MAX and mask 0; its rows in the buffer hold whatever the page
// holds there (paged_zero_missing clears the V rows a warp reads).
template <int D, int DV, int BK, int PAGE, bool EVICT_FIRST = false>
__device__ __forceinline__ void paged_tma_stage(const fsa_kvc_params &p, u32 k_dst, u32 v_dst, u32 bar, int *keypos,
                                                u32 *keymask, int page, const int *blocks, const u32 *masks, int u0,
                                                int stage, int h, int seq_len) {
    const int r = threadIdx.x;
    if (r >= KVC_STAGE) return;
    const int q = stage * KVC_STAGE + r, j = blocks[u0 + q / BK] * BK + q % BK;
    const bool key = page >= 0 && j < seq_len;
    keypos[r] = key ? j : 0x7fffffff;
    keymask[r] = key ? masks[u0 + q / BK] : 0u;
    if (r != 0 || page < 0) {
        mbar_arrive(bar);
        return;
    }
    mbar_expect_tx(bar, (D + DV) / 64 * KVC_STAGE * 128);
    paged_boxes<D, DV, EVICT_FIRST>(p, page, j % PAGE, h, k_dst, v_dst, bar);  // row 0: the first key of the stage
}

__device__ __forceinline__ void st_shared_zero16(u32 addr) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
}

// The V rows [k0, k0 + n) of a landed tensor-map stage that are not keys
// (position INT_MAX), zeroed before the `parts` consecutive warps that read
// them go on (a masked key's probability is 0, and 0 times a page's stale Inf
// or NaN is not), and fenced for the products' async proxy and the next copy
// into the buffer. This lane's warp is number `part` of them: each zeroes a
// share of the rows, then they meet at named barrier `bar` (1 to 15; none for
// one warp), so every row has one writer and no warp reads a row another still
// writes. Every warp of the CTA decides from the whole stage's positions, so
// all of them or none zero and meet: nothing when every row is a key, and
// each group of warps passes its barrier as often as the others (with
// unequal counts compute-sanitizer's racecheck reported accesses that CTA
// barriers order as hazards: bench/NOTES.md, "pad").
template <int DV>
__device__ __forceinline__ void paged_zero_missing(u32 v_stage, const int *keypos, int k0, int n, int lane, int part,
                                                   int parts, int bar) {
    bool miss = false;
    for (int r = lane; r < KVC_STAGE; r += 32) miss = miss || keypos[r] == 0x7fffffff;
    if (!__any_sync(0xffffffffu, miss)) return;
    constexpr int PIECES = DV / 8;
    for (int i = part * 32 + lane; i < n * PIECES; i += parts * 32) {
        const int r = k0 + i / PIECES, c = i % PIECES;
        if (keypos[r] == 0x7fffffff) st_shared_zero16(v_stage + (c >> 3) * (KVC_STAGE * 128) + r * 128 + (c & 7) * 16);
    }
    wg_fence_async_smem();
    if (parts > 1) named_bar_sync(bar, 32 * parts);
    else __syncwarp();
}

// The key stream of a paged-cache CTA: the union blocks [u_lo, u_hi) of KV
// head h of sequence b, concatenated, in stages of KVC_STAGE keys through the
// sequence's page-table row (each stage's table reads issued a stage before
// its copies and held in registers meanwhile; the first FSA_KVC_STAGES
// stages' reads together at the start, so a short share's stages are all
// in flight one table latency after it starts),
// STAGES_ stages in flight at ks and vs (shared byte addresses; K rows
// D wide, V rows DV wide). TMA: the stages are tensor-map copies of page boxes
// into 128-byte swizzled tiles (paged_tma_stage; the buffers' mbarriers
// initialized, `phase` the parity bits of their completed phases, kept across
// streams), else cp.async of each row into padded tiles. Use:
//   PagedStream<D, DV, BK, PAGE, TMA> in(sh, p, ks, vs, blocks, masks, u_lo, u_hi, b, h, seq_len, phase, u_run, u_end, b0);
// (TMA only: u_run, u_end: the union blocks of the CTA's run of shares, whose
// first stages' pages the kernel read with paged_fetch_pages; b0: the buffer
// of stage 0, so a stream continues in the buffer after the previous one's last;
// issue_first() copies stage 0 ahead of start(true), e.g. while the previous
// stream's epilogue runs)
//   ... issue copies that should join stage 0's group (cp.async) ...
//   in.start();                        // every thread
//   for (int st = 0; st < in.n_stages; st++) {
//       const int buf = in.acquire(st);  // stage st is in buffer buf
//       ... in.keypos(buf)[c], in.keymask(buf)[c]: key row c's position and token mask ...
//       ... TMA: in.zero_missing(buf, k0, n, lane, part, parts, bar) by the `parts` warps that read V
//           rows k0 .. k0 + n - 1, before they read them ...
//   }
template <int D, int DV, int BK, int PAGE, bool TMA = false, bool EVICT_FIRST = false, int STAGES_ = FSA_KVC_STAGES>
struct PagedStream {
    static_assert(D % 16 == 0 && DV % 16 == 0 && BK % 16 == 0, "head dims and block size are multiples of 16");
    // cp.async: also one stage (FSA_KVC_LAYOUT_ONE_STAGE), copied once every warp is done with the previous one.
    static_assert(TMA ? STAGES_ >= 2 : STAGES_ == FSA_KVC_STAGES || STAGES_ == 1,
                  "a stage in use while the next ones load");
    static_assert(!TMA || fsa_kvc_tma_fits(D, DV, BK, PAGE), "a stage is whole boxes of one page");
    static_assert(!TMA || (KVC_RUN_PAGES <= FSA_KVC_THREADS && KVC_STAGE + KVC_RUN_PAGES / 2 <= FSA_KVC_THREADS),
                  "a thread per page of the first read, the rows and the refills side by side");
    static constexpr int STAGES = STAGES_;
    static constexpr u32 K_STAGE_BYTES = fsa_kvc_stage_bytes(D, TMA), V_STAGE_BYTES = fsa_kvc_stage_bytes(DV, TMA);
    static constexpr u32 K_STRIDE = fsa_kvc_k_stride(D, DV, TMA), V_STRIDE = fsa_kvc_v_stride(D, DV, TMA);

    PagedStreamShared<TMA, STAGES_> &sh;
    const fsa_kvc_params &p;
    u32 ks, vs;
    const int *blocks;
    const u32 *masks;
    const int *table;  // the sequence's page-table row
    int u_lo, h, seq_len;
    int total_keys, n_stages;
    PagedSlot next;  // this thread's row of the next stage's lookups, in flight
    AsyncRing<STAGES_> ring;
    u32 &phase;
    int u_run, u_end, run0;  // TMA: the run's blocks, and the run stage of this stream's stage 0
    int b0;                  // TMA: the buffer of stage 0

    __device__ __forceinline__ PagedStream(PagedStreamShared<TMA, STAGES_> &sh_, const fsa_kvc_params &p_, u32 ks_, u32 vs_,
                                           const int *blocks_, const u32 *masks_, int u_lo_, int u_hi, int b, int h_,
                                           int seq_len_, u32 &phase_, int u_run_, int u_end_, int b0_)
        : sh(sh_), p(p_), ks(ks_), vs(vs_), blocks(blocks_), masks(masks_), u_lo(u_lo_), h(h_), seq_len(seq_len_),
          phase(phase_), u_run(u_run_), u_end(u_end_), b0(TMA ? b0_ : 0) {
        total_keys = (u_hi - u_lo) * BK;
        table = (const int *)p.block_table + (long long)b * p.bt_stride;
        n_stages = (total_keys + KVC_STAGE - 1) / KVC_STAGE;
        run0 = (u_lo - u_run) * (BK / KVC_STAGE);
    }

    // The buffers' mbarriers (TMA), by thread 0 before the kernel's first CTA barrier.
    static __device__ __forceinline__ void init(PagedStreamShared<TMA, STAGES_> &sh) {
        if (!TMA || threadIdx.x != 0) return;
#pragma unroll
        for (int s = 0; s < STAGES; s++) mbar_init(smem_addr(&sh.bar[s]), KVC_STAGE);
        fence_mbar_init();
    }

    // The page lookups of the first STAGES stages (all in flight at once),
    // then the copies of the first STAGES - 1; the last lookup waits in
    // `next` for acquire(0). Copies issued before it join stage 0's group.
    __device__ __forceinline__ void start(bool first_issued = false) {
        if constexpr (TMA) {
            // The pages are in the ring, the buffers are free (the previous
            // stream's last barrier), and the mbarriers publish the rows' positions.
            ring.n = n_stages;
#pragma unroll
            for (ring.issued = first_issued ? 1 : 0; ring.issued < STAGES - 1; ring.issued++)
                if (ring.issued < n_stages) tma_stage(ring.issued, buffer(ring.issued));
        } else {
            PagedSlot first[STAGES > 1 ? STAGES - 1 : 1];  // (one stage: its lookup waits in `next`)
#pragma unroll
            for (int s = 0; s < STAGES - 1; s++) first[s] = s < n_stages ? fetch(s) : PagedSlot{-1, 0};
            if (STAGES - 1 < n_stages) next = fetch(STAGES - 1);
#pragma unroll
            for (int s = 0; s < STAGES - 1; s++)
                if (s < n_stages) store(s, first[s]);
            __syncthreads();
            ring.start(n_stages, loader());
        }
    }
    // The lookups of the stage about to be copied leave their registers
    // before the ring's barrier; the copies follow it.
    __device__ __forceinline__ int acquire(int st) {
        if constexpr (TMA) {
            if (ring.issued < n_stages) {
                __syncthreads();  // every warp is done with the buffer of stage st - 1
                tma_stage(ring.issued, buffer(ring.issued));
            }
            ring.issued++;
            const int buf = buffer(st);
            mbar_wait(smem_addr(&sh.bar[buf]), (phase >> buf) & 1u);
            phase ^= 1u << buf;
            return buf;
        } else {
            if (ring.issued < n_stages) store(ring.issued, next);
            return ring.acquire(st, loader());
        }
    }
    // TMA: stage 0's copies now (every thread), for start(true) later; its
    // buffer must be free (a CTA barrier since every warp last read it).
    __device__ __forceinline__ void issue_first() {
        if constexpr (TMA)
            if (n_stages > 0) tma_stage(0, buffer(0));
    }
    // The buffer of stage st, and of the last stage (the one before b0 when there is none).
    __device__ __forceinline__ int buffer(int st) const { return (int)((unsigned)(b0 + st) % STAGES); }
    __device__ __forceinline__ int last_buffer() const { return buffer(n_stages + STAGES - 1); }
    __device__ __forceinline__ const int *keypos(int buf) const { return sh.keypos[buf]; }
    __device__ __forceinline__ const u32 *keymask(int buf) const { return sh.keymask[buf]; }
    __device__ __forceinline__ void zero_missing(int buf, int k0, int n, int lane, int part, int parts, int bar) const {
        if constexpr (TMA) paged_zero_missing<DV>(vs + buf * V_STRIDE, sh.keypos[buf], k0, n, lane, part, parts, bar);
    }

  private:
    __device__ __forceinline__ PagedSlot fetch(int stage) {
        return paged_fetch_row<BK, PAGE>(p, blocks, u_lo, stage, total_keys, table, seq_len);
    }
    // Stage `stage` into buffer buf from its page in the ring; every half ring
    // of stages past the first, the half ring after the next is read (its
    // slots' stages were all issued) by the threads that write no row.
    __device__ __forceinline__ void tma_stage(int stage, int buf) {
        constexpr int HALF = KVC_RUN_PAGES / 2;
        const int r = run0 + stage;
        if (r >= HALF && r % HALF == 0)
            paged_fetch_pages<BK, PAGE>(sh.pages, p, blocks, u_run, u_end, table, seq_len, r + HALF, HALF, KVC_STAGE);
        paged_tma_stage<D, DV, BK, PAGE, EVICT_FIRST>(p, ks + buf * K_STRIDE, vs + buf * V_STRIDE, smem_addr(&sh.bar[buf]),
                                         sh.keypos[buf], sh.keymask[buf], sh.pages[r % KVC_RUN_PAGES], blocks, masks,
                                         u_lo, stage, h, seq_len);
    }
    // Stage `stage` is copied into buffer stage % STAGES: its lookups go there too.
    __device__ __forceinline__ void store(int stage, PagedSlot s) {
        if (threadIdx.x < KVC_STAGE) sh.rows[stage % STAGES][threadIdx.x] = paged_key_row(p, s, h);
    }
    // Copies of stage `stage` (its lookups were stored before the barrier),
    // then the table reads of the next one unless start() read them.
    __device__ __forceinline__ auto loader() {
        return [this](int stage, int buf) {
            paged_load_stage<D, DV, BK>(p, ks + buf * K_STRIDE, vs + buf * V_STRIDE, sh.keypos[buf],
                                        sh.keymask[buf], sh.rows[buf], blocks, masks, u_lo, stage);
            if (stage + 1 < n_stages && stage + 1 >= STAGES) next = fetch(stage + 1);
        };
    }
};

}  // namespace fsa
