/* The on-disk kernel cache: opening it, looking entries up and publishing
 * them. Layout, entry format and publish protocol are in cache/README.md.
 * The handle is immutable after open, so any number of threads and
 * processes may use the same cache at once. */
#include "disk_cache_internal.h"

#include "base/status_internal.h"
#include "base/util.h"

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
#define MAX_TEXT FSA_DC_MAX_TEXT
#define MAX_PAYLOAD FSA_DC_MAX_PAYLOAD

/* ------------------------------------------------------------ open / close */

fsa_status fsa_disk_cache_open(fsa_disk_cache **out, const char *root, int read_only)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_disk_cache *dc = NULL;
    if (out == NULL || root == NULL) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache open: NULL argument");
    *out = NULL;
    FSA_CHECK_ARG(*root != '\0', STAGE, "cache directory is an empty string");
    dc = calloc(1, sizeof *dc);
    FSA_CHECK_ALLOC(dc, STAGE);
    dc->read_only = read_only != 0;
    if (root[0] == '/') {
        dc->root = strdup(root);
    } else {
        /* Relative: fixed to the working directory of now, where the checks
         * below are made; a later chdir must not move the cache under them. */
        char *cwd = getcwd(NULL, 0);
        if (cwd == NULL)
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache directory %s is relative and the working directory is "
                     "unknown: %s", root, strerror(errno));
        dc->root = fsa_dc_path_join(cwd, root);
        free(cwd);
    }
    FSA_CHECK_ALLOC(dc->root, STAGE);
    dc->v1 = fsa_dc_path_join(dc->root, FSA_CACHE_LAYOUT);
    FSA_CHECK_ALLOC(dc->v1, STAGE);
    /* The root is checked before anything is created inside it. */
    if (!dc->read_only) FSA_CHECK(fsa_dc_make_dirs(dc->root));
    FSA_CHECK(fsa_dc_check_dir(dc->root, FSA_STATUS_CACHE_IO));
    /* v1 is made by the first write (fsa_dc_target_dir), not here: listing,
     * verifying or pruning a cache that holds nothing creates nothing, and
     * works where the root cannot be written. Read-only, it must exist. */
    struct stat sb;
    if (dc->read_only || stat(dc->v1, &sb) == 0 || errno != ENOENT)
        FSA_CHECK(fsa_dc_check_dir(dc->v1, FSA_STATUS_CACHE_IO));
    /* The root names the cache, whether v1 exists yet or not. */
    if (stat(dc->root, &sb) == 0) {
        dc->id[0] = (uint64_t)sb.st_dev;
        dc->id[1] = (uint64_t)sb.st_ino;
    }
    *out = dc;
    dc = NULL;
cleanup:
    fsa_disk_cache_close(dc);
    return st;
}

void fsa_disk_cache_close(fsa_disk_cache *dc)
{
    if (dc == NULL) return;
    free(dc->root);
    free(dc->v1);
    free(dc);
}

const char *fsa_disk_cache_root(const fsa_disk_cache *dc) { return dc ? dc->root : ""; }

void fsa_disk_cache_identity(const fsa_disk_cache *dc, uint64_t id[2])
{
    id[0] = dc ? dc->id[0] : 0;
    id[1] = dc ? dc->id[1] : 0;
}

int fsa_disk_cache_read_only(const fsa_disk_cache *dc) { return dc ? dc->read_only : 1; }

char *fsa_disk_cache_entry_path(const fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target)
{
    if (dc == NULL || key == NULL || key->name == NULL || !fsa_dc_safe_component(target)) return NULL;
    char *dir = fsa_dc_path_join(dc->v1, target);
    char *path = dir ? fsa_dc_key_file_path(dir, key, FSA_DC_CUBIN_SUFFIX) : NULL;
    free(dir);
    return path;
}

void fsa_disk_entry_free(fsa_disk_entry *e)
{
    if (e == NULL) return;
    free(e->cubin);
    free(e->entry_names);
    free(e->key_text);
    memset(e, 0, sizeof *e);
}

typedef struct lookup_req {
    const fsa_disk_cache *dc;
    const fsa_kernel_key *key;
    int any_nvrtc;
    int max_nvrtc_major; /* any_nvrtc: skip entries of a newer NVRTC major version (0: none skipped) */
    uint64_t *corrupt_out;
} lookup_req;

