/* Checks the CPU reference's backward against central finite differences of
 * its forward, with empty, future, past-the-end, repeated and out-of-range
 * top-k entries in the rows, for two block sizes; the backward given the
 * o a call read (fsa_ref_backward_given_o); and each gradient row's term
 * norm (fsa_ref_backward_terms), which the GPU tests' per-row bounds use. */
#include "reference_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t kv_size(const fsa_ref_problem *p)
{
    return (size_t)p->total_tokens * p->num_kv_heads * p->head_dim;
}

static double loss(const fsa_ref_problem *p, const float *dout, double *o)
{
    fsa_ref_forward(p, o, NULL);
    double l = 0.0;
    for (size_t e = 0; e < o_size(p); e++) l += o[e] * (double)dout[e];
    return l;
}

/* Central differences of L = sum(o * dout) w.r.t. every element of x. The
 * step is measured as the float difference actually applied. */
static void numeric_gradient(const fsa_ref_problem *p, const float *dout, float *x, size_t n,
                             double *grad)
{
    const double step = 0x1p-13;
    double *o = new_doubles(o_size(p));
    for (size_t e = 0; e < n; e++) {
        float saved = x[e];
        float up = (float)(saved + step), down = (float)(saved - step);
        x[e] = up;
        double l_up = loss(p, dout, o);
        x[e] = down;
        double l_down = loss(p, dout, o);
        x[e] = saved;
        grad[e] = (l_up - l_down) / ((double)up - (double)down);
    }
    free(o);
}

static void check_gradients_for_block_size(int bk)
{
    /* T = 7 in sequences of 3 and 4 tokens. */
    const int lens[] = {3, 4};
    owned_problem op;
    make_problem(&op, 2, lens, 4, 2, 8, bk, 3, 1000 + (uint64_t)bk);
    generate_selection(&op, 7);
    set_row(&op, 0, 1, NULL, 0);                                /* all -1 */
    set_row(&op, 1, 3, (const int32_t[]){1, 0, -1}, 3);         /* future / past-end block */
    set_row(&op, 0, 5, (const int32_t[]){2 / bk, 2 / bk, 0}, 3); /* duplicate (i = 2) */
    set_row(&op, 1, 6, (const int32_t[]){0, 7, -4}, 3);          /* out of range */

    fsa_ref_problem *p = &op.p;
    fsa_rng rng = {99};
    float *dout = normal_floats(&rng, o_size(p));
    double *dq = new_doubles(o_size(p)), *dk = new_doubles(kv_size(p)),
           *dv = new_doubles(kv_size(p));
    fsa_ref_backward(p, dout, dq, dk, dv);

    double *num = new_doubles(o_size(p));
    numeric_gradient(p, dout, op.q, o_size(p), num);
    assert_true(fsa_rel_error_d(dq, num, o_size(p)) < 1e-6);
    numeric_gradient(p, dout, op.k, kv_size(p), num);
    assert_true(fsa_rel_error_d(dk, num, kv_size(p)) < 1e-6);
    numeric_gradient(p, dout, op.v, kv_size(p), num);
    assert_true(fsa_rel_error_d(dv, num, kv_size(p)) < 1e-6);

    /* Token 1 of kv head 0 sees nothing: its query heads 0 and 1 get dq = 0. */
    for (int qh = 0; qh < 2; qh++)
        for (int d = 0; d < 8; d++) assert_true(dq[((size_t)1 * 4 + qh) * 8 + d] == 0.0);

    free(num);
    free(dq);
    free(dk);
    free(dv);
    free(dout);
    free_problem(&op);
}

static void test_backward_matches_central_finite_differences(void **state)
{
    (void)state;
    check_gradients_for_block_size(2);
    check_gradients_for_block_size(4);
}

/* Given the exact o the backward is the plain one (o as floats: to float
 * rounding); given another o only delta = rowsum(dout * o) moves, so dv keeps
 * its bits and a query that sees one key (P = 1: dq = 0 exactly, as dS = dout
 * v - dout o = 0) gets dq = -scale (dout . (o_used - v)) k, and that key's dk
 * moves by -scale (dout . (o_used - v)) q. */
