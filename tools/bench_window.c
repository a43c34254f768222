/*
 * fsa-bench --window: sliding-window attention forward and backward through
 * the public API.
 *
 * Problem (defaults: NSA's window branch): bf16, Hq 64, Hkv 4, Dk 192,
 * Dv 128, W 512, one sequence of T tokens, random inputs. Each call is timed
 * alone with CUDA events after 3 warm-up calls; the median of --reps calls
 * is reported (the backward includes both of its kernels). TFLOP/s counts
 * the products over the visible keys as usually counted: forward
 * 2 T Hq Wbar (Dk + Dv) (S, O), backward 2 T Hq Wbar (3 Dk + 2 Dv) (S, dP,
 * dV, dQ, dK once each), with Wbar the mean number of keys a query sees. Uses include/fsa.h and the CUDA
 * driver API only.
 */
#define _GNU_SOURCE
#include "bench_window.h"

#include "fsa.h"

#include "bench_cuda.h"
#include "tool_args.h"

#include <getopt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIN_MAX_T 16

typedef struct win_opts {
    int tokens[WIN_MAX_T], n_tokens;
    int hq, hkv, dk, dv, window, reps;
    fsa_dtype dtype;
} win_opts;

static void win_usage(FILE *f)
{
    fprintf(f,
            "Usage: fsa-bench --window [OPTIONS]\n"
            "  -T LIST          token counts (one sequence each), comma-separated (default 8192,65536)\n"
            "  --window N       W (default 512)\n"
            "  --q-heads N      Hq (default 64)\n"
            "  --kv-heads N     Hkv (default 4)\n"
            "  --head-dim N     Dk (default 192)\n"
            "  --value-dim N    Dv (default 128)\n"
            "  --dtype T        " TOOL_DTYPE_SPELLINGS " (default bf16)\n"
            "  --reps N         timed calls per measurement, median reported (default 20)\n"
            "  -h, --help       this text\n");
}

static int win_usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "fsa-bench --window: %s%s%s\n", what, arg ? ": " : "", arg ? arg : "");
    win_usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* -1 to go on, else the exit code. */
static int parse_window_args(win_opts *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"window", required_argument, NULL, 'w'},   {"q-heads", required_argument, NULL, 'q'},
        {"kv-heads", required_argument, NULL, 'k'}, {"head-dim", required_argument, NULL, 'd'},
        {"value-dim", required_argument, NULL, 'v'}, {"dtype", required_argument, NULL, 't'},
        {"reps", required_argument, NULL, 'r'},     {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int *const ints[] = {['w'] = &o->window, ['q'] = &o->hq, ['k'] = &o->hkv, ['d'] = &o->dk, ['v'] = &o->dv,
                         ['r'] = &o->reps};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":T:h", longs, NULL)) != -1) {
        long x;
        switch (c) {
        case 'T':
            if (tool_parse_list(o->tokens, &o->n_tokens, WIN_MAX_T, optarg, 1, INT32_MAX - 1) != 0)
                return win_usage_error("bad token list", optarg);
            break;
        case 'w': case 'q': case 'k': case 'd': case 'v': case 'r':
            if (tool_parse_long(&x, optarg, 1, INT32_MAX) != 0) return win_usage_error("bad number", optarg);
            *ints[c] = (int)x;
            break;
        case 't':
            if (tool_parse_dtype(&o->dtype, optarg) != 0) return win_usage_error("unknown dtype", optarg);
            break;
        case 'h': win_usage(stdout); return TOOL_EXIT_OK;
        default: return win_usage_error("bad option", argv[optind - 1]);
        }
    }
    if (optind < argc) return win_usage_error("unexpected argument", argv[optind]);
    return -1;
}

static int cu_ok(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return 1;
    const char *name = "?";
    cu.GetErrorName(r, &name);
    fprintf(stderr, "fsa-bench --window: %s: %s\n", what, name);
    return 0;
}

static int fsa_ok(fsa_status s, const char *what)
{
    if (s == FSA_STATUS_OK) return 1;
    fprintf(stderr, "fsa-bench --window: %s: %s\n", what, fsa_last_error());
    return 0;
}

/* bytes of device memory filled with a repeated block of random values of
 * about unit size in the dtype (0 on failure). */
static CUdeviceptr random_buffer(size_t bytes, const uint16_t *block, size_t block_bytes)
{
    CUdeviceptr d = 0;
    if (!cu_ok(cu.MemAlloc(&d, bytes), "cuMemAlloc")) return 0;
    for (size_t at = 0; at < bytes; at += block_bytes) {
        const size_t n = bytes - at < block_bytes ? bytes - at : block_bytes;
        if (!cu_ok(cu.MemcpyHtoD(d + at, block, n), "cuMemcpyHtoD")) return cu.MemFree(d), 0;
    }
    return d;
}

