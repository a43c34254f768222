/* Sliding-window plans and calls (forward, backward, the workspace query)
 * answer bad descriptors and arguments with their documented status, on an
 * offline sm_90a plan (no GPU needed); a call whose arguments pass every
 * check ends with FSA_STATUS_NO_DEVICE. */
#include "api_validation_fixture.h"

#include "attention/window.h" /* fsa_qt_grid_tiles */
#include "base/struct_size.h"
#include "jit/context.h" /* sm_count: a device's grid, offline */

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HQ 4
#define HKV 2
#define DK 64
#define DV 32

static char *g_dir;
static fsa_context *g_ctx;
static fsa_window_plan *g_plan;    /* with backward */
static fsa_window_plan *g_fwd_only; /* without */

static fsa_window_attention_desc small_desc(void)
{
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.head_dim = DK;
    d.value_dim = DV;
    d.num_q_heads = HQ;
    d.num_kv_heads = HKV;
    d.window = 64;
    d.backward = 1;
    return d;
}

/* An offline sm_90a context over the test's cache directory; check: check mode. */
static fsa_context *offline(int check)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_90a";
    o.cache_dir = g_dir;
    o.log = -1;
    o.check = check ? 1 : -1;
    fsa_context *ctx = NULL;
    return fsa_context_create(&ctx, &o) == FSA_STATUS_OK ? ctx : NULL;
}

static int group_setup(void **state)
{
    (void)state;
    g_dir = fsa_test_mkdtemp("fsa_window_arguments");
    if (g_dir == NULL || (g_ctx = offline(0)) == NULL) return -1;
    fsa_window_attention_desc d = small_desc();
    if (fsa_window_plan_create(&g_plan, g_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    d.backward = 0;
    if (fsa_window_plan_create(&g_fwd_only, g_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "forward-only plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fsa_window_plan_destroy(g_plan);
    fsa_window_plan_destroy(g_fwd_only);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static fsa_status create_with(fsa_window_attention_desc d)
{
    fsa_window_plan *plan = NULL;
    const fsa_status st = fsa_window_plan_create(&plan, g_ctx, &d);
    if (st != FSA_STATUS_OK) assert_null(plan);
    fsa_window_plan_destroy(plan);
    return st;
}

static void test_descriptors_outside_the_supported_shapes_are_refused(void **state)
{
    (void)state;
    fsa_window_attention_desc d = small_desc();
    fsa_window_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_plan_create(&plan, g_ctx, NULL));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_plan_create(NULL, g_ctx, &d));
    d.struct_size = 3;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, create_with(d));
    d = small_desc(), d.window = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.value_dim = 24;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.num_q_heads = 34, d.num_kv_heads = 2;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.num_q_heads = 3;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.scale = -2.0f;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.value_dim = 0; /* = head_dim */
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
    d = small_desc(), d.backward = 2;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.dtype = (fsa_dtype)7;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "dtype 7"));
    d = small_desc(), d.num_q_heads = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.num_q_heads = d.num_kv_heads = 65536; /* a grid row per KV head: 65535 at most */
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    const float scales[] = {NAN, INFINITY};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        d = small_desc(), d.scale = scales[i];
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    }
}

/* The ends of each range pass every check and stop where the first kernel
 * would be compiled: head and value dims of 16, 65535 KV heads, a group of
 * 16, and per-head windows for FSA_WINDOW_MAX_HEAD_WINDOWS query heads. */
static void test_the_ends_of_each_descriptor_range_pass_every_check(void **state)
{
    (void)state;
    int32_t windows[FSA_WINDOW_MAX_HEAD_WINDOWS];
    for (int i = 0; i < FSA_WINDOW_MAX_HEAD_WINDOWS; i++) windows[i] = 1 + i;
    fsa_window_attention_desc ends[4];
    for (int i = 0; i < 4; i++) ends[i] = small_desc();
    ends[0].head_dim = ends[0].value_dim = 16;
    ends[1].num_q_heads = ends[1].num_kv_heads = 65535;
    ends[2].num_q_heads = 32, ends[2].num_kv_heads = 2;
    ends[3].num_q_heads = FSA_WINDOW_MAX_HEAD_WINDOWS, ends[3].num_kv_heads = FSA_WINDOW_MAX_HEAD_WINDOWS / 16;
    ends[3].head_windows = windows;
    fsa_context *ctx = checks_only_context("sm_90a");
    for (int i = 0; i < 4; i++) {
        fsa_window_plan *plan = NULL;
        const fsa_status st = fsa_window_plan_create(&plan, ctx, &ends[i]);
        if (st != FSA_STATUS_JIT_DISABLED) fail_msg("end %d: %s, %s", i, fsa_status_name(st), fsa_last_error());
        assert_null(plan);
    }
    fsa_context_destroy(ctx);
}

