/* fsa-precompile's grid (precompile_grid.h). */
#include "precompile_grid.h"

#include "tool_args.h"

#include <stdio.h>

/* Block sizes a kind's plans take: the window and the gates have none. */
static size_t kind_block_sizes(const tool_options *o, plan_kind k)
{
    return k == KIND_WINDOW || k == KIND_GATE ? 1 : o->block_sizes.n;
}

/* Groups a kind's plans take: the gates have none. */
static size_t kind_groups(const tool_options *o, plan_kind k) { return k == KIND_GATE ? 1 : o->groups.n; }

/* Page sizes a kind's plans take: only the paged cache has pages. */
static size_t kind_page_sizes(const tool_options *o, plan_kind k) { return k == KIND_KVCACHE ? o->page_sizes.n : 1; }

/* The sizes of a kind's dimensions, fastest first: target, block size,
 * group, head dim, dtype, page size. */
static void kind_dims(size_t dims[6], const tool_options *o, plan_kind k, size_t n_targets)
{
    dims[0] = n_targets;
    dims[1] = kind_block_sizes(o, k);
    dims[2] = kind_groups(o, k);
    dims[3] = o->head_dims.n;
    dims[4] = o->dtypes.n;
    dims[5] = kind_page_sizes(o, k);
}

size_t grid_count(const tool_options *o, size_t n_targets)
{
    size_t total = 0;
    for (plan_kind k = KIND_SELECTED; k < KIND_COUNT; k++) {
        if (!o->kinds[k]) continue;
        size_t dims[6], n = 1;
        kind_dims(dims, o, k, n_targets);
        for (size_t i = 0; i < 6; i++) {
            if (dims[i] != 0 && n > MAX_COMBINATIONS / dims[i]) n = MAX_COMBINATIONS + 1;
            else n *= dims[i];
        }
        total += n;
        if (total > MAX_COMBINATIONS) {
            usage_error("the grid has more than %d combinations", MAX_COMBINATIONS);
            return 0;
        }
    }
    return total;
}

/* The kinds in order, each a mixed-radix decode. The target varies fastest:
 * neighbouring jobs, which run at the same time, then tend to use different
 * contexts, and more plans get exact counts. */
void grid_job_decode(grid_job *j, const tool_options *o, size_t n_targets, size_t i)
{
    plan_kind k = KIND_SELECTED;
    size_t dims[6];
    for (; k < KIND_COUNT; k++) {
        if (!o->kinds[k]) continue;
        kind_dims(dims, o, k, n_targets);
        const size_t n = dims[0] * dims[1] * dims[2] * dims[3] * dims[4] * dims[5];
        if (i < n) break;
        i -= n;
    }
    size_t at[6];
    for (size_t d = 0; d < 6; d++) {
        at[d] = i % dims[d];
        i /= dims[d];
    }
    j->kind = k;
    j->target = at[0];
    const int block_size = o->block_sizes.v[at[1]], group = o->groups.v[at[2]], head_dim = o->head_dims.v[at[3]];
    const fsa_dtype dtype = (fsa_dtype)o->dtypes.v[at[4]];
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.block_size = block_size, d.num_q_heads = group, d.num_kv_heads = 1, d.head_dim = head_dim, d.dtype = dtype;
    d.top_k = o->top_k, d.value_dim = o->value_dim, d.algorithm = o->algorithm, d.backward = o->backward;
    j->desc = d;
    fsa_compressed_attention_desc c = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    c.dtype = dtype, c.head_dim = head_dim, c.value_dim = o->value_dim, c.num_q_heads = group, c.num_kv_heads = 1;
    c.kernel_size = o->kernel_size, c.stride = o->stride, c.top_k = o->top_k, c.block_size = block_size;
    c.backward = o->backward;
    j->cdesc = c;
    fsa_window_attention_desc w = FSA_WINDOW_ATTENTION_DESC_INIT;
    w.dtype = dtype, w.head_dim = head_dim, w.value_dim = o->value_dim, w.num_q_heads = group, w.num_kv_heads = 1;
    w.window = o->window, w.backward = o->backward;
    j->wdesc = w;
    fsa_gate_desc g = FSA_GATE_DESC_INIT;
    g.dtype = dtype, g.value_dim = o->value_dim ? o->value_dim : head_dim;
    j->gdesc = g;
    /* The kernels depend on neither the batch nor the tokens a plan allows:
     * the smallest plan compiles all of them. */
    fsa_kvcache_desc kv = FSA_KVCACHE_DESC_INIT;
    kv.dtype = dtype, kv.head_dim = head_dim, kv.value_dim = o->value_dim, kv.num_q_heads = group;
    kv.num_kv_heads = 1, kv.block_size = block_size, kv.top_k = o->top_k, kv.page_size = o->page_sizes.v[at[5]];
    kv.max_batch = 1, kv.max_query_tokens = 1;
    j->kdesc = kv;
}

