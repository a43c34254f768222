#include "attention_problem.h"

#include "../../templates/fsa_layout.cuh" /* the kernels' limits and work-item sizes, as the plan reads them */

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int attn_group_of(const attn_case *c) { return c->hq / c->hkv; }
int attn_value_dim(const attn_case *c) { return c->dv > 0 ? c->dv : c->d; }

void attn_run_cases(const attn_case *cases, fsa_plan *const *plans, size_t n, int quick, int with_dv,
                    void (*run)(const attn_case *c, fsa_plan *plan))
{
    for (size_t i = 0; i < n; i++)
        if ((!quick || cases[i].quick) && (cases[i].dv != 0) == with_dv) run(&cases[i], plans[i]);
}

static const char *dtype_name(fsa_dtype dt);

const char *attn_kernel_prefix(char *buf, size_t n, const char *family, const attn_case *c)
{
    snprintf(buf, n, "%s_%s_d%d_dv%d_g%d_bk%d", family, dtype_name(c->dtype), c->d, attn_value_dim(c), attn_group_of(c),
             c->bk);
    return buf;
}

fsa_plan *attn_mma_sync_plan(fsa_context *ctx, const attn_case *c, int backward, const char *one_stage, int *layout)
{
    char *saved_wg = fsa_test_env_swap("FSA_WGMMA", "0");
    char *saved_bwd = fsa_test_env_swap("FSA_WGMMA_SEL_BWD", "0");
    char *saved_one = fsa_test_env_swap("FSA_SEL_LAYOUT_ONE_STAGE", one_stage);
    const fsa_selected_attention_desc d = attn_desc_of(c, backward);
    fsa_plan *plan = NULL;
    const fsa_status st = fsa_plan_create(&plan, ctx, &d);
    fsa_test_env_restore("FSA_SEL_LAYOUT_ONE_STAGE", saved_one);
    fsa_test_env_restore("FSA_WGMMA_SEL_BWD", saved_bwd);
    fsa_test_env_restore("FSA_WGMMA", saved_wg);
    if (st != FSA_STATUS_OK)
        fail_msg("%s, FSA_SEL_LAYOUT_ONE_STAGE=%s: %s", c->name, one_stage ? one_stage : "(unset)", fsa_last_error());
    if (layout)
        *layout = fsa_sel_layout_fit(c->d, attn_value_dim(c), c->bk, attn_group_of(c), (int)c->alg,
                                     fsa_test_max_smem(ctx),
                                     one_stage && strcmp(one_stage, "1") == 0 ? FSA_SEL_LAYOUT_ALL : 0);
    return plan;
}

fsa_selected_attention_desc attn_desc_of(const attn_case *c, int backward)
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
    d.backward = backward;
    d.value_dim = c->dv;
    d.scale = c->scale;
    return d;
}

/* ------------------------------------------------------------ problem data */



float attn_round_to(fsa_dtype dt, float x)
{
    return dt == FSA_DTYPE_BF16 ? fsa_bf16_to_f32(fsa_f32_to_bf16(x)) : fsa_f16_to_f32(fsa_f32_to_f16(x));
}

uint16_t attn_bits_of(fsa_dtype dt, float x) { return dt == FSA_DTYPE_BF16 ? fsa_f32_to_bf16(x) : fsa_f32_to_f16(x); }
float attn_float_of(fsa_dtype dt, uint16_t x) { return dt == FSA_DTYPE_BF16 ? fsa_bf16_to_f32(x) : fsa_f16_to_f32(x); }

/* Junk that the kernels must ignore or treat as documented. */
static void add_junk(problem *p, const attn_case *c, fsa_rng *rng)
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

/* Forward reference rows in threads: o [T, Hq, Dv of rp]; lse [Hq, T] and empty [Hq, T] may be NULL. */
typedef struct ref_job {
    const fsa_ref_problem *rp;
    double *o, *lse;
    int *empty;
    int first, step;
} ref_job;

static void *ref_worker(void *arg)
{
    ref_job *j = arg;
    const int T = j->rp->total_tokens, hq = j->rp->num_q_heads, dv = fsa_ref_value_dim(j->rp);
    for (int row = j->first; row < hq * T; row += j->step) {
        int qh = row / T, t = row % T;
        double lse;
        fsa_ref_forward_row(j->rp, qh, t, j->o + ((size_t)t * hq + qh) * dv, &lse);
        if (j->lse) j->lse[(size_t)qh * T + t] = lse;
        if (j->empty) j->empty[(size_t)qh * T + t] = isinf(lse) && lse < 0;
    }
    return NULL;
}

