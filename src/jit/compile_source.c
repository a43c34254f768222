#include "compile_source.h"

#include "base/status_internal.h"
#include "base/util.h"
#include "templates.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 16

typedef struct inliner {
    fsa_strbuf out;
    unsigned char *included; /* per template index */
} inliner;

/* The file name of a `#include "name"` line, or 0. */
static size_t include_name(const char *line, size_t len, const char **name)
{
    const char *p = line, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end || *p++ != '#') return 0;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if ((size_t)(end - p) < 7 || memcmp(p, "include", 7) != 0) return 0;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end || *p++ != '"') return 0;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (q == NULL) return 0;
    *name = p;
    return (size_t)(q - p);
}

static int is_pragma_once(const char *line, size_t len)
{
    const char *p = line, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end || *p++ != '#') return 0;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if ((size_t)(end - p) < 6 || memcmp(p, "pragma", 6) != 0) return 0;
    p += 6;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return (size_t)(end - p) >= 4 && memcmp(p, "once", 4) == 0;
}

/* The index of the embedded header with that name, or -1. */
static long header_index(const char *name, size_t len)
{
    if (len < 5 || memcmp(name + len - 4, ".cuh", 4) != 0) return -1;
    for (size_t i = 0; i < fsa_template_count; i++)
        if (strlen(fsa_templates[i].name) == len && memcmp(fsa_templates[i].name, name, len) == 0) return (long)i;
    return -1;
}

static fsa_status inline_text(inliner *in, const char *text, const char *file, int depth)
{
    fsa_status st = FSA_STATUS_OK;
    if (depth > MAX_DEPTH)
        FSA_FAIL(FSA_STATUS_RENDER_FAILED, "compile", "%s: headers nested more than %d deep", file, MAX_DEPTH);
    long line_no = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *name = NULL;
        size_t name_len = include_name(p, len, &name);
        long h = name_len ? header_index(name, name_len) : -1;
        line_no++;
        if (h >= 0 && !in->included[h]) {
            in->included[h] = 1;
            fsa_strbuf_appendf(&in->out, "#line 1 \"%s%s\"\n", FSA_COMPILE_SOURCE_DIR, fsa_templates[h].name);
            FSA_CHECK(inline_text(in, fsa_templates[h].text, fsa_templates[h].name, depth + 1));
            fsa_strbuf_appendf(&in->out, "#line %ld \"%s%s\"\n", line_no + 1, FSA_COMPILE_SOURCE_DIR, file);
        } else if (h >= 0 || is_pragma_once(p, len)) {
            fsa_strbuf_append(&in->out, "\n");
        } else {
            fsa_strbuf_append_n(&in->out, p, len);
            fsa_strbuf_append(&in->out, "\n");
        }
        p = nl ? nl + 1 : p + len;
    }
cleanup:
    return st;
}

fsa_status fsa_compile_source(char **out, const char *source, const char *program_name)
{
    fsa_status st = FSA_STATUS_OK;
    inliner in = {{0}, NULL};
    *out = NULL;
    in.included = calloc(fsa_template_count + 1, 1);
    FSA_CHECK_ALLOC(in.included, "compile");
    /* A main file that is itself a header must not be written in again. */
    long self = header_index(program_name, strlen(program_name));
    if (self >= 0) in.included[self] = 1;
    FSA_CHECK(inline_text(&in, source, program_name, 0));
    *out = fsa_strbuf_take(&in.out);
    FSA_CHECK_ALLOC(*out, "compile");
cleanup:
    fsa_strbuf_free(&in.out);
    free(in.included);
    return st;
}
