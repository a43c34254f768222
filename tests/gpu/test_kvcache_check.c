/* Check mode for calls over a paged KV cache, on the GPU: metadata that
 * breaks the contract (cu_seqlens_q that falls, cached lengths shorter than
 * the new tokens or longer than the block-table row, page numbers of used
 * pages outside the cache, top-k entries past the cache) is
 * FSA_STATUS_INVALID_ARGUMENT saying what and where; valid metadata gives
 * the very bits of a plain plan; without check mode the same bad metadata
 * runs (the kernels clamp every bound; compute-sanitizer checks the accesses
 * when it runs this test). */
#include "kvcache_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* name  dtype d hq hkv bk k page seqs  n  topk  hnd len junk quick */
static const kvc_case g_case = {"bf16_d64_g2_bk32_page16", BF, 64, 4, 2, 32, 4, 16,
                                {{1, 100}, {4, 40}, {3, 0}, {2, 65}}, 4, KVC_TOPK_HTK, 0, 1, 0, 1};
enum { MAX_BATCH = 8, MAX_TOKENS = 64 };

static char *g_cache_dir;
static fsa_context *g_plain_ctx, *g_check_ctx;
static fsa_kvcache_plan *g_plain, *g_check;

typedef struct call {
    kvc_problem p;
    kvc_device dv;
    fsa_kvcache_args a;
} call;

static void call_make(call *c)
{
    kvc_problem_make(&c->p, &g_case, 0x6b7c);
    kvc_device_make(&c->dv, &c->p, g_check);
    c->a = kvc_args_of(&c->dv, &c->p);
}

static void call_free(call *c)
{
    kvc_device_free(&c->dv);
    kvc_problem_free(&c->p);
}

/* Uploads the host metadata of c->p after a test changed it (the caches stay
 * as they are: they follow the logical sequences, not the metadata). */
static void upload(call *c)
{
    fsa_test_h2d(c->dv.cu, c->p.cu_q, sizeof c->p.cu_q);
    fsa_test_h2d(c->dv.seqused, c->p.seqused, sizeof c->p.seqused);
    fsa_test_h2d(c->dv.table, c->p.table, (size_t)c->p.B * c->p.table_stride * 4);
    fsa_test_h2d(c->dv.topk, c->p.topk, c->p.topk_elems * 4);
    if (c->p.topk_len) fsa_test_h2d(c->dv.topk_len, c->p.topk_len, (size_t)c->p.Tq * 4);
}

static fsa_status attend(const fsa_kvcache_plan *plan, call *c)
{
    kvc_poison(&c->dv, &c->p);
    const fsa_status st = fsa_kvcache_attention(plan, &c->a, NULL);
    fsa_test_sync(); /* also: nothing faulted */
    return st;
}

/* A bad call: refused in check mode with a message naming `what`; the plain
 * plan runs it. */
static void expect_refused_only_in_check_mode(call *c, const char *what)
{
    assert_int_equal(attend(g_check, c), FSA_STATUS_INVALID_ARGUMENT);
    if (strstr(fsa_last_error(), what) == NULL) fail_msg("\"%s\" does not mention %s", fsa_last_error(), what);
    assert_int_equal(attend(g_plain, c), FSA_STATUS_OK);
}

static void test_valid_metadata_passes_and_gives_the_bits_of_a_plain_plan(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    kvc_outputs plain, checked;
    assert_int_equal(attend(g_plain, &c), FSA_STATUS_OK);
    kvc_download(&plain, &c.dv, &c.p);
    if (attend(g_check, &c) != FSA_STATUS_OK) fail_msg("valid metadata refused: %s", fsa_last_error());
    kvc_download(&checked, &c.dv, &c.p);
    assert_memory_equal(plain.o_bits, checked.o_bits, (size_t)c.p.Tq * c.p.hq * c.p.dv * 2);
    assert_memory_equal(plain.lse, checked.lse, (size_t)c.p.hq * c.p.Tq * 4);
    for (size_t i = 0; i < (size_t)c.p.hq * c.p.Tq; i++) assert_false(isnan(checked.lse[i]));
    kvc_outputs_free(&plain);
    kvc_outputs_free(&checked);
    call_free(&c);
}

