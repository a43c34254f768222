// The warpgroup forward of a query tile, warp-specialized (variants 6 and 7
// of fsa_qt_layout.cuh; sm_90a): attend_query_tile_wg's arguments and
// result, the arithmetic of its variant 5 (so the same bits), but the consumer
// warpgroups (fsa_qt_wg_groups, warp w over rows set w) only compute (and
// copy their own query rows once) and a producer warpgroup (the CTA's last)
// alone copies every K/V stage with cp.async into a ProducerRing
// (fsa_mbarrier.cuh). What that
// moves: the consumers' instruction stream loses the stage copies and their
// waits (about a seventh of its instructions in variant 5), a stage is
// waited for on its mbarrier only, and the registers of the producer, which
// needs few, go to the consumers (setmaxnreg: fsa_qt_ws_producer_regs /
// fsa_qt_ws_consumer_regs). Variant 7 spends them on two consumers that each
// keep the next stage's scores in flight during this stage's P V; 8 is 7
// with stages of 128 keys, 9 is 8 with the two consumers taking turns to
// issue products (ping-pong), 10 is 6 (three consumers) with 7's overlap,
// 11 is 10 in ping-pong.
#pragma once
#include "fsa_mbarrier.cuh"
#include "fsa_qattn.cuh"
#include "fsa_stream.cuh"
#include "fsa_wgmma.cuh"

namespace fsa {

template <class DT, int DK, int DV, int G, int WG, class Visible>
__device__ __forceinline__ void attend_query_tile_ws(unsigned char *smem, const fsa_kernel_view &q,
                                                     const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                     const QueryTile &tile, int h, float scale_log2, int n_stages,
                                                     const StridedKeys &keys, Visible visible) {
    static_assert(fsa_qt_wg_producer(WG), "a warp-specialized variant");
    constexpr int KS = fsa_qt_wg_keys(WG, DV), KK = KS / 16, ROWS = fsa_qt_wg_rows(WG);
    constexpr int CONSUMERS = 128 * fsa_qt_wg_groups(WG), STAGES = fsa_qt_wg_stages(WG);
    static_assert(fsa_qt_wg_threads(WG) == CONSUMERS + 128, "one producer warpgroup after the consumers");
    // The pool the warpgroups trade in is what the CTA got at launch: 65536 / threads a
    // thread, rounded down to 8 (one CTA per SM, __launch_bounds__).
    static_assert(128 * fsa_qt_ws_producer_regs(WG) + CONSUMERS * fsa_qt_ws_consumer_regs(WG) <=
                      (CONSUMERS + 128) * (65536 / (CONSUMERS + 128) / 8 * 8),
                  "the registers moved between warpgroups fit what the CTA holds");
    constexpr int K_STAGE = fsa_sw128_bytes(KS, DK), V_STAGE = fsa_sw128_bytes(KS, DV);
    const u32 qs = (smem_addr(smem) + (FSA_QT_WG_ALIGN - 1)) & ~(u32)(FSA_QT_WG_ALIGN - 1);
    const u32 ks = qs + fsa_qt_wg_smem_k(DK, WG), vs = qs + fsa_qt_wg_smem_v(DK, DV, WG);
    // (The warp index through a shuffle: the compiler then knows it is the
    // same on every lane, and the branch below is warp-uniform.)
    const int lane = threadIdx.x & 31, warp = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0);

    ProducerRing<STAGES> ring;
    ring.init(qs + fsa_qt_wg_smem_bars(DK, DV, WG), 128, CONSUMERS);
    __syncthreads();  // the mbarriers are initialized

    if (warp >= CONSUMERS / 32) {
        // The producer: the query rows join stage 0's copies.
        wg_regs_dec<fsa_qt_ws_producer_regs(WG)>();
        const int tid = (int)threadIdx.x - CONSUMERS;
        StridedStage<KS, DK, 128> k_stage;
        StridedStage<KS, DV, 128> v_stage;
        k_stage.init(tid);
        v_stage.init(tid);
        ring.produce(
            n_stages,
            [&](int j, int buf) {
                k_stage.load(ks + buf * K_STAGE, keys.k, keys.k_stride, j * KS, keys.limit);
                v_stage.load(vs + buf * V_STAGE, keys.v, keys.v_stride, j * KS, keys.limit);
            },
            [] { wg_fence_async_smem(); });
        return;
    }