static void forward_rows(const fsa_ref_problem *rp, double *o, double *lse, int *empty)
{
    enum { MAX_THREADS = 32 };
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
    pthread_t th[MAX_THREADS];
    ref_job jobs[MAX_THREADS];
    for (int i = 0; i < nt; i++) {
        jobs[i] = (ref_job){rp, o, lse, empty, i, nt};
        assert_int_equal(pthread_create(&th[i], NULL, ref_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
}

fsa_ref_problem problem_ref(const problem *p, const attn_case *c)
{
    fsa_ref_problem rp = {p->T, p->B, p->cu, c->hq, c->hkv, c->d, c->bk, c->k, p->scale,
                          p->q, p->k, p->v, p->topk, p->topk_hs, p->topk_ts, p->Dv};
    return rp;
}

static void reference(problem *p, const attn_case *c)
{
    fsa_ref_problem rp = problem_ref(p, c);
    forward_rows(&rp, p->o_ref, p->lse_ref, p->empty_row);
}

void attn_grads_given_o(attn_grads_given *out, const problem *p, const attn_case *c, const float *dout,
                        const float *o_used)
{
    const fsa_ref_problem rp = problem_ref(p, c);
    out->dq = malloc((size_t)p->T * c->hq * c->d * sizeof(double));
    out->dk = malloc((size_t)p->T * c->hkv * c->d * sizeof(double));
    double *dv = malloc((size_t)p->T * c->hkv * p->Dv * sizeof(double));
    assert_true(out->dq && out->dk && dv);
    fsa_ref_grad_terms_alloc(&out->terms, (size_t)p->T * c->hq, (size_t)p->T * c->hkv);
    fsa_ref_backward_terms(&rp, dout, o_used, out->dq, out->dk, dv, &out->terms);
    free(dv);
}

void attn_grads_given_free(attn_grads_given *g)
{
    free(g->dq);
    free(g->dk);
    fsa_ref_grad_terms_free(&g->terms);
    g->dq = g->dk = NULL;
}

void problem_make(problem *p, const attn_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    fsa_rng rng = {seed};
    p->B = c->nseq;
    p->G = attn_group_of(c);
    p->cu[0] = 0;
    for (int b = 0; b < c->nseq; b++) p->cu[b + 1] = p->cu[b] + c->lens[b];
    p->T = p->cu[c->nseq];
    p->Dv = attn_value_dim(c);
    const size_t nq = (size_t)p->T * c->hq * c->d, nkv = (size_t)p->T * c->hkv * c->d;
    const size_t nv = (size_t)p->T * c->hkv * p->Dv, no = (size_t)p->T * c->hq * p->Dv;
    p->q = malloc(nq * sizeof(float));
    p->k = malloc(nkv * sizeof(float));
    p->v = malloc(nv * sizeof(float));
    p->topk = malloc((size_t)c->hkv * p->T * c->k * sizeof(int32_t));
    p->o_ref = malloc(no * sizeof(double));
    p->lse_ref = malloc((size_t)c->hq * p->T * sizeof(double));
    p->empty_row = malloc((size_t)c->hq * p->T * sizeof(int));
    assert_true(p->q && p->k && p->v && p->topk && p->o_ref && p->lse_ref && p->empty_row);
    for (size_t i = 0; i < nq; i++) p->q[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    for (size_t i = 0; i < nkv; i++) p->k[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    for (size_t i = 0; i < nv; i++) p->v[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    p->scale = c->scale > 0 ? (double)c->scale : 1.0 / sqrt((double)c->d);
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
                attn_round_to(c->dtype, (float)(1e4 / p->scale * p->q[(size_t)t * c->hq * c->d + d] / qq));
    }
    /* Device layouts: padded strides when asked, to prove strides are honoured. */
    const int pad = c->strided ? 8 : 0;
    p->q_hs = c->d + pad;
    p->q_ts = (int64_t)c->hq * p->q_hs + pad;
    p->kv_hs = c->d + 2 * pad;
    p->kv_ts = (int64_t)c->hkv * p->kv_hs + pad;
    p->v_hs = p->Dv + 2 * pad;
    p->v_ts = (int64_t)c->hkv * p->v_hs + pad;
    p->o_hs = p->Dv + pad;
    p->o_ts = (int64_t)c->hq * p->o_hs + 3 * pad;
    reference(p, c);
}

void problem_free(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->topk);
    free(p->o_ref);
    free(p->lse_ref);
    free(p->empty_row);
}

/* Logical [T, H, D] floats into a strided device image (token-major with padding, or head-major: the image
 * reaches the last element either way). */
uint64_t upload_strided(const float *src, int T, int H, int D, int64_t ts, int64_t hs, fsa_dtype dt)
{
    /* No tokens (a compressed tensor of sequences shorter than the kernel): an image of 0 elements. */
    const size_t last = T == 0 ? 0 : (size_t)(T - 1) * ts + (size_t)(H - 1) * hs + D,
                 n = last > (size_t)T * ts ? last : (size_t)T * ts;
    uint16_t *img = malloc(n * 2 + 2);
    assert_non_null(img);
    memset(img, 0xff, n * 2 + 2); /* gaps hold NaN: a read of a gap poisons the output */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) img[t * ts + h * hs + d] = attn_bits_of(dt, src[((size_t)t * H + h) * D + d]);
    uint64_t dev = fsa_test_dalloc(n * 2 + 2);
    fsa_test_h2d(dev, img, n * 2 + 2);
    free(img);
    return dev;
}

/* ------------------------------------------------------------ device run */



void device_make(device_problem *dp, const problem *p, const attn_case *c, const fsa_plan *plan)
{
    memset(dp, 0, sizeof *dp);
    dp->q = upload_strided(p->q, p->T, c->hq, c->d, p->q_ts, p->q_hs, c->dtype);
    dp->k = upload_strided(p->k, p->T, c->hkv, c->d, p->kv_ts, p->kv_hs, c->dtype);
    dp->v = upload_strided(p->v, p->T, c->hkv, p->Dv, p->v_ts, p->v_hs, c->dtype);
    dp->o_bytes = (size_t)p->T * p->o_ts * 2;
    dp->o = fsa_test_dalloc(dp->o_bytes);
    fsa_test_dfill(dp->o, 0xff, dp->o_bytes); /* outputs poisoned: a call that reads o before a forward wrote it sees NaN */
    size_t topk_bytes = (size_t)c->hkv * p->T * c->k * 4;
    dp->topk = fsa_test_dalloc(topk_bytes);
    fsa_test_h2d(dp->topk, p->topk, topk_bytes);
    dp->cu = fsa_test_dalloc((size_t)(p->B + 1) * 4);
    fsa_test_h2d(dp->cu, p->cu, (size_t)(p->B + 1) * 4);
    dp->lse = fsa_test_dalloc((size_t)c->hq * p->T * 4);
    fsa_test_dfill(dp->lse, 0xff, (size_t)c->hq * p->T * 4);
    assert_int_equal(fsa_plan_workspace_size(&dp->ws_bytes, plan, p->T, p->B), FSA_STATUS_OK);
    if (c->ws_limit) assert_true(dp->ws_bytes <= c->ws_limit);
    if (dp->ws_bytes) dp->ws = fsa_test_dalloc(dp->ws_bytes);
}

void device_free(device_problem *dp)
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

fsa_fwd_args fwd_args_of(const device_problem *dp, const problem *p)
{
    fsa_fwd_args a = FSA_FWD_ARGS_INIT;
    a.total_tokens = p->T;
    a.batch = p->B;
    a.q = (fsa_tensor){dp->q, p->q_ts, p->q_hs};
    a.k = (fsa_tensor){dp->k, p->kv_ts, p->kv_hs};
    a.v = (fsa_tensor){dp->v, p->v_ts, p->v_hs};
    a.o = (fsa_tensor){dp->o, p->o_ts, p->o_hs};
    a.topk = (fsa_tensor){dp->topk, p->topk_ts, p->topk_hs};
    a.cu_seqlens = dp->cu;
    a.lse = dp->lse;
    a.workspace = dp->ws;
    a.workspace_bytes = dp->ws_bytes;
    return a;
}

void poison_fwd(const device_problem *dp, const problem *p, const attn_case *c)
{
    fsa_test_dfill(dp->o, 0xff, dp->o_bytes);
    fsa_test_dfill(dp->lse, 0xff, (size_t)c->hq * p->T * 4);
    if (dp->ws) fsa_test_dfill(dp->ws, 0xff, dp->ws_bytes);
}



void download_strided(float *dst, uint16_t *img, uint64_t dev, int T, int H, int D, int64_t ts, int64_t hs,
                      fsa_dtype dt)
{
    size_t bytes = (size_t)T * ts * 2;
    uint16_t *raw = img ? img : malloc(bytes);
    assert_non_null(raw);
    fsa_test_d2h(raw, dev, bytes);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) dst[((size_t)t * H + h) * D + d] = attn_float_of(dt, raw[t * ts + h * hs + d]);
    if (!img) free(raw);
}

void download_fwd(outputs *out, const device_problem *dp, const problem *p, const attn_case *c)
{
    out->o_img = malloc(dp->o_bytes);
    out->o = malloc((size_t)p->T * c->hq * p->Dv * sizeof(float));
    out->lse = malloc((size_t)c->hq * p->T * sizeof(float));
    assert_true(out->o_img && out->o && out->lse);
    download_strided(out->o, out->o_img, dp->o, p->T, c->hq, p->Dv, p->o_ts, p->o_hs, c->dtype);
    fsa_test_d2h(out->lse, dp->lse, (size_t)c->hq * p->T * 4);
}

void outputs_free(outputs *o)
{
    free(o->o_img);
    free(o->o);
    free(o->lse);
}

static attn_row_err row_error(const float *a, const double *b, int T, int H, int len, double abs_floor)
{
    size_t row = 0;
    attn_row_err r;
    r.err = fsa_row_rel_error_floored(a, b, (size_t)T * H, (size_t)len, ATTN_ROW_FLOOR, abs_floor, &row);
    r.t = (int)(row / (size_t)H);
    r.h = (int)(row % (size_t)H);
    return r;
}

attn_row_err attn_row_error(const float *a, const double *b, int T, int H, int len)
{
    return row_error(a, b, T, H, len, 0.0);
}

attn_row_err attn_grad_row_error(const float *a, const double *b, int T, int H, int len)
{
    return row_error(a, b, T, H, len, 1e-3 * sqrt((double)len));
}

attn_row_err attn_grad_row_error_terms(const float *a, const double *b, const double *terms, int T, int H, int len)
{
    size_t row = 0;
    attn_row_err r;
    r.err = fsa_row_rel_error_terms(a, b, terms, (size_t)T * H, (size_t)len, ATTN_ROW_FLOOR, 1e-3 * sqrt((double)len),
                                    &row);
    r.t = (int)(row / (size_t)H);
    r.h = (int)(row % (size_t)H);
    return r;
}

double attn_lse_error(const float *lse, const double *ref, size_t n, size_t *worst)
{
    double err = 0.0;
    if (worst) *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double r = ref[i], g = lse[i];
        double e;
        if (isinf(r) && r < 0)
            e = isinf(g) && g < 0 ? 0.0 : INFINITY;
        else
            e = isfinite(g) ? fabs(g - r) / (2e-3 + 1e-5 * fabs(r)) : INFINITY;
        if (e > err) {
            err = e;
            if (worst) *worst = i;
        }
    }
    return err;
}


typedef struct plan_job {
    fsa_plan **plans;
    fsa_context *ctx;
    const attn_case *cases;
    size_t n, next;
    int backward, failed;
    pthread_mutex_t lock;
} plan_job;

static void *plan_worker(void *arg)
{
    plan_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        size_t i = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= j->n) return NULL;
        fsa_selected_attention_desc d = attn_desc_of(&j->cases[i], j->backward);
        if (fsa_plan_create(&j->plans[i], j->ctx, &d) != FSA_STATUS_OK) {
            fprintf(stderr, "plan %s: %s\n", j->cases[i].name, fsa_last_error());
            pthread_mutex_lock(&j->lock);
            j->failed = 1;
            pthread_mutex_unlock(&j->lock);
        }
    }
}

