/* The CUDA driver API for fsa-bench, loaded with dlopen only when a
 * benchmark runs, so that --help, --version and usage errors work on a
 * machine without a driver. Call sites read cu.MemAlloc(...) for
 * cuMemAlloc(...); the types come from cuda.h. */
#ifndef FSA_BENCH_CUDA_H
#define FSA_BENCH_CUDA_H

#include <cuda.h>

#include <stddef.h>

/* X(field, function): function as cuda.h names it (macros such as
 * cuMemAlloc -> cuMemAlloc_v2 give the versioned symbol). */
#define BENCH_CUDA_FUNCTIONS(X)                                                                     \
    X(Init, cuInit)                                                                                 \
    X(GetErrorName, cuGetErrorName)                                                                 \
    X(DeviceGet, cuDeviceGet)                                                                       \
    X(DeviceGetName, cuDeviceGetName)                                                               \
    X(DeviceGetAttribute, cuDeviceGetAttribute)                                                     \
    X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                                             \
    X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease)                                           \
    X(CtxSetCurrent, cuCtxSetCurrent)                                                               \
    X(StreamSynchronize, cuStreamSynchronize)                                                       \
    X(EventCreate, cuEventCreate)                                                                   \
    X(EventDestroy, cuEventDestroy)                                                                 \
    X(EventRecord, cuEventRecord)                                                                   \
    X(EventSynchronize, cuEventSynchronize)                                                         \
    X(EventElapsedTime, cuEventElapsedTime)                                                         \
    X(MemAlloc, cuMemAlloc)                                                                         \
    X(MemFree, cuMemFree)                                                                           \
    X(MemcpyHtoD, cuMemcpyHtoD)                                                                     \
    X(MemcpyDtoH, cuMemcpyDtoH)                                                                     \
    X(MemcpyDtoD, cuMemcpyDtoD)                                                                     \
    X(MemsetD8, cuMemsetD8)                                                                         \
    X(ModuleLoadData, cuModuleLoadData)                                                             \
    X(ModuleGetFunction, cuModuleGetFunction)                                                       \
    X(ModuleUnload, cuModuleUnload)                                                                 \
    X(LaunchKernel, cuLaunchKernel)                                                                 \
    X(MemsetD16, cuMemsetD16)                                                                       \
    X(MemsetD8Async, cuMemsetD8Async)                                                               \
    X(StreamCreate, cuStreamCreate)                                                                 \
    X(StreamDestroy, cuStreamDestroy)                                                               \
    X(StreamBeginCapture, cuStreamBeginCapture)                                                     \
    X(StreamEndCapture, cuStreamEndCapture)                                                         \
    X(GraphInstantiate, cuGraphInstantiate)                                                         \
    X(GraphLaunch, cuGraphLaunch)                                                                   \
    X(GraphDestroy, cuGraphDestroy)                                                                 \
    X(GraphExecDestroy, cuGraphExecDestroy)

typedef struct bench_cuda_api {
#define BENCH_CUDA_FIELD_(field, fn) __typeof__(fn) *field;
    BENCH_CUDA_FUNCTIONS(BENCH_CUDA_FIELD_)
#undef BENCH_CUDA_FIELD_
} bench_cuda_api;

extern bench_cuda_api cu;

/* Loads libcuda.so.1 and every function above; 0 on success, else -1 with
 * the reason in `why`. */
int bench_cuda_load(char *why, size_t cap);

/* Ends fsa-bench (exit status 1) after a failed call, naming the mode
 * ("" or e.g. "--decode"), the call, the reason and the source file and line. */
_Noreturn void bench_fail(const char *mode, const char *call, const char *why, const char *file, int line);

/* Device 0, its primary context made current (the one the library's context
 * runs on) and its name written to name[cap]; every mode opens it this way. A
 * failed call ends fsa-bench as BENCH_CU does, naming mode. */
CUdevice bench_cuda_open_device(const char *mode, char *name, size_t cap);

/* A driver call that must succeed. */
#define BENCH_CU(mode, call)                                                                        \
    do {                                                                                            \
        CUresult r_ = (call);                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                   \
            const char *n_ = "?";                                                                   \
            cu.GetErrorName(r_, &n_);                                                               \
            bench_fail((mode), #call, n_, __FILE__, __LINE__);                                      \
        }                                                                                           \
    } while (0)

/* An fsa.h call that must return FSA_STATUS_OK (the reason: fsa_last_error). */
#define BENCH_FSA(mode, call)                                                                       \
    do {                                                                                            \
        if ((call) != FSA_STATUS_OK) bench_fail((mode), #call, fsa_last_error(), __FILE__, __LINE__);\
    } while (0)

#endif