static void test_per_head_windows_must_each_be_positive_and_fit_the_table(void **state)
{
    (void)state;
    enum { MORE = FSA_WINDOW_MAX_HEAD_WINDOWS + 8 };
    int32_t windows[MORE];
    for (int i = 0; i < MORE; i++) windows[i] = 1 + i;
    fsa_window_attention_desc d = small_desc();
    d.head_windows = windows;
    d.window = 0; /* ignored when every head has its own */
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
    windows[HQ - 1] = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "head_windows[3]"));
    windows[HQ - 1] = -5;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    windows[HQ - 1] = HQ;
    d.num_q_heads = MORE, d.num_kv_heads = MORE / 8; /* every window valid, but one table too many */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d.head_windows = NULL, d.window = 7; /* one window: any number of heads */
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
}

static void test_a_descriptor_of_the_first_version_is_accepted_without_backward(void **state)
{
    (void)state;
    fsa_window_attention_desc d = small_desc();
    d.struct_size = FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE;
    fsa_window_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_create(&plan, g_ctx, &d));
    size_t bytes = 1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_window_plan_workspace_size_bwd(&bytes, plan, 100, 1));
    assert_int_equal(bytes, 0);
    fsa_window_plan_destroy(plan);
}

/* A struct_size that ends inside head_windows would leave only the pointer's
 * low bytes, an address the caller never passed, and the plan read windows
 * through it (found by tests/fuzz/fuzz_desc: a crash). Refused whole;
 * sizes at either end of the field still read as versions. */
static void test_a_struct_size_ending_inside_head_windows_is_refused(void **state)
{
    (void)state;
    int32_t windows[HQ] = {8, 16, 32, 64};
    const size_t at = offsetof(fsa_window_attention_desc, head_windows);
    fsa_window_attention_desc d = small_desc();
    d.head_windows = windows;
    for (size_t n = at + 1; n < at + sizeof d.head_windows; n++) {
        d.struct_size = n;
        EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, create_with(d));
        assert_non_null(strstr(fsa_last_error_info()->message, "head_windows"));
    }
    d.struct_size = at; /* head_windows and backward read as zero: one window for every head */
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
    d.struct_size = at + sizeof d.head_windows;
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
}

/* Aligned device addresses that are never dereferenced: offline calls stop before the device. */
#define AT(n) (0x7f0000000000ull + ((uint64_t)(n) << 20))
static const fsa_tensor t_q = {AT(1), HQ * DK, DK}, t_k = {AT(2), HKV * DK, DK}, t_v = {AT(3), HKV * DV, DV},
                        t_o = {AT(4), HQ * DV, DV};

static fsa_window_fwd_args good_args(int64_t T)
{
    fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
    a.total_tokens = T, a.batch = 1, a.cu_seqlens = AT(5);
    a.q = t_q, a.k = t_k, a.v = t_v, a.o = t_o;
    return a;
}

#define EXPECT_FWD(want, args) EXPECT_STATUS(want, fsa_window_attention_fwd(g_plan, (args), NULL))

static void test_forward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    fsa_window_fwd_args a = good_args(100);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, &a);
    a.lse = AT(6);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, &a);
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_attention_fwd(NULL, &a, NULL));
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, NULL);
    a.struct_size = FSA_WINDOW_FWD_ARGS_FIRST_SIZE - 8;
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, &a);
    a = good_args(100), a.lse = 2;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, &a);
    a = good_args(100), a.lse = 0x7ffffffffffffff0ull; /* its [Hq, T] floats would pass 2^63 bytes */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_args(100), a.total_tokens = 0, a.batch = 3; /* no tokens: the count of sequences is not read */
    EXPECT_FWD(FSA_STATUS_OK, &a);
    a.q.ptr = a.k.ptr = a.v.ptr = a.o.ptr = 0, a.cu_seqlens = a.lse = 0; /* nor any tensor (window.h) */
    EXPECT_FWD(FSA_STATUS_OK, &a);
    a = good_args(100), a.cu_seqlens = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, &a);
    a = good_args(100), a.batch = 0;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_args(100), a.v.token_stride = -HKV * DV;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_args(100), a.k.ptr += 4;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, &a);
    a = good_args(0), a.batch = 0;
    EXPECT_FWD(FSA_STATUS_OK, &a);
}

