/* fsa-bench --decode: the paged problem a row runs on, made on the device
 * (bench_decode_problem.c): the selections, the pages they touch and the
 * page table, and the arguments of fsa_kvcache_attention over them. */
#ifndef FSA_BENCH_DECODE_PROBLEM_H
#define FSA_BENCH_DECODE_PROBLEM_H

#include "fsa.h"

#include "bench_cuda.h"
#include "bench_decode_options.h"

#include <stddef.h>
#include <stdint.h>

/* A paged problem on the device: B sequences of L cached keys with q_len new tokens each. */
typedef struct dec_problem {
    int B, L, hkv, q_len, k, bk, dv;
    int64_t tq;
    CUdeviceptr q, o, lse, k_cache, v_cache, table, cu, seqused, topk, ws;
    int64_t num_pages;
    int max_pages;
    int hnd;
    size_t bytes;
    int64_t keys_read; /* keys of the selected blocks of every KV head, at each sequence's first token (at every
                        * token with independent selections): what a call reads at least, for TB/s */
} dec_problem;

/* Fills *p for B sequences of L cached keys, q_len new tokens each, k
 * selected blocks of bk keys per token (shared: the tokens of a sequence
 * select the same blocks). Returns 0 when the row's memory, on the device
 * (the touched pages, the page table, ...) or on the host, would pass
 * o->max_gb (nothing allocated), else 1. Out of host memory: exit 1. */
int dec_make(dec_problem *p, const dec_opts *o, int B, int L, int hkv, int q_len, int shared, int k, int bk,
             const fsa_kvcache_plan *plan, uint64_t seed);
/* Whether the last call's o and lse hold only finite values (every row sees its own keys, so none may be
 * empty or NaN on random inputs). */
int dec_output_finite(const dec_problem *p);
void dec_free(dec_problem *p);
fsa_kvcache_args dec_args(const dec_problem *p, const fsa_kvcache_plan *plan);

#endif
