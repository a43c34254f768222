/* fsa-bench --jit (bench_jit.h). */
#define _GNU_SOURCE
#include "bench_jit.h"

#include "bench_cuda.h"
#include "bench_inputs.h"
#include "tool_args.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CU(call) BENCH_CU("", call)

#define FSA(call) BENCH_FSA("", call)

static double plan_create_ms(fsa_context *ctx, int D, int G, int *kernels_out)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.head_dim = D;
    d.num_q_heads = G;
    d.num_kv_heads = 1;
    fsa_cache_stats s0 = FSA_CACHE_STATS_INIT, s1 = FSA_CACHE_STATS_INIT;
    FSA(fsa_context_cache_stats(&s0, ctx));
    fsa_plan *p = NULL;
    double t0 = bench_now_ms();
    FSA(fsa_plan_create(&p, ctx, &d));
    double ms = bench_now_ms() - t0;
    FSA(fsa_context_cache_stats(&s1, ctx));
    if (kernels_out)
        *kernels_out = (int)((s1.compiles - s0.compiles) + (s1.disk_hits - s0.disk_hits) + (s1.memory_hits - s0.memory_hits));
    fsa_plan_destroy(p);
    return ms;
}

int bench_jit_child(const char *cache_dir)
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
    double t0 = bench_now_ms();
    for (int i = 0; i < N; i++) plan_create_ms(ctx, 128, 4, NULL);
    double mem_us = (bench_now_ms() - t0) * 1e3 / N;
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

/* The run's private cache directory. The error macros exit on the first failure, so it is removed by an
 * exit handler, not at the end of the run alone. The child execs at once (or _exit()s), so the handler never
 * runs in it. */
static char jit_dir[] = "/tmp/fsa-bench-jit.XXXXXX";

static void remove_jit_dir(void)
{
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", jit_dir);
    if (system(cmd) != 0) fprintf(stderr, "fsa-bench: could not remove %s\n", jit_dir);
}

int bench_jit_run(const options *o, const char *self)
{
    char *dir = jit_dir;
    if (!mkdtemp(dir)) {
        fprintf(stderr, "fsa-bench: mkdtemp: %s\n", strerror(errno));
        exit(1);
    }
    if (atexit(remove_jit_dir) != 0) {
        fprintf(stderr, "fsa-bench: atexit failed; %s is not removed\n", dir);
    }
    /* A reader that goes away (`| head -1`) would kill the run by SIGPIPE before the exit handler: the
     * writes fail instead, and the run ends as one with a full stdout does, its directory removed. (An
     * interrupt still leaves it: --help says so.) */
    signal(SIGPIPE, SIG_IGN);
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
    /* Its lines are part of the results: a child that failed fails the run. */
    int status = 0, rc = TOOL_EXIT_OK;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fsa-bench: the --jit second process (disk-hit timings) failed\n");
        rc = TOOL_EXIT_FAILED;
    }

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
        double t0 = bench_now_ms();
        for (int i = 0; i < N; i++) CU(cu.LaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        double bare = (bench_now_ms() - t0) * 1e3 / N;
        CU(cu.StreamSynchronize(NULL));
        t0 = bench_now_ms();
        for (int i = 0; i < N; i++) FSA(fsa_fill_u32(ctx, buf, 0, 256, NULL));
        double lib = (bench_now_ms() - t0) * 1e3 / N;
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
        a.q = bench_rows(q, hq, D), a.k = bench_rows(k, hkv, D), a.v = bench_rows(v, hkv, D), a.o = bench_rows(out, hq, D);
        a.topk = bench_topk_rows(topk, T, K);
        a.cu_seqlens = cu_seq, a.workspace = ws, a.workspace_bytes = ws_bytes;
        enum { CALLS = 150, ROUNDS = 20 };
        double best = 1e9;
        for (int round = 0; round < ROUNDS; round++) {
            CU(cu.StreamSynchronize(NULL));
            double t0 = bench_now_ms();
            for (int i = 0; i < CALLS; i++) FSA(fsa_selected_attention_fwd(plan, &a, NULL));
            double us = (bench_now_ms() - t0) * 1e3 / CALLS;
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
    return rc; /* remove_jit_dir runs at exit */
}
