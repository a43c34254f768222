/* Selected-attention forward on the GPU against the CPU float64 reference:
 * both paths and AUTO, dtypes, head dims, group sizes, block sizes, index
 * layouts, strided tensors, varlen batches, junk in the top-k rows, empty
 * rows, chunked workspaces, a large logit, graph capture and determinism.
 * Outputs (and the workspace) are poisoned before every run.
 * FSA_TEST_QUICK=1 runs a subset (for compute-sanitizer). */
#include "reference.h"
#include "testing.h"

#include "context.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fwd_case {
    const char *name;
    fsa_dtype dtype;
    int d, hq, hkv, bk, k;
    int lens[6];
    int nseq;
    int layout_tkh;      /* 1: top-k as [T, Hkv, K]; 0: [Hkv, T, K] */
    int strided;         /* q/k/v/o with padded head and token strides */
    fsa_algorithm alg;
    uint64_t ws_limit;
    int junk;            /* -1 mid-row, future and out-of-range blocks, repeats, empty rows */
    int big_logit;       /* one key scores about 1e4 above the rest */
    int quick;           /* part of the FSA_TEST_QUICK subset */
} fwd_case;

#define BF FSA_DTYPE_BF16
#define HF FSA_DTYPE_F16
#define A_AUTO FSA_ALGORITHM_AUTO
#define A_FSA FSA_ALGORITHM_FSA
#define A_NSA FSA_ALGORITHM_NSA

