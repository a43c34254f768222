/* Selected attention over a paged KV cache on the GPU against the float64
 * reference assembled from the logical sequences: every case of the fixture
 * (kvcache_fixture.c: every page size; decode, speculative (2-8) and prefill
 * (1000) query lengths over 0, 1, 63, 64, 65 and 30000 cached tokens; empty
 * sequences; shuffled pages with garbage past each sequence's pages and NaN
 * in every cache element that backs no key; junk in the top-k rows; top-k
 * lengths; both top-k layouts and a selection shared by all KV heads; NHD
 * and HND pages; group sizes 1 to 64; fp16 and bf16; value head dims other
 * than the query/key head dim; o padded between heads and tokens on the HND
 * cases). Then batch invariance, graph replay after the metadata changed,
 * bad metadata that must stay in bounds, and the host checks. The kernel
 * paths against each other: test_kvcache_paths.c. Outputs are poisoned
 * before every run; o is checked over the tensor and per (token, head) row,
 * lse per row, and o's padding must keep its poison. FSA_TEST_QUICK=1 runs a
 * subset (for compute-sanitizer), FSA_TEST_CASES the cases it names. */
#include "kvcache_fixture.h"

#include "attention/kvcache.h"
#include "jit/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FSA_TEST_CASES=name,name,... runs only the cases named (e.g. one that the
 * quick subset leaves out, under compute-sanitizer). */
static int case_selected(size_t i)
{
    const char *only = getenv("FSA_TEST_CASES");
    if (only != NULL) {
        const size_t n = strlen(kvc_cases[i].name);
        for (const char *at = strstr(only, kvc_cases[i].name); at != NULL; at = strstr(at + 1, kvc_cases[i].name))
            if ((at == only || at[-1] == ',') && (at[n] == ',' || at[n] == '\0')) return 1;
        return 0;
    }
    const char *quick = getenv("FSA_TEST_QUICK");
    return !(quick && atoi(quick)) || kvc_cases[i].quick;
}

/* Every name in FSA_TEST_CASES must be a case of the fixture: a mistyped list would select nothing, and
 * the tests that run the cases would pass having checked none. Exits 1 otherwise. */
static void check_the_case_list(void)
{
    const char *only = getenv("FSA_TEST_CASES");
    if (only == NULL) return;
    int named = 0;
    for (const char *at = only;; at++) {
        const size_t n = strcspn(at, ",");
        if (n > 0) {
            size_t i = 0;
            while (i < kvc_n_cases && (strlen(kvc_cases[i].name) != n || strncmp(kvc_cases[i].name, at, n) != 0)) i++;
            if (i == kvc_n_cases) {
                fprintf(stderr, "FSA_TEST_CASES=%s: no case is named \"%.*s\"\n", only, (int)n, at);
                exit(1);
            }
            named++;
        }
        at += n;
        if (*at == '\0') break;
    }
    if (named == 0) {
        fprintf(stderr, "FSA_TEST_CASES is set but names no case\n");
        exit(1);
    }
}

static void run_cases(int with_dv)
{
    for (size_t i = 0; i < kvc_n_cases; i++) {
        if (!case_selected(i) || (kvc_cases[i].dv != 0) != with_dv) continue;
        kvc_problem p;
        kvc_problem_make(&p, &kvc_cases[i], 1000 + i);
        kvc_problem_reference(&p);
        kvc_run_and_check(kvc_plan_of(i), &p, kvc_cases[i].name, NULL);
        kvc_problem_free(&p);
    }
}

static void test_every_case_matches_the_reference(void **state)
{
    (void)state;
    run_cases(0);
}

static void test_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference(void **state)
{
    (void)state;
    run_cases(1);
}

/* A batch of 64 mixing decode, speculative and prefill lengths; sequence b
 * alone must give the same bits. */
