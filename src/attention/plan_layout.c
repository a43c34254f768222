/* Workspace layouts of a call (where the index, partial rows and dq rows
 * go), the workspace cap a call gets by default, and how a call under its
 * cap is cut into chunks of KV heads and tokens. */
#include "plan.h"

#include <stdint.h>

/* Size arithmetic that saturates instead of wrapping: a layout too large for
 * size_t comes out as SIZE_MAX, which no budget fits and fsa_*_setup refuses. */
static size_t add_sat(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
static size_t mul_sat(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
static size_t mul3_sat(size_t a, size_t b, size_t c) { return mul_sat(mul_sat(a, b), c); }
static size_t align_up(size_t x) { return x > SIZE_MAX - 255 ? SIZE_MAX : (x + 255) & ~(size_t)255; }

#define FSA_PLACE_(field, bytes) \
    out->field = at;            \
    at = align_up(add_sat(at, (bytes)))

/* Places the index arrays of chunks of `heads` KV heads x `tc` tokens, one
 * inversion covering `index_heads` of them, at the start of a workspace, with
 * `entries` list entries per work item at least; returns the first free offset. */
static size_t place_index(fsa_index_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                          int index_heads, int64_t tc, int entries)
{
    out->nb_total = total_tokens / plan->desc.block_size + batch + 1;
    out->chunk_heads = heads;
    out->index_heads = index_heads;
    /* Token chunks with more index heads than the call's KV heads: virtual heads (index_heads_for). */
    out->tchunks = tc < total_tokens && index_heads > heads ? index_heads / plan->desc.num_kv_heads : 1;
    const size_t chunks = (size_t)fsa_index_chunks(out);
    out->n_counts = add_sat(mul_sat((size_t)out->index_heads, (size_t)out->nb_total), 1);
    out->n_chunk = add_sat(mul_sat((size_t)heads, (size_t)out->nb_total), 1);
    const size_t pairs = mul3_sat((size_t)heads, (size_t)tc, (size_t)plan->desc.top_k);
    out->seg_stride = add_sat(out->n_chunk, pairs / (size_t)entries);
    size_t at = 0;
    /* The counters right after the counts: one memset zeroes both. */
    out->counts = at;
    out->work_next = add_sat(at, mul_sat(out->n_counts, 4));
    at = align_up(add_sat(out->work_next, mul3_sat(chunks, FSA_WORK_COUNTERS, 4)));
    FSA_PLACE_(offsets, mul_sat(out->n_counts, 4));
    FSA_PLACE_(work_offsets, mul3_sat(chunks, out->n_chunk, 4));
    return at;
}

static void fsa_layout_place(fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                             int index_heads, int64_t tc)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    const size_t hkv = (size_t)heads, k = (size_t)d->top_k, g = (size_t)plan->group;
    const size_t pairs = mul3_sat(hkv, (size_t)tc, k);
    out->heads = heads;
    size_t at = place_index(&out->index, plan, total_tokens, batch, heads, index_heads, tc,
                            fsa_plan_fwd_item_entries(plan));
    const fsa_index_layout *ix = &out->index;
    const size_t index_pairs = mul3_sat((size_t)ix->index_heads, (size_t)tc, k);
    FSA_PLACE_(work_seg, mul3_sat((size_t)fsa_index_chunks(ix), ix->seg_stride, 4));
    FSA_PLACE_(mask, mul3_sat((size_t)ix->index_heads, (size_t)tc, 8));
    FSA_PLACE_(list, mul_sat(index_pairs, 4));
    FSA_PLACE_(lse_part, mul3_sat(pairs, g, 4));
    FSA_PLACE_(o_part, mul3_sat(pairs, g * (size_t)d->value_dim, 2));
    out->total = at;
}

/* List entries per backward work item of a launch of `heads` KV heads x tc
 * tokens: one round, halved (up to FSA_BWD_MAX_HALVINGS times) while the
 * call's items over every KV head make fewer than 2 waves, so short inputs
 * still fill the device; `rounds` (else `fallback`) times a whole round where
 * the launch's own items (a head chunk's or token chunk's, not the call's) still
 * make 2 waves.
 * So a chunk never takes smaller items than the call of every head would
 * (nor more dK/dV partial slots), and takes larger ones only where its
 * launch stays full. Long lists take items of up to *max_rounds times this
 * (fsa_bwd_list_item_entries): at most 1 / FSA_BWD_ITEM_SHARE_PARTS of a
 * CTA's share of the launch, so that a launch of few items (a one-head chunk)
 * does not wait on its longest lists (block 0's, which every token selects). */
static int bwd_entries_per_item(const fsa_plan *plan, int heads, int64_t tc, int rounds, int fallback,
                                int *max_rounds)
{
    const int64_t per_head = tc * plan->desc.top_k * (plan->desc.block_size / plan->config.bwd_keys);
    const int64_t call = per_head * plan->desc.num_kv_heads, launch = per_head * heads;
    const int64_t grid = plan->bwd_grid > 0 ? plan->bwd_grid : 1;
    int halvings = 0;
    while (halvings < FSA_BWD_MAX_HALVINGS && call / fsa_bwd_item_entries(plan->group, halvings) < 2 * grid) halvings++;
    int e = fsa_bwd_item_entries(plan->group, halvings);
    if (halvings == 0 && launch / ((int64_t)e * rounds) >= 2 * grid)
        e *= rounds;
    else if (halvings == 0 && launch / ((int64_t)e * fallback) >= 2 * grid)
        e *= fallback;
    const int64_t m = launch / grid / ((int64_t)FSA_BWD_ITEM_SHARE_PARTS * e);
    *max_rounds = plan->bwd_list_rounds ? plan->bwd_list_rounds
                                        : m < 1 ? 1 : m > FSA_BWD_MAX_ITEM_ROUNDS ? FSA_BWD_MAX_ITEM_ROUNDS : (int)m;
    return e;
}

static void bwd_layout_place(fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                             int index_heads, int64_t tc, fsa_algorithm order)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    const size_t hkv = (size_t)heads, k = (size_t)d->top_k, g = (size_t)plan->group;
    const size_t dim = (size_t)d->head_dim, bk = (size_t)d->block_size;
    const size_t dkv = (size_t)fsa_bwd_dkv_row(d->head_dim, (int)d->value_dim); /* dK then dV floats per row */
    const size_t pairs = mul3_sat(hkv, (size_t)tc, k);
    /* FSA_BWD_ITEM_ROUNDS_DEFAULT rounds for token chunks and groups up to FSA_BWD_ITEM_ROUNDS_MAX_GROUP,
     * else one; head chunks of those groups FSA_BWD_HEAD_CHUNK_ITEM_ROUNDS where their launch keeps 2
     * waves with them (FSA_BWD_ITEM_ROUNDS, for measuring, replaces all of these). */
    const int rounds = plan->bwd_item_rounds                                               ? plan->bwd_item_rounds
                       : tc < total_tokens || plan->group <= FSA_BWD_ITEM_ROUNDS_MAX_GROUP ? FSA_BWD_ITEM_ROUNDS_DEFAULT
                                                                                           : 1;
    const int head_chunk = tc >= total_tokens && heads < d->num_kv_heads && plan->group <= FSA_BWD_ITEM_ROUNDS_MAX_GROUP;
    const int first = !plan->bwd_item_rounds && head_chunk ? FSA_BWD_HEAD_CHUNK_ITEM_ROUNDS : rounds;
    out->item_entries = bwd_entries_per_item(plan, heads, tc, first, rounds, &out->item_max_rounds);
    const size_t e = (size_t)out->item_entries;
    const size_t slices = (size_t)(d->block_size / plan->config.bwd_keys);
    out->algorithm = order;
    out->heads = heads;
    size_t at = place_index(&out->index, plan, total_tokens, batch, heads, index_heads, tc, out->item_entries);
    const fsa_index_layout *ix = &out->index;
    const size_t n = ix->n_chunk, chunks = (size_t)fsa_index_chunks(ix);
    const size_t index_pairs = mul3_sat((size_t)ix->index_heads, (size_t)tc, k);
    FSA_PLACE_(part_offsets, mul3_sat(chunks, n, 4));
    FSA_PLACE_(work_seg, mul3_sat(chunks, ix->seg_stride, 4));
    /* delta of every head of the group (prep runs once per inversion). The main kernels' work
     * counters are the index's (place_index), zeroed with its counts. */
    FSA_PLACE_(mask, mul3_sat((size_t)ix->index_heads, (size_t)tc, 8));
    FSA_PLACE_(list_sorted, mul_sat(index_pairs, 4));
    FSA_PLACE_(delta, mul3_sat((size_t)ix->index_heads, g * 4, (size_t)tc));
    const size_t dq_bytes = out->algorithm == FSA_ALGORITHM_FSA ? mul3_sat(pairs, slices * g, dim * 2) : 0;
    FSA_PLACE_(dq_part, dq_bytes);
    /* The unsorted lists are read by the sort only, before any main kernel writes dq rows: they may
     * share the dq rows' bytes. */
    if (dq_bytes >= mul_sat(index_pairs, 4)) {
        out->list = out->dq_part;
    } else {
        FSA_PLACE_(list, mul_sat(index_pairs, 4));
    }
    /* Items of split segments (more than e entries each): ceil(c / e) <= c / e + 1
     * per segment, and at most pairs / e such segments. */
    const size_t split_items = add_sat(pairs / e, n < pairs / e ? n : pairs / e);
    FSA_PLACE_(dkv_part, mul_sat(split_items, bk * dkv * 4));
    /* A chunk of every token in one pass writes dk and dv without the accumulator. */
    out->dkv_direct = tc >= total_tokens && fsa_bwd_d_parts(d->head_dim, (int)d->value_dim) == 1;
    FSA_PLACE_(dkv_acc, out->dkv_direct ? 0 : mul3_sat((size_t)total_tokens, hkv, dkv * 4));
    out->total = at;
}
#undef FSA_PLACE_

