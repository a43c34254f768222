/* Plans over a paged KV cache on an offline sm_90a context (no GPU): bad
 * descriptors and bad call arguments come back as statuses with an error
 * record, the tiling and split rule are what the API documents, and a call
 * with good arguments gets as far as needing a device. */
#include "api_validation_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static fsa_context *g_ctx;

static fsa_kvcache_desc good_desc(int hq, int hkv)
{
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.num_q_heads = hq;
    d.num_kv_heads = hkv;
    d.max_batch = 8;
    d.max_query_tokens = 64;
    return d;
}

/* The descriptor refused with `want`, before any kernel is asked for: a
 * context that can build nothing (JIT and cache off) gives the same status
 * (a refusal after the kernels' lookup would be FSA_STATUS_JIT_DISABLED). */
static void expect_desc_status(fsa_status want, fsa_kvcache_desc d)
{
    fsa_context *builds_nothing = checks_only_context("sm_90a");
    fsa_context *contexts[2] = {g_ctx, builds_nothing};
    for (int c = 0; c < 2; c++) {
        fsa_kvcache_plan *plan = (fsa_kvcache_plan *)&plan;
        assert_int_equal(fsa_kvcache_plan_create(&plan, contexts[c], &d), want);
        assert_null(plan);
        assert_int_equal(fsa_last_error_info()->status, want);
        assert_true(strlen(fsa_last_error_info()->message) > 0);
    }
    fsa_context_destroy(builds_nothing);
}

static void test_bad_descriptors_are_refused_before_compiling(void **state)
{
    (void)state;
    fsa_kvcache_desc d = good_desc(32, 8);
    d.struct_size = 4;
    expect_desc_status(FSA_STATUS_STRUCT_SIZE, d);
    d = good_desc(65, 1); /* group 65 */
    expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    d = good_desc(32, 8);
    d.page_size = 8;
    expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    d = good_desc(32, 8);
    d.block_size = 48;
    expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    d = good_desc(32, 8);
    d.top_k = 65;
    expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    d = good_desc(32, 8);
    d.max_batch = 0;
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    /* The kernels step through a batch by up to 1024 threads with an int counter: more would wrap it. */
    d.max_batch = INT32_MAX - 1023;
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    assert_non_null(strstr(fsa_last_error(), "max_batch 2147482624: 1..2147482623"));
    d = good_desc(32, 8);
    d.splits = 65;
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    d = good_desc(30, 8);
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    d = good_desc(12, 8); /* a group of 1.5 heads, which integer division would call 1 */
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    d = good_desc(65, 1); /* group 65 at head dims small enough for shared memory: the group bound says no */
    d.head_dim = d.value_dim = 16;
    expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    assert_non_null(strstr(fsa_last_error_info()->message, "group 65"));
    d = good_desc(32, 8);
    d.dtype = (fsa_dtype)7;
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    assert_non_null(strstr(fsa_last_error_info()->message, "dtype 7"));
    d = good_desc(0, 8); /* no query head: a group of 0 */
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    d = good_desc(32, 8);
    d.top_k = 0;
    expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    d = good_desc(32, 8);
    d.max_query_tokens = 0;
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    d = good_desc(32, 8);
    d.splits = -1; /* 0 is the plan's choice; fewer is nothing */
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    const int head_dims[] = {0, -16, 24};
    for (size_t i = 0; i < sizeof head_dims / sizeof head_dims[0]; i++) {
        d = good_desc(32, 8);
        d.head_dim = head_dims[i];
        d.value_dim = 64;
        expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
        assert_non_null(strstr(fsa_last_error_info()->message, "head_dim"));
    }
    const int page_sizes[] = {0, -16, 512};
    for (size_t i = 0; i < sizeof page_sizes / sizeof page_sizes[0]; i++) {
        d = good_desc(32, 8);
        d.page_size = page_sizes[i];
        expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
    }
    d = good_desc(32, 8);
    d.max_query_tokens = (int64_t)INT32_MAX + 1;
    expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    const float scales[] = {NAN, INFINITY, -1.0f};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        d = good_desc(32, 8);
        d.scale = scales[i];
        expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, d);
    }
    const int value_dims[] = {8, 24, 272, -16};
    for (size_t i = 0; i < sizeof value_dims / sizeof value_dims[0]; i++) {
        d = good_desc(32, 8);
        d.value_dim = value_dims[i];
        expect_desc_status(FSA_STATUS_UNSUPPORTED, d);
        assert_non_null(strstr(fsa_last_error_info()->message, "value_dim"));
    }
    assert_int_equal(fsa_kvcache_plan_create(NULL, g_ctx, &d), FSA_STATUS_NULL_POINTER);
    fsa_kvcache_plan_destroy(NULL);
}

