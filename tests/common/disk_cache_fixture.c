/* The disk cache tests' fixture and helpers (disk_cache_fixture.h). */
#include "disk_cache_fixture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int disk_cache_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->root = fsa_test_mkdtemp("fsa_disk_cache");
    if (f->root == NULL || fsa_disk_cache_open(&f->dc, f->root, 0) != FSA_STATUS_OK) return -1;
    *state = f;
    return 0;
}

int disk_cache_teardown(void **state)
{
    fixture *f = *state;
    fsa_disk_cache_close(f->dc);
    fsa_test_rmtree(f->root);
    free(f->root);
    free(f);
    return 0;
}

void make_key_for(fsa_kernel_key *k, const char *target, const char *head_dim, const char *nvrtc, const char *opt)
{
    const fsa_param params[] = {{"DTYPE", "bf16", ""}, {"HEAD_DIM", head_dim, "d"}};
    const char *opts[] = {"--std=c++17", opt};
    fsa_key_inputs in = {"sel_fwd_main", params, 2, nvrtc, target, opts, 2};
    assert_int_equal(fsa_key_build(k, &in), FSA_STATUS_OK);
}

void make_key(fsa_kernel_key *k, const char *head_dim, const char *nvrtc, const char *opt)
{
    make_key_for(k, TARGET, head_dim, nvrtc, opt);
}

uint8_t *make_payload(size_t n, uint64_t seed)
{
    fsa_rng r = {seed};
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)fsa_rng_next(&r);
    return p;
}

void publish(fsa_disk_cache *dc, const fsa_kernel_key *k, const uint8_t *p, size_t n)
{
    assert_int_equal(fsa_disk_cache_publish(dc, k, TARGET, p, n, "fsa_kernel\nfsa_kernel_tail"), FSA_STATUS_OK);
}

/* Looks a key up and expects exactly these bytes. */
void expect_hit(fsa_disk_cache *dc, const fsa_kernel_key *k, int any_nvrtc, const uint8_t *p, size_t n)
{
    fsa_disk_entry e;
    uint64_t corrupt = 0;
    assert_int_equal(fsa_disk_cache_lookup(&e, dc, k, TARGET, any_nvrtc, &corrupt), FSA_STATUS_OK);
    assert_int_equal(corrupt, 0);
    assert_int_equal(e.cubin_size, n);
    assert_memory_equal(e.cubin, p, n);
    fsa_disk_entry_free(&e);
}

fsa_status lookup_status(fsa_disk_cache *dc, const fsa_kernel_key *k, int any_nvrtc, uint64_t *corrupt)
{
    fsa_disk_entry e;
    fsa_status st = fsa_disk_cache_lookup(&e, dc, k, TARGET, any_nvrtc, corrupt);
    if (st != FSA_STATUS_OK) {
        assert_null(e.cubin);
        assert_int_equal(e.cubin_size, 0);
    }
    fsa_disk_entry_free(&e);
    return st;
}

int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

off_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_size;
}

void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

void set_times(const char *path, time_t atime, time_t mtime)
{
    struct timespec ts[2] = {{atime, 0}, {mtime, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "junk", 4), 4);
    close(fd);
}

void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(in >= 0 && out >= 0);
    char buf[4096];
    for (ssize_t n; (n = read(in, buf, sizeof buf)) > 0;) assert_int_equal(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
}

int hold_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    return fd;
}

int error_mentions(const char *text)
{
    return strcmp(fsa_last_error_info()->stage, "disk-cache") == 0 && strstr(fsa_last_error(), text) != NULL;
}

int count_entries(const fsa_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}
