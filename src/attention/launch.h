/* What the forward and backward launch sequences share: argument checks,
 * the parameter block's inputs, one kernel launch, and the index inversion. */
#ifndef FSA_ATTENTION_LAUNCH_H
#define FSA_ATTENTION_LAUNCH_H

#include "plan.h"

/* The arguments the forward and backward structs share (same names in both). */
typedef struct fsa_call_inputs {
    int64_t total_tokens;
    int batch, max_seqlen;
    const fsa_tensor *q, *k, *v, *o, *topk;
    uint64_t cu_seqlens, lse;
} fsa_call_inputs;

#define FSA_CALL_INPUTS(a)                                                                                      \
    {                                                                                                           \
        (a)->total_tokens, (a)->batch, (a)->max_seqlen, &(a)->q, &(a)->k, &(a)->v, &(a)->o, &(a)->topk,        \
            (a)->cu_seqlens, (a)->lse                                                                           \
    }

/* A token count the kernels can index: 0 to INT32_MAX - 1. */
fsa_status fsa_check_token_count(const char *stage, int64_t total_tokens);

/* The token count, and with tokens a batch of 1 to total_tokens sequences:
 * what the calls and the workspace-size queries accept alike. */
fsa_status fsa_check_tokens(const char *stage, int64_t total_tokens, int batch);

/* A q/k/v-like tensor of `tokens` x `heads` rows: non-NULL, 16-byte aligned,
 * strides not negative (INVALID_ARGUMENT) and multiples of 8 elements
 * (MISALIGNED). The stride of a dimension of size 1 is not checked: it is
 * never used. */
fsa_status fsa_check_tensor(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                            int64_t heads);

/* Counts, max_seqlen, top-k, cu_seqlens and lse (required or not); with
 * tokens, also q, k, v and o. */
fsa_status fsa_check_inputs(const char *stage, const fsa_plan *plan, const fsa_call_inputs *in, int lse_required);

/* The workspace holds `needed` bytes and is 256-byte aligned. */
fsa_status fsa_check_workspace(const char *stage, uint64_t workspace, size_t bytes, size_t needed);

/* One tensor view into the parameter block's address and stride fields. */
void fsa_params_view(long long *ptr, long long *token_stride, long long *head_stride, const fsa_tensor *t);

/* Clears the parameter block, then fills the inputs every kernel reads:
 * tensors, top-k, cu_seqlens, lse, the problem and the scale. */
void fsa_params_inputs(fsa_sel_params *p, const fsa_plan *plan, const fsa_call_inputs *in);

/* Launches fn on a (gx, gy) grid with the parameter block as its one argument;
 * an empty grid launches nothing. */
fsa_status fsa_launch_block(const fsa_context *ctx, CUfunction fn, uint64_t gx, unsigned gy, unsigned threads,
                            unsigned smem, CUstream stream, void *params, const char *what);

/* fsa_launch_block with the selected-attention parameter block. */
fsa_status fsa_launch(const fsa_plan *plan, CUfunction fn, uint64_t gx, unsigned gy, unsigned threads, unsigned smem,
                      CUstream stream, fsa_sel_params *p, const char *what);

/* Index inversion of the chunk in p: clear the counters, count (with the
 * last-block scan), scatter. */
fsa_status fsa_launch_index(const fsa_plan *plan, CUfunction count, CUfunction scatter, uint64_t counts,
                            size_t n_counts, CUstream stream, fsa_sel_params *p);

#endif
