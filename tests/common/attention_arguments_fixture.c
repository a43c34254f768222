/* The selected-attention argument tests' plans and arguments
 * (attention_arguments_fixture.h). */
#include "attention_arguments_fixture.h"

#include <stdio.h>
#include <stdlib.h>

#define TARGET "sm_90a"

static char *g_dir;
fsa_context *g_ctx;
fsa_plan *g_auto, *g_nsa, *g_bwd, *g_limited;

fsa_selected_attention_desc small_shape_desc(fsa_algorithm algorithm, uint64_t workspace_limit, int backward)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.head_dim = D;
    d.num_q_heads = HQ;
    d.num_kv_heads = HKV;
    d.block_size = 64;
    d.top_k = K;
    d.algorithm = algorithm;
    d.workspace_limit = workspace_limit;
    d.backward = backward;
    return d;
}

fsa_plan *plan_of(const fsa_selected_attention_desc *d)
{
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, g_ctx, d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return NULL;
    }
    return plan;
}

int attention_arguments_setup(void **state)
{
    (void)state;
    g_dir = fsa_test_mkdtemp("fsa_attention_arguments");
    if (g_dir == NULL) return -1;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = TARGET;
    o.cache_dir = g_dir;
    o.log = -1;
    if (fsa_context_create(&g_ctx, &o) != FSA_STATUS_OK) return -1;
    fsa_selected_attention_desc d = small_shape_desc(FSA_ALGORITHM_AUTO, 0, 0);
    g_auto = plan_of(&d);
    d = small_shape_desc(FSA_ALGORITHM_NSA, 0, 0);
    g_nsa = plan_of(&d);
    d = small_shape_desc(FSA_ALGORITHM_AUTO, 0, 1);
    g_bwd = plan_of(&d);
    d = small_shape_desc(FSA_ALGORITHM_FSA, 64 * 1024, 1);
    g_limited = plan_of(&d);
    return g_auto && g_nsa && g_bwd && g_limited ? 0 : -1;
}

int attention_arguments_teardown(void **state)
{
    (void)state;
    fsa_plan_destroy(g_auto);
    fsa_plan_destroy(g_nsa);
    fsa_plan_destroy(g_bwd);
    fsa_plan_destroy(g_limited);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Fake, well-aligned device addresses: an offline plan never dereferences
 * them. Packed [T, H, D] tensors; top-k as [Hkv, T, K]. */
static fsa_tensor rows(uint64_t ptr, int heads) { return (fsa_tensor){ptr, (int64_t)heads * D, D}; }

fsa_fwd_args good_fwd(const fsa_plan *plan, int64_t T)
{
    fsa_fwd_args a = FSA_FWD_ARGS_INIT;
    a.total_tokens = T;
    a.batch = 1;
    a.max_seqlen = (int)T;
    a.q = rows(0x7f0000100000ull, HQ);
    a.k = rows(0x7f0000200000ull, HKV);
    a.v = rows(0x7f0000300000ull, HKV);
    a.o = rows(0x7f0000400000ull, HQ);
    a.topk = (fsa_tensor){0x7f0000500000ull, K, T * K};
    a.cu_seqlens = 0x7f0000600000ull;
    a.lse = 0x7f0000700000ull;
    a.workspace = 0x7f0000800000ull;
    size_t ws = 0;
    assert_int_equal(fsa_plan_workspace_size(&ws, plan, T, 1), FSA_STATUS_OK);
    a.workspace_bytes = ws;
    return a;
}

fsa_bwd_args good_bwd(const fsa_plan *plan, int64_t T)
{
    const fsa_fwd_args f = good_fwd(g_auto, T);
    fsa_bwd_args a = FSA_BWD_ARGS_INIT;
    a.total_tokens = T;
    a.batch = 1;
    a.max_seqlen = (int)T;
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.topk = f.topk;
    a.dout = rows(0x7f0000900000ull, HQ);
    a.dq = rows(0x7f0000a00000ull, HQ);
    a.dk = rows(0x7f0000b00000ull, HKV);
    a.dv = rows(0x7f0000c00000ull, HKV);
    a.cu_seqlens = f.cu_seqlens;
    a.lse = f.lse;
    a.workspace = 0x7f0001000000ull;
    size_t ws = 0;
    assert_int_equal(fsa_plan_workspace_size_bwd(&ws, plan, T, 1), FSA_STATUS_OK);
    a.workspace_bytes = ws;
    return a;
}
