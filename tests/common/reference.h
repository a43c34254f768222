/* CPU float64 reference for selected attention, used by every GPU
 * correctness test, plus the benchmark selection generator and error
 * metrics.
 *
 * Semantics (docs/semantics.md):
 * - Packed varlen batch: cu_seqlens int32 [B+1], cu_seqlens[0] = 0,
 *   cu_seqlens[B] = T; sequence b holds packed tokens [s_b, e_b). For query
 *   token t of sequence b, i = t - s_b is its position in the sequence.
 * - Block size BK; sequence b has nb_b = ceil(len_b / BK) blocks; block j
 *   covers keys s_b + j*BK .. min(e_b, s_b + (j+1)*BK) - 1.
 * - Hq query heads, Hkv kv heads, G = Hq / Hkv; query head qh reads kv head
 *   h = qh / G.
 * - Top-k entry (h, t, s), s in 0..K-1, is
 *   topk[h*topk_head_stride + t*topk_token_stride + s]; [Hkv,T,K] and
 *   [T,Hkv,K] are both expressed through the strides.
 * - Slot s of row (h, t) is valid iff 0 <= idx <= i/BK (hence idx < nb_b)
 *   and no earlier slot of the row holds the same value (first occurrence
 *   wins). -1, future blocks and any other out-of-range value are ignored.
 * - Visible keys of (h, t): every key j of a valid block with j <= t.
 * - q and k rows have head_dim (Dk) elements, v, o and dout rows value_dim
 *   (Dv; 0 = head_dim).
 * - Forward, query head qh, token t: x_j = scale * q[t,qh,:].k[j,h,:];
 *   o[t,qh,:] = sum_j softmax(x)_j v[j,h,:];
 *   lse[qh,t] = log(sum_j exp(x_j)) (natural log, max-subtracted).
 *   No visible key: o = 0, lse = -INFINITY.
 * - Backward given dout [T,Hq,Dv]: exact gradients of o w.r.t. q, k, v;
 *   dk, dv sum over the G query heads of the group and all tokens that see
 *   the key. P = softmax, dP_j = dout.v_j, delta = sum(dout*o),
 *   dS = P*(dP - delta), dq = scale*dS k, dk = scale*dS^T q, dv = P^T dout.
 *   Rows with no visible key contribute nothing (dq = 0).
 * - Inputs are float (the caller rounds them to the kernel dtype first);
 *   all arithmetic is double.
 */
#ifndef FSA_REFERENCE_H
#define FSA_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "reference_terms.h"
#include "testing.h"

/* Problem and case tables are written positionally and leave their trailing
 * optional fields (value_dim, dv) out, which then read as zero. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

typedef struct fsa_ref_problem {
    int total_tokens; /* T */
    int batch;        /* B */
    const int32_t *cu_seqlens; /* host, [B+1] */
    int num_q_heads, num_kv_heads, head_dim, block_size, top_k;
    double scale;
    const float *q; /* [T,Hq,D] contiguous */
    const float *k; /* [T,Hkv,D] contiguous */
    const float *v; /* [T,Hkv,Dv] contiguous */
    const int32_t *topk;
    int64_t topk_head_stride, topk_token_stride;
    int value_dim;  /* Dv; 0 = head_dim */
} fsa_ref_problem;

/* Dv of a problem: value_dim, or head_dim when it is 0. */
int fsa_ref_value_dim(const fsa_ref_problem *p);

/* o [T,Hq,Dv]; lse [Hq,T] or NULL. */
void fsa_ref_forward(const fsa_ref_problem *p, double *o, double *lse);

/* One (query head, token) row of the forward, for spot checks of problems
 * too large for the full reference. o_row [Dv]; lse may be NULL. */
void fsa_ref_forward_row(const fsa_ref_problem *p, int qh, int t, double *o_row, double *lse);

/* A query that is not one of p's tokens (new tokens over a KV cache): p
 * holds one sequence (batch 1) of total_tokens keys; the query sits at
 * position pos of it (it sees keys j <= pos; pos < 0 or >= total_tokens:
 * nothing), with its own row q_row [D] for query head qh and its top-k row
 * [top_k] for qh's KV head (p->q and p->topk are not read); o_row [Dv]. */
void fsa_ref_attend_at(const fsa_ref_problem *p, int qh, int pos, const float *q_row, const int32_t *topk_row,
                       double *o_row, double *lse);

