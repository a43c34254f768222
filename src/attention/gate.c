/* NSA's gates: the plan (two kernels) and the forward and backward launches,
 * one kernel each on the caller's stream (no workspace, no allocation, no
 * host synchronization). */
#include "launch.h"

#include "base/status_internal.h"
#include "base/struct_size.h"

#include <stdlib.h>

#define STAGE_PLAN "gate-plan"
#define STAGE_FWD "gate-forward"
#define STAGE_BWD "gate-backward"

struct fsa_gate_plan {
    fsa_context *ctx; /* first: the call frame finds it here */
    fsa_gate_desc desc;
    fsa_kernel fwd, bwd; /* fn NULL offline */
};

fsa_status fsa_gate_plan_create(fsa_gate_plan **out, fsa_context *ctx, const fsa_gate_desc *desc)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_gate_plan *plan = NULL;
    fsa_gate_desc d;
    if (out != NULL) *out = NULL;
    FSA_CHECK(fsa_plan_desc_read(&d, sizeof d, out, ctx, desc, FSA_GATE_DESC_FIRST_SIZE, STAGE_PLAN, "fsa_gate_desc"));
    if (d.dtype != FSA_DTYPE_BF16 && d.dtype != FSA_DTYPE_F16)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, STAGE_PLAN, "dtype %d is neither bf16 nor f16", (int)d.dtype);
    if (d.value_dim < 16 || d.value_dim > 256 || d.value_dim % 16 != 0)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, STAGE_PLAN, "value_dim %d: a multiple of 16 from 16 to 256", d.value_dim);
    plan = calloc(1, sizeof *plan);
    FSA_CHECK_ALLOC(plan, STAGE_PLAN);
    plan->ctx = ctx;
    plan->desc = d;
    const fsa_kernel_config c = {.dtype = d.dtype, .value_dim = d.value_dim};
    FSA_CHECK(fsa_kernel_load(&plan->fwd, FSA_K_GATE_FWD, ctx, &c));
    FSA_CHECK(fsa_kernel_load(&plan->bwd, FSA_K_GATE_BWD, ctx, &c));
    *out = plan;
    return FSA_STATUS_OK;
cleanup:
    fsa_gate_plan_destroy(plan);
    return st;
}

void fsa_gate_plan_destroy(fsa_gate_plan *plan) { free(plan); }

/* The rows, the branches' outputs and gates, and the forward's o or the
 * backward's dout and wanted gradients. */
static fsa_status check(const char *stage, const fsa_gate_args *a, int dim, int backward, int *has_work)
{
    fsa_status st = FSA_STATUS_OK;
    static const char *const out_names[3] = {"out[0]", "out[1]", "out[2]"};
    static const char *const gate_names[3] = {"gate[0]", "gate[1]", "gate[2]"};
    static const char *const dout_names[3] = {"dout_branch[0]", "dout_branch[1]", "dout_branch[2]"};
    const int64_t T = a->total_tokens, H = a->num_heads;
    FSA_CHECK(fsa_check_token_count(stage, T));
    if (H < 1) FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, stage, "num_heads %d must be >= 1", a->num_heads);
    *has_work = T > 0;
    if (T == 0) goto cleanup;
    for (int x = 0; x < 3; x++) {
        FSA_CHECK(fsa_check_tensor(stage, out_names[x], &a->out[x], T, H));
        FSA_CHECK(fsa_check_float_view(stage, gate_names[x], &a->gate[x], T, H));
        if (backward && a->dout_branch[x].ptr != 0)
            FSA_CHECK(fsa_check_output(stage, dout_names[x], &a->dout_branch[x], T, H, dim));
    }
    if (!backward) FSA_CHECK(fsa_check_output(stage, "o", &a->o, T, H, dim));
    if (backward) FSA_CHECK(fsa_check_tensor(stage, "dout", &a->dout, T, H));
    if (backward) {
        const fsa_array_check dgate = {"dgate", a->dgate, 0};
        FSA_CHECK(fsa_check_arrays(stage, &dgate, 1));
    }
    if (backward) FSA_CHECK(fsa_check_float_rows(stage, "dgate", a->dgate, T, 3 * H)); /* [3][T][H]: rows of T x H */
cleanup:
    return st;
}

static fsa_status fwd_check(const void *plan, const void *call, int *has_work)
{
    return check(STAGE_FWD, call, ((const fsa_gate_plan *)plan)->desc.value_dim, 0, has_work);
}

static fsa_status bwd_check(const void *plan, const void *call, int *has_work)
{
    return check(STAGE_BWD, call, ((const fsa_gate_plan *)plan)->desc.value_dim, 1, has_work);
}

static fsa_status launch(const fsa_gate_plan *plan, const fsa_kernel *k, const fsa_gate_args *a, CUstream stream)
{
    fsa_gate_params p = {.dgate = (long long)a->dgate, .total_tokens = a->total_tokens, .heads = a->num_heads};
    for (int x = 0; x < FSA_GATE_BRANCHES; x++) {
        p.out[x] = fsa_view_of(&a->out[x]);
        p.gate[x] = fsa_view_of(&a->gate[x]);
        p.dbranch[x] = fsa_view_of(&a->dout_branch[x]);
    }
    p.o = fsa_view_of(&a->o);
    p.dout = fsa_view_of(&a->dout);
    const long long blocks = fsa_gate_blocks(a->total_tokens * a->num_heads, plan->desc.value_dim,
                                             (long long)plan->ctx->sm_count * 16);
    return fsa_kernel_launch(k, plan->ctx, (uint64_t)blocks, 1, stream, &p);
}

static fsa_status fwd_launch(const void *plan, const void *call, CUstream stream)
{
    const fsa_gate_plan *g = plan;
    return launch(g, &g->fwd, call, stream);
}

static fsa_status bwd_launch(const void *plan, const void *call, CUstream stream)
{
    const fsa_gate_plan *g = plan;
    return launch(g, &g->bwd, call, stream);
}

fsa_status fsa_gate_fwd(const fsa_gate_plan *plan, const fsa_gate_args *args, void *stream)
{
    static const fsa_call_frame frame = {STAGE_FWD,      "fsa_gate_args", sizeof(fsa_gate_args),
                                         FSA_GATE_ARGS_FIRST_SIZE, fwd_check, fwd_launch};
    fsa_gate_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}

fsa_status fsa_gate_bwd(const fsa_gate_plan *plan, const fsa_gate_args *args, void *stream)
{
    static const fsa_call_frame frame = {STAGE_BWD,      "fsa_gate_args", sizeof(fsa_gate_args),
                                         FSA_GATE_ARGS_FIRST_SIZE, bwd_check, bwd_launch};
    fsa_gate_args a;
    return fsa_call_framed(&frame, &a, plan, args, stream);
}
