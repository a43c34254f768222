/* Damaged JIT cache entries: a truncated entry, a flipped payload byte and a
 * flipped key byte are each counted corrupt once and rebuilt by a fresh
 * process in the same place, and a directory in place of an entry is counted
 * once and reported as a write failure (and left alone). */
#include "jit_cache_child.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Publishes a fresh kernel in dir, damages its entry with `damage`, and has
 * a fresh process rebuild it. */
static void corrupt_and_rebuild(const char *dir, void (*damage)(const char *path, uint64_t size))
{
    cached_fill c = cache_a_fresh_fill(dir);
    const char *path = c.path, *us = c.us;
    struct stat before;
    assert_int_equal(stat(path, &before), 0);
    damage(path, (uint64_t)before.st_size);

    const char *args[] = {"build", dir, us, "1", "0", NULL};
    assert_int_equal(run_self(args, NULL), 0);

    /* The rebuilt entry is whole and in the same place. */
    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, 1);
    assert_true(v.e[0].valid);
    assert_string_equal(v.e[0].path, path);
    struct stat after;
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_size, before.st_size);

    /* And a further fresh process reads it without compiling. */
    const char *hit[] = {"disk-hit", dir, us, "1", "0", NULL};
    assert_int_equal(run_self(hit, NULL), 0);

}

static void truncate_to_half(const char *path, uint64_t size)
{
    assert_int_equal(truncate(path, (off_t)(size / 2)), 0);
}

static void flip_last_byte(const char *path, uint64_t size)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, (off_t)(size - 1)), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)(size - 1)), 1);
    close(fd);
}

static void flip_key_text_byte(const char *path, uint64_t size)
{
    (void)size;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    /* Just past the header: the stored key text. */
    const off_t at = FSA_CACHE_HEADER_SIZE + 6;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x01;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void test_a_truncated_entry_is_counted_corrupt_and_rebuilt_once_in_a_fresh_process(void **state)
{
    corrupt_and_rebuild(*state, truncate_to_half);
}

static void test_an_entry_with_a_flipped_payload_byte_is_counted_corrupt_and_rebuilt_once(void **state)
{
    corrupt_and_rebuild(*state, flip_last_byte);
}

static void test_an_entry_with_a_flipped_key_byte_is_counted_corrupt_and_rebuilt_once(void **state)
{
    corrupt_and_rebuild(*state, flip_key_text_byte);
}

static void test_a_directory_in_place_of_an_entry_is_counted_once_and_reported_as_a_write_failure(void **state)
{
    const char *dir = *state;
    cached_fill c = cache_a_fresh_fill(dir);
    const char *path = c.path;
    char inside[1100];
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inside, sizeof inside, "%s/file", path);
    int fd = open(inside, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);

    const char *args[] = {"build", dir, c.us, "1", "1", NULL};
    assert_int_equal(run_self(args, NULL), 0);
    struct stat sb;
    assert_int_equal(stat(inside, &sb), 0); /* not ours to delete */
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return child_main(argc - 2, argv + 2);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_a_truncated_entry_is_counted_corrupt_and_rebuilt_once_in_a_fresh_process),
        T(test_an_entry_with_a_flipped_payload_byte_is_counted_corrupt_and_rebuilt_once),
        T(test_an_entry_with_a_flipped_key_byte_is_counted_corrupt_and_rebuilt_once),
        T(test_a_directory_in_place_of_an_entry_is_counted_once_and_reported_as_a_write_failure),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
