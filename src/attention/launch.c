#include "launch.h"

#include "base/status_internal.h"

#include <string.h>

static int aligned(uint64_t ptr, unsigned bytes) { return (ptr % bytes) == 0; }

fsa_status fsa_check_tensor(const char *stage, const char *name, uint64_t ptr, int64_t ts, int64_t hs, int64_t tokens,
                            int64_t heads)
{
    if (ptr == 0) return fsa_error_set(FSA_STATUS_NULL_POINTER, stage, "%s is NULL", name);
    if (!aligned(ptr, 16)) return fsa_error_set(FSA_STATUS_MISALIGNED, stage, "%s is not 16-byte aligned", name);
    /* The stride of a dimension of size 1 is never used (frameworks leave any value there). */
    if (tokens <= 1) ts = 0;
    if (heads <= 1) hs = 0;
    if (ts < 0 || hs < 0 || ts % 8 != 0 || hs % 8 != 0)
        return fsa_error_set(FSA_STATUS_MISALIGNED, stage,
                             "%s strides (token %lld, head %lld) must be non-negative multiples of 8 elements", name,
                             (long long)ts, (long long)hs);
    return FSA_STATUS_OK;
}

fsa_status fsa_check_problem(const char *stage, int64_t total_tokens, int batch, int max_seqlen, uint64_t topk,
                             int64_t topk_head_stride, int64_t topk_token_stride, uint64_t cu_seqlens, uint64_t lse,
                             int lse_required)
{
    fsa_status st = FSA_STATUS_OK;
    if (total_tokens < 0 || total_tokens > INT32_MAX - 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "total_tokens %lld out of range", (long long)total_tokens);
    if (total_tokens == 0) goto cleanup;
    if (batch < 1 || batch > total_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "batch %d for %lld tokens", batch, (long long)total_tokens);
    if (max_seqlen < 0 || max_seqlen > total_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "max_seqlen %d for %lld tokens", max_seqlen,
                 (long long)total_tokens);
    if (topk == 0 || cu_seqlens == 0 || (lse_required && lse == 0))
        FSA_FAIL(FSA_STATUS_NULL_POINTER, stage, lse_required ? "topk, cu_seqlens and lse must not be NULL"
                                                              : "topk and cu_seqlens must not be NULL");
    if (!aligned(topk, 4) || !aligned(cu_seqlens, 4) || !aligned(lse, 4))
        FSA_FAIL(FSA_STATUS_MISALIGNED, stage, "topk, cu_seqlens and lse must be 4-byte aligned");
    if (topk_head_stride < 0 || topk_token_stride < 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "top-k strides must be non-negative");
cleanup:
    return st;
}

fsa_status fsa_check_workspace(const char *stage, uint64_t workspace, size_t bytes, size_t needed)
{
    if (workspace == 0 || bytes < needed)
        return fsa_error_set(FSA_STATUS_WORKSPACE_TOO_SMALL, stage, "%zu bytes of workspace needed, got %zu%s", needed,
                             bytes, workspace ? "" : " (NULL)");
    if (!aligned(workspace, 256)) return fsa_error_set(FSA_STATUS_MISALIGNED, stage, "workspace is not 256-byte aligned");
    return FSA_STATUS_OK;
}

fsa_status fsa_launch_block(const fsa_context *ctx, CUfunction fn, uint64_t gx, unsigned gy, unsigned threads,
                            unsigned smem, CUstream stream, void *params, const char *what)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = ctx->cu;
    void *args[] = {params};
    if (gx == 0 || gy == 0) return FSA_STATUS_OK;
    if (gx > 0x7fffffffu) gx = 0x7fffffffu; /* kernels that can get this many stride over their work */
    FSA_CHECK_CU(cu, cu->LaunchKernel(fn, (unsigned)gx, gy, 1, threads, 1, 1, smem, stream, args, NULL), what);
cleanup:
    return st;
}

fsa_status fsa_launch(const fsa_plan *plan, CUfunction fn, uint64_t gx, unsigned gy, unsigned threads, unsigned smem,
                      CUstream stream, fsa_sel_params *p, const char *what)
{
    return fsa_launch_block(plan->ctx, fn, gx, gy, threads, smem, stream, p, what);
}

fsa_status fsa_launch_index(const fsa_plan *plan, CUfunction count, CUfunction scatter, uint64_t counts,
                            size_t n_counts, CUstream stream, fsa_sel_params *p)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const uint64_t row_blocks = (uint64_t)((p->num_kv_heads * p->tc + 255) / 256);
    FSA_CHECK_CU(cu, cu->MemsetD32Async(counts, 0, n_counts, stream), "launch memset");
    FSA_CHECK(fsa_launch(plan, count, row_blocks, 1, 256, 0, stream, p, "launch fsa_sel_count"));
    FSA_CHECK(fsa_launch(plan, scatter, row_blocks, 1, 256, 0, stream, p, "launch fsa_sel_scatter"));
cleanup:
    return st;
}

void fsa_params_problem(fsa_sel_params *p, const fsa_plan *plan, int64_t total_tokens, int batch)
{
    p->total_tokens = total_tokens;
    p->batch = batch;
    p->num_kv_heads = plan->desc.num_kv_heads;
    p->num_q_heads = plan->desc.num_q_heads;
    p->top_k = plan->desc.top_k;
    p->scale_log2 = (double)plan->scale * 1.4426950408889634;
}
