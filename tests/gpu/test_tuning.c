/* Tuning on the GPU: with FSA_TUNE=on the first forward call of a bucket
 * measures both loop orders, writes a record into the cache directory and
 * still gives the reference's answer; a second context, and a second
 * process, take the record without measuring; a call on a stream being
 * captured never measures, nor a backward call with dq_add; a call that
 * measures while another thread captures leaves that capture valid; a
 * record holds for its KV head count only. Small shapes:
 * well under 20 s. */
#include "attention_problem.h"

#include "base/util.h"
#include "jit/context.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* G = 2, D 64, blocks of 64, top-k 4; 40 tokens in two sequences (bucket 64). */
static const attn_case k_case = {"bf16_d64_g2_bk64_tuned", BF, 64, 4, 2, 64, 4, {17, 23}, 2, 0, 0, A_AUTO, 0, 1, 0, 1};
#define CASE_T 40

static char *g_cache_dir;
static fsa_context *g_ctx;

static fsa_plan *plan_of(fsa_context *ctx)
{
    const fsa_selected_attention_desc d = attn_desc_of(&k_case, 0);
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    return plan;
}

static fsa_plan_choice choice_of(const fsa_plan *plan, int64_t T)
{
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    assert_int_equal(fsa_plan_choice_get(&c, plan, FSA_OPERATION_FORWARD, T), FSA_STATUS_OK);
    return c;
}

/* One forward call of the case on `stream` (NULL: the legacy stream),
 * checked against the float64 reference. */
static void run_and_check(const fsa_plan *plan, int T_expected)
{
    problem p;
    problem_make(&p, &k_case, 0x7e57u);
    assert_int_equal(p.T, T_expected);
    device_problem dp;
    device_make(&dp, &p, &k_case, plan);
    fsa_fwd_args a = fwd_args_of(&dp, &p);
    poison_fwd(&dp, &p, &k_case);
    if (fsa_selected_attention_fwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("forward: %s", fsa_last_error());
    fsa_test_sync();
    outputs out;
    download_fwd(&out, &dp, &p, &k_case);
    char what[64];
    snprintf(what, sizeof what, "the %s order", choice_of(plan, p.T).variant);
    attn_check_o_and_lse(&out, &p, k_case.hq, 1e-2, what);
    outputs_free(&out);
    device_free(&dp);
    problem_free(&p);
}

static int count_records(const char *root, const char *target)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", root, target);
    DIR *d = opendir(dir);
    int n = 0;
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".tune") == 0 && e->d_name[0] != '.') n++;
    }
    closedir(d);
    return n;
}

static void test_the_first_call_measures_records_and_answers_right(void **state)
{
    (void)state;
    fsa_plan *plan = plan_of(g_ctx);
    fsa_plan_choice c = choice_of(plan, CASE_T);
    assert_int_equal(c.candidates, 2);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.will_measure);
    assert_int_equal(c.bucket_tokens, 64);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), 0);
    const double t0 = fsa_now_ms();
    run_and_check(plan, CASE_T);
    print_message("  first call (measuring): %.1f ms\n", fsa_now_ms() - t0);
    c = choice_of(plan, CASE_T);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    assert_false(c.will_measure);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), 1);
    /* The recorded choice gives the right answer on later calls too. */
    run_and_check(plan, CASE_T);
    fsa_plan_destroy(plan);
}

static void test_a_second_context_uses_the_record_without_measuring(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.cache_dir = g_cache_dir;
    o.tune = FSA_TUNE_ON;
    fsa_context *ctx = NULL;
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
    fsa_plan *plan = plan_of(ctx);
    fsa_plan_choice c = choice_of(plan, CASE_T);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    assert_false(c.will_measure); /* so the call below cannot measure */
    run_and_check(plan, CASE_T);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(ctx)), 1);
    fsa_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static void test_a_second_process_uses_the_record_without_measuring(void **state)
{
    (void)state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_tuning", "--reuse", g_cache_dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_a_capturing_stream_never_measures(void **state)
{
    (void)state;
    fsa_plan *plan = plan_of(g_ctx);
    const int64_t T = 200; /* bucket 256: no record yet */
    attn_case big = k_case;
    big.lens[0] = 100, big.lens[1] = 100;
    problem p;
    problem_make(&p, &big, 5);
    device_problem dp;
    device_make(&dp, &p, &big, plan);
    fsa_fwd_args a = fwd_args_of(&dp, &p);
    assert_true(choice_of(plan, T).will_measure);
    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_selected_attention_fwd(plan, &a, graph.stream), FSA_STATUS_OK);
    fsa_test_capture_end(&graph);
    /* Nothing measured: still no record for the bucket, and the graph runs right. */
    assert_int_equal(choice_of(plan, T).source, FSA_CHOICE_HEURISTIC);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), 1);
    poison_fwd(&dp, &p, &big);
    fsa_test_graph_replay(&graph);
    outputs out;
    download_fwd(&out, &dp, &p, &big);
    attn_check_o_and_lse(&out, &p, big.hq, 1e-2, "graph replay");
    outputs_free(&out);
    fsa_test_graph_free(&graph);
    device_free(&dp);
    problem_free(&p);
    fsa_plan_destroy(plan);
}

