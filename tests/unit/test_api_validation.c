/* The public API's answers to bad arguments, on a machine without a GPU:
 * every failing call returns its documented status and leaves a matching,
 * non-empty error record. Plan descriptors are checked on an offline sm_90a
 * context; each case fails before anything is compiled. */
#include "testing.h"

#include "base/struct_size.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs `call`, expects `want`, and checks that the thread's error record
 * agrees and says something. */
#define EXPECT_STATUS(want, call)                                                                 \
    do {                                                                                          \
        fsa_status st_ = (call);                                                                  \
        if (st_ != (want))                                                                        \
            fail_msg("%s returned %s, expected %s (%s)", #call, fsa_status_name(st_),             \
                     fsa_status_name(want), fsa_last_error());                                   \
        const fsa_error_info *e_ = fsa_last_error_info();                                         \
        assert_int_equal(e_->status, (want));                                                     \
        assert_non_null(e_->message);                                                             \
        if (e_->message[0] == '\0') fail_msg("%s: empty error message", #call);                  \
        assert_non_null(strstr(fsa_last_error(), fsa_status_name(want)));                        \
    } while (0)

/* An offline context that never touches the disk. */
static fsa_context *offline_context(const char *target)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    fsa_status st = fsa_context_create(&ctx, &o);
    if (st != FSA_STATUS_OK) fail_msg("offline context: %s", fsa_last_error());
    return ctx;
}

static int setup_offline(void **state)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_90a";
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) return -1;
    *state = ctx;
    return 0;
}

static int teardown_offline(void **state)
{
    fsa_context_destroy(*state);
    return 0;
}

/* ------------------------------------------------------------ contexts */

static void test_context_create_with_a_null_out_is_a_null_pointer(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_context_create(NULL, &o));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_context_create(NULL, NULL));
}

static void test_context_create_with_a_wrong_struct_size_is_struct_size(void **state)
{
    (void)state;
    const size_t sizes[] = {0, FSA_CONTEXT_OPTIONS_FIRST_SIZE - 1, sizeof(fsa_context_options) + 8, 4};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
        o.struct_size = sizes[i];
        o.device = FSA_DEVICE_NONE;
        o.target = "sm_80";
        fsa_context *ctx = (fsa_context *)&o; /* must be overwritten */
        EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, fsa_context_create(&ctx, &o));
        assert_null(ctx);
    }
}

static void test_context_options_of_the_first_version_are_read_without_what_follows_them(void **state)
{
    (void)state;
    /* A caller compiled against the first header: what lies after its
     * struct in memory (poisoned here) is not its own. */
    _Alignas(16) unsigned char mem[sizeof(fsa_context_options) + 64];
    memset(mem, 0xa5, sizeof mem);
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.struct_size = FSA_CONTEXT_OPTIONS_FIRST_SIZE;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_80";
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    memcpy(mem, &o, FSA_CONTEXT_OPTIONS_FIRST_SIZE);
    fsa_context *ctx = NULL;
    assert_int_equal(fsa_context_create(&ctx, (const fsa_context_options *)(void *)mem), FSA_STATUS_OK);
    assert_string_equal(fsa_context_target(ctx), "sm_80");
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fsa_context_destroy(ctx);
}

static void test_the_init_macros_set_struct_size_and_the_documented_defaults(void **state)
{
    (void)state;
    const fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    assert_int_equal(o.struct_size, sizeof o);
    assert_int_equal(o.device, 0);
    assert_null(o.target);
    assert_null(o.cache_dir);
    assert_int_equal(o.cache_mode, FSA_CACHE_MODE_DEFAULT);
    assert_int_equal(o.jit, FSA_JIT_DEFAULT);
    assert_int_equal(o.log, 0);
    const fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    assert_int_equal(d.struct_size, sizeof d);
    assert_int_equal(d.dtype, FSA_DTYPE_BF16);
    assert_int_equal(d.head_dim, 128);
    assert_int_equal(d.block_size, 64);
    assert_int_equal(d.top_k, 16);
    assert_int_equal(d.num_q_heads + d.num_kv_heads + d.backward, 0);
    assert_true(d.scale == 0.0f);
    assert_int_equal(d.algorithm, FSA_ALGORITHM_AUTO);
    assert_int_equal(d.workspace_limit, 0);
    assert_int_equal(d.value_dim, 0); /* = head_dim */
    /* Static storage works too (a constant initializer). */
    static const fsa_fwd_args f = FSA_FWD_ARGS_INIT;
    static const fsa_bwd_args b = FSA_BWD_ARGS_INIT;
    assert_int_equal(f.struct_size, sizeof f);
    assert_int_equal(b.struct_size, sizeof b);
    assert_int_equal(f.q.ptr + f.topk.ptr + (uint64_t)f.o.token_stride + f.workspace_bytes, 0);
    assert_int_equal(b.dv.ptr + (uint64_t)b.dq.head_stride + b.lse, 0);
}

