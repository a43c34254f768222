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
constexpr int TILES = 8;                   // tiles per work item
constexpr int CHUNK = TOK * TILES;         // list entries per work item (host uses the same)
constexpr int STAGES = 2;                  // query tiles in flight (host sizes shared memory the same way)
constexpr int KT = BK < 64 ? BK : 64;      // keys per softmax step
constexpr int LD = D + 8;                  // smem pitch: +16 B keeps ldmatrix rows on distinct banks
static_assert(TOK >= 1, "GROUP must be at most 64");
static_assert(D % 16 == 0 && BK % 16 == 0, "head dim and block size are multiples of 16");

// Per work item, one entry per tile row (CHUNK tokens x G heads): its token
// (-1 for padding) and its (head, token, slot) pair index. Both fit in 32
// bits: the host keeps chunks below 2^31 pairs.
struct RowTable {
    int token[TILES * ROWS];
    int pair[TILES * ROWS];
};

__device__ __forceinline__ void build_row_table(RowTable &rt, const fsa_sel_params &p, const int *ent, int n_ent,
                                                int h) {
    for (int i = threadIdx.x; i < TILES * ROWS; i += WARPS * 32) {
        const int tile = i / ROWS, r = i - tile * ROWS;
        const int tk = r / G, e = tile * TOK + tk;
        if (tk >= TOK || e >= n_ent) {
            rt.token[i] = -1;
            rt.pair[i] = 0;
            continue;
        }
        const int v = ent[e];
        const long long tl = v >> 6;
        rt.token[i] = (int)(p.t0 + tl);
        rt.pair[i] = (int)(((long long)h * p.tc + tl) * p.top_k + (v & 63));
    }
}

__device__ __forceinline__ long long part_row(const RowTable &rt, int i) {
    return (long long)rt.pair[i] * G + (i % ROWS) % G;
}

// dst: shared-memory address of the tile buffer.
__device__ __forceinline__ void load_q_tile(const fsa_sel_params &p, u32 dst, const RowTable &rt, int tile, int h) {
    const u16 *q = (const u16 *)p.q;
    for (int c = threadIdx.x; c < ROWS * (D / 8); c += WARPS * 32) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        const int t = rt.token[tile * ROWS + r];
        const u16 *src = q;
        if (t >= 0) src = q + t * p.q_ts + (long long)(h * G + r % G) * p.q_hs + cc * 8;
        cp_async16(dst + (u32)(r * LD + cc * 8) * 2, src, t >= 0);
    }
}

