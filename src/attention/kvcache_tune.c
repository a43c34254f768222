/* The split count of a paged-cache plan as a variant of the one chooser:
 * candidates, the heuristic, the plan's tuning record and measuring the
 * candidates on scratch inputs (format of records: cache/README.md).
 *
 * Batch invariance fixes what may be tuned: a sequence's split may depend on
 * its own shape and on the plan, never on the rest of the batch. So the record
 * is one per plan shape (G, Hkv, D, BK, K, page size, dtype, max_batch rounded
 * up to a power of two, target, GPU, library version), and the measured
 * quantity is the plan's share count, timed on decode batches of one sequence
 * and of about four (sequence, KV head) pairs per SM: the winner has the
 * smallest product of the two times (the geometric mean: latency at small
 * batches and throughput at full ones weigh alike). */
#include "kvcache.h"

#include "tuning.h"

#include "base/status_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE "kvcache tune"

/* Scratch K/V bytes at most, and (sequence, KV head) pairs per SM of the large batch. */
#define SCRATCH_KV_BYTES ((size_t)256 << 20)
#define PAIRS_PER_SM 4

static int pow2_at_least(int n)
{
    int p = 1;
    while (p < n && p < (1 << 30)) p *= 2;
    return p;
}

/* Selected K/V bytes of one decode token (every KV head) up to which shares
 * are two blocks long: about 1.5 us of HBM, so one sequence alone is bound
 * by latency, not bandwidth. */
#define FINE_SPLIT_BYTES ((int64_t)6 << 20)

static int quarter_splits(int top_k) { return (top_k + 3) / 4 < 16 ? (top_k + 3) / 4 : 16; }

/* Partial rows per (sequence, KV head) of a decode token (group x shares)
 * up to which shares are two blocks long: 32 rows of Dv floats, a few percent
 * of the pair's selected K/V bytes written and read again by the merge. */
#define FINE_SPLIT_ROWS 32

/* A quarter of the slots per share: decode at small batches gets 4x the CTAs
 * for the K = 16 of NSA, and the partials stay small beside the K/V bytes at
 * large batches. Where one sequence's selection is small (FINE_SPLIT_BYTES:
 * few KV heads) and so are the partials (FINE_SPLIT_ROWS: small groups),
 * shares of two blocks instead (at most FSA_KVC_MAX_CLUSTER, a power of
 * two): each CTA then has all its loads in flight at once, which is what a
 * lone sequence waits for. */
static int heuristic_splits(const fsa_kvcache_desc *d)
{
    const int quarter = quarter_splits(d->top_k);
    const int64_t bytes = (int64_t)d->num_kv_heads * d->top_k * d->block_size * (d->head_dim + d->value_dim) * 2;
    int fine = 1;
    while (fine * 2 <= d->top_k / 2 && fine * 2 <= FSA_KVC_MAX_CLUSTER) fine *= 2;
    const int group = d->num_q_heads / d->num_kv_heads;
    return bytes <= FINE_SPLIT_BYTES && group * fine <= FINE_SPLIT_ROWS && fine > quarter ? fine : quarter;
}

static void add(fsa_kvc_tuning *t, int splits)
{
    const fsa_variant v = {FSA_ALGORITHM_AUTO, 0, 0, splits};
    t->c.v[t->c.n] = v;
    fsa_variant_name(t->names[t->c.n], sizeof t->names[0], &v);
    t->c.n++;
}

fsa_status fsa_kvc_record_key(fsa_kernel_key *out, const fsa_kvcache_plan *plan)
{
    const fsa_kvcache_desc *d = &plan->desc;
    const char *dtype = d->dtype == FSA_DTYPE_BF16 ? "bf16" : "f16";
    const int batch = pow2_at_least(d->max_batch);
    char shape[512], name[128];
    /* The copy path and launch switches the plan resolved at creation (FSA_KVC_TMA, _DEEP, _CLUSTER, _CTAS,
     * _EXPERIMENT, _STAMPS) and a layout other than the default (fsa_kvc_layout_fit, FSA_KVC_SMALL; not
     * written for the default, so its records keep their keys): a winner measured under one set is not
     * another set's. */
    char layout[32] = "";
    if (plan->layout != 0) snprintf(layout, sizeof layout, "layout %d\n", plan->layout);
    snprintf(shape, sizeof shape,
             "dtype %s\nhead_dim %d\nvalue_dim %d\ngroup %d\nkv_heads %d\nblock_size %d\ntop_k %d\npage_size %d\n"
             "batch %d\nswitches tma %d deep %d cluster %d ctas %d experiment %d stamps %d\n%s",
             dtype, d->head_dim, d->value_dim, plan->group, d->num_kv_heads, d->block_size, d->top_k, d->page_size, batch,
             plan->tma, plan->deep, plan->cluster, plan->ctas, plan->experiment, plan->stamps != 0, layout);
    snprintf(name, sizeof name, "%s_d%d_dv%d_g%d_h%d_bk%d_k%d_p%d_b%d", dtype, d->head_dim, d->value_dim, plan->group,
             d->num_kv_heads, d->block_size, d->top_k, d->page_size, batch);
    return fsa_tune_key_build(out, plan->ctx, FSA_OP_KVC, shape, name, &plan->tune.c);
}