/* The ends of each range pass every check and stop where the kernel would
 * be compiled: blocks and pages of 16 and 256 (pages of 1 too), top-k 1 and
 * 64, one query token, 64 splits, and shared memory up to the target's. */
static void test_the_ends_of_each_descriptor_range_pass_every_check(void **state)
{
    (void)state;
    const struct {
        int block_size, page_size, top_k, splits;
        int64_t max_query_tokens;
    } ends[] = {{16, 64, 16, 0, 64}, {256, 64, 16, 0, 64}, {64, 1, 16, 0, 64}, {64, 16, 16, 0, 64},
                {64, 256, 16, 0, 64}, {64, 64, 1, 0, 64},  {64, 64, 64, 0, 1}, {64, 64, 16, 64, 64}};
    fsa_context *ctx = checks_only_context("sm_90a");
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        fsa_kvcache_desc d = good_desc(32, 8);
        d.block_size = ends[i].block_size, d.page_size = ends[i].page_size, d.top_k = ends[i].top_k;
        d.splits = ends[i].splits, d.max_query_tokens = ends[i].max_query_tokens;
        fsa_kvcache_plan *plan = NULL;
        const fsa_status st = fsa_kvcache_plan_create(&plan, ctx, &d);
        if (st != FSA_STATUS_JIT_DISABLED)
            fail_msg("blocks %d, pages %d, top-k %d, splits %d, %lld tokens: %s, %s", d.block_size, d.page_size,
                     d.top_k, d.splits, (long long)d.max_query_tokens, fsa_status_name(st), fsa_last_error());
        assert_null(plan);
    }
    fsa_context_destroy(ctx);
    /* A kernel that needs exactly the shared memory a block may take fits: D 256 / Dv 224 at G 9 and top-k 11
     * needs sm_80's 166912 bytes, 96 / 256 at G 2 and top-k 32 sm_86's 101376. */
    const struct {
        const char *target;
        int dk, dv, g, k;
    } exact[] = {{"sm_80", 256, 224, 9, 11}, {"sm_86", 96, 256, 2, 32}};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        ctx = checks_only_context(exact[i].target);
        fsa_kvcache_desc d = good_desc(2 * exact[i].g, 2);
        d.head_dim = exact[i].dk, d.value_dim = exact[i].dv, d.top_k = exact[i].k;
        fsa_kvcache_plan *plan = NULL;
        EXPECT_STATUS(FSA_STATUS_JIT_DISABLED, fsa_kvcache_plan_create(&plan, ctx, &d));
        assert_null(plan);
        fsa_context_destroy(ctx);
    }
}

/* The stamped debug kernel writes FSA_KVC_STAMP_CTAS records: a plan refuses a
 * buffer that is not named with its size, is named too small, or is named with
 * anything more (read whole, like the other switches); numbers are decimal or 0x
 * hexadecimal. */
