/**
 * @file fsa.h
 * fsa-jit: shape-specialized sparse selected attention, compiled at run time.
 *
 * The whole public API, for C11 and C++; no CUDA header is needed to include
 * it. Device pointers are passed as uint64_t values (CUdeviceptr), streams as
 * void * (CUstream; NULL is the legacy default stream).
 *
 * Conventions:
 * - Every function that can fail returns fsa_status (0 = FSA_STATUS_OK); on
 *   failure fsa_last_error() gives the detail for the calling thread.
 * - Outputs come first. What a function hands out through `**out` belongs to
 *   the caller, who releases it with the matching destroy function; destroy
 *   functions accept NULL. A `const char *` a function returns belongs to the
 *   library. Host structs and strings passed in are read during the call only
 *   (the library copies what it keeps); device memory named in the arguments
 *   is used by the enqueued work until it completes on the stream.
 * - Structs that can grow start with `size_t struct_size`; initialize them
 *   with their ..._INIT macro, which sets it to the size the caller was
 *   compiled with. The library accepts any struct_size from the struct's first
 *   published size up to its current one, except one that ends inside a
 *   pointer field (no version ends there): fields past the caller's
 *   struct_size read as zero, and zero means the default for every field added
 *   later; an output struct gets only the fields its struct_size covers. Other
 *   sizes give FSA_STATUS_STRUCT_SIZE. Fields are only appended, each one at
 *   or after the end of the previous version's struct.
 * - CUDA: a context on a device retains that device's primary context (the
 *   one the CUDA runtime and PyTorch use). A call that uses the driver makes it
 *   current for the duration of the call and then restores whatever context
 *   the calling thread had. Streams must belong to that primary context.
 * - Threads: a context and its plans may be used from several threads at
 *   once, except where a function says otherwise (the destroy functions).
 * - Synchronization: the launch functions (fsa_selected_attention_fwd,
 *   fsa_selected_attention_bwd, fsa_fill_u32 once its kernel is loaded) only
 *   enqueue work on the caller's stream: no host synchronization, no
 *   allocation, and they can be captured in a CUDA graph (with tuning on,
 *   fsa_context_options.tune, the first uncaptured call of a shape bucket
 *   without a tuning record also waits for its timings). Functions that
 *   compile or load kernels (fsa_plan_create, the first fsa_fill_u32 of a
 *   context, fsa_cache_verify on a device) block the calling thread and must
 *   not run during a stream capture.
 */
#ifndef FSA_H
#define FSA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FSA_VERSION_MAJOR 0
#define FSA_VERSION_MINOR 2
#define FSA_VERSION_PATCH 0
#define FSA_VERSION_STRING "0.2.0"

#if defined(_WIN32)
#define FSA_API
#elif defined(__GNUC__)
#define FSA_API __attribute__((visibility("default")))
#else
#define FSA_API
#endif

/* ..._INIT macros name struct_size and the fields whose default is not zero;
 * every other field starts at zero. C gets designated initializers (a
 * constant expression, fit for static storage); C++ gets a value-initialized
 * struct, since its designated initializers only came with C++20. */
#ifdef __cplusplus
#define FSA_INIT_FIELD_(field, value) fsa_init_.field = (value);
#define FSA_INIT_(type, fields)                 \
    ([]() -> type {                             \
        type fsa_init_ = type();                \
        fsa_init_.struct_size = sizeof(type);   \
        fields return fsa_init_;                \
    }())
#else
#define FSA_INIT_FIELD_(field, value) .field = (value),
#define FSA_INIT_(type, fields) { .struct_size = sizeof(type), fields }
#endif

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

/* One table makes the enum, the names and the messages. Append only: the
 * numeric values are part of the ABI. */
#define FSA_STATUS_MAP(X)                                                              \
    X(OK, 0, "success")                                                                \
    X(INVALID_ARGUMENT, 1, "invalid argument")                                         \
    X(NULL_POINTER, 2, "a required pointer is NULL")                                   \
    X(STRUCT_SIZE, 3, "struct_size does not match a known version of the struct")      \
    X(OUT_OF_MEMORY, 4, "host memory allocation failed")                               \
    X(NO_DRIVER, 5, "the CUDA driver (libcuda.so.1) could not be loaded")              \
    X(NO_DEVICE, 6, "no usable CUDA device")                                           \
    X(DRIVER_ERROR, 7, "a CUDA driver call failed")                                    \
    X(NO_NVRTC, 8, "NVRTC could not be loaded; only cached kernels are available")     \
    X(COMPILE_FAILED, 9, "NVRTC failed to compile a kernel")                           \
    X(JIT_DISABLED, 10, "kernel is not cached and run-time compilation is off")        \
    X(CACHE_IO, 11, "kernel cache input/output failed")                                \
    X(RENDER_FAILED, 12, "kernel template could not be rendered")                      \
    X(UNSUPPORTED, 13, "problem shape or option is not supported")                     \
    X(UNSUPPORTED_DEVICE, 14, "device is older than sm_80 or otherwise unsupported")   \
    X(MISALIGNED, 15, "pointer or stride does not meet the alignment requirement")     \
    X(WORKSPACE_TOO_SMALL, 16, "workspace is smaller than required")                   \
    X(NOT_FOUND, 17, "no such entry")                                                  \
    X(INTERNAL, 18, "internal error")

typedef enum fsa_status {
#define FSA_STATUS_ENUM_(name, value, msg) FSA_STATUS_##name = value,
    FSA_STATUS_MAP(FSA_STATUS_ENUM_)
#undef FSA_STATUS_ENUM_
    FSA_STATUS_COUNT_
} fsa_status;

/**
 * The enumerator's name of a status.
 * @param status any value, also one outside the table
 * @return "FSA_STATUS_OK", ...; "FSA_STATUS_UNKNOWN" for values outside the
 *         table. A static string; never NULL. Thread-safe.
 */
FSA_API const char *fsa_status_name(fsa_status status);

/**
 * A one-line message for a status.
 * @param status any value, also one outside the table
 * @return a static string; never NULL. Thread-safe.
 */
FSA_API const char *fsa_status_string(fsa_status status);

/** Detail of the last failure on the calling thread. Fields that do not
 *  apply are "". */
typedef struct fsa_error_info {
    fsa_status status;   /**< the status the failing call returned */
    const char *stage;   /**< what failed, for example "compile", "plan", "forward" */
    const char *kernel;  /**< readable kernel name */
    const char *key;     /**< kernel key digest (hex) */
    const char *target;  /**< compile target, for example "sm_90a" */
    const char *message; /**< what went wrong, in one sentence */
    const char *log;     /**< the NVRTC log of a failed compile */
} fsa_error_info;

/**
 * The last failure on the calling thread, as one readable text (status,
 * stage, kernel, key, target, message and log).
 * @return "" when nothing failed yet on this thread. Owned by the library,
 *         valid until the next call into the library on the same thread.
 */
FSA_API const char *fsa_last_error(void);

/**
 * The last failure on the calling thread, field by field.
 * @return never NULL; status is FSA_STATUS_OK when nothing failed yet. The
 *         struct and its strings belong to the library and stay valid until
 *         the next call into the library on the same thread.
 */
FSA_API const fsa_error_info *fsa_last_error_info(void);

/**
 * The library's version, "MAJOR.MINOR.PATCH" (FSA_VERSION_STRING of the
 * header it was built with).
 * @return a static string. Thread-safe.
 */
FSA_API const char *fsa_version_string(void);

/* The library's version as one number, major * 10000 + minor * 100 + patch
 * (0.2.0 is 200). Compare it with FSA_VERSION, the number of the header a
 * program was compiled with, to detect a different library at run time. */
#define FSA_VERSION (FSA_VERSION_MAJOR * 10000 + FSA_VERSION_MINOR * 100 + FSA_VERSION_PATCH)
FSA_API int fsa_version(void);

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
    FSA_TUNE_OFF = 1,     /**< never measure; tuning records already in the cache are used */
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
    int log;                /**< 1 = warnings to stderr; -1 = never; 0 = $FSA_LOG */
    /** Check mode: 1 = on, -1 = off, 0 = $FSA_CHECK (on for 1, on, true, yes). Each call
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
     *  wait for it). Calls of one plan are serialized while it is on. 64 bits wide so
     *  that it starts past the end of the struct's first version on every ABI. */
    int64_t check;
    /** Tuning of the plans of this context (fsa_tune_mode). With FSA_TUNE_ON or
     *  FSA_TUNE_FORCE, the first call of a plan in a shape bucket that has no tuning
     *  record times every variant on the caller's stream, with the caller's inputs,
     *  outputs and workspace, waiting for the timings (host synchronizations, at most
     *  about 300 ms per bucket), then records the fastest in the cache directory; a
     *  call on a stream being captured never measures. Every other call only reads
     *  the plan's records. Off by default so that no call synchronizes unless asked. */
    fsa_tune_mode tune;
} fsa_context_options;

