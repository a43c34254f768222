/* What the forward and backward launch sequences share: argument checks,
 * one kernel launch with the parameter block, and the index inversion. */
#ifndef FSA_ATTENTION_LAUNCH_H
#define FSA_ATTENTION_LAUNCH_H

#include "plan.h"

/* A q/k/v-like tensor of `tokens` x `heads` rows: non-NULL, 16-byte aligned,
 * strides non-negative multiples of 8 elements (not checked for a dimension
 * of size 1, whose stride is never used). */
fsa_status fsa_check_tensor(const char *stage, const char *name, uint64_t ptr, int64_t token_stride,
                            int64_t head_stride, int64_t tokens, int64_t heads);

/* Token count, batch, max_seqlen, top-k and cu_seqlens (and lse when required). */
fsa_status fsa_check_problem(const char *stage, int64_t total_tokens, int batch, int max_seqlen, uint64_t topk,
                             int64_t topk_head_stride, int64_t topk_token_stride, uint64_t cu_seqlens,
                             uint64_t lse, int lse_required);

/* The workspace holds `needed` bytes and is 256-byte aligned. */
fsa_status fsa_check_workspace(const char *stage, uint64_t workspace, size_t bytes, size_t needed);

/* Launches fn on a (gx, gy) grid with a parameter block as its one argument;
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

/* Fills the tensor, problem and scale fields shared by every kernel. */
void fsa_params_problem(fsa_sel_params *p, const fsa_plan *plan, int64_t total_tokens, int batch);

#endif
