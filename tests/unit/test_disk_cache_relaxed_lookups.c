/* The disk cache's relaxed lookups: an any-NVRTC lookup finds the newest
 * intact entry of the same kernel and options whichever NVRTC built it (a
 * damaged candidate is counted, deleted and passed over), and a compatible
 * lookup takes the newest entry that a driver of a given major version
 * loads. */
#include "disk_cache_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Entries of one age: the one of the exact key wins, whichever of the two
 * the directory listing gives first (each key takes its turn as the exact one). */
static void test_any_nvrtc_lookup_prefers_the_exact_key_among_entries_of_one_age(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k[2];
    make_key(&k[0], "128", "12.8", "-O3");
    make_key(&k[1], "128", "12.9", "-O3");
    uint8_t *p[2] = {make_payload(900, 11), make_payload(900, 12)};
    time_t now = time(NULL);
    for (int i = 0; i < 2; i++) {
        publish(f->dc, &k[i], p[i], 900);
        char *path = fsa_disk_cache_entry_path(f->dc, &k[i], TARGET);
        set_times(path, now - 100, now - 100);
        free(path);
    }
    for (int i = 0; i < 2; i++) expect_hit(f->dc, &k[i], 1, p[i], 900);
    for (int i = 0; i < 2; i++) {
        free(p[i]);
        fsa_key_free(&k[i]);
    }
}

/* A file named for one key that holds another key's intact entry is damage
 * to any-NVRTC lookups too: counted and deleted, never handed out. */
static void test_any_nvrtc_lookup_counts_and_deletes_an_entry_under_another_keys_name(void **state)
{
    fixture *f = *state;
    fsa_kernel_key built, named, wanted;
    make_key(&built, "128", "12.8", "-O3");
    make_key(&named, "128", "12.9", "-O3");
    make_key(&wanted, "128", NULL, "-O3");
    uint8_t *p = make_payload(900, 13);
    publish(f->dc, &built, p, 900);
    char *from = fsa_disk_cache_entry_path(f->dc, &built, TARGET);
    char *to = fsa_disk_cache_entry_path(f->dc, &named, TARGET);
    assert_int_equal(rename(from, to), 0);
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &wanted, 1, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_false(exists(to));
    free(from);
    free(to);
    free(p);
    fsa_key_free(&built);
    fsa_key_free(&named);
    fsa_key_free(&wanted);
}

/* ------------------------------------------------------------ compatible */

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

static void test_a_compatible_lookup_skips_an_entry_whose_nvrtc_major_wraps_to_the_drivers(void **state)
{
    fixture *f = *state;
    fsa_kernel_key forged, none;
    make_key(&forged, "128", "4294967309.0", "-O3"); /* 2^32 + 13: as an int, 13 */
    make_key(&none, "128", NULL, "-O3");
    uint8_t *payload = make_payload(500, 27);
    publish(f->dc, &forged, payload, 500);

    fsa_disk_entry e;
    uint64_t corrupt = 0;
    assert_int_equal(fsa_disk_cache_lookup_compatible(&e, f->dc, &none, TARGET, 13, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 0);
    free(payload);
    fsa_key_free(&forged);
    fsa_key_free(&none);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_any_nvrtc_lookup_finds_an_entry_built_by_another_nvrtc),
        T(test_any_nvrtc_lookup_prefers_the_newest_intact_entry),
        T(test_any_nvrtc_lookup_prefers_the_exact_key_among_entries_of_one_age),
        T(test_any_nvrtc_lookup_counts_and_deletes_an_entry_under_another_keys_name),
        T(test_a_compatible_lookup_takes_the_newest_entry_a_driver_of_that_major_version_loads),
        T(test_a_compatible_lookup_skips_an_entry_whose_nvrtc_major_wraps_to_the_drivers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