#define FSA_CONTEXT_OPTIONS_INIT FSA_INIT_(fsa_context_options, )

/**
 * Creates a context: opens the device (retaining its primary context) or,
 * with FSA_DEVICE_NONE, only records the target; resolves the cache
 * directory and modes from the options and the environment; loads NVRTC when
 * it is there (without it, only cached kernels can be used). A cache
 * directory that cannot be used is not an error: kernels then stay in memory
 * (one warning when logging is on).
 * @param[out] out      the new context, or NULL on failure. The caller owns it
 *                      and releases it with fsa_context_destroy.
 * @param      options  NULL for every default; read only during the call (the
 *                      strings are copied).
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER when out is NULL;
 *         FSA_STATUS_STRUCT_SIZE; FSA_STATUS_INVALID_ARGUMENT for an unknown
 *         mode (option or environment), a negative device other than
 *         FSA_DEVICE_NONE, an offline context without a target or a target
 *         that cannot run on the device; FSA_STATUS_UNSUPPORTED_DEVICE for a
 *         device or target older than sm_80; FSA_STATUS_NO_DRIVER,
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
    uint64_t write_failures;  /**< entries that could not be published (kept in memory) */
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

/* ------------------------------------------------------------------------ */
/* Disk cache maintenance (what tools/fsa-precompile uses)                  */
/* ------------------------------------------------------------------------ */

/** One disk cache entry, as a visit callback sees it. The strings belong to
 *  the library and are valid only during the callback. */
typedef struct fsa_cache_entry_info {
    const char *path;   /**< full path */
    const char *name;   /**< readable kernel name, e.g. sel_fwd_main_bf16_d128_dv128_g4_bk64 */
    const char *target; /**< directory target, e.g. sm_90a */
    uint64_t bytes;     /**< file size */
    int64_t mtime;      /**< seconds since the epoch */
    int valid;          /**< fsa_cache_verify only: 1 when header, key and checksum are good */
    int deleted;        /**< fsa_cache_verify only: 1 when a bad entry was deleted (0 when it
                             could not be: read-only cache or directory, a directory that is
                             not empty) */
} fsa_cache_entry_info;

/** Called once per entry with the caller's `user` pointer; return non-zero to
 *  stop early. It runs on the calling thread, during the call. */
typedef int (*fsa_cache_visit_fn)(const fsa_cache_entry_info *entry, void *user);

/**
 * Visits every entry of every target under the context's cache directory.
 * @param ctx   the context
 * @param visit the callback (required)
 * @param user  passed to visit unchanged
 * @return FSA_STATUS_OK (also when visit stopped early);
 *         FSA_STATUS_NULL_POINTER; FSA_STATUS_CACHE_IO when the context has no
 *         disk cache or a directory cannot be read.
 * Reads the file system only; safe while other threads and processes use the
 * cache.
 */
FSA_API fsa_status fsa_cache_list(fsa_context *ctx, fsa_cache_visit_fn visit, void *user);

/**
 * Re-reads and re-hashes every entry; on a context with a device, also loads
 * the entries of the context's target into the driver. Bad entries are
 * deleted where the cache allows it (entry.deleted says which).
 * @param      ctx     the context
 * @param      visit   called for every entry with `valid` set; may be NULL
 * @param      user    passed to visit unchanged
 * @param[out] bad_out the number of bad entries; may be NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_CACHE_IO.
 * Blocks (file I/O, module loads); safe while other processes use the cache.
 */
FSA_API fsa_status fsa_cache_verify(fsa_context *ctx, fsa_cache_visit_fn visit, void *user,
                                    uint64_t *bad_out);

/**
 * Deletes stale temporary and lock files, then the least recently used
 * entries until the entries total at most max_bytes.
 * @param      ctx            the context
 * @param      max_bytes      the size to shrink to (0 deletes every entry)
 * @param[out] removed_out    files deleted; may be NULL
 * @param[out] bytes_left_out bytes of entries left; may be NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_CACHE_IO.
 * Safe while other processes use the cache: one that needs a deleted kernel
 * compiles it again.
 */
FSA_API fsa_status fsa_cache_prune(fsa_context *ctx, uint64_t max_bytes, uint64_t *removed_out,
                                   uint64_t *bytes_left_out);

/* ------------------------------------------------------------------------ */
/* Fill: the smallest kernel of the library, through the whole JIT path    */
/* ------------------------------------------------------------------------ */

/**
 * Sets `count` 32-bit words at `dst` to `value`, asynchronously on `stream`.
 * The first call on a context compiles or loads the kernel (blocking); later
 * calls only enqueue it.
 * @param ctx    a context with a device
 * @param dst    device address, 4-byte aligned
 * @param value  the word to write
 * @param count  number of words; 0 enqueues nothing
 * @param stream a CUstream of the context's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_NO_DEVICE for an
 *         offline context; FSA_STATUS_MISALIGNED for a NULL or unaligned dst;
 *         kernel loading and driver errors.
 * Thread-safe.
 */
FSA_API fsa_status fsa_fill_u32(fsa_context *ctx, uint64_t dst, uint32_t value, uint64_t count,
                                void *stream);

/* ------------------------------------------------------------------------ */
/* Selected attention (Native Sparse Attention's top-k block branch)        */
/* ------------------------------------------------------------------------ */

/** The kernels and launch decisions for one problem shape. Made by
 *  fsa_plan_create, released by fsa_plan_destroy. Read-only after creation:
 *  several threads may launch with one plan at the same time, each on its
 *  own stream and with its own workspace. */
typedef struct fsa_plan fsa_plan;

typedef enum fsa_dtype { FSA_DTYPE_BF16 = 0, FSA_DTYPE_F16 = 1 } fsa_dtype;

typedef enum fsa_algorithm {
    FSA_ALGORITHM_AUTO = 0, /**< per call: a tuning record, else the built-in heuristic */
    FSA_ALGORITHM_FSA = 1,  /**< KV blocks outer, query tokens inner */
    FSA_ALGORITHM_NSA = 2   /**< query tokens outer, selected blocks inner */
} fsa_algorithm;

/** The default workspace cap (a descriptor's workspace_limit of 0) is set per
 *  call: what the outputs alive during the call leave of this budget, 2848
 *  MiB (2.986 GB), and never less than FSA_WORKSPACE_DEFAULT_MIN. A forward counts o and
 *  lse (each token's Hq x Dv elements and Hq floats), a backward those and
 *  dq, dk and dv (Hq x D + Hkv x (D + Dv) elements more): the forward's
 *  workspace is released before the backward's gradients exist. So short
 *  calls run in one chunk, the fastest way, and long ones stay bounded: one
 *  forward plus backward of the standard problem (bf16, Hq 32, D 128, BK 64,
 *  top-k 16) at T = 65536 needs at most 2848 MiB (2.986 GB) of device memory
 *  beyond its inputs, outputs and gradients included, for every group size
 *  (the budget is the least that gives its backward at G = 1 chunks of two
 *  KV heads instead of one). */
#define FSA_WORKSPACE_DEFAULT_BUDGET ((uint64_t)89 << 25)
/** The default workspace cap's floor: 256 MiB. */
#define FSA_WORKSPACE_DEFAULT_MIN ((uint64_t)256 << 20)
/** workspace_limit for no cap: every call runs in one chunk (as long as the
 *  kernels can index it), with the largest and fastest workspace. */
#define FSA_WORKSPACE_UNLIMITED (~(uint64_t)0)

