// The backward of query-tile attention on Hopper warpgroup tensor cores
// (sm_90a): the blocks of fsa_qbwd.cuh with the same callers' functors and
// results (deterministic: every output element has one owner, its sums in a
// fixed order), for head dims fsa_qt_wgb_dims_ok, laid out as
// fsa_qt_layout.cuh's warpgroup backward says:
//  backward_dq_tile_wg:  two or three warpgroups of 64 query rows (warp w:
//                        set w), all sharing every stage of keys: S = Q K^T and
//                        dP = dO V^T from the swizzled tiles, dS = P (dP -
//                        delta) in registers, dq += dS K with dS as the A
//                        operand and the K stage read transposed.
//  backward_dkv_tile_wg: FSA_QT_WGB_GROUPS = 2 warpgroups; the CTA's 64 keys
//                        are every warpgroup's rows, and each takes its own
//                        columns (query rows) of every stage:
//                        S^T = K Q^T and dP^T = V dO^T, then dV += P^T dO
//                        and dK += dS^T Q with P^T / dS^T from registers and
//                        the dO / Q stage read transposed. dV's product runs
//                        while dS^T is formed.
#pragma once
#include "fsa_qbwd.cuh"
#include "fsa_stream.cuh"
#include "fsa_wgmma.cuh"

namespace fsa {

// d (64 x N) = A B^T over a depth of K (as wg_mma_abt, but d need not be
// zeroed first: the first step does not read it), with B the N rows at
// b_rows of a K-major swizzled tile of B_ROWS rows (b_rows: its base plus
// 128 bytes per row skipped, a multiple of 8 rows).
template <class DT, int K, int N, int A_ROWS, int B_ROWS>
__device__ __forceinline__ void wg_mma_abt_rows(float (&d)[N / 8][4], u32 a_tile, u32 b_rows) {
    wg_fence();
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++)
        wg_mma_ss(DT(), d, wg_desc_k(a_tile, A_ROWS, kd), wg_desc_k(b_rows, B_ROWS, kd), kd > 0);
}

// dS = P (dP - delta) of a warp's 16 query rows into dp, from the raw
// scores s: P = exp2(s scale_log2 - lse2) with this lane's rows' lse (base
// 2) and delta; 0 where sees(column, half) is false.
template <int NJ, class Sees>
__device__ __forceinline__ void frag_ds_rows(float dp[NJ][4], const float s[NJ][4], float scale_log2,
                                             const float lse2[2], const float dlt[2], int lane, Sees sees) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int half = e >> 1;
            const float pr = fast_exp2(fmaf(s[j][e], scale_log2, -lse2[half]));
            dp[j][e] = sees(frag_col(lane, j, e), half) ? pr * (dp[j][e] - dlt[half]) : 0.f;
        }
}

// P^T in place of the raw scores S^T of a warp's 16 keys against query
// columns whose lse (natural log) is lse[column] (row table words: gated
// ones with their gate's magnitude, row_lse_value); 0 where sees(column,
// half) is false.
template <int NJ, class Sees>
__device__ __forceinline__ void frag_probs_cols(float st[NJ][4], float scale_log2, const float *lse, bool gated,
                                                int lane, Sees sees) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int col = frag_col(lane, j, e);
            const float pr = fast_exp2(fmaf(st[j][e], scale_log2, -row_lse_value(lse[col], gated) * LOG2E));
            st[j][e] = sees(col, e >> 1) ? pr : 0.f;
        }
}

// The first 1024-byte aligned address of the dynamic shared memory (the
// layouts carry FSA_QT_WG_ALIGN bytes of slack for it), as a shared-memory
// address and as a generic pointer.
__device__ __forceinline__ u32 wg_smem_base(unsigned char *smem, unsigned char **generic) {
    const u32 raw = smem_addr(smem), base = (raw + (FSA_QT_WG_ALIGN - 1)) & ~(u32)(FSA_QT_WG_ALIGN - 1);
    *generic = smem + (base - raw);
    return base;
}

