/* The gated sum's calls on an offline sm_90a plan (no GPU; its kernels
 * compile with NVRTC): every argument is checked on the host, so a bad one
 * comes back as a status naming it, and good ones get as far as needing a
 * device. The kernels' results are checked in tests/gpu/test_gate.c. */
#include "api_validation_fixture.h"

#define T 100
#define H 4
#define DV 64

static fsa_context *g_ctx;
static fsa_gate_plan *g_plan;

/* Aligned device addresses that are never dereferenced. */
#define AT(n) (0x7f0000000000ull + ((uint64_t)(n) << 20))

static fsa_gate_args good_args(void)
{
    fsa_gate_args a = FSA_GATE_ARGS_INIT;
    a.total_tokens = T;
    a.num_heads = H;
    for (int x = 0; x < 3; x++) {
        a.out[x] = (fsa_tensor){AT(1 + x), H * DV, DV};
        a.gate[x] = (fsa_tensor){AT(4 + x), H, 1};
        a.dout_branch[x] = (fsa_tensor){AT(7 + x), H * DV, DV};
    }
    a.o = (fsa_tensor){AT(10), H * DV, DV};
    a.dout = (fsa_tensor){AT(11), H * DV, DV};
    a.dgate = AT(12);
    return a;
}

static void test_good_arguments_need_a_device_and_no_tokens_need_nothing(void **state)
{
    (void)state;
    fsa_gate_args a = good_args();
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_fwd(g_plan, &a, NULL));
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_bwd(g_plan, &a, NULL));
    for (int x = 0; x < 3; x++) a.gate[x] = (fsa_tensor){AT(4), 0, 0}; /* one number for every row */
    a.dout_branch[1].ptr = 0, a.dgate = 0;                               /* not wanted */
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_bwd(g_plan, &a, NULL));
    a = good_args(), a.total_tokens = 0, a.o.ptr = 0;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_gate_fwd(g_plan, &a, NULL));
    for (int x = 0; x < 3; x++) a.out[x].ptr = a.gate[x].ptr = 0; /* no tensor at all (gate.h) */
    EXPECT_STATUS(FSA_STATUS_OK, fsa_gate_fwd(g_plan, &a, NULL));
}

static void test_bad_arguments_are_refused_naming_them(void **state)
{
    (void)state;
    fsa_gate_args a = good_args();
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_gate_fwd(NULL, &a, NULL));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_gate_fwd(g_plan, NULL, NULL));
    a.num_heads = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_fwd(g_plan, &a, NULL));
    a = good_args(), a.total_tokens = -1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_fwd(g_plan, &a, NULL));
    a = good_args(), a.out[1].ptr += 2;
    EXPECT_STATUS(FSA_STATUS_MISALIGNED, fsa_gate_fwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "out[1]"));
    a = good_args(), a.gate[2].token_stride = -1;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_bwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "gate[2]"));
    a = good_args(), a.o.ptr = 0;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_gate_fwd(g_plan, &a, NULL));
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_bwd(g_plan, &a, NULL)); /* the backward does not touch o */
    a = good_args(), a.dgate += 2;
    EXPECT_STATUS(FSA_STATUS_MISALIGNED, fsa_gate_bwd(g_plan, &a, NULL));
    a = good_args(), a.dgate = 0x7ffffffffffffff0ull; /* its [3][T][H] floats would pass 2^63 bytes */
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_bwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "dgate's")); /* its shape, not strides it has none of */
    assert_null(strstr(fsa_last_error(), "stride"));
    a = good_args(), a.struct_size = 8;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, fsa_gate_fwd(g_plan, &a, NULL));
}

/* dout_branch belongs to the backward: the forward does not look at it,
 * whatever it holds; the backward reads dout, which it needs. */
static void test_the_forward_ignores_the_backwards_views_and_the_backward_needs_dout(void **state)
{
    (void)state;
    fsa_gate_args a = good_args();
    a.dout_branch[0].ptr += 2, a.dout_branch[1].token_stride = -1;
    a.dout.ptr = 0;
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_fwd(g_plan, &a, NULL));
    a = good_args(), a.dout.ptr = 0;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_gate_bwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "dout is NULL"));
}

/* dgate holds three planes of T x H floats: its last one must lie below
 * 2^63 bytes too. */
