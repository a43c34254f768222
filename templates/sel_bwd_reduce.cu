// FSA backward, reductions:
//   fsa_sel_bwd_sums      both sums below in one grid, the dK/dV CTAs first (the FSA order: the
//                         longest dK/dV rows, which start first, overlap with the dq sums);
//   dq sums               dq of each (token, query head): sum of its pairs' dq rows, in slot and
//                         key-slice order;
//   fsa_sel_bwd_dkv_sum   for blocks split over several work items, their partial dK/dV summed in
//                         a fixed order (item order, or runs of items in run order for the longest
//                         lists) into the fp32 accumulator (once per token chunk), or straight out
//                         as dk and dv when one chunk covers every token;
//   fsa_sel_bwd_dkv_store the accumulator written out as dk and dv in the input dtype.
// Fixed summation orders make the result independent of scheduling. dq rows
// are D wide; an accumulator row holds D floats of dK, then DV of dV.
#include "sel_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}};
constexpr int DKV = fsa_bwd_dkv_row(D, DV);
constexpr int PIECES = D / 8;
constexpr int LANES = fsa_row_lanes(D);
constexpr int ROWS_PER_WARP = 32 / LANES;
constexpr int WARPS = FSA_ROW_THREADS / 32;

__device__ __forceinline__ void add8(float acc[8], const uint4 &v) {
    float f[8];
    unpack8<DT>(f, v);
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] += f[i];
}

// Rows of the chunk: (token, query head); empty rows give dq = 0. The
// pair rows are read DQ_ILP at a time, all loads issued before the adds (the
// same order of additions as one at a time: the same bits).
constexpr int DQ_ILP = 8;
__device__ __forceinline__ void dq_sums(const fsa_sel_params &p, long long block) {
    const int lane = threadIdx.x & 31;
    const int sub = lane / LANES, l = lane - sub * LANES;
    const long long row = (block * WARPS + (threadIdx.x >> 5)) * ROWS_PER_WARP + sub;
    const long long hq = p.num_kv_heads * G;
    if (row >= p.tc * hq || l >= PIECES) return;
    const long long tl = row / hq;
    const int qh = (int)(row - tl * hq), h = qh / G, g = qh - h * G;
    u64 mask = ((const u64 *)p.mask)[(long long)h * p.tc + tl];
    const long long pair0 = pair_index(p, h, tl, 0);
    const int slices = (int)p.key_slices;
    const u16 *dq_part = (const u16 *)p.dq_part + g * D + l * 8;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    // (slot, slice) rows in order: the next valid slot's slices, one after another.
    long long slot_row = 0;
    int s = slices;
    while (mask || s < slices) {
        uint4 v[DQ_ILP];
        int n = 0;
#pragma unroll
        for (int k = 0; k < DQ_ILP; k++) {
            if (s == slices && mask) {
                slot_row = (pair0 + __ffsll((long long)mask) - 1) * slices;
                mask &= mask - 1;
                s = 0;
            }
            if (s < slices) {
                v[k] = __ldcs((const uint4 *)(dq_part + (slot_row + s) * G * D));
                s++;
                n = k + 1;
            }
        }
#pragma unroll
        for (int k = 0; k < DQ_ILP; k++)
            if (k < n) add8(acc, v[k]);
    }
    const long long t = p.t0 + tl;
    *(uint4 *)(view_row<u16>(p.dq, t, qh) + l * 8) = pack8<DT>(acc);
}

// Per (key token, KV head) row: the key's block, if split over several work
// items, contributes the sum of its items' partial rows. Without an
// accumulator (the chunk covers every token: p.dkv_acc == 0) the sum goes
// straight out as dk and dv, and keys of blocks no item touched get zeros;
// 0 + x is x, so the bits are those of the accumulator's path.
// Warp k of CTA x (of `grid`) takes row x + k * grid, so the rows of the most
// selected blocks (the first ones of a sequence: block 0 is in every token's
// list) land in different CTAs. A row of at most SPLIT_MIN items is summed by
// its warp in item order; a longer one by the whole CTA, warp w summing the
// w-th of WARPS consecutive runs of its items, and the runs' sums added in
// run order: a fixed order (results do not depend on scheduling), with
// WARPS times the loads in flight of one warp on the longest rows.
constexpr int SUM_ILP = 8;  // partial rows loaded before they are added (in item order)
constexpr int SPLIT_MIN = 2 * SUM_ILP;
constexpr int COLS = DKV / 4;  // float4 columns of a row: dK, then dV
__device__ __forceinline__ void add4(float4 &s, const float4 &v) { s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w; }

