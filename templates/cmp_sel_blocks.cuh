// Building blocks of the block selection (cmp_select.cu): the block scores
// of a set of 16 query rows summed over keys and heads on tensor cores, and
// a top-k list per lane in registers that lanes merge at the end.
#pragma once
#include "fsa_mma.cuh"
#include "fsa_pipeline.cuh"

namespace fsa {

// The two 16-bit halves of x as fp32 (the first in the low bits).
__device__ __forceinline__ void f16x2_to_f32(u32 x, float &lo, float &hi) {
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}" : "=f"(lo), "=f"(hi) : "r"(x));
}

// Both 16-bit halves of x at most 1; a NaN half becomes 1 (min takes the
// number over NaN), so do +Inf and what rounded to +Inf. One instruction per
// two probabilities (the same bits as clamping each fp32 before rounding: the
// rounding is monotone and 1 is exact).
__device__ __forceinline__ u32 f16x2_min_one(u32 x) {
    u32 r;
    asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(0x3C003C00u));
    return r;
}

// x, which the compiler may not recompute from how it was made (constants
// it would otherwise rebuild inside loops rather than keep in registers).
__device__ __forceinline__ u32 opaque(u32 x) {
    asm volatile("mov.b32 %0, %0;" : "+r"(x));
    return x;
}

// Block scores of the selection on tensor cores, for a warp's MT sets of 16
// rows (row r of a set: head r % G of token r / G; rows past 16 / G tokens
// are padding) and stages of KS keys in which block c (0 .. NB - 1 of the
// stage) collects keys c*R - HALO .. c*R + R - 1 (relative to the stage's
// first key; negative ones are the previous stage's last keys).
//   score(token, c) = sum over its G rows and those keys of p(row, key)
// as two products of 0/1 matrices (exact in every sum but for the fp16
// operands): the probabilities' accumulator fragments (16 rows x 8 keys) are,
// as they lie in the registers, the B operands (keys x rows) of mma.sync
// m16n8k16, so C = A P^T with A the (block x key) overlap gives per-row
// block sums, blocks on the 16-row side; C's fragments then form the A
// operand (block x row) of C H with H the (row x token) head map, which sums
// each token's heads. C enters the second product as fp16 plus its fp16
// residual, so it loses nothing there; the probabilities are fp16 (relative
// error at most 2^-11 each). A key step of the previous stage is kept for the halo.
// Every sum runs in a fixed order (the same bits every run), and equal
// probabilities give equal scores (ties stay ties).
// TABLE: the overlap and head-map fragments, constants that depend only on
// the lane, are read from a table in shared memory (write_table, once per
// CTA: slot n of lane l at table + (32 n + l) * 16) at each use instead of
// held in registers (20 + 2 at the usual shape), which a kernel short of
// registers (the lane lists at G 1 and 2 with four consumer warpgroups)
// needs more: 5 + 1 loads of 16 / 8 bytes a stage instead of spills.
template <int G, int R, int HALO, int NB, int MT, int KS, bool TABLE = false>
struct BlockScores {
    static constexpr int NQ = KS / 16, HP = (HALO + 15) / 16, NS = HP + NQ;  // key steps: the previous stage's, then this one's
    static constexpr int MB = (NB + 15) / 16;                                // tiles of 16 blocks
    static constexpr int TW = 16 / G;                                        // tokens per set
    static constexpr int SLOTS = MB * NS + (G > 1 ? 1 : 0);                  // TABLE: the overlap's, then the head map's
    static_assert(NB * R == KS && HALO <= KS && G >= 1 && G <= 16, "a stage of whole blocks, a halo of one stage at most");
    u32 a[TABLE ? 1 : MB][TABLE ? 1 : NS][4];  // the overlap, fp16 0/1, as A fragments (without TABLE)
    u32 h[2];                        // the head map, fp16 0/1, as a B fragment (G > 1, without TABLE)
    u32 tab;                         // TABLE: this lane's slot 0
    u32 prev[MT][HP > 0 ? HP : 1][2][2];  // the previous stage's last HP key steps (rows lo, hi) as B fragments

