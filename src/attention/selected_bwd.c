/* Backward launch sequence. Everything goes on the caller's stream: no
 * allocation, no host synchronization, so the call can be graph-captured.
 * Per chunk of KV heads (all of them unless the workspace cap needs fewer),
 * per token chunk: index inversion with lists sorted by token and delta (once
 * for every head when the head chunks take every token, once for every head
 * and token chunk when the chunks are token chunks of one head), the
 * main kernel (twice for heads too wide for one pass), dq (FSA order: the sum of the
 * main kernel's per-pair rows, in one grid with the sums of split blocks' dK/dV
 * partials; NSA order: one token-major kernel, then those sums). Token chunks
 * add dK/dV into an fp32 accumulator, whose rows the last token chunk's
 * launches write out as dk and dv (a chunk of every token writes them directly). */
#include "launch.h"
#include "tuning.h"
#include "base/status_internal.h"
#include "base/struct_size.h"

#include <string.h>

#define STAGE "backward"

FSA_APPENDED_FIELD(fsa_bwd_args, dq_add, FSA_BWD_ARGS_FIRST_SIZE);
FSA_APPENDED_FIELD(fsa_bwd_args, gate, FSA_BWD_ARGS_FIRST_SIZE);

/* One backward call: the arguments, then the token chunk and workspace
 * layout validation computed for the launch. */
typedef struct bwd_call {
    fsa_bwd_args a; /* first: fsa_call reads the caller's struct here */
    fsa_algorithm algorithm; /* the dq order without measuring */
    int tune;                /* the launch may time both dq orders first; the layout serves both */
    int64_t tc;
    fsa_bwd_layout layout;
} bwd_call;

/* The kernel parameters that come from the arguments. */
static void params_from_args(fsa_sel_params *p, const fsa_plan *plan, const fsa_bwd_args *a)
{
    const fsa_call_inputs in = FSA_CALL_INPUTS(a);
    fsa_params_inputs(p, plan, &in);
    p->dout = fsa_view_of(&a->dout);
    p->dq = fsa_view_of(&a->dq);
    p->dq_add = fsa_view_of(&a->dq_add); /* ptr 0: none */
    p->gate = fsa_view_of(&a->gate);
    p->gate_grad = fsa_view_of(&a->gate_grad);
    p->dk = fsa_view_of(&a->dk);
    p->dv = fsa_view_of(&a->dv);
}

/* The workspace arrays and the work split of the layout. */
static void params_from_layout(fsa_sel_params *p, const fsa_plan *plan, uint64_t ws, const fsa_bwd_layout *l)
{
    fsa_params_index(p, &l->index, ws);
    p->item_entries = l->item_entries;
    p->item_max_rounds = l->item_max_rounds;
    p->key_slices = fsa_bwd_key_slices(plan);
    p->part_offsets = (long long)(ws + l->part_offsets);
    p->work_seg = (long long)(ws + l->work_seg);
    p->work_next = (long long)(ws + l->index.work_next); /* zeroed with the index's counts */
    p->mask = (long long)(ws + l->mask);
    p->list = (long long)(ws + l->list);
    p->list_sorted = (long long)(ws + l->list_sorted);
    p->delta = (long long)(ws + l->delta);
    p->dq_part = (long long)(ws + l->dq_part);
    p->dkv_part = (long long)(ws + l->dkv_part);
    p->dkv_acc = l->dkv_direct ? 0 : (long long)(ws + l->dkv_acc); /* 0: dk and dv straight out */
}

/* Index inversion of the token chunk in p, lists sorted by token. */
static fsa_status run_index(const fsa_plan *plan, const fsa_bwd_layout *l, uint64_t ws, fsa_sel_params *p,
                            CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_bwd_kernels *k = &plan->bwd;
    FSA_CHECK(fsa_launch_index(plan, &k->count, &k->scatter, &l->index, ws, stream, p));
    FSA_CHECK(fsa_launch(plan, &k->sort, l->index.n_counts - 1, (unsigned)fsa_sort_windows(p->tc), stream, p));
cleanup:
    return st;
}

/* delta of the token chunk in p. */
static fsa_status run_prep(const fsa_plan *plan, fsa_sel_params *p, CUstream stream)
{
    const uint64_t q_rows = (uint64_t)(p->tc * p->num_q_heads);
    return fsa_launch(plan, &plan->bwd.prep, fsa_blocks_for(q_rows, fsa_rows_per_block((int)plan->desc.value_dim)), 1,
                      stream, p);
}

/* One head chunk: per token chunk the index inversion and delta (unless the
 * call made them for a group of chunks at once: vhead0 >= 0 for token chunks
 * of one inversion, whose first is virtual head vhead0), the main kernel, dq
 * and the sum of split blocks' dK/dV (the last token chunk's writes dk and dv). */
