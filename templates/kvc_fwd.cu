// Selected attention of new query tokens over a paged KV cache (decode,
// speculative decoding, chunked prefill). A CTA owns (sequence, tile of its
// new tokens, KV head, split): its rows are tokens x the G query heads of the
// KV head, so every head of a token and every token of the tile share one
// load of each K/V block. It forms the sorted union of the blocks its tokens
// selected, streams its share of them through the page table 64 keys per
// stage (two stages in flight; four in the deep kernel of small launches; one buffer, copied
// after its previous stage's use, in the small layout of targets with less shared memory:
// fsa_kvc_layout_fit), masks per row (the row's token selected the
// block; key position <= the token's position) and keeps an online softmax.
// Warps split the live rows into 16-row tiles and each stage's keys into
// groups; the groups merge at the end. Small groups put the keys on the
// 16-row side of the mma and the rows on the 8-wide side (KeyMath), larger
// ones the rows (RowMath); fsa_kvc_keys_major decides. A sequence with one split writes o and lse;
// otherwise its shares (a fixed split of the blocks, the plan's) are computed by
// p.ctas CTAs, each taking a run of them one after another and writing a
// normalized partial per share, and the last CTA of the (sequence, KV head) to
// finish combines them in share order (one launch; a CTA that computed every
// share merges at once, without fence or counter); when those CTAs are a
// cluster (p.cluster, one share each) the partials stay in shared memory and
// the cluster merges them (kvc_merge.cuh). On sm_90a, where a stage is whole
// page boxes (fsa_kvc_tma_fits), the stages arrive by tensor-map copies into
// 128-byte swizzled tiles (TMA) and the products read them through
// fsa_mma_sw.cuh; otherwise by cp.async of each row into padded tiles. Q and K
// are D wide, V and o DV wide. Launch shapes and shared memory: fsa_layout.cuh.
#include "kvc_math.cuh"
#include "kvc_merge.cuh"
#include "kvc_stamps.cuh"
#include "kvc_union.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}}, K = {{TOP_K}},
              PAGE = {{PAGE_SIZE}};
constexpr bool TMA = ({{TMA}} & FSA_KVC_KERNEL_TMA) != 0;  // tensor-map copies (the host sets it only where fsa_kvc_tma_fits)
constexpr bool STAMPS = ({{TMA}} & FSA_KVC_KERNEL_STAMPS) != 0;  // the debug variant with phase stamps (kvc_stamps.cuh)
// The deep ring (small batches, one CTA per SM: fsa_kvc_mode_stages): STAGES buffers. A
// share's epilogue then always merges at the base (the host launches it where a CTA has one
// share; with more, the next share's stages are issued after the epilogue, not during it).
// LAYOUT: FSA_KVC_LAYOUT_* bits (fsa_layout.cuh; 0 the default): one stage buffer on targets
// whose shared memory holds no more (cp.async only). An enumerator, not a variable: the default
// kernel's module keeps its globals, so its machine code stays what it was.
enum : int { LAYOUT = {{KVC_LAYOUT=0}} };
constexpr int MODE = {{TMA}}, STAGES = fsa_kvc_stages(MODE, LAYOUT);
constexpr bool DEEP = fsa_kvc_mode_stages(MODE) != FSA_KVC_STAGES;
static_assert(!TMA || LAYOUT == 0, "the small layout is the cp.async kernel's");
// Variants under measurement (FSA_KVC_EXPERIMENT at plan creation; 0 = the default kernel):
// bit 0: the K/V boxes copied without the L2 evict_first policy (as before it);
// bit 1: tiles whose tokens share one top-k row take the general union (select_union's ONE_ROW off).
constexpr int EXPERIMENT = {{TMA}} >> FSA_KVC_KERNEL_EXPERIMENT_SHIFT;
constexpr int RT = fsa_kvc_row_tiles(G);    // 16-row tiles per CTA
constexpr int TPT = fsa_kvc_tile_tokens(G); // query tokens per tile
constexpr int ROWS = fsa_kvc_rows(G);
constexpr int WARPS = FSA_KVC_WARPS, THREADS = FSA_KVC_THREADS;
constexpr int NC = fsa_kvc_tile_entries(G, K);
constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
constexpr bool Q_REGS = fsa_kvc_q_in_registers(D);  // query fragments in registers, rows staged in the last K buffer
constexpr bool KEYS_MAJOR = fsa_kvc_keys_major(G, D);
// 16 rows of a K or V stage: padded rows, or 128-byte swizzled rows (one 128-byte row per panel).
constexpr u32 TILE16 = TMA ? 16 * 128 : fsa_tile_bytes(16, D), V_TILE16 = TMA ? 16 * 128 : fsa_tile_bytes(16, DV);
constexpr int LDO = fsa_kvc_merge_pitch(D, DV, G);  // row pitch of the warps' merge area (floats)
// The K/V boxes are read once: their L2 lines are the first evicted, so they replace each other
// instead of what other work left in L2 (a dirty line costs a write-back).
typedef PagedStream<D, DV, BK, PAGE, TMA, (EXPERIMENT & 1) == 0, STAGES> Stream;
static_assert(G <= FSA_KVC_MAX_GROUP && TPT <= 32, "token masks are 32-bit");
static_assert(TMA ? STAGES * (Stream::K_STAGE_BYTES + Stream::V_STAGE_BYTES) >= WARPS * 16 * LDO * 4
                  : fsa_kvc_smem_k(D, DV, G, 0) + WARPS * 16 * LDO * 4 <= fsa_kvc_smem_bytes(D, DV, G, 0, LAYOUT),
              "merge area fits in the K/V buffers (cp.async: in the dynamic shared memory)");
