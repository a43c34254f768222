/* The disk cache's maintenance walks: list visits every entry of every
 * target and nothing else (and, like verify and prune, creates nothing in a
 * cache that holds nothing); verify deletes and counts damaged entries, those no
 * lookup reaches (another target's directory, a name the key does not give) and those
 * a check function rejects, keeps those it cannot check, skips another
 * format version's entries and leaves access times alone; on a device, only a
 * load error that condemns the image deletes an entry; prune deletes the
 * least recently used entries (a hit records its use, a time dated ahead
 * counts as the oldest), never one a writer replaced since its scan, and old
 * debris (temporary files, stale locks, a link, FIFO or empty directory at a
 * lock path). */
#include "disk_cache_fixture.h"

#include "jit/context.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ maintenance */

typedef struct seen {
    int n, valid, loaded, records, stop_after;
    uint64_t bytes;
    char names[1024];
} seen;

static int remember(const fsa_cache_entry_info *info, void *user)
{
    seen *s = user;
    s->n++;
    s->valid += info->valid;
    s->loaded += info->loaded;
    s->records += info->record;
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
    make_key_for(&k, target, head_dim, "13.0", "-O3");
    uint8_t *p = make_payload(n, 15);
    assert_int_equal(fsa_disk_cache_publish(dc, &k, target, p, n, "k"), FSA_STATUS_OK);
    free(p);
    fsa_key_free(&k);
}

static void test_list_verify_and_prune_of_a_cache_that_holds_nothing_create_nothing(void **state)
{
    fixture *f = *state;
    char *v1 = join(f->root, "v1");
    int n = 0;
    uint64_t bad = 1, removed = 1, left = 1;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, NULL, NULL, &bad), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(n, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(removed, 0);
    assert_int_equal(left, 0);
    assert_false(exists(v1));
    /* The first publish makes it, private. */
    publish_for(f->dc, TARGET, "64", 100);
    struct stat sb;
    assert_int_equal(stat(v1, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);
    free(v1);
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

/* Only "<name>.<32 lower-case hex digits>.cubin" is an entry: a file whose
 * digest has other letters, with no name before the digest or no dot between
 * them is someone else's, neither listed, counted as damaged, nor deleted. */
static void test_files_not_named_like_entries_are_left_alone(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, TARGET, "64", 100);
    const char *names[] = {"sel_fwd_main_bf16_d64.0123456789abcdefghijklmnopqrstuv.cubin",
                           "sel_fwd_main_bf16_d64.0123456789ABCDEF0123456789ABCDEF.cubin",
                           ".0123456789abcdef0123456789abcdef.cubin",
                           "sel_fwd_main_bf16_d64_0123456789abcdef0123456789abcdef.cubin",
                           ".notes.tmp.txt", /* a dot-file with ".tmp." in it, but no writer's pid and suffix */
                           ".notes.tmp.12.draft"};
    char *paths[6];
    for (int i = 0; i < 6; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "v1/" TARGET "/%s", names[i]);
        paths[i] = join(f->root, rel);
        FILE *fp = fopen(paths[i], "w"); /* bytes in it: an unheld temporary file with bytes is debris */
        assert_non_null(fp);
        fputs("notes", fp);
        assert_int_equal(fclose(fp), 0);
    }
    seen s = {0};
    uint64_t bad = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 0);
    assert_int_equal(s.n, 1);
    /* Nor does prune take them for debris. */
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 0);
    for (int i = 0; i < 6; i++) {
        if (!exists(paths[i])) fail_msg("%s was deleted", names[i]);
        free(paths[i]);
    }
}

static int reject_sm80(const fsa_disk_entry *entry, const char *target, const char *path, void *user)
{
    assert_non_null(strstr(path, target));
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

/* A socket where an entry would be (open gives ENXIO, not ELOOP or EACCES) is a bad entry like a FIFO: verify
 * deletes it and goes on to the entries after it, instead of stopping with an I/O error. */
static void test_verify_deletes_a_socket_at_an_entry_path_and_goes_on(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, TARGET, "64", 400);
    static const char sock_name[] = "sock.0123456789abcdef0123456789abcdef.cubin";
    char *dir = join(f->root, "v1/" TARGET), *sock_path = join(dir, sock_name);
    /* Bound by a name relative to its directory: a socket's path must fit 108 bytes, the cache root need not. */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, sock_name);
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    const int bound = bind(fd, (const struct sockaddr *)&addr, sizeof addr);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(bound, 0);
    seen s = {0};
    uint64_t bad = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.valid, 1);
    assert_false(exists(sock_path));
    close(fd);
    free(sock_path);
    free(dir);
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

