// Check mode for compressed and sliding-window attention: validates the
// sequence offsets of a call and reports what is wrong, instead of the
// kernels' clamped but meaningless result (tokens of no tile, whose outputs
// stay unwritten; tokens of two tiles; a sequence's queries against another
// sequence's compressed tokens). cu_seqlens must start at 0, never fall and
// end at T; with compressed tokens, cu_seqlens_c must start at 0, never fall
// and end at Tc, and give each sequence exactly the compressed tokens its
// length makes (fsa_cmp_tokens). One thread per offsets entry.
#include "cmp_params.cuh"
#include "check_device.cuh"

using namespace fsa;

// Entry b of cu_seqlens_c, and for b < batch sequence b's compressed-token
// count against its length (when both offsets rise there; a fall is
// reported as such).
__device__ __forceinline__ void check_compressed(const fsa_offsets_check_params &p, fsa_check_result *r, long long b) {
    const int *cu = (const int *)p.cu_seqlens, *cu_c = (const int *)p.cu_seqlens_c;
    const OffsetsFlags f = {FSA_CHECK_CUC_START, FSA_CHECK_CUC_ORDER, FSA_CHECK_CUC_END, 0};
    check_offsets_entry(r, cu_c, b, p.batch, p.total_compressed, 0, f);
    if (b == p.batch) return;
    const long long len = (long long)__ldg(cu + b + 1) - __ldg(cu + b);
    const long long count = (long long)__ldg(cu_c + b + 1) - __ldg(cu_c + b);
    if (len >= 0 && count >= 0 && count != fsa_cmp_tokens(len, p.kernel_size, p.stride))
        check_report(r, FSA_CHECK_CMP_COUNT, &r->first_seq, (unsigned long long)b);
}

extern "C" __global__ void __launch_bounds__(256) fsa_offsets_check(const fsa_offsets_check_params p) {
    fsa_check_result *r = (fsa_check_result *)p.result;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b <= p.batch; b += stride) {
        check_cu_entry(r, (const int *)p.cu_seqlens, b, p.batch, p.total_tokens, 0);
        if (p.cu_seqlens_c != 0) check_compressed(p, r, b);
    }
}
