/* Check mode: see metadata_check.h. */
#include "metadata_check.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 256
#define MAX_BLOCKS 4096u

/* The check kernel of each kind: template family and function. */
static const fsa_kernel_request check_kernels[] = {
    [FSA_CHECK_SELECTED] = {"sel_check", NULL, 0, "fsa_sel_check"},
    [FSA_CHECK_KVCACHE] = {"kvc_check", NULL, 0, "fsa_kvc_check"},
    [FSA_CHECK_OFFSETS] = {"offsets_check", NULL, 0, "fsa_offsets_check"},
};

struct fsa_metadata_checker {
    CUfunction fn;
    const char *fn_name;
    CUdeviceptr result;   /* fsa_check_result on the device; 0 offline */
    pthread_mutex_t lock; /* one check at a time: they share the result */
    atomic_int warned_capture;
};

static fsa_status need_entry_points(const fsa_cu_api *cu)
{
    if (cu->MemAlloc && cu->MemFree && cu->MemcpyDtoHAsync && cu->StreamSynchronize) return FSA_STATUS_OK;
    return fsa_error_set(FSA_STATUS_NO_DRIVER, "check",
                         "check mode needs cuMemAlloc, cuMemFree, cuMemcpyDtoHAsync and cuStreamSynchronize, "
                         "which this driver lacks");
}

fsa_status fsa_metadata_checker_create(fsa_metadata_checker **out, fsa_context *ctx, fsa_check_kind kind)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_metadata_checker *c = NULL;
    int entered = 0;
    *out = NULL;
    if (!ctx->check) return FSA_STATUS_OK;
    c = calloc(1, sizeof *c);
    FSA_CHECK_ALLOC(c, "check");
    pthread_mutex_init(&c->lock, NULL);
    const fsa_kernel_request *req = &check_kernels[kind];
    c->fn_name = req->entry_names; /* one entry: the kernel */
    FSA_CHECK(fsa_context_get_function(&c->fn, ctx, req, req->entry_names, 0, -1));
    if (ctx->cu != NULL) {
        FSA_CHECK(need_entry_points(ctx->cu));
        FSA_CHECK(fsa_context_enter(ctx));
        entered = 1;
        /* Relaxed: another thread's global-mode capture would otherwise be invalidated by the allocation. */
        const int mode = fsa_capture_relax(ctx->cu);
        const CUresult rc = ctx->cu->MemAlloc(&c->result, sizeof(fsa_check_result));
        fsa_capture_restore(ctx->cu, mode);
        FSA_CHECK_CU(ctx->cu, rc, "check");
    }
    *out = c;
    c = NULL;
cleanup:
    if (entered) fsa_context_leave(ctx);
    fsa_metadata_checker_destroy(c, ctx);
    return st;
}

