#include "render.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>


static int is_name_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

fsa_status fsa_render(char **out, const char *what, const char *text, const fsa_param *params,
                      size_t n_params)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_strbuf b = {0};
    unsigned char *used = NULL;
    *out = NULL;
    if (text == NULL || (params == NULL && n_params > 0))
        FSA_FAIL(FSA_STATUS_NULL_POINTER, "render", "%s: NULL template or parameter list", what);
    used = calloc(n_params ? n_params : 1, 1);
    FSA_CHECK_ALLOC(used, "render");
    for (size_t i = 0; i < n_params; i++) {
        const char *nm = params[i].name;
        if (nm == NULL || *nm == '\0' || params[i].value == NULL)
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "render", "%s: parameter %zu has no name or value",
                     what, i);
        for (const char *c = nm; *c; c++)
            if (!is_name_char(*c))
                FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "render",
                         "%s: parameter name '%s' is not [A-Z0-9_]+", what, nm);
    }
    const char *p = text;
    for (;;) {
        const char *open = strstr(p, "{{");
        if (open == NULL) {
            fsa_strbuf_append(&b, p);
            break;
        }
        fsa_strbuf_append_n(&b, p, (size_t)(open - p));
        const char *name = open + 2;
        const char *end = name;
        while (is_name_char(*end)) end++;
        /* {{NAME=DEFAULT}}: DEFAULT where no parameter names it (a layout
         * parameter that keys only the kernels that leave its default). */
        const char *dflt = NULL, *dflt_end = end;
        if (end != name && end[0] == '=') {
            dflt = dflt_end = end + 1;
            while (is_name_char(*dflt_end)) dflt_end++;
        }
        if (end == name || (dflt != NULL && dflt_end == dflt) || dflt_end[0] != '}' || dflt_end[1] != '}') {
            size_t line = 1;
            for (const char *c = text; c < open; c++) line += *c == '\n';
            FSA_FAIL(FSA_STATUS_RENDER_FAILED, "render", "%s:%zu: malformed placeholder", what, line);
        }
        size_t len = (size_t)(end - name);
        size_t k = 0;
        while (k < n_params && !(strlen(params[k].name) == len && memcmp(params[k].name, name, len) == 0))
            k++;
        if (k == n_params && dflt != NULL) {
            fsa_strbuf_append_n(&b, dflt, (size_t)(dflt_end - dflt));
            p = dflt_end + 2;
            continue;
        }
        if (k == n_params) {
            size_t line = 1;
            for (const char *c = text; c < open; c++) line += *c == '\n';
            FSA_FAIL(FSA_STATUS_RENDER_FAILED, "render", "%s:%zu: no value for placeholder {{%.*s}}",
                     what, line, (int)len, name);
        }
        used[k] = 1;
        fsa_strbuf_append(&b, params[k].value);
        p = dflt_end + 2;
    }
    for (size_t i = 0; i < n_params; i++)
        if (!used[i])
            FSA_FAIL(FSA_STATUS_RENDER_FAILED, "render", "%s: parameter %s is not used by the template",
                     what, params[i].name);
    *out = fsa_strbuf_take(&b);
    FSA_CHECK_ALLOC(*out, "render");
cleanup:
    fsa_strbuf_free(&b);
    free(used);
    return st;
}
