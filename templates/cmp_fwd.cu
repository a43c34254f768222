// Compressed attention forward: a CTA owns one KV head and a tile of query
// tokens of one sequence, the G heads of each token as neighbouring rows, so
// every stage of compressed K/V is loaded once for the whole group. Each warp
// runs Q K^T, the online softmax with the visibility rule of its rows, and
// P V on tensor cores; o and lse (natural log) go straight to global memory.
// No workspace.
#include "cmp_common.cuh"
#include "fsa_softmax.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define VALUE_DIM {{VALUE_DIM}}
#define GROUP {{GROUP}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int DK = HEAD_DIM, DV = VALUE_DIM, G = GROUP;
constexpr int KS = fsa_cmp_fwd_keys(DV);  // keys per stage
constexpr int LDK = fsa_pitch(DK), LDV = fsa_pitch(DV);
constexpr int TT = fsa_cmp_tokens_per_tile(G);
typedef GroupRows<G> Rows;
static_assert(DK % 16 == 0 && DV % 16 == 0 && DK <= 256 && DV <= 256, "head dims are multiples of 16 up to 256");

extern "C" __global__ void __launch_bounds__(FSA_CMP_THREADS, 2) fsa_cmp_fwd(const fsa_cmp_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 qs = smem_addr(smem);
    const u32 ks = qs + fsa_cmp_fwd_smem_k(DK), vs = qs + fsa_cmp_fwd_smem_v(DK, DV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y;
    const QueryTile tile = query_tile<TT>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
    if (!tile.ok) return;
    const CmpKeys keys = cmp_keys(p, tile.seq);

    // This lane's two rows (lo, hi) and the keys each of them sees; the tile's
    // last token sees the most.
    int row_tok[2], row_vis[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        const bool live = Rows::live(warp, r, tile.n_tok);
        row_tok[half] = live ? Rows::token(warp, r) : -1;
        row_vis[half] = live ? cmp_visible(tile.tok0 + row_tok[half] - tile.start, p.kernel_size, p.stride, keys.count) : 0;
    }
    const int warp_vis = __reduce_max_sync(0xffffffffu, max(row_vis[0], row_vis[1]));
    const int tile_vis = cmp_visible(tile.tok0 + tile.n_tok - 1 - tile.start, p.kernel_size, p.stride, keys.count);

    load_query_rows_async<G, DK, LDK, FSA_CMP_THREADS>(qs, p.q, tile, h);
    auto load = [&](int i, int buf) {
        load_cmp_rows_async<KS, DK, LDK>(ks + buf * fsa_tile_bytes(KS, DK), p.k, keys, h, i * KS, tile_vis);
        load_cmp_rows_async<KS, DV, LDV>(vs + buf * fsa_tile_bytes(KS, DV), p.v, keys, h, i * KS, tile_vis);
    };
    const int n_stages = (tile_vis + KS - 1) / KS;
    AsyncRing<FSA_CMP_STAGES> ring;
    ring.start(n_stages, load);

    const u32 q_lane = qs + (u32)(warp * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 k_lane = ks + ldm_lane_b(lane, LDK), v_lane = vs + ldm_lane_a(lane, LDV);
    const float scale_log2 = (float)p.scale_log2;
    OnlineSoftmax sm;
    sm.init();
    float o[DV / 8][4];
    frag_zero<DV / 8>(o);

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        if (i * KS >= warp_vis) continue;  // causal: no row of this warp sees these keys
        float s[KS / 8][4];
        frag_zero<KS / 8>(s);
        mma_abt<DT, DK, KS / 8, LDK>(s, q_lane, k_lane + buf * fsa_tile_bytes(KS, DK));
        float alpha[2];
        sm.step<KS / 8>(s, scale_log2, lane, [&](int col, int half) { return i * KS + col < row_vis[half]; }, alpha);
        frag_scale_rows<DV / 8>(o, alpha);
        mma_pv<DT, KS / 16, DV / 8, LDV>(o, s, v_lane + buf * fsa_tile_bytes(KS, DV));
    }

    cp_async_wait<0>();  // with no stage at all, the query rows' copies are still in flight

    float inv[2], lse2[2];
    sm.finish(inv, lse2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        if (row_tok[half] < 0) continue;
        const int r = frag_row(lane, 2 * half);
        const long long t = tile.tok0 + row_tok[half], qh = (long long)h * G + Rows::head(r);
        u16 *orow = view_row<u16>(p.o, t, qh);
#pragma unroll
        for (int j = 0; j < DV / 8; j++)
            *(u32 *)(orow + frag_col(lane, j, 0)) = DT::pack(o[j][2 * half] * inv[half], o[j][2 * half + 1] * inv[half]);
        if ((lane & 3) == 0) ((float *)p.lse)[qh * p.total_tokens + t] = inv[half] > 0.f ? lse2[half] * LN2 : -FSA_INF;
    }
}
