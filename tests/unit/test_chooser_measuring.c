/* When and how the chooser measures, through a stand-in driver (no GPU):
 * only an uncaptured stream with tuning on and no record measures (never
 * with tuning off or while capturing); measuring takes the faster order and
 * records it, and a later plan reuses the record (force measures again);
 * while a bucket may be measured its workspace serves every candidate (the
 * chosen order's when the FSA order cannot run the shape); and
 * FSA_TUNE and the context option set the tuning level. */
#include "chooser_fixture.h"

#include <stdlib.h>

static void test_only_an_uncaptured_stream_with_tuning_on_and_no_record_measures(void **state)
{
    (void)state;
    assert_true(fsa_tune_should_measure(FSA_TUNE_LEVEL_ON, 0, 2, 1, 0));
    assert_true(fsa_tune_should_measure(FSA_TUNE_LEVEL_FORCE, 0, 2, 1, 0));
    assert_false(fsa_tune_should_measure(FSA_TUNE_LEVEL_OFF, 0, 2, 1, 0));
    assert_false(fsa_tune_should_measure(FSA_TUNE_LEVEL_ON, 0, 2, 1, 1));  /* capturing */
    assert_false(fsa_tune_should_measure(FSA_TUNE_LEVEL_ON, 0, 2, 1, -1)); /* cannot tell */
    assert_false(fsa_tune_should_measure(FSA_TUNE_LEVEL_ON, 1, 2, 1, 0));  /* a record */
    assert_false(fsa_tune_should_measure(FSA_TUNE_LEVEL_ON, 0, 1, 1, 0));  /* nothing to choose */
    assert_false(fsa_tune_should_measure(FSA_TUNE_LEVEL_ON, 0, 2, 0, 0));  /* no device */
}

static void test_with_tuning_off_a_call_never_measures(void **state)
{
    fixture *f = *state;
    int measured = 1;
    f->ctx.cu = fake_driver();
    g_capturing = 0;
    make_plan(&f->plan, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_OFF);
    fsa_variant v = pick(&f->plan, 1000, &measured);
    assert_false(measured);
    assert_int_equal(g_runs[0] + g_runs[1], 0);
    assert_int_equal(v.order, FSA_ALGORITHM_FSA); /* the heuristic's */
    fsa_choice c;
    fsa_choose(&c, &f->plan, FSA_OP_FWD, 1000);
    assert_false(c.may_measure);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    f->ctx.cu = NULL;
}

static void test_a_capturing_stream_never_measures_and_gets_the_heuristic(void **state)
{
    fixture *f = *state;
    int measured = 1;
    f->ctx.cu = fake_driver();
    g_capturing = 1;
    fsa_variant v = pick(&f->plan, 1000, &measured);
    assert_false(measured);
    assert_int_equal(g_runs[0] + g_runs[1], 0);
    assert_int_equal(v.order, FSA_ALGORITHM_FSA);
    /* Still no record: the next uncaptured call measures. */
    g_capturing = 0;
    v = pick(&f->plan, 1000, &measured);
    assert_true(measured);
    assert_int_equal(v.order, FSA_ALGORITHM_NSA);
    f->ctx.cu = NULL;
}

