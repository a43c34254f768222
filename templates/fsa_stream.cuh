// Streams of consecutive rows of a strided tensor into shared-memory stages
// (128-byte swizzled tiles, fsa_pipeline.cuh's sw128_offset): a key stream
// described by its first rows and strides instead of a row functor, and the
// stage copier that walks it with a few instructions per piece.
#pragma once
#include "fsa_qtile.cuh"

namespace fsa {

// The keys of a stream: key j's K row at k + j * k_stride and V row at v + j
// * v_stride for j < limit (elements); keys from `limit` on read as zeros
// (k and v stay mapped addresses). Also a row functor (j -> RowPair) for the
// loaders that take one.
struct StridedKeys {
    const u16 *k, *v;
    long long k_stride, v_stride;
    int limit;
    __device__ __forceinline__ RowPair operator()(int j) const {
        const bool ok = j < limit;
        return RowPair{ok ? k + j * k_stride : k, ok ? v + j * v_stride : v, ok};
    }
};

// Stages of ROWS rows x COLS 16-bit columns copied by THREADS threads, the
// pieces of a band (sw128_band: a whole row, or else one 64-column panel)
// taken by consecutive threads: a thread's pieces share one column of each
// band and lie STEP rows apart, so a stage costs one row address per thread
// and, per row, a 64-bit add and a compare, and per piece the copy (with STEP
// a multiple of 8 the piece's place in the swizzled tile is a constant step
// too). Thread counts that split no band work out each piece's row address.
template <int ROWS, int COLS, int THREADS>
struct StridedStage {
    static constexpr int PER_ROW = COLS / 8;
    static constexpr int BAND = sw128_band(COLS, THREADS);
    static constexpr int BANDS = BAND ? PER_ROW / BAND : 0;
    static constexpr int STEP = BAND ? THREADS / BAND : 1, N = (ROWS + STEP - 1) / STEP;
    static_assert(COLS % 8 == 0, "rows are whole 16-byte pieces");
    int tid, row0, col;  // this thread, its first row and its column in the first band (BAND)
    u32 dst0;            // where its first piece sits in a tile (BAND)

    __device__ __forceinline__ void init(int t) {
        tid = t;
        row0 = BAND ? t / BAND : 0;
        col = BAND ? (t - row0 * BAND) * 8 : 0;
        dst0 = sw128_offset(row0, col, ROWS);
    }
    // Rows first .. first + ROWS - 1 of the tensor whose row j is at base + j
    // * stride into the tile at `tile`; rows from `limit` on are zeros (read
    // from nowhere: base is the address they name). The copies join the
    // current cp.async group.
    __device__ __forceinline__ void load(u32 tile, const u16 *base, long long stride, int first, int limit) const {
        if constexpr (!BAND) {
            for_each_piece<ROWS, COLS, THREADS>(
                [&](int r, int c) {
                    const bool ok = first + r < limit;
                    cp_async16(tile + sw128_offset(r, c, ROWS), ok ? base + (long long)(first + r) * stride + c : base, ok);
                },
                tid);
            return;
        }
        const u16 *p = base + (long long)(first + row0) * stride + col;
        const long long step = (long long)STEP * stride;
        const int left = limit - first;
#pragma unroll
        for (int k = 0; k < N; k++) {
            const int r = row0 + k * STEP;
            if (N * STEP > ROWS && k == N - 1 && r >= ROWS) break;
            const bool ok = r < left;
#pragma unroll
            for (int b = 0; b < BANDS; b++) {
                const int c = col + b * BAND * 8;
                const u32 dst = STEP % 8 == 0 ? dst0 + (u32)(k * STEP * 128 + b * (BAND / 8) * ROWS * 128)
                                              : sw128_offset(r, c, ROWS);
                cp_async16(tile + dst, ok ? p + b * BAND * 8 : base, ok);
            }
            p += step;
        }
    }
};

// The K rows (HALF 0) or V rows (HALF 1) of keys first .. first + KS - 1 of
// a key stream into a swizzled stage of D columns, THREADS threads sharing
// the copies: strided keys through StridedStage, a row functor (j ->
// RowPair) through load_key_half_async.
template <int KS, int D, int HALF, int THREADS>
struct KeyHalf {
    StridedStage<KS, D, THREADS> stage;
    __device__ __forceinline__ KeyHalf() { stage.init((int)threadIdx.x); }
    __device__ __forceinline__ void operator()(u32 dst, const StridedKeys &keys, int first) const {
        stage.load(dst, HALF ? keys.v : keys.k, HALF ? keys.v_stride : keys.k_stride, first, keys.limit);
    }
    template <class KeyRows>
    __device__ __forceinline__ void operator()(u32 dst, KeyRows key_rows, int first) const {
        load_key_half_async<KS, D, HALF, true, THREADS>(dst, key_rows, first);
    }
};

}  // namespace fsa
