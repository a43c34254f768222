/* Compressed attention (NSA's compression branch) and the block selection it
 * drives: plans and the forward launch. Two kernels on the caller's stream,
 * no workspace, no allocation, no host synchronization. */
#include "compressed.h"
#include "metadata_check.h"

#include "base/status_internal.h"
#include "base/struct_size.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_PLAN "compressed-plan"
#define STAGE_FWD "compressed-forward"

static int is_dim(int d) { return d >= 16 && d <= 256 && d % 16 == 0; }

static fsa_status validate_desc(const fsa_compressed_attention_desc *d)
{
    fsa_status st = FSA_STATUS_OK;
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "dtype %d is neither bf16 nor f16", (int)d->dtype);
    if (!is_dim(d->head_dim) || !is_dim(d->value_dim))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "head_dim %d and value_dim %d: multiples of 16 from 16 to 256",
                 d->head_dim, d->value_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1 || d->num_kv_heads > FSA_GRID_MAX_ROWS)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "num_q_heads %d and num_kv_heads %d: 1 or more (Hkv at most %d)",
                 d->num_q_heads, d->num_kv_heads, FSA_GRID_MAX_ROWS);
    if (d->num_q_heads % d->num_kv_heads != 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "num_q_heads %d is not a multiple of num_kv_heads %d",
                 d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads / d->num_kv_heads > FSA_QT_MAX_GROUP)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "group size %d: at most %d query heads per KV head",
                 d->num_q_heads / d->num_kv_heads, FSA_QT_MAX_GROUP);
    if (d->kernel_size < 1 || d->kernel_size > 4096 || d->stride < 1 || d->stride > d->kernel_size)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN,
                 "kernel_size %d and stride %d: 1 <= stride <= kernel_size <= 4096", d->kernel_size, d->stride);
    if (!isfinite(d->scale) || d->scale < 0.0f)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))");
    if (d->backward != 0 && d->backward != 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "backward must be 0 or 1");
    if (d->top_k < 0 || d->top_k > FSA_MAX_TOP_K)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "top_k %d: 0 (no selection) to %d", d->top_k, FSA_MAX_TOP_K);
    if (d->top_k > 0) {
        const int bk = d->block_size, r = bk > 0 && bk % d->stride == 0 ? bk / d->stride : 0;
        if (r < 1 || r > FSA_CMP_SEL_KEYS || (r & (r - 1)) != 0)
            FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                     "block_size %d: a multiple of stride %d with block_size / stride a power of two up to %d", bk,
                     d->stride, FSA_CMP_SEL_KEYS);
        if (fsa_cmp_sel_halo(d->kernel_size, d->stride) > FSA_CMP_SEL_KEYS)
            FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "kernel_size %d over stride %d: at most %d strides per token",
                     d->kernel_size, d->stride, FSA_CMP_SEL_KEYS);
        if (d->init_blocks < 0 || d->local_blocks < 0)
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "init_blocks %d and local_blocks %d must not be negative",
                     d->init_blocks, d->local_blocks);
    }
cleanup:
    return st;
}

/* The caller's descriptor (maybe an older, shorter version: newer fields
 * read as zero) with value_dim resolved, checked. */
static fsa_status read_desc(fsa_compressed_attention_desc *d, const void *out, const fsa_context *ctx,
                            const fsa_compressed_attention_desc *caller)
{
    const fsa_status st = fsa_plan_desc_read(d, sizeof *d, out, ctx, caller, FSA_COMPRESSED_ATTENTION_DESC_FIRST_SIZE,
                                             STAGE_PLAN, "fsa_compressed_attention_desc");
    if (st != FSA_STATUS_OK) return st;
    if (d->value_dim == 0) d->value_dim = d->head_dim;
    return validate_desc(d);
}

