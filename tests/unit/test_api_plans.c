/* The public API's answers to bad plan descriptors, on offline contexts (no
 * GPU): fsa_plan_create refuses NULL arguments, a wrong struct size,
 * unsupported head and value dims, head counts, groups, block sizes and top-k,
 * a bad scale, algorithm or dtype, backward or forced paths that do not
 * fit the target, a shape no forward order fits and a token's list entries
 * past int32, each with its documented status and error record and before
 * anything is compiled, while the ends of each range pass every check;
 * paged-cache, window and compressed shapes over the
 * target's shared memory are unsupported; and the plan queries refuse NULL arguments. */
#include "api_validation_fixture.h"

#include "base/struct_size.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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
    fsa_plan *plan = (fsa_plan *)ctx; /* any failure leaves NULL in *out */
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_create(&plan, ctx, NULL));
    assert_null(plan);
    plan = (fsa_plan *)ctx;
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_create(&plan, NULL, &d));
    assert_null(plan);
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_create(NULL, ctx, &d));
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

/* With value_dim 0 the value dim is the head dim, and its own check would
 * refuse it too: with a value dim of its own as well, the refusal names the
 * head dim. */
static void test_an_unsupported_head_dim_is_unsupported(void **state)
{
    const int dims[] = {0, 100, 272, 8, -16, 264, 257, 24};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int value_dim = 0; value_dim <= 64; value_dim += 64) {
            fsa_selected_attention_desc d = good_desc();
            d.head_dim = dims[i];
            d.value_dim = value_dim;
            char what[32];
            snprintf(what, sizeof what, "head_dim %d", dims[i]);
            expect_plan_status(*state, &d, FSA_STATUS_UNSUPPORTED, what);
            assert_non_null(strstr(fsa_last_error_info()->message, what));
        }
}

static void test_a_value_dim_that_is_not_0_or_a_multiple_of_16_up_to_256_is_unsupported(void **state)
{
    const int64_t dims[] = {8, 100, 272, -16, 264, 257, (int64_t)1 << 32, 24};
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
 * rows and stages than a 99 KB target's shared memory holds, even in its
 * one-stage layout (105800 bytes): its plan says so, with the default
 * layout's bytes as before, instead of failing a launch. A descriptor of the
 * first version (no value_dim) reads it as head_dim. */
static void test_a_paged_cache_shape_over_the_targets_shared_memory_is_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = offline_context("sm_86");
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.num_q_heads = 32, d.num_kv_heads = 2, d.max_batch = 8, d.max_query_tokens = 64;
    d.head_dim = 256;
    d.value_dim = 256;
    fsa_kvcache_plan *plan = (fsa_kvcache_plan *)&plan;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "head_dim 256, value_dim 256 with group 16 and top_k 16 needs 174928 "
                                             "bytes of shared memory; sm_86 allows 101376"));
    d.value_dim = 0;
    _Alignas(16) unsigned char buf[sizeof d + 16];
    memset(buf, 0xa5, sizeof buf); /* what lies past an older caller's struct is not its */
    const size_t first = offsetof(fsa_kvcache_desc, value_dim);
    memcpy(buf, &d, first);
    memcpy(buf, &first, sizeof first);
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, (const fsa_kvcache_desc *)(void *)buf));
    assert_non_null(strstr(fsa_last_error(), "value_dim 256"));
    d.head_dim = 64;
    const int bad[] = {8, 24, 272, -16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d.value_dim = bad[i];
        EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, &d));
        assert_non_null(strstr(fsa_last_error(), "value_dim"));
    }
    fsa_context_destroy(ctx);
}

