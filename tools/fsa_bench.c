/*
 * fsa-bench: times selected attention through the public API on a GPU.
 *
 * Protocol (BENCHMARKS.md): random standard-normal q, k, v; per KV head and
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
#include "bench_decode.h"

#include <cuda.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CU(call)                                                                              \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                             \
            const char *n_ = "?";                                                             \
            cuGetErrorName(r_, &n_);                                                          \
            fprintf(stderr, "fsa-bench: %s failed: %s (%s:%d)\n", #call, n_, __FILE__, __LINE__); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define FSA(call)                                                                             \
    do {                                                                                      \
        fsa_status s_ = (call);                                                               \
        if (s_ != FSA_STATUS_OK) {                                                            \
            fprintf(stderr, "fsa-bench: %s failed: %s\n", #call, fsa_last_error());           \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

typedef struct options {
    int tokens[8], n_tokens;
    int groups[8], n_groups;
    int head_dim;
    int q_heads;
    int block_size;
    int top_k;
    fsa_dtype dtype;
    int standard;
    int jit;
    double min_ms;
    double warmup_ms;
    const char *json;
    const char *cache_dir;
    uint64_t workspace_limit;
    int only; /* 0 = both paths, else the one fsa_algorithm to time */
    int backward;
} options;

/* ------------------------------------------------------------ inputs */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t to_f16(float x)
{
    /* Inputs are standard normal: no overflow or subnormal handling needed
     * beyond flushing tiny values to zero. */
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a < 0x38800000u) return (uint16_t)sign;
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return sign ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);
    uint32_t u = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct gen_job {
    uint16_t *dst;
    size_t begin, end;
    uint64_t seed;
    fsa_dtype dtype;
} gen_job;

static void *gen_normal(void *arg)
{
    gen_job *j = arg;
    uint64_t s = j->seed;
    for (size_t i = j->begin; i < j->end; i += 2) {
        double u1 = ((splitmix(&s) >> 11) + 1) * 0x1.0p-53, u2 = (splitmix(&s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        float a = (float)(r * cos(6.283185307179586 * u2)), b = (float)(r * sin(6.283185307179586 * u2));
        j->dst[i] = j->dtype == FSA_DTYPE_BF16 ? to_bf16(a) : to_f16(a);
        if (i + 1 < j->end) j->dst[i + 1] = j->dtype == FSA_DTYPE_BF16 ? to_bf16(b) : to_f16(b);
    }
    return NULL;
}

static int n_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static void fill_normal(uint16_t *dst, size_t n, uint64_t seed, fsa_dtype dt)
{
    int nt = n_threads();
    pthread_t th[64];
    gen_job jobs[64];
    size_t per = (n / nt + 1) & ~(size_t)1;
    for (int i = 0; i < nt; i++) {
        size_t b = (size_t)i * per, e = b + per < n ? b + per : n;
        jobs[i] = (gen_job){dst, b < n ? b : n, e, seed * 1000003u + (uint64_t)i, dt};
        pthread_create(&th[i], NULL, gen_normal, &jobs[i]);
    }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
}

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
                    int b = (int)(splitmix(&s) % (uint64_t)(c + 1)), dup = 0;
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
    int nt = n_threads();
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
    fsa_algorithm chosen;
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
    CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    int rep = 0;
    double start = now_ms();
    do { /* warm-up */
        call(user, rep++ % n_sets);
        CU(cuStreamSynchronize(NULL));
    } while (now_ms() - start < o->warmup_ms);
    enum { MAX_REPS = 4096 };
    static double times[MAX_REPS];
    int n = 0;
    double total = 0;
    while (n < MAX_REPS && (total < o->min_ms || n < 10)) {
        const int set = rep++ % n_sets;
        CU(cuEventRecord(e0, NULL));
        call(user, set);
        CU(cuEventRecord(e1, NULL));
        CU(cuEventSynchronize(e1));
        float ms;
        CU(cuEventElapsedTime(&ms, e0, e1));
        times[n++] = ms;
        total += ms;
        if (ms > 400.0 && n >= 3) break; /* very slow rows: three repeats are enough */
    }
    qsort(times, (size_t)n, sizeof(double), cmp_double);
    CU(cuEventDestroy(e0));
    CU(cuEventDestroy(e1));
    *reps_out = n;
    return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
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
    c->args->q = s->q, c->args->k = s->k, c->args->v = s->v, c->args->topk = s->topk;
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
        c->fwd->q = s->q, c->fwd->k = s->k, c->fwd->v = s->v, c->fwd->topk = s->topk;
        FSA(fsa_selected_attention_fwd(c->plan, c->fwd, NULL));
    }
    c->bwd->q = s->q, c->bwd->k = s->k, c->bwd->v = s->v, c->bwd->topk = s->topk;
    FSA(fsa_selected_attention_bwd(c->plan, c->bwd, NULL));
}

