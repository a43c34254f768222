/* Public cache maintenance: list, verify (with a load on the GPU when the
 * context has one), prune. */
#include "context.h"
#include "kernel_key.h"
#include "base/status_internal.h"

#include <limits.h>
#include <stdio.h>
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
    if (visit == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, "cache", "list: visit is NULL");
    fsa_status st = need_disk(ctx, "list");
    if (st != FSA_STATUS_OK) return st;
    return fsa_disk_cache_list(ctx->disk, visit, user);
}

/* Loads a valid entry of the context's own target into the driver. Only an
 * error that says the image itself is unusable condemns it: any other (out
 * of memory, a context problem) says nothing about the file, which is kept
 * unchecked. Entries this driver cannot judge are not loaded: those of
 * another target, one whose key names another target (a copy in the wrong
 * directory), and one an NVRTC newer than the driver built (a newer driver
 * loads it). */
static int load_check(const fsa_disk_entry *entry, const char *target, const char *path, void *user)
{
    const fsa_context *ctx = user;
    char line[64];
    snprintf(line, sizeof line, "\ntarget %s\n", ctx->target);
    if (ctx->cu == NULL || strcmp(target, ctx->target) != 0 || strstr(entry->key_text, line) == NULL)
        return FSA_DISK_CHECK_UNCHECKED;
    int built_by = fsa_key_text_nvrtc_version(entry->key_text);
    if (ctx->cu->driver_version > 0 && built_by > ctx->cu->driver_version) {
        if (built_by == INT_MAX) /* a forged or damaged version: no number to print */
            fsa_log_warn(ctx->log, "cache verify: %s not loaded: its NVRTC version is past any driver's; kept", path);
        else
            fsa_log_warn(ctx->log,
                         "cache verify: %s not loaded: built by NVRTC %d.%d, newer than the driver (%d.%d); kept",
                         path, built_by / 1000, built_by % 1000 / 10, ctx->cu->driver_version / 1000,
                         ctx->cu->driver_version % 1000 / 10);
        return FSA_DISK_CHECK_UNCHECKED;
    }
    CUlibrary lib = NULL;
    CUresult r = ctx->cu->LibraryLoadData(&lib, entry->cubin, NULL, NULL, 0, NULL, NULL, 0);
    if (r == CUDA_SUCCESS) {
        ctx->cu->LibraryUnload(lib);
        return FSA_DISK_CHECK_GOOD;
    }
    /* The device runs the context's target, which the key names: no image for it means a bad file. */
    if (r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU) return FSA_DISK_CHECK_BAD;
    const char *why = NULL;
    if (ctx->cu->GetErrorName(r, &why) != CUDA_SUCCESS || why == NULL) why = "unknown error";
    fsa_log_warn(ctx->log, "cache verify: %s could not be loaded (%s, %d); kept, not checked on the GPU", path, why,
                 (int)r);
    return FSA_DISK_CHECK_UNCHECKED;
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