/* The compressed and window plans on targets whose shared memory does not
 * hold the default mma.sync layouts: the plan takes a smaller one
 * (fsa_qt_fwd_layout_fit, fsa_qt_bwd_layout_fit) and refuses, naming the
 * kernel and its shared memory, only what still does not fit, which is how
 * the GPU tests tell such a refusal from a failure
 * (fsa_test_refused_for_shared_memory). sm_80 now plans every head dim up to
 * 256 / 256 with its backward (the dK/dV kernel in one stage above Dk + Dv
 * = 400); the 99 KB targets plan the forwards and the backwards at
 * 128 / 128, 192 / 128, 256 / 128 and 192 / 192, and still refuse the
 * backward at 256 / 256 (docs/semantics.md's table). */
static void test_window_and_compressed_shapes_over_the_targets_shared_memory_are_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = offline_context("sm_80");
    fsa_window_attention_desc w = FSA_WINDOW_ATTENTION_DESC_INIT;
    w.head_dim = 256, w.value_dim = 256, w.num_q_heads = 2, w.num_kv_heads = 1, w.window = 4096, w.backward = 1;
    fsa_window_plan *wp = NULL;
    if (fsa_window_plan_create(&wp, ctx, &w) != FSA_STATUS_OK)
        fail_msg("window 256 / 256 on sm_80: %s", fsa_last_error());
    fsa_window_plan_destroy(wp);
    fsa_compressed_attention_desc c = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    c.head_dim = 256, c.value_dim = 256, c.num_q_heads = 2, c.num_kv_heads = 2, c.top_k = 4;
    c.init_blocks = 2, c.local_blocks = 0, c.backward = 1;
    fsa_compressed_plan *cp = NULL;
    if (fsa_compressed_plan_create(&cp, ctx, &c) != FSA_STATUS_OK)
        fail_msg("compressed 256 / 256 on sm_80: %s", fsa_last_error());
    fsa_compressed_plan_destroy(cp);
    fsa_context_destroy(ctx);
    /* The 99 KB targets: the forwards (the compressed one at 128 / 128 with one set of rows per warp, both
     * at 192 / 128 in stages of 32 keys) and the backwards (dK/dV in one stage, with tiles of 32 query rows
     * from 256 / 128 on; dq in stages of 32 keys at 128 / 128, in one stage from 256 / 128 on). */
    ctx = offline_context("sm_86");
    static const int dims[][2] = {{128, 128}, {192, 128}, {256, 128}, {192, 192}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int backward = 0; backward <= 1; backward++) {
            c = (fsa_compressed_attention_desc)FSA_COMPRESSED_ATTENTION_DESC_INIT;
            c.num_q_heads = 8, c.num_kv_heads = 2, c.head_dim = dims[i][0], c.value_dim = dims[i][1];
            c.backward = backward;
            cp = NULL;
            if (fsa_compressed_plan_create(&cp, ctx, &c) != FSA_STATUS_OK)
                fail_msg("compressed %d / %d (backward %d) on sm_86: %s", dims[i][0], dims[i][1], backward,
                         fsa_last_error());
            fsa_compressed_plan_destroy(cp);
            w = (fsa_window_attention_desc)FSA_WINDOW_ATTENTION_DESC_INIT;
            w.num_q_heads = 8, w.num_kv_heads = 2, w.head_dim = dims[i][0], w.value_dim = dims[i][1];
            w.backward = backward;
            wp = NULL;
            if (fsa_window_plan_create(&wp, ctx, &w) != FSA_STATUS_OK)
                fail_msg("window %d / %d (backward %d) on sm_86: %s", dims[i][0], dims[i][1], backward,
                         fsa_last_error());
            fsa_window_plan_destroy(wp);
        }
    /* 256 / 256: dq needs 101376 bytes in its smallest layout and 256 of static deltas (dK/dV 101888). */
    c = (fsa_compressed_attention_desc)FSA_COMPRESSED_ATTENTION_DESC_INIT;
    c.num_q_heads = 8, c.num_kv_heads = 2, c.head_dim = 256, c.value_dim = 256, c.backward = 1;
    cp = (fsa_compressed_plan *)&cp;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_compressed_plan_create(&cp, ctx, &c));
    assert_null(cp);
    assert_non_null(strstr(fsa_last_error(), "fsa_cmp_bwd_dq needs 101632 bytes of shared memory"));
    w = (fsa_window_attention_desc)FSA_WINDOW_ATTENTION_DESC_INIT;
    w.num_q_heads = 8, w.num_kv_heads = 2, w.head_dim = 256, w.value_dim = 256, w.backward = 1;
    wp = (fsa_window_plan *)&wp;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_window_plan_create(&wp, ctx, &w));
    assert_null(wp);
    assert_non_null(strstr(fsa_last_error(), "fsa_swa_bwd_dq needs 101632 bytes of shared memory"));
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

