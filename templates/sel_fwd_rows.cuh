// What both FSA-order forward main kernels (mma.sync: sel_fwd_main.cu,
// warpgroup: sel_fwd_main_wg.cu) do per work item besides the products: the
// row table of the item and the item's key range.
//
// Per work item, one entry per tile row (tiles of ROWS rows, each packing
// ROWS / G tokens x G heads), computed once for all its tiles so that the
// loops over a tile's rows only look them up: the row's query (padding rows:
// the item's first query, whose scores the mask then hides), its partial
// row (pair index x G + head in group; also the row of lse_part; -1 for
// padding) and its token (-1 for padding).
#pragma once
#include "sel_common.cuh"
#include "fsa_softmax.cuh"

namespace fsa {

template <int ITEM_ROWS>
struct RowTable {
    const u16 *q_row[ITEM_ROWS];
    long long part[ITEM_ROWS];
    int token[ITEM_ROWS];
};

// Row i of a row table from list entry v: its query (padding: the entry's
// token at the group's first head), partial row and token.
template <int G, int ITEM_ROWS>
__device__ __forceinline__ void set_table_row(RowTable<ITEM_ROWS> &rt, int i, const fsa_sel_params &p, int v, bool pad,
                                              int g, int h) {
    const long long tl = fsa_entry_token(v), t = p.t0 + tl;
    rt.q_row[i] = view_row<const u16>(p.q, t, (long long)h * G + (pad ? 0 : g));
    rt.part[i] = pad ? -1 : pair_index(p, h, tl, fsa_entry_slot(v)) * G + g;
    rt.token[i] = pad ? -1 : (int)t;
}

// ent: this work item's n_ent list entries (global memory); THREADS threads of the CTA.
template <int G, int ROWS, int THREADS, int ITEM_ROWS>
__device__ __forceinline__ void build_row_table(RowTable<ITEM_ROWS> &rt, const fsa_sel_params &p, const int *ent,
                                                int n_ent, int h) {
    constexpr int TOK = ROWS / G;  // tokens per tile
    for (int i = threadIdx.x; i < ITEM_ROWS; i += THREADS) {
        const int tile = i / ROWS, r = i - tile * ROWS;
        const int tk = r / G, g = r - tk * G, e = tile * TOK + tk;
        const bool pad = tk >= TOK || e >= n_ent;
        set_table_row<G>(rt, i, p, __ldg(ent + (pad ? 0 : e)), pad, g, h);
    }
}

// One 64-row tile's rows (a RowTable<ROWS>) from this thread's list entry v
// (row r = tid < ROWS: entry e0 + r / G of the run's n list entries at ent;
// padding rows were given the run's first entry): what build_row_table
// writes for an item, for one tile at a time.
template <int G, int ROWS>
__device__ __forceinline__ int tile_row_entry(const int *ent, int n, int e0, int tid) {
    constexpr int TOK = ROWS / G;
    const int tk = tid / G, e = e0 + tk;
    return __ldg(ent + (tk < TOK && e < n ? e : 0));
}
template <int G, int ROWS>
__device__ __forceinline__ void build_tile_rows(RowTable<ROWS> &rt, const fsa_sel_params &p, int v, int n, int e0,
                                                int h, int tid) {
    constexpr int TOK = ROWS / G;
    if (tid >= ROWS) return;
    const int tk = tid / G, g = tid - tk * G, e = e0 + tk;
    set_table_row<G>(rt, tid, p, v, tk >= TOK || e >= n, g, h);
}

// The key block of work item w: its KV head, its first key and how many keys
// it has (fewer than BK at a sequence's end), the item's list entries.
struct WorkItem {
    int h, kb0, nk, n_ent;
    const int *ent;
};

// The key block of (KV head, block) segment seg, whose list entries start
// at ent (n of them from there on).
template <int BK>
__device__ __forceinline__ WorkItem segment_item(const fsa_sel_params &p, long long seg, const int *ent, int n) {
    WorkItem it;
    it.h = (int)(seg / p.nb_total);
    const long long gid = seg - (long long)it.h * p.nb_total;
    it.n_ent = n;
    it.ent = ent;
    // Key range of the block, from the sequence of any token in the list.
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens,
                                    p.t0 + fsa_entry_token(__ldg(it.ent)));
    it.kb0 = (int)(sb.start + (gid - first_block_id(sb.start, sb.seq, BK)) * BK);  // keys < T < 2^31
    it.nk = (int)min((long long)BK, sb.end - it.kb0);
    return it;
}