static void test_an_offline_context_without_a_target_is_an_invalid_argument(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
}

static void expect_offline_context_status(fsa_status want, const char *target)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    EXPECT_STATUS(want, fsa_context_create(&ctx, &o));
    assert_null(ctx);
    assert_non_null(strstr(fsa_last_error_info()->message, target));
}

static void test_an_offline_context_for_an_unsupported_target_is_unsupported_device(void **state)
{
    (void)state;
    const char *unsupported[] = {"sm_75", "sm_70", "sm_88", "sm_80a"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        expect_offline_context_status(FSA_STATUS_UNSUPPORTED_DEVICE, unsupported[i]);
}

static void test_an_offline_context_for_a_malformed_target_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *malformed[] = {"sm_9x", "", "compute_90", "sm_80/../x"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
        expect_offline_context_status(FSA_STATUS_INVALID_ARGUMENT, malformed[i]);
}

static void test_an_offline_context_reports_its_target_and_no_cache_when_off(void **state)
{
    (void)state;
    fsa_context *ctx = offline_context("sm_86");
    assert_string_equal(fsa_context_target(ctx), "sm_86");
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fsa_context_destroy(ctx);
    /* NULL contexts give empty strings rather than crashing. */
    assert_string_equal(fsa_context_target(NULL), "");
    assert_string_equal(fsa_context_cache_dir(NULL), "");
}

static void test_a_device_context_without_a_driver_fails_with_no_driver_or_no_device(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT; /* device 0 */
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    fsa_status st = fsa_context_create(&ctx, &o);
    if (st == FSA_STATUS_OK) {
        /* A machine with a GPU: nothing to check here. */
        fsa_context_destroy(ctx);
        skip();
    }
    assert_null(ctx);
    if (st != FSA_STATUS_NO_DRIVER && st != FSA_STATUS_NO_DEVICE)
        fail_msg("device 0 gave %s: %s", fsa_status_name(st), fsa_last_error());
    assert_int_equal(fsa_last_error_info()->status, st);
    const char *text = fsa_last_error();
    assert_true(text[0] != '\0');
    if (strstr(text, "libcuda") == NULL && strstr(text, "device") == NULL)
        fail_msg("error does not mention libcuda or the device: %s", text);
    /* Asking again gives the same answer (the loader result is kept). */
    fsa_status again = fsa_context_create(&ctx, &o);
    assert_int_equal(again, st);
    assert_null(ctx);
}

static void test_a_negative_device_other_than_none_is_an_invalid_argument(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = -2;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
}

static fsa_status create_offline_with_env(const char *name, const char *value, fsa_cache_mode mode)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_80";
    o.cache_mode = mode;
    o.log = -1;
    fsa_context *ctx = NULL;
    char *saved = getenv(name) ? strdup(getenv(name)) : NULL;
    assert_int_equal(setenv(name, value, 1), 0);
    fsa_status st = fsa_context_create(&ctx, &o);
    if (saved) {
        setenv(name, saved, 1);
        free(saved);
    } else {
        unsetenv(name);
    }
    if (st != FSA_STATUS_OK) assert_null(ctx);
    fsa_context_destroy(ctx);
    return st;
}