// dq of a query tile of 64 rows per warpgroup (fsa_qt_wgb_groups(WGB) of
// them, fsa_qt_wgb_dq_tokens(G, WGB) tokens) against a stream of key stages, with the functors of
// attend_query_tile_wg: key_rows (StridedKeys, or a functor j -> RowPair), visible(j, half) (an
// interval of keys per row). Also writes delta (p.delta) of the tile's rows.
template <class DT, int DK, int DV, int G, int WGB, class P, class KeyRows, class Visible>
__device__ __forceinline__ void backward_dq_tile_wg(unsigned char *smem, const P &p, const QueryTile &tile, int h,
                                                    int n_stages, KeyRows key_rows, Visible visible) {
    static_assert(fsa_qt_wgb_dims_ok(DK, DV), "warpgroup backward: head dims in 64-column panels, one pass");
    static_assert(WGB == fsa_qt_wgb_pick(WGB, DK, DV), "three warpgroups only up to Dk 192");
    constexpr int KS = fsa_qt_wgb_dq_keys(DK, WGB), KK = KS / 16, THREADS = fsa_qt_bwd_dq_threads(WGB);
    constexpr int ROWS = fsa_qt_wgb_dq_rows(WGB), STAGES = fsa_qt_wgb_dq_stages(DK, DV, WGB);
    constexpr int K_STAGE = fsa_sw128_bytes(KS, DK), V_STAGE = fsa_sw128_bytes(KS, DV);
    __shared__ float delta_s[ROWS];
    static_assert(sizeof(delta_s) == fsa_qt_wgb_dq_static_smem(WGB), "the layout counts the deltas");
    unsigned char *gen;
    const u32 qs = wg_smem_base(smem, &gen), dos = qs + fsa_qt_wgb_dq_smem_do(DK, WGB);
    const u32 ks = qs + fsa_qt_wgb_dq_smem_k(DK, DV, WGB), vs = qs + fsa_qt_wgb_dq_smem_v(DK, DV, WGB);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 rows = (u32)(warp >> 2) * 64 * 128;  // this warpgroup's 64 rows of every Q / dO panel

    load_query_rows_async<G, DK, 0, THREADS, ROWS, true>(qs, p.q, tile, h);
    load_query_rows_async<G, DV, 0, THREADS, ROWS, true>(dos, p.dout, tile, h);
    // (A strided key stream costs a few instructions a piece: KeyHalf.)
    const KeyHalf<KS, DK, 0, THREADS> k_half;
    const KeyHalf<KS, DV, 1, THREADS> v_half;
    auto load = [&](int i, int buf) {
        k_half(ks + buf * K_STAGE, key_rows, i * KS);
        v_half(vs + buf * V_STAGE, key_rows, i * KS);
    };
    AsyncRing<STAGES> ring;
    ring.start(n_stages, load);

    bool live[2];
    float row_lse2[2], row_dlt[2], row_gate[2];
    dq_row_stats<DT, DV, G>(p, tile, h, delta_s + warp * 16, live, row_lse2, row_dlt, row_gate);
    const float scale_log2 = (float)p.scale_log2;
    float dq[DK / 8][4];
    frag_zero<DK / 8>(dq);

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire_then_refill(i, load, [] { wg_fence_async_smem(); });
        float s[KS / 8][4], dp[KS / 8][4];
        wg_mma_abt_rows<DT, DK, KS, ROWS, KS>(s, qs + rows, ks + buf * K_STAGE);     // S = Q K^T
        wg_mma_abt_rows<DT, DV, KS, ROWS, KS>(dp, dos + rows, vs + buf * V_STAGE);  // dP = dO V^T
        wg_commit();
        wg_wait<0>();
        wg_hold<KS / 8>(s);
        wg_hold<KS / 8>(dp);
        // dS = P (dP - delta) into dp; a stage every row of the warp sees whole skips the mask.
        const int j0 = i * KS;
        if (__all_sync(0xffffffffu, visible(j0, 0) && visible(j0 + KS - 1, 0) && visible(j0, 1) &&
                                        visible(j0 + KS - 1, 1)))
            frag_ds_rows<KS / 8>(dp, s, scale_log2, row_lse2, row_dlt, lane, [](int, int) { return true; });
        else
            frag_ds_rows<KS / 8>(dp, s, scale_log2, row_lse2, row_dlt, lane,
                                 [&](int col, int half) { return visible(j0 + col, half); });
        u32 da[KK][4];
        wg_p_to_a<DT, KK>(da, dp);
        wg_mma_pv<DT, KK, DK>(dq, da, ks + buf * K_STAGE);  // the K stage as the (keys x DK) B operand
        wg_commit();
        wg_wait<0>();
        wg_hold<DK / 8>(dq);
    }
    cp_async_wait<0>();

    store_dq_rows<DT, DK, G>(p, tile, h, warp, live, row_gate, dq);
}

// A barrier of the 128 threads of warpgroup `wg` alone (ids 1 and up; 0 is __syncthreads).
__device__ __forceinline__ void wg_bar_sync(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); }

