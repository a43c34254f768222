/* Selected attention over a paged KV cache: plan (descriptor checks, kernel
 * loading, workspace size) and the call (argument checks, one kernel: split
 * sequences are merged by their last CTA to finish). Everything goes on the
 * caller's stream: no allocation, no host synchronization (except the one
 * call that measures the split count with tuning on: kvcache_tune.c, and
 * check mode). */
#include "kvcache.h"
#include "kvcache_check.h"

#include "base/status_internal.h"
#include "base/struct_size.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGE "kvcache"

static int is_pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

static fsa_status validate_desc(const fsa_kvcache_desc *d)
{
    fsa_status st = FSA_STATUS_OK;
    if (d->dtype != FSA_DTYPE_BF16 && d->dtype != FSA_DTYPE_F16)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "dtype %d is neither bf16 nor f16", (int)d->dtype);
    if (d->head_dim < 16 || d->head_dim > 256 || d->head_dim % 16)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "head_dim %d: a multiple of 16 from 16 to 256", d->head_dim);
    if (d->value_dim < 16 || d->value_dim > 256 || d->value_dim % 16)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "value_dim %d: 0 (= head_dim) or a multiple of 16 from 16 to 256",
                 d->value_dim);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1 || d->num_q_heads % d->num_kv_heads)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "%d query heads over %d KV heads", d->num_q_heads,
                 d->num_kv_heads);
    if (d->num_kv_heads > FSA_GRID_MAX_ROWS) /* the kernel's grid has a row per KV head */
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_kv_heads %d: at most %d", d->num_kv_heads,
                 FSA_GRID_MAX_ROWS);
    if (d->num_q_heads / d->num_kv_heads > FSA_KVC_MAX_GROUP)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "group %d: at most %d query heads per KV head",
                 d->num_q_heads / d->num_kv_heads, FSA_KVC_MAX_GROUP);
    if (!is_pow2_in(d->block_size, 16, 256))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "block_size %d: 16, 32, 64, 128 or 256", d->block_size);
    if (d->page_size != 1 && !is_pow2_in(d->page_size, 16, 256))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "page_size %d: 1, 16, 32, 64, 128 or 256", d->page_size);
    if (d->top_k < 1 || d->top_k > 64) FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE, "top_k %d: 1..64", d->top_k);
    if (d->max_batch < 1 || d->max_batch > FSA_KVC_MAX_BATCH || d->max_query_tokens < 1 ||
        d->max_query_tokens > INT32_MAX)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "max_batch %d: 1..%d; max_query_tokens %lld: 1..INT32_MAX",
                 d->max_batch, FSA_KVC_MAX_BATCH, (long long)d->max_query_tokens);
    if (!isfinite(d->scale) || d->scale < 0.0f)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "scale must be finite and >= 0 (0 = 1/sqrt(head_dim))");
    if (d->splits < 0 || d->splits > 64) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "splits %d: 0..64", d->splits);
cleanup:
    return st;
}

/* The kernel's mode bits (its TMA template value, kvc_params.cuh). */
static int kernel_mode(const fsa_kvcache_plan *plan, int deep)
{
    return (plan->tma ? FSA_KVC_KERNEL_TMA : 0) | (plan->stamps ? FSA_KVC_KERNEL_STAMPS : 0) |
           (deep ? FSA_KVC_KERNEL_DEEP : 0) | plan->experiment << FSA_KVC_KERNEL_EXPERIMENT_SHIFT;
}

/* Whether the plan also loads the deep-ring kernel, for launches whose CTAs
 * the device holds at once with one per SM: tensor-map copies, a share of more
 * stages than the two-stage ring holds (else nothing changes), and its shared
 * memory fits. FSA_KVC_DEEP=0 at plan creation turns it off (to compare). */
static int deep_wanted(const fsa_kvcache_plan *plan, int max_smem)
{
    if (fsa_env_int("FSA_KVC_DEEP", 0, 1, 1) == 0) return 0;
    const fsa_kvcache_desc *d = &plan->desc;
    const int mode = kernel_mode(plan, 1), stages_per_block = d->block_size / FSA_KVC_STAGE_KEYS;
    return plan->tma && stages_per_block > 0 && d->top_k * stages_per_block > FSA_KVC_STAGES &&
           fsa_kvc_smem_all(d->head_dim, d->value_dim, plan->group, d->top_k, mode, plan->layout) <= max_smem;
}