void fsa_kvc_tuning_init(fsa_kvcache_plan *plan)
{
    fsa_kvc_tuning *t = &plan->tune;
    const int k = plan->desc.top_k;
    memset(&t->c, 0, sizeof t->c);
    t->level = (fsa_tune_level)plan->ctx->tune;
    t->heuristic = plan->desc.splits > 0 ? plan->desc.splits : heuristic_splits(&plan->desc);
    const fsa_variant h = {FSA_ALGORITHM_AUTO, 0, 0, t->heuristic};
    fsa_variant_name(t->heuristic_name, sizeof t->heuristic_name, &h);
    if (plan->desc.splits > 0) {
        add(t, plan->desc.splits);
    } else {
        /* Powers of two up to half the slots (a share of at least two blocks
         * of a full selection), at most 16. */
        for (int s = 1; s <= 16 && (s == 1 || s <= k / 2) && t->c.n < FSA_MAX_VARIANTS; s *= 2) add(t, s);
    }
    plan->max_splits = t->heuristic;
    for (int i = 0; i < t->c.n; i++)
        if (t->c.v[i].splits > plan->max_splits) plan->max_splits = t->c.v[i].splits;
    atomic_store(&t->slot, 0);
    if (t->c.n < 2 || t->level == FSA_TUNE_LEVEL_FORCE || plan->ctx->disk == NULL) return;
    fsa_kernel_key key;
    if (fsa_kvc_record_key(&key, plan) == FSA_STATUS_OK) {
        atomic_store(&t->slot, fsa_tune_read(plan->ctx, &key, FSA_OP_KVC, &t->c));
        fsa_key_free(&key);
    }
    fsa_error_clear(); /* a miss is not an error */
}

void fsa_kvc_choose(fsa_kvc_choice *out, const fsa_kvcache_plan *plan)
{
    const fsa_kvc_tuning *t = &plan->tune;
    const int slot = atomic_load(&((fsa_kvc_tuning *)t)->slot);
    memset(out, 0, sizeof *out);
    if (slot > 0 && slot <= t->c.n) {
        out->splits = t->c.v[slot - 1].splits;
        out->variant = t->names[slot - 1];
        out->source = FSA_CHOICE_MEASURED;
        out->reason = "measured: the tuning record of this plan";
        return;
    }
    out->splits = t->heuristic;
    out->variant = t->heuristic_name;
    if (plan->desc.splits > 0) {
        out->source = FSA_CHOICE_FORCED;
        out->reason = "forced by the descriptor";
    } else if (t->c.n < 2) {
        out->source = FSA_CHOICE_ONLY_ONE;
        out->reason = "only one split count fits this top-k";
    } else {
        out->source = FSA_CHOICE_HEURISTIC;
        out->reason = out->splits == quarter_splits(plan->desc.top_k)
                          ? "heuristic: a quarter of the top-k slots per share"
                          : "heuristic: shares of about two blocks (a small selection per token)";
    }
    out->may_measure = t->level != FSA_TUNE_LEVEL_OFF && t->c.n > 1 && slot == 0;
}

/* ------------------------------------------------------------ scratch inputs */

/* One allocation: offsets in bytes, each 256-byte aligned. */
typedef struct scratch {
    int batch, pages_per_seq, seq_keys;
    size_t q, o, k, v, meta, ws, total;
    size_t meta_bytes, ws_bytes;
} scratch;

static size_t place(size_t *at, size_t bytes)
{
    const size_t here = *at;
    *at = (*at + bytes + 255) & ~(size_t)255;
    return here;
}

/* Decode batches: each sequence holds K blocks of keys and one new token at
 * the last position, which selects all of them. */
