/* Backward launch sequence. Everything goes on the caller's stream: no
 * allocation, no host synchronization, so the call can be graph-captured.
 * Per token chunk: index inversion with lists sorted by token, delta, the
 * main kernel (twice for head dims over 128), dq per token, and the dK/dV
 * partials of split blocks; then dk and dv once from the fp32 accumulator. */
#include "plan.h"
#include "status_internal.h"

#include <string.h>

#define STAGE "backward"

static int aligned(uint64_t ptr, unsigned bytes) { return (ptr % bytes) == 0; }

static fsa_status check_tensor(const char *name, uint64_t ptr, int64_t ts, int64_t hs)
{
    if (ptr == 0) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "%s is NULL", name);
    if (!aligned(ptr, 16)) return fsa_error_set(FSA_STATUS_MISALIGNED, STAGE, "%s is not 16-byte aligned", name);
    if (ts < 0 || hs < 0 || ts % 8 != 0 || hs % 8 != 0)
        return fsa_error_set(FSA_STATUS_MISALIGNED, STAGE,
                             "%s strides (token %lld, head %lld) must be non-negative multiples of 8 elements", name,
                             (long long)ts, (long long)hs);
    return FSA_STATUS_OK;
}

static fsa_status validate_args(const fsa_plan *plan, const fsa_bwd_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    if (a->struct_size != sizeof(fsa_bwd_args))
        FSA_FAIL(FSA_STATUS_STRUCT_SIZE, STAGE, "fsa_bwd_args.struct_size is %zu, expected %zu", a->struct_size,
                 sizeof(fsa_bwd_args));
    if (!plan->bwd_available)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "the plan was created without backward = 1");
    if (a->total_tokens < 0 || a->total_tokens > INT32_MAX - 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "total_tokens %lld out of range", (long long)a->total_tokens);
    if (a->total_tokens == 0) goto cleanup;
    if (a->batch < 1 || a->batch > a->total_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "batch %d for %lld tokens", a->batch, (long long)a->total_tokens);
    if (a->max_seqlen < 0 || a->max_seqlen > a->total_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "max_seqlen %d for %lld tokens", a->max_seqlen,
                 (long long)a->total_tokens);
    FSA_CHECK(check_tensor("q", a->q, a->q_token_stride, a->q_head_stride));
    FSA_CHECK(check_tensor("k", a->k, a->k_token_stride, a->k_head_stride));
    FSA_CHECK(check_tensor("v", a->v, a->v_token_stride, a->v_head_stride));
    FSA_CHECK(check_tensor("o", a->o, a->o_token_stride, a->o_head_stride));
    FSA_CHECK(check_tensor("dout", a->dout, a->dout_token_stride, a->dout_head_stride));
    FSA_CHECK(check_tensor("dq", a->dq, a->dq_token_stride, a->dq_head_stride));
    FSA_CHECK(check_tensor("dk", a->dk, a->dk_token_stride, a->dk_head_stride));
    FSA_CHECK(check_tensor("dv", a->dv, a->dv_token_stride, a->dv_head_stride));
    if (a->topk == 0 || a->cu_seqlens == 0 || a->lse == 0)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "topk, cu_seqlens and lse must not be NULL");
    if (!aligned(a->topk, 4) || !aligned(a->cu_seqlens, 4) || !aligned(a->lse, 4))
        FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE, "topk, cu_seqlens and lse must be 4-byte aligned");
    if (a->topk_head_stride < 0 || a->topk_token_stride < 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "top-k strides must be non-negative");
    fsa_bwd_layout l;
    fsa_bwd_layout_for(&l, plan, a->total_tokens, a->batch, fsa_bwd_chunk_tokens(plan, a->total_tokens, a->batch));
    if (a->workspace == 0 || a->workspace_bytes < l.total)
        FSA_FAIL(FSA_STATUS_WORKSPACE_TOO_SMALL, STAGE, "the backward needs %zu bytes of workspace, got %zu%s", l.total,
                 a->workspace_bytes, a->workspace ? "" : " (NULL)");
    if (!aligned(a->workspace, 256)) FSA_FAIL(FSA_STATUS_MISALIGNED, STAGE, "workspace is not 256-byte aligned");
    if (plan->ctx->cu == NULL)
        FSA_FAIL(FSA_STATUS_NO_DEVICE, STAGE, "the plan's context has no device (offline target %s)", plan->ctx->target);
