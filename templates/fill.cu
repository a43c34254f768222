// Fills `count` 32-bit words with `value`: the library's smallest kernel,
// used for workspaces and to exercise the JIT path end to end.
#include "fsa_device.cuh"

extern "C" __global__ void fsa_fill_u32(fsa::u32 *dst, fsa::u32 value, unsigned long long count) {
    unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    // Vector stores from the first 16-byte boundary; scalar head and tail.
    unsigned long long head = ((16u - ((unsigned long long)dst & 15u)) & 15u) / 4u;
    if (head > count) head = count;
    if (tid < head) dst[tid] = value;
    unsigned long long body = (count - head) / 4;
    uint4 v4 = make_uint4(value, value, value, value);
    uint4 *vdst = (uint4 *)(dst + head);
#pragma unroll {{UNROLL}}
    for (unsigned long long i = tid; i < body; i += stride) vdst[i] = v4;
    for (unsigned long long i = head + body * 4 + tid; i < count; i += stride) dst[i] = value;
}
