/* Compressed attention forward, block selection and backward on the GPU
 * against the CPU float64 reference: dtypes, Dk != Dv, groups 1..16, varlen batches with
 * sequences shorter than the compression kernel, strided tensors, both top-k
 * layouts, forced initial and local blocks (also more than K of them), rows
 * with fewer blocks than K, exact ties, 1024 KV heads, determinism and graph
 * capture. Errors are bounded over each tensor and over each (token, head)
 * row; what sees nothing has exactly zero outputs and gradients.
 * Outputs are poisoned before every run. FSA_TEST_QUICK=1 runs a subset, FSA_TEST_CASES=name,... the fixed cases named.
 * Besides the table, random cases drawn over every shape a plan takes go
 * through the same checks: FSA_TEST_RANDOM=N of them (default 4, 1 under
 * FSA_TEST_QUICK=1, 0 none), from FSA_TEST_SEED=S (default 0xc0de5eed);
 * each prints its seed and every field before it runs. */
#include "attention_problem.h"
#include "cmp_problem.h"
#include "gate_rows.h"

#include "../../templates/cmp_params.cuh" /* the plan's limits: groups, top-k, the selection's halo */


#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BF FSA_DTYPE_BF16
#define HF FSA_DTYPE_F16

static const cmp_case cases[] = {
    /* name                 dtype dk   dv   hq  hkv l   d   bk   k   init local lens                     n  tkh str zq quick */
    {"bf16_std_g4_varlen",    BF, 128, 128, 8,  2,  32, 16, 64,  16, 1, 2, {1500, 31, 32, 200},      4, 0, 0, 0, 1},
    {"bf16_dk192_dv128_g16",  BF, 192, 128, 32, 2,  32, 16, 64,  8,  1, 2, {900, 17},                2, 1, 0, 0, 1},
    {"f16_dk64_dv32_g3",      HF, 64,  32,  6,  2,  16, 8,  32,  6,  0, 1, {5, 400, 250},            3, 0, 1, 0, 0},
    {"bf16_d256_g1",          BF, 256, 256, 2,  2,  32, 16, 64,  4,  2, 0, {700},                    1, 1, 1, 0, 0},
    {"f16_dk128_dv64_g5_scale0.2", HF, 128, 64, 5, 1, 64, 32, 64, 5,  1, 1, {600, 129},              2, 0, 0, 0, 0, 0, 0, 0.2f},
    {"bf16_dk32_dv96_g7_l_eq_d", BF, 32, 96, 7, 1,  8,  8,  16,  3,  0, 0, {300, 1, 9},              3, 1, 0, 0, 0},
    {"bf16_dk256_dv64_g4_one_pass", BF, 256, 64, 8, 2, 32, 16, 64, 6,  1, 2, {500, 40},               2, 0, 0, 0, 0},
    {"bf16_g2_exact_ties",    BF, 64,  64,  4,  2,  32, 16, 64,  6,  1, 1, {800, 300},               2, 0, 0, 1, 1},
    {"f16_d16_g8_k64_padded", HF, 16,  16,  8,  1,  16, 4,  64,  64, 1, 2, {2000},                   1, 0, 0, 0, 1},
    {"bf16_g16_forced_over_k",BF, 128, 128, 32, 2,  32, 16, 16,  4,  3, 3, {500},                    1, 1, 0, 0, 0},
    {"bf16_t1",               BF, 64,  64,  2,  1,  32, 16, 64,  2,  1, 2, {1},                      1, 0, 0, 0, 0},
    {"bf16_g12_bk32_scale0.05", BF, 64, 64, 12, 1,  32, 16, 32,  8,  1, 2, {700, 40, 33},            3, 0, 1, 0, 0, 0, 0, 0.05f},
    {"f16_g4_ties_l64_bk256", HF, 64,  128, 8,  2,  64, 16, 256, 3,  0, 1, {1700},                   1, 1, 0, 1, 0},
    /* top-k over 32 (query fragments read per stage), a token's blocks shared by 16 lanes, exact ties
       through the heads' sums in registers */
    {"bf16_g16_k36_ties_lanes16", BF, 64, 64, 16, 1, 32, 16, 32,  36, 1, 2, {2000, 700},            2, 0, 0, 1, 1},
    /* block size = stride at G 1: 64 blocks per stage on one lane per token, scored in chunks */
    {"bf16_g1_bk_eq_stride",  BF, 64,  64,  2,  2,  16, 16, 16,  8,  1, 2, {600, 90},               2, 0, 0, 0, 1},
    /* long enough for several rounds of every ring (6 and 4 stages of 64 compressed keys): the buffers
       are refilled and the mbarriers' phases wrap */
    {"bf16_std_g4_many_stages", BF, 128, 128, 8, 2, 32, 16, 64, 16, 1, 2, {5200, 700},             2, 0, 0, 0, 1},
    {"bf16_dk192_dv128_g16_many_stages", BF, 192, 128, 32, 2, 32, 16, 64, 16, 1, 2, {3400},       1, 1, 0, 0, 0},
    /* the standard shape at G 1 over 5 stages of blocks: the first stages' lists filled by sorting and
       merging, the stages without forced blocks read without bounds, the bound that counts the local
       blocks still to come (2 = the lanes per token); with random and with tied scores; and G 2 (4 lanes
       per token) with 4 local blocks */
    {"bf16_g1_std_long",      BF, 128, 128, 2,  2,  32, 16, 64,  16, 1, 2, {4600, 1300},            2, 0, 0, 0, 1},
    {"bf16_g1_std_long_ties", BF, 128, 128, 2,  2,  32, 16, 64,  16, 1, 2, {4600, 1300},            2, 1, 0, 1, 1},
    {"bf16_g2_local4_long",   BF, 64,  64,  4,  2,  32, 16, 64,  16, 1, 4, {4200},                  1, 0, 1, 0, 1},
    /* the standard shape at G 4, 8 and 16 over 5 stages of blocks, random and tied: with FSA_CMP_SEL_SPREAD a
       token's list spread over the lanes that share its blocks, filled by merges and by insertions one at a time */
    {"bf16_std_g8_long",      BF, 128, 128, 16, 2,  32, 16, 64,  16, 1, 2, {4600, 1300},            2, 0, 0, 0, 1},
    {"bf16_std_g8_long_ties", BF, 128, 128, 16, 2,  32, 16, 64,  16, 1, 2, {4600, 1300},            2, 1, 0, 1, 1},
    {"bf16_std_g16_long",     BF, 128, 128, 16, 1,  32, 16, 64,  16, 1, 2, {4600, 1300},            2, 0, 0, 0, 1},
    {"bf16_std_g16_long_ties", BF, 128, 128, 16, 1, 32, 16, 64,  16, 1, 2, {4600, 1300},            2, 1, 0, 1, 1},
    {"bf16_std_g4_long_ties", BF, 128, 128, 8,  2,  32, 16, 64,  16, 1, 2, {4600, 1300},            2, 1, 0, 1, 1},
    /* Dk 192 over 5 stages of blocks at G 1, 2 and 4: the warp-specialized selection's producer copies
       rows of 24 pieces in 64-column bands, its consumers keep whole lists (G 1: three warpgroups, G 2:
       four) or spread ones (G 4) */
    {"bf16_dk192_dv128_g1_long_ties", BF, 192, 128, 2, 2, 32, 16, 64, 16, 1, 2, {4600, 1300},       2, 1, 0, 1, 1},
    {"bf16_dk192_dv128_g2_long", BF, 192, 128, 4,  2,  32, 16, 64,  16, 1, 2, {4200},                 1, 0, 0, 0, 1},
    {"bf16_dk192_dv128_g4_long_ties", BF, 192, 128, 8, 2, 32, 16, 64, 16, 1, 2, {4600, 1300},       2, 1, 0, 1, 1},

    /* 64 KV heads, 3 key tiles each: more dK/dV CTAs than SMs, so the warpgroup dK/dV walks are not split
       (the cases above, with few key tiles, split them and sum the parts) */
    {"bf16_hkv64_g1_dkv_walk_whole", BF, 64, 64, 64, 64, 32, 16, 64, 4, 1, 2, {600, 40, 33},        3, 0, 0, 0, 1},
    /* 1024 KV heads in one plan: many small key tiles per launch */
    {"bf16_hkv1024_dkv_unsplit", BF, 16, 16, 1024, 1024, 16, 16, 64, 4, 1, 2, {300},            1, 0, 0, 0, 1},
    /* G 6 at Dk 96 with sequences of 2 and 3 tokens (shorter than l: no compressed token); a logit 1e4
       above the rest, whose block scores leave the others at exact zeros (ties to the lower block)  hid big */
    {"f16_dk96_g6_short",     HF, 96,  96,  12, 2,  32, 16, 64,  8,  1, 2, {2, 3, 700},              3, 0, 1, 0, 0},
    {"bf16_std_g4_big_logit", BF, 128, 128, 8,  2,  32, 16, 64,  16, 1, 2, {1500, 200},             2, 0, 0, 0, 0, 0, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fsa_context *g_ctx;
static char *g_cache_dir;
static fsa_compressed_plan *g_plans[N_CASES];
static int g_refused[N_CASES]; /* by this GPU's shared memory (fsa_test_refused_for_shared_memory) */
static int g_quick;

/* FSA_TEST_CASES picks fixed cases by name (testing.h), else the quick subset or all. */
static int runs(const cmp_case *c)
{
    const int listed = fsa_test_case_listed(c->name);
    return listed >= 0 ? listed : !g_quick || c->quick;
}

static const char *case_name(size_t i) { return cases[i].name; }

/* The index of the fixed case of that name (a test's own list of cases names them). */
static size_t case_named(const char *name)
{
    size_t i = 0;
    while (i < N_CASES && strcmp(cases[i].name, name) != 0) i++;
    assert_true(i < N_CASES);
    return i;
}
/* Whether fixed case i runs on this GPU: in this run's set and not refused by its shared memory. */
static int runs_here(size_t i) { return runs(&cases[i]) && !g_refused[i]; }

/* Random cases, drawn over what a plan takes on sm_90 (validate_desc in src/attention/compressed.c;
 * docs/semantics.md, "Compressed attention and block selection"): bf16 or f16; Dk and Dv multiples of 16 from
 * 16 to 256, often different; G = Hq / Hkv from 1 to 16; stride d from 1 to 40; kernel size l from d to below
 * 5 d, but in one draw in ten (RANDOM_LONG_KERNELS) long: (l - 1) / d from 5 to 64, the most the library takes
 * with a selection (fsa_cmp_sel_halo), or in a third of those, without a selection, l from 65 d + 1 to 4096, the
 * most it takes without one. With a selection, top-k 1 to 64, BK = d x a power of two up to 64 with BK at most
 * 256, but in one draw in ten (RANDOM_LARGE_BLOCKS) past 256 (up to 64 x 40 = 2560) where the longest sequence
 * still holds two blocks; init and local blocks from 0 (more than K too); without one (top-k 0) none of those
 * apply. 1 to 4 sequences of 1 to 3 tokens, shorter than l (no compressed token), about l, or a few hundred to
 * 1500 tokens (3000 with large blocks), past the first l - 1 (which see nothing) of a kernel longer than 200;
 * shortened until the float64 reference's work is at most RANDOM_WORK_MAX (bf16_g2_local4_long's; the table's
 * longest cases do ten times as much) and the elements of the (token, query head) rows, which a long kernel's
 * first tokens have without seeing anything, at most RANDOM_ROW_ELEMENTS_MAX. Either top-k layout, dense or
 * strided tensors, sometimes q = 0 (exact ties) or a scale other than 1/sqrt(Dk). A GPU with less
 * shared memory than sm_90 may refuse some of the larger Dk and Dv shapes (sm_80, 164 KB, takes every one
 * since its dK/dV kernel may run in one stage; the 99 KB GPUs refuse 256 / 256 with backward), which such a
 * GPU reports and does not run (fsa_test_refused_for_shared_memory). */
#define RANDOM_WORK_MAX 4e8
#define RANDOM_ROW_ELEMENTS_MAX 4e7 /* about bf16_dk192_dv128_g16_many_stages's, the table's most */
#define RANDOM_LONG_KERNELS 0.1
#define RANDOM_LARGE_BLOCKS 0.1
#define RANDOM_NAME_MAX 256

/* The float64 reference's multiply-adds for a case: Dk + Dv per visible (query head, compressed token) pair
 * (forward; the backward's are a few times as many) and, with a selection, the block scores' walk over the
 * visible tokens for every block of a row (fsa_ref_cmp_block_scores). */
static double reference_work(const cmp_case *c)
{
    double pairs = 0.0, walk = 0.0;
    for (int b = 0; b < c->nseq; b++)
        for (int i = c->l - 1; i < c->lens[b]; i++) {
            const int seen = (i - (c->l - 1)) / c->d + 1; /* j * d + l - 1 <= i */
            pairs += seen;
            walk += (double)seen * (i / c->bk + 1);
        }
    return (double)c->hq * (pairs * (c->dk + c->dv) + (c->k > 0 ? walk : 0.0));
}

/* T x Hq x (Dk + Dv): the elements of q, o and dq (and of their gradients' checks), drawn, held in float and
 * in double and compared row by row, whether or not a row sees a compressed token. */
static double row_elements(const cmp_case *c)
{
    double tokens = 0.0;
    for (int b = 0; b < c->nseq; b++) tokens += c->lens[b];
    return tokens * c->hq * (c->dk + c->dv);
}

static int random_pick(fsa_rng *rng, const int *v, int n) { return v[fsa_rng_int(rng, 0, n - 1)]; }

static int random_head_dim(fsa_rng *rng)
{
    static const int usual[] = {64, 96, 128, 192};
    return fsa_rng_uniform(rng) < 0.5 ? random_pick(rng, usual, 4) : 16 * fsa_rng_int(rng, 1, 16);
}

/* A long sequence: a few hundred to `most` tokens that see compressed tokens, after the l - 1 that see none of
 * a kernel longer than the few hundred. */
static int random_long_length(fsa_rng *rng, int l, int most)
{
    return (l > 200 ? l - 1 : 0) + fsa_rng_int(rng, 200, most);
}

/* A sequence length: 1 to 3 tokens, shorter than l, about l (a few compressed tokens) or long. */
static int random_length(fsa_rng *rng, int l, int d, int most)
{
    const double u = fsa_rng_uniform(rng);
    if (u < 0.15) return fsa_rng_int(rng, 1, 3);
    if (u < 0.35 && l > 1) return fsa_rng_int(rng, 1, l - 1);
    if (u < 0.55) return fsa_rng_int(rng, l, l + 3 * d);
    return random_long_length(rng, l, most);
}

/* The kernel size: below 5 d, or long, at most `most` (at least 6 d; at least 65 d + 1 when `may_select` is
 * 0): (l - 1) / d from 5 to 64 where a selection may come, else l from 65 d + 1 to 4096, which no selection
 * takes; a quarter of the time the bound, 64 or 4096. */
static int random_kernel_size(fsa_rng *rng, int d, int long_kernel, int may_select, int most)
{
    if (!long_kernel)
        return d * fsa_rng_int(rng, 1, 4) + (d > 1 && fsa_rng_uniform(rng) < 0.3 ? fsa_rng_int(rng, 1, d - 1) : 0);
    if (may_select) { /* l from d x (l - 1) / d + 1 to d x (l - 1) / d + d */
        const int halo_most = (most - d) / d < FSA_CMP_SEL_KEYS ? (most - d) / d : FSA_CMP_SEL_KEYS;
        return d * (fsa_rng_uniform(rng) < 0.25 ? halo_most : fsa_rng_int(rng, 5, halo_most)) + fsa_rng_int(rng, 1, d);
    }
    const int l_most = most < 4096 ? most : 4096;
    return fsa_rng_uniform(rng) < 0.25 ? l_most : fsa_rng_int(rng, 65 * d + 1, l_most);
}

static void random_case(fsa_rng *rng, cmp_case *out, char *name_buf, size_t n)
{
    cmp_case c = {0};
    c.dtype = fsa_rng_int(rng, 0, 1) ? BF : HF;
    c.dk = random_head_dim(rng);
    c.dv = fsa_rng_uniform(rng) < 0.3 ? c.dk : random_head_dim(rng);
    const int G = fsa_rng_int(rng, 1, FSA_QT_MAX_GROUP);
    c.hkv = fsa_rng_uniform(rng) < 0.1 && G <= 2 ? fsa_rng_int(rng, 8, 32) /* many KV heads, small groups */
                                                : fsa_rng_int(rng, 1, G <= 8 ? 4 : 2);
    c.hq = G * c.hkv;
    static const int usual_strides[] = {4, 8, 16, 32};
    c.d = fsa_rng_uniform(rng) < 0.5 ? random_pick(rng, usual_strides, 4) : fsa_rng_int(rng, 1, 40);
    /* A long kernel leaves room within RANDOM_ROW_ELEMENTS_MAX for a sequence of 200 tokens past it. */
    const int l_most = (int)(RANDOM_ROW_ELEMENTS_MAX / (c.hq * (c.dk + c.dv))) - 200;
    const int long_kernel = fsa_rng_uniform(rng) < RANDOM_LONG_KERNELS && l_most >= 6 * c.d;
    const int may_select = !long_kernel || l_most <= 65 * c.d || fsa_rng_uniform(rng) < 2.0 / 3.0;
    c.l = random_kernel_size(rng, c.d, long_kernel, may_select, l_most);
    /* BK = d << p, p up to 6: mostly 8 to 256 positions (rows of a long sequence with more blocks than K to
     * choose among), sometimes fewer; larger ones once the lengths are known. */
    int p_max = 0, p_min = 0;
    while (p_max < 6 && c.d << (p_max + 1) <= 256) p_max++;
    while (p_min < p_max && c.d << p_min < 8) p_min++;
    c.bk = c.d << fsa_rng_int(rng, fsa_rng_uniform(rng) < 0.2 ? 0 : p_min, p_max);
    const int large_blocks = fsa_rng_uniform(rng) < RANDOM_LARGE_BLOCKS;
    const int most = large_blocks ? 3000 : 1500; /* room for two blocks of 1024 and more */
    c.nseq = fsa_rng_int(rng, 1, 4);
    for (int b = 0; b < c.nseq; b++)
        c.lens[b] = b == 0 && fsa_rng_uniform(rng) < 0.75 ? random_long_length(rng, c.l, most)
                                                          : random_length(rng, c.l, c.d, most);
    /* The last sequences go while the rows do not fit (the first, mostly long, stays: past a long kernel it
     * sees compressed tokens); then the longest loses a quarter until the reference's work (with a selection,
     * if the case may have one) and the rows fit. */
    while (c.nseq > 1 && row_elements(&c) > RANDOM_ROW_ELEMENTS_MAX) c.lens[--c.nseq] = 0;
    c.k = may_select;
    int longest;
    for (;;) {
        longest = 0;
        for (int b = 1; b < c.nseq; b++)
            if (c.lens[b] > c.lens[longest]) longest = b;
        if (reference_work(&c) <= RANDOM_WORK_MAX && row_elements(&c) <= RANDOM_ROW_ELEMENTS_MAX) break;
        c.lens[longest] -= c.lens[longest] / 4 + 1;
    }
    /* Large blocks: a BK past 256 that the longest sequence holds twice (blocks to choose between), if d and
     * that length leave one. A larger BK only shortens the block scores' walk: the work still fits. */
    if (large_blocks) {
        int p_low = 0, p_high = 6;
        while (p_low < 6 && c.d << p_low <= 256) p_low++;
        while (p_high >= p_low && c.d << p_high >= c.lens[longest]) p_high--;
        if (c.d << p_low > 256 && p_high >= p_low) c.bk = c.d << fsa_rng_int(rng, p_low, p_high);
    }
    /* Top-k mostly below the longest row's blocks (a choice to make), else anything from 1 to 64 (rows with
     * fewer blocks than K) or none; always none past the kernel sizes a selection takes. */
    const int blocks = (c.lens[longest] - 1) / c.bk + 1;
    const double u = fsa_rng_uniform(rng);
    static const int usual_k[] = {16, 32, 36, 64};
    c.k = !may_select || u < 0.15 ? 0
        : u < 0.75 ? fsa_rng_int(rng, 1, blocks > 2 ? (blocks - 1 < FSA_MAX_TOP_K ? blocks - 1 : FSA_MAX_TOP_K) : 1)
        : u < 0.9  ? random_pick(rng, usual_k, 4)
                   : fsa_rng_int(rng, 1, FSA_MAX_TOP_K);
    c.init = fsa_rng_int(rng, 0, 3);
    c.local = fsa_rng_int(rng, 0, 4);
    c.layout_tkh = fsa_rng_int(rng, 0, 1);
    c.strided = fsa_rng_int(rng, 0, 1);
    c.zero_q = c.k > 0 && fsa_rng_uniform(rng) < 0.125;
    c.quick = 1;
    if (fsa_rng_uniform(rng) < 0.25) {
        /* 0.5 to 2 times 1/sqrt(Dk), three digits (the name gives it exactly). Not more: logits spread wider
         * leave many probabilities under fp16's flush to zero, blocks the kernel ties at 0 that the reference
         * still orders, and the selection check's 95% of exact rows would fail on what the docs allow. */
        const double s = (0.5 + 1.5 * fsa_rng_uniform(rng)) / sqrt((double)c.dk);
        char digits[32];
        snprintf(digits, sizeof digits, "%.3g", s);
        c.scale = strtof(digits, NULL);
    }
    char lens[64] = "";
    for (int b = 0, used = 0; b < c.nseq; b++)
        used += snprintf(lens + used, sizeof lens - (size_t)used, "%s%d", b ? "," : "", c.lens[b]);
    char scale[32] = "default";
    if (c.scale > 0) snprintf(scale, sizeof scale, "%.3g", (double)c.scale);
    snprintf(name_buf, n, "%s_dk%d_dv%d_hq%d_hkv%d_l%d_d%d_bk%d_k%d_init%d_local%d_lens%s_%s_%s%s_scale%s",
             c.dtype == BF ? "bf16" : "f16", c.dk, c.dv, c.hq, c.hkv, c.l, c.d, c.bk, c.k, c.init, c.local, lens,
             c.layout_tkh ? "thk" : "htk", c.strided ? "strided" : "dense", c.zero_q ? "_ties" : "", scale);
    c.name = name_buf;
    *out = c;
}

typedef struct device_cmp {
    uint64_t q, k, v, o, lse, topk, cu, cu_c;
    size_t o_bytes, lse_bytes, topk_bytes;
} device_cmp;

static void device_make_cmp(device_cmp *dp, const cmp_problem *p, const cmp_case *c)
{
    memset(dp, 0, sizeof *dp);
    dp->q = upload_strided(p->q, p->T, c->hq, c->dk, p->q_ts, p->q_hs, c->dtype);
    dp->k = upload_strided(p->k, p->Tc, c->hkv, c->dk, p->k_ts, p->k_hs, c->dtype);
    dp->v = upload_strided(p->v, p->Tc, c->hkv, c->dv, p->v_ts, p->v_hs, c->dtype);
    dp->o_bytes = (size_t)p->T * p->o_ts * 2;
    dp->o = fsa_test_dalloc(dp->o_bytes);
    dp->lse_bytes = (size_t)c->hq * p->T * 4;
    dp->lse = fsa_test_dalloc(dp->lse_bytes);
    /* Without a selection (top-k 0) one slot per row, never passed to the library (it refuses a top-k
     * pointer then): only so that the outputs' download has a buffer. */
    dp->topk_bytes = (size_t)c->hkv * p->T * (c->k > 0 ? c->k : 1) * 4;
    dp->topk = fsa_test_dalloc(dp->topk_bytes);
    dp->cu = fsa_test_dalloc((size_t)(p->B + 1) * 4);
    fsa_test_h2d(dp->cu, p->cu, (size_t)(p->B + 1) * 4);
    dp->cu_c = fsa_test_dalloc((size_t)(p->B + 1) * 4);
    fsa_test_h2d(dp->cu_c, p->cu_c, (size_t)(p->B + 1) * 4);
}

static void device_free_cmp(device_cmp *dp)
{
    const uint64_t all[] = {dp->q, dp->k, dp->v, dp->o, dp->lse, dp->topk, dp->cu, dp->cu_c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fsa_test_dfree(all[i]);
}

static fsa_compressed_fwd_args args_of(const device_cmp *dp, const cmp_problem *p, const cmp_case *c)
{
    fsa_compressed_fwd_args a = FSA_COMPRESSED_FWD_ARGS_INIT;
    a.total_tokens = p->T;
    a.total_compressed = p->Tc;
    a.batch = p->B;
    a.q = (fsa_tensor){dp->q, p->q_ts, p->q_hs};
    a.k = (fsa_tensor){dp->k, p->k_ts, p->k_hs};
    a.v = (fsa_tensor){dp->v, p->v_ts, p->v_hs};
    a.o = (fsa_tensor){dp->o, p->o_ts, p->o_hs};
    a.lse = dp->lse;
    a.cu_seqlens = dp->cu;
    a.cu_seqlens_c = dp->cu_c;
    if (c->k > 0) a.topk = (fsa_tensor){dp->topk, p->topk_ts, p->topk_hs};
    return a;
}

/* NaN outputs and block 0x7f7f7f7f in every top-k slot: a slot or element
 * left unwritten fails the checks. */
static void poison(const device_cmp *dp)
{
    fsa_test_dfill(dp->o, 0xff, dp->o_bytes);
    fsa_test_dfill(dp->lse, 0xff, dp->lse_bytes);
    fsa_test_dfill(dp->topk, 0x7f, dp->topk_bytes);
}

typedef struct cmp_outputs {
    uint16_t *o_img;
    float *o, *lse;
    int32_t *topk;
} cmp_outputs;

static void download(cmp_outputs *out, const device_cmp *dp, const cmp_problem *p, const cmp_case *c)
{
    out->o_img = malloc(dp->o_bytes + 2);
    out->o = malloc(((size_t)p->T * c->hq * c->dv + 1) * sizeof(float));
    out->lse = malloc(dp->lse_bytes + 4);
    out->topk = malloc(dp->topk_bytes + 4);
    assert_true(out->o_img && out->o && out->lse && out->topk);
    download_strided(out->o, out->o_img, dp->o, p->T, c->hq, c->dv, p->o_ts, p->o_hs, c->dtype);
    fsa_test_d2h(out->lse, dp->lse, dp->lse_bytes);
    fsa_test_d2h(out->topk, dp->topk, dp->topk_bytes);
}

static void outputs_free_cmp(cmp_outputs *o)
{
    free(o->o_img);
    free(o->o);
    free(o->lse);
    free(o->topk);
}

static void check_attention(const cmp_outputs *out, const cmp_problem *p, const cmp_case *c)
{
    const double tol = c->dtype == FSA_DTYPE_BF16 ? 1e-2 : 4e-3;
    const double err = fsa_rel_error(out->o, p->o_ref, (size_t)p->T * c->hq * c->dv);
    /* Row by row too: one norm over the tensor lets a wrong row with a small output (a long context) pass. */
    size_t row;
    const double row_err = fsa_row_rel_error(out->o, p->o_ref, (size_t)p->T * c->hq, c->dv, 0.1, &row);
    print_message("  %-26s T %5d Tc %4d  o rel err %.3e (tol %.0e), worst row %.3e (t %zu qh %zu, tol %.0e)", c->name,
                  p->T, p->Tc, err, tol, row_err, row / c->hq, row % c->hq, 3 * tol);
    assert_true(err < tol);
    assert_true(row_err < 3 * tol);
    double worst = 0.0;
    for (int qh = 0; qh < c->hq; qh++)
        for (int t = 0; t < p->T; t++) {
            const double r = p->lse_ref[(size_t)qh * p->T + t], g = out->lse[(size_t)qh * p->T + t];
            if (isinf(r)) {
                /* Nothing visible: lse -inf and o exactly 0. */
                assert_true(isinf(g) && g < 0);
                for (int e = 0; e < c->dv; e++) assert_int_equal(out->o_img[t * p->o_ts + qh * p->o_hs + e], 0);
                continue;
            }
            assert_true(isfinite(g));
            worst = fmax(worst, fabs(g - r) / (2e-3 + 1e-5 * fabs(r)));
        }
    print_message(", lse err/tol %.3f", worst);
    assert_true(worst < 1.0);
    /* The padding of a strided output (columns past Dv, gaps between heads and tokens) is never written. */
    if (c->strided)
        fsa_test_assert_padding_untouched(out->o_img, (size_t)p->T * p->o_ts, p->T, c->hq, c->dv, p->o_ts, p->o_hs,
                                          0xffff, "o");
}

/* Every row a correct selection for the reference scores (scores closer than
 * the tolerance may swap); with exact ties (q = 0) the very rows of the
 * reference; and at least 95% of the rows the very rows of the reference
 * anyway, since only near ties may swap (a systematic error within the
 * tolerance would change many rows). The tolerance is relative: the scores
 * sum probabilities the kernel rounds to fp16 (2^-11 of each, all positive,
 * so 2^-11 of a score and 2^-10 of the gap between two; taken twice), plus
 * what fp16 flushes of probabilities under 2^-24 (2^-25 each, of G x the
 * compressed tokens a block overlaps), which a long context's small scores
 * are made of. */
static void check_selection(const cmp_outputs *out, const cmp_problem *p, const cmp_case *c)
{
    double *scores = malloc(((size_t)p->T / c->bk + 2) * sizeof *scores);
    int32_t *want = malloc((size_t)c->k * sizeof *want);
    assert_true(scores && want);
    const double tol_rel = 0x1p-9, tol = 0x1p-24 * p->G * ((c->bk + c->l) / c->d + 1);
    double worst_swap = 0.0;
    long rows = 0, same = 0;
    char why[200];
    for (int h = 0; h < c->hkv; h++)
        for (int t = 0; t < p->T; t++) {
            const int32_t *row = out->topk + h * p->topk_hs + t * p->topk_ts;
            const int n = fsa_ref_cmp_block_scores(&p->ref, c->bk, h, t, scores);
            fsa_ref_select_row(want, scores, n, c->k, c->init, c->local);
            const int exact = memcmp(row, want, (size_t)c->k * sizeof *row) == 0;
            rows++;
            same += exact;
            if (c->zero_q && !exact) fail_msg("%s h %d t %d: rows differ under exact ties", c->name, h, t);
            double swap;
            if (!fsa_ref_selection_ok(row, scores, n, c->k, c->init, c->local, tol, tol_rel, &swap, why, sizeof why))
                fail_msg("%s h %d t %d: %s", c->name, h, t, why);
            worst_swap = fmax(worst_swap, swap);
        }
    const double same_frac = rows > 0 ? (double)same / (double)rows : 1.0;
    print_message(", top-k rows equal to the reference %ld/%ld (%.4f, at least 0.95), worst swap %.1e of a score "
                  "(tol %.1e + %.1e)\n", same, rows, same_frac, worst_swap, tol_rel, tol);
    free(scores);
    free(want);
    assert_true(same_frac >= 0.95);
}

/* Forward and selection against the reference, and the same bits twice. inputs seeds the inputs (a fixed
 * case's place in the table, a random case's seed). */
static void run_case(const cmp_case *c, fsa_compressed_plan *plan, uint64_t inputs)
{
    cmp_problem p;
    cmp_problem_make(&p, c, 0xc0de0000u + inputs);
    device_cmp dp;
    device_make_cmp(&dp, &p, c);
    const fsa_compressed_fwd_args a = args_of(&dp, &p, c);

    poison(&dp);
    if (fsa_compressed_attention_fwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    cmp_outputs first;
    download(&first, &dp, &p, c);
    check_attention(&first, &p, c);
    if (c->k > 0) check_selection(&first, &p, c);
    else print_message(", no selection\n");

    /* Same inputs, same bits. */
    poison(&dp);
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    cmp_outputs second;
    download(&second, &dp, &p, c);
    assert_memory_equal(first.o_img, second.o_img, dp.o_bytes);
    assert_memory_equal(first.lse, second.lse, dp.lse_bytes);
    assert_memory_equal(first.topk, second.topk, dp.topk_bytes);

    outputs_free_cmp(&first);
    outputs_free_cmp(&second);
    device_free_cmp(&dp);
    cmp_problem_free(&p);
}

/* The three gradients' shapes: rows (tokens), heads and head dims; device strides. */
typedef struct grad_shapes {
    int rows[3], heads[3], dims[3];
    int64_t ts[3], hs[3];
} grad_shapes;

static grad_shapes grad_shapes_of(const cmp_problem *p, const cmp_case *c)
{
    return (grad_shapes){{p->T, p->Tc, p->Tc}, {c->hq, c->hkv, c->hkv}, {c->dk, c->dk, c->dv},
                         {p->q_ts, p->k_ts, p->v_ts}, {p->q_hs, p->k_hs, p->v_hs}};
}

/* The worst (token, head) row of the first n gradients against the reference, each under tol: one norm
 * over a tensor lets a wrong row with small values (a long context) pass, its own norm does not. With the
 * reference's term norms (reference_terms.h), each row over the largest of its norm, its terms' and 0.1 x
 * the median row (a big logit's rows neither set the others' floor nor fail on their rounding); without
 * (dq plus an addend), over its norm and 0.1 x the rms row. */
static void check_gradient_rows(const cmp_case *c, const char *what, const grad_shapes *s, float *const *got,
                                double *const *want, const fsa_ref_grad_terms *terms, int n, double tol)
{
    static const char *const names[3] = {"dq", "dk", "dv"};
    double worst[3];
    print_message("  %-26s %-8s worst row", c->name, what);
    for (int i = 0; i < n; i++) {
        size_t r;
        const size_t rows = (size_t)s->rows[i] * s->heads[i];
        const double *term = fsa_ref_grad_terms_of(terms, i);
        worst[i] = term ? fsa_row_rel_error_terms(got[i], want[i], term, rows, s->dims[i], 0.1, 0.0, &r)
                        : fsa_row_rel_error(got[i], want[i], rows, s->dims[i], 0.1, &r);
        print_message(" %s %.3e (t %zu h %zu)", names[i], worst[i], r / s->heads[i], r % s->heads[i]);
    }
    print_message(" (tol %.0e)\n", tol);
    for (int i = 0; i < n; i++) assert_true(worst[i] < tol);
}

/* dq of a query that sees no compressed token (a position before the kernel's end, a sequence shorter
 * than the kernel) is exactly 0, and so are dk and dv of a compressed token no query sees: anything else
 * is a row that reached a token it must not see, or one left unwritten (the poison is NaN). Either sign
 * of 0 passes. */
static void check_unseen_gradients_are_zero(const cmp_case *c, const char *what, const cmp_problem *p,
                                            float *const *got)
{
    long rows = 0, tokens = 0;
    for (int t = 0; t < p->T; t++)
        for (int qh = 0; qh < c->hq; qh++) {
            if (!isinf(p->lse_ref[(size_t)qh * p->T + t])) continue;
            rows++;
            const float *dq = got[0] + ((size_t)t * c->hq + qh) * c->dk;
            for (int e = 0; e < c->dk; e++)
                if (dq[e] != 0.0f)
                    fail_msg("%s %s: dq of t %d qh %d, which sees nothing, holds %g", c->name, what, t, qh, dq[e]);
        }
    for (int j = 0; j < p->Tc; j++) {
        if (fsa_ref_cmp_token_seen(&p->ref, j)) continue;
        tokens++;
        for (int h = 0; h < c->hkv; h++) {
            const size_t r = (size_t)j * c->hkv + h;
            const float *dk = got[1] + r * c->dk, *dv = got[2] + r * c->dv;
            for (int e = 0; e < c->dk; e++)
                if (dk[e] != 0.0f) fail_msg("%s %s: dk of unseen token %d h %d holds %g", c->name, what, j, h, dk[e]);
            for (int e = 0; e < c->dv; e++)
                if (dv[e] != 0.0f) fail_msg("%s %s: dv of unseen token %d h %d holds %g", c->name, what, j, h, dv[e]);
        }
    }
    print_message("  %-26s %-8s exactly 0: dq of %ld rows that see nothing, dk and dv of %ld tokens no query sees\n",
                  c->name, what, rows, tokens);
}

/* The padding of strided gradient images (columns past a head's dim, gaps between heads and tokens) keeps
 * the poison: the first n of img. */
static void check_gradient_padding(const cmp_case *c, const grad_shapes *s, uint16_t *const *img, int n)
{
    static const char *const names[3] = {"dq", "dk", "dv"};
    if (!c->strided) return;
    for (int i = 0; i < n; i++)
        fsa_test_assert_padding_untouched(img[i], (size_t)s->rows[i] * s->ts[i], s->rows[i], s->heads[i], s->dims[i],
                                          s->ts[i], s->hs[i], 0xffff, names[i]);
}

/* The gated backward (gate and gate_grad set, a's dout as it is): against
 * the reference gradients for dout times the gates, and rowsum(dout * o) as
 * the gate's gradient. d_out, bytes: the gradients' device images. */
static void check_gated_backward(const cmp_case *c, fsa_compressed_plan *plan, const cmp_problem *p,
                                 const device_cmp *dp, const fsa_compressed_bwd_args *a, const float *dout,
                                 const uint64_t *d_out, const size_t *bytes, uint64_t inputs)
{
    const size_t n_do = (size_t)p->T * c->hq * c->dv;
    const size_t n[3] = {(size_t)p->T * c->hq * c->dk, (size_t)p->Tc * c->hkv * c->dk, (size_t)p->Tc * c->hkv * c->dv};
    const grad_shapes s = grad_shapes_of(p, c);
    gate_rows gr;
    gate_rows_make(&gr, p->T, c->hq, 0x6a7e000u + inputs);
    float *gated = malloc((n_do + 1) * sizeof(float)), *o = malloc((n_do + 1) * sizeof(float));
    assert_true(gated && o);
    gate_rows_scale(&gr, dout, c->dv, gated);
    download_strided(o, NULL, dp->o, p->T, c->hq, c->dv, p->o_ts, p->o_hs, c->dtype);
    fsa_compressed_bwd_args ga = *a;
    ga.gate = gate_rows_view(&gr), ga.gate_grad = gate_rows_grad_view(&gr);
    for (int i = 0; i < 3; i++) fsa_test_dfill(d_out[i], 0xff, bytes[i]);
    gate_rows_poison(&gr);
    if (fsa_compressed_attention_bwd(plan, &ga, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
    fsa_test_sync();
    double *want[3], err[3];
    float *got[3];
    uint16_t *img[3];
    for (int i = 0; i < 3; i++) want[i] = malloc((n[i] + 1) * sizeof(double)), assert_non_null(want[i]);
    fsa_ref_grad_terms terms;
    fsa_ref_grad_terms_alloc(&terms, (size_t)p->T * c->hq, (size_t)p->Tc * c->hkv);
    fsa_ref_cmp_backward_terms(&p->ref, gated, o, want[0], want[1], want[2], &terms); /* the o the call reads */
    for (int i = 0; i < 3; i++) {
        got[i] = malloc((n[i] + 1) * sizeof(float));
        img[i] = malloc(bytes[i]);
        assert_true(got[i] && img[i]);
        download_strided(got[i], img[i], d_out[i], s.rows[i], s.heads[i], s.dims[i], s.ts[i], s.hs[i], c->dtype);
        err[i] = fsa_rel_error(got[i], want[i], n[i]);
    }
    const double tol = c->dtype == FSA_DTYPE_BF16 ? 2e-2 : 6e-3;
    const double err_gate = gate_rows_grad_error(&gr, dout, o, c->dv);
    print_message("  %-26s gated    dq %.3e dk %.3e dv %.3e gate %.3e\n", c->name, err[0], err[1], err[2], err_gate);
    for (int i = 0; i < 3; i++) assert_true(err[i] < tol);
    assert_true(err_gate < 1e-5);
    check_gradient_rows(c, "gated", &s, got, want, &terms, 3, 3 * tol);
    fsa_ref_grad_terms_free(&terms);
    check_unseen_gradients_are_zero(c, "gated", p, got);
    check_gradient_padding(c, &s, img, 3);
    for (int i = 0; i < 3; i++) {
        free(got[i]);
        free(img[i]);
        free(want[i]);
    }

    /* gate_grad without gate: the same gate gradient, and dq, dk, dv bit for bit the ungated call's. */
    uint16_t *plain[3], *alone[3];
    for (int with_grad = 0; with_grad < 2; with_grad++) {
        fsa_compressed_bwd_args aa = *a;
        if (with_grad) aa.gate_grad = gate_rows_grad_view(&gr);
        for (int i = 0; i < 3; i++) fsa_test_dfill(d_out[i], 0xff, bytes[i]);
        gate_rows_poison(&gr);
        if (fsa_compressed_attention_bwd(plan, &aa, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        for (int i = 0; i < 3; i++) {
            uint16_t **imgs = with_grad ? alone : plain;
            imgs[i] = malloc(bytes[i]);
            assert_non_null(imgs[i]);
            fsa_test_d2h(imgs[i], d_out[i], bytes[i]);
        }
    }
    const double err_alone = gate_rows_grad_error(&gr, dout, o, c->dv);
    print_message("  %-26s gate gradient without a gate %.3e\n", c->name, err_alone);
    assert_true(err_alone < 1e-5);
    for (int i = 0; i < 3; i++) {
        assert_memory_equal(plain[i], alone[i], bytes[i]);
        free(plain[i]);
        free(alone[i]);
    }
    free(gated);
    free(o);
    gate_rows_free(&gr);
}

/* The backward from the GPU forward's o and lse, against the reference
 * gradients; poisoned outputs and workspace; the same bits twice; dq_add;
 * gated. inputs seeds the inputs, as run_case's. */
static void run_backward(const cmp_case *c, fsa_compressed_plan *plan, uint64_t inputs)
{
    cmp_problem p;
    cmp_problem_make(&p, c, 0xbac0000u + inputs);
    device_cmp dp;
    device_make_cmp(&dp, &p, c);
    fsa_compressed_fwd_args fa = args_of(&dp, &p, c);
    fa.topk.ptr = 0;
    poison(&dp);
    assert_int_equal(fsa_compressed_attention_fwd(plan, &fa, NULL), FSA_STATUS_OK);

    const size_t n_do = (size_t)p.T * c->hq * c->dv, nq = (size_t)p.T * c->hq * c->dk;
    const size_t nk = (size_t)p.Tc * c->hkv * c->dk, nv = (size_t)p.Tc * c->hkv * c->dv;
    float *dout = malloc((n_do + 1) * sizeof *dout), *got[3];
    double *want[3];
    const size_t n[3] = {nq, nk, nv};
    fsa_rng rng = {0xd0u + inputs};
    for (size_t e = 0; e < n_do; e++) dout[e] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    for (int i = 0; i < 3; i++) {
        got[i] = malloc((n[i] + 1) * sizeof(float));
        want[i] = malloc((n[i] + 1) * sizeof(double));
        assert_true(got[i] && want[i]);
    }
    /* The reference given the o the call reads (the forward's, rounded): the contract's gradients. */
    float *o_read = malloc((n_do + 1) * sizeof *o_read);
    assert_non_null(o_read);
    download_strided(o_read, NULL, dp.o, p.T, c->hq, c->dv, p.o_ts, p.o_hs, c->dtype);
    fsa_ref_grad_terms terms;
    fsa_ref_grad_terms_alloc(&terms, (size_t)p.T * c->hq, (size_t)p.Tc * c->hkv);
    fsa_ref_cmp_backward_terms(&p.ref, dout, o_read, want[0], want[1], want[2], &terms);
    free(o_read);

    const uint64_t d_dout = upload_strided(dout, p.T, c->hq, c->dv, p.o_ts, p.o_hs, c->dtype);
    const size_t bytes[3] = {(size_t)p.T * p.q_ts * 2 + 2, (size_t)p.Tc * p.k_ts * 2 + 2, (size_t)p.Tc * p.v_ts * 2 + 2};
    uint64_t d_out[3];
    for (int i = 0; i < 3; i++) d_out[i] = fsa_test_dalloc(bytes[i]);
    size_t ws_bytes = 0;
    assert_int_equal(fsa_compressed_plan_workspace_size_bwd(&ws_bytes, plan, p.T, p.B), FSA_STATUS_OK);
    const uint64_t ws = fsa_test_dalloc(ws_bytes + 256);

    fsa_compressed_bwd_args a = FSA_COMPRESSED_BWD_ARGS_INIT;
    a.total_tokens = p.T;
    a.total_compressed = p.Tc;
    a.batch = p.B;
    a.q = fa.q, a.k = fa.k, a.v = fa.v, a.o = fa.o;
    a.dout = (fsa_tensor){d_dout, p.o_ts, p.o_hs};
    a.dq = (fsa_tensor){d_out[0], p.q_ts, p.q_hs};
    a.dk = (fsa_tensor){d_out[1], p.k_ts, p.k_hs};
    a.dv = (fsa_tensor){d_out[2], p.v_ts, p.v_hs};
    a.lse = dp.lse, a.cu_seqlens = dp.cu, a.cu_seqlens_c = dp.cu_c;
    a.workspace = ws, a.workspace_bytes = ws_bytes;

    const grad_shapes s = grad_shapes_of(&p, c);
    const double tol = c->dtype == FSA_DTYPE_BF16 ? 2e-2 : 6e-3;
    uint16_t *first[3];
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 3; i++) fsa_test_dfill(d_out[i], 0xff, bytes[i]);
        fsa_test_dfill(ws, 0xff, ws_bytes);
        if (fsa_compressed_attention_bwd(plan, &a, NULL) != FSA_STATUS_OK) fail_msg("%s: %s", c->name, fsa_last_error());
        fsa_test_sync();
        for (int i = 0; i < 3; i++) {
            uint16_t *img = malloc(bytes[i]);
            assert_non_null(img);
            download_strided(got[i], img, d_out[i], s.rows[i], s.heads[i], s.dims[i], s.ts[i], s.hs[i], c->dtype);
            if (run == 0) first[i] = img;
            else {
                assert_memory_equal(first[i], img, bytes[i] - 2); /* same inputs, same bits */
                free(img);
                free(first[i]);
            }
        }
        if (run > 0) continue;
        double err[3];
        for (int i = 0; i < 3; i++) err[i] = fsa_rel_error(got[i], want[i], n[i]);
        print_message("  %-26s backward dq %.3e dk %.3e dv %.3e (tol %.0e)\n", c->name, err[0], err[1], err[2], tol);
        for (int i = 0; i < 3; i++) assert_true(err[i] < tol);
        check_gradient_rows(c, "backward", &s, got, want, &terms, 3, 3 * tol);
        check_unseen_gradients_are_zero(c, "backward", &p, got);
        check_gradient_padding(c, &s, first, 3); /* the second run's bits are the first's */
    }

    /* dq_add, added before the rounding: first dq itself (in place, holding the dq just computed), then a
     * random addend in memory apart with strides of its own (head-major), whose values no dq of the call could
     * stand in for: dq becomes the reference's plus the addend (one rounding); dk and dv keep their bits. */
    {
        uint16_t *kv_before[2], *img = malloc(bytes[0]);
        double *dq_sum = malloc((nq + 1) * sizeof(double));
        float *first_dq = malloc((nq + 1) * sizeof(float)), *addend = malloc((nq + 1) * sizeof(float));
        assert_true(img && dq_sum && first_dq && addend);
        memcpy(first_dq, got[0], nq * sizeof(float));
        double dq_ms = 0.0; /* the addend at dq's size, so that an error in dq is not lost in a larger sum */
        for (size_t e = 0; e < nq; e++) dq_ms += want[0][e] * want[0][e] / (double)nq;
        for (size_t e = 0; e < nq; e++) addend[e] = attn_round_to(c->dtype, (float)(fsa_rng_normal(&rng) * sqrt(dq_ms)));
        const uint64_t addend_dev = upload_strided(addend, p.T, c->hq, c->dk, c->dk, (int64_t)p.T * c->dk, c->dtype);
        for (int i = 0; i < 2; i++) {
            kv_before[i] = malloc(bytes[i + 1]);
            assert_non_null(kv_before[i]);
            fsa_test_d2h(kv_before[i], d_out[i + 1], bytes[i + 1]);
        }
        for (int apart = 0; apart < 2; apart++) {
            const float *add = apart ? addend : first_dq;
            for (size_t e = 0; e < nq; e++) dq_sum[e] = want[0][e] + (double)add[e];
            fsa_compressed_bwd_args acc = a;
            acc.dq_add = apart ? (fsa_tensor){addend_dev, c->dk, (int64_t)p.T * c->dk} : a.dq;
            for (int i = apart ? 0 : 1; i < 3; i++) /* the bits compared below: this call's (dq apart: none read) */
                fsa_test_dfill(d_out[i], 0xff, bytes[i]);
            fsa_test_dfill(ws, 0xff, ws_bytes);
            if (fsa_compressed_attention_bwd(plan, &acc, NULL) != FSA_STATUS_OK)
                fail_msg("%s: %s", c->name, fsa_last_error());
            fsa_test_sync();
            download_strided(got[0], img, d_out[0], p.T, c->hq, c->dk, p.q_ts, p.q_hs, c->dtype);
            const double e_add = fsa_rel_error(got[0], dq_sum, nq);
            print_message("  %-26s dq_add   dq %.3e (tol %.0e) (%s)\n", c->name, e_add, tol, apart ? "apart" : "in place");
            assert_true(e_add < tol);
            check_gradient_rows(c, "dq_add", &s, got, &dq_sum, NULL, 1, 3 * tol);
            check_gradient_padding(c, &s, &img, 1);
            for (int i = 0; i < 2; i++) {
                uint16_t *after = malloc(bytes[i + 1]);
                assert_non_null(after);
                fsa_test_d2h(after, d_out[i + 1], bytes[i + 1]);
                assert_memory_equal(kv_before[i], after, bytes[i + 1]);
                free(after);
            }
        }
        for (int i = 0; i < 2; i++) free(kv_before[i]);
        fsa_test_dfree(addend_dev);
        free(addend);
        free(first_dq);
        free(img);
        free(dq_sum);
    }
    check_gated_backward(c, plan, &p, &dp, &a, dout, d_out, bytes, inputs);
    for (int i = 0; i < 3; i++) {
        fsa_test_dfree(d_out[i]);
        free(got[i]);
        free(want[i]);
    }
    fsa_test_dfree(ws);
    fsa_test_dfree(d_dout);
    free(dout);
    fsa_ref_grad_terms_free(&terms);
    device_free_cmp(&dp);
    cmp_problem_free(&p);
}

static void test_the_backward_matches_the_reference_gradients_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++)
        if (runs_here(i)) run_backward(&cases[i], g_plans[i], i);
}

#define RANDOM_SEED_DEFAULT 0xc0de5eedull
#define RANDOM_BATCH 8 /* plans compiled in parallel, then run */

typedef struct random_job {
    cmp_case c;
    char name[RANDOM_NAME_MAX], line[RANDOM_NAME_MAX + 128];
    uint64_t seed;
    fsa_compressed_plan *plan;
    char error[512];
} random_job;

static void *random_plan_worker(void *arg)
{
    random_job *job = arg;
    fsa_compressed_attention_desc d = cmp_desc_of(&job->c);
    d.backward = 1;
    if (fsa_compressed_plan_create(&job->plan, g_ctx, &d) != FSA_STATUS_OK)
        snprintf(job->error, sizeof job->error, "%s", fsa_last_error()); /* the error record is per thread */
    return NULL;
}

/* Cases drawn over everything a plan takes (random_case), through the fixed cases' forward, selection and
 * backward checks. Case i's seed (fsa_test_random_case_seed) draws the case and seeds its inputs. */
static void test_random_cases_match_the_reference(void **state)
{
    (void)state;
    const uint64_t count = (uint64_t)fsa_test_random_count(getenv("FSA_TEST_CASES") != NULL ? 0 : -1);
    const uint64_t base = fsa_test_random_seed(RANDOM_SEED_DEFAULT);
    print_message("  %llu random cases, FSA_TEST_SEED=0x%llx\n", (unsigned long long)count, (unsigned long long)base);
    random_job *jobs = calloc(RANDOM_BATCH, sizeof *jobs);
    assert_non_null(jobs);
    for (uint64_t first = 0; first < count; first += RANDOM_BATCH) {
        const int n = count - first < RANDOM_BATCH ? (int)(count - first) : RANDOM_BATCH;
        pthread_t th[RANDOM_BATCH];
        for (int i = 0; i < n; i++) {
            random_job *job = &jobs[i];
            memset(job, 0, sizeof *job);
            const int index = (int)(first + (uint64_t)i);
            job->seed = fsa_test_random_case_seed(base, index);
            fsa_rng rng = {job->seed};
            random_case(&rng, &job->c, job->name, sizeof job->name);
            snprintf(job->line, sizeof job->line,
                     "random case %d (FSA_TEST_SEED=0x%llx; alone: FSA_TEST_SEED=0x%llx FSA_TEST_RANDOM=1; case seed "
                     "0x%016llx): %s",
                     index, (unsigned long long)base, (unsigned long long)fsa_test_random_rerun_seed(base, index),
                     (unsigned long long)job->seed, job->name);
            print_message("  %s\n", job->line);
            assert_int_equal(pthread_create(&th[i], NULL, random_plan_worker, job), 0);
        }
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < n; i++)
            if (jobs[i].plan == NULL) {
                for (int j = 0; j < n; j++) fsa_compressed_plan_destroy(jobs[j].plan);
                fail_msg("%s: the plan was refused: %s", jobs[i].line, jobs[i].error);
            }
        for (int i = 0; i < n; i++) {
            print_message("  running random case %llu\n", (unsigned long long)(first + (uint64_t)i));
            run_case(&jobs[i].c, jobs[i].plan, jobs[i].seed);
            run_backward(&jobs[i].c, jobs[i].plan, jobs[i].seed);
            fsa_compressed_plan_destroy(jobs[i].plan);
            jobs[i].plan = NULL;
        }
    }
    free(jobs);
}

/* A cu_seqlens_c that gives each sequence compressed tokens past those its length makes hides them from
 * every query, and the backward gives such a token dk = dv = 0 (docs/semantics.md). With lengths valid
 * for the plan no token is unseen (the last query sees them all), so only such offsets reach that path:
 * the sequence shorter than the kernel gets a key tile that no query sees at all. */
static void test_compressed_tokens_that_no_query_sees_get_zero_key_and_value_gradients(void **state)
{
    (void)state;
    cmp_case c = cases[0];
    c.name = "bf16_std_g4_hidden";
    c.hidden = 2;
    cmp_problem p;
    cmp_problem_make(&p, &c, 0);
    int unseen = 0;
    for (int j = 0; j < p.Tc; j++) unseen += !fsa_ref_cmp_token_seen(&p.ref, j);
    cmp_problem_free(&p);
    assert_int_equal(unseen, c.hidden * c.nseq);
    run_backward(&c, g_plans[0], N_CASES); /* the inputs it always had: a copy's place was past the table */
    /* The smaller backward layouts too: a key tile that no query tile sees writes its sums over the K/V
     * its one-stage ring was still copying (the ring must have waited for them). */
    static const char *layouts[] = {"1", "2"};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        if (!fsa_test_layout_listed(layouts[l])) continue;
        fsa_test_small_layouts env;
        fsa_test_small_layouts_begin(&env, NULL, layouts[l]);
        fsa_compressed_attention_desc d = cmp_desc_of(&c);
        d.backward = 1;
        fsa_compressed_plan *plan = NULL;
        const fsa_status st = fsa_compressed_plan_create(&plan, g_ctx, &d);
        fsa_test_small_layouts_end(&env);
        if (st != FSA_STATUS_OK) fail_msg("FSA_QT_SMALL_BWD=%s: %s", layouts[l], fsa_last_error());
        print_message("  FSA_QT_SMALL_BWD=%s FSA_WGMMA=0 FSA_WGMMA_BWD=0:\n", layouts[l]);
        run_backward(&c, plan, N_CASES);
        fsa_compressed_plan_destroy(plan);
    }
}

static void test_compressed_attention_and_selection_match_the_reference_on_every_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++)
        if (runs_here(i)) run_case(&cases[i], g_plans[i], i);
}

