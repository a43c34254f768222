/* Check mode on the GPU: with it, metadata that breaks the contract
 * (cu_seqlens that does not start at 0, falls or does not end at T, a
 * sequence over max_seqlen, top-k entries outside the token's sequence or
 * repeated) is FSA_STATUS_INVALID_ARGUMENT saying what and where, for the
 * forward and the backward; valid metadata gives the very bits of a plain
 * plan. Without it the same bad metadata runs to a finite result in every
 * output row, zero dk and dv for keys of no sequence (the kernels clamp
 * every bound; compute-sanitizer checks the accesses when it runs this test). A call on a stream being captured skips the check; a call
 * while another thread captures in global mode (PyTorch's default) still
 * checks, and leaves that capture valid. */
#include "attention_problem.h"

#include "attention/plan.h"
#include "jit/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const attn_case g_case = {"bf16_d64_g2_bk32", BF, 64, 4, 2, 32, 4, {1, 40, 100}, 3, 0, 0, A_AUTO, 0, 0, 0, 1};

static char *g_cache_dir;
static fsa_context *g_plain_ctx, *g_check_ctx;
static fsa_plan *g_plain, *g_check;

typedef struct call {
    problem p;
    device_problem dp;
    fsa_fwd_args a;
} call;

static void call_make(call *c, const fsa_plan *plan)
{
    problem_make(&c->p, &g_case, 0xc4ec);
    device_make(&c->dp, &c->p, &g_case, plan);
    c->a = fwd_args_of(&c->dp, &c->p);
}

static void call_free(call *c)
{
    device_free(&c->dp);
    problem_free(&c->p);
}

static fsa_status forward(const fsa_plan *plan, call *c)
{
    poison_fwd(&c->dp, &c->p, &g_case);
    fsa_status st = fsa_selected_attention_fwd(plan, &c->a, NULL);
    fsa_test_sync(); /* also: nothing faulted */
    return st;
}

/* A bad call: refused in check mode with a message naming `what`; run
 * without it, to a finite result: every o element written (it was poisoned
 * with NaN) and finite, every lse finite or -inf (the metadata may leave a
 * row no visible key: o 0, lse -inf, docs/semantics.md). */
static void expect_refused_only_in_check_mode(call *c, const char *what)
{
    assert_int_equal(forward(g_check, c), FSA_STATUS_INVALID_ARGUMENT);
    if (strstr(fsa_last_error(), what) == NULL) fail_msg("\"%s\" does not mention %s", fsa_last_error(), what);
    assert_int_equal(forward(g_plain, c), FSA_STATUS_OK);
    outputs out;
    download_fwd(&out, &c->dp, &c->p, &g_case);
    for (size_t i = 0; i < (size_t)c->p.T * g_case.hq * c->p.Dv; i++)
        if (!isfinite(out.o[i])) fail_msg("%s: o element %zu is %g", what, i, (double)out.o[i]);
    for (size_t i = 0; i < (size_t)g_case.hq * c->p.T; i++)
        if (isnan(out.lse[i]) || out.lse[i] == INFINITY) fail_msg("%s: lse row %zu is %g", what, i, (double)out.lse[i]);
    outputs_free(&out);
}

static void set_cu(call *c, const int32_t *cu)
{
    fsa_test_h2d(c->dp.cu, cu, (size_t)(c->p.B + 1) * 4);
}

static size_t topk_index(const call *c, int t, int h, int s)
{
    return (size_t)(h * c->p.topk_hs + t * c->p.topk_ts + s);
}

static void set_topk(call *c, int t, int h, int s, int32_t v)
{
    fsa_test_h2d(c->dp.topk + topk_index(c, t, h, s) * 4, &v, 4);
}

static void restore_topk(call *c, int t, int h, int s)
{
    set_topk(c, t, h, s, c->p.topk[topk_index(c, t, h, s)]);
}

/* A backward of the call's forward (its o and lse) on `plan`'s workspace size: dout about 0.01, gradients
 * poisoned with NaN. */
typedef struct bwd_call {
    uint64_t dout, dq, dk, dv, ws;
    size_t q_bytes, k_bytes, v_bytes;
    fsa_bwd_args b;
} bwd_call;

