// Selected attention of new query tokens over a paged KV cache (decode,
// speculative decoding, chunked prefill). A CTA owns (sequence, tile of its
// new tokens, KV head, split): its rows are tokens x the G query heads of the
// KV head, so every head of a token and every token of the tile share one
// load of each K/V block. It forms the sorted union of the blocks its tokens
// selected, streams its share of them through the page table 64 keys per
// stage (two stages in flight), masks per row (the row's token selected the
// block; key position <= the token's position) and keeps an online softmax.
// Warps split the live rows into 16-row tiles and each stage's keys into
// groups; the groups merge at the end. A sequence with one split writes o and lse;
// otherwise each split writes a normalized partial and fsa_kvc_merge combines
// them in split order. Q and K are D wide, V and o DV wide. Launch shapes and
// shared memory: fsa_layout.cuh.
#include "fsa_softmax.cuh"
#include "paged_kv.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}}, K = {{TOP_K}},
              PAGE = {{PAGE_SIZE}};
constexpr int RT = fsa_kvc_row_tiles(G);    // 16-row tiles per CTA
constexpr int TPT = fsa_kvc_tile_tokens(G); // query tokens per tile
constexpr int ROWS = fsa_kvc_rows(G);
constexpr int WARPS = FSA_KVC_WARPS, THREADS = FSA_KVC_THREADS;
constexpr int NT = 2 * RT;                  // score tiles of 8 keys per warp, at most
constexpr int NC = fsa_kvc_tile_entries(G, K);
constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
constexpr bool Q_REGS = fsa_kvc_q_in_registers(D);  // query fragments in registers, rows staged in K buffer 1
typedef PagedStream<D, DV, BK, PAGE> Stream;
static_assert(G <= FSA_KVC_MAX_GROUP && TPT <= 32, "token masks are 32-bit");
static_assert(FSA_KVC_STAGES * (Stream::K_STAGE_BYTES + Stream::V_STAGE_BYTES) >= WARPS * 16 * DV * 4,
              "merge area fits in the K/V buffers");
static_assert(ROWS <= KVC_STAGE, "the query rows fit in a K stage buffer");

// Static shared memory: the tile's selection, its key stream, each warp's
// row max and sum for the merge, the tile counter.
struct Shared {
    TileSelection<NC, TPT> sel;
    PagedStreamShared stream;
    float ml[WARPS][16][2];
    int counter;
};
static_assert(sizeof(Shared) == fsa_kvc_static_smem_bytes(G, K), "the static shared memory the plan counts");

// The token of row r and whether the row holds one (rows past the tile are padding).
__device__ __forceinline__ bool row_live(int r, int ntok) { return r < TPT * G && r / G < ntok; }

// Row r of row tile rt, columns d and d + 1, merged over the N warps that split its keys.
template <int N>
__device__ __forceinline__ float merged_row(float *om, float (*ml)[16][2], int rt, int r, int d, float v[2],
                                            float *mmax) {
    return WarpMerge<N, DV>{om + rt * N * 16 * DV, ml + rt * N}.get(r, d, v, mmax);
}

