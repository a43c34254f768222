/* Kernel keys: everything that decides a cubin's bytes, as canonical text,
 * its XXH3-128 digest, and a readable file name. Never paths, host names,
 * device ordinals or compiler output. */
#ifndef FSA_KERNEL_KEY_H
#define FSA_KERNEL_KEY_H

#include "fsa.h"
#include "render.h"

#include <stddef.h>
#include <stdint.h>

#define FSA_KEY_SCHEMA 1

typedef struct fsa_key_inputs {
    const char *family;          /* template family, e.g. "sel_fwd_main" */
    const fsa_param *params;
    size_t n_params;
    const char *nvrtc_version;   /* "13.0 <build ID>" (fsa_nvrtc_api.key_version); NULL: no NVRTC */
    const char *target;          /* "sm_90a" */
    const char *const *options;  /* NVRTC options, in order */
    size_t n_options;
} fsa_key_inputs;

typedef struct fsa_kernel_key {
    char *text;         /* canonical text, one "field value" per line */
    char *name;         /* readable: family then tagged values, e.g. sel_fwd_main_bf16_d128_dv128_g4_bk64 */
    uint8_t digest[16]; /* XXH3-128 of text (canonical big-endian bytes) */
    char hex[33];
} fsa_kernel_key;

fsa_status fsa_key_build(fsa_kernel_key *out, const fsa_key_inputs *in);
void fsa_key_free(fsa_kernel_key *key);

/* XXH3-128 of `n` bytes as 16 canonical bytes. */
void fsa_digest128(uint8_t out[16], const void *data, size_t n);

/* 1 when two key texts are equal apart from their "nvrtc" line: lets a
 * process without NVRTC use kernels that some NVRTC version built. */
int fsa_key_text_equal_except_nvrtc(const char *a, const char *b);

/* The NVRTC version on the "nvrtc" line of a key text, numbered as the driver
 * numbers versions (13.0: 13000; the major is the value / 1000); 0 for "none"
 * or no such line; INT_MAX for a major past FSA_KEY_NVRTC_MAJOR_MAX or a minor
 * past 99 (a forged or damaged text reads as newer than every driver). */
#define FSA_KEY_NVRTC_MAJOR_MAX 99999
int fsa_key_text_nvrtc_version(const char *text);

/* 1 when the first `len` bytes of a key text are a kernel key's (first line
 * "fsa-kernel-key N") whose "family" line begins the `name_len` bytes of
 * `name`: the family alone or followed by '_', as fsa_key_build names its
 * keys. A lookup builds the file name from the key, so an entry stored under a
 * name its key does not give is never read. */
int fsa_key_text_fits_name(const char *text, size_t len, const char *name, size_t name_len);

/* 1 when the first `len` bytes of a key text hold the line "target <target>":
 * an entry in another target's directory never matches a lookup there. */
int fsa_key_text_names_target(const char *text, size_t len, const char *target);

#endif
