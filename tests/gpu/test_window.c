/* Sliding-window attention forward on the GPU against the CPU float64
 * reference: dtypes, Dk != Dv, groups 1..16, windows of 1, shorter and longer
 * than the sequences, varlen batches, strided tensors; outputs poisoned
 * before every run, the same bits twice, lse optional. FSA_TEST_QUICK=1 runs
 * a subset. */
#include "attention_problem.h"
#include "reference_window.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct win_case {
    const char *name;
    fsa_dtype dtype;
    int dk, dv, hq, hkv, window;
    int lens[5];
    int nseq;
    int strided;
    int quick;
} win_case;

static const win_case cases[] = {
    /* name                  dtype             dk   dv   hq  hkv W     lens                     n  str quick */
    {"bf16_d128_g4_w512",    FSA_DTYPE_BF16,   128, 128, 8,  2,  512,  {1300, 1, 70},           3, 0, 1},
    {"bf16_dk192_dv128_g16", FSA_DTYPE_BF16,   192, 128, 32, 2,  100,  {600, 37},               2, 1, 1},
    {"f16_d64_g1_w1",        FSA_DTYPE_F16,    64,  64,  2,  2,  1,    {200, 3},                2, 0, 1},
    {"f16_dk32_dv96_g3_w65", FSA_DTYPE_F16,    32,  96,  6,  2,  65,   {5, 400, 129, 64},       4, 1, 0},
    {"bf16_d256_g2_causal",  FSA_DTYPE_BF16,   256, 256, 2,  1,  4096, {700},                   1, 0, 0},
    {"bf16_dk64_dv16_g12",   FSA_DTYPE_BF16,   64,  16,  12, 1,  33,   {500, 17},               2, 0, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;
static fsa_window_plan *g_plans[N_CASES];
static int g_quick;

static int runs(const win_case *c) { return !g_quick || c->quick; }

static float *random_rounded(fsa_rng *rng, size_t n, fsa_dtype dt)
{
    float *x = malloc((n + 1) * sizeof *x);
    assert_non_null(x);
    for (size_t e = 0; e < n; e++) x[e] = attn_round_to(dt, (float)fsa_rng_normal(rng));
    return x;
}

static void run_case(const win_case *c, const fsa_window_plan *plan)
{
    fsa_rng rng = {0x51d0u + (uint64_t)(c - cases)};
    int32_t cu[6] = {0};
    for (int b = 0; b < c->nseq; b++) cu[b + 1] = cu[b] + c->lens[b];
    const int T = cu[c->nseq];
    float *q = random_rounded(&rng, (size_t)T * c->hq * c->dk, c->dtype);
    float *k = random_rounded(&rng, (size_t)T * c->hkv * c->dk, c->dtype);
    float *v = random_rounded(&rng, (size_t)T * c->hkv * c->dv, c->dtype);
    const size_t no = (size_t)T * c->hq * c->dv;
    double *o_ref = malloc(no * sizeof *o_ref), *lse_ref = malloc((size_t)T * c->hq * sizeof *lse_ref);
    assert_true(o_ref && lse_ref);
    const fsa_ref_window_problem rp = {T, c->nseq, cu, c->hq, c->hkv, c->dk, c->dv, c->window,
                                       1.0 / sqrt((double)c->dk), q, k, v};
    fsa_ref_window_forward(&rp, o_ref, lse_ref);

    const int pad = c->strided ? 8 : 0;
    const int64_t q_hs = c->dk + pad, q_ts = c->hq * q_hs + pad, k_hs = c->dk + 2 * pad, k_ts = c->hkv * k_hs;
    const int64_t v_hs = c->dv + pad, v_ts = c->hkv * v_hs + pad, o_hs = c->dv + pad, o_ts = c->hq * o_hs + 3 * pad;
    fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
    a.total_tokens = T;
    a.batch = c->nseq;
    a.q = (fsa_tensor){upload_strided(q, T, c->hq, c->dk, q_ts, q_hs, c->dtype), q_ts, q_hs};
    a.k = (fsa_tensor){upload_strided(k, T, c->hkv, c->dk, k_ts, k_hs, c->dtype), k_ts, k_hs};
    a.v = (fsa_tensor){upload_strided(v, T, c->hkv, c->dv, v_ts, v_hs, c->dtype), v_ts, v_hs};
    const size_t o_bytes = (size_t)T * o_ts * 2, lse_bytes = (size_t)T * c->hq * 4;
    a.o = (fsa_tensor){fsa_test_dalloc(o_bytes), o_ts, o_hs};
    a.cu_seqlens = fsa_test_dalloc(sizeof cu);
    fsa_test_h2d(a.cu_seqlens, cu, sizeof cu);
    const uint64_t lse_dev = fsa_test_dalloc(lse_bytes);
    a.lse = lse_dev;

    float *o = malloc(no * sizeof *o), *lse = malloc(lse_bytes);
    uint16_t *img[2] = {malloc(o_bytes), malloc(o_bytes)};
    assert_true(o && lse && img[0] && img[1]);
    for (int run = 0; run < 2; run++) {
        if (run == 1) a.lse = 0; /* lse not wanted: o alone, the same bits */
        fsa_test_dfill(a.o.ptr, 0xff, o_bytes);
        if (a.lse) fsa_test_dfill(a.lse, 0xff, lse_bytes);
        if (fsa_window_attention_fwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        download_strided(o, img[run], a.o.ptr, T, c->hq, c->dv, o_ts, o_hs, c->dtype);
        if (run == 1) break;
        fsa_test_d2h(lse, a.lse, lse_bytes);
        const double tol = c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3;
        const double err = fsa_rel_error(o, o_ref, no);
        double worst = 0.0;
        for (size_t e = 0; e < (size_t)T * c->hq; e++) {
            assert_true(isfinite(lse[e])); /* every query sees itself */
            worst = fmax(worst, fabs(lse[e] - lse_ref[e]) / (2e-3 + 1e-5 * fabs(lse_ref[e])));
        }
        print_message("  %-24s T %5d  o rel err %.3e (tol %.0e), lse err/tol %.3f\n", c->name, T, err, tol, worst);
        assert_true(err < tol);
        assert_true(worst < 1.0);
        if (c->strided) /* the gaps of a strided output are never written */
            for (int t = 0; t < T; t++)
                for (int64_t e = (int64_t)c->hq * o_hs; e < o_ts; e++) assert_int_equal(img[0][t * o_ts + e], 0xffff);
    }
    assert_memory_equal(img[0], img[1], o_bytes);

    free(img[0]);
    free(img[1]);
    free(o);
    free(lse);
    free(o_ref);
    free(lse_ref);
    free(q);
    free(k);
    free(v);
    const uint64_t dev[] = {a.q.ptr, a.k.ptr, a.v.ptr, a.o.ptr, a.cu_seqlens, lse_dev};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) fsa_test_dfree(dev[i]);
}

static void test_window_attention_matches_the_reference_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++)
        if (runs(&cases[i])) run_case(&cases[i], g_plans[i]);
}

static int setup(void **state)
{
    (void)state;
    g_quick = getenv("FSA_TEST_QUICK") && atoi(getenv("FSA_TEST_QUICK"));
    g_cache_dir = fsa_test_mkdtemp("window-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    for (size_t i = 0; i < N_CASES; i++) {
        if (!runs(&cases[i])) continue;
        const win_case *c = &cases[i];
        fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
        d.dtype = c->dtype;
        d.head_dim = c->dk;
        d.value_dim = c->dv;
        d.num_q_heads = c->hq;
        d.num_kv_heads = c->hkv;
        d.window = c->window;
        if (fsa_window_plan_create(&g_plans[i], g_ctx, &d) != FSA_STATUS_OK) {
            fprintf(stderr, "plan %s: %s\n", c->name, fsa_last_error());
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) fsa_window_plan_destroy(g_plans[i]);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_attention_matches_the_reference_on_every_case),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