// Decode tiles (one row tile) fit 3 CTAs per SM: at most 170 registers.
extern "C" __global__ void __launch_bounds__(THREADS, RT == 1 && Q_REGS && DV <= 128 ? 3 : 1)
    fsa_kvc_fwd(const fsa_kvc_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ Shared sh;
    constexpr u32 K_STAGE_BYTES = Stream::K_STAGE_BYTES, V_STAGE_BYTES = Stream::V_STAGE_BYTES;
    const u32 k_s = smem_addr(smem) + fsa_kvc_smem_k(D, G), v_s = smem_addr(smem) + fsa_kvc_smem_v(D, G);
    const u32 q_s = Q_REGS ? k_s + K_STAGE_BYTES : smem_addr(smem);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hkv = (int)p.num_kv_heads;
    const int h = blockIdx.y % hkv, split = blockIdx.y / hkv;
    const int *cu_q = (const int *)p.cu_q;
    int tile;
    const int b = tile_sequence(&tile, &sh.counter, cu_q, p.tq, (int)p.batch, blockIdx.x, TPT);
    const QuerySpan span = query_span(cu_q, p.tq, b);
    const int nsplit = fsa_kvc_seq_splits(span.len, TPT, (int)p.splits);
    if (tile < 0 || tile * TPT >= span.len || split >= nsplit) return;
    const int seq_len = cached_len((const int *)p.seqused, b);
    const long long t0 = span.start + (long long)tile * TPT;
    const int ntok = min(TPT, span.len - tile * TPT);
    const int pos0 = seq_len - span.len + tile * TPT;  // position of token 0 (negative when seqused_k < q_len)
    if (tid < TPT) sh.sel.pos[tid] = tid < ntok ? pos0 + tid : -1;

    // Query rows: row r is token r / G, head h * G + r % G; padding rows are zero.
    load_tile_async<ROWS, D, LD, THREADS>(q_s, [&](int r) {
        const bool ok = row_live(r, ntok);
        return RowSrc{ok ? view_row<const u16>(p.q, t0 + r / G, h * G + r % G) : (const u16 *)p.q.ptr, ok};
    });
    if (Q_REGS) cp_async_commit();  // a group of its own: read into registers before stage 1 reuses the buffer
    __syncthreads();  // pos
    const int *rows = view_row<const int>(p.topk, t0, h);
    const int *len = p.topk_len ? (const int *)p.topk_len + t0 : nullptr;
    const int n_union = select_union<K, TPT, BK>(sh.sel, rows, p.topk.token_stride, len, ntok);

    // Warp roles: the tile's live rows take rte row tiles (1, 2 or 4, at most RT)
    // and the warps of a row tile split each stage's keys: warp (rt, kg) takes
    // keys key0 .. key0 + 16 rte - 1. Decode rows of a large group thus use all
    // four warps, and speculative tokens of the group share the stage.
    const int live_rows = ntok * G;
    const int rte = min(RT, live_rows <= 16 ? 1 : live_rows <= 32 ? 2 : 4);
    const int kge = WARPS / rte, rt = warp % rte, kg = warp / rte, key0 = kg * 16 * rte;
    const bool warp_live = rt * 16 < live_rows;  // warp-uniform: a tile past the tokens skips the math
    int tpos[2];
    u32 tbit[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = rt * 16 + frag_row(lane, 2 * i);
        tpos[i] = row_live(r, ntok) ? pos0 + r / G : -1;
        tbit[i] = row_live(r, ntok) ? 1u << (r / G) : 0u;
    }
    const float scale_log2 = (float)p.scale_log2;
    // Shared-memory addresses, once: the loops below only add constants.
    constexpr u32 TILE16 = fsa_tile_bytes(16, D), V_TILE16 = fsa_tile_bytes(16, DV);
    const u32 q_addr = q_s + rt * TILE16 + ldm_lane_a(lane, LD);
    const u32 k_addr = k_s + key0 * LD * 2 + ldm_lane_b(lane, LD);
    const u32 v_addr = v_s + key0 * LDV * 2 + ldm_lane_a(lane, LDV);

    // This split's share of the union: contiguous, in block order.
    const int chunk = (n_union + nsplit - 1) / nsplit;
    const int u_lo = min(n_union, split * chunk), u_hi = min(n_union, u_lo + chunk);
    Stream in(sh.stream, p, k_s, v_s, sh.sel.blocks, sh.sel.masks, u_lo, u_hi, b, h, seq_len);
    in.start();  // without Q_REGS the query rows join stage 0's group
    u32 qf[Q_REGS ? D / 16 : 1][4];
    if (Q_REGS) {
        cp_async_wait<1>();  // the query group (stage 0 may still be in flight)
        __syncthreads();
        if (warp_live)
#pragma unroll
            for (int kd = 0; kd < (Q_REGS ? D / 16 : 0); kd++) ldmatrix_x4(qf[kd], q_addr + kd * 32);
        // Stage 1 overwrites the rows only after the barrier in in.acquire(0).
    }

    OnlineSoftmax sm;
    sm.init();
    float o_acc[DV / 8][4];
    frag_zero<DV / 8>(o_acc);

    for (int st = 0; st < in.n_stages; st++) {
        const int buf = in.acquire(st);
        if (!warp_live) continue;
        const int *kpos = in.keypos(buf) + key0;
        const u32 *kmask = in.keymask(buf) + key0;
        float s[NT][4];
        frag_zero<NT>(s);
#pragma unroll
        for (int c = 0; c < RT; c++)  // 16 keys per chunk
            if (c < rte) {
                if constexpr (Q_REGS) mma_abt_a_regs<DT, D, 2, LD>(s + 2 * c, qf, k_addr + buf * K_STAGE_BYTES + c * TILE16);
                else mma_abt<DT, D, 2, LD>(s + 2 * c, q_addr, k_addr + buf * K_STAGE_BYTES + c * TILE16);
            }
        float alpha[2];
        // Visible: one of this warp's keys, the row's token selected its block, not in the token's future.
        sm.step<NT>(s, scale_log2, lane, [&](int col, int half) {
            return col < 16 * rte && (kmask[col] & tbit[half]) != 0u && kpos[col] <= tpos[half];
        }, alpha);
        frag_scale_rows<DV / 8>(o_acc, alpha);
#pragma unroll
        for (int c = 0; c < RT; c++)
            if (c < rte) mma_pv<DT, 1, DV / 8, LDV>(o_acc, s + 2 * c, v_addr + buf * V_STAGE_BYTES + c * V_TILE16);
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    // The key groups of each row tile merge in group order; row tile rt's
    // warps sit together in the merge area.
    float *om = (float *)(smem + fsa_kvc_smem_k(D, G));
    WarpMerge<WARPS, DV>{om + rt * kge * 16 * DV, sh.ml + rt * kge}.put(sm, o_acc, kg, lane);
    __syncthreads();
    const long long part = (((long long)b * hkv + h) * nsplit + split) * ROWS;
    for (int c = tid; c < ROWS * (DV / 2); c += THREADS) {
        const int r = c / (DV / 2), d = (c - r * (DV / 2)) * 2;
        if (!row_live(r, ntok)) continue;
        float v[2], mmax;
        const int tr = r >> 4;
        const float l = kge == 4   ? merged_row<4>(om, sh.ml, tr, r & 15, d, v, &mmax)
                        : kge == 2 ? merged_row<2>(om, sh.ml, tr, r & 15, d, v, &mmax)
                                   : merged_row<1>(om, sh.ml, tr, r & 15, d, v, &mmax);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const float lse2 = l > 0.f ? mmax + fast_log2(l) : -FSA_INF;
        const long long t = t0 + r / G;
        const int hq = h * G + r % G;
        if (nsplit == 1) {
            *(u32 *)(view_row<u16>(p.o, t, hq) + d) = DT::pack(v[0] * inv, v[1] * inv);
            if (d == 0 && p.lse) ((float *)p.lse)[(long long)hq * p.tq + t] = lse2 * LN2;
        } else {
            *(float2 *)((float *)p.o_part + (part + r) * DV + d) = make_float2(v[0] * inv, v[1] * inv);
            if (d == 0) ((float *)p.lse_part)[part + r] = lse2;
        }
    }
}

// Merges the splits of every one-tile sequence: per row, the partials weighted
// by exp2(lse_s - max) in split order, so the result does not depend on which
// CTA finished first. Grid (batch, Hkv).
extern "C" __global__ void __launch_bounds__(THREADS) fsa_kvc_merge(const fsa_kvc_params p) {
    const int b = blockIdx.x, h = blockIdx.y, hkv = (int)p.num_kv_heads;
    const QuerySpan span = query_span((const int *)p.cu_q, p.tq, b);
    const int nsplit = fsa_kvc_seq_splits(span.len, TPT, (int)p.splits);
    if (nsplit == 1) return;
    const long long part = ((long long)b * hkv + h) * nsplit * ROWS;
    const float *lp = (const float *)p.lse_part + part;
    const float *op = (const float *)p.o_part + part * DV;
    for (int c = threadIdx.x; c < span.len * G * (DV / 2); c += THREADS) {
        const int r = c / (DV / 2), d = (c - r * (DV / 2)) * 2;
        float mmax = -FSA_INF;
        for (int s = 0; s < nsplit; s++) mmax = fmaxf(mmax, lp[s * ROWS + r]);
        float l = 0.f, v0 = 0.f, v1 = 0.f;
        if (mmax != -FSA_INF) {
            for (int s = 0; s < nsplit; s++) {
                const float f = fast_exp2(lp[s * ROWS + r] - mmax);
                const float2 x = *(const float2 *)(op + ((long long)s * ROWS + r) * DV + d);
                l += f;
                v0 += x.x * f;
                v1 += x.y * f;
            }
        }
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const long long t = span.start + r / G;
        const int hq = h * G + r % G;
        *(u32 *)(view_row<u16>(p.o, t, hq) + d) = DT::pack(v0 * inv, v1 * inv);
        if (d == 0 && p.lse) ((float *)p.lse)[(long long)hq * p.tq + t] = l > 0.f ? (mmax + fast_log2(l)) * LN2 : -FSA_INF;
    }
}
