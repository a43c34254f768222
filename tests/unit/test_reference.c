/* Checks the CPU reference itself: gradients against finite differences,
 * the forward against a dense masked softmax, the selection rules, the
 * selection generator and the error metrics. */
#include "reference.h"
#include "testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A problem that owns its arrays; topk is head-major [Hkv,T,K]. */
typedef struct owned_problem {
    fsa_ref_problem p;
    int32_t cu[8];
    float *q, *k, *v;
    int32_t *topk;
} owned_problem;

static float *normal_floats(fsa_rng *rng, size_t n)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t e = 0; e < n; e++) x[e] = (float)fsa_rng_normal(rng);
    return x;
}

static double *new_doubles(size_t n)
{
    double *x = calloc(n, sizeof *x);
    assert_non_null(x);
    return x;
}

/* Random normal q, k, v; every top-k entry -1. */
static void make_problem(owned_problem *op, int batch, const int *lens, int hq, int hkv, int d,
                         int bk, int top_k, uint64_t seed)
{
    memset(op, 0, sizeof *op);
    assert_true(batch < 8);
    op->cu[0] = 0;
    for (int b = 0; b < batch; b++) op->cu[b + 1] = op->cu[b] + lens[b];
    int T = op->cu[batch];
    fsa_rng rng = {seed};
    op->q = normal_floats(&rng, (size_t)T * hq * d);
    op->k = normal_floats(&rng, (size_t)T * hkv * d);
    op->v = normal_floats(&rng, (size_t)T * hkv * d);
    op->topk = malloc((size_t)hkv * T * top_k * sizeof *op->topk);
    assert_non_null(op->topk);
    for (size_t e = 0; e < (size_t)hkv * T * top_k; e++) op->topk[e] = -1;
    op->p = (fsa_ref_problem){
        .total_tokens = T,
        .batch = batch,
        .cu_seqlens = op->cu,
        .num_q_heads = hq,
        .num_kv_heads = hkv,
        .head_dim = d,
        .block_size = bk,
        .top_k = top_k,
        .scale = 1.0 / sqrt((double)d),
        .q = op->q,
        .k = op->k,
        .v = op->v,
        .topk = op->topk,
        .topk_head_stride = (int64_t)T * top_k,
        .topk_token_stride = top_k,
    };
}

static void free_problem(owned_problem *op)
{
    free(op->q);
    free(op->k);
    free(op->v);
    free(op->topk);
}

static int32_t *row_of(owned_problem *op, int h, int t)
{
    return op->topk + ((size_t)h * op->p.total_tokens + t) * op->p.top_k;
}

/* Row (h, t) = values[0..n-1], the rest -1. */
static void set_row(owned_problem *op, int h, int t, const int32_t *values, int n)
{
    int32_t *row = row_of(op, h, t);
    for (int s = 0; s < op->p.top_k; s++) row[s] = s < n ? values[s] : -1;
}

static void generate_selection(owned_problem *op, uint64_t seed)
{
    fsa_rng rng = {seed};
    fsa_ref_make_selection(op->topk, op->p.topk_head_stride, op->p.topk_token_stride,
                           op->p.total_tokens, op->p.batch, op->cu, op->p.num_kv_heads,
                           op->p.block_size, op->p.top_k, &rng);
}

static size_t o_size(const fsa_ref_problem *p)
{
    return (size_t)p->total_tokens * p->num_q_heads * p->head_dim;
}

static size_t kv_size(const fsa_ref_problem *p)
{
    return (size_t)p->total_tokens * p->num_kv_heads * p->head_dim;
}

/* ------------------------------------------------------------ gradients */

static double loss(const fsa_ref_problem *p, const float *dout, double *o)
{
    fsa_ref_forward(p, o, NULL);
    double l = 0.0;
    for (size_t e = 0; e < o_size(p); e++) l += o[e] * (double)dout[e];
    return l;
}

/* Central differences of L = sum(o * dout) w.r.t. every element of x. The
 * step is measured as the float difference actually applied. */
static void numeric_gradient(const fsa_ref_problem *p, const float *dout, float *x, size_t n,
                             double *grad)
{
    const double step = 0x1p-13;
    double *o = new_doubles(o_size(p));
    for (size_t e = 0; e < n; e++) {
        float saved = x[e];
        float up = (float)(saved + step), down = (float)(saved - step);
        x[e] = up;
        double l_up = loss(p, dout, o);
        x[e] = down;
        double l_down = loss(p, dout, o);
        x[e] = saved;
        grad[e] = (l_up - l_down) / ((double)up - (double)down);
    }
    free(o);
}

