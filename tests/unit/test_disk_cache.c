/* The on-disk kernel cache: round trips, every kind of damaged entry (a miss
 * that is deleted and rebuilt once), relaxed NVRTC lookups, directory
 * security, read-only mode, concurrent publishers, the per-key lock and the
 * maintenance walks (list, verify, prune). */
#include "testing.h"

#include "jit/disk_cache.h"
#include "jit/kernel_key.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TARGET "sm_90a"

typedef struct fixture {
    char *root;
    fsa_disk_cache *dc;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->root = fsa_test_mkdtemp("fsa_disk_cache");
    if (f->root == NULL || fsa_disk_cache_open(&f->dc, f->root, 0) != FSA_STATUS_OK) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fsa_disk_cache_close(f->dc);
    fsa_test_rmtree(f->root);
    free(f->root);
    free(f);
    return 0;
}

static void reopen(fixture *f, int read_only)
{
    fsa_disk_cache_close(f->dc);
    f->dc = NULL;
    assert_int_equal(fsa_disk_cache_open(&f->dc, f->root, read_only), FSA_STATUS_OK);
}

/* ------------------------------------------------------------ helpers */

static void make_key(fsa_kernel_key *k, const char *head_dim, const char *nvrtc, const char *opt)
{
    const fsa_param params[] = {{"DTYPE", "bf16", ""}, {"HEAD_DIM", head_dim, "d"}};
    const char *opts[] = {"--std=c++17", opt};
    fsa_key_inputs in = {"sel_fwd_main", params, 2, nvrtc, TARGET, opts, 2};
    assert_int_equal(fsa_key_build(k, &in), FSA_STATUS_OK);
}

static uint8_t *make_payload(size_t n, uint64_t seed)
{
    fsa_rng r = {seed};
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)fsa_rng_next(&r);
    return p;
}

static void publish(fsa_disk_cache *dc, const fsa_kernel_key *k, const uint8_t *p, size_t n)
{
    assert_int_equal(fsa_disk_cache_publish(dc, k, TARGET, p, n, "fsa_kernel\nfsa_kernel_tail"), FSA_STATUS_OK);
}

/* Looks a key up and expects exactly these bytes. */
static void expect_hit(fsa_disk_cache *dc, const fsa_kernel_key *k, int any_nvrtc, const uint8_t *p, size_t n)
{
    fsa_disk_entry e;
    uint64_t corrupt = 0;
    assert_int_equal(fsa_disk_cache_lookup(&e, dc, k, TARGET, any_nvrtc, &corrupt), FSA_STATUS_OK);
    assert_int_equal(corrupt, 0);
    assert_int_equal(e.cubin_size, n);
    assert_memory_equal(e.cubin, p, n);
    fsa_disk_entry_free(&e);
}

static fsa_status lookup_status(fsa_disk_cache *dc, const fsa_kernel_key *k, int any_nvrtc, uint64_t *corrupt)
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

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static off_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_size;
}

static void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void set_times(const char *path, time_t atime, time_t mtime)
{
    struct timespec ts[2] = {{atime, 0}, {mtime, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "junk", 4), 4);
    close(fd);
}

static int error_mentions(const char *text)
{
    return strcmp(fsa_last_error_info()->stage, "disk-cache") == 0 && strstr(fsa_last_error(), text) != NULL;
}

/* ------------------------------------------------------------ round trip */

static void test_publish_then_lookup_returns_the_same_bytes_and_entry_names(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(10000, 1);
    publish(f->dc, &k, p, 10000);

    fsa_disk_entry e;
    uint64_t corrupt = 0;
    assert_int_equal(fsa_disk_cache_lookup(&e, f->dc, &k, TARGET, 0, &corrupt), FSA_STATUS_OK);
    assert_int_equal(corrupt, 0);
    assert_int_equal(e.cubin_size, 10000);
    assert_memory_equal(e.cubin, p, 10000);
    assert_string_equal(e.entry_names, "fsa_kernel\nfsa_kernel_tail");
    assert_string_equal(e.key_text, k.text);
    fsa_disk_entry_free(&e);
    fsa_disk_entry_free(NULL);
    free(p);
    fsa_key_free(&k);
}

static void test_the_entry_lives_at_root_v1_target_name_hex_cubin_in_private_directories(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "64", "13.0", "-O3");
    uint8_t *p = make_payload(100, 2);
    publish(f->dc, &k, p, 100);

    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    char want[4096];
    snprintf(want, sizeof want, "%s/v1/%s/sel_fwd_main_bf16_d64.%s.cubin", f->root, TARGET, k.hex);
    assert_string_equal(path, want);
    /* Header, key text, entry names and payload, nothing more. */
    assert_int_equal(file_size(path), FSA_CACHE_HEADER_SIZE + strlen(k.text) + strlen("fsa_kernel\nfsa_kernel_tail") + 100);
    struct stat sb;
    snprintf(want, sizeof want, "%s/v1/%s", f->root, TARGET);
    assert_int_equal(stat(want, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_string_equal(fsa_disk_cache_root(f->dc), f->root);
    assert_int_equal(fsa_disk_cache_read_only(f->dc), 0);
    assert_null(fsa_disk_cache_entry_path(f->dc, &k, "../sm_90a"));
    assert_int_equal(lookup_status(f->dc, &k, 0, NULL), FSA_STATUS_OK);
    free(path);
    free(p);
    fsa_key_free(&k);
}

static void test_a_key_that_was_never_published_is_a_miss_that_is_not_counted(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "96", "13.0", "-O3");
    uint64_t corrupt = 0;
    /* No target directory yet, then an empty one. */
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(lookup_status(f->dc, &k, 1, &corrupt), FSA_STATUS_NOT_FOUND);
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
    fsa_disk_cache_unlock(fd);
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(lookup_status(f->dc, &k, 1, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 0);
    fsa_key_free(&k);
}

static void test_a_target_that_is_not_a_plain_name_is_rejected(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t b = 1;
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, "../x", &b, 1, ""), FSA_STATUS_INVALID_ARGUMENT);
    fsa_disk_entry e;
    assert_int_equal(fsa_disk_cache_lookup(&e, f->dc, &k, "a/b", 0, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fsa_disk_cache_lock(f->dc, &k, ".."), -1);
    fsa_disk_cache_unlock(-1);
    fsa_key_free(&k);
}

