/* The kernel table names and shapes the query-tile kernels (compressed
 * attention, its selection and backward, sliding-window attention and its
 * backward) as their plans launch them: entry point, threads and dynamic
 * shared memory per variant of the template-compile grid, pinned to the
 * numbers the layout headers give, and the launch grid's extents for a fixed
 * problem. A change to any of them changes what the kernels were verified
 * with. The selected attention's kernels fit the targets' shared memory at
 * NSA's head dims (Dk 192, Dv 128) and at Dk = Dv = 256. */
#include "testing.h"

#include "attention/kernels.h"
#include "jit/context.h"
#include "jit/target.h"

#include <string.h>

typedef struct query_tile_shape {
    fsa_dtype dtype;
    int d, dv, g;
    /* swa_fwd: the forward's layout with a set of 16 rows per warp; cmp_fwd:
     * with two up to Dk = Dv = 128; the backward kernels share theirs */
    unsigned fwd_smem, cmp_fwd_smem, dq_smem, dkv_smem;
    int dkv_parts;
} query_tile_shape;

static const query_tile_shape shapes[] = {
    {FSA_DTYPE_BF16, 128, 128, 4, 87040, 104448, 104448, 106496, 1},
    {FSA_DTYPE_BF16, 192, 128, 16, 111616, 111616, 86016, 131072, 1},
    {FSA_DTYPE_F16, 256, 256, 1, 101376, 101376, 135168, 204800, 2},
    {FSA_DTYPE_F16, 64, 32, 3, 37888, 47104, 43008, 45056, 1},
    {FSA_DTYPE_BF16, 16, 192, 7, 31744, 31744, 86016, 88064, 1},
    {FSA_DTYPE_BF16, 16, 256, 7, 39936, 39936, 110592, 112640, 1},
    {FSA_DTYPE_F16, 32, 64, 5, 33792, 38912, 43008, 45056, 1},
};

typedef struct select_shape {
    int d, g, bk, k, l, s;
    unsigned smem;
} select_shape;

static const select_shape selects[] = {
    {128, 4, 64, 16, 32, 16, 69632}, {192, 16, 64, 16, 32, 16, 76800}, {256, 1, 256, 64, 64, 4, 102400},
    {64, 5, 16, 1, 16, 16, 36864},   {32, 2, 32, 33, 32, 32, 24064},
};

static void assert_kernel(fsa_kernel_id id, const fsa_kernel_config *c, const char *name, unsigned smem)
{
    fsa_kernel k;
    memset(&k, 0xff, sizeof k);
    fsa_kernel_describe(&k, id, c);
    assert_null(k.fn);
    assert_string_equal(k.name, name);
    /* The dK/dV kernels run two sets of 4 warps; every other query-tile kernel one. */
    assert_int_equal(k.threads, strstr(name, "_dkv") ? 256 : 128);
    if (k.smem != smem) fail_msg("%s d %d dv %d g %d: %u bytes of shared memory, pinned %u", name, c->head_dim,
                                 c->value_dim, c->group, k.smem, smem);
}

static void test_forward_and_backward_kernels_keep_their_launch_shapes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const query_tile_shape *s = &shapes[i];
        const fsa_kernel_config c = {.dtype = s->dtype, .head_dim = s->d, .value_dim = s->dv, .group = s->g};
        assert_kernel(FSA_K_CMP_FWD, &c, "fsa_cmp_fwd", s->cmp_fwd_smem);
        assert_kernel(FSA_K_SWA_FWD, &c, "fsa_swa_fwd", s->fwd_smem);
        assert_kernel(FSA_K_CMP_BWD_DQ, &c, "fsa_cmp_bwd_dq", s->dq_smem);
        assert_kernel(FSA_K_CMP_BWD_DKV, &c, "fsa_cmp_bwd_dkv", s->dkv_smem);
        assert_kernel(FSA_K_SWA_BWD_DQ, &c, "fsa_swa_bwd_dq", s->dq_smem);
        assert_kernel(FSA_K_SWA_BWD_DKV, &c, "fsa_swa_bwd_dkv", s->dkv_smem);
        /* The dk/dv kernel's grid z: parts of Dk + Dv. */
        assert_int_equal(fsa_qt_dkv_parts(s->d, s->dv), s->dkv_parts);
    }
}

