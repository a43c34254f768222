/* Query-tile attention, what the host and the kernels agree on: a CTA owns
 * one KV head and a tile of consecutive query tokens of one sequence, and
 * streams that sequence's keys (compressed tokens, a sliding window) past
 * the tile in stages; the backward's dK/dV CTAs own a tile of keys and walk
 * the query tiles that see them. Launch shapes, grids and shared-memory
 * layouts. Plain C that the host compiler and NVRTC both compile. */
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
/* The mma.sync forward's layout on targets with less shared memory than
 * sm_80's (sm_86, sm_89, sm_12x: 99 KB a block): bits over the defaults
 * above, 0 keeping them. FSA_QT_FWD_ONE_SET: one set of 16 rows per warp
 * where the kernel takes two; FSA_QT_FWD_KEYS_32: stages of 32 keys where
 * fsa_qt_fwd_keys gives 64. A bit that changes nothing is never set
 * (fsa_qt_fwd_layout_canon), so one kernel has one layout value: the plan
 * renders it as the template parameter QT_FWD, part of the kernel's key
 * only when nonzero. The warpgroup forward (wg nonzero) keeps 0. */
#define FSA_QT_FWD_ONE_SET 1
#define FSA_QT_FWD_KEYS_32 2
FSA_LAYOUT_FN int fsa_qt_fwd_keys_at(int dv, int layout)
{
    return layout & FSA_QT_FWD_KEYS_32 ? 32 : fsa_qt_fwd_keys(dv);
}
/* The row sets per warp of a kernel that takes mt (1 or 2) by default. */
FSA_LAYOUT_FN int fsa_qt_fwd_mt_at(int mt, int layout) { return layout & FSA_QT_FWD_ONE_SET ? 1 : mt; }
FSA_LAYOUT_FN int fsa_qt_fwd_layout_canon(int dv, int mt, int layout)
{
    return (mt > 1 ? layout & FSA_QT_FWD_ONE_SET : 0) | (fsa_qt_fwd_keys(dv) > 32 ? layout & FSA_QT_FWD_KEYS_32 : 0);
}
/* Q rows (mt sets per warp) | the K stages | the V stages, stages of ks keys. */
FSA_LAYOUT_FN int fsa_qt_fwd_smem_k_mt(int dk, int mt) { return fsa_tile_bytes(FSA_QT_ROWS * mt, dk); }
FSA_LAYOUT_FN int fsa_qt_fwd_smem_v_ks(int dk, int mt, int ks)
{
    return fsa_qt_fwd_smem_k_mt(dk, mt) + FSA_QT_STAGES * fsa_tile_bytes(ks, dk);
}
FSA_LAYOUT_FN int fsa_qt_fwd_smem_bytes_ks(int dk, int dv, int mt, int ks)
{
    return fsa_qt_fwd_smem_v_ks(dk, mt, ks) + FSA_QT_STAGES * fsa_tile_bytes(ks, dv);
}
/* The shared memory of a kernel of default mt under `layout`. */
FSA_LAYOUT_FN int fsa_qt_fwd_smem_at(int dk, int dv, int mt, int layout)
{
    return fsa_qt_fwd_smem_bytes_ks(dk, dv, fsa_qt_fwd_mt_at(mt, layout), fsa_qt_fwd_keys_at(dv, layout));
}
/* The layout a plan takes for a mma.sync forward of default mt within
 * max_smem bytes a block: the defaults where they fit (every sm_80 and
 * sm_90a shape), else one row set per warp (half the query rows: the K/V
 * traffic per row doubles, nothing else changes), else also stages of 32
 * keys; 0 where none fits (the plan refuses it). `forced` (nonzero: bits a
 * test's override asks for, FSA_QT_SMALL_FWD) is added to what the target
 * needs, never taken instead of it: a forced bit that changes nothing at
 * this shape must not undo a bit the shared memory asks for. */
FSA_LAYOUT_FN int fsa_qt_fwd_layout_fit(int dk, int dv, int mt, int max_smem, int forced)
{
    const int one_set = fsa_qt_fwd_layout_canon(dv, mt, FSA_QT_FWD_ONE_SET);
    const int smallest = fsa_qt_fwd_layout_canon(dv, mt, FSA_QT_FWD_ONE_SET | FSA_QT_FWD_KEYS_32);
    const int needed = fsa_qt_fwd_smem_at(dk, dv, mt, 0) <= max_smem         ? 0
                       : fsa_qt_fwd_smem_at(dk, dv, mt, one_set) <= max_smem  ? one_set
                       : fsa_qt_fwd_smem_at(dk, dv, mt, smallest) <= max_smem ? smallest
                                                                             : 0;
    return fsa_qt_fwd_layout_canon(dv, mt, needed | forced);
}

