/* The on-disk kernel cache: layout, entry format and publish protocol are in
 * cache/README.md. The handle is immutable after open, so any number of
 * threads and processes may use the same cache at once. */
#include "disk_cache.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STAGE "disk-cache"

/* Entry header: magic, version, flags, payload length, payload checksum, key
 * digest, key-text length, entry-names length. */
#define HEADER_SIZE 64u
#define MAX_TEXT (64u * 1024u) /* key text and entry names are each shorter */
#define MAX_PAYLOAD ((uint64_t)1 << 30)
#define TEMP_MAX_AGE_S 3600 /* older temporary and lock files are debris */
#define HEX_LEN 32u

static const char k_magic[8] = {'F', 'S', 'A', 'C', 'U', 'B', 'I', 'N'};

struct fsa_disk_cache {
    char *root;
    char *v1; /* <root>/v1 */
    int read_only;
};

/* ------------------------------------------------------------ small helpers */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int64_t ts_ns(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

/* One path component that cannot climb out of the cache. */
static int safe_component(const char *s)
{
    if (s == NULL || *s == '\0' || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-'))
            return 0;
    return 1;
}

static char *path_join(const char *dir, const char *leaf)
{
    fsa_strbuf b = {0};
    size_t n = strlen(dir);
    fsa_strbuf_appendf(&b, "%s%s%s", dir, (n > 0 && dir[n - 1] == '/') ? "" : "/", leaf);
    return fsa_strbuf_take(&b);
}

static char *key_file_path(const char *dir, const fsa_kernel_key *key, const char *suffix)
{
    fsa_strbuf b = {0};
    fsa_strbuf_appendf(&b, "%s/%s.%s%s", dir, key->name, key->hex, suffix);
    return fsa_strbuf_take(&b);
}

/* 1 when fname is "<name>.<32 lower-case hex><suffix>"; gives the name's
 * length and the hex digits. */
static int split_key_file(const char *fname, const char *suffix, size_t *name_len, char hex[HEX_LEN + 1])
{
    size_t n = strlen(fname), s = strlen(suffix);
    if (n <= 1 + HEX_LEN + s || strcmp(fname + n - s, suffix) != 0) return 0;
    const char *h = fname + n - s - HEX_LEN;
    if (h[-1] != '.') return 0;
    for (size_t i = 0; i < HEX_LEN; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return 0;
    memcpy(hex, h, HEX_LEN);
    hex[HEX_LEN] = '\0';
    *name_len = n - s - HEX_LEN - 1;
    return 1;
}

/* ".<name>.<hex>.tmp.<pid>.<random>", as publish names them. */
static int is_temp_name(const char *fname) { return fname[0] == '.' && strstr(fname, ".tmp.") != NULL; }

static int digest_is_hex(const uint8_t digest[16], const char *hex)
{
    char h[HEX_LEN + 1];
    fsa_hex(h, digest, 16);
    return strcmp(h, hex) == 0;
}

/* ------------------------------------------------------------- directories */

/* Refuses a directory another user could plant entries in. `missing` is the
 * status for a directory that does not exist. */
static fsa_status check_dir(const char *path, fsa_status missing)
{
    fsa_status st = FSA_STATUS_OK;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        FSA_FAIL(e == ENOENT ? missing : FSA_STATUS_CACHE_IO, STAGE, "cannot use cache directory %s: %s",
                 path, strerror(e));
    }
    if (!S_ISDIR(sb.st_mode)) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "%s is not a directory", path);
    if (sb.st_uid != geteuid())
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "refusing cache directory %s: owned by uid %u, not by uid %u",
                 path, (unsigned)sb.st_uid, (unsigned)geteuid());
    if (sb.st_mode & 022)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "refusing cache directory %s: writable by other users (mode %04o)",
                 path, (unsigned)(sb.st_mode & 07777));
cleanup:
    return st;
}

static fsa_status make_dir(const char *path)
{
    fsa_status st = FSA_STATUS_OK;
    struct stat sb;
    /* EEXIST is fine; so is any error on a path that already is a directory
     * (EACCES or EROFS on a parent we only pass through). */
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot create directory %s: %s", path, strerror(e));
    }
