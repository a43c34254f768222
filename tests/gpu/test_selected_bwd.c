/* Selected-attention backward on the GPU against the CPU float64 reference:
 * dq, dk and dv over dtypes, head dims (both halves of D above 128), group
 * sizes up to 128, block sizes up to 256 (key slices), both dq orders, index
 * layouts, strided tensors, varlen batches, junk in the top-k rows, long
 * lists (bitmap sort, split blocks), token chunks under a workspace limit;
 * bit-identical repeats; CUDA-graph replay; value head dims other than the
 * query/key head dim (dv column). The forward whose o and lse the backward
 * reads matches the reference first. Outputs are poisoned before every run;
 * gradients are checked as a whole and row by row, and the padding of strided
 * ones must still hold the poison. A token that selects nothing, NaN in its q and dout, changes no other
 * result.
 * Random cases drawn over most of the supported space (attn_random_case) run
 * through the same checks: FSA_TEST_RANDOM=N of them (default 4), from
 * FSA_TEST_SEED=S (default RANDOM_SEED, the forward test's is another); each
 * prints its line (index, seed, every field) before it runs.
 * FSA_TEST_QUICK=1 runs a subset (one random case). */
#include "attention_problem.h"
#include "gate_rows.h"

#include "jit/context.h"
#include "../../templates/fsa_layout.cuh" /* FSA_SEL_LAYOUT_*: the layouts the plans take */

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const attn_case cases[] = {
    /* name                      dtype d   hq  hkv bk   k   lens                    n  tkh str alg     ws       junk big quick */
    {"bf16_d128_g1_bk64",        BF, 128, 4,  4,  64, 8,  {1, 63, 64, 65, 300},  5, 0, 0, A_AUTO, 0,       1, 0, 1},
    {"bf16_d64_g2_bk32_strided", BF, 64,  4,  2,  32, 6,  {1, 63, 64, 65, 200},  5, 1, 1, A_AUTO, 0,       1, 0, 0},
    {"f16_d128_g3_bk64_scale0.2", HF, 128, 6, 2,  64, 8,  {5, 130, 250},         3, 0, 0, A_AUTO, 0,       1, 0, 0, 0, 0.2f},
    {"bf16_d96_g5_bk16",         BF, 96,  5,  1,  16, 12, {40, 150},             2, 0, 0, A_AUTO, 0,       1, 0, 1},
    {"f16_d192_g7_bk128",        HF, 192, 7,  1,  128, 3, {129, 300},            2, 1, 1, A_AUTO, 0,       1, 0, 0},
    /* G 6 at D 96 with sequences of 1 to 3 tokens; one key about 1e4 above the rest (one sequence, no junk:
       the big key is packed key 3) */
    {"bf16_d96_g6_short",        BF, 96,  6,  1,  16, 4,  {1, 2, 3, 200},        4, 0, 1, A_AUTO, 0,       1, 0, 0},
    {"bf16_d128_g1_biglogit",    BF, 128, 1,  1,  64, 4,  {256},                 1, 0, 0, A_FSA,  0,       0, 1, 0},
    {"bf16_d128_g1_biglogit_nsa", BF, 128, 1, 1,  64, 4,  {256},                 1, 0, 0, A_NSA,  0,       0, 1, 0},
    {"bf16_d256_g8_bk64",        BF, 256, 16, 2,  64, 4,  {64, 200},             2, 0, 0, A_AUTO, 0,       1, 0, 1},
    {"bf16_d32_g12_bk32",        BF, 32,  12, 1,  32, 5,  {33, 97, 100},         3, 1, 0, A_AUTO, 0,       1, 0, 0},
    {"f16_d64_g16_bk64",         HF, 64,  32, 2,  64, 6,  {1, 63, 64, 65, 250},  5, 0, 1, A_AUTO, 0,       1, 0, 0},
    {"bf16_d64_g32_bk64",        BF, 64,  32, 1,  64, 4,  {90},                  1, 0, 0, A_AUTO, 0,       1, 0, 0},
    {"bf16_d128_g4_bk64_chunked", BF, 128, 8, 2,  64, 8,  {100, 400, 37},        3, 0, 0, A_AUTO, 3000000, 1, 0, 1},
    {"bf16_d64_g1_long_lists",   BF, 64,  2,  2,  64, 16, {3000},                1, 0, 0, A_AUTO, 0,       0, 0, 1},
    {"bf16_d64_g1_t1",           BF, 64,  2,  2,  64, 1,  {1},                   1, 0, 0, A_AUTO, 0,       0, 0, 0},
    /* Blocks past the index's 1024 shared-memory counters of a CTA (global counters), CTAs across two
     * heads and two sequences: */
    {"bf16_d64_g1_bk16_global",  BF, 64,  2,  2,  16, 8,  {300, 17000},          2, 0, 0, A_FSA,  0,       1, 0, 1},
    /* The standard head dims with block 0 in 4096 lists: long chains of dK/dV partials. */
    {"bf16_d128_g4_long_chains", BF, 128, 4,  1,  64, 16, {4096},                1, 0, 0, A_FSA,  0,       0, 0, 1},
    /* NSA-order dq (forced: AUTO takes the FSA order). */
    {"bf16_d128_g16_bk64_nsa",   BF, 128, 32, 2,  64, 8,  {1, 63, 64, 65, 300},  5, 0, 0, A_NSA,  0,       1, 0, 1},
    {"f16_d64_g4_bk32_nsa_str",  HF, 64,  8,  2,  32, 6,  {17, 200},             2, 1, 1, A_NSA,  0,       1, 0, 0},
    {"bf16_d256_g8_bk256_nsa",   BF, 256, 8,  1,  256, 3, {300, 520},            2, 0, 0, A_NSA,  0,       1, 0, 1},
    {"bf16_d96_g24_bk64_nsa_chunked", BF, 96, 24, 1, 64, 6, {200, 333},          2, 0, 0, A_NSA,  1500000, 1, 0, 0},
    {"bf16_d64_g64_bk64_nsa",    BF, 64,  64, 1,  64, 4,  {200},                 1, 0, 0, A_NSA,  0,       1, 0, 0},
    /* FSA-order dq over the support matrix: split key blocks, groups over 32. */
    {"bf16_d64_g16_bk64_fsa",    BF, 64,  32, 2,  64, 6,  {1, 63, 64, 65, 250},  5, 0, 1, A_FSA,  0,       1, 0, 1},
    {"bf16_d128_g1_bk256_slices", BF, 128, 2, 2,  256, 4, {600, 100},            2, 0, 0, A_AUTO, 0,       1, 0, 1},
    {"f16_d256_g2_bk256_slices", HF, 256, 4,  2,  256, 2, {513},                 1, 1, 1, A_AUTO, 0,       1, 0, 0},
    {"f16_d96_g48_bk128_fsa",    HF, 96,  48, 1,  128, 4, {260},                 1, 0, 0, A_FSA,  0,       1, 0, 0},
    {"bf16_d64_g64_bk64_fsa",    BF, 64,  64, 1,  64, 4,  {150, 90},             2, 0, 0, A_FSA,  0,       1, 0, 1},
    /* Group 128 has no FSA forward: AUTO runs the NSA-order forward and the FSA-order dq. */
    {"bf16_d64_g128_bk16_long",  BF, 64, 128, 1,  16, 2,  {1100},                1, 0, 0, A_AUTO, 0,       1, 0, 0},
    /* Dk != Dv (NSA's 192 / 128 among them), both dq orders.        dv */
    {"bf16_dk192_dv128_g4_fsa",  BF, 192, 8,  2,  64, 8,  {1, 63, 64, 65, 300},  5, 0, 0, A_FSA,  0,       1, 0, 1, 128},
    {"f16_dk192_dv128_g16_nsa",  HF, 192, 32, 2,  64, 6,  {17, 200},             2, 1, 1, A_NSA,  0,       1, 0, 1, 128},
    {"bf16_dk192_dv128_g1_long", BF, 192, 2,  2,  64, 16, {1500},                1, 0, 0, A_AUTO, 0,       0, 0, 0, 128},
    /* The warpgroup main kernel split by output (dK; dV and dq) above Dk 128: many tiles per item, strided, fp16;
     * Dv 64; head chunks under a cap. */
    {"f16_dk192_dv128_g16_fsa",  HF, 192, 16, 1,  64, 8,  {1, 200, 450},         3, 1, 1, A_FSA,  0,       1, 0, 1, 128},
    {"bf16_dk192_dv64_g4_chunk", BF, 192, 8,  2,  64, 8,  {100, 400, 37},        3, 0, 0, A_FSA,  3000000, 1, 0, 1, 64},
    {"bf16_dk128_dv64_g1_str",   BF, 128, 4,  4,  32, 6,  {1, 63, 64, 65, 200},  5, 1, 1, A_FSA,  0,       1, 0, 1, 64},
    {"f16_dk128_dv64_g8_nsa_scale0.05", HF, 128, 8, 1, 64, 8, {5, 130, 250},      3, 0, 0, A_NSA,  0,       1, 0, 0, 64, 0.05f},
    {"bf16_dk64_dv128_g2_chunk", BF, 64,  4,  2,  64, 8,  {100, 400, 37},        3, 0, 0, A_FSA,  1500000, 1, 0, 1, 128},
    {"bf16_dk64_dv128_g32_nsa",  BF, 64,  32, 1,  16, 12, {40, 150},             2, 0, 0, A_NSA,  0,       1, 0, 0, 128},
    {"f16_dk64_dv128_g5_bk128",  HF, 64,  5,  1,  128, 3, {129, 300},            2, 1, 0, A_AUTO, 0,       1, 0, 0, 128},
    /* One pass up to Dk + Dv = 320 (dims that are not multiples of 32 included); 256 / 256 above takes two. */
    {"bf16_dk256_dv64_g4_fsa",   BF, 256, 8,  2,  64, 6,  {1, 65, 200},          3, 0, 0, A_FSA,  0,       1, 0, 0, 64},
    {"f16_dk144_dv176_g2_nsa",   HF, 144, 4,  2,  64, 6,  {17, 200},             2, 1, 1, A_NSA,  0,       1, 0, 0, 176},
    /* The shapes 99 KB targets run in one-stage layouts (fsa_sel_layout_fit): 192 / 192 and 256 / 256 at
     * blocks of 64 (the NSA order's dq too), 256 / 256 at blocks of 32 (the FSA order's one query tile). */
    {"bf16_d192_g4_bk64_one_stage", BF, 192, 8, 2, 64, 8,  {1, 63, 64, 65, 300},  5, 0, 0, A_AUTO, 0,       1, 0, 0},
    {"bf16_d192_g4_bk64_nsa_one_stage", BF, 192, 8, 2, 64, 8, {17, 200},         2, 1, 1, A_NSA,  0,       1, 0, 0},
    {"bf16_d256_g4_bk32_one_stage", BF, 256, 8, 2, 32, 6,  {17, 200},             2, 1, 1, A_AUTO, 0,       1, 0, 0},
    {"bf16_d256_g8_bk64_nsa_one_stage", BF, 256, 16, 2, 64, 4, {64, 200},        2, 0, 0, A_NSA,  0,       1, 0, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;
static fsa_plan *g_plans[N_CASES];
static int g_quick;

typedef struct bwd_device {
    uint64_t dout, dq, dk, dv, ws;
    size_t q_bytes, kv_bytes, v_bytes, ws_bytes; /* dq, dk, dv images (dout: o's layout) */
} bwd_device;

typedef struct grads {
    uint16_t *dq_img, *dk_img, *dv_img;
    float *dq, *dk, *dv;
} grads;

static void bwd_make(bwd_device *bd, const float *dout, const problem *p, const attn_case *c, const fsa_plan *plan)
{
    memset(bd, 0, sizeof *bd);
    bd->dout = upload_strided(dout, p->T, c->hq, p->Dv, p->o_ts, p->o_hs, c->dtype);
    bd->q_bytes = (size_t)p->T * p->q_ts * 2;
    bd->kv_bytes = (size_t)p->T * p->kv_ts * 2;
    bd->v_bytes = (size_t)p->T * p->v_ts * 2;
    bd->dq = fsa_test_dalloc(bd->q_bytes);
    bd->dk = fsa_test_dalloc(bd->kv_bytes);
    bd->dv = fsa_test_dalloc(bd->v_bytes);
    assert_int_equal(fsa_plan_workspace_size_bwd(&bd->ws_bytes, plan, p->T, p->B), FSA_STATUS_OK);
    if (c->ws_limit) assert_true(bd->ws_bytes <= c->ws_limit);
    bd->ws = fsa_test_dalloc(bd->ws_bytes);
}

static void bwd_free(bwd_device *bd)
{
    fsa_test_dfree(bd->dout);
    fsa_test_dfree(bd->dq);
    fsa_test_dfree(bd->dk);
    fsa_test_dfree(bd->dv);
    fsa_test_dfree(bd->ws);
}

static fsa_bwd_args bwd_args_of(const bwd_device *bd, const device_problem *dp, const problem *p)
{
    const fsa_fwd_args f = fwd_args_of(dp, p); /* the inputs, as the forward took them */
    fsa_bwd_args a = FSA_BWD_ARGS_INIT;
    a.total_tokens = p->T;
    a.batch = p->B;
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.topk = f.topk;
    a.dout = (fsa_tensor){bd->dout, p->o_ts, p->o_hs};
    a.dq = (fsa_tensor){bd->dq, p->q_ts, p->q_hs};
    a.dk = (fsa_tensor){bd->dk, p->kv_ts, p->kv_hs};
    a.dv = (fsa_tensor){bd->dv, p->v_ts, p->v_hs};
    a.cu_seqlens = dp->cu;
    a.lse = dp->lse;
    a.workspace = bd->ws;
    a.workspace_bytes = bd->ws_bytes;
    return a;
}

static void poison_bwd(const bwd_device *bd)
{
    fsa_test_dfill(bd->dq, 0xff, bd->q_bytes);
    fsa_test_dfill(bd->dk, 0xff, bd->kv_bytes);
    fsa_test_dfill(bd->dv, 0xff, bd->v_bytes);
    fsa_test_dfill(bd->ws, 0xff, bd->ws_bytes);
}

static void download_grads(grads *g, const bwd_device *bd, const problem *p, const attn_case *c)
{
    const size_t nq = (size_t)p->T * c->hq * c->d, nkv = (size_t)p->T * c->hkv * c->d;
    const size_t nv = (size_t)p->T * c->hkv * p->Dv;
    g->dq_img = malloc(bd->q_bytes);
    g->dk_img = malloc(bd->kv_bytes);
    g->dv_img = malloc(bd->v_bytes);
    g->dq = malloc(nq * sizeof(float));
    g->dk = malloc(nkv * sizeof(float));
    g->dv = malloc(nv * sizeof(float));
    assert_true(g->dq_img && g->dk_img && g->dv_img && g->dq && g->dk && g->dv);
    download_strided(g->dq, g->dq_img, bd->dq, p->T, c->hq, c->d, p->q_ts, p->q_hs, c->dtype);
    download_strided(g->dk, g->dk_img, bd->dk, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs, c->dtype);
    download_strided(g->dv, g->dv_img, bd->dv, p->T, c->hkv, p->Dv, p->v_ts, p->v_hs, c->dtype);
    /* Every call is made on poisoned gradients (dq_add's dq holds a poisoned call's result), so the
     * padding of a strided gradient still holds the poison: the kernels never write it. */
    char what[64];
    snprintf(what, sizeof what, "%s: dq", c->name);
    fsa_test_assert_padding_untouched(g->dq_img, bd->q_bytes / 2, p->T, c->hq, c->d, p->q_ts, p->q_hs, ATTN_POISON16,
                                      what);
    snprintf(what, sizeof what, "%s: dk", c->name);
    fsa_test_assert_padding_untouched(g->dk_img, bd->kv_bytes / 2, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs,
                                      ATTN_POISON16, what);
    snprintf(what, sizeof what, "%s: dv", c->name);
    fsa_test_assert_padding_untouched(g->dv_img, bd->v_bytes / 2, p->T, c->hkv, p->Dv, p->v_ts, p->v_hs, ATTN_POISON16,
                                      what);
}

static void grads_free(grads *g)
{
    free(g->dq_img);
    free(g->dk_img);
    free(g->dv_img);
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

static int row_is_zero(const double *row, int d)
{
    for (int i = 0; i < d; i++)
        if (row[i] != 0.0) return 0;
    return 1;
}

/* The bound on a gradient against the exact reference: tol, or twice what o's rounding alone forces (the
 * given-o reference's own distance from the exact one), whichever is larger. */
static double bound_given_o(double tol, const double *given, const double *exact, size_t n)
{
    return fmax(tol, 2 * attn_grad_gap(given, exact, n));
}

/* given: dq and dk as given the o that the call read (attn_grads_given_o), for the per-row bounds. */
static void check_grads(const grads *g, const double *dq_ref, const attn_grads_given *given, const double *dk_ref,
                        const double *dv_ref, const problem *p, const attn_case *c, const fsa_plan *plan)
{
    const size_t nq = (size_t)p->T * c->hq * c->d, nkv = (size_t)p->T * c->hkv * c->d;
    const size_t nv = (size_t)p->T * c->hkv * p->Dv;
    const double tol = c->dtype == FSA_DTYPE_BF16 ? 2e-2 : 6e-3;
    const double eq = attn_grad_error(g->dq, dq_ref, nq), ek = attn_grad_error(g->dk, dk_ref, nkv),
                 ev = attn_grad_error(g->dv, dv_ref, nv);
    const attn_row_err rq = attn_grad_row_error_terms(g->dq, given->dq, given->terms.dq, p->T, c->hq, c->d),
                       rk = attn_grad_row_error_terms(g->dk, given->dk, given->terms.dk, p->T, c->hkv, c->d),
                       rv = attn_grad_row_error_terms(g->dv, dv_ref, given->terms.dv, p->T, c->hkv, p->Dv);
    fsa_algorithm alg = FSA_ALGORITHM_AUTO;
    assert_int_equal(fsa_plan_algorithm_bwd(&alg, NULL, plan, p->T), FSA_STATUS_OK);
    const double tol_q = bound_given_o(tol, given->dq, dq_ref, nq), tol_k = bound_given_o(tol, given->dk, dk_ref, nkv);
    print_message("  %-30s %s dq %.3e (tol %.1e) dk %.3e (tol %.1e) dv %.3e (tol %.0e); worst rows (dq, dk given the o "
                  "read) dq %.3e (t %d h %d) dk %.3e (t %d h %d) dv %.3e (t %d h %d) (tol %.0e)\n",
                  c->name, alg == FSA_ALGORITHM_NSA ? "nsa" : "fsa", eq, tol_q, ek, tol_k, ev, tol, rq.err, rq.t, rq.h,
                  rk.err, rk.t, rk.h, rv.err, rv.t, rv.h, ATTN_ROW_TOL * tol);
    if (c->alg != FSA_ALGORITHM_AUTO) assert_int_equal(alg, c->alg);
    assert_true(eq < tol_q);
    assert_true(ek < tol_k);
    assert_true(ev < tol);
    assert_true(rq.err < ATTN_ROW_TOL * tol);
    assert_true(rk.err < ATTN_ROW_TOL * tol);
    assert_true(rv.err < ATTN_ROW_TOL * tol);
    /* Queries with no visible key and keys no query sees get exactly zero (as the forward's o of such a
     * query): not rounding noise of a sum over nothing. */
    int empty_queries = 0, unseen_keys = 0;
    for (int t = 0; t < p->T; t++) {
        for (int h = 0; h < c->hq; h++)
            if (p->empty_row[(size_t)h * p->T + t]) {
                empty_queries++;
                for (int d = 0; d < c->d; d++) assert_int_equal(g->dq_img[t * p->q_ts + h * p->q_hs + d] & 0x7fff, 0);
            }
        for (int h = 0; h < c->hkv; h++)
            if (row_is_zero(dv_ref + ((size_t)t * c->hkv + h) * p->Dv, p->Dv)) { /* no probability reaches it */
                unseen_keys++;
                for (int d = 0; d < p->Dv; d++) assert_int_equal(g->dv_img[t * p->v_ts + h * p->v_hs + d] & 0x7fff, 0);
                for (int d = 0; d < c->d; d++) assert_int_equal(g->dk_img[t * p->kv_ts + h * p->kv_hs + d] & 0x7fff, 0);
            }
    }
    print_message("  %-30s exact zeros: dq of %d query rows, dk and dv of %d key rows\n", c->name, empty_queries,
                  unseen_keys);
}

/* The gated backward (gate and gate_grad set, ba's dout as it is): against
 * the reference gradients for dout times the gates (gates of both signs and
 * zeros), and rowsum(dout * o) as the gate's gradient. */
static void check_gated_backward(const attn_case *c, fsa_plan *plan, const problem *p, const device_problem *dp,
                                 const bwd_device *bd, const fsa_bwd_args *ba, const float *dout, uint64_t inputs)
{
    const size_t nq = (size_t)p->T * c->hq * c->d, nkv = (size_t)p->T * c->hkv * c->d;
    const size_t no = (size_t)p->T * c->hq * p->Dv, nv = (size_t)p->T * c->hkv * p->Dv;
    gate_rows gr;
    gate_rows_make(&gr, p->T, c->hq, 0x6a7e000u + inputs);
    float *gated = malloc(no * sizeof(float)), *o = malloc(no * sizeof(float));
    double *dq_ref = malloc(nq * sizeof(double)), *dk_ref = malloc(nkv * sizeof(double)),
           *dv_ref = malloc(nv * sizeof(double));
    assert_true(gated && o && dq_ref && dk_ref && dv_ref);
    gate_rows_scale(&gr, dout, p->Dv, gated);
    const fsa_ref_problem rp = problem_ref(p, c);
    fsa_ref_backward(&rp, gated, dq_ref, dk_ref, dv_ref);
    download_strided(o, NULL, dp->o, p->T, c->hq, p->Dv, p->o_ts, p->o_hs, c->dtype);
    attn_grads_given given;
    attn_grads_given_o(&given, p, c, gated, o);
    fsa_bwd_args ga = *ba;
    ga.gate = gate_rows_view(&gr), ga.gate_grad = gate_rows_grad_view(&gr);
    poison_bwd(bd);
    gate_rows_poison(&gr);
    if (fsa_selected_attention_bwd(plan, &ga, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    grads g;
    download_grads(&g, bd, p, c);
    check_grads(&g, dq_ref, &given, dk_ref, dv_ref, p, c, plan);
    const double err_gate = gate_rows_grad_error(&gr, dout, o, p->Dv);
    print_message("  %-30s gated, gate gradient %.3e\n", c->name, err_gate);
    assert_true(err_gate < 1e-5);
    grads_free(&g);

    /* gate_grad without gate: the same gate gradient, and dq, dk, dv bit for bit the ungated call's. */
    grads plain, alone;
    for (int with_grad = 0; with_grad < 2; with_grad++) {
        fsa_bwd_args aa = *ba;
        if (with_grad) aa.gate_grad = gate_rows_grad_view(&gr);
        poison_bwd(bd);
        gate_rows_poison(&gr);
        if (fsa_selected_attention_bwd(plan, &aa, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        download_grads(with_grad ? &alone : &plain, bd, p, c);
    }
    const double err_alone = gate_rows_grad_error(&gr, dout, o, p->Dv);
    print_message("  %-30s gate gradient without a gate %.3e\n", c->name, err_alone);
    assert_true(err_alone < 1e-5);
    assert_memory_equal(plain.dq_img, alone.dq_img, bd->q_bytes);
    assert_memory_equal(plain.dk_img, alone.dk_img, bd->kv_bytes);
    assert_memory_equal(plain.dv_img, alone.dv_img, bd->v_bytes);
    grads_free(&plain);
    grads_free(&alone);
    free(gated);
    free(o);
    free(dq_ref);
    attn_grads_given_free(&given);
    free(dk_ref);
    free(dv_ref);
    gate_rows_free(&gr);
}

/* The problem on the device and its forward run (o and lse poisoned first), for a backward. */
static void forward_on_device(device_problem *dp, const problem *p, const attn_case *c, fsa_plan *plan)
{
    device_make(dp, p, c, plan);
    fsa_fwd_args fa = fwd_args_of(dp, p);
    poison_fwd(dp, p, c);
    assert_int_equal(fsa_selected_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    fsa_test_sync();
}

/* `inputs` picks the case's random inputs (q, k, v, top-k, dout, gates): its index in cases[], or a random case's
 * seed. */
static void run_case_with_inputs(const attn_case *c, fsa_plan *plan, uint64_t inputs)
{
    problem p;
    problem_make(&p, c, 0xb00c0000u + inputs);
    device_problem dp;
    forward_on_device(&dp, &p, c, plan);
    /* The backward below is judged against a reference given this o, and its whole-tensor bounds widen
     * with o's distance from the exact one: o and lse must match the reference first (groups 32 to 128
     * run the forward only here), at the forward test's bounds. */
    outputs fwd;
    download_fwd(&fwd, &dp, &p, c);
    attn_check_o_and_lse(&fwd, &p, c->hq, c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3, c->name);

    fsa_rng rng = {0xd0d0u + inputs};
    const size_t nq = (size_t)p.T * c->hq * c->d, nkv = (size_t)p.T * c->hkv * c->d;
    const size_t no = (size_t)p.T * c->hq * p.Dv, nv = (size_t)p.T * c->hkv * p.Dv;
    float *dout = malloc(no * sizeof(float));
    double *dq_ref = malloc(nq * sizeof(double)), *dk_ref = malloc(nkv * sizeof(double)),
           *dv_ref = malloc(nv * sizeof(double));
    assert_true(dout && dq_ref && dk_ref && dv_ref);
    for (size_t i = 0; i < no; i++) dout[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    fsa_ref_problem rp = problem_ref(&p, c);
    fsa_ref_backward(&rp, dout, dq_ref, dk_ref, dv_ref);
    /* The backward reads the forward's o: dq and dk as given that o, for the per-row bounds. */
    attn_grads_given given;
    attn_grads_given_o(&given, &p, c, dout, fwd.o);

    bwd_device bd;
    bwd_make(&bd, dout, &p, c, plan);
    fsa_bwd_args ba = bwd_args_of(&bd, &dp, &p);
    poison_bwd(&bd);
    fsa_status st = fsa_selected_attention_bwd(plan, &ba, NULL);
    if (st != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    grads first;
    download_grads(&first, &bd, &p, c);
    check_grads(&first, dq_ref, &given, dk_ref, dv_ref, &p, c, plan);

    /* Same inputs, same bits. */
    poison_bwd(&bd);
    assert_int_equal(fsa_selected_attention_bwd(plan, &ba, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    grads second;
    download_grads(&second, &bd, &p, c);
    assert_memory_equal(first.dq_img, second.dq_img, bd.q_bytes);
    assert_memory_equal(first.dk_img, second.dk_img, bd.kv_bytes);
    assert_memory_equal(first.dv_img, second.dv_img, bd.v_bytes);

    /* dq_add, added before the rounding: first dq itself (in place, holding the first dq), then a random
     * addend in memory apart with strides of its own (head-major), whose values no dq of the call could
     * stand in for: the result is dq_ref + the addend; dk and dv as before, bit for bit. */
    float *addend = malloc(nq * sizeof(float));
    assert_non_null(addend);
    double dq_ms = 0.0; /* the addend at dq's size, so that an error in dq is not lost in a larger sum */
    for (size_t i = 0; i < nq; i++) dq_ms += dq_ref[i] * dq_ref[i] / (double)nq;
    for (size_t i = 0; i < nq; i++) addend[i] = attn_round_to(c->dtype, (float)(fsa_rng_normal(&rng) * sqrt(dq_ms)));
    const uint64_t addend_dev = upload_strided(addend, p.T, c->hq, c->d, c->d, (int64_t)p.T * c->d, c->dtype);
    for (int apart = 0; apart < 2; apart++) {
        const float *add = apart ? addend : first.dq;
        fsa_bwd_args acc = ba;
        acc.dq_add = apart ? (fsa_tensor){addend_dev, c->d, (int64_t)p.T * c->d} : ba.dq;
        if (apart) fsa_test_dfill(bd.dq, 0xff, bd.q_bytes); /* dq is written whole: nothing of it is read */
        fsa_test_dfill(bd.dk, 0xff, bd.kv_bytes); /* so that the bit comparison below sees this call's dk and dv */
        fsa_test_dfill(bd.dv, 0xff, bd.v_bytes);
        fsa_test_dfill(bd.ws, 0xff, bd.ws_bytes);
        assert_int_equal(fsa_selected_attention_bwd(plan, &acc, NULL), FSA_STATUS_OK);
        fsa_test_sync();
        grads added;
        download_grads(&added, &bd, &p, c);
        double *dq_sum = malloc(nq * sizeof(double)), *dq_sum_given = malloc(nq * sizeof(double));
        assert_true(dq_sum && dq_sum_given);
        for (size_t i = 0; i < nq; i++) {
            dq_sum[i] = dq_ref[i] + (double)add[i];
            dq_sum_given[i] = given.dq[i] + (double)add[i];
        }
        const double tol_add = c->dtype == FSA_DTYPE_BF16 ? 2e-2 : 6e-3;
        const double e_add = attn_grad_error(added.dq, dq_sum, nq),
                     tol_sum = bound_given_o(tol_add, dq_sum_given, dq_sum, nq);
        const attn_row_err r_add = attn_grad_row_error(added.dq, dq_sum_given, p.T, c->hq, c->d);
        print_message("  %-30s dq + dq_add (%s) %.3e (tol %.1e); worst row (given the o read) %.3e (t %d h %d) "
                      "(tol %.0e)\n", c->name, apart ? "apart" : "in place", e_add, tol_sum, r_add.err, r_add.t,
                      r_add.h, ATTN_ROW_TOL * tol_add);
        assert_true(e_add < tol_sum);
        assert_true(r_add.err < ATTN_ROW_TOL * tol_add);
        assert_memory_equal(first.dk_img, added.dk_img, bd.kv_bytes);
        assert_memory_equal(first.dv_img, added.dv_img, bd.v_bytes);
        free(dq_sum);
        free(dq_sum_given);
        grads_free(&added);
    }
    fsa_test_dfree(addend_dev);
    free(addend);
    check_gated_backward(c, plan, &p, &dp, &bd, &ba, dout, inputs);

    grads_free(&first);
    grads_free(&second);
    bwd_free(&bd);
    free(dout);
    outputs_free(&fwd);
    attn_grads_given_free(&given);
    free(dq_ref);
    free(dk_ref);
    free(dv_ref);
    device_free(&dp);
    problem_free(&p);
}

static void run_case(const attn_case *c, fsa_plan *plan) { run_case_with_inputs(c, plan, (uint64_t)(c - cases)); }

/* The default FSA_TEST_SEED of the random cases. */
#define RANDOM_SEED 0xb0d5eedu

static void test_backward_matches_the_reference_on_every_case(void **state)
{
    (void)state;
    attn_run_cases(cases, g_plans, N_CASES, g_quick, 0, run_case);
}

static void test_backward_with_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference(void **state)
{
    (void)state;
    attn_run_cases(cases, g_plans, N_CASES, g_quick, 1, run_case);
}

static void test_random_cases_match_the_reference(void **state)
{
    (void)state;
    attn_run_random_cases(g_ctx, 1, RANDOM_SEED, run_case_with_inputs);
}

static void graph_replay_case(size_t ci)
{
    const attn_case *c = &cases[ci];
    fsa_plan *plan = g_plans[ci];
    problem p;
    problem_make(&p, c, 4242);
    device_problem dp;
    device_make(&dp, &p, c, plan);
    fsa_fwd_args fa = fwd_args_of(&dp, &p);
    assert_int_equal(fsa_selected_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    const size_t no = (size_t)p.T * c->hq * p.Dv;
    float *dout = malloc(no * sizeof(float));
    assert_non_null(dout);
    fsa_rng rng = {7};
    for (size_t i = 0; i < no; i++) dout[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    bwd_device bd;
    bwd_make(&bd, dout, &p, c, plan);
    fsa_bwd_args ba = bwd_args_of(&bd, &dp, &p);
    poison_bwd(&bd);
    assert_int_equal(fsa_selected_attention_bwd(plan, &ba, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    grads direct;
    download_grads(&direct, &bd, &p, c);

    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_selected_attention_bwd(plan, &ba, graph.stream), FSA_STATUS_OK);
    fsa_test_capture_end(&graph);
    for (int rep = 0; rep < 2; rep++) {
        poison_bwd(&bd);
        fsa_test_graph_replay(&graph);
        grads replay;
        download_grads(&replay, &bd, &p, c);
        assert_memory_equal(direct.dq_img, replay.dq_img, bd.q_bytes);
        assert_memory_equal(direct.dk_img, replay.dk_img, bd.kv_bytes);
        assert_memory_equal(direct.dv_img, replay.dv_img, bd.v_bytes);
        grads_free(&replay);
    }
    fsa_test_graph_free(&graph);
    grads_free(&direct);
    bwd_free(&bd);
    free(dout);
    device_free(&dp);
    problem_free(&p);
}

/* Both dq orders: the FSA-order case 0, the first forced NSA-order case and
 * the first case with Dk != Dv. */
static void test_a_graph_captured_backward_replays_to_the_same_gradients(void **state)
{
    (void)state;
    graph_replay_case(0);
    for (size_t i = 0; i < N_CASES; i++)
        if (cases[i].alg == FSA_ALGORITHM_NSA) {
            graph_replay_case(i);
            break;
        }
    for (size_t i = 0; i < N_CASES; i++)
        if (cases[i].dv) {
            graph_replay_case(i);
            break;
        }
}

/* One forward and backward of case c with token `quiet`'s top-k rows all -1 (none: quiet -1); with `nan`, its
 * q and dout rows NaN. The images of o, lse, dq, dk and dv come back. */
typedef struct images {
    outputs fwd;
    grads g;
    size_t o_bytes, dq_bytes, dk_bytes, dv_bytes; /* the whole images, strided padding included */
} images;

/* Two runs' images are the same bits, every byte of every image (a strided case's rows end before its image). */
static void assert_images_equal(const images *a, const images *b, size_t lse_bytes)
{
    assert_int_equal(a->o_bytes, b->o_bytes);
    assert_int_equal(a->dq_bytes, b->dq_bytes);
    assert_int_equal(a->dk_bytes, b->dk_bytes);
    assert_int_equal(a->dv_bytes, b->dv_bytes);
    assert_memory_equal(a->fwd.o_img, b->fwd.o_img, a->o_bytes);
    assert_memory_equal(a->fwd.lse, b->fwd.lse, lse_bytes);
    assert_memory_equal(a->g.dq_img, b->g.dq_img, a->dq_bytes);
    assert_memory_equal(a->g.dk_img, b->g.dk_img, a->dk_bytes);
    assert_memory_equal(a->g.dv_img, b->g.dv_img, a->dv_bytes);
}

static void run_with_a_quiet_token(images *out, const attn_case *c, fsa_plan *plan, int quiet, int nan)
{
    problem p;
    problem_make(&p, c, 0x91e7);
    for (int h = 0; h < c->hkv && quiet >= 0; h++)
        for (int s = 0; s < c->k; s++) p.topk[h * p.topk_hs + quiet * p.topk_ts + s] = -1;
    const size_t no = (size_t)p.T * c->hq * p.Dv;
    float *dout = malloc(no * sizeof(float));
    assert_non_null(dout);
    fsa_rng rng = {0x91e8};
    for (size_t i = 0; i < no; i++) dout[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    if (nan) {
        for (int i = 0; i < c->hq * c->d; i++) p.q[(size_t)quiet * c->hq * c->d + i] = NAN;
        for (int i = 0; i < c->hq * p.Dv; i++) dout[(size_t)quiet * c->hq * p.Dv + i] = NAN;
    }
    device_problem dp;
    forward_on_device(&dp, &p, c, plan);
    download_fwd(&out->fwd, &dp, &p, c);
    bwd_device bd;
    bwd_make(&bd, dout, &p, c, plan);
    fsa_bwd_args ba = bwd_args_of(&bd, &dp, &p);
    poison_bwd(&bd);
    if (fsa_selected_attention_bwd(plan, &ba, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    download_grads(&out->g, &bd, &p, c);
    out->o_bytes = dp.o_bytes, out->dq_bytes = bd.q_bytes, out->dk_bytes = bd.kv_bytes, out->dv_bytes = bd.v_bytes;
    bwd_free(&bd);
    free(dout);
    device_free(&dp);
    problem_free(&p);
}

/* A token that selects nothing reaches no other token's result: with NaN in its q and dout rows (what a padding
 * token's unwritten memory may hold) o, lse, dq, dk and dv are bit for bit those with finite rows there, its own
 * o and dq zero and its lse -inf. The backward's tiles are filled with padding rows, masked afterwards: they
 * must not read a row from outside the item (token 0's did), whose NaN would reach dK and dV through 0 x NaN
 * in the products. Both dq orders. */
static void test_a_token_that_selects_nothing_reaches_no_other_result_whatever_its_rows_hold(void **state)
{
    (void)state;
    const char *names[] = {"bf16_d128_g4_long_chains", "bf16_dk192_dv128_g4_fsa", "bf16_d128_g16_bk64_nsa"};
    size_t ran = 0;
    for (size_t n = 0; n < sizeof names / sizeof *names; n++)
        for (size_t i = 0; i < N_CASES; i++) {
            if (strcmp(cases[i].name, names[n]) != 0) continue;
            const attn_case *c = &cases[i];
            const int quiet = 0, Dv = attn_value_dim(c);
            images finite, poisoned;
            run_with_a_quiet_token(&finite, c, g_plans[i], quiet, 0);
            run_with_a_quiet_token(&poisoned, c, g_plans[i], quiet, 1);
            int T = 0;
            for (int s = 0; s < c->nseq; s++) T += c->lens[s];
            for (int h = 0; h < c->hq; h++) {
                assert_true(poisoned.fwd.lse[(size_t)h * T + quiet] == -INFINITY);
                for (int d = 0; d < Dv; d++) assert_true(poisoned.fwd.o[((size_t)quiet * c->hq + h) * Dv + d] == 0.f);
                for (int d = 0; d < c->d; d++) assert_true(poisoned.g.dq[((size_t)quiet * c->hq + h) * c->d + d] == 0.f);
            }
            assert_images_equal(&finite, &poisoned, (size_t)T * c->hq * sizeof(float));
            print_message("  %-30s NaN rows of a token that selects nothing: every other result unchanged\n", c->name);
            outputs_free(&finite.fwd);
            outputs_free(&poisoned.fwd);
            grads_free(&finite.g);
            grads_free(&poisoned.g);
            ran++;
        }
    assert_int_equal(ran, sizeof names / sizeof *names); /* every named case exists */
}

/* The one-stage layouts (fsa_sel_layout_fit: what the 99 KB targets sm_86, sm_89, sm_12x take at head dims
 * of 192 and 256) on the GPU present: FSA_SEL_LAYOUT_ONE_STAGE=1 forces them where the default fits, with
 * FSA_WGMMA=0 and FSA_WGMMA_SEL_BWD=0 (the mma.sync kernels on sm_90a), read at plan creation. Each case's
 * plan compiled the layouts' own kernels (_sl4 the backward main kernel's, _sl8 the NSA-order dq's, _sl1 and
 * _sl2 the forwards'), matches the float64 reference through every check of the default cases, and gives
 * the bits of the same plan without the override (forward and backward): the layouts change only how many
 * tiles or stages are in flight. The standard shape, 192 / 192 and 256 / 256, both dq orders. */
static void test_the_one_stage_layouts_match_the_reference_and_the_default_bit_for_bit(void **state)
{
    (void)state;
    static const char *names[] = {"bf16_d128_g1_bk64",
                                  "bf16_d128_g16_bk64_nsa",
                                  "bf16_d192_g4_bk64_one_stage",
                                  "bf16_d192_g4_bk64_nsa_one_stage",
                                  "bf16_d256_g8_bk64",
                                  "bf16_d256_g4_bk32_one_stage",
                                  "bf16_d256_g8_bk64_nsa_one_stage"};
    size_t ran = 0;
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
        for (size_t i = 0; i < N_CASES; i++) {
            if (strcmp(cases[i].name, names[n]) != 0) continue;
            const attn_case *c = &cases[i];
            int layout = 0, dflt_layout = 0;
            fsa_plan *small = attn_mma_sync_plan(g_ctx, c, 1, "1", &layout);
            fsa_plan *dflt = attn_mma_sync_plan(g_ctx, c, 1, NULL, &dflt_layout);
            assert_true(layout & FSA_SEL_LAYOUT_BWD_ONE_STAGE);
            char prefix[96];
            fsa_test_expect_layout_kernel(g_ctx, attn_kernel_prefix(prefix, sizeof prefix, "sel_bwd_main", c), "sl",
                                          layout & FSA_SEL_LAYOUT_BWD_ONE_STAGE);
            fsa_test_expect_layout_kernel(g_ctx, attn_kernel_prefix(prefix, sizeof prefix, "sel_fwd_nsa", c), "sl",
                                          layout & FSA_SEL_LAYOUT_NSA_ONE_STAGE);
            if (c->alg == A_NSA) {
                assert_true(layout & FSA_SEL_LAYOUT_DQ_ONE_STAGE);
                fsa_test_expect_layout_kernel(g_ctx, attn_kernel_prefix(prefix, sizeof prefix, "sel_bwd_dq_nsa", c), "sl",
                                              layout & FSA_SEL_LAYOUT_DQ_ONE_STAGE);
            } else {
                fsa_test_expect_layout_kernel(g_ctx, attn_kernel_prefix(prefix, sizeof prefix, "sel_fwd_main", c), "sl",
                                              layout & FSA_SEL_LAYOUT_FWD_ONE_STAGE);
            }
            print_message("  %s: FSA_SEL_LAYOUT_ONE_STAGE=1 FSA_WGMMA=0 FSA_WGMMA_SEL_BWD=0 (layout %d):\n", c->name,
                          layout);
            run_case_with_inputs(c, small, i);
            ran++;
            if ((layout & ~dflt_layout) == 0) { /* a GPU whose shared memory needs these layouts: nothing to compare */
                print_message("  %-30s the default plan takes the same layouts on this GPU: no second kernel\n", c->name);
                fsa_plan_destroy(dflt);
                fsa_plan_destroy(small);
                continue;
            }
            images im[2];
            run_with_a_quiet_token(&im[0], c, dflt, -1, 0);
            run_with_a_quiet_token(&im[1], c, small, -1, 0);
            int T = 0;
            for (int s = 0; s < c->nseq; s++) T += c->lens[s];
            assert_images_equal(&im[0], &im[1], (size_t)T * c->hq * sizeof(float));
            print_message("  %-30s one stage: the default's bits (o, lse, dq, dk, dv)\n", c->name);
            for (int k = 0; k < 2; k++) {
                outputs_free(&im[k].fwd);
                grads_free(&im[k].g);
            }
            fsa_plan_destroy(dflt);
            fsa_plan_destroy(small);
        }
    assert_int_equal(ran, sizeof names / sizeof names[0]); /* every named case exists */
}

static void test_backward_bad_arguments_return_statuses(void **state)
{
    (void)state;
    const attn_case *c = &cases[0];
    problem p;
    problem_make(&p, c, 99);
    device_problem dp;
    device_make(&dp, &p, c, g_plans[0]);
    float *dout = calloc((size_t)p.T * c->hq * c->d, sizeof(float));
    assert_non_null(dout);
    bwd_device bd;
    bwd_make(&bd, dout, &p, c, g_plans[0]);
    fsa_bwd_args ba = bwd_args_of(&bd, &dp, &p);
    fsa_bwd_args bad = ba;
    bad.workspace_bytes = bd.ws_bytes - 1;
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    bad = ba;
    bad.lse = 0;
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_NULL_POINTER);
    bad = ba;
    bad.dk.ptr += 4;
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_MISALIGNED);
    bad = ba;
    bad.dq_add = (fsa_tensor){bd.dq + 4, ba.dq.token_stride, ba.dq.head_stride};
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_MISALIGNED);
    bad = ba;
    bad.struct_size = offsetof(fsa_bwd_args, dq_add) + 8; /* ends inside dq_add */
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_STRUCT_SIZE);
    bad = ba;
    bad.struct_size -= 8; /* ends inside gate_grad */
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_STRUCT_SIZE);
    bad = ba;
    bad.gate = (fsa_tensor){bd.dq + 2, 1, 1}; /* a float view must be 4-byte aligned */
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_MISALIGNED);
    bad = ba;
    bad.gate_grad = (fsa_tensor){bd.dq, 0, 1}; /* written: every token's row at one address */
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_INVALID_ARGUMENT);
    bad = ba;
    bad.struct_size = offsetof(fsa_bwd_args, dq_add); /* a caller of the first version: no dq_add */
    bad.dq_add.ptr = 8;                               /* past its struct: never read */
    assert_int_equal(fsa_selected_attention_bwd(g_plans[0], &bad, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    free(dout);
    bwd_free(&bd);
    device_free(&dp);
    problem_free(&p);
}

static int setup(void **state)
{
    (void)state;
    g_quick = fsa_test_quick();
    g_cache_dir = fsa_test_mkdtemp("bwd-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    return attn_create_plans(g_plans, g_ctx, cases, N_CASES, 1);
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
        cmocka_unit_test(test_backward_matches_the_reference_on_every_case),
        cmocka_unit_test(test_backward_with_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference),
        cmocka_unit_test(test_random_cases_match_the_reference),
        cmocka_unit_test(test_a_graph_captured_backward_replays_to_the_same_gradients),
        cmocka_unit_test(test_a_token_that_selects_nothing_reaches_no_other_result_whatever_its_rows_hold),
        cmocka_unit_test(test_the_one_stage_layouts_match_the_reference_and_the_default_bit_for_bit),
        cmocka_unit_test(test_backward_bad_arguments_return_statuses),
    };
    fsa_test_random_count(-1); /* a malformed FSA_TEST_RANDOM or FSA_TEST_SEED exits here, GPU or not */
    fsa_test_random_seed(RANDOM_SEED);
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. the one-stage
     * layouts' on a GPU whose call time is short. */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
