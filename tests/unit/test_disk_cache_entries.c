/* The disk cache's entries: a publish and a lookup give back the same
 * bytes and entry names, from root/v1/<target>/<name>.<hex>.cubin in private
 * directories; a key never published is a miss that is not counted; and every
 * kind of damaged entry (truncated, with trailing bytes, empty, a flipped byte
 * in the payload, in any header field but the format version, in the key
 * text or in the entry names, another key's entry, a symlink) is a counted
 * miss that is deleted and rebuilt once (unless a writer renamed a good entry
 * over it after it was judged: that one stays); and an entry of another format
 * version (another library version's, older or newer) is a miss that is
 * neither counted nor deleted, and that a publish of the same key replaces. */
#include "disk_cache_fixture.h"

#include "base/util.h"
#include "jit/disk_cache_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* The format version is not damage when it changes: see the next tests. */
    static const damage_fn every_field[] = {flip_magic,      flip_flags,        flip_payload_length,
                                            flip_payload_checksum, flip_key_digest, flip_key_length,
                                            flip_names_length, flip_names_checksum, flip_key_text};
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

/* An entry written by hand, every checksum right, whatever it holds: format
 * version 1 (64-byte header, no entry-names checksum, as the library wrote
 * them before version 2) or the current one; the key text is kl bytes and
 * names nl bytes, NULs allowed in both. */
static void write_entry_text(const char *path, int version, const char *text, size_t kl, const uint8_t digest[16],
                             const char *names, size_t nl, const uint8_t *p, size_t n)
{
    size_t header = version == 1 ? 64 : FSA_CACHE_HEADER_SIZE, total = header + kl + nl + n;
    uint8_t *d = calloc(1, total);
    assert_non_null(d);
    memcpy(d, "FSACUBIN", 8);
    put_le(d + 8, (uint64_t)version, 4);
    put_le(d + 16, n, 8);
    fsa_digest128(d + 24, p, n);
    memcpy(d + 40, digest, 16);
    put_le(d + 56, kl, 4);
    put_le(d + 60, nl, 4);
    if (version != 1) fsa_digest128(d + 64, names, nl);
    memcpy(d + header, text, kl);
    memcpy(d + header + kl, names, nl);
    memcpy(d + header + kl + nl, p, n);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, d, total), (ssize_t)total);
    close(fd);
    free(d);
}

static void write_entry(const char *path, int version, const fsa_kernel_key *k, const char *names, size_t nl,
                        const uint8_t *p, size_t n)
{
    write_entry_text(path, version, k->text, strlen(k->text), k->digest, names, nl, p, n);
}

/* Both lookups miss it without counting it, it stays as it was, and the
 * message says why; then a publish of the key replaces it (the same file
 * name: the same key text, so in practice two builds of one library
 * version). */