int attn_create_plans(fsa_plan **plans, fsa_context *ctx, const attn_case *cases, size_t n, int backward)
{
    plan_job job = {plans, ctx, cases, n, 0, backward, 0, PTHREAD_MUTEX_INITIALIZER};
    enum { THREADS = 8 };
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, plan_worker, &job);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    return job.failed ? -1 : 0;
}

/* Relative 2-norm error with a floor on the reference norm: a gradient that is
 * exactly zero in float64 (a query whose only key is itself has dS = 0) comes
 * out as rounding noise in fp32, which only an absolute bound can judge. */
static double grad_norm_ratio(double num, double den, size_t n)
{
    return sqrt(num) / fmax(sqrt(den), 1e-3 * sqrt((double)n));
}

double attn_grad_error(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += b[i] * b[i];
    }
    return grad_norm_ratio(num, den, n);
}

double attn_grad_gap(const double *given, const double *exact, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (given[i] - exact[i]) * (given[i] - exact[i]);
        den += exact[i] * exact[i];
    }
    return grad_norm_ratio(num, den, n);
}

void attn_check_o_and_lse(const outputs *out, const problem *p, int hq, double tol, const char *what)
{
    const double err = fsa_rel_error(out->o, p->o_ref, (size_t)p->T * hq * p->Dv);
    const attn_row_err row = attn_row_error(out->o, p->o_ref, p->T, hq, p->Dv);
    size_t lse_row = 0;
    const double lse = attn_lse_error(out->lse, p->lse_ref, (size_t)hq * p->T, &lse_row);
    print_message("  %-28s o rel err %.3e (tol %.0e), worst row %.3e (t %d h %d; tol %.0e), lse err/tol %.3f "
                  "(h %zu t %zu)\n",
                  what, err, tol, row.err, row.t, row.h, ATTN_ROW_TOL * tol, lse, lse_row / (size_t)p->T,
                  lse_row % (size_t)p->T);
    assert_true(err < tol);
    assert_true(row.err < ATTN_ROW_TOL * tol);
    assert_true(lse < 1.0);
}