/* A whole entry copied into another target's directory: no lookup there can
 * match its key (the key names its target), so verify calls it bad and
 * deletes it, on disk alone (no check function); the original stays. */
static void test_verify_deletes_an_entry_copied_into_another_targets_directory(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, "sm_80", "64", 100);
    publish_for(f->dc, "sm_90a", "128", 100);
    fsa_kernel_key k;
    make_key_for(&k, "sm_80", "64", "13.0", "-O3");
    char *original = fsa_disk_cache_entry_path(f->dc, &k, "sm_80");
    char *copy = fsa_disk_cache_entry_path(f->dc, &k, "sm_90a");
    FILE *in = fopen(original, "rb"), *out = fopen(copy, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
    uint64_t bad = 0;
    seen s = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    assert_int_equal(s.valid, 2);
    assert_true(exists(original));
    assert_false(exists(copy));
    free(original);
    free(copy);
    fsa_key_free(&k);
}

/* A whole entry under a readable name its key does not give (renamed, or another file kind's text under a
 * kernel's name) keeps its digest, yet a lookup builds the file name from the key and never reads it: verify
 * calls it bad and deletes it; the original stays. */
static void test_verify_deletes_an_entry_stored_under_a_name_its_key_does_not_give(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "64", "13.0", "-O3");
    publish_for(f->dc, TARGET, "64", 100);
    char *original = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    char *dir = join(f->root, "v1/" TARGET);
    char renamed[4096];
    snprintf(renamed, sizeof renamed, "%s/sel_bwd_main_bf16_d64.%s.cubin", dir, k.hex);
    copy_file(original, renamed);
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_OK); /* the original */
    uint64_t bad = 0;
    seen s = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    assert_int_equal(s.valid, 1);
    assert_non_null(strstr(s.names, TARGET "/sel_bwd_main_bf16_d64!;"));
    assert_false(exists(renamed));
    assert_true(exists(original));
    free(dir);
    free(original);
    fsa_key_free(&k);
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
    int writer = hold_file(new_tmp); /* a live writer's */
    touch(old_lock);
    set_times(old_tmp, now - 7200, now - 7200);
    set_times(old_lock, now - 7200, now - 7200);

    uint64_t removed = 0, left = 0;
    /* The live writer's bytes count against the limit too. */
    uint64_t keep = (uint64_t)(sizes[2] + sizes[3] + file_size(new_tmp));
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
    assert_int_equal(left, (uint64_t)file_size(new_tmp));
    /* The writer dies: its file goes at once, whatever its age. */
    close(writer);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(left, 0);
    assert_false(exists(new_tmp));
    for (int i = 0; i < 4; i++) free(paths[i]);
    free(old_tmp);
    free(new_tmp);
    free(old_lock);
}

/* A key's lock file stays while someone holds it or used it within the hour;
 * one dated ahead of the clock (past the allowed skew) cannot be judged by
 * age and goes too once nobody holds it. */
/* Tuning records rank with the cubins by their last use: an old record goes
 * before a newer cubin, and --max-bytes 0 leaves neither. */
