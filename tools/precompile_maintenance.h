/* fsa-precompile --list, --verify and --prune: the cache's maintenance
 * (precompile_maintenance.c), apart from compiling. */
#ifndef FSA_PRECOMPILE_MAINTENANCE_H
#define FSA_PRECOMPILE_MAINTENANCE_H

#include "precompile_options.h"

/* Lists, verifies or prunes the cache as o->mode says; returns the exit status. */
int maintain(const tool_options *o);

#endif