static void bwd_call_make(bwd_call *bc, const call *c, const fsa_plan *plan)
{
    const problem *p = &c->p;
    bc->q_bytes = (size_t)p->T * p->q_ts * 2;
    bc->k_bytes = (size_t)p->T * p->kv_ts * 2;
    bc->v_bytes = (size_t)p->T * p->v_ts * 2;
    bc->dout = fsa_test_dalloc(c->dp.o_bytes);
    bc->dq = fsa_test_dalloc(bc->q_bytes);
    bc->dk = fsa_test_dalloc(bc->k_bytes);
    bc->dv = fsa_test_dalloc(bc->v_bytes);
    fsa_test_dfill(bc->dout, 0x3c, c->dp.o_bytes); /* about 0.01 in bf16 */
    fsa_test_dfill(bc->dq, 0xff, bc->q_bytes);
    fsa_test_dfill(bc->dk, 0xff, bc->k_bytes);
    fsa_test_dfill(bc->dv, 0xff, bc->v_bytes);
    size_t ws_bytes = 0;
    assert_int_equal(fsa_plan_workspace_size_bwd(&ws_bytes, plan, p->T, p->B), FSA_STATUS_OK);
    bc->ws = fsa_test_dalloc(ws_bytes);
    fsa_bwd_args b = FSA_BWD_ARGS_INIT;
    b.total_tokens = p->T;
    b.batch = p->B;
    b.q = c->a.q, b.k = c->a.k, b.v = c->a.v, b.o = c->a.o, b.topk = c->a.topk;
    b.dout = c->a.o;
    b.dout.ptr = bc->dout;
    b.dq = (fsa_tensor){bc->dq, p->q_ts, p->q_hs};
    b.dk = (fsa_tensor){bc->dk, p->kv_ts, p->kv_hs};
    b.dv = (fsa_tensor){bc->dv, p->v_ts, p->v_hs};
    b.cu_seqlens = c->dp.cu;
    b.lse = c->dp.lse;
    b.workspace = bc->ws;
    b.workspace_bytes = ws_bytes;
    bc->b = b;
}

static void bwd_call_free(bwd_call *bc)
{
    fsa_test_dfree(bc->dout);
    fsa_test_dfree(bc->dq);
    fsa_test_dfree(bc->dk);
    fsa_test_dfree(bc->dv);
    fsa_test_dfree(bc->ws);
}

static void test_valid_metadata_passes_and_gives_the_bits_of_a_plain_plan(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    assert_int_equal(forward(g_plain, &c), FSA_STATUS_OK);
    outputs plain;
    download_fwd(&plain, &c.dp, &c.p, &g_case);
    assert_int_equal(forward(g_check, &c), FSA_STATUS_OK);
    outputs checked;
    download_fwd(&checked, &c.dp, &c.p, &g_case);
    assert_memory_equal(plain.o_img, checked.o_img, c.dp.o_bytes);
    assert_memory_equal(plain.lse, checked.lse, (size_t)g_case.hq * c.p.T * 4);
    /* The longest sequence as max_seqlen is fine too. */
    c.a.max_seqlen = 100;
    assert_int_equal(forward(g_check, &c), FSA_STATUS_OK);
    outputs_free(&plain);
    outputs_free(&checked);
    call_free(&c);
}

static void test_cu_seqlens_that_breaks_the_contract_is_refused_in_check_mode(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    const int T = c.p.T; /* sequences of 1, 40 and 100 tokens */
    const int32_t falls[] = {0, 41, 1, T}, past_end[] = {0, 1, 41, T + 7}, short_end[] = {0, 1, 41, T - 1},
                  late_start[] = {1, 1, 41, T};
    set_cu(&c, falls);
    expect_refused_only_in_check_mode(&c, "cu_seqlens falls (first at sequence 1)");
    set_cu(&c, past_end);
    expect_refused_only_in_check_mode(&c, "does not end at total_tokens");
    set_cu(&c, short_end);
    expect_refused_only_in_check_mode(&c, "does not end at total_tokens");
    set_cu(&c, late_start);
    expect_refused_only_in_check_mode(&c, "cu_seqlens[0] is not 0");
    set_cu(&c, c.p.cu);
    c.a.max_seqlen = 99;
    expect_refused_only_in_check_mode(&c, "longer than max_seqlen (first at sequence 2)");
    call_free(&c);
}

