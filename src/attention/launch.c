#include "launch.h"
#include "metadata_check.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int aligned(uint64_t ptr, unsigned bytes) { return (ptr % bytes) == 0; }

fsa_status fsa_check_token_count(const char *stage, int64_t total_tokens)
{
    if (total_tokens < 0 || total_tokens > INT32_MAX - 1)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage, "total_tokens %lld out of range (0 to %d)",
                             (long long)total_tokens, INT32_MAX - 1);
    return FSA_STATUS_OK;
}

fsa_status fsa_check_tokens(const char *stage, int64_t total_tokens, int batch)
{
    fsa_status st = fsa_check_token_count(stage, total_tokens);
    if (st != FSA_STATUS_OK) return st;
    if (total_tokens > 0 && (batch < 1 || batch > total_tokens))
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage, "batch %d for %lld tokens", batch,
                             (long long)total_tokens);
    return FSA_STATUS_OK;
}

unsigned __int128 fsa_view_last_row(const fsa_tensor *t, int64_t tokens, int64_t heads)
{
    unsigned __int128 last = 0;
    if (tokens > 1) last += (unsigned __int128)(uint64_t)t->token_stride * (uint64_t)(tokens - 1);
    if (heads > 1) last += (unsigned __int128)(uint64_t)t->head_stride * (uint64_t)(heads - 1);
    return last;
}

int fsa_within_reach(uint64_t ptr, unsigned __int128 last_elem, unsigned elem_bytes)
{
    return (unsigned __int128)ptr + last_elem * elem_bytes < (unsigned __int128)1 << 63;
}

/* A tensor view: non-NULL and aligned, strides not negative and multiples of
 * `multiple` elements, every row starting below 2^63 bytes of address (the
 * kernels form a row's address as ptr plus a signed 64-bit element offset,
 * which a larger span would overflow or wrap past the address space). The
 * stride of a dimension of size 1 is never used (frameworks leave any value
 * there), so it is not checked. */
static fsa_status check_view(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens, int64_t heads,
                             unsigned elem_bytes, unsigned align_bytes, int64_t multiple)
{
    const int64_t ts = tokens > 1 ? t->token_stride : 0, hs = heads > 1 ? t->head_stride : 0;
    if (t->ptr == 0) return fsa_error_set(FSA_STATUS_NULL_POINTER, stage, "%s is NULL", name);
    if (!aligned(t->ptr, align_bytes))
        return fsa_error_set(FSA_STATUS_MISALIGNED, stage, "%s is not %u-byte aligned", name, align_bytes);
    if (ts < 0 || hs < 0)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage, "%s strides (token %lld, head %lld) must not be negative",
                             name, (long long)ts, (long long)hs);
    if (ts % multiple != 0 || hs % multiple != 0)
        return fsa_error_set(FSA_STATUS_MISALIGNED, stage,
                             "%s strides (token %lld, head %lld) must be multiples of %lld elements", name,
                             (long long)ts, (long long)hs, (long long)multiple);
    if (!fsa_within_reach(t->ptr, fsa_view_last_row(t, tokens, heads), elem_bytes))
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage,
                             "%s reaches past 2^63 bytes of address (pointer 0x%llx, token stride %lld x %lld tokens, "
                             "head stride %lld x %lld heads): a stride or the pointer is wrong",
                             name, (unsigned long long)t->ptr, (long long)ts, (long long)tokens, (long long)hs,
                             (long long)heads);
    return FSA_STATUS_OK;
}

fsa_status fsa_check_tensor(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens, int64_t heads)
{
    return check_view(stage, name, t, tokens, heads, 2, 16, 8);
}

fsa_status fsa_check_float_view(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                                int64_t heads)
{
    return check_view(stage, name, t, tokens, heads, 4, 4, 1);
}

fsa_status fsa_check_float_rows(const char *stage, const char *name, uint64_t ptr, int64_t tokens, int64_t heads)
{
    if (ptr == 0) return FSA_STATUS_OK;
    /* No caller strides to name: the message gives the array's shape. */
    const unsigned __int128 last = tokens > 0 && heads > 0 ? (unsigned __int128)tokens * (uint64_t)heads - 1 : 0;
    if (!fsa_within_reach(ptr, last, 4))
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage,
                             "%s's %lld x %lld floats reach past 2^63 bytes of address from 0x%llx: the pointer is wrong",
                             name, (long long)heads, (long long)tokens, (unsigned long long)ptr);
    return FSA_STATUS_OK;
}