cleanup:
    return st;
}

static fsa_status make_dirs(const char *path)
{
    fsa_status st = FSA_STATUS_OK;
    char *p = strdup(path);
    FSA_CHECK_ALLOC(p, STAGE);
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c != '\0') continue;
        char saved = *c;
        *c = '\0';
        FSA_CHECK(make_dir(p));
        *c = saved;
        if (saved == '\0') break;
    }
cleanup:
    free(p);
    return st;
}

/* <root>/v1/<target>, checked like the root; NOT_FOUND when absent and not
 * created. */
static fsa_status target_dir(char **out, const fsa_disk_cache *dc, const char *target, int create)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL;
    *out = NULL;
    if (!safe_component(target))
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "target \"%s\" is not a plain name", target ? target : "");
    dir = path_join(dc->v1, target);
    FSA_CHECK_ALLOC(dir, STAGE);
    if (create) FSA_CHECK(make_dir(dir));
    FSA_CHECK(check_dir(dir, FSA_STATUS_NOT_FOUND));
    *out = dir;
    dir = NULL;
cleanup:
    free(dir);
    return st;
}

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static void name_list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static fsa_status name_list_push(name_list *l, const char *s)
{
    fsa_status st = FSA_STATUS_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        char **v = realloc(l->v, cap * sizeof *v);
        FSA_CHECK_ALLOC(v, STAGE);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = strdup(s);
    FSA_CHECK_ALLOC(l->v[l->n], STAGE);
    l->n++;
cleanup:
    return st;
}

/* The names in a directory, sorted so walks are deterministic. NOT_FOUND when
 * the directory is gone. */
static fsa_status list_names(name_list *out, const char *dir)
{
    fsa_status st = FSA_STATUS_OK;
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (d == NULL) {
        int e = errno;
        FSA_FAIL(e == ENOENT ? FSA_STATUS_NOT_FOUND : FSA_STATUS_CACHE_IO, STAGE, "cannot read directory %s: %s",
                 dir, strerror(e));
    }
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        FSA_CHECK(name_list_push(out, de->d_name));
    }
    if (out->n > 1) qsort(out->v, out->n, sizeof *out->v, cmp_str);
cleanup:
    if (d != NULL) closedir(d);
    if (st != FSA_STATUS_OK) name_list_free(out);
    return st;
}

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
    dc->root = strdup(root);
    dc->v1 = path_join(root, FSA_CACHE_LAYOUT);
    FSA_CHECK_ALLOC(dc->root, STAGE);
    FSA_CHECK_ALLOC(dc->v1, STAGE);
    /* The root is checked before anything is created inside it. */
    if (!dc->read_only) FSA_CHECK(make_dirs(root));
    FSA_CHECK(check_dir(root, FSA_STATUS_CACHE_IO));
    if (!dc->read_only) FSA_CHECK(make_dir(dc->v1));
    FSA_CHECK(check_dir(dc->v1, FSA_STATUS_CACHE_IO));
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

int fsa_disk_cache_read_only(const fsa_disk_cache *dc) { return dc ? dc->read_only : 1; }