static void test_a_backward_flag_other_than_0_or_1_is_an_invalid_argument(void **state)
{
    fsa_selected_attention_desc d = good_desc();
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
    /* Dk = Dv = 256 at blocks of 64 on a 99 KB target: even one query tile beside the block (111616
     * bytes) is over the limit; the refusal names the default layout's bytes (fsa_sel_layout_fit). */
    fsa_context *ctx = offline_context("sm_86");
    d = good_desc();
    d.head_dim = 256;
    d.num_q_heads = 16;
    d.algorithm = FSA_ALGORITHM_FSA;
    expect_plan_status(ctx, &d, FSA_STATUS_UNSUPPORTED, "FSA forced at 256 / 256 on sm_86");
    assert_non_null(strstr(fsa_last_error(), "145408 bytes of shared memory (target sm_86 allows 101376)"));
    fsa_context_destroy(ctx);
}

/* The NSA-order kernels (forward, and the backward's dq) have one grid row per
 * (KV head, group of query heads), and a grid has at most 65535 rows: a plan
 * forcing that order over more is unsupported before anything is compiled,
 * instead of every call failing at its launch. AUTO takes the FSA order there;
 * 65535 rows still fit. */
static void test_a_forced_nsa_path_over_65535_grid_rows_is_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    fsa_plan *plan = NULL;
    fsa_selected_attention_desc d = good_desc();
    d.num_q_heads = d.num_kv_heads = 65536; /* G 1: one row per KV head */
    d.algorithm = FSA_ALGORITHM_NSA;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "65535"));
    d.backward = 1;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_plan_create(&plan, ctx, &d));
    d.algorithm = FSA_ALGORITHM_AUTO;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_plan_create(&plan, ctx, &d));
    d.num_q_heads = d.num_kv_heads = 65535;
    d.algorithm = FSA_ALGORITHM_NSA;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_plan_create(&plan, ctx, &d));
    fsa_context_destroy(ctx);
}

/* Every call numbers a token's (KV head, slot) list entries in int32, less a few steps of the forward's
 * work counter: a plan whose KV heads x top-k pass that could run no call, and is unsupported before
 * anything is compiled (2^25 KV heads x top-k 64 = 2^31); one KV head fewer passes the check. */
static void test_a_plan_whose_token_list_entries_pass_int32_is_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    fsa_plan *plan = (fsa_plan *)ctx;
    fsa_selected_attention_desc d = good_desc();
    d.num_q_heads = d.num_kv_heads = 1 << 25;
    d.top_k = 64;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "exceed int32"));
    d.backward = 1;
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_plan_create(&plan, ctx, &d));
    d.num_q_heads = d.num_kv_heads = (1 << 25) - 1;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_plan_create(&plan, ctx, &d));
    fsa_context_destroy(ctx);
}

/* A selected-attention plan of Dk / Dv, blocks of bk keys, group g, `algorithm` and `backward` on
 * `target` passes every check and stops at its first kernel (the cache of a checks-only context): what
 * it needs fits the target. */
