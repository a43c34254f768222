// NSA-order forward: a CTA owns one query token, one KV head and up to 16 of
// the group's query heads (the tile rows). It walks the token's selected
// blocks 64 keys per stage with online softmax; each of the 4 warps takes 16
// keys of every stage, and the warps' partial results merge at the end.
// No workspace. Wins when the group is large enough to fill the rows.
#include "sel_nsa.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE;
constexpr int WARPS = NSA_WARPS, STAGE = NSA_STAGE;
constexpr int HEAD_GROUPS = (G + NSA_ROWS - 1) / NSA_ROWS;  // CTAs per (token, KV head)
constexpr int LD = D + 8;                  // smem pitch: +16 B keeps ldmatrix rows on distinct banks
static_assert(D % 16 == 0 && BK % 16 == 0, "head dim and block size are multiples of 16");
static_assert(2 * 2 * STAGE * LD * 2 >= WARPS * 16 * D * 4, "merge area fits in the K/V buffers");

extern "C" __global__ void __launch_bounds__(WARPS * 32) fsa_sel_fwd_nsa(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    u16 *Qs = (u16 *)smem;                 // [16][LD]
    u16 *Ks = Qs + 16 * LD;                // [2][STAGE][LD]
    u16 *Vs = Ks + 2 * STAGE * LD;         // [2][STAGE][LD]
    __shared__ int raw[NSA_MAX_TOPK];
    __shared__ int valid[NSA_MAX_TOPK];
    __shared__ int block_start[NSA_MAX_TOPK];  // first key of each valid selected block
    __shared__ int keyidx[2][STAGE];       // key index of each stage row
    __shared__ float ml[WARPS][16][2];     // per-warp row max and sum for the merge

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long t = p.t0 + blockIdx.x;
    const int h = blockIdx.y / HEAD_GROUPS;
    const int hg = blockIdx.y - h * HEAD_GROUPS;

    const int *cu = (const int *)p.cu_seqlens;
    const SeqBounds sb = seq_bounds(cu, (int)p.batch, p.total_tokens, t);
    const long long seq_start = sb.start, seq_end = sb.end;
    const int n_valid = nsa_select_blocks(block_start, raw, valid, p, h, t, seq_start, BK);

    // Query rows: heads hg*16 .. hg*16+15 of the group; rows past G are zero.
    const u16 *q = (const u16 *)p.q;
    for (int c = tid; c < 16 * (D / 8); c += WARPS * 32) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        const int gi = hg * 16 + r;
        const bool ok = gi < G;
        const u16 *src = ok ? q + t * p.q_ts + (long long)(h * G + gi) * p.q_hs + cc * 8 : q;
        cp_async16(smem_addr(Qs + r * LD + cc * 8), src, ok);
    }
    const int total_keys = n_valid * BK;
    const int n_stages = (total_keys + STAGE - 1) / STAGE;
    if (n_stages > 0) nsa_load_stage<D, BK>(p, Ks, Vs, keyidx[0], block_start, 0, total_keys, h, seq_end);
    cp_async_commit();

    const float scale_log2 = (float)p.scale_log2;
    // Shared-memory addresses, once: the loop below only adds constants.
    const u32 q_addr = smem_addr(Qs) + (((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;
    const u32 k_addr = smem_addr(Ks) + ((warp * 16 + (lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8) * 2;
    const u32 v_addr = smem_addr(Vs) + ((warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;
    constexpr u32 STAGE_BYTES = STAGE * LD * 2;
    float o_acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
    float m_run[2] = {-FSA_INF, -FSA_INF}, l_run[2] = {0.f, 0.f};

    for (int st = 0; st < n_stages; st++) {
        const int buf = st & 1;
        if (st + 1 < n_stages) {
            __syncthreads();  // everyone is done with the buffer the next stage fills
            nsa_load_stage<D, BK>(p, Ks + (buf ^ 1) * STAGE * LD, Vs + (buf ^ 1) * STAGE * LD, keyidx[buf ^ 1],
                                  block_start, st + 1, total_keys, h, seq_end);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const u32 kb_addr = k_addr + buf * STAGE_BYTES;  // this warp's 16 keys
        const u32 vb_addr = v_addr + buf * STAGE_BYTES;
        const int *keys = keyidx[buf] + warp * 16;

        float s[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            u32 a[4], bk[4];
            ldmatrix_x4(a, q_addr + kd * 32);
            ldmatrix_x4(bk, kb_addr + kd * 32);
            DT::mma(s[0], a, bk[0], bk[1]);
            DT::mma(s[1], a, bk[2], bk[3]);
        }
        float mxr[2] = {-FSA_INF, -FSA_INF};
#pragma unroll
        for (int jn = 0; jn < 2; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = keys[jn * 8 + 2 * (lane & 3) + (e & 1)];
                const float x = key <= t ? s[jn][e] : -FSA_INF;  // the scale goes into the exponent
                s[jn][e] = x;
                mxr[e >> 1] = fmaxf(mxr[e >> 1], x);
            }
        }
        float alpha[2], m_use[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float m_new = fmaxf(m_run[i], quad_max(mxr[i]) * scale_log2);
            m_use[i] = m_new == -FSA_INF ? 0.f : m_new;
            alpha[i] = fast_exp2(m_run[i] - m_use[i]);
            m_run[i] = m_new;
            l_run[i] *= alpha[i];
        }
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o_acc[i][0] *= alpha[0];
            o_acc[i][1] *= alpha[0];
            o_acc[i][2] *= alpha[1];
            o_acc[i][3] *= alpha[1];
        }
#pragma unroll
        for (int jn = 0; jn < 2; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float pr = fast_exp2(fmaf(s[jn][e], scale_log2, -m_use[e >> 1]));
                s[jn][e] = pr;
                l_run[e >> 1] += pr;
            }
        }
        u32 a[4];
        a[0] = DT::pack(s[0][0], s[0][1]);
        a[1] = DT::pack(s[0][2], s[0][3]);
        a[2] = DT::pack(s[1][0], s[1][1]);
        a[3] = DT::pack(s[1][2], s[1][3]);
#pragma unroll
        for (int dn = 0; dn < D / 8; dn += 2) {
            u32 bv[4];
            ldmatrix_x4_trans(bv, vb_addr + dn * 16);
            DT::mma(o_acc[dn], a, bv[0], bv[1]);
            DT::mma(o_acc[dn + 1], a, bv[2], bv[3]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    // Merge the four warps' (max, sum, unnormalized O) per row.
    float *om = (float *)Ks;  // [WARPS][16][D]
    const int r_lo = lane >> 2;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float l = quad_sum(l_run[i]);
        if ((lane & 3) == 0) {
            ml[warp][r_lo + 8 * i][0] = m_run[i];
            ml[warp][r_lo + 8 * i][1] = l;
        }
    }
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
        const int col = dn * 8 + 2 * (lane & 3);
        float *lo = om + (warp * 16 + r_lo) * D + col;
        float *hi = lo + 8 * D;
        lo[0] = o_acc[dn][0];
        lo[1] = o_acc[dn][1];
        hi[0] = o_acc[dn][2];
        hi[1] = o_acc[dn][3];
    }
    __syncthreads();
    u16 *o = (u16 *)p.o;
    for (int c = tid; c < 16 * (D / 2); c += WARPS * 32) {
        const int r = c / (D / 2), d = (c - r * (D / 2)) * 2;
        const int gi = hg * 16 + r;
        if (gi >= G) continue;
        float mmax = -FSA_INF;
#pragma unroll
        for (int w = 0; w < WARPS; w++) mmax = fmaxf(mmax, ml[w][r][0]);
        float l = 0.f, v0 = 0.f, v1 = 0.f;
        if (mmax != -FSA_INF) {
#pragma unroll
            for (int w = 0; w < WARPS; w++) {
                const float f = fast_exp2(ml[w][r][0] - mmax);
                l += ml[w][r][1] * f;
                v0 += om[(w * 16 + r) * D + d] * f;
                v1 += om[(w * 16 + r) * D + d + 1] * f;
            }
        }
        const float inv = l > 0.f ? 1.f / l : 0.f;
        *(u32 *)(o + t * p.o_ts + (long long)(h * G + gi) * p.o_hs + d) = DT::pack(v0 * inv, v1 * inv);
        if (d == 0 && p.lse) {
            const float ln2 = 0.69314718055994531f;
            ((float *)p.lse)[(long long)(h * G + gi) * p.total_tokens + t] =
                l > 0.f ? (mmax + fast_log2(l)) * ln2 : -FSA_INF;
        }
    }
}
