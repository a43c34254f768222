// Warpgroup blocks of a backward whose warpgroup rows are keys (sm_90a only):
// the scores and their gradient's products of a key tile against query rows
// (S^T = K Q^T, dP^T = V dO^T), and products with both operands MN-major in
// swizzled shared memory: d (64 x N) = A B where A is stored transposed, as K
// rows of its 64 columns, and B as K rows of N columns. A warpgroup that
// holds a product's transpose in its accumulators (dS^T of keys x query rows)
// stores it once (frag_store_rows_sw128) and reads it back as the A operand
// of the product along the other dimension (dQ = dS K, with the key tile as
// B), with no transpose in registers.
#pragma once
#include "fsa_wgmma.cuh"

namespace fsa {

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

// S^T = K Q^T and dP^T = V dO^T of the warpgroup's 64 keys (swizzled K and
// V tiles of 64 rows) against the N query rows of swizzled Q and dO tiles of
// N rows, each its own group; waits for S^T (dP^T may still run: the
// caller's next wg_wait<1> after one more group, or wg_wait<0>).
template <class DT, int DK, int DV, int N>
__device__ __forceinline__ void wg_scores_t(float (&st)[N / 8][4], float (&dpt)[N / 8][4], u32 k_tile, u32 v_tile,
                                            u32 q_tile, u32 do_tile) {
    wg_mma_abt<DT, DK, N, 64, false>(st, k_tile, q_tile);
    wg_commit();
    wg_mma_abt<DT, DV, N, 64, false>(dpt, v_tile, do_tile);
    wg_commit();
    wg_wait<1>();
    wg_hold<N / 8>(st);
}

}  // namespace fsa
