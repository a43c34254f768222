/* Environment switches read by fsa_env_flag and fsa_env_int: a value counts only
 * when it is exactly one of the accepted forms; anything else reads as absent,
 * so a typo never turns a switch into a surprising setting. And the growable
 * arrays' room: fsa_array_room. */
#include "testing.h"

#include "base/util.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#define VAR "FSA_TEST_UTIL_VARIABLE"

static int with_value(const char *value, int lo, int hi)
{
    assert_int_equal(setenv(VAR, value, 1), 0);
    const int v = fsa_env_int(VAR, lo, hi, -7);
    unsetenv(VAR);
    return v;
}

static void test_an_unset_or_empty_integer_variable_gives_the_fallback(void **state)
{
    (void)state;
    unsetenv(VAR);
    assert_int_equal(fsa_env_int(VAR, 0, 10, -7), -7);
    assert_int_equal(with_value("", 0, 10), -7);
}

static void test_a_whole_decimal_integer_in_range_is_read(void **state)
{
    (void)state;
    assert_int_equal(with_value("0", 0, 10), 0);
    assert_int_equal(with_value("10", 0, 10), 10);
    assert_int_equal(with_value("-3", -5, 5), -3);
    assert_int_equal(with_value("-0", -5, 5), 0);
    assert_int_equal(with_value("2147483647", 0, INT_MAX), INT_MAX);
}

static void test_malformed_or_out_of_range_integers_give_the_fallback(void **state)
{
    (void)state;
    assert_int_equal(with_value("11", 0, 10), -7);
    assert_int_equal(with_value("-1", 0, 10), -7);
    assert_int_equal(with_value("4x", 0, 10), -7);
    assert_int_equal(with_value("x4", 0, 10), -7);
    assert_int_equal(with_value("4 ", 0, 10), -7);
    /* strtol alone would skip the blank and read the sign: " 4" and "+4" would be 4. */
    assert_int_equal(with_value(" 4", 0, 10), -7);
    assert_int_equal(with_value("+4", 0, 10), -7);
    assert_int_equal(with_value("-+4", -5, 5), -7);
    assert_int_equal(with_value("- 4", -5, 5), -7);
    /* A sign where the range has no negatives: strtol would read "-0" as 0 (FSA_KVC_TMA=-0 turned tensor maps off). */
    assert_int_equal(with_value("-0", 0, 10), -7);
    assert_int_equal(with_value("-00", 0, 10), -7);
    assert_int_equal(with_value("99999999999999999999", 0, INT_MAX), -7);
}

static void test_flags_accept_the_named_forms_only(void **state)
{
    (void)state;
    static const char *const on[] = {"1", "on", "TRUE", "yes"}, *const off[] = {"0", "Off", "false", "no"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(setenv(VAR, on[i], 1), 0);
        assert_int_equal(fsa_env_flag(VAR, -1), 1);
        assert_int_equal(setenv(VAR, off[i], 1), 0);
        assert_int_equal(fsa_env_flag(VAR, -1), 0);
    }
    assert_int_equal(setenv(VAR, "2", 1), 0);
    assert_int_equal(fsa_env_flag(VAR, -1), -1);
    unsetenv(VAR);
    assert_int_equal(fsa_env_flag(VAR, -1), -1);
}

/* An array grows only when full, first to `first` elements, then by doubling, keeping what it held. */
static void test_an_array_gets_room_only_when_full_and_keeps_its_elements(void **state)
{
    (void)state;
    size_t cap = 0;
    int *v = fsa_array_room(NULL, &cap, 0, sizeof *v, 4);
    assert_non_null(v);
    assert_int_equal(cap, 4);
    for (int i = 0; i < 4; i++) {
        assert_ptr_equal(fsa_array_room(v, &cap, (size_t)i, sizeof *v, 4), v); /* room already */
        v[i] = 10 * i;
    }
    v = fsa_array_room(v, &cap, 4, sizeof *v, 4);
    assert_non_null(v);
    assert_int_equal(cap, 8);
    for (int i = 0; i < 4; i++) assert_int_equal(v[i], 10 * i);
    free(v);
}

/* A size past size_t is refused, the array and its capacity left as they were. */
static void test_an_array_whose_bytes_would_pass_size_t_gets_no_room(void **state)
{
    (void)state;
    size_t cap = 2;
    char *v = malloc(2);
    assert_non_null(v);
    assert_null(fsa_array_room(v, &cap, 2, SIZE_MAX / 3, 2));
    assert_int_equal(cap, 2);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_unset_or_empty_integer_variable_gives_the_fallback),
        cmocka_unit_test(test_a_whole_decimal_integer_in_range_is_read),
        cmocka_unit_test(test_malformed_or_out_of_range_integers_give_the_fallback),
        cmocka_unit_test(test_flags_accept_the_named_forms_only),
        cmocka_unit_test(test_an_array_gets_room_only_when_full_and_keeps_its_elements),
        cmocka_unit_test(test_an_array_whose_bytes_would_pass_size_t_gets_no_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
