/* The workspace cap on the GPU. Calls of the standard problem (bf16, Hq 32,
 * D 128, BK 64, top-k 16) under the default cap need no more workspace than
 * their outputs and gradients leave of FSA_WORKSPACE_DEFAULT_BUDGET, forward
 * and backward, and a forward plus backward at T = 65536 runs in exactly
 * that workspace, writes every gradient and matches the float64 reference on
 * spot rows of the forward. Under small caps the backward runs in chunks of KV heads, or of
 * one head and several token chunks; both match the float64 reference (the
 * uncapped forward's o and lse too), and
 * against the uncapped call: o, lse and dq are the same bits, dk and dv too
 * under head chunks whose launches take the same work items (other items and
 * token chunks split their fp32 sums otherwise), and token chunks
 * of one index inversion the bits of token chunks that each invert their own. Outputs and
 * workspaces are poisoned before every run. FSA_TEST_QUICK=1 skips the
 * T = 65536 run. */
#include "attention_problem.h"

#include "attention/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fsa_context *g_ctx;
static char *g_cache_dir;
static int g_quick;

/* ------------------------------------------------ the standard problem */

#define STD_HQ 32
#define STD_GROUPS 5
static const int std_groups[STD_GROUPS] = {1, 2, 4, 8, 16};

static attn_case std_case(int g)
{
    attn_case c = {"standard", BF, 128, STD_HQ, STD_HQ / g, 64, 16, {0}, 1, 0, 0, A_AUTO, 0, 0, 0, 0};
    return c;
}

static void test_default_workspaces_of_the_standard_problem_stay_within_the_cap(void **state)
{
    (void)state;
    attn_case cases[STD_GROUPS];
    fsa_plan *plans[STD_GROUPS] = {NULL};
    for (int i = 0; i < STD_GROUPS; i++) cases[i] = std_case(std_groups[i]);
    assert_int_equal(attn_create_plans(plans, g_ctx, cases, STD_GROUPS, 1), 0);
    const int64_t tokens[] = {8192, 65536};
    for (int i = 0; i < STD_GROUPS; i++) {
        for (int j = 0; j < 2; j++) {
            size_t fwd = 0, bwd = 0;
            assert_int_equal(fsa_plan_workspace_size(&fwd, plans[i], tokens[j], 1), FSA_STATUS_OK);
            assert_int_equal(fsa_plan_workspace_size_bwd(&bwd, plans[i], tokens[j], 1), FSA_STATUS_OK);
            const uint64_t cap = fsa_call_workspace_cap(plans[i], FSA_OP_BWD, tokens[j]);
            print_message("  G %2d T %6lld: forward %zu B, backward %zu B (cap %llu)\n", std_groups[i],
                          (long long)tokens[j], fwd, bwd, (unsigned long long)cap);
            assert_true(fwd <= fsa_call_workspace_cap(plans[i], FSA_OP_FWD, tokens[j]));
            assert_true(bwd <= cap);
            /* o, lse, dq, dk, dv and the backward's workspace within the budget */
            const uint64_t own = (uint64_t)tokens[j] * (2 * STD_HQ * 128 * 2 + STD_HQ * 4 + 2 * (STD_HQ / std_groups[i]) * 128 * 2);
            assert_true(own + bwd <= FSA_WORKSPACE_DEFAULT_BUDGET);
            /* o, lse and the forward's workspace within the budget too (the forward's is gone before dq,
             * dk and dv exist) */
            assert_true((uint64_t)tokens[j] * (STD_HQ * 128 * 2 + STD_HQ * 4) + fwd <= FSA_WORKSPACE_DEFAULT_BUDGET);
            assert_true(bwd > 0);
        }
    }
    for (int i = 0; i < STD_GROUPS; i++) fsa_plan_destroy(plans[i]);
}

static int all_finite(const uint16_t *img, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((img[i] & 0x7f80) == 0x7f80) return 0; /* bf16 inf or NaN */
    return 1;
}

/* n random bf16 values, the 256 odd multiples of 1/128 in (-2, 2): exact in bf16, four per draw (the
 * problem at 65536 tokens has about 700 million inputs). */