    // Key step q (0 .. NS - 1: keys 16 (q - HP) ..) reaches blocks of tile mb.
    static __device__ __forceinline__ constexpr bool touches(int mb, int q) {
        return 16 * (q - HP) + 15 >= 16 * mb * R - HALO && 16 * (q - HP) <= (16 * mb + 16) * R - 1;
    }
    // The output column of token t of a set: every other column while that
    // leaves one token per lane of a quad, so a lane holds one token.
    static __device__ __forceinline__ constexpr int column(int t) { return TW <= 4 ? 2 * t : t; }

    // Register r of the overlap's fragment (mb, q) on this lane.
    static __device__ __forceinline__ u32 overlap(int lane, int mb, int q, int r) {
        u32 v = 0;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int c = 16 * mb + (lane >> 2) + 8 * (r & 1);
            const int key = 16 * (q - HP) + 2 * (lane & 3) + half + 8 * (r >> 1);
            const bool on = c < NB && key >= c * R - HALO && key <= c * R + R - 1;
            v |= (on ? 0x3c00u : 0u) << (16 * half);
        }
        return v;
    }
    // Register r of the head map's fragment on this lane.
    static __device__ __forceinline__ u32 head_map(int lane, int r) {
        u32 v = 0;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = 2 * (lane & 3) + half + 8 * r;
            const bool on = row < TW * G && column(row / G) == (lane >> 2);
            v |= (on ? 0x3c00u : 0u) << (16 * half);
        }
        return v;
    }
    // TABLE: this lane's slots of the table at `table` (SLOTS * 512 bytes, 16-byte aligned; one warp writes it).
    static __device__ __forceinline__ void write_table(u32 table, int lane) {
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
#pragma unroll
            for (int q = 0; q < NS; q++)
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(table + (u32)((mb * NS + q) * 32 + lane) * 16),
                             "r"(overlap(lane, mb, q, 0)), "r"(overlap(lane, mb, q, 1)), "r"(overlap(lane, mb, q, 2)),
                             "r"(overlap(lane, mb, q, 3))
                             : "memory");
        if constexpr (G > 1)
            asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(table + (u32)(MB * NS * 32 + lane) * 16),
                         "r"(head_map(lane, 0)), "r"(head_map(lane, 1))
                         : "memory");
    }

    // table: TABLE's (written and visible to this thread by its first run), else unused.
    __device__ __forceinline__ void init(int lane, u32 table = 0) {
        if constexpr (TABLE) {
            tab = table + (u32)lane * 16;
        } else {
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int q = 0; q < NS; q++)
#pragma unroll
                    for (int r = 0; r < 4; r++) a[mb][q][r] = opaque(overlap(lane, mb, q, r));
#pragma unroll
            for (int r = 0; r < 2; r++) h[r] = opaque(head_map(lane, r));
        }
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < (HP > 0 ? HP : 1); j++)
#pragma unroll
                for (int nh = 0; nh < 2; nh++) prev[m][j][nh][0] = prev[m][j][nh][1] = 0;
    }

    // A set's probabilities s (16 rows x KS keys; 0 where a row does not see
    // a key) as the fp16 B operands of the products (the accumulator
    // registers are free after this: the next stage's scores may go there),
    // each at most 1: a probability is at most 1 but for rounding, and NaN and
    // Inf become 1, so that the products, which multiply every row's
    // probabilities by 0 for other blocks and other tokens of a set, never
    // spread one token's NaN to the others.
    typedef u32 Packed[NQ][2][2];
    static __device__ __forceinline__ void pack(Packed &b, const float s[KS / 8][4]) {
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int nh = 0; nh < 2; nh++) {
                b[q][nh][0] = f16x2_min_one(dtype_f16::pack(s[2 * q][2 * nh], s[2 * q][2 * nh + 1]));
                b[q][nh][1] = f16x2_min_one(dtype_f16::pack(s[2 * q + 1][2 * nh], s[2 * q + 1][2 * nh + 1]));
            }
    }

    // Set m's packed probabilities b into the scores of its tokens: token t's
    // block c at sc[t * SP + c].
    template <int SP>
    __device__ __forceinline__ void run(int m, const Packed &b, float *sc, int lane) {
        float c[MB][2][4];
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
#pragma unroll
            for (int nh = 0; nh < 2; nh++) {
#pragma unroll
                for (int e = 0; e < 4; e++) c[mb][nh][e] = 0.f;
#pragma unroll
                for (int q = 0; q < NS; q++) {
                    if (!touches(mb, q)) continue;
                    const u32 *bq = q < HP ? prev[m][q < HP ? q : 0][nh] : b[q >= HP ? q - HP : 0][nh];
                    u32 af[4];
                    if constexpr (TABLE) {
                        // (volatile: read at each use, never hoisted out of the stage loop into registers)
                        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                                     : "=r"(af[0]), "=r"(af[1]), "=r"(af[2]), "=r"(af[3])
                                     : "r"(tab + (u32)(mb * NS + q) * 512));
                    } else {
#pragma unroll
                        for (int r = 0; r < 4; r++) af[r] = a[TABLE ? 0 : mb][TABLE ? 0 : q][r];
                    }
                    dtype_f16::mma(c[mb][nh], af, bq[0], bq[1]);
                }
            }
