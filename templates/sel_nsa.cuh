// What the NSA-order kernels share: a CTA owns one query token and one KV
// head, compacts the token's valid selected blocks, and streams their keys
// in stages of FSA_NSA_STAGE_KEYS rows of K (D wide) and V (DV wide), 16 per
// warp.
#pragma once
#include "sel_common.cuh"
#include "fsa_pipeline.cuh"

// Stage buffers of the key stream: FSA_NSA_STAGES, or what the kernel defines
// before including this header (its layout's: fsa_nsa_fwd_stages,
// fsa_nsa_dq_stages). A macro, not a template parameter, so that the default
// kernels' types, and with them their PTX, stay what they were.
#ifndef FSA_NSA_KERNEL_STAGES
#define FSA_NSA_KERNEL_STAGES FSA_NSA_STAGES
#endif

namespace fsa {

constexpr int NSA_WARPS = FSA_NSA_WARPS;
constexpr int NSA_THREADS = FSA_NSA_THREADS;
constexpr int NSA_STAGE = FSA_NSA_STAGE_KEYS;
constexpr int NSA_ROWS = FSA_NSA_ROWS;

// Valid slots of the token's top-k row (slot_valid) compacted in slot order
// into block_start (first key of each block). raw and valid are
// FSA_MAX_TOP_K-entry scratch arrays in shared memory. Every thread calls
// this; returns the number of valid blocks.
__device__ __forceinline__ int nsa_select_blocks(int *block_start, int *raw, int *valid, const fsa_sel_params &p,
                                                 int h, long long t, long long seq_start, int block_size) {
    const int tid = threadIdx.x, K = (int)p.top_k;
    const int own_block = (int)((t - seq_start) / block_size);
    const int *row = view_row<const int>(p.topk, t, h);
    if (tid < K) raw[tid] = __ldg(row + tid);
    __syncthreads();
    if (tid < K) valid[tid] = slot_valid(raw, tid, own_block);
    __syncthreads();
    if (tid < K && valid[tid]) {
        int pos = 0;
        for (int s = 0; s < tid; s++) pos += valid[s];
        block_start[pos] = (int)(seq_start + (long long)raw[tid] * block_size);
    }
    int n_valid = 0;
    for (int s = 0; s < K; s++) n_valid += valid[s];
    __syncthreads();
    return n_valid;
}

// Stage `stage` of the concatenated selected keys: NSA_STAGE rows of K and V
// into buffers of pitch D + 8 and DV + 8 (zero past the end), and each row's
// key index in keyb (INT_MAX for padding, which the causal test then masks).
template <int D, int DV, int BK>
__device__ __forceinline__ void nsa_load_stage(const fsa_sel_params &p, u32 ks, u32 vs, int *keyb,
                                               const int *block_start, int stage, int total_keys, int h,
                                               long long seq_end) {
    const u16 *kg = view_row<const u16>(p.k, 0, h);
    const u16 *vg = view_row<const u16>(p.v, 0, h);
    // One pass over the pieces of the wider row: a piece past D (or DV) copies no K (or V).
    for_each_piece<NSA_STAGE, fsa_max_dim(D, DV), NSA_THREADS>([&](int r, int c) {
        const int pos = stage * NSA_STAGE + r;
        long long key = pos < total_keys ? (long long)block_start[pos / BK] + pos % BK : seq_end;
        const bool ok = key < seq_end;
        if (c == 0) keyb[r] = ok ? (int)key : 0x7fffffff;
        if (!ok) key = 0;
        if (D == DV || c < D) cp_async16(ks + (u32)(r * (D + 8) + c) * 2, kg + key * p.k.token_stride + c, ok);
        if (D == DV || c < DV) cp_async16(vs + (u32)(r * (DV + 8) + c) * 2, vg + key * p.v.token_stride + c, ok);
    });
}

// Shared memory of the key stream.
struct NsaShared {
    int raw[FSA_MAX_TOP_K], valid[FSA_MAX_TOP_K];
    int block_start[FSA_MAX_TOP_K];                  // first key of each valid selected block
    int keyidx[FSA_NSA_KERNEL_STAGES][NSA_STAGE];    // key index of each stage row (INT_MAX: padding)
};

// The key stream of an NSA-order CTA (blockIdx.x: token of the chunk,
// blockIdx.y: KV head and head group): the token's valid selected blocks
// concatenated, in stages of NSA_STAGE keys in FSA_NSA_KERNEL_STAGES buffers
// at ks and vs (shared byte addresses; FSA_NSA_STAGES by default, one in the
// small layout, where a stage's copies start once every warp is done with the
// previous one; K rows D wide, V rows DV wide). Use:
//   NsaStream<D, DV, G, BK> ks_stream(sh, p, ks, vs);  // every thread; selects the blocks
//   ... issue the query-row copies ...
//   ks_stream.start();                             // they join stage 0's group
//   for (int st = 0; st < ks_stream.n_stages; st++) {
//       const int buf = ks_stream.acquire(st);     // stage st is in buffer buf
//       ... keys(buf, warp)[c] is the key index of the warp's column c ...
//   }
template <int D, int DV, int G, int BK>
struct NsaStream {
    static_assert(D % 16 == 0 && DV % 16 == 0 && BK % 16 == 0, "head dims and block size are multiples of 16");
    static constexpr int HEAD_GROUPS = fsa_nsa_head_groups(G);
    static constexpr u32 K_STAGE_BYTES = fsa_nsa_stage_bytes(D), V_STAGE_BYTES = fsa_nsa_stage_bytes(DV);

