/* fsa-bench --compressed and --window: NSA's compression branch (with the
 * top-k block selection) and its sliding-window branch. */
#ifndef FSA_BENCH_BRANCHES_H
#define FSA_BENCH_BRANCHES_H

/* argv[0] is "--compressed" or "--window"; returns the process exit status. */
int fsa_bench_branches(int argc, char **argv);

#endif