// The default layout's buffers hold the merge area themselves (its dynamic shared memory is its stages').
static_assert(TMA || LAYOUT != 0 || fsa_kvc_smem_k(D, DV, G, 0) + WARPS * 16 * LDO * 4 <= fsa_kvc_stages_end(D, DV, G, 0, 0),
              "the two-stage layout's merge area fits in its K/V buffers");
static_assert(!TMA || STAGES == 2 || DEEP, "a share merges against the first or the last buffer while the next fills the other");
static_assert(ROWS <= KVC_STAGE, "the query rows fit in a K stage buffer");
// Tiles of more than 32 live rows (rte 4: G > 8 with several tokens, e.g. 4
// speculative tokens at G 16) on tensor-map stages take each stage's 64 keys
// in one step of warpgroup products (RowMath::stage_wg) instead of four
// dependent 16-key chunks per warp: the four warps are one warpgroup, warp w
// its rows 16w .. 16w + 15, as in the mma.sync path. Values up to 128 wide
// (wider ones would spill the scores beside the output fragments).
constexpr bool WG_TILES = TMA && RT == 4 && DV <= 128;
static_assert(!WG_TILES || (WARPS == 4 && KVC_STAGE == 64), "one warpgroup over a stage of 64 keys");
// Shares merged through the cluster's shared memory (sm_90, where the share fits).
constexpr bool CLUSTER = FSA_HAS_CLUSTERS && fsa_kvc_cluster_fits(D, DV, G, TMA, LAYOUT);

// What the loop over a CTA's shares reads back each time instead of holding
// in registers through the key stream: the tile's first token, its sequence,
// cached length, tokens, union size and last share (written once by thread 0).
struct ShareLoop {
    int t0, b, seq_len, ntok, n_union, end;  // t0 < Tq <= INT32_MAX
};

// Static shared memory: the key stream, the tile's selection, each warp's
// row max and sum for the merge and each row's merge factors, the share loop,
// the tile counter.
struct Shared {
    PagedStreamShared<TMA, STAGES> stream;  // first: its 8-byte row offsets need no padding
    TileSelection<NC, TPT> sel;
    float ml[WARPS][16][2];
    float rowf[ROWS][WARPS + 2];  // share_row_factors
    ShareLoop loop;
    int counter;
};
static_assert(sizeof(Shared) == fsa_kvc_static_smem_bytes(G, K, MODE, LAYOUT), "the static shared memory the plan counts");

typedef KvcRowMath<DT, D, DV, G, TMA, Q_REGS, WG_TILES, WARPS, LDO> RowMath;
typedef KvcKeyMath<DT, D, DV, G, TMA, WARPS, LDO> KeyMath;
typedef Pick<KEYS_MAJOR, KeyMath, RowMath>::type Math;
static_assert(!KEYS_MAJOR || (Q_REGS && RT <= 2), "key-major tiles read the query fragments from registers");