static void test_a_bad_fsa_cache_mode_value_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *bad[] = {"readwrite", "1", "on", "r"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT,
                      create_offline_with_env("FSA_CACHE_MODE", bad[i], FSA_CACHE_MODE_DEFAULT));
        assert_non_null(strstr(fsa_last_error_info()->message, "FSA_CACHE_MODE"));
    }
    /* The accepted spellings work (off: nothing is touched on disk). */
    assert_int_equal(create_offline_with_env("FSA_CACHE_MODE", "OFF", FSA_CACHE_MODE_DEFAULT), FSA_STATUS_OK);
    /* An explicit option overrides the variable. */
    assert_int_equal(create_offline_with_env("FSA_CACHE_MODE", "bogus", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
}

static void test_a_bad_fsa_jit_value_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *bad[] = {"maybe", "2", "enabled"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_offline_with_env("FSA_JIT", bad[i], FSA_CACHE_MODE_OFF));
        assert_non_null(strstr(fsa_last_error_info()->message, "FSA_JIT"));
    }
    assert_int_equal(create_offline_with_env("FSA_JIT", "off", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
    assert_int_equal(create_offline_with_env("FSA_JIT", "1", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
}

static void test_unknown_cache_and_jit_mode_options_are_invalid_arguments(void **state)
{
    (void)state;
    fsa_context *ctx = NULL;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_80";
    o.log = -1;
    o.cache_mode = (fsa_cache_mode)7;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
    o.cache_mode = (fsa_cache_mode)-1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.jit = (fsa_jit_mode)3;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
}

static void test_destroying_null_is_fine(void **state)
{
    (void)state;
    fsa_context_destroy(NULL);
    fsa_plan_destroy(NULL);
    /* And the library still answers afterwards. */
    fsa_context *ctx = offline_context("sm_80");
    fsa_context_destroy(ctx);
}

static void test_cache_stats_checks_its_arguments(void **state)
{
    fsa_context *ctx = *state;
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    s.struct_size = FSA_CACHE_STATS_FIRST_SIZE - 8;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, fsa_context_cache_stats(&s, ctx));
    s.struct_size = 0;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, fsa_context_cache_stats(&s, ctx));
    s.struct_size = sizeof s + 8;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, fsa_context_cache_stats(&s, ctx));
    s.struct_size = sizeof s;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_context_cache_stats(NULL, ctx));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_context_cache_stats(&s, NULL));
    /* A fresh context has counted nothing. */
    assert_int_equal(fsa_context_cache_stats(&s, ctx), FSA_STATUS_OK);
    assert_int_equal(s.compiles + s.memory_hits + s.disk_hits + s.corrupt_entries + s.write_failures, 0);
}

static void test_cache_stats_of_the_first_version_are_written_without_what_follows_them(void **state)
{
    fsa_context *ctx = *state;
    _Alignas(16) unsigned char mem[sizeof(fsa_cache_stats) + 64];
    memset(mem, 0xa5, sizeof mem);
    const size_t first = FSA_CACHE_STATS_FIRST_SIZE;
    memcpy(mem, &first, sizeof first);
    assert_int_equal(fsa_context_cache_stats((fsa_cache_stats *)(void *)mem, ctx), FSA_STATUS_OK);
    fsa_cache_stats s;
    memcpy(&s, mem, sizeof s);
    assert_int_equal(s.struct_size, first);
    assert_int_equal(s.compiles + s.memory_hits + s.disk_hits, 0); /* written: a fresh context counted nothing */
    for (size_t i = first; i < sizeof mem; i++) assert_int_equal(mem[i], 0xa5);
}

static int count_visit(const fsa_cache_entry_info *e, void *user)
{
    (void)e;
    ++*(int *)user;
    return 0;
}

static void test_cache_maintenance_without_a_disk_cache_is_cache_io(void **state)
{
    fsa_context *ctx = *state; /* cache off */
    int n = 0;
    uint64_t bad = 7, removed = 7, left = 7;
    EXPECT_STATUS(FSA_STATUS_CACHE_IO, fsa_cache_list(ctx, count_visit, &n));
    EXPECT_STATUS(FSA_STATUS_CACHE_IO, fsa_cache_verify(ctx, count_visit, &n, &bad));
    EXPECT_STATUS(FSA_STATUS_CACHE_IO, fsa_cache_prune(ctx, 0, &removed, &left));
    assert_int_equal(n, 0);
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_cache_list(NULL, count_visit, &n));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_cache_verify(NULL, NULL, NULL, &bad));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_cache_prune(NULL, 0, NULL, NULL));
}

/* ------------------------------------------------------------ fill */

static void test_fill_on_an_offline_context_is_no_device(void **state)
{
    fsa_context *ctx = *state;
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_fill_u32(ctx, 0x10000, 1u, 64, NULL));
    /* Even a zero-length fill: the context cannot run anything. */
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_fill_u32(ctx, 0x10000, 1u, 0, NULL));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_fill_u32(NULL, 0x10000, 1u, 64, NULL));
    /* Nothing was compiled for it. */
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    assert_int_equal(fsa_context_cache_stats(&s, ctx), FSA_STATUS_OK);
    assert_int_equal(s.compiles, 0);
}

