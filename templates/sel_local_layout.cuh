/* The FSA-order forward's local slots, what the host and the kernels agree
 * on. Every token's selection holds block 0, its own block and the one
 * before (NSA forces them), and its neighbours' selections hold the same
 * blocks: computed pair by pair they cost three of the K partial rows per
 * token. With local slots, the slots that name block 0, the own block or
 * the one before are kept out of the lists and computed instead by a query
 * tile kernel (sel_fwd_local.cu) that streams exactly those blocks past a
 * tile of consecutive tokens, each row seeing the blocks its own selection
 * names; its output rows and log-sum-exps join the reduction as one more
 * partial. Plain C that the host compiler and NVRTC both compile. */
#ifndef FSA_SEL_LOCAL_LAYOUT_CUH
#define FSA_SEL_LOCAL_LAYOUT_CUH

#include "fsa_qt_layout.cuh"

/* The query-tile variant of the local kernel (fsa_qt_layout.cuh: 0 the
 * mma.sync forward, 1 to 4 warpgroups) for the plan's variant wg: the
 * largest one up to wg whose tile holds at most bk tokens, so that a tile's
 * tokens span at most two own blocks and its key stream at most four
 * blocks. */
FSA_LAYOUT_FN int fsa_sel_local_wg(int g, int bk, int wg)
{
    while (wg > 0 && fsa_qt_wg_tokens_per_tile(g, wg) > bk) wg = wg >= 4 ? 3 : wg == 3 ? 2 : 0;
    return wg;
}

/* Whether the local slots can go to query tiles: a token's heads fit a
 * warp's rows (G <= 16), key stages never straddle two blocks, and a tile
 * holds at most bk tokens. */
FSA_LAYOUT_FN int fsa_sel_local_ok(int g, int bk, int dv, int wg)
{
    return g >= 1 && g <= FSA_QT_MAX_GROUP && bk % fsa_qt_fwd_keys(dv) == 0 && fsa_qt_fwd_tile_tokens(g, wg) <= bk;
}

/* Launch shape of the local kernel of variant wg. */
FSA_LAYOUT_FN int fsa_sel_local_threads(int wg) { return wg ? fsa_qt_wg_threads(wg) : FSA_QT_THREADS; }
FSA_LAYOUT_FN int fsa_sel_local_smem_bytes(int dk, int dv, int wg)
{
    return wg ? fsa_qt_wg_smem_bytes(dk, dv, wg) : fsa_qt_fwd_smem_bytes(dk, dv);
}

/* Query tiles of a token chunk [t0, t0 + tc) of B sequences: tile i of
 * sequence b is CTA start_b / TT + b + i over the whole input (fsa_qtile.cuh,
 * first tile first), so the tiles holding the chunk's tokens are CTAs
 * fsa_sel_local_x0 .. fsa_sel_local_x0 + fsa_sel_local_grid - 1. */
FSA_LAYOUT_FN long long fsa_sel_local_x0(long long t0, int tt) { return t0 / tt > 0 ? t0 / tt - 1 : 0; }
FSA_LAYOUT_FN long long fsa_sel_local_grid(long long t0, long long tc, long long batch, int tt)
{
    return (t0 + tc - 1) / tt - fsa_sel_local_x0(t0, tt) + batch;
}

#endif
