/* Compressed attention and block selection: the kernels' one argument and
 * their launch shapes and shared-memory layouts. Plain C that the host
 * library and NVRTC both compile, so the two cannot disagree. Every field of
 * the parameter block is 8 bytes: no padding. */
#ifndef FSA_CMP_PARAMS_CUH
#define FSA_CMP_PARAMS_CUH

#include "fsa_qt_layout.cuh"

typedef struct fsa_cmp_params {
    fsa_kernel_view q, o;     /* [T, Hq, Dk], [T, Hq, Dv] */
    fsa_kernel_view k, v;     /* [Tc, Hkv, Dk], [Tc, Hkv, Dv] */
    fsa_kernel_view topk;     /* int32 rows of K blocks; ptr 0: no selection */
    long long lse;            /* float [Hq, T], natural log */
    long long cu_seqlens;     /* int32 [B + 1]: query tokens of each sequence */
    long long cu_seqlens_c;   /* int32 [B + 1]: compressed tokens of each sequence */
    long long total_tokens;   /* T */
    long long total_cmp;      /* Tc */
    long long batch;
    double scale_log2;        /* softmax scale * log2(e) */
    long long kernel_size;    /* l: compressed token j covers positions j*d .. j*d + l - 1 */
    long long stride;         /* d */
    long long init_blocks;    /* selection: the first blocks always taken */
    long long local_blocks;   /* selection: the blocks ending at the query's own block always taken */
    /* Backward. */
    fsa_kernel_view dout, dq; /* [T, Hq, Dv], [T, Hq, Dk] */
    fsa_kernel_view dk, dv;   /* [Tc, Hkv, Dk], [Tc, Hkv, Dv] */
    long long delta;          /* float [Hq, T]: rowsum(dout * o), written by the dq kernel */
    long long dkv_splits;     /* query ranges a key tile's dK/dV is split into (1: written directly) */
    long long dkv_partial;    /* float [splits][key tiles][Hkv][64][Dk + Dv] when split */
} fsa_cmp_params;

/* The compressed tokens a sequence of len positions has: token j covers
 * positions j*d .. j*d + l - 1, and every token whose positions all lie in
 * the sequence is there (the last position sees exactly these). Check mode
 * holds cu_seqlens_c to it. */
FSA_LAYOUT_FN long long fsa_cmp_tokens(long long len, long long l, long long d)
{
    return len < l ? 0 : (len - l) / d + 1;
}

/* ---------------------------------------------------------------- forward */
/* Query tiles of two sets of 16 rows per warp (fsa_qt_layout.cuh) up to
 * Dk = Dv = 128, one above (more would spill); the warpgroup forward (wg:
 * wgmma on sm_90a) has its own tiles. Grid and shared memory follow. */
FSA_LAYOUT_FN int fsa_cmp_fwd_mt(int dk, int dv) { return dk > 128 || dv > 128 ? 1 : 2; }
FSA_LAYOUT_FN int fsa_cmp_fwd_tile_tokens(int g, int dk, int dv, int wg)
{
    return wg ? fsa_qt_wg_tokens_per_tile(g, wg) : fsa_qt_tokens_per_tile_mt(g, fsa_cmp_fwd_mt(dk, dv));
}
FSA_LAYOUT_FN int fsa_cmp_fwd_smem_bytes(int dk, int dv, int wg)
{
    return wg ? fsa_qt_wg_smem_bytes(dk, dv, wg) : fsa_qt_fwd_smem_bytes_mt(dk, dv, fsa_cmp_fwd_mt(dk, dv));
}
FSA_LAYOUT_FN long long fsa_cmp_fwd_grid_tiles(long long total_tokens, long long batch, int g, int dk, int dv, int wg)
{
    return total_tokens / fsa_cmp_fwd_tile_tokens(g, dk, dv, wg) + batch;
}

/* ---------------------------------------------------------------- selection */
/* Stages of 64 compressed keys. With r = BK / d compressed-token starts per
 * block and halo = (l - 1) / d earlier keys that still overlap a block, block
 * c collects keys c*r - halo .. c*r + r - 1, so a stage completes 64 / r
 * blocks; r must divide 64. A warp owns mt sets of 16 rows (two up to Dk
 * 192 and top-k 32: each K fragment serves 32 rows) and keeps their query
 * fragments in registers up to top-k 32; a longer top-k list takes those
 * registers (128 at k = 64), so the fragments are read from shared memory
 * at every stage and the region of the query rows stays theirs.
 * A token's blocks are shared by `lanes` lanes of its warp (block c to lane
 * c mod lanes, a power of two), each keeping the top-k of its share in
 * registers. The K stages, then a region that first holds the query rows
 * (each warp reads its rows into registers once) and then, per warp, what
 * only that warp touches (no barrier between warps), for its mt * 16 / G
 * tokens:
 *   probabilities [mt * 16 rows][64 + 4] fp32, only where G is not a power of
 *     two (rows are (token, head); otherwise the heads are summed in registers);
 *   per-token sums [tokens][odd pitch]: the last halo keys of the previous
 *     stage, then this stage's 64 keys from an even offset (key0). */