/* ------------------------------------------------------------ plan descriptors */

static fsa_selected_attention_desc good_desc(void)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.head_dim = 64;
    d.num_q_heads = 4;
    d.num_kv_heads = 1;
    d.block_size = 64;
    d.top_k = 4;
    return d;
}

/* plan_create must fail with `want`, hand out NULL and compile nothing. */
static void expect_plan_status(fsa_context *ctx, const fsa_selected_attention_desc *d, fsa_status want,
                               const char *what)
{
    fsa_plan *plan = (fsa_plan *)ctx; /* must be overwritten */
    fsa_status st = fsa_plan_create(&plan, ctx, d);
    if (st != want)
        fail_msg("%s: plan_create returned %s, expected %s (%s)", what, fsa_status_name(st), fsa_status_name(want),
                 fsa_last_error());
    assert_null(plan);
    assert_int_equal(fsa_last_error_info()->status, want);
    if (fsa_last_error_info()->message[0] == '\0') fail_msg("%s: empty message", what);
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    assert_int_equal(fsa_context_cache_stats(&s, ctx), FSA_STATUS_OK);
    assert_int_equal(s.compiles + s.memory_hits + s.disk_hits, 0);
}

static void test_plan_create_with_null_arguments_is_a_null_pointer(void **state)
{
    fsa_context *ctx = *state;
    fsa_selected_attention_desc d = good_desc();
    fsa_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_create(&plan, ctx, NULL));
    assert_null(plan);
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_create(&plan, NULL, &d));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_create(NULL, ctx, &d));
}

static void test_plan_create_with_a_wrong_struct_size_is_struct_size(void **state)
{
    fsa_selected_attention_desc d = good_desc();
    d.struct_size = FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE - 4;
    expect_plan_status(*state, &d, FSA_STATUS_STRUCT_SIZE, "first size - 4");
    d.struct_size = 0;
    expect_plan_status(*state, &d, FSA_STATUS_STRUCT_SIZE, "struct_size 0");
    /* A descriptor from a newer header than the library's. */
    _Alignas(16) unsigned char mem[sizeof d + 16];
    memset(mem, 0, sizeof mem);
    d = good_desc();
    memcpy(mem, &d, sizeof d);
    const size_t newer = sizeof d + 16;
    memcpy(mem, &newer, sizeof newer);
    expect_plan_status(*state, (const fsa_selected_attention_desc *)(void *)mem, FSA_STATUS_STRUCT_SIZE,
                       "newer struct");
}

static void test_an_unsupported_head_dim_is_unsupported(void **state)
{
    const int dims[] = {0, 100, 272, 8, -16, 264, 257};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.head_dim = dims[i];
        char what[32];
        snprintf(what, sizeof what, "head_dim %d", dims[i]);
        expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, what);
        assert_non_null(strstr(fsa_last_error_info()->message, "head_dim"));
    }
}

static void test_a_value_dim_that_is_not_0_or_a_multiple_of_16_up_to_256_is_unsupported(void **state)
{
    const int64_t dims[] = {8, 100, 272, -16, 264, 257, (int64_t)1 << 32};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.value_dim = dims[i];
        char what[48];
        snprintf(what, sizeof what, "value_dim %lld", (long long)dims[i]);
        expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, what);
        assert_non_null(strstr(fsa_last_error_info()->message, "value_dim"));
    }
}

static void test_a_backward_with_dims_over_320_together_needs_both_dims_to_be_multiples_of_32(void **state)
{
    /* Heads too wide for one pass run the backward's main kernel twice, each
     * launch on half of the dK and half of the dV columns, in 16-column steps. */
    const int dims[][2] = {{192, 144}, {144, 192}, {80, 256}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.head_dim = dims[i][0];
        d.value_dim = dims[i][1];
        d.backward = 1;
        char what[48];
        snprintf(what, sizeof what, "backward with Dk %d Dv %d", dims[i][0], dims[i][1]);
        expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, what);
        assert_non_null(strstr(fsa_last_error_info()->message, "multiples of 32"));
    }
}

/* The paged-cache kernel at Dk = Dv = 256 with a group of 16 keeps more query
 * rows and stages than sm_80's shared memory holds: its plan says so instead
 * of failing a launch. A descriptor of the first version (no value_dim) reads
 * it as head_dim. */
