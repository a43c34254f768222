/* The plan's answers for one call: workspace sizes, checked as the calls
 * check their arguments, and the path a call takes. */
#include "launch.h"

#include "base/status_internal.h"

#include <stdint.h>

#define STAGE "plan"

fsa_status fsa_check_token_entries(const fsa_plan *plan, const char *stage)
{
    const int64_t per_token = (int64_t)plan->desc.num_kv_heads * plan->desc.top_k;
    if (per_token > fsa_fwd_pair_room(plan))
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage,
                             "%d KV heads x top-k %d list entries per token exceed int32 (less %lld steps of the "
                             "forward's work counter)",
                             plan->desc.num_kv_heads, plan->desc.top_k,
                             (long long)(INT32_MAX - 1 - fsa_fwd_pair_room(plan)));
    return FSA_STATUS_OK;
}

/* What the layouts cannot describe: one token's list entries past the int32
 * range, or a workspace past size_t. */
static fsa_status check_indexable(const fsa_plan *plan, size_t total, const char *stage)
{
    const fsa_status st = fsa_check_token_entries(plan, stage);
    if (st != FSA_STATUS_OK) return st;
    if (total == SIZE_MAX)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage, "the workspace of %d KV heads overflows size_t",
                             plan->desc.num_kv_heads);
    return FSA_STATUS_OK;
}

/* The index kernels (sel_index.cu) address a counter by a 32-bit key, its
 * segment's distance from the segment of the CTA's first row: a CTA's
 * FSA_INDEX_THREADS rows, tc tokens per (virtual) head, span up to
 * threads / tc + 2 heads of nb_total segments each. Only tiny token chunks
 * (a cap that leaves room for a few tokens) of millions of blocks come near. */
static fsa_status check_index_keys(const fsa_index_layout *ix, int64_t tc, const char *stage)
{
    const int64_t heads = (FSA_INDEX_THREADS + tc - 1) / tc + 2;
    if (ix->nb_total > (INT32_MAX - 1) / heads)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage,
                             "token chunks of %lld tokens over %lld blocks per KV head exceed the index's 32-bit keys "
                             "(a larger workspace cap gives longer chunks)",
                             (long long)tc, (long long)ix->nb_total);
    /* The scatter names each work item's segment, its place among the
     * chunk's chunk_heads x nb_total, in an int (work_seg); the chunk search
     * takes no more heads than that allows, down to one. */
    if (ix->nb_total > (INT32_MAX - 1) / ix->chunk_heads)
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage,
                             "a chunk of %d KV heads x %lld blocks per KV head exceeds the index's 32-bit segment "
                             "numbers", ix->chunk_heads, (long long)ix->nb_total);
    return FSA_STATUS_OK;
}

uint64_t fsa_bwd_main_work(const fsa_plan *plan, const fsa_bwd_layout *l, int64_t tokens)
{
    const uint64_t entries = l->item_entries > 0 ? (uint64_t)l->item_entries : 1;
    return ((uint64_t)l->heads * (uint64_t)tokens * (uint64_t)plan->desc.top_k / entries + (uint64_t)l->index.n_chunk) *
           (uint64_t)fsa_bwd_key_slices(plan);
}

int fsa_bwd_work_fits(const fsa_plan *plan, uint64_t work)
{
    const uint64_t bwd_grid = plan->bwd_grid > 0 ? (uint64_t)plan->bwd_grid : 1;
    const uint64_t grid = work < bwd_grid ? work : bwd_grid; /* as selected_bwd.c launches it */
    return work <= (uint64_t)INT32_MAX && (work == 0 || work - 1 + grid <= (uint64_t)INT32_MAX);
}

/* The main kernel counts a launch's work in int32: a chunk whose count (or
 * whose CTAs' last fetch) passes it would wrap and skip work. */
