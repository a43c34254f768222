/* The selected-attention mma.sync kernels' shared-memory layouts
 * (templates/fsa_layout.cuh, fsa_sel_layout_fit), checked on the host: each
 * kernel keeps its default wherever it fits (the 99 KB targets sm_86, sm_89,
 * sm_12x = 101376 bytes a block; sm_80 = 166912; sm_90a = 232448, which
 * holds every default up to blocks of 128); one stage goes where a default
 * does not fit (head dims of 192 and 256 on the 99 KB targets, which were
 * refused, and the FSA order's forward at 128 / 128 there, which ran the NSA
 * order alone), with the bytes its parts add up to; the test override adds
 * its bits where the default fits; and the kernel table describes each
 * kernel of a layout with that layout's bytes. */
#include "testing.h"

#include "attention/kernels.h"

#include <string.h>

enum { SM_99KB = 101376, SM_80 = 166912, SM_90 = 232448 };
static const int smems[] = {SM_99KB, SM_80, SM_90};

enum {
    FWD = FSA_SEL_LAYOUT_FWD_ONE_STAGE,
    NSA = FSA_SEL_LAYOUT_NSA_ONE_STAGE,
    BWD = FSA_SEL_LAYOUT_BWD_ONE_STAGE,
    DQ = FSA_SEL_LAYOUT_DQ_ONE_STAGE,
    AUTO = FSA_SEL_ORDER_AUTO,
    ORDER_FSA = FSA_SEL_ORDER_FSA,
    ORDER_NSA = FSA_SEL_ORDER_NSA,
};

/* Each kernel's default and one-stage bytes (the backward main kernel's at its 16-key slice). */
typedef struct sel_bytes {
    int dflt[4], small[4];
} sel_bytes;
static const int bits[4] = {FWD, NSA, BWD, DQ};

static sel_bytes bytes_of(int dk, int dv, int bk, int g)
{
    sel_bytes b = {{fsa_fwd_smem_bytes(dk, dv, bk, FSA_FWD_STAGES), fsa_sel_nsa_total(dk, dv, FSA_NSA_STAGES),
                    fsa_sel_bwd16_total(dk, dv, g, FSA_BWD_STAGES), fsa_sel_dq_total(dk, dv, FSA_NSA_STAGES)},
                   {fsa_fwd_smem_bytes(dk, dv, bk, 1), fsa_sel_nsa_total(dk, dv, 1), fsa_sel_bwd16_total(dk, dv, g, 1), fsa_sel_dq_total(dk, dv, 1)}};
    return b;
}

/* Every head dim pair, block size and group, each order, on the three limits: a kernel whose default
 * fits keeps it (its bit clear); a bit set means the default does not fit and one stage does; one stage
 * is never larger than the default; the FSA-order forward takes one stage wherever that alone fits,
 * unless the plan forces the NSA order; the NSA-order forward keeps its default in an AUTO plan where
 * either order's default fits; and an AUTO plan on sm_90a takes no bit but the FSA order's at blocks of
 * 256, where its default does not fit. */
static void test_every_kernel_keeps_its_default_wherever_the_default_fits(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof smems / sizeof smems[0]; i++)
        for (int dk = 16; dk <= 256; dk += 16)
            for (int dv = 16; dv <= 256; dv += 16)
                for (int bk = 16; bk <= 256; bk *= 2)
                    for (int g = 1; g <= 128; g += g < 8 ? 1 : 7)
                        for (int order = AUTO; order <= ORDER_NSA; order++) {
                            const int max = smems[i], layout = fsa_sel_layout_fit(dk, dv, bk, g, order, max, 0);
                            const sel_bytes b = bytes_of(dk, dv, bk, g);
                            for (int k = 0; k < 4; k++) {
                                assert_true(b.small[k] <= b.dflt[k]);
                                if ((layout & bits[k]) && (b.dflt[k] <= max || b.small[k] > max))
                                    fail_msg("%d / %d bk %d G %d order %d on %d bytes: layout %d, kernel %d: %d bytes "
                                             "by default, %d in one stage",
                                             dk, dv, bk, g, order, max, layout, k, b.dflt[k], b.small[k]);
                            }
                            if (order == AUTO && ((g <= FSA_FWD_MAX_GROUP && b.dflt[0] <= max) || b.dflt[1] <= max))
                                assert_int_equal(layout & NSA, 0);
                            if (order != ORDER_NSA && b.dflt[0] > max && b.small[0] <= max)
                                assert_int_equal(layout & FWD, FWD);
                            if (order != ORDER_NSA) assert_int_equal(layout & DQ, 0);
                            if (max == SM_90 && order == AUTO) assert_int_equal(layout & ~(bk == 256 ? FWD : 0), 0);
                        }
}

