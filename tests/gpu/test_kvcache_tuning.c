/* The split count of a paged-cache plan as a tuned variant, on the GPU:
 * with tuning off a call never measures; a call on a stream being captured
 * never measures; the first uncaptured call with tuning on measures on
 * scratch inputs, records the winner and still answers right; a later plan
 * reads the record; a damaged record is ignored and measured again; and
 * with a measured split count a sequence still gives the same bits alone
 * and inside a batch of 64; and the CTAs per sequence, which follow the
 * batch size, never change the bits; a call that measures while another
 * thread captures leaves that capture valid. Every answer (o over the tensor and
 * per row, lse per row) is checked against the float64 reference. */
#include "kvcache_fixture.h" /* kvc_check_against_reference only: these tests make their own contexts and plans */

#include "attention/kvcache.h"
#include "base/util.h"
#include "jit/context.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bf16, D 128, G 4 (Hkv 2), blocks of 64, top-k 16, pages of 64: splits 1, 2, 4 and 8 are the candidates. */
static const kvc_case k_case = {"bf16_d128_g4_k16", BF, 128, 8, 2, 64, 16, 64,
                                {{1, 3000}, {1, 70}, {4, 900}, {1, 0}, {2, 1500}}, 5, KVC_TOPK_THK, 0, 0, 0, 1};
enum { MAX_BATCH = KVC_MAX_SEQS, MAX_TOKENS = 512 };

static char *g_cache_dir;
static fsa_context *g_probe; /* keeps the device's context current for the tests' own driver calls */

static fsa_context *context_in(const char *cache_dir, fsa_tune_mode mode)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.cache_dir = cache_dir;
    o.tune = mode;
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) fail_msg("context: %s", fsa_last_error());
    return ctx;
}

static fsa_context *context_with(fsa_tune_mode mode) { return context_in(g_cache_dir, mode); }

static fsa_kvcache_plan *plan_of(fsa_context *ctx)
{
    const fsa_kvcache_desc d = kvc_desc_of(&k_case, MAX_BATCH, MAX_TOKENS);
    fsa_kvcache_plan *plan = NULL;
    if (fsa_kvcache_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    return plan;
}

static fsa_plan_choice choice_of(const fsa_kvcache_plan *plan)
{
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    assert_int_equal(fsa_kvcache_plan_choice_get(&c, plan), FSA_STATUS_OK);
    return c;
}

/* The record files (*.tune) of the context's cache; the path of the last one in `path`. */
static int count_records(const fsa_context *ctx, char *path, size_t n)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", ctx->cache_dir, fsa_context_target(ctx));
    DIR *d = opendir(dir);
    int count = 0;
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".tune") == 0 && e->d_name[0] != '.') {
            count++;
            if (path && (size_t)snprintf(path, n, "%s/", dir) + len < n) strcat(path, e->d_name);
        }
    }
    closedir(d);
    return count;
}

/* One call on the legacy stream, checked against the float64 reference (o over the tensor and per row, lse
 * per row: kvc_check_against_reference). */
