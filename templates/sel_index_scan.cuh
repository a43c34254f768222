// The index inversion's offsets: head chunks of an index and the count's
// last-CTA scan of the per-(KV head, block) counts (sel_index.cu).
#pragma once
#include "sel_common.cuh"

namespace fsa {

// The head chunks of an index: segments per chunk (every segment: one chunk)
// and the entries of work_seg each chunk owns.
struct IndexChunks {
    long long segs, seg_stride;
};
__device__ __forceinline__ IndexChunks index_chunks(const fsa_sel_params &p) {
    const long long n = p.num_kv_heads * p.nb_total;
    if (p.index_heads <= 0 || p.index_heads >= p.num_kv_heads) return IndexChunks{n, 0};
    return IndexChunks{p.index_heads * p.nb_total, p.work_seg_stride};
}

// The last CTA's scan works on tiles of SCAN_PER consecutive segments per
// thread: one block scan per SCAN_TILE segments, not per CTA width (the scans'
// synchronized steps, about 0.65 us each, were most of the count's tail). Tiles
// go through shared memory so that global loads and stores stay coalesced;
// one padding word per 32 keeps the per-thread runs free of bank conflicts.
constexpr int SCAN_PER = 8, SCAN_TILE = FSA_INDEX_THREADS * SCAN_PER, SCAN_WORDS = SCAN_TILE + SCAN_TILE / 32;
__device__ __forceinline__ int scan_pad(int j) { return j + (j >> 5); }

// Offsets of one head chunk's segments [c0, c0 + segs): list offsets continue
// `carry` (low 32 bits: pairs so far), work items (high 32 bits) and partial
// slots restart at 0. Zeroes the counts so the scatter can use them as cursors.
__device__ void scan_chunk(const fsa_sel_params &p, long long c0, long long segs, u64 &carry, u32 *t_cnt,
                           u32 *t_work, u32 *t_part, u64 *scratch) {
    int *counts = (int *)p.counts;
    int *offsets = (int *)p.offsets;
    int *cwork = (int *)p.work_offsets + c0 / segs * (segs + 1);
    int *cparts = p.part_offsets ? (int *)p.part_offsets + c0 / segs * (segs + 1) : nullptr;  // backward only
    const int chunk = (int)p.item_entries;
    const int tid = threadIdx.x;
    carry &= 0xffffffffull;
    u64 part_carry = 0;
    for (long long base = 0; base < segs; base += SCAN_TILE) {
        __syncthreads();  // the tile's arrays are free
        const int left = (int)min((long long)SCAN_TILE, segs - base);
        int *t_offsets = offsets + c0 + base, *t_counts = counts + c0 + base, *t_cwork = cwork + base;
        int *t_cparts = cparts ? cparts + base : nullptr;
#pragma unroll
        for (int k = 0; k < SCAN_PER; k++) {
            const int j = k * FSA_INDEX_THREADS + tid;
            t_cnt[scan_pad(j)] = j < left ? (u32)__ldcg(t_counts + j) : 0u;
        }
        __syncthreads();
        u64 v = 0, pv = 0;
#pragma unroll 1  // shared-memory reads: nothing to overlap, fewer live registers
        for (int k = 0; k < SCAN_PER; k++) {
            const int c = (int)t_cnt[scan_pad(tid * SCAN_PER + k)];
            // The backward (parts) sizes each list's items by its length (fsa_bwd_list_item_entries).
            const int per_item = cparts ? fsa_bwd_list_item_entries(c, chunk, (int)p.item_max_rounds) : chunk;
            const int items = (c + per_item - 1) / per_item;
            t_work[scan_pad(tid * SCAN_PER + k)] = (u32)items;  // read back below: fewer live registers
            v += (u64)(unsigned)c | ((u64)(unsigned)items << 32);
            pv += items > 1 ? items : 0;  // segments split over several work items keep dK/dV partials
        }
        u64 total, part_total = 0;
        u64 at = block_exclusive_scan(v, scratch, &total) + carry;
        u64 part_at = cparts ? block_exclusive_scan(pv, scratch, &part_total) + part_carry : 0;
#pragma unroll 1
        for (int k = 0; k < SCAN_PER; k++) {
            const int j = scan_pad(tid * SCAN_PER + k);
            const int c = (int)t_cnt[j], items = (int)t_work[j];
            t_cnt[j] = (u32)at;
            t_work[j] = (u32)(at >> 32);
            t_part[j] = (u32)part_at;
            at += (u64)(unsigned)c | ((u64)(unsigned)items << 32);
            part_at += items > 1 ? items : 0;
        }
        carry += total;
        part_carry += part_total;
        __syncthreads();
#pragma unroll 1  // stores need no latency hidden: keep the registers low for the count's rows
        for (int j = tid; j < left; j += FSA_INDEX_THREADS) {
            t_offsets[j] = (int)t_cnt[scan_pad(j)];
            t_cwork[j] = (int)t_work[scan_pad(j)];
            t_counts[j] = 0;
            if (t_cparts) t_cparts[j] = (int)t_part[scan_pad(j)];
        }
    }
    if (tid == 0) {
        cwork[segs] = (int)(carry >> 32);
        if (cparts) cparts[segs] = (int)part_carry;
    }
}

}  // namespace fsa
