/* Parameters of the paged-KV-cache kernels (selected attention of new query
 * tokens over a paged cache), passed by value as the one kernel argument, and
 * the tiling rules the host and the kernels share. Plain C read by the host
 * library and by NVRTC, so both agree. Every field is 8 bytes: no padding. */
#ifndef FSA_KVC_PARAMS_CUH
#define FSA_KVC_PARAMS_CUH

/* Row tiles of 16 rows per CTA for group size G: room for 4 query tokens of
 * the group (speculative decoding), at most 64 rows. */
#define FSA_KVC_ROW_TILES(G) ((G) <= 4 ? 1 : (G) <= 8 ? 2 : 4)
/* Query tokens per tile: the rows are tokens x the G heads of a KV head. */
#define FSA_KVC_TILE_TOKENS(G) (16 * FSA_KVC_ROW_TILES(G) >= (G) ? 16 * FSA_KVC_ROW_TILES(G) / (G) : 1)
/* Most query heads per KV head the tile holds. */
#define FSA_KVC_MAX_GROUP 64
/* The split rule (batch invariance): a sequence whose new tokens fit one tile
 * splits its selected blocks over `splits` CTAs; longer ones never split. It
 * reads only the sequence's own query length and plan constants. */
#define FSA_KVC_SEQ_SPLITS(q_len, tile_tokens, splits) \
    ((q_len) > 0 && (q_len) <= (tile_tokens) ? (splits) : 1)

typedef struct fsa_kvc_params {
    /* New query tokens and outputs, [Tq, Hq, D] by strides; lse float [Hq, Tq] or 0. */
    long long q, q_ts, q_hs;
    long long o, o_ts, o_hs;
    long long lse;
    /* Paged caches [num_pages, page_size, Hkv, D] by strides (page, token, head). */
    long long k, k_ps, k_ts, k_hs;
    long long v, v_ps, v_ts, v_hs;
    long long num_pages;
    /* int32 [batch, max_pages] with row stride bt_stride. */
    long long block_table, bt_stride, max_pages;
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
