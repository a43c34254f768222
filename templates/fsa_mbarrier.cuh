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

// A ring of STAGES buffers of items 0 .. n - 1 that every one of THREADS
// threads fills with its own cp.async copies (load(j, buf) issues them).
// `full` mbarriers say an item has landed (each thread arrives once its own
// copies of it are complete, after `landed()`, e.g. the async-proxy fence
// wgmma readers need); `empty` ones that every thread is done with a buffer.
//   ring.init(bars, THREADS);  // thread 0; then a CTA barrier
//   ring.start(n, load, landed);
//   for (i ...) {
//       ring.wait(i);           // item i has landed
//       ... read buffer i % STAGES ...
//       ring.release(i);        // this thread is done reading it
//       ring.advance(i, load, landed);  // signal item i + A - 1, refill buffer (i - LAG) % STAGES with item i + A
//   }
// with A = STAGES - LAG items ahead: items i + 1 .. i + A - 1 are in flight
// while item i is used, and item i + 1 may be waited for before advance(i)
// (it was signalled by advance(i + 2 - A)). A thread waits in advance(i)
// until every thread has released item i - LAG. So a warp can run ahead of
// the slowest by about A - 2 items before it waits for an item to be
// signalled, and by about LAG before it waits to refill a buffer: STAGES 3,
// LAG 0 (one item, less than one) as the forwards use it; STAGES 6, LAG 2
// (about two) for warps whose work differs from item to item.
template <int STAGES = 3, int LAG = 0>
struct MbarRing {
    static constexpr int A = STAGES - LAG;  // items issued ahead of the one in use, plus one
    static_assert(LAG >= 0 && A >= 3, "item i + 1 is signalled before item i is done");
    u32 bars;  // STAGES `full` mbarriers, then STAGES `empty` ones
    int n;

    static constexpr int BYTES = 2 * STAGES * 8;
    __device__ __forceinline__ void init(u32 at, int threads) {
        bars = at;
        if (threadIdx.x == 0)
#pragma unroll
            for (int b = 0; b < 2 * STAGES; b++) mbar_init(at + 8 * b, (u32)threads);
    }
    __device__ __forceinline__ u32 full(int i) const { return bars + 8 * (u32)((unsigned)i % STAGES); }
    __device__ __forceinline__ u32 empty(int i) const { return bars + 8 * (u32)(STAGES + (unsigned)i % STAGES); }
    static __device__ __forceinline__ u32 parity(int i) { return ((unsigned)i / STAGES) & 1u; }
    static __device__ __forceinline__ int buffer(int i) { return (int)((unsigned)i % STAGES); }

    // Items 0 .. A - 1 issued (one cp.async group each), items 0 .. A - 2
    // signalled as they land; the buffers from A on stay empty until
    // advance(0 .. LAG - 1) fills them.
    template <class Load, class Landed>
    __device__ __forceinline__ void start(int count, Load load, Landed landed) {
        n = count;
#pragma unroll
        for (int j = 0; j < A; j++) {
            if (j < n) load(j, j);
            cp_async_commit();
        }
        signal_from<0>(landed);
    }
    // Items J .. A - 2 of start as they land (the wait depth a constant).
    template <int J, class Landed>
    __device__ __forceinline__ void signal_from(Landed landed) const {
        if constexpr (J + 1 < A) {
            cp_async_wait<A - 1 - J>();
            landed();
            mbar_arrive(full(J));
            signal_from<J + 1>(landed);
        }
    }
    __device__ __forceinline__ void wait(int i) const { mbar_wait(full(i), parity(i)); }
    __device__ __forceinline__ void release(int i) const { mbar_arrive(empty(i)); }
    // This thread's copies of item i + A - 1 (the last group it committed)
    // are waited for and signalled; then, once every thread has released
    // item i - LAG (none before item 0), item i + A goes into its buffer.
    template <class Load, class Landed>
    __device__ __forceinline__ void advance(int i, Load load, Landed landed) const {
        cp_async_wait<0>();
        landed();
        mbar_arrive(full(i + A - 1));
        const int j = i + A;
        if (j < n) {
            if (LAG == 0 || i >= LAG) mbar_wait(empty(i - LAG), parity(i - LAG));
            load(j, buffer(j));
        }
        cp_async_commit();
    }
};

}  // namespace fsa