/* lse holds Hq x T floats: the last one just below 2^63 bytes is fine, one
 * float further is refused. */
static void test_lses_last_float_must_lie_below_two_to_the_63_bytes(void **state)
{
    (void)state;
    fsa_window_fwd_args a = good_args(100);
    a.lse = (UINT64_C(1) << 63) - 4 * HQ * 100;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, &a);
    a.lse += 4;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    assert_non_null(strstr(fsa_last_error(), "lse"));
}

/* The persistent forward (sm_90a) counts a CTA's ring items in int: a call whose busiest CTA would pass
 * 2^31 key stages (a window as long as 83 million tokens, one head) is refused, not left to hang. */
static void test_a_forward_whose_persistent_ctas_pass_int32_stages_is_refused(void **state)
{
    (void)state;
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.num_q_heads = 1, d.num_kv_heads = 1, d.head_dim = 128, d.value_dim = 128, d.window = INT32_MAX;
    fsa_window_plan *plan = NULL;
    assert_int_equal(fsa_window_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
    a.total_tokens = 83452992, a.batch = 1;
    a.q = (fsa_tensor){(uint64_t)1 << 40, 128, 128};
    a.k = (fsa_tensor){(uint64_t)2 << 40, 128, 128};
    a.v = (fsa_tensor){(uint64_t)3 << 40, 128, 128};
    a.o = (fsa_tensor){(uint64_t)4 << 40, 128, 128};
    a.cu_seqlens = (uint64_t)5 << 40;
    /* Offline there is no grid to size (the call cannot launch): the device's check decides. */
    assert_int_equal(fsa_window_attention_fwd(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    /* With an H100's 132 SMs, the busiest CTA passes 2^31 stages. */
    g_ctx->sm_count = 132;
    assert_int_equal(fsa_window_attention_fwd(plan, &a, NULL), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("window-forward", "32-bit count of its ring");
    a.total_tokens = 8192; /* a short call of the same plan passes every check */
    assert_int_equal(fsa_window_attention_fwd(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    fsa_window_plan_destroy(plan);
    /* The same through per-head windows (2 query heads of one KV head: the widest of them counts). */
    const int32_t windows[2] = {64, INT32_MAX};
    d.num_q_heads = 2, d.window = 0, d.head_windows = windows;
    assert_int_equal(fsa_window_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    a.total_tokens = 83452992;
    a.q.token_stride = a.o.token_stride = 256;
    assert_int_equal(fsa_window_attention_fwd(plan, &a, NULL), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("window-forward", "32-bit count of its ring");
    fsa_window_plan_destroy(plan);
    g_ctx->sm_count = 0; /* offline again */
}

/* A plan of a check-mode context also brings the offsets check kernel (plain
 * plans never compile it); its calls still check every argument on the host
 * first, and then need the device. */
static void test_a_check_mode_plan_brings_the_offsets_check_and_its_calls_still_need_a_device(void **state)
{
    (void)state;
    assert_int_equal(fsa_test_cache_count(g_ctx, "offsets_check"), 0);
    fsa_context *ctx = offline(1);
    assert_non_null(ctx);
    const fsa_window_attention_desc d = small_desc();
    fsa_window_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_create(&plan, ctx, &d));
    assert_int_equal(fsa_test_cache_count(ctx, "offsets_check"), 1);
    fsa_window_fwd_args a = good_args(100);
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_window_attention_fwd(plan, &a, NULL));
    a.cu_seqlens = 0;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_attention_fwd(plan, &a, NULL));
    fsa_window_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static fsa_window_bwd_args good_bwd_args(int64_t T, uint64_t workspace, size_t workspace_bytes)
{
    fsa_window_bwd_args a = FSA_WINDOW_BWD_ARGS_INIT;
    a.total_tokens = T, a.batch = 1, a.cu_seqlens = AT(5), a.lse = AT(6);
    a.q = t_q, a.k = t_k, a.v = t_v, a.o = t_o;
    a.dout = (fsa_tensor){AT(7), t_o.token_stride, DV};
    a.dq = (fsa_tensor){AT(8), t_q.token_stride, DK};
    a.dk = (fsa_tensor){AT(9), t_k.token_stride, DK};
    a.dv = (fsa_tensor){AT(10), t_v.token_stride, DV};
    a.workspace = workspace, a.workspace_bytes = workspace_bytes;
    return a;
}

#define EXPECT_BWD(want, args) EXPECT_STATUS(want, fsa_window_attention_bwd(g_plan, (args), NULL))

static void test_the_backward_workspace_is_two_rows_of_four_bytes_per_query_row_rounded_up(void **state)
{
    (void)state;
    size_t bytes = 1;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, 100, 3));
    assert_int_equal(bytes, 2 * ((HQ * 100 * 4 + 255) / 256 * 256)); /* delta, then a gated call's lse */
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, 0, 0));
    assert_int_equal(bytes, 0);
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_plan_workspace_size_bwd(NULL, g_plan, 100, 1));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_plan_workspace_size_bwd(&bytes, NULL, 100, 1));
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, 100, 0));
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, -1, 1));
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_window_plan_workspace_size_bwd(&bytes, g_fwd_only, 100, 1));
    /* Counts whose tiles no grid holds: the query refuses what the call would. */
    const int64_t many = INT32_MAX - 1;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, many, (int)many));
    assert_int_equal(bytes, 0);
    fsa_window_bwd_args a = good_bwd_args(many, AT(11), SIZE_MAX);
    a.batch = (int)many;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_window_attention_bwd(g_plan, &a, NULL));
    /* Exactly 2^31 - 1 query tiles still fit a grid. */
    const int exact = (int)(INT32_MAX - fsa_qt_grid_tiles(many, 0, HQ / HKV));
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, many, exact));
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_window_plan_workspace_size_bwd(&bytes, g_plan, many, exact + 1));
}

