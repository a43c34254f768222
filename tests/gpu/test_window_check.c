/* Check mode for sliding-window attention, on the GPU: cu_seqlens that does
 * not start at 0, falls or does not end at T is FSA_STATUS_INVALID_ARGUMENT
 * saying what and where, in the forward and the backward, and nothing is
 * written; valid offsets give the very bits of a plain plan (and the
 * reference's result); without check mode the same bad offsets run (the
 * kernels clamp every bound; compute-sanitizer checks the accesses when it
 * runs this test) and leave the tokens no tile owns unwritten. */
#include "attention_problem.h"
#include "check_calls.h"
#include "reference_window.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HQ = 4, HKV = 2, D = 64, WINDOW = 48, B = 3 };
static const int g_lens[B] = {200, 1, 77};

static fsa_test_contexts g_ctx;
static fsa_window_plan *g_plans[2]; /* plain, check mode */

/* A call: host inputs, the offsets it passes, its device buffers. */
typedef struct call {
    check_call base;
    int T;
    int32_t good[B + 1], cu[B + 1];
    float *q, *k, *v;
    uint64_t d_q, d_k, d_v, d_dout, o, lse, dq, dk, dv, ws, d_cu;
    size_t ws_bytes;
} call;

static float *random_rows(fsa_rng *rng, size_t n)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t e = 0; e < n; e++) x[e] = attn_round_to(FSA_DTYPE_BF16, (float)fsa_rng_normal(rng));
    return x;
}

static uint64_t upload_rows(const float *x, int rows, int heads)
{
    return upload_strided(x, rows, heads, D, (int64_t)heads * D, D, FSA_DTYPE_BF16);
}

static fsa_tensor rows_of(uint64_t ptr, int heads) { return (fsa_tensor){ptr, (int64_t)heads * D, D}; }

static fsa_status run(void *self, int pass, int check)
{
    call *c = self;
    fsa_test_h2d(c->d_cu, c->cu, sizeof c->cu);
    const fsa_window_plan *plan = g_plans[check];
    fsa_status st;
    if (pass == CHECK_FORWARD) {
        fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
        a.total_tokens = c->T, a.batch = B, a.cu_seqlens = c->d_cu, a.lse = c->lse;
        a.q = rows_of(c->d_q, HQ), a.k = rows_of(c->d_k, HKV), a.v = rows_of(c->d_v, HKV), a.o = rows_of(c->o, HQ);
        st = fsa_window_attention_fwd(plan, &a, NULL);
    } else {
        fsa_window_bwd_args a = FSA_WINDOW_BWD_ARGS_INIT;
        a.total_tokens = c->T, a.batch = B, a.cu_seqlens = c->d_cu, a.lse = c->lse;
        a.q = rows_of(c->d_q, HQ), a.k = rows_of(c->d_k, HKV), a.v = rows_of(c->d_v, HKV), a.o = rows_of(c->o, HQ);
        a.dout = rows_of(c->d_dout, HQ), a.dq = rows_of(c->dq, HQ), a.dk = rows_of(c->dk, HKV);
        a.dv = rows_of(c->dv, HKV), a.workspace = c->ws, a.workspace_bytes = c->ws_bytes;
        st = fsa_window_attention_bwd(plan, &a, NULL);
    }
    fsa_test_sync(); /* also: nothing faulted */
    return st;
}

static void call_make(call *c)
{
    memset(c, 0, sizeof *c);
    for (int b = 0; b < B; b++) c->good[b + 1] = c->good[b] + g_lens[b];
    memcpy(c->cu, c->good, sizeof c->cu);
    const int T = c->T = c->good[B];
    fsa_rng rng = {0x3c4ec};
    c->q = random_rows(&rng, (size_t)T * HQ * D);
    c->k = random_rows(&rng, (size_t)T * HKV * D);
    c->v = random_rows(&rng, (size_t)T * HKV * D);
    c->d_q = upload_rows(c->q, T, HQ);
    c->d_k = upload_rows(c->k, T, HKV);
    c->d_v = upload_rows(c->v, T, HKV);
    c->d_dout = upload_rows(c->q, T, HQ); /* any values */
    assert_int_equal(fsa_window_plan_workspace_size_bwd(&c->ws_bytes, g_plans[0], T, B), FSA_STATUS_OK);
    c->ws = fsa_test_dalloc(c->ws_bytes);
    c->d_cu = fsa_test_dalloc(sizeof c->cu);
    const size_t q_bytes = (size_t)T * HQ * D * 2, kv_bytes = (size_t)T * HKV * D * 2;
    const check_output outs[2][3] = {{{0, q_bytes, 0xff}, {0, (size_t)HQ * T * 4, 0xff}},
                                     {{0, q_bytes, 0xff}, {0, kv_bytes, 0xff}, {0, kv_bytes, 0xff}}};
    uint64_t *ptrs[2][3] = {{&c->o, &c->lse, NULL}, {&c->dq, &c->dk, &c->dv}};
    c->base = (check_call){.self = c, .run = run, .stage = {"window-forward", "window-backward"},
                           .offsets = c->cu, .good = c->good, .offsets_bytes = sizeof c->cu};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 3; i++) {
            c->base.out[pass][i] = outs[pass][i];
            if (ptrs[pass][i]) *ptrs[pass][i] = c->base.out[pass][i].ptr = fsa_test_dalloc(outs[pass][i].bytes);
        }
}