static fsa_status run_heads(const bwd_call *c, const fsa_plan *plan, int nsa, int invert, int vhead0,
                            fsa_sel_params *head, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const fsa_bwd_kernels *k = &plan->bwd;
    const fsa_bwd_layout *l = &c->layout;
    const uint64_t ws = c->a.workspace;
    const int64_t T = c->a.total_tokens, tc = c->tc;
    const int64_t hkv = l->heads, hq = hkv * plan->group;
    const int d = plan->desc.head_dim, dv = (int)plan->desc.value_dim;
    const fsa_kernel *main = nsa ? &k->main_kv : &k->main;

    const size_t acc_words = (size_t)(T * hkv * fsa_bwd_dkv_row(d, dv));
    if (!l->dkv_direct) FSA_CHECK_CU(cu, cu->MemsetD32Async(ws + l->dkv_acc, 0, acc_words, stream), "launch memset");
    fsa_sel_params chunk;
    fsa_sel_params *p = &chunk;
    for (int64_t t0 = 0; t0 < T; t0 += tc) {
        const int64_t cur = T - t0 < tc ? T - t0 : tc;
        *p = *head;
        /* Token chunks of one inversion: this chunk's part is virtual head vhead0 + its number
         * (the mask's rows are tc apart: moved before tc becomes the chunk's), its work counters,
         * and delta [Hq, T] of every token from the chunk's first on. */
        if (vhead0 >= 0) {
            const long long vh = vhead0 + t0 / tc;
            fsa_params_index_chunk(p, &l->index, vh);
            p->work_next += vh * FSA_WORK_COUNTERS * 4;
            p->delta += (p->delta_stride * hq * (vhead0 / l->index.tchunks) + t0) * 4;
        }
        p->t0 = t0;
        p->tc = cur;
        if (invert) {
            FSA_CHECK(run_index(plan, l, ws, p, stream));
            FSA_CHECK(run_prep(plan, p, stream));
        }
        const uint64_t q_rows = (uint64_t)(cur * hq);
        const uint64_t items = fsa_bwd_main_work(plan, l, cur);
        const uint64_t grid = items < (uint64_t)plan->bwd_grid ? items : (uint64_t)plan->bwd_grid;
        for (int part = 0; part < fsa_bwd_d_parts(d, dv); part++) {
            p->d_part = part;
            FSA_CHECK(fsa_launch(plan, main, grid, 1, stream, p));
        }
        p->d_part = 0;
        /* Keys after the chunk's last token get nothing from it (causal): their rows are skipped.
         * Without the accumulator the dK/dV sums also write the split blocks' dk and dv, and zeros. */
        const uint64_t dkv_blocks = (uint64_t)fsa_bwd_dkv_sum_blocks((t0 + cur) * hkv);
        if (nsa) {
            FSA_CHECK(fsa_launch(plan, &k->dq_nsa, (uint64_t)cur,
                                 (unsigned)(hkv * fsa_nsa_head_groups(plan->group)), stream, p));
            FSA_CHECK(fsa_launch(plan, &k->dkv_sum, dkv_blocks, 1, stream, p));
        } else {
            /* One grid: the dK/dV sums' CTAs, then the dq sums'. */
            FSA_CHECK(fsa_launch(plan, &k->sums, dkv_blocks + fsa_blocks_for(q_rows, fsa_rows_per_block(d)), 1,
                                 stream, p));
        }
    }
cleanup:
    return st;
}

/* The launch sequence of one call with the dq order of variant v, one head chunk after another. */
static fsa_status run_variant(const void *call, const fsa_plan *plan, const fsa_variant *v, CUstream stream)
{
    const bwd_call *c = call;
    fsa_status st = FSA_STATUS_OK;
    fsa_sel_params all, p;
    params_from_args(&all, plan, &c->a);
    params_from_layout(&all, plan, c->a.workspace, &c->layout);
    /* Groups of index_heads KV heads: one index inversion and one prep each (when the group holds
     * several chunks), then the group's chunks. Each inversion also zeroes the work counters of
     * every chunk it serves (fsa_launch_index: they follow the counts). */
    const fsa_index_layout *ix = &c->layout.index;
    const int shared = fsa_index_chunks(ix) > 1;
    const uint64_t ws = c->a.workspace;
    const int nsa = v->order == FSA_ALGORITHM_NSA;
    if (ix->tchunks > 1) {
        /* Token chunks of one KV head each: one inversion of every (KV head, token chunk) as
         * virtual heads of tc rows, then each head's chunks on their parts of it. */
        fsa_sel_params ip = all;
        ip.num_kv_heads = (long long)plan->desc.num_kv_heads * ix->tchunks;
        ip.index_tchunks = ix->tchunks;
        ip.t0 = 0;
        ip.tc = c->tc;
        FSA_CHECK(run_index(plan, &c->layout, ws, &ip, stream));
        /* delta of every head and token at once ([Hq, T]). */
        all.t0 = 0;
        all.tc = c->a.total_tokens;
        FSA_CHECK(run_prep(plan, &all, stream));
        all.delta_stride = c->a.total_tokens;
        for (int h = 0; h < plan->desc.num_kv_heads; h++) {
            fsa_params_heads(&p, &all, plan->group, h, 1);
            p.tc = c->tc;
            FSA_CHECK(run_heads(c, plan, nsa, 0, h * ix->tchunks, &p, stream));
        }
        goto cleanup;
    }
    for (int g0 = 0; g0 < plan->desc.num_kv_heads; g0 += ix->index_heads) {
        fsa_sel_params gp;
        fsa_params_index_group(&gp, &all, plan->group, ix, g0);
        if (shared) {
            FSA_CHECK(run_index(plan, &c->layout, ws, &gp, stream));
            FSA_CHECK(run_prep(plan, &gp, stream));
        }
        for (int h = 0; h < ix->index_heads; h += ix->chunk_heads) {
            fsa_params_group_chunk(&p, &gp, plan->group, ix, h);
            FSA_CHECK(run_heads(c, plan, nsa, !shared, -1, &p, stream));
        }
    }
cleanup:
    return st;
}

