/* The on-disk kernel cache (format: cache/README.md).
 *
 * Layout: <root>/v1/<target>/<name>.<hex>.cubin, one entry per kernel key.
 * Readers never lock. Writers publish atomically (temporary file in the same
 * directory, fsync, rename, fsync of the directory). A per-key lock file only
 * keeps processes from compiling the same kernel twice. Any entry that fails
 * validation is a miss: it is deleted (when the cache is writable) and the
 * caller rebuilds it once. */
#ifndef FSA_DISK_CACHE_H
#define FSA_DISK_CACHE_H

#include "fsa.h"
#include "kernel_key.h"

#include <stddef.h>
#include <stdint.h>

#define FSA_CACHE_LAYOUT "v1"
#define FSA_CACHE_FORMAT_VERSION 2u /* 1: before the entry-names checksum */
#define FSA_CACHE_HEADER_SIZE 80u

typedef struct fsa_disk_cache fsa_disk_cache;

/* Opens <root> (unless read_only, creating it and its missing parents with
 * mode 0700). <root>/v1 is created (mode 0700) by the first publish or lock,
 * so that list, verify and prune of an empty cache create nothing; read-only,
 * it must exist. Refuses, with FSA_STATUS_CACHE_IO and a message, a root or
 * v1 directory that other users can write or that a user other than the
 * effective user or root owns; the caller then works in memory. Files and directories of root are
 * trusted (root can replace any file anyway), so that a cache baked into an
 * image by root serves every user. A relative root is joined to the working
 * directory of the call, which fsa_disk_cache_root then reports. */
fsa_status fsa_disk_cache_open(fsa_disk_cache **out, const char *root, int read_only);
void fsa_disk_cache_close(fsa_disk_cache *dc); /* NULL is fine */
const char *fsa_disk_cache_root(const fsa_disk_cache *dc);
int fsa_disk_cache_read_only(const fsa_disk_cache *dc);

typedef struct fsa_disk_entry {
    uint8_t *cubin;
    size_t cubin_size;
    char *entry_names; /* '\n'-separated kernel entry points */
    char *key_text;    /* as stored in the entry */
} fsa_disk_entry;

void fsa_disk_entry_free(fsa_disk_entry *e); /* frees the members; NULL is fine */

/* FSA_STATUS_OK with *out filled on a hit; FSA_STATUS_NOT_FOUND on a miss.
 * A present but bad entry (short, bad magic, bad flags, wrong key text,
 * checksum mismatch, owned by an untrusted user, not a regular file) is a miss:
 * *corrupt_out is incremented and the file deleted unless read-only. An entry
 * of another format version (another library version's) is a miss that is
 * neither counted nor deleted. A hit records its use in the file's access
 * time (at most once an hour, never read-only) for prune.
 * With any_nvrtc, an entry whose key text equals key->text except for the
 * "nvrtc" line also hits (for processes that have no NVRTC); among several
 * the newest file wins. Other failures: FSA_STATUS_CACHE_IO. */
fsa_status fsa_disk_cache_lookup(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                 const char *target, int any_nvrtc, uint64_t *corrupt_out);

/* Any-NVRTC lookup among the entries an NVRTC of major version
 * max_nvrtc_major or older built (0: no limit): the cubins a driver of that
 * CUDA major version can load. */
fsa_status fsa_disk_cache_lookup_compatible(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                            const char *target, int max_nvrtc_major, uint64_t *corrupt_out);

/* Identifies the cache directory (device and inode of <root>), so that
 * two handles on one directory can be told to be the same. */
void fsa_disk_cache_identity(const fsa_disk_cache *dc, uint64_t id[2]);

/* Writes the entry atomically. FSA_STATUS_CACHE_IO when the cache is
 * read-only or any write fails (nothing partial is ever visible). */
fsa_status fsa_disk_cache_publish(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target,
                                  const void *cubin, size_t cubin_size, const char *entry_names);

/* Exclusive advisory lock on <name>.<hex>.lock for one key. Returns a file
 * descriptor; -1 when no lock can be had (read-only or refused cache, a lock
 * path that cannot be opened or is not a regular file);
 * FSA_DISK_LOCK_GAVE_UP when another process holds it and is stopped on this
 * host, held it for FSA_CACHE_LOCK_TIMEOUT seconds (default 120), or flock
 * fails otherwise (a file system without it). Callers go on without the lock
 * in either case (publishing is atomic, so a duplicate compile is harmless);
 * the error record says why. */
#define FSA_DISK_LOCK_GAVE_UP (-2)
int fsa_disk_cache_lock(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target);
void fsa_disk_cache_unlock(int fd); /* a negative fd is fine */

/* Maintenance. Each visits every entry of every target directory. */
fsa_status fsa_disk_cache_list(fsa_disk_cache *dc, fsa_cache_visit_fn visit, void *user);

/* Optional extra check of a valid entry at path (e.g. loading it on the
 * GPU); returns one of these. Only BAD deletes the entry; only GOOD sets
 * info.loaded. */
#define FSA_DISK_CHECK_GOOD 0
#define FSA_DISK_CHECK_BAD 1       /* unusable for this library: deleted, counted */
#define FSA_DISK_CHECK_UNCHECKED 2 /* could not be judged here: kept, valid */
typedef int (*fsa_disk_check_fn)(const fsa_disk_entry *entry, const char *target, const char *path, void *user);

/* Re-reads every entry: header, key digest (the file name's hex must be the
 * XXH3-128 of the stored key text), payload checksum, then `check` when given.
 * Bad entries are deleted (unless read-only) and counted in *bad_out. `visit`
 * sees every entry with info.valid set, except those of another format
 * version, which are skipped (not judged, counted or deleted). Access times
 * are left as they were, so that prune still ranks by use. */
fsa_status fsa_disk_cache_verify(fsa_disk_cache *dc, fsa_disk_check_fn check, void *check_user,
                                 fsa_cache_visit_fn visit, void *user, uint64_t *bad_out);

/* Deletes the temporary files of writers that are gone, unheld lock files
 * older than an hour and links, FIFOs and empty directories at lock paths,
 * then entries in order of last use (the later of atime and mtime; a time
 * over a minute ahead of the clock counts as the oldest) until the entries
 * and the live writers' temporary files total <= max_bytes.
 * An entry replaced since the scan is kept. *removed_out counts every deleted
 * file; *bytes_left_out is that total afterwards, UINT64_MAX when it is unknown
 * (a directory could not be read, or the prune was refused: read-only). */
fsa_status fsa_disk_cache_prune(fsa_disk_cache *dc, uint64_t max_bytes, uint64_t *removed_out,
                                uint64_t *bytes_left_out);

/* Tuning records (attention/tuning.c): entries of the same format, checks
 * and atomic publish as the cubins, named <name>.<hex>.tune, whose key text
 * is a tuning bucket and whose payload is the record's text. Lookup as for
 * an exact cubin lookup: a damaged or foreign file (another key's text under
 * this digest) is a miss, counted and deleted unless read-only. List,
 * verify and prune walk them with the cubins. */
fsa_status fsa_disk_cache_lookup_record(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                        const char *target, uint64_t *corrupt_out);
fsa_status fsa_disk_cache_publish_record(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target,
                                         const char *record);
char *fsa_disk_cache_record_path(const fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target);

/* The path of a key's entry (caller frees). For tests and messages. */
char *fsa_disk_cache_entry_path(const fsa_disk_cache *dc, const fsa_kernel_key *key,
                                const char *target);

#endif
