// Query tiles for kernels in which a CTA walks the keys of one sequence:
// the tile of packed query tokens a CTA owns (found from cu_seqlens alone,
// without a host-built table) and the (token, head-in-group) rows of its warps.
//
//   const QueryTile tile = query_tile<TT>(cu_seqlens, batch, total_tokens, blockIdx.x);
//   if (!tile.ok) return;                       // a spare CTA past its sequence
//   // rows: warp w, row r (0..15) is token w * GroupRows<G>::TW + r / G, head r % G
#pragma once
#include "fsa_pipeline.cuh"
#include "fsa_qt_layout.cuh"

namespace fsa {

// Stages of KS keys that hold n keys, in 64 bits: n + KS - 1 passes int32
// within KS of INT32_MAX visible keys.
template <int KS>
__device__ __forceinline__ int key_stages(int n) { return (int)(((long long)n + KS - 1) / KS); }

// Tile `tile` of sequence `seq`: tokens [tok0, tok0 + n_tok) inside [start, end).
struct QueryTile {
    long long start, end;  // the sequence's packed tokens, clamped into [0, total]
    long long tok0;
    int n_tok;
    int seq;
    bool ok;  // false: the CTA has no tokens (the grid has a spare tile per sequence)
};

// CTA x of a grid of fsa_qt_grid_tiles CTAs: tile i of sequence b is
// x = start_b / TT + b + i (monotone in b, and start_{b+1} / TT + b + 1 -
// start_b / TT - b >= ceil(len_b / TT), so every tile has a CTA). The
// sequence is the last b whose first CTA is <= x. The tiles of a sequence go
// out longest-first: with LAST_FIRST (query tiles: later tokens see more keys)
// CTA 0 of a sequence takes its last tile, otherwise its first (key tiles:
// earlier keys are seen by more queries).
template <int TT, bool LAST_FIRST = true>
__device__ __forceinline__ QueryTile query_tile(const int *cu_seqlens, int batch, long long total, long long x) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = lo + ((hi - lo + 1) >> 1);  // lo + hi + 1 passes int32 past 2^30 sequences
        const long long s = min(max((long long)__ldg(cu_seqlens + mid), 0ll), total);
        if (s / TT + mid <= x) lo = mid;
        else hi = mid - 1;
    }
    QueryTile t;
    t.seq = lo;
    t.start = min(max((long long)__ldg(cu_seqlens + lo), 0ll), total);
    t.end = min(max((long long)__ldg(cu_seqlens + lo + 1), t.start), total);
    const long long i = x - (t.start / TT + lo);
    const long long n_tiles = (t.end - t.start + TT - 1) / TT;
    t.ok = i >= 0 && i < n_tiles;
    const long long tile = LAST_FIRST ? n_tiles - 1 - i : i;
    t.tok0 = t.start + tile * TT;
    t.n_tok = t.ok ? (int)min((long long)TT, t.end - t.tok0) : 0;
    return t;
}

