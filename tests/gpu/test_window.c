/* Sliding-window attention forward and backward on the GPU against the CPU
 * float64 reference: dtypes, Dk != Dv, groups 1..16, windows of 1, shorter
 * and longer than the sequences, per-head windows, varlen batches with
 * sequences of one token, strided tensors; outputs (and the workspace)
 * poisoned before every run (their padding must keep the poison), errors
 * bounded over each tensor and over each (token, head) row, the same bits
 * twice, lse optional in the forward, graph capture, malformed offsets.
 * Beyond the fixed table, randomly drawn cases (a seeded draw over dtypes,
 * head dims, groups, windows, per-head windows, lengths, strides, scales and
 * a big logit) go through the same checks: FSA_TEST_RANDOM=N of them
 * (default 4, 1 under FSA_TEST_QUICK; 0: none), drawn from FSA_TEST_SEED=S
 * (default a fixed constant: a plain run is reproducible). Each is printed
 * before it runs. FSA_TEST_QUICK=1 runs a subset, FSA_TEST_CASES=name,... the fixed cases
 * named. */
#include "attention_problem.h"
#include "gate_rows.h"
#include "reference_window.h"

#include "../../templates/fsa_qt_layout.cuh" /* FSA_QT_MAX_GROUP: the plan's largest group */


#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct win_case {
    const char *name;
    fsa_dtype dtype;
    int dk, dv, hq, hkv, window;
    int per_head; /* head qh's window: window, 1, window / 3 + 1, 1 << 20 for qh % 4 = 0..3 */
    int lens[5];
    int nseq;
    int strided;
    int quick;
    int big_logit; /* the first sequence's last token, query head 0: its own key scores about 1e4 */
    float scale;   /* the plan's softmax scale; 0: the default 1/sqrt(dk) */
} win_case;

static const win_case cases[] = {
    /* name                       dtype dk   dv   hq  hkv W     ph  lens                 n  str quick */
    {"bf16_d128_g4_w512",           BF, 128, 128, 8,  2,  512,  0, {1300, 1, 70},      3, 0, 1},
    {"bf16_dk192_dv128_g16_w100",   BF, 192, 128, 32, 2,  100,  0, {600, 37},          2, 1, 1},
    {"f16_d64_g1_w1",               HF, 64,  64,  2,  2,  1,    0, {200, 3, 1},        3, 0, 1},
    {"bf16_d64_g16_per_head",       BF, 64,  64,  16, 1,  40,   1, {300, 1, 77},       3, 1, 1},
    {"f16_d64_g4_w_over_len",       HF, 64,  64,  8,  2,  4096, 0, {700, 1, 129},      3, 1, 0},
    {"f16_dk192_dv128_g4_per_head", HF, 192, 128, 8,  2,  200,  1, {500, 64, 1},       3, 0, 0},
    {"bf16_d128_g1_per_head",       BF, 128, 128, 3,  3,  33,   1, {257, 5},           2, 0, 0},
    {"f16_d128_g8_w300_scale0.2",   HF, 128, 128, 16, 2,  300,  0, {600},              1, 0, 0, 0, 0.2f},
    {"f16_dk32_dv96_g3_w65",        HF, 32,  96,  6,  2,  65,   0, {5, 400, 129, 64},  4, 1, 0},
    {"bf16_d256_g2_causal",         BF, 256, 256, 2,  1,  4096, 0, {700},              1, 0, 0},
    {"bf16_dk64_dv16_g12_scale0.05",BF, 64,  16,  12, 1,  33,   0, {500, 17},          2, 0, 0, 0, 0.05f},
    {"bf16_dk256_dv64_g2_one_pass", BF, 256, 64,  4,  2,  77,   0, {300, 5},           2, 1, 0},
    /* More (tile, KV head) jobs than an H200 has SMs: the persistent forward's CTAs walk several tiles. */
    {"bf16_d128_g4_w512_many_jobs", BF, 128, 128, 8,  2,  512,  0, {6000, 700, 1},     3, 0, 1},
    {"bf16_d128_g2_w300_many_jobs", BF, 128, 128, 8,  4,  300,  0, {6000, 700, 5},     3, 1, 0},
    /* Groups of 6 and 5, Dk 96, sequences of 2 and 3 tokens; a logit 1e4 above the rest.       big */
    {"f16_dk96_g6_w50",             HF, 96,  96,  12, 2,  50,   0, {2, 3, 400},        3, 1, 0},
    {"bf16_d64_g5_per_head_short",  BF, 64,  64,  5,  1,  30,   1, {3, 2, 300},        3, 0, 0},
    {"bf16_d128_g4_w512_big_logit", BF, 128, 128, 8,  2,  512,  0, {1300, 70},         2, 0, 0, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;
static fsa_window_plan *g_plans[N_CASES];
static int g_refused[N_CASES]; /* by this GPU's shared memory (fsa_test_refused_for_shared_memory) */
static int g_quick;

/* FSA_TEST_CASES picks fixed cases by name (testing.h), else the quick subset or all. */
static int runs(const win_case *c)
{
    const int listed = fsa_test_case_listed(c->name);
    return listed >= 0 ? listed : !g_quick || c->quick;
}

static const char *case_name(size_t i) { return cases[i].name; }

/* The fixed cases the graph and malformed-offset tests run: planned whichever cases FSA_TEST_CASES picks. */
#define GRAPH_CASE 3
#define OFFSETS_CASE 0
static int planned(size_t i) { return runs(&cases[i]) || i == GRAPH_CASE || i == OFFSETS_CASE; }

/* The index of the fixed case of that name (a test's own list of cases names them). */
static size_t case_named(const char *name)
{
    size_t i = 0;
    while (i < N_CASES && strcmp(cases[i].name, name) != 0) i++;
    assert_true(i < N_CASES);
    return i;
}
/* Whether fixed case i runs on this GPU: in this run's set and not refused by its shared memory. */
static int runs_here(size_t i) { return runs(&cases[i]) && !g_refused[i]; }

static void windows_of(const win_case *c, int32_t *w)
{
    for (int qh = 0; qh < c->hq; qh++) {
        const int32_t pattern[4] = {c->window, 1, c->window / 3 + 1, 1 << 20};
        w[qh] = c->per_head ? pattern[qh % 4] : c->window;
    }
}

/* A case's inputs (host and device), its reference forward and its layouts. */
typedef struct win_problem {
    int T;
    int32_t cu[6], windows[64];
    float *q, *k, *v;
    double *o_ref, *lse_ref;
    fsa_ref_window_problem ref;
    int64_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
    uint64_t dq_, dk_, dv_, do_, dcu, dlse; /* device q, k, v, o, cu_seqlens, lse */
    size_t o_bytes, lse_bytes;
} win_problem;

static float *random_rounded(fsa_rng *rng, size_t n, fsa_dtype dt)
{
    float *x = malloc((n + 1) * sizeof *x);
    assert_non_null(x);
    for (size_t e = 0; e < n; e++) x[e] = attn_round_to(dt, (float)fsa_rng_normal(rng));
    return x;
}

static void problem_of(win_problem *p, const win_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    fsa_rng rng = {seed};
    for (int b = 0; b < c->nseq; b++) p->cu[b + 1] = p->cu[b] + c->lens[b];
    const int T = p->T = p->cu[c->nseq];
    windows_of(c, p->windows);
    const double scale = c->scale > 0 ? (double)c->scale : 1.0 / sqrt((double)c->dk);
    p->q = random_rounded(&rng, (size_t)T * c->hq * c->dk, c->dtype);
    p->k = random_rounded(&rng, (size_t)T * c->hkv * c->dk, c->dtype);
    p->v = random_rounded(&rng, (size_t)T * c->hkv * c->dv, c->dtype);
    if (c->big_logit) {
        /* The key of the first sequence's last token (KV head 0, always in its window) is q * 1e4 / (scale
         * |q|^2) for its query head 0: a logit of about 1e4, far above the rest. */
        const int t = p->cu[1] - 1;
        const float *q = p->q + (size_t)t * c->hq * c->dk;
        float *key = p->k + (size_t)t * c->hkv * c->dk;
        double qq = 0;
        for (int d = 0; d < c->dk; d++) qq += (double)q[d] * q[d];
        for (int d = 0; d < c->dk; d++)
            key[d] = attn_round_to(c->dtype, (float)(1e4 / scale * q[d] / qq));
    }
    p->o_ref = malloc((size_t)T * c->hq * c->dv * sizeof *p->o_ref);
    p->lse_ref = malloc((size_t)T * c->hq * sizeof *p->lse_ref);
    assert_true(p->o_ref && p->lse_ref);
    p->ref = (fsa_ref_window_problem){T,    c->nseq, p->cu, c->hq, c->hkv, c->dk,     c->dv, c->window,
                                      scale, p->q, p->k, p->v, p->windows};
    fsa_ref_window_forward(&p->ref, p->o_ref, p->lse_ref);

    const int pad = c->strided ? 8 : 0;
    p->q_hs = c->dk + pad, p->q_ts = c->hq * p->q_hs + pad, p->k_hs = c->dk + 2 * pad, p->k_ts = c->hkv * p->k_hs;
    p->v_hs = c->dv + pad, p->v_ts = c->hkv * p->v_hs + pad, p->o_hs = c->dv + pad, p->o_ts = c->hq * p->o_hs + 3 * pad;
    p->dq_ = upload_strided(p->q, T, c->hq, c->dk, p->q_ts, p->q_hs, c->dtype);
    p->dk_ = upload_strided(p->k, T, c->hkv, c->dk, p->k_ts, p->k_hs, c->dtype);
    p->dv_ = upload_strided(p->v, T, c->hkv, c->dv, p->v_ts, p->v_hs, c->dtype);
    p->o_bytes = (size_t)T * p->o_ts * 2, p->lse_bytes = (size_t)T * c->hq * 4;
    p->do_ = fsa_test_dalloc(p->o_bytes);
    p->dlse = fsa_test_dalloc(p->lse_bytes);
    p->dcu = fsa_test_dalloc(sizeof p->cu);
    fsa_test_h2d(p->dcu, p->cu, sizeof p->cu);
}

static void problem_release(win_problem *p)
{
    const uint64_t dev[] = {p->dq_, p->dk_, p->dv_, p->do_, p->dcu, p->dlse};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) fsa_test_dfree(dev[i]);
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o_ref);
    free(p->lse_ref);
}