// With the query fragments in registers and values up to 128 wide, up to two
// row tiles fit in 170 registers (3 CTAs per SM, as many as the shared memory
// of two stages allows, or of one); four row tiles (G > 8) need more: 2 per SM.
extern "C" __global__ void __launch_bounds__(THREADS, DEEP ? 1 : Q_REGS && DV <= 128 ? (RT < 4 && STAGES <= 2 ? 3 : 2) : 1)
    fsa_kvc_fwd(const __grid_constant__ fsa_kvc_params p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ Shared sh;
    // Swizzled tiles need a 1024-byte aligned base (the plan counts the 1024 bytes more).
    unsigned char *const smem = TMA ? smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u) : smem_raw;
    constexpr u32 K_STRIDE = Stream::K_STRIDE, V_STRIDE = Stream::V_STRIDE;  // between stage buffers
    const u32 k_s = smem_addr(smem) + fsa_kvc_smem_k(D, DV, G, TMA), v_s = smem_addr(smem) + fsa_kvc_smem_v(D, DV, G, TMA, LAYOUT);
    const u32 q_s = Q_REGS ? k_s + (STAGES - 1) * K_STRIDE : smem_addr(smem);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hkv = (int)p.num_kv_heads;
    // A (sequence, KV head)'s CTAs are neighbours in y: a cluster's CTAs when p.cluster.
    const int h = blockIdx.y / (int)p.ctas, cta = blockIdx.y % (int)p.ctas;
    const bool cluster = CLUSTER && p.cluster != 0;  // then cta is the CTA's rank in its cluster
    const int *cu_q = (const int *)p.cu_q;
    KvcStamps<STAMPS> stamp;
    stamp.begin(p);
    Stream::init(sh.stream);  // before tile_sequence's first barrier
    // Decode batches: the guessed tile's top-k row and cached length are read
    // while the tile lookup reads cu_seqlens_q.
    const DecodeGuess guess = decode_guess<K, TPT>(p, blockIdx.x, h);
    int tile;
    const int b = tile_sequence(&tile, &sh.counter, cu_q, p.tq, (int)p.batch, blockIdx.x, TPT);
    const QuerySpan span = query_span(cu_q, p.tq, b);
    const int nsplit = fsa_kvc_seq_splits(span.len, TPT, (int)p.splits);
    // The CTAs of a split (sequence, KV head) take equal runs of its shares.
    const int ctas = nsplit > 1 ? (int)p.ctas : 1;
    stamp.at(FSA_KVC_ST_C_TILE);
    if (tile < 0 || tile * TPT >= span.len || cta >= ctas) {
        stamp.end(0);
        return;
    }
    stamp.flag(2);
    const long long t0 = span.start + (long long)tile * TPT;
    const int ntok = min(TPT, span.len - tile * TPT);
    // The tile's top-k rows and the cached length are read at once (neither
    // needs the other), unless the guess above already has them.
    const int seq_len = decode_guess_use<K, TPT>(sh.sel, guess, p, b, t0, ntok, h);
    stamp.at(FSA_KVC_ST_C_SEL);
    // What the epilogue writes, asked of L2 now (its address translation and
    // line are then ready when the stores come): the first share's partial and
    // the pair's counter, or the first output row.
    if (tid == 0) {
        if (nsplit == 1) {
            prefetch_l2(view_row<u16>(p.o, t0, h * G));
        } else if (!cluster) {
            prefetch_l2((const float *)p.o_part + (((long long)b * hkv + h) * nsplit + cta * (nsplit / ctas)) * ROWS * DV);
            if (ctas > 1) prefetch_l2((const int *)p.counters + (long long)b * hkv + h);
        }
    }
    const int pos0 = seq_len - span.len + tile * TPT;  // position of token 0 (negative when seqused_k < q_len)
    if (tid < TPT) sh.sel.pos[tid] = tid < ntok ? pos0 + tid : -1;

    // Query rows: row r is token r / G, head h * G + r % G; padding rows are zero.
    const auto q_row = [&](int r) {
        const bool ok = kvc_row_live<G>(r, ntok);
        return RowSrc{ok ? view_row<const u16>(p.q, t0 + r / G, h * G + r % G) : (const u16 *)p.q.ptr, ok};
    };
    // Only the rows the math reads (the row tiles of the live rows, rte below; padding rows
    // inside them zero), and where warp 0 builds the union alone, by the other warps meanwhile.
    {
        const bool warp_union = select_union_in_warp<K>(ntok);
        const int q_tiles = min(RT, ntok * G <= 16 ? 1 : ntok * G <= 32 ? 2 : 4);
        const int q_pieces = 16 * q_tiles * (D / 8), first = warp_union ? tid - 32 : tid;
        const int step = warp_union ? THREADS - 32 : THREADS;
        if (first >= 0)
#pragma unroll 2
            for (int i = first; i < q_pieces; i += step) {
                const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;
                const RowSrc src = q_row(r);  // the rows may fill a swizzled stage (TMA)
                cp_async16(q_s + (TMA ? sw128_offset(r, c, ROWS) : (u32)(r * LD + c) * 2), src.ptr + c, src.ok);
            }
    }
    if (Q_REGS) cp_async_commit();  // a group of its own: read into registers before stage 1 reuses the buffer
    stamp.at(FSA_KVC_ST_C_QISSUE);
    if (!select_union_in_warp<K>(ntok)) __syncthreads();  // pos and the candidates
    const int n_union = select_union<K, TPT, BK, (EXPERIMENT & 2) == 0>(sh.sel, ntok);
    stamp.at(FSA_KVC_ST_C_UNION);

    // Warp roles: the tile's live rows take rte row tiles (1, 2 or 4, at most RT)
    // and the warps of a row tile split each stage's keys: warp (rt, kg) takes
    // keys key0 .. key0 + 16 rte - 1. Decode rows of a large group thus use all
    // four warps, and speculative tokens of the group share the stage.
    const int live_rows = ntok * G;
    const int rte = min(RT, live_rows <= 16 ? 1 : live_rows <= 32 ? 2 : 4);
    const int kge = WARPS / rte, rt = warp % rte, kg = warp / rte, key0 = kg * 16 * rte;
    const bool warp_live = rt * 16 < live_rows;  // warp-uniform: a tile past the tokens skips the math
    const bool wg_tile = WG_TILES && rte == 4;    // CTA-uniform: every warp takes part in the products
    Math math;
    math.rows(rt, lane, ntok, pos0);
    const float scale_log2 = (float)p.scale_log2;
    // Shared-memory addresses, once: the loops below only add constants.
    const u32 q_addr = q_s + rt * TILE16 + Math::q_lane(lane);
    const u32 k_addr = k_s + key0 * (TMA ? 128 : LD * 2) + Math::k_lane(lane);
    const u32 v_addr = v_s + key0 * (TMA ? 128 : LDV * 2) + Math::v_lane(lane);

    // Share s of the union is its contiguous run of blocks [s chunk, (s + 1) chunk),
    // in block order. A CTA computes its shares one after another, each exactly
    // as a CTA of its own would (the bits do not depend on how many CTAs share them).
    const int per_cta = nsplit / ctas;
    if (tid == 0) sh.loop = ShareLoop{(int)t0, b, seq_len, ntok, n_union, (cta + 1) * per_cta};
    // TMA: the pages of the run's first stages, all read at once (the stream then never waits on the table).
    if constexpr (TMA) {
        const int chunk = (n_union + nsplit - 1) / nsplit;
        paged_fetch_pages<BK, PAGE>(sh.stream.pages, p, sh.sel.blocks, min(n_union, cta * per_cta * chunk),
                                    min(n_union, (cta + 1) * per_cta * chunk),
                                    (const int *)p.block_table + (long long)b * p.bt_stride, seq_len, 0, KVC_RUN_PAGES);
    }
    __syncthreads();
    stamp.at(FSA_KVC_ST_C_PAGES);
    const volatile ShareLoop &loop = sh.loop;
    u32 qf[Q_REGS ? D / 16 : 1][4];
    u32 phase = 0;  // the parities of the stage buffers' mbarriers (TMA), across shares
    int b0 = 0;           // TMA: the buffer of the share's first stage (after the previous share's last)
    bool issued = false;  // TMA: and its copies were issued during the previous share's epilogue
    // A share's stream (TMA: starting in buffer b0).
    const auto stream_of = [&](int share, int first_buffer) {
        const int nu = loop.n_union, chunk = (nu + nsplit - 1) / nsplit, u_lo = min(nu, share * chunk);
        return Stream(sh.stream, p, k_s, v_s, sh.sel.blocks, sh.sel.masks, u_lo, min(nu, u_lo + chunk), loop.b, h,
                      loop.seq_len, phase, min(nu, cta * per_cta * chunk), min(nu, (cta + 1) * per_cta * chunk),
                      first_buffer);
    };
