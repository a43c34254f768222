// NSA-order backward for dq: a CTA owns one query token, one KV head and up
// to 16 of the group's query heads (the tile rows), and walks the token's
// selected blocks 64 keys per stage; each of the 4 warps takes 16 keys of
// every stage:
//   S = Q K^T, P = exp(S - lse), dP = dO V^T, dS = P (dP - delta), dQ += dS K.
// The warps' dQ are summed in warp order at the end, so the result does not
// depend on scheduling. No partial buffers: dq is written once per row.
#include "sel_nsa.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE;
constexpr int WARPS = NSA_WARPS, STAGE = NSA_STAGE;
constexpr int HEAD_GROUPS = (G + NSA_ROWS - 1) / NSA_ROWS;  // CTAs per (token, KV head)
constexpr int LD = D + 8;                   // smem pitch: +16 B keeps ldmatrix rows on distinct banks
static_assert(D % 16 == 0 && BK % 16 == 0, "head dim and block size are multiples of 16");
static_assert(2 * 2 * STAGE * LD * 2 >= WARPS * 16 * D * 4, "merge area fits in the K/V buffers");

extern "C" __global__ void __launch_bounds__(WARPS * 32) fsa_sel_bwd_dq_nsa(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    u16 *Qs = (u16 *)smem;          // [16][LD]
    u16 *DOs = Qs + 16 * LD;        // [16][LD]
    u16 *Ks = DOs + 16 * LD;        // [2][STAGE][LD]
    u16 *Vs = Ks + 2 * STAGE * LD;  // [2][STAGE][LD]
    __shared__ int raw[NSA_MAX_TOPK];
    __shared__ int valid[NSA_MAX_TOPK];
    __shared__ int block_start[NSA_MAX_TOPK];
    __shared__ int keyidx[2][STAGE];
    __shared__ float lse2[16], delta[16];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long tl = blockIdx.x, t = p.t0 + tl;
    const int h = blockIdx.y / HEAD_GROUPS;
    const int hg = blockIdx.y - h * HEAD_GROUPS;

    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
    const int n_valid = nsa_select_blocks(block_start, raw, valid, p, h, t, sb.start, BK);

    // Rows: heads hg*16 .. hg*16+15 of the group. Rows past G are zero with
    // lse = +inf, so their P is 0.
    const u16 *q = (const u16 *)p.q, *dout = (const u16 *)p.dout;
    for (int c = tid; c < 16 * (D / 8); c += WARPS * 32) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        const int gi = hg * 16 + r;
        const bool ok = gi < G;
        const long long qh = h * G + gi;
        cp_async16(smem_addr(Qs + r * LD + cc * 8), ok ? q + t * p.q_ts + qh * p.q_hs + cc * 8 : q, ok);
        cp_async16(smem_addr(DOs + r * LD + cc * 8), ok ? dout + t * p.do_ts + qh * p.do_hs + cc * 8 : dout, ok);
    }
    if (tid < 16) {
        const int gi = hg * 16 + tid;
        const long long qh = h * G + gi;
        lse2[tid] = gi < G ? ((const float *)p.lse)[qh * p.total_tokens + t] * 1.4426950408889634f : FSA_INF;
        delta[tid] = gi < G ? ((const float *)p.delta)[qh * p.tc + tl] : 0.f;
    }
    const int total_keys = n_valid * BK;
    const int n_stages = (total_keys + STAGE - 1) / STAGE;
    if (n_stages > 0) nsa_load_stage<D, BK>(p, Ks, Vs, keyidx[0], block_start, 0, total_keys, h, sb.end);
    cp_async_commit();

    const float scale_log2 = (float)p.scale_log2;
    // ldmatrix lane addresses: A operand rows (Q, dO), B operand from key rows
    // (K for S, V for dP), and K transposed as the B operand of dS K.
    const u32 row_lane = (((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;
    const u32 key_lane = ((warp * 16 + (lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8) * 2;
    const u32 key_t_lane = ((warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;
    const u32 q_addr = smem_addr(Qs) + row_lane, do_addr = smem_addr(DOs) + row_lane;
    const u32 ks_addr = smem_addr(Ks), vs_addr = smem_addr(Vs);
    constexpr u32 STAGE_BYTES = STAGE * LD * 2;
    float dq[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;

    for (int st = 0; st < n_stages; st++) {
        const int buf = st & 1;
        if (st + 1 < n_stages) {
            __syncthreads();  // everyone is done with the buffer the next stage fills
            nsa_load_stage<D, BK>(p, Ks + (buf ^ 1) * STAGE * LD, Vs + (buf ^ 1) * STAGE * LD, keyidx[buf ^ 1],
                                  block_start, st + 1, total_keys, h, sb.end);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const u32 kb = ks_addr + buf * STAGE_BYTES, vb = vs_addr + buf * STAGE_BYTES;
        const int *keys = keyidx[buf] + warp * 16;

        float s[2][4], dp[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.f;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            u32 a[4], b[4];
            ldmatrix_x4(a, q_addr + kd * 32);
            ldmatrix_x4(b, kb + key_lane + kd * 32);
            DT::mma(s[0], a, b[0], b[1]);
            DT::mma(s[1], a, b[2], b[3]);
            ldmatrix_x4(a, do_addr + kd * 32);
            ldmatrix_x4(b, vb + key_lane + kd * 32);
            DT::mma(dp[0], a, b[0], b[1]);
            DT::mma(dp[1], a, b[2], b[3]);
        }
#pragma unroll
        for (int jn = 0; jn < 2; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = (lane >> 2) + (e >> 1) * 8;
                const int key = keys[jn * 8 + 2 * (lane & 3) + (e & 1)];
                const float pr = key <= t ? fast_exp2(fmaf(s[jn][e], scale_log2, -lse2[r])) : 0.f;
                s[jn][e] = pr * (dp[jn][e] - delta[r]);  // dS
            }
        }
        u32 a[4];
        a[0] = DT::pack(s[0][0], s[0][1]);
        a[1] = DT::pack(s[0][2], s[0][3]);
        a[2] = DT::pack(s[1][0], s[1][1]);
        a[3] = DT::pack(s[1][2], s[1][3]);
#pragma unroll
        for (int dn = 0; dn < D / 8; dn += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, kb + key_t_lane + dn * 16);
            DT::mma(dq[dn], a, b[0], b[1]);
            DT::mma(dq[dn + 1], a, b[2], b[3]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    float *part = (float *)Ks;  // [WARPS][16][D]
    const int r_lo = lane >> 2;
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
        const int col = dn * 8 + 2 * (lane & 3);
        *(float2 *)(part + (warp * 16 + r_lo) * D + col) = make_float2(dq[dn][0], dq[dn][1]);
        *(float2 *)(part + (warp * 16 + r_lo + 8) * D + col) = make_float2(dq[dn][2], dq[dn][3]);
    }
    __syncthreads();
    const float scale = (float)(p.scale_log2 * 0.69314718055994531);
    u16 *dqg = (u16 *)p.dq;
    for (int c = tid; c < 16 * (D / 2); c += WARPS * 32) {
        const int r = c / (D / 2), d = (c - r * (D / 2)) * 2;
        const int gi = hg * 16 + r;
        if (gi >= G) continue;
        float2 sum = make_float2(0.f, 0.f);
#pragma unroll
        for (int w = 0; w < WARPS; w++) {
            const float2 v = *(const float2 *)(part + (w * 16 + r) * D + d);
            sum.x += v.x, sum.y += v.y;
        }
        *(u32 *)(dqg + t * p.dq_ts + (long long)(h * G + gi) * p.dq_hs + d) = DT::pack(sum.x * scale, sum.y * scale);
    }
}
