/* Reading a GNU build ID from ELF notes: the ID is found behind other notes
 * at either padding, malformed or oversized notes give none rather than a
 * read past the block, and what is read from a loaded object's memory is
 * what its file says. */
#include "testing.h"

#include "jit/elf_build_id.h"

#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct notes {
    uint8_t bytes[256];
    size_t size;
} notes;

static void put_u32(notes *n, uint32_t v)
{
    memcpy(n->bytes + n->size, &v, 4);
    n->size += 4;
}

static void put_padded(notes *n, const void *data, size_t len, size_t align)
{
    memcpy(n->bytes + n->size, data, len);
    n->size += len;
    while (n->size % align) n->bytes[n->size++] = 0;
}

static void add_note(notes *n, const char *name, uint32_t type, const uint8_t *desc, size_t desc_len, size_t align)
{
    size_t name_len = strlen(name) + 1;
    put_u32(n, (uint32_t)name_len);
    put_u32(n, (uint32_t)desc_len);
    put_u32(n, type);
    put_padded(n, name, name_len, align);
    put_padded(n, desc, desc_len, align);
}

static const uint8_t k_id[20] = {0x65, 0xbe, 0x0d, 0xb3, 0x42, 0xad, 0x51, 0xa0, 0x68, 0x76,
                                 0xe7, 0x1e, 0x21, 0x0b, 0xcc, 0xc5, 0xaa, 0x83, 0x22, 0xcf};

static void test_the_build_id_is_found_behind_other_notes_at_either_padding(void **state)
{
    (void)state;
    const size_t aligns[] = {4, 8};
    for (size_t a = 0; a < 2; a++) {
        notes n = {.size = 0};
        const uint8_t abi[16] = {0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
        add_note(&n, "GNU", NT_GNU_ABI_TAG, abi, sizeof abi, aligns[a]);
        add_note(&n, "Go", NT_GNU_BUILD_ID, abi, 5, aligns[a]); /* the type, another owner */
        add_note(&n, "GNU", NT_GNU_BUILD_ID, k_id, sizeof k_id, aligns[a]);
        uint8_t out[FSA_BUILD_ID_MAX];
        assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, aligns[a]), sizeof k_id);
        assert_memory_equal(out, k_id, sizeof k_id);
    }
}

static void test_notes_without_a_build_id_give_none(void **state)
{
    (void)state;
    notes n = {.size = 0};
    add_note(&n, "GNU", NT_GNU_ABI_TAG, k_id, 16, 4);
    uint8_t out[FSA_BUILD_ID_MAX];
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, 4), 0);
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, 0, 4), 0);
}

static void test_a_note_cut_short_by_the_block_gives_none(void **state)
{
    (void)state;
    notes n = {.size = 0};
    add_note(&n, "GNU", NT_GNU_BUILD_ID, k_id, sizeof k_id, 4);
    uint8_t out[FSA_BUILD_ID_MAX];
    for (size_t cut = 1; cut <= n.size; cut++)
        assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size - cut, 4), 0);
    /* Sizes in the header that point past the block. */
    notes bad = n;
    uint32_t huge = 0xfffffff0u;
    memcpy(bad.bytes + 4, &huge, 4);
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, bad.bytes, bad.size, 4), 0);
    bad = n;
    memcpy(bad.bytes, &huge, 4);
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, bad.bytes, bad.size, 4), 0);
}

/* The owner is "GNU" with its NUL, four bytes: a name of another length
 * that merely starts with those bytes is another owner. */
static void test_a_build_id_note_of_an_owner_name_of_another_length_gives_none(void **state)
{
    (void)state;
    const uint32_t name_sizes[] = {3, 8};
    for (int i = 0; i < 2; i++) {
        notes n = {.size = 0};
        put_u32(&n, name_sizes[i]);
        put_u32(&n, sizeof k_id);
        put_u32(&n, NT_GNU_BUILD_ID);
        put_padded(&n, "GNU\0\0\0\0\0", name_sizes[i], 4);
        put_padded(&n, k_id, sizeof k_id, 4);
        uint8_t out[FSA_BUILD_ID_MAX];
        assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, 4), 0);
    }
}

static void test_an_id_longer_than_the_room_given_is_not_cut(void **state)
{
    (void)state;
    notes n = {.size = 0};
    add_note(&n, "GNU", NT_GNU_BUILD_ID, k_id, sizeof k_id, 4);
    uint8_t out[8];
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, 4), 0);
}

static void test_an_id_exactly_as_long_as_the_room_given_is_read_whole(void **state)
{
    (void)state;
    notes n = {.size = 0};
    add_note(&n, "GNU", NT_GNU_BUILD_ID, k_id, sizeof k_id, 4);
    uint8_t out[sizeof k_id + 1];
    out[sizeof k_id] = 0x5a;
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof k_id, n.bytes, n.size, 4), sizeof k_id);
    assert_memory_equal(out, k_id, sizeof k_id);
    assert_int_equal(out[sizeof k_id], 0x5a);
    /* One byte less room: none, and nothing written past it. */
    memset(out, 0x5a, sizeof out);
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof k_id - 1, n.bytes, n.size, 4), 0);
    assert_int_equal(out[sizeof k_id - 1], 0x5a);
}

