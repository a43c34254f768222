// Selected attention of new query tokens over a paged KV cache (decode,
// speculative decoding, chunked prefill). A CTA owns (sequence, tile of its
// new tokens, KV head, split): its rows are tokens x the G query heads of the
// KV head, so every head of a token and every token of the tile share one
// load of each K/V block. It forms the union of the blocks its tokens
// selected, streams them through the page table 64 keys per stage (two
// stages in flight), masks per row (the row's token selected the block; key
// position <= the token's position), and keeps an online softmax. Warps split
// the rows into 16-row tiles and the keys of a stage into groups; the groups
// merge at the end. A sequence with one split writes o and lse directly;
// otherwise each split writes a normalized partial and fsa_kvc_merge combines
// them in split order.
#include "paged_kv.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
#define PAGE_SIZE {{PAGE_SIZE}}
#define TOP_K {{TOP_K}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE, K = TOP_K;
constexpr int RT = FSA_KVC_ROW_TILES(G);    // 16-row tiles per CTA
constexpr int TPT = FSA_KVC_TILE_TOKENS(G); // query tokens per tile
constexpr int ROWS = 16 * RT;
constexpr int WARPS = 4, THREADS = WARPS * 32, STAGE = 64;
constexpr int KG = WARPS / RT;              // key groups: warps that share a row tile
constexpr int KW = STAGE / KG;              // keys of a stage per warp
constexpr int NT = KW / 8;                  // score tiles of 8 keys per warp
constexpr int NC = TPT * K;                 // top-k entries of a tile
constexpr int LD = D + 8;                   // smem pitch: +16 B keeps ldmatrix rows on distinct banks
static_assert(G <= FSA_KVC_MAX_GROUP && TPT <= 32, "token masks are 32-bit");
static_assert(D % 16 == 0 && BK % 16 == 0 && KW % 16 == 0, "multiples of 16");
static_assert(2 * 2 * STAGE * LD * 2 >= WARPS * 16 * D * 4, "merge area fits in the K/V buffers");