#define FSA_CMP_SEL_KEYS 64
#define FSA_CMP_SEL_P_PITCH (FSA_CMP_SEL_KEYS + 4)
FSA_LAYOUT_FN int fsa_cmp_sel_q_in_registers(int k) { return k <= 32; }
FSA_LAYOUT_FN int fsa_cmp_sel_mt(int dk, int k) { return dk > 192 || !fsa_cmp_sel_q_in_registers(k) ? 1 : 2; }
FSA_LAYOUT_FN int fsa_cmp_sel_tokens_per_warp(int g, int dk, int k) { return fsa_cmp_sel_mt(dk, k) * (16 / g); }
FSA_LAYOUT_FN int fsa_cmp_sel_lanes_per_token(int g, int dk, int k)
{
    int s = 1;
    while (2 * s * fsa_cmp_sel_tokens_per_warp(g, dk, k) <= 32) s *= 2;
    return s;
}
FSA_LAYOUT_FN int fsa_cmp_sel_heads_in_registers(int g) { return (g & (g - 1)) == 0; }
FSA_LAYOUT_FN long long fsa_cmp_sel_grid_tiles(long long total_tokens, long long batch, int g, int dk, int k)
{
    return fsa_qt_grid_tiles_mt(total_tokens, batch, g, fsa_cmp_sel_mt(dk, k));
}
FSA_LAYOUT_FN int fsa_cmp_sel_halo(int l, int d) { return (l - 1) / d; }
FSA_LAYOUT_FN int fsa_cmp_sel_blocks_per_stage(int bk, int d) { return FSA_CMP_SEL_KEYS / (bk / d); }
FSA_LAYOUT_FN int fsa_cmp_sel_key0(int l, int d) { return (fsa_cmp_sel_halo(l, d) + 1) & ~1; }
/* Odd: the lanes that each sum a different token's blocks read different banks. */
FSA_LAYOUT_FN int fsa_cmp_sel_tok_pitch(int l, int d) { return (fsa_cmp_sel_key0(l, d) + FSA_CMP_SEL_KEYS) | 1; }
FSA_LAYOUT_FN int fsa_cmp_sel_warp_tok(int g, int dk, int k)
{
    return fsa_cmp_sel_heads_in_registers(g) ? 0 : fsa_cmp_sel_mt(dk, k) * 16 * FSA_CMP_SEL_P_PITCH * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_warp_bytes(int g, int dk, int l, int d, int k)
{
    return (fsa_cmp_sel_warp_tok(g, dk, k) + fsa_cmp_sel_tokens_per_warp(g, dk, k) * fsa_cmp_sel_tok_pitch(l, d) * 4 +
            15) &
           ~15;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_q(int dk) { return FSA_QT_STAGES * fsa_tile_bytes(FSA_CMP_SEL_KEYS, dk); }
/* Where the warps' buffers start after the query rows' region: over it when
 * the fragments live in registers, after it otherwise. */
FSA_LAYOUT_FN int fsa_cmp_sel_smem_warps(int dk, int k)
{
    return fsa_cmp_sel_smem_q(dk) +
           (fsa_cmp_sel_q_in_registers(k) ? 0 : fsa_tile_bytes(FSA_QT_ROWS * fsa_cmp_sel_mt(dk, k), dk));
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_bytes(int dk, int g, int l, int d, int k)
{
    const int q = fsa_cmp_sel_smem_q(dk) + fsa_tile_bytes(FSA_QT_ROWS * fsa_cmp_sel_mt(dk, k), dk);
    const int w = fsa_cmp_sel_smem_warps(dk, k) + FSA_QT_WARPS * fsa_cmp_sel_warp_bytes(g, dk, l, d, k);
    return q > w ? q : w;
}

/* The backward's tiles and shared memory are those of query-tile attention
 * (fsa_qt_layout.cuh): dq per query tile, dK and dV per tile of
 * FSA_QT_DKV_KEYS compressed keys. */

#endif
