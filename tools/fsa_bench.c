/*
 * fsa-bench: times selected attention through the public API on a GPU.
 *
 * Protocol (docs/benchmarks.md): random standard-normal q, k, v; per KV head and
 * token, block 0 and the own block c and c-1 always selected, the other slots
 * distinct random blocks of 0..c, rows sorted, tail -1; CUDA events around
 * each call; 25 ms warm-up; median of repeats covering at least 100 ms; the
 * whole pipeline inside the timed region, plan creation outside; inputs
 * rotated between several copies when they would fit in L2. Every row runs
 * both paths and compares their outputs.
 *
 * Uses include/fsa.h and the CUDA driver API only.
 */
#define _GNU_SOURCE
#include "fsa.h"

#include "bench_cuda.h"
#include "bench_branches.h"
#include "bench_decode.h"
#include "bench_inputs.h"
#include "tool_args.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CU(call) BENCH_CU("", call)

#define FSA(call) BENCH_FSA("", call)

#define MAX_LIST 64 /* values of -T or -G; more is a usage error */

typedef enum bench_mode { MODE_GRID, MODE_STANDARD, MODE_JIT } bench_mode;

typedef struct options {
    bench_mode mode;
    int dry_run; /* print what would run, touch no GPU */
    int tune;    /* measure each row's bucket before choosing (tuning on) */
    int tokens[MAX_LIST], n_tokens;
    int groups[MAX_LIST], n_groups;
    int head_dim;
    int value_dim; /* 0 = head_dim */
    int q_heads;
    int block_size;
    int top_k;
    fsa_dtype dtype;
    double min_ms;
    double warmup_ms;
    const char *json;
    const char *cache_dir;
    uint64_t workspace_limit;
    int only; /* 0 = both paths, else the one fsa_algorithm to time */
    int backward;
} options;

/* ------------------------------------------------------------ inputs */