/* dout [T,Hq,Dv]; writes (overwrites) dq [T,Hq,D], dk [T,Hkv,D] and dv [T,Hkv,Dv]. */
void fsa_ref_backward(const fsa_ref_problem *p, const float *dout, double *dq, double *dk,
                      double *dv);

/* The same given the o a backward call reads, o_used [T,Hq,Dv] (NULL: the exact o): the gradients' delta
 * rowsum(dout * o) taken from it, as the call's contract states (gradients given dout, o and lse). */
void fsa_ref_backward_given_o(const fsa_ref_problem *p, const float *dout, const float *o_used, double *dq,
                              double *dk, double *dv);

/* fsa_ref_backward_given_o, and each row's term norm into *terms (reference_terms.h; NULL: not wanted). */
void fsa_ref_backward_terms(const fsa_ref_problem *p, const float *dout, const float *o_used, double *dq, double *dk,
                            double *dv, const fsa_ref_grad_terms *terms);

/* 1 when slot s of row (h, t) is valid under the rule above, else 0. */
int fsa_ref_slot_valid(const fsa_ref_problem *p, int h, int t, int s);

/* Sequence containing packed token t (binary search over cu_seqlens). */
int fsa_ref_sequence_of(int batch, const int32_t *cu_seqlens, int t);

/* Selection of the standard benchmark (docs/benchmarks.md), generalised to varlen. For each kv head h and
 * token t with own block c = i/BK: blocks c, 0 and c-1 (those >= 0) are
 * always chosen (in that priority when K < 3), the remaining slots are
 * distinct blocks drawn uniformly from the rest of 0..c; the row is sorted
 * ascending, tail -1 when fewer than K blocks exist. */
void fsa_ref_make_selection(int32_t *topk, int64_t head_stride, int64_t token_stride,
                            int total_tokens, int batch, const int32_t *cu_seqlens,
                            int num_kv_heads, int block_size, int top_k, fsa_rng *rng);

/* Number of entries >= 0 over [Hkv, T, K]. */
int64_t fsa_ref_selected_entries(const int32_t *topk, int64_t head_stride, int64_t token_stride,
                                 int total_tokens, int num_kv_heads, int top_k);

/* Forward FLOPs as docs/benchmarks.md counts them: 4 * entries * G * BK * D
 * (backward counts 2.5x that). */
double fsa_ref_selected_flops(int64_t entries, int group, int block_size, int head_dim);

/* ||a - b|| / max(||b||, 1e-30) over n elements (2-norms). Elements where a
 * and b are the same infinity (e.g. lse = -inf) contribute 0; any other
 * non-finite a or b gives +INFINITY. */
double fsa_rel_error(const float *a, const double *b, size_t n);
double fsa_rel_error_d(const double *a, const double *b, size_t n);

/* The worst row of a [rows, row_len] pair: the largest ||a_r - b_r|| / max(||b_r||, floor) with floor =
 * floor_frac x the root-mean-square row norm of b. One norm over the whole tensor lets a wrong row with a
 * small output (a long context averages its values toward zero) pass; a row's own norm does not, and the
 * floor keeps rows whose reference cancels to nearly zero measured at the tensor's scale. *worst_row (may
 * be NULL) gets that row. Infinities as fsa_rel_error (+INFINITY for a non-finite mismatch). */
double fsa_row_rel_error(const float *a, const double *b, size_t rows, size_t row_len, double floor_frac,
                         size_t *worst_row);
/* The same with the floor at least abs_floor: a tensor whose every reference row is (nearly) zero, such as
 * dq where each query sees one key, is measured at that absolute scale, not against its own rounding. */
double fsa_row_rel_error_floored(const float *a, const double *b, size_t rows, size_t row_len, double floor_frac,
                                 double abs_floor, size_t *worst_row);

/* The worst row of a [rows, row_len] gradient against its reference b, each row measured against the
 * largest of its own norm, its terms' norm terms[r] (fsa_ref_grad_terms) and a floor: floor_frac x the
 * median nonzero row norm of b, at least abs_floor. The median, not the rms: a few dominant rows (a big
 * logit's) would raise an rms floor above every other row; those rows get their scale from their terms. */
double fsa_row_rel_error_terms(const float *a, const double *b, const double *terms, size_t rows, size_t row_len,
                               double floor_frac, double abs_floor, size_t *worst_row);

/* max |a - b| with the same infinity rules. */
double fsa_max_abs_error(const float *a, const double *b, size_t n);

#endif
