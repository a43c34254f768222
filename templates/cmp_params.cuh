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
    long long num_kv_heads;   /* Hkv (the persistent forward's jobs: fsa_cmp_fwd_persistent) */
    /* Backward. */
    fsa_kernel_view dout, dq; /* [T, Hq, Dv], [T, Hq, Dk] */
    fsa_kernel_view dq_add;   /* [T, Hq, Dk] added to dq before its rounding (may be dq); ptr 0: none */
    fsa_kernel_view gate;      /* float [T, Hq]: each row's gate (dout is that of gate * o); ptr 0: none */
    fsa_kernel_view gate_grad; /* float [T, Hq], written: rowsum(dout * o); ptr 0: not wanted */
    fsa_kernel_view dk, dv;   /* [Tc, Hkv, Dk], [Tc, Hkv, Dv] */
    long long delta;          /* float [Hq, T]: rowsum(dout * o), written by the dq kernel */
    long long gated_lse;      /* float [Hq, T]: a gated backward's lse words (fsa_qbwd.cuh), by the dq kernel */
    long long dkv_splits;     /* CTAs a key tile's dK/dV walk is split into (1: dk, dv written directly) */
    long long dkv_partial;    /* float [splits][Tc][Hkv][Dk + Dv] when split (fsa_cmp_dkv_splits) */
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
 * wgmma on sm_90a) has its own tiles. `layout` (fsa_qt_fwd_layout_fit,
 * fsa_cmp_fwd_layout) shrinks the mma.sync forward where the target's
 * shared memory asks for it. Grid and shared memory follow. */
FSA_LAYOUT_FN int fsa_cmp_fwd_mt(int dk, int dv) { return dk > 128 || dv > 128 ? 1 : 2; }
FSA_LAYOUT_FN int fsa_cmp_fwd_layout(int dk, int dv, int wg, int max_smem, int forced)
{
    return wg ? 0 : fsa_qt_fwd_layout_fit(dk, dv, fsa_cmp_fwd_mt(dk, dv), max_smem, forced);
}
FSA_LAYOUT_FN int fsa_cmp_fwd_mt_at(int dk, int dv, int wg, int layout)
{
    return wg ? 1 : fsa_qt_fwd_mt_at(fsa_cmp_fwd_mt(dk, dv), layout);
}
FSA_LAYOUT_FN int fsa_cmp_fwd_tile_tokens(int g, int dk, int dv, int wg, int layout)
{
    return wg ? fsa_qt_wg_tokens_per_tile(g, wg) : fsa_qt_tokens_per_tile_mt(g, fsa_cmp_fwd_mt_at(dk, dv, wg, layout));
}
/* Persistent (variant 6 where it fits: fsa_qt_ws_persistent): a grid of at
 * most one CTA per SM walks the (query tile, KV head) jobs in fsa_qt_job_at's
 * order; otherwise a CTA per tile and head. */
FSA_LAYOUT_FN int fsa_cmp_fwd_persistent(int dk, int dv, int wg) { return fsa_qt_ws_persistent(dk, dv, wg); }
FSA_LAYOUT_FN int fsa_cmp_fwd_smem_bytes(int dk, int dv, int wg, int layout)
{
    return fsa_qt_fwd_kernel_smem(dk, dv, wg, fsa_cmp_fwd_mt(dk, dv), layout);
}
FSA_LAYOUT_FN long long fsa_cmp_fwd_grid_tiles(long long total_tokens, long long batch, int g, int dk, int dv, int wg,
                                               int layout)
{
    return total_tokens / fsa_cmp_fwd_tile_tokens(g, dk, dv, wg, layout) + batch;
}

/* ---------------------------------------------------------------- selection */
/* Stages of 64 compressed keys. With r = BK / d compressed-token starts per
 * block and halo = (l - 1) / d earlier keys that still overlap a block, block
 * c collects keys c*r - halo .. c*r + r - 1, so a stage completes 64 / r
 * blocks; r must divide 64.
 * Two ways to compute S = Q K^T (groups = fsa_cmp_sel_groups): on sm_90a
 * (wgmma nonzero in the plan's configuration) with head dims a multiple of
 * 64 and top-k up to 32, `groups` warpgroups of 4 warps share every K stage,
 * Q read from a swizzled tile in shared memory by warpgroup products (one
 * set of 16 rows per warp; three warpgroups, the latency of each one's
 * chains hidden by the others, beat two that overlap the next stage's
 * products with a stage's epilogue); otherwise mma.sync, a warp owning mt sets of 16
 * rows (two for groups of 2 to 8 up to Dk 128 and top-k 32: each K
 * fragment serves 32 rows; other groups' top-k lists and scores take the
 * registers of a second set) and
 * keeping their query fragments in registers up to top-k 32 (a longer list
 * takes those registers: 128 at k = 64, so the fragments are read from
 * shared memory at every stage and the region of the query rows stays
 * theirs).
 * A token's blocks are shared by `lanes` lanes of its warp (block c to lane
 * c mod lanes, a power of two up to 16), each keeping the top-k of its share
 * in registers. Per stage each warp writes the block scores of its tokens
 * (summed over keys and heads on tensor cores) to a buffer of its own,
 * [tokens][pitch] floats with pitch = 4 mod 16 (a warp's stores of one
 * register meet no bank twice); only that warp touches it. mma.sync: the K
 * stages, then a region that first holds the query rows (each warp reads
 * its rows into registers once) and then the warps' buffers; wgmma: the
 * query tile (1024-byte aligned), the K stages, the warps' buffers. */
