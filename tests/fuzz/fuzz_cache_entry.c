/* The disk cache reading an entry file of arbitrary bytes: a lookup accepts
 * the file exactly when it is a whole, self-consistent entry for the key
 * (checked here with the format's own parser), hands out its payload
 * unchanged, and otherwise reports a miss and deletes the file (the cache is
 * writable), except an entry of another format version, which it leaves. The input either is the file or, so that the checksums can be
 * right, describes an entry the harness assembles and then damages. */
#include "fuzz_input.h"

#include "jit/disk_cache_internal.h"

#include <sys/stat.h>
#include <unistd.h>

#define TARGET "sm_90a"

static fsa_disk_cache *g_dc;
static fsa_kernel_key g_key;
static char *g_dir; /* <root>/v1/sm_90a */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char *root = fz_cache_dir("cache_entry");
    const fsa_param params[] = {{"D", "64", "d"}, {"G", "4", "g"}};
    const fsa_key_inputs ki = {"fuzz_entry", params, 2, "12.4", TARGET, NULL, 0};
    if (root == NULL || fsa_disk_cache_open(&g_dc, root, 0) != FSA_STATUS_OK || fsa_key_build(&g_key, &ki) != FSA_STATUS_OK ||
        fsa_dc_target_dir(&g_dir, g_dc, TARGET, 1) != FSA_STATUS_OK) {
        fprintf(stderr, "fuzz_cache_entry setup: %s\n", fsa_last_error());
        exit(1);
    }
    free(root);
    return 0;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* An entry for a key text (the stored key's, or that with a byte changed, or
 * the input's), entry names and payload from the input, with every length
 * and checksum right; then maybe one byte changed and the file cut short. */
static uint8_t *assemble(fz_input *in, size_t *size_out)
{
    const uint8_t mode = fz_u8(in);
    char *key = strdup(g_key.text);
    size_t key_len = strlen(key);
    if (mode % 3 == 1 && key_len > 0) {
        key[fz_u8(in) % key_len] = (char)fz_u8(in);
    } else if (mode % 3 == 2) {
        key_len = fz_u8(in);
        free(key);
        key = calloc(1, key_len + 1);
        for (size_t i = 0; i < key_len; i++) key[i] = (char)fz_u8(in);
    }
    const size_t names_len = fz_u8(in) % 64, payload_len = fz_u8(in) % 128;
    const size_t size = FSA_CACHE_HEADER_SIZE + key_len + names_len + payload_len;
    uint8_t *d = calloc(1, size);
    memcpy(d, "FSACUBIN", 8);
    put_le(d + 8, FSA_CACHE_FORMAT_VERSION, 4);
    put_le(d + 16, payload_len, 8);
    put_le(d + 56, key_len, 4);
    put_le(d + 60, names_len, 4);
    memcpy(d + FSA_CACHE_HEADER_SIZE, key, key_len);
    uint8_t *names = d + FSA_CACHE_HEADER_SIZE + key_len, *payload = names + names_len;
    for (size_t i = 0; i < names_len; i++) names[i] = (uint8_t)(fz_u8(in) | 1); /* no NUL */
    for (size_t i = 0; i < payload_len; i++) payload[i] = fz_u8(in);
    fsa_digest128(d + 24, payload, payload_len);
    fsa_digest128(d + 40, key, key_len);
    fsa_digest128(d + 64, names, names_len);
    free(key);
    if (mode & 0x10) d[fz_u8(in) % size] ^= (uint8_t)(fz_u8(in) | 1);
    *size_out = mode & 0x20 ? (size_t)fz_u8(in) % (size + 1) : size;
    return d;
}

static void write_file(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(d, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

#define REQUIRE(cond)                                                                   \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_cache_entry: %s failed (%s)\n", #cond, fsa_last_error()); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size};
    const uint8_t how = fz_u8(&in);
    const int record = how & 2; /* a tuning record (.tune) instead of a cubin */
    size_t n = 0;
    uint8_t *file = NULL;
    if (how & 1) {
        file = assemble(&in, &n);
    } else {
        n = in.size;
        file = malloc(n ? n : 1);
        memcpy(file, in.data, n);
    }
    char *path = record ? fsa_disk_cache_record_path(g_dc, &g_key, TARGET) : fsa_disk_cache_entry_path(g_dc, &g_key, TARGET);
    REQUIRE(path != NULL);
    write_file(path, file, n);

    /* What the lookup must decide, from the format alone. The magic with
     * another format version is another library version's entry: a miss,
     * neither counted nor deleted. */
    fsa_dc_entry_view v;
    const int valid = fsa_dc_parse_entry(&v, file, n) && fsa_dc_digest_is_hex(v.key_digest, g_key.hex) &&
                      v.key_len == strlen(g_key.text) && memcmp(v.key_text, g_key.text, v.key_len) == 0;
    const int foreign = n >= 12 && memcmp(file, "FSACUBIN", 8) == 0 &&
                        ((uint32_t)file[8] | (uint32_t)file[9] << 8 | (uint32_t)file[10] << 16 |
                         (uint32_t)file[11] << 24) != FSA_CACHE_FORMAT_VERSION;

    fsa_disk_entry e;
    uint64_t corrupt = 0;
    fsa_error_clear();
    const fsa_status st = record ? fsa_disk_cache_lookup_record(&e, g_dc, &g_key, TARGET, &corrupt)
                                 : fsa_disk_cache_lookup(&e, g_dc, &g_key, TARGET, 0, &corrupt);
    fz_check_status(st, "lookup");
    if (valid) {
        REQUIRE(st == FSA_STATUS_OK);
        REQUIRE(e.cubin_size == v.payload_len && memcmp(e.cubin, v.payload, e.cubin_size) == 0);
        REQUIRE(strcmp(e.key_text, g_key.text) == 0);
        REQUIRE(strlen(e.entry_names) == v.names_len && memcmp(e.entry_names, v.names, v.names_len) == 0);
        fsa_disk_entry_free(&e);
    } else if (foreign) {
        REQUIRE(st == FSA_STATUS_NOT_FOUND);
        REQUIRE(corrupt == 0);
        REQUIRE(access(path, F_OK) == 0); /* left for the library it belongs to */
    } else {
        REQUIRE(st == FSA_STATUS_NOT_FOUND);
        REQUIRE(corrupt == 1);
        REQUIRE(access(path, F_OK) != 0); /* a bad entry of a writable cache is deleted */
    }
    unlink(path);
    free(path);
    free(file);
    return 0;
}
