/* What the selected-attention argument tests (tests/nvrtc/test_attention_*.c)
 * share, without a GPU: offline sm_90a plans of one small shape, made once
 * per executable into a fresh cache directory (their kernels compile with
 * NVRTC), arguments with fake, well-aligned device addresses that pass every
 * check (so a call ends with FSA_STATUS_NO_DEVICE), and the status checks. */
#ifndef FSA_ATTENTION_ARGUMENTS_FIXTURE_H
#define FSA_ATTENTION_ARGUMENTS_FIXTURE_H

#include "testing.h"

#include <stdint.h>

#define HQ 2 /* the small shape: D 64, G 2, blocks of 64, top-k 4 */
#define HKV 1
#define D 64
#define K 4

/* The offline context and its plans of the small shape: the forward with
 * AUTO and with NSA, the backward with AUTO, and the backward with FSA under
 * a 64 KiB workspace limit. */
extern fsa_context *g_ctx;
extern fsa_plan *g_auto, *g_nsa, *g_bwd, *g_limited;

/* EXPECT_STATUS (testing.h) of a forward and a backward call. */
#define EXPECT_FWD(want, plan, args) EXPECT_STATUS(want, fsa_selected_attention_fwd((plan), (args), NULL))
#define EXPECT_BWD(want, plan, args) EXPECT_STATUS(want, fsa_selected_attention_bwd((plan), (args), NULL))

/* The small shape's descriptor. */
fsa_selected_attention_desc small_shape_desc(fsa_algorithm algorithm, uint64_t workspace_limit, int backward);
/* A plan of g_ctx, or NULL (the error on stderr). */
fsa_plan *plan_of(const fsa_selected_attention_desc *d);

/* cmocka group setup and teardown: the context and plans above. */
int attention_arguments_setup(void **state);
int attention_arguments_teardown(void **state);

/* Arguments for T tokens in one sequence that pass every check, with the
 * workspace the plan asks for. */
fsa_fwd_args good_fwd(const fsa_plan *plan, int64_t T);
fsa_bwd_args good_bwd(const fsa_plan *plan, int64_t T);

#endif
