/* NVRTC, loaded at run time. Only this file and cuda_driver.c call dlopen. */
#ifndef FSA_NVRTC_LOADER_H
#define FSA_NVRTC_LOADER_H

#include "elf_build_id.h"
#include "fsa.h"

#include <nvrtc.h>

typedef struct fsa_nvrtc_api {
    int major, minor;
    char version[16]; /* "13.0" */
    /* What kernel keys name: the version, then the file's build ID in hex
     * when it has one ("13.0 65be0d..."): patch releases share a version. */
    char key_version[16 + 1 + 2 * FSA_BUILD_ID_MAX + 1];
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

/* Loads NVRTC once per process, from the first candidate of
 * fsa_nvrtc_search_list that loads and is version 12 or newer.
 * FSA_STATUS_NO_NVRTC when none does; the message lists what was tried. */
fsa_status fsa_nvrtc_load(const fsa_nvrtc_api **out);
/* The loader's whole record of what it tried and why each failed, when
 * fsa_nvrtc_load fails (the error record's message holds only its start);
 * "" when NVRTC loads. Loads it first if nothing has yet. */
const char *fsa_nvrtc_load_failure(void);

/* One place to look for NVRTC: a file path, or a bare name for the dynamic
 * loader's own search. `source` says which rule produced it. */
typedef struct fsa_nvrtc_candidate {
    char path[512];
    const char *source; /* "FSA_NVRTC_PATH", "Python package", "CUDA_HOME", ... */
} fsa_nvrtc_candidate;

#define FSA_NVRTC_MAX_CANDIDATES 64

/* The search order, documented in README.md:
 *   1. $FSA_NVRTC_PATH: that file and nothing else (no candidate at all when
 *      the path does not fit `path`: a shortened one could name another file).
 *   2. The NVRTC of a pip package (nvidia-cuda-nvrtc, which PyTorch brings):
 *      nvidia/cu13/lib and nvidia/cuda_nvrtc/lib under each directory of
 *      $FSA_PYTHON_SITE_DIRS (colon-separated; the Python binding sets it
 *      to its site-packages).
 *   3. $CUDA_HOME/lib64, $CUDA_HOME/lib.
 *   4. $CUDA_PATH/lib64, $CUDA_PATH/lib.
 *   5. The toolkit's library directory found at build time (build_dir).
 *   6. The dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache).
 *   7. /usr/local/cuda/lib64, /usr/local/cuda/lib.
 * In each directory libnvrtc.so.13, .so.12, then .so; only files that exist
 * are listed (rule 6 lists bare names). `get_env` reads the environment
 * (getenv, or a fake in tests). Returns the number of candidates. */
size_t fsa_nvrtc_search_list(fsa_nvrtc_candidate *out, size_t cap, const char *(*get_env)(const char *),
                             const char *build_dir);

#endif
