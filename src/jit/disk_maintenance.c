/* Maintenance of the disk cache: list, verify and prune walk every entry of
 * every target directory. */
#include "disk_cache_internal.h"

#include "base/status_internal.h"
#include "base/util.h"
#include "kernel_key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STAGE FSA_DC_STAGE
#define HEX_LEN FSA_DC_HEX_LEN
#define LOCK_MAX_AGE_S FSA_DC_LOCK_DEBRIS_AGE_S

/* Called for every file of every target directory; set *stop to end the walk. */
typedef fsa_status (*walk_fn)(void *ctx, const char *dir, const char *target, const char *fname, int *stop);

static fsa_status walk_target(const char *dir, const char *target, walk_fn fn, void *ctx, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_dc_names files = {0};
    st = fsa_dc_list_names(&files, dir);
    if (st == FSA_STATUS_NOT_FOUND) { /* removed meanwhile */
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    for (size_t i = 0; i < files.n && !*stop; i++) FSA_CHECK(fn(ctx, dir, target, files.v[i], stop));
cleanup:
    fsa_dc_names_free(&files);
    return st;
}

static fsa_status walk_cache(const fsa_disk_cache *dc, walk_fn fn, void *ctx)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_dc_names targets = {0};
    char *dir = NULL;
    int stop = 0;
    st = fsa_dc_list_names(&targets, dc->v1);
    if (st == FSA_STATUS_NOT_FOUND) { /* nothing was ever cached */
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    for (size_t i = 0; i < targets.n && !stop; i++) {
        struct stat sb;
        free(dir);
        dir = fsa_dc_path_join(dc->v1, targets.v[i]);
        FSA_CHECK_ALLOC(dir, STAGE);
        if (!fsa_dc_safe_component(targets.v[i])) continue;
        if (lstat(dir, &sb) != 0) {
            /* Removed meanwhile; any other error (v1 that cannot be searched) hides what is there. */
            if (errno == ENOENT) continue;
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot stat %s: %s", dir, strerror(errno));
        }
        /* A link to a directory is refused, as lookups and publishes refuse
         * it; any other file is not a target directory. */
        if (S_ISLNK(sb.st_mode) && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) continue;
        if (!S_ISDIR(sb.st_mode)) continue;
        FSA_CHECK(fsa_dc_check_target_dir(dir, FSA_STATUS_CACHE_IO));
        FSA_CHECK(walk_target(dir, targets.v[i], fn, ctx, &stop));
    }
cleanup:
    fsa_dc_names_free(&targets);
    free(dir);
    return st;
}

/* An entry file: a kernel's cubin or a tuning record (*record 1, where
 * record is not NULL), each named "<name>.<hex>.<suffix>". */
static int split_entry_file(const char *fname, size_t *name_len, char hex[HEX_LEN + 1], int *record)
{
    const int cubin = fsa_dc_split_key_file(fname, FSA_DC_CUBIN_SUFFIX, name_len, hex);
    const int tune = !cubin && fsa_dc_split_key_file(fname, FSA_DC_RECORD_SUFFIX, name_len, hex);
    if (record != NULL) *record = tune;
    return cubin || tune;
}

typedef struct list_ctx {
    fsa_cache_visit_fn visit;
    void *user;
} list_ctx;

static fsa_status list_one(void *p, const char *dir, const char *target, const char *fname, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    list_ctx *c = p;
    char hex[HEX_LEN + 1], *path = NULL, *name = NULL;
    size_t name_len;
    struct stat sb;
    int record;
    if (!split_entry_file(fname, &name_len, hex, &record)) goto cleanup;
    path = fsa_dc_path_join(dir, fname);
    name = fsa_dc_dup_n(fname, name_len);
    FSA_CHECK_ALLOC(path, STAGE);
    FSA_CHECK_ALLOC(name, STAGE);
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) goto cleanup; /* removed meanwhile */
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot stat %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) goto cleanup; /* not an entry */
    fsa_cache_entry_info info = {path, name, target, (uint64_t)sb.st_size, (int64_t)sb.st_mtime, 1, 0, 0, record};
    if (c->visit != NULL && c->visit(&info, c->user) != 0) *stop = 1;
cleanup:
    free(path);
    free(name);
    return st;
}

fsa_status fsa_disk_cache_list(fsa_disk_cache *dc, fsa_cache_visit_fn visit, void *user)
{
    fsa_status st = FSA_STATUS_OK;
    list_ctx c = {visit, user};
    if (dc == NULL) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache list: NULL cache");
    FSA_CHECK(walk_cache(dc, list_one, &c));
cleanup:
    return st;
}

