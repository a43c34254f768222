/* Plan internals: one problem shape, its kernels, the path choice and the
 * workspace layout. */
#ifndef FSA_PLAN_H
#define FSA_PLAN_H

#include "choose.h"
#include "kernels.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fsa_fwd_kernels {
    fsa_kernel count, scatter, main, reduce, nsa;
} fsa_fwd_kernels;

typedef struct fsa_bwd_kernels {
    fsa_kernel count, scatter, sort, prep, main, main_kv, sums, dq_nsa, dkv_sum;
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
    int fwd_wg;           /* the FSA-order main kernel on warpgroup products (sel_fwd_main_wg.cu) */
    int sel_layout_needed; /* the FSA_SEL_LAYOUT_* bits the target needs (config.sel_layout adds an override's) */
    int bwd_wg;           /* the FSA-order backward main kernel on warpgroup products (sel_bwd_main_wg.cu) */
    int index_per_chunk;  /* FSA_INDEX_ONCE=0: each head chunk inverts its own index (0: chunks may share one) */
    int bwd_item_rounds;  /* FSA_BWD_ITEM_ROUNDS (measuring): every backward's item entries times this; 0: unset */
    int bwd_list_rounds;  /* FSA_BWD_LIST_ROUNDS (measuring): item_max_rounds of every backward launch; 0: unset */
    fsa_fwd_kernels fwd;
    int bwd_available;
    int bwd_nsa_available; /* the NSA-order dq kernel fits and the descriptor asks for it */
    int bwd_grid;
    fsa_bwd_kernels bwd;
    struct fsa_metadata_checker *checker; /* check mode only (metadata_check.h) */
    fsa_tune_state tune;  /* tuning level and records per bucket (choose.h) */
};

/* The index-inversion arrays both workspaces start with. Offsets in bytes.
 * A call of several head chunks that each take every token inverts the
 * index once for every KV head (index_heads = Hkv): each chunk's launches
 * then read their part of it (fsa_params_index_chunk), with work items
 * numbered per chunk. Otherwise every chunk inverts its own (index_heads =
 * chunk_heads). The backward's token chunks (of one KV head each) do the same
 * with virtual heads: one inversion for every (KV head, token chunk), each
 * chunk's launches reading their part as a head chunk's (tchunks > 1). */
typedef struct fsa_index_layout {
    int64_t nb_total;  /* block ids per KV head */
    int tchunks;       /* backward token chunks of one head that one inversion covers (1: each its own);
                          then index_heads counts (KV head, token chunk) pairs: sel_params.cuh */
    int index_heads;   /* KV heads one inversion covers */
    int chunk_heads;   /* KV heads of one chunk's launches; divides index_heads */
    size_t n_counts;   /* entries of counts and offsets: index_heads * nb_total + 1 */
    size_t n_chunk;    /* entries of a chunk's work_offsets (and part_offsets): chunk_heads * nb_total + 1 */
    size_t seg_stride; /* work_seg entries of a chunk: at most one partial work item per segment besides the full ones */
    /* counts, then the main kernels' work counters of either direction (FSA_WORK_COUNTERS ints per
     * chunk, zeroed with the counts by fsa_launch_index: sel_params.cuh, work_next), offsets,
     * work_offsets */
    size_t counts, work_next, offsets, work_offsets;
} fsa_index_layout;

/* Chunks one inversion serves. */
static inline int fsa_index_chunks(const fsa_index_layout *l) { return l->index_heads / l->chunk_heads; }

/* List entries per work item of the plan's FSA-order forward main kernel. */
int fsa_plan_fwd_item_entries(const fsa_plan *plan);

/* Whether the NSA-order kernels' grid (the forward, the backward's dq: a row
 * per KV head and group of FSA_NSA_ROWS query heads) fits FSA_GRID_MAX_ROWS. */
int fsa_nsa_grid_fits(const fsa_plan *plan);

/* Workspace of the FSA path for a chunk of `heads` KV heads x `tc` tokens. Offsets in bytes. */
typedef struct fsa_fsa_layout {
    int heads; /* KV heads per launch sequence; divides Hkv */
    fsa_index_layout index;
    size_t work_seg, mask, list, lse_part, o_part;
    size_t total;
} fsa_fsa_layout;

void fsa_fsa_layout_for(fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                        int64_t tc);

/* The chunk of a forward call under the plan's cap, as fsa_bwd_chunk. */
void fsa_fwd_chunk(int *heads_out, int64_t *tc_out, const fsa_plan *plan, int64_t total_tokens, int batch);

/* The workspace cap of a call (op) of `total_tokens` tokens: the
 * descriptor's workspace_limit (UINT64_MAX: none), or for 0 the default:
 * what the outputs alive during the call leave of FSA_WORKSPACE_DEFAULT_BUDGET
 * (forward: o and lse; backward: those and dq, dk, dv), at least
 * FSA_WORKSPACE_DEFAULT_MIN (backward: plus one KV head's fp32 dK/dV
 * accumulator over every token, which its token chunks carry). */
