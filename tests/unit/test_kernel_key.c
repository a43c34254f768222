/* Kernel keys (fsa_key_build): deterministic, independent of the caller's
 * parameter order, sensitive to every field that decides a cubin's bytes,
 * safe to use in file names. Also the NVRTC options of a target, which are
 * part of every key. */
#include "testing.h"

#include "jit/compile.h"
#include "jit/kernel_key.h"
#include "jit/templates.h"

#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

/* The inputs of one key, with room to change any field. */
typedef struct key_spec {
    const char *family;
    fsa_param params[4];
    size_t n_params;
    const char *nvrtc;
    const char *target;
    const char *options[4];
    size_t n_options;
} key_spec;

static key_spec base_spec(void)
{
    key_spec s = {
        "sel_fwd_main",
        {{"DTYPE", "bf16", ""}, {"HEAD_DIM", "128", "d"}, {"GROUP", "4", "g"}, {"BLOCK_SIZE", "64", "bk"}},
        4,
        "13.0",
        "sm_90a",
        {"--gpu-architecture=sm_90a", "--std=c++17", "--extra-device-vectorization", "--generate-line-info"},
        4,
    };
    return s;
}

static fsa_status build(fsa_kernel_key *k, const key_spec *s)
{
    fsa_key_inputs in = {s->family, s->params, s->n_params, s->nvrtc, s->target, s->options, s->n_options};
    return fsa_key_build(k, &in);
}

static void build_ok(fsa_kernel_key *k, const key_spec *s)
{
    fsa_status st = build(k, s);
    if (st != FSA_STATUS_OK) fail_msg("fsa_key_build: %s", fsa_last_error());
}

static int is_lower_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static void expect_rejected(const key_spec *s, fsa_status want)
{
    fsa_kernel_key k;
    memset(&k, 0xab, sizeof k);
    assert_int_equal(build(&k, s), want);
    assert_int_equal(fsa_last_error_info()->status, want);
    assert_true(fsa_last_error_info()->message[0] != '\0');
    /* Nothing is handed out on failure. */
    assert_null(k.text);
    assert_null(k.name);
}

/* ------------------------------------------------------------ determinism */

static void test_the_same_inputs_give_the_same_text_digest_hex_and_name(void **state)
{
    (void)state;
    key_spec s = base_spec();
    fsa_kernel_key a, b;
    build_ok(&a, &s);
    build_ok(&b, &s);
    assert_string_equal(a.text, b.text);
    assert_memory_equal(a.digest, b.digest, 16);
    assert_string_equal(a.hex, b.hex);
    assert_string_equal(a.name, b.name);
    /* The hex is the digest, in lower case. */
    assert_true(is_lower_hex(a.hex, 32));
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", a.digest[i]);
    assert_string_equal(a.hex, hex);
    /* The digest is the XXH3-128 of the text. */
    uint8_t d[16];
    fsa_digest128(d, a.text, strlen(a.text));
    assert_memory_equal(d, a.digest, 16);
    fsa_key_free(&a);
    fsa_key_free(&b);
    /* Freed keys are zeroed; freeing twice or NULL is harmless. */
    assert_null(a.text);
    fsa_key_free(&a);
    fsa_key_free(NULL);
}

static void test_the_key_text_has_every_field_including_the_templates_digest(void **state)
{
    (void)state;
    key_spec s = base_spec();
    fsa_kernel_key k;
    build_ok(&k, &s);
    char line[64];
    snprintf(line, sizeof line, "\ntemplates %s\n", fsa_templates_digest());
    assert_non_null(strstr(k.text, line));
    assert_true(strncmp(k.text, "fsa-kernel-key ", 15) == 0);
    assert_non_null(strstr(k.text, "\nlibrary " FSA_VERSION_STRING "\n"));
    assert_non_null(strstr(k.text, "\nfamily sel_fwd_main\n"));
    assert_non_null(strstr(k.text, "\nparam HEAD_DIM 128\n"));
    assert_non_null(strstr(k.text, "\nparam BLOCK_SIZE 64\n"));
    assert_non_null(strstr(k.text, "\nnvrtc 13.0\n"));
    assert_non_null(strstr(k.text, "\ntarget sm_90a\n"));
    assert_non_null(strstr(k.text, "\noption --std=c++17\n"));
    /* One field per line, and the text ends with a newline. */
    assert_int_equal(k.text[strlen(k.text) - 1], '\n');
    fsa_key_free(&k);

    /* Without NVRTC the line says so, as cache/README.md writes it. */
    s.nvrtc = NULL;
    build_ok(&k, &s);
    assert_non_null(strstr(k.text, "\nnvrtc none\ntarget sm_90a\n"));
    fsa_key_free(&k);
}

