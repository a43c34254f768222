/**
 * @file fsa/fill.h
 * fsa_fill_u32, the smallest kernel, through the whole JIT path. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_FILL_H
#define FSA_PUBLIC_FILL_H

#include "common.h"
#include "status.h"
#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * @param count  number of words; 0 enqueues nothing and returns FSA_STATUS_OK
 *               (on a context with a device) before dst is checked
 * @param stream a CUstream of the context's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_NO_DEVICE for an
 *         offline context; FSA_STATUS_MISALIGNED for a NULL or unaligned dst;
 *         FSA_STATUS_INVALID_ARGUMENT for words past 2^64 bytes of address;
 *         kernel loading and driver errors.
 * Thread-safe.
 */
FSA_API fsa_status fsa_fill_u32(fsa_context *ctx, uint64_t dst, uint32_t value, uint64_t count,
                                void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_FILL_H */
