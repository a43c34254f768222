/* Compressed-attention plans and calls (forward and backward) answer bad descriptors and arguments
 * with their documented status, on offline plans (no GPU needed): plans
 * compile their kernels with NVRTC into this test's cache directory, and a
 * call whose arguments pass every check ends with FSA_STATUS_NO_DEVICE. */
#include "api_validation_fixture.h"

#include "attention/compressed.h" /* FSA_CMP_SEL_KEYS */
#include "base/struct_size.h"
#include "jit/context.h" /* sm_count: a device's grid, offline */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HQ 4 /* the small shape: Dk 64, Dv 32, G 2, l 32, stride 16, blocks of 64, top-k 4 */
#define HKV 2
#define DK 64
#define DV 32
#define K 4

static char *g_dir;
static fsa_context *g_ctx, *g_ctx80;
static fsa_compressed_plan *g_plan, *g_plan_no_select, *g_plan_bwd;

static fsa_compressed_attention_desc small_desc(void)
{
    fsa_compressed_attention_desc d = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    d.head_dim = DK;
    d.value_dim = DV;
    d.num_q_heads = HQ;
    d.num_kv_heads = HKV;
    d.top_k = K;
    return d;
}

/* An offline context over the test's cache directory; check: check mode. */
static fsa_context *offline_checking(const char *target, int check)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target;
    o.cache_dir = g_dir;
    o.log = -1;
    o.check = check ? 1 : -1;
    fsa_context *ctx = NULL;
    return fsa_context_create(&ctx, &o) == FSA_STATUS_OK ? ctx : NULL;
}

static fsa_context *offline(const char *target) { return offline_checking(target, 0); }

/* The GPU tests' way to run the smaller layouts on sm_90a (fsa_test_small_layouts): a plan created under it
 * compiles the layouts' own kernels (QT_FWD and QT_BWD in their names), which the cache lookup finds by the
 * whole field (layout 15 is not layout 1), and the variables are as they were afterwards. */
static void test_the_small_layout_environment_makes_a_plan_compile_the_small_kernels(void **state)
{
    (void)state;
    char *before = fsa_test_env_swap("FSA_QT_SMALL_BWD", "x");
    fsa_test_small_layouts env;
    fsa_test_small_layouts_begin(&env, "1", "1");
    assert_string_equal(getenv("FSA_WGMMA"), "0");
    assert_string_equal(getenv("FSA_WGMMA_BWD"), "0");
    assert_string_equal(getenv("FSA_QT_SMALL_FWD"), "1");
    fsa_compressed_attention_desc d = small_desc();
    d.backward = 1;
    fsa_compressed_plan *plan = NULL;
    const fsa_status st = fsa_compressed_plan_create(&plan, g_ctx, &d);
    fsa_test_small_layouts_end(&env);
    if (st != FSA_STATUS_OK) fail_msg("%s", fsa_last_error());
    fsa_compressed_plan_destroy(plan);
    assert_string_equal(getenv("FSA_QT_SMALL_BWD"), "x");
    fsa_test_env_restore("FSA_QT_SMALL_BWD", before);
    const int max = fsa_test_max_smem(g_ctx);
    const int fwd = fsa_cmp_fwd_layout(DK, DV, 0, max, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32);
    const int bwd = fsa_qt_bwd_layout(DK, DV, 0, max, FSA_QT_BWD_DKV_BITS | FSA_QT_BWD_DQ_BITS);
    assert_int_equal(fwd, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32);
    assert_int_equal(bwd, 15);
    fsa_test_expect_layout_kernel(g_ctx, "cmp_fwd_", "qf", fwd);
    fsa_test_expect_layout_kernel(g_ctx, "cmp_bwd_", "qb", bwd);
    assert_false(fsa_test_cache_has_kernel(g_ctx, "cmp_bwd_", "_qb1"));
    assert_false(fsa_test_cache_has_kernel(g_ctx, "cmp_fwd_", "_qb15"));
}

