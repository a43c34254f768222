// NSA-order backward for dq: a CTA owns one query token, one KV head and up
// to 16 of the group's query heads (the tile rows), and walks the token's
// selected blocks 64 keys per stage; each of the 4 warps takes 16 keys of
// every stage:
//   S = Q K^T, P = exp(S - lse), dP = dO V^T, dS = P (dP - delta), dQ += dS K;
// in a gated backward (p.gate) each row's dQ times its gate at the store.
// The warps' dQ are summed in warp order at the end, so the result does not
// depend on scheduling. No partial buffers: dq is written once per row. Q,
// K and dq are D wide, dO and V DV wide.
// LAYOUT: FSA_SEL_LAYOUT_DQ_ONE_STAGE or 0 (fsa_sel_layout_fit): one K and one V stage
// instead of FSA_NSA_STAGES on targets whose shared memory holds no more. An enumerator: the default
// module keeps its globals.
enum : int { LAYOUT = {{SEL_LAYOUT=0}} };
#define FSA_NSA_KERNEL_STAGES fsa_nsa_dq_stages(LAYOUT)
#include "sel_nsa.cuh"
#include "fsa_mma.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}};
constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
typedef NsaStream<D, DV, G, BK> Stream;
enum : int { STAGES = FSA_NSA_KERNEL_STAGES };
static_assert(fsa_nsa_dq_smem_k(D, DV) + fsa_nsa_merge_bytes(D) <= fsa_nsa_dq_smem_bytes(D, DV, STAGES),
              "the merge area fits in the dynamic shared memory");

extern "C" __global__ void __launch_bounds__(NSA_THREADS) fsa_sel_bwd_dq_nsa(const fsa_sel_params p) {
    __shared__ float lse2[16], delta[16], gate[16];  // per row: lse in log2 units, rowsum(dout * o), gate
    __shared__ NsaShared sh;
    static_assert(sizeof(sh) + sizeof(lse2) + sizeof(delta) + sizeof(gate) == fsa_nsa_dq_smem_static(STAGES),
                  "the plan counts this static memory");
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 qs = smem_addr(smem), dos = qs + fsa_nsa_dq_smem_do(D);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    Stream in(sh, p, qs + fsa_nsa_dq_smem_k(D, DV), qs + fsa_nsa_dq_smem_v(D, DV, STAGES));
    const long long t = in.t;

    // Rows: heads hg*16 .. hg*16+15 of the group. Rows past G are zero with
    // lse = +inf, so their P is 0.
    const u16 *q = (const u16 *)p.q.ptr, *dout = (const u16 *)p.dout.ptr;
    load_tiles_async<16, D, LD, DV, LDV, NSA_THREADS>(qs, dos, [&](int r) {
        const int gi = in.group_head(r);
        const bool ok = gi < G;
        const long long qh = in.h * G + gi;
        return RowPair{ok ? view_row<const u16>(p.q, t, qh) : q, ok ? view_row<const u16>(p.dout, t, qh) : dout, ok};
    });
    if (tid < 16) {
        const int gi = in.group_head(tid);
        const long long qh = in.h * G + gi;
        lse2[tid] = gi < G ? bwd_lse2(((const float *)p.lse)[qh * p.total_tokens + t]) : FSA_INF;
        delta[tid] = gi < G ? ((const float *)p.delta)[qh * bwd_delta_stride(p) + in.tl] : 0.f;
        gate[tid] = gi < G && p.gate.ptr != 0 ? *view_row<const float>(p.gate, t, qh) : 1.f;
    }
    in.start();

    const float scale_log2 = (float)p.scale_log2;
    // ldmatrix lane addresses: A operand rows (Q, dO), B operand from key rows
    // (K for S, V for dP), and K transposed as the B operand of dS K.
    const u32 q_addr = qs + ldm_lane_a(lane, LD), do_addr = dos + ldm_lane_a(lane, LDV);
    const u32 key_lane = warp * 16 * LD * 2 + ldm_lane_b(lane, LD);
    const u32 val_lane = warp * 16 * LDV * 2 + ldm_lane_b(lane, LDV);
    const u32 key_t_lane = warp * 16 * LD * 2 + ldm_lane_a(lane, LD);
    float dq[D / 8][4];
    frag_zero<D / 8>(dq);

    for (int st = 0; st < in.n_stages; st++) {
        const int buf = in.acquire(st);
        const u32 kb = in.ks + buf * Stream::K_STAGE_BYTES, vb = in.vs + buf * Stream::V_STAGE_BYTES;
        const int *keys = in.keys(buf, warp);

        float s[2][4], dp[2][4];
        frag_zero<2>(s);
        frag_zero<2>(dp);
        // S over D and dP over DV, their steps interleaved.
#pragma unroll
        for (int kd = 0; kd < fsa_max_dim(D, DV) / 16; kd++) {
            if (kd < D / 16) mma_abt_k16<DT, 2, LD>(s, q_addr + kd * 32, kb + key_lane + kd * 32);
            if (kd < DV / 16) mma_abt_k16<DT, 2, LDV>(dp, do_addr + kd * 32, vb + val_lane + kd * 32);
        }
#pragma unroll
        for (int jn = 0; jn < 2; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = frag_row(lane, e);
                const int key = keys[frag_col(lane, jn, e)];
                const float pr = key <= t ? fast_exp2(fmaf(s[jn][e], scale_log2, -lse2[r])) : 0.f;
                s[jn][e] = pr * (dp[jn][e] - delta[r]);  // dS
            }
        }
        mma_pv<DT, 1, D / 8, LD>(dq, s, kb + key_t_lane);
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    // The warps' dQ summed in warp order.
    float *part = nsa_merge_area<D, DV, D>(smem + fsa_nsa_dq_smem_k(D, DV));  // [NSA_WARPS][16][D]
    frag_store_f32<D / 8, D>(part + warp * 16 * D, dq, lane);
    __syncthreads();
    const float scale = (float)(p.scale_log2 * FSA_LN2);
    for (int c = tid; c < 16 * (D / 2); c += NSA_THREADS) {
        const int r = c / (D / 2), d = (c - r * (D / 2)) * 2;
        const int gi = in.group_head(r);
        if (gi >= G) continue;
        float2 sum = make_float2(0.f, 0.f);
#pragma unroll
        for (int w = 0; w < NSA_WARPS; w++) {
            const float2 v = *(const float2 *)(part + (w * 16 + r) * D + d);
            sum.x += v.x, sum.y += v.y;
        }
        sum.x *= scale * gate[r], sum.y *= scale * gate[r];
        if (p.dq_add.ptr != 0) {  // the caller's dq_add row (may be dq itself: read before the write)
            const u16 *add = view_row<const u16>(p.dq_add, t, in.h * G + gi) + d;
            sum.x += DT::to_float(add[0]), sum.y += DT::to_float(add[1]);
        }
        *(u32 *)(view_row<u16>(p.dq, t, in.h * G + gi) + d) = DT::pack(sum.x, sum.y);
    }
}