cleanup:
    return st;
}

static void params_of(fsa_sel_params *p, const fsa_plan *plan, const fsa_bwd_args *a, const fsa_bwd_layout *l)
{
    memset(p, 0, sizeof *p);
    const uint64_t ws = a->workspace;
    p->q = (long long)a->q, p->k = (long long)a->k, p->v = (long long)a->v, p->o = (long long)a->o;
    p->dout = (long long)a->dout, p->dq = (long long)a->dq, p->dk = (long long)a->dk, p->dv = (long long)a->dv;
    p->q_ts = a->q_token_stride, p->q_hs = a->q_head_stride;
    p->k_ts = a->k_token_stride, p->k_hs = a->k_head_stride;
    p->v_ts = a->v_token_stride, p->v_hs = a->v_head_stride;
    p->o_ts = a->o_token_stride, p->o_hs = a->o_head_stride;
    p->do_ts = a->dout_token_stride, p->do_hs = a->dout_head_stride;
    p->dq_ts = a->dq_token_stride, p->dq_hs = a->dq_head_stride;
    p->dk_ts = a->dk_token_stride, p->dk_hs = a->dk_head_stride;
    p->dv_ts = a->dv_token_stride, p->dv_hs = a->dv_head_stride;
    p->topk = (long long)a->topk, p->topk_hs = a->topk_head_stride, p->topk_ts = a->topk_token_stride;
    p->cu_seqlens = (long long)a->cu_seqlens;
    p->lse = (long long)a->lse;
    p->total_tokens = a->total_tokens;
    p->batch = a->batch;
    p->num_kv_heads = plan->desc.num_kv_heads;
    p->num_q_heads = plan->desc.num_q_heads;
    p->top_k = plan->desc.top_k;
    p->scale_log2 = (double)plan->scale * 1.4426950408889634;
    p->nb_total = l->nb_total;
    p->item_entries = plan->bwd_item_entries;
    p->counts = (long long)(ws + l->counts);
    p->offsets = (long long)(ws + l->offsets);
    p->work_offsets = (long long)(ws + l->work_offsets);
    p->part_offsets = (long long)(ws + l->part_offsets);
    p->work_seg = (long long)(ws + l->work_seg);
    p->mask = (long long)(ws + l->mask);
    p->list = (long long)(ws + l->list);
    p->list_sorted = (long long)(ws + l->list_sorted);
    p->delta = (long long)(ws + l->delta);
    p->dq_part = (long long)(ws + l->dq_part);
    p->dkv_part = (long long)(ws + l->dkv_part);
    p->dkv_acc = (long long)(ws + l->dkv_acc);
}

static fsa_status launch(const fsa_plan *plan, CUfunction fn, uint64_t grid, unsigned threads, unsigned smem,
                         CUstream stream, fsa_sel_params *p, const char *what)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    void *args[] = {p};
    if (grid == 0) return FSA_STATUS_OK;
    if (grid > 0x7fffffffu) grid = 0x7fffffffu; /* kernels stride over their work */
    FSA_CHECK_CU(cu, cu->LaunchKernel(fn, (unsigned)grid, 1, 1, threads, 1, 1, smem, stream, args, NULL), what);
cleanup:
    return st;
}