static void layout(scratch *s, const fsa_kvcache_plan *plan)
{
    const fsa_kvcache_desc *d = &plan->desc;
    const size_t row = (size_t)d->head_dim * 2, vrow = (size_t)d->value_dim * 2; /* bytes of a K and a V row */
    s->seq_keys = d->top_k * d->block_size;
    s->pages_per_seq = (s->seq_keys + d->page_size - 1) / d->page_size;
    const size_t seq_bytes = (size_t)s->pages_per_seq * (size_t)d->page_size * (size_t)d->num_kv_heads * (row + vrow);
    int64_t b = ((int64_t)PAIRS_PER_SM * plan->ctx->sm_count + d->num_kv_heads - 1) / d->num_kv_heads;
    if (b > d->max_batch) b = d->max_batch;
    if (b > (int64_t)(SCRATCH_KV_BYTES / seq_bytes)) b = (int64_t)(SCRATCH_KV_BYTES / seq_bytes);
    s->batch = b < 1 ? 1 : (int)b;
    const size_t pages = (size_t)s->batch * (size_t)s->pages_per_seq;
    s->meta_bytes = ((size_t)s->batch * (size_t)s->pages_per_seq + (size_t)s->batch + 1 + (size_t)s->batch +
                     (size_t)s->batch * (size_t)d->num_kv_heads * (size_t)d->top_k) * 4;
    s->ws_bytes = fsa_kvc_workspace_bytes(plan);
    size_t at = 0;
    s->q = place(&at, (size_t)s->batch * (size_t)d->num_q_heads * row);
    s->o = place(&at, (size_t)s->batch * (size_t)d->num_q_heads * vrow);
    s->k = place(&at, pages * (size_t)d->page_size * (size_t)d->num_kv_heads * row);
    s->v = place(&at, pages * (size_t)d->page_size * (size_t)d->num_kv_heads * vrow);
    s->meta = place(&at, s->meta_bytes);
    s->ws = place(&at, s->ws_bytes);
    s->total = at;
}

/* Page table, cu_seqlens_q, seqused_k and top-k ([Tq, Hkv, K]), in that order. */
static int32_t *make_meta(const scratch *s, const fsa_kvcache_plan *plan)
{
    const int hkv = plan->desc.num_kv_heads, k = plan->desc.top_k;
    int32_t *m = malloc(s->meta_bytes), *at = m;
    if (m == NULL) return NULL;
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i < s->pages_per_seq; i++) *at++ = b * s->pages_per_seq + i;
    for (int b = 0; b <= s->batch; b++) *at++ = b;
    for (int b = 0; b < s->batch; b++) *at++ = s->seq_keys;
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < hkv; h++)
            for (int i = 0; i < k; i++) *at++ = k - 1 - i; /* the own block first */
    return m;
}

static fsa_kvcache_args args_of(const scratch *s, const fsa_kvcache_plan *plan, CUdeviceptr base, int batch)
{
    const fsa_kvcache_desc *d = &plan->desc;
    const int64_t hq_d = (int64_t)d->num_q_heads * d->head_dim, hkv_d = (int64_t)d->num_kv_heads * d->head_dim;
    const int64_t hq_dv = (int64_t)d->num_q_heads * d->value_dim, hkv_dv = (int64_t)d->num_kv_heads * d->value_dim;
    const uint64_t meta = base + s->meta, table_rows = (uint64_t)s->batch * (uint64_t)s->pages_per_seq;
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    a.num_query_tokens = batch;
    a.batch = batch;
    a.q = (fsa_tensor){base + s->q, hq_d, d->head_dim};
    a.o = (fsa_tensor){base + s->o, hq_dv, d->value_dim};
    a.k_cache = (fsa_tensor){base + s->k, hkv_d, d->head_dim};
    a.v_cache = (fsa_tensor){base + s->v, hkv_dv, d->value_dim};
    a.k_page_stride = (int64_t)d->page_size * hkv_d;
    a.v_page_stride = (int64_t)d->page_size * hkv_dv;
    a.num_pages = (int64_t)table_rows;
    a.block_table = meta;
    a.block_table_stride = s->pages_per_seq;
    a.max_pages_per_seq = s->pages_per_seq;
    a.cu_seqlens_q = meta + table_rows * 4;
    a.seqused_k = a.cu_seqlens_q + ((uint64_t)s->batch + 1) * 4;
    a.topk = (fsa_tensor){a.seqused_k + (uint64_t)s->batch * 4, (int64_t)d->num_kv_heads * d->top_k, d->top_k};
    a.workspace = s->ws_bytes ? base + s->ws : 0;
    a.workspace_bytes = s->ws_bytes;
    return a;
}

/* Run i: candidate i / batches on batch size sizes[i % batches]. */
typedef struct split_runs {
    const fsa_kvcache_plan *plan;
    const fsa_kvcache_args *args; /* per batch size */
    const fsa_kvc_maps *maps;     /* the scratch caches' maps (one layout for both sizes) */
    int batches;
} split_runs;

