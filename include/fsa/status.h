/**
 * @file fsa/status.h
 * Status codes (one X-macro table), the last error of a thread, the library's
 * version. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_STATUS_H
#define FSA_PUBLIC_STATUS_H

#include "common.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

/* One table makes the enum, the names and the messages. Append only: the
 * numeric values are part of the ABI. */
#define FSA_STATUS_MAP(X)                                                              \
    X(OK, 0, "success")                                                                \
    X(INVALID_ARGUMENT, 1, "invalid argument")                                         \
    X(NULL_POINTER, 2, "a required pointer is NULL")                                   \
    X(STRUCT_SIZE, 3, "struct_size does not match a known version of the struct")      \
    X(OUT_OF_MEMORY, 4, "host memory allocation failed")                               \
    X(NO_DRIVER, 5, "the CUDA driver (libcuda.so.1) could not be loaded")              \
    X(NO_DEVICE, 6, "no usable CUDA device")                                           \
    X(DRIVER_ERROR, 7, "a CUDA driver call failed")                                    \
    X(NO_NVRTC, 8, "NVRTC could not be loaded; only cached kernels are available")     \
    X(COMPILE_FAILED, 9, "NVRTC failed to compile a kernel")                           \
    X(JIT_DISABLED, 10, "kernel is not cached and run-time compilation is off")        \
    X(CACHE_IO, 11, "kernel cache input/output failed")                                \
    X(RENDER_FAILED, 12, "kernel template could not be rendered")                      \
    X(UNSUPPORTED, 13, "problem shape or option is not supported")                     \
    X(UNSUPPORTED_DEVICE, 14, "device is older than sm_80 or otherwise unsupported")   \
    X(MISALIGNED, 15, "pointer or stride does not meet the alignment requirement")     \
    X(WORKSPACE_TOO_SMALL, 16, "workspace is smaller than required")                   \
    X(NOT_FOUND, 17, "no such entry")                                                  \
    X(INTERNAL, 18, "internal error")

typedef enum fsa_status {
#define FSA_STATUS_ENUM_(name, value, msg) FSA_STATUS_##name = value,
    FSA_STATUS_MAP(FSA_STATUS_ENUM_)
#undef FSA_STATUS_ENUM_
    FSA_STATUS_COUNT_
} fsa_status;

/**
 * The enumerator's name of a status.
 * @param status any value, also one outside the table
 * @return "FSA_STATUS_OK", ...; "FSA_STATUS_UNKNOWN" for values outside the
 *         table. A static string; never NULL. Thread-safe.
 */
FSA_API const char *fsa_status_name(fsa_status status);

/**
 * A one-line message for a status.
 * @param status any value, also one outside the table
 * @return a static string; never NULL. Thread-safe.
 */
FSA_API const char *fsa_status_string(fsa_status status);

/** Detail of the last failure on the calling thread. Fields that do not
 *  apply are "". */
typedef struct fsa_error_info {
    fsa_status status;   /**< the status the failing call returned */
    const char *stage;   /**< what failed, for example "compile", "plan", "forward" */
    const char *kernel;  /**< readable kernel name */
    const char *key;     /**< kernel key digest (hex) */
    const char *target;  /**< compile target, for example "sm_90a" */
    const char *message; /**< what went wrong, in one sentence */
    const char *log;     /**< the NVRTC log of a failed compile */
} fsa_error_info;

/**
 * The last failure on the calling thread, as one readable text (status,
 * stage, kernel, key, target, message and log).
 * @return "" when nothing failed yet on this thread. Owned by the library,
 *         valid until the next call into the library on the same thread
 *         (which may replace or clear it, even when it succeeds: read it
 *         right after the call that failed).
 */
FSA_API const char *fsa_last_error(void);

/**
 * The last failure on the calling thread, field by field.
 * @return never NULL; status is FSA_STATUS_OK when nothing failed yet. The
 *         struct and its strings belong to the library and stay valid until
 *         the next call into the library on the same thread (which may
 *         replace or clear them).
 */
FSA_API const fsa_error_info *fsa_last_error_info(void);

/**
 * The library's version, "MAJOR.MINOR.PATCH" (FSA_VERSION_STRING of the
 * header it was built with).
 * @return a static string. Thread-safe.
 */
FSA_API const char *fsa_version_string(void);

/* The library's version as one number, major * 10000 + minor * 100 + patch
 * (0.2.0 is 200). Compare it with FSA_VERSION, the number of the header a
 * program was compiled with, to detect a different library at run time. */
#define FSA_VERSION (FSA_VERSION_MAJOR * 10000 + FSA_VERSION_MINOR * 100 + FSA_VERSION_PATCH)
FSA_API int fsa_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_STATUS_H */
