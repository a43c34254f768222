/* Context internals: one device (or an offline target), options resolved
 * from the API and the environment, the disk cache, counters. */
#ifndef FSA_CONTEXT_H
#define FSA_CONTEXT_H

#include "cuda_driver.h"
#include "disk_cache.h"
#include "fsa.h"
#include "module_cache.h"
#include "nvrtc_loader.h"
#include "target.h"

#include <pthread.h>

struct fsa_context {
    int device;               /* ordinal, or FSA_DEVICE_NONE */
    const fsa_cu_api *cu;     /* NULL for an offline context */
    CUdevice cu_device;
    CUcontext cu_context;     /* the device's primary context, retained */
    int cc_major, cc_minor;
    int sm_count;
    int max_smem_per_block;   /* opt-in maximum, bytes: the device's, else the target's */
    fsa_target arch;          /* the compile target, parsed once */
    const char *target;       /* arch.name */
    char *cache_dir;          /* resolved root, NULL when the disk cache is off */
    char *cache_note;         /* why the disk cache could not be used, or NULL */
    char *dump_dir;           /* $FSA_JIT_DUMP, read once; NULL when unset */
    fsa_disk_cache *disk;
    fsa_jit_counters counters;
    fsa_jit_env env;
    int log;
    int check;                /* check mode (attention/metadata_check.h) */
    int tune;                 /* tuning level (attention/choose.h: fsa_tune_level) */
    char gpu_name[128];       /* the device's name, part of tuning-record keys; "" offline */

    pthread_mutex_t fill_lock; /* guards the lazily made fill kernel */
    CUfunction fill_fn;
};

/* Makes the context's CUDA context current for the calling thread;
 * fsa_context_leave restores the previous one. No-ops offline. */
fsa_status fsa_context_enter(const fsa_context *ctx);
void fsa_context_leave(const fsa_context *ctx);

/* Compiles or loads one kernel and, with a device, returns its function
 * handle for this context with `smem_bytes` of dynamic shared memory allowed
 * (0 = default). With dynamic shared memory, `static_counted` is the static
 * shared memory the caller's plan counted for the kernel (-1: none counted):
 * a kernel holding more is FSA_STATUS_INTERNAL, and dynamic plus static
 * bytes over the device's limit FSA_STATUS_UNSUPPORTED, both before the
 * driver is asked. Offline: *fn_out is NULL. */
fsa_status fsa_context_get_function(CUfunction *fn_out, fsa_context *ctx,
                                    const fsa_kernel_request *req, const char *entry,
                                    int smem_bytes, int static_counted);

/* The load's shared-memory check of function fn (inside ctx, which has a
 * device), as fsa_context_get_function describes it: the driver's count of
 * its static bytes against `counted` (-1: not checked), then `dynamic` plus
 * those bytes against the device's limit. */
fsa_status fsa_context_check_function_smem(const fsa_context *ctx, CUfunction fn, const char *entry, int dynamic,
                                           int counted);

#endif
