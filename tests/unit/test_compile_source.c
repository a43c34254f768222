/* The source NVRTC compiles: template headers written in place, once each,
 * between #line directives that name files under a fixed directory, so that
 * line info never records the compiling process's working directory. */
#include "testing.h"

#include "jit/compile_source.h"
#include "jit/templates.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

static void test_each_included_header_is_written_in_once_between_line_directives(void **state)
{
    (void)state;
    const char *src = "#include \"sel_common.cuh\"\n#include \"fsa_device.cuh\"\nint x;\n";
    char *out = NULL;
    assert_int_equal(fsa_compile_source(&out, src, "k.cu"), FSA_STATUS_OK);
    /* sel_common.cuh first, with the two headers it includes inside it. */
    assert_true(strncmp(out, "#line 1 \"/fsa-jit/templates/sel_common.cuh\"\n", 44) == 0);
    assert_int_equal(count(out, "#line 1 \"/fsa-jit/templates/fsa_device.cuh\"\n"), 1);
    assert_int_equal(count(out, "#line 1 \"/fsa-jit/templates/sel_params.cuh\"\n"), 1);
    /* Back in the main file at line 2, whose include is already done: an empty line. */
    assert_non_null(strstr(out, "#line 2 \"/fsa-jit/templates/k.cu\"\n\nint x;\n"));
    /* The headers' text is there (the opening comment of each); nothing is left to include. */
    const char *const headers[] = {"sel_common.cuh", "fsa_device.cuh", "sel_params.cuh"};
    for (size_t i = 0; i < 3; i++) {
        const char *text = fsa_template_find(headers[i])->text;
        const char *nl = strchr(text, '\n');
        char first[256];
        snprintf(first, sizeof first, "%.*s", (int)(nl - text), text);
        assert_non_null(strstr(out, first));
    }
    assert_int_equal(count(out, "#include \""), 0);
    assert_int_equal(count(out, "#pragma once"), 0);
    assert_int_equal(count(out, "#line "), count(out, "#line 1 \"/fsa-jit/templates/") * 2);
    free(out);
}

static void test_lines_that_include_nothing_of_ours_are_kept_as_they_are(void **state)
{
    (void)state;
    const char *src = "// a comment\n#include <stdint.h>\n#include \"missing.cuh\"\n  #  include \"sel_params.cuh\"\n"
                      "#pragma once\nend";
    char *out = NULL;
    assert_int_equal(fsa_compile_source(&out, src, "fill.cu"), FSA_STATUS_OK);
    assert_true(strncmp(out, "// a comment\n#include <stdint.h>\n#include \"missing.cuh\"\n#line 1 ", 64) == 0);
    assert_non_null(strstr(out, "#line 5 \"/fsa-jit/templates/fill.cu\"\n\nend\n"));
    free(out);
}

static void test_other_pragmas_and_non_header_templates_are_kept_as_they_are(void **state)
{
    (void)state;
    /* Only "#pragma once" goes; "#include" of a template that is not a .cuh header stays. */
    const char *src = "#pragma unroll\n#pragma omp parallel\n#include \"fill.cu\"\nend\n";
    char *out = NULL;
    assert_int_equal(fsa_compile_source(&out, src, "k.cu"), FSA_STATUS_OK);
    assert_string_equal(out, src);
    free(out);
}

static void test_tabs_separate_the_parts_of_an_include_line_as_spaces_do(void **state)
{
    (void)state;
    const char *src = "\t#\tinclude\t\"sel_params.cuh\"\nend\n";
    char *out = NULL;
    assert_int_equal(fsa_compile_source(&out, src, "k.cu"), FSA_STATUS_OK);
    assert_true(strncmp(out, "#line 1 \"/fsa-jit/templates/sel_params.cuh\"\n", 44) == 0);
    assert_non_null(strstr(out, "#line 2 \"/fsa-jit/templates/k.cu\"\nend\n"));
    free(out);
}

static void test_a_header_compiled_as_the_main_file_is_not_written_into_itself(void **state)
{
    (void)state;
    const char *src = "#include \"sel_params.cuh\"\nint x;\n";
    char *out = NULL;
    assert_int_equal(fsa_compile_source(&out, src, "sel_params.cuh"), FSA_STATUS_OK);
    assert_string_equal(out, "\nint x;\n");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_included_header_is_written_in_once_between_line_directives),
        cmocka_unit_test(test_lines_that_include_nothing_of_ours_are_kept_as_they_are),
        cmocka_unit_test(test_other_pragmas_and_non_header_templates_are_kept_as_they_are),
        cmocka_unit_test(test_tabs_separate_the_parts_of_an_include_line_as_spaces_do),
        cmocka_unit_test(test_a_header_compiled_as_the_main_file_is_not_written_into_itself),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
