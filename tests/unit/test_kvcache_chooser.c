/* The paged-cache plan's split count as a variant of the chooser, without a
 * GPU: the candidates and the heuristic per top-k, a descriptor that forces
 * a count, the decision to measure by tuning level, and the plan's record on
 * disk: read by a later plan (with tuning off too), ignored with force,
 * ignored and counted when damaged, not applied to another max_batch bucket. */
#include "chooser_fixture.h"

#include "attention/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A plan without kernels: G 4 (Hq 32, Hkv 8) unless hkv says otherwise, D = Dv = 128, BK 64, page 64. */
static void make_plan_hkv(fsa_kvcache_plan *p, fsa_context *ctx, int hkv, int top_k, int splits, int max_batch)
{
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->desc = (fsa_kvcache_desc)FSA_KVCACHE_DESC_INIT;
    p->desc.value_dim = 128;
    p->desc.num_q_heads = 32;
    p->desc.num_kv_heads = hkv;
    p->desc.top_k = top_k;
    p->desc.splits = splits;
    p->desc.max_batch = max_batch;
    p->desc.max_query_tokens = 4 * max_batch;
    p->group = 32 / hkv;
    fsa_kvc_tuning_init(p);
}

static void make_kvc_plan(fsa_kvcache_plan *p, fsa_context *ctx, int top_k, int splits, int max_batch)
{
    make_plan_hkv(p, ctx, 8, top_k, splits, max_batch);
}

static fsa_kvc_choice choice_of(const fsa_kvcache_plan *p)
{
    fsa_kvc_choice c;
    fsa_kvc_choose(&c, p);
    return c;
}

static void test_candidates_are_powers_of_two_up_to_half_the_slots(void **state)
{
    fixture *f = *state;
    fsa_kvcache_plan p;
    make_kvc_plan(&p, &f->ctx, 16, 0, 64);
    assert_int_equal(p.tune.c.n, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(p.tune.c.v[i].splits, 1 << i);
    assert_string_equal(p.tune.names[3], "kvc.s8");
    assert_int_equal(p.max_splits, 8); /* the workspace holds the largest */
    fsa_kvc_choice c = choice_of(&p);
    assert_int_equal(c.splits, 8); /* 4 MiB of K/V per token: shares of two blocks */
    assert_string_equal(c.variant, "kvc.s8");
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.may_measure);
    make_plan_hkv(&p, &f->ctx, 32, 16, 0, 64);
    assert_int_equal(choice_of(&p).splits, 4); /* G 1: 16 MiB per token, ceil(16 / 4) */
    make_kvc_plan(&p, &f->ctx, 64, 0, 64);
    assert_int_equal(p.tune.c.n, 5); /* 1 .. 16 */
    assert_int_equal(choice_of(&p).splits, 16); /* 16 MiB per token: ceil(64 / 4) */
    make_kvc_plan(&p, &f->ctx, 6, 0, 64);
    assert_int_equal(p.tune.c.n, 2); /* 1, 2 */
    assert_int_equal(choice_of(&p).splits, 2);
    make_kvc_plan(&p, &f->ctx, 1, 0, 64);
    assert_int_equal(p.tune.c.n, 1);
    c = choice_of(&p);
    assert_int_equal(c.source, FSA_CHOICE_ONLY_ONE);
    assert_false(c.may_measure);
    assert_int_equal(p.max_splits, 1);
}

static void test_a_descriptor_forces_its_count(void **state)
{
    fixture *f = *state;
    fsa_kvcache_plan p;
    make_kvc_plan(&p, &f->ctx, 16, 3, 64);
    assert_int_equal(p.tune.c.n, 1);
    assert_int_equal(p.max_splits, 3);
    const fsa_kvc_choice c = choice_of(&p);
    assert_int_equal(c.splits, 3);
    assert_int_equal(c.source, FSA_CHOICE_FORCED);
    assert_false(c.may_measure);
}

static void test_tuning_off_never_asks_to_measure(void **state)
{
    fixture *f = *state;
    f->ctx.tune = FSA_TUNE_LEVEL_OFF;
    fsa_kvcache_plan p;
    make_kvc_plan(&p, &f->ctx, 16, 0, 64);
    assert_false(choice_of(&p).may_measure);
    f->ctx.tune = FSA_TUNE_LEVEL_ON;
}

