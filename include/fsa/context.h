/**
 * @file fsa/context.h
 * Contexts: one device (or an offline target), cache settings, counters.
 * Part of fsa.h.
 */
#ifndef FSA_PUBLIC_CONTEXT_H
#define FSA_PUBLIC_CONTEXT_H

#include "common.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Context: one device (or an offline target), cache settings, counters     */
/* ------------------------------------------------------------------------ */

/** A device (or an offline compile target), its kernel cache settings and
 *  counters. Made by fsa_context_create, released by fsa_context_destroy. */
typedef struct fsa_context fsa_context;

typedef enum fsa_cache_mode {
    FSA_CACHE_MODE_DEFAULT = 0, /**< $FSA_CACHE_MODE (rw, ro, off), else read-write */
    FSA_CACHE_MODE_READ_WRITE = 1,
    FSA_CACHE_MODE_READ_ONLY = 2,
    FSA_CACHE_MODE_OFF = 3
} fsa_cache_mode;

typedef enum fsa_jit_mode {
    FSA_JIT_DEFAULT = 0, /**< $FSA_JIT (on, off), else on */
    FSA_JIT_ON = 1,
    FSA_JIT_OFF = 2 /**< a kernel that is not cached is an error */
} fsa_jit_mode;

/** Tuning: timing the variants of an operation on the GPU to choose among
 *  them (see fsa_plan_choice). */
typedef enum fsa_tune_mode {
    FSA_TUNE_DEFAULT = 0, /**< $FSA_TUNE (off, on, force), else off */
    FSA_TUNE_OFF = 1,     /**< never measure; the forward's tuning records already in the cache are used
                               (a backward record needs the dq order an off plan does not load) */
    FSA_TUNE_ON = 2,      /**< the first call of a shape bucket without a record measures and records */
    FSA_TUNE_FORCE = 3    /**< as on, but records already on disk are ignored (each plan re-measures) */
} fsa_tune_mode;

/** fsa_context_options.device for a context that only compiles and caches
 *  kernels for its target (no driver, no GPU needed). */
#define FSA_DEVICE_NONE (-1)

/** Options of fsa_context_create. Zero in every field means the default. */
typedef struct fsa_context_options {
    size_t struct_size;
    int device;             /**< CUDA device ordinal (default 0), or FSA_DEVICE_NONE */
    const char *target;     /**< "sm_80", "sm_90a", ...; NULL = from the device. Required
                                 with FSA_DEVICE_NONE. */
    const char *cache_dir;  /**< NULL or "" = $FSA_CACHE_DIR, else $XDG_CACHE_HOME/fsa (when
                                 that is an absolute path), else $HOME/.cache/fsa (an empty
                                 FSA_CACHE_DIR counts as unset too) */
    fsa_cache_mode cache_mode;
    fsa_jit_mode jit;
    int log;                /**< 1 = warnings to stderr; -1 = never (but a dump that
                                 *   $FSA_JIT_DUMP asked for reports its failures); 0 = $FSA_LOG;
                                 *   any other value is refused */
    /** Check mode: 1 = on, -1 = off, 0 = $FSA_CHECK (on for 1, on, true, yes); any other
     *  value is refused. Each call
     *  of a plan of this context first runs a small kernel that validates cu_seqlens
     *  (starts at 0, never falls, ends at total_tokens, no sequence over max_seqlen when
     *  given) and the top-k rows (each entry -1 or a block of the token's own sequence,
     *  no block twice in a row); for compressed attention also cu_seqlens_c (starts at 0,
     *  never falls, ends at total_compressed, each sequence of n positions with exactly
     *  max(0, (n - kernel_size) / stride + 1) compressed tokens); for sliding-window
     *  attention cu_seqlens alone; for the paged cache its own metadata
     *  (fsa_kvcache_attention). It waits for the kernel (a host synchronization on the stream),
     *  and returns FSA_STATUS_INVALID_ARGUMENT, saying what is wrong where, instead of
     *  launching the attention. Without it the kernels clamp every bound they read and
     *  report nothing. A call on a stream being captured skips the check (it could not
     *  wait for it). The checks of one plan's calls take turns (one result buffer per plan);
     *  the calls' attention kernels do not wait for each other's. 64 bits wide so
     *  that it starts past the end of the struct's first version on every ABI. */
    int64_t check;
    /** Tuning of the plans of this context (fsa_tune_mode). With FSA_TUNE_ON or
     *  FSA_TUNE_FORCE, the first call of a plan in a shape bucket that has no tuning
     *  record times every variant on the caller's stream, with the caller's inputs,
     *  outputs and workspace, waiting for the timings (host synchronizations: one
     *  untimed and one timed run of every variant, then more timed rounds while
     *  under about 300 ms per bucket), then records the fastest in the cache directory; a
     *  call on a stream being captured never measures. Every other call only reads
     *  the plan's records. Off by default so that no call synchronizes unless asked. */
    fsa_tune_mode tune;
    int reserved; /**< unused, never read: fills what was tail padding, so that a field appended later starts
                       past every earlier version's size (docs/versioning.md) */
} fsa_context_options;

