/* Tuning: record keys and texts, reading records at plan creation, and
 * measuring the candidates of a call (format: cache/README.md). */
#include "tuning.h"

#include "base/status_internal.h"
#include "base/util.h"
#include "jit/templates.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE "tune"
#define RECORD_MAGIC "fsa-tuning-record 1\n"

static const char *op_name(fsa_op_kind op) { return op == FSA_OP_FWD ? "fwd" : op == FSA_OP_BWD ? "bwd" : "kvc"; }

fsa_status fsa_tune_key_build(fsa_kernel_key *out, const fsa_context *ctx, fsa_op_kind op, const char *shape,
                              const char *name, const fsa_candidates *c)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_strbuf text = {0}, nm = {0};
    memset(out, 0, sizeof *out);
    fsa_strbuf_appendf(&text, "fsa-tuning-key 1\nlibrary %s\ntemplates %s\nop %s\n%starget %s\ngpu %s\nsms %d\ncandidates",
                       FSA_VERSION_STRING, fsa_templates_digest(), op_name(op), shape, ctx->target,
                       ctx->gpu_name[0] ? ctx->gpu_name : "none", ctx->sm_count);
    for (int i = 0; i < c->n; i++) {
        char v[32];
        fsa_variant_name(v, sizeof v, &c->v[i]);
        fsa_strbuf_appendf(&text, " %s", v);
    }
    fsa_strbuf_append(&text, "\n");
    fsa_strbuf_appendf(&nm, "tune_%s_%s", op_name(op), name);
    out->text = fsa_strbuf_take(&text);
    out->name = fsa_strbuf_take(&nm);
    if (out->text == NULL || out->name == NULL) {
        fsa_key_free(out);
        FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, STAGE, "tuning record key");
    }
    fsa_digest128(out->digest, out->text, strlen(out->text));
    fsa_hex(out->hex, out->digest, 16);
cleanup:
    return st;
}

fsa_status fsa_tune_record_key(fsa_kernel_key *out, const fsa_plan *plan, fsa_op_kind op, int bucket)
{
    const fsa_selected_attention_desc *d = &plan->desc;
    const char *dtype = d->dtype == FSA_DTYPE_BF16 ? "bf16" : "f16";
    const long long tokens = (long long)fsa_tune_bucket_tokens(bucket);
    char shape[512], name[128];
    fsa_candidates c;
    fsa_candidates_of(&c, plan, op);
    /* Both orders' costs grow with tokens x KV heads, but not alike (the FSA order's fixed cost): a
     * winner holds for its KV head count only. The workspace cap is left out: it only chunks long calls,
     * where the FSA order wins either way, and a layer's own cap (the Python NSA layer's 2 GiB) would
     * otherwise never meet the records fsa-precompile --tune writes. The switches are the kernel
     * variants and layout switches of the operation that the plan resolved at creation (forward:
     * FSA_WGMMA, FSA_FWD_WG, FSA_INDEX_ONCE; backward: FSA_WGMMA_SEL_BWD, FSA_INDEX_ONCE,
     * FSA_BWD_*_ROUNDS): a winner measured under one set is not another set's. Only the operation's
     * own, so that plans with and without backward = 1 share their forward records. */
    char switches[128];
    /* A one-stage layout (fsa_sel_layout_fit, FSA_SEL_LAYOUT_ONE_STAGE) of the operation's kernels: its
     * bits, only where set, so that default plans keep their keys. */
    const int op_bits = op == FSA_OP_FWD ? FSA_SEL_LAYOUT_FWD_ONE_STAGE | FSA_SEL_LAYOUT_NSA_ONE_STAGE
                                         : FSA_SEL_LAYOUT_BWD_ONE_STAGE | FSA_SEL_LAYOUT_DQ_ONE_STAGE;
    const int layout = plan->config.sel_layout & op_bits;
    char layout_part[24] = "";
    if (layout != 0) snprintf(layout_part, sizeof layout_part, " layout %d", layout);
    if (op == FSA_OP_FWD)
        snprintf(switches, sizeof switches, "fwd_wg %d.%d index_per_chunk %d%s", plan->fwd_wg,
                 plan->config.fwd_wg_variant, plan->index_per_chunk, layout_part);
    else
        snprintf(switches, sizeof switches, "bwd_wg %d index_per_chunk %d bwd_rounds %d.%d%s",
                 plan->config.sel_bwd_wg, plan->index_per_chunk, plan->bwd_item_rounds, plan->bwd_list_rounds,
                 layout_part);
    snprintf(shape, sizeof shape,
             "tokens %lld\ndtype %s\nhead_dim %d\nvalue_dim %d\ngroup %d\nkv_heads %d\nblock_size %d\ntop_k %d\n"
             "switches %s\n",
             tokens, dtype, d->head_dim, (int)d->value_dim, plan->group, d->num_kv_heads, d->block_size, d->top_k,
             switches);
    snprintf(name, sizeof name, "%s_d%d_dv%d_g%d_h%d_bk%d_k%d_t%lld", dtype, d->head_dim, (int)d->value_dim,
             plan->group, d->num_kv_heads, d->block_size, d->top_k, tokens);
    return fsa_tune_key_build(out, plan->ctx, op, shape, name, &c);
}

