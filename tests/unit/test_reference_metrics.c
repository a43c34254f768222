/* Checks the error metrics of the CPU reference (relative, per-row relative and
 * largest absolute error: infinite for NaN or inf, matching -inf is no error) and
 * the count of selected entries behind the FLOP count. */
#include "reference.h"
#include "testing.h"

#include <math.h>
#include <stdint.h>

static void test_rel_error_is_infinite_for_nan_or_inf_and_zero_for_identical_arrays(void **state)
{
    (void)state;
    const double b[3] = {1.0, -2.0, 0.5};
    const float same[3] = {1.0f, -2.0f, 0.5f};
    const float with_nan[3] = {1.0f, NAN, 0.5f};
    const float with_inf[3] = {1.0f, -2.0f, INFINITY};
    assert_true(fsa_rel_error(same, b, 3) == 0.0);
    assert_true(isinf(fsa_rel_error(with_nan, b, 3)));
    assert_true(isinf(fsa_rel_error(with_inf, b, 3)));
    assert_true(isinf(fsa_max_abs_error(with_nan, b, 3)));
    assert_true(fsa_max_abs_error(same, b, 3) == 0.0);

    /* Matching -inf (empty rows' lse) is no error; a finite value there is. */
    const double lse_ref[2] = {-INFINITY, 3.0};
    const float lse_ok[2] = {-INFINITY, 3.0f};
    const float lse_bad[2] = {0.0f, 3.0f};
    assert_true(fsa_rel_error(lse_ok, lse_ref, 2) == 0.0);
    assert_true(isinf(fsa_rel_error(lse_bad, lse_ref, 2)));

    /* ||(1,2) - (1,0)|| / ||(1,0)|| = 2. */
    const float a2[2] = {1.0f, 2.0f};
    const double b2[2] = {1.0, 0.0};
    assert_true(fabs(fsa_rel_error(a2, b2, 2) - 2.0) < 1e-15);
    const double a2d[2] = {1.0, 2.0};
    assert_true(fabs(fsa_rel_error_d(a2d, b2, 2) - 2.0) < 1e-15);
    assert_true(fabs(fsa_max_abs_error(a2, b2, 2) - 2.0) < 1e-15);
}

static void test_row_error_finds_a_wrong_small_row_that_the_whole_tensor_norm_hides(void **state)
{
    (void)state;
    /* Row 0 large and right, row 1 small (a long context's average) and 50% wrong. */
    const double ref[4] = {10.0, 10.0, 0.1, 0.1};
    const float got[4] = {10.0f, 10.0f, 0.15f, 0.15f};
    assert_true(fsa_rel_error(got, ref, 4) < 1e-2);
    size_t worst = 99;
    const double err = fsa_row_rel_error(got, ref, 2, 2, 1e-3, &worst);
    assert_true(fabs(err - 0.5) < 1e-6);
    assert_int_equal(worst, 1);
    /* A row that cancels to zero is measured against the floor: floor_frac x the rms row norm (10). */
    const double ref_zero[4] = {10.0, 10.0, 0.0, 0.0};
    const float got_zero[4] = {10.0f, 10.0f, 0.01f, 0.0f};
    assert_true(fabs(fsa_row_rel_error(got_zero, ref_zero, 2, 2, 0.1, &worst) - 0.01) < 1e-6);
    assert_int_equal(worst, 1);
    /* Non-finite mismatches are infinite; matching -inf is no error. */
    const float got_nan[4] = {10.0f, NAN, 0.1f, 0.1f};
    assert_true(isinf(fsa_row_rel_error(got_nan, ref, 2, 2, 0.1, &worst)));
    assert_int_equal(worst, 0);
    /* A tensor whose every reference row is zero: its own rms gives no scale; abs_floor does. */
    const double ref_all_zero[4] = {0.0, 0.0, 0.0, 0.0};
    const float noise[4] = {1e-6f, 0.0f, 0.0f, 0.0f};
    assert_true(fsa_row_rel_error(noise, ref_all_zero, 2, 2, 0.1, NULL) > 1e20);
    assert_true(fabs(fsa_row_rel_error_floored(noise, ref_all_zero, 2, 2, 0.1, 1e-3, &worst) - 1e-3) < 1e-6);
    assert_int_equal(worst, 0);
    const double ref_inf[2] = {-INFINITY, 1.0};
    const float got_inf[2] = {-INFINITY, 1.0f};
    assert_true(fsa_row_rel_error(got_inf, ref_inf, 1, 2, 0.1, NULL) == 0.0);
}

