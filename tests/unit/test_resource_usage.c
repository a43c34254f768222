/* Resource usage from a ptxas log (fsa_resource_usage_parse): every function
 * with its registers, spills, stack and static shared memory, from the log
 * formats of current and older ptxas releases, and nothing invented from
 * other lines. */
#include "testing.h"

#include "jit/resource_usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* As ptxas (NVRTC 13.0) writes it for two kernels (one spilling, one with static shared
 * memory) and a device function that was not inlined. */
static const char k_log_13[] =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'spiller' for 'sm_90a'\n"
    "ptxas info    : Function properties for spiller\n"
    "ptxas         .     1264 bytes stack frame, 1248 bytes spill stores, 2296 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 0 barriers, 1264 bytes cumulative stack size\n"
    "ptxas info    : Compile time = 158.510 ms\n"
    "ptxas info    : Compiling entry function 'tiled' for 'sm_90a'\n"
    "ptxas info    : Function properties for tiled\n"
    "ptxas         .     160 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 1 barriers, 160 bytes cumulative stack size, 4096 bytes smem\n"
    "ptxas info    : Compile time = 11.040 ms\n"
    "ptxas info    : Function properties for _Z6helperPfi\n"
    "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n";

/* Older ptxas releases write no barrier count on the "Used" line; and a log
 * may come with carriage returns. */
static const char k_log_older[] =
    "ptxas info    : Compiling entry function 'fsa_sel_count' for 'sm_80'\r\n"
    "ptxas info    : Function properties for fsa_sel_count\r\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\r\n"
    "ptxas info    : Used 88 registers, 260 bytes smem, 400 bytes cmem[0]\r\n";

static const fsa_function_usage *named(const fsa_resource_usage *u, const char *name)
{
    for (size_t i = 0; i < u->count; i++)
        if (strcmp(u->functions[i].name, name) == 0) return &u->functions[i];
    fail_msg("no function %s", name);
    return NULL;
}

static void test_every_function_of_the_log_is_read_in_order(void **state)
{
    (void)state;
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, k_log_13), FSA_STATUS_OK);
    assert_int_equal(u.count, 3);
    assert_string_equal(u.functions[0].name, "spiller");
    assert_string_equal(u.functions[1].name, "tiled");
    assert_string_equal(u.functions[2].name, "_Z6helperPfi");
    fsa_resource_usage_free(&u);
}

static void test_an_entry_point_gives_registers_spills_stack_and_shared_bytes(void **state)
{
    (void)state;
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, k_log_13), FSA_STATUS_OK);
    const fsa_function_usage *s = named(&u, "spiller");
    assert_true(s->entry);
    assert_int_equal(s->registers, 32);
    assert_int_equal(s->spill_store_bytes, 1248);
    assert_int_equal(s->spill_load_bytes, 2296);
    assert_int_equal(s->stack_bytes, 1264);
    assert_int_equal(s->shared_bytes, 0);
    const fsa_function_usage *t = named(&u, "tiled");
    assert_true(t->entry);
    assert_int_equal(t->registers, 40);
    assert_int_equal(t->spill_store_bytes, 0);
    assert_int_equal(t->spill_load_bytes, 0);
    assert_int_equal(t->stack_bytes, 160);
    assert_int_equal(t->shared_bytes, 4096);
    fsa_resource_usage_free(&u);
}

static void test_a_device_function_has_spills_and_stack_but_no_register_count(void **state)
{
    (void)state;
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, k_log_13), FSA_STATUS_OK);
    const fsa_function_usage *h = named(&u, "_Z6helperPfi");
    assert_false(h->entry);
    assert_int_equal(h->registers, -1);
    assert_int_equal(h->spill_store_bytes, 8);
    assert_int_equal(h->spill_load_bytes, 12);
    assert_int_equal(h->stack_bytes, 16);
    /* Its lines did not leak into the kernel before it. */
    assert_int_equal(named(&u, "tiled")->stack_bytes, 160);
    fsa_resource_usage_free(&u);
}

static void test_the_older_format_with_carriage_returns_is_read_too(void **state)
{
    (void)state;
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, k_log_older), FSA_STATUS_OK);
    assert_int_equal(u.count, 1);
    const fsa_function_usage *c = &u.functions[0];
    assert_string_equal(c->name, "fsa_sel_count");
    assert_true(c->entry);
    assert_int_equal(c->registers, 88);
    assert_int_equal(c->shared_bytes, 260);
    assert_int_equal(c->spill_store_bytes, 0);
    fsa_resource_usage_free(&u);
}

static void test_an_empty_or_unrelated_log_gives_no_functions(void **state)
{
    (void)state;
    const char *logs[] = {"", NULL, "t.cu(3): warning: variable was declared but never referenced\n",
                          "ptxas info    : 0 bytes gmem\nptxas info    : Used 12 registers\n",
                          "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads"};
    for (size_t i = 0; i < sizeof logs / sizeof logs[0]; i++) {
        fsa_resource_usage u;
        assert_int_equal(fsa_resource_usage_parse(&u, logs[i]), FSA_STATUS_OK);
        assert_int_equal(u.count, 0);
        fsa_resource_usage_free(&u);
    }
}

static void test_a_log_without_a_final_newline_keeps_its_last_line(void **state)
{
    (void)state;
    const char log[] = "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
                       "ptxas info    : Used 7 registers, used 0 barriers";
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, log), FSA_STATUS_OK);
    assert_int_equal(u.count, 1);
    assert_int_equal(u.functions[0].registers, 7);
    fsa_resource_usage_free(&u);
}

static void test_the_formatted_table_has_a_header_and_one_line_per_function(void **state)
{
    (void)state;
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, k_log_13), FSA_STATUS_OK);
    fsa_strbuf b = {0};
    fsa_resource_usage_format(&b, &u);
    char *text = fsa_strbuf_take(&b);
    assert_non_null(text);
    assert_non_null(strstr(text, "registers"));
    assert_non_null(strstr(text, "spill_stores"));
    size_t lines = 0;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 1 + u.count);
    const char *row = strstr(text, "spiller");
    assert_non_null(row);
    int regs = 0, stores = 0, loads = 0;
    assert_int_equal(sscanf(row, "spiller %d %d %d", &regs, &stores, &loads), 3);
    assert_int_equal(regs, 32);
    assert_int_equal(stores, 1248);
    assert_int_equal(loads, 2296);
    assert_non_null(strstr(text, "(device function)"));
    free(text);
    fsa_resource_usage_free(&u);
    fsa_resource_usage_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_function_of_the_log_is_read_in_order),
        cmocka_unit_test(test_an_entry_point_gives_registers_spills_stack_and_shared_bytes),
        cmocka_unit_test(test_a_device_function_has_spills_and_stack_but_no_register_count),
        cmocka_unit_test(test_the_older_format_with_carriage_returns_is_read_too),
        cmocka_unit_test(test_an_empty_or_unrelated_log_gives_no_functions),
        cmocka_unit_test(test_a_log_without_a_final_newline_keeps_its_last_line),
        cmocka_unit_test(test_the_formatted_table_has_a_header_and_one_line_per_function),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
