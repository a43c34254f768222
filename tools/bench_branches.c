/*
 * fsa-bench --compressed and --window: the other two branches of Native
 * Sparse Attention, through the public API.
 *
 * --compressed: queries [T, Hq, Dk] against compressed keys and values made
 * with kernel size l and stride d per sequence ([Tc, Hkv, Dk] / [Tc, Hkv, Dv],
 * Tc = sum over sequences of max(0, (len - l) / d + 1)); per row the forward
 * with the top-k selection (the plan's fsa_compressed_attention_fwd writing
 * topk), the forward alone (a plan without selection), the backward, and
 * forward (with selection) + backward.
 * --window: sliding-window attention over [T, Hkv, *] keys and values, window
 * W; the forward, the backward, and forward + backward.
 *
 * Inputs: standard-normal values; the batch splits T into equal sequences.
 * Each timed call follows a 256 MiB memset that flushes the L2 (outside the
 * timed region); CUDA events around the call; a few warm-up calls; the median
 * of --reps repeats. Plan creation (compiling) is outside the timing.
 * TFLOP/s counts the two matrix products of attention over the visible keys
 * only: 2 * Hq * (Dk + Dv) per (query, visible key).
 *
 * Uses include/fsa.h and the CUDA driver API only.
 */
#define _GNU_SOURCE
#include "bench_branches.h"

#include "fsa.h"

#include "bench_cuda.h"
#include "bench_inputs.h"
#include "tool_args.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU(call) BENCH_CU(g_mode, call)

#define BR_MAX_LIST 16 /* values of -T, -G or -W; more is a usage error */
#define FLUSH_BYTES ((size_t)256 << 20)
#define WARMUP_CALLS 3

static const char *g_mode = "--compressed"; /* for messages */

typedef enum br_kind { KIND_COMPRESSED, KIND_WINDOW } br_kind;

typedef struct br_opts {
    br_kind kind;
    int tokens[BR_MAX_LIST], n_tokens;
    int groups[BR_MAX_LIST], n_groups;
    int windows[BR_MAX_LIST], n_windows;
    int q_heads, head_dim, value_dim, batch;
    int kernel_size, stride, block_size, top_k, init_blocks, local_blocks;
    fsa_dtype dtype;
    int reps, backward, dry_run;
    const char *json;
} br_opts;

/* ------------------------------------------------------------ options */

static void usage(FILE *f, br_kind kind)
{
    if (kind == KIND_COMPRESSED)
        fprintf(f,
                "Usage: fsa-bench --compressed [OPTIONS]\n"
                "Times compressed attention with the top-k block selection (forward with selection,\n"
                "forward alone, backward, forward + backward) for every T x G.\n"
                "  -T LIST             token counts (default 8192,65536; at most %d values)\n"
                "  -G LIST             query heads per KV head (default 1,2,4,8,16)\n"
                "  --q-heads N         query heads (default 32)\n"
                "  -D N                Dk, head dim of queries and keys (default 128)\n"
                "  --value-dim N       Dv (default: Dk)\n"
                "  --kernel-size N     l, positions per compressed token (default 32)\n"
                "  --stride N          d, positions between compressed tokens (default 16)\n"
                "  --block-size N      BK of the selection (default 64)\n"
                "  --top-k N           selected blocks per (KV head, token); 0 = no selection (default 16)\n"
                "  --init-blocks N     blocks from the start always selected (default 1)\n"
                "  --local-blocks N    blocks ending at the own block always selected (default 2)\n",
                BR_MAX_LIST);
    else
        fprintf(f,
                "Usage: fsa-bench --window [OPTIONS]\n"
                "Times sliding-window attention (forward, backward, forward + backward) for every\n"
                "T x G x W.\n"
                "  -T LIST             token counts (default 8192,65536; at most %d values)\n"
                "  -G LIST             query heads per KV head (default 1,2,4,8,16)\n"
                "  -W LIST             windows (default 512)\n"
                "  --q-heads N         query heads (default 32)\n"
                "  -D N                Dk, head dim of queries and keys (default 128)\n"
                "  --value-dim N       Dv (default: Dk)\n",
                BR_MAX_LIST);
    fprintf(f,
            "  --batch B           sequences T is split into, equally (default 1)\n"
            "  --dtype T           " TOOL_DTYPE_SPELLINGS " (default bf16)\n"
            "  --reps N            timed repeats per value, median reported (default 20)\n"
            "  --no-backward       time the forward only\n"
            "  --json FILE         also write the rows as JSON\n"
            "  --dry-run           print what would run and exit, without a GPU\n"
            "  -h, --help          this text\n"
            "Exit status: 0 success; 1 a benchmark failed; 2 usage error; 3 no CUDA driver or no\n"
            "usable GPU.\n");
}