static void random_bf16(uint16_t *img, size_t n, fsa_rng *rng)
{
    for (size_t i = 0; i < n; i += 4) {
        uint64_t r = fsa_rng_next(rng);
        for (size_t j = i; j < i + 4 && j < n; j++, r >>= 16)
            img[j] = fsa_f32_to_bf16((float)((int)(r & 0xff) * 2 - 255) / 128.0f);
    }
}

static uint16_t *random_bf16_image(size_t n, fsa_rng *rng)
{
    uint16_t *img = malloc(n * 2);
    assert_non_null(img);
    random_bf16(img, n, rng);
    return img;
}

static float *floats_of_bf16(const uint16_t *img, size_t n)
{
    float *f = malloc(n * sizeof(float));
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) f[i] = fsa_bf16_to_f32(img[i]);
    return f;
}

/* The forward at 65536 tokens against the float64 reference on SPOT_ROWS (query head, token) rows, the
 * first and the last token among them, spread over the tokens and the heads: o as a whole and row by row,
 * and lse. The full reference at that size would take minutes; a row costs top-k x 64 keys. q_img, k, v:
 * the inputs (contiguous [T, H, D]); topk [Hkv, T, K]; o_img and lse as the call wrote them. */
#define SPOT_ROWS 200
static void spot_check_forward(const uint16_t *q_img, const float *k, const float *v, const int32_t *topk,
                               const uint16_t *o_img, const float *lse, int T, int hkv, int D, int K)
{
    const int32_t cu[2] = {0, T};
    const fsa_ref_problem rp = {T, 1, cu, STD_HQ, hkv, D, 64, K, 1.0 / sqrt((double)D),
                                NULL, k, v, topk, (int64_t)T * K, K};
    const int G = STD_HQ / hkv;
    float *got = malloc((size_t)SPOT_ROWS * D * sizeof(float)), *q_row = malloc((size_t)D * sizeof(float));
    float *got_lse = malloc(SPOT_ROWS * sizeof(float));
    double *want = malloc((size_t)SPOT_ROWS * D * sizeof(double)), *want_lse = malloc(SPOT_ROWS * sizeof(double));
    int *rows_t = malloc(SPOT_ROWS * sizeof(int)), *rows_h = malloc(SPOT_ROWS * sizeof(int));
    assert_true(got && q_row && got_lse && want && want_lse && rows_t && rows_h);
    for (int i = 0; i < SPOT_ROWS; i++) {
        const int t = (int)((int64_t)i * (T - 1) / (SPOT_ROWS - 1)), qh = (i * 13) % STD_HQ; /* 13: every head */
        const size_t row = (size_t)t * STD_HQ + qh;
        rows_t[i] = t, rows_h[i] = qh;
        for (int d = 0; d < D; d++) {
            q_row[d] = fsa_bf16_to_f32(q_img[row * D + d]);
            got[(size_t)i * D + d] = fsa_bf16_to_f32(o_img[row * D + d]);
        }
        got_lse[i] = lse[(size_t)qh * T + t];
        fsa_ref_attend_at(&rp, qh, t, q_row, topk + (size_t)(qh / G) * T * K + (size_t)t * K, want + (size_t)i * D,
                          &want_lse[i]);
    }
    const double tol = 1e-2;
    const double err = fsa_rel_error(got, want, (size_t)SPOT_ROWS * D);
    size_t worst = 0, worst_lse = 0;
    const double row_err = fsa_row_rel_error(got, want, SPOT_ROWS, (size_t)D, ATTN_ROW_FLOOR, &worst);
    const double lse_err = attn_lse_error(got_lse, want_lse, SPOT_ROWS, &worst_lse);
    print_message("  T %d, %d rows: o rel err %.3e (tol %.0e), worst row %.3e (t %d h %d; tol %.0e), lse err/tol "
                  "%.3f (t %d h %d)\n",
                  T, SPOT_ROWS, err, tol, row_err, rows_t[worst], rows_h[worst], ATTN_ROW_TOL * tol, lse_err,
                  rows_t[worst_lse], rows_h[worst_lse]);
    assert_true(err < tol);
    assert_true(row_err < ATTN_ROW_TOL * tol);
    assert_true(lse_err < 1.0);
    free(got), free(q_row), free(got_lse), free(want), free(want_lse), free(rows_t), free(rows_h);
}

