/* The selected-attention calls and the plan queries answer bad arguments
 * with their documented status, on offline sm_90a plans (no GPU needed):
 * every argument check runs before the missing device is noticed, so a call
 * whose arguments pass them all ends with FSA_STATUS_NO_DEVICE. The
 * workspace-size queries refuse what the calls refuse, and a problem too
 * large to index is refused instead of wrapping around. The plans' kernels
 * compile once, into a cache directory of this test. */
#include "testing.h"

#include "base/struct_size.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET "sm_90a"
#define HQ 2 /* the small shape: D 64, G 2, blocks of 64, top-k 4 */
#define HKV 1
#define D 64
#define K 4

static char *g_dir;
static fsa_context *g_ctx;
static fsa_plan *g_auto, *g_nsa, *g_bwd, *g_limited;

/* Runs `call`, expects `want`, and checks the thread's error record agrees
 * and says something. */
#define EXPECT_STATUS(want, call)                                                                          \
    do {                                                                                                   \
        fsa_status st_ = (call);                                                                           \
        if (st_ != (want))                                                                                 \
            fail_msg("line %d: %s returned %s, expected %s (%s)", __LINE__, #call, fsa_status_name(st_),  \
                     fsa_status_name(want), fsa_last_error());                                            \
        if ((want) != FSA_STATUS_OK) {                                                                     \
            assert_int_equal(fsa_last_error_info()->status, (want));                                       \
            assert_true(fsa_last_error_info()->message[0] != '\0');                                        \
        }                                                                                                  \
    } while (0)

#define EXPECT_FWD(want, plan, args) EXPECT_STATUS(want, fsa_selected_attention_fwd((plan), (args), NULL))
#define EXPECT_BWD(want, plan, args) EXPECT_STATUS(want, fsa_selected_attention_bwd((plan), (args), NULL))

static fsa_selected_attention_desc small_desc(fsa_algorithm algorithm, uint64_t workspace_limit, int backward)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.head_dim = D;
    d.num_q_heads = HQ;
    d.num_kv_heads = HKV;
    d.block_size = 64;
    d.top_k = K;
    d.algorithm = algorithm;
    d.workspace_limit = workspace_limit;
    d.backward = backward;
    return d;
}

static fsa_plan *plan_of(const fsa_selected_attention_desc *d)
{
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, g_ctx, d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return NULL;
    }
    return plan;
}

static int group_setup(void **state)
{
    (void)state;
    g_dir = fsa_test_mkdtemp("fsa_attention_arguments");
    if (g_dir == NULL) return -1;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = TARGET;
    o.cache_dir = g_dir;
    o.log = -1;
    if (fsa_context_create(&g_ctx, &o) != FSA_STATUS_OK) return -1;
    fsa_selected_attention_desc d = small_desc(FSA_ALGORITHM_AUTO, 0, 0);
    g_auto = plan_of(&d);
    d = small_desc(FSA_ALGORITHM_NSA, 0, 0);
    g_nsa = plan_of(&d);
    d = small_desc(FSA_ALGORITHM_AUTO, 0, 1);
    g_bwd = plan_of(&d);
    d = small_desc(FSA_ALGORITHM_FSA, 64 * 1024, 1);
    g_limited = plan_of(&d);
    return g_auto && g_nsa && g_bwd && g_limited ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fsa_plan_destroy(g_auto);
    fsa_plan_destroy(g_nsa);
    fsa_plan_destroy(g_bwd);
    fsa_plan_destroy(g_limited);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Fake, well-aligned device addresses: an offline plan never dereferences
 * them. Packed [T, H, D] tensors; top-k as [Hkv, T, K]. */
static fsa_tensor rows(uint64_t ptr, int heads) { return (fsa_tensor){ptr, (int64_t)heads * D, D}; }

static fsa_fwd_args good_fwd(const fsa_plan *plan, int64_t T)
{
    fsa_fwd_args a = FSA_FWD_ARGS_INIT;
    a.total_tokens = T;
    a.batch = 1;
    a.max_seqlen = (int)T;
    a.q = rows(0x7f0000100000ull, HQ);
    a.k = rows(0x7f0000200000ull, HKV);
    a.v = rows(0x7f0000300000ull, HKV);
    a.o = rows(0x7f0000400000ull, HQ);
    a.topk = (fsa_tensor){0x7f0000500000ull, K, T * K};
    a.cu_seqlens = 0x7f0000600000ull;
    a.lse = 0x7f0000700000ull;
    a.workspace = 0x7f0000800000ull;
    size_t ws = 0;
    assert_int_equal(fsa_plan_workspace_size(&ws, plan, T, 1), FSA_STATUS_OK);
    a.workspace_bytes = ws;
    return a;
}

static fsa_bwd_args good_bwd(const fsa_plan *plan, int64_t T)
{
    const fsa_fwd_args f = good_fwd(g_auto, T);
    fsa_bwd_args a = FSA_BWD_ARGS_INIT;
    a.total_tokens = T;
    a.batch = 1;
    a.max_seqlen = (int)T;
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.topk = f.topk;
    a.dout = rows(0x7f0000900000ull, HQ);
    a.dq = rows(0x7f0000a00000ull, HQ);
    a.dk = rows(0x7f0000b00000ull, HKV);
    a.dv = rows(0x7f0000c00000ull, HKV);
    a.cu_seqlens = f.cu_seqlens;
    a.lse = f.lse;
    a.workspace = 0x7f0001000000ull;
    size_t ws = 0;
    assert_int_equal(fsa_plan_workspace_size_bwd(&ws, plan, T, 1), FSA_STATUS_OK);
    a.workspace_bytes = ws;
    return a;
}

/* ------------------------------------------------------------ forward and backward arguments */

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

/* ------------------------------------------------------------ struct sizes */

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
}