typedef struct forward_call {
    const fsa_plan *plan;
    const fsa_fwd_args *a;
} forward_call;

static fsa_status forward(void *arg, void *stream)
{
    const forward_call *f = arg;
    return fsa_selected_attention_fwd(f->plan, f->a, stream); /* measures: its timings wait on events */
}

/* The timings' event waits run in relaxed capture mode: in the default mode,
 * with another thread capturing in global mode (PyTorch's default), the driver
 * refuses them and invalidates that capture. Every buffer is made before the
 * capture begins (an allocation would be refused the same way). */
static void test_a_call_that_measures_while_another_thread_captures_leaves_the_capture_valid(void **state)
{
    (void)state;
    fsa_plan *plan = plan_of(g_ctx);
    attn_case wide = k_case;
    wide.lens[0] = 150, wide.lens[1] = 250; /* bucket 512: no record yet */
    problem p, q;
    problem_make(&p, &wide, 0x7417u);
    problem_make(&q, &k_case, 0x7e57u); /* bucket 64: recorded, the captured call does not measure */
    device_problem dp, dq;
    device_make(&dp, &p, &wide, plan);
    device_make(&dq, &q, &k_case, plan);
    const fsa_fwd_args a = fwd_args_of(&dp, &p), b = fwd_args_of(&dq, &q);
    assert_true(choice_of(plan, p.T).will_measure);
    assert_false(choice_of(plan, q.T).will_measure);
    const int records = count_records(g_cache_dir, fsa_context_target(g_ctx));
    poison_fwd(&dp, &p, &wide);
    fsa_test_graph own;
    fsa_test_capture_begin(&own); /* a stream created before the capture below begins */
    fsa_test_capture_end(&own);

    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_selected_attention_fwd(plan, &b, graph.stream), FSA_STATUS_OK);
    forward_call f = {plan, &a};
    char message[512];
    const fsa_status st = fsa_test_call_on_another_thread(forward, &f, own.stream, message, sizeof message);
    fsa_test_capture_end(&graph); /* fails the test if the capture was invalidated */
    if (st != FSA_STATUS_OK) fail_msg("the measuring call: status %d, \"%s\"", (int)st, message);
    fsa_test_stream_sync(own.stream); /* non-blocking: the legacy stream's sync misses it */
    assert_int_equal(choice_of(plan, p.T).source, FSA_CHOICE_MEASURED);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), records + 1);
    outputs out;
    download_fwd(&out, &dp, &p, &wide);
    attn_check_o_and_lse(&out, &p, wide.hq, 1e-2, "the call that measured");
    outputs_free(&out);

    poison_fwd(&dq, &q, &k_case);
    fsa_test_graph_replay(&graph);
    download_fwd(&out, &dq, &q, &k_case);
    attn_check_o_and_lse(&out, &q, k_case.hq, 1e-2, "the graph captured meanwhile");
    outputs_free(&out);
    fsa_test_graph_free(&graph);
    fsa_test_graph_free(&own);
    device_free(&dq);
    device_free(&dp);
    problem_free(&q);
    problem_free(&p);
    fsa_plan_destroy(plan);
}

/* fsa_plan_tune (what fsa-precompile --tune --kv-heads calls) at 4 KV heads: a
 * plan of 4 KV heads then takes the record, also with tuning off; one of 2 KV
 * heads (the same G, D, BK, K) does not (the orders' costs scale apart with
 * the KV heads). */
