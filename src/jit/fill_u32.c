/* fsa_fill_u32: the smallest kernel, through the whole JIT path (the one
 * the attention plans' kernels take; their workspaces are zeroed with
 * cuMemsetD32Async, not with this). */
#include "context.h"
#include "base/status_internal.h"

static const fsa_param fill_params[] = {{"UNROLL", "4", "u"}};
static const fsa_kernel_request fill_request = {"fill", fill_params, 1, "fsa_fill_u32"};

fsa_status fsa_fill_u32(fsa_context *ctx, uint64_t dst, uint32_t value, uint64_t count, void *stream)
{
    fsa_status st = FSA_STATUS_OK;
    int entered = 0;
    if (ctx == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, "fill", "context is NULL");
    if (ctx->cu == NULL)
        return fsa_error_set(FSA_STATUS_NO_DEVICE, "fill", "context has no device (offline target %s)",
                             ctx->target);
    if (count == 0) return FSA_STATUS_OK;
    if (dst == 0 || (dst & 3u) != 0)
        return fsa_error_set(FSA_STATUS_MISALIGNED, "fill", "destination must be non-NULL and 4-byte aligned");
    if (count - 1 > (UINT64_MAX - dst) / 4) /* the kernel's word addresses would wrap to low memory */
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "fill",
                             "%llu words from 0x%llx pass 2^64 bytes of address", (unsigned long long)count,
                             (unsigned long long)dst);

    pthread_mutex_lock(&ctx->fill_lock);
    if (ctx->fill_fn == NULL) st = fsa_context_get_function(&ctx->fill_fn, ctx, &fill_request, "fsa_fill_u32", 0, -1);
    CUfunction fn = ctx->fill_fn;
    pthread_mutex_unlock(&ctx->fill_lock);
    FSA_CHECK(st);

    FSA_CHECK(fsa_context_enter(ctx));
    entered = 1;
    unsigned long long n = count;
    void *args[] = {&dst, &value, &n};
    uint64_t blocks = (count + 16 * 256 - 1) / (16 * 256);
    if (blocks > (uint64_t)ctx->sm_count * 8) blocks = (uint64_t)ctx->sm_count * 8;
    FSA_CHECK_CU(ctx->cu, ctx->cu->LaunchKernel(fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, (CUstream)stream, args, NULL),
                 "launch");
cleanup:
    if (entered) fsa_context_leave(ctx);
    return st;
}
