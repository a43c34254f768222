/* The norm of each gradient row's terms taken apart, which the float64 references of the selected, compressed
 * and window backwards compute beside the gradients: dq row (t, qh) sqrt(sum over its keys of (scale dS)^2
 * |k|^2), dk row (j, h) sqrt(sum over the queries that see key j of (scale dS)^2 |q|^2), dv row sqrt(sum of
 * P^2 |dout|^2). A backward rounds each term's 16-bit factors (P, dS) by a fraction of the term, so where a
 * row's terms cancel its error scales with this norm, not with the row's own; where they do not (random
 * inputs) the two are about equal. Each dS also counts, as a term of its own, what the fp32 rounding of the
 * two dot products it subtracts (dP = dout.v and delta = dout.o) may leave of it: Dv x 2^-24 x P x
 * (sum |dout v| + sum |dout o|). That is all of dS where the two cancel: a query whose probability is 1 on
 * one key (a logit far above the rest) has dS 0 there in exact arithmetic, and its dq is that key's rounding
 * noise times |k|, which a big logit's key makes large. */
#ifndef FSA_REFERENCE_TERMS_H
#define FSA_REFERENCE_TERMS_H

#include <stddef.h>

typedef struct fsa_ref_grad_terms {
    double *dq; /* [T, Hq] */
    double *dk, *dv; /* one per key row: [T, Hkv] (selected, window), [Tc, Hkv] (compressed) */
} fsa_ref_grad_terms;

/* Room for q_rows dq entries and kv_rows dk and dv entries (a failed allocation fails the test); free. */
void fsa_ref_grad_terms_alloc(fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows);
void fsa_ref_grad_terms_free(fsa_ref_grad_terms *t);
/* The term norms of gradient i (0 dq, 1 dk, 2 dv), the order the tests keep their gradients in; NULL for a
 * NULL t. */
const double *fsa_ref_grad_terms_of(const fsa_ref_grad_terms *t, int i);
/* Zeroes q_rows dq entries and kv_rows dk and dv entries; t NULL: nothing. */
void fsa_ref_grad_terms_zero(const fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows);
/* Adds one (query row, key row) pair: scale, dS and P; abs_dots = sum |dout v| + sum |dout o| over the dv_dim
 * elements; q [dk_dim], k [dk_dim], dout [dv_dim]. t NULL: nothing. */
void fsa_ref_grad_terms_add(const fsa_ref_grad_terms *t, size_t q_row, size_t kv_row, double scale, double ds, double p,
                            double abs_dots, const float *q, const float *k, const float *dout, int dk_dim, int dv_dim);
/* sum |a_i b_i| over n elements: abs_dots' parts. */
double fsa_ref_abs_dot(const float *a, const float *b, int n);
/* The sums of squares added so far into norms. t NULL: nothing. */
void fsa_ref_grad_terms_finish(const fsa_ref_grad_terms *t, size_t q_rows, size_t kv_rows);

#endif
