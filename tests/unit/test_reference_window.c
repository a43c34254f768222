/* Checks the sliding-window reference itself: a window of one is the token's
 * own value, a window as long as the sequence is causal attention, a row of
 * a middle window against a direct softmax, per-head windows row by row, and
 * the backward against finite differences of the forward, and its term norms
 * the same whether o is given or taken from the reference. */
#include "reference_window.h"
#include "testing.h"

#include <math.h>
#include <stdlib.h>

typedef struct owned {
    fsa_ref_window_problem p;
    int32_t cu[3];
    float *q, *k, *v;
    double *o, *lse;
} owned;

static void make(owned *w, int window, uint64_t seed)
{
    fsa_rng rng = {seed};
    w->cu[0] = 0, w->cu[1] = 20, w->cu[2] = 33;
    const int T = 33, hq = 4, hkv = 2, dk = 16, dv = 8;
    w->q = malloc((size_t)T * hq * dk * sizeof(float));
    w->k = malloc((size_t)T * hkv * dk * sizeof(float));
    w->v = malloc((size_t)T * hkv * dv * sizeof(float));
    w->o = malloc((size_t)T * hq * dv * sizeof(double));
    w->lse = malloc((size_t)T * hq * sizeof(double));
    assert_true(w->q && w->k && w->v && w->o && w->lse);
    for (int e = 0; e < T * hq * dk; e++) w->q[e] = (float)fsa_rng_normal(&rng);
    for (int e = 0; e < T * hkv * dk; e++) w->k[e] = (float)fsa_rng_normal(&rng);
    for (int e = 0; e < T * hkv * dv; e++) w->v[e] = (float)fsa_rng_normal(&rng);
    w->p = (fsa_ref_window_problem){T, 2, w->cu, hq, hkv, dk, dv, window, 0.25, w->q, w->k, w->v, NULL};
    fsa_ref_window_forward(&w->p, w->o, w->lse);
}

static void release(owned *w)
{
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->o);
    free(w->lse);
}

/* The softmax of query head qh at token t over keys first..t, directly. */
static void check_row(const owned *w, int qh, int t, int first)
{
    const fsa_ref_window_problem *p = &w->p;
    const int h = qh / (p->num_q_heads / p->num_kv_heads);
    double x[40], mx = -INFINITY, sum = 0.0;
    for (int j = first; j <= t; j++) {
        double dot = 0.0;
        for (int e = 0; e < p->head_dim; e++)
            dot += (double)w->q[((size_t)t * p->num_q_heads + qh) * p->head_dim + e] *
                   w->k[((size_t)j * p->num_kv_heads + h) * p->head_dim + e];
        x[j - first] = p->scale * dot;
        mx = fmax(mx, x[j - first]);
    }
    for (int j = first; j <= t; j++) sum += exp(x[j - first] - mx);
    assert_true(fabs(w->lse[(size_t)qh * p->total_tokens + t] - (mx + log(sum))) < 1e-12);
    for (int e = 0; e < p->value_dim; e++) {
        double o = 0.0;
        for (int j = first; j <= t; j++)
            o += exp(x[j - first] - mx) / sum * w->v[((size_t)j * p->num_kv_heads + h) * p->value_dim + e];
        assert_true(fabs(w->o[((size_t)t * p->num_q_heads + qh) * p->value_dim + e] - o) < 1e-12);
    }
}

static void test_a_window_of_one_gives_each_query_its_own_value(void **state)
{
    (void)state;
    owned w;
    make(&w, 1, 1);
    for (int t = 0; t < 33; t++)
        for (int qh = 0; qh < 4; qh++) check_row(&w, qh, t, t);
    release(&w);
}

static void test_a_window_as_long_as_the_sequence_is_causal_attention_within_it(void **state)
{
    (void)state;
    owned w;
    make(&w, 1000, 2);
    for (int t = 0; t < 33; t++)
        for (int qh = 0; qh < 4; qh++) check_row(&w, qh, t, t < 20 ? 0 : 20);
    release(&w);
}

static void test_a_middle_window_starts_w_minus_one_keys_back_but_not_before_the_sequence(void **state)
{
    (void)state;
    owned w;
    make(&w, 7, 3);
    for (int t = 0; t < 33; t++) {
        const int start = t < 20 ? 0 : 20, first = t - 6 > start ? t - 6 : start;
        for (int qh = 0; qh < 4; qh++) check_row(&w, qh, t, first);
    }
    release(&w);
}

/* A problem whose four query heads have the given windows. */
static void make_per_head(owned *w, const int32_t *windows, uint64_t seed)
{
    make(w, 5, seed);
    w->p.head_windows = windows;
    fsa_ref_window_forward(&w->p, w->o, w->lse);
}

static void test_per_head_windows_give_each_head_the_rows_of_its_own_window(void **state)
{
    (void)state;
    owned w;
    const int32_t windows[4] = {1, 7, 1000, 3};
    make_per_head(&w, windows, 4);
    for (int t = 0; t < 33; t++) {
        const int start = t < 20 ? 0 : 20;
        for (int qh = 0; qh < 4; qh++) {
            const int first = t - windows[qh] + 1 > start ? t - windows[qh] + 1 : start;
            check_row(&w, qh, t, first);
        }
    }
    release(&w);
}