// dK and dV of the key tile kt (as backward_dkv_tile with both parts): the
// query rows are the tiles of C rows (fsa_qt_wgb_dkv_cols) of [q_start,
// q_end) from position first_pos to last_pos; row_keys(pos, head) ->
// KeyRange. Warpgroup w takes the C rows at w C of every stage of 2C rows,
// all on one ring; with fsa_qt_wgb_split(WGB), tiles w, w + 2, ... on a ring
// of its own (its threads copy them, its barrier guards them), so that the
// two do not wait for each other between stages. ws: this CTA's share of
// the walk (fsa_qbwd.cuh's WalkSplit; the whole walk by default).
template <class DT, int DK, int DV, int G, int WGB, class P, class RowKeys>
__device__ __forceinline__ void backward_dkv_tile_wg(unsigned char *smem, const P &p, const QueryTile &kt, int h,
                                                     long long q_start, long long q_end, long long first_pos,
                                                     long long last_pos, RowKeys row_keys,
                                                     const WalkSplit &ws = walk_whole()) {
    static_assert(fsa_qt_wgb_dims_ok(DK, DV), "warpgroup backward: head dims in 64-column panels, one pass");
    constexpr bool SPLIT = fsa_qt_wgb_split(WGB);
    constexpr int KT = FSA_QT_DKV_KEYS, C = fsa_qt_wgb_dkv_cols(DK, DV), R = fsa_qt_wgb_dkv_rows(DK, DV), CK = C / 16;
    constexpr int THREADS = FSA_QT_WGB_THREADS, STAGES = fsa_qt_wgb_dkv_stages(DK, DV);
    // Tokens per tile of the walk, threads per ring, rows per stage buffer (a warpgroup's C, or 2C).
    constexpr int TT = (SPLIT ? C : R) / 16 * (16 / G), RING_THREADS = SPLIT ? 128 : THREADS, BR = SPLIT ? C : R;
    constexpr int Q_STAGE = fsa_sw128_bytes(BR, DK), DO_STAGE = fsa_sw128_bytes(BR, DV);
    static_assert(KT == 64, "the tile's keys are a warpgroup's 64 rows");
    static_assert(KT * (DK + 8 + DV + 8) * 4 <= STAGES * (fsa_sw128_bytes(R, DK) + fsa_sw128_bytes(R, DV)),
                  "the stage buffers hold the fp32 sums");
    unsigned char *gen;
    const u32 ks = wg_smem_base(smem, &gen), vs = ks + fsa_qt_wgb_dkv_smem_v(DK);
    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, wg = tid >> 7;
    // This ring's buffers: with SPLIT, warpgroup wg's own STAGES buffers of C rows (the same bytes).
    const u32 qs = ks + fsa_qt_wgb_dkv_smem_q(DK, DV) + (SPLIT ? wg * STAGES * Q_STAGE : 0);
    const u32 dos = ks + fsa_qt_wgb_dkv_smem_do(DK, DV) + (SPLIT ? wg * STAGES * DO_STAGE : 0);
    const int t0 = SPLIT ? wg * STAGES * C : 0;  // this ring's first table entry
    KeyRange *row_keys_s = (KeyRange *)(gen + fsa_qt_wgb_dkv_smem_rows(DK, DV));  // [STAGES][R]
    float *row_lse = (float *)(row_keys_s + STAGES * R), *row_dlt = row_lse + STAGES * R;
    const int n_all = walk_tiles(ws, last_pos >= first_pos ? (int)((last_pos - first_pos + TT) / TT) : 0);
    const int n_qt = SPLIT ? (n_all - wg + 1) / 2 : n_all;  // this ring's tiles

    auto key_row = [&](const fsa_kernel_view &t) {
        return [&](int r) {
            const bool ok = r < kt.n_tok;
            return RowSrc{ok ? view_row<const u16>(t, kt.tok0 + r, h) : (const u16 *)t.ptr, ok};
        };
    };
    load_tile_sw128_async<KT, DK, THREADS>(ks, key_row(p.k));
    load_tile_sw128_async<KT, DV, THREADS>(vs, key_row(p.v));
    if constexpr (SPLIT) {  // both warpgroups read every key row: landed and shared before the rings start
        cp_async_commit();
        cp_async_wait<0>();
        wg_fence_async_smem();
        __syncthreads();
    }
    const RowTable table{row_keys_s, row_lse, row_dlt};
    const int rtid = SPLIT ? tid & 127 : tid;  // this thread's number on its ring
    auto load = [&](int it, int buf) {
        const QueryTile qt = walked_query_tile<TT>(kt, q_start, q_end, first_pos, walk_tile(ws, SPLIT ? 2 * it + wg : it));
        load_query_rows_async<G, DK, 0, RING_THREADS, BR, true>(qs + buf * Q_STAGE, p.q, qt, h, rtid);
        load_query_rows_async<G, DV, 0, RING_THREADS, BR, true>(dos + buf * DO_STAGE, p.dout, qt, h, rtid);
        fill_row_table<G, BR>(table, t0 + buf * BR, p, qt, h, q_start, row_keys, rtid);
    };
    AsyncRing<STAGES> ring;
    ring.start(n_qt, load);

    // The keys of this lane's two rows and of the tile, as indices of the sequence.
    const int j0 = (int)(kt.tok0 - kt.start), j1 = j0 + KT - 1;
    const int key[2] = {j0 + warp * 16 + frag_row(lane, 0), j0 + warp * 16 + frag_row(lane, 2)};
    const u32 cols = SPLIT ? 0u : (u32)wg * C * 128;  // this warpgroup's query rows of a stage buffer
    const int tcols = SPLIT ? 0 : wg * C;             // and of its table
    const float scale_log2 = (float)p.scale_log2;
    const bool gated = p.gate.ptr != 0;
    float dk[DK / 8][4], dv[DV / 8][4];
    frag_zero<DK / 8>(dk);
    frag_zero<DV / 8>(dv);

    for (int it = 0; it < n_qt; it++) {
        const auto landed = [] { wg_fence_async_smem(); };
        const int buf = SPLIT ? ring.acquire_then_refill(it, load, landed, [&] { wg_bar_sync(wg); })
                              : ring.acquire_then_refill(it, load, landed);
        const int at = t0 + buf * BR + tcols;
        const KeyRange *rk = row_keys_s + at;
        const float *lse = row_lse + at, *dlt = row_dlt + at;
        // The warpgroup's rows: none sees a key of the tile, skip; all see all of them, no mask
        // (the same answer in its four warps).
        bool any = false, all = true;
#pragma unroll
        for (int c = lane; c < C; c += 32) {
            const KeyRange r = rk[c];
            any |= r.lo <= j1 && r.hi >= j0;
            all &= r.lo <= j0 && r.hi >= j1;
        }
        if (!__any_sync(0xffffffffu, any)) continue;
        const bool whole = __all_sync(0xffffffffu, all);
        const u32 q_rows = qs + buf * Q_STAGE + cols, do_rows = dos + buf * DO_STAGE + cols;

        float st[C / 8][4], dpt[C / 8][4];
        wg_mma_abt_rows<DT, DK, C, KT, BR>(st, ks, q_rows);  // S^T = K Q^T
        wg_commit();
        wg_mma_abt_rows<DT, DV, C, KT, BR>(dpt, vs, do_rows);  // dP^T = V dO^T
        wg_commit();
        wg_wait<1>();
        wg_hold<C / 8>(st);
        // P^T with the forward's lse (times the rows' gates in a gated backward); 0 where the key is not visible.
        if (whole)
            frag_probs_cols<C / 8>(st, scale_log2, lse, gated, lane, [](int, int) { return true; });
        else
            frag_probs_cols<C / 8>(st, scale_log2, lse, gated, lane, [&](int col, int half) {
                return rk[col].lo <= key[half] && key[half] <= rk[col].hi;
            });
        if (gated && cols_have_negative_gates<C / 8>(lse, lane)) frag_gate_signs<C / 8>(st, lse, lane);
        u32 pa[CK][4];
        wg_p_to_a<DT, CK>(pa, st);
        wg_mma_pv<DT, CK, DV, BR>(dv, pa, do_rows);  // dV += P^T dO
        wg_commit();
        wg_wait<1>();  // dP^T; dV's product may still run
        wg_hold<C / 8>(dpt);
#pragma unroll
        for (int j = 0; j < C / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) dpt[j][e] = st[j][e] * (dpt[j][e] - dlt[frag_col(lane, j, e)]);  // dS^T
        u32 da[CK][4];
        wg_p_to_a<DT, CK>(da, dpt);
        wg_mma_pv<DT, CK, DK, BR>(dk, da, q_rows);  // dK += dS^T Q
        wg_commit();
        wg_wait<0>();  // the stage's buffers are refilled after the next barrier
        wg_hold<DV / 8>(dv);
        wg_hold<DK / 8>(dk);
    }
    cp_async_wait<0>();

    finish_key_tile<DT, DK, DV, true, true>((float *)(gen + fsa_qt_wgb_dkv_smem_q(DK, DV)), wg, warp, dk, dv, p, kt, h,
                                            ws);
}

}  // namespace fsa
