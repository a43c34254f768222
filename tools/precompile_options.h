/* fsa-precompile's options: what to do (compile a grid, or list, verify or
 * prune the cache), for which targets, and the grid of plan shapes. */
#ifndef FSA_PRECOMPILE_OPTIONS_H
#define FSA_PRECOMPILE_OPTIONS_H

#include "precompile_lists.h"

#include <stdio.h>

#define MAX_JOBS 1024

/* The plans a grid point makes: NSA's three branches, its gates, and the
 * selected attention over a paged KV cache (serving). */
typedef enum plan_kind { KIND_SELECTED, KIND_COMPRESSED, KIND_WINDOW, KIND_GATE, KIND_KVCACHE, KIND_COUNT } plan_kind;

typedef enum tool_mode { MODE_COMPILE, MODE_LIST, MODE_VERIFY, MODE_PRUNE } tool_mode;

typedef struct tool_options {
    tool_mode mode;
    int help, version;
    str_list arches;
    int detect;
    int device, device_given;
    int_list dtypes, head_dims, groups, block_sizes;
    int_list page_sizes; /* KIND_KVCACHE */
    int top_k;
    int value_dim;         /* Dv of v and o, in every kind of plan; 0 = each head dim */
    int kinds[KIND_COUNT]; /* 1 = plans of that kind; none given = selected only */
    int kernel_size, stride, window;
    int kernel_size_given, stride_given, window_given; /* each applies to one kind only */
    int_list kv_heads; /* --tune: the KV head counts the selected plans are measured at (default 1) */
    fsa_algorithm algorithm;
    int backward;   /* also the backward kernels */
    int tune;       /* then measure each plan's variants on the GPU (tuning records) */
    int grid_given; /* any grid option or -j: meaningless for maintenance */
    int jobs;
    const char *cache_dir;
    uint64_t max_bytes;
    int max_bytes_given;
} tool_options;

/* Fills *o from the command line, with the grid's defaults where a list
 * was not given. 0 to go on, TOOL_EXIT_USAGE on a usage error (reported).
 * The caller frees *o with options_free either way. */
int options_parse(tool_options *o, int argc, char **argv);
void options_free(tool_options *o);
void options_print_usage(FILE *f);

#endif
