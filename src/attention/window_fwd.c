/* Sliding-window attention: plans and the forward launch (one kernel on the
 * caller's stream; no workspace, no allocation, no host synchronization). */
#include "launch.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include "../../templates/swa_params.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_PLAN "window-plan"
#define STAGE_FWD "window-forward"

struct fsa_window_plan {
    fsa_context *ctx;
    fsa_window_attention_desc desc; /* value_dim resolved */
    int group;
    float scale;
    CUfunction fwd; /* NULL offline */
    int smem;
};

static int is_dim(int d) { return d >= 16 && d <= 256 && d % 16 == 0; }

static fsa_status validate_desc(const fsa_window_attention_desc *d)
{
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "dtype %d is neither bf16 nor f16",
                             (int)d->dtype);
    if (!is_dim(d->head_dim) || !is_dim(d->value_dim))
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                             "head_dim %d and value_dim %d: multiples of 16 from 16 to 256", d->head_dim, d->value_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1 || d->num_kv_heads > 65535 || d->num_q_heads % d->num_kv_heads != 0)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN,
                             "num_q_heads %d and num_kv_heads %d: positive, Hq a multiple of Hkv, Hkv at most 65535",
                             d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads / d->num_kv_heads > FSA_QT_MAX_GROUP)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "group size %d: at most %d query heads per KV head",
                             d->num_q_heads / d->num_kv_heads, FSA_QT_MAX_GROUP);
    if (d->window < 1)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "window %d must be >= 1", d->window);
    if (!isfinite(d->scale) || d->scale < 0.0f)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN,
                             "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))");
    return FSA_STATUS_OK;
}

fsa_status fsa_window_plan_create(fsa_window_plan **out, fsa_context *ctx, const fsa_window_attention_desc *desc)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_window_plan *plan = NULL;
    fsa_window_attention_desc d;
    char dtype[8], dk[8], dv[8], g[8];
    if (out != NULL) *out = NULL;
    if (out == NULL || ctx == NULL || desc == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE_PLAN, "out, context and descriptor must not be NULL");
    FSA_CHECK(fsa_struct_read(&d, sizeof d, desc, FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE, STAGE_PLAN,
                              "fsa_window_attention_desc"));
    if (d.value_dim == 0) d.value_dim = d.head_dim;
    FSA_CHECK(validate_desc(&d));
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE_PLAN);
    plan->ctx = ctx;
    plan->desc = d;
    plan->group = d.num_q_heads / d.num_kv_heads;
    plan->scale = d.scale > 0.0f ? d.scale : 1.0f / sqrtf((float)d.head_dim);
    plan->smem = fsa_qt_fwd_smem_bytes(d.head_dim, d.value_dim);
    if (plan->smem > ctx->max_smem_per_block)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                 "window attention needs %d bytes of shared memory; target %s allows %d", plan->smem, ctx->target,
                 ctx->max_smem_per_block);
    snprintf(dtype, sizeof dtype, "%s", d.dtype == FSA_DTYPE_BF16 ? "bf16" : "f16");
    snprintf(dk, sizeof dk, "%d", d.head_dim);
    snprintf(dv, sizeof dv, "%d", d.value_dim);
    snprintf(g, sizeof g, "%d", plan->group);
    const fsa_param params[4] = {
        {"DTYPE", dtype, ""}, {"HEAD_DIM", dk, "d"}, {"VALUE_DIM", dv, "dv"}, {"GROUP", g, "g"}};
    const fsa_kernel_request req = {"swa_fwd", params, 4, "fsa_swa_fwd"};
    FSA_CHECK(fsa_context_get_function(&plan->fwd, ctx, &req, "fsa_swa_fwd", plan->smem));
    *out = plan;
    return FSA_STATUS_OK;
cleanup:
    free(plan);
    return st;
}

void fsa_window_plan_destroy(fsa_window_plan *plan) { free(plan); }

static fsa_status validate_args(const fsa_window_plan *plan, const fsa_window_fwd_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = a->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    FSA_CHECK(fsa_check_tokens(STAGE_FWD, T, a->batch));
    if (T == 0) goto cleanup;
    if (fsa_qt_grid_tiles(T, a->batch, plan->group) > INT32_MAX)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_FWD, "%lld tokens need too many query tiles", (long long)T);
    if (a->cu_seqlens == 0) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE_FWD, "cu_seqlens must not be NULL");
    if (a->cu_seqlens % 4 != 0 || a->lse % 4 != 0)
        FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE_FWD, "cu_seqlens and lse must be 4-byte aligned");
    const fsa_tensor_check views[] = {
        {"q", &a->q, T, hq}, {"k", &a->k, T, hkv}, {"v", &a->v, T, hkv}, {"o", &a->o, T, hq}};
    FSA_CHECK(fsa_check_tensors(STAGE_FWD, views, 4));
    /* Arguments are checked first so that they can be checked without a GPU. */
    if (plan->ctx->cu == NULL)
        FSA_FAIL(FSA_STATUS_NO_DEVICE, STAGE_FWD, "the plan's context has no device (offline target %s)",
                 plan->ctx->target);
cleanup:
    return st;
}

fsa_status fsa_window_attention_fwd(const fsa_window_plan *plan, const fsa_window_fwd_args *args, void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int entered = 0;
    if (plan == NULL || args == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE_FWD, "plan and args must not be NULL");
    fsa_window_fwd_args a;
    FSA_CHECK(fsa_struct_read(&a, sizeof a, args, FSA_WINDOW_FWD_ARGS_FIRST_SIZE, STAGE_FWD, "fsa_window_fwd_args"));
    FSA_CHECK(validate_args(plan, &a));
    if (a.total_tokens == 0) goto cleanup;
    fsa_swa_params p;
    memset(&p, 0, sizeof p);
    p.q = fsa_view_of(&a.q);
    p.o = fsa_view_of(&a.o);
    p.k = fsa_view_of(&a.k);
    p.v = fsa_view_of(&a.v);
    p.lse = (long long)a.lse;
    p.cu_seqlens = (long long)a.cu_seqlens;
    p.total_tokens = a.total_tokens;
    p.batch = a.batch;
    p.scale_log2 = (double)plan->scale * FSA_LOG2E;
    p.window = plan->desc.window;
    const unsigned tiles = (unsigned)fsa_qt_grid_tiles(a.total_tokens, a.batch, plan->group);
    const fsa_cu_api *cu = plan->ctx->cu;
    void *kargs[] = {&p};
    FSA_CHECK(fsa_context_enter(plan->ctx));
    entered = 1;
    FSA_CHECK_CU(cu,
                 cu->LaunchKernel(plan->fwd, tiles, (unsigned)plan->desc.num_kv_heads, 1, FSA_QT_THREADS, 1, 1,
                                  (unsigned)plan->smem, (CUstream)stream, kargs, NULL),
                 "launch fsa_swa_fwd");
cleanup:
    if (entered) fsa_context_leave(plan->ctx);
    return st;
}
