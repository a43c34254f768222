/* The workspace cap without a GPU, on plans without kernels: what a
 * descriptor's workspace_limit stands for, the workspace-size queries of the
 * standard problem (bf16 and f16, Hq 32, D 128, BK 64, top-k 16) within the
 * default cap at every group size, the chunks (KV heads that divide Hkv
 * before tokens), and a cap below one token's chunk. */
#include "testing.h"

#include "attention/plan.h"
#include "jit/context.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static fsa_context g_ctx;

/* The standard problem's plan as fsa_plan_create makes it on an H200: 64-key
 * backward slices, persistent grids of two CTAs per SM. */
static void standard_plan(fsa_plan *p, int group, fsa_dtype dtype, uint64_t workspace_limit)
{
    memset(p, 0, sizeof *p);
    p->ctx = &g_ctx;
    p->desc = (fsa_selected_attention_desc)FSA_SELECTED_ATTENTION_DESC_INIT;
    p->desc.dtype = dtype;
    p->desc.num_q_heads = 32;
    p->desc.num_kv_heads = 32 / group;
    p->desc.value_dim = 128; /* as fsa_plan_create resolves 0 */
    p->desc.workspace_limit = workspace_limit;
    p->desc.backward = 1;
    p->group = group;
    p->config = (fsa_kernel_config){.dtype = dtype, .head_dim = 128, .value_dim = 128, .group = group,
                                    .block_size = 64, .top_k = 16, .bwd_keys = 64};
    p->fsa_available = p->nsa_available = p->bwd_available = 1;
    p->main_grid = p->bwd_grid = 2 * 132;
    p->tune.level = FSA_TUNE_LEVEL_OFF;
}

static size_t fwd_bytes(const fsa_plan *p, int64_t T)
{
    size_t n = 0;
    assert_int_equal(fsa_plan_workspace_size(&n, p, T, 1), FSA_STATUS_OK);
    return n;
}

static size_t bwd_bytes(const fsa_plan *p, int64_t T)
{
    size_t n = 0;
    assert_int_equal(fsa_plan_workspace_size_bwd(&n, p, T, 1), FSA_STATUS_OK);
    return n;
}

static void bwd_chunk(int *heads, int64_t *tc, const fsa_plan *p, int64_t T)
{
    fsa_bwd_chunk(heads, tc, p, T, 1, FSA_ALGORITHM_FSA);
}

/* o and lse (the forward's), with dq, dk and dv (the backward's) of the standard problem: bytes per token. */
static uint64_t fwd_own_per_token(void) { return 32 * 128 * 2 + 32 * 4; }
static uint64_t own_bytes_per_token(int group) { return fwd_own_per_token() + 32 * 128 * 2 + 2 * (32 / group) * 128 * 2; }

static void test_a_zero_limit_is_the_default_cap_and_unlimited_is_none(void **state)
{
    (void)state;
    assert_true(FSA_WORKSPACE_DEFAULT_BUDGET == (uint64_t)89 << 25); /* 2848 MiB, below 3 GB */
    assert_true(FSA_WORKSPACE_DEFAULT_BUDGET < 3000000000u);
    fsa_plan p;
    /* The default: what o, lse, dq, dk and dv leave of the budget, at least the floor. */
    standard_plan(&p, 1, FSA_DTYPE_BF16, 0);
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_BWD, 65536) ==
                FSA_WORKSPACE_DEFAULT_BUDGET - 65536 * own_bytes_per_token(1));
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_BWD, 8192) ==
                FSA_WORKSPACE_DEFAULT_BUDGET - 8192 * own_bytes_per_token(1));
    /* The forward's workspace is gone before the backward allocates dq, dk and dv. */
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_FWD, 65536) ==
                FSA_WORKSPACE_DEFAULT_BUDGET - 65536 * fwd_own_per_token());
    /* Past the budget, the floor: for a backward with one KV head's fp32 dK/dV accumulator over every token. */
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_FWD, 1 << 20) == FSA_WORKSPACE_DEFAULT_MIN);
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_BWD, 1 << 20) ==
                FSA_WORKSPACE_DEFAULT_MIN + ((uint64_t)1 << 20) * (128 + 128) * 4);
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_FWD, 1) < FSA_WORKSPACE_DEFAULT_BUDGET);
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_BWD, 65536) == UINT64_MAX);
    standard_plan(&p, 1, FSA_DTYPE_BF16, 4096);
    assert_true(fsa_call_workspace_cap(&p, FSA_OP_FWD, 65536) == 4096);
    /* The descriptor's default leaves the limit at 0: the default cap. */
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    assert_int_equal(d.workspace_limit, 0);
}

static void test_the_standard_problem_stays_within_the_default_cap(void **state)
{
    (void)state;
    const int groups[] = {1, 2, 4, 8, 16};
    const fsa_dtype dtypes[] = {FSA_DTYPE_BF16, FSA_DTYPE_F16};
    const int64_t tokens[] = {8192, 16384, 65536};
    for (int di = 0; di < 2; di++)
        for (int gi = 0; gi < 5; gi++)
            for (int ti = 0; ti < 3; ti++) {
                fsa_plan p, free_plan;
                standard_plan(&p, groups[gi], dtypes[di], 0);
                standard_plan(&free_plan, groups[gi], dtypes[di], FSA_WORKSPACE_UNLIMITED);
                const int64_t T = tokens[ti];
                int heads;
                int64_t tc;
                bwd_chunk(&heads, &tc, &p, T);
                if (di == 0)
                {
                    int fh;
                    int64_t ftc;
                    fsa_fwd_chunk(&fh, &ftc, &p, T, 1);
                    print_message("  G %2d T %6lld: cap %10llu, forward %10zu B (uncapped %11zu; %2d heads x %5lld tokens), "
                                  "backward %10zu B (uncapped %11zu; %2d heads x %5lld tokens)\n",
                                  groups[gi], (long long)T, (unsigned long long)fsa_call_workspace_cap(&p, FSA_OP_BWD, T),
                                  fwd_bytes(&p, T), fwd_bytes(&free_plan, T), fh, (long long)ftc, bwd_bytes(&p, T),
                                  bwd_bytes(&free_plan, T), heads, (long long)tc);
                }
                const uint64_t cap = fsa_call_workspace_cap(&p, FSA_OP_BWD, T);
                assert_true(fwd_bytes(&p, T) <= fsa_call_workspace_cap(&p, FSA_OP_FWD, T));
                assert_true(bwd_bytes(&p, T) <= cap);
                assert_true(bwd_bytes(&p, T) > 0);
                /* Each call: what is alive (outputs, gradients, workspace) within the budget. */
                assert_true(T * own_bytes_per_token(groups[gi]) + bwd_bytes(&p, T) <= FSA_WORKSPACE_DEFAULT_BUDGET);
                assert_true(T * fwd_own_per_token() + fwd_bytes(&p, T) <= FSA_WORKSPACE_DEFAULT_BUDGET);
                /* Uncapped, the same calls at 64K tokens need gigabytes: the cap is what bounds them. */
                if (T == 65536) assert_true(bwd_bytes(&free_plan, T) > 4 * cap);
            }
}

