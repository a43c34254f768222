/* fsa-precompile's context: the one way to reach the kernel cache, opened
 * the same way for a compile run and for maintenance
 * (precompile_context.c). */
#ifndef FSA_PRECOMPILE_CONTEXT_H
#define FSA_PRECOMPILE_CONTEXT_H

#include "precompile_options.h"

#include <fsa.h>

/* A context for the offline target arch, or for o->device when arch is
 * NULL, that compiles and writes to o->cache_dir. */
fsa_status open_context(fsa_context **out, const tool_options *o, const char *arch);
/* Reports a context that could not be created; returns the exit status. */
int context_error(fsa_status st, const char *arch, int device);
/* 0 when ctx has a disk cache, else the exit status (reported). */
int require_disk_cache(const fsa_context *ctx);

#endif