static char *publish(fixture *f, const fsa_kvcache_plan *p, int winner)
{
    fsa_kernel_key key;
    assert_int_equal(fsa_kvc_record_key(&key, p), FSA_STATUS_OK);
    assert_non_null(strstr(key.text, "op kvc\n"));
    assert_non_null(strstr(key.text, "batch 64\n"));
    assert_non_null(strstr(key.text, "\nswitches tma "));
    /* Another copy path (FSA_KVC_TMA), the same shape: another record. */
    fsa_kvcache_plan other = *p;
    other.tma = !p->tma;
    fsa_kernel_key other_key;
    assert_int_equal(fsa_kvc_record_key(&other_key, &other), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other_key.hex);
    fsa_key_free(&other_key);
    /* The default layout writes no layout line (its records keep the keys they had); one stage buffer
     * (fsa_kvc_layout_fit, FSA_KVC_SMALL) is another record. */
    assert_null(strstr(key.text, "layout"));
    other = *p;
    other.layout = FSA_KVC_LAYOUT_ONE_STAGE;
    assert_int_equal(fsa_kvc_record_key(&other_key, &other), FSA_STATUS_OK);
    assert_non_null(strstr(other_key.text, "\nlayout 1\n"));
    assert_string_not_equal(key.hex, other_key.hex);
    fsa_key_free(&other_key);
    fsa_tune_publish(&f->ctx, &key, FSA_OP_KVC, &p->tune.c, winner, NULL);
    char *path = fsa_disk_cache_record_path(f->ctx.disk, &key, f->ctx.target);
    fsa_key_free(&key);
    assert_non_null(path);
    return path;
}

static void test_a_record_is_read_by_later_plans_and_a_damaged_one_ignored(void **state)
{
    fixture *f = *state;
    fsa_kvcache_plan p;
    make_kvc_plan(&p, &f->ctx, 16, 0, 64);
    char *path = publish(f, &p, 3); /* kvc.s8 */
    make_kvc_plan(&p, &f->ctx, 16, 0, 50); /* max_batch 50: the same bucket (64) */
    fsa_kvc_choice c = choice_of(&p);
    assert_int_equal(c.source, FSA_CHOICE_MEASURED);
    assert_int_equal(c.splits, 8);
    assert_false(c.may_measure);
    f->ctx.tune = FSA_TUNE_LEVEL_OFF; /* records are still used */
    make_kvc_plan(&p, &f->ctx, 16, 0, 64);
    assert_int_equal(choice_of(&p).source, FSA_CHOICE_MEASURED);
    f->ctx.tune = FSA_TUNE_LEVEL_FORCE; /* records on disk are ignored: measured again */
    make_kvc_plan(&p, &f->ctx, 16, 0, 64);
    assert_true(choice_of(&p).may_measure);
    f->ctx.tune = FSA_TUNE_LEVEL_ON;
    make_kvc_plan(&p, &f->ctx, 16, 0, 65); /* another bucket (128): no record */
    assert_int_equal(choice_of(&p).source, FSA_CHOICE_HEURISTIC);

    fsa_test_damage_file(path, 3);
    const uint64_t corrupt = atomic_load(&f->ctx.counters.corrupt_entries);
    make_kvc_plan(&p, &f->ctx, 16, 0, 64);
    c = choice_of(&p);
    assert_int_equal(c.source, FSA_CHOICE_HEURISTIC);
    assert_true(c.may_measure);
    assert_true(atomic_load(&f->ctx.counters.corrupt_entries) > corrupt);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates_are_powers_of_two_up_to_half_the_slots),
        cmocka_unit_test(test_a_descriptor_forces_its_count),
        cmocka_unit_test(test_tuning_off_never_asks_to_measure),
        cmocka_unit_test(test_a_record_is_read_by_later_plans_and_a_damaged_one_ignored),
    };
    return cmocka_run_group_tests(tests, chooser_setup, chooser_teardown);
}
