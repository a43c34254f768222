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
 * subset (for compute-sanitizer), FSA_TEST_CASES the cases it names.
 * Random cases besides the table: FSA_TEST_RANDOM=N batches drawn over the
 * whole supported space (default 4, 1 under FSA_TEST_QUICK=1, none when
 * FSA_TEST_CASES is set; 0 turns them off), case i from a seed derived from
 * FSA_TEST_SEED=S (decimal or 0x hex; default a fixed constant) and i, each
 * printed before it runs and checked as the table's cases are, then twice
 * for the same bits and each sequence alone for the batch's bits. */
#include "kvcache_fixture.h"

#include "attention/kvcache.h"
#include "jit/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FSA_TEST_CASES picks cases by name (testing.h), else the quick subset or all. */
static int case_selected(size_t i)
{
    const int listed = fsa_test_case_listed(kvc_cases[i].name);
    if (listed >= 0) return listed;
    return !fsa_test_quick() || kvc_cases[i].quick;
}

static const char *case_name(size_t i) { return kvc_cases[i].name; }

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

/* ---------------------------------------------------------------- random cases
 * A server meets combinations the table never tried; a seeded draw over what
 * the plan accepts (docs/kvcache.md "Interface", validate_desc in
 * src/attention/kvcache.c) finds the wrong answers it hides. */

/* The opt-in shared memory per CTA that a drawn shape's kernel must fit (fsa_kvcache_plan_create refuses
 * the others): the device's, set from the context before drawing; until then the smallest target's
 * (src/jit/target.c), which every target allows. The same seed draws the same cases on devices of one
 * limit (H100 and H200 alike). */
static int random_smem_limit = 101376;

/* The float64 reference's multiply-adds a drawn batch may cost, as reference_work counts them: the
 * table's cases reach 4e9 (f16_d64_g16_prefill_shared, most of whose rows see fewer keys than counted);
 * at 5e8 a drawn reference takes no longer than the table's slowest (measured on the CPU), and the
 * check runs each sequence alone again. */
static const double RANDOM_REFERENCE_WORK = 5e8;

/* A multiple of 16 from 16 to 256; half the time 64 or 128, the head dims of tensor-map copies. */
static int random_head_dim(fsa_rng *rng)
{
    return fsa_rng_int(rng, 0, 1) ? 64 * fsa_rng_int(rng, 1, 2) : 16 * fsa_rng_int(rng, 1, 16);
}

/* Query heads per KV head: the powers of two where the tiles change, small groups (odd ones included),
 * any up to 64. */
static int random_group(fsa_rng *rng)
{
    switch (fsa_rng_int(rng, 0, 2)) {
    case 0: return 1 << fsa_rng_int(rng, 0, 6);
    case 1: return fsa_rng_int(rng, 1, 16);
    default: return fsa_rng_int(rng, 1, 64);
    }
}

/* Top-k: a power of two half the time (1 and 64, the bounds, included), else any from 1 to 64. */
static int random_top_k(fsa_rng *rng)
{
    return fsa_rng_int(rng, 0, 1) ? 1 << fsa_rng_int(rng, 0, 6) : fsa_rng_int(rng, 1, 64);
}

/* Whether the kernel fits random_smem_limit as fsa_kvcache_plan_create counts it (dynamic plus static
 * shared memory, in the layout the plan takes: fsa_kvc_layout_fit) on row copies and, where the shape
 * allows them, on tensor-map copies: which one a plan takes is the target's choice. (Only on targets
 * whose shared memory does not hold every default layout, the 99 KB ones, does the layout change what
 * is drawn.) */
static int random_shape_fits(int dk, int dv, int g, int k, int bk, int page)
{
    for (int tma = 0; tma <= fsa_kvc_tma_fits(dk, dv, bk, page); tma++) {
        const int layout = fsa_kvc_layout_fit(dk, dv, g, k, tma, random_smem_limit, 0);
        if (fsa_kvc_smem_all(dk, dv, g, k, tma, layout) > random_smem_limit) return 0;
    }
    return 1;
}