static void expect_selected_plan_fits(const char *target, int dk, int dv, int bk, int g, fsa_algorithm algorithm,
                                      int backward)
{
    fsa_context *ctx = checks_only_context(target);
    fsa_selected_attention_desc d = good_desc();
    d.head_dim = dk, d.value_dim = dv, d.block_size = bk, d.num_q_heads = 2 * g, d.num_kv_heads = 2;
    d.algorithm = algorithm, d.backward = backward;
    fsa_plan *plan = NULL;
    const fsa_status st = fsa_plan_create(&plan, ctx, &d);
    if (st != FSA_STATUS_JIT_DISABLED)
        fail_msg("%s %d / %d bk %d G %d algorithm %d backward %d: status %s, %s", target, dk, dv, bk, g, (int)algorithm,
                 backward, fsa_status_name(st), fsa_last_error());
    assert_null(plan);
    fsa_context_destroy(ctx);
}

/* The 99 KB targets refused every selected-attention plan of Dk = Dv = 192 at blocks of 64 and 128 and of
 * Dk = Dv = 256 at blocks of 32 and more ("no forward path fits"), and the backward of 256 / 256 (16
 * keys: 102400 bytes). Their mma.sync kernels now take one stage where the default does not fit
 * (fsa_sel_layout_fit): every order, forward and backward, plans on sm_86, sm_89 and sm_120; so do a
 * forced FSA order where one query tile fits (192 / 192 at blocks of 64, 256 / 256 at 32) and a forced
 * NSA order's backward (its dq in one stage). What the kernels are and that they compile:
 * tests/nvrtc/test_selected_plan_layouts.c. */
static void test_selected_plans_of_head_dims_192_and_256_fit_99_kb_targets(void **state)
{
    (void)state;
    static const char *targets[] = {"sm_86", "sm_89", "sm_120"};
    static const int shapes[][4] = {{192, 192, 64, 1},  {192, 192, 64, 16}, {192, 192, 128, 4}, {256, 256, 32, 16},
                                    {256, 256, 64, 1},  {256, 256, 64, 16}, {256, 256, 128, 64}, {256, 256, 16, 4},
                                    {256, 128, 64, 8},  {128, 256, 128, 2}, {192, 256, 64, 16}};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int backward = 0; backward <= 1; backward++) {
                const int dk = shapes[i][0], dv = shapes[i][1], bk = shapes[i][2], g = shapes[i][3];
                expect_selected_plan_fits(targets[t], dk, dv, bk, g, FSA_ALGORITHM_AUTO, backward);
                expect_selected_plan_fits(targets[t], dk, dv, bk, g, FSA_ALGORITHM_NSA, backward);
            }
    expect_selected_plan_fits("sm_86", 192, 192, 64, 16, FSA_ALGORITHM_FSA, 1);
    expect_selected_plan_fits("sm_86", 256, 256, 32, 16, FSA_ALGORITHM_FSA, 1);
}

/* The ends of each range are plans: head and value dims of 16 and 256,
 * blocks of 16 and 256 keys, top-k 1 and 64. */
static void test_the_ends_of_each_descriptor_range_pass_every_check(void **state)
{
    (void)state;
    expect_selected_plan_fits("sm_90a", 16, 16, 64, 2, FSA_ALGORITHM_AUTO, 0);
    expect_selected_plan_fits("sm_90a", 16, 256, 64, 2, FSA_ALGORITHM_AUTO, 0);
    expect_selected_plan_fits("sm_90a", 256, 16, 64, 2, FSA_ALGORITHM_AUTO, 0);
    expect_selected_plan_fits("sm_90a", 64, 64, 16, 2, FSA_ALGORITHM_AUTO, 0);
    expect_selected_plan_fits("sm_90a", 64, 64, 256, 2, FSA_ALGORITHM_AUTO, 0);
    fsa_context *ctx = checks_only_context("sm_90a");
    const int ks[] = {1, 64};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        fsa_selected_attention_desc d = good_desc();
        d.top_k = ks[i];
        fsa_plan *plan = NULL;
        EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_plan_create(&plan, ctx, &d));
        assert_null(plan);
    }
    fsa_context_destroy(ctx);
}