static void call_free(call *c)
{
    const uint64_t all[] = {c->d_q, c->d_k, c->d_v, c->d_dout, c->o, c->lse, c->dq, c->dk, c->dv, c->ws, c->d_cu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsa_test_dfree(all[i]);
    free(c->q);
    free(c->k);
    free(c->v);
}

static void test_valid_offsets_pass_and_give_the_bits_of_a_plain_plan(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    check_expect_the_bits_of_the_plain_plan(&c.base);
    /* And that result is the reference's. */
    fsa_test_dfill(c.o, 0xff, c.base.out[0][0].bytes); /* poisoned: the check below sees this call's o, not an earlier one's */
    assert_int_equal(run(&c, CHECK_FORWARD, 1), FSA_STATUS_OK);
    const size_t n = (size_t)c.T * HQ * D;
    double *o_ref = malloc(n * sizeof *o_ref);
    float *o = malloc(n * sizeof *o);
    uint16_t *o_img = malloc(n * 2);
    assert_true(o_ref && o && o_img);
    const fsa_ref_window_problem ref = {c.T, B, c.good, HQ, HKV, D, D, WINDOW, 1.0 / sqrt((double)D),
                                        c.q, c.k, c.v, NULL};
    fsa_ref_window_forward(&ref, o_ref, NULL);
    download_strided(o, o_img, c.o, c.T, HQ, D, (int64_t)HQ * D, D, FSA_DTYPE_BF16);
    const double err = fsa_rel_error(o, o_ref, n);
    /* Row by row too: one norm over the tensor lets a wrong row with a small output pass. */
    size_t row;
    const double row_err = fsa_row_rel_error(o, o_ref, (size_t)c.T * HQ, D, 0.1, &row);
    print_message("  o rel err against the reference %.3e (tol 1e-2), worst row %.3e (t %zu qh %zu, tol 3e-2)\n", err,
                  row_err, row / HQ, row % HQ);
    assert_true(err < 1e-2);
    assert_true(row_err < 3e-2);
    free(o_ref);
    free(o);
    free(o_img);
    call_free(&c);
}

static void test_offsets_that_break_the_contract_are_refused(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    c.cu[0] = 3;
    check_expect_refused_only_in_check_mode(&c.base, "check mode: bad metadata: cu_seqlens[0] is not 0");
    call_free(&c);

    call_make(&c);
    c.cu[2] = c.cu[1] - 5; /* falls after sequence 1 */
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens falls (first at sequence 1)");
    call_free(&c);

    call_make(&c);
    c.cu[B] = c.T + 40; /* past T */
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens does not end at total_tokens (first at sequence 3)");
    call_free(&c);

    /* Offsets that stop short of T: the plain plan leaves the tokens past them unwritten (a silent
     * wrong answer, which is why check mode exists); the check-mode plan refuses them. */
    call_make(&c);
    c.cu[B] = c.T - 40;
    check_expect_refused_only_in_check_mode(&c.base, "cu_seqlens does not end at total_tokens (first at sequence 3)");
    const size_t row = (size_t)HQ * D * 2, bytes = (size_t)c.T * row;
    unsigned char *o = fsa_test_image(c.o, bytes); /* the last plain forward's, with these offsets */
    for (size_t i = (size_t)(c.T - 40) * row; i < bytes; i++) assert_int_equal(o[i], 0xff);
    free(o);
    call_free(&c);

    /* Offsets that rise from 0 to T are fine whatever the lengths: a sequence may be empty. */
    call_make(&c);
    c.cu[1] = 0;
    if (run(&c, CHECK_FORWARD, 1) != FSA_STATUS_OK) fail_msg("an empty sequence refused: %s", fsa_last_error());
    call_free(&c);
}

static int setup(void **state)
{
    (void)state;
    fsa_test_contexts_make(&g_ctx, "window-check-cache");
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.dtype = FSA_DTYPE_BF16, d.head_dim = D, d.num_q_heads = HQ, d.num_kv_heads = HKV, d.window = WINDOW;
    d.backward = 1;
    if (fsa_window_plan_create(&g_plans[0], g_ctx.plain, &d) != FSA_STATUS_OK ||
        fsa_window_plan_create(&g_plans[1], g_ctx.check, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) fsa_window_plan_destroy(g_plans[i]);
    fsa_test_contexts_free(&g_ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_offsets_pass_and_give_the_bits_of_a_plain_plan),
        cmocka_unit_test(test_offsets_that_break_the_contract_are_refused),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