/* ------------------------------------------------------------ random cases */

/* Keys all query rows visit in the float64 reference over a case's inputs, times the row width (Dk + Dv): its
 * cost. The fixed cases' median is about 7e7 (forward) and 1.3e8 (backward), their largest 2.6e10 and 3.8e9; a
 * common drawn case stays under RANDOM_REFERENCE_BUDGET (median about 9e7), so its reference takes about as long as a
 * fixed case's. The long-sequence draws (three in twenty) get RANDOM_LONG_REFERENCE_BUDGET: a list past 2048 entries
 * with rows of 33 blocks or more costs about 1e6 keys per query head and column at the least. Measured on two x86
 * cores, such a case at the budget costs the forward test's CPU side about 1 s and the backward's (whose two
 * fsa_ref_backward and two attn_grads_given_o run on one thread) 9 to 16 s, where the fixed backward cases take
 * 0.85 s (median) to 29 s (bf16_d128_g4_long_chains, 3.8e9). */
#define RANDOM_REFERENCE_BUDGET 4e8
#define RANDOM_LONG_REFERENCE_BUDGET 1.6e9

static double reference_cost(const attn_case *c)
{
    const double span = (double)c->k * c->bk; /* the most keys a query can see */
    double keys = 0;
    for (int b = 0; b < c->nseq; b++)
        for (int i = 0; i < c->lens[b]; i++) keys += i + 1 < span ? i + 1 : span;
    return keys * c->hq * (c->d + attn_value_dim(c));
}

#define RANDOM_TOP_K_MAX FSA_MAX_TOP_K /* validate_desc: top_k 1..FSA_MAX_TOP_K */
#define RANDOM_GROUP_MAX 128    /* plan.c, validate_desc: at most 128 query heads per KV head */
#define RANDOM_FSA_GROUP_MAX FSA_FWD_MAX_GROUP /* the FSA forward's tiles hold a token's heads (plan.c) */
/* Long draws: rows of more valid blocks than a few hundred tokens hold, and block 0's list (every token selects it)
 * longer than SORT_SMALL (2048 entries, templates/sel_index.cu), in many work items. */
#define RANDOM_LONG_TOKENS_MIN 2049
#define RANDOM_LONG_TOKENS_MAX 8192
#define RANDOM_LONG_TOP_K_MIN 33
/* Very long draws: a chunk past FSA_SORT_RANK_TOKENS (65536, templates/fsa_layout.cuh), whose lists the backward's
 * sort (fsa_sel_sort) takes in bitmap windows of 16384 tokens when past SORT_SMALL (block 0's) and in shared memory
 * when not, where shorter chunks sort every list by rank; and blocks past the 1024 shared-memory counters (BINS) of
 * the index's CTAs, counted in global memory. */
#define RANDOM_VERY_LONG_TOKENS_MIN (FSA_SORT_RANK_TOKENS + 1)
#define RANDOM_VERY_LONG_TOKENS_MAX 69632

