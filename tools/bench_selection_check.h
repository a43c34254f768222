/* The rules a compressed branch's top-k row obeys whatever its scores (driver-free, so that a unit test builds
 * it from this source): what fsa-bench --compressed checks of the selections it times. */
#ifndef FSA_BENCH_SELECTION_CHECK_H
#define FSA_BENCH_SELECTION_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* Whether row [K] of a token whose sequence has n_blocks blocks up to its own (position / BK + 1) is a
 * selection: min(n_blocks, K) distinct blocks in [0, n_blocks) in ascending order, then -1; among them the
 * forced blocks (the first init_blocks and the local_blocks up to the own one), as many of them as the row
 * holds, lowest first. Else 0 and the first broken rule in why. */
int bench_selection_row_valid(const int32_t *row, int K, int n_blocks, int init_blocks, int local_blocks, char *why,
                              size_t why_size);

#endif
