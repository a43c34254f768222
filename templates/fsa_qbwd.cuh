// The backward of query-tile attention, deterministic, as two blocks that a
// kernel composes with its own key stream and visibility rule:
//  backward_dq_tile:  the forward's query tile; delta = rowsum(dO * O) of the
//                     tile's rows (also written to p.delta for the dK/dV
//                     pass), then per stage of keys S = Q K^T, P with the
//                     forward's lse, dP = dO V^T, dS = P (dP - delta),
//                     dq += dS K.
//  backward_dkv_tile: a CTA owns FSA_QT_DKV_KEYS keys of one sequence (16 per
//                     warp, two sets of warps splitting each query tile's
//                     rows) and walks the query tiles that see them (all G
//                     heads of each token as rows): dV += P^T dO, dK += dS^T Q.
// Every output element has one owner and its sums run in a fixed order: no
// atomics, the same inputs give the same bits.
//
// P, the kernel's parameter block, names the views q, o, k, v, dout, dq, dk,
// dv, the float [Hq, T] addresses lse and delta, total_tokens and scale_log2,
// and the optional float [T, Hq] views gate and gate_grad: with a gate, dout
// is the gradient of gate * o, and each row's gate g enters P (P' = g P: dV =
// P'^T dO and dS = P' (dP - delta) are then exact with the ungated dO and
// delta, for any sign). dq takes g at its store; the dq kernel also writes
// each row's gated lse word (gated_lse_word) to p.gated_lse, which the dK/dV
// pass reads instead of the forward's lse.
// Shared memory: fsa_qt_dq_smem_at(DK, DV, QB), fsa_qt_dkv_smem_at(DK, DV, QB)
// (QB: the layout, FSA_QT_BWD_*, 0 the default); threads: FSA_QT_THREADS,
// FSA_QT_DKV_THREADS.
#pragma once
#include "fsa_mma.cuh"
#include "fsa_qtile.cuh"

namespace fsa {

// A row's keys, inclusive, as indices of its sequence's keys; hi < lo: none.
struct KeyRange {
    int lo, hi;
};
// The range of a row that sees no key (a padding row): hi = -1 lies below every key index, so the overlap
// tests against a tile's keys [j0, j1] (lo <= j1 && hi >= j0) fail for the sequence's first tile too.
__device__ __forceinline__ KeyRange no_keys() { return KeyRange{0, -1}; }

// A gated row's lse for the dK/dV pass: lse - ln |g|, so that P comes out
// times |g| at no cost, with g's sign in bit 0 of the word (the value moves by
// at most one unit in the last place). A zero gate gives +inf (P = 0), and a
// row without keys (lse -inf: never visible in the dK/dV pass) a word that is
// not finite; neither carries a sign.
__device__ __forceinline__ float gated_lse_word(float lse, float g) {
    const float l = lse - logf(fabsf(g));
    const int negative = g < 0.f && isfinite(l);
    return __int_as_float((__float_as_int(l) & ~1) | negative);
}
// A row table's lse word as a value: in a gated backward, bit 0 is the sign.
__device__ __forceinline__ float row_lse_value(float word, bool gated) {
    return gated ? __int_as_float(__float_as_int(word) & ~1) : word;
}
// Whether any row among this lane's columns of NJ 8-column steps (a row
// table's lse words) has a negative gate, for the whole warp: the sign pass
// below is skipped unless one has (NSA's gates never do).
template <int NJ>
__device__ __forceinline__ bool cols_have_negative_gates(const float *lse_words, int lane) {
    int any = 0;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        any |= __float_as_int(lse_words[frag_col(lane, j, 0)]) | __float_as_int(lse_words[frag_col(lane, j, 1)]);
    return __any_sync(0xffffffffu, any & 1);
}
// P^T (query rows as columns) times the sign of each row's gate.
template <int NJ>
__device__ __forceinline__ void frag_gate_signs(float pt[NJ][4], const float *lse_words, int lane) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int sign = __float_as_int(lse_words[frag_col(lane, j, e)]) << 31;
            pt[j][e] = __int_as_float(__float_as_int(pt[j][e]) ^ sign);
        }
}

