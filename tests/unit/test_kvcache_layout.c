/* The paged-cache kernel's shared-memory layouts (templates/fsa_layout.cuh,
 * fsa_kvc_layout_fit), checked on the host: the default wherever it fits, so
 * no kernel of a target that holds it changes; one stage buffer where it does
 * not (sm_80 = 166912 bytes a block, the 99 KB targets = 101376; sm_90a =
 * 232448 holds every default), with the bytes its components add up to; the
 * test override adds its bit to what the target needs; and the kernel table
 * describes the layout's kernel with the layout's bytes. */
#include "testing.h"

#include "attention/kernels.h"

#include <string.h>

enum { SM_99KB = 101376, SM_80 = 166912, SM_90 = 232448 };
static const int smems[] = {SM_99KB, SM_80, SM_90};

/* Cp.async kernels (mode 0): the layout fit returns the default exactly where its bytes fit, one stage
 * exactly where they do not and one stage's do, and 0 where neither does; a layout it returns fits. Every
 * head dim pair and group at top-k 1, 2, 3, 4, 19, 34, 49 and 64, on the three limits. */
static void test_the_layout_is_the_default_wherever_the_default_fits(void **state)
{
    (void)state;
    const int one = FSA_KVC_LAYOUT_ONE_STAGE;
    for (size_t i = 0; i < sizeof smems / sizeof smems[0]; i++)
        for (int dk = 16; dk <= 256; dk += 16)
            for (int dv = 16; dv <= 256; dv += 16)
                for (int g = 1; g <= FSA_KVC_MAX_GROUP; g++)
                    for (int k = 1; k <= 64; k += (k < 4 ? 1 : 15)) {
                        const int max = smems[i], layout = fsa_kvc_layout_fit(dk, dv, g, k, 0, max, 0);
                        const int dflt = fsa_kvc_smem_all(dk, dv, g, k, 0, 0), small = fsa_kvc_smem_all(dk, dv, g, k, 0, one);
                        const int want = dflt <= max ? 0 : small <= max ? one : 0;
                        if (layout != want)
                            fail_msg("%d / %d G %d K %d on %d bytes: layout %d (default %d bytes, one stage %d)", dk, dv,
                                     g, k, max, layout, dflt, small);
                        assert_true(small < dflt);
                        if (max == SM_90) assert_int_equal(layout, 0); /* sm_90a holds every default */
                    }
}

/* Bytes, dynamic plus static at top-k 16 (rounded up to 16 bytes as the driver counts it), of the shapes the 99 KB targets refused with the default layout
 * and of a few that still fit it, and the layout each target takes. One stage frees a K and a V stage
 * (64 keys of Dk and of Dv, pitch + 8 elements); the static part loses a stage's row offsets, positions,
 * masks and mbarrier (1544 bytes). 256 / 256 at G 16 fits one stage on sm_80 but not on the 99 KB
 * targets: refused there (layout 0, the default's bytes in the message). */
