/* The paged-KV-cache GPU tests' shared fixture (kvcache_fixture.h). */
#include "kvcache_fixture.h"

#include "jit/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The last two: new tokens that cross a block boundary at every block size, so an earlier token's future
   block is inside the cache (a later token's), where only the causal mask hides it. */
#define SEQS_EDGES {1, 0}, {1, 1}, {2, 63}, {8, 64}, {5, 65}, {0, 40}, {3, 30000}, {1, 30000}, {4, 1}, {7, 200}, \
                   {4, 62}, {6, 124}
#define PAGE_CASE(page, quick)                                                                             \
    {"bf16_d128_g4_bk64_page" #page, BF, 128, 8, 2, 64, 8, page, {SEQS_EDGES}, 12, KVC_TOPK_HTK, 0, 0, 1, quick}

const kvc_case kvc_cases[] = {
    PAGE_CASE(1, 1),
    PAGE_CASE(16, 0),
    PAGE_CASE(32, 0),
    PAGE_CASE(64, 1),
    PAGE_CASE(128, 0),
    PAGE_CASE(256, 0),
    /* name                          dtype d   hq  hkv bk   k   page seqs                                     n  topk              hnd len junk quick */
    {"bf16_d128_g1_prefill1000",     BF, 128, 2,  2,  64,  16, 64,  {{1000, 0}, {1000, 65}, {1000, 30000}}, 3, KVC_TOPK_THK,    0, 0, 1, 0},
    {"f16_d64_g16_prefill_shared",   HF, 64,  32, 2,  64,  16, 32,  {{1000, 63}, {6, 64}, {1, 0}},         3, KVC_TOPK_SHARED, 1, 1, 1, 0},
    {"f16_d64_g1_bk16_len_thk",      HF, 64,  2,  2,  16,  16, 16,  {SEQS_EDGES},                         12, KVC_TOPK_THK,   0, 1, 1, 1},
    {"bf16_d128_g16_shared_hnd",     BF, 128, 32, 2,  64,  16, 64,  {SEQS_EDGES},                         12, KVC_TOPK_SHARED, 1, 0, 1, 1},
    {"f16_d256_g64_bk128_page256",   HF, 256, 64, 1,  128, 4,  256, {{1, 0}, {4, 300}, {8, 65}, {2, 1}},  4, KVC_TOPK_HTK,    0, 1, 1, 0},
    {"bf16_d96_g3_bk32_page32_scale0.3", BF, 96, 6, 2, 32,  6,  32,  {SEQS_EDGES},                         12, KVC_TOPK_THK,   1, 0, 1, 0, 0, 0, 0.3f},
    {"bf16_d128_g8_bk256_page1",     BF, 128, 16, 2,  256, 4,  1,   {{1, 1000}, {8, 0}, {3, 257}},        3, KVC_TOPK_HTK,    0, 1, 0, 0},
    {"f16_d32_g2_bk64_k64_scale0.05", HF, 32, 4,  2,  64,  64, 16,  {{1, 5000}, {30, 4000}, {2, 70}},     3, KVC_TOPK_HTK,    0, 0, 1, 0, 0, 0, 0.05f},
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
    /* Dk != Dv through tensor maps on sm_90a (both multiples of 64, Dk <= 128, pages of 64 or more): a K map
       and a V map of their own widths, NHD and HND pages. */
    {"bf16_dk128_dv64_g4_page64",    BF, 128, 8,  2,  64,  16, 64,  {{1, 3000}, {4, 300}, {1, 0}, {200, 100}}, 4, KVC_TOPK_HTK, 0, 1, 1, 1, 64},
    {"f16_dk64_dv128_g2_page128",    HF, 64,  4,  2,  64,  8,  128, {{1, 63}, {4, 64}, {3, 5000}, {100, 0}}, 4, KVC_TOPK_THK, 1, 0, 1, 0, 128},
    /* Blocks of two stages (tensor-map copies on sm_90a: two page boxes per block). */
    {"bf16_d128_g4_bk128_page128",   BF, 128, 8,  2,  128, 8,  128, {SEQS_EDGES},                         12, KVC_TOPK_HTK,   0, 1, 1, 1},
    /* Groups of 5, 6 and 7 (two row tiles of 6, 5 and 4 tokens); q_len 1000 with 1 and 64 cached, 1 with 65,
       an empty sequence with nothing cached; a logit 1e4 above the rest (no junk, no lengths: the token's
       row holds its own block).                                                                 dv big */
    {"bf16_d128_g5_hnd",             BF, 128, 10, 2,  64,  8,  64,  {SEQS_EDGES},                         12, KVC_TOPK_HTK,   1, 0, 1, 0},
    {"f16_d64_g6_prefill_edges",     HF, 64,  12, 2,  32,  8,  16,  {{1000, 1}, {1000, 64}, {1, 65}, {0, 0}, {3, 30000}}, 5, KVC_TOPK_THK, 0, 1, 1, 0},
    {"bf16_d128_g7_big_logit",       BF, 128, 7,  1,  64,  4,  64,  {{1, 300}, {3, 100}},                 2, KVC_TOPK_THK,    0, 0, 0, 0, 0, 1},
    /* Tiles of 64 rows (warpgroup products on sm_90a tensor maps): decode at G 64, HND pages. */
    {"bf16_d128_g64_decode_hnd",     BF, 128, 64, 1,  64,  16, 64,  {{1, 3000}, {1, 0}, {2, 500}, {1, 64}, {1, 30000}}, 5, KVC_TOPK_THK, 1, 1, 1, 0},
    /* Tiles of 48 and 64 rows with their own selections (warpgroup products on sm_90a tensor maps). Keep it last. */
    {"f16_d128_g16_qlen4_page64",    HF, 128, 32, 2,  64,  16, 64,  {{4, 3000}, {3, 500}, {4, 64}, {1, 100}, {8, 1000}, {4, 0}}, 6, KVC_TOPK_HTK, 0, 1, 1, 0},
};
const size_t kvc_n_cases = sizeof kvc_cases / sizeof kvc_cases[0];


fsa_context *kvc_ctx;
static char *g_cache_dir;
static int g_own_cache; /* a temporary cache dir of this run, removed at the end */
static fsa_kvcache_plan *g_plans[sizeof kvc_cases / sizeof kvc_cases[0]];

fsa_kvcache_plan *kvc_plan_of(size_t i)
{
    if (g_plans[i] == NULL) {
        const fsa_kvcache_desc d = kvc_desc_of(&kvc_cases[i], KVC_FIXTURE_MAX_BATCH, KVC_FIXTURE_MAX_TOKENS);
        if (fsa_kvcache_plan_create(&g_plans[i], kvc_ctx, &d) != FSA_STATUS_OK)
            fail_msg("plan %s: %s", kvc_cases[i].name, fsa_last_error());
    }
    return g_plans[i];
}

void kvc_check_against_reference(const kvc_outputs *out, const kvc_problem *p, const char *name)
{
    const size_t n = (size_t)p->Tq * p->hq * p->dv;
    const double tol = p->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3;
    const double err = fsa_rel_error(out->o, p->o_ref, n);
    /* Each (token, head) row on its own too: one wrong row of a small output (a long context averages its
     * values toward zero) hardly moves the whole tensor's norm. */
    size_t worst_row = 0;
    const double row_err = fsa_row_rel_error(out->o, p->o_ref, (size_t)p->Tq * p->hq, (size_t)p->dv, 0.1, &worst_row);
    print_message("  %-30s Tq %5d  o rel err %.3e (tol %.0e), worst row %.3e (token %zu, head %zu; tol %.0e)", name,
                  p->Tq, err, tol, row_err, worst_row / (size_t)p->hq, worst_row % (size_t)p->hq, 3 * tol);
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
    assert_true(row_err < 3 * tol);
    assert_true(worst < 1.0);
    kvc_assert_o_padding_untouched(out, p);
}

void kvc_run_and_check(const fsa_kvcache_plan *plan, kvc_problem *p, const char *name, kvc_outputs *keep)
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
    kvc_check_against_reference(&out, p, name);
    if (keep) *keep = out;
    else kvc_outputs_free(&out);
    kvc_device_free(&dv);
}

int kvc_fixture_setup(void **state)
{
    (void)state;
    /* FSA_TEST_CACHE_DIR: a kernel cache shared by several runs (e.g. filtered runs in parallel), kept. */
    const char *shared = getenv("FSA_TEST_CACHE_DIR");
    g_own_cache = shared == NULL || shared[0] == '\0';
    g_cache_dir = g_own_cache ? fsa_test_mkdtemp("kvcache-cache") : strdup(shared);
    kvc_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    return 0;
}

int kvc_fixture_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < kvc_n_cases; i++) fsa_kvcache_plan_destroy(g_plans[i]);
    fsa_context_destroy(kvc_ctx);
    if (g_own_cache) fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}