/** The problem shape of a plan. */
typedef struct fsa_selected_attention_desc {
    size_t struct_size;
    fsa_dtype dtype;          /**< of q, k, v, o (and dout, dq, dk, dv); default bf16 */
    int head_dim;             /**< D (Dk) of q and k (and dq, dk): multiple of 16, 16..256; default 128 */
    int num_q_heads;          /**< Hq (required) */
    int num_kv_heads;         /**< Hkv (required); Hq % Hkv == 0, group G = Hq / Hkv */
    int block_size;           /**< keys per selectable block: 16, 32, 64 (default), 128, 256 */
    int top_k;                /**< selected blocks per query token: 1..64; default 16 */
    float scale;              /**< softmax scale; 0 = 1/sqrt(head_dim) */
    fsa_algorithm algorithm;  /**< default AUTO */
    uint64_t workspace_limit; /**< cap on one call's workspace, forward and backward, in bytes:
                                   0 = the default (FSA_WORKSPACE_DEFAULT_BUDGET),
                                   FSA_WORKSPACE_UNLIMITED = no cap. Larger problems run in chunks of KV heads, then of
                                   tokens, that fit. */
    int backward;             /**< 1 = also prepare the backward kernels */
    /** Dv, the head dim of v and o (and dout, dv): a multiple of 16, 16..256;
     *  0 = head_dim. When head_dim + value_dim is over 320, a plan with
     *  backward needs both to be multiples of 32 (its main kernel then runs on
     *  two halves of the columns). (NSA uses Dk 192 with Dv 128.)
     *  64 bits wide so that it starts past the end of the struct's first
     *  version on every ABI. */
    int64_t value_dim;
} fsa_selected_attention_desc;

#define FSA_SELECTED_ATTENTION_DESC_INIT                                                            \
    FSA_INIT_(fsa_selected_attention_desc,                                                          \
              FSA_INIT_FIELD_(head_dim, 128) FSA_INIT_FIELD_(block_size, 64) FSA_INIT_FIELD_(top_k, 16))

/**
 * Creates a plan: checks the descriptor, decides which paths fit the target
 * and compiles or loads every kernel the descriptor can need (from the
 * process's table, the disk cache or NVRTC). With an offline context
 * (FSA_DEVICE_NONE) it only fills the cache; such a plan answers the queries
 * below but cannot run.
 * @param[out] out  the new plan, or NULL on failure. The caller owns it and
 *                  releases it with fsa_plan_destroy, before the context.
 * @param      ctx  the context; it must outlive the plan
 * @param      desc the shape; read only during the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT or FSA_STATUS_UNSUPPORTED for a shape
 *         the library does not take (the message says which field and why);
 *         compile, cache and driver errors (FSA_STATUS_JIT_DISABLED,
 *         FSA_STATUS_NO_NVRTC, FSA_STATUS_COMPILE_FAILED, ...).
 * Thread-safe (one kernel is compiled once however many threads ask for it).
 * Blocks: a compile takes seconds; do not call during a stream capture.
 */
FSA_API fsa_status fsa_plan_create(fsa_plan **out, fsa_context *ctx,
                                   const fsa_selected_attention_desc *desc);

/**
 * Releases a plan.
 * @param plan a plan from fsa_plan_create, or NULL (nothing happens). No
 *             call with it may be running; work it enqueued may still be in
 *             flight (the kernels stay loaded).
 */
FSA_API void fsa_plan_destroy(fsa_plan *plan);

/**
 * Bytes of device workspace a forward call needs: at most the plan's cap
 * (desc.workspace_limit; 0 = the default, FSA_WORKSPACE_DEFAULT_BUDGET), the problem
 * running in chunks of KV heads (a divisor of Hkv), then of tokens, that fit,
 * unless even a chunk of one head and one token needs more (then that
 * chunk's size). FSA_WORKSPACE_UNLIMITED: the one-chunk size.
 * With tuning on and no tuning record for the bucket yet, it covers every
 * variant the call may measure (a smaller workspace only means the call does
 * not measure).
 * @param[out] bytes_out    the size; 0 when the call needs no workspace (no
 *                          tokens, or the NSA path)
 * @param      plan         the plan
 * @param      total_tokens T, the packed tokens of the call
 * @param      batch        sequences in the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         for a token count or batch the forward would refuse;
 *         FSA_STATUS_UNSUPPORTED when the problem is too large to index.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_plan_workspace_size(size_t *bytes_out, const fsa_plan *plan,
                                           int64_t total_tokens, int batch);

/**
 * The path a forward call with this many tokens takes, and why (the bucket's
 * tuning record, else the heuristic; fsa_plan_choice_get tells which).
 * @param[out] algorithm_out FSA_ALGORITHM_FSA or FSA_ALGORITHM_NSA
 * @param[out] reason_out    a static sentence; may be NULL
 * @param      plan          the plan
 * @param      total_tokens  T, 0 to INT32_MAX - 1
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         for a token count out of range.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_plan_algorithm(fsa_algorithm *algorithm_out, const char **reason_out,
                                      const fsa_plan *plan, int64_t total_tokens);

/** Who decided a call's variant. */
typedef enum fsa_choice_source {
    FSA_CHOICE_FORCED = 0,    /**< the descriptor's algorithm */
    FSA_CHOICE_ONLY_ONE = 1,  /**< only one variant fits the shape and target */
    FSA_CHOICE_HEURISTIC = 2, /**< the built-in rule, without measuring */
    FSA_CHOICE_MEASURED = 3   /**< a tuning record: measured on this GPU model, in this process or earlier */
} fsa_choice_source;

typedef enum fsa_operation { FSA_OPERATION_FORWARD = 0, FSA_OPERATION_BACKWARD = 1 } fsa_operation;

/** What a call of a given size takes, filled by fsa_plan_choice. */
typedef struct fsa_plan_choice {
    size_t struct_size;
    fsa_algorithm algorithm;   /**< loop order (backward: the order dq is computed in) */
    fsa_choice_source source;
    const char *reason;        /**< a static sentence */
    const char *variant;       /**< the variant's name, e.g. "nsa"; static */
    int64_t bucket_tokens;     /**< the tuning bucket: the token count rounded up to a power of two */
    int candidates;            /**< variants the chooser could take for this shape */
    int will_measure;          /**< 1 when the next call of this size may measure (tuning on, no record yet) */
    int splits;                /**< paged-cache plans: shares of a one-tile sequence; 0 for other plans */
} fsa_plan_choice;

#define FSA_PLAN_CHOICE_INIT FSA_INIT_(fsa_plan_choice, )

/**
 * The variant a call of an operation with this many tokens takes, and why.
 * @param[out] out          struct_size set by the caller (FSA_PLAN_CHOICE_INIT)
 * @param      plan         the plan (created with backward = 1 for FSA_OPERATION_BACKWARD)
 * @param      operation    FSA_OPERATION_FORWARD or FSA_OPERATION_BACKWARD
 * @param      total_tokens T, 0 to INT32_MAX - 1
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT for an unknown operation, a backward
 *         query of a plan without backward, or a token count out of range.
 * Host-only and thread-safe; never measures (the answer may change from
 * heuristic to measured once a tuning call of the bucket has run).
 */
FSA_API fsa_status fsa_plan_choice_get(fsa_plan_choice *out, const fsa_plan *plan, fsa_operation operation,
                                       int64_t total_tokens);

/**
 * Measures the variants of an operation for calls of `total_tokens` tokens
 * and records the winner, as the first such call would with tuning on, on
 * scratch inputs the library allocates (one sequence, each token selecting
 * its own and the preceding blocks) and frees before returning. For
 * pre-tuning a cache (fsa-precompile --tune); a bucket that already has a
 * record is left alone.
 * @param[out] measured_out 1 when it measured; may be NULL
 * @param      plan         a plan of a context with a device and tuning on
 *                          (FSA_TUNE_ON or FSA_TUNE_FORCE), created with
 *                          backward = 1 for FSA_OPERATION_BACKWARD
 * @param      operation    FSA_OPERATION_FORWARD or FSA_OPERATION_BACKWARD
 * @param      total_tokens T, 1 to INT32_MAX - 1
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         (tuning off, bad operation or count); FSA_STATUS_NO_DEVICE for an
 *         offline plan; driver errors (also when device memory runs out).
 * Blocks (allocations, host synchronizations); not during a stream capture.
 */
FSA_API fsa_status fsa_plan_tune(int *measured_out, const fsa_plan *plan, fsa_operation operation,
                                 int64_t total_tokens);

/** A device tensor seen through two strides: the row of token t and head h
 *  starts at element `ptr + t * token_stride + h * head_stride` and is
 *  contiguous. Strides are in elements, not negative; the stride of a
 *  dimension of size 1 is ignored. */
typedef struct fsa_tensor {
    uint64_t ptr;         /**< device address (CUdeviceptr) */
    int64_t token_stride; /**< elements from one token to the next */
    int64_t head_stride;  /**< elements from one head to the next */
} fsa_tensor;

