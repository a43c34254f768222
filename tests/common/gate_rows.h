/* The gated backward of the attention branches in the GPU tests (their args'
 * gate and gate_grad): random gates of both signs with zeros among them, on
 * the device in a transposed layout (token stride 1, head stride T), so the
 * kernels read a view whose strides are not a plain [T, H]; dout scaled by
 * them for the float64 reference; the written gate gradient checked against
 * rowsum(dout * o). */
#ifndef FSA_TEST_GATE_ROWS_H
#define FSA_TEST_GATE_ROWS_H

#include "testing.h"

typedef struct gate_rows {
    int T, H;
    float *g;       /* host [T, H] */
    uint64_t gate;  /* device float [H, T]: the view (token stride 1, head stride T) */
    uint64_t grad;  /* device float [T, H]: gate_grad, poisoned by gate_rows_poison */
} gate_rows;

void gate_rows_make(gate_rows *gr, int T, int H, uint64_t seed);
void gate_rows_free(gate_rows *gr);
void gate_rows_poison(const gate_rows *gr);
fsa_tensor gate_rows_view(const gate_rows *gr);
fsa_tensor gate_rows_grad_view(const gate_rows *gr);
/* dout [T, H, dv] with each row times its gate (for the reference). */
void gate_rows_scale(const gate_rows *gr, const float *dout, int dv, float *gated);
/* The device's gate_grad against rowsum(dout * o) in float64 (dout and o
 * [T, H, dv], o as the forward wrote it): the largest error over the largest
 * |rowsum|. */
double gate_rows_grad_error(const gate_rows *gr, const float *dout, const float *o, int dv);

#endif