static uint64_t layout_budget(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens);

/* Workspace bytes of chunks of `heads` KV heads x `tc` tokens, one inversion covering `index_heads`. */
typedef size_t (*group_total_fn)(const fsa_plan *plan, int64_t total_tokens, int batch, int heads, int index_heads,
                                 int64_t tc, fsa_algorithm order);

static size_t fsa_group_total(const fsa_plan *plan, int64_t total_tokens, int batch, int heads, int index_heads,
                              int64_t tc, fsa_algorithm order)
{
    (void)order;
    fsa_fsa_layout l;
    fsa_layout_place(&l, plan, total_tokens, batch, heads, index_heads, tc);
    return l.total;
}

static size_t bwd_group_total(const fsa_plan *plan, int64_t total_tokens, int batch, int heads, int index_heads,
                              int64_t tc, fsa_algorithm order)
{
    fsa_bwd_layout l;
    bwd_layout_place(&l, plan, total_tokens, batch, heads, index_heads, tc, order);
    return l.total;
}

/* The divisors of n (1 .. INT_MAX) in descending order; returns how many
 * (at most FSA_MAX_DIVISORS: 1600 is the most any int has). The chunk
 * searches walk these instead of every head count: a plan of 2^28 KV heads
 * took seconds a query. */
#define FSA_MAX_DIVISORS 1600
static int divisors_desc(int *out, int n)
{
    int low = 0, high = 0, small[FSA_MAX_DIVISORS / 2]; /* (those up to sqrt(n): half of them at most) */
    for (int64_t d = 1; d * d <= n; d++)
        if (n % d == 0) {
            small[low++] = (int)d;
            if (d * d != n) out[high++] = (int)(n / d); /* the large partners, descending */
        }
    for (int i = low - 1; i >= 0; i--) out[high++] = small[i];
    return high;
}