// Up to D = 128, three blocks per SM (168 registers): the kernel is bound by
// issue and latency, so resident warps matter more than prefetch depth.
extern "C" __global__ void __launch_bounds__(WARPS * 32, D <= 128 ? 3 : 1) fsa_sel_fwd_main(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    RowTable &rt = *(RowTable *)smem;
    u16 *Ks = (u16 *)(smem + sizeof(RowTable));
    u16 *Vs = Ks + BK * LD;
    u16 *Qs = Vs + BK * LD;                      // STAGES tiles: later ones load while one runs
    int *ent = (int *)(Qs + STAGES * ROWS * LD); // this work item's list entries

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (p.item_entries != CHUNK) __trap();  // host and kernel disagree on the work split
    const int *work = (const int *)p.work_offsets;
    const int *work_seg = (const int *)p.work_seg;
    const int *offs = (const int *)p.offsets;
    const int *cu = (const int *)p.cu_seqlens;
    const long long nseg = p.num_kv_heads * p.nb_total;
    const int total_work = work[nseg];
    const float scale_log2 = (float)p.scale_log2;

    // Shared-memory addresses, once: the loops below only add constants.
    constexpr u32 Q_TILE_BYTES = ROWS * LD * 2;
    const u32 ks_addr = smem_addr(Ks), vs_addr = smem_addr(Vs), qs_addr = smem_addr(Qs);
    const u32 a_off = ((warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;  // Q rows (A)
    const u32 bk_off = (((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8) * 2;            // K rows (B)
    const u32 bv_off = (((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8) * 2;            // V rows (B^T)

    for (int w = blockIdx.x; w < total_work; w += gridDim.x) {
        const long long seg = work_seg[w];  // the (KV head, block) segment of work item w
        const int h = (int)(seg / p.nb_total);
        const long long gid = seg - (long long)h * p.nb_total;
        const int e0 = offs[seg] + (w - work[seg]) * CHUNK;
        const int n_ent = min(offs[seg + 1] - e0, CHUNK);

        __syncthreads();  // the previous work item is done with shared memory
        for (int i = tid; i < n_ent; i += WARPS * 32) ent[i] = ((const int *)p.list)[e0 + i];
        __syncthreads();
        build_row_table(rt, p, ent, n_ent, h);

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
            const u32 off = (u32)(r * LD + cc * 8) * 2;
            cp_async16(ks_addr + off, kg + key * p.k_ts + cc * 8, ok);
            cp_async16(vs_addr + off, vg + key * p.v_ts + cc * 8, ok);
        }
        __syncthreads();  // the row table is complete
        const int ntiles = (n_ent + TOK - 1) / TOK;
        load_q_tile(p, qs_addr, rt, 0, h);
        cp_async_commit();  // group 0: K, V and tile 0
        int issued = 1;
        for (; issued < ntiles && issued < STAGES - 1; issued++) {
            load_q_tile(p, qs_addr + issued * Q_TILE_BYTES, rt, issued, h);
            cp_async_commit();
        }

        for (int tile = 0; tile < ntiles; tile++) {
            u16 *Qb = Qs + (tile % STAGES) * ROWS * LD;
            const u32 qb_addr = qs_addr + (tile % STAGES) * Q_TILE_BYTES;
            if (issued < ntiles) {
                __syncthreads();  // every warp is done with the buffer this load reuses
                load_q_tile(p, qs_addr + (issued % STAGES) * Q_TILE_BYTES, rt, issued, h);
                cp_async_commit();
                issued++;
            }
            // Wait for this tile's group; the ones issued after it may still fly.
            const int pending = issued - 1 - tile;
            static_assert(STAGES <= 4, "wait depths below cover STAGES - 1 pending groups");
            if (pending >= 3) cp_async_wait<3>();
            else if (pending == 2) cp_async_wait<2>();
            else if (pending == 1) cp_async_wait<1>();
            else cp_async_wait<0>();
            __syncthreads();

            // This lane's accumulator rows: r_lo = warp*16 + lane/4 and r_lo + 8.
            const int r_lo = warp * 16 + (lane >> 2);
            const int t_lo = rt.token[tile * ROWS + r_lo], t_hi = rt.token[tile * ROWS + r_lo + 8];

            float o_acc[D / 8][4];
#pragma unroll
            for (int i = 0; i < D / 8; i++) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
            float m_run[2] = {-FSA_INF, -FSA_INF}, l_run[2] = {0.f, 0.f};

#pragma unroll 1
            for (int kt = 0; kt < BK; kt += KT) {
                // S = Q K^T for 16 rows x KT keys.
                float s[KT / 8][4];
#pragma unroll
                for (int j = 0; j < KT / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
                for (int kd = 0; kd < D / 16; kd++) {
                    u32 a[4];
                    ldmatrix_x4(a, qb_addr + a_off + kd * 32);
#pragma unroll
                    for (int jn = 0; jn < KT / 8; jn += 2) {
                        u32 bk[4];
                        ldmatrix_x4(bk, ks_addr + bk_off + (u32)((kt + jn * 8) * LD) * 2 + kd * 32);
                        DT::mma(s[jn], a, bk[0], bk[1]);
                        DT::mma(s[jn + 1], a, bk[2], bk[3]);
                    }
                }
                // Causal mask on the raw scores (the scale goes into the exponent
                // below, max commutes with it since it is positive): key column c is visible when
                // c <= lim (the token's offset from the step's first key). This
                // also hides keys past the end of the sequence and padding rows.
                // Blocks wholly before every row's token skip the compare.
                const int lim_lo = t_lo - (int)(kb0 + kt), lim_hi = t_hi - (int)(kb0 + kt);
                const bool unmasked = __all_sync(0xffffffffu, lim_lo >= KT - 1 && lim_hi >= KT - 1);
                float mx[2] = {-FSA_INF, -FSA_INF};
#pragma unroll
                for (int jn = 0; jn < KT / 8; jn++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int col = jn * 8 + 2 * (lane & 3) + (e & 1);
                        const float x = (unmasked || col <= (e < 2 ? lim_lo : lim_hi)) ? s[jn][e] : -FSA_INF;
                        s[jn][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                }
                float alpha[2], m_use[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const float m_new = fmaxf(m_run[i], quad_max(mx[i]) * scale_log2);
                    m_use[i] = m_new == -FSA_INF ? 0.f : m_new;  // rows with nothing visible yet stay 0
                    alpha[i] = fast_exp2(m_run[i] - m_use[i]);
                    m_run[i] = m_new;
                    l_run[i] *= alpha[i];
                }
                if (kt > 0) {  // nothing to rescale before the first step
#pragma unroll
                    for (int i = 0; i < D / 8; i++) {
                        o_acc[i][0] *= alpha[0];
                        o_acc[i][1] *= alpha[0];
                        o_acc[i][2] *= alpha[1];
                        o_acc[i][3] *= alpha[1];
                    }
                }
#pragma unroll
                for (int jn = 0; jn < KT / 8; jn++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float pr = fast_exp2(fmaf(s[jn][e], scale_log2, -m_use[e >> 1]));
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
                        ldmatrix_x4_trans(bv, vs_addr + bv_off + (u32)((kt + kk * 16) * LD) * 2 + dn * 16);
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
                if (t_lo >= 0) lse_part[part_row(rt, tile * ROWS + r_lo)] = lse2[0];
                if (t_hi >= 0) lse_part[part_row(rt, tile * ROWS + r_lo + 8)] = lse2[1];
            }
            __syncwarp();
            u16 *o_part = (u16 *)p.o_part;
            for (int c = lane; c < 16 * (D / 8); c += 32) {
                const int rr = c / (D / 8), cc = c - rr * (D / 8);
                const int i = tile * ROWS + warp * 16 + rr;
                if (rt.token[i] < 0) continue;
                *(uint4 *)(o_part + part_row(rt, i) * D + cc * 8) = *(const uint4 *)(Qb + (warp * 16 + rr) * LD + cc * 8);
            }
        }
    }
}
