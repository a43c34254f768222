/* fsa-bench's selected-attention rows (bench_selected.h).
 *
 * Protocol (docs/benchmarks.md): random standard-normal q, k, v; per KV head and
 * token, block 0 and the own block c and c-1 always selected (as many as top-k
 * holds), the other slots distinct random blocks of 0..c, rows sorted, tail -1
 * (bench_selection_row); CUDA events around
 * each call; 25 ms warm-up; median of repeats covering at least 100 ms; the
 * whole pipeline inside the timed region, plan creation outside; inputs
 * rotated between several copies when they would fit in L2. Every row runs
 * both paths and compares their outputs. */
#include "bench_selected.h"

#include "bench_check.h"
#include "bench_inputs.h"
#include "bench_json.h"
#include "tool_args.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CU(call) BENCH_CU("", call)

#define FSA(call) BENCH_FSA("", call)

typedef struct sel_job {
    int32_t *topk;
    int T, K, BK, h0, h1;
    uint64_t seed;
} sel_job;

/* Per KV head, each token's row (bench_selection_row); the state runs on
 * through the head's tokens. */
static void *gen_selection(void *arg)
{
    const sel_job *j = arg;
    for (int h = j->h0; h < j->h1; h++) {
        uint64_t s = j->seed + (uint64_t)h * 7919u;
        for (int t = 0; t < j->T; t++)
            bench_selection_row(j->topk + ((size_t)h * j->T + t) * j->K, j->K, t / j->BK, &s);
    }
    return NULL;
}

static void fill_selection(int32_t *topk, int hkv, int T, int K, int BK, uint64_t seed)
{
    int nt = bench_threads();
    if (nt > hkv) nt = hkv;
    pthread_t th[64];
    sel_job jobs[64];
    for (int i = 0; i < nt; i++) {
        jobs[i] = (sel_job){topk, T, K, BK, hkv * i / nt, hkv * (i + 1) / nt, seed};
        pthread_create(&th[i], NULL, gen_selection, &jobs[i]);
    }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
}

/* ------------------------------------------------------------ timing */

typedef struct input_set {
    CUdeviceptr q, k, v, topk;
} input_set;

/* One timed call: the forward, the backward, or both, on input set `set`. */
typedef void (*call_fn)(void *user, int set);

/* Median event time of one call, rotating over the input sets. */
static double time_call(call_fn call, void *user, int n_sets, const options *o, int *reps_out)
{
    CUevent e0, e1;
    CU(cu.EventCreate(&e0, CU_EVENT_DEFAULT));
    CU(cu.EventCreate(&e1, CU_EVENT_DEFAULT));
    int rep = 0;
    double start = bench_now_ms();
    do { /* warm-up */
        call(user, rep++ % n_sets);
        CU(cu.StreamSynchronize(NULL));
    } while (bench_now_ms() - start < o->warmup_ms);
    enum { MAX_REPS = 4096 };
    static double times[MAX_REPS];
    int n = 0;
    double total = 0;
    while (n < MAX_REPS && (total < o->min_ms || n < 10)) {
        const int set = rep++ % n_sets;
        CU(cu.EventRecord(e0, NULL));
        call(user, set);
        CU(cu.EventRecord(e1, NULL));
        CU(cu.EventSynchronize(e1));
        float ms;
        CU(cu.EventElapsedTime(&ms, e0, e1));
        times[n++] = ms;
        total += ms;
        if (ms > 400.0 && n >= 3) break; /* very slow rows: three repeats are enough */
    }
    const double median = bench_median(times, n);
    CU(cu.EventDestroy(e0));
    CU(cu.EventDestroy(e1));
    *reps_out = n;
    return median;
}

typedef struct fwd_call {
    const fsa_plan *plan;
    fsa_fwd_args *args;
    const input_set *sets;
} fwd_call;

static void call_forward(void *user, int set)
{
    fwd_call *c = user;
    const input_set *s = &c->sets[set];
    c->args->q.ptr = s->q, c->args->k.ptr = s->k, c->args->v.ptr = s->v, c->args->topk.ptr = s->topk;
    FSA(fsa_selected_attention_fwd(c->plan, c->args, NULL));
}

