// Hopper tensor-map copies (TMA, sm_90a) and the mbarriers they complete on.
// A tensor map (128 bytes, encoded on the host by cuTensorMapEncodeTiled and
// passed inside a __grid_constant__ kernel parameter) describes a global
// tensor; one thread copies a box of it into shared memory with one
// instruction, and the box's bytes count down the transaction count of an
// mbarrier in shared memory. Use:
//   one thread, once:  mbar_init(bar, arrivals); fence_mbar_init(); then a CTA barrier;
//   per phase:         the producer thread mbar_expect_tx(bar, bytes) and its
//                      tma_load_4d copies; the other arriving threads mbar_arrive(bar)
//                      (after their shared-memory writes that the readers need);
//   readers:           mbar_wait(bar, parity), parity = the barrier's completed phases & 1.
// Shared memory that ordinary stores (or cp.async) wrote and a later copy
// overwrites: the writing threads fence it into the async proxy
// (wg_fence_async_smem) before the CTA barrier that precedes the copy.
#pragma once
#include "fsa_device.cuh"
#include "fsa_mbarrier.cuh"  // mbar_init, mbar_arrive, mbar_wait

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FSA_TMA_ASM(...) asm volatile(__VA_ARGS__)
#else
// Other targets never call these (their kernels copy with cp.async); a call trips.
#define FSA_TMA_ASM(...) __trap()
#endif

namespace fsa {

// Makes the initializations visible to the async proxy (the copies' completion).
__device__ __forceinline__ void fence_mbar_init() { FSA_TMA_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// This thread's arrival, announcing `bytes` of copies that complete on the barrier.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    FSA_TMA_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// The box of a 4-dimensional tensor map at coordinates (c0 .. c3, elements,
// innermost first) into shared memory at dst (aligned as the map's swizzle
// needs: 1024 bytes for the 128-byte swizzle); map: the generic address of
// the map (a __grid_constant__ parameter's field).
__device__ __forceinline__ void tma_load_4d(u32 dst, const void *map, u32 bar, int c0, int c1, int c2, int c3) {
    FSA_TMA_ASM(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
            dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

// The same with an L2 cache policy (fsa_device.cuh: l2_evict_first) for the box's lines.
__device__ __forceinline__ void tma_load_4d_hint(u32 dst, const void *map, u32 bar, int c0, int c1, int c2, int c3,
                                                 u64 policy) {
    FSA_TMA_ASM(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, "
        "%4, %5}], [%6], %7;\n" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
        : "memory");
}

}  // namespace fsa
