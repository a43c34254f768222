/* Check mode for sliding-window attention, on the GPU: cu_seqlens that does
 * not start at 0, falls or does not end at T is FSA_STATUS_INVALID_ARGUMENT
 * saying what and where, in the forward and the backward, and nothing is
 * written; valid offsets give the very bits of a plain plan (and the
 * reference's result); without check mode the same bad offsets run (the
 * kernels clamp every bound; compute-sanitizer checks the accesses when it
 * runs this test). */
#include "attention_problem.h"
#include "reference_window.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HQ = 4, HKV = 2, D = 64, WINDOW = 48, B = 3 };
static const int g_lens[B] = {200, 1, 77};

static fsa_test_contexts g_ctx;
static fsa_window_plan *g_plain, *g_check;

/* A call: host inputs, the offsets it passes, its device buffers. */
typedef struct call {
    int T;
    int32_t good[B + 1], cu[B + 1];
    float *q, *k, *v;
    uint64_t dq_in, dk_in, dv_in, ddout, o, lse, dq, dk, dv, ws, d_cu;
    size_t o_bytes, lse_bytes, q_bytes, kv_bytes, ws_bytes;
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
    c->dq_in = upload_rows(c->q, T, HQ);
    c->dk_in = upload_rows(c->k, T, HKV);
    c->dv_in = upload_rows(c->v, T, HKV);
    c->ddout = upload_rows(c->q, T, HQ); /* any values */
    c->o_bytes = c->q_bytes = (size_t)T * HQ * D * 2;
    c->kv_bytes = (size_t)T * HKV * D * 2;
    c->lse_bytes = (size_t)HQ * T * 4;
    assert_int_equal(fsa_window_plan_workspace_size_bwd(&c->ws_bytes, g_plain, T, B), FSA_STATUS_OK);
    c->o = fsa_test_dalloc(c->o_bytes);
    c->lse = fsa_test_dalloc(c->lse_bytes);
    c->dq = fsa_test_dalloc(c->q_bytes);
    c->dk = fsa_test_dalloc(c->kv_bytes);
    c->dv = fsa_test_dalloc(c->kv_bytes);
    c->ws = fsa_test_dalloc(c->ws_bytes);
    c->d_cu = fsa_test_dalloc(sizeof c->cu);
}

