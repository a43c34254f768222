/* fsa-bench --jit (bench_jit.c): what compiling, the disk cache and a
 * launch cost on the host: cold plans, a second process's disk hits and
 * in-memory plans, and the host time of a launch and of a forward call. */
#ifndef FSA_BENCH_JIT_H
#define FSA_BENCH_JIT_H

#include "bench_options.h"

/* The measurements, in this process and in a second one started as
 * `self --jit-child DIR`; the exit code (1 when the second one failed). */
int bench_jit_run(const options *o, const char *self);
/* The second process: the plan comes from the disk cache, then from memory. */
int bench_jit_child(const char *cache_dir);

#endif
