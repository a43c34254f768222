/* Checks the benchmark selection generator of the CPU reference
 * (fsa_ref_make_selection): rows are sorted and distinct and hold the first,
 * own and previous block, both top-k layouts get the same rows, and the free
 * slots are drawn uniformly. */
#include "reference.h"
#include "testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_generated_rows(const int32_t *topk, int64_t hs, int64_t ts, int batch,
                                 const int32_t *cu, int hkv, int bk, int top_k)
{
    for (int h = 0; h < hkv; h++)
        for (int b = 0; b < batch; b++)
            for (int t = cu[b]; t < cu[b + 1]; t++) {
                const int32_t *row = topk + h * hs + t * ts;
                int c = (t - cu[b]) / bk;
                int want = top_k < c + 1 ? top_k : c + 1;
                int has0 = 0, hasc = 0, hasprev = 0;
                for (int s = 0; s < top_k; s++) {
                    if (s >= want) {
                        assert_int_equal(row[s], -1);
                        continue;
                    }
                    assert_true(row[s] >= 0 && row[s] <= c);
                    if (s > 0) assert_true(row[s] > row[s - 1]); /* sorted, distinct */
                    has0 |= row[s] == 0;
                    hasc |= row[s] == c;
                    hasprev |= row[s] == c - 1;
                }
                assert_true(hasc);
                if (top_k >= 2) assert_true(has0);
                if (top_k >= 3 && c >= 1) assert_true(hasprev);
            }
}

static void test_selection_rows_are_sorted_distinct_and_hold_first_own_and_previous_block(
    void **state)
{
    (void)state;
    const int32_t cu[] = {0, 1, 6, 70, 200, 233};
    const int ks[] = {1, 2, 3, 5, 16};
    for (int n = 0; n < 5; n++) {
        int K = ks[n];
        int32_t *topk = malloc((size_t)3 * 233 * K * sizeof *topk);
        assert_non_null(topk);
        fsa_rng rng = {(uint64_t)(80 + n)};
        fsa_ref_make_selection(topk, (int64_t)233 * K, K, 233, 5, cu, 3, 8, K, &rng);
        check_generated_rows(topk, (int64_t)233 * K, K, 5, cu, 3, 8, K);
        free(topk);
    }
}

static void test_selection_generator_writes_the_same_rows_in_both_layouts(void **state)
{
    (void)state;
    const int32_t cu[] = {0, 17, 100};
    enum { T = 100, H = 4, K = 6 };
    int32_t *hm = malloc(sizeof(int32_t) * H * T * K), *tm = malloc(sizeof(int32_t) * H * T * K);
    assert_non_null(hm);
    assert_non_null(tm);
    memset(hm, 0x55, sizeof(int32_t) * H * T * K); /* every element must be written */
    memset(tm, 0x55, sizeof(int32_t) * H * T * K);
    fsa_rng r1 = {90}, r2 = {90};
    fsa_ref_make_selection(hm, (int64_t)T * K, K, T, 2, cu, H, 4, K, &r1);
    fsa_ref_make_selection(tm, K, (int64_t)H * K, T, 2, cu, H, 4, K, &r2);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            assert_memory_equal(hm + ((size_t)h * T + t) * K, tm + ((size_t)t * H + h) * K,
                                sizeof(int32_t) * K);
    check_generated_rows(hm, (int64_t)T * K, K, 2, cu, H, 4, K);
    free(hm);
    free(tm);
}

static void test_selection_draws_the_free_slots_uniformly(void **state)
{
    (void)state;
    /* Own block c = 9 (tokens 72..79 of 80, BK = 8), K = 5: blocks 0, 8, 9
     * are fixed and 2 slots come from 1..7, each block with chance 2/7. */
    enum { T = 80, H = 500, K = 5 };
    const int32_t cu[] = {0, T};
    int32_t *topk = malloc(sizeof(int32_t) * H * T * K);
    assert_non_null(topk);
    fsa_rng rng = {95};
    fsa_ref_make_selection(topk, (int64_t)T * K, K, T, 1, cu, H, 8, K, &rng);
    int counts[10] = {0};
    int rows = 0;
    for (int h = 0; h < H; h++)
        for (int t = 72; t < T; t++, rows++)
            for (int s = 0; s < K; s++) counts[topk[((size_t)h * T + t) * K + s]]++;
    assert_int_equal(counts[0], rows);
    assert_int_equal(counts[8], rows);
    assert_int_equal(counts[9], rows);
    double expect = rows * 2.0 / 7.0;
    for (int blk = 1; blk <= 7; blk++) assert_true(fabs(counts[blk] - expect) < 0.1 * expect);
    free(topk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_rows_are_sorted_distinct_and_hold_first_own_and_previous_block),
        cmocka_unit_test(test_selection_generator_writes_the_same_rows_in_both_layouts),
        cmocka_unit_test(test_selection_draws_the_free_slots_uniformly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