/* sum(o * dout) of the problem, for finite differences. */
static double loss(const fsa_ref_window_problem *p, const float *dout, double *o)
{
    fsa_ref_window_forward(p, o, NULL);
    double l = 0.0;
    for (int e = 0; e < p->total_tokens * p->num_q_heads * p->value_dim; e++) l += o[e] * dout[e];
    return l;
}

/* d loss / d x[e] by central differences (x one of q, k, v). */
static double numeric(const fsa_ref_window_problem *p, const float *dout, double *o, float *x, int e)
{
    const float keep = x[e], step = 1.0f / 64;
    x[e] = keep + step;
    const double up = loss(p, dout, o);
    x[e] = keep - step;
    const double down = loss(p, dout, o);
    x[e] = keep;
    return (up - down) / (2.0 * step);
}

static void test_the_backward_is_the_gradient_of_the_forward(void **state)
{
    (void)state;
    owned w;
    const int32_t windows[4] = {2, 9, 1000, 1};
    make_per_head(&w, windows, 5);
    const int T = 33, nq = T * 4 * 16, nk = T * 2 * 16, nv = T * 2 * 8, no = T * 4 * 8;
    float *dout = malloc(no * sizeof *dout);
    double *dq = malloc(nq * sizeof *dq), *dk = malloc(nk * sizeof *dk), *dv = malloc(nv * sizeof *dv);
    assert_true(dout && dq && dk && dv);
    fsa_rng rng = {55};
    for (int e = 0; e < no; e++) dout[e] = (float)fsa_rng_normal(&rng);
    fsa_ref_window_backward(&w.p, dout, dq, dk, dv);
    /* The forward is smooth and the step a power of two: central differences agree to about step^2. */
    for (int e = 0; e < nq; e += 7) assert_true(fabs(numeric(&w.p, dout, w.o, w.q, e) - dq[e]) < 2e-3);
    for (int e = 0; e < nk; e += 5) assert_true(fabs(numeric(&w.p, dout, w.o, w.k, e) - dk[e]) < 2e-3);
    for (int e = 0; e < nv; e += 3) assert_true(fabs(numeric(&w.p, dout, w.o, w.v, e) - dv[e]) < 2e-3);
    free(dout);
    free(dq);
    free(dk);
    free(dv);
    release(&w);
}

/* The gradient rows' term norms (reference_terms.h) with o given as the reference's own (as floats) and with
 * o left to the reference: the same up to o's rounding to float; and the gradients the same as without terms. */
static void test_the_term_norms_take_o_given_or_exact_alike(void **state)
{
    (void)state;
    owned w;
    const int32_t windows[4] = {3, 9, 1000, 1};
    make_per_head(&w, windows, 6);
    const int T = 33, hq = 4, hkv = 2, nq = T * hq * 16, nk = T * hkv * 16, nv = T * hkv * 8, no = T * hq * 8;
    float *dout = malloc(no * sizeof *dout), *o_f = malloc(no * sizeof *o_f);
    double *g[3] = {malloc(nq * sizeof(double)), malloc(nk * sizeof(double)), malloc(nv * sizeof(double))};
    double *h[3] = {malloc(nq * sizeof(double)), malloc(nk * sizeof(double)), malloc(nv * sizeof(double))};
    assert_true(dout && o_f && g[0] && g[1] && g[2] && h[0] && h[1] && h[2]);
    fsa_rng rng = {56};
    for (int e = 0; e < no; e++) dout[e] = (float)fsa_rng_normal(&rng), o_f[e] = (float)w.o[e];
    fsa_ref_grad_terms exact, given;
    fsa_ref_grad_terms_alloc(&exact, (size_t)T * hq, (size_t)T * hkv);
    fsa_ref_grad_terms_alloc(&given, (size_t)T * hq, (size_t)T * hkv);
    fsa_ref_window_backward_terms(&w.p, dout, NULL, g[0], g[1], g[2], &exact);
    fsa_ref_window_backward_terms(&w.p, dout, o_f, h[0], h[1], h[2], &given);
    for (int r = 0; r < T * hq; r++) assert_true(fabs(exact.dq[r] - given.dq[r]) <= 1e-5 * (exact.dq[r] + 1e-12));
    for (int r = 0; r < T * hkv; r++) {
        assert_true(fabs(exact.dk[r] - given.dk[r]) <= 1e-5 * (exact.dk[r] + 1e-12));
        assert_true(exact.dv[r] == given.dv[r]); /* P and dout alone */
        assert_true(exact.dv[r] > 0.0);
    }
    fsa_ref_window_backward(&w.p, dout, h[0], h[1], h[2]);
    for (int i = 0; i < 3; i++) assert_memory_equal(g[i], h[i], (size_t)(i == 0 ? nq : i == 1 ? nk : nv) * sizeof(double));
    fsa_ref_grad_terms_free(&exact);
    fsa_ref_grad_terms_free(&given);
    for (int i = 0; i < 3; i++) free(g[i]), free(h[i]);
    free(dout);
    free(o_f);
    release(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_window_of_one_gives_each_query_its_own_value),
        cmocka_unit_test(test_a_window_as_long_as_the_sequence_is_causal_attention_within_it),
        cmocka_unit_test(test_a_middle_window_starts_w_minus_one_keys_back_but_not_before_the_sequence),
        cmocka_unit_test(test_per_head_windows_give_each_head_the_rows_of_its_own_window),
        cmocka_unit_test(test_the_backward_is_the_gradient_of_the_forward),
        cmocka_unit_test(test_the_term_norms_take_o_given_or_exact_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