/* New tokens: none (an empty sequence), decode, speculative (2-8) or a chunk of prefill. */
static int random_q_len(fsa_rng *rng)
{
    const int r = fsa_rng_int(rng, 0, 7);
    return r == 0 ? 0 : r <= 3 ? 1 : r <= 5 ? fsa_rng_int(rng, 2, 8) : fsa_rng_int(rng, 10, 400);
}

/* Cached keys before them: none, one, around 64, around a multiple of the block or page size (the new
 * tokens start at either's edge), a few hundred, or a few thousand (more blocks than top-k selects). */
static int random_cached(fsa_rng *rng, int bk, int page)
{
    switch (fsa_rng_int(rng, 0, 7)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return fsa_rng_int(rng, 63, 65);
    case 3:
    case 4: {
        const int unit = page == 1 || fsa_rng_int(rng, 0, 1) ? bk : page;
        return unit * fsa_rng_int(rng, 1, 4) + fsa_rng_int(rng, -1, 1);
    }
    case 5:
    case 6: return fsa_rng_int(rng, 100, 600);
    default: return fsa_rng_int(rng, 1000, 5000);
    }
}

/* Multiply-adds of the float64 reference of a case: each (token, query head) row over at most top_k x
 * block_size keys of its sequence, D + Dv for each. */
static double reference_work(const kvc_case *c)
{
    double work = 0;
    for (int b = 0; b < c->nseq; b++) {
        const double len = c->seqs[b].cached + c->seqs[b].q_len, selected = (double)c->k * c->bk;
        work += (double)c->seqs[b].q_len * c->hq * (selected < len ? selected : len) * (c->d + (c->dv ? c->dv : c->d));
    }
    return work;
}

/* The draws with a fixed share count (desc.splits) instead of the plan's own. */
static const double RANDOM_FIXED_SPLITS = 0.15;

/* Shares of a one-tile sequence's blocks (fsa_kvcache_desc.splits): 0, the plan's own count (a tuning record or
 * the heuristic), in most draws; in RANDOM_FIXED_SPLITS of them a fixed count, half the time one the plan may
 * choose itself (src/attention/kvcache_tune.c: a power of two up to half the top-k slots and 16, or the
 * heuristic's ceil(K / 4)), else any it takes (1 to 64): more shares than blocks, counts without a cluster merge
 * (past 8) and merges folded in several groups (past 16). The workspace follows: the test sizes it from the plan
 * (fsa_kvcache_plan_workspace_size). */
static int random_splits(fsa_rng *rng, int k)
{
    if (fsa_rng_uniform(rng) >= RANDOM_FIXED_SPLITS) return 0;
    if (fsa_rng_int(rng, 0, 1)) return fsa_rng_int(rng, 1, 64);
    int chosen[8], n = 0;
    for (int s = 1; s <= 16 && (s == 1 || s <= k / 2); s *= 2) chosen[n++] = s;
    chosen[n++] = (k + 3) / 4 < 16 ? (k + 3) / 4 : 16;
    return chosen[fsa_rng_int(rng, 0, n - 1)];
}

static const char *const topk_layout_names[] = {"htk", "thk", "shared"};

/* A case drawn from what a plan accepts: dtype, head dims (Dv = D half the time), group, KV heads,
 * block and page sizes, top-k and a shape that fits random_smem_limit; top-k layout (a shared one has
 * head stride 0), NHD or HND pages, top-k lengths, junk rows (-1, future blocks, blocks past the cache,
 * repeats, negatives), a softmax scale, and a logit of about 1e4 (in bf16, on a row that holds its own
 * block: no junk or lengths); 1-8 sequences of random_q_len new tokens over random_cached keys (at
 * least one token in all), redrawn until the reference costs at most RANDOM_REFERENCE_WORK; and the
 * plan's share count, in *splits (random_splits: 0 for the plan's own). Every problem kvc_problem_make
 * builds also shuffles its pages, fills the table entries past each sequence's pages with garbage and every
 * cache element that backs no key with NaN. The name, in name_buf, spells every field (the sequences as
 * q_len+cached, splits0 for the plan's own count). */