// delta of a warp's 16 rows (set `warp` of the tile), kept for the dK/dV
// pass as well (p.delta), as the gate's gradient (p.gate_grad, when wanted)
// and in delta_w (the warp's 16 floats of shared memory); then this lane's
// two rows: live, lse in base 2, delta, gate (1 without p.gate; with one, the
// rows' gated lse words go to p.gated_lse).
// Two lanes a row, each with every other 16-byte piece of its dO and O rows:
// all of a lane's loads are issued before its sums (chunks of 8 pieces), so
// the 16 rows cost one trip to memory instead of one each in series.
template <class DT, int DV, int G, class P>
__device__ __forceinline__ void dq_row_stats(const P &p, const QueryTile &tile, int h, float *delta_w, bool live[2],
                                             float row_lse2[2], float row_dlt[2], float row_gate[2]) {
    typedef GroupRows<G> Rows;
    static_assert(DV % 16 == 0, "a row's pieces split evenly between two lanes");
    constexpr int MINE = DV / 16, CHUNK = MINE < 8 ? MINE : 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float lse[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        live[half] = Rows::live(warp, r, tile.n_tok);
        const long long t = tile.tok0 + Rows::token(warp, r), qh = (long long)h * G + Rows::head(r);
        lse[half] = live[half] ? ((const float *)p.lse)[qh * p.total_tokens + t] : 0.f;
        row_gate[half] = live[half] && p.gate.ptr != 0 ? *view_row<const float>(p.gate, t, qh) : 1.f;
        if (live[half] && p.gate.ptr != 0 && (lane & 3) == 0)
            ((float *)p.gated_lse)[qh * p.total_tokens + t] = gated_lse_word(lse[half], row_gate[half]);
    }
    const int r = lane >> 1, side = lane & 1;
    const bool row_live = Rows::live(warp, r, tile.n_tok);
    const long long t = tile.tok0 + Rows::token(warp, r), qh = (long long)h * G + Rows::head(r);
    float d = 0.f;
    if (row_live) {
        const uint4 *dout = (const uint4 *)view_row<const u16>(p.dout, t, qh) + side;
        const uint4 *o = (const uint4 *)view_row<const u16>(p.o, t, qh) + side;
#pragma unroll
        for (int c = 0; c < MINE; c += CHUNK) {
            uint4 a[CHUNK], b[CHUNK];
#pragma unroll
            for (int i = 0; i < CHUNK && c + i < MINE; i++) a[i] = dout[2 * (c + i)], b[i] = o[2 * (c + i)];
#pragma unroll
            for (int i = 0; i < CHUNK && c + i < MINE; i++) {
                float x[8], y[8];
                unpack8<DT>(x, a[i]);
                unpack8<DT>(y, b[i]);
#pragma unroll
                for (int e = 0; e < 8; e++) d = fmaf(x[e], y[e], d);
            }
        }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    if (row_live && side == 0) {
        delta_w[r] = d, ((float *)p.delta)[qh * p.total_tokens + t] = d;
        if (p.gate_grad.ptr != 0) *view_row<float>(p.gate_grad, t, qh) = d;
    }
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; half++) {
        row_lse2[half] = live[half] ? lse[half] * LOG2E : 0.f;
        row_dlt[half] = live[half] ? delta_w[frag_row(lane, 2 * half)] : 0.f;
    }
}