static void test_backward_given_the_o_read_moves_only_delta(void **state)
{
    (void)state;
    const int lens[] = {5};
    owned_problem op;
    make_problem(&op, 1, lens, 2, 1, 8, 4, 2, 77);
    generate_selection(&op, 3);
    fsa_ref_problem *p = &op.p;
    fsa_rng rng = {5};
    const size_t n = o_size(p);
    float *dout = normal_floats(&rng, n), *o_used = malloc(n * sizeof(float));
    double *o = new_doubles(n), *dq = new_doubles(n), *dk = new_doubles(kv_size(p)), *dv = new_doubles(kv_size(p));
    double *dq_g = new_doubles(n), *dk_g = new_doubles(kv_size(p)), *dv_g = new_doubles(kv_size(p));
    assert_non_null(o_used);
    fsa_ref_forward(p, o, NULL);
    fsa_ref_backward(p, dout, dq, dk, dv);
    for (size_t e = 0; e < n; e++) o_used[e] = (float)o[e];
    fsa_ref_backward_given_o(p, dout, o_used, dq_g, dk_g, dv_g);
    assert_true(fsa_rel_error_d(dq_g, dq, n) < 1e-6);
    assert_true(fsa_rel_error_d(dk_g, dk, kv_size(p)) < 1e-6);
    assert_memory_equal(dv_g, dv, kv_size(p) * sizeof(double));

    /* Token 0 sees key 0 alone: o = v_0 exactly (so also as floats), dq = 0. Query head 1 (KV head 0)
     * reads o + eps; key 0's dk moves from the dk given the other rows' o as floats. */
    double *dk_base = new_doubles(kv_size(p));
    memcpy(dk_base, dk_g, kv_size(p) * sizeof(double));
    const int D = 8, qh = 1;
    for (int d = 0; d < D; d++) assert_true(dq[(size_t)qh * D + d] == 0.0);
    double shift = 0.0;
    for (int d = 0; d < D; d++) {
        o_used[(size_t)qh * D + d] += 0.25f * (float)(d + 1);
        shift += (double)dout[(size_t)qh * D + d] * ((double)o_used[(size_t)qh * D + d] - o[(size_t)qh * D + d]);
    }
    fsa_ref_backward_given_o(p, dout, o_used, dq_g, dk_g, dv_g);
    assert_memory_equal(dv_g, dv, kv_size(p) * sizeof(double));
    for (int d = 0; d < D; d++) {
        const double want_dq = -p->scale * shift * (double)op.k[d];
        assert_true(fabs(dq_g[(size_t)qh * D + d] - want_dq) <= 1e-12 * (1.0 + fabs(want_dq)));
        const double want_dk = dk_base[d] - p->scale * shift * (double)op.q[(size_t)qh * D + d];
        assert_true(fabs(dk_g[d] - want_dk) <= 1e-12 * (1.0 + fabs(want_dk)));
    }
    /* Every other query row keeps its dq. */
    for (size_t e = 2 * (size_t)D; e < n; e++) assert_true(fabs(dq_g[e] - dq[e]) <= 1e-6 * (1.0 + fabs(dq[e])));
    free(dout), free(o_used), free(o), free(dq), free(dk), free(dv), free(dq_g), free(dk_g), free(dv_g), free(dk_base);
    free_problem(&op);
}

static double norm_f(const float *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static double norm_d(const double *x, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b)) + 1e-300; }

static double abs_dot_fd(const float *a, const double *b, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    return s;
}

/* Token 0 sees key 0 alone (P 1, dS 0); token 1 sees keys 0 and 1, whose dS are opposite (they sum to 0), so
 * dq_1 = scale dS_0 (k_0 - k_1) while its terms' norm is scale sqrt(dS_0^2 (|k_0|^2 + |k_1|^2)) plus the dot
 * products' rounding terms: with k_1 close to k_0 the row cancels and the terms do not. Each dS's rounding
 * term is Dv 2^-24 P (sum |dout v| + sum |dout o|), P recovered from dv_1 = P_11 dout_1. */
