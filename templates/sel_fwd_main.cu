// FSA forward, main kernel: a CTA takes one work item = one (KV head, key
// block) and up to CHUNK (token, slot) pairs of that block's list. K and V of
// the block are loaded once; the tile rows pack (token, head-in-group), so the
// G heads of a token share the block and no row is padding. Each pair's
// partial output is normalized by its own row sum and written with its
// log2-sum-exp; the reduction kernel merges the partials of a token. Q and K
// are D wide, V and the outputs DV wide.
#include "sel_fwd_rows.cuh"
#include "fsa_gather.cuh"
#include "fsa_softmax.cuh"

using namespace fsa;
typedef dtype_{{DTYPE}} DT;
constexpr int D = {{HEAD_DIM}}, DV = {{VALUE_DIM}}, G = {{GROUP}}, BK = {{BLOCK_SIZE}};
constexpr int THREADS = fsa_fwd_threads(D, DV), ROWS = fsa_fwd_rows(D, DV), TILES = fsa_fwd_tiles(D, DV);
constexpr int TOK = fsa_fwd_tokens_per_tile(G, D, DV);  // tokens per tile
constexpr int CHUNK = fsa_fwd_item_entries(G, D, DV);   // list entries per work item
constexpr int KT = BK < 64 ? BK : 64;            // keys per softmax step
constexpr int LD = fsa_pitch(D), LDV = fsa_pitch(DV);
constexpr int LDQ = fsa_fwd_q_pitch(D, DV);      // query tiles, also the output staging
constexpr u32 Q_TILE_BYTES = fsa_fwd_q_tile_bytes(D, DV);
// LAYOUT: FSA_SEL_LAYOUT_FWD_ONE_STAGE or 0 (fsa_sel_layout_fit): one query tile in flight instead of
// FSA_FWD_STAGES on targets whose shared memory holds no more. Enumerators, not variables: the default
// kernel's module keeps its globals, so its machine code stays what it was.
enum : int { LAYOUT = {{SEL_LAYOUT=0}}, STAGES = fsa_fwd_stages(LAYOUT) };
static_assert(TOK >= 1, "GROUP must be at most 64");
static_assert(D % 16 == 0 && DV % 16 == 0 && BK % 16 == 0, "head dims and block size are multiples of 16");

typedef RowTable<TILES * ROWS> Rows;
static_assert(sizeof(Rows) == fsa_fwd_smem_k(), "the row table opens the shared-memory layout");

// This warp's 16 rows of tile `tile` into its rows of a stage buffer (dst:
// the buffer). Each warp loads and reads only its own rows, so a tile costs
// no CTA barrier.
__device__ __forceinline__ void load_q_rows(u32 dst, const Rows &rt, int tile, int warp, int lane) {
    const u16 *const *rows = rt.q_row + tile * ROWS + warp * 16;
    const u32 d = dst + (u32)(warp * 16 * LDQ) * 2;
    if constexpr (gather_rows_fits<D, 32>()) {
        load_rows_async<16, D, LDQ, 32>(d, rows, lane);
    } else {
        for (int i = lane; i < 16 * (D / 8); i += 32) {
            const int r = i / (D / 8), c = (i - r * (D / 8)) * 8;
            cp_async16(d + (u32)(r * LDQ + c) * 2, rows[r] + c, true);
        }
    }
}

