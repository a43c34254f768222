/* The process-wide table of kernels: key -> cubin (and, once loaded, its
 * CUlibrary). One table per process, shared by every context, so a kernel is
 * compiled and loaded once per process; but each context uses it only as
 * its own cache settings allow (fsa_module_get). Builds are single-flight
 * per key: concurrent requests for one key wait for the first builder; no
 * lock is held across compilation or loading. */
#ifndef FSA_MODULE_CACHE_H
#define FSA_MODULE_CACHE_H

#include "cuda_driver.h"
#include "disk_cache.h"
#include "fsa.h"
#include "nvrtc_loader.h"
#include "render.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct fsa_jit_counters {
    atomic_uint_fast64_t memory_hits;
    atomic_uint_fast64_t disk_hits;
    atomic_uint_fast64_t compiles;
    atomic_uint_fast64_t compile_us;
    atomic_uint_fast64_t corrupt_entries;
    atomic_uint_fast64_t write_failures;
    atomic_int warned;       /* one warning per context about an unusable cache */
    atomic_int nvrtc_warned; /* one about NVRTC that cannot be loaded */
    /* The modules whose publication to the context's cache failed, each counted once in write_failures
     * (a later request that finds one in memory tries again: the same entry). */
    pthread_mutex_t unwritten_lock;
    const struct fsa_module **unwritten;
    size_t n_unwritten, cap_unwritten;
} fsa_jit_counters;

/* Zeroes the counters and makes the lock; _free releases what they hold. */
void fsa_jit_counters_init(fsa_jit_counters *c);
void fsa_jit_counters_free(fsa_jit_counters *c);

/* What a build may use. Owned by the context. NVRTC is not part of it: it
 * is loaded when a context with JIT on first asks for a kernel, and never
 * for a context with JIT off (which takes cached kernels that any NVRTC
 * built: see cache/README.md). */
typedef struct fsa_jit_env {
    const char *target;         /* "sm_90a" */
    fsa_disk_cache *disk;       /* NULL: memory only */
    const char *cache_note;     /* why disk is NULL when the cache was refused or unusable, else "" */
    int jit;                    /* 0: a miss is FSA_STATUS_JIT_DISABLED */
    int driver_major;           /* CUDA major version of the driver; 0 offline (no limit on cached cubins) */
    int log;
    const char *dump_dir;       /* FSA_JIT_DUMP (kernel_dump.h); NULL when unset */
    fsa_jit_counters *counters;
} fsa_jit_env;

typedef struct fsa_kernel_request {
    const char *family;         /* templates/<family>.cu */
    const fsa_param *params;
    size_t n_params;
    const char *entry_names;    /* '\n'-separated extern "C" kernels it defines */
} fsa_kernel_request;

typedef struct fsa_module fsa_module; /* lives until the process exits */

/* The module for a request. A module already in the table (built by any
 * context) is used only as the context's settings allow: with JIT off, only
 * when the context's own disk cache holds the kernel (else
 * FSA_STATUS_JIT_DISABLED); with a writable disk cache that lacks it, the
 * module is published there first. Otherwise: the disk cache, then NVRTC
 * (FSA_STATUS_JIT_DISABLED with JIT off, FSA_STATUS_NO_NVRTC without NVRTC). */
fsa_status fsa_module_get(fsa_module **out, const fsa_jit_env *env, const fsa_kernel_request *req);

const char *fsa_module_name(const fsa_module *m);
const char *fsa_module_key_hex(const fsa_module *m);
const void *fsa_module_cubin(const fsa_module *m, size_t *size_out);

/* Loads the cubin into the driver (once per process) and looks up one entry
 * point. CUkernel is context-independent; use cuKernelGetFunction for a
 * context-specific handle. */
fsa_status fsa_module_kernel(CUkernel *out, fsa_module *m, const fsa_cu_api *cu, const char *entry);

/* The number of modules in the table (tests). */
size_t fsa_module_count(void);

#endif
