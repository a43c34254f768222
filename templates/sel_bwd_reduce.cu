// FSA backward, reductions:
//   fsa_sel_bwd_dq        dq of each (token, query head): sum of its pairs' dq rows, in slot and
//                         key-slice order;
//   fsa_sel_bwd_dkv_sum   for blocks split over several work items, their partial dK/dV summed in
//                         item order into the fp32 accumulator (once per token chunk);
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

// Rows of the chunk: (token, query head); empty rows give dq = 0.
extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_bwd_dq(const fsa_sel_params p) {
    const int lane = threadIdx.x & 31;
    const int sub = lane / LANES, l = lane - sub * LANES;
    const long long row = ((long long)blockIdx.x * WARPS + (threadIdx.x >> 5)) * ROWS_PER_WARP + sub;
    const long long hq = p.num_kv_heads * G;
    if (row >= p.tc * hq || l >= PIECES) return;
    const long long tl = row / hq;
    const int qh = (int)(row - tl * hq), h = qh / G, g = qh - h * G;
    const u64 mask = ((const u64 *)p.mask)[(long long)h * p.tc + tl];
    const long long pair0 = pair_index(p, h, tl, 0);
    const int slices = (int)p.key_slices;
    const u16 *dq_part = (const u16 *)p.dq_part;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (u64 m = mask; m; m &= m - 1) {
        const long long slot_row = (pair0 + __ffsll((long long)m) - 1) * slices;
        for (int s = 0; s < slices; s++) add8(acc, *(const uint4 *)(dq_part + ((slot_row + s) * G + g) * D + l * 8));
    }
    const long long t = p.t0 + tl;
    *(uint4 *)(view_row<u16>(p.dq, t, qh) + l * 8) = pack8<DT>(acc);
}

// One warp per (key token, KV head): the key's block, if split over several
// work items, contributes the sum of its items' partial rows.
extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS) fsa_sel_bwd_dkv_sum(const fsa_sel_params p) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= p.total_tokens * p.num_kv_heads) return;
    const long long t = row / p.num_kv_heads;
    const int h = (int)(row - t * p.num_kv_heads);
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
    const long long j = (t - sb.start) / BK;
    const long long seg = (long long)h * p.nb_total + first_block_id(sb.start, sb.seq, BK) + j;
    const int *work = (const int *)p.work_offsets;
    const int n_items = work[seg + 1] - work[seg];
    if (n_items <= 1) return;  // none, or added by the main kernel directly
    const int r = (int)(t - sb.start - j * BK);
    const int part0 = ((const int *)p.part_offsets)[seg];
    const float *part = (const float *)p.dkv_part;
    float4 *acc = (float4 *)((float *)p.dkv_acc + (t * p.num_kv_heads + h) * DKV);
    for (int c = lane; c < DKV / 4; c += 32) {  // dK then dV, 4 floats per step
        // Column c * 4 of the row: of dK (row r of the item's first BK rows), or of dV (row r of the next BK).
        const long long at = c * 4 < D ? (long long)r * D + c * 4 : (long long)BK * D + r * DV + (c * 4 - D);
        float4 s = acc[c];
        for (int it = 0; it < n_items; it++) {
            const float4 v = *(const float4 *)(part + (long long)(part0 + it) * BK * DKV + at);
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        acc[c] = s;
    }
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
