/* The chooser: candidates per operation, token buckets, the heuristic and
 * the decision to measure. Host-only, no driver. */
#include "choose.h"
#include "plan.h"


#include <stdio.h>
#include <string.h>

int fsa_tune_bucket(int64_t total_tokens)
{
    int b = 0;
    while (b < FSA_TUNE_BUCKETS - 1 && ((int64_t)1 << b) < total_tokens) b++;
    return b;
}

int64_t fsa_tune_bucket_tokens(int bucket) { return (int64_t)1 << bucket; }

const char *fsa_order_name(fsa_algorithm order) { return order == FSA_ALGORITHM_NSA ? "nsa" : "fsa"; }

void fsa_variant_name(char *out, size_t n, const fsa_variant *v)
{
    int len = snprintf(out, n, "%s", v->order == FSA_ALGORITHM_AUTO ? "kvc" : fsa_order_name(v->order));
    if (v->tile_rows && len >= 0 && (size_t)len < n) len += snprintf(out + len, n - (size_t)len, ".t%d", v->tile_rows);
    if (v->stages && len >= 0 && (size_t)len < n) len += snprintf(out + len, n - (size_t)len, ".p%d", v->stages);
    if (v->splits && len >= 0 && (size_t)len < n) snprintf(out + len, n - (size_t)len, ".s%d", v->splits);
}

static void add(fsa_candidates *c, fsa_algorithm order)
{
    if (c->n >= FSA_MAX_VARIANTS) return;
    const fsa_variant v = {order, 0, 0, 0};
    c->v[c->n++] = v;
}

void fsa_candidates_of(fsa_candidates *out, const fsa_plan *plan, fsa_op_kind op)
{
    memset(out, 0, sizeof *out);
    const fsa_algorithm forced = plan->desc.algorithm;
    const int fsa_ok = op == FSA_OP_FWD ? plan->fsa_available : plan->bwd_available;
    const int nsa_ok = op == FSA_OP_FWD ? plan->nsa_available : plan->bwd_nsa_available;
    if (forced != FSA_ALGORITHM_AUTO) {
        add(out, forced);
        return;
    }
    if (fsa_ok) add(out, FSA_ALGORITHM_FSA);
    if (nsa_ok) add(out, FSA_ALGORITHM_NSA);
}

/* Forward, both orders available. Measured on an H200 (bench/RESULTS.md):
 * up to T = 64 the NSA order is faster for every group size (T = 1, G = 1:
 * 0.009 ms against 0.023 ms), because the FSA pipeline's fixed cost (index
 * inversion, main kernel, reduction: five launches) dominates tiny inputs;
 * with large groups the NSA order stays ahead longer (G >= 8 up to T = 256,
 * G >= 16 up to T = 512), where one CTA per token serves many query heads. */
static fsa_algorithm forward_rule(const fsa_plan *plan, int64_t total_tokens, const char **why)
{
    const int group = plan->group;
    const int64_t nsa_up_to = group >= 16 ? 512 : group >= 8 ? 256 : 64;
    if (!fsa_nsa_grid_fits(plan)) {
        *why = "heuristic: FSA order (too many KV heads for the NSA grid)";
        return FSA_ALGORITHM_FSA;
    }
    if (total_tokens <= 64) {
        *why = "heuristic: NSA order for short inputs (T <= 64), every group size";
        return FSA_ALGORITHM_NSA;
    }
    if (total_tokens <= nsa_up_to) {
        *why = "heuristic: NSA order for G >= 8 and short inputs";
        return FSA_ALGORITHM_NSA;
    }
    *why = "heuristic: FSA order";
    return FSA_ALGORITHM_FSA;
}

fsa_variant fsa_heuristic(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens, fsa_choice_source *source,
                          const char **reason)
{
    fsa_candidates c;
    fsa_candidates_of(&c, plan, op);
    fsa_variant v = {FSA_ALGORITHM_FSA, 0, 0, 0};
    *source = FSA_CHOICE_HEURISTIC;
    if (plan->desc.algorithm != FSA_ALGORITHM_AUTO) {
        v.order = plan->desc.algorithm;
        *source = FSA_CHOICE_FORCED;
        *reason = "forced by the descriptor";
        return v;
    }
    if (op == FSA_OP_FWD) {
        v.order = forward_rule(plan, total_tokens, reason);
    } else {
        /* Measured on an H200 (bench/RESULTS.md, T 64..65536, G 1..64): the
         * FSA-order dq is never slower. The NSA-order dq reloads every
         * selected K/V block per token and runs after the dK/dV kernel. */
        *reason = "heuristic: the FSA-order dq is at least as fast on every measured shape";
    }
    /* A forward of one fitting order takes it as the only one, whichever the
     * rule names. (A backward's candidates are the orders the plan loaded: with
     * tuning off, only the rule's, so one candidate there is the heuristic's.) */
    if (!(op == FSA_OP_FWD && c.n == 1))
        for (int i = 0; i < c.n; i++)
            if (c.v[i].order == v.order) return v;
    /* The rule's order does not fit this shape: the other one (plan creation
     * refuses a shape that fits neither). */
    if (c.n > 0) v = c.v[0];
    *source = FSA_CHOICE_ONLY_ONE;
    *reason = v.order == FSA_ALGORITHM_NSA ? "only the NSA path fits this shape" : "only the FSA path fits this shape";
    return v;
}

void fsa_choose(fsa_choice *out, const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens)
{
    fsa_candidates c;
    fsa_candidates_of(&c, plan, op);
    memset(out, 0, sizeof *out);
    out->bucket = fsa_tune_bucket(total_tokens);
    out->candidates = c.n;
    const int slot = atomic_load(&plan->tune.slot[op][out->bucket]);
    if (slot > 0 && slot <= c.n) {
        out->variant = c.v[slot - 1];
        out->source = FSA_CHOICE_MEASURED;
        out->reason = "measured: the tuning record of this bucket";
        return;
    }
    out->variant = fsa_heuristic(plan, op, total_tokens, &out->source, &out->reason);
    out->record_pending = plan->tune.level != FSA_TUNE_LEVEL_OFF && c.n > 1 && slot <= 0;
    out->may_measure = out->record_pending && slot == 0;
}

int fsa_tune_should_measure(fsa_tune_level level, int have_record, int candidates, int has_device, int capturing)
{
    return level != FSA_TUNE_LEVEL_OFF && !have_record && candidates > 1 && has_device && capturing == 0;
}
