// The math of one warp of the paged-cache attention (kvc_fwd.cu) over 16
// keys of a stage at a time: S = Q K^T, an online softmax per query row,
// O += P V, with the per-row visibility of the paged cache (the row's token
// selected the key's block, and the key is not in the token's future). Two
// orientations of the same products: KvcRowMath puts the rows on the 16-row
// side of the mma, KvcKeyMath the keys (for small groups; fsa_kvc_keys_major
// decides). Stages are padded tiles (cp.async) or 128-byte swizzled tiles
// (TMA, fsa_mma_sw.cuh); the query fragments come from registers (Q_REGS) or
// shared memory. Both end a share in a warp's merge area (put) or, when a
// warp holds its rows' whole share, straight to the output (direct).
#ifndef FSA_KVC_MATH_CUH
#define FSA_KVC_MATH_CUH

#include "fsa_mma_sw.cuh"
#include "fsa_softmax.cuh"
#include "fsa_wgmma.cuh"
#include "kvc_merge.cuh"

namespace fsa {

// Whether row r of a tile holds a token (row r is token r / G; rows past the
// tile's tokens are padding).
template <int G>
__device__ __forceinline__ bool kvc_row_live(int r, int ntok) {
    return r < fsa_kvc_tile_tokens(G) * G && r / G < ntok;
}

// The math of one warp over 16 keys at a time of its 16 rows (row tile rt),
// rows on the 16-row side: S = Q K^T, online softmax along each row, O += P V.
// Visible: the row's token selected the key's block, and the key is not in
// the token's future.
template <typename DT, int D, int DV, int G, bool TMA, bool Q_REGS, bool WG_TILES, int WARPS, int LDO>
struct KvcRowMath {
    static constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
    static __device__ __forceinline__ u32 q_lane(int lane) { return TMA ? sw128_lane_a(lane) : ldm_lane_a(lane, LD); }
    static __device__ __forceinline__ u32 k_lane(int lane) { return TMA ? sw128_lane_b(lane) : ldm_lane_b(lane, LD); }
    static __device__ __forceinline__ u32 v_lane(int lane) { return TMA ? sw128_lane_a(lane) : ldm_lane_a(lane, LDV); }
    OnlineSoftmax sm;
    float o[DV / 8][4];
    int tpos[2];  // per fragment row half: the token's position (-1: padding row)
    u32 tbit[2];  // and its bit in the key masks

