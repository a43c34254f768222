// Bulk asynchronous copies (sm_90: cp.async.bulk, the copy engine without a
// tensor map) completing on shared-memory transaction barriers (mbarrier).
// One instruction copies a whole contiguous row (16-byte multiples, 16-byte
// aligned at both ends) instead of a 16-byte piece per thread, and the copy
// is done when the barrier's phase completes: every thread may wait on it,
// with no per-thread commit groups. FSA_HAS_BULK says whether the target
// has them (sm_80 keeps cp.async).
#pragma once
#include "fsa_device.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FSA_HAS_BULK 1
#else
#define FSA_HAS_BULK 0
#endif

namespace fsa {

#if FSA_HAS_BULK
// A barrier at shared byte address bar expecting `count` arrivals per phase;
// mbar_init_fence makes the initialization visible to the copy engine (then
// a CTA barrier before any thread uses it).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival; with expect_tx, also the bytes that copies will complete on
// the barrier in this phase (the phase ends when every arrival is in and
// those bytes have landed).
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` (0 for the barrier's first
// phase, then alternating) has completed; its copies are then visible.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// Orders this thread's earlier generic-proxy shared-memory accesses before
// its later bulk copies into the same memory (a buffer that was read or
// written with ordinary instructions and is now refilled by the engine).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Copies `bytes` (a multiple of 16) from global src to shared dst (both
// 16-byte aligned), completing them on the barrier at bar.
__device__ __forceinline__ void bulk_copy_g2s(u32 dst, const void *src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
#endif

// Zeroes `bytes` (a multiple of 16) of shared memory at dst with one thread.
__device__ __forceinline__ void smem_zero_row(u32 dst, int bytes) {
    for (int i = 0; i < bytes; i += 16)
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(dst + i), "r"(0u) : "memory");
}

}  // namespace fsa
