/* fsa-bench --compressed and --window: one row of each, its plans made,
 * timed and printed (bench_branches_rows.c), apart from the options and the
 * device setup. */
#ifndef FSA_BENCH_BRANCHES_ROWS_H
#define FSA_BENCH_BRANCHES_ROWS_H

#include "bench_branches_options.h"
#include "bench_cuda.h"

#include <stdio.h>

#define FLUSH_BYTES ((size_t)256 << 20) /* memset before each timed call: the L2 starts cold */

/* What every timed call uses, made once by fsa_bench_branches. */
typedef struct br_env {
    CUevent e0, e1;
    CUdeviceptr flush;
} br_env;

/* One row; 0 on success. */
int bench_cmp_row(fsa_context *ctx, const br_opts *o, const br_env *env, int T, int G, FILE *json, int *first_row);
int bench_win_row(fsa_context *ctx, const br_opts *o, const br_env *env, int T, int G, int W, FILE *json,
                  int *first_row);

#endif