static int key_text_matches(const fsa_dc_entry_view *v, const lookup_req *r)
{
    if (!r->any_nvrtc)
        return strlen(r->key->text) == v->key_len && memcmp(r->key->text, v->key_text, v->key_len) == 0;
    char *text = fsa_dc_dup_n(v->key_text, v->key_len);
    int same = text != NULL && fsa_key_text_equal_except_nvrtc(r->key->text, text) &&
               (r->max_nvrtc_major == 0 || fsa_key_text_nvrtc_version(text) / 1000 <= r->max_nvrtc_major);
    free(text);
    return same;
}

/* Reads one entry file named with `file_hex`. OK: *out filled, *sb_out its
 * status. NOT_FOUND: absent, bad (counted and deleted), an entry of another
 * format version (another library's: left alone, not counted) or, with
 * any_nvrtc, an intact entry of another key (left alone). */
static fsa_status load_entry(fsa_disk_entry *out, struct stat *sb_out, const lookup_req *r, const char *path,
                             const char *file_hex)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_dc_raw_file rf = {0};
    fsa_dc_entry_view v = {0};
    int bad = 0;
    uint32_t version = 0;
    /* Writable: the access time records hits only (note_use), not every read
     * of a candidate. Read-only: the kernel's own atime update, if any, is
     * the only record of use, and no extra open is spent. */
    FSA_CHECK(fsa_dc_read_raw(&rf, path, &bad, r->dc->read_only ? 0 : FSA_DC_NOATIME));
    if (!bad && fsa_dc_foreign_format(rf.data, rf.size, &version))
        FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "cache entry %s has format version %u, not %u; left alone", path,
                 (unsigned)version, (unsigned)FSA_CACHE_FORMAT_VERSION);
    if (!bad && (!fsa_dc_parse_entry(&v, rf.data, rf.size) || !fsa_dc_digest_is_hex(v.key_digest, file_hex))) bad = 1;
    if (!bad && !key_text_matches(&v, r)) {
        /* Exact: the file is under this key's digest yet holds another key. */
        if (r->any_nvrtc) FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "%s is for another key", path);
        bad = 1;
    }
    if (bad) {
        const char *kept = fsa_dc_discard_bad(r->dc, path, &rf.sb, r->corrupt_out);
        FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "cache entry %s is corrupt; %s%s%s", path,
                 kept ? "not deleted (" : "deleted", kept ? kept : "", kept ? ")" : "");
    }
    FSA_CHECK(fsa_dc_entry_from_view(out, &v));
    *sb_out = rf.sb;
cleanup:
    free(rf.data);
    return st;
}

/* Records a hit in the entry's access time, by which prune ranks: only when
 * the last recorded use is over FSA_DC_USE_RECORD_S old (or dated ahead), so
 * that hits stay reads; never in a read-only cache, which writes nothing.
 * A failure changes nothing about the hit. */
static void note_use(const fsa_disk_cache *dc, const char *path, const struct stat *sb)
{
    const struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    time_t now = time(NULL);
    if (dc->read_only || (sb->st_atime >= now - FSA_DC_USE_RECORD_S && sb->st_atime <= now + FSA_DC_CLOCK_SKEW_S))
        return;
    (void)utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
}

/* Newest file wins; on a tie, the exact key. */
static int newer(const struct stat *a, int a_exact, const struct stat *b, int b_exact)
{
    int64_t ta = fsa_dc_ts_ns(a->st_mtim), tb = fsa_dc_ts_ns(b->st_mtim);
    return ta != tb ? ta > tb : a_exact > b_exact;
}

static fsa_status lookup_any_nvrtc(fsa_disk_entry *out, const lookup_req *r, const char *dir)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_dc_names names = {0};
    char *path = NULL, *best_path = NULL;
    fsa_disk_entry best = {0}, cand = {0};
    struct stat best_sb = {0}, sb = {0};
    int have = 0, best_exact = 0;
    size_t want = strlen(r->key->name);
    FSA_CHECK(fsa_dc_list_names(&names, dir));
    for (size_t i = 0; i < names.n; i++) {
        char hex[HEX_LEN + 1];
        size_t len;
        if (!fsa_dc_split_key_file(names.v[i], FSA_DC_CUBIN_SUFFIX, &len, hex) || len != want ||
            memcmp(names.v[i], r->key->name, len) != 0)
            continue;
        free(path);
        path = fsa_dc_path_join(dir, names.v[i]);
        FSA_CHECK_ALLOC(path, STAGE);
        fsa_status s = load_entry(&cand, &sb, r, path, hex);
        if (s == FSA_STATUS_NOT_FOUND) continue;
        FSA_CHECK(s);
        int exact = strcmp(hex, r->key->hex) == 0;
        if (!have || newer(&sb, exact, &best_sb, best_exact)) {
            fsa_disk_entry_free(&best);
            best = cand;
            best_sb = sb;
            best_exact = exact;
            have = 1;
            memset(&cand, 0, sizeof cand);
            free(best_path);
            best_path = path;
            path = NULL;
        }
        fsa_disk_entry_free(&cand);
    }
    if (!have) FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "no cache entry for %s in %s", r->key->name, dir);
    note_use(r->dc, best_path, &best_sb);
    *out = best;
    memset(&best, 0, sizeof best);
