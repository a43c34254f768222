// Warp-level products (mma.sync, as fsa_mma.cuh) whose keys or values come
// from 128-byte swizzled tiles (sw128_offset, fsa_pipeline.cuh: what a
// tensor-map copy with the 128-byte swizzle writes) instead of padded
// row-major ones. Same instructions in the same order as their fsa_mma.cuh
// counterparts (mma_kqt, mma_vt_pt, mma_abt_a_regs, mma_pv over 16 keys), so
// the same bits from the same data.
//
// Addressing. Row r, 16-byte piece c of a tile of ROWS rows (1024-byte
// aligned) is at tile + (c / 8) * ROWS * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16.
// A lane reads one row and the pieces c0 + 2i (c0: 0 or 1, i: 16 columns at a
// time), which is (lane + (i / 4) * ROWS * 128) ^ ((i % 4) * 32) with the lane
// address sw128_lane(tile + r * 128, r, c0): one XOR per ldmatrix. Moving the
// tile base by a multiple of 8 rows (1024 bytes) is a plain add.
#pragma once
#include "fsa_mma.cuh"

namespace fsa {

__device__ __forceinline__ u32 sw128_lane(int r, int c0) { return (u32)(r * 128 + ((c0 ^ (r & 7)) << 4)); }
// The rows and pieces of ldm_lane_a / ldm_lane_b (fsa_mma.cuh), in a swizzled tile.
__device__ __forceinline__ u32 sw128_lane_a(int lane) { return sw128_lane((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4); }
__device__ __forceinline__ u32 sw128_lane_b(int lane) { return sw128_lane((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1); }

// Step i (columns 16 i .. 16 i + 15) of a lane address of a tile of ROWS rows.
template <int ROWS>
__device__ __forceinline__ u32 sw128_step(u32 lane_addr, int i) {
    return (lane_addr + (u32)(i >> 2) * ROWS * 128) ^ (u32)((i & 3) << 5);
}

// mma_kqt: s (16 keys x 8NQ rows) += K Q^T, K the 16 key rows at k_lane
// (their tile's base + sw128_lane_a) of a swizzled tile of ROWS rows.
template <class DT, int D, int NQ, int ROWS>
__device__ __forceinline__ void mma_kqt_sw(float s[NQ][4], u32 k_lane, const u32 q[D / 16][4]) {
    mma_kqt_at<DT, D, NQ>(s, [=](int kd) { return sw128_step<ROWS>(k_lane, kd); }, q);
}

// mma_vt_pt: o (O^T) += V^T P^T for 16 keys, V the 16 key rows at v_lane
// (+ sw128_lane_b) of a swizzled tile of ROWS rows.
template <class DT, int DV, int NQ, int ROWS>
__device__ __forceinline__ void mma_vt_pt_sw(float o[NQ][DV / 16][4], const float p[NQ][4], u32 v_lane) {
    mma_vt_pt_at<DT, DV, NQ>(o, p, [=](int t) { return sw128_step<ROWS>(v_lane, t); });
}

// mma_abt_a_regs for 16 keys: acc (16 rows x 16 keys) += A K^T, A in
// registers (a[kd]), K the 16 key rows at k_lane (+ sw128_lane_b).
template <class DT, int D, int ROWS>
__device__ __forceinline__ void mma_abt_a_regs_sw(float acc[2][4], const u32 a[D / 16][4], u32 k_lane) {
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++) {
        u32 b[4];
        ldmatrix_x4(b, sw128_step<ROWS>(k_lane, kd));
        DT::mma(acc[0], a[kd], b[0], b[1]);
        DT::mma(acc[1], a[kd], b[2], b[3]);
    }
}

// mma_pv for 16 keys: acc (16 x 8N) += P V, P the 16 x 16 accumulator
// fragments, V the 16 key rows at v_lane (+ sw128_lane_a).
template <class DT, int N, int ROWS>
__device__ __forceinline__ void mma_pv_sw(float acc[N][4], const float p[2][4], u32 v_lane) {
    u32 a[4];
    frag_to_a<DT>(a, p[0], p[1]);
#pragma unroll
    for (int dn = 0; dn < N; dn += 2) {
        u32 b[4];
        ldmatrix_x4_trans(b, sw128_step<ROWS>(v_lane, dn >> 1));
        DT::mma(acc[dn], a, b[0], b[1]);
        DT::mma(acc[dn + 1], a, b[2], b[3]);
    }
}

}  // namespace fsa
