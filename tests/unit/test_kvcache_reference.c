/* The float64 reference for attention over a paged KV cache, and the paged
 * test problems built for it: a query placed at a position of a sequence gets
 * the same answer as that token of a self-attention problem, a token that
 * selected every block gets dense causal attention, nothing is visible before
 * position 0, and the paged images give back the logical sequences. */
#include "kvcache_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kvc_case small_case = {
    "bf16_d32_g2_bk16_page16", FSA_DTYPE_BF16, 32, 4, 2, 16, 4, 16,
    {{1, 0}, {3, 40}, {0, 7}, {5, 64}}, 4, KVC_TOPK_THK, 1, 1, 1, 1,
};

static void test_a_query_at_a_position_matches_that_token_of_self_attention(void **state)
{
    (void)state;
    enum { L = 150, HQ = 4, HKV = 2, D = 16, BK = 16, K = 5 };
    fsa_rng rng = {11};
    static float q[L * HQ * D], k[L * HKV * D], v[L * HKV * D];
    static int32_t topk[HKV * L * K];
    for (int i = 0; i < L * HQ * D; i++) q[i] = (float)fsa_rng_normal(&rng);
    for (int i = 0; i < L * HKV * D; i++) k[i] = (float)fsa_rng_normal(&rng);
    for (int i = 0; i < L * HKV * D; i++) v[i] = (float)fsa_rng_normal(&rng);
    const int32_t cu[2] = {0, L};
    fsa_ref_make_selection(topk, (int64_t)L * K, K, L, 1, cu, HKV, BK, K, &rng);
    const fsa_ref_problem p = {L, 1, cu, HQ, HKV, D, BK, K, 0.25, q, k, v, topk, (int64_t)L * K, K};
    const int positions[] = {0, 1, 15, 16, 17, 100, L - 1};
    for (size_t i = 0; i < sizeof positions / sizeof positions[0]; i++) {
        for (int qh = 0; qh < HQ; qh++) {
            const int t = positions[i], h = qh / (HQ / HKV);
            double o1[D], o2[D], l1, l2;
            fsa_ref_forward_row(&p, qh, t, o1, &l1);
            fsa_ref_attend_at(&p, qh, t, q + ((size_t)t * HQ + qh) * D, topk + (size_t)h * L * K + (size_t)t * K, o2,
                              &l2);
            assert_memory_equal(o1, o2, sizeof o1);
            assert_true(l1 == l2);
        }
    }
}

static void test_a_token_that_selected_every_block_gets_dense_causal_attention(void **state)
{
    (void)state;
    kvc_case c = small_case;
    c.k = 8; /* >= every sequence's block count: the selection covers all causal blocks */
    c.junk = 0;
    c.with_length = 0;
    kvc_problem p;
    kvc_problem_make(&p, &c, 5);
    kvc_problem_reference(&p);
    for (int t = 0; t < p.Tq; t++) {
        const int b = kvc_sequence_of(&p, t), pos = kvc_position_of(&p, t);
        for (int qh = 0; qh < p.hq; qh++) {
            const int h = qh / (p.hq / p.hkv);
            const float *qr = p.q + ((size_t)t * p.hq + qh) * p.d;
            double mx = -INFINITY, sum = 0, o[64] = {0};
            for (int j = 0; j <= pos; j++) {
                double x = 0;
                for (int d = 0; d < p.d; d++) x += (double)qr[d] * p.k_seq[b][((size_t)j * p.hkv + h) * p.d + d];
                mx = fmax(mx, x * p.scale);
            }
            for (int j = 0; j <= pos; j++) {
                double x = 0;
                for (int d = 0; d < p.d; d++) x += (double)qr[d] * p.k_seq[b][((size_t)j * p.hkv + h) * p.d + d];
                const double w = exp(x * p.scale - mx);
                sum += w;
                for (int d = 0; d < p.d; d++) o[d] += w * p.v_seq[b][((size_t)j * p.hkv + h) * p.d + d];
            }
            for (int d = 0; d < p.d; d++)
                assert_true(fabs(o[d] / sum - p.o_ref[((size_t)t * p.hq + qh) * p.d + d]) < 1e-12);
            assert_true(fabs(mx + log(sum) - p.lse_ref[(size_t)qh * p.Tq + t]) < 1e-12);
        }
    }
    kvc_problem_free(&p);
}