static void random_case(fsa_rng *rng, kvc_case *out, int *splits, char *name_buf, size_t n)
{
    static const int page_sizes[] = {1, 16, 32, 64, 128, 256};
    kvc_case c;
    memset(&c, 0, sizeof c);
    c.big_logit = fsa_rng_int(rng, 0, 7) == 0;
    c.dtype = c.big_logit || fsa_rng_int(rng, 0, 1) ? FSA_DTYPE_BF16 : FSA_DTYPE_F16;
    /* A quarter of the shapes are those of tensor-map copies on sm_90a (fsa_kvc_tma_fits), which few
     * draws over everything would be. */
    const int tma_shape = fsa_rng_int(rng, 0, 3) == 0;
    int g, dv;
    do {
        c.d = tma_shape ? 64 * fsa_rng_int(rng, 1, 2) : random_head_dim(rng);
        dv = fsa_rng_int(rng, 0, 1) ? c.d : tma_shape ? 64 * fsa_rng_int(rng, 1, 4) : random_head_dim(rng);
        g = random_group(rng);
        c.bk = tma_shape ? 64 << fsa_rng_int(rng, 0, 2) : 16 << fsa_rng_int(rng, 0, 4);
        c.page = tma_shape ? 64 << fsa_rng_int(rng, 0, 2) : page_sizes[fsa_rng_int(rng, 0, 5)];
        c.k = random_top_k(rng);
    } while (!random_shape_fits(c.d, dv, g, c.k, c.bk, c.page));
    c.dv = dv == c.d ? 0 : dv;
    c.hkv = fsa_rng_int(rng, 1, 128 / g < 4 ? 128 / g : 4);
    c.hq = g * c.hkv;
    c.topk_layout = fsa_rng_int(rng, KVC_TOPK_HTK, KVC_TOPK_SHARED);
    c.cache_hnd = fsa_rng_int(rng, 0, 1);
    c.with_length = !c.big_logit && fsa_rng_int(rng, 0, 1);
    c.junk = !c.big_logit && fsa_rng_int(rng, 0, 3) != 0;
    c.scale = c.big_logit || fsa_rng_int(rng, 0, 3) ? 0.0f : (float)(fsa_rng_int(rng, 1, 50) / 100.0);
    for (int tries = 0;; tries++) {
        if (tries == 20) { /* a batch this shape can afford: one decode token */
            c.nseq = 1;
            c.seqs[0] = (kvc_seq){1, random_cached(rng, c.bk, c.page)};
            break;
        }
        c.nseq = fsa_rng_int(rng, 1, 8);
        int tokens = 0;
        for (int b = 0; b < c.nseq; b++) {
            c.seqs[b].q_len = random_q_len(rng);
            c.seqs[b].cached = random_cached(rng, c.bk, c.page);
            tokens += c.seqs[b].q_len;
        }
        if (tokens == 0) c.seqs[fsa_rng_int(rng, 0, c.nseq - 1)].q_len = 1;
        if (reference_work(&c) <= RANDOM_REFERENCE_WORK) break;
    }
    *splits = random_splits(rng, c.k);
    int len = snprintf(name_buf, n,
                       "%s_dk%d_dv%d_g%d_hkv%d_bk%d_k%d_page%d_%s_%s_len%d_junk%d_big%d_scale%g_splits%d_seqs",
                       c.dtype == FSA_DTYPE_BF16 ? "bf16" : "f16", c.d, c.dv ? c.dv : c.d, g, c.hkv, c.bk, c.k,
                       c.page, topk_layout_names[c.topk_layout], c.cache_hnd ? "hnd" : "nhd", c.with_length, c.junk,
                       c.big_logit, (double)c.scale, *splits);
    for (int b = 0; b < c.nseq && len >= 0 && (size_t)len < n; b++)
        len += snprintf(name_buf + len, n - (size_t)len, "%c%d+%d", b ? ',' : '_', c.seqs[b].q_len, c.seqs[b].cached);
    assert_true(len >= 0 && (size_t)len < n); /* the whole name, or the case could not be told */
    c.name = name_buf;
    *out = c;
}