#pragma unroll
        for (int j = 0; j < HP; j++)
#pragma unroll
            for (int nh = 0; nh < 2; nh++)
                prev[m][j][nh][0] = b[NQ - HP + j][nh][0], prev[m][j][nh][1] = b[NQ - HP + j][nh][1];
#pragma unroll
        for (int mb = 0; mb < MB; mb++) {
            if constexpr (G == 1) {  // rows are tokens
#pragma unroll
                for (int nh = 0; nh < 2; nh++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int blk = 16 * mb + (lane >> 2) + 8 * (e >> 1), t = 8 * nh + 2 * (lane & 3) + (e & 1);
                        if (NB % 16 == 0 || blk < NB) sc[t * SP + blk] = c[mb][nh][e];
                    }
            } else {
                u32 hi[4], lo[4];
                frag_to_a<dtype_f16>(hi, c[mb][0], c[mb][1]);
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    float x0, x1;
                    f16x2_to_f32(hi[r], x0, x1);
                    const float *cr = c[mb][r >> 1] + 2 * (r & 1);
                    lo[r] = dtype_f16::pack(cr[0] - x0, cr[1] - x1);
                }
                u32 hm[2] = {h[0], h[1]};
                if constexpr (TABLE)
                    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(hm[0]), "=r"(hm[1]) : "r"(tab + (u32)(MB * NS) * 512));
                float d[4] = {0.f, 0.f, 0.f, 0.f};
                dtype_f16::mma(d, hi, hm[0], hm[1]);
                dtype_f16::mma(d, lo, hm[0], hm[1]);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int blk = 16 * mb + (lane >> 2) + 8 * (e >> 1), n = 2 * (lane & 3) + (e & 1);
                    const int t = TW <= 4 ? ((e & 1) ? TW : (lane & 3)) : n;
                    if (t < TW && (NB % 16 == 0 || blk < NB)) sc[t * SP + blk] = d[e];
                }
            }
        }
    }
};

// A stream of ROWS-row stages of a strided tensor into shared-memory tiles
// (COLS 16-bit columns; a 128-byte swizzled tile with SW128, else pitch LD
// elements), for kernels that copy the same pieces of every stage: each of
// THREADS threads works out once where its 16-byte pieces sit in a tile and
// in the first stage, so a stage costs a compare, an add, a select and the
// copy per piece instead of the row's address arithmetic.
//   stream.init(rows_base, token_stride, any);  // row j at rows_base + j * token_stride; any: a mapped address
//   stream.load(tile, first, limit);           // rows first .. first + ROWS - 1; zeros from row limit on
template <int ROWS, int COLS, int THREADS, bool SW128, int LD = COLS>
struct RowStream {
    static constexpr int PER_ROW = COLS / 8, PIECES = ROWS * PER_ROW, N = (PIECES + THREADS - 1) / THREADS;
    static_assert(COLS % 8 == 0, "rows are whole 16-byte pieces");
    const u16 *src[N];  // the piece in row r of the first stage (row 0 = the stream's row 0)
    const u16 *any;     // read from by the zero-filling copies (which read nothing)
    u32 dst[N];         // its byte offset in a tile
    int row[N];         // its row r (ROWS when the thread has no such piece)
    long long stride;   // elements between rows