static void test_measuring_takes_the_faster_order_records_it_and_a_new_plan_reuses_it(void **state)
{
    fixture *f = *state;
    int measured = 0;
    f->ctx.cu = fake_driver();
    g_capturing = 0;
    char *path = record_path(&f->plan, FSA_OP_FWD, 1000);
    assert_false(record_exists(path));
    fsa_variant v = pick(&f->plan, 1000, &measured);
    assert_true(measured);
    assert_int_equal(v.order, FSA_ALGORITHM_NSA); /* the heuristic would take FSA at T = 1000, G = 4 */
    assert_true(g_runs[0] >= 2 && g_runs[1] >= 2); /* an untimed and at least one timed run each */
    assert_true(g_runs[0] <= 1 + FSA_TUNE_MAX_REPEATS && g_runs[1] <= 1 + FSA_TUNE_MAX_REPEATS);
    assert_true(record_exists(path));
    /* The same bucket (T = 513..1024) again: the plan's record, no measuring. */
    v = pick(&f->plan, 600, &measured);
    assert_false(measured);
    assert_int_equal(g_runs[0] + g_runs[1], 0);
    assert_int_equal(v.order, FSA_ALGORITHM_NSA);
    fsa_choice c;
    fsa_choose(&c, &f->plan, FSA_OP_FWD, 1024);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    /* Another bucket is not covered. */
    fsa_choose(&c, &f->plan, FSA_OP_FWD, 1025);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.may_measure);

    /* A later plan (as in another process) reads the record and never measures. */
    fsa_plan later;
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    fsa_tune_load_records(&later);
    fsa_choose(&c, &later, FSA_OP_FWD, 1000);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    assert_int_equal(c.variant.order, FSA_ALGORITHM_NSA);
    v = pick(&later, 1000, &measured);
    assert_false(measured);
    assert_int_equal(g_runs[0] + g_runs[1], 0);
    /* With tuning off, records are still used. */
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_OFF);
    later.bwd_nsa_available = 0;
    fsa_tune_load_records(&later);
    fsa_choose(&c, &later, FSA_OP_FWD, 1000);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    /* force ignores records on disk: the plan measures again. */
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_FORCE);
    fsa_tune_load_records(&later);
    fsa_choose(&c, &later, FSA_OP_FWD, 1000);
    assert_true(c.may_measure);
    v = pick(&later, 1000, &measured);
    assert_true(measured);
    free(path);
    f->ctx.cu = NULL;
}

static void test_while_a_bucket_may_measure_the_workspace_serves_every_candidate(void **state)
{
    fixture *f = *state;
    int measured = 0;
    /* T = 40, G = 4: the heuristic takes the NSA order (no workspace), but a measuring call runs both. */
    assert_int_equal(fsa_plan_choose(&f->plan, 40, NULL), FSA_ALGORITHM_NSA);
    assert_int_equal(fsa_workspace_order(&f->plan, FSA_OP_FWD, 40), FSA_ALGORITHM_FSA);
    assert_int_equal(fsa_workspace_order(&f->plan, FSA_OP_BWD, 40), FSA_ALGORITHM_FSA);
    f->ctx.cu = fake_driver();
    g_capturing = 0;
    (void)pick(&f->plan, 40, &measured);
    assert_true(measured);
    /* Recorded: the recorded order's workspace. */
    assert_int_equal(fsa_workspace_order(&f->plan, FSA_OP_FWD, 40), FSA_ALGORITHM_NSA);
    /* Tuning off: the heuristic's order. */
    make_plan(&f->plan, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_OFF);
    assert_int_equal(fsa_workspace_order(&f->plan, FSA_OP_FWD, 40), FSA_ALGORITHM_NSA);
    f->ctx.cu = NULL;
}

/* Another thread's call is measuring the bucket: this call takes the
 * heuristic unmeasured, but a workspace sized now is reused after the record
 * lands, when calls may take the FSA order. */
static void test_while_another_call_measures_the_workspace_still_serves_every_candidate(void **state)
{
    fixture *f = *state;
    atomic_store(&f->plan.tune.slot[FSA_OP_FWD][fsa_tune_bucket(40)], FSA_TUNE_SLOT_BUSY);
    assert_int_equal(fsa_plan_choose(&f->plan, 40, NULL), FSA_ALGORITHM_NSA);
    assert_int_equal(fsa_workspace_order(&f->plan, FSA_OP_FWD, 40), FSA_ALGORITHM_FSA);
    size_t busy = 0, recorded = 0;
    assert_int_equal(fsa_plan_workspace_size(&busy, &f->plan, 40, 1), FSA_STATUS_OK);
    atomic_store(&f->plan.tune.slot[FSA_OP_FWD][fsa_tune_bucket(40)], 1); /* candidate 1: the FSA order */
    assert_int_equal(fsa_plan_choose(&f->plan, 40, NULL), FSA_ALGORITHM_FSA);
    assert_int_equal(fsa_plan_workspace_size(&recorded, &f->plan, 40, 1), FSA_STATUS_OK);
    assert_true(recorded > 0);
    assert_true(busy >= recorded);
}