/* One forward plus backward of the standard problem at T = 65536, G = 4, in
 * workspaces of exactly the queried sizes: the calls accept them (so they
 * need no more than the cap), write every output and gradient row (poisoned
 * with NaN first; the random inputs are small, so every value is finite), and
 * the forward's rows checked match the reference. */
static void test_a_default_forward_and_backward_at_65536_tokens_run_within_the_cap(void **state)
{
    (void)state;
    if (g_quick) skip();
    const int T = 65536, G = 4, hkv = STD_HQ / G, D = 128, K = 16;
    attn_case c = std_case(G);
    fsa_plan *plan = NULL;
    assert_int_equal(attn_create_plans(&plan, g_ctx, &c, 1, 1), 0);
    const size_t nq = (size_t)T * STD_HQ * D, nkv = (size_t)T * hkv * D;
    size_t ws_f = 0, ws_b = 0;
    assert_int_equal(fsa_plan_workspace_size(&ws_f, plan, T, 1), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size_bwd(&ws_b, plan, T, 1), FSA_STATUS_OK);
    assert_true(ws_f <= fsa_call_workspace_cap(plan, FSA_OP_FWD, T));
    assert_true(ws_b <= fsa_call_workspace_cap(plan, FSA_OP_BWD, T));

    int32_t cu[2] = {0, T};
    int32_t *topk = malloc((size_t)hkv * T * K * 4);
    assert_non_null(topk);
    fsa_rng rng = {65536};
    fsa_ref_make_selection(topk, (int64_t)T * K, K, T, 1, cu, hkv, 64, K, &rng);
    uint16_t *q_img = random_bf16_image(nq, &rng), *k_img = random_bf16_image(nkv, &rng);
    uint16_t *v_img = random_bf16_image(nkv, &rng), *dout_img = random_bf16_image(nq, &rng);
    uint64_t q = fsa_test_dalloc(nq * 2), k = fsa_test_dalloc(nkv * 2), v = fsa_test_dalloc(nkv * 2);
    uint64_t o = fsa_test_dalloc(nq * 2), dout = fsa_test_dalloc(nq * 2), dq = fsa_test_dalloc(nq * 2);
    uint64_t dk = fsa_test_dalloc(nkv * 2), dv = fsa_test_dalloc(nkv * 2), lse = fsa_test_dalloc((size_t)STD_HQ * T * 4);
    uint64_t dtopk = fsa_test_dalloc((size_t)hkv * T * K * 4), dcu = fsa_test_dalloc(8);
    uint64_t wf = ws_f ? fsa_test_dalloc(ws_f) : 0, wb = fsa_test_dalloc(ws_b);
    fsa_test_h2d(dtopk, topk, (size_t)hkv * T * K * 4);
    fsa_test_h2d(dcu, cu, 8);
    fsa_test_h2d(q, q_img, nq * 2);
    fsa_test_h2d(k, k_img, nkv * 2);
    fsa_test_h2d(v, v_img, nkv * 2);
    fsa_test_h2d(dout, dout_img, nq * 2);
    free(dout_img);
    fsa_test_dfill(o, 0xff, nq * 2);
    fsa_test_dfill(lse, 0xff, (size_t)STD_HQ * T * 4);
    fsa_test_dfill(dq, 0xff, nq * 2);
    fsa_test_dfill(dk, 0xff, nkv * 2);
    fsa_test_dfill(dv, 0xff, nkv * 2);
    if (wf) fsa_test_dfill(wf, 0xff, ws_f);
    fsa_test_dfill(wb, 0xff, ws_b);

    const fsa_tensor tq = {q, STD_HQ * D, D}, tkv_k = {k, hkv * D, D}, tkv_v = {v, hkv * D, D};
    const fsa_tensor tt = {dtopk, K, (int64_t)T * K};
    fsa_fwd_args fa = FSA_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.batch = 1, fa.max_seqlen = T;
    fa.q = tq, fa.k = tkv_k, fa.v = tkv_v, fa.o = (fsa_tensor){o, STD_HQ * D, D}, fa.topk = tt;
    fa.cu_seqlens = dcu, fa.lse = lse, fa.workspace = wf, fa.workspace_bytes = ws_f;
    assert_int_equal(fsa_selected_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    fsa_bwd_args ba = FSA_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = 1, ba.max_seqlen = T;
    ba.q = tq, ba.k = tkv_k, ba.v = tkv_v, ba.o = fa.o, ba.topk = tt;
    ba.dout = (fsa_tensor){dout, STD_HQ * D, D}, ba.dq = (fsa_tensor){dq, STD_HQ * D, D};
    ba.dk = (fsa_tensor){dk, hkv * D, D}, ba.dv = (fsa_tensor){dv, hkv * D, D};
    ba.cu_seqlens = dcu, ba.lse = lse, ba.workspace = wb, ba.workspace_bytes = ws_b;
    const fsa_status st = fsa_selected_attention_bwd(plan, &ba, NULL);
    if (st != FSA_STATUS_OK) fail_msg("backward: %s", fsa_last_error());
    fsa_test_sync();

    uint16_t *img = malloc(nq * 2);
    float *lse_got = malloc((size_t)STD_HQ * T * 4);
    float *kf = floats_of_bf16(k_img, nkv), *vf = floats_of_bf16(v_img, nkv);
    assert_true(img && lse_got);
    fsa_test_d2h(img, o, nq * 2);
    fsa_test_d2h(lse_got, lse, (size_t)STD_HQ * T * 4);
    if (!all_finite(img, nq)) fail_msg("o has rows the forward did not write");
    for (size_t i = 0; i < (size_t)STD_HQ * T; i++)
        if (!isfinite(lse_got[i])) fail_msg("lse row %zu was not written (every token sees itself)", i);
    spot_check_forward(q_img, kf, vf, topk, img, lse_got, T, hkv, D, K);
    const uint64_t grads[] = {dq, dk, dv};
    const size_t counts[] = {nq, nkv, nkv};
    const char *names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        fsa_test_d2h(img, grads[i], counts[i] * 2);
        if (!all_finite(img, counts[i])) fail_msg("%s has rows the backward did not write", names[i]);
    }
    free(img), free(lse_got), free(kf), free(vf), free(q_img), free(k_img), free(v_img);
    free(topk);
    const uint64_t bufs[] = {q, k, v, o, dout, dq, dk, dv, lse, dtopk, dcu, wf, wb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) fsa_test_dfree(bufs[i]);
    fsa_plan_destroy(plan);
}

