/* The disk cache's maintenance walks: list visits every entry of every
 * target and nothing else, verify deletes and counts damaged entries and those
 * a check function rejects, and prune deletes the least recently used entries
 * and old debris (temporary files, stale locks). */
#include "disk_cache_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_list_visits_every_entry_of_every_target_and_nothing_else),
        T(test_verify_deletes_and_counts_damaged_entries),
        T(test_verify_deletes_entries_that_the_check_function_rejects),
        T(test_prune_deletes_least_recently_used_entries_and_old_debris),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
