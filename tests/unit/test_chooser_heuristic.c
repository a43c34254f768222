/* The chooser's heuristic, without a GPU: the NSA order up to 64 tokens for
 * every group (and further for larger groups), the FSA order for the
 * backward's dq at every size; a forced order, or the only one that fits, is
 * taken as such and never measured. */
#include "chooser_fixture.h"

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
    /* The same where the rule would name the fitting order itself. */
    fsa_choose(&c, &p, FSA_OP_FWD, 65536);
    assert_int_equal(c.variant.order, FSA_ALGORITHM_FSA);
    assert_int_equal(c.source, FSA_CHOICE_ONLY_ONE);
    make_plan(&p, &f->ctx, 1, FSA_ALGORITHM_AUTO, FSA_TUNE_LEVEL_ON);
    p.fsa_available = 0; /* the FSA path does not fit (a group past 64) */
    for (int64_t t = 1; t <= 65536; t *= 64) {
        fsa_choose(&c, &p, FSA_OP_FWD, t);
        assert_int_equal(c.variant.order, FSA_ALGORITHM_NSA);
        assert_int_equal(c.source, FSA_CHOICE_ONLY_ONE);
        assert_int_equal(c.candidates, 1);
    }
}

#define T(name) cmocka_unit_test_setup_teardown(name, chooser_setup, chooser_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_the_heuristic_takes_the_nsa_order_up_to_64_tokens_for_every_group),
        T(test_a_forced_order_or_the_only_fitting_one_is_taken_as_such),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
