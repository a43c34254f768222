/* The top-k row rules (bench_selection_check.h). */
#include "bench_selection_check.h"

#include <stdarg.h>
#include <stdio.h>

static int broken(char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (why != NULL && why_size > 0) vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
    return 0;
}

static int forced(int c, int n_blocks, int init_blocks, int local_blocks)
{
    return c < init_blocks || c > n_blocks - 1 - local_blocks;
}

int bench_selection_row_valid(const int32_t *row, int K, int n_blocks, int init_blocks, int local_blocks, char *why,
                              size_t why_size)
{
    const int taken = n_blocks < K ? n_blocks : K;
    for (int s = 0; s < K; s++) {
        if (s >= taken) {
            if (row[s] != -1) return broken(why, why_size, "slot %d holds %d, -1 expected after %d blocks", s, row[s], taken);
            continue;
        }
        if (row[s] < 0 || row[s] >= n_blocks)
            return broken(why, why_size, "slot %d holds %d, outside 0..%d", s, row[s], n_blocks - 1);
        if (s > 0 && row[s] <= row[s - 1])
            return broken(why, why_size, "slot %d holds %d after %d: not ascending", s, row[s], row[s - 1]);
    }
    /* The forced blocks the row must hold, lowest first; the row is ascending, so a walk finds each. */
    int forced_seen = 0, s = 0;
    for (int c = 0; c < n_blocks && forced_seen < taken; c++) {
        if (!forced(c, n_blocks, init_blocks, local_blocks)) continue;
        while (s < taken && row[s] < c) s++;
        if (s == taken || row[s] != c) return broken(why, why_size, "forced block %d is missing", c);
        forced_seen++;
    }
    return 1;
}
