// The merge of a split sequence's shares (paged-cache attention): each share
// is a normalized partial (Dv floats per row) and its log2-sum-exp per row,
// and the merge weighs them by exp2(lse_s - max) in share order, so the result
// does not depend on which share finished first. The partials live either in
// the workspace (every CTA counts itself done on a counter of its (sequence,
// KV head) and the last one merges) or, when the shares' CTAs form a cluster
// (sm_90), in each CTA's shared memory, merged by the whole cluster after a
// cluster barrier: no counter, no fence, no partial through L2 (workspace
// partials stay in L2 until the merge drops their lines: drop_partials). Both read the
// same partial values and fold them the same way, so the bits do not depend
// on which path ran.
#pragma once
#include "fsa_cluster.cuh"
#include "paged_kv.cuh"

namespace fsa {

// Workspace path: each of the `ctas` CTAs of (sequence b, KV head h) writes
// its shares' partial rows, then counts itself done on the workspace counter
// of (b, h); the last one to finish gets true (every thread of its CTA) and
// the counter is left zero for the next call. Every thread calls it, after
// its partial stores.
__device__ __forceinline__ bool finish_share(int *flag, int *counter, int ctas) {
    __threadfence();  // this share's partials are visible device-wide before it counts
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool last = atomicAdd(counter, 1) == ctas - 1;
        if (last) atomicExch(counter, 0);
        *flag = last;
    }
    __syncthreads();
    const bool last = *flag != 0;
    if (last) __threadfence();  // and the other shares' partials are seen here
    return last;
}

// A share's epilogue, after the warps put their rows (WarpMerge::put) and a
// barrier: share_row_factors gives each live row (thread r: row r < live) the
// factor of each of its kge warps, 1 / the merged sum and the log2-sum-exp
// (rowf[r][w], rowf[r][WARPS], rowf[r][WARPS + 1]; factors of absent warps
// 0); then, after a barrier, share_items merges each item (row, column
// pair) from the N = kge warps' rows in the merge area om and hands the
// normalized pair and the row's lse to out(r, d, x, y, lse2). The arithmetic,
// and its order, of WarpMerge::get, so the same bits, but per item only loads
// and multiply-adds, EI items' loads at once.
template <int WARPS>
__device__ __forceinline__ void share_row_factors(float (*rowf)[WARPS + 2], float (*ml)[16][2], int kge, int live) {
    const int r = threadIdx.x;
    if (r >= live) return;
    float(*m)[16][2] = ml + (r >> 4) * kge;
    const int rr = r & 15;
    float mmax = -FSA_INF;
    for (int w = 0; w < kge; w++) mmax = fmaxf(mmax, m[w][rr][0]);
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
        float f = 0.f;
        if (w < kge && mmax != -FSA_INF) {
            f = fast_exp2(m[w][rr][0] - mmax);
            l += m[w][rr][1] * f;
        }
        rowf[r][w] = f;
    }
    rowf[r][WARPS] = l > 0.f ? 1.f / l : 0.f;
    rowf[r][WARPS + 1] = l > 0.f ? mmax + fast_log2(l) : -FSA_INF;
}

template <int N, int DV, int LDO, int WARPS, int THREADS, class Out>
__device__ __forceinline__ void share_items(const float *om, const float (*rowf)[WARPS + 2], int items, Out out) {
    constexpr int EI = 4;
#pragma unroll 1
    for (int c0 = threadIdx.x; c0 < items; c0 += EI * THREADS) {
        float2 acc[EI];
        int rs[EI], ds[EI];
#pragma unroll
        for (int i = 0; i < EI; i++) {
            const int c = min(c0 + i * THREADS, items - 1);  // past the items: a repeat, not stored
            const int r = c / (DV / 2), d = (c - r * (DV / 2)) * 2;
            const float *ob = om + ((r >> 4) * N * 16 + (r & 15)) * LDO + d;
            float2 v = make_float2(0.f, 0.f);
#pragma unroll
            for (int w = 0; w < N; w++) {
                const float2 x = *(const float2 *)(ob + w * 16 * LDO);
                const float f = rowf[r][w];
                v.x += x.x * f;
                v.y += x.y * f;
            }
            // A row with no visible key (lse -inf) stays 0, as in get (0 x a stale Inf would not).
            acc[i] = rowf[r][WARPS + 1] == -FSA_INF ? make_float2(0.f, 0.f) : v, rs[i] = r, ds[i] = d;
        }
#pragma unroll
        for (int i = 0; i < EI; i++) {
            if (c0 + i * THREADS >= items) break;
            const float inv = rowf[rs[i]][WARPS];
            out(rs[i], ds[i], acc[i].x * inv, acc[i].y * inv, rowf[rs[i]][WARPS + 1]);
        }
    }
}

