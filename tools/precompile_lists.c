/* fsa-precompile's command-line values (precompile_lists.h). */
#include "precompile_lists.h"

#include "tool_args.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void int_list_free(int_list *l)
{
    free(l->v);
    *l = (int_list){0};
}

void str_list_free(str_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (str_list){0};
}

static int int_list_has(const int_list *l, int x)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x) return 1;
    return 0;
}

int int_list_add(int_list *l, int x)
{
    if (int_list_has(l, x)) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        int *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

/* Appends a copy of the first len bytes of s unless present; -1 when out of
 * memory. */
static int str_list_add(str_list *l, const char *s, size_t len)
{
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i]) == len && strncmp(l->v[i], s, len) == 0) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4;
        char **v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) return -1;
        l->v = v;
        l->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->v[l->n++] = copy;
    return 0;
}

void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n" PROG ": try '" PROG " --help'\n", stderr);
    va_end(ap);
}

/* A decimal number 0..MAX_LIST_VALUE at *p; advances *p. No sign, no
 * spaces: a list is one shell word. */
static int parse_number(const char **p, long *out)
{
    const char *s = *p;
    long v = 0;
    if (!isdigit((unsigned char)*s)) return -1;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (*s - '0');
        if (v > MAX_LIST_VALUE) return -1;
    }
    *p = s;
    *out = v;
    return 0;
}

/* parse_number, but at least 1: no grid dimension or step can be 0. */
static int parse_positive(const char **p, long *out)
{
    return parse_number(p, out) == 0 && *out >= 1 ? 0 : -1;
}

/* One item of a list: N, N-M or N-M:S, appended to out. *listed counts the
 * values the list's items have named so far, repeats included: a cap on it
 * (rather than on the distinct values kept) bounds the work of a list of many
 * overlapping ranges, each value of which would be looked up among the kept. */
static int parse_range(int_list *out, const char **p, const char *option, size_t *listed)
{
    const char *item = *p;
    long lo, hi, step = 1;
    if (parse_positive(p, &lo) != 0) goto bad;
    hi = lo;
    if (**p == '-') {
        (*p)++;
        if (parse_positive(p, &hi) != 0) goto bad;
        if (**p == ':') {
            (*p)++;
            if (parse_positive(p, &step) != 0) goto bad;
        }
    }
    if (**p != ',' && **p != '\0') goto bad;
    if (hi < lo) {
        usage_error("%s: range '%.*s' runs backwards", option, (int)(*p - item), item);
        return -1;
    }
    for (long v = lo; v <= hi; v += step) {
        if (++*listed > MAX_LIST_VALUES) {
            usage_error("%s: more than %d values", option, MAX_LIST_VALUES);
            return -1;
        }
        if (int_list_add(out, (int)v) != 0) {
            usage_error("out of memory");
            return -1;
        }
    }
    return 0;
bad:
    usage_error("%s: '%.*s' is not a number list item (numbers 1..%ld, e.g. 64,128 or 1-8 or 16-256:16)",
                option, (int)strcspn(item, ","), item, MAX_LIST_VALUE);
    return -1;
}

int parse_int_list(int_list *out, const char *text, const char *option)
{
    size_t listed = 0;
    out->n = 0;
    if (*text == '\0') {
        usage_error("%s: empty list", option);
        return -1;
    }
    for (const char *p = text;;) {
        if (parse_range(out, &p, option, &listed) != 0) return -1;
        if (*p == '\0') return 0;
        p++; /* the comma */
        if (*p == '\0') {
            usage_error("%s: '%s' ends with a comma", option, text);
            return -1;
        }
    }
}

int parse_str_list(str_list *out, const char *text, const char *option)
{
    str_list_free(out);
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        if (len == 0) {
            usage_error("%s: empty item in '%s'", option, text);
            return -1;
        }
        if (isspace((unsigned char)p[0]) || isspace((unsigned char)p[len - 1])) {
            usage_error("%s: blank around an item in '%s'", option, text);
            return -1;
        }
        if (str_list_add(out, p, len) != 0) {
            usage_error("out of memory");
            return -1;
        }
        if (p[len] == '\0') return 0;
        p += len + 1;
    }
}

int parse_one(long *out, const char *text, long min, long max, const char *option)
{
    const char *p = text;
    if (parse_number(&p, out) != 0 || *p != '\0' || *out < min || *out > max) {
        usage_error("%s: '%s' is not a number from %ld to %ld", option, text, min, max);
        return -1;
    }
    return 0;
}

int parse_bytes(uint64_t *out, const char *text)
{
    if (tool_parse_bytes(out, text) == 0) return 0;
    usage_error("--max-bytes: '%s' is not a byte count (e.g. 500M, 2G, 0)", text);
    return -1;
}

int parse_dtypes(int_list *out, const char *text)
{
    str_list names = {0};
    int rc = parse_str_list(&names, text, "--dtype");
    out->n = 0;
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        fsa_dtype d;
        if (tool_parse_dtype(&d, names.v[i]) != 0) {
            usage_error("--dtype: unknown type '%s' (" TOOL_DTYPE_SPELLINGS ")", names.v[i]);
            rc = -1;
            break;
        }
        if (int_list_add(out, (int)d) != 0) {
            usage_error("out of memory");
            rc = -1;
        }
    }
    str_list_free(&names);
    return rc;
}

