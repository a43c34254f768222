/* A stand-in for libcuda.so.1 with only the entry points the library
 * requires, for CPU tests of the driver loader and of device contexts.
 * Devices: $FSA_FAKE_CUDA_DEVICES (default 1); compute capabilities
 * $FSA_FAKE_CUDA_CC, one per device separated by commas (default 90; the
 * last value repeats). Nothing runs: loading a module fails with
 * CUDA_ERROR_NOT_SUPPORTED, or with the CUresult $FSA_FAKE_CUDA_LOAD_RESULT
 * (0: it succeeds, and the library is a dummy handle). */
#include <cuda.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

/* Item `index` of a comma-separated list of numbers; the last one repeats. */
static int env_item(const char *name, int index, int fallback)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return fallback;
    for (int i = 0; i < index; i++) {
        const char *comma = strchr(v, ',');
        if (comma == NULL) break;
        v = comma + 1;
    }
    return atoi(v);
}

static CUresult fake_driver_version(int *v)
{
    *v = 12040;
    return CUDA_SUCCESS;
}

static CUresult fake_error_name(CUresult r, const char **s)
{
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_NOT_SUPPORTED";
    return CUDA_SUCCESS;
}

static CUresult fake_error_string(CUresult r, const char **s)
{
    *s = r == CUDA_SUCCESS ? "no error" : "not supported by the fake driver";
    return CUDA_SUCCESS;
}

static CUresult fake_device_count(int *n)
{
    *n = env_int("FSA_FAKE_CUDA_DEVICES", 1);
    return CUDA_SUCCESS;
}

static CUresult fake_device_get(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= env_int("FSA_FAKE_CUDA_DEVICES", 1)) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static CUresult fake_device_attribute(int *v, CUdevice_attribute a, CUdevice d)
{
    int cc = env_item("FSA_FAKE_CUDA_CC", (int)d, 90);
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

static CUresult fake_retain(CUcontext *c, CUdevice d)
{
    *c = (CUcontext)(uintptr_t)(0x1000 + d);
    return CUDA_SUCCESS;
}

static CUresult fake_release(CUdevice d)
{
    (void)d;
    return CUDA_SUCCESS;
}

static CUresult fake_push(CUcontext c)
{
    (void)c;
    return CUDA_SUCCESS;
}

static CUresult fake_pop(CUcontext *c)
{
    if (c) *c = NULL;
    return CUDA_SUCCESS;
}

static CUresult fake_unsupported(void) { return CUDA_ERROR_NOT_SUPPORTED; }

static CUresult fake_library_load(CUlibrary *lib)
{
    CUresult r = (CUresult)env_int("FSA_FAKE_CUDA_LOAD_RESULT", CUDA_ERROR_NOT_SUPPORTED);
    *lib = r == CUDA_SUCCESS ? (CUlibrary)(uintptr_t)0x2000 : NULL;
    return r;
}

static const struct {
    const char *name;
    void *fn;
} k_entries[] = {
    {"cuDriverGetVersion", (void *)fake_driver_version},
    {"cuGetErrorName", (void *)fake_error_name},
    {"cuGetErrorString", (void *)fake_error_string},
    {"cuDeviceGet", (void *)fake_device_get},
    {"cuDeviceGetCount", (void *)fake_device_count},
    {"cuDeviceGetAttribute", (void *)fake_device_attribute},
    {"cuDevicePrimaryCtxRetain", (void *)fake_retain},
    {"cuDevicePrimaryCtxRelease", (void *)fake_release},
    {"cuCtxPushCurrent", (void *)fake_push},
    {"cuCtxPopCurrent", (void *)fake_pop},
    {"cuLibraryLoadData", (void *)fake_library_load},
    {"cuLibraryUnload", (void *)fake_unsupported},
    {"cuLibraryGetKernel", (void *)fake_unsupported},
    {"cuKernelGetFunction", (void *)fake_unsupported},
    {"cuFuncSetAttribute", (void *)fake_unsupported},
    {"cuFuncGetAttribute", (void *)fake_unsupported},
    {"cuLaunchKernel", (void *)fake_unsupported},
    {"cuMemsetD32Async", (void *)fake_unsupported},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void *)fake_unsupported},
};

EXPORT CUresult cuInit(unsigned flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

/* NVRTC looks this up in whatever libcuda.so.1 the process loaded and
 * crashes where it is missing: a table it cannot have. */
EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    (void)version;
    (void)flags;
    for (size_t i = 0; i < sizeof k_entries / sizeof k_entries[0]; i++)
        if (strcmp(symbol, k_entries[i].name) == 0) {
            *pfn = k_entries[i].fn;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
