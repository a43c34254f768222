/* The chooser and tuning records, without a GPU: token buckets and record
 * keys, the heuristic's choices, the decision to measure (tuning off, a
 * capturing stream), measuring through a stand-in driver whose events say
 * which order is faster, and records on disk: reused by a later plan,
 * ignored and measured again when damaged, truncated or foreign. */
#include "testing.h"

#include "attention/tuning.h"
#include "jit/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ a plan without kernels */

typedef struct fixture {
    char *root;
    fsa_context ctx;
    fsa_plan plan;
} fixture;

static void make_plan(fsa_plan *p, fsa_context *ctx, int group, fsa_algorithm alg, fsa_tune_level level)
{
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->desc = (fsa_selected_attention_desc)FSA_SELECTED_ATTENTION_DESC_INIT;
    p->desc.num_kv_heads = 2;
    p->desc.num_q_heads = 2 * group;
    p->desc.algorithm = alg;
    p->desc.backward = 1;
    p->desc.value_dim = p->desc.head_dim; /* resolved, as fsa_plan_create leaves it */
    p->group = group;
    p->fsa_available = alg != FSA_ALGORITHM_NSA;
    p->nsa_available = alg != FSA_ALGORITHM_FSA;
    p->bwd_available = 1;
    p->bwd_nsa_available = alg == FSA_ALGORITHM_NSA || level != FSA_TUNE_LEVEL_OFF;
    p->tune.level = level;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->root = fsa_test_mkdtemp("fsa_tuning");
    if (f->root == NULL || fsa_disk_cache_open(&f->ctx.disk, f->root, 0) != FSA_STATUS_OK) return -1;
    f->ctx.target = "sm_90a";
    snprintf(f->ctx.gpu_name, sizeof f->ctx.gpu_name, "NVIDIA Test GPU");
    f->ctx.sm_count = 132;
    f->ctx.tune = FSA_TUNE_LEVEL_ON;
    make_plan(&f->plan, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fsa_disk_cache_close(f->ctx.disk);
    fsa_test_rmtree(f->root);
    free(f->root);
    free(f);
    return 0;
}

/* ------------------------------------------------------------ a stand-in driver */

static int g_capturing, g_runs[2];
static fsa_algorithm g_last;

static CUresult fake_is_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    *st = g_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
static CUresult fake_event_create(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = (CUevent)(uintptr_t)0x1000;
    return CUDA_SUCCESS;
}
static CUresult fake_event_destroy(CUevent e) { (void)e; return CUDA_SUCCESS; }
static CUresult fake_event_record(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
static CUresult fake_event_sync(CUevent e) { (void)e; return CUDA_SUCCESS; }
/* The NSA order "takes" 0.5 ms, the FSA order 1 ms. */
static CUresult fake_elapsed(float *ms, CUevent a, CUevent b)
{
    (void)a, (void)b;
    *ms = g_last == FSA_ALGORITHM_NSA ? 0.5f : 1.0f;
    return CUDA_SUCCESS;
}

static fsa_status fake_run(const void *call, const fsa_plan *plan, const fsa_variant *v, CUstream stream)
{
    (void)call, (void)plan, (void)stream;
    g_last = v->order;
    g_runs[v->order == FSA_ALGORITHM_NSA]++;
    return FSA_STATUS_OK;
}

static const fsa_cu_api *fake_driver(void)
{
    static fsa_cu_api cu;
    cu.StreamIsCapturing = fake_is_capturing;
    cu.EventCreate = fake_event_create;
    cu.EventDestroy = fake_event_destroy;
    cu.EventRecord = fake_event_record;
    cu.EventSynchronize = fake_event_sync;
    cu.EventElapsedTime = fake_elapsed;
    return &cu;
}

static fsa_variant pick(fsa_plan *plan, int64_t T, int *measured)
{
    fsa_variant v;
    g_runs[0] = g_runs[1] = 0;
    assert_int_equal(fsa_tune_pick(&v, measured, plan, FSA_OP_FWD, T, NULL, fake_run, NULL), FSA_STATUS_OK);
    return v;
}

static char *record_path(const fsa_plan *plan, fsa_op_kind op, int64_t T)
{
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, plan, op, fsa_tune_bucket(T)), FSA_STATUS_OK);
    char *path = fsa_disk_cache_record_path(plan->ctx->disk, &key, plan->ctx->target);
    fsa_key_free(&key);
    assert_non_null(path);
    return path;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ------------------------------------------------------------ buckets and keys */

static void test_buckets_round_token_counts_up_to_a_power_of_two(void **state)
{
    (void)state;
    assert_int_equal(fsa_tune_bucket(0), 0);
    assert_int_equal(fsa_tune_bucket(1), 0);
    assert_int_equal(fsa_tune_bucket(2), 1);
    assert_int_equal(fsa_tune_bucket(3), 2);
    assert_int_equal(fsa_tune_bucket(64), 6);
    assert_int_equal(fsa_tune_bucket(65), 7);
    assert_int_equal(fsa_tune_bucket(INT32_MAX - 1), 31);
    assert_int_equal(fsa_tune_bucket_tokens(7), 128);
}

static void test_a_record_key_names_every_field_of_the_bucket(void **state)
{
    fixture *f = *state;
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    const char *want[] = {"fsa-tuning-key 1\n", "library " FSA_VERSION_STRING "\n", "\ntemplates ", "\nop fwd\n",
                          "\ntokens 128\n", "\ndtype bf16\n", "\nhead_dim 128\n", "\nvalue_dim 128\n", "\ngroup 4\n",
                          "\nblock_size 64\n", "\ntop_k 16\n", "\ntarget sm_90a\n", "\ngpu NVIDIA Test GPU\n", "\nsms 132\n",
                          "\ncandidates fsa nsa\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(key.text, want[i]) == NULL) fail_msg("%s lacks %s", key.text, want[i]);
    assert_string_equal(key.name, "tune_fwd_bf16_d128_dv128_g4_bk64_k16_t128");
    /* Another GPU model, another SM count, another bucket: another key. */
    fsa_kernel_key other;
    snprintf(f->ctx.gpu_name, sizeof f->ctx.gpu_name, "NVIDIA Other GPU");
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other.hex);
    fsa_key_free(&other);
    f->ctx.sm_count = 78;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other.hex);
    fsa_key_free(&other);
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(129)), FSA_STATUS_OK);
    assert_string_equal(other.name, "tune_fwd_bf16_d128_dv128_g4_bk64_k16_t256");
    fsa_key_free(&other);
    fsa_key_free(&key);
}

