/* Check mode for compressed attention, on the GPU: offsets that break the
 * contract (cu_seqlens or cu_seqlens_c not starting at 0, falling or not
 * ending at T / Tc; a sequence whose compressed-token count is not what its
 * length makes with the plan's kernel size and stride) are
 * FSA_STATUS_INVALID_ARGUMENT saying what and where, in the forward and the
 * backward, and nothing is written; valid offsets give the very bits of a
 * plain plan; without check mode the same bad offsets run (the kernels clamp
 * every bound; compute-sanitizer checks the accesses when it runs this
 * test). */
#include "attention_problem.h"
#include "cmp_problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sequence 1 is shorter than the kernel: no compressed token. */
static const cmp_case g_case = {"bf16_g2_l32_d16", FSA_DTYPE_BF16, 64, 64, 4, 2, 32, 16, 64, 4, 1, 2,
                                {300, 20, 129}, 3, 1, 0, 0, 1};

static fsa_test_contexts g_ctx;
static fsa_compressed_plan *g_plain, *g_check;

/* A call's device buffers: inputs, forward outputs, gradients, workspace. */
typedef struct call {
    cmp_problem p;
    int32_t cu[8], cu_c[8]; /* the offsets the call passes (p's, unless a test changes them) */
    uint64_t q, k, v, dout, o, lse, topk, dq, dk, dv, ws, d_cu, d_cu_c;
    size_t o_bytes, lse_bytes, topk_bytes, dq_bytes, dk_bytes, dv_bytes, ws_bytes;
} call;

static uint64_t upload_rows(const float *x, int rows, int heads, int dim)
{
    return upload_strided(x, rows, heads, dim, (int64_t)heads * dim, dim, g_case.dtype);
}

static void call_make(call *c)
{
    const cmp_case *k = &g_case;
    memset(c, 0, sizeof *c);
    cmp_problem_make(&c->p, k, 0xc4ec);
    const cmp_problem *p = &c->p;
    memcpy(c->cu, p->cu, sizeof c->cu);
    memcpy(c->cu_c, p->cu_c, sizeof c->cu_c);
    c->q = upload_rows(p->q, p->T, k->hq, k->dk);
    c->k = upload_rows(p->k, p->Tc, k->hkv, k->dk);
    c->v = upload_rows(p->v, p->Tc, k->hkv, k->dv);
    c->dout = upload_rows(p->q, p->T, k->hq, k->dv); /* any values: Dv = Dk here */
    c->o_bytes = (size_t)p->T * k->hq * k->dv * 2;
    c->lse_bytes = (size_t)k->hq * p->T * 4;
    c->topk_bytes = (size_t)p->T * k->hkv * k->k * 4;
    c->dq_bytes = (size_t)p->T * k->hq * k->dk * 2;
    c->dk_bytes = (size_t)p->Tc * k->hkv * k->dk * 2;
    c->dv_bytes = (size_t)p->Tc * k->hkv * k->dv * 2;
    assert_int_equal(fsa_compressed_plan_workspace_size_bwd(&c->ws_bytes, g_plain, p->T, p->B), FSA_STATUS_OK);
    c->o = fsa_test_dalloc(c->o_bytes);
    c->lse = fsa_test_dalloc(c->lse_bytes);
    c->topk = fsa_test_dalloc(c->topk_bytes);
    c->dq = fsa_test_dalloc(c->dq_bytes);
    c->dk = fsa_test_dalloc(c->dk_bytes);
    c->dv = fsa_test_dalloc(c->dv_bytes);
    c->ws = fsa_test_dalloc(c->ws_bytes);
    c->d_cu = fsa_test_dalloc(sizeof c->cu);
    c->d_cu_c = fsa_test_dalloc(sizeof c->cu_c);
}

