/* Check mode's verdict: what the check kernel's flags become in the error
 * record (the kernel itself runs in tests/gpu/test_metadata_check.c). */
#include "testing.h"

#include "attention/metadata_check.h"

#include <string.h>

static void expect_verdict(unsigned flags, unsigned long long seq, unsigned long long row, const char *want)
{
    fsa_check_result r = {flags, 0, seq, row};
    assert_int_equal(fsa_metadata_verdict("forward", &r, 4, "cu_seqlens", "total_tokens"), FSA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(fsa_last_error_info()->stage, "forward");
    assert_string_equal(fsa_last_error_info()->message, want);
}

static void expect_kvcache_verdict(unsigned flags, unsigned long long seq, unsigned long long row, const char *want)
{
    fsa_check_result r = {flags, 0, seq, row};
    assert_int_equal(fsa_metadata_verdict("kvcache", &r, 2, "cu_seqlens_q", "num_query_tokens"),
                     FSA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(fsa_last_error_info()->stage, "kvcache");
    assert_string_equal(fsa_last_error_info()->message, want);
}

static void test_each_problem_is_named_with_where_its_kind_first_occurs(void **state)
{
    (void)state;
    expect_verdict(FSA_CHECK_CU_START, 0, ~0ull, "check mode: bad metadata: cu_seqlens[0] is not 0");
    expect_verdict(FSA_CHECK_CU_ORDER, 3, ~0ull, "check mode: bad metadata: cu_seqlens falls (first at sequence 3)");
    expect_verdict(FSA_CHECK_SEQ_LONG | FSA_CHECK_CU_END, 1, ~0ull,
                   "check mode: bad metadata: cu_seqlens has a sequence longer than max_seqlen, does not end at "
                   "total_tokens (first at sequence 1)");
    /* Row 4 * 17 + 2: token 17, KV head 2 of 4. */
    expect_verdict(FSA_CHECK_TOPK_RANGE, ~0ull, 70,
                   "check mode: bad metadata: top-k entries neither -1 nor a block of the token's sequence (first "
                   "at token 17, KV head 2)");
    expect_verdict(FSA_CHECK_CU_START | FSA_CHECK_TOPK_REPEAT, 0, 5,
                   "check mode: bad metadata: cu_seqlens[0] is not 0; top-k rows naming a block twice (first at "
                   "token 1, KV head 1)");
}

static void test_paged_cache_problems_are_named_with_the_sequence_or_row(void **state)
{
    (void)state;
    expect_kvcache_verdict(FSA_CHECK_USED_SHORT, 2, ~0ull,
                           "check mode: bad metadata: seqused_k below the sequence's new tokens (first at sequence 2)");
    expect_kvcache_verdict(FSA_CHECK_USED_LONG | FSA_CHECK_PAGE_RANGE, 0, ~0ull,
                           "check mode: bad metadata: seqused_k beyond the pages of its block-table row; block_table "
                           "entries of used pages outside [0, num_pages) (first at sequence 0)");
    expect_kvcache_verdict(FSA_CHECK_CU_END, 4, ~0ull,
                           "check mode: bad metadata: cu_seqlens_q does not end at num_query_tokens (first at sequence 4)");
    /* Row 2 * 5 + 1: token 5, KV head 1 of 2. */
    expect_kvcache_verdict(FSA_CHECK_TOPK_REPEAT | FSA_CHECK_TOPK_RANGE, ~0ull, 11,
                           "check mode: bad metadata: top-k entries neither -1 nor a block of the token's sequence, "
                           "rows naming a block twice (first at token 5, KV head 1)");
}

static void test_compressed_offsets_problems_name_cu_seqlens_c_and_the_count_rule(void **state)
{
    (void)state;
    expect_verdict(FSA_CHECK_CUC_START, 0, ~0ull, "check mode: bad metadata: cu_seqlens_c[0] is not 0");
    expect_verdict(FSA_CHECK_CUC_ORDER | FSA_CHECK_CUC_END, 2, ~0ull,
                   "check mode: bad metadata: cu_seqlens_c falls, does not end at total_compressed (first at "
                   "sequence 2)");
    expect_verdict(FSA_CHECK_CMP_COUNT, 1, ~0ull,
                   "check mode: bad metadata: cu_seqlens_c gives a sequence a compressed-token count other than "
                   "max(0, (length - kernel_size) / stride + 1) (first at sequence 1)");
    /* Both arrays at once: cu_seqlens first, then cu_seqlens_c, one location. */
    expect_verdict(FSA_CHECK_CU_END | FSA_CHECK_CUC_START | FSA_CHECK_CMP_COUNT, 0, ~0ull,
                   "check mode: bad metadata: cu_seqlens does not end at total_tokens; cu_seqlens_c[0] is not 0; "
                   "cu_seqlens_c gives a sequence a compressed-token count other than max(0, (length - kernel_size) "
                   "/ stride + 1) (first at sequence 0)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_problem_is_named_with_where_its_kind_first_occurs),
        cmocka_unit_test(test_paged_cache_problems_are_named_with_the_sequence_or_row),
        cmocka_unit_test(test_compressed_offsets_problems_name_cu_seqlens_c_and_the_count_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
