/* Random inputs for fsa-bench: standard-normal values in bf16 or fp16, made
 * on the host by several threads, and the conversions between those formats
 * and float; the rows of the top-k selection; the host clock; helpers of
 * every mode. Only fsa.h is used (no driver: tests build this file). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "bench_inputs.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint16_t bench_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float bench_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t bench_to_f16(float x)
{
    /* Inputs are standard normal: no overflow or subnormal handling needed
     * beyond flushing tiny values to zero. */
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a < 0x38800000u) return (uint16_t)sign;
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float bench_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return sign ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);
    uint32_t u = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Values come in chunks of a fixed size, each from a seed of its own (seed and the chunk's index), so that they
 * are a function of the seed alone, whatever the threads; thread i makes chunks i, i + threads, ... */
#define GEN_CHUNK ((size_t)1 << 20) /* even: a chunk's pairs of the Box-Muller transform stay within it */

typedef struct gen_job {
    uint16_t *dst;
    size_t n, first_chunk, chunk_step;
    uint64_t seed;
    fsa_dtype dtype;
} gen_job;

static void *gen_normal(void *arg)
{
    const gen_job *j = arg;
    for (size_t chunk = j->first_chunk; chunk * GEN_CHUNK < j->n; chunk += j->chunk_step) {
        const size_t begin = chunk * GEN_CHUNK, end = j->n - begin < GEN_CHUNK ? j->n : begin + GEN_CHUNK;
        uint64_t s = j->seed * 1000003u + chunk;
        for (size_t i = begin; i < end; i += 2) {
            double u1 = ((bench_splitmix(&s) >> 11) + 1) * 0x1.0p-53, u2 = (bench_splitmix(&s) >> 11) * 0x1.0p-53;
            double r = sqrt(-2.0 * log(u1));
            float a = (float)(r * cos(6.283185307179586 * u2)), b = (float)(r * sin(6.283185307179586 * u2));
            j->dst[i] = j->dtype == FSA_DTYPE_BF16 ? bench_to_bf16(a) : bench_to_f16(a);
            if (i + 1 < end) j->dst[i + 1] = j->dtype == FSA_DTYPE_BF16 ? bench_to_bf16(b) : bench_to_f16(b);
        }
    }
    return NULL;
}

double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int bench_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

void bench_fill_normal(uint16_t *dst, size_t n, uint64_t seed, fsa_dtype dt)
{
    const size_t chunks = (n + GEN_CHUNK - 1) / GEN_CHUNK;
    const int nt = chunks < (size_t)bench_threads() ? (int)chunks : bench_threads();
    pthread_t th[64];
    gen_job jobs[64];
    int started[64];
    for (int i = 0; i < nt; i++) {
        jobs[i] = (gen_job){dst, n, (size_t)i, (size_t)nt, seed, dt};
        started[i] = pthread_create(&th[i], NULL, gen_normal, &jobs[i]) == 0;
        if (!started[i]) gen_normal(&jobs[i]); /* no thread: this one makes those chunks */
    }
    for (int i = 0; i < nt; i++)
        if (started[i]) pthread_join(th[i], NULL);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

fsa_tensor bench_rows(uint64_t ptr, int heads, int D) { return (fsa_tensor){ptr, (int64_t)heads * D, D}; }
fsa_tensor bench_topk_rows(uint64_t ptr, int T, int K) { return (fsa_tensor){ptr, K, (int64_t)T * K}; }

void *bench_alloc(const char *mode, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "fsa-bench%s%s: out of host memory (%zu bytes)\n", *mode ? " " : "", mode, bytes);
        exit(1);
    }
    return p;
}

static int cmp_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void bench_selection_row(int32_t *row, int K, int c, uint64_t *s)
{
    int n = 0;
    if (c + 1 <= K) {
        for (int b = 0; b <= c; b++) row[n++] = b;
    } else {
        /* c >= K >= 1 here; at c = 1, c - 1 is block 0 again. K 1 or 2 holds
         * fewer than the three. */
        const int forced[3] = {0, c, c - 1}, n_forced = c - 1 > 0 ? 3 : 2;
        for (; n < K && n < n_forced; n++) row[n] = forced[n];
        while (n < K) {
            int b = (int)(bench_splitmix(s) % (uint64_t)(c + 1)), dup = 0;
            for (int i = 0; i < n && !dup; i++) dup = row[i] == b;
            if (!dup) row[n++] = b;
        }
    }
    qsort(row, (size_t)n, sizeof *row, cmp_int32);
    for (int i = n; i < K; i++) row[i] = -1;
}
