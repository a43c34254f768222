// Backward, first step: delta = rowsum(dout * o) for every (query head,
// token) of the chunk, in fp32 (also the gate's gradient, p.gate_grad, when
// wanted); rows of DV (the value head dim). A row takes 8, 16 or 32 lanes,
// each holding 16-byte pieces.
#include "sel_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DV = {{VALUE_DIM}};
constexpr int PIECES = DV / 8;
constexpr int LANES = fsa_row_lanes(DV);
constexpr int ROWS_PER_WARP = 32 / LANES;

__device__ __forceinline__ float dot8(const uint4 &a, const uint4 &b) {
    float x[8], y[8];
    unpack8<DT>(x, a);
    unpack8<DT>(y, b);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += x[i] * y[i];
    return s;
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_bwd_prep(const fsa_sel_params p) {
    const int lane = threadIdx.x & 31;
    const int sub = lane / LANES, l = lane - sub * LANES;
    const long long row = ((long long)blockIdx.x * (FSA_ROW_THREADS / 32) + (threadIdx.x >> 5)) * ROWS_PER_WARP + sub;
    const long long hq = p.num_q_heads;
    const bool live = row < p.tc * hq;
    const long long tl = live ? row / hq : 0;
    const int qh = live ? (int)(row - tl * hq) : 0;
    const long long t = p.t0 + tl;
    float s = 0.f;
    if (live && l < PIECES) {
        const uint4 o = *(const uint4 *)(view_row<const u16>(p.o, t, qh) + l * 8);
        const uint4 d = *(const uint4 *)(view_row<const u16>(p.dout, t, qh) + l * 8);
        s = dot8(o, d);
    }
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (live && l == 0) {
        ((float *)p.delta)[(long long)qh * p.tc + tl] = s;
        if (p.gate_grad.ptr != 0) *view_row<float>(p.gate_grad, t, qh) = s;
    }
}
