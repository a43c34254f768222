/* Public cache maintenance: list, verify (with a load on the GPU when the
 * context has one), prune. */
#include "context.h"
#include "base/status_internal.h"

#include <string.h>

static fsa_status need_disk(const fsa_context *ctx, const char *what)
{
    if (ctx == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, "cache", "%s: context is NULL", what);
    if (ctx->disk == NULL)
        return fsa_error_set(FSA_STATUS_CACHE_IO, "cache", "%s: the context has no disk cache (off, refused or unusable)",
                             what);
    return FSA_STATUS_OK;
}

fsa_status fsa_cache_list(fsa_context *ctx, fsa_cache_visit_fn visit, void *user)
{
    fsa_status st = need_disk(ctx, "list");
    if (st != FSA_STATUS_OK) return st;
    if (visit == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, "cache", "list: visit is NULL");
    return fsa_disk_cache_list(ctx->disk, visit, user);
}

/* Loads a valid entry of the context's own target into the driver. */
static int load_check(const fsa_disk_entry *entry, const char *target, void *user)
{
    const fsa_context *ctx = user;
    if (ctx->cu == NULL || strcmp(target, ctx->target) != 0) return 0;
    CUlibrary lib = NULL;
    if (ctx->cu->LibraryLoadData(&lib, entry->cubin, NULL, NULL, 0, NULL, NULL, 0) != CUDA_SUCCESS) return 1;
    ctx->cu->LibraryUnload(lib);
    return 0;
}

fsa_status fsa_cache_verify(fsa_context *ctx, fsa_cache_visit_fn visit, void *user, uint64_t *bad_out)
{
    fsa_status st = need_disk(ctx, "verify");
    if (st != FSA_STATUS_OK) return st;
    uint64_t bad = 0;
    st = fsa_disk_cache_verify(ctx->disk, ctx->cu ? load_check : NULL, ctx, visit, user, &bad);
    if (bad_out) *bad_out = bad;
    return st;
}

fsa_status fsa_cache_prune(fsa_context *ctx, uint64_t max_bytes, uint64_t *removed_out, uint64_t *bytes_left_out)
{
    fsa_status st = need_disk(ctx, "prune");
    if (st != FSA_STATUS_OK) return st;
    uint64_t removed = 0, left = 0;
    st = fsa_disk_cache_prune(ctx->disk, max_bytes, &removed, &left);
    if (removed_out) *removed_out = removed;
    if (bytes_left_out) *bytes_left_out = left;
    return st;
}
