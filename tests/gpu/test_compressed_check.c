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
#include "check_calls.h"
#include "cmp_problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sequence 1 is shorter than the kernel: no compressed token. */
static const cmp_case g_case = {"bf16_g2_l32_d16", FSA_DTYPE_BF16, 64, 64, 4, 2, 32, 16, 64, 4, 1, 2,
                                {300, 20, 129}, 3, 1, 0, 0, 1};

static fsa_test_contexts g_ctx;
static fsa_compressed_plan *g_plans[2]; /* plain, check mode */

/* A call: the problem, the offsets it passes, its device buffers. */
typedef struct call {
    check_call base;
    cmp_problem p;
    int32_t good[16], offsets[16]; /* cu_seqlens [8], then cu_seqlens_c [8] */
    int32_t *cu, *cu_c;            /* the two halves of offsets */
    uint64_t q, k, v, dout, o, lse, topk, dq, dk, dv, ws, d_cu, d_cu_c;
    size_t ws_bytes;
} call;

static uint64_t upload_rows(const float *x, int rows, int heads, int dim)
{
    return upload_strided(x, rows, heads, dim, (int64_t)heads * dim, dim, g_case.dtype);
}

static fsa_tensor rows_of(uint64_t ptr, int64_t heads, int64_t dim) { return (fsa_tensor){ptr, heads * dim, dim}; }

/* The inputs both passes take, into an args struct of either. */
#define SET_INPUTS(a, c, k)                                                                                 \
    ((a).total_tokens = (c)->p.T, (a).total_compressed = (c)->p.Tc, (a).batch = (c)->p.B, (a).lse = (c)->lse, \
     (a).cu_seqlens = (c)->d_cu, (a).cu_seqlens_c = (c)->d_cu_c, (a).q = rows_of((c)->q, (k)->hq, (k)->dk),   \
     (a).k = rows_of((c)->k, (k)->hkv, (k)->dk), (a).v = rows_of((c)->v, (k)->hkv, (k)->dv),                  \
     (a).o = rows_of((c)->o, (k)->hq, (k)->dv))

static fsa_status run(void *self, int pass, int check)
{
    call *c = self;
    const cmp_case *k = &g_case;
    fsa_test_h2d(c->d_cu, c->cu, 32);
    fsa_test_h2d(c->d_cu_c, c->cu_c, 32);
    fsa_status st;
    if (pass == CHECK_FORWARD) {
        fsa_compressed_fwd_args a = FSA_COMPRESSED_FWD_ARGS_INIT;
        SET_INPUTS(a, c, k);
        a.topk = rows_of(c->topk, k->hkv, k->k);
        st = fsa_compressed_attention_fwd(g_plans[check], &a, NULL);
    } else {
        fsa_compressed_bwd_args a = FSA_COMPRESSED_BWD_ARGS_INIT;
        SET_INPUTS(a, c, k);
        a.dout = rows_of(c->dout, k->hq, k->dv), a.dq = rows_of(c->dq, k->hq, k->dk);
        a.dk = rows_of(c->dk, k->hkv, k->dk), a.dv = rows_of(c->dv, k->hkv, k->dv);
        a.workspace = c->ws, a.workspace_bytes = c->ws_bytes;
        st = fsa_compressed_attention_bwd(g_plans[check], &a, NULL);
    }
    fsa_test_sync(); /* also: nothing faulted */
    return st;
}

static void call_make(call *c)
{
    const cmp_case *k = &g_case;
    memset(c, 0, sizeof *c);
    cmp_problem_make(&c->p, k, 0xc4ec);
    const cmp_problem *p = &c->p;
    memcpy(c->good, p->cu, 32);
    memcpy(c->good + 8, p->cu_c, 32);
    memcpy(c->offsets, c->good, sizeof c->offsets);
    c->cu = c->offsets, c->cu_c = c->offsets + 8;
    c->q = upload_rows(p->q, p->T, k->hq, k->dk);
    c->k = upload_rows(p->k, p->Tc, k->hkv, k->dk);
    c->v = upload_rows(p->v, p->Tc, k->hkv, k->dv);
    c->dout = upload_rows(p->q, p->T, k->hq, k->dv); /* any values: Dv = Dk here */
    assert_int_equal(fsa_compressed_plan_workspace_size_bwd(&c->ws_bytes, g_plans[0], p->T, p->B), FSA_STATUS_OK);
    c->ws = fsa_test_dalloc(c->ws_bytes);
    c->d_cu = fsa_test_dalloc(32);
    c->d_cu_c = fsa_test_dalloc(32);
    const size_t T = (size_t)p->T, Tc = (size_t)p->Tc;
    const check_output outs[2][3] = {
        {{0, T * k->hq * k->dv * 2, 0xff}, {0, (size_t)k->hq * T * 4, 0xff}, {0, T * k->hkv * k->k * 4, 0x7f}},
        {{0, T * k->hq * k->dk * 2, 0xff}, {0, Tc * k->hkv * k->dk * 2, 0xff}, {0, Tc * k->hkv * k->dv * 2, 0xff}}};
    uint64_t *ptrs[2][3] = {{&c->o, &c->lse, &c->topk}, {&c->dq, &c->dk, &c->dv}};
    c->base = (check_call){.self = c, .run = run, .stage = {"compressed-forward", "compressed-backward"},
                           .offsets = c->offsets, .good = c->good, .offsets_bytes = sizeof c->offsets};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 3; i++) {
            c->base.out[pass][i] = outs[pass][i];
            *ptrs[pass][i] = c->base.out[pass][i].ptr = fsa_test_dalloc(outs[pass][i].bytes);
        }
}