static void check_gradients_for_block_size(int bk)
{
    /* T = 7 in sequences of 3 and 4 tokens. */
    const int lens[] = {3, 4};
    owned_problem op;
    make_problem(&op, 2, lens, 4, 2, 8, bk, 3, 1000 + (uint64_t)bk);
    generate_selection(&op, 7);
    set_row(&op, 0, 1, NULL, 0);                                /* all -1 */
    set_row(&op, 1, 3, (const int32_t[]){1, 0, -1}, 3);         /* future / past-end block */
    set_row(&op, 0, 5, (const int32_t[]){2 / bk, 2 / bk, 0}, 3); /* duplicate (i = 2) */
    set_row(&op, 1, 6, (const int32_t[]){0, 7, -4}, 3);          /* out of range */

    fsa_ref_problem *p = &op.p;
    fsa_rng rng = {99};
    float *dout = normal_floats(&rng, o_size(p));
    double *dq = new_doubles(o_size(p)), *dk = new_doubles(kv_size(p)),
           *dv = new_doubles(kv_size(p));
    fsa_ref_backward(p, dout, dq, dk, dv);

    double *num = new_doubles(o_size(p));
    numeric_gradient(p, dout, op.q, o_size(p), num);
    assert_true(fsa_rel_error_d(dq, num, o_size(p)) < 1e-6);
    numeric_gradient(p, dout, op.k, kv_size(p), num);
    assert_true(fsa_rel_error_d(dk, num, kv_size(p)) < 1e-6);
    numeric_gradient(p, dout, op.v, kv_size(p), num);
    assert_true(fsa_rel_error_d(dv, num, kv_size(p)) < 1e-6);

    /* Token 1 of kv head 0 sees nothing: its query heads 0 and 1 get dq = 0. */
    for (int qh = 0; qh < 2; qh++)
        for (int d = 0; d < 8; d++) assert_true(dq[((size_t)1 * 4 + qh) * 8 + d] == 0.0);

    free(num);
    free(dq);
    free(dk);
    free(dv);
    free(dout);
    free_problem(&op);
}

static void test_backward_matches_central_finite_differences(void **state)
{
    (void)state;
    check_gradients_for_block_size(2);
    check_gradients_for_block_size(4);
}

/* ------------------------------------------------- dense brute force */

/* Independent forward: a dense T x T visibility mask per kv head built
 * straight from the top-k rows (a set, so repeats collapse by themselves),
 * then a dense masked softmax. sel is logical [Hkv,T,K]. */
static void dense_forward(const fsa_ref_problem *p, const int32_t *sel, double *o, double *lse)
{
    int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, D = p->head_dim;
    int G = Hq / Hkv, BK = p->block_size, K = p->top_k;
    char *mask = calloc((size_t)T * T, 1);
    double *x = new_doubles((size_t)T);
    assert_non_null(mask);
    for (int h = 0; h < Hkv; h++) {
        memset(mask, 0, (size_t)T * T);
        for (int t = 0; t < T; t++) {
            int b = 0;
            while (p->cu_seqlens[b + 1] <= t) b++;
            int start = p->cu_seqlens[b], end = p->cu_seqlens[b + 1];
            for (int s = 0; s < K; s++) {
                int idx = sel[((size_t)h * T + t) * K + s];
                if (idx < 0 || idx * BK > t - start) continue;
                for (int j = start + idx * BK; j < start + (idx + 1) * BK; j++)
                    if (j < end && j <= t) mask[(size_t)t * T + j] = 1;
            }
        }
        for (int r = 0; r < G; r++) {
            int qh = h * G + r;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    x[j] = -INFINITY;
                    if (!mask[(size_t)t * T + j]) continue;
                    double acc = 0.0;
                    for (int d = 0; d < D; d++)
                        acc += (double)p->q[((size_t)t * Hq + qh) * D + d] *
                               (double)p->k[((size_t)j * Hkv + h) * D + d];
                    x[j] = p->scale * acc;
                    if (x[j] > mx) mx = x[j];
                }
                double *out = o + ((size_t)t * Hq + qh) * D;
                for (int d = 0; d < D; d++) out[d] = 0.0;
                if (mx == -INFINITY) {
                    lse[(size_t)qh * T + t] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    double w = exp(x[j] - mx); /* 0 for masked keys */
                    sum += w;
                    for (int d = 0; d < D; d++)
                        out[d] += w * (double)p->v[((size_t)j * Hkv + h) * D + d];
                }
                for (int d = 0; d < D; d++) out[d] /= sum;
                lse[(size_t)qh * T + t] = mx + log(sum);
            }
        }
    }
    free(x);
    free(mask);
}

