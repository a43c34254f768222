/* Selected attention over a paged KV cache on the GPU against the float64
 * reference assembled from the logical sequences: every page size; decode,
 * speculative (2-8) and prefill (1000) query lengths over 0, 1, 63, 64, 65 and
 * 30000 cached tokens; empty sequences; shuffled pages with garbage past each
 * sequence's pages and NaN in every cache element that backs no key; junk in
 * the top-k rows; top-k lengths; both top-k layouts and a selection shared by
 * all KV heads; NHD and HND pages; group sizes 1 to 64; fp16 and bf16; value
 * head dims other than the query/key head dim (dv column). Then
 * batch invariance, the cluster and tensor-map paths against the plain ones,
 * tiles of more than 32 rows (warpgroup products on tensor maps), tokens
 * sharing one top-k row against the general union,
 * graph replay after the metadata changed, bad metadata
 * that must stay in bounds, and the host checks. Outputs are poisoned before
 * every run. FSA_TEST_QUICK=1 runs a subset (for compute-sanitizer), FSA_TEST_CASES
 * the cases it names. */
#include "kvcache_problem.h"

#include "jit/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQS_EDGES {1, 0}, {1, 1}, {2, 63}, {8, 64}, {5, 65}, {0, 40}, {3, 30000}, {1, 30000}, {4, 1}, {7, 200}
#define PAGE_CASE(page, quick)                                                                             \
    {"bf16_d128_g4_bk64_page" #page, BF, 128, 8, 2, 64, 8, page, {SEQS_EDGES}, 10, KVC_TOPK_HTK, 0, 0, 1, quick}

static const kvc_case cases[] = {
    PAGE_CASE(1, 1),
    PAGE_CASE(16, 0),
    PAGE_CASE(32, 0),
    PAGE_CASE(64, 1),
    PAGE_CASE(128, 0),
    PAGE_CASE(256, 0),
    /* name                          dtype d   hq  hkv bk   k   page seqs                                     n  topk              hnd len junk quick */
    {"bf16_d128_g1_prefill1000",     BF, 128, 2,  2,  64,  16, 64,  {{1000, 0}, {1000, 65}, {1000, 30000}}, 3, KVC_TOPK_THK,    0, 0, 1, 0},
    {"f16_d64_g16_prefill_shared",   HF, 64,  32, 2,  64,  16, 32,  {{1000, 63}, {6, 64}, {1, 0}},         3, KVC_TOPK_SHARED, 1, 1, 1, 0},
    {"f16_d64_g1_bk16_len_thk",      HF, 64,  2,  2,  16,  16, 16,  {SEQS_EDGES},                         10, KVC_TOPK_THK,   0, 1, 1, 1},
    {"bf16_d128_g16_shared_hnd",     BF, 128, 32, 2,  64,  16, 64,  {SEQS_EDGES},                         10, KVC_TOPK_SHARED, 1, 0, 1, 1},
    {"f16_d256_g64_bk128_page256",   HF, 256, 64, 1,  128, 4,  256, {{1, 0}, {4, 300}, {8, 65}, {2, 1}},  4, KVC_TOPK_HTK,    0, 1, 1, 0},
    {"bf16_d96_g3_bk32_page32",      BF, 96,  6,  2,  32,  6,  32,  {SEQS_EDGES},                         10, KVC_TOPK_THK,   1, 0, 1, 0},
    {"bf16_d128_g8_bk256_page1",     BF, 128, 16, 2,  256, 4,  1,   {{1, 1000}, {8, 0}, {3, 257}},        3, KVC_TOPK_HTK,    0, 1, 0, 0},
    {"f16_d32_g2_bk64_k64",          HF, 32,  4,  2,  64,  64, 16,  {{1, 5000}, {30, 4000}, {2, 70}},     3, KVC_TOPK_HTK,    0, 0, 1, 0},
    {"bf16_d128_g32_k1",             BF, 128, 32, 1,  64,  1,  64,  {{1, 63}, {3, 64}, {2, 0}},           3, KVC_TOPK_THK,    0, 0, 0, 0},
    /* Every query length 1..8 for the small groups (keys on the mma's 16-row side). */
    {"bf16_d128_g2_qlen1to8",        BF, 128, 4,  2,  64,  16, 64,  {{1, 3000}, {2, 500}, {3, 64}, {4, 1000}, {5, 65}, {6, 200}, {7, 4000}, {8, 129}}, 8, KVC_TOPK_HTK, 0, 0, 1, 1},
    {"f16_d128_g1_qlen1to8",         HF, 128, 2,  2,  64,  16, 16,  {{1, 3000}, {2, 500}, {3, 64}, {4, 1000}, {5, 65}, {6, 200}, {7, 4000}, {8, 129}}, 8, KVC_TOPK_THK, 1, 1, 1, 0},
    {"bf16_d64_g4_qlen1to8",         BF, 64,  16, 4,  32,  16, 32,  {{1, 3000}, {2, 500}, {3, 64}, {4, 1000}, {5, 65}, {6, 200}, {7, 4000}, {8, 129}}, 8, KVC_TOPK_SHARED, 0, 1, 1, 0},
    /* Dk != Dv: decode, 4 speculative tokens, a chunked prefill.                                                               dv */
    {"bf16_dk192_dv128_g4_page64",   BF, 192, 8,  2,  64,  16, 64,  {{1, 3000}, {4, 300}, {1, 0}, {600, 100}}, 4, KVC_TOPK_HTK, 0, 0, 1, 1, 128},
    {"f16_dk192_dv128_g16_page16",   HF, 192, 32, 2,  64,  16, 16,  {{1, 200}, {4, 1000}, {300, 64}},     3, KVC_TOPK_SHARED, 1, 1, 1, 0, 128},
    {"f16_dk128_dv64_g16_page16",    HF, 128, 16, 1,  64,  8,  16,  {{1, 200}, {4, 1000}, {300, 64}},     3, KVC_TOPK_THK,    0, 0, 1, 0, 64},
    {"bf16_dk64_dv128_g1_page1",     BF, 64,  2,  2,  32,  8,  1,   {{1, 63}, {4, 64}, {200, 500}},       3, KVC_TOPK_HTK,    1, 1, 1, 1, 128},
    {"bf16_dk128_dv256_g2_page32",   BF, 128, 4,  2,  64,  8,  32,  {{1, 100}, {4, 2000}, {100, 0}},      3, KVC_TOPK_THK,    0, 0, 1, 0, 256},
    /* Blocks of two stages (tensor-map copies on sm_90a: two page boxes per block). */
    {"bf16_d128_g4_bk128_page128",   BF, 128, 8,  2,  128, 8,  128, {SEQS_EDGES},                         10, KVC_TOPK_HTK,   0, 1, 1, 1},
    /* Tiles of 64 rows (warpgroup products on sm_90a tensor maps): decode at G 64, HND pages. */
    {"bf16_d128_g64_decode_hnd",     BF, 128, 64, 1,  64,  16, 64,  {{1, 3000}, {1, 0}, {2, 500}, {1, 64}, {1, 30000}}, 5, KVC_TOPK_THK, 1, 1, 1, 0},
    /* Tiles of 48 and 64 rows with their own selections (warpgroup products on sm_90a tensor maps). Keep it last. */
    {"f16_d128_g16_qlen4_page64",    HF, 128, 32, 2,  64,  16, 64,  {{4, 3000}, {3, 500}, {4, 64}, {1, 100}, {8, 1000}, {4, 0}}, 6, KVC_TOPK_HTK, 0, 1, 1, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])
enum { MAX_BATCH = KVC_MAX_SEQS, MAX_TOKENS = 4096 };

static fsa_context *g_ctx;
static char *g_cache_dir;
static int g_own_cache; /* a temporary cache dir of this run, removed at the end */
static fsa_kvcache_plan *g_plans[N_CASES]; /* made on first use (plan_of): a filtered run compiles only its own */
static int g_quick;

static fsa_kvcache_plan *plan_of(size_t i)
{
    if (g_plans[i] == NULL) {
        const fsa_kvcache_desc d = kvc_desc_of(&cases[i], MAX_BATCH, MAX_TOKENS);
        if (fsa_kvcache_plan_create(&g_plans[i], g_ctx, &d) != FSA_STATUS_OK)
            fail_msg("plan %s: %s", cases[i].name, fsa_last_error());
    }
    return g_plans[i];
}

static void check_against_reference(const kvc_outputs *out, const kvc_problem *p, const char *name)
{
    const size_t n = (size_t)p->Tq * p->hq * p->dv;
    const double tol = p->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3;
    const double err = fsa_rel_error(out->o, p->o_ref, n);
    print_message("  %-30s Tq %5d  o rel err %.3e (tol %.0e)", name, p->Tq, err, tol);
    double worst = 0;
    for (int qh = 0; qh < p->hq; qh++)
        for (int t = 0; t < p->Tq; t++) {
            const size_t i = (size_t)qh * p->Tq + t;
            const double r = p->lse_ref[i], g = out->lse[i];
            if (isinf(r)) { /* nothing visible: o = 0 exactly, lse = -inf */
                assert_true(isinf(g) && g < 0);
                for (int d = 0; d < p->dv; d++) assert_true(out->o[((size_t)t * p->hq + qh) * p->dv + d] == 0.0f);
                continue;
            }
            assert_true(isfinite(g));
            const double e = fabs(g - r) / (2e-3 + 1e-5 * fabs(r));
            if (e > worst) worst = e;
        }
    print_message(", lse err/tol %.3f\n", worst);
    assert_true(err < tol);
    assert_true(worst < 1.0);
}

static void run_and_check(const fsa_kvcache_plan *plan, kvc_problem *p, const char *name, kvc_outputs *keep)
{
    kvc_device dv;
    kvc_device_make(&dv, p, plan);
    kvc_poison(&dv, p);
    fsa_kvcache_args a = kvc_args_of(&dv, p);
    const fsa_status st = fsa_kvcache_attention(plan, &a, NULL);
    if (st != FSA_STATUS_OK) fail_msg("%s: %s", name, fsa_last_error());
    fsa_test_sync();
    kvc_outputs out;
    kvc_download(&out, &dv, p);
    check_against_reference(&out, p, name);
    if (keep) *keep = out;
    else kvc_outputs_free(&out);
    kvc_device_free(&dv);
}

/* FSA_TEST_CASES=name,name,... runs only the cases named (e.g. one that the
 * quick subset leaves out, under compute-sanitizer). */
static int case_selected(size_t i)
{
    const char *only = getenv("FSA_TEST_CASES");
    if (only != NULL) {
        const size_t n = strlen(cases[i].name);
        for (const char *at = strstr(only, cases[i].name); at != NULL; at = strstr(at + 1, cases[i].name))
            if ((at == only || at[-1] == ',') && (at[n] == ',' || at[n] == '\0')) return 1;
        return 0;
    }
    return !g_quick || cases[i].quick;
}

static void run_cases(int with_dv)
{
    for (size_t i = 0; i < N_CASES; i++) {
        if (!case_selected(i) || (cases[i].dv != 0) != with_dv) continue;
        kvc_problem p;
        kvc_problem_make(&p, &cases[i], 1000 + i);
        kvc_problem_reference(&p);
        run_and_check(plan_of(i), &p, cases[i].name, NULL);
        kvc_problem_free(&p);
    }
}

static void test_every_case_matches_the_reference(void **state)
{
    (void)state;
    run_cases(0);
}

static void test_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference(void **state)
{
    (void)state;
    run_cases(1);
}

/* A batch of 64 mixing decode, speculative and prefill lengths; sequence b
 * alone must give the same bits. */
static void assert_case_batch_invariant(size_t ci)
{
    kvc_case c = cases[ci];
    fsa_rng rng = {7};
    c.nseq = 64;
    for (int b = 0; b < 64; b++) {
        c.seqs[b].q_len = b % 9 == 0 ? 0 : b % 5 == 0 ? fsa_rng_int(&rng, 2, 8) : b == 17 ? 40 : 1;
        c.seqs[b].cached = fsa_rng_int(&rng, 0, 3000);
    }
    kvc_problem p;
    kvc_problem_make(&p, &c, 77);
    kvc_problem_reference(&p);
    const int checked[] = {1, 5, 17, 62};
    kvc_assert_batch_invariant(plan_of(ci), &p, checked, 4, run_and_check);
    kvc_problem_free(&p);
}

static void test_a_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64(void **state)
{
    (void)state;
    assert_case_batch_invariant(9); /* bf16 G16, shared selection, HND pages: rows on the 16-row side */
}

static void test_a_small_group_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64(void **state)
{
    (void)state;
    assert_case_batch_invariant(3); /* bf16 G4, page 64: keys on the 16-row side */
}

/* A plan of the case's descriptor made with the environment variable
 * `off` set to 0 (a path turned off), and the two plans' outputs on one
 * problem: both against the reference, and the same bits. */
static void assert_path_gives_the_same_bits(const fsa_kvcache_desc *d, const kvc_case *c, const char *off,
                                            uint64_t seed, const char *with_name, const char *without_name)
{
    fsa_kvcache_plan *with = NULL, *without = NULL;
    assert_int_equal(fsa_kvcache_plan_create(&with, g_ctx, d), FSA_STATUS_OK);
    setenv(off, "0", 1);
    const fsa_status st = fsa_kvcache_plan_create(&without, g_ctx, d);
    unsetenv(off);
    assert_int_equal(st, FSA_STATUS_OK);
    kvc_problem p;
    kvc_problem_make(&p, c, seed);
    kvc_problem_reference(&p);
    kvc_outputs a, b;
    run_and_check(with, &p, with_name, &a);
    run_and_check(without, &p, without_name, &b);
    assert_memory_equal(a.o_bits, b.o_bits, (size_t)p.Tq * p.hq * p.dv * 2);
    assert_memory_equal(a.lse, b.lse, (size_t)p.Tq * p.hq * 4);
    kvc_outputs_free(&a);
    kvc_outputs_free(&b);
    kvc_problem_free(&p);
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
            fsa_kvcache_desc d = kvc_desc_of(&cases[cis[k]], MAX_BATCH, MAX_TOKENS);
            d.splits = splits;
            assert_path_gives_the_same_bits(&d, &cases[cis[k]], "FSA_KVC_CLUSTER", 500 + (uint64_t)splits,
                                            "cluster merge", "workspace merge");
        }
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
        kvc_case c = cases[cis[k]];
        const int max_q = 32 / (c.hq / c.hkv) > 0 ? 32 / (c.hq / c.hkv) : 1; /* tokens in 32 rows */
        for (int b = 0; b < c.nseq; b++)
            if (c.seqs[b].q_len > max_q) c.seqs[b].q_len = max_q;
        const fsa_kvcache_desc d = kvc_desc_of(&c, MAX_BATCH, MAX_TOKENS);
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
    const size_t cis[] = {9, N_CASES - 1, N_CASES - 2};
    for (size_t k = 0; k < sizeof cis / sizeof cis[0]; k++) {
        const size_t ci = cis[k];
        kvc_problem p;
        kvc_problem_make(&p, &cases[ci], 800 + k);
        kvc_problem_reference(&p);
        kvc_outputs a, b;
        run_and_check(plan_of(ci), &p, "wide tiles", &a);
        run_and_check(plan_of(ci), &p, "wide tiles, again", &b);
        assert_memory_equal(a.o_bits, b.o_bits, (size_t)p.Tq * p.hq * p.dv * 2);
        assert_memory_equal(a.lse, b.lse, (size_t)p.Tq * p.hq * 4);
        kvc_outputs_free(&a);
        kvc_outputs_free(&b);
        const fsa_kvcache_desc d = kvc_desc_of(&cases[ci], MAX_BATCH, MAX_TOKENS);
        fsa_kvcache_plan *rows = NULL;
        setenv("FSA_KVC_TMA", "0", 1);
        const fsa_status st = fsa_kvcache_plan_create(&rows, g_ctx, &d);
        unsetenv("FSA_KVC_TMA");
        assert_int_equal(st, FSA_STATUS_OK);
        run_and_check(rows, &p, "wide tiles, row copies", NULL);
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
    const size_t cis[] = {3, 9, 16, N_CASES - 1};
    for (size_t k = 0; k < sizeof cis / sizeof cis[0]; k++) {
        const size_t ci = cis[k];
        kvc_problem p;
        kvc_problem_make(&p, &cases[ci], 900 + k);
        kvc_share_rows(&p);
        kvc_problem_reference(&p);
        kvc_outputs one, general;
        run_and_check(plan_of(ci), &p, cases[ci].name, &one);
        kvc_rotate_rows(&p);
        run_and_check(plan_of(ci), &p, "slots rotated", &general);
        assert_memory_equal(one.o_bits, general.o_bits, (size_t)p.Tq * p.hq * p.dv * 2);
        assert_memory_equal(one.lse, general.lse, (size_t)p.Tq * p.hq * 4);
        kvc_outputs_free(&one);
        kvc_outputs_free(&general);
        kvc_problem_free(&p);
    }
}

/* Capture once; change the page table, cached lengths, top-k rows and
 * lengths in place; every replay follows the new metadata. */
static void replay_with_updated_metadata(size_t ci)
{
    const fsa_cu_api *cu = NULL;
    assert_int_equal(fsa_cu_load(&cu), FSA_STATUS_OK);
    kvc_problem p;
    kvc_problem_make(&p, &cases[ci], 31);
    kvc_problem_reference(&p);
    kvc_device dv;
    kvc_device_make(&dv, &p, plan_of(ci));
    fsa_kvcache_args a = kvc_args_of(&dv, &p);
    CUstream s;
    CUgraph graph;
    CUgraphExec exec;
    assert_int_equal(cu->StreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(cu->StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, s), FSA_STATUS_OK);
    assert_int_equal(cu->StreamEndCapture(s, &graph), CUDA_SUCCESS);
    assert_int_equal(cu->GraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
    for (int rep = 0; rep < 3; rep++) {
        if (rep > 0) { /* shorter caches, new selections, pages moved */
            for (int b = 0; b < p.B; b++)
                if (p.seqused[b] - (p.cu_q[b + 1] - p.cu_q[b]) >= 3 * rep) p.seqused[b] -= 3 * rep;
            kvc_reselect(&p, &cases[ci], 500 + rep);
            kvc_reshuffle_pages(&p, 600 + rep);
            kvc_device_update(&dv, &p);
            kvc_problem_reference(&p);
        }
        kvc_poison(&dv, &p);
        assert_int_equal(cu->GraphLaunch(exec, s), CUDA_SUCCESS);
        assert_int_equal(cu->StreamSynchronize(s), CUDA_SUCCESS);
        kvc_outputs out;
        kvc_download(&out, &dv, &p);
        check_against_reference(&out, &p, rep ? "replay, new metadata" : "replay");
        kvc_outputs_free(&out);
    }
    cu->GraphExecDestroy(exec);
    cu->GraphDestroy(graph);
    cu->StreamDestroy(s);
    kvc_device_free(&dv);
    kvc_problem_free(&p);
}

static void test_a_captured_call_replays_with_updated_metadata(void **state)
{
    (void)state;
    replay_with_updated_metadata(8); /* f16 G1, top-k lengths */
    replay_with_updated_metadata(3); /* bf16 G4, page 64: tensor-map copies on sm_90a */
}

/* Page numbers past the cache or negative, a table too narrow for the cached
 * length, cached lengths shorter than the query, blocks past the cache and a
 * malformed cu_seqlens_q: the call runs, stays in bounds (compute-sanitizer
 * checks that) and writes finite values where it writes. */
static void test_bad_metadata_stays_in_bounds(void **state)
{
    (void)state;
    for (int kind = 0; kind < 5; kind++) {
        const size_t ci = kind % 2 ? 3 : 8;
        kvc_problem p;
        kvc_problem_make(&p, &cases[ci], 900 + kind);
        kvc_device dv;
        kvc_device_make(&dv, &p, plan_of(ci));
        fsa_kvcache_args a = kvc_args_of(&dv, &p);
        switch (kind) {
        case 0: /* used table entries pointing past the cache, or negative */
            for (int b = 0; b < p.B; b++) {
                p.table[(size_t)b * p.table_stride] = p.num_pages + b * 1000;
                p.table[(size_t)b * p.table_stride + p.table_stride - 1] = -5;
            }
            break;
        case 1: /* seqused_k shorter than the query, or negative */
            for (int b = 0; b < p.B; b++) p.seqused[b] = b % 2 ? -3 : (p.cu_q[b + 1] - p.cu_q[b]) / 2;
            break;
        case 2: /* cached lengths far past the page table */
            for (int b = 0; b < p.B; b++) p.seqused[b] += 1 << 20;
            break;
        case 3: /* blocks past the cache in every slot */
            for (size_t i = 0; i + 1 < p.topk_elems; i++) p.topk[i] = (int32_t)(1000000 + i);
            break;
        case 4: /* cu_seqlens_q past the tokens and decreasing */
            p.cu_q[1] = p.Tq + 50;
            p.cu_q[2] = 1;
            break;
        }
        fsa_test_h2d(dv.table, p.table, (size_t)p.B * p.table_stride * 4);
        fsa_test_h2d(dv.seqused, p.seqused, sizeof p.seqused);
        fsa_test_h2d(dv.topk, p.topk, p.topk_elems * 4);
        fsa_test_h2d(dv.cu, p.cu_q, sizeof p.cu_q);
        fsa_test_dfill(dv.o, 0, dv.o_bytes);
        fsa_test_dfill(dv.lse, 0, (size_t)p.hq * p.Tq * 4);
        assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_OK);
        fsa_test_sync();
        kvc_outputs out;
        kvc_download(&out, &dv, &p);
        /* Kind 2 claims cached keys in the unused (NaN) rows of the pages: NaN out is the right answer there. */
        if (kind != 2)
            for (size_t i = 0; i < (size_t)p.Tq * p.hq * p.dv; i++) assert_false(isnan(out.o[i]));
        print_message("  bad metadata kind %d: ran%s\n", kind, kind != 2 ? ", outputs finite" : "");
        kvc_outputs_free(&out);
        kvc_device_free(&dv);
        kvc_problem_free(&p);
    }
}

/* What the host can check comes back as a status before any launch. */
static void test_host_checkable_problems_return_a_status(void **state)
{
    (void)state;
    const size_t ci = 3;
    kvc_problem p;
    kvc_problem_make(&p, &cases[ci], 5);
    kvc_device dv;
    kvc_device_make(&dv, &p, plan_of(ci));
    const fsa_kvcache_args good = kvc_args_of(&dv, &p);
    fsa_kvcache_args a = good;
    a.batch = MAX_BATCH + 1;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.num_query_tokens = MAX_TOKENS + 1;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.q.ptr = 0;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_NULL_POINTER);
    a = good;
    a.k_cache.ptr += 2;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_MISALIGNED);
    a = good;
    a.v_page_stride = 12;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_MISALIGNED);
    a = good;
    a.num_pages = 0;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.block_table_stride = a.max_pages_per_seq - 1;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.workspace_bytes = dv.ws_bytes - 1;
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    a = good;
    a.struct_size = 8; /* shorter than the struct's first version */
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_STRUCT_SIZE);
    a = good;
    a.num_query_tokens = 0; /* nothing to do */
    assert_int_equal(fsa_kvcache_attention(plan_of(ci), &a, NULL), FSA_STATUS_OK);
    kvc_device_free(&dv);
    kvc_problem_free(&p);
}