/** Arguments of fsa_selected_attention_fwd.
 *
 * q, k, v and o are dtype tensors: q and k rows have D (head_dim) elements,
 * v and o rows Dv (value_dim) elements; q and o have Hq heads, k and v Hkv.
 * Their pointers must be 16-byte aligned and their strides multiples of 8
 * elements.
 * topk holds int32 block indices, K per row: slot s of token t and KV head h
 * is element `topk.ptr + t * topk.token_stride + h * topk.head_stride + s`, so
 * [Hkv, T, K] and [T, Hkv, K] both work without a copy; 4-byte aligned.
 * cu_seqlens: int32 [batch + 1] on the device, starts of the packed sequences,
 * cu_seqlens[0] = 0 and cu_seqlens[batch] = total_tokens. */
typedef struct fsa_fwd_args {
    size_t struct_size;
    int64_t total_tokens; /**< T (host), 0 to INT32_MAX - 1 */
    int batch;            /**< number of sequences (host), 1..T */
    int max_seqlen;       /**< longest sequence (host) or 0 when unknown; only checked against T */
    fsa_tensor q;         /**< [T, Hq, D], read */
    fsa_tensor k;         /**< [T, Hkv, D], read */
    fsa_tensor v;         /**< [T, Hkv, Dv], read */
    fsa_tensor o;         /**< [T, Hq, Dv], written */
    fsa_tensor topk;      /**< int32 [T, Hkv, K] through its strides, read */
    uint64_t cu_seqlens;  /**< int32 [batch + 1], read */
    uint64_t lse;         /**< optional float [Hq, T] (natural log), written; 0 = not wanted */
    uint64_t workspace;   /**< 256-byte aligned, fsa_plan_workspace_size bytes */
    size_t workspace_bytes;
} fsa_fwd_args;

#define FSA_FWD_ARGS_INIT FSA_INIT_(fsa_fwd_args, )

/**
 * Enqueues the forward on `stream` and returns: no allocation, no host
 * synchronization (except a tuning call: fsa_context_options.tune); can be
 * captured in a CUDA graph. Every argument is checked
 * on the host before anything is enqueued (the device data, such as
 * cu_seqlens and the top-k indices, is not read on the host).
 * @param plan   the plan
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER for a NULL plan, args or
 *         required tensor; FSA_STATUS_STRUCT_SIZE; FSA_STATUS_INVALID_ARGUMENT
 *         for counts out of range or negative strides, or in check mode
 *         (fsa_context_options.check) for bad cu_seqlens or top-k rows;
 *         FSA_STATUS_MISALIGNED; FSA_STATUS_WORKSPACE_TOO_SMALL;
 *         FSA_STATUS_UNSUPPORTED for a problem too large to index;
 *         FSA_STATUS_NO_DEVICE for an offline plan; FSA_STATUS_DRIVER_ERROR.
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_selected_attention_fwd(const fsa_plan *plan, const fsa_fwd_args *args,
                                              void *stream);

/** Arguments of fsa_selected_attention_bwd: the gradients of o with respect
 * to q, k and v. Inputs as in the forward plus o, lse (the forward's,
 * required) and dout; outputs dq (like q), dk and dv (like k and v; summed
 * over the G query heads of each group), written in the input dtype. Every
 * dtype tensor follows the forward's rules (16-byte aligned, strides
 * multiples of 8 elements). */
typedef struct fsa_bwd_args {
    size_t struct_size;
    int64_t total_tokens; /**< T (host), 0 to INT32_MAX - 1 */
    int batch;            /**< number of sequences (host), 1..T */
    int max_seqlen;       /**< longest sequence (host) or 0 when unknown; only checked against T */
    fsa_tensor q;         /**< [T, Hq, D], read */
    fsa_tensor k;         /**< [T, Hkv, D], read */
    fsa_tensor v;         /**< [T, Hkv, Dv], read */
    fsa_tensor o;         /**< [T, Hq, Dv], the forward's output, read */
    fsa_tensor dout;      /**< [T, Hq, Dv], gradient of o, read */
    fsa_tensor dq;        /**< [T, Hq, D], written */
    fsa_tensor dk;        /**< [T, Hkv, D], written */
    fsa_tensor dv;        /**< [T, Hkv, Dv], written */
    fsa_tensor topk;      /**< int32 [T, Hkv, K] through its strides, read */
    uint64_t cu_seqlens;  /**< int32 [batch + 1], read */
    uint64_t lse;         /**< float [Hq, T], natural log, as the forward wrote it; required */
    uint64_t workspace;   /**< 256-byte aligned, fsa_plan_workspace_size_bwd bytes */
    size_t workspace_bytes;
} fsa_bwd_args;

#define FSA_BWD_ARGS_INIT FSA_INIT_(fsa_bwd_args, )

/**
 * Bytes of device workspace a backward call needs: at most the plan's cap,
 * chunked as for fsa_plan_workspace_size. The smallest chunk, one KV head
 * and one token, holds that head's fp32 dK/dV over every token
 * (T * (D + Dv) * 4 bytes): a cap below it gets that chunk's size.
 * @param[out] bytes_out    the size; 0 when there are no tokens
 * @param      plan         a plan created with desc.backward = 1
 * @param      total_tokens T
 * @param      batch        sequences in the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         for a plan without backward, or a token count or batch the
 *         backward would refuse; FSA_STATUS_UNSUPPORTED when the problem is
 *         too large to index.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_plan_workspace_size_bwd(size_t *bytes_out, const fsa_plan *plan, int64_t total_tokens,
                                               int batch);

/**
 * The path a backward call with this many tokens takes, and why: the order in
 * which dq is computed (FSA: per (token, slot) partials summed per token;
 * NSA: one CTA per token walking its selected blocks). dk and dv always go
 * KV-block outer.
 * @param[out] algorithm_out FSA_ALGORITHM_FSA or FSA_ALGORITHM_NSA
 * @param[out] reason_out    a static sentence; may be NULL
 * @param      plan          a plan created with desc.backward = 1
 * @param      total_tokens  T, 0 to INT32_MAX - 1
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         when the plan has no backward or the token count is out of range.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_plan_algorithm_bwd(fsa_algorithm *algorithm_out, const char **reason_out,
                                          const fsa_plan *plan, int64_t total_tokens);

/**
 * Enqueues the backward on `stream`: no allocation, no host synchronization;
 * can be captured in a CUDA graph. Accumulates in fp32. Deterministic: the
 * same inputs give the same bits.
 * @param plan   a plan created with desc.backward = 1
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return as fsa_selected_attention_fwd, and FSA_STATUS_INVALID_ARGUMENT for
 *         a plan without backward.
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_selected_attention_bwd(const fsa_plan *plan, const fsa_bwd_args *args, void *stream);

/* ------------------------------------------------------------------------ */
/* Selected attention over a paged KV cache (serving)                       */
/* ------------------------------------------------------------------------ */

/* New query tokens (decode: 1 per sequence; speculative decoding: a few;
 * chunked prefill: thousands) attend to the selected blocks of their
 * sequence's cached keys, held in pages. One call per layer for a batch that
 * mixes these; no allocation, no host synchronization, capturable in a CUDA
 * graph, with the page table, cached lengths and top-k rows read on the
 * device at every call (update them in place between graph replays).
 *
 * Semantics. Sequence b has q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b]
 * new tokens and L_b = seqused_k[b] cached keys (new tokens included: the
 * caller wrote them into the cache first). Its new token i sits at position
 * p = L_b - q_len_b + i. Slot s of the token's top-k row (logical block
 * numbers of the sequence) is valid when s < topk_length[token] (when given),
 * 0 <= idx <= p / block_size, and no earlier slot of the row holds the same
 * block. The token sees key j when j lies in a valid block and j <= p; key j
 * of the sequence is row j % page_size of page block_table[b][j / page_size].
 * o = softmax(scale * q k^T) v over the visible keys (fp32 accumulation),
 * lse = the natural log of the softmax denominator; no visible key: o = 0,
 * lse = -inf.
 *
 * Bounds: kernels clamp or skip every index read from device memory. A page
 * number outside [0, num_pages), a page-table slot at or past
 * max_pages_per_seq, or a position < 0 (seqused_k < q_len) makes the keys or
 * tokens concerned invisible; malformed cu_seqlens_q is clamped to
 * [0, num_query_tokens]. Nothing out of bounds is read or written.
 *
 * Batch invariance: a sequence whose new tokens fit one tile (see
 * fsa_kvcache_plan_info) splits its selected blocks into `splits` contiguous
 * shares, each computed the same way whichever of the sequence's CTAs runs it
 * (the host gives a sequence fewer CTAs at larger batches), and merged by lse
 * in share order; a longer one never splits. The rule reads only the sequence's own query
 * length and plan constants (the split count is the plan's: forced, its
 * tuning record or the heuristic, never the batch's), so a sequence's o and
 * lse are bitwise the same alone or in any batch with the same plan state. */