/* The warpgroup forward (Hopper wgmma, sm_90a), variant wg (1 to 6; 0 is
 * the mma.sync forward): fsa_qt_wg_groups(wg) warpgroups of 4 warps, each
 * over 64 rows of the tile (one set of 16 rows per warp, so warp w holds set
 * w), all sharing every K/V stage of a ring of fsa_qt_wg_stages(wg) (one
 * CTA per SM with two or three warpgroups: no other CTA hides a late stage);
 * variants 2 and 3 overlap the products with the softmax (fsa_qattn_wg.cuh),
 * which costs registers that three warpgroups do not have; variant 5 is
 * variant 4 on an mbarrier ring; variant 6 (the default) is
 * variant 5 with a producer warpgroup (below). Q rows | the K
 * stages | the V stages, each a 128-byte swizzled tile of 64-column panels
 * (fsa_sw128_bytes), from a 1024-byte aligned base: the dynamic shared
 * memory carries FSA_QT_WG_ALIGN bytes of slack to find it. Head dims are
 * multiples of 64 (whole panels); other shapes keep the mma.sync forward. */
#define FSA_QT_WG_ALIGN 1024
#define FSA_QT_WG_DEFAULT 6 /* the fastest measured at Dk 128 and 192 (bench/NOTES.md, series qws and wsel) */
FSA_LAYOUT_FN int fsa_qt_wg_dims_ok(int dk, int dv) { return dk % 64 == 0 && dv % 64 == 0 && dk <= 256 && dv <= 256; }
FSA_LAYOUT_FN int fsa_qt_wg_groups(int wg) { return wg >= 4 ? 3 : wg == 3 ? 2 : 1; }
/* The variant a (dk, dv) plan gets when `wanted` is asked for: 0 where the
 * head dims do not suit; three warpgroups only up to Dv 128 (their
 * registers hold no more accumulators) and Dk 192 (three warpgroups' query
 * rows at Dk 256 leave no room for the key stages in 227 KB), else two. */
FSA_LAYOUT_FN int fsa_qt_wg_pick(int wanted, int dk, int dv)
{
    return !fsa_qt_wg_dims_ok(dk, dv) ? 0 : wanted >= 4 && (dv > 128 || dk > 192) ? 3 : wanted;
}
/* The variant a plan gets unasked: FSA_QT_WG_DEFAULT on the head dims where
 * the warpgroup forward was measured faster than the mma.sync forward (Dv
 * 128, Dk 128 to 192: bench/RESULTS.md), the mma.sync forward elsewhere. */
FSA_LAYOUT_FN int fsa_qt_wg_default(int dk, int dv)
{
    return dv == 128 && dk >= 128 && dk <= 192 ? fsa_qt_wg_pick(FSA_QT_WG_DEFAULT, dk, dv) : 0;
}
FSA_LAYOUT_FN int fsa_qt_wg_overlap(int wg) { return wg == 2 || wg == 3; }
/* Variant 5: variant 4 with the K/V ring on mbarriers (fsa_mbarrier.cuh)
 * instead of a CTA barrier per stage, whose 48 bytes follow the V stages. */
FSA_LAYOUT_FN int fsa_qt_wg_mbar(int wg) { return wg >= 5; }
/* Variant 6 (warp-specialized, fsa_qattn_ws.cuh): variant 5's three
 * warpgroups only compute, and a fourth, the producer (the CTA's last),
 * alone copies the K/V stages into the same mbarrier ring. Registers move
 * from the producer to the consumers (setmaxnreg): the 65536 the CTA of 512
 * threads got at launch hold fsa_qt_ws_producer_regs for each producer
 * thread and fsa_qt_ws_consumer_regs for each consumer thread (multiples of
 * 8). Shared memory as variant 5's. */
