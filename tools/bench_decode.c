/*
 * fsa-bench --decode: selected attention of new query tokens over a paged KV
 * cache, through the public API.
 *
 * Problem: bf16, Hq 32, D 128 (Dv 128 or --value-dim), BK 64, K 16, page 64; context L, batch B,
 * group G, q_len new tokens per sequence. Per KV head and token: the own
 * block, block 0 and the block before the own one, the other slots distinct
 * random blocks. q_len 4 runs twice: "shared" (the 4 tokens select the same
 * blocks) and "indep" (each token its own). Only the pages some selection
 * touches are allocated (each sequence its own pages, in a shuffled order);
 * the page table maps the others to one page that is never read. The L2 is
 * flushed (a 256 MiB memset) before every timed call; CUDA events around
 * each call (or each graph launch), median of the repeats. Effective
 * bandwidth = B * Hkv * K * BK * (D + Dv) * 2 bytes / time (K and V of the
 * selected blocks; with shared selections counted once per sequence, with
 * independent ones once per token).
 *
 * Also: a dense decode (every block of a 16K context selected: BK 256, K 64)
 * for scale, chunked prefill (q_len 4096 on a 60K cached prefix) and the host
 * time of one call. Uses include/fsa.h and the CUDA driver API only.
 */
#define _GNU_SOURCE
#include "bench_decode.h"

#include "fsa.h"

#include "bench_cuda.h"
#include "tool_args.h"

#include <getopt.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CU(call) BENCH_CU("--decode", call)

#define FSA(call) BENCH_FSA("--decode", call)

enum { HQ = 32, D = 128, PAGE = 64 };

/* --stamps: the buffer handed to the stamped kernel; the library refuses a
 * plan whose kernel would write more (FSA_KVC_STAMPS is ADDRESS:BYTES). */
#define STAMP_BUFFER_BYTES ((size_t)8 << 20)

#define DEC_MAX_LIST 16 /* values of -L, -B or -G; more is a usage error */

typedef struct dec_opts {
    int ls[DEC_MAX_LIST], n_ls, bs[DEC_MAX_LIST], n_bs, gs[DEC_MAX_LIST], n_gs;
    int reps, splits;
    double max_gb;
    int prefill, dense;
    int hnd; /* pages as [num_pages, Hkv, page_size, D] (a head's keys of a page contiguous) */
    int dv;  /* value head dim (v cache and o) */
    const char *stamps; /* --stamps FILE: per-CTA phase stamps of one call per row (kvc_stamps.cuh) */
} dec_opts;

