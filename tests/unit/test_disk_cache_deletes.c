/* The cache's deletes (a bad entry found by a lookup, an entry prune ranked
 * last) take only the file they judged, also when a writer renames a good
 * entry into place between the check and the delete, and take one whose
 * name is as long as a file name can be. This test program
 * stands in for rename and unlink (the library is linked in statically) to
 * land that writer's rename at exactly that moment: just before the first
 * rename or unlink of the entry path after the test arms it. */
#include "disk_cache_fixture.h"

#include "jit/disk_cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_armed_path; /* the entry path the writer's rename lands on */
static const char *g_writer_file; /* the writer's finished file, renamed over it */

static int real_rename(const char *from, const char *to) { return renameat(AT_FDCWD, from, AT_FDCWD, to); }
static int real_unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }

/* The writer's rename, once, when the library first touches the armed path. */
static void writer_lands_if_armed(const char *path)
{
    if (g_armed_path == NULL || strcmp(path, g_armed_path) != 0) return;
    g_armed_path = NULL;
    if (real_rename(g_writer_file, path) != 0) fail_msg("the writer's rename: %s", strerror(errno));
}

int rename(const char *from, const char *to)
{
    writer_lands_if_armed(from);
    return real_rename(from, to);
}

int unlink(const char *path)
{
    writer_lands_if_armed(path);
    return real_unlink(path);
}

static void flip_last_payload_byte(const char *path) { flip_byte(path, file_size(path) - 1); }

/* The files of the entry's directory: exactly the entry (none when entry_path is NULL), nothing set aside
 * left behind. */
static void expect_only_the_entry_in(const char *dir, const char *entry_path)
{
    const char *entry = entry_path ? strrchr(entry_path, '/') + 1 : NULL;
    DIR *d = opendir(dir);
    assert_non_null(d);
    int seen = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (entry == NULL || strcmp(e->d_name, entry) != 0) fail_msg("%s/%s is left in the cache", dir, e->d_name);
        seen++;
    }
    closedir(d);
    assert_int_equal(seen, entry ? 1 : 0);
}

/* A good entry published at `path`, then a damaged copy renamed over it
 * (judged: its stat), and the writer's good file (another inode) made ready
 * under another name. */
typedef struct race {
    fsa_kernel_key key;
    uint8_t *payload;
    char *path, *dir, *writer_file;
    struct stat judged, writer_sb;
} race;

static void race_make(race *r, fixture *f)
{
    make_key(&r->key, "128", "13.0", "-O3");
    r->payload = make_payload(900, 8);
    publish(f->dc, &r->key, r->payload, 900);
    r->path = fsa_disk_cache_entry_path(f->dc, &r->key, TARGET);
    r->dir = join(f->root, "v1/" TARGET);
    r->writer_file = join(r->dir, ".writer");
    char *damaged = join(r->dir, ".damaged");
    copy_file(r->path, r->writer_file);
    copy_file(r->path, damaged);
    flip_last_payload_byte(damaged);
    assert_int_equal(real_rename(damaged, r->path), 0);
    assert_int_equal(lstat(r->path, &r->judged), 0);
    assert_int_equal(lstat(r->writer_file, &r->writer_sb), 0);
    free(damaged);
}

static void race_free(race *r)
{
    free(r->writer_file);
    free(r->dir);
    free(r->path);
    free(r->payload);
    fsa_key_free(&r->key);
}

static void arm(race *r)
{
    g_armed_path = r->path;
    g_writer_file = r->writer_file;
}

/* After the race: the writer's file is the entry, it loads, and nothing was left aside. */
static void expect_the_writers_entry_alone(fixture *f, const race *r)
{
    assert_null(g_armed_path); /* the writer's rename landed inside the delete */
    struct stat now;
    assert_int_equal(lstat(r->path, &now), 0);
    assert_int_equal(now.st_ino, r->writer_sb.st_ino);
    expect_hit(f->dc, &r->key, 0, r->payload, 900);
    expect_only_the_entry_in(r->dir, r->path);
}

static void test_a_bad_entry_a_writer_replaces_between_the_check_and_the_delete_is_not_what_goes(void **state)
{
    fixture *f = *state;
    race r;
    race_make(&r, f);
    uint64_t corrupt = 0;
    arm(&r);
    const char *kept = fsa_dc_discard_bad(f->dc, r.path, &r.judged, &corrupt);
    assert_non_null(kept);
    assert_non_null(strstr(kept, "replaced"));
    expect_the_writers_entry_alone(f, &r);
    race_free(&r);
}

static void test_prune_keeps_an_entry_a_writer_renames_into_place_while_it_deletes(void **state)
{
    fixture *f = *state;
    race r;
    race_make(&r, f);
    uint64_t removed = 0, left = 0;
    arm(&r);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 0);
    expect_the_writers_entry_alone(f, &r);
    race_free(&r);
}

/* Without a writer, both deletes take the file and leave nothing aside. */
static void test_deletes_without_a_writer_leave_nothing_behind(void **state)
{
    fixture *f = *state;
    race r;
    race_make(&r, f);
    uint64_t corrupt = 0, removed = 0, left = 0;
    assert_null(fsa_dc_discard_bad(f->dc, r.path, &r.judged, &corrupt));
    assert_false(exists(r.path));
    assert_int_equal(real_rename(r.writer_file, r.path), 0);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(r.path));
    expect_only_the_entry_in(r.dir, NULL);
    race_free(&r);
}

/* An entry file whose name takes a whole file name (NAME_MAX bytes: no room for the suffix of the name it is
 * moved aside under) is deleted all the same, by verify (it is junk) and by prune, and nothing is left. */
static void test_an_entry_whose_name_takes_a_whole_file_name_is_deleted_by_verify_and_prune(void **state)
{
    fixture *f = *state;
    race r;
    race_make(&r, f); /* for its directory; its entry goes first */
    assert_int_equal(real_unlink(r.path), 0);
    assert_int_equal(real_unlink(r.writer_file), 0);
    char name[NAME_MAX + 1], *path;
    const size_t stem = NAME_MAX - (1 + 32 + strlen(".cubin"));
    memset(name, 'k', stem);
    snprintf(name + stem, sizeof name - stem, ".%s.cubin", r.key.hex);
    assert_int_equal(strlen(name), NAME_MAX);
    path = join(r.dir, name);
    touch(path);
    uint64_t bad = 0, removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, NULL, NULL, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    expect_only_the_entry_in(r.dir, NULL);
    touch(path);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(left, 0);
    expect_only_the_entry_in(r.dir, NULL);
    free(path);
    race_free(&r);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)
    const struct CMUnitTest tests[] = {
        T(test_a_bad_entry_a_writer_replaces_between_the_check_and_the_delete_is_not_what_goes),
        T(test_prune_keeps_an_entry_a_writer_renames_into_place_while_it_deletes),
        T(test_deletes_without_a_writer_leave_nothing_behind),
        T(test_an_entry_whose_name_takes_a_whole_file_name_is_deleted_by_verify_and_prune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
