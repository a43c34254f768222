/* Check mode: the parameters and the result of the metadata check kernel
 * (sel_check.cu). Plain C read by both the host library and NVRTC, so the
 * two always agree on the layout. Every field of the parameters is 8 bytes:
 * no padding. */
#ifndef FSA_SEL_CHECK_CUH
#define FSA_SEL_CHECK_CUH

/* What the check found: bits of fsa_check_result.flags. */
#define FSA_CHECK_CU_START 1u     /* cu_seqlens[0] is not 0 */
#define FSA_CHECK_CU_ORDER 2u     /* cu_seqlens[b + 1] < cu_seqlens[b] */
#define FSA_CHECK_CU_END 4u       /* cu_seqlens[batch] is not total_tokens */
#define FSA_CHECK_SEQ_LONG 8u     /* a sequence longer than max_seqlen (when given) */
#define FSA_CHECK_TOPK_RANGE 16u  /* a top-k entry neither -1 nor a block of the token's sequence */
#define FSA_CHECK_TOPK_REPEAT 32u /* a block twice in one top-k row */

typedef struct fsa_check_params {
    long long cu_seqlens;        /* int [batch + 1] */
    long long topk, topk_hs, topk_ts; /* int; strides in elements */
    long long total_tokens, batch, num_kv_heads, top_k, block_size;
    long long max_seqlen;        /* 0: not given */
    long long result;            /* fsa_check_result */
} fsa_check_params;

/* Filled by the kernel; the host sets flags to 0 and the rest to all ones
 * before it runs. */
typedef struct fsa_check_result {
    unsigned int flags;
    unsigned int unused;
    unsigned long long first_seq; /* lowest b with a cu_seqlens problem at cu_seqlens[b] */
    unsigned long long first_row; /* lowest token * num_kv_heads + head with a top-k problem */
} fsa_check_result;

#endif