/* The forwards' smaller layouts (FSA_QT_FWD_*: the 99 KB targets, FSA_QT_SMALL_FWD): one set of rows per
 * warp halves the compressed forward's query rows, stages of 32 keys halve the K/V stages; the threads stay. */
static void test_the_small_forward_layouts_keep_their_launch_shapes(void **state)
{
    (void)state;
    static const struct {
        int d, dv, layout;
        unsigned cmp_smem, swa_smem;
    } small[] = {
        {128, 128, FSA_QT_FWD_ONE_SET, 87040, 87040},
        {128, 128, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32, 52224, 52224},
        {192, 128, FSA_QT_FWD_KEYS_32, 68608, 68608},
        {64, 32, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32, 23552, 23552},
    };
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = small[i].d, .value_dim = small[i].dv,
                                     .group = 4, .qt_fwd = small[i].layout};
        assert_kernel(FSA_K_CMP_FWD, &c, "fsa_cmp_fwd", small[i].cmp_smem);
        /* (the window forward ignores the row-set bit: it has one set per warp anyway) */
        assert_kernel(FSA_K_SWA_FWD, &c, "fsa_swa_fwd", small[i].swa_smem);
    }
}

/* The backwards' smaller layouts (FSA_QT_BWD_*: the 99 KB targets, sm_80's widest dims, FSA_QT_SMALL_BWD):
 * the same kernels and threads, less shared memory. */
static void test_the_small_backward_layouts_keep_their_launch_shapes(void **state)
{
    (void)state;
    const int one = FSA_QT_BWD_DKV_ONE_STAGE, rows = FSA_QT_BWD_DKV_ROWS_32;
    const int keys = FSA_QT_BWD_DQ_KEYS_32, dq_one = FSA_QT_BWD_DQ_ONE_STAGE;
    const struct {
        int d, dv, layout;
        unsigned dq_smem, dkv_smem;
    } small[] = {
        {128, 128, 0, 104448, 106496},
        {128, 128, one | keys, 69632, 70656},
        {128, 128, one | rows | keys | dq_one, 52224, 52736},
        {192, 128, one, 86016, 87040},
        {256, 128, one | rows | dq_one, 76800, 77312},
        {192, 192, one | rows | dq_one, 76800, 77312},
        {256, 256, one, 135168, 136192},
    };
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = small[i].d, .value_dim = small[i].dv,
                                     .group = 4, .qt_bwd = small[i].layout};
        assert_kernel(FSA_K_CMP_BWD_DQ, &c, "fsa_cmp_bwd_dq", small[i].dq_smem);
        assert_kernel(FSA_K_CMP_BWD_DKV, &c, "fsa_cmp_bwd_dkv", small[i].dkv_smem);
        assert_kernel(FSA_K_SWA_BWD_DQ, &c, "fsa_swa_bwd_dq", small[i].dq_smem);
        assert_kernel(FSA_K_SWA_BWD_DKV, &c, "fsa_swa_bwd_dkv", small[i].dkv_smem);
    }
    /* dq's static deltas count toward the plans' shared-memory checks (both kernels): 256 / 256 in dq's
     * smallest layout is 101376 bytes dynamic, 99 KB exactly, so the 256 bytes more refuse it there. */
    fsa_kernel k;
    const fsa_kernel_config wide = {.dtype = FSA_DTYPE_BF16, .head_dim = 256, .value_dim = 256, .group = 4,
                                    .qt_bwd = one | rows | keys | dq_one};
    fsa_kernel_describe(&k, FSA_K_CMP_BWD_DQ, &wide);
    assert_int_equal(k.smem, 101376);
    assert_int_equal(k.smem_static, FSA_QT_DQ_STATIC_SMEM);
    fsa_kernel_describe(&k, FSA_K_CMP_BWD_DKV, &wide);
    assert_int_equal(k.smem_static, 0);
    const fsa_kernel_config wg = {.dtype = FSA_DTYPE_BF16, .head_dim = 128, .value_dim = 128, .group = 4,
                                  .bwd_wgmma = 4};
    fsa_kernel_describe(&k, FSA_K_SWA_BWD_DQ, &wg);
    assert_int_equal(k.smem_static, fsa_qt_wgb_dq_static_smem(4)); /* its deltas too: 192 rows, 768 bytes */
    assert_int_equal(k.smem_static, 768);
}