#define FSA_CMP_SEL_KEYS 64
/* K stages in flight with warpgroups: three, two above Dk 192 (shared
 * memory). With the forwards' variant 5 or 6 (fsa_qt_wg_mbar) up to Dk 192
 * the ring is on mbarriers (their 48 bytes follow the warps' buffers) and
 * the next stage's scores are issued early: the variants below were
 * measured at Dk 128 (bench/NOTES.md, "csel"), then at Dk 192 ("wsel"). */
FSA_LAYOUT_FN int fsa_cmp_sel_wg_stages(int dk) { return dk > 192 ? 2 : 3; }
FSA_LAYOUT_FN int fsa_cmp_sel_mbar(int wgmma, int dk) { return fsa_qt_wg_mbar(wgmma) && dk <= 192; }
/* Variants of the selection on the mbarrier ring (0 elsewhere; FSA_CMP_SEL,
 * kernels.c, picks one), bits:
 * FSA_CMP_SEL_SPREAD: where 8 or more lanes share a token's blocks (G >= 4
 * at top-k 16 and blocks of 4 compressed tokens), its top-k is one sorted
 * list spread over those lanes (cmp_sel_spread.cuh), which takes fewer
 * registers (127 / 126 at G 4 / 16 against 160 / 156);
 * FSA_CMP_SEL_FOUR: with FSA_CMP_SEL_SPREAD at G >= 4 four warpgroups (256
 * rows, 512 threads, at most 128 registers, which main's lane lists exceed:
 * they spill 16-48 bytes) instead of three: 16 warps per SM instead of 12 to
 * hide the latency of a kernel that issues at about half the slots;
 * FSA_CMP_SEL_FOUR_SMALL_G: four warpgroups at G 1 and 2 with top-k up to
 * 16 too, where each lane keeps whole lists (about 160 registers with three
 * warpgroups): at 128 they spill 88 / 96 bytes per thread (stores and loads,
 * L1-resident), which costs less than the fourth warpgroup gains (bench/
 * NOTES.md, "sel4"). Larger lists (top-k over 16) or G 3 spill far more;
 * FSA_CMP_SEL_WS: warp-specialized, a producer warpgroup (the CTA's last,
 * fsa_cmp_sel_producer) alone copies the K stages into a ProducerRing
 * (fsa_mbarrier.cuh) and the `groups` consumer warpgroups only compute;
 * registers move from the producer to the consumers (setmaxnreg): 160 with
 * three consumers (no spills at G 1 and 2), 112 with four
 * (fsa_cmp_sel_ws_consumer_regs: the spread lists fit; G 1 and 2 spill 96-108
 * bytes). Four consumers and the producer measured 1-8% faster than four
 * warpgroups that copy (6-8% at G >= 4), three consumers slower
 * (bench/NOTES.md, "csel"). */
#define FSA_CMP_SEL_SPREAD 1
#define FSA_CMP_SEL_FOUR 2
#define FSA_CMP_SEL_FOUR_SMALL_G 4
#define FSA_CMP_SEL_WS 8
#define FSA_CMP_SEL_VARIANT_MAX 15
#define FSA_CMP_SEL_VARIANT_DEFAULT 15 /* measured fastest (bench/NOTES.md, "thresh", "sel4" and "csel") */
FSA_LAYOUT_FN int fsa_cmp_sel_groups(int wgmma, int dk, int k, int g, int variant)
{
    if (!(wgmma != 0 && dk % 64 == 0 && dk <= 256 && k <= 32)) return 0;
    const int spread = (variant & FSA_CMP_SEL_SPREAD) != 0;
    /* (Not at G 1 above Dk 128: there the buffers of four warpgroups of 16
     * tokens a warp, at blocks of few compressed tokens, do not fit beside
     * their 256 query rows in shared memory.) */
    const int four = ((variant & FSA_CMP_SEL_FOUR) && spread && g >= 4) ||
                     ((variant & FSA_CMP_SEL_FOUR_SMALL_G) && g <= 2 && k <= 16 && (g == 2 || dk <= 128));
    return four && fsa_cmp_sel_mbar(wgmma, dk) ? 4 : 3;
}
#define FSA_CMP_SEL_WG_BARS 48
FSA_LAYOUT_FN int fsa_cmp_sel_warps(int groups) { return groups ? 4 * groups : FSA_QT_WARPS; }
FSA_LAYOUT_FN int fsa_cmp_sel_threads(int groups) { return 32 * fsa_cmp_sel_warps(groups); }
/* FSA_CMP_SEL_WS: a producer warpgroup after the `groups` consumers (the
 * warpgroup kernel only); the CTA's threads at launch. */
