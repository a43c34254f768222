/* fsa-bench --compressed and --window: the rows (bench_branches_rows.h).
 * The protocol is described in bench_branches.c. */
#include "bench_branches_rows.h"

#include "bench_check.h"
#include "bench_inputs.h"
#include "bench_json.h"
#include "tool_args.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(call) BENCH_CU(bench_branches_mode, call)

#define WARMUP_CALLS 3

/* ------------------------------------------------------------ timing */

typedef void (*call_fn)(void *user);

/* Median event time in ms of `call` on the default stream, the L2 flushed before each. */
static double time_call(const br_env *env, call_fn call, void *user, int reps)
{
    for (int i = 0; i < WARMUP_CALLS; i++) call(user);
    double *ms = bench_alloc(bench_branches_mode, sizeof *ms * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        CU(cu.MemsetD8Async(env->flush, (unsigned char)r, FLUSH_BYTES, NULL));
        CU(cu.EventRecord(env->e0, NULL));
        call(user);
        CU(cu.EventRecord(env->e1, NULL));
        CU(cu.EventSynchronize(env->e1));
        float t;
        CU(cu.EventElapsedTime(&t, env->e0, env->e1));
        ms[r] = t;
    }
    const double median = bench_median(ms, reps);
    free(ms);
    return median;
}

static CUdeviceptr alloc_normal(size_t n, uint64_t seed, fsa_dtype dt)
{
    uint16_t *h = bench_alloc(bench_branches_mode, n * 2 + 2);
    bench_fill_normal(h, n, seed, dt);
    CUdeviceptr d;
    CU(cu.MemAlloc(&d, n * 2 + 16));
    CU(cu.MemcpyHtoD(d, h, n * 2 + 2));
    free(h);
    return d;
}

static CUdeviceptr alloc_bytes(size_t bytes)
{
    CUdeviceptr d;
    CU(cu.MemAlloc(&d, bytes ? bytes : 256));
    return d;
}

static CUdeviceptr upload_ints(const int32_t *v, size_t n)
{
    CUdeviceptr d = alloc_bytes(n * 4);
    CU(cu.MemcpyHtoD(d, v, n * 4));
    return d;
}

/* cu_seqlens of `batch` equal sequences (the last takes the rest), and when
 * l > 0 the compressed offsets; returns Tc. */
static int64_t make_offsets(int32_t *cu_q, int32_t *cu_c, int T, int batch, int l, int d)
{
    cu_q[0] = cu_c[0] = 0;
    for (int b = 0; b < batch; b++) {
        const int len = b + 1 < batch ? T / batch : T - (batch - 1) * (T / batch);
        cu_q[b + 1] = cu_q[b] + len;
        cu_c[b + 1] = cu_c[b] + (l > 0 && len >= l ? (len - l) / d + 1 : 0);
    }
    return cu_c[batch];
}

/* Query-key pairs attention computes (visible keys summed over queries). */
static double visible_pairs(const int32_t *cu_q, int batch, br_kind kind, int l, int d, int w)
{
    double n = 0;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < cu_q[b + 1] - cu_q[b]; i++)
            n += kind == KIND_COMPRESSED ? (i >= l - 1 ? (i - (l - 1)) / d + 1 : 0) : (i + 1 < w ? i + 1 : w);
    return n;
}

/* ------------------------------------------------------------ compressed */

typedef struct cmp_call {
    const fsa_compressed_plan *plan;
    const fsa_compressed_fwd_args *fwd;
    const fsa_compressed_bwd_args *bwd;
    int forward, backward;
} cmp_call;

static void run_cmp(void *user)
{
    const cmp_call *c = user;
    fsa_status st = FSA_STATUS_OK;
    if (c->forward) st = fsa_compressed_attention_fwd(c->plan, c->fwd, NULL);
    if (st == FSA_STATUS_OK && c->backward) st = fsa_compressed_attention_bwd(c->plan, c->bwd, NULL);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench --compressed: %s\n", fsa_last_error());
        exit(TOOL_EXIT_FAILED);
    }
}

