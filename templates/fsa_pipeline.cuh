// Global -> shared tile loaders (16-byte cp.async pieces) and a ring of
// buffers that keeps several loads in flight while earlier ones are used.
//
// Rows are addressed through a functor, so one loader serves contiguous
// tensors, gathered rows (selected blocks, tokens of a list) and paged caches
// alike. A paged K/V cache, for instance:
//   auto kv = [&](int r) {
//       const long long key = k0 + r;
//       const bool ok = key < seq_len;
//       const long long slot = ok ? (long long)page_table[key / PAGE] * PAGE + key % PAGE : 0;
//       return RowPair{k_cache + slot * k_stride, v_cache + slot * v_stride, ok};
//   };
//   load_tile_pair_async<KEYS, D, LD, THREADS>(ks_addr, vs_addr, kv);
#pragma once
#include "fsa_device.cuh"

namespace fsa {

// Where a tile row comes from. ok = false zero-fills the row; ptr must then
// still be a mapped address (the tensor's base, say): nothing is read from it.
struct RowSrc {
    const u16 *ptr;
    bool ok;
};
// Two tiles with the same rows: K and V of the same keys, Q and dO of the same rows.
struct RowPair {
    const u16 *a, *b;
    bool ok;
};

// Calls f(r, c) for every 16-byte piece of a ROWS x COLS tile (r: row, c:
// first element of the piece), spread over THREADS threads: consecutive
// threads take consecutive pieces of a row, so global reads coalesce. The
// threads are the CTA's first THREADS, or with tid >= 0 a group of THREADS
// threads in which the caller is number tid.
template <int ROWS, int COLS, int THREADS, class F>
__device__ __forceinline__ void for_each_piece(F f, int tid = -1) {
    static_assert(COLS % 8 == 0, "rows are whole 16-byte pieces");
    // Two pieces per iteration keep copies in flight without the registers a
    // deeper unroll costs the kernels that hold large accumulators.
#pragma unroll 2
    for (int i = tid >= 0 ? tid : (int)threadIdx.x; i < ROWS * (COLS / 8); i += THREADS) {
        const int r = i / (COLS / 8);
        f(r, (i - r * (COLS / 8)) * 8);
    }
}

// ROWS rows of COLS elements into the tile at dst (shared byte address, pitch
// LD elements); row(r) -> RowSrc. Every thread of the CTA calls it; the
// copies join the current cp.async group.
template <int ROWS, int COLS, int LD, int THREADS, class Row>
__device__ __forceinline__ void load_tile_async(u32 dst, Row row, int tid = -1) {
    for_each_piece<ROWS, COLS, THREADS>(
        [&](int r, int c) {
            const RowSrc s = row(r);
            cp_async16(dst + (u32)(r * LD + c) * 2, s.ptr + c, s.ok);
        },
        tid);
}

// ---------------------------------------------------------------- 128-byte swizzled tiles
// A tile of `rows` rows x D 16-bit columns is stored as ceil(D / 64) panels
// of 64 columns (fsa_sw128_bytes); panel p holds every row, 128 bytes each,
// at p * rows * 128, and inside a row the 16-byte piece c (columns 8c .. 8c +
// 7 of the panel) sits at piece c ^ (row % 8). Eight rows make a 1024-byte
// swizzle atom; the tile's base is 1024-byte aligned. Hopper's warpgroup
// products read this layout (fsa_wgmma.cuh); eight consecutive 16-byte
// pieces of a column band fall in distinct bank groups.
__device__ __forceinline__ u32 sw128_offset(int row, int col, int rows) {
    return (u32)((col >> 6) * rows * 128 + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) + (col & 7) * 2);
}
// How THREADS threads that copy rows of COLS columns into such a tile split a
// row: consecutive threads take the pieces of a band, a thread keeping one
// column of every band. The whole row where its pieces divide the threads,
// else one 64-column panel (Dk 192 over 128 threads), else 0 (no split).
__host__ __device__ constexpr int sw128_band(int cols, int threads) {
    return cols % 8 == 0 && threads % (cols / 8) == 0 ? cols / 8 : cols % 64 == 0 && threads % 8 == 0 ? 8 : 0;
}

// ROWS rows of COLS elements into the swizzled tile at dst; row(r) ->
// RowSrc. Every thread of the CTA calls it; the copies join the current
// cp.async group.
template <int ROWS, int COLS, int THREADS, class Row>
__device__ __forceinline__ void load_tile_sw128_async(u32 dst, Row row, int tid = -1) {
    for_each_piece<ROWS, COLS, THREADS>(
        [&](int r, int c) {
            const RowSrc s = row(r);
            cp_async16(dst + sw128_offset(r, c, ROWS), s.ptr + c, s.ok);
        },
        tid);
}