/* The divisors of n, descending, worked out once per thread and head count
 * (a query runs the searches dozens of times over the same Hkv). */
typedef struct divisor_list {
    int n, count;
    int d[FSA_MAX_DIVISORS];
} divisor_list;

static const divisor_list *divisors_of(int n)
{
    static _Thread_local divisor_list memo;
    if (memo.n != n) {
        memo.count = divisors_desc(memo.d, n);
        memo.n = n;
    }
    return &memo;
}

/* The KV heads one index inversion covers for chunks of `heads` heads x `tc`
 * tokens: the chunk's own for token chunks (or one chunk of every head);
 * else the most heads (a multiple of `heads` that divides Hkv) whose layout
 * fits the call's cap, so that their chunks share one inversion (and the
 * backward's prep) instead of one each. FSA_INDEX_ONCE=0: the chunk's own
 * (to time the two against each other). */
static int index_heads_for(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens, int batch, int heads,
                           int64_t tc, group_total_fn total, fsa_algorithm order)
{
    const int hkv = plan->desc.num_kv_heads;
    if (plan->index_per_chunk) return heads;
    if (tc < total_tokens) {
        /* The backward's token chunks of one head: one inversion for every (KV head, token chunk)
         * when its lists fit beside one chunk's arrays and stay within int32 positions. */
        if (op != FSA_OP_BWD || heads != 1) return heads;
        const int64_t n = (total_tokens + tc - 1) / tc;
        if (n > INT32_MAX / hkv || (int64_t)hkv * n * tc > (INT32_MAX - 1) / plan->desc.top_k) return heads;
        const int v = hkv * (int)n;
        return total(plan, total_tokens, batch, heads, v, tc, order) <= layout_budget(plan, op, total_tokens) ? v
                                                                                                           : heads;
    }
    if (heads >= hkv) return heads;
    const uint64_t budget = layout_budget(plan, op, total_tokens);
    const divisor_list *dl = divisors_of(hkv);
    for (int i = 0; i < dl->count && dl->d[i] > heads; i++) {
        const int g = dl->d[i];
        if (g % heads == 0 && total(plan, total_tokens, batch, heads, g, tc, order) <= budget) return g;
    }
    return heads;
}

