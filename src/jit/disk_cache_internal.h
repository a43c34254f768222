/* What the files of the disk cache share (disk_files.c: paths, directories,
 * reading one file; disk_entry.c: the entry format; disk_cache.c: open,
 * lookup, publish; disk_lock.c: the per-key lock; disk_maintenance.c: list,
 * verify, prune). Not for use outside src/jit/disk_*.c. */
#ifndef FSA_DISK_CACHE_INTERNAL_H
#define FSA_DISK_CACHE_INTERNAL_H

#include "disk_cache.h"

#include <sys/stat.h>
#include <time.h>

#define FSA_DC_STAGE "disk-cache"
#define FSA_DC_HEX_LEN 32u
#define FSA_DC_CUBIN_SUFFIX ".cubin" /* a kernel's entry file */
#define FSA_DC_RECORD_SUFFIX ".tune" /* a tuning record's: the same format, another file kind */
#define FSA_DC_MAX_TEXT (64u * 1024u) /* key text and entry names are each shorter */
#define FSA_DC_MAX_PAYLOAD ((uint64_t)1 << 30)
#define FSA_DC_LOCK_DEBRIS_AGE_S 3600 /* unheld lock files this old are removed by prune */
#define FSA_DC_TEMP_DEBRIS_AGE_S 600  /* without flock: a temporary file this old has no writer left */
#define FSA_DC_TEMP_ORPHAN_AGE_S 60   /* ... nor one this old whose writer's pid is gone (with flock:
                                       * an unheld empty one) */
#define FSA_DC_CLOCK_SKEW_S 60        /* a file time up to this far in the future counts as now */
#define FSA_DC_USE_RECORD_S 3600      /* a hit records its use when the last recorded one is older */
#define FSA_DC_MIN_FILE 12u           /* magic and format version: enough to tell another format's entry */

struct fsa_disk_cache {
    char *root;
    char *v1; /* <root>/v1 */
    int read_only;
    uint64_t id[2]; /* device and inode of root */
};

/* ------------------------------------------------------------ names (disk_files.c) */

int64_t fsa_dc_ts_ns(struct timespec t);
/* One path component that cannot climb out of the cache. */
int fsa_dc_safe_component(const char *s);
char *fsa_dc_path_join(const char *dir, const char *leaf);
/* <dir>/<name>.<hex><suffix> */
char *fsa_dc_key_file_path(const char *dir, const fsa_kernel_key *key, const char *suffix);
/* 1 when fname is "<name>.<32 lower-case hex><suffix>"; gives the name's
 * length and the hex digits. */
int fsa_dc_split_key_file(const char *fname, const char *suffix, size_t *name_len, char hex[FSA_DC_HEX_LEN + 1]);
/* ".<name>.<hex>.tmp.<pid>.<random>", as publish names them. */
int fsa_dc_is_temp_name(const char *fname);
/* Deletes the temporary file at path (named fname) when no writer can own
 * it any more; 1 when it did. A writer holds an flock on its temporary file
 * from just after creating it until after its rename, so a file nobody holds
 * that has bytes in it, or is over FSA_DC_TEMP_ORPHAN_AGE_S old, or is dated
 * over FSA_DC_CLOCK_SKEW_S ahead, is a killed writer's (in any pid namespace). Where flock
 * gives no answer (another user's file, a file system without flock): older
 * than FSA_DC_TEMP_DEBRIS_AGE_S, or than FSA_DC_TEMP_ORPHAN_AGE_S when no
 * process has the pid in its name. (Deleting a live writer's file only makes
 * its rename fail, and it keeps its kernel in memory.) -1 when it should go
 * but the unlink failed (errno says why). */
int fsa_dc_remove_temp_debris(const char *path, const char *fname, time_t now);
/* The rule above for the file named fname with status sb: 1 when its writer
 * is gone. held: 1 a writer holds its flock, 0 nobody does, -1 no answer. */
int fsa_dc_temp_writer_gone(const char *fname, const struct stat *sb, int held, time_t now);
/* A file time for ranking by use: now for one slightly in the future, 0
 * (the oldest) for one further ahead, which no clock of this host wrote. */
int64_t fsa_dc_use_time_ns(struct timespec t, time_t now);
char *fsa_dc_dup_n(const char *s, size_t n);

/* ------------------------------------------------------------ directories (disk_files.c) */

/* Owners whose files the cache uses: the effective user, and root. */
int fsa_dc_trusted_owner(uid_t uid);

/* Refuses a directory another user could plant entries in. `missing` is the
 * status for a directory that does not exist. */
