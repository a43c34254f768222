/* The paged-cache call's answers to bad host arguments, without a GPU: a
 * plan without kernels on an offline context (sm_90a, cache off) takes
 * fsa_kvcache_attention's checks, and arguments that pass every one stop at
 * the device (FSA_STATUS_NO_DEVICE). The block table is a strided int32 view
 * [batch, max_pages_per_seq] the kernels index with signed 64-bit offsets, so
 * like every tensor view its entries must lie below 2^63 bytes of address:
 * a row stride that reaches past it is refused, with the table named, instead
 * of wrapping to some other memory on the device. Counts past the plan's,
 * an lse past 2^63 bytes and a misaligned page stride are refused too, a
 * call without query tokens needs nothing, and tuning needs it on. (The calls
 * with compiled kernels: tests/nvrtc/test_kvcache_plan.c.) */
#include "api_validation_fixture.h"

#include "attention/kvcache.h"

#include <stdint.h>
#include <string.h>

#define HQ 4 /* G 2, D = Dv = 64, BK 64, top-k 4, pages of 16 tokens */
#define HKV 2
#define D 64
#define K 4
#define PAGE 16
#define AT(n) (0x7f0000000000ull + ((uint64_t)(n) << 24)) /* 16 MiB apart: no two arrays meet */

/* A plan as fsa_kvcache_plan_create makes it, less its kernels. */
static void make_plan(fsa_kvcache_plan *p, fsa_context *ctx)
{
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->desc = (fsa_kvcache_desc)FSA_KVCACHE_DESC_INIT;
    p->desc.head_dim = D;
    p->desc.value_dim = D;
    p->desc.num_q_heads = HQ;
    p->desc.num_kv_heads = HKV;
    p->desc.top_k = K;
    p->desc.page_size = PAGE;
    p->desc.max_batch = 4;
    p->desc.max_query_tokens = 16;
    p->group = HQ / HKV;
    p->tile_tokens = fsa_kvc_tile_tokens(p->group);
    fsa_kvc_tuning_init(p);
}

/* Four sequences of one new token each over 64 pages; rows of 16 table entries. */
static fsa_kvcache_args good_args(const fsa_kvcache_plan *p)
{
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    a.num_query_tokens = 4;
    a.batch = 4;
    a.q = (fsa_tensor){AT(1), HQ * D, D};
    a.o = (fsa_tensor){AT(2), HQ * D, D};
    a.k_cache = (fsa_tensor){AT(3), HKV * D, D};
    a.v_cache = (fsa_tensor){AT(4), HKV * D, D};
    a.k_page_stride = a.v_page_stride = PAGE * HKV * D;
    a.num_pages = 64;
    a.block_table = AT(5);
    a.block_table_stride = 16;
    a.max_pages_per_seq = 16;
    a.seqused_k = AT(6);
    a.cu_seqlens_q = AT(7);
    a.topk = (fsa_tensor){AT(8), HKV * K, K};
    a.lse = AT(9);
    a.workspace = AT(10);
    a.workspace_bytes = fsa_kvc_workspace_bytes(p);
    return a;
}

static void test_arguments_that_pass_every_check_stop_at_the_device(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    const fsa_kvcache_args a = good_args(&p);
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_kvcache_attention(&p, &a, NULL));
}

static void test_a_block_table_whose_rows_reach_past_two_to_the_63_bytes_is_refused(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    fsa_kvcache_args a = good_args(&p);
    /* Row 3 would start 3 x 2^61 entries (2^64.6 bytes) in: its address wraps. */
    a.block_table_stride = INT64_C(1) << 61;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "block_table"));
    /* A stride whose product with the rows overflows 64 bits. */
    a.block_table_stride = INT64_MAX;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    /* A table at the top of the address space, its entries past 2^63 bytes. */
    a = good_args(&p);
    a.block_table = UINT64_MAX - 255;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "block_table"));
}

static void test_the_block_tables_last_entry_just_below_two_to_the_63_bytes_is_accepted(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    fsa_kvcache_args a = good_args(&p);
    /* Entry (3, 15) starts at 2^63 - 4: every entry lies below 2^63. */
    a.block_table = (UINT64_C(1) << 63) - 4 - 4 * (3 * 16 + 15);
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_kvcache_attention(&p, &a, NULL));
    a.block_table += 4;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    /* One sequence: the row stride is never used, whatever it is. */
    a = good_args(&p);
    a.batch = 1;
    a.num_query_tokens = 1;
    a.block_table_stride = INT64_MAX;
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_kvcache_attention(&p, &a, NULL));
}

/* Counts below zero or past the plan's are invalid arguments, as are query
 * tokens of no sequence and a cache of no page; the plan's own limits are
 * calls. */