/* Without a top-k output only the attention runs, and the plan without
 * selection gives the same o and lse. */
static void test_the_forward_without_selection_writes_the_same_attention(void **state)
{
    (void)state;
    const cmp_case *c = &cases[0];
    fsa_compressed_attention_desc d = cmp_desc_of(c);
    d.top_k = 0;
    fsa_compressed_plan *plan = NULL;
    if (fsa_compressed_plan_create(&plan, g_ctx, &d) != FSA_STATUS_OK) fail_msg("%s", fsa_last_error());
    cmp_problem p;
    cmp_problem_make(&p, c, 5);
    device_cmp dp;
    device_make_cmp(&dp, &p, c);
    fsa_compressed_fwd_args a = args_of(&dp, &p, c);
    a.topk.ptr = 0;
    poison(&dp);
    assert_int_equal(fsa_compressed_attention_fwd(plan, &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    cmp_outputs out;
    download(&out, &dp, &p, c);
    check_attention(&out, &p, c);
    print_message("\n");
    for (size_t e = 0; e < dp.topk_bytes / 4; e++) assert_int_equal(out.topk[e], 0x7f7f7f7f);
    /* The selecting plan on the same inputs: the same o and lse, bit for bit. */
    assert_non_null(g_plans[0]);
    poison(&dp);
    fsa_compressed_fwd_args sa = args_of(&dp, &p, c);
    assert_int_equal(fsa_compressed_attention_fwd(g_plans[0], &sa, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    cmp_outputs selecting;
    download(&selecting, &dp, &p, c);
    assert_memory_equal(selecting.o_img, out.o_img, dp.o_bytes);
    assert_memory_equal(selecting.lse, out.lse, dp.lse_bytes);
    print_message("  %s: the selecting plan's o and lse are the same bits\n", c->name);
    outputs_free_cmp(&selecting);
    outputs_free_cmp(&out);
    device_free_cmp(&dp);
    cmp_problem_free(&p);
    fsa_compressed_plan_destroy(plan);
}

static void test_a_graph_captured_forward_replays_to_the_same_outputs(void **state)
{
    (void)state;
    const cmp_case *c = &cases[0];
    cmp_problem p;
    cmp_problem_make(&p, c, 77);
    device_cmp dp;
    device_make_cmp(&dp, &p, c);
    const fsa_compressed_fwd_args a = args_of(&dp, &p, c);
    poison(&dp);
    assert_int_equal(fsa_compressed_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_OK);
    fsa_test_sync();
    cmp_outputs direct;
    download(&direct, &dp, &p, c);

    fsa_test_graph graph;
    fsa_test_capture_begin(&graph);
    assert_int_equal(fsa_compressed_attention_fwd(g_plans[0], &a, graph.stream), FSA_STATUS_OK);
    fsa_test_capture_end(&graph);
    for (int rep = 0; rep < 2; rep++) {
        poison(&dp);
        fsa_test_graph_replay(&graph);
        cmp_outputs replay;
        download(&replay, &dp, &p, c);
        assert_memory_equal(direct.o_img, replay.o_img, dp.o_bytes);
        assert_memory_equal(direct.lse, replay.lse, dp.lse_bytes);
        assert_memory_equal(direct.topk, replay.topk, dp.topk_bytes);
        outputs_free_cmp(&replay);
    }
    fsa_test_graph_free(&graph);
    outputs_free_cmp(&direct);
    device_free_cmp(&dp);
    cmp_problem_free(&p);
}

/* One token with NaN in its q (uninitialized padding, say) leaves every other token's outputs and selection
 * as they were: the selection scores a few tokens in one tensor-core product, where a NaN probability times
 * the 0 of another block or token would be NaN (G 4: four tokens per set). */
static void test_a_token_with_nan_in_its_q_leaves_the_other_tokens_results_as_they_were(void **state)
{
    (void)state;
    const cmp_case *c = &cases[0];
    assert_true(c->hq / c->hkv > 1 && c->hq / c->hkv < 16); /* several tokens per scoring set */
    const int bad = 1100; /* inside the first sequence (1500 tokens), with 18 blocks to choose 16 among */
    cmp_outputs out[2];
    cmp_problem p;
    cmp_problem_make(&p, c, 91);
    for (int run = 0; run < 2; run++) {
        if (run == 1)
            for (int i = 0; i < c->hq * c->dk; i++) p.q[(size_t)bad * c->hq * c->dk + i] = NAN;
        device_cmp dp;
        device_make_cmp(&dp, &p, c);
        const fsa_compressed_fwd_args a = args_of(&dp, &p, c);
        poison(&dp);
        assert_int_equal(fsa_compressed_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_OK);
        fsa_test_sync();
        download(&out[run], &dp, &p, c);
        device_free_cmp(&dp);
    }
    int rows = 0;
    for (int t = 0; t < p.T; t++) {
        if (t == bad) continue;
        for (int h = 0; h < c->hkv; h++)
            for (int s = 0; s < c->k; s++) {
                const size_t at = (size_t)t * p.topk_ts + (size_t)h * p.topk_hs + s;
                if (out[0].topk[at] != out[1].topk[at])
                    fail_msg("token %d, KV head %d, slot %d: block %d, %d with NaN in token %d's q", t, h, s,
                             out[0].topk[at], out[1].topk[at], bad);
            }
        for (int h = 0; h < c->hq; h++) {
            assert_memory_equal(&out[0].lse[(size_t)h * p.T + t], &out[1].lse[(size_t)h * p.T + t], sizeof(float));
            for (int d = 0; d < c->dv; d++) {
                const size_t at = (size_t)t * p.o_ts + (size_t)h * p.o_hs + d;
                assert_int_equal(out[0].o_img[at], out[1].o_img[at]);
            }
        }
        rows++;
    }
    /* The NaN token's own row: any order of its scored blocks (its scores are NaN), but valid blocks, ascending,
     * the forced ones kept, as many as the rule takes (an infinite tolerance checks all but the order). */
    double *scores = malloc(((size_t)p.T / c->bk + 2) * sizeof *scores);
    assert_non_null(scores);
    char why[200];
    for (int h = 0; h < c->hkv; h++) {
        const int n = fsa_ref_cmp_block_scores(&p.ref, c->bk, h, bad, scores);
        assert_true(n > c->k); /* blocks to choose among */
        const int32_t *row = out[1].topk + (size_t)bad * p.topk_ts + (size_t)h * p.topk_hs;
        if (!fsa_ref_selection_ok(row, scores, n, c->k, c->init, c->local, INFINITY, 0.0, NULL, why, sizeof why))
            fail_msg("token %d (NaN q), KV head %d: %s", bad, h, why);
    }
    free(scores);
    print_message("  %-30s NaN q at token %d: %d other tokens' selections and outputs unchanged, its own rows valid\n",
                  c->name, bad, rows);
    outputs_free_cmp(&out[0]);
    outputs_free_cmp(&out[1]);
    cmp_problem_free(&p);
}

/* Offsets that contradict the counts (a sequence claiming more compressed
 * tokens than Tc, query offsets past T, a decreasing pair) are clamped by the
 * kernels: every call completes without a fault (run it under
 * compute-sanitizer to see no access goes out of bounds). */
static void test_malformed_offsets_cannot_make_the_kernels_fault(void **state)
{
    (void)state;
    const cmp_case *c = &cases[0];
    cmp_problem p;
    cmp_problem_make(&p, c, 13);
    device_cmp dp;
    device_make_cmp(&dp, &p, c);
    const int32_t bad_cu[5] = {0, p.T + 50, 7, p.T, p.T + 1000};
    const int32_t bad_cu_c[5] = {0, p.Tc + 100, 3, 2, p.Tc + 7};
    fsa_test_h2d(dp.cu, bad_cu, sizeof bad_cu);
    fsa_test_h2d(dp.cu_c, bad_cu_c, sizeof bad_cu_c);
    const fsa_compressed_fwd_args a = args_of(&dp, &p, c);
    poison(&dp);
    assert_int_equal(fsa_compressed_attention_fwd(g_plans[0], &a, NULL), FSA_STATUS_OK);
    fsa_test_sync(); /* fails the test on a fault */
    cmp_outputs out;
    download(&out, &dp, &p, c);
    /* Rows a malformed batch leaves to no tile keep the poison; the others name real blocks or -1. */
    for (size_t e = 0; e < dp.topk_bytes / 4; e++)
        assert_true(out.topk[e] == 0x7f7f7f7f || (out.topk[e] >= -1 && out.topk[e] <= p.T / c->bk));
    outputs_free_cmp(&out);
    device_free_cmp(&dp);
    cmp_problem_free(&p);
}

/* The mma.sync forward in the smaller layouts that 99 KB targets (sm_86, sm_89, sm_12x) take
 * (fsa_qt_fwd_layout_fit): FSA_QT_SMALL_FWD forces them and FSA_WGMMA=0 keeps sm_90a on the mma.sync
 * forward, both read at plan creation, so any GPU runs them: 1, one set of rows per warp and stages of 32
 * keys; 2, the set alone (what those targets take at 128 / 128). A few fixed cases, through the same
 * reference checks: the standard shape, many stages (the ring refilled), NSA's 192 / 128, odd dims,
 * ties. Forward-only plans (the backward is not part of these layouts). */
static void test_the_small_forward_layouts_match_the_reference(void **state)
{
    (void)state;
    static const char *names[] = {"bf16_std_g4_varlen", "bf16_std_g4_many_stages", "bf16_dk192_dv128_g16",
                                  "f16_dk64_dv32_g3", "bf16_g2_exact_ties"};
    static const char *layouts[] = {"1", "2"};
    static const int forced[] = {FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32, FSA_QT_FWD_ONE_SET};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
            const size_t i = case_named(names[n]);
            if (!runs(&cases[i]) || !fsa_test_layout_listed(layouts[l])) continue;
            fsa_test_small_layouts env;
            fsa_test_small_layouts_begin(&env, layouts[l], NULL);
            fsa_compressed_attention_desc d = cmp_desc_of(&cases[i]);
            fsa_compressed_plan *plan = NULL;
            const fsa_status st = fsa_compressed_plan_create(&plan, g_ctx, &d);
            fsa_test_small_layouts_end(&env);
            if (st != FSA_STATUS_OK)
                fail_msg("%s, FSA_QT_SMALL_FWD=%s: %s", cases[i].name, layouts[l], fsa_last_error());
            /* The plan compiled the layout's own kernel (named by its QT_FWD), not the default one; where the
             * forced bits change nothing at this shape (2 at Dk 192: one set of rows already) it is the
             * default, as it must be. */
            const int layout = fsa_cmp_fwd_layout(cases[i].dk, cases[i].dv, 0, fsa_test_max_smem(g_ctx),
                                                  forced[l]);
            fsa_test_expect_layout_kernel(g_ctx, "cmp_fwd_", "qf", layout);
            print_message("  FSA_QT_SMALL_FWD=%s FSA_WGMMA=0 (layout %d):\n", layouts[l], layout);
            run_case(&cases[i], plan, i);
            fsa_compressed_plan_destroy(plan);
        }
}

/* The mma.sync backward in the smaller layouts that 99 KB targets (sm_86, sm_89, sm_12x) and sm_80's widest
 * head dims take (fsa_qt_bwd_layout_fit): FSA_QT_SMALL_BWD forces them, FSA_WGMMA=0 and FSA_WGMMA_BWD=0 keep
 * sm_90a on the mma.sync kernels, all read at plan creation, so any GPU runs them: 1, the smallest (dK/dV
 * in one stage of 32 query rows, its sums handed over dK's then dV's; dq in one stage of 32 keys); 2, dK/dV
 * in one stage and dq in stages of 32 keys (what 128 / 128 takes on 99 KB targets), each with the forward
 * override of the same number (what those targets pair them with). A few fixed cases through the same
 * reference checks as the default backward: the standard shape, long walks (many query tiles per key
 * tile), NSA's 192 / 128, 256 / 256 (two parts), 256 / 64, odd dims, ties. */
static void test_the_small_backward_layouts_match_the_reference(void **state)
{
    (void)state;
    static const char *names[] = {"bf16_std_g4_varlen",   "bf16_std_g4_many_stages",
                                  "bf16_dk192_dv128_g16", "bf16_dk192_dv128_g16_many_stages",
                                  "bf16_d256_g1",         "bf16_dk256_dv64_g4_one_pass",
                                  "f16_dk64_dv32_g3",     "bf16_g2_exact_ties"};
    static const char *layouts[] = {"1", "2"};
    static const int forced_fwd[] = {FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32, FSA_QT_FWD_ONE_SET};
    static const int forced_bwd[] = {FSA_QT_BWD_DKV_BITS | FSA_QT_BWD_DQ_BITS,
                                     FSA_QT_BWD_DKV_ONE_STAGE | FSA_QT_BWD_DQ_KEYS_32};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
            const size_t i = case_named(names[n]);
            if (!runs(&cases[i]) || !fsa_test_layout_listed(layouts[l])) continue;
            fsa_test_small_layouts env;
            fsa_test_small_layouts_begin(&env, layouts[l], layouts[l]);
            fsa_compressed_attention_desc d = cmp_desc_of(&cases[i]);
            d.backward = 1;
            fsa_compressed_plan *plan = NULL;
            const fsa_status st = fsa_compressed_plan_create(&plan, g_ctx, &d);
            fsa_test_small_layouts_end(&env);
            if (st != FSA_STATUS_OK && fsa_test_refused_for_shared_memory(g_ctx, st, fsa_last_error())) {
                print_message("  %s: refused on this GPU's shared memory: %s\n", cases[i].name, fsa_last_error());
                continue;
            }
            if (st != FSA_STATUS_OK)
                fail_msg("%s, FSA_QT_SMALL_BWD=%s: %s", cases[i].name, layouts[l], fsa_last_error());
            /* The plan compiled the layouts' own kernels (named by QT_FWD and QT_BWD). */
            const int max = fsa_test_max_smem(g_ctx);
            fsa_test_expect_layout_kernel(g_ctx, "cmp_fwd_", "qf",
                                          fsa_cmp_fwd_layout(cases[i].dk, cases[i].dv, 0, max, forced_fwd[l]));
            fsa_test_expect_layout_kernel(g_ctx, "cmp_bwd_", "qb",
                                          fsa_qt_bwd_layout(cases[i].dk, cases[i].dv, 0, max, forced_bwd[l]));
            print_message("  FSA_QT_SMALL_BWD=%s FSA_QT_SMALL_FWD=%s FSA_WGMMA=0 FSA_WGMMA_BWD=0:\n", layouts[l],
                          layouts[l]);
            run_backward(&cases[i], plan, i);
            fsa_compressed_plan_destroy(plan);
        }
}

/* Plans compile in parallel threads before the tests run. */
static void *plan_worker(void *arg)
{
    const size_t first = (size_t)(uintptr_t)arg;
    for (size_t i = first; i < N_CASES; i += 8) {
        if (!runs(&cases[i]) && i != 0) continue;
        fsa_compressed_attention_desc d = cmp_desc_of(&cases[i]);
        d.backward = 1;
        const fsa_status st = fsa_compressed_plan_create(&g_plans[i], g_ctx, &d);
        if (st != FSA_STATUS_OK) {
            g_refused[i] = i != 0 && fsa_test_refused_for_shared_memory(g_ctx, st, fsa_last_error());
            fprintf(stderr, "plan %s: %s%s\n", cases[i].name, fsa_last_error(),
                    g_refused[i] ? " (this GPU's shared memory: the case is not run here)" : "");
        }
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    g_quick = fsa_test_quick();
    g_cache_dir = fsa_test_mkdtemp("cmp-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    pthread_t th[8];
    for (uintptr_t i = 0; i < 8; i++) pthread_create(&th[i], NULL, plan_worker, (void *)i);
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    for (size_t i = 0; i < N_CASES; i++)
        if ((runs(&cases[i]) || i == 0) && g_plans[i] == NULL && !g_refused[i]) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) fsa_compressed_plan_destroy(g_plans[i]);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compressed_attention_and_selection_match_the_reference_on_every_case),
        cmocka_unit_test(test_the_forward_without_selection_writes_the_same_attention),
        cmocka_unit_test(test_the_small_forward_layouts_match_the_reference),
        cmocka_unit_test(test_the_backward_matches_the_reference_gradients_on_every_case),
        cmocka_unit_test(test_the_small_backward_layouts_match_the_reference),
        cmocka_unit_test(test_compressed_tokens_that_no_query_sees_get_zero_key_and_value_gradients),
        cmocka_unit_test(test_random_cases_match_the_reference),
        cmocka_unit_test(test_a_graph_captured_forward_replays_to_the_same_outputs),
        cmocka_unit_test(test_a_token_with_nan_in_its_q_leaves_the_other_tokens_results_as_they_were),
        cmocka_unit_test(test_malformed_offsets_cannot_make_the_kernels_fault),
    };
    /* FSA_TEST_FILTER=pattern (* and ? wildcards) runs only the matching tests, e.g. the forward's
     * under compute-sanitizer. Skips (exit 77) inside setup when there is no GPU. */
    fsa_test_random_count(-1); /* a malformed FSA_TEST_RANDOM or FSA_TEST_SEED exits here, GPU or not */
    fsa_test_random_seed(RANDOM_SEED_DEFAULT);
    fsa_test_check_case_list(case_name, N_CASES); /* a mistyped FSA_TEST_CASES exits here, GPU or not */
    (void)fsa_test_layout_listed("1");           /* and so does a mistyped FSA_TEST_LAYOUTS */
    if (getenv("FSA_TEST_FILTER")) cmocka_set_test_filter(getenv("FSA_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