/* On the 99 KB targets every head dim pair up to 256 / 256, block size 16 to 128 and group 1 to 128 now has
 * a forward and a backward: a forward order that fits (the default or one stage) and a backward main
 * kernel that fits at 16 keys; a forced NSA plan's dq fits too. The FSA order alone does not fit
 * everywhere (256 / 256 from blocks of 64: one query tile of 64 x 264 is too many bytes beside the block). */
static void test_every_shape_has_a_forward_and_a_backward_on_99_kb_targets(void **state)
{
    (void)state;
    for (int dk = 16; dk <= 256; dk += 16)
        for (int dv = 16; dv <= 256; dv += 16)
            for (int bk = 16; bk <= 128; bk *= 2)
                for (int g = 1; g <= 128; g++) {
                    const int auto_layout = fsa_sel_layout_fit(dk, dv, bk, g, AUTO, SM_99KB, 0);
                    const int nsa_layout = fsa_sel_layout_fit(dk, dv, bk, g, ORDER_NSA, SM_99KB, 0);
                    const int fsa_fwd = fsa_fwd_smem_bytes(dk, dv, bk, fsa_fwd_stages(auto_layout));
                    const int nsa_fwd = fsa_sel_nsa_total(dk, dv, fsa_nsa_fwd_stages(auto_layout));
                    if ((g > FSA_FWD_MAX_GROUP || fsa_fwd > SM_99KB) && nsa_fwd > SM_99KB)
                        fail_msg("%d / %d bk %d G %d: no forward (%d, %d bytes)", dk, dv, bk, g, fsa_fwd, nsa_fwd);
                    assert_true(fsa_sel_bwd16_total(dk, dv, g, fsa_bwd_stages(auto_layout)) <= SM_99KB);
                    assert_true(fsa_sel_nsa_total(dk, dv, fsa_nsa_fwd_stages(nsa_layout)) <= SM_99KB);
                    assert_true(fsa_sel_dq_total(dk, dv, fsa_nsa_dq_stages(nsa_layout)) <= SM_99KB);
                }
}

/* The bytes of the shapes the 99 KB targets refused, and the layout each order takes there. The FSA-order
 * forward: row table (20 x 512) | K | V of the block | the query tiles (64 rows x (D + 8) x 2, four warps);
 * the NSA order: 16 query rows | K stages | V stages of 64 keys; the backward: row tables (16384) | K | V of
 * the slice | Q | dO tiles of 32 rows | dS^T | the round's entries. */
