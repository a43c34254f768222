/* The chooser's tuning records, without a GPU: token counts round up to
 * power-of-two buckets, a record's key names every field of its bucket (the
 * GPU model and SM count, the KV head count and the kernel switches included, not the workspace cap), and a record's text parses only when it
 * is whole and of the operation asked for. */
#include "chooser_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                          "\nkv_heads 2\n", "\nblock_size 64\n", "\ntop_k 16\n",
                          "\nswitches fwd_wg 0.0 index_per_chunk 0\n", "\ntarget sm_90a\n", "\ngpu NVIDIA Test GPU\n", "\nsms 132\n",
                          "\ncandidates fsa nsa\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(key.text, want[i]) == NULL) fail_msg("%s lacks %s", key.text, want[i]);
    assert_string_equal(key.name, "tune_fwd_bf16_d128_dv128_g4_h2_bk64_k16_t128");
    /* Another KV head count, another GPU model, another SM count, another bucket:
     * another key (a winner at one KV head can lose at eight: the orders' costs scale apart). */
    fsa_kernel_key other;
    f->plan.desc.num_kv_heads = 8;
    f->plan.desc.num_q_heads = 32;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other.hex);
    assert_string_equal(other.name, "tune_fwd_bf16_d128_dv128_g4_h8_bk64_k16_t128");
    fsa_key_free(&other);
    f->plan.desc.num_kv_heads = 2;
    f->plan.desc.num_q_heads = 8;
    /* Another workspace cap, the same key: the Python NSA layer's 2 GiB plans read fsa-precompile's records. */
    f->plan.desc.workspace_limit = (uint64_t)1 << 31;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_equal(key.hex, other.hex);
    fsa_key_free(&other);
    f->plan.desc.workspace_limit = 0;
    /* Another forward kernel variant (FSA_FWD_WG): another forward record. A backward one (FSA_WGMMA_SEL_BWD):
     * the same forward record (plans with and without backward share it), another backward one. */
    f->plan.config.fwd_wg_variant = 3;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other.hex);
    fsa_key_free(&other);
    f->plan.config.fwd_wg_variant = 0;
    fsa_kernel_key bwd;
    assert_int_equal(fsa_tune_record_key(&bwd, &f->plan, FSA_OP_BWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_non_null(strstr(bwd.text, "\nswitches bwd_wg 0 index_per_chunk 0 bwd_rounds 0.0\n"));
    f->plan.bwd_wg = 1, f->plan.config.sel_bwd_wg = 1; /* as plan.c leaves FSA_WGMMA_SEL_BWD=1 (2 by default) */
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_equal(key.hex, other.hex);
    fsa_key_free(&other);
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_BWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(bwd.hex, other.hex);
    fsa_kernel_key v2;
    f->plan.config.sel_bwd_wg = 2; /* the other warpgroup variant: another kernel, another record */
    assert_int_equal(fsa_tune_record_key(&v2, &f->plan, FSA_OP_BWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(v2.hex, other.hex);
    fsa_key_free(&v2);
    fsa_key_free(&other);
    fsa_key_free(&bwd);
    f->plan.bwd_wg = 0, f->plan.config.sel_bwd_wg = 0;
    /* A one-stage layout (fsa_sel_layout_fit, FSA_SEL_LAYOUT_ONE_STAGE): its operation's bits join that
     * operation's switches (another record), the other operation's leave its key alone; 0 writes nothing. */
    f->plan.config.sel_layout = FSA_SEL_LAYOUT_NSA_ONE_STAGE;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_non_null(strstr(other.text, "\nswitches fwd_wg 0.0 index_per_chunk 0 layout 2\n"));
    assert_string_not_equal(key.hex, other.hex);
    fsa_key_free(&other);
    f->plan.config.sel_layout = FSA_SEL_LAYOUT_BWD_ONE_STAGE | FSA_SEL_LAYOUT_DQ_ONE_STAGE;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_equal(key.hex, other.hex);
    fsa_key_free(&other);
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_BWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_non_null(strstr(other.text, "\nswitches bwd_wg 0 index_per_chunk 0 bwd_rounds 0.0 layout 12\n"));
    fsa_key_free(&other);
    f->plan.config.sel_layout = 0;
    snprintf(f->ctx.gpu_name, sizeof f->ctx.gpu_name, "NVIDIA Other GPU");
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other.hex);
    fsa_key_free(&other);
    f->ctx.sm_count = 78;
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(100)), FSA_STATUS_OK);
    assert_string_not_equal(key.hex, other.hex);
    fsa_key_free(&other);
    assert_int_equal(fsa_tune_record_key(&other, &f->plan, FSA_OP_FWD, fsa_tune_bucket(129)), FSA_STATUS_OK);
    assert_string_equal(other.name, "tune_fwd_bf16_d128_dv128_g4_h2_bk64_k16_t256");
    fsa_key_free(&other);
    fsa_key_free(&key);
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

/* "Whole" means no NUL inside either: a record whose newline after the winner is a NUL is not read as
 * naming it (a record cut or damaged on disk would otherwise choose for later calls). */
static void test_a_record_with_a_nul_inside_does_not_parse(void **state)
{
    (void)state;
    fsa_candidates c;
    memset(&c, 0, sizeof c);
    c.n = 2;
    c.v[0].order = FSA_ALGORITHM_FSA;
    c.v[1].order = FSA_ALGORITHM_NSA;
    const double ms[2] = {1.0, 0.5};
    char *t = fsa_tune_record_text(FSA_OP_FWD, &c, 1, ms);
    assert_non_null(t);
    const size_t len = strlen(t);
    assert_int_equal(fsa_tune_record_parse(t, len, FSA_OP_FWD, &c), 2);
    char *w = strstr(t, "winner nsa\n");
    assert_non_null(w);
    w[strlen("winner nsa\n") - 1] = '\0';
    assert_int_equal(fsa_tune_record_parse(t, len, FSA_OP_FWD, &c), 0);
    free(t);
}

#define T(name) cmocka_unit_test_setup_teardown(name, chooser_setup, chooser_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_buckets_round_token_counts_up_to_a_power_of_two),
        T(test_a_record_key_names_every_field_of_the_bucket),
        T(test_record_texts_parse_only_when_whole_and_of_the_operation),
        T(test_a_record_with_a_nul_inside_does_not_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
