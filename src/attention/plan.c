/* Plans: validate a selected-attention descriptor, decide which paths fit
 * the target, compile or load their kernels, size workspaces. */
#include "plan.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE "plan"


static const char *dtype_name(fsa_dtype d) { return d == FSA_DTYPE_BF16 ? "bf16" : "f16"; }

/* Row table (token and pair per tile row), K, V, the query tiles in flight,
 * list entries: the main kernel's layout. */
static int main_smem_bytes(int d, int bk, int item_entries)
{
    return 2 * 4 * FSA_MAIN_TILES * FSA_MAIN_ROWS + (2 * bk + fsa_main_q_stages(d) * FSA_MAIN_ROWS) * (d + 8) * 2 +
           item_entries * 4;
}

static int nsa_smem_bytes(int d) { return (16 + 4 * FSA_NSA_STAGE_KEYS) * (d + 8) * 2; }

/* The backward main kernel's layout: row tables (token, pair, lse, delta),
 * K and V of its key slice, two tiles of Q and dO, dS^T, list entries. */
static int bwd_smem_bytes(int d, int keys, int item_entries)
{
    return 4 * 4 * FSA_BWD_TILES * FSA_BWD_ROWS + 2 * keys * (d + 8) * 2 + 4 * FSA_BWD_ROWS * (d + 8) * 2 +
           keys * (FSA_BWD_ROWS + 8) * 2 + item_entries * 4;
}

/* The NSA-order dq kernel: 16 rows of Q and dO, two 64-key stages of K and V. */
static int bwd_nsa_smem_bytes(int d) { return (2 * 16 + 4 * FSA_NSA_STAGE_KEYS) * (d + 8) * 2; }

static fsa_status validate_desc(const fsa_selected_attention_desc *d)
{
    fsa_status st = FSA_STATUS_OK;
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "dtype %d is neither bf16 nor f16", (int)d->dtype);
    if (d->head_dim < 16 || d->head_dim > 256 || d->head_dim % 16 != 0)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "head_dim %d: must be a multiple of 16 from 16 to 256",
                 d->head_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_q_heads %d and num_kv_heads %d must be positive",
                 d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads % d->num_kv_heads != 0)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_q_heads %d is not a multiple of num_kv_heads %d",
                 d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads / d->num_kv_heads > 128)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "group size %d: at most 128 query heads per KV head",
                 d->num_q_heads / d->num_kv_heads);
    int bk = d->block_size;
    if (bk != 16 && bk != 32 && bk != 64 && bk != 128 && bk != 256)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "block_size %d: must be 16, 32, 64, 128 or 256", bk);
    if (d->top_k < 1 || d->top_k > 64)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "top_k %d: must be 1..64", d->top_k);
    if (!isfinite(d->scale) || d->scale < 0.0f)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))");
    if (d->algorithm != FSA_ALGORITHM_AUTO && d->algorithm != FSA_ALGORITHM_FSA &&
        d->algorithm != FSA_ALGORITHM_NSA)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "unknown algorithm %d", (int)d->algorithm);
    if (d->backward != 0 && d->backward != 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "backward must be 0 or 1");
cleanup:
    return st;
}

typedef struct kernel_params {
    char dtype[8], d[8], g[8], bk[8], k[8], keys[8];
    fsa_param list[5];     /* DTYPE, HEAD_DIM, GROUP, BLOCK_SIZE, TOP_K */
    fsa_param bwd_main[5]; /* DTYPE, HEAD_DIM, GROUP, BLOCK_SIZE, KEYS */
} kernel_params;