static fsa_window_fwd_args fwd_args_of_problem(const win_problem *p, const win_case *c)
{
    fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
    a.total_tokens = p->T, a.batch = c->nseq, a.cu_seqlens = p->dcu, a.lse = p->dlse;
    a.q = (fsa_tensor){p->dq_, p->q_ts, p->q_hs}, a.k = (fsa_tensor){p->dk_, p->k_ts, p->k_hs};
    a.v = (fsa_tensor){p->dv_, p->v_ts, p->v_hs}, a.o = (fsa_tensor){p->do_, p->o_ts, p->o_hs};
    return a;
}

/* inputs: the number the case's inputs are drawn from (a fixed case's index in cases[], a random case's seed). */
static void run_forward(const win_case *c, const fsa_window_plan *plan, uint64_t inputs)
{
    win_problem p;
    problem_of(&p, c, 0x51d0u + inputs);
    const int T = p.T;
    const size_t no = (size_t)T * c->hq * c->dv;
    fsa_window_fwd_args a = fwd_args_of_problem(&p, c);
    float *o = malloc(no * sizeof *o), *lse = malloc(p.lse_bytes);
    uint16_t *img[2] = {malloc(p.o_bytes), malloc(p.o_bytes)};
    assert_true(o && lse && img[0] && img[1]);
    for (int run = 0; run < 2; run++) {
        if (run == 1) a.lse = 0; /* lse not wanted: o alone, the same bits */
        fsa_test_dfill(a.o.ptr, 0xff, p.o_bytes);
        fsa_test_dfill(p.dlse, 0xff, p.lse_bytes);
        if (fsa_window_attention_fwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        download_strided(o, img[run], a.o.ptr, T, c->hq, c->dv, p.o_ts, p.o_hs, c->dtype);
        if (run == 1) break;
        fsa_test_d2h(lse, p.dlse, p.lse_bytes);
        const double tol = c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3;
        const double err = fsa_rel_error(o, p.o_ref, no);
        /* Row by row too: one norm over the tensor lets a wrong row with a small output (a long window) pass. */
        size_t row;
        const double row_err = fsa_row_rel_error(o, p.o_ref, (size_t)T * c->hq, c->dv, 0.1, &row);
        double worst = 0.0;
        for (size_t e = 0; e < (size_t)T * c->hq; e++) {
            assert_true(isfinite(lse[e])); /* every query sees itself */
            worst = fmax(worst, fabs(lse[e] - p.lse_ref[e]) / (2e-3 + 1e-5 * fabs(p.lse_ref[e])));
        }
        print_message("  %-28s T %5d  o rel err %.3e (tol %.0e), worst row %.3e (t %zu qh %zu, tol %.0e), "
                      "lse err/tol %.3f\n", c->name, T, err, tol, row_err, row / c->hq, row % c->hq, 3 * tol, worst);
        assert_true(err < tol);
        assert_true(row_err < 3 * tol);
        assert_true(worst < 1.0);
        if (c->strided) /* the padding of a strided output (past Dv, between heads and tokens) is never written */
            fsa_test_assert_padding_untouched(img[0], (size_t)T * p.o_ts, T, c->hq, c->dv, p.o_ts, p.o_hs, 0xffff, "o");
    }
    assert_memory_equal(img[0], img[1], p.o_bytes);
    free(img[0]);
    free(img[1]);
    free(o);
    free(lse);
    problem_release(&p);
}

static void test_the_forward_matches_the_reference_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++)
        if (runs_here(i)) run_forward(&cases[i], g_plans[i], i);
}