static void test_nothing_is_visible_before_position_zero(void **state)
{
    (void)state;
    enum { L = 20, D = 16 };
    static float k[L * D], v[L * D], q[D];
    for (int i = 0; i < L * D; i++) k[i] = v[i] = 1.0f;
    for (int d = 0; d < D; d++) q[d] = 1.0f;
    const int32_t cu[2] = {0, L}, row[2] = {0, 1};
    const fsa_ref_problem p = {L, 1, cu, 1, 1, D, 16, 2, 0.25, NULL, k, v, NULL, 0, 0};
    double o[D], lse = 0;
    fsa_ref_attend_at(&p, 0, -3, q, row, o, &lse);
    assert_true(isinf(lse) && lse < 0);
    for (int d = 0; d < D; d++) assert_true(o[d] == 0.0);
    fsa_ref_attend_at(&p, 0, 0, q, row, o, &lse); /* position 0 sees key 0 only */
    assert_true(fabs(lse - 0.25 * D) < 1e-12);
}

static void test_slots_past_the_top_k_length_are_unused(void **state)
{
    (void)state;
    kvc_problem p;
    kvc_problem_make(&p, &small_case, 9);
    kvc_problem_reference(&p);
    /* The same problem with the tails written as -1 and no lengths. */
    kvc_problem p2;
    kvc_problem_make(&p2, &small_case, 9);
    for (int h = 0; h < p2.hkv; h++)
        for (int t = 0; t < p2.Tq; t++)
            for (int s = p2.topk_len[t]; s < p2.k; s++) p2.topk[h * p2.topk_hs + t * p2.topk_ts + s] = -1;
    free(p2.topk_len);
    p2.topk_len = NULL;
    kvc_problem_reference(&p2);
    assert_memory_equal(p.o_ref, p2.o_ref, (size_t)p.Tq * p.hq * p.d * sizeof(double));
    kvc_problem_free(&p);
    kvc_problem_free(&p2);
}

static void check_gather(const kvc_problem *p)
{
    for (int which = 0; which < 2; which++) {
        size_t n;
        uint16_t *img = kvc_cache_image(p, which, &n);
        size_t nan = 0;
        for (size_t i = 0; i < n; i++) nan += isnan(attn_float_of(p->dtype, img[i]));
        size_t cached = 0;
        for (int b = 0; b < p->B; b++) {
            const size_t nkv = (size_t)p->seqused[b] * p->hkv * p->d;
            float *back = malloc(nkv * sizeof(float) + 4);
            kvc_gather(back, p, img, which, b);
            assert_memory_equal(back, which ? p->v_seq[b] : p->k_seq[b], nkv * sizeof(float));
            free(back);
            cached += nkv;
        }
        assert_int_equal(n - nan, cached); /* everything else is NaN */
        free(img);
    }
}

static void test_paged_images_give_back_the_logical_sequences(void **state)
{
    (void)state;
    const int pages[] = {1, 16, 64};
    for (int layout = 0; layout < 2; layout++)
        for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
            kvc_case c = small_case;
            c.page = pages[i];
            c.cache_hnd = layout;
            kvc_problem p;
            kvc_problem_make(&p, &c, 3 + i);
            check_gather(&p);
            kvc_reshuffle_pages(&p, 99);
            check_gather(&p);
            kvc_problem_free(&p);
        }
}

static void test_a_new_token_sits_at_the_cached_length_minus_the_query_length_plus_its_index(void **state)
{
    (void)state;
    kvc_problem p;
    kvc_problem_make(&p, &small_case, 1);
    assert_int_equal(kvc_position_of(&p, 0), 0);  /* 1 new token, nothing cached */
    assert_int_equal(kvc_position_of(&p, 1), 40); /* 3 new tokens after 40 cached */
    assert_int_equal(kvc_position_of(&p, 3), 42);
    assert_int_equal(kvc_sequence_of(&p, 4), 3); /* the empty sequence 2 holds no token */
    assert_int_equal(kvc_position_of(&p, 8), 68);
    kvc_problem_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_query_at_a_position_matches_that_token_of_self_attention),
        cmocka_unit_test(test_a_token_that_selected_every_block_gets_dense_causal_attention),
        cmocka_unit_test(test_nothing_is_visible_before_position_zero),
        cmocka_unit_test(test_slots_past_the_top_k_length_are_unused),
        cmocka_unit_test(test_paged_images_give_back_the_logical_sequences),
        cmocka_unit_test(test_a_new_token_sits_at_the_cached_length_minus_the_query_length_plus_its_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