static void test_the_callers_parameter_order_does_not_change_the_key(void **state)
{
    (void)state;
    key_spec s = base_spec();
    key_spec r = s;
    /* Reversed order. */
    for (size_t i = 0; i < 4; i++) r.params[i] = s.params[3 - i];
    fsa_kernel_key a, b;
    build_ok(&a, &s);
    build_ok(&b, &r);
    assert_string_equal(a.text, b.text);
    assert_memory_equal(a.digest, b.digest, 16);
    assert_string_equal(a.hex, b.hex);
    fsa_key_free(&a);
    fsa_key_free(&b);
}

static void test_the_parameters_appear_in_the_key_text_sorted_by_name(void **state)
{
    (void)state;
    key_spec s = base_spec(); /* given DTYPE, HEAD_DIM, GROUP, BLOCK_SIZE */
    fsa_kernel_key k;
    build_ok(&k, &s);
    const char *order[] = {"\nparam BLOCK_SIZE ", "\nparam DTYPE ", "\nparam GROUP ", "\nparam HEAD_DIM "};
    const char *at[4];
    for (int i = 0; i < 4; i++) assert_non_null(at[i] = strstr(k.text, order[i]));
    for (int i = 1; i < 4; i++) assert_true(at[i - 1] < at[i]);
    fsa_key_free(&k);
}

static void test_the_readable_name_is_the_family_then_tagged_values(void **state)
{
    (void)state;
    key_spec s = base_spec();
    fsa_kernel_key k;
    build_ok(&k, &s);
    assert_string_equal(k.name, "sel_fwd_main_bf16_d128_g4_bk64");
    fsa_key_free(&k);

    /* A NULL tag keeps a parameter out of the name (not out of the key). */
    key_spec t = s;
    t.params[2].tag = NULL;
    build_ok(&k, &t);
    assert_string_equal(k.name, "sel_fwd_main_bf16_d128_bk64");
    assert_non_null(strstr(k.text, "\nparam GROUP 4\n"));
    fsa_key_free(&k);

    /* No parameters: the family alone. */
    key_spec n = s;
    n.family = "sel_index";
    n.n_params = 0;
    build_ok(&k, &n);
    assert_string_equal(k.name, "sel_index");
    assert_null(strstr(k.text, "param "));
    fsa_key_free(&k);
}

/* The readable name a key gives begins with its family: what verify checks of
 * an entry's file name (a lookup never reads one under another name). */
static void test_a_key_text_fits_the_names_its_family_begins_and_no_other(void **state)
{
    (void)state;
    key_spec s = base_spec();
    fsa_kernel_key k;
    build_ok(&k, &s);
    const size_t len = strlen(k.text);
#define FITS(name) fsa_key_text_fits_name(k.text, len, name, strlen(name))
    assert_true(FITS(k.name));
    assert_true(FITS("sel_fwd_main"));
    assert_false(FITS("sel_fwd_mainx_bf16"));
    assert_false(FITS("sel_fwd"));
    assert_false(FITS("sel_bwd_main_bf16_d128_g4_bk64"));
    assert_false(FITS(""));
    /* Only a kernel key: a text of another kind (a tuning record's) fits no kernel's name. */
    const char *tuning = "fsa-tuning-key 1\nfamily sel_fwd_main\ntarget sm_90a\n";
    assert_false(fsa_key_text_fits_name(tuning, strlen(tuning), k.name, strlen(k.name)));
    /* Only the first len bytes are read. */
    const char *family = strstr(k.text, "\nfamily ");
    assert_non_null(family);
    assert_false(fsa_key_text_fits_name(k.text, (size_t)(family - k.text) + 1, k.name, strlen(k.name)));
#undef FITS
    fsa_key_free(&k);
}