typedef struct bench_env {
    CUstream stream;
    CUevent e0, e1;
    CUdeviceptr flush;
    size_t flush_bytes;
    CUdeviceptr stamps; /* --stamps: the kernel's stamp records, and the file they go to */
    FILE *stamps_file;
} bench_env;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The own block c, 0, c - 1, then distinct random blocks of 0..c. */
static void select_row(int32_t *row, int k, int c, uint64_t *rng)
{
    int n = 0;
    const int want = c + 1 < k ? c + 1 : k;
    const int forced[3] = {c, 0, c - 1};
    for (int f = 0; f < 3 && n < want; f++) {
        int dup = forced[f] < 0;
        for (int s = 0; s < n; s++) dup |= row[s] == forced[f];
        if (!dup) row[n++] = forced[f];
    }
    while (n < want) {
        const int v = (int)(rng_next(rng) % (uint64_t)(c + 1));
        int dup = 0;
        for (int s = 0; s < n; s++) dup |= row[s] == v;
        if (!dup) row[n++] = v;
    }
    for (int s = n; s < k; s++) row[s] = -1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A paged problem on the device: B sequences of L cached keys with q_len new tokens each. */
typedef struct dec_problem {
    int B, L, hkv, q_len, k, bk, dv;
    int64_t tq;
    CUdeviceptr q, o, lse, k_cache, v_cache, table, cu, seqused, topk, ws;
    int64_t num_pages;
    int max_pages;
    int hnd;
    size_t bytes;
} dec_problem;

static void dec_free(dec_problem *p)
{
    CUdeviceptr all[] = {p->q, p->o, p->lse, p->k_cache, p->v_cache, p->table, p->cu, p->seqused, p->topk, p->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) cu.MemFree(all[i]);
    memset(p, 0, sizeof *p);
}

static CUdeviceptr upload(const void *src, size_t bytes)
{
    CUdeviceptr d;
    CU(cu.MemAlloc(&d, bytes ? bytes : 4));
    if (bytes) CU(cu.MemcpyHtoD(d, src, bytes));
    return d;
}

/* Returns 0 when the touched pages would pass max_gb (nothing allocated). */
static int dec_make(dec_problem *p, const dec_opts *o, int B, int L, int hkv, int q_len, int shared, int k, int bk,
                    const fsa_kvcache_plan *plan, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->B = B, p->L = L, p->hkv = hkv, p->q_len = q_len, p->k = k, p->bk = bk, p->dv = o->dv;
    p->tq = (int64_t)B * q_len;
    const int nblk = (L + bk - 1) / bk, pages_per_block = bk / PAGE;
    p->max_pages = (L + PAGE - 1) / PAGE;
    int32_t *topk = malloc((size_t)p->tq * hkv * k * sizeof(int32_t));
    int32_t *table = malloc((size_t)B * p->max_pages * sizeof(int32_t));
    char *touched = malloc((size_t)nblk);
    uint64_t rng = seed;
    int64_t pages = 1; /* page 0: the stand-in for pages never read */
    for (int b = 0; b < B; b++) {
        memset(touched, 0, (size_t)nblk);
        for (int i = 0; i < q_len; i++) {
            const int pos = L - q_len + i;
            for (int h = 0; h < hkv; h++) {
                int32_t *row = topk + (((int64_t)b * q_len + i) * hkv + h) * k;
                if (shared && i > 0) memcpy(row, row - (int64_t)hkv * k, (size_t)k * sizeof(int32_t));
                else select_row(row, k, pos / bk, &rng);
                for (int s = 0; s < k; s++)
                    if (row[s] >= 0) touched[row[s]] = 1;
            }
        }
        int32_t *trow = table + (size_t)b * p->max_pages;
        for (int j = 0; j < p->max_pages; j++) trow[j] = 0;
        for (int c = 0; c < nblk; c++)
            if (touched[c])
                for (int j = c * pages_per_block; j < (c + 1) * pages_per_block && j < p->max_pages; j++) trow[j] = (int32_t)pages++;
    }
    /* Shuffle the physical pages (page 0 stays put). */
    int32_t *perm = malloc((size_t)pages * sizeof(int32_t));
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = pages - 1; i > 1; i--) {
        const int64_t j = 1 + (int64_t)(rng_next(&rng) % (uint64_t)i);
        const int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (size_t i = 0; i < (size_t)B * p->max_pages; i++) table[i] = perm[table[i]];
    free(perm);
    free(touched);
    p->num_pages = pages;
    const size_t page_bytes = (size_t)PAGE * hkv * D * 2, v_page_bytes = (size_t)PAGE * hkv * p->dv * 2;
    p->bytes = (size_t)pages * (page_bytes + v_page_bytes);
    if ((double)p->bytes > o->max_gb * 1e9) {
        free(topk);
        free(table);
        return 0;
    }
    CU(cu.MemAlloc(&p->k_cache, (size_t)pages * page_bytes));
    CU(cu.MemAlloc(&p->v_cache, (size_t)pages * v_page_bytes));
    CU(cu.MemsetD16(p->k_cache, 0x3c00, (size_t)pages * page_bytes / 2));
    CU(cu.MemsetD16(p->v_cache, 0x3c00, (size_t)pages * v_page_bytes / 2));
    const size_t nq = (size_t)p->tq * HQ * D;
    CU(cu.MemAlloc(&p->q, nq * 2));
    CU(cu.MemsetD16(p->q, 0x3c00, nq));
    CU(cu.MemAlloc(&p->o, (size_t)p->tq * HQ * p->dv * 2));
    CU(cu.MemAlloc(&p->lse, (size_t)p->tq * HQ * 4));
    p->topk = upload(topk, (size_t)p->tq * hkv * k * sizeof(int32_t));
    p->table = upload(table, (size_t)B * p->max_pages * sizeof(int32_t));
    int32_t *starts = malloc((size_t)(B + 1) * sizeof(int32_t)), *used = malloc((size_t)B * sizeof(int32_t));
    for (int b = 0; b <= B; b++) starts[b] = b * q_len;
    for (int b = 0; b < B; b++) used[b] = L;
    p->cu = upload(starts, (size_t)(B + 1) * 4);
    p->seqused = upload(used, (size_t)B * 4);
    size_t ws = 0;
    FSA(fsa_kvcache_plan_workspace_size(&ws, plan));
    if (ws) {
        CU(cu.MemAlloc(&p->ws, ws));
        CU(cu.MemsetD8(p->ws, 0, ws)); /* once: its counters stay zero between calls */
    }
    free(starts);
    free(used);
    free(topk);
    free(table);
    return 1;
}

static fsa_kvcache_args dec_args(const dec_problem *p, const fsa_kvcache_plan *plan)
{
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    a.num_query_tokens = p->tq;
    a.batch = p->B;
    a.q = (fsa_tensor){p->q, HQ * D, D};
    a.o = (fsa_tensor){p->o, (int64_t)HQ * p->dv, p->dv};
    a.cu_seqlens_q = p->cu;
    /* NHD: token stride Hkv x D, head stride D; HND: token stride D, head stride page x D (Dv for v). */
    const int64_t ts = p->hnd ? D : (int64_t)p->hkv * D, hs = p->hnd ? (int64_t)PAGE * D : D;
    const int64_t vts = p->hnd ? p->dv : (int64_t)p->hkv * p->dv, vhs = p->hnd ? (int64_t)PAGE * p->dv : p->dv;
    a.k_cache = (fsa_tensor){p->k_cache, ts, hs};
    a.v_cache = (fsa_tensor){p->v_cache, vts, vhs};
    a.k_page_stride = (int64_t)PAGE * p->hkv * D;
    a.v_page_stride = (int64_t)PAGE * p->hkv * p->dv;
    a.num_pages = p->num_pages;
    a.block_table = p->table;
    a.block_table_stride = p->max_pages;
    a.max_pages_per_seq = p->max_pages;
    a.seqused_k = p->seqused;
    a.topk = (fsa_tensor){p->topk, (int64_t)p->hkv * p->k, p->k};
    a.lse = p->lse;
    a.workspace = p->ws;
    FSA(fsa_kvcache_plan_workspace_size(&a.workspace_bytes, plan));
    return a;
}

/* Median microseconds of one call, the L2 flushed before each; graph = 1:
 * the call captured once and replayed. */
static double time_call(const bench_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, int reps,
                        int graph)
{
    CUgraphExec exec = NULL;
    if (graph) {
        CUgraph g;
        CU(cu.StreamBeginCapture(env->stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        FSA(fsa_kvcache_attention(plan, a, env->stream));
        CU(cu.StreamEndCapture(env->stream, &g));
        CU(cu.GraphInstantiate(&exec, g, 0));
        CU(cu.GraphDestroy(g));
    }
    double *t = malloc((size_t)reps * sizeof(double));
    for (int r = -3; r < reps; r++) {
        CU(cu.MemsetD8Async(env->flush, (unsigned char)r, env->flush_bytes, env->stream));
        CU(cu.EventRecord(env->e0, env->stream));
        if (graph) CU(cu.GraphLaunch(exec, env->stream));
        else FSA(fsa_kvcache_attention(plan, a, env->stream));
        CU(cu.EventRecord(env->e1, env->stream));
        CU(cu.EventSynchronize(env->e1));
        float ms = 0;
        CU(cu.EventElapsedTime(&ms, env->e0, env->e1));
        if (r >= 0) t[r] = ms * 1e3;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    const double med = t[reps / 2];
    free(t);
    if (exec) CU(cu.GraphExecDestroy(exec));
    return med;
}

/* --stamps: one call (L2 flushed) of the stamped kernel; its buffer is written
 * as one line "call L B G q_len mode WORDS w0 w1 ..." up to the last nonzero
 * word (bench/kvc_stamps.py splits it into records by the kernel's layout). */
static void write_stamps(const bench_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a,
                         const dec_problem *p, int g, int mode)
{
    const size_t words = STAMP_BUFFER_BYTES / 8;
    unsigned long long *h = malloc(STAMP_BUFFER_BYTES);
    if (h == NULL) return (void)fprintf(stderr, "fsa-bench --decode: out of host memory for the stamps\n");
    CU(cu.MemsetD8Async(env->stamps, 0, STAMP_BUFFER_BYTES, env->stream));
    CU(cu.MemsetD8Async(env->flush, 1, env->flush_bytes, env->stream));
    FSA(fsa_kvcache_attention(plan, a, env->stream));
    CU(cu.StreamSynchronize(env->stream));
    CU(cu.MemcpyDtoH(h, env->stamps, STAMP_BUFFER_BYTES));
    size_t n = words;
    while (n > 0 && h[n - 1] == 0) n--;
    fprintf(env->stamps_file, "call %d %d %d %d %d %zu", p->L, p->B, g, p->q_len, mode, n);
    for (size_t i = 0; i < n; i++) fprintf(env->stamps_file, " %llu", h[i]);
    fputc('\n', env->stamps_file);
    fflush(env->stamps_file);
    free(h);
}

/* Host microseconds per call: enqueue cost, without the GPU's time. */
static double host_time(const bench_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a)
{
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < 200; i++) FSA(fsa_kvcache_attention(plan, a, env->stream));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CU(cu.StreamSynchronize(env->stream));
        const double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / 200;
        if (us < best) best = us;
    }
    return best;
}

static fsa_kvcache_plan *make_plan(fsa_context *ctx, const dec_opts *o, int g, int bk, int k, int max_batch,
                                   int64_t max_tokens)
{
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.head_dim = D;
    d.value_dim = o->dv;
    d.num_q_heads = HQ;
    d.num_kv_heads = HQ / g;
    d.block_size = bk;
    d.top_k = k;
    d.page_size = PAGE;
    d.max_batch = max_batch;
    d.max_query_tokens = max_tokens;
    d.splits = o->splits;
    fsa_kvcache_plan *plan = NULL;
    FSA(fsa_kvcache_plan_create(&plan, ctx, &d));
    return plan;
}

static void decode_usage(FILE *f)
{
    fprintf(f,
            "Usage: fsa-bench --decode [OPTIONS]   paged KV-cache decode, speculative and prefill timings\n"
            "  -L LIST          cached lengths (default 8192,32768,131072; at most %d values)\n"
            "  -B LIST          batch sizes (default 1,16,64,128,256)\n"
            "  -G LIST          query heads per KV head (default 1,4,16)\n"
            "  --reps N         timed graph replays per row (default 30)\n"
            "  --max-gb GB      skip rows whose cache would exceed this (default 90)\n"
            "  --splits N       split count of the plan (default 0: the plan's rule)\n"
            "  --no-prefill     skip the chunked-prefill row\n"
            "  --no-dense       skip the dense decode rows\n"
            "  --hnd            pages as [num_pages, Hkv, page_size, D] (default NHD: [num_pages, page_size, Hkv, D])\n"
            "  --value-dim N    head dim of v and o (default 128, the key head dim)\n"
            "  --stamps FILE    debug: the kernel variant with per-CTA phase stamps (tensor-map kernels, sm_90a);\n"
            "                   one more call per row writes its CTAs' records to FILE (timings include the stamps)\n"
            "  -h, --help       this text\n"
            "Exit status: 0 success; 1 a benchmark failed; 2 usage error; 3 no CUDA driver.\n",
            DEC_MAX_LIST);
}

static int decode_usage_error(const char *option)
{
    fprintf(stderr, "fsa-bench --decode: bad value for %s\n", option);
    decode_usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* Options of --decode; returns -1 to go on, else the exit code. */
static int parse_decode_args(dec_opts *o, int argc, char **argv)
{
    enum { OPT_REPS = 256, OPT_MAX_GB, OPT_SPLITS, OPT_NO_PREFILL, OPT_NO_DENSE, OPT_HND, OPT_VALUE_DIM, OPT_STAMPS };
    static const struct option longs[] = {
        {"reps", required_argument, NULL, OPT_REPS},         {"max-gb", required_argument, NULL, OPT_MAX_GB},
        {"splits", required_argument, NULL, OPT_SPLITS},     {"no-prefill", no_argument, NULL, OPT_NO_PREFILL},
        {"no-dense", no_argument, NULL, OPT_NO_DENSE},       {"hnd", no_argument, NULL, OPT_HND},
        {"value-dim", required_argument, NULL, OPT_VALUE_DIM}, {"stamps", required_argument, NULL, OPT_STAMPS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long v;
    int c;
    optind = 1;
    opterr = 0; /* argv[0] is "--decode": the messages below name the tool instead */
    while ((c = getopt_long(argc, argv, "L:B:G:h", longs, NULL)) != -1) {
        switch (c) {
        case 'L':
            if (tool_parse_list(o->ls, &o->n_ls, DEC_MAX_LIST, optarg, 1, 1L << 30) != 0) return decode_usage_error("-L");
            break;
        case 'B':
            if (tool_parse_list(o->bs, &o->n_bs, DEC_MAX_LIST, optarg, 1, 1 << 20) != 0) return decode_usage_error("-B");
            break;
        case 'G':
            if (tool_parse_list(o->gs, &o->n_gs, DEC_MAX_LIST, optarg, 1, HQ) != 0) return decode_usage_error("-G");
            break;
        case OPT_REPS:
            if (tool_parse_long(&v, optarg, 1, 1000000) != 0) return decode_usage_error("--reps");
            o->reps = (int)v;
            break;
        case OPT_MAX_GB:
            if (tool_parse_double(&o->max_gb, optarg, 0.001, 1e6) != 0) return decode_usage_error("--max-gb");
            break;
        case OPT_SPLITS:
            if (tool_parse_long(&v, optarg, 0, 64) != 0) return decode_usage_error("--splits");
            o->splits = (int)v;
            break;
        case OPT_NO_PREFILL: o->prefill = 0; break;
        case OPT_NO_DENSE: o->dense = 0; break;
        case OPT_HND: o->hnd = 1; break;
        case OPT_VALUE_DIM:
            if (tool_parse_long(&v, optarg, 16, 256) != 0 || v % 16 != 0) return decode_usage_error("--value-dim");
            o->dv = (int)v;
            break;
        case OPT_STAMPS: o->stamps = optarg; break;
        case 'h': decode_usage(stdout); return TOOL_EXIT_OK;
        default:
            fprintf(stderr, "fsa-bench --decode: unknown option or missing value: %s\n", argv[optind - 1]);
            decode_usage(stderr);
            return TOOL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fsa-bench --decode: unexpected argument %s\n", argv[optind]);
        decode_usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    return -1;
}


static void run_grid(const dec_opts *o, fsa_context *ctx, const bench_env *env)
{
    printf("\n## Decode: bf16 Hq %d D %d Dv %d BK 64 K 16 page %d; us = median CUDA-event time (L2 flushed),"
           " TB/s = B*Hkv*K*BK*(D+Dv)*2 / time\n",
           HQ, D, o->dv, PAGE);
    printf("|      L |   B |  G | q_len | selection | stream us | graph us | TB/s (graph) | host us | pages GB |\n");
    for (int gi = 0; gi < o->n_gs; gi++) {
        const int g = o->gs[gi], hkv = HQ / g;
        fsa_kvcache_plan *plan = make_plan(ctx, o, g, 64, 16, 256, 256 * 4);
        for (int li = 0; li < o->n_ls; li++)
            for (int bi = 0; bi < o->n_bs; bi++)
                for (int mode = 0; mode < 3; mode++) { /* q_len 1; 4 shared; 4 independent */
                    const int q_len = mode == 0 ? 1 : 4;
                    dec_problem p;
                    if (!dec_make(&p, o, o->bs[bi], o->ls[li], hkv, q_len, mode == 1, 16, 64, plan, 1234 + (uint64_t)bi)) {
                        printf("| %6d | %3d | %2d | %5d | %-9s | skipped: touched pages over %.0f GB |\n", o->ls[li],
                               o->bs[bi], g, q_len, mode == 0 ? "-" : mode == 1 ? "shared" : "indep", o->max_gb);
                        continue;
                    }
                    p.hnd = o->hnd;
                    const fsa_kvcache_args a = dec_args(&p, plan);
                    const double us = time_call(env, plan, &a, o->reps, 0);
                    const double us_g = time_call(env, plan, &a, o->reps, 1);
                    const double host = mode == 0 && !env->stamps ? host_time(env, plan, &a) : 0.0;
                    if (env->stamps) write_stamps(env, plan, &a, &p, g, mode);
                    /* Independent selections: every token's K blocks count. */
                    const double bytes = (double)p.B * hkv * 16 * 64 * (D + o->dv) * 2 * (mode == 2 ? q_len : 1);
                    printf("| %6d | %3d | %2d | %5d | %-9s | %9.1f | %8.1f | %12.2f | %7.2f | %8.2f |\n", p.L, p.B, g,
                           q_len, mode == 0 ? "-" : mode == 1 ? "shared" : "indep", us, us_g, bytes / us_g / 1e6,
                           host, (double)p.bytes / 1e9);
                    fflush(stdout);
                    dec_free(&p);
                }
        fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
        if (fsa_kvcache_plan_choice_get(&c, plan) == FSA_STATUS_OK)
            printf("# G %d: %d shares per one-tile sequence (%s; %s)\n", g, c.splits, c.variant, c.reason);
        fsa_kvcache_plan_destroy(plan);
    }
}

/* Dense decode for scale: a 16K context with every block selected (BK 256, K 64). */
static void run_dense(const dec_opts *o, fsa_context *ctx, const bench_env *env)
{
    printf("\n## Dense decode for scale: L 16384, every block selected (BK 256, K 64 = 16384 keys), q_len 1\n");
    printf("|   B |  G | graph us | TB/s | estimate at L 32768 (x2) us |\n");
    const int bs[] = {1, 64};
    const int gs[] = {4, 16};
    for (int gi = 0; gi < 2; gi++) {
        fsa_kvcache_plan *plan = make_plan(ctx, o, gs[gi], 256, 64, 256, 256);
        for (int bi = 0; bi < 2; bi++) {
            dec_problem p;
            if (!dec_make(&p, o, bs[bi], 16384, HQ / gs[gi], 1, 0, 64, 256, plan, 99)) continue;
            const fsa_kvcache_args a = dec_args(&p, plan);
            const double us = time_call(env, plan, &a, o->reps, 1);
            const double bytes = (double)p.B * p.hkv * 16384.0 * (D + o->dv) * 2;
            printf("| %3d | %2d | %8.1f | %4.2f | %27.0f |\n", p.B, gs[gi], us, bytes / us / 1e6, 2 * us);
            dec_free(&p);
        }
        fsa_kvcache_plan_destroy(plan);
    }
}

/* Chunked prefill: 4096 new tokens on a 60K cached prefix, one sequence. */
static void run_prefill(const dec_opts *o, fsa_context *ctx, const bench_env *env)
{
    printf("\n## Chunked prefill: q_len 4096 on a 61440-token prefix (L 65536), B 1, K 16, BK 64\n");
    printf("|  G | us | ns per query token |\n");
    for (int gi = 0; gi < o->n_gs; gi++) {
        const int g = o->gs[gi];
        fsa_kvcache_plan *plan = make_plan(ctx, o, g, 64, 16, 1, 4096);
        dec_problem p;
        if (dec_make(&p, o, 1, 65536, HQ / g, 4096, 0, 16, 64, plan, 5)) {
            const fsa_kvcache_args a = dec_args(&p, plan);
            const double us = time_call(env, plan, &a, o->reps, 0);
            printf("| %2d | %8.1f | %6.1f |\n", g, us, us * 1e3 / 4096);
            dec_free(&p);
        }
        fsa_kvcache_plan_destroy(plan);
    }
}

int fsa_bench_decode(int argc, char **argv)
{
    dec_opts o = {.ls = {8192, 32768, 131072}, .n_ls = 3, .bs = {1, 16, 64, 128, 256}, .n_bs = 5,
                  .gs = {1, 4, 16}, .n_gs = 3, .reps = 30, .max_gb = 90.0, .prefill = 1, .dense = 1, .dv = D};
    const int rc = parse_decode_args(&o, argc, argv);
    if (rc >= 0) return rc;
    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0) return fprintf(stderr, "fsa-bench --decode: %s\n", why), TOOL_EXIT_TARGET;
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    fsa_context *ctx = NULL;
    FSA(fsa_context_create(&ctx, &co));
    CUdevice dev;
    CUcontext pctx;
    CU(cu.Init(0));
    CU(cu.DeviceGet(&dev, 0));
    CU(cu.DevicePrimaryCtxRetain(&pctx, dev));
    CU(cu.CtxSetCurrent(pctx));
    char name[256];
    CU(cu.DeviceGetName(name, sizeof name, dev));
    printf("# fsa-bench --decode %s on %s (%s), splits %d (0 = the plan's rule), %s pages, Dv %d\n",
           fsa_version_string(), name, fsa_context_target(ctx), o.splits, o.hnd ? "HND" : "NHD", o.dv);
    bench_env env;
    env.flush_bytes = (size_t)256 << 20;
    CU(cu.StreamCreate(&env.stream, CU_STREAM_NON_BLOCKING));
    CU(cu.EventCreate(&env.e0, CU_EVENT_DEFAULT));
    CU(cu.EventCreate(&env.e1, CU_EVENT_DEFAULT));
    CU(cu.MemAlloc(&env.flush, env.flush_bytes));
    env.stamps = 0;
    env.stamps_file = NULL;
    if (o.stamps) {
        /* The plans made from here on take the stamped kernel (kvcache.c reads the buffer's address and size). */
        CU(cu.MemAlloc(&env.stamps, STAMP_BUFFER_BYTES));
        char addr[64];
        snprintf(addr, sizeof addr, "0x%llx:%llu", (unsigned long long)env.stamps, (unsigned long long)STAMP_BUFFER_BYTES);
        setenv("FSA_KVC_STAMPS", addr, 1);
        env.stamps_file = fopen(o.stamps, "w");
        if (env.stamps_file == NULL) return fprintf(stderr, "fsa-bench --decode: cannot write %s\n", o.stamps), 1;
    }
    run_grid(&o, ctx, &env);
    if (env.stamps_file) fclose(env.stamps_file);
    if (env.stamps) cu.MemFree(env.stamps);
    if (o.dense) run_dense(&o, ctx, &env);
    if (o.prefill) run_prefill(&o, ctx, &env);
    cu.MemFree(env.flush);
    cu.EventDestroy(env.e0);
    cu.EventDestroy(env.e1);
    cu.StreamDestroy(env.stream);
    fsa_context_destroy(ctx);
    return 0;
}
