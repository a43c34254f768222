/* Damaged tuning records on disk, through a stand-in driver (no GPU): a
 * record with a flipped byte, a truncated one, another GPU's and one that
 * names an unknown variant are counted as corrupt and ignored by a new plan,
 * which measures again and publishes a good record that the next plan uses. */
#include "chooser_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Records one bucket with the stand-in driver, damages the file with
 * `damage`, then checks a new plan ignores it (counted; deleted when the
 * entry itself is bad, replaced by the next publish when only its text is)
 * and measures again, publishing a good record that a third plan uses. */
static void check_damaged_record_is_ignored(fixture *f, void (*damage)(const char *path, fixture *f), int deleted)
{
    int measured = 0;
    f->ctx.cu = fake_driver();
    g_capturing = 0;
    (void)pick(&f->plan, 50, &measured);
    assert_true(measured);
    char *path = record_path(&f->plan, FSA_OP_FWD, 50);
    damage(path, f);
    const uint64_t corrupt = atomic_load(&f->ctx.counters.corrupt_entries);
    fsa_plan later;
    fsa_choice c;
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    fsa_tune_load_records(&later);
    assert_int_equal(atomic_load(&f->ctx.counters.corrupt_entries), corrupt + 1);
    assert_int_equal(record_exists(path), !deleted);
    fsa_choose(&c, &later, FSA_OP_FWD, 50);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.may_measure);
    fsa_variant v = pick(&later, 50, &measured);
    assert_true(measured);
    assert_int_equal(v.order, FSA_ALGORITHM_NSA);
    assert_true(record_exists(path));
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    fsa_tune_load_records(&later);
    fsa_choose(&c, &later, FSA_OP_FWD, 50);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    free(path);
    f->ctx.cu = NULL;
}

static void flip_last_byte(const char *path, fixture *f)
{
    (void)f;
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, -2, SEEK_END);
    int ch = fgetc(fp);
    fseek(fp, -2, SEEK_END);
    fputc(ch ^ 0x20, fp);
    fclose(fp);
}

static void truncate_half(const char *path, fixture *f)
{
    (void)f;
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size / 2), 0);
}

/* Another GPU's record, renamed to this bucket's file: a whole entry of another key. */
static void replace_with_foreign(const char *path, fixture *f)
{
    char saved[sizeof f->ctx.gpu_name];
    memcpy(saved, f->ctx.gpu_name, sizeof saved);
    snprintf(f->ctx.gpu_name, sizeof f->ctx.gpu_name, "NVIDIA Other GPU");
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, &f->plan, FSA_OP_FWD, fsa_tune_bucket(50)), FSA_STATUS_OK);
    fsa_candidates c;
    fsa_candidates_of(&c, &f->plan, FSA_OP_FWD);
    char *text = fsa_tune_record_text(FSA_OP_FWD, &c, 0, NULL);
    assert_int_equal(fsa_disk_cache_publish_record(f->ctx.disk, &key, f->ctx.target, text), FSA_STATUS_OK);
    char *other = fsa_disk_cache_record_path(f->ctx.disk, &key, f->ctx.target);
    assert_int_equal(rename(other, path), 0);
    memcpy(f->ctx.gpu_name, saved, sizeof saved);
    free(other);
    free(text);
    fsa_key_free(&key);
}

/* A whole, checksummed entry under the right key whose text names no candidate. */
static void replace_with_unknown_variant(const char *path, fixture *f)
{
    (void)path;
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, &f->plan, FSA_OP_FWD, fsa_tune_bucket(50)), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_publish_record(f->ctx.disk, &key, f->ctx.target,
                                                   "fsa-tuning-record 1\nop fwd\nwinner nsa.s99\nend\n"),
                     FSA_STATUS_OK);
    fsa_key_free(&key);
}

static void test_a_record_with_a_flipped_byte_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, flip_last_byte, 1);
}

static void test_a_truncated_record_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, truncate_half, 1);
}

static void test_a_foreign_record_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, replace_with_foreign, 1);
}

static void test_a_record_naming_an_unknown_variant_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, replace_with_unknown_variant, 0);
}

#define T(name) cmocka_unit_test_setup_teardown(name, chooser_setup, chooser_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_a_record_with_a_flipped_byte_is_ignored_and_measured_again),
        T(test_a_truncated_record_is_ignored_and_measured_again),
        T(test_a_foreign_record_is_ignored_and_measured_again),
        T(test_a_record_naming_an_unknown_variant_is_ignored_and_measured_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
