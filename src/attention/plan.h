/* Plan internals: one problem shape, its kernels, the path choice and the
 * workspace layout. */
#ifndef FSA_PLAN_H
#define FSA_PLAN_H

#include "kernels.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fsa_fwd_kernels {
    fsa_kernel count, scatter, main, reduce, nsa;
} fsa_fwd_kernels;

typedef struct fsa_bwd_kernels {
    fsa_kernel count, scatter, sort, prep, main, main_kv, dq, dq_nsa, dkv_sum, dkv_store;
} fsa_bwd_kernels;

struct fsa_plan {
    fsa_context *ctx;
    fsa_selected_attention_desc desc;
    int group;            /* G = Hq / Hkv */
    float scale;          /* resolved softmax scale */
    fsa_kernel_config config; /* the kernels' template parameters */
    int fsa_available;    /* shape fits the FSA kernels on this target */
    int nsa_available;
    int main_grid;        /* persistent grid of the main kernel */
    fsa_fwd_kernels fwd;
    int bwd_available;
    int bwd_nsa_available; /* the NSA-order dq kernel fits and the descriptor asks for it */
    int bwd_grid;
    fsa_bwd_kernels bwd;
    struct fsa_metadata_checker *checker; /* check mode only (metadata_check.h) */
};

/* The index-inversion arrays both workspaces start with. Offsets in bytes. */
typedef struct fsa_index_layout {
    int64_t nb_total; /* block ids per KV head */
    size_t n_counts;  /* entries of counts, offsets and work_offsets */
    size_t counts, offsets, work_offsets;
} fsa_index_layout;

/* Workspace of the FSA path for a chunk of `tc` tokens. Offsets in bytes. */
typedef struct fsa_fsa_layout {
    fsa_index_layout index;
    size_t work_seg, mask, list, lse_part, o_part;
    size_t total;
} fsa_fsa_layout;

void fsa_fsa_layout_for(fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                        int64_t tc);

/* Tokens per chunk for this problem under the plan's workspace limit. */
int64_t fsa_fsa_chunk_tokens(const fsa_plan *plan, int64_t total_tokens, int batch);

/* Backward workspace for a chunk of `tc` tokens; dq partials only on the FSA path. */
typedef struct fsa_bwd_layout {
    fsa_algorithm algorithm;
    int item_entries; /* list entries per main-kernel work item */
    fsa_index_layout index;
    size_t part_offsets, work_seg, work_next, mask, list, list_sorted, delta,
        dq_part, dkv_part, dkv_acc;
    size_t total;
} fsa_bwd_layout;

void fsa_bwd_layout_for(fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int64_t tc);
int64_t fsa_bwd_chunk_tokens(const fsa_plan *plan, int64_t total_tokens, int batch);

/* The token chunk and workspace layout of a call (FSA-path forward or
 * backward) whose counts are already checked. FSA_STATUS_UNSUPPORTED when the
 * problem is too large to index: one token's list entries past int32, or a
 * workspace past size_t (the layouts saturate there instead of wrapping). */
fsa_status fsa_fsa_setup(int64_t *tc_out, fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                         const char *stage);
fsa_status fsa_bwd_setup(int64_t *tc_out, fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                         const char *stage);

/* The path a forward call with `total_tokens` tokens takes. */
fsa_algorithm fsa_plan_choose(const fsa_plan *plan, int64_t total_tokens, const char **reason);

/* The path a backward call with `total_tokens` tokens takes: the order dq is
 * computed in (dK and dV always go KV-block-outer). AUTO: the FSA order. */
fsa_algorithm fsa_plan_choose_bwd(const fsa_plan *plan, int64_t total_tokens, const char **reason);

#endif
