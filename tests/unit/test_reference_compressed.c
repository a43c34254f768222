/* Checks the compressed-attention reference itself: which compressed tokens
 * a query sees, the forward against a direct softmax, block scores against
 * hand counts, the selection rule (forced blocks, ties, padding) and the
 * tolerant selection check the GPU tests use. */
#include "cmp_problem.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cmp_case small_case(int hq, int hkv, int l, int d, int len0, int len1, int zero_q)
{
    cmp_case c = {.name = "small", .dtype = FSA_DTYPE_BF16, .dk = 16, .dv = 32, .hq = hq, .hkv = hkv,
                  .l = l, .d = d, .bk = 64, .k = 4, .init = 1, .local = 2, .nseq = 2, .zero_q = zero_q};
    c.lens[0] = len0;
    c.lens[1] = len1;
    return c;
}

static void test_a_sequence_has_one_compressed_token_per_stride_whose_window_fits(void **state)
{
    (void)state;
    assert_int_equal(fsa_ref_cmp_count(0, 32, 16), 0);
    assert_int_equal(fsa_ref_cmp_count(31, 32, 16), 0);
    assert_int_equal(fsa_ref_cmp_count(32, 32, 16), 1);
    assert_int_equal(fsa_ref_cmp_count(47, 32, 16), 1);
    assert_int_equal(fsa_ref_cmp_count(48, 32, 16), 2);
    assert_int_equal(fsa_ref_cmp_count(10, 4, 2), 4);
}

/* With q = 0 every visible token scores the same: lse = log(n), o = mean of v. */
static void test_a_query_sees_a_compressed_token_once_its_whole_window_has_passed(void **state)
{
    (void)state;
    const cmp_case c = small_case(2, 1, 4, 2, 10, 3, 1); /* 4 compressed tokens, then none (3 < l) */
    cmp_problem p;
    cmp_problem_make(&p, &c, 1);
    assert_int_equal(p.Tc, 4);
    /* Position i sees j with 2j + 3 <= i. */
    const int visible[10] = {0, 0, 0, 1, 1, 2, 2, 3, 3, 4};
    for (int qh = 0; qh < c.hq; qh++) {
        for (int t = 0; t < p.T; t++) {
            const int n = t < 10 ? visible[t] : 0;
            const double lse = p.lse_ref[(size_t)qh * p.T + t];
            const double *o = p.o_ref + ((size_t)t * c.hq + qh) * c.dv;
            if (n == 0) {
                assert_true(isinf(lse) && lse < 0);
                for (int e = 0; e < c.dv; e++) assert_true(o[e] == 0.0);
                continue;
            }
            assert_true(fabs(lse - log((double)n)) < 1e-12);
            for (int e = 0; e < c.dv; e++) {
                double mean = 0.0;
                for (int j = 0; j < n; j++) mean += (double)p.v[(size_t)j * c.dv + e] / n;
                if (fabs(o[e] - mean) >= 1e-12) fail_msg("qh %d t %d e %d: %g vs %g", qh, t, e, o[e], mean);
            }
        }
    }
    cmp_problem_free(&p);
}

/* One row computed directly from the definition, with two sequences and GQA. */
static void test_the_forward_is_the_softmax_over_the_visible_tokens_of_the_own_sequence_and_kv_head(void **state)
{
    (void)state;
    const cmp_case c = small_case(6, 2, 8, 4, 40, 30, 0);
    cmp_problem p;
    cmp_problem_make(&p, &c, 2);
    const int t = 40 + 25, qh = 4, h = qh / 3, i = 25, cs = p.cu_c[1];
    const int n = (i - 8) / 4 + 1; /* j*4 + 7 <= 25 */
    double x[16], mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < n; j++) {
        x[j] = 0.0;
        for (int e = 0; e < c.dk; e++)
            x[j] += (double)p.q[((size_t)t * c.hq + qh) * c.dk + e] * p.k[((size_t)(cs + j) * c.hkv + h) * c.dk + e];
        x[j] /= sqrt((double)c.dk);
        mx = fmax(mx, x[j]);
    }
    for (int j = 0; j < n; j++) sum += exp(x[j] - mx);
    assert_true(fabs(p.lse_ref[(size_t)qh * p.T + t] - (mx + log(sum))) < 1e-12);
    for (int e = 0; e < c.dv; e++) {
        double o = 0.0;
        for (int j = 0; j < n; j++) o += exp(x[j] - mx) / sum * p.v[((size_t)(cs + j) * c.hkv + h) * c.dv + e];
        assert_true(fabs(p.o_ref[((size_t)t * c.hq + qh) * c.dv + e] - o) < 1e-12);
    }
    cmp_problem_free(&p);
}

