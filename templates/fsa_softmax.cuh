// Online softmax (base 2) for the two accumulator rows a lane holds, and the
// merge of several warps' states over one set of rows.
//
// Scores stay raw until exponentiated: the positive scale commutes with max,
// so it goes into the exponent as one fma, exp2(s * scale_log2 - m).
//
// Use (one warp, 16 rows; s holds raw scores of this step's keys):
//   OnlineSoftmax sm;  sm.init();  float o[D / 8][4];  frag_zero(o);
//   for each step of keys:
//     float alpha[2];
//     sm.step(s, scale_log2, lane, [&](int col, int half) { return key_of(col) <= row_token[half]; }, alpha);
//     frag_scale_rows(o, alpha);            // may skip on the first step
//     mma_pv<...>(o, s, v_addr);            // s now holds P
//   float inv[2], lse2[2];  sm.finish(inv, lse2);   // o * inv is the output
#pragma once
#include "fsa_mma.cuh"

namespace fsa {

struct OnlineSoftmax {
    float m[2];  // running max of the scaled scores (log2 units); -inf until a score is visible
    float l[2];  // running sum of exp2(score - m) over this lane's columns

    __device__ __forceinline__ void init() {
        m[0] = m[1] = -FSA_INF;
        l[0] = l[1] = 0.f;
    }

    // One step over raw scores s (16 x 8NJ fragments). visible(col, half)
    // says whether column col (0..8NJ-1) of row lo (half 0) or hi (half 1)
    // takes part; hidden scores become -inf. On return s holds the
    // unnormalized probabilities and alpha the factors by which the output
    // accumulated so far must be scaled (frag_scale_rows).
    template <int NJ, class Visible>
    __device__ __forceinline__ void step(float s[NJ][4], float scale_log2, int lane, Visible visible, float alpha[2]) {
        float mx[2] = {-FSA_INF, -FSA_INF};
#pragma unroll
        for (int jn = 0; jn < NJ; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = visible(frag_col(lane, jn, e), e >> 1) ? s[jn][e] : -FSA_INF;
                s[jn][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
        float m_use[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float m_new = fmaxf(m[i], quad_max(mx[i]) * scale_log2);
            m_use[i] = m_new == -FSA_INF ? 0.f : m_new;  // rows with nothing visible yet stay 0
            alpha[i] = fast_exp2(m[i] - m_use[i]);
            m[i] = m_new;
            l[i] *= alpha[i];
        }
#pragma unroll
        for (int jn = 0; jn < NJ; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float pr = fast_exp2(fmaf(s[jn][e], scale_log2, -m_use[e >> 1]));
                s[jn][e] = pr;
                l[e >> 1] += pr;
            }
        }
    }

    // The row sum over the 4 lanes of a row (half 0: row lo, 1: row hi).
    __device__ __forceinline__ float row_sum(int half) const { return quad_sum(l[half]); }

    // Output scale (0 for rows with nothing visible) and log2-sum-exp per row.
    __device__ __forceinline__ void finish(float inv[2], float lse2[2]) const {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float s = row_sum(i);
            inv[i] = s > 0.f ? 1.f / s : 0.f;
            lse2[i] = m[i] + fast_log2(s);
        }
    }
};

// Merges the states of WARPS warps that each ran OnlineSoftmax over a
// disjoint part of the keys of the same 16 rows (keys split across the warps
// of a CTA, as in decode). Every warp calls put(); after a __syncthreads()
// any thread may get() any (row, column pair). Summation is in warp order:
// the result does not depend on scheduling.
//   o:  [WARPS][16] rows of D floats at a pitch of LDO floats, e.g. the K/V
//       buffers once the key loop is done (a pitch of D + 8 spreads put()'s
//       row-major stores over all banks, D + 4 the key-major ones);
//   ml: [WARPS][16][2] floats (max, sum).
template <int WARPS, int D, int LDO = D>
struct WarpMerge {
    float *o;
    float (*ml)[16][2];

    __device__ __forceinline__ void put(const OnlineSoftmax &sm, const float acc[D / 8][4], int warp, int lane) const {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float l = sm.row_sum(i);
            if ((lane & 3) == 0) {
                ml[warp][(lane >> 2) + 8 * i][0] = sm.m[i];
                ml[warp][(lane >> 2) + 8 * i][1] = l;
            }
        }
        frag_store_f32<D / 8, LDO>(o + warp * 16 * LDO, acc, lane);
    }