// Where the merge reads share s's lse and partial of row r (columns c .. c + 3).
// WorkspaceShares: from the workspace through L2 (other SMs wrote them during
// this launch); lp, op: the first share's lse and partial rows of (b, h),
// shares ROWS rows apart.
template <int D, int ROWS>
struct WorkspaceShares {
    const float *lp, *op;
    __device__ __forceinline__ float lse(int s, int r) const { return __ldcg(lp + s * ROWS + r); }
    __device__ __forceinline__ float4 o4(int s, int r, int c) const {
        return __ldcg((const float4 *)(op + ((long long)s * ROWS + r) * D + c));
    }
};

// After the workspace merge: the L2 lines of (b, h)'s partial rows (from row
// first_part on, nsplit shares of ROWS rows, of which the first `live` were
// written) are dropped without a write-back; nothing reads them again. Only
// whole lines of a share's written rows go (a share starts on a line whenever
// the workspace does; else its lines are kept), so a neighbouring pair's
// partials are never touched and rows this call did not write cost no request.
// (The lse rows, 1/Dv of the bytes, are left to L2.) One flat loop over the
// lines: the widest tiles have no register to spare. Measured: bench/NOTES.md
// "keep" (-1.5 to -7% on split batches of 64-128 sequences, most with 4 tokens).
template <int DV, int ROWS>
__device__ __forceinline__ void drop_partials(const fsa_kvc_params &p, long long first_part, int nsplit, int live,
                                              int first, int stride) {
    const int lines = live * DV * 4 / 128;  // whole lines of one share's written rows
    const char *o0 = (const char *)((const float *)p.o_part + first_part * DV);
#pragma unroll 1
    for (int i = first; i < nsplit * lines; i += stride) {
        const int s = i / lines;
        const char *line = o0 + (long long)s * ROWS * DV * 4 + 128 * (i - s * lines);
        if (((unsigned long long)line & 127) == 0) discard_l2_line(line);
    }
}

// ClusterShares: CTA s of the cluster holds share s at the same shared byte
// addresses in its own shared memory (lp: lse per row, op: rows of D floats).
template <int D>
struct ClusterShares {
    u32 lp, op;
    __device__ __forceinline__ float lse(int s, int r) const { return cluster_ld_f32(cluster_map(lp + 4 * r, s)); }
    __device__ __forceinline__ float4 o4(int s, int r, int c) const {
        return cluster_ld_f32x4(cluster_map(op + 4 * (r * D + c), s));
    }
};

// The merge of ITEMS items (four columns of a row each): items c0, c0 +
// stride, ... of the span's rows (past the last item: repeats, never stored).
// fold reads the lse and partials of up to SHARES shares for all of them at
// once (one round trip) and folds them into a running max, sum and output per
// item in share order; store writes the normalized items, and the item of
// column 0 the row's lse. The fold takes the shares in groups of MERGE_SHARES
// (one group up to that many shares) whatever ITEMS and SHARES are, so the bits
// depend only on the share count.
constexpr int MERGE_SHARES = 16;
template <int D, int G, int ITEMS, int SHARES>
struct MergeItems {
    static_assert(D % 4 == 0, "four columns at a time");
    static_assert(MERGE_SHARES % SHARES == 0, "a pass of SHARES shares serves one fold group");
    int r[ITEMS], d[ITEMS];
    float mmax[ITEMS], l[ITEMS];
    float4 acc[ITEMS];