static double rel_diff(const uint16_t *a, const uint16_t *b, size_t n, fsa_dtype dt)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = dt == FSA_DTYPE_BF16 ? from_bf16(a[i]) : from_f16(a[i]);
        double y = dt == FSA_DTYPE_BF16 ? from_bf16(b[i]) : from_f16(b[i]);
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
    const int T = row->T, hq = o->q_heads, hkv = row->hkv, D = row->D, K = o->top_k;
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.dtype = o->dtype;
    d.head_dim = D;
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
    const size_t nq = (size_t)T * hq * D, nkv = (size_t)T * hkv * D;
    size_t ws_f = 0, ws_b = 0;
    FSA(fsa_plan_workspace_size(&ws_f, plan, T, 1));
    FSA(fsa_plan_workspace_size_bwd(&ws_b, plan, T, 1));
    CUdeviceptr o_buf, lse, dout, dk, dv, ws;
    CU(cuMemAlloc(&o_buf, nq * 2));
    CU(cuMemAlloc(&lse, (size_t)hq * T * 4));
    CU(cuMemAlloc(&dout, nq * 2));
    CU(cuMemAlloc(&dk, nkv * 2));
    CU(cuMemAlloc(&dv, nkv * 2));
    CU(cuMemAlloc(&ws, ws_f > ws_b ? ws_f : ws_b));
    uint16_t *h = malloc(nq * 2);
    fill_normal(h, nq, 777u + (uint64_t)T, o->dtype);
    CU(cuMemcpyHtoD(dout, h, nq * 2));
    free(h);
    fsa_fwd_args fa = FSA_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.batch = 1, fa.max_seqlen = T;
    fa.o = o_buf, fa.lse = lse;
    fa.q_token_stride = fa.o_token_stride = (int64_t)hq * D, fa.q_head_stride = fa.o_head_stride = D;
    fa.k_token_stride = fa.v_token_stride = (int64_t)hkv * D, fa.k_head_stride = fa.v_head_stride = D;
    fa.topk_head_stride = (int64_t)T * K, fa.topk_token_stride = K;
    fa.cu_seqlens = cu_dev, fa.workspace = ws, fa.workspace_bytes = ws_f > ws_b ? ws_f : ws_b;
    fsa_bwd_args ba = FSA_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = 1, ba.max_seqlen = T;
    ba.o = o_buf, ba.dout = dout, ba.dq = dq_out, ba.dk = dk, ba.dv = dv, ba.lse = lse;
    ba.q_token_stride = ba.o_token_stride = ba.dout_token_stride = ba.dq_token_stride = (int64_t)hq * D;
    ba.q_head_stride = ba.o_head_stride = ba.dout_head_stride = ba.dq_head_stride = D;
    ba.k_token_stride = ba.v_token_stride = ba.dk_token_stride = ba.dv_token_stride = (int64_t)hkv * D;
    ba.k_head_stride = ba.v_head_stride = ba.dk_head_stride = ba.dv_head_stride = D;
    ba.topk_head_stride = (int64_t)T * K, ba.topk_token_stride = K;
    ba.cu_seqlens = cu_dev, ba.workspace = ws, ba.workspace_bytes = fa.workspace_bytes;
    /* The forward's o and lse of set 0 feed every backward repeat. */
    fa.q = sets[0].q, fa.k = sets[0].k, fa.v = sets[0].v, fa.topk = sets[0].topk;
    FSA(fsa_selected_attention_fwd(plan, &fa, NULL));
    CU(cuStreamSynchronize(NULL));
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
    CU(cuStreamSynchronize(NULL));
    CU(cuMemFree(o_buf));
    CU(cuMemFree(lse));
    CU(cuMemFree(dout));
    CU(cuMemFree(dk));
    CU(cuMemFree(dv));
    CU(cuMemFree(ws));
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
        CU(cuMemAlloc(&dq[a], nq * 2));
        time_backward_path(ctx, o, row, sets, n_sets, cu_dev, (fsa_algorithm)a, dq[a]);
    }
    CU(cuMemAlloc(&dq[0], nq * 2));
    time_backward_path(ctx, o, row, sets, n_sets, cu_dev, FSA_ALGORITHM_AUTO, dq[0]);
    if (dq[FSA_ALGORITHM_FSA] && dq[FSA_ALGORITHM_NSA]) {
        uint16_t *x = malloc(nq * 2), *y = malloc(nq * 2);
        if (x && y) {
            CU(cuMemcpyDtoH(x, dq[FSA_ALGORITHM_FSA], nq * 2));
            CU(cuMemcpyDtoH(y, dq[FSA_ALGORITHM_NSA], nq * 2));
            row->bwd_rel_diff = rel_diff(x, y, nq, o->dtype);
        }
        free(x);
        free(y);
    }
    for (int a = 0; a < 3; a++)
        if (dq[a]) CU(cuMemFree(dq[a]));
}

