/* Strict template rendering (fsa_render) and the embedded template table:
 * every placeholder is filled, every mistake in a template or its parameter
 * list is an error that names the template (and the line, where there is
 * one), and the templates' digest is a stable 32-digit hex string. */
#include "testing.h"

#include "base/util.h"
#include "jit/kernel_key.h"
#include "jit/render.h"
#include "jit/templates.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Renders and expects success with exactly `want`. */
static void expect_render(const char *text, const fsa_param *params, size_t n, const char *want)
{
    char *out = NULL;
    fsa_status st = fsa_render(&out, "t.cu", text, params, n);
    if (st != FSA_STATUS_OK) fail_msg("render failed: %s", fsa_last_error());
    assert_non_null(out);
    assert_string_equal(out, want);
    free(out);
}

/* Renders and expects `status`, *out left NULL, and an error record whose
 * message contains every string of `needles` (NULL-terminated). */
static void expect_failure(fsa_status status, const char *what, const char *text, const fsa_param *params,
                           size_t n, const char *const *needles)
{
    char *out = (char *)"sentinel";
    fsa_status st = fsa_render(&out, what, text, params, n);
    assert_int_equal(st, status);
    assert_null(out);
    const fsa_error_info *e = fsa_last_error_info();
    assert_int_equal(e->status, status);
    assert_string_equal(e->stage, "render");
    for (const char *const *p = needles; *p; p++)
        if (strstr(e->message, *p) == NULL) fail_msg("message \"%s\" lacks \"%s\"", e->message, *p);
    assert_non_null(strstr(fsa_last_error(), e->message));
}

static void test_placeholders_are_replaced_by_their_values(void **state)
{
    (void)state;
    const fsa_param p[] = {{"HEAD_DIM", "128", "d"}, {"DTYPE", "__nv_bfloat16", ""}};
    expect_render("constexpr int D = {{HEAD_DIM}};\nusing T = {{DTYPE}};\n", p, 2,
                  "constexpr int D = 128;\nusing T = __nv_bfloat16;\n");
    /* Placeholders at the very start and end, and back to back. */
    expect_render("{{DTYPE}}{{HEAD_DIM}}", p, 2, "__nv_bfloat16128");
}

static void test_a_value_may_be_empty_or_contain_braces(void **state)
{
    (void)state;
    /* Values are inserted verbatim and not rendered again. */
    const fsa_param p[] = {{"A", "", NULL}, {"B", "{{A}}", NULL}};
    expect_render("x{{A}}y{{B}}z", p, 2, "xy{{A}}z");
}

static void test_a_placeholder_default_fills_only_an_unnamed_parameter(void **state)
{
    (void)state;
    const fsa_param p[] = {{"A", "7", NULL}};
    expect_render("{{A=0}}+{{B=0}}*{{C=X_1}}", p, 1, "7+0*X_1");
    expect_render("{{B=12}}", NULL, 0, "12");
}

static void test_text_without_placeholders_passes_through_unchanged(void **state)
{
    (void)state;
    const char *text = "__global__ void k() { if (x) { y(); } }\n// a } and }} and { alone\n";
    expect_render(text, NULL, 0, text);
    expect_render("", NULL, 0, "");
}

static void test_repeated_placeholders_are_all_filled(void **state)
{
    (void)state;
    const fsa_param p[] = {{"N", "7", NULL}, {"M", "2", NULL}};
    expect_render("{{N}}+{{N}}*{{M}}\n{{N}}", p, 2, "7+7*2\n7");
}

static void test_a_placeholder_takes_only_the_parameter_of_exactly_its_name(void **state)
{
    (void)state;
    /* A name that begins a longer one is another name, in either order. */
    const fsa_param p[] = {{"HEAD_DIM", "128", "d"}, {"HEAD", "8", "h"}};
    expect_render("{{HEAD}}/{{HEAD_DIM}}", p, 2, "8/128");
    const fsa_param q[] = {{"HEAD", "8", "h"}, {"HEAD_DIM", "128", "d"}};
    expect_render("{{HEAD_DIM}}/{{HEAD}}", q, 2, "128/8");
}

static void test_a_name_may_be_long_and_use_every_name_character(void **state)
{
    (void)state;
    const fsa_param p[] = {{"ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789", "v", NULL}};
    expect_render("<{{ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789}}>", p, 1, "<v>");
    expect_render("<{{Z9=A0}}>", NULL, 0, "<A0>");
}

static void test_an_unknown_placeholder_fails_naming_the_template_and_line(void **state)
{
    (void)state;
    const fsa_param p[] = {{"HEAD_DIM", "64", "d"}};
    const char *const needles[] = {"kernel_a.cu:3", "{{GROUP}}", NULL};
    expect_failure(FSA_STATUS_RENDER_FAILED, "kernel_a.cu", "int d = {{HEAD_DIM}};\n\nint g = {{GROUP}};\n", p, 1,
                   needles);
}

