/**
 * @file fsa/selected.h
 * Selected attention: its plan, descriptor, path and tuning queries and the
 * forward. fsa_dtype, fsa_plan_choice and fsa_tensor, which the other
 * attention parts use too, are declared here, where the API first needed
 * them. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_SELECTED_H
#define FSA_PUBLIC_SELECTED_H

#include "common.h"
#include "status.h"
#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    FSA_ALGORITHM_NSA = 2   /**< query tokens outer, selected blocks inner; needs at most 65535 grid rows:
                                 KV heads x ceil(G / 16), groups of query heads (beyond that AUTO takes FSA) */
} fsa_algorithm;

/** The default workspace cap (a descriptor's workspace_limit of 0) is set per
 *  call: what the outputs alive during the call leave of this budget, 2848
 *  MiB (2.986 GB), and never less than FSA_WORKSPACE_DEFAULT_MIN (a backward: that plus
 *  one KV head's fp32 dK/dV accumulator over every token, T x (D + Dv) x 4 bytes, which
 *  its token chunks carry, so long calls keep chunks of thousands of tokens). A forward counts o and
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
                                   0 = the default per-call cap: what the call's outputs (o and lse; in the
                                   backward dq, dk and dv too) leave of FSA_WORKSPACE_DEFAULT_BUDGET, at least
                                   FSA_WORKSPACE_DEFAULT_MIN (a backward: plus its T x (D + Dv) x 4 accumulator),
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
 * (desc.workspace_limit; 0 = the default per-call cap, workspace_limit above), the problem
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

/** What a call of a given size takes, filled by fsa_plan_choice_get and
 * fsa_kvcache_plan_choice_get. */
typedef struct fsa_plan_choice {
    size_t struct_size;
    fsa_algorithm algorithm;   /**< loop order (backward: the order dq is computed in) */
    fsa_choice_source source;
    const char *reason;        /**< a static sentence */
    const char *variant;       /**< the variant's name, e.g. "nsa"; static */
    int64_t bucket_tokens;     /**< the tuning bucket: the token count rounded up to a power of two */
    int candidates;            /**< variants the chooser could take for this shape */
    int will_measure;          /**< 1 when the next call of this size may measure (tuning on, a device, no
                                    record yet; a backward call with dq_add never measures) */
    int splits;                /**< paged-cache plans: shares of a one-tile sequence; 0 for other plans */
    int reserved;              /**< written 0: fills what was tail padding, so that a field appended later
                                    starts past every earlier version's size (docs/versioning.md) */
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
 * record is left alone. A backward that measures runs the forward first,
 * which measures and records the forward's bucket too when that has no
 * record.
 * @param[out] measured_out 1 when this call measured (the forward's bucket
 *                          counts, for a backward); may be NULL
 * @param      plan         a plan of a context with a device and tuning on
 *                          (FSA_TUNE_ON or FSA_TUNE_FORCE), created with
 *                          backward = 1 for FSA_OPERATION_BACKWARD
 * @param      operation    FSA_OPERATION_FORWARD or FSA_OPERATION_BACKWARD
 * @param      total_tokens T, 1 to INT32_MAX - 1
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         (tuning off, bad operation or count); FSA_STATUS_UNSUPPORTED where
 *         T tokens of the plan's heads (or their workspace) pass what one
 *         allocation can size; FSA_STATUS_NO_DEVICE for an offline plan;
 *         FSA_STATUS_NO_DRIVER for a driver without the memory functions
 *         scratch inputs need; FSA_STATUS_OUT_OF_MEMORY (the host's top-k
 *         rows); driver errors (also when device memory runs out).
 * Blocks (allocations, host synchronizations on the legacy stream); not
 * during a stream capture, in this thread or another.
 */
FSA_API fsa_status fsa_plan_tune(int *measured_out, const fsa_plan *plan, fsa_operation operation,
                                 int64_t total_tokens);

/** A device tensor seen through two strides: the row of token t and head h
 *  starts at element `ptr + t * token_stride + h * head_stride` and is
 *  contiguous. Strides are in elements, not negative; the stride of a
 *  dimension of size 1 is ignored. Every row must start below 2^63 bytes of
 *  address (the kernels add signed 64-bit offsets to ptr; a view reaching
 *  further, which no allocation does, is FSA_STATUS_INVALID_ARGUMENT).
 *  A view a call only reads may repeat rows
 *  (a stride of 0). A view a call writes must give every row its own
 *  elements, nested: the smaller stride at least a row, the larger at least
 *  the span of all rows along the other dimension (any dense or padded
 *  layout, token-major or head-major); otherwise the call returns
 *  FSA_STATUS_INVALID_ARGUMENT before anything is enqueued. A call's
 *  written views must also not share elements with each other or with the
 *  views it reads (dq_add = dq, the one exception, and a dq_add that
 *  overlaps dq otherwise are checked; other pairs are not: views interleaved
 *  in one buffer, such as dk and dv as halves of each row, are legitimate). */
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
    int batch;            /**< number of sequences (host), 1..T (not read when T is 0) */
    int max_seqlen;       /**< longest sequence (host) or 0 when unknown; checked against T (check mode:
                                 also against each sequence) */
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
 * synchronization (except a tuning call, and check mode:
 * fsa_context_options.tune and .check); can be captured in a CUDA graph. Every argument is checked
 * on the host before anything is enqueued (the device data, such as
 * cu_seqlens and the top-k indices, is not read on the host).
 * @param plan   the plan
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK, also for an empty call (total_tokens 0: nothing is
 *         enqueued, no tensor is required and no device either, an
 *         offline plan included); FSA_STATUS_NULL_POINTER for a NULL plan, args or
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

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_SELECTED_H */