static void test_a_record_of_one_kv_head_count_is_read_by_plans_of_that_count_only(void **state)
{
    (void)state;
    const int64_t T = 1000; /* bucket 1024: no record yet at either count */
    attn_case four = k_case;
    four.hkv = 4, four.hq = 4 * (k_case.hq / k_case.hkv);
    const fsa_selected_attention_desc d4 = attn_desc_of(&four, 0), d2 = attn_desc_of(&k_case, 0);
    fsa_plan *p4 = NULL;
    if (fsa_plan_create(&p4, g_ctx, &d4) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    assert_true(choice_of(p4, T).will_measure);
    const int records = count_records(g_cache_dir, fsa_context_target(g_ctx));
    int measured = 0;
    if (fsa_plan_tune(&measured, p4, FSA_OPERATION_FORWARD, T) != FSA_STATUS_OK) fail_msg("tune: %s", fsa_last_error());
    assert_int_equal(measured, 1);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), records + 1);
    fsa_plan_destroy(p4);

    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.cache_dir = g_cache_dir;
    o.tune = FSA_TUNE_OFF; /* records already on disk are still used */
    fsa_context *off = NULL;
    assert_int_equal(fsa_context_create(&off, &o), FSA_STATUS_OK);
    p4 = NULL;
    fsa_plan *p2 = NULL;
    assert_int_equal(fsa_plan_create(&p4, off, &d4), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_create(&p2, off, &d2), FSA_STATUS_OK);
    assert_int_equal(choice_of(p4, T).source, FSA_CHOICE_MEASURED);
    assert_int_equal(choice_of(p2, T).source, FSA_CHOICE_HEURISTIC);
    fsa_plan_destroy(p2);
    fsa_plan_destroy(p4);
    fsa_context_destroy(off);
}

/* A backward call with dq_add never measures (each variant timed would add it again; here it is dq itself):
 * the bucket keeps no record, dq is the reference's plus what dq held, once; a call without dq_add then
 * measures. */