/* A kernel that needs exactly the shared memory a block may take fits: the
 * FSA order's forward of Dk 48 / Dv 192 at blocks of 256 needs sm_80's
 * 166912 bytes, of 160 / 96 at blocks of 128 sm_86's 101376, and so does
 * the NSA order's forward of 160 / 192. */
static void test_a_forward_that_needs_exactly_the_targets_shared_memory_fits(void **state)
{
    (void)state;
    expect_selected_plan_fits("sm_80", 48, 192, 256, 2, FSA_ALGORITHM_FSA, 0);
    expect_selected_plan_fits("sm_86", 160, 96, 128, 2, FSA_ALGORITHM_FSA, 0);
    expect_selected_plan_fits("sm_86", 160, 192, 64, 2, FSA_ALGORITHM_NSA, 0);
}

/* The FSA order takes groups up to 64 and the NSA order a grid row per KV
 * head and group of 16 query heads: a group of 128 over 8192 KV heads (65536
 * rows) fits neither, and an AUTO plan of it is unsupported, naming both
 * reasons, instead of a plan without a forward kernel. 8191 KV heads fit the
 * NSA order. */
static void test_a_plan_that_no_forward_order_fits_is_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    fsa_selected_attention_desc d = good_desc();
    d.num_kv_heads = 8192;
    d.num_q_heads = 128 * 8192;
    fsa_plan *plan = (fsa_plan *)ctx; /* must be overwritten */
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "no forward path fits"));
    assert_non_null(strstr(fsa_last_error(), "takes groups up to 64 (group 128)"));
    assert_non_null(strstr(fsa_last_error(), "8192 KV heads at group 128"));
    d.num_kv_heads = 8191;
    d.num_q_heads = 128 * 8191;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_plan_create(&plan, ctx, &d));
    fsa_context_destroy(ctx);
}

/* A paged-cache plan of Dk / Dv and the group's heads per KV head on `target` (FSA_KVC_SMALL as `small`,
 * NULL unset) gets past every check and stops at its kernel, which the message names: that name (and so
 * the kernel's key) contains `part`, and not `not_part` (NULL: no such check). */
static void expect_paged_kernel(const char *target, int dk, int dv, int g, const char *small, const char *part,
                                const char *not_part)
{
    fsa_context *ctx = checks_only_context(target);
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.num_q_heads = 2 * g, d.num_kv_heads = 2, d.max_batch = 8, d.max_query_tokens = 64;
    d.head_dim = dk, d.value_dim = dv;
    fsa_kvcache_plan *plan = NULL;
    char *saved = fsa_test_env_swap("FSA_KVC_SMALL", small);
    const fsa_status st = fsa_kvcache_plan_create(&plan, ctx, &d);
    fsa_test_env_restore("FSA_KVC_SMALL", saved);
    if (st != FSA_STATUS_JIT_DISABLED)
        fail_msg("%s %d / %d G %d: status %d, %s", target, dk, dv, g, (int)st, fsa_last_error());
    assert_null(plan);
    if (strstr(fsa_last_error(), part) == NULL || (not_part && strstr(fsa_last_error(), not_part) != NULL))
        fail_msg("%s %d / %d G %d: want %s%s%s in: %s", target, dk, dv, g, part, not_part ? ", not " : "",
                 not_part ? not_part : "", fsa_last_error());
    fsa_context_destroy(ctx);
}

/* Where the paged-cache kernel's default layout does not fit the target's shared memory, the plan takes
 * one stage buffer (fsa_kvc_layout_fit) and gets as far as loading that kernel, whose name and key carry
 * the layout (_kl1): NSA's 192 / 128 at G 16 on sm_86 (refused before), 256 / 128 at G 1 on sm_89,
 * 256 / 256 at G 4 on sm_120 and at G 16 on sm_80. A shape whose default fits keeps the default kernel's
 * name (no _kl field): 192 / 128 at G 4 on sm_86, every shape on sm_90a. FSA_KVC_SMALL=1 adds the layout
 * where the default fits, on cp.async copies: on sm_90a, where 128 / 128 at page 64 would take tensor
 * maps (tma1), the plan loads the one-stage kernel of row copies (tma0_kl1). */
