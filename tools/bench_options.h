/* fsa-bench's selected-attention runs (the -T / -G grid, --standard, --jit):
 * their options and the command line that fills them (bench_options.c). */
#ifndef FSA_BENCH_OPTIONS_H
#define FSA_BENCH_OPTIONS_H

#include "fsa.h"

#include <stdint.h>

#define MAX_LIST 64 /* values of -T or -G; more is a usage error */

typedef enum bench_mode { MODE_GRID, MODE_STANDARD, MODE_JIT } bench_mode;

/* --standard's head dims: its T x G table at the first, one T 16384 G 4 row at each of the others. */
#define BENCH_STANDARD_DIMS {128, 64, 256}
#define BENCH_STANDARD_N_DIMS 3

typedef struct options {
    bench_mode mode;
    int dry_run; /* print what would run, touch no GPU */
    int tune;    /* measure each row's bucket before choosing (tuning on) */
    int tokens[MAX_LIST], n_tokens;
    int groups[MAX_LIST], n_groups;
    int head_dim;
    int value_dim; /* 0 = head_dim */
    int q_heads;
    int block_size;
    int top_k;
    fsa_dtype dtype;
    double min_ms;
    double warmup_ms;
    const char *json;
    const char *cache_dir;
    uint64_t workspace_limit;
    int only; /* 0 = both paths, else the one fsa_algorithm to time */
    int backward;
    double tolerance; /* of the checks of every row (bench_selected.h), BENCH_DEFAULT_TOL unless given */
} options;

/* Fills *o, whose defaults the caller set; returns -1 to go on, else the
 * exit code (help, version, usage error). *jit_child is set for the
 * internal second process of --jit. */
int bench_options_parse(options *o, const char **jit_child, int argc, char **argv);

/* The modes with options of their own, named by their word as the first
 * argument (main dispatches on it; after another option it is a usage error). */
typedef enum { BENCH_MODE_NONE, BENCH_MODE_DECODE, BENCH_MODE_BRANCHES } bench_mode_word;
bench_mode_word bench_mode_of(const char *word);

#endif
