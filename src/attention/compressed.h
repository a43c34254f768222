/* Compressed-attention internals shared by the forward (compressed.c) and the
 * backward (compressed_bwd.c): the plan, the argument checks both calls make,
 * the parameter block and one launch. Calls are framed by fsa_call_read and
 * fsa_call_enter (launch.h). */
#ifndef FSA_ATTENTION_COMPRESSED_H
#define FSA_ATTENTION_COMPRESSED_H

#include "launch.h"

#include "../../templates/cmp_params.cuh"

struct fsa_compressed_plan {
    fsa_context *ctx; /* first: the call frame finds it here */
    fsa_compressed_attention_desc desc; /* value_dim resolved */
    int group;
    float scale;
    fsa_kernel_config config; /* the kernels' template parameters */
    /* fn NULL offline; select zero without top-k, the backward kernels
     * without backward. */
    fsa_kernel fwd, select, bwd_dq, bwd_dkv;
    fsa_kernel bwd_dkv_sum; /* with the warpgroup backward: a split dK/dV walk's sum */
    int dkv_max_splits;     /* fsa_cmp_dkv_splits's cap: FSA_CMP_DKV_SPLITS, else FSA_CMP_DKV_MAX_SPLITS */
    struct fsa_metadata_checker *checker; /* check mode only (metadata_check.h) */
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

/* Counts (and, with tokens, the grid, offsets, lse, q, k, v and o, which the
 * forward writes). */
fsa_status fsa_cmp_check_call(const char *stage, const fsa_compressed_plan *plan, const fsa_cmp_call *c, int backward);

/* Check mode: the call's cu_seqlens and cu_seqlens_c on the device, waited
 * for, before its kernels (OK at once without check mode). */
fsa_status fsa_cmp_check_offsets(const char *stage, const fsa_compressed_plan *plan, const fsa_cmp_call *c,
                                 CUstream stream);

/* Clears p and fills the inputs and the problem. */
void fsa_cmp_params_fill(fsa_cmp_params *p, const fsa_compressed_plan *plan, const fsa_cmp_call *c);

/* CTAs a key tile's dK/dV walk is split into for total_cmp compressed
 * tokens in `batch` sequences (cmp_params.cuh; 1 without the warpgroup
 * backward or a device). */
int fsa_cmp_dkv_split_count(const fsa_compressed_plan *plan, int64_t total_cmp, int batch);

/* Launches k on a (gx, Hkv, gz) grid. */
static inline fsa_status fsa_cmp_launch(const fsa_compressed_plan *plan, const fsa_kernel *k, uint64_t gx,
                                        unsigned gz, CUstream stream, fsa_cmp_params *p)
{
    return fsa_kernel_launch_3d(k, plan->ctx, gx, (unsigned)plan->desc.num_kv_heads, gz, stream, p);
}

#endif
