// FSA forward, main kernel on Hopper warpgroup products (sm_90a): the work
// items, row table and partial rows of sel_fwd_main.cu, with the products of
// a 64-row tile issued by one warpgroup. K and V of the block sit once in
// 128-byte swizzled tiles that every warpgroup reads through descriptors, so
// a tile of 64 rows reads them from shared memory once where four mma.sync
// warps read them four times. FSA_FWD_WG_GROUPS warpgroups share the block,
// each with its own ring of swizzled query tiles (a named barrier per
// warpgroup, no CTA barrier per tile). Per tile and step of keys: S = Q K^T
// (wgmma from shared memory), the softmax in registers, O += P V (P from
// registers); the output rows go to the tile's query buffer (stmatrix), then
// to their partial rows.
//
// Two schedules (FSA_FWD_WG, fsa_layout.cuh):
// 2 (default), tile streams: the work items in
//   chunks of FSA_FWD_WG_CHUNK_ITEMS, in order, a CTA's first by its index
//   and the later ones from a work counter (1: round-robin chunks, chunk c
//   to CTA c % gridDim.x); a chunk's items of one (KV head, block) segment
//   form a run with one key block and contiguous list entries, which each
//   warpgroup streams as 64-row tiles whose rows (a RowTable<64>) it builds
//   a tile ahead: no row table and no prologue per item. The next tile's
//   scores are issued between a tile's staging and its stores; query rows
//   are gathered evict-last in L2, partial rows stored evict-first.
// 0, work items: each CTA takes every gridDim.x-th item, builds the item's
//   row table, loads its key block, and each warpgroup takes every
//   FSA_FWD_WG_GROUPS-th tile of it.
// Both compute each row alike: a run starts at an item's start, so the tiles
// are the same, and a row's products and softmax do not depend on the other
// rows of its tile.
#include "sel_fwd_rows.cuh"
#include "fsa_gather.cuh"
#include "fsa_softmax.cuh"
#include "fsa_wgmma.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}};
constexpr int GROUPS = FSA_FWD_WG_GROUPS, THREADS = fsa_fwd_wg_threads(), ROWS = FSA_FWD_WG_ROWS;
constexpr int TILES = FSA_FWD_ITEM_ROWS / ROWS;
constexpr int TOK = fsa_fwd_wg_tokens_per_tile(G);  // tokens per tile
constexpr int CHUNK = fsa_fwd_wg_item_entries(G);   // list entries per work item
constexpr int KT = fsa_fwd_wg_keys(BK);             // keys per softmax step: one K and one V tile
constexpr int K_TILE = fsa_sw128_bytes(KT, D), V_TILE = fsa_sw128_bytes(KT, DV);
constexpr u32 Q_TILE = fsa_fwd_wg_q_tile_bytes(D, DV);
static_assert(TOK >= 1, "GROUP must be at most 64");
constexpr bool STREAM = {{FWD_WG}} >= 1;   // the schedule
constexpr bool DYNAMIC = {{FWD_WG}} >= 2;  // chunks after the first from a counter
constexpr int CHUNK_ITEMS = FSA_FWD_WG_CHUNK_ITEMS;
constexpr int TAIL_ITEMS = FSA_FWD_WG_TAIL_WAVES * FSA_FWD_WG_CHUNK_ITEMS;  // per CTA of the grid
static_assert(!STREAM || KT == BK, "the tile streams take one softmax step per tile");
static_assert(fsa_fwd_wg_ok(D, DV, BK), "head dims multiples of 64 (Dk up to 192, Dv up to 128), blocks of 32 or 64 keys");

typedef RowTable<FSA_FWD_ITEM_ROWS> Rows;
static_assert(sizeof(Rows) == fsa_fwd_smem_k(), "the row table opens the shared-memory layout");

// A run of the tile streams: its key block and list entries (it), where the next one starts.
struct RunDesc {
    WorkItem it;
    int c_next, w_next;
};

// The four warps of warpgroup g meet (barrier 1 + g; 0 is __syncthreads).
__device__ __forceinline__ void group_sync(int g) { named_bar_sync(g + 1, 128); }

