#include "resource_usage.h"

#include "base/status_internal.h"

#include <stdlib.h>
#include <string.h>

/* ptxas -v writes, per entry point:
 *   ptxas info    : Compiling entry function 'NAME' for 'sm_90a'
 *   ptxas info    : Function properties for NAME
 *   ptxas         .     S bytes stack frame, T bytes spill stores, L bytes spill loads
 *   ptxas info    : Used R registers, used B barriers, ..., M bytes smem, ...
 * and "Function properties" blocks (without a "Used" line) for device
 * functions that were not inlined. */

/* The number just before `label` in [line, end), or 0. */
static int number_before(const char *line, const char *end, const char *label)
{
    size_t n = strlen(label);
    for (const char *p = line; p + n <= end; p++) {
        if (memcmp(p, label, n) != 0) continue;
        const char *d = p;
        while (d > line && d[-1] == ' ') d--;
        const char *digits = d;
        while (digits > line && digits[-1] >= '0' && digits[-1] <= '9') digits--;
        return digits < d ? atoi(digits) : 0;
    }
    return 0;
}

static const char *find_in(const char *line, const char *end, const char *text)
{
    size_t n = strlen(text);
    for (const char *p = line; p + n <= end; p++)
        if (memcmp(p, text, n) == 0) return p + n;
    return NULL;
}

/* The index of the function called `name`, added when new; -1 when out of memory. */
static long function_index(fsa_resource_usage *u, const char *name, size_t len)
{
    for (size_t i = 0; i < u->count; i++)
        if (strlen(u->functions[i].name) == len && memcmp(u->functions[i].name, name, len) == 0) return (long)i;
    fsa_function_usage *grown = realloc(u->functions, (u->count + 1) * sizeof *grown);
    if (grown == NULL) return -1;
    u->functions = grown;
    fsa_function_usage *f = &grown[u->count];
    memset(f, 0, sizeof *f);
    f->registers = -1;
    f->name = strndup(name, len);
    if (f->name == NULL) return -1;
    return (long)u->count++;
}

fsa_status fsa_resource_usage_parse(fsa_resource_usage *out, const char *log)
{
    memset(out, 0, sizeof *out);
    long entry = -1; /* "Used ..." lines belong to it */
    long props = -1; /* stack and spill lines belong to it */
    for (const char *line = log ? log : ""; *line;) {
        const char *end = strchr(line, '\n');
        if (end == NULL) end = line + strlen(line);
        const char *name;
        if ((name = find_in(line, end, "Compiling entry function '")) != NULL) {
            const char *q = memchr(name, '\'', (size_t)(end - name));
            if ((entry = function_index(out, name, (size_t)((q ? q : end) - name))) < 0) goto out_of_memory;
            out->functions[entry].entry = 1;
        } else if ((name = find_in(line, end, "Function properties for ")) != NULL) {
            const char *e = end;
            while (e > name && (e[-1] == ' ' || e[-1] == '\r')) e--;
            if ((props = function_index(out, name, (size_t)(e - name))) < 0) goto out_of_memory;
        } else if (props >= 0 && find_in(line, end, "bytes stack frame")) {
            fsa_function_usage *f = &out->functions[props];
            f->stack_bytes = number_before(line, end, "bytes stack frame");
            f->spill_store_bytes = number_before(line, end, "bytes spill stores");
            f->spill_load_bytes = number_before(line, end, "bytes spill loads");
        } else if (entry >= 0 && find_in(line, end, ": Used ") && find_in(line, end, " registers")) {
            fsa_function_usage *f = &out->functions[entry];
            f->registers = number_before(line, end, "registers");
            f->shared_bytes = number_before(line, end, "bytes smem");
        }
        line = *end ? end + 1 : end;
    }
    return FSA_STATUS_OK;
out_of_memory:
    fsa_resource_usage_free(out);
    return fsa_error_set(FSA_STATUS_OUT_OF_MEMORY, "resources", "out of host memory");
}

void fsa_resource_usage_free(fsa_resource_usage *u)
{
    if (u == NULL) return;
    for (size_t i = 0; i < u->count; i++) free(u->functions[i].name);
    free(u->functions);
    memset(u, 0, sizeof *u);
}

void fsa_resource_usage_format(fsa_strbuf *out, const fsa_resource_usage *u)
{
    fsa_strbuf_appendf(out, "%-32s %9s %12s %11s %11s %12s\n", "function", "registers", "spill_stores",
                       "spill_loads", "stack_bytes", "shared_bytes");
    for (size_t i = 0; i < u->count; i++) {
        const fsa_function_usage *f = &u->functions[i];
        fsa_strbuf_appendf(out, "%-32s %9d %12d %11d %11d %12d%s\n", f->name, f->registers, f->spill_store_bytes,
                           f->spill_load_bytes, f->stack_bytes, f->shared_bytes, f->entry ? "" : "  (device function)");
    }
}
