/* fsa-bench --decode: its options (bench_decode_options.h). */
#define _GNU_SOURCE
#include "bench_decode_options.h"

#include "tool_args.h"

#include <getopt.h>
#include <stdio.h>

static void decode_usage(FILE *f)
{
    fprintf(f,
            "Usage: fsa-bench --decode [OPTIONS]   paged KV-cache decode, speculative and prefill timings\n"
            "  -L LIST          cached lengths, 4 or more (default 8192,32768,131072; at most %d values)\n"
            "  -B LIST          batch sizes, at most %d (default 1,16,64,128,256; at most %d values)\n"
            "  -G LIST          query heads per KV head, each dividing %d (default 1,4,16; at most %d values)\n"
            "  --reps N         timed graph replays per row (default 30)\n"
            "  --max-gb GB      skip rows whose memory (touched pages, page table, inputs; device or\n"
            "                   host) would exceed this (default 90)\n"
            "  --splits N       split count of the plan (default 0: the plan's rule)\n"
            "  --no-prefill     skip the chunked-prefill row\n"
            "  --no-dense       skip the dense decode rows\n"
            "  --hnd            pages as [num_pages, Hkv, page_size, D] (default NHD: [num_pages, page_size, Hkv, D])\n"
            "  --value-dim N    head dim of v and o (default 128, the key head dim)\n"
            "  --stamps FILE    debug: the kernel variant with per-CTA phase stamps (tensor-map kernels, sm_90a);\n"
            "                   one more call per row writes its CTAs' records to FILE (timings include the stamps)\n"
            "  -h, --help       this text\n"
            "  --version        the library version\n"
            "Exit status: 0 success; 1 a benchmark failed; 2 usage error; 3 no CUDA driver, no\n"
            "usable GPU, or a library setting in the environment (e.g. FSA_TUNE) the context refuses.\n",
            DEC_MAX_LIST, MAX_B, DEC_MAX_LIST, HQ, DEC_MAX_LIST);
}

/* `takes`: what the option accepts, or NULL where `option` says it all. */
static int decode_usage_error(const char *option, const char *value, const char *takes);

/* A list option's refusal: too many values, or what the values should be. */
static int list_error(int rc, const char *option, const char *value, const char *takes)
{
    char what[64];
    if (rc != -2) return decode_usage_error(option, value, takes);
    snprintf(what, sizeof what, "%s: more than %d values", option, DEC_MAX_LIST);
    return decode_usage_error(what, NULL, NULL);
}

static int decode_usage_error(const char *option, const char *value, const char *takes)
{
    if (takes) fprintf(stderr, "fsa-bench --decode: %s: '%s' is not %s\n", option, value, takes);
    else fprintf(stderr, "fsa-bench --decode: %s\n", option);
    decode_usage(stderr);
    return TOOL_EXIT_USAGE;
}

int bench_decode_options_parse(dec_opts *o, int argc, char **argv)
{
    enum { OPT_REPS = 256, OPT_MAX_GB, OPT_SPLITS, OPT_NO_PREFILL, OPT_NO_DENSE, OPT_HND, OPT_VALUE_DIM, OPT_STAMPS,
           OPT_HELP, OPT_VERSION };
    static const struct option longs[] = {
        {"reps", required_argument, NULL, OPT_REPS},         {"max-gb", required_argument, NULL, OPT_MAX_GB},
        {"splits", required_argument, NULL, OPT_SPLITS},     {"no-prefill", no_argument, NULL, OPT_NO_PREFILL},
        {"no-dense", no_argument, NULL, OPT_NO_DENSE},       {"hnd", no_argument, NULL, OPT_HND},
        {"value-dim", required_argument, NULL, OPT_VALUE_DIM}, {"stamps", required_argument, NULL, OPT_STAMPS},
        {"help", no_argument, NULL, OPT_HELP}, /* not 'h': a long option's value is never a letter (tool_bad_option) */
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    long v;
    int c, rc;
    char bad[3], batch_takes[64], group_takes[64];
    snprintf(batch_takes, sizeof batch_takes, "a list of batch sizes from 1 to %d", MAX_B);
    snprintf(group_takes, sizeof group_takes, "a list of groups from 1 to %d", HQ);
    optind = 1;
    opterr = 0; /* argv[0] is "--decode": the messages below name the tool instead */
    while ((c = getopt_long(argc, argv, ":L:B:G:h", longs, NULL)) != -1) {
        switch (c) {
        case 'L':
            /* at least the 4 new tokens of the speculative rows (their keys are part of the cache) */
            if ((rc = tool_parse_list(o->ls, &o->n_ls, DEC_MAX_LIST, optarg, 4, 1L << 30)) != 0)
                return list_error(rc, "-L", optarg, "a list of cache lengths from 4 to 2^30");
            break;
        case 'B':
            /* The grid's plan takes at most MAX_B sequences. */
            if ((rc = tool_parse_list(o->bs, &o->n_bs, DEC_MAX_LIST, optarg, 1, MAX_B)) != 0)
                return list_error(rc, "-B", optarg, batch_takes);
            break;
        case 'G':
            if ((rc = tool_parse_list(o->gs, &o->n_gs, DEC_MAX_LIST, optarg, 1, HQ)) != 0)
                return list_error(rc, "-G", optarg, group_takes);
            for (int i = 0; i < o->n_gs; i++) /* Hkv = HQ / G */
                if (HQ % o->gs[i] != 0) {
                    char what[64];
                    snprintf(what, sizeof what, "-G (every group must divide the %d query heads)", HQ);
                    return decode_usage_error(what, NULL, NULL);
                }
            break;
        case OPT_REPS:
            if (tool_parse_long(&v, optarg, 1, 1000000) != 0) return decode_usage_error("--reps", optarg, "a number from 1 to 1000000");
            o->reps = (int)v;
            break;
        case OPT_MAX_GB:
            if (tool_parse_double(&o->max_gb, optarg, 0.001, 1e6) != 0) return decode_usage_error("--max-gb", optarg, "a number of GB from 0.001 to 1e6");
            break;
        case OPT_SPLITS:
            if (tool_parse_long(&v, optarg, 0, 64) != 0) return decode_usage_error("--splits", optarg, "a number from 0 to 64");
            o->splits = (int)v;
            break;
        case OPT_NO_PREFILL: o->prefill = 0; break;
        case OPT_NO_DENSE: o->dense = 0; break;
        case OPT_HND: o->hnd = 1; break;
        case OPT_VALUE_DIM:
            if (tool_parse_long(&v, optarg, 16, 256) != 0 || v % 16 != 0) return decode_usage_error("--value-dim", optarg, "a multiple of 16 from 16 to 256");
            o->dv = (int)v;
            break;
        case OPT_STAMPS:
            if (optarg[0] == '\0') return decode_usage_error("--stamps: an empty file name", NULL, NULL);
            o->stamps = optarg;
            break;
        case 'h':
        case OPT_HELP: decode_usage(stdout); return TOOL_EXIT_OK;
        case OPT_VERSION: return tool_print_version("fsa-bench");
        default: {
            const char *word = tool_bad_option(bad, optopt, argv, optind);
            fprintf(stderr, "fsa-bench --decode: %s: %s\n",
                    c == ':' ? "option needs a value" : tool_refused_option_reason(longs, word), word);
            decode_usage(stderr);
            return TOOL_EXIT_USAGE;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fsa-bench --decode: unexpected argument %s\n", argv[optind]);
        decode_usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    return -1;
}
