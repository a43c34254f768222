#define _GNU_SOURCE
#include "bench_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

bench_cuda_api cu;

#define BENCH_STR_(x) #x
#define BENCH_STR(x) BENCH_STR_(x) /* expands cuda.h's macro first: "cuMemAlloc_v2" */

int bench_cuda_load(char *why, size_t cap)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(why, cap, "the CUDA driver (libcuda.so.1) could not be loaded: %s", dlerror());
        return -1;
    }
#define BENCH_CUDA_RESOLVE_(field, fn)                                           \
    *(void **)&cu.field = dlsym(lib, BENCH_STR(fn));                             \
    if (cu.field == NULL) {                                                      \
        snprintf(why, cap, "libcuda.so.1 has no %s", BENCH_STR(fn));             \
        return -1;                                                               \
    }
    BENCH_CUDA_FUNCTIONS(BENCH_CUDA_RESOLVE_)
#undef BENCH_CUDA_RESOLVE_
    return 0;
}

void bench_fail(const char *mode, const char *call, const char *why, const char *file, int line)
{
    fprintf(stderr, "fsa-bench%s%s: %s failed: %s (%s:%d)\n", *mode ? " " : "", mode, call, why, file, line);
    exit(1);
}

CUdevice bench_cuda_open_device(const char *mode, char *name, size_t cap)
{
    CUdevice dev;
    CUcontext pctx;
    BENCH_CU(mode, cu.Init(0));
    BENCH_CU(mode, cu.DeviceGet(&dev, 0));
    BENCH_CU(mode, cu.DevicePrimaryCtxRetain(&pctx, dev));
    BENCH_CU(mode, cu.CtxSetCurrent(pctx));
    BENCH_CU(mode, cu.DeviceGetName(name, cap, dev));
    return dev;
}
