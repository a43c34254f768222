// Compressed attention forward: a CTA owns one KV head and a tile of query
// tokens of one sequence, the G heads of each token as neighbouring rows, so
// every stage of compressed K/V is loaded once for the whole group; the
// tile's rows attend to the compressed tokens of their sequence that they
// see (fsa_qattn.cuh). No workspace.
#include "cmp_common.cuh"
#include "fsa_qattn.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int KS = fsa_qt_fwd_keys(DV);  // keys per stage

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_cmp_fwd(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int h = blockIdx.y;
    const QueryTile tile = cta_query_tile<G>(p);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);
    const CmpTileVis vis = cmp_tile_visible<G>(tile, p.kernel_size, p.stride, keys.count);

    attend_query_tile<DT, DK, DV, G>(
        smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, h, (float)p.scale_log2, (vis.tile + KS - 1) / KS,
        [&](int j) { return cmp_key_row(p, keys, h, j, vis.tile); },
        [&](int j, int half) { return j < vis.row[half]; }, [&](int stage) { return stage * KS < vis.warp; });
}