static void test_prune_ranks_tuning_records_with_the_entries(void **state)
{
    fixture *f = *state;
    fsa_kernel_key cubin, record;
    make_key(&cubin, "64", "13.0", "-O3");
    make_key(&record, "128", "13.0", "-O3"); /* any key text: the disk layer does not read it */
    publish_for(f->dc, TARGET, "64", 1000);
    assert_int_equal(fsa_disk_cache_publish_record(f->dc, &record, TARGET, "fsa-tuning-record 1\nop fwd\nwinner fsa\nend\n"),
                     FSA_STATUS_OK);
    char *cubin_path = fsa_disk_cache_entry_path(f->dc, &cubin, TARGET);
    char *record_path = fsa_disk_cache_record_path(f->dc, &record, TARGET);
    assert_true(exists(record_path));
    const time_t now = time(NULL);
    set_times(record_path, now - 5000, now - 5000); /* older than the cubin */
    set_times(cubin_path, now - 100, now - 100);
    uint64_t removed = 0, left = 0;
    /* Room for the cubin alone: the older record goes. */
    assert_int_equal(fsa_disk_cache_prune(f->dc, (uint64_t)file_size(cubin_path), &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(record_path));
    assert_true(exists(cubin_path));
    assert_int_equal(fsa_disk_cache_publish_record(f->dc, &record, TARGET, "fsa-tuning-record 1\nop fwd\nwinner fsa\nend\n"),
                     FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_prune(f->dc, 0, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 2);
    assert_int_equal(left, 0);
    assert_false(exists(record_path));
    assert_false(exists(cubin_path));
    free(cubin_path);
    free(record_path);
    fsa_key_free(&cubin);
    fsa_key_free(&record);
}

static void test_prune_removes_unheld_lock_files_that_are_old_or_dated_ahead(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "64", "13.0", "-O3");
    fsa_disk_cache_unlock(fsa_disk_cache_lock(f->dc, &k, TARGET)); /* the target directory, a fresh lock */
    fsa_key_free(&k);
    char *old = join(f->root, "v1/" TARGET "/sel_fwd_main_bf16_d32.00000000000000000000000000000001.lock");
    char *ahead = join(f->root, "v1/" TARGET "/sel_fwd_main_bf16_d32.00000000000000000000000000000002.lock");
    char *fresh = join(f->root, "v1/" TARGET "/sel_fwd_main_bf16_d32.00000000000000000000000000000003.lock");
    char *held = join(f->root, "v1/" TARGET "/sel_fwd_main_bf16_d32.00000000000000000000000000000004.lock");
    const time_t now = time(NULL);
    touch(old);
    touch(ahead);
    touch(fresh);
    touch(held);
    set_times(old, now - 7200, now - 7200);
    set_times(ahead, now + 365 * 86400, now + 365 * 86400);
    set_times(fresh, now - 100, now - 100);
    set_times(held, now - 7200, now - 7200);
    int holder = hold_file(held);

    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 2);
    assert_false(exists(old));
    assert_false(exists(ahead));
    assert_true(exists(fresh));
    assert_true(exists(held));
    close(holder);
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(held));
    assert_true(exists(fresh));
    free(old);
    free(ahead);
    free(fresh);
    free(held);
}

/* Something other than a file at a key's lock path (a link, a FIFO, an empty
 * directory) keeps every process from locking that key: each compiles it
 * without the lock, for ever. Prune removes it, as it removes such things at
 * an entry's path, and the key locks again. */
static void test_prune_removes_a_link_fifo_or_empty_directory_at_a_lock_path(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "64", "13.0", "-O3");
    fsa_disk_cache_unlock(fsa_disk_cache_lock(f->dc, &k, TARGET)); /* the target directory */
    char *entry = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    assert_non_null(entry);
    char *lock = strdup(entry);
    assert_non_null(lock);
    strcpy(lock + strlen(lock) - strlen(".cubin"), ".lock");
    for (int kind = 0; kind < 3; kind++) {
        assert_int_equal(unlink(lock), 0);
        if (kind == 0) assert_int_equal(symlink("/nonexistent", lock), 0);
        if (kind == 1) assert_int_equal(mkfifo(lock, 0600), 0);
        if (kind == 2) assert_int_equal(mkdir(lock, 0700), 0);
        assert_int_equal(fsa_disk_cache_lock(f->dc, &k, TARGET), -1);
        uint64_t removed = 0, left = 0;
        assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_OK);
        assert_int_equal(removed, 1);
        int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
        assert_true(fd >= 0);
        fsa_disk_cache_unlock(fd);
    }
    /* A directory with files in it is not ours to empty: kept, and reported (it was passed over in silence,
     * the prune returning OK while the key could never lock). */
    assert_int_equal(unlink(lock), 0);
    assert_int_equal(mkdir(lock, 0700), 0);
    char *inside = join(lock, "someone_elses_file");
    touch(inside);
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, UINT64_MAX, &removed, &left), FSA_STATUS_CACHE_IO);
    fsa_test_expect_error("disk-cache", "1 file kept");
    assert_int_equal(removed, 0);
    assert_true(exists(inside));
    assert_int_equal(unlink(inside), 0);
    assert_int_equal(rmdir(lock), 0);
    free(inside);
    free(lock);
    free(entry);
    fsa_key_free(&k);
}

static int cannot_check(const fsa_disk_entry *entry, const char *target, const char *path, void *user)
{
    (void)entry;
    (void)target;
    (void)path;
    (*(int *)user)++;
    return FSA_DISK_CHECK_UNCHECKED;
}

static int passes_check(const fsa_disk_entry *entry, const char *target, const char *path, void *user)
{
    (void)entry;
    (void)target;
    (void)path;
    (void)user;
    return FSA_DISK_CHECK_GOOD;
}