static int usage_error(const br_opts *o, const char *what, const char *arg)
{
    fprintf(stderr, "fsa-bench %s: %s%s%s\n", g_mode, what, arg ? ": " : "", arg ? arg : "");
    usage(stderr, o->kind);
    return TOOL_EXIT_USAGE;
}

enum {
    OPT_Q_HEADS = 256, OPT_VALUE_DIM, OPT_KERNEL_SIZE, OPT_STRIDE, OPT_BLOCK_SIZE, OPT_TOP_K, OPT_INIT_BLOCKS,
    OPT_LOCAL_BLOCKS, OPT_BATCH, OPT_DTYPE, OPT_REPS, OPT_NO_BACKWARD, OPT_JSON, OPT_DRY_RUN
};

/* One numeric option into *dst; -1 when it is out of range. */
static int number(int *dst, const char *text, long min, long max)
{
    long v;
    if (tool_parse_long(&v, text, min, max) != 0) return -1;
    *dst = (int)v;
    return 0;
}

/* Options of the mode in argv[0]; returns -1 to go on, else the exit code. */
static int parse_args(br_opts *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"q-heads", required_argument, NULL, OPT_Q_HEADS},
        {"value-dim", required_argument, NULL, OPT_VALUE_DIM},
        {"kernel-size", required_argument, NULL, OPT_KERNEL_SIZE},
        {"stride", required_argument, NULL, OPT_STRIDE},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"init-blocks", required_argument, NULL, OPT_INIT_BLOCKS},
        {"local-blocks", required_argument, NULL, OPT_LOCAL_BLOCKS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"reps", required_argument, NULL, OPT_REPS},
        {"no-backward", no_argument, NULL, OPT_NO_BACKWARD},
        {"json", required_argument, NULL, OPT_JSON},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const int compressed = o->kind == KIND_COMPRESSED;
    optind = 1;
    opterr = 0; /* argv[0] is the mode: the messages below name it */
    for (;;) {
        int li = -1;
        const int c = getopt_long(argc, argv, compressed ? ":hT:G:D:" : ":hT:G:D:W:", longs, &li);
        if (c == -1) break;
        /* The option's name (argv[optind - 1] is its value when it has one). */
        char opt[64];
        if (li >= 0) snprintf(opt, sizeof opt, "--%s", longs[li].name);
        else if (c != '?' && c != ':') snprintf(opt, sizeof opt, "-%c", c);
        else snprintf(opt, sizeof opt, "%s", argv[optind - 1]);
        int bad = 0;
        /* Options of the other mode are unknown here. */
        if (!compressed && (c == OPT_KERNEL_SIZE || c == OPT_STRIDE || c == OPT_BLOCK_SIZE || c == OPT_TOP_K ||
                            c == OPT_INIT_BLOCKS || c == OPT_LOCAL_BLOCKS))
            return usage_error(o, "option not taken by --window", opt);
        switch (c) {
        case 'h': usage(stdout, o->kind); return TOOL_EXIT_OK;
        case ':': return usage_error(o, "option needs a value", opt);
        case '?': return usage_error(o, "unknown option", opt);
        case 'T': bad = tool_parse_list(o->tokens, &o->n_tokens, BR_MAX_LIST, optarg, 1, 1L << 24) != 0; break;
        case 'G': bad = tool_parse_list(o->groups, &o->n_groups, BR_MAX_LIST, optarg, 1, 64) != 0; break;
        case 'W': bad = tool_parse_list(o->windows, &o->n_windows, BR_MAX_LIST, optarg, 1, 1L << 30) != 0; break;
        case 'D': bad = number(&o->head_dim, optarg, 1, 1024); break;
        case OPT_Q_HEADS: bad = number(&o->q_heads, optarg, 1, 1024); break;
        case OPT_VALUE_DIM: bad = number(&o->value_dim, optarg, 1, 1024); break;
        case OPT_KERNEL_SIZE: bad = number(&o->kernel_size, optarg, 1, 1 << 20); break;
        case OPT_STRIDE: bad = number(&o->stride, optarg, 1, 1 << 20); break;
        case OPT_BLOCK_SIZE: bad = number(&o->block_size, optarg, 1, 1 << 20); break;
        case OPT_TOP_K: bad = number(&o->top_k, optarg, 0, 1024); break;
        case OPT_INIT_BLOCKS: bad = number(&o->init_blocks, optarg, 0, 1 << 20); break;
        case OPT_LOCAL_BLOCKS: bad = number(&o->local_blocks, optarg, 0, 1 << 20); break;
        case OPT_BATCH: bad = number(&o->batch, optarg, 1, 1 << 20); break;
        case OPT_REPS: bad = number(&o->reps, optarg, 1, 100000); break;
        case OPT_DTYPE:
            if (tool_parse_dtype(&o->dtype, optarg) != 0)
                return usage_error(o, "--dtype is not one of " TOOL_DTYPE_SPELLINGS, optarg);
            break;
        case OPT_NO_BACKWARD: o->backward = 0; break;
        case OPT_JSON: o->json = optarg; break;
        case OPT_DRY_RUN: o->dry_run = 1; break;
        default: return usage_error(o, "internal option error", NULL);
        }
        if (bad) return usage_error(o, "bad value", opt);
    }
    if (optind < argc) return usage_error(o, "unexpected argument", argv[optind]);
    for (int i = 0; i < o->n_groups; i++)
        if (o->q_heads % o->groups[i] != 0) return usage_error(o, "-G: every group must divide --q-heads", NULL);
    for (int i = 0; i < o->n_tokens; i++)
        if (o->tokens[i] < o->batch) return usage_error(o, "--batch: more sequences than tokens", NULL);
    return -1;
}

