// Block selection from compressed attention: for each (KV head, query
// token) the score of selection block c is the sum, over the G heads of the
// group and the compressed tokens j overlapping the block, of the normalized
// compressed-attention probability p(t, j) = exp(scale q.k_j - lse); the K
// best causal blocks, with the first `init` blocks and the `local` blocks
// ending at the token's own block forced, go to the top-k rows the selected
// attention reads (ascending, -1 padding).
//
// It reads the forward's lse. Per stage of 64 compressed keys the rows'
// scores S = Q K^T come from tensor cores: on sm_90a (WG warpgroups) by
// warpgroup products that read Q and the K stage from swizzled shared
// memory, the warpgroups sharing each K stage; otherwise by
// mma.sync with each warp's query rows (two sets of 16 up to Dk 128) in
// registers. The probabilities exp2(S scale - lse) are summed over each
// block's keys and each token's heads by two more products on tensor cores
// (BlockScores, cmp_sel_blocks.cuh) into the block scores of the warp's
// tokens, in the warp's own shared memory, so the warps meet only at the
// stage barrier. A token's blocks are shared among S lanes (block c to lane
// c mod S): a lane reads its blocks' scores and inserts those that beat its
// K-th score into its own top-k list in registers; at the end the token's S
// lists merge across lanes. Every sum runs in a fixed order: the result does
// not depend on scheduling, and equal scores stay equal, so ties go to the
// lower block.
// With FSA_CMP_SEL_WS (the default where the ring is on mbarriers) the
// CTA's last warpgroup is a producer that alone copies the K stages into a
// ProducerRing and gives its registers to the others, which only compute.
#include "cmp_common.cuh"
#include "cmp_sel_blocks.cuh"
#include "cmp_sel_spread.cuh"
#include "fsa_mbarrier.cuh"
#include "fsa_wgmma.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
#define TOP_K {{TOP_K}}
#define KERNEL_SIZE {{KERNEL_SIZE}}
#define STRIDE {{STRIDE}}
#define SEL_VARIANT {{SEL_VARIANT}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int DK = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE, K = TOP_K, L = KERNEL_SIZE, D = STRIDE;
// Warpgroups (sm_90a products; four with FSA_CMP_SEL_FOUR at G >= 4 or FSA_CMP_SEL_FOUR_SMALL_G at G <= 2), 0: mma.sync.
constexpr int WG = fsa_cmp_sel_groups({{WGMMA}}, DK, K, G, SEL_VARIANT);
constexpr bool MBAR = WG && fsa_cmp_sel_mbar({{WGMMA}}, DK);  // the warpgroups' K ring on mbarriers
constexpr int VARIANT = MBAR ? SEL_VARIANT : 0;  // (cmp_params.cuh: FSA_CMP_SEL_*)
constexpr int WG_STAGES = fsa_cmp_sel_wg_stages(DK);
// THREADS compute (WARPS warps over the tile's rows); with WS a producer warpgroup after them copies the K stages.
constexpr bool WS = fsa_cmp_sel_producer(WG, VARIANT) != 0;
constexpr int THREADS = fsa_cmp_sel_threads(WG), WARPS = fsa_cmp_sel_warps(WG);
constexpr int LAUNCH_THREADS = fsa_cmp_sel_launch_threads(WG, VARIANT);
constexpr int KS = FSA_CMP_SEL_KEYS, LDK = fsa_pitch(DK);
constexpr int R = BK / D;                        // compressed-token starts per block
constexpr int HALO = fsa_cmp_sel_halo(L, D);     // earlier keys that still overlap a block
constexpr int NB = fsa_cmp_sel_blocks_per_stage(BK, D);  // blocks completed per stage
constexpr int MT = fsa_cmp_sel_mt(G, DK, K, WG);    // sets of 16 rows per warp
constexpr bool Q_IN_REGS = !WG && fsa_cmp_sel_q_in_registers(K);  // mma.sync: else read at every stage
constexpr int TW = fsa_qt_tokens_per_warp(G);    // tokens per set
constexpr int TWW = MT * TW, TT = fsa_cmp_sel_tokens_per_tile(G, DK, K, WG);  // tokens per warp, per tile
constexpr int S = fsa_cmp_sel_lanes_per_token(G, DK, K, WG);  // lanes sharing a token's blocks
constexpr int SP = fsa_cmp_sel_score_pitch(BK, D);
constexpr int NBL = (NB + S - 1) / S;            // a lane's blocks per stage, at most
constexpr int CH = NBL < 16 ? NBL : 16;          // of them scored and marked at once (NBL: a power of two)
constexpr int K_STAGE = WG ? fsa_sw128_bytes(KS, DK) : fsa_tile_bytes(KS, DK);
typedef GroupRows<G> Rows;
// Where a lane's blocks need no bounds in the stages between the forced ones
// (update_lists), and whether the token's top-k is spread over its lanes
// (update_spread): both explained where they are used.
constexpr bool FAST = NB % S == 0 && (NBL >= 4 || WG != 0);
constexpr bool SPREAD = (VARIANT & FSA_CMP_SEL_SPREAD) && S >= 8 && NB == K && K % S == 0 &&
                        ((K / S) & (K / S - 1)) == 0 && FAST;
