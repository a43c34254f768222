/* Timing of the compression branch (compressed attention with block top-k)
 * on the standard problem: bf16, Hq 32, D 128, kernel 32, stride 16, BK 64,
 * K 16, 1 initial and 2 local blocks, one sequence of T tokens.
 *
 * Uses only fsa.h and the CUDA driver API (loaded with dlopen): CUDA events
 * around every call, 25 ms of warm-up, then the median of repeats covering at
 * least 100 ms. Plan creation and compilation are outside the timed region.
 * Per shape it prints the forward without selection (o, lse), the forward
 * with selection (o, lse, top-k), the backward alone and forward (with
 * top-k) + backward.
 *
 *   cc -O2 -std=c11 -Iinclude -I<cuda include> bench/cmp_bench.c -o cmp_bench -L<build> -lfsa -ldl -lm
 *   ./cmp_bench [-T 8192,65536] [-G 1,4,16] [--min-ms 100] [--warmup-ms 25] [--no-bwd 1] [--once 1]
 */
#define _GNU_SOURCE
#include <fsa.h>

#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HQ 32
#define D 128
#define KSIZE 32
#define STRIDE 16
#define BK 64
#define TOPK 16

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*CtxSynchronize)(void);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
} cu;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "cmp_bench: %s: %s\n", what, why);
    exit(1);
}

#define CU(call)                                                      \
    do {                                                              \
        CUresult r_ = (call);                                         \
        if (r_ != CUDA_SUCCESS) {                                     \
            fprintf(stderr, "cmp_bench: %s failed (%d)\n", #call, (int)r_); \
            exit(1);                                                  \
        }                                                             \
    } while (0)
#define FSA(call)                                          \
    do {                                                   \
        if ((call) != FSA_STATUS_OK) die(#call, fsa_last_error()); \
    } while (0)

static void load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) die("dlopen libcuda.so.1", dlerror());
#define SYM(field, name) \
    if ((*(void **)&cu.field = dlsym(lib, name)) == NULL) die("dlsym", name)
    SYM(Init, "cuInit");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(EventCreate, "cuEventCreate");
    SYM(EventRecord, "cuEventRecord");
    SYM(EventSynchronize, "cuEventSynchronize");
    SYM(EventElapsedTime, "cuEventElapsedTime_v2");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
#undef SYM
}

/* bf16 bits of standard-normal samples; a table of a length prime to every
 * row size, cycled, keeps the host fill short for 268 M elements. */
static uint16_t *normal_table(size_t n, uint64_t seed)
{
    uint16_t *t = malloc(n * 2);
    if (t == NULL) die("malloc", "table");
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 2) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u[j] = ((s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        }
        const double r = sqrt(-2.0 * log(u[0])), a = 6.283185307179586 * u[1];
        const float v[2] = {(float)(r * cos(a)), (float)(r * sin(a))};
        for (int j = 0; j < 2 && i + j < n; j++) {
            uint32_t b;
            memcpy(&b, &v[j], 4);
            t[i + j] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
        }
    }
    return t;
}

static CUdeviceptr upload_normal(size_t n, const uint16_t *table, size_t table_n, size_t offset)
{
    uint16_t *h = malloc(n * 2);
    if (h == NULL) die("malloc", "host buffer");
    for (size_t i = 0; i < n;) {
        const size_t at = (i + offset) % table_n, len = n - i < table_n - at ? n - i : table_n - at;
        memcpy(h + i, table + at, len * 2);
        i += len;
    }
    CUdeviceptr d;
    CU(cu.MemAlloc(&d, n * 2 + 256));
    CU(cu.MemcpyHtoD(d, h, n * 2));
    free(h);
    return d;
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr d;
    CU(cu.MemAlloc(&d, bytes + 256));
    return d;
}

typedef fsa_status (*call_fn)(void *);

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int g_once; /* --once 1: every call exactly once (for a profiler) */

/* Milliseconds of one call between two events. */
static float call_ms(call_fn fn, void *arg, CUevent e0, CUevent e1)
{
    float ms;
    CU(cu.EventRecord(e0, NULL));
    FSA(fn(arg));
    CU(cu.EventRecord(e1, NULL));
    CU(cu.EventSynchronize(e1));
    CU(cu.EventElapsedTime(&ms, e0, e1));
    return ms;
}