/* ------------------------------------------------ chunked against uncapped */

/* Everything one forward plus backward wrote, as raw images. */
typedef struct run_images {
    uint16_t *o, *dq, *dk, *dv;
    float *lse;
    float *dq_f, *dk_f, *dv_f; /* logical [T, H, D] */
} run_images;

static void run_images_free(run_images *r)
{
    free(r->o), free(r->dq), free(r->dk), free(r->dv), free(r->lse);
    free(r->dq_f), free(r->dk_f), free(r->dv_f);
}

static size_t query(const fsa_plan *plan, int T, int B, int backward)
{
    size_t n = 0;
    fsa_status st = backward ? fsa_plan_workspace_size_bwd(&n, plan, T, B) : fsa_plan_workspace_size(&n, plan, T, B);
    assert_int_equal(st, FSA_STATUS_OK);
    return n;
}

/* Forward then backward of `plan` on the inputs of dp, with workspaces of
 * exactly the queried sizes (poisoned), outputs poisoned first. */
static void run_plan(run_images *r, const fsa_plan *plan, const device_problem *dp, uint64_t dout, const problem *p,
                     const attn_case *c)
{
    const size_t q_bytes = (size_t)p->T * p->q_ts * 2, kv_bytes = (size_t)p->T * p->kv_ts * 2;
    const size_t v_bytes = (size_t)p->T * p->v_ts * 2;
    const size_t ws_f = query(plan, p->T, p->B, 0), ws_b = query(plan, p->T, p->B, 1);
    uint64_t wf = ws_f ? fsa_test_dalloc(ws_f) : 0, wb = fsa_test_dalloc(ws_b);
    uint64_t dq = fsa_test_dalloc(q_bytes), dk = fsa_test_dalloc(kv_bytes), dv = fsa_test_dalloc(v_bytes);
    if (wf) fsa_test_dfill(wf, 0xff, ws_f);
    fsa_test_dfill(wb, 0xff, ws_b);
    fsa_test_dfill(dq, 0xff, q_bytes);
    fsa_test_dfill(dk, 0xff, kv_bytes);
    fsa_test_dfill(dv, 0xff, v_bytes);
    poison_fwd(dp, p, c);

    fsa_fwd_args fa = fwd_args_of(dp, p);
    fa.workspace = wf, fa.workspace_bytes = ws_f;
    assert_int_equal(fsa_selected_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    fsa_bwd_args ba = FSA_BWD_ARGS_INIT;
    ba.total_tokens = p->T, ba.batch = p->B;
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v, ba.o = fa.o, ba.topk = fa.topk;
    ba.cu_seqlens = fa.cu_seqlens, ba.lse = fa.lse;
    ba.dout = (fsa_tensor){dout, p->q_ts, p->q_hs};
    ba.dq = (fsa_tensor){dq, p->q_ts, p->q_hs};
    ba.dk = (fsa_tensor){dk, p->kv_ts, p->kv_hs};
    ba.dv = (fsa_tensor){dv, p->v_ts, p->v_hs};
    ba.workspace = wb, ba.workspace_bytes = ws_b;
    const fsa_status st = fsa_selected_attention_bwd(plan, &ba, NULL);
    if (st != FSA_STATUS_OK) fail_msg("%s: backward: %s", c->name, fsa_last_error());
    fsa_test_sync();

    const size_t nq = (size_t)p->T * c->hq * c->d, nkv = (size_t)p->T * c->hkv * c->d;
    r->o = malloc(dp->o_bytes), r->lse = malloc((size_t)c->hq * p->T * 4);
    r->dq = malloc(q_bytes), r->dk = malloc(kv_bytes), r->dv = malloc(v_bytes);
    r->dq_f = malloc(nq * 4), r->dk_f = malloc(nkv * 4), r->dv_f = malloc(nkv * 4);
    assert_true(r->o && r->lse && r->dq && r->dk && r->dv && r->dq_f && r->dk_f && r->dv_f);
    fsa_test_d2h(r->o, dp->o, dp->o_bytes);
    fsa_test_d2h(r->lse, dp->lse, (size_t)c->hq * p->T * 4);
    download_strided(r->dq_f, r->dq, dq, p->T, c->hq, c->d, p->q_ts, p->q_hs, c->dtype);
    download_strided(r->dk_f, r->dk, dk, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs, c->dtype);
    download_strided(r->dv_f, r->dv, dv, p->T, c->hkv, p->Dv, p->v_ts, p->v_hs, c->dtype);
    fsa_test_dfree(wf), fsa_test_dfree(wb), fsa_test_dfree(dq), fsa_test_dfree(dk), fsa_test_dfree(dv);
    /* No chunk writes the padding of a strided output: it still holds the poison. */
    char what[64];
    snprintf(what, sizeof what, "%s: o", c->name);
    fsa_test_assert_padding_untouched(r->o, dp->o_bytes / 2, p->T, c->hq, p->Dv, p->o_ts, p->o_hs, ATTN_POISON16, what);
    snprintf(what, sizeof what, "%s: dq", c->name);
    fsa_test_assert_padding_untouched(r->dq, q_bytes / 2, p->T, c->hq, c->d, p->q_ts, p->q_hs, ATTN_POISON16, what);
    snprintf(what, sizeof what, "%s: dk", c->name);
    fsa_test_assert_padding_untouched(r->dk, kv_bytes / 2, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs, ATTN_POISON16, what);
    snprintf(what, sizeof what, "%s: dv", c->name);
    fsa_test_assert_padding_untouched(r->dv, v_bytes / 2, p->T, c->hkv, p->Dv, p->v_ts, p->v_hs, ATTN_POISON16, what);
}

/* Strided layouts, junk rows, several sequences; an even Hkv, so that chunks of half the heads exist. */
static const attn_case chunk_cases[] = {
    /* name                     dtype d   hq  hkv bk  k  lens             n  tkh str alg     ws junk big quick */
    {"bf16_d64_g2_fsa_order",   BF, 64,  8,  4,  64, 8, {700, 300, 1},   3, 0,  1,  A_AUTO, 0, 1,   0,  1},
    {"f16_d128_g4_nsa_order",   HF, 128, 16, 4,  32, 6, {500, 77},       2, 1,  1,  A_NSA,  0, 1,   0,  1},
    /* Block 0's list longer than one sort window (16384 tokens): two windows uncapped. */
    {"bf16_d32_g1_sort_windows", BF, 32, 2,  2,  64, 4, {20000},         1, 0,  0,  A_AUTO, 0, 0,   0,  1},
};

/* The chunk a capped plan's backward takes, as the call computes it. */
static void bwd_chunk_of(int *heads, int64_t *tc, const fsa_plan *plan, const problem *p)
{
    fsa_bwd_chunk(heads, tc, plan, p->T, p->B, fsa_workspace_order(plan, FSA_OP_BWD, p->T));
}

/* A cap just large enough for the backward layout of `heads` heads x `tc` tokens. */
static uint64_t cap_for(const fsa_plan *plan, const problem *p, int heads, int64_t tc)
{
    fsa_bwd_layout l;
    fsa_bwd_layout_for(&l, plan, p->T, p->B, heads, tc, fsa_workspace_order(plan, FSA_OP_BWD, p->T));
    return (uint64_t)l.total + 16 * 256;
}

static void chunk_case(const attn_case *base, uint64_t seed)
{
    problem p;
    problem_make(&p, base, seed);
    attn_case c[4] = {*base, *base, *base, *base};
    c[0].ws_limit = FSA_WORKSPACE_UNLIMITED;
    fsa_plan *plans[4] = {NULL};
    assert_int_equal(attn_create_plans(plans, g_ctx, c, 1, 1), 0);
    int heads = 0;
    int64_t tc = 0;
    bwd_chunk_of(&heads, &tc, plans[0], &p);
    assert_int_equal(heads, base->hkv);
    assert_int_equal(tc, p.T);
    c[1].ws_limit = cap_for(plans[0], &p, base->hkv / 2, p.T);  /* two head chunks, every token */
    c[2].ws_limit = cap_for(plans[0], &p, 1, (p.T + 2) / 3); /* one head, three token chunks */
    /* The same token chunks, each inverting its own index (FSA_INDEX_ONCE=0), instead of one
     * inversion of every (head, token chunk). */
    plans[0]->index_per_chunk = 1;
    c[3].ws_limit = cap_for(plans[0], &p, 1, (p.T + 2) / 3);
    plans[0]->index_per_chunk = 0;
    assert_int_equal(attn_create_plans(plans + 1, g_ctx, c + 1, 3, 1), 0);
    plans[3]->index_per_chunk = 1;
    bwd_chunk_of(&heads, &tc, plans[1], &p);
    assert_int_equal(heads, base->hkv / 2);
    assert_int_equal(tc, p.T);
    bwd_chunk_of(&heads, &tc, plans[2], &p);
    assert_int_equal(heads, 1);
    assert_true(tc < p.T / 2);
    fsa_bwd_layout shared;
    fsa_bwd_layout_for(&shared, plans[2], p.T, p.B, 1, tc, fsa_workspace_order(plans[2], FSA_OP_BWD, p.T));
    assert_int_equal(shared.index.tchunks, (p.T + tc - 1) / tc);
    int heads3 = 0;
    int64_t tc3 = 0;
    bwd_chunk_of(&heads3, &tc3, plans[3], &p);
    assert_int_equal(heads3, 1);
    assert_int_equal(tc3, tc);
    for (int i = 1; i < 4; i++) {
        assert_true(query(plans[i], p.T, p.B, 1) <= c[i].ws_limit);
        assert_true(query(plans[i], p.T, p.B, 0) <= c[i].ws_limit);
    }

    fsa_rng rng = {seed ^ 0xd0u};
    const size_t nq = (size_t)p.T * base->hq * base->d, nkv = (size_t)p.T * base->hkv * base->d;
    float *dout = malloc(nq * sizeof(float));
    double *dq_ref = malloc(nq * sizeof(double)), *dk_ref = malloc(nkv * sizeof(double)),
           *dv_ref = malloc(nkv * sizeof(double));
    assert_true(dout && dq_ref && dk_ref && dv_ref);
    for (size_t i = 0; i < nq; i++) dout[i] = attn_round_to(base->dtype, (float)fsa_rng_normal(&rng));
    fsa_ref_problem rp = problem_ref(&p, base);
    fsa_ref_backward(&rp, dout, dq_ref, dk_ref, dv_ref);
    const uint64_t ddout = upload_strided(dout, p.T, base->hq, base->d, p.q_ts, p.q_hs, base->dtype);
    device_problem dp;
    device_make(&dp, &p, &c[0], plans[0]);

    /* Every run's forward writes the same o and lse (checked below), which its backward reads: dq and dk
     * as given that o, for the per-row bounds; the uncapped forward's against the reference. */
    outputs fwd = {NULL, NULL, NULL};
    attn_grads_given given = {NULL, NULL};

    run_images r[4];
    const double tol = base->dtype == FSA_DTYPE_BF16 ? 2e-2 : 6e-3;
    const size_t q_bytes = (size_t)p.T * p.q_ts * 2, kv_bytes = (size_t)p.T * p.kv_ts * 2;
    const char *names[4] = {"uncapped", "head chunks", "token chunks", "token ch. idx"};
    for (int i = 0; i < 4; i++) {
        run_plan(&r[i], plans[i], &dp, ddout, &p, base);
        if (i == 0) {
            download_fwd(&fwd, &dp, &p, base);
            attn_check_o_and_lse(&fwd, &p, base->hq, base->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3, base->name);
            attn_grads_given_o(&given, &p, base, dout, fwd.o);
        }
        const double eq = attn_grad_error(r[i].dq_f, dq_ref, nq), ek = attn_grad_error(r[i].dk_f, dk_ref, nkv),
                     ev = attn_grad_error(r[i].dv_f, dv_ref, nkv);
        const attn_row_err rq = attn_grad_row_error(r[i].dq_f, given.dq, p.T, base->hq, base->d),
                           rk = attn_grad_row_error(r[i].dk_f, given.dk, p.T, base->hkv, base->d),
                           rv = attn_grad_row_error(r[i].dv_f, dv_ref, p.T, base->hkv, p.Dv);
        print_message("  %-24s %-12s cap %12llu: dq %.3e dk %.3e dv %.3e (tol %.0e); worst rows (dq, dk given the "
                      "o read) dq %.3e (t %d h %d) dk %.3e (t %d h %d) dv %.3e (t %d h %d) (tol %.0e)\n",
                      base->name, names[i], (unsigned long long)c[i].ws_limit, eq, ek, ev, tol, rq.err, rq.t, rq.h,
                      rk.err, rk.t, rk.h, rv.err, rv.t, rv.h, ATTN_ROW_TOL * tol);
        assert_true(eq < tol && ek < tol && ev < tol);
        assert_true(rq.err < ATTN_ROW_TOL * tol && rk.err < ATTN_ROW_TOL * tol && rv.err < ATTN_ROW_TOL * tol);
    }
    for (int i = 1; i < 4; i++) {
        assert_memory_equal(r[i].o, r[0].o, dp.o_bytes);
        assert_memory_equal(r[i].lse, r[0].lse, (size_t)base->hq * p.T * 4);
        assert_memory_equal(r[i].dq, r[0].dq, q_bytes);
    }
    /* Head chunks: dk and dv are the uncapped call's bits where their launches take the same work
     * items (sized per launch: a chunk of fewer heads may take other ones). */
    fsa_bwd_layout whole, half;
    fsa_bwd_layout_for(&whole, plans[0], p.T, p.B, base->hkv, p.T, fsa_workspace_order(plans[0], FSA_OP_BWD, p.T));
    fsa_bwd_layout_for(&half, plans[1], p.T, p.B, base->hkv / 2, p.T, fsa_workspace_order(plans[1], FSA_OP_BWD, p.T));
    const int same_items = whole.item_entries == half.item_entries && whole.item_max_rounds == half.item_max_rounds;
    print_message("  %-24s head chunks' items %d x <= %d, uncapped %d x <= %d\n", base->name, half.item_entries,
                  half.item_max_rounds, whole.item_entries, whole.item_max_rounds);
    /* These cases are short (their items halved for the whole call's waves, the list bound 1), so
     * both take the same items, and the bitwise check below always runs. */
    assert_true(same_items);
    assert_memory_equal(r[1].dk, r[0].dk, kv_bytes);
    assert_memory_equal(r[1].dv, r[0].dv, (size_t)p.T * p.v_ts * 2);
    /* Token chunks only regroup dK/dV's fp32 sums: the two roundings of one fp32 sum to the dtype are at
     * most a step apart (a step is at most 2^-7 of the value in bf16, 2^-10 in fp16), and where a sum
     * cancels to near zero the fp32 orders' own difference (about sqrt(terms) x 2^-24 of the rms) stays
     * far below the floor of rms / 64. Twice that, per element. */
    const double step = base->dtype == FSA_DTYPE_BF16 ? 0x1p-7 : 0x1p-10;
    const float *want[2] = {r[0].dk_f, r[0].dv_f}, *got[2] = {r[2].dk_f, r[2].dv_f};
    for (int g = 0; g < 2; g++) {
        double sq = 0;
        for (size_t i = 0; i < nkv; i++) sq += (double)want[g][i] * want[g][i];
        const double floor = sqrt(sq / (double)nkv) / 64;
        size_t differ = 0;
        for (size_t i = 0; i < nkv; i++) {
            const double a = got[g][i], b = want[g][i], d = fabs(a - b);
            if (!(d <= 2 * step * (fmax(fabs(a), fabs(b)) + floor)))
                fail_msg("%s: token chunks' %s[%zu] = %.9g, uncapped %.9g: more than a rounding step apart",
                         base->name, g ? "dv" : "dk", i, a, b);
            differ += a != b;
        }
        print_message("  %-24s token chunks: %zu of %zu %s elements differ from uncapped, each by a step at most\n",
                      base->name, differ, nkv, g ? "dv" : "dk");
    }
    /* One inversion for every token chunk or one per chunk: the same lists, items and sums. */
    assert_memory_equal(r[3].dk, r[2].dk, kv_bytes);
    assert_memory_equal(r[3].dv, r[2].dv, (size_t)p.T * p.v_ts * 2);

    for (int i = 0; i < 4; i++) {
        run_images_free(&r[i]);
        fsa_plan_destroy(plans[i]);
    }
    fsa_test_dfree(ddout);
    device_free(&dp);
    free(dout), free(dq_ref), free(dk_ref), free(dv_ref);
    outputs_free(&fwd);
    attn_grads_given_free(&given);
    problem_free(&p);
}

static void test_capped_backwards_match_the_reference_and_the_uncapped_call(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof chunk_cases / sizeof chunk_cases[0]; i++)
        chunk_case(&chunk_cases[i], 0xcab0u + i);
}

static int setup(void **state)
{
    (void)state;
    g_quick = fsa_test_quick();
    g_cache_dir = fsa_test_mkdtemp("cap-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_workspaces_of_the_standard_problem_stay_within_the_cap),
        cmocka_unit_test(test_capped_backwards_match_the_reference_and_the_uncapped_call),
        cmocka_unit_test(test_a_default_forward_and_backward_at_65536_tokens_run_within_the_cap),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