static void test_a_stamp_buffer_too_small_or_misspelled_is_refused(void **state)
{
    (void)state;
    const char *bad[] = {"0x10000",           "0x10000:4096",       "0:99999999",        "0x10000:99999999x",
                         "0x10000:-99999999", "-0x10000:99999999", "0x10000 :99999999", "0x10000:",
                         /* past 64 bits: strtoull's ULLONG_MAX is not an address or a size */
                         "99999999999999999999999:5300000", "0x10000:999999999999999999999999",
                         /* one byte short of FSA_KVC_STAMP_CTAS x FSA_KVC_STAMP_WORDS x 8 */
                         "0x10000:5242879"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FSA_KVC_STAMPS", bad[i], 1);
        expect_desc_status(FSA_STATUS_INVALID_ARGUMENT, good_desc(32, 8));
        assert_non_null(strstr(fsa_last_error_info()->message, "FSA_KVC_STAMPS"));
    }
    /* Decimal even with a leading zero: 05300000 bytes are 5.05 MiB, enough (read as octal: 1.3 MiB). */
    setenv("FSA_KVC_STAMPS", "0x10000:05300000", 1);
    fsa_kvcache_desc d = good_desc(32, 8);
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_kvcache_plan_destroy(plan);
    /* Exactly the records' bytes are enough. */
    setenv("FSA_KVC_STAMPS", "0x10000:5242880", 1);
    plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_kvcache_plan_destroy(plan);
    /* Empty counts as unset, as for the other switches: the plan takes the normal kernel. */
    setenv("FSA_KVC_STAMPS", "", 1);
    plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_kvcache_plan_destroy(plan);
    unsetenv("FSA_KVC_STAMPS");
}

static void test_tiles_hold_four_tokens_of_a_group_and_one_tile_sequences_split(void **state)
{
    (void)state;
    const int groups[] = {1, 4, 16, 64}, tokens[] = {16, 4, 4, 1};
    /* Hkv 2, D 128: 1 MiB of K/V per token; shares of two blocks while group x 8 partial rows <= 32. */
    const int shares[] = {8, 8, 4, 4};
    for (int i = 0; i < 4; i++) {
        fsa_kvcache_desc d = good_desc(groups[i] * 2, 2);
        d.top_k = 16;
        fsa_kvcache_plan *plan = NULL;
        assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
        int tile = 0, splits = 0;
        assert_int_equal(fsa_kvcache_plan_info(&tile, &splits, plan), FSA_STATUS_OK);
        assert_int_equal(tile, tokens[i]);
        assert_int_equal(splits, shares[i]);
        size_t ws = 0;
        assert_int_equal(fsa_kvcache_plan_workspace_size(&ws, plan), FSA_STATUS_OK);
        assert_true(ws >= (size_t)8 * 2 * shares[i] * (size_t)(tile * groups[i]) * (128 + 1) * 4); /* batch x Hkv x splits x rows */
        /* The counters the workspace starts with: one int per (sequence, KV head), on a 256-byte line. */
        size_t counters = 0;
        assert_int_equal(fsa_kvcache_plan_workspace_counter_size(&counters, plan), FSA_STATUS_OK);
        assert_int_equal(counters, 256);
        assert_true(counters < ws);
        fsa_kvcache_plan_destroy(plan);
    }
    fsa_kvcache_desc d = good_desc(8, 2);
    d.splits = 1;
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    size_t ws = 1;
    assert_int_equal(fsa_kvcache_plan_workspace_size(&ws, plan), FSA_STATUS_OK);
    assert_int_equal(ws, 0); /* nothing splits: no partials */
    size_t counters = 1;
    assert_int_equal(fsa_kvcache_plan_workspace_counter_size(&counters, plan), FSA_STATUS_OK);
    assert_int_equal(counters, 0); /* nor counters */
    assert_int_equal(fsa_kvcache_plan_workspace_counter_size(NULL, plan), FSA_STATUS_NULL_POINTER);
    assert_int_equal(fsa_kvcache_plan_workspace_counter_size(&counters, NULL), FSA_STATUS_NULL_POINTER);
    fsa_kvcache_plan_destroy(plan);
}

/* Arguments for 4 query tokens of 2 sequences (plan of good_desc(8, 2)) that
 * pass every check: fake aligned addresses, never dereferenced offline. */
