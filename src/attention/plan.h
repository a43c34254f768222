/* Plan internals: one problem shape, its kernels, the path choice and the
 * workspace layout. */
#ifndef FSA_PLAN_H
#define FSA_PLAN_H

#include "jit/context.h"
#include "fsa.h"

#include "../../templates/fsa_layout.cuh" /* FSA_NSA_THREADS, FSA_NSA_STAGE_KEYS */
#include "../../templates/sel_params.cuh"

#include <stddef.h>
#include <stdint.h>

/* Must match the main kernel: tiles of 64 rows, (64 / G) tokens per tile,
 * 8 tiles per work item, 2 query tiles in flight. */
#define FSA_MAIN_ROWS 64
#define FSA_MAIN_TILES 8
static inline int fsa_main_q_stages(int head_dim)
{
    (void)head_dim;
    return 2;
}
#define FSA_MAIN_THREADS 128

/* Rows of the reduction per 256-thread block: as in sel_fwd_reduce.cu, a row
 * takes 8, 16 or 32 lanes for head dims up to 64, 128 and 256. */
static inline int fsa_reduce_rows_per_block(int head_dim)
{
    return 8 * (head_dim <= 64 ? 4 : head_dim <= 128 ? 2 : 1);
}

/* Must match the backward main kernel: tiles of 32 rows, 32 tiles per round
 * (one row table); a token's rows fill whole tiles when the group is over 32. */
#define FSA_BWD_ROWS 32
#define FSA_BWD_TILES 32
static inline int fsa_bwd_round_entries_for(int group)
{
    if (group <= FSA_BWD_ROWS) return FSA_BWD_ROWS / group * FSA_BWD_TILES;
    return FSA_BWD_TILES / ((group + FSA_BWD_ROWS - 1) / FSA_BWD_ROWS);
}
#define FSA_BWD_MAX_KEYS 128 /* keys per backward CTA: larger blocks run in slices */
#define FSA_BWD_NSA_THREADS 128

typedef struct fsa_fwd_kernels {
    CUfunction count, scatter, main, reduce, nsa;
} fsa_fwd_kernels;

typedef struct fsa_bwd_kernels {
    CUfunction count, scatter, sort, prep, main, main_kv, dq, dq_nsa, dkv_sum, dkv_store;
} fsa_bwd_kernels;

struct fsa_plan {
    fsa_context *ctx;
    fsa_selected_attention_desc desc;
    int group;            /* G = Hq / Hkv */
    float scale;          /* resolved softmax scale */
    int fsa_available;    /* shape fits the FSA kernels on this target */
    int nsa_available;
    int item_entries;     /* list entries per main-kernel work item */
    int main_smem, nsa_smem;
    int main_grid;        /* persistent grid of the main kernel */
    fsa_fwd_kernels fwd;
    int bwd_available;
    int bwd_round_entries; /* list entries per round of the backward main kernel */
    int bwd_keys;         /* keys per main-kernel CTA (block_size / bwd_keys slices) */
    int bwd_smem, bwd_nsa_smem;
    int bwd_nsa_available; /* the NSA-order dq kernel fits and the descriptor asks for it */
    int bwd_grid;
    fsa_bwd_kernels bwd;
};

/* Workspace of the FSA path for a chunk of `tc` tokens. Offsets in bytes. */
typedef struct fsa_fsa_layout {
    int64_t nb_total;
    size_t counts, offsets, work_offsets, work_seg, mask, list, lse_part, o_part;
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
    int64_t nb_total;
    size_t counts, offsets, work_offsets, part_offsets, work_seg, work_next, mask, list, list_sorted, delta,
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
