/* CPU float64 reference for compressed attention and the block selection it
 * drives, used by the GPU tests.
 *
 * Semantics:
 * - Packed varlen batch: query tokens of sequence b are [cu[b], cu[b+1]),
 *   its compressed tokens [cu_c[b], cu_c[b+1]) of the [Tc, Hkv, *] tensors;
 *   i = t - cu[b] is a query's position in its sequence.
 * - Compressed token j (0-based in its sequence) covers positions
 *   j*d .. j*d + l - 1 (kernel size l, stride d) and is visible to position
 *   i when j*d + l - 1 <= i (and j < the sequence's compressed count).
 * - Forward, query head qh of KV head h = qh / G: x_j = scale * q.k_j over
 *   the visible j; o = sum_j softmax(x)_j v_j; lse = log sum_j exp(x_j)
 *   (natural log). No visible token: o = 0, lse = -INFINITY.
 * - Block scores of (h, t), blocks c = 0 .. i / BK: the sum over the G heads
 *   of the group and over the visible compressed tokens j overlapping
 *   positions c*BK .. c*BK + BK - 1 (j*d <= c*BK + BK - 1 and
 *   j*d + l - 1 >= c*BK), each counted once, of softmax(x)_j.
 * - Selection of (h, t): forced blocks first (c < init or c > own - local,
 *   within 0 .. own; ascending), then the others by score, descending,
 *   equal scores by block, ascending; the first K of that order, written
 *   ascending, -1 after them.
 * - Inputs are float (already rounded to the kernel dtype); arithmetic is
 *   double.
 */
#ifndef FSA_REFERENCE_CMP_H
#define FSA_REFERENCE_CMP_H

#include <stddef.h>
#include <stdint.h>

#include "reference_terms.h"

typedef struct fsa_ref_cmp_problem {
    int total_tokens, batch;      /* T, B */
    const int32_t *cu_seqlens;    /* host, [B + 1] */
    int total_cmp;                /* Tc */
    const int32_t *cu_seqlens_c;  /* host, [B + 1] */
    int num_q_heads, num_kv_heads, head_dim, value_dim;
    int kernel_size, stride;      /* l, d */
    double scale;
    const float *q;               /* [T, Hq, Dk] contiguous */
    const float *k;               /* [Tc, Hkv, Dk] contiguous */
    const float *v;               /* [Tc, Hkv, Dv] contiguous */
} fsa_ref_cmp_problem;

/* The compressed tokens a caller's compression makes of a sequence of len
 * positions: one per stride whose window fits, max(0, (len - l) / d + 1). */
int fsa_ref_cmp_count(int len, int kernel_size, int stride);

/* Whether any query of its sequence sees packed compressed token jc: never when the sequence's
 * cu_seqlens_c gives it more tokens than its length makes (fsa_ref_cmp_count), since the extra ones
 * end past its last position. Their dk and dv are 0. */
int fsa_ref_cmp_token_seen(const fsa_ref_cmp_problem *p, int jc);

/* o [T, Hq, Dv]; lse [Hq, T] or NULL. */
void fsa_ref_cmp_forward(const fsa_ref_cmp_problem *p, double *o, double *lse);

/* Gradients of o given dout [T, Hq, Dv]: writes (overwrites) dq [T, Hq, Dk],
 * dk [Tc, Hkv, Dk] and dv [Tc, Hkv, Dv]. With P the softmax, dP_j = dout.v_j,
 * delta = dout.o, dS = P (dP - delta): dq = scale dS k, dk = scale dS^T q
 * and dv = P^T dout, summed over the group's heads and every query that
 * sees the token. */
void fsa_ref_cmp_backward(const fsa_ref_cmp_problem *p, const float *dout, double *dq, double *dk, double *dv);

/* The same with delta = dout.o_used ([T, Hq, Dv]; NULL: the exact o): the gradients given the o a call
 * reads, as the backward's contract states them. Where a query sees few tokens dq (and the keys' dk) is a
 * small difference that the rounding of o moves by far more than the gradients' own rounding. */
void fsa_ref_cmp_backward_given_o(const fsa_ref_cmp_problem *p, const float *dout, const float *o_used, double *dq,
                                  double *dk, double *dv);
/* The same, and each gradient row's term norm into *terms (reference_terms.h; dk and dv rows [Tc, Hkv]; NULL:
 * not wanted). */
void fsa_ref_cmp_backward_terms(const fsa_ref_cmp_problem *p, const float *dout, const float *o_used, double *dq,
                                double *dk, double *dv, const fsa_ref_grad_terms *terms);

/* scores [i / BK + 1] of (KV head h, token t); returns i / BK + 1. */
int fsa_ref_cmp_block_scores(const fsa_ref_cmp_problem *p, int block_size, int h, int t, double *scores);

/* The selection of one row from its scores (n = own + 1 blocks). */
void fsa_ref_select_row(int32_t *row, const double *scores, int n, int top_k, int init_blocks, int local_blocks);

/* Every row: topk[h * head_stride + t * token_stride + s]. */
void fsa_ref_cmp_select(const fsa_ref_cmp_problem *p, int block_size, int top_k, int init_blocks, int local_blocks,
                        int32_t *topk, int64_t head_stride, int64_t token_stride);

/* Whether `row` is a correct selection for these scores when scores closer
 * than tol + tol_rel x the best score left out may come out in either order:
 * ascending blocks in 0 .. n - 1, min(K, n) of them, -1 after; the forced
 * blocks the rule takes; every other block taken scores at least the best one
 * left out minus that tolerance. *swap (when not NULL): how far below the
 * best block left out the worst block taken scores, over that best score (0
 * when none is below). On failure writes why into `why` (when not NULL). */
int fsa_ref_selection_ok(const int32_t *row, const double *scores, int n, int top_k, int init_blocks,
                         int local_blocks, double tol, double tol_rel, double *swap, char *why, size_t why_size);

#endif