/* Rows with random entries in -2..nb+1: -1s, negatives, future blocks,
 * blocks past the sequence and repeats. */
static void random_selection(owned_problem *op, fsa_rng *rng)
{
    const fsa_ref_problem *p = &op->p;
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int b = 0; b < p->batch; b++) {
            int len = op->cu[b + 1] - op->cu[b];
            int nb = (len + p->block_size - 1) / p->block_size;
            for (int t = op->cu[b]; t < op->cu[b + 1]; t++) {
                int32_t *row = row_of(op, h, t);
                for (int s = 0; s < p->top_k; s++) row[s] = fsa_rng_int(rng, -2, nb + 1);
            }
        }
}

static void check_forward_against_dense(owned_problem *op)
{
    fsa_ref_problem *p = &op->p;
    int T = p->total_tokens, Hkv = p->num_kv_heads, K = p->top_k;
    size_t nlse = (size_t)p->num_q_heads * T;
    double *o_dense = new_doubles(o_size(p)), *lse_dense = new_doubles(nlse);
    dense_forward(p, op->topk, o_dense, lse_dense);

    /* Head-major, as stored. */
    double *o_hm = new_doubles(o_size(p)), *lse_hm = new_doubles(nlse);
    fsa_ref_forward(p, o_hm, lse_hm);
    assert_true(fsa_rel_error_d(o_hm, o_dense, o_size(p)) < 1e-12);
    assert_true(fsa_rel_error_d(lse_hm, lse_dense, nlse) < 1e-12);

    /* Token-major copy [T,Hkv,K]: the same bits must come out. */
    int32_t *tm = malloc((size_t)T * Hkv * K * sizeof *tm);
    assert_non_null(tm);
    for (int h = 0; h < Hkv; h++)
        for (int t = 0; t < T; t++)
            memcpy(tm + ((size_t)t * Hkv + h) * K, row_of(op, h, t), (size_t)K * sizeof *tm);
    fsa_ref_problem ptm = *p;
    ptm.topk = tm;
    ptm.topk_head_stride = K;
    ptm.topk_token_stride = (int64_t)Hkv * K;
    double *o_tm = new_doubles(o_size(p)), *lse_tm = new_doubles(nlse);
    fsa_ref_forward(&ptm, o_tm, lse_tm);
    assert_memory_equal(o_tm, o_hm, o_size(p) * sizeof *o_tm);
    assert_memory_equal(lse_tm, lse_hm, nlse * sizeof *lse_tm);

    free(o_tm);
    free(lse_tm);
    free(tm);
    free(o_hm);
    free(lse_hm);
    free(o_dense);
    free(lse_dense);
}

static void test_forward_matches_dense_masked_softmax_for_both_index_layouts(void **state)
{
    (void)state;
    const int lens[] = {1, 5, 8, 9};
    const int groups[] = {1, 3};
    for (int gi = 0; gi < 2; gi++) {
        for (int trial = 0; trial < 4; trial++) {
            owned_problem op;
            int G = groups[gi], K = 2 + trial;
            make_problem(&op, 4, lens, 2 * G, 2, 16, 4, K, 50 + (uint64_t)(10 * gi + trial));
            fsa_rng rng = {(uint64_t)(700 + trial)};
            if (trial % 2 == 0)
                random_selection(&op, &rng);
            else
                generate_selection(&op, 300 + (uint64_t)trial);
            check_forward_against_dense(&op);
            free_problem(&op);
        }
    }
}