static void test_counts_outside_the_plan_are_invalid_arguments_and_its_limits_are_calls(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    fsa_kvcache_args a = good_args(&p);
    a.num_query_tokens = -1;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "num_query_tokens -1"));
    a = good_args(&p), a.batch = -1;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "batch -1"));
    a = good_args(&p), a.batch = 0, a.num_query_tokens = 1;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    a = good_args(&p), a.num_pages = 0;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "num_pages 0"));
    a = good_args(&p), a.num_query_tokens = p.desc.max_query_tokens, a.batch = p.desc.max_batch;
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_kvcache_attention(&p, &a, NULL));
}

/* A call without query tokens does nothing: it needs no tensor (nor a device). */
static void test_a_call_without_query_tokens_needs_no_tensor(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    EXPECT_STATUS(FSA_STATUS_OK, fsa_kvcache_attention(&p, &a, NULL));
    a.batch = 4; /* sequences with no new token */
    EXPECT_STATUS(FSA_STATUS_OK, fsa_kvcache_attention(&p, &a, NULL));
}

/* Two pages already use the page stride: a multiple of 8 elements, as every stride. */
static void test_two_pages_take_a_page_stride_in_multiples_of_8_elements(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    fsa_kvcache_args a = good_args(&p);
    a.num_pages = 2;
    a.v_page_stride += 4;
    EXPECT_REFUSED(FSA_STATUS_MISALIGNED, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "v_cache page stride"));
}

/* lse holds Hq x Tq floats: the last one just below 2^63 bytes is fine, one
 * float further is refused. */
static void test_lses_last_float_must_lie_below_two_to_the_63_bytes(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    fsa_kvcache_args a = good_args(&p);
    a.lse = (UINT64_C(1) << 63) - 4 * HQ * (uint64_t)a.num_query_tokens;
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_kvcache_attention(&p, &a, NULL));
    a.lse += 4;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_attention(&p, &a, NULL));
    assert_non_null(strstr(fsa_last_error(), "lse"));
}

/* Measuring needs tuning on in the plan's context: with it off, the plan's
 * tuning call is an invalid argument, device or not. */
static void test_tuning_a_plan_of_a_context_without_tuning_is_an_invalid_argument(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    int measured = 7;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_kvcache_plan_tune(&measured, &p, NULL));
    assert_non_null(strstr(fsa_last_error(), "tuning is off"));
    assert_int_equal(measured, 0);
}

/* A launch has a grid row per (KV head, CTA of its pair): where a CTA per
 * share would pass 65535 rows, the pair's shares share fewer CTAs (one
 * always fits), whatever FSA_KVC_CTAS asked for. */
static void test_a_launchs_ctas_per_pair_keep_its_grid_within_65535_rows(void **state)
{
    fsa_kvcache_plan p;
    make_plan(&p, *state);
    p.resident = 132;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 4), 4); /* 2 KV heads: a CTA per share */
    p.desc.num_kv_heads = 65535;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 4), 1);
    p.desc.num_kv_heads = 16384; /* 16384 x 4 = 65536 rows: one too many; 2 CTAs fit */
    assert_in_range(fsa_kvc_ctas_per_pair(&p, 1, 4), 1, 2);
    p.desc.num_kv_heads = 16383; /* 65532 rows: a CTA per share is the rule's choice again */
    p.resident = 1 << 20;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 4), 4);
    p.ctas = 4; /* the measurement override, past the rows: not taken */
    p.desc.num_kv_heads = 65535;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 4), 1);
    p.desc.num_kv_heads = 2;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 4), 4);
    /* Exactly 65535 rows fit: 21845 KV heads x 3 CTAs, the rule's choice for 3 shares in one wave; with one
     * CTA resident (a wave per CTA) the rule takes one CTA a pair, and the override's 3 still fit. */
    p.ctas = 0;
    p.desc.num_kv_heads = 21845;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 3), 3);
    p.resident = 1;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 3), 1);
    p.ctas = 3;
    assert_int_equal(fsa_kvc_ctas_per_pair(&p, 1, 3), 3);
}

int main(void)
{
#define OFF(fn) cmocka_unit_test_setup_teardown(fn, setup_offline, teardown_offline)
    const struct CMUnitTest tests[] = {
        OFF(test_arguments_that_pass_every_check_stop_at_the_device),
        OFF(test_a_block_table_whose_rows_reach_past_two_to_the_63_bytes_is_refused),
        OFF(test_the_block_tables_last_entry_just_below_two_to_the_63_bytes_is_accepted),
        OFF(test_a_launchs_ctas_per_pair_keep_its_grid_within_65535_rows),
        OFF(test_counts_outside_the_plan_are_invalid_arguments_and_its_limits_are_calls),
        OFF(test_a_call_without_query_tokens_needs_no_tensor),
        OFF(test_two_pages_take_a_page_stride_in_multiples_of_8_elements),
        OFF(test_lses_last_float_must_lie_below_two_to_the_63_bytes),
        OFF(test_tuning_a_plan_of_a_context_without_tuning_is_an_invalid_argument),
    };
#undef OFF
    return cmocka_run_group_tests(tests, NULL, NULL);
}