char *fsa_disk_cache_entry_path(const fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target)
{
    if (dc == NULL || key == NULL || key->name == NULL || !safe_component(target)) return NULL;
    char *dir = path_join(dc->v1, target);
    char *path = dir ? key_file_path(dir, key, ".cubin") : NULL;
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

/* ------------------------------------------------------------ reading */

typedef struct raw_file {
    uint8_t *data;
    size_t size;
    struct stat sb; /* of what was judged, for a safe delete */
} raw_file;

/* The bytes of one entry file. OK with *bad set: the file is there but cannot
 * be one of our entries (not regular, another owner, impossible size, a
 * symlink, unreadable). NOT_FOUND: no such file. */
static fsa_status read_raw(raw_file *rf, const char *path, int *bad)
{
    fsa_status st = FSA_STATUS_OK;
    /* O_NONBLOCK: a FIFO planted here must not hang the reader. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    *bad = 0;
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "no cache entry %s", path);
        /* A symlink, or a file of ours we may not read: unusable either way. */
        if ((e == ELOOP || e == EACCES) && lstat(path, &rf->sb) == 0) {
            *bad = 1;
            goto cleanup;
        }
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot open %s: %s", path, strerror(e));
    }
    if (fstat(fd, &rf->sb) != 0)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(rf->sb.st_mode) || rf->sb.st_uid != geteuid() || rf->sb.st_size < (off_t)HEADER_SIZE ||
        (uint64_t)rf->sb.st_size > HEADER_SIZE + 2 * (uint64_t)MAX_TEXT + MAX_PAYLOAD) {
        *bad = 1;
        goto cleanup;
    }
    rf->size = (size_t)rf->sb.st_size;
    rf->data = malloc(rf->size);
    FSA_CHECK_ALLOC(rf->data, STAGE);
    for (size_t got = 0; got < rf->size;) {
        ssize_t n = read(fd, rf->data + got, rf->size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot read %s: %s", path, strerror(errno));
        if (n == 0) { /* shrank under us: someone truncated it */
            *bad = 1;
            break;
        }
        got += (size_t)n;
    }
cleanup:
    if (fd >= 0) close(fd);
    return st;
}

typedef struct entry_view {
    const char *key_text;
    uint32_t key_len;
    const char *names;
    uint32_t names_len;
    const uint8_t *payload;
    uint64_t payload_len;
    const uint8_t *key_digest;
} entry_view;

/* 1 when the bytes are a whole, self-consistent entry: header, lengths that
 * add up to the file size exactly, key digest of the stored key text and
 * payload checksum. Which key it is for is the caller's check. */
static int parse_entry(entry_view *v, const uint8_t *d, size_t size)
{
    if (size < HEADER_SIZE || memcmp(d, k_magic, sizeof k_magic) != 0) return 0;
    if (get_u32(d + 8) != FSA_CACHE_FORMAT_VERSION || get_u32(d + 12) != 0) return 0;
    v->payload_len = get_u64(d + 16);
    v->key_digest = d + 40;
    v->key_len = get_u32(d + 56);
    v->names_len = get_u32(d + 60);
    if (v->key_len == 0 || v->key_len >= MAX_TEXT || v->names_len >= MAX_TEXT) return 0;
    if (v->payload_len == 0 || v->payload_len > MAX_PAYLOAD) return 0;
    if ((uint64_t)size != HEADER_SIZE + (uint64_t)v->key_len + v->names_len + v->payload_len) return 0;
    v->key_text = (const char *)d + HEADER_SIZE;
    v->names = v->key_text + v->key_len;
    v->payload = (const uint8_t *)v->names + v->names_len;
    /* Both texts are handed out as C strings. */
    if (memchr(v->key_text, '\0', v->key_len) || memchr(v->names, '\0', v->names_len)) return 0;
    uint8_t h[16];
    fsa_digest128(h, v->key_text, v->key_len);
    if (memcmp(h, v->key_digest, 16) != 0) return 0;
    fsa_digest128(h, v->payload, (size_t)v->payload_len);
    return memcmp(h, d + 24, 16) == 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p == NULL) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static fsa_status entry_from_view(fsa_disk_entry *out, const entry_view *v)
{
    fsa_status st = FSA_STATUS_OK;
    memset(out, 0, sizeof *out);
    out->cubin = malloc((size_t)v->payload_len);
    out->entry_names = dup_n(v->names, v->names_len);
    out->key_text = dup_n(v->key_text, v->key_len);
    if (out->cubin == NULL || out->entry_names == NULL || out->key_text == NULL) {
        fsa_disk_entry_free(out);
        FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, STAGE, "out of host memory");
    }
    memcpy(out->cubin, v->payload, (size_t)v->payload_len);
    out->cubin_size = (size_t)v->payload_len;
cleanup:
    return st;
}

/* Counts a bad entry and deletes it, but only if the path still names the
 * file that was judged: a writer may have renamed a good entry over it. */
