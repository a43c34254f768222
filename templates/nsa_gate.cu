// NSA's gates over the three branches' outputs (fsa_gate.cuh's rows):
//  fsa_gate_fwd: o = g_cmp o_cmp + g_sel o_sel + g_win o_win, in fp32, one
//                rounding per element;
//  fsa_gate_bwd: for each branch x, dout_x = g_x dout (where wanted) and
//                dgate_x = rowsum(dout o_x) in fp32, the lanes of a row
//                adding in a fixed order.
#include "fsa_gate.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DV = {{VALUE_DIM}};
constexpr int NB = FSA_GATE_BRANCHES;

extern "C" __global__ void __launch_bounds__(FSA_GATE_THREADS) fsa_gate_fwd(const fsa_gate_params p) {
    for_gate_rows<DV>(p, [&](long long t, long long h, int col, bool live) {
        if (!live) return;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, x[8];
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const float g = gate_of(p.gate[b], t, h);
            load8<DT>(x, view_row<const u16>(p.out[b], t, h) + col);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i] += g * x[i];
        }
        store8<DT>(view_row<u16>(p.o, t, h) + col, acc);
    });
}

extern "C" __global__ void __launch_bounds__(FSA_GATE_THREADS) fsa_gate_bwd(const fsa_gate_params p) {
    constexpr int LANES = fsa_gate_row_lanes(DV);
    const long long rows = p.total_tokens * p.heads;
    for_gate_rows<DV>(p, [&](long long t, long long h, int col, bool live) {
        float d[8], x[8], y[8];
        if (live) load8<DT>(d, view_row<const u16>(p.dout, t, h) + col);
#pragma unroll
        for (int b = 0; b < NB; b++) {
            float dot = 0.f;
            if (live) {
                load8<DT>(x, view_row<const u16>(p.out[b], t, h) + col);
#pragma unroll
                for (int i = 0; i < 8; i++) dot += d[i] * x[i];
                if (p.dbranch[b].ptr != 0) {
                    const float g = gate_of(p.gate[b], t, h);
#pragma unroll
                    for (int i = 0; i < 8; i++) y[i] = g * d[i];
                    store8<DT>(view_row<u16>(p.dbranch[b], t, h) + col, y);
                }
            }
            dot = gate_row_sum<LANES>(dot);
            if (p.dgate != 0 && live && col == 0) ((float *)p.dgate)[b * rows + t * p.heads + h] = dot;
        }
    });
}