static void run_row(fsa_context *ctx, const options *o, int T, int G, int D, bench_row *row, size_t l2_bytes)
{
    const int hq = o->q_heads, hkv = hq / G, K = o->top_k, BK = o->block_size;
    memset(row, 0, sizeof *row);
    row->T = T, row->G = G, row->D = D, row->hkv = hkv;
    for (int i = 0; i < 3; i++) row->ms[i] = -1;

    fsa_plan *plans[3] = {NULL, NULL, NULL};
    for (int a = 0; a < 3; a++) {
        fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
        d.dtype = o->dtype;
        d.head_dim = D;
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
    FSA(fsa_plan_algorithm(&row->chosen, &row->reason, plans[0], T));

    const size_t nq = (size_t)T * hq * D, nkv = (size_t)T * hkv * D, nsel = (size_t)hkv * T * K;
    const size_t input_bytes = (nq + 2 * nkv) * 2 + nsel * 4;
    int n_sets = input_bytes < 4 * l2_bytes ? (int)((4 * l2_bytes + input_bytes - 1) / input_bytes) : 1;
    if (n_sets > 4) n_sets = 4;

    uint16_t *h = malloc((nq > nkv ? nq : nkv) * 2);
    int32_t *sel = malloc(nsel * 4);
    if (!h || !sel) {
        fprintf(stderr, "fsa-bench: out of host memory\n");
        exit(1);
    }
    input_set sets[4];
    for (int s = 0; s < n_sets; s++) {
        CU(cuMemAlloc(&sets[s].q, nq * 2));
        CU(cuMemAlloc(&sets[s].k, nkv * 2));
        CU(cuMemAlloc(&sets[s].v, nkv * 2));
        CU(cuMemAlloc(&sets[s].topk, nsel * 4));
        uint64_t seed = 1000u * (uint64_t)s + (uint64_t)T * 31u + (uint64_t)G;
        fill_normal(h, nq, seed + 1, o->dtype);
        CU(cuMemcpyHtoD(sets[s].q, h, nq * 2));
        fill_normal(h, nkv, seed + 2, o->dtype);
        CU(cuMemcpyHtoD(sets[s].k, h, nkv * 2));
        fill_normal(h, nkv, seed + 3, o->dtype);
        CU(cuMemcpyHtoD(sets[s].v, h, nkv * 2));
        fill_selection(sel, hkv, T, K, BK, seed + 4);
        CU(cuMemcpyHtoD(sets[s].topk, sel, nsel * 4));
    }
    int64_t entries = 0;
    for (size_t i = 0; i < nsel; i++) entries += sel[i] >= 0;
    row->flops = 4.0 * (double)entries * G * BK * D * ((double)n_sets > 0 ? 1.0 : 0.0);
    /* Every set draws from the same distribution; the count of the last one stands for all. */

    int32_t cu_host[2] = {0, T};
    CUdeviceptr cu_dev, out[3] = {0, 0, 0};
    CU(cuMemAlloc(&cu_dev, 8));
    CU(cuMemcpyHtoD(cu_dev, cu_host, 8));
    size_t ws_max = 0;
    for (int a = 0; a < 3; a++) {
        if (!plans[a]) continue;
        FSA(fsa_plan_workspace_size(&row->ws[a], plans[a], T, 1));
        if (row->ws[a] > ws_max) ws_max = row->ws[a];
    }
    CUdeviceptr ws = 0;
    if (ws_max) CU(cuMemAlloc(&ws, ws_max));

    for (int a = 1; a < 3; a++) {
        /* AUTO runs one of the forced paths: its time is that path's. */
        if (!plans[a] || (o->only && o->only != a)) continue;
        CU(cuMemAlloc(&out[a], nq * 2));
        fsa_fwd_args args = FSA_FWD_ARGS_INIT;
        args.total_tokens = T;
        args.batch = 1;
        args.max_seqlen = T;
        args.o = out[a];
        args.q_token_stride = (int64_t)hq * D, args.q_head_stride = D;
        args.k_token_stride = args.v_token_stride = (int64_t)hkv * D;
        args.k_head_stride = args.v_head_stride = D;
        args.o_token_stride = (int64_t)hq * D, args.o_head_stride = D;
        args.topk_head_stride = (int64_t)T * K, args.topk_token_stride = K;
        args.cu_seqlens = cu_dev;
        args.workspace = ws;
        args.workspace_bytes = ws_max;
        fwd_call fc = {plans[a], &args, sets};
        row->ms[a] = time_call(call_forward, &fc, n_sets, o, &row->reps[a]);
        /* Leave the output of the last set's inputs for the comparison. */
        args.q = sets[0].q, args.k = sets[0].k, args.v = sets[0].v, args.topk = sets[0].topk;
        FSA(fsa_selected_attention_fwd(plans[a], &args, NULL));
        CU(cuStreamSynchronize(NULL));
    }
    row->ms[0] = row->ms[row->chosen]; /* -1 when --only left the chosen path out */
    row->reps[0] = row->reps[row->chosen];
    row->rel_diff = NAN;
    if (out[FSA_ALGORITHM_FSA] && out[FSA_ALGORITHM_NSA]) {
        uint16_t *x = malloc(nq * 2), *y = malloc(nq * 2);
        if (x && y) {
            CU(cuMemcpyDtoH(x, out[FSA_ALGORITHM_FSA], nq * 2));
            CU(cuMemcpyDtoH(y, out[FSA_ALGORITHM_NSA], nq * 2));
            row->rel_diff = rel_diff(x, y, nq, o->dtype);
        }
        free(x);
        free(y);
    }
    row->bwd_ms[0] = row->bwd_ms[1] = row->bwd_ms[2] = row->fwd_bwd_ms = -1;
    row->bwd_rel_diff = NAN;
    row->bwd_chosen = FSA_ALGORITHM_AUTO;
    if (o->backward) time_backward(ctx, o, row, sets, n_sets, cu_dev);
    for (int a = 0; a < 3; a++) {
        if (out[a]) CU(cuMemFree(out[a]));
        fsa_plan_destroy(plans[a]);
    }
    if (ws) CU(cuMemFree(ws));
    CU(cuMemFree(cu_dev));
    for (int s = 0; s < n_sets; s++) {
        CU(cuMemFree(sets[s].q));
        CU(cuMemFree(sets[s].k));
        CU(cuMemFree(sets[s].v));
        CU(cuMemFree(sets[s].topk));
    }
    free(h);
    free(sel);
}


static void print_row(const bench_row *r, FILE *json, int first)
{
    double best = r->ms[0];
    printf("| %6d | %2d | %3d | %-4s | %8.3f | %7.1f | %8.3f | %8.3f | %11zu | %.2e |", r->T, r->G, r->D,
           alg_name(r->chosen), best, r->flops / (best * 1e-3) / 1e12, r->ms[1], r->ms[2], r->ws[0], r->rel_diff);
    if (r->bwd_ms[0] >= 0)
        printf(" %-4s | %8.3f | %7.1f | %8.3f | %8.3f | %8.3f | %11zu | %.2e |", alg_name(r->bwd_chosen), r->bwd_ms[0],
               2.5 * r->flops / (r->bwd_ms[0] * 1e-3) / 1e12, r->bwd_ms[1], r->bwd_ms[2], r->fwd_bwd_ms, r->bwd_ws,
               r->bwd_rel_diff);
    printf("\n");
    fflush(stdout);
    if (json) {
        fprintf(json,
                "%s  {\"T\": %d, \"G\": %d, \"D\": %d, \"auto\": \"%s\", \"reason\": \"%s\", \"ms_auto\": %.4f, "
                "\"ms_fsa\": %.4f, \"ms_nsa\": %.4f, \"reps\": [%d, %d, %d], \"tflops_auto\": %.2f, "
                "\"gflop\": %.3f, \"workspace_bytes_auto\": %zu, \"workspace_bytes_fsa\": %zu, "
                "\"rel_diff_fsa_vs_nsa\": %.3e, \"bwd_auto\": \"%s\", \"ms_bwd\": %.4f, \"ms_bwd_fsa\": %.4f, "
                "\"ms_bwd_nsa\": %.4f, \"ms_fwd_bwd\": %.4f, \"workspace_bytes_bwd\": %zu, "
                "\"rel_diff_bwd_dq_fsa_vs_nsa\": %.3e}",
                first ? "" : ",\n", r->T, r->G, r->D, alg_name(r->chosen), r->reason, r->ms[0], r->ms[1], r->ms[2],
                r->reps[0], r->reps[1], r->reps[2], r->flops / (r->ms[0] * 1e-3) / 1e12, r->flops / 1e9, r->ws[0],
                r->ws[1], r->rel_diff, alg_name(r->bwd_chosen), r->bwd_ms[0], r->bwd_ms[1], r->bwd_ms[2],
                r->fwd_bwd_ms, r->bwd_ws, r->bwd_rel_diff);
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
static int jit_child(const char *cache_dir)
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
    CU(cuModuleLoadData(&mod, empty_ptx));
    CU(cuModuleGetFunction(&fn, mod, "bench_empty"));
    CUdeviceptr buf;
    CU(cuMemAlloc(&buf, 1 << 20));
    FSA(fsa_fill_u32(ctx, buf, 0, 256, NULL));
    CU(cuStreamSynchronize(NULL));
    enum { N = 20000 };
    unsigned long long n = 256;
    uint32_t value = 0;
    void *args[] = {&buf, &value, &n};
    double best_bare = 1e9, best_fill = 1e9;
    for (int round = 0; round < 5; round++) {
        double t0 = now_ms();
        for (int i = 0; i < N; i++) CU(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        double bare = (now_ms() - t0) * 1e3 / N;
        CU(cuStreamSynchronize(NULL));
        t0 = now_ms();
        for (int i = 0; i < N; i++) FSA(fsa_fill_u32(ctx, buf, 0, 256, NULL));
        double lib = (now_ms() - t0) * 1e3 / N;
        CU(cuStreamSynchronize(NULL));
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
        CUdeviceptr q, k, v, out, topk, cu, ws;
        CU(cuMemAlloc(&q, (size_t)T * hq * D * 2));
        CU(cuMemAlloc(&k, (size_t)T * hkv * D * 2));
        CU(cuMemAlloc(&v, (size_t)T * hkv * D * 2));
        CU(cuMemAlloc(&out, (size_t)T * hq * D * 2));
        CU(cuMemAlloc(&topk, (size_t)hkv * T * K * 4));
        CU(cuMemAlloc(&cu, 8));
        CU(cuMemAlloc(&ws, ws_bytes));
        CU(cuMemsetD8(q, 0, (size_t)T * hq * D * 2));
        CU(cuMemsetD8(k, 0, (size_t)T * hkv * D * 2));
        CU(cuMemsetD8(v, 0, (size_t)T * hkv * D * 2));
        CU(cuMemsetD8(topk, 0, (size_t)hkv * T * K * 4)); /* block 0 in every slot: one valid, the rest repeats */
        int32_t cu_host[2] = {0, T};
        CU(cuMemcpyHtoD(cu, cu_host, 8));
        fsa_fwd_args a = FSA_FWD_ARGS_INIT;
        a.total_tokens = T, a.batch = 1, a.q = q, a.k = k, a.v = v, a.o = out;
        a.q_token_stride = a.o_token_stride = (int64_t)hq * D, a.q_head_stride = a.o_head_stride = D;
        a.k_token_stride = a.v_token_stride = (int64_t)hkv * D, a.k_head_stride = a.v_head_stride = D;
        a.topk = topk, a.topk_head_stride = (int64_t)T * K, a.topk_token_stride = K;
        a.cu_seqlens = cu, a.workspace = ws, a.workspace_bytes = ws_bytes;
        enum { CALLS = 150, ROUNDS = 20 };
        double best = 1e9;
        for (int round = 0; round < ROUNDS; round++) {
            CU(cuStreamSynchronize(NULL));
            double t0 = now_ms();
            for (int i = 0; i < CALLS; i++) FSA(fsa_selected_attention_fwd(plan, &a, NULL));
            double us = (now_ms() - t0) * 1e3 / CALLS;
            if (us < best) best = us;
        }
        CU(cuStreamSynchronize(NULL));
        printf("host time per forward call (FSA path, memset + 4 launches; best of %d x %d): %.2f us\n", ROUNDS,
               CALLS, best);
        CU(cuMemFree(q));
        CU(cuMemFree(k));
        CU(cuMemFree(v));
        CU(cuMemFree(out));
        CU(cuMemFree(topk));
        CU(cuMemFree(cu));
        CU(cuMemFree(ws));
        fsa_plan_destroy(plan);
    }
    (void)o;
    CU(cuMemFree(buf));
    CU(cuModuleUnload(mod));
    fsa_context_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "fsa-bench: could not remove %s\n", dir);
}

/* ------------------------------------------------------------ main */

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < cap; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end != '\0' || v <= 0) {
            free(copy);
            return -1;
        }
        out[n++] = (int)v;
    }
    free(copy);
    return n;
}