static void test_an_unused_parameter_fails_naming_the_template_and_parameter(void **state)
{
    (void)state;
    const fsa_param p[] = {{"HEAD_DIM", "64", "d"}, {"GROUP", "4", "g"}};
    const char *const needles[] = {"kernel_b.cu", "GROUP", NULL};
    expect_failure(FSA_STATUS_RENDER_FAILED, "kernel_b.cu", "int d = {{HEAD_DIM}};\n", p, 2, needles);
}

static void test_malformed_placeholders_fail_naming_the_template_and_line(void **state)
{
    (void)state;
    const fsa_param p[] = {{"X", "1", NULL}};
    /* Each text uses X first, so only the bad placeholder can be at fault. */
    static const struct {
        const char *text;
        const char *where;
    } cases[] = {
        {"{{X}}\n{{X", "bad.cu:2"},          /* unterminated at the end */
        {"{{X}}\n\n{{X}\n", "bad.cu:3"},     /* one closing brace */
        {"{{X}}{{x}}", "bad.cu:1"},          /* lower case */
        {"{{X}}\n{{}}", "bad.cu:2"},         /* empty name */
        {"{{X}}\n{{ X }}", "bad.cu:2"},      /* spaces */
        {"{{X}}\n{{X-Y}}", "bad.cu:2"},      /* a character outside [A-Z0-9_] */
        {"{{X}}\n{{Y=}}", "bad.cu:2"},        /* an empty default */
        {"{{X}}\n{{Y=a b}}", "bad.cu:2"},     /* a default outside [A-Z0-9_] */
        {"{{X}}\n\n\n{{", "bad.cu:4"},       /* nothing after the braces */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const needles[] = {cases[i].where, "malformed", NULL};
        expect_failure(FSA_STATUS_RENDER_FAILED, "bad.cu", cases[i].text, p, 1, needles);
    }
}

static void test_a_bad_parameter_name_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *const bad_names[] = {"head_dim", "HEAD-DIM", "A B", "{{X}}", ""};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        const fsa_param p[] = {{bad_names[i], "1", NULL}};
        const char *const needles[] = {"names.cu", NULL};
        expect_failure(FSA_STATUS_INVALID_ARGUMENT, "names.cu", "no placeholders", p, 1, needles);
    }
    /* A NULL name or value is just as invalid. */
    const fsa_param no_name[] = {{NULL, "1", NULL}};
    const fsa_param no_value[] = {{"X", NULL, NULL}};
    const char *const needles[] = {"names.cu", NULL};
    expect_failure(FSA_STATUS_INVALID_ARGUMENT, "names.cu", "{{X}}", no_name, 1, needles);
    expect_failure(FSA_STATUS_INVALID_ARGUMENT, "names.cu", "{{X}}", no_value, 1, needles);
}

static void test_null_text_or_parameter_list_is_a_null_pointer(void **state)
{
    (void)state;
    const fsa_param p[] = {{"X", "1", NULL}};
    const char *const needles[] = {"nulls.cu", NULL};
    expect_failure(FSA_STATUS_NULL_POINTER, "nulls.cu", NULL, p, 1, needles);
    expect_failure(FSA_STATUS_NULL_POINTER, "nulls.cu", NULL, NULL, 0, needles);
    expect_failure(FSA_STATUS_NULL_POINTER, "nulls.cu", "{{X}}", NULL, 1, needles);
}

static void test_a_failure_after_a_success_does_not_leave_stale_output(void **state)
{
    (void)state;
    const fsa_param p[] = {{"X", "1", NULL}};
    char *out = NULL;
    assert_int_equal(fsa_render(&out, "t.cu", "{{X}}", p, 1), FSA_STATUS_OK);
    free(out);
    out = (char *)"sentinel";
    /* The failure is found after part of the text was rendered. */
    assert_int_equal(fsa_render(&out, "t.cu", "{{X}} and {{Y}}", p, 1), FSA_STATUS_RENDER_FAILED);
    assert_null(out);
}

/* ------------------------------------------------------------ templates */

static void test_template_find_returns_the_embedded_header_and_kernels(void **state)
{
    (void)state;
    const fsa_template *h = fsa_template_find("fsa_device.cuh");
    assert_non_null(h);
    assert_string_equal(h->name, "fsa_device.cuh");
    assert_int_equal(strlen(h->text), h->length);
    assert_true(h->length > 0);

    const fsa_template *fill = fsa_template_find("fill.cu");
    assert_non_null(fill);
    assert_string_equal(fill->name, "fill.cu");
    assert_int_equal(strlen(fill->text), fill->length);
    assert_non_null(strstr(fill->text, "{{UNROLL}}"));
    assert_non_null(strstr(fill->text, "fsa_fill_u32"));
    assert_non_null(strstr(fill->text, "#include \"fsa_device.cuh\""));

    /* The fill template renders with exactly the parameter the library gives it. */
    const fsa_param p[] = {{"UNROLL", "4", "u"}};
    char *out = NULL;
    assert_int_equal(fsa_render(&out, "fill.cu", fill->text, p, 1), FSA_STATUS_OK);
    assert_non_null(strstr(out, "#pragma unroll 4"));
    assert_null(strstr(out, "{{"));
    free(out);
}

