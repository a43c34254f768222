/* The selected-attention calls answer bad arguments with their documented
 * status, on offline sm_90a plans (no GPU needed): every argument check of the
 * forward and the backward (null, misaligned, negative or unaligned strides,
 * counts, the workspace) runs before the missing device is noticed, so a call
 * whose arguments pass them all ends with FSA_STATUS_NO_DEVICE; argument
 * structs and descriptors of every size from the first version on are read
 * as such, newer ones refused. The plans' kernels compile once, into a cache
 * directory of this test. */
#include "attention_arguments_fixture.h"

#include "base/struct_size.h"

#include <stdio.h>
#include <string.h>

static void test_forward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    const int64_t T = 100; /* past T = 64, where the heuristic takes the FSA order (with a workspace) */
    fsa_fwd_args a = good_fwd(g_auto, T);
    assert_true(a.workspace_bytes > 0);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, &a);
    a.lse = 0; /* optional */
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, &a);

    a = good_fwd(g_auto, T);
    a.q.ptr = 0x1002;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.v.ptr += 8;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.q.token_stride = 12;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);
    /* One KV head: its head stride is never used, whatever it is. */
    a = good_fwd(g_auto, T);
    a.k.head_stride = -3;
    a.v.head_stride = 12;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, &a);
    a.q.head_stride = 12; /* two query heads: checked */
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);
    /* One token: token strides are never used. */
    a = good_fwd(g_auto, 1);
    a.q.token_stride = 5;
    a.o.token_stride = -1;
    a.topk.token_stride = -4;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.lse = 0x7f0000700002ull;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.lse = 0x7ffffffffffffff0ull; /* its [Hq, T] floats would pass 2^63 bytes */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.topk.ptr += 2;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.workspace += 16; /* enough bytes, not 256-byte aligned */
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);

    a = good_fwd(g_auto, T);
    a.topk.ptr = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.cu_seqlens = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.k.ptr = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_auto, &a);
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_auto, NULL);
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, NULL, &a);

    a = good_fwd(g_auto, T);
    a.batch = 0;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.batch = (int)T + 1;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.max_seqlen = (int)T + 1;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.total_tokens = -1;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);

    a = good_fwd(g_auto, T);
    a.workspace_bytes -= 1;
    EXPECT_FWD(FSA_STATUS_WORKSPACE_TOO_SMALL, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.workspace = 0;
    EXPECT_FWD(FSA_STATUS_WORKSPACE_TOO_SMALL, g_auto, &a);

    /* The NSA path takes no workspace: only the missing device is left. */
    a = good_fwd(g_nsa, T);
    assert_int_equal(a.workspace_bytes, 0);
    a.workspace = 0;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_nsa, &a);
    /* Nothing to do is done without a device. */
    a = good_fwd(g_auto, T);
    a.total_tokens = 0;
    EXPECT_FWD(FSA_STATUS_OK, g_auto, &a);
    /* and needs no tensor (selected.h) */
    a.q.ptr = a.k.ptr = a.v.ptr = a.o.ptr = a.topk.ptr = 0, a.lse = a.cu_seqlens = a.workspace = 0;
    EXPECT_FWD(FSA_STATUS_OK, g_auto, &a);
}

static void test_negative_strides_are_invalid_arguments_and_unaligned_ones_misaligned(void **state)
{
    (void)state;
    const int64_t T = 10;
    fsa_fwd_args a = good_fwd(g_auto, T);
    a.q.head_stride = -64;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.o.token_stride = -128;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.topk.token_stride = -4;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a = good_fwd(g_auto, T);
    a.q.head_stride = 60;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_auto, &a);

    fsa_bwd_args b = good_bwd(g_bwd, T);
    b.dq.token_stride = -128;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
    b = good_bwd(g_bwd, T);
    b.dout.head_stride = -8;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
    b = good_bwd(g_bwd, T);
    b.dk.token_stride = 100;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, g_bwd, &b);
}