static void discard_bad(const fsa_disk_cache *dc, const char *path, const struct stat *judged,
                        uint64_t *counter)
{
    struct stat now;
    if (counter != NULL) (*counter)++;
    if (dc->read_only) return;
    if (lstat(path, &now) != 0 || now.st_dev != judged->st_dev || now.st_ino != judged->st_ino) return;
    (void)unlink(path);
}

typedef struct lookup_req {
    const fsa_disk_cache *dc;
    const fsa_kernel_key *key;
    int any_nvrtc;
    uint64_t *corrupt_out;
} lookup_req;

static int key_text_matches(const entry_view *v, const lookup_req *r)
{
    if (!r->any_nvrtc)
        return strlen(r->key->text) == v->key_len && memcmp(r->key->text, v->key_text, v->key_len) == 0;
    char *text = dup_n(v->key_text, v->key_len);
    int same = text != NULL && fsa_key_text_equal_except_nvrtc(r->key->text, text);
    free(text);
    return same;
}

/* Reads one entry file named with `file_hex`. OK: *out filled, *sb_out its
 * status. NOT_FOUND: absent, bad (counted and deleted) or, with any_nvrtc,
 * an intact entry of another key (left alone). */
static fsa_status load_entry(fsa_disk_entry *out, struct stat *sb_out, const lookup_req *r, const char *path,
                             const char *file_hex)
{
    fsa_status st = FSA_STATUS_OK;
    raw_file rf = {0};
    entry_view v = {0};
    int bad = 0;
    FSA_CHECK(read_raw(&rf, path, &bad));
    if (!bad && (!parse_entry(&v, rf.data, rf.size) || !digest_is_hex(v.key_digest, file_hex))) bad = 1;
    if (!bad && !key_text_matches(&v, r)) {
        /* Exact: the file is under this key's digest yet holds another key. */
        if (r->any_nvrtc) FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "%s is for another key", path);
        bad = 1;
    }
    if (bad) {
        discard_bad(r->dc, path, &rf.sb, r->corrupt_out);
        FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "cache entry %s is corrupt%s", path,
                 r->dc->read_only ? "" : "; deleted");
    }
    FSA_CHECK(entry_from_view(out, &v));
    *sb_out = rf.sb;
cleanup:
    free(rf.data);
    return st;
}

/* Newest file wins; on a tie, the exact key. */
static int newer(const struct stat *a, int a_exact, const struct stat *b, int b_exact)
{
    int64_t ta = ts_ns(a->st_mtim), tb = ts_ns(b->st_mtim);
    return ta != tb ? ta > tb : a_exact > b_exact;
}

static fsa_status lookup_any_nvrtc(fsa_disk_entry *out, const lookup_req *r, const char *dir)
{
    fsa_status st = FSA_STATUS_OK;
    name_list names = {0};
    char *path = NULL;
    fsa_disk_entry best = {0}, cand = {0};
    struct stat best_sb = {0}, sb = {0};
    int have = 0, best_exact = 0;
    size_t want = strlen(r->key->name);
    FSA_CHECK(list_names(&names, dir));
    for (size_t i = 0; i < names.n; i++) {
        char hex[HEX_LEN + 1];
        size_t len;
        if (!split_key_file(names.v[i], ".cubin", &len, hex) || len != want ||
            memcmp(names.v[i], r->key->name, len) != 0)
            continue;
        free(path);
        path = path_join(dir, names.v[i]);
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
        }
        fsa_disk_entry_free(&cand);
    }
    if (!have) FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "no cache entry for %s in %s", r->key->name, dir);
    *out = best;
    memset(&best, 0, sizeof best);
cleanup:
    fsa_disk_entry_free(&best);
    fsa_disk_entry_free(&cand);
    name_list_free(&names);
    free(path);
    return st;
}