static fsa_status load_kernels(fsa_kvcache_plan *plan)
{
    const fsa_kvcache_desc *d = &plan->desc;
    fsa_kernel_config c = {.dtype = d->dtype, .head_dim = d->head_dim, .value_dim = d->value_dim,
                           .group = plan->group, .block_size = d->block_size, .top_k = d->top_k,
                           .page_size = d->page_size, .kvc_tma = kernel_mode(plan, 0), .kvc_layout = plan->layout};
    fsa_status st = fsa_kernel_load(&plan->fwd, FSA_K_KVC_FWD, plan->ctx, &c);
    if (st != FSA_STATUS_OK || !plan->deep) return st;
    c.kvc_tma = kernel_mode(plan, 1);
    return fsa_kernel_load(&plan->fwd_deep, FSA_K_KVC_FWD, plan->ctx, &c);
}

/* Whether a split sequence whose shares each have a CTA may merge them
 * through the shared memory of a cluster of those CTAs (the same bits as the
 * workspace merge: kvc_merge.cuh). FSA_KVC_CLUSTER=0 turns it off (to
 * compare the two merges). */
static int cluster_merge_allowed(const fsa_context *ctx, const fsa_kvcache_desc *d, int group, int tma, int layout)
{
    if (fsa_env_int("FSA_KVC_CLUSTER", 0, 1, 1) == 0) return 0;
    return fsa_kernel_can_cluster(ctx) && fsa_kvc_cluster_fits(d->head_dim, d->value_dim, group, tma, layout);
}

/* Whether the kernel copies each stage as tensor-map boxes of one page
 * (sm_90a, where a stage is whole page boxes, with a driver that encodes
 * tensor maps) instead of cp.async of each key row: one instruction per 64
 * columns of 64 keys instead of 64 x 8 of them. The same bits either way.
 * FSA_KVC_TMA=0 turns it off (to compare the two). */
static int tma_wanted(const fsa_context *ctx, const fsa_kvcache_desc *d)
{
    if (fsa_env_int("FSA_KVC_TMA", 0, 1, 1) == 0) return 0;
    if (ctx->arch.major != 9 || ctx->arch.suffix != 'a') return 0;
    if (ctx->cu != NULL && ctx->cu->TensorMapEncodeTiled == NULL) return 0;
    return fsa_kvc_tma_fits(d->head_dim, d->value_dim, d->block_size, d->page_size);
}

/* A number of FSA_KVC_STAMPS: 0x hexadecimal, else decimal (a leading 0 is not octal). */
static unsigned long long stamp_number(const char *s, char **end)
{
    const int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    errno = 0;
    const unsigned long long v = strtoull(s, end, hex ? 16 : 10);
    if (errno == ERANGE) *end = (char *)s; /* past 64 bits: not a number (the caller refuses it) */
    return v;
}

/* Workspace: a counter per (sequence, KV head) (CTAs done; zero between
 * calls), then the partials of every split share: [max_batch, Hkv,
 * max_splits, rows] rows of Dv floats, then their lse; room for the largest
 * share count a variant takes. */
typedef unsigned __int128 u128; /* exact sizes: plan creation refuses a workspace past size_t (workspace_fits) */

static u128 part_rows(const fsa_kvcache_plan *plan)
{
    return plan->max_splits <= 1 ? 0
                                 : (u128)(unsigned)plan->desc.max_batch * (unsigned)plan->desc.num_kv_heads *
                                       (unsigned)plan->max_splits * (unsigned)fsa_kvc_rows(plan->group);
}

static u128 round256(u128 n) { return (n + 255) & ~(u128)255; }

static u128 counter_bytes(const fsa_kvcache_plan *plan)
{
    const u128 pairs = (u128)(unsigned)plan->desc.max_batch * (unsigned)plan->desc.num_kv_heads;
    return part_rows(plan) == 0 ? 0 : round256(pairs * 4);
}