static int cmp_ms(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of `reps` calls of fwd (which = 0) or bwd (1), after 3 warm-ups; < 0 on failure. */
static float time_calls(const fsa_window_plan *plan, const fsa_window_fwd_args *fa, const fsa_window_bwd_args *ba,
                        int which, int reps, CUstream s, CUevent e0, CUevent e1)
{
    float *t = malloc((size_t)reps * sizeof *t), med = -1.f;
    if (t == NULL) return -1.f;
    for (int r = -3; r < reps; r++) {
        if (!cu_ok(cu.EventRecord(e0, s), "cuEventRecord")) goto done;
        const fsa_status st = which ? fsa_window_attention_bwd(plan, ba, s) : fsa_window_attention_fwd(plan, fa, s);
        if (!fsa_ok(st, which ? "backward" : "forward")) goto done;
        if (!cu_ok(cu.EventRecord(e1, s), "cuEventRecord") || !cu_ok(cu.EventSynchronize(e1), "cuEventSynchronize"))
            goto done;
        float ms = 0.f;
        if (!cu_ok(cu.EventElapsedTime(&ms, e0, e1), "cuEventElapsedTime")) goto done;
        if (r >= 0) t[r] = ms;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_ms);
    med = t[reps / 2];
done:
    free(t);
    return med;
}

/* One T: buffers, both calls timed, one line. 0 on success. */
static int run_tokens(const win_opts *o, const fsa_window_plan *plan, int T, const uint16_t *block, size_t block_bytes,
                      CUstream s, CUevent e0, CUevent e1)
{
    const size_t t = (size_t)T, q_bytes = t * o->hq * o->dk * 2, kv_k = t * o->hkv * o->dk * 2;
    const size_t kv_v = t * o->hkv * o->dv * 2, o_bytes = t * o->hq * o->dv * 2, lse_bytes = t * o->hq * 4;
    size_t ws_bytes = 0;
    if (!fsa_ok(fsa_window_plan_workspace_size_bwd(&ws_bytes, plan, T, 1), "workspace size")) return -1;
    const int32_t cu_host[2] = {0, T};
    enum { Q, K, V, O, DO, DQ, DK, DV, LSE, WS, CU, N_BUF };
    const size_t bytes[N_BUF] = {q_bytes, kv_k, kv_v, o_bytes, o_bytes, q_bytes, kv_k, kv_v, lse_bytes, ws_bytes + 256, 8};
    CUdeviceptr b[N_BUF] = {0};
    int rc = -1;
    for (int i = 0; i < N_BUF; i++)
        if ((b[i] = random_buffer(bytes[i], block, block_bytes)) == 0) goto done;
    if (!cu_ok(cu.MemcpyHtoD(b[CU], cu_host, sizeof cu_host), "cuMemcpyHtoD")) goto done;
    fsa_window_fwd_args fa = FSA_WINDOW_FWD_ARGS_INIT;
    fa.total_tokens = T, fa.batch = 1, fa.cu_seqlens = b[CU], fa.lse = b[LSE];
    fa.q = (fsa_tensor){b[Q], (int64_t)o->hq * o->dk, o->dk};
    fa.k = (fsa_tensor){b[K], (int64_t)o->hkv * o->dk, o->dk};
    fa.v = (fsa_tensor){b[V], (int64_t)o->hkv * o->dv, o->dv};
    fa.o = (fsa_tensor){b[O], (int64_t)o->hq * o->dv, o->dv};
    fsa_window_bwd_args ba = FSA_WINDOW_BWD_ARGS_INIT;
    ba.total_tokens = T, ba.batch = 1, ba.cu_seqlens = b[CU], ba.lse = b[LSE];
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v, ba.o = fa.o;
    ba.dout = (fsa_tensor){b[DO], fa.o.token_stride, o->dv};
    ba.dq = (fsa_tensor){b[DQ], fa.q.token_stride, o->dk};
    ba.dk = (fsa_tensor){b[DK], fa.k.token_stride, o->dk};
    ba.dv = (fsa_tensor){b[DV], fa.v.token_stride, o->dv};
    ba.workspace = b[WS], ba.workspace_bytes = ws_bytes;
    const float fwd = time_calls(plan, &fa, &ba, 0, o->reps, s, e0, e1);
    const float bwd = fwd < 0 ? -1.f : time_calls(plan, &fa, &ba, 1, o->reps, s, e0, e1);
    if (bwd < 0) goto done;
    /* Mean keys seen per query: min(i + 1, W) over the positions i. */
    const double w = o->window, n = T;
    const double keys = n <= w ? (n + 1) / 2 : (w * (w + 1) / 2 + (n - w) * w) / n;
    const double pairs = n * o->hq * keys;
    printf("window T %6d  fwd %8.3f ms (%6.1f TFLOP/s)  bwd %8.3f ms (%6.1f TFLOP/s)  fwd+bwd %8.3f ms\n", T, fwd,
           2 * pairs * (o->dk + o->dv) / (fwd * 1e9), bwd, 2 * pairs * (3 * o->dk + 2 * o->dv) / (bwd * 1e9),
           fwd + bwd);
    fflush(stdout);
    rc = 0;
done:
    for (int i = 0; i < N_BUF; i++)
        if (b[i]) cu.MemFree(b[i]);
    return rc;
}

/* The driver and a context on device 0; -1 to go on, else the exit code. */
static int open_context(fsa_context **ctx)
{
    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0) {
        fprintf(stderr, "fsa-bench --window: %s\n", why);
        return TOOL_EXIT_TARGET;
    }
    const fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    const fsa_status st = fsa_context_create(ctx, &co);
    return fsa_ok(st, "context") ? -1 : tool_context_exit_code(st);
}

