/* fsa-bench --compressed and --window: their options (bench_branches_options.h). */
#define _GNU_SOURCE
#include "bench_branches_options.h"

#include "bench_limits.h"
#include "tool_args.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f, br_kind kind)
{
    if (kind == KIND_COMPRESSED)
        fprintf(f,
                "Usage: fsa-bench --compressed [OPTIONS]\n"
                "Times compressed attention with the top-k block selection (forward with selection,\n"
                "forward alone, backward, forward + backward) for every T x G.\n"
                "  -T LIST             token counts (default 8192,65536; at most %d values)\n"
                "  -G LIST             query heads per KV head, 1 to 16 (default 1,2,4,8,16)\n"
                "  --q-heads N         query heads (default 32)\n"
                "  -D N                Dk of queries and keys, " BENCH_HEAD_DIMS " (default 128)\n"
                "  --value-dim N       Dv, the same (default: Dk)\n"
                "  --kernel-size N     l, positions per compressed token, 1 to 4096 (default 32)\n"
                "  --stride N          d, positions between compressed tokens, 1 to l (default 16)\n"
                "  --block-size N      BK of the selection: d times a power of two up to 64 (default 64)\n"
                "  --top-k N           selected blocks per (KV head, token), up to 64; 0 = no selection (default 16)\n"
                "  --init-blocks N     blocks from the start always selected (default 1)\n"
                "  --local-blocks N    blocks ending at the own block always selected (default 2)\n",
                BR_MAX_LIST);
    else
        fprintf(f,
                "Usage: fsa-bench --window [OPTIONS]\n"
                "Times sliding-window attention (forward, backward, forward + backward) for every\n"
                "T x G x W.\n"
                "  -T LIST             token counts (default 8192,65536; at most %d values)\n"
                "  -G LIST             query heads per KV head, 1 to 16 (default 1,2,4,8,16)\n"
                "  -W LIST             windows (default 512)\n"
                "  --q-heads N         query heads (default 32)\n"
                "  -D N                Dk of queries and keys, " BENCH_HEAD_DIMS " (default 128)\n"
                "  --value-dim N       Dv, the same (default: Dk)\n",
                BR_MAX_LIST);
    fprintf(f,
            "  --batch B           sequences T is split into, equally (default 1)\n"
            "  --dtype T           " TOOL_DTYPE_SPELLINGS " (default bf16)\n"
            "  --reps N            timed repeats per value, median reported (default 20)\n"
            "  --no-backward       time the forward only\n"
            "  --json FILE         also write the rows as JSON\n"
            "  --dry-run           print what would run and exit, without a GPU\n"
            "  -h, --help          this text\n"
            "  --version           the library version\n"
            "Exit status: 0 success; 1 a benchmark failed; 2 usage error; 3 no CUDA driver, no\n"
            "usable GPU, or a library setting in the environment (e.g. FSA_TUNE) the context refuses.\n");
}

static int usage_error(const br_opts *o, const char *what, const char *arg)
{
    fprintf(stderr, "fsa-bench %s: %s%s%s\n", bench_branches_mode, what, arg ? ": " : "", arg ? arg : "");
    usage(stderr, o->kind);
    return TOOL_EXIT_USAGE;
}

/* A number the library would refuse in every plan: named with what it takes. */
static int not_taken(const br_opts *o, const char *option, int value, const char *takes)
{
    char what[192];
    snprintf(what, sizeof what, "%s %d: the library takes %s", option, value, takes);
    return usage_error(o, what, NULL);
}

/* Shapes every plan would refuse (fsa/compressed.h, fsa/window.h), before a
 * device is opened; -1 when none. */