/* The warpgroup forwards: variant 5 is variant 4 (three warpgroups) with its ring's mbarriers after the V stages. */
static void test_the_mbarrier_forward_variant_adds_only_its_barriers(void **state)
{
    (void)state;
    static const fsa_kernel_id ids[] = {FSA_K_CMP_FWD, FSA_K_SWA_FWD};
    fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = 128, .value_dim = 128, .group = 4};
    fsa_kernel k4, k5;
    for (size_t i = 0; i < 2; i++) {
        c.wgmma = 4;
        fsa_kernel_describe(&k4, ids[i], &c);
        c.wgmma = 5;
        fsa_kernel_describe(&k5, ids[i], &c);
        assert_int_equal(k4.threads, 384);
        assert_int_equal(k5.threads, 384);
        assert_int_equal(k5.smem, k4.smem + 48);
    }
}

/* The warp-specialized forward: variant 6 is variant 5's three warpgroups plus a producer warpgroup (512
 * threads, the same tiles; the compressed and window forwards, persistent, add stages and a second query
 * tile after the mbarriers, aligned, within sm_90's shared memory) and takes variant 5's selection. */
static void test_the_warp_specialized_forward_variant_adds_a_producer_warpgroup(void **state)
{
    (void)state;
    static const fsa_kernel_id ids[] = {FSA_K_CMP_FWD, FSA_K_SWA_FWD};
    fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = 128, .value_dim = 128, .group = 4};
    fsa_kernel k5, k6;
    for (size_t i = 0; i < 2; i++) {
        c.wgmma = 5;
        fsa_kernel_describe(&k5, ids[i], &c);
        c.wgmma = 6;
        fsa_kernel_describe(&k6, ids[i], &c);
        assert_int_equal(k6.threads, 512);
        assert_true(fsa_qt_ws_persistent(128, 128, 6) && !fsa_qt_ws_persistent(128, 128, 5));
        assert_int_equal(fsa_cmp_fwd_persistent(128, 128, 6), fsa_qt_ws_persistent(128, 128, 6));
        const int q2 = fsa_qt_ws_smem_q2(128, 128, 6), stages = FSA_QT_WS_PERSISTENT_STAGES;
        assert_true(stages >= fsa_qt_wg_stages(6));
        assert_int_equal(fsa_qt_ws_smem_bars(128, 128, 6),
                         fsa_qt_wg_smem_bars(128, 128, 6) + (stages - fsa_qt_wg_stages(6)) * 2 * 64 * 128 * 2);
        assert_true(q2 % FSA_QT_WG_ALIGN == 0 && q2 >= fsa_qt_ws_smem_bars(128, 128, 6) + 16 * stages);
        assert_int_equal(k6.smem, FSA_QT_WG_ALIGN + q2 + fsa_qt_wg_smem_k(128, 6));
        assert_true(k6.smem <= FSA_QT_WS_PERSISTENT_SMEM_MAX && k6.smem > k5.smem);
    }
    assert_true(fsa_qt_wg_producer(6) && fsa_qt_wg_mbar(6) && !fsa_qt_wg_producer(5));
    assert_int_equal(fsa_qt_wg_tokens_per_tile(4, 6), fsa_qt_wg_tokens_per_tile(4, 5));
    /* the registers traded fit what one CTA of these threads holds at launch */
    const int threads = fsa_qt_wg_threads(6), launch = 65536 / threads / 8 * 8;
    assert_true(128 * fsa_qt_ws_producer_regs(6) + (threads - 128) * fsa_qt_ws_consumer_regs(6) <= threads * launch);
    for (int g = 1; g <= 16; g *= 4)
        assert_int_equal(fsa_cmp_sel_groups(6, 128, 16, g, FSA_CMP_SEL_VARIANT_DEFAULT),
                         fsa_cmp_sel_groups(5, 128, 16, g, FSA_CMP_SEL_VARIANT_DEFAULT));
    assert_int_equal(fsa_qt_wg_pick(6, 192, 256), 3); /* three warpgroups only up to Dv 128 */
    assert_int_equal(fsa_qt_wg_pick(6, 256, 128), 3); /* and Dk 192: at 256 their shared memory does not fit */
    assert_int_equal(fsa_qt_wg_pick(4, 256, 64), 3);
    assert_int_equal(fsa_qt_wg_pick(5, 192, 128), 5);
    /* Whatever FSA_WGMMA asks for, the variant a plan gets fits sm_90's shared memory at every head-dim pair
     * it takes (at Dk 256 three warpgroups' query rows did not: plans were refused). */
    for (int wanted = 1; wanted <= 6; wanted++)
        for (int dk = 64; dk <= 256; dk += 64)
            for (int dv = 64; dv <= 256; dv += 64) {
                const int wg = fsa_qt_wg_pick(wanted, dk, dv);
                if (fsa_qt_fwd_kernel_smem(dk, dv, wg, 1, 0) > FSA_QT_WS_PERSISTENT_SMEM_MAX)
                    fail_msg("FSA_WGMMA=%d at %d / %d: variant %d needs %d bytes", wanted, dk, dv, wg,
                             fsa_qt_fwd_kernel_smem(dk, dv, wg, 1, 0));
            }
    assert_int_equal(fsa_qt_wg_default(128, 128), 6);
    assert_int_equal(fsa_qt_wg_default(192, 128), 6);
    assert_int_equal(fsa_qt_wg_default(192, 192), 0); /* not measured faster than the mma.sync forward */
    /* the selection's warpgroup variants at Dk 192 as at 128 (four consumers but at G 1, whose buffers do not fit) */
    for (int g = 1; g <= 16; g *= 2)
        assert_int_equal(fsa_cmp_sel_groups(6, 192, 16, g, FSA_CMP_SEL_VARIANT_DEFAULT), g == 1 ? 3 : 4);
}

