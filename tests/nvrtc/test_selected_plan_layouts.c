/* Selected-attention plans on offline contexts (no GPU) compile the kernels
 * of their layouts (fsa_sel_layout_fit): on sm_86 (101376 bytes a block)
 * head dims of 192 and 256, and the FSA order at 128 / 128, take the
 * one-stage kernels where the default does not fit, named and keyed by the layout's bit (_sl1 the FSA-order forward,
 * _sl2 the NSA order, _sl4 the backward main kernel, _sl8 the NSA-order dq);
 * a kernel whose default fits keeps its name (no _sl field), and sm_90a
 * keeps every default unless FSA_SEL_LAYOUT_ONE_STAGE=1 asks. The plans
 * share one cache directory. */
#include "jit_cache_fixture.h"

#include <stdlib.h>
#include <string.h>

static char *g_dir;

static int group_setup(void **state)
{
    (void)state;
    g_dir = fsa_test_mkdtemp("fsa_sel_layouts");
    return g_dir ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fsa_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* A plan of Dk / Dv, blocks of bk keys, group g and `algorithm` (with its backward when `backward`) on
 * `ctx`, its kernels compiled into the shared cache. */
static fsa_plan *plan_in(fsa_context *ctx, int dk, int dv, int bk, int g, fsa_algorithm algorithm, int backward)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.head_dim = dk, d.value_dim = dv, d.block_size = bk, d.num_q_heads = g, d.num_kv_heads = 1, d.top_k = 4;
    d.algorithm = algorithm, d.backward = backward;
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, ctx, &d) != FSA_STATUS_OK)
        fail_msg("%s %d / %d bk %d G %d: %s", fsa_context_target(ctx), dk, dv, bk, g, fsa_last_error());
    return plan;
}

/* The same plan on an offline `target` context, destroyed once compiled; the context stays open for
 * lookups. */
