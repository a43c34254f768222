/* The CUDA driver API, loaded at run time: dlopen("libcuda.so.1") and
 * cuGetProcAddress. The library never links libcuda, so it loads (and its CPU
 * paths work) on machines without a driver. */
#ifndef FSA_CUDA_DRIVER_H
#define FSA_CUDA_DRIVER_H

#include "fsa.h"

#include <cuda.h>
#include <cudaTypedefs.h>

typedef struct fsa_cu_api {
    int driver_version;
    /* Required: what the library calls. A driver without one of these is
     * FSA_STATUS_NO_DRIVER. */
    PFN_cuInit_v2000 Init;
    PFN_cuDriverGetVersion_v2020 DriverGetVersion;
    PFN_cuGetErrorName_v6000 GetErrorName;
    PFN_cuGetErrorString_v6000 GetErrorString;
    PFN_cuDeviceGet_v2000 DeviceGet;
    PFN_cuDeviceGetCount_v2000 DeviceGetCount;
    PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
    PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
    PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
    PFN_cuCtxPushCurrent_v4000 CtxPushCurrent;
    PFN_cuCtxPopCurrent_v4000 CtxPopCurrent;
    PFN_cuLibraryLoadData_v12000 LibraryLoadData;
    PFN_cuLibraryUnload_v12000 LibraryUnload;
    PFN_cuLibraryGetKernel_v12000 LibraryGetKernel;
    PFN_cuKernelGetFunction_v12000 KernelGetFunction;
    PFN_cuFuncSetAttribute_v9000 FuncSetAttribute;
    PFN_cuFuncGetAttribute_v2020 FuncGetAttribute;
    PFN_cuLaunchKernel_v4000 LaunchKernel;
    PFN_cuMemsetD32Async_v3020 MemsetD32Async;
    PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050 OccupancyMaxActiveBlocksPerMultiprocessor;
    /* Optional: NULL when the driver lacks them. The check mode needs the
     * first five (it says so when one is missing), tuning StreamIsCapturing
     * and the event functions; tests and tools reach the rest through this
     * loader. */
    PFN_cuMemAlloc_v3020 MemAlloc;
    PFN_cuMemFree_v3020 MemFree;
    PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
    PFN_cuStreamSynchronize_v2000 StreamSynchronize;
    PFN_cuStreamIsCapturing_v10000 StreamIsCapturing;
    PFN_cuMemsetD8Async_v3020 MemsetD8Async;
    PFN_cuMemcpyHtoD_v3020 MemcpyHtoD;
    PFN_cuMemcpyDtoH_v3020 MemcpyDtoH;
    PFN_cuStreamCreate_v2000 StreamCreate;
    PFN_cuStreamDestroy_v4000 StreamDestroy;
    PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
    PFN_cuStreamEndCapture_v10000 StreamEndCapture;
    PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiateWithFlags;
    PFN_cuGraphLaunch_v10000 GraphLaunch;
    PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
    PFN_cuGraphDestroy_v10000 GraphDestroy;
    /* Tuning (attention/tuning.c) only: without them a call never measures. */
    PFN_cuDeviceGetName_v2000 DeviceGetName;
    PFN_cuEventCreate_v2000 EventCreate;
    PFN_cuEventDestroy_v4000 EventDestroy;
    PFN_cuEventRecord_v2000 EventRecord;
    PFN_cuEventSynchronize_v2000 EventSynchronize;
    PFN_cuEventElapsedTime_v2000 EventElapsedTime;
    /* Cluster launches (sm_90 and later); without it kernels launch without clusters. */
    PFN_cuLaunchKernelEx_v11060 LaunchKernelEx;
    /* Tensor maps of the paged-cache kernels' page-box copies (sm_90a); without it those plans use cp.async. */
    PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncodeTiled;
    /* A call's own host synchronizations in relaxed capture mode (fsa_capture_relax). */
    PFN_cuThreadExchangeStreamCaptureMode_v10010 ThreadExchangeStreamCaptureMode;
    PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
} fsa_cu_api;

/* Loads the driver once per process. FSA_STATUS_NO_DRIVER when libcuda.so.1
 * or one of its required entry points is missing, FSA_STATUS_DRIVER_ERROR when cuInit
 * fails (no device, driver/kernel-module mismatch). */
fsa_status fsa_cu_load(const fsa_cu_api **out);

/* Records a failed driver call for fsa_last_error() and returns
 * FSA_STATUS_DRIVER_ERROR. */
fsa_status fsa_cu_error(const fsa_cu_api *cu, CUresult result, const char *stage, const char *what);

/* Whether `stream` is being captured: 1, 0, or -1 when it cannot be told (no
 * entry point, or the driver refuses). */
int fsa_stream_capturing(const fsa_cu_api *cu, CUstream stream);

/* Puts the calling thread in relaxed stream-capture mode until
 * fsa_capture_restore(cu, returned value). What a call does beside its
 * stream's work (check mode's wait for its verdict, tuning's timings and
 * scratch allocations) is then allowed, and harmless, while another thread
 * captures a stream in global mode (PyTorch's default), which would
 * otherwise make those calls fail and invalidate that capture. -1 when the
 * driver lacks the entry point (nothing to restore). */
int fsa_capture_relax(const fsa_cu_api *cu);
void fsa_capture_restore(const fsa_cu_api *cu, int mode);

#define FSA_CHECK_CU(cu, call, stage)                                   \
    do {                                                                \
        CUresult cu_result_ = (call);                                   \
        if (cu_result_ != CUDA_SUCCESS) {                               \
            st = fsa_cu_error((cu), cu_result_, (stage), #call);        \
            goto cleanup;                                               \
        }                                                               \
    } while (0)

#endif