static fsa_status run(const fsa_plan *plan, const fsa_bwd_args *a, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const fsa_bwd_kernels *k = &plan->bwd;
    const int64_t T = a->total_tokens;
    const int64_t tc = fsa_bwd_chunk_tokens(plan, T, a->batch);
    fsa_bwd_layout l;
    fsa_bwd_layout_for(&l, plan, T, a->batch, tc);
    fsa_sel_params p;
    params_of(&p, plan, a, &l);
    const int64_t hkv = plan->desc.num_kv_heads, hq = plan->desc.num_q_heads, d = plan->desc.head_dim;
    const size_t n_counts = (size_t)(hkv * l.nb_total + 1);
    const uint64_t rows_per_block = (uint64_t)fsa_reduce_rows_per_block((int)d);
    const unsigned main_threads = (unsigned)(plan->desc.block_size / 16 * 32);
    const int d_parts = d > 128 ? 2 : 1;

    FSA_CHECK_CU(cu, cu->MemsetD32Async(a->workspace + l.dkv_acc, 0, (size_t)(T * hkv * 2 * d), stream),
                 "launch memset");
    for (int64_t t0 = 0; t0 < T; t0 += tc) {
        const int64_t cur = T - t0 < tc ? T - t0 : tc;
        p.t0 = t0;
        p.tc = cur;
        FSA_CHECK_CU(cu, cu->MemsetD32Async(a->workspace + l.counts, 0, n_counts, stream), "launch memset");
        const uint64_t row_blocks = (uint64_t)((hkv * cur + 255) / 256);
        FSA_CHECK(launch(plan, k->count, row_blocks, 256, 0, stream, &p, "launch fsa_sel_count"));
        FSA_CHECK(launch(plan, k->scatter, row_blocks, 256, 0, stream, &p, "launch fsa_sel_scatter"));
        FSA_CHECK(launch(plan, k->sort, n_counts - 1, 256, 0, stream, &p, "launch fsa_sel_sort"));
        const uint64_t q_rows = (uint64_t)(cur * hq);
        FSA_CHECK(launch(plan, k->prep, (q_rows + rows_per_block - 1) / rows_per_block, 256, 0, stream, &p,
                         "launch fsa_sel_bwd_prep"));
        uint64_t items = (uint64_t)(hkv * cur * plan->desc.top_k) / (uint64_t)plan->bwd_item_entries + n_counts;
        uint64_t grid = items < (uint64_t)plan->bwd_grid ? items : (uint64_t)plan->bwd_grid;
        for (int part = 0; part < d_parts; part++) {
            p.d_part = part;
            FSA_CHECK(launch(plan, k->main, grid, main_threads, (unsigned)plan->bwd_smem, stream, &p,
                             "launch fsa_sel_bwd_main"));
        }
        p.d_part = 0;
        FSA_CHECK(launch(plan, k->dq, (q_rows + rows_per_block - 1) / rows_per_block, 256, 0, stream, &p,
                         "launch fsa_sel_bwd_dq"));
        FSA_CHECK(launch(plan, k->dkv_sum, (uint64_t)((T * hkv + 7) / 8), 256, 0, stream, &p,
                         "launch fsa_sel_bwd_dkv_sum"));
    }
    FSA_CHECK(launch(plan, k->dkv_store, (uint64_t)((T * hkv + 7) / 8), 256, 0, stream, &p,
                     "launch fsa_sel_bwd_dkv_store"));
cleanup:
    return st;
}

fsa_status fsa_selected_attention_bwd(const fsa_plan *plan, const fsa_bwd_args *args, void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int entered = 0;
    if (plan == NULL || args == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "plan and args must not be NULL");
    FSA_CHECK(validate_args(plan, args));
    if (args->total_tokens == 0) goto cleanup;
    FSA_CHECK(fsa_context_enter(plan->ctx));
    entered = 1;
    FSA_CHECK(run(plan, args, (CUstream)stream));
cleanup:
    if (entered) fsa_context_leave(plan->ctx);
    return st;
}