/* Median milliseconds of fn(arg) by the protocol above. */
static double time_call(call_fn fn, void *arg, double warmup_ms, double min_ms)
{
    CUevent e0, e1;
    CU(cu.EventCreate(&e0, 0));
    CU(cu.EventCreate(&e1, 0));
    if (g_once) return call_ms(fn, arg, e0, e1);
    double spent = 0.0;
    for (int i = 0; i < 1 || spent < warmup_ms; i++) spent += call_ms(fn, arg, e0, e1);
    enum { CAP = 4096 };
    static float t[CAP];
    int n = 0;
    spent = 0.0;
    while (n < CAP && (spent < min_ms || n < 5)) {
        t[n] = call_ms(fn, arg, e0, e1);
        spent += t[n++];
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_float);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

typedef struct shape_calls {
    const fsa_compressed_plan *plan;
    fsa_compressed_fwd_args fwd, fwd_attn;
    fsa_compressed_bwd_args bwd;
} shape_calls;

static fsa_status run_fwd_attn(void *a)
{
    const shape_calls *s = a;
    return fsa_compressed_attention_fwd(s->plan, &s->fwd_attn, NULL);
}
static fsa_status run_fwd(void *a)
{
    const shape_calls *s = a;
    return fsa_compressed_attention_fwd(s->plan, &s->fwd, NULL);
}
static fsa_status run_bwd(void *a)
{
    const shape_calls *s = a;
    return fsa_compressed_attention_bwd(s->plan, &s->bwd, NULL);
}
static fsa_status run_fwd_bwd(void *a)
{
    const fsa_status st = run_fwd(a);
    return st != FSA_STATUS_OK ? st : run_bwd(a);
}

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        out[n++] = (int)strtol(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s) break;
    }
    return n;
}

