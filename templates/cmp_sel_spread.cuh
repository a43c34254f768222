// A token's top-K blocks as one sorted list spread over the S lanes that
// share its blocks (FSA_CMP_SEL_SPREAD, cmp_params.cuh): entry r = s E + e
// (E = K / S) is register e of the segment's lane s, best first; empty
// entries score -inf with block -1. Against lane lists (LaneTopK, each lane
// the top-K of its own share, merged across lanes at the end) a candidate
// costs a few shuffles instead of a shift through K entries, and the K-th
// score a block must beat is the token's exact one (the segment's last
// entry), not a bound from the lanes' lists: fewer candidates, each cheaper.
// The order is sel_before's (score, then the lower block first), so
// the list is exactly the token's top K, as LaneTopK's merged lists are.
#pragma once
#include "cmp_sel_blocks.cuh"

namespace fsa {

template <int K, int S>
struct SpreadTopK {
    static constexpr int E = K / S;  // entries per lane
    static constexpr int N = K;      // entries of the segment (also the candidates of a stage: NB == K)
    static_assert(S >= 2 && S <= 16 && (S & (S - 1)) == 0 && E * S == K && (E & (E - 1)) == 0, "K a power-of-two multiple of S");
    static constexpr unsigned ALL = 0xffffffffu;
    float v[E];
    int x[E];
    int s;      // this lane in its segment
    int base;   // the segment's first lane

    __device__ __forceinline__ void init(int lane) {
        s = lane & (S - 1);
        base = lane & ~(S - 1);
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = -FSA_INF, x[e] = -1;
    }
    // The token's K-th score (-inf until the list is full).
    __device__ __forceinline__ float kth(void) const { return __shfl_sync(ALL, v[E - 1], S - 1, S); }
    // This segment's bits of a ballot.
    __device__ __forceinline__ unsigned seg(unsigned ballot) const {
        return (ballot >> base) & ((1u << S) - 1u);
    }

    // Inserts (cv, cx) where it belongs (nothing where it comes after the
    // K-th entry): an entry that cv comes before takes its predecessor's
    // place's content, the first such one takes cv.
    __device__ __forceinline__ void insert(float cv, int cx) {
        const float pv = __shfl_up_sync(ALL, v[E - 1], 1, S);
        const int px = __shfl_up_sync(ALL, x[E - 1], 1, S);
        bool b[E];
#pragma unroll
        for (int e = 0; e < E; e++) b[e] = sel_before(cv, cx, v[e], x[e]);
        const bool bprev = s > 0 && sel_before(cv, cx, pv, px);
#pragma unroll
        for (int e = E - 1; e >= 0; e--) {
            const bool before = e > 0 ? b[e - 1] : bprev;
            const float uv = e > 0 ? v[e - 1] : pv;
            const int ux = e > 0 ? x[e - 1] : px;
            v[e] = b[e] ? (before ? uv : cv) : v[e];
            x[e] = b[e] ? (before ? ux : cx) : x[e];
        }
    }

    // One compare-exchange step of a bitonic network over the segment's N
    // elements (element r = s E + e): element r keeps the first of itself and
    // element r ^ j where `first` says so, else the other.
    static __device__ __forceinline__ void exchange(float (&a)[E], int (&c)[E], int s, int j, int k) {
        float pa[E];
        int pc[E];
#pragma unroll
        for (int e = 0; e < E; e++) {
            if (j < E) {
                pa[e] = a[e ^ j];
                pc[e] = c[e ^ j];
            } else {
                pa[e] = __shfl_xor_sync(ALL, a[e], j / E, S);
                pc[e] = __shfl_xor_sync(ALL, c[e], j / E, S);
            }
        }
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int r = s * E + e;
            // Descending runs where r & k is 0 (k = N: the whole sequence).
            const bool first = ((r & j) == 0) == ((r & k) == 0);
            const bool take = first ? sel_before(pa[e], pc[e], a[e], c[e]) : sel_before(a[e], c[e], pa[e], pc[e]);
            if (take) a[e] = pa[e], c[e] = pc[e];
        }
    }

    // Merges the stage's candidates (a[e], c[e]: -inf and -1 where none)
    // into the list: a bitonic sort of the candidates, then the first of
    // entry r and candidate N - 1 - r (a bitonic sequence of the best N),
    // then a bitonic merge. Fifteen steps at N 16.
    __device__ __forceinline__ void merge(float (&a)[E], int (&c)[E]) {
#pragma unroll
        for (int k = 2; k <= N; k <<= 1)
#pragma unroll
            for (int j = k / 2; j > 0; j >>= 1) exchange(a, c, s, j, k == N ? 2 * N : k);
#pragma unroll
        for (int e = 0; e < E; e++) {
            const float ra = __shfl_xor_sync(ALL, a[E - 1 - e], S - 1, S);
            const int rc = __shfl_xor_sync(ALL, c[E - 1 - e], S - 1, S);
            if (sel_before(ra, rc, v[e], x[e])) v[e] = ra, x[e] = rc;
        }
#pragma unroll
        for (int j = N / 2; j > 0; j >>= 1) exchange(v, x, s, j, 2 * N);
    }

    // A stage's blocks of this lane (cv[e], cx[e]; -inf where not a block
    // of the token), e in ascending block order (cx[e] = first + e S). Those
    // that come before the token's K-th entry go into the list: by a merge
    // where some segment of the warp has `most` or more, else one at a time in
    // ascending block order (so a candidate that only equals the K-th score
    // never comes before it: every entry's block is lower).
    template <int MOST>
    __device__ __forceinline__ void add_stage(const float (&cv)[E], const int (&cx)[E]) {
        float kv = kth();
        unsigned m[E];
        int count = 0;
#pragma unroll
        for (int e = 0; e < E; e++) {
            m[e] = seg(__ballot_sync(ALL, cv[e] > kv));
            count += __popc(m[e]);
        }
        if ((int)__reduce_max_sync(ALL, (unsigned)count) >= MOST) {
            float a[E];
            int c[E];
#pragma unroll
            for (int e = 0; e < E; e++) {
                const bool on = (m[e] >> s) & 1u;
                a[e] = on ? cv[e] : -FSA_INF;
                c[e] = on ? cx[e] : -1;
            }
            merge(a, c);
            return;
        }
#pragma unroll
        for (int e = 0; e < E; e++) {
            unsigned todo = m[e];
            if (e > 0) todo &= seg(__ballot_sync(ALL, cv[e] > kv));  // (the K-th score has moved since)
            while (__any_sync(ALL, todo != 0)) {
                const int src = todo ? __ffs(todo) - 1 : 0;
                float yv = __shfl_sync(ALL, cv[e], src, S);
                int yx = __shfl_sync(ALL, cx[e], src, S);
                if (!todo) yv = -FSA_INF, yx = 0x7fffffff;  // (this segment is done: comes after everything)
                insert(yv, yx);
                kv = kth();
                todo &= todo - 1;
                todo &= seg(__ballot_sync(ALL, cv[e] > kv));
            }
        }
    }

    // The whole list into every lane of the segment (LaneTopK's blocks, for
    // its write_row).
    template <int KP>
    __device__ __forceinline__ void gather(int (&c)[KP]) const {
#pragma unroll
        for (int r = 0; r < K; r++) c[r] = __shfl_sync(ALL, x[r % E], r / E, S);
    }
};

}  // namespace fsa
