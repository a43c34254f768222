/* Sliding-window attention timings on the GPU (not a test: CTest does not
 * run it). One sequence of T tokens per line, random inputs; each call is
 * timed alone with CUDA events after 3 warm-up calls, the median of REPS
 * calls reported (the backward is both of its kernels). TFLOP/s counts the
 * products over the visible keys as usually counted: forward
 * 2 T Hq Wbar (Dk + Dv), backward 2 T Hq Wbar (3 Dk + 2 Dv), Wbar the mean
 * number of keys a query sees.
 *
 *   window_timing [T ...]      (default 8192 65536)
 *   environment: WT_DTYPE=bf16|f16, WT_HQ, WT_HKV, WT_DK, WT_DV, WT_W, WT_REPS
 *   (defaults: NSA's window branch, bf16, Hq 64, Hkv 4, Dk 192, Dv 128, W 512, 20 reps)
 */
#include "attention_problem.h"

#include "jit/cuda_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

typedef struct shape {
    fsa_dtype dtype;
    int hq, hkv, dk, dv, w, reps;
} shape;

/* A device buffer of `bytes` holding a repeated block of random dtype values. */
static uint64_t random_buffer(size_t bytes, const uint16_t *block, size_t block_bytes)
{
    const uint64_t d = fsa_test_dalloc(bytes);
    for (size_t at = 0; at < bytes; at += block_bytes)
        fsa_test_h2d(d + at, block, bytes - at < block_bytes ? bytes - at : block_bytes);
    return d;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of REPS calls of the forward (bwd NULL) or the backward. */
static float median_ms(const fsa_cu_api *cu, const fsa_window_plan *plan, const fsa_window_fwd_args *fwd,
                       const fsa_window_bwd_args *bwd, int reps)
{
    CUevent e0, e1;
    float *t = calloc((size_t)reps, sizeof *t);
    if (!t || cu->EventCreate(&e0, CU_EVENT_DEFAULT) || cu->EventCreate(&e1, CU_EVENT_DEFAULT)) abort();
    for (int r = -3; r < reps; r++) {
        cu->EventRecord(e0, NULL);
        const fsa_status st = bwd ? fsa_window_attention_bwd(plan, bwd, NULL) : fsa_window_attention_fwd(plan, fwd, NULL);
        if (st != FSA_STATUS_OK) fprintf(stderr, "window_timing: %s\n", fsa_last_error()), exit(1);
        cu->EventRecord(e1, NULL);
        cu->EventSynchronize(e1);
        if (r >= 0) cu->EventElapsedTime(&t[r], e0, e1);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_float);
    const float med = t[reps / 2];
    free(t);
    cu->EventDestroy(e0);
    cu->EventDestroy(e1);
    return med;
}

static void time_tokens(const fsa_cu_api *cu, const fsa_window_plan *plan, const shape *s, int T, const uint16_t *block,
                        size_t block_bytes)
{
    const size_t n = (size_t)T, qk = n * s->hq * s->dk * 2, kk = n * s->hkv * s->dk * 2, kv = n * s->hkv * s->dv * 2;
    const size_t ov = n * s->hq * s->dv * 2;
    size_t ws = 0;
    if (fsa_window_plan_workspace_size_bwd(&ws, plan, T, 1) != FSA_STATUS_OK) abort();
    const int32_t cu_host[2] = {0, T};
    fsa_window_bwd_args b = FSA_WINDOW_BWD_ARGS_INIT;
    b.total_tokens = T, b.batch = 1, b.workspace = fsa_test_dalloc(ws), b.workspace_bytes = ws;
    b.cu_seqlens = fsa_test_dalloc(sizeof cu_host), b.lse = fsa_test_dalloc(n * s->hq * 4);
    fsa_test_h2d(b.cu_seqlens, cu_host, sizeof cu_host);
    const int64_t q_ts = (int64_t)s->hq * s->dk, k_ts = (int64_t)s->hkv * s->dk;
    const int64_t v_ts = (int64_t)s->hkv * s->dv, o_ts = (int64_t)s->hq * s->dv;
    b.q = (fsa_tensor){random_buffer(qk, block, block_bytes), q_ts, s->dk};
    b.k = (fsa_tensor){random_buffer(kk, block, block_bytes), k_ts, s->dk};
    b.v = (fsa_tensor){random_buffer(kv, block, block_bytes), v_ts, s->dv};
    b.o = (fsa_tensor){fsa_test_dalloc(ov), o_ts, s->dv};
    b.dout = (fsa_tensor){random_buffer(ov, block, block_bytes), o_ts, s->dv};
    b.dq = (fsa_tensor){fsa_test_dalloc(qk), q_ts, s->dk};
    b.dk = (fsa_tensor){fsa_test_dalloc(kk), k_ts, s->dk};
    b.dv = (fsa_tensor){fsa_test_dalloc(kv), v_ts, s->dv};
    fsa_window_fwd_args f = FSA_WINDOW_FWD_ARGS_INIT;
    f.total_tokens = T, f.batch = 1, f.cu_seqlens = b.cu_seqlens, f.lse = b.lse;
    f.q = b.q, f.k = b.k, f.v = b.v, f.o = b.o;

    const float fwd = median_ms(cu, plan, &f, NULL, s->reps), bwd = median_ms(cu, plan, &f, &b, s->reps);
    const double w = s->w, keys = n <= w ? (n + 1) / 2 : (w * (w + 1) / 2 + (n - w) * w) / n;
    const double pairs = n * s->hq * keys;
    printf("window T %6d  fwd %8.3f ms (%5.1f TFLOP/s)  bwd %8.3f ms (%5.1f TFLOP/s)  fwd+bwd %8.3f ms\n", T, fwd,
           2 * pairs * (s->dk + s->dv) / (fwd * 1e9), bwd, 2 * pairs * (3 * s->dk + 2 * s->dv) / (bwd * 1e9),
           fwd + bwd);
    fflush(stdout);
    const uint64_t all[] = {b.workspace, b.cu_seqlens, b.lse, b.q.ptr, b.k.ptr, b.v.ptr,
                            b.o.ptr,     b.dout.ptr,   b.dq.ptr, b.dk.ptr, b.dv.ptr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsa_test_dfree(all[i]);
}

int main(int argc, char **argv)
{
    const char *dt = getenv("WT_DTYPE");
    const shape s = {dt && strcmp(dt, "f16") == 0 ? FSA_DTYPE_F16 : FSA_DTYPE_BF16,
                     env_int("WT_HQ", 64),
                     env_int("WT_HKV", 4),
                     env_int("WT_DK", 192),
                     env_int("WT_DV", 128),
                     env_int("WT_W", 512),
                     env_int("WT_REPS", 20)};
    fsa_context *ctx = fsa_test_gpu_context_or_skip(NULL); /* the default cache directory */
    const fsa_cu_api *cu = NULL;
    if (fsa_cu_load(&cu) != FSA_STATUS_OK || s.reps < 1) return 1;
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.dtype = s.dtype, d.num_q_heads = s.hq, d.num_kv_heads = s.hkv, d.head_dim = s.dk, d.value_dim = s.dv;
    d.window = s.w, d.backward = 1;
    fsa_window_plan *plan = NULL;
    if (fsa_window_plan_create(&plan, ctx, &d) != FSA_STATUS_OK)
        return fprintf(stderr, "window_timing: plan: %s\n", fsa_last_error()), 1;
    /* A block of random values (8 MiB), repeated through every input. */
    enum { BLOCK = 1 << 22 };
    uint16_t *block = malloc((size_t)BLOCK * 2);
    if (block == NULL) return 1;
    fsa_rng rng = {0x5eed};
    for (int i = 0; i < BLOCK; i++) block[i] = attn_bits_of(s.dtype, (float)fsa_rng_normal(&rng));
    printf("# window_timing %s: %s Hq %d Hkv %d Dk %d Dv %d W %d, one sequence; median of %d calls\n",
           fsa_version_string(), s.dtype == FSA_DTYPE_BF16 ? "bf16" : "f16", s.hq, s.hkv, s.dk, s.dv, s.w, s.reps);
    const int defaults[] = {8192, 65536};
    for (int i = 1; i < (argc > 1 ? argc : 3); i++)
        time_tokens(cu, plan, &s, argc > 1 ? atoi(argv[i]) : defaults[i - 1], block, (size_t)BLOCK * 2);
    free(block);
    fsa_window_plan_destroy(plan);
    fsa_context_destroy(ctx);
    return 0;
}
