#include "nvrtc_loader.h"

#include "base/status_internal.h"
#include "base/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FSA_DEFAULT_NVRTC_DIR
#define FSA_DEFAULT_NVRTC_DIR ""
#endif

/* Newest first: a toolkit directory may hold a compatibility copy of an
 * older major beside the current one. */
static const char *const k_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
#define N_NAMES (sizeof k_names / sizeof k_names[0])

/* ------------------------------------------------------------ search list */

typedef struct search_list {
    fsa_nvrtc_candidate *out;
    size_t cap, n;
} search_list;

static void add_path(search_list *l, const char *path, const char *source)
{
    if (l->n >= l->cap) return;
    for (size_t i = 0; i < l->n; i++) /* the same file through two rules: first rule wins */
        if (strcmp(l->out[i].path, path) == 0) return;
    int len = snprintf(l->out[l->n].path, sizeof l->out[l->n].path, "%s", path);
    if (len < 0 || (size_t)len >= sizeof l->out[l->n].path) return; /* too long to be real */
    l->out[l->n].source = source;
    l->n++;
}

/* Every NVRTC file name that exists in dir/sub. */
static void add_dir(search_list *l, const char *dir, size_t dir_len, const char *sub, const char *source)
{
    if (dir_len == 0) return;
    for (size_t i = 0; i < N_NAMES; i++) {
        char path[600];
        int len = snprintf(path, sizeof path, "%.*s/%s%s", (int)dir_len, dir, sub, k_names[i]);
        if (len > 0 && (size_t)len < sizeof path && access(path, F_OK) == 0) add_path(l, path, source);
    }
}

static void add_toolkit(search_list *l, const char *root, const char *source)
{
    if (root == NULL) return;
    add_dir(l, root, strlen(root), "lib64/", source);
    add_dir(l, root, strlen(root), "lib/", source);
}

/* The wheels' layouts: CUDA 13 puts every library in nvidia/cu13/lib, CUDA
 * 12 gives each its own package (nvidia/cuda_nvrtc/lib). */
static void add_site_dirs(search_list *l, const char *dirs)
{
    if (dirs == NULL) return;
    for (const char *p = dirs; *p;) {
        size_t len = strcspn(p, ":");
        add_dir(l, p, len, "nvidia/cu13/lib/", "Python package");
        add_dir(l, p, len, "nvidia/cuda_nvrtc/lib/", "Python package");
        p += len;
        if (*p == ':') p++;
    }
}

size_t fsa_nvrtc_search_list(fsa_nvrtc_candidate *out, size_t cap, const char *(*get_env)(const char *),
                             const char *build_dir)
{
    search_list l = {out, cap, 0};
    const char *explicit_path = get_env("FSA_NVRTC_PATH");
    if (explicit_path && *explicit_path) {
        add_path(&l, explicit_path, "FSA_NVRTC_PATH");
        return l.n;
    }
    add_site_dirs(&l, get_env("FSA_PYTHON_SITE_DIRS"));
    add_toolkit(&l, get_env("CUDA_HOME"), "CUDA_HOME");
    add_toolkit(&l, get_env("CUDA_PATH"), "CUDA_PATH");
    if (build_dir) add_dir(&l, build_dir, strlen(build_dir), "", "toolkit found at build time");
    for (size_t i = 0; i < N_NAMES; i++) add_path(&l, k_names[i], "dynamic loader path");
    add_toolkit(&l, "/usr/local/cuda", "/usr/local/cuda");
    return l.n;
}

/* ------------------------------------------------------------------ load */

static struct {
    pthread_once_t once;
    fsa_status status;
    char message[1024];
    fsa_nvrtc_api api;
} g_nvrtc = {PTHREAD_ONCE_INIT, FSA_STATUS_OK, "", {0}};

/* Resolves every entry point and checks the version; NULL when all is well,
 * else why this file cannot be used. */
static const char *bind_api(void *lib, fsa_nvrtc_api *api, char *why, size_t cap)
{
#define FSA_NVRTC_RESOLVE_(field, name)                    \
    do {                                                   \
        *(void **)&api->field = dlsym(lib, name);          \
        if (api->field == NULL) {                          \
            snprintf(why, cap, "has no %s", name);         \
            return why;                                    \
        }                                                  \
    } while (0)
    FSA_NVRTC_RESOLVE_(GetErrorString, "nvrtcGetErrorString");
    FSA_NVRTC_RESOLVE_(Version, "nvrtcVersion");
    FSA_NVRTC_RESOLVE_(CreateProgram, "nvrtcCreateProgram");
    FSA_NVRTC_RESOLVE_(DestroyProgram, "nvrtcDestroyProgram");
    FSA_NVRTC_RESOLVE_(CompileProgram, "nvrtcCompileProgram");
    FSA_NVRTC_RESOLVE_(GetProgramLogSize, "nvrtcGetProgramLogSize");
    FSA_NVRTC_RESOLVE_(GetProgramLog, "nvrtcGetProgramLog");
    FSA_NVRTC_RESOLVE_(GetCUBINSize, "nvrtcGetCUBINSize");
    FSA_NVRTC_RESOLVE_(GetCUBIN, "nvrtcGetCUBIN");
    FSA_NVRTC_RESOLVE_(GetPTXSize, "nvrtcGetPTXSize");
    FSA_NVRTC_RESOLVE_(GetPTX, "nvrtcGetPTX");
#undef FSA_NVRTC_RESOLVE_
    if (api->Version(&api->major, &api->minor) != NVRTC_SUCCESS) return "nvrtcVersion failed";
    if (api->major < 12) {
        snprintf(why, cap, "is NVRTC %d.%d; version 12 or newer is required", api->major, api->minor);
        return why;
    }
    return NULL;
}

