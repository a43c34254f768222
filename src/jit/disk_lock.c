/* The per-key lock of the disk cache: it only keeps processes from
 * compiling one kernel twice (cache/README.md, "Locking"). Because a
 * duplicate compile is harmless (publishing is atomic), nobody waits for the
 * lock for long: not past FSA_CACHE_LOCK_TIMEOUT seconds, and not at all
 * once its holder is seen stopped on this host. */
#include "disk_cache_internal.h"

#include "base/status_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define STAGE FSA_DC_STAGE
#define DEFAULT_TIMEOUT_S 120
#define RECORD_MAX 256

/* $FSA_CACHE_LOCK_TIMEOUT in decimal seconds (0 = do not wait), else the
 * default. Only digits and a point: strtod would also read hexadecimal
 * ("0x0": no wait), exponents, signs and leading blanks. */
static double lock_timeout_s(void)
{
    const char *v = getenv("FSA_CACHE_LOCK_TIMEOUT");
    if (v == NULL || *v == '\0' || v[strspn(v, "0123456789.")] != '\0') return DEFAULT_TIMEOUT_S;
    char *end = NULL;
    double s = strtod(v, &end);
    if (end == v || *end != '\0' || !(s >= 0.0) || s > 86400.0) return DEFAULT_TIMEOUT_S;
    return s;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* State letter and start time (clock ticks since boot) of a process, from
 * /proc/<pid>/stat; 0 when unknown. */
static int proc_state(long pid, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') return 0;
    char state = p[2];
    /* Field 22, starttime: p + 3 is the space before field 4, and each
     * further space starts the next field. */
    p += 3;
    for (int field = 4; field < 22 && p; field++) p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p, " %llu", start) != 1) return 0;
    return state;
}

static void host_name(char *out, size_t cap)
{
    if (gethostname(out, cap) != 0) out[0] = '\0';
    out[cap - 1] = '\0';
    for (char *c = out; *c; c++)
        if (*c == ' ' || *c == '\n') *c = '_';
}

/* What the holder writes into the lock file once it has the lock. */
static void write_record(int fd)
{
    char host[128], rec[RECORD_MAX];
    unsigned long long start = 0;
    host_name(host, sizeof host);
    long pid = (long)getpid();
    if (proc_state(pid, &start) == 0) start = 0;
    int n = snprintf(rec, sizeof rec, "pid %ld start %llu host %s\n", pid, start, host);
    if (n > 0 && ftruncate(fd, 0) == 0 && pwrite(fd, rec, (size_t)n, 0) < 0) {
        /* The record only helps waiters; the lock holds without it. */
    }
}

/* The pid of the process the record names when it is a process of this
 * host that is stopped (SIGSTOP, or by a debugger): it will not finish its
 * compile until someone resumes it. 0 otherwise. A record that names a
 * process which is gone (or a zombie: either holds no lock), or one of
 * another host, is no evidence: a new holder may not have written its
 * record yet, a child may have inherited the lock. */
static long stopped_holder(int fd)
{
    char rec[RECORD_MAX], host[128], mine[128];
    unsigned long long start = 0, now_start = 0;
    long pid = 0;
    ssize_t n = pread(fd, rec, sizeof rec - 1, 0);
    if (n <= 0) return 0;
    rec[n] = '\0';
    if (sscanf(rec, "pid %ld start %llu host %127s", &pid, &start, host) != 3 || pid <= 0) return 0;
    host_name(mine, sizeof mine);
    if (strcmp(host, mine) != 0) return 0;
    int state = proc_state(pid, &now_start);
    if (state == 0 || now_start != start) return 0;
    return state == 'T' || state == 't' ? pid : 0;
}

static void pause_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Waits for the lock until it is free, its holder has been seen stopped for
 * STOPPED_FOR_S (a holder that just took the lock may still show the record
 * of the previous one), or the timeout passes. OK with the lock; CACHE_IO
 * with the reason otherwise. */
#define STOPPED_FOR_S 0.2
static fsa_status wait_for_lock(int fd, const char *path)
{
    fsa_status st = FSA_STATUS_OK;
    const double limit = lock_timeout_s(), t0 = now_s();
    double pause = 0.001, stopped_since = -1.0;
    long stopped_pid = 0;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) goto cleanup;
        if (errno != EWOULDBLOCK && errno != EINTR)
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot lock %s: %s", path, strerror(errno));
        long pid = stopped_holder(fd);
        if (pid == 0 || pid != stopped_pid) stopped_since = pid ? now_s() : -1.0;
        stopped_pid = pid;
        if (pid != 0 && now_s() - stopped_since >= STOPPED_FOR_S)
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "%s is held by process %ld, which is stopped", path, pid);
        double waited = now_s() - t0;
        if (waited >= limit)
            FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "%s still held after %.0f s (FSA_CACHE_LOCK_TIMEOUT)", path,
                     waited);
        pause_s(pause < limit - waited ? pause : limit - waited);
        if (pause < 0.05) pause *= 2;
    }
cleanup:
    return st;
}

int fsa_disk_cache_lock(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *path = NULL;
    struct stat sb;
    int fd = -1;
    if (dc == NULL || key == NULL || key->name == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache lock: NULL argument");
    if (dc->read_only) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache %s is read-only: no lock", dc->root);
    FSA_CHECK(fsa_dc_target_dir(&dir, dc, target, 1));
    path = fsa_dc_key_file_path(dir, key, ".lock");
    FSA_CHECK_ALLOC(path, STAGE);
    /* O_NONBLOCK: a FIFO planted here must not hang the opener. */
    fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot open lock %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "lock %s is not a regular file", path);
    if (wait_for_lock(fd, path) != FSA_STATUS_OK) {
        close(fd);
        fd = FSA_DISK_LOCK_GAVE_UP;
        goto cleanup;
    }
    write_record(fd);
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
