/* Paged-cache plans inside the library: the plan, its launch, and its split
 * count as a variant of the one chooser (choose.h). kvcache.c: descriptor,
 * workspace, arguments and launch; kvcache_tune.c: split candidates, the
 * heuristic, the tuning record and measuring on scratch inputs. */
#ifndef FSA_ATTENTION_KVCACHE_H
#define FSA_ATTENTION_KVCACHE_H

#include "launch.h"

#include "jit/kernel_key.h"

/* The split count of a plan. The candidates are share counts of a one-tile
 * sequence; the chosen one is the same for every sequence of every call (it
 * is the plan's, never the batch's), so batch invariance holds whichever it is.
 * slot: 0 = no record, 1 + the recorded candidate's index, or
 * FSA_TUNE_SLOT_BUSY while a call measures (or after measuring failed:
 * the heuristic stays). */
typedef struct fsa_kvc_tuning {
    fsa_tune_level level;
    fsa_candidates c;
    int heuristic; /* the share count without measuring */
    atomic_int slot;
    char names[FSA_MAX_VARIANTS][16]; /* the candidates' names, for fsa_plan_choice */
    char heuristic_name[16];
} fsa_kvc_tuning;

struct fsa_kvcache_plan {
    fsa_context *ctx;
    fsa_kvcache_desc desc;
    int group, tile_tokens;
    int max_splits; /* the largest share count any variant takes: sizes the workspace */
    int resident;   /* CTAs of the attention kernel the device holds at once (1 offline) */
    int cluster;    /* split sequences with a CTA per share may merge through a cluster */
    int tma;        /* the kernel copies page boxes by tensor maps (sm_90a; kvcache.c, tma_wanted) */
    int layout;     /* the kernel's shared-memory layout (FSA_KVC_LAYOUT_*: fsa_kvc_layout_fit; 0 the default) */
    int ctas;       /* CTAs per split (sequence, KV head) when > 0 (FSA_KVC_CTAS), else the wave rule */
    int experiment; /* measurement: FSA_KVC_EXPERIMENT, bits of kvc_fwd.cu's EXPERIMENT (tensor-map kernels) */
    unsigned long long stamps; /* debug: FSA_KVC_STAMPS, a zeroed device buffer for the stamped kernel
                                  (kvc_params.cuh, tensor-map kernels only); 0: the normal kernel */
    int deep;          /* the deep-ring kernel is loaded (fsa_layout.cuh FSA_KVC_KERNEL_DEEP; kvcache.c deep_wanted) */
    int resident_deep; /* CTAs of it the device holds at once */
    float scale;
    fsa_kernel fwd;
    fsa_kernel fwd_deep; /* the same kernel with FSA_KVC_DEEP_STAGES stage buffers (when deep) */
    fsa_kvc_tuning tune;
    struct fsa_metadata_checker *checker; /* check mode only (kvcache_check.h) */
};

/* The caches' tensor maps of a call (tensor-map plans; otherwise nothing):
 * host work only, made before the call enqueues anything, so that a cache
 * layout the driver cannot map is refused first. Inside the plan's context. */
typedef struct fsa_kvc_maps {
    fsa_kvc_tensor_map k, v;
    long long k_token_dim, v_token_dim;
} fsa_kvc_maps;
fsa_status fsa_kvc_encode_maps(fsa_kvc_maps *maps, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a);

/* Launches one call with `splits` shares per one-tile sequence (at most
 * max_splits), arguments already checked and `maps` encoded from them;
 * inside the plan's context. */
fsa_status fsa_kvc_launch(const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, const fsa_kvc_maps *maps,
                          int splits, CUstream stream);

/* CTAs per (split sequence, KV head) of a call of batch sequences split in
 * splits shares: a divisor of splits, hkv times it at most
 * FSA_GRID_MAX_ROWS (the grid's rows are (KV head, CTA of its pair)). */
int fsa_kvc_ctas_per_pair(const fsa_kvcache_plan *plan, int batch, int splits);

/* Bytes of workspace a call needs (sized for max_batch and max_splits), and
 * of the counters it starts with (zero between calls). */
size_t fsa_kvc_workspace_bytes(const fsa_kvcache_plan *plan);
size_t fsa_kvc_counter_bytes(const fsa_kvcache_plan *plan);

/* The key of the plan's tuning record (caller frees with fsa_key_free). */
fsa_status fsa_kvc_record_key(fsa_kernel_key *out, const fsa_kvcache_plan *plan);

/* Candidates, heuristic and the record from the disk cache; sets max_splits.
 * At plan creation, before the workspace size is known. */
void fsa_kvc_tuning_init(fsa_kvcache_plan *plan);

/* The split count of a call: the record's, else the heuristic's. */
typedef struct fsa_kvc_choice {
    int splits;
    const char *variant;
    fsa_choice_source source;
    const char *reason;
    int may_measure;
} fsa_kvc_choice;
void fsa_kvc_choose(fsa_kvc_choice *out, const fsa_kvcache_plan *plan);

/* Measures the candidates on scratch inputs on `stream` when it should
 * (tuning on, several candidates, no record, a device that can time, the
 * stream not being captured), records the winner and says so in *measured.
 * Blocks (allocation, synchronization); inside the plan's context. A failure
 * to measure (out of memory, say) leaves the heuristic for the plan's life and
 * returns its status. */
fsa_status fsa_kvc_tune(int *measured, const fsa_kvcache_plan *plan, CUstream stream);

#endif