/* Past the budget a backward's token chunks of one KV head each carry that
 * head's accumulator over every token (T x (D + Dv) floats); a floor that
 * did not count it left a long call chunks of a few tokens (one token at
 * T = 262144, G 1: millions of launches). Chunks stay thousands of tokens
 * long at every length (at G 16, whose chunks hold more partial rows per
 * token, over two thousand), within the cap. */
static void test_long_backwards_keep_long_token_chunks_under_the_default_cap(void **state)
{
    (void)state;
    const int groups[] = {1, 4, 16};
    const int64_t tokens[] = {131072, 262144, 524288, 1 << 20};
    for (int gi = 0; gi < 3; gi++)
        for (int ti = 0; ti < 4; ti++) {
            fsa_plan p;
            standard_plan(&p, groups[gi], FSA_DTYPE_BF16, 0);
            const int64_t T = tokens[ti];
            int heads;
            int64_t tc;
            bwd_chunk(&heads, &tc, &p, T);
            print_message("  G %2d T %7lld: cap %10llu, backward %10zu B, %2d heads x %6lld tokens\n", groups[gi],
                          (long long)T, (unsigned long long)fsa_call_workspace_cap(&p, FSA_OP_BWD, T), bwd_bytes(&p, T),
                          heads, (long long)tc);
            assert_true(tc >= 2048);
            assert_true(bwd_bytes(&p, T) <= fsa_call_workspace_cap(&p, FSA_OP_BWD, T));
        }
}

/* A backward workspace sized while the bucket's tuning record is pending is
 * reused once the record lands, whichever order it names: under a cap the
 * NSA order's layout (no dq rows) takes longer chunks and can be the larger. */
static void test_a_backward_workspace_sized_before_the_record_serves_the_order_it_names(void **state)
{
    (void)state;
    const int groups[] = {4, 16};
    const int64_t tokens[] = {65536, 131072};
    for (int gi = 0; gi < 2; gi++)
        for (int ti = 0; ti < 2; ti++) {
            fsa_plan p;
            standard_plan(&p, groups[gi], FSA_DTYPE_BF16, 0);
            p.tune.level = FSA_TUNE_LEVEL_ON;
            p.bwd_nsa_available = 1;
            const int64_t T = tokens[ti];
            fsa_candidates c;
            fsa_candidates_of(&c, &p, FSA_OP_BWD);
            assert_int_equal(c.n, 2);
            const size_t pending = bwd_bytes(&p, T);
            for (int i = 0; i < c.n; i++) {
                atomic_store(&p.tune.slot[FSA_OP_BWD][fsa_tune_bucket(T)], i + 1);
                const size_t recorded = bwd_bytes(&p, T);
                print_message("  G %2d T %6lld: pending %10zu B, recorded %s %10zu B\n", groups[gi], (long long)T,
                              pending, c.v[i].order == FSA_ALGORITHM_NSA ? "NSA" : "FSA", recorded);
                assert_true(pending >= recorded);
            }
        }
}

/* The forward's main kernels count a launch's work items (at most its pairs) in int and step them by
 * chunks of the persistent grid: a launch's pairs leave that room below INT32_MAX, however many tokens
 * and whatever the cap (64 KV heads x top-k 1 x 2^25 - 1 tokens: pairs just below 2^31). */
static void test_a_forward_chunks_pairs_leave_room_for_the_grids_steps_below_int32(void **state)
{
    (void)state;
    fsa_plan p;
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    p.desc.num_q_heads = p.desc.num_kv_heads = 64;
    p.desc.top_k = 1;
    p.config.top_k = 1;
    const int64_t T = ((int64_t)1 << 25) - 1;
    int heads;
    int64_t tc;
    fsa_fwd_chunk(&heads, &tc, &p, T, 1);
    const int64_t steps = (int64_t)p.main_grid * FSA_FWD_WG_CHUNK_ITEMS * (FSA_FWD_WG_TAIL_WAVES + 2);
    print_message("  %d heads x %lld tokens: %lld pairs, room %lld\n", heads, (long long)tc,
                  (long long)heads * tc, (long long)INT32_MAX - (long long)heads * tc);
    assert_true((int64_t)heads * tc * p.desc.top_k + steps <= INT32_MAX);
    assert_true(tc < T); /* so the call runs in chunks */
}

/* The backward's main kernel counts a launch's items in int, and each CTA takes its next item as the launch's
 * grid (the persistent grid, or fewer CTAs for fewer items) plus a counter, up to grid + items - 1: a launch
 * fits only when that stays within int32 too. */
