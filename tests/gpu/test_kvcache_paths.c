/* The paged-KV-cache kernel's paths against each other on the GPU, each
 * also against the float64 reference (the fixture's cases,
 * kvcache_fixture.c): the cluster merge against the workspace merge,
 * tensor-map copies against row copies, tiles of more than 32 rows
 * (warpgroup products on tensor maps), the union of tokens that share
 * one top-k row against the general union, and the one-stage layout of
 * 99 KB targets against the two-stage one. Outputs are poisoned before
 * every run. */
#include "kvcache_fixture.h"

#include "attention/kernels.h"
#include "attention/kvcache.h"
#include "jit/context.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether plans here must take both paths: on sm_90a with a driver that encodes tensor maps and launches
 * clusters (every CUDA 12 one), every case here has stages of whole page boxes, so it copies by tensor
 * maps, and with them a cluster's share always fits in shared memory (fsa_kvc_cluster_fits). Elsewhere
 * a plan may take neither, and the bit comparisons only show that the switch changes nothing. */
static int paths_expected(void)
{
    return kvc_ctx->arch.major == 9 && kvc_ctx->arch.suffix == 'a' && kvc_ctx->cu->TensorMapEncodeTiled != NULL &&
           kvc_ctx->cu->LaunchKernelEx != NULL;
}

/* What the plan records for the path that the environment variable `off` switches. */
static int path_taken(const fsa_kvcache_plan *plan, const char *off)
{
    if (strcmp(off, "FSA_KVC_TMA") == 0) return plan->tma;
    assert_string_equal(off, "FSA_KVC_CLUSTER");
    return plan->cluster;
}

/* Two runs' outputs, the same bits. */
static void assert_same_bits(const kvc_outputs *a, const kvc_outputs *b, const kvc_problem *p)
{
    assert_memory_equal(a->o_bits, b->o_bits, (size_t)p->Tq * p->hq * p->dv * 2);
    assert_memory_equal(a->lse, b->lse, (size_t)p->Tq * p->hq * 4);
}

/* Two plans of case c on one problem (seed): both against the reference, and the same bits. */
static void assert_plans_give_the_same_bits(const kvc_case *c, uint64_t seed, fsa_kvcache_plan *first,
                                            const char *first_name, fsa_kvcache_plan *second, const char *second_name)
{
    kvc_problem p;
    kvc_problem_make(&p, c, seed);
    kvc_problem_reference(&p);
    kvc_outputs a, b;
    kvc_run_and_check(first, &p, first_name, &a);
    kvc_run_and_check(second, &p, second_name, &b);
    assert_same_bits(&a, &b, &p);
    kvc_outputs_free(&a);
    kvc_outputs_free(&b);
    kvc_problem_free(&p);
}

/* A plan of the case's descriptor made with the environment variable
 * `off` set to 0 (a path turned off), and the two plans' outputs on one
 * problem: both against the reference, and the same bits. The plan without
 * the path never takes it, and where the path applies the other one does:
 * else the two would run the same kernel and the bits prove nothing. */
static void assert_path_gives_the_same_bits(const fsa_kvcache_desc *d, const kvc_case *c, const char *off,
                                            uint64_t seed, const char *with_name, const char *without_name)
{
    fsa_kvcache_plan *with = NULL, *without = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&with, kvc_ctx, d), FSA_STATUS_OK);
    setenv(off, "0", 1);
    const fsa_status st = fsa_kvcache_plan_create(&without, kvc_ctx, d);
    unsetenv(off);
    assert_int_equal(st, FSA_STATUS_OK);
    assert_false(path_taken(without, off));
    if (paths_expected())
        assert_true(path_taken(with, off));
    else
        print_message("  %s: %s not required on %s: the same bits only\n", c->name, with_name, kvc_ctx->target);
    assert_plans_give_the_same_bits(c, seed, with, with_name, without, without_name);
    fsa_kvcache_plan_destroy(with);
    fsa_kvcache_plan_destroy(without);
}

/* Where a sequence's shares each get a CTA, they may merge through the
 * shared memory of a cluster (sm_90) instead of the workspace: same bits,
 * for 4 and 8 shares, rows on either side of the mma. FSA_KVC_CLUSTER=0
 * makes a plan that never uses clusters. */
static void test_the_cluster_merge_gives_the_bits_of_the_workspace_merge(void **state)
{
    (void)state;
    const size_t cis[] = {3, 9}; /* bf16 G4 page 64; bf16 G16 shared selection, HND */
    for (size_t k = 0; k < 2; k++)
        for (int splits = 4; splits <= 8; splits *= 2) {
            fsa_kvcache_desc d = kvc_desc_of(&kvc_cases[cis[k]], KVC_FIXTURE_MAX_BATCH, KVC_FIXTURE_MAX_TOKENS);
            d.splits = splits;
            assert_path_gives_the_same_bits(&d, &kvc_cases[cis[k]], "FSA_KVC_CLUSTER", 500 + (uint64_t)splits,
                                            "cluster merge", "workspace merge");
        }
}