cleanup:
    fsa_disk_entry_free(&best);
    fsa_disk_entry_free(&cand);
    fsa_dc_names_free(&names);
    free(path);
    free(best_path);
    return st;
}

static fsa_status lookup(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target,
                         int any_nvrtc, int max_nvrtc_major, uint64_t *corrupt_out, const char *suffix)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *path = NULL;
    lookup_req r = {dc, key, any_nvrtc, max_nvrtc_major, corrupt_out};
    struct stat sb;
    if (out != NULL) memset(out, 0, sizeof *out);
    if (out == NULL || dc == NULL || key == NULL || key->text == NULL || key->name == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache lookup: NULL argument");
    FSA_CHECK(fsa_dc_target_dir(&dir, dc, target, 0));
    if (any_nvrtc) {
        FSA_CHECK(lookup_any_nvrtc(out, &r, dir));
        goto cleanup;
    }
    path = fsa_dc_key_file_path(dir, key, suffix);
    FSA_CHECK_ALLOC(path, STAGE);
    FSA_CHECK(load_entry(out, &sb, &r, path, key->hex));
    note_use(dc, path, &sb);
cleanup:
    free(dir);
    free(path);
    return st;
}

fsa_status fsa_disk_cache_lookup(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                 const char *target, int any_nvrtc, uint64_t *corrupt_out)
{
    return lookup(out, dc, key, target, any_nvrtc, 0, corrupt_out, FSA_DC_CUBIN_SUFFIX);
}

fsa_status fsa_disk_cache_lookup_compatible(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                            const char *target, int max_nvrtc_major, uint64_t *corrupt_out)
{
    return lookup(out, dc, key, target, 1, max_nvrtc_major, corrupt_out, FSA_DC_CUBIN_SUFFIX);
}

fsa_status fsa_disk_cache_lookup_record(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                        const char *target, uint64_t *corrupt_out)
{
    return lookup(out, dc, key, target, 0, 0, corrupt_out, FSA_DC_RECORD_SUFFIX);
}

/* ------------------------------------------------------------ publishing */

static fsa_status write_all(int fd, const void *data, size_t n, const char *path)
{
    fsa_status st = FSA_STATUS_OK;
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot write %s: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
cleanup:
    return st;
}

static fsa_status open_temp(int *fd_out, char **path_out, const char *dir, const fsa_kernel_key *key)
{
    fsa_status st = FSA_STATUS_OK;
    char *path = NULL;
    for (int attempt = 0; attempt < 16; attempt++) {
        fsa_strbuf b = {0};
        fsa_strbuf_appendf(&b, "%s/.%s.%s.tmp.%ld.%016llx", dir, key->name, key->hex, (long)getpid(),
                           (unsigned long long)fsa_temp_suffix());
        path = fsa_strbuf_take(&b);
        FSA_CHECK_ALLOC(path, STAGE);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0) {
            *fd_out = fd;
            *path_out = path;
            path = NULL;
            goto cleanup;
        }
        if (errno != EEXIST)
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot create %s: %s", path, strerror(errno));
        free(path);
        path = NULL;
    }
    FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot create a unique temporary file in %s", dir);
cleanup:
    free(path);
    return st;
}

/* Makes the rename itself durable. */
static fsa_status sync_dir(const char *dir)
{
    fsa_status st = FSA_STATUS_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot open directory %s: %s", dir, strerror(errno));
    /* EINVAL: this file system cannot sync directories; the rename stands. */
    if (fsync(fd) != 0 && errno != EINVAL)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot sync directory %s: %s", dir, strerror(errno));
cleanup:
    if (fd >= 0) close(fd);
    return st;
}

