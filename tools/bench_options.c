/* fsa-bench's selected-attention options (bench_options.h). */
#include "bench_options.h"

#include "bench_limits.h"
#include "tool_args.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void print_usage(FILE *f)
{
    fprintf(f,
            "Usage: fsa-bench [-T LIST] [-G LIST] [OPTIONS]     time every T x G combination\n"
            "       fsa-bench --standard [OPTIONS]             the benchmark protocol's problem table (its own\n"
            "                                                  T, G and D; --q-heads a multiple of 16)\n"
            "       fsa-bench --jit [--dry-run]                compile, cache-hit and launch overheads (a\n"
            "                                                  fixed problem and a fresh cache: no other option;\n"
            "                                                  an interrupt leaves /tmp/fsa-bench-jit.*)\n"
            "       fsa-bench --decode [DECODE OPTIONS]        paged KV-cache decode (fsa-bench --decode --help)\n"
            "       fsa-bench --compressed [OPTIONS]           compressed attention with the top-k selection\n"
            "                                                  (fsa-bench --compressed --help)\n"
            "       fsa-bench --window [OPTIONS]               sliding-window attention (fsa-bench --window --help)\n"
            "\n"
            "Problem:\n"
            "  -T LIST               token counts, comma-separated (default 8192; at most %d distinct values)\n"
            "  -G LIST               query heads per KV head, each dividing --q-heads (default 1,2,4,8,16;\n"
            "                        at most %d distinct values)\n"
            "  -D N                  head dim, " BENCH_HEAD_DIMS " (default 128)\n"
            "  --value-dim N         head dim of v and o when it differs from -D (NSA: -D 192 --value-dim 128)\n"
            "  --q-heads N           query heads (default 32)\n"
            "  --block-size N        keys per selectable block: " BENCH_BLOCK_SIZES " (default 64)\n"
            "  --top-k N             selected blocks per token, 1 to 64 (default 16)\n"
            "  --dtype T             " TOOL_DTYPE_SPELLINGS " (default bf16)\n"
            "  --workspace-limit B   cap on each call's workspace, forward and backward; suffixes K, M,\n"
            "                        G, T; 0 = the library's default cap (the default), 'unlimited' = none\n"
            "Runs:\n"
            "  --only fsa|nsa        time one path only (default both, and AUTO); the AUTO forward runs\n"
            "                        only when it takes that path, the AUTO backward and forward +\n"
            "                        backward (--backward) always\n"
            "  --backward            also the backward of each dq order and AUTO forward + backward\n"
            "  --min-ms MS           repeats cover at least this much (default 100)\n"
            "  --warmup-ms MS        warm-up before timing (default 25)\n"
            "  --cache-dir DIR       kernel cache (default $FSA_CACHE_DIR, ...)\n"
            "  --json FILE           also write the rows as JSON (null where a value does not exist)\n"
            "  --tune                measure each row's token bucket first (tuning on; records go to the\n"
            "                        cache) so that AUTO takes the measured choice; JSON gives both\n"
            "  --tolerance E         the checks of every row: the two paths' outputs (and dq) within E of\n"
            "                        each other, sampled forward rows within E of float64 (default %.0e);\n"
            "                        a row over it fails the run\n"
            "  --dry-run             print what would run and exit, without a GPU\n"
            "  -h, --help            this text\n"
            "  --version             the library version\n"
            "\n"
            "Exit status: 0 success; 1 a benchmark failed; 2 usage error; 3 no CUDA driver, no\n"
            "usable GPU, or a library setting in the environment (e.g. FSA_TUNE) the context refuses.\n",
            MAX_LIST, MAX_LIST, BENCH_DEFAULT_TOL);
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("fsa-bench: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    print_usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* Comma-separated positive numbers, at most MAX_LIST of them. */
static int parse_list(const char *text, int *out, int *n_out, const char *option)
{
    const int rc = tool_parse_list(out, n_out, MAX_LIST, text, 1, 1L << 30);
    if (rc == -2) {
        char what[64];
        snprintf(what, sizeof what, "%s: more than %d values", option, MAX_LIST);
        return usage_error("%s", what);
    }
    if (rc == 0) return 0;
    char what[160];
    snprintf(what, sizeof what, "%s: '%.64s' is not a list of numbers from 1 to 2^30", option, text);
    return usage_error("%s", what);
}

static int parse_int(int *out, const char *text, long min, long max, const char *option)
{
    long v;
    if (tool_parse_long(&v, text, min, max) != 0) {
        char what[160];
        snprintf(what, sizeof what, "%s: '%.64s' is not a number from %ld to %ld", option, text, min, max);
        return usage_error("%s", what);
    }
    *out = (int)v;
    return 0;
}

/* A number the library would refuse in every plan: named with what it takes. */
static int not_taken(const char *option, int value, const char *takes)
{
    char what[128];
    snprintf(what, sizeof what, "%s %d: the library takes %s", option, value, takes);
    return usage_error("%s", what);
}

bench_mode_word bench_mode_of(const char *word)
{
    if (strcmp(word, "--decode") == 0) return BENCH_MODE_DECODE;
    if (strcmp(word, "--compressed") == 0 || strcmp(word, "--window") == 0) return BENCH_MODE_BRANCHES;
    return BENCH_MODE_NONE;
}

enum {
    OPT_STANDARD = 256,
    OPT_JIT,
    OPT_JIT_CHILD,
    OPT_BACKWARD,
    OPT_Q_HEADS,
    OPT_BLOCK_SIZE,
    OPT_TOP_K,
    OPT_VALUE_DIM,
    OPT_DTYPE,
    OPT_MIN_MS,
    OPT_WARMUP_MS,
    OPT_WORKSPACE_LIMIT,
    OPT_CACHE_DIR,
    OPT_JSON,
    OPT_ONLY,
    OPT_DRY_RUN,
    OPT_VERSION,
    OPT_TUNE,
    OPT_TOLERANCE,
    OPT_HELP /* not 'h': a long option's value is never a letter (tool_bad_option) */
};

static const struct option k_long_options[] = {
    {"standard", no_argument, NULL, OPT_STANDARD},
    {"jit", no_argument, NULL, OPT_JIT},
    {"jit-child", required_argument, NULL, OPT_JIT_CHILD}, /* internal: the second process of --jit */
    {"backward", no_argument, NULL, OPT_BACKWARD},
    {"q-heads", required_argument, NULL, OPT_Q_HEADS},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"value-dim", required_argument, NULL, OPT_VALUE_DIM},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"min-ms", required_argument, NULL, OPT_MIN_MS},
    {"warmup-ms", required_argument, NULL, OPT_WARMUP_MS},
    {"workspace-limit", required_argument, NULL, OPT_WORKSPACE_LIMIT},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"json", required_argument, NULL, OPT_JSON},
    {"only", required_argument, NULL, OPT_ONLY},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {"tune", no_argument, NULL, OPT_TUNE},
    {"tolerance", required_argument, NULL, OPT_TOLERANCE},
    {NULL, 0, NULL, 0},
};