static void test_head_dims_of_192_and_256_take_one_stage_on_99_kb_targets(void **state)
{
    (void)state;
    /* 192 / 192, blocks of 64: FSA order 10240 + 2 x 25600 + 2 x 25600 = 112640 bytes; one tile 87040. */
    assert_int_equal(fsa_fwd_smem_bytes(192, 192, 64, FSA_FWD_STAGES), 10240 + 2 * 25600 + 2 * 25600);
    assert_int_equal(fsa_fwd_smem_bytes(192, 192, 64, 1), 87040);
    /* NSA order: 6400 + 2 x (25600 + 25600) = 108800; one stage 57600. */
    assert_int_equal(fsa_nsa_fwd_smem_bytes(192, 192, FSA_NSA_STAGES), 108800);
    assert_int_equal(fsa_nsa_fwd_smem_bytes(192, 192, 1), 57600);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 64, 4, AUTO, SM_99KB, 0), FWD | NSA);
    /* Blocks of 128 do not fit one query tile (138240): the NSA order alone. */
    assert_int_equal(fsa_fwd_smem_bytes(192, 192, 128, 1), 138240);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 128, 4, AUTO, SM_99KB, 0), NSA);
    /* Blocks of 16 and 32 fit the FSA order's default (74240, 87040): such plans ran before and keep it. */
    /* 176 / 176 at blocks of 64: the NSA order's default is 100096 dynamic bytes, 101888 with its 1792 static
     * ones, over the limit: the driver would refuse it, so both orders take one stage. */
    assert_int_equal(fsa_nsa_fwd_smem_bytes(176, 176, FSA_NSA_STAGES), 100096);
    assert_int_equal(fsa_nsa_fwd_smem_static(FSA_NSA_STAGES), 1792);
    assert_int_equal(fsa_sel_nsa_total(176, 176, FSA_NSA_STAGES), 100096 + 1792);
    /* The backward's 4-byte work counter counts as the 16 bytes ptxas gives a kernel's static memory. */
    assert_int_equal(fsa_sel_bwd16_total(256, 256, 16, FSA_BWD_STAGES), 102400 + 16);
    assert_int_equal(fsa_sel_layout_fit(176, 176, 64, 16, AUTO, SM_99KB, 0), FWD | NSA);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 16, 4, AUTO, SM_99KB, 0), 0);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 32, 4, AUTO, SM_99KB, 0), 0);
    /* Its backward fits by default (16 keys: 82688 at G 4; 32 keys: 96768). */
    assert_int_equal(fsa_bwd_smem_bytes(192, 192, 32, 4, FSA_BWD_STAGES), 96768);

    /* 256 / 256: the FSA order fits one tile at blocks of 32 (77824) only; 64 keys are 111616 even in one. */
    assert_int_equal(fsa_fwd_smem_bytes(256, 256, 32, FSA_FWD_STAGES), 111616);
    assert_int_equal(fsa_fwd_smem_bytes(256, 256, 32, 1), 77824);
    assert_int_equal(fsa_fwd_smem_bytes(256, 256, 64, 1), 111616);
    assert_int_equal(fsa_nsa_fwd_smem_bytes(256, 256, FSA_NSA_STAGES), 143616);
    assert_int_equal(fsa_nsa_fwd_smem_bytes(256, 256, 1), 76032);
    /* The backward at 16 keys: 102400 bytes at G 16 with two Q/dO stages, 68608 with one; one stage holds
     * 32 keys (86784), not 64 (123136). */
    assert_int_equal(fsa_bwd_smem_bytes(256, 256, 16, 16, FSA_BWD_STAGES), 102400);
    assert_int_equal(fsa_bwd_smem_bytes(256, 256, 16, 16, 1), 68608);
    assert_int_equal(fsa_bwd_smem_bytes(256, 256, 32, 16, 1), 86784);
    assert_int_equal(fsa_bwd_smem_bytes(256, 256, 64, 16, 1), 123136);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 32, 16, AUTO, SM_99KB, 0), FWD | NSA | BWD);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, AUTO, SM_99KB, 0), NSA | BWD);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 128, 1, AUTO, SM_99KB, 0), NSA | BWD);
    /* Blocks of 16: the FSA order's default fits (94720), its backward does not (103168 at G 4). */
    assert_int_equal(fsa_sel_layout_fit(256, 256, 16, 4, AUTO, SM_99KB, 0), BWD);
    /* A forced NSA plan's dq: 152064 bytes by default, 84480 in one stage (16 x 264 x 2 x 2 + 2 x 64 x 264 x 2). */
    assert_int_equal(fsa_nsa_dq_smem_bytes(256, 256, FSA_NSA_STAGES), 152064);
    assert_int_equal(fsa_nsa_dq_smem_bytes(256, 256, 1), 84480);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, ORDER_NSA, SM_99KB, 0), NSA | BWD | DQ);
    /* A forced FSA plan takes one query tile where it fits, nothing of the NSA order. */
    assert_int_equal(fsa_sel_layout_fit(256, 256, 32, 16, ORDER_FSA, SM_99KB, 0), FWD | BWD);
    /* 128 / 128 at blocks of 64: the FSA order's default needs 114688 bytes, one query tile 79872; the NSA
     * order's default fits. An AUTO plan takes the FSA order's one stage beside the NSA order's default. */
    assert_int_equal(fsa_fwd_smem_bytes(128, 128, 64, FSA_FWD_STAGES), 114688);
    assert_int_equal(fsa_fwd_smem_bytes(128, 128, 64, 1), 79872);
    assert_true(fsa_sel_nsa_total(128, 128, FSA_NSA_STAGES) <= SM_99KB);
    for (int g = 1; g <= 16; g *= 4) assert_int_equal(fsa_sel_layout_fit(128, 128, 64, g, AUTO, SM_99KB, 0), FWD);
    assert_int_equal(fsa_sel_layout_fit(112, 112, 64, 4, AUTO, SM_99KB, 0), FWD);
    assert_int_equal(fsa_sel_layout_fit(192, 128, 64, 4, AUTO, SM_99KB, 0), FWD);
    assert_int_equal(fsa_sel_layout_fit(128, 128, 64, 4, ORDER_NSA, SM_99KB, 0), 0);
    /* Groups past FSA_FWD_MAX_GROUP have the NSA order alone whatever the FSA order's bytes: 192 / 192 at
     * blocks of 32 and G 128 (the FSA order's default 87040 bytes would fit, the NSA order's 110592 does not)
     * takes the NSA order's one stage in an AUTO plan as in a forced one. */
    assert_true(fsa_fwd_smem_bytes(192, 192, 32, FSA_FWD_STAGES) <= SM_99KB);
    assert_true(fsa_sel_nsa_total(192, 192, FSA_NSA_STAGES) > SM_99KB);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 32, 128, AUTO, SM_99KB, 0) & NSA, NSA);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 32, 128, ORDER_NSA, SM_99KB, 0) & NSA, NSA);
    /* sm_80 holds both orders' defaults at 256 / 256 (the FSA order up to blocks of 64): nothing changes. */
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, AUTO, SM_80, 0), 0);
}

