/* Checks fsa-bench's per-token selection rows (bench_selection_row in
 * tools/bench_inputs.c): K entries, sorted, distinct, within the token's
 * blocks 0..c, -1 after them, and the forced blocks 0, c and c - 1 in that
 * priority as far as K holds them. Each row is a heap buffer of exactly K
 * ints, so that a sanitizer build catches a write past it. Also the median
 * every mode reports (bench_median) and the random inputs (bench_fill_normal). */
#include "bench_inputs.h"
#include "testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const int k_tops[] = {1, 2, 3, 16};
enum { MAX_C = 40, SEEDS = 8 };

static int row_has(const int32_t *row, int K, int block)
{
    for (int i = 0; i < K; i++)
        if (row[i] == block) return 1;
    return 0;
}

/* The row of own block c for K slots, from seed. */
static int32_t *make_row(int K, int c, uint64_t seed)
{
    int32_t *row = malloc(sizeof *row * (size_t)K);
    assert_non_null(row);
    uint64_t s = seed;
    bench_selection_row(row, K, c, &s);
    return row;
}

static void test_every_row_holds_k_sorted_distinct_blocks_of_the_token_then_minus_one(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < sizeof k_tops / sizeof *k_tops; ki++)
        for (int c = 0; c <= MAX_C; c++)
            for (uint64_t seed = 0; seed < SEEDS; seed++) {
                const int K = k_tops[ki], want = c + 1 < K ? c + 1 : K;
                int32_t *row = make_row(K, c, seed);
                for (int i = 0; i < K; i++) {
                    if (i >= want) {
                        assert_int_equal(row[i], -1);
                        continue;
                    }
                    assert_in_range(row[i], 0, c);
                    if (i > 0) assert_true(row[i] > row[i - 1]); /* sorted and distinct */
                }
                free(row);
            }
}

static void test_the_forced_blocks_that_fit_are_in_every_row(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < sizeof k_tops / sizeof *k_tops; ki++)
        for (int c = 0; c <= MAX_C; c++)
            for (uint64_t seed = 0; seed < SEEDS; seed++) {
                const int K = k_tops[ki];
                int32_t *row = make_row(K, c, seed);
                assert_true(row_has(row, K, 0));
                if (K >= 2) assert_true(row_has(row, K, c));
                if (K >= 3 && c >= 1) assert_true(row_has(row, K, c - 1));
                free(row);
            }
}

static void test_a_row_is_a_function_of_its_seed(void **state)
{
    (void)state;
    int32_t *a = make_row(16, 40, 7), *b = make_row(16, 40, 7);
    assert_memory_equal(a, b, sizeof *a * 16);
    free(a);
    free(b);
}

static void test_the_median_is_the_middle_timing_or_the_mean_of_the_two_middle_ones(void **state)
{
    (void)state;
    double odd[] = {9.0, 1.0, 5.0};
    assert_true(bench_median(odd, 3) == 5.0);
    double even[] = {4.0, 30.0, 1.0, 2.0}; /* sorted 1 2 4 30: not 4, the upper middle */
    assert_true(bench_median(even, 4) == 3.0);
    double one[] = {7.0};
    assert_true(bench_median(one, 1) == 7.0);
}

/* Every value written, whatever n (odd, under the threads, past a multiple of the chunks the threads share):
 * a buffer of 0xffff (NaN in both dtypes) keeps none; the same seed gives the same values, another seed others;
 * the values are standard normal (mean and variance of 3M of them). */
static void test_a_fill_writes_every_value_as_a_function_of_its_seed(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 5, 100, ((size_t)3 << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        for (int dt = 0; dt < 2; dt++) {
            const fsa_dtype dtype = dt ? FSA_DTYPE_F16 : FSA_DTYPE_BF16;
            uint16_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
            assert_true(a && b);
            memset(a, 0xff, n * sizeof *a);
            memset(b, 0xff, n * sizeof *b);
            bench_fill_normal(a, n, 42, dtype);
            bench_fill_normal(b, n, 42, dtype);
            double sum = 0.0, sq = 0.0;
            for (size_t i = 0; i < n; i++) {
                if (a[i] == 0xffffu) fail_msg("n %zu: value %zu not written", n, i);
                const double x = dt ? bench_from_f16(a[i]) : bench_from_bf16(a[i]);
                sum += x;
                sq += x * x;
            }
            assert_memory_equal(a, b, n * sizeof *a);
            bench_fill_normal(b, n, 43, dtype);
            if (n >= 100) assert_true(memcmp(a, b, n * sizeof *a) != 0);
            if (n > 1000000) {
                assert_true(fabs(sum / (double)n) < 5e-3);
                assert_true(fabs(sq / (double)n - 1.0) < 1e-2);
            }
            free(a);
            free(b);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_row_holds_k_sorted_distinct_blocks_of_the_token_then_minus_one),
        cmocka_unit_test(test_the_forced_blocks_that_fit_are_in_every_row),
        cmocka_unit_test(test_a_row_is_a_function_of_its_seed),
        cmocka_unit_test(test_the_median_is_the_middle_timing_or_the_mean_of_the_two_middle_ones),
        cmocka_unit_test(test_a_fill_writes_every_value_as_a_function_of_its_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