static int group_setup(void **state)
{
    (void)state;
    g_dir = fsa_test_mkdtemp("fsa_compressed_arguments");
    if (g_dir == NULL || (g_ctx = offline("sm_90a")) == NULL || (g_ctx80 = offline("sm_80")) == NULL) return -1;
    fsa_compressed_attention_desc d = small_desc();
    if (fsa_compressed_plan_create(&g_plan, g_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    d.top_k = 0;
    if (fsa_compressed_plan_create(&g_plan_no_select, g_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan without selection: %s\n", fsa_last_error());
        return -1;
    }
    d.backward = 1;
    if (fsa_compressed_plan_create(&g_plan_bwd, g_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan with backward: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fsa_compressed_plan_destroy(g_plan);
    fsa_compressed_plan_destroy(g_plan_no_select);
    fsa_compressed_plan_destroy(g_plan_bwd);
    fsa_context_destroy(g_ctx);
    fsa_context_destroy(g_ctx80);
    fsa_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static fsa_status create_with(fsa_compressed_attention_desc d)
{
    fsa_compressed_plan *plan = NULL;
    const fsa_status st = fsa_compressed_plan_create(&plan, g_ctx, &d);
    if (st != FSA_STATUS_OK) assert_null(plan);
    fsa_compressed_plan_destroy(plan);
    return st;
}

static void test_descriptors_outside_the_supported_shapes_are_refused_with_the_field_named(void **state)
{
    (void)state;
    fsa_compressed_attention_desc d = small_desc();
    fsa_compressed_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_compressed_plan_create(NULL, g_ctx, &d));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_compressed_plan_create(&plan, NULL, &d));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_compressed_plan_create(&plan, g_ctx, NULL));
    d.struct_size = 8;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, create_with(d));
    d = small_desc(), d.dtype = (fsa_dtype)7;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.head_dim = 8;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "head_dim"));
    d = small_desc(), d.value_dim = 272;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.num_q_heads = 34, d.num_kv_heads = 2; /* G 17 */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "group"));
    d = small_desc(), d.num_q_heads = 5;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.stride = 33;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.kernel_size = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.block_size = 40; /* not a multiple of the stride */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "block_size"));
    d = small_desc(), d.block_size = 48; /* 3 strides: not a power of two */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.stride = 1, d.block_size = 128; /* 128 strides per block */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.top_k = 65;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.init_blocks = -1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.local_blocks = -1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "local_blocks -1"));
    d = small_desc(), d.scale = -1.0f;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.backward = 2;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.head_dim = 24;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.num_q_heads = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.num_q_heads = d.num_kv_heads = 65536; /* a grid row per KV head: 65535 at most */
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.kernel_size = 4097, d.top_k = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.stride = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.stride = 0, d.top_k = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    const float scales[] = {NAN, INFINITY};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        d = small_desc(), d.scale = scales[i];
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    }
    d = small_desc(), d.top_k = -1;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.kernel_size = 66, d.stride = 1; /* 65 strides before a token: one past the selection's 64 */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    assert_non_null(strstr(fsa_last_error(), "at most 64 strides per token"));
    /* Without selection the block size is not looked at. */
    d = small_desc(), d.top_k = 0, d.block_size = 48;
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
}

/* The ends of each range pass every check and stop where the first kernel
 * would be compiled: head and value dims of 16, 65535 KV heads, a group of
 * 16, kernels of 4096 tokens (without selection) and of 64 strides before a
 * token (with it). */
