/* The public header: compiles alone as C11 and as C++ (header_c11.c,
 * header_cxx.cpp) with the same INIT values, and so does each of its parts
 * (the translation units header_parts.cmake writes); every status has a
 * distinct non-empty name and message. */
#include "testing.h"

#include "header_parts.h"
#include "header_probe.h"

#include <stdio.h>
#include <string.h>

/* What the test itself sees: the values both probes must report. */
static void expected_values(size_t out[FSA_PROBE_VALUES])
{
    const size_t want[FSA_PROBE_VALUES] = {sizeof(fsa_context_options),
                                           sizeof(fsa_cache_stats),
                                           sizeof(fsa_selected_attention_desc),
                                           sizeof(fsa_fwd_args),
                                           sizeof(fsa_bwd_args),
                                           128,
                                           64,
                                           16,
                                           0,
                                           0,
                                           0,
                                           3 * 8,
                                           sizeof(fsa_compressed_attention_desc),
                                           sizeof(fsa_compressed_fwd_args),
                                           128,
                                           32 * 100 + 16,
                                           16 * 1000 + 64 * 10 + 1,
                                           2,
                                           sizeof(fsa_compressed_bwd_args),
                                           sizeof(fsa_window_attention_desc) + 128 * 1000 + 512,
                                           sizeof(fsa_window_fwd_args),
                                           sizeof(fsa_gate_desc) + 128 * 1000 + FSA_DTYPE_BF16,
                                           sizeof(fsa_gate_args)};
    memcpy(out, want, sizeof want);
}

static void test_the_header_compiles_alone_in_strict_c11(void **state)
{
    (void)state;
    size_t want[FSA_PROBE_VALUES], got[FSA_PROBE_VALUES];
    expected_values(want);
    fsa_header_c11_probe(got);
    for (int i = 0; i < FSA_PROBE_VALUES; i++) assert_int_equal(got[i], want[i]);
}

static void test_the_header_compiles_alone_as_cxx_with_the_same_defaults(void **state)
{
    (void)state;
#ifdef FSA_TEST_CXX_HEADER
    size_t want[FSA_PROBE_VALUES], got[FSA_PROBE_VALUES];
    expected_values(want);
    fsa_header_cxx_probe(got);
    for (int i = 0; i < FSA_PROBE_VALUES; i++) assert_int_equal(got[i], want[i]);
#else
    skip(); /* no C++ compiler was found */
#endif
}

/* What each part's translation units saw: the addresses of the functions it
 * declares, 0 at the end. */
typedef void (*fsa_header_any_fn)(void);
#ifdef FSA_TEST_CXX_HEADER
#define FSA_HEADER_PART_DECLARE_(name)                                   \
    extern const fsa_header_any_fn fsa_header_part_##name##_c11[];       \
    extern const fsa_header_any_fn fsa_header_part_##name##_cxx[];
#else
#define FSA_HEADER_PART_DECLARE_(name) extern const fsa_header_any_fn fsa_header_part_##name##_c11[];
#endif
FSA_HEADER_PARTS(FSA_HEADER_PART_DECLARE_)
extern const int fsa_header_umbrella_parts;

static void test_each_part_compiles_alone_in_c11_and_cxx(void **state)
{
    (void)state;
    int parts = 0, functions = 0;
#ifdef FSA_TEST_CXX_HEADER
    /* In C++ the same functions, through the part's extern "C": the same
     * addresses as in C (a C++ name would not have linked). */
#define FSA_HEADER_PART_CHECK_(name)                                                          \
    do {                                                                                      \
        const fsa_header_any_fn *c_ = fsa_header_part_##name##_c11;                           \
        const fsa_header_any_fn *cxx_ = fsa_header_part_##name##_cxx;                         \
        int i_ = 0;                                                                           \
        for (; c_[i_] != 0; i_++) assert_true(cxx_[i_] == c_[i_]);                            \
        assert_true(cxx_[i_] == 0);                                                           \
        parts++;                                                                              \
        functions += i_;                                                                      \
    } while (0);
#else
#define FSA_HEADER_PART_CHECK_(name)                                                          \
    do {                                                                                      \
        int i_ = 0;                                                                           \
        while (fsa_header_part_##name##_c11[i_] != 0) i_++;                                   \
        parts++;                                                                              \
        functions += i_;                                                                      \
    } while (0);
#endif
    FSA_HEADER_PARTS(FSA_HEADER_PART_CHECK_)
    /* umbrella_c11.c checked, at its compile, that fsa.h includes each of these parts (the list is
     * include/fsa/'s files: a count compared with its own length would check nothing). */
    assert_true(parts > 0);
    assert_true(functions > 0);
}

static void test_every_status_has_a_distinct_non_empty_name_and_message(void **state)
{
    (void)state;
    for (int a = 0; a < FSA_STATUS_COUNT_; a++) {
        const char *na = fsa_status_name((fsa_status)a), *ma = fsa_status_string((fsa_status)a);
        assert_non_null(na);
        assert_non_null(ma);
        assert_true(strlen(na) > strlen("FSA_STATUS_"));
        assert_true(strlen(ma) > 0);
        assert_string_not_equal(na, "FSA_STATUS_UNKNOWN");
        for (int b = 0; b < a; b++) {
            assert_string_not_equal(na, fsa_status_name((fsa_status)b));
            assert_string_not_equal(ma, fsa_status_string((fsa_status)b));
        }
    }
}

static void test_unknown_status_values_still_have_strings(void **state)
{
    (void)state;
    assert_string_equal(fsa_status_name((fsa_status)9999), "FSA_STATUS_UNKNOWN");
    assert_true(strlen(fsa_status_string((fsa_status)-1)) > 0);
}

static void test_status_values_are_stable(void **state)
{
    (void)state;
    /* Append-only: these numbers are ABI. */
    assert_int_equal(FSA_STATUS_OK, 0);
    assert_int_equal(FSA_STATUS_INVALID_ARGUMENT, 1);
    assert_int_equal(FSA_STATUS_NO_DRIVER, 5);
    assert_int_equal(FSA_STATUS_NO_NVRTC, 8);
    assert_int_equal(FSA_STATUS_JIT_DISABLED, 10);
    assert_int_equal(FSA_STATUS_INTERNAL, 18);
}

static void test_version_string_matches_the_macros(void **state)
{
    (void)state;
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", FSA_VERSION_MAJOR, FSA_VERSION_MINOR, FSA_VERSION_PATCH);
    assert_string_equal(fsa_version_string(), buf);
    assert_string_equal(FSA_VERSION_STRING, buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_header_compiles_alone_in_strict_c11),
        cmocka_unit_test(test_the_header_compiles_alone_as_cxx_with_the_same_defaults),
        cmocka_unit_test(test_each_part_compiles_alone_in_c11_and_cxx),
        cmocka_unit_test(test_every_status_has_a_distinct_non_empty_name_and_message),
        cmocka_unit_test(test_unknown_status_values_still_have_strings),
        cmocka_unit_test(test_status_values_are_stable),
        cmocka_unit_test(test_version_string_matches_the_macros),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
