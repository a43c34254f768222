/* NVRTC, loaded at run time. Only this file and cuda_driver.c call dlopen. */
#ifndef FSA_NVRTC_LOADER_H
#define FSA_NVRTC_LOADER_H

#include "fsa.h"

#include <nvrtc.h>

typedef struct fsa_nvrtc_api {
    int major, minor;
    char version[16]; /* "13.0" */
    char path[512];   /* the file that was loaded */
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
} fsa_nvrtc_api;

/* Loads NVRTC once per process: $FSA_NVRTC_PATH if set (and nothing else),
 * else libnvrtc.so.13, .so.12, .so, then the toolkit directory found at build
 * time. FSA_STATUS_NO_NVRTC when none loads. */
fsa_status fsa_nvrtc_load(const fsa_nvrtc_api **out);

#endif