typedef struct bwd_call {
    const fsa_plan *plan;
    fsa_fwd_args *fwd;
    fsa_bwd_args *bwd;
    const input_set *sets;
    int with_forward;
} bwd_call;

static void call_backward(void *user, int set)
{
    bwd_call *c = user;
    const input_set *s = &c->sets[set];
    if (c->with_forward) {
        c->fwd->q.ptr = s->q, c->fwd->k.ptr = s->k, c->fwd->v.ptr = s->v, c->fwd->topk.ptr = s->topk;
        FSA(fsa_selected_attention_fwd(c->plan, c->fwd, NULL));
    }
    c->bwd->q.ptr = s->q, c->bwd->k.ptr = s->k, c->bwd->v.ptr = s->v, c->bwd->topk.ptr = s->topk;
    FSA(fsa_selected_attention_bwd(c->plan, c->bwd, NULL));
}

static double rel_diff(const uint16_t *a, const uint16_t *b, size_t n, fsa_dtype dt)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = dt == FSA_DTYPE_BF16 ? bench_from_bf16(a[i]) : bench_from_f16(a[i]);
        double y = dt == FSA_DTYPE_BF16 ? bench_from_bf16(b[i]) : bench_from_f16(b[i]);
        if (!isfinite(x) || !isfinite(y)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

/* rel_diff of n values on the device (the two paths' outputs or dq); NaN,
 * the row's "not compared", when the host copies cannot be allocated. */
static double device_rel_diff(CUdeviceptr a, CUdeviceptr b, size_t n, fsa_dtype dt)
{
    double diff = NAN;
    uint16_t *x = malloc(n * 2), *y = malloc(n * 2);
    if (x && y) {
        CU(cu.MemcpyDtoH(x, a, n * 2));
        CU(cu.MemcpyDtoH(y, b, n * 2));
        diff = rel_diff(x, y, n, dt);
    }
    free(x);
    free(y);
    return diff;
}

static const char *alg_name(fsa_algorithm a) { return a == FSA_ALGORITHM_FSA ? "fsa" : a == FSA_ALGORITHM_NSA ? "nsa" : "auto"; }

/* The plan of a row's shape (T aside) on path alg; the forward's and the
 * backward's plans differ only in .backward. */
static fsa_selected_attention_desc row_desc(const options *o, const bench_row *row, fsa_algorithm alg)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.dtype = o->dtype;
    d.head_dim = row->D;
    d.value_dim = row->Dv;
    d.num_q_heads = o->q_heads;
    d.num_kv_heads = row->hkv;
    d.block_size = o->block_size;
    d.top_k = o->top_k;
    d.algorithm = alg;
    d.workspace_limit = o->workspace_limit;
    return d;
}

/* Backward of one path (or AUTO): its time, optionally forward + backward,
 * and dq left in dq_out for the comparison of the two paths. 0 when it ran;
 * 1 when a forced path does not take the shape (left out, as in the
 * forward); -1 when its plan failed (message on stderr). */
