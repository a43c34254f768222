#include "target.h"

#include "base/status_internal.h"

#include <stdio.h>
#include <string.h>

#define STAGE "target"

/* One compute capability: the suffixes NVRTC accepts for it and the shared
 * memory a block may opt into (per-SM shared memory less the 1 KB the
 * driver reserves per block). */
typedef struct known_arch {
    int major, minor;
    const char *suffixes;
    int smem_per_block;
} known_arch;

static const known_arch k_known[] = {
    {8, 0, "", 166912},    /* A100: 164 KB per SM */
    {8, 6, "", 101376},    /* GA10x: 100 KB per SM */
    {8, 7, "", 166912},    /* Orin: 164 KB per SM */
    {8, 9, "", 101376},    /* Ada: 100 KB per SM */
    {9, 0, "a", 232448},   /* Hopper: 228 KB per SM */
    {10, 0, "af", 232448}, /* B200 */
    {10, 1, "af", 232448}, /* Thor, as NVRTC 12.8 and 12.9 name it */
    {10, 3, "af", 232448}, /* B300 */
    {11, 0, "af", 232448}, /* Thor */
    {12, 0, "af", 101376}, /* RTX 50 series, RTX PRO: 100 KB per SM */
    {12, 1, "af", 101376}, /* GB10 */
};
#define N_KNOWN (sizeof k_known / sizeof k_known[0])

static const known_arch *find_arch(int major, int minor)
{
    for (size_t i = 0; i < N_KNOWN; i++)
        if (k_known[i].major == major && k_known[i].minor == minor) return &k_known[i];
    return NULL;
}

static void fill(fsa_target *out, const known_arch *a, char suffix)
{
    memset(out, 0, sizeof *out);
    out->major = a->major;
    out->minor = a->minor;
    out->suffix = suffix;
    out->smem_per_block = a->smem_per_block;
    const char tail[2] = {suffix, '\0'};
    snprintf(out->name, sizeof out->name, "sm_%d%d%s", a->major, a->minor, tail);
}

/* "sm_80, sm_86, ..., sm_121f" for error messages. */
static void known_names(char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < fsa_target_known_count() && len < cap; i++) {
        fsa_target t;
        fsa_target_known(&t, i);
        int n = snprintf(out + len, cap - len, "%s%s", i ? ", " : "", t.name);
        if (n < 0) break;
        len += (size_t)n;
    }
}

static fsa_status unsupported(const char *what)
{
    char names[320];
    known_names(names, sizeof names);
    return fsa_error_set(FSA_STATUS_UNSUPPORTED_DEVICE, STAGE, "%s is not a supported target (known: %s)", what,
                         names);
}

fsa_status fsa_target_parse(fsa_target *out, const char *name)
{
    memset(out, 0, sizeof *out);
    if (name == NULL) return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE, "no target name");
    /* sm_, then the capability as 2 or 3 digits without a leading zero (the
     * last one is the minor version), then at most one suffix letter. */
    const int prefixed = strncmp(name, "sm_", 3) == 0;
    const char *p = prefixed ? name + 3 : name;
    int value = 0, digits = 0;
    if (prefixed && *p != '0')
        for (; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 4) value = value * 10 + (*p - '0'); /* past 3 digits refused below: no overflow */
    char suffix = (*p == 'a' || *p == 'f') ? *p++ : '\0';
    if (digits < 2 || digits > 3 || *p != '\0')
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, STAGE,
                             "'%s' is not a target name: expected sm_<major><minor>[a|f], e.g. sm_80 or sm_90a", name);
    const known_arch *a = find_arch(value / 10, value % 10);
    if (a == NULL || (suffix && strchr(a->suffixes, suffix) == NULL)) return unsupported(name);
    fill(out, a, suffix);
    return FSA_STATUS_OK;
}

fsa_status fsa_target_for_capability(fsa_target *out, int major, int minor)
{
    memset(out, 0, sizeof *out);
    const known_arch *a = find_arch(major, minor);
    if (a != NULL) {
        fill(out, a, major == 9 && minor == 0 ? 'a' : '\0');
        return FSA_STATUS_OK;
    }
    /* A minor revision the table does not list yet runs the cubins of the
     * newest earlier one of its major version. */
    for (size_t i = 0; i < N_KNOWN; i++)
        if (k_known[i].major == major && k_known[i].minor < minor && (a == NULL || k_known[i].minor > a->minor))
            a = &k_known[i];
    if (a != NULL) {
        fill(out, a, '\0');
        return FSA_STATUS_OK;
    }
    char what[48];
    snprintf(what, sizeof what, "compute capability %d.%d", major, minor);
    return unsupported(what);
}

int fsa_target_runs_on(const fsa_target *t, int major, int minor)
{
    if (t == NULL || t->major != major) return 0;
    return t->suffix == 'a' ? t->minor == minor : t->minor <= minor;
}

size_t fsa_target_known_count(void)
{
    size_t n = 0;
    for (size_t i = 0; i < N_KNOWN; i++) n += 1 + strlen(k_known[i].suffixes);
    return n;
}

void fsa_target_known(fsa_target *out, size_t i)
{
    memset(out, 0, sizeof *out);
    for (size_t r = 0; r < N_KNOWN; r++) {
        size_t variants = 1 + strlen(k_known[r].suffixes);
        if (i < variants) {
            fill(out, &k_known[r], i == 0 ? '\0' : k_known[r].suffixes[i - 1]);
            return;
        }
        i -= variants;
    }
}