void fsa_metadata_checker_destroy(fsa_metadata_checker *c, fsa_context *ctx)
{
    if (c == NULL) return;
    if (c->result && fsa_context_enter(ctx) == FSA_STATUS_OK) {
        ctx->cu->MemFree(c->result);
        fsa_context_leave(ctx);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Appends `phrase` to a list of phrases joined by ", ". */
static void add_phrase(fsa_strbuf *b, int *n, const char *phrase)
{
    fsa_strbuf_appendf(b, "%s%s", (*n)++ ? ", " : "", phrase);
}

/* "; <subject> <phrase>, <phrase> (first at <where>)" for the flags of `r` in `mask`. */
typedef struct phrase_of {
    unsigned flag;
    const char *text;
} phrase_of;

static void add_sentence(fsa_strbuf *b, unsigned flags, const char *subject, const phrase_of *phrases, size_t count)
{
    int n = 0;
    for (size_t i = 0; i < count; i++) {
        if (!(flags & phrases[i].flag)) continue;
        if (n == 0) fsa_strbuf_appendf(b, "; %s ", subject);
        add_phrase(b, &n, phrases[i].text);
    }
}

fsa_status fsa_metadata_verdict(const char *stage, const fsa_check_result *r, int64_t hkv, const char *cu_name,
                                const char *total_name)
{
    char end[64];
    snprintf(end, sizeof end, "does not end at %s", total_name);
    const phrase_of cu[] = {
        {FSA_CHECK_CU_ORDER, "falls"},
        {FSA_CHECK_SEQ_LONG, "has a sequence longer than max_seqlen"},
        {FSA_CHECK_CU_END, end},
    };
    static const phrase_of cu_c[] = {
        {FSA_CHECK_CUC_ORDER, "falls"},
        {FSA_CHECK_CUC_END, "does not end at total_compressed"},
        {FSA_CHECK_CMP_COUNT, "gives a sequence a compressed-token count other than max(0, (length - kernel_size) "
                              "/ stride + 1)"},
    };
    static const phrase_of used[] = {
        {FSA_CHECK_USED_SHORT, "below the sequence's new tokens"},
        {FSA_CHECK_USED_LONG, "beyond the pages of its block-table row"},
    };
    static const phrase_of pages[] = {{FSA_CHECK_PAGE_RANGE, "entries of used pages outside [0, num_pages)"}};
    static const phrase_of rows[] = {
        {FSA_CHECK_TOPK_RANGE, "entries neither -1 nor a block of the token's sequence"},
        {FSA_CHECK_TOPK_REPEAT, "rows naming a block twice"},
    };
    const unsigned seq_flags = FSA_CHECK_CU_ORDER | FSA_CHECK_SEQ_LONG | FSA_CHECK_CU_END | FSA_CHECK_USED_SHORT |
                               FSA_CHECK_USED_LONG | FSA_CHECK_PAGE_RANGE | FSA_CHECK_CUC_ORDER | FSA_CHECK_CUC_END |
                               FSA_CHECK_CMP_COUNT;
    const unsigned row_flags = FSA_CHECK_TOPK_RANGE | FSA_CHECK_TOPK_REPEAT;
    fsa_strbuf b = {0};
    if (r->flags & FSA_CHECK_CU_START) fsa_strbuf_appendf(&b, "; %s[0] is not 0", cu_name);
    add_sentence(&b, r->flags, cu_name, cu, sizeof cu / sizeof cu[0]);
    if (r->flags & FSA_CHECK_CUC_START) fsa_strbuf_appendf(&b, "; cu_seqlens_c[0] is not 0");
    add_sentence(&b, r->flags, "cu_seqlens_c", cu_c, sizeof cu_c / sizeof cu_c[0]);
    add_sentence(&b, r->flags, "seqused_k", used, sizeof used / sizeof used[0]);
    add_sentence(&b, r->flags, "block_table", pages, 1);
    if (r->flags & seq_flags) fsa_strbuf_appendf(&b, " (first at sequence %llu)", r->first_seq);
    add_sentence(&b, r->flags, "top-k", rows, sizeof rows / sizeof rows[0]);
    if (r->flags & row_flags)
        fsa_strbuf_appendf(&b, " (first at token %llu, KV head %llu)", r->first_row / (unsigned long long)hkv,
                           r->first_row % (unsigned long long)hkv);
    char *text = fsa_strbuf_take(&b);
    fsa_status st = fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage, "check mode: bad metadata: %s",
                                  text ? text + 2 : "(out of memory describing it)");
    free(text);
    return st;
}

uint64_t fsa_metadata_checker_result(const fsa_metadata_checker *c) { return c ? (uint64_t)c->result : 0; }

fsa_status fsa_metadata_checker_run(fsa_check_result *r, fsa_metadata_checker *c, const fsa_context *ctx,
                                    void *params, uint64_t work, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    memset(r, 0, sizeof *r);
    if (c == NULL || c->result == 0 || work == 0) return FSA_STATUS_OK;
    const fsa_cu_api *cu = ctx->cu;
    /* Where capture cannot be told the check runs: a capture would fail its synchronization with the
     * driver's error, which the call returns. */
    if (fsa_stream_capturing(cu, stream) == 1) {
        if (atomic_exchange(&c->warned_capture, 1) == 0)
            fsa_log_warn(ctx->log, "check mode: skipped while the stream is being captured");
        return FSA_STATUS_OK;
    }
    const uint64_t want = (work + THREADS - 1) / THREADS;
    const unsigned blocks = (unsigned)(want < MAX_BLOCKS ? want : MAX_BLOCKS);
    void *args[] = {params};
    pthread_mutex_lock(&c->lock);
    const int mode = fsa_capture_relax(cu); /* the wait below: another thread may be capturing */
    int enqueued = 1; /* from the first enqueue until the wait returns */
    /* flags = 0, first_seq = first_row = all ones (the kernel takes minima). */
    FSA_CHECK_CU(cu, cu->MemsetD32Async(c->result, 0, 2, stream), "check");
    FSA_CHECK_CU(cu, cu->MemsetD32Async(c->result + 8, 0xffffffffu, 4, stream), "check");
    FSA_CHECK_CU(cu, cu->LaunchKernel(c->fn, blocks, 1, 1, THREADS, 1, 1, 0, stream, args, NULL), c->fn_name);
    FSA_CHECK_CU(cu, cu->MemcpyDtoHAsync(r, c->result, sizeof *r, stream), "check");
    FSA_CHECK_CU(cu, cu->StreamSynchronize(stream), "check");
    enqueued = 0;
cleanup:
    /* A failed enqueue may leave this call's work on the result buffer queued: drained before another
     * call (another stream) takes the buffer, whatever the wait returns. */
    if (enqueued) (void)cu->StreamSynchronize(stream);
    fsa_capture_restore(cu, mode);
    pthread_mutex_unlock(&c->lock);
    return st;
}

fsa_status fsa_metadata_check(const fsa_plan *plan, const char *stage, const fsa_call_inputs *in, CUstream stream)
{
    fsa_metadata_checker *c = plan->checker;
    if (c == NULL || in->total_tokens == 0) return FSA_STATUS_OK;
    const int64_t hkv = plan->desc.num_kv_heads;
    fsa_check_params p = {(long long)in->cu_seqlens, (long long)in->topk->ptr, in->topk->head_stride,
                          in->topk->token_stride, in->total_tokens, in->batch, hkv, plan->desc.top_k,
                          plan->desc.block_size, in->max_seqlen, (long long)c->result};
    const uint64_t work = (uint64_t)in->total_tokens * (uint64_t)hkv + (uint64_t)in->batch + 1;
    fsa_check_result r;
    fsa_status st = fsa_metadata_checker_run(&r, c, plan->ctx, &p, work, stream);
    if (st == FSA_STATUS_OK && r.flags != 0) st = fsa_metadata_verdict(stage, &r, hkv, "cu_seqlens", "total_tokens");
    return st;
}

fsa_status fsa_offsets_check(fsa_metadata_checker *checker, const fsa_context *ctx, const char *stage,
                             fsa_offsets_check_params p, CUstream stream)
{
    p.result = (long long)fsa_metadata_checker_result(checker);
    fsa_check_result r;
    fsa_status st = fsa_metadata_checker_run(&r, checker, ctx, &p, (uint64_t)p.batch + 1, stream);
    if (st == FSA_STATUS_OK && r.flags != 0) st = fsa_metadata_verdict(stage, &r, 1, "cu_seqlens", "total_tokens");
    return st;
}
