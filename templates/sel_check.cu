// Check mode: validates a call's metadata against the plan and reports what
// is wrong, instead of the attention kernels' clamped but meaningless result.
// cu_seqlens must start at 0, never fall and end at T (each sequence at most
// max_seqlen long when that is given); every top-k entry must be -1 or a
// block of the token's own sequence, and no row may name a block twice. One
// thread per cu_seqlens entry and per (token, KV head) row; every read stays
// inside the arrays the call describes.
#include "sel_common.cuh"
#include "sel_check.cuh"

using namespace fsa;

__device__ __forceinline__ void report(fsa_check_result *r, unsigned flag, unsigned long long *first,
                                       unsigned long long where) {
    atomicOr(&r->flags, flag);
    atomicMin(first, where);
}

// Entry b of cu_seqlens, against its neighbour and the token count.
__device__ __forceinline__ void check_bound(const fsa_check_params &p, fsa_check_result *r, long long b) {
    const int *cu = (const int *)p.cu_seqlens;
    const long long at = __ldg(cu + b);
    if (b == 0 && at != 0) report(r, FSA_CHECK_CU_START, &r->first_seq, 0);
    if (b == p.batch) {
        if (at != p.total_tokens) report(r, FSA_CHECK_CU_END, &r->first_seq, (unsigned long long)b);
        return;
    }
    const long long next = __ldg(cu + b + 1);
    if (next < at) report(r, FSA_CHECK_CU_ORDER, &r->first_seq, (unsigned long long)b);
    else if (p.max_seqlen > 0 && next - at > p.max_seqlen)
        report(r, FSA_CHECK_SEQ_LONG, &r->first_seq, (unsigned long long)b);
}

// The top-k row of token t and KV head h, against the blocks of t's sequence.
__device__ __forceinline__ void check_row(const fsa_check_params &p, fsa_check_result *r, long long row) {
    const long long t = row / p.num_kv_heads, h = row - t * p.num_kv_heads;
    const int *cu = (const int *)p.cu_seqlens;
    const int seq = find_sequence(cu, (int)p.batch, t);
    const long long len = (long long)__ldg(cu + seq + 1) - __ldg(cu + seq);
    const long long blocks = len > 0 ? (len + p.block_size - 1) / p.block_size : 0;
    const int *slots = (const int *)p.topk + h * p.topk_hs + t * p.topk_ts;
    unsigned flags = 0;
    for (int s = 0; s < (int)p.top_k; s++) {
        const int v = __ldg(slots + s);
        if (v == -1) continue;
        if (v < 0 || v >= blocks) flags |= FSA_CHECK_TOPK_RANGE;
        for (int s2 = 0; s2 < s; s2++)
            if (__ldg(slots + s2) == v) flags |= FSA_CHECK_TOPK_REPEAT;
    }
    if (flags) report(r, flags, &r->first_row, (unsigned long long)row);
}

extern "C" __global__ void __launch_bounds__(256) fsa_sel_check(const fsa_check_params p) {
    fsa_check_result *r = (fsa_check_result *)p.result;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long b = first; b <= p.batch; b += stride) check_bound(p, r, b);
    const long long rows = p.total_tokens * p.num_kv_heads;
    for (long long row = first; row < rows; row += stride) check_row(p, r, row);
}
