#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

static int strbuf_reserve(fsa_strbuf *b, size_t extra)
{
    if (b->failed) return 0;
    if (b->len + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->failed = 1;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

void fsa_strbuf_append_n(fsa_strbuf *b, const char *s, size_t n)
{
    if (!strbuf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void fsa_strbuf_append(fsa_strbuf *b, const char *s) { fsa_strbuf_append_n(b, s, strlen(s)); }

void fsa_strbuf_appendf(fsa_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0 && strbuf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

char *fsa_strbuf_take(fsa_strbuf *b)
{
    char *p = NULL;
    if (!b->failed) {
        if (b->data == NULL && strbuf_reserve(b, 0)) b->data[0] = '\0';
        p = b->failed ? NULL : b->data;
        if (p != NULL) b->data = NULL;
    }
    fsa_strbuf_free(b);
    return p;
}

void fsa_strbuf_free(fsa_strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

void *fsa_array_room(void *v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap) return v;
    const size_t want = *cap ? 2 * *cap : first;
    if (want > SIZE_MAX / elem) return NULL;
    void *grown = realloc(v, want * elem);
    if (grown != NULL) *cap = want;
    return grown;
}

double fsa_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int fsa_env_flag(const char *name, int fallback)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return fallback;
    static const char *const yes[] = {"1", "on", "true", "yes"};
    static const char *const no[] = {"0", "off", "false", "no"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) return 1;
        if (strcasecmp(v, no[i]) == 0) return 0;
    }
    return fallback;
}

int fsa_env_int(const char *name, int lo, int hi, int fallback)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return fallback;
    /* Digits, after a minus only where the range has negatives: strtol would also skip leading blanks, take a
     * plus, and read "-0" as 0 (for the switches, all from 0 up, a sign reads as unset). */
    if (!isdigit((unsigned char)v[v[0] == '-' && lo < 0])) return fallback;
    char *end = NULL;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi) return fallback;
    return (int)x;
}

void fsa_hex(char *out, const uint8_t *bytes, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

uint64_t fsa_temp_suffix(void)
{
    static atomic_uint_fast64_t counter;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
           (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
}