FSA_LAYOUT_FN int fsa_qt_wg_producer(int wg) { return wg == 6; }
FSA_LAYOUT_FN int fsa_qt_ws_producer_regs(int wg) { return wg == 6 ? 32 : 0; }
FSA_LAYOUT_FN int fsa_qt_ws_consumer_regs(int wg) { return wg == 6 ? 160 : 0; }
FSA_LAYOUT_FN int fsa_qt_wg_stages(int wg) { return wg >= 3 ? 3 : 2; }
FSA_LAYOUT_FN int fsa_qt_wg_threads(int wg) { return 128 * (fsa_qt_wg_groups(wg) + fsa_qt_wg_producer(wg)); }
FSA_LAYOUT_FN int fsa_qt_wg_rows(int wg) { return 64 * fsa_qt_wg_groups(wg); }
FSA_LAYOUT_FN int fsa_qt_wg_tokens_per_tile(int g, int wg) { return fsa_qt_wg_rows(wg) / 16 * (16 / g); }
FSA_LAYOUT_FN int fsa_qt_wg_smem_k(int dk, int wg) { return fsa_sw128_bytes(fsa_qt_wg_rows(wg), dk); }
/* Where the V stages and the mbarriers start with `stages` K/V stages. */
FSA_LAYOUT_FN int fsa_qt_wg_smem_v_at(int dk, int dv, int wg, int stages)
{
    return fsa_qt_wg_smem_k(dk, wg) + stages * fsa_sw128_bytes(fsa_qt_fwd_keys(dv), dk);
}
FSA_LAYOUT_FN int fsa_qt_wg_smem_bars_at(int dk, int dv, int wg, int stages)
{
    return fsa_qt_wg_smem_v_at(dk, dv, wg, stages) + stages * fsa_sw128_bytes(fsa_qt_fwd_keys(dv), dv);
}
FSA_LAYOUT_FN int fsa_qt_wg_smem_v(int dk, int dv, int wg) { return fsa_qt_wg_smem_v_at(dk, dv, wg, fsa_qt_wg_stages(wg)); }
FSA_LAYOUT_FN int fsa_qt_wg_smem_bars(int dk, int dv, int wg)
{
    return fsa_qt_wg_smem_bars_at(dk, dv, wg, fsa_qt_wg_stages(wg));
}
FSA_LAYOUT_FN int fsa_qt_wg_smem_bytes(int dk, int dv, int wg)
{
    return FSA_QT_WG_ALIGN + fsa_qt_wg_smem_bars(dk, dv, wg) + (fsa_qt_wg_mbar(wg) ? 48 : 0);
}
/* Variant 6's persistent form (attend_query_tiles_ws, fsa_qattn_ws.cuh: a CTA
 * walks many tiles and copies the next tile's query rows during the current
 * one): Q rows | FSA_QT_WS_PERSISTENT_STAGES K stages | as many V stages |
 * the ring's mbarriers | a second query tile at the next aligned boundary;
 * taken where the whole fits FSA_QT_WS_PERSISTENT_SMEM_MAX (sm_90's dynamic
 * shared memory per block): 226 KB at Dk = Dv = 128. Four stages measured
 * 1-2% faster than three (bench/NOTES.md, "cpers"). */
#define FSA_QT_WS_PERSISTENT_SMEM_MAX 232448
#define FSA_QT_WS_PERSISTENT_STAGES 4
FSA_LAYOUT_FN int fsa_qt_ws_smem_v(int dk, int dv, int wg)
{
    return fsa_qt_wg_smem_v_at(dk, dv, wg, FSA_QT_WS_PERSISTENT_STAGES);
}
FSA_LAYOUT_FN int fsa_qt_ws_smem_bars(int dk, int dv, int wg)
{
    return fsa_qt_wg_smem_bars_at(dk, dv, wg, FSA_QT_WS_PERSISTENT_STAGES);
}
FSA_LAYOUT_FN int fsa_qt_ws_smem_q2(int dk, int dv, int wg)
{
    return (fsa_qt_ws_smem_bars(dk, dv, wg) + 16 * FSA_QT_WS_PERSISTENT_STAGES + FSA_QT_WG_ALIGN - 1) / FSA_QT_WG_ALIGN *
           FSA_QT_WG_ALIGN;
}
FSA_LAYOUT_FN int fsa_qt_ws_persistent_smem_bytes(int dk, int dv, int wg)
{
    return FSA_QT_WG_ALIGN + fsa_qt_ws_smem_q2(dk, dv, wg) + fsa_qt_wg_smem_k(dk, wg);
}
FSA_LAYOUT_FN int fsa_qt_ws_persistent(int dk, int dv, int wg)
{
    return fsa_qt_wg_producer(wg) && fsa_qt_ws_persistent_smem_bytes(dk, dv, wg) <= FSA_QT_WS_PERSISTENT_SMEM_MAX;
}
/* A persistent kernel walks jobs w = 0 .. tiles * heads - 1 (CTA c taking c,
 * c + grid, ...): job w is CTA x of the kernel's grid of tiles (query_tile) and KV
 * head h, tile-major (a tile of every head, then the next tile), so every
 * head's longest tiles go first. (Head-major, the order of a CTA per tile and
 * head, measured slower: bench/NOTES.md, "cpers".) */
typedef struct fsa_qt_job {
    long long x;
    long long h;
} fsa_qt_job;
FSA_LAYOUT_FN fsa_qt_job fsa_qt_job_at(long long w, long long heads)
{
    fsa_qt_job j = {w / heads, 0};
    j.h = w - j.x * heads;
    return j;
}
/* A query-tile forward's shared memory (the compressed and window forwards):
 * the persistent form where it fits, else a CTA per tile of variant wg, or
 * mma.sync taking mt sets of 16 rows per warp by default, under `layout`. */