static void kernel_params_init(kernel_params *kp, const fsa_plan *plan)
{
    snprintf(kp->dtype, sizeof kp->dtype, "%s", dtype_name(plan->desc.dtype));
    snprintf(kp->d, sizeof kp->d, "%d", plan->desc.head_dim);
    snprintf(kp->g, sizeof kp->g, "%d", plan->group);
    snprintf(kp->bk, sizeof kp->bk, "%d", plan->desc.block_size);
    snprintf(kp->k, sizeof kp->k, "%d", plan->desc.top_k);
    kp->list[0] = (fsa_param){"DTYPE", kp->dtype, ""};
    kp->list[1] = (fsa_param){"HEAD_DIM", kp->d, "d"};
    kp->list[2] = (fsa_param){"GROUP", kp->g, "g"};
    kp->list[3] = (fsa_param){"BLOCK_SIZE", kp->bk, "bk"};
    kp->list[4] = (fsa_param){"TOP_K", kp->k, "k"};
    snprintf(kp->keys, sizeof kp->keys, "%d", plan->bwd_keys);
    memcpy(kp->bwd_main, kp->list, 4 * sizeof(fsa_param));
    kp->bwd_main[4] = (fsa_param){"KEYS", kp->keys, "ks"};
}

/* Blocks that fit on the device at once: the grid of a kernel that loops over its work items. */
static fsa_status persistent_grid(int *grid_out, fsa_context *ctx, CUfunction fn, int threads, int smem)
{
    fsa_status st = FSA_STATUS_OK;
    int per_sm = 0;
    *grid_out = 1;
    if (ctx->cu == NULL) return FSA_STATUS_OK;
    FSA_CHECK(fsa_context_enter(ctx));
    CUresult r = ctx->cu->OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, (size_t)smem);
    fsa_context_leave(ctx);
    if (r != CUDA_SUCCESS) FSA_CHECK(fsa_cu_error(ctx->cu, r, "load", "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
    *grid_out = ctx->sm_count * (per_sm > 0 ? per_sm : 1);
cleanup:
    return st;
}

/* The index kernels, one module for the forward and the backward. */
static fsa_kernel_request index_request(const kernel_params *kp)
{
    const fsa_kernel_request r = {"sel_index", &kp->list[3], 2, "fsa_sel_count\nfsa_sel_scatter\nfsa_sel_sort"};
    return r;
}

static fsa_status load_fsa_kernels(fsa_plan *plan, const kernel_params *kp)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_context *ctx = plan->ctx;
    const fsa_kernel_request index = index_request(kp);
    const fsa_kernel_request main = {"sel_fwd_main", kp->list, 4, "fsa_sel_fwd_main"};
    const fsa_kernel_request reduce = {"sel_fwd_reduce", kp->list, 3, "fsa_sel_fwd_reduce"};
    FSA_CHECK(fsa_context_get_function(&plan->fwd.count, ctx, &index, "fsa_sel_count", 0));
    FSA_CHECK(fsa_context_get_function(&plan->fwd.scatter, ctx, &index, "fsa_sel_scatter", 0));
    FSA_CHECK(fsa_context_get_function(&plan->fwd.main, ctx, &main, "fsa_sel_fwd_main", plan->main_smem));
    FSA_CHECK(fsa_context_get_function(&plan->fwd.reduce, ctx, &reduce, "fsa_sel_fwd_reduce", 0));
    FSA_CHECK(persistent_grid(&plan->main_grid, ctx, plan->fwd.main, FSA_MAIN_THREADS, plan->main_smem));
cleanup:
    return st;
}

