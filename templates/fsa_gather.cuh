// Gathered row tiles: ROWS rows of COLS 16-bit elements, row r copied from
// the address rows[r], into a padded tile of pitch LD (fsa_pitch) at shared
// address dst. The row addresses are computed once (a kernel's row table),
// so the copy of a piece costs one lookup: each of THREADS threads (tid:
// the caller's index among them, a CTA's or a warp's) keeps one 16-byte
// column piece and walks the rows THREADS / (COLS / 8) apart (consecutive
// threads take consecutive pieces of a row, so reads coalesce as in
// fsa_pipeline.cuh). Every row is copied: a caller with padding rows points
// them at any readable row and ignores what lands there. The copies join the
// current cp.async group.
// load_rows_sw128_async: the same into a 128-byte swizzled tile of ROWS rows
// (fsa_pipeline.cuh sw128_offset), the operand layout of warpgroup products.
//
// frag_store_rows: the reverse for a warp's accumulator rows (the fsa_mma.cuh
// fragment layout, as frag_store) into 16 rows of a padded tile: stmatrix on
// sm_90 (a quarter of the store instructions), 32-bit shared stores elsewhere.
//
// WarpRing: the AsyncRing of fsa_pipeline.cuh for buffers that one warp
// fills and reads alone (its rows of a query tile): __syncwarp instead of
// the CTA barriers, so the warps of a CTA run at their own pace.
#pragma once
#include "fsa_pipeline.cuh"

namespace fsa {

// Whether THREADS threads split the pieces of a row evenly (else use
// load_tile_async with a row functor).
template <int COLS, int THREADS>
__host__ __device__ constexpr bool gather_rows_fits() {
    return COLS % 8 == 0 && THREADS % (COLS / 8) == 0;
}

template <int ROWS, int COLS, int LD, int THREADS>
__device__ __forceinline__ void load_rows_async(u32 dst, const u16 *const *rows, int tid) {
    static_assert(gather_rows_fits<COLS, THREADS>(), "whole rows of 16-byte pieces per pass of the threads");
    constexpr int PIECES = COLS / 8, STEP = THREADS / PIECES, PASSES = (ROWS + STEP - 1) / STEP;
    const int c = tid % PIECES, r0 = tid / PIECES;
    const u32 d0 = dst + (u32)(r0 * LD + c * 8) * 2;
#pragma unroll 4
    for (int k = 0; k < PASSES; k++) {
        const int r = r0 + k * STEP;
        if (ROWS % STEP != 0 && r >= ROWS) break;
        cp_async16(d0 + (u32)(k * STEP * LD) * 2, rows[r] + c * 8, true);
    }
}

// Each 16-byte piece of the rows (destination, source) to `copy`, a pass of
// the threads at a time, in the bands of sw128_band (a whole row, or 64
// columns where the threads do not split a row evenly: Dk 192 over 128).
template <int ROWS, int COLS, int THREADS, class Copy>
__device__ __forceinline__ void for_rows_sw128(u32 dst, const u16 *const *rows, int tid, Copy copy) {
    constexpr int BAND = sw128_band(COLS, THREADS);
    static_assert(BAND > 0, "whole rows, or whole 64-column bands, of 16-byte pieces per pass of the threads");
    constexpr int BANDS = COLS / 8 / BAND, STEP = THREADS / BAND, PASSES = (ROWS + STEP - 1) / STEP;
    const int c = (tid % BAND) * 8, r0 = tid / BAND;
#pragma unroll 4
    for (int k = 0; k < PASSES; k++) {
        const int r = r0 + k * STEP;
        if (ROWS % STEP != 0 && r >= ROWS) break;
#pragma unroll
        for (int b = 0; b < BANDS; b++) copy(dst + sw128_offset(r, c + b * BAND * 8, ROWS), rows[r] + c + b * BAND * 8);
    }
}

// ROWS rows (rows[r]: where row r starts) of COLS columns into a 128-byte
// swizzled tile at dst, by cp.async.
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void load_rows_sw128_async(u32 dst, const u16 *const *rows, int tid) {
    for_rows_sw128<ROWS, COLS, THREADS>(dst, rows, tid, [](u32 d, const u16 *src) { cp_async16(d, src, true); });
}

// The same, each line read under the L2 policy `policy` (l2_evict_last / l2_evict_first).
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void load_rows_sw128_async_hint(u32 dst, const u16 *const *rows, int tid, u64 policy) {
    for_rows_sw128<ROWS, COLS, THREADS>(dst, rows, tid,
                                        [=](u32 d, const u16 *src) { cp_async16_hint(d, src, policy); });
}

// A warp's 16 x 8N fragments acc (N even) as DT into rows row0 .. row0 + 15
// of a 128-byte swizzled tile of ROWS rows at shared address `tile`
// (stmatrix: sm_90 only, where the swizzled tiles are used).
template <class DT, int N, int ROWS>
__device__ __forceinline__ void frag_store_rows_sw128(u32 tile, int row0, const float acc[N][4], int lane) {
    static_assert(N % 2 == 0, "whole 16-column pairs of n8 tiles");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int r = row0 + (lane & 7) + 8 * ((lane >> 3) & 1), c = 8 * (lane >> 4);
#pragma unroll
    for (int j = 0; j < N; j += 2)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                         tile + sw128_offset(r, 8 * j + c, ROWS)),
                     "r"(DT::pack(acc[j][0], acc[j][1])), "r"(DT::pack(acc[j][2], acc[j][3])),
                     "r"(DT::pack(acc[j + 1][0], acc[j + 1][1])), "r"(DT::pack(acc[j + 1][2], acc[j + 1][3]))
                     : "memory");