static void assert_case_batch_invariant(size_t ci)
{
    kvc_case c = kvc_cases[ci];
    fsa_rng rng = {7};
    c.nseq = 64;
    for (int b = 0; b < 64; b++) {
        c.seqs[b].q_len = b % 9 == 0 ? 0 : b % 5 == 0 ? fsa_rng_int(&rng, 2, 8) : b == 17 ? 40 : 1;
        c.seqs[b].cached = fsa_rng_int(&rng, 0, 3000);
    }
    kvc_problem p;
    kvc_problem_make(&p, &c, 77);
    kvc_problem_reference(&p);
    const int checked[] = {1, 5, 17, 62};
    kvc_assert_batch_invariant(kvc_plan_of(ci), &p, checked, 4, kvc_run_and_check);
    kvc_problem_free(&p);
}

static void test_a_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64(void **state)
{
    (void)state;
    assert_case_batch_invariant(9); /* bf16 G16, shared selection, HND pages: rows on the 16-row side */
}

static void test_a_small_group_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64(void **state)
{
    (void)state;
    assert_case_batch_invariant(3);  /* bf16 G4, page 64: keys on the 16-row side */
    assert_case_batch_invariant(8);  /* f16 G1, page 16, top-k lengths: row copies */
    assert_case_batch_invariant(18); /* bf16 Dk 192 / Dv 128 (NSA's): row copies on every target */
}

/* Capture once; change the page table, cached lengths, top-k rows and
 * lengths in place; every replay follows the new metadata. */
static void replay_with_updated_metadata(size_t ci)
{
    kvc_problem p;
    kvc_problem_make(&p, &kvc_cases[ci], 31);
    kvc_problem_reference(&p);
    kvc_device dv;
    kvc_device_make(&dv, &p, kvc_plan_of(ci));
    fsa_kvcache_args a = kvc_args_of(&dv, &p);
    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, graph.stream), FSA_STATUS_OK);
    fsa_test_capture_end(&graph);
    for (int rep = 0; rep < 3; rep++) {
        if (rep > 0) { /* shorter caches, new selections, pages moved */
            for (int b = 0; b < p.B; b++)
                if (p.seqused[b] - (p.cu_q[b + 1] - p.cu_q[b]) >= 3 * rep) p.seqused[b] -= 3 * rep;
            kvc_reselect(&p, &kvc_cases[ci], 500 + rep);
            kvc_reshuffle_pages(&p, 600 + rep);
            kvc_device_update(&dv, &p);
            kvc_problem_reference(&p);
        }
        kvc_poison(&dv, &p);
        fsa_test_graph_replay(&graph);
        kvc_outputs out;
        kvc_download(&out, &dv, &p);
        kvc_check_against_reference(&out, &p, rep ? "replay, new metadata" : "replay");
        kvc_outputs_free(&out);
    }
    fsa_test_graph_free(&graph);
    kvc_device_free(&dv);
    kvc_problem_free(&p);
}

static void test_a_captured_call_replays_with_updated_metadata(void **state)
{
    (void)state;
    replay_with_updated_metadata(8); /* f16 G1, top-k lengths */
    replay_with_updated_metadata(3); /* bf16 G4, page 64: tensor-map copies on sm_90a */
}

/* The poison of the bad-metadata calls: finite and beyond any output (f16 61280, bf16 and float about 1e36),
 * so an element never written is told apart from a NaN that kind 2 legitimately reads. */
enum { UNWRITTEN = 0x7b };

/* Page numbers past the cache or negative, a table too narrow for the cached
 * length, cached lengths shorter than the query, blocks past the cache and a
 * malformed cu_seqlens_q: the call runs and stays in bounds (compute-sanitizer
 * checks that) and gives what docs/kvcache.md ("Bounds") says the metadata
 * means: every element of o and lse written; a page number outside the cache
 * hides its keys; a position below 0 sees nothing; blocks past the cache are
 * ignored, so a row of nothing else has o = 0, lse = -inf. A malformed
 * cu_seqlens_q is only clamped (whose tokens are whose is then undefined):
 * finite values where it writes. */
