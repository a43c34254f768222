/* Forward launch sequences. Everything goes on the caller's stream: no
 * allocation, no host synchronization, so the call can be graph-captured. */
#include "plan.h"
#include "status_internal.h"

#include <math.h>
#include <string.h>

#define STAGE "forward"

static int aligned(uint64_t ptr, unsigned bytes) { return (ptr % bytes) == 0; }

static fsa_status check_tensor(const char *name, uint64_t ptr, int64_t ts, int64_t hs)
{
    if (ptr == 0) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "%s is NULL", name);
    if (!aligned(ptr, 16))
        return fsa_error_set(FSA_STATUS_MISALIGNED, STAGE, "%s is not 16-byte aligned", name);
    if (ts < 0 || hs < 0 || ts % 8 != 0 || hs % 8 != 0)
        return fsa_error_set(FSA_STATUS_MISALIGNED, STAGE,
                             "%s strides (token %lld, head %lld) must be non-negative multiples of 8 elements",
                             name, (long long)ts, (long long)hs);
    return FSA_STATUS_OK;
}

static fsa_status validate_args(const fsa_plan *plan, const fsa_fwd_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    if (a->struct_size != sizeof(fsa_fwd_args))
        FSA_FAIL(FSA_STATUS_STRUCT_SIZE, STAGE, "fsa_fwd_args.struct_size is %zu, expected %zu", a->struct_size,
                 sizeof(fsa_fwd_args));
    if (a->total_tokens < 0 || a->total_tokens > INT32_MAX - 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "total_tokens %lld out of range", (long long)a->total_tokens);
    if (a->total_tokens == 0) goto cleanup;
    if (a->batch < 1 || a->batch > a->total_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "batch %d for %lld tokens", a->batch,
                 (long long)a->total_tokens);
    if (a->max_seqlen < 0 || a->max_seqlen > a->total_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "max_seqlen %d for %lld tokens", a->max_seqlen,
                 (long long)a->total_tokens);
    FSA_CHECK(check_tensor("q", a->q, a->q_token_stride, a->q_head_stride));
    FSA_CHECK(check_tensor("k", a->k, a->k_token_stride, a->k_head_stride));
    FSA_CHECK(check_tensor("v", a->v, a->v_token_stride, a->v_head_stride));
    FSA_CHECK(check_tensor("o", a->o, a->o_token_stride, a->o_head_stride));
    if (a->topk == 0 || a->cu_seqlens == 0)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "topk and cu_seqlens must not be NULL");
    if (!aligned(a->topk, 4) || !aligned(a->cu_seqlens, 4) || !aligned(a->lse, 4))
        FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE, "topk, cu_seqlens and lse must be 4-byte aligned");
    if (a->topk_head_stride < 0 || a->topk_token_stride < 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "top-k strides must be non-negative");
    if (fsa_plan_choose(plan, a->total_tokens, NULL) == FSA_ALGORITHM_FSA) {
        fsa_fsa_layout l;
        fsa_fsa_layout_for(&l, plan, a->total_tokens, a->batch,
                           fsa_fsa_chunk_tokens(plan, a->total_tokens, a->batch));
        if (a->workspace == 0 || a->workspace_bytes < l.total)
            FSA_FAIL(FSA_STATUS_WORKSPACE_TOO_SMALL, STAGE, "the FSA path needs %zu bytes of workspace, got %zu%s",
                     l.total, a->workspace_bytes, a->workspace ? "" : " (NULL)");
        if (!aligned(a->workspace, 256)) FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE, "workspace is not 256-byte aligned");
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
    memset(p, 0, sizeof *p);
    p->q = (long long)a->q;
    p->k = (long long)a->k;
    p->v = (long long)a->v;
    p->o = (long long)a->o;
    p->q_ts = a->q_token_stride;
    p->q_hs = a->q_head_stride;
    p->k_ts = a->k_token_stride;
    p->k_hs = a->k_head_stride;
    p->v_ts = a->v_token_stride;
    p->v_hs = a->v_head_stride;
    p->o_ts = a->o_token_stride;
    p->o_hs = a->o_head_stride;
    p->topk = (long long)a->topk;
    p->topk_hs = a->topk_head_stride;
    p->topk_ts = a->topk_token_stride;
    p->cu_seqlens = (long long)a->cu_seqlens;
    p->lse = (long long)a->lse;
    p->total_tokens = a->total_tokens;
    p->batch = a->batch;
    p->num_kv_heads = plan->desc.num_kv_heads;
    p->num_q_heads = plan->desc.num_q_heads;
    p->top_k = plan->desc.top_k;
    p->scale_log2 = (double)plan->scale * 1.4426950408889634;
}