FSA_LAYOUT_FN int fsa_cmp_sel_producer(int groups, int variant) { return groups && (variant & FSA_CMP_SEL_WS) ? 1 : 0; }
FSA_LAYOUT_FN int fsa_cmp_sel_launch_threads(int groups, int variant)
{
    return fsa_cmp_sel_threads(groups) + 128 * fsa_cmp_sel_producer(groups, variant);
}
/* The registers of a producer thread and of a consumer thread: the pool the
 * CTA got at launch (one CTA per SM: 65536 / threads a thread, rounded down
 * to 8) less the producers' 32 each, over the consumers, rounded down to 8
 * (setmaxnreg takes multiples of 8). */
#define FSA_CMP_SEL_WS_PRODUCER_REGS 32
FSA_LAYOUT_FN int fsa_cmp_sel_ws_consumer_regs(int groups)
{
    const int threads = 128 * (groups + 1), pool = threads * (65536 / threads / 8 * 8);
    return (pool - 128 * FSA_CMP_SEL_WS_PRODUCER_REGS) / (128 * groups) / 8 * 8;
}
FSA_LAYOUT_FN int fsa_cmp_sel_q_in_registers(int k) { return k <= 32; }
FSA_LAYOUT_FN int fsa_cmp_sel_mt(int g, int dk, int k, int groups)
{
    return groups || g == 1 || g > 8 || dk > 128 || !fsa_cmp_sel_q_in_registers(k) ? 1 : 2;
}
FSA_LAYOUT_FN int fsa_cmp_sel_tokens_per_warp(int g, int dk, int k, int groups)
{
    return fsa_cmp_sel_mt(g, dk, k, groups) * (16 / g);
}
FSA_LAYOUT_FN int fsa_cmp_sel_tokens_per_tile(int g, int dk, int k, int groups)
{
    return fsa_cmp_sel_warps(groups) * fsa_cmp_sel_tokens_per_warp(g, dk, k, groups);
}
/* At most 16: a stage completes at most 16 blocks at the usual BK / d of 4,
 * and every lane more is one more merge of lists at the end. */
