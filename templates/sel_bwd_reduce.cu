// FSA backward, reductions:
//   fsa_sel_bwd_sums      both sums below in one grid, the dK/dV CTAs first (the FSA order: one
//                         launch and one tail fewer per chunk; the dK/dV rows overlap the dq sums);
//   dq sums               dq of each (token, query head): sum of its pairs' dq rows, in slot and
//                         key-slice order, then the caller's dq_add row when there is one;
//   fsa_sel_bwd_dkv_sum   for blocks split over several work items, their partial dK/dV summed in
//                         item order into the fp32 accumulator (once per token chunk), or straight
//                         out as dk and dv when one chunk covers every token; the last token chunk
//                         adds them to the accumulator and writes every row out as dk and dv.
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
    if (p.dq_add.ptr != 0) add8(acc, *(const uint4 *)(view_row<const u16>(p.dq_add, t, qh) + l * 8));  // may be dq
    *(uint4 *)(view_row<u16>(p.dq, t, qh) + l * 8) = pack8<DT>(acc);
}

// One warp per (key token, KV head): the key's block, if split over several
// work items, contributes the sum of its items' partial rows. Without an
// accumulator (the chunk covers every token: p.dkv_acc == 0) the sum goes
// straight out as dk and dv, and keys of blocks no item touched get zeros;
// 0 + x is x, so the bits are those of the accumulator's path. The last token
// chunk of a call with the accumulator writes every row out the same way,
// the accumulator's value plus this chunk's partials (a block of one item
// there: the main kernel's). A key outside the sequence the search finds for
// it (before cu_seqlens[0], past cu_seqlens[batch]: malformed offsets) gets
// zeros whatever an item wrote or added there, so that every dk and dv row
// is written. `block`: this CTA's place among the CTAs of the sums.
// Partial rows loaded before they are added (in item order). 4, not more: the
// sums kernel shares its registers with dq_sums, and at 8 (78 registers) only
// three CTAs fit an SM, too few bytes in flight for HBM; at 4, and with the
// kernels bounded to four CTAs per SM (64 registers), more (bench/NOTES.md
// "ilp2").
constexpr int SUM_ILP = 4;
constexpr int SUM_CTAS_PER_SM = 4;
__device__ __forceinline__ void add4(float4 &s, const float4 &v) { s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w; }

__device__ __forceinline__ void dkv_sums(const fsa_sel_params &p, long long block) {
    const int lane = threadIdx.x & 31;
    const long long row = block * WARPS + (threadIdx.x >> 5);
    if (row >= p.total_tokens * p.num_kv_heads) return;
    const long long t = row / p.num_kv_heads;
    const int h = (int)(row - t * p.num_kv_heads);
    const int *cu = (const int *)p.cu_seqlens;
    const SeqBounds sb = seq_bounds(cu, (int)p.batch, p.total_tokens, t);
    const bool keyed = __ldg(cu + sb.seq) <= t && t < __ldg(cu + sb.seq + 1);
    const long long j = (t - sb.start) / BK;
    const long long seg = (long long)h * p.nb_total + first_block_id(sb.start, sb.seq, BK) + j;
    const int *work = (const int *)p.work_offsets;
    const int n_items = keyed ? work[seg + 1] - work[seg] : 0;
    const bool direct = p.dkv_acc == 0;
    const bool last = bwd_last_token_chunk(p);  // the accumulator's rows go out as dk and dv
    if (n_items == 1 || (n_items == 0 && !direct && !last)) return;  // written or added by the main kernel directly
    const int r = (int)(t - sb.start - j * BK);
    const int part0 = n_items > 1 ? ((const int *)p.part_offsets)[seg] : 0;
    const float *part = (const float *)p.dkv_part + (long long)part0 * BK * DKV;
    float4 *acc = direct ? nullptr : (float4 *)((float *)p.dkv_acc + (t * p.num_kv_heads + h) * DKV);
#pragma unroll
    for (int c0 = 0; c0 < DKV / 4; c0 += 64) {  // dK then dV: two columns of 4 floats per lane and step
        float4 s[2];
        int at[2];  // offsets within an item's partial rows (BK * DKV floats)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            // Column c * 4 of the row: of dK (row r of the item's first BK rows), or of dV (row r of the next BK).
            const int c = c0 + u * 32 + lane;
            at[u] = c * 4 < D ? r * D + c * 4 : BK * D + r * DV + (c * 4 - D);
            s[u] = direct || !keyed || c >= DKV / 4 ? make_float4(0.f, 0.f, 0.f, 0.f) : acc[c];
        }
        int it = 0;
        for (; it + SUM_ILP <= n_items; it += SUM_ILP) {
            float4 v[2][SUM_ILP];
#pragma unroll
            for (int k = 0; k < SUM_ILP; k++)
#pragma unroll
                for (int u = 0; u < 2; u++)
                    if (c0 + u * 32 + lane < DKV / 4) v[u][k] = *(const float4 *)(part + (long long)(it + k) * BK * DKV + at[u]);
#pragma unroll
            for (int k = 0; k < SUM_ILP; k++)
#pragma unroll
                for (int u = 0; u < 2; u++) add4(s[u], v[u][k]);
        }
        for (; it < n_items; it++)
#pragma unroll
            for (int u = 0; u < 2; u++)
                if (c0 + u * 32 + lane < DKV / 4) add4(s[u], *(const float4 *)(part + (long long)it * BK * DKV + at[u]));
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int c = c0 + u * 32 + lane;
            if (c >= DKV / 4) continue;
            if (!direct && !last) {
                acc[c] = s[u];
                continue;
            }
            u16 *dst = c * 4 < D ? view_row<u16>(p.dk, t, h) + c * 4 : view_row<u16>(p.dv, t, h) + (c * 4 - D);
            *(uint2 *)dst = make_uint2(DT::pack(s[u].x, s[u].y), DT::pack(s[u].z, s[u].w));
        }
    }
}

// The chunk's key rows: keys after its last token get nothing from it (causal).
__device__ __forceinline__ long long dkv_sum_blocks(const fsa_sel_params &p) {
    return fsa_bwd_dkv_sum_blocks((p.t0 + p.tc) * p.num_kv_heads);
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS, SUM_CTAS_PER_SM) fsa_sel_bwd_dkv_sum(const fsa_sel_params p) {
    dkv_sums(p, blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(FSA_ROW_THREADS, SUM_CTAS_PER_SM) fsa_sel_bwd_sums(const fsa_sel_params p) {
    const long long dkv_blocks = dkv_sum_blocks(p);
    if (blockIdx.x < dkv_blocks) dkv_sums(p, blockIdx.x);
    else dq_sums(p, blockIdx.x - dkv_blocks);
}