static void print_plan(const br_opts *o)
{
    printf("# fsa-bench %s %s: dtype %s, Hq %d, Dk %d, Dv %d, batch %d", g_mode, fsa_version_string(),
           tool_dtype_name(o->dtype), o->q_heads, o->head_dim, o->value_dim ? o->value_dim : o->head_dim, o->batch);
    if (o->kind == KIND_COMPRESSED)
        printf(", l %d, d %d, BK %d, K %d, init %d, local %d", o->kernel_size, o->stride, o->block_size, o->top_k,
               o->init_blocks, o->local_blocks);
    printf(", %s", o->backward ? "forward and backward" : "forward only");
    printf("; T");
    for (int i = 0; i < o->n_tokens; i++) printf("%s%d", i ? "," : " ", o->tokens[i]);
    printf("; G");
    for (int i = 0; i < o->n_groups; i++) printf("%s%d", i ? "," : " ", o->groups[i]);
    if (o->kind == KIND_WINDOW) {
        printf("; W");
        for (int i = 0; i < o->n_windows; i++) printf("%s%d", i ? "," : " ", o->windows[i]);
    }
    printf("; median of %d repeats, L2 flushed before each\n", o->reps);
}

/* ------------------------------------------------------------ timing */

typedef struct bench_env {
    CUevent e0, e1;
    CUdeviceptr flush;
} bench_env;

typedef void (*call_fn)(void *user);

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median event time in ms of `call` on the default stream, the L2 flushed before each. */
static double time_call(const bench_env *env, call_fn call, void *user, int reps)
{
    for (int i = 0; i < WARMUP_CALLS; i++) call(user);
    double *ms = malloc(sizeof *ms * (size_t)reps);
    if (ms == NULL) exit(TOOL_EXIT_FAILED);
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
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    const double median = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    free(ms);
    return median;
}