static int setup(void **state)
{
    (void)state;
    g_quick = getenv("FSA_TEST_QUICK") && atoi(getenv("FSA_TEST_QUICK"));
    /* FSA_TEST_CACHE_DIR: a kernel cache shared by several runs (e.g. filtered runs in parallel), kept. */
    const char *shared = getenv("FSA_TEST_CACHE_DIR");
    g_own_cache = shared == NULL || shared[0] == '\0';
    g_cache_dir = g_own_cache ? fsa_test_mkdtemp("kvcache-cache") : strdup(shared);
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) fsa_kvcache_plan_destroy(g_plans[i]);
    fsa_context_destroy(g_ctx);
    if (g_own_cache) fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_matches_the_reference),
        cmocka_unit_test(test_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference),
        cmocka_unit_test(test_a_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64),
        cmocka_unit_test(test_a_small_group_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64),
        cmocka_unit_test(test_the_cluster_merge_gives_the_bits_of_the_workspace_merge),
        cmocka_unit_test(test_tensor_map_copies_give_the_bits_of_row_copies),
        cmocka_unit_test(test_wide_tiles_match_the_reference_and_repeat_their_bits),
        cmocka_unit_test(test_tokens_sharing_one_row_give_the_bits_of_the_general_union),
        cmocka_unit_test(test_a_captured_call_replays_with_updated_metadata),
        cmocka_unit_test(test_bad_metadata_stays_in_bounds),
        cmocka_unit_test(test_host_checkable_problems_return_a_status),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. one test under
     * compute-sanitizer. Skips (exit 77) inside setup when there is no GPU. */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
