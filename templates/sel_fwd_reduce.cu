// FSA forward, reduction: one warp per (token, query head) merges the
// partials of the token's valid slots. Each partial carries its own
// log2-sum-exp, so the merge is safe for any logit range.
#include "sel_common.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP;
constexpr int PIECES = D / 8;  // 16-byte pieces of a row; one per lane
static_assert(PIECES <= 32, "head dim at most 256");

extern "C" __global__ void __launch_bounds__(256) fsa_sel_fwd_reduce(const fsa_sel_params p) {
    const int lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    const long long hq = p.num_kv_heads * G;
    if (wid >= p.tc * hq) return;
    const long long tl = wid / hq;
    const int qh = (int)(wid - tl * hq);
    const int h = qh / G, g = qh - h * G;
    const long long t = p.t0 + tl;

    const u64 mask = ((const u64 *)p.mask)[(long long)h * p.tc + tl];
    const long long pair0 = ((long long)h * p.tc + tl) * p.top_k;
    const float *lse_part = (const float *)p.lse_part;
    const u16 *o_part = (const u16 *)p.o_part;

    float m = -FSA_INF;
    for (int s = lane; s < p.top_k; s += 32)
        if ((mask >> s) & 1) m = fmaxf(m, lse_part[(pair0 + s) * G + g]);
    m = warp_max(m);

    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float wsum = 0.f;
    for (u64 mm = mask; mm; mm &= mm - 1) {
        const int s = __ffsll((long long)mm) - 1;
        const long long row = (pair0 + s) * G + g;
        const float wgt = fast_exp2(lse_part[row] - m);
        wsum += wgt;
        if (lane < PIECES) {
            const uint4 v = *(const uint4 *)(o_part + row * D + lane * 8);
            const u32 w4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                acc[2 * i] += wgt * DT::to_float((u16)(w4[i] & 0xffffu));
                acc[2 * i + 1] += wgt * DT::to_float((u16)(w4[i] >> 16));
            }
        }
    }
    const float inv = mask ? 1.f / wsum : 0.f;
    if (lane < PIECES) {
        uint4 out;
        out.x = DT::pack(acc[0] * inv, acc[1] * inv);
        out.y = DT::pack(acc[2] * inv, acc[3] * inv);
        out.z = DT::pack(acc[4] * inv, acc[5] * inv);
        out.w = DT::pack(acc[6] * inv, acc[7] * inv);
        *(uint4 *)((u16 *)p.o + t * p.o_ts + (long long)qh * p.o_hs + lane * 8) = out;
    }
    if (lane == 0 && p.lse) {
        const float ln2 = 0.69314718055994531f;
        ((float *)p.lse)[(long long)qh * p.total_tokens + t] = mask ? (m + fast_log2(wsum)) * ln2 : -FSA_INF;
    }
}
