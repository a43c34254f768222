// Compressed attention backward, deterministic, in two kernels on one stream
// (the blocks of fsa_qbwd.cuh over a sequence's compressed tokens; with
// BWD_WGMMA (sm_90a) the warpgroup blocks of fsa_qbwd_wg.cuh):
//  fsa_cmp_bwd_dq:  the forward's query tiles against the compressed tokens
//                   they see; delta goes to the workspace for the next kernel.
//  fsa_cmp_bwd_dkv: a CTA owns 64 compressed keys of one sequence and walks
//                   the query tiles from the first position that sees them;
//                   the CTAs take (key tile, KV head) with the heads fastest,
//                   so that every head's early tiles, which the most queries
//                   see, start first and the short ones fill the tail; with
//                   warpgroups and few key tiles, blockIdx.z splits a key
//                   tile's walk (cmp_params.cuh's fsa_cmp_dkv_splits) and
//  fsa_cmp_bwd_dkv_sum: adds the parts' sums into dk and dv.
#include "cmp_common.cuh"
#include "fsa_qbwd_wg.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int WGB = {{BWD_WGMMA}};  // the warpgroup backward's variant (sm_90a, fsa_qt_layout.cuh); 0: mma.sync
// The mma.sync layout (FSA_QT_BWD_*, fsa_qt_bwd_layout): 0 the default; the warpgroup backward has its own.
constexpr int QB = {{QT_BWD=0}};
static_assert(WGB == 0 || QB == 0, "the warpgroup backward takes the default layout");
constexpr int KS = WGB ? fsa_qt_wgb_dq_keys(DK, WGB) : fsa_qt_dq_keys_at(DK, QB);

extern "C" __global__ void __launch_bounds__(fsa_qt_bwd_dq_threads(WGB), WGB ? 1 : 2) fsa_cmp_bwd_dq(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<fsa_qt_bwd_dq_tile_tokens(G, WGB)>((const int *)p.cu_seqlens, (int)p.batch,
                                                                         p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);
    const CmpTileVis vis = cmp_tile_visible<G>(tile, p.kernel_size, p.stride, keys.count);

    const int n_stages = key_stages<KS>(vis.tile);
    const StridedKeys key_rows = cmp_strided_keys(p, keys, h, vis.tile);
    auto visible = [&](int j, int half) { return j < vis.row[half]; };
    if constexpr (WGB != 0)
        backward_dq_tile_wg<DT, DK, DV, G, WGB>(smem, p, tile, h, n_stages, key_rows, visible);
    else
        backward_dq_tile<DT, DK, DV, G, QB>(smem, p, tile, h, n_stages, key_rows, visible,
                                        [&](int stage) { return stage * KS < vis.warp; });
}

extern "C" __global__ void __launch_bounds__(fsa_qt_bwd_dkv_threads(WGB), 1) fsa_cmp_bwd_dkv(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    // Launch order (x fastest) to (key tile, head) with the heads fastest: the grid is (key tiles, heads).
    const long long cta = blockIdx.x + (long long)gridDim.x * blockIdx.y;
    const int h = (int)(cta % gridDim.y), x = (int)(cta / gridDim.y);
    // The keys: a tile of one sequence's compressed tokens (earlier tiles first: more queries see them).
    const QueryTile kt = query_tile<FSA_QT_DKV_KEYS, false>((const int *)p.cu_seqlens_c, (int)p.batch, p.total_cmp, x);
    if (!kt.ok) return;
    const int *cu = (const int *)p.cu_seqlens;
    const long long q_start = min(max((long long)__ldg(cu + kt.seq), 0ll), p.total_tokens);
    const long long q_end = min(max((long long)__ldg(cu + kt.seq + 1), q_start), p.total_tokens);
    const long long first_pos = (kt.tok0 - kt.start) * p.stride + p.kernel_size - 1;  // the first that sees a key
    const int count = (int)(kt.end - kt.start);

    auto row_keys = [&](long long pos, int) { return KeyRange{0, cmp_visible(pos, p.kernel_size, p.stride, count) - 1}; };
    const WalkSplit ws{(int)blockIdx.z, max((int)p.dkv_splits, 1), p.dkv_partial, p.total_cmp, (int)gridDim.y};
    if constexpr (WGB != 0)
        backward_dkv_tile_wg<DT, DK, DV, G, WGB>(smem, p, kt, h, q_start, q_end, first_pos, q_end - q_start - 1, row_keys,
                                                 ws);
    else
        backward_dkv_parts<DT, DK, DV, G, QB>(smem, p, kt, h, q_start, q_end, first_pos, q_end - q_start - 1, row_keys);
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_cmp_bwd_dkv_sum(const fsa_cmp_params p) {
    sum_key_partials<DT, DK, DV>(WalkSplit{0, (int)p.dkv_splits, p.dkv_partial, p.total_cmp, (int)gridDim.y}, p.dk, p.dv);
}
