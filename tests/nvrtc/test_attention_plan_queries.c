/* The selected-attention plan queries, on offline sm_90a plans (no GPU
 * needed): the workspace-size and path queries refuse what the calls refuse,
 * and a token or head count too large to index is refused (or sized) instead
 * of wrapping around, with or without a workspace limit; a plan without
 * backward answers none of the backward's queries. The plans' kernels
 * compile once, into a cache directory of this test. */
#include "attention_arguments_fixture.h"

#include "attention/plan.h"

#include <stdint.h>
#include <string.h>

/* What a workspace-size query answers for (T, batch), as the call would. */
static fsa_status fwd_call_status(int64_t T, int batch)
{
    fsa_fwd_args a = good_fwd(g_auto, 1);
    a.total_tokens = T;
    a.batch = batch;
    a.max_seqlen = 0;
    a.workspace_bytes = SIZE_MAX; /* the workspace is not what is asked here */
    fsa_status st = fsa_selected_attention_fwd(g_auto, &a, NULL);
    return st == FSA_STATUS_NO_DEVICE ? FSA_STATUS_OK : st;
}

static fsa_status bwd_call_status(int64_t T, int batch)
{
    fsa_bwd_args a = good_bwd(g_bwd, 1);
    a.total_tokens = T;
    a.batch = batch;
    a.max_seqlen = 0;
    a.workspace_bytes = SIZE_MAX;
    fsa_status st = fsa_selected_attention_bwd(g_bwd, &a, NULL);
    return st == FSA_STATUS_NO_DEVICE ? FSA_STATUS_OK : st;
}

static void test_workspace_sizes_refuse_what_the_calls_refuse(void **state)
{
    (void)state;
    const struct {
        int64_t T;
        int batch;
        fsa_status want;
    } cases[] = {
        {0, 0, FSA_STATUS_OK},
        {0, -3, FSA_STATUS_OK}, /* nothing to do: the batch is not looked at */
        {1000, 1, FSA_STATUS_OK},
        {1000, 1000, FSA_STATUS_OK},
        {1000, 1001, FSA_STATUS_INVALID_ARGUMENT},
        {5, 7, FSA_STATUS_INVALID_ARGUMENT},
        {1000, 0, FSA_STATUS_INVALID_ARGUMENT},
        {1000, -1, FSA_STATUS_INVALID_ARGUMENT},
        {-1, 1, FSA_STATUS_INVALID_ARGUMENT},
        {INT32_MAX, 1, FSA_STATUS_INVALID_ARGUMENT},
        {(int64_t)1 << 40, 1, FSA_STATUS_INVALID_ARGUMENT},
        {INT64_MAX, 1, FSA_STATUS_INVALID_ARGUMENT},
        {INT64_MIN, 1, FSA_STATUS_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t T = cases[i].T;
        const int batch = cases[i].batch;
        size_t w = 12345;
        fsa_status st = fsa_plan_workspace_size(&w, g_auto, T, batch);
        if (st != cases[i].want || fwd_call_status(T, batch) != st)
            fail_msg("T %lld, batch %d: workspace size %s, forward %s, expected %s", (long long)T, batch,
                     fsa_status_name(st), fsa_status_name(fwd_call_status(T, batch)),
                     fsa_status_name(cases[i].want));
        if (st != FSA_STATUS_OK) assert_int_equal(w, 0);
        st = fsa_plan_workspace_size_bwd(&w, g_bwd, T, batch);
        if (st != cases[i].want || bwd_call_status(T, batch) != st)
            fail_msg("T %lld, batch %d: backward workspace size %s, backward %s, expected %s", (long long)T, batch,
                     fsa_status_name(st), fsa_status_name(bwd_call_status(T, batch)),
                     fsa_status_name(cases[i].want));
    }
}

static void test_a_huge_token_count_under_a_workspace_limit_is_refused_without_overflow(void **state)
{
    (void)state;
    /* The chunking arithmetic under a limit used to overflow int64 here. */
    const int64_t huge[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2 + 1, (int64_t)INT32_MAX};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t w = 0;
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_workspace_size(&w, g_limited, huge[i], 1));
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_workspace_size_bwd(&w, g_limited, huge[i], 1));
    }
    /* The largest token count is cut into chunks of one token under this limit, whose index keys
     * (256 rows of a CTA over 2^25 blocks per head each) would pass int32: refused, never a wrapped size.
     * A million tokens still gets a size within the limit's reach. */
    size_t w = 1;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_workspace_size(&w, g_limited, INT32_MAX - 1, 1));
    assert_int_equal(w, 0);
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size(&w, g_limited, 1 << 20, 1));
    assert_true(w > 0);
}