static void test_the_selection_keeps_its_launch_shape(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof selects / sizeof selects[0]; i++) {
        const select_shape *s = &selects[i];
        const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = s->d, .group = s->g, .block_size = s->bk,
                                     .top_k = s->k, .kernel_size = s->l, .stride = s->s};
        assert_kernel(FSA_K_CMP_SELECT, &c, "fsa_cmp_select", s->smem);
    }
    /* Three warpgroups where the plan has warpgroup products (sm_90a), head
       dims allow and the list is at most 32 long. */
    const struct {
        int d, g, k, bk, s;
        unsigned threads, smem;
    } wg[] = {{128, 4, 16, 64, 16, 384, 103216}, {192, 16, 16, 64, 16, 384, 149488}, {256, 1, 64, 256, 4, 128, 102400},
              {96, 2, 16, 64, 16, 128, 53248}};
    for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
        const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = wg[i].d, .group = wg[i].g, .block_size = wg[i].bk,
                                     .top_k = wg[i].k, .kernel_size = 32, .stride = wg[i].s, .wgmma = 4};
        fsa_kernel k;
        fsa_kernel_describe(&k, FSA_K_CMP_SELECT, &c);
        assert_int_equal(k.threads, wg[i].threads);
        assert_int_equal(k.smem, wg[i].smem);
    }
}

/* The warpgroup backward (sm_90a), variants 2 and 3: two or three warpgroups of 64 query rows in dq,
 * two in dK/dV (one part), on the 128-byte swizzled layouts with 1024 bytes of alignment slack; only for
 * head dims in whole 64-column panels whose dK and dV fit one pass, three only up to Dk 192. */
