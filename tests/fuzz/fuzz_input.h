/* Reading fuzz input as values: each read takes bytes from the front and
 * gives zeros once the input runs out, so every input decodes to something.
 * Integers mostly come from a table of edge values (limits, small counts,
 * aligned sizes) so that short inputs reach the checks behind the first
 * ones; a raw 8-byte value is one of the choices. */
#ifndef FSA_FUZZ_INPUT_H
#define FSA_FUZZ_INPUT_H

#include "fsa.h"
#include "base/status_internal.h" /* fsa_error_clear: a failure must set its own record */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>

typedef struct fz_input {
    const uint8_t *data;
    size_t size;
} fz_input;

static inline uint8_t fz_u8(fz_input *in)
{
    if (in->size == 0) return 0;
    in->size--;
    return *in->data++;
}

static inline uint64_t fz_raw64(fz_input *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)fz_u8(in) << (8 * i);
    return v;
}

/* A signed integer: an edge value, a small one, or raw bytes. */
static inline int64_t fz_i64(fz_input *in)
{
    static const int64_t edges[] = {0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256, -1, -8, -16,
                                    INT32_MAX, INT32_MAX - 1, INT32_MIN, (int64_t)INT32_MAX + 1,
                                    INT64_MAX, INT64_MIN, INT64_MAX / 2, (int64_t)1 << 40};
    const uint8_t sel = fz_u8(in);
    if (sel < 0x80) return edges[sel % (sizeof edges / sizeof edges[0])];
    if (sel < 0xf0) return (int64_t)(sel - 0x80); /* 0..111 */
    return (int64_t)fz_raw64(in);
}

/* An int field: the same values cut to int the way a caller's cast would. */
static inline int fz_int(fz_input *in) { return (int)(int32_t)(uint32_t)(uint64_t)fz_i64(in); }

/* A device pointer: an address with some alignment, NULL, or raw bytes (an
 * input that ran out gives an aligned one). The library must never
 * dereference it on the host. */
static inline uint64_t fz_ptr(fz_input *in)
{
    const uint8_t sel = fz_u8(in);
    switch (sel % 8) {
    case 1: return 0;
    case 2: return fz_raw64(in);
    case 3: return 0x7f0000000000ull + 4 * (uint64_t)fz_u8(in);
    default: return 0x7f0000000000ull + 256 * (uint64_t)fz_u8(in); /* aligned for every use */
    }
}

/* A NULL object pointer now and then (never for an input that ran out). */
#define FZ_OR_NULL(in, p) (fz_u8(in) == 0xa5 ? NULL : (p))

/* A tensor view: a pointer and two strides; strides mostly multiples of 8. */
static inline fsa_tensor fz_tensor(fz_input *in)
{
    fsa_tensor t;
    t.ptr = fz_ptr(in);
    t.token_stride = fz_i64(in);
    t.head_stride = fz_i64(in);
    if (fz_u8(in) & 1) { /* wrapping, as a caller's arithmetic might */
        t.token_stride = (int64_t)((uint64_t)t.token_stride * 8);
        t.head_stride = (int64_t)((uint64_t)t.head_stride * 8);
    }
    return t;
}

/* struct_size of a struct of `size` bytes: usually right, sometimes not (the
 * caller's buffer is always `size` bytes, so any accepted value is safe). */
static inline size_t fz_struct_size(fz_input *in, size_t size)
{
    const uint8_t sel = fz_u8(in);
    if (sel < 0xc0) return size;
    if (sel < 0xe0) return (size_t)fz_u8(in); /* small, usually below the first version */
    if (sel < 0xf0) return size - (size_t)(sel & 15);
    return (size_t)fz_raw64(in);
}

/* What every call must do: a known status, and its own error record when it
 * failed (the record is cleared before the call, so an old one cannot pass). */
static inline void fz_check_status(fsa_status st, const char *what)
{
    static int trace = -1; /* FSA_FUZZ_TRACE=1: one line per call, to see which checks inputs reach */
    if (trace < 0) trace = getenv("FSA_FUZZ_TRACE") != NULL;
    if (trace) fprintf(stderr, "fuzz: %s -> %s\n", what, fsa_status_name(st));
    if (strcmp(fsa_status_name(st), "FSA_STATUS_UNKNOWN") == 0) {
        fprintf(stderr, "%s returned unknown status %d\n", what, (int)st);
        abort();
    }
    if (st != FSA_STATUS_OK) {
        const char *e = fsa_last_error();
        const fsa_error_info *info = fsa_last_error_info();
        if (e == NULL || e[0] == '\0' || info->status != st || info->message == NULL || info->message[0] == '\0') {
            fprintf(stderr, "%s returned %s without a matching error record: '%s'\n", what, fsa_status_name(st),
                    e ? e : "(null)");
            abort();
        }
    }
}

#define FZ_CALL(expr)                       \
    do {                                    \
        fsa_error_clear();                  \
        fz_check_status((expr), #expr);     \
    } while (0)

static char *fz_made_dir;

static int fz_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

static void fz_remove_made_dir(void)
{
    if (fz_made_dir != NULL) nftw(fz_made_dir, fz_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A directory for a harness's cache: $FSA_FUZZ_CACHE_DIR (kept, so that
 * compiled kernels serve the next run), else a new one under $TMPDIR that
 * goes when the process exits. */
static inline char *fz_cache_dir(const char *tag)
{
    const char *env = getenv("FSA_FUZZ_CACHE_DIR");
    if (env != NULL && env[0] != '\0') return strdup(env);
    const char *tmp = getenv("TMPDIR");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/fsa_fuzz_%s_XXXXXX", tmp && tmp[0] ? tmp : "/tmp", tag);
    if (mkdtemp(buf) == NULL) return NULL;
    fz_made_dir = strdup(buf);
    atexit(fz_remove_made_dir);
    return strdup(buf);
}

#endif
