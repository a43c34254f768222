/* Environment switches read by fsa_env_flag and fsa_env_int: a value counts only
 * when it is exactly one of the accepted forms; anything else reads as absent,
 * so a typo never turns a switch into a surprising setting. */
#include "testing.h"

#include "base/util.h"

#include <limits.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_unset_or_empty_integer_variable_gives_the_fallback),
        cmocka_unit_test(test_a_whole_decimal_integer_in_range_is_read),
        cmocka_unit_test(test_malformed_or_out_of_range_integers_give_the_fallback),
        cmocka_unit_test(test_flags_accept_the_named_forms_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