/* The plan's kernels: described (launch shapes) from the configuration. */
static void describe_kernels(fsa_compressed_plan *plan, const fsa_context *ctx)
{
    const fsa_compressed_attention_desc *d = &plan->desc;
    plan->config = (fsa_kernel_config){.dtype = d->dtype, .head_dim = d->head_dim, .value_dim = d->value_dim,
                                       .group = plan->group, .block_size = d->block_size, .top_k = d->top_k,
                                       .kernel_size = d->kernel_size, .stride = d->stride,
                                       .wgmma = fsa_kernel_wgmma(ctx, d->head_dim, d->value_dim),
                                       .bwd_wgmma = fsa_kernel_bwd_wgmma(ctx, d->head_dim, d->value_dim)};
    plan->config.cmp_sel_variant = fsa_kernel_cmp_sel_variant(plan->config.wgmma, d->head_dim);
    /* The mma.sync forward's layout: the default unless the target's shared memory asks for less. */
    plan->config.qt_fwd = fsa_cmp_fwd_layout(d->head_dim, d->value_dim, plan->config.wgmma, ctx->max_smem_per_block,
                                             fsa_kernel_qt_fwd_forced());
    /* The mma.sync backward's layout, likewise. */
    if (d->backward)
        plan->config.qt_bwd = fsa_qt_bwd_layout(d->head_dim, d->value_dim, plan->config.bwd_wgmma,
                                                ctx->max_smem_per_block, fsa_kernel_qt_bwd_forced());
    fsa_kernel_describe(&plan->fwd, FSA_K_CMP_FWD, &plan->config);
    if (d->top_k > 0) fsa_kernel_describe(&plan->select, FSA_K_CMP_SELECT, &plan->config);
    if (d->backward) {
        fsa_kernel_describe(&plan->bwd_dq, FSA_K_CMP_BWD_DQ, &plan->config);
        fsa_kernel_describe(&plan->bwd_dkv, FSA_K_CMP_BWD_DKV, &plan->config);
        if (plan->config.bwd_wgmma) fsa_kernel_describe(&plan->bwd_dkv_sum, FSA_K_CMP_BWD_DKV_SUM, &plan->config);
    }
}

/* FSA_CMP_DKV_SPLITS (1, 2, 4, 8 or 16) caps the split of the dK/dV walk (1:
 * never split); the layout's cap otherwise. */
static int dkv_max_splits(void)
{
    const int v = fsa_env_int("FSA_CMP_DKV_SPLITS", 1, FSA_CMP_DKV_MAX_SPLITS, 0);
    return v > 0 && (v & (v - 1)) == 0 ? v : FSA_CMP_DKV_MAX_SPLITS;
}

fsa_status fsa_compressed_plan_create(fsa_compressed_plan **out, fsa_context *ctx,
                                      const fsa_compressed_attention_desc *desc)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_compressed_plan *plan = NULL;
    fsa_compressed_attention_desc d;
    if (out != NULL) *out = NULL;
    FSA_CHECK(read_desc(&d, out, ctx, desc));
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE_PLAN);
    plan->ctx = ctx;
    plan->desc = d;
    plan->group = d.num_q_heads / d.num_kv_heads;
    plan->scale = fsa_softmax_scale(d.scale, d.head_dim);
    plan->dkv_max_splits = dkv_max_splits();
    describe_kernels(plan, ctx);
    /* The kernels a plan does not need were not described: their shared memory is 0. */
    const fsa_kernel *described[] = {&plan->fwd, &plan->select, &plan->bwd_dq, &plan->bwd_dkv, &plan->bwd_dkv_sum};
    for (size_t i = 0; i < sizeof described / sizeof described[0]; i++)
        FSA_CHECK(fsa_kernel_check_smem(described[i], ctx, STAGE_PLAN));
    FSA_CHECK(fsa_kernel_load(&plan->fwd, FSA_K_CMP_FWD, ctx, &plan->config));
    if (d.top_k > 0) FSA_CHECK(fsa_kernel_load(&plan->select, FSA_K_CMP_SELECT, ctx, &plan->config));
    if (d.backward) {
        FSA_CHECK(fsa_kernel_load(&plan->bwd_dq, FSA_K_CMP_BWD_DQ, ctx, &plan->config));
        FSA_CHECK(fsa_kernel_load(&plan->bwd_dkv, FSA_K_CMP_BWD_DKV, ctx, &plan->config));
        if (plan->config.bwd_wgmma)
            FSA_CHECK(fsa_kernel_load(&plan->bwd_dkv_sum, FSA_K_CMP_BWD_DKV_SUM, ctx, &plan->config));
    }
    FSA_CHECK(fsa_metadata_checker_create(&plan->checker, ctx, FSA_CHECK_OFFSETS));
    *out = plan;
    plan = NULL;
cleanup:
    fsa_compressed_plan_destroy(plan);
    return st;
}

void fsa_compressed_plan_destroy(fsa_compressed_plan *plan)
{
    if (plan == NULL) return;
    fsa_metadata_checker_destroy(plan->checker, plan->ctx);
    free(plan);
}

/* CTAs along x: every sequence's tiles and a spare (fsa_qt_grid_tiles). */
fsa_status fsa_cmp_grid(int64_t *out, const fsa_compressed_plan *plan, int64_t total_tokens, int batch,
                        const char *stage)
{
    *out = fsa_qt_grid_tiles(total_tokens, batch, plan->group);
    if (*out > INT32_MAX)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage, "%lld tokens in %d sequences need too many query tiles",
                             (long long)total_tokens, batch);
    return FSA_STATUS_OK;
}

