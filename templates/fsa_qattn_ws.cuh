// The warpgroup forward of a query tile, warp-specialized (variant 6 of
// fsa_qt_layout.cuh, the default; sm_90a): attend_query_tile_wg's arguments
// and result, the arithmetic of its variant 5 in the same order (so the same
// bits), but the consumer warpgroups (fsa_qt_wg_groups, warp w over rows set
// w) only compute (and copy their own query rows once) and a producer
// warpgroup (the CTA's last) alone copies every K/V stage with cp.async into
// a ProducerRing (fsa_mbarrier.cuh). What that moves: the consumers'
// instruction stream loses the stage copies and their waits (about a seventh
// of its instructions in variant 5), a stage is waited for on its mbarrier
// only, and the registers of the producer, which needs few, go to the
// consumers (setmaxnreg: fsa_qt_ws_producer_regs / fsa_qt_ws_consumer_regs).
// The stage copies stay cp.async, not TMA: the key rows past a sequence's
// `limit` must read as zeros (a box of the whole tensor would read the next
// sequence's rows, and 0 * inf in P V is NaN).
//
// Tried and measured slower (bench/NOTES.md, series qws): two consumers
// with the next stage's scores in flight during P V and the softmax, with
// stages of 128 keys, with FA3's ping-pong between them; three consumers
// with that overlap, and in ping-pong.
#pragma once
#include "fsa_mbarrier.cuh"
#include "fsa_qattn.cuh"
#include "fsa_qattn_stage.cuh"
#include "fsa_stream.cuh"
#include "fsa_wgmma.cuh"

namespace fsa {

// The producer warpgroup's copies: each thread's pieces (StridedStage) of
// K/V stage j of a strided key stream into ring buffer buf.
template <int KS, int DK, int DV>
struct WsStageCopies {
    StridedStage<KS, DK, 128> k_stage;
    StridedStage<KS, DV, 128> v_stage;
    u32 ks, vs;
    __device__ __forceinline__ void init(int tid, u32 k_tiles, u32 v_tiles) {
        k_stage.init(tid);
        v_stage.init(tid);
        ks = k_tiles;
        vs = v_tiles;
    }
    __device__ __forceinline__ void operator()(int buf, const StridedKeys &keys, int j) {
        k_stage.load(ks + buf * fsa_sw128_bytes(KS, DK), keys.k, keys.k_stride, j * KS, keys.limit);
        v_stage.load(vs + buf * fsa_sw128_bytes(KS, DV), keys.v, keys.v_stride, j * KS, keys.limit);
    }
};

// A consumer warpgroup's whole tile: its stages, ring items item ..
// item + n_stages - 1 (item ends past them; buffer item % STAGES), S = Q K^T
// from its query rows q_rows, the online softmax and P V, then the tile's
// output rows and lse. Both forms (a CTA per tile, persistent) run it.
template <class DT, int DK, int DV, int G, int ROWS, int STAGES, class Visible>
__device__ __forceinline__ void ws_consume_tile(const ProducerRing<STAGES> &ring, int &item, int n_stages, u32 q_rows,
                                                u32 ks, u32 vs, float scale_log2, int lane, int warp, Visible visible,
                                                const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                const QueryTile &tile, int h) {
    constexpr int KS = fsa_qt_fwd_keys(DV), KK = KS / 16;
    constexpr int K_STAGE = fsa_sw128_bytes(KS, DK), V_STAGE = fsa_sw128_bytes(KS, DV);
    OnlineSoftmax sm;
    sm.init();
    float acc[DV / 8][4], s[KS / 8][4], alpha[2];
    frag_zero<DV / 8>(acc);
    u32 pa[KK][4];
    for (int i = 0; i < n_stages; i++, item++) {
        const int buf = (int)((unsigned)item % STAGES);
        ring.wait(item);
        // (s = Q K^T without zeroing s first: the same scores as variant 5's 0 + Q K^T but for the
        // sign of a zero, which no later step can tell.)
        wg_mma_abt<DT, DK, KS, ROWS, false>(s, q_rows, ks + buf * K_STAGE);
        wg_commit();
        stage_softmax_pv<DT, KS, DV>(sm, s, acc, pa, alpha, scale_log2, lane, i * KS, visible, vs + buf * V_STAGE);
        ring.release(item);
    }
    store_query_rows<DT, DV, G>(o, lse, total_tokens, tile, h, warp, sm, acc, lane);
}

template <class DT, int DK, int DV, int G, int WG, class Visible>
__device__ __forceinline__ void attend_query_tile_ws(unsigned char *smem, const fsa_kernel_view &q,
                                                     const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                     const QueryTile &tile, int h, float scale_log2, int n_stages,
                                                     const StridedKeys &keys, Visible visible) {
    static_assert(fsa_qt_wg_producer(WG), "the warp-specialized variant");
    constexpr int KS = fsa_qt_fwd_keys(DV), ROWS = fsa_qt_wg_rows(WG);
    constexpr int CONSUMERS = 128 * fsa_qt_wg_groups(WG), STAGES = fsa_qt_wg_stages(WG);
    static_assert(fsa_qt_wg_threads(WG) == CONSUMERS + 128, "one producer warpgroup after the consumers");
    // The pool the warpgroups trade in is what the CTA got at launch: 65536 / threads a
    // thread, rounded down to 8 (one CTA per SM, __launch_bounds__).
    static_assert(128 * fsa_qt_ws_producer_regs(WG) + CONSUMERS * fsa_qt_ws_consumer_regs(WG) <=
                      (CONSUMERS + 128) * (65536 / (CONSUMERS + 128) / 8 * 8),
                  "the registers moved between warpgroups fit what the CTA holds");
    const u32 qs = (smem_addr(smem) + (FSA_QT_WG_ALIGN - 1)) & ~(u32)(FSA_QT_WG_ALIGN - 1);
    const u32 ks = qs + fsa_qt_wg_smem_k(DK, WG), vs = qs + fsa_qt_wg_smem_v(DK, DV, WG);
    // (The warp index through a shuffle: the compiler then knows it is the
    // same on every lane, and the branch below is warp-uniform.)
    const int lane = threadIdx.x & 31, warp = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0);

