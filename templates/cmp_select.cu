// Block selection from compressed attention: for each (KV head, query
// token) the score of selection block c is the sum, over the G heads of the
// group and the compressed tokens j overlapping the block, of the normalized
// compressed-attention probability p(t, j) = exp(scale q.k_j - lse); the K
// best causal blocks, with the first `init` blocks and the `local` blocks
// ending at the token's own block forced, go to the top-k rows the selected
// attention reads (ascending, -1 padding).
//
// The tiles are those of the forward, whose lse it reads. Per stage of 64
// compressed keys: S = Q K^T on tensor cores, probabilities into shared
// memory, per-token sums over the group's rows, per-block sums over each
// block's keys (the last `halo` keys of the previous stage kept), then a warp
// per token merges the stage's completed blocks into the token's running
// top-k. Every sum runs in a fixed order: the result does not depend on
// scheduling, and equal scores stay equal, so ties go to the lower block.
#include "cmp_common.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
#define TOP_K {{TOP_K}}
#define KERNEL_SIZE {{KERNEL_SIZE}}
#define STRIDE {{STRIDE}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int DK = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE, K = TOP_K, L = KERNEL_SIZE, D = STRIDE;
constexpr int KS = FSA_CMP_SEL_KEYS, LDK = fsa_pitch(DK), LDP = FSA_CMP_SEL_P_PITCH;
constexpr int R = BK / D;                        // compressed-token starts per block
constexpr int HALO = fsa_cmp_sel_halo(L, D);     // earlier keys that still overlap a block
constexpr int NB = fsa_cmp_sel_blocks_per_stage(BK, D);  // blocks completed per stage
constexpr int TT = fsa_qt_tokens_per_tile(G), TW = fsa_qt_tokens_per_warp(G);
constexpr int TOKP = HALO + KS;                  // pitch of the per-token sums
constexpr int HALO_DIV = HALO > 0 ? HALO : 1;    // (loops over TT * HALO run empty for HALO = 0)
typedef GroupRows<G> Rows;
static_assert(BK % D == 0 && KS % R == 0, "the stride divides the block size, and BK / stride divides 64");
static_assert(HALO <= KS && K >= 1 && K <= 64 && NB <= 64, "halo, top-k and blocks per stage in range");

// The running top-k of one token, held by a warp: entry e (sorted by score,
// descending; equal scores by block, ascending) is lane e of `lo` for e < 32
// and lane e - 32 of `hi` otherwise. Empty entries score -inf with block -1.
struct TopK {
    float v_lo, v_hi;
    int c_lo, c_hi;

    __device__ __forceinline__ float last(void) const {
        return __shfl_sync(0xffffffffu, K > 32 ? v_hi : v_lo, (K - 1) & 31);
    }