void grid_job_label(char *buf, size_t cap, const grid_job *j, const char *target)
{
    const fsa_compressed_attention_desc *c = &j->cdesc;
    const fsa_window_attention_desc *w = &j->wdesc;
    const fsa_kvcache_desc *kv = &j->kdesc;
    char dv[24] = "";
    if (j->kind == KIND_SELECTED && j->desc.value_dim)
        snprintf(dv, sizeof dv, " dv%lld", (long long)j->desc.value_dim);
    if (j->kind == KIND_COMPRESSED)
        snprintf(buf, cap, "%s compressed %s d%d dv%d g%d l%d s%d bk%d k%d", target, tool_dtype_name(c->dtype),
                 c->head_dim, c->value_dim ? c->value_dim : c->head_dim, c->num_q_heads, c->kernel_size, c->stride,
                 c->block_size, c->top_k);
    else if (j->kind == KIND_WINDOW)
        snprintf(buf, cap, "%s window %s d%d dv%d g%d w%d", target, tool_dtype_name(w->dtype), w->head_dim,
                 w->value_dim ? w->value_dim : w->head_dim, w->num_q_heads, w->window);
    else if (j->kind == KIND_GATE)
        snprintf(buf, cap, "%s gate %s dv%d", target, tool_dtype_name(j->gdesc.dtype), j->gdesc.value_dim);
    else if (j->kind == KIND_KVCACHE)
        snprintf(buf, cap, "%s kvcache %s d%d dv%d g%d bk%d k%d page%d", target, tool_dtype_name(kv->dtype),
                 kv->head_dim, kv->value_dim ? kv->value_dim : kv->head_dim, kv->num_q_heads, kv->block_size,
                 kv->top_k, kv->page_size);
    else
        snprintf(buf, cap, "%s %s d%d%s g%d bk%d", target, tool_dtype_name(j->desc.dtype), j->desc.head_dim, dv,
                 j->desc.num_q_heads, j->desc.block_size);
}

fsa_status grid_plans_create(grid_plans *out, const grid_job *j, fsa_context *ctx)
{
    *out = (grid_plans){0};
    switch (j->kind) {
    case KIND_COMPRESSED: return fsa_compressed_plan_create(&out->compressed, ctx, &j->cdesc);
    case KIND_WINDOW: return fsa_window_plan_create(&out->window, ctx, &j->wdesc);
    case KIND_GATE: return fsa_gate_plan_create(&out->gate, ctx, &j->gdesc);
    case KIND_KVCACHE: return fsa_kvcache_plan_create(&out->kvcache, ctx, &j->kdesc);
    default: return fsa_plan_create(&out->selected, ctx, &j->desc);
    }
}

void grid_plans_destroy(grid_plans *p)
{
    fsa_plan_destroy(p->selected);
    fsa_compressed_plan_destroy(p->compressed);
    fsa_window_plan_destroy(p->window);
    fsa_gate_plan_destroy(p->gate);
    fsa_kvcache_plan_destroy(p->kvcache);
    *p = (grid_plans){0};
}
