/* What crashed writers and stray files leave in a disk cache, and how it
 * recovers: a writer's temporary file is not an entry, and is kept while its
 * writer holds its flock; publish removes those of its key whose writer is
 * gone (at once when they hold bytes; empty ones after a minute, or when
 * dated ahead of the clock), prune those of every key; an empty directory at
 * an entry path is counted once, removed and replaced, and one with files in it
 * is reported, kept and passed over by lookup, publish, verify, list and
 * prune. */
#include "disk_cache_fixture.h"

#include "jit/disk_cache_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void test_a_temp_file_is_not_an_entry_and_is_kept_while_its_writer_holds_it(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(800, 6);
    /* What a writer leaves behind until its rename. */
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET); /* creates the target directory */
    fsa_disk_cache_unlock(fd);
    char dir[4096], tmp[8192];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    snprintf(tmp, sizeof tmp, "%s/.%s.%s.tmp.4242.00000000deadbeef", dir, k.name, k.hex);
    touch(tmp);
    int writer = hold_file(tmp);

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
    set_times(tmp, time(NULL) - 7200, time(NULL) - 7200); /* however old */
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 0);
    assert_true(exists(tmp));
    close(writer); /* killed */
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

/* A temporary file of k's writer `pid`, dated age_s ago (negative: ahead),
 * with a few bytes in it or empty. */
static char *temp_file(fixture *f, const fsa_kernel_key *k, long pid, const char *suffix, time_t age_s, int empty)
{
    char leaf[512];
    snprintf(leaf, sizeof leaf, "v1/" TARGET "/.%s.%s.tmp.%ld.%s", k->name, k->hex, pid, suffix);
    char *path = join(f->root, leaf);
    touch(path);
    if (empty) assert_int_equal(truncate(path, 0), 0);
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
    /* Nobody holds these. */
    char *killed = temp_file(f, &k, getpid(), "01", 0, 0);     /* bytes written: gone at once, pid or not */
    char *just_made = temp_file(f, &k, gone, "02", 0, 1);      /* empty: its writer may not hold it yet */
    char *empty_old = temp_file(f, &k, gone, "03", 120, 1);    /* empty for two minutes */
    char *ahead = temp_file(f, &k, getpid(), "04", -3600, 1);  /* dated an hour ahead of the clock */
    char *another = temp_file(f, &other, gone, "05", 0, 0);    /* another key: left to prune */
    /* A live writer holds its file, whatever its age. */
    char *alive = temp_file(f, &k, gone, "06", 7200, 0);
    int writer = hold_file(alive);

    publish(f->dc, &k, p, 300);
    assert_false(exists(killed));
    assert_true(exists(just_made));
    assert_false(exists(empty_old));
    assert_false(exists(ahead));
    assert_true(exists(another));
    assert_true(exists(alive));
    expect_hit(f->dc, &k, 0, p, 300);

    /* Prune applies the same rule to every key. */
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(another));
    assert_true(exists(just_made));
    assert_true(exists(alive));
    close(writer);
    char *paths[] = {killed, just_made, empty_old, ahead, another, alive};
    for (size_t i = 0; i < 6; i++) free(paths[i]);
    free(p);
    fsa_key_free(&k);
    fsa_key_free(&other);
}

/* Whether the writer of a temporary file named fname, with these bytes and
 * this age (negative: dated ahead), is gone. */
static int writer_gone(const char *fname, off_t size, time_t age_s, int held)
{
    const time_t now = time(NULL);
    struct stat sb = {0};
    sb.st_mode = S_IFREG | 0600;
    sb.st_size = size;
    sb.st_mtime = now - age_s;
    return fsa_dc_temp_writer_gone(fname, &sb, held, now);
}

/* Where flock gives no answer (another user's file, a file system without
 * flock) a temporary file is judged by its age and the pid in its name. */
static void test_a_temp_file_flock_cannot_judge_goes_by_its_age_and_its_writers_pid(void **state)
{
    (void)state;
    char dead[128], live[128];
    snprintf(dead, sizeof dead, ".sel_fwd_main_bf16_d64.%032d.tmp.%ld.0123", 0, (long)dead_pid());
    snprintf(live, sizeof live, ".sel_fwd_main_bf16_d64.%032d.tmp.%ld.0123", 0, (long)getpid());
    assert_false(writer_gone(dead, 100, 30, -1));  /* its writer's pid is gone, but it is young */
    assert_true(writer_gone(dead, 100, 120, -1));  /* ... and a minute old */
    assert_true(writer_gone(dead, 0, 120, -1));    /* empty too: the pid says its writer is gone */
    assert_false(writer_gone(live, 100, 120, -1)); /* its writer runs */
    assert_true(writer_gone(live, 100, 700, -1));  /* ten minutes old: debris, whoever has the pid */
    assert_true(writer_gone(live, 0, -3600, -1));  /* dated ahead of the clock */
    /* A name without a pid that parses: only its age judges it. */
    assert_false(writer_gone(".x.tmp.12ab.0123", 100, 120, -1));
    assert_false(writer_gone(".x.tmp.", 100, 120, -1));
    assert_true(writer_gone(".x.tmp.12ab.0123", 100, 700, -1));
    /* A writer that holds its flock is never gone; with flock's answer "nobody", bytes or a minute suffice. */
    assert_false(writer_gone(dead, 100, 7200, 1));
    assert_true(writer_gone(live, 100, 0, 0));
    assert_false(writer_gone(live, 0, 30, 0));
    assert_true(writer_gone(live, 0, 120, 0));
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

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_a_temp_file_is_not_an_entry_and_is_kept_while_its_writer_holds_it),
        T(test_publish_removes_its_keys_temp_files_whose_writer_is_gone),
        T(test_a_temp_file_flock_cannot_judge_goes_by_its_age_and_its_writers_pid),
        T(test_an_empty_directory_at_an_entry_path_is_counted_once_removed_and_replaced),
        T(test_a_directory_with_files_at_an_entry_path_is_reported_as_kept_and_passed_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