fsa_status fsa_dc_check_dir(const char *path, fsa_status missing);
fsa_status fsa_dc_make_dir(const char *path);
fsa_status fsa_dc_make_dirs(const char *path);
/* A target directory: checked like the root, and never a symbolic link
 * (CACHE_IO). The library makes target directories itself; a link would lead
 * lookups, and the deletes of verify and prune, into a directory whose
 * parents the cache never checked. */
fsa_status fsa_dc_check_target_dir(const char *path, fsa_status missing);
/* <root>/v1/<target>, checked by fsa_dc_check_target_dir; NOT_FOUND when
 * absent and not created. */
fsa_status fsa_dc_target_dir(char **out, const fsa_disk_cache *dc, const char *target, int create);

typedef struct fsa_dc_names {
    char **v;
    size_t n, cap;
} fsa_dc_names;

void fsa_dc_names_free(fsa_dc_names *l);
/* The names in a directory, sorted so walks are deterministic. NOT_FOUND when
 * the directory is gone. */
fsa_status fsa_dc_list_names(fsa_dc_names *out, const char *dir);

/* ------------------------------------------------------------ one file (disk_files.c) */

typedef struct fsa_dc_raw_file {
    uint8_t *data;
    size_t size;
    struct stat sb; /* of what was judged, for a safe delete */
} fsa_dc_raw_file;

/* The bytes of one entry file. OK with *bad set: the file is there but cannot
 * be one of our entries (not regular, another owner, impossible size, a
 * symlink, unreadable). NOT_FOUND: no such file. With keep_atime the read
 * leaves the access time (prune's record of use) as it was: O_NOATIME where
 * permitted, else, when keep_atime is FSA_DC_RESTORE_ATIME, the old time put
 * back. */
#define FSA_DC_NOATIME 1
#define FSA_DC_RESTORE_ATIME 2
fsa_status fsa_dc_read_raw(fsa_dc_raw_file *rf, const char *path, int *bad, int keep_atime);

/* Deletes the file at `path` only if it is the one `judged` describes (device
 * and inode; with times_too also size and modification time). unlink by name
 * cannot promise that the file checked is the file deleted (a writer may
 * rename a good entry into place between the two), so the file is moved
 * aside under a temporary name of this process and deleted there only if it
 * is the judged one; another file moved aside is put back, never over a newer
 * one. Returns 0 deleted (or gone already), 1 kept (it was replaced), -1 on an
 * error (errno). */
int fsa_dc_unlink_if_unchanged(const char *path, const struct stat *judged, int times_too);
/* Counts a bad entry and deletes it, but only if the path still names the
 * file that was judged: a writer may have renamed a good entry over it. A
 * directory is removed only when empty. Returns NULL when the path is gone,
 * else why it was kept (a static string). */
const char *fsa_dc_discard_bad(const fsa_disk_cache *dc, const char *path, const struct stat *judged,
                               uint64_t *counter);

/* ------------------------------------------------------------ entry format (disk_entry.c) */

typedef struct fsa_dc_entry_view {
    const char *key_text;
    uint32_t key_len;
    const char *names;
    uint32_t names_len;
    const uint8_t *payload;
    uint64_t payload_len;
    const uint8_t *key_digest;
} fsa_dc_entry_view;

/* The largest file that can be an entry. */
uint64_t fsa_dc_max_entry_size(void);

/* 1 when the bytes are a whole, self-consistent entry: header, lengths that
 * add up to the file size exactly, key digest of the stored key text,
 * entry-names checksum and payload checksum. Which key it is for is the caller's check. */
int fsa_dc_parse_entry(fsa_dc_entry_view *v, const uint8_t *d, size_t size);

/* 1 when the bytes begin with the entry magic and a format version other
 * than this library's: another library's entry, which this one can neither
 * use nor judge (*version_out says which). */
int fsa_dc_foreign_format(const uint8_t *d, size_t size, uint32_t *version_out);

/* Copies a parsed entry out of the file's bytes. */
fsa_status fsa_dc_entry_from_view(fsa_disk_entry *out, const fsa_dc_entry_view *v);

/* 1 when the digest's hex form is `hex`. */
int fsa_dc_digest_is_hex(const uint8_t digest[16], const char *hex);

/* Everything before the payload: header, key text, entry names. */
fsa_status fsa_dc_build_head(uint8_t **out, size_t *out_len, const fsa_kernel_key *key, const char *names,
                             const void *cubin, size_t cubin_size);

#endif
