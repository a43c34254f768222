/* fsa-precompile: fills the fsa-jit kernel cache ahead of time for a grid of
 * problem shapes, and lists, verifies or prunes that cache.
 *
 * It uses only the public API (fsa.h): a shape is "precompiled" by creating a
 * plan for it, so the cache ends up holding exactly the kernels a later
 * fsa_plan_create in an application will look up, under the same keys. */
#define _POSIX_C_SOURCE 200809L

#include "tool_args.h"

#include <fsa.h>

#include <ctype.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "fsa-precompile"

enum { EXIT_FAILED = TOOL_EXIT_FAILED, EXIT_USAGE = TOOL_EXIT_USAGE };

/* Caps that keep a typo such as 1-1000000000 from allocating or running for
 * hours; real grids are far smaller. */
#define MAX_LIST_VALUES 4096
#define MAX_LIST_VALUE 1000000L
#define MAX_COMBINATIONS 100000
#define MAX_JOBS 1024

/* ------------------------------------------------------------------ lists */

typedef struct int_list {
    int *v;
    size_t n, cap;
} int_list;

typedef struct str_list {
    char **v;
    size_t n, cap;
} str_list;

static void int_list_free(int_list *l)
{
    free(l->v);
    *l = (int_list){0};
}

static void str_list_free(str_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (str_list){0};
}

static int int_list_has(const int_list *l, int x)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x) return 1;
    return 0;
}

/* Appends x unless present (a repeated value would only plan a shape twice).
 * -1 when out of memory. */
static int int_list_add(int_list *l, int x)
{
    if (int_list_has(l, x)) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        int *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

/* Appends a copy of the first len bytes of s unless present; -1 when out of
 * memory. */
static int str_list_add(str_list *l, const char *s, size_t len)
{
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i]) == len && strncmp(l->v[i], s, len) == 0) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4;
        char **v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) return -1;
        l->v = v;
        l->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->v[l->n++] = copy;
    return 0;
}

#if defined(__GNUC__)
static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#endif

static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n" PROG ": try '" PROG " --help'\n", stderr);
    va_end(ap);
}

/* A decimal number 0..MAX_LIST_VALUE at *p; advances *p. No sign, no
 * spaces: a list is one shell word. */
static int parse_number(const char **p, long *out)
{
    const char *s = *p;
    long v = 0;
    if (!isdigit((unsigned char)*s)) return -1;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (*s - '0');
        if (v > MAX_LIST_VALUE) return -1;
    }
    *p = s;
    *out = v;
    return 0;
}

/* parse_number, but at least 1: no grid dimension or step can be 0. */
static int parse_positive(const char **p, long *out)
{
    return parse_number(p, out) == 0 && *out >= 1 ? 0 : -1;
}

/* One item of a list: N, N-M or N-M:S, appended to out. */
static int parse_range(int_list *out, const char **p, const char *option)
{
    const char *item = *p;
    long lo, hi, step = 1;
    if (parse_positive(p, &lo) != 0) goto bad;
    hi = lo;
    if (**p == '-') {
        (*p)++;
        if (parse_positive(p, &hi) != 0) goto bad;
        if (**p == ':') {
            (*p)++;
            if (parse_positive(p, &step) != 0) goto bad;
        }
    }
    if (**p != ',' && **p != '\0') goto bad;
    if (hi < lo) {
        usage_error("%s: range '%.*s' runs backwards", option, (int)(*p - item), item);
        return -1;
    }
    for (long v = lo; v <= hi; v += step) {
        if (out->n >= MAX_LIST_VALUES) {
            usage_error("%s: more than %d values", option, MAX_LIST_VALUES);
            return -1;
        }
        if (int_list_add(out, (int)v) != 0) {
            usage_error("out of memory");
            return -1;
        }
    }
    return 0;
bad:
    usage_error("%s: '%s' is not a number list (numbers 1..%ld, e.g. 64,128 or 1-8 or 16-256:16)",
                option, item, MAX_LIST_VALUE);
    return -1;
}

/* "64,128", "1-8", "16-256:16" and comma-separated mixes of them. Replaces
 * what an earlier occurrence of the option gave. */
static int parse_int_list(int_list *out, const char *text, const char *option)
{
    out->n = 0;
    if (*text == '\0') {
        usage_error("%s: empty list", option);
        return -1;
    }
    for (const char *p = text;;) {
        if (parse_range(out, &p, option) != 0) return -1;
        if (*p == '\0') return 0;
        p++; /* the comma */
        if (*p == '\0') {
            usage_error("%s: '%s' ends with a comma", option, text);
            return -1;
        }
    }
}

/* Comma-separated names, none empty. */
static int parse_str_list(str_list *out, const char *text, const char *option)
{
    str_list_free(out);
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        if (len == 0) {
            usage_error("%s: empty item in '%s'", option, text);
            return -1;
        }
        if (str_list_add(out, p, len) != 0) {
            usage_error("out of memory");
            return -1;
        }
        if (p[len] == '\0') return 0;
        p += len + 1;
    }
}

