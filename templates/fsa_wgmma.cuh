// Hopper warpgroup tensor-core building blocks (wgmma, sm_90a only): the
// 128-byte swizzled shared-memory tiles they read, the loaders that write
// those tiles with cp.async, matrix descriptors, and m64nNk16 products with
// fp32 accumulators (bf16 or fp16 inputs; A from shared memory or registers,
// B from shared memory, optionally transposed).
//
// A warpgroup is 4 consecutive warps (128 threads, warp 0 a multiple of 4);
// every instruction here is issued by all of its threads together. Warp w of
// the warpgroup owns rows 16w .. 16w + 15 of the 64-row product, and its
// accumulator `float d[N / 8][4]` has the layout of fsa_mma.cuh (d[j][e] is
// row 16w + frag_row(lane, e), column frag_col(lane, j, e)), so the softmax
// and fragment helpers of fsa_mma.cuh / fsa_softmax.cuh apply unchanged, and
// frag_to_a turns 16 columns of it into an A operand in registers.
//
// One step of attention (64 rows, Q in shared memory, K and V stages):
//   frag_zero(s);
//   wg_mma_abt<DT, D, KS>(s, q_tile, k_tile);       // fence, then S = Q K^T
//   wg_commit(); wg_wait<0>(); wg_hold(s);           // s is ready
//   ... softmax on s, rescale acc ...
//   wg_p_to_a<DT, KS / 16>(a, s);                    // P to registers
//   wg_mma_pv<DT, KS / 16, DV>(acc, a, v_tile);      // fence, O += P V
//   wg_commit(); wg_wait<0>(); wg_hold(acc);         // (the last four: wg_pv_waited)
//
// Shared-memory data written by ordinary stores or cp.async must be fenced
// into the async proxy (wg_fence_async_smem, by the writing threads after
// their copies landed) before a barrier and the products that read it.
#pragma once
#include "fsa_mma.cuh"
#include "fsa_pipeline.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FSA_WG_ASM(...) asm volatile(__VA_ARGS__)
#else
// Other targets never call these (the kernels choose mma.sync there); a call trips.
#define FSA_WG_ASM(...) __trap()
#endif

namespace fsa {

// ---------------------------------------------------------------- descriptors
// Tiles are the 128-byte swizzled ones of fsa_pipeline.cuh (sw128_offset):
// the canonical 128B-swizzle layout wgmma reads both K-major (rows = M or
// N: Q, K) and MN-major (rows = K: V for P V).
//
// The 64-bit shared-memory matrix descriptor: start address, leading and
// stride byte offsets (each >> 4 in 14 bits), base offset 0 (atoms are
// 1024-byte aligned), layout 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ u64 wg_desc_sw128(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3ffffu) >> 4) | (u64)((lbo >> 4) & 0x3fffu) << 16 | (u64)((sbo >> 4) & 0x3fffu) << 32 |
           1ull << 62;
}

// A descriptor whose start is `bytes` (a multiple of 16) further on: shared
// addresses stay below 2^18, so the start field never carries and one add
// replaces a new descriptor (the operands below share their tile's).
__device__ __forceinline__ u64 wg_desc_add(u64 desc, u32 bytes) {
    return (desc & ~0xffffffffull) | (u32)((u32)desc + (bytes >> 4));  // a 32-bit add: the high word stays
}

// K-major operand (A as M x K, or B as N x K: Q, K): columns 16 kd .. 16 kd +
// 15 of a swizzled tile of `rows` rows. Inside a panel the step moves the
// start by 32 bytes (the hardware swizzles the absolute address); 8-row
// groups are 1024 bytes apart (stride offset); the leading offset is unused.
__device__ __forceinline__ u64 wg_desc_k(u32 tile, int rows, int kd) {
    return wg_desc_add(wg_desc_sw128(tile, 16, 1024), (u32)((kd >> 2) * rows * 128 + (kd & 3) * 32));
}

// MN-major B operand (K x N stored as K rows of N columns: V in P V, with
// the transpose flag): rows 16 kk .. 16 kk + 15 and the 64 columns of panel
// c of a swizzled tile of `rows` rows. Each product reads at most one panel
// (N <= 64), so only the 1024-byte step between 8-row groups matters; both
// offsets carry it.
__device__ __forceinline__ u64 wg_desc_mn(u32 tile, int rows, int kk, int c) {
    return wg_desc_add(wg_desc_sw128(tile, 1024, 1024), (u32)(c * rows * 128 + kk * 16 * 128));
}