static void test_a_paged_cache_plan_takes_one_stage_where_the_default_does_not_fit(void **state)
{
    (void)state;
    expect_paged_kernel("sm_86", 192, 128, 16, NULL, "kvc_fwd_bf16_d192_dv128_g16_bk64_k16_p64_tma0_kl1 is not", NULL);
    expect_paged_kernel("sm_89", 256, 128, 1, NULL, "kvc_fwd_bf16_d256_dv128_g1_bk64_k16_p64_tma0_kl1 is not", NULL);
    expect_paged_kernel("sm_120", 256, 256, 4, NULL, "kvc_fwd_bf16_d256_dv256_g4_bk64_k16_p64_tma0_kl1 is not", NULL);
    expect_paged_kernel("sm_80", 256, 256, 16, NULL, "kvc_fwd_bf16_d256_dv256_g16_bk64_k16_p64_tma0_kl1 is not", NULL);
    expect_paged_kernel("sm_86", 192, 128, 4, NULL, "kvc_fwd_bf16_d192_dv128_g4_bk64_k16_p64_tma0 is not", "_kl");
    expect_paged_kernel("sm_90a", 192, 128, 16, NULL, "kvc_fwd_bf16_d192_dv128_g16_bk64_k16_p64_tma0 is not", "_kl");
    expect_paged_kernel("sm_90a", 128, 128, 4, NULL, "kvc_fwd_bf16_d128_dv128_g4_bk64_k16_p64_tma1 is not", "_kl");
    expect_paged_kernel("sm_90a", 128, 128, 4, "1", "kvc_fwd_bf16_d128_dv128_g4_bk64_k16_p64_tma0_kl1 is not", NULL);
    expect_paged_kernel("sm_86", 192, 128, 16, "1", "kvc_fwd_bf16_d192_dv128_g16_bk64_k16_p64_tma0_kl1 is not", NULL);
    /* Any other value of the override leaves the target's choice. */
    expect_paged_kernel("sm_90a", 128, 128, 4, "2", "kvc_fwd_bf16_d128_dv128_g4_bk64_k16_p64_tma1 is not", "_kl");
}

static fsa_kvcache_desc good_kvcache_desc(void)
{
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.head_dim = 64;
    d.num_q_heads = 4, d.num_kv_heads = 2, d.max_batch = 8, d.max_query_tokens = 64;
    return d;
}

/* The paged-cache kernel's grid has a row per KV head (times the CTAs of a
 * split sequence), and a grid has at most 65535 rows: like the compressed and
 * sliding-window plans, a paged-cache plan takes at most 65535 KV heads. */
static void test_a_paged_cache_plan_over_65535_kv_heads_is_an_invalid_argument(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    fsa_kvcache_plan *plan = NULL;
    fsa_kvcache_desc d = good_kvcache_desc();
    d.num_q_heads = d.num_kv_heads = 65536;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "65535"));
    d.num_q_heads = d.num_kv_heads = 65535;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_kvcache_plan_create(&plan, ctx, &d));
    fsa_context_destroy(ctx);
}

/* The workspace holds partial rows for every (sequence, KV head, share) of
 * max_batch sequences: a shape whose bytes overflow size_t is unsupported,
 * instead of a size that wrapped to a few bytes (which the kernels' writes
 * would overrun). The largest max_batch with a usual head count still fits. */
