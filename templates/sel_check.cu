// Check mode for selected attention: validates a call's metadata against the
// plan and reports what is wrong, instead of the attention kernels' clamped
// but meaningless result. cu_seqlens must start at 0, never fall and end at
// T (each sequence at most max_seqlen long when that is given); every top-k
// entry must be -1 or a block of the token's own sequence, and no row may
// name a block twice. One thread per cu_seqlens entry and per (token, KV
// head) row.
#include "sel_common.cuh"
#include "check_device.cuh"

using namespace fsa;

// The top-k row of token t and KV head h, against the blocks of t's sequence.
__device__ __forceinline__ void check_row(const fsa_check_params &p, fsa_check_result *r, long long row) {
    const long long t = row / p.num_kv_heads, h = row - t * p.num_kv_heads;
    const int *cu = (const int *)p.cu_seqlens;
    const int seq = find_sequence(cu, (int)p.batch, t);
    const long long len = (long long)__ldg(cu + seq + 1) - __ldg(cu + seq);
    const long long blocks = len > 0 ? (len + p.block_size - 1) / p.block_size : 0;
    const int *slots = (const int *)p.topk + h * p.topk_hs + t * p.topk_ts;
    const unsigned flags = check_topk_slots(slots, (int)p.top_k, blocks, true);
    if (flags) check_report(r, flags, &r->first_row, (unsigned long long)row);
}

extern "C" __global__ void __launch_bounds__(256) fsa_sel_check(const fsa_check_params p) {
    fsa_check_result *r = (fsa_check_result *)p.result;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long b = first; b <= p.batch; b += stride)
        check_cu_entry(r, (const int *)p.cu_seqlens, b, p.batch, p.total_tokens, p.max_seqlen);
    const long long rows = p.total_tokens * p.num_kv_heads;
    for (long long row = first; row < rows; row += stride) check_row(p, r, row);
}
