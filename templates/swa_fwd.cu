// Sliding-window attention forward: the query tiles of fsa_qattn.cuh over
// the keys of their own sequence, position i seeing keys i - W + 1 .. i. A
// tile streams the keys from W - 1 before its first token to its last token;
// a warp skips the stages none of its rows see. No workspace.
#include "fsa_qattn.cuh"
#include "swa_params.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int KS = fsa_qt_fwd_keys(DV), TT = fsa_qt_tokens_per_tile(G), TW = fsa_qt_tokens_per_warp(G);
typedef GroupRows<G> Rows;

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_swa_fwd(const fsa_swa_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;  // a spare CTA
    const int warp = threadIdx.x >> 5;
    const long long W = max(p.window, 1ll);
    const long long first = tile.tok0 - tile.start, last = first + tile.n_tok - 1;  // positions in the sequence
    const long long k0 = max(first - W + 1, 0ll);                                   // the stream's first key
    const int n_keys = (int)(last - k0 + 1);

    // Positions of this lane's two rows (-1: no row, sees nothing) and of the warp's tokens.
    long long pos[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(threadIdx.x & 31, 2 * half);
        pos[half] = Rows::live(warp, r, tile.n_tok) ? first + Rows::token(warp, r) : -1;
    }
    const long long warp_lo = first + warp * TW, warp_hi = min(warp_lo + TW - 1, last);

    attend_query_tile<DT, DK, DV, G>(
        smem, p.q, p.o, (float *)p.lse, p.total_tokens, tile, blockIdx.y, (float)p.scale_log2, (n_keys + KS - 1) / KS,
        [&](int j) {
            const bool ok = j < n_keys;
            const long long t = tile.start + k0 + (ok ? j : 0);
            return RowPair{view_row<const u16>(p.k, t, blockIdx.y), view_row<const u16>(p.v, t, blockIdx.y), ok};
        },
        [&](int j, int half) { return k0 + j <= pos[half] && k0 + j > pos[half] - W; },
        [&](int stage) {
            const long long lo = k0 + (long long)stage * KS, hi = lo + KS - 1;
            return warp_lo <= warp_hi && lo <= warp_hi && hi > warp_lo - W;
        });
}
