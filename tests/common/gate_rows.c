#include "gate_rows.h"

#include <math.h>
#include <stdlib.h>

void gate_rows_make(gate_rows *gr, int T, int H, uint64_t seed)
{
    fsa_rng rng = {seed};
    gr->T = T, gr->H = H;
    const size_t n = (size_t)T * H;
    gr->g = malloc((n + 1) * sizeof(float));
    float *transposed = malloc((n + 1) * sizeof(float));
    assert_true(gr->g && transposed);
    for (size_t i = 0; i < n; i++) {
        /* in [-1.5, 1.5), every seventh exactly 0: a gate's sign and zero reach P */
        gr->g[i] = i % 7 == 3 ? 0.f : (float)(3.0 * fsa_rng_uniform(&rng) - 1.5);
        transposed[(i % H) * (size_t)T + i / H] = gr->g[i];
    }
    gr->gate = fsa_test_dalloc(n * sizeof(float) + 4);
    gr->grad = fsa_test_dalloc(n * sizeof(float) + 4);
    fsa_test_h2d(gr->gate, transposed, n * sizeof(float));
    free(transposed);
}

void gate_rows_free(gate_rows *gr)
{
    free(gr->g);
    fsa_test_dfree(gr->gate);
    fsa_test_dfree(gr->grad);
}

void gate_rows_poison(const gate_rows *gr) { fsa_test_dfill(gr->grad, 0xff, (size_t)gr->T * gr->H * sizeof(float)); }

fsa_tensor gate_rows_view(const gate_rows *gr) { return (fsa_tensor){gr->gate, 1, gr->T}; }

fsa_tensor gate_rows_grad_view(const gate_rows *gr) { return (fsa_tensor){gr->grad, gr->H, 1}; }

void gate_rows_scale(const gate_rows *gr, const float *dout, int dv, float *gated)
{
    const size_t rows = (size_t)gr->T * gr->H;
    for (size_t r = 0; r < rows; r++)
        for (int d = 0; d < dv; d++) gated[r * dv + d] = gr->g[r] * dout[r * dv + d];
}

/* INFINITY when a row's gradient or its rowsum is not finite: fmax drops a NaN operand, so a NaN row of o
 * (left unwritten by the forward) or of dout would otherwise take its row out of the comparison, and an
 * infinite pair would give inf - inf = NaN. */
double gate_rows_grad_error(const gate_rows *gr, const float *dout, const float *o, int dv)
{
    const size_t rows = (size_t)gr->T * gr->H;
    float *got = malloc((rows + 1) * sizeof(float));
    assert_non_null(got);
    fsa_test_d2h(got, gr->grad, rows * sizeof(float));
    double worst = 0.0, scale = 1e-30;
    for (size_t r = 0; r < rows && worst < INFINITY; r++) {
        double want = 0.0;
        for (int d = 0; d < dv; d++) want += (double)dout[r * dv + d] * o[r * dv + d];
        worst = isfinite(got[r]) && isfinite(want) ? fmax(worst, fabs(got[r] - want)) : INFINITY;
        scale = fmax(scale, fabs(want));
    }
    free(got);
    return worst / scale;
}