static fsa_compressed_plan *cmp_plan(fsa_context *ctx, const br_opts *o, int G, int top_k, int backward)
{
    fsa_compressed_attention_desc d = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    d.dtype = o->dtype;
    d.head_dim = o->head_dim;
    d.value_dim = o->value_dim;
    d.num_q_heads = o->q_heads;
    d.num_kv_heads = o->q_heads / G;
    d.kernel_size = o->kernel_size;
    d.stride = o->stride;
    d.top_k = top_k;
    d.block_size = o->block_size;
    d.init_blocks = o->init_blocks;
    d.local_blocks = o->local_blocks;
    d.backward = backward;
    fsa_compressed_plan *plan = NULL;
    if (fsa_compressed_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench --compressed: G %d: %s\n", G, fsa_last_error());
        return NULL;
    }
    return plan;
}

/* One row; 0 on success. */
int bench_cmp_row(fsa_context *ctx, const br_opts *o, const br_env *env, int T, int G, FILE *json,
                         int *first_row)
{
    const int hq = o->q_heads, hkv = hq / G, dk = o->head_dim, dv = o->value_dim ? o->value_dim : dk;
    fsa_compressed_plan *plan = cmp_plan(ctx, o, G, o->top_k, o->backward);
    fsa_compressed_plan *plain = o->top_k ? cmp_plan(ctx, o, G, 0, 0) : NULL;
    if (plan == NULL || (o->top_k && plain == NULL)) {
        fsa_compressed_plan_destroy(plan);
        fsa_compressed_plan_destroy(plain);
        return -1;
    }
    int32_t *cu_q = bench_alloc(bench_branches_mode, sizeof(int32_t) * (size_t)(o->batch + 1));
    int32_t *cu_c = bench_alloc(bench_branches_mode, sizeof(int32_t) * (size_t)(o->batch + 1));
    const int64_t Tc = make_offsets(cu_q, cu_c, T, o->batch, o->kernel_size, o->stride);
    const size_t nq = (size_t)T * hq;
    CUdeviceptr q = alloc_normal(nq * dk, 1, o->dtype), k = alloc_normal((size_t)Tc * hkv * dk, 2, o->dtype);
    CUdeviceptr v = alloc_normal((size_t)Tc * hkv * dv, 3, o->dtype), dout = alloc_normal(nq * dv, 4, o->dtype);
    CUdeviceptr out = alloc_bytes(nq * dv * 2), lse = alloc_bytes(nq * 4);
    CUdeviceptr topk = alloc_bytes((size_t)T * hkv * (size_t)(o->top_k > 0 ? o->top_k : 1) * 4);
    CUdeviceptr dq = alloc_bytes(nq * dk * 2), dk_buf = alloc_bytes((size_t)Tc * hkv * dk * 2);
    CUdeviceptr dv_buf = alloc_bytes((size_t)Tc * hkv * dv * 2);
    CUdeviceptr dcu = upload_ints(cu_q, (size_t)o->batch + 1), dcu_c = upload_ints(cu_c, (size_t)o->batch + 1);
    size_t ws_fwd = 0, ws_bwd = 0;
    if (fsa_compressed_plan_workspace_size(&ws_fwd, plan, T, o->batch) != FSA_STATUS_OK ||
        (o->backward && fsa_compressed_plan_workspace_size_bwd(&ws_bwd, plan, T, o->batch) != FSA_STATUS_OK)) {
        fprintf(stderr, "fsa-bench --compressed: workspace: %s\n", fsa_last_error());
        exit(TOOL_EXIT_FAILED);
    }
    const size_t ws_bytes = ws_fwd > ws_bwd ? ws_fwd : ws_bwd;
    CUdeviceptr ws = alloc_bytes(ws_bytes);

    fsa_compressed_fwd_args fa = FSA_COMPRESSED_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.total_compressed = Tc, fa.batch = o->batch;
    fa.q = bench_rows(q, hq, dk), fa.k = bench_rows(k, hkv, dk), fa.v = bench_rows(v, hkv, dv), fa.o = bench_rows(out, hq, dv);
    fa.lse = lse, fa.cu_seqlens = dcu, fa.cu_seqlens_c = dcu_c;
    fa.topk = (fsa_tensor){o->top_k ? topk : 0, (int64_t)hkv * o->top_k, o->top_k};
    fa.workspace = ws, fa.workspace_bytes = ws_bytes;
    fsa_compressed_fwd_args fa_plain = fa;
    fa_plain.topk.ptr = 0;
    fsa_compressed_bwd_args ba = FSA_COMPRESSED_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.total_compressed = Tc, ba.batch = o->batch;
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v, ba.o = fa.o, ba.dout = bench_rows(dout, hq, dv);
    ba.dq = bench_rows(dq, hq, dk), ba.dk = bench_rows(dk_buf, hkv, dk), ba.dv = bench_rows(dv_buf, hkv, dv);
    ba.lse = lse, ba.cu_seqlens = dcu, ba.cu_seqlens_c = dcu_c, ba.workspace = ws, ba.workspace_bytes = ws_bytes;

    cmp_call fwd = {plan, &fa, &ba, 1, 0}, fwd_plain = {plain ? plain : plan, &fa_plain, &ba, 1, 0};
    cmp_call bwd = {plan, &fa, &ba, 0, 1}, both = {plan, &fa, &ba, 1, 1};
    const double ms_fwd = time_call(env, run_cmp, &fwd, o->reps);
    const double ms_plain = o->top_k ? time_call(env, run_cmp, &fwd_plain, o->reps) : ms_fwd;
    double ms_bwd = -1, ms_both = -1;
    if (o->backward) {
        run_cmp(&fwd); /* o and lse for the backward */
        ms_bwd = time_call(env, run_cmp, &bwd, o->reps);
        ms_both = time_call(env, run_cmp, &both, o->reps);
    }
    /* What the last timed call wrote, finite (bench_check.h): else the row fails. */
    CU(cu.StreamSynchronize(NULL));
    int finite = bench_device_finite(out, nq * dv, o->dtype);
    if (o->backward)
        finite = finite && bench_device_finite(dq, nq * dk, o->dtype) &&
                 bench_device_finite(dk_buf, (size_t)Tc * hkv * dk, o->dtype) &&
                 bench_device_finite(dv_buf, (size_t)Tc * hkv * dv, o->dtype);
    if (!finite) fprintf(stderr, "fsa-bench --compressed: T %d G %d: an output or gradient is not finite\n", T, G);
    /* The timed forward's selection (the backward leaves it): sampled tokens' rows keep the rules. */
    char what[96];
    snprintf(what, sizeof what, "fsa-bench --compressed: T %d G %d", T, G);
    const int selection_ok = o->top_k == 0 ||
                             bench_selection_rows_ok(topk, fa.topk.token_stride, fa.topk.head_stride, cu_q, o->batch,
                                                     hkv, o->top_k, o->block_size, o->init_blocks, o->local_blocks,
                                                     BENCH_SELECTION_SAMPLES, 77u + (uint64_t)T, what);
    const double flops = 2.0 * hq * (dk + dv) * visible_pairs(cu_q, o->batch, KIND_COMPRESSED, o->kernel_size,
                                                               o->stride, 0);
    printf("| %6d | %2d | %3d | %6lld | %9.3f | %9.3f | %8.2f |", T, G, hkv, (long long)Tc, ms_fwd, ms_plain,
           flops / ms_plain / 1e9);
    if (o->backward) printf(" %9.3f | %11.3f |\n", ms_bwd, ms_both);
    else printf(" - | - |\n");
    fflush(stdout);
    if (json) {
        /* Parts not run and numbers that are not finite are null. */
        fprintf(json, "%s\n  {\"mode\": \"compressed\", \"T\": %d, \"G\": %d, \"Hq\": %d, \"Hkv\": %d, \"Tc\": %lld",
                *first_row ? "" : ",", T, G, hq, hkv, (long long)Tc);
        bench_json_field(json, "fwd_ms", "%.4f", ms_fwd, 1);
        bench_json_field(json, "fwd_no_selection_ms", "%.4f", ms_plain, 1);
        bench_json_field(json, "fwd_tflops", "%.3f", flops / ms_plain / 1e9, ms_plain > 0);
        bench_json_field(json, "bwd_ms", "%.4f", ms_bwd, o->backward);
        bench_json_field(json, "fwd_bwd_ms", "%.4f", ms_both, o->backward);
        fprintf(json, ", \"failed\": %s", finite && selection_ok ? "false" : "true");
        fputc('}', json);
        *first_row = 0;
    }
    CUdeviceptr all[] = {q, k, v, dout, out, lse, topk, dq, dk_buf, dv_buf, dcu, dcu_c, ws};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) CU(cu.MemFree(all[i]));
    free(cu_q);
    free(cu_c);
    fsa_compressed_plan_destroy(plan);
    fsa_compressed_plan_destroy(plain);
    return finite && selection_ok ? 0 : -1;
}

