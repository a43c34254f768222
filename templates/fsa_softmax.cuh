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
//   o:  [WARPS][16][D] floats, e.g. the K/V buffers once the key loop is done;
//   ml: [WARPS][16][2] floats (max, sum).
template <int WARPS, int D>
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
        frag_store_f32<D / 8, D>(o + warp * 16 * D, acc, lane);
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
                v[0] += o[(w * 16 + r) * D + d] * f;
                v[1] += o[(w * 16 + r) * D + d + 1] * f;
            }
        }
        *max = mmax;
        return l;
    }
};

}  // namespace fsa