static void test_a_backward_launch_fits_when_its_items_and_grid_stay_within_int32(void **state)
{
    (void)state;
    fsa_plan p;
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    const uint64_t grid = (uint64_t)p.bwd_grid, max = (uint64_t)INT32_MAX;
    assert_true(fsa_bwd_work_fits(&p, max - grid + 1));  /* the last fetch: exactly INT32_MAX */
    assert_false(fsa_bwd_work_fits(&p, max - grid + 2)); /* one past */
    assert_false(fsa_bwd_work_fits(&p, max));
    assert_false(fsa_bwd_work_fits(&p, max + 1));
    /* Fewer items than the persistent grid launch one CTA each. */
    p.bwd_grid = INT32_MAX;
    assert_true(fsa_bwd_work_fits(&p, max / 2 + 1)); /* 2^30 + 2^30 - 1 */
    assert_false(fsa_bwd_work_fits(&p, max / 2 + 2));
    assert_true(fsa_bwd_work_fits(&p, 1));
    assert_true(fsa_bwd_work_fits(&p, 0));
}

static void test_chunks_take_kv_heads_that_divide_hkv_before_tokens(void **state)
{
    (void)state;
    const int64_t T = 8192;
    fsa_plan p;
    int heads;
    int64_t tc;
    /* Hkv = 32 / 5 does not exist; G = 1 gives 32 heads, of which the divisors are powers of two. */
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 32);
    assert_int_equal(tc, T);
    fsa_bwd_layout all, half, one;
    fsa_bwd_layout_for(&all, &p, T, 1, 32, T, FSA_ALGORITHM_FSA);
    fsa_bwd_layout_for(&half, &p, T, 1, 16, T, FSA_ALGORITHM_FSA);
    p.index_per_chunk = 1; /* token chunks with an index each: at G 1 one index of every (head, chunk) is the bulk */
    fsa_bwd_layout_for(&one, &p, T, 1, 1, T / 4, FSA_ALGORITHM_FSA);
    assert_true(half.total < all.total && one.total < half.total);
    /* A cap between 16 heads and all of them: 16 heads (31 .. 17 do not divide 32), every token. */
    standard_plan(&p, 1, FSA_DTYPE_BF16, all.total - 1);
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 16);
    assert_int_equal(tc, T);
    assert_true(bwd_bytes(&p, T) <= all.total - 1);
    /* A cap of one head's quarter of the tokens: one head, four token chunks. */
    standard_plan(&p, 1, FSA_DTYPE_BF16, one.total + 16 * 256);
    p.index_per_chunk = 1;
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 1);
    assert_int_equal((T + tc - 1) / tc, 4);
    assert_true(bwd_bytes(&p, T) <= one.total + 16 * 256);
    /* The forward takes chunks the same way: at T = 65536, G = 1 eight heads'
     * partials fit the default cap (what o and lse leave of the budget), all
     * 32 do not. */
    standard_plan(&p, 1, FSA_DTYPE_BF16, 0);
    fsa_fwd_chunk(&heads, &tc, &p, 65536, 1);
    assert_int_equal(heads, 8);
    assert_int_equal(tc, 65536);
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    fsa_fwd_chunk(&heads, &tc, &p, 65536, 1);
    assert_int_equal(heads, 32);
    assert_int_equal(tc, 65536);
    /* Six KV heads (G = 2 of 12 query heads): chunks of 6, 3, 2 or 1 heads, never 4 or 5. */
    standard_plan(&p, 2, FSA_DTYPE_BF16, 0);
    p.desc.num_q_heads = 12;
    p.desc.num_kv_heads = 6;
    fsa_bwd_layout five;
    fsa_bwd_layout_for(&five, &p, T, 1, 5, T, FSA_ALGORITHM_FSA);
    p.desc.workspace_limit = five.total + 16 * 256;
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 3);
    assert_int_equal(tc, T);
}

static void test_work_items_are_sized_per_launch(void **state)
{
    (void)state;
    /* Work items take FSA_BWD_ITEM_ROUNDS_DEFAULT rounds where the launch that runs them (a chunk
     * of fewer heads has fewer items) keeps 2 waves of items, one round where it does not; rounds are
     * halved only where the call of every head would not make 2 waves: a chunk never takes smaller
     * items (more dK/dV partial slots) than the call of every head. */
    fsa_plan p;
    standard_plan(&p, 4, FSA_DTYPE_BF16, 0);
    const int64_t grid = p.bwd_grid;
    fsa_bwd_layout all, one;
    /* T 8192, G 4: 8 heads' 1M entries keep 2 waves at 3 rounds (768), one head's 128K not. */
    fsa_bwd_layout_for(&all, &p, 8192, 1, 8, 8192, FSA_ALGORITHM_FSA);
    fsa_bwd_layout_for(&one, &p, 8192, 1, 1, 8192, FSA_ALGORITHM_FSA);
    assert_int_equal(all.item_entries, FSA_BWD_ITEM_ROUNDS_DEFAULT * fsa_bwd_item_entries(4, 0));
    assert_int_equal(one.item_entries, fsa_bwd_item_entries(4, 0));
    assert_true((int64_t)8192 * 16 / one.item_entries < 2 * grid);
    /* T 1000: halved rounds, the call's and its chunks' alike. */
    fsa_bwd_layout_for(&all, &p, 1000, 1, 8, 1000, FSA_ALGORITHM_FSA);
    fsa_bwd_layout_for(&one, &p, 1000, 1, 1, 1000, FSA_ALGORITHM_FSA);
    assert_true(all.item_entries < fsa_bwd_item_entries(4, 0));
    assert_int_equal(all.item_entries, one.item_entries);
    /* T 65536, G 1: every head takes 3 rounds (3072) and long lists up to 4 times that; a launch
     * of one head one round (1024 items of 1024 entries: 512 of 2048 would not be 2 waves) and
     * its long lists one round too (a CTA's share of the launch is 3971 entries: an item of 4096
     * would be longer than that). */
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    const int64_t T = 65536;
    fsa_bwd_layout_for(&all, &p, T, 1, 32, T, FSA_ALGORITHM_FSA);
    fsa_bwd_layout_for(&one, &p, T, 1, 1, T, FSA_ALGORITHM_FSA);
    assert_int_equal(all.item_entries, 3 * 1024);
    assert_int_equal(all.item_max_rounds, FSA_BWD_MAX_ITEM_ROUNDS);
    assert_int_equal(one.item_entries, 1024);
    assert_int_equal(one.item_max_rounds, 1);
    assert_int_equal(fsa_bwd_list_item_entries(T, one.item_entries, one.item_max_rounds), 1024);
    assert_int_equal(fsa_bwd_list_item_entries(T, all.item_entries, all.item_max_rounds), 4 * 3072);
    /* Head chunks of every token at G <= 4 take FSA_BWD_HEAD_CHUNK_ITEM_ROUNDS where their launch
     * keeps 2 waves with them, else the default rounds: under the default cap at T 65536, G 4's
     * one-head chunks (1M entries: 1024 items of 4 rounds) and G 2's two-head chunks take 4 rounds,
     * G 1's two-head chunks (2M entries: 512 items of 4 rounds, under 2 waves) 3; the calls of every
     * head keep 3. */
    for (int g = 1; g <= 4; g *= 2) {
        fsa_plan c;
        standard_plan(&c, g, FSA_DTYPE_BF16, 0);
        int heads;
        int64_t tc;
        bwd_chunk(&heads, &tc, &c, T);
        assert_int_equal(heads, g == 4 ? 1 : 2);
        assert_int_equal(tc, T);
        fsa_bwd_layout chunk, every;
        fsa_bwd_layout_for(&chunk, &c, T, 1, heads, tc, FSA_ALGORITHM_FSA);
        fsa_bwd_layout_for(&every, &c, T, 1, 32 / g, T, FSA_ALGORITHM_FSA);
        const int rounds = g == 1 ? FSA_BWD_ITEM_ROUNDS_DEFAULT : FSA_BWD_HEAD_CHUNK_ITEM_ROUNDS;
        assert_int_equal(chunk.item_entries, rounds * fsa_bwd_item_entries(g, 0));
        assert_true((int64_t)heads * T * 16 / chunk.item_entries >= 2 * c.bwd_grid);
        assert_int_equal(every.item_entries, FSA_BWD_ITEM_ROUNDS_DEFAULT * fsa_bwd_item_entries(g, 0));
        assert_true(chunk.total <= fsa_call_workspace_cap(&c, FSA_OP_BWD, T));
    }
    /* FSA_BWD_ITEM_ROUNDS and FSA_BWD_LIST_ROUNDS (measuring) replace the rounds and the bound. */
    p.bwd_item_rounds = 1;
    p.bwd_list_rounds = 2;
    fsa_bwd_layout_for(&all, &p, T, 1, 32, T, FSA_ALGORITHM_FSA);
    assert_int_equal(all.item_entries, 1024);
    assert_int_equal(all.item_max_rounds, 2);
}