/* A lone decode token at G 1 over 32 KV heads in 4 shares is 128 CTAs, past
 * the deep ring's half of the SMs: the two-stage ring, merging in clusters or
 * (without them) through the workspace. Either way the reference's values and
 * the same bits. */
static void test_a_lone_decode_token_over_many_heads_gives_the_same_bits_with_and_without_clusters(void **state)
{
    (void)state;
    /* name                dtype d   hq  hkv bk  k   page seqs         n  topk          hnd len junk quick */
    const kvc_case c = {"bf16_d128_g1_h32_decode", FSA_DTYPE_BF16, 128, 32, 32, 64, 16, 64, {{1, 5000}}, 1,
                        KVC_TOPK_THK, 0, 0, 1, 1};
    fsa_kvcache_desc d = kvc_desc_of(&c, 1, 1);
    d.splits = 4;
    assert_path_gives_the_same_bits(&d, &c, "FSA_KVC_CLUSTER", 900, "cluster plan", "plan without clusters");
}

/* On sm_90a, where a stage is whole page boxes, the kernel copies the
 * stages by tensor maps into swizzled tiles; FSA_KVC_TMA=0 makes a plan that
 * copies each key row with cp.async. Same bits: decode and speculative tiles,
 * page 64 and 128, NHD and HND pages, rows on either side of the mma (the
 * NaN behind every non-key row of a page box must not reach the output).
 * Tiles of more than 32 rows are left out: on tensor maps they take
 * warpgroup products, which round differently (the next test). */
static void test_tensor_map_copies_give_the_bits_of_row_copies(void **state)
{
    (void)state;
    const size_t cis[] = {3, 4, 9, 15}; /* G4 page 64; G4 page 128; G16 shared HND; G2 q_len 1..8 */
    for (size_t k = 0; k < sizeof cis / sizeof cis[0]; k++) {
        kvc_case c = kvc_cases[cis[k]];
        const int max_q = 32 / (c.hq / c.hkv) > 0 ? 32 / (c.hq / c.hkv) : 1; /* tokens in 32 rows */
        for (int b = 0; b < c.nseq; b++)
            if (c.seqs[b].q_len > max_q) c.seqs[b].q_len = max_q;
        const fsa_kvcache_desc d = kvc_desc_of(&c, KVC_FIXTURE_MAX_BATCH, KVC_FIXTURE_MAX_TOKENS);
        assert_path_gives_the_same_bits(&d, &c, "FSA_KVC_TMA", 700 + k, "tensor-map copies", "row copies");
    }
}

/* Tiles of more than 32 rows (G > 8, several tokens: speculative decoding at
 * G 16) take each tensor-map stage in one step of warpgroup products on
 * sm_90a (elsewhere the mma.sync path): against the reference, the same bits
 * twice in a row, and the row-copy path against the reference too (not bit
 * for bit: the products round differently). Case 9: bf16, a selection shared
 * by the tokens, HND pages, 3 to 8 tokens; the last case: f16, own
 * selections, top-k lengths and junk, 3, 4 and 8 tokens; and bf16 G 64
 * decode (every token a 64-row tile) on HND pages. */
static void test_wide_tiles_match_the_reference_and_repeat_their_bits(void **state)
{
    (void)state;
    const size_t cis[] = {9, kvc_n_cases - 1, kvc_n_cases - 2};
    for (size_t k = 0; k < sizeof cis / sizeof cis[0]; k++) {
        const size_t ci = cis[k];
        kvc_problem p;
        kvc_problem_make(&p, &kvc_cases[ci], 800 + k);
        kvc_problem_reference(&p);
        kvc_outputs a, b;
        kvc_run_and_check(kvc_plan_of(ci), &p, "wide tiles", &a);
        kvc_run_and_check(kvc_plan_of(ci), &p, "wide tiles, again", &b);
        assert_same_bits(&a, &b, &p);
        kvc_outputs_free(&a);
        kvc_outputs_free(&b);
        const fsa_kvcache_desc d = kvc_desc_of(&kvc_cases[ci], KVC_FIXTURE_MAX_BATCH, KVC_FIXTURE_MAX_TOKENS);
        fsa_kvcache_plan *rows = NULL;
        setenv("FSA_KVC_TMA", "0", 1);
        const fsa_status st = fsa_kvcache_plan_create(&rows, kvc_ctx, &d);
        unsetenv("FSA_KVC_TMA");
        assert_int_equal(st, FSA_STATUS_OK);
        /* The wide tiles above took tensor maps where they apply; these rows did not. */
        if (paths_expected()) assert_true(kvc_plan_of(ci)->tma);
        assert_false(rows->tma);
        kvc_run_and_check(rows, &p, "wide tiles, row copies", NULL);
        fsa_kvcache_plan_destroy(rows);
        kvc_problem_free(&p);
    }
}