/* ------------------------------------------------------------ sensitivity */

static void expect_digest_differs(const key_spec *changed, const char *what)
{
    key_spec s = base_spec();
    fsa_kernel_key a, b;
    build_ok(&a, &s);
    build_ok(&b, changed);
    if (memcmp(a.digest, b.digest, 16) == 0) fail_msg("changing %s did not change the digest", what);
    assert_string_not_equal(a.hex, b.hex);
    assert_string_not_equal(a.text, b.text);
    fsa_key_free(&a);
    fsa_key_free(&b);
}

static void test_changing_any_one_field_changes_the_digest(void **state)
{
    (void)state;
    key_spec c;

    c = base_spec();
    c.family = "sel_fwd_nsa";
    expect_digest_differs(&c, "the family");

    const char *other_values[] = {"f16", "64", "8", "128"};
    for (size_t i = 0; i < 4; i++) {
        c = base_spec();
        c.params[i].value = other_values[i];
        char what[64];
        snprintf(what, sizeof what, "the value of %s", c.params[i].name);
        expect_digest_differs(&c, what);
    }

    c = base_spec();
    c.params[1].name = "HEAD_DIM2";
    expect_digest_differs(&c, "a parameter name");

    c = base_spec();
    c.n_params = 3;
    expect_digest_differs(&c, "dropping a parameter");

    c = base_spec();
    c.nvrtc = "12.9";
    expect_digest_differs(&c, "the NVRTC version");

    c = base_spec();
    c.nvrtc = NULL;
    expect_digest_differs(&c, "a NULL NVRTC version against 13.0");

    c = base_spec();
    c.nvrtc = "13.0 65be0db342ad51a06876e71e210bccc5aa8322cf";
    expect_digest_differs(&c, "an NVRTC build ID beside the same version");

    c = base_spec();
    c.target = "sm_90";
    expect_digest_differs(&c, "the target");

    for (size_t i = 0; i < 4; i++) {
        c = base_spec();
        c.options[i] = "--use_fast_math";
        char what[64];
        snprintf(what, sizeof what, "option %zu", i);
        expect_digest_differs(&c, what);
    }

    c = base_spec();
    c.options[1] = base_spec().options[2];
    c.options[2] = base_spec().options[1];
    expect_digest_differs(&c, "the option order");

    c = base_spec();
    c.n_options = 3;
    expect_digest_differs(&c, "dropping an option");
}

static void test_a_tag_changes_the_name_but_not_the_key(void **state)
{
    (void)state;
    /* Tags only make the name readable; they do not decide the cubin. */
    key_spec s = base_spec(), t = base_spec();
    t.params[1].tag = "hd";
    fsa_kernel_key a, b;
    build_ok(&a, &s);
    build_ok(&b, &t);
    assert_string_equal(a.text, b.text);
    assert_string_equal(a.hex, b.hex);
    assert_string_equal(b.name, "sel_fwd_main_bf16_hd128_g4_bk64");
    fsa_key_free(&a);
    fsa_key_free(&b);
}

/* ------------------------------------------------------------ rejection */

static void test_unsafe_values_are_rejected(void **state)
{
    (void)state;
    const char *bad[] = {"a/b", "a b", "a\nb", "", "..\\x", "x;y", "x\ty"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        key_spec c = base_spec();
        c.params[1].value = bad[i];
        expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);

        c = base_spec();
        c.params[2].name = bad[i];
        expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);

        c = base_spec();
        c.family = bad[i];
        expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);

        c = base_spec();
        c.target = bad[i];
        expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);
    }
    /* An option may hold spaces, but never a line break. */
    key_spec c = base_spec();
    c.options[3] = "--define-macro=X\nparam HEAD_DIM 64";
    expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);
    c = base_spec();
    c.options[3] = NULL;
    expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);
}

static void test_only_letters_digits_underscore_dot_and_hyphen_are_safe(void **state)
{
    (void)state;
    /* Each end of each allowed range, and the characters just outside them. */
    key_spec c = base_spec();
    c.family = "azAZ09_.-";
    c.params[1].value = "0.5-x_Z9";
    fsa_kernel_key k;
    build_ok(&k, &c);
    assert_string_equal(k.name, "azAZ09_.-_bf16_d0.5-x_Z9_g4_bk64");
    fsa_key_free(&k);

    const char *outside[] = {"x/", "x:", "x@", "x[", "x`", "x{", "x,", "x+", "x\x7f", "x\xc3\xa9"};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        c = base_spec();
        c.params[1].value = outside[i];
        expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);
    }
}

