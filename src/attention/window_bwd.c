/* Sliding-window attention backward: dq (and delta = rowsum(dout * o) into
 * the workspace), then dk and dv, on the caller's stream. No allocation, no
 * host synchronization, deterministic. */
#include "window.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#define STAGE_BWD "window-backward"

FSA_APPENDED_FIELD(fsa_window_bwd_args, dq_add, FSA_WINDOW_BWD_ARGS_FIRST_SIZE);
FSA_APPENDED_FIELD(fsa_window_bwd_args, gate, FSA_WINDOW_BWD_ARGS_FIRST_SIZE);

fsa_status fsa_window_plan_workspace_size_bwd(size_t *bytes_out, const fsa_window_plan *plan, int64_t total_tokens,
                                              int batch)
{
    fsa_status st = fsa_qt_bwd_workspace_query(bytes_out, plan, plan ? plan->desc.backward : 0,
                                               plan ? plan->desc.num_q_heads : 0, total_tokens, batch, STAGE_BWD);
    if (st == FSA_STATUS_OK && total_tokens > 0 &&
        (st = fsa_window_check_grid(STAGE_BWD, plan, total_tokens, batch)) != FSA_STATUS_OK)
        *bytes_out = 0;
    return st;
}

/* Every argument, on the host, before anything is enqueued (the device is
 * required after them, so they can be checked offline). */
static fsa_status bwd_check(const void *window_plan, const void *call, int *has_work)
{
    const fsa_window_plan *plan = window_plan;
    const fsa_window_bwd_args *a = call;
    const fsa_window_call c = FSA_WINDOW_CALL(a);
    /* The struct's size first, whatever else the call holds (fsa.h). */
    fsa_status st = FSA_STRUCT_FIELD_WHOLE(a, fsa_window_bwd_args, dq_add, STAGE_BWD);
    if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(a, fsa_window_bwd_args, gate, STAGE_BWD);
    if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(a, fsa_window_bwd_args, gate_grad, STAGE_BWD);
    if (st != FSA_STATUS_OK) return st;
    if (!plan->desc.backward)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE_BWD, "the plan was created without backward");
    st = fsa_window_check_call(STAGE_BWD, plan, &c, 1, has_work);
    if (st != FSA_STATUS_OK || !*has_work) return st;
    const fsa_qt_grads g = {&a->dout, &a->dq, &a->dk, &a->dv,
                            &a->dq_add, &a->gate, &a->gate_grad, a->workspace, a->workspace_bytes,
                            plan->desc.head_dim, plan->desc.value_dim};
    return fsa_qt_bwd_check_grads(STAGE_BWD, &g, a->total_tokens, a->total_tokens, plan->desc.num_q_heads,
                                  plan->desc.num_kv_heads);
}

/* dq (with delta into the workspace), then dk and dv, which read that delta. */
static fsa_status bwd_launch(const void *window_plan, const void *call, CUstream stream)
{
    const fsa_window_plan *plan = window_plan;
    const fsa_window_bwd_args *a = call;
    fsa_status st = fsa_window_check_offsets(STAGE_BWD, plan, (fsa_window_call)FSA_WINDOW_CALL(a), stream);
    if (st != FSA_STATUS_OK) return st; /* check mode only */
    fsa_swa_params p;
    fsa_window_params_fill(&p, plan, (fsa_window_call)FSA_WINDOW_CALL(a));
    FSA_QT_PARAMS_GRADS(&p, a, plan->desc.num_q_heads);
    const unsigned hkv = (unsigned)plan->desc.num_kv_heads;
    const int wgb = plan->bwd_wgmma;
    const uint64_t q_tiles = (uint64_t)fsa_qt_bwd_dq_grid_tiles(a->total_tokens, a->batch, plan->group, wgb);
    const uint64_t k_tiles = (uint64_t)fsa_qt_grid_key_tiles(a->total_tokens, a->batch);
    const unsigned parts = (unsigned)fsa_qt_bwd_dkv_parts(plan->desc.head_dim, plan->desc.value_dim, wgb);
    st = fsa_kernel_launch(&plan->bwd_dq, plan->ctx, q_tiles, hkv, stream, &p);
    return st != FSA_STATUS_OK ? st : fsa_kernel_launch_3d(&plan->bwd_dkv, plan->ctx, k_tiles, hkv, parts, stream, &p);
}

fsa_status fsa_window_attention_bwd(const fsa_window_plan *plan, const fsa_window_bwd_args *args, void *stream)
{
    static const fsa_call_frame frame = {STAGE_BWD, "fsa_window_bwd_args", sizeof(fsa_window_bwd_args),
                                         FSA_WINDOW_BWD_ARGS_FIRST_SIZE, bwd_check, bwd_launch};
    fsa_window_bwd_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
