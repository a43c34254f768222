// FSA backward, main kernel: a CTA takes one work item = one (KV head, key
// block, run of list entries of that block, in token order; the host sizes
// the runs) and one KEYS-key slice of the block, in rounds of CHUNK entries.
// K and V of the slice stay in shared memory; warp w owns keys 16w..16w+15
// and accumulates their dK and dV in registers over every tile of (token,
// head-in-group) rows:
//   S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - delta),
//   dV += P^T dO, dK += dS^T Q, and (fsa_sel_bwd_main only) dQ = dS K.
// dQ goes out per (token, slot, slice) and is summed per token by the
// reduction; fsa_sel_bwd_main_kv leaves dq to the NSA-order kernel.
// A block whose list fits one work item adds its dK/dV straight into the fp32
// accumulator; longer lists leave one partial per work item, summed in item
// order afterwards, so the result does not depend on scheduling.
// Head dims over 128 run twice, each launch accumulating half of D.
#include "sel_common.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
#define KEYS {{KEYS}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE, KS = KEYS;
constexpr int SLICES = BK / KS;            // CTAs per (work item): key slices of the block
constexpr int WARPS = KS / 16;             // a warp owns 16 keys
constexpr int M = 32;                      // query rows per tile
constexpr int TOK = G <= M ? M / G : 1;    // tokens per tile
constexpr int TPT = G <= M ? 1 : (G + M - 1) / M;  // tiles per token (groups over 32 heads)
constexpr int TILES = 32;                  // tiles per work item
constexpr int CHUNK = TILES / TPT * TOK;   // list entries per round of one row table (host uses the same)
constexpr int DP = D > 128 ? D / 2 : D;    // dK/dV columns accumulated per launch
constexpr int LD = D + 8;                  // smem pitch: +16 B keeps ldmatrix rows on distinct banks
constexpr int LDS = M + 8;                 // pitch of dS^T
static_assert(KS >= 16 && KS <= 128 && BK % KS == 0, "slices of 16 to 128 keys");
static_assert(D % 16 == 0 && DP % 16 == 0, "head dim is a multiple of 16");

// Row r of tile `tile`: list entry e and head-in-group g; false for padding.
__device__ __forceinline__ bool tile_row(int tile, int r, int &e, int &g) {
    if (G <= M) {
        const int tk = r / G;
        g = r - tk * G;
        e = tile * TOK + tk;
        return tk < TOK;
    }
    e = tile / TPT;
    g = (tile - e * TPT) * M + r;
    return g < G;
}

struct Tables {
    int token[TILES * M];   // packed token, -1 for padding rows
    int pair[TILES * M];    // (h, token, slot) pair index
    float lse2[TILES * M];  // log2-sum-exp of the row (+inf for padding: P = 0)
    float delta[TILES * M];
};

__device__ __forceinline__ void build_tables(Tables &tb, const fsa_sel_params &p, const int *ent, int n_ent, int h) {
    const float log2e = 1.4426950408889634f;
    for (int i = threadIdx.x; i < TILES * M; i += WARPS * 32) {
        const int tile = i / M, r = i - tile * M;
        int e, g;
        if (!tile_row(tile, r, e, g) || e >= n_ent) {
            tb.token[i] = -1;
            tb.pair[i] = 0;
            tb.lse2[i] = FSA_INF;
            tb.delta[i] = 0.f;
            continue;
        }
        const int v = ent[e];
        const long long tl = v >> 6, t = p.t0 + tl;
        const int qh = h * G + g;
        tb.token[i] = (int)t;
        tb.pair[i] = (int)(((long long)h * p.tc + tl) * p.top_k + (v & 63));
        tb.lse2[i] = ((const float *)p.lse)[(long long)qh * p.total_tokens + t] * log2e;
        tb.delta[i] = ((const float *)p.delta)[(long long)qh * p.tc + tl];
    }
}

// Query and dO rows of one tile.
__device__ __forceinline__ void load_rows(const fsa_sel_params &p, u16 *qdst, u16 *ddst, const Tables &tb, int tile,
                                          int h) {
    const u16 *q = (const u16 *)p.q, *dout = (const u16 *)p.dout;
    for (int c = threadIdx.x; c < M * (D / 8); c += WARPS * 32) {
        const int r = c / (D / 8), cc = c - r * (D / 8);
        const int t = tb.token[tile * M + r];
        int e, g;
        tile_row(tile, r, e, g);
        const int qh = h * G + g;
        const bool ok = t >= 0;
        const u16 *qs = ok ? q + (long long)t * p.q_ts + (long long)qh * p.q_hs + cc * 8 : q;
        const u16 *ds = ok ? dout + (long long)t * p.do_ts + (long long)qh * p.do_hs + cc * 8 : dout;
        cp_async16(smem_addr(qdst + r * LD + cc * 8), qs, ok);
        cp_async16(smem_addr(ddst + r * LD + cc * 8), ds, ok);
    }
}