static fsa_status check_bwd_work(const fsa_plan *plan, const fsa_bwd_layout *l, int64_t tc, const char *stage)
{
    const uint64_t work = fsa_bwd_main_work(plan, l, tc);
    if (!fsa_bwd_work_fits(plan, work))
        return fsa_error_set(FSA_STATUS_UNSUPPORTED, stage,
                             "a backward chunk of %d KV heads x %lld tokens is %llu work items x key slices, past the "
                             "main kernel's 32-bit count (a workspace cap gives shorter chunks)",
                             l->heads, (long long)tc, (unsigned long long)work);
    return FSA_STATUS_OK;
}

/* A measuring call runs every candidate, and once a measurement (this
 * call's or another thread's) lands, calls take its winner: a workspace
 * sized now must hold the larger layout. */
static fsa_algorithm order_of_choice(const fsa_choice *c)
{
    return c->record_pending ? FSA_ALGORITHM_FSA : c->variant.order;
}

fsa_algorithm fsa_workspace_order(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens)
{
    fsa_choice c;
    fsa_choose(&c, plan, op, total_tokens);
    return order_of_choice(&c);
}

fsa_status fsa_fsa_setup(int64_t *tc_out, fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                         const char *stage)
{
    fsa_status st = check_indexable(plan, 0, stage);
    if (st != FSA_STATUS_OK) return st;
    int heads;
    fsa_fwd_chunk(&heads, tc_out, plan, total_tokens, batch);
    fsa_fsa_layout_for(out, plan, total_tokens, batch, heads, *tc_out);
    st = check_indexable(plan, out->total, stage);
    return st == FSA_STATUS_OK ? check_index_keys(&out->index, *tc_out, stage) : st;
}

fsa_status fsa_bwd_setup(int64_t *tc_out, fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                         fsa_algorithm order, const char *stage)
{
    fsa_status st = check_indexable(plan, 0, stage);
    if (st != FSA_STATUS_OK) return st;
    int heads;
    fsa_bwd_chunk(&heads, tc_out, plan, total_tokens, batch, order);
    fsa_bwd_layout_for(out, plan, total_tokens, batch, heads, *tc_out, order);
    st = check_indexable(plan, out->total, stage);
    /* (The work count holds the chunk's segments: past int32 it is the first to say so.) */
    if (st == FSA_STATUS_OK) st = check_bwd_work(plan, out, *tc_out, stage);
    return st == FSA_STATUS_OK ? check_index_keys(&out->index, *tc_out, stage) : st;
}

fsa_status fsa_plan_workspace_size_bwd(size_t *bytes_out, const fsa_plan *plan, int64_t total_tokens, int batch)
{
    fsa_status st = FSA_STATUS_OK;
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "bytes_out and plan must not be NULL");
    *bytes_out = 0;
    if (!plan->bwd_available)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "the plan was created without backward = 1");
    FSA_CHECK(fsa_check_tokens(STAGE, total_tokens, batch));
    if (total_tokens == 0) goto cleanup;
    int64_t tc;
    fsa_bwd_layout l;
    fsa_choice ch; /* one read of the bucket's slot: another thread's record may land at any time */
    fsa_choose(&ch, plan, FSA_OP_BWD, total_tokens);
    FSA_CHECK(fsa_bwd_setup(&tc, &l, plan, total_tokens, batch, order_of_choice(&ch), STAGE));
    size_t bytes = l.total;
    if (ch.record_pending) {
        /* Once the record lands, calls take its order with that order's own
         * chunks: under a cap the NSA order's (no dq rows) are longer and
         * its layout can be the larger. A workspace sized now holds either. */
        fsa_candidates c;
        fsa_candidates_of(&c, plan, FSA_OP_BWD);
        for (int i = 0; i < c.n; i++) {
            if (c.v[i].order == FSA_ALGORITHM_FSA) continue;
            if (fsa_bwd_setup(&tc, &l, plan, total_tokens, batch, c.v[i].order, STAGE) == FSA_STATUS_OK) {
                if (l.total > bytes) bytes = l.total;
            } else {
                fsa_error_clear(); /* its calls fail whatever the workspace */
            }
        }
    }
    *bytes_out = bytes;
cleanup:
    return st;
}

