// NSA-order forward: a CTA owns one query token, one KV head and up to 16 of
// the group's query heads (the tile rows). It walks the token's selected
// blocks 64 keys per stage with online softmax; each of the 4 warps takes 16
// keys of every stage, and the warps' partial results merge at the end.
// No workspace. Wins when the group is large enough to fill the rows. Q and
// K are D wide, V and o DV wide.
// LAYOUT: FSA_SEL_LAYOUT_NSA_ONE_STAGE or 0 (fsa_sel_layout_fit): one K and one V stage
// instead of FSA_NSA_STAGES on targets whose shared memory holds no more. An enumerator: the default
// module keeps its globals.
enum : int { LAYOUT = {{SEL_LAYOUT=0}} };
#define FSA_NSA_KERNEL_STAGES fsa_nsa_fwd_stages(LAYOUT)
#include "sel_nsa.cuh"
#include "fsa_softmax.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}};
constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
typedef NsaStream<D, DV, G, BK> Stream;
enum : int { STAGES = FSA_NSA_KERNEL_STAGES };
static_assert(fsa_nsa_fwd_smem_k(D) + fsa_nsa_merge_bytes(DV) <= fsa_nsa_fwd_smem_bytes(D, DV, STAGES),
              "the merge area fits in the dynamic shared memory");

extern "C" __global__ void __launch_bounds__(NSA_THREADS) fsa_sel_fwd_nsa(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ NsaShared sh;
    __shared__ float ml[NSA_WARPS][16][2];  // per-warp row max and sum for the merge
    static_assert(sizeof(NsaShared) + sizeof(ml) == fsa_nsa_fwd_smem_static(STAGES), "the plan counts this static memory");
    const u32 qs = smem_addr(smem), ks = qs + fsa_nsa_fwd_smem_k(D), vs = qs + fsa_nsa_fwd_smem_v(D, STAGES);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    Stream in(sh, p, ks, vs);
    const long long t = in.t;

    // Query rows: heads hg*16 .. hg*16+15 of the group; rows past G are zero.
    const u16 *q = (const u16 *)p.q.ptr;
    load_tile_async<16, D, LD, NSA_THREADS>(qs, [&](int r) {
        const int gi = in.group_head(r);
        return RowSrc{gi < G ? view_row<const u16>(p.q, t, in.h * G + gi) : q, gi < G};
    });
    in.start();

    const float scale_log2 = (float)p.scale_log2;
    // Shared-memory addresses, once: the loop below only adds constants.
    const u32 q_addr = qs + ldm_lane_a(lane, LD);
    const u32 k_addr = ks + warp * 16 * LD * 2 + ldm_lane_b(lane, LD);  // this warp's 16 keys
    const u32 v_addr = vs + warp * 16 * LDV * 2 + ldm_lane_a(lane, LDV);
    float o_acc[DV / 8][4];
    frag_zero<DV / 8>(o_acc);
    OnlineSoftmax sm;
    sm.init();

    for (int st = 0; st < in.n_stages; st++) {
        const int buf = in.acquire(st);
        const int *keys = in.keys(buf, warp);
        float s[2][4];
        frag_zero<2>(s);
        mma_abt<DT, D, 2, LD>(s, q_addr, k_addr + buf * Stream::K_STAGE_BYTES);
        float alpha[2];
        sm.step<2>(s, scale_log2, lane, [&](int col, int) { return keys[col] <= t; }, alpha);
        frag_scale_rows<DV / 8>(o_acc, alpha);
        mma_pv<DT, 1, DV / 8, LDV>(o_acc, s, v_addr + buf * Stream::V_STAGE_BYTES);
    }
    cp_async_wait<0>();
    __syncthreads();  // the K/V buffers become the merge area

    // Merge the four warps' (max, sum, unnormalized O) per row.
    const WarpMerge<NSA_WARPS, DV> merge{nsa_merge_area<D, DV, DV>(smem + fsa_nsa_fwd_smem_k(D)), ml};
    merge.put(sm, o_acc, warp, lane);
    __syncthreads();
    for (int c = tid; c < 16 * (DV / 2); c += NSA_THREADS) {
        const int r = c / (DV / 2), d = (c - r * (DV / 2)) * 2;
        const int qh = in.h * G + in.group_head(r);
        if (in.group_head(r) >= G) continue;
        float v[2], mmax;
        const float l = merge.get(r, d, v, &mmax);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        *(u32 *)(view_row<u16>(p.o, t, qh) + d) = DT::pack(v[0] * inv, v[1] * inv);
        if (d == 0 && p.lse)
            ((float *)p.lse)[qh * p.total_tokens + t] = l > 0.f ? (mmax + fast_log2(l)) * LN2 : -FSA_INF;
    }
}