static void test_verify_marks_loaded_only_the_entries_its_check_function_passed(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, TARGET, "64", 100);
    seen s = {0};
    uint64_t bad = 9;
    assert_int_equal(fsa_disk_cache_verify(f->dc, passes_check, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(s.valid, 1);
    assert_int_equal(s.loaded, 1);
    /* Without a check function (an offline context) the disk is all that was read; list reads nothing. */
    seen disk_only = {0}, listed = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &disk_only, &bad), FSA_STATUS_OK);
    assert_int_equal(disk_only.valid, 1);
    assert_int_equal(disk_only.loaded, 0);
    assert_int_equal(fsa_disk_cache_list(f->dc, remember, &listed), FSA_STATUS_OK);
    assert_int_equal(listed.loaded, 0);
}

static void test_verify_keeps_entries_that_the_check_function_cannot_check(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, TARGET, "64", 100);
    int checked = 0;
    uint64_t bad = 9;
    seen s = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, cannot_check, &checked, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(checked, 1);
    assert_int_equal(bad, 0);
    assert_string_equal(s.names, TARGET "/sel_fwd_main_bf16_d64;");
    assert_int_equal(s.loaded, 0); /* valid on disk, but nothing ran it */
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);
}

/* Tuning records are entries too: list shows them, verify re-hashes them and
 * deletes a damaged one, and never hands one to the check function (a record
 * is no image to load), so a valid record is never reported loaded. */
static void test_list_and_verify_visit_tuning_records_checked_on_disk_only(void **state)
{
    fixture *f = *state;
    fsa_kernel_key record;
    make_key(&record, "128", "13.0", "-O3");
    publish_for(f->dc, TARGET, "64", 100);
    assert_int_equal(fsa_disk_cache_publish_record(f->dc, &record, TARGET, "fsa-tuning-record 1\nop fwd\nwinner fsa\nend\n"),
                     FSA_STATUS_OK);
    char *record_path = fsa_disk_cache_record_path(f->dc, &record, TARGET);

    seen listed = {0};
    assert_int_equal(fsa_disk_cache_list(f->dc, remember, &listed), FSA_STATUS_OK);
    assert_int_equal(listed.n, 2);
    assert_int_equal(listed.records, 1);
    assert_non_null(strstr(listed.names, TARGET "/sel_fwd_main_bf16_d128;")); /* the record, by its key's name */

    int checked = 0;
    uint64_t bad = 9;
    seen verified = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, cannot_check, &checked, remember, &verified, &bad), FSA_STATUS_OK);
    assert_int_equal(checked, 1); /* the kernel only */
    assert_int_equal(bad, 0);
    assert_int_equal(verified.valid, 2);
    assert_int_equal(verified.records, 1);
    seen passed = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, passes_check, NULL, remember, &passed, &bad), FSA_STATUS_OK);
    assert_int_equal(passed.loaded, 1); /* the kernel; the record was not handed over */

    flip_byte(record_path, file_size(record_path) - 3);
    seen damaged = {0};
    assert_int_equal(fsa_disk_cache_verify(f->dc, passes_check, NULL, remember, &damaged, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(damaged.names, TARGET "/sel_fwd_main_bf16_d128!;"));
    assert_false(exists(record_path));
    free(record_path);
    fsa_key_free(&record);
}

static void test_verify_skips_an_entry_of_another_format_version_and_keeps_it(void **state)
{
    fixture *f = *state;
    publish_for(f->dc, TARGET, "64", 100);
    publish_for(f->dc, TARGET, "128", 100);
    fsa_kernel_key k;
    make_key(&k, "64", "13.0", "-O3");
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    flip_byte(path, 8); /* the format version: another library's entry */
    off_t size = file_size(path);

    seen s = {0};
    uint64_t bad = 9;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, remember, &s, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 0);
    assert_string_equal(s.names, TARGET "/sel_fwd_main_bf16_d128;");
    assert_true(exists(path));
    assert_int_equal(file_size(path), size);
    /* It is still a file of the cache: list shows it, prune counts it. */
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 2);
    free(path);
    fsa_key_free(&k);
}

static struct timespec atime_of(const char *path)
{
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    return sb.st_atim;
}

static char *publish_dim(fixture *f, const char *dim, size_t n)
{
    fsa_kernel_key k;
    make_key(&k, dim, "13.0", "-O3");
    publish_for(f->dc, TARGET, dim, n);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    fsa_key_free(&k);
    return path;
}

static void test_verify_leaves_the_entries_access_times_as_they_were(void **state)
{
    fixture *f = *state;
    char *a = publish_dim(f, "64", 500), *b = publish_dim(f, "128", 500);
    time_t now = time(NULL);
    /* Read before written: what relatime would update on a plain read. */
    set_times(a, now - 5000, now - 4000);
    set_times(b, now - 3000, now - 2000);
    int checked = 0;
    uint64_t bad = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, cannot_check, &checked, NULL, NULL, &bad), FSA_STATUS_OK);
    assert_int_equal(checked, 2);
    assert_int_equal(atime_of(a).tv_sec, now - 5000);
    assert_int_equal(atime_of(b).tv_sec, now - 3000);

    /* So a prune after it still evicts the least recently used. */
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, (uint64_t)file_size(b), &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(a));
    assert_true(exists(b));
    free(a);
    free(b);
}

