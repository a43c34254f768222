/* A stand-in for libnvrtc for the fault matrix (tests/fault): "compiles"
 * in no time into the deterministic payload of fake_cubin.h, so that
 * hundreds of cache trials run in seconds on any machine. Version 12.8
 * ($FSA_FAKE_NVRTC_MAJOR sets the major version).
 * $FSA_FAKE_NVRTC_BYTES sets the payload size (default 65536);
 * $FSA_FAKE_NVRTC_DELAY_MS makes each compile sleep that long (to widen
 * race windows). */
#define _POSIX_C_SOURCE 200809L
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fake_cubin.h"

#include <nvrtc.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct fake_program {
    char *source;
    uint8_t *cubin;
    size_t size;
} fake_program;

static size_t env_size(const char *name, size_t fallback)
{
    const char *v = getenv(name);
    return v && *v ? (size_t)strtoull(v, NULL, 10) : fallback;
}

EXPORT const char *nvrtcGetErrorString(nvrtcResult r) { return r == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : "fake error"; }

EXPORT nvrtcResult nvrtcVersion(int *major, int *minor)
{
    *major = (int)env_size("FSA_FAKE_NVRTC_MAJOR", 12);
    *minor = 8;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int n_headers,
                                      const char *const *headers, const char *const *include_names)
{
    (void)name;
    (void)n_headers;
    (void)headers;
    (void)include_names;
    fake_program *p = calloc(1, sizeof *p);
    if (p == NULL || (p->source = strdup(src)) == NULL) {
        free(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    *prog = (nvrtcProgram)p;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    fake_program *p = (fake_program *)*prog;
    if (p) {
        free(p->source);
        free(p->cubin);
        free(p);
    }
    *prog = NULL;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n, const char *const *opts)
{
    fake_program *p = (fake_program *)prog;
    size_t delay = env_size("FSA_FAKE_NVRTC_DELAY_MS", 0);
    if (delay) {
        struct timespec t = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0) {
        }
    }
    size_t size = fake_cubin_size();
    free(p->cubin);
    p->cubin = malloc(size);
    if (p->cubin == NULL || fake_cubin_fill(p->cubin, size, p->source, opts, n) != 0) return NVRTC_ERROR_OUT_OF_MEMORY;
    p->size = size;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size)
{
    (void)prog;
    *size = 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    (void)prog;
    log[0] = '\0';
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size)
{
    *size = ((fake_program *)prog)->size;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *out)
{
    fake_program *p = (fake_program *)prog;
    memcpy(out, p->cubin, p->size);
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size)
{
    (void)prog;
    *size = 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *out)
{
    (void)prog;
    out[0] = '\0';
    return NVRTC_SUCCESS;
}
