/* fsa-bench --compressed's check of the top-k rows it times (tools/bench_selection_check.c): a row that keeps
 * the selection's rules passes, and each broken rule is caught and named. */
#include "bench_selection_check.h"
#include "testing.h"

#include <string.h>

static int valid(const int32_t *row, int K, int n_blocks, int init, int local, char *why)
{
    return bench_selection_row_valid(row, K, n_blocks, init, local, why, 200);
}

static void test_rows_that_keep_the_rules_pass(void **state)
{
    (void)state;
    char why[200] = "";
    /* 20 blocks, K 4, block 0 and the last two forced, one scored block between. */
    assert_true(valid((const int32_t[]){0, 7, 18, 19}, 4, 20, 1, 2, why));
    /* Fewer blocks than slots: all of them, then -1. */
    assert_true(valid((const int32_t[]){0, 1, 2, -1}, 4, 3, 1, 2, why));
    /* More forced blocks than slots: the lowest of them. */
    assert_true(valid((const int32_t[]){0, 1}, 2, 20, 4, 3, why));
    /* No forced block at all. */
    assert_true(valid((const int32_t[]){3, 5, 9}, 3, 10, 0, 0, why));
}

static void test_each_broken_rule_is_caught_and_named(void **state)
{
    (void)state;
    char why[200];
    assert_false(valid((const int32_t[]){0, 7, 9, 19}, 4, 20, 1, 2, why));
    assert_string_equal(why, "forced block 18 is missing");
    assert_false(valid((const int32_t[]){0, 18, 7, 19}, 4, 20, 1, 2, why));
    assert_string_equal(why, "slot 2 holds 7 after 18: not ascending");
    assert_false(valid((const int32_t[]){0, 0, 18, 19}, 4, 20, 1, 2, why)); /* a duplicate */
    assert_string_equal(why, "slot 1 holds 0 after 0: not ascending");
    assert_false(valid((const int32_t[]){0, 7, 18, 20}, 4, 20, 1, 2, why));
    assert_string_equal(why, "slot 3 holds 20, outside 0..19");
    assert_false(valid((const int32_t[]){0, -1, 18, 19}, 4, 20, 1, 2, why));
    assert_string_equal(why, "slot 1 holds -1, outside 0..19");
    assert_false(valid((const int32_t[]){0, 1, 2, 2}, 4, 3, 1, 2, why));
    assert_string_equal(why, "slot 3 holds 2, -1 expected after 3 blocks");
    assert_false(valid((const int32_t[]){0, 17}, 2, 20, 4, 3, why));
    assert_string_equal(why, "forced block 1 is missing");
    /* Poison (0x7f7f7f7f in every slot, what an unwritten row holds in the GPU tests). */
    assert_false(valid((const int32_t[]){0x7f7f7f7f, 0x7f7f7f7f}, 2, 5, 1, 1, why));
    assert_string_equal(why, "slot 0 holds 2139062143, outside 0..4");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_that_keep_the_rules_pass),
        cmocka_unit_test(test_each_broken_rule_is_caught_and_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