static fsa_call_inputs inputs(const void *call)
{
    const fsa_call_inputs in = FSA_CALL_INPUTS(&((const bwd_call *)call)->a);
    return in;
}

static fsa_status check_fields(const void *call)
{
    const fsa_bwd_args *a = &((const bwd_call *)call)->a;
    fsa_status st = FSA_STRUCT_FIELD_WHOLE(a, fsa_bwd_args, dq_add, STAGE);
    if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(a, fsa_bwd_args, gate, STAGE);
    if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(a, fsa_bwd_args, gate_grad, STAGE);
    return st;
}

/* The gradient tensors, the chunk, layout and workspace check. */
static fsa_status prepare(void *call, const fsa_plan *plan)
{
    fsa_status st = FSA_STATUS_OK;
    bwd_call *c = call;
    const fsa_bwd_args *a = &c->a;
    const int64_t T = a->total_tokens, hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads;
    FSA_CHECK(fsa_check_tensor(STAGE, "dout", &a->dout, T, hq));
    FSA_CHECK(fsa_check_output(STAGE, "dq", &a->dq, T, hq, plan->desc.head_dim));
    if (a->dq_add.ptr != 0) FSA_CHECK(fsa_check_tensor(STAGE, "dq_add", &a->dq_add, T, hq));
    FSA_CHECK(fsa_check_dq_add(STAGE, &a->dq_add, &a->dq, T, hq, plan->desc.head_dim));
    FSA_CHECK(fsa_check_gate_views(STAGE, &a->gate, &a->gate_grad, T, hq));
    FSA_CHECK(fsa_check_output(STAGE, "dk", &a->dk, T, hkv, plan->desc.head_dim));
    FSA_CHECK(fsa_check_output(STAGE, "dv", &a->dv, T, hkv, plan->desc.value_dim));
    fsa_choice ch;
    fsa_choose(&ch, plan, FSA_OP_BWD, T);
    /* A call with dq_add measures nothing: each variant timed would add it again, and it may be dq itself. */
    const int may_measure = ch.may_measure && a->dq_add.ptr == 0;
    c->algorithm = ch.variant.order;
    c->tune = 0;
    if (may_measure && c->algorithm != FSA_ALGORITHM_FSA) {
        /* Measuring needs the FSA order's (larger) layout; without room for it, no measuring. */
        FSA_CHECK(fsa_bwd_setup(&c->tc, &c->layout, plan, T, a->batch, FSA_ALGORITHM_FSA, STAGE));
        c->tune = fsa_check_workspace(STAGE, a->workspace, a->workspace_bytes, c->layout.total) == FSA_STATUS_OK;
        fsa_error_clear();
        if (c->tune) goto cleanup;
    }
    FSA_CHECK(fsa_bwd_setup(&c->tc, &c->layout, plan, T, a->batch, c->algorithm, STAGE));
    FSA_CHECK(fsa_check_workspace(STAGE, a->workspace, a->workspace_bytes, c->layout.total));
    c->tune = may_measure && c->algorithm == FSA_ALGORITHM_FSA;
cleanup:
    return st;
}

static fsa_status launch(const void *call, const fsa_plan *plan, CUstream stream)
{
    const bwd_call *c = call;
    return fsa_tune_launch(call, plan, FSA_OP_BWD, c->a.total_tokens, c->algorithm, c->tune, run_variant, stream);
}

static const fsa_op bwd_op = {STAGE, "fsa_bwd_args", sizeof(fsa_bwd_args), FSA_BWD_ARGS_FIRST_SIZE, 1,
                              check_fields, inputs, prepare, launch};

fsa_status fsa_selected_attention_bwd(const fsa_plan *plan, const fsa_bwd_args *args, void *stream)
{
    bwd_call c;
    return fsa_call(&bwd_op, &c, plan, args, stream);
}
