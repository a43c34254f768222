// Check mode for selected attention over a paged KV cache: validates a call's
// metadata against the plan and the call's sizes, and reports what is wrong
// instead of the attention kernel's clamped but meaningless result.
// cu_seqlens_q must start at 0, never fall and end at Tq; each seqused_k must
// hold the sequence's new tokens and fit the max_pages_per_seq pages of its
// block-table row; every page-table entry of a used page must be a page
// number below num_pages; every top-k slot in use (below topk_length when
// given) is -1 or a block of the sequence's cache. A block named twice in a
// row is allowed here: the paged-cache contract counts it once, and
// selections padded with repeats are common in serving. One thread per cu_seqlens_q entry, per block-table slot and
// per (token, KV head) row.
#include "sel_common.cuh"
#include "check_device.cuh"

using namespace fsa;

__device__ __forceinline__ long long used_keys(const fsa_kvc_check_params &p, long long b) {
    return __ldg((const int *)p.seqused_k + b);
}

// Sequence b: its cu_seqlens_q entry, and its cached length against its new
// tokens and its block-table row.
__device__ __forceinline__ void check_sequence(const fsa_kvc_check_params &p, fsa_check_result *r, long long b) {
    const int *cu = (const int *)p.cu_seqlens_q;
    check_cu_entry(r, cu, b, p.batch, p.total_tokens, 0);
    if (b == p.batch) return;
    const long long q_len = (long long)__ldg(cu + b + 1) - __ldg(cu + b), used = used_keys(p, b);
    if (used < 0 || used < q_len) check_report(r, FSA_CHECK_USED_SHORT, &r->first_seq, (unsigned long long)b);
    if (used > p.max_pages * p.page_size) check_report(r, FSA_CHECK_USED_LONG, &r->first_seq, (unsigned long long)b);
}

// Slot `slot` of sequence b's block-table row, when it backs cached keys.
__device__ __forceinline__ void check_page(const fsa_kvc_check_params &p, fsa_check_result *r, long long b,
                                           long long slot) {
    const long long used = min(max(used_keys(p, b), 0ll), p.max_pages * p.page_size);
    if (slot >= (used + p.page_size - 1) / p.page_size) return;
    const long long page = __ldg((const int *)p.block_table + b * p.bt_stride + slot);
    if (page < 0 || page >= p.num_pages) check_report(r, FSA_CHECK_PAGE_RANGE, &r->first_seq, (unsigned long long)b);
}

// The top-k row of token t and KV head h, against the blocks of its
// sequence's cache.
__device__ __forceinline__ void check_row(const fsa_kvc_check_params &p, fsa_check_result *r, long long row) {
    const long long t = row / p.num_kv_heads, h = row - t * p.num_kv_heads;
    const int seq = find_sequence((const int *)p.cu_seqlens_q, (int)p.batch, t);
    const long long used = max(used_keys(p, seq), 0ll);
    const long long blocks = (used + p.block_size - 1) / p.block_size;
    const long long slots_used =
        p.topk_length ? min(max((long long)__ldg((const int *)p.topk_length + t), 0ll), p.top_k) : p.top_k;
    const unsigned flags =
        check_topk_slots((const int *)p.topk + h * p.topk_hs + t * p.topk_ts, (int)slots_used, blocks, false);
    if (flags) check_report(r, flags, &r->first_row, (unsigned long long)row);
}

extern "C" __global__ void __launch_bounds__(256) fsa_kvc_check(const fsa_kvc_check_params p) {
    fsa_check_result *r = (fsa_check_result *)p.result;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long b = first; b <= p.batch; b += stride) check_sequence(p, r, b);
    const long long slots = p.batch * p.max_pages;
    for (long long i = first; i < slots; i += stride) check_page(p, r, i / p.max_pages, i % p.max_pages);
    const long long rows = p.total_tokens * p.num_kv_heads;
    for (long long row = first; row < rows; row += stride) check_row(p, r, row);
}
