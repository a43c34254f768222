/* Forward launch sequences. Everything goes on the caller's stream: no
 * allocation, no host synchronization, so the call can be graph-captured. */
#include "launch.h"
#include "tuning.h"
#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <string.h>

#define STAGE "forward"

/* One forward call: the arguments, then what validation decided for the
 * launch: the path, and for the FSA path the token chunk and workspace layout. */
typedef struct fwd_call {
    fsa_fwd_args a; /* first: fsa_call reads the caller's struct here */
    fsa_algorithm algorithm;
    int tune; /* the launch may time both orders first (tuning.h); the layout serves both */
    int64_t tc;
    fsa_fsa_layout layout;
} fwd_call;

static fsa_call_inputs inputs(const void *call);
static fsa_status prepare(void *call, const fsa_plan *plan);
static fsa_status launch(const void *call, const fsa_plan *plan, CUstream stream);
static const fsa_op fwd_op = {STAGE, "fsa_fwd_args", sizeof(fsa_fwd_args), FSA_FWD_ARGS_FIRST_SIZE, 0,
                              NULL, inputs, prepare, launch};

static fsa_call_inputs inputs(const void *call)
{
    const fsa_call_inputs in = FSA_CALL_INPUTS(&((const fwd_call *)call)->a);
    return in;
}

/* The path, and for the FSA path the chunk, layout and workspace check. A
 * call that may measure needs the FSA layout too; a workspace too small for
 * it only means no measuring (unless the FSA path is the choice). */
static fsa_status prepare(void *call, const fsa_plan *plan)
{
    fwd_call *c = call;
    const fsa_fwd_args *a = &c->a;
    fsa_choice ch;
    fsa_choose(&ch, plan, FSA_OP_FWD, a->total_tokens);
    c->algorithm = ch.variant.order;
    c->tune = 0;
    if (c->algorithm != FSA_ALGORITHM_FSA && !ch.may_measure) return FSA_STATUS_OK;
    fsa_status st = fsa_fsa_setup(&c->tc, &c->layout, plan, a->total_tokens, a->batch, STAGE);
    if (st == FSA_STATUS_OK) st = fsa_check_workspace(STAGE, a->workspace, a->workspace_bytes, c->layout.total);
    if (c->algorithm == FSA_ALGORITHM_FSA || st == FSA_STATUS_OK) {
        c->tune = ch.may_measure && st == FSA_STATUS_OK;
        return st;
    }
    fsa_error_clear();
    return FSA_STATUS_OK;
}

/* The kernel parameters that come from the arguments. */
static void params_from_args(fsa_sel_params *p, const fsa_plan *plan, const fsa_fwd_args *a)
{
    const fsa_call_inputs in = FSA_CALL_INPUTS(a);
    fsa_params_inputs(p, plan, &in);
}

static fsa_status run_nsa(const fsa_plan *plan, const fsa_fwd_args *a, CUstream stream)
{
    fsa_sel_params p;
    params_from_args(&p, plan, a);
    p.t0 = 0;
    p.tc = a->total_tokens;
    return fsa_launch(plan, &plan->fwd.nsa, (uint64_t)a->total_tokens,
                      (unsigned)(plan->desc.num_kv_heads * fsa_nsa_head_groups(plan->group)), stream, &p);
}

/* One chunk of KV heads (all of them unless the workspace cap needs fewer):
 * per token chunk the index inversion (unless the call inverted every head's
 * at once), the main kernel and the reduction. */
static fsa_status run_fsa_heads(const fsa_plan *plan, const fwd_call *c, int invert, fsa_sel_params *p,
                                CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t T = c->a.total_tokens, tc = c->tc;
    const fsa_fsa_layout *l = &c->layout;
    const fsa_fwd_kernels *k = &plan->fwd;
    const int64_t hkv = l->heads;
    const size_t n_segs = l->index.n_chunk;
    for (int64_t t0 = 0; t0 < T; t0 += tc) {
        const int64_t cur = T - t0 < tc ? T - t0 : tc;
        p->t0 = t0;
        p->tc = cur;
        if (invert) FSA_CHECK(fsa_launch_index(plan, &k->count, &k->scatter, &l->index, c->a.workspace, stream, p));
        /* Work items: at most pairs / chunk + one partial item per (head, block). */
        uint64_t items = (uint64_t)(hkv * cur * plan->desc.top_k) / (uint64_t)p->item_entries + n_segs;
        uint64_t grid = items < (uint64_t)plan->main_grid ? items : (uint64_t)plan->main_grid;
        FSA_CHECK(fsa_launch(plan, &k->main, grid, 1, stream, p));
        const uint64_t rows = (uint64_t)cur * (uint64_t)p->num_q_heads;
        FSA_CHECK(fsa_launch(plan, &k->reduce, fsa_blocks_for(rows, fsa_rows_per_block((int)plan->desc.value_dim)),
                             1, stream, p));
    }
cleanup:
    return st;
}

static fsa_status run_fsa(const fsa_plan *plan, const fwd_call *c, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_fsa_layout *l = &c->layout;
    fsa_sel_params all, p;
    params_from_args(&all, plan, &c->a);
    const uint64_t ws = c->a.workspace;
    fsa_params_index(&all, &l->index, ws);
    all.item_entries = fsa_plan_fwd_item_entries(plan);
    all.work_seg = (long long)(ws + l->work_seg);
    all.mask = (long long)(ws + l->mask);
    all.list = (long long)(ws + l->list);
    all.lse_part = (long long)(ws + l->lse_part);
    all.o_part = (long long)(ws + l->o_part);
    all.work_next = (long long)(ws + l->index.work_next); /* zeroed with the index's counts */
    /* Groups of index_heads KV heads: one index inversion each when the group holds several chunks
     * (else each chunk inverts its own), then the group's chunks. */
    const fsa_index_layout *ix = &l->index;
    const int shared = fsa_index_chunks(ix) > 1;
    for (int g0 = 0; g0 < plan->desc.num_kv_heads; g0 += ix->index_heads) {
        fsa_sel_params gp;
        fsa_params_index_group(&gp, &all, plan->group, ix, g0);
        if (shared) FSA_CHECK(fsa_launch_index(plan, &plan->fwd.count, &plan->fwd.scatter, ix, ws, stream, &gp));
        for (int h = 0; h < ix->index_heads; h += ix->chunk_heads) {
            fsa_params_group_chunk(&p, &gp, plan->group, ix, h);
            FSA_CHECK(run_fsa_heads(plan, c, !shared, &p, stream));
        }
    }
cleanup:
    return st;
}

static fsa_status run_variant(const void *call, const fsa_plan *plan, const fsa_variant *v, CUstream stream)
{
    const fwd_call *c = call;
    if (v->order == FSA_ALGORITHM_NSA) return run_nsa(plan, &c->a, stream);
    return run_fsa(plan, c, stream);
}

static fsa_status launch(const void *call, const fsa_plan *plan, CUstream stream)
{
    const fwd_call *c = call;
    return fsa_tune_launch(call, plan, FSA_OP_FWD, c->a.total_tokens, c->algorithm, c->tune, run_variant, stream);
}

fsa_status fsa_selected_attention_fwd(const fsa_plan *plan, const fsa_fwd_args *args, void *stream)
{
    fwd_call c;
    return fsa_call(&fwd_op, &c, plan, args, stream);
}
