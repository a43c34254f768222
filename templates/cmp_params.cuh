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
} fsa_cmp_params;

/* ---------------------------------------------------------------- selection */
/* Stages of 64 compressed keys. With r = BK / d compressed-token starts per
 * block and halo = (l - 1) / d earlier keys that still overlap a block, block
 * c collects keys c*r - halo .. c*r + r - 1, so a stage completes 64 / r
 * blocks; r must divide 64.
 * Q rows | the K stages | probabilities [rows][64 + 4] (fp32) | per-token
 * sums [tokens][halo + 64] | block scores [tokens][64 / r] | the running
 * top-k values [tokens][K] | their blocks [tokens][K]. */
#define FSA_CMP_SEL_KEYS 64
#define FSA_CMP_SEL_P_PITCH (FSA_CMP_SEL_KEYS + 4)
FSA_LAYOUT_FN int fsa_cmp_sel_halo(int l, int d) { return (l - 1) / d; }
FSA_LAYOUT_FN int fsa_cmp_sel_blocks_per_stage(int bk, int d) { return FSA_CMP_SEL_KEYS / (bk / d); }
FSA_LAYOUT_FN int fsa_cmp_sel_smem_k(int dk) { return fsa_tile_bytes(FSA_QT_ROWS, dk); }
FSA_LAYOUT_FN int fsa_cmp_sel_smem_p(int dk)
{
    return fsa_cmp_sel_smem_k(dk) + FSA_QT_STAGES * fsa_tile_bytes(FSA_CMP_SEL_KEYS, dk);
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_tok(int dk)
{
    return fsa_cmp_sel_smem_p(dk) + FSA_QT_ROWS * FSA_CMP_SEL_P_PITCH * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_blk(int dk, int g, int l, int d)
{
    return fsa_cmp_sel_smem_tok(dk) + fsa_qt_tokens_per_tile(g) * (fsa_cmp_sel_halo(l, d) + FSA_CMP_SEL_KEYS) * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_topv(int dk, int g, int l, int d, int bk)
{
    return fsa_cmp_sel_smem_blk(dk, g, l, d) + fsa_qt_tokens_per_tile(g) * fsa_cmp_sel_blocks_per_stage(bk, d) * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_topi(int dk, int g, int l, int d, int bk, int k)
{
    return fsa_cmp_sel_smem_topv(dk, g, l, d, bk) + fsa_qt_tokens_per_tile(g) * k * 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_bytes(int dk, int g, int l, int d, int bk, int k)
{
    return fsa_cmp_sel_smem_topi(dk, g, l, d, bk, k) + fsa_qt_tokens_per_tile(g) * k * 4;
}

/* The backward's tiles and shared memory are those of query-tile attention
 * (fsa_qt_layout.cuh): dq per query tile, dK and dV per tile of
 * FSA_QT_DKV_KEYS compressed keys. */

#endif