/* l 32, stride 16, blocks of 64, position 200: tokens 0..10 are visible;
 * block 0 overlaps 0..3, block 1 3..7, block 2 7..10 (and 11, not yet
 * visible), the own block 3 none. With q = 0 each has probability 1/11. */
static void test_block_scores_sum_the_probabilities_of_every_overlapping_visible_token_over_the_group(void **state)
{
    (void)state;
    const cmp_case c = small_case(3, 1, 32, 16, 300, 1, 1);
    cmp_problem p;
    cmp_problem_make(&p, &c, 3);
    double scores[8];
    assert_int_equal(fsa_ref_cmp_block_scores(&p.ref, 64, 0, 200, scores), 4);
    const double want[4] = {3 * 4 / 11.0, 3 * 5 / 11.0, 3 * 4 / 11.0, 0.0};
    for (int c2 = 0; c2 < 4; c2++) assert_true(fabs(scores[c2] - want[c2]) < 1e-12);
    /* The second sequence's only token sees nothing: one block, scoring 0. */
    assert_int_equal(fsa_ref_cmp_block_scores(&p.ref, 64, 0, 300, scores), 1);
    assert_true(scores[0] == 0.0);
    cmp_problem_free(&p);
}

/* Without overlap (l <= stride) every visible token lies in one block, so
 * the scores of a row add up to G. */
static void test_without_overlap_the_scores_of_a_row_add_up_to_the_group_size(void **state)
{
    (void)state;
    const cmp_case c = small_case(4, 2, 16, 16, 500, 200, 0);
    cmp_problem p;
    cmp_problem_make(&p, &c, 4);
    double scores[16];
    for (int t = 15; t < p.T; t += 37) {
        if (t >= 500 && t < 515) continue; /* the second sequence's first tokens see nothing */
        const int n = fsa_ref_cmp_block_scores(&p.ref, 64, 1, t, scores);
        double total = 0.0;
        for (int b = 0; b < n; b++) total += scores[b];
        assert_true(fabs(total - 2.0) < 1e-12);
    }
    cmp_problem_free(&p);
}

/* L = sum(dout * o): the backward against central differences of the
 * forward, for a few elements of q, k and v. */
static double loss(const cmp_problem *p, const cmp_case *c, const float *dout)
{
    double *o = malloc(((size_t)p->T * c->hq * c->dv + 1) * sizeof *o);
    assert_non_null(o);
    fsa_ref_cmp_forward(&p->ref, o, NULL);
    double l = 0.0;
    for (size_t e = 0; e < (size_t)p->T * c->hq * c->dv; e++) l += o[e] * dout[e];
    free(o);
    return l;
}

static void check_gradient(cmp_problem *p, const cmp_case *c, const float *dout, float *x, size_t idx, double grad)
{
    const float saved = x[idx];
    const double eps = 1e-3;
    x[idx] = (float)(saved + eps);
    const double up = loss(p, c, dout);
    x[idx] = (float)(saved - eps);
    const double down = loss(p, c, dout);
    x[idx] = saved;
    const double fd = (up - down) / ((double)(float)(saved + eps) - (double)(float)(saved - eps));
    if (fabs(fd - grad) > 1e-4 + 1e-3 * fabs(grad)) fail_msg("element %zu: finite difference %.9g, backward %.9g", idx, fd, grad);
}