static CUdeviceptr alloc_normal(size_t n, uint64_t seed, fsa_dtype dt)
{
    uint16_t *h = malloc(n * 2 + 2);
    if (h == NULL) exit(TOOL_EXIT_FAILED);
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

static fsa_tensor rows(CUdeviceptr ptr, int heads, int dim) { return (fsa_tensor){ptr, (int64_t)heads * dim, dim}; }

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
static int bench_cmp_row(fsa_context *ctx, const br_opts *o, const bench_env *env, int T, int G, FILE *json,
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
    int32_t *cu_q = malloc(sizeof(int32_t) * (size_t)(o->batch + 1)), *cu_c = malloc(sizeof(int32_t) * (size_t)(o->batch + 1));
    if (cu_q == NULL || cu_c == NULL) exit(TOOL_EXIT_FAILED);
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
    fa.q = rows(q, hq, dk), fa.k = rows(k, hkv, dk), fa.v = rows(v, hkv, dv), fa.o = rows(out, hq, dv);
    fa.lse = lse, fa.cu_seqlens = dcu, fa.cu_seqlens_c = dcu_c;
    fa.topk = (fsa_tensor){o->top_k ? topk : 0, (int64_t)hkv * o->top_k, o->top_k};
    fa.workspace = ws, fa.workspace_bytes = ws_bytes;
    fsa_compressed_fwd_args fa_plain = fa;
    fa_plain.topk.ptr = 0;
    fsa_compressed_bwd_args ba = FSA_COMPRESSED_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.total_compressed = Tc, ba.batch = o->batch;
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v, ba.o = fa.o, ba.dout = rows(dout, hq, dv);
    ba.dq = rows(dq, hq, dk), ba.dk = rows(dk_buf, hkv, dk), ba.dv = rows(dv_buf, hkv, dv);
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
    const double flops = 2.0 * hq * (dk + dv) * visible_pairs(cu_q, o->batch, KIND_COMPRESSED, o->kernel_size,
                                                               o->stride, 0);
    printf("| %6d | %2d | %3d | %6lld | %9.3f | %9.3f | %8.2f |", T, G, hkv, (long long)Tc, ms_fwd, ms_plain,
           flops / ms_plain / 1e9);
    if (o->backward) printf(" %9.3f | %11.3f |\n", ms_bwd, ms_both);
    else printf(" - | - |\n");
    fflush(stdout);
    if (json) {
        fprintf(json, "%s\n  {\"mode\": \"compressed\", \"T\": %d, \"G\": %d, \"Hq\": %d, \"Hkv\": %d, \"Tc\": %lld, "
                      "\"fwd_ms\": %.4f, \"fwd_no_selection_ms\": %.4f, \"fwd_tflops\": %.3f, ",
                *first_row ? "" : ",", T, G, hq, hkv, (long long)Tc, ms_fwd, ms_plain, flops / ms_plain / 1e9);
        if (o->backward) fprintf(json, "\"bwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f}", ms_bwd, ms_both);
        else fprintf(json, "\"bwd_ms\": null, \"fwd_bwd_ms\": null}");
        *first_row = 0;
    }
    CUdeviceptr all[] = {q, k, v, dout, out, lse, topk, dq, dk_buf, dv_buf, dcu, dcu_c, ws};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) CU(cu.MemFree(all[i]));
    free(cu_q);
    free(cu_c);
    fsa_compressed_plan_destroy(plan);
    fsa_compressed_plan_destroy(plain);
    return 0;
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

static int bench_win_row(fsa_context *ctx, const br_opts *o, const bench_env *env, int T, int G, int W, FILE *json,
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
    int32_t *cu_q = malloc(sizeof(int32_t) * (size_t)(o->batch + 1)), *cu_c = malloc(sizeof(int32_t) * (size_t)(o->batch + 1));
    if (cu_q == NULL || cu_c == NULL) exit(TOOL_EXIT_FAILED);
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
    fa.q = rows(q, hq, dk), fa.k = rows(k, hkv, dk), fa.v = rows(v, hkv, dv), fa.o = rows(out, hq, dv);
    fa.cu_seqlens = dcu, fa.lse = lse;
    fsa_window_bwd_args ba = FSA_WINDOW_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = o->batch;
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v, ba.o = fa.o, ba.dout = rows(dout, hq, dv);
    ba.dq = rows(dq, hq, dk), ba.dk = rows(dk_buf, hkv, dk), ba.dv = rows(dv_buf, hkv, dv);
    ba.lse = lse, ba.cu_seqlens = dcu, ba.workspace = ws, ba.workspace_bytes = ws_bytes;
    win_call fwd = {plan, &fa, &ba, 1, 0}, bwd = {plan, &fa, &ba, 0, 1}, both = {plan, &fa, &ba, 1, 1};
    const double ms = time_call(env, run_win, &fwd, o->reps);
    double ms_bwd = -1, ms_both = -1;
    if (o->backward) {
        run_win(&fwd); /* o and lse for the backward */
        ms_bwd = time_call(env, run_win, &bwd, o->reps);
        ms_both = time_call(env, run_win, &both, o->reps);
    }
    const double flops = 2.0 * hq * (dk + dv) * visible_pairs(cu_q, o->batch, KIND_WINDOW, 0, 1, W);
    printf("| %6d | %2d | %3d | %6d | %9.3f | %8.2f |", T, G, hkv, W, ms, flops / ms / 1e9);
    if (o->backward) printf(" %9.3f | %11.3f |\n", ms_bwd, ms_both);
    else printf(" - | - |\n");
    fflush(stdout);
    if (json) {
        fprintf(json, "%s\n  {\"mode\": \"window\", \"T\": %d, \"G\": %d, \"Hq\": %d, \"Hkv\": %d, \"W\": %d, "
                      "\"fwd_ms\": %.4f, \"fwd_tflops\": %.3f, ",
                *first_row ? "" : ",", T, G, hq, hkv, W, ms, flops / ms / 1e9);
        if (o->backward) fprintf(json, "\"bwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f}", ms_bwd, ms_both);
        else fprintf(json, "\"bwd_ms\": null, \"fwd_bwd_ms\": null}");
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
    return 0;
}

/* ------------------------------------------------------------ main */

int fsa_bench_branches(int argc, char **argv)
{
    br_opts o = {.kind = strcmp(argv[0], "--window") == 0 ? KIND_WINDOW : KIND_COMPRESSED,
                 .tokens = {8192, 65536}, .n_tokens = 2, .groups = {1, 2, 4, 8, 16}, .n_groups = 5,
                 .windows = {512}, .n_windows = 1, .q_heads = 32, .head_dim = 128, .batch = 1,
                 .kernel_size = 32, .stride = 16, .block_size = 64, .top_k = 16, .init_blocks = 1,
                 .local_blocks = 2, .dtype = FSA_DTYPE_BF16, .reps = 20, .backward = 1};
    g_mode = argv[0];
    int rc = parse_args(&o, argc, argv);
    if (rc >= 0) return rc;
    print_plan(&o);
    if (o.dry_run) return TOOL_EXIT_OK;

    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0) return fprintf(stderr, "fsa-bench %s: %s\n", g_mode, why), TOOL_EXIT_TARGET;
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    fsa_context *ctx = NULL;
    const fsa_status st = fsa_context_create(&ctx, &co);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench %s: %s\n", g_mode, fsa_last_error());
        return tool_context_exit_code(st);
    }
    CUdevice dev;
    CUcontext pctx;
    CU(cu.Init(0));
    CU(cu.DeviceGet(&dev, 0));
    CU(cu.DevicePrimaryCtxRetain(&pctx, dev));
    CU(cu.CtxSetCurrent(pctx));
    char name[256];
    CU(cu.DeviceGetName(name, sizeof name, dev));
    printf("# on %s (%s)\n", name, fsa_context_target(ctx));
    FILE *json = NULL;
    if (o.json && (json = fopen(o.json, "w")) == NULL) {
        fprintf(stderr, "fsa-bench %s: cannot write %s\n", g_mode, o.json);
        fsa_context_destroy(ctx);
        return TOOL_EXIT_FAILED;
    }
    if (json) fprintf(json, "{\"gpu\": \"%s\", \"version\": \"%s\", \"rows\": [", name, fsa_version_string());
    bench_env env;
    CU(cu.EventCreate(&env.e0, CU_EVENT_DEFAULT));
    CU(cu.EventCreate(&env.e1, CU_EVENT_DEFAULT));
    CU(cu.MemAlloc(&env.flush, FLUSH_BYTES));
    int first = 1, failed = 0;
    if (o.kind == KIND_COMPRESSED) {
        printf("\n| T      | G  | Hkv | Tc     | fwd+sel ms | fwd ms   | TFLOP/s | bwd ms   | fwd+sel+bwd ms |\n"
               "|-------:|---:|----:|-------:|----------:|---------:|--------:|---------:|---------------:|\n");
        for (int ti = 0; ti < o.n_tokens; ti++)
            for (int gi = 0; gi < o.n_groups; gi++)
                failed |= bench_cmp_row(ctx, &o, &env, o.tokens[ti], o.groups[gi], json, &first) != 0;
    } else {
        printf("\n| T      | G  | Hkv | W      | fwd ms    | TFLOP/s | bwd ms   | fwd+bwd ms |\n"
               "|-------:|---:|----:|-------:|----------:|--------:|---------:|-----------:|\n");
        for (int ti = 0; ti < o.n_tokens; ti++)
            for (int gi = 0; gi < o.n_groups; gi++)
                for (int wi = 0; wi < o.n_windows; wi++)
                    failed |= bench_win_row(ctx, &o, &env, o.tokens[ti], o.groups[gi], o.windows[wi], json,
                                            &first) != 0;
    }
    if (json) {
        fprintf(json, "\n]}\n");
        if (fclose(json) != 0) failed = 1;
    }
    cu.MemFree(env.flush);
    cu.EventDestroy(env.e0);
    cu.EventDestroy(env.e1);
    CU(cu.DevicePrimaryCtxRelease(dev));
    fsa_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAILED : TOOL_EXIT_OK;
}