static void test_forward_row_gives_the_same_bits_as_the_full_forward(void **state)
{
    (void)state;
    const int lens[] = {5, 9};
    owned_problem op;
    make_problem(&op, 2, lens, 6, 2, 8, 4, 3, 5);
    generate_selection(&op, 6);
    fsa_ref_problem *p = &op.p;
    double *o = new_doubles(o_size(p)), *lse = new_doubles((size_t)6 * 14);
    fsa_ref_forward(p, o, lse);
    for (int qh = 0; qh < 6; qh++)
        for (int t = 0; t < 14; t++) {
            double row[8], l;
            fsa_ref_forward_row(p, qh, t, row, &l);
            assert_memory_equal(row, o + ((size_t)t * 6 + qh) * 8, sizeof row);
            assert_memory_equal(&l, &lse[(size_t)qh * 14 + t], sizeof l);
        }
    free(o);
    free(lse);
    free_problem(&op);
}

/* ------------------------------------------------------------ semantics */

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

/* ------------------------------------------------------------ generator */

static void check_generated_rows(const int32_t *topk, int64_t hs, int64_t ts, int batch,
                                 const int32_t *cu, int hkv, int bk, int top_k)
{
    for (int h = 0; h < hkv; h++)
        for (int b = 0; b < batch; b++)
            for (int t = cu[b]; t < cu[b + 1]; t++) {
                const int32_t *row = topk + h * hs + t * ts;
                int c = (t - cu[b]) / bk;
                int want = top_k < c + 1 ? top_k : c + 1;
                int has0 = 0, hasc = 0, hasprev = 0;
                for (int s = 0; s < top_k; s++) {
                    if (s >= want) {
                        assert_int_equal(row[s], -1);
                        continue;
                    }
                    assert_true(row[s] >= 0 && row[s] <= c);
                    if (s > 0) assert_true(row[s] > row[s - 1]); /* sorted, distinct */
                    has0 |= row[s] == 0;
                    hasc |= row[s] == c;
                    hasprev |= row[s] == c - 1;
                }
                assert_true(hasc);
                if (top_k >= 2) assert_true(has0);
                if (top_k >= 3 && c >= 1) assert_true(hasprev);
            }
}

static void test_selection_rows_are_sorted_distinct_and_hold_first_own_and_previous_block(
    void **state)
{
    (void)state;
    const int32_t cu[] = {0, 1, 6, 70, 200, 233};
    const int ks[] = {1, 2, 3, 5, 16};
    for (int n = 0; n < 5; n++) {
        int K = ks[n];
        int32_t *topk = malloc((size_t)3 * 233 * K * sizeof *topk);
        assert_non_null(topk);
        fsa_rng rng = {(uint64_t)(80 + n)};
        fsa_ref_make_selection(topk, (int64_t)233 * K, K, 233, 5, cu, 3, 8, K, &rng);
        check_generated_rows(topk, (int64_t)233 * K, K, 5, cu, 3, 8, K);
        free(topk);
    }
}

static void test_selection_generator_writes_the_same_rows_in_both_layouts(void **state)
{
    (void)state;
    const int32_t cu[] = {0, 17, 100};
    enum { T = 100, H = 4, K = 6 };
    int32_t *hm = malloc(sizeof(int32_t) * H * T * K), *tm = malloc(sizeof(int32_t) * H * T * K);
    assert_non_null(hm);
    assert_non_null(tm);
    memset(hm, 0x55, sizeof(int32_t) * H * T * K); /* every element must be written */
    memset(tm, 0x55, sizeof(int32_t) * H * T * K);
    fsa_rng r1 = {90}, r2 = {90};
    fsa_ref_make_selection(hm, (int64_t)T * K, K, T, 2, cu, H, 4, K, &r1);
    fsa_ref_make_selection(tm, K, (int64_t)H * K, T, 2, cu, H, 4, K, &r2);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            assert_memory_equal(hm + ((size_t)h * T + t) * K, tm + ((size_t)t * H + h) * K,
                                sizeof(int32_t) * K);
    check_generated_rows(hm, (int64_t)T * K, K, 2, cu, H, 4, K);
    free(hm);
    free(tm);
}

static void test_selection_draws_the_free_slots_uniformly(void **state)
{
    (void)state;
    /* Own block c = 9 (tokens 72..79 of 80, BK = 8), K = 5: blocks 0, 8, 9
     * are fixed and 2 slots come from 1..7, each block with chance 2/7. */
    enum { T = 80, H = 500, K = 5 };
    const int32_t cu[] = {0, T};
    int32_t *topk = malloc(sizeof(int32_t) * H * T * K);
    assert_non_null(topk);
    fsa_rng rng = {95};
    fsa_ref_make_selection(topk, (int64_t)T * K, K, T, 1, cu, H, 8, K, &rng);
    int counts[10] = {0};
    int rows = 0;
    for (int h = 0; h < H; h++)
        for (int t = 72; t < T; t++, rows++)
            for (int s = 0; s < K; s++) counts[topk[((size_t)h * T + t) * K + s]]++;
    assert_int_equal(counts[0], rows);
    assert_int_equal(counts[8], rows);
    assert_int_equal(counts[9], rows);
    double expect = rows * 2.0 / 7.0;
    for (int blk = 1; blk <= 7; blk++) assert_true(fabs(counts[blk] - expect) < 0.1 * expect);
    free(topk);
}

