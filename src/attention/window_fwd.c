/* Sliding-window attention: plans and the forward launch (one kernel on the
 * caller's stream; no workspace, no allocation, no host synchronization). */
#include "launch.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include "../../templates/swa_params.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_PLAN "window-plan"
#define STAGE_FWD "window-forward"

struct fsa_window_plan {
    fsa_context *ctx; /* first: the call frame finds it here */
    fsa_window_attention_desc desc; /* value_dim resolved */
    int group;
    float scale;
    fsa_kernel fwd; /* fn NULL offline */
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
    if (out != NULL) *out = NULL;
    FSA_CHECK(fsa_plan_desc_read(&d, sizeof d, out, ctx, desc, FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE, STAGE_PLAN,
                                 "fsa_window_attention_desc"));
    if (d.value_dim == 0) d.value_dim = d.head_dim;
    FSA_CHECK(validate_desc(&d));
    plan = malloc(sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE_PLAN);
    *plan = (fsa_window_plan){
        .ctx = ctx, .desc = d, .group = d.num_q_heads / d.num_kv_heads, .scale = fsa_softmax_scale(d.scale, d.head_dim)};
    const fsa_kernel_config c = {
        .dtype = d.dtype, .head_dim = d.head_dim, .value_dim = d.value_dim, .group = plan->group};
    fsa_kernel_describe(&plan->fwd, FSA_K_SWA_FWD, &c);
    if ((int)plan->fwd.smem > ctx->max_smem_per_block)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                 "window attention needs %u bytes of shared memory; target %s allows %d", plan->fwd.smem, ctx->target,
                 ctx->max_smem_per_block);
    FSA_CHECK(fsa_kernel_load(&plan->fwd, FSA_K_SWA_FWD, ctx, &c));
    *out = plan;
    return FSA_STATUS_OK;
cleanup:
    free(plan);
    return st;
}

void fsa_window_plan_destroy(fsa_window_plan *plan) { free(plan); }

/* Every argument, on the host, before anything is enqueued (the device is
 * required after them, so they can be checked offline). */
static fsa_status check_args(const void *window_plan, const void *call, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_window_plan *plan = window_plan;
    const fsa_window_fwd_args *a = call;
    const int64_t T = a->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    FSA_CHECK(fsa_check_tokens(STAGE_FWD, T, a->batch));
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    if (fsa_qt_grid_tiles(T, a->batch, plan->group) > INT32_MAX)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_FWD, "%lld tokens need too many query tiles", (long long)T);
    if (a->cu_seqlens == 0) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE_FWD, "cu_seqlens must not be NULL");
    if (a->cu_seqlens % 4 != 0 || a->lse % 4 != 0)
        FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE_FWD, "cu_seqlens and lse must be 4-byte aligned");
    const fsa_tensor_check views[] = {
        {"q", &a->q, T, hq}, {"k", &a->k, T, hkv}, {"v", &a->v, T, hkv}, {"o", &a->o, T, hq}};
    FSA_CHECK(fsa_check_tensors(STAGE_FWD, views, 4));
cleanup:
    return st;
}

/* One kernel over the query tiles of every sequence, inside the plan's context. */
static fsa_status launch(const void *window_plan, const void *call, CUstream stream)
{
    const fsa_window_plan *plan = window_plan;
    const fsa_window_fwd_args *a = call;
    fsa_swa_params p;
    memset(&p, 0, sizeof p);
    p.q = fsa_view_of(&a->q);
    p.o = fsa_view_of(&a->o);
    p.k = fsa_view_of(&a->k);
    p.v = fsa_view_of(&a->v);
    p.lse = (long long)a->lse;
    p.cu_seqlens = (long long)a->cu_seqlens;
    p.total_tokens = a->total_tokens;
    p.batch = a->batch;
    p.scale_log2 = (double)plan->scale * FSA_LOG2E;
    p.window = plan->desc.window;
    const uint64_t tiles = (uint64_t)fsa_qt_grid_tiles(a->total_tokens, a->batch, plan->group);
    return fsa_kernel_launch(&plan->fwd, plan->ctx, tiles, (unsigned)plan->desc.num_kv_heads, stream, &p);
}

fsa_status fsa_window_attention_fwd(const fsa_window_plan *plan, const fsa_window_fwd_args *args, void *stream)
{
    static const fsa_call_frame frame = {STAGE_FWD, "fsa_window_fwd_args", sizeof(fsa_window_fwd_args),
                                         FSA_WINDOW_FWD_ARGS_FIRST_SIZE, check_args, launch};
    fsa_window_fwd_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
