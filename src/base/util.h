/* Small host helpers shared by the library: a growable string, clocks,
 * environment flags. */
#ifndef FSA_UTIL_H
#define FSA_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct fsa_strbuf {
    char *data;
    size_t len;
    size_t cap;
    int failed; /* an allocation failed; data holds what fit */
} fsa_strbuf;

void fsa_strbuf_append(fsa_strbuf *b, const char *s);
void fsa_strbuf_append_n(fsa_strbuf *b, const char *s, size_t n);
void fsa_strbuf_appendf(fsa_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Hands the buffer to the caller (NULL after a failed allocation). */
char *fsa_strbuf_take(fsa_strbuf *b);
void fsa_strbuf_free(fsa_strbuf *b);

/* Room for element n of a growable array of `elem`-byte elements at v with *cap of them: v itself while
 * n < *cap, else v reallocated to twice *cap (`first` when 0), *cap updated. NULL when out of memory (v and
 * *cap left as they were). */
void *fsa_array_room(void *v, size_t *cap, size_t n, size_t elem, size_t first);

double fsa_now_ms(void); /* monotonic */

/* A random 64-bit value that spreads temporary file names (created with
 * O_EXCL, which alone keeps them unique): getrandom, or without entropy yet
 * the clock and a process-wide counter. */
uint64_t fsa_temp_suffix(void);

/* "1", "on", "true", "yes" -> 1; "0", "off", "false", "no" -> 0; else `fallback`. */
int fsa_env_flag(const char *name, int fallback);

/* The decimal integer in [lo, hi] that variable `name` holds, whole (digits,
 * after a minus only when lo < 0: no blanks, plus sign, "-0" for a range from
 * 0, or trailing characters), else `fallback`: unset, empty, malformed and
 * out-of-range values all read as absent. */
int fsa_env_int(const char *name, int lo, int hi, int fallback);

/* Lower-case hex of `n` bytes into `out` (2n + 1 chars). */
void fsa_hex(char *out, const uint8_t *bytes, size_t n);

#endif