    NsaShared &sh;
    const fsa_sel_params &p;
    u32 ks, vs;
    long long tl, t;  // the token: offset in the chunk, index
    int h, hg;        // KV head, head group (tile row r is head hg * NSA_ROWS + r of the group)
    SeqBounds sb;
    int total_keys, n_stages;
    AsyncRing<FSA_NSA_KERNEL_STAGES> ring;

    __device__ __forceinline__ NsaStream(NsaShared &sh_, const fsa_sel_params &p_, u32 ks_, u32 vs_)
        : sh(sh_), p(p_), ks(ks_), vs(vs_) {
        tl = blockIdx.x;
        t = p.t0 + tl;
        h = blockIdx.y / HEAD_GROUPS;
        hg = blockIdx.y - h * HEAD_GROUPS;
        sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
        total_keys = nsa_select_blocks(sh.block_start, sh.raw, sh.valid, p, h, t, sb.start, BK) * BK;
        n_stages = (total_keys + NSA_STAGE - 1) / NSA_STAGE;
    }

    // Group head of tile row r; rows with group_head(r) >= G are padding.
    __device__ __forceinline__ int group_head(int r) const { return hg * NSA_ROWS + r; }

    __device__ __forceinline__ void start() { ring.start(n_stages, loader()); }
    __device__ __forceinline__ int acquire(int st) { return ring.acquire(st, loader()); }
    __device__ __forceinline__ const int *keys(int buf, int warp) const { return sh.keyidx[buf] + warp * 16; }

  private:
    __device__ __forceinline__ auto loader() {
        return [this](int st, int buf) {
            nsa_load_stage<D, DV, BK>(p, ks + buf * K_STAGE_BYTES, vs + buf * V_STAGE_BYTES, sh.keyidx[buf],
                                      sh.block_start, st, total_keys, h, sb.end);
        };
    }
};

// Row merge area of the NSA kernels once the key loop is done: the K and V
// stage buffers (K rows D wide, V rows DV wide), as NSA_WARPS x 16 rows of W
// floats. Two stages hold it; one may not (W over the other dim + 16), and
// the kernel's dynamic shared memory then reaches past the stages
// (fsa_nsa_merge_bytes; the kernels assert it).
template <int D, int DV, int W>
__device__ __forceinline__ float *nsa_merge_area(unsigned char *stage_buffers) {
    static_assert(FSA_NSA_KERNEL_STAGES < FSA_NSA_STAGES ||
                      FSA_NSA_KERNEL_STAGES * (fsa_nsa_stage_bytes(D) + fsa_nsa_stage_bytes(DV)) >= fsa_nsa_merge_bytes(W),
                  "the default layout's merge area fits in its stage buffers");
    return (float *)stage_buffers;
}

}  // namespace fsa
