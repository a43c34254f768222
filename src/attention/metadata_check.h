/* Check mode (fsa_context_options.check, FSA_CHECK=1): before a call's
 * kernels, a small kernel (templates/sel_check.cu) validates cu_seqlens and
 * the top-k rows against the plan, the call waits for its verdict, and bad
 * metadata becomes FSA_STATUS_INVALID_ARGUMENT with what is wrong where.
 * Without check mode nothing here runs: no kernel, no synchronization. */
#ifndef FSA_ATTENTION_METADATA_CHECK_H
#define FSA_ATTENTION_METADATA_CHECK_H

#include "launch.h"

#include "../../templates/sel_check.cuh"

typedef struct fsa_metadata_checker fsa_metadata_checker;

/* With check mode on in the plan's context: loads (compiles) the check
 * kernel and, with a device, allocates its result word. *out stays NULL
 * when check mode is off. */
fsa_status fsa_metadata_checker_create(fsa_metadata_checker **out, fsa_context *ctx);
void fsa_metadata_checker_destroy(fsa_metadata_checker *c, fsa_context *ctx); /* NULL is fine */

/* Runs the check on `stream` and waits for it; OK at once without a checker,
 * without tokens, or while the stream is being captured. The context must be
 * current (fsa_context_enter). */
fsa_status fsa_metadata_check(const fsa_plan *plan, const char *stage, const fsa_call_inputs *in, CUstream stream);

/* The INVALID_ARGUMENT error for what the check found: each problem, and
 * where the first of its kind is (sequence; token and KV head). */
fsa_status fsa_metadata_verdict(const char *stage, const fsa_check_result *r, int64_t num_kv_heads);

#endif
