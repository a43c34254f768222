/*
 * fsa-jit: shape-specialized sparse selected attention, compiled at run time.
 *
 * The whole public API. C11; no CUDA header is needed to include it. Device
 * pointers are passed as uint64_t values (CUdeviceptr), streams as void *
 * (CUstream; NULL is the legacy default stream).
 *
 * Conventions: every function that can fail returns fsa_status (0 = OK);
 * outputs come first; structs that can grow carry `struct_size` and have an
 * `..._INIT` macro; destroy functions accept NULL; what a function hands out
 * through `**out` belongs to the caller. On failure, fsa_last_error() gives
 * the detail for the calling thread.
 */
#ifndef FSA_H
#define FSA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FSA_VERSION_MAJOR 0
#define FSA_VERSION_MINOR 1
#define FSA_VERSION_PATCH 0
#define FSA_VERSION_STRING "0.1.0"

#if defined(_WIN32)
#define FSA_API
#elif defined(__GNUC__)
#define FSA_API __attribute__((visibility("default")))
#else
#define FSA_API
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

/* "FSA_STATUS_OK", ... ; "FSA_STATUS_UNKNOWN" for values outside the table. */
FSA_API const char *fsa_status_name(fsa_status status);
/* A one-line message; never NULL. */
FSA_API const char *fsa_status_string(fsa_status status);

/* Detail of the last failure on the calling thread: the stage that failed
 * (for example "compile"), kernel, key digest, target, a message and, for a
 * compile failure, the NVRTC log. Valid until the next failing call on the
 * same thread. Fields that do not apply are "". */
typedef struct fsa_error_info {
    fsa_status status;
    const char *stage;
    const char *kernel;
    const char *key;
    const char *target;
    const char *message;
    const char *log;
} fsa_error_info;

/* All of the above as one readable text; "" when nothing failed yet. */
FSA_API const char *fsa_last_error(void);
FSA_API const fsa_error_info *fsa_last_error_info(void);

FSA_API const char *fsa_version_string(void);

/* ------------------------------------------------------------------------ */
/* Context: one device (or an offline target), cache settings, counters     */
/* ------------------------------------------------------------------------ */

typedef struct fsa_context fsa_context;

typedef enum fsa_cache_mode {
    FSA_CACHE_MODE_DEFAULT = 0, /* $FSA_CACHE_MODE, else read-write */
    FSA_CACHE_MODE_READ_WRITE = 1,
    FSA_CACHE_MODE_READ_ONLY = 2,
    FSA_CACHE_MODE_OFF = 3
} fsa_cache_mode;

typedef enum fsa_jit_mode {
    FSA_JIT_DEFAULT = 0, /* $FSA_JIT, else on */
    FSA_JIT_ON = 1,
    FSA_JIT_OFF = 2 /* a cache miss is an error */
} fsa_jit_mode;

/* device: a CUDA device ordinal, or FSA_DEVICE_NONE for a context that only
 * compiles and caches kernels for `target` (no driver needed). */
#define FSA_DEVICE_NONE (-1)

typedef struct fsa_context_options {
    size_t struct_size;
    int device;             /* default 0 */
    const char *target;     /* "sm_80", "sm_90a", ...; NULL = from the device. Required
                               with FSA_DEVICE_NONE. */
    const char *cache_dir;  /* NULL = $FSA_CACHE_DIR, $XDG_CACHE_HOME/fsa, ~/.cache/fsa */
    fsa_cache_mode cache_mode;
    fsa_jit_mode jit;
    int log;                /* 1 = warnings to stderr; -1 = never; 0 = $FSA_LOG */
} fsa_context_options;

#define FSA_CONTEXT_OPTIONS_INIT \
    { sizeof(fsa_context_options), 0, NULL, NULL, FSA_CACHE_MODE_DEFAULT, FSA_JIT_DEFAULT, 0 }

FSA_API fsa_status fsa_context_create(fsa_context **out, const fsa_context_options *options);
FSA_API void fsa_context_destroy(fsa_context *ctx);

/* The compile target ("sm_90a") and the cache directory in use ("" when the
 * disk cache is off). Owned by the context. */
FSA_API const char *fsa_context_target(const fsa_context *ctx);
FSA_API const char *fsa_context_cache_dir(const fsa_context *ctx);

typedef struct fsa_cache_stats {
    size_t struct_size;
    uint64_t memory_hits;     /* kernel found in this process's table */
    uint64_t disk_hits;       /* kernel read from the disk cache */
    uint64_t compiles;        /* NVRTC compilations done by this context */
    double compile_ms;        /* wall time spent in them */
    uint64_t corrupt_entries; /* disk entries rejected (bad header, checksum, key, owner) */
    uint64_t write_failures;  /* entries that could not be published (kept in memory) */
} fsa_cache_stats;

