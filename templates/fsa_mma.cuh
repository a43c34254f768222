// Warp-level tensor-core building blocks (mma.sync m16n8k16, fp32
// accumulate) over tiles in shared memory.
//
// Conventions. A tile is row-major in shared memory with a pitch of LD
// elements (fsa_pitch). Addresses are u32 shared-memory byte addresses
// (smem_addr); a lane's ldmatrix offset (ldm_lane_a / ldm_lane_b) is added
// once, outside the loops, so the loops only add constants. An accumulator
// fragment `float acc[N][4]` holds 16 rows x 8N columns: acc[j][e] is row
// frag_row(lane, e), column frag_col(lane, j, e).
//
// Typical attention step (one warp, 16 query rows, KT keys, head dim D):
//   float s[KT / 8][4];   frag_zero(s);
//   mma_abt<DT, D, KT / 8, LD>(s, q_addr + ldm_lane_a(lane, LD), k_addr + ldm_lane_b(lane, LD));
//   ... softmax on s (fsa_softmax.cuh) ...
//   mma_pv<DT, KT / 16, D / 8, LD>(o, s, v_addr + ldm_lane_a(lane, LD));
#pragma once
#include "fsa_device.cuh"

namespace fsa {

// ---------------------------------------------------------------- lane offsets
// Byte offset of this lane's ldmatrix_x4 row address in a tile of pitch ld:
//  ldm_lane_a: 16 rows x 16 columns as an A operand (rows = m, columns = k);
//              with ldmatrix_x4_trans, also a B operand for two n8 tiles from
//              16 k-major rows (V in P V, K in dS K).
//  ldm_lane_b: 16 rows x 16 columns as the B operand of two n8 tiles from
//              n-major rows (K in Q K^T): registers {0,1} rows 0-7, {2,3} rows 8-15.
__device__ __forceinline__ u32 ldm_lane_a(int lane, int ld) {
    return (((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8) * 2;
}
__device__ __forceinline__ u32 ldm_lane_b(int lane, int ld) {
    return (((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8) * 2;
}

// ---------------------------------------------------------------- fragments
// Row (0..15) and column (0..8N-1) of accumulator element acc[j][e].
__device__ __forceinline__ int frag_row(int lane, int e) { return (lane >> 2) + (e >> 1) * 8; }
__device__ __forceinline__ int frag_col(int lane, int j, int e) { return j * 8 + 2 * (lane & 3) + (e & 1); }

template <int N>
__device__ __forceinline__ void frag_zero(float acc[N][4]) {
#pragma unroll
    for (int j = 0; j < N; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
}

// Row lo (frag_row e < 2) times f[0], row hi times f[1]: the online-softmax rescale.
template <int N>
__device__ __forceinline__ void frag_scale_rows(float acc[N][4], const float f[2]) {
#pragma unroll
    for (int j = 0; j < N; j++) {
        acc[j][0] *= f[0];
        acc[j][1] *= f[0];
        acc[j][2] *= f[1];
        acc[j][3] *= f[1];
    }
}

// acc[j][e] = f(acc[j][e], column, half) for every element of a 16 x 8N
// accumulator (half 0: row lo, 1: row hi).
template <int N, class F>
__device__ __forceinline__ void frag_map(float acc[N][4], int lane, F f) {
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = f(acc[j][e], frag_col(lane, j, e), e >> 1);
}

// a *= b, element by element (dS = P (dP - delta)).
template <int N>
__device__ __forceinline__ void frag_mul(float a[N][4], const float b[N][4]) {
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) a[j][e] *= b[j][e];
}

// Columns 16k..16k+15 of an accumulator (fragments lo = acc[2k], hi =
// acc[2k+1]) as an A operand: P of P V, dS of dS K. Same register layout.
template <class DT>
__device__ __forceinline__ void frag_to_a(u32 a[4], const float lo[4], const float hi[4]) {
    a[0] = DT::pack(lo[0], lo[1]);
    a[1] = DT::pack(lo[2], lo[3]);
    a[2] = DT::pack(hi[0], hi[1]);
    a[3] = DT::pack(hi[2], hi[3]);
}

// The 16 x 8N accumulator as DT into a row-major tile: `rows` is row 0 of the
// warp's 16 rows (pitch LD elements).
template <class DT, int N, int LD>
__device__ __forceinline__ void frag_store(u16 *rows, const float acc[N][4], int lane) {
#pragma unroll
    for (int j = 0; j < N; j++) {
        u16 *at = rows + (lane >> 2) * LD + j * 8 + 2 * (lane & 3);
        *(u32 *)at = DT::pack(acc[j][0], acc[j][1]);
        *(u32 *)(at + 8 * LD) = DT::pack(acc[j][2], acc[j][3]);
    }
}

// The same in fp32 (pitch LD floats): partial results merged across warps.
template <int N, int LD>
__device__ __forceinline__ void frag_store_f32(float *rows, const float acc[N][4], int lane) {
#pragma unroll
    for (int j = 0; j < N; j++) {
        float *at = rows + (lane >> 2) * LD + j * 8 + 2 * (lane & 3);
        *(float2 *)at = make_float2(acc[j][0], acc[j][1]);
        *(float2 *)(at + 8 * LD) = make_float2(acc[j][2], acc[j][3]);
    }
}

// acc += the 16 x 8N fp32 rows frag_store_f32 wrote (pitch LD floats).
template <int N, int LD>
__device__ __forceinline__ void frag_add_f32(float acc[N][4], const float *rows, int lane) {
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float *at = rows + (lane >> 2) * LD + j * 8 + 2 * (lane & 3);
        const float2 lo = *(const float2 *)at, hi = *(const float2 *)(at + 8 * LD);
        acc[j][0] += lo.x, acc[j][1] += lo.y, acc[j][2] += hi.x, acc[j][3] += hi.y;
    }
}

// ---------------------------------------------------------------- products
// acc[m] (16 x 8NJ) += A_m (16 x 16, in registers as ldmatrix_x4 gives it)
// B^T for one 16-deep step and MT row tiles of A that share every B fragment
// (with MT = 2 a warp reads each B fragment once for 32 rows). B as 8NJ
// n-major rows at b_addr (pitch LD, lane offset ldm_lane_b). NJ is even.
template <class DT, int NJ, int LD, int MT>
__device__ __forceinline__ void mma_rows_bt_k16(float acc[MT][NJ][4], const u32 a[MT][4], u32 b_addr) {
#pragma unroll
    for (int jn = 0; jn < NJ; jn += 2) {
        u32 b[4];
        ldmatrix_x4(b, b_addr + jn * 8 * LD * 2);
#pragma unroll
        for (int m = 0; m < MT; m++) {
            DT::mma(acc[m][jn], a[m], b[0], b[1]);
            DT::mma(acc[m][jn + 1], a[m], b[2], b[3]);
        }
    }
}

// The same for one tile of A.
template <class DT, int NJ, int LD>
__device__ __forceinline__ void mma_a_regs_bt(float acc[NJ][4], const u32 a[4], u32 b_addr) {
    mma_rows_bt_k16<DT, NJ, LD, 1>(reinterpret_cast<float(*)[NJ][4]>(acc), reinterpret_cast<const u32(*)[4]>(a),
                                   b_addr);
}

// acc (16 x 8NJ) += A (16 x 16) B^T for one 16-deep step: A rows at a_addr,
// B as 8NJ n-major rows at b_addr (pitch LD). Both include their lane offsets
// (ldm_lane_a, ldm_lane_b). NJ is even.
template <class DT, int NJ, int LD>
__device__ __forceinline__ void mma_abt_k16(float acc[NJ][4], u32 a_addr, u32 b_addr) {
    u32 a[4];
    ldmatrix_x4(a, a_addr);
    mma_a_regs_bt<DT, NJ, LD>(acc, a, b_addr);
}

// acc[m] (16 x 8NJ) += A_m B^T over a depth of K (a multiple of 16) for MT
// tiles of 16 rows of A (tile m at a_addr + m * a_step bytes, lane offset
// ldm_lane_a included) that share every fragment of B (lane offset
// ldm_lane_b): with MT = 2 a warp reads each K fragment once for 32 rows.
template <class DT, int K, int NJ, int LD, int MT>
__device__ __forceinline__ void mma_abt_rows(float acc[MT][NJ][4], u32 a_addr, u32 a_step, u32 b_addr) {
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++) {
        u32 a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++) ldmatrix_x4(a[m], a_addr + m * a_step + kd * 32);
        mma_rows_bt_k16<DT, NJ, LD, MT>(acc, a, b_addr + kd * 32);
    }
}

// acc (16 x 8NJ) += A B^T over a depth of K (a multiple of 16): S = Q K^T,
// dP = dO V^T, and their transposes.
template <class DT, int K, int NJ, int LD>
__device__ __forceinline__ void mma_abt(float acc[NJ][4], u32 a_addr, u32 b_addr) {
    mma_abt_rows<DT, K, NJ, LD, 1>(reinterpret_cast<float(*)[NJ][4]>(acc), a_addr, 0, b_addr);
}

// The A fragments of 16 rows over a depth of K (a multiple of 16) into
// registers, a[kd] holding columns 16 kd .. 16 kd + 15; a_addr includes its
// lane offset (ldm_lane_a). For operands that stay through a whole key loop.
template <int K>
__device__ __forceinline__ void frag_load_a(u32 a[K / 16][4], u32 a_addr) {
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++) ldmatrix_x4(a[kd], a_addr + kd * 32);
}

// acc[m] += A_m B^T as mma_abt_rows with the MT row tiles of A already in
// registers (a[m][kd]: tile m, columns 16 kd .. 16 kd + 15): S = Q K^T with
// the query fragments loaded once for every key tile.
template <class DT, int K, int NJ, int LD, int MT>
__device__ __forceinline__ void mma_abt_rows_a_regs(float acc[MT][NJ][4], const u32 a[MT][K / 16][4], u32 b_addr) {
#pragma unroll
    for (int kd = 0; kd < K / 16; kd++) {
        u32 ak[MT][4];  // register copies: free once unrolled
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int r = 0; r < 4; r++) ak[m][r] = a[m][kd][r];
        mma_rows_bt_k16<DT, NJ, LD, MT>(acc, ak, b_addr + kd * 32);
    }
}

