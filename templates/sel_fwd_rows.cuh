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

namespace fsa {

template <int ITEM_ROWS>
struct RowTable {
    const u16 *q_row[ITEM_ROWS];
    long long part[ITEM_ROWS];
    int token[ITEM_ROWS];
};

// ent: this work item's n_ent list entries (global memory); THREADS threads of the CTA.
template <int G, int ROWS, int THREADS, int ITEM_ROWS>
__device__ __forceinline__ void build_row_table(RowTable<ITEM_ROWS> &rt, const fsa_sel_params &p, const int *ent,
                                                int n_ent, int h) {
    constexpr int TOK = ROWS / G;  // tokens per tile
    for (int i = threadIdx.x; i < ITEM_ROWS; i += THREADS) {
        const int tile = i / ROWS, r = i - tile * ROWS;
        const int tk = r / G, g = r - tk * G, e = tile * TOK + tk;
        const bool pad = tk >= TOK || e >= n_ent;
        const int v = __ldg(ent + (pad ? 0 : e));
        const long long tl = fsa_entry_token(v), t = p.t0 + tl;
        rt.q_row[i] = view_row<const u16>(p.q, t, (long long)h * G + (pad ? 0 : g));
        rt.part[i] = pad ? -1 : pair_index(p, h, tl, fsa_entry_slot(v)) * G + g;
        rt.token[i] = pad ? -1 : (int)t;
    }
}

// The key block of work item w: its KV head, its first key and how many keys
// it has (fewer than BK at a sequence's end), the item's list entries.
struct WorkItem {
    int h, kb0, nk, n_ent;
    const int *ent;
};

template <int BK, int CHUNK>
__device__ __forceinline__ WorkItem work_item(const fsa_sel_params &p, int w) {
    const int *work = (const int *)p.work_offsets;
    const int *offs = (const int *)p.offsets;
    const long long seg = ((const int *)p.work_seg)[w];  // the (KV head, block) segment of work item w
    WorkItem it;
    it.h = (int)(seg / p.nb_total);
    const long long gid = seg - (long long)it.h * p.nb_total;
    const int e0 = offs[seg] + (w - work[seg]) * CHUNK;
    it.n_ent = min(offs[seg + 1] - e0, CHUNK);
    it.ent = (const int *)p.list + e0;
    // Key range of the block, from the sequence of any token in the list.
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens,
                                    p.t0 + fsa_entry_token(__ldg(it.ent)));
    it.kb0 = (int)(sb.start + (gid - first_block_id(sb.start, sb.seq, BK)) * BK);  // keys < T < 2^31
    it.nk = (int)min((long long)BK, sb.end - it.kb0);
    return it;
}

}  // namespace fsa
