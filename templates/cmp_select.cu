// Block selection from compressed attention: for each (KV head, query
// token) the score of selection block c is the sum, over the G heads of the
// group and the compressed tokens j overlapping the block, of the normalized
// compressed-attention probability p(t, j) = exp(scale q.k_j - lse); the K
// best causal blocks, with the first `init` blocks and the `local` blocks
// ending at the token's own block forced, go to the top-k rows the selected
// attention reads (ascending, -1 padding).
//
// It reads the forward's lse. Each warp keeps its query rows (two sets of 16
// up to Dk 128) in registers and, per stage of 64 compressed keys, runs S = Q K^T
// on tensor cores; the probabilities, the per-token sums over the group's
// heads, the per-block sums over each block's keys (the last `halo` keys of
// the previous stage kept) and each token's running top-k live in the warp's
// own shared memory, so the warps meet only at the stage barrier. A lane owns
// a token's top-k list and merges the stage's completed blocks in ascending
// order. Every sum runs in a fixed order: the result does not depend on
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
constexpr int MT = fsa_cmp_sel_mt(DK);          // sets of 16 rows per warp
constexpr int TW = fsa_qt_tokens_per_warp(G);    // tokens per set
constexpr int TWW = MT * TW, TT = fsa_qt_tokens_per_tile_mt(G, MT);  // tokens per warp, per tile
constexpr int KEY0 = fsa_cmp_sel_key0(L, D);     // a token's sums: this stage's first key
constexpr int TOKP = fsa_cmp_sel_tok_pitch(L, D), BLKP = fsa_cmp_sel_blk_pitch(BK, D);
constexpr int HALO_DIV = HALO > 0 ? HALO : 1;    // (loops over TT * HALO run empty for HALO = 0)
typedef GroupRows<G> Rows;
static_assert(BK % D == 0 && KS % R == 0, "the stride divides the block size, and BK / stride divides 64");
static_assert(HALO <= KS && K >= 1 && K <= 64 && NB <= 64, "halo, top-k and blocks per stage in range");

// Block c with score v into the top-k list of the warp's token t (column t
// of [K][TWW], sorted by score, descending), which v beats: entries scoring
// >= v stay ahead, so among equal scores the lower block (which arrived
// first) comes first. Returns the new K-th score.
__device__ __forceinline__ float topk_insert(float *topv, int *topc, int t, float v, int c) {
    int e = K - 1;
    for (; e > 0 && topv[(e - 1) * TWW + t] < v; e--) {
        topv[e * TWW + t] = topv[(e - 1) * TWW + t];
        topc[e * TWW + t] = topc[(e - 1) * TWW + t];
    }
    topv[e * TWW + t] = v;
    topc[e * TWW + t] = c;
    return topv[(K - 1) * TWW + t];
}

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_cmp_select(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 ks = smem_addr(smem), qs = ks + fsa_cmp_sel_smem_q(DK);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // The warp's own buffers, over the query rows once those are in registers.
    unsigned char *own = smem + fsa_cmp_sel_smem_q(DK) + warp * fsa_cmp_sel_warp_bytes(G, DK, L, D, BK, K);
    float *ps = (float *)own;                                              // [MT * 16][LDP], G > 1
    float *tok = (float *)(own + fsa_cmp_sel_warp_tok(G, DK));             // [TWW][TOKP]
    float *blk = (float *)(own + fsa_cmp_sel_warp_blk(G, DK, L, D));       // [TWW][BLKP]
    float *topv = (float *)(own + fsa_cmp_sel_warp_topv(G, DK, L, D, BK)); // [K][TWW]
    int *topc = (int *)(own + fsa_cmp_sel_warp_topc(G, DK, L, D, BK, K));  // [K][TWW]
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);

    // This lane's rows (slot 2m + half: row lo / hi of set m): keys seen, and
    // lse in base 2 to normalize with.
    int row_vis[2 * MT];
    float row_lse2[2 * MT];
    int lane_vis = 0;