static fsa_kvcache_args good_args(const fsa_kvcache_plan *plan)
{
    fsa_kvcache_args good = FSA_KVCACHE_ARGS_INIT;
    good.num_query_tokens = 4;
    good.batch = 2;
    good.q = good.o = (fsa_tensor){0x10000, 8 * 128, 128};
    good.k_cache = good.v_cache = (fsa_tensor){0x10000, 2 * 128, 128};
    good.k_page_stride = good.v_page_stride = 64 * 2 * 128;
    good.num_pages = 10;
    good.block_table = good.cu_seqlens_q = good.seqused_k = 0x20000;
    good.topk = (fsa_tensor){0x20000, 16, 0};
    good.block_table_stride = 4;
    good.max_pages_per_seq = 4;
    good.workspace = 0x100000;
    assert_int_equal(fsa_kvcache_plan_workspace_size(&good.workspace_bytes, plan), FSA_STATUS_OK);
    return good;
}

static fsa_status kvcache_choice_of(fsa_plan_choice *out, const void *plan)
{
    return fsa_kvcache_plan_choice_get(out, plan);
}

/* The plan choice is written back: a size ending inside one of its appended
 * fields (splits, reserved) is refused with nothing written; the first
 * version's size gets its fields. */
static void test_a_plan_choice_ending_inside_splits_is_refused_and_left_unwritten(void **state)
{
    (void)state;
    fsa_kvcache_desc d = good_desc(8, 2);
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_test_plan_choice_sizes(kvcache_choice_of, plan);
    fsa_kvcache_plan_destroy(plan);
}

/* A call's tiles (its tokens by tile, plus a tile per sequence) are a grid's x
 * size: past 2^31 - 1 the call is refused before anything is enqueued. */
static void test_a_call_of_more_tiles_than_a_grid_holds_is_refused(void **state)
{
    (void)state;
    fsa_kvcache_desc d = good_desc(8, 2);
    d.max_batch = INT32_MAX - 1024; /* the most a plan takes (FSA_KVC_MAX_BATCH) */
    d.max_query_tokens = INT32_MAX;
    d.splits = 1; /* no workspace */
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_kvcache_args a = good_args(plan);
    a.batch = INT32_MAX - 1024;
    a.num_query_tokens = 4100; /* / 4 per tile + the batch: 2^31 tiles */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "2^31 - 1 CTAs"));
    a.num_query_tokens = 4096; /* 2^31 - 1 tiles: past the host checks (no device here) */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    fsa_kvcache_plan_destroy(plan);
}

static void test_bad_arguments_come_back_as_statuses(void **state)
{
    (void)state;
    fsa_kvcache_desc d = good_desc(8, 2);
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    const fsa_kvcache_args good = good_args(plan);
    const size_t ws = good.workspace_bytes;
    assert_int_equal(fsa_kvcache_attention(plan, &good, NULL), FSA_STATUS_NO_DEVICE);
    fsa_kvcache_args a = good;
    a.batch = 9;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.num_query_tokens = 65;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.seqused_k = 0; /* the message names the one argument */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NULL_POINTER);
    assert_non_null(strstr(fsa_last_error(), "seqused_k must not be NULL"));
    a = good;
    a.topk_length = 0x20002;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_MISALIGNED);
    assert_non_null(strstr(fsa_last_error(), "topk_length (0x20002) must be 4-byte aligned"));
    a = good;
    a.lse = 0x7ffffffffffffff0ull; /* its [Hq, Tq] floats would pass 2^63 bytes */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.k_cache.token_stride = 100;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_MISALIGNED);
    a = good;
    a.max_pages_per_seq = 0;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    /* Page-table rows shorter than max_pages_per_seq would reach into the next sequence's row; a
     * single row's stride is never used. */
    a = good;
    a.block_table_stride = a.max_pages_per_seq - 1;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a.batch = 1, a.num_query_tokens = 2;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    a = good;
    a.topk.head_stride = -1;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.o.head_stride = 64; /* o is written: each head's row half over the next one's */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "o is written"));
    a = good;
    a.q.head_stride = 0; /* q is only read: one row for every head is a layout like any other */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    assert_true(ws > 0); /* this plan splits: its shares' partials need the workspace */
    a = good;
    a.workspace_bytes = ws - 1;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    a = good;
    a.workspace = 0;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    a = good;
    a.workspace += 16;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_MISALIGNED);
    a = good;
    a.batch = 1, a.num_query_tokens = 2;
    a.block_table_stride = -1; /* never used with one row, but no stride is negative */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.batch = 0, a.num_query_tokens = 0; /* an empty batch does nothing, even offline */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_OK);
    a = good;
    a.num_query_tokens = 0; /* sequences with no new token: nothing either */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_OK);
    a = good;
    a.batch = 0; /* query tokens of no sequence: o would never be written */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "batch 0 with 4 query tokens"));
    assert_int_equal(fsa_kvcache_attention(NULL, &good, NULL), FSA_STATUS_NULL_POINTER);
    fsa_kvcache_plan_destroy(plan);
}