    ProducerRing<STAGES> ring;
    ring.init(qs + fsa_qt_wg_smem_bars(DK, DV, WG), 128, CONSUMERS);
    __syncthreads();  // the mbarriers are initialized

    if (warp >= CONSUMERS / 32) {
        // The producer.
        wg_regs_dec<fsa_qt_ws_producer_regs(WG)>();
        WsStageCopies<KS, DK, DV> copies;
        copies.init((int)threadIdx.x - CONSUMERS, ks, vs);
        ring.produce(n_stages, [&](int j, int buf) { copies(buf, keys, j); }, [] { wg_fence_async_smem(); });
        return;
    }

    wg_regs_inc<fsa_qt_ws_consumer_regs(WG)>();
    // Each consumer copies its own 64 query rows (while the producer copies the first stages), and
    // waits for them once: only its own warpgroup reads them (named barrier 1 + cw of 128 threads).
    const int cw = warp >> 2;
    const u32 q_rows = qs + (u32)cw * 64 * 128;  // this warpgroup's 64 rows of every Q panel
    load_query_part_sw128_async<G, DK, 128, ROWS, 64>(qs, q, tile, h, 64 * cw, (int)threadIdx.x & 127);
    cp_async_commit();
    cp_async_wait<0>();
    wg_fence_async_smem();
    named_bar_sync(1 + cw, 128);

    int item = 0;
    ws_consume_tile<DT, DK, DV, G, ROWS>(ring, item, n_stages, q_rows, ks, vs, scale_log2, lane, warp, visible, o, lse,
                                         total_tokens, tile, h);
}