    // Row r, columns d and d + 1 of the merged, unnormalized output in v;
    // returns the merged row sum, *max the merged max (-inf: nothing visible).
    __device__ __forceinline__ float get(int r, int d, float v[2], float *max) const {
        float mmax = -FSA_INF;
#pragma unroll
        for (int w = 0; w < WARPS; w++) mmax = fmaxf(mmax, ml[w][r][0]);
        float l = 0.f;
        v[0] = v[1] = 0.f;
        if (mmax != -FSA_INF) {
#pragma unroll
            for (int w = 0; w < WARPS; w++) {
                const float f = fast_exp2(ml[w][r][0] - mmax);
                l += ml[w][r][1] * f;
                v[0] += o[(w * 16 + r) * LDO + d] * f;
                v[1] += o[(w * 16 + r) * LDO + d + 1] * f;
            }
        }
        *max = mmax;
        return l;
    }
};

// ---------------------------------------------------------------- keys on the 16-row side
// Online softmax over key-major scores (fsa_mma.cuh, "keys on the 16-row
// side"): a lane holds two query rows per n8 tile (frag_col(lane, j, 0 / 1))
// and two keys (frag_row(lane, 0 / 2)); a row's max and sum run over the 8
// lanes that share lane & 3. Same arithmetic per row as OnlineSoftmax.
__device__ __forceinline__ float octet_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 16));
}
__device__ __forceinline__ float octet_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    return v + __shfl_xor_sync(0xffffffffu, v, 16);
}

template <int NQ>
struct KeyMajorSoftmax {
    float m[NQ][2];  // running max per query row (log2 units); -inf until a score is visible
    float l[NQ][2];  // running sum over this lane's keys

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int j = 0; j < NQ; j++) m[j][0] = m[j][1] = -FSA_INF, l[j][0] = l[j][1] = 0.f;
    }

    // One step over the raw scores of 16 keys; visible(key_half, j, c) says
    // whether key frag_row(lane, 2 key_half) takes part for query row
    // frag_col(lane, j, c). Only the first `nq` n8 tiles are computed (the
    // others are padding rows); s then holds the unnormalized probabilities
    // and alpha the rescale of the output (frag_scale_cols).
    template <int N, class Visible>
    __device__ __forceinline__ void step(float s[N][4], float scale_log2, Visible visible, float alpha[N][2]) {
        static_assert(N <= NQ, "steps over a prefix of the n8 tiles");
#pragma unroll
        for (int j = 0; j < N; j++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const float x0 = visible(0, j, c) ? s[j][c] : -FSA_INF;
                const float x1 = visible(1, j, c) ? s[j][2 + c] : -FSA_INF;
                const float m_new = fmaxf(m[j][c], octet_max(fmaxf(x0, x1)) * scale_log2);
                const float m_use = m_new == -FSA_INF ? 0.f : m_new;  // rows with nothing visible yet stay 0
                alpha[j][c] = fast_exp2(m[j][c] - m_use);
                m[j][c] = m_new;
                const float p0 = fast_exp2(fmaf(x0, scale_log2, -m_use)), p1 = fast_exp2(fmaf(x1, scale_log2, -m_use));
                s[j][c] = p0;
                s[j][2 + c] = p1;
                l[j][c] = l[j][c] * alpha[j][c] + (p0 + p1);
            }
    }
};

// WarpMerge's put for a key-major state: query row frag_col(lane, j, c) of
// the warp's 8NQ rows, values o[j][t] (frag_row: value column). Same merge
// area and get() as the row-major put.
template <int WARPS, int D, int NQ, int LDO>
__device__ __forceinline__ void warp_merge_put_keys(const WarpMerge<WARPS, D, LDO> &wm, const KeyMajorSoftmax<NQ> &sm,
                                                    const float o[NQ][D / 16][4], int warp, int lane) {
    static_assert(NQ <= 2, "16 rows per warp");
    float *ow = wm.o + warp * 16 * LDO;
#pragma unroll
    for (int j = 0; j < NQ; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int r = frag_col(lane, j, c);
            const float l = octet_sum(sm.l[j][c]);
            if (lane < 4) {
                wm.ml[warp][r][0] = sm.m[j][c];
                wm.ml[warp][r][1] = l;
            }
#pragma unroll
            for (int t = 0; t < D / 16; t++) {
                ow[r * LDO + 16 * t + frag_row(lane, 0)] = o[j][t][c];
                ow[r * LDO + 16 * t + frag_row(lane, 2)] = o[j][t][2 + c];
            }
        }
}

}  // namespace fsa
