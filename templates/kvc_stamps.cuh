// Per-CTA phase stamps of the paged-cache kernel, for measuring where a
// decode call's time goes (kvc_params.cuh: the record's words). Only the
// debug variant of the kernel (FSA_KVC_STAMPS at plan creation) has ON;
// every member is empty otherwise, so the normal kernels' machine code does
// not change. Thread 0 writes: stamps taken right after a CTA barrier are the
// CTA's; the others are thread 0's (warp 0 also computes, so its view of a
// stage is one warp's).
#pragma once
#include "kvc_params.cuh"

namespace fsa {

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Stamp words go out by st.global (the buffer is global memory; a generic
// store would first have to be resolved to a space).
__device__ __forceinline__ void st_global_u64(unsigned long long *p, unsigned long long v) {
    asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

template <bool ON>
struct KvcStamps {
    unsigned long long *rec = nullptr;
    long long wait = 0, t_acq = 0;
    int stages = 0;
    unsigned long long flags = 1;

    __device__ __forceinline__ void begin(const fsa_kvc_params &p) {
        if constexpr (ON) {
            const long long i = (long long)blockIdx.y * gridDim.x + blockIdx.x;
            if (threadIdx.x != 0 || p.stamps == 0 || i >= FSA_KVC_STAMP_CTAS) return;
            rec = (unsigned long long *)p.stamps + i * FSA_KVC_STAMP_WORDS;
            unsigned smid;
            asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
            st_global_u64(rec + FSA_KVC_ST_T_ENTRY, global_ns());
            st_global_u64(rec + FSA_KVC_ST_C_ENTRY, clock64());
            st_global_u64(rec + FSA_KVC_ST_SMID, smid);
        }
    }
    __device__ __forceinline__ void at(int word) {
        if constexpr (ON)
            if (rec) st_global_u64(rec + word, clock64());
    }
    __device__ __forceinline__ void flag(unsigned long long f) {
        if constexpr (ON)
            flags |= f;
    }
    __device__ __forceinline__ void share(int n, int what) {
        if constexpr (ON)
            if (rec && n < FSA_KVC_ST_MAX_SHARES)
                st_global_u64(rec + FSA_KVC_ST_SHARE0 + n * FSA_KVC_ST_PER_SHARE + what, clock64());
    }
    // Around a stage's acquire (barrier, the next stage's issue, the wait).
    __device__ __forceinline__ void acquire_begin() {
        if constexpr (ON)
            if (rec) t_acq = clock64();
    }
    __device__ __forceinline__ void acquire_end() {
        if constexpr (ON)
            if (rec) wait += clock64() - t_acq, stages++;
    }
    __device__ __forceinline__ void end(int shares) {
        if constexpr (ON)
            if (rec) {
                st_global_u64(rec + FSA_KVC_ST_SHARES, shares);
                st_global_u64(rec + FSA_KVC_ST_WAIT, wait);
                st_global_u64(rec + FSA_KVC_ST_STAGES, stages);
                st_global_u64(rec + FSA_KVC_ST_C_END, clock64());
                st_global_u64(rec + FSA_KVC_ST_T_END, global_ns());
                st_global_u64(rec + FSA_KVC_ST_FLAGS, flags);
            }
    }
};

}  // namespace fsa