static void call_free(call *c)
{
    const uint64_t all[] = {c->dq_in, c->dk_in, c->dv_in, c->ddout, c->o, c->lse, c->dq, c->dk, c->dv, c->ws, c->d_cu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsa_test_dfree(all[i]);
    free(c->q);
    free(c->k);
    free(c->v);
}

static fsa_tensor rows_of(uint64_t ptr, int heads) { return (fsa_tensor){ptr, (int64_t)heads * D, D}; }

static fsa_status forward(const fsa_window_plan *plan, call *c)
{
    fsa_test_h2d(c->d_cu, c->cu, sizeof c->cu);
    fsa_test_dfill(c->o, 0xff, c->o_bytes);
    fsa_test_dfill(c->lse, 0xff, c->lse_bytes);
    fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
    a.total_tokens = c->T, a.batch = B, a.cu_seqlens = c->d_cu, a.lse = c->lse;
    a.q = rows_of(c->dq_in, HQ), a.k = rows_of(c->dk_in, HKV), a.v = rows_of(c->dv_in, HKV), a.o = rows_of(c->o, HQ);
    const fsa_status st = fsa_window_attention_fwd(plan, &a, NULL);
    fsa_test_sync(); /* also: nothing faulted */
    return st;
}

/* The backward of the o and lse in c (written by a forward with good offsets). */
static fsa_status backward(const fsa_window_plan *plan, call *c)
{
    fsa_test_h2d(c->d_cu, c->cu, sizeof c->cu);
    fsa_test_dfill(c->dq, 0xff, c->q_bytes);
    fsa_test_dfill(c->dk, 0xff, c->kv_bytes);
    fsa_test_dfill(c->dv, 0xff, c->kv_bytes);
    fsa_window_bwd_args a = FSA_WINDOW_BWD_ARGS_INIT;
    a.total_tokens = c->T, a.batch = B, a.cu_seqlens = c->d_cu, a.lse = c->lse;
    a.q = rows_of(c->dq_in, HQ), a.k = rows_of(c->dk_in, HKV), a.v = rows_of(c->dv_in, HKV), a.o = rows_of(c->o, HQ);
    a.dout = rows_of(c->ddout, HQ), a.dq = rows_of(c->dq, HQ), a.dk = rows_of(c->dk, HKV), a.dv = rows_of(c->dv, HKV);
    a.workspace = c->ws, a.workspace_bytes = c->ws_bytes;
    const fsa_status st = fsa_window_attention_bwd(plan, &a, NULL);
    fsa_test_sync();
    return st;
}

/* Bad offsets in c->cu: refused by the check-mode forward and backward with a
 * message naming `what`, their outputs untouched; the plain plan runs both. */
static void expect_refused_only_in_check_mode(call *c, const char *what)
{
    int32_t bad[B + 1];
    memcpy(bad, c->cu, sizeof bad);
    assert_int_equal(forward(g_check, c), FSA_STATUS_INVALID_ARGUMENT);
    fsa_test_expect_error("window-forward", what);
    fsa_test_assert_untouched(c->o, c->o_bytes, 0xff);
    fsa_test_assert_untouched(c->lse, c->lse_bytes, 0xff);

    memcpy(c->cu, c->good, sizeof c->cu); /* the backward needs the forward's o and lse */
    assert_int_equal(forward(g_plain, c), FSA_STATUS_OK);
    memcpy(c->cu, bad, sizeof bad);
    assert_int_equal(backward(g_check, c), FSA_STATUS_INVALID_ARGUMENT);
    fsa_test_expect_error("window-backward", what);
    const uint64_t grads[3] = {c->dq, c->dk, c->dv};
    const size_t bytes[3] = {c->q_bytes, c->kv_bytes, c->kv_bytes};
    for (int i = 0; i < 3; i++) fsa_test_assert_untouched(grads[i], bytes[i], 0xff);

    assert_int_equal(backward(g_plain, c), FSA_STATUS_OK);
    assert_int_equal(forward(g_plain, c), FSA_STATUS_OK);
}

static void test_valid_offsets_pass_and_give_the_bits_of_a_plain_plan(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    const uint64_t dev[5] = {c.o, c.lse, c.dq, c.dk, c.dv};
    const size_t bytes[5] = {c.o_bytes, c.lse_bytes, c.q_bytes, c.kv_bytes, c.kv_bytes};
    unsigned char *plain[5], *checked[5];
    const fsa_window_plan *plans[2] = {g_plain, g_check};
    for (int run = 0; run < 2; run++) {
        if (forward(plans[run], &c) != FSA_STATUS_OK) fail_msg("forward refused: %s", fsa_last_error());
        if (backward(plans[run], &c) != FSA_STATUS_OK) fail_msg("backward refused: %s", fsa_last_error());
        for (int i = 0; i < 5; i++) (run ? checked : plain)[i] = fsa_test_image(dev[i], bytes[i]);
    }
    for (int i = 0; i < 5; i++) {
        assert_memory_equal(plain[i], checked[i], bytes[i]);
        free(plain[i]);
        free(checked[i]);
    }
    /* And that result is the reference's. */
    const size_t n = (size_t)c.T * HQ * D;
    double *o_ref = malloc(n * sizeof *o_ref), *lse_ref = malloc((size_t)HQ * c.T * sizeof *lse_ref);
    float *o = malloc(n * sizeof *o);
    uint16_t *o_img = malloc(c.o_bytes);
    assert_true(o_ref && lse_ref && o && o_img);
    const fsa_ref_window_problem ref = {c.T, B, c.good, HQ, HKV, D, D, WINDOW, 1.0 / sqrt((double)D),
                                        c.q, c.k, c.v, NULL};
    fsa_ref_window_forward(&ref, o_ref, lse_ref);
    download_strided(o, o_img, c.o, c.T, HQ, D, (int64_t)HQ * D, D, FSA_DTYPE_BF16);
    const double err = fsa_rel_error(o, o_ref, n);
    print_message("  o rel err against the reference %.3e\n", err);
    assert_true(err < 1e-2);
    free(o_ref);
    free(lse_ref);
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
    expect_refused_only_in_check_mode(&c, "check mode: bad metadata: cu_seqlens[0] is not 0");
    call_free(&c);

    call_make(&c);
    c.cu[2] = c.cu[1] - 5; /* falls after sequence 1 */
    expect_refused_only_in_check_mode(&c, "cu_seqlens falls (first at sequence 1)");
    call_free(&c);

    call_make(&c);
    c.cu[B] = c.T + 40; /* past T */
    expect_refused_only_in_check_mode(&c, "cu_seqlens does not end at total_tokens (first at sequence 3)");
    call_free(&c);

    /* Offsets that stop short of T: the plain plan leaves the tokens past them unwritten (a silent
     * wrong answer, which is why check mode exists); the check-mode plan refuses them. */
    call_make(&c);
    c.cu[B] = c.T - 40;
    expect_refused_only_in_check_mode(&c, "cu_seqlens does not end at total_tokens (first at sequence 3)");
    unsigned char *o = fsa_test_image(c.o, c.o_bytes); /* the plain forward's, with these offsets */
    const size_t row = (size_t)HQ * D * 2;
    for (size_t i = (size_t)(c.T - 40) * row; i < c.o_bytes; i++) assert_int_equal(o[i], 0xff);
    free(o);
    call_free(&c);

    /* Offsets that rise from 0 to T are fine whatever the lengths: a sequence may be empty. */
    call_make(&c);
    c.cu[1] = 0;
    if (forward(g_check, &c) != FSA_STATUS_OK) fail_msg("an empty sequence refused: %s", fsa_last_error());
    call_free(&c);
}

static int setup(void **state)
{
    (void)state;
    fsa_test_contexts_make(&g_ctx, "window-check-cache");
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.dtype = FSA_DTYPE_BF16, d.head_dim = D, d.num_q_heads = HQ, d.num_kv_heads = HKV, d.window = WINDOW;
    d.backward = 1;
    if (fsa_window_plan_create(&g_plain, g_ctx.plain, &d) != FSA_STATUS_OK ||
        fsa_window_plan_create(&g_check, g_ctx.check, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_window_plan_destroy(g_check);
    fsa_window_plan_destroy(g_plain);
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