fsa_status fsa_check_arrays(const char *stage, const fsa_array_check *arrays, int n)
{
    for (int i = 0; i < n; i++)
        if (arrays[i].required && arrays[i].ptr == 0)
            return fsa_error_set(FSA_STATUS_NULL_POINTER, stage, "%s must not be NULL", arrays[i].name);
    for (int i = 0; i < n; i++)
        if (arrays[i].ptr % 4 != 0)
            return fsa_error_set(FSA_STATUS_MISALIGNED, stage, "%s (0x%llx) must be 4-byte aligned", arrays[i].name,
                                 (unsigned long long)arrays[i].ptr);
    return FSA_STATUS_OK;
}

fsa_status fsa_check_index_view(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                                int64_t heads)
{
    return check_view(stage, name, t, tokens, heads, 4, 4, 1);
}

fsa_status fsa_check_gate_views(const char *stage, const fsa_tensor *gate, const fsa_tensor *gate_grad,
                                int64_t tokens, int64_t heads)
{
    if (gate->ptr != 0) {
        const fsa_status st = fsa_check_float_view(stage, "gate", gate, tokens, heads);
        if (st != FSA_STATUS_OK) return st;
    }
    if (gate_grad->ptr == 0) return FSA_STATUS_OK;
    const fsa_status st = fsa_check_float_view(stage, "gate_grad", gate_grad, tokens, heads);
    return st != FSA_STATUS_OK ? st : fsa_check_written(stage, "gate_grad", gate_grad, tokens, heads, 1);
}

/* The end of the bytes a view's rows can touch (they lie in [ptr, end)); 128-bit: no overflow. */
static unsigned __int128 view_end(const fsa_tensor *t, int64_t tokens, int64_t heads, int64_t row_elems, int bytes)
{
    return (unsigned __int128)t->ptr + (fsa_view_last_row(t, tokens, heads) + (unsigned __int128)row_elems) * (unsigned)bytes;
}

fsa_status fsa_check_dq_add(const char *stage, const fsa_tensor *dq_add, const fsa_tensor *dq, int64_t tokens,
                            int64_t heads, int64_t row_elems)
{
    if (dq_add->ptr == 0) return FSA_STATUS_OK;
    const int same = dq_add->ptr == dq->ptr && (tokens < 2 || dq_add->token_stride == dq->token_stride) &&
                     (heads < 2 || dq_add->head_stride == dq->head_stride);
    const int apart = view_end(dq_add, tokens, heads, row_elems, 2) <= dq->ptr ||
                      view_end(dq, tokens, heads, row_elems, 2) <= dq_add->ptr;
    if (same || apart) return FSA_STATUS_OK;
    return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage,
                         "dq_add overlaps dq without being dq itself (strides token %lld / %lld, head %lld / %lld): "
                         "pass dq itself or memory of its own",
                         (long long)dq_add->token_stride, (long long)dq->token_stride, (long long)dq_add->head_stride,
                         (long long)dq->head_stride);
}

fsa_status fsa_check_written(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                             int64_t heads, int64_t row_elems)
{
    /* The dimensions of more than one row, the one of smaller stride first. */
    int64_t n[2] = {tokens, heads}, s[2] = {t->token_stride, t->head_stride};
    if (n[0] < 2 || (n[1] >= 2 && s[1] < s[0])) {
        const int64_t nt = n[0], st = s[0];
        n[0] = n[1], s[0] = s[1], n[1] = nt, s[1] = st;
    }
    int ok = 1;
    int64_t span = row_elems; /* elements from the first row's start to the last row's end along n[0] */
    if (n[0] >= 2) {
        ok = s[0] >= row_elems;
        span = ok && s[0] <= (INT64_MAX - row_elems) / (n[0] - 1) ? s[0] * (n[0] - 1) + row_elems : INT64_MAX;
    }
    if (ok && n[1] >= 2) ok = span < INT64_MAX && s[1] >= span;
    if (ok) return FSA_STATUS_OK;
    return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage,
                         "%s is written, but its rows of %lld elements overlap (token stride %lld, head stride %lld, "
                         "%lld x %lld rows)",
                         name, (long long)row_elems, (long long)t->token_stride, (long long)t->head_stride,
                         (long long)tokens, (long long)heads);
}

fsa_status fsa_check_output(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens, int64_t heads,
                            int64_t row_elems)
{
    const fsa_status st = fsa_check_tensor(stage, name, t, tokens, heads);
    return st != FSA_STATUS_OK ? st : fsa_check_written(stage, name, t, tokens, heads, row_elems);
}

