// The forward of a query tile against a stream of key stages: every stage of
// K and V rows is loaded once for the tile (cp.async ring), each warp runs
// S = Q K^T, the online softmax with its rows' visibility rule and O += P V
// on tensor cores, and o and lse (natural log) go straight to global memory.
// The caller says where key rows come from and which key each row sees:
//
//   attend_query_tile<DT, DK, DV, G, MT, KS>(smem, q, o, lse, T, tile, h, scale_log2, n_stages,
//       [&](int j) { return RowPair{k_row(j), v_row(j), j < n_keys}; },   // key j of the stream
//       [&](int j, int slot) { ... },      // this lane's row `slot` sees key j
//       [&](int stage) { ... });           // some row of this warp may see the stage's keys
//
// A warp owns MT sets of 16 rows (1 or 2; the tile's tokens:
// fsa_qt_tokens_per_tile_mt); this lane's rows are slot 2m (row lo of set m)
// and 2m + 1 (row hi), set m being rows set 16 (warp * MT + m) of the tile.
// Keys come in stages of KS (fsa_qt_fwd_keys by default; fsa_qt_fwd_keys_at
// under a layout of fewer). Shared memory: fsa_qt_fwd_smem_bytes_ks(DK, DV,
// MT, KS). No visible key: o = 0,
// lse = -inf; lse may be NULL (not wanted).
#pragma once
#include "fsa_qtile.cuh"
#include "fsa_softmax.cuh"

namespace fsa {

// The finished rows of the tile's set `set` of 16 (this warp's, accumulated
// in acc under sm): o = acc / row sum as DT, lse (natural log; -inf for a
// row that saw nothing) when lse is not NULL. Rows without a token write
// nothing.
template <class DT, int DV, int G>
__device__ __forceinline__ void store_query_rows(const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                 const QueryTile &tile, int h, int set, const OnlineSoftmax &sm,
                                                 const float acc[DV / 8][4], int lane) {
    typedef GroupRows<G> Rows;
    float inv[2], lse2[2];
    sm.finish(inv, lse2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        if (!Rows::live(set, r, tile.n_tok)) continue;
        const long long t = tile.tok0 + Rows::token(set, r), qh = (long long)h * G + Rows::head(r);
        u16 *orow = view_row<u16>(o, t, qh);
#pragma unroll
        for (int j = 0; j < DV / 8; j++)
            *(u32 *)(orow + frag_col(lane, j, 0)) = DT::pack(acc[j][2 * half] * inv[half], acc[j][2 * half + 1] * inv[half]);
        if ((lane & 3) == 0 && lse != nullptr) lse[qh * total_tokens + t] = inv[half] > 0.f ? lse2[half] * LN2 : -FSA_INF;
    }
}

// acc *= alpha per row, skipped when no row of the warp changes its scale:
// once the row maxima settle alpha is exactly 1 (the same bits, fewer
// instructions).
template <int N>
__device__ __forceinline__ void rescale_rows(float acc[N][4], const float alpha[2]) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) frag_scale_rows<N>(acc, alpha);
}

template <class DT, int DK, int DV, int G, int MT = 1, int KS = fsa_qt_fwd_keys(DV), class KeyRows, class Visible,
          class WarpSees>
__device__ __forceinline__ void attend_query_tile(unsigned char *smem, const fsa_kernel_view &q,
                                                  const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                  const QueryTile &tile, int h, float scale_log2, int n_stages,
                                                  KeyRows key_rows, Visible visible, WarpSees warp_sees) {
    static_assert(DK % 16 == 0 && DV % 16 == 0 && DK <= 256 && DV <= 256, "head dims are multiples of 16 up to 256");
    static_assert(MT == 1 || (MT == 2 && DV <= 128), "two row sets per warp up to a value dim of 128");
    static_assert(KS == 32 || KS == 64, "stages of 32 or 64 keys");
    constexpr int LDK = fsa_pitch(DK), LDV = fsa_pitch(DV);
    const u32 qs = smem_addr(smem), ks = qs + fsa_qt_fwd_smem_k_mt(DK, MT), vs = qs + fsa_qt_fwd_smem_v_ks(DK, MT, KS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    load_query_rows_async<G, DK, LDK, FSA_QT_THREADS, FSA_QT_ROWS * MT>(qs, q, tile, h);
    auto load = [&](int i, int buf) {
        load_key_stage_async<KS, DK, DV>(ks + buf * fsa_tile_bytes(KS, DK), vs + buf * fsa_tile_bytes(KS, DV), key_rows,
                                         i * KS);
    };
    AsyncRing<FSA_QT_STAGES> ring;
    ring.start(n_stages, load);

    const u32 q_lane = qs + (u32)(warp * MT * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 k_lane = ks + ldm_lane_b(lane, LDK), v_lane = vs + ldm_lane_a(lane, LDV);
    OnlineSoftmax sm[MT];
    float acc[MT][DV / 8][4];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        sm[m].init();
        frag_zero<DV / 8>(acc[m]);
    }

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        if (!warp_sees(i)) continue;  // warp-uniform: no row of this warp sees these keys
        float s[MT][KS / 8][4];
#pragma unroll
        for (int m = 0; m < MT; m++) frag_zero<KS / 8>(s[m]);
        mma_abt_rows<DT, DK, KS / 8, LDK, MT>(s, q_lane, 16 * LDK * 2, k_lane + buf * fsa_tile_bytes(KS, DK));
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float alpha[2];
            sm[m].step<KS / 8>(
                s[m], scale_log2, lane, [&](int col, int half) { return visible(i * KS + col, 2 * m + half); },
                alpha);
            rescale_rows<DV / 8>(acc[m], alpha);
        }
        mma_pv_rows<DT, KS / 16, DV / 8, LDV, MT>(acc, s, v_lane + buf * fsa_tile_bytes(KS, DV));
    }
    cp_async_wait<0>();  // with no stage at all, the query rows' copies are still in flight

#pragma unroll
    for (int m = 0; m < MT; m++) store_query_rows<DT, DV, G>(o, lse, total_tokens, tile, h, warp * MT + m, sm[m], acc[m], lane);
}

// The online-softmax step over the KS keys of a stage from key j0 (alpha:
// the accumulator's rescale). Rows see intervals of keys, so a stage whose
// first and last keys every row of the warp sees is seen whole: no mask,
// fewer instructions on the softmax's path.
template <int KS, class Visible>
__device__ __forceinline__ void softmax_stage(OnlineSoftmax &sm, float (&s)[KS / 8][4], float scale_log2, int lane, int j0,
                                              Visible visible, float (&alpha)[2]) {
    const int j1 = j0 + KS - 1;
    if (__all_sync(0xffffffffu, visible(j0, 0) && visible(j1, 0) && visible(j0, 1) && visible(j1, 1)))
        sm.step<KS / 8>(s, scale_log2, lane, [](int, int) { return true; }, alpha);
    else
        sm.step<KS / 8>(s, scale_log2, lane, [&](int col, int half) { return visible(j0 + col, half); }, alpha);
}

}  // namespace fsa
