/**
 * @file fsa/cache.h
 * Disk cache maintenance: list, verify, prune. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_CACHE_H
#define FSA_PUBLIC_CACHE_H

#include "common.h"
#include "status.h"
#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Disk cache maintenance (what tools/fsa-precompile uses)                  */
/* ------------------------------------------------------------------------ */

/** One disk cache entry, as a visit callback sees it. The strings belong to
 *  the library and are valid only during the callback. */
typedef struct fsa_cache_entry_info {
    const char *path;   /**< full path */
    const char *name;   /**< readable name: a kernel's, e.g. sel_fwd_main_bf16_d128_dv128_g4_bk64, or a
                             tuning record's, e.g. tune_fwd_bf16_d128_dv128_g4_h8_bk64_k16_t65536 */
    const char *target; /**< directory target, e.g. sm_90a */
    uint64_t bytes;     /**< file size */
    int64_t mtime;      /**< seconds since the epoch */
    int valid;          /**< fsa_cache_verify: 1 when header, key and checksum are good;
                             fsa_cache_list checks nothing and reports 1 */
    int deleted;        /**< fsa_cache_verify only: 1 when a bad entry was deleted (0 when it
                             could not be: read-only cache or directory, a directory that is
                             not empty) */
    int loaded;         /**< fsa_cache_verify only: 1 when a valid entry was also
                             loaded on the context's device, so its image runs there; 0 when it was
                             checked on disk only: an offline context, another target's entry, one
                             built by an NVRTC newer than the driver, or a load that failed for a
                             reason that says nothing about the file (the log says which);
                             always 0 for a tuning record. Appended after 0.2.0 (unreleased) */
    int record;         /**< 1 for a tuning record (a measured choice, checked on disk only),
                             0 for a kernel. Appended after 0.2.0 (unreleased; fsa_version() says so
                             from the release that ships it): the library fills this struct, so
                             callers built against older headers read what they know */
} fsa_cache_entry_info;

/** Called once per entry with the caller's `user` pointer; return non-zero to
 *  stop early. It runs on the calling thread, during the call. */
typedef int (*fsa_cache_visit_fn)(const fsa_cache_entry_info *entry, void *user);

/**
 * Visits every entry (kernels and tuning records) of every target under the
 * context's cache directory.
 * @param ctx   the context
 * @param visit the callback (required)
 * @param user  passed to visit unchanged
 * @return FSA_STATUS_OK (also when visit stopped early);
 *         FSA_STATUS_NULL_POINTER; FSA_STATUS_CACHE_IO when the context has no
 *         disk cache, a directory cannot be read or an entry cannot be
 *         stat'ed.
 * Reads the file system only; safe while other threads and processes use the
 * cache.
 */
FSA_API fsa_status fsa_cache_list(fsa_context *ctx, fsa_cache_visit_fn visit, void *user);

/**
 * Re-reads and re-hashes every entry (kernels and tuning records); on a
 * context with a device, also loads the kernels of the context's target into
 * the driver (only a load error
 * that condemns the image, CUDA_ERROR_INVALID_IMAGE or
 * CUDA_ERROR_NO_BINARY_FOR_GPU, makes one bad; entries built by an NVRTC
 * newer than the driver are not loaded). An entry whose key names another
 * target than its directory's is bad too (no lookup there can match it), as
 * is a kernel stored under a readable name its key does not give (renamed:
 * no lookup reads it).
 * Bad entries are deleted where the
 * cache allows it (entry.deleted says which). Entries of another format
 * version (another library version's) are skipped; access times are kept.
 * @param      ctx     the context
 * @param      visit   called for every entry with `valid` and `loaded` set; may be NULL
 * @param      user    passed to visit unchanged
 * @param[out] bad_out the number of bad entries; may be NULL; untouched when
 *                     the context has no disk cache
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_CACHE_IO.
 * Blocks (file I/O, module loads); safe while other processes use the cache.
 */
FSA_API fsa_status fsa_cache_verify(fsa_context *ctx, fsa_cache_visit_fn visit, void *user,
                                    uint64_t *bad_out);

/**
 * Deletes stale temporary and lock files, then the least recently used
 * entries (kernels and tuning records alike) until the entries and the live
 * writers' temporary files total at most max_bytes (an entry a writer
 * replaced after the scan, or while it is deleted, is kept).
 * @param      ctx            the context
 * @param      max_bytes      the size to shrink to (0 deletes every entry)
 * @param[out] removed_out    files deleted; may be NULL
 * @param[out] bytes_left_out bytes left: entries plus live writers' temporary
 *                            files; UINT64_MAX when the scan stopped early
 *                            (a directory could not be read: the size is
 *                            unknown) or never ran (a read-only cache); files that cannot be stat'ed are not
 *                            counted (they are reported as kept); may be NULL
 *                            (both untouched when the context has no disk cache)
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_CACHE_IO.
 * Safe while other processes use the cache: one that needs a deleted kernel
 * compiles it again (a deleted record: measures again, or takes the heuristic).
 */
FSA_API fsa_status fsa_cache_prune(fsa_context *ctx, uint64_t max_bytes, uint64_t *removed_out,
                                   uint64_t *bytes_left_out);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_CACHE_H */
