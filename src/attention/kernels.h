/* The kernels of the attention operations: selected attention over packed
 * tensors and over a paged KV cache, compressed attention with its block
 * selection, sliding-window attention, NSA's gates. One table says, per kernel, which
 * template family it comes from, which template parameters that family
 * takes and which entry point it is; the launch shape (threads, dynamic
 * shared memory) comes from templates/fsa_layout.cuh (fsa_qt_layout.cuh and
 * cmp_params.cuh for the query-tile kernels), the headers the kernels
 * themselves are built from. */
#ifndef FSA_ATTENTION_KERNELS_H
#define FSA_ATTENTION_KERNELS_H

#include "jit/context.h"
#include "fsa.h"

#include "../../templates/cmp_params.cuh"
#include "../../templates/gate_params.cuh"
#include "../../templates/kvc_params.cuh"
#include "../../templates/sel_params.cuh"

typedef enum fsa_kernel_id {
    FSA_K_COUNT,         /* index inversion: count pairs per (KV head, block), scan */
    FSA_K_SCATTER,       /* index inversion: the lists */
    FSA_K_SORT,          /* backward: each list in token order */
    FSA_K_FWD_MAIN,      /* FSA forward: partial outputs per (token, slot) */
    FSA_K_FWD_MAIN_WG,   /* the same on Hopper warpgroup products (sm_90a) */
    FSA_K_FWD_REDUCE,    /* FSA forward: merge of the partials */
    FSA_K_FWD_NSA,       /* NSA-order forward */
    FSA_K_BWD_PREP,      /* backward: delta = rowsum(dout * o) */
    FSA_K_BWD_MAIN,      /* backward: dK, dV and per-pair dq rows */
    FSA_K_BWD_MAIN_KV,   /* backward: dK and dV only */
    FSA_K_BWD_MAIN_WG,   /* backward: dK, dV and dq rows on Hopper warpgroup products (sm_90a) */
    FSA_K_BWD_SUMS,      /* backward: dq from the per-pair rows, and the split blocks' dK/dV */
    FSA_K_BWD_DQ_NSA,    /* backward: NSA-order dq */
    FSA_K_BWD_DKV_SUM,   /* backward: partial dK/dV of split blocks */
    FSA_K_KVC_FWD,       /* paged KV cache: a tile of new tokens over its share of the selected blocks */
    FSA_K_CMP_FWD,       /* compressed attention: output and lse per query tile */
    FSA_K_CMP_SELECT,    /* compressed attention: top-k blocks from its scores */
    FSA_K_CMP_BWD_DQ,    /* compressed backward: dq and delta */
    FSA_K_CMP_BWD_DKV,   /* compressed backward: dk and dv */
    FSA_K_CMP_BWD_DKV_SUM, /* compressed backward: dk and dv from a split walk's partial sums */
    FSA_K_SWA_FWD,       /* sliding-window attention forward */
    FSA_K_SWA_BWD_DQ,    /* sliding-window backward: dq and delta */
    FSA_K_SWA_BWD_DKV,   /* sliding-window backward: dk and dv */
    FSA_K_GATE_FWD,      /* NSA's gates: the sum of the branches' gated outputs */
    FSA_K_GATE_BWD,      /* NSA's gates: the branches' output gradients and the gates' */
    FSA_K_N
} fsa_kernel_id;

/* One kernel of a plan. */
typedef struct fsa_kernel {
    CUfunction fn;     /* NULL until loaded, and for an offline context */
    unsigned threads;  /* threads per block */
    unsigned smem;     /* dynamic shared memory per block, bytes */
    const char *name;  /* entry point; also names the launch in errors */
    unsigned smem_static; /* static shared memory the layout header counts, rounded up to 16 bytes as the driver
                           * counts it (fsa_static_smem_counted); the plans' checks add it */
} fsa_kernel;

/* A kernel's shared memory as the driver counts it against the limit: dynamic and static together. */
static inline unsigned fsa_kernel_smem_total(const fsa_kernel *k) { return k->smem + k->smem_static; }

/* The template parameters of a plan's kernels. */
typedef struct fsa_kernel_config {
    fsa_dtype dtype;
    int head_dim, group, block_size, top_k;
    int bwd_keys;  /* keys per backward main-kernel CTA */
    int page_size; /* tokens per page of a paged KV cache */
    int value_dim;               /* V's head dimension (of o, dout, dv too); head_dim is Q's and K's */
    int kernel_size, stride;     /* compressed attention: the compression */
    int wgmma;                   /* query-tile forwards: 0 mma.sync, else warpgroup products (fsa_kernel_wgmma) */
    int bwd_wgmma;               /* query-tile backwards: 0 mma.sync, else warpgroup products (fsa_kernel_bwd_wgmma) */
    int sel_bwd_wg;              /* selected backward main kernel: 0 mma.sync, else its warpgroup variant */
    int kvc_tma;                 /* paged-cache attention: FSA_KVC_KERNEL_* bits (kvc_params.cuh; 0 cp.async) */
    int kvc_layout;              /* paged-cache attention: its layout (FSA_KVC_LAYOUT_*, fsa_layout.cuh; 0 the default) */
    int sel_layout;              /* selected attention's mma.sync kernels: FSA_SEL_LAYOUT_* bits (0 the default) */
    int cmp_sel_variant;         /* compressed selection on the mbarrier ring: its variant (fsa_kernel_cmp_sel_variant) */
    int fwd_wg_variant;          /* the warpgroup forward main kernel's schedule (fsa_kernel_fwd_wg_variant) */
    int qt_fwd;                  /* query-tile mma.sync forwards: their layout (FSA_QT_FWD_*; 0 the default) */
    int qt_bwd;                  /* query-tile mma.sync backwards: their layout (FSA_QT_BWD_*; 0 the default) */
} fsa_kernel_config;