static void test_the_ends_of_each_descriptor_range_pass_every_check(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    fsa_compressed_attention_desc ends[5];
    for (int i = 0; i < 5; i++) ends[i] = small_desc();
    ends[0].head_dim = ends[0].value_dim = 16;
    ends[1].num_q_heads = ends[1].num_kv_heads = 65535;
    ends[2].num_q_heads = 32, ends[2].num_kv_heads = 2;
    ends[3].kernel_size = 4096, ends[3].top_k = 0;
    ends[4].kernel_size = 65, ends[4].stride = 1;
    for (int i = 0; i < 5; i++) {
        fsa_compressed_plan *plan = NULL;
        const fsa_status st = fsa_compressed_plan_create(&plan, ctx, &ends[i]);
        if (st != FSA_STATUS_JIT_DISABLED) fail_msg("end %d: %s, %s", i, fsa_status_name(st), fsa_last_error());
        assert_null(plan);
    }
    fsa_context_destroy(ctx);
}

/* The dK/dV kernel at Dk = Dv = 256 needs 204800 bytes by default, more
 * than sm_80's 163 KB (sm_90 has 227 KB): sm_80 takes it in one stage of
 * query rows (136192 bytes, fsa_qt_bwd_layout_fit), but the 99 KB targets'
 * smallest layouts still need 101888 bytes (dK/dV) and 101376 plus 256
 * static (dq, the first the plan checks). */
static void test_a_plan_whose_kernels_need_more_shared_memory_than_the_target_has_is_unsupported(void **state)
{
    (void)state;
    fsa_compressed_attention_desc d = small_desc();
    d.head_dim = d.value_dim = 256;
    d.num_q_heads = d.num_kv_heads = 1;
    d.kernel_size = 64, d.stride = 4, d.block_size = 256, d.top_k = 64;
    d.backward = 1;
    fsa_compressed_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_create(&plan, g_ctx80, &d));
    fsa_compressed_plan_destroy(plan);
    fsa_context *ctx86 = offline("sm_86");
    assert_non_null(ctx86);
    plan = (fsa_compressed_plan *)&plan;
    d.top_k = 0; /* (the selection would be refused first) */
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_compressed_plan_create(&plan, ctx86, &d));
    assert_non_null(strstr(fsa_last_error(), "fsa_cmp_bwd_dq needs 101632 bytes of shared memory"));
    assert_null(plan);
    fsa_context_destroy(ctx86);
}

/* Fake, well-aligned device addresses: an offline plan never dereferences them. */
static fsa_compressed_fwd_args good_args(int64_t T, int64_t Tc)
{
    fsa_compressed_fwd_args a = FSA_COMPRESSED_FWD_ARGS_INIT;
    a.total_tokens = T;
    a.total_compressed = Tc;
    a.batch = 1;
    a.q = (fsa_tensor){0x7f0000100000ull, HQ * DK, DK};
    a.k = (fsa_tensor){0x7f0000200000ull, HKV * DK, DK};
    a.v = (fsa_tensor){0x7f0000300000ull, HKV * DV, DV};
    a.o = (fsa_tensor){0x7f0000400000ull, HQ * DV, DV};
    a.lse = 0x7f0000500000ull;
    a.cu_seqlens = 0x7f0000600000ull;
    a.cu_seqlens_c = 0x7f0000700000ull;
    a.topk = (fsa_tensor){0x7f0000800000ull, K, T * K};
    return a;
}

#define EXPECT_FWD(want, plan, args) EXPECT_STATUS(want, fsa_compressed_attention_fwd((plan), (args), NULL))