    __device__ __forceinline__ void rows(int rt, int lane, int ntok, int pos0) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = rt * 16 + frag_row(lane, 2 * i);
            tpos[i] = kvc_row_live<G>(r, ntok) ? pos0 + r / G : -1;
            tbit[i] = kvc_row_live<G>(r, ntok) ? 1u << (r / G) : 0u;
        }
    }
    __device__ __forceinline__ void reset() {
        sm.init();
        frag_zero<DV / 8>(o);
    }
    __device__ __forceinline__ void chunk(const u32 (*qf)[4], u32 q_addr, u32 k_addr, u32 v_addr, const int *kpos,
                                          const u32 *kmask, float scale_log2, int lane) {
        float s[2][4];
        frag_zero<2>(s);
        if constexpr (TMA) mma_abt_a_regs_sw<DT, D, KVC_STAGE>(s, qf, k_addr);
        else if constexpr (Q_REGS) mma_abt_a_regs<DT, D, 2, LD>(s, qf, k_addr);
        else mma_abt<DT, D, 2, LD>(s, q_addr, k_addr);
        float alpha[2];
        sm.step<2>(s, scale_log2, lane, [&](int col, int half) {
            return (kmask[col] & tbit[half]) != 0u && kpos[col] <= tpos[half];
        }, alpha);
        frag_scale_rows<DV / 8>(o, alpha);
        if constexpr (TMA) mma_pv_sw<DT, DV / 8, KVC_STAGE>(o, s, v_addr);
        else mma_pv<DT, 1, DV / 8, LDV>(o, s, v_addr);
    }
    // The stage's 64 keys at once for the tile's 64 rows (WG_TILES; every
    // warp of the CTA together): S = Q K^T by warpgroup products with Q from
    // registers, one online-softmax step over the 64 keys, O += P V by
    // warpgroup products. k_tile, v_tile: the stage's swizzled K and V tiles.
    // (A template, so that kernels without WG_TILES never instantiate the products.)
    template <bool ON = WG_TILES>
    __device__ __forceinline__ void stage_wg(const u32 (*qf)[4], u32 k_tile, u32 v_tile, const int *kpos,
                                             const u32 *kmask, float scale_log2, int lane) {
        if constexpr (ON) {
            float s[KVC_STAGE / 8][4];
            frag_zero<KVC_STAGE / 8>(s);
            wg_mma_abt_a_regs<DT, D>(s, qf, k_tile);
            wg_commit();
            wg_wait<0>();
            wg_hold<KVC_STAGE / 8>(s);
            float alpha[2];
            sm.step<KVC_STAGE / 8>(s, scale_log2, lane, [&](int col, int half) {
                return (kmask[col] & tbit[half]) != 0u && kpos[col] <= tpos[half];
            }, alpha);
            if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) frag_scale_rows<DV / 8>(o, alpha);
            u32 pa[KVC_STAGE / 16][4];
            wg_pv_waited<DT, KVC_STAGE / 16, DV>(o, pa, s, v_tile);
        }
    }
    __device__ __forceinline__ void put(const WarpMerge<WARPS, DV, LDO> &wm, int kg, int lane) const {
        wm.put(sm, o, kg, lane);
    }
    // The share's partial straight from the fragments when the warp holds its
    // rows' whole share (kge 1): share_row_factors and share_items for one
    // warp, expression for expression (its factor is exp2(0) = 1 where a key
    // is visible), so the same bits, without the merge area, its barriers and
    // its loads. out as share_items calls it; rows past `live` are padding.
    template <class Out>
    __device__ __forceinline__ void direct(int rt, int lane, int live, Out out) const {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float lw = sm.row_sum(i);  // every lane (shuffles)
            const int r = rt * 16 + (lane >> 2) + 8 * i;
            const float mmax = fmaxf(-FSA_INF, sm.m[i]);
            float l = 0.f, f = 0.f;
            if (mmax != -FSA_INF) {
                f = fast_exp2(sm.m[i] - mmax);
                l += lw * f;
            }
            const float inv = l > 0.f ? 1.f / l : 0.f, lse2 = l > 0.f ? mmax + fast_log2(l) : -FSA_INF;
            if (r >= live) continue;
#pragma unroll
            for (int j = 0; j < DV / 8; j++) {
                float2 v = make_float2(0.f, 0.f);
                v.x += o[j][2 * i] * f;
                v.y += o[j][2 * i + 1] * f;
                const float2 acc = lse2 == -FSA_INF ? make_float2(0.f, 0.f) : v;
                out(r, 8 * j + 2 * (lane & 3), acc.x * inv, acc.y * inv, lse2);
            }
        }
    }
};

// The same with the keys on the 16-row side (fsa_mma.cuh, "keys on the
// 16-row side"): S^T = K Q^T, online softmax along each column, O^T += V^T
// P^T. The warp's 16 rows are two n8 tiles; when at most 8 of them are live
// only the first is computed.
template <typename DT, int D, int DV, int G, bool TMA, int WARPS, int LDO>
struct KvcKeyMath {
    static constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
    static __device__ __forceinline__ u32 q_lane(int lane) { return TMA ? sw128_lane_b(lane) : ldm_lane_b(lane, LD); }
    static __device__ __forceinline__ u32 k_lane(int lane) { return TMA ? sw128_lane_a(lane) : ldm_lane_a(lane, LD); }
    static __device__ __forceinline__ u32 v_lane(int lane) { return TMA ? sw128_lane_b(lane) : ldm_lane_b(lane, LDV); }
    KeyMajorSoftmax<2> sm;
    float o[2][DV / 16][4];
    // Per n8 tile and fragment column: the token's position (-1: padding
    // row); its bit in the key masks is tpos - pos0. With G even both
    // columns of a lane are heads of one token (column 0 serves both).
    static constexpr int CW = G % 2 == 0 ? 1 : 2;
    int tpos[2][CW];
    int pos0;
    bool two;  // warp-uniform: rows 8-15 of the warp's tile hold a live row

