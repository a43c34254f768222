/* Paths, directories and the reading of one file for the disk cache: the
 * checks that keep other users' files and planted links out. */
#include "disk_cache_internal.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STAGE FSA_DC_STAGE
#define HEX_LEN FSA_DC_HEX_LEN

int64_t fsa_dc_ts_ns(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

/* One path component that cannot climb out of the cache. */
int fsa_dc_safe_component(const char *s)
{
    if (s == NULL || *s == '\0' || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-'))
            return 0;
    return 1;
}

char *fsa_dc_path_join(const char *dir, const char *leaf)
{
    fsa_strbuf b = {0};
    size_t n = strlen(dir);
    fsa_strbuf_appendf(&b, "%s%s%s", dir, (n > 0 && dir[n - 1] == '/') ? "" : "/", leaf);
    return fsa_strbuf_take(&b);
}

char *fsa_dc_key_file_path(const char *dir, const fsa_kernel_key *key, const char *suffix)
{
    fsa_strbuf b = {0};
    fsa_strbuf_appendf(&b, "%s/%s.%s%s", dir, key->name, key->hex, suffix);
    return fsa_strbuf_take(&b);
}

/* 1 when fname is "<name>.<32 lower-case hex><suffix>"; gives the name's
 * length and the hex digits. */
int fsa_dc_split_key_file(const char *fname, const char *suffix, size_t *name_len, char hex[HEX_LEN + 1])
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

/* ".<name>.<hex>.tmp.<pid>.<random>", as publish names them (and a file moved aside to be deleted,
 * ".<entry file, cut when long>.tmp.<pid>.<random>"): digits and hex after the last ".tmp.", so that another dot-file
 * someone keeps there (".notes.tmp.txt") is never taken for one. */
int fsa_dc_is_temp_name(const char *fname)
{
    if (fname[0] != '.') return 0;
    const char *p = NULL;
    for (const char *q = fname; (q = strstr(q, ".tmp.")) != NULL; q++) p = q + 5;
    if (p == NULL) return 0;
    const size_t digits = strspn(p, "0123456789");
    if (digits == 0 || p[digits] != '.') return 0;
    const char *hex = p + digits + 1;
    const size_t n = strspn(hex, "0123456789abcdef");
    return n > 0 && hex[n] == '\0';
}

/* The pid in a temporary file's name, or 0. */
static long temp_writer_pid(const char *fname)
{
    const char *p = NULL;
    for (const char *q = fname; (q = strstr(q, ".tmp.")) != NULL; q++) p = q + 5;
    if (p == NULL) return 0;
    long pid = 0;
    for (; *p >= '0' && *p <= '9' && pid < (1L << 30); p++) pid = pid * 10 + (*p - '0');
    return *p == '.' ? pid : 0;
}

int fsa_dc_temp_writer_gone(const char *fname, const struct stat *sb, int held, time_t now)
{
    if (held == 1) return 0;
    /* Dated ahead of this clock: its age says nothing, and nobody holds it. */
    if (sb->st_mtime > now + FSA_DC_CLOCK_SKEW_S) return 1;
    /* Empty and young: a writer may be between its create and its flock. */
    if (held == 0) return sb->st_size > 0 || sb->st_mtime < now - FSA_DC_TEMP_ORPHAN_AGE_S;
    if (sb->st_mtime < now - FSA_DC_TEMP_DEBRIS_AGE_S) return 1;
    long pid = temp_writer_pid(fname);
    return sb->st_mtime < now - FSA_DC_TEMP_ORPHAN_AGE_S && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int fsa_dc_remove_temp_debris(const char *path, const char *fname, time_t now)
{
    struct stat sb;
    int gone = 0;
    if (!fsa_dc_is_temp_name(fname)) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0) {
        int held = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? 1 : -1;
        gone = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && fsa_dc_temp_writer_gone(fname, &sb, held, now);
    } else if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        gone = fsa_dc_temp_writer_gone(fname, &sb, -1, now);
    }
    /* Unlinked while our lock is held: no writer can take it meanwhile. */
    int removed = !gone ? 0 : unlink(path) == 0 ? 1 : errno == ENOENT ? 0 : -1;
    const int e = errno;
    if (fd >= 0) close(fd);
    errno = e;
    return removed;
}

int64_t fsa_dc_use_time_ns(struct timespec t, time_t now)
{
    if (t.tv_sec > now + FSA_DC_CLOCK_SKEW_S) return 0;
    /* Only times past this second are moved: the others keep their order
     * (two prunes of one tree must rank it alike, whenever they run). */
    return t.tv_sec > now ? (int64_t)now * 1000000000 : fsa_dc_ts_ns(t);
}

/* ------------------------------------------------------------- directories */

int fsa_dc_trusted_owner(uid_t uid) { return uid == geteuid() || uid == 0; }

/* Refuses a directory another user could plant entries in. `missing` is the
 * status for a directory that does not exist. */
fsa_status fsa_dc_check_dir(const char *path, fsa_status missing)
{
    fsa_status st = FSA_STATUS_OK;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        FSA_FAIL(e == ENOENT ? missing : FSA_STATUS_CACHE_IO, STAGE, "cannot use cache directory %s: %s",
                 path, strerror(e));
    }
    if (!S_ISDIR(sb.st_mode)) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "%s is not a directory", path);
    if (!fsa_dc_trusted_owner(sb.st_uid))
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "refusing cache directory %s: owned by uid %u, not by uid %u or root",
                 path, (unsigned)sb.st_uid, (unsigned)geteuid());
    if (sb.st_mode & 022)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "refusing cache directory %s: writable by other users (mode %04o)",
                 path, (unsigned)(sb.st_mode & 07777));
