/* Forward launch sequences. Everything goes on the caller's stream: no
 * allocation, no host synchronization, so the call can be graph-captured. */
#include "launch.h"
#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <string.h>

#define STAGE "forward"

/* What validation decided, reused by the launch: the path, and for the FSA
 * path the token chunk and workspace layout. */
typedef struct fwd_setup {
    fsa_algorithm algorithm;
    int64_t tc;
    fsa_fsa_layout layout;
} fwd_setup;

static fsa_status validate_args(fwd_setup *su, const fsa_plan *plan, const fsa_fwd_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_call_inputs in = FSA_CALL_INPUTS(a);
    FSA_CHECK(fsa_check_inputs(STAGE, plan, &in, 0));
    if (a->total_tokens == 0) goto cleanup;
    su->algorithm = fsa_plan_choose(plan, a->total_tokens, NULL);
    if (su->algorithm == FSA_ALGORITHM_FSA) {
        FSA_CHECK(fsa_fsa_setup(&su->tc, &su->layout, plan, a->total_tokens, a->batch, STAGE));
        FSA_CHECK(fsa_check_workspace(STAGE, a->workspace, a->workspace_bytes, su->layout.total));
    }
    /* Arguments are checked first so that they can be checked without a GPU. */
    if (plan->ctx->cu == NULL)
        FSA_FAIL(FSA_STATUS_NO_DEVICE, STAGE, "the plan's context has no device (offline target %s)",
                 plan->ctx->target);
cleanup:
    return st;
}

static void common_params(fsa_sel_params *p, const fsa_plan *plan, const fsa_fwd_args *a)
{
    const fsa_call_inputs in = FSA_CALL_INPUTS(a);
    fsa_params_inputs(p, plan, &in);
}

static fsa_status run_nsa(const fsa_plan *plan, const fsa_fwd_args *a, CUstream stream)
{
    fsa_sel_params p;
    common_params(&p, plan, a);
    p.t0 = 0;
    p.tc = a->total_tokens;
    const unsigned head_groups = (unsigned)((plan->group + 15) / 16);
    return fsa_launch(plan, plan->fwd.nsa, (uint64_t)a->total_tokens, (unsigned)plan->desc.num_kv_heads * head_groups,
                  FSA_NSA_THREADS, (unsigned)plan->nsa_smem, stream, &p, "launch fsa_sel_fwd_nsa");
}

static fsa_status run_fsa(const fsa_plan *plan, const fsa_fwd_args *a, const fwd_setup *su, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = a->total_tokens;
    const int64_t tc = su->tc;
    const fsa_fsa_layout l = su->layout;

    fsa_sel_params p;
    common_params(&p, plan, a);
    const uint64_t ws = a->workspace;
    p.nb_total = l.nb_total;
    p.item_entries = plan->item_entries;
    p.counts = (long long)(ws + l.counts);
    p.offsets = (long long)(ws + l.offsets);
    p.work_offsets = (long long)(ws + l.work_offsets);
    p.work_seg = (long long)(ws + l.work_seg);
    p.mask = (long long)(ws + l.mask);
    p.list = (long long)(ws + l.list);
    p.lse_part = (long long)(ws + l.lse_part);
    p.o_part = (long long)(ws + l.o_part);
    const int64_t hkv = plan->desc.num_kv_heads;
    const size_t n_counts = (size_t)(hkv * l.nb_total + 1);

    for (int64_t t0 = 0; t0 < T; t0 += tc) {
        const int64_t cur = T - t0 < tc ? T - t0 : tc;
        p.t0 = t0;
        p.tc = cur;
        FSA_CHECK(fsa_launch_index(plan, plan->fwd.count, plan->fwd.scatter, ws + l.counts, n_counts, stream, &p));
        /* Work items: at most pairs / chunk + one partial item per (head, block). */
        uint64_t items = (uint64_t)(hkv * cur * plan->desc.top_k) / (uint64_t)plan->item_entries + n_counts;
        uint64_t grid = items < (uint64_t)plan->main_grid ? items : (uint64_t)plan->main_grid;
        FSA_CHECK(fsa_launch(plan, plan->fwd.main, grid, 1, FSA_MAIN_THREADS, (unsigned)plan->main_smem, stream, &p,
                         "launch fsa_sel_fwd_main"));
        const uint64_t rows = (uint64_t)cur * (uint64_t)plan->desc.num_q_heads;
        const uint64_t per_block = (uint64_t)fsa_reduce_rows_per_block(plan->desc.head_dim);
        FSA_CHECK(fsa_launch(plan, plan->fwd.reduce, (rows + per_block - 1) / per_block, 1, 256, 0, stream, &p,
                         "launch fsa_sel_fwd_reduce"));
    }
cleanup:
    return st;
}

fsa_status fsa_selected_attention_fwd(const fsa_plan *plan, const fsa_fwd_args *args, void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int entered = 0;
    if (plan == NULL || args == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "plan and args must not be NULL");
    /* The caller's struct may be an older, shorter version: newer fields read as zero. */
    fsa_fwd_args a;
    FSA_CHECK(fsa_struct_read(&a, sizeof a, args, FSA_FWD_ARGS_FIRST_SIZE, STAGE, "fsa_fwd_args"));
    fwd_setup su;
    FSA_CHECK(validate_args(&su, plan, &a));
    if (a.total_tokens == 0) goto cleanup;
    FSA_CHECK(fsa_context_enter(plan->ctx));
    entered = 1;
    if (su.algorithm == FSA_ALGORITHM_NSA)
        FSA_CHECK(run_nsa(plan, &a, (CUstream)stream));
    else
        FSA_CHECK(run_fsa(plan, &a, &su, (CUstream)stream));
cleanup:
    if (entered) fsa_context_leave(plan->ctx);
    return st;
}
