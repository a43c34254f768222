/* Selected-attention forward on the GPU against the CPU float64 reference:
 * both paths and AUTO, dtypes, head dims, group sizes, block sizes, index
 * layouts, strided tensors, varlen batches, junk in the top-k rows, empty
 * rows, chunked workspaces, a large logit, graph capture and determinism;
 * value head dims other than the query/key head dim (dv column).
 * Outputs (and the workspace) are poisoned before every run; o is checked as
 * a whole and row by row, and a strided o's padding must still hold the poison.
 * Random cases drawn over most of the supported space (attn_random_case) run
 * through the same checks: FSA_TEST_RANDOM=N of them (default 4), from
 * FSA_TEST_SEED=S (default RANDOM_SEED, the backward test's is another); each
 * prints its line (index, seed, every field) before it runs.
 * FSA_TEST_QUICK=1 runs a subset (for compute-sanitizer; one random case). */
#include "attention_problem.h"

#include "jit/context.h"
#include "../../templates/fsa_layout.cuh" /* FSA_SEL_LAYOUT_*: the layouts the plans take */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BF FSA_DTYPE_BF16
#define HF FSA_DTYPE_F16
#define A_AUTO FSA_ALGORITHM_AUTO
#define A_FSA FSA_ALGORITHM_FSA
#define A_NSA FSA_ALGORITHM_NSA

