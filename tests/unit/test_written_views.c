/* The check every written view passes (fsa_check_written): its rows must be
 * distinct memory, or the kernels' writes would race. The calls that apply
 * it are checked in the nvrtc argument tests of each operation. */
#include "testing.h"

#include "attention/launch.h"

#include <stdint.h>
#include <string.h>

static fsa_status written(int64_t token_stride, int64_t head_stride, int64_t tokens, int64_t heads, int64_t row)
{
    const fsa_tensor t = {0x7f0000000000ull, token_stride, head_stride};
    return fsa_check_written("forward", "o", &t, tokens, heads, row);
}

static void test_dense_and_head_major_layouts_are_accepted(void **state)
{
    (void)state;
    assert_int_equal(written(8 * 128, 128, 1000, 8, 128), FSA_STATUS_OK);  /* [T, H, D] */
    assert_int_equal(written(128, 1000 * 128, 1000, 8, 128), FSA_STATUS_OK); /* [H, T, D] */
    assert_int_equal(written(8, 1000 * 8, 1000, 4, 8), FSA_STATUS_OK);       /* [Hkv, T, K] top-k rows */
    assert_int_equal(written(1, 1000, 1000, 4, 1), FSA_STATUS_OK);           /* a [Hq, T] float view */
}

static void test_padding_between_rows_is_accepted(void **state)
{
    (void)state;
    assert_int_equal(written(8 * 136, 136, 1000, 8, 128), FSA_STATUS_OK);
    assert_int_equal(written(5000, 128, 1000, 8, 128), FSA_STATUS_OK);
}

static void test_the_stride_of_a_dimension_of_one_row_is_never_used(void **state)
{
    (void)state;
    assert_int_equal(written(0, 128, 1, 8, 128), FSA_STATUS_OK);
    assert_int_equal(written(128, 0, 1000, 1, 128), FSA_STATUS_OK);
    assert_int_equal(written(0, 0, 1, 1, 128), FSA_STATUS_OK);
    assert_int_equal(written(0, 0, 1, 1, 1), FSA_STATUS_OK);
}

static void test_rows_that_share_bytes_are_refused_with_their_layout_named(void **state)
{
    (void)state;
    assert_int_equal(written(0, 128, 2, 8, 128), FSA_STATUS_INVALID_ARGUMENT); /* every token on one row */
    assert_non_null(strstr(fsa_last_error(), "o is written"));
    assert_non_null(strstr(fsa_last_error(), "token stride 0, head stride 128"));
    assert_int_equal(written(8 * 128, 0, 1000, 8, 128), FSA_STATUS_INVALID_ARGUMENT); /* heads on one row */
    assert_int_equal(written(8 * 128, 64, 1000, 8, 128), FSA_STATUS_INVALID_ARGUMENT); /* heads half a row apart */
    assert_int_equal(written(7 * 128, 128, 1000, 8, 128), FSA_STATUS_INVALID_ARGUMENT); /* token t's last head is t + 1's first */
    assert_int_equal(written(128, 128, 1000, 8, 128), FSA_STATUS_INVALID_ARGUMENT);    /* equal strides */
    assert_int_equal(written(1, 1, 1000, 4, 1), FSA_STATUS_INVALID_ARGUMENT);          /* a float view, diagonal */
    assert_int_equal(written(4, 4, 2, 2, 8), FSA_STATUS_INVALID_ARGUMENT);
}

static void test_rows_interleaved_into_each_other_are_refused(void **state)
{
    (void)state;
    /* Distinct elements (3 tokens x 2 heads at 2t + 3h: 0, 2, 4 and 3, 5, 7), but the heads' rows interleave. */
    assert_int_equal(written(2, 3, 3, 2, 1), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(written(2, 6, 3, 2, 1), FSA_STATUS_OK); /* 0, 2, 4 and 6, 8, 10: nested */
}

static void test_rows_one_element_short_of_apart_are_refused_and_adjacent_ones_accepted(void **state)
{
    (void)state;
    assert_int_equal(written(127, 1 << 20, 2, 2, 128), FSA_STATUS_INVALID_ARGUMENT); /* tokens' rows share one element */
    assert_int_equal(written(128, 1 << 20, 2, 2, 128), FSA_STATUS_OK);
    assert_int_equal(written(1023, 128, 1000, 8, 128), FSA_STATUS_INVALID_ARGUMENT); /* token t's last head, t + 1's first */
    assert_int_equal(written(1024, 128, 1000, 8, 128), FSA_STATUS_OK);
}

static void test_strides_whose_span_overflows_are_refused_without_overflow(void **state)
{
    (void)state;
    assert_int_equal(written(INT64_MAX / 2, INT64_MAX, 4, 2, 128), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(written(INT64_MAX / 4, 128, 3, 1, 128), FSA_STATUS_OK); /* one dimension: no span needed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_and_head_major_layouts_are_accepted),
        cmocka_unit_test(test_padding_between_rows_is_accepted),
        cmocka_unit_test(test_the_stride_of_a_dimension_of_one_row_is_never_used),
        cmocka_unit_test(test_rows_that_share_bytes_are_refused_with_their_layout_named),
        cmocka_unit_test(test_rows_interleaved_into_each_other_are_refused),
        cmocka_unit_test(test_rows_one_element_short_of_apart_are_refused_and_adjacent_ones_accepted),
        cmocka_unit_test(test_strides_whose_span_overflows_are_refused_without_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