/* Appends to the failure message; what does not fit is cut. */
static void message_append(const char *text)
{
    size_t used = strlen(g_nvrtc.message), n = strlen(text);
    if (n > sizeof g_nvrtc.message - 1 - used) n = sizeof g_nvrtc.message - 1 - used;
    memcpy(g_nvrtc.message + used, text, n);
    g_nvrtc.message[used + n] = '\0';
}

static void note_failure(const fsa_nvrtc_candidate *c, const char *why)
{
    if (g_nvrtc.message[0]) message_append("; ");
    message_append(c->path);
    message_append(" (");
    message_append(c->source);
    message_append("): ");
    message_append(why);
}

static const char *env_get(const char *name) { return getenv(name); }

/* key_version: the version and the build ID of the file that holds `symbol`. */
static void name_the_build(fsa_nvrtc_api *api, const void *symbol)
{
    uint8_t id[FSA_BUILD_ID_MAX];
    size_t n = fsa_elf_build_id_of_loaded(id, sizeof id, symbol);
    char hex[2 * FSA_BUILD_ID_MAX + 1];
    fsa_hex(hex, id, n);
    snprintf(api->key_version, sizeof api->key_version, "%s%s%s", api->version, n ? " " : "", hex);
}

static void nvrtc_load_once(void)
{
    static fsa_nvrtc_candidate candidates[FSA_NVRTC_MAX_CANDIDATES];
    size_t n = fsa_nvrtc_search_list(candidates, FSA_NVRTC_MAX_CANDIDATES, env_get, FSA_DEFAULT_NVRTC_DIR);
    fsa_nvrtc_api *api = &g_nvrtc.api;
    const char *explicit_path = getenv("FSA_NVRTC_PATH");
    if (n == 0 && explicit_path && *explicit_path) { /* the list leaves out what it cannot hold */
        char why[160];
        snprintf(why, sizeof why, "FSA_NVRTC_PATH is %zu bytes long; a path of at most %zu bytes is supported",
                 strlen(explicit_path), sizeof candidates[0].path - 1);
        message_append(why);
        g_nvrtc.status = FSA_STATUS_NO_NVRTC;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const fsa_nvrtc_candidate *c = &candidates[i];
        void *lib = dlopen(c->path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            /* A bare name the loader does not know is the normal case, not news, unless the user named it. */
            if (strchr(c->path, '/') != NULL || strcmp(c->source, "FSA_NVRTC_PATH") == 0) note_failure(c, dlerror());
            continue;
        }
        char why_buf[160];
        const char *why = bind_api(lib, api, why_buf, sizeof why_buf);
        if (why != NULL) {
            note_failure(c, why);
            dlclose(lib);
            memset(api, 0, sizeof *api);
            continue;
        }
        memcpy(api->path, c->path, sizeof api->path); /* same size, NUL-terminated */
        snprintf(api->version, sizeof api->version, "%d.%d", api->major, api->minor);
        name_the_build(api, dlsym(lib, "nvrtcVersion"));
        g_nvrtc.status = FSA_STATUS_OK;
        return;
    }
    char tried[sizeof g_nvrtc.message];
    memcpy(tried, g_nvrtc.message, sizeof tried);
    g_nvrtc.message[0] = '\0';
    if (explicit_path && *explicit_path) /* then the search list holds that file alone */
        message_append("no usable NVRTC 12 or newer at FSA_NVRTC_PATH (while it is set, no other location is "
                       "searched)");
    else
        message_append("no usable NVRTC 12 or newer (searched Python packages, CUDA_HOME, CUDA_PATH, the "
                       "build-time toolkit, the loader path, /usr/local/cuda)");
    if (tried[0]) {
        message_append("; tried ");
        message_append(tried);
    }
    g_nvrtc.status = FSA_STATUS_NO_NVRTC;
}

const char *fsa_nvrtc_load_failure(void)
{
    (void)pthread_once(&g_nvrtc.once, nvrtc_load_once); /* (the record is final after it) */
    return g_nvrtc.status != FSA_STATUS_OK ? g_nvrtc.message : "";
}

fsa_status fsa_nvrtc_load(const fsa_nvrtc_api **out)
{
    (void)pthread_once(&g_nvrtc.once, nvrtc_load_once);
    if (g_nvrtc.status != FSA_STATUS_OK) {
        *out = NULL;
        return fsa_error_set(g_nvrtc.status, "nvrtc", "%s", g_nvrtc.message);
    }
    *out = &g_nvrtc.api;
    return FSA_STATUS_OK;
}