/* Workspace bytes of chunks of `heads` KV heads x `tc` tokens, with the index their layout takes. */
static size_t layout_total(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens, int batch, int heads,
                           int64_t tc, group_total_fn total, fsa_algorithm order)
{
    const int g = index_heads_for(plan, op, total_tokens, batch, heads, tc, total, order);
    return total(plan, total_tokens, batch, heads, g, tc, order);
}

void fsa_fsa_layout_for(fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                        int64_t tc)
{
    const int g = index_heads_for(plan, FSA_OP_FWD, total_tokens, batch, heads, tc, fsa_group_total,
                                  FSA_ALGORITHM_FSA);
    fsa_layout_place(out, plan, total_tokens, batch, heads, g, tc);
}

void fsa_bwd_layout_for(fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                        int64_t tc, fsa_algorithm order)
{
    const int g = index_heads_for(plan, FSA_OP_BWD, total_tokens, batch, heads, tc, bwd_group_total, order);
    bwd_layout_place(out, plan, total_tokens, batch, heads, g, tc, order);
}

/* The default follows the call: a short one (whose outputs are small) gets
 * the room to run in one chunk, a long one what its outputs leave of the
 * budget, so the memory of a training step stays bounded either way (the
 * forward's workspace is gone before the backward allocates dq, dk, dv). */
uint64_t fsa_call_workspace_cap(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    if (d->workspace_limit != 0) return d->workspace_limit;
    const size_t hq = (size_t)d->num_q_heads, hkv = (size_t)d->num_kv_heads;
    const size_t dk = (size_t)d->head_dim, dv = (size_t)d->value_dim; /* 2-byte elements */
    size_t per_token = hq * dv * 2 + hq * 4;                                   /* o and lse */
    if (op == FSA_OP_BWD) per_token = add_sat(per_token, (hq * dk + hkv * (dk + dv)) * 2); /* dq, dk and dv */
    const size_t own = mul_sat((size_t)total_tokens, per_token);
    const uint64_t left = own < FSA_WORKSPACE_DEFAULT_BUDGET ? FSA_WORKSPACE_DEFAULT_BUDGET - own : 0;
    /* A backward's token chunks of one KV head carry that head's fp32 dK/dV
     * accumulator over every token, which grows with T like the outputs: a
     * floor without it would leave long calls (past ~250K tokens at D 128)
     * chunks of a few tokens, millions of launches. */
    uint64_t floor = FSA_WORKSPACE_DEFAULT_MIN;
    if (op == FSA_OP_BWD)
        floor = add_sat(floor, mul_sat((size_t)total_tokens, (size_t)fsa_bwd_dkv_row((int)dk, (int)dv) * 4));
    return left > floor ? left : floor;
}

/* The bytes a layout may take under the call's cap: 16 x 256 bytes below it
 * cover the arrays' alignment padding. UINT64_MAX: no cap. */
static uint64_t layout_budget(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens)
{
    const uint64_t cap = fsa_call_workspace_cap(plan, op, total_tokens);
    if (cap == FSA_WORKSPACE_UNLIMITED) return cap;
    return cap > 16 * 256 ? cap - 16 * 256 : 0;
}

/* Tokens one chunk may hold whatever the cap: int32 list entries
 * (fsa_entry_pack) and the packed token bits; and room above the forward's
 * work items (at most its pairs), which its main kernels count in int and
 * step by chunks of the persistent grid (sel_fwd_main*.cu). */
int64_t fsa_fwd_pair_room(const fsa_plan *plan)
{
    const int64_t steps = (int64_t)(plan->main_grid > 0 ? plan->main_grid : 1) * FSA_FWD_WG_CHUNK_ITEMS *
                          (FSA_FWD_WG_TAIL_WAVES + 2);
    return INT32_MAX - 1 - steps;
}