/* What a draw reaches for: most draws are common ones, whose references are cheap; the others reach what those
 * cannot. */
typedef enum random_draw { DRAW_COMMON, DRAW_LARGE_GROUP, DRAW_LONG, DRAW_VERY_LONG } random_draw;

static random_draw random_draw_kind(fsa_rng *rng)
{
    const int r = fsa_rng_int(rng, 0, 19);
    return r < 3 ? DRAW_LARGE_GROUP : r < 5 ? DRAW_LONG : r < 6 ? DRAW_VERY_LONG : DRAW_COMMON;
}

static int random_head_dim(fsa_rng *rng)
{
    static const int usual[] = {32, 64, 96, 128, 192, 256};
    return fsa_rng_int(rng, 0, 9) < 6 ? usual[fsa_rng_int(rng, 0, 5)] : 16 * fsa_rng_int(rng, 1, 16);
}

/* Short sequences (1 to 3 tokens), lengths at a block's edges and a few hundred tokens. */
static int random_length(fsa_rng *rng, int bk, int at_least)
{
    const int kind = fsa_rng_int(rng, 0, 9);
    int len = kind < 2   ? fsa_rng_int(rng, 1, 3)
              : kind < 4 ? fsa_rng_int(rng, 1, 2) * bk + fsa_rng_int(rng, -1, 1)
                         : fsa_rng_int(rng, 4, 400);
    return len < at_least ? at_least : len;
}

/* A group past 16 up to the largest the algorithm takes, half the time at an edge of the kernels' tiles: 16 heads
 * of an NSA CTA (17, 33, 49), a backward tile of 32 rows (32, 33), the FSA forward's last group (64) and AUTO's
 * first without it (65), the largest (128). */
static int random_large_group(fsa_rng *rng, fsa_algorithm alg)
{
    static const int edges[] = {17, 31, 32, 33, 48, 49, 63, 64, 65, 96, 127, 128}; /* ascending */
    const int most = alg == FSA_ALGORITHM_FSA ? RANDOM_FSA_GROUP_MAX : RANDOM_GROUP_MAX;
    if (fsa_rng_int(rng, 0, 1)) return fsa_rng_int(rng, 17, most);
    int n_edges = 0;
    while (n_edges < (int)(sizeof edges / sizeof edges[0]) && edges[n_edges] <= most) n_edges++;
    return edges[fsa_rng_int(rng, 0, n_edges - 1)];
}

/* Brings a case's reference cost under its draw's budget. A long draw keeps what it is drawn for longest: its query
 * heads go first (the group halved, then one KV head), then its long sequence (lens[long_at]) shrinks by quarters
 * down to its draw's least length, then top-k down to RANDOM_LONG_TOP_K_MIN. At those floors the cost is at most
 * 2049 x 2050 / 2 + 2 x 400 x 401 / 2 keys times 512 columns (1.2e9), so the long sequence keeps its length. Other
 * draws (and, were the floors passed, long ones) halve the longest sequence down to `shortest` tokens: six
 * sequences of 4 tokens cost under 1e7 at Hq 256. */
static void fit_reference_budget(attn_case *c, random_draw draw, int long_at, int shortest)
{
    const int is_long = draw == DRAW_LONG || draw == DRAW_VERY_LONG;
    const double budget = is_long ? RANDOM_LONG_REFERENCE_BUDGET : RANDOM_REFERENCE_BUDGET;
    const int least = draw == DRAW_VERY_LONG ? RANDOM_VERY_LONG_TOKENS_MIN : RANDOM_LONG_TOKENS_MIN;
    while (reference_cost(c) > budget) {
        const int group = attn_group_of(c);
        if (is_long && group > 1) {
            c->hq = group / 2 * c->hkv;
        } else if (is_long && c->hkv > 1) {
            c->hkv = 1;
            c->hq = 1;
        } else if (is_long && c->lens[long_at] > least) {
            c->lens[long_at] = c->lens[long_at] / 4 * 3 > least ? c->lens[long_at] / 4 * 3 : least;
        } else if (is_long && c->k > RANDOM_LONG_TOP_K_MIN) {
            c->k = c->k - 8 > RANDOM_LONG_TOP_K_MIN ? c->k - 8 : RANDOM_LONG_TOP_K_MIN;
        } else {
            int longest = 0;
            for (int b = 1; b < c->nseq; b++)
                if (c->lens[b] > c->lens[longest]) longest = b;
            c->lens[longest] = c->lens[longest] / 2 > shortest ? c->lens[longest] / 2 : shortest;
        }
    }
}

/* Upper bounds on the workspace of the smallest chunk (one KV head, one token; plan_layout.c), which a cap below it
 * cannot shrink (the queries then return more than the cap, and device_make and bwd_make assert they do not), and
 * estimates of the whole call's (one chunk), which a cap below it cuts into chunks. Bytes. */
static double index_bytes(const attn_case *c, int T)
{
    return 6.0 * 4 * ((double)T / c->bk + c->nseq + 2) * c->hkv + 64 * 1024; /* counts, offsets, segments; padding */
}

static double fwd_smallest_chunk(const attn_case *c, int T)
{
    const double g = attn_group_of(c), dv = attn_value_dim(c);
    return c->k * g * (4 + 2 * dv) + 12.0 * c->k + index_bytes(c, T); /* partial rows and lse of one token */
}