FSA_LAYOUT_FN int fsa_qt_fwd_kernel_smem(int dk, int dv, int wg, int mt, int layout)
{
    if (fsa_qt_ws_persistent(dk, dv, wg)) return fsa_qt_ws_persistent_smem_bytes(dk, dv, wg);
    return wg ? fsa_qt_wg_smem_bytes(dk, dv, wg) : fsa_qt_fwd_smem_at(dk, dv, mt, layout);
}
/* The window forward's layout (one row set per warp by default). */
FSA_LAYOUT_FN int fsa_swa_fwd_layout(int dk, int dv, int wg, int max_smem, int forced)
{
    return wg ? 0 : fsa_qt_fwd_layout_fit(dk, dv, 1, max_smem, forced);
}
/* The window forward's tokens per tile and grid (wg: its variant). */
FSA_LAYOUT_FN int fsa_qt_fwd_tile_tokens(int g, int wg) { return wg ? fsa_qt_wg_tokens_per_tile(g, wg) : fsa_qt_tokens_per_tile(g); }
FSA_LAYOUT_FN long long fsa_qt_fwd_grid_tiles(long long total_tokens, long long batch, int g, int wg)
{
    return total_tokens / fsa_qt_fwd_tile_tokens(g, wg) + batch;
}

/* ---------------------------------------------------------------- backward */
/* dq: the forward's tiles; Q rows | dO rows | the K stages | the V stages,
 * stages of 64 keys (32 for Dk over 128, which keeps dq, S and dP in
 * registers). */
FSA_LAYOUT_FN int fsa_qt_dq_keys(int dk) { return dk > 128 ? 32 : 64; }
#define FSA_QT_DQ_STATIC_SMEM (FSA_QT_ROWS * 4) /* the tile's deltas (fp32), static */
FSA_LAYOUT_FN int fsa_qt_dq_smem_do(int dk) { return fsa_tile_bytes(FSA_QT_ROWS, dk); }
FSA_LAYOUT_FN int fsa_qt_dq_smem_k(int dk, int dv) { return fsa_qt_dq_smem_do(dk) + fsa_tile_bytes(FSA_QT_ROWS, dv); }
/* dK and dV: a CTA owns FSA_QT_DKV_KEYS keys of one sequence and walks the
 * query tiles that see them. Its warps form FSA_QT_DKV_SETS sets of 4, each
 * warp of a set owning 16 keys, set i taking rows 32 i .. 32 i + 31 of every
 * query tile (16 i .. 16 i + 15 of tiles of 32 rows, below); at the end set 1
 * hands its sums to set 0 through the stage buffers (fp32, pitch d + 8;
 * fsa_qt_dkv_sums_at), which adds them in a fixed order. Heads too
 * wide for one pass (fsa_bwd_one_pass) split the columns into two parts
 * (blockIdx.z): one makes dV, the other dK, each recomputing S and dP.
 * K | V | the Q stages | the dO stages | per stage and row: the keys it
 * sees (first, last), lse (base 2), delta. */
#define FSA_QT_DKV_KEYS 64
#define FSA_QT_DKV_SETS 2
#define FSA_QT_DKV_THREADS (FSA_QT_DKV_SETS * FSA_QT_THREADS)
FSA_LAYOUT_FN int fsa_qt_dkv_parts(int dk, int dv) { return fsa_bwd_one_pass(dk, dv) ? 1 : 2; }
FSA_LAYOUT_FN int fsa_qt_dkv_smem_v(int dk) { return fsa_tile_bytes(FSA_QT_DKV_KEYS, dk); }
FSA_LAYOUT_FN int fsa_qt_dkv_smem_q(int dk, int dv) { return fsa_qt_dkv_smem_v(dk) + fsa_tile_bytes(FSA_QT_DKV_KEYS, dv); }
/* The mma.sync backward's layout on targets with less shared memory than
 * sm_80's (the 99 KB targets; sm_80 itself at Dk + Dv >= 416): bits over
 * the defaults above, 0 keeping them, one value for the pair of kernels.
 *  FSA_QT_BWD_DKV_ONE_STAGE: the dK/dV walk copies a query tile, waits for
 *      it and uses it (one stage buffer instead of two: no copy overlaps the
 *      products, the same sums in the same order);
 *  FSA_QT_BWD_DKV_ROWS_32: the walk's query tiles are 32 rows (two sets of
 *      16: each set of warps takes 16 rows of a tile) instead of 64;
 *  FSA_QT_BWD_DQ_KEYS_32: dq's stages of 32 keys where fsa_qt_dq_keys gives
 *      64 (dq sums its keys in order either way: the stage size only moves
 *      where the mma.sync products split the sum);
 *  FSA_QT_BWD_DQ_ONE_STAGE: dq copies a stage, waits for it and uses it.
 * A bit that changes nothing is never set (fsa_qt_bwd_layout_canon): the
 * plan renders the value as the template parameter QT_BWD, part of the
 * kernels' key only when nonzero. The warpgroup backward keeps 0. */
