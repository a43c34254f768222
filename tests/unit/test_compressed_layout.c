/* The arithmetic the compressed-attention kernels rely on, checked on the
 * host against the definitions: the keys a selection block collects
 * (c*r - halo .. c*r + r - 1) are exactly the compressed tokens overlapping
 * it, a stage of 64 keys completes whole blocks, and the grid of query tiles
 * gives every tile of every sequence exactly one CTA. */
#include "testing.h"

#include "../../templates/cmp_params.cuh"

#include <stdlib.h>

static void test_a_block_collects_exactly_the_compressed_tokens_overlapping_it(void **state)
{
    (void)state;
    for (int d = 1; d <= 64; d++)
        for (int l = d; l <= 3 * 64 + 1; l += (l < 40 ? 1 : 7))
            for (int bk = d; bk <= 256 && bk / d <= FSA_CMP_SEL_KEYS; bk += d) {
                const int r = bk / d;
                if ((r & (r - 1)) != 0) continue; /* the plans take powers of two only */
                const int halo = fsa_cmp_sel_halo(l, d);
                assert_int_equal(FSA_CMP_SEL_KEYS % r, 0);
                assert_int_equal(fsa_cmp_sel_blocks_per_stage(bk, d) * r, FSA_CMP_SEL_KEYS);
                for (int c = 0; c < 5; c++)
                    for (int j = 0; j < (c + 2) * r + halo + 2; j++) {
                        const int overlaps = j * d <= c * bk + bk - 1 && j * d + l - 1 >= c * bk;
                        const int collected = j >= c * r - halo && j <= c * r + r - 1;
                        if (overlaps != collected)
                            fail_msg("l %d d %d bk %d: block %d, token %d overlaps %d, collected %d", l, d, bk, c, j,
                                     overlaps, collected);
                    }
            }
}

/* The mapping of query_tile (templates/fsa_qtile.cuh), on the host: CTA x
 * belongs to the last sequence b with start_b / TT + b <= x and takes its
 * tile x - (start_b / TT + b), if the sequence has that many. */
static void test_every_query_tile_gets_exactly_one_cta(void **state)
{
    (void)state;
    fsa_rng rng = {42};
    for (int g = 1; g <= FSA_QT_MAX_GROUP; g++) {
        const int tt = fsa_qt_tokens_per_tile(g);
        for (int trial = 0; trial < 50; trial++) {
            int cu[9] = {0};
            const int batch = fsa_rng_int(&rng, 1, 8);
            for (int b = 0; b < batch; b++) cu[b + 1] = cu[b] + fsa_rng_int(&rng, trial % 3 ? 1 : 0, 3 * tt + 5);
            const int total = cu[batch];
            if (total == 0) continue;
            const long long grid = fsa_qt_grid_tiles(total, batch, g);
            int *owner = calloc((size_t)total, sizeof *owner);
            assert_non_null(owner);
            for (long long x = 0; x < grid; x++) {
                int b = 0;
                for (int s = 1; s < batch; s++)
                    if (cu[s] / tt + s <= x) b = s;
                const long long i = x - (cu[b] / tt + b), n_tiles = (cu[b + 1] - cu[b] + tt - 1) / tt;
                if (i < 0 || i >= n_tiles) continue;
                for (int t = cu[b] + (int)i * tt; t < cu[b + 1] && t < cu[b] + (int)(i + 1) * tt; t++) owner[t]++;
            }
            for (int t = 0; t < total; t++)
                if (owner[t] != 1) fail_msg("g %d, batch %d: token %d has %d CTAs", g, batch, t, owner[t]);
            free(owner);
        }
    }
}

static void test_a_warp_holds_whole_token_groups(void **state)
{
    (void)state;
    for (int g = 1; g <= FSA_QT_MAX_GROUP; g++) {
        assert_true(fsa_qt_tokens_per_warp(g) >= 1);
        assert_true(fsa_qt_tokens_per_warp(g) * g <= 16);
        assert_int_equal(fsa_qt_tokens_per_tile(g), FSA_QT_WARPS * fsa_qt_tokens_per_warp(g));
    }
}

/* The selection's per-warp buffers: every warp's region starts 16-byte
 * aligned, a token's sums start this stage's keys after room for the halo
 * (with an odd pitch: lanes reading different tokens hit different banks), the
 * probabilities have a buffer only where the heads are not summed in
 * registers (a group that is not a power of two), and a warp's tokens times
 * the lanes that share each token's blocks (a power of two) fit in the warp,
 * using at least half of it. The query rows' region stays apart from the
 * warps' buffers when the fragments are not kept in registers (long top-k
 * lists). */
static void test_the_selection_buffers_of_a_warp_are_aligned_and_hold_its_tokens(void **state)
{
    (void)state;
    for (int g = 1; g <= FSA_QT_MAX_GROUP; g++)
        for (int dk = 16; dk <= 256; dk += 16)
            for (int k = 1; k <= 64; k += 21) {
                const int tokens = fsa_cmp_sel_tokens_per_warp(g, dk, k);
                const int lanes = fsa_cmp_sel_lanes_per_token(g, dk, k);
                assert_true(tokens <= 32);
                assert_true(lanes >= 1 && (lanes & (lanes - 1)) == 0);
                assert_true(lanes * tokens <= 32 && 2 * lanes * tokens > 32);
                assert_int_equal(fsa_cmp_sel_heads_in_registers(g), g == 1 || g == 2 || g == 4 || g == 8 || g == 16);
                assert_int_equal(fsa_cmp_sel_warp_tok(g, dk, k) == 0, fsa_cmp_sel_heads_in_registers(g));
                assert_int_equal(fsa_cmp_sel_warp_tok(g, dk, k) % 16, 0);
                const int q_end = fsa_cmp_sel_smem_q(dk) + fsa_tile_bytes(FSA_QT_ROWS * fsa_cmp_sel_mt(dk, k), dk);
                if (!fsa_cmp_sel_q_in_registers(k)) assert_true(fsa_cmp_sel_smem_warps(dk, k) >= q_end);
                assert_int_equal(fsa_cmp_sel_smem_warps(dk, k) % 16, 0);
                for (int l = 1; l <= 97; l += 6)
                    for (int d = 1; d <= l && d <= 64; d *= 2) {
                        assert_int_equal(fsa_cmp_sel_warp_bytes(g, dk, l, d, k) % 16, 0);
                        assert_int_equal(fsa_cmp_sel_key0(l, d) % 2, 0);
                        assert_true(fsa_cmp_sel_key0(l, d) >= fsa_cmp_sel_halo(l, d));
                        assert_int_equal(fsa_cmp_sel_tok_pitch(l, d) % 2, 1);
                        assert_true(fsa_cmp_sel_tok_pitch(l, d) >= fsa_cmp_sel_key0(l, d) + FSA_CMP_SEL_KEYS);
                        const int warps_end = fsa_cmp_sel_smem_warps(dk, k) +
                                              FSA_QT_WARPS * fsa_cmp_sel_warp_bytes(g, dk, l, d, k);
                        assert_true(fsa_cmp_sel_smem_bytes(dk, g, l, d, k) >= warps_end);
                        assert_true(fsa_cmp_sel_smem_bytes(dk, g, l, d, k) >= q_end);
                    }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_block_collects_exactly_the_compressed_tokens_overlapping_it),
        cmocka_unit_test(test_every_query_tile_gets_exactly_one_cta),
        cmocka_unit_test(test_a_warp_holds_whole_token_groups),
        cmocka_unit_test(test_the_selection_buffers_of_a_warp_are_aligned_and_hold_its_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
