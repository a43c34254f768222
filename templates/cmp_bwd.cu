// Compressed attention backward, deterministic, in two or three kernels on one stream:
//  fsa_cmp_bwd_dq:  query tiles as the forward's; delta = rowsum(dO * O) of the
//                   tile's rows (also written for the next kernel), then per
//                   stage of compressed keys S = Q K^T, P with the forward's
//                   lse, dP = dO V^T, dS = P (dP - delta), dq += dS K.
//  fsa_cmp_bwd_dkv: a CTA owns 64 compressed keys of one sequence (16 per
//                   warp) and walks the query tiles that see them (all G
//                   heads of each token as rows): dV += P^T dO, dK += dS^T Q;
//                   with few key tiles the queries are split into ranges
//                   whose fp32 partials fsa_cmp_bwd_dkv_sum adds in order.
// Every output element has one owner and its sums run in a fixed order: no
// atomics, the same inputs give the same bits.
#include "cmp_common.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int DK = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}};
constexpr int LDK = fsa_pitch(DK), LDV = fsa_pitch(DV);
constexpr int TT = fsa_qt_tokens_per_tile(G), THREADS = FSA_QT_THREADS;
typedef GroupRows<G> Rows;
static_assert(DK % 16 == 0 && DV % 16 == 0 && DK <= 256 && DV <= 256, "head dims are multiples of 16 up to 256");

// ---------------------------------------------------------------- dq
constexpr int MT = fsa_cmp_dq_mt(DK, DV, G);  // sets of 16 rows per warp
constexpr int KS = fsa_cmp_dq_keys(DK, DV, G);
constexpr int TQ = fsa_qt_tokens_per_tile_mt(G, MT);

// delta of row r of this warp (dot of the dO and O rows), one row at a time
// across the warp's lanes.
__device__ __forceinline__ float row_delta(const fsa_cmp_params &p, long long t, long long qh, int lane) {
    const u16 *dout = view_row<const u16>(p.dout, t, qh), *o = view_row<const u16>(p.o, t, qh);
    float acc = 0.f;
    for (int e = lane; e < DV; e += 32) acc += DT::to_float(dout[e]) * DT::to_float(o[e]);
    return warp_sum(acc);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2) fsa_cmp_bwd_dq(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float delta_s[FSA_QT_ROWS * MT];
    const u32 qs = smem_addr(smem), dos = qs + fsa_cmp_dq_smem_do(DK, DV, G);
    const u32 ks = qs + fsa_cmp_dq_smem_k(DK, DV, G), vs = qs + fsa_cmp_dq_smem_v(DK, DV, G);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TQ>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);
    const int tile_vis = cmp_visible(tile.tok0 + tile.n_tok - 1 - tile.start, p.kernel_size, p.stride, keys.count);

    load_query_rows_async<G, DK, LDK, THREADS, FSA_QT_ROWS * MT>(qs, p.q, tile, h);
    load_query_rows_async<G, DV, LDV, THREADS, FSA_QT_ROWS * MT>(dos, p.dout, tile, h);
    auto load = [&](int i, int buf) {
        load_cmp_rows_async<KS, DK, LDK>(ks + buf * fsa_tile_bytes(KS, DK), p.k, keys, h, i * KS, tile_vis);
        load_cmp_rows_async<KS, DV, LDV>(vs + buf * fsa_tile_bytes(KS, DV), p.v, keys, h, i * KS, tile_vis);
    };
    const int n_stages = (tile_vis + KS - 1) / KS;
    AsyncRing<FSA_QT_STAGES> ring;
    ring.start(n_stages, load);

    // delta of the warp's rows (set warp * MT + r / 16), kept for the dK/dV kernel as well.
    for (int r = 0; r < 16 * MT; r++) {
        const int set = warp * MT + r / 16;
        if (!Rows::live(set, r % 16, tile.n_tok)) continue;  // warp-uniform
        const long long t = tile.tok0 + Rows::token(set, r % 16), qh = (long long)h * G + Rows::head(r % 16);
        const float d = row_delta(p, t, qh, lane);
        if (lane == 0) delta_s[set * 16 + r % 16] = d, ((float *)p.delta)[qh * p.total_tokens + t] = d;
    }
    __syncwarp();
    // This lane's rows (slot 2m + half: row lo / hi of set m): keys seen, lse in base 2, delta.
    int row_vis[2 * MT], lane_vis = 0;
    float row_lse2[2 * MT], row_delta_v[2 * MT];