typedef struct verify_ctx {
    const fsa_disk_cache *dc;
    fsa_disk_check_fn check;
    void *check_user;
    fsa_cache_visit_fn visit;
    void *user;
    uint64_t bad;
} verify_ctx;

/* The entry file's verdict: FSA_DISK_CHECK_BAD unless it is intact, of its
 * directory's target (another target's key never matches a lookup there:
 * the entry could never be used), for a kernel one whose key gives the file's
 * readable name (a lookup builds the file name from the key: an entry renamed,
 * or a record's text under a kernel's name, is never read) and, for a kernel
 * with a check function, passes it or cannot be checked (a record is no image
 * to load). A record's key text is the tuner's: its digest alone ties it to
 * the file name. */
static fsa_status judge_entry(int *verdict, const verify_ctx *c, const fsa_dc_raw_file *rf, const char *hex,
                              const char *name, size_t name_len, const char *target, const char *path, int record)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_disk_entry e = {0};
    fsa_dc_entry_view v = {0};
    int intact = fsa_dc_parse_entry(&v, rf->data, rf->size) && fsa_dc_digest_is_hex(v.key_digest, hex) &&
                 fsa_key_text_names_target(v.key_text, v.key_len, target) &&
                 (record || fsa_key_text_fits_name(v.key_text, v.key_len, name, name_len));
    *verdict = intact ? FSA_DISK_CHECK_GOOD : FSA_DISK_CHECK_BAD;
    if (intact && c->check != NULL && !record) {
        FSA_CHECK(fsa_dc_entry_from_view(&e, &v));
        *verdict = c->check(&e, target, path, c->check_user);
    }
cleanup:
    fsa_disk_entry_free(&e);
    return st;
}

static fsa_status verify_one(void *p, const char *dir, const char *target, const char *fname, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    verify_ctx *c = p;
    fsa_dc_raw_file rf = {0};
    char hex[HEX_LEN + 1], *path = NULL, *name = NULL;
    size_t name_len;
    int bad = 0, verdict = FSA_DISK_CHECK_BAD, record;
    uint32_t version = 0;
    if (!split_entry_file(fname, &name_len, hex, &record)) goto cleanup;
    path = fsa_dc_path_join(dir, fname);
    name = fsa_dc_dup_n(fname, name_len);
    FSA_CHECK_ALLOC(path, STAGE);
    FSA_CHECK_ALLOC(name, STAGE);
    /* Reading every entry must not make them all look just used to prune. */
    st = fsa_dc_read_raw(&rf, path, &bad, c->dc->read_only ? FSA_DC_NOATIME : FSA_DC_RESTORE_ATIME);
    if (st == FSA_STATUS_NOT_FOUND) { /* removed meanwhile */
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    /* Another library version's entry: not this one's to judge or delete. */
    if (!bad && fsa_dc_foreign_format(rf.data, rf.size, &version)) goto cleanup;
    if (!bad) FSA_CHECK(judge_entry(&verdict, c, &rf, hex, fname, name_len, target, path, record));
    int good = verdict != FSA_DISK_CHECK_BAD;
    int deleted = !good && fsa_dc_discard_bad(c->dc, path, &rf.sb, &c->bad) == NULL;
    /* GOOD from the check function: it judged the entry (loaded it); without one, only the disk was read. */
    int checked = c->check != NULL && !record && verdict == FSA_DISK_CHECK_GOOD;
    fsa_cache_entry_info info = {path, name, target, (uint64_t)rf.sb.st_size, (int64_t)rf.sb.st_mtime,
                                 good, deleted, checked, record};
    if (c->visit != NULL && c->visit(&info, c->user) != 0) *stop = 1;
cleanup:
    free(rf.data);
    free(path);
    free(name);
    return st;
}

fsa_status fsa_disk_cache_verify(fsa_disk_cache *dc, fsa_disk_check_fn check, void *check_user,
                                 fsa_cache_visit_fn visit, void *user, uint64_t *bad_out)
{
    fsa_status st = FSA_STATUS_OK;
    verify_ctx c = {dc, check, check_user, visit, user, 0};
    if (dc == NULL) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache verify: NULL cache");
    FSA_CHECK(walk_cache(dc, verify_one, &c));
cleanup:
    if (bad_out != NULL) *bad_out = c.bad;
    return st;
}

typedef struct prune_item {
    char *path;
    uint64_t bytes;
    int64_t used_ns; /* max(atime, mtime), each as fsa_dc_use_time_ns ranks it */
    struct stat sb;  /* as scanned: only that file is deleted */
} prune_item;

typedef struct prune_file_id {
    dev_t dev;
    ino_t ino;
} prune_file_id;

typedef struct prune_ctx {
    time_t now;
    prune_item *items;
    size_t n, cap;
    prune_file_id *temps; /* the temporary files counted in total: a writer may rename one over an entry */
    size_t n_temps, cap_temps;
    uint64_t total, removed;
    uint64_t kept;      /* entries that could not be deleted */
    char first_kept[512]; /* why, for the error message */
} prune_ctx;

static void prune_failed(prune_ctx *c, const char *path, const char *why)
{
    if (c->kept++ == 0) snprintf(c->first_kept, sizeof c->first_kept, "cannot delete %s: %s", path, why);
}

/* A lock file nobody holds and nobody touched for an hour. Taking the lock
 * first keeps a current holder's file; a process that opened it just before
 * the unlink can at worst compile a kernel twice. 1 removed, 0 not stale (or
 * gone), -1 stale but the unlink failed (errno says why). */
static int remove_stale_lock(const char *path, time_t now)
{
    struct stat sb;
    int removed = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    /* One dated ahead of this clock cannot be judged by age. */
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
        (sb.st_mtime < now - LOCK_MAX_AGE_S || sb.st_mtime > now + FSA_DC_CLOCK_SKEW_S) &&
        flock(fd, LOCK_EX | LOCK_NB) == 0)
        removed = unlink(path) == 0 ? 1 : errno == ENOENT ? 0 : -1;
    const int e = errno;
    close(fd);
    errno = e;
    return removed;
}

