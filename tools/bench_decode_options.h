/* fsa-bench --decode: its options and the command line that fills them
 * (bench_decode_options.c), and the problem sizes no option changes; apart
 * from the problem and the timing so that each file holds one concern. */
#ifndef FSA_BENCH_DECODE_OPTIONS_H
#define FSA_BENCH_DECODE_OPTIONS_H

/* Query heads, key head dim and page size: the same in every row; the
 * grid's plans take batches up to MAX_B (bench_decode.c). */
enum { HQ = 32, D = 128, PAGE = 64, MAX_B = 256 };

#define DEC_MAX_LIST 16 /* values of -L, -B or -G; more is a usage error */

typedef struct dec_opts {
    int ls[DEC_MAX_LIST], n_ls, bs[DEC_MAX_LIST], n_bs, gs[DEC_MAX_LIST], n_gs;
    int reps, splits;
    double max_gb;
    int prefill, dense;
    int hnd; /* pages as [num_pages, Hkv, page_size, D] (a head's keys of a page contiguous) */
    int dv;  /* value head dim (v cache and o) */
    const char *stamps; /* --stamps FILE: per-CTA phase stamps of one call per row (kvc_stamps.cuh) */
} dec_opts;

/* Options of --decode; returns -1 to go on, else the exit code. */
int bench_decode_options_parse(dec_opts *o, int argc, char **argv);

#endif