static int time_backward_path(fsa_context *ctx, const options *o, bench_row *row, const input_set *sets, int n_sets,
                              CUdeviceptr cu_dev, fsa_algorithm alg, CUdeviceptr dq_out)
{
    const int T = row->T, hq = o->q_heads, hkv = row->hkv, D = row->D, Dv = row->Dv, K = o->top_k;
    fsa_selected_attention_desc d = row_desc(o, row, alg);
    d.backward = 1;
    fsa_plan *plan = NULL;
    const fsa_status st = fsa_plan_create(&plan, ctx, &d);
    if (st == FSA_STATUS_UNSUPPORTED && alg != FSA_ALGORITHM_AUTO) return 1;
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench: backward plan (%s) T=%d G=%d D=%d: %s\n", alg_name(alg), T, row->G, D,
                fsa_last_error());
        return -1;
    }
    const size_t nkv = (size_t)T * hkv * D;
    const size_t no = (size_t)T * hq * Dv, nv = (size_t)T * hkv * Dv;
    size_t ws_f = 0, ws_b = 0;
    FSA(fsa_plan_workspace_size(&ws_f, plan, T, 1));
    FSA(fsa_plan_workspace_size_bwd(&ws_b, plan, T, 1));
    CUdeviceptr o_buf, lse, dout, dk, dv, ws;
    CU(cu.MemAlloc(&o_buf, no * 2));
    CU(cu.MemAlloc(&lse, (size_t)hq * T * 4));
    CU(cu.MemAlloc(&dout, no * 2));
    CU(cu.MemAlloc(&dk, nkv * 2));
    CU(cu.MemAlloc(&dv, nv * 2));
    CU(cu.MemAlloc(&ws, ws_f > ws_b ? ws_f : ws_b));
    uint16_t *h = bench_alloc("", no * 2);
    bench_fill_normal(h, no, 777u + (uint64_t)T, o->dtype);
    CU(cu.MemcpyHtoD(dout, h, no * 2));
    free(h);
    fsa_fwd_args fa = FSA_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.batch = 1, fa.max_seqlen = T;
    fa.q = bench_rows(0, hq, D), fa.o = bench_rows(0, hq, Dv), fa.k = bench_rows(0, hkv, D), fa.v = bench_rows(0, hkv, Dv);
    fa.topk = bench_topk_rows(0, T, K);
    fa.o.ptr = o_buf, fa.lse = lse;
    fa.cu_seqlens = cu_dev, fa.workspace = ws, fa.workspace_bytes = ws_f > ws_b ? ws_f : ws_b;
    fsa_bwd_args ba = FSA_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = 1, ba.max_seqlen = T;
    ba.q = bench_rows(0, hq, D), ba.o = bench_rows(o_buf, hq, Dv), ba.dout = bench_rows(dout, hq, Dv), ba.dq = bench_rows(dq_out, hq, D);
    ba.k = bench_rows(0, hkv, D), ba.v = bench_rows(0, hkv, Dv), ba.dk = bench_rows(dk, hkv, D), ba.dv = bench_rows(dv, hkv, Dv);
    ba.topk = bench_topk_rows(0, T, K), ba.lse = lse;
    ba.cu_seqlens = cu_dev, ba.workspace = ws, ba.workspace_bytes = fa.workspace_bytes;
    /* The forward's o and lse of set 0 feed every backward repeat. */
    fa.q.ptr = sets[0].q, fa.k.ptr = sets[0].k, fa.v.ptr = sets[0].v, fa.topk.ptr = sets[0].topk;
    FSA(fsa_selected_attention_fwd(plan, &fa, NULL));
    CU(cu.StreamSynchronize(NULL));
    int reps = 0;
    bwd_call bc = {plan, &fa, &ba, sets, 0};
    row->bwd_ms[alg] = time_call(call_backward, &bc, 1, o, &reps);
    if (alg == FSA_ALGORITHM_AUTO) {
        FSA(fsa_plan_algorithm_bwd(&row->bwd_chosen, NULL, plan, T));
        row->bwd_ws = ws_b;
        bc.with_forward = 1;
        row->fwd_bwd_ms = time_call(call_backward, &bc, n_sets, o, &reps);
    }
    /* dq of set 0 for the comparison; what the path wrote, finite. */
    bc.with_forward = 0;
    call_backward(&bc, 0);
    CU(cu.StreamSynchronize(NULL));
    const int finite = bench_device_finite(dq_out, (size_t)T * o->q_heads * row->D, o->dtype) &&
                       bench_device_finite(dk, nkv, o->dtype) && bench_device_finite(dv, nv, o->dtype);
    if (!finite)
        fprintf(stderr, "fsa-bench: backward T=%d G=%d D=%d on the %s path: dq, dk or dv not finite\n", T, row->G,
                row->D, alg_name(alg));
    CU(cu.MemFree(o_buf));
    CU(cu.MemFree(lse));
    CU(cu.MemFree(dout));
    CU(cu.MemFree(dk));
    CU(cu.MemFree(dv));
    CU(cu.MemFree(ws));
    fsa_plan_destroy(plan);
    return finite ? 0 : -1;
}