static void test_forward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    fsa_compressed_fwd_args a = good_args(100, 5);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &a);
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, NULL, &a);
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_plan, NULL);
    a.struct_size = 4;
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, g_plan, &a);
    a = good_args(-1, 5);
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, -1);
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, 5), a.batch = 0;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, 5), a.batch = 101;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, 5), a.lse = 0; /* the message names the one argument */
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_plan, &a);
    fsa_test_expect_error("compressed-forward", "lse must not be NULL");
    a = good_args(100, 5), a.lse = 0x7ffffffffffffff0ull; /* its [Hq, T] floats would pass 2^63 bytes */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, 5), a.total_tokens = 0, a.batch = 0; /* compressed tokens of no query token */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a.total_compressed = 0;
    EXPECT_FWD(FSA_STATUS_OK, g_plan, &a);
    a.q.ptr = a.k.ptr = a.v.ptr = a.o.ptr = 0, a.cu_seqlens = a.cu_seqlens_c = a.lse = 0; /* nor any tensor */
    EXPECT_FWD(FSA_STATUS_OK, g_plan, &a);
    a = good_args(100, 5), a.cu_seqlens_c = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_plan, &a);
    a = good_args(100, 0), a.k.ptr = 0; /* no compressed token: k is still a pointer the call needs (compressed.h) */
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_plan, &a);
    fsa_test_expect_error("compressed-forward", "k is NULL");
    a = good_args(100, 5), a.cu_seqlens = 2;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_plan, &a);
    fsa_test_expect_error("compressed-forward", "cu_seqlens (0x2) must be 4-byte aligned");
    a = good_args(100, 5), a.topk.ptr += 2;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_plan, &a);
    a = good_args(100, 5), a.topk.token_stride = -K;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, 5), a.q.ptr += 8;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_plan, &a);
    a = good_args(100, 5), a.v.head_stride = DV + 4;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, g_plan, &a);
    a = good_args(100, 5), a.k.token_stride = -HKV * DK;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    a = good_args(100, 5), a.o.ptr = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, g_plan, &a);
    /* A plan without selection takes no top-k output, and runs without one. */
    a = good_args(100, 5);
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_no_select, &a);
    a.topk.ptr = 0;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan_no_select, &a);
    /* Nothing to do: no device needed. */
    a = good_args(0, 0), a.batch = 0;
    EXPECT_FWD(FSA_STATUS_OK, g_plan, &a);
}

/* Counts at their ends: total_compressed up to INT32_MAX - 1; the query
 * tiles a call's tokens and sequences make (a tile's tokens of each
 * sequence, plus one per sequence) up to a grid's 2^31 - 1, as the
 * workspace query answers. */
static void test_counts_at_their_ends(void **state)
{
    (void)state;
    fsa_compressed_fwd_args a = good_args(100, INT32_MAX - 1);
    a.topk.ptr = 0;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &a);
    a.total_compressed = INT32_MAX;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    const int64_t T = INT32_MAX - 1;
    const int batch = (int)(INT32_MAX - fsa_qt_grid_tiles(T, 0, HQ / HKV)); /* exactly 2^31 - 1 tiles */
    size_t bytes = 1;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_workspace_size(&bytes, g_plan, T, batch));
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_compressed_plan_workspace_size(&bytes, g_plan, T, batch + 1));
    assert_non_null(strstr(fsa_last_error(), "too many query tiles"));
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_compressed_plan_workspace_size(&bytes, g_plan, T, (int)T));
}

/* lse ([Hq, T] floats) and topk (read through its strides) end just below
 * 2^63 bytes: accepted; a float or an entry further: refused, naming them. */
static void test_lse_and_topks_last_entries_must_lie_below_two_to_the_63_bytes(void **state)
{
    (void)state;
    const uint64_t top = UINT64_C(1) << 63;
    fsa_compressed_fwd_args a = good_args(100, 5);
    a.lse = top - 4 * HQ * 100;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &a);
    a.lse += 4;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    assert_non_null(strstr(fsa_last_error(), "lse"));
    a = good_args(100, 5); /* [Hkv, T, K]: the last row starts (T - 1) x K + (Hkv - 1) x T x K entries in */
    a.topk.ptr = top - 4 * ((uint64_t)99 * K + (uint64_t)(HKV - 1) * 100 * K) - 4;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &a);
    a.topk.ptr += 4;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
    assert_non_null(strstr(fsa_last_error(), "topk reaches past 2^63 bytes"));
}

/* k and v hold the compressed rows (total_compressed of them), not the
 * query rows: with one compressed row their token strides are never used,
 * so even a negative one passes; with two it is refused. */
