/* fsa-bench --decode: selected attention over a paged KV cache (serving). */
#ifndef FSA_BENCH_DECODE_H
#define FSA_BENCH_DECODE_H

/* argv[0] is "--decode"; returns the process exit status. */
int fsa_bench_decode(int argc, char **argv);

#endif