static fsa_status prune_keep(prune_ctx *c, char *path, const struct stat *sb)
{
    fsa_status st = FSA_STATUS_OK;
    prune_item *v = fsa_array_room(c->items, &c->cap, c->n, sizeof *v, 64);
    FSA_CHECK_ALLOC(v, STAGE);
    c->items = v;
    /* A file dated ahead ranks as unused (the oldest) rather than as used
     * forever; a hit since then records its use (disk_cache.c: note_use). */
    int64_t a = fsa_dc_use_time_ns(sb->st_atim, c->now), m = fsa_dc_use_time_ns(sb->st_mtim, c->now);
    c->items[c->n++] = (prune_item){path, (uint64_t)sb->st_size, a > m ? a : m, *sb};
    c->total += (uint64_t)sb->st_size;
cleanup:
    return st;
}

/* Counts a temporary file that stays (a live writer's, or one that cannot be deleted). */
static fsa_status prune_count_temp(prune_ctx *c, const struct stat *sb)
{
    fsa_status st = FSA_STATUS_OK;
    prune_file_id *v = fsa_array_room(c->temps, &c->cap_temps, c->n_temps, sizeof *v, 16);
    FSA_CHECK_ALLOC(v, STAGE);
    c->temps = v;
    c->temps[c->n_temps++] = (prune_file_id){sb->st_dev, sb->st_ino};
    c->total += (uint64_t)sb->st_size;
cleanup:
    return st;
}

/* Whether the file is a temporary file the scan counted. */
static int prune_counted_temp(const prune_ctx *c, const struct stat *sb)
{
    for (size_t i = 0; i < c->n_temps; i++)
        if (c->temps[i].dev == sb->st_dev && c->temps[i].ino == sb->st_ino) return 1;
    return 0;
}

/* Removes what stands at a key path that is no regular file: a link or FIFO,
 * a directory only when empty. 1 when it went. */
static int remove_non_file(const char *path, const struct stat *sb)
{
    return (S_ISDIR(sb->st_mode) ? rmdir(path) : unlink(path)) == 0;
}

