/* Sliding-window attention: plans, the argument checks both calls make, and
 * the forward launch (one kernel on the caller's stream; no workspace, no
 * allocation, no host synchronization). */
#include "window.h"
#include "metadata_check.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_PLAN "window-plan"
#define STAGE_FWD "window-forward"

FSA_APPENDED_FIELD(fsa_window_attention_desc, head_windows, FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE);
FSA_APPENDED_FIELD(fsa_window_attention_desc, backward, FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE);
FSA_APPENDED_FIELD(fsa_window_attention_desc, reserved, FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE);

static int is_dim(int d) { return d >= 16 && d <= 256 && d % 16 == 0; }

static fsa_status validate_desc(const fsa_window_attention_desc *d)
{
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "dtype %d is neither bf16 nor f16",
                             (int)d->dtype);
    if (!is_dim(d->head_dim) || !is_dim(d->value_dim))
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                             "head_dim %d and value_dim %d: multiples of 16 from 16 to 256", d->head_dim, d->value_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1 || d->num_kv_heads > FSA_GRID_MAX_ROWS ||
        d->num_q_heads % d->num_kv_heads != 0)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN,
                             "num_q_heads %d and num_kv_heads %d: positive, Hq a multiple of Hkv, Hkv at most %d",
                             d->num_q_heads, d->num_kv_heads, FSA_GRID_MAX_ROWS);
    if (d->num_q_heads / d->num_kv_heads > FSA_QT_MAX_GROUP)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "group size %d: at most %d query heads per KV head",
                             d->num_q_heads / d->num_kv_heads, FSA_QT_MAX_GROUP);
    if (d->head_windows == NULL && d->window < 1)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "window %d must be >= 1", d->window);
    if (d->head_windows != NULL && d->num_q_heads > FSA_WINDOW_MAX_HEAD_WINDOWS)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, STAGE_PLAN,
                             "per-head windows for %d query heads: at most %d", d->num_q_heads,
                             FSA_WINDOW_MAX_HEAD_WINDOWS);
    for (int qh = 0; d->head_windows != NULL && qh < d->num_q_heads; qh++)
        if (d->head_windows[qh] < 1)
            return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "head_windows[%d] = %d must be >= 1", qh,
                                 (int)d->head_windows[qh]);
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
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(&d, fsa_window_attention_desc, head_windows, STAGE_PLAN));
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(&d, fsa_window_attention_desc, backward, STAGE_PLAN));
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(&d, fsa_window_attention_desc, reserved, STAGE_PLAN));
    if (d.value_dim == 0) d.value_dim = d.head_dim;
    if (d.backward != 0 && d.backward != 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "backward %d must be 0 or 1", d.backward);
    FSA_CHECK(validate_desc(&d));
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE_PLAN);
    plan->ctx = ctx;
    plan->desc = d;
    plan->desc.head_windows = NULL; /* the caller's array is not kept */
    plan->group = d.num_q_heads / d.num_kv_heads;
    plan->scale = fsa_softmax_scale(d.scale, d.head_dim);
    plan->window = d.head_windows != NULL ? 0 : d.window;
    plan->widest_window = plan->window;
    for (int qh = 0; d.head_windows != NULL && qh < d.num_q_heads; qh++) {
        plan->head_windows[qh] = d.head_windows[qh];
        if (d.head_windows[qh] > plan->widest_window) plan->widest_window = d.head_windows[qh];
    }
    plan->wgmma = fsa_kernel_wgmma(ctx, d.head_dim, d.value_dim);
    plan->bwd_wgmma = fsa_kernel_bwd_wgmma(ctx, d.head_dim, d.value_dim);
    /* The mma.sync forward's layout: the default unless the target's shared memory asks for less. */
    plan->qt_fwd = fsa_swa_fwd_layout(d.head_dim, d.value_dim, plan->wgmma, ctx->max_smem_per_block,
                                      fsa_kernel_qt_fwd_forced());
    /* The mma.sync backward's layout, likewise. */
    plan->qt_bwd = d.backward ? fsa_qt_bwd_layout(d.head_dim, d.value_dim, plan->bwd_wgmma, ctx->max_smem_per_block,
                                                  fsa_kernel_qt_bwd_forced())
                              : 0;
    const fsa_kernel_config c = {.dtype = d.dtype,
                                 .head_dim = d.head_dim,
                                 .value_dim = d.value_dim,
                                 .group = plan->group,
                                 .wgmma = plan->wgmma,
                                 .bwd_wgmma = plan->bwd_wgmma,
                                 .qt_fwd = plan->qt_fwd,
                                 .qt_bwd = plan->qt_bwd};
    /* Every kernel described (and refused where the target lacks its shared memory) before any compiles. */
    const struct {
        fsa_kernel *k;
        fsa_kernel_id id;
    } kernels[] = {{&plan->fwd, FSA_K_SWA_FWD}, {&plan->bwd_dq, FSA_K_SWA_BWD_DQ}, {&plan->bwd_dkv, FSA_K_SWA_BWD_DKV}};
    const int n = d.backward ? 3 : 1;
    for (int i = 0; i < n; i++) {
        fsa_kernel_describe(kernels[i].k, kernels[i].id, &c);
        FSA_CHECK(fsa_kernel_check_smem(kernels[i].k, ctx, STAGE_PLAN));
    }
    for (int i = 0; i < n; i++) FSA_CHECK(fsa_kernel_load(kernels[i].k, kernels[i].id, ctx, &c));
    FSA_CHECK(fsa_metadata_checker_create(&plan->checker, ctx, FSA_CHECK_OFFSETS));
    *out = plan;
    return FSA_STATUS_OK;