static const fwd_case cases[] = {
    /* name                     dtype d   hq  hkv bk   k   lens                        n  tkh str alg    ws    junk big quick */
    {"bf16_d128_g1_bk64_fsa",   BF, 128, 4,  4,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_FSA,  0,      1, 0, 1},
    {"bf16_d128_g1_bk64_nsa",   BF, 128, 4,  4,  64, 8, {1, 63, 64, 65, 300},      5, 0, 0, A_NSA,  0,      1, 0, 1},
    {"bf16_d128_g4_bk64_auto",  BF, 128, 8,  2,  64, 8, {1000},                    1, 1, 0, A_AUTO, 0,      0, 0, 0},
    {"bf16_d64_g2_bk32_fsa",    BF, 64,  4,  2,  32, 6, {1, 63, 64, 65, 200},      5, 1, 1, A_FSA,  0,      1, 0, 1},
    {"bf16_d64_g2_bk32_nsa",    BF, 64,  4,  2,  32, 6, {1, 63, 64, 65, 200},      5, 1, 1, A_NSA,  0,      1, 0, 0},
    {"f16_d128_g3_bk64_fsa",    HF, 128, 6,  2,  64, 8, {5, 130, 250},             3, 0, 0, A_FSA,  0,      1, 0, 0},
    {"f16_d128_g3_bk64_nsa",    HF, 128, 6,  2,  64, 8, {5, 130, 250},             3, 0, 0, A_NSA,  0,      1, 0, 0},
    {"bf16_d96_g5_bk16_fsa",    BF, 96,  5,  1,  16, 12, {40, 150},                2, 0, 0, A_FSA,  0,      1, 0, 1},
    {"bf16_d96_g5_bk16_nsa",    BF, 96,  5,  1,  16, 12, {40, 150},                2, 0, 0, A_NSA,  0,      1, 0, 0},
    {"f16_d192_g7_bk128_fsa",   HF, 192, 7,  1,  128, 3, {129, 300},               2, 1, 1, A_FSA,  0,      1, 0, 0},
    {"f16_d192_g7_bk128_nsa",   HF, 192, 7,  1,  128, 3, {129, 300},               2, 1, 1, A_NSA,  0,      1, 0, 0},
    {"bf16_d256_g8_bk64_fsa",   BF, 256, 16, 2,  64, 4, {64, 200},                 2, 0, 0, A_FSA,  0,      0, 0, 0},
    {"bf16_d256_g8_bk64_nsa",   BF, 256, 16, 2,  64, 4, {64, 200},                 2, 0, 0, A_NSA,  0,      1, 0, 1},
    {"bf16_d32_g12_bk32_fsa",   BF, 32,  12, 1,  32, 5, {33, 97, 100},             3, 1, 0, A_FSA,  0,      1, 0, 0},
    {"bf16_d32_g12_bk32_nsa",   BF, 32,  12, 1,  32, 5, {33, 97, 100},             3, 1, 0, A_NSA,  0,      1, 0, 0},
    {"f16_d64_g16_bk64_fsa",    HF, 64,  32, 2,  64, 6, {1, 63, 64, 65, 250},      5, 0, 1, A_FSA,  0,      1, 0, 0},
    {"f16_d64_g16_bk64_nsa",    HF, 64,  32, 2,  64, 6, {1, 63, 64, 65, 250},      5, 0, 1, A_NSA,  0,      1, 0, 1},
    {"bf16_d128_g16_bk128_auto",BF, 128, 16, 1,  128, 4, {300},                    1, 0, 0, A_AUTO, 0,      1, 0, 0},
    {"bf16_d128_g2_bk64_chunked", BF, 128, 4, 2, 64, 8, {100, 400, 37},            3, 0, 0, A_FSA,  300000, 1, 0, 1},
    {"bf16_d128_g24_bk64_nsa",  BF, 128, 24, 1,  64, 4, {150},                     1, 0, 0, A_NSA,  0,      1, 0, 0},
    {"bf16_d64_g1_k64_fsa",     BF, 64,  2,  2,  16, 64, {700},                    1, 0, 0, A_FSA,  0,      1, 0, 0},
    {"bf16_d64_g1_k1_t1",       BF, 64,  2,  2,  64, 1, {1},                       1, 0, 0, A_FSA,  0,      0, 0, 0},
    {"bf16_d128_g1_biglogit",   BF, 128, 1,  1,  64, 4, {256},                     1, 0, 0, A_FSA,  0,      0, 1, 1},
    {"bf16_d128_g1_biglogit_nsa", BF, 128, 1, 1, 64, 4, {256},                     1, 0, 0, A_NSA,  0,      0, 1, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;
static fsa_plan *g_plans[N_CASES];
static int g_quick;

static int group_of(const fwd_case *c) { return c->hq / c->hkv; }

static fsa_selected_attention_desc desc_of(const fwd_case *c)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.dtype = c->dtype;
    d.head_dim = c->d;
    d.num_q_heads = c->hq;
    d.num_kv_heads = c->hkv;
    d.block_size = c->bk;
    d.top_k = c->k;
    d.algorithm = c->alg;
    d.workspace_limit = c->ws_limit;
    return d;
}

/* ------------------------------------------------------------ problem data */

typedef struct problem {
    int T, B, G;
    int32_t cu[8];
    float *q, *k, *v;       /* logical, dtype-rounded */
    int32_t *topk;
    int64_t topk_hs, topk_ts;
    int64_t q_ts, q_hs, kv_ts, kv_hs, o_ts, o_hs; /* device layouts (elements) */
    double scale;
    double *o_ref, *lse_ref;
    int *empty_row;         /* [Hq, T]: 1 when the row has no visible key */
} problem;

static float round_to(fsa_dtype dt, float x)
{
    return dt == FSA_DTYPE_BF16 ? fsa_bf16_to_f32(fsa_f32_to_bf16(x)) : fsa_f16_to_f32(fsa_f32_to_f16(x));
}

static uint16_t bits_of(fsa_dtype dt, float x) { return dt == FSA_DTYPE_BF16 ? fsa_f32_to_bf16(x) : fsa_f32_to_f16(x); }
static float float_of(fsa_dtype dt, uint16_t x) { return dt == FSA_DTYPE_BF16 ? fsa_bf16_to_f32(x) : fsa_f16_to_f32(x); }

/* Junk that the kernels must ignore or treat as documented. */
static void add_junk(problem *p, const fwd_case *c, fsa_rng *rng)
{
    for (int h = 0; h < c->hkv; h++) {
        for (int t = 0; t < p->T; t++) {
            int32_t *row = p->topk + h * p->topk_hs + t * p->topk_ts;
            int b = fsa_ref_sequence_of(p->B, p->cu, t);
            int i = t - p->cu[b];
            int own = i / c->bk;
            int nb = (p->cu[b + 1] - p->cu[b] + c->bk - 1) / c->bk;
            int kind = fsa_rng_int(rng, 0, 9);
            if (kind == 0) { /* empty row */
                for (int s = 0; s < c->k; s++) row[s] = -1;
            } else if (kind == 1 && c->k >= 2) { /* -1 in the middle */
                row[c->k / 2] = -1;
            } else if (kind == 2) { /* a future block (when one exists) and one past the end */
                row[fsa_rng_int(rng, 0, c->k - 1)] = own + 1 < nb ? own + 1 : nb + 3;
            } else if (kind == 3 && c->k >= 2) { /* a repeated block */
                row[c->k - 1] = row[0];
            } else if (kind == 4) { /* only the own block: at i % BK == 0 the only key is the token itself */
                for (int s = 0; s < c->k; s++) row[s] = -1;
                row[fsa_rng_int(rng, 0, c->k - 1)] = own;
            } else if (kind == 5) {
                row[fsa_rng_int(rng, 0, c->k - 1)] = -7 - fsa_rng_int(rng, 0, 100);
            }
        }
    }
}

typedef struct ref_job {
    const fsa_ref_problem *rp;
    problem *p;
    int hq, d, first, step;
} ref_job;

static void *ref_worker(void *arg)
{
    ref_job *j = arg;
    for (int row = j->first; row < j->hq * j->p->T; row += j->step) {
        int qh = row / j->p->T, t = row % j->p->T;
        double lse;
        fsa_ref_forward_row(j->rp, qh, t, j->p->o_ref + ((size_t)t * j->hq + qh) * j->d, &lse);
        j->p->lse_ref[(size_t)qh * j->p->T + t] = lse;
        j->p->empty_row[(size_t)qh * j->p->T + t] = isinf(lse) && lse < 0;
    }
    return NULL;
}

static void reference(problem *p, const fwd_case *c)
{
    fsa_ref_problem rp = {p->T, p->B, p->cu, c->hq, c->hkv, c->d, c->bk, c->k, p->scale,
                          p->q, p->k, p->v, p->topk, p->topk_hs, p->topk_ts};
    enum { MAX_THREADS = 32 };
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
    pthread_t th[MAX_THREADS];
    ref_job jobs[MAX_THREADS];
    for (int i = 0; i < nt; i++) {
        jobs[i] = (ref_job){&rp, p, c->hq, c->d, i, nt};
        assert_int_equal(pthread_create(&th[i], NULL, ref_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
}

static void problem_make(problem *p, const fwd_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    fsa_rng rng = {seed};
    p->B = c->nseq;
    p->G = group_of(c);
    p->cu[0] = 0;
    for (int b = 0; b < c->nseq; b++) p->cu[b + 1] = p->cu[b] + c->lens[b];
    p->T = p->cu[c->nseq];
    const size_t nq = (size_t)p->T * c->hq * c->d, nkv = (size_t)p->T * c->hkv * c->d;
    p->q = malloc(nq * sizeof(float));
    p->k = malloc(nkv * sizeof(float));
    p->v = malloc(nkv * sizeof(float));
    p->topk = malloc((size_t)c->hkv * p->T * c->k * sizeof(int32_t));
    p->o_ref = malloc(nq * sizeof(double));
    p->lse_ref = malloc((size_t)c->hq * p->T * sizeof(double));
    p->empty_row = malloc((size_t)c->hq * p->T * sizeof(int));
    assert_true(p->q && p->k && p->v && p->topk && p->o_ref && p->lse_ref && p->empty_row);
    for (size_t i = 0; i < nq; i++) p->q[i] = round_to(c->dtype, (float)fsa_rng_normal(&rng));
    for (size_t i = 0; i < nkv; i++) p->k[i] = round_to(c->dtype, (float)fsa_rng_normal(&rng));
    for (size_t i = 0; i < nkv; i++) p->v[i] = round_to(c->dtype, (float)fsa_rng_normal(&rng));
    p->scale = 1.0 / sqrt((double)c->d);
    if (c->layout_tkh) {
        p->topk_ts = (int64_t)c->hkv * c->k;
        p->topk_hs = c->k;
    } else {
        p->topk_hs = (int64_t)p->T * c->k;
        p->topk_ts = c->k;
    }
    fsa_ref_make_selection(p->topk, p->topk_hs, p->topk_ts, p->T, p->B, p->cu, c->hkv, c->bk, c->k, &rng);
    if (c->junk) add_junk(p, c, &rng);
    if (c->big_logit) {
        /* Key 3 (block 0) of head 0 scores 1e4 for the last token, far above the rest. */
        const int t = p->T - 1, j = 3;
        double qq = 0;
        for (int d = 0; d < c->d; d++) qq += (double)p->q[(size_t)t * c->hq * c->d + d] * p->q[(size_t)t * c->hq * c->d + d];
        for (int d = 0; d < c->d; d++)
            p->k[(size_t)j * c->hkv * c->d + d] =
                round_to(c->dtype, (float)(1e4 / p->scale * p->q[(size_t)t * c->hq * c->d + d] / qq));
    }
    /* Device layouts: padded strides when asked, to prove strides are honoured. */
    const int pad = c->strided ? 8 : 0;
    p->q_hs = c->d + pad;
    p->q_ts = (int64_t)c->hq * p->q_hs + pad;
    p->kv_hs = c->d + 2 * pad;
    p->kv_ts = (int64_t)c->hkv * p->kv_hs + pad;
    p->o_hs = c->d + pad;
    p->o_ts = (int64_t)c->hq * p->o_hs + 3 * pad;
    reference(p, c);
}

static void problem_free(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->topk);
    free(p->o_ref);
    free(p->lse_ref);
    free(p->empty_row);
}

/* Logical [T, H, D] floats into a strided device image. */
static uint64_t upload_strided(const float *src, int T, int H, int D, int64_t ts, int64_t hs, fsa_dtype dt)
{
    size_t n = (size_t)T * ts;
    uint16_t *img = malloc(n * 2 + 2);
    assert_non_null(img);
    memset(img, 0xff, n * 2 + 2); /* gaps hold NaN: a read of a gap poisons the output */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) img[t * ts + h * hs + d] = bits_of(dt, src[((size_t)t * H + h) * D + d]);
    uint64_t dev = fsa_test_dalloc(n * 2 + 2);
    fsa_test_h2d(dev, img, n * 2 + 2);
    free(img);
    return dev;
}

/* ------------------------------------------------------------ device run */

typedef struct device_problem {
    uint64_t q, k, v, o, topk, cu, lse, ws;
    size_t o_bytes, ws_bytes;
} device_problem;

static void device_make(device_problem *dp, const problem *p, const fwd_case *c, const fsa_plan *plan)
{
    memset(dp, 0, sizeof *dp);
    dp->q = upload_strided(p->q, p->T, c->hq, c->d, p->q_ts, p->q_hs, c->dtype);
    dp->k = upload_strided(p->k, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs, c->dtype);
    dp->v = upload_strided(p->v, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs, c->dtype);
    dp->o_bytes = (size_t)p->T * p->o_ts * 2;
    dp->o = fsa_test_dalloc(dp->o_bytes);
    size_t topk_bytes = (size_t)c->hkv * p->T * c->k * 4;
    dp->topk = fsa_test_dalloc(topk_bytes);
    fsa_test_h2d(dp->topk, p->topk, topk_bytes);
    dp->cu = fsa_test_dalloc((size_t)(p->B + 1) * 4);
    fsa_test_h2d(dp->cu, p->cu, (size_t)(p->B + 1) * 4);
    dp->lse = fsa_test_dalloc((size_t)c->hq * p->T * 4);
    assert_int_equal(fsa_plan_workspace_size(&dp->ws_bytes, plan, p->T, p->B), FSA_STATUS_OK);
    if (c->ws_limit) assert_true(dp->ws_bytes <= c->ws_limit);
    if (dp->ws_bytes) dp->ws = fsa_test_dalloc(dp->ws_bytes);
}

static void device_free(device_problem *dp)
{
    fsa_test_dfree(dp->q);
    fsa_test_dfree(dp->k);
    fsa_test_dfree(dp->v);
    fsa_test_dfree(dp->o);
    fsa_test_dfree(dp->topk);
    fsa_test_dfree(dp->cu);
    fsa_test_dfree(dp->lse);
    fsa_test_dfree(dp->ws);
}

static fsa_fwd_args args_of(const device_problem *dp, const problem *p, const fwd_case *c)
{
    fsa_fwd_args a = FSA_FWD_ARGS_INIT;
    a.total_tokens = p->T;
    a.batch = p->B;
    a.q = dp->q;
    a.k = dp->k;
    a.v = dp->v;
    a.o = dp->o;
    a.q_token_stride = p->q_ts;
    a.q_head_stride = p->q_hs;
    a.k_token_stride = a.v_token_stride = p->kv_ts;
    a.k_head_stride = a.v_head_stride = p->kv_hs;
    a.o_token_stride = p->o_ts;
    a.o_head_stride = p->o_hs;
    a.topk = dp->topk;
    a.topk_head_stride = p->topk_hs;
    a.topk_token_stride = p->topk_ts;
    a.cu_seqlens = dp->cu;
    a.lse = dp->lse;
    a.workspace = dp->ws;
    a.workspace_bytes = dp->ws_bytes;
    (void)c;
    return a;
}

static void poison(const device_problem *dp, const problem *p, const fwd_case *c)
{
    fsa_test_dfill(dp->o, 0xff, dp->o_bytes);
    fsa_test_dfill(dp->lse, 0xff, (size_t)c->hq * p->T * 4);
    if (dp->ws) fsa_test_dfill(dp->ws, 0xff, dp->ws_bytes);
}

typedef struct outputs {
    uint16_t *o_img; /* device image of o */
    float *o;        /* logical [T, Hq, D] */
    float *lse;
} outputs;

static void download(outputs *out, const device_problem *dp, const problem *p, const fwd_case *c)
{
    out->o_img = malloc(dp->o_bytes);
    out->o = malloc((size_t)p->T * c->hq * c->d * sizeof(float));
    out->lse = malloc((size_t)c->hq * p->T * sizeof(float));
    assert_true(out->o_img && out->o && out->lse);
    fsa_test_d2h(out->o_img, dp->o, dp->o_bytes);
    fsa_test_d2h(out->lse, dp->lse, (size_t)c->hq * p->T * 4);
    for (int t = 0; t < p->T; t++)
        for (int h = 0; h < c->hq; h++)
            for (int d = 0; d < c->d; d++)
                out->o[((size_t)t * c->hq + h) * c->d + d] = float_of(c->dtype, out->o_img[t * p->o_ts + h * p->o_hs + d]);
}

static void outputs_free(outputs *o)
{
    free(o->o_img);
    free(o->o);
    free(o->lse);
}

static void check_against_reference(const outputs *out, const problem *p, const fwd_case *c)
{
    const size_t n = (size_t)p->T * c->hq * c->d;
    const double tol = c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3;
    double err = fsa_rel_error(out->o, p->o_ref, n);
    print_message("  %-28s o rel err %.3e (tol %.0e)", c->name, err, tol);
    assert_true(err < tol);
    double worst_lse = 0;
    for (size_t i = 0; i < (size_t)c->hq * p->T; i++) {
        double r = p->lse_ref[i], g = out->lse[i];
        if (isinf(r)) {
            assert_true(isinf(g) && g < 0);
            continue;
        }
        assert_true(isfinite(g));
        double e = fabs(g - r) / (2e-3 + 1e-5 * fabs(r));
        if (e > worst_lse) worst_lse = e;
    }
    print_message(", lse err/tol %.3f\n", worst_lse);
    assert_true(worst_lse < 1.0);
    /* Rows with nothing visible: exactly zero. */
    for (int qh = 0; qh < c->hq; qh++)
        for (int t = 0; t < p->T; t++)
            if (p->empty_row[(size_t)qh * p->T + t])
                for (int d = 0; d < c->d; d++) assert_true(out->o_img[t * p->o_ts + qh * p->o_hs + d] == 0);
    /* The gaps of a strided output are never written. */
    if (c->strided)
        for (int t = 0; t < p->T; t++)
            for (int d = (int)(c->hq * p->o_hs); d < p->o_ts; d++) assert_int_equal(out->o_img[t * p->o_ts + d], 0xffff);
}

static void run_case(const fwd_case *c, fsa_plan *plan)
{
    problem p;
    problem_make(&p, c, 0x5eed0000u + (uint64_t)(c - cases));
    device_problem dp;
    device_make(&dp, &p, c, plan);
    fsa_fwd_args a = args_of(&dp, &p, c);

    poison(&dp, &p, c);
    fsa_status st = fsa_selected_attention_fwd(plan, &a, NULL);
    if (st != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    outputs first;
    download(&first, &dp, &p, c);
    check_against_reference(&first, &p, c);

    /* Same inputs, same bits. */
    poison(&dp, &p, c);
    assert_int_equal(fsa_selected_attention_fwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    outputs second;
    download(&second, &dp, &p, c);
    assert_memory_equal(first.o_img, second.o_img, dp.o_bytes);
    assert_memory_equal(first.lse, second.lse, (size_t)c->hq * p.T * 4);

    outputs_free(&first);
    outputs_free(&second);
    device_free(&dp);
    problem_free(&p);
}

/* ------------------------------------------------------------ tests */

static void test_forward_matches_the_reference_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) {
        if (g_quick && !cases[i].quick) continue;
        run_case(&cases[i], g_plans[i]);
    }
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
    const fwd_case *c = &cases[0]; /* FSA path: memset plus four kernels */
    const fsa_cu_api *cu = NULL;
    assert_int_equal(fsa_cu_load(&cu), FSA_STATUS_OK);
    problem p;
    problem_make(&p, c, 77);
    device_problem dp;
    device_make(&dp, &p, c, g_plans[0]);
    fsa_fwd_args a = args_of(&dp, &p, c);

    poison(&dp, &p, c);
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    outputs direct;
    download(&direct, &dp, &p, c);
    check_against_reference(&direct, &p, c);

    CUstream s;
    CUgraph graph;
    CUgraphExec exec;
    assert_int_equal(cu->StreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(cu->StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, s), FSA_STATUS_OK);
    assert_int_equal(cu->StreamEndCapture(s, &graph), CUDA_SUCCESS);
    assert_int_equal(cu->GraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
    for (int rep = 0; rep < 3; rep++) {
        poison(&dp, &p, c);
        assert_int_equal(cu->GraphLaunch(exec, s), CUDA_SUCCESS);
        assert_int_equal(cu->StreamSynchronize(s), CUDA_SUCCESS);
        outputs replay;
        download(&replay, &dp, &p, c);
        assert_memory_equal(direct.o_img, replay.o_img, dp.o_bytes);
        assert_memory_equal(direct.lse, replay.lse, (size_t)c->hq * p.T * 4);
        outputs_free(&replay);
    }
    cu->GraphExecDestroy(exec);
    cu->GraphDestroy(graph);
    cu->StreamDestroy(s);
    outputs_free(&direct);
    device_free(&dp);
    problem_free(&p);
}

static void test_a_too_small_workspace_is_refused_before_any_launch(void **state)
{
    (void)state;
    const fwd_case *c = &cases[0];
    problem p;
    problem_make(&p, c, 99);
    device_problem dp;
    device_make(&dp, &p, c, g_plans[0]);
    fsa_fwd_args a = args_of(&dp, &p, c);
    assert_true(dp.ws_bytes > 0);
    a.workspace_bytes = dp.ws_bytes - 1;
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    a.workspace_bytes = dp.ws_bytes;
    a.q += 2;
    assert_int_equal(fsa_selected_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_MISALIGNED);
    device_free(&dp);
    problem_free(&p);
}

/* Plans compile in parallel threads before the tests run. */
typedef struct plan_job {
    size_t next;
    pthread_mutex_t lock;
    int failed;
} plan_job;

static void *plan_worker(void *arg)
{
    plan_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        size_t i = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= N_CASES) return NULL;
        fsa_selected_attention_desc d = desc_of(&cases[i]);
        if (fsa_plan_create(&g_plans[i], g_ctx, &d) != FSA_STATUS_OK) {
            fprintf(stderr, "plan %s: %s\n", cases[i].name, fsa_last_error());
            j->failed = 1;
        }
    }
}

static int setup(void **state)
{
    (void)state;
    g_quick = getenv("FSA_TEST_QUICK") && atoi(getenv("FSA_TEST_QUICK"));
    g_cache_dir = fsa_test_mkdtemp("fwd-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    plan_job job = {0, PTHREAD_MUTEX_INITIALIZER, 0};
    enum { THREADS = 8 };
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, plan_worker, &job);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    /* Plan creation makes its own context current and restores the previous one. */
    return job.failed ? -1 : 0;
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
        cmocka_unit_test(test_auto_reports_its_choice_and_reason),
        cmocka_unit_test(test_a_graph_captured_forward_replays_to_the_same_output),
        cmocka_unit_test(test_a_too_small_workspace_is_refused_before_any_launch),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
