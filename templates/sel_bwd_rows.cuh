// What both FSA-order backward main kernels (mma.sync: sel_bwd_main.cu,
// warpgroup: sel_bwd_main_wg.cu) do per work item besides the products: the
// item's place in the lists, the row table of a round, and where the item's
// dK and dV go.
//
// Rows of a round are tiles of M rows: a tile packs M / G tokens x G heads,
// or for groups over M heads a token takes several tiles.
#pragma once
#include "sel_common.cuh"

namespace fsa {

// Row r of tile `tile` (tiles of M rows, G heads per KV head): list entry e
// of the round and head-in-group g; false for padding.
template <int M, int G>
__device__ __forceinline__ bool bwd_tile_row(int tile, int r, int &e, int &g) {
    if (G <= M) {
        constexpr int TOK = M / G;
        const int tk = r / G;
        g = r - tk * G;
        e = tile * TOK + tk;
        return tk < TOK;
    }
    constexpr int TPT = (G + M - 1) / M;
    e = tile / TPT;
    g = (tile - e * TPT) * M + r;
    return g < G;
}

// What a row's softmax step and stores need, in one 16-byte entry: the step
// reads it with one shared-memory load per column instead of three. In a
// gated backward (p.gate: dout is the gradient of gate * o) the row's gate g
// is in P (P' = g P), as log2 |g| taken from lse2 and g's sign in the top bit
// of pair (row_pair, row_signed).
struct __align__(16) RowInfo {
    int token;    // packed token, -1 for padding rows
    int pair;     // (h, token, slot) pair index; bit 31: the gate's sign
    float lse2;   // log2-sum-exp of the row, minus log2 |gate| (+inf for padding or a zero gate: P = 0)
    float delta;
};
constexpr int ROW_GATE_SIGN = (int)0x80000000u;
__device__ __forceinline__ long long row_pair(int pair) { return pair & ~ROW_GATE_SIGN; }
// exp2(x) (a probability of the row) with the sign of the row's gate.
__device__ __forceinline__ float row_signed(float prob, int pair) {
    return __int_as_float(__float_as_int(prob) ^ (pair & ROW_GATE_SIGN));
}
// What bwd_row_stats loads for a row: lse in base 2, delta, the gate (1
// without p.gate).
struct RowStats {
    float lse2, delta, gate;
};
// A row's entry completed with its stats.
__device__ __forceinline__ void set_row_stats(RowInfo &r, const RowStats &s) {
    r.lse2 = s.gate == 1.f ? s.lse2 : s.lse2 - log2f(fabsf(s.gate));
    r.delta = s.delta;
    r.pair |= __float_as_int(s.gate) & ROW_GATE_SIGN;
}

// The row of list entry v (v < 0: padding) and head-in-group g of KV head h,
// without its lse and delta (bwd_row_stats).
template <int G>
__device__ __forceinline__ RowInfo bwd_row_head(const fsa_sel_params &p, int v, int h, int g) {
    if (v < 0) return RowInfo{-1, 0, FSA_INF, 0.f};
    const long long tl = fsa_entry_token(v);
    return RowInfo{(int)(p.t0 + tl), (int)pair_index(p, h, tl, fsa_entry_slot(v)), FSA_INF, 0.f};
}
// Its lse (base 2; +inf for padding: P = 0), delta and gate. Issues the
// loads; they are waited for where the values are used (set_row_stats).
template <int G>
__device__ __forceinline__ RowStats bwd_row_stats(const fsa_sel_params &p, int v, int h, int g) {
    if (v < 0) return RowStats{FSA_INF, 0.f, 1.f};
    const long long tl = fsa_entry_token(v), t = p.t0 + tl;
    const int qh = h * G + g;
    return RowStats{bwd_lse2(((const float *)p.lse)[(long long)qh * p.total_tokens + t]),
                    ((const float *)p.delta)[(long long)qh * bwd_delta_stride(p) + tl],
                    p.gate.ptr != 0 ? *view_row<const float>(p.gate, t, qh) : 1.f};
}
// Both (ok false: padding).
template <int G>
__device__ __forceinline__ RowInfo bwd_row_info(const fsa_sel_params &p, int v, int h, int g, bool ok) {
    RowInfo r = bwd_row_head<G>(p, ok ? v : -1, h, g);
    set_row_stats(r, bwd_row_stats<G>(p, ok ? v : -1, h, g));
    return r;
}

// The rows of a round: ROWS rows in tiles of M, from the round's n_ent list
// entries ent; THREADS threads of the CTA.
template <int M, int G, int ROWS, int THREADS>
__device__ __forceinline__ void build_bwd_rows(RowInfo *row, const fsa_sel_params &p, const int *ent, int n_ent,
                                               int h) {
    for (int i = threadIdx.x; i < ROWS; i += THREADS) {
        const int tile = i / M, r = i - tile * M;
        int e, g;
        if (!bwd_tile_row<M, G>(tile, r, e, g) || e >= n_ent) {
            row[i] = RowInfo{-1, 0, FSA_INF, 0.f};
            continue;
        }
        row[i] = bwd_row_info<G>(p, ent[e], h, g, true);
    }
}

// Work item wi: its (KV head, block) list seg, its place in the list (item
// of n_items, entries item0 .. item0 + item_n - 1 of list_sorted).
struct BwdItem {
    long long seg, gid;
    int h, item, n_items, item0, item_n;
};
__device__ __forceinline__ BwdItem bwd_item(const fsa_sel_params &p, int wi) {
    const int *work = (const int *)p.work_offsets, *offs = (const int *)p.offsets;
    BwdItem it;
    it.seg = ((const int *)p.work_seg)[wi];
    it.h = (int)(it.seg / p.nb_total);
    it.gid = it.seg - (long long)it.h * p.nb_total;
    it.item = wi - work[it.seg];
    it.n_items = work[it.seg + 1] - work[it.seg];
    const int per_item = fsa_bwd_list_item_entries(offs[it.seg + 1] - offs[it.seg], (int)p.item_entries,
                                                     (int)p.item_max_rounds);
    it.item0 = offs[it.seg] + it.item * per_item;
    it.item_n = min(offs[it.seg + 1] - it.item0, per_item);
    return it;
}

// The item's first key (of its slice of KS keys) and how many keys of the
// slice lie in the sequence (the rest stay masked), from its first entry.
template <int BK, int KS>
__device__ __forceinline__ void bwd_item_keys(const fsa_sel_params &p, const BwdItem &it, int first_entry, int slice,
                                              long long &kb0, int &nk) {
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens,
                                    p.t0 + fsa_entry_token(first_entry));
    kb0 = sb.start + (it.gid - first_block_id(sb.start, sb.seq, BK)) * BK + slice * KS;
    nk = (int)max(min((long long)KS, sb.end - kb0), 0ll);
}