static void test_template_find_returns_null_for_an_unknown_name(void **state)
{
    (void)state;
    assert_null(fsa_template_find("no_such_template.cu"));
    assert_null(fsa_template_find("fill"));       /* the family, not the file */
    assert_null(fsa_template_find("fill.cu "));
    assert_null(fsa_template_find("templates/fill.cu"));
    assert_null(fsa_template_find(""));
}

static void test_the_template_table_is_sorted_and_unique(void **state)
{
    (void)state;
    assert_true(fsa_template_count >= 2);
    for (size_t i = 1; i < fsa_template_count; i++)
        if (strcmp(fsa_templates[i - 1].name, fsa_templates[i].name) >= 0)
            fail_msg("%s before %s", fsa_templates[i - 1].name, fsa_templates[i].name);
    for (size_t i = 0; i < fsa_template_count; i++)
        assert_ptr_equal(fsa_template_find(fsa_templates[i].name), &fsa_templates[i]);
}

static void test_the_templates_digest_covers_every_templates_name_and_whole_text(void **state)
{
    (void)state;
    /* XXH3-128 of each template's name with its NUL, then its text, in table
     * order: renaming, editing or adding any template changes every key. */
    size_t total = 0;
    for (size_t i = 0; i < fsa_template_count; i++) {
        assert_int_equal(fsa_templates[i].length, strlen(fsa_templates[i].text));
        total += strlen(fsa_templates[i].name) + 1 + fsa_templates[i].length;
    }
    char *all = malloc(total ? total : 1);
    assert_non_null(all);
    size_t at = 0;
    for (size_t i = 0; i < fsa_template_count; i++) {
        size_t n = strlen(fsa_templates[i].name) + 1;
        memcpy(all + at, fsa_templates[i].name, n);
        memcpy(all + at + n, fsa_templates[i].text, fsa_templates[i].length);
        at += n + fsa_templates[i].length;
    }
    uint8_t digest[16];
    fsa_digest128(digest, all, total);
    free(all);
    char hex[33];
    fsa_hex(hex, digest, 16);
    assert_string_equal(fsa_templates_digest(), hex);
}

static void *digest_thread(void *arg)
{
    (void)arg;
    return (void *)fsa_templates_digest();
}

static void test_templates_digest_is_32_hex_digits_and_stable_across_calls(void **state)
{
    (void)state;
    const char *d = fsa_templates_digest();
    assert_non_null(d);
    assert_int_equal(strlen(d), 32);
    for (size_t i = 0; i < 32; i++)
        if (!((d[i] >= '0' && d[i] <= '9') || (d[i] >= 'a' && d[i] <= 'f'))) fail_msg("digest %s is not hex", d);
    char copy[33];
    memcpy(copy, d, 33);
    /* Not all zeros: it was computed. */
    assert_string_not_equal(copy, "00000000000000000000000000000000");
    for (int i = 0; i < 3; i++) assert_string_equal(fsa_templates_digest(), copy);

    /* Concurrent first use elsewhere sees the same value. */
    pthread_t t[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, digest_thread, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_string_equal((const char *)r, copy);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placeholders_are_replaced_by_their_values),
        cmocka_unit_test(test_a_value_may_be_empty_or_contain_braces),
        cmocka_unit_test(test_a_placeholder_default_fills_only_an_unnamed_parameter),
        cmocka_unit_test(test_text_without_placeholders_passes_through_unchanged),
        cmocka_unit_test(test_repeated_placeholders_are_all_filled),
        cmocka_unit_test(test_a_placeholder_takes_only_the_parameter_of_exactly_its_name),
        cmocka_unit_test(test_a_name_may_be_long_and_use_every_name_character),
        cmocka_unit_test(test_an_unknown_placeholder_fails_naming_the_template_and_line),
        cmocka_unit_test(test_an_unused_parameter_fails_naming_the_template_and_parameter),
        cmocka_unit_test(test_malformed_placeholders_fail_naming_the_template_and_line),
        cmocka_unit_test(test_a_bad_parameter_name_is_an_invalid_argument),
        cmocka_unit_test(test_null_text_or_parameter_list_is_a_null_pointer),
        cmocka_unit_test(test_a_failure_after_a_success_does_not_leave_stale_output),
        cmocka_unit_test(test_template_find_returns_the_embedded_header_and_kernels),
        cmocka_unit_test(test_template_find_returns_null_for_an_unknown_name),
        cmocka_unit_test(test_the_template_table_is_sorted_and_unique),
        cmocka_unit_test(test_the_templates_digest_covers_every_templates_name_and_whole_text),
        cmocka_unit_test(test_templates_digest_is_32_hex_digits_and_stable_across_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