static fsa_status launch(const fsa_plan *plan, CUfunction fn, uint64_t gx, unsigned gy, unsigned threads,
                         unsigned smem, CUstream stream, fsa_sel_params *p, const char *what)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    void *args[] = {p};
    if (gx == 0 || gy == 0) return FSA_STATUS_OK;
    FSA_CHECK_CU(cu, cu->LaunchKernel(fn, (unsigned)gx, gy, 1, threads, 1, 1, smem, stream, args, NULL), what);
cleanup:
    return st;
}

static fsa_status run_nsa(const fsa_plan *plan, const fsa_fwd_args *a, CUstream stream)
{
    fsa_sel_params p;
    common_params(&p, plan, a);
    p.t0 = 0;
    p.tc = a->total_tokens;
    const unsigned head_groups = (unsigned)((plan->group + 15) / 16);
    return launch(plan, plan->fwd.nsa, (uint64_t)a->total_tokens, (unsigned)plan->desc.num_kv_heads * head_groups,
                  FSA_NSA_THREADS, (unsigned)plan->nsa_smem, stream, &p, "launch fsa_sel_fwd_nsa");
}

static fsa_status run_fsa(const fsa_plan *plan, const fsa_fwd_args *a, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const int64_t T = a->total_tokens;
    const int64_t tc = fsa_fsa_chunk_tokens(plan, T, a->batch);
    fsa_fsa_layout l;
    fsa_fsa_layout_for(&l, plan, T, a->batch, tc);

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
        FSA_CHECK_CU(cu, cu->MemsetD32Async(ws + l.counts, 0, n_counts, stream), "launch memset");
        const uint64_t row_blocks = (uint64_t)((hkv * cur + 255) / 256);
        FSA_CHECK(launch(plan, plan->fwd.count, row_blocks, 1, 256, 0, stream, &p, "launch fsa_sel_count"));
        FSA_CHECK(launch(plan, plan->fwd.scatter, row_blocks, 1, 256, 0, stream, &p, "launch fsa_sel_scatter"));
        /* Work items: at most pairs / chunk + one partial item per (head, block). */
        uint64_t items = (uint64_t)(hkv * cur * plan->desc.top_k) / (uint64_t)plan->item_entries + n_counts;
        uint64_t grid = items < (uint64_t)plan->main_grid ? items : (uint64_t)plan->main_grid;
        FSA_CHECK(launch(plan, plan->fwd.main, grid, 1, FSA_MAIN_THREADS, (unsigned)plan->main_smem, stream, &p,
                         "launch fsa_sel_fwd_main"));
        const uint64_t rows = (uint64_t)cur * (uint64_t)plan->desc.num_q_heads;
        const uint64_t per_block = (uint64_t)fsa_reduce_rows_per_block(plan->desc.head_dim);
        FSA_CHECK(launch(plan, plan->fwd.reduce, (rows + per_block - 1) / per_block, 1, 256, 0, stream, &p,
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
    FSA_CHECK(validate_args(plan, args));
    if (args->total_tokens == 0) goto cleanup;
    FSA_CHECK(fsa_context_enter(plan->ctx));
    entered = 1;
    if (fsa_plan_choose(plan, args->total_tokens, NULL) == FSA_ALGORITHM_NSA)
        FSA_CHECK(run_nsa(plan, args, (CUstream)stream));
    else
        FSA_CHECK(run_fsa(plan, args, (CUstream)stream));
cleanup:
    if (entered) fsa_context_leave(plan->ctx);
    return st;
}