typedef struct sel_job {
    int32_t *topk;
    int T, K, BK, h0, h1;
    uint64_t seed;
} sel_job;

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Per token: blocks 0, c, c-1 always; the rest distinct uniform picks of 0..c. */
static void *gen_selection(void *arg)
{
    sel_job *j = arg;
    int *row = malloc(sizeof(int) * (size_t)j->K);
    for (int h = j->h0; h < j->h1; h++) {
        uint64_t s = j->seed + (uint64_t)h * 7919u;
        for (int t = 0; t < j->T; t++) {
            int32_t *dst = j->topk + ((size_t)h * j->T + t) * j->K;
            int c = t / j->BK, n = 0;
            int avail = c + 1;
            if (avail <= j->K) {
                for (int b = 0; b <= c; b++) row[n++] = b;
            } else {
                row[n++] = 0;
                row[n++] = c;
                if (c - 1 > 0) row[n++] = c - 1;
                while (n < j->K) {
                    int b = (int)(bench_splitmix(&s) % (uint64_t)(c + 1)), dup = 0;
                    for (int i = 0; i < n && !dup; i++) dup = row[i] == b;
                    if (!dup) row[n++] = b;
                }
            }
            qsort(row, (size_t)n, sizeof(int), cmp_int);
            for (int i = 0; i < j->K; i++) dst[i] = i < n ? row[i] : -1;
        }
    }
    free(row);
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct input_set {
    CUdeviceptr q, k, v, topk;
} input_set;

typedef struct bench_row {
    int T, G, D, hkv;
    int Dv; /* value head dim */
    fsa_algorithm chosen;
    fsa_algorithm heuristic; /* what AUTO takes without a tuning record */
    const char *reason;
    double ms[3];      /* by fsa_algorithm: AUTO (chosen), FSA, NSA; < 0 = not run */
    size_t ws[3];
    double flops;
    double rel_diff;   /* FSA output vs NSA output */
    int reps[3];
    fsa_algorithm bwd_chosen;
    double bwd_ms[3];  /* backward by fsa_algorithm as ms[]; < 0 = not run */
    double fwd_bwd_ms; /* AUTO forward + backward */
    size_t bwd_ws;     /* AUTO */
    double bwd_rel_diff; /* dq of the FSA order vs the NSA order */
} bench_row;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* One timed call: the forward, the backward, or both, on input set `set`. */
typedef void (*call_fn)(void *user, int set);

/* Median event time of one call, rotating over the input sets. */
static double time_call(call_fn call, void *user, int n_sets, const options *o, int *reps_out)
{
    CUevent e0, e1;
    CU(cu.EventCreate(&e0, CU_EVENT_DEFAULT));
    CU(cu.EventCreate(&e1, CU_EVENT_DEFAULT));
    int rep = 0;
    double start = now_ms();
    do { /* warm-up */
        call(user, rep++ % n_sets);
        CU(cu.StreamSynchronize(NULL));
    } while (now_ms() - start < o->warmup_ms);
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
    qsort(times, (size_t)n, sizeof(double), cmp_double);
    CU(cu.EventDestroy(e0));
    CU(cu.EventDestroy(e1));
    *reps_out = n;
    return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

/* A packed [T, heads, D] tensor, and top-k indices laid out [Hkv, T, K]. */
static fsa_tensor rows(CUdeviceptr ptr, int heads, int D) { return (fsa_tensor){ptr, (int64_t)heads * D, D}; }
static fsa_tensor topk_rows(CUdeviceptr ptr, int T, int K) { return (fsa_tensor){ptr, K, (int64_t)T * K}; }

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

static const char *alg_name(fsa_algorithm a) { return a == FSA_ALGORITHM_FSA ? "fsa" : a == FSA_ALGORITHM_NSA ? "nsa" : "auto"; }

/* Backward of one path (or AUTO): its time, optionally forward + backward,
 * and dq left in dq_out for the comparison of the two paths. */
static void time_backward_path(fsa_context *ctx, const options *o, bench_row *row, const input_set *sets, int n_sets,
                               CUdeviceptr cu_dev, fsa_algorithm alg, CUdeviceptr dq_out)
{
    const int T = row->T, hq = o->q_heads, hkv = row->hkv, D = row->D, Dv = row->Dv, K = o->top_k;
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.dtype = o->dtype;
    d.head_dim = D;
    d.value_dim = Dv;
    d.num_q_heads = hq;
    d.num_kv_heads = hkv;
    d.block_size = o->block_size;
    d.top_k = K;
    d.workspace_limit = o->workspace_limit;
    d.backward = 1;
    d.algorithm = alg;
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench: backward plan (%s) T=%d G=%d: %s\n", alg_name(alg), T, row->G, fsa_last_error());
        return;
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
    uint16_t *h = malloc(no * 2);
    bench_fill_normal(h, no, 777u + (uint64_t)T, o->dtype);
    CU(cu.MemcpyHtoD(dout, h, no * 2));
    free(h);
    fsa_fwd_args fa = FSA_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.batch = 1, fa.max_seqlen = T;
    fa.q = rows(0, hq, D), fa.o = rows(0, hq, Dv), fa.k = rows(0, hkv, D), fa.v = rows(0, hkv, Dv);
    fa.topk = topk_rows(0, T, K);
    fa.o.ptr = o_buf, fa.lse = lse;
    fa.cu_seqlens = cu_dev, fa.workspace = ws, fa.workspace_bytes = ws_f > ws_b ? ws_f : ws_b;
    fsa_bwd_args ba = FSA_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = 1, ba.max_seqlen = T;
    ba.q = rows(0, hq, D), ba.o = rows(o_buf, hq, Dv), ba.dout = rows(dout, hq, Dv), ba.dq = rows(dq_out, hq, D);
    ba.k = rows(0, hkv, D), ba.v = rows(0, hkv, Dv), ba.dk = rows(dk, hkv, D), ba.dv = rows(dv, hkv, Dv);
    ba.topk = topk_rows(0, T, K), ba.lse = lse;
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
    /* dq of set 0 for the comparison. */
    bc.with_forward = 0;
    call_backward(&bc, 0);
    CU(cu.StreamSynchronize(NULL));
    CU(cu.MemFree(o_buf));
    CU(cu.MemFree(lse));
    CU(cu.MemFree(dout));
    CU(cu.MemFree(dk));
    CU(cu.MemFree(dv));
    CU(cu.MemFree(ws));
    fsa_plan_destroy(plan);
}

/* Backward of each path (as --only allows) and of AUTO with forward + backward;
 * the two paths' dq compared. */
static void time_backward(fsa_context *ctx, const options *o, bench_row *row, const input_set *sets, int n_sets,
                          CUdeviceptr cu_dev)
{
    const size_t nq = (size_t)row->T * o->q_heads * row->D;
    CUdeviceptr dq[3] = {0, 0, 0};
    for (int a = FSA_ALGORITHM_FSA; a <= FSA_ALGORITHM_NSA; a++) {
        if (o->only && o->only != a) continue;
        CU(cu.MemAlloc(&dq[a], nq * 2));
        time_backward_path(ctx, o, row, sets, n_sets, cu_dev, (fsa_algorithm)a, dq[a]);
    }
    CU(cu.MemAlloc(&dq[0], nq * 2));
    time_backward_path(ctx, o, row, sets, n_sets, cu_dev, FSA_ALGORITHM_AUTO, dq[0]);
    if (dq[FSA_ALGORITHM_FSA] && dq[FSA_ALGORITHM_NSA]) {
        uint16_t *x = malloc(nq * 2), *y = malloc(nq * 2);
        if (x && y) {
            CU(cu.MemcpyDtoH(x, dq[FSA_ALGORITHM_FSA], nq * 2));
            CU(cu.MemcpyDtoH(y, dq[FSA_ALGORITHM_NSA], nq * 2));
            row->bwd_rel_diff = rel_diff(x, y, nq, o->dtype);
        }
        free(x);
        free(y);
    }
    for (int a = 0; a < 3; a++)
        if (dq[a]) CU(cu.MemFree(dq[a]));
}

static void run_row(fsa_context *ctx, const options *o, int T, int G, int D, bench_row *row, size_t l2_bytes)
{
    const int hq = o->q_heads, hkv = hq / G, K = o->top_k, BK = o->block_size;
    memset(row, 0, sizeof *row);
    row->T = T, row->G = G, row->D = D, row->hkv = hkv;
    row->Dv = o->value_dim ? o->value_dim : D;
    const int Dv = row->Dv;
    for (int i = 0; i < 3; i++) row->ms[i] = -1;

    fsa_plan *plans[3] = {NULL, NULL, NULL};
    for (int a = 0; a < 3; a++) {
        fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
        d.dtype = o->dtype;
        d.head_dim = D;
        d.value_dim = Dv;
        d.num_q_heads = hq;
        d.num_kv_heads = hkv;
        d.block_size = BK;
        d.top_k = K;
        d.algorithm = (fsa_algorithm)a;
        d.workspace_limit = o->workspace_limit;
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
        args.q = rows(0, hq, D), args.k = rows(0, hkv, D), args.v = rows(0, hkv, Dv), args.topk = topk_rows(0, T, K);
        args.o = rows(out[a], hq, Dv);
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
        uint16_t *x = malloc(no * 2), *y = malloc(no * 2);
        if (x && y) {
            CU(cu.MemcpyDtoH(x, out[FSA_ALGORITHM_FSA], no * 2));
            CU(cu.MemcpyDtoH(y, out[FSA_ALGORITHM_NSA], no * 2));
            row->rel_diff = rel_diff(x, y, no, o->dtype);
        }
        free(x);
        free(y);
    }
    row->bwd_ms[0] = row->bwd_ms[1] = row->bwd_ms[2] = row->fwd_bwd_ms = -1;
    row->bwd_rel_diff = NAN;
    row->bwd_chosen = FSA_ALGORITHM_AUTO;
    if (o->backward) time_backward(ctx, o, row, sets, n_sets, cu_dev);
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


/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* ", "name": value" with the value in `fmt`, or null when it is not a
 * finite number or `valid` is 0 (JSON has no NaN or infinity). */
static void json_field(FILE *f, const char *name, const char *fmt, double value, int valid)
{
    fprintf(f, ", \"%s\": ", name);
    if (valid && isfinite(value)) fprintf(f, fmt, value);
    else fputs("null", f);
}

/* The workspace of one AUTO forward plus backward at its peak: the larger of
 * the two calls' (the forward's is free again before the backward runs). */
static size_t peak_workspace(const bench_row *r) { return r->ws[0] > r->bwd_ws ? r->ws[0] : r->bwd_ws; }

static void print_row(const bench_row *r, FILE *json, int first)
{
    double best = r->ms[0];
    printf("| %6d | %2d | %3d | %-4s | %8.3f | %7.1f | %8.3f | %8.3f | %11zu | %.2e |", r->T, r->G, r->D,
           alg_name(r->chosen), best, r->flops / (best * 1e-3) / 1e12, r->ms[1], r->ms[2], r->ws[0], r->rel_diff);
    if (r->bwd_ms[0] >= 0)
        printf(" %-4s | %8.3f | %7.1f | %8.3f | %8.3f | %8.3f | %11zu | %.2e | %11zu |", alg_name(r->bwd_chosen),
               r->bwd_ms[0], 2.5 * r->flops / (r->bwd_ms[0] * 1e-3) / 1e12, r->bwd_ms[1], r->bwd_ms[2], r->fwd_bwd_ms,
               r->bwd_ws, r->bwd_rel_diff, peak_workspace(r));
    printf("\n");
    fflush(stdout);
    if (json) {
        /* Paths not run (time < 0) and comparisons not made (NaN) are null. */
        fprintf(json, "%s  {\"T\": %d, \"G\": %d, \"D\": %d, \"Dv\": %d, \"auto\": \"%s\", \"reason\": ",
                first ? "" : ",\n", r->T, r->G, r->D, r->Dv, alg_name(r->chosen));
        json_string(json, r->reason);
        fprintf(json, ", \"heuristic\": \"%s\"", alg_name(r->heuristic));
        json_field(json, "ms_auto", "%.4f", r->ms[0], r->ms[0] >= 0);
        json_field(json, "ms_fsa", "%.4f", r->ms[1], r->ms[1] >= 0);
        json_field(json, "ms_nsa", "%.4f", r->ms[2], r->ms[2] >= 0);
        fprintf(json, ", \"reps\": [%d, %d, %d]", r->reps[0], r->reps[1], r->reps[2]);
        json_field(json, "tflops_auto", "%.2f", r->flops / (r->ms[0] * 1e-3) / 1e12, r->ms[0] > 0);
        json_field(json, "gflop", "%.3f", r->flops / 1e9, 1);
        fprintf(json, ", \"workspace_bytes_auto\": %zu, \"workspace_bytes_fsa\": %zu", r->ws[0], r->ws[1]);
        json_field(json, "rel_diff_fsa_vs_nsa", "%.3e", r->rel_diff, 1);
        fprintf(json, ", \"bwd_auto\": \"%s\"", alg_name(r->bwd_chosen));
        json_field(json, "ms_bwd", "%.4f", r->bwd_ms[0], r->bwd_ms[0] >= 0);
        json_field(json, "ms_bwd_fsa", "%.4f", r->bwd_ms[1], r->bwd_ms[1] >= 0);
        json_field(json, "ms_bwd_nsa", "%.4f", r->bwd_ms[2], r->bwd_ms[2] >= 0);
        json_field(json, "ms_fwd_bwd", "%.4f", r->fwd_bwd_ms, r->fwd_bwd_ms >= 0);
        fprintf(json, ", \"workspace_bytes_bwd\": %zu, \"workspace_bytes_peak\": %zu", r->bwd_ws, peak_workspace(r));
        json_field(json, "rel_diff_bwd_dq_fsa_vs_nsa", "%.3e", r->bwd_rel_diff, 1);
        fputc('}', json);
    }
}

/* ------------------------------------------------------------ JIT timings */

static double plan_create_ms(fsa_context *ctx, int D, int G, int *kernels_out)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.head_dim = D;
    d.num_q_heads = G;
    d.num_kv_heads = 1;
    fsa_cache_stats s0 = FSA_CACHE_STATS_INIT, s1 = FSA_CACHE_STATS_INIT;
    FSA(fsa_context_cache_stats(&s0, ctx));
    fsa_plan *p = NULL;
    double t0 = now_ms();
    FSA(fsa_plan_create(&p, ctx, &d));
    double ms = now_ms() - t0;
    FSA(fsa_context_cache_stats(&s1, ctx));
    if (kernels_out)
        *kernels_out = (int)((s1.compiles - s0.compiles) + (s1.disk_hits - s0.disk_hits) + (s1.memory_hits - s0.memory_hits));
    fsa_plan_destroy(p);
    return ms;
}

/* Second process: the plan comes from the disk cache, then from memory. */
static int jit_child_run(const char *cache_dir)
{
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.cache_dir = cache_dir;
    fsa_context *ctx = NULL;
    FSA(fsa_context_create(&ctx, &co));
    int modules = 0;
    double disk_ms = plan_create_ms(ctx, 128, 4, &modules);
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    FSA(fsa_context_cache_stats(&s, ctx));
    enum { N = 2000 };
    double t0 = now_ms();
    for (int i = 0; i < N; i++) plan_create_ms(ctx, 128, 4, NULL);
    double mem_us = (now_ms() - t0) * 1e3 / N;
    printf("disk-hit plan (new process, %d modules, %llu disk hits, %llu compiles): %.3f ms\n", modules,
           (unsigned long long)s.disk_hits, (unsigned long long)s.compiles, disk_ms);
    printf("in-memory plan creation (%d modules, incl. driver function lookups): %.2f us per plan, %.2f us per module\n",
           modules, mem_us, mem_us / (modules ? modules : 1));
    fsa_context_destroy(ctx);
    return 0;
}

/* An empty kernel in PTX, loaded without the library, for the bare-launch baseline. */
static const char empty_ptx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry bench_empty(.param .u64 p0, .param .u32 p1, .param .u64 p2)\n{\n ret;\n}\n";

static void run_jit(const options *o, const char *self)
{
    char dir[] = "/tmp/fsa-bench-jit.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "fsa-bench: mkdtemp: %s\n", strerror(errno));
        exit(1);
    }
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.cache_dir = dir;
    fsa_context *ctx = NULL;
    FSA(fsa_context_create(&ctx, &co));
    printf("## JIT (target %s, cache %s)\n", fsa_context_target(ctx), dir);
    int kernels = 0;
    const int dims[] = {64, 128, 256};
    for (int i = 0; i < 3; i++) {
        fsa_cache_stats s0 = FSA_CACHE_STATS_INIT, s1 = FSA_CACHE_STATS_INIT;
        FSA(fsa_context_cache_stats(&s0, ctx));
        double ms = plan_create_ms(ctx, dims[i], 4, &kernels);
        FSA(fsa_context_cache_stats(&s1, ctx));
        unsigned long long n = s1.compiles - s0.compiles;
        printf("cold plan D=%d G=4: %.1f ms wall, %llu modules compiled, %.1f ms NVRTC per module\n", dims[i], ms, n,
               n ? (s1.compile_ms - s0.compile_ms) / (double)n : 0.0);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "--jit-child", dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);

    /* Host time of one launch: the library's fill against a bare cuLaunchKernel. */
    CUmodule mod;
    CUfunction fn;
    CU(cu.ModuleLoadData(&mod, empty_ptx));
    CU(cu.ModuleGetFunction(&fn, mod, "bench_empty"));
    CUdeviceptr buf;
    CU(cu.MemAlloc(&buf, 1 << 20));
    FSA(fsa_fill_u32(ctx, buf, 0, 256, NULL));
    CU(cu.StreamSynchronize(NULL));
    enum { N = 20000 };
    unsigned long long n = 256;
    uint32_t value = 0;
    void *args[] = {&buf, &value, &n};
    double best_bare = 1e9, best_fill = 1e9;
    for (int round = 0; round < 5; round++) {
        double t0 = now_ms();
        for (int i = 0; i < N; i++) CU(cu.LaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        double bare = (now_ms() - t0) * 1e3 / N;
        CU(cu.StreamSynchronize(NULL));
        t0 = now_ms();
        for (int i = 0; i < N; i++) FSA(fsa_fill_u32(ctx, buf, 0, 256, NULL));
        double lib = (now_ms() - t0) * 1e3 / N;
        CU(cu.StreamSynchronize(NULL));
        if (bare < best_bare) best_bare = bare;
        if (lib < best_fill) best_fill = lib;
    }
    printf("host time per launch (best of 5 x %d): bare cuLaunchKernel %.3f us, fsa_fill_u32 %.3f us (+%.3f us)\n", N,
           best_bare, best_fill, best_fill - best_bare);

    /* Host time of one forward call (enqueue only), FSA path: Hq 32, Hkv 8, D 128, T 256. A few
     * hundred calls keep the launch queue from filling, so the host never waits on the GPU. */
    {
        const int T = 256, hq = 32, hkv = 8, D = 128, K = 16;
        fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
        d.num_q_heads = hq, d.num_kv_heads = hkv, d.head_dim = D, d.top_k = K;
        d.algorithm = FSA_ALGORITHM_FSA;
        fsa_plan *plan = NULL;
        FSA(fsa_plan_create(&plan, ctx, &d));
        size_t ws_bytes = 0;
        FSA(fsa_plan_workspace_size(&ws_bytes, plan, T, 1));
        CUdeviceptr q, k, v, out, topk, cu_seq, ws;
        CU(cu.MemAlloc(&q, (size_t)T * hq * D * 2));
        CU(cu.MemAlloc(&k, (size_t)T * hkv * D * 2));
        CU(cu.MemAlloc(&v, (size_t)T * hkv * D * 2));
        CU(cu.MemAlloc(&out, (size_t)T * hq * D * 2));
        CU(cu.MemAlloc(&topk, (size_t)hkv * T * K * 4));
        CU(cu.MemAlloc(&cu_seq, 8));
        CU(cu.MemAlloc(&ws, ws_bytes));
        CU(cu.MemsetD8(q, 0, (size_t)T * hq * D * 2));
        CU(cu.MemsetD8(k, 0, (size_t)T * hkv * D * 2));
        CU(cu.MemsetD8(v, 0, (size_t)T * hkv * D * 2));
        CU(cu.MemsetD8(topk, 0, (size_t)hkv * T * K * 4)); /* block 0 in every slot: one valid, the rest repeats */
        int32_t cu_host[2] = {0, T};
        CU(cu.MemcpyHtoD(cu_seq, cu_host, 8));
        fsa_fwd_args a = FSA_FWD_ARGS_INIT;
        a.total_tokens = T, a.batch = 1;
        a.q = rows(q, hq, D), a.k = rows(k, hkv, D), a.v = rows(v, hkv, D), a.o = rows(out, hq, D);
        a.topk = topk_rows(topk, T, K);
        a.cu_seqlens = cu_seq, a.workspace = ws, a.workspace_bytes = ws_bytes;
        enum { CALLS = 150, ROUNDS = 20 };
        double best = 1e9;
        for (int round = 0; round < ROUNDS; round++) {
            CU(cu.StreamSynchronize(NULL));
            double t0 = now_ms();
            for (int i = 0; i < CALLS; i++) FSA(fsa_selected_attention_fwd(plan, &a, NULL));
            double us = (now_ms() - t0) * 1e3 / CALLS;
            if (us < best) best = us;
        }
        CU(cu.StreamSynchronize(NULL));
        printf("host time per forward call (FSA path, memset + 4 launches; best of %d x %d): %.2f us\n", ROUNDS,
               CALLS, best);
        CU(cu.MemFree(q));
        CU(cu.MemFree(k));
        CU(cu.MemFree(v));
        CU(cu.MemFree(out));
        CU(cu.MemFree(topk));
        CU(cu.MemFree(cu_seq));
        CU(cu.MemFree(ws));
        fsa_plan_destroy(plan);
    }
    (void)o;
    CU(cu.MemFree(buf));
    CU(cu.ModuleUnload(mod));
    fsa_context_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "fsa-bench: could not remove %s\n", dir);
}

/* ------------------------------------------------------------ modes */

typedef struct device_info {
    CUdevice dev;
    char name[256];
    size_t l2_bytes;
} device_info;

/* Header and column titles of the forward (and backward) table. */
static void print_table_head(const options *o, FILE *json, const device_info *d, fsa_context *ctx)
{
    if (json) {
        fputs("{\"gpu\": ", json);
        json_string(json, d->name);
        fputs(", \"target\": ", json);
        json_string(json, fsa_context_target(ctx));
        fprintf(json, ", \"dtype\": \"%s\", \"rows\": [\n", tool_dtype_name(o->dtype));
    }
    printf("Hq=%d BK=%d K=%d; ms = median CUDA-event time of one forward; TFLOP/s = selected FLOPs / time\n",
           o->q_heads, o->block_size, o->top_k);
    printf("|      T |  G |   D | auto |  auto ms | TFLOP/s |   fsa ms |   nsa ms | workspace B | fsa-vs-nsa |%s\n",
           o->backward ? " bwd  |   bwd ms | TFLOP/s | bwd fsa  | bwd nsa  |   f+b ms | bwd ws B    | dq fsa-nsa | peak ws B   |"
                       : "");
    printf("|--------|----|-----|------|----------|---------|----------|----------|-------------|------------|%s\n",
           o->backward ? "------|----------|---------|----------|----------|----------|-------------|------------|-------------|"
                       : "");
}

/* The problem table of the benchmark protocol: T 8192 and 65536 x G 1..16 at
 * D 128, plus T 16384 G 4 at D 64 and 256. */
static int run_standard(fsa_context *ctx, const options *o, const device_info *d, FILE *json)
{
    static const int Ts[] = {8192, 65536}, Gs[] = {1, 2, 4, 8, 16}, Ds[] = {64, 256};
    bench_row row;
    int first = 1;
    print_table_head(o, json, d, ctx);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t gi = 0; gi < 5; gi++, first = 0) {
            run_row(ctx, o, Ts[ti], Gs[gi], 128, &row, d->l2_bytes);
            print_row(&row, json, first);
        }
    for (size_t di = 0; di < 2; di++) {
        run_row(ctx, o, 16384, 4, Ds[di], &row, d->l2_bytes);
        print_row(&row, json, 0);
    }
    return TOOL_EXIT_OK;
}