/* Whether the query-tile forwards of a (dk, dv) plan use Hopper warpgroup
 * products: 0 (mma.sync) unless the context compiles for sm_90a; then the
 * variant of fsa_qt_layout.cuh FSA_WGMMA names (0 to 6) as fsa_qt_wg_pick
 * grants it for the head dims, or without it fsa_qt_wg_default. */
int fsa_kernel_wgmma(const fsa_context *ctx, int dk, int dv);

/* The warpgroup variant of a (dk, dv) plan's query-tile backwards
 * (fsa_qt_layout.cuh): 0 (mma.sync) unless the context compiles for sm_90a;
 * then the variant FSA_WGMMA_BWD names (0, 2 to 5) as fsa_qt_wgb_pick grants
 * it for the head dims, or without it fsa_qt_wgb_default. */
int fsa_kernel_bwd_wgmma(const fsa_context *ctx, int dk, int dv);

/* Whether a (dk, dv) plan's FSA-order backward main kernel may use Hopper
 * warpgroup products (sel_bwd_main_wg.cu; the plan also checks the block
 * size) and which variant: 0 unless the context compiles for sm_90a; then
 * what FSA_WGMMA_SEL_BWD says (0 to 2) where the head dims allow it, or
 * without it fsa_bwd_wg_default. */
int fsa_kernel_sel_bwd_wgmma(const fsa_context *ctx, int dk, int dv);

/* The compressed selection's variant (cmp_params.cuh, FSA_CMP_SEL_*): 0
 * unless its warpgroup kernel runs the mbarrier ring (fsa_cmp_sel_mbar of the
 * plan's wgmma); then what FSA_CMP_SEL says (0 to FSA_CMP_SEL_VARIANT_MAX),
 * or FSA_CMP_SEL_VARIANT_DEFAULT. */
int fsa_kernel_cmp_sel_variant(int wgmma, int dk);

/* The schedule of the warpgroup forward main kernel (sel_fwd_main_wg.cu,
 * FSA_FWD_WG_* in fsa_layout.cuh): what FSA_FWD_WG says (0 to
 * FSA_FWD_WG_VARIANT_MAX), else FSA_FWD_WG_VARIANT_DEFAULT. */
int fsa_kernel_fwd_wg_variant(void);

/* The layout bits FSA_QT_SMALL_FWD asks of the query-tile mma.sync forwards,
 * added to those the target's shared memory needs (fsa_qt_fwd_layout_fit's
 * `forced`): 1, one set of rows per warp and stages of 32 keys; 2, one set of
 * rows per warp only (what the compressed forward takes at 128 / 128 on 99 KB
 * targets); 0 (unset, anything else) none. A test's way to run on sm_90a
 * (with FSA_WGMMA=0) the kernels that 99 KB targets get. Read at plan
 * creation. */
int fsa_kernel_qt_fwd_forced(void);

/* The layout bits FSA_QT_SMALL_BWD asks of the query-tile mma.sync
 * backwards, added to those the target's shared memory needs
 * (fsa_qt_bwd_layout_fit's `forced`): 1, the smallest (dK/dV: one stage of
 * 32 query rows; dq: one stage of 32 keys); 2, dK/dV in one stage and dq in
 * stages of 32 keys (what 128 / 128 takes on 99 KB targets); 0 (unset,
 * anything else) none. A test's way to run on sm_90a (with FSA_WGMMA_BWD=0)
 * the kernels that 99 KB targets get. Read at plan creation. */
int fsa_kernel_qt_bwd_forced(void);

/* The layout bits FSA_KVC_SMALL asks of the paged-cache kernel, added to
 * those the target's shared memory needs (fsa_kvc_layout_fit's `forced`): 1,
 * one stage buffer (FSA_KVC_LAYOUT_ONE_STAGE, what 192 / 128 from G 5 and
 * 256-wide heads take on 99 KB targets); 0 (unset, anything else) none. A
 * test's way to run on sm_90a the kernels that 99 KB targets get: the plan
 * then copies by cp.async (the layout is that kernel's). Read at plan
 * creation. */
int fsa_kernel_kvc_forced(void);