static u128 lse_part_offset(const fsa_kvcache_plan *plan)
{
    return counter_bytes(plan) + round256(part_rows(plan) * (unsigned)plan->desc.value_dim * 4);
}

static u128 workspace_bytes(const fsa_kvcache_plan *plan)
{
    return part_rows(plan) == 0 ? 0 : lse_part_offset(plan) + part_rows(plan) * 4;
}

static int workspace_fits(const fsa_kvcache_plan *plan) { return workspace_bytes(plan) <= SIZE_MAX; }

size_t fsa_kvc_counter_bytes(const fsa_kvcache_plan *plan) { return (size_t)counter_bytes(plan); }

size_t fsa_kvc_workspace_bytes(const fsa_kvcache_plan *plan) { return (size_t)workspace_bytes(plan); }

fsa_status fsa_kvcache_plan_create(fsa_kvcache_plan **out, fsa_context *ctx, const fsa_kvcache_desc *caller_desc)
{
    fsa_kvcache_plan *plan = NULL;
    fsa_kvcache_desc d; /* the caller's version, newer fields zero */
    if (out != NULL) *out = NULL;
    fsa_status st = fsa_plan_desc_read(&d, sizeof d, out, ctx, caller_desc, FSA_KVCACHE_DESC_FIRST_SIZE, STAGE,
                                       "fsa_kvcache_desc");
    if (st != FSA_STATUS_OK) goto cleanup;
    FSA_APPENDED_FIELD(fsa_kvcache_desc, value_dim, FSA_KVCACHE_DESC_FIRST_SIZE);
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(&d, fsa_kvcache_desc, value_dim, STAGE));
    FSA_APPENDED_FIELD(fsa_kvcache_desc, reserved, FSA_KVCACHE_DESC_FIRST_SIZE);
    FSA_CHECK(FSA_STRUCT_FIELD_WHOLE(&d, fsa_kvcache_desc, reserved, STAGE));
    if (d.value_dim == 0) d.value_dim = d.head_dim;
    FSA_CHECK(validate_desc(&d));
    const fsa_kvcache_desc *desc = &d;
    const int group = d.num_q_heads / d.num_kv_heads;
    FSA_CHECK_ALLOC(plan = calloc(1, sizeof *plan), STAGE);
    plan->ctx = ctx;
    plan->desc = d;
    plan->group = group;
    plan->tile_tokens = fsa_kvc_tile_tokens(group);
    plan->scale = fsa_softmax_scale(d.scale, d.head_dim);
    /* FSA_KVC_SMALL (tests): the smaller layout where the default fits too. It is the cp.async
     * kernel's, so such a plan copies by cp.async (as with FSA_KVC_TMA=0). */
    const int forced_layout = fsa_kernel_kvc_forced();
    plan->tma = forced_layout ? 0 : tma_wanted(ctx, desc);
    plan->ctas = fsa_env_int("FSA_KVC_CTAS", 0, INT_MAX, 0);
    /* Debug: the kernel variant that writes per-CTA phase stamps (kvc_stamps.cuh) into the
     * zeroed device buffer FSA_KVC_STAMPS names as ADDRESS:BYTES (tensor-map kernels only).
     * Empty counts as unset, as for the other switches. */
    const char *stamps = getenv("FSA_KVC_STAMPS");
    if (stamps != NULL && *stamps != '\0' && plan->tma) {
        /* Read whole, like the other switches: two unsigned numbers (decimal, 0x hex) and the colon. */
        char *end = NULL, *bytes_end = NULL;
        unsigned long long bytes = 0;
        plan->stamps = isdigit((unsigned char)stamps[0]) ? stamp_number(stamps, &end) : 0;
        if (plan->stamps != 0 && *end == ':' && isdigit((unsigned char)end[1])) {
            bytes = stamp_number(end + 1, &bytes_end);
            if (*bytes_end != '\0') bytes = 0;
        }
        const unsigned long long need = (unsigned long long)FSA_KVC_STAMP_CTAS * FSA_KVC_STAMP_WORDS * 8;
        if (plan->stamps == 0 || bytes < need)
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                     "FSA_KVC_STAMPS=%s: want ADDRESS:BYTES of a zeroed device buffer of at least %llu bytes",
                     stamps, need);
    }
    /* Measurement: FSA_KVC_EXPERIMENT=N loads the tensor-map kernel with experiment bits N (kvc_fwd.cu). */
    plan->experiment = plan->tma ? fsa_env_int("FSA_KVC_EXPERIMENT", 0, INT_MAX, 0) & 3 : 0;
    const int max_smem = ctx->max_smem_per_block; /* the device's, else the target's */
    /* The default layout where it fits, else one stage buffer (0 where neither does: refused below
     * with the default's bytes). */
    plan->layout = fsa_kvc_layout_fit(desc->head_dim, desc->value_dim, group, desc->top_k, kernel_mode(plan, 0),
                                      max_smem, forced_layout);
    /* Dynamic and static shared memory of the attention kernel, together. */
    const int smem_all =
        fsa_kvc_smem_all(desc->head_dim, desc->value_dim, group, desc->top_k, kernel_mode(plan, 0), plan->layout);
    if (smem_all > max_smem)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "head_dim %d, value_dim %d with group %d and top_k %d needs %d bytes of shared memory; %s allows %d",
                 desc->head_dim, desc->value_dim, group, desc->top_k, smem_all, ctx->target, max_smem);
    plan->deep = deep_wanted(plan, max_smem);
    plan->cluster = cluster_merge_allowed(ctx, desc, group, plan->tma, plan->layout);
    /* After every switch its record's key names (fsa_kvc_record_key): the split candidates and their
     * record; max_splits sizes the workspace. */
    fsa_kvc_tuning_init(plan);
    if (!workspace_fits(plan))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "max_batch %d x %d KV heads x %d shares of %d rows: the workspace of partial rows overflows size_t",
                 desc->max_batch, desc->num_kv_heads, plan->max_splits, fsa_kvc_rows(group));
    FSA_CHECK(load_kernels(plan));
    FSA_CHECK(fsa_kernel_persistent_grid(&plan->resident, ctx, &plan->fwd));
    if (plan->deep) FSA_CHECK(fsa_kernel_persistent_grid(&plan->resident_deep, ctx, &plan->fwd_deep));
    FSA_CHECK(fsa_metadata_checker_create(&plan->checker, ctx, FSA_CHECK_KVCACHE));
    *out = plan;
    plan = NULL;