int main(int argc, char **argv)
{
    int ts[8] = {8192, 65536}, gs[8] = {1, 4, 16}, n_t = 2, n_g = 3;
    double warmup_ms = 25.0, min_ms = 100.0;
    int no_bwd = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-T")) n_t = parse_list(argv[i + 1], ts, 8);
        else if (!strcmp(argv[i], "-G")) n_g = parse_list(argv[i + 1], gs, 8);
        else if (!strcmp(argv[i], "--min-ms")) min_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup-ms")) warmup_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--no-bwd")) no_bwd = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--once")) g_once = atoi(argv[i + 1]);
        else die("usage", "cmp_bench [-T list] [-G list] [--min-ms x] [--warmup-ms x] [--no-bwd 1] [--once 1]");
    }
    load_driver();
    fsa_context *ctx = NULL;
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.cache_dir = getenv("FSA_CACHE_DIR");
    FSA(fsa_context_create(&ctx, &co));
    /* The device's primary context (the one the library uses) for our own calls. */
    CUdevice dev;
    CUcontext pctx;
    CU(cu.Init(0));
    CU(cu.DeviceGet(&dev, 0));
    CU(cu.DevicePrimaryCtxRetain(&pctx, dev));
    CU(cu.CtxSetCurrent(pctx));

    int t_max = 0;
    for (int i = 0; i < n_t; i++) t_max = ts[i] > t_max ? ts[i] : t_max;
    const int tc_max = (t_max - KSIZE) / STRIDE + 1;
    const size_t table_n = 16777259; /* prime */
    uint16_t *table = normal_table(table_n, 0x5eed);
    /* The largest shape's tensors; smaller shapes use their leading tokens. */
    const size_t nq = (size_t)t_max * HQ * D, nk = (size_t)tc_max * HQ * D;
    const CUdeviceptr q = upload_normal(nq, table, table_n, 0), dout = upload_normal(nq, table, table_n, 977);
    const CUdeviceptr k = upload_normal(nk, table, table_n, 31337), v = upload_normal(nk, table, table_n, 4242);
    const CUdeviceptr o = dalloc(nq * 2), dq = dalloc(nq * 2), dk = dalloc(nk * 2), dv = dalloc(nk * 2);
    const CUdeviceptr lse = dalloc((size_t)HQ * t_max * 4), topk = dalloc((size_t)t_max * HQ * TOPK * 4);
    const CUdeviceptr cu_q = dalloc(8), cu_c = dalloc(8);
    free(table);

    printf("# cmp_bench: bf16 Hq %d D %d kernel %d stride %d BK %d K %d init 1 local 2; warm-up %.0f ms, median over "
           ">= %.0f ms\n",
           HQ, D, KSIZE, STRIDE, BK, TOPK, warmup_ms, min_ms);
    printf("%-6s %-3s %-5s %10s %10s %10s %10s %10s\n", "T", "G", "Tc", "fwd_attn", "fwd_topk", "bwd", "fwd+bwd",
           "select");
    for (int it = 0; it < n_t; it++)
        for (int ig = 0; ig < n_g; ig++) {
            const int T = ts[it], G = gs[ig], hkv = HQ / G, Tc = (T - KSIZE) / STRIDE + 1;
            fsa_compressed_attention_desc d = FSA_COMPRESSED_ATTENTION_DESC_INIT;
            d.dtype = FSA_DTYPE_BF16;
            d.head_dim = D;
            d.num_q_heads = HQ;
            d.num_kv_heads = hkv;
            d.backward = 1;
            fsa_compressed_plan *plan = NULL;
            FSA(fsa_compressed_plan_create(&plan, ctx, &d));
            const int32_t cu_host[2] = {0, T}, cuc_host[2] = {0, Tc};
            CU(cu.MemcpyHtoD(cu_q, cu_host, 8));
            CU(cu.MemcpyHtoD(cu_c, cuc_host, 8));
            size_t ws_bytes = 0;
            FSA(fsa_compressed_plan_workspace_size_bwd(&ws_bytes, plan, T, 1));
            const CUdeviceptr ws = dalloc(ws_bytes);

            shape_calls s;
            s.plan = plan;
            fsa_compressed_fwd_args f = FSA_COMPRESSED_FWD_ARGS_INIT;
            f.total_tokens = T;
            f.total_compressed = Tc;
            f.batch = 1;
            f.q = (fsa_tensor){q, HQ * D, D};
            f.k = (fsa_tensor){k, (int64_t)hkv * D, D};
            f.v = (fsa_tensor){v, (int64_t)hkv * D, D};
            f.o = (fsa_tensor){o, HQ * D, D};
            f.lse = lse;
            f.cu_seqlens = cu_q;
            f.cu_seqlens_c = cu_c;
            f.topk = (fsa_tensor){topk, (int64_t)hkv * TOPK, TOPK};
            s.fwd = f;
            s.fwd_attn = f;
            s.fwd_attn.topk.ptr = 0;
            fsa_compressed_bwd_args b = FSA_COMPRESSED_BWD_ARGS_INIT;
            b.total_tokens = T;
            b.total_compressed = Tc;
            b.batch = 1;
            b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o;
            b.dout = (fsa_tensor){dout, HQ * D, D};
            b.dq = (fsa_tensor){dq, HQ * D, D};
            b.dk = (fsa_tensor){dk, (int64_t)hkv * D, D};
            b.dv = (fsa_tensor){dv, (int64_t)hkv * D, D};
            b.lse = lse, b.cu_seqlens = cu_q, b.cu_seqlens_c = cu_c;
            b.workspace = (ws + 255) & ~(CUdeviceptr)255, b.workspace_bytes = ws_bytes;
            s.bwd = b;

            const double t_attn = time_call(run_fwd_attn, &s, warmup_ms, min_ms);
            const double t_fwd = time_call(run_fwd, &s, warmup_ms, min_ms);
            const double t_bwd = no_bwd ? NAN : time_call(run_bwd, &s, warmup_ms, min_ms);
            const double t_all = no_bwd ? NAN : time_call(run_fwd_bwd, &s, warmup_ms, min_ms);
            printf("%-6d %-3d %-5d %10.3f %10.3f %10.3f %10.3f %10.3f\n", T, G, Tc, t_attn, t_fwd, t_bwd, t_all,
                   t_fwd - t_attn);
            fflush(stdout);
            fsa_compressed_plan_destroy(plan);
            CU(cu.CtxSynchronize());
            /* ws leaks until exit: a handful of shapes. */
        }
    fsa_context_destroy(ctx);
    return 0;
}