static void test_key_and_value_views_are_checked_over_the_compressed_rows(void **state)
{
    (void)state;
    fsa_compressed_fwd_args a = good_args(100, 1);
    a.k.token_stride = -HKV * DK;
    a.v.token_stride = -HKV * DV;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &a);
    a.total_compressed = 2;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a);
}

/* A plan of a check-mode context also brings the offsets check kernel (plain
 * plans never compile it); its calls still check every argument on the host
 * first, and then need the device. */
static void test_a_check_mode_plan_brings_the_offsets_check_and_its_calls_still_need_a_device(void **state)
{
    (void)state;
    assert_int_equal(fsa_test_cache_count(g_ctx, "offsets_check"), 0);
    fsa_context *ctx = offline_checking("sm_90a", 1);
    assert_non_null(ctx);
    const fsa_compressed_attention_desc d = small_desc();
    fsa_compressed_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_create(&plan, ctx, &d));
    assert_int_equal(fsa_test_cache_count(ctx, "offsets_check"), 1);
    fsa_compressed_fwd_args a = good_args(100, 5);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, plan, &a);
    a.cu_seqlens_c = 2;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, plan, &a);
    fsa_compressed_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static void test_the_workspace_size_is_zero_and_refuses_what_the_call_refuses(void **state)
{
    (void)state;
    size_t bytes = 1;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_workspace_size(&bytes, g_plan, 65536, 4));
    assert_int_equal(bytes, 0);
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_compressed_plan_workspace_size(NULL, g_plan, 1, 1));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_compressed_plan_workspace_size(&bytes, NULL, 1, 1));
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_compressed_plan_workspace_size(&bytes, g_plan, -5, 1));
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_compressed_plan_workspace_size(&bytes, g_plan, 10, 0));
}

static fsa_compressed_bwd_args good_bwd(int64_t T, int64_t Tc);

/* The block selection counts a sequence's compressed positions in int32: at stride 1 a sequence of
 * nearly 2^31 tokens would pass it, so a forward with topk set over such a sequence is refused. The
 * bound is the selection's alone: the same plan's forward without topk, its backward and its workspace
 * queries (query tiles only) are not refused for it. */
static void test_the_selection_refuses_more_compressed_positions_than_int32_counts(void **state)
{
    (void)state;
    fsa_compressed_attention_desc d = small_desc();
    d.kernel_size = 1, d.stride = 1, d.block_size = 64, d.backward = 1;
    fsa_compressed_plan *select = NULL;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_create(&select, g_ctx, &d));
    const int64_t fits = INT32_MAX - FSA_CMP_SEL_KEYS + 1 - 64;
    fsa_compressed_fwd_args a = good_args(fits + 1, fits + 1);
    EXPECT_FWD(FSA_STATUS_UNSUPPORTED, select, &a);
    fsa_test_expect_error("compressed-forward", "the block selection counts compressed positions in int32");
    a = good_args(fits, fits);
    const fsa_status at_bound = fsa_compressed_attention_fwd(select, &a, NULL);
    if (at_bound != FSA_STATUS_NO_DEVICE) /* another bound may refuse it (the persistent ring), not this one */
        assert_null(strstr(fsa_last_error(), "block selection"));
    a = good_args(fits + 1, fits + 1), a.topk = (fsa_tensor){0, 0, 0};
    if (fsa_compressed_attention_fwd(select, &a, NULL) != FSA_STATUS_NO_DEVICE)
        assert_null(strstr(fsa_last_error(), "block selection"));
    fsa_compressed_bwd_args b = good_bwd(fits + 1, fits + 1); /* refused later (its workspace), not for this */
    if (fsa_compressed_attention_bwd(select, &b, NULL) != FSA_STATUS_NO_DEVICE)
        assert_null(strstr(fsa_last_error(), "block selection"));
    size_t bytes = 1;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_workspace_size(&bytes, select, INT32_MAX - 1, 1));
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_workspace_size_bwd(&bytes, select, INT32_MAX - 1, 1));
    fsa_compressed_plan_destroy(select);
}

