// FSA backward, main kernel: a CTA takes one work item = one (KV head, key
// block, run of list entries of that block, in token order; the host sizes
// the runs, longer for long lists: fsa_bwd_list_item_entries) and one
// KEYS-key slice of the block, in rounds of CHUNK entries.
// K and V of the slice stay in shared memory; warp w owns keys 16w..16w+15
// and accumulates their dK and dV in registers over every tile of (token,
// head-in-group) rows:
//   S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - delta),
//   dV += P^T dO, dK += dS^T Q, and (fsa_sel_bwd_main only) dQ = dS K.
// dQ goes out per (token, slot, slice) and is summed per token by the
// reduction; fsa_sel_bwd_main_kv leaves dq to the NSA-order kernel.
// A block whose list fits one work item adds its dK/dV straight into the fp32
// accumulator; longer lists leave one partial per work item, summed in item
// order afterwards, so the result does not depend on scheduling.
// Q, K, dq and dK are D wide, V, dO and dV DV wide. Heads too wide for one
// pass (D + DV over FSA_BWD_ONE_PASS_COLS) run twice, each launch
// accumulating half of the dK and half of the dV columns.
#include "sel_bwd_rows.cuh"
#include "fsa_mma.cuh"
#include "fsa_pipeline.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}}, KS = {{KEYS}};
constexpr int SLICES = BK / KS;                    // CTAs per (work item): key slices of the block
constexpr int WARPS = KS / 16, THREADS = fsa_bwd_threads(KS);  // a warp owns 16 keys
constexpr int M = FSA_BWD_ROWS;                    // query rows per tile
constexpr int TOK = fsa_bwd_tokens_per_tile(G);    // tokens per tile
constexpr int TPT = fsa_bwd_tiles_per_token(G);    // tiles per token (groups over 32 heads)
constexpr int TILES = FSA_BWD_TILES;               // tiles per round
constexpr int CHUNK = fsa_bwd_round_entries(G);    // list entries per round of one row table
constexpr int DPK = D / fsa_bwd_d_parts(D, DV);   // dK columns accumulated per launch
constexpr int DPV = DV / fsa_bwd_d_parts(D, DV);  // dV columns accumulated per launch
// Rows per product: the tile's M, or 16 at a time next to more than 128
// accumulators per thread (fewer live scores, no spill; the same order of sums).
constexpr int MSTEP = DPK + DPV > 256 ? 16 : M;
constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
constexpr int LDS = fsa_bwd_ds_pitch();            // pitch of dS^T
constexpr u32 Q_TILE_BYTES = fsa_tile_bytes(M, D), DO_TILE_BYTES = fsa_tile_bytes(M, DV);
// LAYOUT: FSA_SEL_LAYOUT_BWD_ONE_STAGE or 0 (fsa_sel_layout_fit): one Q and one dO tile in flight
// instead of FSA_BWD_STAGES on targets whose shared memory holds no more. Enumerators: the default
// module keeps its globals.
enum : int { LAYOUT = {{SEL_LAYOUT=0}}, STAGES = fsa_bwd_stages(LAYOUT) };
static_assert(KS >= 16 && KS <= 128 && BK % KS == 0, "slices of 16 to 128 keys");
static_assert(DPK % 16 == 0 && DPV % 16 == 0, "each launch's dK and dV columns are multiples of 16");

__device__ __forceinline__ bool tile_row(int tile, int r, int &e, int &g) { return bwd_tile_row<M, G>(tile, r, e, g); }

struct Tables {
    RowInfo row[TILES * M];
};
static_assert(sizeof(Tables) == fsa_bwd_smem_k(), "the row tables open the shared-memory layout");

// Row i's entry: one 16-byte load; field by field (no more registers live
// than before) for heads over 256 columns in all and one-warp CTAs, where a
// few more registers would spill.
constexpr bool ROW_VEC = D + DV <= 256 && WARPS > 1;
__device__ __forceinline__ RowInfo row_info(const Tables &tb, int i) {
    if (ROW_VEC) return tb.row[i];
    const volatile RowInfo &r = tb.row[i];
    return RowInfo{r.token, r.pair & ROW_GATE_SIGN, r.lse2, r.delta};  // the gate's sign, for row_signed
}

__device__ __forceinline__ void build_tables(Tables &tb, const fsa_sel_params &p, const int *ent, int n_ent, int h) {
    build_bwd_rows<M, G, TILES * M, THREADS>(tb.row, p, ent, n_ent, h);
}