// With the producer, where each lane keeps a whole list (G 1 and 2 at the
// usual shape: 112 registers, which the lists and the next stage's scores in
// flight exceed) and a stage completes up to 16 blocks, the scorer's constant
// fragments come from a table in shared memory (after the mbarriers) instead
// of registers.
constexpr bool TABLE = WS && !SPREAD && NB <= 16;
static_assert(!TABLE || BlockScores<G, R, HALO, NB, MT, KS, true>::SLOTS * 512 <= fsa_cmp_sel_table_bytes(BK, D, WG, VARIANT),
              "the overlap table fits its region");
static_assert(BK % D == 0 && KS % R == 0, "the stride divides the block size, and BK / stride divides 64");
static_assert(HALO <= KS && K >= 1 && K <= 64 && NB <= 64 && NBL % CH == 0, "halo, top-k and blocks per stage in range");
static_assert(S * TWW <= 32 && (S & (S - 1)) == 0, "a warp's tokens times their lanes fit the warp");

extern "C" __global__ void __launch_bounds__(LAUNCH_THREADS, WG ? 1 : 2) fsa_cmp_select(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    // wgmma: the query tile at a 1024-byte boundary, then the K stages; mma.sync: the K stages, then the query rows.
    const u32 base = WG ? (smem_addr(smem) + (FSA_QT_WG_ALIGN - 1)) & ~(u32)(FSA_QT_WG_ALIGN - 1) : smem_addr(smem);
    unsigned char *const base_ptr = smem + (base - smem_addr(smem));
    const u32 ks = base + fsa_cmp_sel_smem_k(DK, WG), qs = base + fsa_cmp_sel_smem_q(DK, WG);
    // (The warp index through a shuffle: the compiler then knows it is the
    // same on every lane and keeps what derives from it, such as the products'
    // shared-memory descriptors, in uniform registers.)
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    // The warp's block scores (over the query rows once those are in registers).
    float *sc = (float *)(base_ptr + fsa_cmp_sel_smem_warps(DK, K, WG) + warp * fsa_cmp_sel_warp_bytes(G, DK, K, BK, D, WG));
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);
    const long long last_pos = tile.tok0 + tile.n_tok - 1 - tile.start;
    const int tile_vis = cmp_visible(last_pos, L, D, keys.count);
    const int n_stages = (int)((last_pos / BK + 1 + NB - 1) / NB);  // until every causal block is complete
    const u32 bars = base + fsa_cmp_sel_smem_bars(DK, G, K, BK, D, WG);
    // FSA_CMP_SEL_WS: the producer warpgroup (the CTA's last) copies every K
    // stage into the ring (the first `tile_vis` keys, zeros after them, as
    // RowStream below) and leaves; the consumers wait for a stage on its
    // `full` mbarrier and release it on its `empty` one.
    ProducerRing<3> pring;
    if constexpr (WS) {
        pring.init(bars, 128, THREADS);
        if (TABLE && warp == 0) BlockScores<G, R, HALO, NB, MT, KS, true>::write_table(bars + FSA_CMP_SEL_WG_BARS, lane);
        __syncthreads();  // the mbarriers are initialized (and the table written)
        if (warp >= WARPS) {
            wg_regs_dec<FSA_CMP_SEL_WS_PRODUCER_REGS>();
            const StridedKeys sk = cmp_strided_keys(p, keys, h, tile_vis);
            StridedStage<KS, DK, 128> k_stage;
            k_stage.init(tid - THREADS);
            pring.produce(
                n_stages, [&](int j, int buf) { k_stage.load(ks + buf * K_STAGE, sk.k, sk.k_stride, j * KS, sk.limit); },
                [] { wg_fence_async_smem(); });
            return;
        }
        wg_regs_inc<fsa_cmp_sel_ws_consumer_regs(WS ? WG : 3)>();  // (a constant in every instance)
    }

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
    // This lane's token (token warp * TWW + my_t of the tile), its own block,
    // and its share of the token's blocks (those with c mod S = my_s).
    const int my_t = lane / S, my_s = lane % S;
    const bool my_live = my_t < min(TWW, tile.n_tok - warp * TWW);
    // This token's own block (-1 without a token), the end of the initial
    // blocks and the first local one, in blocks (32 bits: a sequence has
    // fewer than 2^31 tokens; the counts are clamped so nothing overflows).
    const int my_block = my_live ? (int)((tile.tok0 + warp * TWW + my_t - tile.start) / BK) : -1;
    const int init_end = (int)opaque((u32)min(max(p.init_blocks, 0ll), 1ll << 30));  // (computed once: see opaque)
    const int local0 = (int)opaque((u32)(my_block - (int)min(max(p.local_blocks, 0ll), 1ll << 30)));
    const float *my_scores = sc + min(my_t, TWW - 1) * SP;
    LaneTopK<K> top;
    top.clear();
    // A lower bound of the token's K-th best score so far, over all its
    // lanes' lists: a block at or below it is not among the token's best
    // (equal scores go to the lower blocks, which came first), so no lane
    // inserts it.
    float bound = -FSA_INF;
    typedef BlockScores<G, R, HALO, NB, MT, KS, TABLE> Scorer;
    Scorer scorer;
    scorer.init(lane, bars + FSA_CMP_SEL_WG_BARS);

    // (WS: each consumer warpgroup copies its own 64 query rows and waits for
    // them alone, with named barrier 1 + its number, before its first products.)
    if constexpr (WS) {
        load_query_part_sw128_async<G, DK, 128, 64 * WG, 64>(qs, p.q, tile, h, 64 * (warp >> 2), tid & 127);
        cp_async_commit();
    } else {
        load_query_rows_async<G, DK, LDK, THREADS, 16 * WARPS * MT, WG != 0>(qs, p.q, tile, h);
    }
    // The sequence's compressed keys of head h; with warpgroups each thread's
    // pieces of a stage are worked out once (a few per thread: 384 threads).
    RowStream<KS, DK, THREADS, true> k_rows;
    if constexpr (WG != 0 && !WS) k_rows.init(view_row<const u16>(p.k, keys.start, h), p.k.token_stride, (const u16 *)p.k.ptr);
    auto load = [&](int i, int buf) {
        if constexpr (WG != 0) k_rows.load(ks + buf * K_STAGE, i * KS, tile_vis);
        else load_cmp_rows_async<KS, DK, LDK>(ks + buf * K_STAGE, p.k, keys, h, i * KS, tile_vis);
    };

    const u32 k_lane = ks + ldm_lane_b(lane, LDK);
    const float scale_log2 = (float)p.scale_log2;
    const u32 q_warp = qs + (u32)(warp * MT * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 q_group = qs + (u32)(warp >> 2) * 64 * 128;  // wgmma: this warpgroup's 64 rows of every Q panel
    u32 qf[MT][DK / 16][4];  // unused (no registers) unless Q_IN_REGS

    // Stage i's probabilities b (packed: 0 for keys a row does not see) into
    // the block scores of the warp's tokens, and those into the lanes' lists.
    auto sum_blocks = [&](const typename Scorer::Packed (&b)[MT]) {
        // Per token and block completed here: the sum over its keys and heads.
#pragma unroll
        for (int m = 0; m < MT; m++) scorer.template run<SP>(m, b[m], sc + m * TW * SP, lane);
        __syncwarp();
    };
    // Stages [fast_lo, fast_hi) hold, for every token of the warp, no forced
    // block and none past its own: there a lane's blocks need no bounds (NB
    // a multiple of S: a lane scores NBL blocks of every stage; lanes without
    // a token, such as the second half of the warp at G 16, then score the
    // last token's blocks into lists nobody writes; with mma.sync only where a lane
    // has 4 or more, G 1 and 2 at the usual shape: elsewhere it saves little
    // and costs registers that the kernel at G 8 does not have). A lane's
    // forced local blocks that are not initial ones: my_block - loc0 + 1
    // from loc0 on; at least S of them after stage i while (i + 1) NB <=
    // few_until (used up to S = 4: more lanes per token than the usual two
    // local blocks gain nothing from it).
    constexpr bool FEW = S > 1 && S <= 4 && (K + S - 1) / S >= 2;  // (FAST: at the top)
    // A token's candidates shared among its lanes for the insertions (below),
    // in the default kernel (with the producer) where two lanes share a token
    // (G 1 at the usual shape). With four (G 2) the rounds' extra work and the
    // re-read score's load in each candidate's chain measured slower than the
    // lanes' own rounds (bench/NOTES.md, "cspill").
    constexpr bool SHARE = WS && S == 2 && S * CH <= 32;
    constexpr unsigned ALL = 0xffffffffu;
    const int fast_lo = __reduce_max_sync(ALL, (init_end + NB - 1) / NB);
    const int fast_hi = __reduce_min_sync(ALL, !my_live ? 0x7fffffff : local0 + 1 > 0 ? (local0 + 1) / NB : 0);
    const int loc0 = max(local0 + 1, init_end);
    const int few_until = loc0 <= my_block - S + 1 ? my_block - S + 1 : -1;
    auto update_lists = [&](int i) {
        // This lane's blocks completed here (block c = i * NB + cb), in
        // chunks of CH: forced blocks +inf, blocks past the token's own -inf;
        // the ones that beat the lane's K-th score are marked, then inserted
        // in ascending order (each lane walks only its own marks, or with
        // SHARE the token's lanes take turns over all of them), or, where
        // some lane of the warp has so many that a merge is cheaper (the
        // first stage, where the lists fill), sorted and merged.
        const int first = (my_s - i * NB) & (S - 1);
        // The token's own block and the forced ones' bounds relative to the
        // stage's first block.
        const int own = my_block - i * NB, init_rel = init_end - i * NB, local_rel = local0 - i * NB;
        const int last = min(own, NB - 1);  // the last block a lane scores here
        const bool fast = FAST && i >= fast_lo && i < fast_hi;  // (the same on every lane)
        // Chunk j0's scores, and which beat the lane's K-th (interior: no
        // bounds to check): bit j for block first + (j0 + j) S, or with
        // SHARE bit first + j S, the block's place among the token's blocks
        // of the chunk.
        auto mark = [&](float (&score)[CH], int j0, bool interior) -> unsigned {
            unsigned todo = 0;
#pragma unroll
            for (int j = 0; j < CH; j++) {
                const int cb = first + (j0 + j) * S;
                float v = -FSA_INF;
                if (interior) v = my_scores[cb];
                else if (cb <= last) v = cb < init_rel || cb > local_rel ? FSA_INF : my_scores[cb];
                score[j] = v;
                todo |= (v > fmaxf(top.last(), bound) ? 1u : 0u) << (SHARE ? j * S : j);
            }
            return SHARE ? todo << first : todo;
        };
        // SHARE: the marked score of the token's block cb again, as mark
        // made it (a marked block is at or below the token's own, so its
        // score, or +inf where forced): one shared-memory load, which any lane
        // of the token may make (instead of picking score[j] by a variable j,
        // a select per entry; the chunk's scores are then dead during the
        // insertions).
        auto insert_block = [&](int cb) {
            float v = my_scores[cb];
            if (!fast && (cb < init_rel || cb > local_rel)) v = FSA_INF;
            if (v > top.last()) top.insert(v, i * NB + cb);
        };
#pragma unroll
        for (int j0 = 0; j0 < NBL; j0 += CH) {
            float score[CH];
            unsigned todo = fast ? mark(score, j0, true) : mark(score, j0, false);
            if constexpr (CH == NBL && CH >= 4 && CH <= LaneTopK<K>::KP) {
                // Into an empty list a merge is the sort alone (about 150
                // instructions), else about 400: five insertions.
                const int most = (int)__reduce_max_sync(ALL, (unsigned)__popc(todo));
                if (most >= (i == 0 ? 2 : 5)) {
                    float yv[CH];
                    int yc[CH];
#pragma unroll
                    for (int j = 0; j < CH; j++) {
                        const bool on = (todo >> (SHARE ? first + j * S : j)) & 1u;
                        yv[j] = on ? score[j] : -FSA_INF;
                        yc[j] = on ? i * NB + first + j * S : -1;
                    }
                    sel_sort(yv, yc);
                    top.add_sorted(yv, yc, i == 0);
                    todo = 0;
                }
            }
            if constexpr (SHARE) {
                // The token's candidates of the chunk, in ascending block
                // order, shared among its lanes: in each round lane my_s takes
                // the my_s-th (from 0) of the next S, so each lane still gets
                // its blocks in ascending order, the lanes' lists stay disjoint
                // (what the bound and the final merge need), and the warp runs
                // about the token's candidates / S rounds instead of its
                // busiest lane's own.
                unsigned m = todo;
#pragma unroll
                for (int mask = 1; mask < S; mask <<= 1) m |= __shfl_xor_sync(ALL, m, mask);
                while (m) {
                    unsigned mine = m;
#pragma unroll
                    for (int k = 1; k < S; k++)
                        if (k <= my_s) mine &= mine - 1;
#pragma unroll
                    for (int k = 0; k < S; k++) m &= m - 1;
                    if (mine) insert_block(__ffs(mine) - 1 + j0 * S);
                }
            } else {
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
        }
        // The token's lists hold at least K entries at or above the least of
        // their ceil(K / S)-th scores; with S or more forced blocks still to
        // come, K - S entries (the forced ones take the other places), so the
        // ceil(K / S) - 1-th.
        if constexpr (S > 1) {
            constexpr int Q = (K + S - 1) / S - 1;
            float th = top.v[Q];
            if constexpr (FEW) th = (i + 1) * NB <= few_until ? top.v[Q - 1] : th;
#pragma unroll
            for (int mask = 1; mask < S; mask <<= 1) th = fminf(th, __shfl_xor_sync(0xffffffffu, th, mask));
            bound = fmaxf(bound, th);
        }
        __syncwarp();
    };

    // FSA_CMP_SEL_SPREAD: where 8 or more lanes share a token's blocks and a
    // stage completes K of them (the usual shape at G >= 4: K 16, 16 blocks
    // per stage, a lane's E = K / S of them one per chunk), the token's list
    // is spread over its lanes (cmp_sel_spread.cuh) instead of the lanes'
    // lists and bound above (SPREAD: at the top).
    typedef SpreadTopK<SPREAD ? K : 2, SPREAD ? S : 2> Spread;
    Spread spread;
    if constexpr (SPREAD) spread.init(lane);
    auto update_spread = [&](int i) {
        constexpr int E = Spread::E;
        const int own = my_block - i * NB, init_rel = init_end - i * NB, local_rel = local0 - i * NB;
        const int last = min(own, NB - 1);
        const bool fast = i >= fast_lo && i < fast_hi;
        float cv[E];
        int cx[E];
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int cb = my_s + e * S;  // (NB a multiple of S: a lane's blocks are my_s mod S)
            float v = -FSA_INF;
            if (fast) v = my_scores[cb];
            else if (cb <= last) v = cb < init_rel || cb > local_rel ? FSA_INF : my_scores[cb];
            cv[e] = v;
            cx[e] = i * NB + cb;
        }
        // A merge where a segment has about as many candidates as its
        // fifteen steps cost insertions.
        spread.template add_stage<E == 1 ? 4 : 5>(cv, cx);
        __syncwarp();
    };
    auto update = [&](int i) {
        if constexpr (SPREAD) update_spread(i);
        else update_lists(i);
    };

    if constexpr (WG != 0) {
        // With MBAR (measured faster up to Dk 128) the K ring is on mbarriers
        // instead of a CTA barrier per stage, so a warpgroup waits only for
        // the stage it needs and runs ahead of the slowest by up to about a
        // stage, and stage i + 1's scores are issued once stage i's block sums
        // are done (products on the same tensor cores, which the scores would
        // hold up if issued before them), so they run under stage i's list
        // work; the probabilities are packed by then, which frees the
        // accumulators. Otherwise each stage's scores are issued and waited
        // for at its start.
        const auto landed = [] { wg_fence_async_smem(); };
        MbarRing<3> mring;
        AsyncRing<WG_STAGES> ring;
        if constexpr (WS) {
            cp_async_wait<0>();
            wg_fence_async_smem();
            named_bar_sync(1 + (warp >> 2), 128);  // this warpgroup's query rows have landed
        } else if constexpr (MBAR) {
            mring.init(bars, THREADS);
            __syncthreads();  // the mbarriers are initialized
            mring.start(n_stages, load, landed);
        } else {
            ring.start(n_stages, load);
        }
        // Stage j's K tile, once every thread's copies of it have landed.
        auto acquire = [&](int j) -> u32 {
            if constexpr (MBAR) {
                if constexpr (WS) pring.wait(j);
                else mring.wait(j);
                return ks + (u32)((unsigned)j % 3) * K_STAGE;
            } else {
                return ks + (u32)ring.acquire_then_refill(j, load, landed) * K_STAGE;
            }
        };
        float s[MT][KS / 8][4];
        if (MBAR && n_stages > 0) {
            wg_mma_abt<DT, DK, KS, 64 * WG, false>(s[0], q_group, acquire(0));
            wg_commit();
        }
        for (int i = 0; i < n_stages; i++) {
            if constexpr (!MBAR) {
                wg_mma_abt<DT, DK, KS, 64 * WG, false>(s[0], q_group, acquire(i));
                wg_commit();
            }
            wg_wait<0>();
            wg_hold<KS / 8>(s[0]);
            if constexpr (WS) pring.release(i);  // this thread's products of stage i are done
            else if constexpr (MBAR) mring.release(i);
            // (A stage no row of the warp sees takes the masked path: all zeros.
            // The probabilities in registers of their own: an instruction
            // other than a product that wrote the accumulators would make
            // ptxas serialize the products.)
            float pr[MT][KS / 8][4];
            cmp_probs<KS / 8, MT>(pr, s, i * KS, row_vis, row_lse2, scale_log2, lane, (i + 1) * KS <= warp_min_vis);
            typename Scorer::Packed b[MT];
#pragma unroll
            for (int m = 0; m < MT; m++) Scorer::pack(b[m], pr[m]);
            sum_blocks(b);
            if (MBAR && i + 1 < n_stages) {
                wg_mma_abt<DT, DK, KS, 64 * WG, false>(s[0], q_group, acquire(i + 1));
                wg_commit();
            }
            update(i);
            if constexpr (MBAR && !WS) mring.advance(i, load, landed);
        }
    } else {
        AsyncRing<FSA_QT_STAGES> ring;
        ring.start(n_stages, load);
        for (int i = 0; i < n_stages; i++) {
            float s[MT][KS / 8][4];
            const int buf = ring.acquire(i, load);
            if (i == 0) {
                if constexpr (Q_IN_REGS) {
#pragma unroll
                    for (int m = 0; m < MT; m++) frag_load_a<DK>(qf[m], q_warp + (u32)(m * 16 * LDK * 2));
                }
                __syncthreads();  // every warp has its rows: the region may become the warps' buffers
            }
#pragma unroll
            for (int m = 0; m < MT; m++) frag_zero<KS / 8>(s[m]);
            if (i * KS < warp_vis) {
                if constexpr (Q_IN_REGS)
                    mma_abt_rows_a_regs<DT, DK, KS / 8, LDK, MT>(s, qf, k_lane + buf * K_STAGE);
                else
                    mma_abt_rows<DT, DK, KS / 8, LDK, MT>(s, q_warp, 16 * LDK * 2, k_lane + buf * K_STAGE);
                cmp_probs<KS / 8, MT>(s, s, i * KS, row_vis, row_lse2, scale_log2, lane, (i + 1) * KS <= warp_min_vis);
            }
            typename Scorer::Packed b[MT];
#pragma unroll
            for (int m = 0; m < MT; m++) Scorer::pack(b[m], s[m]);
            sum_blocks(b);
            update_lists(i);
        }
    }

    cp_async_wait<0>();  // (nothing is in flight but empty groups; no copy outlives the CTA)

    // The token's S lists into one (every lane of the warp takes part, and
    // the token's lanes end with the same list), then its lanes write the row.
    if constexpr (SPREAD) {
        spread.gather(top.c);
    } else {
#pragma unroll
        for (int mask = 1; mask < S; mask <<= 1) top.merge_xor(mask);
    }
    if (my_live)
        top.template write_row<S < K ? S : K>((int *)p.topk.ptr + (tile.tok0 + warp * TWW + my_t) * p.topk.token_stride +
                                               (long long)h * p.topk.head_stride, my_s);
}