static double fwd_one_chunk(const attn_case *c, int T)
{
    const double g = attn_group_of(c), dv = attn_value_dim(c), pairs = (double)c->hkv * T * c->k;
    return pairs * (4 + 4 * g + 2 * g * dv) + 8.0 * c->hkv * T;
}

static double bwd_smallest_chunk(const attn_case *c, int T)
{
    const double g = attn_group_of(c), dk = c->d, dkv = c->d + attn_value_dim(c);
    const double slices = c->bk > 128 ? c->bk / 128 : 1; /* the backward takes a block in slices of 128 keys */
    /* A work item's entries: a round of tiles' tokens, halved at most FSA_BWD_MAX_HALVINGS times; each item of a
     * split list writes a block's fp32 dK/dV partial. */
    const int least_item = fsa_bwd_item_entries(attn_group_of(c), FSA_BWD_MAX_HALVINGS);
    const double split_items = 2.0 * ((c->k + least_item - 1) / least_item);
    /* dq rows and lists of the token's pairs, delta, the partials and the fp32 dK/dV accumulator over every token */
    return c->k * (8 + slices * g * dk * 2) + 4 * g + split_items * c->bk * dkv * 4 + (double)T * dkv * 4 +
           index_bytes(c, T);
}

static double bwd_one_chunk(const attn_case *c, int T)
{
    const double g = attn_group_of(c), pairs = (double)c->hkv * T * c->k;
    const double slices = c->bk > 128 ? c->bk / 128 : 1;
    const double dq_rows = c->alg == FSA_ALGORITHM_NSA ? 0 : pairs * slices * g * c->d * 2; /* the FSA order's */
    return dq_rows + pairs * 8 + 8.0 * c->hkv * T;
}

/* A cap between twice the smallest chunk's bound and half the whole call's estimate (log-uniform), or 0 where that
 * range is empty. */
static uint64_t random_workspace_limit(fsa_rng *rng, const attn_case *c, int backward)
{
    int T = 0;
    for (int b = 0; b < c->nseq; b++) T += c->lens[b];
    double lo = 2 * fwd_smallest_chunk(c, T), hi = c->alg == FSA_ALGORITHM_NSA ? 0 : fwd_one_chunk(c, T) / 2;
    if (backward) {
        lo += 2 * bwd_smallest_chunk(c, T); /* the test's forward runs under the same cap */
        hi = fmax(hi, bwd_one_chunk(c, T) / 2);
    }
    if (!(hi > lo)) return 0;
    const double cap = lo * pow(hi / lo, fsa_rng_uniform(rng));
    return ((uint64_t)cap + 4095) / 4096 * 4096;
}

static const char *dtype_name(fsa_dtype dt) { return dt == FSA_DTYPE_BF16 ? "bf16" : "f16"; }
static const char *algorithm_name(fsa_algorithm a)
{
    return a == FSA_ALGORITHM_FSA ? "fsa" : a == FSA_ALGORITHM_NSA ? "nsa" : "auto";
}

/* The rules a drawn case follows (a plan the library refuses is a test failure):
 * - dtype bf16 or f16 (plan.c, validate_desc);
 * - Dk and Dv multiples of 16 from 16 to 256 (docs/semantics.md, Inputs; validate_desc), Dv = Dk (dv 0) half the
 *   time, 96 and 192 among the usual dims; with backward, both multiples of 32 where Dk + Dv is over 320
 *   (semantics.md, Backward; plan.c, plan_backward);
 * - blocks of 16, 32, 64, 128 or 256 keys; top-k 1 to 64 (validate_desc; FSA_MAX_TOP_K);
 * - a forced FSA order with blocks of 256 keys only up to Dk + Dv = 272: the mma.sync forward main kernel's shared
 *   memory (fsa_fwd_smem_bytes) passes the 227 KB of an sm_90a block from 288 on (plan.c refuses "the FSA path does
 *   not fit"); AUTO and NSA plans take any pair;
 * - group sizes 1 to 16 (odd ones included) with 1 to 4 KV heads, but in three draws of twenty 17 up to 128
 *   (validate_desc), up to 64 with a forced FSA order (FSA_FWD_MAX_GROUP: plan.c refuses "the FSA path does not
 *   fit"; AUTO plans past it run the NSA-order forward), with 1 or 2 KV heads: Hq up to 256. The backward takes
 *   every group its forward does: its main kernel's shared memory shrinks as the group grows (fsa_bwd_smem_bytes);
 * - a workspace cap (a quarter of the cases where a cap can force chunks) at least twice a bound on the smallest
 *   chunk's workspace (semantics.md: a cap below one KV head and one token is answered with that chunk's size);
 * - a scale (a quarter of the cases) of 0.25 to 3 times the default 1 / sqrt(Dk);
 * - big_logit with one sequence of at least 4 tokens, no junk and top-k 2 or more: the big key is packed key 3,
 *   in block 0, which fsa_ref_make_selection gives the last token; with f16 only at the default scale (as
 *   test_window.c's draws): the key, q x 1e4 / (scale |q|^2), can pass fp16's 65504 at a quarter of it and Dk 16;
 * - 1 to 6 sequences, of 1 to 3 tokens, at a block's edges or up to 400 tokens, their reference cost under
 *   RANDOM_REFERENCE_BUDGET (fit_reference_budget);
 * - in two draws of twenty, one sequence of 2049 to 8192 tokens (beside up to two of those) with blocks of 16 to
 *   64 keys, top-k 33 to 64, 1 or 2 KV heads and groups 1 to 4: rows of up to 64 valid blocks and block 0's list
 *   of every token of the sequence; in one of twenty, one of 65537 to 69632 tokens with blocks of 16 keys, top-k 2
 *   or 3, Dk and Dv 16 to 64, one KV head and groups 1 or 2: the backward's sort by windows and the index's global
 *   counters (RANDOM_VERY_LONG_TOKENS_MIN; no cap is drawn for the backward's, whose smallest chunk carries the fp32
 *   dK/dV of every token). Both under RANDOM_LONG_REFERENCE_BUDGET: fit_reference_budget lowers their query heads
 *   first, then the long sequence's length, then top-k. */