cleanup:
    fsa_kvcache_plan_destroy(plan);
    return st;
}

void fsa_kvcache_plan_destroy(fsa_kvcache_plan *plan)
{
    if (plan == NULL) return;
    fsa_metadata_checker_destroy(plan->checker, plan->ctx);
    free(plan);
}

fsa_status fsa_kvcache_plan_workspace_size(size_t *bytes_out, const fsa_kvcache_plan *plan)
{
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "bytes_out and plan must not be NULL");
    *bytes_out = fsa_kvc_workspace_bytes(plan);
    return FSA_STATUS_OK;
}

fsa_status fsa_kvcache_plan_workspace_counter_size(size_t *bytes_out, const fsa_kvcache_plan *plan)
{
    if (bytes_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "bytes_out and plan must not be NULL");
    *bytes_out = fsa_kvc_counter_bytes(plan);
    return FSA_STATUS_OK;
}

fsa_status fsa_kvcache_plan_info(int *tile_tokens_out, int *splits_out, const fsa_kvcache_plan *plan)
{
    if (tile_tokens_out == NULL || splits_out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "outputs and plan must not be NULL");
    fsa_kvc_choice c;
    fsa_kvc_choose(&c, plan);
    *tile_tokens_out = plan->tile_tokens;
    *splits_out = c.splits;
    return FSA_STATUS_OK;
}

fsa_status fsa_kvcache_plan_choice_get(fsa_plan_choice *out, const fsa_kvcache_plan *plan)
{
    if (out == NULL || plan == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "out and plan must not be NULL");
    fsa_kvc_choice c;
    fsa_kvc_choose(&c, plan);
    fsa_plan_choice r = FSA_PLAN_CHOICE_INIT;
    r.algorithm = FSA_ALGORITHM_AUTO; /* one loop order */
    r.source = c.source;
    r.reason = c.reason;
    r.variant = c.variant;
    r.bucket_tokens = 0;
    r.candidates = plan->tune.c.n;
    r.will_measure = c.may_measure && plan->ctx->cu != NULL; /* calls measure on a device only */
    r.splits = c.splits;
    return fsa_plan_choice_write(out, &r, STAGE);
}

