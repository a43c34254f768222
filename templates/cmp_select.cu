// Block selection from compressed attention: for each (KV head, query
// token) the score of selection block c is the sum, over the G heads of the
// group and the compressed tokens j overlapping the block, of the normalized
// compressed-attention probability p(t, j) = exp(scale q.k_j - lse); the K
// best causal blocks, with the first `init` blocks and the `local` blocks
// ending at the token's own block forced, go to the top-k rows the selected
// attention reads (ascending, -1 padding).
//
// It reads the forward's lse. Each warp keeps its query rows (two sets of 16
// up to Dk 192) in registers and, per stage of 64 compressed keys, runs S =
// Q K^T on tensor cores; the probabilities are summed over each token's heads
// (in registers for a power-of-two group, else through the warp's shared
// memory) into per-token sums in the warp's own shared memory, so the warps
// meet only at the stage barrier. A token's blocks are shared among S lanes
// (block c to lane c mod S): a lane sums the keys of each of its blocks
// (the last `halo` keys of the previous stage kept) and inserts the blocks
// that beat its K-th score into its own top-k list in registers; at the end
// the token's S lists merge across lanes. Every sum runs in a fixed order:
// the result does not depend on scheduling, and equal scores stay equal, so
// ties go to the lower block.
#include "cmp_common.cuh"
#include "cmp_sel_blocks.cuh"

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
constexpr int MT = fsa_cmp_sel_mt(DK, K);       // sets of 16 rows per warp
constexpr bool Q_IN_REGS = fsa_cmp_sel_q_in_registers(K);  // else read at every stage
constexpr int TW = fsa_qt_tokens_per_warp(G);    // tokens per set
constexpr int TWW = MT * TW, TT = fsa_qt_tokens_per_tile_mt(G, MT);  // tokens per warp, per tile
constexpr int S = fsa_cmp_sel_lanes_per_token(G, DK, K);  // lanes sharing a token's blocks
constexpr int NBL = (NB + S - 1) / S;            // a lane's blocks per stage, at most
constexpr int CH = NBL < 16 ? NBL : 16;          // of them scored and marked at once (NBL: a power of two)
constexpr int KEY0 = fsa_cmp_sel_key0(L, D);     // a token's sums: this stage's first key
constexpr int TOKP = fsa_cmp_sel_tok_pitch(L, D);
constexpr bool HEADS_IN_REGS = fsa_cmp_sel_heads_in_registers(G);
constexpr int HALO_DIV = HALO > 0 ? HALO : 1;    // (loops over TT * HALO run empty for HALO = 0)
typedef GroupRows<G> Rows;
static_assert(BK % D == 0 && KS % R == 0, "the stride divides the block size, and BK / stride divides 64");
static_assert(HALO <= KS && K >= 1 && K <= 64 && NB <= 64 && NBL % CH == 0, "halo, top-k and blocks per stage in range");
static_assert(S * TWW <= 32 && (S & (S - 1)) == 0, "a warp's tokens times their lanes fit the warp");

extern "C" __global__ void __launch_bounds__(FSA_QT_THREADS, 2) fsa_cmp_select(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 ks = smem_addr(smem), qs = ks + fsa_cmp_sel_smem_q(DK);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // The warp's own buffers (over the query rows once those are in registers).
    unsigned char *own = smem + fsa_cmp_sel_smem_warps(DK, K) + warp * fsa_cmp_sel_warp_bytes(G, DK, L, D, K);
    float *ps = (float *)own;                                      // [MT * 16][LDP], G not a power of two
    float *tok = (float *)(own + fsa_cmp_sel_warp_tok(G, DK, K));  // [TWW][TOKP]
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);

    // This lane's rows (slot 2m + half: row lo / hi of set m): keys seen, and
    // lse in base 2 to normalize with.
    int row_vis[2 * MT];
    float row_lse2[2 * MT];
    int lane_vis = 0, lane_min_vis = 0x7fffffff;  // the most, and the fewest any live row sees