cleanup:
    return st;
}

fsa_status fsa_dc_make_dir(const char *path)
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

fsa_status fsa_dc_make_dirs(const char *path)
{
    fsa_status st = FSA_STATUS_OK;
    char *p = strdup(path);
    FSA_CHECK_ALLOC(p, STAGE);
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c != '\0') continue;
        char saved = *c;
        *c = '\0';
        FSA_CHECK(fsa_dc_make_dir(p));
        *c = saved;
        if (saved == '\0') break;
    }
cleanup:
    free(p);
    return st;
}

fsa_status fsa_dc_check_target_dir(const char *path, fsa_status missing)
{
    fsa_status st = FSA_STATUS_OK;
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode))
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE,
                 "refusing cache directory %s: a symbolic link (the library makes target directories itself)", path);
    FSA_CHECK(fsa_dc_check_dir(path, missing));
cleanup:
    return st;
}

/* <root>/v1/<target>, checked by fsa_dc_check_target_dir; NOT_FOUND when
 * absent and not created. */
fsa_status fsa_dc_target_dir(char **out, const fsa_disk_cache *dc, const char *target, int create)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL;
    *out = NULL;
    if (!fsa_dc_safe_component(target))
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE, "target \"%s\" is not a plain name", target ? target : "");
    dir = fsa_dc_path_join(dc->v1, target);
    FSA_CHECK_ALLOC(dir, STAGE);
    if (create) {
        /* The first write makes v1 (the open leaves it to it: fsa_disk_cache_open) and checks it as the open
         * checks one that is there. */
        FSA_CHECK(fsa_dc_make_dir(dc->v1));
        FSA_CHECK(fsa_dc_check_dir(dc->v1, FSA_STATUS_CACHE_IO));
        FSA_CHECK(fsa_dc_make_dir(dir));
    }
    FSA_CHECK(fsa_dc_check_target_dir(dir, FSA_STATUS_NOT_FOUND));
    *out = dir;
    dir = NULL;
cleanup:
    free(dir);
    return st;
}

void fsa_dc_names_free(fsa_dc_names *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static fsa_status names_push(fsa_dc_names *l, const char *s)
{
    fsa_status st = FSA_STATUS_OK;
    char **v = fsa_array_room(l->v, &l->cap, l->n, sizeof *v, 32);
    FSA_CHECK_ALLOC(v, STAGE);
    l->v = v;
    l->v[l->n] = strdup(s);
    FSA_CHECK_ALLOC(l->v[l->n], STAGE);
    l->n++;
cleanup:
    return st;
}

/* The names in a directory, sorted so walks are deterministic. NOT_FOUND when
 * the directory is gone. */
fsa_status fsa_dc_list_names(fsa_dc_names *out, const char *dir)
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
        FSA_CHECK(names_push(out, de->d_name));
    }
    if (out->n > 1) qsort(out->v, out->n, sizeof *out->v, cmp_str);
cleanup:
    if (d != NULL) closedir(d);
    if (st != FSA_STATUS_OK) fsa_dc_names_free(out);
    return st;
}


/* ------------------------------------------------------------ reading */

/* The bytes of one entry file. OK with *bad set: the file is there but cannot
 * be one of our entries (not regular, another owner, impossible size, a
 * symlink, unreadable). NOT_FOUND: no such file. */