static fsa_plan *plan_with_kv_heads(int hkv, int backward, uint64_t workspace_limit)
{
    fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_AUTO, workspace_limit, backward);
    d.num_kv_heads = hkv;
    d.num_q_heads = 2 * hkv; /* G = 2: the kernels of the small shape */
    fsa_plan *plan = plan_of(&d);
    if (plan == NULL) fail_msg("plan with %d KV heads: %s", hkv, fsa_last_error());
    return plan;
}

static void test_absurd_head_counts_are_unsupported_instead_of_wrapping_around(void **state)
{
    (void)state;
    const int64_t T = INT32_MAX - 1;
    const int hkv = (1 << 29) - 64; /* x 4 slots: one token's list entries still fit int32, with the forward's
                                        work counter's room (fsa_fwd_pair_room) */
    fsa_plan *plan = plan_with_kv_heads(hkv, 1, FSA_WORKSPACE_UNLIMITED);
    size_t w = 0;
    /* Without a cap, the backward's fp32 dK/dV accumulator alone would be
     * T x Hkv x 2 x D x 4 > 2^68 bytes. */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_workspace_size_bwd(&w, plan, T, 1));
    assert_int_equal(w, 0);
    /* The forward's per-(head, block) tables of T one-token sequences come to
     * 2^64 bytes: refused, or at least never a wrapped-around small size. */
    const double tables = 3.0 * 4.0 * (double)hkv * (double)(T / 64 + T + 1);
    fsa_status st = fsa_plan_workspace_size(&w, plan, T, (int)T);
    if (st != FSA_STATUS_UNSUPPORTED && !(st == FSA_STATUS_OK && (double)w >= tables))
        fail_msg("T %lld in %lld sequences, %d KV heads: %s, %zu bytes", (long long)T, (long long)T, hkv,
                 fsa_status_name(st), w);
    fsa_plan_destroy(plan);
    /* Under the default cap both run one KV head at a time: the backward needs
     * at least that head's accumulator (T x 2 x D x 4 bytes), the forward that
     * head's tables; sizes, never wrapped-around ones (or refused: chunks of a
     * few tokens over 2^25 blocks per head pass the index's 32-bit keys). */
    plan = plan_with_kv_heads(hkv, 1, 0);
    st = fsa_plan_workspace_size_bwd(&w, plan, T, 1);
    if (st != FSA_STATUS_UNSUPPORTED && !(st == FSA_STATUS_OK && (double)w >= (double)T * 2 * D * 4))
        fail_msg("T %lld, %d KV heads, default cap, backward: %s, %zu bytes", (long long)T, hkv, fsa_status_name(st),
                 w);
    st = fsa_plan_workspace_size(&w, plan, T, (int)T);
    if (st != FSA_STATUS_UNSUPPORTED && !(st == FSA_STATUS_OK && (double)w >= tables / hkv))
        fail_msg("T %lld in %lld sequences, %d KV heads, default cap: %s, %zu bytes", (long long)T, (long long)T,
                 hkv, fsa_status_name(st), w);
    /* A call of that size never gets as far: its o (written, so rows of its
     * own: T x Hq x D x 2 = 2^68 bytes) cannot lie below 2^63 bytes. */
    fsa_fwd_args a = good_fwd(g_auto, 1);
    a.total_tokens = T;
    a.batch = (int)T;
    a.o.token_stride = (int64_t)2 * hkv * D;
    a.workspace_bytes = SIZE_MAX;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, plan, &a);
    assert_non_null(strstr(fsa_last_error(), "o reaches past 2^63 bytes"));
    /* Smaller problems of the same plan are fine (100 tokens: the FSA order, with a workspace). */
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size(&w, plan, 100, 1));
    assert_true(w > 0);
    fsa_plan_destroy(plan);

    /* 2^29 KV heads x 4 slots: one token's list entries no longer fit int32, which every call would refuse:
     * so does the plan (test_api_plans.c has the boundary). */
    fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_AUTO, 0, 1);
    d.num_kv_heads = 1 << 29;
    d.num_q_heads = 2 * d.num_kv_heads;
    plan = g_auto; /* must be overwritten */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_create(&plan, g_ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "exceed int32"));
}