    __device__ __forceinline__ void init(const u16 *rows_base, long long token_stride, const u16 *mapped) {
        stride = token_stride;
        any = mapped;
#pragma unroll
        for (int k = 0; k < N; k++) {
            const int i = (int)threadIdx.x + k * THREADS, r = i / PER_ROW, c = (i - r * PER_ROW) * 8;
            const bool has = i < PIECES;
            row[k] = has ? r : ROWS;
            src[k] = rows_base + (has ? (long long)r * token_stride + c : 0);
            dst[k] = has ? (SW128 ? sw128_offset(r, c, ROWS) : (u32)(r * LD + c) * 2) : 0u;
        }
    }
    // Rows first .. first + ROWS - 1 into the tile at `tile`; rows from
    // `limit` on are zeros (read from nowhere). The copies join the current
    // cp.async group.
    __device__ __forceinline__ void load(u32 tile, int first, int limit) const {
        const long long step = (long long)first * stride;
        const int left = limit - first;
#pragma unroll
        for (int k = 0; k < N; k++) {
            if (k * THREADS + THREADS > PIECES && row[k] >= ROWS) continue;
            const bool ok = row[k] < left;
            cp_async16(tile + dst[k], ok ? src[k] + step : any, ok);
        }
    }
};

// (v, c) ranks before (w, d): the higher score, and of equal scores the lower block.
__device__ __forceinline__ bool sel_before(float v, int c, float w, int d) { return v > w || (v == w && c < d); }

// Entries a and b of (v, c) in the order of sel_before.
template <int N>
__device__ __forceinline__ void sel_order(float (&v)[N], int (&c)[N], int a, int b) {
    if (sel_before(v[b], c[b], v[a], c[a])) {
        const float tv = v[a];
        const int tc = c[a];
        v[a] = v[b], c[a] = c[b];
        v[b] = tv, c[b] = tc;
    }
}

// Compare-exchange t of Batcher's odd-even merge sort of n entries (19 for
// n = 8), and how many there are: worked out at compile time, so that
// sel_sort is straight-line code over constant indices (the compiler does
// not unroll these loops itself, and a register array indexed by a
// variable goes to local memory).
struct SelPair {
    int a, b, count;
};
__device__ constexpr SelPair sel_sort_pair(int n, int t) {
    int at = 0;
    for (int p = 1; p < n; p <<= 1)
        for (int k = p; k >= 1; k >>= 1)
            for (int j = k % p; j + k < n; j += 2 * k)
                for (int i = 0; i < k && i + j + k < n; i++)
                    if ((i + j) / (2 * p) == (i + j + k) / (2 * p)) {
                        if (at == t) return SelPair{i + j, i + j + k, 0};
                        at++;
                    }
    return SelPair{0, 0, at};
}

// N (score, block) pairs sorted best first (sel_before).
template <int N, int T = 0>
__device__ __forceinline__ void sel_sort(float (&v)[N], int (&c)[N]) {
    if constexpr (T < sel_sort_pair(N, -1).count) {
        constexpr SelPair q = sel_sort_pair(N, T);
        sel_order(v, c, q.a, q.b);
        sel_sort<N, T + 1>(v, c);
    }
}

// A lane's running top-K blocks in registers, best first; empty entries score
// -inf with block -1. KP is K rounded up to a power of two for the merge
// across lanes; the entries from K on stay empty while the lane streams.
template <int K>
struct LaneTopK {
    static constexpr int KP = K <= 1 ? 1 : K <= 2 ? 2 : K <= 4 ? 4 : K <= 8 ? 8 : K <= 16 ? 16 : K <= 32 ? 32 : 64;
    static_assert(K >= 1 && K <= 64, "top-k from 1 to 64");
    float v[KP];
    int c[KP];

    __device__ __forceinline__ void clear(void) {
#pragma unroll
        for (int e = 0; e < KP; e++) v[e] = -FSA_INF, c[e] = -1;
    }
    __device__ __forceinline__ float last(void) const { return v[K - 1]; }

