/* fsa-precompile's options (precompile_options.h). */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include "precompile_options.h"

#include "precompile_grid.h"
#include "tool_args.h"

#include <getopt.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

static const char *const k_kind_names[KIND_COUNT] = {"selected", "compressed", "window", "gate", "kvcache"};

/* Replaces what an earlier --kind gave, as the list options do. */
static int parse_kinds(int *kinds, const char *text)
{
    const char *p = text;
    for (int k = 0; k < KIND_COUNT; k++) kinds[k] = 0;
    for (;;) {
        const size_t len = strcspn(p, ",");
        int found = 0;
        for (int k = 0; k < KIND_COUNT; k++)
            if (len == strlen(k_kind_names[k]) && strncmp(p, k_kind_names[k], len) == 0) kinds[k] = found = 1;
        if (!found) {
            usage_error("--kind: '%.*s' is not selected, compressed, window, gate or kvcache", (int)len, p);
            return -1;
        }
        if (p[len] == '\0') return 0;
        p += len + 1;
    }
}

static int parse_algorithm(fsa_algorithm *out, const char *text)
{
    if (strcmp(text, "auto") == 0) *out = FSA_ALGORITHM_AUTO;
    else if (strcmp(text, "fsa") == 0) *out = FSA_ALGORITHM_FSA;
    else if (strcmp(text, "nsa") == 0) *out = FSA_ALGORITHM_NSA;
    else {
        usage_error("--algorithm: '%s' is not auto, fsa or nsa", text);
        return -1;
    }
    return 0;
}

/* --page-size: only the sizes --help lists (those the library takes), so
 * that a typo is a usage error rather than a skipped shape. */
static int parse_page_sizes(int_list *out, const char *text)
{
    if (parse_int_list(out, text, "--page-size") != 0) return -1;
    for (size_t i = 0; i < out->n; i++) {
        const int p = out->v[i];
        if (p != 1 && p != 16 && p != 32 && p != 64 && p != 128 && p != 256) {
            usage_error("--page-size: %d is not 1, 16, 32, 64, 128 or 256", p);
            return -1;
        }
    }
    return 0;
}

/* --------------------------------------------------------------- options */

void options_free(tool_options *o)
{
    str_list_free(&o->arches);
    int_list_free(&o->dtypes);
    int_list_free(&o->head_dims);
    int_list_free(&o->groups);
    int_list_free(&o->block_sizes);
    int_list_free(&o->page_sizes);
    int_list_free(&o->kv_heads);
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > MAX_JOBS ? MAX_JOBS : (int)n;
}

