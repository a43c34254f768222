/* Compile targets (fsa_target_parse and the table behind it): which names are
 * accepted and what they mean, the shared memory each allows a block, which
 * devices a target's cubin runs on, and which target a device gets. */
#include "testing.h"

#include "jit/target.h"

#include <stdio.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static fsa_target parsed(const char *name)
{
    fsa_target t;
    if (fsa_target_parse(&t, name) != FSA_STATUS_OK) fail_msg("%s rejected: %s", name, fsa_last_error());
    return t;
}

static void test_a_name_gives_its_capability_and_suffix(void **state)
{
    (void)state;
    fsa_target t = parsed("sm_80");
    assert_int_equal(t.major, 8);
    assert_int_equal(t.minor, 0);
    assert_int_equal(t.suffix, '\0');
    assert_string_equal(t.name, "sm_80");

    t = parsed("sm_90a");
    assert_int_equal(t.major, 9);
    assert_int_equal(t.minor, 0);
    assert_int_equal(t.suffix, 'a');
    assert_string_equal(t.name, "sm_90a");

    t = parsed("sm_121f");
    assert_int_equal(t.major, 12);
    assert_int_equal(t.minor, 1);
    assert_int_equal(t.suffix, 'f');
    assert_string_equal(t.name, "sm_121f");

    t = parsed("sm_100");
    assert_int_equal(t.major, 10);
    assert_int_equal(t.minor, 0);
}

static void test_each_target_allows_its_parts_opt_in_shared_memory_per_block(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int bytes;
    } cases[] = {
        {"sm_80", 166912},   {"sm_86", 101376},  {"sm_87", 166912},   {"sm_89", 101376},
        {"sm_90", 232448},   {"sm_90a", 232448}, {"sm_100a", 232448}, {"sm_103", 232448},
        {"sm_110f", 232448}, {"sm_120", 101376}, {"sm_120a", 101376}, {"sm_121", 101376},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        fsa_target t = parsed(cases[i].name);
        if (t.smem_per_block != cases[i].bytes)
            fail_msg("%s allows %d bytes, expected %d", cases[i].name, t.smem_per_block, cases[i].bytes);
    }
}

static void test_a_name_not_of_the_form_sm_major_minor_suffix_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *bad[] = {"", "sm_", "sm_8", "sm_9x", "sm_1000", "sm_080", "compute_80", "SM_80", "sm_80 ",
                         " sm_80", "sm_90b", "sm_90aa", "sm_90A", "80", "sm-80", "sm_+80",
                         "sm_99999999999", "sm_99999999999999999999a"}; /* digits past int: refused, no overflow */
    for (size_t i = 0; i < N_OF(bad); i++) {
        fsa_target t;
        t.major = 99;
        if (fsa_target_parse(&t, bad[i]) != FSA_STATUS_INVALID_ARGUMENT) fail_msg("\"%s\" not rejected as malformed", bad[i]);
        assert_int_equal(t.major, 0);
        assert_string_equal(fsa_last_error_info()->stage, "target");
        assert_non_null(strstr(fsa_last_error(), "sm_<major><minor>"));
    }
    fsa_target t;
    assert_int_equal(fsa_target_parse(&t, NULL), FSA_STATUS_INVALID_ARGUMENT);
}

static void test_a_well_formed_name_the_table_does_not_list_is_an_unsupported_device(void **state)
{
    (void)state;
    /* Too old, a suffix the architecture lacks, parts the table does not know. */
    const char *unknown[] = {"sm_75", "sm_70", "sm_10", "sm_80a", "sm_86f", "sm_90f", "sm_88", "sm_95", "sm_130",
                             "sm_99a"};
    for (size_t i = 0; i < N_OF(unknown); i++) {
        fsa_target t;
        if (fsa_target_parse(&t, unknown[i]) != FSA_STATUS_UNSUPPORTED_DEVICE)
            fail_msg("\"%s\" not rejected as unsupported", unknown[i]);
        /* The message names the target and what is known instead. */
        assert_non_null(strstr(fsa_last_error(), unknown[i]));
        assert_non_null(strstr(fsa_last_error(), "sm_90a"));
        /* The list, from its first target to its last. */
        assert_non_null(strstr(fsa_last_error(), "(known: sm_80, sm_86, "));
        assert_non_null(strstr(fsa_last_error(), ", sm_121a, sm_121f)"));
    }
}

static void test_every_known_target_parses_back_to_itself(void **state)
{
    (void)state;
    const size_t n = fsa_target_known_count();
    assert_true(n >= 10);
    int saw_80 = 0, saw_90a = 0;
    for (size_t i = 0; i < n; i++) {
        fsa_target k;
        fsa_target_known(&k, i);
        fsa_target t = parsed(k.name);
        assert_memory_equal(&t, &k, sizeof t);
        assert_true(t.major >= 8);
        assert_true(t.smem_per_block >= 48 * 1024);
        saw_80 |= strcmp(t.name, "sm_80") == 0;
        saw_90a |= strcmp(t.name, "sm_90a") == 0;
        for (size_t j = 0; j < i; j++) {
            fsa_target other;
            fsa_target_known(&other, j);
            if (strcmp(other.name, k.name) == 0) fail_msg("%s listed twice", k.name);
        }
    }
    assert_true(saw_80 && saw_90a);
    /* Each suffix is its own target: the last of all is sm_121f. */
    fsa_target last;
    fsa_target_known(&last, n - 1);
    assert_string_equal(last.name, "sm_121f");
}