static void test_argument_structs_from_the_first_version_on_are_accepted(void **state)
{
    (void)state;
    assert_true(FSA_COMPRESSED_FWD_ARGS_FIRST_SIZE <= sizeof(fsa_compressed_fwd_args));
    assert_true(FSA_COMPRESSED_ATTENTION_DESC_FIRST_SIZE <= sizeof(fsa_compressed_attention_desc));
    fsa_compressed_fwd_args a = good_args(100, 5);
    a.struct_size = FSA_COMPRESSED_FWD_ARGS_FIRST_SIZE;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &a);
    a.struct_size = sizeof a + 8;
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, g_plan, &a);
}

static fsa_compressed_bwd_args good_bwd(int64_t T, int64_t Tc)
{
    const fsa_compressed_fwd_args f = good_args(T, Tc);
    fsa_compressed_bwd_args a = FSA_COMPRESSED_BWD_ARGS_INIT;
    a.total_tokens = T;
    a.total_compressed = Tc;
    a.batch = 1;
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o;
    a.dout = (fsa_tensor){0x7f0000900000ull, HQ * DV, DV};
    a.dq = (fsa_tensor){0x7f0000a00000ull, HQ * DK, DK};
    a.dk = (fsa_tensor){0x7f0000b00000ull, HKV * DK, DK};
    a.dv = (fsa_tensor){0x7f0000c00000ull, HKV * DV, DV};
    a.lse = f.lse, a.cu_seqlens = f.cu_seqlens, a.cu_seqlens_c = f.cu_seqlens_c;
    a.workspace = 0x7f0001000000ull;
    assert_int_equal(fsa_compressed_plan_workspace_size_bwd(&a.workspace_bytes, g_plan_bwd, T, 1), FSA_STATUS_OK);
    return a;
}

#define EXPECT_BWD(want, plan, args) EXPECT_STATUS(want, fsa_compressed_attention_bwd((plan), (args), NULL))

static void test_backward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    fsa_compressed_bwd_args a = good_bwd(100, 5);
    assert_int_equal(a.workspace_bytes, 2 * 1792); /* delta, then a gated call's lse: 4 x 100 x 4 bytes, rounded up */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_plan_bwd, &a);
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &a); /* made without backward */
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, g_plan_bwd, NULL);
    a.struct_size = 12;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_plan_bwd, &a);
    /* A size ending inside an appended field is refused first, whatever else the call holds. */
    a = good_bwd(100, 5), a.struct_size = offsetof(fsa_compressed_bwd_args, dq_add) + 4;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_plan_bwd, &a);
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_plan, &a);
    a = good_bwd(100, 5), a.workspace_bytes -= 1;
    EXPECT_BWD(FSA_STATUS_WORKSPACE_TOO_SMALL, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.workspace += 16;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.dk.ptr = 0;
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.dout.head_stride = DV + 2;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.dq.token_stride = -HQ * DK;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.lse = 0;
    EXPECT_BWD(FSA_STATUS_NULL_POINTER, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.total_compressed = -3;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    size_t bytes = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_compressed_plan_workspace_size_bwd(&bytes, g_plan, 100, 1));
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_compressed_plan_workspace_size_bwd(&bytes, g_plan_bwd, 100, 0));
    EXPECT_STATUS(FSA_STATUS_OK, fsa_compressed_plan_workspace_size_bwd(&bytes, g_plan_bwd, 0, 0));
    assert_int_equal(bytes, 0);
}

/* dq_add (appended after the first version): dq itself is accepted, a
 * misaligned or negatively strided one refused, a struct_size ending inside
 * it refused, and a first-version struct ignores whatever lies past it. */