typedef struct fsa_kvcache_plan fsa_kvcache_plan;

/** The problem shape of a paged-cache plan. */
typedef struct fsa_kvcache_desc {
    size_t struct_size;
    fsa_dtype dtype;          /**< of q, the caches and o; default bf16 */
    int head_dim;             /**< D (Dk) of q and the key cache: multiple of 16, 16..256; default 128 */
    int num_q_heads;          /**< Hq (required) */
    int num_kv_heads;         /**< Hkv (required); group G = Hq / Hkv, 1..64 */
    int block_size;           /**< keys per selectable block: 16, 32, 64 (default), 128, 256 */
    int top_k;                /**< slots per top-k row: 1..64; default 16 */
    int page_size;            /**< tokens per cache page: 1, 16, 32, 64 (default), 128, 256 */
    int max_batch;            /**< most sequences per call (required) */
    int64_t max_query_tokens; /**< most new tokens per call, all sequences together (required), up to INT32_MAX */
    float scale;              /**< softmax scale; 0 = 1/sqrt(head_dim) */
    int splits;               /**< shares of a one-tile sequence, 1..64; 0 = chosen (fsa_kvcache_plan_choice_get):
                                   a tuning record, else the heuristic (ceil(top_k / 4), at most 16, or
                                   more shares of two blocks for a small selection: docs/kvcache.md) */
    int value_dim;            /**< Dv of the value cache and o: multiple of 16, 16..256; 0 = head_dim */
} fsa_kvcache_desc;

#define FSA_KVCACHE_DESC_INIT                                                                          \
    FSA_INIT_(fsa_kvcache_desc, FSA_INIT_FIELD_(head_dim, 128) FSA_INIT_FIELD_(block_size, 64)          \
                                    FSA_INIT_FIELD_(top_k, 16) FSA_INIT_FIELD_(page_size, 64))

/**
 * Creates a paged-cache plan: checks the descriptor, compiles or loads its
 * kernels (blocking; not during a stream capture).
 * @param[out] out  the new plan, or NULL on failure; the caller owns it
 *                  (fsa_kvcache_plan_destroy). It keeps using `ctx`, which
 *                  must outlive it.
 * @param      ctx  a context; an offline one only fills the cache
 * @param      desc read during the call only
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT or FSA_STATUS_UNSUPPORTED for a shape
 *         outside the ranges above; the JIT statuses of fsa_plan_create.
 */
FSA_API fsa_status fsa_kvcache_plan_create(fsa_kvcache_plan **out, fsa_context *ctx,
                                           const fsa_kvcache_desc *desc);
/** Destroys a plan; NULL is fine. No call of it may be in flight on the host. */
FSA_API void fsa_kvcache_plan_destroy(fsa_kvcache_plan *plan);

/**
 * Bytes of device workspace every call of the plan needs (sized for
 * max_batch and the largest split count the plan may choose; 0 when no
 * sequence can split). Zero it once when allocating it (cuMemsetD8,
 * torch.zeros): the last share of a split sequence to finish is found
 * through counters at its start, which every call leaves zero again.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_kvcache_plan_workspace_size(size_t *bytes_out, const fsa_kvcache_plan *plan);

/**
 * The tiling the plan uses: query tokens per tile (a sequence with at most
 * this many new tokens splits) and the number of shares it splits into.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_kvcache_plan_info(int *tile_tokens_out, int *splits_out, const fsa_kvcache_plan *plan);

/**
 * The split count the plan's calls take, and why: forced by the descriptor
 * (splits > 0), the plan's tuning record (measured), or the heuristic
 * (ceil(top_k / 4), at most 16; more shares of two blocks each, at most 8,
 * where one token's selected K/V is small: docs/kvcache.md). algorithm is
 * FSA_ALGORITHM_AUTO (one loop order), bucket_tokens 0 (one record per
 * plan), variant e.g. "kvc.s4" (valid while the plan lives), splits the
 * share count.
 * @param[out] out  struct_size set by the caller (FSA_PLAN_CHOICE_INIT)
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE.
 * Host-only and thread-safe; never measures.
 */
FSA_API fsa_status fsa_kvcache_plan_choice_get(fsa_plan_choice *out, const fsa_kvcache_plan *plan);

/**
 * Measures the plan's split counts now, as its first call with tuning on
 * would: each candidate on scratch decode batches (one sequence, and about
 * four (sequence, KV head) pairs per SM, up to max_batch) the library
 * allocates and frees, on `stream`, within about 300 ms; the winner (the
 * smallest geometric mean of the two times) becomes the plan's tuning record
 * in the cache directory. A plan that has a record, or one candidate, or a
 * stream being captured, is left alone (measured_out 0).
 * @param[out] measured_out 1 when it measured; may be NULL
 * @param      plan         a plan of a context with a device and tuning on
 * @param      stream       a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         (tuning off); FSA_STATUS_NO_DEVICE; driver errors.
 * Blocks (allocation, host synchronization).
 */
FSA_API fsa_status fsa_kvcache_plan_tune(int *measured_out, const fsa_kvcache_plan *plan, void *stream);

/** Arguments of fsa_kvcache_attention.
 *
 * q: [Tq, Hq, D] and o: [Tq, Hq, Dv] dtype tensors (D = head_dim, Dv =
 * value_dim), 16-byte aligned, strides multiples of 8.
 * k_cache and v_cache: pages [num_pages, page_size, Hkv, D] and
 * [num_pages, page_size, Hkv, Dv], each by its own strides: the row of token
 * slot s of page n and KV head h starts at element `ptr + n * page_stride +
 * s * token_stride + h * head_stride` (so [num_pages, Hkv, page_size, D]
 * works too); 16-byte aligned, strides multiples of 8.
 * block_table: int32, entry (b, i) at `block_table + b * block_table_stride
 * + i`, i < max_pages_per_seq. cu_seqlens_q: int32 [batch + 1]; seqused_k:
 * int32 [batch]. topk: int32 logical block numbers, slot s of token t and KV
 * head h at `topk.ptr + t * topk.token_stride + h * topk.head_stride + s`
 * ([Hkv, Tq, K] or [Tq, Hkv, K]; head stride 0 shares one selection across
 * the KV heads); -1 = unused. topk_length: optional int32 [Tq]. lse: optional
 * float [Hq, Tq]. All device data is read on the device at every call
 * (update it in place between graph replays) and stays the caller's. */
typedef struct fsa_kvcache_args {
    size_t struct_size;
    int64_t num_query_tokens;   /**< Tq (host), 0..max_query_tokens */
    int batch;                  /**< B (host), 0..max_batch */
    fsa_tensor q;               /**< [Tq, Hq, D], read */
    uint64_t cu_seqlens_q;      /**< int32 [batch + 1], read */
    fsa_tensor k_cache;         /**< token and head strides of the key pages, read */
    int64_t k_page_stride;      /**< elements from one key page to the next */
    fsa_tensor v_cache;         /**< token and head strides of the value pages, read */
    int64_t v_page_stride;      /**< elements from one value page to the next */
    int64_t num_pages;          /**< pages in each cache; other page numbers are skipped */
    uint64_t block_table;       /**< int32 [batch, max_pages_per_seq] by rows, read */
    int64_t block_table_stride; /**< elements from one sequence's row to the next */
    int max_pages_per_seq;      /**< entries per row; slots past it are skipped */
    uint64_t seqused_k;         /**< int32 [batch]: cached keys, new tokens included, read */
    fsa_tensor topk;            /**< int32 top-k rows through their strides, read */
    uint64_t topk_length;       /**< optional int32 [Tq], read; 0 = every row uses all K slots */
    fsa_tensor o;               /**< [Tq, Hq, Dv], written */
    uint64_t lse;               /**< optional float [Hq, Tq] (natural log), written; 0 = not wanted */
    uint64_t workspace;         /**< 256-byte aligned, fsa_kvcache_plan_workspace_size bytes, filled with
                                     zeros once before its first call: it starts with counters that every
                                     call leaves zero (one workspace per stream at a time) */
    size_t workspace_bytes;
} fsa_kvcache_args;