    // Inserts block x scoring s, which beats the last entry and is higher
    // than every block in the list (a lane sees its blocks in ascending
    // order): it goes after every entry scoring >= s, so equal scores keep
    // the lower block first. A shift network: no indexing by a variable.
    // Each compare serves two entries (s beats v[e] decides entry e and
    // entry e + 1), and a score moves by max / min: v[e] becomes max(v[e],
    // min(s, v[e - 1])).
    __device__ __forceinline__ void insert(float s, int x) {
        bool above = s > v[K - 1];  // (s > v[e - 1] of the entry below)
#pragma unroll
        for (int e = K - 1; e > 0; e--) {
            const bool here = above;
            above = s > v[e - 1];
            v[e] = fmaxf(v[e], fminf(s, v[e - 1]));
            c[e] = above ? c[e - 1] : here ? x : c[e];
        }
        v[0] = fmaxf(v[0], s);
        c[0] = above ? x : c[0];
    }

    // Sorts the list when it is a bitonic sequence (a merge network over KP).
    __device__ __forceinline__ void merge_bitonic(void) {
#pragma unroll
        for (int j = KP / 2; j > 0; j >>= 1)
#pragma unroll
            for (int e = 0; e < KP; e++)
                if ((e & j) == 0) sel_order(v, c, e, e + j);
    }

    // Adds N candidates sorted best first (sel_sort), all of blocks above
    // every block in the list, as N insertions in block order would: the list
    // becomes the best K of both. Into an empty list they are copied; else the
    // better of entry KP - 1 - e and candidate e (the entry on equal scores:
    // its block is lower) form a bitonic sequence of the best KP, which a
    // merge network sorts (merge_bitonic). At K 16: 32 compare-exchanges
    // of about 7 instructions, with the 19 of sel_sort<8> about the cost of
    // five insertions (about 90 each); a copy and the sort when empty.
    template <int N>
    __device__ __forceinline__ void add_sorted(const float (&yv)[N], const int (&yc)[N], bool empty) {
        static_assert(N <= KP, "no more candidates than entries");
        if (N <= K && empty) {
#pragma unroll
            for (int e = 0; e < N; e++) v[e] = yv[e], c[e] = yc[e];
            return;
        }
#pragma unroll
        for (int e = 0; e < N; e++)
            if (yv[e] > v[KP - 1 - e]) v[KP - 1 - e] = yv[e], c[KP - 1 - e] = yc[e];
        merge_bitonic();
#pragma unroll
        for (int e = K; e < KP; e++) v[e] = -FSA_INF, c[e] = -1;  // (the entries from K on stay empty)
    }

    // The best KP of this list and lane (lane ^ mask)'s, both sorted: the
    // better of entry e and the partner's entry KP - 1 - e form a bitonic
    // sequence of the best KP, which merge_bitonic sorts. Both lanes end
    // with the same list (one total order: score, then block).
    __device__ __forceinline__ void merge_xor(int mask) {
        float ov[KP];
        int oc[KP];
#pragma unroll
        for (int e = 0; e < KP; e++) {
            ov[e] = __shfl_xor_sync(0xffffffffu, v[KP - 1 - e], mask);
            oc[e] = __shfl_xor_sync(0xffffffffu, c[KP - 1 - e], mask);
        }
#pragma unroll
        for (int e = 0; e < KP; e++)
            if (sel_before(ov[e], oc[e], v[e], c[e])) v[e] = ov[e], c[e] = oc[e];
        merge_bitonic();
    }

    // The first K entries into row ascending by block (an entry's slot is
    // the number of chosen blocks below it), -1 after them. P lanes that
    // hold the same list share the work: lane `part` (0 .. P - 1) writes
    // the entries e = part mod P and the empty slots of its residue.
    template <int P>
    __device__ __forceinline__ void write_row(int *row, int part) const {
        int n = 0;
#pragma unroll
        for (int f = 0; f < K; f++) n += c[f] >= 0;
#pragma unroll
        for (int j = 0; j < (K + P - 1) / P; j++) {
            const int e = part + j * P;
            int ce = c[0];
#pragma unroll
            for (int f = 1; f < K; f++)
                if (e == f) ce = c[f];
            if (e < K && ce >= 0) {
                int rank = 0;
#pragma unroll
                for (int f = 0; f < K; f++) rank += c[f] >= 0 && c[f] < ce;
                row[rank] = ce;
            }
            if (e < K && e >= n) row[e] = -1;
        }
    }
};

}  // namespace fsa