static void test_a_paged_cache_shape_over_the_targets_shared_memory_is_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = offline_context("sm_80");
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.num_q_heads = 32, d.num_kv_heads = 2, d.max_batch = 8, d.max_query_tokens = 64;
    d.head_dim = 256;
    d.value_dim = 256;
    fsa_kvcache_plan *plan = (fsa_kvcache_plan *)&plan;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "shared memory"));
    d.value_dim = 0;
    _Alignas(16) unsigned char buf[sizeof d + 16];
    memset(buf, 0xa5, sizeof buf); /* what lies past an older caller's struct is not its */
    const size_t first = offsetof(fsa_kvcache_desc, value_dim);
    memcpy(buf, &d, first);
    memcpy(buf, &first, sizeof first);
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, (const fsa_kvcache_desc *)(void *)buf));
    assert_non_null(strstr(fsa_last_error(), "value_dim 256"));
    d.head_dim = 64;
    const int bad[] = {8, 24, 272, -16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d.value_dim = bad[i];
        EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, &d));
        assert_non_null(strstr(fsa_last_error(), "value_dim"));
    }
    fsa_context_destroy(ctx);
}

static void test_bad_head_counts_are_invalid_arguments(void **state)
{
    const int heads[][2] = {{6, 4}, {3, 2}, {0, 1}, {4, 0}, {0, 0}, {-4, 1}, {4, -1}, {1, 2}};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.num_q_heads = heads[i][0];
        d.num_kv_heads = heads[i][1];
        char what[48];
        snprintf(what, sizeof what, "Hq %d, Hkv %d", heads[i][0], heads[i][1]);
        expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, what);
    }
}

static void test_a_group_larger_than_128_is_unsupported(void **state)
{
    fsa_selected_attention_desc d = good_desc();
    d.num_q_heads = 129 * 2;
    d.num_kv_heads = 2;
    expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, "group 129");
}

static void test_an_unsupported_block_size_is_unsupported(void **state)
{
    const int sizes[] = {48, 8, 0, 512, -64, 96};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.block_size = sizes[i];
        char what[32];
        snprintf(what, sizeof what, "block_size %d", sizes[i]);
        expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, what);
    }
}

static void test_an_unsupported_top_k_is_unsupported(void **state)
{
    const int ks[] = {0, 65, -1, 1000};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.top_k = ks[i];
        char what[32];
        snprintf(what, sizeof what, "top_k %d", ks[i]);
        expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, what);
    }
}

static void test_a_nan_negative_or_infinite_scale_is_an_invalid_argument(void **state)
{
    const float scales[] = {NAN, -1.0f, -0.0001f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.scale = scales[i];
        char what[32];
        snprintf(what, sizeof what, "scale %g", (double)scales[i]);
        expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, what);
    }
}

static void test_an_unknown_algorithm_is_an_invalid_argument(void **state)
{
    fsa_selected_attention_desc d = good_desc();
    d.algorithm = (fsa_algorithm)3;
    expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, "algorithm 3");
    d.algorithm = (fsa_algorithm)-1;
    expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, "algorithm -1");
}

static void test_an_unknown_dtype_is_an_invalid_argument(void **state)
{
    fsa_selected_attention_desc d = good_desc();
    d.dtype = (fsa_dtype)7;
    expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, "dtype 7");
    d.dtype = (fsa_dtype)-1;
    expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, "dtype -1");
}

static void test_a_backward_path_that_does_not_fit_the_target_is_unsupported(void **state)
{
    /* Parts with 100 KB of shared memory per SM allow 99 KB per block: head
     * dim 176 fits the NSA-order forward (100096 bytes) but not the NSA-order
     * dq kernel (105984 bytes). */
    const char *small[] = {"sm_86", "sm_89", "sm_120", "sm_121a"};
    fsa_selected_attention_desc d = good_desc();
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        fsa_context *ctx = offline_context(small[i]);
        d = good_desc();
        d.head_dim = 176;
        d.num_q_heads = 16;
        d.backward = 1;
        d.algorithm = FSA_ALGORITHM_NSA;
        expect_plan_status(ctx, &d, FSA_STATUS_UNSUPPORTED, small[i]);
        if (strstr(fsa_last_error(), "NSA-order backward") == NULL) fail_msg("message: %s", fsa_last_error());
        fsa_context_destroy(ctx);
    }
    /* A value that is not a flag at all is an invalid argument. */
    d = good_desc();
    d.backward = 2;
    expect_plan_status(*state, &d, FSA_STATUS_INVALID_ARGUMENT, "backward 2");
}