/* ------------------------------------------------------------ the heuristic */

static fsa_algorithm heuristic(fsa_context *ctx, int group, fsa_op_kind op, int64_t T, fsa_choice_source *src)
{
    fsa_plan p;
    const char *why = NULL;
    make_plan(&p, ctx, group, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_OFF);
    fsa_variant v = fsa_heuristic(&p, op, T, src, &why);
    assert_non_null(why);
    return v.order;
}

static void test_the_heuristic_takes_the_nsa_order_up_to_64_tokens_for_every_group(void **state)
{
    fixture *f = *state;
    fsa_choice_source src;
    const int groups[] = {1, 2, 4, 8, 16, 64};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        assert_int_equal(heuristic(&f->ctx, groups[i], FSA_OP_FWD, 1, &src), FSA_ALGORITHM_NSA);
        assert_int_equal(src, FSA_CHOICE_HEURISTIC);
        assert_int_equal(heuristic(&f->ctx, groups[i], FSA_OP_FWD, 64, &src), FSA_ALGORITHM_NSA);
    }
    assert_int_equal(heuristic(&f->ctx, 1, FSA_OP_FWD, 65, &src), FSA_ALGORITHM_FSA);
    assert_int_equal(heuristic(&f->ctx, 4, FSA_OP_FWD, 65, &src), FSA_ALGORITHM_FSA);
    assert_int_equal(heuristic(&f->ctx, 8, FSA_OP_FWD, 256, &src), FSA_ALGORITHM_NSA);
    assert_int_equal(heuristic(&f->ctx, 8, FSA_OP_FWD, 257, &src), FSA_ALGORITHM_FSA);
    assert_int_equal(heuristic(&f->ctx, 16, FSA_OP_FWD, 512, &src), FSA_ALGORITHM_NSA);
    assert_int_equal(heuristic(&f->ctx, 16, FSA_OP_FWD, 513, &src), FSA_ALGORITHM_FSA);
    /* The backward computes dq in the FSA order at every size. */
    assert_int_equal(heuristic(&f->ctx, 1, FSA_OP_BWD, 1, &src), FSA_ALGORITHM_FSA);
    assert_int_equal(heuristic(&f->ctx, 64, FSA_OP_BWD, 65536, &src), FSA_ALGORITHM_FSA);
}

