// The forward of a query tile on Hopper warpgroup tensor cores (sm_90a):
// attend_query_tile (fsa_qattn.cuh) with the same caller interface and
// result, variant WG of fsa_qt_layout.cuh: fsa_qt_wg_threads(WG) threads,
// fsa_qt_wg_groups(WG) warpgroups each over 64 of the tile's rows (one set
// of 16 per warp, warp w holding set w: MT = 1), sharing every K/V stage.
// Per stage of keys: S = Q K^T by wgmma from the swizzled
// Q and K tiles, the online softmax in registers, O += P V by wgmma with P
// from registers and V transposed from its swizzled tile. The loaders, the
// softmax and the output rows are those of the mma.sync forward.
//
// With OVERLAP (variants 2, 3) the products of stage i + 1's scores and of stage i's P V are in
// flight together, and stage i + 1's softmax runs while P V still does (the
// tensor pipe is busy during the softmax). Ring item j then carries the K
// rows of stage j and the V rows of stage j - 1: acquiring item i + 1 (K of
// the scores to come, V of the P V to come) refills the buffer of item i,
// whose products were waited for in the step before. Without OVERLAP each
// product waits before the softmax that follows.
//
// Variant 6 (the default) is variant 5 warp-specialized: fsa_qattn_ws.cuh.
//
// Shared memory: fsa_qt_wg_smem_bytes(DK, DV, WG); head dims
// fsa_qt_wg_dims_ok; tokens per tile fsa_qt_wg_tokens_per_tile(G, WG). A
// warpgroup computes every stage of the stream (its products are issued by
// all four warps together): warp_sees is not consulted, rows mask what they
// do not see through visible(), which must hold on an interval of keys for
// each row (a causal prefix, a window): a stage that every row of a warp
// sees from its first to its last key skips the mask.
#pragma once
#include "fsa_mbarrier.cuh"
#include "fsa_qattn.cuh"
#include "fsa_qattn_stage.cuh"
#include "fsa_qattn_ws.cuh"
#include "fsa_stream.cuh"
#include "fsa_wgmma.cuh"

namespace fsa {

// Variants 1 to 5: every warp both copies and computes.
template <class DT, int DK, int DV, int G, int WG, class KeyRows, class Visible, class WarpSees>
__device__ __forceinline__ void attend_query_tile_wg_shared(unsigned char *smem, const fsa_kernel_view &q,
                                                     const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                     const QueryTile &tile, int h, float scale_log2, int n_stages,
                                                     KeyRows key_rows, Visible visible, WarpSees) {
    static_assert(fsa_qt_wg_dims_ok(DK, DV), "warpgroup forward: head dims are multiples of 64 up to 256");
    constexpr int KS = fsa_qt_fwd_keys(DV), KK = KS / 16, THREADS = fsa_qt_wg_threads(WG), ROWS = fsa_qt_wg_rows(WG);
    constexpr int STAGES = fsa_qt_wg_stages(WG);
    constexpr bool OVERLAP = fsa_qt_wg_overlap(WG);
    constexpr int K_STAGE = fsa_sw128_bytes(KS, DK), V_STAGE = fsa_sw128_bytes(KS, DV);
    const u32 qs = (smem_addr(smem) + (FSA_QT_WG_ALIGN - 1)) & ~(u32)(FSA_QT_WG_ALIGN - 1);
    const u32 ks = qs + fsa_qt_wg_smem_k(DK, WG), vs = qs + fsa_qt_wg_smem_v(DK, DV, WG);
    // (The warp index through a shuffle: the compiler then knows it is the
    // same on every lane and keeps the products' descriptors in uniform
    // registers.)
    const int lane = threadIdx.x & 31, warp = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0);
    const u32 q_rows = qs + (u32)(warp >> 2) * 64 * 128;  // this warpgroup's 64 rows of every Q panel
    const auto landed = [] { wg_fence_async_smem(); };
    // The stage copies (strided keys: a row address per thread and stage).
    const KeyHalf<KS, DK, 0, THREADS> k_half;
    const KeyHalf<KS, DV, 1, THREADS> v_half;

    load_query_rows_async<G, DK, 0, THREADS, ROWS, true>(qs, q, tile, h);
    OnlineSoftmax sm;
    sm.init();
    float acc[DV / 8][4], s[KS / 8][4], alpha[2];
    frag_zero<DV / 8>(acc);
    u32 pa[KK][4];
    // Raw scores of a K stage into s (issued and committed); then stage i's
    // probabilities in s (alpha: the rescale of acc).
    auto scores = [&](u32 k_tile) {
        frag_zero<KS / 8>(s);
        wg_mma_abt<DT, DK, KS, ROWS>(s, q_rows, k_tile);
        wg_commit();
    };
    auto softmax = [&](int i) { softmax_stage<KS>(sm, s, scale_log2, lane, i * KS, visible, alpha); };

