/* NSA's gates on the GPU against a float64 CPU reference: o = sum of g_x o_x,
 * and its gradients g_x dout and rowsum(dout o_x); both dtypes, value dims
 * 16 to 256 (a row's lanes 2 to 32), gates per row, per token, per head and
 * single numbers (zero strides), strided outputs (their padding never
 * written), gradients left out; outputs checked as a whole and row by row;
 * outputs poisoned before every run, the same bits twice, the argument
 * checks. */
#include "attention_problem.h"
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gate_case {
    const char *name;
    fsa_dtype dtype;
    int dv, T, H;
    int gate_kind; /* 0: [T, H]; 1: per token (head stride 0); 2: per head (token stride 0); 3: one number */
    int pad;       /* extra elements per row of the dtype tensors (strided views) */
    int want_dbranch, want_dgate;
} gate_case;

static const gate_case cases[] = {
    {"bf16_dv128_paper", FSA_DTYPE_BF16, 128, 300, 64, 0, 0, 1, 1},
    {"f16_dv64_per_token", FSA_DTYPE_F16, 64, 257, 5, 1, 8, 1, 1},
    {"bf16_dv192_per_head", FSA_DTYPE_BF16, 192, 70, 3, 2, 16, 1, 1},
    {"f16_dv256_one_number", FSA_DTYPE_F16, 256, 33, 2, 3, 0, 1, 0},
    {"bf16_dv16_dgate_only", FSA_DTYPE_BF16, 16, 1001, 7, 0, 8, 0, 1},
    {"bf16_dv48_one_row", FSA_DTYPE_BF16, 48, 1, 1, 0, 0, 1, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;

static void gate_strides(const gate_case *c, int64_t *ts, int64_t *hs)
{
    *ts = c->gate_kind == 0 ? c->H : c->gate_kind == 1 ? 1 : 0;
    *hs = c->gate_kind == 0 || c->gate_kind == 2 ? 1 : 0;
}

static uint64_t upload_floats(const float *src, size_t n)
{
    const uint64_t d = fsa_test_dalloc(n * sizeof(float) + 16);
    fsa_test_h2d(d, src, n * sizeof(float));
    return d;
}

static void run_case(const gate_case *c)
{
    fsa_gate_desc desc = FSA_GATE_DESC_INIT;
    desc.dtype = c->dtype;
    desc.value_dim = c->dv;
    fsa_gate_plan *plan = NULL;
    if (fsa_gate_plan_create(&plan, g_ctx, &desc) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());

    const int T = c->T, H = c->H, D = c->dv;
    const size_t rows = (size_t)T * H, n = rows * D;
    const int64_t hs = D + c->pad, ts = (int64_t)H * hs;
    fsa_rng rng = {0x6a7eu + (uint64_t)(c - cases)};
    float *out[3], *dout = malloc(n * sizeof(float)), *gate[3];
    int64_t gts, ghs;
    gate_strides(c, &gts, &ghs);
    const size_t gate_n = (size_t)(T - 1) * (size_t)gts + (size_t)(H - 1) * (size_t)ghs + 1;
    for (int x = 0; x < 3; x++) {
        out[x] = malloc(n * sizeof(float));
        gate[x] = malloc(gate_n * sizeof(float));
        for (size_t e = 0; e < n; e++) out[x][e] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
        for (size_t e = 0; e < gate_n; e++) gate[x][e] = (float)fsa_rng_normal(&rng);
    }
    for (size_t e = 0; e < n; e++) dout[e] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));

    /* The reference: sums in float64 over the values the kernels read. */
    double *o_ref = malloc(n * sizeof(double)), *db_ref = malloc(3 * n * sizeof(double));
    double *dg_ref = malloc(3 * rows * sizeof(double));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const size_t r = (size_t)t * H + h;
            for (int x = 0; x < 3; x++) dg_ref[x * rows + r] = 0.0;
            for (int j = 0; j < D; j++) {
                double s = 0.0;
                for (int x = 0; x < 3; x++) {
                    const double g = gate[x][t * gts + h * ghs];
                    s += g * out[x][r * D + j];
                    db_ref[x * n + r * D + j] = g * dout[r * D + j];
                    dg_ref[x * rows + r] += (double)dout[r * D + j] * out[x][r * D + j];
                }
                o_ref[r * D + j] = s;
            }
        }

    fsa_gate_args a = FSA_GATE_ARGS_INIT;
    a.total_tokens = T;
    a.num_heads = H;
    uint64_t d_out[3], d_gate[3], d_db[3];
    const size_t img_bytes = (size_t)T * ts * 2 + 16;
    for (int x = 0; x < 3; x++) {
        d_out[x] = upload_strided(out[x], T, H, D, ts, hs, c->dtype);
        d_gate[x] = upload_floats(gate[x], gate_n);
        d_db[x] = fsa_test_dalloc(img_bytes);
        a.out[x] = (fsa_tensor){d_out[x], ts, hs};
        a.gate[x] = (fsa_tensor){d_gate[x], gts, ghs};
        a.dout_branch[x] = (fsa_tensor){c->want_dbranch ? d_db[x] : 0, ts, hs};
    }
    const uint64_t d_o = fsa_test_dalloc(img_bytes), d_dout = upload_strided(dout, T, H, D, ts, hs, c->dtype);
    const uint64_t d_dg = fsa_test_dalloc(3 * rows * sizeof(float));
    a.o = (fsa_tensor){d_o, ts, hs};
    a.dout = (fsa_tensor){d_dout, ts, hs};
    a.dgate = c->want_dgate ? d_dg : 0;

    float *got = malloc(3 * n * sizeof(float)), *dg = malloc(3 * rows * sizeof(float));
    uint16_t *img[2] = {malloc(img_bytes), malloc(img_bytes)}, *db_img = malloc(img_bytes);
    unsigned char *first_db[3] = {NULL, NULL, NULL}, *first_dg = NULL; /* the first run's gradient buffers, whole */
    for (int run = 0; run < 2; run++) {
        fsa_test_dfill(d_o, 0xff, img_bytes);
        fsa_test_dfill(d_dg, 0xff, 3 * rows * sizeof(float));
        for (int x = 0; x < 3; x++) fsa_test_dfill(d_db[x], 0xff, img_bytes);
        if (fsa_gate_fwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        if (fsa_gate_bwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        download_strided(got, img[run], d_o, T, H, D, ts, hs, c->dtype);
        if (run == 1) {
            /* Same inputs, same bits: o, and dout_branch and dgate (where left out, the poison both times). */
            assert_memory_equal(img[0], img[1], (size_t)T * ts * 2);
            for (int x = 0; x < 3; x++) {
                unsigned char *again = fsa_test_image(d_db[x], img_bytes);
                assert_memory_equal(first_db[x], again, img_bytes);
                free(again);
            }
            unsigned char *dg_again = fsa_test_image(d_dg, 3 * rows * sizeof(float));
            assert_memory_equal(first_dg, dg_again, 3 * rows * sizeof(float));
            free(dg_again);
            continue;
        }
        for (int x = 0; x < 3; x++) first_db[x] = fsa_test_image(d_db[x], img_bytes);
        first_dg = fsa_test_image(d_dg, 3 * rows * sizeof(float));
        const double tol = c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 2e-3;
        double err = fsa_rel_error(got, o_ref, n);
        attn_row_err row = attn_row_error(got, o_ref, T, H, D);
        print_message("  %-22s (tol %.0e, a row's %.0e) o %.3e (worst row %.3e, t %d h %d)", c->name, tol,
                      ATTN_ROW_TOL * tol, err, row.err, row.t, row.h);
        assert_true(err < tol);
        assert_true(row.err < ATTN_ROW_TOL * tol);
        /* The outputs were poisoned: the columns past D in each head still hold it. */
        char what[64];
        snprintf(what, sizeof what, "%s: o", c->name);
        fsa_test_assert_padding_untouched(img[run], (size_t)T * ts, T, H, D, ts, hs, ATTN_POISON16, what);
        if (c->want_dbranch)
            for (int x = 0; x < 3; x++) {
                download_strided(got + x * n, db_img, d_db[x], T, H, D, ts, hs, c->dtype);
                snprintf(what, sizeof what, "%s: dout_branch[%d]", c->name, x);
                fsa_test_assert_padding_untouched(db_img, (size_t)T * ts, T, H, D, ts, hs, ATTN_POISON16, what);
                err = fsa_rel_error(got + x * n, db_ref + x * n, n);
                row = attn_row_error(got + x * n, db_ref + x * n, T, H, D);
                print_message(" dout_%d %.3e (worst row %.3e, t %d h %d)", x, err, row.err, row.t, row.h);
                assert_true(err < tol);
                assert_true(row.err < ATTN_ROW_TOL * tol);
            }
        else
            for (int x = 0; x < 3; x++) fsa_test_assert_untouched(d_db[x], img_bytes, 0xff);
        if (c->want_dgate) {
            fsa_test_d2h(dg, d_dg, 3 * rows * sizeof(float));
            err = fsa_rel_error(dg, dg_ref, 3 * rows);
            print_message(" dgate %.3e", err);
            assert_true(err < 1e-5); /* fp32 sums of the exact products */
        } else {
            fsa_test_assert_untouched(d_dg, 3 * rows * sizeof(float), 0xff);
        }
        print_message("\n");
    }
    for (int x = 0; x < 3; x++) {
        fsa_test_dfree(d_out[x]);
        fsa_test_dfree(d_gate[x]);
        fsa_test_dfree(d_db[x]);
        free(out[x]);
        free(gate[x]);
        free(first_db[x]);
    }
    free(first_dg);
    fsa_test_dfree(d_o);
    fsa_test_dfree(d_dout);
    fsa_test_dfree(d_dg);
    free(img[0]), free(img[1]), free(db_img), free(got), free(dg), free(dout), free(o_ref), free(db_ref), free(dg_ref);
    fsa_gate_plan_destroy(plan);
}

static void test_the_gates_and_their_gradients_match_the_reference_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) run_case(&cases[i]);
}

