/* fsa-bench's selected-attention rows (bench_selected.c): one problem's
 * forward (and backward) timed on each path, and the row printed as a table
 * line and as JSON. */
#ifndef FSA_BENCH_SELECTED_H
#define FSA_BENCH_SELECTED_H

#include "bench_cuda.h"
#include "bench_options.h"

#include <stddef.h>
#include <stdio.h>

typedef struct bench_row {
    int T, G, D, hkv;
    int Dv; /* value head dim */
    fsa_algorithm chosen;
    fsa_algorithm heuristic; /* what AUTO takes without a tuning record */
    const char *reason;
    double ms[3];      /* by fsa_algorithm: AUTO (chosen), FSA, NSA; < 0 = not run */
    size_t ws[3];
    double flops;
    double rel_diff;   /* FSA output vs NSA output */
    int reps[3];
    fsa_algorithm bwd_chosen;
    double bwd_ms[3];  /* backward by fsa_algorithm as ms[]; < 0 = not run */
    double fwd_bwd_ms; /* AUTO forward + backward */
    size_t bwd_ws;     /* AUTO */
    double bwd_rel_diff; /* dq of the FSA order vs the NSA order */
    int backward;        /* --backward: the table has the backward's columns */
    int failed;          /* a backward plan failed or a check did (message on stderr): the mode exits 1 */
    double sampled_err;  /* the worst sampled forward row against float64 (bench_check.h), over the paths run */
} bench_row;

/* The checks of every row (a failed one fails the run): the two paths' outputs (and dq) within the tolerance
 * (options.tolerance, BENCH_DEFAULT_TOL unless --tolerance gives another) of each other, relative over the
 * tensor; BENCH_SAMPLED_ROWS rows of each path's forward within it of float64; every output and gradient finite. */
#define BENCH_SAMPLED_ROWS 32

/* Times T tokens at group G and head dim D (Hq, BK, K and the rest from *o);
 * a failed forward plan ends fsa-bench, a failed backward sets row->failed. */
void bench_selected_row(fsa_context *ctx, const options *o, int T, int G, int D, bench_row *row, size_t l2_bytes);
/* The row as a table line ("-" for values that do not exist), and as a JSON
 * object into json (when not NULL; null for them). */
void bench_selected_print_row(const bench_row *r, FILE *json, int first);

#endif
