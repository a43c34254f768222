/* Lookup of embedded templates and their combined digest. */
#include "templates.h"

#include "base/util.h"

#include <pthread.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

const fsa_template *fsa_template_find(const char *name)
{
    for (size_t i = 0; i < fsa_template_count; i++)
        if (strcmp(fsa_templates[i].name, name) == 0) return &fsa_templates[i];
    return NULL;
}

static char g_templates_digest[33];
static pthread_once_t g_templates_digest_once = PTHREAD_ONCE_INIT;

static void templates_digest_once(void)
{
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    for (size_t i = 0; i < fsa_template_count; i++) {
        const fsa_template *t = &fsa_templates[i];
        XXH3_128bits_update(&state, t->name, strlen(t->name) + 1);
        XXH3_128bits_update(&state, t->text, t->length);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&state));
    fsa_hex(g_templates_digest, c.digest, sizeof c.digest);
}

const char *fsa_templates_digest(void)
{
    (void)pthread_once(&g_templates_digest_once, templates_digest_once);
    return g_templates_digest;
}
