/* Random inputs for fsa-bench (values and top-k selection rows), its host
 * clock, and the small helpers every mode shares (bench_inputs.c; no driver,
 * so tests build it). */
#ifndef FSA_BENCH_INPUTS_H
#define FSA_BENCH_INPUTS_H

#include "fsa.h"

#include <stddef.h>
#include <stdint.h>

/* The next value of a splitmix64 sequence whose state is *s. */
uint64_t bench_splitmix(uint64_t *s);

/* float <-> bf16 (round to nearest even) and fp16 (inputs of normal range). */
uint16_t bench_to_bf16(float x);
float bench_from_bf16(uint16_t h);
uint16_t bench_to_f16(float x);
float bench_from_f16(uint16_t h);

/* Milliseconds of the monotonic clock. */
double bench_now_ms(void);

/* Online CPUs, 1..64: the threads that make inputs. */
int bench_threads(void);

/* n standard-normal values in dtype dt, a function of seed only. */
void bench_fill_normal(uint16_t *dst, size_t n, uint64_t seed, fsa_dtype dt);

/* One token's row of the benchmark's top-k selection (docs/benchmarks.md),
 * own block c (c >= 0, K >= 1): every block 0..c when they are at most K;
 * else blocks 0, c and c - 1, in that priority and as many as K holds, and
 * distinct uniform picks of 0..c for the other slots, drawn from the
 * splitmix64 state *s. row[0..K) ends sorted ascending, -1 after the blocks. */
void bench_selection_row(int32_t *row, int K, int c, uint64_t *s);

/* A packed [T, heads, D] tensor, and top-k indices laid out [Hkv, T, K], at
 * device address ptr (a CUdeviceptr; fsa_tensor's own type keeps cuda.h out). */
fsa_tensor bench_rows(uint64_t ptr, int heads, int D);
fsa_tensor bench_topk_rows(uint64_t ptr, int T, int K);

/* malloc that ends fsa-bench (exit status 1) with a message naming the mode
 * ("" or e.g. "--decode") and the size when the memory is not there. */
void *bench_alloc(const char *mode, size_t bytes);

/* The median of n > 0 timings (sorted in place): the middle one, or the mean
 * of the two middle ones for an even n. */
double bench_median(double *t, int n);

#endif