static void expect_hit_of(fixture *f, const char *dim, int any_nvrtc)
{
    fsa_kernel_key k;
    make_key(&k, dim, "13.0", "-O3");
    uint8_t *p = make_payload(500, 15);
    expect_hit(f->dc, &k, any_nvrtc, p, 500);
    free(p);
    fsa_key_free(&k);
}

static void test_a_hit_records_its_use_so_prune_evicts_the_entry_that_was_not_used(void **state)
{
    fixture *f = *state;
    char *a = publish_dim(f, "64", 500), *b = publish_dim(f, "128", 500), *c = publish_dim(f, "256", 500);
    time_t now = time(NULL);
    set_times(a, now - 6000, now - 6000);
    set_times(b, now - 5000, now - 5000);
    set_times(c, now - 4000, now - 4000);
    expect_hit_of(f, "64", 0);  /* exact */
    expect_hit_of(f, "128", 1); /* any NVRTC */
    assert_true(atime_of(a).tv_sec >= now);
    assert_true(atime_of(b).tv_sec >= now);

    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, (uint64_t)(file_size(a) + file_size(b)), &removed, &left),
                     FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_true(exists(a));
    assert_true(exists(b));
    assert_false(exists(c));
    free(a);
    free(b);
    free(c);
}

static void test_a_hit_records_its_use_at_most_once_an_hour(void **state)
{
    fixture *f = *state;
    char *a = publish_dim(f, "64", 500);
    time_t now = time(NULL);
    set_times(a, now - 600, now - 6000);
    expect_hit_of(f, "64", 0);
    expect_hit_of(f, "64", 1);
    assert_int_equal(atime_of(a).tv_sec, now - 600); /* recorded ten minutes ago: a hit only reads */
    set_times(a, now - 4000, now - 6000);
    expect_hit_of(f, "64", 0);
    assert_true(atime_of(a).tv_sec >= now);
    free(a);
}

static void test_prune_ranks_an_entry_dated_in_the_future_as_the_oldest_until_a_hit_uses_it(void **state)
{
    fixture *f = *state;
    char *a = publish_dim(f, "64", 500), *ahead = publish_dim(f, "128", 500), *c = publish_dim(f, "256", 500);
    time_t now = time(NULL), next_year = now + 365 * 86400;
    set_times(a, now - 4000, now - 4000);
    set_times(ahead, next_year, next_year); /* written under a clock a year fast */
    set_times(c, now - 100, now - 100);
    uint64_t removed = 0, left = 0;
    uint64_t two = (uint64_t)(file_size(a) + file_size(c));
    assert_int_equal(fsa_disk_cache_prune(f->dc, two, &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(ahead));
    assert_true(exists(a));
    assert_true(exists(c));

    /* Used since: ranked by that use, not by its date. */
    free(publish_dim(f, "128", 500));
    set_times(ahead, next_year, next_year);
    expect_hit_of(f, "128", 0);
    /* The file clock may run a tick ahead of time(): the use is now, not next year. */
    assert_true(atime_of(ahead).tv_sec <= time(NULL) + 1);
    assert_int_equal(fsa_disk_cache_prune(f->dc, (uint64_t)(file_size(ahead) + file_size(c)), &removed, &left),
                     FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_false(exists(a));
    assert_true(exists(ahead));
    assert_true(exists(c));
    free(a);
    free(ahead);
    free(c);
}

/* This binary's unlink and rename, which the library's calls reach too:
 * once armed, the delete of race_first (prune moves an entry aside, then
 * deletes it there) also lets a "writer" rename a fresh entry over race_next,
 * an entry prune has scanned and ranked to delete next. That is a publish
 * landing between prune's scan and its deletes. */
static const char *race_first, *race_next, *race_fresh;

static int real_rename(const char *from, const char *to) { return renameat(AT_FDCWD, from, AT_FDCWD, to); }

static int writer_lands_if_armed(const char *path)
{
    if (race_first == NULL || strcmp(path, race_first) != 0) return 0;
    race_first = NULL;
    return real_rename(race_fresh, race_next);
}

int unlink(const char *path)
{
    if (writer_lands_if_armed(path) != 0) return -1;
    return unlinkat(AT_FDCWD, path, 0);
}

int rename(const char *from, const char *to)
{
    if (writer_lands_if_armed(from) != 0) return -1;
    return real_rename(from, to);
}

static void test_prune_keeps_an_entry_that_a_writer_replaced_after_the_scan(void **state)
{
    fixture *f = *state;
    char *a = publish_dim(f, "64", 500), *b = publish_dim(f, "128", 500), *c = publish_dim(f, "256", 500);
    /* The writer's new file for b's key: the same bytes, another inode. */
    char *fresh = join(f->root, "v1/" TARGET "/.fresh");
    copy_file(b, fresh);
    struct stat fresh_sb;
    assert_int_equal(lstat(fresh, &fresh_sb), 0);
    /* Ranked a, b, c: prune must delete a and b to fit c. */
    time_t now = time(NULL);
    set_times(a, now - 6000, now - 6000);
    set_times(b, now - 5000, now - 5000);
    set_times(c, now - 100, now - 100);

    race_first = a;
    race_next = b;
    race_fresh = fresh;
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, (uint64_t)file_size(c), &removed, &left), FSA_STATUS_OK);
    assert_null(race_first); /* the race happened */
    /* The fresh entry stays; prune goes on to the next one instead. */
    struct stat sb;
    assert_int_equal(lstat(b, &sb), 0);
    assert_int_equal(sb.st_ino, fresh_sb.st_ino);
    assert_int_equal(removed, 2);
    assert_false(exists(a));
    assert_false(exists(c));
    assert_int_equal(left, (uint64_t)sb.st_size);
    expect_hit_of(f, "128", 0);
    free(fresh);
    free(a);
    free(b);
    free(c);
}

