// NSA-order forward: a CTA owns one query token, one KV head and up to 16 of
// the group's query heads (the tile rows). It walks the token's selected
// blocks 64 keys per stage with online softmax; each of the 4 warps takes 16
// keys of every stage, and the warps' partial results merge at the end.
// No workspace. Wins when the group is large enough to fill the rows.
#include "sel_nsa.cuh"
#include "fsa_softmax.cuh"

#define HEAD_DIM {{HEAD_DIM}}
#define GROUP {{GROUP}}
#define BLOCK_SIZE {{BLOCK_SIZE}}
typedef fsa::dtype_{{DTYPE}} DT;

using namespace fsa;

constexpr int D = HEAD_DIM, G = GROUP, BK = BLOCK_SIZE;
constexpr int HEAD_GROUPS = fsa_nsa_head_groups(G);
constexpr int LD = fsa_pitch(D);
constexpr u32 STAGE_BYTES = fsa_nsa_stage_bytes(D);
static_assert(D % 16 == 0 && BK % 16 == 0, "head dim and block size are multiples of 16");
static_assert(FSA_NSA_STAGES == 2 && 2 * FSA_NSA_STAGES * STAGE_BYTES >= NSA_WARPS * 16 * D * 4,
              "merge area fits in the K/V buffers");

extern "C" __global__ void __launch_bounds__(NSA_THREADS) fsa_sel_fwd_nsa(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int raw[FSA_MAX_TOP_K];
    __shared__ int valid[FSA_MAX_TOP_K];
    __shared__ int block_start[FSA_MAX_TOP_K];  // first key of each valid selected block
    __shared__ int keyidx[FSA_NSA_STAGES][NSA_STAGE];  // key index of each stage row
    __shared__ float ml[NSA_WARPS][16][2];      // per-warp row max and sum for the merge
    const u32 qs = smem_addr(smem), ks = qs + fsa_nsa_fwd_smem_k(D), vs = qs + fsa_nsa_fwd_smem_v(D);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long t = p.t0 + blockIdx.x;
    const int h = blockIdx.y / HEAD_GROUPS;
    const int hg = blockIdx.y - h * HEAD_GROUPS;

    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
    const int n_valid = nsa_select_blocks(block_start, raw, valid, p, h, t, sb.start, BK);

    // Query rows: heads hg*16 .. hg*16+15 of the group; rows past G are zero.
    const u16 *q = (const u16 *)p.q.ptr;
    load_tile_async<16, D, LD, NSA_THREADS>(qs, [&](int r) {
        const int gi = hg * 16 + r;
        return RowSrc{gi < G ? view_row<const u16>(p.q, t, h * G + gi) : q, gi < G};
    });
    const int total_keys = n_valid * BK;
    AsyncRing<FSA_NSA_STAGES> ring;
    auto load_stage = [&](int st, int buf) {
        nsa_load_stage<D, BK>(p, ks + buf * STAGE_BYTES, vs + buf * STAGE_BYTES, keyidx[buf], block_start, st,
                              total_keys, h, sb.end);
    };
    const int n_stages = (total_keys + NSA_STAGE - 1) / NSA_STAGE;
    ring.start(n_stages, load_stage);  // with the query rows

    const float scale_log2 = (float)p.scale_log2;
    // Shared-memory addresses, once: the loop below only adds constants.
    const u32 q_addr = qs + ldm_lane_a(lane, LD);
    const u32 k_addr = ks + warp * 16 * LD * 2 + ldm_lane_b(lane, LD);  // this warp's 16 keys
    const u32 v_addr = vs + warp * 16 * LD * 2 + ldm_lane_a(lane, LD);
    float o_acc[D / 8][4];
    frag_zero<D / 8>(o_acc);
    OnlineSoftmax sm;
    sm.init();

    for (int st = 0; st < n_stages; st++) {
        const int buf = ring.acquire(st, load_stage);
        const int *keys = keyidx[buf] + warp * 16;
        float s[2][4];
        frag_zero<2>(s);
        mma_abt<DT, D, 2, LD>(s, q_addr, k_addr + buf * STAGE_BYTES);
        float alpha[2];
        sm.step<2>(s, scale_log2, lane, [&](int col, int) { return keys[col] <= t; }, alpha);
        frag_scale_rows<D / 8>(o_acc, alpha);
        mma_pv<DT, 1, D / 8, LD>(o_acc, s, v_addr + buf * STAGE_BYTES);
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    // Merge the four warps' (max, sum, unnormalized O) per row.
    const WarpMerge<NSA_WARPS, D> merge{(float *)(smem + fsa_nsa_fwd_smem_k(D)), ml};
    merge.put(sm, o_acc, warp, lane);
    __syncthreads();
    for (int c = tid; c < 16 * (D / 2); c += NSA_THREADS) {
        const int r = c / (D / 2), d = (c - r * (D / 2)) * 2;
        const int gi = hg * 16 + r;
        if (gi >= G) continue;
        float v[2], mmax;
        const float l = merge.get(r, d, v, &mmax);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        *(u32 *)(view_row<u16>(p.o, t, h * G + gi) + d) = DT::pack(v[0] * inv, v[1] * inv);
        if (d == 0 && p.lse)
            ((float *)p.lse)[(long long)(h * G + gi) * p.total_tokens + t] = l > 0.f ? (mmax + fast_log2(l)) * LN2 : -FSA_INF;
    }
}