void attn_random_case(fsa_rng *rng, attn_case *out, char *name_buf, size_t n, int backward)
{
    attn_case c;
    memset(&c, 0, sizeof c);
    const random_draw draw = random_draw_kind(rng);
    const int is_long = draw == DRAW_LONG || draw == DRAW_VERY_LONG;
    c.dtype = fsa_rng_int(rng, 0, 1) ? FSA_DTYPE_BF16 : FSA_DTYPE_F16;
    int dv;
    if (draw == DRAW_VERY_LONG) { /* narrow heads keep the reference of 65537 tokens cheap */
        c.d = 16 * fsa_rng_int(rng, 1, 4);
        dv = fsa_rng_int(rng, 0, 1) ? 16 * fsa_rng_int(rng, 1, 4) : c.d;
    } else {
        c.d = random_head_dim(rng);
        dv = fsa_rng_int(rng, 0, 1) ? random_head_dim(rng) : c.d;
    }
    if (backward && c.d + dv > 320) {
        if (c.d % 32) c.d += 16; /* 16 x an odd number under 256: the next multiple of 32 is at most 256 */
        if (dv % 32) dv += 16;
    }
    c.dv = dv == c.d ? 0 : dv;
    c.bk = draw == DRAW_VERY_LONG ? 16 : 16 << fsa_rng_int(rng, 0, draw == DRAW_LONG ? 2 : 4);
    static const fsa_algorithm algs[] = {FSA_ALGORITHM_AUTO, FSA_ALGORITHM_FSA, FSA_ALGORITHM_NSA};
    c.alg = algs[fsa_rng_int(rng, 0, 2)];
    if (c.alg == FSA_ALGORITHM_FSA && c.bk == 256 && c.d + attn_value_dim(&c) > 272)
        c.alg = fsa_rng_int(rng, 0, 1) ? FSA_ALGORITHM_AUTO : FSA_ALGORITHM_NSA;
    int group;
    switch (draw) {
    case DRAW_LARGE_GROUP:
        group = random_large_group(rng, c.alg);
        c.hkv = fsa_rng_int(rng, 1, 2);
        break;
    case DRAW_LONG:
        group = fsa_rng_int(rng, 1, 4);
        c.hkv = fsa_rng_int(rng, 1, 2);
        break;
    case DRAW_VERY_LONG:
        group = fsa_rng_int(rng, 1, 2);
        c.hkv = 1;
        break;
    default:
        group = fsa_rng_int(rng, 1, 16);
        c.hkv = fsa_rng_int(rng, 1, 4);
    }
    c.hq = group * c.hkv;
    if (draw == DRAW_LONG) {
        c.k = fsa_rng_int(rng, RANDOM_LONG_TOP_K_MIN, RANDOM_TOP_K_MAX);
    } else if (draw == DRAW_VERY_LONG) {
        c.k = fsa_rng_int(rng, 2, 3);
    } else {
        const int k_kind = fsa_rng_int(rng, 0, 9);
        c.k = k_kind < 5   ? fsa_rng_int(rng, 1, 8)
              : k_kind < 8 ? fsa_rng_int(rng, 9, 24)
                           : fsa_rng_int(rng, 25, RANDOM_TOP_K_MAX);
    }
    if (fsa_rng_int(rng, 0, 3) == 0) {
        /* 0.25 to 3 times the default 1 / sqrt(Dk), to three digits so that the name gives the same float */
        static const double factors[] = {0.25, 0.5, 1.5, 2.0, 3.0};
        char digits[32];
        snprintf(digits, sizeof digits, "%.3g", factors[fsa_rng_int(rng, 0, 4)] / sqrt((double)c.d));
        c.scale = strtof(digits, NULL);
    }
    c.big_logit = (c.dtype == FSA_DTYPE_BF16 || c.scale == 0.0f) && fsa_rng_int(rng, 0, 7) == 0;
    int long_at = -1;
    if (c.big_logit) {
        c.nseq = 1;
        if (c.k < 2) c.k = 2;
    } else {
        c.nseq = is_long ? fsa_rng_int(rng, 1, 3) : fsa_rng_int(rng, 1, 6);
        c.junk = fsa_rng_int(rng, 0, 3) != 0;
    }
    for (int b = 0; b < c.nseq; b++) c.lens[b] = random_length(rng, c.bk, c.big_logit ? 4 : 1);
    if (is_long) {
        long_at = fsa_rng_int(rng, 0, c.nseq - 1);
        c.lens[long_at] = draw == DRAW_LONG
                              ? fsa_rng_int(rng, RANDOM_LONG_TOKENS_MIN, RANDOM_LONG_TOKENS_MAX)
                              : fsa_rng_int(rng, RANDOM_VERY_LONG_TOKENS_MIN, RANDOM_VERY_LONG_TOKENS_MAX);
    }
    fit_reference_budget(&c, draw, long_at, c.big_logit ? 4 : 1);
    c.layout_tkh = fsa_rng_int(rng, 0, 1);
    c.strided = fsa_rng_int(rng, 0, 1);
    if (fsa_rng_int(rng, 0, 3) == 0) c.ws_limit = random_workspace_limit(rng, &c, backward);

    char lens[64];
    size_t at = 0;
    for (int b = 0; b < c.nseq; b++)
        at += (size_t)snprintf(lens + at, sizeof lens - at, "%s%d", b ? "." : "", c.lens[b]);
    char ws[32] = "", scale[32] = "";
    if (c.ws_limit) snprintf(ws, sizeof ws, "_ws%llu", (unsigned long long)c.ws_limit);
    if (c.scale > 0) snprintf(scale, sizeof scale, "_scale%g", (double)c.scale);
    const int len = snprintf(name_buf, n, "rand_%s_dk%d_dv%d_hq%d_hkv%d_bk%d_k%d_t%s_%s%s_%s%s%s%s%s",
                             dtype_name(c.dtype), c.d, attn_value_dim(&c), c.hq, c.hkv, c.bk, c.k, lens,
                             c.layout_tkh ? "tkh" : "htk", c.strided ? "_strided" : "", algorithm_name(c.alg), ws,
                             c.junk ? "_junk" : "", c.big_logit ? "_biglogit" : "", scale);
    assert_true(len > 0 && (size_t)len < n);
    c.name = name_buf;
    *out = c;
}