// Query and dO rows of one tile into the tile buffers at qdst and ddst.
__device__ __forceinline__ void load_rows(const fsa_sel_params &p, u32 qdst, u32 ddst, const Tables &tb, int tile,
                                          int h) {
    const u16 *q = (const u16 *)p.q.ptr, *dout = (const u16 *)p.dout.ptr;
    load_tiles_async<M, D, LD, DV, LDV, THREADS>(qdst, ddst, [&](int r) {
        const int t = tb.row[tile * M + r].token;
        int e, g;
        tile_row(tile, r, e, g);
        const int qh = h * G + g;
        const bool ok = t >= 0;
        return RowPair{ok ? view_row<const u16>(p.q, t, qh) : q, ok ? view_row<const u16>(p.dout, t, qh) : dout, ok};
    });
}

// dQ = dS K for one tile: 16 rows x DQ_COLS columns per unit, the dS^T
// fragment loaded once per 16 keys and used for all the unit's columns (at
// most 32 next to more than 128 dK/dV accumulators per thread). A unit's rows
// go out through `stage` (this warp's 16 rows of DQ_PITCH halves in shared
// memory) as whole 16-byte pieces: stored straight from the fragments, every
// 4-byte store touches eight rows, and the stores' L1 traffic rivals the
// tile's ldmatrix traffic. Without a stage (stage == nullptr) they go
// straight out.
constexpr int DQ_COLS = D % 64 == 0 && MSTEP == M ? 64 : D % 32 == 0 ? 32 : 16;
constexpr int DQ_PITCH = DQ_COLS + 8;                            // halves: conflict-free 4- and 16-byte accesses
constexpr int DQ_UNITS = (M / 16) * (D / DQ_COLS);
constexpr int DQ_STAGE_BYTES = 16 * DQ_PITCH * 2;
constexpr int DQ_SLOTS = ((DQ_UNITS < WARPS ? DQ_UNITS : WARPS) + 1) / 2;  // per buffer: even warps in Q, odd in dO
// The tile's Q and dO buffers are free once dS^T is complete (the products that read them are done).
// The stage's addressing costs a few registers: heads over 256 columns in all (at the register
// limit) and one-warp CTAs keep the direct stores, which do not spill there.
constexpr bool DQ_STAGED = DQ_SLOTS * DQ_STAGE_BYTES <= (Q_TILE_BYTES < DO_TILE_BYTES ? Q_TILE_BYTES : DO_TILE_BYTES) &&
                           D + DV <= 256 && WARPS > 1;

__device__ __forceinline__ void dq_tile(const fsa_sel_params &p, const Tables &tb, u32 dst_addr, u32 ks_addr, u16 *stage,
                                        int tile, int slice, float scale, int lane, int warp) {
    constexpr int NT = DQ_COLS / 8;
    constexpr int PIECES = DQ_COLS / 8;  // 16-byte pieces of a unit's row
    u16 *dq_part = (u16 *)p.dq_part;
    for (int u = warp; u < DQ_UNITS; u += WARPS) {
        const int rb = u / (D / DQ_COLS), c0 = (u - rb * (D / DQ_COLS)) * DQ_COLS;
        float acc[NT][4];
        frag_zero<NT>(acc);
#pragma unroll
        for (int kk = 0; kk < KS / 16; kk++) {
            u32 a[4];
            ldmatrix_x4_trans(a, dst_addr + ldm_lane_b(lane, LDS) + kk * 16 * LDS * 2 + rb * 32);
            mma_a_rows<DT, NT>(acc, a, ks_addr + ldm_lane_a(lane, LD) + kk * 16 * LD * 2 + c0 * 2);
        }
        if (stage) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                u16 *row = stage + ((lane >> 2) + half * 8) * DQ_PITCH + 2 * (lane & 3);
#pragma unroll
                for (int j = 0; j < NT; j++)
                    *(u32 *)(row + j * 8) = DT::pack(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
            }
            __syncwarp();
            for (int k = lane; k < 16 * PIECES; k += 32) {
                const int rr = k / PIECES, pc = k - rr * PIECES;
                const int r = rb * 16 + rr, i = tile * M + r;
                if (tb.row[i].token < 0) continue;
                int e, g;
                tile_row(tile, r, e, g);
                u16 *dst = dq_part + ((row_pair(tb.row[i].pair) * SLICES + slice) * G + g) * D + c0 + pc * 8;
                *(uint4 *)dst = *(const uint4 *)(stage + rr * DQ_PITCH + pc * 8);
            }
            __syncwarp();  // the stage is free for the next unit
            continue;
        }
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = rb * 16 + (lane >> 2) + half * 8, i = tile * M + r;
            if (tb.row[i].token < 0) continue;
            int e, g;
            tile_row(tile, r, e, g);
            u16 *dst = dq_part + ((row_pair(tb.row[i].pair) * SLICES + slice) * G + g) * D + c0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < NT; j++)
                *(u32 *)(dst + j * 8) = DT::pack(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
        }
    }
}