/* A single number, min..max. */
static int parse_one(long *out, const char *text, long min, long max, const char *option)
{
    const char *p = text;
    if (parse_number(&p, out) != 0 || *p != '\0' || *out < min || *out > max) {
        usage_error("%s: '%s' is not a number from %ld to %ld", option, text, min, max);
        return -1;
    }
    return 0;
}

/* A byte count with an optional K, M, G or T suffix (powers of 1024). */
static int parse_bytes(uint64_t *out, const char *text)
{
    if (tool_parse_bytes(out, text) == 0) return 0;
    usage_error("--max-bytes: '%s' is not a byte count (e.g. 500M, 2G, 0)", text);
    return -1;
}

static const char *dtype_name(fsa_dtype d) { return tool_dtype_name(d); }

static int parse_dtypes(int_list *out, const char *text)
{
    str_list names = {0};
    int rc = parse_str_list(&names, text, "--dtype");
    out->n = 0;
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        fsa_dtype d;
        if (tool_parse_dtype(&d, names.v[i]) != 0) {
            usage_error("--dtype: unknown type '%s' (" TOOL_DTYPE_SPELLINGS ")", names.v[i]);
            rc = -1;
            break;
        }
        if (int_list_add(out, (int)d) != 0) {
            usage_error("out of memory");
            rc = -1;
        }
    }
    str_list_free(&names);
    return rc;
}

/* The plans a grid point makes: NSA's three branches and its gates. */
typedef enum plan_kind { KIND_SELECTED, KIND_COMPRESSED, KIND_WINDOW, KIND_GATE, KIND_COUNT } plan_kind;
static const char *const k_kind_names[KIND_COUNT] = {"selected", "compressed", "window", "gate"};

static int parse_kinds(int *kinds, const char *text)
{
    const char *p = text;
    for (;;) {
        const size_t len = strcspn(p, ",");
        int found = 0;
        for (int k = 0; k < KIND_COUNT; k++)
            if (len == strlen(k_kind_names[k]) && strncmp(p, k_kind_names[k], len) == 0) kinds[k] = found = 1;
        if (!found) {
            usage_error("--kind: '%.*s' is not selected, compressed, window or gate", (int)len, p);
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

/* --------------------------------------------------------------- options */

typedef enum tool_mode { MODE_COMPILE, MODE_LIST, MODE_VERIFY, MODE_PRUNE } tool_mode;


typedef struct tool_options {
    tool_mode mode;
    int help, version;
    str_list arches;
    int detect;
    int device, device_given;
    int_list dtypes, head_dims, groups, block_sizes;
    int top_k;
    int value_dim;         /* Dv of v and o, in every kind of plan; 0 = each head dim */
    int kinds[KIND_COUNT]; /* 1 = plans of that kind; none given = selected only */
    int kernel_size, stride, window;
    fsa_algorithm algorithm;
    int backward;   /* also the backward kernels */
    int tune;       /* then measure each plan's variants on the GPU (tuning records) */
    int grid_given; /* any grid option or -j: meaningless for maintenance */
    int jobs;
    const char *cache_dir;
    uint64_t max_bytes;
    int max_bytes_given;
} tool_options;

static void options_free(tool_options *o)
{
    str_list_free(&o->arches);
    int_list_free(&o->dtypes);
    int_list_free(&o->head_dims);
    int_list_free(&o->groups);
    int_list_free(&o->block_sizes);
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > MAX_JOBS ? MAX_JOBS : (int)n;
}

static void print_usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " (--arch LIST | --detect [--device N]) [GRID] [-j N] [--cache-dir DIR]\n"
            "       " PROG " (--list | --verify | --prune --max-bytes N) [--cache-dir DIR]\n"
            "                      [--arch T | --detect [--device N]]\n"
            "\n"
            "Fills the fsa-jit kernel cache ahead of time: for every combination of the grid it\n"
            "creates a plan (num_kv_heads 1, num_q_heads = group), which compiles or finds every\n"
            "kernel that shape needs. Shapes the library does not support are skipped.\n"
            "\n"
            "Targets (one of them is required to compile):\n"
            "  --arch LIST         offline targets, e.g. sm_80,sm_90a (no GPU needed)\n"
            "  --detect            the target of the GPU chosen by --device\n"
            "  --device N          CUDA device ordinal for --detect (default 0)\n"
            "Grid (LIST: 64,128 or 1-8 or 16-256:16, or several joined by commas):\n"
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
            "                      --value-dim, else --head-dim); default selected\n"
            "  --kernel-size N     compressed: positions per compressed token (default 32)\n"
            "  --stride N          compressed: positions between compressed tokens (default 16)\n"
            "  --window N          window: the window (default 512)\n"
            "  --tune              with --detect: also measure each plan's variants at T = 1, 4, ...,\n"
            "                      65536 and write tuning records into the cache\n"
            "  -j, --jobs N        compile threads (default: online CPUs, %d here)\n"
            "Cache:\n"
            "  --cache-dir DIR     default (also for an empty DIR) $FSA_CACHE_DIR, else\n"
            "                      $XDG_CACHE_HOME/fsa, else ~/.cache/fsa\n"
            "  --list              print every entry (target, name, bytes, mtime) and the total\n"
            "  --verify            re-check every entry and delete bad ones (with --detect, also\n"
            "                      load the device target's entries on the GPU)\n"
            "  --prune             delete least recently used entries until the cache holds at\n"
            "                      most --max-bytes N (suffixes K, M, G, T: powers of 1024)\n"
            "  -h, --help          this text\n"
            "  --version           the library version\n"
            "\n"
            "Each shape prints [n/N] and, once the pace is known, the time left.\n"
            "Exit status: 0 success; 1 a compile failed, --verify found bad entries or the cache\n"
            "could not be used; 2 usage error; 3 the target or device cannot be used (an --arch\n"
            "the library does not know, no driver or no GPU for --detect).\n",
            online_cpus());
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
    OPT_WINDOW
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
    {"jobs", required_argument, NULL, 'j'},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"list", no_argument, NULL, OPT_LIST},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"prune", no_argument, NULL, OPT_PRUNE},
    {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"kind", required_argument, NULL, OPT_KIND},
    {"kernel-size", required_argument, NULL, OPT_KERNEL_SIZE},
    {"stride", required_argument, NULL, OPT_STRIDE},
    {"window", required_argument, NULL, OPT_WINDOW},
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
    case 'h': o->help = 1; return 0;
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
        o->grid_given = 1;
        if (parse_one(&n, arg, 1, MAX_LIST_VALUE, names[c - OPT_KERNEL_SIZE]) != 0) return -1;
        *fields[c - OPT_KERNEL_SIZE] = (int)n;
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
    if (o->mode != MODE_COMPILE && o->grid_given) {
        usage_error("grid options and -j apply only when compiling, not with --list, --verify or --prune");
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
    if (!o->kinds[KIND_COMPRESSED] && !o->kinds[KIND_WINDOW] && !o->kinds[KIND_GATE]) o->kinds[KIND_SELECTED] = 1;
    if (o->groups.n == 0)
        for (size_t i = 0; i < sizeof default_groups / sizeof *default_groups; i++)
            rc |= int_list_add(&o->groups, default_groups[i]);
    if (rc != 0) usage_error("out of memory");
    return rc;
}