    // Inserts (v, c), which beats the last entry and comes after every
    // entry already there with a score >= v (blocks arrive in ascending order).
    __device__ __forceinline__ void insert(float v, int c, int lane) {
        const int pos = __popc(__ballot_sync(0xffffffffu, lane < K && v_lo >= v)) +
                        __popc(__ballot_sync(0xffffffffu, lane + 32 < K && v_hi >= v));
        const float lo_last_v = __shfl_sync(0xffffffffu, v_lo, 31);
        const int lo_last_c = __shfl_sync(0xffffffffu, c_lo, 31);
        const float up_lo_v = __shfl_up_sync(0xffffffffu, v_lo, 1), up_hi_v = __shfl_up_sync(0xffffffffu, v_hi, 1);
        const int up_lo_c = __shfl_up_sync(0xffffffffu, c_lo, 1), up_hi_c = __shfl_up_sync(0xffffffffu, c_hi, 1);
        if (lane == pos) v_lo = v, c_lo = c;
        else if (lane > pos) v_lo = up_lo_v, c_lo = up_lo_c;
        if (lane + 32 == pos) v_hi = v, c_hi = c;
        else if (lane + 32 > pos) v_hi = lane == 0 ? lo_last_v : up_hi_v, c_hi = lane == 0 ? lo_last_c : up_hi_c;
    }
};

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_cmp_select(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 qs = smem_addr(smem), ks = qs + fsa_cmp_sel_smem_k(DK);
    float *ps = (float *)(smem + fsa_cmp_sel_smem_p(DK));                  // [64 rows][LDP]
    float *tok = (float *)(smem + fsa_cmp_sel_smem_tok(DK));               // [TT][TOKP]
    float *blk = (float *)(smem + fsa_cmp_sel_smem_blk(DK, G, L, D));      // [TT][NB]
    float *topv = (float *)(smem + fsa_cmp_sel_smem_topv(DK, G, L, D, BK));     // [TT][K]
    int *topc = (int *)(smem + fsa_cmp_sel_smem_topi(DK, G, L, D, BK, K));      // [TT][K]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);

    // This lane's two rows: keys seen, and lse in base 2 to normalize with.
    int row_vis[2];
    float row_lse2[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        const bool live = Rows::live(warp, r, tile.n_tok);
        const long long t = tile.tok0 + Rows::token(warp, r);
        row_vis[half] = live ? cmp_visible(t - tile.start, L, D, keys.count) : 0;
        const long long at = ((long long)h * G + Rows::head(r)) * p.total_tokens + t;
        row_lse2[half] = row_vis[half] > 0 ? ((const float *)p.lse)[at] * LOG2E : 0.f;
    }
    const int warp_vis = __reduce_max_sync(0xffffffffu, max(row_vis[0], row_vis[1]));
    const long long last_pos = tile.tok0 + tile.n_tok - 1 - tile.start;
    const int tile_vis = cmp_visible(last_pos, L, D, keys.count);
    const int n_stages = (int)((last_pos / BK + 1 + NB - 1) / NB);  // until every causal block is complete

    load_query_rows_async<G, DK, LDK, FSA_QT_THREADS>(qs, p.q, tile, h);
    auto load = [&](int i, int buf) {
        load_cmp_rows_async<KS, DK, LDK>(ks + buf * fsa_tile_bytes(KS, DK), p.k, keys, h, i * KS, tile_vis);
    };
    AsyncRing<FSA_QT_STAGES> ring;
    ring.start(n_stages, load);
    for (int i = tid; i < TT * K; i += FSA_QT_THREADS) topv[i] = -FSA_INF, topc[i] = -1;
    for (int i = tid; i < TT * HALO; i += FSA_QT_THREADS)
        tok[i / HALO_DIV * TOKP + i % HALO_DIV] = 0.f;  // the keys before the first one

    const u32 q_lane = qs + (u32)(warp * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 k_lane = ks + ldm_lane_b(lane, LDK);
    const float scale_log2 = (float)p.scale_log2;

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        // Probabilities of this warp's rows; 0 for keys a row does not see.
        float s[KS / 8][4];
        frag_zero<KS / 8>(s);
        if (i * KS < warp_vis) {
            mma_abt<DT, DK, KS / 8, LDK>(s, q_lane, k_lane + buf * fsa_tile_bytes(KS, DK));
#pragma unroll
            for (int jn = 0; jn < KS / 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[jn][e] = i * KS + frag_col(lane, jn, e) < row_vis[e >> 1]
                                   ? fast_exp2(fmaf(s[jn][e], scale_log2, -row_lse2[e >> 1]))
                                   : 0.f;
        }
        frag_store_f32<KS / 8, LDP>(ps + warp * 16 * LDP, s, lane);
        __syncthreads();
        // Per token and key: the sum over the group's rows, heads in order.
        for (int x = tid; x < TT * KS; x += FSA_QT_THREADS) {
            const int t = x / KS, col = x - t * KS;
            const float *rows = ps + ((t / TW) * 16 + (t % TW) * G) * LDP + col;
            float sum = 0.f;
#pragma unroll
            for (int g = 0; g < G; g++) sum += rows[g * LDP];
            tok[t * TOKP + HALO + col] = sum;
        }
        __syncthreads();
        // Per token and block completed here: keys c*R - HALO .. c*R + R - 1,
        // which sit at c*R - i*KS .. + R + HALO - 1 of the token's sums.
        for (int x = tid; x < TT * NB; x += FSA_QT_THREADS) {
            const int t = x / NB, cb = x - t * NB;
            const float *at = tok + t * TOKP + cb * R;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < R + HALO; j++) sum += at[j];
            blk[x] = sum;
        }
        __syncthreads();
        // The last HALO keys' sums move to the front for the next stage's blocks.
        for (int x = tid; x < TT * HALO; x += FSA_QT_THREADS)
            tok[x / HALO_DIV * TOKP + x % HALO_DIV] = tok[x / HALO_DIV * TOKP + KS + x % HALO_DIV];
        // A warp per token merges the stage's blocks (forced ones score +inf).
        for (int t = warp; t < tile.n_tok; t += FSA_QT_WARPS) {
            const long long own = (tile.tok0 + t - tile.start) / BK;
            TopK top;
            top.v_lo = lane < K ? topv[t * K + lane] : -FSA_INF;
            top.c_lo = lane < K ? topc[t * K + lane] : -1;
            top.v_hi = lane + 32 < K ? topv[t * K + lane + 32] : -FSA_INF;
            top.c_hi = lane + 32 < K ? topc[t * K + lane + 32] : -1;
#pragma unroll
            for (int base = 0; base < NB; base += 32) {
                const long long c = (long long)i * NB + base + lane;
                const bool cand = base + lane < NB && c <= own;
                const bool forced = c < p.init_blocks || c > own - p.local_blocks;
                const float v = !cand ? -FSA_INF : forced ? FSA_INF : blk[t * NB + min(base + lane, NB - 1)];
                const float thr0 = top.last();  // every lane shuffles before the ballot
                unsigned todo = __ballot_sync(0xffffffffu, cand && v > thr0);
                while (todo) {
                    const int src = __ffs(todo) - 1;
                    top.insert(__shfl_sync(0xffffffffu, v, src), (int)__shfl_sync(0xffffffffu, (int)c, src), lane);
                    const float thr = top.last();
                    todo &= __ballot_sync(0xffffffffu, lane > src && cand && v > thr);
                }
            }
            if (lane < K) topv[t * K + lane] = top.v_lo, topc[t * K + lane] = top.c_lo;
            if (lane + 32 < K) topv[t * K + lane + 32] = top.v_hi, topc[t * K + lane + 32] = top.c_hi;
        }
    }

    __syncwarp();  // each warp reads back the lists it wrote
    // The rows, ascending by block: an entry's slot is the number of chosen
    // blocks below it; the slots past the chosen ones get -1.
    for (int t = warp; t < tile.n_tok; t += FSA_QT_WARPS) {
        const int c_lo = lane < K ? topc[t * K + lane] : -1, c_hi = lane + 32 < K ? topc[t * K + lane + 32] : -1;
        int rank_lo = 0, rank_hi = 0, n = 0;
        for (int e = 0; e < K; e++) {
            const int c = topc[t * K + e];
            n += c >= 0;
            rank_lo += c >= 0 && c < c_lo;
            rank_hi += c >= 0 && c < c_hi;
        }
        int *row = (int *)p.topk.ptr + (tile.tok0 + t) * p.topk.token_stride + (long long)h * p.topk.head_stride;
        if (c_lo >= 0) row[rank_lo] = c_lo;
        if (c_hi >= 0) row[rank_hi] = c_hi;
        for (int e = n + lane; e < K; e += 32) row[e] = -1;
    }
}
