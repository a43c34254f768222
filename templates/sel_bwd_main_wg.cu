// FSA backward, main kernel on Hopper warpgroup products (sm_90a): the work
// items, row tables, dq rows and dK/dV outputs of sel_bwd_main.cu, with the
// block's 64 keys as the rows of a warpgroup (warp w of it: keys 16w .. 16w +
// 15) and query tiles of 64 rows (tokens x heads-in-group). K and V sit in
// 128-byte swizzled tiles for the whole item; the gathered Q and dO rows of
// each tile come through a ring of swizzled stages, and each tile's row
// table (token, pair, lse, delta per row) is loaded two tiles ahead, while
// the products run, so the item's tiles stream without a pause. Per tile:
//   S^T = K Q^T and dP^T = V dO^T (both operands from shared memory),
//   P^T = exp(S^T - lse) in registers, dV += P^T dO (issued, then
//   dS^T = P^T (dP^T - delta) formed while it runs), dK += dS^T Q,
//   dS^T to shared memory, and dQ = dS K with dS^T read transposed;
// dQ goes to the tile's Q stage (free once dK is done) and out as whole
// 16-byte pieces of its pair rows. A warpgroup reads each operand tile once
// for its four warps, where mma.sync warps each read the Q and dO tiles.
// Up to Dk 128 one warpgroup does all of it, two CTAs per SM: one's products
// run while the other does its elementwise steps. Above (fsa_bwd_wg_split),
// dK's accumulators alone fill half a thread's registers, so two warpgroups
// share the stages and split the outputs: the first accumulates dK, the
// second dV and writes dq; each forms S^T, P^T and dS^T itself (two of the
// five products twice) rather than trade them through shared memory and
// wait for each other. Results are deterministic (one owner per output,
// sums in order).
#include "sel_bwd_rows.cuh"
#include "fsa_gather.cuh"
#include "fsa_wgmma_t.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}};
constexpr int VARIANT = {{SEL_BWD_WG}};  // how far ahead the rows' global loads run (below)
constexpr int M = FSA_BWD_WG_ROWS, KS = FSA_BWD_WG_KEYS, STAGES = FSA_BWD_WG_STAGES;
constexpr int SLOTS = fsa_bwd_wg_row_slots();             // row tables: the tile in use, the next, the one after
constexpr int THREADS = fsa_bwd_wg_threads(D, DV), CTAS_PER_SM = fsa_bwd_wg_ctas_per_sm(D, DV);
constexpr bool SPLIT = fsa_bwd_wg_split(D, DV);          // dK in warpgroup 0, dV and dq in warpgroup 1
constexpr int TOK = G <= M ? M / G : 1;                  // tokens per tile
constexpr int TPT = G <= M ? 1 : (G + M - 1) / M;        // tiles per token (groups over 64 heads)
constexpr u32 Q_TILE = fsa_sw128_bytes(M, D), DO_TILE = fsa_sw128_bytes(M, DV);
static_assert(fsa_bwd_wg_ok(D, DV, BK), "blocks of 64 keys, head dims multiples of 64 (Dk up to 192, Dv up to 128)");
static_assert(VARIANT == 1 || VARIANT == 2, "variants 1 and 2");

// The CTA barrier: split, the two warpgroups reach it from their own code.
__device__ __forceinline__ void cta_sync() {
    if constexpr (SPLIT) cta_bar_sync_unaligned();
    else __syncthreads();
}

// The warp's 16 dq rows (rows 16 warp .. of tile `tile`, whose table is tr,
// staged in the swizzled tile at `stage`) out to their pair rows as whole
// 16-byte pieces.
__device__ __forceinline__ void store_dq_rows(const fsa_sel_params &p, const RowInfo *tr, const unsigned char *stage,
                                              int tile, int warp, int lane) {
    constexpr int PIECES = D / 8;
    u16 *dq_part = (u16 *)p.dq_part;
#pragma unroll 4
    for (int k = lane; k < 16 * PIECES; k += 32) {
        const int rr = k / PIECES, pc = k - rr * PIECES;
        const int r = warp * 16 + rr;
        const RowInfo ri = tr[r];
        if (ri.token < 0) continue;
        int e, g;
        bwd_tile_row<M, G>(tile, r, e, g);
        *(uint4 *)(dq_part + (row_pair(ri.pair) * G + g) * D + pc * 8) = *(const uint4 *)(stage + sw128_offset(r, pc * 8, M));
    }
}