/* The layout bits FSA_SEL_LAYOUT_ONE_STAGE asks of the selected-attention
 * mma.sync kernels, added to those the target's shared memory needs
 * (fsa_sel_layout_fit's `forced`): 1, every one-stage layout
 * (FSA_SEL_LAYOUT_ALL: what head dims of 192 and 256 take on 99 KB
 * targets); 0 (unset, anything else) none. A test's way to run on sm_90a
 * (with FSA_WGMMA=0 and FSA_WGMMA_SEL_BWD=0 where the warpgroup kernels
 * would run) the kernels that 99 KB targets get. Read at plan creation. */
int fsa_kernel_sel_forced(void);

/* Name and launch shape of kernel `id` under the configuration; fn NULL. */
void fsa_kernel_describe(fsa_kernel *out, fsa_kernel_id id, const fsa_kernel_config *c);

/* The configuration that template parameters `params` render (the inverse of
 * what a request writes; fields they do not name 0, value_dim head_dim's when
 * unnamed): how a test that renders templates by hand describes its kernels. */
fsa_kernel_config fsa_kernel_config_of_params(const fsa_param *params, size_t n);

/* The kernel whose entry point is `entry` (fsa_kernel.name), else -1: what
 * a compiler's per-entry report (ptxas) is checked against. */
int fsa_kernel_id_of_entry(const char *entry);

/* Describes kernel `id`, then compiles or loads it for the context. */
fsa_status fsa_kernel_load(fsa_kernel *out, fsa_kernel_id id, fsa_context *ctx, const fsa_kernel_config *c);

/* FSA_STATUS_UNSUPPORTED (stage `stage`) naming a described kernel whose
 * shared memory, dynamic plus static, exceeds what the context's target
 * allows a block; FSA_STATUS_OK otherwise. */
fsa_status fsa_kernel_check_smem(const fsa_kernel *k, const fsa_context *ctx, const char *stage);

/* A grid's rows (y): the attention kernels give each KV head (times its
 * CTAs) a row, so plans bound their heads by it. */
#define FSA_GRID_MAX_ROWS 65535

/* Launches kernel k (loaded for ctx) on a (gx, gy, gz) grid with its block
 * size and shared memory, `params` (its parameter block) as its one
 * argument; an empty grid launches nothing, and a gx over 2^31 - 1 is
 * FSA_STATUS_UNSUPPORTED (nothing launched). Inside ctx, which has a device. */
fsa_status fsa_kernel_launch_3d(const fsa_kernel *k, const fsa_context *ctx, uint64_t gx, unsigned gy, unsigned gz,
                                CUstream stream, void *params);

/* The grid of a persistent query-tile forward (attend_query_tiles_ws, which
 * takes a whole SM's shared memory): one CTA per SM of ctx's device, and no
 * more CTAs than jobs. */
uint64_t fsa_kernel_one_cta_per_sm(const fsa_context *ctx, uint64_t jobs);

/* A query-tile forward (compressed, window) over `tiles` query tiles of
 * `heads` KV heads: persistent (fsa_qt_ws_persistent), a 1-D grid of
 * fsa_kernel_one_cta_per_sm CTAs walking the tiles x heads jobs; else a
 * (tiles, heads) grid, a CTA per job. */
fsa_status fsa_kernel_launch_query_tiles(const fsa_kernel *k, const fsa_context *ctx, int persistent, uint64_t tiles,
                                         unsigned heads, CUstream stream, void *params);

/* Whether a persistent query-tile forward of `jobs` jobs, each of at most
 * `stages_per_job` key stages, keeps every CTA's ring items (counted in int
 * across the CTA's jobs, fsa_qattn_ws.cuh; `ring_stages` buffers) below
 * INT32_MAX: past it the producer's waits and arrivals would go wrong and
 * the kernel hang. Jobs go to CTAs in turn (job w to CTA w % grid). */
int fsa_kernel_persistent_items_fit(const fsa_context *ctx, uint64_t jobs, uint64_t stages_per_job, int ring_stages);

/* fsa_kernel_launch_3d on a (gx, gy, 1) grid whose CTAs form clusters of
 * (1, cluster_y, 1) (gy a multiple of cluster_y; the driver has cluster
 * launches: fsa_kernel_can_cluster). */
fsa_status fsa_kernel_launch_clusters(const fsa_kernel *k, const fsa_context *ctx, uint64_t gx, unsigned gy,
                                      unsigned cluster_y, CUstream stream, void *params);

/* Whether ctx's device and driver launch thread-block clusters (sm_90 and
 * later, cuLaunchKernelEx); 0 offline. */
int fsa_kernel_can_cluster(const fsa_context *ctx);

/* fsa_kernel_launch_3d on a (gx, gy, 1) grid. */
fsa_status fsa_kernel_launch(const fsa_kernel *k, const fsa_context *ctx, uint64_t gx, unsigned gy, CUstream stream,
                             void *params);

/* Blocks of `k` that fit on the device at once (1 offline): the grid of a
 * kernel that loops over its work items. */
fsa_status fsa_kernel_persistent_grid(int *grid_out, fsa_context *ctx, const fsa_kernel *k);

#endif
