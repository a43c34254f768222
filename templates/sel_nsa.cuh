// What the NSA-order kernels share: a CTA owns one query token and one KV
// head, compacts the token's valid selected blocks, and streams their keys
// in fixed-size stages of K and V rows.
#pragma once
#include "sel_common.cuh"

namespace fsa {

constexpr int NSA_MAX_TOPK = 64;
constexpr int NSA_WARPS = 4;               // a warp takes 16 keys of every stage
constexpr int NSA_STAGE = 16 * NSA_WARPS;  // keys per pipeline stage
constexpr int NSA_ROWS = 16;               // query heads per CTA (the tile rows)

// Valid slots of the token's top-k row (in range, not in the future, first
// occurrence) compacted in slot order into block_start (first key of each
// block). raw and valid are NSA_MAX_TOPK-entry scratch arrays in shared
// memory. Every thread calls this; returns the number of valid blocks.
__device__ __forceinline__ int nsa_select_blocks(int *block_start, int *raw, int *valid, const fsa_sel_params &p,
                                                 int h, long long t, long long seq_start, int block_size) {
    const int tid = threadIdx.x, K = (int)p.top_k;
    const int own_block = (int)((t - seq_start) / block_size);
    const int *row = (const int *)p.topk + h * p.topk_hs + t * p.topk_ts;
    if (tid < K) raw[tid] = __ldg(row + tid);
    __syncthreads();
    if (tid < K) {
        const int v = raw[tid];
        bool ok = v >= 0 && v <= own_block;
        for (int s = 0; s < tid && ok; s++) ok = raw[s] != v;
        valid[tid] = ok;
    }
    __syncthreads();
    if (tid < K && valid[tid]) {
        int pos = 0;
        for (int s = 0; s < tid; s++) pos += valid[s];
        block_start[pos] = (int)(seq_start + (long long)raw[tid] * block_size);
    }
    int n_valid = 0;
    for (int s = 0; s < K; s++) n_valid += valid[s];
    __syncthreads();
    return n_valid;
}

// Stage `stage` of the concatenated selected keys: NSA_STAGE rows of K and V
// with pitch D + 8 (cp.async, zero-filled past the end) and each row's key
// index in keyb (INT_MAX for padding, which the causal test then masks).
template <int D, int BK>
__device__ __forceinline__ void nsa_load_stage(const fsa_sel_params &p, u16 *Kb, u16 *Vb, int *keyb,
                                               const int *block_start, int stage, int total_keys, int h,
                                               long long seq_end) {
    constexpr int LD = D + 8;
    const u16 *kg = (const u16 *)p.k + (long long)h * p.k_hs;
    const u16 *vg = (const u16 *)p.v + (long long)h * p.v_hs;
    for (int c = threadIdx.x; c < NSA_STAGE * (D / 8); c += NSA_WARPS * 32) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        const int pos = stage * NSA_STAGE + r;
        long long key = pos < total_keys ? (long long)block_start[pos / BK] + pos % BK : seq_end;
        const bool ok = key < seq_end;
        if (cc == 0) keyb[r] = ok ? (int)key : 0x7fffffff;
        if (!ok) key = 0;
        cp_async16(smem_addr(Kb + r * LD + cc * 8), kg + key * p.k_ts + cc * 8, ok);
        cp_async16(smem_addr(Vb + r * LD + cc * 8), vg + key * p.v_ts + cc * 8, ok);
    }
}

}  // namespace fsa