static void test_a_forced_fsa_path_that_does_not_fit_is_unsupported(void **state)
{
    /* G = 128 leaves no room in the FSA main kernel's 64-row tile. */
    fsa_selected_attention_desc d = good_desc();
    d.num_q_heads = 128;
    d.num_kv_heads = 1;
    d.algorithm = FSA_ALGORITHM_FSA;
    expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, "FSA forced with G 128");
}

/* ------------------------------------------------------------ plan queries */

static void test_plan_queries_with_null_arguments_are_null_pointers(void **state)
{
    (void)state;
    size_t bytes = 123;
    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    const char *why = NULL;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_workspace_size(&bytes, NULL, 100, 1));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_workspace_size(NULL, NULL, 100, 1));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_algorithm(&a, &why, NULL, 100));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_algorithm(NULL, &why, NULL, 100));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_algorithm_bwd(&a, &why, NULL, 100));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_plan_workspace_size_bwd(&bytes, NULL, 100, 1));
    fsa_fwd_args args = FSA_FWD_ARGS_INIT;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_selected_attention_fwd(NULL, &args, NULL));
}

int main(void)
{
#define OFF(fn) cmocka_unit_test_setup_teardown(fn, setup_offline, teardown_offline)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_create_with_a_null_out_is_a_null_pointer),
        cmocka_unit_test(test_context_create_with_a_wrong_struct_size_is_struct_size),
        cmocka_unit_test(test_context_options_of_the_first_version_are_read_without_what_follows_them),
        cmocka_unit_test(test_the_init_macros_set_struct_size_and_the_documented_defaults),
        cmocka_unit_test(test_an_offline_context_without_a_target_is_an_invalid_argument),
        cmocka_unit_test(test_an_offline_context_for_an_unsupported_target_is_unsupported_device),
        cmocka_unit_test(test_an_offline_context_for_a_malformed_target_is_an_invalid_argument),
        cmocka_unit_test(test_an_offline_context_reports_its_target_and_no_cache_when_off),
        cmocka_unit_test(test_a_device_context_without_a_driver_fails_with_no_driver_or_no_device),
        cmocka_unit_test(test_a_negative_device_other_than_none_is_an_invalid_argument),
        cmocka_unit_test(test_a_bad_fsa_cache_mode_value_is_an_invalid_argument),
        cmocka_unit_test(test_a_bad_fsa_jit_value_is_an_invalid_argument),
        cmocka_unit_test(test_unknown_cache_and_jit_mode_options_are_invalid_arguments),
        cmocka_unit_test(test_destroying_null_is_fine),
        OFF(test_cache_stats_checks_its_arguments),
        OFF(test_cache_stats_of_the_first_version_are_written_without_what_follows_them),
        OFF(test_cache_maintenance_without_a_disk_cache_is_cache_io),
        OFF(test_fill_on_an_offline_context_is_no_device),
        OFF(test_plan_create_with_null_arguments_is_a_null_pointer),
        OFF(test_plan_create_with_a_wrong_struct_size_is_struct_size),
        OFF(test_an_unsupported_head_dim_is_unsupported),
        OFF(test_a_value_dim_that_is_not_0_or_a_multiple_of_16_up_to_256_is_unsupported),
        OFF(test_a_backward_with_dims_over_320_together_needs_both_dims_to_be_multiples_of_32),
        cmocka_unit_test(test_a_paged_cache_shape_over_the_targets_shared_memory_is_unsupported),
        OFF(test_bad_head_counts_are_invalid_arguments),
        OFF(test_a_group_larger_than_128_is_unsupported),
        OFF(test_an_unsupported_block_size_is_unsupported),
        OFF(test_an_unsupported_top_k_is_unsupported),
        OFF(test_a_nan_negative_or_infinite_scale_is_an_invalid_argument),
        OFF(test_an_unknown_algorithm_is_an_invalid_argument),
        OFF(test_an_unknown_dtype_is_an_invalid_argument),
        OFF(test_a_backward_path_that_does_not_fit_the_target_is_unsupported),
        OFF(test_a_forced_fsa_path_that_does_not_fit_is_unsupported),
        cmocka_unit_test(test_plan_queries_with_null_arguments_are_null_pointers),
    };
#undef OFF
    return cmocka_run_group_tests(tests, NULL, NULL);
}
