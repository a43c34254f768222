/* fsa-precompile: fills the fsa-jit kernel cache ahead of time for a grid of
 * problem shapes, and lists, verifies or prunes that cache.
 *
 * It uses only the public API (fsa.h): a shape is "precompiled" by creating a
 * plan for it, so the cache ends up holding exactly the kernels a later
 * fsa_plan_create in an application will look up, under the same keys.
 *
 * This file is the entry point; the compile run is in precompile_run.c, the
 * cache's maintenance in precompile_maintenance.c, the context both open in
 * precompile_context.c. */

#include "precompile_maintenance.h"
#include "precompile_options.h"
#include "precompile_run.h"
#include "tool_args.h"

#include <fsa.h>

#include <stdio.h>

int main(int argc, char **argv)
{
    const int closed = tool_open_standard_streams();
    if (closed < 0) return TOOL_EXIT_FAILED;
    tool_options o;
    int rc = options_parse(&o, argc, argv);
    if (rc == 0 && o.help) options_print_usage(stdout);
    else if (rc == 0 && o.version) tool_print_version(PROG);
    else if (rc == 0) rc = o.mode == MODE_COMPILE ? precompile(&o) : maintain(&o);
    options_free(&o);
    /* A full disk, a closed pipe or no stdout at all is a failure, not a success. */
    if (fflush(stdout) != 0 || ferror(stdout) || (closed & 2)) {
        fprintf(stderr, PROG ": cannot write the output\n");
        if (rc == 0) rc = TOOL_EXIT_FAILED;
    }
    return rc;
}