#define FSA_QT_BWD_DKV_ONE_STAGE 1
#define FSA_QT_BWD_DKV_ROWS_32 2
#define FSA_QT_BWD_DQ_KEYS_32 4
#define FSA_QT_BWD_DQ_ONE_STAGE 8
#define FSA_QT_BWD_DKV_BITS (FSA_QT_BWD_DKV_ONE_STAGE | FSA_QT_BWD_DKV_ROWS_32)
#define FSA_QT_BWD_DQ_BITS (FSA_QT_BWD_DQ_KEYS_32 | FSA_QT_BWD_DQ_ONE_STAGE)
FSA_LAYOUT_FN int fsa_qt_bwd_layout_canon(int dk, int layout)
{
    return (layout & (FSA_QT_BWD_DKV_BITS | FSA_QT_BWD_DQ_ONE_STAGE)) |
           (fsa_qt_dq_keys(dk) > 32 ? layout & FSA_QT_BWD_DQ_KEYS_32 : 0);
}
/* dq under `layout`: keys per stage, stages, and Q rows | dO rows | the K
 * stages | the V stages. */
FSA_LAYOUT_FN int fsa_qt_dq_keys_at(int dk, int layout)
{
    return layout & FSA_QT_BWD_DQ_KEYS_32 ? 32 : fsa_qt_dq_keys(dk);
}
FSA_LAYOUT_FN int fsa_qt_dq_stages_at(int layout) { return layout & FSA_QT_BWD_DQ_ONE_STAGE ? 1 : FSA_QT_STAGES; }
FSA_LAYOUT_FN int fsa_qt_dq_smem_v_at(int dk, int dv, int layout)
{
    return fsa_qt_dq_smem_k(dk, dv) + fsa_qt_dq_stages_at(layout) * fsa_tile_bytes(fsa_qt_dq_keys_at(dk, layout), dk);
}
FSA_LAYOUT_FN int fsa_qt_dq_smem_at(int dk, int dv, int layout)
{
    return fsa_qt_dq_smem_v_at(dk, dv, layout) +
           fsa_qt_dq_stages_at(layout) * fsa_tile_bytes(fsa_qt_dq_keys_at(dk, layout), dv);
}
/* dK/dV under `layout`: query rows per tile of the walk, stages, and K | V |
 * the Q stages | the dO stages | the row tables (as above). */
FSA_LAYOUT_FN int fsa_qt_dkv_rows_at(int layout) { return layout & FSA_QT_BWD_DKV_ROWS_32 ? 32 : FSA_QT_ROWS; }
FSA_LAYOUT_FN int fsa_qt_dkv_stages_at(int layout) { return layout & FSA_QT_BWD_DKV_ONE_STAGE ? 1 : FSA_QT_STAGES; }
FSA_LAYOUT_FN int fsa_qt_dkv_tile_tokens(int g, int layout) { return fsa_qt_dkv_rows_at(layout) / 16 * (16 / g); }
FSA_LAYOUT_FN int fsa_qt_dkv_smem_do_at(int dk, int dv, int layout)
{
    return fsa_qt_dkv_smem_q(dk, dv) + fsa_qt_dkv_stages_at(layout) * fsa_tile_bytes(fsa_qt_dkv_rows_at(layout), dk);
}
FSA_LAYOUT_FN int fsa_qt_dkv_smem_rows_at(int dk, int dv, int layout)
{
    return fsa_qt_dkv_smem_do_at(dk, dv, layout) +
           fsa_qt_dkv_stages_at(layout) * fsa_tile_bytes(fsa_qt_dkv_rows_at(layout), dv);
}
FSA_LAYOUT_FN int fsa_qt_dkv_smem_at(int dk, int dv, int layout)
{
    return fsa_qt_dkv_smem_rows_at(dk, dv, layout) + fsa_qt_dkv_stages_at(layout) * 4 * fsa_qt_dkv_rows_at(layout) * 4;
}
/* At the end of a key tile set 1 hands its fp32 sums (pitch d + 8) to set 0
 * through shared memory that nothing uses any more: the stage buffers where
 * they hold dK's and dV's together (the default layout), else everything
 * before the row tables (K and V too), and there dK's and then dV's
 * (fsa_qt_dkv_sums_serial) where the two together do not fit. */
