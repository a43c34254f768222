/**
 * @file fsa/gate.h
 * NSA's gates: the sum of the three branches. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_GATE_H
#define FSA_PUBLIC_GATE_H

#include "common.h"
#include "status.h"
#include "context.h"
#include "selected.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * @return FSA_STATUS_OK, also for an empty call (total_tokens 0: nothing is
 *         enqueued, no tensor is required and no device either, an
 *         offline plan included); FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
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

#endif /* FSA_PUBLIC_GATE_H */
