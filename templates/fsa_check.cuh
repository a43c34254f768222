/* Check mode: the parameters and the result of the metadata check kernels
 * (sel_check.cu for selected attention, kvc_check.cu for the paged KV
 * cache, offsets_check.cu for compressed and sliding-window attention). Plain C read by both the host library and NVRTC, so the two always
 * agree on the layout. Every field of the parameters is 8 bytes: no
 * padding. */
#ifndef FSA_CHECK_CUH
#define FSA_CHECK_CUH

/* What a check found: bits of fsa_check_result.flags. Sequence problems
 * record their sequence in first_seq, row problems their row in first_row. */
#define FSA_CHECK_CU_START 1u       /* cu_seqlens[0] is not 0 */
#define FSA_CHECK_CU_ORDER 2u       /* cu_seqlens[b + 1] < cu_seqlens[b] */
#define FSA_CHECK_CU_END 4u         /* cu_seqlens[batch] is not total_tokens */
#define FSA_CHECK_SEQ_LONG 8u       /* a sequence longer than max_seqlen (when given) */
#define FSA_CHECK_TOPK_RANGE 16u    /* a top-k entry neither -1 nor a block of the token's sequence */
#define FSA_CHECK_TOPK_REPEAT 32u   /* a block twice in one top-k row */
#define FSA_CHECK_USED_SHORT 64u    /* seqused_k below the sequence's new tokens */
#define FSA_CHECK_USED_LONG 128u    /* seqused_k beyond the pages a block-table row holds */
#define FSA_CHECK_PAGE_RANGE 256u   /* a page-table entry of a used page outside [0, num_pages) */
#define FSA_CHECK_CUC_START 512u    /* cu_seqlens_c[0] is not 0 */
#define FSA_CHECK_CUC_ORDER 1024u   /* cu_seqlens_c[b + 1] < cu_seqlens_c[b] */
#define FSA_CHECK_CUC_END 2048u     /* cu_seqlens_c[batch] is not total_compressed */
#define FSA_CHECK_CMP_COUNT 4096u   /* a sequence's compressed tokens are not what its length gives */

typedef struct fsa_check_params {
    long long cu_seqlens;        /* int [batch + 1] */
    long long topk, topk_hs, topk_ts; /* int; strides in elements */
    long long total_tokens, batch, num_kv_heads, top_k, block_size;
    long long max_seqlen;        /* 0: not given */
    long long result;            /* fsa_check_result */
} fsa_check_params;

/* The paged-cache check: the call's metadata against the plan and the
 * call's own sizes. */
typedef struct fsa_kvc_check_params {
    long long cu_seqlens_q;      /* int [batch + 1] */
    long long seqused_k;         /* int [batch] */
    long long block_table, bt_stride, max_pages, num_pages, page_size;
    long long topk, topk_hs, topk_ts; /* int; strides in elements */
    long long topk_length;       /* int [Tq], 0 = none */
    long long total_tokens, batch, num_kv_heads, top_k, block_size;
    long long result;            /* fsa_check_result */
} fsa_kvc_check_params;

/* The offsets of a compressed-attention or sliding-window call: cu_seqlens
 * against T; for compressed attention also cu_seqlens_c against Tc and each
 * sequence's compressed-token count against its length (fsa_cmp_tokens). */
typedef struct fsa_offsets_check_params {
    long long cu_seqlens;        /* int [batch + 1] */
    long long cu_seqlens_c;      /* int [batch + 1]; 0: no compressed tokens (window) */
    long long total_tokens, total_compressed, batch;
    long long kernel_size, stride; /* of the compression */
    long long result;            /* fsa_check_result */
} fsa_offsets_check_params;

/* Filled by the kernel; the host sets flags to 0 and the rest to all ones
 * before it runs. */
typedef struct fsa_check_result {
    unsigned int flags;
    unsigned int unused;
    unsigned long long first_seq; /* lowest b with a sequence problem */
    unsigned long long first_row; /* lowest token * num_kv_heads + head with a top-k problem */
} fsa_check_result;

#endif
