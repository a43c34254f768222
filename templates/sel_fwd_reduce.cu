// FSA forward, reduction: merges the partials of each (token, query head)
// over its valid slots. Each partial carries its own log2-sum-exp, so the
// merge is safe for any logit range. Rows are DV (the value head dim) wide. A row takes LANES lanes, each holding
// 16-byte pieces; up to four slots' loads are in flight per lane.
#include "sel_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int PIECES = DV / 8;             // 16-byte pieces per row
constexpr int LANES = fsa_row_lanes(DV);   // lanes per row
constexpr int ROWS_PER_WARP = 32 / LANES;
constexpr int UNROLL = 4;
static_assert(PIECES <= 32, "value head dim at most 256");

__device__ __forceinline__ void accumulate(float acc[8], const uint4 &v, float w) {
    float f[8];
    unpack8<DT>(f, v);
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] += w * f[i];
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_fwd_reduce(const fsa_sel_params p) {
    const int lane = threadIdx.x & 31;
    const int sub = lane / LANES, l = lane - sub * LANES;  // which row of the warp, lane in the row
    const long long row_id = ((long long)blockIdx.x * (FSA_ROW_THREADS / 32) + (threadIdx.x >> 5)) * ROWS_PER_WARP + sub;
    const long long hq = p.num_kv_heads * G;
    const bool live = row_id < p.tc * hq;
    const long long tl = live ? row_id / hq : 0;
    const int qh = live ? (int)(row_id - tl * hq) : 0;
    const int h = qh / G, g = qh - h * G;
    const long long t = p.t0 + tl;

    const u64 mask = live ? ((const u64 *)p.mask)[(long long)h * p.tc + tl] : 0;
    const long long pair0 = pair_index(p, h, tl, 0);
    const float *lse_part = (const float *)p.lse_part;
    const u16 *o_part = (const u16 *)p.o_part;

    // Max over the row's partials: lanes of the row split the slots.
    float m = -FSA_INF;
    for (int s = l; s < p.top_k; s += LANES)
        if ((mask >> s) & 1) m = fmaxf(m, lse_part[(pair0 + s) * G + g]);
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    // Every partial of the row saw no key (only malformed cu_seqlens can mix a list's key ranges so): weights
    // exp2(-inf - 0) = 0 and the row of a token with no slot (o 0, lse -inf), not exp2(-inf + inf) = NaN.
    const float m_ref = m == -FSA_INF ? 0.f : m;

    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.f;
    float wsum = 0.f;
    const bool has_piece = l < PIECES;
    for (u64 mm = mask; mm;) {
        int slots[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            slots[u] = mm ? __ffsll((long long)mm) - 1 : -1;
            mm &= mm - 1;
        }
        uint4 v[UNROLL];
        float w[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            w[u] = 0.f;
            if (slots[u] < 0) continue;
            const long long row = (pair0 + slots[u]) * G + g;
            w[u] = fast_exp2(lse_part[row] - m_ref);
            if (has_piece) v[u] = *(const uint4 *)(o_part + row * DV + l * 8);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (slots[u] < 0) continue;
            wsum += w[u];
            if (has_piece) accumulate(acc, v[u], w[u]);
        }
    }
    if (!live) return;
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    if (has_piece) {
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] *= inv;
        *(uint4 *)(view_row<u16>(p.o, t, qh) + l * 8) = pack8<DT>(acc);
    }
    if (l == 0 && p.lse)
        ((float *)p.lse)[(long long)qh * p.total_tokens + t] = wsum > 0.f ? (m + fast_log2(wsum)) * LN2 : -FSA_INF;
}
