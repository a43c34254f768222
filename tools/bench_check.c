/* fsa-bench's checks of what it times (bench_check.h). */
#include "bench_check.h"

#include "bench_inputs.h"
#include "bench_selection_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU(call) BENCH_CU("", call)

static double value_of(uint16_t x, fsa_dtype dt) { return dt == FSA_DTYPE_BF16 ? bench_from_bf16(x) : bench_from_f16(x); }

int bench_device_finite(CUdeviceptr ptr, size_t n, fsa_dtype dt)
{
    uint16_t *h = bench_alloc("", n * 2 + 2);
    CU(cu.MemcpyDtoH(h, ptr, n * 2));
    int finite = 1;
    for (size_t i = 0; i < n && finite; i++) finite = isfinite(value_of(h[i], dt));
    free(h);
    return finite;
}

/* Row (t, qh) against float64: the keys of its selected blocks up to t (blocks read whole from the device, every
 * KV head of their tokens: one copy per block). */
static double row_error(const bench_sel_problem *p, int t, int qh, uint16_t *kb, uint16_t *vb, double *acc)
{
    const int hk = qh / (p->hq / p->hkv), D = p->D, Dv = p->Dv;
    uint16_t q[512], o[512];
    int32_t sel[512];
    CU(cu.MemcpyDtoH(q, p->q + ((size_t)t * p->hq + qh) * D * 2, (size_t)D * 2));
    CU(cu.MemcpyDtoH(o, p->o + ((size_t)t * p->hq + qh) * Dv * 2, (size_t)Dv * 2));
    CU(cu.MemcpyDtoH(sel, p->topk + ((size_t)hk * p->T + t) * p->K * 4, (size_t)p->K * 4));
    const double scale = 1.0 / sqrt((double)D);
    double m = -INFINITY, sum = 0.0;
    memset(acc, 0, (size_t)Dv * sizeof *acc);
    for (int s = 0; s < p->K; s++) {
        const int c = sel[s];
        if (c < 0 || (int64_t)c * p->BK > t) continue;
        int dup = 0; /* a block given twice counts once */
        for (int r = 0; r < s; r++) dup |= sel[r] == c;
        if (dup) continue;
        const int j0 = c * p->BK, j1 = j0 + p->BK <= t + 1 ? j0 + p->BK : t + 1;
        CU(cu.MemcpyDtoH(kb, p->k + (size_t)j0 * p->hkv * D * 2, (size_t)(j1 - j0) * p->hkv * D * 2));
        CU(cu.MemcpyDtoH(vb, p->v + (size_t)j0 * p->hkv * Dv * 2, (size_t)(j1 - j0) * p->hkv * Dv * 2));
        for (int j = 0; j < j1 - j0; j++) {
            const uint16_t *kr = kb + ((size_t)j * p->hkv + hk) * D, *vr = vb + ((size_t)j * p->hkv + hk) * Dv;
            double x = 0.0;
            for (int d = 0; d < D; d++) x += value_of(q[d], p->dtype) * value_of(kr[d], p->dtype);
            x *= scale;
            if (x > m) { /* rescale what is summed so far to the new maximum */
                const double f = exp(m - x);
                sum *= f;
                for (int d = 0; d < Dv; d++) acc[d] *= f;
                m = x;
            }
            const double w = exp(x - m);
            sum += w;
            for (int d = 0; d < Dv; d++) acc[d] += w * value_of(vr[d], p->dtype);
        }
    }
    double err = 0.0, norm = 0.0;
    for (int d = 0; d < Dv; d++) {
        const double want = sum > 0.0 ? acc[d] / sum : 0.0, got = value_of(o[d], p->dtype);
        if (!isfinite(got)) return INFINITY;
        err += (got - want) * (got - want);
        norm += want * want;
    }
    const double floor = 1e-3 * sqrt((double)Dv);
    return sqrt(err) / (sqrt(norm) > floor ? sqrt(norm) : floor);
}

double bench_sampled_rows_error(const bench_sel_problem *p, int rows, uint64_t seed)
{
    if (p->D > 512 || p->Dv > 512 || p->K > 512) return INFINITY; /* past the library's limits: never */
    uint16_t *kb = bench_alloc("", (size_t)p->BK * p->hkv * p->D * 2), *vb = bench_alloc("", (size_t)p->BK * p->hkv * p->Dv * 2);
    double *acc = bench_alloc("", (size_t)p->Dv * sizeof(double)), worst = 0.0;
    uint64_t s = seed;
    for (int r = 0; r < rows; r++) {
        /* the last token too: its row reads the most blocks, its own block partial or whole */
        const int t = r == 0 ? p->T - 1 : (int)(bench_splitmix(&s) % (uint64_t)p->T);
        const int qh = (int)(bench_splitmix(&s) % (uint64_t)p->hq);
        const double e = row_error(p, t, qh, kb, vb, acc);
        if (!(e <= worst)) worst = e; /* NaN or larger */
    }
    free(kb);
    free(vb);
    free(acc);
    return worst;
}

/* Every KV head's row of token t (sequence b) against the rules; 0 and a line on stderr at the first that breaks one. */
static int token_rows_ok(CUdeviceptr topk, int64_t ts, int64_t hs, const int32_t *seq, int b, int t, int hkv, int K,
                         int BK, int init_blocks, int local_blocks, int32_t *row, const char *what)
{
    const int n_blocks = (t - seq[b]) / BK + 1;
    char why[160];
    for (int h = 0; h < hkv; h++) {
        CU(cu.MemcpyDtoH(row, topk + (size_t)((int64_t)t * ts + (int64_t)h * hs) * 4, (size_t)K * 4));
        if (!bench_selection_row_valid(row, K, n_blocks, init_blocks, local_blocks, why, sizeof why)) {
            fprintf(stderr, "%s: top-k row of token %d, KV head %d: %s\n", what, t, h, why);
            return 0;
        }
    }
    return 1;
}

static int sequence_of(const int32_t *seq, int batch, int t)
{
    int b = 0;
    while (b + 1 < batch && t >= seq[b + 1]) b++;
    return b;
}

int bench_selection_rows_ok(CUdeviceptr topk, int64_t token_stride, int64_t head_stride, const int32_t *seq, int batch,
                            int hkv, int K, int BK, int init_blocks, int local_blocks, int samples, uint64_t seed,
                            const char *what)
{
    int32_t *row = bench_alloc("", (size_t)K * sizeof *row);
    int ok = 1;
    for (int b = 0; b < batch && ok; b++)
        if (seq[b + 1] > seq[b])
            ok = token_rows_ok(topk, token_stride, head_stride, seq, b, seq[b + 1] - 1, hkv, K, BK, init_blocks,
                               local_blocks, row, what);
    const int T = seq[batch];
    uint64_t s = seed;
    for (int i = 0; i < samples && ok && T > 0; i++) {
        const int t = (int)(bench_splitmix(&s) % (uint64_t)T);
        ok = token_rows_ok(topk, token_stride, head_stride, seq, sequence_of(seq, batch, t), t, hkv, K, BK, init_blocks,
                           local_blocks, row, what);
    }
    free(row);
    return ok;
}
