/* CPU float64 reference for sliding-window attention: the query at position
 * i of its sequence attends to the keys at positions i - W + 1 .. i of the
 * same sequence; o = softmax(scale q.k_j) v_j, lse its natural log-sum-exp.
 * Inputs are float (already rounded to the kernel dtype), arithmetic double. */
#ifndef FSA_REFERENCE_WINDOW_H
#define FSA_REFERENCE_WINDOW_H

#include <stdint.h>

typedef struct fsa_ref_window_problem {
    int total_tokens, batch;   /* T, B */
    const int32_t *cu_seqlens; /* host, [B + 1] */
    int num_q_heads, num_kv_heads, head_dim, value_dim;
    int window;
    double scale;
    const float *q; /* [T, Hq, Dk] contiguous */
    const float *k; /* [T, Hkv, Dk] contiguous */
    const float *v; /* [T, Hkv, Dv] contiguous */
} fsa_ref_window_problem;

/* o [T, Hq, Dv]; lse [Hq, T] or NULL. */
void fsa_ref_window_forward(const fsa_ref_window_problem *p, double *o, double *lse);

#endif
