/* Tuning records and measuring (format: cache/README.md, "Tuning records").
 *
 * A record holds the winning variant of one operation in one bucket: tokens
 * rounded up to a power of two, G, D, BK, K, dtype, target, GPU name and SM
 * count, library and template versions, and the candidate list. It is a disk
 * cache entry (<name>.<hex>.tune) whose key text is the bucket and whose
 * payload is the record text, so it gets the cubins' atomic publish and
 * validation. */
#ifndef FSA_ATTENTION_TUNING_H
#define FSA_ATTENTION_TUNING_H

#include "plan.h"

#include "jit/kernel_key.h"

#include <stddef.h>

/* At most this much wall time per new bucket (plus one timed run of each
 * candidate when a single run takes longer), and this many timed runs. */
#define FSA_TUNE_BUDGET_MS 300.0
#define FSA_TUNE_MAX_REPEATS 5

/* A record key: the library and template versions, the operation, `shape`
 * (lines "<field> <value>\n" naming the bucket), the target, GPU name and SM
 * count, and the candidates; the file name is "tune_<op>_<name>". Caller
 * frees with fsa_key_free. */
fsa_status fsa_tune_key_build(fsa_kernel_key *out, const fsa_context *ctx, fsa_op_kind op, const char *shape,
                              const char *name, const fsa_candidates *c);

/* The record key of an operation's bucket on a plan (caller frees with
 * fsa_key_free). */
fsa_status fsa_tune_record_key(fsa_kernel_key *out, const fsa_plan *plan, fsa_op_kind op, int bucket);

/* The record text for a winner among the candidates with their times
 * (milliseconds, NULL when not measured). Caller frees; NULL when out of memory. */
char *fsa_tune_record_text(fsa_op_kind op, const fsa_candidates *c, int winner, const double *ms);

/* The candidate a record text names: 1 + its index, or 0 when the text is
 * not a whole record of this operation naming one of the candidates. */
int fsa_tune_record_parse(const char *text, size_t len, fsa_op_kind op, const fsa_candidates *c);

/* The record under `key` in the context's disk cache: 1 + the index of the
 * candidate it names, or 0 (none, or damaged or foreign: counted as a corrupt
 * entry and logged). */
int fsa_tune_read(fsa_context *ctx, const fsa_kernel_key *key, fsa_op_kind op, const fsa_candidates *c);

/* Stores a winner under `key` (atomic publish); a cache that cannot take it
 * only costs a re-measure in the next process. */
void fsa_tune_publish(fsa_context *ctx, const fsa_kernel_key *key, fsa_op_kind op, const fsa_candidates *c,
                      int winner, const double *ms);

/* Whether the driver has what timing needs (events). */
int fsa_tune_can_time(const fsa_cu_api *cu);

/* Run i of n measured runs, on the stream. */
typedef fsa_status (*fsa_tune_run_fn)(void *arg, int i, CUstream stream);

/* Times runs 0..n-1: one untimed run each (first-launch costs), then up to
 * FSA_TUNE_MAX_REPEATS timed rounds while FSA_TUNE_BUDGET_MS lasts; ms[i]
 * gets run i's fastest time. *timed_out is 0 when the events failed (then
 * nothing should be recorded). A run's error is returned. */
fsa_status fsa_tune_time(double *ms, int *timed_out, const fsa_cu_api *cu, int n, fsa_tune_run_fn run, void *arg,
                         CUstream stream);

/* Fills the plan's record slots from the disk cache: every bucket of every
 * operation with more than one candidate. Not with FSA_TUNE=force (each plan
 * measures again), nor without a disk cache. A bad record is skipped (and
 * counted as a corrupt entry); nothing here fails the plan. */
void fsa_tune_load_records(fsa_plan *plan);

/* Runs one candidate of a call on the stream. */
typedef fsa_status (*fsa_variant_run_fn)(const void *call, const fsa_plan *plan, const fsa_variant *v,
                                         CUstream stream);

/* How many measurements fsa_tune_pick has recorded in the calling thread: fsa_plan_tune tells its own
 * measurement from another thread's by the count before and after its calls. */
unsigned long fsa_tune_measured_in_this_thread(void);

/* The variant a call runs. When fsa_tune_should_measure says so (a device,
 * tuning on, no record for the bucket, the stream not being captured), times
 * every candidate with `run` on the stream (the call's own inputs, outputs
 * and workspace: the outputs are written again by the winner's run), stores
 * the winner in the plan and the disk cache, and returns it; otherwise the
 * choice of fsa_choose. *measured_out (may be NULL) says whether it measured.
 * A launch error is returned; a timing failure (no events) only means no
 * record. Must run inside the plan's context. */
fsa_status fsa_tune_pick(fsa_variant *out, int *measured_out, const fsa_plan *plan, fsa_op_kind op,
                         int64_t total_tokens, const void *call, fsa_variant_run_fn run, CUstream stream);

/* Launches a call: the variant of `chosen` order, or with `tune` the one
 * fsa_tune_pick returns (measuring first when it should). */
fsa_status fsa_tune_launch(const void *call, const fsa_plan *plan, fsa_op_kind op, int64_t total_tokens,
                           fsa_algorithm chosen, int tune, fsa_variant_run_fn run, CUstream stream);

#endif