// The 16 x DK dq accumulator of set `warp` of a query tile, times the
// softmax scale and the row's gate, plus the caller's p.dq_add row when
// there is one (it may be dq itself: each element is read before the same
// thread writes it), into p.dq (this lane's live rows).
template <class DT, int DK, int G, class P>
__device__ __forceinline__ void store_dq_rows(const P &p, const QueryTile &tile, int h, int warp, const bool live[2],
                                              const float gate[2], const float dq[DK / 8][4]) {
    typedef GroupRows<G> Rows;
    const int lane = threadIdx.x & 31;
    const float softmax_scale = (float)(p.scale_log2 * FSA_LN2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = frag_row(lane, 2 * half);
        if (!live[half]) continue;
        const float scale = softmax_scale * gate[half];
        const long long t = tile.tok0 + Rows::token(warp, r), qh = (long long)h * G + Rows::head(r);
        u16 *row = view_row<u16>(p.dq, t, qh);
        if (p.dq_add.ptr != 0) {  // the row's pieces loaded before any store (dq_add may alias dq)
            const u16 *add = view_row<const u16>(p.dq_add, t, qh);
            u32 a[DK / 8];
#pragma unroll
            for (int j = 0; j < DK / 8; j++) a[j] = *(const u32 *)(add + frag_col(lane, j, 0));
#pragma unroll
            for (int j = 0; j < DK / 8; j++)
                *(u32 *)(row + frag_col(lane, j, 0)) =
                    DT::pack(fmaf(dq[j][2 * half], scale, DT::to_float((u16)(a[j] & 0xffffu))),
                             fmaf(dq[j][2 * half + 1], scale, DT::to_float((u16)(a[j] >> 16))));
            continue;
        }
#pragma unroll
        for (int j = 0; j < DK / 8; j++)
            *(u32 *)(row + frag_col(lane, j, 0)) = DT::pack(dq[j][2 * half] * scale, dq[j][2 * half + 1] * scale);
    }
}

// dq of a query tile against a stream of key stages, with the functors of
// attend_query_tile (fsa_qattn.cuh): key_rows(j) -> RowPair{k row, v row, ok},
// visible(j, half), warp_sees(stage). Stages of fsa_qt_dq_keys_at(DK, QB) keys,
// fsa_qt_dq_stages_at(QB) of them in flight.
template <class DT, int DK, int DV, int G, int QB = 0, class P, class KeyRows, class Visible, class WarpSees>
__device__ __forceinline__ void backward_dq_tile(unsigned char *smem, const P &p, const QueryTile &tile, int h,
                                                 int n_stages, KeyRows key_rows, Visible visible, WarpSees warp_sees) {
    static_assert(DK % 16 == 0 && DV % 16 == 0 && DK <= 256 && DV <= 256, "head dims are multiples of 16 up to 256");
    constexpr int KS = fsa_qt_dq_keys_at(DK, QB), STAGES = fsa_qt_dq_stages_at(QB);
    constexpr int LDK = fsa_pitch(DK), LDV = fsa_pitch(DV);
    static_assert(FSA_QT_DQ_STATIC_SMEM == sizeof(float) * FSA_QT_ROWS, "the layout counts the deltas");
    __shared__ float delta_s[FSA_QT_ROWS];  // the tile's rows
    const u32 qs = smem_addr(smem), dos = qs + fsa_qt_dq_smem_do(DK);
    const u32 ks = qs + fsa_qt_dq_smem_k(DK, DV), vs = qs + fsa_qt_dq_smem_v_at(DK, DV, QB);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    load_query_rows_async<G, DK, LDK, FSA_QT_THREADS>(qs, p.q, tile, h);
    load_query_rows_async<G, DV, LDV, FSA_QT_THREADS>(dos, p.dout, tile, h);
    auto load = [&](int i, int buf) {
        load_key_stage_async<KS, DK, DV>(ks + buf * fsa_tile_bytes(KS, DK), vs + buf * fsa_tile_bytes(KS, DV), key_rows,
                                         i * KS);
    };
    AsyncRing<STAGES> ring;
    ring.start(n_stages, load);

    bool live[2];
    float row_lse2[2], row_dlt[2], row_gate[2];
    dq_row_stats<DT, DV, G>(p, tile, h, delta_s + warp * 16, live, row_lse2, row_dlt, row_gate);

    const u32 q_lane = qs + (u32)(warp * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 do_lane = dos + (u32)(warp * 16 * LDV * 2) + ldm_lane_a(lane, LDV);
    const u32 kb_lane = ks + ldm_lane_b(lane, LDK), ka_lane = ks + ldm_lane_a(lane, LDK);
    const u32 vb_lane = vs + ldm_lane_b(lane, LDV);
    const float scale_log2 = (float)p.scale_log2;
    float dq[DK / 8][4];
    frag_zero<DK / 8>(dq);

    for (int i = 0; i < n_stages; i++) {
        const int buf = ring.acquire(i, load);
        if (!warp_sees(i)) continue;  // warp-uniform: no row of this warp sees these keys
        float s[KS / 8][4], dp[KS / 8][4];
        frag_zero<KS / 8>(s);
        frag_zero<KS / 8>(dp);
        mma_abt<DT, DK, KS / 8, LDK>(s, q_lane, kb_lane + buf * fsa_tile_bytes(KS, DK));
        mma_abt<DT, DV, KS / 8, LDV>(dp, do_lane, vb_lane + buf * fsa_tile_bytes(KS, DV));
        frag_map<KS / 8>(s, lane, [&](float x, int col, int half) {  // P
            return live[half] && visible(i * KS + col, half) ? fast_exp2(fmaf(x, scale_log2, -row_lse2[half])) : 0.f;
        });
        frag_map<KS / 8>(dp, lane, [&](float x, int, int half) { return x - row_dlt[half]; });
        frag_mul<KS / 8>(s, dp);  // dS = P (dP - delta)
        mma_pv<DT, KS / 16, DK / 8, LDK>(dq, s, ka_lane + buf * fsa_tile_bytes(KS, DK));
    }
    cp_async_wait<0>();

    store_dq_rows<DT, DK, G>(p, tile, h, warp, live, row_gate, dq);
}

// f(r, half, lane) for this lane's two rows r of the warp's 16 (accumulator
// elements 2 half, 2 half + 1) that are rows of the key tile.
template <class F>
__device__ __forceinline__ void each_key_row(const QueryTile &kt, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = warp * 16 + frag_row(lane, 2 * half);
        if (r < kt.n_tok) f(r, half, lane);
    }
}

