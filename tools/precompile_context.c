/* fsa-precompile's context (precompile_context.h). */
#include "precompile_context.h"

#include "tool_args.h"

#include <stdio.h>

/* Opens a context for an offline target (arch != NULL) or the given device.
 * The environment's FSA_CACHE_MODE and FSA_JIT are for applications; this
 * tool exists to compile and to write (verify also deletes bad entries). */
fsa_status open_context(fsa_context **out, const tool_options *o, const char *arch)
{
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.device = arch ? FSA_DEVICE_NONE : o->device;
    co.target = arch;
    co.cache_dir = o->cache_dir;
    co.cache_mode = FSA_CACHE_MODE_READ_WRITE;
    co.jit = FSA_JIT_ON;
    co.check = 1; /* the check-mode kernel too, for servers that run FSA_CHECK=1 with FSA_JIT=off */
    co.tune = FSA_TUNE_ON; /* the kernels tuning can measure too (FSA_TUNE=on with FSA_JIT=off); nothing
                            * is measured unless --tune asks (fsa_plan_tune) */
    co.log = 1; /* an unusable cache directory must not pass silently */
    return fsa_context_create(out, &co);
}

/* Reports a context that could not be created. An --arch the library
 * rejects parses fine: it is not a usage error but an unusable target, like
 * a missing GPU or driver (TOOL_EXIT_TARGET). */
int context_error(fsa_status st, const char *arch, int device)
{
    if (arch) fprintf(stderr, PROG ": target %s: %s\n", arch, fsa_last_error());
    else fprintf(stderr, PROG ": device %d: %s\n", device, fsa_last_error());
    return tool_context_exit_code(st);
}

/* Precompiling or maintaining without a disk cache would do nothing. */
int require_disk_cache(const fsa_context *ctx)
{
    if (fsa_context_cache_dir(ctx)[0] != '\0') return 0;
    fprintf(stderr, PROG ": no usable cache directory (see the warning above); nothing would be kept\n");
    return TOOL_EXIT_FAILED;
}