#pragma unroll 1
    for (int share = cta * per_cta; share < loop.end; share++) {
        const int sn = share - cta * per_cta;  // the CTA's n-th share (stamps)
        stamp.share(sn, 0);
        Stream in = stream_of(share, b0);
        in.start(issued);  // without Q_REGS the query rows join stage 0's group
        if (Q_REGS && share == cta * per_cta) {
            // The query group (cp.async stages issued after it may still be in flight).
            cp_async_wait<TMA ? 0 : STAGES - 1>();
            if (TMA) wg_fence_async_smem();       // a later page copy overwrites the rows
            __syncthreads();
            if (warp_live || wg_tile)
#pragma unroll
                for (int kd = 0; kd < (Q_REGS ? D / 16 : 0); kd++)
                    ldmatrix_x4(qf[kd], TMA ? sw128_step<ROWS>(q_addr, kd) : q_addr + kd * 32);
            stamp.at(FSA_KVC_ST_C_QREADY);
            // The last buffer's first stage overwrites the rows only after the barrier in in.acquire(0).
        }

        math.reset();

        for (int st = 0; st < in.n_stages; st++) {
            stamp.acquire_begin();
            const int buf = in.acquire(st);
            stamp.acquire_end();
            if (st == 0) stamp.share(sn, 1);
            // The V rows of non-keys the warps of key group kg read (TMA), zeroed by
            // them together, the warps of row tiles past the tokens included.
            in.zero_missing(buf, key0, 16 * rte, lane, rt, rte, 1 + kg);
            if (wg_tile) {
                math.stage_wg(qf, k_s + buf * K_STRIDE, v_s + buf * V_STRIDE, in.keypos(buf), in.keymask(buf),
                              scale_log2, lane);
                continue;
            }
            if (!warp_live) continue;
            // The warp's keys of the stage, 16 at a time (one online-softmax step
            // each: the scores of one chunk live in registers at once).
#pragma unroll 1
            for (int c = 0; c < RT; c++) {
                if (c >= rte) break;
                const int *kpos = in.keypos(buf) + key0 + c * 16;
                const u32 *kmask = in.keymask(buf) + key0 + c * 16;
                const u32 k16 = buf * K_STRIDE + c * TILE16, v16 = buf * V_STRIDE + c * V_TILE16;
                math.chunk(qf, q_addr, k_addr + k16, v_addr + v16, kpos, kmask, scale_log2, lane);
            }
        }
        cp_async_wait<0>();
        __syncthreads();  // the K/V buffers become the merge area
        stamp.share(sn, 2);
        // TMA: the CTA's next share starts in the other buffer now, its first
        // stage landing while this share merges next to its last stage's buffer.
        const int last = in.last_buffer();
        b0 = in.buffer(in.n_stages);
        issued = TMA && !DEEP && !cluster && share + 1 < loop.end;
        if (issued) stream_of(share + 1, b0).issue_first();

        // The key groups of each row tile merge in group order; row tile rt's
        // warps sit together in the merge area. (kge 1: each warp's rows are
        // its own; nothing to merge, RowMath::direct.)
        const bool direct = !KEYS_MAJOR && kge == 1;  // CTA-uniform
        float *om = (float *)(smem + fsa_kvc_merge_at(D, DV, G, TMA && !DEEP && !cluster, last != 0));
        if (!direct) math.put(WarpMerge<WARPS, DV, LDO>{om + rt * kge * 16 * LDO, sh.ml + rt * kge}, kg, lane);
        __syncthreads();
        stamp.share(sn, 3);
        // The share loop's values in registers for the stores below (a volatile
        // shared read between them would wait for the stores before it), and
        // only the live rows (the first ntok * G): each row's factors once, then
        // the items (row, column pair) as loads and multiply-adds.
        const int e_b = loop.b, e_live = loop.ntok * G, e_items = e_live * (DV / 2);
        const long long e_t0 = loop.t0;
        const long long part = (((long long)e_b * hkv + h) * nsplit + share) * ROWS;
        if (!direct) share_row_factors<WARPS>(sh.rowf, sh.ml, kge, e_live);
        if (!direct) __syncthreads();
        if (sn == 0) stamp.at(FSA_KVC_ST_C_S0_FACTORS);
        // Stores by space (st_global_*, st_shared_*), not generic ones.
        const auto out = [&](int r, int d, float x, float y, float lse2) {
            const long long t = e_t0 + r / G;
            const int hq = h * G + r % G;
            if (nsplit == 1) {
                st_global_u32(view_row<u16>(p.o, t, hq) + d, DT::pack(x, y));
                if (d == 0 && p.lse) st_global_f32((float *)p.lse + (long long)hq * p.tq + t, lse2 * LN2);
            } else if (cluster) {  // the share's partial in this CTA's shared memory
                const u32 po = smem_addr(smem) + fsa_kvc_cluster_part(D, DV, G);
                st_shared_f32x2(po + 4 * (r * DV + d), x, y);
                if (d == 0) st_shared_f32(po + 4 * (ROWS * DV + r), lse2);
            } else {
                // In the workspace: scratch read back in this launch, stored evict-last so that L2
                // keeps it (dirty) until the merge, which then drops its lines (drop_partials): it
                // never costs a write-back to DRAM while the K/V stream needs the bandwidth.
                const u64 keep = l2_evict_last();
                st_global_f32x2_hint((float *)p.o_part + part * DV + r * DV + d, x, y, keep);
                if (d == 0) st_global_f32_hint((float *)p.lse_part + part + r, lse2, keep);
            }
        };
        if (direct) {  // the next share's copies go into buffers every warp finished reading before the barriers
            if (warp_live || wg_tile) math.direct(rt, lane, e_live, out);
            stamp.share(sn, 4);
            continue;
        }
        if (kge == 4) share_items<4, DV, LDO, WARPS, THREADS>(om, sh.rowf, e_items, out);
        else if (kge == 2) share_items<2, DV, LDO, WARPS, THREADS>(om, sh.rowf, e_items, out);
        else share_items<1, DV, LDO, WARPS, THREADS>(om, sh.rowf, e_items, out);
        if (sn == 0) stamp.at(FSA_KVC_ST_C_S0_ITEMS);
        if (TMA) wg_fence_async_smem();  // the next share's page copies overwrite the merge area
        __syncthreads();  // the merge area is read before the next share's copies land in it
        stamp.share(sn, 4);
    }
    if (nsplit == 1) {
        stamp.end(per_cta);
        return;
    }
    const int bb = loop.b;
    const QuerySpan merged = query_span(cu_q, p.tq, bb);
    if (cluster) {
        // Every CTA of the cluster merges a part of the rows from every CTA's shared memory.
        cluster_sync();  // the shares' partials are written
        stamp.at(FSA_KVC_ST_C_MERGE);
        const u32 po = smem_addr(smem) + fsa_kvc_cluster_part(D, DV, G);
        // Item c goes to CTA c % ctas: the items spread over the cluster's SMs.
        // Then no CTA leaves while another reads its shared memory.
        merge_shares<DT, DV, G>(p, ClusterShares<DV>{po + ROWS * DV * 4, po}, merged, h, nsplit, tid * ctas + cta,
                                ctas * THREADS, [] { cluster_sync(); });
        stamp.end(per_cta);
        return;
    }
    // The last CTA of (b, h) to finish merges all shares, in share order. A
    // CTA that computed every share itself (ctas 1) merges at once: its own
    // partial stores are visible to it after the share loop's last CTA
    // barrier, so no device-wide fence and no counter round trip.
    const long long first_part = ((long long)bb * hkv + h) * nsplit * ROWS;
    if (ctas == 1 || finish_share(&sh.counter, (int *)p.counters + (long long)bb * hkv + h, ctas)) {
        stamp.at(FSA_KVC_ST_C_MERGE);
        stamp.flag(4);
        merge_shares<DT, DV, G>(p,
                                WorkspaceShares<DV, ROWS>{(const float *)p.lse_part + first_part,
                                                          (const float *)p.o_part + first_part * DV},
                                merged, h, nsplit, tid, THREADS, [] {});
        __syncthreads();  // every thread's partial loads returned (the fold consumed them)
        drop_partials<DV, ROWS>(p, first_part, nsplit, merged.len * G, tid, THREADS);
    }
    stamp.end(per_cta);
}
