/* Sliding-window attention backward: dq (and delta = rowsum(dout * o) into
 * the workspace), then dk and dv, on the caller's stream. No allocation, no
 * host synchronization, deterministic. */
#include "window.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#define STAGE_BWD "window-backward"

/* delta [Hq, T] floats, rounded up to the workspace alignment. */
static size_t workspace_bytes(const fsa_window_plan *plan, int64_t total_tokens)
{
    const size_t bytes = (size_t)plan->desc.num_q_heads * (size_t)total_tokens * 4;
    return (bytes + 255) & ~(size_t)255;
}

fsa_status fsa_window_plan_workspace_size_bwd(size_t *bytes_out, const fsa_window_plan *plan, int64_t total_tokens,
                                              int batch)
{
    fsa_status st = FSA_STATUS_OK;
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE_BWD, "bytes_out and plan must not be NULL");
    *bytes_out = 0;
    if (!plan->desc.backward) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_BWD, "the plan was created without backward");
    FSA_CHECK(fsa_check_tokens(STAGE_BWD, total_tokens, batch));
    *bytes_out = workspace_bytes(plan, total_tokens);
cleanup:
    return st;
}

/* Every argument, on the host, before anything is enqueued (the device is
 * required after them, so they can be checked offline). */
static fsa_status bwd_check(const void *window_plan, const void *call, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_window_plan *plan = window_plan;
    const fsa_window_bwd_args *a = call;
    const fsa_window_call c = FSA_WINDOW_CALL(a);
    const int64_t T = a->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    if (!plan->desc.backward) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_BWD, "the plan was created without backward");
    FSA_CHECK(fsa_window_check_call(STAGE_BWD, plan, &c, 1, has_work));
    if (T == 0) goto cleanup;
    const fsa_tensor_check grads[] = {
        {"dout", &a->dout, T, hq}, {"dq", &a->dq, T, hq}, {"dk", &a->dk, T, hkv}, {"dv", &a->dv, T, hkv}};
    FSA_CHECK(fsa_check_tensors(STAGE_BWD, grads, 4));
    FSA_CHECK(fsa_check_workspace(STAGE_BWD, a->workspace, a->workspace_bytes, workspace_bytes(plan, T)));
cleanup:
    return st;
}

/* dq (with delta into the workspace), then dk and dv, which read that delta. */
static fsa_status bwd_launch(const void *window_plan, const void *call, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_window_plan *plan = window_plan;
    const fsa_window_bwd_args *a = call;
    const fsa_window_call c = FSA_WINDOW_CALL(a);
    fsa_swa_params p;
    fsa_window_params_fill(&p, plan, &c);
    p.dout = fsa_view_of(&a->dout);
    p.dq = fsa_view_of(&a->dq);
    p.dk = fsa_view_of(&a->dk);
    p.dv = fsa_view_of(&a->dv);
    p.delta = (long long)a->workspace;
    const unsigned hkv = (unsigned)plan->desc.num_kv_heads;
    const uint64_t q_tiles = (uint64_t)fsa_qt_grid_tiles(a->total_tokens, a->batch, plan->group);
    const uint64_t k_tiles = (uint64_t)fsa_qt_grid_key_tiles(a->total_tokens, a->batch);
    const unsigned parts = (unsigned)fsa_qt_dkv_parts(plan->desc.head_dim, plan->desc.value_dim);
    FSA_CHECK(fsa_kernel_launch(&plan->bwd_dq, plan->ctx, q_tiles, hkv, stream, &p));
    FSA_CHECK(fsa_kernel_launch_3d(&plan->bwd_dkv, plan->ctx, k_tiles, hkv, parts, stream, &p));
cleanup:
    return st;
}

fsa_status fsa_window_attention_bwd(const fsa_window_plan *plan, const fsa_window_bwd_args *args, void *stream)
{
    static const fsa_call_frame frame = {STAGE_BWD, "fsa_window_bwd_args", sizeof(fsa_window_bwd_args),
                                         FSA_WINDOW_BWD_ARGS_FIRST_SIZE, bwd_check, bwd_launch};
    fsa_window_bwd_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