#define FSA_CACHE_STATS_INIT { sizeof(fsa_cache_stats), 0, 0, 0, 0.0, 0, 0 }

FSA_API fsa_status fsa_context_cache_stats(fsa_cache_stats *out, const fsa_context *ctx);

/* ------------------------------------------------------------------------ */
/* Disk cache maintenance (what tools/fsa-precompile uses)                  */
/* ------------------------------------------------------------------------ */

typedef struct fsa_cache_entry_info {
    const char *path;   /* full path */
    const char *name;   /* readable kernel name, e.g. sel_fwd_main_bf16_d128_g4_bk64 */
    const char *target; /* directory target, e.g. sm_90a */
    uint64_t bytes;     /* file size */
    int64_t mtime;      /* seconds since the epoch */
    int valid;          /* verify only: 1 when header, key and checksum are good */
} fsa_cache_entry_info;

/* Called once per entry; return non-zero to stop early. */
typedef int (*fsa_cache_visit_fn)(const fsa_cache_entry_info *entry, void *user);

/* Every entry of every target under the context's cache directory. */
FSA_API fsa_status fsa_cache_list(fsa_context *ctx, fsa_cache_visit_fn visit, void *user);
/* Re-reads and re-hashes every entry; with a device, also loads the entries
 * of the context's target. Bad entries are deleted. *bad_out counts them. */
FSA_API fsa_status fsa_cache_verify(fsa_context *ctx, fsa_cache_visit_fn visit, void *user,
                                    uint64_t *bad_out);
/* Deletes the least recently used entries until the total is <= max_bytes,
 * and stale temporary files. */
FSA_API fsa_status fsa_cache_prune(fsa_context *ctx, uint64_t max_bytes, uint64_t *removed_out,
                                   uint64_t *bytes_left_out);

/* ------------------------------------------------------------------------ */
/* Fill: the smallest kernel of the library, through the whole JIT path    */
/* ------------------------------------------------------------------------ */

/* Sets `count` 32-bit words at `dst` (device, 4-byte aligned) to `value`,
 * asynchronously on `stream`. Compiles or loads its kernel on first use. */
FSA_API fsa_status fsa_fill_u32(fsa_context *ctx, uint64_t dst, uint32_t value, uint64_t count,
                                void *stream);

/* ------------------------------------------------------------------------ */
/* Selected attention (Native Sparse Attention's top-k block branch)        */
/* ------------------------------------------------------------------------ */

typedef struct fsa_plan fsa_plan;

typedef enum fsa_dtype { FSA_DTYPE_BF16 = 0, FSA_DTYPE_F16 = 1 } fsa_dtype;

typedef enum fsa_algorithm {
    FSA_ALGORITHM_AUTO = 0, /* per call, from measured crossovers */
    FSA_ALGORITHM_FSA = 1,  /* KV blocks outer, query tokens inner */
    FSA_ALGORITHM_NSA = 2   /* query tokens outer, selected blocks inner */
} fsa_algorithm;

typedef struct fsa_selected_attention_desc {
    size_t struct_size;
    fsa_dtype dtype;          /* of q, k, v, o (and do, dq, dk, dv) */
    int head_dim;             /* multiple of 16, 16..256 */
    int num_q_heads;          /* Hq */
    int num_kv_heads;         /* Hkv; Hq % Hkv == 0, group G = Hq / Hkv */
    int block_size;           /* keys per selectable block: 16, 32, 64, 128, 256 */
    int top_k;                /* selected blocks per query token: 1..64 */
    float scale;              /* softmax scale; 0 = 1/sqrt(head_dim) */
    fsa_algorithm algorithm;
    uint64_t workspace_limit; /* bytes; 0 = no limit. Larger problems run in token chunks. */
    int backward;             /* 1 = also prepare the backward kernels */
} fsa_selected_attention_desc;

#define FSA_SELECTED_ATTENTION_DESC_INIT \
    { sizeof(fsa_selected_attention_desc), FSA_DTYPE_BF16, 128, 0, 0, 64, 16, 0.0f, \
      FSA_ALGORITHM_AUTO, 0, 0 }

/* Compiles or loads every kernel the descriptor can need. With an offline
 * context (FSA_DEVICE_NONE) it only fills the cache; such a plan cannot run. */
FSA_API fsa_status fsa_plan_create(fsa_plan **out, fsa_context *ctx,
                                   const fsa_selected_attention_desc *desc);
FSA_API void fsa_plan_destroy(fsa_plan *plan);

/* Bytes of device workspace a call needs for `total_tokens` packed tokens in
 * `batch` sequences (0 when nothing is needed). With a workspace limit in the
 * descriptor, the result does not exceed it unless even one token chunk
 * needs more. */
