/* fsa-bench's checks of what it times (bench_check.c): outputs finite, and
 * sampled rows of a selected-attention forward against float64 sums of the
 * same inputs, so that a row's timing never stands for a wrong result. */
#ifndef FSA_BENCH_CHECK_H
#define FSA_BENCH_CHECK_H

#include "bench_cuda.h"
#include "fsa.h"

#include <stddef.h>
#include <stdint.h>

/* Whether the n 16-bit values of dtype dt at ptr are all finite (copied to the host). */
int bench_device_finite(CUdeviceptr ptr, size_t n, fsa_dtype dt);

/* A packed selected-attention problem on the device: q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, Dv], top-k
 * [Hkv, T, K] of blocks of BK keys, one sequence, the softmax scale 1/sqrt(D); o [T, Hq, Dv]. */
typedef struct bench_sel_problem {
    CUdeviceptr q, k, v, topk, o;
    int T, hq, hkv, D, Dv, K, BK;
    fsa_dtype dtype;
} bench_sel_problem;

/* The worst of `rows` sampled (token, query head) rows of o, each row's error norm against the float64
 * attention over its selected keys (the keys of its blocks up to the token) over the larger of that
 * row's norm and 1e-3 x sqrt(Dv); NaN counts as infinite. The samples are a function of seed. */
double bench_sampled_rows_error(const bench_sel_problem *p, int rows, uint64_t seed);

#define BENCH_SELECTION_SAMPLES 64 /* tokens of a compressed selection checked besides each sequence's last */

/* A compressed selection's top-k rows ([T, Hkv, K] at topk, strides in elements) of every KV head at each
 * sequence's last token and `samples` more tokens (a function of seed), against the rules of
 * bench_selection_row_valid (not against scores); seq [batch + 1] (the sequences' offsets) on the host. 1
 * when every row keeps them, else 0 with the first broken row on stderr after `what`. */
int bench_selection_rows_ok(CUdeviceptr topk, int64_t token_stride, int64_t head_stride, const int32_t *seq, int batch,
                            int hkv, int K, int BK, int init_blocks, int local_blocks, int samples, uint64_t seed,
                            const char *what);

#endif