static int check_library_limits(const br_opts *o)
{
    if (!bench_head_dim_ok(o->head_dim)) return not_taken(o, "-D", o->head_dim, BENCH_HEAD_DIMS);
    if (o->value_dim && !bench_head_dim_ok(o->value_dim))
        return not_taken(o, "--value-dim", o->value_dim, BENCH_HEAD_DIMS);
    for (int i = 0; i < o->n_groups; i++)
        if (o->groups[i] > BENCH_MAX_BRANCH_GROUP) return not_taken(o, "-G", o->groups[i], "groups 1 to 16");
    if (o->kind != KIND_COMPRESSED) return -1;
    if (o->kernel_size > BENCH_MAX_KERNEL_SIZE) return not_taken(o, "--kernel-size", o->kernel_size, "1 to 4096");
    if (o->stride > o->kernel_size) return not_taken(o, "--stride", o->stride, "1 to --kernel-size");
    if (o->top_k > BENCH_MAX_TOP_K) return not_taken(o, "--top-k", o->top_k, "0 (no selection) to 64");
    if (o->top_k == 0) return -1;
    const int r = o->block_size % o->stride == 0 ? o->block_size / o->stride : 0;
    if (r < 1 || r > BENCH_MAX_SELECTION_STRIDES || (r & (r - 1)) != 0)
        return not_taken(o, "--block-size", o->block_size,
                         "--stride times a power of two up to 64 (with --top-k above 0)");
    if ((o->kernel_size - 1) / o->stride > BENCH_MAX_SELECTION_STRIDES)
        return not_taken(o, "--kernel-size", o->kernel_size,
                         "(kernel size - 1) / stride at most 64 (with --top-k above 0)");
    return -1;
}

enum {
    OPT_Q_HEADS = 256, OPT_VALUE_DIM, OPT_KERNEL_SIZE, OPT_STRIDE, OPT_BLOCK_SIZE, OPT_TOP_K, OPT_INIT_BLOCKS,
    OPT_LOCAL_BLOCKS, OPT_BATCH, OPT_DTYPE, OPT_REPS, OPT_NO_BACKWARD, OPT_JSON, OPT_DRY_RUN,
    OPT_HELP, /* not 'h': a long option's value is never a letter (tool_bad_option) */
    OPT_VERSION
};

/* One numeric option into *dst; -1 when it is out of range. */
static int number(int *dst, const char *text, long min, long max)
{
    long v;
    if (tool_parse_long(&v, text, min, max) != 0) return -1;
    *dst = (int)v;
    return 0;
}