/* The selection (a forward with topk set) walks a sequence's compressed keys
 * in stages of FSA_CMP_SEL_KEYS, counted in int32: its last stage ends below
 * (positions + BK) / stride + FSA_CMP_SEL_KEYS (cmp_select.cu). Calls that
 * do not select have no such bound. */
static fsa_status check_selection_positions(const fsa_compressed_plan *plan, int64_t total_tokens, const char *stage)
{
    const int64_t d = plan->desc.stride, bk = plan->desc.block_size;
    if (total_tokens > 0 && (total_tokens - 1 + bk) / d + FSA_CMP_SEL_KEYS > INT32_MAX)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage,
                             "%lld tokens at stride %lld: the block selection counts compressed positions in int32 "
                             "(at most %lld tokens)",
                             (long long)total_tokens, (long long)d,
                             (long long)((INT32_MAX - FSA_CMP_SEL_KEYS + 1) * d - bk));
    return FSA_STATUS_OK;
}

fsa_status fsa_compressed_plan_workspace_size(size_t *bytes_out, const fsa_compressed_plan *plan, int64_t total_tokens,
                                              int batch)
{
    fsa_status st = FSA_STATUS_OK;
    int64_t tiles;
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE_PLAN, "bytes_out and plan must not be NULL");
    *bytes_out = 0;
    FSA_CHECK(fsa_check_tokens(STAGE_PLAN, total_tokens, batch));
    FSA_CHECK(fsa_cmp_grid(&tiles, plan, total_tokens, batch, STAGE_PLAN));
cleanup:
    return st;
}

fsa_status fsa_cmp_check_call(const char *stage, const fsa_compressed_plan *plan, const fsa_cmp_call *c, int backward)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = c->total_tokens, Tc = c->total_compressed;
    const int64_t hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    int64_t tiles;
    FSA_CHECK(fsa_check_tokens(stage, T, c->batch));
    if (Tc < 0 || Tc > INT32_MAX - 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "total_compressed %lld out of range (0 to %d)", (long long)Tc,
                 INT32_MAX - 1);
    if (T == 0 && Tc > 0) /* compressed tokens of no sequence: dk / dv rows no call would write */
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "total_compressed %lld without query tokens: they come from "
                 "the sequences' own tokens", (long long)Tc);
    if (T == 0) goto cleanup;
    FSA_CHECK(fsa_cmp_grid(&tiles, plan, T, c->batch, stage));
    const fsa_array_check arrays[] = {
        {"cu_seqlens", c->cu_seqlens, 1}, {"cu_seqlens_c", c->cu_seqlens_c, 1}, {"lse", c->lse, 1}};
    FSA_CHECK(fsa_check_arrays(stage, arrays, 3));
    const fsa_tensor_check views[] = {
        {"q", c->q, T, hq, 0}, {"k", c->k, Tc, hkv, 0}, {"v", c->v, Tc, hkv, 0},
        {"o", c->o, T, hq, backward ? 0 : plan->desc.value_dim}};
    FSA_CHECK(fsa_check_tensors(stage, views, 4));
    FSA_CHECK(fsa_check_float_rows(stage, "lse", c->lse, T, hq));
cleanup:
    return st;
}

/* Every argument, on the host, before anything is enqueued (the device is
 * required after them, so they can be checked offline). */
static fsa_status fwd_check(const void *compressed_plan, const void *call, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_plan *plan = compressed_plan;
    const fsa_compressed_fwd_args *a = call;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    const int64_t T = a->total_tokens, hkv = plan->desc.num_kv_heads;
    if (a->topk.ptr != 0 && plan->desc.top_k == 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_FWD, "topk is set but the plan selects nothing (top_k 0)");
    FSA_CHECK(fsa_cmp_check_call(STAGE_FWD, plan, &c, 0));
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    if (a->topk.ptr != 0) {
        FSA_CHECK(check_selection_positions(plan, T, STAGE_FWD));
        FSA_CHECK(fsa_check_index_view(STAGE_FWD, "topk", &a->topk, T, hkv));
        FSA_CHECK(fsa_check_written(STAGE_FWD, "topk", &a->topk, T, hkv, plan->desc.top_k));
    }
    if (fsa_cmp_fwd_persistent(plan->desc.head_dim, plan->desc.value_dim, plan->config.wgmma)) {
        /* A tile's key stream: at most the compressed tokens of the call, and of a sequence of T tokens. */
        const int64_t by_stride = (T - 1) / plan->desc.stride + 1;
        const uint64_t keys = (uint64_t)(a->total_compressed < by_stride ? a->total_compressed : by_stride);
        const uint64_t ks = (uint64_t)fsa_qt_fwd_keys_at(plan->desc.value_dim, plan->config.qt_fwd);
        const uint64_t jobs = (uint64_t)fsa_cmp_fwd_grid_tiles(T, a->batch, plan->group, plan->desc.head_dim,
                                                               plan->desc.value_dim, plan->config.wgmma,
                                                               plan->config.qt_fwd) *
                              (uint64_t)hkv;
        if (!fsa_kernel_persistent_items_fit(plan->ctx, jobs, (keys + ks - 1) / ks, FSA_QT_WS_PERSISTENT_STAGES))
            FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_FWD,
                     "%lld tokens over %lld compressed tokens: a persistent CTA's key stages pass the 32-bit count "
                     "of its ring", (long long)T, (long long)a->total_compressed);
    }