FSA_API fsa_status fsa_plan_workspace_size(size_t *bytes_out, const fsa_plan *plan,
                                           int64_t total_tokens, int batch);

/* The path a forward call with this many tokens takes, and why. */
FSA_API fsa_status fsa_plan_algorithm(fsa_algorithm *algorithm_out, const char **reason_out,
                                      const fsa_plan *plan, int64_t total_tokens);

/* Tensors are device pointers; strides are in elements; the last dimension
 * is contiguous. q and o: [T, Hq, D]; k and v: [T, Hkv, D]. Pointers must be
 * 16-byte aligned and token/head strides multiples of 8 elements (the stride
 * of a dimension of size 1 is ignored).
 * Top-k indices: int32, element (h, t, s) at topk + h*topk_head_stride +
 * t*topk_token_stride + s, so [Hkv, T, K] and [T, Hkv, K] both work.
 * cu_seqlens: int32 [batch + 1] on the device, starts of the packed sequences,
 * cu_seqlens[0] = 0 and cu_seqlens[batch] = total_tokens. */
typedef struct fsa_fwd_args {
    size_t struct_size;
    int64_t total_tokens; /* T (host) */
    int batch;            /* number of sequences (host) */
    int max_seqlen;       /* longest sequence (host) or 0 when unknown; only checked against T */
    uint64_t q, k, v, o;
    int64_t q_token_stride, q_head_stride;
    int64_t k_token_stride, k_head_stride;
    int64_t v_token_stride, v_head_stride;
    int64_t o_token_stride, o_head_stride;
    uint64_t topk;
    int64_t topk_head_stride, topk_token_stride;
    uint64_t cu_seqlens;
    uint64_t lse;         /* optional float [Hq, T] (natural log); 0 = not wanted */
    uint64_t workspace;
    size_t workspace_bytes;
} fsa_fwd_args;

#define FSA_FWD_ARGS_INIT                                                             \
    { sizeof(fsa_fwd_args), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
      0 }

/* Enqueues the forward on `stream` and returns: no allocation, no host
 * synchronization; can be captured in a CUDA graph. */
FSA_API fsa_status fsa_selected_attention_fwd(const fsa_plan *plan, const fsa_fwd_args *args,
                                              void *stream);

/* Backward: the gradients of o with respect to q, k and v. The plan must be
 * created with desc.backward = 1. Inputs as in the forward plus o, lse (the
 * forward's, required) and dout; outputs dq [T, Hq, D], dk and dv [T, Hkv, D]
 * (summed over the G query heads of each group), written in the input dtype,
 * accumulated in fp32. Deterministic: the same inputs give the same bits. */
typedef struct fsa_bwd_args {
    size_t struct_size;
    int64_t total_tokens;
    int batch;
    int max_seqlen;
    uint64_t q, k, v, o, dout;
    uint64_t dq, dk, dv;
    int64_t q_token_stride, q_head_stride;
    int64_t k_token_stride, k_head_stride;
    int64_t v_token_stride, v_head_stride;
    int64_t o_token_stride, o_head_stride;
    int64_t dout_token_stride, dout_head_stride;
    int64_t dq_token_stride, dq_head_stride;
    int64_t dk_token_stride, dk_head_stride;
    int64_t dv_token_stride, dv_head_stride;
    uint64_t topk;
    int64_t topk_head_stride, topk_token_stride;
    uint64_t cu_seqlens;
    uint64_t lse; /* float [Hq, T], natural log, as the forward wrote it */
    uint64_t workspace;
    size_t workspace_bytes;
} fsa_bwd_args;