static void test_query_offsets_and_cached_lengths_that_break_the_contract_are_refused(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    c.p.cu_q[2] = c.p.cu_q[1] - 1; /* falls after sequence 1 (and sequence 2 grows past its cache) */
    upload(&c);
    expect_refused_only_in_check_mode(&c, "cu_seqlens_q falls");
    call_free(&c);

    call_make(&c);
    c.p.seqused[2] = 2; /* 3 new tokens */
    upload(&c);
    expect_refused_only_in_check_mode(&c, "seqused_k below the sequence's new tokens (first at sequence 2)");
    call_free(&c);

    call_make(&c);
    c.p.seqused[3] = c.p.max_pages * c.p.page + 1;
    upload(&c);
    expect_refused_only_in_check_mode(&c, "seqused_k beyond the pages of its block-table row");
    call_free(&c);
}

static void test_page_numbers_of_used_pages_outside_the_cache_are_refused(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    /* Sequence 1 holds 44 keys: pages 0..2 of its row are used. */
    c.p.table[(size_t)1 * c.p.table_stride + 2] = c.p.num_pages;
    upload(&c);
    expect_refused_only_in_check_mode(&c, "block_table entries of used pages outside [0, num_pages) (first at "
                                          "sequence 1)");
    call_free(&c);

    call_make(&c);
    c.p.table[0] = -1;
    upload(&c);
    expect_refused_only_in_check_mode(&c, "(first at sequence 0)");
    call_free(&c);

    /* Garbage past the used pages is fine: the row's last slot backs nothing. */
    call_make(&c);
    c.p.table[(size_t)2 * c.p.table_stride + c.p.max_pages - 1] = -12345;
    upload(&c);
    if (attend(g_check, &c) != FSA_STATUS_OK) fail_msg("garbage past the used pages refused: %s", fsa_last_error());
    call_free(&c);
}

static size_t topk_at(const call *c, int t, int h, int s) { return (size_t)(h * c->p.topk_hs + t * c->p.topk_ts + s); }

static void test_top_k_entries_past_the_cache_are_refused_and_repeats_allowed(void **state)
{
    (void)state;
    call c;
    call_make(&c);
    /* Token 1 is sequence 1's first new token: 44 cached keys, blocks 0 and 1. */
    c.p.topk[topk_at(&c, 1, 1, 0)] = 2;
    if (c.p.topk_len) c.p.topk_len[1] = c.p.k;
    upload(&c);
    expect_refused_only_in_check_mode(&c, "top-k entries neither -1 nor a block of the token's sequence (first at "
                                          "token 1, KV head 1)");
    call_free(&c);

    call_make(&c);
    c.p.topk[topk_at(&c, 3, 0, 0)] = 0;
    c.p.topk[topk_at(&c, 3, 0, 1)] = 0;
    if (c.p.topk_len) c.p.topk_len[3] = c.p.k;
    upload(&c);
    if (attend(g_check, &c) != FSA_STATUS_OK) fail_msg("a repeated block refused: %s", fsa_last_error());
    call_free(&c);

    /* Slots past topk_length are not looked at; blocks past the token's own
     * block but inside the cache are allowed. */
    call_make(&c);
    assert_non_null(c.p.topk_len);
    c.p.topk_len[1] = 1;
    c.p.topk[topk_at(&c, 1, 0, 1)] = 99;
    c.p.topk[topk_at(&c, 1, 0, 0)] = 1; /* position 40 is in block 1; sequence 1 caches 44 keys */
    upload(&c);
    if (attend(g_check, &c) != FSA_STATUS_OK) fail_msg("unused slots or future blocks refused: %s", fsa_last_error());
    call_free(&c);
}

static int setup(void **state)
{
    (void)state;
    g_cache_dir = fsa_test_mkdtemp("kvcache-check-cache");
    g_plain_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    g_check_ctx = fsa_test_check_context(g_cache_dir);
    const fsa_kvcache_desc d = kvc_desc_of(&g_case, MAX_BATCH, MAX_TOKENS);
    if (fsa_kvcache_plan_create(&g_plain, g_plain_ctx, &d) != FSA_STATUS_OK ||
        fsa_kvcache_plan_create(&g_check, g_check_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fsa_kvcache_plan_destroy(g_check);
    fsa_kvcache_plan_destroy(g_plain);
    fsa_context_destroy(g_check_ctx);
    fsa_context_destroy(g_plain_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_metadata_passes_and_gives_the_bits_of_a_plain_plan),
        cmocka_unit_test(test_query_offsets_and_cached_lengths_that_break_the_contract_are_refused),
        cmocka_unit_test(test_page_numbers_of_used_pages_outside_the_cache_are_refused),
        cmocka_unit_test(test_top_k_entries_past_the_cache_are_refused_and_repeats_allowed),
    };
    /* Skips (exit 77) inside setup when there is no GPU. */
    return cmocka_run_group_tests(tests, setup, teardown);
}
