/**
 * @file fsa/selected_bwd.h
 * The backward of selected attention: arguments, workspace and path
 * queries, launch. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_SELECTED_BWD_H
#define FSA_PUBLIC_SELECTED_BWD_H

#include "common.h"
#include "status.h"
#include "selected.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Arguments of fsa_selected_attention_bwd: the gradients of o with respect
 * to q, k and v. Inputs as in the forward plus o, lse (the forward's,
 * required) and dout; outputs dq (like q), dk and dv (like k and v; summed
 * over the G query heads of each group), written in the input dtype. Every
 * dtype tensor follows the forward's rules (16-byte aligned, strides
 * multiples of 8 elements). */
typedef struct fsa_bwd_args {
    size_t struct_size;
    int64_t total_tokens; /**< T (host), 0 to INT32_MAX - 1 */
    int batch;            /**< number of sequences (host), 1..T (not read when T is 0) */
    int max_seqlen;       /**< longest sequence (host) or 0 when unknown; checked against T (check mode:
                                 also against each sequence) */
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
    /** [T, Hq, D], read; optional (ptr 0: none). Added to dq in fp32 before
     * dq's one rounding, so that a caller summing dq over several attention
     * branches needs no pass of its own; may be dq itself (each element is
     * read before it is written, by the same thread), else memory apart from
     * dq's (a partial overlap: FSA_STATUS_INVALID_ARGUMENT). Its rules are dq's. A
     * call with dq_add never measures the dq orders (tuning: each variant
     * timed would add it again); it takes the plan's choice without. */
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
} fsa_bwd_args;

#define FSA_BWD_ARGS_INIT FSA_INIT_(fsa_bwd_args, )

/**
 * Bytes of device workspace a backward call needs: at most the plan's cap,
 * chunked as for fsa_plan_workspace_size. The smallest chunk, one KV head
 * and one token, holds that head's fp32 dK/dV over every token
 * (T * (D + Dv) * 4 bytes): a cap below it gets that chunk's size.
 * With tuning on and no tuning record for the bucket yet, it covers every
 * variant the call may measure and the one the record will name (each
 * within the cap), so a workspace sized once keeps serving the calls.
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
 * Enqueues the backward on `stream`: no allocation, no host synchronization
 * (except a tuning call, and check mode: fsa_context_options); can be
 * captured in a CUDA graph. Accumulates in fp32. Deterministic: the
 * same inputs give the same bits.
 * @param plan   a plan created with desc.backward = 1
 * @param args   the tensors; read only during the call
 * @param stream a CUstream of the plan's device, or NULL
 * @return as fsa_selected_attention_fwd, and FSA_STATUS_INVALID_ARGUMENT for
 *         a plan without backward.
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_selected_attention_bwd(const fsa_plan *plan, const fsa_bwd_args *args, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_SELECTED_BWD_H */
