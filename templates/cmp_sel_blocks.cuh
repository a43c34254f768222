// Building blocks of the block selection (cmp_select.cu): the sums of the
// compressed probabilities over a token's heads in registers, and a top-k
// list per lane in registers that lanes merge at the end.
#pragma once
#include "fsa_mma.cuh"

namespace fsa {

// The sums over each token's G heads (G a power of two; row r of a set of 16
// is head r % G of token r / G) of MT sets of 16 rows' S = Q K^T fragments
// (NJ columns of 8), written to the token-major sums at tok (pitch TOKP
// floats; token m * 16 / G + r / G of the warp). A butterfly over the lanes
// that hold a token's heads halves the values each lane carries per step
// (sum and scatter), so a lane sends NJ * 2 * (1 - 1 / G') values for G' =
// min(G, 8) heads across lanes; every sum runs in a fixed order.
template <int G, int NJ, int MT, int TOKP>
__device__ __forceinline__ void head_sums_to_tokens(float *tok, float s[MT][NJ][4], int lane) {
    constexpr int LEVELS = G >= 8 ? 3 : G >= 4 ? 2 : G >= 2 ? 1 : 0;
    constexpr int E = G == 16 ? 2 : 4;  // values per column pair: rows lo and hi, or their sum
    static_assert((G & (G - 1)) == 0 && G <= 16 && (NJ >> LEVELS) >= 1, "a power-of-two group over 8-column tiles");
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if constexpr (G == 16) {  // rows lo and hi are heads of the same token
#pragma unroll
            for (int jn = 0; jn < NJ; jn++) s[m][jn][0] += s[m][jn][2], s[m][jn][1] += s[m][jn][3];
        }
        int jn0 = 0;  // the first of the column tiles this lane still carries
#pragma unroll
        for (int level = 0; level < LEVELS; level++) {
            const int half = NJ >> (level + 1);
            const bool upper = (lane >> (2 + level)) & 1;
#pragma unroll
            for (int i = 0; i < half; i++)
#pragma unroll
                for (int e = 0; e < E; e++) {
                    const float a = s[m][i][e], b = s[m][i + half][e];
                    s[m][i][e] = (upper ? b : a) + __shfl_xor_sync(0xffffffffu, upper ? a : b, 4 << level);
                }
            jn0 += upper ? half : 0;
        }
#pragma unroll
        for (int i = 0; i < (NJ >> LEVELS); i++)
#pragma unroll
            for (int h = 0; h < E / 2; h++) {
                const int t = m * (16 / G) + ((lane >> 2) + 8 * h) / G;
                float *at = tok + t * TOKP + (jn0 + i) * 8 + 2 * (lane & 3);  // odd pitches: no float2
                at[0] = s[m][i][2 * h], at[1] = s[m][i][2 * h + 1];
            }
    }
}

// (v, c) ranks before (w, d): the higher score, and of equal scores the lower block.
__device__ __forceinline__ bool sel_before(float v, int c, float w, int d) { return v > w || (v == w && c < d); }

// A lane's running top-K blocks in registers, best first; empty entries score
// -inf with block -1. KP is K rounded up to a power of two for the merge
// across lanes; the entries from K on stay empty while the lane streams.
template <int K>
struct LaneTopK {
    static constexpr int KP = K <= 1 ? 1 : K <= 2 ? 2 : K <= 4 ? 4 : K <= 8 ? 8 : K <= 16 ? 16 : K <= 32 ? 32 : 64;
    static_assert(K >= 1 && K <= 64, "top-k from 1 to 64");
    float v[KP];
    int c[KP];

    __device__ __forceinline__ void clear(void) {
#pragma unroll
        for (int e = 0; e < KP; e++) v[e] = -FSA_INF, c[e] = -1;
    }
    __device__ __forceinline__ float last(void) const { return v[K - 1]; }

    // Inserts block x scoring s, which beats the last entry and is higher
    // than every block in the list (a lane sees its blocks in ascending
    // order): it goes after every entry scoring >= s, so equal scores keep
    // the lower block first. A shift network: no indexing by a variable.
    __device__ __forceinline__ void insert(float s, int x) {
#pragma unroll
        for (int e = K - 1; e > 0; e--) {  // (s <= v[e] keeps v[e]: the max picks it)
            const bool here = s > v[e], above = s > v[e - 1];
            v[e] = above ? v[e - 1] : fmaxf(s, v[e]);
            c[e] = above ? c[e - 1] : here ? x : c[e];
        }
        if (s > v[0]) v[0] = s, c[0] = x;
    }

    // The best KP of this list and lane (lane ^ mask)'s, both sorted: the
    // better of entry e and the partner's entry KP - 1 - e form a bitonic
    // sequence of the best KP, which a merge network sorts. Both lanes end
    // with the same list (one total order: score, then block).
    __device__ __forceinline__ void merge_xor(int mask) {
        float ov[KP];
        int oc[KP];
#pragma unroll
        for (int e = 0; e < KP; e++) {
            ov[e] = __shfl_xor_sync(0xffffffffu, v[KP - 1 - e], mask);
            oc[e] = __shfl_xor_sync(0xffffffffu, c[KP - 1 - e], mask);
        }
#pragma unroll
        for (int e = 0; e < KP; e++)
            if (sel_before(ov[e], oc[e], v[e], c[e])) v[e] = ov[e], c[e] = oc[e];
#pragma unroll
        for (int j = KP / 2; j > 0; j >>= 1)
#pragma unroll
            for (int e = 0; e < KP; e++)
                if ((e & j) == 0 && sel_before(v[e + j], c[e + j], v[e], c[e])) {
                    const float tv = v[e];
                    const int tc = c[e];
                    v[e] = v[e + j], c[e] = c[e + j];
                    v[e + j] = tv, c[e + j] = tc;
                }
    }

    // The first K entries into row ascending by block (an entry's slot is
    // the number of chosen blocks below it), -1 after them.
    __device__ __forceinline__ void write_row(int *row) const {
        int n = 0;
#pragma unroll
        for (int e = 0; e < K; e++) {
            if (c[e] < 0) continue;
            int rank = 0;
#pragma unroll
            for (int f = 0; f < K; f++) rank += c[f] >= 0 && c[f] < c[e];
            row[rank] = c[e];
            n++;
        }
        for (int e = n; e < K; e++) row[e] = -1;
    }
};

}  // namespace fsa