    __device__ __forceinline__ void rows(int rt, int lane, int ntok, int pos0_) {
        pos0 = pos0_;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int c = 0; c < CW; c++) {
                const int r = rt * 16 + frag_col(lane, j, c);
                tpos[j][c] = kvc_row_live<G>(r, ntok) ? max(pos0 + r / G, -1) : -1;
            }
        two = kvc_row_live<G>(rt * 16 + 8, ntok);
    }
    __device__ __forceinline__ void reset() {
        sm.init();
#pragma unroll
        for (int j = 0; j < 2; j++) frag_zero<DV / 16>(o[j]);
    }
    template <int NQ>
    __device__ __forceinline__ void chunk_n(const u32 (*qf)[4], u32 k_addr, u32 v_addr, const int *kpos,
                                            const u32 *kmask, float scale_log2, int lane) {
        float s[NQ][4];
        frag_zero<NQ>(s);
        if constexpr (TMA) mma_kqt_sw<DT, D, NQ, KVC_STAGE>(s, k_addr, qf);
        else mma_kqt<DT, D, NQ>(s, k_addr, qf);
        const int key[2] = {frag_row(lane, 0), frag_row(lane, 2)};
        const int kp[2] = {kpos[key[0]], kpos[key[1]]};
        const u32 km[2] = {kmask[key[0]], kmask[key[1]]};
        float alpha[NQ][2];
        sm.step<NQ>(s, scale_log2, [&](int kh, int j, int c) {
            const int t = tpos[j][CW == 1 ? 0 : c];
            return t >= 0 && kp[kh] <= t && ((km[kh] >> (t - pos0)) & 1u) != 0u;
        }, alpha);
        // Once a row's max settles its factor is exactly 1: skipping the
        // multiply then changes no bit.
        bool settled = true;
#pragma unroll
        for (int j = 0; j < NQ; j++) settled = settled && alpha[j][0] == 1.f && alpha[j][1] == 1.f;
        if (!__all_sync(0xffffffffu, settled)) frag_scale_cols<NQ, DV / 16>(o, alpha);
        if constexpr (TMA) mma_vt_pt_sw<DT, DV, NQ, KVC_STAGE>(o, s, v_addr);
        else mma_vt_pt<DT, DV, NQ>(o, s, v_addr);
    }
    __device__ __forceinline__ void chunk(const u32 (*qf)[4], u32, u32 k_addr, u32 v_addr, const int *kpos,
                                          const u32 *kmask, float scale_log2, int lane) {
        if (two) chunk_n<2>(qf, k_addr, v_addr, kpos, kmask, scale_log2, lane);
        else chunk_n<1>(qf, k_addr, v_addr, kpos, kmask, scale_log2, lane);
    }
    // Never called: WG_TILES needs four row tiles, keys on the 16-row side have one.
    template <bool ON = false>
    __device__ __forceinline__ void stage_wg(const u32 (*)[4], u32, u32, const int *, const u32 *, float, int) {}
    __device__ __forceinline__ void put(const WarpMerge<WARPS, DV, LDO> &wm, int kg, int lane) const {
        warp_merge_put_keys(wm, sm, o, kg, lane);
    }
    // Never called: keys on the 16-row side split every stage over at least two warps.
    template <class Out>
    __device__ __forceinline__ void direct(int, int, int, Out) const {}
};

}  // namespace fsa

#endif