#pragma unroll
    for (int slot = 0; slot < 2 * MT; slot++) {
        const int r = frag_row(lane, 2 * (slot & 1)), set = warp * MT + (slot >> 1);
        const bool live = Rows::live(set, r, tile.n_tok);
        const long long t = tile.tok0 + Rows::token(set, r);
        row_vis[slot] = live ? cmp_visible(t - tile.start, p.kernel_size, p.stride, keys.count) : 0;
        row_lse2[slot] = row_vis[slot] > 0
                             ? ((const float *)p.lse)[((long long)h * G + Rows::head(r)) * p.total_tokens + t] * LOG2E
                             : 0.f;
        row_delta_v[slot] = live ? delta_s[set * 16 + r] : 0.f;
        lane_vis = max(lane_vis, row_vis[slot]);
    }
    const int warp_vis = __reduce_max_sync(0xffffffffu, lane_vis);

    const u32 q_lane = qs + (u32)(warp * MT * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 do_lane = dos + (u32)(warp * MT * 16 * LDV * 2) + ldm_lane_a(lane, LDV);
    const u32 kb_lane = ks + ldm_lane_b(lane, LDK), ka_lane = ks + ldm_lane_a(lane, LDK);
    const u32 vb_lane = vs + ldm_lane_b(lane, LDV);
    const float scale_log2 = (float)p.scale_log2;
    float dq[MT][DK / 8][4];
#pragma unroll
    for (int m = 0; m < MT; m++) frag_zero<DK / 8>(dq[m]);

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        if (i * KS >= warp_vis) continue;  // causal: no row of this warp sees these keys
        float s[MT][KS / 8][4], dp[MT][KS / 8][4];
#pragma unroll
        for (int m = 0; m < MT; m++) {
            frag_zero<KS / 8>(s[m]);
            frag_zero<KS / 8>(dp[m]);
        }
        mma_abt_rows<DT, DK, KS / 8, LDK, MT>(s, q_lane, 16 * LDK * 2, kb_lane + buf * fsa_tile_bytes(KS, DK));
        mma_abt_rows<DT, DV, KS / 8, LDV, MT>(dp, do_lane, 16 * LDV * 2, vb_lane + buf * fsa_tile_bytes(KS, DV));
        cmp_probs<KS / 8, MT>(s, i * KS, row_vis, row_lse2, scale_log2, lane);
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int jn = 0; jn < KS / 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[m][jn][e] *= dp[m][jn][e] - row_delta_v[2 * m + (e >> 1)];  // dS
        mma_pv_rows<DT, KS / 16, DK / 8, LDK, MT>(dq, s, ka_lane + buf * fsa_tile_bytes(KS, DK));
    }
    cp_async_wait<0>();

    const float scale = (float)(p.scale_log2 * FSA_LN2);
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = frag_row(lane, 2 * half), set = warp * MT + m;
            if (!Rows::live(set, r, tile.n_tok)) continue;
            u16 *row = view_row<u16>(p.dq, tile.tok0 + Rows::token(set, r), (long long)h * G + Rows::head(r));
#pragma unroll
            for (int j = 0; j < DK / 8; j++)
                *(u32 *)(row + frag_col(lane, j, 0)) =
                    DT::pack(dq[m][j][2 * half] * scale, dq[m][j][2 * half + 1] * scale);
        }
}

// ---------------------------------------------------------------- dK, dV
constexpr int KT = FSA_CMP_DKV_KEYS;
constexpr int PARTS = fsa_cmp_dkv_parts(DK, DV);  // 2: blockIdx.z 0 makes dV, 1 makes dK
constexpr int RS = 32;                             // query rows per product step