static fsa_status load_bwd_kernels(fsa_plan *plan, const kernel_params *kp)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_context *ctx = plan->ctx;
    const fsa_kernel_request index = index_request(kp);
    const fsa_kernel_request prep = {"sel_bwd_prep", kp->list, 2, "fsa_sel_bwd_prep"};
    const fsa_kernel_request main = {"sel_bwd_main", kp->bwd_main, 5, "fsa_sel_bwd_main\nfsa_sel_bwd_main_kv"};
    const fsa_kernel_request reduce = {"sel_bwd_reduce", kp->list, 4,
                                       "fsa_sel_bwd_dq\nfsa_sel_bwd_dkv_sum\nfsa_sel_bwd_dkv_store"};
    const fsa_kernel_request dq_nsa = {"sel_bwd_dq_nsa", kp->list, 4, "fsa_sel_bwd_dq_nsa"};
    fsa_bwd_kernels *k = &plan->bwd;
    FSA_CHECK(fsa_context_get_function(&k->count, ctx, &index, "fsa_sel_count", 0));
    FSA_CHECK(fsa_context_get_function(&k->scatter, ctx, &index, "fsa_sel_scatter", 0));
    FSA_CHECK(fsa_context_get_function(&k->sort, ctx, &index, "fsa_sel_sort", 0));
    FSA_CHECK(fsa_context_get_function(&k->prep, ctx, &prep, "fsa_sel_bwd_prep", 0));
    FSA_CHECK(fsa_context_get_function(&k->main, ctx, &main, "fsa_sel_bwd_main", plan->bwd_smem));
    FSA_CHECK(fsa_context_get_function(&k->main_kv, ctx, &main, "fsa_sel_bwd_main_kv", plan->bwd_smem));
    FSA_CHECK(fsa_context_get_function(&k->dq, ctx, &reduce, "fsa_sel_bwd_dq", 0));
    if (plan->bwd_nsa_available)
        FSA_CHECK(fsa_context_get_function(&k->dq_nsa, ctx, &dq_nsa, "fsa_sel_bwd_dq_nsa", plan->bwd_nsa_smem));
    FSA_CHECK(fsa_context_get_function(&k->dkv_sum, ctx, &reduce, "fsa_sel_bwd_dkv_sum", 0));
    FSA_CHECK(fsa_context_get_function(&k->dkv_store, ctx, &reduce, "fsa_sel_bwd_dkv_store", 0));
    FSA_CHECK(persistent_grid(&plan->bwd_grid, ctx, k->main, plan->bwd_keys / 16 * 32, plan->bwd_smem));
cleanup:
    return st;
}

static fsa_status load_nsa_kernels(fsa_plan *plan, const kernel_params *kp)
{
    const fsa_kernel_request nsa = {"sel_fwd_nsa", kp->list, 4, "fsa_sel_fwd_nsa"};
    return fsa_context_get_function(&plan->fwd.nsa, plan->ctx, &nsa, "fsa_sel_fwd_nsa", plan->nsa_smem);
}