static void test_backward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    size_t need = 0;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_workspace_size_bwd(&need, g_plan, 100, 1));
    const uint64_t ws = AT(11);
    fsa_window_bwd_args a = good_bwd_args(100, ws, need);
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, &a);
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_window_attention_bwd(g_fwd_only, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "without backward"));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_attention_bwd(NULL, &a, NULL));
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, NULL);
    a.struct_size = FSA_WINDOW_BWD_ARGS_FIRST_SIZE - 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, &a);
    /* A size ending inside an appended field is refused first, whatever else the call holds. */
    a = good_bwd_args(100, ws, need), a.struct_size = offsetof(fsa_window_bwd_args, dq_add) + 4;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, &a);
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, fsa_window_attention_bwd(g_fwd_only, &a, NULL));
    a = good_bwd_args(100, ws, need), a.lse = 0; /* the backward needs the forward's lse */
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, &a);
    a = good_bwd_args(100, ws, need), a.lse += 2;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, &a);
    a = good_bwd_args(100, ws, need), a.cu_seqlens = 0;
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, &a);
    a = good_bwd_args(100, ws, need), a.batch = 101;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_bwd_args(100, ws, need), a.dout.ptr = 0;
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, &a);
    a = good_bwd_args(100, ws, need), a.dq.ptr += 8;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, &a);
    a = good_bwd_args(100, ws, need), a.dk.head_stride = DK + 4;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, &a);
    a = good_bwd_args(100, ws, need), a.dv.token_stride = -1;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_bwd_args(100, ws, need - 1);
    EXPECT_BWD(FSA_STATUS_WORKSPACE_TOO_SMALL, &a);
    a = good_bwd_args(100, 0, need);
    EXPECT_BWD(FSA_STATUS_WORKSPACE_TOO_SMALL, &a);
    a = good_bwd_args(100, ws + 128, need);
    EXPECT_BWD(FSA_STATUS_MISALIGNED, &a);
    a = good_bwd_args(0, 0, 0), a.batch = 0; /* nothing to do */
    EXPECT_BWD(FSA_STATUS_OK, &a);
}

/* dq_add (appended after the first version): dq itself is accepted, a
 * misaligned or negatively strided one refused, a struct_size ending inside
 * it refused, and a first-version struct ignores whatever lies past it. */
static fsa_window_bwd_args good_bwd_args_of_100_tokens(void)
{
    size_t need = 0;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_window_plan_workspace_size_bwd(&need, g_plan, 100, 1));
    return good_bwd_args(100, AT(11), need);
}