// One step of a tile over the KT keys from key0: its issued scores s waited
// for, the causal softmax step, the accumulator rescaled (not on the first
// step), then O += P V from the V tile at vt, waited for.
__device__ __forceinline__ void softmax_pv_step(OnlineSoftmax &sm, float (&o_acc)[DV / 8][4], float (&s)[KT / 8][4],
                                                const LaneTokens &tok, int key0, u32 vt, float scale_log2, int lane,
                                                bool first) {
    wg_wait<0>();
    wg_hold<KT / 8>(s);
    float alpha[2];
    causal_step<KT>(sm, s, scale_log2, lane, tok, key0, alpha);
    if (!first) frag_scale_rows<DV / 8>(o_acc, alpha);
    u32 pa[KT / 16][4];
    wg_pv_waited<DT, KT / 16, DV>(o_acc, pa, s, vt);
}

// A tile's last step done: its rows normalized (lse2: their log-sum-exps)
// and the warp's 16 staged in the tile's query buffer qb, once every warp of
// the group has read it.
__device__ __forceinline__ void stage_tile_rows(OnlineSoftmax &sm, float (&o_acc)[DV / 8][4], float (&lse2)[2], u32 qb,
                                                int grp, int wq, int lane) {
    float inv[2];
    sm.finish(inv, lse2);
    frag_scale_rows<DV / 8>(o_acc, inv);
    group_sync(grp);  // every warp's products have read the query tile
    frag_store_rows_sw128<DT, DV / 8, ROWS>(qb, wq * 16, o_acc, lane);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2) fsa_sel_fwd_main_wg(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const u32 base = (smem_addr(smem_raw) + (FSA_FWD_WG_ALIGN - 1)) & ~(u32)(FSA_FWD_WG_ALIGN - 1);
    Rows &rt = *(Rows *)(smem_raw + (base - smem_addr(smem_raw)));
    const u32 ks = base + fsa_fwd_smem_k(), vs = base + fsa_fwd_wg_smem_v(D, BK);
    const u32 qs = base + fsa_fwd_wg_smem_q(D, DV, BK);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int grp = warp >> 2, gtid = tid & 127, wq = warp & 3;  // warpgroup, thread and warp in it
    const u32 my_q = qs + (u32)(grp * FSA_FWD_STAGES) * Q_TILE;   // this warpgroup's ring
    const int total_work = ((const int *)p.work_offsets)[p.num_kv_heads * p.nb_total];
    const float scale_log2 = (float)p.scale_log2;

    if constexpr (STREAM) {
        // Each warpgroup streams every GROUPS-th 64-row tile of a run's list
        // entries through its query ring, each tile's rows (RowTable<ROWS>,
        // three per warpgroup in the row table's space) built one tile ahead
        // from a list entry loaded two tiles ahead.
        RowTable<ROWS> *const slice = (RowTable<ROWS> *)&rt + grp * 3;
        static_assert(GROUPS * 3 * sizeof(RowTable<ROWS>) <= sizeof(Rows), "tile rows fit in the row table's space");
        // Work in chunks of CHUNK_ITEMS consecutive work items, chunk c to CTA
        // c % gridDim.x: CTAs running at the same time work on neighbouring
        // items (mostly one KV head, whose query rows then stay in L2), and
        // the items' sizes average out over a CTA's chunks (a contiguous
        // share per CTA measured slower: bench/NOTES.md, "mws"). A chunk's
        // items of one segment form a run: one key block, the list entries
        // contiguous.
        //
        // DYNAMIC: a CTA's first chunk is still blockIdx.x; every later one
        // comes from a counter (p.work_next, zeroed with the index's counts),
        // taken by thread 0 when the CTA starts the last run of its chunk,
        // so the CTAs that finish early take more: the static shares differ
        // by a whole chunk (7 or 8 of them per CTA at T 8192) and by the
        // chunks' sizes (bench/NOTES.md, "f8k"). In the last TAIL_ITEMS x
        // gridDim.x items the chunks are single items, so the CTAs end
        // within about an item of each other. The counter still hands out
        // the items in order, so the CTAs at work hold neighbouring items.
        //
        // The run that starts at item w of the chunk ending at w_end (for
        // the static shares, chunk c), and where the next one starts.
        auto describe = [&](int c, int w, int w_end_chunk, RunDesc &d) {
            d.it = work_item<BK, CHUNK>(p, w);
            const int seg = ((const int *)p.work_seg)[w];
            const int w_run_end = min(((const int *)p.work_offsets)[seg + 1], w_end_chunk);
            const int *seg_list_end = (const int *)p.list + ((const int *)p.offsets)[seg + 1];
            d.it.n_ent = min((int)(seg_list_end - d.it.ent), (w_run_end - w) * CHUNK);
            d.c_next = w_run_end < w_end_chunk ? c : c + (int)gridDim.x;
            d.w_next = w_run_end < w_end_chunk || DYNAMIC ? w_run_end : d.c_next * CHUNK_ITEMS;
        };
        __shared__ int next_chunk[2];  // DYNAMIC: the CTA's next chunk [first item, end)
        static_assert(sizeof(next_chunk) == FSA_FWD_WG_SMEM_STATIC, "the plan counts this static memory");
        int c = blockIdx.x, w = c * CHUNK_ITEMS, w_end = min(total_work, w + CHUNK_ITEMS);
        int turn = 0;  // the warpgroup that takes a run's first tile: the runs' tiles alternate over the groups
        while (w < total_work) {
            RunDesc d;
            describe(c, w, w_end, d);
            __syncthreads();  // the previous run is done with the key block, the rings and the tile rows
            const WorkItem &it = d.it;
            const int n_run = it.n_ent;
            // DYNAMIC, the chunk's last run: thread 0 takes the next chunk
            // now and publishes it after the barrier below (the atomic's
            // latency hides behind the key block's copies).
            const bool take = DYNAMIC && d.w_next >= w_end;
            int taken = 0, take_n = CHUNK_ITEMS;
            if (take && tid == 0) {
                take_n = w_end + TAIL_ITEMS * (int)gridDim.x < total_work ? CHUNK_ITEMS : 1;
                taken = (int)gridDim.x * CHUNK_ITEMS + atomicAdd((int *)p.work_next, take_n);
            }
            c = d.c_next;
            w = d.w_next;
            if (!DYNAMIC) w_end = min(total_work, (c + 1) * CHUNK_ITEMS);
            const u16 *kg = view_row<const u16>(p.k, 0, it.h), *vg = view_row<const u16>(p.v, 0, it.h);
            auto key = [&](int r) { return (long long)it.kb0 + (r < it.nk ? r : 0); };
            load_tile_sw128_async<KT, D, THREADS>(ks, [&](int r) { return RowSrc{kg + key(r) * p.k.token_stride, r < it.nk}; });
            load_tile_sw128_async<KT, DV, THREADS>(vs, [&](int r) { return RowSrc{vg + key(r) * p.v.token_stride, r < it.nk}; });
            cp_async_commit();

            const int ntiles = (n_run + TOK - 1) / TOK;
            const int first = (grp + GROUPS - turn) % GROUPS;  // this group's first tile of the run
            const int mine = ntiles > first ? (ntiles - first + GROUPS - 1) / GROUPS : 0;
            turn = (turn + ntiles) % GROUPS;
            auto first_entry = [&](int i) { return (first + i * GROUPS) * TOK; };  // of this group's tile i
            // Query rows are read ~16 times each (once per slot naming them):
            // kept in L2 longer than the partial rows, which go out once.
            auto load = [&](int i) {
                load_rows_sw128_async_hint<ROWS, D, 128>(my_q + (u32)(i % FSA_FWD_STAGES) * Q_TILE, slice[i % 3].q_row,
                                                         gtid, l2_evict_last());
            };
            int v_next = 0;
            if (mine > 0) build_tile_rows<G, ROWS>(slice[0], p, tile_row_entry<G, ROWS>(it.ent, n_run, first_entry(0), gtid),
                                                   n_run, first_entry(0), it.h, gtid);
            if (mine > 1 && gtid < ROWS) v_next = tile_row_entry<G, ROWS>(it.ent, n_run, first_entry(1), gtid);
            group_sync(grp);  // tile 0's rows
            if (mine > 0) load(0);
            cp_async_commit();
            if (take && tid == 0) {
                next_chunk[0] = taken;
                next_chunk[1] = min(total_work, taken + take_n);
            }
            cp_async_wait<1>();  // this thread's K and V copies
            wg_fence_async_smem();
            __syncthreads();  // everyone's (and the next chunk)
            if (take) {  // read before the next run's first barrier, written after it
                w = next_chunk[0];
                w_end = next_chunk[1];
            }

            // Tile i + 1's rows and query copies, behind a group barrier that
            // also frees the buffer of tile i - 1 (its stores are done).
            auto next_tile = [&](int i) {
                if (i + 1 < mine) {
                    build_tile_rows<G, ROWS>(slice[(i + 1) % 3], p, v_next, n_run, first_entry(i + 1), it.h, gtid);
                    if (i + 2 < mine && gtid < ROWS) v_next = tile_row_entry<G, ROWS>(it.ent, n_run, first_entry(i + 2), gtid);
                }
                group_sync(grp);
                if (i + 1 < mine) load(i + 1);
                cp_async_commit();
            };
            auto scores = [&](float(&s)[KT / 8][4], int i) {  // S = Q K^T of tile i, issued
                wg_mma_abt<DT, D, KT, ROWS, false>(s, my_q + (u32)(i % FSA_FWD_STAGES) * Q_TILE, ks);
                wg_commit();
            };
            // Tile i from its issued scores to its partial rows; with next
            // (a constant after inlining, so that no product sits on a path
            // ptxas sees as divergent), tile i + 1's scores go out between
            // the staging of tile i's output rows and their stores.
            auto finish = [&](float(&s)[KT / 8][4], int i, bool next) {
                const RowTable<ROWS> &tr = slice[i % 3];
                const u32 qb = my_q + (u32)(i % FSA_FWD_STAGES) * Q_TILE;
                const LaneTokens tok = lane_tokens(tr, wq * 16, lane);
                OnlineSoftmax sm;
                sm.init();
                float o_acc[DV / 8][4];
                frag_zero<DV / 8>(o_acc);
                softmax_pv_step(sm, o_acc, s, tok, it.kb0, vs, scale_log2, lane, true);
                float lse2[2];
                stage_tile_rows(sm, o_acc, lse2, qb, grp, wq, lane);
                if (next) {  // tile i + 1's rows have landed (this thread's copies, then everyone's)
                    cp_async_wait<0>();
                    wg_fence_async_smem();
                    group_sync(grp);
                    scores(s, i + 1);
                }
                const unsigned char *qb_ptr = smem_raw + (qb - smem_addr(smem_raw));
                store_partial_rows<DV, true, true>(p, tr, wq * 16, lse2, lane,
                                                 [&](int r, int c) { return qb_ptr + sw128_offset(wq * 16 + r, c, ROWS); });
            };
            float s[KT / 8][4];
            if (mine > 0) {
                next_tile(0);
                cp_async_wait<1>();  // tile 0
                wg_fence_async_smem();
                group_sync(grp);
                scores(s, 0);
                int i = 0;
                for (; i + 1 < mine; i++) {
                    if (i > 0) next_tile(i);
                    finish(s, i, true);
                }
                if (i > 0) next_tile(i);
                finish(s, i, false);
            }
            // A group with a tile fewer than the run's first group passes its
            // barrier as often anyway (3 per tile, 1 per run). While the
            // groups' counts differed, compute-sanitizer's racecheck reported
            // next_chunk's hand-over, which the CTA barrier orders, as a
            // hazard; with equal counts it reports none (bench/NOTES.md,
            // "pad"). Only the group's own warps wait, on nothing.
            for (int k = mine; k < (ntiles + GROUPS - 1) / GROUPS; k++) {
                group_sync(grp);
                group_sync(grp);
                group_sync(grp);
            }
        }
        return;
    }

    for (int w = blockIdx.x; w < total_work; w += gridDim.x) {
        const WorkItem it = work_item<BK, CHUNK>(p, w);
        __syncthreads();  // the previous work item is done with shared memory
        build_row_table<G, ROWS, THREADS>(rt, p, it.ent, it.n_ent, it.h);

        // K and V of the block, KT keys per tile, zero past the end of the sequence.
        const u16 *kg = view_row<const u16>(p.k, 0, it.h), *vg = view_row<const u16>(p.v, 0, it.h);
#pragma unroll 1
        for (int kt = 0; kt < BK; kt += KT) {
            auto key = [&](int r) { return (long long)it.kb0 + (kt + r < it.nk ? kt + r : 0); };
            load_tile_sw128_async<KT, D, THREADS>(ks + (u32)(kt / KT) * K_TILE, [&](int r) {
                return RowSrc{kg + key(r) * p.k.token_stride, kt + r < it.nk};
            });
            load_tile_sw128_async<KT, DV, THREADS>(vs + (u32)(kt / KT) * V_TILE, [&](int r) {
                return RowSrc{vg + key(r) * p.v.token_stride, kt + r < it.nk};
            });
        }
        cp_async_commit();
        __syncthreads();  // the row table is complete

        // This warpgroup's tiles: grp, grp + GROUPS, ...
        const int ntiles = (it.n_ent + TOK - 1) / TOK;
        const int mine = ntiles > grp ? (ntiles - grp + GROUPS - 1) / GROUPS : 0;
        auto load = [&](int i, int buf) {
            load_rows_sw128_async<ROWS, D, 128>(my_q + (u32)buf * Q_TILE, rt.q_row + (grp + i * GROUPS) * ROWS, gtid);
        };
        int issued = 0;
        if (mine > 0) load(issued++, 0);
        cp_async_commit();
        cp_async_wait<1>();    // this thread's K and V copies
        wg_fence_async_smem();
        __syncthreads();       // everyone's: the products read them through the async proxy

        for (int i = 0; i < mine; i++) {
            // The ring: the next tile into the buffer of tile i - 1, then wait for tile i.
            if (issued < mine) {
                group_sync(grp);  // every warp of the group is done with that buffer
                load(issued, issued % FSA_FWD_STAGES);
                issued++;
            }
            cp_async_commit();
            cp_async_wait<FSA_FWD_STAGES - 1>();
            wg_fence_async_smem();
            group_sync(grp);
            const int tile = grp + i * GROUPS;
            const u32 qb = my_q + (u32)(i % FSA_FWD_STAGES) * Q_TILE;
            const LaneTokens tok = lane_tokens(rt, tile * ROWS + wq * 16, lane);  // warp wq holds rows 16 wq ..
            OnlineSoftmax sm;
            sm.init();
            float o_acc[DV / 8][4];
            frag_zero<DV / 8>(o_acc);
#pragma unroll 1
            for (int kt = 0; kt < BK; kt += KT) {
                float s[KT / 8][4];
                frag_zero<KT / 8>(s);
                wg_mma_abt<DT, D, KT, ROWS>(s, qb, ks + (u32)(kt / KT) * K_TILE);
                wg_commit();
                softmax_pv_step(sm, o_acc, s, tok, it.kb0 + kt, vs + (u32)(kt / KT) * V_TILE, scale_log2, lane, kt == 0);
            }

            // Normalize, stage the warp's 16 rows in the tile's query buffer
            // (the products are done with it), then write 16-byte pieces of
            // whole rows.
            float lse2[2];
            stage_tile_rows(sm, o_acc, lse2, qb, grp, wq, lane);
            const unsigned char *qb_ptr = smem_raw + (qb - smem_addr(smem_raw));
            store_partial_rows<DV>(p, rt, tile * ROWS + wq * 16, lse2, lane,
                                   [&](int r, int c) { return qb_ptr + sw128_offset(wq * 16 + r, c, ROWS); });
        }
        // As in the tile streams: a group with fewer tiles than the item's
        // first group passes its barrier as often anyway (3 per tile less 1:
        // the ring's, the tile's wait, stage_tile_rows'), so that racecheck
        // finds the next item's row table, which the CTA barrier orders, no
        // hazard (bench/NOTES.md, "pad").
        const int most = (ntiles + GROUPS - 1) / GROUPS;
        for (int k = mine > 0 ? 3 * mine - 1 : 0; k < (most > 0 ? 3 * most - 1 : 0); k++) group_sync(grp);
    }
}
