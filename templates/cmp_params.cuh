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

/* ---------------------------------------------------------------- forward */
/* Query tiles of two sets of 16 rows per warp (fsa_qt_layout.cuh) up to
 * Dk = Dv = 128, one above (more would spill): its grid and shared memory
 * follow. */
FSA_LAYOUT_FN int fsa_cmp_fwd_mt(int dk, int dv) { return dk > 128 || dv > 128 ? 1 : 2; }
FSA_LAYOUT_FN int fsa_cmp_fwd_smem_bytes(int dk, int dv)
{
    return fsa_qt_fwd_smem_bytes_mt(dk, dv, fsa_cmp_fwd_mt(dk, dv));
}
FSA_LAYOUT_FN long long fsa_cmp_fwd_grid_tiles(long long total_tokens, long long batch, int g, int dk, int dv)
{
    return fsa_qt_grid_tiles_mt(total_tokens, batch, g, fsa_cmp_fwd_mt(dk, dv));
}

/* ---------------------------------------------------------------- selection */
/* Stages of 64 compressed keys. With r = BK / d compressed-token starts per
 * block and halo = (l - 1) / d earlier keys that still overlap a block, block
 * c collects keys c*r - halo .. c*r + r - 1, so a stage completes 64 / r
 * blocks; r must divide 64. A warp owns mt sets of 16 rows (two up to Dk
 * 128: each K fragment serves 32 rows; the query rows live in registers).
 * The K stages, then a region that first holds the query rows (each warp
 * reads its rows into registers once) and then, per warp, what only that
 * warp touches (no barrier between warps), for its mt * 16 / G tokens:
 *   probabilities [mt * 16 rows][64 + 4] fp32 (G > 1: rows are (token, head));
 *   per-token sums [tokens][pitch]: the last halo keys of the previous stage,
 *     then this stage's 64 keys from an even offset (key0);
 *   block scores [tokens][64 / r + 1];
 *   the running top-k, token-minor: values [K][tokens], blocks [K][tokens]. */