uint64_t fsa_call_workspace_cap(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens);

/* Backward workspace for a chunk of `heads` KV heads x `tc` tokens; dq
 * partials only on the FSA path. The fp32 dK/dV accumulator spans every token
 * of the chunk's heads, so it is chunked by heads only; a chunk of every
 * token in one pass over the head dims needs none. */
typedef struct fsa_bwd_layout {
    fsa_algorithm algorithm;
    int heads;        /* KV heads per launch sequence; divides Hkv */
    int item_entries; /* list entries per main-kernel work item (sized for one chunk's launch) */
    int item_max_rounds; /* the most times item_entries one list's items take (fsa_bwd_list_item_entries) */
    int dkv_direct;   /* one token chunk, one pass: dk and dv written without dkv_acc (size 0) */
    fsa_index_layout index;
    size_t part_offsets, work_seg, mask, list, list_sorted, delta,
        dq_part, dkv_part, dkv_acc;
    size_t total;
} fsa_bwd_layout;

/* `order`: the dq order the layout serves (the FSA order's is the larger:
 * it also holds the per-pair dq rows, so it serves both). */
void fsa_bwd_layout_for(fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch, int heads,
                        int64_t tc, fsa_algorithm order);

/* Key slices of a block in the backward main kernel (bwd_keys keys each). */
static inline int fsa_bwd_key_slices(const fsa_plan *plan)
{
    return plan->config.bwd_keys > 0 ? plan->desc.block_size / plan->config.bwd_keys : 1;
}

/* The backward main kernel's work in a launch over `tokens` tokens of the
 * layout's head chunk (its grid bound and the count it takes in int32,
 * sel_bwd_main.cu): items of item_entries list entries plus one per segment,
 * times the key slices of a block. */
uint64_t fsa_bwd_main_work(const fsa_plan *plan, const fsa_bwd_layout *l, int64_t tokens);

/* Whether a launch of `work` items fits the main kernel's int32 counts: the items, and each CTA's next item,
 * taken as the launch's grid (at most the persistent grid) plus a counter, up to grid + work - 1. */
int fsa_bwd_work_fits(const fsa_plan *plan, uint64_t work);

/* The backward chunk under the plan's cap: every head and token when they
 * fit; else the most KV heads (a divisor of Hkv) whose every token fits;
 * else one head and the most tokens that fit. Heads first: a chunk of heads
 * is the whole computation of those heads, while token chunks split each
 * block's list (its K and V loaded again per chunk, shorter work items). */
void fsa_bwd_chunk(int *heads_out, int64_t *tc_out, const fsa_plan *plan, int64_t total_tokens, int batch,
                   fsa_algorithm order);

/* The token chunk and workspace layout of a call (FSA-path forward or
 * backward; the head chunk is in the layout) whose counts are already
 * checked. FSA_STATUS_UNSUPPORTED when the
 * problem is too large to index: one token's list entries past int32, or a
 * workspace past size_t (the layouts saturate there instead of wrapping). */
fsa_status fsa_fsa_setup(int64_t *tc_out, fsa_fsa_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                         const char *stage);
fsa_status fsa_bwd_setup(int64_t *tc_out, fsa_bwd_layout *out, const fsa_plan *plan, int64_t total_tokens, int batch,
                         fsa_algorithm order, const char *stage);

/* The list entries one token chunk's forward pairs may reach: the int32 range less the steps the
 * forward's main kernels take past their last work item (sel_fwd_main*.cu count items in int). A token
 * of more (KV heads x top-k) cannot be indexed. */
int64_t fsa_fwd_pair_room(const fsa_plan *plan);

/* FSA_STATUS_UNSUPPORTED (error record under `stage`) when one token's list entries (KV heads x top-k)
 * pass fsa_fwd_pair_room: every FSA-order call and every backward indexes them. */
fsa_status fsa_check_token_entries(const fsa_plan *plan, const char *stage);

/* The order whose workspace a call needs: the chosen one, or the FSA order
 * (the larger workspace, serving every candidate) while the call may measure. */
fsa_algorithm fsa_workspace_order(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens);

/* The loop order a forward call with `total_tokens` tokens takes without
 * measuring (fsa_choose: the bucket's record, else the heuristic). */
fsa_algorithm fsa_plan_choose(const fsa_plan *plan, int64_t total_tokens, const char **reason);

/* The same for a backward call: the order dq is computed in (dK and dV
 * always go KV-block-outer). */
fsa_algorithm fsa_plan_choose_bwd(const fsa_plan *plan, int64_t total_tokens, const char **reason);

#endif