/* Backward of each path (as --only allows) and of AUTO with forward + backward;
 * the two paths' dq compared when both ran. 0, or -1 when a backward failed. */
static int time_backward(fsa_context *ctx, const options *o, bench_row *row, const input_set *sets, int n_sets,
                         CUdeviceptr cu_dev)
{
    const size_t nq = (size_t)row->T * o->q_heads * row->D;
    CUdeviceptr dq[3] = {0, 0, 0};
    int ran[3] = {0, 0, 0}, failed = 0;
    static const fsa_algorithm order[] = {FSA_ALGORITHM_FSA, FSA_ALGORITHM_NSA, FSA_ALGORITHM_AUTO};
    for (int i = 0; i < 3; i++) {
        const fsa_algorithm a = order[i];
        if (a != FSA_ALGORITHM_AUTO && o->only && o->only != (int)a) continue;
        CU(cu.MemAlloc(&dq[a], nq * 2));
        const int rc = time_backward_path(ctx, o, row, sets, n_sets, cu_dev, a, dq[a]);
        ran[a] = rc == 0;
        failed |= rc < 0;
    }
    if (ran[FSA_ALGORITHM_FSA] && ran[FSA_ALGORITHM_NSA]) {
        row->bwd_rel_diff = device_rel_diff(dq[FSA_ALGORITHM_FSA], dq[FSA_ALGORITHM_NSA], nq, o->dtype);
        if (row->bwd_rel_diff > o->tolerance) { /* NaN: not compared (no host memory) */
            fprintf(stderr, "fsa-bench: backward T=%d G=%d D=%d: the two dq orders differ by %.3g (over %.3g)\n",
                    row->T, row->G, row->D, row->bwd_rel_diff, o->tolerance);
            failed = 1;
        }
    }
    for (int a = 0; a < 3; a++)
        if (dq[a]) CU(cu.MemFree(dq[a]));
    return failed ? -1 : 0;
}