static void test_bad_metadata_stays_in_bounds_and_gives_what_the_bounds_say(void **state)
{
    (void)state;
    /* Each kind on both copy paths: page 16 (row copies) and page 64 (tensor maps on sm_90a, whose bounds
     * are their own code: an out-of-bounds box would load zeros the sanitizer never sees). */
    for (int run = 0; run < 10; run++) {
        const int kind = run / 2;
        const size_t ci = run % 2 ? 3 : 8;
        kvc_problem p;
        kvc_problem_make(&p, &kvc_cases[ci], 900 + kind);
        kvc_device dv;
        kvc_device_make(&dv, &p, kvc_plan_of(ci));
        fsa_kvcache_args a = kvc_args_of(&dv, &p);
        switch (kind) {
        case 0: /* used table entries pointing past the cache, or negative */
            for (int b = 0; b < p.B; b++) {
                p.table[(size_t)b * p.table_stride] = p.num_pages + b * 1000;
                p.table[(size_t)b * p.table_stride + p.table_stride - 1] = -5;
            }
            break;
        case 1: /* seqused_k shorter than the query, or negative */
            for (int b = 0; b < p.B; b++) p.seqused[b] = b % 2 ? -3 : (p.cu_q[b + 1] - p.cu_q[b]) / 2;
            break;
        case 2: /* cached lengths far past the page table */
            for (int b = 0; b < p.B; b++) p.seqused[b] += 1 << 20;
            break;
        case 3: /* blocks past the cache in every slot */
            for (size_t i = 0; i + 1 < p.topk_elems; i++) p.topk[i] = (int32_t)(1000000 + i);
            break;
        case 4: /* cu_seqlens_q past the tokens and decreasing */
            p.cu_q[1] = p.Tq + 50;
            p.cu_q[2] = 1;
            break;
        }
        fsa_test_h2d(dv.table, p.table, (size_t)p.B * p.table_stride * 4);
        fsa_test_h2d(dv.seqused, p.seqused, sizeof p.seqused);
        fsa_test_h2d(dv.topk, p.topk, p.topk_elems * 4);
        fsa_test_h2d(dv.cu, p.cu_q, sizeof p.cu_q);
        dv.poison = UNWRITTEN;
        kvc_poison(&dv, &p);
        assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_OK);
        fsa_test_sync();
        kvc_outputs out;
        kvc_download(&out, &dv, &p);
        const size_t n_o = (size_t)p.Tq * p.hq * p.dv, n_lse = (size_t)p.hq * p.Tq;
        print_message("  bad metadata kind %d:\n", kind);
        /* Kind 2 claims cached keys in the unused (NaN) rows of the pages: NaN there is the right answer,
         * but it is written. */
        if (kind != 4) {
            kvc_assert_every_element_written(&out, &p);
            print_message("  every element of o and lse written\n");
        }
        if (kind == 0) {
            /* Pages of one block each: the hidden page 0 of every sequence is its block 0, dropped from
             * the reference's selection (the device keeps the rows it was given). */
            assert_int_equal(p.bk, p.page);
            for (size_t i = 0; i + 1 < p.topk_elems; i++)
                if (p.topk[i] == 0) p.topk[i] = -1;
        }
        if (kind == 0 || kind == 1) { /* the reference of the metadata as the bounds read it */
            kvc_problem_reference(&p);
            size_t blind = 0;
            for (size_t i = 0; i < n_lse; i++) blind += isinf(p.lse_ref[i]) != 0;
            print_message("  %zu of %zu rows see nothing\n", blind, n_lse);
            kvc_check_against_reference(&out, &p, kind ? "seqused_k short or negative" : "pages outside the cache");
        }
        if (kind == 3) { /* no row sees anything */
            for (size_t i = 0; i < n_o; i++)
                if (out.o[i] != 0.0f) fail_msg("o element %zu is %g, not 0", i, (double)out.o[i]);
            for (size_t i = 0; i < n_lse; i++)
                if (!(isinf(out.lse[i]) && out.lse[i] < 0)) fail_msg("lse %zu is %g, not -inf", i, (double)out.lse[i]);
            print_message("  every one of %zu rows: o = 0, lse = -inf\n", n_lse);
        }
        if (kind == 4) {
            const uint16_t o_poison = UNWRITTEN * 0x101;
            size_t written = 0;
            for (size_t i = 0; i < n_o; i++)
                if (out.o_bits[i] != o_poison) {
                    written++;
                    assert_true(isfinite(out.o[i]));
                }
            for (size_t i = 0; i < n_lse; i++) assert_false(isnan(out.lse[i])); /* the poison is a finite float */
            print_message("  %zu of %zu o elements written, all finite; no lse NaN\n", written, n_o);
        }
        kvc_outputs_free(&out);
        kvc_device_free(&dv);
        kvc_problem_free(&p);
    }
}