cleanup:
    fsa_window_plan_destroy(plan);
    return st;
}

void fsa_window_plan_destroy(fsa_window_plan *plan)
{
    if (plan == NULL) return;
    fsa_metadata_checker_destroy(plan->checker, plan->ctx);
    free(plan);
}

fsa_status fsa_window_check_grid(const char *stage, const fsa_window_plan *plan, int64_t total_tokens, int batch)
{
    if (fsa_qt_grid_tiles(total_tokens, batch, plan->group) > INT32_MAX ||
        fsa_qt_grid_key_tiles(total_tokens, batch) > INT32_MAX)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage, "%lld tokens need too many tiles", (long long)total_tokens);
    return FSA_STATUS_OK;
}

fsa_status fsa_window_check_call(const char *stage, const fsa_window_plan *plan, const fsa_window_call *c,
                                 int backward, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = c->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    FSA_CHECK(fsa_check_tokens(stage, T, c->batch));
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    FSA_CHECK(fsa_window_check_grid(stage, plan, T, c->batch));
    const fsa_array_check arrays[] = {{"cu_seqlens", c->cu_seqlens, 1}, {"lse", c->lse, backward}};
    FSA_CHECK(fsa_check_arrays(stage, arrays, 2));
    const fsa_tensor_check views[] = {{"q", c->q, T, hq, 0}, {"k", c->k, T, hkv, 0}, {"v", c->v, T, hkv, 0},
                                      {"o", c->o, T, hq, backward ? 0 : plan->desc.value_dim}};
    FSA_CHECK(fsa_check_tensors(stage, views, 4));
    FSA_CHECK(fsa_check_float_rows(stage, "lse", c->lse, T, hq));
cleanup:
    return st;
}

fsa_status fsa_window_check_offsets(const char *stage, const fsa_window_plan *plan, fsa_window_call c,
                                    CUstream stream)
{
    const fsa_offsets_check_params p = {
        .cu_seqlens = (long long)c.cu_seqlens, .total_tokens = c.total_tokens, .batch = c.batch};
    return fsa_offsets_check(plan->checker, plan->ctx, stage, p, stream);
}