struct DkvRow {
    long long t;
    int h, r;          // KV head; the key's row in its block
    int n_items;       // work items of the key's block
    bool work;         // the row is this kernel's to write
    const float *part; // the block's first partial
};

__device__ __forceinline__ DkvRow dkv_row(const fsa_sel_params &p, long long row) {
    DkvRow d;
    d.work = false;
    d.n_items = 0;
    if (row >= p.total_tokens * p.num_kv_heads) return d;
    d.t = row / p.num_kv_heads;
    d.h = (int)(row - d.t * p.num_kv_heads);
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, d.t);
    const long long j = (d.t - sb.start) / BK;
    const long long seg = (long long)d.h * p.nb_total + first_block_id(sb.start, sb.seq, BK) + j;
    const int *work = (const int *)p.work_offsets;
    d.n_items = work[seg + 1] - work[seg];
    // One item: written or added by the main kernel directly; none: zeros, or nothing to add.
    d.work = !(d.n_items == 1 || (d.n_items == 0 && p.dkv_acc != 0));
    d.r = (int)(d.t - sb.start - j * BK);
    const int part0 = d.n_items > 1 ? ((const int *)p.part_offsets)[seg] : 0;
    d.part = (const float *)p.dkv_part + (long long)part0 * BK * DKV;
    return d;
}

// Offset of float4 column c of the row inside a partial: dK (row r of its
// first BK rows), or dV (row r of the next BK).
__device__ __forceinline__ long long col_at(const DkvRow &d, int c) {
    return c * 4 < D ? (long long)d.r * D + c * 4 : (long long)BK * D + d.r * DV + (c * 4 - D);
}

// s[u] += the partials of items i0 .. i1 - 1 at column c0 + u * 32 + lane, in item order.
__device__ __forceinline__ void sum_items(float4 s[2], const DkvRow &d, int c0, int lane, int i0, int i1) {
    long long at[2];
#pragma unroll
    for (int u = 0; u < 2; u++) at[u] = col_at(d, c0 + u * 32 + lane);
    const bool live[2] = {c0 + lane < COLS, c0 + 32 + lane < COLS};
    int it = i0;
    for (; it + SUM_ILP <= i1; it += SUM_ILP) {
        float4 v[2][SUM_ILP];
#pragma unroll
        for (int k = 0; k < SUM_ILP; k++)
#pragma unroll
            for (int u = 0; u < 2; u++)
                if (live[u]) v[u][k] = *(const float4 *)(d.part + (long long)(it + k) * BK * DKV + at[u]);
#pragma unroll
        for (int k = 0; k < SUM_ILP; k++)
#pragma unroll
            for (int u = 0; u < 2; u++) add4(s[u], v[u][k]);
    }
    for (; it < i1; it++)
#pragma unroll
        for (int u = 0; u < 2; u++)
            if (live[u]) add4(s[u], *(const float4 *)(d.part + (long long)it * BK * DKV + at[u]));
}

// What the row's column c starts from: the accumulator, or zero.
__device__ __forceinline__ float4 col_start(const fsa_sel_params &p, const DkvRow &d, int c) {
    if (p.dkv_acc == 0) return make_float4(0.f, 0.f, 0.f, 0.f);
    return ((const float4 *)((const float *)p.dkv_acc + (d.t * p.num_kv_heads + d.h) * DKV))[c];
}