extern "C" __global__ void __launch_bounds__(THREADS) fsa_kvc_fwd(const fsa_kvc_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    u16 *Qs = (u16 *)smem;          // [ROWS][LD]
    u16 *Ks = Qs + ROWS * LD;       // [2][STAGE][LD]
    u16 *Vs = Ks + 2 * STAGE * LD;  // [2][STAGE][LD]
    __shared__ int cand[NC];
    __shared__ u32 first[(NC + 31) / 32];
    __shared__ int blocks[NC];      // the tile's union of selected blocks, ascending
    __shared__ u32 masks[NC];       // per union block: the tokens that selected it
    __shared__ int pos[TPT];        // position of each token in its sequence
    __shared__ int keypos[2][STAGE];
    __shared__ u32 keymask[2][STAGE];
    __shared__ float ml[WARPS][16][2];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hkv = (int)p.num_kv_heads;
    const int h = blockIdx.y % hkv, split = blockIdx.y / hkv;
    const int *cu_q = (const int *)p.cu_q;
    int tile;
    const int b = tile_sequence(&tile, cu_q, p.tq, (int)p.batch, blockIdx.x, TPT);
    const QuerySpan span = query_span(cu_q, p.tq, b);
    const int nsplit = FSA_KVC_SEQ_SPLITS(span.len, TPT, (int)p.splits);
    if (tile < 0 || tile * TPT >= span.len || split >= nsplit) return;
    const int seq_len = cached_len((const int *)p.seqused, b);
    const long long t0 = span.start + (long long)tile * TPT;
    const int ntok = min(TPT, span.len - tile * TPT);
    if (tid < TPT) pos[tid] = tid < ntok ? seq_len - span.len + tile * TPT + tid : -1;

    // Query rows: row r is token r / G, head h * G + r % G; rows past the tile are zero.
    const u16 *q = (const u16 *)p.q;
    for (int c = tid; c < ROWS * (D / 8); c += THREADS) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        const bool ok = r < TPT * G && r / G < ntok;
        const u16 *src = ok ? q + (t0 + r / G) * p.q_ts + (long long)(h * G + r % G) * p.q_hs + cc * 8 : q;
        cp_async16(smem_addr(Qs + r * LD + cc * 8), src, ok);
    }
    cp_async_commit();
    __syncthreads();  // pos
    const int *rows = (const int *)p.topk + (long long)h * p.topk_hs + t0 * p.topk_ts;
    const int *len = p.topk_len ? (const int *)p.topk_len + t0 : nullptr;
    const int n_union = select_union<K, TPT, BK>(blocks, masks, cand, first, rows, p.topk_ts, len, pos, ntok);

    // This split's share of the union: contiguous, in block order.
    const int chunk = (n_union + nsplit - 1) / nsplit;
    const int u_lo = min(n_union, split * chunk), u_hi = min(n_union, u_lo + chunk);
    const int total_keys = (u_hi - u_lo) * BK;
    const int n_stages = (total_keys + STAGE - 1) / STAGE;
    const int *table = (const int *)p.block_table + (long long)b * p.bt_stride;
    if (n_stages > 0)
        paged_load_stage<D, BK, PAGE_SIZE, STAGE>(p, Ks, Vs, keypos[0], keymask[0], blocks, masks, u_lo, 0,
                                                  total_keys, h, table, seq_len);
    cp_async_commit();

    // Warp roles: row tile rt, keys kg * KW .. kg * KW + KW - 1 of every stage.
    const int rt = warp % RT, kg = warp / RT;
    const bool rows_live = rt * 16 < ntok * G;  // warp-uniform: a tile past the tokens skips the math
    int tpos[2];
    u32 tbit[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = rt * 16 + (lane >> 2) + 8 * i;
        const bool ok = r < TPT * G && r / G < ntok;
        tpos[i] = ok ? seq_len - span.len + tile * TPT + r / G : -1;
        tbit[i] = ok ? 1u << (r / G) : 0u;
    }
    const float scale_log2 = (float)p.scale_log2;
    const u32 q_addr = smem_addr(Qs) + ((rt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;
    const u32 k_addr = smem_addr(Ks) + ((kg * KW + (lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8) * 2;
    const u32 v_addr = smem_addr(Vs) + ((kg * KW + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;
    constexpr u32 STAGE_BYTES = STAGE * LD * 2, TILE16_BYTES = 16 * LD * 2;
    float o_acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
    float m_run[2] = {-FSA_INF, -FSA_INF}, l_run[2] = {0.f, 0.f};

    for (int st = 0; st < n_stages; st++) {
        const int buf = st & 1;
        if (st + 1 < n_stages) {
            __syncthreads();  // everyone is done with the buffer the next stage fills
            paged_load_stage<D, BK, PAGE_SIZE, STAGE>(p, Ks + (buf ^ 1) * STAGE * LD, Vs + (buf ^ 1) * STAGE * LD,
                                                      keypos[buf ^ 1], keymask[buf ^ 1], blocks, masks, u_lo,
                                                      st + 1, total_keys, h, table, seq_len);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (!rows_live) continue;
        const u32 kb_addr = k_addr + buf * STAGE_BYTES, vb_addr = v_addr + buf * STAGE_BYTES;
        const int *kpos = keypos[buf] + kg * KW;
        const u32 *kmask = keymask[buf] + kg * KW;

        // S = Q K^T over this warp's keys.
        float s[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            u32 a[4];
            ldmatrix_x4(a, q_addr + kd * 32);
#pragma unroll
            for (int j16 = 0; j16 < NT / 2; j16++) {
                u32 bk[4];
                ldmatrix_x4(bk, kb_addr + j16 * TILE16_BYTES + kd * 32);
                DT::mma(s[2 * j16], a, bk[0], bk[1]);
                DT::mma(s[2 * j16 + 1], a, bk[2], bk[3]);
            }
        }
        // Mask: the row's token selected the key's block, and the key is not in its future.
        float mxr[2] = {-FSA_INF, -FSA_INF};
#pragma unroll
        for (int jn = 0; jn < NT; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = jn * 8 + 2 * (lane & 3) + (e & 1);
                const bool vis = (kmask[key] & tbit[e >> 1]) && kpos[key] <= tpos[e >> 1];
                const float x = vis ? s[jn][e] : -FSA_INF;  // the scale goes into the exponent
                s[jn][e] = x;
                mxr[e >> 1] = fmaxf(mxr[e >> 1], x);
            }
        }
        // Online softmax: rescale the running sum and output to the new maximum.
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
        for (int jn = 0; jn < NT; jn++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float pr = fast_exp2(fmaf(s[jn][e], scale_log2, -m_use[e >> 1]));
                s[jn][e] = pr;
                l_run[e >> 1] += pr;
            }
        }
        // O += P V, 16 keys per mma k-step.
#pragma unroll
        for (int j16 = 0; j16 < NT / 2; j16++) {
            u32 a[4];
            a[0] = DT::pack(s[2 * j16][0], s[2 * j16][1]);
            a[1] = DT::pack(s[2 * j16][2], s[2 * j16][3]);
            a[2] = DT::pack(s[2 * j16 + 1][0], s[2 * j16 + 1][1]);
            a[3] = DT::pack(s[2 * j16 + 1][2], s[2 * j16 + 1][3]);
#pragma unroll
            for (int dn = 0; dn < D / 8; dn += 2) {
                u32 bv[4];
                ldmatrix_x4_trans(bv, vb_addr + j16 * TILE16_BYTES + dn * 16);
                DT::mma(o_acc[dn], a, bv[0], bv[1]);
                DT::mma(o_acc[dn + 1], a, bv[2], bv[3]);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    // Each warp's (max, sum, unnormalized O) per row, merged over the key groups in order.
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
        float *lo = om + (warp * 16 + r_lo) * D + dn * 8 + 2 * (lane & 3);
        lo[0] = o_acc[dn][0];
        lo[1] = o_acc[dn][1];
        lo[8 * D] = o_acc[dn][2];
        lo[8 * D + 1] = o_acc[dn][3];
    }
    __syncthreads();
    u16 *o = (u16 *)p.o;
    const long long part = (((long long)b * hkv + h) * nsplit + split) * ROWS;
    for (int c = tid; c < ROWS * (D / 2); c += THREADS) {
        const int r = c / (D / 2), d = (c - r * (D / 2)) * 2;
        if (r >= TPT * G || r / G >= ntok) continue;
        const int rw = r & 15, w0 = r >> 4;  // warps w0 + kg * RT hold this row
        float mmax = -FSA_INF;
#pragma unroll
        for (int g = 0; g < KG; g++) mmax = fmaxf(mmax, ml[w0 + g * RT][rw][0]);
        float l = 0.f, v0 = 0.f, v1 = 0.f;
        if (mmax != -FSA_INF) {
#pragma unroll
            for (int g = 0; g < KG; g++) {
                const int w = w0 + g * RT;
                const float f = fast_exp2(ml[w][rw][0] - mmax);
                l += ml[w][rw][1] * f;
                v0 += om[(w * 16 + rw) * D + d] * f;
                v1 += om[(w * 16 + rw) * D + d + 1] * f;
            }
        }
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const float lse2 = l > 0.f ? mmax + fast_log2(l) : -FSA_INF;
        const long long t = t0 + r / G;
        const int hq = h * G + r % G;
        if (nsplit == 1) {
            *(u32 *)(o + t * p.o_ts + (long long)hq * p.o_hs + d) = DT::pack(v0 * inv, v1 * inv);
            if (d == 0 && p.lse) ((float *)p.lse)[(long long)hq * p.tq + t] = lse2 * 0.69314718055994531f;
        } else {
            float *op = (float *)p.o_part + (part + r) * D + d;
            op[0] = v0 * inv;
            op[1] = v1 * inv;
            if (d == 0) ((float *)p.lse_part)[part + r] = lse2;
        }
    }
}

// Merges the splits of every one-tile sequence: per row, the partials weighted
// by exp(lse_s - max) in split order, so the result does not depend on which
// CTA finished first. Grid (batch, Hkv).
extern "C" __global__ void __launch_bounds__(THREADS) fsa_kvc_merge(const fsa_kvc_params p) {
    const int b = blockIdx.x, h = blockIdx.y, hkv = (int)p.num_kv_heads;
    const QuerySpan span = query_span((const int *)p.cu_q, p.tq, b);
    const int nsplit = FSA_KVC_SEQ_SPLITS(span.len, TPT, (int)p.splits);
    if (nsplit == 1) return;
    const long long part = ((long long)b * hkv + h) * nsplit * ROWS;
    const float *lp = (const float *)p.lse_part + part;
    const float *op = (const float *)p.o_part + part * D;
    u16 *o = (u16 *)p.o;
    for (int c = threadIdx.x; c < span.len * G * (D / 2); c += THREADS) {
        const int r = c / (D / 2), d = (c - r * (D / 2)) * 2;
        float mmax = -FSA_INF;
        for (int s = 0; s < nsplit; s++) mmax = fmaxf(mmax, lp[s * ROWS + r]);
        float l = 0.f, v0 = 0.f, v1 = 0.f;
        if (mmax != -FSA_INF) {
            for (int s = 0; s < nsplit; s++) {
                const float f = fast_exp2(lp[s * ROWS + r] - mmax);
                l += f;
                v0 += op[((long long)s * ROWS + r) * D + d] * f;
                v1 += op[((long long)s * ROWS + r) * D + d + 1] * f;
            }
        }
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const long long t = span.start + r / G;
        const int hq = h * G + r % G;
        *(u32 *)(o + t * p.o_ts + (long long)hq * p.o_hs + d) = DT::pack(v0 * inv, v1 * inv);
        if (d == 0 && p.lse)
            ((float *)p.lse)[(long long)hq * p.tq + t] = l > 0.f ? (mmax + fast_log2(l)) * 0.69314718055994531f : -FSA_INF;
    }
}
