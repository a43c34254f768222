// NSA's gates as device blocks: a row of the [T, H, Dv] tensors is taken 8
// columns at a time by a group of neighbouring lanes (gate_params.cuh);
// values move as 16-byte pieces and are summed in fp32.
#pragma once
#include "fsa_device.cuh"
#include "gate_params.cuh"

namespace fsa {

// 8 columns of a row, as floats.
template <class DT>
__device__ __forceinline__ void load8(float f[8], const u16 *src) {
    const uint4 v = *(const uint4 *)src;
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = DT::to_float((u16)(w[i] & 0xffffu));
        f[2 * i + 1] = DT::to_float((u16)(w[i] >> 16));
    }
}

template <class DT>
__device__ __forceinline__ void store8(u16 *dst, const float f[8]) {
    *(uint4 *)dst = make_uint4(DT::pack(f[0], f[1]), DT::pack(f[2], f[3]), DT::pack(f[4], f[5]), DT::pack(f[6], f[7]));
}

// One branch's gate of row (t, h).
__device__ __forceinline__ float gate_of(const fsa_kernel_view &g, long long t, long long h) {
    return *((const float *)g.ptr + t * g.token_stride + h * g.head_stride);
}

// f(t, h, col, live) for every row of the call, on the rows' lane groups:
// col is this lane's first column, live whether it has one (a row of Dv
// columns takes Dv / 8 lanes of its group). Every lane of a warp runs the
// same number of steps (live false past the last row), so f may shuffle
// across the group.
template <int DV, class F>
__device__ __forceinline__ void for_gate_rows(const fsa_gate_params &p, F f) {
    constexpr int LANES = fsa_gate_row_lanes(DV), ROWS_PER_WARP = 32 / LANES;
    const long long rows = p.total_tokens * p.heads;
    const int lane = threadIdx.x & 31, col = (lane % LANES) * 8;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long warps = (gridDim.x * (long long)blockDim.x) >> 5;
    for (long long r0 = warp * ROWS_PER_WARP; r0 < rows; r0 += warps * ROWS_PER_WARP) {
        const long long r = r0 + lane / LANES;
        const bool live = r < rows && col < DV;
        const long long t = r < rows ? r / p.heads : 0, h = r < rows ? r % p.heads : 0;
        f(t, h, col, live);
    }
}

// The sum of v over a row's lane group (every lane of the group gets it).
template <int LANES>
__device__ __forceinline__ float gate_row_sum(float v) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

}  // namespace fsa