    if constexpr (!OVERLAP) {
        // Variant 5 (MBAR): the same steps on an mbarrier ring: a warpgroup
        // waits only for the stage it needs, so the warpgroups drift apart
        // and one's softmax runs while another's products do.
        constexpr bool MBAR = fsa_qt_wg_mbar(WG);
        auto load = [&](int i, int buf) {
            k_half(ks + buf * K_STAGE, key_rows, i * KS);
            v_half(vs + buf * V_STAGE, key_rows, i * KS);
        };
        MbarRing<3> mring;
        AsyncRing<STAGES> ring;
        if constexpr (MBAR) {
            mring.init(qs + fsa_qt_wg_smem_bars(DK, DV, WG), THREADS);
            __syncthreads();  // the mbarriers are initialized
            mring.start(n_stages, load, landed);
        } else {
            ring.start(n_stages, load);
        }
        for (int i = 0; i < n_stages; i++) {
            int buf;
            if constexpr (MBAR) {
                mring.wait(i);
                buf = (int)((unsigned)i % STAGES);
            } else {
                buf = ring.acquire_then_refill(i, load, landed);
            }
            scores(ks + buf * K_STAGE);
            stage_softmax_pv<DT, KS, DV>(sm, s, acc, pa, alpha, scale_log2, lane, i * KS, visible, vs + buf * V_STAGE);
            if constexpr (MBAR) {
                mring.release(i);
                mring.advance(i, load, landed);
            }
        }
    } else if (n_stages > 0) {
        auto load = [&](int j, int buf) {
            if (j < n_stages) k_half(ks + buf * K_STAGE, key_rows, j * KS);
            if (j > 0) v_half(vs + buf * V_STAGE, key_rows, (j - 1) * KS);
        };
        AsyncRing<STAGES> ring;
        ring.start(n_stages + 1, load);
        int buf = ring.acquire_then_refill(0, load, landed);
        scores(ks + buf * K_STAGE);
        wg_wait<0>();
        wg_hold<KS / 8>(s);
        softmax(0);
        wg_p_to_a<DT, KK>(pa, s);
        for (int i = 0; i + 1 < n_stages; i++) {
            buf = ring.acquire_then_refill(i + 1, load, landed);  // K of stage i + 1, V of stage i
            scores(ks + buf * K_STAGE);
            wg_mma_pv<DT, KK, DV>(acc, pa, vs + buf * V_STAGE);
            wg_commit();
            wg_wait<1>();  // the scores; P V may still run
            wg_hold<KS / 8>(s);
            softmax(i + 1);
            wg_wait<0>();
            wg_hold<DV / 8>(acc);
            rescale_rows<DV / 8>(acc, alpha);
            wg_p_to_a<DT, KK>(pa, s);
        }
        buf = ring.acquire_then_refill(n_stages, load, landed);  // V of the last stage
        wg_mma_pv<DT, KK, DV>(acc, pa, vs + buf * V_STAGE);
        wg_commit();
        wg_wait<0>();
        wg_hold<DV / 8>(acc);
    }
    cp_async_wait<0>();  // with no stage at all, the query rows' copies are still in flight

    store_query_rows<DT, DV, G>(o, lse, total_tokens, tile, h, warp, sm, acc, lane);
}

template <class DT, int DK, int DV, int G, int WG, class KeyRows, class Visible, class WarpSees>
__device__ __forceinline__ void attend_query_tile_wg(unsigned char *smem, const fsa_kernel_view &q,
                                                     const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                     const QueryTile &tile, int h, float scale_log2, int n_stages,
                                                     KeyRows key_rows, Visible visible, WarpSees warp_sees) {
    if constexpr (fsa_qt_wg_producer(WG))  // variant 6: a producer warpgroup copies (fsa_qattn_ws.cuh)
        attend_query_tile_ws<DT, DK, DV, G, WG>(smem, q, o, lse, total_tokens, tile, h, scale_log2, n_stages, key_rows,
                                                visible);
    else
        attend_query_tile_wg_shared<DT, DK, DV, G, WG>(smem, q, o, lse, total_tokens, tile, h, scale_log2, n_stages,
                                                       key_rows, visible, warp_sees);
}

}  // namespace fsa