/* Every -T x -G combination whose G divides --q-heads. */
static int run_grid(fsa_context *ctx, const options *o, const device_info *d, FILE *json)
{
    bench_row row;
    int first = 1;
    print_table_head(o, json, d, ctx);
    for (int ti = 0; ti < o->n_tokens; ti++)
        for (int gi = 0; gi < o->n_groups; gi++) {
            if (o->q_heads % o->groups[gi]) continue;
            run_row(ctx, o, o->tokens[ti], o->groups[gi], o->head_dim, &row, d->l2_bytes);
            print_row(&row, json, first);
            first = 0;
        }
    return TOOL_EXIT_OK;
}

static int run_jit_mode(fsa_context *ctx, const options *o, const device_info *d, FILE *json)
{
    (void)ctx, (void)d, (void)json;
    run_jit(o, "/proc/self/exe");
    return TOOL_EXIT_OK;
}

/* One entry per mode: the option that selects it and what it runs. A new
 * mode adds a value to bench_mode, a line here, and its option below. */
typedef int (*mode_fn)(fsa_context *ctx, const options *o, const device_info *d, FILE *json);
static const struct {
    bench_mode mode;
    const char *option;
    mode_fn run;
    int writes_json;
} k_modes[] = {
    {MODE_GRID, "-T/-G", run_grid, 1},
    {MODE_STANDARD, "--standard", run_standard, 1},
    {MODE_JIT, "--jit", run_jit_mode, 0},
};