/* A live writer's temporary file counts toward the size (cache/README.md); when the writer renames it over an
 * entry prune has ranked, the file is the entry now and counts once: prune stops as soon as the cache fits, and
 * reports the bytes that are there. */
static void test_prune_counts_a_writers_file_once_when_it_lands_on_a_ranked_entry(void **state)
{
    fixture *f = *state;
    char *a = publish_dim(f, "64", 500), *b = publish_dim(f, "128", 500), *c = publish_dim(f, "256", 500);
    /* b's writer: its temporary file, named as publish names it and held as publish holds it until the rename. */
    fsa_kernel_key kb;
    make_key(&kb, "128", "13.0", "-O3");
    char temp[4096];
    snprintf(temp, sizeof temp, "%s/v1/%s/.%s.%s.tmp.%ld.0123456789abcdef", f->root, TARGET, kb.name, kb.hex,
             (long)getpid());
    copy_file(b, temp);
    const int held = hold_file(temp);
    time_t now = time(NULL);
    set_times(a, now - 6000, now - 6000);
    set_times(b, now - 5000, now - 5000);
    set_times(c, now - 100, now - 100);
    const uint64_t fits = (uint64_t)(file_size(b) + file_size(c));

    race_first = a;
    race_next = b;
    race_fresh = temp;
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, fits, &removed, &left), FSA_STATUS_OK);
    assert_null(race_first); /* the writer's rename landed */
    close(held);
    /* a went; the writer's b and c fit. */
    assert_int_equal(removed, 1);
    assert_false(exists(a));
    assert_false(exists(temp));
    assert_true(exists(c));
    assert_int_equal(left, fits);
    expect_hit_of(f, "128", 0);
    expect_hit_of(f, "256", 0);
    free(a);
    free(b);
    free(c);
    fsa_key_free(&kb);
}

/* ------------------------------------------------------------ verify on a device */

static void key_for(fsa_kernel_key *k, const char *target, const char *nvrtc)
{
    const fsa_param params[] = {{"DTYPE", "bf16", ""}, {"HEAD_DIM", "128", "d"}};
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", target);
    const char *opts[] = {"--std=c++17", arch};
    fsa_key_inputs in = {"sel_fwd_main", params, 2, nvrtc, target, opts, 2};
    assert_int_equal(fsa_key_build(k, &in), FSA_STATUS_OK);
}

/* --child verify ROOT: fsa_cache_verify through a context on the fake
 * driver's device (sm_90a); the exit code is the bad count (100: failed). */
static int child_verify(const char *root)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = 0;
    o.cache_dir = root;
    o.cache_mode = FSA_CACHE_MODE_READ_WRITE;
    o.log = -1;
    fsa_context *ctx = NULL;
    uint64_t bad = 0;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK || strcmp(fsa_context_target(ctx), "sm_90a") != 0 ||
        fsa_cache_verify(ctx, NULL, NULL, &bad) != FSA_STATUS_OK) {
        fprintf(stderr, "child: %s\n", fsa_last_error());
        return 100;
    }
    fsa_context_destroy(ctx);
    return (int)bad;
}