// The query tile of this CTA (blockIdx.x) for group size G, in a kernel
// whose parameter block p names cu_seqlens, batch and total_tokens.
template <int G, class P>
__device__ __forceinline__ QueryTile cta_query_tile(const P &p) {
    return query_tile<fsa_qt_tokens_per_tile(G)>((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, blockIdx.x);
}

// The rows of a warp: 16 / G whole tokens of G heads each; rows past
// TW * G are padding (they load zeros and write nothing).
template <int G>
struct GroupRows {
    static_assert(G >= 1 && G <= 16, "a token's heads fit in one warp's 16 rows");
    static constexpr int TW = 16 / G;  // tokens per warp
    // Token (within the tile) of row r of warp w; head of row r in the group.
    static __device__ __forceinline__ int token(int warp, int r) { return warp * TW + r / G; }
    static __device__ __forceinline__ int head(int r) { return r % G; }
    static __device__ __forceinline__ bool used(int r) { return r < TW * G; }
    // Row r of warp w holds a token of the tile.
    static __device__ __forceinline__ bool live(int warp, int r, int n_tok) {
        return used(r) && token(warp, r) < n_tok;
    }
};

// Row `row` of a query tile (set row >> 4, row row & 15 of GroupRows): its source, or the tensor's base
// and ok = false where it holds no token.
template <int G>
__device__ __forceinline__ RowSrc query_row_src(const fsa_kernel_view &q, const QueryTile &tile, int h, int row) {
    typedef GroupRows<G> Rows;
    const int w = row >> 4, r = row & 15;
    const bool ok = Rows::live(w, r, tile.n_tok);
    const u16 *src = ok ? view_row<const u16>(q, tile.tok0 + Rows::token(w, r), (long long)h * G + Rows::head(r))
                        : (const u16 *)q.ptr;
    return RowSrc{src, ok};
}
// Whether load_query_rows_async steps its addresses (below), and the band of a row's pieces it steps.
__device__ constexpr bool query_rows_step_ok(int step) { return step >= 8 && (step & (step - 1)) == 0; }
__device__ constexpr int query_rows_band(int pieces, int threads) {
    return threads % pieces == 0 && query_rows_step_ok(threads / pieces) ? pieces
           : pieces % 8 == 0 && threads % 8 == 0 && query_rows_step_ok(threads / 8) ? 8
                                                                                      : 0;
}
// The query rows of a tile into shared memory (pitch LD), zeros for rows
// without a token: row w * 16 + r is token tok0 + token(w, r), query head
// h * G + head(r) (w counts sets of 16 rows: a warp may own more than one).
// ROWS rows (FSA_QT_ROWS unless the kernel's warps own more); THREADS
// threads share the copies, which join the current cp.async group. SW128:
// into a 128-byte swizzled tile (sw128_offset) instead, LD unused; tid >= 0:
// the THREADS threads are a group in which the caller is number tid.
//
// Where a band of a row's pieces (the whole row, or else one 64-column panel)
// divides THREADS into a row step that is a power of two of at least 8 (D 128
// over 128 or 256 threads, D 192 over 128), a thread's pieces of a band
// share one column and their rows differ by multiples of that step: at most
// two (token-in-set, head) patterns, the same swizzle phase, and whole sets
// of 16 rows between them. Their addresses are then worked out once per
// call and stepped, instead of piece by piece: the walks that copy a query
// tile per stage (the key-tile backward) spent about half their issued
// instructions on those addresses.
template <int G, int D, int LD, int THREADS, int ROWS = FSA_QT_ROWS, bool SW128 = false>
__device__ __forceinline__ void load_query_rows_async(u32 dst, const fsa_kernel_view &q, const QueryTile &tile, int h,
                                                      int tid = -1) {
    constexpr int PIECES = D / 8, BAND = query_rows_band(PIECES, THREADS), STEP = BAND ? THREADS / BAND : 0;
    constexpr bool STEPPED = BAND && ROWS % STEP == 0 && ROWS % 16 == 0;
    if constexpr (STEPPED) {
        typedef GroupRows<G> Rows;
        if (tid < 0) tid = threadIdx.x;
        if (tid >= THREADS) return;  // (THREADS threads take every piece)
        const int r0 = tid / BAND, c0 = (tid % BAND) * 8;
        // The thread's rows r0 + STEP k: with STEP 8 row r0 of set k / 2 (k even) or row r0 + 8 of it
        // (k odd); with STEP >= 16 row r0 & 15 of set (r0 >> 4) + k STEP / 16.
        const int r16[2] = {STEP == 8 ? r0 : r0 & 15, STEP == 8 ? r0 + 8 : r0 & 15};
        const int set0 = STEP == 8 ? 0 : r0 >> 4;
        const u16 *const base = view_row<const u16>(q, tile.tok0, (long long)h * G) + c0;
        const long long set_step = (long long)Rows::TW * q.token_stride;  // one set of 16 rows further
        const u16 *src[2];
        int tok[2];
        bool used[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            tok[e] = Rows::token(set0, r16[e]);
            used[e] = Rows::used(r16[e]);
            src[e] = base + tok[e] * q.token_stride + Rows::head(r16[e]) * q.head_stride;
        }
#pragma unroll
        for (int b = 0; b < PIECES / BAND; b++) {
            const int c = c0 + b * BAND * 8;
            const u32 d0 = dst + (SW128 ? sw128_offset(r0, c, ROWS) : (u32)(r0 * LD + c) * 2);
#pragma unroll
            for (int k = 0; k < ROWS / STEP; k++) {
                const int e = STEP == 8 ? k & 1 : 0, sets = STEP == 8 ? k >> 1 : k * (STEP / 16);
                const bool ok = used[e] && tok[e] + sets * Rows::TW < tile.n_tok;
                const u32 d = d0 + (u32)(k * STEP) * (SW128 ? 128u : (u32)LD * 2u);
                cp_async16(d, ok ? src[e] + sets * set_step + b * BAND * 8 : (const u16 *)q.ptr, ok);
            }
        }
    } else {
        auto row_src = [&](int row) { return query_row_src<G>(q, tile, h, row); };
        if constexpr (SW128) load_tile_sw128_async<ROWS, D, THREADS>(dst, row_src, tid);
        else load_tile_async<ROWS, D, LD, THREADS>(dst, row_src, tid);
    }
}
// Rows first .. first + PART - 1 of a swizzled tile of ROWS query rows (as
// load_query_rows_async with SW128), copied by THREADS threads (tid: the
// caller's number among them).
template <int G, int D, int THREADS, int ROWS, int PART>
__device__ __forceinline__ void load_query_part_sw128_async(u32 dst, const fsa_kernel_view &q, const QueryTile &tile,
                                                            int h, int first, int tid) {
    for_each_piece<PART, D, THREADS>(
        [&](int r, int c) {
            const RowSrc s = query_row_src<G>(q, tile, h, first + r);
            cp_async16(dst + sw128_offset(first + r, c, ROWS), s.ptr + c, s.ok);
        },
        tid);
}

// The K rows (HALF 0) or the V rows (HALF 1) of keys first .. first + ROWS -
// 1 of a key stream into a stage buffer of D columns (pitch fsa_pitch(D);
// SW128: a 128-byte swizzled tile); key_rows(j) -> RowPair{k row, v row,
// ok}. THREADS threads share the copies, which join the current cp.async
// group.
template <int ROWS, int D, int HALF, bool SW128 = false, int THREADS = FSA_QT_THREADS, class KeyRows>
__device__ __forceinline__ void load_key_half_async(u32 dst, KeyRows key_rows, int first) {
    auto src = [&](int r) {
        const RowPair kv = key_rows(first + r);
        return RowSrc{HALF == 0 ? kv.a : kv.b, kv.ok};
    };
    if constexpr (SW128) load_tile_sw128_async<ROWS, D, THREADS>(dst, src);
    else load_tile_async<ROWS, D, fsa_pitch(D), THREADS>(dst, src);
}

// Keys first .. first + KS - 1 of a key stream into a K and a V stage buffer.
template <int KS, int DK, int DV, bool SW128 = false, int THREADS = FSA_QT_THREADS, class KeyRows>
__device__ __forceinline__ void load_key_stage_async(u32 k_dst, u32 v_dst, KeyRows key_rows, int first) {
    load_key_half_async<KS, DK, 0, SW128, THREADS>(k_dst, key_rows, first);
    load_key_half_async<KS, DV, 1, SW128, THREADS>(v_dst, key_rows, first);
}

}  // namespace fsa