static void expect_foreign_entry_left_alone_then_replaced(fixture *f, const fsa_kernel_key *k, const char *path,
                                                          const uint8_t *p, size_t n)
{
    off_t size = file_size(path);
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_true(error_mentions("format version"));
    assert_int_equal(lookup_status(f->dc, k, 1, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 0);
    assert_true(exists(path));
    assert_int_equal(file_size(path), size);
    publish(f->dc, k, p, n);
    expect_hit(f->dc, k, 0, p, n);
}

static void test_an_entry_of_the_previous_format_version_is_an_uncounted_miss_and_is_left_alone(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(700, 21);
    publish(f->dc, &k, p, 700); /* makes the directories */
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    write_entry(path, 1, &k, "fsa_kernel", strlen("fsa_kernel"), p, 700);
    expect_foreign_entry_left_alone_then_replaced(f, &k, path, p, 700);
    free(path);
    free(p);
    fsa_key_free(&k);
}

static void test_an_entry_of_a_newer_format_version_is_an_uncounted_miss_and_is_left_alone(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(700, 25);
    publish(f->dc, &k, p, 700);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    /* Version 3, with a header this library cannot read. */
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    const uint8_t v3[4] = {3, 0, 0, 0};
    assert_int_equal(pwrite(fd, v3, 4, 8), 4);
    close(fd);
    expect_foreign_entry_left_alone_then_replaced(f, &k, path, p, 700);
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

/* A lookup judges a file, then deletes it: a writer may rename a good entry
 * over the path between the two. The delete takes only the file judged. */
static void test_a_damaged_entry_that_a_writer_replaced_after_it_was_judged_is_kept(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(900, 8);
    publish(f->dc, &k, p, 900);
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    char *fresh = join(f->root, "v1/" TARGET "/.fresh");
    assert_int_equal(link(path, fresh), 0); /* the writer's good file, another name */
    char *damaged = join(f->root, "v1/" TARGET "/.damaged");
    copy_file(fresh, damaged);
    flip_last_payload_byte(damaged);
    assert_int_equal(rename(damaged, path), 0);
    struct stat judged, fresh_sb;
    assert_int_equal(lstat(path, &judged), 0);
    assert_int_equal(lstat(fresh, &fresh_sb), 0);

    assert_int_equal(rename(fresh, path), 0); /* the publish that lands meanwhile */
    uint64_t corrupt = 0;
    const char *kept = fsa_dc_discard_bad(f->dc, path, &judged, &corrupt);
    assert_non_null(kept);
    assert_non_null(strstr(kept, "replaced"));
    assert_int_equal(corrupt, 1);
    struct stat now;
    assert_int_equal(lstat(path, &now), 0);
    assert_int_equal(now.st_ino, fresh_sb.st_ino);
    expect_hit(f->dc, &k, 0, p, 900);

    /* Not replaced: the judged file goes. */
    assert_null(fsa_dc_discard_bad(f->dc, path, &now, &corrupt));
    assert_int_equal(corrupt, 2);
    assert_false(exists(path));
    free(damaged);
    free(fresh);
    free(path);
    free(p);
    fsa_key_free(&k);
}

/* Entry names are handed out as a C string shorter than 64 KiB, and an
 * entry holds a cubin: names with a NUL in them or of 64 KiB, or no payload,
 * are no entry of ours, whatever the checksums say. */
static void test_entries_with_names_of_a_nul_or_64_kib_or_no_payload_are_a_miss_and_deleted(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(500, 6);
    publish(f->dc, &k, p, 500); /* the target directory */
    char *path = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    char *names = malloc(64 * 1024);
    assert_non_null(names);
    memset(names, 'k', 64 * 1024);
    const size_t names_len[] = {64 * 1024, 3, 1}, payload_len[] = {500, 500, 0};
    for (int i = 0; i < 3; i++) {
        names[1] = i == 1 ? '\0' : 'k';
        write_entry(path, FSA_CACHE_FORMAT_VERSION, &k, names, names_len[i], p, payload_len[i]);
        uint64_t corrupt = 0;
        assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
        assert_int_equal(corrupt, 1);
        assert_false(exists(path));
    }
    write_entry(path, FSA_CACHE_FORMAT_VERSION, &k, names, 1, p, 500); /* the same writer, a good entry */
    expect_hit(f->dc, &k, 0, p, 500);
    free(names);
    free(path);
    free(p);
    fsa_key_free(&k);
}

/* Key texts are shorter than 64 KiB, as lookups read them: publish refuses
 * one of 64 KiB (an entry no lookup would take), and one byte less round-trips. */
static void test_a_key_text_of_64_kib_is_refused_and_one_byte_less_round_trips(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(100, 7);
    free(k.text);
    k.text = malloc(64 * 1024 + 1);
    assert_non_null(k.text);
    memset(k.text, 'a', 64 * 1024);
    k.text[64 * 1024] = '\0';
    assert_int_equal(fsa_disk_cache_publish(f->dc, &k, TARGET, p, 100, "k"), FSA_STATUS_INVALID_ARGUMENT);
    k.text[64 * 1024 - 1] = '\0';
    fsa_digest128(k.digest, k.text, strlen(k.text));
    fsa_hex(k.hex, k.digest, 16);
    publish(f->dc, &k, p, 100);
    expect_hit(f->dc, &k, 0, p, 100);
    free(p);
    fsa_key_free(&k);
}

/* An entry of key text `kt` (kl bytes, NULs allowed) written by hand at its file name in dir,
 * <name>.<hex of kt>.cubin, every checksum right; the caller frees the path. */
static char *write_forged(const char *dir, const char *name, const char *kt, size_t kl, const uint8_t *p, size_t n)
{
    uint8_t digest[16];
    fsa_digest128(digest, kt, kl);
    char hex[33], *path = malloc(strlen(dir) + strlen(name) + 64);
    assert_non_null(path);
    fsa_hex(hex, digest, 16);
    sprintf(path, "%s/%s.%s.cubin", dir, name, hex);
    write_entry_text(path, FSA_CACHE_FORMAT_VERSION, kt, kl, digest, "fsa_kernel", strlen("fsa_kernel"), p, n);
    return path;
}

/* A key text holds no NUL (cache/README.md): an entry whose text is a key's own, a NUL and more (every
 * checksum right) was handed out by a relaxed lookup, which cut the text at the NUL before comparing. */
static void test_an_entry_whose_key_text_holds_a_nul_is_no_entry(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(500, 2);
    publish(f->dc, &k, p, 500); /* (makes the directory) */
    char *real = fsa_disk_cache_entry_path(f->dc, &k, TARGET);
    assert_int_equal(unlink(real), 0);
    const size_t tl = strlen(k.text), kl = tl + 5;
    char *kt = malloc(kl);
    assert_non_null(kt);
    memcpy(kt, k.text, tl);
    memcpy(kt + tl, "\0junk", 5);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    uint8_t *forged = make_payload(500, 99);
    char *path = write_forged(dir, k.name, kt, kl, forged, 500);
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 1, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    assert_false(exists(path));
    free(kt), free(path), free(real), free(p), free(forged);
    fsa_key_free(&k);
}

/* Key texts are 1 to 65535 bytes (cache/README.md): one of 64 KiB written by hand is no entry when read, as
 * publishing refuses it. */
static void test_an_entry_with_a_key_text_of_64_kib_is_no_entry(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(100, 3);
    publish(f->dc, &k, p, 100);
    free(k.text);
    k.text = malloc(64 * 1024 + 1);
    assert_non_null(k.text);
    memset(k.text, 'a', 64 * 1024);
    k.text[64 * 1024] = '\0';
    fsa_digest128(k.digest, k.text, strlen(k.text));
    fsa_hex(k.hex, k.digest, 16);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    char *path = write_forged(dir, k.name, k.text, 64 * 1024, p, 100);
    uint64_t corrupt = 0;
    assert_int_equal(lookup_status(f->dc, &k, 0, &corrupt), FSA_STATUS_NOT_FOUND);
    assert_int_equal(corrupt, 1);
    free(path), free(p);
    fsa_key_free(&k);
}

/* ------------------------------------------------------------ the format on its own */

/* The bytes of a whole entry for key k, entry names "k_main" and an n-byte payload; caller frees. */
static uint8_t *entry_bytes(const fsa_kernel_key *k, const uint8_t *payload, size_t n, size_t *size)
{
    uint8_t *head = NULL;
    size_t head_len = 0;
    assert_int_equal(fsa_dc_build_head(&head, &head_len, k, "k_main", payload, n), FSA_STATUS_OK);
    uint8_t *d = realloc(head, head_len + n);
    assert_non_null(d);
    memcpy(d + head_len, payload, n);
    *size = head_len + n;
    return d;
}

static void test_a_change_to_any_one_byte_of_an_entry_makes_it_no_entry(void **state)
{
    (void)state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(64, 3);
    size_t size = 0;
    uint8_t *d = entry_bytes(&k, p, 64, &size);
    fsa_dc_entry_view v;
    assert_true(fsa_dc_parse_entry(&v, d, size));
    assert_int_equal(v.key_len, strlen(k.text));
    assert_int_equal(v.payload_len, 64);
    /* Every bit position of every byte: header, key text, entry names and payload. */
    for (size_t i = 0; i < size; i++)
        for (int bit = 0; bit < 8; bit++) {
            d[i] ^= (uint8_t)(1u << bit);
            if (fsa_dc_parse_entry(&v, d, size)) fail_msg("entry with bit %d of byte %zu flipped parsed", bit, i);
            d[i] ^= (uint8_t)(1u << bit);
        }
    assert_true(fsa_dc_parse_entry(&v, d, size));
    free(d);
    free(p);
    fsa_key_free(&k);
}

static void test_an_entry_with_an_empty_key_text_is_no_entry_even_with_its_checksums_right(void **state)
{
    (void)state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    k.text[0] = '\0';
    fsa_digest128(k.digest, k.text, 0);
    uint8_t *p = make_payload(64, 3);
    size_t size = 0;
    uint8_t *d = entry_bytes(&k, p, 64, &size);
    fsa_dc_entry_view v;
    assert_false(fsa_dc_parse_entry(&v, d, size));
    free(d);
    free(p);
    fsa_key_free(&k);
}

static void test_a_digest_is_its_file_names_hex_only_when_all_32_digits_agree(void **state)
{
    (void)state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    assert_true(fsa_dc_digest_is_hex(k.digest, k.hex));
    char hex[33];
    for (size_t i = 0; i < 32; i++) {
        memcpy(hex, k.hex, sizeof hex);
        hex[i] = hex[i] == '0' ? '1' : '0';
        assert_false(fsa_dc_digest_is_hex(k.digest, hex));
    }
    memcpy(hex, k.hex, sizeof hex);
    hex[31] = '\0';
    assert_false(fsa_dc_digest_is_hex(k.digest, hex));
    fsa_key_free(&k);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_publish_then_lookup_returns_the_same_bytes_and_entry_names),
        T(test_an_entry_whose_key_text_holds_a_nul_is_no_entry),
        T(test_an_entry_with_a_key_text_of_64_kib_is_no_entry),
        T(test_the_entry_lives_at_root_v1_target_name_hex_cubin_in_private_directories),
        T(test_a_key_that_was_never_published_is_a_miss_that_is_not_counted),
        T(test_a_target_that_is_not_a_plain_name_is_rejected),
        T(test_a_truncated_entry_is_a_miss_and_is_deleted),
        T(test_an_entry_with_trailing_bytes_is_a_miss_and_is_deleted),
        T(test_a_zero_length_entry_is_a_miss_and_is_deleted),
        T(test_a_flipped_payload_byte_is_a_miss_and_is_deleted),
        T(test_a_flipped_header_byte_is_a_miss_and_is_deleted),
        T(test_a_flipped_entry_names_byte_is_a_miss_and_is_deleted),
        T(test_an_entry_of_the_previous_format_version_is_an_uncounted_miss_and_is_left_alone),
        T(test_an_entry_of_a_newer_format_version_is_an_uncounted_miss_and_is_left_alone),
        T(test_an_entry_holding_another_key_is_a_miss_and_is_deleted),
        T(test_a_symlink_in_place_of_an_entry_is_a_miss_and_is_removed),
        T(test_a_damaged_entry_that_a_writer_replaced_after_it_was_judged_is_kept),
        T(test_entries_with_names_of_a_nul_or_64_kib_or_no_payload_are_a_miss_and_deleted),
        T(test_a_key_text_of_64_kib_is_refused_and_one_byte_less_round_trips),
        cmocka_unit_test(test_a_change_to_any_one_byte_of_an_entry_makes_it_no_entry),
        cmocka_unit_test(test_an_entry_with_an_empty_key_text_is_no_entry_even_with_its_checksums_right),
        cmocka_unit_test(test_a_digest_is_its_file_names_hex_only_when_all_32_digits_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
