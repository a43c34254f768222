/* Backward launch sequence. Everything goes on the caller's stream: no
 * allocation, no host synchronization, so the call can be graph-captured.
 * Per token chunk: index inversion with lists sorted by token, delta, the
 * main kernel (twice for head dims over 128), dq (FSA order: the sum of the
 * main kernel's per-pair rows; NSA order: one token-major kernel), and the
 * dK/dV partials of split blocks; then dk and dv once from the fp32
 * accumulator. */
#include "launch.h"
#include "base/status_internal.h"
#include "base/struct_size.h"

#include <string.h>

#define STAGE "backward"

/* The token chunk and workspace layout validation computed, reused by the launch. */
typedef struct bwd_setup {
    int64_t tc;
    fsa_bwd_layout layout;
} bwd_setup;

static fsa_status validate_args(bwd_setup *su, const fsa_plan *plan, const fsa_bwd_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    if (!plan->bwd_available)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "the plan was created without backward = 1");
    const fsa_call_inputs in = FSA_CALL_INPUTS(a);
    FSA_CHECK(fsa_check_inputs(STAGE, plan, &in, 1));
    if (a->total_tokens == 0) goto cleanup;
    const int64_t T = a->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    FSA_CHECK(fsa_check_tensor(STAGE, "dout", &a->dout, T, hq));
    FSA_CHECK(fsa_check_tensor(STAGE, "dq", &a->dq, T, hq));
    FSA_CHECK(fsa_check_tensor(STAGE, "dk", &a->dk, T, hkv));
    FSA_CHECK(fsa_check_tensor(STAGE, "dv", &a->dv, T, hkv));
    FSA_CHECK(fsa_bwd_setup(&su->tc, &su->layout, plan, T, a->batch, STAGE));
    FSA_CHECK(fsa_check_workspace(STAGE, a->workspace, a->workspace_bytes, su->layout.total));
    if (plan->ctx->cu == NULL)
        FSA_FAIL(FSA_STATUS_NO_DEVICE, STAGE, "the plan's context has no device (offline target %s)", plan->ctx->target);
cleanup:
    return st;
}

static void params_of(fsa_sel_params *p, const fsa_plan *plan, const fsa_bwd_args *a, const fsa_bwd_layout *l)
{
    const fsa_call_inputs in = FSA_CALL_INPUTS(a);
    fsa_params_inputs(p, plan, &in);
    fsa_params_view(&p->dout, &p->do_ts, &p->do_hs, &a->dout);
    fsa_params_view(&p->dq, &p->dq_ts, &p->dq_hs, &a->dq);
    fsa_params_view(&p->dk, &p->dk_ts, &p->dk_hs, &a->dk);
    fsa_params_view(&p->dv, &p->dv_ts, &p->dv_hs, &a->dv);
    const uint64_t ws = a->workspace;
    p->nb_total = l->nb_total;
    p->item_entries = l->item_entries;
    p->key_slices = plan->desc.block_size / plan->bwd_keys;
    p->counts = (long long)(ws + l->counts);
    p->offsets = (long long)(ws + l->offsets);
    p->work_offsets = (long long)(ws + l->work_offsets);
    p->part_offsets = (long long)(ws + l->part_offsets);
    p->work_seg = (long long)(ws + l->work_seg);
    p->work_next = (long long)(ws + l->work_next);
    p->mask = (long long)(ws + l->mask);
    p->list = (long long)(ws + l->list);
    p->list_sorted = (long long)(ws + l->list_sorted);
    p->delta = (long long)(ws + l->delta);
    p->dq_part = (long long)(ws + l->dq_part);
    p->dkv_part = (long long)(ws + l->dkv_part);
    p->dkv_acc = (long long)(ws + l->dkv_acc);
}