#pragma unroll
    for (int slot = 0; slot < 2 * MT; slot++) {
        const int r = frag_row(lane, 2 * (slot & 1)), set = warp * MT + (slot >> 1);
        const bool live = Rows::live(set, r, tile.n_tok);
        const long long t = tile.tok0 + Rows::token(set, r);
        row_vis[slot] = live ? cmp_visible(t - tile.start, L, D, keys.count) : 0;
        const long long at = ((long long)h * G + Rows::head(r)) * p.total_tokens + t;
        row_lse2[slot] = row_vis[slot] > 0 ? ((const float *)p.lse)[at] * LOG2E : 0.f;
        lane_vis = max(lane_vis, row_vis[slot]);
        lane_min_vis = live ? min(lane_min_vis, row_vis[slot]) : lane_min_vis;
    }
    const int warp_vis = __reduce_max_sync(0xffffffffu, lane_vis);
    // Stages every live row sees whole need no mask (rows without a token
    // only feed sums nobody reads).
    const int warp_min_vis = (int)__reduce_min_sync(0xffffffffu, (unsigned)lane_min_vis);
    const long long last_pos = tile.tok0 + tile.n_tok - 1 - tile.start;
    const int tile_vis = cmp_visible(last_pos, L, D, keys.count);
    const int n_stages = (int)((last_pos / BK + 1 + NB - 1) / NB);  // until every causal block is complete
    // This lane's token (token warp * TWW + my_t of the tile), its own block,
    // and its share of the token's blocks (those with c mod S = my_s).
    const int my_t = lane / S, my_s = lane % S;
    const bool my_live = my_t < min(TWW, tile.n_tok - warp * TWW);
    const long long my_block = (tile.tok0 + warp * TWW + my_t - tile.start) / BK;
    const float *my_sums = tok + min(my_t, TWW - 1) * TOKP + KEY0 - HALO;
    LaneTopK<K> top;
    top.clear();

    load_query_rows_async<G, DK, LDK, FSA_QT_THREADS, FSA_QT_ROWS * MT>(qs, p.q, tile, h);
    auto load = [&](int i, int buf) {
        load_cmp_rows_async<KS, DK, LDK>(ks + buf * fsa_tile_bytes(KS, DK), p.k, keys, h, i * KS, tile_vis);
    };
    AsyncRing<FSA_QT_STAGES> ring;
    ring.start(n_stages, load);

    const u32 k_lane = ks + ldm_lane_b(lane, LDK);
    const float scale_log2 = (float)p.scale_log2;
    const u32 q_warp = qs + (u32)(warp * MT * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    u32 qf[MT][DK / 16][4];  // unused (no registers) unless Q_IN_REGS

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        if (i == 0) {
            if constexpr (Q_IN_REGS) {
#pragma unroll
                for (int m = 0; m < MT; m++) frag_load_a<DK>(qf[m], q_warp + (u32)(m * 16 * LDK * 2));
            }
            __syncthreads();  // every warp has its rows: the region may become the warps' buffers
            for (int x = lane; x < TWW * HALO; x += 32)  // the keys before the first one
                tok[x / HALO_DIV * TOKP + KEY0 - HALO + x % HALO_DIV] = 0.f;
        }
        // Probabilities of this warp's rows; 0 for keys a row does not see.
        float s[MT][KS / 8][4];
#pragma unroll
        for (int m = 0; m < MT; m++) frag_zero<KS / 8>(s[m]);
        if (i * KS < warp_vis) {
            if constexpr (Q_IN_REGS)
                mma_abt_rows_a_regs<DT, DK, KS / 8, LDK, MT>(s, qf, k_lane + buf * fsa_tile_bytes(KS, DK));
            else
                mma_abt_rows<DT, DK, KS / 8, LDK, MT>(s, q_warp, 16 * LDK * 2, k_lane + buf * fsa_tile_bytes(KS, DK));
            cmp_probs<KS / 8, MT>(s, i * KS, row_vis, row_lse2, scale_log2, lane, (i + 1) * KS <= warp_min_vis);
        }
        // Per token and key: the sum over the group's rows.
        if constexpr (HEADS_IN_REGS) {
            head_sums_to_tokens<G, KS / 8, MT, TOKP>(tok + KEY0, s, lane);
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
        // This lane's blocks completed here (block c = i * NB + cb collects
        // keys c*R - HALO .. c*R + R - 1), in chunks of CH: forced blocks
        // +inf, blocks past the token's own -inf; the ones that beat the
        // lane's K-th score are marked, then inserted in ascending order
        // (each lane walks only its own marks).
        const int first = (my_s - i * NB) & (S - 1);
        // The token's own block, the forced ones' bounds and the last one a
        // lane scores here, relative to the stage's first block (32 bits).
        const long long base = (long long)i * NB;
        const int own = (int)min(max(my_block - base, -1ll), (long long)NB);
        const int init_end = (int)min(max(p.init_blocks - base, 0ll), (long long)NB);
        const int local0 = (int)min(max(my_block - p.local_blocks - base, -1ll), (long long)NB);
        const int last = my_live ? min(own, NB - 1) : -1;
#pragma unroll
        for (int j0 = 0; j0 < NBL; j0 += CH) {
            float score[CH];
            unsigned todo = 0;
#pragma unroll
            for (int j = 0; j < CH; j++) {
                const int cb = first + (j0 + j) * S;
                float v = -FSA_INF;
                if (cb <= last) {
                    if (cb < init_end || cb > local0) {
                        v = FSA_INF;
                    } else {
                        v = 0.f;
#pragma unroll
                        for (int k = 0; k < R + HALO; k++) v += my_sums[cb * R + k];
                    }
                }
                score[j] = v;
                todo |= (v > top.last() ? 1u : 0u) << j;
            }
            while (todo) {
                const int j = __ffs(todo) - 1;
                todo &= todo - 1;
                float v = score[0];
#pragma unroll
                for (int jj = 1; jj < CH; jj++)
                    if (j == jj) v = score[jj];
                if (v > top.last()) top.insert(v, i * NB + first + (j0 + j) * S);
            }
        }
        __syncwarp();
        // The last HALO keys' sums move before the next stage's keys.
        for (int x = lane; x < TWW * HALO; x += 32) {
            float *row = tok + x / HALO_DIV * TOKP + KEY0 - HALO;
            row[x % HALO_DIV] = row[KS + x % HALO_DIV];
        }
        __syncwarp();
    }

    // The token's S lists into one (every lane of the warp takes part), then
    // its first lane writes the row.
#pragma unroll
    for (int mask = 1; mask < S; mask <<= 1) top.merge_xor(mask);
    if (my_live && my_s == 0)
        top.write_row((int *)p.topk.ptr + (tile.tok0 + warp * TWW + my_t) * p.topk.token_stride +
                      (long long)h * p.topk.head_stride);
}
