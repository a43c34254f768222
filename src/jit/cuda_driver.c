#include "cuda_driver.h"

#include "base/status_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

/* cuGetProcAddress as of CUDA 12.5 (with the query result) and before. */
typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);

static struct {
    pthread_once_t once;
    fsa_status status;
    char message[256];
    fsa_cu_api api;
} g_cu = {PTHREAD_ONCE_INIT, FSA_STATUS_OK, "", {0}};

/* Entry points by base name with the CUDA version whose ABI the matching
 * field's typedef describes: those the library calls, then the optional ones. */
#define FSA_CU_REQUIRED(X)                                                   \
    X(DriverGetVersion, "cuDriverGetVersion", 2020)                          \
    X(GetErrorName, "cuGetErrorName", 6000)                                  \
    X(GetErrorString, "cuGetErrorString", 6000)                              \
    X(DeviceGet, "cuDeviceGet", 2000)                                        \
    X(DeviceGetCount, "cuDeviceGetCount", 2000)                              \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", 2000)                      \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000)              \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000)          \
    X(CtxPushCurrent, "cuCtxPushCurrent", 4000)                              \
    X(CtxPopCurrent, "cuCtxPopCurrent", 4000)                                \
    X(LibraryLoadData, "cuLibraryLoadData", 12000)                           \
    X(LibraryUnload, "cuLibraryUnload", 12000)                               \
    X(LibraryGetKernel, "cuLibraryGetKernel", 12000)                         \
    X(KernelGetFunction, "cuKernelGetFunction", 12000)                       \
    X(FuncSetAttribute, "cuFuncSetAttribute", 9000)                          \
    X(FuncGetAttribute, "cuFuncGetAttribute", 2020)                          \
    X(LaunchKernel, "cuLaunchKernel", 4000)                                  \
    X(MemsetD32Async, "cuMemsetD32Async", 3020)                              \
    X(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050)

#define FSA_CU_OPTIONAL(X)                                                   \
    X(MemAlloc, "cuMemAlloc", 3020)                                          \
    X(MemFree, "cuMemFree", 3020)                                            \
    X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020)                            \
    X(StreamSynchronize, "cuStreamSynchronize", 2000)                        \
    X(StreamIsCapturing, "cuStreamIsCapturing", 10000)                       \
    X(MemsetD8Async, "cuMemsetD8Async", 3020)                                \
    X(MemcpyHtoD, "cuMemcpyHtoD", 3020)                                      \
    X(MemcpyDtoH, "cuMemcpyDtoH", 3020)                                      \
    X(StreamCreate, "cuStreamCreate", 2000)                                  \
    X(StreamDestroy, "cuStreamDestroy", 4000)                                \
    X(StreamBeginCapture, "cuStreamBeginCapture", 10010)                     \
    X(StreamEndCapture, "cuStreamEndCapture", 10000)                         \
    X(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040)       \
    X(GraphLaunch, "cuGraphLaunch", 10000)                                   \
    X(GraphExecDestroy, "cuGraphExecDestroy", 10000)                         \
    X(GraphDestroy, "cuGraphDestroy", 10000)                                 \
    X(DeviceGetName, "cuDeviceGetName", 2000)                                \
    X(EventCreate, "cuEventCreate", 2000)                                    \
    X(EventDestroy, "cuEventDestroy", 4000)                                  \
    X(EventRecord, "cuEventRecord", 2000)                                    \
    X(EventSynchronize, "cuEventSynchronize", 2000)                          \
    X(EventElapsedTime, "cuEventElapsedTime", 2000)                          \
    X(LaunchKernelEx, "cuLaunchKernelEx", 11060)                             \
    X(TensorMapEncodeTiled, "cuTensorMapEncodeTiled", 12000)                 \
    X(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010) \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020)