static void test_an_unsafe_tag_is_rejected_since_it_becomes_part_of_a_file_name(void **state)
{
    (void)state;
    /* The readable name is the first part of the entry's file name
     * (<name>.<hex>.cubin): a tag with a '/' would put the entry somewhere
     * else, so tags need the same check as values. */
    const char *bad[] = {"/", "../", "a b", "x\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        key_spec c = base_spec();
        c.params[1].tag = bad[i];
        fsa_kernel_key k;
        fsa_status st = build(&k, &c);
        if (st == FSA_STATUS_OK) {
            char name[128];
            snprintf(name, sizeof name, "%s", k.name);
            fsa_key_free(&k);
            fail_msg("tag \"%s\" accepted; readable name \"%s\"", bad[i], name);
        }
        assert_int_equal(st, FSA_STATUS_INVALID_ARGUMENT);
    }
}

static void test_duplicate_parameter_names_are_rejected(void **state)
{
    (void)state;
    key_spec c = base_spec();
    c.params[3].name = "DTYPE";
    expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error_info()->message, "DTYPE"));

    /* Also with the same value, and when adjacent. */
    c = base_spec();
    c.params[1] = c.params[0];
    expect_rejected(&c, FSA_STATUS_INVALID_ARGUMENT);
}

static void test_missing_inputs_are_a_null_pointer(void **state)
{
    (void)state;
    fsa_kernel_key k;
    assert_int_equal(fsa_key_build(&k, NULL), FSA_STATUS_NULL_POINTER);
    key_spec c = base_spec();
    c.family = NULL;
    expect_rejected(&c, FSA_STATUS_NULL_POINTER);
    c = base_spec();
    c.target = NULL;
    expect_rejected(&c, FSA_STATUS_NULL_POINTER);
    fsa_key_inputs in = {"fill", NULL, 1, "13.0", "sm_80", NULL, 0};
    assert_int_equal(fsa_key_build(&k, &in), FSA_STATUS_NULL_POINTER);
    fsa_key_inputs in2 = {"fill", NULL, 0, "13.0", "sm_80", NULL, 2};
    assert_int_equal(fsa_key_build(&k, &in2), FSA_STATUS_NULL_POINTER);
}

/* ------------------------------------------------------------ nvrtc-relaxed equality */

static void test_text_equal_except_nvrtc_is_true_only_when_just_the_nvrtc_line_differs(void **state)
{
    (void)state;
    key_spec s = base_spec();
    fsa_kernel_key base, other_nvrtc, no_nvrtc, other_target, other_param, other_option;
    build_ok(&base, &s);
    key_spec c = s;
    c.nvrtc = "12.8";
    build_ok(&other_nvrtc, &c);
    c = s;
    c.nvrtc = NULL;
    build_ok(&no_nvrtc, &c);
    c = s;
    c.target = "sm_90";
    build_ok(&other_target, &c);
    c = s;
    c.params[0].value = "f16";
    build_ok(&other_param, &c);
    c = s;
    c.n_options = 3;
    build_ok(&other_option, &c);

    assert_true(fsa_key_text_equal_except_nvrtc(base.text, base.text));
    assert_true(fsa_key_text_equal_except_nvrtc(base.text, other_nvrtc.text));
    assert_true(fsa_key_text_equal_except_nvrtc(other_nvrtc.text, base.text));
    assert_true(fsa_key_text_equal_except_nvrtc(no_nvrtc.text, base.text));
    assert_false(fsa_key_text_equal_except_nvrtc(base.text, other_target.text));
    assert_false(fsa_key_text_equal_except_nvrtc(no_nvrtc.text, other_target.text));
    assert_false(fsa_key_text_equal_except_nvrtc(base.text, other_param.text));
    assert_false(fsa_key_text_equal_except_nvrtc(base.text, other_option.text));
    assert_false(fsa_key_text_equal_except_nvrtc(other_option.text, base.text));
    /* A prefix is not equal, nor is a text with one line changed. */
    char *prefix = strdup(base.text);
    assert_non_null(prefix);
    prefix[strlen(prefix) / 2] = '\0';
    assert_false(fsa_key_text_equal_except_nvrtc(base.text, prefix));
    assert_false(fsa_key_text_equal_except_nvrtc(prefix, base.text));
    free(prefix);
    assert_false(fsa_key_text_equal_except_nvrtc(base.text, ""));

    fsa_key_free(&base);
    fsa_key_free(&other_nvrtc);
    fsa_key_free(&no_nvrtc);
    fsa_key_free(&other_target);
    fsa_key_free(&other_param);
    fsa_key_free(&other_option);
}