static void test_an_older_shorter_descriptor_makes_the_same_plan(void **state)
{
    (void)state;
    _Alignas(16) unsigned char buf[sizeof(fsa_selected_attention_desc) + 64];
    const fsa_selected_attention_desc d = small_desc(FSA_ALGORITHM_AUTO, 0, 0);
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

/* ------------------------------------------------------------ workspace sizes and paths */

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
    /* The largest token count still gets a size within the limit's reach. */
    size_t w = 0;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size(&w, g_limited, INT32_MAX - 1, 1));
    assert_true(w > 0);
}

static fsa_plan *plan_with_kv_heads(int hkv, int backward, uint64_t workspace_limit)
{
    fsa_selected_attention_desc d = small_desc(FSA_ALGORITHM_AUTO, workspace_limit, backward);
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
    const int hkv = (1 << 29) - 1; /* x 4 slots: one token's list entries still fit int32 */
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
     * head's tables; sizes, never wrapped-around ones. */
    plan = plan_with_kv_heads(hkv, 1, 0);
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size_bwd(&w, plan, T, 1));
    assert_true((double)w >= (double)T * 2 * D * 4);
    st = fsa_plan_workspace_size(&w, plan, T, (int)T);
    if (st != FSA_STATUS_UNSUPPORTED && !(st == FSA_STATUS_OK && (double)w >= tables / hkv))
        fail_msg("T %lld in %lld sequences, %d KV heads, default cap: %s, %zu bytes", (long long)T, (long long)T,
                 hkv, fsa_status_name(st), w);
    fsa_fwd_args a = good_fwd(g_auto, 1);
    a.total_tokens = T;
    a.batch = (int)T;
    a.workspace_bytes = SIZE_MAX;
    fsa_status call = fsa_selected_attention_fwd(plan, &a, NULL);
    assert_int_equal(call == FSA_STATUS_NO_DEVICE ? FSA_STATUS_OK : call, st);
    /* Smaller problems of the same plan are fine (100 tokens: the FSA order, with a workspace). */
    EXPECT_STATUS(FSA_STATUS_OK, fsa_plan_workspace_size(&w, plan, 100, 1));
    assert_true(w > 0);
    fsa_plan_destroy(plan);

    /* 2^29 KV heads x 4 slots: one token's list entries no longer fit int32. */
    plan = plan_with_kv_heads(1 << 29, 1, 0);
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_workspace_size(&w, plan, 1, 1));
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, fsa_plan_workspace_size_bwd(&w, plan, 1, 1));
    a = good_fwd(g_auto, 1);
    a.workspace_bytes = SIZE_MAX;
    EXPECT_FWD(FSA_STATUS_UNSUPPORTED, plan, &a);
    fsa_plan_destroy(plan);
}

static void test_path_queries_refuse_token_counts_the_calls_refuse(void **state)
{
    (void)state;
    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    const int64_t bad[] = {-5, -1, INT32_MAX, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_algorithm(&a, NULL, g_auto, bad[i]));
        EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_plan_algorithm_bwd(&a, NULL, g_bwd, bad[i]));
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
        cmocka_unit_test(test_forward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_negative_strides_are_invalid_arguments_and_unaligned_ones_misaligned),
        cmocka_unit_test(test_backward_argument_checks_come_before_the_device_check),
        cmocka_unit_test(test_argument_structs_take_every_size_from_the_first_version_to_the_current_one),
        cmocka_unit_test(test_an_older_shorter_descriptor_makes_the_same_plan),
        cmocka_unit_test(test_workspace_sizes_refuse_what_the_calls_refuse),
        cmocka_unit_test(test_a_huge_token_count_under_a_workspace_limit_is_refused_without_overflow),
        cmocka_unit_test(test_absurd_head_counts_are_unsupported_instead_of_wrapping_around),
        cmocka_unit_test(test_path_queries_refuse_token_counts_the_calls_refuse),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
