/* Parameters of the paged-KV-cache kernels (selected attention of new query
 * tokens over a paged cache), passed by value as the one kernel argument, and
 * the tiling, split rule and shared-memory layout the host and the kernels
 * share. Plain C read by the host library and by NVRTC. Every field of the
 * parameter block is 8 bytes: no padding. */
#ifndef FSA_KVC_PARAMS_CUH
#define FSA_KVC_PARAMS_CUH

#include "fsa_layout.cuh"

#define FSA_KVC_WARPS 4
#define FSA_KVC_THREADS (32 * FSA_KVC_WARPS)
#define FSA_KVC_STAGE_KEYS 64 /* keys per pipeline stage */
#define FSA_KVC_MAX_GROUP 64

/* 16-row tiles per CTA for group size g: room for 4 query tokens of the
 * group (speculative decoding), at most 64 rows. */
FSA_LAYOUT_FN int fsa_kvc_row_tiles(int g) { return g <= 4 ? 1 : g <= 8 ? 2 : 4; }
/* Query tokens per tile: the rows are tokens x the g heads of a KV head. */
FSA_LAYOUT_FN int fsa_kvc_tile_tokens(int g) { return 16 * fsa_kvc_row_tiles(g) >= g ? 16 * fsa_kvc_row_tiles(g) / g : 1; }
/* The split rule (batch invariance): a sequence whose new tokens fit one tile
 * splits its selected blocks over `splits` CTAs per KV head; a longer one never
 * splits. It reads only the sequence's own query length and plan constants. */
FSA_LAYOUT_FN int fsa_kvc_seq_splits(int q_len, int tile_tokens, int splits)
{
    return q_len > 0 && q_len <= tile_tokens ? splits : 1;
}
/* Head dims up to 128 keep the query fragments in registers: the query rows
 * land in the second K stage buffer and need no shared memory of their own
 * (3 CTAs per SM instead of 2 on sm_90 at D 128). */
FSA_LAYOUT_FN int fsa_kvc_q_in_registers(int d) { return d <= 128; }
/* Shared memory: [the query rows] | two stages of K | two stages of V. */
FSA_LAYOUT_FN int fsa_kvc_smem_k(int d, int g)
{
    return fsa_kvc_q_in_registers(d) ? 0 : fsa_tile_bytes(16 * fsa_kvc_row_tiles(g), d);
}
FSA_LAYOUT_FN int fsa_kvc_smem_v(int d, int g) { return fsa_kvc_smem_k(d, g) + 2 * fsa_tile_bytes(FSA_KVC_STAGE_KEYS, d); }
FSA_LAYOUT_FN int fsa_kvc_smem_bytes(int d, int g) { return fsa_kvc_smem_v(d, g) + 2 * fsa_tile_bytes(FSA_KVC_STAGE_KEYS, d); }

/* A paged cache [num_pages, page_size, Hkv, D] by strides (page, token, head). */
typedef struct fsa_kvc_cache_view {
    long long ptr;
    long long page_stride, token_stride, head_stride;
} fsa_kvc_cache_view;

typedef struct fsa_kvc_params {
    fsa_kernel_view q, o;   /* [Tq, Hq, D] */
    long long lse;          /* float [Hq, Tq] or 0 */
    fsa_kvc_cache_view k, v;
    long long num_pages;
    long long block_table, bt_stride, max_pages; /* int32 [batch, max_pages], row stride bt_stride */
    long long cu_q;         /* int32 [batch + 1] */
    long long seqused;      /* int32 [batch]: cached keys, new tokens included */
    long long topk, topk_hs, topk_ts;
    long long topk_len;     /* int32 [Tq] or 0 */
    long long tq, batch, num_kv_heads;
    double scale_log2;      /* softmax scale * log2(e) */
    long long splits;       /* CTAs per KV head of a one-tile sequence */
    long long o_part;       /* float [batch, Hkv, splits, rows, D]: normalized partial outputs */
    long long lse_part;     /* float [batch, Hkv, splits, rows]: their log2-sum-exp */
} fsa_kvc_params;

#endif