fsa_status fsa_check_tensors(const char *stage, const fsa_tensor_check *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const fsa_tensor_check *c = &list[i];
        const fsa_status st = c->written_row ? fsa_check_output(stage, c->name, c->t, c->tokens, c->heads, c->written_row)
                                             : fsa_check_tensor(stage, c->name, c->t, c->tokens, c->heads);
        if (st != FSA_STATUS_OK) return st;
    }
    return FSA_STATUS_OK;
}

fsa_status fsa_check_inputs(const char *stage, const fsa_plan *plan, const fsa_call_inputs *in, int backward)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = in->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    FSA_CHECK(fsa_check_tokens(stage, T, in->batch));
    if (T == 0) goto cleanup;
    if (in->max_seqlen < 0 || in->max_seqlen > T)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "max_seqlen %d for %lld tokens", in->max_seqlen, (long long)T);
    const fsa_array_check arrays[] = {{"cu_seqlens", in->cu_seqlens, 1}, {"lse", in->lse, backward}};
    FSA_CHECK(fsa_check_arrays(stage, arrays, 2));
    FSA_CHECK(fsa_check_index_view(stage, "topk", in->topk, T, hkv));
    const fsa_tensor_check views[] = {{"q", in->q, T, hq, 0}, {"k", in->k, T, hkv, 0}, {"v", in->v, T, hkv, 0},
                                      {"o", in->o, T, hq, backward ? 0 : plan->desc.value_dim}};
    FSA_CHECK(fsa_check_tensors(stage, views, 4));
    FSA_CHECK(fsa_check_float_rows(stage, "lse", in->lse, T, hq));
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

fsa_status fsa_call_read(void *call, size_t call_size, const void *plan, const void *args, size_t first_size,
                         const char *stage, const char *args_type)
{
    if (plan == NULL || args == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, stage, "plan and args must not be NULL");
    return fsa_struct_read(call, call_size, args, first_size, stage, args_type);
}

float fsa_softmax_scale(float scale, int head_dim) { return scale > 0.0f ? scale : 1.0f / sqrtf((float)head_dim); }

fsa_status fsa_plan_desc_read(void *desc, size_t desc_size, const void *out, const void *ctx,
                              const void *caller_desc, size_t first_size, const char *stage, const char *desc_type)
{
    if (out == NULL || ctx == NULL || caller_desc == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, stage, "out, context and descriptor must not be NULL");
    return fsa_struct_read(desc, desc_size, caller_desc, first_size, stage, desc_type);
}

FSA_APPENDED_FIELD(fsa_plan_choice, splits, FSA_PLAN_CHOICE_FIRST_SIZE);
FSA_APPENDED_FIELD(fsa_plan_choice, reserved, FSA_PLAN_CHOICE_FIRST_SIZE);

fsa_status fsa_plan_choice_check(const fsa_plan_choice *out, const char *stage)
{
    fsa_status st = fsa_struct_size_check(out, sizeof *out, FSA_PLAN_CHOICE_FIRST_SIZE, stage, "fsa_plan_choice");
    if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(out, fsa_plan_choice, splits, stage);
    if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(out, fsa_plan_choice, reserved, stage);
    return st;
}

fsa_status fsa_plan_choice_write(fsa_plan_choice *out, const fsa_plan_choice *choice, const char *stage)
{
    const fsa_status st = fsa_plan_choice_check(out, stage);
    if (st != FSA_STATUS_OK) return st;
    return fsa_struct_write(out, choice, sizeof *choice, FSA_PLAN_CHOICE_FIRST_SIZE, stage, "fsa_plan_choice");
}

fsa_status fsa_call_enter(const fsa_context *ctx, const char *stage)
{
    if (ctx->cu == NULL)
        return fsa_error_set(FSA_STATUS_NO_DEVICE, stage, "the plan's context has no device (offline target %s)",
                             ctx->target);
    return fsa_context_enter(ctx);
}

fsa_status fsa_call_framed(const fsa_call_frame *f, void *call, const void *plan, const void *args, void *stream)
{
    int has_work = 0;
    fsa_status st = fsa_call_read(call, f->args_size, plan, args, f->args_first_size, f->stage, f->args_type);
    if (st == FSA_STATUS_OK) st = f->check(plan, call, &has_work);
    if (st != FSA_STATUS_OK || !has_work) return st;
    const fsa_context *ctx = *(fsa_context *const *)plan; /* the plan's first member */
    st = fsa_call_enter(ctx, f->stage);
    if (st != FSA_STATUS_OK) return st;
    st = f->launch(plan, call, (CUstream)stream);
    fsa_context_leave(ctx);
    return st;
}

