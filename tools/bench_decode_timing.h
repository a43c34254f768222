/* fsa-bench --decode: one call timed on the GPU (events, the L2 flushed)
 * and on the host, and the --stamps records of one call
 * (bench_decode_timing.c). */
#ifndef FSA_BENCH_DECODE_TIMING_H
#define FSA_BENCH_DECODE_TIMING_H

#include "fsa.h"

#include "bench_cuda.h"
#include "bench_decode_problem.h"

#include <stddef.h>
#include <stdio.h>

/* --stamps: the buffer handed to the stamped kernel; the library refuses a
 * plan whose kernel would write more (FSA_KVC_STAMPS is ADDRESS:BYTES). */
#define STAMP_BUFFER_BYTES ((size_t)8 << 20)

/* The stream, events and buffers every timed call uses, made once by
 * fsa_bench_decode. */
typedef struct dec_env {
    CUstream stream;
    CUevent e0, e1;
    CUdeviceptr flush;
    size_t flush_bytes;
    CUdeviceptr stamps; /* --stamps: the kernel's stamp records, and the file they go to */
    FILE *stamps_file;
} dec_env;

/* Median microseconds of one call (graph = 1: replayed from a CUDA graph). */
double dec_time_call(const dec_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a, int reps,
                     int graph);
/* --stamps: one more call, its stamp records as one line of env->stamps_file. */
void dec_write_stamps(const dec_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a,
                      const dec_problem *p, int g, int mode);
/* Host microseconds per call: what enqueueing costs. */
double dec_host_time(const dec_env *env, const fsa_kvcache_plan *plan, const fsa_kvcache_args *a);

#endif