/* One stage's merge area: the NSA kernels' warps merge NSA_WARPS x 16 rows of Dv floats (the forward) or
 * Dk floats (dq) in the stage buffers; one stage of a narrow K and a wide V (16 / 256: 64 x 24 x 2 + 64 x
 * 264 x 2 = 36864 bytes) does not hold the 65536 bytes of them, so the layout's bytes reach to the merge
 * area's end. Two stages always hold it: their bytes are the stages'. */
static void test_one_nsa_stage_holds_the_warps_merge_area(void **state)
{
    (void)state;
    assert_int_equal(fsa_nsa_fwd_smem_bytes(16, 256, 1), fsa_nsa_fwd_smem_k(16) + 4 * 16 * 256 * 4);
    assert_int_equal(fsa_nsa_dq_smem_bytes(256, 16, 1), fsa_nsa_dq_smem_k(256, 16) + 4 * 16 * 256 * 4);
    for (int dk = 16; dk <= 256; dk += 16)
        for (int dv = 16; dv <= 256; dv += 16) {
            assert_int_equal(fsa_nsa_fwd_smem_bytes(dk, dv, FSA_NSA_STAGES),
                             fsa_nsa_fwd_smem_v(dk, FSA_NSA_STAGES) + FSA_NSA_STAGES * fsa_nsa_stage_bytes(dv));
            assert_int_equal(fsa_nsa_dq_smem_bytes(dk, dv, FSA_NSA_STAGES),
                             fsa_nsa_dq_smem_v(dk, dv, FSA_NSA_STAGES) + FSA_NSA_STAGES * fsa_nsa_stage_bytes(dv));
            assert_true(fsa_nsa_fwd_smem_bytes(dk, dv, 1) >= fsa_nsa_fwd_smem_k(dk) + fsa_nsa_merge_bytes(dv));
            assert_true(fsa_nsa_dq_smem_bytes(dk, dv, 1) >= fsa_nsa_dq_smem_k(dk, dv) + fsa_nsa_merge_bytes(dk));
        }
}