/* -------------------------------------------------------------- metrics */

static void test_rel_error_is_infinite_for_nan_or_inf_and_zero_for_identical_arrays(void **state)
{
    (void)state;
    const double b[3] = {1.0, -2.0, 0.5};
    const float same[3] = {1.0f, -2.0f, 0.5f};
    const float with_nan[3] = {1.0f, NAN, 0.5f};
    const float with_inf[3] = {1.0f, -2.0f, INFINITY};
    assert_true(fsa_rel_error(same, b, 3) == 0.0);
    assert_true(isinf(fsa_rel_error(with_nan, b, 3)));
    assert_true(isinf(fsa_rel_error(with_inf, b, 3)));
    assert_true(isinf(fsa_max_abs_error(with_nan, b, 3)));
    assert_true(fsa_max_abs_error(same, b, 3) == 0.0);

    /* Matching -inf (empty rows' lse) is no error; a finite value there is. */
    const double lse_ref[2] = {-INFINITY, 3.0};
    const float lse_ok[2] = {-INFINITY, 3.0f};
    const float lse_bad[2] = {0.0f, 3.0f};
    assert_true(fsa_rel_error(lse_ok, lse_ref, 2) == 0.0);
    assert_true(isinf(fsa_rel_error(lse_bad, lse_ref, 2)));

    /* ||(1,2) - (1,0)|| / ||(1,0)|| = 2. */
    const float a2[2] = {1.0f, 2.0f};
    const double b2[2] = {1.0, 0.0};
    assert_true(fabs(fsa_rel_error(a2, b2, 2) - 2.0) < 1e-15);
    const double a2d[2] = {1.0, 2.0};
    assert_true(fabs(fsa_rel_error_d(a2d, b2, 2) - 2.0) < 1e-15);
    assert_true(fabs(fsa_max_abs_error(a2, b2, 2) - 2.0) < 1e-15);
}

static void test_selected_entries_count_non_negative_entries_for_the_flop_count(void **state)
{
    (void)state;
    /* Head-major [2, 3, 2]. */
    const int32_t topk[12] = {0, -1, 0, 1, 5, -1, -1, -1, 2, 0, 0, 3};
    int64_t n = fsa_ref_selected_entries(topk, 6, 2, 3, 2, 2);
    assert_int_equal(n, 8);
    assert_true(fsa_ref_selected_flops(n, 4, 64, 128) == 4.0 * 8 * 4 * 64 * 128);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_matches_central_finite_differences),
        cmocka_unit_test(test_forward_matches_dense_masked_softmax_for_both_index_layouts),
        cmocka_unit_test(test_forward_row_gives_the_same_bits_as_the_full_forward),
        cmocka_unit_test(test_row_of_unused_entries_gives_zero_output_and_negative_infinite_lse),
        cmocka_unit_test(test_token_whose_only_visible_key_is_itself_outputs_its_value),
        cmocka_unit_test(test_future_blocks_and_out_of_range_indices_are_ignored),
        cmocka_unit_test(test_duplicated_block_counts_once),
        cmocka_unit_test(test_slot_valid_accepts_only_first_occurrences_of_causal_blocks),
        cmocka_unit_test(test_lse_matches_log_sum_exp_computed_by_hand),
        cmocka_unit_test(test_sequence_of_maps_tokens_past_empty_sequences),
        cmocka_unit_test(
            test_selection_rows_are_sorted_distinct_and_hold_first_own_and_previous_block),
        cmocka_unit_test(test_selection_generator_writes_the_same_rows_in_both_layouts),
        cmocka_unit_test(test_selection_draws_the_free_slots_uniformly),
        cmocka_unit_test(test_rel_error_is_infinite_for_nan_or_inf_and_zero_for_identical_arrays),
        cmocka_unit_test(test_selected_entries_count_non_negative_entries_for_the_flop_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
