/* Compressed attention (NSA's compression branch) and the block selection it
 * drives: plans and the forward launch. Two kernels on the caller's stream,
 * no workspace, no allocation, no host synchronization. */
#include "compressed.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <stdio.h>
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
    if (d->num_q_heads < 1 || d->num_kv_heads < 1 || d->num_kv_heads > 65535)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN,
                 "num_q_heads %d and num_kv_heads %d: 1 or more (Hkv at most 65535)", d->num_q_heads, d->num_kv_heads);
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
static fsa_status read_desc(fsa_compressed_attention_desc *d, const fsa_compressed_attention_desc *caller)
{
    const fsa_status st = fsa_struct_read(d, sizeof *d, caller, FSA_COMPRESSED_ATTENTION_DESC_FIRST_SIZE, STAGE_PLAN,
                                          "fsa_compressed_attention_desc");
    if (st != FSA_STATUS_OK) return st;
    if (d->value_dim == 0) d->value_dim = d->head_dim;
    return validate_desc(d);
}

/* The template parameters, as text, and the kernel requests built on them. */
typedef struct cmp_kernel_params {
    char dtype[8], dk[8], dv[8], g[8], bk[8], k[8], l[8], s[8];
    fsa_param fwd[4];    /* DTYPE, HEAD_DIM, VALUE_DIM, GROUP */
    fsa_param select[7]; /* DTYPE, HEAD_DIM, GROUP, BLOCK_SIZE, TOP_K, KERNEL_SIZE, STRIDE */
} cmp_kernel_params;

static void kernel_params_init(cmp_kernel_params *kp, const fsa_compressed_attention_desc *d, int group)
{
    snprintf(kp->dtype, sizeof kp->dtype, "%s", d->dtype == FSA_DTYPE_BF16 ? "bf16" : "f16");
    snprintf(kp->dk, sizeof kp->dk, "%d", d->head_dim);
    snprintf(kp->dv, sizeof kp->dv, "%d", d->value_dim);
    snprintf(kp->g, sizeof kp->g, "%d", group);
    snprintf(kp->bk, sizeof kp->bk, "%d", d->block_size);
    snprintf(kp->k, sizeof kp->k, "%d", d->top_k);
    snprintf(kp->l, sizeof kp->l, "%d", d->kernel_size);
    snprintf(kp->s, sizeof kp->s, "%d", d->stride);
    const fsa_param dtype = {"DTYPE", kp->dtype, ""}, dk = {"HEAD_DIM", kp->dk, "d"}, g = {"GROUP", kp->g, "g"};
    kp->fwd[0] = dtype;
    kp->fwd[1] = dk;
    kp->fwd[2] = (fsa_param){"VALUE_DIM", kp->dv, "dv"};
    kp->fwd[3] = g;
    kp->select[0] = dtype;
    kp->select[1] = dk;
    kp->select[2] = g;
    kp->select[3] = (fsa_param){"BLOCK_SIZE", kp->bk, "bk"};
    kp->select[4] = (fsa_param){"TOP_K", kp->k, "k"};
    kp->select[5] = (fsa_param){"KERNEL_SIZE", kp->l, "l"};
    kp->select[6] = (fsa_param){"STRIDE", kp->s, "s"};
}