template <int BK, int CHUNK>
__device__ __forceinline__ WorkItem work_item(const fsa_sel_params &p, int w) {
    const int *work = (const int *)p.work_offsets;
    const int *offs = (const int *)p.offsets;
    const long long seg = ((const int *)p.work_seg)[w];  // the (KV head, block) segment of work item w
    const int e0 = offs[seg] + (w - work[seg]) * CHUNK;
    return segment_item<BK>(p, seg, (const int *)p.list + e0, min(offs[seg + 1] - e0, CHUNK));
}

// The tokens of this lane's two accumulator rows of a warp's 16 (item rows
// row0 + lane / 4 and row0 + lane / 4 + 8; -1: padding).
struct LaneTokens {
    int lo, hi;
};
template <int ITEM_ROWS>
__device__ __forceinline__ LaneTokens lane_tokens(const RowTable<ITEM_ROWS> &rt, int row0, int lane) {
    return LaneTokens{rt.token[row0 + (lane >> 2)], rt.token[row0 + (lane >> 2) + 8]};
}

// One softmax step over the raw scores s of keys key0 .. key0 + KT - 1 for
// this lane's rows (tokens t). Causal mask: key column
// c is visible when c <= lim (the token's offset from key0); this also hides
// keys past the end of the sequence and padding rows. A warp whose rows all
// see every key of the step skips the compare.
template <int KT>
__device__ __forceinline__ void causal_step(OnlineSoftmax &sm, float s[KT / 8][4], float scale_log2, int lane,
                                            LaneTokens t, int key0, float alpha[2]) {
    const int lim_lo = t.lo - key0, lim_hi = t.hi - key0;
    if (__all_sync(0xffffffffu, lim_lo >= KT - 1 && lim_hi >= KT - 1))
        sm.step<KT / 8>(s, scale_log2, lane, [](int, int) { return true; }, alpha);
    else
        sm.step<KT / 8>(s, scale_log2, lane, [&](int col, int half) { return col <= (half ? lim_hi : lim_lo); }, alpha);
}

// A warp's 16 finished rows of a tile (item rows row0 .. row0 + 15, staged
// in shared memory) to their partial rows: lse2 of this lane's rows lo
// (row0 + lane / 4) and hi (+ 8) into lse_part, then 16-byte pieces of whole
// rows from staged(r, c) (the address of row r's piece at column c) into
// o_part. Padding rows write nothing. BATCH: the lane's pieces in groups of
// four, their partial rows and staged data loaded before any store (four
// shared-memory loads in flight instead of one chain per piece). STREAMING
// (with BATCH; every DV of the warpgroup kernel takes that path): the pieces
// stored evict-first in L2 (st.global.cs), so that they do not push out
// query rows that later tiles read again.
template <int DV, bool BATCH = false, bool STREAMING = false, int ITEM_ROWS, class Staged>
__device__ __forceinline__ void store_partial_rows(const fsa_sel_params &p, const RowTable<ITEM_ROWS> &rt, int row0,
                                                   const float lse2[2], int lane, Staged staged) {
    if ((lane & 3) == 0) {
        float *lse_part = (float *)p.lse_part;
        const long long part_lo = rt.part[row0 + (lane >> 2)], part_hi = rt.part[row0 + (lane >> 2) + 8];
        if (part_lo >= 0) lse_part[part_lo] = lse2[0];
        if (part_hi >= 0) lse_part[part_hi] = lse2[1];
    }
    __syncwarp();
    u16 *o_part = (u16 *)p.o_part;
    if constexpr (BATCH && (16 * (DV / 8)) % 128 == 0) {
        constexpr int PIECES = DV / 8, GROUP = 4;
#pragma unroll 1
        for (int c0 = lane; c0 < 16 * PIECES; c0 += 32 * GROUP) {
            long long part[GROUP];
            uint4 v[GROUP];
#pragma unroll
            for (int k = 0; k < GROUP; k++) {
                const int c = c0 + 32 * k, rr = c / PIECES;
                part[k] = rt.part[row0 + rr];
                v[k] = *(const uint4 *)staged(rr, (c - rr * PIECES) * 8);
            }
#pragma unroll
            for (int k = 0; k < GROUP; k++) {
                const int c = c0 + 32 * k, rr = c / PIECES;
                if (part[k] < 0) continue;
                u16 *dst = o_part + part[k] * DV + (c - rr * PIECES) * 8;
                if (STREAMING) st_global_cs16(dst, v[k]);
                else *(uint4 *)dst = v[k];
            }
        }
        return;
    }
    for (int c = lane; c < 16 * (DV / 8); c += 32) {
        const int rr = c / (DV / 8), cc = c - rr * (DV / 8);
        const long long part = rt.part[row0 + rr];
        if (part < 0) continue;
        *(uint4 *)(o_part + part * DV + cc * 8) = *(const uint4 *)staged(rr, cc * 8);
    }
}

}  // namespace fsa