#define FSA_KVCACHE_ARGS_INIT FSA_INIT_(fsa_kvcache_args, )

/**
 * Enqueues the attention on `stream` and returns: no allocation, no host
 * synchronization; can be captured in a CUDA graph. Host-checkable problems
 * are refused before anything is enqueued. Bad device metadata is clamped or
 * skipped on the device; in check mode (fsa_context_options.check) a small
 * kernel validates it first and the call waits for the verdict (docs/kvcache.md).
 * @param plan   the plan
 * @param args   read during the call only
 * @param stream a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT for counts beyond the plan or negative
 *         strides, or in check mode for bad device metadata;
 *         FSA_STATUS_MISALIGNED; FSA_STATUS_WORKSPACE_TOO_SMALL;
 *         FSA_STATUS_NO_DEVICE for an offline plan; FSA_STATUS_DRIVER_ERROR.
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_kvcache_attention(const fsa_kvcache_plan *plan, const fsa_kvcache_args *args,
                                         void *stream);

/* ------------------------------------------------------------------------ */
/* Compressed attention and block selection (NSA's compression branch)     */
/* ------------------------------------------------------------------------ */

/** The kernels of compressed attention (and of the block selection it
 *  drives) for one problem shape. Made by fsa_compressed_plan_create,
 *  released by fsa_compressed_plan_destroy; read-only after creation, so
 *  several threads may launch with one plan at once. */
typedef struct fsa_compressed_plan fsa_compressed_plan;

/** The problem shape of a compressed-attention plan.
 *
 * The caller compresses keys and values with kernel size l and stride d per
 * sequence: compressed token j of a sequence covers its positions
 * j*d .. j*d + l - 1 and is visible to the query at position t when
 * j*d + l - 1 <= t. With top_k > 0 the forward also selects, per KV head and
 * query token, the top_k blocks of block_size positions for the selected
 * attention: block c scores the sum, over the G query heads of the group and
 * the compressed tokens overlapping positions c*BK .. c*BK + BK - 1 (each
 * once), of the compressed attention probabilities; the first init_blocks
 * blocks and the local_blocks blocks ending at the token's own block are
 * always taken (before any scored block; the lower blocks first when they
 * are more than top_k); equal scores go to the lower block. */
typedef struct fsa_compressed_attention_desc {
    size_t struct_size;
    fsa_dtype dtype;  /**< of q, k, v, o; default bf16 */
    int head_dim;     /**< Dk of q and k: multiple of 16, 16..256; default 128 */
    int value_dim;    /**< Dv of v and o: multiple of 16, 16..256; 0 = head_dim */
    int num_q_heads;  /**< Hq (required) */
    int num_kv_heads; /**< Hkv (required), at most 65535; group G = Hq / Hkv, 1..16 */
    int kernel_size;  /**< l, 1..4096; with top_k > 0 also (l - 1) / d <= 64; default 32 */
    int stride;       /**< d, 1..l; default 16 */
    float scale;      /**< softmax scale; 0 = 1/sqrt(head_dim) */
    int top_k;        /**< selected blocks per (KV head, token), 1..64; 0 = no selection; default 16 */
    int block_size;   /**< BK of the selection: a multiple of stride with BK / stride a power of
                           two up to 64; default 64 */
    int init_blocks;  /**< blocks from the sequence start always selected; default 1 */
    int local_blocks; /**< blocks ending at the token's own block always selected; default 2 */
    int backward;     /**< 1 = also prepare the backward kernels */
} fsa_compressed_attention_desc;

#define FSA_COMPRESSED_ATTENTION_DESC_INIT                                                              \
    FSA_INIT_(fsa_compressed_attention_desc,                                                            \
              FSA_INIT_FIELD_(head_dim, 128) FSA_INIT_FIELD_(kernel_size, 32) FSA_INIT_FIELD_(stride, 16) \
                  FSA_INIT_FIELD_(top_k, 16) FSA_INIT_FIELD_(block_size, 64) FSA_INIT_FIELD_(init_blocks, 1) \
                      FSA_INIT_FIELD_(local_blocks, 2))

/**
 * Creates a compressed-attention plan: checks the descriptor and compiles or
 * loads its kernels (the forward, and the selection when top_k > 0). With an
 * offline context it only fills the cache.
 * @param[out] out  the new plan, or NULL on failure; the caller owns it and
 *                  releases it with fsa_compressed_plan_destroy, before the
 *                  context.
 * @param      ctx  the context; it must outlive the plan
 * @param      desc the shape; read only during the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT or FSA_STATUS_UNSUPPORTED for a shape
 *         the library does not take (the message says which field and why);
 *         compile, cache and driver errors.
 * Thread-safe. Blocks while compiling; do not call during a stream capture.
 */
FSA_API fsa_status fsa_compressed_plan_create(fsa_compressed_plan **out, fsa_context *ctx,
                                              const fsa_compressed_attention_desc *desc);

/**
 * Releases a compressed-attention plan.
 * @param plan a plan, or NULL (nothing happens). No call with it may be
 *             running; work it enqueued may still be in flight.
 */
FSA_API void fsa_compressed_plan_destroy(fsa_compressed_plan *plan);

/**
 * Bytes of device workspace a forward call needs. The forward runs without
 * workspace today (the result is 0); callers that pass what this returns
 * keep working when a later version needs some.
 * @param[out] bytes_out    the size
 * @param      plan         the plan
 * @param      total_tokens T
 * @param      batch        sequences in the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         for a token count or batch the forward would refuse;
 *         FSA_STATUS_UNSUPPORTED when they need too many query tiles.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_compressed_plan_workspace_size(size_t *bytes_out, const fsa_compressed_plan *plan,
                                                      int64_t total_tokens, int batch);

/** Arguments of fsa_compressed_attention_fwd.
 *
 * Dtype tensors (q, k, v, o) follow fsa_fwd_args's rules: 16-byte aligned,
 * strides multiples of 8 elements. cu_seqlens and cu_seqlens_c are int32
 * [batch + 1] on the device: the packed query tokens and the packed
 * compressed tokens of each sequence (cu_seqlens_c[batch] = Tc), each
 * sequence of n positions with max(0, (n - l) / d + 1) compressed tokens.
 * The kernels clamp every bound, so malformed offsets cannot make them
 * access memory outside the tensors, but they give a silent wrong answer
 * (tokens no tile owns keep their old o and lse); in check mode
 * (fsa_context_options.check) a small kernel validates both offsets and the
 * counts first, and the call waits for the verdict (docs/semantics.md). */
typedef struct fsa_compressed_fwd_args {
    size_t struct_size;
    int64_t total_tokens;     /**< T (host), 0 to INT32_MAX - 1 */
    int64_t total_compressed; /**< Tc (host), 0 to INT32_MAX - 1 */
    int batch;                /**< number of sequences (host), 1..T */
    fsa_tensor q;             /**< [T, Hq, Dk], read */
    fsa_tensor k;             /**< [Tc, Hkv, Dk], read */
    fsa_tensor v;             /**< [Tc, Hkv, Dv], read */
    fsa_tensor o;             /**< [T, Hq, Dv], written; 0 for a query that sees no compressed token */
    uint64_t lse;             /**< float [Hq, T], natural log, written (-inf: nothing visible); required */
    uint64_t cu_seqlens;      /**< int32 [batch + 1], read */
    uint64_t cu_seqlens_c;    /**< int32 [batch + 1], read */
    fsa_tensor topk;          /**< int32 [T, Hkv, K] through its strides (as fsa_fwd_args.topk), written
                                   when the plan selects; each row ascending, -1 after the selected
                                   blocks; 4-byte aligned. ptr 0 = not wanted. */
    uint64_t workspace;       /**< 256-byte aligned, fsa_compressed_plan_workspace_size bytes (0 today) */
    size_t workspace_bytes;
} fsa_compressed_fwd_args;

#define FSA_COMPRESSED_FWD_ARGS_INIT FSA_INIT_(fsa_compressed_fwd_args, )

