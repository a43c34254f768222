/* Query-tile attention, what the host and the kernels agree on: a CTA owns
 * one KV head and a tile of consecutive query tokens of one sequence, and
 * streams that sequence's keys (compressed tokens, a sliding window) past
 * the tile in stages. Launch shape, grid and the forward's shared-memory
 * layout. Plain C that the host compiler and NVRTC both compile. */
#ifndef FSA_QT_LAYOUT_CUH
#define FSA_QT_LAYOUT_CUH

#include "fsa_layout.cuh"

/* ---------------------------------------------------------------- tiles */
/* A CTA owns one KV head and a tile of consecutive query tokens of one
 * sequence; each warp's 16 rows hold 16 / G whole tokens (all G heads of a
 * token in one warp, so per-token sums never cross warps). G is 1..16. */
#define FSA_QT_WARPS 4
#define FSA_QT_THREADS (32 * FSA_QT_WARPS)
#define FSA_QT_ROWS (16 * FSA_QT_WARPS)
#define FSA_QT_MAX_GROUP 16
FSA_LAYOUT_FN int fsa_qt_tokens_per_warp(int g) { return 16 / g; }
/* A warp may own mt sets of 16 rows (mt 1 or 2), each holding 16 / G whole
 * tokens: with two, the warp reads every K and V fragment once for 32 rows,
 * half the shared-memory traffic per product. */
FSA_LAYOUT_FN int fsa_qt_tokens_per_tile_mt(int g, int mt) { return FSA_QT_WARPS * mt * (16 / g); }
FSA_LAYOUT_FN int fsa_qt_tokens_per_tile(int g) { return fsa_qt_tokens_per_tile_mt(g, 1); }
/* CTAs along x for T tokens in B sequences: tile i of sequence b is CTA
 * start_b / tokens_per_tile + b + i, so every sequence gets enough tiles and
 * no CTA needs a table. */
FSA_LAYOUT_FN long long fsa_qt_grid_tiles_mt(long long total_tokens, long long batch, int g, int mt)
{
    return total_tokens / fsa_qt_tokens_per_tile_mt(g, mt) + batch;
}
FSA_LAYOUT_FN long long fsa_qt_grid_tiles(long long total_tokens, long long batch, int g)
{
    return fsa_qt_grid_tiles_mt(total_tokens, batch, g, 1);
}

/* ---------------------------------------------------------------- forward */
/* Q rows | the K stages | the V stages; keys stream in stages of 64 (32 for
 * value dims over 128, which keeps the output accumulators and the scores
 * in registers; two row sets per warp take value dims up to 128). */
#define FSA_QT_STAGES 2
FSA_LAYOUT_FN int fsa_qt_fwd_keys(int dv) { return dv > 128 ? 32 : 64; }
FSA_LAYOUT_FN int fsa_qt_fwd_smem_k_mt(int dk, int mt) { return fsa_tile_bytes(FSA_QT_ROWS * mt, dk); }
FSA_LAYOUT_FN int fsa_qt_fwd_smem_v_mt(int dk, int dv, int mt)
{
    return fsa_qt_fwd_smem_k_mt(dk, mt) + FSA_QT_STAGES * fsa_tile_bytes(fsa_qt_fwd_keys(dv), dk);
}
FSA_LAYOUT_FN int fsa_qt_fwd_smem_bytes_mt(int dk, int dv, int mt)
{
    return fsa_qt_fwd_smem_v_mt(dk, dv, mt) + FSA_QT_STAGES * fsa_tile_bytes(fsa_qt_fwd_keys(dv), dv);
}
FSA_LAYOUT_FN int fsa_qt_fwd_smem_bytes(int dk, int dv) { return fsa_qt_fwd_smem_bytes_mt(dk, dv, 1); }

#endif