fsa_status fsa_compressed_plan_create(fsa_compressed_plan **out, fsa_context *ctx,
                                      const fsa_compressed_attention_desc *desc)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_compressed_plan *plan = NULL;
    fsa_compressed_attention_desc d;
    if (out != NULL) *out = NULL;
    if (out == NULL || ctx == NULL || desc == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE_PLAN, "out, context and descriptor must not be NULL");
    FSA_CHECK(read_desc(&d, desc));
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE_PLAN);
    plan->ctx = ctx;
    plan->desc = d;
    plan->group = d.num_q_heads / d.num_kv_heads;
    plan->scale = d.scale > 0.0f ? d.scale : 1.0f / sqrtf((float)d.head_dim);
    plan->fwd_smem = fsa_qt_fwd_smem_bytes(d.head_dim, d.value_dim);
    if (d.top_k > 0)
        plan->select_smem =
            fsa_cmp_sel_smem_bytes(d.head_dim, plan->group, d.kernel_size, d.stride, d.block_size, d.top_k);
    if (d.backward) {
        plan->dq_smem = fsa_cmp_dq_smem_bytes(d.head_dim, d.value_dim);
        plan->dkv_smem = fsa_cmp_dkv_smem_bytes(d.head_dim, d.value_dim);
    }
    const int max_smem = ctx->max_smem_per_block;
    if (plan->fwd_smem > max_smem || plan->select_smem > max_smem || plan->dq_smem > max_smem ||
        plan->dkv_smem > max_smem)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                 "compressed attention needs %d bytes of shared memory (selection %d, backward %d and %d); target %s "
                 "allows %d",
                 plan->fwd_smem, plan->select_smem, plan->dq_smem, plan->dkv_smem, ctx->target, max_smem);

    cmp_kernel_params kp;
    kernel_params_init(&kp, &d, plan->group);
    const fsa_kernel_request fwd = {"cmp_fwd", kp.fwd, 4, "fsa_cmp_fwd"};
    FSA_CHECK(fsa_context_get_function(&plan->fwd, ctx, &fwd, "fsa_cmp_fwd", plan->fwd_smem));
    if (d.top_k > 0) {
        const fsa_kernel_request select = {"cmp_select", kp.select, 7, "fsa_cmp_select"};
        FSA_CHECK(fsa_context_get_function(&plan->select, ctx, &select, "fsa_cmp_select", plan->select_smem));
    }
    if (d.backward) {
        const fsa_kernel_request bwd = {"cmp_bwd", kp.fwd, 4, "fsa_cmp_bwd_dq\nfsa_cmp_bwd_dkv"};
        FSA_CHECK(fsa_context_get_function(&plan->bwd_dq, ctx, &bwd, "fsa_cmp_bwd_dq", plan->dq_smem));
        FSA_CHECK(fsa_context_get_function(&plan->bwd_dkv, ctx, &bwd, "fsa_cmp_bwd_dkv", plan->dkv_smem));
    }
    *out = plan;
    plan = NULL;
cleanup:
    free(plan);
    return st;
}

void fsa_compressed_plan_destroy(fsa_compressed_plan *plan) { free(plan); }

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

fsa_status fsa_cmp_check_call(const char *stage, const fsa_compressed_plan *plan, const fsa_cmp_call *c)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = c->total_tokens, Tc = c->total_compressed;
    const int64_t hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    int64_t tiles;
    FSA_CHECK(fsa_check_tokens(stage, T, c->batch));
    if (Tc < 0 || Tc > INT32_MAX - 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "total_compressed %lld out of range (0 to %d)", (long long)Tc,
                 INT32_MAX - 1);
    if (T == 0) goto cleanup;
    FSA_CHECK(fsa_cmp_grid(&tiles, plan, T, c->batch, stage));
    if (c->cu_seqlens == 0 || c->cu_seqlens_c == 0 || c->lse == 0)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, stage, "cu_seqlens, cu_seqlens_c and lse must not be NULL");
    if (c->cu_seqlens % 4 != 0 || c->cu_seqlens_c % 4 != 0 || c->lse % 4 != 0)
        FSA_FAIL(FSA_STATUS_MISALIGNED, stage, "cu_seqlens, cu_seqlens_c and lse must be 4-byte aligned");
    const fsa_tensor_check views[] = {
        {"q", c->q, T, hq}, {"k", c->k, Tc, hkv}, {"v", c->v, Tc, hkv}, {"o", c->o, T, hq}};
    FSA_CHECK(fsa_check_tensors(stage, views, 4));
cleanup:
    return st;
}