FSA_LAYOUT_FN int fsa_qt_dkv_sums_bytes(int d) { return FSA_QT_DKV_KEYS * (d + 8) * 4; }
FSA_LAYOUT_FN int fsa_qt_dkv_sums_at(int dk, int dv, int layout)
{
    const int both = fsa_qt_dkv_sums_bytes(dk) + fsa_qt_dkv_sums_bytes(dv);
    return both <= fsa_qt_dkv_smem_rows_at(dk, dv, layout) - fsa_qt_dkv_smem_q(dk, dv) ? fsa_qt_dkv_smem_q(dk, dv) : 0;
}
FSA_LAYOUT_FN int fsa_qt_dkv_sums_serial(int dk, int dv, int layout)
{
    return fsa_qt_dkv_sums_bytes(dk) + fsa_qt_dkv_sums_bytes(dv) >
           fsa_qt_dkv_smem_rows_at(dk, dv, layout) - fsa_qt_dkv_sums_at(dk, dv, layout);
}
/* Whether the layout's dK/dV kernel can hand its sums over at all. */
FSA_LAYOUT_FN int fsa_qt_dkv_layout_ok(int dk, int dv, int layout)
{
    const int room = fsa_qt_dkv_smem_rows_at(dk, dv, layout) - fsa_qt_dkv_sums_at(dk, dv, layout);
    return fsa_qt_dkv_sums_bytes(dk) <= room && fsa_qt_dkv_sums_bytes(dv) <= room;
}
/* The layout a plan takes for the mma.sync backward within max_smem bytes a
 * block, each kernel on its own: the defaults where they fit (every sm_90a
 * shape; sm_80 below Dk + Dv = 416), else for dK/dV one stage, then also
 * tiles of 32 rows, and for dq stages of 32 keys, then also one stage; the
 * smallest where none fits (the plan then refuses the kernel, naming it).
 * `forced` (nonzero: bits a test's override asks for, FSA_QT_SMALL_BWD) is
 * added to those, canonical, wherever the kernel can take it: never taken
 * instead, so a forced layout fits wherever the plan's does. */
FSA_LAYOUT_FN int fsa_qt_dkv_layout_fits(int dk, int dv, int layout, int max_smem)
{
    return fsa_qt_dkv_layout_ok(dk, dv, layout) && fsa_qt_dkv_smem_at(dk, dv, layout) <= max_smem;
}
FSA_LAYOUT_FN int fsa_qt_bwd_layout_fit(int dk, int dv, int max_smem, int forced)
{
    const int one = FSA_QT_BWD_DKV_ONE_STAGE, rows = FSA_QT_BWD_DKV_ROWS_32;
    const int keys = FSA_QT_BWD_DQ_KEYS_32, dq_one = FSA_QT_BWD_DQ_ONE_STAGE;
    const int dkv = fsa_qt_dkv_smem_at(dk, dv, 0) <= max_smem                                          ? 0
                    : fsa_qt_dkv_layout_fits(dk, dv, one, max_smem) || !fsa_qt_dkv_layout_ok(dk, dv, one | rows) ? one
                                                                                                          : one | rows;
    /* (the dq kernel also holds the tile's deltas in static shared memory) */
    const int dq_max = max_smem - FSA_QT_DQ_STATIC_SMEM;
    const int dq = fsa_qt_dq_smem_at(dk, dv, 0) <= dq_max      ? 0
                   : fsa_qt_dq_smem_at(dk, dv, keys) <= dq_max ? keys
                                                               : keys | dq_one;
    /* The override's bits join the needed ones (one stage alone always hands its sums over). */
    const int forced_dkv = forced & FSA_QT_BWD_DKV_BITS;
    const int dkv_all = fsa_qt_dkv_layout_ok(dk, dv, dkv | forced_dkv) ? dkv | forced_dkv : dkv | (forced_dkv & one);
    return fsa_qt_bwd_layout_canon(dk, dkv_all | dq | (forced & FSA_QT_BWD_DQ_BITS));
}
/* CTAs along x for `keys` keys in B sequences (as fsa_qt_grid_tiles). */
FSA_LAYOUT_FN long long fsa_qt_grid_key_tiles(long long keys, long long batch)
{
    return keys / FSA_QT_DKV_KEYS + batch;
}

/* The warpgroup backward (Hopper wgmma, sm_90a), variant wgb (0: the
 * mma.sync kernels above), for head dims in whole 64-column panels whose dK
 * and dV fit one pass (fsa_qt_wgb_dims_ok). One CTA per SM; tiles are
 * 128-byte swizzled (fsa_sw128_bytes) from a 1024-byte aligned base (the
 * dynamic shared memory carries FSA_QT_WG_ALIGN bytes of slack).
 *  dq:    wgb (2 or 3) warpgroups of 64 query rows (warp w: set w, so
 *         fsa_qt_wgb_dq_tokens(g, wgb) tokens per tile), all sharing stages
 *         of fsa_qt_wgb_dq_keys keys. Q rows | dO rows | the K stages | the
 *         V stages. Three warpgroups only up to Dk 192, with stages of 32
 *         keys above Dk 128 (their registers hold no more of dq, S and dP).
 *  dK/dV: FSA_QT_WGB_GROUPS warpgroups; a CTA owns FSA_QT_DKV_KEYS keys
 *         (warp w of each warpgroup: keys 16 w ..) and walks stages of
 *         fsa_qt_wgb_dkv_rows query rows, each warpgroup taking
 *         fsa_qt_wgb_dkv_cols of them (the columns of its S^T); at the end
 *         warpgroup 1 hands its sums to warpgroup 0. K | V | the Q stages |
 *         the dO stages | per stage and row: the keys it sees (first, last),
 *         lse (base 2), delta. */
