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
 * This file sets up the device and runs the rows; the options are in
 * bench_branches_options.c, the rows' timing in bench_branches_rows.c.
 * Uses include/fsa.h and the CUDA driver API only.
 */
#include "bench_branches.h"

#include "fsa.h"

#include "bench_branches_options.h"
#include "bench_branches_rows.h"
#include "bench_cuda.h"
#include "bench_json.h"
#include "tool_args.h"

#include <stdio.h>
#include <string.h>

#define CU(call) BENCH_CU(bench_branches_mode, call)

const char *bench_branches_mode = "--compressed";

int fsa_bench_branches(int argc, char **argv)
{
    br_opts o = {.kind = strcmp(argv[0], "--window") == 0 ? KIND_WINDOW : KIND_COMPRESSED,
                 .tokens = {8192, 65536}, .n_tokens = 2, .groups = {1, 2, 4, 8, 16}, .n_groups = 5,
                 .windows = {512}, .n_windows = 1, .q_heads = 32, .head_dim = 128, .batch = 1,
                 .kernel_size = 32, .stride = 16, .block_size = 64, .top_k = 16, .init_blocks = 1,
                 .local_blocks = 2, .dtype = FSA_DTYPE_BF16, .reps = 20, .backward = 1};
    bench_branches_mode = argv[0];
    int rc = bench_branches_options_parse(&o, argc, argv);
    if (rc >= 0) return rc;
    bench_branches_print_plan(&o);
    if (o.dry_run) return TOOL_EXIT_OK;

    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0)
        return fprintf(stderr, "fsa-bench %s: %s\n", bench_branches_mode, why), TOOL_EXIT_TARGET;
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    fsa_context *ctx = NULL;
    const fsa_status st = fsa_context_create(&ctx, &co);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench %s: %s\n", bench_branches_mode, fsa_last_error());
        return tool_context_exit_code(st);
    }
    char name[256];
    const CUdevice dev = bench_cuda_open_device(bench_branches_mode, name, sizeof name);
    printf("# on %s (%s)\n", name, fsa_context_target(ctx));
    FILE *json = NULL;
    if (o.json && (json = bench_json_open(o.json)) == NULL) {
        fprintf(stderr, "fsa-bench %s: cannot write %s\n", bench_branches_mode, o.json);
        fsa_context_destroy(ctx);
        return TOOL_EXIT_FAILED;
    }
    if (json) {
        fputs("{\"gpu\": ", json);
        bench_json_string(json, name);
        fprintf(json, ", \"version\": \"%s\", \"rows\": [", fsa_version_string());
    }
    br_env env;
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
    if (bench_json_close() != 0) {
        fprintf(stderr, "fsa-bench %s: cannot write %s\n", bench_branches_mode, o.json);
        failed = 1;
    }
    cu.MemFree(env.flush);
    cu.EventDestroy(env.e0);
    cu.EventDestroy(env.e1);
    CU(cu.DevicePrimaryCtxRelease(dev));
    fsa_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAILED : TOOL_EXIT_OK;
}
