/* Who may use a disk cache, and how: a cache or target directory that other
 * users can write, a cache directory another user owns and an entry another
 * user owns are refused (root's cache serves other users unless others can
 * write it), and so is a target directory that is a symbolic link; a
 * read-only cache serves lookups but publishes, locks, prunes and
 * deletes nothing, a read-only open of a missing cache creates nothing, an
 * empty cache its user cannot write is still listed, verified and pruned, a
 * version directory that cannot be searched fails them (it hides the entries),
 * and a relative cache directory stays the one opened after a chdir. */
#include "disk_cache_fixture.h"

#include <dirent.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ security */

/* How many names (not hidden) a directory holds. */
static int names_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) n += de->d_name[0] != '.';
    closedir(d);
    return n;
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
    assert_int_equal(fsa_test_make_tree_readable(root), 0);

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

    /* v1 is made by the first write: one others may write is refused by the open, and by the first
     * write when it appears after the open. */
    assert_int_equal(fsa_disk_cache_open(&dc, f->root, 0), FSA_STATUS_OK);
    assert_false(exists(v1));
    assert_int_equal(mkdir(v1, 0700), 0);
    assert_int_equal(chmod(v1, 0777), 0);
    fsa_disk_cache *dc2 = NULL;
    assert_int_equal(fsa_disk_cache_open(&dc2, f->root, 0), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions(v1));
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(100, 10);
    assert_int_equal(fsa_disk_cache_publish(dc, &k, TARGET, p, 100, ""), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions(v1));
    assert_int_equal(fsa_disk_cache_lock(dc, &k, TARGET), -1);
    assert_int_equal(names_in(v1), 0);
    assert_int_equal(chmod(v1, 0700), 0);
    fsa_disk_cache_close(dc);
    free(p);
    fsa_key_free(&k);
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

static void test_a_target_directory_that_is_a_symlink_is_refused_by_every_use(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(100, 12);
    publish(f->dc, &k, p, 100);
    char dir[4096], elsewhere[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", f->root);
    assert_int_equal(rename(dir, elsewhere), 0);
    assert_int_equal(symlink(elsewhere, dir), 0); /* a private directory, yet not the cache's own */

    assert_int_equal(lookup_status(f->dc, &k, 0, NULL), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("symbolic link"));
    assert_true(error_mentions(dir));
    assert_int_equal(lookup_status(f->dc, &k, 1, NULL), FSA_STATUS_CACHE_IO);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, TARGET, p, 100, ""), FSA_STATUS_CACHE_IO);
    assert_int_equal(fsa_disk_cache_lock(f->dc, &k, TARGET), -1);
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &(int){0}), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("symbolic link"));
    uint64_t bad = 0, removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, NULL, NULL, &bad), FSA_STATUS_CACHE_IO);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_CACHE_IO);
    assert_true(error_mentions("symbolic link"));
    assert_int_equal(removed, 0);
    /* Nothing reached through the link was written or deleted. */
    char entry[8192];
    snprintf(entry, sizeof entry, "%s/%s.%s.cubin", elsewhere, k.name, k.hex);
    assert_true(exists(entry));
    assert_int_equal(names_in(elsewhere), 1);
    /* A link to something else than a directory is no target: ignored. */
    assert_int_equal(unlink(dir), 0);
    assert_int_equal(symlink(entry, dir), 0);
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &(int){0}), FSA_STATUS_OK);
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

static void reopen(fixture *f, int read_only)
{
    fsa_disk_cache_close(f->dc);
    f->dc = NULL;
    assert_int_equal(fsa_disk_cache_open(&f->dc, f->root, read_only), FSA_STATUS_OK);
}

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
    /* A refused prune read nothing: the bytes left are unknown, not 0. */
    uint64_t removed = 7, left = 7;
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_CACHE_IO);
    assert_int_equal(removed, 0);
    assert_true(left == UINT64_MAX);

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