/* ------------------------------------------------------------ options */

static void print_usage(FILE *f)
{
    fprintf(f,
            "Usage: fsa-bench [-T LIST] [-G LIST] [OPTIONS]     time every T x G combination\n"
            "       fsa-bench --standard [OPTIONS]             the benchmark protocol's problem table\n"
            "       fsa-bench --jit                            compile, cache-hit and launch overheads\n"
            "       fsa-bench --decode [DECODE OPTIONS]        paged KV-cache decode (fsa-bench --decode --help)\n"
            "       fsa-bench --compressed [OPTIONS]           compressed attention with the top-k selection\n"
            "                                                  (fsa-bench --compressed --help)\n"
            "       fsa-bench --window [OPTIONS]               sliding-window attention (fsa-bench --window --help)\n"
            "\n"
            "Problem:\n"
            "  -T LIST               token counts, comma-separated (default 8192; at most %d values)\n"
            "  -G LIST               query heads per KV head (default 1,2,4,8,16; at most %d values)\n"
            "  -D N                  head dim (default 128)\n"
            "  --value-dim N         head dim of v and o when it differs from -D (NSA: -D 192 --value-dim 128)\n"
            "  --q-heads N           query heads (default 32)\n"
            "  --block-size N        keys per selectable block (default 64)\n"
            "  --top-k N             selected blocks per token (default 16)\n"
            "  --dtype T             " TOOL_DTYPE_SPELLINGS " (default bf16)\n"
            "  --workspace-limit B   cap on each call's workspace, forward and backward; suffixes K, M,\n"
            "                        G, T; 0 = the library's default cap (the default), 'unlimited' = none\n"
            "Runs:\n"
            "  --only fsa|nsa        time one path only (default both, and AUTO)\n"
            "  --backward            also the backward of each dq order and AUTO forward + backward\n"
            "  --min-ms MS           repeats cover at least this much (default 100)\n"
            "  --warmup-ms MS        warm-up before timing (default 25)\n"
            "  --cache-dir DIR       kernel cache (default $FSA_CACHE_DIR, ...)\n"
            "  --json FILE           also write the rows as JSON (null where a value does not exist)\n"
            "  --tune                measure each row's token bucket first (tuning on; records go to the\n"
            "                        cache) so that AUTO takes the measured choice; JSON gives both\n"
            "  --dry-run             print what would run and exit, without a GPU\n"
            "  -h, --help            this text\n"
            "  --version             the library version\n"
            "\n"
            "Exit status: 0 success; 1 a benchmark failed; 2 usage error; 3 no CUDA driver or no\n"
            "usable GPU.\n",
            MAX_LIST, MAX_LIST);
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("fsa-bench: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    print_usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* Comma-separated positive numbers, at most MAX_LIST of them. */
static int parse_list(const char *text, int *out, int *n_out, const char *option)
{
    const int rc = tool_parse_list(out, n_out, MAX_LIST, text, 1, 1L << 30);
    if (rc == -2) {
        char what[64];
        snprintf(what, sizeof what, "%s: more than %d values", option, MAX_LIST);
        return usage_error("%s", what);
    }
    return rc == 0 ? 0 : usage_error("%s: not a list of positive numbers", option);
}

static int parse_int(int *out, const char *text, long min, long max, const char *option)
{
    long v;
    if (tool_parse_long(&v, text, min, max) != 0) return usage_error("%s: not a number in range", option);
    *out = (int)v;
    return 0;
}

enum {
    OPT_STANDARD = 256,
    OPT_JIT,
    OPT_JIT_CHILD,
    OPT_BACKWARD,
    OPT_Q_HEADS,
    OPT_BLOCK_SIZE,
    OPT_TOP_K,
    OPT_VALUE_DIM,
    OPT_DTYPE,
    OPT_MIN_MS,
    OPT_WARMUP_MS,
    OPT_WORKSPACE_LIMIT,
    OPT_CACHE_DIR,
    OPT_JSON,
    OPT_ONLY,
    OPT_DRY_RUN,
    OPT_VERSION,
    OPT_TUNE
};

static const struct option k_long_options[] = {
    {"standard", no_argument, NULL, OPT_STANDARD},
    {"jit", no_argument, NULL, OPT_JIT},
    {"jit-child", required_argument, NULL, OPT_JIT_CHILD}, /* internal: the second process of --jit */
    {"backward", no_argument, NULL, OPT_BACKWARD},
    {"q-heads", required_argument, NULL, OPT_Q_HEADS},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"value-dim", required_argument, NULL, OPT_VALUE_DIM},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"min-ms", required_argument, NULL, OPT_MIN_MS},
    {"warmup-ms", required_argument, NULL, OPT_WARMUP_MS},
    {"workspace-limit", required_argument, NULL, OPT_WORKSPACE_LIMIT},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"json", required_argument, NULL, OPT_JSON},
    {"only", required_argument, NULL, OPT_ONLY},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"tune", no_argument, NULL, OPT_TUNE},
    {NULL, 0, NULL, 0},
};

