/* Checks the semantics the CPU reference implements (docs/semantics.md): a
 * row of unused entries gives zero output and lse -inf, a token that sees only
 * itself outputs its value, future blocks, out-of-range indices and repeats
 * change nothing, the slot rule, lse against log-sum-exp by hand (without
 * overflow) and the token-to-sequence map past empty sequences. */
#include "reference_problem.h"

#include <math.h>
#include <stdlib.h>

static void test_row_of_unused_entries_gives_zero_output_and_negative_infinite_lse(void **state)
{
    (void)state;
    const int lens[] = {6};
    owned_problem op;
    make_problem(&op, 1, lens, 4, 2, 8, 2, 3, 11);
    generate_selection(&op, 12);
    set_row(&op, 1, 3, NULL, 0);
    fsa_ref_problem *p = &op.p;
    double *o = new_doubles(o_size(p)), *lse = new_doubles((size_t)4 * 6);
    fsa_ref_forward(p, o, lse);
    for (int qh = 0; qh < 4; qh++)
        for (int t = 0; t < 6; t++) {
            int empty = qh >= 2 && t == 3; /* kv head 1 serves query heads 2, 3 */
            double l = lse[(size_t)qh * 6 + t];
            if (empty) {
                assert_true(isinf(l) && l < 0);
                for (int d = 0; d < 8; d++) assert_true(o[((size_t)t * 4 + qh) * 8 + d] == 0.0);
            } else {
                assert_true(isfinite(l));
            }
        }
    free(o);
    free(lse);
    free_problem(&op);
}

static void test_token_whose_only_visible_key_is_itself_outputs_its_value(void **state)
{
    (void)state;
    /* BK = 4, one sequence of 9: token 0 with block 0, token 4 (first of
     * block 1) with block 1, token 8 (alone in block 2) with block 2. */
    const int lens[] = {9};
    const int tokens[] = {0, 4, 8};
    owned_problem op;
    make_problem(&op, 1, lens, 2, 1, 8, 4, 2, 21);
    generate_selection(&op, 22);
    for (int n = 0; n < 3; n++) set_row(&op, 0, tokens[n], (const int32_t[]){tokens[n] / 4}, 1);
    fsa_ref_problem *p = &op.p;
    double *o = new_doubles(o_size(p));
    fsa_ref_forward(p, o, NULL);
    for (int n = 0; n < 3; n++)
        for (int qh = 0; qh < 2; qh++)
            for (int d = 0; d < 8; d++) {
                int t = tokens[n];
                assert_true(fabs(o[((size_t)t * 2 + qh) * 8 + d] - (double)op.v[(size_t)t * 8 + d]) <
                            1e-12);
            }
    free(o);
    free_problem(&op);
}

/* a and b differ only in their top-k rows (K may differ too); their
 * forward results must be bit-identical. */
static void assert_same_forward(const fsa_ref_problem *a, const fsa_ref_problem *b)
{
    size_t nlse = (size_t)a->num_q_heads * a->total_tokens;
    double *oa = new_doubles(o_size(a)), *ob = new_doubles(o_size(a));
    double *la = new_doubles(nlse), *lb = new_doubles(nlse);
    fsa_ref_forward(a, oa, la);
    fsa_ref_forward(b, ob, lb);
    assert_memory_equal(oa, ob, o_size(a) * sizeof *oa);
    assert_memory_equal(la, lb, nlse * sizeof *la);
    free(oa);
    free(ob);
    free(la);
    free(lb);
}

static void test_future_blocks_and_out_of_range_indices_are_ignored(void **state)
{
    (void)state;
    const int lens[] = {10, 7};
    owned_problem base, noisy;
    make_problem(&base, 2, lens, 4, 2, 8, 3, 3, 31);
    make_problem(&noisy, 2, lens, 4, 2, 8, 3, 6, 31); /* same seed: same q, k, v */
    generate_selection(&base, 32);
    /* Interleave junk before each base entry: the valid slots keep their
     * order, so the result must be bit-identical. */
    int future_in_sequence = 0;
    for (int h = 0; h < 2; h++)
        for (int b = 0; b < 2; b++) {
            int nb = (lens[b] + 2) / 3;
            for (int t = base.cu[b]; t < base.cu[b + 1]; t++) {
                int c = (t - base.cu[b]) / 3;
                const int32_t junk[3] = {c + 1, nb + (t % 3), (t % 2) ? -7 : INT32_MAX};
                future_in_sequence += c + 1 < nb;
                int32_t *src = row_of(&base, h, t), *dst = row_of(&noisy, h, t);
                for (int s = 0; s < 3; s++) {
                    dst[2 * s] = junk[s];
                    dst[2 * s + 1] = src[s];
                }
            }
        }
    assert_true(future_in_sequence > 0);
    assert_same_forward(&base.p, &noisy.p);
    free_problem(&base);
    free_problem(&noisy);
}

