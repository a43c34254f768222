// Compressed attention forward: a CTA owns one KV head and a tile of query
// tokens of one sequence, the G heads of each token as neighbouring rows, so
// every stage of compressed K/V is loaded once for the whole group; the
// tile's rows attend to the compressed tokens of their sequence that they
// see (fsa_qattn.cuh), two sets of 16 rows per warp up to Dk = Dv = 128
// (one, and maybe stages of 32 keys, where the target's shared memory asks:
// QT);
// with WGMMA (sm_90a) the warpgroup forward of fsa_qattn_wg.cuh, one set
// per warp; where it fits (fsa_cmp_fwd_persistent) persistent, a CTA per SM
// walking the tiles (attend_query_tiles_ws). No workspace.
#include "cmp_common.cuh"
#include "fsa_qattn_wg.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int WG = {{WGMMA}};  // the warpgroup variant (sm_90a, fsa_qt_layout.cuh); 0: mma.sync
// The mma.sync layout (FSA_QT_FWD_*, fsa_cmp_fwd_layout): 0 the default; the warpgroup forward has its own.
constexpr int QT = {{QT_FWD=0}};
static_assert(WG == 0 || QT == 0, "the warpgroup forward takes the default layout");
constexpr int MT = fsa_cmp_fwd_mt_at(DK, DV, WG, QT);  // sets of 16 rows per warp
constexpr int KS = fsa_qt_fwd_keys_at(DV, QT);         // keys per stage
constexpr int TT = fsa_cmp_fwd_tile_tokens(G, DK, DV, WG, QT);
typedef GroupRows<G> Rows;

// The persistent forward's jobs (fsa_cmp_fwd_persistent, fsa_qt_job_at).
struct CmpFwdJobs {
    const fsa_cmp_params &p;
    struct Job {
        QueryTile tile;
        int h, n_stages, key_count;
        StridedKeys keys;
    };
    struct RowsVisible {
        int row[2];
        __device__ __forceinline__ bool operator()(int j, int slot) const { return j < row[slot]; }
    };
    __device__ __forceinline__ long long count() const {
        return fsa_cmp_fwd_grid_tiles(p.total_tokens, p.batch, G, DK, DV, WG, QT) * p.num_kv_heads;
    }
    __device__ __forceinline__ bool describe(long long w, Job &job) const {
        const fsa_qt_job at = fsa_qt_job_at(w, p.num_kv_heads);
        job.h = (int)at.h;
        job.tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, at.x);
        if (!job.tile.ok) return false;
        const CmpKeys keys = cmp_keys(p, job.tile.seq);
        const int tile_vis =
            cmp_visible(job.tile.tok0 + job.tile.n_tok - 1 - job.tile.start, p.kernel_size, p.stride, keys.count);
        job.key_count = keys.count;
        job.n_stages = key_stages<KS>(tile_vis);
        job.keys = cmp_strided_keys(p, keys, job.h, tile_vis);
        return true;
    }
    __device__ __forceinline__ RowsVisible visible(const Job &job, int warp, int lane) const {
        RowsVisible v;
#pragma unroll
        for (int slot = 0; slot < 2; slot++) {
            const int r = frag_row(lane, 2 * slot);
            const long long pos = job.tile.tok0 + Rows::token(warp, r) - job.tile.start;
            v.row[slot] = Rows::live(warp, r, job.tile.n_tok) ? cmp_visible(pos, p.kernel_size, p.stride, job.key_count) : 0;
        }
        return v;
    }
};

extern "C" __global__ void __launch_bounds__(WG ? fsa_qt_wg_threads(WG) : FSA_QT_THREADS, fsa_qt_wg_groups(WG) > 1 ? 1 : 2) fsa_cmp_fwd(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    if constexpr (fsa_cmp_fwd_persistent(DK, DV, WG)) {
        attend_query_tiles_ws<DT, DK, DV, G, WG>(smem, p.q, p.o, (float *)p.lse, p.total_tokens, (float)p.scale_log2,
                                                 CmpFwdJobs{p});
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);

    // The compressed tokens each of this lane's rows sees (slot 2m + half:
    // row set m); the tile's last token sees the most.
    int row_vis[2 * MT];
#pragma unroll
    for (int slot = 0; slot < 2 * MT; slot++) {
        const int r = frag_row(lane, 2 * (slot & 1)), set = warp * MT + (slot >> 1);
        const long long pos = tile.tok0 + Rows::token(set, r) - tile.start;
        row_vis[slot] = Rows::live(set, r, tile.n_tok) ? cmp_visible(pos, p.kernel_size, p.stride, keys.count) : 0;
    }
    int lane_vis = 0;
#pragma unroll
    for (int slot = 0; slot < 2 * MT; slot++) lane_vis = max(lane_vis, row_vis[slot]);
    const int warp_vis = __reduce_max_sync(0xffffffffu, lane_vis);
    const int tile_vis = cmp_visible(tile.tok0 + tile.n_tok - 1 - tile.start, p.kernel_size, p.stride, keys.count);

    auto visible = [&](int j, int slot) { return j < row_vis[slot]; };
    auto warp_sees = [&](int stage) { return stage * KS < warp_vis; };
    const int n_stages = key_stages<KS>(tile_vis);
    // The warpgroup forward copies stages from the strided key stream; the
    // mma.sync one takes rows from the parameters (no registers for them).
    if constexpr (WG != 0)
        attend_query_tile_wg<DT, DK, DV, G, WG>(smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, h,
                                            (float)p.scale_log2, n_stages, cmp_strided_keys(p, keys, h, tile_vis),
                                            visible, warp_sees);
    else
        attend_query_tile<DT, DK, DV, G, MT, KS>(smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, h,
                                             (float)p.scale_log2, n_stages,
                                             [&](int j) { return cmp_key_row(p, keys, h, j, tile_vis); }, visible,
                                             warp_sees);
}
