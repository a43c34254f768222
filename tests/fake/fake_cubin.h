/* The payload tests/fake/fake_nvrtc.c "compiles" a source into, as a function
 * of source and options only, so that the fault probe can tell whether the
 * bytes a cache handed out are exactly the ones a compile gives:
 *   "FAKECUBN", 8-byte little-endian size, size - 32 bytes of splitmix64
 *   output seeded with the XXH3-64 of the source and of each option with its
 *   NUL, then the XXH3-128 (canonical) of everything before it.
 * Include after defining XXH_INLINE_ALL and including xxhash.h. */
#ifndef FSA_FAKE_CUBIN_H
#define FSA_FAKE_CUBIN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_CUBIN_MIN 64

/* Bytes per payload: $FSA_FAKE_NVRTC_BYTES, default 65536, at least 64. */
static inline size_t fake_cubin_size(void)
{
    const char *v = getenv("FSA_FAKE_NVRTC_BYTES");
    size_t n = v && *v ? (size_t)strtoull(v, NULL, 10) : 65536;
    return n < FAKE_CUBIN_MIN ? FAKE_CUBIN_MIN : n;
}

/* Fills out[0, size) with the payload of `source` compiled with `opts`. */
static inline int fake_cubin_fill(uint8_t *out, size_t size, const char *source, const char *const *opts, int n)
{
    XXH3_state_t *h = XXH3_createState();
    if (h == NULL) return -1;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, source, strlen(source));
    for (int i = 0; i < n; i++) XXH3_64bits_update(h, opts[i], strlen(opts[i]) + 1);
    uint64_t seed = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    memcpy(out, "FAKECUBN", 8);
    for (int i = 0; i < 8; i++) out[8 + i] = (uint8_t)((uint64_t)size >> (8 * i));
    for (size_t i = 16; i < size - 16; i++) {
        seed += 0x9e3779b97f4a7c15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        out[i] = (uint8_t)(z ^ (z >> 31));
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(out, size - 16));
    memcpy(out + size - 16, c.digest, 16);
    return 0;
}

#endif