#define FSA_QT_WGB_GROUPS 2
#define FSA_QT_WGB_THREADS (128 * FSA_QT_WGB_GROUPS)
#define FSA_QT_WGB_STAGES_MAX_BYTES (200 * 1024) /* three stages where they fit in this, else two */
FSA_LAYOUT_FN int fsa_qt_wgb_dims_ok(int dk, int dv)
{
    return dk % 64 == 0 && dv % 64 == 0 && dk <= 256 && dv <= 256 && fsa_bwd_one_pass(dk, dv);
}
/* The variant a (dk, dv) plan gets when `wanted` (0, 2 or 3) is asked for. */
/* Variants: 2 and 3 warpgroups in dq; 4 (three) and 5 (two) with the
 * dK/dV warpgroups each on a ring of stages of its own (own copies and
 * barriers: they do not wait for each other between stages). */
FSA_LAYOUT_FN int fsa_qt_wgb_groups(int wgb) { return wgb == 3 || wgb == 4 ? 3 : 2; }
FSA_LAYOUT_FN int fsa_qt_wgb_split(int wgb) { return wgb >= 4; }
FSA_LAYOUT_FN int fsa_qt_wgb_pick(int wanted, int dk, int dv)
{
    if (!fsa_qt_wgb_dims_ok(dk, dv) || wanted < 2) return 0;
    if (wanted > 5) wanted = 5;
    return fsa_qt_wgb_groups(wanted) == 3 && dk > 192 ? (wanted == 3 ? 2 : 5) : wanted;
}
/* The variant a plan gets unasked: 4 up to Dk 192 (measured fastest:
 * bench/NOTES.md), 2 above (where 4 would be 5, not measured). */
