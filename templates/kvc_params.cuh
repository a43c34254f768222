/* Parameters of the paged-KV-cache kernels (selected attention of new query
 * tokens over a paged cache), passed by value as the one kernel argument.
 * Plain C read by the host library and by NVRTC; the kernels' launch shapes
 * and shared memory are in fsa_layout.cuh. Every field is 8 bytes but the
 * two tensor maps at the end (128 bytes, 64-byte aligned). */
#ifndef FSA_KVC_PARAMS_CUH
#define FSA_KVC_PARAMS_CUH

#include "fsa_layout.cuh"

/* The most sequences a plan takes: a CTA's threads walk the batch with an int
 * counter that steps by the block's size (up to 1024; tile_sequence in
 * paged_kv.cuh), which must not pass INT32_MAX on its way out. */
#define FSA_KVC_MAX_BATCH (2147483647 - 1024)

/* A paged cache [num_pages, page_size, Hkv, D or Dv] by strides: the rows of a page
 * as a tensor view (token = row in the page), and the page stride. */
typedef struct fsa_kvc_cache_view {
    fsa_kernel_view rows;
    long long page_stride;
} fsa_kvc_cache_view;

/* A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned). */
#ifdef __cplusplus
#define FSA_KVC_ALIGN64 alignas(64)
#else
#define FSA_KVC_ALIGN64 _Alignas(64)
#endif
typedef struct fsa_kvc_tensor_map {
    FSA_KVC_ALIGN64 unsigned long long words[16];
} fsa_kvc_tensor_map;

typedef struct fsa_kvc_params {
    fsa_kernel_view q, o;   /* [Tq, Hq, D] and [Tq, Hq, Dv] */
    long long lse;          /* float [Hq, Tq] or 0 */
    fsa_kvc_cache_view k, v;
    long long num_pages;
    long long block_table, bt_stride, max_pages; /* int32 [batch, max_pages], row stride bt_stride */
    long long cu_q;         /* int32 [batch + 1] */
    long long seqused;      /* int32 [batch]: cached keys, new tokens included */
    fsa_kernel_view topk;   /* int32 top-k rows of K slots, by (token, KV head) */
    long long topk_len;     /* int32 [Tq] or 0 */
    long long tq, batch, num_kv_heads;
    double scale_log2;      /* softmax scale * FSA_LOG2E */
    long long splits;       /* shares of a one-tile sequence's selected blocks */
    long long ctas;         /* CTAs per KV head of a one-tile sequence: a divisor of splits */
    long long o_part;       /* float [batch, Hkv, splits, rows, Dv]: normalized partial outputs */
    long long lse_part;     /* float [batch, Hkv, splits, rows]: their log2-sum-exp */
    long long counters;     /* int32 [batch, Hkv]: CTAs done per split sequence; zero between calls */
    long long cluster;      /* 1: the ctas CTAs of a (sequence, KV head) are a cluster, one share each,
                               merged through shared memory (fsa_kvc_cluster_fits; sm_90) */
    /* Kernels with tensor-map copies (fsa_kvc_tma_fits, sm_90a): a map per cache of dims (Dk or
     * Dv, then the token and head dims by increasing stride, pages), box 64 columns x 64 tokens x
     * one head, 128-byte swizzle; k_token_dim, v_token_dim: which of dims 1 and 2 is the token. */
    long long k_token_dim, v_token_dim;
    long long stamps;       /* debug kernels only (kvc_stamps.cuh): u64 [FSA_KVC_STAMP_CTAS][FSA_KVC_STAMP_WORDS] */
    fsa_kvc_tensor_map k_map, v_map;
} fsa_kvc_params;

/* The paged-cache kernel's TMA template value (kvc_fwd.cu; the host packs it in
 * kvcache.c): tensor-map copies, the debug variant with phase stamps, the deep
 * ring (FSA_KVC_KERNEL_DEEP, bit 2, fsa_layout.cuh: the layout functions read
 * it), and from FSA_KVC_KERNEL_EXPERIMENT_SHIFT up the measurement variant
 * FSA_KVC_EXPERIMENT. */
#define FSA_KVC_KERNEL_TMA 1
#define FSA_KVC_KERNEL_STAMPS 2
#define FSA_KVC_KERNEL_EXPERIMENT_SHIFT 3

/* Per-CTA phase stamps of a debug build of the kernel (FSA_KVC_STAMPS at plan
 * creation: ADDRESS:BYTES of a zeroed device buffer of FSA_KVC_STAMP_CTAS records;
 * the normal kernels compile none of it). Record blockIdx.y * gridDim.x +
 * blockIdx.x, words: */
#define FSA_KVC_STAMP_CTAS 16384
#define FSA_KVC_STAMP_WORDS 40
enum {
    FSA_KVC_ST_FLAGS = 0, /* 1: the CTA ran; 2: it had a tile; 4: it merged the shares */
    FSA_KVC_ST_SMID,
    FSA_KVC_ST_T_ENTRY, /* %globaltimer ns at entry and at exit */
    FSA_KVC_ST_T_END,
    FSA_KVC_ST_C_ENTRY, /* clock64 at: entry, */
    FSA_KVC_ST_C_TILE,  /* the tile lookup done, */
    FSA_KVC_ST_C_SEL,   /* the top-k row and cached length read, */
    FSA_KVC_ST_C_UNION, /* the union formed, */
    FSA_KVC_ST_C_PAGES, /* the run's pages read (the barrier after them), */
    FSA_KVC_ST_C_MERGE, /* the shares counted (the merging CTA), */
    FSA_KVC_ST_C_END,   /* exit */
    FSA_KVC_ST_SHARES,  /* shares this CTA computed */
    FSA_KVC_ST_WAIT,    /* clock64 cycles thread 0 spent in the stages' acquire (barrier, issue, wait) */
    FSA_KVC_ST_STAGES,  /* stages this CTA streamed */
    FSA_KVC_ST_C_QREADY, /* clock64: the query fragments in registers (the first share, after its barrier) */
    FSA_KVC_ST_SHARE0 = 16, /* 5 clock64 stamps for each of the first 4 shares: start, first stage landed,
                               last stage's math done, the warps' merge done, the partial written */
    FSA_KVC_ST_C_QISSUE = 36, /* clock64: the query rows' copies issued (before the union) */
    FSA_KVC_ST_C_S0_FACTORS,  /* clock64, share 0's epilogue: the rows' factors (the barrier after them), */
    FSA_KVC_ST_C_S0_ITEMS     /* and thread 0's items of the partial stored (before the fence and barrier) */
};
#define FSA_KVC_ST_PER_SHARE 5
#define FSA_KVC_ST_MAX_SHARES 4

#endif