char *fsa_tune_record_text(fsa_op_kind op, const fsa_candidates *c, int winner, const double *ms)
{
    fsa_strbuf b = {0};
    char v[32];
    fsa_variant_name(v, sizeof v, &c->v[winner]);
    fsa_strbuf_appendf(&b, RECORD_MAGIC "op %s\nwinner %s\n", op_name(op), v);
    for (int i = 0; ms != NULL && i < c->n; i++) {
        fsa_variant_name(v, sizeof v, &c->v[i]);
        fsa_strbuf_appendf(&b, "time_ms %s %.6f\n", v, ms[i]);
    }
    fsa_strbuf_append(&b, "end\n");
    return fsa_strbuf_take(&b);
}

/* The value of the first line "<field> <value>" of the text, into out. */
static int field(char *out, size_t n, const char *text, const char *name)
{
    const size_t len = strlen(name);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, len) != 0 || p[len] != ' ') continue;
        const char *v = p + len + 1, *nl = strchr(v, '\n');
        const size_t vl = nl ? (size_t)(nl - v) : strlen(v);
        if (vl == 0 || vl >= n) return 0;
        memcpy(out, v, vl);
        out[vl] = '\0';
        return 1;
    }
    return 0;
}

int fsa_tune_record_parse(const char *text, size_t len, fsa_op_kind op, const fsa_candidates *c)
{
    char *t = malloc(len + 1);
    char value[64];
    int found = 0;
    if (t == NULL) return 0;
    memcpy(t, text, len);
    t[len] = '\0';
    /* Whole: the magic first, "end" last, no NUL inside, the right operation. */
    const int whole = strlen(t) == len && strncmp(t, RECORD_MAGIC, strlen(RECORD_MAGIC)) == 0 && len >= 4 &&
                      strcmp(t + len - 4, "end\n") == 0 && field(value, sizeof value, t, "op") &&
                      strcmp(value, op_name(op)) == 0;
    if (whole && field(value, sizeof value, t, "winner")) {
        for (int i = 0; i < c->n && !found; i++) {
            char v[32];
            fsa_variant_name(v, sizeof v, &c->v[i]);
            if (strcmp(v, value) == 0) found = i + 1;
        }
    }
    free(t);
    return found;
}

