/* One version source: the VERSION file. The header's macros, the string and
 * the number the library reports all agree with it. */
#include "testing.h"

#include <stdio.h>
#include <string.h>

static void read_version_file(int *major, int *minor, int *patch)
{
    FILE *f = fopen(FSA_TEST_VERSION_FILE, "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%d.%d.%d", major, minor, patch), 3);
    fclose(f);
}

static void test_header_macros_match_the_version_file(void **state)
{
    (void)state;
    int major, minor, patch;
    read_version_file(&major, &minor, &patch);
    assert_int_equal(FSA_VERSION_MAJOR, major);
    assert_int_equal(FSA_VERSION_MINOR, minor);
    assert_int_equal(FSA_VERSION_PATCH, patch);
}

static void test_the_number_is_major_minor_patch_in_two_digit_fields(void **state)
{
    (void)state;
    assert_int_equal(fsa_version(), FSA_VERSION);
    assert_int_equal(FSA_VERSION, FSA_VERSION_MAJOR * 10000 + FSA_VERSION_MINOR * 100 + FSA_VERSION_PATCH);
    assert_true(FSA_VERSION_MINOR < 100 && FSA_VERSION_PATCH < 100);
}

static void test_the_string_spells_the_same_version(void **state)
{
    (void)state;
    char buf[32];
    int v = fsa_version();
    snprintf(buf, sizeof buf, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    assert_string_equal(fsa_version_string(), buf);
    assert_string_equal(FSA_VERSION_STRING, buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_macros_match_the_version_file),
        cmocka_unit_test(test_the_number_is_major_minor_patch_in_two_digit_fields),
        cmocka_unit_test(test_the_string_spells_the_same_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
