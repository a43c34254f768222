/* Strict template rendering: {{NAME}} placeholders filled from a parameter
 * list. An unknown placeholder, an unused parameter or an unterminated
 * placeholder is an error, so a template and its caller cannot drift apart.
 * {{NAME=DEFAULT}} ([A-Z0-9_]+ both) takes DEFAULT where no parameter is
 * named NAME: a parameter whose default leaves the kernel's key and name as
 * they were before it existed. */
#ifndef FSA_RENDER_H
#define FSA_RENDER_H

#include "fsa.h"

#include <stddef.h>

typedef struct fsa_param {
    const char *name;  /* placeholder name: [A-Z0-9_]+ */
    const char *value; /* text put in its place */
    const char *tag;   /* prefix in the readable kernel name ("d" -> d128), "" = value alone */
} fsa_param;

/* *out: the rendered text, owned by the caller (free). `what` names the
 * template in error messages. */
fsa_status fsa_render(char **out, const char *what, const char *text, const fsa_param *params,
                      size_t n_params);

#endif
