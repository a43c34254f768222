/* CPU float64 reference for sliding-window attention; see reference_window.h. */
#include "reference_window.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fsa_ref_window_of(const fsa_ref_window_problem *p, int qh)
{
    return p->head_windows != NULL ? p->head_windows[qh] : p->window;
}

/* The probabilities of query head qh at token t (sequence start s) over its
 * keys first .. t into x; returns first, *lse the log-sum-exp. */
static int row_softmax(const fsa_ref_window_problem *p, int s, int t, int qh, double *x, double *lse)
{
    const int Hq = p->num_q_heads, Hkv = p->num_kv_heads, Dk = p->head_dim, h = qh / (Hq / Hkv);
    const int w = fsa_ref_window_of(p, qh);
    assert(w >= 1);
    const int first = t - w + 1 > s ? t - w + 1 : s, n = t - first + 1;
    const float *q = p->q + ((size_t)t * Hq + qh) * Dk;
    double mx = -INFINITY, sum = 0.0;
    for (int m = 0; m < n; m++) {
        const float *k = p->k + ((size_t)(first + m) * Hkv + h) * Dk;
        double dot = 0.0;
        for (int e = 0; e < Dk; e++) dot += (double)q[e] * (double)k[e];
        x[m] = p->scale * dot;
        if (x[m] > mx) mx = x[m];
    }
    for (int m = 0; m < n; m++) sum += (x[m] = exp(x[m] - mx));
    for (int m = 0; m < n; m++) x[m] /= sum;
    *lse = mx + log(sum);
    return first;
}

static double *scratch(const fsa_ref_window_problem *p)
{
    assert(p->batch >= 1 && p->cu_seqlens[0] == 0 && p->cu_seqlens[p->batch] == p->total_tokens);
    double *x = calloc((size_t)p->total_tokens + 1, sizeof *x);
    if (x == NULL) abort();
    return x;
}

void fsa_ref_window_forward(const fsa_ref_window_problem *p, double *o, double *lse)
{
    const int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, Dv = p->value_dim;
    double *x = scratch(p);
    for (int b = 0; b < p->batch; b++)
        for (int t = p->cu_seqlens[b]; t < p->cu_seqlens[b + 1]; t++)
            for (int qh = 0; qh < Hq; qh++) {
                const int h = qh / (Hq / Hkv);
                double l;
                const int first = row_softmax(p, p->cu_seqlens[b], t, qh, x, &l);
                double *orow = o + ((size_t)t * Hq + qh) * Dv;
                for (int e = 0; e < Dv; e++) orow[e] = 0.0;
                for (int m = 0; m <= t - first; m++) {
                    const float *v = p->v + ((size_t)(first + m) * Hkv + h) * Dv;
                    for (int e = 0; e < Dv; e++) orow[e] += x[m] * (double)v[e];
                }
                if (lse != NULL) lse[(size_t)qh * T + t] = l;
            }
    free(x);
}

void fsa_ref_window_backward(const fsa_ref_window_problem *p, const float *dout, double *dq, double *dk, double *dv)
{
    fsa_ref_window_backward_given_o(p, dout, NULL, dq, dk, dv);
}

void fsa_ref_window_backward_given_o(const fsa_ref_window_problem *p, const float *dout, const float *o_used,
                                     double *dq, double *dk, double *dv)
{
    fsa_ref_window_backward_terms(p, dout, o_used, dq, dk, dv, NULL);
}

void fsa_ref_window_backward_terms(const fsa_ref_window_problem *p, const float *dout, const float *o_used,
                                   double *dq, double *dk, double *dv, const fsa_ref_grad_terms *terms)
{
    const int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, Dk = p->head_dim, Dv = p->value_dim;
    double *x = scratch(p), *dp = scratch(p);
    double *o_exact = calloc((size_t)Dv + 1, sizeof *o_exact); /* the row's o, for abs_delta without o_used */
    if (o_exact == NULL) abort();
    memset(dq, 0, (size_t)T * Hq * Dk * sizeof *dq);
    memset(dk, 0, (size_t)T * Hkv * Dk * sizeof *dk);
    memset(dv, 0, (size_t)T * Hkv * Dv * sizeof *dv);
    fsa_ref_grad_terms_zero(terms, (size_t)T * Hq, (size_t)T * Hkv);
    for (int b = 0; b < p->batch; b++)
        for (int t = p->cu_seqlens[b]; t < p->cu_seqlens[b + 1]; t++)
            for (int qh = 0; qh < Hq; qh++) {
                const int h = qh / (Hq / Hkv);
                double l, delta = 0.0, abs_delta = 0.0;
                const int first = row_softmax(p, p->cu_seqlens[b], t, qh, x, &l), n = t - first + 1;
                const float *go = dout + ((size_t)t * Hq + qh) * Dv, *q = p->q + ((size_t)t * Hq + qh) * Dk;
                for (int m = 0; m < n; m++) {
                    const float *v = p->v + ((size_t)(first + m) * Hkv + h) * Dv;
                    dp[m] = 0.0;
                    for (int e = 0; e < Dv; e++) dp[m] += (double)go[e] * (double)v[e];
                    delta += x[m] * dp[m]; /* = dout.o */
                }
                if (terms && o_used == NULL) {
                    memset(o_exact, 0, (size_t)Dv * sizeof *o_exact);
                    for (int m = 0; m < n; m++)
                        for (int e = 0; e < Dv; e++) o_exact[e] += x[m] * (double)p->v[((size_t)(first + m) * Hkv + h) * Dv + e];
                    for (int e = 0; e < Dv; e++) abs_delta += fabs((double)go[e] * o_exact[e]);
                }
                if (o_used != NULL) {
                    const float *o_row = o_used + ((size_t)t * Hq + qh) * Dv;
                    delta = 0.0;
                    for (int e = 0; e < Dv; e++) delta += (double)go[e] * (double)o_row[e];
                    abs_delta = fsa_ref_abs_dot(go, o_row, Dv);
                }
                for (int m = 0; m < n; m++) {
                    const size_t kr = (size_t)(first + m) * Hkv + h;
                    const double ds = x[m] * (dp[m] - delta);
                    for (int e = 0; e < Dk; e++) {
                        dq[((size_t)t * Hq + qh) * Dk + e] += p->scale * ds * (double)p->k[kr * Dk + e];
                        dk[kr * Dk + e] += p->scale * ds * (double)q[e];
                    }
                    for (int e = 0; e < Dv; e++) dv[kr * Dv + e] += x[m] * (double)go[e];
                    if (terms)
                        fsa_ref_grad_terms_add(terms, (size_t)t * Hq + qh, kr, p->scale, ds, x[m],
                                               fsa_ref_abs_dot(go, p->v + kr * Dv, Dv) + abs_delta, q, p->k + kr * Dk,
                                               go, Dk, Dv);
                }
            }
    fsa_ref_grad_terms_finish(terms, (size_t)T * Hq, (size_t)T * Hkv);
    free(o_exact);
    free(x);
    free(dp);
}
