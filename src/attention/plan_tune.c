/* fsa_plan_tune: one call of an operation on scratch inputs, so that a
 * bucket gets its tuning record ahead of time (fsa-precompile --tune). */
#include "launch.h"
#include "tuning.h"

#include "base/status_internal.h"

#include <stdlib.h>
#include <string.h>

#define STAGE "tune"

/* Every buffer of both operations, in one allocation; offsets in bytes,
 * each 256-byte aligned. */
typedef struct scratch {
    size_t q, k, v, o, dout, dq, dk, dv, topk, cu, lse, ws, total;
} scratch;

/* Sizes in 128 bits: a plan of enough heads makes T tokens of them pass
 * 2^64 bytes, which layout refuses instead of wrapping around. */
typedef unsigned __int128 u128;

static size_t place(u128 *at, u128 bytes)
{
    const u128 here = *at;
    *at = (*at + bytes + 255) & ~(u128)255;
    return (size_t)here;
}

/* The buffers' offsets; 0 where their total does not fit size_t. */
static int layout(scratch *s, const fsa_plan *plan, int64_t T, size_t ws)
{
    const u128 hq = (u128)plan->desc.num_q_heads, hkv = (u128)plan->desc.num_kv_heads;
    /* Bytes of T rows of the query/key head dim, and of the value head dim. */
    const u128 rows = (u128)T * (u128)plan->desc.head_dim * 2;
    const u128 rows_v = (u128)T * (u128)plan->desc.value_dim * 2;
    u128 at = 0;
    s->q = place(&at, rows * hq);
    s->o = place(&at, rows_v * hq);
    s->dout = place(&at, rows_v * hq);
    s->dq = place(&at, rows * hq);
    s->k = place(&at, rows * hkv);
    s->v = place(&at, rows_v * hkv);
    s->dk = place(&at, rows * hkv);
    s->dv = place(&at, rows_v * hkv);
    s->topk = place(&at, (u128)T * hkv * (u128)plan->desc.top_k * 4);
    s->cu = place(&at, 8);
    s->lse = place(&at, (u128)T * hq * 4);
    s->ws = place(&at, ws);
    s->total = (size_t)at;
    return at <= SIZE_MAX;
}

/* Token t selects its own block and the K - 1 before it (-1 past the start),
 * for every KV head: a causal, realistic spread of list lengths. */
static int32_t *make_topk(const fsa_plan *plan, int64_t T)
{
    const int64_t K = plan->desc.top_k, hkv = plan->desc.num_kv_heads, bk = plan->desc.block_size;
    int32_t *h = malloc((size_t)T * (size_t)hkv * (size_t)K * sizeof *h); /* within layout's total */
    if (h == NULL) return NULL;
    for (int64_t t = 0; t < T; t++)
        for (int64_t s = 0; s < K; s++) {
            const int64_t b = t / bk - s;
            for (int64_t kh = 0; kh < hkv; kh++) h[(kh * T + t) * K + s] = b >= 0 ? (int32_t)b : -1;
        }
    return h;
}

static fsa_tensor view(uint64_t base, size_t off, int64_t heads, int64_t d)
{
    const fsa_tensor t = {base + off, heads * d, d};
    return t;
}

static fsa_status run(const fsa_plan *plan, fsa_operation op, int64_t T, uint64_t base, const scratch *s,
                      size_t ws_bytes)
{
    fsa_status st = FSA_STATUS_OK;
    const int64_t hq = plan->desc.num_q_heads, hkv = plan->desc.num_kv_heads, d = plan->desc.head_dim;
    const int64_t dv = plan->desc.value_dim;
    const fsa_tensor topk = {base + s->topk, plan->desc.top_k, T * plan->desc.top_k};
    fsa_fwd_args f = FSA_FWD_ARGS_INIT;
    f.total_tokens = T;
    f.batch = 1;
    f.q = view(base, s->q, hq, d), f.k = view(base, s->k, hkv, d), f.v = view(base, s->v, hkv, dv);
    f.o = view(base, s->o, hq, dv);
    f.topk = topk;
    f.cu_seqlens = base + s->cu;
    f.lse = base + s->lse;
    f.workspace = base + s->ws;
    f.workspace_bytes = ws_bytes;
    FSA_CHECK(fsa_selected_attention_fwd(plan, &f, NULL));
    if (op == FSA_OPERATION_BACKWARD) {
        fsa_bwd_args b = FSA_BWD_ARGS_INIT;
        b.total_tokens = T;
        b.batch = 1;
        b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o, b.topk = topk;
        b.dout = view(base, s->dout, hq, dv);
        b.dq = view(base, s->dq, hq, d), b.dk = view(base, s->dk, hkv, d), b.dv = view(base, s->dv, hkv, dv);
        b.cu_seqlens = f.cu_seqlens;
        b.lse = f.lse;
        b.workspace = f.workspace;
        b.workspace_bytes = ws_bytes;
        FSA_CHECK(fsa_selected_attention_bwd(plan, &b, NULL));
    }
cleanup:
    return st;
}