static fsa_context *plan_on(const char *target, int dk, int dv, int bk, int g, fsa_algorithm algorithm, int backward)
{
    fsa_context *ctx = context_or_fail(g_dir, target, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_plan_destroy(plan_in(ctx, dk, dv, bk, g, algorithm, backward));
    return ctx;
}

static void expect_kernel(fsa_context *ctx, const char *prefix, const char *part)
{
    if (!fsa_test_cache_has_kernel(ctx, prefix, part)) fail_msg("no %s kernel with %s for %s", prefix, part, fsa_context_target(ctx));
}

/* No kernel of that prefix with any layout field: "_sl" followed by a digit. */
static void expect_no_layout(fsa_context *ctx, const char *prefix)
{
    static const char *parts[] = {"_sl1", "_sl2", "_sl4", "_sl8"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (fsa_test_cache_has_kernel(ctx, prefix, parts[i]))
            fail_msg("%s kernel with %s for %s", prefix, parts[i], fsa_context_target(ctx));
}

/* 192 / 192 at blocks of 64 on sm_86: both forward orders in one stage (87040 and 57600 bytes), the
 * backward main kernel in its default (32-key slices). */
static void test_sm_86_compiles_one_stage_forwards_at_192(void **state)
{
    (void)state;
    fsa_context *ctx = plan_on("sm_86", 192, 192, 64, 4, FSA_ALGORITHM_AUTO, 1);
    expect_kernel(ctx, "sel_fwd_main_bf16_d192_dv192_g4_bk64", "_sl1");
    expect_kernel(ctx, "sel_fwd_nsa_bf16_d192_dv192_g4_bk64", "_sl2");
    expect_kernel(ctx, "sel_bwd_main_bf16_d192_dv192_g4_bk64_ks32", "_ks32");
    expect_no_layout(ctx, "sel_bwd_main_bf16_d192");
    fsa_context_destroy(ctx);
}

/* 256 / 256 at blocks of 64 on sm_86: the NSA-order forward in one stage (76032 bytes; the FSA order does
 * not fit one query tile), the backward in one Q/dO stage at 32 keys (86784 bytes at G 16); a forced NSA
 * plan's dq in one stage (84480 bytes). */
static void test_sm_86_compiles_one_stage_nsa_forward_and_backward_at_256(void **state)
{
    (void)state;
    fsa_context *ctx = plan_on("sm_86", 256, 256, 64, 16, FSA_ALGORITHM_NSA, 1);
    expect_kernel(ctx, "sel_fwd_nsa_bf16_d256_dv256_g16_bk64", "_sl2");
    expect_kernel(ctx, "sel_bwd_main_bf16_d256_dv256_g16_bk64_ks32", "_sl4");
    expect_kernel(ctx, "sel_bwd_dq_nsa_bf16_d256_dv256_g16_bk64", "_sl8");
    expect_no_layout(ctx, "sel_fwd_main_bf16_d256");
    fsa_context_destroy(ctx);
}

/* 128 / 128 at blocks of 64 on sm_86: the FSA order's default needs 114688 bytes, its one query tile 79872;
 * an AUTO plan compiles that beside the NSA order's default and runs the FSA order past short inputs. */
static void test_sm_86_auto_runs_the_fsa_orders_one_query_tile_at_128(void **state)
{
    (void)state;
    fsa_context *ctx = context_or_fail(g_dir, "sm_86", FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_plan *plan = plan_in(ctx, 128, 128, 64, 4, FSA_ALGORITHM_AUTO, 0);
    fsa_algorithm a;
    const char *why = NULL;
    assert_int_equal(fsa_plan_algorithm(&a, &why, plan, 65536), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_FSA);
    fsa_plan_destroy(plan);
    expect_kernel(ctx, "sel_fwd_main_bf16_d128_dv128_g4_bk64", "_sl1");
    expect_no_layout(ctx, "sel_fwd_nsa_bf16_d128_dv128_g4_bk64");
    fsa_context_destroy(ctx);
}

/* Past G 64 only the NSA order runs, whatever the FSA order's bytes: 192 / 192 at blocks of 32 and G 128 on
 * sm_86 (the NSA order's default 110592 bytes, one stage 59136) plans with AUTO in one stage. */
static void test_sm_86_auto_past_group_64_takes_the_nsa_orders_one_stage(void **state)
{
    (void)state;
    fsa_context *ctx = plan_on("sm_86", 192, 192, 32, 128, FSA_ALGORITHM_AUTO, 0);
    expect_kernel(ctx, "sel_fwd_nsa_bf16_d192_dv192_g128_bk32", "_sl2");
    fsa_context_destroy(ctx);
}

/* sm_90a holds every default: a 192 / 192 plan compiles no layout; FSA_SEL_LAYOUT_ONE_STAGE=1 (with
 * FSA_WGMMA=0: the mma.sync forward) gives it the one-stage kernels the GPU tests run there. */
static void test_sm_90a_keeps_the_defaults_unless_the_override_asks(void **state)
{
    (void)state;
    fsa_context *ctx = plan_on("sm_90a", 192, 192, 64, 4, FSA_ALGORITHM_AUTO, 0);
    expect_no_layout(ctx, "sel_fwd_main_bf16_d192_dv192_g4_bk64");
    expect_no_layout(ctx, "sel_fwd_nsa_bf16_d192_dv192_g4_bk64");
    fsa_context_destroy(ctx);
    char *one = fsa_test_env_swap("FSA_SEL_LAYOUT_ONE_STAGE", "1");
    char *wg = fsa_test_env_swap("FSA_WGMMA", "0");
    ctx = plan_on("sm_90a", 192, 192, 64, 4, FSA_ALGORITHM_AUTO, 0);
    fsa_test_env_restore("FSA_WGMMA", wg);
    fsa_test_env_restore("FSA_SEL_LAYOUT_ONE_STAGE", one);
    expect_kernel(ctx, "sel_fwd_main_bf16_d192_dv192_g4_bk64", "_sl1");
    expect_kernel(ctx, "sel_fwd_nsa_bf16_d192_dv192_g4_bk64", "_sl2");
    fsa_context_destroy(ctx);
}

/* The override's one stage where the default fits keeps the default's key slices, so its backward gives
 * the same bits: 192 / 192 at blocks of 128 on sm_80 slices 64 keys in the default (128 would need 180352
 * bytes) and still 64 in one stage, though 128 would fit there (154752). */
static void test_the_override_keeps_the_backward_key_slices(void **state)
{
    (void)state;
    char *one = fsa_test_env_swap("FSA_SEL_LAYOUT_ONE_STAGE", "1");
    fsa_context *ctx = plan_on("sm_80", 192, 192, 128, 4, FSA_ALGORITHM_FSA, 1);
    fsa_test_env_restore("FSA_SEL_LAYOUT_ONE_STAGE", one);
    expect_kernel(ctx, "sel_bwd_main_bf16_d192_dv192_g4_bk128_ks64", "_sl4");
    if (fsa_test_cache_has_kernel(ctx, "sel_bwd_main_bf16_d192_dv192_g4_bk128_ks128", "_sl4"))
        fail_msg("the override took 128-key slices");
    fsa_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sm_86_compiles_one_stage_forwards_at_192),
        cmocka_unit_test(test_sm_86_compiles_one_stage_nsa_forward_and_backward_at_256),
        cmocka_unit_test(test_sm_86_auto_runs_the_fsa_orders_one_query_tile_at_128),
        cmocka_unit_test(test_sm_86_auto_past_group_64_takes_the_nsa_orders_one_stage),
        cmocka_unit_test(test_sm_90a_keeps_the_defaults_unless_the_override_asks),
        cmocka_unit_test(test_the_override_keeps_the_backward_key_slices),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