/* Options of the mode in argv[0]; returns -1 to go on, else the exit code. */
int bench_branches_options_parse(br_opts *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"q-heads", required_argument, NULL, OPT_Q_HEADS},
        {"value-dim", required_argument, NULL, OPT_VALUE_DIM},
        {"kernel-size", required_argument, NULL, OPT_KERNEL_SIZE},
        {"stride", required_argument, NULL, OPT_STRIDE},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"init-blocks", required_argument, NULL, OPT_INIT_BLOCKS},
        {"local-blocks", required_argument, NULL, OPT_LOCAL_BLOCKS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"reps", required_argument, NULL, OPT_REPS},
        {"no-backward", no_argument, NULL, OPT_NO_BACKWARD},
        {"json", required_argument, NULL, OPT_JSON},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const int compressed = o->kind == KIND_COMPRESSED;
    optind = 1;
    opterr = 0; /* argv[0] is the mode: the messages below name it */
    for (;;) {
        int li = -1;
        const int c = getopt_long(argc, argv, compressed ? ":hT:G:D:" : ":hT:G:D:W:", longs, &li);
        if (c == -1) break;
        /* The option's name (argv[optind - 1] is its value when it has one). */
        char opt[64], shown[3];
        if (li >= 0) snprintf(opt, sizeof opt, "--%s", longs[li].name);
        else if (c != '?' && c != ':') snprintf(opt, sizeof opt, "-%c", c);
        else snprintf(opt, sizeof opt, "%s", tool_bad_option(shown, optopt, argv, optind));
        int bad = 0, list_rc = 0;
        const char *takes = "";
        /* Options of the other mode are unknown here. */
        if (!compressed && (c == OPT_KERNEL_SIZE || c == OPT_STRIDE || c == OPT_BLOCK_SIZE || c == OPT_TOP_K ||
                            c == OPT_INIT_BLOCKS || c == OPT_LOCAL_BLOCKS))
            return usage_error(o, "option not taken by --window", opt);
        switch (c) {
        case 'h':
        case OPT_HELP: usage(stdout, o->kind); return TOOL_EXIT_OK;
        case OPT_VERSION: return tool_print_version("fsa-bench");
        case ':': return usage_error(o, "option needs a value", opt);
        case '?': return usage_error(o, tool_refused_option_reason(longs, opt), opt);
        case 'T': bad = list_rc = tool_parse_list(o->tokens, &o->n_tokens, BR_MAX_LIST, optarg, 1, 1L << 24), takes = "a list of token counts from 1 to 2^24"; break;
        case 'G': bad = list_rc = tool_parse_list(o->groups, &o->n_groups, BR_MAX_LIST, optarg, 1, 64), takes = "a list of groups from 1 to 16"; break;
        case 'W': bad = list_rc = tool_parse_list(o->windows, &o->n_windows, BR_MAX_LIST, optarg, 1, 1L << 30), takes = "a list of windows from 1 to 2^30"; break;
        case 'D': bad = number(&o->head_dim, optarg, 1, 1024), takes = "a number from 1 to 1024"; break;
        case OPT_Q_HEADS: bad = number(&o->q_heads, optarg, 1, 1024), takes = "a number from 1 to 1024"; break;
        case OPT_VALUE_DIM: bad = number(&o->value_dim, optarg, 1, 1024), takes = "a number from 1 to 1024"; break;
        case OPT_KERNEL_SIZE: bad = number(&o->kernel_size, optarg, 1, 1 << 20), takes = "a number from 1 to 2^20"; break;
        case OPT_STRIDE: bad = number(&o->stride, optarg, 1, 1 << 20), takes = "a number from 1 to 2^20"; break;
        case OPT_BLOCK_SIZE: bad = number(&o->block_size, optarg, 1, 1 << 20), takes = "a number from 1 to 2^20"; break;
        case OPT_TOP_K: bad = number(&o->top_k, optarg, 0, 1024), takes = "a number from 0 to 1024"; break;
        case OPT_INIT_BLOCKS: bad = number(&o->init_blocks, optarg, 0, 1 << 20), takes = "a number from 0 to 2^20"; break;
        case OPT_LOCAL_BLOCKS: bad = number(&o->local_blocks, optarg, 0, 1 << 20), takes = "a number from 0 to 2^20"; break;
        case OPT_BATCH: bad = number(&o->batch, optarg, 1, 1 << 20), takes = "a number from 1 to 2^20"; break;
        case OPT_REPS: bad = number(&o->reps, optarg, 1, 100000), takes = "a number from 1 to 100000"; break;
        case OPT_DTYPE:
            if (tool_parse_dtype(&o->dtype, optarg) != 0)
                return usage_error(o, "--dtype is not one of " TOOL_DTYPE_SPELLINGS, optarg);
            break;
        case OPT_NO_BACKWARD: o->backward = 0; break;
        case OPT_JSON:
            if (*optarg == '\0') return usage_error(o, "--json: empty file name", NULL);
            o->json = optarg;
            break;
        case OPT_DRY_RUN: o->dry_run = 1; break;
        default: return usage_error(o, "internal option error", NULL);
        }
        if (bad) {
            char what[192];
            if (list_rc == -2) snprintf(what, sizeof what, "%s: more than %d values", opt, BR_MAX_LIST);
            else snprintf(what, sizeof what, "%s: '%s' is not %s", opt, optarg, takes);
            return usage_error(o, what, NULL);
        }
    }
    if (optind < argc) return usage_error(o, "unexpected argument", argv[optind]);
    for (int i = 0; i < o->n_groups; i++)
        if (o->q_heads % o->groups[i] != 0) return usage_error(o, "-G: every group must divide --q-heads", NULL);
    for (int i = 0; i < o->n_tokens; i++)
        if (o->tokens[i] < o->batch) return usage_error(o, "--batch: more sequences than tokens", NULL);
    return check_library_limits(o);
}

void bench_branches_print_plan(const br_opts *o)
{
    printf("# fsa-bench %s %s: dtype %s, Hq %d, Dk %d, Dv %d, batch %d", bench_branches_mode, fsa_version_string(),
           tool_dtype_name(o->dtype), o->q_heads, o->head_dim, o->value_dim ? o->value_dim : o->head_dim, o->batch);
    if (o->kind == KIND_COMPRESSED)
        printf(", l %d, d %d, BK %d, K %d, init %d, local %d", o->kernel_size, o->stride, o->block_size, o->top_k,
               o->init_blocks, o->local_blocks);
    printf(", %s", o->backward ? "forward and backward" : "forward only");
    printf("; T");
    for (int i = 0; i < o->n_tokens; i++) printf("%s%d", i ? "," : " ", o->tokens[i]);
    printf("; G");
    for (int i = 0; i < o->n_groups; i++) printf("%s%d", i ? "," : " ", o->groups[i]);
    if (o->kind == KIND_WINDOW) {
        printf("; W");
        for (int i = 0; i < o->n_windows; i++) printf("%s%d", i ? "," : " ", o->windows[i]);
    }
    printf("; median of %d repeats, L2 flushed before each\n", o->reps);
}
