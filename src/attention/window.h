/* Sliding-window attention internals shared by the forward (window.c) and
 * the backward (window_bwd.c): the plan and the parameter block's inputs.
 * Calls are framed by fsa_call_framed (launch.h). */
#ifndef FSA_ATTENTION_WINDOW_H
#define FSA_ATTENTION_WINDOW_H

#include "launch.h"

#include "../../templates/swa_params.cuh"

_Static_assert(FSA_WINDOW_MAX_HEAD_WINDOWS == FSA_SWA_MAX_HEAD_WINDOWS,
               "the public limit on per-head windows is the kernels' table size");

struct fsa_window_plan {
    fsa_context *ctx; /* first: the call frame finds it here */
    fsa_window_attention_desc desc; /* value_dim resolved; head_windows NULL (the copy is below) */
    int group;
    float scale;
    /* The windows as the kernels get them: window > 0 for every head, or 0
     * and head_windows[qh] (the plan's copy of the descriptor's array). */
    long long window;
    int head_windows[FSA_SWA_MAX_HEAD_WINDOWS];
    long long widest_window; /* the longest of them: a tile's key stream is at most its tokens and this */
    fsa_kernel fwd, bwd_dq, bwd_dkv; /* fn NULL offline; the backward pair without backward */
    int wgmma;                       /* the forward's warpgroup variant (fsa_kernel_wgmma), 0: mma.sync */
    int bwd_wgmma;                   /* the backward's warpgroup variant (fsa_kernel_bwd_wgmma), 0: mma.sync */
    int qt_fwd;                      /* the mma.sync forward's layout (fsa_swa_fwd_layout; 0: the default) */
    int qt_bwd;                      /* the mma.sync backward's layout (fsa_qt_bwd_layout; 0: the default) */
    struct fsa_metadata_checker *checker; /* check mode only (metadata_check.h) */
};

/* What the forward and backward arguments share. */
typedef struct fsa_window_call {
    int64_t total_tokens;
    int batch;
    const fsa_tensor *q, *k, *v, *o;
    uint64_t cu_seqlens, lse;
} fsa_window_call;

#define FSA_WINDOW_CALL(a) {(a)->total_tokens, (a)->batch, &(a)->q, &(a)->k, &(a)->v, &(a)->o, (a)->cu_seqlens, (a)->lse}

/* Token counts (already checked with fsa_check_tokens, tokens > 0) whose
 * query and key tiles the kernels' grids can hold, else UNSUPPORTED: the
 * calls and the backward's workspace query alike. */
fsa_status fsa_window_check_grid(const char *stage, const fsa_window_plan *plan, int64_t total_tokens, int batch);

/* Counts, the grid, cu_seqlens and lse (aligned; required by the backward),
 * and with tokens q, k, v and o (written by the forward). *has_work = 0
 * without tokens. */
fsa_status fsa_window_check_call(const char *stage, const fsa_window_plan *plan, const fsa_window_call *c,
                                 int backward, int *has_work);

/* Check mode: the call's cu_seqlens on the device, waited for, before its
 * kernels (OK at once without check mode). */
fsa_status fsa_window_check_offsets(const char *stage, const fsa_window_plan *plan, fsa_window_call c,
                                    CUstream stream);

/* The parameter block of a call: its inputs, the problem and the windows
 * (the backward's fields zero). */
void fsa_window_params_fill(fsa_swa_params *p, const fsa_window_plan *plan, fsa_window_call c);

#endif