#else
    __trap();  // swizzled tiles serve warpgroup kernels, sm_90a only
#endif
}

// The 16 x 8N fragments acc (N even) as DT into rows at shared address
// `rows` (pitch LD elements); every lane of the warp calls it.
template <class DT, int N, int LD>
__device__ __forceinline__ void frag_store_rows(u32 rows, const float acc[N][4], int lane) {
    static_assert(N % 2 == 0, "whole 16-column pairs of n8 tiles");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Lanes 8i .. 8i + 7 address the rows of matrix i: (tile j, rows 0-7), (j, 8-15), (j + 1, 0-7), (j + 1, 8-15).
    const u32 at = rows + (u32)(((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4)) * 2;
#pragma unroll
    for (int j = 0; j < N; j += 2)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(at + (u32)(j * 16)),
                     "r"(DT::pack(acc[j][0], acc[j][1])), "r"(DT::pack(acc[j][2], acc[j][3])),
                     "r"(DT::pack(acc[j + 1][0], acc[j + 1][1])), "r"(DT::pack(acc[j + 1][2], acc[j + 1][3]))
                     : "memory");
#else
    const u32 at = rows + (u32)((lane >> 2) * LD + 2 * (lane & 3)) * 2;
#pragma unroll
    for (int j = 0; j < N; j++) {
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(at + (u32)(j * 16)), "r"(DT::pack(acc[j][0], acc[j][1])) : "memory");
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(at + (u32)(j * 16 + 8 * LD * 2)), "r"(DT::pack(acc[j][2], acc[j][3]))
                     : "memory");
    }
#endif
}

template <int STAGES>
struct WarpRing : AsyncRing<STAGES> {
    // Issues the next item into the buffer item i - 1 used (every lane of the
    // warp is done with it), waits for item i's copies and makes them visible
    // to the warp. Returns item i's buffer.
    template <class Load>
    __device__ __forceinline__ int acquire(int i, Load load) {
        if (this->issued < this->n) {
            __syncwarp();
            load(this->issued, (int)((unsigned)this->issued % STAGES));
        }
        cp_async_commit();  // possibly empty: the wait depth stays constant
        this->issued++;
        cp_async_wait<STAGES - 1>();
        __syncwarp();
        return (int)((unsigned)i % STAGES);
    }
};

}  // namespace fsa
