/* Compressed attention backward: dq (and delta = rowsum(dout * o) into the
 * workspace), then dk and dv, on the caller's stream. No allocation, no host
 * synchronization, deterministic. */
#include "compressed.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#define STAGE_BWD "compressed-backward"

FSA_APPENDED_FIELD(fsa_compressed_bwd_args, dq_add, FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE);
FSA_APPENDED_FIELD(fsa_compressed_bwd_args, gate, FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE);

int fsa_cmp_dkv_split_count(const fsa_compressed_plan *plan, int64_t total_cmp, int batch)
{
    if (!plan->config.bwd_wgmma || plan->ctx->sm_count < 1) return 1;
    const int64_t key_ctas = fsa_qt_grid_key_tiles(total_cmp, batch) * plan->desc.num_kv_heads;
    return fsa_cmp_dkv_splits(key_ctas, plan->ctx->sm_count, plan->dkv_max_splits);
}

/* The delta rows and gated lse words (fsa_qt_bwd_workspace_bytes), then room for a split dK/dV
 * walk's partial sums: their bound for any number of compressed tokens when
 * the walk may split (fsa_cmp_dkv_partial_bound), else none. */
fsa_status fsa_compressed_plan_workspace_size_bwd(size_t *bytes_out, const fsa_compressed_plan *plan,
                                                  int64_t total_tokens, int batch)
{
    int64_t tiles;
    fsa_status st = fsa_qt_bwd_workspace_query(bytes_out, plan, plan ? plan->desc.backward : 0,
                                               plan ? plan->desc.num_q_heads : 0, total_tokens, batch, STAGE_BWD);
    if (st == FSA_STATUS_OK && (st = fsa_cmp_grid(&tiles, plan, total_tokens, batch, STAGE_BWD)) != FSA_STATUS_OK)
        *bytes_out = 0;
    if (st == FSA_STATUS_OK && total_tokens > 0 && plan->config.bwd_wgmma && plan->dkv_max_splits > 1)
        *bytes_out += (size_t)fsa_cmp_dkv_partial_bound(plan->ctx->sm_count, plan->desc.head_dim, plan->desc.value_dim);
    return st;
}

/* Every argument, on the host, before anything is enqueued (the device is
 * required after them, so they can be checked offline). */
static fsa_status bwd_check(const void *compressed_plan, const void *call, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_plan *plan = compressed_plan;
    const fsa_compressed_bwd_args *a = call;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    const int64_t T = a->total_tokens;
    /* The struct's size first, whatever else the call holds (fsa.h). */
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(a, fsa_compressed_bwd_args, dq_add, STAGE_BWD));
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(a, fsa_compressed_bwd_args, gate, STAGE_BWD));
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(a, fsa_compressed_bwd_args, gate_grad, STAGE_BWD));
    if (!plan->desc.backward)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_BWD, "the plan was created without backward");
    FSA_CHECK(fsa_cmp_check_call(STAGE_BWD, plan, &c, 1));
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    if (fsa_qt_grid_key_tiles(a->total_compressed, a->batch) > INT32_MAX)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_BWD, "%lld compressed tokens need too many key tiles",
                 (long long)a->total_compressed);
    const fsa_qt_grads g = {&a->dout, &a->dq, &a->dk, &a->dv,
                            &a->dq_add, &a->gate, &a->gate_grad, a->workspace, a->workspace_bytes,
                            plan->desc.head_dim, plan->desc.value_dim};
    FSA_CHECK(fsa_qt_bwd_check_grads(STAGE_BWD, &g, T, a->total_compressed, plan->desc.num_q_heads,
                                     plan->desc.num_kv_heads));
    const size_t need = fsa_qt_bwd_workspace_bytes(plan->desc.num_q_heads, T) +
                        (size_t)fsa_cmp_dkv_partial_bytes(fsa_cmp_dkv_split_count(plan, a->total_compressed, a->batch),
                                                          a->total_compressed, plan->desc.num_kv_heads,
                                                          plan->desc.head_dim, plan->desc.value_dim);
    FSA_CHECK(fsa_check_workspace(STAGE_BWD, a->workspace, a->workspace_bytes, need));
cleanup:
    return st;
}

/* dq (with delta into the workspace), then dk and dv, which read that delta. */
static fsa_status bwd_launch(const void *compressed_plan, const void *call, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_plan *plan = compressed_plan;
    const fsa_compressed_bwd_args *a = call;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    const fsa_compressed_attention_desc *d = &plan->desc;
    FSA_CHECK(fsa_cmp_check_offsets(STAGE_BWD, plan, &c, stream)); /* check mode only */
    fsa_cmp_params p;
    fsa_cmp_params_fill(&p, plan, &c);
    FSA_QT_PARAMS_GRADS(&p, a, d->num_q_heads);
    const int wgb = plan->config.bwd_wgmma;
    const uint64_t q_tiles = (uint64_t)fsa_qt_bwd_dq_grid_tiles(a->total_tokens, a->batch, plan->group, wgb);
    const uint64_t k_tiles = (uint64_t)fsa_qt_grid_key_tiles(a->total_compressed, a->batch);
    const int splits = fsa_cmp_dkv_split_count(plan, a->total_compressed, a->batch);
    /* A split walk's CTAs along z (the warpgroup kernel has one part of columns). */
    const unsigned parts = splits > 1 ? (unsigned)splits : (unsigned)fsa_qt_bwd_dkv_parts(d->head_dim, d->value_dim, wgb);
    p.dkv_splits = splits;
    p.dkv_partial = (long long)a->workspace + (long long)fsa_qt_bwd_workspace_bytes(d->num_q_heads, a->total_tokens);
    FSA_CHECK(fsa_cmp_launch(plan, &plan->bwd_dq, q_tiles, 1, stream, &p));
    FSA_CHECK(fsa_cmp_launch(plan, &plan->bwd_dkv, k_tiles, parts, stream, &p));
    if (splits > 1) {
        const uint64_t per_head = (uint64_t)a->total_compressed * (uint64_t)(d->head_dim + d->value_dim) / 4;
        uint64_t blocks = (per_head + plan->bwd_dkv_sum.threads - 1) / plan->bwd_dkv_sum.threads;
        if (blocks > (uint64_t)plan->ctx->sm_count * 8) blocks = (uint64_t)plan->ctx->sm_count * 8;
        FSA_CHECK(fsa_cmp_launch(plan, &plan->bwd_dkv_sum, blocks, 1, stream, &p));
    }
cleanup:
    return st;
}

fsa_status fsa_compressed_attention_bwd(const fsa_compressed_plan *plan, const fsa_compressed_bwd_args *args,
                                        void *stream)
{
    static const fsa_call_frame frame = {STAGE_BWD, "fsa_compressed_bwd_args", sizeof(fsa_compressed_bwd_args),
                                         FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE, bwd_check, bwd_launch};
    fsa_compressed_bwd_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
