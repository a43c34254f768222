#include "kernel_key.h"

#include "base/status_internal.h"
#include "templates.h"
#include "base/util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

void fsa_digest128(uint8_t out[16], const void *data, size_t n)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
    memcpy(out, c.digest, 16);
}

static int safe_value(const char *v)
{
    /* Values end up in file names and one-line fields. */
    if (*v == '\0') return 0;
    for (const char *c = v; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-'))
            return 0;
    return 1;
}

fsa_status fsa_key_build(fsa_kernel_key *out, const fsa_key_inputs *in)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_strbuf text = {0};
    fsa_strbuf name = {0};
    size_t *order = NULL;
    memset(out, 0, sizeof *out);
    if (in == NULL || in->family == NULL || in->target == NULL || (in->n_params && !in->params) ||
        (in->n_options && !in->options))
        FSA_FAIL(FSA_STATUS_NULL_POINTER, "key", "incomplete key inputs");
    if (!safe_value(in->family) || !safe_value(in->target))
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "key", "family or target has characters outside [A-Za-z0-9_.-]");
    order = malloc((in->n_params ? in->n_params : 1) * sizeof *order);
    FSA_CHECK_ALLOC(order, "key");
    /* Parameters sorted by name: the key does not depend on the caller's order. */
    for (size_t i = 0; i < in->n_params; i++) {
        const fsa_param *p = &in->params[i];
        /* Tags become part of file names too. */
        if (p->name == NULL || p->value == NULL || !safe_value(p->name) || !safe_value(p->value) ||
            (p->tag != NULL && p->tag[0] != '\0' && !safe_value(p->tag)))
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "key", "parameter %zu of %s is empty or unsafe", i,
                     in->family);
        size_t j = i;
        while (j > 0 && strcmp(in->params[order[j - 1]].name, p->name) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (size_t i = 1; i < in->n_params; i++)
        if (strcmp(in->params[order[i - 1]].name, in->params[order[i]].name) == 0)
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "key", "parameter %s given twice",
                     in->params[order[i]].name);

    fsa_strbuf_appendf(&text, "fsa-kernel-key %d\nlibrary %s\ntemplates %s\nfamily %s\n",
                       FSA_KEY_SCHEMA, FSA_VERSION_STRING, fsa_templates_digest(), in->family);
    for (size_t i = 0; i < in->n_params; i++) {
        const fsa_param *p = &in->params[order[i]];
        fsa_strbuf_appendf(&text, "param %s %s\n", p->name, p->value);
    }
    fsa_strbuf_appendf(&text, "nvrtc %s\ntarget %s\n", in->nvrtc_version ? in->nvrtc_version : "none",
                       in->target);
    for (size_t i = 0; i < in->n_options; i++) {
        if (in->options[i] == NULL || strchr(in->options[i], '\n'))
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "key", "option %zu is NULL or has a newline", i);
        fsa_strbuf_appendf(&text, "option %s\n", in->options[i]);
    }

    fsa_strbuf_append(&name, in->family);
    for (size_t i = 0; i < in->n_params; i++) {
        const fsa_param *p = &in->params[i];
        if (p->tag == NULL) continue;
        fsa_strbuf_appendf(&name, "_%s%s", p->tag, p->value);
    }

    if (text.failed || name.failed) FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, "key", "out of host memory");
    fsa_digest128(out->digest, text.data, text.len);
    fsa_hex(out->hex, out->digest, 16);
    out->text = fsa_strbuf_take(&text);
    out->name = fsa_strbuf_take(&name);
    if (out->text == NULL || out->name == NULL) {
        fsa_key_free(out);
        FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, "key", "out of host memory");
    }
cleanup:
    fsa_strbuf_free(&text);
    fsa_strbuf_free(&name);
    free(order);
    return st;
}

void fsa_key_free(fsa_kernel_key *key)
{
    if (key == NULL) return;
    free(key->text);
    free(key->name);
    memset(key, 0, sizeof *key);
}

/* Advances *p past one line of the text ending at `end`; returns its start
 * and length through out. */
static int next_line(const char **p, const char *end, const char **start, size_t *len)
{
    if (*p >= end) return 0;
    *start = *p;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    *len = (size_t)((nl ? nl : end) - *p);
    *p = nl ? nl + 1 : end;
    return 1;
}

static int is_nvrtc_line(const char *s, size_t n) { return n >= 6 && memcmp(s, "nvrtc ", 6) == 0; }

/* The decimal number at *s (advanced past it), or -1 past `max` (a forged or
 * damaged text: no overflow, whatever its length). */
static int bounded_decimal(const char **s, const char *end, int max)
{
    int v = 0;
    for (; *s < end && **s >= '0' && **s <= '9'; (*s)++) {
        if (v > (max - (**s - '0')) / 10) return -1;
        v = v * 10 + (**s - '0');
    }
    return v;
}

int fsa_key_text_nvrtc_version(const char *text)
{
    const char *s;
    size_t n;
    const char *text_end = text + strlen(text);
    while (next_line(&text, text_end, &s, &n)) {
        if (!is_nvrtc_line(s, n)) continue;
        const char *p = s + 6, *end = s + n;
        if (p == end || *p < '0' || *p > '9') return 0; /* "none" */
        int major = bounded_decimal(&p, end, FSA_KEY_NVRTC_MAJOR_MAX), minor = 0;
        if (major >= 0 && p < end && *p == '.') {
            p++;
            minor = bounded_decimal(&p, end, 99);
        }
        return major < 0 || minor < 0 ? INT_MAX : major * 1000 + minor * 10;
    }
    return 0;
}

int fsa_key_text_names_target(const char *text, size_t len, const char *target)
{
    static const char field[] = "target ";
    const size_t f = sizeof field - 1, t = strlen(target);
    const char *end = text + len, *s;
    size_t n;
    while (next_line(&text, end, &s, &n))
        if (n == f + t && memcmp(s, field, f) == 0 && memcmp(s + f, target, t) == 0) return 1;
    return 0;
}

int fsa_key_text_fits_name(const char *text, size_t len, const char *name, size_t name_len)
{
    static const char schema[] = "fsa-kernel-key ", field[] = "family ";
    const size_t sl = sizeof schema - 1, f = sizeof field - 1;
    const char *end = text + len, *s;
    size_t n;
    if (!next_line(&text, end, &s, &n) || n <= sl || memcmp(s, schema, sl) != 0) return 0;
    while (next_line(&text, end, &s, &n)) {
        if (n <= f || memcmp(s, field, f) != 0) continue;
        const size_t fl = n - f; /* the family */
        return name_len >= fl && memcmp(name, s + f, fl) == 0 && (name_len == fl || name[fl] == '_');
    }
    return 0;
}

int fsa_key_text_equal_except_nvrtc(const char *a, const char *b)
{
    const char *sa, *sb, *end_a = a + strlen(a), *end_b = b + strlen(b);
    size_t na, nb;
    for (;;) {
        int ha = next_line(&a, end_a, &sa, &na);
        while (ha && is_nvrtc_line(sa, na)) ha = next_line(&a, end_a, &sa, &na);
        int hb = next_line(&b, end_b, &sb, &nb);
        while (hb && is_nvrtc_line(sb, nb)) hb = next_line(&b, end_b, &sb, &nb);
        if (!ha || !hb) return ha == hb;
        if (na != nb || memcmp(sa, sb, na) != 0) return 0;
    }
}
