/* fsa-bench --compressed and --window: their options and the command line
 * that fills them (bench_branches_options.c), apart from the timing so that
 * each file holds one concern. */
#ifndef FSA_BENCH_BRANCHES_OPTIONS_H
#define FSA_BENCH_BRANCHES_OPTIONS_H

#include "fsa.h"

#define BR_MAX_LIST 16 /* values of -T, -G or -W; more is a usage error */

typedef enum br_kind { KIND_COMPRESSED, KIND_WINDOW } br_kind;

typedef struct br_opts {
    br_kind kind;
    int tokens[BR_MAX_LIST], n_tokens;
    int groups[BR_MAX_LIST], n_groups;
    int windows[BR_MAX_LIST], n_windows;
    int q_heads, head_dim, value_dim, batch;
    int kernel_size, stride, block_size, top_k, init_blocks, local_blocks;
    fsa_dtype dtype;
    int reps, backward, dry_run;
    const char *json;
} br_opts;

/* The mode, argv[0] of fsa_bench_branches ("--compressed" or "--window"),
 * for messages. */
extern const char *bench_branches_mode;

/* Options of the mode in argv[0]; returns -1 to go on, else the exit code. */
int bench_branches_options_parse(br_opts *o, int argc, char **argv);
/* The problem and what will be timed, as one "# ..." line. */
void bench_branches_print_plan(const br_opts *o);

#endif