fsa_status fsa_kvcache_plan_tune(int *measured_out, const fsa_kvcache_plan *plan, void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int measured = 0;
    if (measured_out) *measured_out = 0;
    if (plan == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "plan must not be NULL");
    if (plan->tune.level == FSA_TUNE_LEVEL_OFF)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                             "tuning is off for this plan's context (FSA_TUNE, options.tune)");
    FSA_CHECK(fsa_call_enter(plan->ctx, STAGE));
    st = fsa_kvc_tune(&measured, plan, (CUstream)stream);
    fsa_context_leave(plan->ctx);
    if (measured_out) *measured_out = measured;
cleanup:
    return st;
}

/* A paged cache: a tensor view over the rows of a page, plus the page
 * stride. Pages that are one memory (a stride of 0) or run backwards are
 * refused: no target's copies can address them (a tensor map needs a
 * positive stride per page). One page's stride is never used, whatever it
 * is, as a size-1 dimension's stride anywhere else. */
static fsa_status check_cache(const char *name, const fsa_tensor *t, int64_t page_stride, int64_t num_pages,
                              const fsa_kvcache_plan *plan)
{
    const int64_t page = plan->desc.page_size, heads = plan->desc.num_kv_heads;
    fsa_status st = fsa_check_tensor(STAGE, name, t, page, heads);
    if (st != FSA_STATUS_OK) return st;
    if (page_stride <= 0 && num_pages > 1)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE, "%s page stride %lld over %lld pages: positive", name,
                             (long long)page_stride, (long long)num_pages);
    if (page_stride % 8 != 0 && num_pages > 1) /* one page's stride is never used */
        return fsa_error_set(FSA_STATUS_MISALIGNED, STAGE, "%s page stride %lld: a multiple of 8 elements", name,
                             (long long)page_stride);
    unsigned __int128 last = fsa_view_last_row(t, page, heads); /* then the last page's */
    if (num_pages > 1) last += (unsigned __int128)(uint64_t)page_stride * (uint64_t)(num_pages - 1);
    if (!fsa_within_reach(t->ptr, last, 2))
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                             "%s: %lld pages of stride %lld reach past 2^63 bytes of address", name,
                             (long long)num_pages, (long long)page_stride);
    return FSA_STATUS_OK;
}

