/* The CUDA templates of templates/, embedded at build time. */
#ifndef FSA_TEMPLATES_H
#define FSA_TEMPLATES_H

#include <stddef.h>

typedef struct fsa_template {
    const char *name; /* file name, e.g. "sel_fwd_main.cu" */
    const char *text; /* NUL-terminated */
    size_t length;
} fsa_template;

/* Generated: every file of templates/, sorted by name. */
extern const fsa_template fsa_templates[];
extern const size_t fsa_template_count;

/* NULL when no template has that file name. */
const fsa_template *fsa_template_find(const char *name);

/* XXH3-128 of every template's name and text, as 32 hex digits. Part of
 * every kernel key: editing any template invalidates every cached kernel. */
const char *fsa_templates_digest(void);

#endif
