/**
 * @file fsa/common.h
 * What every part of fsa.h uses: the fixed-width types, the export macro and
 * the ..._INIT machinery. Part of fsa.h.
 */
#ifndef FSA_PUBLIC_COMMON_H
#define FSA_PUBLIC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FSA_API
#elif defined(__GNUC__)
#define FSA_API __attribute__((visibility("default")))
#else
#define FSA_API
#endif

/* ..._INIT macros name struct_size and the fields whose default is not zero;
 * every other field starts at zero. C gets designated initializers (a
 * constant expression, fit for static storage); C++ gets a value-initialized
 * struct, since its designated initializers only came with C++20. */
#ifdef __cplusplus
#define FSA_INIT_FIELD_(field, value) fsa_init_.field = (value);
#define FSA_INIT_(type, fields)                 \
    ([]() -> type {                             \
        type fsa_init_ = type();                \
        fsa_init_.struct_size = sizeof(type);   \
        fields return fsa_init_;                \
    }())
#else
#define FSA_INIT_FIELD_(field, value) .field = (value),
#define FSA_INIT_(type, fields) { .struct_size = sizeof(type), fields }
#endif

#endif /* FSA_PUBLIC_COMMON_H */