/* ------------------------------------------------------------ window */

typedef struct win_call {
    const fsa_window_plan *plan;
    const fsa_window_fwd_args *fwd;
    const fsa_window_bwd_args *bwd;
    int forward, backward;
} win_call;

static void run_win(void *user)
{
    const win_call *c = user;
    fsa_status st = FSA_STATUS_OK;
    if (c->forward) st = fsa_window_attention_fwd(c->plan, c->fwd, NULL);
    if (st == FSA_STATUS_OK && c->backward) st = fsa_window_attention_bwd(c->plan, c->bwd, NULL);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench --window: %s\n", fsa_last_error());
        exit(TOOL_EXIT_FAILED);
    }
}

int bench_win_row(fsa_context *ctx, const br_opts *o, const br_env *env, int T, int G, int W, FILE *json,
                         int *first_row)
{
    const int hq = o->q_heads, hkv = hq / G, dk = o->head_dim, dv = o->value_dim ? o->value_dim : dk;
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.dtype = o->dtype;
    d.head_dim = dk;
    d.value_dim = dv;
    d.num_q_heads = hq;
    d.num_kv_heads = hkv;
    d.window = W;
    d.backward = o->backward;
    fsa_window_plan *plan = NULL;
    if (fsa_window_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench --window: G %d W %d: %s\n", G, W, fsa_last_error());
        return -1;
    }
    int32_t *cu_q = bench_alloc(bench_branches_mode, sizeof(int32_t) * (size_t)(o->batch + 1));
    int32_t *cu_c = bench_alloc(bench_branches_mode, sizeof(int32_t) * (size_t)(o->batch + 1));
    make_offsets(cu_q, cu_c, T, o->batch, 0, 1);
    const size_t nq = (size_t)T * hq, nkv = (size_t)T * hkv;
    CUdeviceptr q = alloc_normal(nq * dk, 1, o->dtype), k = alloc_normal(nkv * dk, 2, o->dtype);
    CUdeviceptr v = alloc_normal(nkv * dv, 3, o->dtype), out = alloc_bytes(nq * dv * 2), lse = alloc_bytes(nq * 4);
    CUdeviceptr dcu = upload_ints(cu_q, (size_t)o->batch + 1);
    CUdeviceptr dout = 0, dq = 0, dk_buf = 0, dv_buf = 0, ws = 0;
    size_t ws_bytes = 0;
    if (o->backward) {
        if (fsa_window_plan_workspace_size_bwd(&ws_bytes, plan, T, o->batch) != FSA_STATUS_OK) {
            fprintf(stderr, "fsa-bench --window: workspace: %s\n", fsa_last_error());
            exit(TOOL_EXIT_FAILED);
        }
        dout = alloc_normal(nq * dv, 4, o->dtype), dq = alloc_bytes(nq * dk * 2);
        dk_buf = alloc_bytes(nkv * dk * 2), dv_buf = alloc_bytes(nkv * dv * 2), ws = alloc_bytes(ws_bytes);
    }
    fsa_window_fwd_args fa = FSA_WINDOW_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.batch = o->batch;
    fa.q = bench_rows(q, hq, dk), fa.k = bench_rows(k, hkv, dk), fa.v = bench_rows(v, hkv, dv), fa.o = bench_rows(out, hq, dv);
    fa.cu_seqlens = dcu, fa.lse = lse;
    fsa_window_bwd_args ba = FSA_WINDOW_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = o->batch;
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v, ba.o = fa.o, ba.dout = bench_rows(dout, hq, dv);
    ba.dq = bench_rows(dq, hq, dk), ba.dk = bench_rows(dk_buf, hkv, dk), ba.dv = bench_rows(dv_buf, hkv, dv);
    ba.lse = lse, ba.cu_seqlens = dcu, ba.workspace = ws, ba.workspace_bytes = ws_bytes;
    win_call fwd = {plan, &fa, &ba, 1, 0}, bwd = {plan, &fa, &ba, 0, 1}, both = {plan, &fa, &ba, 1, 1};
    const double ms = time_call(env, run_win, &fwd, o->reps);
    double ms_bwd = -1, ms_both = -1;
    if (o->backward) {
        run_win(&fwd); /* o and lse for the backward */
        ms_bwd = time_call(env, run_win, &bwd, o->reps);
        ms_both = time_call(env, run_win, &both, o->reps);
    }
    /* What the last timed call wrote, finite (bench_check.h): else the row fails. */
    CU(cu.StreamSynchronize(NULL));
    int finite = bench_device_finite(out, (size_t)T * hq * dv, o->dtype);
    if (o->backward)
        finite = finite && bench_device_finite(dq, (size_t)T * hq * dk, o->dtype) &&
                 bench_device_finite(dk_buf, (size_t)T * hkv * dk, o->dtype) &&
                 bench_device_finite(dv_buf, (size_t)T * hkv * dv, o->dtype);
    if (!finite) fprintf(stderr, "fsa-bench --window: T %d G %d W %d: an output or gradient is not finite\n", T, G, W);
    const double flops = 2.0 * hq * (dk + dv) * visible_pairs(cu_q, o->batch, KIND_WINDOW, 0, 1, W);
    printf("| %6d | %2d | %3d | %6d | %9.3f | %8.2f |", T, G, hkv, W, ms, flops / ms / 1e9);
    if (o->backward) printf(" %9.3f | %11.3f |\n", ms_bwd, ms_both);
    else printf(" - | - |\n");
    fflush(stdout);
    if (json) {
        /* Parts not run and numbers that are not finite are null. */
        fprintf(json, "%s\n  {\"mode\": \"window\", \"T\": %d, \"G\": %d, \"Hq\": %d, \"Hkv\": %d, \"W\": %d",
                *first_row ? "" : ",", T, G, hq, hkv, W);
        bench_json_field(json, "fwd_ms", "%.4f", ms, 1);
        bench_json_field(json, "fwd_tflops", "%.3f", flops / ms / 1e9, ms > 0);
        bench_json_field(json, "bwd_ms", "%.4f", ms_bwd, o->backward);
        bench_json_field(json, "fwd_bwd_ms", "%.4f", ms_both, o->backward);
        fprintf(json, ", \"failed\": %s", finite ? "false" : "true");
        fputc('}', json);
        *first_row = 0;
    }
    if (o->backward) {
        CUdeviceptr grads[] = {dout, dq, dk_buf, dv_buf, ws};
        for (size_t i = 0; i < sizeof grads / sizeof *grads; i++) CU(cu.MemFree(grads[i]));
    }
    CUdeviceptr all[] = {q, k, v, out, lse, dcu};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) CU(cu.MemFree(all[i]));
    free(cu_q);
    free(cu_c);
    fsa_window_plan_destroy(plan);
    return finite ? 0 : -1;
}
