/*
 * fsa-bench: times selected attention through the public API on a GPU.
 *
 * The modes: the -T / -G grid and --standard (bench_selected.c: the protocol
 * of docs/benchmarks.md), --jit (bench_jit.c), and the modes with options of
 * their own, --decode (bench_decode.c), --compressed and --window
 * (bench_branches.c).
 *
 * Uses include/fsa.h and the CUDA driver API only.
 */
#include "fsa.h"

#include "bench_branches.h"
#include "bench_cuda.h"
#include "bench_decode.h"
#include "bench_jit.h"
#include "bench_json.h"
#include "bench_limits.h"
#include "bench_options.h"
#include "bench_selected.h"
#include "tool_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define CU(call) BENCH_CU("", call)

/* ------------------------------------------------------------ modes */

typedef struct device_info {
    CUdevice dev;
    char name[256];
    size_t l2_bytes;
} device_info;

/* Header and column titles of the forward (and backward) table. */
static void print_table_head(const options *o, FILE *json, const device_info *d, fsa_context *ctx)
{
    if (json) {
        fputs("{\"gpu\": ", json);
        bench_json_string(json, d->name);
        fputs(", \"target\": ", json);
        bench_json_string(json, fsa_context_target(ctx));
        fprintf(json, ", \"dtype\": \"%s\", \"rows\": [\n", tool_dtype_name(o->dtype));
    }
    printf("Hq=%d BK=%d K=%d; ms = median CUDA-event time of one forward; TFLOP/s = selected FLOPs / time\n",
           o->q_heads, o->block_size, o->top_k);
    printf("|      T |  G |   D | auto |  auto ms | TFLOP/s |   fsa ms |   nsa ms | workspace B | fsa-vs-nsa |%s\n",
           o->backward ? " bwd  |   bwd ms | TFLOP/s | bwd fsa  | bwd nsa  |   f+b ms | bwd ws B    | dq fsa-nsa | peak ws B   |"
                       : "");
    printf("|--------|----|-----|------|----------|---------|----------|----------|-------------|------------|%s\n",
           o->backward ? "------|----------|---------|----------|----------|----------|-------------|------------|-------------|"
                       : "");
}

/* The problem table of the benchmark protocol: T 8192 and 65536 x G 1..16 at
 * D 128, plus T 16384 G 4 at D 64 and 256. A failed row leaves the others
 * to run and the mode exits 1. */
static int run_standard(fsa_context *ctx, const options *o, const device_info *d, FILE *json)
{
    static const int Ts[] = {8192, 65536}, Gs[] = {1, 2, 4, 8, 16}, Ds[] = BENCH_STANDARD_DIMS;
    bench_row row;
    int first = 1, failed = 0;
    print_table_head(o, json, d, ctx);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t gi = 0; gi < 5; gi++, first = 0) {
            bench_selected_row(ctx, o, Ts[ti], Gs[gi], Ds[0], &row, d->l2_bytes);
            bench_selected_print_row(&row, json, first);
            failed |= row.failed;
        }
    for (size_t di = 1; di < BENCH_STANDARD_N_DIMS; di++) {
        bench_selected_row(ctx, o, 16384, 4, Ds[di], &row, d->l2_bytes);
        bench_selected_print_row(&row, json, 0);
        failed |= row.failed;
    }
    return failed ? TOOL_EXIT_FAILED : TOOL_EXIT_OK;
}

/* Every -T x -G combination (every G divides --q-heads: bench_options_parse). */
static int run_grid(fsa_context *ctx, const options *o, const device_info *d, FILE *json)
{
    bench_row row;
    int first = 1, failed = 0;
    print_table_head(o, json, d, ctx);
    for (int ti = 0; ti < o->n_tokens; ti++)
        for (int gi = 0; gi < o->n_groups; gi++) {
            bench_selected_row(ctx, o, o->tokens[ti], o->groups[gi], o->head_dim, &row, d->l2_bytes);
            bench_selected_print_row(&row, json, first);
            failed |= row.failed;
            first = 0;
        }
    return failed ? TOOL_EXIT_FAILED : TOOL_EXIT_OK;
}

static int run_jit_mode(fsa_context *ctx, const options *o, const device_info *d, FILE *json)
{
    (void)ctx, (void)d, (void)json;
    return bench_jit_run(o, "/proc/self/exe");
}

/* One entry per mode: the option that selects it and what it runs. A new
 * mode adds a value to bench_mode, a line here, and its option below. */
typedef int (*mode_fn)(fsa_context *ctx, const options *o, const device_info *d, FILE *json);
static const struct {
    bench_mode mode;
    const char *option;
    mode_fn run;
    int writes_json;
} k_modes[] = {
    {MODE_GRID, "-T/-G", run_grid, 1},
    {MODE_STANDARD, "--standard", run_standard, 1},
    {MODE_JIT, "--jit", run_jit_mode, 0},
};