fsa_status fsa_plan_tune(int *measured_out, const fsa_plan *plan, fsa_operation operation, int64_t total_tokens)
{
    fsa_status st = FSA_STATUS_OK;
    CUdeviceptr base = 0;
    int32_t *topk = NULL;
    int entered = 0;
    if (measured_out) *measured_out = 0;
    if (plan == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, STAGE, "plan must not be NULL");
    const fsa_op_kind op = operation == FSA_OPERATION_BACKWARD ? FSA_OP_BWD : FSA_OP_FWD;
    fsa_choice before;
    if (operation != FSA_OPERATION_FORWARD && operation != FSA_OPERATION_BACKWARD)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "unknown operation %d", (int)operation);
    if (op == FSA_OP_BWD && !plan->bwd_available)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "the plan was created without backward = 1");
    FSA_CHECK(fsa_check_tokens(STAGE, total_tokens, 1));
    if (total_tokens == 0) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "no tokens to measure with");
    scratch s;
    /* Inputs past 2^64 bytes without the workspace are refused before it is sized. */
    if (!layout(&s, plan, total_tokens, 0))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "scratch inputs of %lld tokens of %d query and %d KV heads pass 2^64 bytes", (long long)total_tokens,
                 plan->desc.num_q_heads, plan->desc.num_kv_heads);
    size_t ws_fwd = 0, ws_bwd = 0;
    FSA_CHECK(fsa_plan_workspace_size(&ws_fwd, plan, total_tokens, 1));
    if (op == FSA_OP_BWD) FSA_CHECK(fsa_plan_workspace_size_bwd(&ws_bwd, plan, total_tokens, 1));
    const size_t ws = ws_fwd > ws_bwd ? ws_fwd : ws_bwd;
    if (!layout(&s, plan, total_tokens, ws))
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE,
                 "scratch inputs of %lld tokens of %d query and %d KV heads pass 2^64 bytes", (long long)total_tokens,
                 plan->desc.num_q_heads, plan->desc.num_kv_heads);
    if (plan->tune.level == FSA_TUNE_LEVEL_OFF)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "tuning is off for this plan's context (FSA_TUNE, options.tune)");
    const fsa_cu_api *cu = plan->ctx->cu;
    if (cu == NULL) FSA_FAIL(FSA_STATUS_NO_DEVICE, STAGE, "the plan's context has no device");
    if (!cu->MemAlloc || !cu->MemFree || !cu->MemcpyHtoD || !cu->MemsetD8Async || !cu->StreamSynchronize)
        FSA_FAIL(FSA_STATUS_NO_DRIVER, STAGE, "the driver lacks the memory functions scratch inputs need");
    fsa_choose(&before, plan, op, total_tokens);
    if (!before.may_measure) goto cleanup; /* a record, one candidate, or another thread measuring */

    FSA_CHECK(fsa_context_enter(plan->ctx));
    entered = 1;
    /* The device's scratch first: a size it refuses costs no host rows. */
    FSA_CHECK_CU(cu, cu->MemAlloc(&base, s.total), STAGE);
    topk = make_topk(plan, total_tokens);
    FSA_CHECK_ALLOC(topk, STAGE);
    /* Small finite values in both dtypes (0x3c3c: about 0.011 in bf16, 1.06 in f16). */
    FSA_CHECK_CU(cu, cu->MemsetD8Async(base, 0x3c, s.topk, NULL), STAGE);
    FSA_CHECK_CU(cu, cu->MemcpyHtoD(base + s.topk, topk, (size_t)total_tokens * (size_t)plan->desc.num_kv_heads *
                                                             (size_t)plan->desc.top_k * 4), STAGE);
    const int32_t cu_seqlens[2] = {0, (int32_t)total_tokens};
    FSA_CHECK_CU(cu, cu->MemcpyHtoD(base + s.cu, cu_seqlens, sizeof cu_seqlens), STAGE);
    /* This thread's own measurement: another thread may take the bucket between the check above and the
     * call (this call then runs the heuristic) or finish one meanwhile. */
    const unsigned long measured_before = fsa_tune_measured_in_this_thread();
    FSA_CHECK(run(plan, operation, total_tokens, base, &s, ws));
    FSA_CHECK_CU(cu, cu->StreamSynchronize(NULL), STAGE);
    if (measured_out) *measured_out = (int)(fsa_tune_measured_in_this_thread() != measured_before);
cleanup:
    if (base) plan->ctx->cu->MemFree(base); /* base is set only inside the context */
    if (entered) fsa_context_leave(plan->ctx);
    free(topk);
    return st;
}
