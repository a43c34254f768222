// Selection rules shared by the selected-attention kernels: which sequence a
// token is in, global block ids, which top-k slots are valid, where a pair's
// partial results go, and a block-wide scan.
#pragma once
#include "fsa_device.cuh"
#include "sel_params.cuh"

namespace fsa {

// The sequence holding packed token t: the largest b with cu[b] <= t (empty
// sequences share their start with the next one and are skipped).
__device__ __forceinline__ int find_sequence(const int *cu_seqlens, int batch, long long t) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = lo + ((hi - lo + 1) >> 1);  // lo + hi + 1 passes int32 past 2^30 sequences
        if (__ldg(cu_seqlens + mid) <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Bounds of the sequence holding token t, clamped so that even a malformed
// cu_seqlens keeps every access inside [0, T): start <= t < end <= T.
struct SeqBounds {
    long long start, end;
    int seq;
};

__device__ __forceinline__ SeqBounds seq_bounds(const int *cu_seqlens, int batch, long long total, long long t) {
    SeqBounds s;
    s.seq = find_sequence(cu_seqlens, batch, t);
    s.start = min(max((long long)__ldg(cu_seqlens + s.seq), 0ll), t);
    s.end = max(min((long long)__ldg(cu_seqlens + s.seq + 1), total), t + 1);
    return s;
}

// A forward row's lse as the backward subtracts it (base 2): a row the forward
// saw no key for (lse -inf; only malformed cu_seqlens give such a row pairs)
// gets +inf, so that P = exp2(s - lse2) is 0 as for padding, not exp2(+inf).
__device__ __forceinline__ float bwd_lse2(float lse) { return lse == -FSA_INF ? FSA_INF : lse * LOG2E; }

// Block j of sequence b has the global id first_block_id(start_b, b) + j: ids
// of different sequences never overlap and stay below T / BK + batch + 1.
__device__ __forceinline__ long long first_block_id(long long seq_start, int seq, int block_size) {
    return seq_start / block_size + seq;
}

// The slot rule, the one definition every kernel uses: slot s of a top-k row
// takes part when its block id is in [0, own_block] (no future block) and no
// earlier slot holds the same id. row[i] is slot i's block id (registers,
// shared or global memory).
template <class Row>
__device__ __forceinline__ bool slot_valid(const Row &row, int s, int own_block) {
    const int v = row[s];
    bool ok = v >= 0 && v <= own_block;
    for (int s2 = 0; s2 < s && ok; s2++) ok = row[s2] != v;
    return ok;
}

// Index of the (KV head h, token t0 + tl, slot) pair in the per-pair partial
// buffers: [Hkv, tc, K].
__device__ __forceinline__ long long pair_index(const fsa_sel_params &p, int h, long long tl, int slot) {
    return ((long long)h * p.tc + tl) * p.top_k + slot;
}

// Backward: floats between delta's query-head rows.
__device__ __forceinline__ long long bwd_delta_stride(const fsa_sel_params &p) {
    return p.delta_stride ? p.delta_stride : p.tc;
}

// Backward: the launch of a token chunk that ends the call's tokens. With the
// fp32 dK/dV accumulator, its main kernel and sums add their last terms to the
// accumulator's rows and write them out as dk and dv (the bits of adding, then
// converting: no pass of its own over the accumulator).
__device__ __forceinline__ bool bwd_last_token_chunk(const fsa_sel_params &p) {
    return p.dkv_acc != 0 && p.t0 + p.tc >= p.total_tokens;
}

// Exclusive scan over the block of one 64-bit value per thread; blockDim.x is
// a multiple of 32 and at most 1024. `scratch` holds 32 values. Returns the
// thread's exclusive prefix; *total gets the block total.
__device__ __forceinline__ u64 block_exclusive_scan(u64 v, u64 *scratch, u64 *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    u64 incl = v;
    for (int d = 1; d < 32; d <<= 1) {
        u64 n = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += n;
    }
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        u64 w = lane < nwarps ? scratch[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            u64 n = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += n;
        }
        scratch[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    u64 warp_prefix = warp > 0 ? scratch[warp - 1] : 0;
    *total = scratch[nwarps - 1];
    __syncthreads();  // scratch may be reused right after
    return warp_prefix + incl - v;
}

}  // namespace fsa