#define FSA_CMP_SEL_KEYS 64
#define FSA_CMP_SEL_P_PITCH (FSA_CMP_SEL_KEYS + 4)
FSA_LAYOUT_FN int fsa_cmp_sel_mt(int dk) { return dk > 128 ? 1 : 2; }
FSA_LAYOUT_FN int fsa_cmp_sel_tokens_per_warp(int g, int dk) { return fsa_cmp_sel_mt(dk) * (16 / g); }
FSA_LAYOUT_FN long long fsa_cmp_sel_grid_tiles(long long total_tokens, long long batch, int g, int dk)
{
    return fsa_qt_grid_tiles_mt(total_tokens, batch, g, fsa_cmp_sel_mt(dk));
}
FSA_LAYOUT_FN int fsa_cmp_sel_halo(int l, int d) { return (l - 1) / d; }
FSA_LAYOUT_FN int fsa_cmp_sel_blocks_per_stage(int bk, int d) { return FSA_CMP_SEL_KEYS / (bk / d); }
FSA_LAYOUT_FN int fsa_cmp_sel_key0(int l, int d) { return (fsa_cmp_sel_halo(l, d) + 1) & ~1; }
FSA_LAYOUT_FN int fsa_cmp_sel_tok_pitch(int l, int d) { return fsa_cmp_sel_key0(l, d) + FSA_CMP_SEL_KEYS; }
FSA_LAYOUT_FN int fsa_cmp_sel_blk_pitch(int bk, int d) { return fsa_cmp_sel_blocks_per_stage(bk, d) + 1; }
FSA_LAYOUT_FN int fsa_cmp_sel_warp_tok(int g, int dk)
{
    return g > 1 ? fsa_cmp_sel_mt(dk) * 16 * FSA_CMP_SEL_P_PITCH * 4 : 0;
}
FSA_LAYOUT_FN int fsa_cmp_sel_warp_blk(int g, int dk, int l, int d)
{
    return fsa_cmp_sel_warp_tok(g, dk) + fsa_cmp_sel_tokens_per_warp(g, dk) * fsa_cmp_sel_tok_pitch(l, d) * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_warp_topv(int g, int dk, int l, int d, int bk)
{
    return fsa_cmp_sel_warp_blk(g, dk, l, d) + fsa_cmp_sel_tokens_per_warp(g, dk) * fsa_cmp_sel_blk_pitch(bk, d) * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_warp_topc(int g, int dk, int l, int d, int bk, int k)
{
    return fsa_cmp_sel_warp_topv(g, dk, l, d, bk) + k * fsa_cmp_sel_tokens_per_warp(g, dk) * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_warp_bytes(int g, int dk, int l, int d, int bk, int k)
{
    return (fsa_cmp_sel_warp_topc(g, dk, l, d, bk, k) + k * fsa_cmp_sel_tokens_per_warp(g, dk) * 4 + 15) & ~15;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_q(int dk) { return FSA_QT_STAGES * fsa_tile_bytes(FSA_CMP_SEL_KEYS, dk); }
FSA_LAYOUT_FN int fsa_cmp_sel_smem_bytes(int dk, int g, int l, int d, int bk, int k)
{
    const int q = fsa_tile_bytes(FSA_QT_ROWS * fsa_cmp_sel_mt(dk), dk);
    const int w = FSA_QT_WARPS * fsa_cmp_sel_warp_bytes(g, dk, l, d, bk, k);
    return fsa_cmp_sel_smem_q(dk) + (q > w ? q : w);
}

/* ---------------------------------------------------------------- backward */
/* dq: the forward's tiles (two sets of 16 rows per warp up to Dk = Dv = 128,
 * in stages of 32 keys; otherwise one set and stages of 64 keys, 32 for Dk
 * over 128, which keeps dq, S and dP in registers); Q rows | dO rows | the K
 * stages | the V stages. G = 1 keeps one set: with two its kernel spills. */
FSA_LAYOUT_FN int fsa_cmp_dq_mt(int dk, int dv, int g) { return dk > 128 || dv > 128 || g == 1 ? 1 : 2; }
FSA_LAYOUT_FN int fsa_cmp_dq_keys(int dk, int dv, int g)
{
    return fsa_cmp_dq_mt(dk, dv, g) > 1 || dk > 128 ? 32 : 64;
}
FSA_LAYOUT_FN int fsa_cmp_dq_rows(int dk, int dv, int g) { return FSA_QT_ROWS * fsa_cmp_dq_mt(dk, dv, g); }
FSA_LAYOUT_FN int fsa_cmp_dq_smem_do(int dk, int dv, int g) { return fsa_tile_bytes(fsa_cmp_dq_rows(dk, dv, g), dk); }
FSA_LAYOUT_FN int fsa_cmp_dq_smem_k(int dk, int dv, int g)
{
    return fsa_cmp_dq_smem_do(dk, dv, g) + fsa_tile_bytes(fsa_cmp_dq_rows(dk, dv, g), dv);
}
FSA_LAYOUT_FN int fsa_cmp_dq_smem_v(int dk, int dv, int g)
{
    return fsa_cmp_dq_smem_k(dk, dv, g) + FSA_QT_STAGES * fsa_tile_bytes(fsa_cmp_dq_keys(dk, dv, g), dk);
}
FSA_LAYOUT_FN int fsa_cmp_dq_smem_bytes(int dk, int dv, int g)
{
    return fsa_cmp_dq_smem_v(dk, dv, g) + FSA_QT_STAGES * fsa_tile_bytes(fsa_cmp_dq_keys(dk, dv, g), dv);
}
FSA_LAYOUT_FN long long fsa_cmp_dq_grid_tiles(long long total_tokens, long long batch, int g, int dk, int dv)
{
    return fsa_qt_grid_tiles_mt(total_tokens, batch, g, fsa_cmp_dq_mt(dk, dv, g));
}
/* dK and dV: a CTA owns 64 compressed keys of one sequence (a warp per 16)
 * and walks the query tiles that see them. The dK and dV columns are split
 * into parts (blockIdx.z) so that the accumulators of a part stay at most
 * 128 floats per thread; each part recomputes S and dP.
 * K | V | the Q stages | the dO stages | per stage and row: position, lse
 * (base 2), delta. */
#define FSA_CMP_DKV_KEYS 64
FSA_LAYOUT_FN int fsa_cmp_dkv_parts(int dk, int dv) { return (dk + dv + 255) / 256; }
FSA_LAYOUT_FN int fsa_cmp_dkv_smem_v(int dk) { return fsa_tile_bytes(FSA_CMP_DKV_KEYS, dk); }
FSA_LAYOUT_FN int fsa_cmp_dkv_smem_q(int dk, int dv)
{
    return fsa_cmp_dkv_smem_v(dk) + fsa_tile_bytes(FSA_CMP_DKV_KEYS, dv);
}
FSA_LAYOUT_FN int fsa_cmp_dkv_smem_do(int dk, int dv)
{
    return fsa_cmp_dkv_smem_q(dk, dv) + FSA_QT_STAGES * fsa_tile_bytes(FSA_QT_ROWS, dk);
}
FSA_LAYOUT_FN int fsa_cmp_dkv_smem_rows(int dk, int dv)
{
    return fsa_cmp_dkv_smem_do(dk, dv) + FSA_QT_STAGES * fsa_tile_bytes(FSA_QT_ROWS, dv);
}
FSA_LAYOUT_FN int fsa_cmp_dkv_smem_bytes(int dk, int dv)
{
    return fsa_cmp_dkv_smem_rows(dk, dv) + FSA_QT_STAGES * 3 * FSA_QT_ROWS * 4;
}
/* CTAs along x for Tc compressed tokens in B sequences (as fsa_qt_grid_tiles). */
FSA_LAYOUT_FN long long fsa_cmp_grid_key_tiles(long long total_cmp, long long batch)
{
    return total_cmp / FSA_CMP_DKV_KEYS + batch;
}
/* Few key tiles (short inputs, few KV heads: 2 x 64 CTAs at T = 65536,
 * G = 16) leave most of the GPU idle while the first tiles walk every query
 * after them. Then the queries of each key tile are split into ranges
 * (blockIdx.z / parts) that write fp32 partial dK and dV; a second kernel
 * sums them in split order (deterministic). Splits until about
 * FSA_CMP_DKV_MIN_CTAS CTAs, at most FSA_CMP_DKV_MAX_SPLITS. */
#define FSA_CMP_DKV_MIN_CTAS 1024
#define FSA_CMP_DKV_MAX_SPLITS 16
FSA_LAYOUT_FN int fsa_cmp_dkv_splits(long long key_tiles, int hkv, int parts)
{
    const long long n = key_tiles * hkv * parts, s = (FSA_CMP_DKV_MIN_CTAS + n - 1) / n;
    return n >= FSA_CMP_DKV_MIN_CTAS ? 1 : (int)(s < FSA_CMP_DKV_MAX_SPLITS ? s : FSA_CMP_DKV_MAX_SPLITS);
}
/* Bytes of the partials of `splits` ranges (none for one). */
FSA_LAYOUT_FN long long fsa_cmp_dkv_partial_bytes(int splits, long long key_tiles, int hkv, int dk, int dv)
{
    return splits > 1 ? (long long)splits * key_tiles * hkv * FSA_CMP_DKV_KEYS * (dk + dv) * 4 : 0;
}

#endif
