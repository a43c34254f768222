/* Per-function resource usage of a compiled kernel, read from the log ptxas
 * writes with FSA_PTXAS_VERBOSE (compile.h). */
#ifndef FSA_RESOURCE_USAGE_H
#define FSA_RESOURCE_USAGE_H

#include "base/util.h"
#include "fsa.h"

#include <stddef.h>

typedef struct fsa_function_usage {
    char *name;
    int entry;             /* an entry point (__global__), not a device function */
    int registers;         /* per thread; -1 when not reported (device functions) */
    int spill_store_bytes; /* per thread */
    int spill_load_bytes;
    int stack_bytes;       /* stack frame per thread */
    int shared_bytes;      /* static shared memory per block (dynamic shared memory is the plan's) */
} fsa_function_usage;

typedef struct fsa_resource_usage {
    fsa_function_usage *functions; /* in the order ptxas reports them */
    size_t count;
} fsa_resource_usage;

/* Reads every function ptxas reports in `log`; lines it does not know are
 * skipped. An empty log gives no functions. Free with fsa_resource_usage_free. */
fsa_status fsa_resource_usage_parse(fsa_resource_usage *out, const char *log);
void fsa_resource_usage_free(fsa_resource_usage *u);

/* Appends one line per function: name, registers, spill stores and loads,
 * stack and static shared bytes, under a header line. */
void fsa_resource_usage_format(fsa_strbuf *out, const fsa_resource_usage *u);

#endif
