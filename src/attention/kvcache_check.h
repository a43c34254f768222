/* Check mode for calls over a paged KV cache: the call's device metadata
 * (cu_seqlens_q, seqused_k, the block table, top-k rows and lengths)
 * validated by templates/kvc_check.cu before the attention runs. */
#ifndef FSA_ATTENTION_KVCACHE_CHECK_H
#define FSA_ATTENTION_KVCACHE_CHECK_H

#include "metadata_check.h"

/* Runs the check of one call on `stream` and waits for it: OK when the
 * metadata keeps the contract (or nothing ran: no checker, no tokens, a
 * stream being captured), else FSA_STATUS_INVALID_ARGUMENT naming each
 * problem. The context must be current. */
fsa_status fsa_kvcache_check(fsa_metadata_checker *checker, const fsa_context *ctx, const fsa_kvcache_desc *desc,
                             const fsa_kvcache_args *args, CUstream stream);

#endif
