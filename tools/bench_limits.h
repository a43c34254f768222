/* The shape limits that fsa.h documents for the plans fsa-bench makes
 * (fsa/selected.h, fsa/compressed.h, fsa/window.h; no public constant names
 * them), so that the option parsers, and with them --dry-run, refuse what a
 * plan would refuse after the device is opened. */
#ifndef FSA_BENCH_LIMITS_H
#define FSA_BENCH_LIMITS_H

/* Dk and Dv of every attention. */
#define BENCH_HEAD_DIMS "a multiple of 16 from 16 to 256"
static inline int bench_head_dim_ok(int d) { return d >= 16 && d <= 256 && d % 16 == 0; }

/* Selected attention's keys per block. */
#define BENCH_BLOCK_SIZES "16, 32, 64, 128 or 256"
static inline int bench_block_size_ok(int bk) { return bk >= 16 && bk <= 256 && (bk & (bk - 1)) == 0; }

/* Selected attention with its backward: Dk + Dv over 320 only with both multiples of 32. */
static inline int bench_backward_dims_ok(int dk, int dv) { return dk + dv <= 320 || (dk % 32 == 0 && dv % 32 == 0); }

/* Selected blocks per token: selected attention 1..64, compressed 0..64 (0 = no selection). */
#define BENCH_MAX_TOP_K 64

/* Compressed and window attention: query heads per KV head, 1..16. */
#define BENCH_MAX_BRANCH_GROUP 16

/* Compressed attention: l up to 4096 (stride 1..l); with a selection, block
 * size / stride a power of two up to 64 and (l - 1) / stride at most 64. */
#define BENCH_MAX_KERNEL_SIZE 4096
#define BENCH_MAX_SELECTION_STRIDES 64

/* The selected mode's checks: a relative error this size is 5x what bf16's rounding gives (2^-8 per operand). */
#define BENCH_DEFAULT_TOL 2e-2

#endif
