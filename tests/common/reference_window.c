/* CPU float64 reference for sliding-window attention; see reference_window.h. */
#include "reference_window.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void fsa_ref_window_forward(const fsa_ref_window_problem *p, double *o, double *lse)
{
    const int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, Dk = p->head_dim, Dv = p->value_dim;
    const int G = Hq / Hkv;
    assert(p->batch >= 1 && p->cu_seqlens[0] == 0 && p->cu_seqlens[p->batch] == T && p->window >= 1);
    double *x = calloc((size_t)p->window, sizeof *x);
    if (x == NULL) abort();
    for (int b = 0; b < p->batch; b++)
        for (int t = p->cu_seqlens[b]; t < p->cu_seqlens[b + 1]; t++) {
            const int first = t - p->window + 1 > p->cu_seqlens[b] ? t - p->window + 1 : p->cu_seqlens[b];
            const int n = t - first + 1;
            for (int qh = 0; qh < Hq; qh++) {
                const int h = qh / G;
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
                double *orow = o + ((size_t)t * Hq + qh) * Dv;
                for (int e = 0; e < Dv; e++) orow[e] = 0.0;
                for (int m = 0; m < n; m++) {
                    const float *v = p->v + ((size_t)(first + m) * Hkv + h) * Dv;
                    for (int e = 0; e < Dv; e++) orow[e] += x[m] / sum * (double)v[e];
                }
                if (lse != NULL) lse[(size_t)qh * T + t] = mx + log(sum);
            }
        }
    free(x);
}