static void cu_load_once(void)
{
    fsa_cu_api *api = &g_cu.api;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        g_cu.status = FSA_STATUS_NO_DRIVER;
        snprintf(g_cu.message, sizeof g_cu.message, "dlopen(libcuda.so.1): %s", dlerror());
        return;
    }
    get_proc_v2_fn get_v2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
    get_proc_v1_fn get_v1 = get_v2 ? NULL : (get_proc_v1_fn)dlsym(lib, "cuGetProcAddress");
    api->Init = (PFN_cuInit_v2000)dlsym(lib, "cuInit");
    if ((get_v2 == NULL && get_v1 == NULL) || api->Init == NULL) {
        g_cu.status = FSA_STATUS_NO_DRIVER;
        snprintf(g_cu.message, sizeof g_cu.message,
                 "libcuda.so.1 lacks cuGetProcAddress (driver older than CUDA 12)");
        return;
    }
    CUresult r = api->Init(0);
    if (r != CUDA_SUCCESS) {
        g_cu.status = r == CUDA_ERROR_NO_DEVICE ? FSA_STATUS_NO_DEVICE : FSA_STATUS_DRIVER_ERROR;
        snprintf(g_cu.message, sizeof g_cu.message, "cuInit failed with CUresult %d", (int)r);
        return;
    }
#define FSA_CU_LOOKUP_(name, version, fn)                                        \
    (get_v2 ? get_v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, NULL)        \
            : get_v1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT))
#define FSA_CU_REQUIRE_(field, name, version)                                     \
    do {                                                                          \
        void *fn = NULL;                                                          \
        if (FSA_CU_LOOKUP_(name, version, fn) != CUDA_SUCCESS || fn == NULL) {    \
            g_cu.status = FSA_STATUS_NO_DRIVER;                                   \
            snprintf(g_cu.message, sizeof g_cu.message,                           \
                     "driver has no %s (ABI %d); CUDA 12 or newer is required", name, \
                     version);                                                    \
            return;                                                               \
        }                                                                         \
        *(void **)&api->field = fn;                                               \
    } while (0);
#define FSA_CU_OPTION_(field, name, version)                                      \
    do {                                                                          \
        void *fn = NULL;                                                          \
        if (FSA_CU_LOOKUP_(name, version, fn) != CUDA_SUCCESS) fn = NULL;         \
        *(void **)&api->field = fn;                                               \
    } while (0);
    FSA_CU_REQUIRED(FSA_CU_REQUIRE_)
    FSA_CU_OPTIONAL(FSA_CU_OPTION_)
#undef FSA_CU_OPTION_
#undef FSA_CU_REQUIRE_
#undef FSA_CU_LOOKUP_
    if (api->DriverGetVersion(&api->driver_version) != CUDA_SUCCESS) api->driver_version = 0;
    /* The library handle stays open for the life of the process. */
}

fsa_status fsa_cu_load(const fsa_cu_api **out)
{
    (void)pthread_once(&g_cu.once, cu_load_once);
    if (g_cu.status != FSA_STATUS_OK) {
        *out = NULL;
        return fsa_error_set(g_cu.status, "driver", "%s", g_cu.message);
    }
    *out = &g_cu.api;
    return FSA_STATUS_OK;
}

fsa_status fsa_cu_error(const fsa_cu_api *cu, CUresult result, const char *stage, const char *what)
{
    const char *name = NULL;
    const char *text = NULL;
    if (cu && cu->GetErrorName) cu->GetErrorName(result, &name);
    if (cu && cu->GetErrorString) cu->GetErrorString(result, &text);
    return fsa_error_set(FSA_STATUS_DRIVER_ERROR, stage, "%s failed: %s (%d): %s", what,
                         name ? name : "CUDA_ERROR", (int)result, text ? text : "");
}

int fsa_capture_relax(const fsa_cu_api *cu)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (cu == NULL || cu->ThreadExchangeStreamCaptureMode == NULL || cu->ThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return -1;
    return (int)mode;
}

void fsa_capture_restore(const fsa_cu_api *cu, int mode)
{
    CUstreamCaptureMode m = (CUstreamCaptureMode)mode;
    if (mode >= 0 && cu != NULL && cu->ThreadExchangeStreamCaptureMode != NULL) cu->ThreadExchangeStreamCaptureMode(&m);
}

int fsa_stream_capturing(const fsa_cu_api *cu, CUstream stream)
{
    CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cu == NULL || cu->StreamIsCapturing == NULL || cu->StreamIsCapturing(stream, &s) != CUDA_SUCCESS) return -1;
    return s != CU_STREAM_CAPTURE_STATUS_NONE;
}