static int64_t max_chunk_tokens(const fsa_plan *plan, int64_t total_tokens)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    int64_t tc = total_tokens;
    int64_t pair_cap = fsa_fwd_pair_room(plan) / ((int64_t)d->num_kv_heads * d->top_k);
    if (tc > pair_cap) tc = pair_cap;
    if (tc > FSA_MAX_CHUNK_TOKENS) tc = FSA_MAX_CHUNK_TOKENS;
    return tc > 0 ? tc : 1;
}

/* Tokens per chunk of `heads` KV heads: all of them (up to max_chunk_tokens)
 * when they fit the cap; else the largest chunk whose layout fits (a
 * bisection), then even chunks so the last one is not a sliver, as long as
 * they still fit. One token when even that does not fit. */
static int64_t chunk_tokens(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens, int batch, int heads,
                            group_total_fn gt, fsa_algorithm order, uint64_t budget)
{
    int64_t tc = max_chunk_tokens(plan, total_tokens);
    if (layout_total(plan, op, total_tokens, batch, heads, tc, gt, order) > budget) {
        int64_t lo = 1, hi = tc; /* the answer is lo when even one token does not fit */
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo + 1) / 2;
            if (layout_total(plan, op, total_tokens, batch, heads, mid, gt, order) <= budget) lo = mid;
            else hi = mid - 1;
        }
        tc = lo;
        const int64_t n = (total_tokens + tc - 1) / tc;
        const int64_t even = (total_tokens + n - 1) / n;
        if (layout_total(plan, op, total_tokens, batch, heads, even, gt, order) <= budget) tc = even;
    }
    return tc;
}

/* Whether a chunk of `heads` KV heads can number its (KV head, block)
 * segments in an int, as the index's scatter does (work_seg). */
static int segments_indexable(const fsa_plan *plan, int64_t total_tokens, int batch, int heads)
{
    const int64_t nb_total = total_tokens / plan->desc.block_size + batch + 1; /* as place_index */
    return nb_total <= (INT32_MAX - 1) / heads;
}

/* Heads first (fsa_bwd_chunk in plan.h says why), and among chunks of every
 * token first those that leave room for one index of every head: an index
 * inversion costs about the same fixed time whatever its heads, so one
 * inversion for 32 one-head chunks measured faster than one per two of 16
 * two-head chunks (bench/NOTES.md). */
static void chunk_of(int *heads_out, int64_t *tc_out, const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens,
                     int batch, group_total_fn group_total, fsa_algorithm order)
{
    const int hkv = plan->desc.num_kv_heads;
    const int64_t all = max_chunk_tokens(plan, total_tokens);
    const uint64_t budget = layout_budget(plan, op, total_tokens);
    const int one = segments_indexable(plan, total_tokens, batch, hkv) &&
                    layout_total(plan, op, total_tokens, batch, hkv, all, group_total, order) <= budget;
    const int shared = !one && index_heads_for(plan, op, total_tokens, batch, 1, all, group_total, order) > 1;
    const divisor_list *dl = divisors_of(hkv);
    for (int i = 1; shared && all >= total_tokens && i < dl->count; i++) { /* (d[0] is hkv) */
        const int heads = dl->d[i];
        if (segments_indexable(plan, total_tokens, batch, heads) &&
            group_total(plan, total_tokens, batch, heads, hkv, all, order) <= budget) {
            *heads_out = heads;
            *tc_out = all;
            return;
        }
    }
    for (int i = 0; i < dl->count; i++) {
        const int heads = dl->d[i];
        if (heads > 1 && !segments_indexable(plan, total_tokens, batch, heads)) continue;
        if (layout_total(plan, op, total_tokens, batch, heads, all, group_total, order) <= budget || heads == 1) {
            *heads_out = heads;
            *tc_out = heads > 1 ? all : chunk_tokens(plan, op, total_tokens, batch, 1, group_total, order, budget);
            return;
        }
    }
}

void fsa_fwd_chunk(int *heads_out, int64_t *tc_out, const fsa_plan *plan, int64_t total_tokens, int batch)
{
    chunk_of(heads_out, tc_out, plan, FSA_OP_FWD, total_tokens, batch, fsa_group_total, FSA_ALGORITHM_FSA);
}

void fsa_bwd_chunk(int *heads_out, int64_t *tc_out, const fsa_plan *plan, int64_t total_tokens, int batch,
                   fsa_algorithm order)
{
    chunk_of(heads_out, tc_out, plan, FSA_OP_BWD, total_tokens, batch, bwd_group_total, order);
}