// The same for one tile of 16 rows (a[kd]).
template <class DT, int K, int NJ, int LD>
__device__ __forceinline__ void mma_abt_a_regs(float acc[NJ][4], const u32 a[K / 16][4], u32 b_addr) {
    mma_abt_rows_a_regs<DT, K, NJ, LD, 1>(reinterpret_cast<float(*)[NJ][4]>(acc),
                                          reinterpret_cast<const u32(*)[K / 16][4]>(a), b_addr);
}

// acc (16 x 8N) += A (16 x 16, in registers) B (16 k-major rows x 8N at
// b_addr, lane offset ldm_lane_a). N is even.
template <class DT, int N>
__device__ __forceinline__ void mma_a_rows(float acc[N][4], const u32 a[4], u32 b_addr) {
#pragma unroll
    for (int dn = 0; dn < N; dn += 2) {
        u32 b[4];
        ldmatrix_x4_trans(b, b_addr + dn * 16);
        DT::mma(acc[dn], a, b[0], b[1]);
        DT::mma(acc[dn + 1], a, b[2], b[3]);
    }
}

// acc[m] (16 x 8N) += P_m V (as mma_pv below) for MT tiles of 16 rows of P
// that share every fragment of V.
template <class DT, int KK, int N, int LD, int MT>
__device__ __forceinline__ void mma_pv_rows(float acc[MT][N][4], const float p[MT][2 * KK][4], u32 b_addr) {
#pragma unroll
    for (int kk = 0; kk < KK; kk++) {
        u32 a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++) frag_to_a<DT>(a[m], p[m][2 * kk], p[m][2 * kk + 1]);
#pragma unroll
        for (int dn = 0; dn < N; dn += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, b_addr + kk * 16 * LD * 2 + dn * 16);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                DT::mma(acc[m][dn], a[m], b[0], b[1]);
                DT::mma(acc[m][dn + 1], a[m], b[2], b[3]);
            }
        }
    }
}