static void test_a_segment_alignment_of_0_or_1_pads_notes_to_4_bytes(void **state)
{
    (void)state;
    /* p_align 0 and 1 both mean "no alignment"; notes are still 4-byte padded. */
    notes n = {.size = 0};
    add_note(&n, "Go", 4, k_id, 5, 4); /* name and description both need padding */
    add_note(&n, "GNU", NT_GNU_BUILD_ID, k_id, sizeof k_id, 4);
    const size_t aligns[] = {0, 1};
    for (size_t a = 0; a < 2; a++) {
        uint8_t out[FSA_BUILD_ID_MAX];
        assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, aligns[a]), sizeof k_id);
        assert_memory_equal(out, k_id, sizeof k_id);
    }
}

static void test_a_build_id_note_of_another_four_byte_owner_gives_none(void **state)
{
    (void)state;
    /* "GNUX": the owner's length is GNU's with its NUL, its bytes are not. */
    notes n = {.size = 0};
    put_u32(&n, 4);
    put_u32(&n, sizeof k_id);
    put_u32(&n, NT_GNU_BUILD_ID);
    put_padded(&n, "GNUX", 4, 4);
    put_padded(&n, k_id, sizeof k_id, 4);
    uint8_t out[FSA_BUILD_ID_MAX];
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, 4), 0);
}

static void expect_loaded_matches_file(const void *address)
{
    Dl_info info;
    assert_true(dladdr(address, &info) != 0 && info.dli_fname != NULL);
    const char *path = info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
    uint8_t from_memory[FSA_BUILD_ID_MAX], from_file[FSA_BUILD_ID_MAX];
    size_t n_memory = fsa_elf_build_id_of_loaded(from_memory, sizeof from_memory, address);
    size_t n_file = fsa_test_build_id_of_file(from_file, sizeof from_file, path);
    print_message("%s: build ID of %zu bytes\n", path, n_file);
    assert_int_equal(n_memory, n_file);
    assert_memory_equal(from_memory, from_file, n_file);
}

static void test_a_loaded_objects_id_is_the_one_its_file_holds(void **state)
{
    (void)state;
    expect_loaded_matches_file((const void *)&fsa_elf_build_id_in_notes); /* this test program */
    expect_loaded_matches_file(dlsym(RTLD_DEFAULT, "snprintf")); /* the C library */
}

static void test_an_address_no_object_holds_gives_none(void **state)
{
    (void)state;
    uint8_t out[FSA_BUILD_ID_MAX];
    assert_int_equal(fsa_elf_build_id_of_loaded(out, sizeof out, NULL), 0);
    int on_the_stack = 0;
    assert_int_equal(fsa_elf_build_id_of_loaded(out, sizeof out, &on_the_stack), 0);
}

static void test_an_eight_byte_padded_block_is_walked_at_eight_byte_steps(void **state)
{
    (void)state;
    /* A 4-byte desc ends at an offset 4-aligned but not 8-aligned: at the
     * usual 4-byte padding the next note would be read 4 bytes early. */
    const uint8_t tag[4] = {1, 2, 3, 4};
    notes n = {0};
    add_note(&n, "GNU", NT_GNU_ABI_TAG, tag, sizeof tag, 8);
    add_note(&n, "GNU", NT_GNU_BUILD_ID, k_id, sizeof k_id, 8);
    uint8_t out[64] = {0};
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, n.bytes, n.size, 8), sizeof k_id);
    assert_memory_equal(out, k_id, sizeof k_id);
}

static void test_a_last_note_whose_padding_the_block_leaves_out_gives_none_without_reading_past(void **state)
{
    (void)state;
    /* The block ends right at a page that cannot be read, and its last note's
     * desc is not padded out: stepping over the padding must stop the walk. */
    const uint8_t tag[5] = {1, 2, 3, 4, 5};
    notes n = {0};
    add_note(&n, "GNU", NT_GNU_ABI_TAG, tag, sizeof tag, 4);
    size_t size = n.size - 3; /* 12 + 4 + 5 bytes */
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *mem = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    assert_int_equal(mprotect(mem + page, (size_t)page, PROT_NONE), 0);
    uint8_t *block = mem + page - size;
    memcpy(block, n.bytes, size);
    uint8_t out[64];
    assert_int_equal(fsa_elf_build_id_in_notes(out, sizeof out, block, size, 4), 0);
    munmap(mem, 2 * (size_t)page);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_build_id_is_found_behind_other_notes_at_either_padding),
        cmocka_unit_test(test_an_eight_byte_padded_block_is_walked_at_eight_byte_steps),
        cmocka_unit_test(test_a_last_note_whose_padding_the_block_leaves_out_gives_none_without_reading_past),
        cmocka_unit_test(test_notes_without_a_build_id_give_none),
        cmocka_unit_test(test_a_note_cut_short_by_the_block_gives_none),
        cmocka_unit_test(test_an_id_longer_than_the_room_given_is_not_cut),
        cmocka_unit_test(test_an_id_exactly_as_long_as_the_room_given_is_read_whole),
        cmocka_unit_test(test_a_segment_alignment_of_0_or_1_pads_notes_to_4_bytes),
        cmocka_unit_test(test_a_build_id_note_of_another_four_byte_owner_gives_none),
        cmocka_unit_test(test_a_build_id_note_of_an_owner_name_of_another_length_gives_none),
        cmocka_unit_test(test_a_loaded_objects_id_is_the_one_its_file_holds),
        cmocka_unit_test(test_an_address_no_object_holds_gives_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