/* What fits neither layout stays at 0: the FSA order of 256 / 256 at blocks of 64 on the 99 KB targets
 * (the plan refuses a forced FSA order with the default's bytes), every kernel on a limit below one
 * stage. */
static void test_what_fits_neither_layout_stays_at_the_default(void **state)
{
    (void)state;
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, ORDER_FSA, SM_99KB, 0) & FWD, 0);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, ORDER_FSA, SM_99KB, FSA_SEL_LAYOUT_ALL) & FWD, 0);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, AUTO, 50000, 0), 0);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, ORDER_NSA, 50000, FSA_SEL_LAYOUT_ALL), 0);
}

/* FSA_SEL_LAYOUT_ONE_STAGE's bits (`forced`) join what the target needs where the default fits: every
 * kernel on sm_90a, whatever the order (the plan loads only its order's kernels), and still what a 99 KB
 * target needs. */
static void test_the_override_adds_one_stage_where_the_default_fits(void **state)
{
    (void)state;
    const int all = FSA_SEL_LAYOUT_ALL;
    assert_int_equal(all, FWD | NSA | BWD | DQ);
    assert_int_equal(fsa_sel_layout_fit(128, 128, 64, 4, AUTO, SM_90, all), all);
    assert_int_equal(fsa_sel_layout_fit(192, 192, 64, 4, AUTO, SM_90, all), all);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, AUTO, SM_90, all), all);
    assert_int_equal(fsa_sel_layout_fit(256, 256, 64, 16, AUTO, SM_99KB, all), NSA | BWD);
    assert_int_equal(fsa_sel_layout_fit(64, 64, 64, 4, AUTO, SM_99KB, all), all);
    assert_int_equal(fsa_sel_layout_fit(128, 128, 64, 4, AUTO, SM_90, FWD), FWD);
    /* The stage counts of each kernel follow its own bit only. */
    assert_int_equal(fsa_fwd_stages(FWD), 1);
    assert_int_equal(fsa_fwd_stages(all & ~FWD), FSA_FWD_STAGES);
    assert_int_equal(fsa_nsa_fwd_stages(NSA), 1);
    assert_int_equal(fsa_nsa_fwd_stages(all & ~NSA), FSA_NSA_STAGES);
    assert_int_equal(fsa_bwd_stages(BWD), 1);
    assert_int_equal(fsa_bwd_stages(all & ~BWD), FSA_BWD_STAGES);
    assert_int_equal(fsa_nsa_dq_stages(DQ), 1);
    assert_int_equal(fsa_nsa_dq_stages(all & ~DQ), FSA_NSA_STAGES);
}

/* The override's value: 1 asks for every bit; unset or anything else for none. */
static void test_the_override_reads_1_as_every_one_stage_layout(void **state)
{
    (void)state;
    char *saved = fsa_test_env_swap("FSA_SEL_LAYOUT_ONE_STAGE", "1");
    assert_int_equal(fsa_kernel_sel_forced(), FSA_SEL_LAYOUT_ALL);
    fsa_test_env_restore("FSA_SEL_LAYOUT_ONE_STAGE", saved);
    static const char *others[] = {"0", "2", "yes", ""};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        saved = fsa_test_env_swap("FSA_SEL_LAYOUT_ONE_STAGE", others[i]);
        assert_int_equal(fsa_kernel_sel_forced(), 0);
        fsa_test_env_restore("FSA_SEL_LAYOUT_ONE_STAGE", saved);
    }
    saved = fsa_test_env_swap("FSA_SEL_LAYOUT_ONE_STAGE", NULL);
    assert_int_equal(fsa_kernel_sel_forced(), 0);
    fsa_test_env_restore("FSA_SEL_LAYOUT_ONE_STAGE", saved);
}