static void print_plan(const options *o)
{
    char limit[48];
    if (o->workspace_limit == FSA_WORKSPACE_UNLIMITED) snprintf(limit, sizeof limit, "unlimited");
    else if (o->workspace_limit == 0) snprintf(limit, sizeof limit, "default");
    else snprintf(limit, sizeof limit, "%llu B", (unsigned long long)o->workspace_limit);
    char dv[24] = "", d[40];
    if (o->value_dim) snprintf(dv, sizeof dv, ", Dv %d", o->value_dim);
    if (o->mode == MODE_JIT) { /* bench_jit.c's fixed problem */
        printf("# fsa-bench %s: --jit: compiles D 64, 128, 256 at G 4; times Hq 32, Hkv 8, D 128, T 256, in a "
               "fresh cache\n", fsa_version_string());
        return;
    }
    if (o->mode == MODE_STANDARD) snprintf(d, sizeof d, "128 (and 64, 256 at T 16384)");
    else snprintf(d, sizeof d, "%d", o->head_dim);
    printf("# fsa-bench %s: %s, D %s%s, Hq %d, BK %d, K %d, dtype %s, workspace limit %s%s%s\n",
           fsa_version_string(), k_modes[o->mode].option, d, dv, o->q_heads, o->block_size, o->top_k,
           tool_dtype_name(o->dtype), limit, o->backward ? ", backward" : "",
           o->only ? (o->only == FSA_ALGORITHM_FSA ? ", only fsa" : ", only nsa") : "");
    if (o->mode == MODE_GRID) {
        printf("# T");
        for (int i = 0; i < o->n_tokens; i++) printf("%s%d", i ? "," : " ", o->tokens[i]);
        printf("; G");
        for (int i = 0; i < o->n_groups; i++) printf("%s%d", i ? "," : " ", o->groups[i]);
        printf("\n");
    }
}

/* Loads the driver and makes the library's context (the device's primary
 * context) current; 0 or an exit code. */
static int open_device(fsa_context **ctx, device_info *d, const options *o)
{
    char why[512];
    if (bench_cuda_load(why, sizeof why) != 0) {
        fprintf(stderr, "fsa-bench: %s\n", why);
        return TOOL_EXIT_TARGET;
    }
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.cache_dir = o->cache_dir;
    if (o->tune) co.tune = FSA_TUNE_ON;
    fsa_status st = fsa_context_create(ctx, &co);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fsa-bench: %s\n", fsa_last_error());
        return tool_context_exit_code(st);
    }
    /* A --cache-dir the library cannot use (a file, no permission) would keep every kernel in memory only. */
    const char *mode = getenv("FSA_CACHE_MODE"); /* off: no disk cache asked for, whatever the directory */
    if (o->cache_dir && o->cache_dir[0] && fsa_context_cache_dir(*ctx)[0] == '\0' &&
        !(mode && strcasecmp(mode, "off") == 0)) {
        fprintf(stderr, "fsa-bench: --cache-dir %s: not a usable cache directory\n", o->cache_dir);
        fsa_context_destroy(*ctx);
        *ctx = NULL;
        return TOOL_EXIT_FAILED;
    }
    int l2 = 0;
    d->dev = bench_cuda_open_device("", d->name, sizeof d->name);
    CU(cu.DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d->dev));
    d->l2_bytes = (size_t)l2;
    return 0;
}

static int bench_main(int argc, char **argv)
{
    const bench_mode_word mode = argc >= 2 ? bench_mode_of(argv[1]) : BENCH_MODE_NONE;
    if (mode == BENCH_MODE_DECODE) return fsa_bench_decode(argc - 1, argv + 1);
    if (mode == BENCH_MODE_BRANCHES) return fsa_bench_branches(argc - 1, argv + 1);
    options o = {.mode = MODE_GRID, .tokens = {8192}, .n_tokens = 1, .groups = {1, 2, 4, 8, 16}, .n_groups = 5,
                 .head_dim = 128, .q_heads = 32, .block_size = 64, .top_k = 16, .dtype = FSA_DTYPE_BF16,
                 .min_ms = 100.0, .warmup_ms = 25.0, .tolerance = BENCH_DEFAULT_TOL};
    const char *jit_child = NULL;
    int rc = bench_options_parse(&o, &jit_child, argc, argv);
    if (rc >= 0) return rc;
    char why[512];
    if (jit_child) {
        if (bench_cuda_load(why, sizeof why) != 0) return fprintf(stderr, "fsa-bench: %s\n", why), TOOL_EXIT_TARGET;
        CU(cu.Init(0));
        return bench_jit_child(jit_child);
    }
    print_plan(&o);
    if (o.dry_run) return TOOL_EXIT_OK;

    fsa_context *ctx = NULL;
    device_info dev;
    rc = open_device(&ctx, &dev, &o);
    if (rc != 0) return rc;
    printf("# on %s (%s)\n", dev.name, fsa_context_target(ctx));

    FILE *json = NULL;
    if (o.json && k_modes[o.mode].writes_json) {
        json = bench_json_open(o.json);
        if (!json) {
            fprintf(stderr, "fsa-bench: cannot write %s\n", o.json);
            fsa_context_destroy(ctx);
            return TOOL_EXIT_FAILED;
        }
    }
    rc = k_modes[o.mode].run(ctx, &o, &dev, json);
    if (bench_json_close() != 0) {
        fprintf(stderr, "fsa-bench: cannot write %s\n", o.json);
        rc = TOOL_EXIT_FAILED;
    }
    CU(cu.DevicePrimaryCtxRelease(dev.dev));
    fsa_context_destroy(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    const int closed = tool_open_standard_streams();
    if (closed < 0) return TOOL_EXIT_FAILED;
    int rc = bench_main(argc, argv);
    /* A full disk, a closed pipe or no stdout at all is a failure, not a success. */
    if (fflush(stdout) != 0 || ferror(stdout) || (closed & 2)) {
        fprintf(stderr, "fsa-bench: cannot write the output\n");
        if (rc == 0) rc = TOOL_EXIT_FAILED;
    }
    return rc;
}
