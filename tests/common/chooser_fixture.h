/* The fixture and helpers that the chooser tests (tests/unit/test_chooser_*.c,
 * and test_kvcache_chooser.c for its context) share, without a GPU: a plan
 * without kernels on a context whose only real part is a disk cache in a
 * fresh directory (for tuning records), and a stand-in driver whose events
 * say the NSA order is twice as fast, so that a measuring call has a known
 * winner. */
#ifndef FSA_CHOOSER_FIXTURE_H
#define FSA_CHOOSER_FIXTURE_H

#include "testing.h"

#include "attention/tuning.h"
#include "jit/context.h"

#include <stdint.h>

typedef struct fixture {
    char *root;
    fsa_context ctx;
    fsa_plan plan;
} fixture;

/* A plan of `group` query heads per KV head (2 KV heads, the default
 * descriptor otherwise, backward on) as fsa_plan_create would leave it: the
 * orders alg allows are available, the NSA-order backward only when forced or
 * tuning may pick it. */
void make_plan(fsa_plan *p, fsa_context *ctx, int group, fsa_algorithm alg, fsa_tune_level level);

/* cmocka setup and teardown: *state is a fixture for sm_90a, "NVIDIA Test
 * GPU" with 132 SMs and tuning on, its plan of group 4 (AUTO). */
int chooser_setup(void **state);
int chooser_teardown(void **state);

/* What the stand-in driver reports: whether the stream is capturing, set by
 * the test; the runs of each order (0: FSA, 1: NSA), counted by pick. */
extern int g_capturing, g_runs[2];

/* The stand-in driver: stream capture status, events and their timings only. */
const fsa_cu_api *fake_driver(void);
/* fsa_tune_pick of the forward at T tokens with runs that only count; fails
 * the test unless it succeeds. */
fsa_variant pick(fsa_plan *plan, int64_t T, int *measured);
/* Where the record of op's bucket of T lies in the plan's cache; the caller frees it. */
char *record_path(const fsa_plan *plan, fsa_op_kind op, int64_t T);
int record_exists(const char *path);

#endif