/* ------------------------------------------------------------ damaged entries */

typedef void (*damage_fn)(const char *path);

static void truncate_by_one(const char *path) { assert_int_equal(truncate(path, file_size(path) - 1), 0); }
static void truncate_into_header(const char *path) { assert_int_equal(truncate(path, 20), 0); }
static void truncate_to_zero(const char *path) { assert_int_equal(truncate(path, 0), 0); }
static void flip_last_payload_byte(const char *path) { flip_byte(path, file_size(path) - 1); }
static void flip_magic(const char *path) { flip_byte(path, 3); }
static void flip_version(const char *path) { flip_byte(path, 8); }
static void flip_flags(const char *path) { flip_byte(path, 12); }
static void flip_payload_length(const char *path) { flip_byte(path, 16); }
static void flip_payload_checksum(const char *path) { flip_byte(path, 30); }
static void flip_key_digest(const char *path) { flip_byte(path, 45); }
static void flip_key_length(const char *path) { flip_byte(path, 57); }
static void flip_names_length(const char *path) { flip_byte(path, 60); }
static void flip_names_checksum(const char *path) { flip_byte(path, 70); }
static void flip_key_text(const char *path) { flip_byte(path, FSA_CACHE_HEADER_SIZE + 5); }

/* The entry names follow the key text; the payload is the last 3000 bytes. */
static void flip_entry_names(const char *path) { flip_byte(path, file_size(path) - 3000 - 3); }

static void append_a_byte(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
}

/* The damaged entry is a counted miss, it is gone afterwards, and the next
 * publish and lookup work again (rebuilt once). */
static void expect_damage_is_a_miss_then_rebuilt(fixture *f, damage_fn damage)
{
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(3000, 3);
    publish(f->dc, &k, p, 3000);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    damage(path);

    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_true(error_mentions(path));
    assert_false(exists(path));
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);

    publish(f->dc, &k, p, 3000);
    expect_hit(f->dc, &k, 0, p, 3000);
    free(path);
    free(p);
    fsa_key_free(&k);
}

static void test_a_truncated_entry_is_a_miss_and_is_deleted(void **state)
{
    expect_damage_is_a_miss_then_rebuilt(*state, truncate_by_one);
    expect_damage_is_a_miss_then_rebuilt(*state, truncate_into_header);
}

static void test_an_entry_with_trailing_bytes_is_a_miss_and_is_deleted(void **state)
{
    expect_damage_is_a_miss_then_rebuilt(*state, append_a_byte);
}

static void test_a_zero_length_entry_is_a_miss_and_is_deleted(void **state)
{
    expect_damage_is_a_miss_then_rebuilt(*state, truncate_to_zero);
}

static void test_a_flipped_payload_byte_is_a_miss_and_is_deleted(void **state)
{
    expect_damage_is_a_miss_then_rebuilt(*state, flip_last_payload_byte);
}

static void test_a_flipped_header_byte_is_a_miss_and_is_deleted(void **state)
{
    static const damage_fn every_field[] = {flip_magic,          flip_version,    flip_flags,
                                            flip_payload_length, flip_payload_checksum, flip_key_digest,
                                            flip_key_length,     flip_names_length, flip_names_checksum,
                                            flip_key_text};
    for (size_t i = 0; i < sizeof every_field / sizeof every_field[0]; i++)
        expect_damage_is_a_miss_then_rebuilt(*state, every_field[i]);
}

static void test_a_flipped_entry_names_byte_is_a_miss_and_is_deleted(void **state)
{
    /* The entry names say which kernels a module defines: covered by their own checksum. */
    expect_damage_is_a_miss_then_rebuilt(*state, flip_entry_names);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* An intact entry of format version 1 (64-byte header, no entry-names
 * checksum), as the library wrote them before version 2. */
static void write_format_1_entry(const char *path, const fsa_kernel_key *k, const uint8_t *p, size_t n)
{
    const char *names = "fsa_kernel";
    size_t kl = strlen(k->text), nl = strlen(names), total = 64 + kl + nl + n;
    uint8_t *d = calloc(1, total);
    assert_non_null(d);
    memcpy(d, "FSACUBIN", 8);
    put_le(d + 8, 1, 4);
    put_le(d + 16, n, 8);
    fsa_digest128(d + 24, p, n);
    memcpy(d + 40, k->digest, 16);
    put_le(d + 56, kl, 4);
    put_le(d + 60, nl, 4);
    memcpy(d + 64, k->text, kl);
    memcpy(d + 64 + kl, names, nl);
    memcpy(d + 64 + kl + nl, p, n);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, d, total), (ssize_t)total);
    close(fd);
    free(d);
}

static void test_an_entry_of_the_previous_format_version_is_a_miss_and_is_replaced(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(700, 21);
    publish(f->dc, &k, p, 700); /* makes the directories */
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    write_format_1_entry(path, &k, p, 700);
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_false(exists(path));
    publish(f->dc, &k, p, 700);
    expect_hit(f->dc, &k, 0, p, 700);
    free(path);
    free(p);
    fsa_key_free(&k);
}