static int set_mode(options *o, bench_mode mode, int *mode_given)
{
    if (*mode_given && o->mode != mode) return usage_error("%s", "--standard and --jit exclude each other");
    o->mode = mode;
    *mode_given = 1;
    return 0;
}

/* Fills *o; returns -1 to go on, else the exit code (help, version, usage
 * error). *jit_child is set for the internal second process of --jit. */
static int parse_args(options *o, const char **jit_child, int argc, char **argv)
{
    int mode_given = 0, grid_given = 0;
    opterr = 0; /* our own messages and exit status */
    for (;;) {
        int c = getopt_long(argc, argv, ":hT:G:D:", k_long_options, NULL), rc = 0;
        if (c == -1) break;
        switch (c) {
        case 'h': print_usage(stdout); return TOOL_EXIT_OK;
        case OPT_VERSION: printf("fsa-bench %s\n", fsa_version_string()); return TOOL_EXIT_OK;
        case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
        case '?': return usage_error("unknown option '%s'", argv[optind - 1]);
        case 'T': rc = parse_list(optarg, o->tokens, &o->n_tokens, "-T"), grid_given = 1; break;
        case 'G': rc = parse_list(optarg, o->groups, &o->n_groups, "-G"), grid_given = 1; break;
        case 'D': rc = parse_int(&o->head_dim, optarg, 1, 1 << 16, "-D"); break;
        case OPT_Q_HEADS: rc = parse_int(&o->q_heads, optarg, 1, 1 << 16, "--q-heads"); break;
        case OPT_BLOCK_SIZE: rc = parse_int(&o->block_size, optarg, 1, 1 << 16, "--block-size"); break;
        case OPT_TOP_K: rc = parse_int(&o->top_k, optarg, 1, 1 << 16, "--top-k"); break;
        case OPT_VALUE_DIM: rc = parse_int(&o->value_dim, optarg, 1, 1 << 16, "--value-dim"); break;
        case OPT_DTYPE:
            if (tool_parse_dtype(&o->dtype, optarg) != 0)
                return usage_error("--dtype: '%s' is not one of " TOOL_DTYPE_SPELLINGS, optarg);
            break;
        case OPT_MIN_MS:
            if (tool_parse_double(&o->min_ms, optarg, 0.0, 1e7) != 0) return usage_error("--min-ms: '%s'", optarg);
            break;
        case OPT_WARMUP_MS:
            if (tool_parse_double(&o->warmup_ms, optarg, 0.0, 1e7) != 0)
                return usage_error("--warmup-ms: '%s'", optarg);
            break;
        case OPT_WORKSPACE_LIMIT:
            if (strcmp(optarg, "unlimited") == 0) o->workspace_limit = FSA_WORKSPACE_UNLIMITED;
            else if (tool_parse_bytes(&o->workspace_limit, optarg) != 0)
                return usage_error("--workspace-limit: '%s' is not a byte count (e.g. 512M, 2G) or 'unlimited'",
                                   optarg);
            break;
        case OPT_CACHE_DIR: o->cache_dir = optarg; break;
        case OPT_JSON: o->json = optarg; break;
        case OPT_ONLY:
            if (strcmp(optarg, "fsa") == 0) o->only = FSA_ALGORITHM_FSA;
            else if (strcmp(optarg, "nsa") == 0) o->only = FSA_ALGORITHM_NSA;
            else return usage_error("--only: '%s' is not fsa or nsa", optarg);
            break;
        case OPT_BACKWARD: o->backward = 1; break;
        case OPT_DRY_RUN: o->dry_run = 1; break;
        case OPT_TUNE: o->tune = 1; break;
        case OPT_STANDARD: rc = set_mode(o, MODE_STANDARD, &mode_given); break;
        case OPT_JIT: rc = set_mode(o, MODE_JIT, &mode_given); break;
        case OPT_JIT_CHILD: *jit_child = optarg; break;
        default: return usage_error("%s", "internal option error");
        }
        if (rc != 0) return rc;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (grid_given && o->mode != MODE_GRID) return usage_error("%s", "-T and -G do not apply to --standard or --jit");
    return -1;
}

static void print_plan(const options *o)
{
    char limit[48];
    if (o->workspace_limit == FSA_WORKSPACE_UNLIMITED) snprintf(limit, sizeof limit, "unlimited");
    else if (o->workspace_limit == 0) snprintf(limit, sizeof limit, "default");
    else snprintf(limit, sizeof limit, "%llu B", (unsigned long long)o->workspace_limit);
    char dv[24] = "";
    if (o->value_dim) snprintf(dv, sizeof dv, ", Dv %d", o->value_dim);
    printf("# fsa-bench %s: %s, D %d%s, Hq %d, BK %d, K %d, dtype %s, workspace limit %s%s%s\n",
           fsa_version_string(), k_modes[o->mode].option, o->head_dim, dv, o->q_heads, o->block_size, o->top_k,
           tool_dtype_name(o->dtype), limit, o->backward ? ", backward" : "",
           o->only ? (o->only == FSA_ALGORITHM_FSA ? ", only fsa" : ", only nsa") : "");
    if (o->mode == MODE_GRID) {
        printf("# T");
        for (int i = 0; i < o->n_tokens; i++) printf("%s%d", i ? "," : " ", o->tokens[i]);
        printf("; G");
        for (int i = 0; i < o->n_groups; i++) printf("%s%d", i ? "," : " ", o->groups[i]);
        printf("\n");
    }
}

/* Loads the driver and makes the library's context (the device's primary
 * context) current; 0 or an exit code. */
static int open_device(fsa_context **ctx, device_info *d, const options *o)
{
    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0) {
        fprintf(stderr, "fsa-bench: %s\n", why);
        return TOOL_EXIT_TARGET;
    }
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.cache_dir = o->cache_dir;
    if (o->tune) co.tune = FSA_TUNE_ON;
    fsa_status st = fsa_context_create(ctx, &co);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench: %s\n", fsa_last_error());
        return tool_context_exit_code(st);
    }
    CUcontext pctx;
    int l2 = 0;
    CU(cu.Init(0));
    CU(cu.DeviceGet(&d->dev, 0));
    CU(cu.DevicePrimaryCtxRetain(&pctx, d->dev));
    CU(cu.CtxSetCurrent(pctx));
    CU(cu.DeviceGetName(d->name, sizeof d->name, d->dev));
    CU(cu.DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d->dev));
    d->l2_bytes = (size_t)l2;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--decode") == 0) return fsa_bench_decode(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--compressed") == 0 || strcmp(argv[1], "--window") == 0))
        return fsa_bench_branches(argc - 1, argv + 1);
    options o = {.mode = MODE_GRID, .tokens = {8192}, .n_tokens = 1, .groups = {1, 2, 4, 8, 16}, .n_groups = 5,
                 .head_dim = 128, .q_heads = 32, .block_size = 64, .top_k = 16, .dtype = FSA_DTYPE_BF16,
                 .min_ms = 100.0, .warmup_ms = 25.0};
    const char *jit_child = NULL;
    int rc = parse_args(&o, &jit_child, argc, argv);
    if (rc >= 0) return rc;
    char why[512];
    if (jit_child) {
        if (bench_cuda_load(why, sizeof why) != 0) return fprintf(stderr, "fsa-bench: %s\n", why), TOOL_EXIT_TARGET;
        CU(cu.Init(0));
        return jit_child_run(jit_child);
    }
    print_plan(&o);
    if (o.dry_run) return TOOL_EXIT_OK;

    fsa_context *ctx = NULL;
    device_info dev;
    rc = open_device(&ctx, &dev, &o);
    if (rc != 0) return rc;
    printf("# on %s (%s)\n", dev.name, fsa_context_target(ctx));

    FILE *json = NULL;
    if (o.json && k_modes[o.mode].writes_json) {
        json = fopen(o.json, "w");
        if (!json) {
            fprintf(stderr, "fsa-bench: cannot write %s\n", o.json);
            fsa_context_destroy(ctx);
            return TOOL_EXIT_FAILED;
        }
    }
    rc = k_modes[o.mode].run(ctx, &o, &dev, json);
    if (json) {
        fprintf(json, "\n]}\n");
        if (fclose(json) != 0) rc = TOOL_EXIT_FAILED;
    }
    CU(cu.DevicePrimaryCtxRelease(dev.dev));
    fsa_context_destroy(ctx);
    return rc;
}