/* 0 to go on, EXIT_USAGE on a usage error (reported). */
static int parse_args(tool_options *o, int argc, char **argv)
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
            /* getopt sets optopt to the letter of a short option, and to
             * 0 or our OPT_ value for a long one: name that from argv. */
            const char *what = argv[optind - 1];
            char short_opt[3] = {'-', (char)optopt, '\0'};
            if (optopt > 0 && optopt < OPT_ARCH) what = short_opt;
            if (c == ':') usage_error("option '%s' needs a value", what);
            else if (strncmp(what, "--", 2) == 0 && strchr(what, '=') != NULL)
                usage_error("unknown option, or one that takes no value: '%s'", what);
            else usage_error("unknown option '%s'", what);
            return EXIT_USAGE;
        }
        if (apply_option(o, c, optarg) != 0) return EXIT_USAGE;
    }
    if (o->help || o->version) return 0;
    if (optind < argc) {
        usage_error("unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (check_options(o) != 0 || fill_defaults(o) != 0) return EXIT_USAGE;
    return 0;
}

/* --------------------------------------------------------------- helpers */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* "12.3 MiB": for people; exact byte counts are printed beside it. */
static const char *human_bytes(char *buf, size_t cap, uint64_t bytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%" PRIu64 " B", bytes);
    else snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

/* Opens a context for an offline target (arch != NULL) or the given device.
 * The environment's FSA_CACHE_MODE and FSA_JIT are for applications; this
 * tool exists to compile and to write (verify also deletes bad entries). */
static fsa_status open_context(fsa_context **out, const tool_options *o, const char *arch)
{
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.device = arch ? FSA_DEVICE_NONE : o->device;
    co.target = arch;
    co.cache_dir = o->cache_dir;
    co.cache_mode = FSA_CACHE_MODE_READ_WRITE;
    co.jit = FSA_JIT_ON;
    co.check = 1; /* the check-mode kernel too, for servers that run FSA_CHECK=1 with FSA_JIT=off */
    co.tune = FSA_TUNE_ON; /* the kernels tuning can measure too (FSA_TUNE=on with FSA_JIT=off); nothing
                            * is measured unless --tune asks (fsa_plan_tune) */
    co.log = 1; /* an unusable cache directory must not pass silently */
    return fsa_context_create(out, &co);
}

/* Reports a context that could not be created. An --arch the library
 * rejects parses fine: it is not a usage error but an unusable target, like
 * a missing GPU or driver (TOOL_EXIT_TARGET). */
static int context_error(fsa_status st, const char *arch, int device)
{
    if (arch) fprintf(stderr, PROG ": target %s: %s\n", arch, fsa_last_error());
    else fprintf(stderr, PROG ": device %d: %s\n", device, fsa_last_error());
    return tool_context_exit_code(st);
}

/* Precompiling or maintaining without a disk cache would do nothing. */
static int require_disk_cache(const fsa_context *ctx)
{
    if (fsa_context_cache_dir(ctx)[0] != '\0') return 0;
    fprintf(stderr, PROG ": no usable cache directory (see the warning above); nothing would be kept\n");
    return EXIT_FAILED;
}

/* ------------------------------------------------------------ precompile */

typedef struct target_state {
    fsa_context *ctx;
    fsa_cache_stats start; /* at the beginning, for the totals */
    /* Counters are per context and all workers share it, so a plan's delta
     * is its own only if no other plan on this context ran meanwhile. */
    pthread_mutex_t lock;
    int active;       /* plans being created now */
    uint64_t started; /* plans ever started */
} target_state;

typedef struct run_state {
    const tool_options *opts;
    target_state *targets;
    size_t n_targets;
    size_t n_jobs;
    atomic_size_t next_job;
    atomic_size_t failed, skipped;
    pthread_mutex_t print_lock; /* one combination's lines stay together */
    size_t done;                /* jobs reported, under print_lock */
    double start_ms;
} run_state;

typedef struct job {
    target_state *target;
    plan_kind kind;
    fsa_selected_attention_desc desc;    /* KIND_SELECTED */
    fsa_compressed_attention_desc cdesc; /* KIND_COMPRESSED */
    fsa_window_attention_desc wdesc;     /* KIND_WINDOW */
    fsa_gate_desc gdesc;                 /* KIND_GATE */
} job;

/* Block sizes a kind's plans take: the window and the gates have none. */
static size_t kind_block_sizes(const tool_options *o, plan_kind k)
{
    return k == KIND_WINDOW || k == KIND_GATE ? 1 : o->block_sizes.n;
}

/* Groups a kind's plans take: the gates have none. */
static size_t kind_groups(const tool_options *o, plan_kind k) { return k == KIND_GATE ? 1 : o->groups.n; }

/* Job i of the grid: the kinds in order, each a mixed-radix decode, so the
 * grid needs no array. The target varies fastest: neighbouring jobs, which
 * run at the same time, then tend to use different contexts, and more plans
 * get exact counts. */
static void job_decode(job *j, const run_state *rs, size_t i)
{
    const tool_options *o = rs->opts;
    plan_kind k = KIND_SELECTED;
    for (; k < KIND_COUNT; k++) {
        if (!o->kinds[k]) continue;
        const size_t n = rs->n_targets * o->dtypes.n * o->head_dims.n * kind_groups(o, k) * kind_block_sizes(o, k);
        if (i < n) break;
        i -= n;
    }
    j->kind = k;
    j->target = &rs->targets[i % rs->n_targets];
    i /= rs->n_targets;
    const int block_size = o->block_sizes.v[i % kind_block_sizes(o, k)];
    i /= kind_block_sizes(o, k);
    const int group = o->groups.v[i % kind_groups(o, k)];
    i /= kind_groups(o, k);
    const int head_dim = o->head_dims.v[i % o->head_dims.n];
    i /= o->head_dims.n;
    const fsa_dtype dtype = (fsa_dtype)o->dtypes.v[i % o->dtypes.n];
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.block_size = block_size, d.num_q_heads = group, d.num_kv_heads = 1, d.head_dim = head_dim, d.dtype = dtype;
    d.top_k = o->top_k, d.value_dim = o->value_dim, d.algorithm = o->algorithm, d.backward = o->backward;
    j->desc = d;
    fsa_compressed_attention_desc c = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    c.dtype = dtype, c.head_dim = head_dim, c.value_dim = o->value_dim, c.num_q_heads = group, c.num_kv_heads = 1;
    c.kernel_size = o->kernel_size, c.stride = o->stride, c.top_k = o->top_k, c.block_size = block_size;
    c.backward = o->backward;
    j->cdesc = c;
    fsa_window_attention_desc w = FSA_WINDOW_ATTENTION_DESC_INIT;
    w.dtype = dtype, w.head_dim = head_dim, w.value_dim = o->value_dim, w.num_q_heads = group, w.num_kv_heads = 1;
    w.window = o->window, w.backward = o->backward;
    j->wdesc = w;
    fsa_gate_desc g = FSA_GATE_DESC_INIT;
    g.dtype = dtype, g.value_dim = o->value_dim ? o->value_dim : head_dim;
    j->gdesc = g;
}

/* Grid size, or 0 when it exceeds MAX_COMBINATIONS (reported). */
static size_t count_jobs(const tool_options *o, size_t n_targets)
{
    size_t total = 0;
    for (plan_kind k = KIND_SELECTED; k < KIND_COUNT; k++) {
        if (!o->kinds[k]) continue;
        const size_t dims[] = {n_targets, o->dtypes.n, o->head_dims.n, kind_groups(o, k), kind_block_sizes(o, k)};
        size_t n = 1;
        for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
            if (dims[i] != 0 && n > MAX_COMBINATIONS / dims[i]) n = MAX_COMBINATIONS + 1;
            else n *= dims[i];
        }
        total += n;
        if (total > MAX_COMBINATIONS) {
            usage_error("the grid has more than %d combinations", MAX_COMBINATIONS);
            return 0;
        }
    }
    return total;
}

typedef struct plan_window {
    uint64_t ticket;
    int alone_at_start;
    int stats_ok;
    fsa_cache_stats before;
} plan_window;

static void window_open(target_state *t, plan_window *w)
{
    w->before = (fsa_cache_stats)FSA_CACHE_STATS_INIT;
    pthread_mutex_lock(&t->lock);
    t->active++;
    w->ticket = ++t->started;
    w->alone_at_start = t->active == 1;
    w->stats_ok = fsa_context_cache_stats(&w->before, t->ctx) == FSA_STATUS_OK;
    pthread_mutex_unlock(&t->lock);
}

/* 1 with *delta filled when the plan had the context to itself: nobody was
 * active when it started and nobody started since. */
static int window_close(target_state *t, const plan_window *w, fsa_cache_stats *delta)
{
    fsa_cache_stats after = FSA_CACHE_STATS_INIT;
    pthread_mutex_lock(&t->lock);
    int ok = fsa_context_cache_stats(&after, t->ctx) == FSA_STATUS_OK;
    int solo = ok && w->stats_ok && w->alone_at_start && t->started == w->ticket;
    t->active--;
    pthread_mutex_unlock(&t->lock);
    if (!solo) return 0;
    delta->compiles = after.compiles - w->before.compiles;
    delta->compile_ms = after.compile_ms - w->before.compile_ms;
    delta->disk_hits = after.disk_hits - w->before.disk_hits;
    delta->memory_hits = after.memory_hits - w->before.memory_hits;
    return 1;
}

static void job_label(char *buf, size_t cap, const job *j)
{
    const char *target = fsa_context_target(j->target->ctx);
    const fsa_compressed_attention_desc *c = &j->cdesc;
    const fsa_window_attention_desc *w = &j->wdesc;
    char dv[24] = "";
    if (j->kind == KIND_SELECTED && j->desc.value_dim)
        snprintf(dv, sizeof dv, " dv%lld", (long long)j->desc.value_dim);
    if (j->kind == KIND_COMPRESSED)
        snprintf(buf, cap, "%s compressed %s d%d dv%d g%d l%d s%d bk%d k%d", target, dtype_name(c->dtype),
                 c->head_dim, c->value_dim ? c->value_dim : c->head_dim, c->num_q_heads, c->kernel_size, c->stride,
                 c->block_size, c->top_k);
    else if (j->kind == KIND_WINDOW)
        snprintf(buf, cap, "%s window %s d%d dv%d g%d w%d", target, dtype_name(w->dtype), w->head_dim,
                 w->value_dim ? w->value_dim : w->head_dim, w->num_q_heads, w->window);
    else if (j->kind == KIND_GATE)
        snprintf(buf, cap, "%s gate %s dv%d", target, dtype_name(j->gdesc.dtype), j->gdesc.value_dim);
    else
        snprintf(buf, cap, "%s %s d%d%s g%d bk%d", target, dtype_name(j->desc.dtype), j->desc.head_dim, dv,
                 j->desc.num_q_heads, j->desc.block_size);
}

/* "compiled 3 (812.4 ms), cached 1, in memory 1"; when the plan shared its
 * context with concurrent plans its own share is unknown, so only its wall
 * time is given and the counts go to the target's total. */
static void describe_counts(char *buf, size_t cap, const fsa_cache_stats *own, double wall_ms)
{
    if (own == NULL) {
        snprintf(buf, cap, "ready in %.1f ms (alongside other plans: kernels counted in the total)", wall_ms);
        return;
    }
    size_t n = 0;
    buf[0] = '\0';
    if (own->compiles > 0)
        n += (size_t)snprintf(buf + n, cap - n, "compiled %" PRIu64 " (%.1f ms)", own->compiles, own->compile_ms);
    if (own->disk_hits > 0 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%scached %" PRIu64, n ? ", " : "", own->disk_hits);
    if (own->memory_hits > 0 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%sin memory %" PRIu64, n ? ", " : "", own->memory_hits);
    if (n == 0) snprintf(buf, cap, "no kernels needed");
}

/* "[n/N] ", with the time left at the pace so far once it is a second or more. */
static void progress(char *buf, size_t cap, const run_state *rs)
{
    double elapsed_s = (now_ms() - rs->start_ms) / 1e3;
    double left_s = elapsed_s / (double)rs->done * (double)(rs->n_jobs - rs->done);
    if (rs->done == rs->n_jobs || left_s < 1.0) snprintf(buf, cap, "[%zu/%zu] ", rs->done, rs->n_jobs);
    else if (left_s < 60.0) snprintf(buf, cap, "[%zu/%zu, about %.0f s left] ", rs->done, rs->n_jobs, left_s);
    else
        snprintf(buf, cap, "[%zu/%zu, about %d min %02d s left] ", rs->done, rs->n_jobs, (int)left_s / 60,
                 (int)left_s % 60);
}

static void report_job(run_state *rs, const job *j, fsa_status st, double wall_ms, const fsa_cache_stats *own)
{
    char label[128], counts[160], count[64];
    job_label(label, sizeof label, j);
    pthread_mutex_lock(&rs->print_lock);
    rs->done++;
    progress(count, sizeof count, rs);
    if (st == FSA_STATUS_OK) {
        describe_counts(counts, sizeof counts, own, wall_ms);
        printf("%s%s: %s\n", count, label, counts);
    } else if (st == FSA_STATUS_UNSUPPORTED) {
        /* The message alone: "unsupported" already names the status. */
        const char *why = fsa_last_error_info()->message;
        printf("%s%s: skipped (unsupported: %s)\n", count, label, why[0] ? why : fsa_last_error());
        atomic_fetch_add(&rs->skipped, 1);
    } else {
        fflush(stdout);
        fprintf(stderr, "%s%s: FAILED after %.1f ms: %s\n", count, label, wall_ms, fsa_last_error());
        atomic_fetch_add(&rs->failed, 1);
    }
    fflush(stdout);
    pthread_mutex_unlock(&rs->print_lock);
}

/* --tune: measures every bucket 4^i of the plan, one plan at a time (timings
 * of plans sharing the GPU would mislead). */
static void tune_plan(run_state *rs, const job *j, fsa_plan *plan)
{
    static pthread_mutex_t gpu = PTHREAD_MUTEX_INITIALIZER;
    char label[128];
    int measured = 0, n = 0;
    fsa_status st = FSA_STATUS_OK;
    job_label(label, sizeof label, j);
    pthread_mutex_lock(&gpu);
    const double t0 = now_ms();
    for (int64_t T = 1; T <= 65536 && st == FSA_STATUS_OK; T *= 4)
        for (int op = 0; op <= j->desc.backward && st == FSA_STATUS_OK; op++) {
            st = fsa_plan_tune(&measured, plan, (fsa_operation)op, T);
            n += measured;
        }
    const double ms = now_ms() - t0;
    pthread_mutex_unlock(&gpu);
    pthread_mutex_lock(&rs->print_lock);
    if (st == FSA_STATUS_OK) printf("  %s: tuned %d buckets in %.1f ms\n", label, n, ms);
    else fprintf(stderr, "  %s: tuning FAILED: %s\n", label, fsa_last_error());
    pthread_mutex_unlock(&rs->print_lock);
    if (st != FSA_STATUS_OK) atomic_fetch_add(&rs->failed, 1);
}

static void run_job(run_state *rs, size_t index)
{
    job j;
    plan_window w;
    fsa_cache_stats own = FSA_CACHE_STATS_INIT;
    fsa_plan *plan = NULL;
    fsa_compressed_plan *cplan = NULL;
    fsa_window_plan *wplan = NULL;
    fsa_gate_plan *gplan = NULL;
    job_decode(&j, rs, index);
    window_open(j.target, &w);
    double t0 = now_ms();
    fsa_status st = j.kind == KIND_COMPRESSED ? fsa_compressed_plan_create(&cplan, j.target->ctx, &j.cdesc)
                    : j.kind == KIND_WINDOW   ? fsa_window_plan_create(&wplan, j.target->ctx, &j.wdesc)
                    : j.kind == KIND_GATE     ? fsa_gate_plan_create(&gplan, j.target->ctx, &j.gdesc)
                                              : fsa_plan_create(&plan, j.target->ctx, &j.desc);
    double wall_ms = now_ms() - t0;
    int solo = window_close(j.target, &w, &own);
    /* fsa_last_error() still describes the plan: nothing failed since. */
    report_job(rs, &j, st, wall_ms, solo ? &own : NULL);
    /* An offline plan cannot run; creating it was the whole point. Only
     * selected attention has variants to tune. */
    if (st == FSA_STATUS_OK && rs->opts->tune && plan != NULL) tune_plan(rs, &j, plan);
    fsa_plan_destroy(plan);
    fsa_compressed_plan_destroy(cplan);
    fsa_window_plan_destroy(wplan);
    fsa_gate_plan_destroy(gplan);
}

static void *worker(void *arg)
{
    run_state *rs = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&rs->next_job, 1);
        if (i >= rs->n_jobs) break;
        run_job(rs, i);
    }
    return NULL;
}

/* Runs the grid on up to `jobs` threads. If no thread can be started the
 * calling thread does the work: slower, never wrong. */
static void run_pool(run_state *rs, int jobs)
{
    size_t want = (size_t)jobs < rs->n_jobs ? (size_t)jobs : rs->n_jobs;
    pthread_t *threads = calloc(want, sizeof *threads);
    size_t started = 0;
    if (threads != NULL) {
        for (; started < want; started++)
            if (pthread_create(&threads[started], NULL, worker, rs) != 0) break;
        if (started < want)
            fprintf(stderr, PROG ": warning: started %zu of %zu threads\n", started, want);
    }
    if (started == 0) worker(rs);
    for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
    free(threads);
}

typedef struct totals {
    uint64_t compiles, disk_hits, memory_hits, corrupt, write_failures;
    double compile_ms;
} totals;

/* Prints one target's counts since the start and adds them to *sum. */
static void report_target(const target_state *t, totals *sum)
{
    fsa_cache_stats end = FSA_CACHE_STATS_INIT;
    if (fsa_context_cache_stats(&end, t->ctx) != FSA_STATUS_OK) {
        fprintf(stderr, PROG ": %s: no cache statistics: %s\n", fsa_context_target(t->ctx), fsa_last_error());
        return;
    }
    totals d = {end.compiles - t->start.compiles, end.disk_hits - t->start.disk_hits,
                end.memory_hits - t->start.memory_hits, end.corrupt_entries - t->start.corrupt_entries,
                end.write_failures - t->start.write_failures, end.compile_ms - t->start.compile_ms};
    printf("%s: %" PRIu64 " compiled (NVRTC %.1f ms), %" PRIu64 " already cached, %" PRIu64 " in memory",
           fsa_context_target(t->ctx), d.compiles, d.compile_ms, d.disk_hits, d.memory_hits);
    if (d.corrupt) printf(", %" PRIu64 " corrupt entries replaced", d.corrupt);
    if (d.write_failures) printf(", %" PRIu64 " NOT written to the cache", d.write_failures);
    printf("\n");
    sum->compiles += d.compiles;
    sum->disk_hits += d.disk_hits;
    sum->memory_hits += d.memory_hits;
    sum->corrupt += d.corrupt;
    sum->write_failures += d.write_failures;
    sum->compile_ms += d.compile_ms;
}

/* Creates one context per target; returns 0 or an exit status. */
static int open_targets(target_state *targets, size_t *n_open, const tool_options *o)
{
    size_t n = o->detect ? 1 : o->arches.n;
    for (*n_open = 0; *n_open < n; (*n_open)++) {
        target_state *t = &targets[*n_open];
        const char *arch = o->detect ? NULL : o->arches.v[*n_open];
        fsa_status st = open_context(&t->ctx, o, arch);
        if (st != FSA_STATUS_OK) return context_error(st, arch, o->device);
        t->start = (fsa_cache_stats)FSA_CACHE_STATS_INIT;
        if (fsa_context_cache_stats(&t->start, t->ctx) != FSA_STATUS_OK) {
            fprintf(stderr, PROG ": cache statistics: %s\n", fsa_last_error());
            fsa_context_destroy(t->ctx);
            return EXIT_FAILED;
        }
        if (pthread_mutex_init(&t->lock, NULL) != 0) {
            fprintf(stderr, PROG ": cannot create a mutex\n");
            fsa_context_destroy(t->ctx);
            return EXIT_FAILED;
        }
    }
    return require_disk_cache(targets[0].ctx);
}

static void close_targets(target_state *targets, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_destroy(&targets[i].lock);
        fsa_context_destroy(targets[i].ctx);
    }
}

