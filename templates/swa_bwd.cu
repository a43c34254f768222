// Sliding-window attention backward, deterministic, in two kernels on one
// stream (the blocks of fsa_qbwd.cuh over the keys of a sequence; with
// BWD_WGMMA (sm_90a) the warpgroup blocks of fsa_qbwd_wg.cuh):
//  fsa_swa_bwd_dq:  the forward's query tiles and key streams; delta goes to
//                   the workspace for the next kernel.
//  fsa_swa_bwd_dkv: a CTA owns 64 keys of one sequence and walks the query
//                   tiles from its first key's position to W - 1 past its
//                   last (W the largest window of the group); the query at
//                   position i of head r sees keys i - W_r + 1 .. i.
#include "fsa_qbwd_wg.cuh"
#include "swa_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int WGB = {{BWD_WGMMA}};  // the warpgroup backward's variant (sm_90a, fsa_qt_layout.cuh); 0: mma.sync
// The mma.sync layout (FSA_QT_BWD_*, fsa_qt_bwd_layout): 0 the default; the warpgroup backward has its own.
constexpr int QB = {{QT_BWD=0}};
static_assert(WGB == 0 || QB == 0, "the warpgroup backward takes the default layout");
constexpr int KS = WGB ? fsa_qt_wgb_dq_keys(DK, WGB) : fsa_qt_dq_keys_at(DK, QB);

extern "C" __global__ void __launch_bounds__(fsa_qt_bwd_dq_threads(WGB), WGB ? 1 : 2) fsa_swa_bwd_dq(const fsa_swa_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const QueryTile tile = query_tile<fsa_qt_bwd_dq_tile_tokens(G, WGB)>((const int *)p.cu_seqlens, (int)p.batch,
                                                                         p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const WindowStream<G, KS> ws(p, tile, blockIdx.y);

    const StridedKeys key_rows = ws.strided_keys(p, tile);
    auto visible = [&](int j, int half) { return ws.visible(j, half); };
    if constexpr (WGB != 0)
        backward_dq_tile_wg<DT, DK, DV, G, WGB>(smem, p, tile, ws.h, ws.n_stages(), key_rows, visible);
    else
        backward_dq_tile<DT, DK, DV, G, QB>(smem, p, tile, ws.h, ws.n_stages(), key_rows, visible,
                                        [&](int stage) { return ws.warp_sees(stage); });
}

extern "C" __global__ void __launch_bounds__(fsa_qt_bwd_dkv_threads(WGB), 1) fsa_swa_bwd_dkv(const fsa_swa_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int h = blockIdx.y;
    // The keys: a tile of one sequence's tokens (earlier tiles first, as the query tiles go last first).
    const QueryTile kt = query_tile<FSA_QT_DKV_KEYS, false>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens,
                                                           blockIdx.x);
    if (!kt.ok) return;
    const long long j0 = kt.tok0 - kt.start, len = kt.end - kt.start;
    const long long q_last = min(j0 + kt.n_tok - 1 + swa_group_window<G>(p, h) - 1, len - 1);  // the last that sees a key

    auto row_keys = [&](long long pos, int head) {
        const long long w = swa_window(p, (long long)h * G + head);
        return KeyRange{(int)max(pos - w + 1, 0ll), (int)pos};
    };
    if constexpr (WGB != 0)
        backward_dkv_tile_wg<DT, DK, DV, G, WGB>(smem, p, kt, h, kt.start, kt.end, j0, q_last, row_keys);
    else
        backward_dkv_parts<DT, DK, DV, G, QB>(smem, p, kt, h, kt.start, kt.end, j0, q_last, row_keys);
}
