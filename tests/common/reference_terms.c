/* Gradient rows' term norms (reference_terms.h). */
#include "reference_terms.h"

#include "testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double sq_norm(const float *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

void fsa_ref_grad_terms_alloc(fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows)
{
    t->dq = malloc((q_rows + 1) * sizeof *t->dq);
    t->dk = malloc((kv_rows + 1) * sizeof *t->dk);
    t->dv = malloc((kv_rows + 1) * sizeof *t->dv);
    assert_true(t->dq && t->dk && t->dv);
}

void fsa_ref_grad_terms_free(fsa_ref_grad_terms *t)
{
    free(t->dq);
    free(t->dk);
    free(t->dv);
    t->dq = t->dk = t->dv = NULL;
}

void fsa_ref_grad_terms_zero(const fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows)
{
    if (t == NULL) return;
    memset(t->dq, 0, q_rows * sizeof *t->dq);
    memset(t->dk, 0, kv_rows * sizeof *t->dk);
    memset(t->dv, 0, kv_rows * sizeof *t->dv);
}

void fsa_ref_grad_terms_add(const fsa_ref_grad_terms *t, size_t q_row, size_t kv_row, double scaled_ds, double p,
                            const float *q, const float *k, const float *dout, int dk_dim, int dv_dim)
{
    if (t == NULL) return;
    t->dq[q_row] += scaled_ds * scaled_ds * sq_norm(k, dk_dim);
    t->dk[kv_row] += scaled_ds * scaled_ds * sq_norm(q, dk_dim);
    t->dv[kv_row] += p * p * sq_norm(dout, dv_dim);
}

void fsa_ref_grad_terms_finish(const fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows)
{
    if (t == NULL) return;
    for (size_t r = 0; r < q_rows; r++) t->dq[r] = sqrt(t->dq[r]);
    for (size_t r = 0; r < kv_rows; r++) {
        t->dk[r] = sqrt(t->dk[r]);
        t->dv[r] = sqrt(t->dv[r]);
    }
}