static void test_backward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    const int64_t T = 10;
    fsa_bwd_args a = good_bwd(g_bwd, T);
    assert_true(a.workspace_bytes > 0);
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_bwd, &a);

    a.lse = 0; /* required by the backward */
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, g_bwd, &a);
    const char *names[] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fsa_bwd_args b = good_bwd(g_bwd, T);
        fsa_tensor *views[] = {&b.q, &b.k, &b.v, &b.o, &b.dout, &b.dq, &b.dk, &b.dv};
        views[i]->ptr = 0;
        EXPECT_BWD(FSA_STATUS_NULL_POINTER, g_bwd, &b);
        char want[32];
        snprintf(want, sizeof want, "%s is NULL", names[i]);
        assert_string_equal(fsa_last_error_info()->message, want);
        views[i]->ptr = 0x7f0002000008ull;
        EXPECT_BWD(FSA_STATUS_MISALIGNED, g_bwd, &b);
    }
    a = good_bwd(g_bwd, T);
    a.batch = (int)T + 1;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &a);
    a = good_bwd(g_bwd, T);
    a.workspace_bytes -= 1;
    EXPECT_BWD(FSA_STATUS_WORKSPACE_TOO_SMALL, g_bwd, &a);
    /* A plan made without backward = 1. */
    a = good_bwd(g_bwd, T);
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, g_bwd, NULL);
}

/* The views a call writes (o; dq, dk, dv and gate_grad) must not give two
 * rows the same bytes: refused on the host, naming the view, whichever path
 * the plan takes; views that only read may repeat rows. */
static void test_written_views_whose_rows_overlap_are_refused(void **state)
{
    (void)state;
    const int64_t T = 10;
    fsa_fwd_args a = good_fwd(g_auto, T);
    a.o.head_stride = 0; /* both query heads on one row */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    assert_non_null(strstr(fsa_last_error(), "o is written"));
    a = good_fwd(g_nsa, T), a.o.token_stride = D; /* token t's second head is token t + 1's first */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_nsa, &a);
    a = good_fwd(g_auto, T), a.q.head_stride = 0; /* read only */
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, &a);
    a = good_fwd(g_auto, 1), a.o.token_stride = 0; /* one token: its stride is never used */
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, &a);

    const char *names[] = {"dq", "dk", "dv"};
    for (size_t i = 0; i < 3; i++) {
        fsa_bwd_args b = good_bwd(g_bwd, T);
        fsa_tensor *views[] = {&b.dq, &b.dk, &b.dv};
        views[i]->token_stride = D / 2; /* each token's rows half over the next token's */
        EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
        char want[32];
        snprintf(want, sizeof want, "%s is written", names[i]);
        assert_non_null(strstr(fsa_last_error(), want));
    }
    fsa_bwd_args b = good_bwd(g_bwd, T);
    b.gate_grad = (fsa_tensor){0x7f0003000000ull, 1, 1}; /* token t's second head is token t + 1's first */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
    assert_non_null(strstr(fsa_last_error(), "gate_grad is written"));
    b = good_bwd(g_bwd, T), b.dout.token_stride = 0; /* read only */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_bwd, &b);
}

/* dq_add (appended): dq itself, or memory apart from dq; a view that
 * overlaps dq without being it would read elements other threads have
 * already written. */
static void test_dq_add_is_dq_itself_or_memory_of_its_own(void **state)
{
    (void)state;
    const int64_t T = 10;
    fsa_bwd_args b = good_bwd(g_bwd, T);
    b.dq_add = b.dq;
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_bwd, &b);
    b.dq_add.ptr += 2 * D; /* one head on */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
    assert_non_null(strstr(fsa_last_error(), "dq_add overlaps dq"));
    b = good_bwd(g_bwd, T), b.dq_add = b.dq, b.dq_add.head_stride = 2 * D, b.dq_add.token_stride = 4 * D;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b); /* the same start, other rows */
    b = good_bwd(g_bwd, T), b.dq_add = b.dq, b.dq_add.head_stride = 2 * D; /* dq's token stride: other rows too */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
    assert_non_null(strstr(fsa_last_error(), "dq_add overlaps dq"));
    b = good_bwd(g_bwd, T), b.dq_add = b.dq, b.dq_add.ptr -= 2 * T * HQ * D; /* ends where dq starts */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_bwd, &b);
}

/* A caller compiled against the first version: its struct ends at the first
 * size; what lies after it in memory (poisoned here) is not its. */
#define OLD_CALLER(type, first_size, buffer, value)           \
    do {                                                      \
        memset((buffer), 0xa5, sizeof(buffer));               \
        memcpy((buffer), &(value), (first_size));             \
        size_t size_ = (first_size);                          \
        memcpy((buffer), &size_, sizeof size_);               \
    } while (0)