static void test_dgates_third_plane_must_lie_below_two_to_the_63_bytes(void **state)
{
    (void)state;
    fsa_gate_args a = good_args();
    a.dgate = (UINT64_C(1) << 63) - 4 * 3 * T * H; /* the last float at 2^63 - 4 */
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_bwd(g_plan, &a, NULL));
    a.dgate += 4 * T * H; /* the first two planes still fit, the third does not */
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_bwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "dgate's"));
}

/* o (forward) and dout_branch (backward) are written: two rows on the same
 * bytes are refused; the branches' outputs and dout are only read. */
static void test_written_views_whose_rows_overlap_are_refused(void **state)
{
    (void)state;
    fsa_gate_args a = good_args();
    a.o.head_stride = DV / 2;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_fwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "o is written"));
    a = good_args(), a.dout_branch[2].token_stride = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_bwd(g_plan, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "dout_branch[2] is written"));
    a = good_args(), a.out[0].token_stride = 0, a.dout.head_stride = 0;
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_fwd(g_plan, &a, NULL));
    EXPECT_STATUS(FSA_STATUS_NO_DEVICE, fsa_gate_bwd(g_plan, &a, NULL));
}

static void test_a_plan_refuses_value_dims_that_are_not_multiples_of_16_from_16_to_256(void **state)
{
    (void)state;
    const int bad[] = {8, 24, 272, -16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fsa_gate_desc d = FSA_GATE_DESC_INIT;
        d.value_dim = bad[i];
        fsa_gate_plan *plan = (fsa_gate_plan *)&plan;
        assert_int_equal(fsa_gate_plan_create(&plan, g_ctx, &d), FSA_STATUS_UNSUPPORTED);
        assert_null(plan);
        assert_non_null(strstr(fsa_last_error(), "value_dim"));
    }
}

static void test_a_plan_refuses_a_dtype_that_is_neither_bf16_nor_f16(void **state)
{
    (void)state;
    const int bad[] = {7, -1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fsa_gate_desc d = FSA_GATE_DESC_INIT;
        d.value_dim = DV;
        d.dtype = (fsa_dtype)bad[i];
        fsa_gate_plan *plan = (fsa_gate_plan *)&plan;
        EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_gate_plan_create(&plan, g_ctx, &d));
        assert_null(plan);
        assert_non_null(strstr(fsa_last_error(), "dtype"));
    }
}

/* Value dims of 16 and 256 are plans (on a context that compiles nothing,
 * they stop where their first kernel would be compiled). */
static void test_a_plan_takes_value_dims_of_16_and_256(void **state)
{
    (void)state;
    fsa_context *ctx = checks_only_context("sm_90a");
    const int ends[] = {16, 256};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        fsa_gate_desc d = FSA_GATE_DESC_INIT;
        d.value_dim = ends[i];
        fsa_gate_plan *plan = NULL;
        EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_gate_plan_create(&plan, ctx, &d));
        assert_null(plan);
    }
    fsa_context_destroy(ctx);
}

static int setup(void **state)
{
    (void)state;
    const fsa_context_options o = offline_options("sm_90a");
    if (fsa_context_create(&g_ctx, &o) != FSA_STATUS_OK) return -1;
    fsa_gate_desc d = FSA_GATE_DESC_INIT;
    d.value_dim = DV;
    return fsa_gate_plan_create(&g_plan, g_ctx, &d) == FSA_STATUS_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fsa_gate_plan_destroy(g_plan);
    fsa_context_destroy(g_ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_arguments_need_a_device_and_no_tokens_need_nothing),
        cmocka_unit_test(test_bad_arguments_are_refused_naming_them),
        cmocka_unit_test(test_written_views_whose_rows_overlap_are_refused),
        cmocka_unit_test(test_a_plan_refuses_value_dims_that_are_not_multiples_of_16_from_16_to_256),
        cmocka_unit_test(test_the_forward_ignores_the_backwards_views_and_the_backward_needs_dout),
        cmocka_unit_test(test_dgates_third_plane_must_lie_below_two_to_the_63_bytes),
        cmocka_unit_test(test_a_plan_refuses_a_dtype_that_is_neither_bf16_nor_f16),
        cmocka_unit_test(test_a_plan_takes_value_dims_of_16_and_256),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