template <bool WANT_K, bool WANT_V>
__device__ __forceinline__ void dkv_tile(const fsa_cmp_params &p, unsigned char *smem) {
    const u32 ks = smem_addr(smem), vs = ks + fsa_cmp_dkv_smem_v(DK);
    const u32 qs = ks + fsa_cmp_dkv_smem_q(DK, DV), dos = ks + fsa_cmp_dkv_smem_do(DK, DV);
    int *row_pos = (int *)(smem + fsa_cmp_dkv_smem_rows(DK, DV));  // [STAGES][64]: position, -1 for no row
    float *row_lse2 = (float *)(row_pos + FSA_QT_STAGES * FSA_QT_ROWS);
    float *row_dlt = row_lse2 + FSA_QT_STAGES * FSA_QT_ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.y;
    // The keys: a tile of one sequence's compressed tokens.
    const QueryTile kt = query_tile<KT, false>((const int *)p.cu_seqlens_c, (int)p.batch, p.total_cmp, blockIdx.x);
    if (!kt.ok) return;
    const int *cu = (const int *)p.cu_seqlens;
    const long long q_start = min(max((long long)__ldg(cu + kt.seq), 0ll), p.total_tokens);
    const long long q_end = min(max((long long)__ldg(cu + kt.seq + 1), q_start), p.total_tokens);
    const long long j0 = kt.tok0 - kt.start;                       // first key, in its sequence
    const long long first_pos = j0 * p.stride + p.kernel_size - 1;  // the first position that sees it
    const long long len = q_end - q_start;
    const int all_qt = first_pos < len ? (int)((len - first_pos + TT - 1) / TT) : 0;
    // This CTA's range of those query tiles (split z / PARTS of dkv_splits).
    const long long splits = p.dkv_splits, split = blockIdx.z / PARTS;
    const int qt0 = (int)(all_qt * split / splits), n_qt = (int)(all_qt * (split + 1) / splits) - qt0;

    load_tile_async<KT, DK, LDK, THREADS>(ks, [&](int r) {
        const bool ok = r < kt.n_tok;
        return RowSrc{ok ? view_row<const u16>(p.k, kt.tok0 + r, h) : (const u16 *)p.k.ptr, ok};
    });
    load_tile_async<KT, DV, LDV, THREADS>(vs, [&](int r) {
        const bool ok = r < kt.n_tok;
        return RowSrc{ok ? view_row<const u16>(p.v, kt.tok0 + r, h) : (const u16 *)p.v.ptr, ok};
    });
    auto load = [&](int it, int buf) {
        QueryTile qt;
        qt.start = q_start, qt.end = q_end, qt.seq = kt.seq, qt.ok = true;
        qt.tok0 = q_start + first_pos + (long long)(qt0 + it) * TT;
        qt.n_tok = (int)min((long long)TT, q_end - qt.tok0);
        load_query_rows_async<G, DK, LDK, THREADS>(qs + buf * fsa_tile_bytes(FSA_QT_ROWS, DK), p.q, qt, h);
        load_query_rows_async<G, DV, LDV, THREADS>(dos + buf * fsa_tile_bytes(FSA_QT_ROWS, DV), p.dout, qt, h);
        if (tid < FSA_QT_ROWS) {
            const int w = tid >> 4, r = tid & 15;
            const bool live = Rows::live(w, r, qt.n_tok);
            const long long t = qt.tok0 + Rows::token(w, r);
            const long long at = ((long long)h * G + Rows::head(r)) * p.total_tokens + t;
            row_pos[buf * FSA_QT_ROWS + tid] = live ? (int)(t - q_start) : -1;
            row_lse2[buf * FSA_QT_ROWS + tid] = live ? ((const float *)p.lse)[at] * LOG2E : 0.f;
            row_dlt[buf * FSA_QT_ROWS + tid] = live ? ((const float *)p.delta)[at] : 0.f;
        }
    };
    AsyncRing<FSA_QT_STAGES> ring;
    ring.start(n_qt, load);

    // The last position each of this lane's two key rows needs before it is visible.
    long long key_pos[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = warp * 16 + frag_row(lane, 2 * half);
        key_pos[half] = r < kt.n_tok ? (j0 + r) * p.stride + p.kernel_size - 1 : (long long)1 << 62;
    }
    const long long warp_first = (j0 + warp * 16) * p.stride + p.kernel_size - 1;
    const u32 k_lane = ks + (u32)(warp * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 v_lane = vs + (u32)(warp * 16 * LDV * 2) + ldm_lane_a(lane, LDV);
    const u32 qb_lane = qs + ldm_lane_b(lane, LDK), qa_lane = qs + ldm_lane_a(lane, LDK);
    const u32 dob_lane = dos + ldm_lane_b(lane, LDV), doa_lane = dos + ldm_lane_a(lane, LDV);
    const float scale_log2 = (float)p.scale_log2;
    float dk[WANT_K ? DK / 8 : 1][4], dv[WANT_V ? DV / 8 : 1][4];
    frag_zero<WANT_K ? DK / 8 : 1>(dk);
    frag_zero<WANT_V ? DV / 8 : 1>(dv);

    for (int it = 0; it < n_qt; it++) {
        const int buf = ring.acquire(it, load);
        // Causal: no query of the tile sees this warp's keys yet.
        if (warp_first > first_pos + (long long)(qt0 + it + 1) * TT - 1) continue;
        const int *pos = row_pos + buf * FSA_QT_ROWS;
        const float *lse2 = row_lse2 + buf * FSA_QT_ROWS, *dlt = row_dlt + buf * FSA_QT_ROWS;
        // The 64 query rows in two steps of 32 (S and dP of a step stay small next to dK and dV).
#pragma unroll 1
        for (int step = 0; step < FSA_QT_ROWS / RS; step++) {
            const u32 q_off = buf * fsa_tile_bytes(FSA_QT_ROWS, DK) + step * RS * LDK * 2;
            const u32 do_off = buf * fsa_tile_bytes(FSA_QT_ROWS, DV) + step * RS * LDV * 2;
            const int c0 = step * RS;
            // P^T (keys x query rows) with the forward's lse; 0 where the key is not visible.
            float pt[RS / 8][4];
            frag_zero<RS / 8>(pt);
            mma_abt<DT, DK, RS / 8, LDK>(pt, k_lane, qb_lane + q_off);
#pragma unroll
            for (int jn = 0; jn < RS / 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int col = c0 + frag_col(lane, jn, e);
                    pt[jn][e] = key_pos[e >> 1] <= pos[col] ? fast_exp2(fmaf(pt[jn][e], scale_log2, -lse2[col])) : 0.f;
                }
            if constexpr (WANT_V) mma_pv<DT, RS / 16, DV / 8, LDV>(dv, pt, doa_lane + do_off);
            if constexpr (WANT_K) {
                // dS^T = P^T (dP^T - delta), dP^T = V dO^T.
                float dpt[RS / 8][4];
                frag_zero<RS / 8>(dpt);
                mma_abt<DT, DV, RS / 8, LDV>(dpt, v_lane, dob_lane + do_off);
#pragma unroll
                for (int jn = 0; jn < RS / 8; jn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) pt[jn][e] *= dpt[jn][e] - dlt[c0 + frag_col(lane, jn, e)];
                mma_pv<DT, RS / 16, DK / 8, LDK>(dk, pt, qa_lane + q_off);
            }
        }
    }
    cp_async_wait<0>();

    if (splits > 1) {  // fp32 partials, summed by fsa_cmp_bwd_dkv_sum
        float *rows = (float *)p.dkv_partial +
                      ((split * gridDim.x + blockIdx.x) * gridDim.y + h) * (long long)(KT * (DK + DV));
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float *row = rows + (warp * 16 + frag_row(lane, 2 * half)) * (DK + DV);
            if constexpr (WANT_K)
#pragma unroll
                for (int j = 0; j < DK / 8; j++)
                    *(float2 *)(row + frag_col(lane, j, 0)) = make_float2(dk[j][2 * half], dk[j][2 * half + 1]);
            if constexpr (WANT_V)
#pragma unroll
                for (int j = 0; j < DV / 8; j++)
                    *(float2 *)(row + DK + frag_col(lane, j, 0)) = make_float2(dv[j][2 * half], dv[j][2 * half + 1]);
        }
        return;
    }
    const float scale = (float)(p.scale_log2 * FSA_LN2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = warp * 16 + frag_row(lane, 2 * half);
        if (r >= kt.n_tok) continue;
        if constexpr (WANT_K) {
            u16 *row = view_row<u16>(p.dk, kt.tok0 + r, h);
#pragma unroll
            for (int j = 0; j < DK / 8; j++)
                *(u32 *)(row + frag_col(lane, j, 0)) = DT::pack(dk[j][2 * half] * scale, dk[j][2 * half + 1] * scale);
        }
        if constexpr (WANT_V) {
            u16 *row = view_row<u16>(p.dv, kt.tok0 + r, h);
#pragma unroll
            for (int j = 0; j < DV / 8; j++)
                *(u32 *)(row + frag_col(lane, j, 0)) = DT::pack(dv[j][2 * half], dv[j][2 * half + 1]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 2) fsa_cmp_bwd_dkv(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    if constexpr (PARTS == 1) dkv_tile<true, true>(p, smem);
    else if (blockIdx.z % PARTS == 0) dkv_tile<false, true>(p, smem);
    else dkv_tile<true, false>(p, smem);
}

// The partials of a split dK/dV summed in split order, the grid of
// fsa_cmp_bwd_dkv (one split): a CTA owns the 64 keys of its key tile.
extern "C" __global__ void __launch_bounds__(THREADS) fsa_cmp_bwd_dkv_sum(const fsa_cmp_params p) {
    const QueryTile kt = query_tile<KT, false>((const int *)p.cu_seqlens_c, (int)p.batch, p.total_cmp, blockIdx.x);
    if (!kt.ok) return;
    const int h = blockIdx.y;
    const long long split_stride = (long long)gridDim.x * gridDim.y * KT * (DK + DV);
    const float *rows = (const float *)p.dkv_partial + ((long long)blockIdx.x * gridDim.y + h) * KT * (DK + DV);
    const float scale = (float)(p.scale_log2 * FSA_LN2);
    for (int x = threadIdx.x; x < kt.n_tok * ((DK + DV) / 2); x += THREADS) {
        const int r = x / ((DK + DV) / 2), c = 2 * (x - r * ((DK + DV) / 2));
        float2 sum = make_float2(0.f, 0.f);
        for (long long split = 0; split < p.dkv_splits; split++) {
            const float2 v = *(const float2 *)(rows + split * split_stride + r * (DK + DV) + c);
            sum.x += v.x;
            sum.y += v.y;
        }
        if (c < DK) *(u32 *)(view_row<u16>(p.dk, kt.tok0 + r, h) + c) = DT::pack(sum.x * scale, sum.y * scale);
        else *(u32 *)(view_row<u16>(p.dv, kt.tok0 + r, h) + c - DK) = DT::pack(sum.x, sum.y);
    }
}
