/* Selected attention over a paged KV cache: plan (descriptor checks, kernel
 * loading, workspace size) and the call (argument checks, one attention
 * kernel, one merge kernel when sequences split). Everything goes on the
 * caller's stream: no allocation, no host synchronization. */
#include "kvcache_check.h"
#include "launch.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGE "kvcache"

struct fsa_kvcache_plan {
    fsa_context *ctx;
    fsa_kvcache_desc desc;
    int group, tile_tokens, splits;
    float scale;
    fsa_kernel fwd, merge;
    fsa_metadata_checker *checker; /* check mode only (kvcache_check.h) */
};

static int is_pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

static fsa_status validate_desc(const fsa_kvcache_desc *d)
{
    fsa_status st = FSA_STATUS_OK;
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "dtype %d is neither bf16 nor f16", (int)d->dtype);
    if (d->head_dim < 16 || d->head_dim > 256 || d->head_dim % 16)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "head_dim %d: a multiple of 16 from 16 to 256", d->head_dim);
    if (d->value_dim < 16 || d->value_dim > 256 || d->value_dim % 16)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "value_dim %d: 0 (= head_dim) or a multiple of 16 from 16 to 256",
                 d->value_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1 || d->num_q_heads % d->num_kv_heads)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "%d query heads over %d KV heads", d->num_q_heads,
                 d->num_kv_heads);
    if (d->num_q_heads / d->num_kv_heads > FSA_KVC_MAX_GROUP)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "group %d: at most %d query heads per KV head",
                 d->num_q_heads / d->num_kv_heads, FSA_KVC_MAX_GROUP);
    if (!is_pow2_in(d->block_size, 16, 256))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "block_size %d: 16, 32, 64, 128 or 256", d->block_size);
    if (d->page_size != 1 && !is_pow2_in(d->page_size, 16, 256))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "page_size %d: 1, 16, 32, 64, 128 or 256", d->page_size);
    if (d->top_k < 1 || d->top_k > 64) FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "top_k %d: 1..64", d->top_k);
    if (d->max_batch < 1 || d->max_query_tokens < 1 || d->max_query_tokens > INT32_MAX)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "max_batch %d and max_query_tokens %lld must be positive",
                 d->max_batch, (long long)d->max_query_tokens);
    if (!isfinite(d->scale) || d->scale < 0.0f)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))");
    if (d->splits < 0 || d->splits > 64) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "splits %d: 0..64", d->splits);
cleanup:
    return st;
}

static fsa_status load_kernels(fsa_kvcache_plan *plan)
{
    const fsa_kvcache_desc *d = &plan->desc;
    const fsa_kernel_config c = {.dtype = d->dtype, .head_dim = d->head_dim, .value_dim = d->value_dim,
                                 .group = plan->group, .block_size = d->block_size, .top_k = d->top_k,
                                 .page_size = d->page_size};
    fsa_status st = fsa_kernel_load(&plan->fwd, FSA_K_KVC_FWD, plan->ctx, &c);
    if (st == FSA_STATUS_OK) st = fsa_kernel_load(&plan->merge, FSA_K_KVC_MERGE, plan->ctx, &c);
    return st;
}

fsa_status fsa_kvcache_plan_create(fsa_kvcache_plan **out, fsa_context *ctx, const fsa_kvcache_desc *caller_desc)
{
    fsa_kvcache_plan *plan = NULL;
    fsa_kvcache_desc d; /* the caller's version, newer fields zero */
    if (out != NULL) *out = NULL;
    fsa_status st = fsa_plan_desc_read(&d, sizeof d, out, ctx, caller_desc, FSA_KVCACHE_DESC_FIRST_SIZE, STAGE,
                                       "fsa_kvcache_desc");
    if (st != FSA_STATUS_OK) goto cleanup;
    FSA_APPENDED_FIELD(fsa_kvcache_desc, value_dim, FSA_KVCACHE_DESC_FIRST_SIZE);
    if (d.value_dim == 0) d.value_dim = d.head_dim;
    FSA_CHECK(validate_desc(&d));
    const fsa_kvcache_desc *desc = &d;
    const int group = d.num_q_heads / d.num_kv_heads;
    /* A quarter of the slots per share: decode at small batches gets 4x the
     * CTAs for the K = 16 of NSA, and the partials stay small beside the K/V
     * bytes at large batches. */
    const int splits = d.splits > 0 ? d.splits : (d.top_k + 3) / 4 < 16 ? (d.top_k + 3) / 4 : 16;
    FSA_CHECK_ALLOC(plan = calloc(1, sizeof *plan), STAGE);
    *plan = (fsa_kvcache_plan){.ctx = ctx, .desc = d, .group = group, .tile_tokens = fsa_kvc_tile_tokens(group),
                               .splits = splits, .scale = fsa_softmax_scale(d.scale, d.head_dim)};
    /* Dynamic and static shared memory of the attention kernel, together. */
    const int smem_all = fsa_kvc_smem_bytes(desc->head_dim, desc->value_dim, group) +
                         fsa_kvc_static_smem_bytes(group, desc->top_k);
    const int max_smem = ctx->max_smem_per_block; /* the device's, else the target's */
    if (smem_all > max_smem)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "head_dim %d, value_dim %d with group %d and top_k %d needs %d bytes of shared memory; %s allows %d",
                 desc->head_dim, desc->value_dim, group, desc->top_k, smem_all, ctx->target, max_smem);
    FSA_CHECK(load_kernels(plan));
    FSA_CHECK(fsa_metadata_checker_create(&plan->checker, ctx, FSA_CHECK_KVCACHE));
    *out = plan;
    plan = NULL;