static void test_dq_add_takes_dq_rules_and_a_first_version_struct_has_none(void **state)
{
    (void)state;
    fsa_window_bwd_args a = good_bwd_args_of_100_tokens();
    a.dq_add = a.dq; /* in place */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, &a);
    a.dq_add.ptr += 8;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, &a);
    assert_non_null(strstr(fsa_last_error(), "dq_add"));
    a = good_bwd_args_of_100_tokens(), a.dq_add = a.dq, a.dq_add.head_stride = -DK;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_bwd_args_of_100_tokens(), a.dq_add = a.dq, a.dq_add.ptr += 2 * DK; /* dq one head on */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    assert_non_null(strstr(fsa_last_error(), "dq_add overlaps dq"));
    a = good_bwd_args_of_100_tokens(), a.dq_add = a.dq, a.dq_add.ptr = AT(12); /* memory of its own */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, &a);
    a = good_bwd_args_of_100_tokens(), a.struct_size = offsetof(fsa_window_bwd_args, dq_add) + 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, &a);
    a = good_bwd_args_of_100_tokens(), a.struct_size = FSA_WINDOW_BWD_ARGS_FIRST_SIZE;
    a.dq_add = (fsa_tensor){AT(12) + 2, -1, 3}; /* garbage a first-version caller never wrote */
    assert_true(offsetof(fsa_window_bwd_args, dq_add) >= FSA_WINDOW_BWD_ARGS_FIRST_SIZE);
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, &a);
}

/* gate and gate_grad (appended): float32 [T, Hq] views; a gate may repeat
 * a value through a stride of 0, the written gate_grad may not; misaligned,
 * negatively strided or cut by struct_size: refused, naming the field. */
static void test_the_gate_and_its_gradient_are_float_views_and_the_gradient_has_its_own_rows(void **state)
{
    (void)state;
    fsa_window_bwd_args a = good_bwd_args_of_100_tokens();
    a.gate = (fsa_tensor){AT(12), 0, 1}; /* one gate per head for every token */
    a.gate_grad = (fsa_tensor){AT(13), HQ, 1};
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, &a);
    a.gate.ptr += 2;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, &a);
    assert_non_null(strstr(fsa_last_error(), "gate"));
    a.gate.ptr -= 2, a.gate.head_stride = -1;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_bwd_args_of_100_tokens(), a.gate_grad = (fsa_tensor){AT(13), 0, 1};
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    assert_non_null(strstr(fsa_last_error(), "gate_grad"));
    a = good_bwd_args_of_100_tokens(), a.struct_size = offsetof(fsa_window_bwd_args, gate_grad) + 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, &a);
}

/* The views a call writes (o; dq, dk, dv and gate_grad) must not give two
 * rows the same bytes: refused on the host, naming the view; views that only
 * read (q, dout, a gate) may repeat rows. */
static void test_written_views_whose_rows_overlap_are_refused(void **state)
{
    (void)state;
    fsa_window_fwd_args f = good_args(100);
    f.o.head_stride = DV / 2; /* each head's row half over the next one's */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &f);
    assert_non_null(strstr(fsa_last_error(), "o is written"));
    f = good_args(100), f.q.token_stride = 0; /* one query row for every token: read only */
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, &f);
    fsa_window_bwd_args b = good_bwd_args_of_100_tokens();
    b.dv.token_stride = 0;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &b);
    assert_non_null(strstr(fsa_last_error(), "dv is written"));
    b = good_bwd_args_of_100_tokens(), b.dq.token_stride = DK; /* token t's heads 1.. are token t + 1's */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &b);
    assert_non_null(strstr(fsa_last_error(), "dq is written"));
    b = good_bwd_args_of_100_tokens(), b.gate_grad = (fsa_tensor){AT(13), 1, 1};
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, &b);
    assert_non_null(strstr(fsa_last_error(), "gate_grad is written"));
    b = good_bwd_args_of_100_tokens(), b.gate_grad = (fsa_tensor){AT(13), 1, 100}; /* [Hq, T]: its own rows */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, &b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptors_outside_the_supported_shapes_are_refused),
        cmocka_unit_test(test_the_ends_of_each_descriptor_range_pass_every_check),
        cmocka_unit_test(test_forward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_lses_last_float_must_lie_below_two_to_the_63_bytes),
        cmocka_unit_test(test_a_forward_whose_persistent_ctas_pass_int32_stages_is_refused),
        cmocka_unit_test(test_a_check_mode_plan_brings_the_offsets_check_and_its_calls_still_need_a_device),
        cmocka_unit_test(test_per_head_windows_must_each_be_positive_and_fit_the_table),
        cmocka_unit_test(test_a_descriptor_of_the_first_version_is_accepted_without_backward),
        cmocka_unit_test(test_a_struct_size_ending_inside_head_windows_is_refused),
        cmocka_unit_test(test_the_backward_workspace_is_two_rows_of_four_bytes_per_query_row_rounded_up),
        cmocka_unit_test(test_backward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_dq_add_takes_dq_rules_and_a_first_version_struct_has_none),
        cmocka_unit_test(test_the_gate_and_its_gradient_are_float_views_and_the_gradient_has_its_own_rows),
        cmocka_unit_test(test_written_views_whose_rows_overlap_are_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