static void test_term_norms_are_the_norms_of_each_key_s_contribution_taken_apart(void **state)
{
    (void)state;
    const int lens[] = {2}, D = 8;
    owned_problem op;
    make_problem(&op, 1, lens, 1, 1, D, 1, 2, 4242);
    for (int d = 0; d < D; d++) op.k[D + d] = op.k[d] + 1e-3f * (float)(d % 3); /* k_1 close to k_0 */
    set_row(&op, 0, 0, (const int32_t[]){0, -1}, 2);
    set_row(&op, 0, 1, (const int32_t[]){0, 1}, 2);
    fsa_ref_problem *p = &op.p;
    fsa_rng rng = {8};
    float *dout = normal_floats(&rng, o_size(p));
    double *dq = new_doubles(o_size(p)), *dk = new_doubles(kv_size(p)), *dv = new_doubles(kv_size(p));
    fsa_ref_grad_terms terms = {new_doubles(2), new_doubles(2), new_doubles(2)};
    fsa_ref_backward_terms(p, dout, NULL, dq, dk, dv, &terms);

    const float *k0 = op.k, *k1 = op.k + D, *v0 = op.v, *v1 = op.v + D, *q0 = op.q, *q1 = op.q + D;
    const float *go0 = dout, *go1 = dout + D;
    const double p11 = norm_d(dv + D, D) / norm_f(go1, D), p10 = 1.0 - p11;
    double o1[8], o0[8];
    float diff[8];
    for (int d = 0; d < D; d++) o1[d] = p10 * v0[d] + p11 * v1[d], o0[d] = v0[d], diff[d] = k0[d] - k1[d];
    const double u = D * 0x1p-24, s = p->scale;
    const double n00 = u * (abs_dot_fd(go0, o0, D) * 2), /* token 0: P 1 on key 0, o_0 = v_0 */
        n10 = u * p10 * (fsa_ref_abs_dot(go1, v0, D) + abs_dot_fd(go1, o1, D)),
                 n11 = u * p11 * (fsa_ref_abs_dot(go1, v1, D) + abs_dot_fd(go1, o1, D));
    const double ds = norm_d(dq + D, D) / (s * norm_f(diff, D)); /* |dS_10| = |dS_11| */
    assert_true(norm_d(dq, D) == 0.0 && norm_d(dq + D, D) > 0.0);
    assert_true(close_to(terms.dq[0], s * n00 * norm_f(k0, D)));
    assert_true(close_to(terms.dq[1], s * sqrt((ds * ds + n10 * n10) * pow(norm_f(k0, D), 2) +
                                               (ds * ds + n11 * n11) * pow(norm_f(k1, D), 2))));
    assert_true(terms.dq[1] > 100 * norm_d(dq + D, D)); /* the cancellation the terms measure past */
    assert_true(close_to(terms.dk[0], s * sqrt(n00 * n00 * pow(norm_f(q0, D), 2) +
                                               (ds * ds + n10 * n10) * pow(norm_f(q1, D), 2))));
    assert_true(close_to(terms.dk[1], s * sqrt(ds * ds + n11 * n11) * norm_f(q1, D)));
    assert_true(close_to(terms.dv[0], sqrt(pow(norm_f(go0, D), 2) + p10 * p10 * pow(norm_f(go1, D), 2))));
    assert_true(close_to(terms.dv[1], norm_d(dv + D, D)));

    /* The NULL form writes the same gradients. */
    double *dq2 = new_doubles(o_size(p)), *dk2 = new_doubles(kv_size(p)), *dv2 = new_doubles(kv_size(p));
    fsa_ref_backward_given_o(p, dout, NULL, dq2, dk2, dv2);
    assert_memory_equal(dq, dq2, o_size(p) * sizeof(double));
    assert_memory_equal(dk, dk2, kv_size(p) * sizeof(double));
    assert_memory_equal(dv, dv2, kv_size(p) * sizeof(double));
    free(dout), free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2);
    free(terms.dq), free(terms.dk), free(terms.dv);
    free_problem(&op);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_matches_central_finite_differences),
        cmocka_unit_test(test_backward_given_the_o_read_moves_only_delta),
        cmocka_unit_test(test_term_norms_are_the_norms_of_each_key_s_contribution_taken_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