/* Tokens that share one top-k row (one selection for a sequence's new tokens)
 * take the union of that one row; the same rows with the slots of every token
 * but the first rotated take the general union. Both match the reference and
 * give the same bits (the union is sorted and the masks are per block, so
 * the order of a row's slots does not matter). G 4 (the first case of 4-token
 * tiles at page 64), G 16 (a row for all KV heads, HND pages), G 1 (16-token
 * tiles, top-k lengths and junk), and G 16 with lengths and junk. */
static void test_tokens_sharing_one_row_give_the_bits_of_the_general_union(void **state)
{
    (void)state;
    const size_t cis[] = {3, 9, 16, kvc_n_cases - 1};
    for (size_t k = 0; k < sizeof cis / sizeof cis[0]; k++) {
        const size_t ci = cis[k];
        kvc_problem p;
        kvc_problem_make(&p, &kvc_cases[ci], 900 + k);
        kvc_share_rows(&p);
        kvc_problem_reference(&p);
        kvc_outputs one, general;
        kvc_run_and_check(kvc_plan_of(ci), &p, kvc_cases[ci].name, &one);
        kvc_rotate_rows(&p);
        kvc_run_and_check(kvc_plan_of(ci), &p, "slots rotated", &general);
        assert_same_bits(&one, &general, &p);
        kvc_outputs_free(&one);
        kvc_outputs_free(&general);
        kvc_problem_free(&p);
    }
}

/* The fixture's case called `name`. */
static const kvc_case *case_named(const char *name)
{
    for (size_t i = 0; i < kvc_n_cases; i++)
        if (strcmp(kvc_cases[i].name, name) == 0) return &kvc_cases[i];
    fail_msg("no kvcache case %s", name);
    return NULL;
}

/* A plan of d made with FSA_KVC_SMALL and FSA_KVC_TMA as given (NULL: unset), the environment put back. */
static fsa_kvcache_plan *plan_under(const fsa_kvcache_desc *d, const char *small, const char *tma, const char *name)
{
    char *saved_small = fsa_test_env_swap("FSA_KVC_SMALL", small), *saved_tma = fsa_test_env_swap("FSA_KVC_TMA", tma);
    fsa_kvcache_plan *plan = NULL;
    const fsa_status st = fsa_kvcache_plan_create(&plan, kvc_ctx, d);
    fsa_test_env_restore("FSA_KVC_TMA", saved_tma);
    fsa_test_env_restore("FSA_KVC_SMALL", saved_small);
    if (st != FSA_STATUS_OK) fail_msg("plan %s (FSA_KVC_SMALL=%s): %s", name, small ? small : "", fsa_last_error());
    return plan;
}

/* The case under FSA_KVC_SMALL=1 (one stage buffer, row copies: what 99 KB targets take where the
 * default does not fit) and under FSA_KVC_TMA=0 (row copies in the layout the GPU takes: two stages
 * wherever they fit), both against the reference and the same bits (the same products, shares and
 * merges in the same order; a split merges through the workspace or a cluster, the same bits too). The
 * first plan compiled the layout's own kernel (_kl1 in its name), on row copies. */
static fsa_kvcache_plan *assert_one_stage_gives_the_bits_of_two(const kvc_case *c, int splits, uint64_t seed)
{
    fsa_kvcache_desc d = kvc_desc_of(c, KVC_FIXTURE_MAX_BATCH, KVC_FIXTURE_MAX_TOKENS);
    d.splits = splits;
    fsa_kvcache_plan *one = plan_under(&d, "1", NULL, c->name), *two = plan_under(&d, NULL, "0", c->name);
    assert_int_equal(one->layout, FSA_KVC_LAYOUT_ONE_STAGE);
    assert_false(one->tma);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "kvc_fwd_%s_d%d_dv%d_g%d_bk%d_k%d_p%d_tma0", c->dtype == FSA_DTYPE_BF16 ? "bf16" : "f16",
             c->d, c->dv ? c->dv : c->d, c->hq / c->hkv, c->bk, c->k, c->page);
    if (!fsa_test_cache_has_kernel(kvc_ctx, prefix, "_kl1")) fail_msg("no %s..._kl1 kernel in the cache", prefix);
    if (two->layout != 0)
        print_message("  %s: one stage is what %s takes anyway: the same kernel twice\n", c->name, kvc_ctx->target);
    char one_name[48], two_name[48];
    snprintf(one_name, sizeof one_name, "one stage, splits %d", splits);
    snprintf(two_name, sizeof two_name, "two stages, splits %d", splits);
    assert_plans_give_the_same_bits(c, seed, one, one_name, two, two_name);
    fsa_kvcache_plan_destroy(two);
    return one; /* the caller's, for its own checks */
}