fsa_status fsa_call(const fsa_op *op, void *call, const fsa_plan *plan, const void *args, void *stream)
{
    fsa_status st = fsa_call_read(call, op->args_size, plan, args, op->args_first_size, op->stage, op->args_type);
    if (st == FSA_STATUS_OK && op->check_fields) st = op->check_fields(call);
    if (st != FSA_STATUS_OK) return st;
    if (op->backward && !plan->bwd_available)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, op->stage, "the plan was created without backward = 1");
    const fsa_call_inputs in = op->inputs(call);
    st = fsa_check_inputs(op->stage, plan, &in, op->backward);
    if (st == FSA_STATUS_OK && in.total_tokens > 0) st = op->prepare(call, plan);
    if (st != FSA_STATUS_OK || in.total_tokens == 0) return st;
    st = fsa_call_enter(plan->ctx, op->stage);
    if (st != FSA_STATUS_OK) return st;
    st = fsa_metadata_check(plan, op->stage, &in, (CUstream)stream); /* check mode only */
    if (st == FSA_STATUS_OK) st = op->launch(call, plan, (CUstream)stream);
    fsa_context_leave(plan->ctx);
    return st;
}

fsa_status fsa_launch(const fsa_plan *plan, const fsa_kernel *k, uint64_t gx, unsigned gy, CUstream stream,
                      fsa_sel_params *p)
{
    return fsa_kernel_launch(k, plan->ctx, gx, gy, stream, p);
}

fsa_status fsa_launch_index(const fsa_plan *plan, const fsa_kernel *count, const fsa_kernel *scatter,
                            const fsa_index_layout *l, uint64_t workspace, CUstream stream, fsa_sel_params *p)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const uint64_t row_blocks = fsa_blocks_for((uint64_t)(p->num_kv_heads * p->tc), FSA_INDEX_THREADS);
    /* The counts and, right after them, the main kernels' work counters. */
    const size_t n_zero = l->n_counts + (size_t)FSA_WORK_COUNTERS * (size_t)fsa_index_chunks(l);
    FSA_CHECK_CU(cu, cu->MemsetD32Async(workspace + l->counts, 0, n_zero, stream), "launch memset");
    FSA_CHECK(fsa_launch(plan, count, row_blocks, 1, stream, p));
    FSA_CHECK(fsa_launch(plan, scatter, row_blocks, 1, stream, p));
cleanup:
    return st;
}

void fsa_params_index(fsa_sel_params *p, const fsa_index_layout *l, uint64_t workspace)
{
    p->nb_total = l->nb_total;
    p->counts = (long long)(workspace + l->counts);
    p->offsets = (long long)(workspace + l->offsets);
    p->work_offsets = (long long)(workspace + l->work_offsets);
    p->index_heads = l->chunk_heads;
    p->work_seg_stride = (long long)l->seg_stride;
}

void fsa_params_index_group(fsa_sel_params *gp, const fsa_sel_params *all, int group, const fsa_index_layout *l,
                            int g0)
{
    fsa_params_heads(gp, all, group, g0, l->index_heads);
    if (fsa_index_chunks(l) > 1) {
        gp->t0 = 0;
        gp->tc = gp->total_tokens;
    }
}

void fsa_params_group_chunk(fsa_sel_params *p, const fsa_sel_params *gp, int group, const fsa_index_layout *l, int h)
{
    const long long chunk = fsa_index_chunks(l) > 1 ? h / l->chunk_heads : 0;
    fsa_params_heads(p, gp, group, h, l->chunk_heads);
    fsa_params_index_chunk(p, l, chunk);
    /* The chunk's work counters, and the backward's delta [Hq of the group, T]. */
    if (p->delta != 0) p->delta += chunk * l->chunk_heads * group * gp->tc * 4;
    if (p->work_next != 0) p->work_next += chunk * FSA_WORK_COUNTERS * 4;
}

void fsa_params_index_chunk(fsa_sel_params *p, const fsa_index_layout *l, long long chunk)
{
    const long long segs = (long long)l->chunk_heads * l->nb_total;
    p->offsets += chunk * segs * 4; /* absolute list positions: list and list_sorted stay */
    p->work_offsets += chunk * (long long)l->n_chunk * 4;
    if (p->part_offsets != 0) p->part_offsets += chunk * (long long)l->n_chunk * 4;
    p->work_seg += chunk * (long long)l->seg_stride * 4;
    p->mask += chunk * l->chunk_heads * p->tc * 8;
    p->index_heads = 0;
}

