/* Check mode: see metadata_check.h. */
#include "metadata_check.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 256
#define MAX_BLOCKS 4096u

struct fsa_metadata_checker {
    CUfunction fn;
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

fsa_status fsa_metadata_checker_create(fsa_metadata_checker **out, fsa_context *ctx)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_metadata_checker *c = NULL;
    int entered = 0;
    *out = NULL;
    if (!ctx->check) return FSA_STATUS_OK;
    c = calloc(1, sizeof *c);
    FSA_CHECK_ALLOC(c, "check");
    pthread_mutex_init(&c->lock, NULL);
    const fsa_kernel_request req = {"sel_check", NULL, 0, "fsa_sel_check"};
    FSA_CHECK(fsa_context_get_function(&c->fn, ctx, &req, "fsa_sel_check", 0));
    if (ctx->cu != NULL) {
        FSA_CHECK(need_entry_points(ctx->cu));
        FSA_CHECK(fsa_context_enter(ctx));
        entered = 1;
        FSA_CHECK_CU(ctx->cu, ctx->cu->MemAlloc(&c->result, sizeof(fsa_check_result)), "check");
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

fsa_status fsa_metadata_verdict(const char *stage, const fsa_check_result *r, int64_t hkv)
{
    fsa_strbuf b = {0};
    int n = 0;
    if (r->flags & FSA_CHECK_CU_START) fsa_strbuf_append(&b, "; cu_seqlens[0] is not 0");
    if (r->flags & (FSA_CHECK_CU_ORDER | FSA_CHECK_SEQ_LONG | FSA_CHECK_CU_END)) {
        fsa_strbuf_append(&b, "; cu_seqlens ");
        if (r->flags & FSA_CHECK_CU_ORDER) add_phrase(&b, &n, "falls");
        if (r->flags & FSA_CHECK_SEQ_LONG) add_phrase(&b, &n, "has a sequence longer than max_seqlen");
        if (r->flags & FSA_CHECK_CU_END) add_phrase(&b, &n, "does not end at total_tokens");
        fsa_strbuf_appendf(&b, " (first at sequence %llu)", r->first_seq);
    }
    if (r->flags & (FSA_CHECK_TOPK_RANGE | FSA_CHECK_TOPK_REPEAT)) {
        n = 0;
        fsa_strbuf_append(&b, "; top-k ");
        if (r->flags & FSA_CHECK_TOPK_RANGE) add_phrase(&b, &n, "entries neither -1 nor a block of the token's sequence");
        if (r->flags & FSA_CHECK_TOPK_REPEAT) add_phrase(&b, &n, "rows naming a block twice");
        fsa_strbuf_appendf(&b, " (first at token %llu, KV head %llu)", r->first_row / (unsigned long long)hkv,
                           r->first_row % (unsigned long long)hkv);
    }
    char *text = fsa_strbuf_take(&b);
    fsa_status st = fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, stage, "check mode: bad metadata: %s",
                                  text ? text + 2 : "(out of memory describing it)");
    free(text);
    return st;
}

/* 1 when the stream is being captured: the check could not wait. */
static int capturing(const fsa_cu_api *cu, CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return cu->StreamIsCapturing && cu->StreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

fsa_status fsa_metadata_check(const fsa_plan *plan, const char *stage, const fsa_call_inputs *in, CUstream stream)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_metadata_checker *c = plan->checker;
    if (c == NULL || c->result == 0 || in->total_tokens == 0) return FSA_STATUS_OK;
    const fsa_cu_api *cu = plan->ctx->cu;
    if (capturing(cu, stream)) {
        if (atomic_exchange(&c->warned_capture, 1) == 0)
            fsa_log_warn(plan->ctx->log, "check mode: skipped while the stream is being captured");
        return FSA_STATUS_OK;
    }
    const int64_t hkv = plan->desc.num_kv_heads;
    fsa_check_params p = {(long long)in->cu_seqlens, (long long)in->topk->ptr, in->topk->head_stride,
                          in->topk->token_stride, in->total_tokens, in->batch, hkv, plan->desc.top_k,
                          plan->desc.block_size, in->max_seqlen, (long long)c->result};
    const uint64_t work = (uint64_t)in->total_tokens * (uint64_t)hkv + (uint64_t)in->batch + 1;
    const unsigned blocks = (unsigned)((work + THREADS - 1) / THREADS < MAX_BLOCKS ? (work + THREADS - 1) / THREADS
                                                                                     : MAX_BLOCKS);
    void *args[] = {&p};
    fsa_check_result r;
    pthread_mutex_lock(&c->lock);
    /* flags = 0, first_seq = first_row = all ones (the kernel takes minima). */
    FSA_CHECK_CU(cu, cu->MemsetD32Async(c->result, 0, 2, stream), "check");
    FSA_CHECK_CU(cu, cu->MemsetD32Async(c->result + 8, 0xffffffffu, 4, stream), "check");
    FSA_CHECK_CU(cu, cu->LaunchKernel(c->fn, blocks, 1, 1, THREADS, 1, 1, 0, stream, args, NULL), "launch fsa_sel_check");
    FSA_CHECK_CU(cu, cu->MemcpyDtoHAsync(&r, c->result, sizeof r, stream), "check");
    FSA_CHECK_CU(cu, cu->StreamSynchronize(stream), "check");
    if (r.flags != 0) st = fsa_metadata_verdict(stage, &r, hkv);
cleanup:
    pthread_mutex_unlock(&c->lock);
    return st;
}