/* The backward of call c (metadata already set, o and lse from its forward) on `plan`: every gradient element
 * written (they were poisoned with NaN) and finite, and the dk and dv rows of keys outside [keys_from,
 * keys_to), the keys of no sequence, exactly 0 (docs/semantics.md). */
static void expect_finite_gradients_and_zero_outside(call *c, const fsa_plan *plan, int keys_from, int keys_to)
{
    const problem *p = &c->p;
    bwd_call bc;
    bwd_call_make(&bc, c, plan);
    assert_int_equal(fsa_selected_attention_bwd(plan, &bc.b, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    const struct { const char *name; uint64_t dev; int heads, dim; int64_t ts, hs; int keys; } grads[] = {
        {"dq", bc.dq, g_case.hq, g_case.d, p->q_ts, p->q_hs, 0},
        {"dk", bc.dk, g_case.hkv, g_case.d, p->kv_ts, p->kv_hs, 1},
        {"dv", bc.dv, g_case.hkv, p->Dv, p->v_ts, p->v_hs, 1}};
    for (size_t i = 0; i < sizeof grads / sizeof *grads; i++) {
        const size_t row = (size_t)grads[i].heads * grads[i].dim, count = (size_t)p->T * row;
        float *host = malloc(count * sizeof *host);
        assert_non_null(host);
        download_strided(host, NULL, grads[i].dev, p->T, grads[i].heads, grads[i].dim, grads[i].ts, grads[i].hs,
                         g_case.dtype);
        for (size_t e = 0; e < count; e++) {
            const int t = (int)(e / row);
            if (!isfinite(host[e])) fail_msg("%s element %zu (token %d) is %g", grads[i].name, e, t, (double)host[e]);
            if (grads[i].keys && (t < keys_from || t >= keys_to) && host[e] != 0.f)
                fail_msg("%s of key %d, outside every sequence: element %zu is %g, not 0", grads[i].name, t, e,
                         (double)host[e]);
        }
        free(host);
    }
    bwd_call_free(&bc);
}

/* Tokens before cu_seqlens[0] clamp their sequence to start at themselves, so tokens of one 32-key stretch
 * share a block id with other key ranges; the FSA-order forward takes an item's keys from its first list
 * entry. Token 41 (slot 0, so first in the list) and token 33 (slot 1) both name block 0: token 33's only
 * partial then sees no key, and the reduction must give it the row of a token with no slot (o 0, lse -inf),
 * not 0 / 0. The backward then meets a pair whose row has lse -inf: it must give that row P = 0, not
 * exp2(+inf), so that dq stays finite; and the keys before cu_seqlens[0], some inside an item's key range and
 * some in none, all get dk = dv = 0. */
static void test_a_late_cu_seqlens_start_whose_partials_see_no_key_still_gives_a_finite_result(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    fsa_algorithm alg = FSA_ALGORITHM_AUTO;
    assert_int_equal(fsa_plan_algorithm(&alg, NULL, g_plain, c.p.T), FSA_STATUS_OK);
    assert_int_equal(alg, FSA_ALGORITHM_FSA); /* the order whose items take their keys from a list entry */
    const int T = c.p.T;
    const int32_t late[] = {100, 100, 120, T};
    set_cu(&c, late);
    const size_t n = (size_t)g_case.hkv * T * g_case.k;
    int32_t *rows = malloc(n * sizeof *rows);
    assert_non_null(rows);
    for (size_t i = 0; i < n; i++) rows[i] = -1;
    for (int h = 0; h < g_case.hkv; h++) {
        rows[topk_index(&c, 41, h, 0)] = 0;
        rows[topk_index(&c, 33, h, 1)] = 0;
    }
    fsa_test_h2d(c.dp.topk, rows, n * sizeof *rows);
    expect_refused_only_in_check_mode(&c, "cu_seqlens[0] is not 0");
    /* The case's premise: token 33's partial saw no key (its list began with token 41's keys). */
    outputs out;
    download_fwd(&out, &c.dp, &c.p, &g_case);
    for (int qh = 0; qh < g_case.hq; qh++)
        if (out.lse[(size_t)qh * T + 33] != -INFINITY) fail_msg("token 33, head %d: lse %g, not -inf", qh, (double)out.lse[(size_t)qh * T + 33]);
    outputs_free(&out);
    expect_finite_gradients_and_zero_outside(&c, g_plain, late[0], T);
    free(rows);
    call_free(&c);
}

/* Offsets ending short of T (padding at the end of a packed batch breaks the contract): the tokens past
 * cu_seqlens[batch] are clamped into the last sequence, so their outputs are meaningless but finite, and
 * the keys there, no sequence's, get dk = dv = 0 on each of the backward's three ways to its dK/dV rows:
 * the FSA order in one chunk (the sums write them), the NSA order (its own dK/dV sum), and token chunks
 * under a cap (the fp32 accumulator's rows written out by the last chunk). */
static void test_keys_past_the_last_sequence_get_zero_dk_and_dv(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    const int T = c.p.T;
    const int32_t short_end[] = {0, 1, 41, T - 21};
    set_cu(&c, short_end);
    expect_refused_only_in_check_mode(&c, "does not end at total_tokens");
    expect_finite_gradients_and_zero_outside(&c, g_plain, 0, short_end[3]);

    fsa_selected_attention_desc d = attn_desc_of(&g_case, 1);
    d.algorithm = FSA_ALGORITHM_NSA;
    fsa_plan *nsa = NULL;
    assert_int_equal(fsa_plan_create(&nsa, g_plain_ctx, &d), FSA_STATUS_OK);
    expect_finite_gradients_and_zero_outside(&c, nsa, 0, short_end[3]);
    fsa_plan_destroy(nsa);

    /* A cap that fits one KV head's layout for half the tokens: the call runs token chunks. */
    fsa_bwd_layout half;
    const fsa_algorithm order = fsa_workspace_order(g_plain, FSA_OP_BWD, T);
    fsa_bwd_layout_for(&half, g_plain, T, c.p.B, 1, T / 2, order);
    d = attn_desc_of(&g_case, 1);
    d.workspace_limit = (uint64_t)half.total + 16 * 256;
    fsa_plan *capped = NULL;
    assert_int_equal(fsa_plan_create(&capped, g_plain_ctx, &d), FSA_STATUS_OK);
    int heads = 0;
    int64_t tc = 0;
    fsa_bwd_chunk(&heads, &tc, capped, T, c.p.B, fsa_workspace_order(capped, FSA_OP_BWD, T));
    if (tc >= T) fail_msg("the capped plan's backward runs one chunk of %lld tokens (T %d)", (long long)tc, T);
    expect_finite_gradients_and_zero_outside(&c, capped, 0, short_end[3]);
    fsa_plan_destroy(capped);
    call_free(&c);
}

static void test_top_k_entries_outside_the_sequence_or_repeated_are_refused_in_check_mode(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    /* Token 41 is the first of the 100-token sequence: blocks 0..3 exist. */
    set_topk(&c, 41, 1, 2, 4);
    expect_refused_only_in_check_mode(&c, "top-k entries neither -1 nor a block of the token's sequence (first at token 41, KV head 1)");
    set_topk(&c, 41, 1, 2, -5);
    expect_refused_only_in_check_mode(&c, "first at token 41, KV head 1");
    restore_topk(&c, 41, 1, 2);
    /* Token 140's rows are 0, 1, 2, 3: make slot 3 repeat slot 0. */
    set_topk(&c, 140, 0, 3, c.p.topk[topk_index(&c, 140, 0, 0)]);
    expect_refused_only_in_check_mode(&c, "top-k rows naming a block twice (first at token 140, KV head 0)");
    restore_topk(&c, 140, 0, 3);
    /* A block past the token's own but inside its sequence is ignored, not wrong; so is -1. */
    set_topk(&c, 41, 0, 3, 3);
    set_topk(&c, 42, 0, 3, -1);
    assert_int_equal(forward(g_check, &c), FSA_STATUS_OK);
    call_free(&c);
}

static void test_the_backward_checks_too(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    assert_int_equal(forward(g_check, &c), FSA_STATUS_OK); /* o and lse for the backward */
    bwd_call bc;
    bwd_call_make(&bc, &c, g_check);
    fsa_bwd_args b = bc.b;
    assert_int_equal(fsa_selected_attention_bwd(g_check, &b, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    set_topk(&c, 41, 1, 2, 4);
    assert_int_equal(fsa_selected_attention_bwd(g_check, &b, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(fsa_last_error(), "first at token 41, KV head 1"));
    assert_string_equal(fsa_last_error_info()->stage, "backward");
    assert_int_equal(fsa_selected_attention_bwd(g_plain, &b, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    bwd_call_free(&bc);
    call_free(&c);
}

static void test_a_call_on_a_stream_being_captured_skips_the_check(void **state)
{
    (void)state;
    call c;
    call_make(&c, g_check);
    set_topk(&c, 41, 1, 2, 4);
    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    fsa_status st = fsa_selected_attention_fwd(g_check, &c.a, graph.stream);
    fsa_test_capture_end(&graph);
    assert_int_equal(st, FSA_STATUS_OK);
    fsa_test_graph_free(&graph);
    call_free(&c);
}

static fsa_status checked_forward(void *c, void *stream)
{
    return fsa_selected_attention_fwd(g_check, &((call *)c)->a, stream); /* waits for its verdict */
}

/* The check's wait (a copy to the host and a stream synchronization) runs in
 * relaxed capture mode: in the default mode, with another thread capturing
 * in global mode, the driver refuses such calls and invalidates that capture. */
static void test_a_check_while_another_thread_captures_still_checks_and_leaves_the_capture_valid(void **state)
{
    (void)state;
    call bad, plain;
    call_make(&bad, g_check);
    call_make(&plain, g_plain);
    set_topk(&bad, 41, 1, 2, 4); /* a block past token 41's own: refused in check mode */
    fsa_test_graph own;
    fsa_test_capture_begin(&own); /* created before the capture below begins */
    fsa_test_capture_end(&own);
    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_selected_attention_fwd(g_plain, &plain.a, graph.stream), FSA_STATUS_OK);
    char message[512];
    const fsa_status st = fsa_test_call_on_another_thread(checked_forward, &bad, own.stream, message, sizeof message);
    fsa_test_capture_end(&graph); /* fails the test if the capture was invalidated */
    if (st != FSA_STATUS_INVALID_ARGUMENT || strstr(message, "check mode: bad metadata") == NULL)
        fail_msg("the other thread's call: status %d, \"%s\"", (int)st, message);
    fsa_test_graph_replay(&graph);
    fsa_test_graph_free(&graph);
    fsa_test_graph_free(&own);
    call_free(&plain);
    call_free(&bad);
}

static int setup(void **state)
{
    (void)state;
    g_cache_dir = fsa_test_mkdtemp("check-cache");
    g_plain_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    g_check_ctx = fsa_test_check_context(g_cache_dir);
    fsa_selected_attention_desc d = attn_desc_of(&g_case, 1);
    if (fsa_plan_create(&g_plain, g_plain_ctx, &d) != FSA_STATUS_OK ||
        fsa_plan_create(&g_check, g_check_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_plan_destroy(g_check);
    fsa_plan_destroy(g_plain);
    fsa_context_destroy(g_check_ctx);
    fsa_context_destroy(g_plain_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_metadata_passes_and_gives_the_bits_of_a_plain_plan),
        cmocka_unit_test(test_cu_seqlens_that_breaks_the_contract_is_refused_in_check_mode),
        cmocka_unit_test(test_a_late_cu_seqlens_start_whose_partials_see_no_key_still_gives_a_finite_result),
        cmocka_unit_test(test_keys_past_the_last_sequence_get_zero_dk_and_dv),
        cmocka_unit_test(test_top_k_entries_outside_the_sequence_or_repeated_are_refused_in_check_mode),
        cmocka_unit_test(test_the_backward_checks_too),
        cmocka_unit_test(test_a_call_on_a_stream_being_captured_skips_the_check),
        cmocka_unit_test(test_a_check_while_another_thread_captures_still_checks_and_leaves_the_capture_valid),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