cleanup:
    return st;
}

fsa_status fsa_cmp_check_offsets(const char *stage, const fsa_compressed_plan *plan, const fsa_cmp_call *c,
                                 CUstream stream)
{
    const fsa_offsets_check_params p = {.cu_seqlens = (long long)c->cu_seqlens,
                                        .cu_seqlens_c = (long long)c->cu_seqlens_c,
                                        .total_tokens = c->total_tokens,
                                        .total_compressed = c->total_compressed,
                                        .batch = c->batch,
                                        .kernel_size = plan->desc.kernel_size,
                                        .stride = plan->desc.stride};
    return fsa_offsets_check(plan->checker, plan->ctx, stage, p, stream);
}

void fsa_cmp_params_fill(fsa_cmp_params *p, const fsa_compressed_plan *plan, const fsa_cmp_call *c)
{
    const fsa_compressed_attention_desc *d = &plan->desc;
    memset(p, 0, sizeof *p);
    p->q = fsa_view_of(c->q);
    p->o = fsa_view_of(c->o);
    p->k = fsa_view_of(c->k);
    p->v = fsa_view_of(c->v);
    p->lse = (long long)c->lse;
    p->cu_seqlens = (long long)c->cu_seqlens;
    p->cu_seqlens_c = (long long)c->cu_seqlens_c;
    p->total_tokens = c->total_tokens;
    p->total_cmp = c->total_compressed;
    p->batch = c->batch;
    p->scale_log2 = (double)plan->scale * FSA_LOG2E;
    p->kernel_size = d->kernel_size;
    p->stride = d->stride;
    p->init_blocks = d->init_blocks;
    p->local_blocks = d->local_blocks;
    p->num_kv_heads = d->num_kv_heads;
}

static fsa_status fwd_launch(const void *compressed_plan, const void *call, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_plan *plan = compressed_plan;
    const fsa_compressed_fwd_args *a = call;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    FSA_CHECK(fsa_cmp_check_offsets(STAGE_FWD, plan, &c, stream)); /* check mode only */
    fsa_cmp_params p;
    fsa_cmp_params_fill(&p, plan, &c);
    p.topk = fsa_view_of(&a->topk);
    const uint64_t fwd_tiles = (uint64_t)fsa_cmp_fwd_grid_tiles(a->total_tokens, a->batch, plan->group,
                                                                plan->desc.head_dim, plan->desc.value_dim,
                                                                plan->config.wgmma, plan->config.qt_fwd);
    const int sel_groups = fsa_cmp_sel_groups(plan->config.wgmma, plan->desc.head_dim, plan->desc.top_k, plan->group,
                                              plan->config.cmp_sel_variant);
    const uint64_t sel_tiles = (uint64_t)fsa_cmp_sel_grid_tiles(a->total_tokens, a->batch, plan->group,
                                                                plan->desc.head_dim, plan->desc.top_k, sel_groups);
    FSA_CHECK(fsa_kernel_launch_query_tiles(
        &plan->fwd, plan->ctx, fsa_cmp_fwd_persistent(plan->desc.head_dim, plan->desc.value_dim, plan->config.wgmma),
        fwd_tiles, (unsigned)plan->desc.num_kv_heads, stream, &p));
    /* The selection reads the lse the forward wrote: same stream, in order. */
    if (a->topk.ptr != 0) FSA_CHECK(fsa_cmp_launch(plan, &plan->select, sel_tiles, 1, stream, &p));
cleanup:
    return st;
}

fsa_status fsa_compressed_attention_fwd(const fsa_compressed_plan *plan, const fsa_compressed_fwd_args *args,
                                        void *stream)
{
    static const fsa_call_frame frame = {STAGE_FWD, "fsa_compressed_fwd_args", sizeof(fsa_compressed_fwd_args),
                                         FSA_COMPRESSED_FWD_ARGS_FIRST_SIZE, fwd_check, fwd_launch};
    fsa_compressed_fwd_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