static void test_a_chunk_of_every_token_in_one_pass_needs_no_accumulator(void **state)
{
    (void)state;
    /* dk and dv go straight out when a chunk covers every token and the head
     * dims take one pass; token chunks and two-pass head dims keep the fp32
     * accumulator, T x heads rows of D + Dv floats. */
    fsa_plan p;
    standard_plan(&p, 1, FSA_DTYPE_BF16, 0);
    const int64_t T = 65536;
    fsa_bwd_layout whole, part;
    fsa_bwd_layout_for(&whole, &p, T, 1, 2, T, FSA_ALGORITHM_FSA);
    fsa_bwd_layout_for(&part, &p, T, 1, 2, T / 2, FSA_ALGORITHM_FSA);
    assert_true(whole.dkv_direct);
    assert_int_equal(whole.total, whole.dkv_acc); /* the accumulator is the last array: none */
    assert_false(part.dkv_direct);
    assert_int_equal(part.total - part.dkv_acc, (size_t)T * 2 * 256 * 4);
    p.desc.head_dim = p.desc.value_dim = p.config.head_dim = p.config.value_dim = 256;
    fsa_bwd_layout_for(&whole, &p, T, 1, 2, T, FSA_ALGORITHM_FSA);
    assert_false(whole.dkv_direct);
    /* The standard problem's backward at G = 1 under the default cap: one index of every KV head
     * leaves room for chunks of two heads (16 chunks, one inversion): their launches take items of
     * 3 rounds, whose fewer dK/dV partials make the room (one round, the items of a one-head
     * launch, would leave room for one head only). */
    standard_plan(&p, 1, FSA_DTYPE_BF16, 0);
    int heads;
    int64_t tc;
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 2);
    assert_int_equal(tc, T);
    fsa_bwd_layout l;
    fsa_bwd_layout_for(&l, &p, T, 1, heads, tc, FSA_ALGORITHM_FSA);
    assert_int_equal(l.index.index_heads, 32);
    assert_int_equal(l.item_entries, 3 * 1024);
    assert_true(l.total <= fsa_call_workspace_cap(&p, FSA_OP_BWD, T));
    p.bwd_item_rounds = 1;
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 1);
}