void options_print_usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " (--arch LIST | --detect [--device N]) [GRID] [-j N] [--cache-dir DIR]\n"
            "       " PROG " (--list | --verify | --prune --max-bytes N) [--cache-dir DIR]\n"
            "                      [--arch T | --detect [--device N]]\n"
            "\n"
            "Fills the fsa-jit kernel cache ahead of time: for every combination of the grid it\n"
            "creates a plan (num_kv_heads 1, num_q_heads = group), which compiles or finds every\n"
            "kernel that shape needs. Shapes the library does not support are skipped (exit\n"
            "status 1 when every shape is).\n"
            "\n"
            "Targets (one of them is required to compile):\n"
            "  --arch LIST         offline targets, e.g. sm_80,sm_90a (no GPU needed); one target\n"
            "                      with --list, --verify and --prune\n"
            "  --detect            the target of the GPU chosen by --device\n"
            "  --device N          CUDA device ordinal for --detect (default 0)\n"
            "Grid (LIST: 64,128 or 1-8 or 16-256:16, or several joined by commas; at most %d values,\n"
            "each at most %ld):\n"
            "  --dtype LIST        " TOOL_DTYPE_SPELLINGS " (default bf16)\n"
            "  --head-dim LIST     default 128\n"
            "  --group LIST        query heads per KV head (default 1,2,4,8,16)\n"
            "  --block-size LIST   keys per selectable block (default 64)\n"
            "  --top-k N           selected blocks per query token (default 16)\n"
            "  --value-dim N       head dim of v and o when it differs from --head-dim (NSA: 192 / 128);\n"
            "                      default: the same\n"
            "  --algorithm A       auto, fsa or nsa (default auto: the kernels of every path)\n"
            "  --backward          also the backward kernels (training)\n"
            "  --kind LIST         plans to make: selected (attention), compressed (attention with the\n"
            "                      top-k selection, of --top-k blocks of each --block-size), window\n"
            "                      (sliding-window attention), gate (NSA's gated sum of the three, of\n"
            "                      --value-dim, else --head-dim), kvcache (selected attention of new\n"
            "                      tokens over a paged KV cache: decode, speculative tokens, chunked\n"
            "                      prefill; of --top-k blocks, for each --page-size); default selected\n"
            "  --page-size LIST    kvcache: tokens per cache page, 1, 16, 32, 64, 128 or 256 (default 64)\n"
            "  --kernel-size N     compressed: positions per compressed token (default 32)\n"
            "  --stride N          compressed: positions between compressed tokens (default 16)\n"
            "  --window N          window: the window (default 512)\n"
            "  --tune              with --detect: also measure each selected plan's variants at T = 1,\n"
            "                      4, ..., 65536 and write tuning records into the cache\n"
            "  --kv-heads LIST     with --tune: the KV head counts to measure at, num_q_heads =\n"
            "                      group x each (default 1); a record holds for its count only\n"
            "  -j, --jobs N        compile threads (default: online CPUs, %d here)\n"
            "Cache:\n"
            "  --cache-dir DIR     default (also for an empty DIR) $FSA_CACHE_DIR, else\n"
            "                      $XDG_CACHE_HOME/fsa (an absolute path), else ~/.cache/fsa\n"
            "  --list              print every entry (target, name, bytes, mtime) and the total\n"
            "  --verify            re-check every entry and delete bad ones (with --detect, also\n"
            "                      load the device target's entries on the GPU)\n"
            "  --prune             delete least recently used entries until the cache holds at\n"
            "                      most --max-bytes N (suffixes K, M, G, T: powers of 1024)\n"
            "  -h, --help          this text\n"
            "  --version           the library version\n"
            "\n"
            "Each shape prints [n/N] and, once the pace is known, the time left.\n"
            "Exit status: 0 success; 1 a compile failed, every shape was skipped, --verify found bad\n"
            "entries or the cache could not be used; 2 usage error (also a grid of more than %d\n"
            "combinations); 3 the target or device cannot be used (an --arch the library does not\n"
            "know, no driver or no GPU for --detect).\n",
            MAX_LIST_VALUES, MAX_LIST_VALUE, online_cpus(), MAX_COMBINATIONS);
}

enum {
    OPT_ARCH = 256,
    OPT_DETECT,
    OPT_DEVICE,
    OPT_DTYPE,
    OPT_HEAD_DIM,
    OPT_GROUP,
    OPT_BLOCK_SIZE,
    OPT_TOP_K,
    OPT_VALUE_DIM,
    OPT_ALGORITHM,
    OPT_BACKWARD,
    OPT_TUNE,
    OPT_CACHE_DIR,
    OPT_LIST,
    OPT_VERIFY,
    OPT_PRUNE,
    OPT_MAX_BYTES,
    OPT_VERSION,
    OPT_KIND,
    OPT_KERNEL_SIZE,
    OPT_STRIDE,
    OPT_WINDOW,
    OPT_PAGE_SIZE,
    OPT_KV_HEADS,
    /* Not 'h' and 'j': a long option's value is never a letter, so that
     * optopt tells a short option from a long one (tool_bad_option). */
    OPT_HELP,
    OPT_JOBS
};

