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

const double *fsa_ref_grad_terms_of(const fsa_ref_grad_terms *t, int i)
{
    return t == NULL ? NULL : i == 0 ? t->dq : i == 1 ? t->dk : t->dv;
}

void fsa_ref_grad_terms_zero(const fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows)
{
    if (t == NULL) return;
    memset(t->dq, 0, q_rows * sizeof *t->dq);
    memset(t->dk, 0, kv_rows * sizeof *t->dk);
    memset(t->dv, 0, kv_rows * sizeof *t->dv);
}

void fsa_ref_grad_terms_add(const fsa_ref_grad_terms *t, size_t q_row, size_t kv_row, double scale, double ds, double p,
                            double abs_dots, const float *q, const float *k, const float *dout, int dk_dim, int dv_dim)
{
    if (t == NULL) return;
    const double noise = (double)dv_dim * 0x1p-24 * p * abs_dots; /* of dS, from the fp32 dot products */
    const double ds_sq = scale * scale * (ds * ds + noise * noise);
    t->dq[q_row] += ds_sq * sq_norm(k, dk_dim);
    t->dk[kv_row] += ds_sq * sq_norm(q, dk_dim);
    t->dv[kv_row] += p * p * sq_norm(dout, dv_dim);
}

double fsa_ref_abs_dot(const float *a, const float *b, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += fabs((double)a[i] * (double)b[i]);
    return s;
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