void attn_print_random_case(const attn_case *c, int index, uint64_t base)
{
    const uint64_t seed = fsa_test_random_case_seed(base, index);
    char lens[64];
    size_t at = 0;
    for (int b = 0; b < c->nseq; b++)
        at += (size_t)snprintf(lens + at, sizeof lens - at, "%s%d", b ? " " : "", c->lens[b]);
    print_message("random case %d (FSA_TEST_SEED=0x%llx; alone: FSA_TEST_SEED=0x%llx FSA_TEST_RANDOM=1; case seed "
                  "0x%llx): %s: dtype %s, Dk %d, Dv %d, Hq %d, Hkv %d (group %d), "
                  "block %d, top-k %d, lengths [%s], top-k layout %s, strided %d, algorithm %s, workspace limit %llu, "
                  "junk %d, big logit %d, scale %.9g%s\n",
                  index, (unsigned long long)base, (unsigned long long)fsa_test_random_rerun_seed(base, index),
                  (unsigned long long)seed, c->name, dtype_name(c->dtype), c->d,
                  attn_value_dim(c), c->hq, c->hkv, attn_group_of(c), c->bk, c->k, lens,
                  c->layout_tkh ? "[T, Hkv, K]" : "[Hkv, T, K]", c->strided, algorithm_name(c->alg),
                  (unsigned long long)c->ws_limit, c->junk, c->big_logit, (double)c->scale,
                  c->scale > 0 ? "" : " (default 1/sqrt(Dk))");
}

void attn_run_random_cases(fsa_context *ctx, int backward, uint64_t default_seed,
                           void (*run)(const attn_case *c, fsa_plan *plan, uint64_t seed))
{
    const struct {
        int count;
        uint64_t seed;
    } s = {fsa_test_random_count(-1), fsa_test_random_seed(default_seed)};
    print_message("  %d random cases from FSA_TEST_SEED=0x%llx (FSA_TEST_RANDOM)\n", s.count,
                  (unsigned long long)s.seed);
    if (s.count == 0) return;
    attn_case *cases = calloc((size_t)s.count, sizeof *cases);
    char(*names)[ATTN_RANDOM_NAME_MAX] = calloc((size_t)s.count, sizeof *names);
    fsa_plan **plans = calloc((size_t)s.count, sizeof *plans);
    assert_true(cases && names && plans);
    for (int i = 0; i < s.count; i++) {
        fsa_rng rng = {fsa_test_random_case_seed(s.seed, i)};
        attn_random_case(&rng, &cases[i], names[i], sizeof names[i], backward);
    }
    if (attn_create_plans(plans, ctx, cases, (size_t)s.count, backward) != 0) {
        for (int i = 0; i < s.count; i++) {
            if (plans[i]) continue;
            attn_print_random_case(&cases[i], i, s.seed);
            /* Again on this thread, for its error record (the worker printed it too). The draw keeps to what
             * fits sm_90a's shared memory; a device with less (sm_80) may refuse a forced order there, which
             * the library reports as unsupported: that case then runs under AUTO, said so here. */
            fsa_selected_attention_desc d = attn_desc_of(&cases[i], backward);
            fsa_status st = fsa_plan_create(&plans[i], ctx, &d);
            if (st == FSA_STATUS_UNSUPPORTED && cases[i].alg != A_AUTO) {
                print_message("  random case %d: %s; it runs with algorithm AUTO\n", i, fsa_last_error());
                cases[i].alg = A_AUTO;
                d = attn_desc_of(&cases[i], backward);
                st = fsa_plan_create(&plans[i], ctx, &d);
            }
            if (st != FSA_STATUS_OK)
                fail_msg("the plan of random case %d (%s) failed: %s", i, cases[i].name, fsa_last_error());
        }
    }
    for (int i = 0; i < s.count; i++) {
        attn_print_random_case(&cases[i], i, s.seed);
        run(&cases[i], plans[i], fsa_test_random_case_seed(s.seed, i));
    }
    for (int i = 0; i < s.count; i++) fsa_plan_destroy(plans[i]);
    free(plans);
    free(names);
    free(cases);
}
