/* Checks the CPU reference's backward against central finite differences of
 * its forward, with empty, future, past-the-end, repeated and out-of-range
 * top-k entries in the rows, for two block sizes. */
#include "reference_problem.h"

#include <stdlib.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_matches_central_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