/* What listing, verifying and pruning a cache gave. */
typedef struct walk_statuses {
    fsa_status open, list, verify, prune;
    int listed;
    uint64_t bad, removed, left;
} walk_statuses;

/* For a child's body: becomes uid 65534 (when root: only root can), or exits 4. */
static void become_another_user(void)
{
    if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) _exit(4);
}

/* Lists, verifies and prunes (to 0 bytes) the open cache dc. */
static void walk_all(walk_statuses *w, fsa_disk_cache *dc)
{
    w->listed = 0;
    w->list = fsa_disk_cache_list(dc, count_entries, &w->listed);
    w->verify = fsa_disk_cache_verify(dc, NULL, NULL, NULL, NULL, &w->bad);
    w->prune = fsa_disk_cache_prune(dc, 0, &w->removed, &w->left);
}

/* In a child as uid 65534: opens the cache at arg read-write (as fsa-precompile does) and walks it. */
static void maintain_as_another_user(void *out, const void *arg)
{
    walk_statuses *w = out;
    become_another_user();
    fsa_disk_cache *dc = NULL;
    w->open = fsa_disk_cache_open(&dc, arg, 0);
    if (w->open != FSA_STATUS_OK) return;
    walk_all(w, dc);
    fsa_disk_cache_close(dc);
}

static void test_an_empty_cache_its_user_cannot_write_is_listed_verified_and_pruned(void **state)
{
    (void)state;
    if (geteuid() != 0) skip(); /* needs root to become another user */
    char root[] = "/tmp/fsa_unwritable_cache.XXXXXX";
    assert_non_null(mkdtemp(root));
    assert_int_equal(chown(root, 65534, 65534), 0);
    assert_int_equal(chmod(root, 0500), 0);
    walk_statuses w = {.bad = 1, .removed = 1, .left = 1}; /* each must be overwritten */
    fsa_test_in_child(&w, sizeof w, maintain_as_another_user, root);
    assert_int_equal(chmod(root, 0700), 0);
    assert_int_equal(names_in(root), 0);
    fsa_test_rmtree(root);
    assert_int_equal(w.open, FSA_STATUS_OK);
    assert_int_equal(w.list, FSA_STATUS_OK);
    assert_int_equal(w.listed, 0);
    assert_int_equal(w.verify, FSA_STATUS_OK);
    assert_int_equal(w.bad, 0);
    assert_int_equal(w.prune, FSA_STATUS_OK);
    assert_int_equal(w.removed, 0);
    assert_int_equal(w.left, 0);
}

/* In a child (as uid 65534, the cache's owner, when run as root, whom permissions do not stop): walks the
 * cache at arg with v1 made unsearchable (mode 0600). */
static void walk_unsearchable_v1(void *out, const void *arg)
{
    const char *root = arg;
    walk_statuses *w = out;
    become_another_user();
    fsa_disk_cache *dc = NULL;
    w->open = fsa_disk_cache_open(&dc, root, 0);
    if (w->open != FSA_STATUS_OK) return;
    char *v1 = join(root, "v1");
    if (chmod(v1, 0600) != 0) _exit(5);
    walk_all(w, dc);
    if (chmod(v1, 0700) != 0) _exit(5);
    free(v1);
    fsa_disk_cache_close(dc);
}

/* A v1 directory whose targets cannot be reached (no search permission) hides the entries: list, verify
 * and prune fail with the reason instead of finding nothing (0 entries, a clean verify, 0 bytes left). */