static void test_the_warpgroup_backward_keeps_its_launch_shapes(void **state)
{
    (void)state;
    static const struct {
        int d, dv, g, wgb;
        unsigned dq_threads, dq_smem, dkv_smem;
    } wg[] = {{128, 128, 4, 2, 256, 164864, 168960},
              {128, 128, 4, 3, 384, 197632, 168960},
              {192, 128, 16, 2, 256, 205824, 167936},
              {192, 128, 16, 3, 384, 185344, 167936}};
    static const fsa_kernel_id ids[] = {FSA_K_CMP_BWD_DQ, FSA_K_CMP_BWD_DKV, FSA_K_SWA_BWD_DQ, FSA_K_SWA_BWD_DKV};
    for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
        const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = wg[i].d, .value_dim = wg[i].dv,
                                     .group = wg[i].g, .bwd_wgmma = wg[i].wgb};
        for (size_t k = 0; k < 4; k++) {
            fsa_kernel kern;
            fsa_kernel_describe(&kern, ids[k], &c);
            assert_int_equal(kern.threads, k % 2 == 0 ? wg[i].dq_threads : 256);
            assert_int_equal(kern.smem, k % 2 == 0 ? wg[i].dq_smem : wg[i].dkv_smem);
        }
        assert_int_equal(fsa_qt_bwd_dkv_parts(wg[i].d, wg[i].dv, wg[i].wgb), 1);
    }
    assert_int_equal(fsa_qt_wgb_pick(3, 256, 64), 2);
    assert_int_equal(fsa_qt_wgb_pick(3, 192, 128), 3);
    assert_int_equal(fsa_qt_wgb_pick(4, 192, 128), 4); /* three in dq, dK/dV rings of their own */
    assert_int_equal(fsa_qt_wgb_pick(4, 256, 64), 5);  /* two in dq, dK/dV rings of their own */
    assert_int_equal(fsa_qt_wgb_default(128, 128), 4);
    assert_int_equal(fsa_qt_wgb_default(192, 128), 4);
    assert_int_equal(fsa_qt_wgb_default(256, 64), 2);
    assert_int_equal(fsa_qt_wgb_default(64, 32), 0);
    assert_int_equal(fsa_qt_bwd_dq_threads(4), 384);
    assert_int_equal(fsa_qt_bwd_dq_threads(5), 256);
    assert_int_equal(fsa_qt_wgb_dq_keys(192, 3), 32); /* three warpgroups' registers above Dk 128 */
    assert_int_equal(fsa_qt_wgb_dq_keys(192, 2), 64);
    assert_int_equal(fsa_qt_wgb_pick(3, 128, 128), 3);
    assert_int_equal(fsa_qt_wgb_pick(2, 256, 256), 0); /* two parts */
    assert_int_equal(fsa_qt_wgb_pick(2, 64, 32), 0);   /* not a whole panel */
    assert_int_equal(fsa_qt_wgb_pick(0, 128, 128), 0);
    assert_int_equal(fsa_qt_bwd_dkv_parts(256, 256, 0), 2);
    assert_int_equal(fsa_qt_bwd_dq_grid_tiles(1000, 3, 4, 2), 34); /* 32 tokens of 4 heads per tile */
    assert_int_equal(fsa_qt_bwd_dq_grid_tiles(1000, 3, 4, 3), 23); /* 48 */
    assert_int_equal(fsa_qt_bwd_dq_grid_tiles(1000, 3, 4, 0), fsa_qt_grid_tiles(1000, 3, 4));
}

/* Grid x of the query-tile kernels (tiles of every sequence, plus one spare
 * per sequence) and of the dk/dv kernel (key tiles); y is the KV heads. */
static void test_grids_cover_the_tiles_of_every_sequence(void **state)
{
    (void)state;
    assert_int_equal(fsa_qt_grid_tiles(1000, 3, 4), 65);
    assert_int_equal(fsa_qt_grid_tiles(1000, 3, 16), 253);
    assert_int_equal(fsa_qt_grid_tiles(1, 1, 1), 1);
    assert_int_equal(fsa_qt_grid_key_tiles(70, 3), 4);
}