fsa_status fsa_cmp_check_device(const char *stage, const fsa_compressed_plan *plan)
{
    /* Arguments are checked first so that they can be checked without a GPU. */
    if (plan->ctx->cu == NULL)
        return fsa_error_set(FSA_STATUS_NO_DEVICE, stage, "the plan's context has no device (offline target %s)",
                             plan->ctx->target);
    return FSA_STATUS_OK;
}

/* Every argument, on the host, before anything is enqueued. */
static fsa_status fwd_validate(const fsa_compressed_plan *plan, const void *local, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_fwd_args *a = local;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    const int64_t T = a->total_tokens, hkv = plan->desc.num_kv_heads;
    if (a->topk.ptr != 0 && plan->desc.top_k == 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_FWD, "topk is set but the plan selects nothing (top_k 0)");
    FSA_CHECK(fsa_cmp_check_call(STAGE_FWD, plan, &c));
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    if (a->topk.ptr % 4 != 0) FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE_FWD, "topk must be 4-byte aligned");
    if ((hkv > 1 && a->topk.head_stride < 0) || (T > 1 && a->topk.token_stride < 0))
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_FWD, "topk strides must not be negative");
    FSA_CHECK(fsa_cmp_check_device(STAGE_FWD, plan));
cleanup:
    return st;
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
}

fsa_status fsa_cmp_launch(const fsa_compressed_plan *plan, CUfunction fn, unsigned smem, uint64_t gx, unsigned gz,
                          CUstream stream, fsa_cmp_params *p, const char *what)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    void *args[] = {p};
    FSA_CHECK_CU(cu,
                 cu->LaunchKernel(fn, (unsigned)gx, (unsigned)plan->desc.num_kv_heads, gz, FSA_QT_THREADS, 1, 1, smem,
                                  stream, args, NULL),
                 what);
cleanup:
    return st;
}

fsa_status fsa_cmp_run(const fsa_cmp_op *op, void *local, const fsa_compressed_plan *plan, const void *args,
                       void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int has_work = 0;
    if (plan == NULL || args == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, op->stage, "plan and args must not be NULL");
    FSA_CHECK(fsa_struct_read(local, op->args_size, args, op->args_first_size, op->stage, op->args_type));
    FSA_CHECK(op->validate(plan, local, &has_work));
    if (!has_work) goto cleanup;
    FSA_CHECK(fsa_context_enter(plan->ctx));
    st = op->launch(plan, local, (CUstream)stream);
    fsa_context_leave(plan->ctx);
cleanup:
    return st;
}

static fsa_status fwd_launch(const fsa_compressed_plan *plan, const void *local, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_compressed_fwd_args *a = local;
    const fsa_cmp_call c = FSA_CMP_CALL(a);
    fsa_cmp_params p;
    fsa_cmp_params_fill(&p, plan, &c);
    p.topk = fsa_view_of(&a->topk);
    const uint64_t tiles = (uint64_t)fsa_qt_grid_tiles(a->total_tokens, a->batch, plan->group);
    FSA_CHECK(fsa_cmp_launch(plan, plan->fwd, (unsigned)plan->fwd_smem, tiles, 1, stream, &p, "launch fsa_cmp_fwd"));
    /* The selection reads the lse the forward wrote: same stream, in order. */
    if (a->topk.ptr != 0)
        FSA_CHECK(fsa_cmp_launch(plan, plan->select, (unsigned)plan->select_smem, tiles, 1, stream, &p,
                                 "launch fsa_cmp_select"));
cleanup:
    return st;
}

fsa_status fsa_compressed_attention_fwd(const fsa_compressed_plan *plan, const fsa_compressed_fwd_args *args,
                                        void *stream)
{
    static const fsa_cmp_op op = {STAGE_FWD, "fsa_compressed_fwd_args", sizeof(fsa_compressed_fwd_args),
                                  FSA_COMPRESSED_FWD_ARGS_FIRST_SIZE, fwd_validate, fwd_launch};
    fsa_compressed_fwd_args local;
    return fsa_cmp_run(&op, &local, plan, args, stream);
}