static void test_duplicated_block_counts_once(void **state)
{
    (void)state;
    const int lens[] = {12, 9};
    owned_problem once, twice;
    make_problem(&once, 2, lens, 3, 1, 8, 4, 5, 41);
    make_problem(&twice, 2, lens, 3, 1, 8, 4, 5, 41);
    for (int b = 0; b < 2; b++)
        for (int t = once.cu[b]; t < once.cu[b + 1]; t++) {
            int32_t c = (t - once.cu[b]) / 4;
            set_row(&once, 0, t, (const int32_t[]){0, c}, 2);
            set_row(&twice, 0, t, (const int32_t[]){0, c, 0, c, c}, 5);
        }
    assert_same_forward(&once.p, &twice.p);
    free_problem(&once);
    free_problem(&twice);
}

static void test_slot_valid_accepts_only_first_occurrences_of_causal_blocks(void **state)
{
    (void)state;
    /* Sequences of 5 and 8 tokens, BK = 4: the second has blocks 0 and 1. */
    const int lens[] = {5, 8};
    owned_problem op;
    make_problem(&op, 2, lens, 2, 2, 4, 4, 6, 51);
    set_row(&op, 1, 11, (const int32_t[]){1, -1, 2, 0, 1, 5}, 6); /* i = 6, c = 1 */
    set_row(&op, 0, 5, (const int32_t[]){1, 0, 0, -3, 0, 0}, 6);  /* i = 0, c = 0 */
    const int expect_11[] = {1, 0, 0, 1, 0, 0};
    const int expect_5[] = {0, 1, 0, 0, 0, 0};
    for (int s = 0; s < 6; s++) {
        assert_int_equal(fsa_ref_slot_valid(&op.p, 1, 11, s), expect_11[s]);
        assert_int_equal(fsa_ref_slot_valid(&op.p, 0, 5, s), expect_5[s]);
    }
    free_problem(&op);
}

static void test_lse_matches_log_sum_exp_computed_by_hand(void **state)
{
    (void)state;
    /* One token: lse is its single logit, o its value. */
    const int one[] = {1};
    owned_problem op;
    make_problem(&op, 1, one, 1, 1, 4, 4, 1, 61);
    set_row(&op, 0, 0, (const int32_t[]){0}, 1);
    double o[4], lse;
    fsa_ref_forward(&op.p, o, &lse);
    double x = 0.0;
    for (int d = 0; d < 4; d++) x += (double)op.q[d] * (double)op.k[d];
    assert_true(fabs(lse - op.p.scale * x) <= 1e-15 * fabs(op.p.scale * x));
    for (int d = 0; d < 4; d++) assert_true(fabs(o[d] - (double)op.v[d]) < 1e-15);
    free_problem(&op);

    /* Token 2 sees keys 0..2 with logits 800, 799, 798: a plain exp would
     * overflow, the max-subtracted sum must not. */
    const int three[] = {3};
    make_problem(&op, 1, three, 1, 1, 2, 4, 1, 62);
    op.p.scale = 1.0;
    op.q[4] = 1.0f;
    op.q[5] = 0.0f;
    for (int j = 0; j < 3; j++) {
        op.k[2 * j] = (float)(800 - j);
        op.k[2 * j + 1] = 5.0f;
    }
    set_row(&op, 0, 2, (const int32_t[]){0}, 1);
    double o3[6], lse3[3];
    fsa_ref_forward(&op.p, o3, lse3);
    double expect = 800.0 + log(1.0 + exp(-1.0) + exp(-2.0));
    assert_true(fabs(lse3[2] - expect) < 1e-12);
    free_problem(&op);
}

static void test_sequence_of_maps_tokens_past_empty_sequences(void **state)
{
    (void)state;
    /* Sequences of 3, 0, 4, 0 tokens. */
    const int32_t cu[] = {0, 3, 3, 7, 7};
    const int expect[] = {0, 0, 0, 2, 2, 2, 2};
    for (int t = 0; t < 7; t++) assert_int_equal(fsa_ref_sequence_of(4, cu, t), expect[t]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_of_unused_entries_gives_zero_output_and_negative_infinite_lse),
        cmocka_unit_test(test_token_whose_only_visible_key_is_itself_outputs_its_value),
        cmocka_unit_test(test_future_blocks_and_out_of_range_indices_are_ignored),
        cmocka_unit_test(test_duplicated_block_counts_once),
        cmocka_unit_test(test_slot_valid_accepts_only_first_occurrences_of_causal_blocks),
        cmocka_unit_test(test_lse_matches_log_sum_exp_computed_by_hand),
        cmocka_unit_test(test_sequence_of_maps_tokens_past_empty_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
