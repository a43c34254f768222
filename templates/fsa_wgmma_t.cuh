// Hopper warpgroup products with both operands MN-major in swizzled shared
// memory (sm_90a only): d (64 x N) = A B where A is stored transposed, as K
// rows of its 64 columns, and B as K rows of N columns. A kernel whose
// warpgroup holds a product's transpose in its accumulators (dS^T of keys x
// query rows, say) stores it once (frag_store_rows_sw128) and reads it back
// as the A operand of the product along the other dimension (dQ = dS K, with
// the key tile as B), with no transpose in registers.
#pragma once
#include "fsa_wgmma.cuh"

namespace fsa {

// One m64nNk16 step: A and B from descriptors, both transposed (MN-major).
#define FSA_WG_SS_TT(TY, N, NJ, REGS, ACC, SC, TAIL)                                                           \
    __device__ __forceinline__ void wg_mma_ss_tt(dtype_##TY, float (&d)[NJ][4], u64 a, u64 b, int scale_d) {  \
        FSA_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\n"                                              \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " " REGS ", " TAIL ";\n}\n"   \
                   : ACC                                                                                       \
                   : "l"(a), "l"(b), "r"(scale_d));                                                            \
    }
// A, B descriptors, then scale-d p, scale-a, scale-b 1, both transposed.
FSA_WG_SS_TT(bf16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%34", "%32, %33, p, 1, 1, 1, 1")
FSA_WG_SS_TT(f16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%34", "%32, %33, p, 1, 1, 1, 1")
#undef FSA_WG_SS_TT

// d (64 x N) = A B (+ d with ACCUMULATE) over a depth of K (a multiple of
// 16): A^T the swizzled tile at at_tile of K rows x 64 columns, B the
// swizzled tile at b_tile of K rows x N columns (N a multiple of 64, read in
// 64-column panels). Fences, then issues; the caller commits and waits.
template <class DT, int K, int N, bool ACCUMULATE = false>
__device__ __forceinline__ void wg_mma_atb(float (&d)[N / 8][4], u32 at_tile, u32 b_tile) {
    static_assert(N % 64 == 0, "B in whole 64-column panels");
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++)
#pragma unroll
        for (int c = 0; c < N / 64; c++)
            wg_mma_ss_tt(DT(), *reinterpret_cast<float(*)[8][4]>(&d[8 * c]), wg_desc_mn(at_tile, K, kk, 0),
                         wg_desc_mn(b_tile, K, kk, c), ACCUMULATE || kk > 0);
}

}  // namespace fsa