static void test_bad_arguments_are_refused_before_any_launch(void **state)
{
    (void)state;
    fsa_gate_desc desc = FSA_GATE_DESC_INIT;
    fsa_gate_plan *plan = NULL;
    desc.value_dim = 24;
    assert_int_equal(fsa_gate_plan_create(&plan, g_ctx, &desc), FSA_STATUS_UNSUPPORTED);
    assert_null(plan);
    desc.value_dim = 64;
    desc.dtype = (fsa_dtype)7;
    assert_int_equal(fsa_gate_plan_create(&plan, g_ctx, &desc), FSA_STATUS_INVALID_ARGUMENT);
    desc.dtype = FSA_DTYPE_BF16;
    assert_int_equal(fsa_gate_plan_create(&plan, g_ctx, &desc), FSA_STATUS_OK);

    const uint64_t buf = fsa_test_dalloc(4096);
    fsa_test_dfill(buf, 0, 4096); /* the calls that succeed read it */
    fsa_gate_args a = FSA_GATE_ARGS_INIT;
    a.total_tokens = 2;
    a.num_heads = 1;
    for (int x = 0; x < 3; x++) {
        a.out[x] = (fsa_tensor){buf, 64, 64};
        a.gate[x] = (fsa_tensor){buf, 1, 0};
        a.dout_branch[x] = (fsa_tensor){buf + 1024, 64, 64};
    }
    a.o = a.dout = (fsa_tensor){buf + 2048, 64, 64};
    a.dgate = buf + 3072;
    assert_int_equal(fsa_gate_fwd(plan, &a, NULL), FSA_STATUS_OK);
    assert_int_equal(fsa_gate_bwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    /* What the calls write (o, dout_branch, dgate: bytes 1024-4095) poisoned: a refused call leaves it. */
    fsa_test_dfill(buf + 1024, 0xff, 3072);
    assert_int_equal(fsa_gate_fwd(NULL, &a, NULL), FSA_STATUS_NULL_POINTER);
    fsa_gate_args b = a;
    b.num_heads = 0;
    assert_int_equal(fsa_gate_fwd(plan, &b, NULL), FSA_STATUS_INVALID_ARGUMENT);
    b = a;
    b.out[1].ptr = buf + 2;
    assert_int_equal(fsa_gate_fwd(plan, &b, NULL), FSA_STATUS_MISALIGNED);
    b = a;
    b.gate[2].ptr = 0;
    assert_int_equal(fsa_gate_bwd(plan, &b, NULL), FSA_STATUS_NULL_POINTER);
    b = a;
    b.gate[0].token_stride = -1;
    assert_int_equal(fsa_gate_fwd(plan, &b, NULL), FSA_STATUS_INVALID_ARGUMENT);
    b = a;
    b.o.ptr = 0;
    assert_int_equal(fsa_gate_fwd(plan, &b, NULL), FSA_STATUS_NULL_POINTER);
    fsa_test_sync();
    fsa_test_assert_untouched(buf + 1024, 3072, 0xff);
    assert_int_equal(fsa_gate_bwd(plan, &b, NULL), FSA_STATUS_OK); /* the backward does not read o */
    fsa_test_sync();
    fsa_test_dfill(buf + 1024, 0xff, 3072);
    b = a;
    b.dgate = buf + 3074;
    assert_int_equal(fsa_gate_bwd(plan, &b, NULL), FSA_STATUS_MISALIGNED);
    b = a;
    b.struct_size = 8;
    assert_int_equal(fsa_gate_fwd(plan, &b, NULL), FSA_STATUS_STRUCT_SIZE);
    b = a;
    b.total_tokens = 0;
    b.o.ptr = 0;
    assert_int_equal(fsa_gate_fwd(plan, &b, NULL), FSA_STATUS_OK); /* nothing to do */
    fsa_test_sync();
    fsa_test_assert_untouched(buf + 1024, 3072, 0xff);
    fsa_test_dfree(buf);
    fsa_gate_plan_destroy(plan);
}

static int setup(void **state)
{
    (void)state;
    g_cache_dir = fsa_test_mkdtemp("gate-cache");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_gates_and_their_gradients_match_the_reference_on_every_case),
        cmocka_unit_test(test_bad_arguments_are_refused_before_any_launch),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