static int set_mode(options *o, bench_mode mode, int *mode_given)
{
    if (*mode_given && o->mode != mode) return usage_error("%s", "--standard and --jit exclude each other");
    o->mode = mode;
    *mode_given = 1;
    return 0;
}

int bench_options_parse(options *o, const char **jit_child, int argc, char **argv)
{
    int mode_given = 0, grid_given = 0, d_given = 0, options_given = 0;
    char problem_option[32] = ""; /* the last problem or run option: --jit takes none */
    char bad[3];
    opterr = 0; /* our own messages and exit status */
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, ":hT:G:D:", k_long_options, &li), rc = 0;
        if (c == -1) break;
        options_given++;
        if (c != 'h' && c != OPT_HELP && c != OPT_VERSION && c != ':' && c != '?' && c != OPT_STANDARD &&
            c != OPT_JIT && c != OPT_JIT_CHILD && c != OPT_DRY_RUN) {
            if (li >= 0) snprintf(problem_option, sizeof problem_option, "--%s", k_long_options[li].name);
            else snprintf(problem_option, sizeof problem_option, "-%c", c);
        }
        switch (c) {
        case 'h':
        case OPT_HELP: print_usage(stdout); return TOOL_EXIT_OK;
        case OPT_VERSION: return tool_print_version("fsa-bench");
        case ':': return usage_error("option '%s' needs a value", tool_bad_option(bad, optopt, argv, optind));
        case '?': {
            const char *word = tool_bad_option(bad, optopt, argv, optind);
            if (bench_mode_of(word) != BENCH_MODE_NONE)
                return usage_error("%s: the mode word must come first (fsa-bench MODE [OPTIONS])", word);
            char message[64];
            snprintf(message, sizeof message, "%s '%%s'", tool_refused_option_reason(k_long_options, word));
            return usage_error(message, word);
        }
        case 'T': rc = parse_list(optarg, o->tokens, &o->n_tokens, "-T"), grid_given = 1; break;
        case 'G': rc = parse_list(optarg, o->groups, &o->n_groups, "-G"), grid_given = 1; break;
        case 'D': rc = parse_int(&o->head_dim, optarg, 1, 1 << 16, "-D"), d_given = 1; break;
        case OPT_Q_HEADS: rc = parse_int(&o->q_heads, optarg, 1, 1 << 16, "--q-heads"); break;
        case OPT_BLOCK_SIZE: rc = parse_int(&o->block_size, optarg, 1, 1 << 16, "--block-size"); break;
        case OPT_TOP_K: rc = parse_int(&o->top_k, optarg, 1, 1 << 16, "--top-k"); break;
        case OPT_VALUE_DIM: rc = parse_int(&o->value_dim, optarg, 1, 1 << 16, "--value-dim"); break;
        case OPT_DTYPE:
            if (tool_parse_dtype(&o->dtype, optarg) != 0)
                return usage_error("--dtype: '%s' is not one of " TOOL_DTYPE_SPELLINGS, optarg);
            break;
        case OPT_MIN_MS:
            if (tool_parse_double(&o->min_ms, optarg, 0.0, 1e7) != 0)
                return usage_error("--min-ms: '%s' is not a number of milliseconds from 0 to 1e7", optarg);
            break;
        case OPT_WARMUP_MS:
            if (tool_parse_double(&o->warmup_ms, optarg, 0.0, 1e7) != 0)
                return usage_error("--warmup-ms: '%s' is not a number of milliseconds from 0 to 1e7", optarg);
            break;
        case OPT_TOLERANCE:
            if (tool_parse_double(&o->tolerance, optarg, 0.0, 1e3) != 0)
                return usage_error("--tolerance: '%s' is not a relative error from 0 to 1e3", optarg);
            break;
        case OPT_WORKSPACE_LIMIT:
            if (strcmp(optarg, "unlimited") == 0) o->workspace_limit = FSA_WORKSPACE_UNLIMITED;
            else if (tool_parse_bytes(&o->workspace_limit, optarg) != 0)
                return usage_error("--workspace-limit: '%s' is not a byte count (e.g. 512M, 2G) or 'unlimited'",
                                   optarg);
            break;
        case OPT_CACHE_DIR: o->cache_dir = optarg; break;
        case OPT_JSON:
            if (*optarg == '\0') return usage_error("%s", "--json: empty file name");
            o->json = optarg;
            break;
        case OPT_ONLY:
            if (strcmp(optarg, "fsa") == 0) o->only = FSA_ALGORITHM_FSA;
            else if (strcmp(optarg, "nsa") == 0) o->only = FSA_ALGORITHM_NSA;
            else return usage_error("--only: '%s' is not fsa or nsa", optarg);
            break;
        case OPT_BACKWARD: o->backward = 1; break;
        case OPT_DRY_RUN: o->dry_run = 1; break;
        case OPT_TUNE: o->tune = 1; break;
        case OPT_STANDARD: rc = set_mode(o, MODE_STANDARD, &mode_given); break;
        case OPT_JIT: rc = set_mode(o, MODE_JIT, &mode_given); break;
        case OPT_JIT_CHILD: *jit_child = optarg; break;
        default: return usage_error("%s", "internal option error");
        }
        if (rc != 0) return rc;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    /* The --jit run's second process (bench_jit.c) is started as "fsa-bench --jit-child DIR", nothing else. */
    if (*jit_child && options_given != 1)
        return usage_error("%s", "--jit-child is --jit's own process: no other option");
    if (grid_given && o->mode != MODE_GRID) return usage_error("%s", "-T and -G do not apply to --standard or --jit");
    /* --standard's table has its own D values and groups up to 16 (bench_selected_row: Hkv = Hq / G). */
    if (d_given && o->mode == MODE_STANDARD)
        return usage_error("%s", "-D does not apply to --standard (it has its own D values)");
    if (o->mode == MODE_STANDARD && o->q_heads % 16 != 0)
        return usage_error("%s", "--standard needs --q-heads a multiple of 16 (its groups are 1, 2, 4, 8 and 16)");
    /* A group that does not divide the heads would leave its rows out silently. */
    for (int i = 0; o->mode == MODE_GRID && i < o->n_groups; i++)
        if (o->q_heads % o->groups[i] != 0) return usage_error("%s", "-G: every group must divide --q-heads");
    /* --jit times a fixed problem in a temporary cache (bench_jit.c): anything else would be ignored. */
    if (o->mode == MODE_JIT && problem_option[0] != '\0')
        return usage_error("option not taken by --jit: %s", problem_option);
    /* Shapes every plan would refuse (fsa/selected.h), before a device is opened. */
    if (!bench_head_dim_ok(o->head_dim)) return not_taken("-D", o->head_dim, BENCH_HEAD_DIMS);
    if (o->value_dim && !bench_head_dim_ok(o->value_dim))
        return not_taken("--value-dim", o->value_dim, BENCH_HEAD_DIMS);
    if (!bench_block_size_ok(o->block_size)) return not_taken("--block-size", o->block_size, BENCH_BLOCK_SIZES);
    if (o->top_k > BENCH_MAX_TOP_K) return not_taken("--top-k", o->top_k, "1 to 64");
    /* Every Dk a row runs (--standard's own, else -D) with the value head dim (Dk when not given). */
    const int standard_dims[] = BENCH_STANDARD_DIMS;
    const int *dims = o->mode == MODE_STANDARD ? standard_dims : &o->head_dim;
    for (int i = 0; o->backward && i < (o->mode == MODE_STANDARD ? BENCH_STANDARD_N_DIMS : 1); i++) {
        const int dv = o->value_dim ? o->value_dim : dims[i];
        if (!bench_backward_dims_ok(dims[i], dv)) {
            char what[128];
            snprintf(what, sizeof what, "--backward at Dk %d and Dv %d: over 320 together, both must be multiples of 32",
                     dims[i], dv);
            return usage_error("%s", what);
        }
    }
    return -1;
}