/**
 * Enqueues the compressed-attention forward (o and lse) and, when the plan
 * selects and topk.ptr is set, the block selection (which reads the lse just
 * written) on `stream`: no allocation, no host synchronization; can be
 * captured in a CUDA graph. Two kernels; no [T, Tc] matrix is stored.
 * @param plan   the plan
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER for a NULL plan, args or
 *         required tensor; FSA_STATUS_STRUCT_SIZE; FSA_STATUS_INVALID_ARGUMENT
 *         for counts out of range, negative strides or a topk without
 *         selection in the plan, or in check mode for bad offsets;
 *         FSA_STATUS_MISALIGNED; FSA_STATUS_UNSUPPORTED for a problem that
 *         needs too many query tiles;
 *         FSA_STATUS_NO_DEVICE for an offline plan; FSA_STATUS_DRIVER_ERROR.
 * Thread-safe for calls with different outputs.
 */
FSA_API fsa_status fsa_compressed_attention_fwd(const fsa_compressed_plan *plan, const fsa_compressed_fwd_args *args,
                                                void *stream);

/** Arguments of fsa_compressed_attention_bwd: the gradients of o with
 * respect to q and the compressed k and v (the selection has none). Inputs as
 * in the forward plus o and lse (the forward's) and dout; outputs dq (like
 * q), dk and dv (like k and v, summed over the G query heads of each group),
 * written in the input dtype. Every dtype tensor follows the forward's
 * rules. */
typedef struct fsa_compressed_bwd_args {
    size_t struct_size;
    int64_t total_tokens;     /**< T (host), 0 to INT32_MAX - 1 */
    int64_t total_compressed; /**< Tc (host), 0 to INT32_MAX - 1 */
    int batch;                /**< number of sequences (host), 1..T */
    fsa_tensor q;             /**< [T, Hq, Dk], read */
    fsa_tensor k;             /**< [Tc, Hkv, Dk], read */
    fsa_tensor v;             /**< [Tc, Hkv, Dv], read */
    fsa_tensor o;             /**< [T, Hq, Dv], the forward's output, read */
    fsa_tensor dout;          /**< [T, Hq, Dv], gradient of o, read */
    fsa_tensor dq;            /**< [T, Hq, Dk], written */
    fsa_tensor dk;            /**< [Tc, Hkv, Dk], written (0 for a token no query sees) */
    fsa_tensor dv;            /**< [Tc, Hkv, Dv], written */
    uint64_t lse;             /**< float [Hq, T], natural log, as the forward wrote it; read */
    uint64_t cu_seqlens;      /**< int32 [batch + 1], read */
    uint64_t cu_seqlens_c;    /**< int32 [batch + 1], read */
    uint64_t workspace;       /**< 256-byte aligned, fsa_compressed_plan_workspace_size_bwd bytes */
    size_t workspace_bytes;
} fsa_compressed_bwd_args;

#define FSA_COMPRESSED_BWD_ARGS_INIT FSA_INIT_(fsa_compressed_bwd_args, )

/**
 * Bytes of device workspace a backward call needs: 4 * Hq * T rounded up to
 * 256, plus, with the warpgroup backward (sm_90a), room for a split dK/dV
 * walk's fp32 sums (2 * SMs * 64 * (Dk + Dv) * 4 bytes; docs/semantics.md).
 * @param[out] bytes_out    the size; 0 when there are no tokens
 * @param      plan         a plan created with desc.backward = 1
 * @param      total_tokens T
 * @param      batch        sequences in the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         for a plan without backward, or a token count or batch the
 *         backward would refuse.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_compressed_plan_workspace_size_bwd(size_t *bytes_out, const fsa_compressed_plan *plan,
                                                          int64_t total_tokens, int batch);

/**
 * Enqueues the compressed-attention backward on `stream` (two kernels: dq,
 * then dk and dv): no allocation, no host synchronization; can be captured
 * in a CUDA graph. Accumulates in fp32. Deterministic: every output element
 * has one owner and its sums run in a fixed order, so the same inputs give
 * the same bits.
 * @param plan   a plan created with desc.backward = 1
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return as fsa_compressed_attention_fwd, FSA_STATUS_INVALID_ARGUMENT for a
 *         plan without backward, FSA_STATUS_WORKSPACE_TOO_SMALL.
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_compressed_attention_bwd(const fsa_compressed_plan *plan, const fsa_compressed_bwd_args *args,
                                                void *stream);

/* ------------------------------------------------------------------------ */
/* Sliding-window attention (NSA's window branch)                           */
/* ------------------------------------------------------------------------ */

/** The kernel of sliding-window attention for one problem shape. Made by
 *  fsa_window_plan_create, released by fsa_window_plan_destroy; read-only
 *  after creation. */
typedef struct fsa_window_plan fsa_window_plan;

/** The problem shape of a sliding-window plan: the query at position i of
 *  its sequence, in query head qh, attends to the keys at positions
 *  i - W_qh + 1 .. i of the same sequence (causal attention when the window
 *  covers the sequence), where W_qh is head_windows[qh] when head_windows is
 *  given and `window` otherwise. */
typedef struct fsa_window_attention_desc {
    size_t struct_size;
    fsa_dtype dtype;  /**< of q, k, v, o; default bf16 */
    int head_dim;     /**< Dk of q and k: multiple of 16, 16..256; default 128 */
    int value_dim;    /**< Dv of v and o: multiple of 16, 16..256; 0 = head_dim */
    int num_q_heads;  /**< Hq (required) */
    int num_kv_heads; /**< Hkv (required), at most 65535; group G = Hq / Hkv, 1..16 */
    int window;       /**< W >= 1; default 512. Ignored when head_windows is given. */
    float scale;      /**< softmax scale; 0 = 1/sqrt(head_dim) */
    /* Appended after 0.2.0. */
    /** Optional per-query-head windows: a host array of num_q_heads values,
     *  each >= 1, read during fsa_window_plan_create only (the plan keeps its
     *  own copy; the caller keeps ownership). NULL = `window` for every head.
     *  At most FSA_WINDOW_MAX_HEAD_WINDOWS query heads. */
    const int32_t *head_windows;
    int backward;     /**< 1 = also prepare the backward kernels */
} fsa_window_attention_desc;

/** The most query heads a plan with per-head windows may have (the windows
 *  travel with every launch). */
#define FSA_WINDOW_MAX_HEAD_WINDOWS 256

#define FSA_WINDOW_ATTENTION_DESC_INIT \
    FSA_INIT_(fsa_window_attention_desc, FSA_INIT_FIELD_(head_dim, 128) FSA_INIT_FIELD_(window, 512))

/**
 * Creates a sliding-window plan: checks the descriptor and compiles or loads
 * its kernels (the forward; with desc.backward also the two backward
 * kernels). With an offline context it only fills the cache.
 * @param[out] out  the new plan, or NULL on failure; the caller owns it and
 *                  releases it with fsa_window_plan_destroy, before the context.
 * @param      ctx  the context; it must outlive the plan
 * @param      desc the shape; read only during the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT or FSA_STATUS_UNSUPPORTED for a shape
 *         the library does not take (a window below 1, per-head windows with
 *         more than FSA_WINDOW_MAX_HEAD_WINDOWS query heads, ...); compile,
 *         cache and driver errors.
 * Thread-safe. Blocks while compiling; do not call during a stream capture.
 */
FSA_API fsa_status fsa_window_plan_create(fsa_window_plan **out, fsa_context *ctx,
                                          const fsa_window_attention_desc *desc);

/** Releases a sliding-window plan; NULL is fine. No call with it may be running. */
FSA_API void fsa_window_plan_destroy(fsa_window_plan *plan);

/** Arguments of fsa_window_attention_fwd. Dtype tensors follow
 *  fsa_fwd_args's rules (16-byte aligned, strides multiples of 8 elements).
 *  cu_seqlens is clamped on the device (no access outside the tensors; bad
 *  offsets leave the tokens no tile owns unwritten); in check mode
 *  (fsa_context_options.check) a small kernel validates it first (starts at
 *  0, never falls, ends at T) and the call waits for the verdict. */
typedef struct fsa_window_fwd_args {
    size_t struct_size;
    int64_t total_tokens; /**< T (host), 0 to INT32_MAX - 1 */
    int batch;            /**< number of sequences (host), 1..T */
    fsa_tensor q;         /**< [T, Hq, Dk], read */
    fsa_tensor k;         /**< [T, Hkv, Dk], read */
    fsa_tensor v;         /**< [T, Hkv, Dv], read */
    fsa_tensor o;         /**< [T, Hq, Dv], written */
    uint64_t cu_seqlens;  /**< int32 [batch + 1], read */
    uint64_t lse;         /**< optional float [Hq, T] (natural log), written; 0 = not wanted */
} fsa_window_fwd_args;

