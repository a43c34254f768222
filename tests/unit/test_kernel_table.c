/* The kernel table names and shapes the query-tile kernels (compressed
 * attention, its selection and backward, sliding-window attention) as their
 * plans launch them: entry point, threads and dynamic shared memory per
 * variant of the template-compile grid, pinned to the numbers the layout
 * headers give, and the launch grid's extents for a fixed problem. A change
 * to any of them changes what the kernels were verified with. */
#include "testing.h"

#include "attention/kernels.h"

#include <string.h>

typedef struct query_tile_shape {
    fsa_dtype dtype;
    int d, dv, g;
    /* swa_fwd: the forward's layout with a set of 16 rows per warp; cmp_fwd:
     * with two up to Dk = Dv = 128 */
    unsigned fwd_smem, cmp_fwd_smem, dq_smem, dkv_smem;
    int dkv_parts;
} query_tile_shape;

static const query_tile_shape shapes[] = {
    {FSA_DTYPE_BF16, 128, 128, 4, 87040, 104448, 104448, 105984, 1},
    {FSA_DTYPE_BF16, 192, 128, 16, 111616, 111616, 86016, 130560, 2},
    {FSA_DTYPE_F16, 256, 256, 1, 101376, 101376, 135168, 204288, 2},
    {FSA_DTYPE_F16, 64, 32, 3, 37888, 47104, 43008, 44544, 1},
    {FSA_DTYPE_BF16, 16, 192, 7, 31744, 31744, 86016, 87552, 1},
    {FSA_DTYPE_BF16, 16, 256, 7, 39936, 39936, 110592, 112128, 2},
    {FSA_DTYPE_F16, 32, 64, 5, 33792, 38912, 43008, 44544, 1},
};

typedef struct select_shape {
    int d, g, bk, k, l, s;
    unsigned smem;
} select_shape;

static const select_shape selects[] = {
    {128, 4, 64, 16, 32, 16, 84352}, {192, 16, 64, 16, 32, 16, 76800}, {256, 1, 256, 64, 64, 4, 121344},
    {64, 5, 16, 1, 16, 16, 65856},   {32, 2, 32, 33, 32, 32, 94976},
};

static void assert_kernel(fsa_kernel_id id, const fsa_kernel_config *c, const char *name, unsigned smem)
{
    fsa_kernel k;
    memset(&k, 0xff, sizeof k);
    fsa_kernel_describe(&k, id, c);
    assert_null(k.fn);
    assert_string_equal(k.name, name);
    assert_int_equal(k.threads, 128);
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
        /* The dk/dv kernel's grid z: parts of Dk + Dv. */
        assert_int_equal(fsa_cmp_dkv_parts(s->d, s->dv), s->dkv_parts);
    }
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
}

/* Grid x of the query-tile kernels (tiles of every sequence, plus one spare
 * per sequence) and of the dk/dv kernel (key tiles); y is the KV heads. */
static void test_grids_cover_the_tiles_of_every_sequence(void **state)
{
    (void)state;
    assert_int_equal(fsa_qt_grid_tiles(1000, 3, 4), 65);
    assert_int_equal(fsa_qt_grid_tiles(1000, 3, 16), 253);
    assert_int_equal(fsa_qt_grid_tiles(1, 1, 1), 1);
    assert_int_equal(fsa_cmp_grid_key_tiles(70, 3), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_and_backward_kernels_keep_their_launch_shapes),
        cmocka_unit_test(test_the_selection_keeps_its_launch_shape),
        cmocka_unit_test(test_grids_cover_the_tiles_of_every_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