static void test_an_entry_holding_another_key_is_a_miss_and_is_deleted(void **state)
{
    fixture *f = *state;
    fsa_kernel_key a, b;
    make_key(&a, "128", "13.0", "-O3");
    make_key(&b, "128", "13.0", "-O2");
    uint8_t *p = make_payload(500, 4);
    publish(f->dc, &a, p, 500);
    char *pa = fsa_disk_cache_entry_path(f->dc, &a, TARGET);
    char *pb = fsa_disk_cache_entry_path(f->dc, &b, TARGET);
    assert_int_equal(rename(pa, pb), 0);

    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &b, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_false(exists(pb));
    assert_int_equal(lookup_status(f->dc, &a, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);

    publish(f->dc, &b, p, 500);
    expect_hit(f->dc, &b, 0, p, 500);
    free(pa);
    free(pb);
    free(p);
    fsa_key_free(&a);
    fsa_key_free(&b);
}

static void test_a_symlink_in_place_of_an_entry_is_a_miss_and_is_removed(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(700, 5);
    publish(f->dc, &k, p, 700);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    char *elsewhere = join(f->root, "elsewhere.cubin");
    assert_int_equal(rename(path, elsewhere), 0);
    assert_int_equal(symlink(elsewhere, path), 0);

    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_false(exists(path));
    assert_true(exists(elsewhere)); /* only the link went */

    publish(f->dc, &k, p, 700);
    expect_hit(f->dc, &k, 0, p, 700);
    free(elsewhere);
    free(path);
    free(p);
    fsa_key_free(&k);
}

static int count_entries(const fsa_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

static void test_a_stale_temp_file_is_not_an_entry_and_prune_removes_it(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(800, 6);
    /* What a writer that crashed before its rename leaves behind. */
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET); /* creates the target directory */
    fsa_disk_cache_unlock(fd);
    char dir[4096], tmp[8192];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    snprintf(tmp, sizeof tmp, "%s/.%s.%s.tmp.4242.00000000deadbeef", dir, k.name, k.hex);
    touch(tmp);

    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(lookup_status(f->dc, &k, 1, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 0);

    publish(f->dc, &k, p, 800);
    expect_hit(f->dc, &k, 0, p, 800);
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);

    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 0); /* a young temp file may belong to a live writer */
    assert_true(exists(tmp));
    set_times(tmp, time(NULL) - 7200, time(NULL) - 7200);
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(tmp));
    expect_hit(f->dc, &k, 0, p, 800);
    free(p);
    fsa_key_free(&k);
}

/* A pid no process has: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static char *temp_file(fixture *f, const fsa_kernel_key *k, long pid, const char *suffix, time_t age_s)
{
    char leaf[512];
    snprintf(leaf, sizeof leaf, "v1/" TARGET "/.%s.%s.tmp.%ld.%s", k->name, k->hex, pid, suffix);
    char *path = join(f->root, leaf);
    touch(path);
    set_times(path, time(NULL) - age_s, time(NULL) - age_s);
    return path;
}

static void test_publish_removes_its_keys_temp_files_whose_writer_is_gone(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k, other;
    make_key(&k, "128", "13.0", "-O3");
    make_key(&other, "64", "13.0", "-O3");
    uint8_t *p = make_payload(300, 22);
    publish(f->dc, &other, p, 300); /* makes the directories */
    pid_t gone = dead_pid();
    char *killed = temp_file(f, &k, gone, "01", 120);        /* writer gone a while ago */
    char *just_now = temp_file(f, &k, gone, "02", 0);        /* too young to judge */
    char *alive = temp_file(f, &k, getpid(), "03", 120);      /* writer still running */
    char *ancient = temp_file(f, &k, getpid(), "04", 7200);   /* no write takes that long */
    char *another = temp_file(f, &other, gone, "05", 120);    /* another key: left to prune */

    publish(f->dc, &k, p, 300);
    assert_false(exists(killed));
    assert_true(exists(just_now));
    assert_true(exists(alive));
    assert_false(exists(ancient));
    assert_true(exists(another));
    expect_hit(f->dc, &k, 0, p, 300);

    /* Prune applies the same rule to every key, without the hour's wait. */
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(another));
    assert_true(exists(just_now));
    assert_true(exists(alive));
    char *paths[] = {killed, just_now, alive, ancient, another};
    for (size_t i = 0; i < 5; i++) free(paths[i]);
    free(p);
    fsa_key_free(&k);
    fsa_key_free(&other);
}

static void test_an_empty_directory_at_an_entry_path_is_counted_once_removed_and_replaced(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(400, 23);
    publish(f->dc, &k, p, 400);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);

    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_true(error_mentions("; deleted"));
    assert_false(exists(path));
    publish(f->dc, &k, p, 400);
    expect_hit(f->dc, &k, 0, p, 400);
    free(path);
    free(p);
    fsa_key_free(&k);
}

typedef struct verdicts {
    int entries, valid, deleted;
} verdicts;

static int tally(const fsa_cache_entry_info *info, void *user)
{
    verdicts *v = user;
    v->entries++;
    v->valid += info->valid;
    v->deleted += info->deleted;
    return 0;
}