// acc (16 x 8N) += P (16 x 16KK, accumulator fragments) V (16KK k-major rows
// at b_addr, pitch LD, lane offset ldm_lane_a): O += P V, dV += P^T dO,
// dQ += dS K.
template <class DT, int KK, int N, int LD>
__device__ __forceinline__ void mma_pv(float acc[N][4], const float p[2 * KK][4], u32 b_addr) {
    mma_pv_rows<DT, KK, N, LD, 1>(reinterpret_cast<float(*)[N][4]>(acc),
                                  reinterpret_cast<const float(*)[2 * KK][4]>(p), b_addr);
}

// ---------------------------------------------------------------- keys on the 16-row side
// For a few query rows (decode: the G heads of one token) the keys take the
// 16-row (m) side of m16n8k16 and the query rows the 8-wide n side, so no
// mma computes padding rows: S^T = K Q^T, then O^T = V^T P^T. A key-major
// accumulator `float s[NQ][4]` holds 16 keys x 8NQ query rows: s[j][e] is key
// frag_row(lane, e), query row frag_col(lane, j, e); an output accumulator
// `float o[NQ][DV / 16][4]` holds o[j][t][e] = O^T(value column 16 t +
// frag_row(lane, e), query row frag_col(lane, j, e)).
//
// Query rows as B fragments: ldmatrix_x4 at q_addr + ldm_lane_b(lane, LD) +
// 32 kd gives q[kd], rows 0-7 in q[kd][0..1] and rows 8-15 in q[kd][2..3]
// (frag_load_a's loop with the B lane offset).

