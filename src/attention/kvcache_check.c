/* Check mode for paged-cache calls: see kvcache_check.h. */
#include "kvcache_check.h"

fsa_status fsa_kvcache_check(fsa_metadata_checker *checker, const fsa_context *ctx, const fsa_kvcache_desc *d,
                             const fsa_kvcache_args *a, CUstream stream)
{
    if (checker == NULL || a->num_query_tokens == 0 || a->batch == 0) return FSA_STATUS_OK;
    fsa_kvc_check_params p = {
        .cu_seqlens_q = (long long)a->cu_seqlens_q,
        .seqused_k = (long long)a->seqused_k,
        .block_table = (long long)a->block_table,
        .bt_stride = a->block_table_stride,
        .max_pages = a->max_pages_per_seq,
        .num_pages = a->num_pages,
        .page_size = d->page_size,
        .topk = (long long)a->topk.ptr,
        .topk_hs = a->topk.head_stride,
        .topk_ts = a->topk.token_stride,
        .topk_length = (long long)a->topk_length,
        .total_tokens = a->num_query_tokens,
        .batch = a->batch,
        .num_kv_heads = d->num_kv_heads,
        .top_k = d->top_k,
        .block_size = d->block_size,
        .result = (long long)fsa_metadata_checker_result(checker),
    };
    /* One item per cu_seqlens_q entry, block-table slot and top-k row. */
    const uint64_t work = (uint64_t)a->batch + 1 + (uint64_t)a->batch * (uint64_t)a->max_pages_per_seq +
                          (uint64_t)a->num_query_tokens * (uint64_t)d->num_kv_heads;
    fsa_check_result r;
    fsa_status st = fsa_metadata_checker_run(&r, checker, ctx, &p, work, stream);
    if (st == FSA_STATUS_OK && r.flags != 0)
        st = fsa_metadata_verdict("kvcache", &r, d->num_kv_heads, "cu_seqlens_q", "num_query_tokens");
    return st;
}