/* One token's list entries (KV heads x top-k) may fill the room the
 * forward's work counter leaves exactly: a workspace size, not a refusal
 * (one KV head more is refused above). Offline that room is a one-CTA
 * grid's, the same for every plan. */
static void test_one_tokens_list_entries_may_fill_the_forwards_room_exactly(void **state)
{
    (void)state;
    const int64_t room = fsa_fwd_pair_room(g_auto);
    int k = 2;
    while (room % k != 0) k++;
    fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_FSA, FSA_WORKSPACE_UNLIMITED, 0);
    d.top_k = k;
    d.num_kv_heads = (int)(room / k);
    d.num_q_heads = 2 * d.num_kv_heads;
    fsa_plan *plan = plan_of(&d);
    if (plan == NULL) fail_msg("plan with %d KV heads x top-k %d: %s", d.num_kv_heads, k, fsa_last_error());
    size_t w = 0;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size(&w, plan, 1, 1));
    assert_true(w > 0);
    fsa_plan_destroy(plan);
}

/* The backward's main kernel counts a launch's work items times key slices
 * in 32 bits: an uncapped call of every head and token past that count runs
 * in chunks of fewer KV heads whose segments and work an int numbers (the
 * chunk search keeps each head chunk's segments within an int), or is
 * refused by the workspace query (and the call); never run with a wrapped
 * count that skips work. */
static void test_a_backward_past_the_main_kernels_32_bit_work_count_runs_in_smaller_chunks_or_is_refused(void **state)
{
    (void)state;
    const int64_t T = (int64_t)1 << 30;
    fsa_plan *plan = plan_with_kv_heads(4096, 1, FSA_WORKSPACE_UNLIMITED);
    size_t w = 1;
    fsa_status st = fsa_plan_workspace_size_bwd(&w, plan, T, 1);
    if (st == FSA_STATUS_OK) {
        int64_t tc;
        fsa_bwd_layout l;
        assert_int_equal(fsa_bwd_setup(&tc, &l, plan, T, 1, FSA_ALGORITHM_FSA, "test"), FSA_STATUS_OK);
        print_message("  T %lld, 4096 KV heads, uncapped: chunks of %d heads x %lld tokens, %llu work items\n",
                      (long long)T, l.heads, (long long)tc, (unsigned long long)fsa_bwd_main_work(plan, &l, tc));
        assert_true(l.heads < 4096);
        assert_true(fsa_bwd_main_work(plan, &l, tc) <= (uint64_t)INT32_MAX);
        assert_true(w >= l.total);
    } else if (st != FSA_STATUS_UNSUPPORTED || !strstr(fsa_last_error(), "32-bit count")) {
        fail_msg("T %lld, 4096 KV heads, uncapped: %s, %s", (long long)T, fsa_status_name(st), fsa_last_error());
    } else {
        assert_int_equal(w, 0);
    }
    fsa_plan_destroy(plan);
    /* One KV head of the same tokens fits. */
    plan = plan_with_kv_heads(1, 1, FSA_WORKSPACE_UNLIMITED);
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size_bwd(&w, plan, T, 1));
    assert_true(w > 0);
    fsa_plan_destroy(plan);
}

/* fsa_plan_tune sizes one allocation of scratch inputs for T tokens of every
 * head: where that passes 2^64 bytes it is refused before anything else
 * (offline, before the device is looked for), never a wrapped-around small
 * allocation the kernels would run past. A plan's ordinary sizes go on to
 * the next check (this context tunes nothing). */
