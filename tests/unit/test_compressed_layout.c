/* The arithmetic the compressed-attention kernels rely on, checked on the
 * host against the definitions: the keys a selection block collects
 * (c*r - halo .. c*r + r - 1) are exactly the compressed tokens overlapping
 * it, a stage of 64 keys completes whole blocks, and the grid of query tiles
 * gives every tile of every sequence exactly one CTA. */
#include "testing.h"

#include "../../templates/cmp_params.cuh"

#include <stdlib.h>
#include <string.h>

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

/* The mma.sync forwards' layout (fsa_qt_fwd_layout_fit): the default wherever it fits, so no kernel of
 * a target with 163 KB or more (sm_80, sm_90a) changes; on 99 KB targets the smallest change that fits,
 * whose shared memory the kernel's own functions give; the override adds its bits to those (so it fits
 * wherever the plan's layout does), and every layout value is canonical (no bit that changes nothing). */
static void test_the_forward_layout_keeps_the_default_wherever_it_fits(void **state)
{
    (void)state;
    static const int smems[] = {232448, 166912, 101376};
    for (int dk = 16; dk <= 256; dk += 16)
        for (int dv = 16; dv <= 256; dv += 16)
            for (size_t i = 0; i < sizeof smems / sizeof smems[0]; i++) {
                const int max = smems[i], mt = fsa_cmp_fwd_mt(dk, dv);
                const int cmp = fsa_cmp_fwd_layout(dk, dv, 0, max, 0), swa = fsa_swa_fwd_layout(dk, dv, 0, max, 0);
                const int cmp_default = fsa_cmp_fwd_smem_bytes(dk, dv, 0, 0) <= max;
                const int swa_default = fsa_qt_fwd_kernel_smem(dk, dv, 0, 1, 0) <= max;
                if ((cmp_default && cmp != 0) || (swa_default && swa != 0))
                    fail_msg("%d / %d at %d bytes: layouts %d, %d where the default fits", dk, dv, max, cmp, swa);
                if (max >= 166912 && (!cmp_default || !swa_default)) continue; /* refused as before */
                if (cmp != fsa_qt_fwd_layout_canon(dv, mt, cmp) || swa != fsa_qt_fwd_layout_canon(dv, 1, swa))
                    fail_msg("%d / %d: layouts %d, %d not canonical", dk, dv, cmp, swa);
                if (cmp != 0 && fsa_cmp_fwd_smem_bytes(dk, dv, 0, cmp) > max)
                    fail_msg("%d / %d: compressed layout %d does not fit %d bytes", dk, dv, cmp, max);
                if (swa != 0 && fsa_qt_fwd_kernel_smem(dk, dv, 0, 1, swa) > max)
                    fail_msg("%d / %d: window layout %d does not fit %d bytes", dk, dv, swa, max);
                /* The tile and grid follow the rows per warp. */
                assert_int_equal(fsa_cmp_fwd_tile_tokens(4, dk, dv, 0, cmp),
                                 fsa_qt_tokens_per_tile_mt(4, fsa_cmp_fwd_mt_at(dk, dv, 0, cmp)));
                /* The override: one set of rows and stages of 32 keys, or the set alone, whatever fits. */
                const int both = FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32;
                const int small = fsa_cmp_fwd_layout(dk, dv, 0, max, both);
                assert_int_equal(fsa_cmp_fwd_mt_at(dk, dv, 0, small), 1);
                assert_int_equal(fsa_qt_fwd_keys_at(dv, small), 32);
                assert_int_equal(fsa_qt_fwd_keys_at(dv, fsa_swa_fwd_layout(dk, dv, 0, max, both)), 32);
                const int rows = fsa_cmp_fwd_layout(dk, dv, 0, max, FSA_QT_FWD_ONE_SET);
                assert_int_equal(fsa_cmp_fwd_mt_at(dk, dv, 0, rows), 1);
                assert_int_equal(fsa_qt_fwd_keys_at(dv, rows), fsa_qt_fwd_keys_at(dv, cmp));
                /* ... added to what the target needs, so a forced layout fits wherever the plan's does. */
                const int swa_small = fsa_swa_fwd_layout(dk, dv, 0, max, both);
                const int swa_rows = fsa_swa_fwd_layout(dk, dv, 0, max, FSA_QT_FWD_ONE_SET);
                if ((small & cmp) != cmp || (rows & cmp) != cmp || (swa_small & swa) != swa || (swa_rows & swa) != swa)
                    fail_msg("%d / %d at %d bytes: an override dropped a needed bit", dk, dv, max);
                const int cmp_fits = fsa_cmp_fwd_smem_bytes(dk, dv, 0, cmp) <= max;
                const int swa_fits = fsa_qt_fwd_kernel_smem(dk, dv, 0, 1, swa) <= max;
                if ((cmp_fits && (fsa_cmp_fwd_smem_bytes(dk, dv, 0, small) > max ||
                                  fsa_cmp_fwd_smem_bytes(dk, dv, 0, rows) > max)) ||
                    (swa_fits && (fsa_qt_fwd_kernel_smem(dk, dv, 0, 1, swa_small) > max ||
                                  fsa_qt_fwd_kernel_smem(dk, dv, 0, 1, swa_rows) > max)))
                    fail_msg("%d / %d at %d bytes: a forced layout does not fit where the plan's does", dk, dv, max);
                /* The warpgroup forward keeps its own layout. */
                assert_int_equal(fsa_cmp_fwd_layout(dk, dv, 6, max, both), 0);
                assert_int_equal(fsa_swa_fwd_layout(dk, dv, 6, max, both), 0);
            }
    /* The shapes this layout is for, on 99 KB targets: 128 / 128 compressed takes one set of rows
     * (104448 bytes by default, 87040 so), 192 / 128 both forwards stages of 32 keys (111616, 68608). */
    assert_int_equal(fsa_cmp_fwd_smem_bytes(128, 128, 0, 0), 104448);
    assert_int_equal(fsa_cmp_fwd_layout(128, 128, 0, 101376, 0), FSA_QT_FWD_ONE_SET);
    assert_int_equal(fsa_cmp_fwd_smem_bytes(128, 128, 0, FSA_QT_FWD_ONE_SET), 87040);
    assert_int_equal(fsa_swa_fwd_layout(128, 128, 0, 101376, 0), 0);
    assert_int_equal(fsa_cmp_fwd_layout(192, 128, 0, 101376, 0), FSA_QT_FWD_KEYS_32);
    assert_int_equal(fsa_swa_fwd_layout(192, 128, 0, 101376, 0), FSA_QT_FWD_KEYS_32);
    assert_int_equal(fsa_cmp_fwd_smem_bytes(192, 128, 0, FSA_QT_FWD_KEYS_32), 68608);
}