FSA_LAYOUT_FN int fsa_qt_wgb_default(int dk, int dv) { return fsa_qt_wgb_pick(dk <= 192 ? 4 : 2, dk, dv); }
FSA_LAYOUT_FN int fsa_qt_wgb_dq_keys(int dk, int wgb) { return fsa_qt_wgb_groups(wgb) == 3 && dk > 128 ? 32 : 64; }
FSA_LAYOUT_FN int fsa_qt_wgb_dq_rows(int wgb) { return 64 * fsa_qt_wgb_groups(wgb); }
/* The warpgroup dq kernel's static shared memory: its tile's deltas (fp32). */
FSA_LAYOUT_FN int fsa_qt_wgb_dq_static_smem(int wgb) { return fsa_qt_wgb_dq_rows(wgb) * 4; }
FSA_LAYOUT_FN int fsa_qt_wgb_dq_tokens(int g, int wgb) { return fsa_qt_wgb_dq_rows(wgb) / 16 * (16 / g); }
FSA_LAYOUT_FN int fsa_qt_wgb_dq_smem_do(int dk, int wgb) { return fsa_sw128_bytes(fsa_qt_wgb_dq_rows(wgb), dk); }
FSA_LAYOUT_FN int fsa_qt_wgb_dq_smem_k(int dk, int dv, int wgb)
{
    return fsa_qt_wgb_dq_smem_do(dk, wgb) + fsa_sw128_bytes(fsa_qt_wgb_dq_rows(wgb), dv);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dq_stage_bytes(int dk, int dv, int wgb)
{
    return fsa_sw128_bytes(fsa_qt_wgb_dq_keys(dk, wgb), dk) + fsa_sw128_bytes(fsa_qt_wgb_dq_keys(dk, wgb), dv);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dq_stages(int dk, int dv, int wgb)
{
    return fsa_qt_wgb_dq_smem_k(dk, dv, wgb) + 3 * fsa_qt_wgb_dq_stage_bytes(dk, dv, wgb) <= FSA_QT_WGB_STAGES_MAX_BYTES ? 3
                                                                                                                : 2;
}
FSA_LAYOUT_FN int fsa_qt_wgb_dq_smem_v(int dk, int dv, int wgb)
{
    return fsa_qt_wgb_dq_smem_k(dk, dv, wgb) + fsa_qt_wgb_dq_stages(dk, dv, wgb) * fsa_sw128_bytes(fsa_qt_wgb_dq_keys(dk, wgb), dk);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dq_smem_bytes(int dk, int dv, int wgb)
{
    return FSA_QT_WG_ALIGN + fsa_qt_wgb_dq_smem_k(dk, dv, wgb) +
           fsa_qt_wgb_dq_stages(dk, dv, wgb) * fsa_qt_wgb_dq_stage_bytes(dk, dv, wgb);
}
/* Query rows per warpgroup product of the dK/dV pass: 64, or 32 next to
 * more than 256 columns of dK and dV (their accumulators and two sets of
 * scores would not fit in the registers). */
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_cols(int dk, int dv) { return dk + dv > 256 ? 32 : 64; }
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_rows(int dk, int dv) { return FSA_QT_WGB_GROUPS * fsa_qt_wgb_dkv_cols(dk, dv); }
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_tokens(int g, int dk, int dv) { return fsa_qt_wgb_dkv_rows(dk, dv) / 16 * (16 / g); }
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_smem_v(int dk) { return fsa_sw128_bytes(FSA_QT_DKV_KEYS, dk); }
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_smem_q(int dk, int dv)
{
    return fsa_qt_wgb_dkv_smem_v(dk) + fsa_sw128_bytes(FSA_QT_DKV_KEYS, dv);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_stage_bytes(int dk, int dv)
{
    return fsa_sw128_bytes(fsa_qt_wgb_dkv_rows(dk, dv), dk) + fsa_sw128_bytes(fsa_qt_wgb_dkv_rows(dk, dv), dv) +
           16 * fsa_qt_wgb_dkv_rows(dk, dv);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_stages(int dk, int dv)
{
    return fsa_qt_wgb_dkv_smem_q(dk, dv) + 3 * fsa_qt_wgb_dkv_stage_bytes(dk, dv) <= FSA_QT_WGB_STAGES_MAX_BYTES ? 3 : 2;
}
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_smem_do(int dk, int dv)
{
    return fsa_qt_wgb_dkv_smem_q(dk, dv) + fsa_qt_wgb_dkv_stages(dk, dv) * fsa_sw128_bytes(fsa_qt_wgb_dkv_rows(dk, dv), dk);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_smem_rows(int dk, int dv)
{
    return fsa_qt_wgb_dkv_smem_do(dk, dv) + fsa_qt_wgb_dkv_stages(dk, dv) * fsa_sw128_bytes(fsa_qt_wgb_dkv_rows(dk, dv), dv);
}
FSA_LAYOUT_FN int fsa_qt_wgb_dkv_smem_bytes(int dk, int dv)
{
    return FSA_QT_WG_ALIGN + fsa_qt_wgb_dkv_smem_q(dk, dv) + fsa_qt_wgb_dkv_stages(dk, dv) * fsa_qt_wgb_dkv_stage_bytes(dk, dv);
}
/* A plan's backward kernels under variant wgb: threads, shared memory, and
 * the dq kernel's tokens per tile and grid. */
FSA_LAYOUT_FN int fsa_qt_bwd_dq_threads(int wgb) { return wgb ? 128 * fsa_qt_wgb_groups(wgb) : FSA_QT_THREADS; }
FSA_LAYOUT_FN int fsa_qt_bwd_dkv_threads(int wgb) { return wgb ? FSA_QT_WGB_THREADS : FSA_QT_DKV_THREADS; }
FSA_LAYOUT_FN int fsa_qt_bwd_dq_smem(int dk, int dv, int wgb, int layout)
{
    return wgb ? fsa_qt_wgb_dq_smem_bytes(dk, dv, wgb) : fsa_qt_dq_smem_at(dk, dv, layout);
}
FSA_LAYOUT_FN int fsa_qt_bwd_dkv_smem(int dk, int dv, int wgb, int layout)
{
    return wgb ? fsa_qt_wgb_dkv_smem_bytes(dk, dv) : fsa_qt_dkv_smem_at(dk, dv, layout);
}
/* A plan's backward layout (fsa_qt_bwd_layout_fit): 0 with the warpgroup backward. */
FSA_LAYOUT_FN int fsa_qt_bwd_layout(int dk, int dv, int wgb, int max_smem, int forced)
{
    return wgb ? 0 : fsa_qt_bwd_layout_fit(dk, dv, max_smem, forced);
}
FSA_LAYOUT_FN int fsa_qt_bwd_dq_tile_tokens(int g, int wgb)
{
    return wgb ? fsa_qt_wgb_dq_tokens(g, wgb) : fsa_qt_tokens_per_tile(g);
}
FSA_LAYOUT_FN long long fsa_qt_bwd_dq_grid_tiles(long long total_tokens, long long batch, int g, int wgb)
{
    return total_tokens / fsa_qt_bwd_dq_tile_tokens(g, wgb) + batch;
}
/* The dK/dV grid's z extent: one part with the warpgroup backward. */
FSA_LAYOUT_FN int fsa_qt_bwd_dkv_parts(int dk, int dv, int wgb) { return wgb ? 1 : fsa_qt_dkv_parts(dk, dv); }

#endif