// The transpose of an 8 x 8 b16 fragment (movmatrix, sm_75 and later).
__device__ __forceinline__ u32 movmatrix_trans(u32 x) {
    u32 y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

// s (16 keys x 8NQ rows) += K Q^T over a depth of D: K as 16 key rows at
// k_addr (pitch LD, lane offset ldm_lane_a included), the query rows in
// registers (q[kd], as above).
// (mma_kqt_at: the key fragment of columns 16 kd .. 16 kd + 15 at addr(kd),
// for other tile layouts.)
template <class DT, int D, int NQ, class Addr>
__device__ __forceinline__ void mma_kqt_at(float s[NQ][4], Addr addr, const u32 q[D / 16][4]) {
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++) {
        u32 a[4];
        ldmatrix_x4(a, addr(kd));
#pragma unroll
        for (int j = 0; j < NQ; j++) DT::mma(s[j], a, q[kd][2 * j], q[kd][2 * j + 1]);
    }
}
template <class DT, int D, int NQ>
__device__ __forceinline__ void mma_kqt(float s[NQ][4], u32 k_addr, const u32 q[D / 16][4]) {
    mma_kqt_at<DT, D, NQ>(s, [=](int kd) { return k_addr + kd * 32; }, q);
}

// The probabilities of a key-major accumulator (16 keys x 8 rows) as the B
// fragment of O^T += V^T P^T (k = keys, n = rows): each 8 x 8 half transposed.
template <class DT>
__device__ __forceinline__ void frag_keys_to_b(u32 b[2], const float p[4]) {
    b[0] = movmatrix_trans(DT::pack(p[0], p[1]));
    b[1] = movmatrix_trans(DT::pack(p[2], p[3]));
}

// o (O^T: DV value columns x 8NQ rows) += V^T P^T for 16 keys: V as 16 key
// rows at v_addr (pitch LD, lane offset ldm_lane_b included: with
// ldmatrix_x4_trans that is V^T as A), P as key-major fragments.
// (mma_vt_pt_at: V^T's fragment of value columns 16 t .. 16 t + 15 at addr(t),
// for other tile layouts.)
template <class DT, int DV, int NQ, class Addr>
__device__ __forceinline__ void mma_vt_pt_at(float o[NQ][DV / 16][4], const float p[NQ][4], Addr addr) {
    u32 b[NQ][2];
#pragma unroll
    for (int j = 0; j < NQ; j++) frag_keys_to_b<DT>(b[j], p[j]);
#pragma unroll
    for (int t = 0; t < DV / 16; t++) {
        u32 a[4];
        ldmatrix_x4_trans(a, addr(t));
#pragma unroll
        for (int j = 0; j < NQ; j++) DT::mma(o[j][t], a, b[j][0], b[j][1]);
    }
}
template <class DT, int DV, int NQ>
__device__ __forceinline__ void mma_vt_pt(float o[NQ][DV / 16][4], const float p[NQ][4], u32 v_addr) {
    mma_vt_pt_at<DT, DV, NQ>(o, p, [=](int t) { return v_addr + t * 32; });
}

// Query row frag_col(lane, j, e) of a key-major output accumulator times
// f[j][e & 1]: the online-softmax rescale when the rows are the n side.
template <int NQ, int T>
__device__ __forceinline__ void frag_scale_cols(float o[NQ][T][4], const float f[NQ][2]) {
#pragma unroll
    for (int j = 0; j < NQ; j++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            o[j][t][0] *= f[j][0];
            o[j][t][1] *= f[j][1];
            o[j][t][2] *= f[j][0];
            o[j][t][3] *= f[j][1];
        }
}

}  // namespace fsa