/* This binary as "--child verify root", with the fake libcuda.so.1 first on
 * LD_LIBRARY_PATH and its loads failing with `load_result`. */
static int verify_on_fake_device(const char *root, int load_result)
{
    char result[64];
    snprintf(result, sizeof result, "FSA_FAKE_CUDA_LOAD_RESULT=%d", load_result);
    char *argv[] = {"test_disk_cache_maintenance", "--child", "verify", (char *)root, NULL};
    const char *settings[] = {result, NULL};
    return fsa_test_run_on_fake_driver(argv, "FSA_", "FSA_TEST_", settings);
}

static void test_verify_on_a_device_deletes_an_entry_only_when_the_driver_calls_its_image_bad(void **state)
{
    fixture *f = *state;
    fsa_kernel_key own, newer, other, misplaced, forged;
    key_for(&own, "sm_90a", "12.4");       /* loaded by the fake's device (sm_90a, CUDA 12.4) */
    key_for(&newer, "sm_90a", "12.8");     /* built by an NVRTC newer than the driver: not loaded */
    key_for(&other, "sm_80", "12.4");      /* another target: not loaded */
    key_for(&misplaced, "sm_80", "12.4");  /* sm_80's bytes in sm_90a's directory: no lookup there matches */
    key_for(&forged, "sm_90a", "4294967308.0"); /* 2^32 + 12 (12 as an int): past any version, not loaded */
    uint8_t *p = make_payload(300, 26);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &newer, "sm_90a", p, 300, "k"), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &other, "sm_80", p, 300, "k"), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &misplaced, "sm_90a", p, 300, "k"), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &forged, "sm_90a", p, 300, "k"), FSA_STATUS_OK);
    char *paths[4] = {fsa_disk_cache_entry_path(f->dc, &own, "sm_90a"),
                      fsa_disk_cache_entry_path(f->dc, &newer, "sm_90a"),
                      fsa_disk_cache_entry_path(f->dc, &other, "sm_80"),
                      fsa_disk_cache_entry_path(f->dc, &forged, "sm_90a")};
    char *misplaced_path = fsa_disk_cache_entry_path(f->dc, &misplaced, "sm_90a");
    assert_int_equal(fsa_disk_cache_publish(f->dc, &own, "sm_90a", p, 300, "k"), FSA_STATUS_OK);

    /* The misplaced entry could never be used: bad (and deleted) whatever the driver says of the rest. */
    assert_true(exists(misplaced_path));
    assert_int_equal(verify_on_fake_device(f->root, CUDA_SUCCESS), 1);
    assert_false(exists(misplaced_path));
    for (int j = 0; j < 4; j++) assert_true(exists(paths[j]));

    /* Failures that say nothing about the file: not supported (the fake's
     * default), out of memory, an invalid context; and a load that works. */
    static const int says_nothing[] = {CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OUT_OF_MEMORY,
                                       CUDA_ERROR_INVALID_CONTEXT, CUDA_SUCCESS};
    for (size_t i = 0; i < sizeof says_nothing / sizeof says_nothing[0]; i++) {
        assert_int_equal(verify_on_fake_device(f->root, says_nothing[i]), 0);
        for (int j = 0; j < 4; j++) assert_true(exists(paths[j]));
    }
    /* Errors that condemn the image of the device's own target. */
    static const int condemns[] = {CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_NO_BINARY_FOR_GPU};
    for (size_t i = 0; i < sizeof condemns / sizeof condemns[0]; i++) {
        assert_int_equal(verify_on_fake_device(f->root, condemns[i]), 1);
        assert_false(exists(paths[0]));
        for (int j = 1; j < 4; j++) assert_true(exists(paths[j]));
        assert_int_equal(fsa_disk_cache_publish(f->dc, &own, "sm_90a", p, 300, "k"), FSA_STATUS_OK);
    }
    for (int j = 0; j < 4; j++) free(paths[j]);
    free(misplaced_path);
    free(p);
    fsa_key_free(&own);
    fsa_key_free(&newer);
    fsa_key_free(&other);
    fsa_key_free(&misplaced);
    fsa_key_free(&forged);
}

/* An entry is judged against the target of the directory it sits in (cache/README.md): an sm_90a entry
 * copied into sm_90/ is bad there (its key's target line names sm_90a, which starts with sm_90: a prefix
 * match passed it). */