static const attn_case cases[] = {
    /* name                     dtype d   hq  hkv bk   k   lens                        n  tkh str alg    ws    junk big quick */
    {"bf16_d128_g1_bk64_fsa",   BF, 128, 4,  4,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_FSA,  0,      1, 0, 1},
    {"bf16_d128_g1_bk64_nsa",   BF, 128, 4,  4,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_NSA,  0,      1, 0, 1},
    {"bf16_d128_g4_bk64_auto",  BF, 128, 8,  2,  64, 8, {1000},                    1, 1, 0, A_AUTO, 0,      0, 0, 0},
    {"bf16_d64_g2_bk32_fsa",    BF, 64,  4,  2,  32, 6, {1, 63, 64, 65, 200},      5, 1, 1, A_FSA,  0,      1, 0, 1},
    {"bf16_d64_g2_bk32_nsa",    BF, 64,  4,  2,  32, 6, {1, 63, 64, 65, 200},      5, 1, 1, A_NSA,  0,      1, 0, 0},
    {"f16_d128_g3_bk64_fsa_scale0.2", HF, 128, 6, 2, 64, 8, {5, 130, 250},            3, 0, 0, A_FSA,  0,      1, 0, 0, 0, 0.2f},
    {"f16_d128_g3_bk64_nsa_scale0.2", HF, 128, 6, 2, 64, 8, {5, 130, 250},            3, 0, 0, A_NSA,  0,      1, 0, 0, 0, 0.2f},
    {"bf16_d96_g5_bk16_fsa",    BF, 96,  5,  1,  16, 12, {40, 150},                2, 0, 0, A_FSA,  0,      1, 0, 1},
    {"bf16_d96_g5_bk16_nsa",    BF, 96,  5,  1,  16, 12, {40, 150},                2, 0, 0, A_NSA,  0,      1, 0, 0},
    {"f16_d192_g7_bk128_fsa",   HF, 192, 7,  1,  128, 3, {129, 300},               2, 1, 1, A_FSA,  0,      1, 0, 0},
    {"f16_d192_g7_bk128_nsa",   HF, 192, 7,  1,  128, 3, {129, 300},               2, 1, 1, A_NSA,  0,      1, 0, 0},
    /* G 6 at D 96 with sequences of 1 to 3 tokens */
    {"bf16_d96_g6_short_fsa",   BF, 96,  6,  1,  16, 4,  {1, 2, 3, 200},           4, 0, 1, A_FSA,  0,      1, 0, 0},
    {"bf16_d96_g6_short_nsa",   BF, 96,  6,  1,  16, 4,  {1, 2, 3, 200},           4, 0, 1, A_NSA,  0,      1, 0, 0},
    /* Junk, and more blocks than top-k (the random draws): each KV head reads rows of its own. */
    {"bf16_d256_g8_bk64_fsa",   BF, 256, 16, 2,  64, 4, {64, 450},                 2, 0, 0, A_FSA,  0,      1, 0, 0},
    {"bf16_d256_g8_bk64_nsa",   BF, 256, 16, 2,  64, 4, {64, 200},                 2, 0, 0, A_NSA,  0,      1, 0, 1},
    {"bf16_d32_g12_bk32_fsa",   BF, 32,  12, 1,  32, 5, {33, 97, 100},             3, 1, 0, A_FSA,  0,      1, 0, 0},
    {"bf16_d32_g12_bk32_nsa",   BF, 32,  12, 1,  32, 5, {33, 97, 100},             3, 1, 0, A_NSA,  0,      1, 0, 0},
    {"f16_d64_g16_bk64_fsa",    HF, 64,  32, 2,  64, 6, {1, 63, 64, 65, 250},      5, 0, 1, A_FSA,  0,      1, 0, 0},
    {"f16_d64_g16_bk64_nsa",    HF, 64,  32, 2,  64, 6, {1, 63, 64, 65, 250},      5, 0, 1, A_NSA,  0,      1, 0, 1},
    {"bf16_d128_g16_bk128_auto",BF, 128, 16, 1,  128, 4, {300},                    1, 0, 0, A_AUTO, 0,      1, 0, 0},
    {"bf16_d128_g2_bk64_chunked", BF, 128, 4, 2, 64, 8, {100, 400, 37},            3, 0, 0, A_FSA,  300000, 1, 0, 1},
    {"bf16_d128_g24_bk64_nsa",  BF, 128, 24, 1,  64, 4, {150},                     1, 0, 0, A_NSA,  0,      1, 0, 0},
    {"bf16_d64_g1_k64_fsa",     BF, 64,  2,  2,  16, 64, {700},                    1, 0, 0, A_FSA,  0,      1, 0, 0},
    /* Blocks past the index's 1024 shared-memory counters of a CTA (global counters), CTAs across two
     * heads and two sequences: */
    {"bf16_d64_g1_bk16_global", BF, 64,  2,  2,  16, 8, {300, 17000},              2, 0, 0, A_FSA,  0,      1, 0, 1},
    /* More work items than 4 per CTA of the warpgroup main kernel's grid (264 on an H200; Dk = Dv = 128
     * and blocks of 32 keys take that kernel on sm_90a): CTAs take chunks of four and then single items
     * from the work counter of the dynamic schedule (zeroed by the index's memset; the workspace is
     * poisoned); about 3400 items, most of them one short list each. */
    {"bf16_d128_g1_bk32_many_items", BF, 128, 8, 8, 32, 2, {5000, 7000},         2, 0, 0, A_FSA,  0,      1, 0, 1},
    {"bf16_d64_g1_k1_t1",       BF, 64,  2,  2,  64, 1, {1},                       1, 0, 0, A_FSA,  0,      0, 0, 0},
    {"bf16_d128_g1_biglogit",   BF, 128, 1,  1,  64, 4, {256},                     1, 0, 0, A_FSA,  0,      0, 1, 1},
    {"bf16_d128_g1_biglogit_nsa", BF, 128, 1, 1, 64, 4, {256},                     1, 0, 0, A_NSA,  0,      0, 1, 0},
    /* Dk != Dv (NSA's 192 / 128 among them), both paths.                                                     dv */
    {"bf16_dk192_dv128_g4_fsa", BF, 192, 8,  2,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_FSA,  0,      1, 0, 1, 128},
    {"bf16_dk192_dv128_g4_nsa", BF, 192, 8,  2,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_NSA,  0,      1, 0, 1, 128},
    {"f16_dk192_dv128_g16_fsa", HF, 192, 32, 2,  64, 6, {17, 200},                 2, 1, 1, A_FSA,  0,      1, 0, 0, 128},
    {"f16_dk192_dv128_g16_nsa", HF, 192, 32, 2,  64, 6, {17, 200},                 2, 1, 1, A_NSA,  0,      1, 0, 1, 128},
    /* the warpgroup main kernel at Dk 192 (rows copied in 64-column bands) over many items: the first CTAs'
       second grab a chunk of four, later ones single items; and the same in fp16 at G 1 */
    {"bf16_dk192_dv128_g16_many_items", BF, 192, 32, 2, 64, 8, {3000, 2500},     2, 0, 0, A_FSA,  0,      1, 0, 1, 128},
    {"f16_dk192_dv128_g1_many_items", HF, 192, 4,  4,  64, 4, {2000, 900},         2, 1, 0, A_FSA,  0,      1, 0, 1, 128},
    {"bf16_dk128_dv64_g1_fsa",  BF, 128, 4,  4,  32, 6, {1, 63, 64, 65, 200},      5, 1, 1, A_FSA,  0,      1, 0, 1, 64},
    {"bf16_dk128_dv64_g1_nsa",  BF, 128, 4,  4,  32, 6, {1, 63, 64, 65, 200},      5, 1, 1, A_NSA,  0,      1, 0, 0, 64},
    {"f16_dk128_dv64_g8_auto",  HF, 128, 8,  1,  64, 8, {5, 130, 250},             3, 0, 0, A_AUTO, 0,      1, 0, 0, 64},
    {"bf16_dk64_dv128_g2_fsa",  BF, 64,  4,  2,  64, 8, {100, 400, 37},            3, 0, 0, A_FSA,  300000, 1, 0, 1, 128},
    {"bf16_dk64_dv128_g2_nsa",  BF, 64,  4,  2,  64, 8, {100, 400, 37},            3, 0, 0, A_NSA,  0,      1, 0, 0, 128},
    {"f16_dk64_dv128_g12_fsa",  HF, 64,  12, 1,  16, 12, {40, 150},                2, 0, 0, A_FSA,  0,      1, 0, 0, 128},
    {"bf16_dk256_dv256_g8_fsa", BF, 256, 16, 2,  64, 4, {64, 200},                 2, 0, 0, A_FSA,  0,      1, 0, 0, 256},
    /* The shapes 99 KB targets run in one-stage layouts (fsa_sel_layout_fit): 192 / 192 at blocks of 64 in
     * both orders, 256 / 256 in the FSA order at blocks of 32 and the NSA order at 128 (strided, fp16). */
    {"bf16_d192_g4_bk64_fsa",   BF, 192, 8,  2,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_FSA,  0,      1, 0, 0},
    {"bf16_d192_g4_bk64_nsa",   BF, 192, 8,  2,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_NSA,  0,      1, 0, 0},
    {"bf16_d256_g4_bk32_fsa",   BF, 256, 8,  2,  32, 8, {1, 63, 64, 65, 300},      5, 1, 0, A_FSA,  0,      1, 0, 0},
    {"f16_d256_g16_bk128_nsa",  HF, 256, 32, 2,  128, 3, {129, 300},               2, 1, 1, A_NSA,  0,      1, 0, 0},
    /* AUTO where the FSA order's default does not fit sm_90a's shared memory (245760 bytes) and one query
     * tile does (222208): the FSA order in one stage from 65 tokens */
    {"bf16_d176_g4_bk256_auto", BF, 176, 8,  2,  256, 3, {70, 700},                2, 0, 0, A_AUTO, 0,      1, 0, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;
static fsa_plan *g_plans[N_CASES];
static int g_quick;

static void check_against_reference(const outputs *out, const problem *p, const attn_case *c)
{
    attn_check_o_and_lse(out, p, c->hq, c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3, c->name);
    /* Rows with nothing visible: exactly zero. */
    for (int qh = 0; qh < c->hq; qh++)
        for (int t = 0; t < p->T; t++)
            if (p->empty_row[(size_t)qh * p->T + t])
                for (int d = 0; d < p->Dv; d++) assert_true(out->o_img[t * p->o_ts + qh * p->o_hs + d] == 0);
    /* The padding of a strided output (columns past Dv in a head, the gap after the last head) is never
     * written: it still holds poison_fwd's fill. */
    char what[64];
    snprintf(what, sizeof what, "%s: o", c->name);
    fsa_test_assert_padding_untouched(out->o_img, (size_t)p->T * p->o_ts, p->T, c->hq, p->Dv, p->o_ts, p->o_hs,
                                      ATTN_POISON16, what);
}

/* `inputs` picks the case's random inputs: its index in cases[], or a random case's seed. */
static void run_case_with_inputs(const attn_case *c, fsa_plan *plan, uint64_t inputs)
{
    problem p;
    problem_make(&p, c, 0x5eed0000u + inputs);
    device_problem dp;
    device_make(&dp, &p, c, plan);
    fsa_fwd_args a = fwd_args_of(&dp, &p);

    poison_fwd(&dp, &p, c);
    fsa_status st = fsa_selected_attention_fwd(plan, &a, NULL);
    if (st != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    outputs first;
    download_fwd(&first, &dp, &p, c);
    check_against_reference(&first, &p, c);

    /* Same inputs, same bits. */
    poison_fwd(&dp, &p, c);
    assert_int_equal(fsa_selected_attention_fwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    outputs second;
    download_fwd(&second, &dp, &p, c);
    assert_memory_equal(first.o_img, second.o_img, dp.o_bytes);
    assert_memory_equal(first.lse, second.lse, (size_t)c->hq * p.T * 4);

    outputs_free(&first);
    outputs_free(&second);
    device_free(&dp);
    problem_free(&p);
}

static void run_case(const attn_case *c, fsa_plan *plan) { run_case_with_inputs(c, plan, (uint64_t)(c - cases)); }

/* The default FSA_TEST_SEED of the random cases. */
#define RANDOM_SEED 0xf0d5eedu

/* ------------------------------------------------------------ tests */

static void test_forward_matches_the_reference_on_every_case(void **state)
{
    (void)state;
    attn_run_cases(cases, g_plans, N_CASES, g_quick, 0, run_case);
}

static void test_forward_with_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference(void **state)
{
    (void)state;
    attn_run_cases(cases, g_plans, N_CASES, g_quick, 1, run_case);
}

static void test_random_cases_match_the_reference(void **state)
{
    (void)state;
    attn_run_random_cases(g_ctx, 0, RANDOM_SEED, run_case_with_inputs);
}

static size_t case_named(const char *name)
{
    for (size_t i = 0; i < N_CASES; i++)
        if (strcmp(cases[i].name, name) == 0) return i;
    fail_msg("no case %s", name);
    return 0;
}

/* The one-stage layouts (fsa_sel_layout_fit: what the 99 KB targets sm_86, sm_89, sm_12x take at head dims
 * of 192 and 256) on the GPU present: FSA_SEL_LAYOUT_ONE_STAGE=1 forces them where the default fits, with
 * FSA_WGMMA=0 (the mma.sync kernels on sm_90a), read at plan creation. Each case's plan compiled the
 * layout's own kernel (_sl1 the FSA order's, _sl2 the NSA order's), matches the float64 reference like
 * every case, and gives the bits of the same plan without the override: the layout changes only how many
 * tiles or stages are in flight. The standard shape, 192 / 192 and 256 / 256 in both orders. */
static void test_the_one_stage_layouts_match_the_reference_and_the_default_bit_for_bit(void **state)
{
    (void)state;
    static const char *names[] = {"bf16_d128_g1_bk64_fsa", "bf16_d128_g1_bk64_nsa", "bf16_d192_g4_bk64_fsa",
                                  "bf16_d192_g4_bk64_nsa", "bf16_d256_g4_bk32_fsa", "f16_d256_g16_bk128_nsa",
                                  "bf16_d256_g8_bk64_nsa", "f16_d192_g7_bk128_nsa"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const size_t i = case_named(names[n]);
        const attn_case *c = &cases[i];
        int layout = 0, dflt_layout = 0;
        fsa_plan *small = attn_mma_sync_plan(g_ctx, c, 0, "1", &layout);
        fsa_plan *dflt = attn_mma_sync_plan(g_ctx, c, 0, NULL, &dflt_layout);
        const int fsa = c->alg == A_FSA;
        const int bit = layout & (fsa ? FSA_SEL_LAYOUT_FWD_ONE_STAGE : FSA_SEL_LAYOUT_NSA_ONE_STAGE);
        assert_true(bit != 0);
        char prefix[96];
        fsa_test_expect_layout_kernel(g_ctx, attn_kernel_prefix(prefix, sizeof prefix, fsa ? "sel_fwd_main" : "sel_fwd_nsa", c),
                                      "sl", bit);
        print_message("  %s: FSA_SEL_LAYOUT_ONE_STAGE=1 FSA_WGMMA=0 (layout %d):\n", c->name, layout);
        run_case_with_inputs(c, small, i);
        if (dflt_layout & bit) { /* a GPU whose shared memory needs one stage here: one kernel, nothing to compare */
            print_message("  %-30s the default plan takes one stage too on this GPU: no second kernel\n", c->name);
            fsa_plan_destroy(dflt);
            fsa_plan_destroy(small);
            continue;
        }
        /* The same inputs through both plans: the same bits. */
        problem p;
        problem_make(&p, c, 0x5eed0000u + i);
        device_problem dp;
        device_make(&dp, &p, c, dflt);
        const fsa_fwd_args a = fwd_args_of(&dp, &p);
        outputs out[2];
        fsa_plan *plans[2] = {dflt, small};
        for (int k = 0; k < 2; k++) {
            poison_fwd(&dp, &p, c);
            if (fsa_selected_attention_fwd(plans[k], &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
            fsa_test_sync();
            download_fwd(&out[k], &dp, &p, c);
        }
        assert_memory_equal(out[0].o_img, out[1].o_img, dp.o_bytes);
        assert_memory_equal(out[0].lse, out[1].lse, (size_t)c->hq * p.T * 4);
        print_message("  %-30s one stage: the default's bits\n", c->name);
        outputs_free(&out[0]);
        outputs_free(&out[1]);
        device_free(&dp);
        problem_free(&p);
        fsa_plan_destroy(dflt);
        fsa_plan_destroy(small);
    }
}

/* An AUTO plan takes the FSA order's one query tile where its default does not fit and one tile does
 * (fsa_sel_layout_fit; on sm_90a 176 / 176 at blocks of 256, on the 99 KB targets 128 / 128 at blocks of
 * 64): the heuristic runs the FSA order past short inputs, on the layout's own kernel. The case matches the
 * float64 reference with the others. */
static void test_auto_takes_the_fsa_orders_one_query_tile_where_only_it_fits(void **state)
{
    (void)state;
    const size_t i = case_named("bf16_d176_g4_bk256_auto");
    const attn_case *c = &cases[i];
    const int layout = fsa_sel_layout_fit(c->d, attn_value_dim(c), c->bk, attn_group_of(c), FSA_SEL_ORDER_AUTO,
                                          fsa_test_max_smem(g_ctx), 0);
    if (!(layout & FSA_SEL_LAYOUT_FWD_ONE_STAGE)) {
        print_message("  %s: the FSA order's default fits this GPU (or one tile does not): nothing to check\n", c->name);
        return;
    }
    fsa_algorithm a;
    const char *why = NULL;
    assert_int_equal(fsa_plan_algorithm(&a, &why, g_plans[i], 1000), FSA_STATUS_OK);
    assert_int_equal(a, A_FSA);
    char prefix[96];
    fsa_test_expect_layout_kernel(g_ctx, attn_kernel_prefix(prefix, sizeof prefix, "sel_fwd_main", c), "sl",
                                  FSA_SEL_LAYOUT_FWD_ONE_STAGE);
    print_message("  %s: AUTO runs the FSA order in one stage (%s)\n", c->name, why);
}

static void test_auto_reports_its_choice_and_reason(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) {
        if (cases[i].alg != A_AUTO) continue;
        fsa_algorithm a;
        const char *why = NULL;
        assert_int_equal(fsa_plan_algorithm(&a, &why, g_plans[i], 1000), FSA_STATUS_OK);
        assert_true(a == A_FSA || a == A_NSA);
        assert_non_null(why);
        assert_true(strlen(why) > 0);
    }
}

static void test_a_graph_captured_forward_replays_to_the_same_output(void **state)
{
    (void)state;
    const attn_case *c = &cases[0]; /* FSA path: memset plus four kernels */
    problem p;
    problem_make(&p, c, 77);
    device_problem dp;
    device_make(&dp, &p, c, g_plans[0]);
    fsa_fwd_args a = fwd_args_of(&dp, &p);

    poison_fwd(&dp, &p, c);
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    outputs direct;
    download_fwd(&direct, &dp, &p, c);
    check_against_reference(&direct, &p, c);

    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, graph.stream), FSA_STATUS_OK);
    fsa_test_capture_end(&graph);
    for (int rep = 0; rep < 3; rep++) {
        poison_fwd(&dp, &p, c);
        fsa_test_graph_replay(&graph);
        outputs replay;
        download_fwd(&replay, &dp, &p, c);
        assert_memory_equal(direct.o_img, replay.o_img, dp.o_bytes);
        assert_memory_equal(direct.lse, replay.lse, (size_t)c->hq * p.T * 4);
        outputs_free(&replay);
    }
    fsa_test_graph_free(&graph);
    outputs_free(&direct);
    device_free(&dp);
    problem_free(&p);
}

static void test_a_too_small_workspace_is_refused_before_any_launch(void **state)
{
    (void)state;
    const attn_case *c = &cases[0];
    problem p;
    problem_make(&p, c, 99);
    device_problem dp;
    device_make(&dp, &p, c, g_plans[0]);
    fsa_fwd_args a = fwd_args_of(&dp, &p);
    assert_true(dp.ws_bytes > 0);
    a.workspace_bytes = dp.ws_bytes - 1;
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    a.workspace_bytes = dp.ws_bytes;
    a.q.ptr += 2;
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_MISALIGNED);
    /* Nothing ran: o and lse still hold device_make's poison. */
    fsa_test_sync();
    fsa_test_assert_untouched(dp.o, dp.o_bytes, 0xff);
    fsa_test_assert_untouched(dp.lse, (size_t)c->hq * p.T * 4, 0xff);
    device_free(&dp);
    problem_free(&p);
}

/* Plans compile in parallel threads before the tests run. */
static int setup(void **state)
{
    (void)state;
    g_quick = fsa_test_quick();
    g_cache_dir = fsa_test_mkdtemp("fwd-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    return attn_create_plans(g_plans, g_ctx, cases, N_CASES, 0);
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) fsa_plan_destroy(g_plans[i]);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_the_reference_on_every_case),
        cmocka_unit_test(test_forward_with_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference),
        cmocka_unit_test(test_random_cases_match_the_reference),
        cmocka_unit_test(test_the_one_stage_layouts_match_the_reference_and_the_default_bit_for_bit),
        cmocka_unit_test(test_auto_takes_the_fsa_orders_one_query_tile_where_only_it_fits),
        cmocka_unit_test(test_auto_reports_its_choice_and_reason),
        cmocka_unit_test(test_a_graph_captured_forward_replays_to_the_same_output),
        cmocka_unit_test(test_a_too_small_workspace_is_refused_before_any_launch),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    fsa_test_random_count(-1); /* a malformed FSA_TEST_RANDOM or FSA_TEST_SEED exits here, GPU or not */
    fsa_test_random_seed(RANDOM_SEED);
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. the one-stage
     * layouts' on a GPU whose call time is short. */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