static fsa_status run(const fsa_plan *plan, const fsa_bwd_args *a, const bwd_setup *su, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const fsa_bwd_kernels *k = &plan->bwd;
    const int64_t T = a->total_tokens;
    const int64_t tc = su->tc;
    const fsa_bwd_layout l = su->layout;
    fsa_sel_params p;
    params_of(&p, plan, a, &l);
    const int64_t hkv = plan->desc.num_kv_heads, hq = plan->desc.num_q_heads, d = plan->desc.head_dim;
    const size_t n_counts = (size_t)(hkv * l.nb_total + 1);
    const uint64_t rows_per_block = (uint64_t)fsa_reduce_rows_per_block((int)d);
    const unsigned main_threads = (unsigned)(plan->bwd_keys / 16 * 32);
    const int d_parts = d > 128 ? 2 : 1;
    const int nsa = l.algorithm == FSA_ALGORITHM_NSA;
    const CUfunction main = nsa ? k->main_kv : k->main;
    const unsigned head_groups = (unsigned)((plan->group + 15) / 16);

    FSA_CHECK_CU(cu, cu->MemsetD32Async(a->workspace + l.dkv_acc, 0, (size_t)(T * hkv * 2 * d), stream),
                 "launch memset");
    for (int64_t t0 = 0; t0 < T; t0 += tc) {
        const int64_t cur = T - t0 < tc ? T - t0 : tc;
        p.t0 = t0;
        p.tc = cur;
        FSA_CHECK(fsa_launch_index(plan, k->count, k->scatter, a->workspace + l.counts, n_counts, stream, &p));
        FSA_CHECK(fsa_launch(plan, k->sort, n_counts - 1, 1, 256, 0, stream, &p, "launch fsa_sel_sort"));
        const uint64_t q_rows = (uint64_t)(cur * hq);
        FSA_CHECK(fsa_launch(plan, k->prep, (q_rows + rows_per_block - 1) / rows_per_block, 1, 256, 0, stream, &p,
                         "launch fsa_sel_bwd_prep"));
        const uint64_t items = ((uint64_t)(hkv * cur * plan->desc.top_k) / (uint64_t)l.item_entries + n_counts) *
                               (uint64_t)p.key_slices;
        const uint64_t grid = items < (uint64_t)plan->bwd_grid ? items : (uint64_t)plan->bwd_grid;
        for (int part = 0; part < d_parts; part++) {
            p.d_part = part;
            FSA_CHECK(fsa_launch(plan, main, grid, 1, main_threads, (unsigned)plan->bwd_smem, stream, &p,
                                 nsa ? "launch fsa_sel_bwd_main_kv" : "launch fsa_sel_bwd_main"));
        }
        p.d_part = 0;
        if (nsa)
            FSA_CHECK(fsa_launch(plan, k->dq_nsa, (uint64_t)cur, (unsigned)hkv * head_groups, FSA_BWD_NSA_THREADS,
                                 (unsigned)plan->bwd_nsa_smem, stream, &p, "launch fsa_sel_bwd_dq_nsa"));
        else
            FSA_CHECK(fsa_launch(plan, k->dq, (q_rows + rows_per_block - 1) / rows_per_block, 1, 256, 0, stream, &p,
                                 "launch fsa_sel_bwd_dq"));
        FSA_CHECK(fsa_launch(plan, k->dkv_sum, (uint64_t)((T * hkv + 7) / 8), 1, 256, 0, stream, &p,
                         "launch fsa_sel_bwd_dkv_sum"));
    }
    FSA_CHECK(fsa_launch(plan, k->dkv_store, (uint64_t)((T * hkv + 7) / 8), 1, 256, 0, stream, &p,
                     "launch fsa_sel_bwd_dkv_store"));
cleanup:
    return st;
}

fsa_status fsa_selected_attention_bwd(const fsa_plan *plan, const fsa_bwd_args *args, void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int entered = 0;
    if (plan == NULL || args == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "plan and args must not be NULL");
    /* The caller's struct may be an older, shorter version: newer fields read as zero. */
    fsa_bwd_args a;
    FSA_CHECK(fsa_struct_read(&a, sizeof a, args, FSA_BWD_ARGS_FIRST_SIZE, STAGE, "fsa_bwd_args"));
    bwd_setup su;
    FSA_CHECK(validate_args(&su, plan, &a));
    if (a.total_tokens == 0) goto cleanup;
    FSA_CHECK(fsa_context_enter(plan->ctx));
    entered = 1;
    FSA_CHECK(run(plan, &a, &su, (CUstream)stream));
cleanup:
    if (entered) fsa_context_leave(plan->ctx);
    return st;
}