template <bool DQ>
__device__ __forceinline__ void bwd_main(const fsa_sel_params &p) {
    extern __shared__ __align__(16) unsigned char smem[];
    Tables &tb = *(Tables *)smem;
    u16 *dST = (u16 *)(smem + fsa_bwd_smem_ds(D, DV, KS, STAGES));       // [KS][LDS]
    int *ent = (int *)(smem + fsa_bwd_smem_entries(D, DV, KS, STAGES));  // the round's list entries
    const u32 ks_addr = smem_addr(smem) + fsa_bwd_smem_k(), vs_addr = smem_addr(smem) + fsa_bwd_smem_v(D, KS);
    const u32 qs_addr = smem_addr(smem) + fsa_bwd_smem_q(D, DV, KS);
    const u32 dos_addr = smem_addr(smem) + fsa_bwd_smem_do(D, DV, KS, STAGES);
    const u32 dst_addr = smem_addr(dST);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int *work = (const int *)p.work_offsets;
    const int total_work = work[p.num_kv_heads * p.nb_total] * SLICES;
    const float scale = (float)(p.scale_log2 * FSA_LN2);
    const float scale_log2 = (float)p.scale_log2;
    const int d0k = (int)p.d_part * DPK, d0v = (int)p.d_part * DPV;
    const bool do_dq = DQ && p.d_part == 0;

    // Work items in order, each CTA taking the next one when it is done (list
    // lengths vary widely); consecutive items are the slices of one item, which
    // read the same rows. Results do not depend on which CTA takes an item.
    __shared__ int next_work;
    static_assert(sizeof(next_work) == FSA_BWD_SMEM_STATIC, "the plan counts this static memory");
    int *work_next = (int *)p.work_next + p.d_part;
    for (int w = blockIdx.x; w < total_work;) {
        const int wi = w / SLICES, slice = w - wi * SLICES;
        const BwdItem it = bwd_item(p, wi);
        const int h = it.h, item0 = it.item0, item_n = it.item_n;
        float dk[DPK / 8][4], dv[DPV / 8][4];
        frag_zero<DPK / 8>(dk);
        frag_zero<DPV / 8>(dv);
        long long kb0 = 0;
        int nk = 0;
        const int key_lo = warp * 16 + (lane >> 2);  // this lane's key rows: key_lo and key_lo + 8

        // Rounds of up to CHUNK entries: one row table each; K and V load once per item.
        for (int r0 = 0; r0 < item_n; r0 += CHUNK) {
            const int e0 = item0 + r0;
            const int n_ent = min(item_n - r0, CHUNK);
            __syncthreads();  // the previous round or item is done with shared memory
            for (int i = tid; i < n_ent; i += THREADS) ent[i] = ((const int *)p.list_sorted)[e0 + i];
            __syncthreads();
            build_tables(tb, p, ent, n_ent, h);
            if (r0 == 0) {
                bwd_item_keys<BK, KS>(p, it, ent[0], slice, kb0, nk);  // keys past the sequence stay masked
                const u16 *kg = view_row<const u16>(p.k, 0, h);
                const u16 *vg = view_row<const u16>(p.v, 0, h);
                load_tiles_async<KS, D, LD, DV, LDV, THREADS>(ks_addr, vs_addr, [&](int r) {
                    const bool ok = r < nk;
                    const long long key = ok ? kb0 + r : 0;
                    return RowPair{kg + key * p.k.token_stride, vg + key * p.v.token_stride, ok};
                });
            }
            __syncthreads();  // tables complete
            const int ntiles = G <= M ? (n_ent + TOK - 1) / TOK : n_ent * TPT;
            AsyncRing<STAGES> ring;
            auto load = [&](int tile, int buf) {
                load_rows(p, qs_addr + buf * Q_TILE_BYTES, dos_addr + buf * DO_TILE_BYTES, tb, tile, h);
            };
            ring.start(ntiles, load);  // with K and V in the first round

            for (int tile = 0; tile < ntiles; tile++) {
                const int buf = ring.acquire_then_refill(tile, load, [] {});
                const u32 qb_addr = qs_addr + buf * Q_TILE_BYTES, dob_addr = dos_addr + buf * DO_TILE_BYTES;
                const u32 key_rows = warp * 16 * LD * 2 + ldm_lane_a(lane, LD);
                const u32 val_rows = warp * 16 * LDV * 2 + ldm_lane_a(lane, LDV);
#pragma unroll 1
                for (int c = 0; c < M; c += MSTEP) {
                    // P^T and dP^T for this warp's 16 keys x rows c .. c + MSTEP - 1.
                    const u32 q_rows = qb_addr + c * LD * 2, do_rows = dob_addr + c * LDV * 2;
                    float pt[MSTEP / 8][4], dpt[MSTEP / 8][4];
                    frag_zero<MSTEP / 8>(pt);
                    frag_zero<MSTEP / 8>(dpt);
                    mma_abt<DT, D, MSTEP / 8, LD>(pt, ks_addr + key_rows, q_rows + ldm_lane_b(lane, LD));
                    mma_abt<DT, DV, MSTEP / 8, LDV>(dpt, vs_addr + val_rows, do_rows + ldm_lane_b(lane, LDV));
#pragma unroll
                    for (int jn = 0; jn < MSTEP / 8; jn++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int i = tile * M + c + frag_col(lane, jn, e);
                            const long long key = kb0 + key_lo + (e >> 1) * 8;
                            const RowInfo ri = row_info(tb, i);
                            const float pr = (ri.token >= 0 && key <= ri.token)
                                                 ? row_signed(fast_exp2(pt[jn][e] * scale_log2 - ri.lse2), ri.pair)
                                                 : 0.f;
                            pt[jn][e] = pr;
                            dpt[jn][e] = pr * (dpt[jn][e] - ri.delta);  // dS^T
                        }
                    }
                    mma_pv<DT, MSTEP / 16, DPV / 8, LDV>(dv, pt, do_rows + ldm_lane_a(lane, LDV) + d0v * 2);
                    mma_pv<DT, MSTEP / 16, DPK / 8, LD>(dk, dpt, q_rows + ldm_lane_a(lane, LD) + d0k * 2);
                    // dS^T to shared memory for dQ.
                    if (do_dq) frag_store<DT, MSTEP / 8, LDS>(dST + warp * 16 * LDS + c, dpt, lane);
                }
                if (!do_dq) continue;

                // dQ = dS K for the tile, stored per pair row through this warp's stage.
                __syncthreads();  // dS^T complete; the tile's Q and dO buffers are free
                u16 *stage = nullptr;
                if (DQ_STAGED)
                    stage = (u16 *)(smem + ((warp & 1) ? fsa_bwd_smem_do(D, DV, KS, STAGES) + buf * DO_TILE_BYTES
                                                       : fsa_bwd_smem_q(D, DV, KS) + buf * Q_TILE_BYTES) +
                                    (warp >> 1) * DQ_STAGE_BYTES);
                dq_tile(p, tb, dst_addr, ks_addr, stage, tile, slice, scale, lane, warp);
            }
        }

        store_item_dkv<DT, D, DV, BK, KS, DPK, DPV>(p, it, kb0, nk, slice, key_lo, lane, scale, d0k, d0v, dk, dv);
        if (tid == 0) next_work = (int)gridDim.x + atomicAdd(work_next, 1);
        __syncthreads();
        w = next_work;
    }
}

// dK, dV and the per-pair dq rows (FSA-order backward).
extern "C" __global__ void __launch_bounds__(THREADS) fsa_sel_bwd_main(const fsa_sel_params p) { bwd_main<true>(p); }

// dK and dV only (the NSA-order backward computes dq per token). Over head
// dims of 128, one block per SM said outright keeps ptxas from capping the
// registers for a second block (and spilling); 0 leaves its choice alone.
extern "C" __global__ void __launch_bounds__(THREADS, fsa_max_dim(D, DV) > 128 ? 1 : 0)
    fsa_sel_bwd_main_kv(const fsa_sel_params p) {
    bwd_main<false>(p);
}
