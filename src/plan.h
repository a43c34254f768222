/* Plan internals: one problem shape, its kernels, the path choice and the
 * workspace layout. */
#ifndef FSA_PLAN_H
#define FSA_PLAN_H

#include "context.h"
#include "fsa.h"

#include "../templates/sel_params.cuh"

#include <stddef.h>
#include <stdint.h>

/* Must match the main kernel's CHUNK: (64 / G) tokens per tile, 4 tiles. */
#define FSA_MAIN_ROWS 64
#define FSA_MAIN_TILES 4
#define FSA_MAIN_THREADS 128
#define FSA_NSA_THREADS 128
#define FSA_NSA_STAGE_KEYS 64

typedef struct fsa_fwd_kernels {
    CUfunction count, scatter, main, reduce, nsa;
} fsa_fwd_kernels;

struct fsa_plan {
    fsa_context *ctx;
    fsa_selected_attention_desc desc;
    int group;            /* G = Hq / Hkv */
    float scale;          /* resolved softmax scale */
    int fsa_available;    /* shape fits the FSA kernels on this target */
    int nsa_available;
    int chunk_tokens;     /* list entries per main-kernel work item */
    int main_smem, nsa_smem;
    int main_grid;        /* persistent grid of the main kernel */
    fsa_fwd_kernels fwd;
};

/* Workspace of the FSA path for a chunk of `tc` tokens. Offsets in bytes. */
typedef struct fsa_fsa_layout {
    int64_t nb_total;
    size_t counts, offsets, work_offsets, mask, list, lse_part, o_part;
    size_t total;
} fsa_fsa_layout;

void fsa_fsa_layout_for(fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                        int64_t tc);

/* Tokens per chunk for this problem under the plan's workspace limit. */
int64_t fsa_fsa_chunk_tokens(const fsa_plan *plan, int64_t total_tokens, int batch);

/* The path a forward call with `total_tokens` tokens takes. */
fsa_algorithm fsa_plan_choose(const fsa_plan *plan, int64_t total_tokens, const char **reason);

#endif