#pragma unroll
    for (int slot = 0; slot < 2 * MT; slot++) {
        const int r = frag_row(lane, 2 * (slot & 1)), set = warp * MT + (slot >> 1);
        const bool live = Rows::live(set, r, tile.n_tok);
        const long long t = tile.tok0 + Rows::token(set, r);
        row_vis[slot] = live ? cmp_visible(t - tile.start, L, D, keys.count) : 0;
        const long long at = ((long long)h * G + Rows::head(r)) * p.total_tokens + t;
        row_lse2[slot] = row_vis[slot] > 0 ? ((const float *)p.lse)[at] * LOG2E : 0.f;
        lane_vis = max(lane_vis, row_vis[slot]);
    }
    const int warp_vis = __reduce_max_sync(0xffffffffu, lane_vis);
    const long long last_pos = tile.tok0 + tile.n_tok - 1 - tile.start;
    const int tile_vis = cmp_visible(last_pos, L, D, keys.count);
    const int n_stages = (int)((last_pos / BK + 1 + NB - 1) / NB);  // until every causal block is complete
    // The token whose top-k this lane keeps (lanes below TWW), and its own block.
    const bool my_live = lane < TWW && warp * TWW + lane < tile.n_tok;
    const long long my_own = (tile.tok0 + warp * TWW + lane - tile.start) / BK;
    float my_kth = -FSA_INF;  // the K-th score so far

    load_query_rows_async<G, DK, LDK, FSA_QT_THREADS, FSA_QT_ROWS * MT>(qs, p.q, tile, h);
    auto load = [&](int i, int buf) {
        load_cmp_rows_async<KS, DK, LDK>(ks + buf * fsa_tile_bytes(KS, DK), p.k, keys, h, i * KS, tile_vis);
    };
    AsyncRing<FSA_QT_STAGES> ring;
    ring.start(n_stages, load);

    const u32 k_lane = ks + ldm_lane_b(lane, LDK);
    const float scale_log2 = (float)p.scale_log2;
    u32 qf[MT][DK / 16][4];

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        if (i == 0) {
#pragma unroll
            for (int m = 0; m < MT; m++)
                frag_load_a<DK>(qf[m], qs + (u32)((warp * MT + m) * 16 * LDK * 2) + ldm_lane_a(lane, LDK));
            __syncthreads();  // every warp has its rows: the region becomes the warps' buffers
            for (int x = lane; x < K * TWW; x += 32) topv[x] = -FSA_INF, topc[x] = -1;
            for (int x = lane; x < TWW * HALO; x += 32)  // the keys before the first one
                tok[x / HALO_DIV * TOKP + KEY0 - HALO + x % HALO_DIV] = 0.f;
        }
        // Probabilities of this warp's rows; 0 for keys a row does not see.
        float s[MT][KS / 8][4];
#pragma unroll
        for (int m = 0; m < MT; m++) frag_zero<KS / 8>(s[m]);
        if (i * KS < warp_vis) {
            mma_abt_rows_a_regs<DT, DK, KS / 8, LDK, MT>(s, qf, k_lane + buf * fsa_tile_bytes(KS, DK));
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int jn = 0; jn < KS / 8; jn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int slot = 2 * m + (e >> 1);
                        s[m][jn][e] = i * KS + frag_col(lane, jn, e) < row_vis[slot]
                                          ? fast_exp2(fmaf(s[m][jn][e], scale_log2, -row_lse2[slot]))
                                          : 0.f;
                    }
        }
        // Per token and key: the sum over the group's rows, heads in order.
        if constexpr (G == 1) {
#pragma unroll
            for (int m = 0; m < MT; m++) frag_store_f32<KS / 8, TOKP>(tok + m * 16 * TOKP + KEY0, s[m], lane);
        } else {
#pragma unroll
            for (int m = 0; m < MT; m++) frag_store_f32<KS / 8, LDP>(ps + m * 16 * LDP, s[m], lane);
            __syncwarp();
            for (int x = lane; x < TWW * KS; x += 32) {
                const int t = x / KS, col = x - t * KS;
                const float *rows = ps + ((t / TW) * 16 + (t % TW) * G) * LDP + col;
                float sum = 0.f;
#pragma unroll
                for (int g = 0; g < G; g++) sum += rows[g * LDP];
                tok[t * TOKP + KEY0 + col] = sum;
            }
        }
        __syncwarp();
        // Per token and block completed here: keys c*R - HALO .. c*R + R - 1.
        for (int x = lane; x < TWW * NB; x += 32) {
            const int t = x / NB, cb = x - t * NB;
            const float *at = tok + t * TOKP + KEY0 - HALO + cb * R;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < R + HALO; j++) sum += at[j];
            blk[t * BLKP + cb] = sum;
        }
        __syncwarp();
        // The last HALO keys' sums move before the next stage's keys.
        for (int x = lane; x < TWW * HALO; x += 32) {
            float *row = tok + x / HALO_DIV * TOKP + KEY0 - HALO;
            row[x % HALO_DIV] = row[KS + x % HALO_DIV];
        }
        // Each lane merges its token's blocks (forced ones score +inf), in ascending order.
        if (my_live)
            for (int cb = 0; cb < NB; cb++) {
                const long long c = (long long)i * NB + cb;
                if (c > my_own) break;
                const bool forced = c < p.init_blocks || c > my_own - p.local_blocks;
                const float v = forced ? FSA_INF : blk[lane * BLKP + cb];
                if (v > my_kth) my_kth = topk_insert(topv, topc, lane, v, (int)c);
            }
        __syncwarp();
    }

    // The row, ascending by block: an entry's slot is the number of chosen
    // blocks below it; the slots past the chosen ones get -1.
    if (my_live) {
        int *row = (int *)p.topk.ptr + (tile.tok0 + warp * TWW + lane) * p.topk.token_stride +
                   (long long)h * p.topk.head_stride;
        int n = 0;
        for (int e = 0; e < K; e++) {
            const int c = topc[e * TWW + lane];
            if (c < 0) continue;
            int rank = 0;
            for (int f = 0; f < K; f++) {
                const int o = topc[f * TWW + lane];
                rank += o >= 0 && o < c;
            }
            row[rank] = c;
            n++;
        }
        for (int e = n; e < K; e++) row[e] = -1;
    }
}