static void test_a_backward_with_dq_add_never_measures(void **state)
{
    (void)state;
    const fsa_selected_attention_desc d = attn_desc_of(&k_case, 1);
    fsa_plan *plan = NULL;
    if (fsa_plan_create(&plan, g_ctx, &d) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    problem p;
    problem_make(&p, &k_case, 0xadd);
    device_problem dp;
    device_make(&dp, &p, &k_case, plan);
    fsa_fwd_args fa = fwd_args_of(&dp, &p);
    assert_int_equal(fsa_selected_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    assert_int_equal(fsa_plan_choice_get(&c, plan, FSA_OPERATION_BACKWARD, p.T), FSA_STATUS_OK);
    assert_int_equal(c.candidates, 2);
    assert_true(c.will_measure);

    const size_t nq = (size_t)p.T * k_case.hq * k_case.d, no = (size_t)p.T * k_case.hq * p.Dv;
    const size_t nkv = (size_t)p.T * k_case.hkv * k_case.d, nv = (size_t)p.T * k_case.hkv * p.Dv;
    fsa_rng rng = {0xadd0};
    float *dout = malloc(no * sizeof(float)), *held = malloc(nq * sizeof(float)), *dq = malloc(nq * sizeof(float));
    double *dq_ref = malloc(nq * sizeof(double)), *dk_ref = malloc(nkv * sizeof(double)),
           *dv_ref = malloc(nv * sizeof(double));
    assert_true(dout && held && dq && dq_ref && dk_ref && dv_ref);
    for (size_t i = 0; i < no; i++) dout[i] = attn_round_to(k_case.dtype, (float)fsa_rng_normal(&rng));
    for (size_t i = 0; i < nq; i++) held[i] = attn_round_to(k_case.dtype, (float)fsa_rng_normal(&rng));
    fsa_ref_problem rp = problem_ref(&p, &k_case);
    fsa_ref_backward(&rp, dout, dq_ref, dk_ref, dv_ref);

    fsa_bwd_args a = FSA_BWD_ARGS_INIT;
    a.total_tokens = p.T, a.batch = p.B;
    a.q = fa.q, a.k = fa.k, a.v = fa.v, a.o = fa.o, a.topk = fa.topk, a.cu_seqlens = fa.cu_seqlens, a.lse = fa.lse;
    a.dout = (fsa_tensor){upload_strided(dout, p.T, k_case.hq, p.Dv, p.o_ts, p.o_hs, k_case.dtype), p.o_ts, p.o_hs};
    a.dq = (fsa_tensor){upload_strided(held, p.T, k_case.hq, k_case.d, p.q_ts, p.q_hs, k_case.dtype), p.q_ts, p.q_hs};
    a.dk = (fsa_tensor){fsa_test_dalloc((size_t)p.T * p.kv_ts * 2), p.kv_ts, p.kv_hs};
    a.dv = (fsa_tensor){fsa_test_dalloc((size_t)p.T * p.v_ts * 2), p.v_ts, p.v_hs};
    assert_int_equal(fsa_plan_workspace_size_bwd(&a.workspace_bytes, plan, p.T, p.B), FSA_STATUS_OK);
    a.workspace = fsa_test_dalloc(a.workspace_bytes);
    a.dq_add = a.dq; /* in place */
    const int records = count_records(g_cache_dir, fsa_context_target(g_ctx));
    assert_int_equal(fsa_selected_attention_bwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    assert_int_equal(fsa_plan_choice_get(&c, plan, FSA_OPERATION_BACKWARD, p.T), FSA_STATUS_OK);
    assert_true(c.will_measure); /* nothing measured */
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), records);
    download_strided(dq, NULL, a.dq.ptr, p.T, k_case.hq, k_case.d, p.q_ts, p.q_hs, k_case.dtype);
    /* The per-row bound takes dq as given the forward's o, which the call read. */
    float *o = malloc(no * sizeof(float));
    assert_non_null(o);
    download_strided(o, NULL, dp.o, p.T, k_case.hq, p.Dv, p.o_ts, p.o_hs, k_case.dtype);
    attn_grads_given given;
    attn_grads_given_o(&given, &p, &k_case, dout, o);
    for (size_t i = 0; i < nq; i++) {
        dq_ref[i] += held[i];
        given.dq[i] += held[i];
    }
    const double err = attn_grad_error(dq, dq_ref, nq);
    const attn_row_err row = attn_grad_row_error(dq, given.dq, p.T, k_case.hq, k_case.d);
    free(o);
    attn_grads_given_free(&given);
    print_message("  dq + dq_add rel err %.3e (tol 2e-02), worst row (given the o read) %.3e (t %d h %d; tol %.0e), "
                  "tuning left for a later call\n",
                  err, row.err, row.t, row.h, ATTN_ROW_TOL * 2e-2);
    assert_true(err < 2e-2);
    assert_true(row.err < ATTN_ROW_TOL * 2e-2);
    /* A query that sees nothing adds nothing: its dq is dq_add's row, bit for bit. */
    int empty = 0;
    for (int h = 0; h < k_case.hq; h++)
        for (int t = 0; t < p.T; t++)
            if (p.empty_row[(size_t)h * p.T + t]) {
                empty++;
                assert_memory_equal(dq + ((size_t)t * k_case.hq + h) * k_case.d,
                                    held + ((size_t)t * k_case.hq + h) * k_case.d, k_case.d * sizeof(float));
            }
    print_message("  dq of %d query rows that see nothing: dq_add's rows\n", empty);

    a.dq_add.ptr = 0; /* a plain call measures */
    assert_int_equal(fsa_selected_attention_bwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    assert_int_equal(fsa_plan_choice_get(&c, plan, FSA_OPERATION_BACKWARD, p.T), FSA_STATUS_OK);
    assert_false(c.will_measure);
    assert_int_equal(count_records(g_cache_dir, fsa_context_target(g_ctx)), records + 1);

    fsa_test_dfree(a.dout.ptr);
    fsa_test_dfree(a.dq.ptr);
    fsa_test_dfree(a.dk.ptr);
    fsa_test_dfree(a.dv.ptr);
    fsa_test_dfree(a.workspace);
    free(dout);
    free(held);
    free(dq);
    free(dq_ref);
    free(dk_ref);
    free(dv_ref);
    device_free(&dp);
    problem_free(&p);
    fsa_plan_destroy(plan);
}

/* The second process: tuning on, a fresh context on the same cache. */
static int reuse_main(const char *cache_dir)
{
    setenv("FSA_TUNE", "on", 1);
    fsa_context *ctx = fsa_test_gpu_context_or_skip(cache_dir);
    fsa_plan *plan = NULL;
    const fsa_selected_attention_desc d = attn_desc_of(&k_case, 0);
    if (fsa_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) return 2;
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    if (fsa_plan_choice_get(&c, plan, FSA_OPERATION_FORWARD, CASE_T) != FSA_STATUS_OK) return 3;
    if (c.source != FSA_CHOICE_MEASURED || c.will_measure) {
        fprintf(stderr, "second process: source %d, will_measure %d\n", (int)c.source, c.will_measure);
        return 4;
    }
    fsa_plan_destroy(plan);
    fsa_context_destroy(ctx);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    g_cache_dir = fsa_test_mkdtemp("tuning-cache");
    setenv("FSA_TUNE", "on", 1); /* the environment's way; the second test uses the option */
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--reuse") == 0) return reuse_main(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_first_call_measures_records_and_answers_right),
        cmocka_unit_test(test_a_second_context_uses_the_record_without_measuring),
        cmocka_unit_test(test_a_second_process_uses_the_record_without_measuring),
        cmocka_unit_test(test_a_capturing_stream_never_measures),
        cmocka_unit_test(test_a_call_that_measures_while_another_thread_captures_leaves_the_capture_valid),
        cmocka_unit_test(test_a_record_of_one_kv_head_count_is_read_by_plans_of_that_count_only),
        cmocka_unit_test(test_a_backward_with_dq_add_never_measures),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