// Column c's sum into the accumulator, or out as dk / dv.
__device__ __forceinline__ void col_finish(const fsa_sel_params &p, const DkvRow &d, int c, const float4 &s) {
    if (p.dkv_acc != 0) {
        ((float4 *)((float *)p.dkv_acc + (d.t * p.num_kv_heads + d.h) * DKV))[c] = s;
        return;
    }
    u16 *dst = c * 4 < D ? view_row<u16>(p.dk, d.t, d.h) + c * 4 : view_row<u16>(p.dv, d.t, d.h) + (c * 4 - D);
    *(uint2 *)dst = make_uint2(DT::pack(s.x, s.y), DT::pack(s.z, s.w));
}

__device__ __forceinline__ void dkv_sums(const fsa_sel_params &p, long long x, long long grid) {
    __shared__ float4 run_sums[WARPS][64];
    __shared__ unsigned long_rows;  // bit k: warp k's row is summed by the whole CTA
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) long_rows = 0;
    __syncthreads();
    const DkvRow mine = dkv_row(p, x + warp * grid);
    const bool split = mine.work && mine.n_items > SPLIT_MIN;
    if (split && lane == 0) atomicOr(&long_rows, 1u << warp);
    if (mine.work && !split) {
#pragma unroll
        for (int c0 = 0; c0 < COLS; c0 += 64) {  // two columns of 4 floats per lane and step
            float4 s[2];
#pragma unroll
            for (int u = 0; u < 2; u++)
                s[u] = c0 + u * 32 + lane < COLS ? col_start(p, mine, c0 + u * 32 + lane) : make_float4(0.f, 0.f, 0.f, 0.f);
            sum_items(s, mine, c0, lane, 0, mine.n_items);
#pragma unroll
            for (int u = 0; u < 2; u++)
                if (c0 + u * 32 + lane < COLS) col_finish(p, mine, c0 + u * 32 + lane, s[u]);
        }
    }
    __syncthreads();  // long_rows complete
    for (unsigned m = long_rows; m; m &= m - 1) {
        const DkvRow d = dkv_row(p, x + (__ffs(m) - 1) * grid);
        const int i0 = d.n_items * warp / WARPS, i1 = d.n_items * (warp + 1) / WARPS;
        for (int c0 = 0; c0 < COLS; c0 += 64) {
            float4 s[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
            sum_items(s, d, c0, lane, i0, i1);
#pragma unroll
            for (int u = 0; u < 2; u++) run_sums[warp][u * 32 + lane] = s[u];
            __syncthreads();  // every run's sum is in
            const int c = c0 + (int)threadIdx.x;
            if (threadIdx.x < 64 && c < COLS) {
                float4 tot = col_start(p, d, c);
                for (int w = 0; w < WARPS; w++) add4(tot, run_sums[w][threadIdx.x]);
                col_finish(p, d, c, tot);
            }
            __syncthreads();  // run_sums free again
        }
    }
}

// The chunk's key rows: keys after its last token get nothing from it (causal).
__device__ __forceinline__ long long dkv_sum_blocks(const fsa_sel_params &p) {
    return fsa_bwd_dkv_sum_blocks((p.t0 + p.tc) * p.num_kv_heads);
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_bwd_dkv_sum(const fsa_sel_params p) {
    dkv_sums(p, blockIdx.x, gridDim.x);
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_bwd_sums(const fsa_sel_params p) {
    const long long dkv_blocks = dkv_sum_blocks(p);
    if (blockIdx.x < dkv_blocks) dkv_sums(p, blockIdx.x, dkv_blocks);
    else dq_sums(p, blockIdx.x - dkv_blocks);
}

// One warp per (token, KV head): dk and dv from the accumulator.
extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_bwd_dkv_store(const fsa_sel_params p) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= p.total_tokens * p.num_kv_heads) return;
    const long long t = row / p.num_kv_heads;
    const int h = (int)(row - t * p.num_kv_heads);
    const float *acc = (const float *)p.dkv_acc + row * DKV;
    for (int c = lane; c < DKV / 8; c += 32) {  // pieces of dK, then of dV
        const float4 a = *(const float4 *)(acc + c * 8);
        const float4 b = *(const float4 *)(acc + c * 8 + 4);
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        u16 *dst = c < PIECES ? view_row<u16>(p.dk, t, h) + c * 8 : view_row<u16>(p.dv, t, h) + (c - PIECES) * 8;
        *(uint4 *)dst = pack8<DT>(v);
    }
}