fsa_status fsa_plan_create(fsa_plan **out, fsa_context *ctx, const fsa_selected_attention_desc *desc)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_plan *plan = NULL;
    if (out == NULL || ctx == NULL || desc == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "out, context and descriptor must not be NULL");
    *out = NULL;
    /* The caller's descriptor may be an older, shorter version: newer fields read as zero. */
    fsa_selected_attention_desc d;
    FSA_CHECK(fsa_struct_read(&d, sizeof d, desc, FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE, STAGE,
                              "fsa_selected_attention_desc"));
    desc = &d;
    FSA_CHECK(validate_desc(desc));
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE);
    plan->ctx = ctx;
    plan->desc = *desc;
    plan->group = desc->num_q_heads / desc->num_kv_heads;
    plan->scale = desc->scale > 0.0f ? desc->scale : 1.0f / sqrtf((float)desc->head_dim);

    const int max_smem = ctx->max_smem_per_block; /* the device's, else the target's */
    plan->item_entries = plan->group <= FSA_MAIN_ROWS ? (FSA_MAIN_ROWS / plan->group) * FSA_MAIN_TILES : 0;
    plan->main_smem = main_smem_bytes(desc->head_dim, desc->block_size, plan->item_entries);
    plan->nsa_smem = nsa_smem_bytes(desc->head_dim);
    plan->fsa_available = plan->item_entries > 0 && plan->main_smem <= max_smem;
    plan->nsa_available = plan->nsa_smem <= max_smem;

    int want_fsa = desc->algorithm != FSA_ALGORITHM_NSA;
    int want_nsa = desc->algorithm != FSA_ALGORITHM_FSA;
    if (desc->algorithm == FSA_ALGORITHM_FSA && !plan->fsa_available)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "the FSA path does not fit: group %d (at most %d), %d bytes of shared memory (target %s allows %d)",
                 plan->group, FSA_MAIN_ROWS, plan->main_smem, ctx->target, max_smem);
    if (desc->algorithm == FSA_ALGORITHM_NSA && !plan->nsa_available)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "the NSA path needs %d bytes of shared memory; target %s allows %d",
                 plan->nsa_smem, ctx->target, max_smem);
    if (!plan->fsa_available && !plan->nsa_available)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "no forward path fits target %s", ctx->target);

    if (desc->backward) {
        /* The main kernel takes the largest key slice of the block that fits. */
        plan->bwd_round_entries = fsa_bwd_round_entries_for(plan->group);
        plan->bwd_keys = desc->block_size < FSA_BWD_MAX_KEYS ? desc->block_size : FSA_BWD_MAX_KEYS;
        plan->bwd_smem = bwd_smem_bytes(desc->head_dim, plan->bwd_keys, plan->bwd_round_entries);
        while (plan->bwd_smem > max_smem && plan->bwd_keys > 16) {
            plan->bwd_keys /= 2;
            plan->bwd_smem = bwd_smem_bytes(desc->head_dim, plan->bwd_keys, plan->bwd_round_entries);
        }
        plan->bwd_nsa_smem = bwd_nsa_smem_bytes(desc->head_dim);
        /* AUTO never takes the NSA-order dq (fsa_plan_choose_bwd): only a forced NSA plan loads it. */
        plan->bwd_nsa_available = plan->bwd_nsa_smem <= max_smem && desc->algorithm == FSA_ALGORITHM_NSA;
        if (plan->bwd_smem > max_smem)
            FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                     "the backward needs %d bytes of shared memory even with 16-key slices; target %s allows %d",
                     plan->bwd_smem, ctx->target, max_smem);
        if (desc->algorithm == FSA_ALGORITHM_NSA && plan->bwd_nsa_smem > max_smem)
            FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                     "the NSA-order backward needs %d bytes of shared memory; target %s allows %d", plan->bwd_nsa_smem,
                     ctx->target, max_smem);
        plan->bwd_available = 1;
    }

    kernel_params kp;
    kernel_params_init(&kp, plan);
    if (plan->bwd_available) FSA_CHECK(load_bwd_kernels(plan, &kp));
    if (want_fsa && plan->fsa_available) FSA_CHECK(load_fsa_kernels(plan, &kp));
    else plan->fsa_available = 0;
    if (want_nsa && plan->nsa_available) FSA_CHECK(load_nsa_kernels(plan, &kp));
    else plan->nsa_available = 0;
    *out = plan;
    plan = NULL;
cleanup:
    free(plan);
    return st;
}

void fsa_plan_destroy(fsa_plan *plan) { free(plan); }

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

void fsa_fsa_layout_for(fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int64_t tc)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    const size_t hkv = (size_t)d->num_kv_heads, k = (size_t)d->top_k, g = (size_t)plan->group;
    const size_t pairs = mul3_sat(hkv, (size_t)tc, k);
    out->nb_total = total_tokens / d->block_size + batch + 1;
    const size_t n = add_sat(mul_sat(hkv, (size_t)out->nb_total), 1);
    size_t at = 0;
    FSA_PLACE_(counts, mul_sat(n, 4));
    FSA_PLACE_(offsets, mul_sat(n, 4));
    FSA_PLACE_(work_offsets, mul_sat(n, 4));
    /* At most one partial work item per segment besides the full ones. */
    FSA_PLACE_(work_seg, mul_sat(add_sat(n, pairs / (size_t)plan->item_entries), 4));
    FSA_PLACE_(mask, mul3_sat(hkv, (size_t)tc, 8));
    FSA_PLACE_(list, mul_sat(pairs, 4));
    FSA_PLACE_(lse_part, mul3_sat(pairs, g, 4));
    FSA_PLACE_(o_part, mul3_sat(pairs, g * (size_t)d->head_dim, 2));
    out->total = at;
}