static void test_the_backward_matches_finite_differences_of_the_forward(void **state)
{
    (void)state;
    cmp_case c = small_case(4, 2, 8, 4, 30, 21, 0);
    cmp_problem p;
    cmp_problem_make(&p, &c, 6);
    const size_t nq = (size_t)p.T * c.hq * c.dk, nk = (size_t)p.Tc * c.hkv * c.dk, nv = (size_t)p.Tc * c.hkv * c.dv;
    float *dout = malloc((size_t)p.T * c.hq * c.dv * sizeof *dout);
    double *dq = malloc(nq * sizeof *dq), *dk = malloc(nk * sizeof *dk), *dv = malloc(nv * sizeof *dv);
    assert_true(dout && dq && dk && dv);
    fsa_rng rng = {7};
    for (size_t e = 0; e < (size_t)p.T * c.hq * c.dv; e++) dout[e] = (float)fsa_rng_normal(&rng);
    fsa_ref_cmp_backward(&p.ref, dout, dq, dk, dv);
    for (int trial = 0; trial < 12; trial++) {
        const size_t iq = (size_t)fsa_rng_int(&rng, 0, (int)nq - 1), ik = (size_t)fsa_rng_int(&rng, 0, (int)nk - 1);
        const size_t iv = (size_t)fsa_rng_int(&rng, 0, (int)nv - 1);
        check_gradient(&p, &c, dout, p.q, iq, dq[iq]);
        check_gradient(&p, &c, dout, p.k, ik, dk[ik]);
        check_gradient(&p, &c, dout, p.v, iv, dv[iv]);
    }
    /* A query that sees nothing gets dq = 0: position 0 of the first sequence. */
    for (int e = 0; e < c.hq * c.dk; e++) assert_true(dq[e] == 0.0);
    free(dout);
    free(dq);
    free(dk);
    free(dv);
    cmp_problem_free(&p);
}

static void assert_row(const int32_t *row, const int32_t *want, int k)
{
    for (int s = 0; s < k; s++) assert_int_equal(row[s], want[s]);
}

static void test_the_selection_takes_forced_blocks_then_the_best_scores_and_writes_them_ascending(void **state)
{
    (void)state;
    const double scores[5] = {0.1, 0.9, 0.8, 0.2, 0.05};
    int32_t row[3];
    fsa_ref_select_row(row, scores, 5, 3, 1, 1); /* forced 0 and 4, then block 1 */
    assert_row(row, (const int32_t[]){0, 1, 4}, 3);
    fsa_ref_select_row(row, scores, 5, 3, 0, 0);
    assert_row(row, (const int32_t[]){1, 2, 3}, 3);
}

static void test_equal_scores_go_to_the_lower_block(void **state)
{
    (void)state;
    const double scores[6] = {0.5, 0.25, 0.5, 0.5, 0.25, 0.5};
    int32_t row[3];
    fsa_ref_select_row(row, scores, 6, 3, 0, 0);
    assert_row(row, (const int32_t[]){0, 2, 3}, 3);
    fsa_ref_select_row(row, scores, 6, 3, 0, 1); /* block 5 forced, then 0 and 2 */
    assert_row(row, (const int32_t[]){0, 2, 5}, 3);
}

static void test_rows_with_fewer_blocks_than_k_end_in_minus_one(void **state)
{
    (void)state;
    const double scores[2] = {0.0, 0.0};
    int32_t row[4];
    fsa_ref_select_row(row, scores, 2, 4, 1, 2);
    assert_row(row, (const int32_t[]){0, 1, -1, -1}, 4);
    fsa_ref_select_row(row, scores, 1, 4, 0, 0);
    assert_row(row, (const int32_t[]){0, -1, -1, -1}, 4);
}

static void test_more_forced_blocks_than_k_keep_the_lowest_ones(void **state)
{
    (void)state;
    const double scores[8] = {0, 0, 9, 9, 0, 0, 0, 0};
    int32_t row[3];
    fsa_ref_select_row(row, scores, 8, 3, 2, 3); /* forced 0, 1, 5, 6, 7 */
    assert_row(row, (const int32_t[]){0, 1, 5}, 3);
}

