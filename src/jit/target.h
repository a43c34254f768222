/* Compile targets: the one place a target name ("sm_90a") is parsed, and the
 * table of the targets the library knows, with what each allows a block. */
#ifndef FSA_TARGET_H
#define FSA_TARGET_H

#include "fsa.h"

#include <stddef.h>

typedef struct fsa_target {
    int major, minor;   /* compute capability the cubin is built for */
    char suffix;        /* 'a' (arch-specific: runs only on major.minor), 'f' (family), '\0' */
    int smem_per_block; /* opt-in maximum of shared memory per block, bytes */
    char name[16];      /* canonical "sm_<major><minor>[suffix]": the NVRTC architecture */
} fsa_target;

/* Parses "sm_<major><minor>[a|f]". A name that is not of that form is
 * FSA_STATUS_INVALID_ARGUMENT; a well-formed one the table does not list
 * (older than sm_80, a suffix the architecture lacks, an unknown part) is
 * FSA_STATUS_UNSUPPORTED_DEVICE. `out` is zeroed on failure. */
fsa_status fsa_target_parse(fsa_target *out, const char *name);

/* The default target of a device: sm_90a on compute capability 9.0 (it
 * unlocks Hopper-only instructions), the plain sm_<major><minor> elsewhere.
 * A capability the table lacks gets the newest plain target of its major
 * version below it (its cubins run there; the device's own shared memory
 * limit is then the one to use); without one, FSA_STATUS_UNSUPPORTED_DEVICE. */
fsa_status fsa_target_for_capability(fsa_target *out, int major, int minor);

/* 1 when a cubin built for `t` runs on a device of that capability: the same
 * major version with an equal or newer minor; arch-specific ones only on
 * exactly their own capability. */
int fsa_target_runs_on(const fsa_target *t, int major, int minor);

/* The known targets, one per (capability, suffix), for tests and listings. */
size_t fsa_target_known_count(void);
void fsa_target_known(fsa_target *out, size_t i);

#endif
