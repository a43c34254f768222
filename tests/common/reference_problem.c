/* The CPU reference tests' problems (reference_problem.h). */
#include "reference_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float *normal_floats(fsa_rng *rng, size_t n)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t e = 0; e < n; e++) x[e] = (float)fsa_rng_normal(rng);
    return x;
}

double *new_doubles(size_t n)
{
    double *x = calloc(n, sizeof *x);
    assert_non_null(x);
    return x;
}

void make_problem(owned_problem *op, int batch, const int *lens, int hq, int hkv, int d, int bk, int top_k,
                  uint64_t seed)
{
    memset(op, 0, sizeof *op);
    assert_true(batch < 8);
    op->cu[0] = 0;
    for (int b = 0; b < batch; b++) op->cu[b + 1] = op->cu[b] + lens[b];
    int T = op->cu[batch];
    fsa_rng rng = {seed};
    op->q = normal_floats(&rng, (size_t)T * hq * d);
    op->k = normal_floats(&rng, (size_t)T * hkv * d);
    op->v = normal_floats(&rng, (size_t)T * hkv * d);
    op->topk = malloc((size_t)hkv * T * top_k * sizeof *op->topk);
    assert_non_null(op->topk);
    for (size_t e = 0; e < (size_t)hkv * T * top_k; e++) op->topk[e] = -1;
    op->p = (fsa_ref_problem){
        .total_tokens = T,
        .batch = batch,
        .cu_seqlens = op->cu,
        .num_q_heads = hq,
        .num_kv_heads = hkv,
        .head_dim = d,
        .block_size = bk,
        .top_k = top_k,
        .scale = 1.0 / sqrt((double)d),
        .q = op->q,
        .k = op->k,
        .v = op->v,
        .topk = op->topk,
        .topk_head_stride = (int64_t)T * top_k,
        .topk_token_stride = top_k,
    };
}

void free_problem(owned_problem *op)
{
    free(op->q);
    free(op->k);
    free(op->v);
    free(op->topk);
}

int32_t *row_of(owned_problem *op, int h, int t)
{
    return op->topk + ((size_t)h * op->p.total_tokens + t) * op->p.top_k;
}

void set_row(owned_problem *op, int h, int t, const int32_t *values, int n)
{
    int32_t *row = row_of(op, h, t);
    for (int s = 0; s < op->p.top_k; s++) row[s] = s < n ? values[s] : -1;
}

void generate_selection(owned_problem *op, uint64_t seed)
{
    fsa_rng rng = {seed};
    fsa_ref_make_selection(op->topk, op->p.topk_head_stride, op->p.topk_token_stride, op->p.total_tokens,
                           op->p.batch, op->cu, op->p.num_kv_heads, op->p.block_size, op->p.top_k, &rng);
}

size_t o_size(const fsa_ref_problem *p)
{
    return (size_t)p->total_tokens * p->num_q_heads * p->head_dim;
}