static void call_free(call *c)
{
    const uint64_t all[] = {c->q, c->k, c->v, c->dout, c->o, c->lse, c->topk, c->dq, c->dk, c->dv, c->ws, c->d_cu,
                            c->d_cu_c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsa_test_dfree(all[i]);
    cmp_problem_free(&c->p);
}

static void test_valid_offsets_pass_and_give_the_bits_of_a_plain_plan(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    check_expect_the_bits_of_the_plain_plan(&c.base);
    /* And that result is the reference's: the check changed nothing it should not. */
    fsa_test_dfill(c.o, 0xff, c.base.out[0][0].bytes); /* poisoned: the check below sees this call's o, not an earlier one's */
    assert_int_equal(run(&c, CHECK_FORWARD, 1), FSA_STATUS_OK);
    const size_t n = (size_t)c.p.T * g_case.hq * g_case.dv;
    float *o = malloc(n * sizeof *o);
    uint16_t *o_img = malloc(n * 2);
    assert_true(o && o_img);
    download_strided(o, o_img, c.o, c.p.T, g_case.hq, g_case.dv, (int64_t)g_case.hq * g_case.dv, g_case.dv,
                     g_case.dtype);
    const double err = fsa_rel_error(o, c.p.o_ref, n);
    /* Row by row too: one norm over the tensor lets a wrong row with a small output pass. */
    size_t row;
    const double row_err = fsa_row_rel_error(o, c.p.o_ref, (size_t)c.p.T * g_case.hq, g_case.dv, 0.1, &row);
    print_message("  o rel err against the reference %.3e (tol 1e-2), worst row %.3e (t %zu qh %zu, tol 3e-2)\n", err,
                  row_err, row / g_case.hq, row % g_case.hq);
    assert_true(err < 1e-2);
    assert_true(row_err < 3e-2);
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
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens[0] is not 0");
    call_free(&c);

    call_make(&c);
    c.cu[2] = c.cu[1] - 1; /* falls after sequence 1, and sequence 2 grows by a compressed token */
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens falls; cu_seqlens_c gives a sequence a compressed-"
                                                     "token count other than max(0, (length - kernel_size) / "
                                                     "stride + 1) (first at sequence 1)");
    call_free(&c);

    call_make(&c);
    c.cu[3] = c.p.T - 1;
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens does not end at total_tokens");
    call_free(&c);
}

static void test_compressed_offsets_that_break_the_contract_are_refused(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    c.cu_c[0] = -1;
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens_c[0] is not 0");
    call_free(&c);

    call_make(&c);
    c.cu_c[1] = c.p.Tc + 3; /* past Tc, then falling */
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens_c falls");
    call_free(&c);

    call_make(&c);
    c.cu_c[3] = c.p.Tc + 1;
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens_c does not end at total_compressed");
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
    check_expect_refused_only_in_check_mode(&c.base, want);
    call_free(&c);

    /* Query offsets that still rise to T but give sequence 1 a compressed token's worth of positions more:
     * 36 positions make one compressed token, and cu_seqlens_c gives it none. */
    call_make(&c);
    c.cu[2] += 16;
    snprintf(want, sizeof want, "%s1)", rule);
    check_expect_refused_only_in_check_mode(&c.base, want);
    call_free(&c);
}

static int setup(void **state)
{
    (void)state;
    fsa_test_contexts_make(&g_ctx, "cmp-check-cache");
    fsa_compressed_attention_desc d = cmp_desc_of(&g_case);
    d.backward = 1;
    if (fsa_compressed_plan_create(&g_plans[0], g_ctx.plain, &d) != FSA_STATUS_OK ||
        fsa_compressed_plan_create(&g_plans[1], g_ctx.check, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) fsa_compressed_plan_destroy(g_plans[i]);
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