/* List entries per backward work item for a chunk of tc tokens: one round,
 * halved down to an eighth of a round while there are fewer than 2 waves of
 * items, so short inputs still fill the device. (Items of several rounds
 * would save dK/dV partials but measured slower: the longest lists then make
 * the tail; bench/NOTES.md.) */
static int bwd_entries_per_item(const fsa_plan *plan, int64_t tc)
{
    const int64_t work = (int64_t)plan->desc.num_kv_heads * tc * plan->desc.top_k *
                         (plan->desc.block_size / plan->bwd_keys);
    const int64_t grid = plan->bwd_grid > 0 ? plan->bwd_grid : 1;
    const int round = plan->bwd_round_entries;
    const int tok = plan->group <= FSA_BWD_ROWS ? FSA_BWD_ROWS / plan->group : 1;
    int e = round;
    while (e > round / 8 && (e / 2) % tok == 0 && e / 2 >= tok && work / e < 2 * grid) e /= 2;
    return e;
}

void fsa_bwd_layout_for(fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int64_t tc)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    const size_t hkv = (size_t)d->num_kv_heads, k = (size_t)d->top_k, g = (size_t)plan->group;
    const size_t dim = (size_t)d->head_dim, bk = (size_t)d->block_size;
    const size_t pairs = mul3_sat(hkv, (size_t)tc, k);
    out->item_entries = bwd_entries_per_item(plan, tc);
    const size_t e = (size_t)out->item_entries;
    const size_t slices = (size_t)(d->block_size / plan->bwd_keys);
    out->algorithm = fsa_plan_choose_bwd(plan, total_tokens, NULL);
    out->nb_total = total_tokens / d->block_size + batch + 1;
    const size_t n = add_sat(mul_sat(hkv, (size_t)out->nb_total), 1);
    size_t at = 0;
    FSA_PLACE_(counts, mul_sat(n, 4));
    FSA_PLACE_(offsets, mul_sat(n, 4));
    FSA_PLACE_(work_offsets, mul_sat(n, 4));
    FSA_PLACE_(part_offsets, mul_sat(n, 4));
    FSA_PLACE_(work_seg, mul_sat(add_sat(n, pairs / e), 4));
    FSA_PLACE_(work_next, 2 * 4);
    FSA_PLACE_(mask, mul3_sat(hkv, (size_t)tc, 8));
    FSA_PLACE_(list, mul_sat(pairs, 4));
    FSA_PLACE_(list_sorted, mul_sat(pairs, 4));
    FSA_PLACE_(delta, mul3_sat(hkv, g * 4, (size_t)tc));
    FSA_PLACE_(dq_part, out->algorithm == FSA_ALGORITHM_FSA ? mul3_sat(pairs, slices * g, dim * 2) : 0);
    /* Items of split segments (more than e entries each): ceil(c / e) <= c / e + 1
     * per segment, and at most pairs / e such segments. */
    const size_t split_items = add_sat(pairs / e, n < pairs / e ? n : pairs / e);
    FSA_PLACE_(dkv_part, mul_sat(split_items, 2 * bk * dim * 4));
    FSA_PLACE_(dkv_acc, mul3_sat((size_t)total_tokens, hkv, 2 * dim * 4));
    out->total = at;
}
#undef FSA_PLACE_

typedef size_t (*layout_total_fn)(const fsa_plan *plan, int64_t total_tokens, int batch, int64_t tc);

static size_t fsa_layout_total(const fsa_plan *plan, int64_t total_tokens, int batch, int64_t tc)
{
    fsa_fsa_layout l;
    fsa_fsa_layout_for(&l, plan, total_tokens, batch, tc);
    return l.total;
}

static size_t bwd_layout_total(const fsa_plan *plan, int64_t total_tokens, int batch, int64_t tc)
{
    fsa_bwd_layout l;
    fsa_bwd_layout_for(&l, plan, total_tokens, batch, tc);
    return l.total;
}

