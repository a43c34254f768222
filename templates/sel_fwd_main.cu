// FSA forward, main kernel: a CTA takes one work item = one (KV head, key
// block) and up to CHUNK (token, slot) pairs of that block's list. K and V of
// the block are loaded once; the tile rows pack (token, head-in-group), so the
// G heads of a token share the block and no row is padding. Each pair's
// partial output is normalized by its own row sum and written with its
// log2-sum-exp; the reduction kernel merges the partials of a token.
#include "sel_common.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE;
constexpr int WARPS = 4;
constexpr int ROWS = 16 * WARPS;           // query rows per tile
constexpr int TOK = ROWS / G;              // tokens per tile
constexpr int TILES = 4;                   // tiles per work item
constexpr int CHUNK = TOK * TILES;         // list entries per work item (host uses the same)
constexpr int KT = BK < 64 ? BK : 64;      // keys per softmax step
constexpr int LD = D + 8;                  // smem pitch: +16 B keeps ldmatrix rows on distinct banks
static_assert(TOK >= 1, "GROUP must be at most 64");
static_assert(D % 16 == 0 && BK % 16 == 0, "head dim and block size are multiples of 16");

struct Row {
    long long t;      // packed token index, -1 for a padding row
    long long pair;   // index of (h, token, slot) in the partial arrays
    int g;
};

// Which pair a tile row holds: row r = (token-in-tile, head-in-group).
__device__ __forceinline__ Row tile_row(const fsa_sel_params &p, const int *ent, int n_ent, int tile,
                                        int r, int h) {
    Row out;
    const int tk = r / G, e = tile * TOK + tk;
    out.g = r - tk * G;
    if (tk >= TOK || e >= n_ent) {
        out.t = -1;
        out.pair = 0;
        return out;
    }
    const int v = ent[e];
    const long long tl = v >> 6;
    out.t = p.t0 + tl;
    out.pair = ((long long)h * p.tc + tl) * p.top_k + (v & 63);
    return out;
}

