/* Sliding-window attention: the kernel's one argument. Plain C that the host
 * library and NVRTC both compile; every field is 8 bytes. The launch shape
 * and shared memory are those of query-tile attention (fsa_qt_layout.cuh). */
#ifndef FSA_SWA_PARAMS_CUH
#define FSA_SWA_PARAMS_CUH

#include "fsa_qt_layout.cuh"

typedef struct fsa_swa_params {
    fsa_kernel_view q, o;   /* [T, Hq, Dk], [T, Hq, Dv] */
    fsa_kernel_view k, v;   /* [T, Hkv, Dk], [T, Hkv, Dv] */
    long long lse;          /* float [Hq, T], natural log, or 0 */
    long long cu_seqlens;   /* int32 [B + 1] */
    long long total_tokens; /* T */
    long long batch;
    double scale_log2;      /* softmax scale * log2(e) */
    long long window;       /* W >= 1: position i sees keys i - W + 1 .. i of its sequence */
} fsa_swa_params;

#endif