static void test_head_chunks_of_every_token_share_one_index_of_every_head(void **state)
{
    (void)state;
    /* Counts and list offsets cover the most KV heads the cap leaves room for (here every head), work
     * items (and the backward's partial slots) restart per chunk of heads, the lists
     * sorted and delta computed once per inversion; the unsorted lists, read by the sort only, share
     * the dq rows' bytes. Token chunks keep an index per chunk. */
    fsa_plan p;
    standard_plan(&p, 4, FSA_DTYPE_BF16, 0);
    const int64_t T = 8192, nb = T / 64 + 2;
    fsa_bwd_layout two, tokens;
    fsa_bwd_layout_for(&two, &p, T, 1, 2, T, FSA_ALGORITHM_FSA);
    assert_int_equal(two.index.index_heads, 8);
    assert_int_equal(two.index.chunk_heads, 2);
    assert_int_equal(fsa_index_chunks(&two.index), 4);
    assert_int_equal(two.index.n_counts, (size_t)(8 * nb + 1));
    assert_int_equal(two.index.n_chunk, (size_t)(2 * nb + 1));
    assert_true(two.index.seg_stride >= two.index.n_chunk + (size_t)(2 * T * 16 / two.item_entries));
    assert_true(two.index.work_offsets + 4 * two.index.n_chunk * 4 <= two.part_offsets);
    assert_true(two.part_offsets + 4 * two.index.n_chunk * 4 <= two.work_seg);
    assert_true(two.work_seg + 4 * two.index.seg_stride * 4 <= two.mask);
    /* Every chunk's work counters follow the counts, zeroed with them by each inversion. */
    assert_int_equal(two.index.work_next, two.index.counts + 4 * two.index.n_counts);
    assert_true(two.index.work_next + 4 * 2 * 4 <= two.index.offsets);
    assert_true(two.list_sorted - two.mask >= (size_t)(8 * T * 8));
    assert_true(two.delta - two.list_sorted >= (size_t)(8 * T * 16 * 4));
    assert_true(two.dq_part - two.delta >= (size_t)(32 * T * 4));
    assert_int_equal(two.list, two.dq_part);
    /* Token chunks of one head: one inversion of every (KV head, token chunk), as virtual heads. */
    fsa_bwd_layout_for(&tokens, &p, T, 1, 1, T / 2, FSA_ALGORITHM_FSA);
    assert_int_equal(tokens.index.tchunks, 2);
    assert_int_equal(tokens.index.index_heads, 16);
    assert_int_equal(tokens.index.chunk_heads, 1);
    assert_int_equal(fsa_index_chunks(&tokens.index), 16);
    assert_int_equal(tokens.index.n_counts, (size_t)(16 * nb + 1));
    assert_true(tokens.list_sorted - tokens.mask >= (size_t)(16 * (T / 2) * 8));
    assert_true(tokens.delta - tokens.list_sorted >= (size_t)(16 * (T / 2) * 16 * 4));
    p.index_per_chunk = 1; /* FSA_INDEX_ONCE=0: an index per chunk */
    fsa_bwd_layout_for(&tokens, &p, T, 1, 1, T / 2, FSA_ALGORITHM_FSA);
    assert_int_equal(tokens.index.tchunks, 1);
    assert_int_equal(tokens.index.index_heads, 1);
    assert_int_equal(fsa_index_chunks(&tokens.index), 1);
    p.index_per_chunk = 0;
    /* The NSA order has no dq rows to share: its lists take their own bytes. */
    fsa_bwd_layout nsa;
    fsa_bwd_layout_for(&nsa, &p, T, 1, 2, T, FSA_ALGORITHM_NSA);
    assert_true(nsa.dkv_part - nsa.list >= (size_t)(8 * T * 16 * 4));
    /* The forward too: one index of every head for its head chunks. */
    fsa_fsa_layout f;
    fsa_fsa_layout_for(&f, &p, T, 1, 2, T);
    assert_int_equal(f.index.index_heads, 8);
    assert_true(f.lse_part - f.list >= (size_t)(8 * T * 16 * 4));
}

static void test_token_chunks_of_the_standard_problem_share_one_index(void **state)
{
    (void)state;
    /* At T = 65536 and G 8 / 16 the default cap leaves room for one KV head's dq rows of 32768 /
     * 21846 tokens: 2 / 3 token chunks per head, all of them read from one inversion (8 / 6 virtual
     * heads), which costs a few MB beside the chunk's arrays; FSA_INDEX_ONCE=0 chunks alike. Token
     * chunks take items of FSA_BWD_ITEM_ROUNDS_DEFAULT times the entries (fewer dK/dV partials:
     * the 3 chunks fit at G 16). */
    const int64_t T = 65536, nb = T / 64 + 2;
    for (int g = 8; g <= 16; g *= 2) {
        fsa_plan p;
        standard_plan(&p, g, FSA_DTYPE_BF16, 0);
        int heads;
        int64_t tc;
        bwd_chunk(&heads, &tc, &p, T);
        assert_int_equal(heads, 1);
        const int n = (int)((T + tc - 1) / tc);
        assert_int_equal(n, g == 8 ? 2 : 3);
        fsa_bwd_layout l;
        fsa_bwd_layout_for(&l, &p, T, 1, heads, tc, FSA_ALGORITHM_FSA);
        assert_int_equal(l.item_entries, FSA_BWD_ITEM_ROUNDS_DEFAULT * fsa_bwd_item_entries(g, 0));
        assert_int_equal(l.index.tchunks, n);
        assert_int_equal(l.index.index_heads, (32 / g) * n);
        assert_int_equal(fsa_index_chunks(&l.index), (32 / g) * n);
        assert_int_equal(l.index.n_counts, (size_t)((32 / g) * n * nb + 1));
        assert_true(l.total <= fsa_call_workspace_cap(&p, FSA_OP_BWD, T));
        assert_true(bwd_bytes(&p, T) == l.total);
        p.index_per_chunk = 1;
        int heads1;
        int64_t tc1;
        bwd_chunk(&heads1, &tc1, &p, T);
        assert_int_equal(heads1, 1);
        assert_int_equal(tc1, tc);
        fsa_bwd_layout_for(&l, &p, T, 1, heads, tc, FSA_ALGORITHM_FSA);
        assert_int_equal(l.index.tchunks, 1);
        assert_int_equal(l.index.index_heads, 1);
    }
}

static void test_a_cap_below_one_token_gives_the_smallest_chunk(void **state)
{
    (void)state;
    fsa_plan p;
    standard_plan(&p, 4, FSA_DTYPE_BF16, 1);
    const int64_t T = 4096;
    int heads;
    int64_t tc;
    bwd_chunk(&heads, &tc, &p, T);
    assert_int_equal(heads, 1);
    assert_int_equal(tc, 1);
    fsa_bwd_layout one;
    fsa_bwd_layout_for(&one, &p, T, 1, 1, 1, FSA_ALGORITHM_FSA);
    assert_int_equal(bwd_bytes(&p, T), one.total);
    /* Its floor: one head's fp32 dK/dV accumulator over every token. */
    assert_true(one.total >= (size_t)T * 2 * 128 * 4);
    fsa_fsa_layout f;
    fsa_fsa_layout_for(&f, &p, T, 1, 1, 1);
    assert_int_equal(fwd_bytes(&p, T), f.total);
}