static void print_header(const run_state *rs, int threads)
{
    size_t per_target = rs->n_jobs / rs->n_targets;
    printf(PROG " %s: %zu shape%s x %zu target%s (", fsa_version_string(), per_target,
           per_target == 1 ? "" : "s", rs->n_targets, rs->n_targets == 1 ? "" : "s");
    for (size_t i = 0; i < rs->n_targets; i++)
        printf("%s%s", i ? ", " : "", fsa_context_target(rs->targets[i].ctx));
    printf("), %d thread%s\ncache: %s\n", threads, threads == 1 ? "" : "s",
           fsa_context_cache_dir(rs->targets[0].ctx));
    fflush(stdout);
}

static int precompile(const tool_options *o)
{
    size_t n_targets = o->detect ? 1 : o->arches.n, n_open = 0;
    target_state *targets = calloc(n_targets, sizeof *targets);
    if (targets == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_FAILED;
    }
    run_state rs = {.opts = o, .targets = targets, .n_targets = n_targets};
    int rc = open_targets(targets, &n_open, o);
    if (rc == 0) {
        rs.n_jobs = count_jobs(o, n_targets);
        if (rs.n_jobs == 0) rc = EXIT_USAGE;
    }
    if (rc == 0 && pthread_mutex_init(&rs.print_lock, NULL) != 0) {
        fprintf(stderr, PROG ": cannot create a mutex\n");
        rc = EXIT_FAILED;
    }
    if (rc == 0) {
        int threads = (size_t)o->jobs < rs.n_jobs ? o->jobs : (int)rs.n_jobs;
        atomic_init(&rs.next_job, 0);
        atomic_init(&rs.failed, 0);
        atomic_init(&rs.skipped, 0);
        print_header(&rs, threads);
        double t0 = now_ms();
        rs.start_ms = t0;
        run_pool(&rs, threads);
        double wall_s = (now_ms() - t0) / 1e3;
        totals sum = {0};
        for (size_t i = 0; i < n_targets; i++) report_target(&targets[i], &sum);
        size_t failed = atomic_load(&rs.failed), skipped = atomic_load(&rs.skipped);
        printf("%" PRIu64 " kernels compiled, %" PRIu64 " already cached, %zu failed, %zu skipped"
               " (%zu shape%s, %.1f s)\n",
               sum.compiles, sum.disk_hits, failed, skipped, rs.n_jobs, rs.n_jobs == 1 ? "" : "s", wall_s);
        if (sum.write_failures)
            fprintf(stderr, PROG ": %" PRIu64 " kernels could not be written to the cache (see the warning above)\n",
                    sum.write_failures);
        rc = failed || sum.write_failures ? EXIT_FAILED : 0;
        pthread_mutex_destroy(&rs.print_lock);
    }
    close_targets(targets, n_open);
    free(targets);
    return rc;
}