#define FSA_BWD_ARGS_INIT                                                                     \
    { sizeof(fsa_bwd_args), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

FSA_API fsa_status fsa_plan_workspace_size_bwd(size_t *bytes_out, const fsa_plan *plan, int64_t total_tokens,
                                               int batch);

/* The path a backward call with this many tokens takes, and why: the order in
 * which dq is computed (FSA: per (token, slot) partials summed per token; NSA:
 * one CTA per token walking its selected blocks). dk and dv always go KV-block
 * outer. FSA_STATUS_INVALID_ARGUMENT when the plan has no backward. */
FSA_API fsa_status fsa_plan_algorithm_bwd(fsa_algorithm *algorithm_out, const char **reason_out,
                                          const fsa_plan *plan, int64_t total_tokens);

/* Enqueues the backward on `stream`; no allocation, no host synchronization. */
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
 * shares computed by different CTAs and merged by lse in share order; a
 * longer one never splits. The rule reads only the sequence's own query
 * length and plan constants, so a sequence's o and lse are bitwise the same
 * alone or in any batch. */

typedef struct fsa_kvcache_plan fsa_kvcache_plan;

typedef struct fsa_kvcache_desc {
    size_t struct_size;
    fsa_dtype dtype;          /* of q, the caches and o */
    int head_dim;             /* multiple of 16, 16..256 */
    int num_q_heads;          /* Hq */
    int num_kv_heads;         /* Hkv; group G = Hq / Hkv, 1..64 */
    int block_size;           /* keys per selectable block: 16, 32, 64, 128, 256 */
    int top_k;                /* slots per top-k row: 1..64 */
    int page_size;            /* tokens per cache page: 1, 16, 32, 64, 128, 256 */
    int max_batch;            /* most sequences per call */
    int64_t max_query_tokens; /* most new tokens per call (all sequences) */
    float scale;              /* softmax scale; 0 = 1/sqrt(head_dim) */
    int splits;               /* shares of a one-tile sequence, 1..64; 0 = ceil(top_k / 4), at most 16 */
} fsa_kvcache_desc;

#define FSA_KVCACHE_DESC_INIT \
    { sizeof(fsa_kvcache_desc), FSA_DTYPE_BF16, 128, 0, 0, 64, 16, 64, 1, 1, 0.0f, 0 }

/* Compiles or loads the kernels for the descriptor (once; see the context's
 * cache). With an offline context it only fills the cache. The plan belongs
 * to the caller; it keeps using `ctx`, which must outlive it. */
FSA_API fsa_status fsa_kvcache_plan_create(fsa_kvcache_plan **out, fsa_context *ctx,
                                           const fsa_kvcache_desc *desc);
FSA_API void fsa_kvcache_plan_destroy(fsa_kvcache_plan *plan);

/* Bytes of device workspace every call of the plan needs (sized for
 * max_batch; 0 when sequences never split). */
FSA_API fsa_status fsa_kvcache_plan_workspace_size(size_t *bytes_out, const fsa_kvcache_plan *plan);

/* The tiling the plan uses: query tokens per tile (a sequence with at most
 * this many new tokens splits) and the number of shares it splits into. */
FSA_API fsa_status fsa_kvcache_plan_info(int *tile_tokens_out, int *splits_out, const fsa_kvcache_plan *plan);

/* Device pointers (uint64_t) with strides in elements; last dims contiguous.
 * q, o: [Tq, Hq, D]; 16-byte aligned, token/head strides multiples of 8.
 * k_cache, v_cache: [num_pages, page_size, Hkv, D] by (page, token, head)
 * strides (so [num_pages, Hkv, page_size, D] works too); 16-byte aligned,
 * strides multiples of 8. block_table: int32, entry (b, s) at
 * block_table + b * block_table_stride + s, s < max_pages_per_seq.
 * cu_seqlens_q: int32 [batch + 1]; seqused_k: int32 [batch]. Top-k: int32,
 * element (h, t, s) at topk + h * topk_head_stride + t * topk_token_stride + s
 * ([Hkv, Tq, K] or [Tq, Hkv, K]; head stride 0 shares one selection across
 * the KV heads); -1 = unused. topk_length: optional int32 [Tq] (0 = every row
 * uses all K slots). lse: optional float [Hq, Tq]. Every pointer stays owned
 * by the caller. */
typedef struct fsa_kvcache_args {
    size_t struct_size;
    int64_t num_query_tokens; /* Tq (host), <= max_query_tokens */
    int batch;                /* B (host), <= max_batch */
    uint64_t q;
    int64_t q_token_stride, q_head_stride;
    uint64_t cu_seqlens_q;
    uint64_t k_cache;
    int64_t k_page_stride, k_token_stride, k_head_stride;
    uint64_t v_cache;
    int64_t v_page_stride, v_token_stride, v_head_stride;
    int64_t num_pages;
    uint64_t block_table;
    int64_t block_table_stride;
    int max_pages_per_seq;
    uint64_t seqused_k;
    uint64_t topk;
    int64_t topk_head_stride, topk_token_stride;
    uint64_t topk_length;
    uint64_t o;
    int64_t o_token_stride, o_head_stride;
    uint64_t lse;
    uint64_t workspace;       /* 256-byte aligned; fsa_kvcache_plan_workspace_size bytes */
    size_t workspace_bytes;
} fsa_kvcache_args;

#define FSA_KVCACHE_ARGS_INIT                                                                  \
    { sizeof(fsa_kvcache_args), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
      0, 0, 0, 0, 0, 0, 0, 0 }

/* Enqueues the attention on `stream` and returns. Host-checkable problems
 * (NULL or misaligned pointers, sizes beyond the plan, a small workspace)
 * return a status before anything is launched. */
FSA_API fsa_status fsa_kvcache_attention(const fsa_kvcache_plan *plan, const fsa_kvcache_args *args,
                                         void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_H */