int fsa_bench_window(int argc, char **argv)
{
    win_opts o = {.tokens = {8192, 65536}, .n_tokens = 2, .hq = 64, .hkv = 4, .dk = 192, .dv = 128, .window = 512,
                  .reps = 20, .dtype = FSA_DTYPE_BF16};
    fsa_context *ctx = NULL;
    int rc = parse_window_args(&o, argc, argv);
    if (rc < 0) rc = open_context(&ctx);
    if (rc >= 0) return rc;
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.dtype = o.dtype, d.num_q_heads = o.hq, d.num_kv_heads = o.hkv, d.head_dim = o.dk, d.value_dim = o.dv;
    d.window = o.window, d.backward = 1;
    fsa_window_plan *plan = NULL;
    int status = TOOL_EXIT_FAILED;
    CUstream s = NULL;
    CUevent e0 = NULL, e1 = NULL;
    CUdevice dev;
    CUcontext pctx;
    enum { BLOCK = 1 << 22 }; /* values per random block (8 MiB) */
    uint16_t *block = malloc((size_t)BLOCK * 2);
    if (block == NULL || !fsa_ok(fsa_window_plan_create(&plan, ctx, &d), "plan")) goto done;
    if (!cu_ok(cu.Init(0), "cuInit") || !cu_ok(cu.DeviceGet(&dev, 0), "cuDeviceGet") ||
        !cu_ok(cu.DevicePrimaryCtxRetain(&pctx, dev), "cuDevicePrimaryCtxRetain") ||
        !cu_ok(cu.CtxSetCurrent(pctx), "cuCtxSetCurrent") ||
        !cu_ok(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
        !cu_ok(cu.EventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate") ||
        !cu_ok(cu.EventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate"))
        goto done;
    /* Random values of magnitude 0.5 .. 2 and random sign, as the dtype's bits (xorshift). */
    uint32_t x = 0x9e3779b9u;
    for (int i = 0; i < BLOCK; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        const unsigned sign = (x >> 31) << 15, low = x & 1;
        block[i] = (uint16_t)(o.dtype == FSA_DTYPE_BF16 ? sign | (126u + low) << 7 | ((x >> 8) & 0x7fu)
                                                        : sign | (14u + low) << 10 | ((x >> 8) & 0x3ffu));
    }
    char name[256];
    if (!cu_ok(cu.DeviceGetName(name, sizeof name, dev), "cuDeviceGetName")) goto done;
    printf("# fsa-bench --window %s on %s (%s): %s Hq %d Hkv %d Dk %d Dv %d W %d; median of %d calls\n",
           fsa_version_string(), name, fsa_context_target(ctx), tool_dtype_name(o.dtype), o.hq, o.hkv, o.dk, o.dv,
           o.window, o.reps);
    status = TOOL_EXIT_OK;
    for (int i = 0; i < o.n_tokens && status == TOOL_EXIT_OK; i++)
        if (run_tokens(&o, plan, o.tokens[i], block, (size_t)BLOCK * 2, s, e0, e1) != 0) status = TOOL_EXIT_FAILED;
done:
    if (e0) cu.EventDestroy(e0);
    if (e1) cu.EventDestroy(e1);
    if (s) cu.StreamDestroy(s);
    free(block);
    fsa_window_plan_destroy(plan);
    fsa_context_destroy(ctx);
    return status;
}