static void call_free(call *c)
{
    const uint64_t all[] = {c->q, c->k, c->v, c->dout, c->o, c->lse, c->topk, c->dq, c->dk, c->dv, c->ws, c->d_cu,
                            c->d_cu_c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsa_test_dfree(all[i]);
    cmp_problem_free(&c->p);
}

/* The call's offsets to the device, its outputs poisoned. */
static void prepare(call *c, int forward_outputs)
{
    fsa_test_h2d(c->d_cu, c->cu, sizeof c->cu);
    fsa_test_h2d(c->d_cu_c, c->cu_c, sizeof c->cu_c);
    if (forward_outputs) {
        fsa_test_dfill(c->o, 0xff, c->o_bytes);
        fsa_test_dfill(c->lse, 0xff, c->lse_bytes);
        fsa_test_dfill(c->topk, 0x7f, c->topk_bytes);
    }
    fsa_test_dfill(c->dq, 0xff, c->dq_bytes);
    fsa_test_dfill(c->dk, 0xff, c->dk_bytes);
    fsa_test_dfill(c->dv, 0xff, c->dv_bytes);
}

static fsa_tensor rows_of(uint64_t ptr, int64_t heads, int64_t dim) { return (fsa_tensor){ptr, heads * dim, dim}; }

static fsa_status forward(const fsa_compressed_plan *plan, call *c)
{
    const cmp_case *k = &g_case;
    prepare(c, 1);
    fsa_compressed_fwd_args a = FSA_COMPRESSED_FWD_ARGS_INIT;
    a.total_tokens = c->p.T, a.total_compressed = c->p.Tc, a.batch = c->p.B, a.lse = c->lse;
    a.q = rows_of(c->q, k->hq, k->dk), a.k = rows_of(c->k, k->hkv, k->dk), a.v = rows_of(c->v, k->hkv, k->dv);
    a.o = rows_of(c->o, k->hq, k->dv), a.cu_seqlens = c->d_cu, a.cu_seqlens_c = c->d_cu_c;
    a.topk = rows_of(c->topk, k->hkv, k->k);
    const fsa_status st = fsa_compressed_attention_fwd(plan, &a, NULL);
    fsa_test_sync(); /* also: nothing faulted */
    return st;
}

/* The backward of the o and lse in c (written by a forward with good offsets). */
static fsa_status backward(const fsa_compressed_plan *plan, call *c)
{
    const cmp_case *k = &g_case;
    prepare(c, 0);
    fsa_compressed_bwd_args a = FSA_COMPRESSED_BWD_ARGS_INIT;
    a.total_tokens = c->p.T, a.total_compressed = c->p.Tc, a.batch = c->p.B, a.lse = c->lse;
    a.q = rows_of(c->q, k->hq, k->dk), a.k = rows_of(c->k, k->hkv, k->dk), a.v = rows_of(c->v, k->hkv, k->dv);
    a.o = rows_of(c->o, k->hq, k->dv), a.cu_seqlens = c->d_cu, a.cu_seqlens_c = c->d_cu_c;
    a.dout = rows_of(c->dout, k->hq, k->dv), a.dq = rows_of(c->dq, k->hq, k->dk);
    a.dk = rows_of(c->dk, k->hkv, k->dk), a.dv = rows_of(c->dv, k->hkv, k->dv);
    a.workspace = c->ws, a.workspace_bytes = c->ws_bytes;
    const fsa_status st = fsa_compressed_attention_bwd(plan, &a, NULL);
    fsa_test_sync();
    return st;
}

/* Bad offsets in c: refused by the check-mode forward and backward with a
 * message naming `what`, their outputs untouched; the plain plan runs both. */
static void expect_refused_only_in_check_mode(call *c, const char *what)
{
    int32_t cu[8], cu_c[8];
    memcpy(cu, c->cu, sizeof cu);
    memcpy(cu_c, c->cu_c, sizeof cu_c);
    assert_int_equal(forward(g_check, c), FSA_STATUS_INVALID_ARGUMENT);
    fsa_test_expect_error("compressed-forward", what);
    fsa_test_assert_untouched(c->o, c->o_bytes, 0xff);
    fsa_test_assert_untouched(c->lse, c->lse_bytes, 0xff);
    fsa_test_assert_untouched(c->topk, c->topk_bytes, 0x7f);

    /* The backward needs o and lse: a forward with the good offsets first. */
    memcpy(c->cu, c->p.cu, sizeof c->cu);
    memcpy(c->cu_c, c->p.cu_c, sizeof c->cu_c);
    assert_int_equal(forward(g_plain, c), FSA_STATUS_OK);
    memcpy(c->cu, cu, sizeof cu);
    memcpy(c->cu_c, cu_c, sizeof cu_c);
    assert_int_equal(backward(g_check, c), FSA_STATUS_INVALID_ARGUMENT);
    fsa_test_expect_error("compressed-backward", what);
    const uint64_t grads[3] = {c->dq, c->dk, c->dv};
    const size_t bytes[3] = {c->dq_bytes, c->dk_bytes, c->dv_bytes};
    for (int i = 0; i < 3; i++) fsa_test_assert_untouched(grads[i], bytes[i], 0xff);

    assert_int_equal(backward(g_plain, c), FSA_STATUS_OK);
    assert_int_equal(forward(g_plain, c), FSA_STATUS_OK);
}

static void test_valid_offsets_pass_and_give_the_bits_of_a_plain_plan(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    const uint64_t dev[6] = {c.o, c.lse, c.topk, c.dq, c.dk, c.dv};
    const size_t bytes[6] = {c.o_bytes, c.lse_bytes, c.topk_bytes, c.dq_bytes, c.dk_bytes, c.dv_bytes};
    unsigned char *plain[6], *checked[6];
    const fsa_compressed_plan *plans[2] = {g_plain, g_check};
    for (int run = 0; run < 2; run++) {
        if (forward(plans[run], &c) != FSA_STATUS_OK) fail_msg("forward refused: %s", fsa_last_error());
        if (backward(plans[run], &c) != FSA_STATUS_OK) fail_msg("backward refused: %s", fsa_last_error());
        for (int i = 0; i < 6; i++) (run ? checked : plain)[i] = fsa_test_image(dev[i], bytes[i]);
    }
    for (int i = 0; i < 6; i++) {
        assert_memory_equal(plain[i], checked[i], bytes[i]);
        free(plain[i]);
        free(checked[i]);
    }
    /* The result is the reference's: the check changed nothing it should not. */
    float *o = malloc((size_t)c.p.T * g_case.hq * g_case.dv * sizeof *o);
    uint16_t *o_img = malloc(c.o_bytes);
    assert_true(o && o_img);
    download_strided(o, o_img, c.o, c.p.T, g_case.hq, g_case.dv, (int64_t)g_case.hq * g_case.dv, g_case.dv,
                     g_case.dtype);
    const double err = fsa_rel_error(o, c.p.o_ref, (size_t)c.p.T * g_case.hq * g_case.dv);
    print_message("  o rel err against the reference %.3e\n", err);
    assert_true(err < 1e-2);
    free(o);
    free(o_img);
    call_free(&c);
}

static void test_query_offsets_that_break_the_contract_are_refused(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    c.cu[0] = 1;
    expect_refused_only_in_check_mode(&c, "cu_seqlens[0] is not 0");
    call_free(&c);

    call_make(&c);
    c.cu[2] = c.cu[1] - 1; /* falls after sequence 1 */
    expect_refused_only_in_check_mode(&c, "cu_seqlens falls (first at sequence 1)");
    call_free(&c);

    call_make(&c);
    c.cu[3] = c.p.T - 1;
    expect_refused_only_in_check_mode(&c, "cu_seqlens does not end at total_tokens");
    call_free(&c);
}

static void test_compressed_offsets_that_break_the_contract_are_refused(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    c.cu_c[0] = -1;
    expect_refused_only_in_check_mode(&c, "cu_seqlens_c[0] is not 0");
    call_free(&c);

    call_make(&c);
    c.cu_c[1] = c.p.Tc + 3; /* past Tc, then falling */
    expect_refused_only_in_check_mode(&c, "cu_seqlens_c falls");
    call_free(&c);

    call_make(&c);
    c.cu_c[3] = c.p.Tc + 1;
    expect_refused_only_in_check_mode(&c, "cu_seqlens_c does not end at total_compressed");
    call_free(&c);
}

static void test_counts_other_than_the_length_makes_are_refused(void **state)
{
    (void)state;
    const char *rule = "cu_seqlens_c gives a sequence a compressed-token count other than max(0, (length - "
                       "kernel_size) / stride + 1) (first at sequence ";
    char want[200];
    call c;
    /* One compressed token moved from sequence 0 to sequence 1 (20 tokens: none of its own). */
    call_make(&c);
    c.cu_c[1] -= 1;
    snprintf(want, sizeof want, "%s0)", rule);
    expect_refused_only_in_check_mode(&c, want);
    call_free(&c);

    /* Query offsets that still rise to T but give sequence 1 a compressed token's worth of positions more:
     * 36 positions make one compressed token, and cu_seqlens_c gives it none. */
    call_make(&c);
    c.cu[2] += 16;
    snprintf(want, sizeof want, "%s1)", rule);
    expect_refused_only_in_check_mode(&c, want);
    call_free(&c);

}

static int setup(void **state)
{
    (void)state;
    fsa_test_contexts_make(&g_ctx, "cmp-check-cache");
    fsa_compressed_attention_desc d = cmp_desc_of(&g_case);
    d.backward = 1;
    if (fsa_compressed_plan_create(&g_plain, g_ctx.plain, &d) != FSA_STATUS_OK ||
        fsa_compressed_plan_create(&g_check, g_ctx.check, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_compressed_plan_destroy(g_check);
    fsa_compressed_plan_destroy(g_plain);
    fsa_test_contexts_free(&g_ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_offsets_pass_and_give_the_bits_of_a_plain_plan),
        cmocka_unit_test(test_query_offsets_that_break_the_contract_are_refused),
        cmocka_unit_test(test_compressed_offsets_that_break_the_contract_are_refused),
        cmocka_unit_test(test_counts_other_than_the_length_makes_are_refused),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
