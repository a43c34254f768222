// Sliding-window attention forward: the query tiles of fsa_qattn.cuh over
// the keys of their own sequence, position i of query head r seeing keys
// i - W_r + 1 .. i. A tile streams the keys from W - 1 before its first
// token (W the largest window of the group) to its last token; a warp skips
// the stages none of its rows see. With WGMMA (sm_90a) the warpgroup
// forward of fsa_qattn_wg.cuh; where it fits (fsa_qt_ws_persistent)
// persistent, a CTA per SM walking the (tile, KV head) jobs
// (attend_query_tiles_ws). No workspace.
#include "fsa_qattn_wg.cuh"
#include "swa_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int WG = {{WGMMA}};  // the warpgroup variant (sm_90a, fsa_qt_layout.cuh); 0: mma.sync
// The mma.sync layout (FSA_QT_FWD_*, fsa_swa_fwd_layout): 0 the default; the warpgroup forward has its own.
constexpr int QT = {{QT_FWD=0}};
static_assert(WG == 0 || QT == 0, "the warpgroup forward takes the default layout");
constexpr int KS = fsa_qt_fwd_keys_at(DV, QT);  // keys per stage

// The persistent forward's jobs (fsa_qt_ws_persistent, fsa_qt_job_at).
struct SwaFwdJobs {
    const fsa_swa_params &p;
    struct Job {
        QueryTile tile;
        int h, n_stages;
        StridedKeys keys;
    };
    // This lane's rows' window over the tile's key stream.
    struct RowsVisible {
        WindowStream<G, KS> ws;
        __device__ __forceinline__ bool operator()(int j, int half) const { return ws.visible(j, half); }
    };
    __device__ __forceinline__ long long count() const {
        return fsa_qt_fwd_grid_tiles(p.total_tokens, p.batch, G, WG) * p.num_kv_heads;
    }
    __device__ __forceinline__ bool describe(long long w, Job &job) const {
        const fsa_qt_job at = fsa_qt_job_at(w, p.num_kv_heads);
        job.h = (int)at.h;
        job.tile = query_tile<fsa_qt_fwd_tile_tokens(G, WG)>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens,
                                                             at.x);
        if (!job.tile.ok) return false;
        const WindowStream<G, KS> ws(p, job.tile, job.h);
        job.n_stages = ws.n_stages();
        job.keys = ws.strided_keys(p, job.tile);
        return true;
    }
    __device__ __forceinline__ RowsVisible visible(const Job &job, int, int) const {
        return RowsVisible{WindowStream<G, KS>(p, job.tile, job.h)};
    }
};

extern "C" __global__ void __launch_bounds__(WG ? fsa_qt_wg_threads(WG) : FSA_QT_THREADS, fsa_qt_wg_groups(WG) > 1 ? 1 : 2) fsa_swa_fwd(
    const fsa_swa_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    if constexpr (fsa_qt_ws_persistent(DK, DV, WG)) {
        attend_query_tiles_ws<DT, DK, DV, G, WG>(smem, p.q, p.o, (float *)p.lse, p.total_tokens, (float)p.scale_log2,
                                                 SwaFwdJobs{p});
        return;
    }
    const QueryTile tile = query_tile<fsa_qt_fwd_tile_tokens(G, WG)>((const int *)p.cu_seqlens, (int)p.batch,
                                                                     p.total_tokens, blockIdx.x);
    if (!tile.ok) return;  // a spare CTA
    const WindowStream<G, KS> ws(p, tile, blockIdx.y);

    auto visible = [&](int j, int half) { return ws.visible(j, half); };
    auto warp_sees = [&](int stage) { return ws.warp_sees(stage); };
    // (The warpgroup forward copies stages from the strided key stream.)
    if constexpr (WG != 0)
        attend_query_tile_wg<DT, DK, DV, G, WG>(smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, ws.h,
                                            (float)p.scale_log2, ws.n_stages(), ws.strided_keys(p, tile), visible,
                                            warp_sees);
    else
        attend_query_tile<DT, DK, DV, G, 1, KS>(smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, ws.h,
                                         (float)p.scale_log2, ws.n_stages(), [&](int j) { return ws.key_row(p, tile, j); },
                                         visible, warp_sees);
}
