// What the sliding-window kernels share: the window of each query head, and
// the key stream of a query tile with what its rows see.
#pragma once
#include "fsa_mma.cuh"
#include "fsa_qtile.cuh"
#include "fsa_stream.cuh"
#include "swa_params.cuh"

namespace fsa {

// The window of query head qh: the plan's one window, or the head's own.
__device__ __forceinline__ long long swa_window(const fsa_swa_params &p, long long qh) {
    const long long w = p.window > 0 ? p.window : p.head_windows[min(qh, (long long)FSA_SWA_MAX_HEAD_WINDOWS - 1)];
    return max(w, 1ll);
}

// The largest window among the G query heads of KV head h.
template <int G>
__device__ __forceinline__ long long swa_group_window(const fsa_swa_params &p, int h) {
    if (p.window > 0) return p.window;
    long long w = 1;
    for (int r = 0; r < G; r++) w = max(w, swa_window(p, (long long)h * G + r));
    return w;
}

// A query tile's keys in stages of KS: from W - 1 before its first token (W
// the group's largest window) to its last token; which of them this lane's
// two rows see (row head r sees keys i - W_r + 1 .. i), and which stages a
// warp may skip.
template <int G, int KS>
struct WindowStream {
    int h;                   // the KV head
    long long k0;            // the stream's first key, a position in the sequence
    int n_keys;
    long long pos[2], win[2];  // this lane's rows: position (-1: no row), window
    long long warp_lo, warp_hi, wmax;

    __device__ __forceinline__ WindowStream(const fsa_swa_params &p, const QueryTile &tile, int kv_head) : h(kv_head) {
        typedef GroupRows<G> Rows;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        wmax = swa_group_window<G>(p, h);
        const long long first = tile.tok0 - tile.start, last = first + tile.n_tok - 1;  // positions in the sequence
        k0 = max(first - wmax + 1, 0ll);
        n_keys = (int)(last - k0 + 1);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = frag_row(lane, 2 * half);
            pos[half] = Rows::live(warp, r, tile.n_tok) ? first + Rows::token(warp, r) : -1;
            win[half] = swa_window(p, (long long)h * G + Rows::head(r));
        }
        warp_lo = first + warp * Rows::TW;
        warp_hi = min(warp_lo + Rows::TW - 1, last);
    }

    __device__ __forceinline__ int n_stages() const { return key_stages<KS>(n_keys); }

    // The stream's keys as strided rows (from position k0 on).
    __device__ __forceinline__ StridedKeys strided_keys(const fsa_swa_params &p, const QueryTile &tile) const {
        return StridedKeys{view_row<const u16>(p.k, tile.start + k0, h), view_row<const u16>(p.v, tile.start + k0, h),
                           p.k.token_stride, p.v.token_stride, n_keys};
    }

    // Key j of the stream: its K and V rows.
    __device__ __forceinline__ RowPair key_row(const fsa_swa_params &p, const QueryTile &tile, int j) const {
        const bool ok = j < n_keys;
        const long long t = tile.start + k0 + (ok ? j : 0);
        return RowPair{view_row<const u16>(p.k, t, h), view_row<const u16>(p.v, t, h), ok};
    }

    __device__ __forceinline__ bool visible(int j, int half) const {
        return k0 + j <= pos[half] && k0 + j > pos[half] - win[half];
    }

    // Some row of this warp may see a key of the stage.
    __device__ __forceinline__ bool warp_sees(int stage) const {
        const long long lo = k0 + (long long)stage * KS, hi = lo + KS - 1;
        return warp_lo <= warp_hi && lo <= warp_hi && hi > warp_lo - wmax;
    }
};

}  // namespace fsa