cleanup:
    fsa_kvcache_plan_destroy(plan);
    return st;
}

void fsa_kvcache_plan_destroy(fsa_kvcache_plan *plan)
{
    if (plan == NULL) return;
    fsa_metadata_checker_destroy(plan->checker, plan->ctx);
    free(plan);
}

/* Partials of every split share: Dv floats per row of [max_batch, Hkv, splits, rows], then their lse. */
static size_t part_rows(const fsa_kvcache_plan *plan)
{
    return plan->splits <= 1 ? 0
                             : (size_t)plan->desc.max_batch * (size_t)plan->desc.num_kv_heads * (size_t)plan->splits *
                                   (size_t)fsa_kvc_rows(plan->group);
}

static size_t lse_part_offset(const fsa_kvcache_plan *plan)
{
    return (part_rows(plan) * (size_t)plan->desc.value_dim * 4 + 255) & ~(size_t)255;
}

static size_t workspace_bytes(const fsa_kvcache_plan *plan)
{
    return part_rows(plan) == 0 ? 0 : lse_part_offset(plan) + part_rows(plan) * 4;
}

fsa_status fsa_kvcache_plan_workspace_size(size_t *bytes_out, const fsa_kvcache_plan *plan)
{
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "bytes_out and plan must not be NULL");
    *bytes_out = workspace_bytes(plan);
    return FSA_STATUS_OK;
}

fsa_status fsa_kvcache_plan_info(int *tile_tokens_out, int *splits_out, const fsa_kvcache_plan *plan)
{
    if (tile_tokens_out == NULL || splits_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "outputs and plan must not be NULL");
    *tile_tokens_out = plan->tile_tokens;
    *splits_out = plan->splits;
    return FSA_STATUS_OK;
}

/* A paged cache: a tensor view over the rows of a page, plus the page stride. */
static fsa_status check_cache(const char *name, const fsa_tensor *t, int64_t page_stride, const fsa_kvcache_plan *plan)
{
    fsa_status st = fsa_check_tensor(STAGE, name, t, plan->desc.page_size, plan->desc.num_kv_heads);
    if (st == FSA_STATUS_OK && page_stride < 0)
        st = fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE, "%s page stride %lld is negative", name,
                           (long long)page_stride);
    if (st == FSA_STATUS_OK && page_stride % 8 != 0)
        st = fsa_error_set(FSA_STATUS_MISALIGNED, STAGE, "%s page stride %lld: a multiple of 8 elements", name,
                           (long long)page_stride);
    return st;
}

