// Device helpers shared by every kernel: integer types, constants, tensor
// views, bf16/fp16 packing, tensor-core mma, ldmatrix, cp.async, fast
// exp2/log2 and warp reductions. NVRTC compiles it without any CUDA header.
#pragma once
#include "fsa_layout.cuh"

namespace fsa {

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;
typedef long long i64;

#define FSA_INF __int_as_float(0x7f800000)
constexpr float LOG2E = (float)FSA_LOG2E;  // e^x = 2^(x * LOG2E)
constexpr float LN2 = (float)FSA_LN2;      // log2-sum-exp * LN2 = log-sum-exp

// Pick<C, A, B>::type: A when C, else B (NVRTC builds without <type_traits>).
template <bool C, class A, class B>
struct Pick {
    typedef A type;
};
template <class A, class B>
struct Pick<false, A, B> {
    typedef B type;
};

// Row (token, head) of a tensor view, as T elements.
template <class T>
__device__ __forceinline__ T *view_row(const fsa_kernel_view &v, long long token, long long head) {
    return (T *)v.ptr + token * v.token_stride + head * v.head_stride;
}

// ---------------------------------------------------------------- dtypes
// The element type of q/k/v/o. `pack` puts `lo` in the low half (the lower
// column), matching the operand layout of mma and of memory.
struct dtype_bf16 {
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        u32 r;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
        return r;
    }
    static __device__ __forceinline__ float to_float(u16 x) {
        return __uint_as_float(((u32)x) << 16);
    }
    // D = A * B + D, A 16x16 row-major, B 16x8 column-major, fp32 accumulate.
    static __device__ __forceinline__ void mma(float d[4], const u32 a[4], u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

struct dtype_f16 {
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        u32 r;
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
        return r;
    }
    static __device__ __forceinline__ float to_float(u16 x) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
        return f;
    }
    static __device__ __forceinline__ void mma(float d[4], const u32 a[4], u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// ---------------------------------------------------------------- 16-byte pieces
// Eight DT elements (one 16-byte load or store) to and from floats, in order.
template <class DT>
__device__ __forceinline__ void unpack8(float out[8], const uint4 &v) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = DT::to_float((u16)(w[i] & 0xffffu));
        out[2 * i + 1] = DT::to_float((u16)(w[i] >> 16));
    }
}
template <class DT>
__device__ __forceinline__ uint4 pack8(const float a[8]) {
    uint4 out;
    out.x = DT::pack(a[0], a[1]);
    out.y = DT::pack(a[2], a[3]);
    out.z = DT::pack(a[4], a[5]);
    out.w = DT::pack(a[6], a[7]);
    return out;
}

// ---------------------------------------------------------------- shared memory
__device__ __forceinline__ u32 smem_addr(const void *p) {
    u32 r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// Four 8x8 b16 matrices; lane i supplies the row address of matrix i/8, row
// i%8. Register j of every lane holds two elements of matrix j.
__device__ __forceinline__ void ldmatrix_x4(u32 r[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2(u32 r[2], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2_trans(u32 r[2], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

// ---------------------------------------------------------------- cp.async
// 16-byte global -> shared copy; when `valid` is false nothing is read and the
// destination is zero-filled (the source must still be a mapped address).
__device__ __forceinline__ void cp_async16(u32 dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n));
}
// The same with an L2 cache policy (l2_evict_last / l2_evict_first) for the line it reads.
__device__ __forceinline__ void cp_async16_hint(u32 dst, const void *src, u64 policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(policy));
}
// L2 policies (sm_80+; for the *_hint copies): lines kept longer than normal ones
// (evict_last), or the first to go (evict_first): data read once (a stream) then
// replaces itself instead of the lines other work left in L2 (dirty ones would cost
// a write-back each).
__device__ __forceinline__ u64 l2_evict_last() {
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ u64 l2_evict_first() {
    u64 p = 0;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0;\n" : "=l"(p));
    return p;
}
// A 16-byte store of streaming data (read once, later): evict-first in L2
// (.cs), so that it does not push out lines that are read again soon.
__device__ __forceinline__ void st_global_cs16(void *dst, uint4 v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Named barrier `id` (1 to 15; 0 is __syncthreads) of `threads` threads (a multiple of 32): waits
// until that many have reached it.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// The CTA barrier for threads that reach it from different code (warpgroups
// with roles of their own): barrier.sync without .aligned. __syncthreads is
// the aligned form, which requires every thread at the same instruction.
__device__ __forceinline__ void cta_bar_sync_unaligned() { asm volatile("barrier.sync 0;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }
// Asks L2 for the 128-byte line holding `addr` (a hint: nothing waits for it;
// `addr` must lie inside an allocation).
__device__ __forceinline__ void prefetch_l2(const void *addr) { asm volatile("prefetch.global.L2 [%0];" ::"l"(addr)); }

// Stores by state space. A pointer from a kernel parameter (or one that may
// point at either space) compiles to a generic store, which the hardware must
// resolve before it knows the store is not to shared memory; these name the
// space instead. (In the paged-cache epilogue and merge, where they replaced
// generic stores, the measured difference was under 1%: bench/NOTES.md, dec.)
__device__ __forceinline__ void st_global_f32(float *p, float a) {
    asm volatile("st.global.f32 [%0], %1;" ::"l"(p), "f"(a) : "memory");
}
__device__ __forceinline__ void st_global_f32x2(float *p, float a, float b) {  // 8-byte aligned
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void st_global_u32(void *p, u32 a) {
    asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(a) : "memory");
}
__device__ __forceinline__ void st_global_u32x2(void *p, u32 a, u32 b) {  // 8-byte aligned
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b) : "memory");
}
// The same with an L2 cache policy (l2_evict_last / l2_evict_first) for the line written.
__device__ __forceinline__ void st_global_f32_hint(float *p, float a, u64 policy) {
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(a), "l"(policy) : "memory");
}
__device__ __forceinline__ void st_global_f32x2_hint(float *p, float a, float b, u64 policy) {  // 8-byte aligned
    asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" ::"l"(p), "f"(a), "f"(b), "l"(policy)
                 : "memory");
}
// Scratch whose contents are dead: the 128-byte L2 line at `line` (aligned) is
// dropped without a write-back (its contents become undefined).
__device__ __forceinline__ void discard_l2_line(const void *line) {
    asm volatile("discard.global.L2 [%0], 128;" ::"l"(line) : "memory");
}
__device__ __forceinline__ void st_shared_f32(u32 addr, float a) {
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(a) : "memory");
}
__device__ __forceinline__ void st_shared_f32x2(u32 addr, float a, float b) {  // 8-byte aligned
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// ---------------------------------------------------------------- math
__device__ __forceinline__ float fast_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float fast_log2(float x) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}
// Reductions over the 4 lanes that share a row of an mma accumulator.
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace fsa