static void test_a_forced_order_or_the_only_fitting_one_is_taken_as_such(void **state)
{
    fixture *f = *state;
    fsa_plan p;
    fsa_choice c;
    make_plan(&p, &f->ctx, 1, FSA_ALGORITHM_FSA, FSA_TUNE_LEVEL_ON);
    fsa_choose(&c, &p, FSA_OP_FWD, 1);
    assert_int_equal(c.variant.order, FSA_ALGORITHM_FSA);
    assert_int_equal(c.source, FSA_CHOICE_FORCED);
    assert_int_equal(c.candidates, 1);
    assert_false(c.may_measure);
    make_plan(&p, &f->ctx, 1, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    p.nsa_available = 0; /* the NSA kernel does not fit */
    fsa_choose(&c, &p, FSA_OP_FWD, 1);
    assert_int_equal(c.variant.order, FSA_ALGORITHM_FSA);
    assert_int_equal(c.source, FSA_CHOICE_ONLY_ONE);
    assert_false(c.may_measure);
}

/* ------------------------------------------------------------ when to measure */

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

/* ------------------------------------------------------------ measuring and records */

static void test_measuring_takes_the_faster_order_records_it_and_a_new_plan_reuses_it(void **state)
{
    fixture *f = *state;
    int measured = 0;
    f->ctx.cu = fake_driver();
    g_capturing = 0;
    char *path = record_path(&f->plan, FSA_OP_FWD, 1000);
    assert_false(exists(path));
    fsa_variant v = pick(&f->plan, 1000, &measured);
    assert_true(measured);
    assert_int_equal(v.order, FSA_ALGORITHM_NSA); /* the heuristic would take FSA at T = 1000, G = 4 */
    assert_true(g_runs[0] >= 2 && g_runs[1] >= 2); /* an untimed and at least one timed run each */
    assert_true(g_runs[0] <= 1 + FSA_TUNE_MAX_REPEATS && g_runs[1] <= 1 + FSA_TUNE_MAX_REPEATS);
    assert_true(exists(path));
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

/* Records one bucket with the stand-in driver, damages the file with
 * `damage`, then checks a new plan ignores it (counted; deleted when the
 * entry itself is bad, replaced by the next publish when only its text is)
 * and measures again, publishing a good record that a third plan uses. */
static void check_damaged_record_is_ignored(fixture *f, void (*damage)(const char *path, fixture *f), int deleted)
{
    int measured = 0;
    f->ctx.cu = fake_driver();
    g_capturing = 0;
    (void)pick(&f->plan, 50, &measured);
    assert_true(measured);
    char *path = record_path(&f->plan, FSA_OP_FWD, 50);
    damage(path, f);
    const uint64_t corrupt = atomic_load(&f->ctx.counters.corrupt_entries);
    fsa_plan later;
    fsa_choice c;
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    fsa_tune_load_records(&later);
    assert_int_equal(atomic_load(&f->ctx.counters.corrupt_entries), corrupt + 1);
    assert_int_equal(exists(path), !deleted);
    fsa_choose(&c, &later, FSA_OP_FWD, 50);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.may_measure);
    fsa_variant v = pick(&later, 50, &measured);
    assert_true(measured);
    assert_int_equal(v.order, FSA_ALGORITHM_NSA);
    assert_true(exists(path));
    make_plan(&later, &f->ctx, 4, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    fsa_tune_load_records(&later);
    fsa_choose(&c, &later, FSA_OP_FWD, 50);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    free(path);
    f->ctx.cu = NULL;
}

static void flip_last_byte(const char *path, fixture *f)
{
    (void)f;
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, -2, SEEK_END);
    int ch = fgetc(fp);
    fseek(fp, -2, SEEK_END);
    fputc(ch ^ 0x20, fp);
    fclose(fp);
}

static void truncate_half(const char *path, fixture *f)
{
    (void)f;
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size / 2), 0);
}