static fsa_status validate_args(const fsa_kvcache_plan *plan, const fsa_kvcache_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_kvcache_desc *d = &plan->desc;
    if (a->num_query_tokens < 0 || a->num_query_tokens > d->max_query_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_query_tokens %lld: the plan allows 0..%lld",
                 (long long)a->num_query_tokens, (long long)d->max_query_tokens);
    if (a->batch < 0 || a->batch > d->max_batch)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "batch %d: the plan allows 0..%d", a->batch, d->max_batch);
    if (a->num_query_tokens == 0 || a->batch == 0) goto cleanup;
    const int64_t hq = d->num_q_heads;
    FSA_CHECK(fsa_check_tensor(STAGE, "q", &a->q, a->num_query_tokens, hq));
    FSA_CHECK(fsa_check_tensor(STAGE, "o", &a->o, a->num_query_tokens, hq));
    FSA_CHECK(check_cache("k_cache", &a->k_cache, a->k_page_stride, plan));
    FSA_CHECK(check_cache("v_cache", &a->v_cache, a->v_page_stride, plan));
    if (a->cu_seqlens_q == 0 || a->block_table == 0 || a->seqused_k == 0 || a->topk.ptr == 0)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cu_seqlens_q, block_table, seqused_k and topk must not be NULL");
    if ((a->cu_seqlens_q | a->block_table | a->seqused_k | a->topk.ptr | a->topk_length | a->lse) % 4)
        FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE, "int32 and float arrays must be 4-byte aligned");
    if (a->num_pages < 1 || a->max_pages_per_seq < 1 || a->block_table_stride < 0 ||
        (a->batch > 1 && a->block_table_stride < a->max_pages_per_seq))
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                 "num_pages %lld, max_pages_per_seq %d, block_table_stride %lld: a table row holds max_pages_per_seq "
                 "entries of at least one page",
                 (long long)a->num_pages, a->max_pages_per_seq, (long long)a->block_table_stride);
    if (a->topk.head_stride < 0 || a->topk.token_stride < 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "top-k strides must be non-negative");
    FSA_CHECK(fsa_check_workspace(STAGE, workspace_bytes(plan) ? a->workspace : 256, a->workspace_bytes,
                                  workspace_bytes(plan)));
cleanup:
    return st;
}

static fsa_kvc_cache_view cache_view_of(const fsa_tensor *t, int64_t page_stride)
{
    const fsa_kvc_cache_view v = {fsa_view_of(t), page_stride};
    return v;
}

static void params_of(fsa_kvc_params *p, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a)
{
    memset(p, 0, sizeof *p);
    p->q = fsa_view_of(&a->q);
    p->o = fsa_view_of(&a->o);
    p->lse = (long long)a->lse;
    p->k = cache_view_of(&a->k_cache, a->k_page_stride);
    p->v = cache_view_of(&a->v_cache, a->v_page_stride);
    p->num_pages = a->num_pages;
    p->block_table = (long long)a->block_table;
    p->bt_stride = a->block_table_stride;
    p->max_pages = a->max_pages_per_seq;
    p->cu_q = (long long)a->cu_seqlens_q;
    p->seqused = (long long)a->seqused_k;
    p->topk = fsa_view_of(&a->topk);
    p->topk_len = (long long)a->topk_length;
    p->tq = a->num_query_tokens;
    p->batch = a->batch;
    p->num_kv_heads = plan->desc.num_kv_heads;
    p->scale_log2 = (double)plan->scale * FSA_LOG2E;
    p->splits = plan->splits;
    p->o_part = (long long)a->workspace;
    p->lse_part = (long long)(a->workspace + lse_part_offset(plan));
}

/* The attention kernel over every tile of the batch, then the merge of the
 * split sequences; inside the plan's context. */
static fsa_status launch(const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, CUstream stream)
{
    fsa_kvc_params p;
    params_of(&p, plan, a);
    const uint64_t tiles = (uint64_t)fsa_kvc_tile_grid(a->num_query_tokens, a->batch, plan->tile_tokens);
    const unsigned hkv = (unsigned)plan->desc.num_kv_heads;
    fsa_status st = fsa_kernel_launch(&plan->fwd, plan->ctx, tiles, hkv * (unsigned)plan->splits, stream, &p);
    if (st == FSA_STATUS_OK && plan->splits > 1)
        st = fsa_kernel_launch(&plan->merge, plan->ctx, (uint64_t)a->batch, hkv, stream, &p);
    return st;
}

fsa_status fsa_kvcache_attention(const fsa_kvcache_plan *plan, const fsa_kvcache_args *args, void *stream)
{
    fsa_kvcache_args a;
    fsa_status st = fsa_call_read(&a, sizeof a, plan, args, FSA_KVCACHE_ARGS_FIRST_SIZE, STAGE, "fsa_kvcache_args");
    if (st == FSA_STATUS_OK) st = validate_args(plan, &a);
    if (st != FSA_STATUS_OK || a.num_query_tokens == 0 || a.batch == 0) return st;
    st = fsa_call_enter(plan->ctx, STAGE);
    if (st != FSA_STATUS_OK) return st;
    st = fsa_kvcache_check(plan->checker, plan->ctx, &plan->desc, &a, (CUstream)stream); /* check mode only */
    if (st == FSA_STATUS_OK) st = launch(plan, &a, (CUstream)stream);
    fsa_context_leave(plan->ctx);
    return st;
}
