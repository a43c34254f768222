/* The paged-KV-cache GPU tests' shared fixture (tests/gpu/test_kvcache*.c):
 * the table of cases, a context on a kernel cache of the run, the plans of
 * the cases made on first use, and one checked call against the float64
 * reference. */
#ifndef FSA_KVCACHE_FIXTURE_H
#define FSA_KVCACHE_FIXTURE_H

#include "kvcache_problem.h"

enum { KVC_FIXTURE_MAX_BATCH = KVC_MAX_SEQS, KVC_FIXTURE_MAX_TOKENS = 4096 };

/* Every page size; decode, speculative and prefill lengths; the top-k
 * layouts; group sizes 1 to 64; value head dims (the dv column). Tests name
 * cases by index (kvcache_fixture.c lists them). */
extern const kvc_case kvc_cases[];
extern const size_t kvc_n_cases;
extern fsa_context *kvc_ctx;

/* The plan of case i, made on first use (a filtered run compiles only its own). */
fsa_kvcache_plan *kvc_plan_of(size_t i);
/* o and lse of out against p's reference (o relative error over the tensor
 * and per (token, head) row, lse per row; rows that see nothing: o 0, lse
 * -inf), and o's padding still poisoned. */
void kvc_check_against_reference(const kvc_outputs *out, const kvc_problem *p, const char *name);
/* One call on poisoned outputs, checked against the reference; the outputs kept in *keep when given. */
void kvc_run_and_check(const fsa_kvcache_plan *plan, kvc_problem *p, const char *name, kvc_outputs *keep);

/* cmocka group setup and teardown: the context (exit 77 without a GPU) on a
 * fresh cache, or the one FSA_TEST_CACHE_DIR names (kept). */
int kvc_fixture_setup(void **state);
int kvc_fixture_teardown(void **state);

#endif
