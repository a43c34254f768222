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
 *
 * This file runs the tables; the options are in bench_decode_options.c, the
 * paged problem in bench_decode_problem.c, the timing in bench_decode_timing.c.
 */
#define _GNU_SOURCE
#include "bench_decode.h"

#include "fsa.h"

#include "bench_cuda.h"
#include "bench_decode_options.h"
#include "bench_decode_problem.h"
#include "bench_decode_timing.h"
#include "tool_args.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(call) BENCH_CU("--decode", call)

#define FSA(call) BENCH_FSA("--decode", call)

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

/* Returns 1 when a row's output was not finite (the row printed, the failure on stderr), else 0. */
static int run_grid(const dec_opts *o, fsa_context *ctx, const dec_env *env)
{
    int failed = 0;
    printf("\n## Decode: bf16 Hq %d D %d Dv %d BK 64 K 16 page %d; us = median CUDA-event time (L2 flushed),"
           " TB/s = the selected keys' bytes (B*Hkv*K*BK*(D+Dv)*2 when every block is whole) / time\n",
           HQ, D, o->dv, PAGE);
    printf("|      L |   B |  G | q_len | selection | stream us | graph us | TB/s (graph) | host us | pages GB |\n");
    for (int gi = 0; gi < o->n_gs; gi++) {
        const int g = o->gs[gi], hkv = HQ / g;
        fsa_kvcache_plan *plan = make_plan(ctx, o, g, 64, 16, MAX_B, MAX_B * 4);
        for (int li = 0; li < o->n_ls; li++)
            for (int bi = 0; bi < o->n_bs; bi++)
                for (int mode = 0; mode < 3; mode++) { /* q_len 1; 4 shared; 4 independent */
                    const int q_len = mode == 0 ? 1 : 4;
                    dec_problem p;
                    if (!dec_make(&p, o, o->bs[bi], o->ls[li], hkv, q_len, mode == 1, 16, 64, plan, 1234 + (uint64_t)bi)) {
                        printf("| %6d | %3d | %2d | %5d | %-9s | skipped: memory over %.0f GB |\n", o->ls[li],
                               o->bs[bi], g, q_len, mode == 0 ? "-" : mode == 1 ? "shared" : "indep", o->max_gb);
                        continue;
                    }
                    p.hnd = o->hnd;
                    const fsa_kvcache_args a = dec_args(&p, plan);
                    const double us = dec_time_call(env, plan, &a, o->reps, 0);
                    const double us_g = dec_time_call(env, plan, &a, o->reps, 1);
                    const double host = mode == 0 && !env->stamps ? dec_host_time(env, plan, &a) : 0.0;
                    if (env->stamps) dec_write_stamps(env, plan, &a, &p, g, mode);
                    if (!dec_output_finite(&p)) {
                        fprintf(stderr, "fsa-bench --decode: L %d B %d G %d q_len %d: o or lse not finite\n", p.L,
                                p.B, g, q_len);
                        failed = 1;
                    }
                    /* The keys the selections hold (independent selections: every token's blocks count). */
                    const double bytes = (double)p.keys_read * (D + o->dv) * 2;
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
    return failed;
}

/* Dense decode for scale: a 16K context with every block selected (BK 256, K 64). */
/* Returns 1 when a row's output was not finite (reason on stderr), as run_grid. */
static int run_dense(const dec_opts *o, fsa_context *ctx, const dec_env *env)
{
    int failed = 0;
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
            const double us = dec_time_call(env, plan, &a, o->reps, 1);
            const double bytes = (double)p.B * p.hkv * 16384.0 * (D + o->dv) * 2;
            printf("| %3d | %2d | %8.1f | %4.2f | %27.0f |\n", p.B, gs[gi], us, bytes / us / 1e6, 2 * us);
            if (!dec_output_finite(&p)) {
                fprintf(stderr, "fsa-bench --decode: dense B %d G %d: o or lse not finite\n", p.B, gs[gi]);
                failed = 1;
            }
            dec_free(&p);
        }
        fsa_kvcache_plan_destroy(plan);
    }
    return failed;
}

/* Chunked prefill: 4096 new tokens on a 60K cached prefix, one sequence. */
static int run_prefill(const dec_opts *o, fsa_context *ctx, const dec_env *env)
{
    int failed = 0;
    printf("\n## Chunked prefill: q_len 4096 on a 61440-token prefix (L 65536), B 1, K 16, BK 64\n");
    printf("|  G | us | ns per query token |\n");
    for (int gi = 0; gi < o->n_gs; gi++) {
        const int g = o->gs[gi];
        fsa_kvcache_plan *plan = make_plan(ctx, o, g, 64, 16, 1, 4096);
        dec_problem p;
        if (dec_make(&p, o, 1, 65536, HQ / g, 4096, 0, 16, 64, plan, 5)) {
            const fsa_kvcache_args a = dec_args(&p, plan);
            const double us = dec_time_call(env, plan, &a, o->reps, 0);
            printf("| %2d | %8.1f | %6.1f |\n", g, us, us * 1e3 / 4096);
            if (!dec_output_finite(&p)) {
                fprintf(stderr, "fsa-bench --decode: prefill G %d: o or lse not finite\n", g);
                failed = 1;
            }
            dec_free(&p);
        }
        fsa_kvcache_plan_destroy(plan);
    }
    return failed;
}

int fsa_bench_decode(int argc, char **argv)
{
    dec_opts o = {.ls = {8192, 32768, 131072}, .n_ls = 3, .bs = {1, 16, 64, 128, 256}, .n_bs = 5,
                  .gs = {1, 4, 16}, .n_gs = 3, .reps = 30, .max_gb = 90.0, .prefill = 1, .dense = 1, .dv = D};
    const int rc = bench_decode_options_parse(&o, argc, argv);
    if (rc >= 0) return rc;
    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0) return fprintf(stderr, "fsa-bench --decode: %s\n", why), TOOL_EXIT_TARGET;
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    fsa_context *ctx = NULL;
    const fsa_status st = fsa_context_create(&ctx, &co);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench --decode: %s\n", fsa_last_error());
        return tool_context_exit_code(st);
    }
    char name[256];
    const CUdevice dev = bench_cuda_open_device("--decode", name, sizeof name);
    printf("# fsa-bench --decode %s on %s (%s), splits %d (0 = the plan's rule), %s pages, Dv %d\n",
           fsa_version_string(), name, fsa_context_target(ctx), o.splits, o.hnd ? "HND" : "NHD", o.dv);
    dec_env env;
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
        if (env.stamps_file == NULL) {
            fprintf(stderr, "fsa-bench --decode: cannot write %s\n", o.stamps);
            fsa_context_destroy(ctx);
            return TOOL_EXIT_FAILED;
        }
    }
    int failed = run_grid(&o, ctx, &env);
    if (env.stamps_file && (ferror(env.stamps_file) | fclose(env.stamps_file)) != 0) {
        fprintf(stderr, "fsa-bench --decode: cannot write %s\n", o.stamps);
        failed = 1;
    }
    if (env.stamps) {
        unsetenv("FSA_KVC_STAMPS"); /* the dense and prefill plans below: no stamps into the buffer freed here */
        cu.MemFree(env.stamps);
    }
    if (o.dense) failed |= run_dense(&o, ctx, &env);
    if (o.prefill) failed |= run_prefill(&o, ctx, &env);
    cu.MemFree(env.flush);
    cu.EventDestroy(env.e0);
    cu.EventDestroy(env.e1);
    cu.StreamDestroy(env.stream);
    CU(cu.DevicePrimaryCtxRelease(dev));
    fsa_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAILED : TOOL_EXIT_OK;
}
