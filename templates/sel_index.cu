// Index inversion for the FSA path: from per-token top-k rows to per-(KV
// head, block) lists of (token, slot) pairs. No host sync and no dense
// blocks-by-tokens matrix: count with atomics, scan in the last block to
// finish, then scatter.
#include "sel_common.cuh"

#define BLOCK_SIZE {{BLOCK_SIZE}}

using namespace fsa;

// One thread per (KV head, token of the chunk) row.
struct RowInfo {
    long long gid_base;  // global id of block 0 of the token's sequence
    const int *row;
    int own_block;
};

__device__ __forceinline__ RowInfo row_info(const fsa_sel_params &p, int h, long long t) {
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
    RowInfo r;
    r.gid_base = first_block_id(sb.start, sb.seq, BLOCK_SIZE);
    r.own_block = (int)((t - sb.start) / BLOCK_SIZE);
    r.row = (const int *)p.topk + h * p.topk_hs + t * p.topk_ts;
    return r;
}

// Counts pairs per (KV head, block) and records each row's valid slots; the
// last block to finish scans the counts into list offsets and work-item
// offsets, and zeroes the counts so the scatter can use them as cursors.
extern "C" __global__ void __launch_bounds__(256) fsa_sel_count(const fsa_sel_params p) {
    __shared__ u64 scratch[32];
    __shared__ int is_last;
    const long long rows = p.num_kv_heads * p.tc;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int *counts = (int *)p.counts;
    if (r < rows) {
        const int h = (int)(r / p.tc);
        const long long tl = r - (long long)h * p.tc;
        RowInfo info = row_info(p, h, p.t0 + tl);
        u64 mask = row_valid_mask(info.row, (int)p.top_k, info.own_block);
        ((u64 *)p.mask)[r] = mask;
        int *seg = counts + (long long)h * p.nb_total + info.gid_base;
        for (u64 m = mask; m; m &= m - 1) atomicAdd(seg + __ldg(info.row + __ffsll((long long)m) - 1), 1);
    }
    __threadfence();
    __syncthreads();
    const long long n = p.num_kv_heads * p.nb_total;
    if (threadIdx.x == 0) is_last = atomicAdd(counts + n, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();

    int *offsets = (int *)p.offsets;
    int *work = (int *)p.work_offsets;
    const int chunk = (int)p.chunk_tokens;
    u64 carry = 0;  // low 32 bits: pairs so far; high 32 bits: work items so far
    for (long long base = 0; base < n; base += blockDim.x) {
        long long i = base + threadIdx.x;
        int c = i < n ? __ldcg(counts + i) : 0;
        u64 v = (u64)(unsigned)c | ((u64)(unsigned)((c + chunk - 1) / chunk) << 32);
        u64 total;
        u64 prefix = block_exclusive_scan(v, scratch, &total) + carry;
        if (i < n) {
            offsets[i] = (int)(unsigned)prefix;
            work[i] = (int)(prefix >> 32);
            counts[i] = 0;
        }
        carry += total;
    }
    if (threadIdx.x == 0) {
        offsets[n] = (int)(unsigned)carry;
        work[n] = (int)(carry >> 32);
    }
}

// Writes each valid pair into its (KV head, block) list. Order inside a list
// is not fixed; nothing downstream depends on it.
extern "C" __global__ void __launch_bounds__(256) fsa_sel_scatter(const fsa_sel_params p) {
    const long long rows = p.num_kv_heads * p.tc;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int h = (int)(r / p.tc);
    const long long tl = r - (long long)h * p.tc;
    u64 mask = ((const u64 *)p.mask)[r];
    if (mask == 0) return;
    RowInfo info = row_info(p, h, p.t0 + tl);
    const long long seg0 = (long long)h * p.nb_total + info.gid_base;
    int *cursors = (int *)p.counts;
    const int *offsets = (const int *)p.offsets;
    int *list = (int *)p.list;
    for (u64 m = mask; m; m &= m - 1) {
        int s = __ffsll((long long)m) - 1;
        long long seg = seg0 + __ldg(info.row + s);
        int pos = offsets[seg] + atomicAdd(cursors + seg, 1);
        list[pos] = (int)(tl << 6) | s;
    }
}