/* Shared memory of a selected-attention kernel under a configuration. */
static unsigned smem_of(fsa_kernel_id id, const fsa_kernel_config *c)
{
    fsa_kernel k;
    fsa_kernel_describe(&k, id, c);
    return k.smem;
}

static void test_selected_kernels_at_dk_192_dv_128_and_256_fit_sm_80_and_sm_90a(void **state)
{
    (void)state;
    static const int dims[][2] = {{192, 128}, {256, 256}, {128, 256}, {256, 64}};
    static const char *const targets[] = {"sm_80", "sm_90a"};
    static const int groups[] = {1, 4, 16};
    for (size_t ti = 0; ti < 2; ti++) {
        fsa_target t;
        assert_int_equal(fsa_target_parse(&t, targets[ti]), FSA_STATUS_OK);
        const unsigned limit = (unsigned)t.smem_per_block;
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (size_t gi = 0; gi < 3; gi++) {
                fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = dims[di][0], .value_dim = dims[di][1],
                                       .group = groups[gi], .block_size = 64, .top_k = 16, .page_size = 64,
                                       .bwd_keys = 64};
                const unsigned sizes[] = {smem_of(FSA_K_FWD_MAIN, &c), smem_of(FSA_K_FWD_NSA, &c),
                                          smem_of(FSA_K_BWD_MAIN, &c), smem_of(FSA_K_BWD_DQ_NSA, &c),
                                          smem_of(FSA_K_KVC_FWD, &c) +
                                              (unsigned)fsa_kvc_static_smem_bytes(groups[gi], c.top_k, c.kvc_tma, c.kvc_layout)};
                /* The paged kernel keeps all query rows of a large group: at Dk = Dv = 256 with
                 * G 16 its default layout needs more than sm_80 has, and its plan takes one stage
                 * buffer there (fsa_kvc_layout_fit; test_kvcache_layout.c). */
                const size_t n = di > 0 && ti == 0 ? 4 : 5;
                for (size_t k = 0; k < n; k++)
                    if (sizes[k] > limit)
                        fail_msg("kernel %zu at Dk %d Dv %d G %d needs %u bytes; %s allows %u", k, dims[di][0],
                                 dims[di][1], groups[gi], sizes[k], targets[ti], limit);
                /* The warpgroup main kernel (sm_90a) takes NSA's 192 / 128, not the wider dims. */
                assert_int_equal(fsa_fwd_wg_ok(dims[di][0], dims[di][1], 64), di == 0);
                if (ti == 1 && di == 0) assert_true(smem_of(FSA_K_FWD_MAIN_WG, &c) <= limit);
            }
    }
}

/* Dk == Dv takes the same shared memory as before the value head dim existed:
 * the layouts only grow where Dv does. */
/* The backwards that keep a warp's dK and dV rows in registers (the selected
 * attention's main kernel, the query-tile dK/dV kernels) take one pass up to
 * 320 columns together, NSA's 192 / 128 among them, and two parts beyond. */
static void test_wide_heads_take_one_backward_pass_up_to_320_columns(void **state)
{
    (void)state;
    const int one_pass[][2] = {{128, 128}, {192, 128}, {256, 64}, {144, 176}, {16, 256}, {64, 64}};
    const int two_parts[][2] = {{192, 144}, {256, 256}, {256, 80}, {176, 160}};
    for (size_t i = 0; i < sizeof one_pass / sizeof one_pass[0]; i++) {
        assert_int_equal(fsa_bwd_d_parts(one_pass[i][0], one_pass[i][1]), 1);
        assert_int_equal(fsa_qt_dkv_parts(one_pass[i][0], one_pass[i][1]), 1);
    }
    for (size_t i = 0; i < sizeof two_parts / sizeof two_parts[0]; i++) {
        assert_int_equal(fsa_bwd_d_parts(two_parts[i][0], two_parts[i][1]), 2);
        assert_int_equal(fsa_qt_dkv_parts(two_parts[i][0], two_parts[i][1]), 2);
    }
}