// ---------------------------------------------------------------- ordering
// Before the first product after registers it reads (accumulators, A) were
// written by other instructions.
__device__ __forceinline__ void wg_fence() { FSA_WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the products issued since the last commit into one group.
__device__ __forceinline__ void wg_commit() { FSA_WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are pending.
template <int N>
__device__ __forceinline__ void wg_wait() {
    FSA_WG_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's completed shared-memory writes (stores, cp.async)
// visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void wg_fence_async_smem() { FSA_WG_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Register reallocation between warpgroups (warp specialization): every
// thread of the warpgroup executes the same one; the CTA's registers are a
// pool that a dec gives back to and an inc waits on. N: a multiple of 8, 24
// to 256.
template <int N>
__device__ __forceinline__ void wg_regs_dec() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes multiples of 8 from 24 to 256");
    FSA_WG_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void wg_regs_inc() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes multiples of 8 from 24 to 256");
    FSA_WG_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Pins accumulator registers at this point of the program: the compiler may
// not move their reads or writes across it (nor across a wait before it).
template <int NJ>
__device__ __forceinline__ void wg_hold(float d[NJ][4]) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
}

// ---------------------------------------------------------------- products
// d (64 x N) = A B + (scale_d ? d : 0), K = 16. wg_mma_ss: A (64 x 16) and B
// from descriptors, B K-major (N x 16: K rows of Q K^T). wg_mma_rs_t: A in
// registers (a[4], the mma.sync A fragment of the warp's 16 rows, e.g. from
// frag_to_a), B MN-major (16 x N stored row-major: V rows), transposed. N is
// 32 or 64 (d is float[N / 8][4]); DT picks bf16 or fp16 by overload.
#define FSA_WG_ACC4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FSA_WG_ACC16 FSA_WG_ACC4(0), FSA_WG_ACC4(1), FSA_WG_ACC4(2), FSA_WG_ACC4(3)
#define FSA_WG_ACC32 FSA_WG_ACC16, FSA_WG_ACC4(4), FSA_WG_ACC4(5), FSA_WG_ACC4(6), FSA_WG_ACC4(7)
#define FSA_WG_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FSA_WG_D32                                                                                 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

// Operand numbers: the NJ * 4 accumulators come first (%0 ..), then the
// inputs in order; TAIL names them in the instruction.
#define FSA_WG_SS(NAME, TY, N, NJ, REGS, ACC, SC, TAIL)                                                       \
    __device__ __forceinline__ void NAME(dtype_##TY, float (&d)[NJ][4], u64 a, u64 b, int scale_d) {         \
        FSA_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\n"                                              \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " " REGS ", " TAIL ";\n}\n"   \
                   : ACC                                                                                       \
                   : "l"(a), "l"(b), "r"(scale_d));                                                            \
    }
#define FSA_WG_RS_T(TY, N, NJ, REGS, ACC, SC, TAIL, NAME)                                                     \
    __device__ __forceinline__ void NAME(dtype_##TY, float (&d)[NJ][4], const u32 a[4], u64 b,               \
                                                int scale_d) {                                                 \
        FSA_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\n"                                              \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " " REGS ", " TAIL ";\n}\n"   \
                   : ACC                                                                                       \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));                        \
    }
// ss: A, B descriptors, then scale-d p, scale-a, scale-b 1, no transposes.
FSA_WG_SS(wg_mma_ss, bf16, 32, 4, FSA_WG_D16, FSA_WG_ACC16, "%18", "%16, %17, p, 1, 1, 0, 0")
FSA_WG_SS(wg_mma_ss, bf16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%34", "%32, %33, p, 1, 1, 0, 0")
FSA_WG_SS(wg_mma_ss, f16, 32, 4, FSA_WG_D16, FSA_WG_ACC16, "%18", "%16, %17, p, 1, 1, 0, 0")
FSA_WG_SS(wg_mma_ss, f16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%34", "%32, %33, p, 1, 1, 0, 0")
// ss_tt: the same with both operands transposed (MN-major: A stored as K rows
// of its M columns, B as K rows of N columns).
FSA_WG_SS(wg_mma_ss_tt, bf16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%34", "%32, %33, p, 1, 1, 1, 1")
FSA_WG_SS(wg_mma_ss_tt, f16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%34", "%32, %33, p, 1, 1, 1, 1")
// rs: A registers, B descriptor, then scale-d p, scale-a, scale-b 1, B transposed.
FSA_WG_RS_T(bf16, 32, 4, FSA_WG_D16, FSA_WG_ACC16, "%21", "{%16, %17, %18, %19}, %20, p, 1, 1, 1", wg_mma_rs_t)
FSA_WG_RS_T(bf16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%37", "{%32, %33, %34, %35}, %36, p, 1, 1, 1", wg_mma_rs_t)
FSA_WG_RS_T(f16, 32, 4, FSA_WG_D16, FSA_WG_ACC16, "%21", "{%16, %17, %18, %19}, %20, p, 1, 1, 1", wg_mma_rs_t)
FSA_WG_RS_T(f16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%37", "{%32, %33, %34, %35}, %36, p, 1, 1, 1", wg_mma_rs_t)
// rs with B K-major (not transposed: N x 16 stored as N rows, e.g. K rows of Q K^T with Q in registers).
FSA_WG_RS_T(bf16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%37", "{%32, %33, %34, %35}, %36, p, 1, 1, 0", wg_mma_rs)
FSA_WG_RS_T(f16, 64, 8, FSA_WG_D32, FSA_WG_ACC32, "%37", "{%32, %33, %34, %35}, %36, p, 1, 1, 0", wg_mma_rs)
#undef FSA_WG_SS
#undef FSA_WG_RS_T

// ---------------------------------------------------------------- whole operands
// d (64 x N) += A B^T over a depth of K (a multiple of 16): A the 64 rows
// at a_tile of a K-major swizzled tile of A_ROWS rows (a_tile: its base plus
// 128 bytes per row skipped, a multiple of 8 rows), B a K-major swizzled
// tile of N rows (S = Q K^T). Fences (d may have been written since the last
// product), then issues; the caller commits and waits. ACCUMULATE false:
// d = A B^T, whatever d held (no zeroing needed).
// The descriptors of steps kd > 0 are those of step 0 moved by the step's
// byte offset (wg_desc_add): one add each instead of the masks.
template <class DT, int K, int N, int A_ROWS = 64, bool ACCUMULATE = true>
__device__ __forceinline__ void wg_mma_abt(float (&d)[N / 8][4], u32 a_tile, u32 b_tile) {
    const u64 a0 = wg_desc_k(a_tile, A_ROWS, 0), b0 = wg_desc_k(b_tile, N, 0);
    wg_fence();
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++)
        wg_mma_ss(DT(), d, wg_desc_add(a0, (u32)((kd >> 2) * A_ROWS * 128 + (kd & 3) * 32)),
                  wg_desc_add(b0, (u32)((kd >> 2) * N * 128 + (kd & 3) * 32)), ACCUMULATE || kd > 0);
}

// The same with A in registers (a[kd]: the mma.sync A fragments of the
// warp's 16 rows, columns 16 kd .. 16 kd + 15, e.g. query rows kept from an
// ldmatrix), B a K-major swizzled tile of N = 64 rows; d = A B^T (the first
// step overwrites d). Fences, then issues; the caller commits and waits.
template <class DT, int K>
__device__ __forceinline__ void wg_mma_abt_a_regs(float (&d)[8][4], const u32 a[K / 16][4], u32 b_tile) {
    const u64 b0 = wg_desc_k(b_tile, 64, 0);
    wg_fence();
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++)
        wg_mma_rs(DT(), d, a[kd], wg_desc_add(b0, (u32)((kd >> 2) * 64 * 128 + (kd & 3) * 32)), kd > 0);
}

// The warpgroup's 64 x 16KK probabilities in accumulator fragments (p[2 kk],
// p[2 kk + 1] make columns 16 kk .. 16 kk + 15) as A operands in registers.
template <class DT, int KK>
__device__ __forceinline__ void wg_p_to_a(u32 a[KK][4], const float p[2 * KK][4]) {
#pragma unroll
    for (int kk = 0; kk < KK; kk++) frag_to_a<DT>(a[kk], p[2 * kk], p[2 * kk + 1]);
}

// d (64 x DV) += P V: P as A operands in registers (wg_p_to_a), V a
// swizzled tile of 16KK rows x DV (DV a multiple of 64), read in 64-column
// panels; or V the 16KK rows at v_tile of a swizzled tile of V_ROWS rows
// (v_tile: its base plus 128 bytes per row skipped, a multiple of 8 rows).
// Fences (a and d may have been written since the last product), then
// issues; the caller commits and waits.
template <class DT, int KK, int DV, int V_ROWS = 16 * KK>
__device__ __forceinline__ void wg_mma_pv(float (&d)[DV / 8][4], const u32 a[KK][4], u32 v_tile) {
    static_assert(DV % 64 == 0, "value dims in whole 64-column panels");
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KK; kk++)
#pragma unroll
        for (int c = 0; c < DV / 64; c++)
            wg_mma_rs_t(DT(), *reinterpret_cast<float(*)[8][4]>(&d[8 * c]), a[kk], wg_desc_mn(v_tile, V_ROWS, kk, c), 1);
}

// d += P V with the probabilities p (accumulator fragments, 64 x 16KK) turned
// into A operands in a, then waited for: the P V half of a step whose products
// each wait before what follows.
template <class DT, int KK, int DV>
__device__ __forceinline__ void wg_pv_waited(float (&d)[DV / 8][4], u32 (&a)[KK][4], const float (&p)[2 * KK][4],
                                             u32 v_tile) {
    wg_p_to_a<DT, KK>(a, p);
    wg_mma_pv<DT, KK, DV>(d, a, v_tile);
    wg_commit();
    wg_wait<0>();
    wg_hold<DV / 8>(d);
}

}  // namespace fsa
