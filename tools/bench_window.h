/* fsa-bench --window: sliding-window attention forward and backward. */
#ifndef FSA_BENCH_WINDOW_H
#define FSA_BENCH_WINDOW_H

/* argv[0] is "--window"; returns the process exit status. */
int fsa_bench_window(int argc, char **argv);

#endif