// This warp's 16 rows of a key tile's gradient (16 x D accumulator times
// scale) into the rows of t the tile owns.
template <class DT, int D>
__device__ __forceinline__ void store_key_rows(const fsa_kernel_view &t, const QueryTile &kt, int h,
                                               const float acc[D / 8][4], float scale) {
    each_key_row(kt, [&](int r, int half, int lane) {
        u16 *row = view_row<u16>(t, kt.tok0 + r, h);
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            *(u32 *)(row + frag_col(lane, j, 0)) = DT::pack(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
    });
}

// Per stage of a dK/dV pass and query row: the keys the row sees (as
// indices of the sequence's keys), its lse (natural log, as the forward
// wrote it; in a gated backward its gated lse word), its delta.
struct RowTable {
    KeyRange *keys;
    float *lse, *dlt;
};

// A 4-byte cp.async (zeros where !valid), joining the current group.
__device__ __forceinline__ void cp_async4(u32 dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

// Query tile `it` of a key tile's walk: TT tokens from position first_pos
// of the query range [q_start, q_end) on.
template <int TT>
__device__ __forceinline__ QueryTile walked_query_tile(const QueryTile &kt, long long q_start, long long q_end,
                                                       long long first_pos, int it) {
    QueryTile qt;
    qt.start = q_start, qt.end = q_end, qt.seq = kt.seq, qt.ok = true;
    qt.tok0 = q_start + first_pos + (long long)it * TT;
    qt.n_tok = (int)min((long long)TT, q_end - qt.tok0);
    return qt;
}

// The R rows of query tile qt (row w * 16 + r: set w, row r of GroupRows)
// into the tables from entry `at` on; threads 0 .. R - 1 (or those numbered
// so in a group, tid) write one row each, lse and delta by cp.async in the
// current group (no thread waits on them).
// row_keys(pos, head) -> KeyRange: the keys the query at position pos of
// the range, head `head` of the group, sees.
template <int G, int R, class P, class RowKeys>
__device__ __forceinline__ void fill_row_table(const RowTable &t, int at, const P &p, const QueryTile &qt, int h,
                                               long long q_start, RowKeys row_keys, int tid = -1) {
    typedef GroupRows<G> Rows;
    if (tid < 0) tid = threadIdx.x;  // else the caller's number in a group of threads of its own
    if (tid >= R) return;
    const int w = tid >> 4, r = tid & 15;
    const bool live = Rows::live(w, r, qt.n_tok);
    const long long tok = qt.tok0 + Rows::token(w, r);
    const long long off = ((long long)h * G + Rows::head(r)) * p.total_tokens + tok;
    t.keys[at + tid] = live ? row_keys(tok - q_start, Rows::head(r)) : no_keys();
    const float *lse = (const float *)(p.gate.ptr != 0 ? p.gated_lse : p.lse);
    cp_async4(smem_addr(t.lse + at + tid), lse + (live ? off : 0), live);
    cp_async4(smem_addr(t.dlt + at + tid), (const float *)p.delta + (live ? off : 0), live);
}

// A key tile's walk over the query tiles, shared by `parts` CTAs: part p
// takes tiles p, p + parts, ... of it and leaves its fp32 sums (already
// scaled as the gradients) in rows of `partial`, float [parts][keys][heads]
// [DK + DV] (dK's columns first), which sum_key_partials adds in part order;
// one part (the default) stores dk and dv itself.
struct WalkSplit {
    int part, parts;
    long long partial;  // float *, when parts > 1
    long long keys;     // key rows of the whole call
    int heads;          // KV heads
};
__device__ __forceinline__ WalkSplit walk_whole() { return WalkSplit{0, 1, 0, 0, 1}; }
// Tile `it` of this part's share of a walk, as a tile of the whole walk.
__device__ __forceinline__ int walk_tile(const WalkSplit &ws, int it) { return it * ws.parts + ws.part; }
// The tiles of a walk of n that this part takes.
__device__ __forceinline__ int walk_tiles(const WalkSplit &ws, int n) {
    return n > ws.part ? (n - ws.part + ws.parts - 1) / ws.parts : 0;
}

// This warp's 16 rows of a key tile's gradient (16 x D accumulator times
// scale), fp32, into this part's rows of the partial sums from column col0.
template <int D, int LD>
__device__ __forceinline__ void store_key_rows_partial(const WalkSplit &ws, const QueryTile &kt, int h, int col0,
                                                       const float acc[D / 8][4], float scale) {
    each_key_row(kt, [&](int r, int half, int lane) {
        float *row = (float *)ws.partial + ((ws.part * ws.keys + kt.tok0 + r) * ws.heads + h) * LD + col0;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            *(float2 *)(row + frag_col(lane, j, 0)) = make_float2(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
    });
}

// dk and dv of a split walk: the sum over its parts, in part order, of the
// partial rows of KV head blockIdx.y; 4 columns per thread, the grid's x
// striding over keys x (DK + DV) / 4.
template <class DT, int DK, int DV>
__device__ __forceinline__ void sum_key_partials(const WalkSplit &ws, const fsa_kernel_view &dk,
                                                 const fsa_kernel_view &dv) {
    constexpr int LD = DK + DV, Q = LD / 4;
    static_assert(DK % 4 == 0 && DV % 4 == 0, "a thread's 4 columns lie in dK or in dV");
    const int h = blockIdx.y;
    const long long n = ws.keys * Q, part_stride = ws.keys * ws.heads * LD;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long key = i / Q;
        const int c = (int)(i % Q) * 4;
        const float *src = (const float *)ws.partial + (key * ws.heads + h) * LD + c;
        float4 a = *(const float4 *)src;
        for (int part = 1; part < ws.parts; part++) {
            const float4 b = *(const float4 *)(src + part * part_stride);
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        }
        u16 *dst = c < DK ? view_row<u16>(dk, key, h) + c : view_row<u16>(dv, key, h) + (c - DK);
        *(uint2 *)dst = make_uint2(DT::pack(a.x, a.y), DT::pack(a.z, a.w));
    }
}

// The end of a key tile whose sums two halves of the CTA (sets of warps,
// warpgroups) made, warp w of a half owning keys 16 w .. 16 w + 15: half 1
// hands its dK / dV through `sums` (fp32, pitch D + 8; shared memory that
// nothing else uses any more) to half 0, which adds them in a fixed order
// and stores the key rows (or, in a split walk, this part's partial rows).
// SERIAL: `sums` holds dK's or dV's, not both: dK's go over first, then dV's
// (the same sums); a part that makes one of them puts it at `sums`.
template <class DT, int DK, int DV, bool WANT_K, bool WANT_V, bool SERIAL = false, class P>
__device__ __forceinline__ void finish_key_tile(float *sums, int half, int warp, float dk[WANT_K ? DK / 8 : 1][4],
                                                float dv[WANT_V ? DV / 8 : 1][4], const P &p, const QueryTile &kt,
                                                int h, const WalkSplit &ws = walk_whole()) {
    const int lane = threadIdx.x & 31;
    if constexpr (SERIAL && WANT_K && WANT_V) {
        __syncthreads();
        if (half == 1) frag_store_f32<DK / 8, DK + 8>(sums + warp * 16 * (DK + 8), dk, lane);
        __syncthreads();
        if (half == 0) frag_add_f32<DK / 8, DK + 8>(dk, sums + warp * 16 * (DK + 8), lane);
        __syncthreads();
        if (half == 1) frag_store_f32<DV / 8, DV + 8>(sums + warp * 16 * (DV + 8), dv, lane);
        __syncthreads();
        if (half == 1) return;
        frag_add_f32<DV / 8, DV + 8>(dv, sums + warp * 16 * (DV + 8), lane);
    } else {
        // (SERIAL with one of them, a part of a two-part walk: it too from the start of `sums`)
        float *sums_k = sums, *sums_v = SERIAL ? sums : sums_k + FSA_QT_DKV_KEYS * (DK + 8);
        __syncthreads();
        if (half == 1) {
            if constexpr (WANT_K) frag_store_f32<DK / 8, DK + 8>(sums_k + warp * 16 * (DK + 8), dk, lane);
            if constexpr (WANT_V) frag_store_f32<DV / 8, DV + 8>(sums_v + warp * 16 * (DV + 8), dv, lane);
        }
        __syncthreads();
        if (half == 1) return;
        if constexpr (WANT_K) frag_add_f32<DK / 8, DK + 8>(dk, sums_k + warp * 16 * (DK + 8), lane);
        if constexpr (WANT_V) frag_add_f32<DV / 8, DV + 8>(dv, sums_v + warp * 16 * (DV + 8), lane);
    }

    const float scale = (float)(p.scale_log2 * FSA_LN2);
    if constexpr (WANT_K && WANT_V) {
        if (ws.parts > 1) {
            store_key_rows_partial<DK, DK + DV>(ws, kt, h, 0, dk, scale);
            store_key_rows_partial<DV, DK + DV>(ws, kt, h, DK, dv, 1.f);
            return;
        }
    }
    if constexpr (WANT_K) store_key_rows<DT, DK>(p.dk, kt, h, dk, scale);
    if constexpr (WANT_V) store_key_rows<DT, DV>(p.dv, kt, h, dv, 1.f);
}

// dK and dV (or one of them: WANT_K, WANT_V) of the key tile kt: the key rows
// kt.tok0 .. kt.tok0 + kt.n_tok - 1 of the [*, Hkv, *] k and v tensors, the
// keys kt.tok0 - kt.start .. of their sequence, in layout QB (FSA_QT_BWD_*,
// fsa_qt_layout.cuh). The query rows are the tiles of
// fsa_qt_dkv_tile_tokens(G, QB) tokens of the query range [q_start, q_end)
// from position first_pos of it to position last_pos (none when last_pos <
// first_pos); row_keys(pos, head) -> KeyRange says which keys the query at
// position pos, head `head` of the group, sees.
template <class DT, int DK, int DV, int G, bool WANT_K, bool WANT_V, int QB = 0, class P, class RowKeys>
__device__ __forceinline__ void backward_dkv_tile(unsigned char *smem, const P &p, const QueryTile &kt, int h,
                                                  long long q_start, long long q_end, long long first_pos,
                                                  long long last_pos, RowKeys row_keys) {
    static_assert(DK % 16 == 0 && DV % 16 == 0 && DK <= 256 && DV <= 256, "head dims are multiples of 16 up to 256");
    // R query rows a tile of the walk (each set of warps takes 32 of 64, or 16 of 32), STAGES tiles in flight.
    constexpr int R = fsa_qt_dkv_rows_at(QB), STAGES = fsa_qt_dkv_stages_at(QB);
    constexpr int KT = FSA_QT_DKV_KEYS, TT = fsa_qt_dkv_tile_tokens(G, QB), THREADS = FSA_QT_DKV_THREADS;
    constexpr int LDK = fsa_pitch(DK), LDV = fsa_pitch(DV);
    constexpr int RS = R / FSA_QT_DKV_SETS;  // query rows of a set
    // Rows per product: a set's 32, or 16 at a time next to more than 128
    // accumulators per thread (fewer live scores, no spill; the same order of sums).
    constexpr int RSTEP = (WANT_K ? DK : 0) + (WANT_V ? DV : 0) > 256 ? 16 : RS;
    static_assert(KT == 16 * FSA_QT_WARPS, "a set's warps own 16 keys each");
    const u32 ks = smem_addr(smem), vs = ks + fsa_qt_dkv_smem_v(DK);
    const u32 qs = ks + fsa_qt_dkv_smem_q(DK, DV), dos = ks + fsa_qt_dkv_smem_do_at(DK, DV, QB);
    KeyRange *row_keys_s = (KeyRange *)(smem + fsa_qt_dkv_smem_rows_at(DK, DV, QB));  // [STAGES][R]
    float *row_lse = (float *)(row_keys_s + STAGES * R);
    float *row_dlt = row_lse + STAGES * R;
    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) % FSA_QT_WARPS, set = (tid >> 5) / FSA_QT_WARPS;
    const int n_qt = last_pos >= first_pos ? (int)((last_pos - first_pos + TT) / TT) : 0;

    load_tile_async<KT, DK, LDK, THREADS>(ks, [&](int r) {
        const bool ok = r < kt.n_tok;
        return RowSrc{ok ? view_row<const u16>(p.k, kt.tok0 + r, h) : (const u16 *)p.k.ptr, ok};
    });
    load_tile_async<KT, DV, LDV, THREADS>(vs, [&](int r) {
        const bool ok = r < kt.n_tok;
        return RowSrc{ok ? view_row<const u16>(p.v, kt.tok0 + r, h) : (const u16 *)p.v.ptr, ok};
    });
    const RowTable table{row_keys_s, row_lse, row_dlt};
    auto load = [&](int it, int buf) {
        const QueryTile qt = walked_query_tile<TT>(kt, q_start, q_end, first_pos, it);
        load_query_rows_async<G, DK, LDK, THREADS, R>(qs + buf * fsa_tile_bytes(R, DK), p.q, qt, h);
        load_query_rows_async<G, DV, LDV, THREADS, R>(dos + buf * fsa_tile_bytes(R, DV), p.dout, qt, h);
        fill_row_table<G, R>(table, buf * R, p, qt, h, q_start, row_keys);
    };
    AsyncRing<STAGES> ring;
    ring.start(n_qt, load);

    // The keys of this lane's two rows and of the warp, as indices of the sequence.
    const int j0 = (int)(kt.tok0 - kt.start);
    const int key[2] = {j0 + warp * 16 + frag_row(lane, 0), j0 + warp * 16 + frag_row(lane, 2)};
    const int warp_lo = j0 + warp * 16, warp_hi = warp_lo + 15;
    const u32 k_lane = ks + (u32)(warp * 16 * LDK * 2) + ldm_lane_a(lane, LDK);
    const u32 v_lane = vs + (u32)(warp * 16 * LDV * 2) + ldm_lane_a(lane, LDV);
    const u32 qb_lane = qs + ldm_lane_b(lane, LDK), qa_lane = qs + ldm_lane_a(lane, LDK);
    const u32 dob_lane = dos + ldm_lane_b(lane, LDV), doa_lane = dos + ldm_lane_a(lane, LDV);
    const float scale_log2 = (float)p.scale_log2;
    const bool gated = p.gate.ptr != 0;
    float dk[WANT_K ? DK / 8 : 1][4], dv[WANT_V ? DV / 8 : 1][4];
    frag_zero<WANT_K ? DK / 8 : 1>(dk);
    frag_zero<WANT_V ? DV / 8 : 1>(dv);

    for (int it = 0; it < n_qt; it++) {
        const int buf = ring.acquire(it, load);
        const KeyRange *rk = row_keys_s + buf * R;
        const float *lse = row_lse + buf * R, *dlt = row_dlt + buf * R;
        // The set's rows of the tile: none sees a key of this warp, skip (warp-uniform).
        const int c0 = set * RS;
        const KeyRange a = RS == 32 || lane < RS ? rk[c0 + lane] : no_keys();
        if (!__any_sync(0xffffffffu, a.lo <= warp_hi && a.hi >= warp_lo)) continue;
#pragma unroll 1
        for (int c = c0; c < c0 + RS; c += RSTEP) {
            const u32 q_off = buf * fsa_tile_bytes(R, DK) + c * LDK * 2;
            const u32 do_off = buf * fsa_tile_bytes(R, DV) + c * LDV * 2;
            // P^T (keys x query rows) with the forward's lse (times the rows' gates in a gated backward); 0
            // where the key is not visible.
            float pt[RSTEP / 8][4];
            frag_zero<RSTEP / 8>(pt);
            mma_abt<DT, DK, RSTEP / 8, LDK>(pt, k_lane, qb_lane + q_off);
            frag_map<RSTEP / 8>(pt, lane, [&](float x, int col, int half) {
                const KeyRange r = rk[c + col];
                const int kj = key[half];
                const float l = row_lse_value(lse[c + col], gated);
                return r.lo <= kj && kj <= r.hi ? fast_exp2(fmaf(x, scale_log2, -l * LOG2E)) : 0.f;
            });
            if (gated && cols_have_negative_gates<RSTEP / 8>(lse + c, lane))
                frag_gate_signs<RSTEP / 8>(pt, lse + c, lane);
            if constexpr (WANT_V) mma_pv<DT, RSTEP / 16, DV / 8, LDV>(dv, pt, doa_lane + do_off);
            if constexpr (WANT_K) {
                // dS^T = P^T (dP^T - delta), dP^T = V dO^T.
                float dpt[RSTEP / 8][4];
                frag_zero<RSTEP / 8>(dpt);
                mma_abt<DT, DV, RSTEP / 8, LDV>(dpt, v_lane, dob_lane + do_off);
                frag_map<RSTEP / 8>(dpt, lane, [&](float x, int col, int) { return x - dlt[c + col]; });
                frag_mul<RSTEP / 8>(pt, dpt);
                mma_pv<DT, RSTEP / 16, DK / 8, LDK>(dk, pt, qa_lane + q_off);
            }
        }
    }
    cp_async_wait<0>();

    // Set 1's sums to set 0 through the stage buffers, or from K on (free once every warp is past the loop:
    // fsa_qt_dkv_sums_at).
    static_assert(FSA_QT_DKV_SETS == 2, "one set hands its sums to the other");
    static_assert(fsa_qt_dkv_layout_ok(DK, DV, QB), "the shared memory holds a part's fp32 sums");
    finish_key_tile<DT, DK, DV, WANT_K, WANT_V, fsa_qt_dkv_sums_serial(DK, DV, QB) != 0>(
        (float *)(smem + fsa_qt_dkv_sums_at(DK, DV, QB)), set, warp, dk, dv, p, kt, h);
}

// A dK/dV kernel's body: one pass up to FSA_BWD_ONE_PASS_COLS columns of dK
// and dV together; wider heads take one part of fsa_qt_dkv_parts(DK, DV) = 2
// per blockIdx.z (z 0 makes dV and z 1 dK), each recomputing S and dP. QB:
// the layout (FSA_QT_BWD_*).
template <class DT, int DK, int DV, int G, int QB = 0, class P, class RowKeys>
__device__ __forceinline__ void backward_dkv_parts(unsigned char *smem, const P &p, const QueryTile &kt, int h,
                                                   long long q_start, long long q_end, long long first_pos,
                                                   long long last_pos, RowKeys row_keys) {
    if constexpr (fsa_qt_dkv_parts(DK, DV) == 1)
        backward_dkv_tile<DT, DK, DV, G, true, true, QB>(smem, p, kt, h, q_start, q_end, first_pos, last_pos, row_keys);
    else if (blockIdx.z == 0)
        backward_dkv_tile<DT, DK, DV, G, false, true, QB>(smem, p, kt, h, q_start, q_end, first_pos, last_pos,
                                                          row_keys);
    else
        backward_dkv_tile<DT, DK, DV, G, true, false, QB>(smem, p, kt, h, q_start, q_end, first_pos, last_pos,
                                                          row_keys);
}

}  // namespace fsa