static void test_a_directory_with_files_at_an_entry_path_is_reported_as_kept_and_passed_over(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k, k2;
    make_key(&k, "128", "13.0", "-O3");
    make_key(&k2, "64", "13.0", "-O3");
    uint8_t *p = make_payload(400, 24);
    publish(f->dc, &k, p, 400);
    publish(f->dc, &k2, p, 400);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    char *path2 = fsa_disk_cache_entry_path(f->dc, &k2, TARGET);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    char *inside = join(path, "something");
    touch(inside);
    set_times(path, time(NULL) - 9000, time(NULL) - 9000); /* oldest: prune meets it first */

    /* Lookup: a counted miss that says it could not delete. */
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_true(error_mentions("not deleted (it is a directory that is not empty)"));
    assert_true(exists(inside));
    /* Publish cannot replace it, and says why. */
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, TARGET, p, 400, ""), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("directory"));

    /* Verify: bad, not deleted; the good entry is untouched. */
    verdicts v = {0};
    uint64_t bad = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, tally, &v, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    assert_int_equal(v.entries, 2);
    assert_int_equal(v.valid, 1);
    assert_int_equal(v.deleted, 0);
    /* List shows entries only. */
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);

    /* Prune goes on past it, deletes the real entry, and reports the one it kept. */
    uint64_t removed = 9, left = 9;
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("not empty"));
    assert_int_equal(removed, 1);
    assert_int_equal(left, 0);
    assert_false(exists(path2));
    assert_true(exists(inside));

    /* Emptied by hand, the next verify removes it. */
    assert_int_equal(unlink(inside), 0);
    v = (verdicts){0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, tally, &v, &bad), FSA_STATUS_OK);
    assert_int_equal(v.deleted, 1);
    assert_false(exists(path));
    free(inside);
    free(path);
    free(path2);
    free(p);
    fsa_key_free(&k);
    fsa_key_free(&k2);
}

/* ------------------------------------------------------------ any NVRTC */

static void test_any_nvrtc_lookup_finds_an_entry_built_by_another_nvrtc(void **state)
{
    fixture *f = *state;
    fsa_kernel_key built, wanted, no_nvrtc, other_opts;
    make_key(&built, "128", "12.8", "-O3");
    make_key(&wanted, "128", "13.0", "-O3");
    make_key(&no_nvrtc, "128", NULL, "-O3");
    make_key(&other_opts, "128", "12.8", "-O2");
    uint8_t *p = make_payload(1200, 7);
    uint8_t *q = make_payload(1200, 8);
    publish(f->dc, &built, p, 1200);
    publish(f->dc, &other_opts, q, 1200); /* newer, but not the same kernel */

    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &wanted, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    expect_hit(f->dc, &wanted, 1, p, 1200);
    expect_hit(f->dc, &no_nvrtc, 1, p, 1200);
    fsa_disk_entry e;
    assert_int_equal(fsa_disk_cache_lookup(&e, f->dc, &no_nvrtc, TARGET, 1, &corrupt), FSA_STATUS_OK);
    assert_non_null(strstr(e.key_text, "\nnvrtc 12.8\n"));
    fsa_disk_entry_free(&e);

    /* The entry with other options is intact: left alone, not counted. */
    char *po = fsa_disk_cache_entry_path(f->dc, &other_opts, TARGET);
    assert_true(exists(po));
    assert_int_equal(corrupt, 0);
    free(po);
    free(p);
    free(q);
    fsa_key_free(&built);
    fsa_key_free(&wanted);
    fsa_key_free(&no_nvrtc);
    fsa_key_free(&other_opts);
}

static void test_any_nvrtc_lookup_prefers_the_newest_intact_entry(void **state)
{
    fixture *f = *state;
    fsa_kernel_key old_k, new_k, wanted;
    make_key(&old_k, "128", "12.8", "-O3");
    make_key(&new_k, "128", "12.9", "-O3");
    make_key(&wanted, "128", NULL, "-O3");
    uint8_t *p_old = make_payload(900, 9);
    uint8_t *p_new = make_payload(900, 10);
    publish(f->dc, &old_k, p_old, 900);
    publish(f->dc, &new_k, p_new, 900);
    char *path_old = fsa_disk_cache_entry_path(f->dc, &old_k, TARGET);
    char *path_new = fsa_disk_cache_entry_path(f->dc, &new_k, TARGET);
    time_t now = time(NULL);

    set_times(path_old, now - 100, now - 100);
    set_times(path_new, now - 50, now - 50);
    expect_hit(f->dc, &wanted, 1, p_new, 900);
    set_times(path_new, now - 200, now - 200);
    expect_hit(f->dc, &wanted, 1, p_old, 900);

    /* A damaged newest candidate is counted, deleted and passed over. */
    flip_byte(path_old, file_size(path_old) - 1);
    uint64_t corrupt = 0;
    fsa_disk_entry e;
    assert_int_equal(fsa_disk_cache_lookup(&e, f->dc, &wanted, TARGET, 1, &corrupt), FSA_STATUS_OK);
    assert_int_equal(corrupt, 1);
    assert_memory_equal(e.cubin, p_new, 900);
    assert_false(exists(path_old));
    fsa_disk_entry_free(&e);
    free(path_old);
    free(path_new);
    free(p_old);
    free(p_new);
    fsa_key_free(&old_k);
    fsa_key_free(&new_k);
    fsa_key_free(&wanted);
}

/* ------------------------------------------------------------ security */

