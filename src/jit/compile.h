/* NVRTC compilation of one rendered template to a cubin. */
#ifndef FSA_COMPILE_H
#define FSA_COMPILE_H

#include "fsa.h"
#include "nvrtc_loader.h"

#include <stddef.h>
#include <stdint.h>

#define FSA_MAX_COMPILE_OPTIONS 8

/* The NVRTC options for a target, in a fixed order (they are part of the
 * kernel key). `arch` holds the formatted one and must outlive `opts`. */
typedef struct fsa_compile_options {
    char arch[48];
    const char *opts[FSA_MAX_COMPILE_OPTIONS];
    size_t count;
    /* Not part of the key: adds FSA_PTXAS_VERBOSE (per-function resource
     * usage in the log) and keeps the PTX. ptxas records its command line in
     * the cubin, so such cubins differ in bytes and must never be cached. */
    int verbose;
} fsa_compile_options;

#define FSA_PTXAS_VERBOSE "--ptxas-options=-v"

/* Fails as fsa_target_parse does for a target it does not know. */
fsa_status fsa_compile_options_for(fsa_compile_options *out, const char *target);

typedef struct fsa_cubin {
    uint8_t *data;
    size_t size;
    char *log; /* NVRTC log, possibly "" */
    char *ptx; /* with options->verbose, else NULL */
    double ms; /* wall time of the compilation */
} fsa_cubin;

void fsa_cubin_free(fsa_cubin *c);

/* Compiles `source`, with the *.cuh templates it includes written in
 * (compile_source.h), as FSA_COMPILE_SOURCE_DIR/<program_name>. On
 * failure: FSA_STATUS_COMPILE_FAILED with the NVRTC log in the error record. */
fsa_status fsa_compile(fsa_cubin *out, const fsa_nvrtc_api *nvrtc, const char *source,
                       const char *program_name, const fsa_compile_options *options);

#endif