void fsa_window_params_fill(fsa_swa_params *p, const fsa_window_plan *plan, fsa_window_call c)
{
    *p = (fsa_swa_params){.q = fsa_view_of(c.q), .o = fsa_view_of(c.o), .k = fsa_view_of(c.k),
                          .v = fsa_view_of(c.v), .lse = (long long)c.lse, .cu_seqlens = (long long)c.cu_seqlens,
                          .total_tokens = c.total_tokens, .batch = c.batch,
                          .scale_log2 = (double)plan->scale * FSA_LOG2E, .window = plan->window,
                          .num_kv_heads = plan->desc.num_kv_heads};
    memcpy(p->head_windows, plan->head_windows, sizeof p->head_windows);
}

static fsa_status fwd_check(const void *window_plan, const void *call, int *has_work)
{
    const fsa_window_plan *plan = window_plan;
    const fsa_window_fwd_args *a = call;
    const fsa_status st = fsa_window_check_call(STAGE_FWD, plan, &(fsa_window_call)FSA_WINDOW_CALL(a), 0, has_work);
    if (st != FSA_STATUS_OK || !*has_work ||
        !fsa_qt_ws_persistent(plan->desc.head_dim, plan->desc.value_dim, plan->wgmma))
        return st;
    /* A tile's key stream: its tokens and the widest window before them (at most the call's tokens). */
    const long long window = plan->widest_window < a->total_tokens ? plan->widest_window : a->total_tokens;
    const uint64_t keys = (uint64_t)fsa_qt_fwd_tile_tokens(plan->group, plan->wgmma) + (uint64_t)window;
    const uint64_t ks = (uint64_t)fsa_qt_fwd_keys_at(plan->desc.value_dim, plan->qt_fwd);
    const uint64_t jobs = (uint64_t)fsa_qt_fwd_grid_tiles(a->total_tokens, a->batch, plan->group, plan->wgmma) *
                          (uint64_t)plan->desc.num_kv_heads;
    if (!fsa_kernel_persistent_items_fit(plan->ctx, jobs, (keys + ks - 1) / ks, FSA_QT_WS_PERSISTENT_STAGES))
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, STAGE_FWD,
                             "%lld tokens with a window of %lld: a persistent CTA's key stages pass the 32-bit count "
                             "of its ring", (long long)a->total_tokens, window);
    return FSA_STATUS_OK;
}

/* One kernel over the query tiles of every sequence, inside the plan's context:
 * a CTA per (tile, KV head), or where the forward is persistent at most a CTA
 * per SM walking those jobs. */
static fsa_status fwd_launch(const void *window_plan, const void *call, CUstream stream)
{
    const fsa_window_plan *plan = window_plan;
    const fsa_window_fwd_args *a = call;
    const fsa_status st = fsa_window_check_offsets(STAGE_FWD, plan, (fsa_window_call)FSA_WINDOW_CALL(a), stream);
    if (st != FSA_STATUS_OK) return st; /* check mode only */
    fsa_swa_params p;
    fsa_window_params_fill(&p, plan, (fsa_window_call)FSA_WINDOW_CALL(a));
    const uint64_t tiles = (uint64_t)fsa_qt_fwd_grid_tiles(a->total_tokens, a->batch, plan->group, plan->wgmma);
    return fsa_kernel_launch_query_tiles(&plan->fwd, plan->ctx,
                                         fsa_qt_ws_persistent(plan->desc.head_dim, plan->desc.value_dim, plan->wgmma),
                                         tiles, (unsigned)plan->desc.num_kv_heads, stream, &p);
}

fsa_status fsa_window_attention_fwd(const fsa_window_plan *plan, const fsa_window_fwd_args *args, void *stream)
{
    static const fsa_call_frame frame = {STAGE_FWD, "fsa_window_fwd_args", sizeof(fsa_window_fwd_args),
                                         FSA_WINDOW_FWD_ARGS_FIRST_SIZE, fwd_check, fwd_launch};
    fsa_window_fwd_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