/* The selected backward's warpgroup main kernel: one warpgroup, and two CTAs
 * per SM at the largest head dims it takes that way (sm_90a: 228 KB per SM,
 * 1 KB of it per CTA for the driver); above Dk 128 two warpgroups split the
 * outputs, one CTA per SM. Only blocks of 64 keys, head dims multiples of 64,
 * Dk up to 192, Dv up to 128. */
static void test_the_warpgroup_selected_backward_fits_the_ctas_per_sm_it_is_launched_with(void **state)
{
    (void)state;
    fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = 128, .value_dim = 128, .group = 4,
                           .block_size = 64, .top_k = 16, .bwd_keys = 64};
    fsa_kernel k;
    fsa_kernel_describe(&k, FSA_K_BWD_MAIN_WG, &c);
    assert_string_equal(k.name, "fsa_sel_bwd_main_wg");
    assert_int_equal(k.threads, 128);
    assert_int_equal(fsa_bwd_wg_ctas_per_sm(128, 128), 2);
    assert_true(2 * (k.smem + 1024 + 16) <= 228 * 1024);
    assert_true(fsa_bwd_wg_ctas_per_sm(128, 128) * (k.smem + 1024 + 16) <= 228 * 1024);
    /* NSA's Dk 192 / Dv 128: dK in one warpgroup, dV and dq in the other. */
    c.head_dim = 192;
    fsa_kernel_describe(&k, FSA_K_BWD_MAIN_WG, &c);
    assert_int_equal(k.threads, 256);
    assert_true(fsa_bwd_wg_split(192, 128) && !fsa_bwd_wg_split(128, 128));
    assert_int_equal(fsa_bwd_wg_ctas_per_sm(192, 128), 1);
    assert_true(k.smem + 1024 + 16 <= 228 * 1024);
    assert_true(fsa_bwd_wg_ctas_per_sm(192, 128) * (k.smem + 1024 + 16) <= 228 * 1024);
    assert_true(fsa_bwd_wg_ok(128, 128, 64) && fsa_bwd_wg_ok(64, 128, 64) && fsa_bwd_wg_ok(64, 64, 64));
    assert_true(fsa_bwd_wg_ok(192, 128, 64) && fsa_bwd_wg_ok(192, 64, 64));
    assert_false(fsa_bwd_wg_ok(256, 128, 64) || fsa_bwd_wg_ok(192, 192, 64) || fsa_bwd_wg_ok(128, 128, 32) ||
                 fsa_bwd_wg_ok(96, 96, 64));
    assert_int_equal(fsa_bwd_wg_pick(0, 128, 128), 0);
    assert_int_equal(fsa_bwd_wg_pick(1, 256, 128), 0);
}

static void test_equal_head_dims_keep_the_selected_kernels_shared_memory(void **state)
{
    (void)state;
    const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = 128, .value_dim = 128, .group = 4,
                                 .block_size = 64, .top_k = 16, .page_size = 64, .bwd_keys = 64};
    /* Row table of 512 rows (query address, partial row, token), K and V, two query tiles of 128 rows. */
    assert_int_equal(smem_of(FSA_K_FWD_MAIN, &c), 20 * 512 + 2 * 64 * 136 * 2 + 2 * 128 * 136 * 2);
    assert_int_equal(smem_of(FSA_K_FWD_NSA, &c), 16 * 136 * 2 + 2 * 2 * 64 * 136 * 2);
    assert_int_equal(smem_of(FSA_K_BWD_DQ_NSA, &c), 2 * 16 * 136 * 2 + 2 * 2 * 64 * 136 * 2);
    assert_int_equal(smem_of(FSA_K_KVC_FWD, &c), 2 * 2 * 64 * 136 * 2);
    /* Dv narrower than Dk shrinks what holds V and the outputs. */
    const fsa_kernel_config n = {.dtype = FSA_DTYPE_BF16, .head_dim = 128, .value_dim = 64, .group = 4,
                                 .block_size = 64, .top_k = 16, .page_size = 64, .bwd_keys = 64};
    assert_true(smem_of(FSA_K_FWD_MAIN, &n) < smem_of(FSA_K_FWD_MAIN, &c));
    assert_true(smem_of(FSA_K_BWD_MAIN, &n) < smem_of(FSA_K_BWD_MAIN, &c));
    assert_true(smem_of(FSA_K_KVC_FWD, &n) < smem_of(FSA_K_KVC_FWD, &c));
}