/* A cap of a few tokens over millions of blocks: the index's 32-bit counter keys
 * (a CTA's rows span FSA_INDEX_THREADS / tc + 2 heads of nb_total blocks) would
 * wrap, so both workspace queries refuse the call with UNSUPPORTED; one sequence
 * fewer of blocks than that bound, and a cap that gives long chunks, pass. */
static void test_token_chunks_whose_index_keys_pass_int32_are_refused(void **state)
{
    (void)state;
    fsa_plan p;
    standard_plan(&p, 4, FSA_DTYPE_BF16, 1); /* one-token chunks */
    const int64_t heads = FSA_INDEX_THREADS + 2, bound = (INT32_MAX - 1) / heads;
    /* One-token sequences: nb_total = T / 64 + batch + 1 blocks per KV head. */
    int batch = (int)(bound * 64 / 65);
    while ((int64_t)batch / 64 + batch + 1 <= bound) batch++;
    size_t n = 1;
    assert_int_equal(fsa_plan_workspace_size(&n, &p, batch, batch), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("plan", "32-bit keys");
    assert_int_equal(n, 0);
    assert_int_equal(fsa_plan_workspace_size_bwd(&n, &p, batch, batch), FSA_STATUS_UNSUPPORTED);
    fsa_test_expect_error("plan", "32-bit keys");
    batch--; /* nb_total at the bound */
    assert_int_equal(fsa_plan_workspace_size(&n, &p, batch, batch), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size_bwd(&n, &p, batch, batch), FSA_STATUS_OK);
    batch++;
    p.desc.workspace_limit = FSA_WORKSPACE_UNLIMITED; /* one chunk of every token: keys span two heads */
    assert_int_equal(fsa_plan_workspace_size(&n, &p, batch, batch), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size_bwd(&n, &p, batch, batch), FSA_STATUS_OK);
}

/* The scatter names a work item's segment, its place among its chunk's KV heads x blocks, in an int: one-token
 * sequences by the hundred million made a chunk of 4 heads pass 2^31 (the last head's segments wrapped
 * negative, and the main kernel read and wrote before its arrays). The chunk search takes the most heads whose
 * segments an int numbers, whatever the cap; the workspace query then succeeds. */
static void test_chunks_take_no_more_heads_than_an_int_numbers_the_segments_of(void **state)
{
    (void)state;
    fsa_plan p;
    standard_plan(&p, 1, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    p.desc.num_q_heads = p.desc.num_kv_heads = 4;
    p.desc.block_size = 256;
    p.desc.top_k = 1;
    p.desc.backward = 0;
    p.bwd_available = 0;
    p.config.head_dim = p.config.value_dim = 16;
    p.desc.value_dim = 16;
    p.config.block_size = 256;
    p.config.top_k = 1;
    /* nb_total = T / 256 + batch + 1 blocks per KV head, just past (2^31 - 1) / 4 with batch = T. */
    int batch = 534000000;
    while ((int64_t)batch / 256 + batch + 1 <= (INT32_MAX - 1) / 4) batch++;
    const int64_t nb_total = (int64_t)batch / 256 + batch + 1;
    const uint64_t caps[] = {FSA_WORKSPACE_UNLIMITED, (uint64_t)64 << 30, 0};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        p.desc.workspace_limit = caps[c];
        int heads;
        int64_t tc;
        fsa_fwd_chunk(&heads, &tc, &p, batch, batch);
        print_message("  cap %llu: chunks of %d heads x %lld tokens\n", (unsigned long long)caps[c], heads,
                      (long long)tc);
        assert_true(heads * nb_total <= INT32_MAX - 1);
        size_t n = 0;
        if (caps[c] != 0) assert_int_equal(fsa_plan_workspace_size(&n, &p, batch, batch), FSA_STATUS_OK);
    }
    /* 3 heads of them fit: one chunk of every head. */
    p.desc.num_q_heads = p.desc.num_kv_heads = 3;
    p.desc.workspace_limit = FSA_WORKSPACE_UNLIMITED;
    int heads;
    int64_t tc;
    fsa_fwd_chunk(&heads, &tc, &p, batch, batch);
    assert_int_equal(heads, 3);
}

/* The index one inversion covers for chunks of `heads` heads is a multiple of them that divides Hkv: at 6 KV
 * heads and chunks of 2, never 3 (a layout of 3 index heads over 2-head chunks would misplace the third
 * chunk's segments). Every cap from 1 MiB to the unlimited layout's size, in 4096 steps. */
static void test_shared_index_heads_are_multiples_of_the_chunks_heads_that_divide_hkv(void **state)
{
    (void)state;
    const int64_t T = 8192;
    fsa_plan p;
    standard_plan(&p, 2, FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
    p.desc.num_q_heads = 12;
    p.desc.num_kv_heads = 6;
    fsa_fsa_layout all;
    fsa_fsa_layout_for(&all, &p, T, 1, 2, T);
    assert_int_equal(all.index.index_heads, 6);
    int seen[7] = {0};
    for (uint64_t cap = 1 << 20; cap <= all.total + 65536; cap += (all.total / 4096) | 1) {
        p.desc.workspace_limit = cap;
        fsa_fsa_layout l;
        fsa_fsa_layout_for(&l, &p, T, 1, 2, T);
        if (l.index.index_heads % 2 != 0 || 6 % l.index.index_heads != 0)
            fail_msg("cap %llu: chunks of 2 heads share an index of %d heads", (unsigned long long)cap,
                     l.index.index_heads);
        seen[l.index.index_heads]++;
    }
    assert_true(seen[2] > 0 && seen[6] > 0); /* both answers occur over the caps */
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The chunk searches walk the divisors of Hkv, not every head count: at 2^28 - 1 KV heads (top-k 1, so a
 * token's list entries fit int32) a workspace query took about 9 s (a bisection of scans over 2^28 counts).
 * Now a few milliseconds; 2 s leaves sanitizer builds a wide margin. The answer is a chunk of whole heads. */
static void test_the_chunk_search_walks_the_divisors_of_hkv(void **state)
{
    (void)state;
    fsa_plan p;
    standard_plan(&p, 1, FSA_DTYPE_BF16, 0);
    p.desc.num_q_heads = p.desc.num_kv_heads = (1 << 28) - 1; /* 3 x 5 x 29 x 43 x 113 x 127 */
    p.desc.top_k = 1;
    p.config.top_k = 1;
    p.desc.backward = 0;
    p.bwd_available = 0;
    const double t0 = seconds_now();
    size_t n = 0;
    assert_int_equal(fsa_plan_workspace_size(&n, &p, 2, 1), FSA_STATUS_OK);
    int heads;
    int64_t tc;
    fsa_fwd_chunk(&heads, &tc, &p, 2, 1);
    const double took = seconds_now() - t0;
    print_message("  %d KV heads: chunks of %d heads x %lld tokens, %zu bytes, %.3f s\n", p.desc.num_kv_heads, heads,
                  (long long)tc, n, took);
    assert_true(n > 0);
    assert_int_equal(p.desc.num_kv_heads % heads, 0);
    assert_true(took < 2.0);
}

/* ------------------------------------------------ the layouts' regions */

typedef struct region {
    const char *name;
    size_t at, bytes;
} region;

typedef struct regions {
    region r[24];
    int n;
} regions;

static void add_region(regions *rs, const char *name, size_t at, size_t bytes)
{
    assert_true(rs->n < 24);
    rs->r[rs->n++] = (region){name, at, bytes};
}

/* No two regions share a byte, each starts 256-byte aligned (but the work
 * counters, which follow the counts so that one memset zeroes both) and ends
 * within the total. */
static void expect_apart(regions *rs, size_t total, const char *what)
{
    for (int i = 0; i < rs->n; i++) {
        const region *a = &rs->r[i];
        if (strcmp(a->name, "work counters") != 0 && a->at % 256 != 0)
            fail_msg("%s: %s at %zu is not 256-byte aligned", what, a->name, a->at);
        if (a->bytes > total || a->at > total - a->bytes)
            fail_msg("%s: %s [%zu, +%zu) ends past the total %zu", what, a->name, a->at, a->bytes, total);
        for (int j = 0; j < i; j++) {
            const region *b = &rs->r[j];
            if (a->bytes && b->bytes && a->at < b->at + b->bytes && b->at < a->at + a->bytes)
                fail_msg("%s: %s [%zu, +%zu) overlaps %s [%zu, +%zu)", what, a->name, a->at, a->bytes, b->name,
                         b->at, b->bytes);
        }
    }
}

/* The index's arrays, sized from what the kernels keep in them: a count and
 * an offset per (index head, block id) and one more, FSA_WORK_COUNTERS
 * counters and a work offset per block id of each chunk, and a segment entry
 * per full item of a chunk's pairs besides one per block id. */
static void add_index_regions(regions *rs, const fsa_index_layout *ix, const fsa_plan *p, int64_t T, int batch,
                              int heads, int64_t tc, int entries)
{
    const size_t nb = (size_t)(T / p->desc.block_size + batch + 1);
    assert_int_equal(ix->nb_total, (int64_t)nb);
    assert_int_equal(ix->chunk_heads, heads);
    assert_int_equal(ix->index_heads % heads, 0);
    const size_t chunks = (size_t)(ix->index_heads / heads), n_chunk = (size_t)heads * nb + 1;
    const size_t n_counts = (size_t)ix->index_heads * nb + 1;
    assert_int_equal(ix->n_counts, n_counts);
    assert_int_equal(ix->n_chunk, n_chunk);
    assert_true(ix->seg_stride >= n_chunk + (size_t)heads * (size_t)tc * (size_t)p->desc.top_k / (size_t)entries);
    assert_int_equal(ix->work_next, ix->counts + n_counts * 4);
    add_region(rs, "counts", ix->counts, n_counts * 4);
    add_region(rs, "work counters", ix->work_next, chunks * FSA_WORK_COUNTERS * 4);
    add_region(rs, "offsets", ix->offsets, n_counts * 4);
    add_region(rs, "work offsets", ix->work_offsets, chunks * n_chunk * 4);
}

static void expect_forward_regions(const fsa_plan *p, int64_t T, int batch, int heads, int64_t tc, const char *what)
{
    fsa_fsa_layout f;
    fsa_fsa_layout_for(&f, p, T, batch, heads, tc);
    const fsa_index_layout *ix = &f.index;
    const size_t k = (size_t)p->desc.top_k, g = (size_t)p->group, pairs = (size_t)heads * (size_t)tc * k;
    regions rs = {.n = 0};
    add_index_regions(&rs, ix, p, T, batch, heads, tc, fsa_plan_fwd_item_entries(p));
    add_region(&rs, "work segments", f.work_seg, (size_t)fsa_index_chunks(ix) * ix->seg_stride * 4);
    add_region(&rs, "mask", f.mask, (size_t)ix->index_heads * (size_t)tc * 8); /* a 64-bit word per row */
    add_region(&rs, "list", f.list, (size_t)ix->index_heads * (size_t)tc * k * 4);
    add_region(&rs, "partial lse", f.lse_part, pairs * g * 4);
    add_region(&rs, "partial rows", f.o_part, pairs * g * p->desc.value_dim * 2);
    expect_apart(&rs, f.total, what);
}

static void expect_backward_regions(const fsa_plan *p, int64_t T, int batch, int heads, int64_t tc,
                                    fsa_algorithm order, const char *what)
{
    fsa_bwd_layout b;
    fsa_bwd_layout_for(&b, p, T, batch, heads, tc, order);
    const fsa_index_layout *ix = &b.index;
    const size_t k = (size_t)p->desc.top_k, g = (size_t)p->group, pairs = (size_t)heads * (size_t)tc * k;
    const size_t chunks = (size_t)fsa_index_chunks(ix), e = (size_t)b.item_entries;
    const size_t index_pairs = (size_t)ix->index_heads * (size_t)tc * k;
    const size_t dkv_row = (size_t)(p->desc.head_dim + p->desc.value_dim) * 4; /* dK then dV, float */
    regions rs = {.n = 0};
    add_index_regions(&rs, ix, p, T, batch, heads, tc, b.item_entries);
    add_region(&rs, "part offsets", b.part_offsets, chunks * ix->n_chunk * 4);
    add_region(&rs, "work segments", b.work_seg, chunks * ix->seg_stride * 4);
    add_region(&rs, "mask", b.mask, (size_t)ix->index_heads * (size_t)tc * 8);
    add_region(&rs, "sorted list", b.list_sorted, index_pairs * 4);
    add_region(&rs, "delta", b.delta, (size_t)ix->index_heads * g * (size_t)tc * 4);
    /* The FSA order's dq rows: a row per (pair, key slice, query head). */
    const size_t slices = (size_t)(p->desc.block_size / p->config.bwd_keys);
    const size_t dq_bytes = order == FSA_ALGORITHM_FSA ? pairs * slices * g * p->desc.head_dim * 2 : 0;
    add_region(&rs, "dq rows", b.dq_part, dq_bytes);
    /* The unsorted lists are read by the sort alone, before any dq row is written: they may take the
     * dq rows' bytes, where those hold them. */
    if (b.list == b.dq_part && dq_bytes >= index_pairs * 4) {
        assert_true(dq_bytes > 0);
    } else {
        add_region(&rs, "list", b.list, index_pairs * 4);
    }
    /* A dK/dV partial slot of block_size rows per item of a split segment (more than e entries):
     * ceil(c / e) <= c / e + 1 each, and at most min(segments, pairs / e) such segments. */
    const size_t split = pairs / e + (ix->n_chunk < pairs / e ? ix->n_chunk : pairs / e);
    add_region(&rs, "dK/dV partial slots", b.dkv_part, split * (size_t)p->desc.block_size * dkv_row);
    add_region(&rs, "dK/dV accumulator", b.dkv_acc, b.dkv_direct ? 0 : (size_t)T * (size_t)heads * dkv_row);
    if (b.dkv_direct) assert_true(tc >= T);
    expect_apart(&rs, b.total, what);
}

static void test_every_region_of_every_layout_holds_its_contents_apart_from_the_others(void **state)
{
    (void)state;
    const int groups[] = {1, 4, 16};
    const int dims[][2] = {{16, 16}, {128, 128}, {192, 128}};
    const int blocks[] = {16, 64};
    for (size_t gi = 0; gi < 3; gi++)
        for (size_t di = 0; di < 3; di++)
            for (size_t bi = 0; bi < 2; bi++)
                for (int once = 0; once < 2; once++) {
                    fsa_plan p;
                    standard_plan(&p, groups[gi], FSA_DTYPE_BF16, FSA_WORKSPACE_UNLIMITED);
                    p.desc.head_dim = p.config.head_dim = dims[di][0];
                    p.desc.value_dim = p.config.value_dim = dims[di][1];
                    p.desc.block_size = p.config.block_size = blocks[bi];
                    p.config.bwd_keys = blocks[bi] < 64 ? blocks[bi] : 64;
                    p.index_per_chunk = once == 0; /* FSA_INDEX_ONCE=0, and its default */
                    const int hkv = p.desc.num_kv_heads;
                    const struct { int64_t T; int batch, heads; int64_t tc; } calls[] = {
                        {1000, 3, hkv, 1000}, {8192, 1, hkv, 8192}, {8192, 1, 1, 8192},
                        {8192, 2, hkv > 1 ? hkv / 2 : 1, 8192}, {8192, 1, 1, 2048}, {4099, 5, 1, 977}};
                    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
                        char what[160];
                        snprintf(what, sizeof what, "G %d, D %d / %d, BK %d, index %s, T %lld B %d in chunks of %d "
                                 "heads x %lld tokens", groups[gi], dims[di][0], dims[di][1], blocks[bi],
                                 once ? "once" : "per chunk", (long long)calls[c].T, calls[c].batch, calls[c].heads,
                                 (long long)calls[c].tc);
                        expect_forward_regions(&p, calls[c].T, calls[c].batch, calls[c].heads, calls[c].tc, what);
                        expect_backward_regions(&p, calls[c].T, calls[c].batch, calls[c].heads, calls[c].tc,
                                                FSA_ALGORITHM_FSA, what);
                        expect_backward_regions(&p, calls[c].T, calls[c].batch, calls[c].heads, calls[c].tc,
                                                FSA_ALGORITHM_NSA, what);
                    }
                }
}

int main(void)
{
    g_ctx.target = "sm_90a";
    g_ctx.sm_count = 132;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_region_of_every_layout_holds_its_contents_apart_from_the_others),
        cmocka_unit_test(test_a_zero_limit_is_the_default_cap_and_unlimited_is_none),
        cmocka_unit_test(test_the_standard_problem_stays_within_the_default_cap),
        cmocka_unit_test(test_long_backwards_keep_long_token_chunks_under_the_default_cap),
        cmocka_unit_test(test_a_backward_workspace_sized_before_the_record_serves_the_order_it_names),
        cmocka_unit_test(test_a_forward_chunks_pairs_leave_room_for_the_grids_steps_below_int32),
        cmocka_unit_test(test_a_backward_launch_fits_when_its_items_and_grid_stay_within_int32),
        cmocka_unit_test(test_chunks_take_kv_heads_that_divide_hkv_before_tokens),
        cmocka_unit_test(test_work_items_are_sized_per_launch),
        cmocka_unit_test(test_a_chunk_of_every_token_in_one_pass_needs_no_accumulator),
        cmocka_unit_test(test_head_chunks_of_every_token_share_one_index_of_every_head),
        cmocka_unit_test(test_token_chunks_of_the_standard_problem_share_one_index),
        cmocka_unit_test(test_a_cap_below_one_token_gives_the_smallest_chunk),
        cmocka_unit_test(test_token_chunks_whose_index_keys_pass_int32_are_refused),
        cmocka_unit_test(test_chunks_take_no_more_heads_than_an_int_numbers_the_segments_of),
        cmocka_unit_test(test_the_chunk_search_walks_the_divisors_of_hkv),
        cmocka_unit_test(test_shared_index_heads_are_multiples_of_the_chunks_heads_that_divide_hkv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