size_t fsa_qt_bwd_rows_bytes(int num_q_heads, int64_t total_tokens)
{
    const size_t bytes = (size_t)num_q_heads * (size_t)total_tokens * 4;
    return (bytes + 255) & ~(size_t)255;
}

size_t fsa_qt_bwd_workspace_bytes(int num_q_heads, int64_t total_tokens)
{
    return 2 * fsa_qt_bwd_rows_bytes(num_q_heads, total_tokens);
}

fsa_status fsa_qt_bwd_workspace_query(size_t *bytes_out, const void *plan, int backward, int num_q_heads,
                                      int64_t total_tokens, int batch, const char *stage)
{
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, stage, "bytes_out and plan must not be NULL");
    *bytes_out = 0;
    if (!backward) return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage, "the plan was created without backward");
    const fsa_status st = fsa_check_tokens(stage, total_tokens, batch);
    if (st == FSA_STATUS_OK) *bytes_out = fsa_qt_bwd_workspace_bytes(num_q_heads, total_tokens);
    return st;
}

fsa_status fsa_qt_bwd_check_grads(const char *stage, const fsa_qt_grads *g, int64_t total_tokens, int64_t keys,
                                  int hq, int hkv)
{
    const fsa_tensor_check grads[] = {{"dout", g->dout, total_tokens, hq, 0},
                                      {"dq", g->dq, total_tokens, hq, g->head_dim},
                                      {"dk", g->dk, keys, hkv, g->head_dim},
                                      {"dv", g->dv, keys, hkv, g->value_dim}};
    fsa_status st = fsa_check_tensors(stage, grads, 4);
    if (st == FSA_STATUS_OK && g->dq_add->ptr != 0) st = fsa_check_tensor(stage, "dq_add", g->dq_add, total_tokens, hq);
    if (st == FSA_STATUS_OK) st = fsa_check_dq_add(stage, g->dq_add, g->dq, total_tokens, hq, g->head_dim);
    if (st == FSA_STATUS_OK) st = fsa_check_gate_views(stage, g->gate, g->gate_grad, total_tokens, hq);
    if (st != FSA_STATUS_OK) return st;
    return fsa_check_workspace(stage, g->workspace, g->workspace_bytes, fsa_qt_bwd_workspace_bytes(hq, total_tokens));
}

fsa_kernel_view fsa_view_of(const fsa_tensor *t)
{
    const fsa_kernel_view v = {(long long)t->ptr, t->token_stride, t->head_stride};
    return v;
}

void fsa_params_inputs(fsa_sel_params *p, const fsa_plan *plan, const fsa_call_inputs *in)
{
    memset(p, 0, sizeof *p);
    p->q = fsa_view_of(in->q);
    p->k = fsa_view_of(in->k);
    p->v = fsa_view_of(in->v);
    p->o = fsa_view_of(in->o);
    p->topk = fsa_view_of(in->topk);
    p->cu_seqlens = (long long)in->cu_seqlens;
    p->lse = (long long)in->lse;
    p->total_tokens = in->total_tokens;
    p->batch = in->batch;
    p->num_kv_heads = plan->desc.num_kv_heads;
    p->num_q_heads = plan->desc.num_q_heads;
    p->top_k = plan->desc.top_k;
    p->scale_log2 = (double)plan->scale * FSA_LOG2E;
}

/* A view moved forward by `heads` heads of `elem` bytes (a tensor the call does not have stays 0). */
static void skip_heads(fsa_kernel_view *v, long long heads, long long elem)
{
    if (v->ptr != 0) v->ptr += heads * v->head_stride * elem;
}

void fsa_params_heads(fsa_sel_params *p, const fsa_sel_params *all, int group, long long h0, int heads)
{
    *p = *all;
    const long long qh0 = h0 * group;
    skip_heads(&p->q, qh0, 2);
    skip_heads(&p->o, qh0, 2);
    skip_heads(&p->dout, qh0, 2);
    skip_heads(&p->dq, qh0, 2);
    skip_heads(&p->dq_add, qh0, 2);
    skip_heads(&p->gate, qh0, 4);
    skip_heads(&p->gate_grad, qh0, 4);
    skip_heads(&p->k, h0, 2);
    skip_heads(&p->v, h0, 2);
    skip_heads(&p->dk, h0, 2);
    skip_heads(&p->dv, h0, 2);
    skip_heads(&p->topk, h0, 4);
    if (p->lse != 0) p->lse += qh0 * p->total_tokens * 4; /* float [Hq, T] */
    p->num_kv_heads = heads;
    p->num_q_heads = (long long)heads * group;
}
