#include "nvrtc_loader.h"

#include "base/status_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FSA_DEFAULT_NVRTC_DIR
#define FSA_DEFAULT_NVRTC_DIR ""
#endif

static struct {
    pthread_once_t once;
    fsa_status status;
    char message[768];
    fsa_nvrtc_api api;
} g_nvrtc = {PTHREAD_ONCE_INIT, FSA_STATUS_OK, "", {0}};

static void *try_open(const char *path, fsa_nvrtc_api *api)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) {
        size_t n = strlen(path);
        if (n >= sizeof api->path) n = sizeof api->path - 1;
        memcpy(api->path, path, n);
        api->path[n] = '\0';
    }
    return lib;
}

static void nvrtc_load_once(void)
{
    fsa_nvrtc_api *api = &g_nvrtc.api;
    void *lib = NULL;
    const char *override = getenv("FSA_NVRTC_PATH");
    if (override && *override) {
        lib = try_open(override, api);
        if (lib == NULL) {
            g_nvrtc.status = FSA_STATUS_NO_NVRTC;
            snprintf(g_nvrtc.message, sizeof g_nvrtc.message, "FSA_NVRTC_PATH=%s: %s", override,
                     dlerror());
            return;
        }
    } else {
        static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        for (size_t i = 0; lib == NULL && i < sizeof names / sizeof names[0]; i++)
            lib = try_open(names[i], api);
        const char *dirs[] = {FSA_DEFAULT_NVRTC_DIR, "/usr/local/cuda/lib64", "/usr/local/cuda/lib"};
        for (size_t d = 0; lib == NULL && d < sizeof dirs / sizeof dirs[0]; d++) {
            if (dirs[d][0] == '\0') continue;
            for (size_t i = 0; lib == NULL && i < sizeof names / sizeof names[0]; i++) {
                char path[600];
                snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
                lib = try_open(path, api);
            }
        }
        if (lib == NULL) {
            g_nvrtc.status = FSA_STATUS_NO_NVRTC;
            snprintf(g_nvrtc.message, sizeof g_nvrtc.message,
                     "libnvrtc.so.13/.12 not found on the library path or in the CUDA toolkit; "
                     "set FSA_NVRTC_PATH");
            return;
        }
    }
#define FSA_NVRTC_RESOLVE_(field, name)                                                     \
    do {                                                                                    \
        *(void **)&api->field = dlsym(lib, name);                                           \
        if (api->field == NULL) {                                                           \
            g_nvrtc.status = FSA_STATUS_NO_NVRTC;                                           \
            snprintf(g_nvrtc.message, sizeof g_nvrtc.message, "%s has no %s", api->path, name); \
            return;                                                                         \
        }                                                                                   \
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
    if (api->Version(&api->major, &api->minor) != NVRTC_SUCCESS) {
        g_nvrtc.status = FSA_STATUS_NO_NVRTC;
        snprintf(g_nvrtc.message, sizeof g_nvrtc.message, "nvrtcVersion failed (%s)", api->path);
        return;
    }
    if (api->major < 12) {
        g_nvrtc.status = FSA_STATUS_NO_NVRTC;
        snprintf(g_nvrtc.message, sizeof g_nvrtc.message,
                 "%s is NVRTC %d.%d; version 12 or newer is required", api->path, api->major,
                 api->minor);
        return;
    }
    snprintf(api->version, sizeof api->version, "%d.%d", api->major, api->minor);
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