fsa_status fsa_plan_workspace_size(size_t *bytes_out, const fsa_plan *plan, int64_t total_tokens, int batch)
{
    fsa_status st = FSA_STATUS_OK;
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "bytes_out and plan must not be NULL");
    *bytes_out = 0;
    FSA_CHECK(fsa_check_tokens(STAGE, total_tokens, batch));
    if (total_tokens == 0 || fsa_workspace_order(plan, FSA_OP_FWD, total_tokens) != FSA_ALGORITHM_FSA) goto cleanup;
    int64_t tc;
    fsa_fsa_layout l;
    st = fsa_fsa_setup(&tc, &l, plan, total_tokens, batch, STAGE);
    if (st != FSA_STATUS_OK && fsa_plan_choose(plan, total_tokens, NULL) != FSA_ALGORITHM_FSA) {
        /* Only measuring wanted the FSA layout; the call then runs the chosen order without measuring. */
        fsa_error_clear();
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    *bytes_out = l.total;
cleanup:
    return st;
}

fsa_status fsa_plan_algorithm(fsa_algorithm *algorithm_out, const char **reason_out, const fsa_plan *plan,
                              int64_t total_tokens)
{
    if (algorithm_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "algorithm_out and plan must not be NULL");
    fsa_status st = fsa_check_token_count(STAGE, total_tokens);
    if (st != FSA_STATUS_OK) return st;
    *algorithm_out = fsa_plan_choose(plan, total_tokens, reason_out);
    return FSA_STATUS_OK;
}

fsa_status fsa_plan_algorithm_bwd(fsa_algorithm *algorithm_out, const char **reason_out, const fsa_plan *plan,
                                  int64_t total_tokens)
{
    if (algorithm_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "algorithm_out and plan must not be NULL");
    if (!plan->bwd_available)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE, "the plan was created without backward = 1");
    fsa_status st = fsa_check_token_count(STAGE, total_tokens);
    if (st != FSA_STATUS_OK) return st;
    *algorithm_out = fsa_plan_choose_bwd(plan, total_tokens, reason_out);
    return FSA_STATUS_OK;
}

fsa_status fsa_plan_choice_get(fsa_plan_choice *out, const fsa_plan *plan, fsa_operation operation,
                               int64_t total_tokens)
{
    if (out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "out and plan must not be NULL");
    fsa_status st = fsa_plan_choice_check(out, STAGE);
    if (st != FSA_STATUS_OK) return st;
    if (operation != FSA_OPERATION_FORWARD && operation != FSA_OPERATION_BACKWARD)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE, "unknown operation %d", (int)operation);
    if (operation == FSA_OPERATION_BACKWARD && !plan->bwd_available)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE, "the plan was created without backward = 1");
    st = fsa_check_token_count(STAGE, total_tokens);
    if (st != FSA_STATUS_OK) return st;
    fsa_choice c;
    fsa_choose(&c, plan, operation == FSA_OPERATION_FORWARD ? FSA_OP_FWD : FSA_OP_BWD, total_tokens);
    fsa_plan_choice r = FSA_PLAN_CHOICE_INIT;
    r.algorithm = c.variant.order;
    r.source = c.source;
    r.reason = c.reason;
    r.variant = fsa_order_name(c.variant.order); /* the only variant parameter so far */
    r.bucket_tokens = fsa_tune_bucket_tokens(c.bucket);
    r.candidates = c.candidates;
    r.will_measure = c.may_measure && plan->ctx->cu != NULL; /* calls measure on a device only */
    return fsa_plan_choice_write(out, &r, STAGE);
}

fsa_algorithm fsa_plan_choose(const fsa_plan *plan, int64_t total_tokens, const char **reason)
{
    fsa_choice c;
    fsa_choose(&c, plan, FSA_OP_FWD, total_tokens);
    if (reason) *reason = c.reason;
    return c.variant.order;
}

fsa_algorithm fsa_plan_choose_bwd(const fsa_plan *plan, int64_t total_tokens, const char **reason)
{
    fsa_choice c;
    fsa_choose(&c, plan, FSA_OP_BWD, total_tokens);
    if (reason) *reason = c.reason;
    return c.variant.order;
}
