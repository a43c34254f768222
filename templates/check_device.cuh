// Check mode's device blocks, shared by the check kernels: how a finding is
// recorded, the rule of sequence offsets (cu_seqlens, cu_seqlens_c) and the
// top-k row rule. Every read stays inside the arrays the call describes.
#ifndef FSA_CHECK_DEVICE_CUH
#define FSA_CHECK_DEVICE_CUH

#include "fsa_check.cuh"

namespace fsa {

__device__ __forceinline__ void check_report(fsa_check_result *r, unsigned flag, unsigned long long *first,
                                             unsigned long long where) {
    atomicOr(&r->flags, flag);
    atomicMin(first, where);
}

// The flags an array of sequence offsets reports its problems with.
struct OffsetsFlags {
    unsigned start, order, end, too_long;
};

// Entry b (0..batch) of sequence offsets: starts at 0, never falls, ends at
// total; no sequence longer than max_len when that is positive.
__device__ __forceinline__ void check_offsets_entry(fsa_check_result *r, const int *cu, long long b, long long batch,
                                                    long long total, long long max_len, const OffsetsFlags &f) {
    const long long at = __ldg(cu + b);
    if (b == 0 && at != 0) check_report(r, f.start, &r->first_seq, 0);
    if (b == batch) {
        if (at != total) check_report(r, f.end, &r->first_seq, (unsigned long long)b);
        return;
    }
    const long long next = __ldg(cu + b + 1);
    if (next < at) check_report(r, f.order, &r->first_seq, (unsigned long long)b);
    else if (max_len > 0 && next - at > max_len) check_report(r, f.too_long, &r->first_seq, (unsigned long long)b);
}

// Entry b of cu_seqlens (the query tokens' offsets), no sequence longer than
// max_seqlen when that is positive.
__device__ __forceinline__ void check_cu_entry(fsa_check_result *r, const int *cu, long long b, long long batch,
                                               long long total, long long max_seqlen) {
    const OffsetsFlags f = {FSA_CHECK_CU_START, FSA_CHECK_CU_ORDER, FSA_CHECK_CU_END, FSA_CHECK_SEQ_LONG};
    check_offsets_entry(r, cu, b, batch, total, max_seqlen, f);
}

// The first `used` slots of a top-k row against `blocks` blocks: each -1 or a
// block number below `blocks`; with `no_repeats`, none twice. Returns the
// flags found.
__device__ __forceinline__ unsigned check_topk_slots(const int *slots, int used, long long blocks, bool no_repeats) {
    unsigned flags = 0;
    for (int s = 0; s < used; s++) {
        const int v = __ldg(slots + s);
        if (v == -1) continue;
        if (v < 0 || v >= blocks) flags |= FSA_CHECK_TOPK_RANGE;
        if (!no_repeats) continue;
        for (int s2 = 0; s2 < s; s2++)
            if (__ldg(slots + s2) == v) flags |= FSA_CHECK_TOPK_REPEAT;
    }
    return flags;
}

} // namespace fsa

#endif