#define FSA_CONTEXT_OPTIONS_INIT FSA_INIT_(fsa_context_options, )

/**
 * Creates a context: opens the device (retaining its primary context) or,
 * with FSA_DEVICE_NONE, only records the target; resolves the cache
 * directory and modes from the options and the environment. NVRTC is not
 * loaded here but the first time a context with JIT on asks for a kernel
 * (its version is part of every kernel key). Without NVRTC every context
 * still uses the kernels already in the cache (built by any NVRTC whose
 * output the driver loads); a kernel missing from it is then
 * FSA_STATUS_NO_NVRTC (FSA_STATUS_JIT_DISABLED with JIT off). A cache
 * directory that cannot be used is not an error: kernels then stay in memory
 * (one warning when logging is on).
 * @param[out] out      the new context, or NULL on failure. The caller owns it
 *                      and releases it with fsa_context_destroy.
 * @param      options  NULL for every default; read only during the call (the
 *                      strings are copied).
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER when out is NULL;
 *         FSA_STATUS_STRUCT_SIZE; FSA_STATUS_INVALID_ARGUMENT for an unknown
 *         mode or switch value (option or environment: FSA_CACHE_MODE,
 *         FSA_JIT, FSA_TUNE, FSA_CHECK, FSA_LOG; log and check other than
 *         1, -1 and 0), a negative device other than
 *         FSA_DEVICE_NONE, an offline context without a target or a target
 *         that cannot run on the device or a target name of another form than
 *         sm_<major><minor>[a|f]; FSA_STATUS_UNSUPPORTED_DEVICE for a device
 *         or target the library does not build for (older than sm_80, or one
 *         of a major version it does not know: a device of an unlisted minor
 *         revision runs the newest earlier one's kernels); FSA_STATUS_NO_DRIVER,
 *         FSA_STATUS_NO_DEVICE or FSA_STATUS_DRIVER_ERROR when the device
 *         cannot be opened.
 * Thread-safe. Blocks while the driver initializes.
 */
FSA_API fsa_status fsa_context_create(fsa_context **out, const fsa_context_options *options);

/**
 * Releases a context and the retained primary context. Kernels stay in the
 * process-wide table (another context may use them).
 * @param ctx a context from fsa_context_create, or NULL (nothing happens).
 *            Every plan made from it must be destroyed first, and no other
 *            thread may be using it.
 */
FSA_API void fsa_context_destroy(fsa_context *ctx);

/**
 * The compile target of a context, for example "sm_90a".
 * @param ctx a context, or NULL
 * @return owned by the context, valid until it is destroyed; "" for NULL.
 */
FSA_API const char *fsa_context_target(const fsa_context *ctx);

/**
 * The cache directory a context uses (the root, without the layout
 * subdirectory).
 * @param ctx a context, or NULL
 * @return owned by the context, valid until it is destroyed; "" when the disk
 *         cache is off or unusable, or for NULL.
 */
FSA_API const char *fsa_context_cache_dir(const fsa_context *ctx);

/** Kernel cache counters of one context, filled by fsa_context_cache_stats. */
typedef struct fsa_cache_stats {
    size_t struct_size;
    uint64_t memory_hits;     /**< kernel found in this process's table */
    uint64_t disk_hits;       /**< kernel read from the disk cache */
    uint64_t compiles;        /**< NVRTC compilations done by this context */
    double compile_ms;        /**< wall time spent in them */
    uint64_t corrupt_entries; /**< disk entries rejected (bad header, checksum, key, owner) */
    uint64_t write_failures;  /**< entries whose publication failed (kept in memory); a read-write cache
                                   directory that cannot be used at all counts 1 from creation on, and
                                   nothing is published after it */
} fsa_cache_stats;

#define FSA_CACHE_STATS_INIT FSA_INIT_(fsa_cache_stats, )

/**
 * Reads a context's cache counters.
 * @param[out] out  struct_size set by the caller (FSA_CACHE_STATS_INIT); the
 *                  fields it covers are written, struct_size itself is not.
 * @param      ctx  the context
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE.
 * Thread-safe: each counter is read atomically (the set is not a snapshot
 * while other threads load kernels).
 */
FSA_API fsa_status fsa_context_cache_stats(fsa_cache_stats *out, const fsa_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_CONTEXT_H */
