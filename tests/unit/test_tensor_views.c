/* The check every tensor view of a call passes (fsa_check_tensor for q, k,
 * v, o and their gradients, fsa_check_float_view for gates): a pointer, its
 * alignment, strides, and rows that all start below 2^63 bytes of address,
 * since a kernel forms a row's address as the pointer plus a signed 64-bit
 * element offset. The rule for written views is in test_written_views.c. */
#include "testing.h"

#include "attention/launch.h"

#include <stdint.h>
#include <string.h>

#define HIGH (UINT64_C(1) << 63)

static fsa_status view(uint64_t ptr, int64_t token_stride, int64_t head_stride, int64_t tokens, int64_t heads)
{
    const fsa_tensor t = {ptr, token_stride, head_stride};
    return fsa_check_tensor("forward", "q", &t, tokens, heads);
}

static fsa_status float_view(uint64_t ptr, int64_t token_stride, int64_t head_stride, int64_t tokens, int64_t heads)
{
    const fsa_tensor t = {ptr, token_stride, head_stride};
    return fsa_check_float_view("backward", "gate", &t, tokens, heads);
}

static void test_dense_padded_and_repeated_rows_are_accepted(void **state)
{
    (void)state;
    assert_int_equal(view(0x7f0000000000ull, 8 * 128, 128, 65536, 8), FSA_STATUS_OK);
    assert_int_equal(view(0x7f0000000000ull, 8 * 136, 136, 65536, 8), FSA_STATUS_OK);
    assert_int_equal(view(0x7f0000000000ull, 0, 128, 65536, 8), FSA_STATUS_OK); /* read views may repeat rows */
    assert_int_equal(float_view(0x7f0000000004ull, 0, 1, 65536, 64), FSA_STATUS_OK);
}

static void test_a_null_misaligned_or_negative_view_is_refused(void **state)
{
    (void)state;
    assert_int_equal(view(0, 1024, 128, 10, 8), FSA_STATUS_NULL_POINTER);
    assert_int_equal(view(0x7f0000000008ull, 1024, 128, 10, 8), FSA_STATUS_MISALIGNED);
    assert_int_equal(view(0x7f0000000000ull, 1028, 128, 10, 8), FSA_STATUS_MISALIGNED);
    assert_int_equal(view(0x7f0000000000ull, -1024, 128, 10, 8), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(float_view(0x7f0000000002ull, 8, 1, 10, 8), FSA_STATUS_MISALIGNED);
}

static void test_rows_reaching_past_two_to_the_63_bytes_are_refused_with_the_view_named(void **state)
{
    (void)state;
    /* The last row starts exactly at 2^63: refused; one row earlier: accepted. */
    assert_int_equal(view(HIGH - 4096, 1024, 8, 3, 1), FSA_STATUS_INVALID_ARGUMENT); /* 4096 = 2 x 1024 x 2 bytes */
    assert_non_null(strstr(fsa_last_error(), "q reaches past 2^63 bytes"));
    assert_int_equal(view(HIGH - 4096, 1024, 8, 2, 1), FSA_STATUS_OK);
    /* A pointer near the top of the address space, whose rows would wrap around it. */
    assert_int_equal(view(UINT64_MAX - 255, 8, 1024, 100, 4), FSA_STATUS_INVALID_ARGUMENT);
    /* Strides whose products overflow 64 bits: no overflow in the check itself. */
    assert_int_equal(view(0x7f0000000000ull, INT64_MAX - 7, 8, 1000, 8), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(view(0x7f0000000000ull, 8, INT64_MAX - 7, 1000, 8), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(float_view(0x7f0000000000ull, INT64_MAX, INT64_MAX, INT32_MAX, INT32_MAX),
                     FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "gate reaches past 2^63 bytes"));
}

static void test_the_stride_of_a_dimension_of_one_row_does_not_count_toward_the_span(void **state)
{
    (void)state;
    assert_int_equal(view(0x7f0000000000ull, INT64_MAX - 7, 128, 1, 8), FSA_STATUS_OK);
    assert_int_equal(view(0x7f0000000000ull, 1024, INT64_MAX - 7, 100, 1), FSA_STATUS_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_padded_and_repeated_rows_are_accepted),
        cmocka_unit_test(test_a_null_misaligned_or_negative_view_is_refused),
        cmocka_unit_test(test_rows_reaching_past_two_to_the_63_bytes_are_refused_with_the_view_named),
        cmocka_unit_test(test_the_stride_of_a_dimension_of_one_row_does_not_count_toward_the_span),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