/* The mma.sync backward's layout (fsa_qt_bwd_layout_fit): the default wherever it fits, so no kernel of
 * sm_90a (nor of sm_80 below Dk + Dv = 416) changes; elsewhere, per kernel, the first of the smaller
 * layouts that fits, canonical, whose sums the kernel can hand over; the override adds what it asks
 * wherever the kernel can; the warpgroup backward keeps its own. What still does not fit: on 163 KB
 * nothing up to 256 / 256, on 99 KB only 256 / 256 (Dk + Dv over 500; dq too, with its static deltas). */
static void test_the_backward_layout_keeps_the_default_wherever_it_fits(void **state)
{
    (void)state;
    static const int smems[] = {232448, 166912, 101376};
    const int dkv_bits = FSA_QT_BWD_DKV_BITS, dq_bits = FSA_QT_BWD_DQ_BITS;
    for (int dk = 16; dk <= 256; dk += 16)
        for (int dv = 16; dv <= 256; dv += 16)
            for (size_t i = 0; i < sizeof smems / sizeof smems[0]; i++) {
                const int max = smems[i], l = fsa_qt_bwd_layout(dk, dv, 0, max, 0);
                const int dkv = l & dkv_bits, dq = l & dq_bits;
                const int dkv_fits = fsa_qt_dkv_smem_at(dk, dv, dkv) <= max;
                const int dq_fits = fsa_qt_dq_smem_at(dk, dv, dq) + FSA_QT_DQ_STATIC_SMEM <= max;
                if (fsa_qt_dkv_smem_at(dk, dv, 0) <= max && dkv != 0)
                    fail_msg("%d / %d at %d bytes: dK/dV layout %d where the default fits", dk, dv, max, dkv);
                if (fsa_qt_dq_smem_at(dk, dv, 0) + FSA_QT_DQ_STATIC_SMEM <= max && dq != 0)
                    fail_msg("%d / %d at %d bytes: dq layout %d where the default fits", dk, dv, max, dq);
                if (l != fsa_qt_bwd_layout_canon(dk, l)) fail_msg("%d / %d: layout %d not canonical", dk, dv, l);
                assert_true(fsa_qt_dkv_layout_ok(dk, dv, dkv));
                /* sm_90a's mma.sync backward (FSA_WGMMA=0, or dims the warpgroups do not take) never changes;
                 * sm_80 fits everything, 99 KB all but the widest dK/dV. */
                if (max == 232448) assert_int_equal(l, 0);
                if (max == 166912 && (!dkv_fits || !dq_fits)) fail_msg("%d / %d refused on sm_80", dk, dv);
                if (max == 166912 && dk + dv < 416) assert_int_equal(l, 0);
                if (max == 101376 && !dq_fits != (dk + dv >= 512))
                    fail_msg("%d / %d: dq %s on 99 KB", dk, dv, dq_fits ? "fits" : "refused");
                if (max == 101376 && !dkv_fits != (dk + dv >= 512))
                    fail_msg("%d / %d: dK/dV %s on 99 KB", dk, dv, dkv_fits ? "fits" : "refused");
                /* The override: everything it asks, or the dK/dV one stage alone where tiles of 32 rows
                 * could not hand their sums over. */
                const int all = fsa_qt_bwd_layout(dk, dv, 0, max, dkv_bits | dq_bits);
                assert_int_equal(fsa_qt_dkv_stages_at(all), 1);
                assert_int_equal(fsa_qt_dq_stages_at(all), 1);
                assert_int_equal(fsa_qt_dq_keys_at(dk, all), 32);
                assert_int_equal(fsa_qt_dkv_rows_at(all),
                                 fsa_qt_dkv_layout_ok(dk, dv, dkv_bits) ? 32 : FSA_QT_ROWS);
                /* ... added to what the target needs: every needed bit stays, and the forced layouts fit
                 * wherever the plan's do. */
                const int two = fsa_qt_bwd_layout(dk, dv, 0, max, FSA_QT_BWD_DKV_ONE_STAGE | FSA_QT_BWD_DQ_KEYS_32);
                if ((all & l) != l || (two & l) != l)
                    fail_msg("%d / %d at %d bytes: an override dropped a needed bit of %d", dk, dv, max, l);
                if ((dkv_fits && (fsa_qt_dkv_smem_at(dk, dv, all & dkv_bits) > max ||
                                  fsa_qt_dkv_smem_at(dk, dv, two & dkv_bits) > max)) ||
                    (dq_fits && (fsa_qt_dq_smem_at(dk, dv, all & dq_bits) + FSA_QT_DQ_STATIC_SMEM > max ||
                                 fsa_qt_dq_smem_at(dk, dv, two & dq_bits) + FSA_QT_DQ_STATIC_SMEM > max)))
                    fail_msg("%d / %d at %d bytes: a forced layout does not fit where the plan's does", dk, dv, max);
                /* A walk's tile: 16 / G tokens a set of 16 rows. */
                assert_int_equal(fsa_qt_dkv_tile_tokens(4, all) * 4, fsa_qt_dkv_rows_at(all));
                assert_int_equal(fsa_qt_dkv_tile_tokens(3, 0), fsa_qt_tokens_per_tile(3));
                /* The warpgroup backward keeps its own layout. */
                assert_int_equal(fsa_qt_bwd_layout(dk, dv, 4, max, dkv_bits | dq_bits), 0);
            }
    /* Where set 1's sums go (fsa_qt_dkv_sums_at): inside what the kernel holds before its row tables, both
     * together unless serial, and one at a time (each from the start: a part of a two-part walk has one)
     * within it too; the tables follow every stage. */
    for (int dk = 16; dk <= 256; dk += 16)
        for (int dv = 16; dv <= 256; dv += 16)
            for (int l = 0; l <= FSA_QT_BWD_DKV_BITS; l++) {
                if (!fsa_qt_dkv_layout_ok(dk, dv, l)) continue;
                const int at = fsa_qt_dkv_sums_at(dk, dv, l), end = fsa_qt_dkv_smem_rows_at(dk, dv, l);
                const int k = fsa_qt_dkv_sums_bytes(dk), v = fsa_qt_dkv_sums_bytes(dv);
                assert_true(at + (fsa_qt_dkv_sums_serial(dk, dv, l) ? (k > v ? k : v) : k + v) <= end);
                assert_true(at == 0 || at == fsa_qt_dkv_smem_q(dk, dv));
                assert_int_equal(fsa_qt_dkv_smem_at(dk, dv, l) - end,
                                 fsa_qt_dkv_stages_at(l) * fsa_qt_dkv_rows_at(l) * (int)(sizeof(int) * 4));
            }
    /* The default layout is the one the kernels had: 384 (Dk + Dv + 16) + 2048 bytes for dK/dV, its sums
     * in the stage buffers, at once; dq Q and dO rows and two stages of 64 keys (32 above Dk 128). */
    assert_int_equal(fsa_qt_dkv_smem_at(128, 128, 0), 106496);
    assert_int_equal(fsa_qt_dkv_smem_at(192, 128, 0), 384 * (192 + 128 + 16) + 2048);
    assert_int_equal(fsa_qt_dq_smem_at(128, 128, 0), 104448);
    assert_int_equal(fsa_qt_dq_smem_at(192, 128, 0), 86016);
    assert_int_equal(fsa_qt_dkv_sums_at(128, 128, 0), fsa_qt_dkv_smem_q(128, 128));
    assert_int_equal(fsa_qt_dkv_sums_serial(128, 128, 0), 0);
    /* The shapes this is for. 99 KB: 128 / 128 dK/dV one stage, dq stages of 32 keys (106496 and 104448
     * bytes by default; 70656 and 69632 so); 192 / 128 dK/dV one stage (131072; 87040); 256 / 128 and
     * 192 / 192 also tiles of 32 rows, dq one stage (155648, 102400; 77312, 76800). 163 KB: 256 / 256
     * dK/dV in one stage (204800; 136192). */
    const int one = FSA_QT_BWD_DKV_ONE_STAGE, rows = FSA_QT_BWD_DKV_ROWS_32;
    const int keys = FSA_QT_BWD_DQ_KEYS_32, dq_one = FSA_QT_BWD_DQ_ONE_STAGE;
    assert_int_equal(fsa_qt_bwd_layout(128, 128, 0, 101376, 0), one | keys);
    assert_int_equal(fsa_qt_dkv_smem_at(128, 128, one), 70656);
    assert_int_equal(fsa_qt_dq_smem_at(128, 128, keys), 69632);
    assert_int_equal(fsa_qt_bwd_layout(192, 128, 0, 101376, 0), one);
    assert_int_equal(fsa_qt_dkv_smem_at(192, 128, one), 87040);
    assert_int_equal(fsa_qt_bwd_layout(256, 128, 0, 101376, 0), one | rows | dq_one);
    assert_int_equal(fsa_qt_bwd_layout(192, 192, 0, 101376, 0), one | rows | dq_one);
    assert_int_equal(fsa_qt_dkv_smem_at(256, 128, one | rows), 77312);
    assert_int_equal(fsa_qt_dq_smem_at(256, 128, dq_one), 76800);
    assert_int_equal(fsa_qt_dkv_sums_at(256, 128, one | rows), 0);
    assert_int_equal(fsa_qt_dkv_sums_serial(256, 128, one | rows), 1);
    assert_int_equal(fsa_qt_dkv_sums_serial(128, 128, one), 0);
    assert_int_equal(fsa_qt_bwd_layout(256, 256, 0, 166912, 0), one);
    assert_int_equal(fsa_qt_dkv_smem_at(256, 256, one), 136192);
    assert_int_equal(fsa_qt_bwd_layout(160, 256, 0, 166912, 0), one);
    assert_int_equal(fsa_qt_bwd_layout(192, 128, 0, 166912, 0), 0);
}