static void test_a_paged_cache_plan_whose_workspace_overflows_size_t_is_unsupported(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    fsa_kvcache_plan *plan = NULL;
    fsa_kvcache_desc d = good_kvcache_desc();
    d.head_dim = d.value_dim = 256;
    d.num_q_heads = d.num_kv_heads = 65535;
    d.top_k = 64;
    d.splits = 64;
    d.max_batch = INT32_MAX - 1024; /* the most a plan takes; x 65535 x 64 shares x 16 rows x 256 floats: ~2^67 bytes */
    EXPECT_REFUSED(FSA_STATUS_UNSUPPORTED, fsa_kvcache_plan_create(&plan, ctx, &d));
    assert_null(plan);
    assert_non_null(strstr(fsa_last_error(), "workspace"));
    d.num_q_heads = 32, d.num_kv_heads = 8;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_kvcache_plan_create(&plan, ctx, &d));
    fsa_context_destroy(ctx);
}

static void test_plan_queries_with_null_arguments_are_null_pointers(void **state)
{
    (void)state;
    size_t bytes = 123;
    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    const char *why = NULL;
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_workspace_size(&bytes, NULL, 100, 1));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_workspace_size(NULL, NULL, 100, 1));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_algorithm(&a, &why, NULL, 100));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_algorithm(NULL, &why, NULL, 100));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_algorithm_bwd(&a, &why, NULL, 100));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_plan_workspace_size_bwd(&bytes, NULL, 100, 1));
    fsa_fwd_args args = FSA_FWD_ARGS_INIT;
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_selected_attention_fwd(NULL, &args, NULL));
}

int main(void)
{
#define OFF(fn) cmocka_unit_test_setup_teardown(fn, setup_offline, teardown_offline)
    const struct CMUnitTest tests[] = {
        OFF(test_plan_create_with_null_arguments_is_a_null_pointer),
        OFF(test_plan_create_with_a_wrong_struct_size_is_struct_size),
        OFF(test_an_unsupported_head_dim_is_unsupported),
        OFF(test_a_value_dim_that_is_not_0_or_a_multiple_of_16_up_to_256_is_unsupported),
        OFF(test_a_backward_with_dims_over_320_together_needs_both_dims_to_be_multiples_of_32),
        cmocka_unit_test(test_a_paged_cache_shape_over_the_targets_shared_memory_is_unsupported),
        cmocka_unit_test(test_a_paged_cache_plan_takes_one_stage_where_the_default_does_not_fit),
        cmocka_unit_test(test_window_and_compressed_shapes_over_the_targets_shared_memory_are_unsupported),
        OFF(test_bad_head_counts_are_invalid_arguments),
        OFF(test_a_group_larger_than_128_is_unsupported),
        OFF(test_an_unsupported_block_size_is_unsupported),
        OFF(test_an_unsupported_top_k_is_unsupported),
        OFF(test_a_nan_negative_or_infinite_scale_is_an_invalid_argument),
        OFF(test_an_unknown_algorithm_is_an_invalid_argument),
        OFF(test_an_unknown_dtype_is_an_invalid_argument),
        OFF(test_a_backward_flag_other_than_0_or_1_is_an_invalid_argument),
        OFF(test_a_forced_fsa_path_that_does_not_fit_is_unsupported),
        cmocka_unit_test(test_a_forced_nsa_path_over_65535_grid_rows_is_unsupported),
        cmocka_unit_test(test_a_plan_whose_token_list_entries_pass_int32_is_unsupported),
        cmocka_unit_test(test_selected_plans_of_head_dims_192_and_256_fit_99_kb_targets),
        cmocka_unit_test(test_the_ends_of_each_descriptor_range_pass_every_check),
        cmocka_unit_test(test_a_plan_that_no_forward_order_fits_is_unsupported),
        cmocka_unit_test(test_a_forward_that_needs_exactly_the_targets_shared_memory_fits),
        cmocka_unit_test(test_a_paged_cache_plan_over_65535_kv_heads_is_an_invalid_argument),
        cmocka_unit_test(test_a_paged_cache_plan_whose_workspace_overflows_size_t_is_unsupported),
        cmocka_unit_test(test_plan_queries_with_null_arguments_are_null_pointers),
    };
#undef OFF
    return cmocka_run_group_tests(tests, NULL, NULL);
}
