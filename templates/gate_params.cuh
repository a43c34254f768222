/* NSA's gates: the kernels' one argument and launch shape. Plain C that the
 * host library and NVRTC both compile; every field is 8 bytes: no padding.
 * Row r = token t * H + head h of the [T, H, Dv] tensors; a row's Dv columns
 * are taken 8 at a time by FSA_GATE_ROW_LANES(Dv) neighbouring lanes of one
 * warp (a power of two, so a row's lanes never cross a warp). */
#ifndef FSA_GATE_PARAMS_CUH
#define FSA_GATE_PARAMS_CUH

#include "fsa_layout.cuh"

#define FSA_GATE_BRANCHES 3 /* compressed, selected, window */
#define FSA_GATE_THREADS 256

typedef struct fsa_gate_params {
    fsa_kernel_view out[FSA_GATE_BRANCHES];  /* the branches' outputs, [T, H, Dv] */
    fsa_kernel_view gate[FSA_GATE_BRANCHES]; /* float [T, H]; strides in floats, 0 broadcasts */
    fsa_kernel_view o;                       /* forward: [T, H, Dv], written */
    fsa_kernel_view dout;                    /* backward: [T, H, Dv], read */
    fsa_kernel_view dbranch[FSA_GATE_BRANCHES]; /* backward: g_x dout, written where ptr != 0 */
    long long dgate;                         /* backward: float [3][T][H], rowsum(dout o_x); 0: not wanted */
    long long total_tokens;                  /* T */
    long long heads;                         /* H */
} fsa_gate_params;

/* Lanes of a row: Dv / 8 rounded up to a power of two (at most 32). */
FSA_LAYOUT_FN int fsa_gate_row_lanes(int dv)
{
    int lanes = 1;
    while (lanes < 32 && lanes * 8 < dv) lanes *= 2;
    return lanes;
}
/* CTAs for `rows` rows: every row a lane group, at most `cap` CTAs (the
 * kernels stride over the rest). */
FSA_LAYOUT_FN long long fsa_gate_blocks(long long rows, int dv, long long cap)
{
    const long long rows_per_block = FSA_GATE_THREADS / fsa_gate_row_lanes(dv);
    const long long b = (rows + rows_per_block - 1) / rows_per_block;
    return b < cap ? b : cap;
}

#endif