    wg_regs_inc<fsa_qt_ws_consumer_regs(WG)>();
    // Each consumer copies its own 64 query rows (while the producer copies the first stages), and
    // waits for them once: only its own warpgroup reads them (named barrier 4 + cw of 128 threads).
    const int cw = warp >> 2;
    const u32 q_rows = qs + (u32)cw * 64 * 128;  // this warpgroup's 64 rows of every Q panel
    load_query_part_sw128_async<G, DK, 128, ROWS, 64>(qs, q, tile, h, 64 * cw, (int)threadIdx.x & 127);
    cp_async_commit();
    cp_async_wait<0>();
    wg_fence_async_smem();
    named_bar_sync(4 + cw, 128);
    OnlineSoftmax sm;
    sm.init();
    float acc[DV / 8][4], s[KS / 8][4], alpha[2];
    frag_zero<DV / 8>(acc);
    u32 pa[KK][4];
    // Raw scores of stage i into s (issued and committed); then its
    // probabilities in s and alpha the rescale of acc.
    auto scores = [&](int i) {
        // (d = Q K^T without zeroing s first: the same scores as 0 + Q K^T, but for the sign of a zero.
        // In products of up to 64 keys: the halves of a 128-key stage are its rows 0-63 and 64-127.)
        constexpr int N = KS < 64 ? KS : 64;
#pragma unroll
        for (int n = 0; n < KS / N; n++)
            wg_mma_abt<DT, DK, N, ROWS, false, KS>(*reinterpret_cast<float(*)[N / 8][4]>(&s[n * N / 8]), q_rows,
                                                  ks + (u32)((unsigned)i % STAGES) * K_STAGE + (u32)(n * N * 128));
        wg_commit();
    };
    auto softmax = [&](int i) {
        // A stage whose first and last keys every row of the warp sees is seen whole (rows see
        // intervals of keys): no mask, fewer instructions on the softmax's path.
        const int j0 = i * KS, j1 = j0 + KS - 1;
        if (__all_sync(0xffffffffu, visible(j0, 0) && visible(j1, 0) && visible(j0, 1) && visible(j1, 1)))
            sm.step<KS / 8>(s, scale_log2, lane, [](int, int) { return true; }, alpha);
        else
            sm.step<KS / 8>(s, scale_log2, lane, [&](int col, int half) { return visible(j0 + col, half); }, alpha);
    };
    auto pv = [&](int i) {
        wg_mma_pv<DT, KK, DV>(acc, pa, vs + (u32)((unsigned)i % STAGES) * V_STAGE);
        wg_commit();
    };
    if constexpr (!fsa_qt_wg_overlap(WG)) {
        // Variant 6: each product waited for before the softmax that follows (variant 5's steps).
        for (int i = 0; i < n_stages; i++) {
            ring.wait(i);
            scores(i);
            wg_wait<0>();
            wg_hold<KS / 8>(s);
            softmax(i);
            rescale_rows<DV / 8>(acc, alpha);
            wg_p_to_a<DT, KK>(pa, s);
            pv(i);
            wg_wait<0>();
            wg_hold<DV / 8>(acc);
            ring.release(i);
        }
    } else if (n_stages > 0) {
        // Variant 7: stage i + 1's scores and stage i's P V in flight together, stage i + 1's
        // softmax while P V runs. The same operations on acc in the same order as variant 6
        // ((acc + P_i V_i) alpha_{i+1} + P_{i+1} V_{i+1}): the same bits.
        // Variants 9 and 11: the consumers take turns (0, 1, .., 0, ..) at every point where products
        // are issued (n_stages + 1 of them); the last passes the first turn to 0 and does not pass
        // after its last. Barrier 1 + c: consumer c waits, the one before it arrives (256 threads).
        constexpr int NC = fsa_qt_wg_groups(WG);
        auto turn = [&] {
            if constexpr (fsa_qt_wg_pingpong(WG)) named_bar_sync(1 + cw, 256);
        };
        auto pass = [&](bool last) {
            if constexpr (fsa_qt_wg_pingpong(WG))
                if (!(last && cw == NC - 1)) named_bar_arrive(1 + (cw + 1) % NC, 256);
        };
        if (cw == NC - 1) pass(false);
        ring.wait(0);
        turn();
        scores(0);
        pass(false);
        wg_wait<0>();
        wg_hold<KS / 8>(s);
        softmax(0);
        rescale_rows<DV / 8>(acc, alpha);  // (acc is zero: keeps the operations those of variant 6)
        wg_p_to_a<DT, KK>(pa, s);
        for (int i = 0; i + 1 < n_stages; i++) {
            ring.wait(i + 1);
            turn();
            scores(i + 1);
            pv(i);
            pass(false);
            wg_wait<1>();  // the scores; P V may still run
            wg_hold<KS / 8>(s);
            softmax(i + 1);
            wg_wait<0>();
            wg_hold<DV / 8>(acc);
            ring.release(i);
            rescale_rows<DV / 8>(acc, alpha);
            wg_p_to_a<DT, KK>(pa, s);
        }
        turn();
        pv(n_stages - 1);
        pass(true);
        wg_wait<0>();
        wg_hold<DV / 8>(acc);
        ring.release(n_stages - 1);
    }
    store_query_rows<DT, DV, G>(o, lse, total_tokens, tile, h, warp, sm, acc, lane);
}

}  // namespace fsa
