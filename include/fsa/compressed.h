/**
 * @file fsa/compressed.h
 * Compressed attention and the block selection it drives. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_COMPRESSED_H
#define FSA_PUBLIC_COMPRESSED_H

#include "common.h"
#include "status.h"
#include "context.h"
#include "selected.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    int reserved;     /**< unused, never read: fills what was tail padding, so that a field appended later starts
                           past every earlier version's size (docs/versioning.md) */
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
    int64_t total_tokens;     /**< T (host), 0 to INT32_MAX - 1; with the selection (topk set) also
                                   (T - 1 + block_size) / stride + 64 <= INT32_MAX (FSA_STATUS_UNSUPPORTED past it) */
    int64_t total_compressed; /**< Tc (host), 0 to INT32_MAX - 1; 0 when T is 0 */
    int batch;                /**< number of sequences (host), 1..T (not read when T is 0) */
    fsa_tensor q;             /**< [T, Hq, Dk], read */
    fsa_tensor k;             /**< [Tc, Hkv, Dk], read; not NULL even when Tc is 0 (with T > 0) */
    fsa_tensor v;             /**< [Tc, Hkv, Dv], read; not NULL even when Tc is 0 */
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
 * written) on `stream`: no allocation, no host synchronization (except in
 * check mode, which first waits for the offsets' verdict: the arguments'
 * comment); can be captured in a CUDA graph. Two kernels; no [T, Tc]
 * matrix is stored.
 * @param plan   the plan
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK, also for an empty call (total_tokens and
 *         total_compressed 0: nothing is enqueued, no tensor is required and no
 *         device either, an offline plan included); FSA_STATUS_NULL_POINTER for a NULL plan, args or
 *         required tensor; FSA_STATUS_STRUCT_SIZE; FSA_STATUS_INVALID_ARGUMENT
 *         for counts out of range, negative strides or a topk without
 *         selection in the plan, or in check mode for bad offsets;
 *         FSA_STATUS_MISALIGNED; FSA_STATUS_UNSUPPORTED for a problem that
 *         needs too many query tiles, or (the persistent forward of sm_90a)
 *         whose busiest CTA could walk past 2^31 key stages, counting every
 *         tile at its longest key stream (one head, stride 1: refused from
 *         ~59 million tokens on 132 SMs);
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
    int64_t total_compressed; /**< Tc (host), 0 to INT32_MAX - 1; 0 when T is 0 */
    int batch;                /**< number of sequences (host), 1..T (not read when T is 0) */
    fsa_tensor q;             /**< [T, Hq, Dk], read */
    fsa_tensor k;             /**< [Tc, Hkv, Dk], read; not NULL even when Tc is 0 (with T > 0) */
    fsa_tensor v;             /**< [Tc, Hkv, Dv], read; not NULL even when Tc is 0 */
    fsa_tensor o;             /**< [T, Hq, Dv], the forward's output, read */
    fsa_tensor dout;          /**< [T, Hq, Dv], gradient of o, read */
    fsa_tensor dq;            /**< [T, Hq, Dk], written */
    fsa_tensor dk;            /**< [Tc, Hkv, Dk], written (0 for a token no query sees); not NULL even when Tc is 0 */
    fsa_tensor dv;            /**< [Tc, Hkv, Dv], written; not NULL even when Tc is 0 */
    uint64_t lse;             /**< float [Hq, T], natural log, as the forward wrote it; read */
    uint64_t cu_seqlens;      /**< int32 [batch + 1], read */
    uint64_t cu_seqlens_c;    /**< int32 [batch + 1], read */
    uint64_t workspace;       /**< 256-byte aligned, fsa_compressed_plan_workspace_size_bwd bytes */
    size_t workspace_bytes;
    /** [T, Hq, Dk], read; optional (ptr 0: none). Added to dq in fp32 before
     * dq's one rounding, so that a caller summing dq over several attention
     * branches needs no pass of its own; may be dq itself (each element is
     * read before it is written, by the same thread), else memory apart from
     * dq's (a partial overlap: FSA_STATUS_INVALID_ARGUMENT). Its rules are dq's. */
    fsa_tensor dq_add;
    /** float32 [T, Hq] with strides in floats (4-byte aligned; a stride of 0
     * repeats a value); optional (ptr 0: none). The gate that multiplies this
     * attention's output in a gated sum such as NSA's: with it, dout is the
     * gradient of that sum (of gate * o) and dq, dk and dv are the gradients
     * through gate * o, computed without forming gate * dout (the gate enters
     * the probabilities in fp32, so any sign or zero is exact). */
    fsa_tensor gate;
    /** float32 [T, Hq] with strides in floats (4-byte aligned), written;
     * optional (ptr 0: none): rowsum(dout * o) of every (token, query head),
     * the gradient of the gate (fp32, a fixed order of sums). Written with or
     * without gate. */
    fsa_tensor gate_grad;
} fsa_compressed_bwd_args;

#define FSA_COMPRESSED_BWD_ARGS_INIT FSA_INIT_(fsa_compressed_bwd_args, )

/**
 * Bytes of device workspace a backward call needs: twice 4 * Hq * T rounded
 * up to 256 (delta = rowsum(dout * o) and a gated call's lse rows), plus,
 * with the warpgroup backward (sm_90a), room for a split dK/dV
 * walk's fp32 sums (2 * SMs * 64 * (Dk + Dv) * 4 bytes; docs/semantics.md).
 * @param[out] bytes_out    the size; 0 when there are no tokens
 * @param      plan         a plan created with desc.backward = 1
 * @param      total_tokens T
 * @param      batch        sequences in the call
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         for a plan without backward, or a token count or batch the
 *         backward would refuse; FSA_STATUS_UNSUPPORTED for counts whose
 *         query tiles no grid holds (as the call).
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_compressed_plan_workspace_size_bwd(size_t *bytes_out, const fsa_compressed_plan *plan,
                                                          int64_t total_tokens, int batch);

/**
 * Enqueues the compressed-attention backward on `stream` (dq, then dk and
 * dv; on sm_90a a third kernel when the dK/dV walk is split, adding its
 * parts' sums in a fixed order): no allocation, no host synchronization
 * (except in check mode, as the forward); can be captured in a CUDA graph.
 * Accumulates in fp32. Deterministic: every output element has one owner
 * and its sums run in a fixed order, so the same inputs give the same bits.
 * @param plan   a plan created with desc.backward = 1
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return as fsa_compressed_attention_fwd, FSA_STATUS_INVALID_ARGUMENT for a
 *         plan without backward, FSA_STATUS_WORKSPACE_TOO_SMALL.
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_compressed_attention_bwd(const fsa_compressed_plan *plan, const fsa_compressed_bwd_args *args,
                                                void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_COMPRESSED_H */
