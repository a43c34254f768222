/* Checks the CPU reference's forward against an independent dense masked
 * softmax, for head-major and token-major top-k layouts (the same bits from
 * both), and its one-row forward against the full one. */
#include "reference_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Independent forward: a dense T x T visibility mask per kv head built
 * straight from the top-k rows (a set, so repeats collapse by themselves),
 * then a dense masked softmax. sel is logical [Hkv,T,K]. */
static void dense_forward(const fsa_ref_problem *p, const int32_t *sel, double *o, double *lse)
{
    int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, D = p->head_dim;
    int G = Hq / Hkv, BK = p->block_size, K = p->top_k;
    char *mask = calloc((size_t)T * T, 1);
    double *x = new_doubles((size_t)T);
    assert_non_null(mask);
    for (int h = 0; h < Hkv; h++) {
        memset(mask, 0, (size_t)T * T);
        for (int t = 0; t < T; t++) {
            int b = 0;
            while (p->cu_seqlens[b + 1] <= t) b++;
            int start = p->cu_seqlens[b], end = p->cu_seqlens[b + 1];
            for (int s = 0; s < K; s++) {
                int idx = sel[((size_t)h * T + t) * K + s];
                if (idx < 0 || idx * BK > t - start) continue;
                for (int j = start + idx * BK; j < start + (idx + 1) * BK; j++)
                    if (j < end && j <= t) mask[(size_t)t * T + j] = 1;
            }
        }
        for (int r = 0; r < G; r++) {
            int qh = h * G + r;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    x[j] = -INFINITY;
                    if (!mask[(size_t)t * T + j]) continue;
                    double acc = 0.0;
                    for (int d = 0; d < D; d++)
                        acc += (double)p->q[((size_t)t * Hq + qh) * D + d] *
                               (double)p->k[((size_t)j * Hkv + h) * D + d];
                    x[j] = p->scale * acc;
                    if (x[j] > mx) mx = x[j];
                }
                double *out = o + ((size_t)t * Hq + qh) * D;
                for (int d = 0; d < D; d++) out[d] = 0.0;
                if (mx == -INFINITY) {
                    lse[(size_t)qh * T + t] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    double w = exp(x[j] - mx); /* 0 for masked keys */
                    sum += w;
                    for (int d = 0; d < D; d++)
                        out[d] += w * (double)p->v[((size_t)j * Hkv + h) * D + d];
                }
                for (int d = 0; d < D; d++) out[d] /= sum;
                lse[(size_t)qh * T + t] = mx + log(sum);
            }
        }
    }
    free(x);
    free(mask);
}

/* Rows with random entries in -2..nb+1: -1s, negatives, future blocks,
 * blocks past the sequence and repeats. */
static void random_selection(owned_problem *op, fsa_rng *rng)
{
    const fsa_ref_problem *p = &op->p;
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int b = 0; b < p->batch; b++) {
            int len = op->cu[b + 1] - op->cu[b];
            int nb = (len + p->block_size - 1) / p->block_size;
            for (int t = op->cu[b]; t < op->cu[b + 1]; t++) {
                int32_t *row = row_of(op, h, t);
                for (int s = 0; s < p->top_k; s++) row[s] = fsa_rng_int(rng, -2, nb + 1);
            }
        }
}

static void check_forward_against_dense(owned_problem *op)
{
    fsa_ref_problem *p = &op->p;
    int T = p->total_tokens, Hkv = p->num_kv_heads, K = p->top_k;
    size_t nlse = (size_t)p->num_q_heads * T;
    double *o_dense = new_doubles(o_size(p)), *lse_dense = new_doubles(nlse);
    dense_forward(p, op->topk, o_dense, lse_dense);

    /* Head-major, as stored. */
    double *o_hm = new_doubles(o_size(p)), *lse_hm = new_doubles(nlse);
    fsa_ref_forward(p, o_hm, lse_hm);
    assert_true(fsa_rel_error_d(o_hm, o_dense, o_size(p)) < 1e-12);
    assert_true(fsa_rel_error_d(lse_hm, lse_dense, nlse) < 1e-12);

    /* Token-major copy [T,Hkv,K]: the same bits must come out. */
    int32_t *tm = malloc((size_t)T * Hkv * K * sizeof *tm);
    assert_non_null(tm);
    for (int h = 0; h < Hkv; h++)
        for (int t = 0; t < T; t++)
            memcpy(tm + ((size_t)t * Hkv + h) * K, row_of(op, h, t), (size_t)K * sizeof *tm);
    fsa_ref_problem ptm = *p;
    ptm.topk = tm;
    ptm.topk_head_stride = K;
    ptm.topk_token_stride = (int64_t)Hkv * K;
    double *o_tm = new_doubles(o_size(p)), *lse_tm = new_doubles(nlse);
    fsa_ref_forward(&ptm, o_tm, lse_tm);
    assert_memory_equal(o_tm, o_hm, o_size(p) * sizeof *o_tm);
    assert_memory_equal(lse_tm, lse_hm, nlse * sizeof *lse_tm);

    free(o_tm);
    free(lse_tm);
    free(tm);
    free(o_hm);
    free(lse_hm);
    free(o_dense);
    free(lse_dense);
}

static void test_forward_matches_dense_masked_softmax_for_both_index_layouts(void **state)
{
    (void)state;
    const int lens[] = {1, 5, 8, 9};
    const int groups[] = {1, 3};
    for (int gi = 0; gi < 2; gi++) {
        for (int trial = 0; trial < 4; trial++) {
            owned_problem op;
            int G = groups[gi], K = 2 + trial;
            make_problem(&op, 4, lens, 2 * G, 2, 16, 4, K, 50 + (uint64_t)(10 * gi + trial));
            fsa_rng rng = {(uint64_t)(700 + trial)};
            if (trial % 2 == 0)
                random_selection(&op, &rng);
            else
                generate_selection(&op, 300 + (uint64_t)trial);
            check_forward_against_dense(&op);
            free_problem(&op);
        }
    }
}

static void test_forward_row_gives_the_same_bits_as_the_full_forward(void **state)
{
    (void)state;
    const int lens[] = {5, 9};
    owned_problem op;
    make_problem(&op, 2, lens, 6, 2, 8, 4, 3, 5);
    generate_selection(&op, 6);
    fsa_ref_problem *p = &op.p;
    double *o = new_doubles(o_size(p)), *lse = new_doubles((size_t)6 * 14);
    fsa_ref_forward(p, o, lse);
    for (int qh = 0; qh < 6; qh++)
        for (int t = 0; t < 14; t++) {
            double row[8], l;
            fsa_ref_forward_row(p, qh, t, row, &l);
            assert_memory_equal(row, o + ((size_t)t * 6 + qh) * 8, sizeof row);
            assert_memory_equal(&l, &lse[(size_t)qh * 14 + t], sizeof l);
        }
    free(o);
    free(lse);
    free_problem(&op);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_dense_masked_softmax_for_both_index_layouts),
        cmocka_unit_test(test_forward_row_gives_the_same_bits_as_the_full_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