static fsa_status prune_scan(void *p, const char *dir, const char *target, const char *fname, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    prune_ctx *c = p;
    char hex[HEX_LEN + 1], *path = fsa_dc_path_join(dir, fname);
    size_t name_len;
    struct stat sb;
    (void)target;
    (void)stop;
    FSA_CHECK_ALLOC(path, STAGE);
    if (lstat(path, &sb) != 0) {
        /* ENOENT: removed meanwhile. Another error is reported for the cache's own names only (an entry, a
         * lock or a temporary file): other files in the directory are not the cache's to judge. */
        const int e = errno;
        const int ours = split_entry_file(fname, &name_len, hex, NULL) ||
                         fsa_dc_split_key_file(fname, ".lock", &name_len, hex) || fsa_dc_is_temp_name(fname);
        if (e != ENOENT && ours) prune_failed(c, path, strerror(e));
        goto cleanup;
    }
    /* Tuning records rank with the cubins: they take room too, and those of an older key format
     * (never read again) would otherwise stay forever. */
    if (split_entry_file(fname, &name_len, hex, NULL)) {
        if (S_ISREG(sb.st_mode)) {
            FSA_CHECK(prune_keep(c, path, &sb));
            path = NULL; /* the list owns it */
        } else if (remove_non_file(path, &sb)) {
            /* Not an entry, whatever the size limit: a link or FIFO goes, a
             * directory only when empty (its contents are not ours to judge). */
            c->removed++;
        } else {
            prune_failed(c, path, S_ISDIR(sb.st_mode) && errno == ENOTEMPTY ? "a directory that is not empty"
                                                                            : strerror(errno));
        }
    } else if (fsa_dc_split_key_file(fname, ".lock", &name_len, hex)) {
        /* No lock can be had on a link, FIFO or directory (disk_lock.c): it
         * goes too. A stale lock or such a thing that cannot go (a directory
         * with files in it) is reported; a held or fresh lock stays quietly. */
        const int r = S_ISREG(sb.st_mode) ? remove_stale_lock(path, c->now) : remove_non_file(path, &sb) ? 1 : -1;
        if (r > 0) c->removed++;
        else if (r < 0 && errno != ENOENT) prune_failed(c, path, strerror(errno));
    } else if (fsa_dc_is_temp_name(fname) && S_ISREG(sb.st_mode)) {
        /* A live writer's file takes disk space too: counted, so that the
         * entries shrink to make room for it; so does a dead writer's that cannot be deleted. */
        const int r = fsa_dc_remove_temp_debris(path, fname, c->now);
        const int e = errno;
        if (r > 0) c->removed++;
        else FSA_CHECK(prune_count_temp(c, &sb));
        if (r < 0) prune_failed(c, path, strerror(e));
    }
cleanup:
    free(path);
    return st;
}

static int cmp_prune_item(const void *a, const void *b)
{
    const prune_item *x = a, *y = b;
    if (x->used_ns != y->used_ns) return x->used_ns < y->used_ns ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* Oldest use first, until the entries fit; one that cannot be deleted is
 * passed over (and reported), not a reason to stop. */
static void prune_entries(prune_ctx *c, uint64_t max_bytes)
{
    if (c->n > 1) qsort(c->items, c->n, sizeof *c->items, cmp_prune_item);
    for (size_t i = 0; i < c->n && c->total > max_bytes; i++) {
        const prune_item *it = &c->items[i];
        struct stat now;
        if (lstat(it->path, &now) != 0) { /* gone already */
            c->total -= it->bytes;
            continue;
        }
        /* A writer renamed a fresh entry over the one ranked: keep it. Its bytes count instead of the
         * ranked one's, once: the scan counted them already if it was a live writer's temporary file then. */
        const int r = fsa_dc_unlink_if_unchanged(it->path, &it->sb, 1);
        if (r == 1) {
            c->total -= it->bytes;
            if (lstat(it->path, &now) == 0 && S_ISREG(now.st_mode) && !prune_counted_temp(c, &now))
                c->total += (uint64_t)now.st_size;
            continue;
        }
        if (r != 0) {
            prune_failed(c, it->path, strerror(errno));
            continue;
        }
        c->total -= it->bytes;
        c->removed++;
    }
}

fsa_status fsa_disk_cache_prune(fsa_disk_cache *dc, uint64_t max_bytes, uint64_t *removed_out,
                                uint64_t *bytes_left_out)
{
    fsa_status st = FSA_STATUS_OK;
    prune_ctx c = {0};
    c.now = time(NULL);
    c.total = UINT64_MAX; /* unknown until the scan is whole */
    if (dc == NULL) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache prune: NULL cache");
    if (dc->read_only) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache %s is read-only: cannot prune", dc->root);
    c.total = 0;
    st = walk_cache(dc, prune_scan, &c);
    if (st != FSA_STATUS_OK) {
        c.total = UINT64_MAX; /* a part of the cache was never counted */
        goto cleanup;
    }
    prune_entries(&c, max_bytes);
    if (c.kept > 0)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "%llu file%s kept; the first: %s", (unsigned long long)c.kept,
                 c.kept == 1 ? "" : "s", c.first_kept);
cleanup:
    if (removed_out != NULL) *removed_out = c.removed;
    if (bytes_left_out != NULL) *bytes_left_out = c.total;
    for (size_t i = 0; i < c.n; i++) free(c.items[i].path);
    free(c.items);
    free(c.temps);
    return st;
}