static void test_cache_pages_must_be_memory_of_their_own_below_two_to_the_63_bytes(void **state)
{
    (void)state;
    fsa_kvcache_desc d = good_desc(8, 2);
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    const fsa_kvcache_args good = good_args(plan);
    fsa_kvcache_args a = good;
    a.v_page_stride = 0; /* every page the same memory: no copy can address the pages apart */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "v_cache page stride 0 over 10 pages"));
    a.num_pages = 1; /* one page: its stride is never used */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    a.num_pages = 2; /* but two pages apart need one */
    a.k_page_stride = 0, a.v_page_stride = good.v_page_stride;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "k_cache page stride 0 over 2 pages"));
    a = good;
    a.k_page_stride += 4; /* pages 16-byte aligned take strides of 8 elements */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_MISALIGNED);
    a.num_pages = 1; /* unless there is one page: its stride is never used, as the binding takes it */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    a.k_page_stride = -8; /* negative, too */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    a.num_pages = 2; /* pages running backwards are refused */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "k_cache page stride -8 over 2 pages"));
    a = good;
    a.num_pages = INT64_MAX / 2; /* pages past 2^63 bytes: offsets the kernels cannot form */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "k_cache"));
    assert_non_null(strstr(fsa_last_error(), "reach past 2^63 bytes"));
    a = good;
    a.num_query_tokens = 1; /* a top-k dimension of one token: its stride is never used */
    a.topk.token_stride = -16;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    a.num_query_tokens = 2;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    fsa_kvcache_plan_destroy(plan);
}

/* Two pages: the second starts one page stride past the first, so a stride
 * of 2^62 elements puts it 2^63 bytes out, as far out of reach as any later page. */
static void test_a_second_page_two_to_the_63_bytes_out_is_refused(void **state)
{
    (void)state;
    fsa_kvcache_desc d = good_desc(8, 2);
    fsa_kvcache_plan *plan = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_kvcache_args a = good_args(plan);
    a.num_pages = 2;
    a.v_page_stride = (int64_t)1 << 62;
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "v_cache: 2 pages of stride"));
    a.num_pages = 1; /* one page: its stride is never used */
    assert_int_equal(fsa_kvcache_attention(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    fsa_kvcache_plan_destroy(plan);
}

static int setup(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_90a";
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    return fsa_context_create(&g_ctx, &o) == FSA_STATUS_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fsa_context_destroy(g_ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_descriptors_are_refused_before_compiling),
        cmocka_unit_test(test_the_ends_of_each_descriptor_range_pass_every_check),
        cmocka_unit_test(test_a_stamp_buffer_too_small_or_misspelled_is_refused),
        cmocka_unit_test(test_tiles_hold_four_tokens_of_a_group_and_one_tile_sequences_split),
        cmocka_unit_test(test_a_call_of_more_tiles_than_a_grid_holds_is_refused),
        cmocka_unit_test(test_a_plan_choice_ending_inside_splits_is_refused_and_left_unwritten),
        cmocka_unit_test(test_bad_arguments_come_back_as_statuses),
        cmocka_unit_test(test_cache_pages_must_be_memory_of_their_own_below_two_to_the_63_bytes),
        cmocka_unit_test(test_a_second_page_two_to_the_63_bytes_out_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