/* ----------------------------------------------------------- maintenance */

typedef struct entry_totals {
    uint64_t entries, bytes, deleted;
} entry_totals;

/* mtime in UTC, ISO 8601. */
static void iso_time(char *buf, size_t cap, int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "@%" PRId64, t);
}

static int list_visit(const fsa_cache_entry_info *e, void *user)
{
    entry_totals *sum = user;
    char when[32];
    iso_time(when, sizeof when, e->mtime);
    printf("%-8s %-44s %10" PRIu64 "  %s\n", e->target, e->name, e->bytes, when);
    sum->entries++;
    sum->bytes += e->bytes;
    return 0;
}

static int verify_visit(const fsa_cache_entry_info *e, void *user)
{
    entry_totals *sum = user;
    printf("%-3s %-8s %s%s\n", e->valid ? "OK" : "BAD", e->target, e->name,
           e->valid ? "" : e->deleted ? " (deleted)" : " (NOT deleted)");
    sum->entries++;
    sum->deleted += e->deleted != 0;
    sum->bytes += e->bytes;
    return 0;
}

static int cache_list(fsa_context *ctx)
{
    entry_totals sum = {0};
    char human[32];
    fsa_status st = fsa_cache_list(ctx, list_visit, &sum);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, PROG ": list: %s\n", fsa_last_error());
        return EXIT_FAILED;
    }
    printf("%" PRIu64 " entr%s, %" PRIu64 " bytes (%s)\n", sum.entries, sum.entries == 1 ? "y" : "ies",
           sum.bytes, human_bytes(human, sizeof human, sum.bytes));
    return 0;
}