    template <class Src>
    __device__ __forceinline__ void fold(const Src &src, int items, int nsplit, int c0, int stride) {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            const int c = min(c0 + i * stride, items - 1);  // past the items: a repeat, not stored
            r[i] = c / (D / 4), d[i] = (c - r[i] * (D / 4)) * 4;
            mmax[i] = -FSA_INF, l[i] = 0.f, acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        for (int s0 = 0; s0 < nsplit; s0 += SHARES) {
            float ls[ITEMS][SHARES];
            float4 x[ITEMS][SHARES];
#pragma unroll
            for (int i = 0; i < ITEMS; i++)
#pragma unroll
                for (int u = 0; u < SHARES; u++) {
                    const int s = min(s0 + u, nsplit - 1);  // past the shares: masked below
                    ls[i][u] = s0 + u < nsplit ? src.lse(s, r[i]) : -FSA_INF;
                    x[i][u] = src.o4(s, r[i], d[i]);
                }
#pragma unroll
            for (int i = 0; i < ITEMS; i++) {
                float m_new = mmax[i];
#pragma unroll
                for (int u = 0; u < SHARES; u++) m_new = fmaxf(m_new, ls[i][u]);
                if (m_new == -FSA_INF) continue;  // nothing visible yet: shares with no key add nothing
                const float a = fast_exp2(mmax[i] - m_new);
                l[i] *= a;
                acc[i].x *= a, acc[i].y *= a, acc[i].z *= a, acc[i].w *= a;
#pragma unroll
                for (int u = 0; u < SHARES; u++) {
                    const float f = fast_exp2(ls[i][u] - m_new);
                    l[i] += f;
                    acc[i].x += x[i][u].x * f, acc[i].y += x[i][u].y * f;
                    acc[i].z += x[i][u].z * f, acc[i].w += x[i][u].w * f;
                }
                mmax[i] = m_new;
            }
        }
    }

    template <class DT>
    __device__ __forceinline__ void store(const fsa_kvc_params &p, QuerySpan span, int h, int items, int c0,
                                          int stride) const {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            if (c0 + i * stride >= items) break;
            const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
            const long long t = span.start + r[i] / G;
            const int hq = h * G + r[i] % G;
            st_global_u32x2(view_row<u16>(p.o, t, hq) + d[i], DT::pack(acc[i].x * inv, acc[i].y * inv),
                            DT::pack(acc[i].z * inv, acc[i].w * inv));
            if (d[i] == 0 && p.lse)
                st_global_f32((float *)p.lse + (long long)hq * p.tq + t,
                              l[i] > 0.f ? (mmax[i] + fast_log2(l[i])) * LN2 : -FSA_INF);
        }
    }
};

// One pass of the merge after another: the threads take the items first,
// first + stride, ... ITEMS at a time, each fold followed by its stores.
template <class DT, int D, int G, int ITEMS, int SHARES, class Src>
__device__ __forceinline__ void merge_pass(const fsa_kvc_params &p, const Src &src, QuerySpan span, int h, int nsplit,
                                           int first, int stride) {
    const int items = span.len * G * (D / 4);
    for (int c0 = first; c0 < items; c0 += ITEMS * stride) {
        MergeItems<D, G, ITEMS, SHARES> m;
        m.fold(src, items, nsplit, c0, stride);
        m.template store<DT>(p, span, h, items, c0, stride);
    }
}

// Merges the shares of a one-tile sequence of KV head h into o and lse; the
// calling threads take items first, first + stride, ... (the last CTA of the
// workspace path: its thread index and block size; a cluster: the CTA's rank
// times the block size plus its thread index, and the cluster's threads).
// Every calling thread then calls then() once, after the merge.
template <class DT, int D, int G, class Src, class Then>
__device__ __forceinline__ void merge_shares(const fsa_kvc_params &p, const Src &src, QuerySpan span, int h, int nsplit,
                                             int first, int stride, Then &&then) {
    // A pass over 4, 8 or 16 shares is one fold group, like a group of MERGE_SHARES with the rest
    // masked. Where every thread has at most one item (a cluster), one item at a time.
    const bool one = span.len * G * (D / 4) <= stride;
    if (nsplit <= 4) {
        if (one) merge_pass<DT, D, G, 1, 4>(p, src, span, h, nsplit, first, stride);
        else merge_pass<DT, D, G, 4, 4>(p, src, span, h, nsplit, first, stride);
    } else if (nsplit <= 8) {
        if (one) merge_pass<DT, D, G, 1, 8>(p, src, span, h, nsplit, first, stride);
        else merge_pass<DT, D, G, 2, 8>(p, src, span, h, nsplit, first, stride);
    } else {
        merge_pass<DT, D, G, 1, MERGE_SHARES>(p, src, span, h, nsplit, first, stride);
    }
    then();
}

}  // namespace fsa