static fsa_status validate_args(const fsa_kvcache_plan *plan, const fsa_kvcache_args *a)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_kvcache_desc *d = &plan->desc;
    if (a->num_query_tokens < 0 || a->num_query_tokens > d->max_query_tokens)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "num_query_tokens %lld: the plan allows 0..%lld",
                 (long long)a->num_query_tokens, (long long)d->max_query_tokens);
    if (a->batch < 0 || a->batch > d->max_batch)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "batch %d: the plan allows 0..%d", a->batch, d->max_batch);
    if (a->batch == 0 && a->num_query_tokens > 0) /* tokens of no sequence: o would stay unwritten */
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "batch 0 with %lld query tokens",
                 (long long)a->num_query_tokens);
    if (a->num_query_tokens == 0) goto cleanup;
    const int64_t hq = d->num_q_heads;
    FSA_CHECK(fsa_check_tensor(STAGE, "q", &a->q, a->num_query_tokens, hq));
    FSA_CHECK(fsa_check_output(STAGE, "o", &a->o, a->num_query_tokens, hq, d->value_dim));
    FSA_CHECK(check_cache("k_cache", &a->k_cache, a->k_page_stride, a->num_pages, plan));
    FSA_CHECK(check_cache("v_cache", &a->v_cache, a->v_page_stride, a->num_pages, plan));
    const fsa_array_check arrays[] = {{"cu_seqlens_q", a->cu_seqlens_q, 1}, {"block_table", a->block_table, 1},
                                      {"seqused_k", a->seqused_k, 1},       {"topk", a->topk.ptr, 1},
                                      {"topk_length", a->topk_length, 0},   {"lse", a->lse, 0}};
    FSA_CHECK(fsa_check_arrays(STAGE, arrays, 6));
    FSA_CHECK(fsa_check_float_rows(STAGE, "lse", a->lse, a->num_query_tokens, hq));
    if (a->num_pages < 1 || a->max_pages_per_seq < 1 || a->block_table_stride < 0 ||
        (a->batch > 1 && a->block_table_stride < a->max_pages_per_seq))
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                 "num_pages %lld, max_pages_per_seq %d, block_table_stride %lld: a table row holds max_pages_per_seq "
                 "entries of at least one page",
                 (long long)a->num_pages, a->max_pages_per_seq, (long long)a->block_table_stride);
    /* The table is an int32 view [batch, max_pages_per_seq] (rows by its stride) that the kernels index with
     * signed 64-bit offsets: its entries, like a view's rows, must lie below 2^63 bytes of address. */
    const fsa_tensor table = {a->block_table, a->block_table_stride, 1};
    FSA_CHECK(fsa_check_index_view(STAGE, "block_table", &table, a->batch, a->max_pages_per_seq));
    /* The tile grid's x size, before anything is enqueued (check mode, tuning). */
    const long long tiles = fsa_kvc_tile_grid(a->num_query_tokens, a->batch, plan->tile_tokens);
    if (tiles > INT32_MAX)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                 "%lld query tokens of %d sequences make %lld tiles of %d tokens: more than 2^31 - 1 CTAs",
                 (long long)a->num_query_tokens, a->batch, tiles, plan->tile_tokens);
    FSA_CHECK(fsa_check_index_view(STAGE, "topk", &a->topk, a->num_query_tokens, d->num_kv_heads));
    FSA_CHECK(fsa_check_workspace(STAGE, fsa_kvc_workspace_bytes(plan) ? a->workspace : 256, a->workspace_bytes,
                                  fsa_kvc_workspace_bytes(plan)));
cleanup:
    return st;
}

static fsa_kvc_cache_view cache_view_of(const fsa_tensor *t, int64_t page_stride)
{
    const fsa_kvc_cache_view v = {fsa_view_of(t), page_stride};
    return v;
}

static void params_of(fsa_kvc_params *p, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, int splits)
{
    memset(p, 0, sizeof *p);
    p->q = fsa_view_of(&a->q);
    p->o = fsa_view_of(&a->o);
    p->lse = (long long)a->lse;
    p->k = cache_view_of(&a->k_cache, a->k_page_stride);
    p->v = cache_view_of(&a->v_cache, a->v_page_stride);
    p->num_pages = a->num_pages;
    p->block_table = (long long)a->block_table;
    p->bt_stride = a->block_table_stride;
    p->max_pages = a->max_pages_per_seq;
    p->cu_q = (long long)a->cu_seqlens_q;
    p->seqused = (long long)a->seqused_k;
    p->topk = fsa_view_of(&a->topk);
    p->topk_len = (long long)a->topk_length;
    p->tq = a->num_query_tokens;
    p->batch = a->batch;
    p->num_kv_heads = plan->desc.num_kv_heads;
    p->scale_log2 = (double)plan->scale * FSA_LOG2E;
    p->splits = splits;
    p->counters = (long long)a->workspace;
    p->o_part = (long long)(a->workspace + fsa_kvc_counter_bytes(plan));
    p->lse_part = (long long)(a->workspace + (size_t)lse_part_offset(plan));
    p->stamps = (long long)plan->stamps;
}

/* CTAs per (split sequence, KV head): a divisor C of the share count S.
 * Each CTA computes its S / C shares in one key stream exactly as a CTA of
 * its own would, so C depends on the batch size without touching the bits.
 * A CTA costs about a fixed part (prologue, epilogue: two blocks' stages)
 * plus its shares' blocks, and pairs x C CTAs run in ceil(pairs x C /
 * resident) waves: C minimizes waves x (blocks per CTA + 2), the larger C on
 * ties. Small batches get a CTA per share (one wave), large ones one
 * prologue for several shares. FSA_KVC_CTAS at plan creation (a divisor of
 * the share count) overrides the rule, to measure another count. */