fsa_status fsa_disk_cache_lookup(fsa_disk_entry *out, fsa_disk_cache *dc, const fsa_kernel_key *key,
                                 const char *target, int any_nvrtc, uint64_t *corrupt_out)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *path = NULL;
    lookup_req r = {dc, key, any_nvrtc, corrupt_out};
    struct stat sb;
    if (out != NULL) memset(out, 0, sizeof *out);
    if (out == NULL || dc == NULL || key == NULL || key->text == NULL || key->name == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache lookup: NULL argument");
    FSA_CHECK(target_dir(&dir, dc, target, 0));
    if (any_nvrtc) {
        FSA_CHECK(lookup_any_nvrtc(out, &r, dir));
        goto cleanup;
    }
    path = key_file_path(dir, key, ".cubin");
    FSA_CHECK_ALLOC(path, STAGE);
    FSA_CHECK(load_entry(out, &sb, &r, path, key->hex));
cleanup:
    free(dir);
    free(path);
    return st;
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

/* Header, key text and entry names: everything before the payload. */
static fsa_status build_head(uint8_t **out, size_t *out_len, const fsa_kernel_key *key, const char *names,
                             const void *cubin, size_t cubin_size)
{
    fsa_status st = FSA_STATUS_OK;
    size_t key_len = strlen(key->text), names_len = strlen(names);
    uint8_t *h = malloc(HEADER_SIZE + key_len + names_len);
    FSA_CHECK_ALLOC(h, STAGE);
    memcpy(h, k_magic, sizeof k_magic);
    put_u32(h + 8, FSA_CACHE_FORMAT_VERSION);
    put_u32(h + 12, 0);
    put_u64(h + 16, cubin_size);
    fsa_digest128(h + 24, cubin, cubin_size);
    memcpy(h + 40, key->digest, 16);
    put_u32(h + 56, (uint32_t)key_len);
    put_u32(h + 60, (uint32_t)names_len);
    memcpy(h + HEADER_SIZE, key->text, key_len);
    memcpy(h + HEADER_SIZE + key_len, names, names_len);
    *out = h;
    *out_len = HEADER_SIZE + key_len + names_len;
cleanup:
    return st;
}

static uint64_t temp_suffix(void)
{
    static atomic_uint_fast64_t counter;
    uint64_t r = 0;
    struct timespec ts;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    /* No entropy yet: O_EXCL still keeps names unique, this only spreads them. */
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts_ns(ts) ^ (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
}

static fsa_status open_temp(int *fd_out, char **path_out, const char *dir, const fsa_kernel_key *key)
{
    fsa_status st = FSA_STATUS_OK;
    char *path = NULL;
    for (int attempt = 0; attempt < 16; attempt++) {
        fsa_strbuf b = {0};
        fsa_strbuf_appendf(&b, "%s/.%s.%s.tmp.%ld.%016llx", dir, key->name, key->hex, (long)getpid(),
                           (unsigned long long)temp_suffix());
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

fsa_status fsa_disk_cache_publish(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target,
                                  const void *cubin, size_t cubin_size, const char *entry_names)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *tmp = NULL, *final_path = NULL;
    uint8_t *head = NULL;
    size_t head_len = 0;
    int fd = -1;
    const char *names = entry_names ? entry_names : "";
    FSA_CHECK(check_publish_args(dc, key, cubin, cubin_size, names));
    FSA_CHECK(target_dir(&dir, dc, target, 1));
    final_path = key_file_path(dir, key, ".cubin");
    FSA_CHECK_ALLOC(final_path, STAGE);
    FSA_CHECK(build_head(&head, &head_len, key, names, cubin, cubin_size));
    FSA_CHECK(open_temp(&fd, &tmp, dir, key));
    FSA_CHECK(write_all(fd, head, head_len, tmp));
    FSA_CHECK(write_all(fd, cubin, cubin_size, tmp));
    if (fsync(fd) != 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot sync %s: %s", tmp, strerror(errno));
    int rc = close(fd);
    fd = -1;
    if (rc != 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot close %s: %s", tmp, strerror(errno));
    if (rename(tmp, final_path) != 0)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot rename %s to %s: %s", tmp, final_path, strerror(errno));
    free(tmp);
    tmp = NULL; /* it is the entry now */
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

/* ------------------------------------------------------------ locking */

int fsa_disk_cache_lock(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *path = NULL;
    int fd = -1;
    if (dc == NULL || key == NULL || key->name == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache lock: NULL argument");
    if (dc->read_only) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache %s is read-only: no lock", dc->root);
    FSA_CHECK(target_dir(&dir, dc, target, 1));
    path = key_file_path(dir, key, ".lock");
    FSA_CHECK_ALLOC(path, STAGE);
    fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot open lock %s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot lock %s: %s", path, strerror(errno));
cleanup:
    if (st != FSA_STATUS_OK && fd >= 0) {
        close(fd);
        fd = -1;
    }
    free(path);
    free(dir);
    return fd;
}

void fsa_disk_cache_unlock(int fd)
{
    if (fd < 0) return;
    (void)flock(fd, LOCK_UN);
    close(fd);
}

/* ------------------------------------------------------------ maintenance */

/* Called for every file of every target directory; set *stop to end the walk. */
typedef fsa_status (*walk_fn)(void *ctx, const char *dir, const char *target, const char *fname, int *stop);

static fsa_status walk_target(const char *dir, const char *target, walk_fn fn, void *ctx, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    name_list files = {0};
    st = list_names(&files, dir);
    if (st == FSA_STATUS_NOT_FOUND) { /* removed meanwhile */
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    for (size_t i = 0; i < files.n && !*stop; i++) FSA_CHECK(fn(ctx, dir, target, files.v[i], stop));
cleanup:
    name_list_free(&files);
    return st;
}

static fsa_status walk_cache(const fsa_disk_cache *dc, walk_fn fn, void *ctx)
{
    fsa_status st = FSA_STATUS_OK;
    name_list targets = {0};
    char *dir = NULL;
    int stop = 0;
    st = list_names(&targets, dc->v1);
    if (st == FSA_STATUS_NOT_FOUND) { /* nothing was ever cached */
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    for (size_t i = 0; i < targets.n && !stop; i++) {
        struct stat sb;
        free(dir);
        dir = path_join(dc->v1, targets.v[i]);
        FSA_CHECK_ALLOC(dir, STAGE);
        if (!safe_component(targets.v[i]) || lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        FSA_CHECK(check_dir(dir, FSA_STATUS_CACHE_IO));
        FSA_CHECK(walk_target(dir, targets.v[i], fn, ctx, &stop));
    }
cleanup:
    name_list_free(&targets);
    free(dir);
    return st;
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
    if (!split_key_file(fname, ".cubin", &name_len, hex)) goto cleanup;
    path = path_join(dir, fname);
    name = dup_n(fname, name_len);
    FSA_CHECK_ALLOC(path, STAGE);
    FSA_CHECK_ALLOC(name, STAGE);
    if (lstat(path, &sb) != 0) goto cleanup; /* removed meanwhile */
    fsa_cache_entry_info info = {path, name, target, (uint64_t)sb.st_size, (int64_t)sb.st_mtime, 1};
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

/* 1 when the entry file is intact and, with a check function, passes it. */
static fsa_status judge_entry(int *good, const verify_ctx *c, const raw_file *rf, const char *hex,
                              const char *target)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_disk_entry e = {0};
    entry_view v = {0};
    *good = parse_entry(&v, rf->data, rf->size) && digest_is_hex(v.key_digest, hex);
    if (*good && c->check != NULL) {
        FSA_CHECK(entry_from_view(&e, &v));
        *good = c->check(&e, target, c->check_user) == 0;
    }
cleanup:
    fsa_disk_entry_free(&e);
    return st;
}

static fsa_status verify_one(void *p, const char *dir, const char *target, const char *fname, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    verify_ctx *c = p;
    raw_file rf = {0};
    char hex[HEX_LEN + 1], *path = NULL, *name = NULL;
    size_t name_len;
    int bad = 0, good = 0;
    if (!split_key_file(fname, ".cubin", &name_len, hex)) goto cleanup;
    path = path_join(dir, fname);
    name = dup_n(fname, name_len);
    FSA_CHECK_ALLOC(path, STAGE);
    FSA_CHECK_ALLOC(name, STAGE);
    st = read_raw(&rf, path, &bad);
    if (st == FSA_STATUS_NOT_FOUND) { /* removed meanwhile */
        st = FSA_STATUS_OK;
        goto cleanup;
    }
    FSA_CHECK(st);
    if (!bad) FSA_CHECK(judge_entry(&good, c, &rf, hex, target));
    if (!good) discard_bad(c->dc, path, &rf.sb, &c->bad);
    fsa_cache_entry_info info = {path, name, target, (uint64_t)rf.sb.st_size, (int64_t)rf.sb.st_mtime, good};
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
    int64_t used_ns; /* max(atime, mtime) */
} prune_item;

typedef struct prune_ctx {
    time_t now;
    prune_item *items;
    size_t n, cap;
    uint64_t total, removed;
} prune_ctx;

/* A lock file nobody holds and nobody touched for an hour. Taking the lock
 * first keeps a current holder's file; a process that opened it just before
 * the unlink can at worst compile a kernel twice. */
static int remove_stale_lock(const char *path, time_t now)
{
    struct stat sb;
    int removed = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_mtime < now - TEMP_MAX_AGE_S &&
        flock(fd, LOCK_EX | LOCK_NB) == 0)
        removed = unlink(path) == 0;
    close(fd);
    return removed;
}

static fsa_status prune_keep(prune_ctx *c, char *path, const struct stat *sb)
{
    fsa_status st = FSA_STATUS_OK;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        prune_item *v = realloc(c->items, cap * sizeof *v);
        FSA_CHECK_ALLOC(v, STAGE);
        c->items = v;
        c->cap = cap;
    }
    int64_t a = ts_ns(sb->st_atim), m = ts_ns(sb->st_mtim);
    c->items[c->n++] = (prune_item){path, (uint64_t)sb->st_size, a > m ? a : m};
    c->total += (uint64_t)sb->st_size;
cleanup:
    return st;
}

static fsa_status prune_scan(void *p, const char *dir, const char *target, const char *fname, int *stop)
{
    fsa_status st = FSA_STATUS_OK;
    prune_ctx *c = p;
    char hex[HEX_LEN + 1], *path = path_join(dir, fname);
    size_t name_len;
    struct stat sb;
    (void)target;
    (void)stop;
    FSA_CHECK_ALLOC(path, STAGE);
    if (lstat(path, &sb) != 0) goto cleanup; /* removed meanwhile */
    if (split_key_file(fname, ".cubin", &name_len, hex)) {
        FSA_CHECK(prune_keep(c, path, &sb));
        path = NULL; /* the list owns it */
    } else if (split_key_file(fname, ".lock", &name_len, hex)) {
        c->removed += (uint64_t)remove_stale_lock(path, c->now);
    } else if (is_temp_name(fname) && S_ISREG(sb.st_mode) && sb.st_mtime < c->now - TEMP_MAX_AGE_S) {
        if (unlink(path) == 0) c->removed++;
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

/* Oldest use first, until the entries fit. */
static fsa_status prune_entries(prune_ctx *c, uint64_t max_bytes)
{
    fsa_status st = FSA_STATUS_OK;
    if (c->n > 1) qsort(c->items, c->n, sizeof *c->items, cmp_prune_item);
    for (size_t i = 0; i < c->n && c->total > max_bytes; i++) {
        if (unlink(c->items[i].path) != 0 && errno != ENOENT)
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot delete %s: %s", c->items[i].path, strerror(errno));
        c->total -= c->items[i].bytes;
        c->removed++;
    }
cleanup:
    return st;
}

fsa_status fsa_disk_cache_prune(fsa_disk_cache *dc, uint64_t max_bytes, uint64_t *removed_out,
                                uint64_t *bytes_left_out)
{
    fsa_status st = FSA_STATUS_OK;
    prune_ctx c = {0};
    c.now = time(NULL);
    if (dc == NULL) FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache prune: NULL cache");
    if (dc->read_only) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache %s is read-only: cannot prune", dc->root);
    FSA_CHECK(walk_cache(dc, prune_scan, &c));
    FSA_CHECK(prune_entries(&c, max_bytes));
cleanup:
    if (removed_out != NULL) *removed_out = c.removed;
    if (bytes_left_out != NULL) *bytes_left_out = c.total;
    for (size_t i = 0; i < c.n; i++) free(c.items[i].path);
    free(c.items);
    return st;
}