/* A persistent query-tile forward launches a CTA per SM, fewer where there are fewer jobs, and one where the
 * device's SM count is unknown. */
static void test_a_persistent_forward_launches_one_cta_per_sm_at_most(void **state)
{
    (void)state;
    fsa_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.sm_count = 132;
    assert_int_equal(fsa_kernel_one_cta_per_sm(&ctx, 10900), 132);
    assert_int_equal(fsa_kernel_one_cta_per_sm(&ctx, 132), 132);
    assert_int_equal(fsa_kernel_one_cta_per_sm(&ctx, 62), 62);
    assert_int_equal(fsa_kernel_one_cta_per_sm(&ctx, 0), 0);
    ctx.sm_count = 0;
    assert_int_equal(fsa_kernel_one_cta_per_sm(&ctx, 10900), 1);
}

/* A persistent forward counts each CTA's ring items in int: jobs go to the CTAs in turn, so the busiest
 * holds ceil(jobs / grid) of them; past INT32_MAX less the ring's buffers the launch is refused. */
static void test_a_persistent_forwards_ring_items_per_cta_stay_within_int32(void **state)
{
    (void)state;
    fsa_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.sm_count = 132;
    const uint64_t limit = (uint64_t)INT32_MAX - 4;
    assert_true(fsa_kernel_persistent_items_fit(&ctx, 132 * 1000, limit / 1000, 4));
    assert_false(fsa_kernel_persistent_items_fit(&ctx, 132 * 1000, limit / 1000 + 1, 4));
    assert_false(fsa_kernel_persistent_items_fit(&ctx, 132 * 1000 + 1, limit / 1000, 4)); /* one CTA has 1001 */
    assert_true(fsa_kernel_persistent_items_fit(&ctx, 0, UINT64_MAX, 4));
    assert_false(fsa_kernel_persistent_items_fit(&ctx, UINT64_MAX, UINT64_MAX, 4)); /* no wrap in the product */
    /* Offline (no SM count): no grid to size, the check is the device's (as one CTA for every job it
     * refused calls any device takes, where an offline call's answer is FSA_STATUS_NO_DEVICE). */
    ctx.sm_count = 0;
    assert_true(fsa_kernel_persistent_items_fit(&ctx, 132 * 1000, limit / 1000 + 1, 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_and_backward_kernels_keep_their_launch_shapes),
        cmocka_unit_test(test_the_small_forward_layouts_keep_their_launch_shapes),
        cmocka_unit_test(test_the_small_backward_layouts_keep_their_launch_shapes),
        cmocka_unit_test(test_the_mbarrier_forward_variant_adds_only_its_barriers),
        cmocka_unit_test(test_the_warp_specialized_forward_variant_adds_a_producer_warpgroup),
        cmocka_unit_test(test_the_selection_keeps_its_launch_shape),
        cmocka_unit_test(test_the_warpgroup_backward_keeps_its_launch_shapes),
        cmocka_unit_test(test_grids_cover_the_tiles_of_every_sequence),
        cmocka_unit_test(test_a_persistent_forward_launches_one_cta_per_sm_at_most),
        cmocka_unit_test(test_a_persistent_forwards_ring_items_per_cta_stay_within_int32),
        cmocka_unit_test(test_selected_kernels_at_dk_192_dv_128_and_256_fit_sm_80_and_sm_90a),
        cmocka_unit_test(test_wide_heads_take_one_backward_pass_up_to_320_columns),
        cmocka_unit_test(test_equal_head_dims_keep_the_selected_kernels_shared_memory),
        cmocka_unit_test(test_the_warpgroup_selected_backward_fits_the_ctas_per_sm_it_is_launched_with),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