// P^T in place of the raw scores S^T of this warp's keys (key_lo, key_lo +
// 8) against the tile's rows tr: the forward's probabilities (times the
// rows' gates in a gated backward), 0 for padding rows and for keys after
// the row's token.
__device__ __forceinline__ void tile_probs(float st[M / 8][4], const RowInfo *tr, int key_lo, float scale_log2,
                                           int lane) {
#pragma unroll
    for (int j = 0; j < M / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const RowInfo ri = tr[frag_col(lane, j, e)];
            const int key = key_lo + (e >> 1) * 8;  // packed token indices, as RowInfo's
            st[j][e] = key <= ri.token ? row_signed(fast_exp2(st[j][e] * scale_log2 - ri.lse2), ri.pair)
                                       : 0.f;  // padding: token -1
        }
}

// dS^T = P^T (dP^T - delta) in place of dP^T.
__device__ __forceinline__ void tile_ds(float dpt[M / 8][4], const float pt[M / 8][4], const RowInfo *tr, int lane) {
#pragma unroll
    for (int j = 0; j < M / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dpt[j][e] = pt[j][e] * (dpt[j][e] - tr[frag_col(lane, j, e)].delta);
}

// dQ columns 64c .. 64c + 63 of the tile: dS from the dS^T tile, K from
// its tile; issued and committed.
__device__ __forceinline__ void dq_product(float dq[8][4], u32 dss, u32 ks, int c) {
    wg_mma_atb<DT, KS, 64>(*reinterpret_cast<float(*)[8][4]>(dq), dss, ks + (u32)(c * KS * 128));
    wg_commit();
}

// Those columns as DT times `scale` into this warp's 16 rows of the
// swizzled tile at `stage` (M rows of D columns or more).
__device__ __forceinline__ void dq_stage(float dq[8][4], u32 stage, int c, float scale, int warp, int lane) {
    wg_hold<8>(dq);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dq[j][e] *= scale;
    frag_store_rows_sw128<DT, 8, M>(stage + (u32)(c * M * 128), warp * 16, dq, lane);
}

// The work items of one warpgroup role: DK accumulates dK, DVQ accumulates dV
// and writes dq (one warpgroup: both). Every thread of the CTA loads stages
// and tables and passes the same CTA barriers in the same order.
template <bool DK, bool DVQ>
__device__ __forceinline__ void run_items(const fsa_sel_params &p, u32 base, unsigned char *gen, int &next_work) {
    const u32 ks = base, vs = base + fsa_bwd_wg_smem_v(D);
    const u32 qs = base + fsa_bwd_wg_smem_q(D, DV), dos = base + fsa_bwd_wg_smem_do(D, DV);
    const u32 dss = base + fsa_bwd_wg_smem_ds(D, DV);
    RowInfo *row = (RowInfo *)(gen + fsa_bwd_wg_smem_rows(D, DV));
    const u16 **q_row = (const u16 **)(row + SLOTS * M), **do_row = q_row + SLOTS * M;  // each row's Q and dO

    const int tid = threadIdx.x, lane = tid & 31, warp = SPLIT ? (tid >> 5) & 3 : tid >> 5;  // of the warpgroup
    const int total_work = ((const int *)p.work_offsets)[p.num_kv_heads * p.nb_total];
    const float scale = (float)(p.scale_log2 * FSA_LN2);
    const float scale_log2 = (float)p.scale_log2;
    const int key_lo = warp * 16 + (lane >> 2);  // this lane's keys: key_lo and key_lo + 8

    // Work items in order, each CTA taking the next one when it is done.
    for (int w = blockIdx.x; w < total_work;) {
        const BwdItem it = bwd_item(p, w);
        const int *ent = (const int *)p.list_sorted + it.item0;
        const int first = __ldg(ent);
        long long kb0;
        int nk;
        bwd_item_keys<BK, KS>(p, it, first, 0, kb0, nk);
        // Padding rows read the item's first row, a pair of this block: whatever its q and dout hold
        // reaches this block's dK and dV through that row anyway, and P = 0 makes the padding's
        // products exact zeros otherwise. (A fixed row, such as token 0's, brought the NaN of a token
        // that may select nothing into every block; rows of zeros in the workspace cost 1-9%.)
        const long long pad_token = p.t0 + fsa_entry_token(first);
        const u16 *pad_q = view_row<const u16>(p.q, pad_token, it.h * G),
                  *pad_do = view_row<const u16>(p.dout, pad_token, it.h * G);
        float dk[DK ? D / 8 : 1][4], dv[DVQ ? DV / 8 : 1][4];  // the role's accumulators
        if constexpr (DK) frag_zero<D / 8>(dk);
        if constexpr (DVQ) frag_zero<DV / 8>(dv);

        // The item's tiles stream through the stages; tile t's rows are in table t % SLOTS.
        const int ntiles = G <= M ? (it.item_n + TOK - 1) / TOK : it.item_n * TPT;
        auto entry_of = [&](int tile, int r, int &g) {  // list entry of row r of a tile, -1: padding
            int e;
            return bwd_tile_row<M, G>(tile, r, e, g) && e < it.item_n ? e : -1;
        };
        auto table = [&](int tile) { return row + (tile % SLOTS) * M; };
        // Entry i of the tables: the row and its Q and dO addresses (padding rows: the item's
        // first row, read and then masked).
        auto put_row = [&](int i, const RowInfo &ri, int g) {
            row[i] = ri;
            const bool real = ri.token >= 0;
            q_row[i] = real ? view_row<const u16>(p.q, ri.token, it.h * G + g) : pad_q;
            do_row[i] = real ? view_row<const u16>(p.dout, ri.token, it.h * G + g) : pad_do;
        };
        cta_sync();  // the previous item is done with shared memory
        // K and V of the block (zero past the sequence: masked), with the first tile.
        const u16 *kg = view_row<const u16>(p.k, 0, it.h), *vg = view_row<const u16>(p.v, 0, it.h);
        load_tile_sw128_async<KS, D, THREADS>(ks, [&](int r) {
            return RowSrc{kg + (r < nk ? kb0 + r : 0) * p.k.token_stride, r < nk};
        });
        load_tile_sw128_async<KS, DV, THREADS>(vs, [&](int r) {
            return RowSrc{vg + (r < nk ? kb0 + r : 0) * p.v.token_stride, r < nk};
        });
        for (int i = tid; i < (SLOTS - 1) * M; i += THREADS) {  // the rows of tiles 0 and 1
            int g;
            const int e = entry_of(i / M, i % M, g);
            put_row(i, bwd_row_info<G>(p, e >= 0 ? ent[e] : 0, it.h, g, e >= 0), g);
        }
        cta_sync();  // the first tables are complete
        auto load_q = [&](int tile, int buf) {
            load_rows_sw128_async<M, D, THREADS>(qs + (u32)buf * Q_TILE, q_row + (tile % SLOTS) * M, tid);
        };
        auto load_do = [&](int tile, int buf) {
            load_rows_sw128_async<M, DV, THREADS>(dos + (u32)buf * DO_TILE, do_row + (tile % SLOTS) * M, tid);
        };
        // The rows of later tiles (one per thread of the first M). Variant 1: tile t + 2's
        // list entry is loaded when tile t starts, its lse and delta while tile t's
        // products run, and it is written at the end of tile t. Variant 2: tile t + 3's
        // entry is loaded when tile t starts; at the end of tile t, tile t + 2's token,
        // pair and addresses go into its table (its entry came during tile t - 1) and
        // its lse and delta loads are issued, and tile t + 1's (issued at the end of
        // tile t - 1) go into its table: each global load has a whole tile to arrive.
        int ahead = -1;              // variant 2: the entry of this thread's row of tile t + 2
        RowStats pending = {0.f, 0.f, 1.f};  // variant 2: lse, delta and gate of its row of tile t + 1
        if (VARIANT == 2 && tid < M) {
            int g;
            const int e = entry_of(2, tid, g);
            ahead = e >= 0 ? ent[e] : -1;
        }
        AsyncRing<STAGES> ring;
        auto load = [&](int tile, int buf) {
            load_q(tile, buf);
            load_do(tile, buf);
        };
        ring.start(ntiles, load);
        for (int tile = 0; tile < ntiles; tile++) {
            // Issues tile + 1 (its rows' addresses were written before this barrier).
            const int buf = ring.acquire_then_refill(tile, load, [] { wg_fence_async_smem(); }, [] { cta_sync(); });
            const u32 qb = qs + (u32)buf * Q_TILE, dob = dos + (u32)buf * DO_TILE;
            const RowInfo *tr = table(tile);
            int next_g = 0;
            const int next_e = tid < M ? entry_of(tile + (VARIANT == 1 ? 2 : 3), tid, next_g) : -1;
            const int next_v = next_e >= 0 ? ent[next_e] : -1;
            float st[M / 8][4], dpt[M / 8][4];
            wg_scores_t<DT, D, DV, M>(st, dpt, ks, vs, qb, dob);  // S^T = K Q^T (waited for), dP^T = V dO^T
            tile_probs(st, tr, (int)kb0 + key_lo, scale_log2, lane);
            if constexpr (DVQ) {
                u32 pa[M / 16][4];
                wg_p_to_a<DT, M / 16>(pa, st);
                wg_mma_pv<DT, M / 16, DV, M>(dv, pa, dob);  // dV += P^T dO
                wg_commit();
            }
            RowInfo next;
            if constexpr (VARIANT == 1) next = bwd_row_info<G>(p, next_v, it.h, next_g, next_e >= 0);
            wg_wait<DVQ ? 1 : 0>();  // dP^T; dV's product may still run
            wg_hold<M / 8>(dpt);
            tile_ds(dpt, st, tr, lane);
            if constexpr (DK) {
                u32 da[M / 16][4];
                wg_p_to_a<DT, M / 16>(da, dpt);
                wg_mma_pv<DT, M / 16, D, M>(dk, da, qb);  // dK += dS^T Q
                wg_commit();
            }
            if constexpr (DVQ) {
                // dS^T to shared memory, read back transposed for dQ = dS K.
                frag_store_rows_sw128<DT, M / 8, KS>(dss, warp * 16, dpt, lane);
                wg_fence_async_smem();
                if constexpr (SPLIT) named_bar_sync(1, 128);  // the dq warpgroup's own barrier
                else cta_sync();
                // dQ one 64-column panel at a time (fewer live registers), staged in the Q stage.
#pragma unroll
                for (int c = 0; c < D / 64; c++) {
                    float dq[8][4];
                    dq_product(dq, dss, ks, c);
                    wg_wait<0>();
                    if (c == 0) {
                        wg_hold<DV / 8>(dv);
                        if constexpr (DK) wg_hold<D / 8>(dk);
                        cta_sync();  // every warp's products are done with the Q stage: it stages dq
                    }
                    dq_stage(dq, qb, c, scale, warp, lane);
                }
                __syncwarp();
                store_dq_rows(p, tr, gen + (qb - base), tile, warp, lane);
            } else {
                // A barrier of its own for the dq warpgroup's one above: both pass as many
                // (compute-sanitizer's racecheck pairs barriers by count and would report the Q
                // stage's hand-over otherwise).
                named_bar_sync(2, 128);
                wg_wait<0>();
                wg_hold<D / 8>(dk);
                cta_sync();  // dK's product is done with the Q stage (the dq warpgroup's barrier)
            }
            // Table (tile + 2) % SLOTS held tile - 1's rows, which nothing reads after the last barrier.
            if (tid < M) {
                const int at2 = ((tile + 2) % SLOTS) * M + tid;
                if constexpr (VARIANT == 1) {
                    put_row(at2, next, next_g);
                } else {
                    if (tile > 0)  // tile 1's rows came whole before the first tile
                        set_row_stats(row[((tile + 1) % SLOTS) * M + tid], pending);
                    int g2;
                    entry_of(tile + 2, tid, g2);
                    put_row(at2, bwd_row_head<G>(p, ahead, it.h, g2), g2);
                    pending = bwd_row_stats<G>(p, ahead, it.h, g2);
                    ahead = next_v;
                }
            }
        }

        store_item_dkv<DT, D, DV, BK, KS, D, DV, DK, DVQ>(p, it, kb0, nk, 0, key_lo, lane, scale, 0, 0, dk, dv);
        if (tid == 0) next_work = (int)gridDim.x + atomicAdd((int *)p.work_next, 1);
        cta_sync();
        w = next_work;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, CTAS_PER_SM) fsa_sel_bwd_main_wg(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const u32 raw = smem_addr(smem_raw), base = (raw + (FSA_BWD_WG_ALIGN - 1)) & ~(u32)(FSA_BWD_WG_ALIGN - 1);
    unsigned char *gen = smem_raw + (base - raw);
    __shared__ int next_work;
    if constexpr (!SPLIT) run_items<true, true>(p, base, gen, next_work);
    else if (threadIdx.x < 128) run_items<true, false>(p, base, gen, next_work);
    else run_items<false, true>(p, base, gen, next_work);
}
