// FSA-order forward, the local slots (sel_local_layout.cuh): a CTA takes a
// query tile of the token chunk and one KV head and streams block 0 and the
// tile's own blocks (with the ones before them) past it, each row seeing
// the local blocks its selection names. Its rows go to o, normalized, and
// their log-sum-exps to lse_local (the chunk's rows); the reduction merges them with the
// partials of the other slots. With WGMMA (sm_90a) the warpgroup forward of
// fsa_qattn_wg.cuh, else the mma.sync one of fsa_qattn.cuh.
#include "fsa_qattn_wg.cuh"
#include "sel_local.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}}, KS = fsa_qt_fwd_keys(DV);
constexpr int WG = {{WGMMA}};  // the query-tile variant (fsa_sel_local_wg); 0: mma.sync
constexpr int TT = fsa_qt_fwd_tile_tokens(G, WG);
static_assert(TT <= BK, "a tile spans at most two own blocks");

extern "C" __global__ void __launch_bounds__(fsa_sel_local_threads(WG), fsa_qt_wg_groups(WG) > 1 ? 1 : 2)
    fsa_sel_fwd_local(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const QueryTile tile = chunk_query_tile<TT>(p);
    if (!tile.ok) return;  // a CTA around the chunk
    const LocalStream<G, KS, BK> ls(p, tile);

    // lse_local holds the chunk's rows only ([qh, t - t0]): the tile writes lse[qh * tc + t - t0].
    float *lse = (float *)p.lse_local - p.t0;
    auto key_rows = [&](int j) { return ls.key_row(p, tile, j); };
    auto visible = [&](int j, int half) { return ls.visible(j, half); };
    auto warp_sees = [&](int stage) { return ls.warp_sees(stage); };
    if constexpr (WG != 0)
        attend_query_tile_wg<DT, DK, DV, G, WG>(smem, p.q, p.o, lse, p.tc, tile, ls.h,
                                                (float)p.scale_log2, ls.n_stages(), key_rows, visible, warp_sees);
    else
        attend_query_tile<DT, DK, DV, G>(smem, p.q, p.o, lse, p.tc, tile, ls.h,
                                         (float)p.scale_log2, ls.n_stages(), key_rows, visible, warp_sees);
}