#define FSA_WINDOW_FWD_ARGS_INIT FSA_INIT_(fsa_window_fwd_args, )

/**
 * Enqueues the sliding-window forward on `stream`: one kernel, no workspace,
 * no allocation, no host synchronization; can be captured in a CUDA graph.
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT (in check mode also for bad cu_seqlens);
 *         FSA_STATUS_MISALIGNED; FSA_STATUS_UNSUPPORTED for a problem that
 *         needs too many tiles;
 *         FSA_STATUS_NO_DEVICE for an offline plan; FSA_STATUS_DRIVER_ERROR.
 * Thread-safe for calls with different outputs.
 */
FSA_API fsa_status fsa_window_attention_fwd(const fsa_window_plan *plan, const fsa_window_fwd_args *args,
                                            void *stream);

/** Arguments of fsa_window_attention_bwd: the gradients of o with respect to
 * q, k and v. Inputs as in the forward plus o and lse (the forward's) and
 * dout; outputs dq (like q), dk and dv (like k and v, summed over the G query
 * heads of each group), written in the input dtype. Every dtype tensor
 * follows the forward's rules. */
typedef struct fsa_window_bwd_args {
    size_t struct_size;
    int64_t total_tokens; /**< T (host), 0 to INT32_MAX - 1 */
    int batch;            /**< number of sequences (host), 1..T */
    fsa_tensor q;         /**< [T, Hq, Dk], read */
    fsa_tensor k;         /**< [T, Hkv, Dk], read */
    fsa_tensor v;         /**< [T, Hkv, Dv], read */
    fsa_tensor o;         /**< [T, Hq, Dv], the forward's output, read */
    fsa_tensor dout;      /**< [T, Hq, Dv], gradient of o, read */
    fsa_tensor dq;        /**< [T, Hq, Dk], written */
    fsa_tensor dk;        /**< [T, Hkv, Dk], written */
    fsa_tensor dv;        /**< [T, Hkv, Dv], written */
    uint64_t lse;         /**< float [Hq, T], natural log, as the forward wrote it; read (required) */
    uint64_t cu_seqlens;  /**< int32 [batch + 1], read */
    uint64_t workspace;   /**< 256-byte aligned, fsa_window_plan_workspace_size_bwd bytes */
    size_t workspace_bytes;
} fsa_window_bwd_args;

#define FSA_WINDOW_BWD_ARGS_INIT FSA_INIT_(fsa_window_bwd_args, )

/** The device workspace of a window backward call, in *bytes_out: delta
 *  = rowsum(dout * o), 4 * Hq * T bytes rounded up to 256 (0 without
 *  tokens). `plan` must have been made with desc.backward = 1. Returns
 *  FSA_STATUS_NULL_POINTER, or FSA_STATUS_INVALID_ARGUMENT for a plan
 *  without backward or a token count or batch the backward refuses.
 *  Host-only and thread-safe. */
FSA_API fsa_status fsa_window_plan_workspace_size_bwd(size_t *bytes_out, const fsa_window_plan *plan,
                                                      int64_t total_tokens, int batch);

/** Enqueues the sliding-window backward on `stream`: the dq kernel (which
 *  also writes delta to the workspace), then the dk/dv kernel. Launch rules
 *  as the forward's: no allocation, no host synchronization, capturable in
 *  a CUDA graph; `args` is read during the call only. fp32 accumulation.
 *  Deterministic: one owner per output element, sums in a fixed order, so
 *  the same inputs give the same bits. `plan` must have been made with
 *  desc.backward = 1.
 *  @return as fsa_window_attention_fwd, and FSA_STATUS_INVALID_ARGUMENT for
 *          a plan without backward, FSA_STATUS_NULL_POINTER for a missing
 *          lse, FSA_STATUS_WORKSPACE_TOO_SMALL.
 *  Thread-safe for calls with different workspaces and outputs. */
FSA_API fsa_status fsa_window_attention_bwd(const fsa_window_plan *plan, const fsa_window_bwd_args *args,
                                            void *stream);

/* ------------------------------------------------------------------------ */
/* NSA's gates: the layer's sum of its three branches                       */
/* ------------------------------------------------------------------------ */

/** The two gate kernels (forward, backward) for one dtype and value head
 *  dim. Made by fsa_gate_plan_create, released by fsa_gate_plan_destroy;
 *  read-only after creation. */
typedef struct fsa_gate_plan fsa_gate_plan;

/** The shape of a gate plan. */
typedef struct fsa_gate_desc {
    size_t struct_size;
    fsa_dtype dtype; /**< of the branches' outputs, o and their gradients; default bf16 */
    int value_dim;   /**< Dv of the rows: multiple of 16, 16..256; default 128 */
} fsa_gate_desc;

#define FSA_GATE_DESC_INIT FSA_INIT_(fsa_gate_desc, FSA_INIT_FIELD_(value_dim, 128))

/**
 * Creates a gate plan: checks the descriptor and compiles or loads its two
 * kernels. With an offline context it only fills the cache.
 * @param[out] out  the new plan, or NULL on failure; the caller owns it and
 *                  releases it with fsa_gate_plan_destroy, before the context.
 * @param      ctx  the context; it must outlive the plan
 * @param      desc the shape; read only during the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT or FSA_STATUS_UNSUPPORTED for a shape
 *         the library does not take; compile, cache and driver errors.
 * Thread-safe. Blocks while compiling; do not call during a stream capture.
 */
FSA_API fsa_status fsa_gate_plan_create(fsa_gate_plan **out, fsa_context *ctx, const fsa_gate_desc *desc);

/** Releases a gate plan; NULL is fine. No call with it may be running. */
FSA_API void fsa_gate_plan_destroy(fsa_gate_plan *plan);

/** Arguments of fsa_gate_fwd and fsa_gate_bwd, over rows (token t, head h)
 *  of T x H. Dtype tensors [T, H, Dv] follow fsa_fwd_args's rules (16-byte
 *  aligned, strides multiples of 8 elements); gates are float32 [T, H] with
 *  strides in floats (4-byte aligned; a stride of 0 repeats a value, so a
 *  gate per token, per head or one number are views too). Branch x is 0 for
 *  the compressed, 1 the selected, 2 the sliding-window attention. */
typedef struct fsa_gate_args {
    size_t struct_size;
    int64_t total_tokens;  /**< T (host), 0 to INT32_MAX - 1 */
    int num_heads;         /**< H >= 1 */
    fsa_tensor out[3];     /**< the branches' outputs o_x, [T, H, Dv], read */
    fsa_tensor gate[3];    /**< the gates g_x, float32 [T, H], read */
    fsa_tensor o;          /**< forward: sum of g_x o_x, [T, H, Dv], written */
    fsa_tensor dout;       /**< backward: gradient of o, [T, H, Dv], read */
    fsa_tensor dout_branch[3]; /**< backward: g_x dout, [T, H, Dv], written; ptr 0 = not wanted */
    uint64_t dgate;        /**< backward: float32 [3][T][H], row sums of dout o_x, written; 0 = not wanted */
} fsa_gate_args;

#define FSA_GATE_ARGS_INIT FSA_INIT_(fsa_gate_args, )

/**
 * Enqueues o = g_0 o_0 + g_1 o_1 + g_2 o_2 on `stream` (fp32 sums, one
 * rounding per element): one kernel, no workspace, no allocation, no host
 * synchronization; can be captured in a CUDA graph. Reads out, gate; writes o.
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT; FSA_STATUS_MISALIGNED;
 *         FSA_STATUS_NO_DEVICE for an offline plan; FSA_STATUS_DRIVER_ERROR.
 * Thread-safe for calls with different outputs.
 */
FSA_API fsa_status fsa_gate_fwd(const fsa_gate_plan *plan, const fsa_gate_args *args, void *stream);

/**
 * Enqueues the gradients of fsa_gate_fwd: dout_branch[x] = g_x dout and
 * dgate[x] = rowsum(dout o_x) (fp32, a fixed order of sums: deterministic).
 * Reads out, gate, dout. Launch rules and returns as fsa_gate_fwd.
 */
FSA_API fsa_status fsa_gate_bwd(const fsa_gate_plan *plan, const fsa_gate_args *args, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_H */