/* The kernel table describes each selected kernel under any layout with the same entry point and threads
 * and the bytes of its own bit's layout: one kernel's bit leaves the others' bytes alone. */
static void test_the_kernel_table_describes_each_kernel_with_its_own_layout_bytes(void **state)
{
    (void)state;
    static const int dims[][4] = {{192, 192, 64, 4}, {256, 256, 32, 16}, {128, 128, 64, 1}, {16, 256, 16, 2}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int layout = 0; layout <= FSA_SEL_LAYOUT_ALL; layout++) {
            const int dk = dims[i][0], dv = dims[i][1], bk = dims[i][2], g = dims[i][3];
            const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = dk, .value_dim = dv, .group = g,
                                         .block_size = bk, .top_k = 16, .bwd_keys = 16, .sel_layout = layout};
            fsa_kernel k;
            memset(&k, 0xff, sizeof k);
            fsa_kernel_describe(&k, FSA_K_FWD_MAIN, &c);
            assert_string_equal(k.name, "fsa_sel_fwd_main");
            assert_int_equal(k.threads, fsa_fwd_threads(dk, dv));
            assert_int_equal(k.smem, fsa_fwd_smem_bytes(dk, dv, bk, layout & FWD ? 1 : FSA_FWD_STAGES));
            fsa_kernel_describe(&k, FSA_K_FWD_NSA, &c);
            assert_int_equal(k.threads, FSA_NSA_THREADS);
            assert_int_equal(k.smem, fsa_nsa_fwd_smem_bytes(dk, dv, layout & NSA ? 1 : FSA_NSA_STAGES));
            static const fsa_kernel_id bwd[] = {FSA_K_BWD_MAIN, FSA_K_BWD_MAIN_KV};
            for (size_t j = 0; j < 2; j++) {
                fsa_kernel_describe(&k, bwd[j], &c);
                assert_int_equal(k.threads, fsa_bwd_threads(16));
                assert_int_equal(k.smem, fsa_bwd_smem_bytes(dk, dv, 16, g, layout & BWD ? 1 : FSA_BWD_STAGES));
            }
            fsa_kernel_describe(&k, FSA_K_BWD_DQ_NSA, &c);
            assert_int_equal(k.smem, fsa_nsa_dq_smem_bytes(dk, dv, layout & DQ ? 1 : FSA_NSA_STAGES));
            /* The warpgroup kernels have a layout of their own. */
            const fsa_kernel_config c0 = {.dtype = FSA_DTYPE_BF16, .head_dim = dk, .value_dim = dv, .group = g,
                                          .block_size = bk, .top_k = 16, .bwd_keys = 16};
            fsa_kernel k0;
            fsa_kernel_describe(&k, FSA_K_FWD_MAIN_WG, &c);
            fsa_kernel_describe(&k0, FSA_K_FWD_MAIN_WG, &c0);
            assert_int_equal(k.smem, k0.smem);
            fsa_kernel_describe(&k, FSA_K_BWD_MAIN_WG, &c);
            fsa_kernel_describe(&k0, FSA_K_BWD_MAIN_WG, &c0);
            assert_int_equal(k.smem, k0.smem);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kernel_keeps_its_default_wherever_the_default_fits),
        cmocka_unit_test(test_every_shape_has_a_forward_and_a_backward_on_99_kb_targets),
        cmocka_unit_test(test_head_dims_of_192_and_256_take_one_stage_on_99_kb_targets),
        cmocka_unit_test(test_one_nsa_stage_holds_the_warps_merge_area),
        cmocka_unit_test(test_what_fits_neither_layout_stays_at_the_default),
        cmocka_unit_test(test_the_override_adds_one_stage_where_the_default_fits),
        cmocka_unit_test(test_the_override_reads_1_as_every_one_stage_layout),
        cmocka_unit_test(test_the_kernel_table_describes_each_kernel_with_its_own_layout_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
