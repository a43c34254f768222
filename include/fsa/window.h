/**
 * @file fsa/window.h
 * Sliding-window attention. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_WINDOW_H
#define FSA_PUBLIC_WINDOW_H

#include "common.h"
#include "status.h"
#include "context.h"
#include "selected.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    int reserved;     /**< unused, never read: fills what was tail padding, so that a field appended later starts
                           past every earlier version's size (docs/versioning.md) */
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
    int batch;            /**< number of sequences (host), 1..T (not read when T is 0) */
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
 * no allocation, no host synchronization (except in check mode, which first
 * waits for the offsets' verdict: the arguments' comment); can be captured
 * in a CUDA graph.
 * @return FSA_STATUS_OK, also for an empty call (total_tokens 0: nothing is
 *         enqueued, no tensor is required and no device either, an
 *         offline plan included); FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT (in check mode also for bad cu_seqlens);
 *         FSA_STATUS_MISALIGNED; FSA_STATUS_UNSUPPORTED for a problem that
 *         needs too many tiles, or (the persistent forward of sm_90a) whose
 *         busiest CTA could walk past 2^31 key stages, counting every tile
 *         at its longest key stream (one head with a window as long as the
 *         sequence: refused from ~59 million tokens on 132 SMs);
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
    int batch;            /**< number of sequences (host), 1..T (not read when T is 0) */
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
} fsa_window_bwd_args;

#define FSA_WINDOW_BWD_ARGS_INIT FSA_INIT_(fsa_window_bwd_args, )

/** The device workspace of a window backward call, in *bytes_out: delta
 *  = rowsum(dout * o) and a gated call's lse rows, twice 4 * Hq * T bytes
 *  rounded up to 256 (0 without tokens). `plan` must have been made with desc.backward = 1. Returns
 *  FSA_STATUS_NULL_POINTER, FSA_STATUS_INVALID_ARGUMENT for a plan
 *  without backward or a token count or batch the backward refuses, or
 *  FSA_STATUS_UNSUPPORTED for counts whose tiles no grid holds (as the
 *  call).
 *  Host-only and thread-safe. */
FSA_API fsa_status fsa_window_plan_workspace_size_bwd(size_t *bytes_out, const fsa_window_plan *plan,
                                                      int64_t total_tokens, int batch);

/** Enqueues the sliding-window backward on `stream`: the dq kernel (which
 *  also writes delta to the workspace), then the dk/dv kernel. Launch rules
 *  as the forward's: no allocation, no host synchronization (but in check
 *  mode), capturable in a CUDA graph; `args` is read during the call only. fp32 accumulation.
 *  Deterministic: one owner per output element, sums in a fixed order, so
 *  the same inputs give the same bits. `plan` must have been made with
 *  desc.backward = 1.
 *  @return as fsa_window_attention_fwd, and FSA_STATUS_INVALID_ARGUMENT for
 *          a plan without backward, FSA_STATUS_NULL_POINTER for a missing
 *          lse, FSA_STATUS_WORKSPACE_TOO_SMALL.
 *  Thread-safe for calls with different workspaces and outputs. */
FSA_API fsa_status fsa_window_attention_bwd(const fsa_window_plan *plan, const fsa_window_bwd_args *args,
                                            void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_WINDOW_H */