/* Neither key's text is the other's but for the nvrtc line, either way round. */
static void expect_unequal_except_nvrtc(const key_spec *s, const key_spec *t)
{
    fsa_kernel_key a, b;
    build_ok(&a, s);
    build_ok(&b, t);
    assert_false(fsa_key_text_equal_except_nvrtc(a.text, b.text));
    assert_false(fsa_key_text_equal_except_nvrtc(b.text, a.text));
    fsa_key_free(&a);
    fsa_key_free(&b);
}

static void test_text_equal_except_nvrtc_does_not_take_a_line_for_a_longer_one_it_begins(void **state)
{
    (void)state;
    const key_spec base = base_spec();
    key_spec longer_value = base_spec(), shorter_target = base_spec();
    longer_value.params[3].value = "640"; /* BLOCK_SIZE 64 against 640 */
    expect_unequal_except_nvrtc(&base, &longer_value);
    shorter_target.target = "sm_90"; /* sm_90 begins sm_90a */
    expect_unequal_except_nvrtc(&shorter_target, &base);
}

/* What verify checks of an entry in a target's directory. */
static void test_a_key_text_names_its_own_target_and_no_other(void **state)
{
    (void)state;
    key_spec s = base_spec();
    s.options[3] = "sm_80a"; /* a line that ends in another target's name */
    fsa_kernel_key k;
    build_ok(&k, &s);
    const size_t len = strlen(k.text);
    assert_true(fsa_key_text_names_target(k.text, len, "sm_90a"));
    /* Another target of the same length, a shorter and a longer one. */
    assert_false(fsa_key_text_names_target(k.text, len, "sm_80a"));
    assert_false(fsa_key_text_names_target(k.text, len, "sm_90"));
    assert_false(fsa_key_text_names_target(k.text, len, "sm_90af"));
    assert_false(fsa_key_text_names_target(k.text, len, ""));
    /* Only the first len bytes are read. */
    const char *target = strstr(k.text, "\ntarget ");
    assert_non_null(target);
    assert_false(fsa_key_text_names_target(k.text, (size_t)(target - k.text) + 1, "sm_90a"));
    fsa_key_free(&k);
}

/* Patch releases share major.minor: the build ID on the "nvrtc" line keeps
 * their kernels apart, yet the line still reads as its version. */
static void test_two_builds_of_one_nvrtc_version_key_apart_but_read_as_that_version(void **state)
{
    (void)state;
    key_spec s = base_spec(), t = base_spec();
    s.nvrtc = "13.0 65be0db342ad51a06876e71e210bccc5aa8322cf";
    t.nvrtc = "13.0 0123456789abcdef0123456789abcdef01234567";
    fsa_kernel_key a, b;
    build_ok(&a, &s);
    build_ok(&b, &t);
    assert_memory_not_equal(a.digest, b.digest, 16);
    assert_true(fsa_key_text_equal_except_nvrtc(a.text, b.text));
    assert_int_equal(fsa_key_text_nvrtc_version(a.text), 13000);
    assert_non_null(strstr(a.text, "\nnvrtc 13.0 65be0db342ad51a06876e71e210bccc5aa8322cf\n"));
    fsa_key_free(&a);
    fsa_key_free(&b);
}

/* ------------------------------------------------------------ compile options */

