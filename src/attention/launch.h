/* What the forward and backward launch sequences share: argument checks,
 * one kernel launch with the parameter block, and the index inversion. */
#ifndef FSA_ATTENTION_LAUNCH_H
#define FSA_ATTENTION_LAUNCH_H

#include "plan.h"

#include <string.h>

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

/* Launches kernel k on a (gx, gy) grid with its block size and shared
 * memory and the parameter block as its one argument; an empty grid
 * launches nothing. */
fsa_status fsa_launch(const fsa_plan *plan, const fsa_kernel *k, uint64_t gx, unsigned gy, CUstream stream,
                      fsa_sel_params *p);

/* Grid of a kernel with `per_block` rows per block over `rows` rows. */
static inline uint64_t fsa_blocks_for(uint64_t rows, int per_block)
{
    return (rows + (uint64_t)per_block - 1) / (uint64_t)per_block;
}

/* Index inversion of the chunk in p: clear the counters, count (with the
 * last-block scan), scatter. */
fsa_status fsa_launch_index(const fsa_plan *plan, const fsa_kernel *count, const fsa_kernel *scatter,
                            const fsa_index_layout *l, uint64_t workspace, CUstream stream, fsa_sel_params *p);

/* The index arrays of a workspace laid out by l. */
void fsa_params_index(fsa_sel_params *p, const fsa_index_layout *l, uint64_t workspace);

/* A tensor argument as the kernels see it. */
static inline fsa_kernel_view fsa_view(uint64_t ptr, int64_t token_stride, int64_t head_stride)
{
    const fsa_kernel_view v = {(long long)ptr, token_stride, head_stride};
    return v;
}

/* Fills the problem and scale fields shared by every kernel. */
void fsa_params_problem(fsa_sel_params *p, const fsa_plan *plan, int64_t total_tokens, int batch);

/* Zeroes p and fills what every operation's arguments `a` (any of the args
 * structs) share: q, k, v, o, top-k, cu_seqlens, lse and the problem. */
#define FSA_PARAMS_FROM_SHARED_ARGS(p, plan, a)                                    \
    do {                                                                           \
        memset((p), 0, sizeof *(p));                                               \
        (p)->q = fsa_view((a)->q, (a)->q_token_stride, (a)->q_head_stride);        \
        (p)->k = fsa_view((a)->k, (a)->k_token_stride, (a)->k_head_stride);        \
        (p)->v = fsa_view((a)->v, (a)->v_token_stride, (a)->v_head_stride);        \
        (p)->o = fsa_view((a)->o, (a)->o_token_stride, (a)->o_head_stride);        \
        (p)->topk = fsa_view((a)->topk, (a)->topk_token_stride, (a)->topk_head_stride); \
        (p)->cu_seqlens = (long long)(a)->cu_seqlens;                              \
        (p)->lse = (long long)(a)->lse;                                            \
        fsa_params_problem((p), (plan), (a)->total_tokens, (a)->batch);            \
    } while (0)

#endif