/* What the host can check comes back as a status before any launch. */
static void test_host_checkable_problems_return_a_status(void **state)
{
    (void)state;
    const size_t ci = 3;
    kvc_problem p;
    kvc_problem_make(&p, &kvc_cases[ci], 5);
    kvc_device dv;
    kvc_device_make(&dv, &p, kvc_plan_of(ci));
    const fsa_kvcache_args good = kvc_args_of(&dv, &p);
    fsa_kvcache_args a = good;
    a.batch = KVC_FIXTURE_MAX_BATCH + 1;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.num_query_tokens = KVC_FIXTURE_MAX_TOKENS + 1;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.q.ptr = 0;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_NULL_POINTER);
    a = good;
    a.k_cache.ptr += 2;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_MISALIGNED);
    a = good;
    a.v_page_stride = 12;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_MISALIGNED);
    a = good;
    a.num_pages = 0;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    a = good;
    a.block_table_stride = a.max_pages_per_seq - 1;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_INVALID_ARGUMENT);
    if (kvc_plan_of(ci)->tma) {
        /* A tensor map's strides stay below 2^40 bytes: refused before anything is enqueued (and before
         * the token stride times the page size could pass int64). */
        a = good;
        a.k_cache.token_stride = INT64_C(1) << 39;
        assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_DRIVER_ERROR);
        assert_non_null(strstr(fsa_last_error(), "tensor map"));
    }
    a = good;
    a.workspace_bytes = dv.ws_bytes - 1;
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_WORKSPACE_TOO_SMALL);
    a = good;
    a.struct_size = 8; /* shorter than the struct's first version */
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_STRUCT_SIZE);
    a = good;
    a.num_query_tokens = 0; /* nothing to do */
    assert_int_equal(fsa_kvcache_attention(kvc_plan_of(ci), &a, NULL), FSA_STATUS_OK);
    kvc_device_free(&dv);
    kvc_problem_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* Bad input first: a sanitizer run cut for time has run these. */
        cmocka_unit_test(test_bad_metadata_stays_in_bounds_and_gives_what_the_bounds_say),
        cmocka_unit_test(test_host_checkable_problems_return_a_status),
        cmocka_unit_test(test_every_case_matches_the_reference),
        cmocka_unit_test(test_a_value_head_dim_other_than_the_key_head_dim_matches_the_reference),
        cmocka_unit_test(test_a_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64),
        cmocka_unit_test(test_a_small_group_sequence_gives_the_same_bits_alone_and_in_a_batch_of_64),
        cmocka_unit_test(test_a_captured_call_replays_with_updated_metadata),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. one test under
     * compute-sanitizer. Skips (exit 77) inside setup when there is no GPU. */
    check_the_case_list();
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, kvc_fixture_setup, kvc_fixture_teardown);
}