static void run_and_check(const fsa_kvcache_plan *plan, kvc_problem *p, const char *name, kvc_outputs *keep)
{
    kvc_device dv;
    kvc_device_make(&dv, p, plan);
    kvc_poison(&dv, p);
    fsa_kvcache_args a = kvc_args_of(&dv, p);
    if (fsa_kvcache_attention(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("call: %s", fsa_last_error());
    fsa_test_sync();
    kvc_outputs out;
    kvc_download(&out, &dv, p);
    print_message("  variant %s\n", choice_of(plan).variant);
    kvc_check_against_reference(&out, p, name);
    if (keep) *keep = out;
    else kvc_outputs_free(&out);
    kvc_device_free(&dv);
}

static void run_case(const fsa_kvcache_plan *plan)
{
    kvc_problem p;
    kvc_problem_make(&p, &k_case, 0x5eed);
    kvc_problem_reference(&p);
    run_and_check(plan, &p, k_case.name, NULL);
    kvc_problem_free(&p);
}

static void test_tuning_off_never_measures(void **state)
{
    (void)state;
    fsa_context *ctx = context_with(FSA_TUNE_OFF);
    fsa_kvcache_plan *plan = plan_of(ctx);
    fsa_plan_choice c = choice_of(plan);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_int_equal(c.candidates, 4);
    assert_int_equal(c.splits, 8); /* 1 MiB of K/V per token (Hkv 2): shares of two blocks */
    assert_false(c.will_measure);
    run_case(plan);
    assert_int_equal(choice_of(plan).source, FSA_CHOICE_HEURISTIC);
    assert_int_equal(count_records(ctx, NULL, 0), 0);
    int measured = 1;
    assert_int_equal(fsa_kvcache_plan_tune(&measured, plan, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(measured, 0);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static void test_a_capturing_stream_never_measures(void **state)
{
    (void)state;
    fsa_context *ctx = context_with(FSA_TUNE_ON);
    fsa_kvcache_plan *plan = plan_of(ctx);
    assert_true(choice_of(plan).will_measure);
    kvc_problem p;
    kvc_problem_make(&p, &k_case, 11);
    kvc_problem_reference(&p);
    kvc_device dv;
    kvc_device_make(&dv, &p, plan);
    fsa_kvcache_args a = kvc_args_of(&dv, &p);
    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_kvcache_attention(plan, &a, graph.stream), FSA_STATUS_OK);
    int measured = 1;
    assert_int_equal(fsa_kvcache_plan_tune(&measured, plan, graph.stream), FSA_STATUS_OK);
    assert_int_equal(measured, 0);
    fsa_test_capture_end(&graph);
    /* Nothing measured: no record, the heuristic still, and the graph runs right. */
    fsa_plan_choice c = choice_of(plan);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.will_measure);
    assert_int_equal(count_records(ctx, NULL, 0), 0);
    kvc_poison(&dv, &p);
    fsa_test_graph_replay(&graph);
    kvc_outputs out;
    kvc_download(&out, &dv, &p);
    kvc_check_against_reference(&out, &p, "graph replay");
    kvc_outputs_free(&out);
    fsa_test_graph_free(&graph);
    kvc_device_free(&dv);
    kvc_problem_free(&p);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static void test_the_first_call_measures_records_and_answers_right(void **state)
{
    (void)state;
    fsa_context *ctx = context_with(FSA_TUNE_ON);
    fsa_kvcache_plan *plan = plan_of(ctx);
    assert_int_equal(count_records(ctx, NULL, 0), 0);
    const double t0 = fsa_now_ms();
    run_case(plan); /* measures first, on scratch inputs */
    const double ms = fsa_now_ms() - t0;
    fsa_plan_choice c = choice_of(plan);
    print_message("  first call (measuring): %.1f ms, chose %s (%d shares)\n", ms, c.variant, c.splits);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    assert_false(c.will_measure);
    assert_true(c.splits == 1 || c.splits == 2 || c.splits == 4 || c.splits == 8);
    assert_int_equal(count_records(ctx, NULL, 0), 1);
    run_case(plan);
    fsa_kvcache_plan_destroy(plan);
    /* A later plan of the same shape reads the record and never measures. */
    plan = plan_of(ctx);
    fsa_plan_choice again = choice_of(plan);
    assert_int_equal(again.source, FSA_CHOICE_MEASURED);
    assert_int_equal(again.splits, c.splits);
    assert_false(again.will_measure);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static void test_a_damaged_record_is_ignored_and_measured_again(void **state)
{
    (void)state;
    fsa_context *ctx = context_with(FSA_TUNE_ON);
    char path[8192];
    assert_int_equal(count_records(ctx, path, sizeof path), 1); /* from the test before */
    fsa_test_damage_file(path, 3);
    fsa_kvcache_plan *plan = plan_of(ctx);
    fsa_plan_choice c = choice_of(plan);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.will_measure);
    fsa_cache_stats stats = FSA_CACHE_STATS_INIT;
    assert_int_equal(fsa_context_cache_stats(&stats, ctx), FSA_STATUS_OK);
    assert_true(stats.corrupt_entries >= 1);
    int measured = 0;
    assert_int_equal(fsa_kvcache_plan_tune(&measured, plan, NULL), FSA_STATUS_OK);
    assert_int_equal(measured, 1);
    assert_int_equal(choice_of(plan).source, FSA_CHOICE_MEASURED);
    fsa_kvcache_plan_destroy(plan);
    /* The record written again is whole: a new plan reads it. */
    plan = plan_of(ctx);
    assert_int_equal(choice_of(plan).source, FSA_CHOICE_MEASURED);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

/* With the measured split count in force: a batch of 64 mixing decode and
 * speculative lengths, and sequences of it alone, give identical bits. */
static void test_batch_invariance_holds_with_a_measured_split_count(void **state)
{
    (void)state;
    fsa_context *ctx = context_with(FSA_TUNE_ON);
    fsa_kvcache_plan *plan = plan_of(ctx);
    assert_int_equal(choice_of(plan).source, FSA_CHOICE_MEASURED);
    kvc_case c = k_case;
    fsa_rng rng = {3};
    c.nseq = 64;
    for (int b = 0; b < 64; b++) {
        c.seqs[b].q_len = b % 11 == 0 ? 0 : b % 4 == 0 ? fsa_rng_int(&rng, 2, 6) : 1;
        c.seqs[b].cached = fsa_rng_int(&rng, 0, 4000);
    }
    kvc_problem p;
    kvc_problem_make(&p, &c, 99);
    kvc_problem_reference(&p);
    const int checked[] = {1, 4, 33, 63};
    kvc_assert_batch_invariant(plan, &p, checked, 4, run_and_check);
    kvc_problem_free(&p);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

/* Many (sequence, KV head) pairs: the batch of 64 runs its shares on fewer
 * CTAs per pair than a sequence alone (one CTA for all four shares, against
 * a CTA per share), and the bits are the same. */
static void test_the_cta_count_follows_the_batch_and_the_bits_do_not(void **state)
{
    (void)state;
    kvc_case c = {"bf16_d64_g1_hkv32", BF, 64, 32, 32, 64, 16, 64, {{1, 0}}, 64, KVC_TOPK_HTK, 0, 0, 1, 0};
    fsa_rng rng = {5};
    for (int b = 0; b < 64; b++) {
        c.seqs[b].q_len = b % 13 == 0 ? 3 : 1;
        c.seqs[b].cached = fsa_rng_int(&rng, 0, 3000);
    }
    fsa_context *ctx = context_with(FSA_TUNE_OFF);
    const fsa_kvcache_desc d = kvc_desc_of(&c, MAX_BATCH, MAX_TOKENS);
    fsa_kvcache_plan *plan = NULL;
    if (fsa_kvcache_plan_create(&plan, ctx, &d) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    assert_int_equal(choice_of(plan).splits, 4);
    /* 64 x 32 pairs fill the device twice over with one CTA per pair, which then computes all four
     * shares (kvcache.c: ctas_per_pair). */
    print_message("  %d CTAs resident at once; CTAs per pair: %d at batch 64, %d at batch 1\n", plan->resident,
                  fsa_kvc_ctas_per_pair(plan, 64, 4), fsa_kvc_ctas_per_pair(plan, 1, 4));
    assert_true(64 * 32 >= 2 * plan->resident);
    /* Two launch shapes, or the bits below compare one path with itself. */
    assert_true(fsa_kvc_ctas_per_pair(plan, 64, 4) < fsa_kvc_ctas_per_pair(plan, 1, 4));
    kvc_problem p;
    kvc_problem_make(&p, &c, 123);
    kvc_problem_reference(&p);
    const int checked[] = {0, 2, 13, 40, 63};
    kvc_assert_batch_invariant(plan, &p, checked, 5, run_and_check);
    kvc_problem_free(&p);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

typedef struct paged_call {
    const fsa_kvcache_plan *plan;
    const fsa_kvcache_args *a;
} paged_call;

static fsa_status paged_attention(void *arg, void *stream)
{
    const paged_call *c = arg;
    return fsa_kvcache_attention(c->plan, c->a, stream); /* measures: scratch allocations, event waits */
}

/* The tuner's scratch allocations and waits run in relaxed capture mode: in
 * the default mode, with another thread capturing in global mode (PyTorch's
 * default), the driver refuses them and invalidates that capture. A cache of
 * its own, so that the call has no record to read. */
static void test_a_call_that_measures_while_another_thread_captures_leaves_the_capture_valid(void **state)
{
    (void)state;
    char *dir = fsa_test_mkdtemp("kvcache-tuning-capture");
    fsa_context *ctx = context_in(dir, FSA_TUNE_ON);
    fsa_kvcache_plan *plan = plan_of(ctx);
    assert_true(choice_of(plan).will_measure);
    kvc_problem p, q;
    kvc_problem_make(&p, &k_case, 21);
    kvc_problem_make(&q, &k_case, 22);
    kvc_problem_reference(&p);
    kvc_problem_reference(&q);
    kvc_device dp, dq;
    kvc_device_make(&dp, &p, plan);
    kvc_device_make(&dq, &q, plan);
    kvc_poison(&dp, &p);
    const fsa_kvcache_args a = kvc_args_of(&dp, &p), b = kvc_args_of(&dq, &q);
    fsa_test_graph own;
    fsa_test_capture_begin(&own); /* a stream created before the capture below begins */
    fsa_test_capture_end(&own);

    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_kvcache_attention(plan, &b, graph.stream), FSA_STATUS_OK); /* captured: no measuring */
    paged_call c = {plan, &a};
    char message[512];
    const fsa_status st = fsa_test_call_on_another_thread(paged_attention, &c, own.stream, message, sizeof message);
    fsa_test_capture_end(&graph); /* fails the test if the capture was invalidated */
    if (st != FSA_STATUS_OK) fail_msg("the measuring call: status %d, \"%s\"", (int)st, message);
    fsa_test_stream_sync(own.stream); /* non-blocking: the legacy stream's sync misses it */
    assert_int_equal(choice_of(plan).source, FSA_CHOICE_MEASURED);
    assert_int_equal(count_records(ctx, NULL, 0), 1);
    kvc_outputs out;
    kvc_download(&out, &dp, &p);
    kvc_check_against_reference(&out, &p, "the call that measured");
    kvc_outputs_free(&out);

    kvc_poison(&dq, &q);
    fsa_test_graph_replay(&graph);
    kvc_download(&out, &dq, &q);
    kvc_check_against_reference(&out, &q, "the graph captured meanwhile");
    kvc_outputs_free(&out);
    fsa_test_graph_free(&graph);
    fsa_test_graph_free(&own);
    kvc_device_free(&dq);
    kvc_device_free(&dp);
    kvc_problem_free(&q);
    kvc_problem_free(&p);
    fsa_kvcache_plan_destroy(plan);
    fsa_context_destroy(ctx);
    fsa_test_rmtree(dir);
    free(dir);
}

static int setup(void **state)
{
    (void)state;
    g_cache_dir = fsa_test_mkdtemp("kvcache-tuning");
    g_probe = fsa_test_gpu_context_or_skip(g_cache_dir); /* skips without a GPU */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_context_destroy(g_probe);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    /* In order: the later tests use the record the third one writes. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tuning_off_never_measures),
        cmocka_unit_test(test_a_capturing_stream_never_measures),
        cmocka_unit_test(test_the_first_call_measures_records_and_answers_right),
        cmocka_unit_test(test_a_damaged_record_is_ignored_and_measured_again),
        cmocka_unit_test(test_batch_invariance_holds_with_a_measured_split_count),
        cmocka_unit_test(test_the_cta_count_follows_the_batch_and_the_bits_do_not),
        cmocka_unit_test(test_a_call_that_measures_while_another_thread_captures_leaves_the_capture_valid),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