static void test_argument_structs_take_every_size_from_the_first_version_to_the_current_one(void **state)
{
    (void)state;
    const int64_t T = 10;
    _Alignas(16) unsigned char buf[sizeof(fsa_bwd_args) + 64];

    fsa_fwd_args f = good_fwd(g_auto, T);
    OLD_CALLER(fsa_fwd_args, FSA_FWD_ARGS_FIRST_SIZE, buf, f);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_auto, (const fsa_fwd_args *)(void *)buf);
    f.struct_size = FSA_FWD_ARGS_FIRST_SIZE - 1;
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, g_auto, &f);
    f.struct_size = 0;
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, g_auto, &f);
    /* A struct from a newer header than the library's. */
    memset(buf, 0, sizeof buf);
    f = good_fwd(g_auto, T);
    memcpy(buf, &f, sizeof f);
    const size_t newer_fwd = sizeof f + 8;
    memcpy(buf, &newer_fwd, sizeof newer_fwd);
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, g_auto, (const fsa_fwd_args *)(void *)buf);

    fsa_bwd_args b = good_bwd(g_bwd, T);
    OLD_CALLER(fsa_bwd_args, FSA_BWD_ARGS_FIRST_SIZE, buf, b);
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_bwd, (const fsa_bwd_args *)(void *)buf);
    b.struct_size = FSA_BWD_ARGS_FIRST_SIZE - 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_bwd, &b);
    memset(buf, 0, sizeof buf);
    b = good_bwd(g_bwd, T);
    memcpy(buf, &b, sizeof b);
    const size_t newer_bwd = sizeof b + 8;
    memcpy(buf, &newer_bwd, sizeof newer_bwd);
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_bwd, (const fsa_bwd_args *)(void *)buf);
    /* A size ending inside an appended view (no version ends there), with or without tokens. */
    b = good_bwd(g_bwd, T), b.struct_size = offsetof(fsa_bwd_args, gate) + 12;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_bwd, &b);
    b = good_bwd(g_bwd, 0), b.batch = 0, b.struct_size = offsetof(fsa_bwd_args, dq_add) + 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_bwd, &b);
    b.struct_size = offsetof(fsa_bwd_args, gate);
    EXPECT_BWD(FSA_STATUS_OK, g_bwd, &b);
}

static void test_an_older_shorter_descriptor_makes_the_same_plan(void **state)
{
    (void)state;
    _Alignas(16) unsigned char buf[sizeof(fsa_selected_attention_desc) + 64];
    const fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_AUTO, 0, 0);
    OLD_CALLER(fsa_selected_attention_desc, FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE, buf, d);
    fsa_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_OK,
                  fsa_plan_create(&plan, g_ctx, (const fsa_selected_attention_desc *)(void *)buf));
    size_t old_ws = 0, ws = 0;
    assert_int_equal(fsa_plan_workspace_size(&old_ws, plan, 1000, 1), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size(&ws, g_auto, 1000, 1), FSA_STATUS_OK);
    assert_int_equal(old_ws, ws);
    fsa_plan_destroy(plan);

    memset(buf, 0, sizeof buf);
    memcpy(buf, &d, sizeof d);
    const size_t newer = sizeof d + 8;
    memcpy(buf, &newer, sizeof newer);
    plan = (fsa_plan *)buf; /* must be overwritten */
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE,
                  fsa_plan_create(&plan, g_ctx, (const fsa_selected_attention_desc *)(void *)buf));
    assert_null(plan);
}

/* The plan choice is written back: a size ending inside one of its appended fields (splits, reserved) is
 * refused with nothing written, before the other arguments are looked at (an unknown operation, a negative
 * token count); the first version's size gets its fields. */
typedef struct choice_query {
    fsa_operation operation;
    int64_t tokens;
} choice_query;

static fsa_status choice_of(fsa_plan_choice *out, const void *query)
{
    const choice_query *q = query;
    return fsa_plan_choice_get(out, g_auto, q->operation, q->tokens);
}

static void test_a_plan_choice_ending_inside_splits_is_refused_and_left_unwritten(void **state)
{
    (void)state;
    const choice_query good = {FSA_OPERATION_FORWARD, 1000}, bad_operation = {(fsa_operation)7, 1000},
                       bad_tokens = {FSA_OPERATION_FORWARD, -1};
    fsa_test_plan_choice_sizes(choice_of, &good);
    /* The size first: the other arguments' errors come after it. */
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    c.struct_size = offsetof(fsa_plan_choice, reserved) + 2;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, choice_of(&c, &bad_operation));
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, choice_of(&c, &bad_tokens));
    c.struct_size = sizeof c;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, choice_of(&c, &bad_operation));
}

