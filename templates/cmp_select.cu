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
// own shared memory, so the warps meet only at the stage barrier. The
// stage's completed blocks merge into each token's list in ascending order:
// with many tokens per warp a lane per token, with few the whole warp per
// token that has a candidate (a ballot and a shift across lanes per
// insertion). Every sum runs in a fixed order: the result does not depend on
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

// The running top-k of one token while a warp merges blocks into it: entry e
// (sorted by score, descending; equal scores by block, ascending) is lane e
// of `lo` for e < 32 and lane e - 32 of `hi` otherwise. Between merges it
// rests in the warp's shared memory (column t of [K][TWW]); empty entries
// score -inf with block -1.
struct TopK {
    float v_lo, v_hi;
    int c_lo, c_hi;

    __device__ __forceinline__ void load(const float *topv, const int *topc, int t, int lane) {
        v_lo = lane < K ? topv[lane * TWW + t] : -FSA_INF;
        c_lo = lane < K ? topc[lane * TWW + t] : -1;
        v_hi = lane + 32 < K ? topv[(lane + 32) * TWW + t] : -FSA_INF;
        c_hi = lane + 32 < K ? topc[(lane + 32) * TWW + t] : -1;
    }
    __device__ __forceinline__ void store(float *topv, int *topc, int t, int lane) const {
        if (lane < K) topv[lane * TWW + t] = v_lo, topc[lane * TWW + t] = c_lo;
        if (lane + 32 < K) topv[(lane + 32) * TWW + t] = v_hi, topc[(lane + 32) * TWW + t] = c_hi;
    }
    __device__ __forceinline__ float last(void) const {
        return __shfl_sync(0xffffffffu, K > 32 ? v_hi : v_lo, (K - 1) & 31);
    }

    // Inserts (v, c), which beats the last entry and comes after every
    // entry already there with a score >= v (blocks arrive in ascending order).
    __device__ __forceinline__ void insert(float v, int c, int lane) {
        int pos = __popc(__ballot_sync(0xffffffffu, lane < K && v_lo >= v));
        if constexpr (K > 32) {  // the second half of the list shifts too
            pos += __popc(__ballot_sync(0xffffffffu, lane + 32 < K && v_hi >= v));
            const float lo_last_v = __shfl_sync(0xffffffffu, v_lo, 31);
            const int lo_last_c = __shfl_sync(0xffffffffu, c_lo, 31);
            const float up_hi_v = __shfl_up_sync(0xffffffffu, v_hi, 1);
            const int up_hi_c = __shfl_up_sync(0xffffffffu, c_hi, 1);
            if (lane + 32 == pos) v_hi = v, c_hi = c;
            else if (lane + 32 > pos) v_hi = lane == 0 ? lo_last_v : up_hi_v, c_hi = lane == 0 ? lo_last_c : up_hi_c;
        }
        const float up_lo_v = __shfl_up_sync(0xffffffffu, v_lo, 1);
        const int up_lo_c = __shfl_up_sync(0xffffffffu, c_lo, 1);
        if (lane == pos) v_lo = v, c_lo = c;
        else if (lane > pos) v_lo = up_lo_v, c_lo = up_lo_c;
    }
};

// With many tokens per warp (TWW >= 16) a lane keeps its token's list and
// inserts a block that beats the K-th score by shifting the lower entries
// (the lanes of the warp work on their tokens at once); with few, the warp
// merges token by token (TopK).
constexpr bool LANE_MERGE = TWW >= 16;

// Block c with score v into the list of token t (column t of [K][TWW]),
// which v beats: entries scoring >= v stay ahead, so among equal scores the
// lower block (which arrived first) comes first. Returns the new K-th score.
// Unrolled with constant offsets, so the loads do not wait on each other.
__device__ __forceinline__ float lane_insert(float *topv, int *topc, int t, float v, int c) {
    float *vs = topv + t;
    int *cs = topc + t;
    int pos = 0;
#pragma unroll
    for (int e = 0; e < K; e++) pos += vs[e * TWW] >= v;
#pragma unroll
    for (int e = K - 1; e > 0; e--)
        if (e > pos) {
            vs[e * TWW] = vs[(e - 1) * TWW];
            cs[e * TWW] = cs[(e - 1) * TWW];
        }
    vs[pos * TWW] = v;
    cs[pos * TWW] = c;
    return vs[(K - 1) * TWW];
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
    // The warp's tokens: t is token warp * TWW + t of the tile; its own block.
    const int n_live = min(TWW, tile.n_tok - warp * TWW);
    const long long own0 = tile.tok0 + warp * TWW - tile.start;
    auto own_block = [&](int t) { return (own0 + t) / BK; };
    float lane_kth = -FSA_INF;  // LANE_MERGE: the K-th score of this lane's token

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
            cmp_probs<KS / 8, MT>(s, i * KS, row_vis, row_lse2, scale_log2, lane);
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
        // Block cb of token t as a candidate: its score (forced blocks +inf), or
        // -inf for a block past the token's own.
        auto score = [&](int t, int cb) {
            const long long c = (long long)i * NB + cb, own = own_block(t);
            if (t >= n_live || c > own) return -FSA_INF;
            const bool forced = c < p.init_blocks || c > own - p.local_blocks;
            return forced ? FSA_INF : blk[t * BLKP + cb];
        };
        if constexpr (LANE_MERGE) {
            if (lane < TWW)
                for (int cb = 0; cb < NB; cb++) {
                    const float v = score(lane, cb);
                    if (v > lane_kth) lane_kth = lane_insert(topv, topc, lane, v, i * NB + cb);
                }
        } else {
            // The tokens with a block that beats their K-th score (a lane per
            // token compares its best block); then the warp merges those tokens'
            // blocks one token at a time, in ascending block order (most tokens
            // have none once their lists fill).
            float best = -FSA_INF;
            if (lane < TWW)
                for (int cb = 0; cb < NB; cb++) best = fmaxf(best, score(lane, cb));
            const float kth = topv[(K - 1) * TWW + min(lane, TWW - 1)];
            unsigned todo_tokens = __ballot_sync(0xffffffffu, lane < TWW && best > kth);
            while (todo_tokens) {
                const int t = __ffs(todo_tokens) - 1;
                todo_tokens &= todo_tokens - 1;
                TopK top;
                top.load(topv, topc, t, lane);
#pragma unroll
                for (int base = 0; base < NB; base += 32) {
                    const int cb = base + lane;
                    const float v = cb < NB ? score(t, cb) : -FSA_INF;
                    const int c = i * NB + cb;
                    unsigned todo = __ballot_sync(0xffffffffu, v > top.last());
                    while (todo) {
                        const int src = __ffs(todo) - 1;
                        top.insert(__shfl_sync(0xffffffffu, v, src), __shfl_sync(0xffffffffu, c, src), lane);
                        const float thr = top.last();
                        todo &= __ballot_sync(0xffffffffu, lane > src && v > thr);
                    }
                }
                top.store(topv, topc, t, lane);
            }
        }
        __syncwarp();
    }

    // The row, ascending by block: an entry's slot is the number of chosen
    // blocks below it; the slots past the chosen ones get -1.
    if (lane < n_live) {
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
