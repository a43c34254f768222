/* fsa-precompile's grid: every combination of the options' lists, per plan
 * kind, decoded from its index (no array), and the plans one point makes. */
#ifndef FSA_PRECOMPILE_GRID_H
#define FSA_PRECOMPILE_GRID_H

#include "precompile_options.h"

#define MAX_COMBINATIONS 100000

/* One point of the grid: a target (index into the caller's targets) and the
 * descriptor of its kind's plan. */
typedef struct grid_job {
    size_t target;
    plan_kind kind;
    fsa_selected_attention_desc desc;    /* KIND_SELECTED */
    fsa_compressed_attention_desc cdesc; /* KIND_COMPRESSED */
    fsa_window_attention_desc wdesc;     /* KIND_WINDOW */
    fsa_gate_desc gdesc;                 /* KIND_GATE */
    fsa_kvcache_desc kdesc;              /* KIND_KVCACHE */
} grid_job;

/* The plans of one point (only its kind's is made); all NULL to start. */
typedef struct grid_plans {
    fsa_plan *selected;
    fsa_compressed_plan *compressed;
    fsa_window_plan *window;
    fsa_gate_plan *gate;
    fsa_kvcache_plan *kvcache;
} grid_plans;

/* Points of the grid, or 0 when there are more than MAX_COMBINATIONS
 * (reported as a usage error). */
size_t grid_count(const tool_options *o, size_t n_targets);
/* Point i (< grid_count) of the grid. */
void grid_job_decode(grid_job *j, const tool_options *o, size_t n_targets, size_t i);
/* "sm_90a kvcache bf16 d128 dv128 g4 bk64 k16 page64": the point for people. */
void grid_job_label(char *buf, size_t cap, const grid_job *j, const char *target);
/* Creates the point's plan on ctx (compiling or finding its kernels). */
fsa_status grid_plans_create(grid_plans *out, const grid_job *j, fsa_context *ctx);
void grid_plans_destroy(grid_plans *p);

#endif
