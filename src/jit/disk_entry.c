/* The entry format of the disk cache (cache/README.md, "Entry format"):
 * encoding the part before the payload, and parsing a whole file. */
#include "disk_cache_internal.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define STAGE FSA_DC_STAGE
#define HEX_LEN FSA_DC_HEX_LEN
#define MAX_TEXT FSA_DC_MAX_TEXT
#define MAX_PAYLOAD FSA_DC_MAX_PAYLOAD

/* Entry header: magic, version, flags, payload length, payload checksum, key
 * digest, key-text length, entry-names length, entry-names checksum. */
#define HEADER_SIZE FSA_CACHE_HEADER_SIZE

static const char k_magic[8] = {'F', 'S', 'A', 'C', 'U', 'B', 'I', 'N'};

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

int fsa_dc_digest_is_hex(const uint8_t digest[16], const char *hex)
{
    char h[HEX_LEN + 1];
    fsa_hex(h, digest, 16);
    return strcmp(h, hex) == 0;
}

uint64_t fsa_dc_max_entry_size(void) { return HEADER_SIZE + 2 * (uint64_t)MAX_TEXT + MAX_PAYLOAD; }

/* Another library version may share the cache root; its entries are not
 * damage, so they are told apart before any other check. */
int fsa_dc_foreign_format(const uint8_t *d, size_t size, uint32_t *version_out)
{
    if (size < FSA_DC_MIN_FILE || memcmp(d, k_magic, sizeof k_magic) != 0) return 0;
    *version_out = get_u32(d + 8);
    return *version_out != FSA_CACHE_FORMAT_VERSION;
}

/* 1 when the bytes are a whole, self-consistent entry: header, lengths that
 * add up to the file size exactly, key digest of the stored key text,
 * entry-names checksum and payload checksum. Which key it is for is the caller's check. */
int fsa_dc_parse_entry(fsa_dc_entry_view *v, const uint8_t *d, size_t size)
{
    if (size < HEADER_SIZE || memcmp(d, k_magic, sizeof k_magic) != 0) return 0;
    if (get_u32(d + 8) != FSA_CACHE_FORMAT_VERSION || get_u32(d + 12) != 0) return 0;
    v->payload_len = get_u64(d + 16);
    v->key_digest = d + 40;
    v->key_len = get_u32(d + 56);
    v->names_len = get_u32(d + 60);
    if (v->key_len == 0 || v->key_len >= MAX_TEXT || v->names_len >= MAX_TEXT) return 0;
    if (v->payload_len == 0 || v->payload_len > MAX_PAYLOAD) return 0;
    if ((uint64_t)size != HEADER_SIZE + (uint64_t)v->key_len + v->names_len + v->payload_len) return 0;
    v->key_text = (const char *)d + HEADER_SIZE;
    v->names = v->key_text + v->key_len;
    v->payload = (const uint8_t *)v->names + v->names_len;
    /* Both texts are handed out as C strings. */
    if (memchr(v->key_text, '\0', v->key_len) || memchr(v->names, '\0', v->names_len)) return 0;
    uint8_t h[16];
    fsa_digest128(h, v->key_text, v->key_len);
    if (memcmp(h, v->key_digest, 16) != 0) return 0;
    fsa_digest128(h, v->names, v->names_len);
    if (memcmp(h, d + 64, 16) != 0) return 0;
    fsa_digest128(h, v->payload, (size_t)v->payload_len);
    return memcmp(h, d + 24, 16) == 0;
}

fsa_status fsa_dc_entry_from_view(fsa_disk_entry *out, const fsa_dc_entry_view *v)
{
    fsa_status st = FSA_STATUS_OK;
    memset(out, 0, sizeof *out);
    out->cubin = malloc((size_t)v->payload_len);
    out->entry_names = fsa_dc_dup_n(v->names, v->names_len);
    out->key_text = fsa_dc_dup_n(v->key_text, v->key_len);
    if (out->cubin == NULL || out->entry_names == NULL || out->key_text == NULL) {
        fsa_disk_entry_free(out);
        FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, STAGE, "out of host memory");
    }
    memcpy(out->cubin, v->payload, (size_t)v->payload_len);
    out->cubin_size = (size_t)v->payload_len;
cleanup:
    return st;
}

/* Header, key text and entry names: everything before the payload. */
fsa_status fsa_dc_build_head(uint8_t **out, size_t *out_len, const fsa_kernel_key *key, const char *names,
                             const void *cubin, size_t cubin_size)
{
    fsa_status st = FSA_STATUS_OK;
    size_t key_len = strlen(key->text), names_len = strlen(names);
    uint8_t *h = malloc(HEADER_SIZE + key_len + names_len);
    FSA_CHECK_ALLOC(h, STAGE);
    memcpy(h, k_magic, sizeof k_magic);
    put_u32(h + 8, FSA_CACHE_FORMAT_VERSION);
    put_u32(h + 12, 0);
    put_u64(h + 16, cubin_size);
    fsa_digest128(h + 24, cubin, cubin_size);
    memcpy(h + 40, key->digest, 16);
    put_u32(h + 56, (uint32_t)key_len);
    put_u32(h + 60, (uint32_t)names_len);
    fsa_digest128(h + 64, names, names_len);
    memcpy(h + HEADER_SIZE, key->text, key_len);
    memcpy(h + HEADER_SIZE + key_len, names, names_len);
    *out = h;
    *out_len = HEADER_SIZE + key_len + names_len;
cleanup:
    return st;
}