static void usage(void)
{
    printf("usage: fsa-bench [--standard] [-T LIST] [-G LIST] [-D N] [--q-heads N] [--block-size N]\n"
           "                 [--top-k N] [--dtype bf16|f16] [--min-ms MS] [--warmup-ms MS]\n"
           "                 [--workspace-limit BYTES] [--cache-dir DIR] [--json FILE] [--only fsa|nsa]\n"
           "                 [--backward] [--jit]\n"
           "  --backward  also time the backward of each dq order (as --only allows) and of AUTO, forward +\n"
           "              backward (AUTO), and compare the two orders' dq (2.5x the forward FLOPs)\n"
           "  --standard  the problem table of BENCHMARKS.md (T 8192 and 65536 x G 1,2,4,8,16 at D 128,\n"
           "              plus T 16384 G 4 at D 64 and 256)\n"
           "  --jit       cold compile, disk-hit and in-memory plan times, host time per launch\n");
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--decode") == 0) return fsa_bench_decode(argc - 1, argv + 1);
    if (argc == 3 && strcmp(argv[1], "--jit-child") == 0) {
        CU(cuInit(0));
        return jit_child(argv[2]);
    }
    options o = {.tokens = {8192}, .n_tokens = 1, .groups = {1, 2, 4, 8, 16}, .n_groups = 5, .head_dim = 128,
                 .q_heads = 32, .block_size = 64, .top_k = 16, .dtype = FSA_DTYPE_BF16, .min_ms = 100.0,
                 .warmup_ms = 25.0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--standard")) o.standard = 1, used = 0;
        else if (!strcmp(a, "--jit")) o.jit = 1, used = 0;
        else if (!strcmp(a, "--backward")) o.backward = 1, used = 0;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!v) return usage(), 2;
        else if (!strcmp(a, "-T")) o.n_tokens = parse_list(v, o.tokens, 8);
        else if (!strcmp(a, "-G")) o.n_groups = parse_list(v, o.groups, 8);
        else if (!strcmp(a, "-D")) o.head_dim = atoi(v);
        else if (!strcmp(a, "--q-heads")) o.q_heads = atoi(v);
        else if (!strcmp(a, "--block-size")) o.block_size = atoi(v);
        else if (!strcmp(a, "--top-k")) o.top_k = atoi(v);
        else if (!strcmp(a, "--dtype")) o.dtype = strcmp(v, "f16") == 0 ? FSA_DTYPE_F16 : FSA_DTYPE_BF16;
        else if (!strcmp(a, "--min-ms")) o.min_ms = atof(v);
        else if (!strcmp(a, "--warmup-ms")) o.warmup_ms = atof(v);
        else if (!strcmp(a, "--workspace-limit")) o.workspace_limit = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--cache-dir")) o.cache_dir = v;
        else if (!strcmp(a, "--json")) o.json = v;
        else if (!strcmp(a, "--only")) o.only = !strcmp(v, "fsa") ? FSA_ALGORITHM_FSA : !strcmp(v, "nsa") ? FSA_ALGORITHM_NSA : -1;
        else return usage(), 2;
        i += used;
    }
    if (o.n_tokens <= 0 || o.n_groups <= 0 || o.head_dim <= 0 || o.q_heads <= 0 || o.only < 0) return usage(), 2;

    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.cache_dir = o.cache_dir;
    fsa_context *ctx = NULL;
    FSA(fsa_context_create(&ctx, &co));
    /* The library's context is the device's primary context: make it current here too. */
    CUdevice dev;
    CUcontext pctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&pctx, dev));
    CU(cuCtxSetCurrent(pctx));
    char name[256];
    CU(cuDeviceGetName(name, sizeof name, dev));
    int l2 = 0;
    CU(cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    printf("# fsa-bench %s on %s (%s), %s\n", fsa_version_string(), name, fsa_context_target(ctx),
           o.dtype == FSA_DTYPE_BF16 ? "bf16" : "f16");

    if (o.jit) {
        run_jit(&o, "/proc/self/exe");
        fsa_context_destroy(ctx);
        return 0;
    }

    FILE *json = o.json ? fopen(o.json, "w") : NULL;
    if (o.json && !json) {
        fprintf(stderr, "fsa-bench: cannot write %s\n", o.json);
        return 1;
    }
    if (json) fprintf(json, "{\"gpu\": \"%s\", \"target\": \"%s\", \"rows\": [\n", name, fsa_context_target(ctx));
    printf("Hq=%d BK=%d K=%d; ms = median CUDA-event time of one forward; TFLOP/s = selected FLOPs / time\n",
           o.q_heads, o.block_size, o.top_k);
    printf("|      T |  G |   D | auto |  auto ms | TFLOP/s |   fsa ms |   nsa ms | workspace B | fsa-vs-nsa |%s\n",
           o.backward ? " bwd  |   bwd ms | TFLOP/s | bwd fsa  | bwd nsa  |   f+b ms | bwd ws B    | dq fsa-nsa |" : "");
    printf("|--------|----|-----|------|----------|---------|----------|----------|-------------|------------|%s\n",
           o.backward ? "------|----------|---------|----------|----------|----------|-------------|------------|" : "");
    int first = 1;
    bench_row row;
    if (o.standard) {
        const int Ts[2] = {8192, 65536};
        const int Gs[5] = {1, 2, 4, 8, 16};
        for (int ti = 0; ti < 2; ti++)
            for (int gi = 0; gi < 5; gi++) {
                run_row(ctx, &o, Ts[ti], Gs[gi], 128, &row, (size_t)l2);
                print_row(&row, json, first);
                first = 0;
            }
        const int Ds[2] = {64, 256};
        for (int di = 0; di < 2; di++) {
            run_row(ctx, &o, 16384, 4, Ds[di], &row, (size_t)l2);
            print_row(&row, json, first);
        }
    } else {
        for (int ti = 0; ti < o.n_tokens; ti++)
            for (int gi = 0; gi < o.n_groups; gi++) {
                if (o.q_heads % o.groups[gi]) continue;
                run_row(ctx, &o, o.tokens[ti], o.groups[gi], o.head_dim, &row, (size_t)l2);
                print_row(&row, json, first);
                first = 0;
            }
    }
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    CU(cuDevicePrimaryCtxRelease(dev));
    fsa_context_destroy(ctx);
    return 0;
}