static void test_one_stage_bytes_and_choices_for_the_shapes_99_kb_targets_refused(void **state)
{
    (void)state;
    static const struct {
        int dk, dv, g, dflt, small, on_99kb, on_sm80;
    } shapes[] = {
        {128, 128, 4, 74448, 38096, 0, 0},  {192, 128, 1, 99616, 55056, 0, 0},  {192, 128, 4, 97232, 52688, 0, 0},
        {192, 128, 8, 104016, 59472, 1, 0}, {192, 128, 16, 117584, 73040, 1, 0}, {192, 128, 32, 117184, 72640, 1, 0},
        {192, 128, 64, 116992, 72448, 1, 0}, {256, 128, 1, 118048, 65296, 1, 0}, {256, 128, 4, 115664, 62928, 1, 0},
        {256, 128, 16, 142160, 89424, 1, 0}, {256, 256, 1, 150816, 81680, 1, 0}, {256, 256, 4, 148432, 79312, 1, 0},
        {256, 256, 8, 157264, 88144, 1, 0}, {256, 256, 16, 174928, 105808, 0, 1}, {128, 256, 2, 108016, 70624, 1, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int dk = shapes[i].dk, dv = shapes[i].dv, g = shapes[i].g;
        assert_int_equal(fsa_kvc_smem_all(dk, dv, g, 16, 0, 0), shapes[i].dflt);
        assert_int_equal(fsa_kvc_smem_all(dk, dv, g, 16, 0, FSA_KVC_LAYOUT_ONE_STAGE), shapes[i].small);
        assert_int_equal(fsa_kvc_static_smem_bytes(g, 16, 0, 0) - fsa_kvc_static_smem_bytes(g, 16, 0, 1), 1544);
        assert_int_equal(fsa_kvc_layout_fit(dk, dv, g, 16, 0, SM_99KB, 0), shapes[i].on_99kb);
        assert_int_equal(fsa_kvc_layout_fit(dk, dv, g, 16, 0, SM_80, 0), shapes[i].on_sm80);
        assert_int_equal(fsa_kvc_layout_fit(dk, dv, g, 16, 0, SM_90, 0), 0);
    }
    /* NSA's 192 / 128 at G 16: the query rows (64 x 200 x 2) | one K stage (64 x 200 x 2) | one V stage
     * (64 x 136 x 2), where the default has two of each. */
    assert_int_equal(fsa_kvc_smem_k(192, 128, 16, 0), 25600);
    assert_int_equal(fsa_kvc_smem_v(192, 128, 16, 0, 1), 25600 + 25600);
    assert_int_equal(fsa_kvc_smem_bytes(192, 128, 16, 0, 1), 25600 + 25600 + 17408);
    assert_int_equal(fsa_kvc_smem_bytes(192, 128, 16, 0, 0), 25600 + 2 * 25600 + 2 * 17408);
    /* Dv over Dk: the warps' merge area (4 warps x 16 rows x (256 + 4) floats, keys on the mma's 16-row side
     * at G 2) outgrows one K and one V stage, and the layout holds it. */
    assert_int_equal(fsa_kvc_stages_end(128, 256, 2, 0, 1), 17408 + 33792);
    assert_int_equal(fsa_kvc_smem_bytes(128, 256, 2, 0, 1), 4 * 16 * 260 * 4);
    /* The one-stage layout's cluster share does not fit it at 192 / 128 G 16: such plans merge through
     * the workspace (the same bits). */
    assert_false(fsa_kvc_cluster_fits(192, 128, 16, 0, 1));
}

/* On the 99 KB targets one stage holds every 192 / 128 and 256 / 128 shape (every group and top-k), and
 * 256 / 256 up to G 8; 256 / 256 above G 8 (tiles of 64 rows) stays refused there and takes one stage on
 * sm_80. */
static void test_one_stage_holds_every_nsa_and_256_by_128_shape_on_99_kb_targets(void **state)
{
    (void)state;
    for (int g = 1; g <= FSA_KVC_MAX_GROUP; g++)
        for (int k = 1; k <= 64; k++) {
            static const int dims[][2] = {{192, 128}, {256, 128}, {256, 256}};
            for (size_t i = 0; i < 3; i++) {
                const int dk = dims[i][0], dv = dims[i][1];
                const int layout = fsa_kvc_layout_fit(dk, dv, g, k, 0, SM_99KB, 0);
                const int fits = fsa_kvc_smem_all(dk, dv, g, k, 0, layout) <= SM_99KB;
                if (fits != (i < 2 || g <= 8))
                    fail_msg("%d / %d G %d K %d on 99 KB targets: layout %d, %d bytes", dk, dv, g, k, layout,
                             fsa_kvc_smem_all(dk, dv, g, k, 0, layout));
                const int sm80 = fsa_kvc_layout_fit(dk, dv, g, k, 0, SM_80, 0);
                assert_true(fsa_kvc_smem_all(dk, dv, g, k, 0, sm80) <= SM_80);
                assert_int_equal(sm80, i == 2 && g > 8 ? FSA_KVC_LAYOUT_ONE_STAGE : 0);
            }
        }
}

/* FSA_KVC_SMALL's bit (`forced`) joins what the target needs: one stage on sm_90a where the default fits,
 * still one stage where the target needs it, nothing for tensor-map kernels (the layout is cp.async's), and
 * a shape that fits neither stays at 0 (the plan refuses it as before). */
static void test_the_override_adds_one_stage_to_what_the_target_needs(void **state)
{
    (void)state;
    const int one = FSA_KVC_LAYOUT_ONE_STAGE;
    assert_int_equal(fsa_kvc_layout_fit(128, 128, 4, 16, 0, SM_90, one), one);
    assert_int_equal(fsa_kvc_layout_fit(192, 128, 16, 16, 0, SM_90, one), one);
    assert_int_equal(fsa_kvc_layout_fit(192, 128, 16, 16, 0, SM_99KB, one), one);
    assert_int_equal(fsa_kvc_layout_fit(192, 128, 16, 16, 0, SM_99KB, 0), one);
    assert_int_equal(fsa_kvc_layout_fit(128, 128, 4, 16, FSA_KVC_KERNEL_TMA, SM_90, one), 0);
    assert_int_equal(fsa_kvc_layout_fit(128, 128, 4, 16, FSA_KVC_KERNEL_TMA | FSA_KVC_KERNEL_DEEP, SM_90, one), 0);
    assert_int_equal(fsa_kvc_layout_fit(256, 256, 16, 16, 0, SM_99KB, 0), 0);
    assert_int_equal(fsa_kvc_layout_fit(256, 256, 16, 16, 0, SM_99KB, one), 0);
    /* The stage buffers of each kernel: one in the small layout, two by default, four in the deep ring. */
    assert_int_equal(fsa_kvc_stages(0, one), 1);
    assert_int_equal(fsa_kvc_stages(0, 0), FSA_KVC_STAGES);
    assert_int_equal(fsa_kvc_stages(FSA_KVC_KERNEL_TMA | FSA_KVC_KERNEL_DEEP, 0), FSA_KVC_DEEP_STAGES);
}

/* The kernel table describes the paged kernel of either layout with the same entry point and threads and
 * the layout's dynamic shared memory. */
static void test_the_kernel_table_describes_the_one_stage_kernel_with_its_bytes(void **state)
{
    (void)state;
    static const int dims[][3] = {{192, 128, 16}, {256, 256, 4}, {128, 128, 4}, {128, 256, 2}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int layout = 0; layout <= FSA_KVC_LAYOUT_ONE_STAGE; layout++) {
            const fsa_kernel_config c = {.dtype = FSA_DTYPE_BF16, .head_dim = dims[i][0], .value_dim = dims[i][1],
                                         .group = dims[i][2], .block_size = 64, .top_k = 16, .page_size = 64,
                                         .kvc_layout = layout};
            fsa_kernel k;
            memset(&k, 0xff, sizeof k);
            fsa_kernel_describe(&k, FSA_K_KVC_FWD, &c);
            assert_string_equal(k.name, "fsa_kvc_fwd");
            assert_int_equal(k.threads, FSA_KVC_THREADS);
            assert_int_equal(k.smem, fsa_kvc_smem_bytes(dims[i][0], dims[i][1], dims[i][2], 0, layout));
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_layout_is_the_default_wherever_the_default_fits),
        cmocka_unit_test(test_one_stage_bytes_and_choices_for_the_shapes_99_kb_targets_refused),
        cmocka_unit_test(test_one_stage_holds_every_nsa_and_256_by_128_shape_on_99_kb_targets),
        cmocka_unit_test(test_the_override_adds_one_stage_to_what_the_target_needs),
        cmocka_unit_test(test_the_kernel_table_describes_the_one_stage_kernel_with_its_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