int fsa_tune_read(fsa_context *ctx, const fsa_kernel_key *key, fsa_op_kind op, const fsa_candidates *c)
{
    fsa_disk_entry e = {0};
    int slot = 0;
    uint64_t corrupt = 0;
    if (ctx->disk == NULL) return 0;
    if (fsa_disk_cache_lookup_record(&e, ctx->disk, key, ctx->target, &corrupt) == FSA_STATUS_OK) {
        slot = fsa_tune_record_parse((const char *)e.cubin, e.cubin_size, op, c);
        if (slot == 0) corrupt++; /* a whole entry whose text is not a record of these candidates */
    }
    if (corrupt) {
        atomic_fetch_add(&ctx->counters.corrupt_entries, corrupt);
        fsa_log_warn(ctx->log, "tuning record %s.%s ignored (damaged or foreign); it is measured again", key->name,
                     key->hex);
    }
    fsa_disk_entry_free(&e);
    return slot;
}

/* The record of one bucket from the disk cache: 1 + candidate index, or 0. */
static int read_record(const fsa_plan *plan, fsa_op_kind op, int bucket, const fsa_candidates *c)
{
    fsa_kernel_key key;
    if (fsa_tune_record_key(&key, plan, op, bucket) != FSA_STATUS_OK) return 0;
    const int slot = fsa_tune_read(plan->ctx, &key, op, c);
    fsa_key_free(&key);
    return slot;
}

void fsa_tune_load_records(fsa_plan *plan)
{
    if (plan->ctx->disk == NULL || plan->tune.level == FSA_TUNE_LEVEL_FORCE) return;
    for (int op = 0; op < FSA_OP_KINDS; op++) {
        if (op == FSA_OP_BWD && !plan->bwd_available) continue;
        fsa_candidates c;
        fsa_candidates_of(&c, plan, (fsa_op_kind)op);
        if (c.n < 2) continue;
        for (int b = 0; b < FSA_TUNE_BUCKETS; b++) atomic_store(&plan->tune.slot[op][b], read_record(plan, op, b, &c));
    }
    fsa_error_clear(); /* misses are not errors */
}

void fsa_tune_publish(fsa_context *ctx, const fsa_kernel_key *key, fsa_op_kind op, const fsa_candidates *c,
                      int winner, const double *ms)
{
    if (ctx->disk == NULL || fsa_disk_cache_read_only(ctx->disk)) return;
    char *text = fsa_tune_record_text(op, c, winner, ms);
    if (text == NULL || fsa_disk_cache_publish_record(ctx->disk, key, ctx->target, text) != FSA_STATUS_OK) {
        atomic_fetch_add(&ctx->counters.write_failures, 1);
        fsa_log_warn(ctx->log, "tuning record %s not written: %s", key->name, fsa_last_error());
        fsa_error_clear();
    }
    free(text);
}

/* Publishes the record; a cache that cannot take it only costs a re-measure
 * in the next process. */
static void publish_record(const fsa_plan *plan, fsa_op_kind op, int bucket, const fsa_candidates *c, int winner,
                           const double *ms)
{
    fsa_kernel_key key;
    if (plan->ctx->disk == NULL) return;
    if (fsa_tune_record_key(&key, plan, op, bucket) != FSA_STATUS_OK) {
        fsa_error_clear();
        return;
    }
    fsa_tune_publish(plan->ctx, &key, op, c, winner, ms);
    fsa_key_free(&key);
}

int fsa_tune_can_time(const fsa_cu_api *cu)
{
    return cu != NULL && cu->EventCreate && cu->EventDestroy && cu->EventRecord && cu->EventSynchronize && cu->EventElapsedTime;
}