static void test_dq_add_takes_dq_rules_and_a_first_version_struct_has_none(void **state)
{
    (void)state;
    fsa_compressed_bwd_args a = good_bwd(100, 5);
    a.dq_add = a.dq; /* in place */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_plan_bwd, &a);
    a.dq_add.ptr += 8;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, g_plan_bwd, &a);
    assert_non_null(strstr(fsa_last_error(), "dq_add"));
    a = good_bwd(100, 5), a.dq_add = a.dq, a.dq_add.token_stride = -HQ * DK;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.dq_add = a.dq, a.dq_add.ptr += 2 * DK; /* dq one head on: overlaps, not dq */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    assert_non_null(strstr(fsa_last_error(), "dq_add overlaps dq"));
    a = good_bwd(100, 5), a.dq_add = a.dq, a.dq_add.token_stride = 2 * HQ * DK; /* same start, other rows */
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.dq_add = a.dq, a.dq_add.ptr += 2 * 100 * HQ * DK; /* right after dq's last row */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.struct_size = offsetof(fsa_compressed_bwd_args, dq_add) + 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.struct_size = FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE;
    a.dq_add = (fsa_tensor){0x7f0000d00002ull, -1, 3}; /* garbage a first-version caller never wrote */
    assert_true(offsetof(fsa_compressed_bwd_args, dq_add) >= FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE);
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_plan_bwd, &a);
}

/* gate and gate_grad (appended): float32 [T, Hq] views; a gate may repeat
 * a value through a stride of 0, the written gate_grad may not; misaligned,
 * negatively strided or cut by struct_size: refused, naming the field. */
static void test_the_gate_and_its_gradient_are_float_views_and_the_gradient_has_its_own_rows(void **state)
{
    (void)state;
    fsa_compressed_bwd_args a = good_bwd(100, 5);
    a.gate = (fsa_tensor){0x7f0000e00000ull, 0, 1}; /* one gate per head for every token */
    a.gate_grad = (fsa_tensor){0x7f0000f00000ull, HQ, 1};
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_plan_bwd, &a);
    a.gate.ptr += 2;
    EXPECT_BWD(FSA_STATUS_MISALIGNED, g_plan_bwd, &a);
    assert_non_null(strstr(fsa_last_error(), "gate"));
    a.gate.ptr -= 2, a.gate.token_stride = -HQ;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    a = good_bwd(100, 5), a.gate_grad = (fsa_tensor){0x7f0000f00000ull, HQ, 0};
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &a);
    assert_non_null(strstr(fsa_last_error(), "gate_grad"));
    a = good_bwd(100, 5), a.struct_size = offsetof(fsa_compressed_bwd_args, gate_grad) + 8;
    EXPECT_BWD(FSA_STATUS_STRUCT_SIZE, g_plan_bwd, &a);
}

/* The views a call writes (o and topk; dq, dk, dv and gate_grad) must not
 * give two rows the same bytes: refused on the host, naming the view. A
 * selection shared by the KV heads (head stride 0) is what the selected
 * attention may read, but the compressed forward cannot write it. */
static void test_written_views_whose_rows_overlap_are_refused(void **state)
{
    (void)state;
    fsa_compressed_fwd_args f = good_args(100, 5);
    f.topk = (fsa_tensor){0x7f0000800000ull, HKV * K, K}; /* [T, Hkv, K] */
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, g_plan, &f);
    f.topk.head_stride = 0;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &f);
    assert_non_null(strstr(fsa_last_error(), "topk is written"));
    f = good_args(100, 5), f.topk.token_stride = K / 2;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &f);
    f = good_args(100, 5), f.o.token_stride = DV; /* [T, Hq, Dv] with token t's heads 1.. on token t + 1 */
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, g_plan, &f);
    assert_non_null(strstr(fsa_last_error(), "o is written"));
    fsa_compressed_bwd_args b = good_bwd(100, 5);
    b.dk.head_stride = 0;
    EXPECT_BWD(FSA_STATUS_INVALID_ARGUMENT, g_plan_bwd, &b);
    assert_non_null(strstr(fsa_last_error(), "dk is written"));
    b = good_bwd(100, 5), b.dout.token_stride = 0; /* read only */
    EXPECT_BWD(FSA_STATUS_NO_DEVICE, g_plan_bwd, &b);
}

