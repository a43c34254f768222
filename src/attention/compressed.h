/* Compressed-attention internals shared by the forward (compressed.c) and the
 * backward (compressed_bwd.c): the plan, the argument checks both calls make,
 * the parameter block and one launch. */
#ifndef FSA_ATTENTION_COMPRESSED_H
#define FSA_ATTENTION_COMPRESSED_H

#include "launch.h"

#include "../../templates/cmp_params.cuh"

struct fsa_compressed_plan {
    fsa_context *ctx;
    fsa_compressed_attention_desc desc; /* value_dim resolved */
    int group;
    float scale;
    /* NULL offline; select without top-k, the backward pair without backward. */
    CUfunction fwd, select, bwd_dq, bwd_dkv;
    int fwd_smem, select_smem, dq_smem, dkv_smem;
};

/* What the forward and backward arguments share. */
typedef struct fsa_cmp_call {
    int64_t total_tokens, total_compressed;
    int batch;
    const fsa_tensor *q, *k, *v, *o;
    uint64_t lse, cu_seqlens, cu_seqlens_c;
} fsa_cmp_call;

#define FSA_CMP_CALL(a)                                                                                    \
    {                                                                                                      \
        (a)->total_tokens, (a)->total_compressed, (a)->batch, &(a)->q, &(a)->k, &(a)->v, &(a)->o, (a)->lse, \
            (a)->cu_seqlens, (a)->cu_seqlens_c                                                             \
    }

/* CTAs along x of the query-tile kernels (FSA_STATUS_UNSUPPORTED past INT32_MAX). */
fsa_status fsa_cmp_grid(int64_t *out, const fsa_compressed_plan *plan, int64_t total_tokens, int batch,
                        const char *stage);

/* Counts (and, with tokens, the grid, offsets, lse, q, k, v and o). */
fsa_status fsa_cmp_check_call(const char *stage, const fsa_compressed_plan *plan, const fsa_cmp_call *c);

/* FSA_STATUS_NO_DEVICE for an offline plan: the last check of a call. */
fsa_status fsa_cmp_check_device(const char *stage, const fsa_compressed_plan *plan);

/* Clears p and fills the inputs and the problem. */
void fsa_cmp_params_fill(fsa_cmp_params *p, const fsa_compressed_plan *plan, const fsa_cmp_call *c);

/* One call of a compressed-attention operation: reads the caller's args
 * struct (any version from the first size up) into `local`, checks it
 * (validate; *has_work = 0: nothing to launch) and launches inside the
 * plan's context. */
typedef struct fsa_cmp_op {
    const char *stage, *args_type;
    size_t args_size, args_first_size;
    fsa_status (*validate)(const fsa_compressed_plan *plan, const void *local, int *has_work);
    fsa_status (*launch)(const fsa_compressed_plan *plan, const void *local, CUstream stream);
} fsa_cmp_op;
fsa_status fsa_cmp_run(const fsa_cmp_op *op, void *local, const fsa_compressed_plan *plan, const void *args,
                       void *stream);

/* Launches fn on a (gx, Hkv, gz) grid of FSA_QT_THREADS threads. */
fsa_status fsa_cmp_launch(const fsa_compressed_plan *plan, CUfunction fn, unsigned smem, uint64_t gx, unsigned gz,
                          CUstream stream, fsa_cmp_params *p, const char *what);

#endif
