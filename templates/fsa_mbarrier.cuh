// Shared-memory mbarriers (sm_90; fsa_tma.cuh's copies complete on them too)
// and a ring of cp.async buffers guarded by them instead of CTA barriers, so
// that the CTA's warps need not meet at every item: a warp waits only until
// the item it needs has landed and, to refill a buffer, until every thread
// is done with it.
#pragma once
#include "fsa_device.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FSA_MBAR_ASM(...) asm volatile(__VA_ARGS__)
#else
// Earlier targets never call these (their kernels use CTA barriers); a call trips.
#define FSA_MBAR_ASM(...) __trap()
#endif

namespace fsa {

// The mbarrier at shared address bar (8 bytes, 8-byte aligned) expects
// `count` arrivals per phase. Initialized by one thread; the CTA meets at a
// barrier before anyone else uses it.
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    FSA_MBAR_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival (release: this thread's earlier writes are visible to whoever
// waits for the phase to complete).
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    FSA_MBAR_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits (acquire) until the phase of parity `parity` (phase k: k & 1) has
// completed. A waiter must not fall two phases behind (counts that include
// every waiter guarantee it).
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    do {
        FSA_MBAR_ASM("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

// The mbarriers of a ring of STAGES buffers: STAGES `full` ones (item i has
// landed in buffer i % STAGES), then STAGES `empty` ones (every reader is done
// with it); item i's phase is (i / STAGES) & 1. The rings below add who fills
// the buffers.
template <int STAGES>
struct MbarPairs {
    u32 bars;

    static constexpr int BYTES = 2 * STAGES * 8;
    __device__ __forceinline__ u32 full(int i) const { return bars + 8 * (u32)((unsigned)i % STAGES); }
    __device__ __forceinline__ u32 empty(int i) const { return bars + 8 * (u32)(STAGES + (unsigned)i % STAGES); }
    static __device__ __forceinline__ u32 parity(int i) { return ((unsigned)i / STAGES) & 1u; }
    __device__ __forceinline__ void wait(int i) const { mbar_wait(full(i), parity(i)); }
    __device__ __forceinline__ void release(int i) const { mbar_arrive(empty(i)); }
};

// A ring of STAGES buffers of items 0 .. n - 1 that every one of THREADS
// threads fills with its own cp.async copies (load(j, buf) issues them).
// `full` mbarriers say an item has landed (each thread arrives once its own
// copies of it are complete, after `landed()`, e.g. the async-proxy fence
// wgmma readers need); `empty` ones that every thread is done with a buffer.
//   ring.init(bars, THREADS);  // thread 0; then a CTA barrier
//   ring.start(n, load, landed);
//   for (i ...) {
//       ring.wait(i);           // item i has landed
//       ... read buffer i % 3 ...
//       ring.release(i);        // this thread is done reading it
//       ring.advance(i, load, landed);  // signal item i + 2, refill buffer i % 3 with item i + 3
//   }
// Items i + 1 and i + 2 are in flight while item i is used, and item i + 1
// may be waited for before advance(i) (it was signalled by advance(i - 1)):
// a warp can run ahead of the slowest by about one item.
template <int STAGES = 3>
struct MbarRing : MbarPairs<STAGES> {
    static_assert(STAGES == 3, "three buffers (item i + 1 is signalled before item i is done)");
    using MbarPairs<STAGES>::full;
    using MbarPairs<STAGES>::empty;
    using MbarPairs<STAGES>::parity;
    int n;

    __device__ __forceinline__ void init(u32 at, int threads) {
        this->bars = at;
        if (threadIdx.x == 0)
#pragma unroll
            for (int b = 0; b < 2 * STAGES; b++) mbar_init(at + 8 * b, (u32)threads);
    }

    // Items 0 .. STAGES - 1 issued (one cp.async group each), items 0 ..
    // STAGES - 2 signalled as they land.
    template <class Load, class Landed>
    __device__ __forceinline__ void start(int count, Load load, Landed landed) {
        n = count;
#pragma unroll
        for (int j = 0; j < STAGES; j++) {
            if (j < n) load(j, j);
            cp_async_commit();
        }
        cp_async_wait<2>();
        landed();
        mbar_arrive(full(0));
        cp_async_wait<1>();
        landed();
        mbar_arrive(full(1));
    }
    // This thread's copies of item i + STAGES - 1 (the last group it
    // committed) are waited for and signalled; then, once every thread has
    // released item i, item i + STAGES goes into its buffer.
    template <class Load, class Landed>
    __device__ __forceinline__ void advance(int i, Load load, Landed landed) const {
        cp_async_wait<0>();
        landed();
        mbar_arrive(full(i + STAGES - 1));
        const int j = i + STAGES;
        if (j < n) {
            mbar_wait(empty(i), parity(i));
            load(j, (int)((unsigned)j % STAGES));
        }
        cp_async_commit();
    }
};

// A ring of STAGES buffers that a producer group of threads alone fills
// with cp.async (warp specialization: fsa_qattn_ws.cuh) and consumer threads
// only read. `full` mbarriers count the producers (each arrives once its own
// copies of the item have landed, after `landed()`), `empty` ones the
// consumers (each arrives once it is done reading the buffer).
//   ring.init(bars, producers, consumers);  // thread 0; then a CTA barrier
//   producers: ring.produce(n, load, landed);
//   consumers: for (i ...) { ring.wait(i); ... read buffer i % STAGES ...; ring.release(i); }
template <int STAGES>
struct ProducerRing : MbarPairs<STAGES> {
    using MbarPairs<STAGES>::full;
    using MbarPairs<STAGES>::empty;
    using MbarPairs<STAGES>::parity;

    __device__ __forceinline__ void init(u32 at, int producers, int consumers) {
        this->bars = at;
        if (threadIdx.x == 0)
#pragma unroll
            for (int b = 0; b < STAGES; b++) {
                mbar_init(at + 8 * b, (u32)producers);
                mbar_init(at + 8 * (STAGES + b), (u32)consumers);
            }
    }
    // Items 0 .. n - 1, each (load(j, buf): this thread's copies) into its
    // buffer once the consumers released the item STAGES before it; an item
    // is signalled once the next one is issued (two in flight) or, the last,
    // once it has landed.
    template <class Load, class Landed>
    __device__ __forceinline__ void produce(int n, Load load, Landed landed) const {
        for (int j = 0; j < n; j++) push(j, [&](int buf) { load(j, buf); }, landed);
        finish(n, landed);
    }
    // The same one item at a time, for producers whose items come from
    // several sources (a persistent CTA's tiles): item j (load(buf)), then,
    // after the last, finish(n).
    template <class Load, class Landed>
    __device__ __forceinline__ void push(int j, Load load, Landed landed) const {
        if (j >= STAGES) mbar_wait(empty(j - STAGES), parity(j - STAGES));
        load((int)((unsigned)j % STAGES));
        cp_async_commit();
        if (j > 0) {
            cp_async_wait<1>();
            landed();
            mbar_arrive(full(j - 1));
        }
    }
    template <class Landed>
    __device__ __forceinline__ void finish(int n, Landed landed) const {
        cp_async_wait<0>();
        if (n > 0) {
            landed();
            mbar_arrive(full(n - 1));
        }
    }
};

}  // namespace fsa