FSA_LAYOUT_FN int fsa_cmp_sel_lanes_per_token(int g, int dk, int k, int groups)
{
    int s = 1;
    while (s < 16 && 2 * s * fsa_cmp_sel_tokens_per_warp(g, dk, k, groups) <= 32) s *= 2;
    return s;
}
FSA_LAYOUT_FN long long fsa_cmp_sel_grid_tiles(long long total_tokens, long long batch, int g, int dk, int k,
                                               int groups)
{
    return total_tokens / fsa_cmp_sel_tokens_per_tile(g, dk, k, groups) + batch;
}
FSA_LAYOUT_FN int fsa_cmp_sel_halo(int l, int d) { return (l - 1) / d; }
FSA_LAYOUT_FN int fsa_cmp_sel_blocks_per_stage(int bk, int d) { return FSA_CMP_SEL_KEYS / (bk / d); }
FSA_LAYOUT_FN int fsa_cmp_sel_score_pitch(int bk, int d)
{
    return (fsa_cmp_sel_blocks_per_stage(bk, d) + 11) / 16 * 16 + 4;
}
FSA_LAYOUT_FN int fsa_cmp_sel_warp_bytes(int g, int dk, int k, int bk, int d, int groups)
{
    return (fsa_cmp_sel_tokens_per_warp(g, dk, k, groups) * fsa_cmp_sel_score_pitch(bk, d) * 4 + 15) & ~15;
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_q(int dk, int groups)
{
    return groups ? 0 : FSA_QT_STAGES * fsa_tile_bytes(FSA_CMP_SEL_KEYS, dk);
}
/* The K stages of the warpgroup selection, after its query tile. */
FSA_LAYOUT_FN int fsa_cmp_sel_smem_k(int dk, int groups) { return groups ? fsa_sw128_bytes(64 * groups, dk) : 0; }
/* Where the warps' buffers start: after the K stages (wgmma); over the query
 * rows' region when the fragments live in registers, after it otherwise. */
FSA_LAYOUT_FN int fsa_cmp_sel_smem_warps(int dk, int k, int groups)
{
    if (groups) return fsa_cmp_sel_smem_k(dk, groups) + fsa_cmp_sel_wg_stages(dk) * fsa_sw128_bytes(FSA_CMP_SEL_KEYS, dk);
    return fsa_cmp_sel_smem_q(dk, 0) +
           (fsa_cmp_sel_q_in_registers(k) ? 0 : fsa_tile_bytes(FSA_QT_ROWS, dk)); /* one set of rows then */
}
/* FSA_CMP_SEL_WS with up to 16 blocks per stage (the usual BK / d of 4
 * gives 16): the block scorer's constant fragments (BlockScores' table,
 * cmp_sel_blocks.cuh), after the mbarriers, which the consumers read instead
 * of holding them where the lanes keep whole lists (cmp_select.cu, TABLE):
 * 16-byte slots of 32 lanes, one per key step (at most 8: a halo of up to 64
 * keys and a stage's 64) and one for the head map. */
#define FSA_CMP_SEL_TABLE_SLOTS 9
FSA_LAYOUT_FN int fsa_cmp_sel_table_bytes(int bk, int d, int groups, int variant)
{
    return fsa_cmp_sel_producer(groups, variant) && fsa_cmp_sel_blocks_per_stage(bk, d) <= 16
               ? FSA_CMP_SEL_TABLE_SLOTS * 512
               : 0;
}
/* Where the warpgroup ring's mbarriers start: after the warps' buffers. */
FSA_LAYOUT_FN int fsa_cmp_sel_smem_bars(int dk, int g, int k, int bk, int d, int groups)
{
    return fsa_cmp_sel_smem_warps(dk, k, groups) +
           fsa_cmp_sel_warps(groups) * fsa_cmp_sel_warp_bytes(g, dk, k, bk, d, groups);
}
FSA_LAYOUT_FN int fsa_cmp_sel_smem_bytes(int dk, int g, int k, int bk, int d, int groups, int variant)
{
    const int w = fsa_cmp_sel_smem_bars(dk, g, k, bk, d, groups);
    if (groups) return FSA_QT_WG_ALIGN + w + FSA_CMP_SEL_WG_BARS + fsa_cmp_sel_table_bytes(bk, d, groups, variant);
    const int q = fsa_cmp_sel_smem_q(dk, 0) + fsa_tile_bytes(FSA_QT_ROWS * fsa_cmp_sel_mt(g, dk, k, 0), dk);
    return q > w ? q : w;
}

/* The backward's tiles and shared memory are those of query-tile attention
 * (fsa_qt_layout.cuh): dq per query tile, dK and dV per tile of
 * FSA_QT_DKV_KEYS compressed keys.
 * A short input has few compressed keys: at T 8192, d 16 and 4 KV heads, 32
 * dK/dV CTAs for 132 SMs, each walking every later query. The warpgroup
 * dK/dV kernel then splits each key tile's walk into `splits` CTAs (tiles
 * part, part + splits, ... of the walk), which write fp32 sums to the
 * workspace ([splits][Tc][Hkv][Dk + Dv], after delta) that
 * fsa_cmp_bwd_dkv_sum adds in part order: the largest power of two up to
 * max_splits that keeps the CTAs (key_ctas = key tiles x KV heads, times
 * splits) within two per SM; 1 (no partial sums) otherwise. */
#define FSA_CMP_DKV_MAX_SPLITS 16
FSA_LAYOUT_FN int fsa_cmp_dkv_splits(long long key_ctas, int sms, int max_splits)
{
    int s = 1;
    while (2 * s <= max_splits && key_ctas * 2 * s <= 2LL * sms) s *= 2;
    return s;
}
/* Bytes of the partial sums: none unsplit; split, splits x key_ctas stays
 * within 2 x sms, so this bound holds for any number of compressed tokens. */
FSA_LAYOUT_FN long long fsa_cmp_dkv_partial_bytes(int splits, long long total_cmp, int hkv, int dk, int dv)
{
    return splits > 1 ? (long long)splits * total_cmp * hkv * (dk + dv) * 4 : 0;
}
FSA_LAYOUT_FN long long fsa_cmp_dkv_partial_bound(int sms, int dk, int dv)
{
    return 2LL * sms * FSA_QT_DKV_KEYS * (dk + dv) * 4;
}

#endif