static void test_tuning_scratch_inputs_past_two_to_the_64_bytes_are_unsupported(void **state)
{
    (void)state;
    const int hkv = (1 << 27) - 1; /* x 4 slots: one token's list entries fit int32 */
    fsa_plan *plan = plan_with_kv_heads(hkv, 0, FSA_WORKSPACE_UNLIMITED);
    int measured = 7;
    /* q alone: 2^30 tokens x 2^28 query heads x D x 2 bytes. */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_tune(&measured, plan, FSA_OPERATION_FORWARD, (int64_t)1 << 30));
    if (!strstr(fsa_last_error(), "2^64 bytes")) fail_msg("%s", fsa_last_error());
    assert_int_equal(measured, 0);
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_tune(&measured, plan, FSA_OPERATION_FORWARD, 16));
    assert_non_null(strstr(fsa_last_error(), "tuning is off"));
    fsa_plan_destroy(plan);
}

/* One token per sequence over every token the calls take: a backward chunk's
 * work counts a segment per (KV head, block) of each sequence, past the main
 * kernel's 32-bit count, and that is the refusal (before the index's keys
 * would refuse the same segments), not a wrapped count. */
static void test_a_backward_of_more_segments_than_its_32_bit_work_count_is_refused_for_that_count(void **state)
{
    (void)state;
    size_t w = 1;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_workspace_size_bwd(&w, g_bwd, INT32_MAX - 1, INT32_MAX - 1));
    assert_non_null(strstr(fsa_last_error(), "past the main kernel's 32-bit count"));
    assert_int_equal(w, 0);
}

/* The backward's queries of a plan made without backward = 1 are invalid
 * arguments, as its backward calls are (selected_bwd.h). */
static void test_backward_queries_of_a_forward_only_plan_are_invalid_arguments(void **state)
{
    (void)state;
    size_t w = 1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_workspace_size_bwd(&w, g_auto, 100, 1));
    assert_int_equal(w, 0);
    assert_non_null(strstr(fsa_last_error(), "without backward = 1"));
    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_algorithm_bwd(&a, NULL, g_auto, 100));
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_choice_get(&c, g_auto, FSA_OPERATION_BACKWARD, 100));
    assert_non_null(strstr(fsa_last_error(), "without backward = 1"));
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_choice_get(&c, g_auto, FSA_OPERATION_FORWARD, 100));
}

static void test_path_queries_refuse_token_counts_the_calls_refuse(void **state)
{
    (void)state;
    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    const int64_t bad[] = {-5, -1, INT32_MAX, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_algorithm(&a, NULL, g_auto, bad[i]));
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_algorithm_bwd(&a, NULL, g_bwd, bad[i]));
        fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_choice_get(&c, g_auto, FSA_OPERATION_FORWARD, bad[i]));
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_choice_get(&c, g_bwd, FSA_OPERATION_BACKWARD, bad[i]));
    }
    const char *why = NULL;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_algorithm(&a, &why, g_auto, 0));
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_algorithm(&a, &why, g_auto, INT32_MAX - 1));
    assert_int_equal(a, FSA_ALGORITHM_FSA);
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_algorithm_bwd(&a, &why, g_bwd, INT32_MAX - 1));
    assert_non_null(why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workspace_sizes_refuse_what_the_calls_refuse),
        cmocka_unit_test(test_a_huge_token_count_under_a_workspace_limit_is_refused_without_overflow),
        cmocka_unit_test(test_absurd_head_counts_are_unsupported_instead_of_wrapping_around),
        cmocka_unit_test(test_one_tokens_list_entries_may_fill_the_forwards_room_exactly),
        cmocka_unit_test(test_a_backward_past_the_main_kernels_32_bit_work_count_runs_in_smaller_chunks_or_is_refused),
        cmocka_unit_test(test_tuning_scratch_inputs_past_two_to_the_64_bytes_are_unsupported),
        cmocka_unit_test(test_a_backward_of_more_segments_than_its_32_bit_work_count_is_refused_for_that_count),
        cmocka_unit_test(test_backward_queries_of_a_forward_only_plan_are_invalid_arguments),
        cmocka_unit_test(test_path_queries_refuse_token_counts_the_calls_refuse),
    };
    return cmocka_run_group_tests(tests, attention_arguments_setup, attention_arguments_teardown);
}