/* Tokens per chunk: all of them, unless int32 list entries (token << 6 | slot)
 * or the workspace limit need fewer. Under a limit: the largest chunk whose
 * layout fits (a bisection; 16 x 256 bytes cover the arrays' alignment
 * padding), then even chunks so the last one is not a sliver, as long as they
 * still fit. */
static int64_t chunk_tokens(const fsa_plan *plan, int64_t total_tokens, int batch, layout_total_fn total)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    int64_t tc = total_tokens;
    int64_t pair_cap = (INT32_MAX - 1) / ((int64_t)d->num_kv_heads * d->top_k);
    if (tc > pair_cap) tc = pair_cap;
    if (tc > (1 << 25) - 1) tc = (1 << 25) - 1;
    if (d->workspace_limit > 0) {
        const uint64_t budget = d->workspace_limit > 16 * 256 ? d->workspace_limit - 16 * 256 : 0;
        if (total(plan, total_tokens, batch, tc) > budget) {
            int64_t lo = 1, hi = tc; /* the answer is lo when even one token does not fit */
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo + 1) / 2;
                if (total(plan, total_tokens, batch, mid) <= budget) lo = mid;
                else hi = mid - 1;
            }
            tc = lo;
            const int64_t n = (total_tokens + tc - 1) / tc;
            const int64_t even = (total_tokens + n - 1) / n;
            if (total(plan, total_tokens, batch, even) <= budget) tc = even;
        }
    }
    return tc > 0 ? tc : 1;
}

int64_t fsa_fsa_chunk_tokens(const fsa_plan *plan, int64_t total_tokens, int batch)
{
    return chunk_tokens(plan, total_tokens, batch, fsa_layout_total);
}

int64_t fsa_bwd_chunk_tokens(const fsa_plan *plan, int64_t total_tokens, int batch)
{
    return chunk_tokens(plan, total_tokens, batch, bwd_layout_total);
}

fsa_algorithm fsa_plan_choose(const fsa_plan *plan, int64_t total_tokens, const char **reason)
{
    const char *why = "forced by the descriptor";
    fsa_algorithm a = plan->desc.algorithm;
    if (a == FSA_ALGORITHM_AUTO) {
        if (!plan->nsa_available) {
            a = FSA_ALGORITHM_FSA;
            why = "only the FSA path fits this shape";
        } else if (!plan->fsa_available) {
            a = FSA_ALGORITHM_NSA;
            why = "only the NSA path fits this shape";
        } else {
            /* Crossovers measured on an H200 (bench/RESULTS.md): the NSA order
             * wins only for short inputs with large groups, where the FSA
             * pipeline's fixed cost (five launches) dominates. */
            const int64_t nsa_up_to = plan->group >= 16 ? 512 : plan->group >= 8 ? 256 : 0;
            a = total_tokens <= nsa_up_to ? FSA_ALGORITHM_NSA : FSA_ALGORITHM_FSA;
            why = a == FSA_ALGORITHM_NSA ? "measured crossover: NSA order for G >= 8 and short inputs"
                                         : "measured crossover: FSA order";
        }
    }
    if (reason) *reason = why;
    return a;
}

fsa_algorithm fsa_plan_choose_bwd(const fsa_plan *plan, int64_t total_tokens, const char **reason)
{
    (void)total_tokens;
    const char *why = "forced by the descriptor";
    fsa_algorithm a = plan->desc.algorithm;
    if (a == FSA_ALGORITHM_AUTO) {
        /* Measured on an H200 (bench/RESULTS.md, T 64..65536, G 1..64): the
         * FSA-order dq is never slower. The NSA-order dq reloads every
         * selected K/V block per token and runs after the dK/dV kernel; at
         * short inputs, where it could pay off, the per-pair dq rows are too
         * few to cost anything. */
        a = FSA_ALGORITHM_FSA;
        why = "measured: the FSA-order dq is at least as fast on every measured shape";
    }
    if (reason) *reason = why;
    return a;
}