static void test_a_compatible_lookup_takes_the_newest_entry_a_driver_of_that_major_version_loads(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k12, k13, none;
    make_key(&k12, "128", "12.4", "-O3");
    make_key(&k13, "128", "13.0", "-O3");
    make_key(&none, "128", NULL, "-O3");
    uint8_t *p12 = make_payload(500, 25), *p13 = make_payload(600, 26);
    publish(f->dc, &k12, p12, 500);
    publish(f->dc, &k13, p13, 600);
    char *path12 = fsa_disk_cache_entry_path(f->dc, &k12, TARGET);
    set_times(path12, time(NULL) - 100, time(NULL) - 100); /* the 13.0 entry is newer */

    fsa_disk_entry e;
    uint64_t corrupt = 0;
    assert_int_equal(fsa_disk_cache_lookup_compatible(&e, f->dc, &none, TARGET, 12, &corrupt), FSA_STATUS_OK);
    assert_int_equal(e.cubin_size, 500);
    assert_memory_equal(e.cubin, p12, 500);
    assert_string_equal(e.key_text, k12.text);
    fsa_disk_entry_free(&e);
    assert_int_equal(fsa_disk_cache_lookup_compatible(&e, f->dc, &none, TARGET, 13, &corrupt), FSA_STATUS_OK);
    assert_int_equal(e.cubin_size, 600);
    fsa_disk_entry_free(&e);
    assert_int_equal(fsa_disk_cache_lookup_compatible(&e, f->dc, &none, TARGET, 0, &corrupt), FSA_STATUS_OK);
    assert_int_equal(e.cubin_size, 600);
    fsa_disk_entry_free(&e);
    assert_int_equal(fsa_disk_cache_lookup_compatible(&e, f->dc, &none, TARGET, 11, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 0);
    free(path12);
    free(p12);
    free(p13);
    fsa_key_free(&k12);
    fsa_key_free(&k13);
    fsa_key_free(&none);
}

static int make_readable(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    (void)flag;
    return chmod(path, S_ISDIR(sb->st_mode) ? 0755 : 0644);
}

/* In a child running as uid 65534: opens the cache read-only and looks the
 * key up. 0 on a hit, 1 on a miss, 2 when the cache is refused, 77 when the
 * directory cannot be reached at all. */
static int lookup_as_another_user(const char *root, const fsa_kernel_key *k)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        if (access(root, R_OK | X_OK) != 0) _exit(FSA_TEST_SKIP_CODE);
        fsa_disk_cache *dc = NULL;
        if (fsa_disk_cache_open(&dc, root, 1) != FSA_STATUS_OK) _exit(2);
        fsa_disk_entry e;
        uint64_t corrupt = 0;
        fsa_status st = fsa_disk_cache_lookup(&e, dc, k, TARGET, 0, &corrupt);
        fsa_disk_entry_free(&e);
        fsa_disk_cache_close(dc);
        _exit(st == FSA_STATUS_OK ? 0 : 1);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    return WEXITSTATUS(ws);
}

static void test_a_cache_of_root_serves_other_users_unless_others_can_write_it(void **state)
{
    (void)state;
    if (geteuid() != 0) skip(); /* needs root to own the cache and to become another user */
    char root[] = "/tmp/fsa_root_cache.XXXXXX";
    assert_non_null(mkdtemp(root));
    fsa_disk_cache *dc = NULL;
    assert_int_equal(fsa_disk_cache_open(&dc, root, 0), FSA_STATUS_OK);
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(900, 27);
    publish(dc, &k, p, 900);
    fsa_disk_cache_close(dc);
    assert_int_equal(nftw(root, make_readable, 16, FTW_PHYS), 0);

    int rc = lookup_as_another_user(root, &k);
    if (rc == FSA_TEST_SKIP_CODE) {
        fsa_test_rmtree(root);
        skip();
    }
    assert_int_equal(rc, 0);
    /* An entry others may write could hold anything: a miss. */
    char *path = NULL;
    assert_int_equal(fsa_disk_cache_open(&dc, root, 1), FSA_STATUS_OK);
    path = fsa_disk_cache_entry_path(dc, &k, TARGET);
    fsa_disk_cache_close(dc);
    assert_int_equal(chmod(path, 0666), 0);
    assert_int_equal(lookup_as_another_user(root, &k), 1);
    /* So could a directory: refused. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(chmod(root, 0777), 0);
    assert_int_equal(lookup_as_another_user(root, &k), 2);
    free(path);
    free(p);
    fsa_key_free(&k);
    fsa_test_rmtree(root);
}

static void test_a_cache_directory_writable_by_others_is_refused(void **state)
{
    fixture *f = *state;
    fsa_disk_cache *dc = NULL;
    char *v1 = join(f->root, "v1");
    assert_int_equal(chmod(f->root, 0777), 0);
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 0), FSA_STATUS_CACHE_IO);
    assert_null(dc);
    assert_true(error_mentions(f->root));
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 1), FSA_STATUS_CACHE_IO);
    assert_int_equal(chmod(f->root, 0770), 0);
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 0), FSA_STATUS_CACHE_IO);

    /* Readable by others is fine; only writing matters. */
    assert_int_equal(chmod(f->root, 0755), 0);
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 0), FSA_STATUS_OK);
    fsa_disk_cache_close(dc);
    dc = NULL;

    assert_int_equal(chmod(v1, 0777), 0);
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 0), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions(v1));
    assert_int_equal(chmod(v1, 0700), 0);
    free(v1);
}

static void test_a_target_directory_writable_by_others_is_refused(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(100, 11);
    publish(f->dc, &k, p, 100);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    assert_int_equal(chmod(dir, 0777), 0);

    assert_int_equal(lookup_status(f->dc, &k, 0, NULL), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions(dir));
    assert_int_equal(lookup_status(f->dc, &k, 1, NULL), FSA_STATUS_CACHE_IO);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, TARGET, p, 100, ""), FSA_STATUS_CACHE_IO);
    assert_int_equal(fsa_disk_cache_lock(f->dc, &k, TARGET), -1);
    assert_int_equal(fsa_disk_cache_list(f->dc, NULL, NULL), FSA_STATUS_CACHE_IO);
    free(p);
    fsa_key_free(&k);
}

static void test_an_entry_owned_by_another_user_is_a_miss(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(600, 12);
    publish(f->dc, &k, p, 600);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    /* Our own entries are accepted. */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_uid, geteuid());
    expect_hit(f->dc, &k, 0, p, 600);

    /* Handing a file to another user needs root; elsewhere this part is skipped. */
    if (geteuid() == 0) {
        assert_int_equal(chown(path, 65534, 65534), 0);
        uint64_t corrupt = 0;
        assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
        assert_int_equal(corrupt, 1);
        assert_false(exists(path));
        publish(f->dc, &k, p, 600);
        expect_hit(f->dc, &k, 0, p, 600);
    }
    free(path);
    free(p);
    fsa_key_free(&k);
}

