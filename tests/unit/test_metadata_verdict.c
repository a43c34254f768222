/* Check mode's verdict: what the check kernel's flags become in the error
 * record (the kernel itself runs in tests/gpu/test_metadata_check.c). */
#include "testing.h"

#include "attention/metadata_check.h"

#include <string.h>

static void expect_verdict(unsigned flags, unsigned long long seq, unsigned long long row, const char *want)
{
    fsa_check_result r = {flags, 0, seq, row};
    assert_int_equal(fsa_metadata_verdict("forward", &r, 4), FSA_STATUS_INVALID_ARGUMENT);
    assert_string_equal(fsa_last_error_info()->stage, "forward");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_problem_is_named_with_where_its_kind_first_occurs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