static void test_an_entry_copied_into_a_target_its_own_starts_with_is_bad(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k, k90;
    make_key_for(&k, "sm_90a", "64", "13.0", "-O3");
    make_key_for(&k90, "sm_90", "64", "13.0", "-O3");
    uint8_t *p = make_payload(100, 1);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, "sm_90a", p, 100, "fsa_kernel"), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k90, "sm_90", p, 100, "fsa_kernel"), FSA_STATUS_OK);
    char *original = fsa_disk_cache_entry_path(f->dc, &k, "sm_90a"), *copy = fsa_disk_cache_entry_path(f->dc, &k, "sm_90");
    copy_file(original, copy);
    uint64_t bad = 0;
    int visited = 0;
    assert_int_equal(fsa_disk_cache_verify(f->dc, NULL, NULL, count_entries, &visited, &bad), FSA_STATUS_OK);
    assert_int_equal(visited, 3);
    assert_int_equal(bad, 1);
    assert_false(exists(copy));
    assert_true(exists(original));
    free(original), free(copy), free(p);
    fsa_key_free(&k), fsa_key_free(&k90);
}

/* Prune ranks entries by the later of access and modification time (cache/README.md): an entry read long
 * ago but written lately is the newer, and stays. */
static void test_prune_ranks_by_the_later_of_access_and_modification_time(void **state)
{
    fixture *f = *state;
    fsa_kernel_key a, b;
    make_key(&a, "64", "13.0", "-O3");
    make_key(&b, "128", "13.0", "-O3");
    uint8_t *p = make_payload(1000, 4);
    publish(f->dc, &a, p, 1000);
    publish(f->dc, &b, p, 1000);
    char *pa = fsa_disk_cache_entry_path(f->dc, &a, TARGET), *pb = fsa_disk_cache_entry_path(f->dc, &b, TARGET);
    const time_t now = time(NULL);
    set_times(pa, now - 3000, now - 100);  /* last used (written) at now - 100 */
    set_times(pb, now - 2000, now - 2000); /* last used at now - 2000: the older */
    uint64_t removed = 0, left = 0;
    assert_int_equal(fsa_disk_cache_prune(f->dc, (uint64_t)file_size(pa), &removed, &left), FSA_STATUS_OK);
    assert_int_equal(removed, 1);
    assert_true(exists(pa));
    assert_false(exists(pb));
    free(pa), free(pb), free(p);
    fsa_key_free(&a), fsa_key_free(&b);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0 && strcmp(argv[2], "verify") == 0) return child_verify(argv[3]);
    const struct CMUnitTest tests[] = {
        T(test_list_visits_every_entry_of_every_target_and_nothing_else),
        T(test_list_verify_and_prune_of_a_cache_that_holds_nothing_create_nothing),
        T(test_files_not_named_like_entries_are_left_alone),
        T(test_verify_deletes_and_counts_damaged_entries),
        T(test_an_entry_copied_into_a_target_its_own_starts_with_is_bad),
        T(test_prune_ranks_by_the_later_of_access_and_modification_time),
        T(test_verify_deletes_a_socket_at_an_entry_path_and_goes_on),
        T(test_verify_deletes_entries_that_the_check_function_rejects),
        T(test_verify_deletes_an_entry_copied_into_another_targets_directory),
        T(test_verify_deletes_an_entry_stored_under_a_name_its_key_does_not_give),
        T(test_prune_ranks_tuning_records_with_the_entries),
        T(test_list_and_verify_visit_tuning_records_checked_on_disk_only),
        T(test_verify_marks_loaded_only_the_entries_its_check_function_passed),
        T(test_verify_keeps_entries_that_the_check_function_cannot_check),
        T(test_verify_skips_an_entry_of_another_format_version_and_keeps_it),
        T(test_verify_leaves_the_entries_access_times_as_they_were),
        T(test_verify_on_a_device_deletes_an_entry_only_when_the_driver_calls_its_image_bad),
        T(test_prune_deletes_least_recently_used_entries_and_old_debris),
        T(test_prune_removes_unheld_lock_files_that_are_old_or_dated_ahead),
        T(test_prune_removes_a_link_fifo_or_empty_directory_at_a_lock_path),
        T(test_a_hit_records_its_use_so_prune_evicts_the_entry_that_was_not_used),
        T(test_a_hit_records_its_use_at_most_once_an_hour),
        T(test_prune_ranks_an_entry_dated_in_the_future_as_the_oldest_until_a_hit_uses_it),
        T(test_prune_keeps_an_entry_that_a_writer_replaced_after_the_scan),
        T(test_prune_counts_a_writers_file_once_when_it_lands_on_a_ranked_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