// Row lo (half 0) or hi (half 1) of an accumulator, times `scale`, in the
// output dtype: what the fp32 path below stores after adding it to zero and
// converting (the same bits).
template <class DT, int N>
__device__ __forceinline__ void dkv_store_out(u16 *row, const float acc[N][4], int half, int lane, float scale) {
#pragma unroll
    for (int dn = 0; dn < N; dn++)
        *(u32 *)(row + dn * 8 + 2 * (lane & 3)) = DT::pack(acc[dn][2 * half] * scale, acc[dn][2 * half + 1] * scale);
}

// Row lo (half 0) or hi (half 1) of an accumulator, times `scale`, into fp32
// `row` (its columns 0 .. 8N - 1); `add` adds to what the row holds. With
// `out` (the last token chunk) the sum goes to `out` in the dtype instead:
// the bits of adding into the accumulator and converting it afterwards.
template <class DT, int N>
__device__ __forceinline__ void dkv_store_f32(float *row, u16 *out, const float acc[N][4], int half, int lane,
                                           float scale, bool add) {
#pragma unroll
    for (int dn = 0; dn < N; dn++) {
        float2 *at = (float2 *)(row + dn * 8 + 2 * (lane & 3));
        float2 v = make_float2(acc[dn][2 * half] * scale, acc[dn][2 * half + 1] * scale);
        if (add) {
            const float2 a = *at;
            v.x += a.x, v.y += a.y;
        }
        if (out) *(u32 *)(out + dn * 8 + 2 * (lane & 3)) = DT::pack(v.x, v.y);
        else *at = v;
    }
}

// dK and dV of this warp's 16 keys (rows key_lo and key_lo + 8 of the slice;
// accumulators of DPK and DPV columns from column d0k / d0v): straight out
// as dk and dv (a chunk of every token, p.dkv_acc == 0), into the accumulator
// ([T, Hkv] rows of dK then dV; the last token chunk: added to it and out as
// dk and dv), or a partial (BK rows of dK, then BK rows of dV) when the list
// has several items. K_ROWS / V_ROWS false: that accumulator is another
// warp's (only the other one is stored).
template <class DT, int D, int DV, int BK, int KS, int DPK, int DPV, bool K_ROWS = true, bool V_ROWS = true>
__device__ __forceinline__ void store_item_dkv(const fsa_sel_params &p, const BwdItem &it, long long kb0, int nk,
                                               int slice, int key_lo, int lane, float scale, int d0k, int d0v,
                                               const float dk[DPK / 8][4], const float dv[DPV / 8][4]) {
    constexpr int DKV = fsa_bwd_dkv_row(D, DV);
    const bool out = it.n_items == 1 && p.dkv_acc == 0;
    float *k_base = (float *)p.dkv_part, *v_base = k_base;
    long long k_stride = D, v_stride = DV;
    if (it.n_items == 1 && !out) {
        k_base = (float *)p.dkv_acc + (kb0 * p.num_kv_heads + it.h) * DKV;
        v_base = k_base + D;
        k_stride = v_stride = p.num_kv_heads * DKV;
    } else if (!out) {
        float *part = (float *)p.dkv_part + (long long)(((const int *)p.part_offsets)[it.seg] + it.item) * BK * DKV;
        k_base = part + slice * KS * D;
        v_base = part + BK * D + slice * KS * DV;
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = key_lo + half * 8;
        if (r >= nk) continue;
        if (out) {
            if constexpr (K_ROWS) dkv_store_out<DT, DPK / 8>(view_row<u16>(p.dk, kb0 + r, it.h) + d0k, dk, half, lane, scale);
            if constexpr (V_ROWS) dkv_store_out<DT, DPV / 8>(view_row<u16>(p.dv, kb0 + r, it.h) + d0v, dv, half, lane, 1.f);
            continue;
        }
        const bool last = it.n_items == 1 && bwd_last_token_chunk(p);  // the accumulator's row goes out
        if constexpr (K_ROWS)
            dkv_store_f32<DT, DPK / 8>(k_base + r * k_stride + d0k,
                                       last ? view_row<u16>(p.dk, kb0 + r, it.h) + d0k : nullptr, dk, half, lane, scale,
                                       it.n_items == 1);
        if constexpr (V_ROWS)
            dkv_store_f32<DT, DPV / 8>(v_base + r * v_stride + d0v,
                                       last ? view_row<u16>(p.dv, kb0 + r, it.h) + d0v : nullptr, dv, half, lane, 1.f,
                                       it.n_items == 1);
    }
}

}  // namespace fsa