// Lane offsets (bytes) of ldmatrix row addresses for a tile with pitch `ld`:
// A operand (16 rows x 16), B operand from rows (n = row), B operand transposed.
__device__ __forceinline__ u32 lane_a(int lane, int ld) { return (((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8) * 2; }
__device__ __forceinline__ u32 lane_b(int lane, int ld) { return (((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8) * 2; }

// acc (16 keys x M rows) += A (16 rows at a_addr) x B^T (M rows at b_addr), over D.
// Both addresses include their lane offsets.
__device__ __forceinline__ void gemm_rows_t(float acc[M / 8][4], u32 a_addr, u32 b_addr) {
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++) {
        u32 a[4];
        ldmatrix_x4(a, a_addr + kd * 32);
#pragma unroll
        for (int jn = 0; jn < M / 8; jn += 2) {
            u32 b[4];
            ldmatrix_x4(b, b_addr + jn * 8 * LD * 2 + kd * 32);
            DT::mma(acc[jn], a, b[0], b[1]);
            DT::mma(acc[jn + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 keys x DP cols) += X^T (16 keys x M rows, in registers) x R (M rows x DP cols);
// rows_addr is the tile with the transposed-B lane offset, d0 the first column.
__device__ __forceinline__ void gemm_acc(float acc[DP / 8][4], const float x[M / 8][4], u32 rows_addr, int d0) {
#pragma unroll
    for (int kk = 0; kk < M / 16; kk++) {
        u32 a[4];
        a[0] = DT::pack(x[2 * kk][0], x[2 * kk][1]);
        a[1] = DT::pack(x[2 * kk][2], x[2 * kk][3]);
        a[2] = DT::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
        a[3] = DT::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
#pragma unroll
        for (int dn = 0; dn < DP / 8; dn += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, rows_addr + kk * 16 * LD * 2 + (d0 + dn * 8) * 2);
            DT::mma(acc[dn], a, b[0], b[1]);
            DT::mma(acc[dn + 1], a, b[2], b[3]);
        }
    }
}

// dQ = dS K for one tile: 16 rows x DQ_COLS columns per unit, the dS^T
// fragment loaded once per 16 keys and used for all the unit's columns.
constexpr int DQ_COLS = D % 64 == 0 ? 64 : D % 32 == 0 ? 32 : 16;
__device__ __forceinline__ void dq_tile(const fsa_sel_params &p, const Tables &tb, u32 dst_addr, u32 ks_addr, int tile,
                                        int slice, float scale, int lane, int warp) {
    constexpr int NT = DQ_COLS / 8;
    u16 *dq_part = (u16 *)p.dq_part;
    for (int u = warp; u < (M / 16) * (D / DQ_COLS); u += WARPS) {
        const int rb = u / (D / DQ_COLS), c0 = (u - rb * (D / DQ_COLS)) * DQ_COLS;
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS / 16; kk++) {
            u32 a[4];
            ldmatrix_x4_trans(a, dst_addr + lane_b(lane, LDS) + kk * 16 * LDS * 2 + rb * 32);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                u32 b[4];
                ldmatrix_x4_trans(b, ks_addr + lane_a(lane, LD) + kk * 16 * LD * 2 + (c0 + j * 8) * 2);
                DT::mma(acc[j], a, b[0], b[1]);
                DT::mma(acc[j + 1], a, b[2], b[3]);
            }
        }
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = rb * 16 + (lane >> 2) + half * 8, i = tile * M + r;
            if (tb.token[i] < 0) continue;
            int e, g;
            tile_row(tile, r, e, g);
            u16 *dst = dq_part + (((long long)tb.pair[i] * SLICES + slice) * G + g) * D + c0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < NT; j++)
                *(u32 *)(dst + j * 8) = DT::pack(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
        }
    }
}

template <bool DQ>
__device__ __forceinline__ void bwd_main(const fsa_sel_params &p) {
    extern __shared__ __align__(16) unsigned char smem[];
    Tables &tb = *(Tables *)smem;
    u16 *Ks = (u16 *)(smem + sizeof(Tables));
    u16 *Vs = Ks + KS * LD;
    u16 *Qs = Vs + KS * LD;       // [2][M][LD]
    u16 *DOs = Qs + 2 * M * LD;   // [2][M][LD]
    u16 *dST = DOs + 2 * M * LD;  // [KS][LDS]
    int *ent = (int *)(dST + KS * LDS);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Host and kernel must agree on the work split: items are whole tiles.
    const int item_entries = (int)p.item_entries;
    if (item_entries <= 0 || item_entries % TOK != 0 || p.key_slices != SLICES) __trap();
    const int *work = (const int *)p.work_offsets;
    const int *work_seg = (const int *)p.work_seg;
    const int *offs = (const int *)p.offsets;
    const int *parts = (const int *)p.part_offsets;
    const int *cu = (const int *)p.cu_seqlens;
    const long long nseg = p.num_kv_heads * p.nb_total;
    const int total_work = work[nseg] * SLICES;
    const float scale = (float)(p.scale_log2 * 0.69314718055994531);
    const float scale_log2 = (float)p.scale_log2;
    const int d0 = (int)p.d_part * DP;
    const bool do_dq = DQ && p.d_part == 0;
    constexpr u32 TILE_BYTES = M * LD * 2;
    const u32 ks_addr = smem_addr(Ks), vs_addr = smem_addr(Vs), qs_addr = smem_addr(Qs), dos_addr = smem_addr(DOs);
    const u32 dst_addr = smem_addr(dST);

    // Work items in order, each CTA taking the next one when it is done (list
    // lengths vary widely); consecutive items are the slices of one item, which
    // read the same rows. Results do not depend on which CTA takes an item.
    __shared__ int next_work;
    int *work_next = (int *)p.work_next + p.d_part;
    for (int w = blockIdx.x; w < total_work;) {
        const int wi = w / SLICES, slice = w - wi * SLICES;
        const long long seg = work_seg[wi];
        const int h = (int)(seg / p.nb_total);
        const long long gid = seg - (long long)h * p.nb_total;
        const int item = wi - work[seg];
        const int n_items = work[seg + 1] - work[seg];
        const int item0 = offs[seg] + item * item_entries;
        const int item_n = min(offs[seg + 1] - item0, item_entries);

        float dk[DP / 8][4], dv[DP / 8][4];
#pragma unroll
        for (int i = 0; i < DP / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.f;
        long long kb0 = 0;
        int nk = 0;
        const int key_lo = warp * 16 + (lane >> 2);  // this lane's key rows: key_lo and key_lo + 8

        // Rounds of up to CHUNK entries: one row table each; K and V load once per item.
        for (int r0 = 0; r0 < item_n; r0 += CHUNK) {
            const int e0 = item0 + r0;
            const int n_ent = min(item_n - r0, CHUNK);
            __syncthreads();  // the previous round or item is done with shared memory
            for (int i = tid; i < n_ent; i += WARPS * 32) ent[i] = ((const int *)p.list_sorted)[e0 + i];
            __syncthreads();
            build_tables(tb, p, ent, n_ent, h);
            if (r0 == 0) {
                const SeqBounds sb = seq_bounds(cu, (int)p.batch, p.total_tokens, p.t0 + (ent[0] >> 6));
                kb0 = sb.start + (gid - first_block_id(sb.start, sb.seq, BK)) * BK + slice * KS;
                nk = (int)max(min((long long)KS, sb.end - kb0), 0ll);  // keys past the sequence stay masked
                const u16 *kg = (const u16 *)p.k + (long long)h * p.k_hs;
                const u16 *vg = (const u16 *)p.v + (long long)h * p.v_hs;
                for (int c = tid; c < KS * (D / 8); c += WARPS * 32) {
                    const int r = c / (D / 8), cc = c - r * (D / 8);
                    const bool ok = r < nk;
                    const long long key = ok ? kb0 + r : 0;
                    cp_async16(smem_addr(Ks + r * LD + cc * 8), kg + key * p.k_ts + cc * 8, ok);
                    cp_async16(smem_addr(Vs + r * LD + cc * 8), vg + key * p.v_ts + cc * 8, ok);
                }
            }
            __syncthreads();  // tables complete
            load_rows(p, Qs, DOs, tb, 0, h);
            cp_async_commit();

            const int ntiles = G <= M ? (n_ent + TOK - 1) / TOK : n_ent * TPT;
            for (int tile = 0; tile < ntiles; tile++) {
                if (tile + 1 < ntiles) {
                    __syncthreads();  // the other buffers are free
                    load_rows(p, Qs + ((tile + 1) & 1) * M * LD, DOs + ((tile + 1) & 1) * M * LD, tb, tile + 1, h);
                    cp_async_commit();
                    cp_async_wait<1>();
                } else {
                    cp_async_wait<0>();
                }
                __syncthreads();

                // P^T and dP^T for this warp's 16 keys x M rows.
                float pt[M / 8][4], dpt[M / 8][4];
#pragma unroll
                for (int j = 0; j < M / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) pt[j][e] = dpt[j][e] = 0.f;
                const u32 qb_addr = qs_addr + (tile & 1) * TILE_BYTES, dob_addr = dos_addr + (tile & 1) * TILE_BYTES;
                gemm_rows_t(pt, ks_addr + warp * 16 * LD * 2 + lane_a(lane, LD), qb_addr + lane_b(lane, LD));
                gemm_rows_t(dpt, vs_addr + warp * 16 * LD * 2 + lane_a(lane, LD), dob_addr + lane_b(lane, LD));
#pragma unroll
                for (int jn = 0; jn < M / 8; jn++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = tile * M + jn * 8 + 2 * (lane & 3) + (e & 1);
                        const long long key = kb0 + key_lo + (e >> 1) * 8;
                        const int t = tb.token[i];
                        const float pr = (t >= 0 && key <= t) ? fast_exp2(pt[jn][e] * scale_log2 - tb.lse2[i]) : 0.f;
                        pt[jn][e] = pr;
                        dpt[jn][e] = pr * (dpt[jn][e] - tb.delta[i]);  // dS^T
                    }
                }
                gemm_acc(dv, pt, dob_addr + lane_a(lane, LD), d0);
                gemm_acc(dk, dpt, qb_addr + lane_a(lane, LD), d0);
                if (!do_dq) continue;

                // dS^T to shared memory, then dQ = dS K for the tile, stored per pair row
                // straight from the fragments.
#pragma unroll
                for (int jn = 0; jn < M / 8; jn++) {
                    const int col = jn * 8 + 2 * (lane & 3);
                    *(u32 *)(dST + key_lo * LDS + col) = DT::pack(dpt[jn][0], dpt[jn][1]);
                    *(u32 *)(dST + (key_lo + 8) * LDS + col) = DT::pack(dpt[jn][2], dpt[jn][3]);
                }
                __syncthreads();  // dS^T complete
                dq_tile(p, tb, dst_addr, ks_addr, tile, slice, scale, lane, warp);
            }
        }

        // dK and dV of this warp's keys: into the accumulator, or a partial.
        float *acc_base;
        long long stride_key;
        if (n_items == 1) {
            acc_base = (float *)p.dkv_acc + ((kb0 * p.num_kv_heads + h) * 2) * D;
            stride_key = p.num_kv_heads * 2 * D;
        } else {
            acc_base = (float *)p.dkv_part + ((long long)(parts[seg] + item) * 2 * BK + slice * KS) * D;
            stride_key = D;
        }
        const long long other = n_items == 1 ? D : (long long)BK * D;  // dK -> dV
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = key_lo + half * 8;
            if (r >= nk) continue;
            float *row = acc_base + r * stride_key + d0;
#pragma unroll
            for (int dn = 0; dn < DP / 8; dn++) {
                const int col = dn * 8 + 2 * (lane & 3);
                float2 kv = make_float2(dk[dn][2 * half] * scale, dk[dn][2 * half + 1] * scale);
                float2 vv = make_float2(dv[dn][2 * half], dv[dn][2 * half + 1]);
                float2 *pk = (float2 *)(row + col), *pv = (float2 *)(row + other + col);
                if (n_items == 1) {
                    const float2 a = *pk, b = *pv;
                    kv.x += a.x, kv.y += a.y, vv.x += b.x, vv.y += b.y;
                }
                *pk = kv;
                *pv = vv;
            }
        }
        if (tid == 0) next_work = (int)gridDim.x + atomicAdd(work_next, 1);
        __syncthreads();
        w = next_work;
    }
}

// dK, dV and the per-pair dq rows (FSA-order backward).
extern "C" __global__ void __launch_bounds__(WARPS * 32) fsa_sel_bwd_main(const fsa_sel_params p) { bwd_main<true>(p); }

// dK and dV only (the NSA-order backward computes dq per token).
extern "C" __global__ void __launch_bounds__(WARPS * 32) fsa_sel_bwd_main_kv(const fsa_sel_params p) {
    bwd_main<false>(p);
}
