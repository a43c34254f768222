/* fsa-bench --decode: the timing (bench_decode_timing.h). */
#define _GNU_SOURCE
#include "bench_decode_timing.h"

#include "bench_inputs.h"

#include <stdlib.h>
#include <time.h>

#define CU(call) BENCH_CU("--decode", call)

#define FSA(call) BENCH_FSA("--decode", call)

/* Median microseconds of one call, the L2 flushed before each; graph = 1:
 * the call captured once and replayed. */
double dec_time_call(const dec_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, int reps,
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
    double *t = bench_alloc("--decode", (size_t)reps * sizeof(double));
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
    const double med = bench_median(t, reps);
    free(t);
    if (exec) CU(cu.GraphExecDestroy(exec));
    return med;
}

/* --stamps: one call (L2 flushed) of the stamped kernel; its buffer is written
 * as one line "call L B G q_len mode WORDS w0 w1 ..." up to the last nonzero
 * word (bench/kvc_stamps.py splits it into records by the kernel's layout). */
void dec_write_stamps(const dec_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a,
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
double dec_host_time(const dec_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a)
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