static void test_a_version_directory_that_cannot_be_searched_fails_list_verify_and_prune(void **state)
{
    (void)state;
    char root[] = "/tmp/fsa_unsearchable_cache.XXXXXX";
    assert_non_null(mkdtemp(root));
    fsa_disk_cache *dc = NULL;
    assert_int_equal(fsa_disk_cache_open(&dc, root, 0), FSA_STATUS_OK);
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(100, 14);
    publish(dc, &k, p, 100);
    char *entry = fsa_disk_cache_entry_path(dc, &k, TARGET), *v1 = join(root, "v1"), *dir = join(v1, TARGET);
    fsa_disk_cache_close(dc);
    if (geteuid() == 0) { /* the child's, as uid 65534 */
        const char *const mine[] = {root, v1, dir, entry};
        for (size_t i = 0; i < sizeof mine / sizeof *mine; i++) assert_int_equal(chown(mine[i], 65534, 65534), 0);
    }
    walk_statuses w = {0};
    fsa_test_in_child(&w, sizeof w, walk_unsearchable_v1, root);
    fsa_test_rmtree(root);
    assert_int_equal(w.open, FSA_STATUS_OK);
    assert_int_equal(w.list, FSA_STATUS_CACHE_IO);
    assert_int_equal(w.listed, 0);
    assert_int_equal(w.verify, FSA_STATUS_CACHE_IO);
    assert_int_equal(w.prune, FSA_STATUS_CACHE_IO);
    assert_true(w.left == UINT64_MAX); /* unknown, not 0 */
    free(entry);
    free(dir);
    free(v1);
    free(p);
    fsa_key_free(&k);
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

/* A relative cache directory names the directory it named when the cache was
 * opened: the owner and mode checks were made there. A process that changes
 * its working directory afterwards must neither lose its cache nor publish
 * into a directory at the same relative path that nobody checked (here one
 * that other users may write). */
static void test_a_relative_cache_directory_stays_the_one_opened_after_a_chdir(void **state)
{
    fixture *f = *state;
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    char *first = join(f->root, "first"), *second = join(f->root, "second");
    char *planted = join(second, "rel/v1");
    assert_int_equal(mkdir(first, 0700), 0);
    assert_int_equal(mkdir(second, 0700), 0);
    assert_int_equal(chdir(first), 0);
    fsa_disk_cache *dc = NULL;
    assert_int_equal(fsa_disk_cache_open(&dc, "rel", 0), FSA_STATUS_OK);
    char *want = join(first, "rel");
    assert_string_equal(fsa_disk_cache_root(dc), want);
    fsa_kernel_key k, k2;
    make_key(&k, "128", "13.0", "-O3");
    make_key(&k2, "64", "13.0", "-O3");
    uint8_t *p = make_payload(500, 41);
    publish(dc, &k, p, 500);
    /* Elsewhere, rel/v1 exists and is writable by others. */
    char *rel = join(second, "rel");
    assert_int_equal(mkdir(rel, 0700), 0);
    assert_int_equal(mkdir(planted, 0777), 0);
    assert_int_equal(chmod(planted, 0777), 0);
    assert_int_equal(chdir(second), 0);
    expect_hit(dc, &k, 0, p, 500);
    publish(dc, &k2, p, 500);
    char *stray = join(planted, TARGET);
    assert_false(exists(stray));
    assert_int_equal(chdir(first), 0);
    expect_hit(dc, &k2, 0, p, 500);
    assert_int_equal(chdir(cwd), 0);
    fsa_disk_cache_close(dc);
    free(stray);
    free(rel);
    free(want);
    free(p);
    fsa_key_free(&k);
    fsa_key_free(&k2);
    free(planted);
    free(first);
    free(second);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_a_cache_of_root_serves_other_users_unless_others_can_write_it),
        T(test_a_cache_directory_writable_by_others_is_refused),
        T(test_a_target_directory_writable_by_others_is_refused),
        T(test_a_target_directory_that_is_a_symlink_is_refused_by_every_use),
        T(test_an_entry_owned_by_another_user_is_a_miss),
        T(test_a_cache_directory_owned_by_another_user_is_refused),
        T(test_a_read_only_cache_refuses_writes_but_serves_lookups),
        T(test_a_read_only_open_of_a_missing_cache_fails_and_creates_nothing),
        T(test_an_empty_cache_its_user_cannot_write_is_listed_verified_and_pruned),
        T(test_a_version_directory_that_cannot_be_searched_fails_list_verify_and_prune),
        T(test_a_relative_cache_directory_stays_the_one_opened_after_a_chdir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
