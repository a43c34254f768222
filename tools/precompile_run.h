/* fsa-precompile's compile run (precompile_run.c): the grid's plans created
 * on a pool of threads, one context per target, with progress and totals. */
#ifndef FSA_PRECOMPILE_RUN_H
#define FSA_PRECOMPILE_RUN_H

#include "precompile_options.h"

/* Precompiles the grid of *o; returns the exit status. */
int precompile(const tool_options *o);

#endif
