// What the NSA-order kernels share: a CTA owns one query token and one KV
// head, compacts the token's valid selected blocks, and streams their keys
// in stages of FSA_NSA_STAGE_KEYS rows of K and V (16 per warp).
#pragma once
#include "sel_common.cuh"
#include "fsa_pipeline.cuh"

namespace fsa {

constexpr int NSA_WARPS = FSA_NSA_WARPS;
constexpr int NSA_THREADS = FSA_NSA_THREADS;
constexpr int NSA_STAGE = FSA_NSA_STAGE_KEYS;
constexpr int NSA_ROWS = FSA_NSA_ROWS;

// Valid slots of the token's top-k row (slot_valid) compacted in slot order
// into block_start (first key of each block). raw and valid are
// FSA_MAX_TOP_K-entry scratch arrays in shared memory. Every thread calls
// this; returns the number of valid blocks.
__device__ __forceinline__ int nsa_select_blocks(int *block_start, int *raw, int *valid, const fsa_sel_params &p,
                                                 int h, long long t, long long seq_start, int block_size) {
    const int tid = threadIdx.x, K = (int)p.top_k;
    const int own_block = (int)((t - seq_start) / block_size);
    const int *row = view_row<const int>(p.topk, t, h);
    if (tid < K) raw[tid] = __ldg(row + tid);
    __syncthreads();
    if (tid < K) valid[tid] = slot_valid(raw, tid, own_block);
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
// into buffers of pitch D + 8 (zero past the end), and each row's key index
// in keyb (INT_MAX for padding, which the causal test then masks).
template <int D, int BK>
__device__ __forceinline__ void nsa_load_stage(const fsa_sel_params &p, u32 ks, u32 vs, int *keyb,
                                               const int *block_start, int stage, int total_keys, int h,
                                               long long seq_end) {
    const u16 *kg = view_row<const u16>(p.k, 0, h);
    const u16 *vg = view_row<const u16>(p.v, 0, h);
    for_each_piece<NSA_STAGE, D, NSA_THREADS>([&](int r, int c) {
        const int pos = stage * NSA_STAGE + r;
        long long key = pos < total_keys ? (long long)block_start[pos / BK] + pos % BK : seq_end;
        const bool ok = key < seq_end;
        if (c == 0) keyb[r] = ok ? (int)key : 0x7fffffff;
        if (!ok) key = 0;
        const u32 off = (u32)(r * (D + 8) + c) * 2;
        cp_async16(ks + off, kg + key * p.k.token_stride + c, ok);
        cp_async16(vs + off, vg + key * p.v.token_stride + c, ok);
    });
}

}  // namespace fsa