/* The backward's device buffers: dout, the three gradients, the workspace. */
typedef struct grads {
    uint64_t dout, d[3], ws;
    size_t bytes[3], ws_bytes;
    int rows[3], heads[3], dims[3];
    int64_t ts[3], hs[3];
} grads;

static fsa_window_bwd_args bwd_args_of(grads *g, win_problem *p, const win_case *c, const fsa_window_plan *plan,
                                       const float *dout)
{
    const int T = p->T;
    g->dout = upload_strided(dout, T, c->hq, c->dv, p->o_ts, p->o_hs, c->dtype);
    const int rows[3] = {T, T, T}, heads[3] = {c->hq, c->hkv, c->hkv}, dims[3] = {c->dk, c->dk, c->dv};
    const int64_t ts[3] = {p->q_ts, p->k_ts, p->v_ts}, hs[3] = {p->q_hs, p->k_hs, p->v_hs};
    for (int i = 0; i < 3; i++) {
        g->rows[i] = rows[i], g->heads[i] = heads[i], g->dims[i] = dims[i], g->ts[i] = ts[i], g->hs[i] = hs[i];
        g->bytes[i] = (size_t)T * ts[i] * 2;
        g->d[i] = fsa_test_dalloc(g->bytes[i]);
    }
    assert_int_equal(fsa_window_plan_workspace_size_bwd(&g->ws_bytes, plan, T, c->nseq), FSA_STATUS_OK);
    g->ws = fsa_test_dalloc(g->ws_bytes + 256);
    const fsa_window_fwd_args f = fwd_args_of_problem(p, c);
    fsa_window_bwd_args a = FSA_WINDOW_BWD_ARGS_INIT;
    a.total_tokens = T, a.batch = c->nseq, a.cu_seqlens = p->dcu, a.lse = p->dlse;
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o;
    a.dout = (fsa_tensor){g->dout, p->o_ts, p->o_hs};
    a.dq = (fsa_tensor){g->d[0], p->q_ts, p->q_hs};
    a.dk = (fsa_tensor){g->d[1], p->k_ts, p->k_hs};
    a.dv = (fsa_tensor){g->d[2], p->v_ts, p->v_hs};
    a.workspace = g->ws, a.workspace_bytes = g->ws_bytes;
    return a;
}

static void grads_release(grads *g)
{
    fsa_test_dfree(g->dout);
    fsa_test_dfree(g->ws);
    for (int i = 0; i < 3; i++) fsa_test_dfree(g->d[i]);
}

static void poison_grads(const grads *g)
{
    for (int i = 0; i < 3; i++) fsa_test_dfill(g->d[i], 0xff, g->bytes[i]);
    fsa_test_dfill(g->ws, 0xff, g->ws_bytes);
}

/* The three gradients as logical floats (got, optional) and raw device images (img, the caller frees them). */
static void download_grads(const grads *g, float **got, uint16_t **img, fsa_dtype dt)
{
    for (int i = 0; i < 3; i++) {
        img[i] = malloc(g->bytes[i]);
        assert_non_null(img[i]);
        if (got) download_strided(got[i], img[i], g->d[i], g->rows[i], g->heads[i], g->dims[i], g->ts[i], g->hs[i], dt);
        else fsa_test_d2h(img[i], g->d[i], g->bytes[i]);
    }
}

static double norm(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t e = 0; e < n; e++) s += x[e] * x[e];
    return sqrt(s);
}

/* ||got - want|| over the larger of ||want|| and `floor`. A gradient that is
 * 0 in exact arithmetic (a window of one: the softmax over one key is
 * constant, so dq = dk = 0 and the GPU's are rounding noise) is measured
 * against a thousandth of the value gradient's size instead; any other is
 * far above that floor. */
static double grad_error(const float *got, const double *want, size_t n, double floor)
{
    const double w = norm(want, n);
    return fsa_rel_error(got, want, n) * fmax(w, 1e-30) / fmax(w, floor);
}

/* grad_error's floor for gradient i: frac of the value gradient's norm (dv_norm), scaled to i's size. */
static double grad_floor(double frac, double dv_norm, const size_t *n, int i)
{
    return frac * dv_norm * sqrt((double)n[i] / (double)n[2]);
}

/* grad_error row by row: the worst (token, head) row of [rows, len], each row over the larger of its norm
 * and a row floor, with that floor at least the tensor's `floor` shared over its rows, so that a gradient 0
 * in exact arithmetic is again measured against the value gradient's size. One norm over a tensor lets a
 * wrong row with small values pass, its own does not. With the reference's term norms (reference_terms.h),
 * each row also over its terms' norm and the row floor 0.1 x the median row (a big logit's rows neither set
 * the others' floor nor fail on their rounding); without (dq plus an addend), 0.1 x the rms row. */
static double row_grad_error(const float *got, const double *want, const double *terms, size_t rows, size_t len,
                             double floor, size_t *worst)
{
    const double per_row = sqrt((double)(rows > 0 ? rows : 1));
    return terms ? fsa_row_rel_error_terms(got, want, terms, rows, len, 0.1, floor / per_row, worst)
                 : fsa_row_rel_error_floored(got, want, rows, len, 0.1, floor / per_row, worst);
}

/* The worst rows of the first n_grads gradients, each under tol; frac and dv_norm as grad_floor's. */
static void check_gradient_rows(const win_case *c, const char *what, const grads *g, float *const *got,
                                double *const *want, const fsa_ref_grad_terms *terms, const size_t *n, int n_grads,
                                double frac, double dv_norm, double tol)
{
    static const char *const names[3] = {"dq", "dk", "dv"};
    double worst[3];
    print_message("  %-28s %-8s worst row", c->name, what);
    for (int i = 0; i < n_grads; i++) {
        size_t r;
        const double *term = fsa_ref_grad_terms_of(terms, i);
        worst[i] = row_grad_error(got[i], want[i], term, (size_t)g->rows[i] * g->heads[i], g->dims[i],
                                  grad_floor(frac, dv_norm, n, i), &r);
        print_message(" %s %.3e (t %zu h %zu)", names[i], worst[i], r / g->heads[i], r % g->heads[i]);
    }
    print_message(" (tol %.0e)\n", tol);
    for (int i = 0; i < n_grads; i++) assert_true(worst[i] < tol);
}

/* The padding of strided gradient images (past a head's dim, between heads and tokens) keeps the poison:
 * the first n_grads of img. */