/* The gradients' row error (fsa_row_rel_error_terms): each row against the largest of its own norm, its terms'
 * norm and a floor from the median row, so that one dominant row neither hides the others nor fails on its
 * rounding where its terms cancel. */
static void test_a_gradient_row_is_measured_against_its_terms_and_the_median_row(void **state)
{
    (void)state;
    enum { ROWS = 10 };
    double ref[2 * ROWS], terms[ROWS];
    float got[2 * ROWS];
    for (int r = 0; r < ROWS; r++) ref[2 * r] = 1.0, ref[2 * r + 1] = 0.0, terms[r] = 1.0;
    ref[0] = 1000.0, terms[0] = 1000.0; /* one dominant row */
    for (int e = 0; e < 2 * ROWS; e++) got[e] = (float)ref[e];
    size_t worst = 99;
    assert_true(fsa_row_rel_error_terms(got, ref, terms, ROWS, 2, 0.1, 0.0, &worst) == 0.0);
    /* A row of norm 1 that is 50% off is caught beside the norm-1000 row (an rms floor, 0.1 x 316, passed it). */
    got[10] = 1.5f;
    assert_true(fabs(fsa_row_rel_error_terms(got, ref, terms, ROWS, 2, 0.1, 0.0, &worst) - 0.5) < 1e-6);
    assert_int_equal(worst, 5);
    assert_true(fsa_row_rel_error(got, ref, ROWS, 2, 0.1, NULL) < 0.05);
    got[10] = 1.0f;
    /* A row that cancels to 0.01 from terms of norm 100 is measured at its terms: off by 0.05 is 5e-4. */
    ref[4] = 0.01, terms[2] = 100.0, got[4] = 0.06f;
    assert_true(fabs(fsa_row_rel_error_terms(got, ref, terms, ROWS, 2, 0.1, 0.0, &worst) - 5e-4) < 1e-6);
    assert_int_equal(worst, 2);
    /* Without terms it is measured at the floor, 0.1 x the median row norm (1): off by 0.05 is 0.5. */
    terms[2] = 0.0;
    assert_true(fabs(fsa_row_rel_error_terms(got, ref, terms, ROWS, 2, 0.1, 0.0, &worst) - 0.5) < 1e-6);
    /* abs_floor where every row is zero; non-finite mismatches are infinite. */
    const double zero[4] = {0.0, 0.0, 0.0, 0.0}, no_terms[2] = {0.0, 0.0};
    const float noise[4] = {1e-6f, 0.0f, 0.0f, 0.0f}, with_nan[4] = {0.0f, NAN, 0.0f, 0.0f};
    assert_true(fabs(fsa_row_rel_error_terms(noise, zero, no_terms, 2, 2, 0.1, 1e-3, &worst) - 1e-3) < 1e-6);
    assert_true(isinf(fsa_row_rel_error_terms(with_nan, zero, no_terms, 2, 2, 0.1, 1e-3, &worst)));
    assert_int_equal(worst, 0);
}

static void test_selected_entries_count_non_negative_entries_for_the_flop_count(void **state)
{
    (void)state;
    /* Head-major [2, 3, 2]. */
    const int32_t topk[12] = {0, -1, 0, 1, 5, -1, -1, -1, 2, 0, 0, 3};
    int64_t n = fsa_ref_selected_entries(topk, 6, 2, 3, 2, 2);
    assert_int_equal(n, 8);
    assert_true(fsa_ref_selected_flops(n, 4, 64, 128) == 4.0 * 8 * 4 * 64 * 128);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rel_error_is_infinite_for_nan_or_inf_and_zero_for_identical_arrays),
        cmocka_unit_test(test_row_error_finds_a_wrong_small_row_that_the_whole_tensor_norm_hides),
        cmocka_unit_test(test_a_gradient_row_is_measured_against_its_terms_and_the_median_row),
        cmocka_unit_test(test_selected_entries_count_non_negative_entries_for_the_flop_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