fsa_status fsa_tune_time(double *ms, int *timed_out, const fsa_cu_api *cu, int n, fsa_tune_run_fn run, void *arg,
                         CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    CUevent start = NULL, stop = NULL;
    const double t0 = fsa_now_ms();
    *timed_out = 0;
    if (cu->EventCreate(&start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        cu->EventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        goto cleanup;
    for (int i = 0; i < n; i++) {
        ms[i] = -1.0;
        FSA_CHECK(run(arg, i, stream));
    }
    for (int rep = 0; rep < FSA_TUNE_MAX_REPEATS; rep++) {
        if (rep > 0 && fsa_now_ms() - t0 > FSA_TUNE_BUDGET_MS) break;
        for (int i = 0; i < n; i++) {
            float t = 0.0f;
            if (cu->EventRecord(start, stream) != CUDA_SUCCESS) goto cleanup;
            FSA_CHECK(run(arg, i, stream));
            if (cu->EventRecord(stop, stream) != CUDA_SUCCESS || cu->EventSynchronize(stop) != CUDA_SUCCESS ||
                cu->EventElapsedTime(&t, start, stop) != CUDA_SUCCESS)
                goto cleanup;
            if (ms[i] < 0 || t < ms[i]) ms[i] = t;
        }
    }
    *timed_out = 1;
cleanup:
    if (start) cu->EventDestroy(start);
    if (stop) cu->EventDestroy(stop);
    return st;
}

/* One candidate of a selected-attention call, as fsa_tune_time runs it. */
typedef struct variant_runs {
    const fsa_plan *plan;
    const fsa_candidates *c;
    const void *call;
    fsa_variant_run_fn run;
} variant_runs;

static fsa_status run_variant(void *arg, int i, CUstream stream)
{
    const variant_runs *r = arg;
    return r->run(r->call, r->plan, &r->c->v[i], stream);
}

static _Thread_local unsigned long measured_here;

unsigned long fsa_tune_measured_in_this_thread(void)
{
    return measured_here;
}

fsa_status fsa_tune_pick(fsa_variant *out, int *measured_out, const fsa_plan *plan, fsa_op_kind op,
                         int64_t total_tokens, const void *call, fsa_variant_run_fn run, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_choice choice;
    fsa_candidates c;
    double ms[FSA_MAX_VARIANTS];
    int timed = 0;
    if (measured_out) *measured_out = 0;
    fsa_choose(&choice, plan, op, total_tokens);
    *out = choice.variant;
    const fsa_cu_api *cu = plan->ctx->cu;
    const int device = fsa_tune_can_time(cu);
    if (!choice.may_measure ||
        !fsa_tune_should_measure(plan->tune.level, 0, choice.candidates, device, fsa_stream_capturing(cu, stream)))
        return FSA_STATUS_OK;
    /* One call measures a bucket; others take the heuristic meanwhile. */
    atomic_int *slot = (atomic_int *)&plan->tune.slot[op][choice.bucket];
    int expected = 0;
    if (!atomic_compare_exchange_strong(slot, &expected, FSA_TUNE_SLOT_BUSY)) return FSA_STATUS_OK;
    fsa_candidates_of(&c, plan, op);
    variant_runs runs = {plan, &c, call, run};
    const int mode = fsa_capture_relax(cu); /* the timings' waits: another thread may be capturing */
    st = fsa_tune_time(ms, &timed, cu, c.n, run_variant, &runs, stream);
    fsa_capture_restore(cu, mode);
    if (st != FSA_STATUS_OK || !timed) {
        atomic_store(slot, 0); /* a later call may try again */
        return st;
    }
    int winner = 0;
    for (int i = 1; i < c.n; i++)
        if (ms[i] < ms[winner]) winner = i;
    *out = c.v[winner];
    atomic_store(slot, winner + 1);
    publish_record(plan, op, choice.bucket, &c, winner, ms);
    measured_here++;
    if (measured_out) *measured_out = 1;
    return FSA_STATUS_OK;
}

fsa_status fsa_tune_launch(const void *call, const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens,
                           fsa_algorithm chosen, int tune, fsa_variant_run_fn run, CUstream stream)
{
    fsa_variant v = {chosen, 0, 0, 0};
    if (tune) {
        const fsa_status st = fsa_tune_pick(&v, NULL, plan, op, total_tokens, call, run, stream);
        if (st != FSA_STATUS_OK) return st;
    }
    return run(call, plan, &v, stream);
}