static fsa_status check_publish_args(const fsa_disk_cache *dc, const fsa_kernel_key *key, const void *cubin,
                                     size_t cubin_size, const char *names)
{
    fsa_status st = FSA_STATUS_OK;
    if (dc == NULL || key == NULL || key->text == NULL || key->name == NULL || cubin == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache publish: NULL argument");
    if (dc->read_only) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache %s is read-only", dc->root);
    size_t key_len = strlen(key->text);
    FSA_CHECK_ARG(key_len > 0 && key_len < MAX_TEXT, STAGE, "key text of %s is empty or too long", key->name);
    FSA_CHECK_ARG(strlen(names) < MAX_TEXT, STAGE, "entry names of %s are too long", key->name);
    FSA_CHECK_ARG(cubin_size > 0 && cubin_size <= MAX_PAYLOAD, STAGE, "cubin of %s has %zu bytes", key->name,
                  cubin_size);
cleanup:
    return st;
}

/* Deletes the temporary files this key's killed writers left in dir, so
 * they do not wait for a prune. Best effort: a failure here changes nothing
 * about the publish. */
static void remove_key_debris(const char *dir, const fsa_kernel_key *key)
{
    fsa_dc_names names = {0};
    fsa_strbuf b = {0};
    fsa_strbuf_appendf(&b, ".%s.%s.tmp.", key->name, key->hex);
    char *prefix = fsa_strbuf_take(&b);
    time_t now = time(NULL);
    if (prefix == NULL || fsa_dc_list_names(&names, dir) != FSA_STATUS_OK) {
        fsa_error_clear();
        free(prefix);
        return;
    }
    for (size_t i = 0; i < names.n; i++) {
        if (strncmp(names.v[i], prefix, strlen(prefix)) != 0) continue;
        char *path = fsa_dc_path_join(dir, names.v[i]);
        if (path != NULL) (void)fsa_dc_remove_temp_debris(path, names.v[i], now);
        free(path);
    }
    fsa_dc_names_free(&names);
    free(prefix);
}

static fsa_status publish(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target, const void *cubin,
                          size_t cubin_size, const char *entry_names, const char *suffix)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *tmp = NULL, *final_path = NULL;
    uint8_t *head = NULL;
    size_t head_len = 0;
    int fd = -1;
    const char *names = entry_names ? entry_names : "";
    FSA_CHECK(check_publish_args(dc, key, cubin, cubin_size, names));
    FSA_CHECK(fsa_dc_target_dir(&dir, dc, target, 1));
    remove_key_debris(dir, key);
    final_path = fsa_dc_key_file_path(dir, key, suffix);
    FSA_CHECK_ALLOC(final_path, STAGE);
    FSA_CHECK(fsa_dc_build_head(&head, &head_len, key, names, cubin, cubin_size));
    FSA_CHECK(open_temp(&fd, &tmp, dir, key));
    /* Held until after the rename: it tells cleaners (fsa_dc_remove_temp_debris)
     * that this file's writer is alive. A cleaner holds it only for a moment
     * (and leaves an empty young file alone); without flock they go by age. */
    (void)flock(fd, LOCK_EX);
    FSA_CHECK(write_all(fd, head, head_len, tmp));
    FSA_CHECK(write_all(fd, cubin, cubin_size, tmp));
    if (fsync(fd) != 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot sync %s: %s", tmp, strerror(errno));
    if (rename(tmp, final_path) != 0)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot rename %s to %s: %s", tmp, final_path, strerror(errno));
    free(tmp);
    tmp = NULL; /* it is the entry now */
    /* The bytes are synced: close has nothing left to report. */
    close(fd);
    fd = -1;
    FSA_CHECK(sync_dir(dir));
cleanup:
    if (fd >= 0) close(fd);
    if (tmp != NULL) (void)unlink(tmp);
    free(tmp);
    free(head);
    free(final_path);
    free(dir);
    return st;
}


fsa_status fsa_disk_cache_publish(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target,
                                  const void *cubin, size_t cubin_size, const char *entry_names)
{
    return publish(dc, key, target, cubin, cubin_size, entry_names, FSA_DC_CUBIN_SUFFIX);
}

fsa_status fsa_disk_cache_publish_record(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target,
                                         const char *record)
{
    return publish(dc, key, target, record, record ? strlen(record) : 0, "", FSA_DC_RECORD_SUFFIX);
}

char *fsa_disk_cache_record_path(const fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target)
{
    if (dc == NULL || key == NULL || key->name == NULL || !fsa_dc_safe_component(target)) return NULL;
    char *dir = fsa_dc_path_join(dc->v1, target);
    char *path = dir ? fsa_dc_key_file_path(dir, key, FSA_DC_RECORD_SUFFIX) : NULL;
    free(dir);
    return path;
}