/* The one-stage layout (fsa_kvc_layout_fit) that the 99 KB targets (sm_86, sm_89, sm_12x) take where the
 * default does not fit, forced with FSA_KVC_SMALL=1 so that any GPU runs it: against the reference and
 * the bits of the two-stage layout. Pages of 1 (q_len 1 to 8 over 0 to 30000 cached keys, G 4), 16 (G 1;
 * NSA's 192 / 128 at G 16 with 1, 4 and 300 tokens), 32 (256 / 128 at G 4; 128 / 256, whose merge area
 * outgrows one stage), 64 (NSA's 192 / 128 at G 4 with a 600-token chunk; G 16 with a shared selection on
 * HND pages) and 256; and split sequences (4 shares) at G 4, at 192 / 128, G 16, at 256 / 128, G 4 (merged in a cluster where the
 * GPU launches clusters) and with every share on one CTA (FSA_KVC_CTAS=1). */
static void test_the_one_stage_layout_gives_the_bits_of_two_stages(void **state)
{
    (void)state;
    /* name                          dtype            d    hq hkv bk  k   page seqs                              n  topk          hnd len junk quick dv */
    static const kvc_case wide = {"bf16_dk256_dv128_g4_page32", FSA_DTYPE_BF16, 256, 8, 2, 64, 16, 32,
                                  {{1, 2000}, {4, 300}, {40, 64}, {1, 0}}, 4, KVC_TOPK_HTK, 0, 1, 1, 1, 128};
    static const char *const names[] = {"bf16_d128_g4_bk64_page1",       "f16_d64_g1_bk16_len_thk",
                                        "f16_dk192_dv128_g16_page16",    "bf16_dk128_dv256_g2_page32",
                                        "bf16_dk192_dv128_g4_page64",    "bf16_d128_g16_shared_hnd",
                                        "bf16_d128_g4_bk64_page256"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        fsa_kvcache_plan_destroy(assert_one_stage_gives_the_bits_of_two(case_named(names[i]), 0, 1000 + i));
    fsa_kvcache_plan_destroy(assert_one_stage_gives_the_bits_of_two(&wide, 0, 1100));
    fsa_kvcache_plan_destroy(assert_one_stage_gives_the_bits_of_two(case_named("bf16_d128_g4_bk64_page64"), 4, 1200));
    fsa_kvcache_plan_destroy(assert_one_stage_gives_the_bits_of_two(case_named("f16_dk192_dv128_g16_page16"), 4, 1201));
    /* 256 / 128 at G 4 is a shape whose cluster share fits beside one stage (fsa_kvc_cluster_fits): split
     * in 4 shares, a GPU that launches clusters merges them there. */
    fsa_kvcache_plan *one = assert_one_stage_gives_the_bits_of_two(&wide, 4, 1300);
    if (fsa_kernel_can_cluster(kvc_ctx)) assert_true(one->cluster);
    fsa_kvcache_plan_destroy(one);
    /* Every share of a split sequence on one CTA (FSA_KVC_CTAS=1): a CTA's second and later shares start
     * their stream in the buffer the previous share's merge area used. */
    char *saved_ctas = fsa_test_env_swap("FSA_KVC_CTAS", "1");
    fsa_kvcache_plan_destroy(assert_one_stage_gives_the_bits_of_two(case_named("bf16_d128_g4_bk64_page64"), 4, 1400));
    fsa_kvcache_plan_destroy(assert_one_stage_gives_the_bits_of_two(&wide, 4, 1401));
    fsa_test_env_restore("FSA_KVC_CTAS", saved_ctas);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_cluster_merge_gives_the_bits_of_the_workspace_merge),
        cmocka_unit_test(test_a_lone_decode_token_over_many_heads_gives_the_same_bits_with_and_without_clusters),
        cmocka_unit_test(test_tensor_map_copies_give_the_bits_of_row_copies),
        cmocka_unit_test(test_wide_tiles_match_the_reference_and_repeat_their_bits),
        cmocka_unit_test(test_tokens_sharing_one_row_give_the_bits_of_the_general_union),
        cmocka_unit_test(test_the_one_stage_layout_gives_the_bits_of_two_stages),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. one test under
     * compute-sanitizer. Skips (exit 77) inside setup when there is no GPU. */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, kvc_fixture_setup, kvc_fixture_teardown);
}
