// Thread-block clusters (sm_90 and later): a CTA's rank in its cluster, the
// cluster-wide barrier, and reads of another CTA's shared memory (distributed
// shared memory). FSA_HAS_CLUSTERS says whether the target has them; on older
// targets the functions exist (so `if constexpr` branches compile) but trap.
// A kernel launched without cluster dimensions is a cluster of one CTA.
#pragma once
#include "fsa_device.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FSA_HAS_CLUSTERS 1
#else
#define FSA_HAS_CLUSTERS 0
#endif

namespace fsa {

#if FSA_HAS_CLUSTERS
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster: shared-memory writes before it
// are visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The address of this CTA's shared byte address `addr` in the shared memory of
// CTA `rank` of the cluster (the same variable there).
__device__ __forceinline__ u32 cluster_map(u32 addr, unsigned rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ float cluster_ld_f32(u32 addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float4 cluster_ld_f32x4(u32 addr) {  // 16-byte aligned
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
#else
__device__ __forceinline__ unsigned cluster_rank() { return 0; }
__device__ __forceinline__ void cluster_sync() { __trap(); }
__device__ __forceinline__ u32 cluster_map(u32, unsigned) {
    __trap();
    return 0;
}
__device__ __forceinline__ float cluster_ld_f32(u32) {
    __trap();
    return 0.f;
}
__device__ __forceinline__ float4 cluster_ld_f32x4(u32) {
    __trap();
    return make_float4(0.f, 0.f, 0.f, 0.f);
}
#endif

}  // namespace fsa