/* Batch against tokens at one token too: one token in no sequence would
 * leave o unwritten, in two sequences one of them would be empty. */
static void test_one_token_in_no_sequence_or_in_two_is_refused(void **state)
{
    (void)state;
    fsa_fwd_args a = good_fwd(g_auto, 1);
    a.batch = 0;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    a.batch = 2;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_auto, &a);
    size_t ws = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_workspace_size(&ws, g_auto, 1, 0));
}

/* The overlap rule at its edges: a dq_add one token on from a two-token dq
 * overlaps it (its kernels would read rows being written); a one-token dq_add
 * is dq itself whatever its token stride (frameworks leave any stride on a
 * dimension of one). */
static void test_dq_add_one_token_on_overlaps_and_one_tokens_stride_is_never_used(void **state)
{
    (void)state;
    fsa_bwd_args b = good_bwd(g_bwd, 2);
    b.dq_add = b.dq, b.dq_add.ptr += 2 * HQ * D; /* dq's second token */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_bwd, &b);
    assert_non_null(strstr(fsa_last_error(), "dq_add overlaps dq"));
    b = good_bwd(g_bwd, 1);
    b.dq_add = b.dq, b.dq_add.token_stride = 1000 * D;
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_bwd, &b);
}

/* With a value head dim twice the key's, o's rows are value_dim long: heads
 * one key row apart overlap. */
static void test_forward_o_rows_are_value_dim_long(void **state)
{
    (void)state;
    fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_AUTO, 0, 0);
    d.value_dim = 2 * D;
    fsa_plan *plan = plan_of(&d);
    assert_non_null(plan);
    fsa_fwd_args a = good_fwd(plan, 100);
    a.v = (fsa_tensor){a.v.ptr, HKV * 2 * D, 2 * D};
    a.o = (fsa_tensor){a.o.ptr, HQ * 2 * D, 2 * D};
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, plan, &a);
    a.o.head_stride = D;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, plan, &a);
    fsa_plan_destroy(plan);
}

/* With tuning on and no record, a call may measure only on a device: an offline plan's choice says it will not
 * (its calls return FSA_STATUS_NO_DEVICE; fsa_plan_tune too). */
static void test_an_offline_plan_with_tuning_on_will_not_measure(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_90a";
    o.cache_dir = fsa_context_cache_dir(g_ctx); /* the fixture's: its kernels are there */
    o.log = -1;
    o.tune = FSA_TUNE_ON;
    fsa_context *ctx = NULL;
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
    fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_AUTO, 0, 1);
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    for (int op = 0; op < 2; op++) {
        fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
        const fsa_operation operation = op ? FSA_OPERATION_BACKWARD : FSA_OPERATION_FORWARD;
        assert_int_equal(fsa_plan_choice_get(&c, plan, operation, 4096), FSA_STATUS_OK);
        assert_true(c.candidates > 1); /* a choice that a device would measure */
        assert_int_equal(c.will_measure, 0);
        int measured = 1;
        assert_int_equal(fsa_plan_tune(&measured, plan, operation, 4096), FSA_STATUS_NO_DEVICE);
        assert_int_equal(measured, 0);
    }
    fsa_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_negative_strides_are_invalid_arguments_and_unaligned_ones_misaligned),
        cmocka_unit_test(test_backward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_argument_structs_take_every_size_from_the_first_version_to_the_current_one),
        cmocka_unit_test(test_an_older_shorter_descriptor_makes_the_same_plan),
        cmocka_unit_test(test_a_plan_choice_ending_inside_splits_is_refused_and_left_unwritten),
        cmocka_unit_test(test_written_views_whose_rows_overlap_are_refused),
        cmocka_unit_test(test_dq_add_is_dq_itself_or_memory_of_its_own),
        cmocka_unit_test(test_one_token_in_no_sequence_or_in_two_is_refused),
        cmocka_unit_test(test_dq_add_one_token_on_overlaps_and_one_tokens_stride_is_never_used),
        cmocka_unit_test(test_forward_o_rows_are_value_dim_long),
        cmocka_unit_test(test_an_offline_plan_with_tuning_on_will_not_measure),
    };
    return cmocka_run_group_tests(tests, attention_arguments_setup, attention_arguments_teardown);
}
