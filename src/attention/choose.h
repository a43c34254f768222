/* Choosing a variant per call: one chooser for every operation. Each
 * operation lists the variants a plan can take (its candidates); a call takes
 * the variant of its token bucket's tuning record when the plan has one,
 * else the heuristic's. choose.c: candidates, buckets, heuristic, the
 * decision to measure; tuning.c: records (key, text, disk) and measuring. */
#ifndef FSA_ATTENTION_CHOOSE_H
#define FSA_ATTENTION_CHOOSE_H

#include "fsa.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct fsa_plan fsa_plan;

/* The operations of a selected-attention plan (FSA_OP_KINDS of them), and
 * the paged-cache plan's one choice (its split count, a record per plan). */
typedef enum fsa_op_kind { FSA_OP_FWD = 0, FSA_OP_BWD = 1, FSA_OP_KINDS, FSA_OP_KVC = FSA_OP_KINDS } fsa_op_kind;

/* One launch variant of an operation. Kernels with more launch parameters
 * append fields here (tile shape, pipeline stages, split counts of the
 * KV-cache path); 0 means the kernel's only value, and a field that is not 0
 * becomes part of the variant's name, so records stay readable and distinct. */
typedef struct fsa_variant {
    fsa_algorithm order; /* loop order; backward: the order dq is computed in; AUTO: the
                          * operation has one loop order (the paged cache's, named "kvc") */
    int tile_rows;       /* 0: the kernel's fixed tile */
    int stages;          /* 0: the kernel's fixed pipeline */
    int splits;          /* KV-cache path: shares of a one-tile sequence; 0 elsewhere */
} fsa_variant;

#define FSA_MAX_VARIANTS 8

typedef struct fsa_candidates {
    int n;
    fsa_variant v[FSA_MAX_VARIANTS];
} fsa_candidates;

/* Token buckets: T rounded up to a power of two, 2^0 .. 2^31 (T = 0 goes
 * with T = 1). */
#define FSA_TUNE_BUCKETS 32
int fsa_tune_bucket(int64_t total_tokens);
int64_t fsa_tune_bucket_tokens(int bucket);

/* The resolved tuning mode of a context (its `tune`: the option, else
 * $FSA_TUNE, else off; jit/context.c). */
typedef enum fsa_tune_level { FSA_TUNE_LEVEL_OFF = 0, FSA_TUNE_LEVEL_ON = 1, FSA_TUNE_LEVEL_FORCE = 2 } fsa_tune_level;

/* A plan's records: per operation and bucket, 0 = none, 1 + the index of the
 * recorded candidate, or FSA_TUNE_SLOT_BUSY while one call measures (other
 * calls take the heuristic meanwhile). Written once per bucket. */
#define FSA_TUNE_SLOT_BUSY (-1)
typedef struct fsa_tune_state {
    fsa_tune_level level;
    atomic_int slot[FSA_OP_KINDS][FSA_TUNE_BUCKETS];
} fsa_tune_state;

/* "fsa", "nsa"; with tile, stages or splits set, e.g. "nsa.p3", "kvc.s4".
 * Writes at most `n` bytes. */
void fsa_variant_name(char *out, size_t n, const fsa_variant *v);
/* A static name for the plain loop orders ("fsa", "nsa"). */
const char *fsa_order_name(fsa_algorithm order);

/* The variants a plan can take for an operation, in a fixed order: the
 * descriptor's algorithm when forced, else every loop order whose kernels
 * fit and are loaded. */
void fsa_candidates_of(fsa_candidates *out, const fsa_plan *plan, fsa_op_kind op);

/* The heuristic: the variant without measuring, and why. */
fsa_variant fsa_heuristic(const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens, fsa_choice_source *source,
                          const char **reason);

/* The choice of a call: the bucket's record, else the heuristic. */
typedef struct fsa_choice {
    fsa_variant variant;
    fsa_choice_source source;
    const char *reason;
    int bucket;
    int candidates;
    int may_measure; /* tuning on, several candidates, no record and nobody measuring */
    int record_pending; /* tuning on, several candidates, no record yet (one may be measuring): a later call may
                           take any candidate */
} fsa_choice;

void fsa_choose(fsa_choice *out, const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens);

/* Whether a call measures, from what is known at launch: the context's level,
 * whether the bucket has a record, the candidates, whether there is a device
 * and whether the stream is being captured (1), is not (0) or cannot be told
 * (-1). Only an uncaptured stream with tuning on and no record measures. */
int fsa_tune_should_measure(fsa_tune_level level, int have_record, int candidates, int has_device, int capturing);

#endif