int fsa_kvc_ctas_per_pair(const fsa_kvcache_plan *plan, int batch, int splits)
{
    /* The grid has a row per (KV head, CTA of its pair): at most 65535 of them (one CTA per
     * pair always fits: a plan has at most 65535 KV heads). */
    const int64_t hkv = plan->desc.num_kv_heads;
    if (plan->ctas > 0 && splits % plan->ctas == 0 && hkv * plan->ctas <= FSA_GRID_MAX_ROWS) return plan->ctas;
    const int64_t pairs = (int64_t)batch * hkv, resident = plan->resident > 0 ? plan->resident : 1;
    const int64_t share_blocks = (plan->desc.top_k + splits - 1) / splits;
    int best = 1;
    int64_t best_cost = -1;
    for (int c = splits; c >= 1; c--) {
        if (splits % c || hkv * c > FSA_GRID_MAX_ROWS) continue;
        const int64_t waves = (pairs * c + resident - 1) / resident, cost = waves * (share_blocks * (splits / c) + 2);
        if (best_cost < 0 || cost < best_cost) best = c, best_cost = cost;
    }
    return best;
}

/* A cache's tensor map for the kernel's page-box copies (fsa_kvc_params):
 * dims (d, the token and head dims by increasing stride, pages), box 64
 * columns x 64 tokens x one head x one page, 128-byte swizzle. A single KV
 * head's stride is free (any value serves a dimension of one); page numbers
 * past INT32_MAX never pass the kernel's page check, so the page dim stops
 * there. Host only: no device work, no sync. */