// Two tiles of the same shape and rows; rows(r) -> RowPair.
template <int ROWS, int COLS, int LD, int THREADS, class Rows>
__device__ __forceinline__ void load_tile_pair_async(u32 dst_a, u32 dst_b, Rows rows) {
    for_each_piece<ROWS, COLS, THREADS>([&](int r, int c) {
        const RowPair s = rows(r);
        const u32 off = (u32)(r * LD + c) * 2;
        cp_async16(dst_a + off, s.a + c, s.ok);
        cp_async16(dst_b + off, s.b + c, s.ok);
    });
}

// Two tiles with the same rows and widths of their own: K (COLS_A = the
// query/key head dim) and V (COLS_B = the value head dim) of the same keys,
// Q and dO of the same rows; rows(r) -> RowPair. Equal shapes take the one
// pass of load_tile_pair_async, otherwise each tile its own pass.
template <int ROWS, int COLS_A, int LD_A, int COLS_B, int LD_B, int THREADS, class Rows>
__device__ __forceinline__ void load_tiles_async(u32 dst_a, u32 dst_b, Rows rows) {
    if constexpr (COLS_A == COLS_B && LD_A == LD_B) {
        load_tile_pair_async<ROWS, COLS_A, LD_A, THREADS>(dst_a, dst_b, rows);
    } else {
        load_tile_async<ROWS, COLS_A, LD_A, THREADS>(dst_a, [&](int r) {
            const RowPair s = rows(r);
            return RowSrc{s.a, s.ok};
        });
        load_tile_async<ROWS, COLS_B, LD_B, THREADS>(dst_b, [&](int r) {
            const RowPair s = rows(r);
            return RowSrc{s.b, s.ok};
        });
    }
}

// A ring of STAGES buffers filled by cp.async, one commit group per item:
// while item i is in use, items up to i + STAGES - 1 are in flight.
// load(item, buf) issues the copies of one item into buffer buf; every thread
// of the CTA calls start and acquire. Copies issued just before start() join
// item 0's group (data every item needs, such as a K/V block); with one stage
// (no copy ahead), a group of their own, which cp_async_wait<0> then covers
// even where no item is acquired.
//   AsyncRing<2> ring;
//   ring.start(n, load);
//   for (int i = 0; i < n; i++) {
//       const int buf = ring.acquire(i, load);
//       ... use buffer buf ...
//   }
//   cp_async_wait<0>();   // only where shared memory is reused for something else
template <int STAGES>
struct AsyncRing {
    int n, issued;

    template <class Load>
    __device__ __forceinline__ void start(int count, Load load) {
        n = count;
#pragma unroll
        for (issued = 0; issued < STAGES - 1; issued++) {
            if (issued < n) load(issued, issued);
            cp_async_commit();
        }
        if constexpr (STAGES == 1) cp_async_commit();
    }

    // Issues the next item into the buffer item i - 1 used (after a barrier:
    // every warp is done with it), waits for item i's copies and makes them
    // visible to the CTA. Returns item i's buffer. landed() runs in every
    // thread once its own copies of item i are complete, before the barrier
    // (wgmma readers fence them into the async proxy there).
    template <class Load, class Landed>
    __device__ __forceinline__ int acquire(int i, Load load, Landed landed) {
        if (issued < n) {
            __syncthreads();
            load(issued, (int)((unsigned)issued % STAGES));
        }
        cp_async_commit();  // possibly empty: the wait depth stays constant
        issued++;
        cp_async_wait<STAGES - 1>();
        landed();
        __syncthreads();
        return (int)((unsigned)i % STAGES);
    }
    template <class Load>
    __device__ __forceinline__ int acquire(int i, Load load) {
        return acquire(i, load, [] {});
    }

    // acquire with one barrier per item instead of two: waits for item i's
    // copies (landed() as above), the barrier, then issues item i + STAGES -
    // 1 into the buffer of item i - 1, which every warp finished before the
    // barrier. Items i + 1 .. i + STAGES - 1 are in flight while item i is
    // used, one fewer while it is waited for. Not mixed with acquire. One
    // stage has no other buffer to refill: acquire's two barriers (item i's
    // copies start once every thread is done with item i - 1).
    template <class Load, class Landed>
    __device__ __forceinline__ int acquire_then_refill(int i, Load load, Landed landed) {
        return acquire_then_refill(i, load, landed, [] { __syncthreads(); });
    }
    // The same for a ring of a group of threads of its own: sync() is the
    // group's barrier (every thread of the group loads and waits).
    template <class Load, class Landed, class Sync>
    __device__ __forceinline__ int acquire_then_refill(int i, Load load, Landed landed, Sync sync) {
        if constexpr (STAGES == 1) {
            if (issued < n) {
                sync();
                load(issued, 0);
            }
            cp_async_commit();
            issued++;
            cp_async_wait<0>();
            landed();
            sync();
            return 0;
        }
        cp_async_wait<(STAGES > 1 ? STAGES - 2 : 0)>();
        landed();
        sync();
        if (issued < n) load(issued, (int)((unsigned)issued % STAGES));
        cp_async_commit();  // possibly empty: the wait depth stays constant
        issued++;
        return (int)((unsigned)i % STAGES);
    }
};

}  // namespace fsa