// Up to head dims of 128, two blocks of eight warps per SM (128 registers): the kernel
// is bound by latency, so resident warps matter more than prefetch depth.
extern "C" __global__ void __launch_bounds__(THREADS, fsa_max_dim(D, DV) <= 128 ? 2 : 1) fsa_sel_fwd_main(const fsa_sel_params p) {
    extern __shared__ __align__(16) unsigned char smem[];
    Rows &rt = *(Rows *)smem;
    u16 *Qs = (u16 *)(smem + fsa_fwd_smem_q(D, DV, BK));           // the query tiles in flight
    // Shared-memory addresses, once: the loops below only add constants.
    const u32 ks_addr = smem_addr(smem) + fsa_fwd_smem_k(), vs_addr = smem_addr(smem) + fsa_fwd_smem_v(D, BK);
    const u32 qs_addr = smem_addr(Qs);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int total_work = ((const int *)p.work_offsets)[p.num_kv_heads * p.nb_total];
    const float scale_log2 = (float)p.scale_log2;
    const u32 a_off = warp * 16 * LDQ * 2 + ldm_lane_a(lane, LDQ);  // this warp's Q rows (A)
    const u32 bk_off = ldm_lane_b(lane, LD);                       // K rows (B)
    const u32 bv_off = ldm_lane_a(lane, LDV);                      // V rows (B, transposed)

    for (int w = blockIdx.x; w < total_work; w += gridDim.x) {
        const WorkItem it = work_item<BK, CHUNK>(p, w);
        const int h = it.h, kb0 = it.kb0, nk = it.nk, n_ent = it.n_ent;
        __syncthreads();  // the previous work item is done with shared memory
        build_row_table<G, ROWS, THREADS>(rt, p, it.ent, n_ent, h);

        // K and V of the block, zero past the end of the sequence.
        const u16 *kg = view_row<const u16>(p.k, 0, h);
        const u16 *vg = view_row<const u16>(p.v, 0, h);
        load_tiles_async<BK, D, LD, DV, LDV, THREADS>(ks_addr, vs_addr, [&](int r) {
            const bool ok = r < nk;
            const long long key = (long long)kb0 + (ok ? r : 0);
            return RowPair{kg + key * p.k.token_stride, vg + key * p.v.token_stride, ok};
        });
        __syncthreads();  // the row table is complete
        const int ntiles = (n_ent + TOK - 1) / TOK;
        WarpRing<STAGES> ring;
        auto load = [&](int tile, int buf) { load_q_rows(qs_addr + buf * Q_TILE_BYTES, rt, tile, warp, lane); };
        ring.start(ntiles, load);  // this thread's K and V copies join tile 0's group

        for (int tile = 0; tile < ntiles; tile++) {
            const int buf = ring.acquire(tile, load);
            if (tile == 0) __syncthreads();  // every thread's K and V copies have landed
            u16 *Qb = Qs + buf * ROWS * LDQ;
            const u32 qb_addr = qs_addr + buf * Q_TILE_BYTES;
            const LaneTokens tok = lane_tokens(rt, tile * ROWS + warp * 16, lane);
            float o_acc[DV / 8][4];
            frag_zero<DV / 8>(o_acc);
            OnlineSoftmax sm;
            sm.init();
#pragma unroll 1
            for (int kt = 0; kt < BK; kt += KT) {
                float s[KT / 8][4];
                frag_zero<KT / 8>(s);
                mma_abt<DT, D, KT / 8, LD>(s, qb_addr + a_off, ks_addr + bk_off + (u32)(kt * LD) * 2);
                float alpha[2];
                causal_step<KT>(sm, s, scale_log2, lane, tok, kb0 + kt, alpha);
                if (kt > 0) frag_scale_rows<DV / 8>(o_acc, alpha);  // nothing to rescale before the first step
                mma_pv<DT, KT / 16, DV / 8, LDV>(o_acc, s, vs_addr + bv_off + (u32)(kt * LDV) * 2);
            }

            // Normalize, stage the 16 x DV tile in this warp's own Q rows, then
            // write 16-byte pieces of whole rows.
            float inv[2], lse2[2];
            sm.finish(inv, lse2);
            __syncwarp();
            frag_scale_rows<DV / 8>(o_acc, inv);
            frag_store_rows<DT, DV / 8, LDQ>(qb_addr + (u32)(warp * 16 * LDQ) * 2, o_acc, lane);
            store_partial_rows<DV>(p, rt, tile * ROWS + warp * 16, lse2, lane,
                                   [&](int r, int c) { return Qb + (warp * 16 + r) * LDQ + c; });
        }
    }
}