__device__ __forceinline__ void load_q_tile(const fsa_sel_params &p, u16 *dst, const int *ent, int n_ent,
                                            int tile, int h) {
    const u16 *q = (const u16 *)p.q;
    for (int c = threadIdx.x; c < ROWS * (D / 8); c += WARPS * 32) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        Row row = tile_row(p, ent, n_ent, tile, r, h);
        const bool ok = row.t >= 0;
        const u16 *src = ok ? q + row.t * p.q_ts + (long long)(h * G + row.g) * p.q_hs + cc * 8 : q;
        cp_async16(smem_addr(dst + r * LD + cc * 8), src, ok);
    }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) fsa_sel_fwd_main(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    u16 *Ks = (u16 *)smem;
    u16 *Vs = Ks + BK * LD;
    u16 *Qs = Vs + BK * LD;                 // two tiles: the next one loads while this one runs
    int *ent = (int *)(Qs + 2 * ROWS * LD); // this work item's list entries

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (p.chunk_tokens != CHUNK) __trap();  // host and kernel disagree on the work split
    const int *work = (const int *)p.work_offsets;
    const int *offs = (const int *)p.offsets;
    const int *cu = (const int *)p.cu_seqlens;
    const long long nseg = p.num_kv_heads * p.nb_total;
    const int total_work = work[nseg];
    const float scale_log2 = (float)p.scale_log2;

    for (int w = blockIdx.x; w < total_work; w += gridDim.x) {
        // The segment (KV head, block) that owns work item w.
        long long lo = 0, hi = nseg - 1;
        while (lo < hi) {
            long long mid = (lo + hi + 1) >> 1;
            if (work[mid] <= w) lo = mid;
            else hi = mid - 1;
        }
        const long long seg = lo;
        const int h = (int)(seg / p.nb_total);
        const long long gid = seg - (long long)h * p.nb_total;
        const int e0 = offs[seg] + (w - work[seg]) * CHUNK;
        const int n_ent = min(offs[seg + 1] - e0, CHUNK);

        __syncthreads();  // the previous work item is done with shared memory
        for (int i = tid; i < n_ent; i += WARPS * 32) ent[i] = ((const int *)p.list)[e0 + i];
        __syncthreads();

        // Key range of the block, from the sequence of any token in the list.
        const SeqBounds sb = seq_bounds(cu, (int)p.batch, p.total_tokens, p.t0 + (ent[0] >> 6));
        const long long kb0 = sb.start + (gid - first_block_id(sb.start, sb.seq, BK)) * BK;
        const int nk = (int)min((long long)BK, sb.end - kb0);

        // K and V of the block, zero past the end of the sequence.
        const u16 *kg = (const u16 *)p.k + (long long)h * p.k_hs;
        const u16 *vg = (const u16 *)p.v + (long long)h * p.v_hs;
        for (int c = tid; c < BK * (D / 8); c += WARPS * 32) {
            const int r = c / (D / 8), cc = c - r * (D / 8);
            const bool ok = r < nk;
            const long long key = kb0 + (ok ? r : 0);
            cp_async16(smem_addr(Ks + r * LD + cc * 8), kg + key * p.k_ts + cc * 8, ok);
            cp_async16(smem_addr(Vs + r * LD + cc * 8), vg + key * p.v_ts + cc * 8, ok);
        }
        cp_async_commit();
        load_q_tile(p, Qs, ent, n_ent, 0, h);
        cp_async_commit();

        const int ntiles = (n_ent + TOK - 1) / TOK;
        for (int tile = 0; tile < ntiles; tile++) {
            u16 *Qb = Qs + (tile & 1) * ROWS * LD;
            if (tile + 1 < ntiles) {
                __syncthreads();  // every warp is done with the buffer the next tile fills
                load_q_tile(p, Qs + ((tile + 1) & 1) * ROWS * LD, ent, n_ent, tile + 1, h);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();

            // This lane's accumulator rows: r_lo = warp*16 + lane/4 and r_lo + 8.
            const int r_lo = warp * 16 + (lane >> 2);
            const Row row_lo = tile_row(p, ent, n_ent, tile, r_lo, h);
            const Row row_hi = tile_row(p, ent, n_ent, tile, r_lo + 8, h);

            float o_acc[D / 8][4];
#pragma unroll
            for (int i = 0; i < D / 8; i++) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
            float m_run[2] = {-FSA_INF, -FSA_INF}, l_run[2] = {0.f, 0.f};

            for (int kt = 0; kt < BK; kt += KT) {
                // S = Q K^T for 16 rows x KT keys.
                float s[KT / 8][4];
#pragma unroll
                for (int j = 0; j < KT / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
                for (int kd = 0; kd < D / 16; kd++) {
                    u32 a[4];
                    ldmatrix_x4(a, smem_addr(Qb + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD +
                                             kd * 16 + (lane >> 4) * 8));
#pragma unroll
                    for (int jn = 0; jn < KT / 8; jn += 2) {
                        u32 bk[4];
                        ldmatrix_x4(bk, smem_addr(Ks + (kt + jn * 8 + (lane & 7) + (lane >> 4) * 8) * LD +
                                                  kd * 16 + ((lane >> 3) & 1) * 8));
                        DT::mma(s[jn], a, bk[0], bk[1]);
                        DT::mma(s[jn + 1], a, bk[2], bk[3]);
                    }
                }
                // Scale to log2 units; causal mask (keys after the token; this
                // also hides keys past the end of the sequence).
                float mx[2] = {-FSA_INF, -FSA_INF};
#pragma unroll
                for (int jn = 0; jn < KT / 8; jn++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const long long key = kb0 + kt + jn * 8 + 2 * (lane & 3) + (e & 1);
                        const long long t = e < 2 ? row_lo.t : row_hi.t;
                        const float x = key <= t ? s[jn][e] * scale_log2 : -FSA_INF;
                        s[jn][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                }
                float alpha[2], m_use[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const float m_new = fmaxf(m_run[i], quad_max(mx[i]));
                    m_use[i] = m_new == -FSA_INF ? 0.f : m_new;  // rows with nothing visible yet stay 0
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
                for (int jn = 0; jn < KT / 8; jn++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float pr = fast_exp2(s[jn][e] - m_use[e >> 1]);
                        s[jn][e] = pr;
                        l_run[e >> 1] += pr;
                    }
                }
                // O += P V, P from the S accumulators (same register layout as an A operand).
#pragma unroll
                for (int kk = 0; kk < KT / 16; kk++) {
                    u32 a[4];
                    a[0] = DT::pack(s[2 * kk][0], s[2 * kk][1]);
                    a[1] = DT::pack(s[2 * kk][2], s[2 * kk][3]);
                    a[2] = DT::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                    a[3] = DT::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                    for (int dn = 0; dn < D / 8; dn += 2) {
                        u32 bv[4];
                        ldmatrix_x4_trans(bv, smem_addr(Vs + (kt + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD +
                                                        dn * 8 + (lane >> 4) * 8));
                        DT::mma(o_acc[dn], a, bv[0], bv[1]);
                        DT::mma(o_acc[dn + 1], a, bv[2], bv[3]);
                    }
                }
            }

            // Normalize, stage the 16 x D tile in this warp's own Q rows, then
            // write 16-byte pieces of whole rows.
            float inv[2], lse2[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float l = quad_sum(l_run[i]);
                inv[i] = l > 0.f ? 1.f / l : 0.f;
                lse2[i] = m_run[i] + fast_log2(l);
            }
            __syncwarp();
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++) {
                const int col = dn * 8 + 2 * (lane & 3);
                *(u32 *)(Qb + r_lo * LD + col) = DT::pack(o_acc[dn][0] * inv[0], o_acc[dn][1] * inv[0]);
                *(u32 *)(Qb + (r_lo + 8) * LD + col) = DT::pack(o_acc[dn][2] * inv[1], o_acc[dn][3] * inv[1]);
            }
            if ((lane & 3) == 0) {
                float *lse_part = (float *)p.lse_part;
                if (row_lo.t >= 0) lse_part[row_lo.pair * G + row_lo.g] = lse2[0];
                if (row_hi.t >= 0) lse_part[row_hi.pair * G + row_hi.g] = lse2[1];
            }
            __syncwarp();
            u16 *o_part = (u16 *)p.o_part;
            for (int c = lane; c < 16 * (D / 8); c += 32) {
                const int rr = c / (D / 8), cc = c - rr * (D / 8);
                const Row row = tile_row(p, ent, n_ent, tile, warp * 16 + rr, h);
                if (row.t < 0) continue;
                *(uint4 *)(o_part + (row.pair * G + row.g) * D + cc * 8) =
                    *(const uint4 *)(Qb + (warp * 16 + rr) * LD + cc * 8);
            }
        }
    }
}
