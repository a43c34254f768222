/* Compressed-attention test problems: case descriptions, random inputs
 * (rounded to the kernel dtype) with one compressed token per stride of
 * each sequence, and the float64 forward reference. */
#ifndef FSA_CMP_PROBLEM_H
#define FSA_CMP_PROBLEM_H

#include "reference_cmp.h"
#include "testing.h"

typedef struct cmp_case {
    const char *name;
    fsa_dtype dtype;
    int dk, dv, hq, hkv;
    int l, d, bk, k, init, local; /* compression and selection */
    int lens[6];
    int nseq;
    int layout_tkh; /* 1: top-k as [T, Hkv, K]; 0: [Hkv, T, K] */
    int strided;    /* q/k/v/o with padded head and token strides */
    int zero_q;     /* q = 0: equal probabilities, so equal block scores tie exactly */
    int quick;      /* part of the FSA_TEST_QUICK subset */
    int hidden;     /* compressed tokens each sequence gets past those its length makes: no query sees them */
    int big_logit;  /* compressed token 0, KV head 0, scores about 1e4 for the first sequence's last token */
    float scale;    /* the plan's softmax scale; 0: the default 1/sqrt(dk) */
} cmp_case;

fsa_compressed_attention_desc cmp_desc_of(const cmp_case *c);

typedef struct cmp_problem {
    int T, Tc, B, G;
    int32_t cu[8], cu_c[8];
    float *q, *k, *v;                  /* logical, contiguous */
    int64_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs; /* device layouts (elements) */
    int64_t topk_ts, topk_hs;
    double *o_ref, *lse_ref;           /* [T, Hq, Dv], [Hq, T] */
    fsa_ref_cmp_problem ref;
} cmp_problem;

/* Inputs and the forward reference of a case. */
void cmp_problem_make(cmp_problem *p, const cmp_case *c, uint64_t seed);
void cmp_problem_free(cmp_problem *p);

#endif
