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
constexpr int TT = fsa_qt_tokens_per_tile(G);
typedef GroupRows<G> Rows;

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_cmp_fwd(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);

    // The compressed tokens each of this lane's two rows sees; the tile's last
    // token sees the most.
    int row_vis[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        const long long pos = tile.tok0 + Rows::token(warp, r) - tile.start;
        row_vis[half] = Rows::live(warp, r, tile.n_tok) ? cmp_visible(pos, p.kernel_size, p.stride, keys.count) : 0;
    }
    const int warp_vis = __reduce_max_sync(0xffffffffu, max(row_vis[0], row_vis[1]));
    const int tile_vis = cmp_visible(tile.tok0 + tile.n_tok - 1 - tile.start, p.kernel_size, p.stride, keys.count);

    attend_query_tile<DT, DK, DV, G>(
        smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, h, (float)p.scale_log2, (tile_vis + KS - 1) / KS,
        [&](int j) {
            const bool ok = j < tile_vis;
            return RowPair{ok ? view_row<const u16>(p.k, keys.start + j, h) : (const u16 *)p.k.ptr,
                           ok ? view_row<const u16>(p.v, keys.start + j, h) : (const u16 *)p.v.ptr, ok};
        },
        [&](int j, int half) { return j < row_vis[half]; }, [&](int stage) { return stage * KS < warp_vis; });
}