/* Another GPU's record, renamed to this bucket's file: a whole entry of another key. */
static void replace_with_foreign(const char *path, fixture *f)
{
    char saved[sizeof f->ctx.gpu_name];
    memcpy(saved, f->ctx.gpu_name, sizeof saved);
    snprintf(f->ctx.gpu_name, sizeof f->ctx.gpu_name, "NVIDIA Other GPU");
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, &f->plan, FSA_OP_FWD, fsa_tune_bucket(50)), FSA_STATUS_OK);
    fsa_candidates c;
    fsa_candidates_of(&c, &f->plan, FSA_OP_FWD);
    char *text = fsa_tune_record_text(FSA_OP_FWD, &c, 0, NULL);
    assert_int_equal(fsa_disk_cache_publish_record(f->ctx.disk, &key, f->ctx.target, text), FSA_STATUS_OK);
    char *other = fsa_disk_cache_record_path(f->ctx.disk, &key, f->ctx.target);
    assert_int_equal(rename(other, path), 0);
    memcpy(f->ctx.gpu_name, saved, sizeof saved);
    free(other);
    free(text);
    fsa_key_free(&key);
}

/* A whole, checksummed entry under the right key whose text names no candidate. */
static void replace_with_unknown_variant(const char *path, fixture *f)
{
    (void)path;
    fsa_kernel_key key;
    assert_int_equal(fsa_tune_record_key(&key, &f->plan, FSA_OP_FWD, fsa_tune_bucket(50)), FSA_STATUS_OK);
    assert_int_equal(fsa_disk_cache_publish_record(f->ctx.disk, &key, f->ctx.target,
                                                   "fsa-tuning-record 1\nop fwd\nwinner nsa.s99\nend\n"),
                     FSA_STATUS_OK);
    fsa_key_free(&key);
}

static void test_a_record_with_a_flipped_byte_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, flip_last_byte, 1);
}

static void test_a_truncated_record_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, truncate_half, 1);
}

static void test_a_foreign_record_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, replace_with_foreign, 1);
}

static void test_a_record_naming_an_unknown_variant_is_ignored_and_measured_again(void **state)
{
    check_damaged_record_is_ignored(*state, replace_with_unknown_variant, 0);
}

static void test_record_texts_parse_only_when_whole_and_of_the_operation(void **state)
{
    fixture *f = *state;
    fsa_candidates c;
    fsa_candidates_of(&c, &f->plan, FSA_OP_FWD);
    const double ms[2] = {1.0, 0.5};
    char *t = fsa_tune_record_text(FSA_OP_FWD, &c, 1, ms);
    assert_non_null(strstr(t, "winner nsa\n"));
    assert_int_equal(fsa_tune_record_parse(t, strlen(t), FSA_OP_FWD, &c), 2);
    assert_int_equal(fsa_tune_record_parse(t, strlen(t), FSA_OP_BWD, &c), 0);
    assert_int_equal(fsa_tune_record_parse(t, strlen(t) - 3, FSA_OP_FWD, &c), 0); /* no "end" */
    assert_int_equal(fsa_tune_record_parse(t + 1, strlen(t) - 1, FSA_OP_FWD, &c), 0);
    free(t);
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

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_buckets_round_token_counts_up_to_a_power_of_two),
        T(test_a_record_key_names_every_field_of_the_bucket),
        T(test_the_heuristic_takes_the_nsa_order_up_to_64_tokens_for_every_group),
        T(test_a_forced_order_or_the_only_fitting_one_is_taken_as_such),
        T(test_only_an_uncaptured_stream_with_tuning_on_and_no_record_measures),
        T(test_with_tuning_off_a_call_never_measures),
        T(test_a_capturing_stream_never_measures_and_gets_the_heuristic),
        T(test_measuring_takes_the_faster_order_records_it_and_a_new_plan_reuses_it),
        T(test_a_record_with_a_flipped_byte_is_ignored_and_measured_again),
        T(test_a_truncated_record_is_ignored_and_measured_again),
        T(test_a_foreign_record_is_ignored_and_measured_again),
        T(test_a_record_naming_an_unknown_variant_is_ignored_and_measured_again),
        T(test_record_texts_parse_only_when_whole_and_of_the_operation),
        T(test_while_a_bucket_may_measure_the_workspace_serves_every_candidate),
        T(test_fsa_tune_and_the_context_option_set_the_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