/* FSA_TEST_RANDOM: 4 random cases, 1 under FSA_TEST_QUICK=1, none when FSA_TEST_CASES picks cases. */
static int random_case_count(void) { return fsa_test_random_count(getenv("FSA_TEST_CASES") != NULL ? 0 : -1); }

static uint64_t random_base_seed(void) { return fsa_test_random_seed(0x6b76636163686531ull); }

/* One call on poisoned outputs checked against the reference, then again, which must give the same
 * bits; as a kvc_run_fn, the batch-invariance check runs the batch and each sequence alone so. */
static void run_twice_and_check(const fsa_kvcache_plan *plan, kvc_problem *p, const char *name, kvc_outputs *keep)
{
    kvc_outputs first, again;
    kvc_run_and_check(plan, p, name, &first);
    kvc_run_and_check(plan, p, "the same call again", &again);
    assert_memory_equal(again.o_bits, first.o_bits, (size_t)p->Tq * p->hq * p->dv * 2);
    assert_memory_equal(again.lse, first.lse, (size_t)p->hq * p->Tq * 4);
    kvc_outputs_free(&again);
    if (keep) *keep = first;
    else kvc_outputs_free(&first);
}

static void test_random_batches_match_the_reference(void **state)
{
    (void)state;
    const int n = random_case_count();
    const uint64_t base = random_base_seed();
    random_smem_limit = kvc_ctx->max_smem_per_block;
    if (n == 0) print_message("  no random cases (FSA_TEST_RANDOM=0, or FSA_TEST_CASES without it)\n");
    for (int i = 0; i < n; i++) {
        const uint64_t seed = fsa_test_random_case_seed(base, i);
        fsa_rng rng = {seed};
        kvc_case c;
        int splits;
        char name[256];
        random_case(&rng, &c, &splits, name, sizeof name);
        print_message("random case %d of %d (FSA_TEST_SEED=0x%llx; alone: FSA_TEST_SEED=0x%llx FSA_TEST_RANDOM=1; "
                      "case seed 0x%016llx, %d bytes of shared memory): %s\n",
                      i, n, (unsigned long long)base, (unsigned long long)fsa_test_random_rerun_seed(base, i),
                      (unsigned long long)seed, random_smem_limit, name);
        fsa_kvcache_desc d = kvc_desc_of(&c, KVC_FIXTURE_MAX_BATCH, KVC_FIXTURE_MAX_TOKENS);
        d.splits = splits;
        fsa_kvcache_plan *plan = NULL;
        if (fsa_kvcache_plan_create(&plan, kvc_ctx, &d) != FSA_STATUS_OK)
            fail_msg("random case %d, %s: the plan was refused: %s", i, name, fsa_last_error());
        kvc_problem p;
        kvc_problem_make(&p, &c, fsa_rng_next(&rng));
        kvc_problem_reference(&p);
        int seqs[KVC_MAX_SEQS], n_seqs = 0;
        for (int b = 0; b < c.nseq; b++)
            if (c.seqs[b].q_len > 0) seqs[n_seqs++] = b;
        kvc_assert_batch_invariant(plan, &p, seqs, n_seqs, run_twice_and_check);
        kvc_problem_free(&p);
        fsa_kvcache_plan_destroy(plan);
    }
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
    kvc_poison(&dv, &p); /* nothing below may write o or lse */
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
    fsa_test_sync();
    fsa_test_assert_untouched(dv.o, dv.o_img_bytes, dv.poison);
    fsa_test_assert_untouched(dv.lse, (size_t)p.hq * p.Tq * 4, dv.poison);
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
        cmocka_unit_test(test_random_batches_match_the_reference),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. one test under
     * compute-sanitizer. Skips (exit 77) inside setup when there is no GPU. */
    fsa_test_check_case_list(case_name, kvc_n_cases);
    random_case_count(); /* a malformed FSA_TEST_RANDOM or FSA_TEST_SEED exits here, GPU or not */
    random_base_seed();
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, kvc_fixture_setup, kvc_fixture_teardown);
}