static void test_a_cache_directory_owned_by_another_user_is_refused(void **state)
{
    fixture *f = *state;
    if (geteuid() != 0) skip(); /* only root can give a directory away */
    fsa_disk_cache *dc = NULL;
    assert_int_equal(chown(f->root, 65534, 65534), 0);
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 0), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("owned by uid 65534"));
    assert_int_equal(chown(f->root, 0, 0), 0);
}

/* ------------------------------------------------------------ read-only */

static void test_a_read_only_cache_refuses_writes_but_serves_lookups(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k, k2;
    make_key(&k, "128", "13.0", "-O3");
    make_key(&k2, "64", "13.0", "-O3");
    uint8_t *p = make_payload(2000, 13);
    publish(f->dc, &k, p, 2000);
    publish(f->dc, &k2, p, 2000);
    reopen(f, 1);
    assert_int_equal(fsa_disk_cache_read_only(f->dc), 1);

    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, TARGET, p, 2000, ""), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("read-only"));
    expect_hit(f->dc, &k, 0, p, 2000);
    expect_hit(f->dc, &k, 1, p, 2000);
    assert_int_equal(fsa_disk_cache_lock(f->dc, &k, TARGET), -1);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, NULL, NULL), FSA_STATUS_CACHE_IO);

    /* A bad entry is still a counted miss, but it stays on disk. */
    char *path = fsa_disk_cache_entry_path(f->dc, &k2, TARGET);
    flip_byte(path, 70);
    uint64_t corrupt = 0, bad = 0;
    assert_int_equal(lookup_status(f->dc, &k2, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_true(exists(path));
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, NULL, NULL, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    assert_true(exists(path));
    free(path);
    free(p);
    fsa_key_free(&k);
    fsa_key_free(&k2);
}

static void test_a_read_only_open_of_a_missing_cache_fails_and_creates_nothing(void **state)
{
    fixture *f = *state;
    fsa_disk_cache *dc = NULL;
    char *missing = join(f->root, "not-there");
    assert_int_equal(fsa_disk_cache_open(&dc, missing, 1), FSA_STATUS_CACHE_IO);
    assert_false(exists(missing));
    /* Read-write creates every missing level privately. */
    char *deep = join(missing, "a/b");
    assert_int_equal(fsa_disk_cache_open(&dc, deep, 0), FSA_STATUS_OK);
    struct stat sb;
    assert_int_equal(stat(missing, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    fsa_disk_cache_close(dc);
    fsa_disk_cache_close(NULL);
    free(deep);
    free(missing);
}

/* ------------------------------------------------------------ concurrency */

#define N_PROCS 8
#define N_THREADS 4
#define N_ROUNDS 50
#define RACE_BYTES 65536

typedef struct race_arg {
    fsa_disk_cache *dc;
    const fsa_kernel_key *key;
    const uint8_t *payload;
    int failures;
} race_arg;

/* No cmocka asserts here: this runs in forked children. */
static void *race_thread(void *p)
{
    race_arg *a = p;
    for (int i = 0; i < N_ROUNDS; i++) {
        uint64_t corrupt = 0;
        fsa_disk_entry e;
        if (fsa_disk_cache_publish(a->dc, a->key, TARGET, a->payload, RACE_BYTES, "k") != FSA_STATUS_OK)
            a->failures++;
        fsa_status st = fsa_disk_cache_lookup(&e, a->dc, a->key, TARGET, i & 1, &corrupt);
        if (st != FSA_STATUS_OK || corrupt != 0 || e.cubin_size != RACE_BYTES ||
            memcmp(e.cubin, a->payload, RACE_BYTES) != 0 || strcmp(e.entry_names, "k") != 0)
            a->failures++;
        fsa_disk_entry_free(&e);
    }
    return NULL;
}

static int race_child(const char *root, const fsa_kernel_key *key, const uint8_t *payload)
{
    fsa_disk_cache *dc = NULL;
    if (fsa_disk_cache_open(&dc, root, 0) != FSA_STATUS_OK) return 2;
    pthread_t t[N_THREADS];
    race_arg args[N_THREADS];
    int failures = 0;
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (race_arg){dc, key, payload, 0};
        if (pthread_create(&t[i], NULL, race_thread, &args[i]) != 0) return 3;
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += args[i].failures;
    }
    fsa_disk_cache_close(dc);
    return failures ? 1 : 0;
}

static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_concurrent_publishers_and_readers_always_see_the_whole_entry(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(RACE_BYTES, 14);
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) _exit(race_child(f->root, &k, p));
    }
    for (int i = 0; i < N_PROCS; i++) {
        int ws = 0;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
    }
    expect_hit(f->dc, &k, 0, p, RACE_BYTES);
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    assert_int_equal(count_temp_files(dir), 0);
    free(p);
    fsa_key_free(&k);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void test_the_key_lock_makes_a_second_process_wait_for_the_first(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    char *marker = join(f->root, "released");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Holds the lock, then leaves a marker just before letting go. */
        int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
        if (fd < 0 || write(ready[1], "x", 1) != 1) _exit(2);
        usleep(300 * 1000);
        int m = open(marker, O_CREAT | O_WRONLY, 0600);
        if (m < 0) _exit(3);
        close(m);
        fsa_disk_cache_unlock(fd);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    double t0 = now_ms();
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
    double waited = now_ms() - t0;
    assert_true(fd >= 0);
    assert_true(exists(marker)); /* we got it only after the child released it */
    assert_true(waited > 100.0);
    fsa_disk_cache_unlock(fd);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);

    /* A lock file is not an entry. */
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 0);
    close(ready[0]);
    close(ready[1]);
    free(marker);
    fsa_key_free(&k);
}

/* ------------------------------------------------------------ maintenance */

typedef struct seen {
    int n, valid, stop_after;
    uint64_t bytes;
    char names[1024];
} seen;