static fsa_status run_split(void *arg, int i, CUstream stream)
{
    const split_runs *r = arg;
    return fsa_kvc_launch(r->plan, &r->args[i % r->batches], r->maps, r->plan->tune.c.v[i / r->batches].splits,
                          stream);
}

/* Times every candidate on both batch sizes; score[i]: the geometric mean of
 * candidate i's times (ms). */
static fsa_status measure(int *winner, double *score, int *timed, const fsa_kvcache_plan *plan, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    const fsa_candidates *c = &plan->tune.c;
    CUdeviceptr base = 0;
    scratch s;
    layout(&s, plan);
    int32_t *meta = make_meta(&s, plan);
    FSA_CHECK_ALLOC(meta, STAGE);
    FSA_CHECK_CU(cu, cu->MemAlloc(&base, s.total), STAGE);
    /* Metadata, values and workspace on the caller's stream (never the
     * legacy one, which would wait for every blocking stream, a captured one
     * included); the copy has landed before `meta` is freed (the stream is
     * synchronized below): small finite values (0x3c3c: about 0.011 in bf16,
     * 1.06 in f16). */
    FSA_CHECK_CU(cu, cu->MemcpyHtoDAsync(base + s.meta, meta, s.meta_bytes, stream), STAGE);
    FSA_CHECK_CU(cu, cu->MemsetD8Async(base, 0x3c, s.meta, stream), STAGE);
    if (s.ws_bytes) FSA_CHECK_CU(cu, cu->MemsetD8Async(base + s.ws, 0, fsa_kvc_counter_bytes(plan), stream), STAGE);
    const fsa_kvcache_args args[2] = {args_of(&s, plan, base, 1), args_of(&s, plan, base, s.batch)};
    fsa_kvc_maps maps;
    FSA_CHECK(fsa_kvc_encode_maps(&maps, plan, &args[1]));
    const split_runs runs = {plan, args, &maps, s.batch > 1 ? 2 : 1};
    double ms[2 * FSA_MAX_VARIANTS];
    FSA_CHECK(fsa_tune_time(ms, timed, cu, c->n * runs.batches, run_split, (void *)&runs, stream));
    for (int i = 0; i < c->n; i++) {
        double log_sum = 0;
        for (int b = 0; b < runs.batches; b++) log_sum += log(fmax(ms[i * runs.batches + b], 1e-6));
        score[i] = exp(log_sum / runs.batches);
        if (score[i] < score[*winner]) *winner = i;
    }
cleanup:
    if (base) {
        cu->StreamSynchronize(stream); /* nothing may still read the scratch buffer */
        cu->MemFree(base);
    }
    free(meta);
    return st;
}

fsa_status fsa_kvc_tune(int *measured, const fsa_kvcache_plan *plan, CUstream stream)
{
    fsa_kvc_tuning *t = (fsa_kvc_tuning *)&plan->tune;
    const fsa_cu_api *cu = plan->ctx->cu;
    fsa_kvc_choice choice;
    double score[FSA_MAX_VARIANTS];
    int timed = 0, winner = 0;
    *measured = 0;
    fsa_kvc_choose(&choice, plan);
    const int memory = cu != NULL && cu->MemAlloc && cu->MemFree && cu->MemcpyHtoDAsync && cu->MemsetD8Async &&
                       cu->StreamSynchronize;
    if (!choice.may_measure || !memory ||
        !fsa_tune_should_measure(t->level, 0, t->c.n, fsa_tune_can_time(cu), fsa_stream_capturing(cu, stream)))
        return FSA_STATUS_OK;
    int expected = 0; /* one call measures; others take the heuristic meanwhile */
    if (!atomic_compare_exchange_strong(&t->slot, &expected, FSA_TUNE_SLOT_BUSY)) return FSA_STATUS_OK;
    const int mode = fsa_capture_relax(cu); /* scratch allocations and waits: another thread may be capturing */
    const fsa_status st = measure(&winner, score, &timed, plan, stream);
    fsa_capture_restore(cu, mode);
    if (st != FSA_STATUS_OK || !timed) {
        fsa_log_warn(plan->ctx->log, "paged-cache split count not measured (%s); the heuristic stays",
                     st != FSA_STATUS_OK ? fsa_last_error() : "no events");
        return st; /* the slot stays busy: the heuristic for this plan's life */
    }
    atomic_store(&t->slot, winner + 1);
    fsa_kernel_key key;
    if (fsa_kvc_record_key(&key, plan) == FSA_STATUS_OK) {
        fsa_tune_publish(plan->ctx, &key, FSA_OP_KVC, &t->c, winner, score);
        fsa_key_free(&key);
    }
    fsa_error_clear();
    *measured = 1;
    return FSA_STATUS_OK;
}
