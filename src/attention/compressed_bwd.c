/* Compressed attention backward: dq (and delta = rowsum(dout * o) into the
 * workspace), then dk and dv (with few key tiles as partials of query ranges,
 * summed in order by a third kernel), on the caller's stream. No allocation,
 * no host synchronization, deterministic. */
#include "compressed.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#define STAGE_BWD "compressed-backward"

/* delta [Hq, T] floats, rounded up to the workspace alignment. */
static size_t delta_bytes(const fsa_compressed_plan *plan, int64_t total_tokens)
{
    const size_t bytes = (size_t)plan->desc.num_q_heads * (size_t)total_tokens * 4;
    return (bytes + 255) & ~(size_t)255;
}

/* The partials' bytes for `key_tiles` CTAs along x with `splits` ranges. */
static size_t partial_bytes(const fsa_compressed_plan *plan, int splits, int64_t key_tiles)
{
    const fsa_compressed_attention_desc *d = &plan->desc;
    return (size_t)fsa_cmp_dkv_partial_bytes(splits, key_tiles, d->num_kv_heads, d->head_dim, d->value_dim);
}

static int rule_splits(const fsa_compressed_plan *plan, int64_t key_tiles)
{
    const fsa_compressed_attention_desc *d = &plan->desc;
    return fsa_cmp_dkv_splits(key_tiles, d->num_kv_heads, fsa_cmp_dkv_parts(d->head_dim, d->value_dim));
}

/* Room for the partials: the most any compression of T tokens in B
 * sequences with the plan's stride can ask for (Tc <= T / stride + B, so at
 * most that many key tiles). */
static size_t partial_room(const fsa_compressed_plan *plan, int64_t total_tokens, int batch)
{
    const int64_t tiles = fsa_cmp_grid_key_tiles(total_tokens / plan->desc.stride + batch, batch);
    size_t most = 0;
    for (int64_t kt = 1; kt <= tiles && kt <= FSA_CMP_DKV_MIN_CTAS; kt++) {
        const size_t b = partial_bytes(plan, rule_splits(plan, kt), kt);
        most = b > most ? b : most;
    }
    return most;
}

/* Splits for the call's key tiles: the rule's, fewer (down to none) where an
 * unusual Tc would need more room than the workspace has. Depends on the
 * shapes only, so the same inputs give the same bits. */
static int call_splits(const fsa_compressed_plan *plan, int64_t key_tiles, size_t room)
{
    int s = rule_splits(plan, key_tiles);
    while (s > 1 && partial_bytes(plan, s, key_tiles) > room) s--;
    return s;
}

static size_t workspace_bytes(const fsa_compressed_plan *plan, int64_t total_tokens, int batch)
{
    return delta_bytes(plan, total_tokens) + partial_room(plan, total_tokens, batch);
}

fsa_status fsa_compressed_plan_workspace_size_bwd(size_t *bytes_out, const fsa_compressed_plan *plan,
                                                  int64_t total_tokens, int batch)
{
    fsa_status st = FSA_STATUS_OK;
    int64_t tiles;
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE_BWD, "bytes_out and plan must not be NULL");
    *bytes_out = 0;
    if (!plan->desc.backward)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_BWD, "the plan was created without backward");
    FSA_CHECK(fsa_check_tokens(STAGE_BWD, total_tokens, batch));
    FSA_CHECK(fsa_cmp_grid(&tiles, plan, total_tokens, batch, STAGE_BWD));
    *bytes_out = workspace_bytes(plan, total_tokens, batch);
cleanup:
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
    const int64_t T = a->total_tokens, Tc = a->total_compressed;
    const int64_t hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    if (!plan->desc.backward)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_BWD, "the plan was created without backward");
    FSA_CHECK(fsa_cmp_check_call(STAGE_BWD, plan, &c));
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    const fsa_tensor_check grads[] = {
        {"dout", &a->dout, T, hq}, {"dq", &a->dq, T, hq}, {"dk", &a->dk, Tc, hkv}, {"dv", &a->dv, Tc, hkv}};
    FSA_CHECK(fsa_check_tensors(STAGE_BWD, grads, 4));
    if (fsa_cmp_grid_key_tiles(Tc, a->batch) > INT32_MAX)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_BWD, "%lld compressed tokens need too many key tiles", (long long)Tc);
    FSA_CHECK(fsa_check_workspace(STAGE_BWD, a->workspace, a->workspace_bytes, workspace_bytes(plan, T, a->batch)));
cleanup:
    return st;
}

/* dq (with delta into the workspace), then dk and dv, which read that delta
 * (and their sum, when split). */
static fsa_status bwd_launch(const void *compressed_plan, const void *call, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_plan *plan = compressed_plan;
    const fsa_compressed_bwd_args *a = call;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    const fsa_compressed_attention_desc *d = &plan->desc;
    fsa_cmp_params p;
    fsa_cmp_params_fill(&p, plan, &c);
    p.dout = fsa_view_of(&a->dout);
    p.dq = fsa_view_of(&a->dq);
    p.dk = fsa_view_of(&a->dk);
    p.dv = fsa_view_of(&a->dv);
    const uint64_t q_tiles =
        (uint64_t)fsa_cmp_dq_grid_tiles(a->total_tokens, a->batch, plan->group, d->head_dim, d->value_dim);
    const uint64_t k_tiles = (uint64_t)fsa_cmp_grid_key_tiles(a->total_compressed, a->batch);
    const unsigned parts = (unsigned)fsa_cmp_dkv_parts(d->head_dim, d->value_dim);
    const size_t deltas = delta_bytes(plan, a->total_tokens);
    const int splits = call_splits(plan, (int64_t)k_tiles, partial_room(plan, a->total_tokens, a->batch));
    p.delta = (long long)a->workspace;
    p.dkv_splits = splits;
    p.dkv_partial = (long long)(a->workspace + deltas);
    FSA_CHECK(fsa_cmp_launch(plan, &plan->bwd_dq, q_tiles, 1, stream, &p));
    FSA_CHECK(fsa_cmp_launch(plan, &plan->bwd_dkv, k_tiles, parts * (unsigned)splits, stream, &p));
    if (splits > 1) FSA_CHECK(fsa_cmp_launch(plan, &plan->bwd_sum, k_tiles, 1, stream, &p));
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
