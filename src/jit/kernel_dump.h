/* FSA_JIT_DUMP=dir: what a kernel was made of, for reading and profiling.
 * For each kernel a process builds (compiled, or taken from the disk cache),
 * three files named after the readable kernel name and the target:
 *   <name>.<target>.cu             the rendered source given to NVRTC
 *   <name>.<target>.ptx            its PTX
 *   <name>.<target>.resources.txt  registers, spill stores and loads, stack
 *                                  and static shared bytes per function, and
 *                                  the ptxas log they were read from */
#ifndef FSA_KERNEL_DUMP_H
#define FSA_KERNEL_DUMP_H

#include "compile.h"
#include "fsa.h"
#include "kernel_key.h"
#include "module_cache.h"
#include "nvrtc_loader.h"

/* Renders `req` and compiles it once more with options->verbose set (the
 * cubin that is cached is never this one: compile.h), then writes the three
 * files into `dir`, creating `dir` itself when it is missing. */
fsa_status fsa_kernel_dump(const char *dir, const fsa_nvrtc_api *nvrtc, const fsa_kernel_request *req,
                           const fsa_kernel_key *key, const char *target, const fsa_compile_options *options);

#endif