void bench_selected_row(fsa_context *ctx, const options *o, int T, int G, int D, bench_row *row, size_t l2_bytes)
{
    const int hq = o->q_heads, hkv = hq / G, K = o->top_k, BK = o->block_size;
    memset(row, 0, sizeof *row);
    row->T = T, row->G = G, row->D = D, row->hkv = hkv, row->backward = o->backward;
    row->Dv = o->value_dim ? o->value_dim : D;
    const int Dv = row->Dv;
    for (int i = 0; i < 3; i++) row->ms[i] = -1;

    fsa_plan *plans[3] = {NULL, NULL, NULL};
    for (int a = 0; a < 3; a++) {
        fsa_selected_attention_desc d = row_desc(o, row, (fsa_algorithm)a);
        fsa_status st = fsa_plan_create(&plans[a], ctx, &d);
        if (st == FSA_STATUS_UNSUPPORTED && a != 0) {
            plans[a] = NULL;
            continue;
        }
        if (st != FSA_STATUS_OK) {
            fprintf(stderr, "fsa-bench: plan T=%d G=%d D=%d: %s\n", T, G, D, fsa_last_error());
            exit(1);
        }
    }
    fsa_plan_choice before = FSA_PLAN_CHOICE_INIT;
    FSA(fsa_plan_choice_get(&before, plans[0], FSA_OPERATION_FORWARD, T));
    row->heuristic = before.algorithm;
    if (o->tune) {
        int measured = 0;
        FSA(fsa_plan_tune(&measured, plans[0], FSA_OPERATION_FORWARD, T));
    }
    FSA(fsa_plan_algorithm(&row->chosen, &row->reason, plans[0], T));

    const size_t nq = (size_t)T * hq * D, nkv = (size_t)T * hkv * D, nsel = (size_t)hkv * T * K;
    const size_t no = (size_t)T * hq * Dv, nv = (size_t)T * hkv * Dv;
    const size_t input_bytes = (nq + nkv + nv) * 2 + nsel * 4;
    int n_sets = input_bytes < 4 * l2_bytes ? (int)((4 * l2_bytes + input_bytes - 1) / input_bytes) : 1;
    if (n_sets > 4) n_sets = 4;

    size_t nmax = nq > nkv ? nq : nkv;
    if (nv > nmax) nmax = nv;
    uint16_t *h = malloc(nmax * 2);
    int32_t *sel = malloc(nsel * 4);
    if (!h || !sel) {
        fprintf(stderr, "fsa-bench: out of host memory\n");
        exit(1);
    }
    input_set sets[4];
    for (int s = 0; s < n_sets; s++) {
        CU(cu.MemAlloc(&sets[s].q, nq * 2));
        CU(cu.MemAlloc(&sets[s].k, nkv * 2));
        CU(cu.MemAlloc(&sets[s].v, nv * 2));
        CU(cu.MemAlloc(&sets[s].topk, nsel * 4));
        uint64_t seed = 1000u * (uint64_t)s + (uint64_t)T * 31u + (uint64_t)G;
        bench_fill_normal(h, nq, seed + 1, o->dtype);
        CU(cu.MemcpyHtoD(sets[s].q, h, nq * 2));
        bench_fill_normal(h, nkv, seed + 2, o->dtype);
        CU(cu.MemcpyHtoD(sets[s].k, h, nkv * 2));
        bench_fill_normal(h, nv, seed + 3, o->dtype);
        CU(cu.MemcpyHtoD(sets[s].v, h, nv * 2));
        fill_selection(sel, hkv, T, K, BK, seed + 4);
        CU(cu.MemcpyHtoD(sets[s].topk, sel, nsel * 4));
    }
    int64_t entries = 0;
    for (size_t i = 0; i < nsel; i++) entries += sel[i] >= 0;
    /* 2 per multiply-add of Q K^T (D deep) and of P V (Dv wide): 4 D per key at D = Dv. */
    row->flops = 2.0 * (double)entries * G * BK * (D + Dv) * ((double)n_sets > 0 ? 1.0 : 0.0);
    /* Every set draws from the same distribution; the count of the last one stands for all. */

    int32_t cu_host[2] = {0, T};
    CUdeviceptr cu_dev, out[3] = {0, 0, 0};
    CU(cu.MemAlloc(&cu_dev, 8));
    CU(cu.MemcpyHtoD(cu_dev, cu_host, 8));
    size_t ws_max = 0;
    for (int a = 0; a < 3; a++) {
        if (!plans[a]) continue;
        FSA(fsa_plan_workspace_size(&row->ws[a], plans[a], T, 1));
        if (row->ws[a] > ws_max) ws_max = row->ws[a];
    }
    CUdeviceptr ws = 0;
    if (ws_max) CU(cu.MemAlloc(&ws, ws_max));

    for (int a = 1; a < 3; a++) {
        /* AUTO runs one of the forced paths: its time is that path's. */
        if (!plans[a] || (o->only && o->only != a)) continue;
        CU(cu.MemAlloc(&out[a], no * 2));
        fsa_fwd_args args = FSA_FWD_ARGS_INIT;
        args.total_tokens = T;
        args.batch = 1;
        args.max_seqlen = T;
        args.q = bench_rows(0, hq, D), args.k = bench_rows(0, hkv, D), args.v = bench_rows(0, hkv, Dv), args.topk = bench_topk_rows(0, T, K);
        args.o = bench_rows(out[a], hq, Dv);
        args.cu_seqlens = cu_dev;
        args.workspace = ws;
        args.workspace_bytes = ws_max;
        fwd_call fc = {plans[a], &args, sets};
        row->ms[a] = time_call(call_forward, &fc, n_sets, o, &row->reps[a]);
        /* Leave the output of the last set's inputs for the comparison. */
        args.q.ptr = sets[0].q, args.k.ptr = sets[0].k, args.v.ptr = sets[0].v, args.topk.ptr = sets[0].topk;
        FSA(fsa_selected_attention_fwd(plans[a], &args, NULL));
        CU(cu.StreamSynchronize(NULL));
    }
    row->ms[0] = row->ms[row->chosen]; /* -1 when --only left the chosen path out */
    row->reps[0] = row->reps[row->chosen];
    row->rel_diff = NAN;
    if (out[FSA_ALGORITHM_FSA] && out[FSA_ALGORITHM_NSA]) {
        row->rel_diff = device_rel_diff(out[FSA_ALGORITHM_FSA], out[FSA_ALGORITHM_NSA], no, o->dtype);
        if (row->rel_diff > o->tolerance) { /* NaN: not compared (no host memory) */
            fprintf(stderr, "fsa-bench: forward T=%d G=%d D=%d: the two paths' outputs differ by %.3g (over %.3g)\n",
                    T, G, D, row->rel_diff, o->tolerance);
            row->failed = 1;
        }
    }
    /* Each timed path's output of set 0: sampled rows against float64. */
    row->sampled_err = NAN;
    for (int a = 1; a < 3; a++) {
        if (!out[a]) continue;
        const bench_sel_problem sp = {sets[0].q, sets[0].k, sets[0].v, sets[0].topk, out[a], T, hq, hkv, D, Dv, K, BK,
                                      o->dtype};
        /* a finite comparison above read both outputs whole: finite already */
        if (!isfinite(row->rel_diff) && !bench_device_finite(out[a], no, o->dtype)) {
            fprintf(stderr, "fsa-bench: forward T=%d G=%d D=%d on the %s path: o not finite\n", T, G, D,
                    alg_name((fsa_algorithm)a));
            row->failed = 1;
        }
        const double e = bench_sampled_rows_error(&sp, BENCH_SAMPLED_ROWS, 99u + (uint64_t)T);
        if (!(e <= row->sampled_err)) row->sampled_err = e; /* the worse of the paths (NaN: none yet) */
        if (!(e <= o->tolerance)) {
            fprintf(stderr, "fsa-bench: forward T=%d G=%d D=%d on the %s path: a sampled row's error %.3g against "
                            "float64 (over %.3g)\n", T, G, D, alg_name((fsa_algorithm)a), e, o->tolerance);
            row->failed = 1;
        }
    }
    row->bwd_ms[0] = row->bwd_ms[1] = row->bwd_ms[2] = row->fwd_bwd_ms = -1;
    row->bwd_rel_diff = NAN;
    row->bwd_chosen = FSA_ALGORITHM_AUTO;
    if (o->backward) row->failed |= time_backward(ctx, o, row, sets, n_sets, cu_dev) != 0;
    for (int a = 0; a < 3; a++) {
        if (out[a]) CU(cu.MemFree(out[a]));
        fsa_plan_destroy(plans[a]);
    }
    if (ws) CU(cu.MemFree(ws));
    CU(cu.MemFree(cu_dev));
    for (int s = 0; s < n_sets; s++) {
        CU(cu.MemFree(sets[s].q));
        CU(cu.MemFree(sets[s].k));
        CU(cu.MemFree(sets[s].v));
        CU(cu.MemFree(sets[s].topk));
    }
    free(h);
    free(sel);
}