fsa_status fsa_dc_read_raw(fsa_dc_raw_file *rf, const char *path, int *bad, int keep_atime)
{
    fsa_status st = FSA_STATUS_OK;
    /* O_NONBLOCK: a FIFO planted here must not hang the reader. */
    int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int fd = keep_atime ? open(path, flags | O_NOATIME) : -1;
    int noatime = fd >= 0;
    /* EPERM: O_NOATIME is for the file's owner. */
    if (fd < 0 && (!keep_atime || errno == EPERM)) fd = open(path, flags);
    *bad = 0;
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) FSA_FAIL(FSA_STATUS_NOT_FOUND, STAGE, "no cache entry %s", path);
        /* A symlink, or a file of ours we may not read: unusable either way. So is anything there that is
         * not a regular file, whatever open said (a socket: ENXIO; a device node). */
        if (lstat(path, &rf->sb) == 0 && (e == ELOOP || e == EACCES || !S_ISREG(rf->sb.st_mode))) {
            *bad = 1;
            goto cleanup;
        }
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot open %s: %s", path, strerror(e));
    }
    if (fstat(fd, &rf->sb) != 0)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot stat %s: %s", path, strerror(errno));
    /* Someone else's file, or one others may write, could hold anything.
     * The least size is what tells another format version's entry. */
    if (!S_ISREG(rf->sb.st_mode) || !fsa_dc_trusted_owner(rf->sb.st_uid) || (rf->sb.st_mode & 022) ||
        rf->sb.st_size < (off_t)FSA_DC_MIN_FILE || (uint64_t)rf->sb.st_size > fsa_dc_max_entry_size()) {
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
    struct stat after;
    if (!noatime && keep_atime == FSA_DC_RESTORE_ATIME && fstat(fd, &after) == 0 &&
        fsa_dc_ts_ns(after.st_atim) != fsa_dc_ts_ns(rf->sb.st_atim)) {
        const struct timespec ts[2] = {rf->sb.st_atim, {0, UTIME_OMIT}};
        (void)futimens(fd, ts); /* best effort: at worst prune thinks it recently used */
    }
cleanup:
    if (fd >= 0) close(fd);
    return st;
}

char *fsa_dc_dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p == NULL) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}


/* Whether `now` is still the file `judged` describes. */
static int same_file(const struct stat *now, const struct stat *judged, int times_too)
{
    return now->st_dev == judged->st_dev && now->st_ino == judged->st_ino &&
           (!times_too ||
            (now->st_size == judged->st_size && fsa_dc_ts_ns(now->st_mtim) == fsa_dc_ts_ns(judged->st_mtim)));
}

int fsa_dc_unlink_if_unchanged(const char *path, const struct stat *judged, int times_too)
{
    struct stat now;
    if (lstat(path, &now) != 0) return errno == ENOENT ? 0 : -1;
    if (!same_file(&now, judged, times_too)) return 1; /* replaced meanwhile */
    const char *slash = strrchr(path, '/');
    const int dir_len = slash ? (int)(slash - path) + 1 : 0;
    /* ".<entry file>.tmp.<pid>.<random>", the entry file's part cut to leave room for the rest (the dot,
     * ".tmp.", a pid of up to 20 digits, the dot and 16 hex digits) within one file name: an entry whose name
     * is long must not be the one file that cannot be deleted (ENAMETOOLONG). */
    const int room = NAME_MAX - 1 - 5 - 20 - 1 - 16;
    fsa_strbuf b = {0};
    fsa_strbuf_appendf(&b, "%.*s.%.*s.tmp.%ld.%016llx", dir_len, path, room, path + dir_len, (long)getpid(),
                       (unsigned long long)fsa_temp_suffix());
    char *aside = fsa_strbuf_take(&b);
    if (aside == NULL) {
        errno = ENOMEM;
        return -1;
    }
    int result;
    if (rename(path, aside) != 0) {
        result = errno == ENOENT ? 0 : -1;
    } else if (lstat(aside, &now) != 0 || same_file(&now, judged, times_too)) {
        result = unlink(aside) == 0 || errno == ENOENT ? 0 : -1;
    } else {
        /* A writer renamed another file into place between the check and the move: put it back, never over a
         * newer one (link does not replace); where links are refused, rename does. */
        if (link(aside, path) == 0 || errno == EEXIST)
            (void)unlink(aside);
        else
            (void)rename(aside, path);
        result = 1;
    }
    free(aside);
    return result;
}

const char *fsa_dc_discard_bad(const fsa_disk_cache *dc, const char *path, const struct stat *judged,
                               uint64_t *counter)
{
    struct stat now;
    if (counter != NULL) (*counter)++;
    if (dc->read_only) return "the cache is read-only";
    if (lstat(path, &now) != 0) return NULL; /* gone already */
    if (now.st_dev != judged->st_dev || now.st_ino != judged->st_ino) return "it was replaced meanwhile";
    /* A directory is removed only when empty: its contents are not ours to judge. */
    if (S_ISDIR(now.st_mode)) {
        if (rmdir(path) == 0) return NULL;
        return errno == ENOTEMPTY || errno == EEXIST ? "it is a directory that is not empty" : strerror(errno);
    }
    const int r = fsa_dc_unlink_if_unchanged(path, judged, 0);
    return r == 0 ? NULL : r == 1 ? "it was replaced meanwhile" : strerror(errno);
}
