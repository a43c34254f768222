/* CPU float64 reference for sliding-window attention: the query at position
 * i of its sequence, in query head qh, attends to the keys at positions
 * i - W_qh + 1 .. i of the same sequence (W_qh = head_windows[qh], or window
 * for every head); o = softmax(scale q.k_j) v_j, lse its natural
 * log-sum-exp. Inputs are float (already rounded to the kernel dtype),
 * arithmetic double. */
#ifndef FSA_REFERENCE_WINDOW_H
#define FSA_REFERENCE_WINDOW_H

#include <stdint.h>

#include "reference_terms.h"

typedef struct fsa_ref_window_problem {
    int total_tokens, batch;   /* T, B */
    const int32_t *cu_seqlens; /* host, [B + 1] */
    int num_q_heads, num_kv_heads, head_dim, value_dim;
    int window;
    double scale;
    const float *q; /* [T, Hq, Dk] contiguous */
    const float *k; /* [T, Hkv, Dk] contiguous */
    const float *v; /* [T, Hkv, Dv] contiguous */
    const int32_t *head_windows; /* [Hq] or NULL: `window` for every head */
} fsa_ref_window_problem;

/* The window of query head qh. */
int fsa_ref_window_of(const fsa_ref_window_problem *p, int qh);

/* o [T, Hq, Dv]; lse [Hq, T] or NULL. */
void fsa_ref_window_forward(const fsa_ref_window_problem *p, double *o, double *lse);

/* Gradients of o given dout [T, Hq, Dv]: writes (overwrites) dq [T, Hq, Dk],
 * dk [T, Hkv, Dk] and dv [T, Hkv, Dv]. With P the softmax, dP_j = dout.v_j,
 * delta = dout.o, dS = P (dP - delta): dq = scale dS k, dk = scale dS^T q
 * and dv = P^T dout, summed over the group's heads and every query that
 * sees the key. */
void fsa_ref_window_backward(const fsa_ref_window_problem *p, const float *dout, double *dq, double *dk, double *dv);

/* The same with delta = dout.o_used ([T, Hq, Dv]; NULL: the exact o): the gradients given the o a call
 * reads, as the backward's contract states them (a window of a few keys makes dq a small difference that
 * the rounding of o moves by far more than the gradients' own rounding). */
void fsa_ref_window_backward_given_o(const fsa_ref_window_problem *p, const float *dout, const float *o_used,
                                     double *dq, double *dk, double *dv);
/* The same, and each gradient row's term norm into *terms (reference_terms.h; NULL: not wanted). */
void fsa_ref_window_backward_terms(const fsa_ref_window_problem *p, const float *dout, const float *o_used,
                                   double *dq, double *dk, double *dv, const fsa_ref_grad_terms *terms);

#endif
