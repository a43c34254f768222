/* Error record and the CHECK macro family used by every source file. */
#ifndef FSA_STATUS_INTERNAL_H
#define FSA_STATUS_INTERNAL_H

#include "fsa.h"

#include <stdarg.h>

/* Records a failure for fsa_last_error() and returns `status`. The record is
 * thread-local; stage is a short word ("compile", "disk-cache", ...). */
fsa_status fsa_error_set(fsa_status status, const char *stage, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Adds kernel, key digest and target to the current record (NULL = keep). */
void fsa_error_set_kernel(const char *kernel, const char *key, const char *target);
/* Attaches a compiler log to the current record. */
void fsa_error_set_log(const char *log);
/* Forgets the current record. */
void fsa_error_clear(void);

/* Warnings go to stderr only when logging is on (context option or FSA_LOG). */
void fsa_log_warn(int enabled, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Every function that uses these declares `fsa_status st = FSA_STATUS_OK;`
 * and a `cleanup:` label that releases what it holds and returns st. */
#define FSA_CHECK(expr)                         \
    do {                                        \
        st = (expr);                            \
        if (st != FSA_STATUS_OK) goto cleanup;  \
    } while (0)

#define FSA_FAIL(status, stage, ...)                        \
    do {                                                    \
        st = fsa_error_set((status), (stage), __VA_ARGS__); \
        goto cleanup;                                       \
    } while (0)

#define FSA_CHECK_ARG(cond, stage, ...)                                  \
    do {                                                                 \
        if (!(cond)) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, __VA_ARGS__); \
    } while (0)

#define FSA_CHECK_ALLOC(ptr, stage)                                               \
    do {                                                                          \
        if ((ptr) == NULL) FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, stage, "out of host memory"); \
    } while (0)

#endif