/* The workspace of one AUTO forward plus backward at its peak: the larger of
 * the two calls' (the forward's is free again before the backward runs); the
 * forward's alone when no backward ran. */
static size_t peak_workspace(const bench_row *r)
{
    return r->bwd_ms[0] >= 0 && r->bwd_ws > r->ws[0] ? r->bwd_ws : r->ws[0];
}

/* The next table cell, " value |": the value in fmt (which takes the width)
 * or "-" where it does not exist (a path not run, a comparison not made). */
static void print_cell(int width, const char *fmt, double value, int valid)
{
    putchar(' ');
    if (valid && isfinite(value)) printf(fmt, width, value);
    else printf("%*s", width, valid && isinf(value) ? "inf" : "-"); /* inf: a non-finite output (the row failed) */
    fputs(" |", stdout);
}

void bench_selected_print_row(const bench_row *r, FILE *json, int first)
{
    const double best = r->ms[0], bwd = r->bwd_ms[0];
    printf("| %6d | %2d | %3d | %-4s |", r->T, r->G, r->D, alg_name(r->chosen));
    print_cell(8, "%*.3f", best, best >= 0);
    print_cell(7, "%*.1f", r->flops / (best * 1e-3) / 1e12, best > 0);
    print_cell(8, "%*.3f", r->ms[1], r->ms[1] >= 0);
    print_cell(8, "%*.3f", r->ms[2], r->ms[2] >= 0);
    printf(" %11zu |", r->ws[0]);
    print_cell(10, "%*.2e", r->rel_diff, 1);
    if (r->backward) {
        printf(" %-4s |", bwd >= 0 ? alg_name(r->bwd_chosen) : "-");
        print_cell(8, "%*.3f", bwd, bwd >= 0);
        print_cell(7, "%*.1f", 2.5 * r->flops / (bwd * 1e-3) / 1e12, bwd > 0);
        print_cell(8, "%*.3f", r->bwd_ms[1], r->bwd_ms[1] >= 0);
        print_cell(8, "%*.3f", r->bwd_ms[2], r->bwd_ms[2] >= 0);
        print_cell(8, "%*.3f", r->fwd_bwd_ms, r->fwd_bwd_ms >= 0);
        if (bwd >= 0) printf(" %11zu |", r->bwd_ws);
        else printf(" %11s |", "-");
        print_cell(10, "%*.2e", r->bwd_rel_diff, 1);
        printf(" %11zu |", peak_workspace(r));
    }
    printf("\n");
    fflush(stdout);
    if (json) {
        /* Paths not run (time < 0) and comparisons not made (NaN) are null;
         * so are the AUTO backward's path and workspace when it did not run. */
        fprintf(json, "%s  {\"T\": %d, \"G\": %d, \"D\": %d, \"Dv\": %d, \"auto\": \"%s\", \"reason\": ",
                first ? "" : ",\n", r->T, r->G, r->D, r->Dv, alg_name(r->chosen));
        bench_json_string(json, r->reason);
        fprintf(json, ", \"heuristic\": \"%s\"", alg_name(r->heuristic));
        bench_json_field(json, "ms_auto", "%.4f", r->ms[0], r->ms[0] >= 0);
        bench_json_field(json, "ms_fsa", "%.4f", r->ms[1], r->ms[1] >= 0);
        bench_json_field(json, "ms_nsa", "%.4f", r->ms[2], r->ms[2] >= 0);
        fprintf(json, ", \"reps\": [%d, %d, %d]", r->reps[0], r->reps[1], r->reps[2]);
        bench_json_field(json, "tflops_auto", "%.2f", r->flops / (r->ms[0] * 1e-3) / 1e12, r->ms[0] > 0);
        bench_json_field(json, "gflop", "%.3f", r->flops / 1e9, 1);
        fprintf(json, ", \"workspace_bytes_auto\": %zu, \"workspace_bytes_fsa\": %zu", r->ws[0], r->ws[1]);
        bench_json_field(json, "rel_diff_fsa_vs_nsa", "%.3e", r->rel_diff, 1);
        fputs(", \"bwd_auto\": ", json);
        if (bwd >= 0) fprintf(json, "\"%s\"", alg_name(r->bwd_chosen));
        else fputs("null", json);
        bench_json_field(json, "ms_bwd", "%.4f", bwd, bwd >= 0);
        bench_json_field(json, "ms_bwd_fsa", "%.4f", r->bwd_ms[1], r->bwd_ms[1] >= 0);
        bench_json_field(json, "ms_bwd_nsa", "%.4f", r->bwd_ms[2], r->bwd_ms[2] >= 0);
        bench_json_field(json, "ms_fwd_bwd", "%.4f", r->fwd_bwd_ms, r->fwd_bwd_ms >= 0);
        if (bwd >= 0) fprintf(json, ", \"workspace_bytes_bwd\": %zu", r->bwd_ws);
        else fputs(", \"workspace_bytes_bwd\": null", json);
        fprintf(json, ", \"workspace_bytes_peak\": %zu", peak_workspace(r));
        bench_json_field(json, "rel_diff_bwd_dq_fsa_vs_nsa", "%.3e", r->bwd_rel_diff, 1);
        bench_json_field(json, "sampled_row_error", "%.3e", r->sampled_err, 1);
        fprintf(json, ", \"failed\": %s", r->failed ? "true" : "false");
        fputc('}', json);
    }
}