static void test_an_nvrtc_line_past_any_version_reads_as_newer_than_every_driver(void **state)
{
    (void)state;
    /* Key texts as a forged or damaged cache entry may hold them: no overflow, no wrap to a small version. */
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 12.4 abc\ntarget sm_90a\n"), 12040);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 13\n"), 13000);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc none\n"), 0);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\ntarget sm_90a\n"), 0);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 99999.99\n"), 99999990);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 4294967309.0\n"), INT_MAX); /* 2^32 + 13 */
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 100000.0\n"), INT_MAX);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 13.100\n"), INT_MAX);
    assert_int_equal(fsa_key_text_nvrtc_version("kernel x\nnvrtc 13.99999999999999999999\n"), INT_MAX);
}

static void test_compile_options_name_the_target_first_and_reject_bad_targets(void **state)
{
    (void)state;
    fsa_compile_options o;
    assert_int_equal(fsa_compile_options_for(&o, "sm_90a"), FSA_STATUS_OK);
    assert_true(o.count >= 1 && o.count <= FSA_MAX_COMPILE_OPTIONS);
    assert_string_equal(o.opts[0], "--gpu-architecture=sm_90a");
    for (size_t i = 0; i < o.count; i++) assert_non_null(o.opts[i]);

    /* The same target gives the same list (it is part of every key). */
    fsa_compile_options p;
    assert_int_equal(fsa_compile_options_for(&p, "sm_90a"), FSA_STATUS_OK);
    assert_int_equal(p.count, o.count);
    for (size_t i = 0; i < o.count; i++) assert_string_equal(p.opts[i], o.opts[i]);

    assert_int_equal(fsa_compile_options_for(&p, "sm_80"), FSA_STATUS_OK);
    assert_string_equal(p.opts[0], "--gpu-architecture=sm_80");

    /* Unknown targets fail as the target parser says (test_target.c). */
    const char *unknown[] = {"sm_75", "sm_88", "sm_80a"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_int_equal(fsa_compile_options_for(&p, unknown[i]), FSA_STATUS_UNSUPPORTED_DEVICE);
        assert_int_equal(fsa_last_error_info()->status, FSA_STATUS_UNSUPPORTED_DEVICE);
        assert_int_equal(p.count, 0);
    }
    const char *malformed[] = {"sm_8", "sm_9x", ""};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        assert_int_equal(fsa_compile_options_for(&p, malformed[i]), FSA_STATUS_INVALID_ARGUMENT);
        assert_int_equal(p.count, 0);
    }
    assert_int_equal(fsa_compile_options_for(&p, NULL), FSA_STATUS_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_same_inputs_give_the_same_text_digest_hex_and_name),
        cmocka_unit_test(test_the_key_text_has_every_field_including_the_templates_digest),
        cmocka_unit_test(test_the_callers_parameter_order_does_not_change_the_key),
        cmocka_unit_test(test_the_parameters_appear_in_the_key_text_sorted_by_name),
        cmocka_unit_test(test_the_readable_name_is_the_family_then_tagged_values),
        cmocka_unit_test(test_a_key_text_fits_the_names_its_family_begins_and_no_other),
        cmocka_unit_test(test_changing_any_one_field_changes_the_digest),
        cmocka_unit_test(test_a_tag_changes_the_name_but_not_the_key),
        cmocka_unit_test(test_unsafe_values_are_rejected),
        cmocka_unit_test(test_only_letters_digits_underscore_dot_and_hyphen_are_safe),
        cmocka_unit_test(test_an_unsafe_tag_is_rejected_since_it_becomes_part_of_a_file_name),
        cmocka_unit_test(test_duplicate_parameter_names_are_rejected),
        cmocka_unit_test(test_missing_inputs_are_a_null_pointer),
        cmocka_unit_test(test_text_equal_except_nvrtc_is_true_only_when_just_the_nvrtc_line_differs),
        cmocka_unit_test(test_text_equal_except_nvrtc_does_not_take_a_line_for_a_longer_one_it_begins),
        cmocka_unit_test(test_a_key_text_names_its_own_target_and_no_other),
        cmocka_unit_test(test_two_builds_of_one_nvrtc_version_key_apart_but_read_as_that_version),
        cmocka_unit_test(test_an_nvrtc_line_past_any_version_reads_as_newer_than_every_driver),
        cmocka_unit_test(test_compile_options_name_the_target_first_and_reject_bad_targets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