/* The persistent forward: CTA c of a grid of n takes jobs c, c + n, ...; each (tile, KV head) is one job,
 * whatever the grid, and the longest tiles of every head (x 0, the sequence's last tile) come first. */
static void test_a_persistent_grid_takes_every_tile_of_every_head_once(void **state)
{
    (void)state;
    static const long long tiles_list[] = {1, 7, 130, 1366}, heads_list[] = {1, 2, 8, 32};
    static const long long grids[] = {1, 5, 132, 100000};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++) {
            const long long tiles = tiles_list[a], heads = heads_list[b], jobs = tiles * heads;
            unsigned char *seen = calloc((size_t)jobs, 1);
            assert_non_null(seen);
            for (size_t gi = 0; gi < 4; gi++) {
                memset(seen, 0, (size_t)jobs);
                const long long n = grids[gi] < jobs ? grids[gi] : jobs;
                for (long long c = 0; c < n; c++)
                    for (long long w = c; w < jobs; w += n) {
                        const fsa_qt_job j = fsa_qt_job_at(w, heads);
                        assert_true(j.x >= 0 && j.x < tiles && j.h >= 0 && j.h < heads);
                        assert_int_equal(seen[j.x * heads + j.h]++, 0);
                        if (w < heads) assert_int_equal(j.x, 0);
                    }
                for (long long i = 0; i < jobs; i++) assert_int_equal(seen[i], 1);
            }
            free(seen);
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

/* The selection's launch shape and shared memory: warpgroups exactly where
 * the plan has them, head dims allow and the list leaves registers for them
 * (one set of 16 rows per warp then); a warp's tokens times the lanes that
 * share each token's blocks (a power of two up to 16) fit in the warp, using
 * at least half of it unless 16 lanes share each token; every warp's score
 * buffer starts 16-byte aligned with a pitch of 4 mod 16 that holds a
 * stage's blocks; the query rows' region stays apart from the warps'
 * buffers when the fragments are not kept in registers (long top-k lists),
 * and the warpgroup kernel fits an sm_90a CTA in every variant. */
static void test_the_selection_buffers_of_a_warp_are_aligned_and_hold_its_tokens(void **state)
{
    (void)state;
    for (int wgmma = 0; wgmma <= 5; wgmma += wgmma ? 4 : 1)            /* 0, 1 and 5 (its ring on mbarriers) */
        for (int v = 0; v <= (wgmma ? FSA_CMP_SEL_VARIANT_MAX : 0); v++)  /* (the variants of the warpgroup kernel) */
        for (int g = 1; g <= FSA_QT_MAX_GROUP; g++)
            for (int dk = 16; dk <= 256; dk += 16)
                for (int k = 1; k <= 64; k += 21) {
                    const int groups = fsa_cmp_sel_groups(wgmma, dk, k, g, v);
                    assert_int_equal(groups != 0, wgmma && dk % 64 == 0 && k <= 32);
                    if (groups || !fsa_cmp_sel_q_in_registers(k)) assert_int_equal(fsa_cmp_sel_mt(g, dk, k, groups), 1);
                    assert_int_equal(fsa_cmp_sel_threads(groups), groups ? 128 * groups : FSA_QT_THREADS);
                    /* FSA_CMP_SEL_WS: one producer warpgroup more, and the registers the warpgroups
                     * trade fit the pool the CTA got at launch (65536 / threads, rounded down to 8). */
                    const int producer = fsa_cmp_sel_producer(groups, v), launch = fsa_cmp_sel_launch_threads(groups, v);
                    assert_int_equal(producer, groups && (v & FSA_CMP_SEL_WS));
                    assert_int_equal(launch, fsa_cmp_sel_threads(groups) + 128 * producer);
                    if (producer) {
                        const int regs = fsa_cmp_sel_ws_consumer_regs(groups);
                        assert_int_equal(regs % 8, 0);
                        assert_true(regs >= 112 && regs <= 256);
                        assert_true(128 * FSA_CMP_SEL_WS_PRODUCER_REGS + 128 * groups * regs <= launch * (65536 / launch / 8 * 8));
                    }
                    assert_true(groups == 0 || groups == 3 ||
                                (groups == 4 && wgmma == 5 && dk <= 192 &&
                                 (((v & FSA_CMP_SEL_FOUR) && (v & FSA_CMP_SEL_SPREAD) && g >= 4) ||
                                  ((v & FSA_CMP_SEL_FOUR_SMALL_G) && g <= 2 && k <= 16 && (g == 2 || dk <= 128)))));
                    const int tokens = fsa_cmp_sel_tokens_per_warp(g, dk, k, groups);
                    const int lanes = fsa_cmp_sel_lanes_per_token(g, dk, k, groups);
                    assert_true(tokens <= 32);
                    assert_true(lanes >= 1 && (lanes & (lanes - 1)) == 0);
                    assert_true(lanes <= 16 && lanes * tokens <= 32 && (lanes == 16 || 2 * lanes * tokens > 32));
                    assert_int_equal(fsa_cmp_sel_tokens_per_tile(g, dk, k, groups),
                                     fsa_cmp_sel_warps(groups) * tokens);
                    const int q_end =
                        groups ? fsa_cmp_sel_smem_k(dk, groups)
                               : fsa_cmp_sel_smem_q(dk, 0) + fsa_tile_bytes(FSA_QT_ROWS * fsa_cmp_sel_mt(g, dk, k, 0), dk);
                    if (groups || !fsa_cmp_sel_q_in_registers(k)) assert_true(fsa_cmp_sel_smem_warps(dk, k, groups) >= q_end);
                    assert_int_equal(fsa_cmp_sel_smem_warps(dk, k, groups) % 16, 0);
                    for (int d = 1; d <= 64; d *= 2)
                        for (int bk = d; bk <= 64 * d; bk *= 2) {
                            const int pitch = fsa_cmp_sel_score_pitch(bk, d);
                            assert_int_equal(pitch % 16, 4);
                            assert_true(pitch >= fsa_cmp_sel_blocks_per_stage(bk, d));
                            assert_int_equal(fsa_cmp_sel_warp_bytes(g, dk, k, bk, d, groups) % 16, 0);
                            assert_true(fsa_cmp_sel_warp_bytes(g, dk, k, bk, d, groups) >= tokens * pitch * 4);
                            const int warps_end = fsa_cmp_sel_smem_warps(dk, k, groups) +
                                                  fsa_cmp_sel_warps(groups) * fsa_cmp_sel_warp_bytes(g, dk, k, bk, d, groups);
                            const int bytes = fsa_cmp_sel_smem_bytes(dk, g, k, bk, d, groups, v);
                            assert_true(bytes >= warps_end + (groups ? FSA_QT_WG_ALIGN : 0));
                            /* The scorer's table (with the producer) after the mbarriers, 16-byte aligned. */
                            const int table = fsa_cmp_sel_table_bytes(bk, d, groups, v);
                            assert_int_equal(table != 0, fsa_cmp_sel_producer(groups, v) && fsa_cmp_sel_blocks_per_stage(bk, d) <= 16);
                            if (groups) assert_int_equal(bytes, FSA_QT_WG_ALIGN + warps_end + FSA_CMP_SEL_WG_BARS + table);
                            assert_int_equal((warps_end + FSA_CMP_SEL_WG_BARS) % 16, 0);
                            assert_true(bytes >= q_end);
                            if (groups) assert_true(bytes <= 227 * 1024);
                        }
                }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_block_collects_exactly_the_compressed_tokens_overlapping_it),
        cmocka_unit_test(test_every_query_tile_gets_exactly_one_cta),
        cmocka_unit_test(test_a_persistent_grid_takes_every_tile_of_every_head_once),
        cmocka_unit_test(test_a_warp_holds_whole_token_groups),
        cmocka_unit_test(test_the_forward_layout_keeps_the_default_wherever_it_fits),
        cmocka_unit_test(test_the_backward_layout_keeps_the_default_wherever_it_fits),
        cmocka_unit_test(test_the_selection_buffers_of_a_warp_are_aligned_and_hold_its_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