// The persistent form (fsa_qt_ws_persistent): the CTA walks jobs w =
// blockIdx.x, + gridDim.x, ... < jobs.count(), each a query tile of one
// KV head: jobs.describe(w, job) fills a Jobs::Job (tile, h, n_stages, keys)
// or returns false for a spare tile, which every warp skips alike;
// jobs.visible(job, warp, lane) gives the rows' visible(j, slot). Per tile
// the arithmetic of attend_query_tile_ws, so the same bits. What a CTA per
// tile paid at each tile's start and end goes under the neighbouring tiles:
// the ring's items are numbered across tiles, so the producer fills the next
// tile's first stages while the consumers finish the current one, and a
// consumer copies its next tile's query rows into the other query buffer
// (fsa_qt_ws_smem_q2) while it computes the current one.
template <class DT, int DK, int DV, int G, int WG, class Jobs>
__device__ __forceinline__ void attend_query_tiles_ws(unsigned char *smem, const fsa_kernel_view &q,
                                                      const fsa_kernel_view &o, float *lse, long long total_tokens,
                                                      float scale_log2, const Jobs &jobs) {
    constexpr int KS = fsa_qt_fwd_keys(DV), ROWS = fsa_qt_wg_rows(WG);
    constexpr int CONSUMERS = 128 * fsa_qt_wg_groups(WG), STAGES = FSA_QT_WS_PERSISTENT_STAGES;
    const u32 qs = (smem_addr(smem) + (FSA_QT_WG_ALIGN - 1)) & ~(u32)(FSA_QT_WG_ALIGN - 1);
    const u32 ks = qs + fsa_qt_wg_smem_k(DK, WG), vs = qs + fsa_qt_ws_smem_v(DK, DV, WG);
    // Query buffer b (0 or 1) at qs + b * Q2.
    constexpr u32 Q2 = fsa_qt_ws_smem_q2(DK, DV, WG);
    const int lane = threadIdx.x & 31, warp = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0);
    const long long count = jobs.count();
    // The first job at or after w that has a tile (count: none).
    auto next_job = [&](long long w, typename Jobs::Job &job) -> long long {
        for (; w < count; w += gridDim.x)
            if (jobs.describe(w, job)) return w;
        return count;
    };

    ProducerRing<STAGES> ring;
    ring.init(qs + fsa_qt_ws_smem_bars(DK, DV, WG), 128, CONSUMERS);
    __syncthreads();  // the mbarriers are initialized

    typename Jobs::Job job;
    long long w = next_job(blockIdx.x, job);
    int item = 0;  // the ring's items, counted across tiles
    if (warp >= CONSUMERS / 32) {
        wg_regs_dec<fsa_qt_ws_producer_regs(WG)>();
        WsStageCopies<KS, DK, DV> copies;
        copies.init((int)threadIdx.x - CONSUMERS, ks, vs);
        const auto landed = [] { wg_fence_async_smem(); };
        for (; w < count; w = next_job(w + gridDim.x, job))
            for (int j = 0; j < job.n_stages; j++, item++) ring.push(item, [&](int buf) { copies(buf, job.keys, j); }, landed);
        ring.finish(item, landed);
        return;
    }

    wg_regs_inc<fsa_qt_ws_consumer_regs(WG)>();
    // Each consumer copies its own 64 query rows of every tile and waits for
    // them alone (named barrier 1 + cw of 128 threads); the copies of tile
    // n + 1 go out once every thread of the warpgroup is past tile n - 1,
    // whose buffer they overwrite.
    const int cw = warp >> 2, qt = (int)threadIdx.x & 127;
    if (w < count) load_query_part_sw128_async<G, DK, 128, ROWS, 64>(qs, q, job.tile, job.h, 64 * cw, qt);
    cp_async_commit();
    for (u32 b = 0; w < count; b ^= 1) {
        cp_async_wait<0>();
        wg_fence_async_smem();
        named_bar_sync(1 + cw, 128);
        long long w_next;
        {
            typename Jobs::Job next;
            w_next = next_job(w + gridDim.x, next);
            if (w_next < count)
                load_query_part_sw128_async<G, DK, 128, ROWS, 64>(qs + (b ^ 1) * Q2, q, next.tile, next.h, 64 * cw, qt);
            cp_async_commit();
        }

        const u32 q_rows = qs + b * Q2 + (u32)cw * 64 * 128;  // this warpgroup's 64 rows of every Q panel
        ws_consume_tile<DT, DK, DV, G, ROWS>(ring, item, job.n_stages, q_rows, ks, vs, scale_log2, lane, warp,
                                             jobs.visible(job, warp, lane), o, lse, total_tokens, job.tile, job.h);
        // (Described again rather than kept through the stages: registers.)
        w = w_next;
        if (w < count) jobs.describe(w, job);
    }
    cp_async_wait<0>();  // (no copy outlives the CTA)
}

}  // namespace fsa