/* The persistent forward (sm_90a) counts a CTA's ring items in int: a call whose busiest CTA would pass
 * 2^31 key stages (83 million tokens compressed with stride 1, one head) is refused, not left to hang. */
static void test_a_forward_whose_persistent_ctas_pass_int32_stages_is_refused(void **state)
{
    (void)state;
    fsa_compressed_attention_desc d = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    d.num_q_heads = 1, d.num_kv_heads = 1, d.head_dim = 128, d.value_dim = 128;
    d.kernel_size = 1, d.stride = 1, d.block_size = 16, d.top_k = 0;
    fsa_compressed_plan *plan = NULL;
    assert_int_equal(fsa_compressed_plan_create(&plan, g_ctx, &d), FSA_STATUS_OK);
    fsa_compressed_fwd_args a = FSA_COMPRESSED_FWD_ARGS_INIT;
    a.total_tokens = a.total_compressed = 83452992, a.batch = 1;
    a.q = (fsa_tensor){(uint64_t)1 << 40, 128, 128};
    a.k = (fsa_tensor){(uint64_t)2 << 40, 128, 128};
    a.v = (fsa_tensor){(uint64_t)3 << 40, 128, 128};
    a.o = (fsa_tensor){(uint64_t)4 << 40, 128, 128};
    a.lse = (uint64_t)5 << 40;
    a.cu_seqlens = (uint64_t)6 << 40, a.cu_seqlens_c = (uint64_t)7 << 40;
    /* Offline there is no grid to size (the call cannot launch): the device's check decides. */
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    /* With an H100's 132 SMs, the busiest CTA passes 2^31 stages. */
    g_ctx->sm_count = 132;
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("compressed-forward", "32-bit count of its ring");
    a.total_tokens = a.total_compressed = 8192; /* a short call of the same plan passes every check */
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    /* A tile's key stream is at most the compressed positions of one sequence of the call's tokens (T at
     * stride 1), whatever total_compressed says: the longest call that fits is 59011968 tokens, one more
     * token is one stage more per job. */
    a.total_tokens = 59011968, a.total_compressed = a.total_tokens + 1;
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_NO_DEVICE);
    a.total_tokens += 1, a.total_compressed += 1;
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_UNSUPPORTED);
    fsa_compressed_plan_destroy(plan);
    g_ctx->sm_count = 0; /* offline again */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptors_outside_the_supported_shapes_are_refused_with_the_field_named),
        cmocka_unit_test(test_the_ends_of_each_descriptor_range_pass_every_check),
        cmocka_unit_test(test_a_plan_whose_kernels_need_more_shared_memory_than_the_target_has_is_unsupported),
        cmocka_unit_test(test_forward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_the_selection_refuses_more_compressed_positions_than_int32_counts),
        cmocka_unit_test(test_key_and_value_views_are_checked_over_the_compressed_rows),
        cmocka_unit_test(test_counts_at_their_ends),
        cmocka_unit_test(test_lse_and_topks_last_entries_must_lie_below_two_to_the_63_bytes),
        cmocka_unit_test(test_a_check_mode_plan_brings_the_offsets_check_and_its_calls_still_need_a_device),
        cmocka_unit_test(test_the_workspace_size_is_zero_and_refuses_what_the_call_refuses),
        cmocka_unit_test(test_backward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_dq_add_takes_dq_rules_and_a_first_version_struct_has_none),
        cmocka_unit_test(test_the_gate_and_its_gradient_are_float_views_and_the_gradient_has_its_own_rows),
        cmocka_unit_test(test_argument_structs_from_the_first_version_on_are_accepted),
        cmocka_unit_test(test_written_views_whose_rows_overlap_are_refused),
        cmocka_unit_test(test_a_forward_whose_persistent_ctas_pass_int32_stages_is_refused),
        cmocka_unit_test(test_the_small_layout_environment_makes_a_plan_compile_the_small_kernels),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