static void test_the_selection_check_accepts_near_ties_and_rejects_real_mistakes(void **state)
{
    (void)state;
    const double scores[6] = {0.1, 0.50, 0.5000001, 0.2, 0.3, 0.05};
    char why[160];
    /* K 3, init 1, local 1: forced 0 and 5, then block 2 (block 1 within tol). */
    assert_true(fsa_ref_selection_ok((const int32_t[]){0, 2, 5}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_true(fsa_ref_selection_ok((const int32_t[]){0, 1, 5}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 1, 5}, scores, 6, 3, 1, 1, 1e-9, 0.0, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 4, 5}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_non_null(strstr(why, "taken over"));
    assert_false(fsa_ref_selection_ok((const int32_t[]){1, 2, 5}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_non_null(strstr(why, "forced block 0"));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 5, 2}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 2, 2}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 2, 6}, scores, 6, 3, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    /* The relative part: block 1 (0.5) over block 2 (0.5000001) is a swap of 2e-7 of the score, within 1e-6
     * of it, not within 1e-7; block 4 (0.3) over block 1 (0.5) is 40% below, past any such tolerance. */
    double swap = -1.0;
    assert_true(fsa_ref_selection_ok((const int32_t[]){0, 1, 5}, scores, 6, 3, 1, 1, 0.0, 1e-6, &swap, why, sizeof why));
    assert_true(swap > 1.9e-7 && swap < 2.1e-7);
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 1, 5}, scores, 6, 3, 1, 1, 0.0, 1e-7, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 4, 5}, scores, 6, 3, 1, 1, 0.0, 0.3, NULL, why, sizeof why));
    assert_true(fsa_ref_selection_ok((const int32_t[]){0, 2, 5}, scores, 6, 3, 1, 1, 0.0, 0.0, &swap, why, sizeof why));
    assert_true(swap == 0.0);
    /* Padding: exactly min(K, n) blocks, then -1. */
    assert_true(fsa_ref_selection_ok((const int32_t[]){0, 1, -1, -1}, scores, 2, 4, 1, 1, 1e-4, 0.0, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, -1, -1, -1}, scores, 2, 4, 0, 0, 1e-4, 0.0, NULL, why, sizeof why));
    assert_false(fsa_ref_selection_ok((const int32_t[]){0, 1, -1, 7}, scores, 2, 4, 0, 0, 1e-4, 0.0, NULL, why, sizeof why));
}

/* fsa_ref_cmp_select writes through the strides of either layout. */
static void test_select_writes_both_top_k_layouts(void **state)
{
    (void)state;
    const cmp_case c = small_case(4, 2, 32, 16, 400, 150, 0);
    cmp_problem p;
    cmp_problem_make(&p, &c, 5);
    const size_t n = (size_t)c.hkv * p.T * c.k;
    int32_t *hmaj = malloc(n * sizeof *hmaj), *tmaj = malloc(n * sizeof *tmaj);
    assert_true(hmaj && tmaj);
    fsa_ref_cmp_select(&p.ref, c.bk, c.k, c.init, c.local, hmaj, (int64_t)p.T * c.k, c.k);
    fsa_ref_cmp_select(&p.ref, c.bk, c.k, c.init, c.local, tmaj, c.k, (int64_t)c.hkv * c.k);
    double scores[16];
    char why[160];
    for (int h = 0; h < c.hkv; h++)
        for (int t = 0; t < p.T; t++) {
            const int32_t *a = hmaj + ((size_t)h * p.T + t) * c.k, *b = tmaj + ((size_t)t * c.hkv + h) * c.k;
            assert_memory_equal(a, b, (size_t)c.k * sizeof *a);
            const int nb = fsa_ref_cmp_block_scores(&p.ref, c.bk, h, t, scores);
            if (!fsa_ref_selection_ok(a, scores, nb, c.k, c.init, c.local, 0.0, 0.0, NULL, why, sizeof why))
                fail_msg("h %d t %d: %s", h, t, why);
        }
    free(hmaj);
    free(tmaj);
    cmp_problem_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_sequence_has_one_compressed_token_per_stride_whose_window_fits),
        cmocka_unit_test(test_a_query_sees_a_compressed_token_once_its_whole_window_has_passed),
        cmocka_unit_test(test_the_forward_is_the_softmax_over_the_visible_tokens_of_the_own_sequence_and_kv_head),
        cmocka_unit_test(test_the_backward_matches_finite_differences_of_the_forward),
        cmocka_unit_test(test_block_scores_sum_the_probabilities_of_every_overlapping_visible_token_over_the_group),
        cmocka_unit_test(test_without_overlap_the_scores_of_a_row_add_up_to_the_group_size),
        cmocka_unit_test(test_the_selection_takes_forced_blocks_then_the_best_scores_and_writes_them_ascending),
        cmocka_unit_test(test_equal_scores_go_to_the_lower_block),
        cmocka_unit_test(test_rows_with_fewer_blocks_than_k_end_in_minus_one),
        cmocka_unit_test(test_more_forced_blocks_than_k_keep_the_lowest_ones),
        cmocka_unit_test(test_the_selection_check_accepts_near_ties_and_rejects_real_mistakes),
        cmocka_unit_test(test_select_writes_both_top_k_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