static void check_gradient_padding(const win_case *c, const grads *g, uint16_t *const *img, int n_grads)
{
    static const char *const names[3] = {"dq", "dk", "dv"};
    if (!c->strided) return;
    for (int i = 0; i < n_grads; i++)
        fsa_test_assert_padding_untouched(img[i], (size_t)g->rows[i] * g->ts[i], g->rows[i], g->heads[i], g->dims[i],
                                          g->ts[i], g->hs[i], 0xffff, names[i]);
}

/* The gated backward (gate and gate_grad set, a's dout as it is): against
 * the reference gradients for dout times the gates, and rowsum(dout * o) as
 * the gate's gradient; n: the three gradients' sizes, got / want: room;
 * inputs: run_forward's. */
static void check_gated_backward(const win_case *c, const fsa_window_plan *plan, const win_problem *p, grads *g,
                                 const fsa_window_bwd_args *a, const float *dout, const size_t *n, float **got,
                                 double **want, double tol, uint64_t inputs)
{
    const size_t n_do = (size_t)p->T * c->hq * c->dv;
    gate_rows gr;
    gate_rows_make(&gr, p->T, c->hq, 0x6a7e000u + inputs);
    float *gated = malloc((n_do + 1) * sizeof(float)), *o = malloc((n_do + 1) * sizeof(float));
    assert_true(gated && o);
    gate_rows_scale(&gr, dout, c->dv, gated);
    download_strided(o, NULL, p->do_, p->T, c->hq, c->dv, p->o_ts, p->o_hs, c->dtype);
    fsa_ref_grad_terms terms;
    fsa_ref_grad_terms_alloc(&terms, (size_t)p->T * c->hq, (size_t)p->T * c->hkv);
    fsa_ref_window_backward_terms(&p->ref, gated, o, want[0], want[1], want[2], &terms); /* the o the call reads */
    fsa_window_bwd_args ga = *a;
    ga.gate = gate_rows_view(&gr), ga.gate_grad = gate_rows_grad_view(&gr);
    poison_grads(g);
    gate_rows_poison(&gr);
    if (fsa_window_attention_bwd(plan, &ga, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    uint16_t *img[3];
    download_grads(g, got, img, c->dtype);
    const double dv_norm = norm(want[2], n[2]);
    double err[3];
    for (int i = 0; i < 3; i++) err[i] = grad_error(got[i], want[i], n[i], grad_floor(1e-3, dv_norm, n, i));
    const double err_gate = gate_rows_grad_error(&gr, dout, o, c->dv);
    print_message("  %-28s gated    dq %.3e dk %.3e dv %.3e gate %.3e\n", c->name, err[0], err[1], err[2], err_gate);
    for (int i = 0; i < 3; i++) assert_true(err[i] < tol);
    assert_true(err_gate < 1e-5);
    check_gradient_rows(c, "gated", g, got, want, &terms, n, 3, 1e-3, dv_norm, 3 * tol);
    fsa_ref_grad_terms_free(&terms);
    check_gradient_padding(c, g, img, 3);
    for (int i = 0; i < 3; i++) free(img[i]);

    /* gate_grad without gate: the same gate gradient, and dq, dk, dv bit for bit the ungated call's. */
    uint16_t *plain[3], *alone[3];
    for (int with_grad = 0; with_grad < 2; with_grad++) {
        fsa_window_bwd_args aa = *a;
        if (with_grad) aa.gate_grad = gate_rows_grad_view(&gr);
        poison_grads(g);
        gate_rows_poison(&gr);
        if (fsa_window_attention_bwd(plan, &aa, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        download_grads(g, got, with_grad ? alone : plain, c->dtype);
    }
    const double err_alone = gate_rows_grad_error(&gr, dout, o, c->dv);
    print_message("  %-28s gate gradient without a gate %.3e\n", c->name, err_alone);
    assert_true(err_alone < 1e-5);
    for (int i = 0; i < 3; i++) {
        assert_memory_equal(plain[i], alone[i], g->bytes[i]);
        free(plain[i]);
        free(alone[i]);
    }
    free(gated);
    free(o);
    gate_rows_free(&gr);
}

/* The backward from the GPU forward's o and lse, against the reference
 * gradients; poisoned outputs and workspace; the same bits twice; gated.
 * inputs: run_forward's. */
static void run_backward(const win_case *c, const fsa_window_plan *plan, uint64_t inputs)
{
    win_problem p;
    problem_of(&p, c, 0xbac0000u + inputs);
    const int T = p.T;
    const fsa_window_fwd_args fa = fwd_args_of_problem(&p, c);
    fsa_test_dfill(p.do_, 0xff, p.o_bytes); /* o's padding (strided cases) is read back below, never written */
    assert_int_equal(fsa_window_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);

    const size_t n_do = (size_t)T * c->hq * c->dv;
    const size_t n[3] = {(size_t)T * c->hq * c->dk, (size_t)T * c->hkv * c->dk, (size_t)T * c->hkv * c->dv};
    fsa_rng rng = {0xd0u + inputs};
    float *dout = random_rounded(&rng, n_do, c->dtype), *got[3];
    double *want[3];
    for (int i = 0; i < 3; i++) {
        got[i] = malloc((n[i] + 1) * sizeof(float));
        want[i] = malloc((n[i] + 1) * sizeof(double));
        assert_true(got[i] && want[i]);
    }
    /* The reference given the o the call reads (the forward's, rounded): the contract's gradients. */
    float *o_read = malloc((n_do + 1) * sizeof *o_read);
    assert_non_null(o_read);
    download_strided(o_read, NULL, p.do_, T, c->hq, c->dv, p.o_ts, p.o_hs, c->dtype);
    fsa_ref_grad_terms terms;
    fsa_ref_grad_terms_alloc(&terms, (size_t)T * c->hq, (size_t)T * c->hkv);
    fsa_ref_window_backward_terms(&p.ref, dout, o_read, want[0], want[1], want[2], &terms);
    free(o_read);

    grads g;
    const fsa_window_bwd_args a = bwd_args_of(&g, &p, c, plan, dout);
    uint16_t *img[2][3];
    for (int run = 0; run < 2; run++) {
        poison_grads(&g);
        if (fsa_window_attention_bwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        download_grads(&g, got, img[run], c->dtype);
    }
    const double tol = c->dtype == FSA_DTYPE_BF16 ? 2e-2 : 6e-3;
    const double dv_norm = norm(want[2], n[2]);
    double err[3];
    for (int i = 0; i < 3; i++) err[i] = grad_error(got[i], want[i], n[i], grad_floor(1e-3, dv_norm, n, i));
    print_message("  %-28s backward dq %.3e dk %.3e dv %.3e (tol %.0e)\n", c->name, err[0], err[1], err[2], tol);
    for (int i = 0; i < 3; i++) {
        assert_true(err[i] < tol);
        assert_memory_equal(img[0][i], img[1][i], g.bytes[i]); /* same inputs, same bits */
    }
    check_gradient_rows(c, "backward", &g, got, want, &terms, n, 3, 1e-3, dv_norm, 3 * tol);
    fsa_ref_grad_terms_free(&terms);
    check_gradient_padding(c, &g, img[0], 3);

    /* dq_add, added before the rounding: first dq itself (in place, holding the dq just computed), then a
     * random addend in memory apart with strides of its own (head-major), whose values no dq of the call could
     * stand in for: dq becomes the reference's plus the addend (one rounding); dk and dv keep their bits. */
    float *first_dq = malloc((n[0] + 1) * sizeof(float)), *addend = random_rounded(&rng, n[0], c->dtype);
    assert_non_null(first_dq);
    const double dq_rms = norm(want[0], n[0]) / sqrt((double)(n[0] > 0 ? n[0] : 1)); /* the addend at dq's size */
    for (size_t e = 0; e < n[0]; e++) addend[e] = attn_round_to(c->dtype, (float)(addend[e] * dq_rms));
    memcpy(first_dq, got[0], n[0] * sizeof(float));
    const uint64_t addend_dev = upload_strided(addend, T, c->hq, c->dk, c->dk, (int64_t)T * c->dk, c->dtype);
    double *dq_sum = malloc((n[0] + 1) * sizeof(double));
    assert_non_null(dq_sum);
    uint16_t *added[3] = {0};
    for (int apart = 0; apart < 2; apart++) {
        const float *add = apart ? addend : first_dq;
        for (size_t e = 0; e < n[0]; e++) dq_sum[e] = want[0][e] + (double)add[e];
        fsa_window_bwd_args acc = a;
        acc.dq_add = apart ? (fsa_tensor){addend_dev, c->dk, (int64_t)T * c->dk} : a.dq;
        for (int i = apart ? 0 : 1; i < 3; i++) /* the bits compared below: this call's (dq apart: nothing read) */
            fsa_test_dfill(g.d[i], 0xff, g.bytes[i]);
        fsa_test_dfill(g.ws, 0xff, g.ws_bytes);
        if (fsa_window_attention_bwd(plan, &acc, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        for (int i = 0; i < 3; i++) free(added[i]);
        download_grads(&g, got, added, c->dtype);
        const double e_add = grad_error(got[0], dq_sum, n[0], grad_floor(2e-3, dv_norm, n, 0));
        print_message("  %-28s dq_add   dq %.3e (tol %.0e) (%s)\n", c->name, e_add, tol, apart ? "apart" : "in place");
        assert_true(e_add < tol);
        check_gradient_rows(c, "dq_add", &g, got, &dq_sum, NULL, n, 1, 2e-3, dv_norm, 3 * tol);
        check_gradient_padding(c, &g, added, 1);
        assert_memory_equal(img[1][1], added[1], g.bytes[1]);
        assert_memory_equal(img[1][2], added[2], g.bytes[2]);
    }
    fsa_test_dfree(addend_dev);
    free(addend);
    free(first_dq);
    free(dq_sum);
    check_gated_backward(c, plan, &p, &g, &a, dout, n, got, want, tol, inputs);
    for (int i = 0; i < 3; i++) {
        free(img[0][i]);
        free(img[1][i]);
        free(added[i]);
        free(got[i]);
        free(want[i]);
    }
    free(dout);
    grads_release(&g);
    problem_release(&p);
}

static void test_the_backward_matches_the_reference_gradients_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++)
        if (runs_here(i)) run_backward(&cases[i], g_plans[i], i);
}

/* Every output of a forward and a backward poisoned (o's padding too, so that images of two runs compare). */
static void poison_outputs(const win_problem *p, const grads *g)
{
    poison_grads(g);
    fsa_test_dfill(p->do_, 0xff, p->o_bytes);
    fsa_test_dfill(p->dlse, 0xff, p->lse_bytes);
}

/* Forward and backward captured in one CUDA graph replay to the bits of
 * direct calls: o, lse and the three gradients. */
static void test_a_graph_captured_forward_and_backward_replay_to_the_same_bits(void **state)
{
    (void)state;
    const win_case *c = &cases[GRAPH_CASE];
    const fsa_window_plan *plan = g_plans[GRAPH_CASE];
    win_problem p;
    problem_of(&p, c, 77);
    const fsa_window_fwd_args fa = fwd_args_of_problem(&p, c);
    fsa_rng rng = {78};
    float *dout = random_rounded(&rng, (size_t)p.T * c->hq * c->dv, c->dtype);
    grads g;
    const fsa_window_bwd_args ba = bwd_args_of(&g, &p, c, plan, dout);
    uint16_t *direct[3], *replay[3];
    poison_outputs(&p, &g);
    assert_int_equal(fsa_window_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    assert_int_equal(fsa_window_attention_bwd(plan, &ba, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    download_grads(&g, NULL, direct, c->dtype);
    unsigned char *direct_o = fsa_test_image(p.do_, p.o_bytes), *direct_lse = fsa_test_image(p.dlse, p.lse_bytes);

    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    if (fsa_window_attention_fwd(plan, &fa, graph.stream) != FSA_STATUS_OK ||
        fsa_window_attention_bwd(plan, &ba, graph.stream) != FSA_STATUS_OK)
        fail_msg("capture: %s", fsa_last_error());
    fsa_test_capture_end(&graph);
    for (int rep = 0; rep < 2; rep++) {
        poison_outputs(&p, &g);
        fsa_test_graph_replay(&graph);
        unsigned char *o = fsa_test_image(p.do_, p.o_bytes), *lse = fsa_test_image(p.dlse, p.lse_bytes);
        assert_memory_equal(direct_o, o, p.o_bytes);
        assert_memory_equal(direct_lse, lse, p.lse_bytes);
        free(o);
        free(lse);
        download_grads(&g, NULL, replay, c->dtype);
        for (int i = 0; i < 3; i++) {
            assert_memory_equal(direct[i], replay[i], g.bytes[i]);
            free(replay[i]);
        }
    }
    fsa_test_graph_free(&graph);
    for (int i = 0; i < 3; i++) free(direct[i]);
    free(direct_o);
    free(direct_lse);
    free(dout);
    grads_release(&g);
    problem_release(&p);
}

/* Offsets that contradict the token count (a sequence past T, a decreasing
 * pair) are clamped by the kernels: forward and backward complete without a
 * fault (run under compute-sanitizer to see no access goes out of bounds). */
static void test_malformed_offsets_cannot_make_the_kernels_fault(void **state)
{
    (void)state;
    const win_case *c = &cases[OFFSETS_CASE];
    const fsa_window_plan *plan = g_plans[OFFSETS_CASE];
    win_problem p;
    problem_of(&p, c, 13);
    const int32_t bad_cu[4] = {0, p.T + 50, 7, p.T + 1000};
    fsa_test_h2d(p.dcu, bad_cu, sizeof bad_cu);
    const fsa_window_fwd_args fa = fwd_args_of_problem(&p, c);
    float *dout = random_rounded(&(fsa_rng){14}, (size_t)p.T * c->hq * c->dv, c->dtype);
    grads g;
    const fsa_window_bwd_args ba = bwd_args_of(&g, &p, c, plan, dout);
    assert_int_equal(fsa_window_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    assert_int_equal(fsa_window_attention_bwd(plan, &ba, NULL), FSA_STATUS_OK);
    fsa_test_sync(); /* fails the test on a fault */
    free(dout);
    grads_release(&g);
    problem_release(&p);
}

/* The plan of case c, with its backward unless forward_only. */
static fsa_status plan_create_as(const win_case *c, int forward_only, fsa_window_plan **out)
{
    int32_t windows[64];
    windows_of(c, windows);
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.dtype = c->dtype, d.head_dim = c->dk, d.value_dim = c->dv, d.backward = !forward_only;
    d.num_q_heads = c->hq, d.num_kv_heads = c->hkv;
    d.window = c->window, d.head_windows = c->per_head ? windows : NULL;
    d.scale = c->scale;
    return fsa_window_plan_create(out, g_ctx, &d);
}

/* The plan (with backward) of case c. */
static fsa_status plan_create(const win_case *c, fsa_window_plan **out) { return plan_create_as(c, 0, out); }

/* The mma.sync forward in the smaller layouts that 99 KB targets (sm_86, sm_89, sm_12x) take
 * (fsa_qt_fwd_layout_fit): FSA_QT_SMALL_FWD=1 forces stages of 32 keys (the window forward has one set of
 * rows per warp anyway) and FSA_WGMMA=0 keeps sm_90a on the mma.sync forward, both read at plan creation,
 * so any GPU runs it. A few fixed cases through the forward's reference checks: the standard shape, NSA's
 * 192 / 128 (which those targets take so), per-head windows, odd dims, many tiles. Forward-only plans
 * (the backward is not part of these layouts). */
static void test_the_small_forward_layout_matches_the_reference(void **state)
{
    (void)state;
    static const char *names[] = {"bf16_d128_g4_w512", "bf16_dk192_dv128_g16_w100", "f16_dk192_dv128_g4_per_head",
                                  "f16_dk32_dv96_g3_w65", "bf16_d128_g4_w512_many_jobs"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const size_t i = case_named(names[n]);
        if (!runs(&cases[i]) || !fsa_test_layout_listed("1")) continue;
        fsa_test_small_layouts env;
        fsa_test_small_layouts_begin(&env, "1", NULL);
        fsa_window_plan *plan = NULL;
        const fsa_status st = plan_create_as(&cases[i], 1, &plan);
        fsa_test_small_layouts_end(&env);
        if (st != FSA_STATUS_OK) fail_msg("%s, FSA_QT_SMALL_FWD=1: %s", cases[i].name, fsa_last_error());
        /* The plan compiled the layout's own kernel (named by its QT_FWD), not the default one. */
        const int layout = fsa_swa_fwd_layout(cases[i].dk, cases[i].dv, 0, fsa_test_max_smem(g_ctx),
                                              FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32);
        assert_int_not_equal(layout, 0);
        fsa_test_expect_layout_kernel(g_ctx, "swa_fwd_", "qf", layout);
        print_message("  FSA_QT_SMALL_FWD=1 FSA_WGMMA=0 (layout %d):\n", layout);
        run_forward(&cases[i], plan, i);
        fsa_window_plan_destroy(plan);
    }
}

/* The mma.sync backward in the smaller layouts that 99 KB targets (sm_86, sm_89, sm_12x) and sm_80's widest
 * head dims take (fsa_qt_bwd_layout_fit): FSA_QT_SMALL_BWD forces them, FSA_WGMMA=0 and FSA_WGMMA_BWD=0 keep
 * sm_90a on the mma.sync kernels, all read at plan creation, so any GPU runs them: 1, the smallest (dK/dV
 * in one stage of 32 query rows, its sums handed over dK's then dV's; dq in one stage of 32 keys); 2, dK/dV
 * in one stage and dq in stages of 32 keys (what 128 / 128 takes on 99 KB targets), with the forward's
 * override 1 (stages of 32 keys). A few fixed cases through the backward's reference checks: the standard
 * shape, many tiles, NSA's 192 / 128, per-head windows, 256 / 256 (two parts), 256 / 64, odd dims. */
static void test_the_small_backward_layouts_match_the_reference(void **state)
{
    (void)state;
    static const char *names[] = {"bf16_d128_g4_w512",   "bf16_dk192_dv128_g16_w100",   "f16_dk192_dv128_g4_per_head",
                                  "bf16_d128_g4_w512_many_jobs",  "bf16_d256_g2_causal", "bf16_dk256_dv64_g2_one_pass",
                                  "f16_dk32_dv96_g3_w65",         "f16_d64_g1_w1"};
    static const char *layouts[] = {"1", "2"};
    static const int forced_bwd[] = {FSA_QT_BWD_DKV_BITS | FSA_QT_BWD_DQ_BITS,
                                     FSA_QT_BWD_DKV_ONE_STAGE | FSA_QT_BWD_DQ_KEYS_32};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
            const size_t i = case_named(names[n]);
            if (!runs(&cases[i]) || !fsa_test_layout_listed(layouts[l])) continue;
            fsa_test_small_layouts env;
            fsa_test_small_layouts_begin(&env, "1", layouts[l]);
            fsa_window_plan *plan = NULL;
            const fsa_status st = plan_create_as(&cases[i], 0, &plan);
            fsa_test_small_layouts_end(&env);
            if (st != FSA_STATUS_OK && fsa_test_refused_for_shared_memory(g_ctx, st, fsa_last_error())) {
                print_message("  %s: refused on this GPU's shared memory: %s\n", cases[i].name, fsa_last_error());
                continue;
            }
            if (st != FSA_STATUS_OK)
                fail_msg("%s, FSA_QT_SMALL_BWD=%s: %s", cases[i].name, layouts[l], fsa_last_error());
            /* The plan compiled the layouts' own kernels (named by QT_FWD and QT_BWD). */
            const int max = fsa_test_max_smem(g_ctx);
            fsa_test_expect_layout_kernel(
                g_ctx, "swa_fwd_", "qf",
                fsa_swa_fwd_layout(cases[i].dk, cases[i].dv, 0, max, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32));
            fsa_test_expect_layout_kernel(g_ctx, "swa_bwd_", "qb",
                                          fsa_qt_bwd_layout(cases[i].dk, cases[i].dv, 0, max, forced_bwd[l]));
            print_message("  FSA_QT_SMALL_BWD=%s FSA_QT_SMALL_FWD=1 FSA_WGMMA=0 FSA_WGMMA_BWD=0:\n", layouts[l]);
            run_backward(&cases[i], plan, i);
            fsa_window_plan_destroy(plan);
        }
}

/* The plan of case i (with backward), or NULL after saying why. */
static void *plan_of_case(void *arg)
{
    const size_t i = (size_t)(uintptr_t)arg;
    const fsa_status st = plan_create(&cases[i], &g_plans[i]);
    if (st != FSA_STATUS_OK) {
        g_refused[i] = fsa_test_refused_for_shared_memory(g_ctx, st, fsa_last_error());
        fprintf(stderr, "plan %s: %s%s\n", cases[i].name, fsa_last_error(),
                g_refused[i] ? " (this GPU's shared memory: the case is not run here)" : "");
    }
    return NULL;
}

/* Random cases: the fixed table tries the combinations someone thought of; a seeded draw over everything the
 * window plan takes (docs/semantics.md "Sliding-window attention", include/fsa/window.h, validate_desc in
 * src/attention/window.c) tries the others, through the same checks. What a drawn case may be:
 * - dtype bf16 or fp16; Dk and Dv each a multiple of 16 from 16 to 256, independently (Dk != Dv, 96, 192;
 *   Dk = Dv = 256 with backward needs more than 99 KB of shared memory, as cases[]'s bf16_d256_g2_causal
 *   does: sm_80 takes it in the smaller dK/dV layout, fsa_qt_bwd_layout_fit; a GPU that refuses it reports
 *   it and does not run it: fsa_test_refused_for_shared_memory);
 * - G = Hq / Hkv from 1 to 16, odd ones too; Hq at most 64 (win_problem's windows[64]);
 * - a window of at least 1, up to far longer than every sequence; per-head windows (windows_of's pattern);
 * - 1 to 5 sequences (win_problem's cu[6]) of 1 to 900 tokens, one to three tokens and tile edges often,
 *   at most RANDOM_MAX_TOKENS in all and RANDOM_MAX_WORK for the float64 reference;
 * - strided or dense; a scale of 0 (1/sqrt(Dk)) or from a quarter of that to 2.5 times it;
 * - big_logit only with the default scale: q * 1e4 / (scale |q|^2) with a small scale and Dk 16 would leave
 *   fp16's range. */
enum { RANDOM_MAX_TOKENS = 2000, RANDOM_THREADS = 16 };
/* Multiply-adds of the reference forward (reference_work), about those of cases[0]: the reference forward
 * and its two backwards (plain and gated) then take seconds. */
#define RANDOM_MAX_WORK 1.2e9

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* Keys seen by the queries of a sequence of n tokens under a window of w. */
static double keys_seen(int n, int w)
{
    return w >= n ? 0.5 * n * (n + 1.0) : 0.5 * w * (w + 1.0) + (double)(n - w) * w;
}

/* The reference forward's multiply-adds: every (query head, query, key seen) costs Dk + Dv. */
static double reference_work(const win_case *c)
{
    int32_t w[64];
    windows_of(c, w);
    double keys = 0.0;
    for (int qh = 0; qh < c->hq; qh++)
        for (int b = 0; b < c->nseq; b++) keys += keys_seen(c->lens[b], w[qh]);
    return keys * (c->dk + c->dv);
}

static int total_tokens(const win_case *c)
{
    int T = 0;
    for (int b = 0; b < c->nseq; b++) T += c->lens[b];
    return T;
}

/* Half the time a dim models use (96 and 192 among them), else any multiple of 16 the plan takes. */
static int random_head_dim(fsa_rng *rng)
{
    static const int common[] = {64, 96, 128, 192, 256};
    return fsa_rng_int(rng, 0, 1) ? common[fsa_rng_int(rng, 0, 4)] : 16 * fsa_rng_int(rng, 1, 16);
}

static int random_length(fsa_rng *rng)
{
    switch (fsa_rng_int(rng, 0, 3)) {
    case 0: return fsa_rng_int(rng, 1, 3);                                /* less than any tile */
    case 1: return 64 * fsa_rng_int(rng, 1, 8) + fsa_rng_int(rng, -1, 1); /* at a tile's edge */
    case 2: return fsa_rng_int(rng, 4, 100);
    default: return fsa_rng_int(rng, 101, 900); /* a few hundred */
    }
}

/* A window for sequences of at most `longest` tokens. */
static int random_window(fsa_rng *rng, int longest)
{
    switch (fsa_rng_int(rng, 0, 5)) {
    case 0: return 1; /* each query sees itself alone */
    case 1: return fsa_rng_int(rng, 2, 16);
    case 2: return fsa_rng_int(rng, 1, longest);
    case 3: return 64 * fsa_rng_int(rng, 1, 8) + fsa_rng_int(rng, -1, 1); /* at a key tile's edge */
    case 4: return imax(1, longest + fsa_rng_int(rng, -1, 1));           /* about the longest sequence */
    default: return longest + fsa_rng_int(rng, 2, 5000);                  /* causal for every sequence */
    }
}

/* A case drawn from rng over what the plan takes (above), its name (every field) written to name_buf. Draws
 * over RANDOM_MAX_TOKENS or RANDOM_MAX_WORK are drawn again. */
static void random_case(fsa_rng *rng, win_case *out, char *name_buf, size_t n)
{
    win_case c;
    do {
        memset(&c, 0, sizeof c);
        c.dtype = fsa_rng_int(rng, 0, 1) ? BF : HF;
        c.dk = random_head_dim(rng);
        c.dv = fsa_rng_int(rng, 0, 2) == 0 ? c.dk : random_head_dim(rng);
        const int g = fsa_rng_int(rng, 1, FSA_QT_MAX_GROUP);
        /* Mostly a few KV heads; sometimes as many as 64 query heads allow. */
        c.hkv = fsa_rng_int(rng, 0, 7) == 0 ? 64 / g : fsa_rng_int(rng, 1, imin(4, 64 / g));
        c.hq = g * c.hkv;
        c.nseq = fsa_rng_int(rng, 1, 5);
        int longest = 0;
        for (int b = 0; b < c.nseq; b++) longest = imax(longest, c.lens[b] = random_length(rng));
        c.window = random_window(rng, longest);
        c.per_head = fsa_rng_int(rng, 0, 2) == 0;
        c.strided = fsa_rng_int(rng, 0, 1);
        if (fsa_rng_int(rng, 0, 3) == 0) { /* whole thousandths, so that the name gives it exactly */
            const double unit = 1000.0 / sqrt((double)c.dk);
            c.scale = (float)(fsa_rng_int(rng, (int)ceil(0.25 * unit), (int)floor(2.5 * unit)) / 1000.0);
        }
        c.big_logit = c.scale == 0.0f && fsa_rng_int(rng, 0, 4) == 0;
    } while (total_tokens(&c) > RANDOM_MAX_TOKENS || reference_work(&c) > RANDOM_MAX_WORK);
    char lens[64];
    size_t at = 0;
    for (int b = 0; b < c.nseq; b++) at += (size_t)snprintf(lens + at, sizeof lens - at, b ? "-%d" : "%d", c.lens[b]);
    char scale[32] = ""; /* none: the default */
    if (c.scale != 0.0f) snprintf(scale, sizeof scale, "_scale%.3f", (double)c.scale);
    snprintf(name_buf, n, "%s_dk%d_dv%d_g%d_hkv%d_w%d%s%s%s%s_lens%s", c.dtype == BF ? "bf16" : "f16", c.dk, c.dv,
             c.hq / c.hkv, c.hkv, c.window, c.per_head ? "_per_head" : "", c.strided ? "_strided" : "", scale,
             c.big_logit ? "_big_logit" : "", lens);
    c.name = name_buf;
    *out = c;
}

/* A drawn case with its plan. seed: the case's (drawn from FSA_TEST_SEED), which also seeds its inputs. */
typedef struct random_slot {
    win_case c;
    uint64_t seed;
    fsa_window_plan *plan;
    fsa_status status;
    char name[192], line[512], error[512];
} random_slot;

static random_slot *g_random;
static int g_n_random;
static uint64_t g_random_seed;

/* Draws case i of FSA_TEST_SEED (seed: fsa_test_random_case_seed) and says what it is. */
static void random_slot_draw(random_slot *r, int i, uint64_t seed)
{
    r->seed = seed;
    const int prefix = snprintf(r->name, sizeof r->name, "seed%#llx_i%d_", (unsigned long long)g_random_seed, i);
    fsa_rng rng = {seed};
    random_case(&rng, &r->c, r->name + prefix, sizeof r->name - (size_t)prefix);
    r->c.name = r->name;
    const win_case *c = &r->c;
    char lens[64];
    size_t at = 0;
    for (int b = 0; b < c->nseq; b++) at += (size_t)snprintf(lens + at, sizeof lens - at, b ? ", %d" : "%d", c->lens[b]);
    snprintf(r->line, sizeof r->line,
             "random case %d of FSA_TEST_SEED=%#llx (alone: FSA_TEST_SEED=%#llx FSA_TEST_RANDOM=1; case seed %#llx): "
             "dtype %s dk %d dv %d hq %d hkv %d G %d window %d per_head %d lens {%s} nseq %d T %d strided %d "
             "scale %.3f (0: 1/sqrt(dk)) big_logit %d",
             i, (unsigned long long)g_random_seed, (unsigned long long)fsa_test_random_rerun_seed(g_random_seed, i),
             (unsigned long long)seed, c->dtype == BF ? "bf16" : "f16",
             c->dk, c->dv, c->hq, c->hkv, c->hq / c->hkv, c->window, c->per_head, lens, c->nseq, total_tokens(c),
             c->strided, (double)c->scale, c->big_logit);
}

static void *plan_of_random_case(void *arg)
{
    random_slot *r = arg;
    r->status = plan_create(&r->c, &r->plan);
    if (r->status != FSA_STATUS_OK) snprintf(r->error, sizeof r->error, "%s", fsa_last_error());
    return NULL;
}

/* FSA_TEST_RANDOM cases drawn from FSA_TEST_SEED: every drawn case has a plan (the draw keeps to what the plan
 * takes), and its forward and backward pass the fixed cases' checks. */
static void test_random_cases_match_the_reference(void **state)
{
    (void)state;
    if (g_n_random == 0) {
        print_message("  no random cases (FSA_TEST_RANDOM=0)\n");
        return;
    }
    g_random = calloc((size_t)g_n_random, sizeof *g_random);
    assert_non_null(g_random);
    for (int i = 0; i < g_n_random; i++) {
        random_slot_draw(&g_random[i], i, fsa_test_random_case_seed(g_random_seed, i));
        print_message("  %s\n", g_random[i].line);
    }
    /* One thread per plan, RANDOM_THREADS at a time, so the kernels compile in parallel. */
    for (int first = 0; first < g_n_random; first += RANDOM_THREADS) {
        pthread_t th[RANDOM_THREADS];
        const int end = imin(first + RANDOM_THREADS, g_n_random);
        for (int i = first; i < end; i++)
            assert_int_equal(pthread_create(&th[i - first], NULL, plan_of_random_case, &g_random[i]), 0);
        for (int i = first; i < end; i++) pthread_join(th[i - first], NULL);
    }
    int refused = 0;
    for (int i = 0; i < g_n_random; i++)
        if (g_random[i].status != FSA_STATUS_OK)
            print_error("%s: plan refused: %s\n", g_random[i].line, g_random[i].error), refused++;
    if (refused) fail_msg("%d of %d random cases refused by the plan (above)", refused, g_n_random);
    for (int i = 0; i < g_n_random; i++) {
        const random_slot *r = &g_random[i];
        print_message("  %s\n", r->line);
        run_forward(&r->c, r->plan, r->seed);
        run_backward(&r->c, r->plan, r->seed);
    }
}

static int setup(void **state)
{
    (void)state;
    g_quick = fsa_test_quick();
    /* a malformed value exits here, GPU or not; cases picked by name run no random ones */
    g_n_random = fsa_test_random_count(getenv("FSA_TEST_CASES") != NULL ? 0 : -1);
    g_random_seed = fsa_test_random_seed(0x5eed0f5a);
    g_cache_dir = fsa_test_mkdtemp("window-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    /* One thread per plan, so the kernels compile in parallel. */
    pthread_t th[N_CASES];
    for (size_t i = 0; i < N_CASES; i++)
        if (planned(i)) assert_int_equal(pthread_create(&th[i], NULL, plan_of_case, (void *)(uintptr_t)i), 0);
    int ok = 1;
    for (size_t i = 0; i < N_CASES; i++)
        if (planned(i)) pthread_join(th[i], NULL), ok &= g_plans[i] != NULL || g_refused[i];
    return ok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) fsa_window_plan_destroy(g_plans[i]);
    for (int i = 0; g_random && i < g_n_random; i++) fsa_window_plan_destroy(g_random[i].plan);
    free(g_random);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_forward_matches_the_reference_on_every_case),
        cmocka_unit_test(test_the_small_forward_layout_matches_the_reference),
        cmocka_unit_test(test_the_backward_matches_the_reference_gradients_on_every_case),
        cmocka_unit_test(test_the_small_backward_layouts_match_the_reference),
        cmocka_unit_test(test_a_graph_captured_forward_and_backward_replay_to_the_same_bits),
        cmocka_unit_test(test_malformed_offsets_cannot_make_the_kernels_fault),
        cmocka_unit_test(test_random_cases_match_the_reference),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. the forward's
     * under compute-sanitizer. Skips (exit 77) inside setup when there is no GPU. */
    fsa_test_check_case_list(case_name, N_CASES); /* a mistyped FSA_TEST_CASES exits here, GPU or not */
    (void)fsa_test_layout_listed("1");           /* and so does a mistyped FSA_TEST_LAYOUTS */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