/* Measuring wants the FSA layout, but when that order cannot run this shape
 * (here: 2 KV heads x top-k 2^30 list entries per token exceed int32) the
 * call runs the heuristic's order unmeasured, which needs no workspace. */
static void test_a_measuring_bucket_whose_fsa_layout_cannot_exist_asks_for_the_chosen_orders(void **state)
{
    fixture *f = *state;
    f->plan.desc.top_k = 1 << 30;
    assert_int_equal(fsa_workspace_order(&f->plan, FSA_OP_FWD, 40), FSA_ALGORITHM_FSA);
    assert_int_equal(fsa_plan_choose(&f->plan, 40, NULL), FSA_ALGORITHM_NSA);
    size_t bytes = 1;
    assert_int_equal(fsa_plan_workspace_size(&bytes, &f->plan, 40, 1), FSA_STATUS_OK);
    assert_int_equal(bytes, 0);
    /* Where the heuristic itself takes the FSA order, the shape is refused. */
    bytes = 1;
    assert_int_equal(fsa_plan_workspace_size(&bytes, &f->plan, 1000, 1), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("plan", "exceed int32");
    assert_int_equal(bytes, 0);
}

/* A token's list entries must leave the forward's work counter its steps past the last item: within int32
 * but past that room is refused, not left to wrap the counter. */
static void test_list_entries_that_leave_the_work_counter_no_room_are_refused(void **state)
{
    fixture *f = *state;
    f->plan.desc.num_kv_heads = 1;
    f->plan.desc.top_k = (int)(fsa_fwd_pair_room(&f->plan) + 1);
    assert_true(f->plan.desc.top_k <= INT32_MAX - 1); /* what the int32 bound alone let through */
    size_t bytes = 1;
    assert_int_equal(fsa_plan_workspace_size(&bytes, &f->plan, 1000, 1), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("plan", "exceed int32");
    assert_int_equal(bytes, 0);
}

/* ------------------------------------------------------------ options */

static void test_fsa_tune_and_the_context_option_set_the_level(void **state)
{
    (void)state;
    fsa_context *ctx = NULL;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_90a";
    o.cache_mode = FSA_CACHE_MODE_OFF;
    unsetenv("FSA_TUNE");
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
    assert_int_equal(ctx->tune, FSA_TUNE_LEVEL_OFF); /* the default */
    fsa_context_destroy(ctx);
    const char *env[] = {"off", "on", "FORCE"};
    for (int i = 0; i < 3; i++) {
        setenv("FSA_TUNE", env[i], 1);
        assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
        assert_int_equal(ctx->tune, i);
        fsa_context_destroy(ctx);
    }
    o.tune = FSA_TUNE_OFF; /* the option wins over the environment */
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
    assert_int_equal(ctx->tune, FSA_TUNE_LEVEL_OFF);
    fsa_context_destroy(ctx);
    o.tune = (fsa_tune_mode)7;
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_INVALID_ARGUMENT);
    o.tune = FSA_TUNE_DEFAULT;
    setenv("FSA_TUNE", "sometimes", 1);
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_INVALID_ARGUMENT);
    unsetenv("FSA_TUNE");
}

#define T(name) cmocka_unit_test_setup_teardown(name, chooser_setup, chooser_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_only_an_uncaptured_stream_with_tuning_on_and_no_record_measures),
        T(test_with_tuning_off_a_call_never_measures),
        T(test_a_capturing_stream_never_measures_and_gets_the_heuristic),
        T(test_measuring_takes_the_faster_order_records_it_and_a_new_plan_reuses_it),
        T(test_while_a_bucket_may_measure_the_workspace_serves_every_candidate),
        T(test_while_another_call_measures_the_workspace_still_serves_every_candidate),
        T(test_a_measuring_bucket_whose_fsa_layout_cannot_exist_asks_for_the_chosen_orders),
        T(test_list_entries_that_leave_the_work_counter_no_room_are_refused),
        T(test_fsa_tune_and_the_context_option_set_the_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