static const struct option long_options[] = {
    {"arch", required_argument, NULL, OPT_ARCH},
    {"detect", no_argument, NULL, OPT_DETECT},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
    {"group", required_argument, NULL, OPT_GROUP},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"value-dim", required_argument, NULL, OPT_VALUE_DIM},
    {"algorithm", required_argument, NULL, OPT_ALGORITHM},
    {"backward", no_argument, NULL, OPT_BACKWARD},
    {"tune", no_argument, NULL, OPT_TUNE},
    {"jobs", required_argument, NULL, OPT_JOBS},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"list", no_argument, NULL, OPT_LIST},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"prune", no_argument, NULL, OPT_PRUNE},
    {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {"kind", required_argument, NULL, OPT_KIND},
    {"kernel-size", required_argument, NULL, OPT_KERNEL_SIZE},
    {"stride", required_argument, NULL, OPT_STRIDE},
    {"window", required_argument, NULL, OPT_WINDOW},
    {"page-size", required_argument, NULL, OPT_PAGE_SIZE},
    {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
    {NULL, 0, NULL, 0},
};

static int set_mode(tool_options *o, tool_mode mode)
{
    if (o->mode != MODE_COMPILE && o->mode != mode) {
        usage_error("--list, --verify and --prune exclude each other");
        return -1;
    }
    o->mode = mode;
    return 0;
}

/* Applies one option; -1 on a usage error (already reported). */
static int apply_option(tool_options *o, int c, const char *arg)
{
    long n;
    switch (c) {
    case 'h':
    case OPT_HELP: o->help = 1; return 0;
    case OPT_VERSION: o->version = 1; return 0;
    case OPT_ARCH: return parse_str_list(&o->arches, arg, "--arch");
    case OPT_DETECT: o->detect = 1; return 0;
    case OPT_DEVICE:
        if (parse_one(&n, arg, 0, 1023, "--device") != 0) return -1;
        o->device = (int)n;
        o->device_given = 1;
        return 0;
    case OPT_DTYPE: o->grid_given = 1; return parse_dtypes(&o->dtypes, arg);
    case OPT_HEAD_DIM: o->grid_given = 1; return parse_int_list(&o->head_dims, arg, "--head-dim");
    case OPT_GROUP: o->grid_given = 1; return parse_int_list(&o->groups, arg, "--group");
    case OPT_BLOCK_SIZE: o->grid_given = 1; return parse_int_list(&o->block_sizes, arg, "--block-size");
    case OPT_PAGE_SIZE: o->grid_given = 1; return parse_page_sizes(&o->page_sizes, arg);
    case OPT_KV_HEADS: o->grid_given = 1; return parse_int_list(&o->kv_heads, arg, "--kv-heads");
    case OPT_TOP_K:
        o->grid_given = 1;
        if (parse_one(&n, arg, 1, MAX_LIST_VALUE, "--top-k") != 0) return -1;
        o->top_k = (int)n;
        return 0;
    case OPT_VALUE_DIM:
        o->grid_given = 1;
        if (parse_one(&n, arg, 1, MAX_LIST_VALUE, "--value-dim") != 0) return -1;
        o->value_dim = (int)n;
        return 0;
    case OPT_ALGORITHM: o->grid_given = 1; return parse_algorithm(&o->algorithm, arg);
    case OPT_KIND: o->grid_given = 1; return parse_kinds(o->kinds, arg);
    case OPT_KERNEL_SIZE:
    case OPT_STRIDE:
    case OPT_WINDOW: {
        static const char *const names[] = {"--kernel-size", "--stride", "--window"};
        int *const fields[] = {&o->kernel_size, &o->stride, &o->window};
        int *const given[] = {&o->kernel_size_given, &o->stride_given, &o->window_given};
        o->grid_given = 1;
        if (parse_one(&n, arg, 1, MAX_LIST_VALUE, names[c - OPT_KERNEL_SIZE]) != 0) return -1;
        *fields[c - OPT_KERNEL_SIZE] = (int)n;
        *given[c - OPT_KERNEL_SIZE] = 1;
        return 0;
    }
    case OPT_BACKWARD:
        o->grid_given = 1;
        o->backward = 1;
        return 0;
    case OPT_TUNE:
        o->grid_given = 1;
        o->tune = 1;
        return 0;
    case 'j':
    case OPT_JOBS:
        o->grid_given = 1;
        if (parse_one(&n, arg, 1, MAX_JOBS, "-j") != 0) return -1;
        o->jobs = (int)n;
        return 0;
    case OPT_CACHE_DIR:
        o->cache_dir = *arg ? arg : NULL; /* empty: as if not given, like FSA_CACHE_DIR="" */
        return 0;
    case OPT_LIST: return set_mode(o, MODE_LIST);
    case OPT_VERIFY: return set_mode(o, MODE_VERIFY);
    case OPT_PRUNE: return set_mode(o, MODE_PRUNE);
    case OPT_MAX_BYTES:
        o->max_bytes_given = 1;
        return parse_bytes(&o->max_bytes, arg);
    default: return -1;
    }
}

/* Combinations of options that make no sense together. */
static int check_options(const tool_options *o)
{
    /* Options of a kind of plan not asked for would be dropped unused. */
    if ((o->kernel_size_given || o->stride_given) && !o->kinds[KIND_COMPRESSED]) {
        usage_error("--kernel-size and --stride apply only to --kind compressed");
        return -1;
    }
    if (o->window_given && !o->kinds[KIND_WINDOW]) {
        usage_error("--window applies only to --kind window");
        return -1;
    }
    if (o->kv_heads.n > 0 && !o->tune) {
        usage_error("--kv-heads applies only to --tune (the kernels do not depend on it)");
        return -1;
    }
    if (o->arches.n > 0 && o->detect) {
        usage_error("--arch and --detect exclude each other");
        return -1;
    }
    if (o->device_given && !o->detect) {
        usage_error("--device needs --detect");
        return -1;
    }
    if (o->tune && !o->detect) {
        usage_error("--tune needs --detect (it measures on that GPU)");
        return -1;
    }
    if (o->mode == MODE_PRUNE && !o->max_bytes_given) {
        usage_error("--prune needs --max-bytes N");
        return -1;
    }
    if (o->max_bytes_given && o->mode != MODE_PRUNE) {
        usage_error("--max-bytes applies only to --prune");
        return -1;
    }
    if (o->mode != MODE_COMPILE && o->arches.n > 1) {
        usage_error("--list, --verify and --prune take one --arch target (they work on the whole cache)");
        return -1;
    }
    if (o->mode != MODE_COMPILE && o->grid_given) {
        usage_error("grid options and -j apply only when compiling, not with --list, --verify or --prune");
        return -1;
    }
    if (o->page_sizes.n > 0 && !o->kinds[KIND_KVCACHE]) {
        usage_error("--page-size applies only to --kind kvcache");
        return -1;
    }
    if (o->mode == MODE_COMPILE && o->arches.n == 0 && !o->detect) {
        usage_error("say what to compile for: --arch LIST (e.g. sm_80,sm_90a) or --detect");
        return -1;
    }
    return 0;
}

/* Defaults for the grid lists that were not given. */
static int fill_defaults(tool_options *o)
{
    static const int default_groups[] = {1, 2, 4, 8, 16};
    int rc = 0;
    if (o->dtypes.n == 0) rc |= int_list_add(&o->dtypes, FSA_DTYPE_BF16);
    if (o->head_dims.n == 0) rc |= int_list_add(&o->head_dims, 128);
    if (o->block_sizes.n == 0) rc |= int_list_add(&o->block_sizes, 64);
    if (o->page_sizes.n == 0) rc |= int_list_add(&o->page_sizes, 64);
    if (o->kv_heads.n == 0) rc |= int_list_add(&o->kv_heads, 1);
    int any_kind = 0;
    for (int k = 0; k < KIND_COUNT; k++) any_kind |= o->kinds[k];
    if (!any_kind) o->kinds[KIND_SELECTED] = 1;
    if (o->groups.n == 0)
        for (size_t i = 0; i < sizeof default_groups / sizeof *default_groups; i++)
            rc |= int_list_add(&o->groups, default_groups[i]);
    if (rc != 0) usage_error("out of memory");
    return rc;
}

int options_parse(tool_options *o, int argc, char **argv)
{
    *o = (tool_options){0};
    o->top_k = 16;
    o->kernel_size = 32;
    o->stride = 16;
    o->window = 512;
    o->algorithm = FSA_ALGORITHM_AUTO;
    o->jobs = online_cpus();
    opterr = 0; /* our own messages, and exit status 2 */
    for (;;) {
        int c = getopt_long(argc, argv, ":j:h", long_options, NULL);
        if (c == -1) break;
        if (c == '?' || c == ':') {
            char short_opt[3];
            const char *what = tool_bad_option(short_opt, optopt, argv, optind);
            if (c == ':') usage_error("option '%s' needs a value", what);
            else usage_error("%s '%s'", tool_refused_option_reason(long_options, what), what);
            return TOOL_EXIT_USAGE;
        }
        if (apply_option(o, c, optarg) != 0) return TOOL_EXIT_USAGE;
    }
    if (o->help || o->version) return 0;
    if (optind < argc) {
        usage_error("unexpected argument '%s'", argv[optind]);
        return TOOL_EXIT_USAGE;
    }
    if (check_options(o) != 0 || fill_defaults(o) != 0) return TOOL_EXIT_USAGE;
    for (size_t g = 0; g < o->groups.n; g++)
        for (size_t h = 0; h < o->kv_heads.n; h++)
            if ((long long)o->groups.v[g] * o->kv_heads.v[h] > INT_MAX) {
                usage_error("--group %d x --kv-heads %d query heads pass INT_MAX", o->groups.v[g], o->kv_heads.v[h]);
                return TOOL_EXIT_USAGE;
            }
    /* The grid's size is a usage error: say so before opening a context
     * (--detect, one target, would otherwise fail first without a GPU). */
    if (o->mode == MODE_COMPILE && grid_count(o, o->detect ? 1 : o->arches.n) == 0) return TOOL_EXIT_USAGE;
    return 0;
}