static void test_a_target_runs_on_its_own_major_version_with_an_equal_or_newer_minor(void **state)
{
    (void)state;
    fsa_target t = parsed("sm_80");
    assert_true(fsa_target_runs_on(&t, 8, 0));
    assert_true(fsa_target_runs_on(&t, 8, 6));
    assert_true(fsa_target_runs_on(&t, 8, 9));
    assert_false(fsa_target_runs_on(&t, 9, 0));
    assert_false(fsa_target_runs_on(&t, 7, 5));

    t = parsed("sm_86");
    assert_true(fsa_target_runs_on(&t, 8, 6));
    assert_true(fsa_target_runs_on(&t, 8, 9));
    assert_false(fsa_target_runs_on(&t, 8, 0));

    t = parsed("sm_90");
    assert_true(fsa_target_runs_on(&t, 9, 0));
    assert_false(fsa_target_runs_on(&t, 10, 0));

    /* A family target runs on the later members of its family. */
    t = parsed("sm_100f");
    assert_true(fsa_target_runs_on(&t, 10, 0));
    assert_true(fsa_target_runs_on(&t, 10, 3));
    assert_false(fsa_target_runs_on(&t, 12, 0));
}

static void test_an_arch_specific_target_runs_only_on_its_own_capability(void **state)
{
    (void)state;
    fsa_target t = parsed("sm_90a");
    assert_true(fsa_target_runs_on(&t, 9, 0));
    assert_false(fsa_target_runs_on(&t, 8, 0));
    assert_false(fsa_target_runs_on(&t, 8, 9));
    assert_false(fsa_target_runs_on(&t, 10, 0));

    t = parsed("sm_100a");
    assert_true(fsa_target_runs_on(&t, 10, 0));
    assert_false(fsa_target_runs_on(&t, 10, 3));
    assert_false(fsa_target_runs_on(&t, 9, 0));

    assert_false(fsa_target_runs_on(NULL, 9, 0));
}

static void test_a_device_gets_sm_90a_on_hopper_and_the_plain_target_elsewhere(void **state)
{
    (void)state;
    static const struct {
        int major, minor;
        const char *name;
    } cases[] = {{9, 0, "sm_90a"}, {8, 0, "sm_80"}, {8, 6, "sm_86"}, {8, 7, "sm_87"},
                 {8, 9, "sm_89"},  {10, 0, "sm_100"}, {12, 0, "sm_120"}};
    for (size_t i = 0; i < N_OF(cases); i++) {
        fsa_target t;
        assert_int_equal(fsa_target_for_capability(&t, cases[i].major, cases[i].minor), FSA_STATUS_OK);
        assert_string_equal(t.name, cases[i].name);
        /* It is a known target, and it runs on the device it was made for. */
        fsa_target again = parsed(t.name);
        assert_memory_equal(&again, &t, sizeof t);
        assert_true(fsa_target_runs_on(&t, cases[i].major, cases[i].minor));
    }
}

static void test_a_newer_minor_revision_gets_the_newest_earlier_target_of_its_major_version(void **state)
{
    (void)state;
    static const struct {
        int major, minor;
        const char *name;
    } cases[] = {{8, 8, "sm_87"}, {9, 1, "sm_90"}, {10, 4, "sm_103"}, {12, 5, "sm_121"}};
    for (size_t i = 0; i < N_OF(cases); i++) {
        fsa_target t;
        assert_int_equal(fsa_target_for_capability(&t, cases[i].major, cases[i].minor), FSA_STATUS_OK);
        assert_string_equal(t.name, cases[i].name);
        assert_true(fsa_target_runs_on(&t, cases[i].major, cases[i].minor));
    }
}

static void test_a_capability_without_a_known_target_of_its_major_version_is_an_unsupported_device(void **state)
{
    (void)state;
    const int caps[][2] = {{7, 5}, {13, 0}, {0, 0}, {14, 2}};
    for (size_t i = 0; i < N_OF(caps); i++) {
        fsa_target t;
        assert_int_equal(fsa_target_for_capability(&t, caps[i][0], caps[i][1]), FSA_STATUS_UNSUPPORTED_DEVICE);
        char cap[16];
        snprintf(cap, sizeof cap, "%d.%d", caps[i][0], caps[i][1]);
        assert_non_null(strstr(fsa_last_error(), cap));
        assert_int_equal(t.major, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_name_gives_its_capability_and_suffix),
        cmocka_unit_test(test_each_target_allows_its_parts_opt_in_shared_memory_per_block),
        cmocka_unit_test(test_a_name_not_of_the_form_sm_major_minor_suffix_is_an_invalid_argument),
        cmocka_unit_test(test_a_well_formed_name_the_table_does_not_list_is_an_unsupported_device),
        cmocka_unit_test(test_every_known_target_parses_back_to_itself),
        cmocka_unit_test(test_a_target_runs_on_its_own_major_version_with_an_equal_or_newer_minor),
        cmocka_unit_test(test_an_arch_specific_target_runs_only_on_its_own_capability),
        cmocka_unit_test(test_a_device_gets_sm_90a_on_hopper_and_the_plain_target_elsewhere),
        cmocka_unit_test(test_a_newer_minor_revision_gets_the_newest_earlier_target_of_its_major_version),
        cmocka_unit_test(test_a_capability_without_a_known_target_of_its_major_version_is_an_unsupported_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
