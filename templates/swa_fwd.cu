// Sliding-window attention forward: the query tiles of fsa_qattn.cuh over
// the keys of their own sequence, position i of query head r seeing keys
// i - W_r + 1 .. i. A tile streams the keys from W - 1 before its first
// token (W the largest window of the group) to its last token; a warp skips
// the stages none of its rows see. No workspace.
#include "fsa_qattn.cuh"
#include "swa_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, KS = fsa_qt_fwd_keys(DV);

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_swa_fwd(const fsa_swa_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const QueryTile tile = cta_query_tile<G>(p);
    if (!tile.ok) return;  // a spare CTA
    const WindowStream<G, KS> ws(p, tile);

    attend_query_tile<DT, DK, DV, G>(
        smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, ws.h, (float)p.scale_log2, ws.n_stages(),
        [&](int j) { return ws.key_row(p, tile, j); }, [&](int j, int half) { return ws.visible(j, half); },
        [&](int stage) { return ws.warp_sees(stage); });
}
