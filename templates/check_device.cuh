// Check mode's device blocks, shared by the check kernels: how a finding is
// recorded, the cu_seqlens rule and the top-k row rule. Every read stays
// inside the arrays the call describes.
#ifndef FSA_CHECK_DEVICE_CUH
#define FSA_CHECK_DEVICE_CUH

#include "fsa_check.cuh"

namespace fsa {

__device__ __forceinline__ void check_report(fsa_check_result *r, unsigned flag, unsigned long long *first,
                                             unsigned long long where) {
    atomicOr(&r->flags, flag);
    atomicMin(first, where);
}

// Entry b (0..batch) of cu_seqlens: starts at 0, never falls, ends at total;
// no sequence longer than max_seqlen when that is positive.
__device__ __forceinline__ void check_cu_entry(fsa_check_result *r, const int *cu, long long b, long long batch,
                                               long long total, long long max_seqlen) {
    const long long at = __ldg(cu + b);
    if (b == 0 && at != 0) check_report(r, FSA_CHECK_CU_START, &r->first_seq, 0);
    if (b == batch) {
        if (at != total) check_report(r, FSA_CHECK_CU_END, &r->first_seq, (unsigned long long)b);
        return;
    }
    const long long next = __ldg(cu + b + 1);
    if (next < at) check_report(r, FSA_CHECK_CU_ORDER, &r->first_seq, (unsigned long long)b);
    else if (max_seqlen > 0 && next - at > max_seqlen)
        check_report(r, FSA_CHECK_SEQ_LONG, &r->first_seq, (unsigned long long)b);
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