static int remember(const fsa_cache_entry_info *info, void *user)
{
    seen *s = user;
    s->n++;
    s->valid += info->valid;
    s->bytes += info->bytes;
    assert_true(info->mtime > 0);
    assert_non_null(strstr(info->path, info->target));
    size_t len = strlen(s->names);
    snprintf(s->names + len, sizeof s->names - len, "%s/%s%s;", info->target, info->name,
             info->valid ? "" : "!");
    return s->stop_after && s->n >= s->stop_after;
}

static void publish_for(fsa_disk_cache *dc, const char *target, const char *head_dim, size_t n)
{
    fsa_kernel_key k;
    make_key(&k, head_dim, "13.0", "-O3");
    uint8_t *p = make_payload(n, 15);
    assert_int_equal(fsa_disk_cache_publish(dc, &k, target, p, n, "k"), FSA_STATUS_OK);
    free(p);
    fsa_key_free(&k);
}

static void test_list_visits_every_entry_of_every_target_and_nothing_else(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, "sm_80", "64", 100);
    publish_for(f->dc, "sm_80", "128", 200);
    publish_for(f->dc, "sm_90a", "128", 300);
    char *junk = join(f->root, "v1/sm_80/notes.txt");
    touch(junk);
    fsa_kernel_key k;
    make_key(&k, "256", "13.0", "-O3");
    fsa_disk_cache_unlock(fsa_disk_cache_lock(f->dc, &k, "sm_90a"));

    seen s = {0};
    assert_int_equal(fsa_disk_cache_list(f->dc, remember, &s), FSA_STATUS_OK);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.valid, 3);
    assert_string_equal(s.names, "sm_80/sel_fwd_main_bf16_d128;sm_80/sel_fwd_main_bf16_d64;"
                                 "sm_90a/sel_fwd_main_bf16_d128;");

    seen first = {.stop_after = 1};
    assert_int_equal(fsa_disk_cache_list(f->dc, remember, &first), FSA_STATUS_OK);
    assert_int_equal(first.n, 1);
    free(junk);
    fsa_key_free(&k);
}

static int reject_sm80(const fsa_disk_entry *entry, const char *target, void *user)
{
    assert_non_null(entry->cubin);
    assert_non_null(strstr(entry->key_text, "fsa-kernel-key"));
    (*(int *)user)++;
    return strcmp(target, "sm_80") == 0;
}

static void test_verify_deletes_and_counts_damaged_entries(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, TARGET, "64", 400);
    publish_for(f->dc, TARGET, "128", 400);
    publish_for(f->dc, TARGET, "256", 400);
    fsa_kernel_key k64, k128;
    make_key(&k64, "64", "13.0", "-O3");
    make_key(&k128, "128", "13.0", "-O3");
    char *p64 = fsa_disk_cache_entry_path(f->dc, &k64, TARGET);
    char *p128 = fsa_disk_cache_entry_path(f->dc, &k128, TARGET);
    flip_byte(p64, file_size(p64) - 10);
    /* Intact bytes under a name whose hex is not their key's digest. */
    char *renamed = join(f->root, "v1/" TARGET "/sel_fwd_main_bf16_d128.0123456789abcdef0123456789abcdef.cubin");
    assert_int_equal(rename(p128, renamed), 0);

    seen s = {0};
    uint64_t bad = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 2);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.valid, 1);
    assert_false(exists(p64));
    assert_false(exists(renamed));
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, NULL, NULL, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 0);
    free(renamed);
    free(p64);
    free(p128);
    fsa_key_free(&k64);
    fsa_key_free(&k128);
}

static void test_verify_deletes_entries_that_the_check_function_rejects(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, "sm_80", "64", 100);
    publish_for(f->dc, "sm_90a", "64", 100);
    int checked = 0;
    uint64_t bad = 0;
    seen s = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, reject_sm80, &checked, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(checked, 2);
    assert_int_equal(bad, 1);
    assert_string_equal(s.names, "sm_80/sel_fwd_main_bf16_d64!;sm_90a/sel_fwd_main_bf16_d64;");
    seen after = {0};
    assert_int_equal(fsa_disk_cache_list(f->dc, remember, &after), FSA_STATUS_OK);
    assert_string_equal(after.names, "sm_90a/sel_fwd_main_bf16_d64;");
}

static void test_prune_deletes_least_recently_used_entries_and_old_debris(void **state)
{
    fixture *f = *state;
    static const char *const dims[4] = {"32", "64", "128", "256"};
    char *paths[4];
    off_t sizes[4];
    for (int i = 0; i < 4; i++) {
        fsa_kernel_key k;
        make_key(&k, dims[i], "13.0", "-O3");
        publish_for(f->dc, TARGET, dims[i], 1000);
        paths[i] = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
        sizes[i] = file_size(paths[i]);
        fsa_key_free(&k);
    }
    time_t now = time(NULL);
    set_times(paths[0], now - 4000, now - 4000);
    set_times(paths[1], now - 3000, now - 3000);
    set_times(paths[2], now - 100, now - 5000); /* written long ago, read recently */
    set_times(paths[3], now - 1000, now - 1000);
    char *old_tmp = join(f->root, "v1/" TARGET "/.x.tmp.1.1");
    char *new_tmp = join(f->root, "v1/" TARGET "/.y.tmp.1.2");
    char *old_lock = join(f->root, "v1/" TARGET "/sel_fwd_main_bf16_d32.0123456789abcdef0123456789abcdef.lock");
    touch(old_tmp);
    touch(new_tmp);
    touch(old_lock);
    set_times(old_tmp, now - 7200, now - 7200);
    set_times(old_lock, now - 7200, now - 7200);

    uint64_t removed = 0, left = 0;
    uint64_t keep = (uint64_t)(sizes[2] + sizes[3]);
    assert_int_equal(fsa_disk_cache_prune(f->dc, keep, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 4); /* two entries, the old temp file, the stale lock */
    assert_int_equal(left, keep);
    assert_false(exists(paths[0]));
    assert_false(exists(paths[1]));
    assert_true(exists(paths[2]));
    assert_true(exists(paths[3]));
    assert_false(exists(old_tmp));
    assert_false(exists(old_lock));
    assert_true(exists(new_tmp));

    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 2);
    assert_int_equal(left, 0);
    for (int i = 0; i < 4; i++) free(paths[i]);
    free(old_tmp);
    free(new_tmp);
    free(old_lock);
}

