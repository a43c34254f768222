/* Sliding-window attention: the kernels' one argument. Plain C that the host
 * library and NVRTC both compile; every field is 8 bytes, the window table
 * (an even number of ints) last: no padding. The launch shapes and shared
 * memory are those of query-tile attention (fsa_qt_layout.cuh): the forward
 * and dq per query tile, dK and dV per tile of FSA_QT_DKV_KEYS keys. */
#ifndef FSA_SWA_PARAMS_CUH
#define FSA_SWA_PARAMS_CUH

#include "fsa_qt_layout.cuh"

/* Query heads a plan with per-head windows may have: the table travels in
 * the parameter block of every launch. */
#define FSA_SWA_MAX_HEAD_WINDOWS 256

typedef struct fsa_swa_params {
    fsa_kernel_view q, o;   /* [T, Hq, Dk], [T, Hq, Dv] */
    fsa_kernel_view k, v;   /* [T, Hkv, Dk], [T, Hkv, Dv] */
    long long lse;          /* float [Hq, T], natural log, or 0 (forward only) */
    long long cu_seqlens;   /* int32 [B + 1] */
    long long total_tokens; /* T */
    long long batch;
    double scale_log2;      /* softmax scale * log2(e) */
    long long window;       /* W >= 1 for every head: position i sees keys i - W + 1 .. i of its
                               sequence; 0: head_windows[query head] */
    /* Backward. */
    fsa_kernel_view dout, dq; /* [T, Hq, Dv], [T, Hq, Dk] */
    fsa_kernel_view dq_add;   /* [T, Hq, Dk] added to dq before its rounding (may be dq); ptr 0: none */
    fsa_kernel_view gate;      /* float [T, Hq]: each row's gate (dout is that of gate * o); ptr 0: none */
    fsa_kernel_view gate_grad; /* float [T, Hq], written: rowsum(dout * o); ptr 0: not wanted */
    fsa_kernel_view dk, dv;   /* [T, Hkv, Dk], [T, Hkv, Dv] */
    long long delta;          /* float [Hq, T]: rowsum(dout * o), written by the dq kernel */
    long long gated_lse;      /* float [Hq, T]: a gated backward's lse words (fsa_qbwd.cuh), by the dq kernel */
    long long num_kv_heads;   /* Hkv (the persistent forward's jobs: fsa_qt_ws_persistent) */
    int head_windows[FSA_SWA_MAX_HEAD_WINDOWS]; /* per query head, when window is 0 */
} fsa_swa_params;

#endif