static int cache_verify(fsa_context *ctx)
{
    entry_totals sum = {0};
    uint64_t bad = 0;
    fsa_status st = fsa_cache_verify(ctx, verify_visit, &sum, &bad);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, PROG ": verify: %s\n", fsa_last_error());
        return EXIT_FAILED;
    }
    printf("%" PRIu64 " entr%s checked, %" PRIu64 " bad, %" PRIu64 " deleted\n", sum.entries,
           sum.entries == 1 ? "y" : "ies", bad, sum.deleted);
    return bad ? EXIT_FAILED : 0;
}

static int cache_prune(fsa_context *ctx, uint64_t max_bytes)
{
    uint64_t removed = 0, left = 0;
    char human[32];
    fsa_status st = fsa_cache_prune(ctx, max_bytes, &removed, &left);
    printf("removed %" PRIu64 " file%s; %" PRIu64 " bytes (%s) left\n", removed, removed == 1 ? "" : "s", left,
           human_bytes(human, sizeof human, left));
    if (st != FSA_STATUS_OK) {
        fflush(stdout);
        fprintf(stderr, PROG ": prune: %s\n", fsa_last_error());
        return EXIT_FAILED;
    }
    return 0;
}

/* Maintenance works on the directory, but a context is the only way to
 * reach it: use the first --arch target, the device, or any valid target. */
static int maintain(const tool_options *o)
{
    const char *arch = o->detect ? NULL : o->arches.n ? o->arches.v[0] : "sm_80";
    fsa_context *ctx = NULL;
    fsa_status st = open_context(&ctx, o, arch);
    if (st != FSA_STATUS_OK) return context_error(st, arch, o->device);
    int rc = require_disk_cache(ctx);
    if (rc == 0) {
        printf("cache: %s\n", fsa_context_cache_dir(ctx));
        if (o->mode == MODE_LIST) rc = cache_list(ctx);
        else if (o->mode == MODE_VERIFY) rc = cache_verify(ctx);
        else rc = cache_prune(ctx, o->max_bytes);
    }
    fsa_context_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    tool_options o;
    int rc = parse_args(&o, argc, argv);
    if (rc == 0 && o.help) print_usage(stdout);
    else if (rc == 0 && o.version) printf(PROG " %s\n", fsa_version_string());
    else if (rc == 0) rc = o.mode == MODE_COMPILE ? precompile(&o) : maintain(&o);
    options_free(&o);
    /* A full disk or closed pipe on stdout is a failure, not a success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, PROG ": cannot write the output\n");
        if (rc == 0) rc = EXIT_FAILED;
    }
    return rc;
}