/* A child that takes the key lock, says so on `ready`, then either stops
 * itself (SIGSTOP) or sleeps for a minute holding it. */
static pid_t lock_holder(fixture *f, const fsa_kernel_key *k, int stop_itself)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = fsa_disk_cache_lock(f->dc, k, TARGET);
        if (fd < 0 || write(ready[1], "x", 1) != 1) _exit(2);
        if (stop_itself) raise(SIGSTOP);
        sleep(60);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    close(ready[1]);
    if (stop_itself) {
        int ws = 0;
        assert_int_equal(waitpid(pid, &ws, WUNTRACED), pid);
        assert_true(WIFSTOPPED(ws));
    }
    return pid;
}

static void end_holder(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Asks for the lock in a child that an alarm kills after `limit_s`: a wait
 * that does not end fails the test instead of hanging it. Returns the
 * seconds the ask took, or -1 when the child got the lock anyway. */
static double ask_for_lock(fixture *f, const fsa_kernel_key *k, unsigned limit_s)
{
    double t0 = now_ms();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(limit_s);
        int fd = fsa_disk_cache_lock(f->dc, k, TARGET);
        _exit(fd >= 0 ? 1 : 0);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws)) fail_msg("waiting for the lock did not end within %u s (signal %d)", limit_s, WTERMSIG(ws));
    assert_true(WIFEXITED(ws));
    return WEXITSTATUS(ws) == 0 ? (now_ms() - t0) / 1e3 : -1.0;
}

static void test_a_lock_held_by_a_stopped_process_is_not_waited_for(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    pid_t holder = lock_holder(f, &k, 1);
    double took = ask_for_lock(f, &k, 20);
    end_holder(holder);
    assert_true(took >= 0.0); /* went on without the lock */
    assert_true(took < 5.0);
    fsa_key_free(&k);
}

static void test_a_lock_held_past_the_timeout_is_given_up(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    pid_t holder = lock_holder(f, &k, 0);
    assert_int_equal(setenv("FSA_CACHE_LOCK_TIMEOUT", "1", 1), 0);
    double took = ask_for_lock(f, &k, 20);
    unsetenv("FSA_CACHE_LOCK_TIMEOUT");
    end_holder(holder);
    assert_true(took >= 0.9);
    assert_true(took < 10.0);
    /* Once the holder is gone, the lock is there to take. */
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
    assert_true(fd >= 0);
    fsa_disk_cache_unlock(fd);
    fsa_key_free(&k);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_publish_then_lookup_returns_the_same_bytes_and_entry_names),
        T(test_the_entry_lives_at_root_v1_target_name_hex_cubin_in_private_directories),
        T(test_a_key_that_was_never_published_is_a_miss_that_is_not_counted),
        T(test_a_target_that_is_not_a_plain_name_is_rejected),
        T(test_a_truncated_entry_is_a_miss_and_is_deleted),
        T(test_an_entry_with_trailing_bytes_is_a_miss_and_is_deleted),
        T(test_a_zero_length_entry_is_a_miss_and_is_deleted),
        T(test_a_flipped_payload_byte_is_a_miss_and_is_deleted),
        T(test_a_flipped_header_byte_is_a_miss_and_is_deleted),
        T(test_a_flipped_entry_names_byte_is_a_miss_and_is_deleted),
        T(test_an_entry_of_the_previous_format_version_is_a_miss_and_is_replaced),
        T(test_an_entry_holding_another_key_is_a_miss_and_is_deleted),
        T(test_a_symlink_in_place_of_an_entry_is_a_miss_and_is_removed),
        T(test_a_stale_temp_file_is_not_an_entry_and_prune_removes_it),
        T(test_publish_removes_its_keys_temp_files_whose_writer_is_gone),
        T(test_an_empty_directory_at_an_entry_path_is_counted_once_removed_and_replaced),
        T(test_a_directory_with_files_at_an_entry_path_is_reported_as_kept_and_passed_over),
        T(test_any_nvrtc_lookup_finds_an_entry_built_by_another_nvrtc),
        T(test_any_nvrtc_lookup_prefers_the_newest_intact_entry),
        T(test_a_compatible_lookup_takes_the_newest_entry_a_driver_of_that_major_version_loads),
        T(test_a_cache_of_root_serves_other_users_unless_others_can_write_it),
        T(test_a_cache_directory_writable_by_others_is_refused),
        T(test_a_target_directory_writable_by_others_is_refused),
        T(test_an_entry_owned_by_another_user_is_a_miss),
        T(test_a_cache_directory_owned_by_another_user_is_refused),
        T(test_a_read_only_cache_refuses_writes_but_serves_lookups),
        T(test_a_read_only_open_of_a_missing_cache_fails_and_creates_nothing),
        T(test_concurrent_publishers_and_readers_always_see_the_whole_entry),
        T(test_the_key_lock_makes_a_second_process_wait_for_the_first),
        T(test_a_lock_held_by_a_stopped_process_is_not_waited_for),
        T(test_a_lock_held_past_the_timeout_is_given_up),
        T(test_list_visits_every_entry_of_every_target_and_nothing_else),
        T(test_verify_deletes_and_counts_damaged_entries),
        T(test_verify_deletes_entries_that_the_check_function_rejects),
        T(test_prune_deletes_least_recently_used_entries_and_old_debris),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