static fsa_status encode_cache_map(fsa_kvc_tensor_map *map, long long *token_dim, const fsa_kvcache_plan *plan,
                                   const fsa_tensor *t, int64_t page_stride, int64_t num_pages, int d)
{
    const fsa_cu_api *cu = plan->ctx->cu;
    const int64_t heads = plan->desc.num_kv_heads, page = plan->desc.page_size;
    /* A tensor map's strides are below 2^40 bytes: a longer one is refused here, before the products
     * below (a token stride times the page size) could pass int64. */
    const int64_t max_elems = ((int64_t)1 << 40) / 2;
    if (t->token_stride >= max_elems || (heads > 1 && t->head_stride >= max_elems) ||
        (num_pages > 1 && page_stride >= max_elems))
        return fsa_error_set(FSA_STATUS_DRIVER_ERROR, STAGE,
                             "cache strides of 2^40 bytes or more cannot be described as a tensor map");
    const int64_t ts = t->token_stride * 2, hs = heads == 1 ? ts * page : t->head_stride * 2;
    const int tokens_first = ts <= hs;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)(tokens_first ? page : heads),
                                (cuuint64_t)(tokens_first ? heads : page),
                                (cuuint64_t)(num_pages < INT32_MAX ? num_pages : INT32_MAX)};
    const cuuint64_t strides[3] = {(cuuint64_t)(tokens_first ? ts : hs), (cuuint64_t)(tokens_first ? hs : ts),
                                   (cuuint64_t)(page_stride > 0 && num_pages > 1 ? page_stride * 2 : ts * page)};
    const cuuint32_t box[4] = {64, tokens_first ? FSA_KVC_STAGE_KEYS : 1, tokens_first ? 1 : FSA_KVC_STAGE_KEYS, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    CUtensorMap m;
    const CUresult r = cu->TensorMapEncodeTiled(
        &m, plan->desc.dtype == FSA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
        (void *)(uintptr_t)t->ptr, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return fsa_cu_error(cu, r, STAGE, "cuTensorMapEncodeTiled");
    memcpy(map->words, &m, sizeof map->words);
    *token_dim = tokens_first ? 1 : 2;
    return FSA_STATUS_OK;
}

fsa_status fsa_kvc_encode_maps(fsa_kvc_maps *maps, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a)
{
    memset(maps, 0, sizeof *maps);
    if (!plan->tma) return FSA_STATUS_OK;
    const fsa_status st = encode_cache_map(&maps->k, &maps->k_token_dim, plan, &a->k_cache, a->k_page_stride,
                                           a->num_pages, plan->desc.head_dim);
    if (st != FSA_STATUS_OK) return st;
    return encode_cache_map(&maps->v, &maps->v_token_dim, plan, &a->v_cache, a->v_page_stride, a->num_pages,
                            plan->desc.value_dim);
}

/* The attention kernel over every tile of the batch (the last CTA of a split
 * sequence merges it). */
fsa_status fsa_kvc_launch(const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, const fsa_kvc_maps *maps,
                          int splits, CUstream stream)
{
    fsa_kvc_params p;
    params_of(&p, plan, a, splits);
    p.k_map = maps->k, p.v_map = maps->v;
    p.k_token_dim = maps->k_token_dim, p.v_token_dim = maps->v_token_dim;
    const int ctas = fsa_kvc_ctas_per_pair(plan, a->batch, splits);
    p.ctas = ctas;
    const uint64_t tiles = (uint64_t)fsa_kvc_tile_grid(a->num_query_tokens, a->batch, plan->tile_tokens);
    const unsigned hkv = (unsigned)plan->desc.num_kv_heads;
    /* Small launches whose CTAs (one share each) fit at one per SM on half the SMs take the
     * deep ring: every stage of a share in flight at once. The same bits either way. (Half:
     * clusters of one CTA per SM need whole groups of SMs of one GPC; 32 clusters of 4 on an
     * H200's 132 SMs ran in two waves. Without clusters, 128 CTAs on it measured slower too.) */
    const int deep = plan->deep && ctas == splits && tiles * hkv * (uint64_t)ctas <= (uint64_t)plan->resident_deep / 2;
    const fsa_kernel *k = deep ? &plan->fwd_deep : &plan->fwd;
    /* A CTA per share, all in one wave: the pair's CTAs may be a cluster that merges in shared
     * memory (across waves, a cluster's CTAs would wait for each other's slots). */
    p.cluster = plan->cluster && splits > 1 && ctas == splits && splits <= FSA_KVC_MAX_CLUSTER &&
                (int64_t)a->batch * plan->desc.num_kv_heads * ctas <= (deep ? plan->resident_deep : plan->resident);
    if (p.cluster) return fsa_kernel_launch_clusters(k, plan->ctx, tiles, hkv * (unsigned)ctas, (unsigned)ctas, stream, &p);
    return fsa_kernel_launch(k, plan->ctx, tiles, hkv * (unsigned)ctas, stream, &p);
}

fsa_status fsa_kvcache_attention(const fsa_kvcache_plan *plan, const fsa_kvcache_args *args, void *stream)
{
    fsa_kvcache_args a;
    fsa_status st = fsa_call_read(&a, sizeof a, plan, args, FSA_KVCACHE_ARGS_FIRST_SIZE, STAGE, "fsa_kvcache_args");
    if (st == FSA_STATUS_OK) st = validate_args(plan, &a);
    if (st != FSA_STATUS_OK || a.num_query_tokens == 0 || a.batch == 0) return st;
    st = fsa_call_enter(plan->ctx, STAGE);
    if (st != FSA_STATUS_OK) return st;
    fsa_kvc_maps maps;
    st = fsa_kvc_encode_maps(&maps, plan, &a);
    if (st == FSA_STATUS_OK)
        st = fsa_kvcache_check(plan->checker, plan->ctx, &plan->desc, &a, (CUstream)stream); /* check mode only */
    fsa_kvc_choice c;
    fsa_kvc_choose(&c, plan);
    if (st == FSA_STATUS_OK && c.may_measure) {
        int measured = 0; /* a failure to measure leaves the heuristic; the call still runs */
        if (fsa_kvc_tune(&measured, plan, (CUstream)stream) != FSA_STATUS_OK) fsa_error_clear();
        fsa_kvc_choose(&c, plan);
    }
    if (st == FSA_STATUS_OK) st = fsa_kvc_launch(plan, &a, &maps, c.splits, (CUstream)stream);
    fsa_context_leave(plan->ctx);
    return st;
}
