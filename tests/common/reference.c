/* CPU float64 reference for selected attention; semantics in reference.h.
 * Written for clarity, not speed: every (kv head, token) row rebuilds its
 * list of visible keys from the top-k row. */
#include "reference.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t size)
{
    void *ptr = calloc(n == 0 ? 1 : n, size);
    if (ptr == NULL) {
        fprintf(stderr, "reference: out of memory\n");
        abort();
    }
    return ptr;
}

static void check_problem(const fsa_ref_problem *p)
{
    assert(p->batch >= 1 && p->cu_seqlens != NULL);
    assert(p->cu_seqlens[0] == 0 && p->cu_seqlens[p->batch] == p->total_tokens);
    assert(p->num_kv_heads >= 1 && p->num_q_heads % p->num_kv_heads == 0);
    assert(p->head_dim >= 1 && p->block_size >= 1 && p->top_k >= 1);
    (void)p;
}

int fsa_ref_value_dim(const fsa_ref_problem *p) { return p->value_dim > 0 ? p->value_dim : p->head_dim; }

static int kv_head_of(const fsa_ref_problem *p, int qh)
{
    return qh / (p->num_q_heads / p->num_kv_heads);
}

static const int32_t *topk_row(const fsa_ref_problem *p, int h, int t)
{
    return p->topk + (int64_t)h * p->topk_head_stride + (int64_t)t * p->topk_token_stride;
}

int fsa_ref_sequence_of(int batch, const int32_t *cu_seqlens, int t)
{
    /* Last b with cu_seqlens[b] <= t; empty sequences are skipped because
     * the search moves past equal starts. */
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (cu_seqlens[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* i = position of the query inside its sequence. */
static int slot_valid_at(const int32_t *row, int s, int i, int block_size)
{
    int32_t idx = row[s];
    if (idx < 0 || idx > i / block_size) return 0;
    for (int earlier = 0; earlier < s; earlier++)
        if (row[earlier] == idx) return 0;
    return 1;
}

int fsa_ref_slot_valid(const fsa_ref_problem *p, int h, int t, int s)
{
    int b = fsa_ref_sequence_of(p->batch, p->cu_seqlens, t);
    return slot_valid_at(topk_row(p, h, t), s, t - p->cu_seqlens[b], p->block_size);
}

/* Keys visible to a query at position i of the sequence holding packed keys
 * [start, end), with top-k row `row`, in slot order; keys has room for
 * top_k * block_size entries. Returns the count. */
static int visible_keys_at(const fsa_ref_problem *p, const int32_t *row, int start, int end, int i, int *keys)
{
    int n = 0;
    if (i < 0) return 0;
    for (int s = 0; s < p->top_k; s++) {
        if (!slot_valid_at(row, s, i, p->block_size)) continue;
        int lo = start + row[s] * p->block_size;
        int hi = lo + p->block_size;
        if (hi > end) hi = end;
        if (hi > start + i + 1) hi = start + i + 1; /* causal inside the own block */
        for (int j = lo; j < hi; j++) keys[n++] = j;
    }
    return n;
}

/* Packed indices of the keys visible to (h, t). */
static int visible_keys(const fsa_ref_problem *p, int h, int t, int *keys)
{
    int b = fsa_ref_sequence_of(p->batch, p->cu_seqlens, t);
    int start = p->cu_seqlens[b], end = p->cu_seqlens[b + 1];
    return visible_keys_at(p, topk_row(p, h, t), start, end, t - start, keys);
}

static double dot_f(const float *a, const float *b, int n)
{
    double acc = 0.0;
    for (int d = 0; d < n; d++) acc += (double)a[d] * (double)b[d];
    return acc;
}

/* Softmax over the visible keys of query head qh with query row q [D]:
 * fills prob[n] and o_row[Dv], returns lse (-INFINITY and o_row = 0 when
 * n == 0). */
static double attend_row(const fsa_ref_problem *p, int qh, const float *q, const int *keys, int n,
                         double *prob, double *o_row)
{
    int D = p->head_dim, Dv = fsa_ref_value_dim(p);
    int h = kv_head_of(p, qh);
    for (int d = 0; d < Dv; d++) o_row[d] = 0.0;
    if (n == 0) return -INFINITY;

    double mx = -INFINITY;
    for (int m = 0; m < n; m++) {
        prob[m] = p->scale * dot_f(q, p->k + ((size_t)keys[m] * p->num_kv_heads + h) * D, D);
        if (prob[m] > mx) mx = prob[m];
    }
    double sum = 0.0;
    for (int m = 0; m < n; m++) {
        prob[m] = exp(prob[m] - mx);
        sum += prob[m];
    }
    for (int m = 0; m < n; m++) {
        prob[m] /= sum;
        const float *v = p->v + ((size_t)keys[m] * p->num_kv_heads + h) * Dv;
        for (int d = 0; d < Dv; d++) o_row[d] += prob[m] * (double)v[d];
    }
    return mx + log(sum);
}

void fsa_ref_forward(const fsa_ref_problem *p, double *o, double *lse)
{
    check_problem(p);
    int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, D = p->head_dim, Dv = fsa_ref_value_dim(p);
    int G = Hq / Hkv;
    size_t cap = (size_t)p->top_k * p->block_size;
    int *keys = xcalloc(cap, sizeof *keys);
    double *prob = xcalloc(cap, sizeof *prob);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < Hkv; h++) {
            int n = visible_keys(p, h, t, keys);
            for (int r = 0; r < G; r++) {
                int qh = h * G + r;
                double l = attend_row(p, qh, p->q + ((size_t)t * Hq + qh) * D, keys, n, prob,
                                      o + ((size_t)t * Hq + qh) * Dv);
                if (lse != NULL) lse[(size_t)qh * T + t] = l;
            }
        }
    }
    free(prob);
    free(keys);
}

void fsa_ref_forward_row(const fsa_ref_problem *p, int qh, int t, double *o_row, double *lse)
{
    check_problem(p);
    size_t cap = (size_t)p->top_k * p->block_size;
    int *keys = xcalloc(cap, sizeof *keys);
    double *prob = xcalloc(cap, sizeof *prob);
    int n = visible_keys(p, kv_head_of(p, qh), t, keys);
    double l = attend_row(p, qh, p->q + ((size_t)t * p->num_q_heads + qh) * p->head_dim, keys, n, prob, o_row);
    if (lse != NULL) *lse = l;
    free(prob);
    free(keys);
}

void fsa_ref_attend_at(const fsa_ref_problem *p, int qh, int pos, const float *q_row, const int32_t *topk_row,
                       double *o_row, double *lse)
{
    check_problem(p);
    assert(p->batch == 1);
    size_t cap = (size_t)p->top_k * p->block_size;
    int *keys = xcalloc(cap, sizeof *keys);
    double *prob = xcalloc(cap, sizeof *prob);
    int n = pos < p->total_tokens ? visible_keys_at(p, topk_row, 0, p->total_tokens, pos, keys) : 0;
    double l = attend_row(p, qh, q_row, keys, n, prob, o_row);
    if (lse != NULL) *lse = l;
    free(prob);
    free(keys);
}

void fsa_ref_backward(const fsa_ref_problem *p, const float *dout, double *dq, double *dk,
                      double *dv)
{
    fsa_ref_backward_given_o(p, dout, NULL, dq, dk, dv);
}

void fsa_ref_backward_given_o(const fsa_ref_problem *p, const float *dout, const float *o_used, double *dq,
                              double *dk, double *dv)
{
    fsa_ref_backward_terms(p, dout, o_used, dq, dk, dv, NULL);
}

void fsa_ref_backward_terms(const fsa_ref_problem *p, const float *dout, const float *o_used, double *dq, double *dk,
                            double *dv, const fsa_ref_grad_terms *terms)
{
    check_problem(p);
    int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, D = p->head_dim, Dv = fsa_ref_value_dim(p);
    int G = Hq / Hkv;
    memset(dq, 0, sizeof *dq * (size_t)T * Hq * D);
    memset(dk, 0, sizeof *dk * (size_t)T * Hkv * D);
    memset(dv, 0, sizeof *dv * (size_t)T * Hkv * Dv);
    fsa_ref_grad_terms_zero(terms, (size_t)T * Hq, (size_t)T * Hkv);
    size_t cap = (size_t)p->top_k * p->block_size;
    int *keys = xcalloc(cap, sizeof *keys);
    double *prob = xcalloc(cap, sizeof *prob);
    double *o_row = xcalloc((size_t)Dv, sizeof *o_row);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < Hkv; h++) {
            int n = visible_keys(p, h, t, keys);
            if (n == 0) continue; /* o is constant 0: no gradient anywhere */
            for (int r = 0; r < G; r++) {
                int qh = h * G + r;
                size_t qoff = ((size_t)t * Hq + qh) * D, ooff = ((size_t)t * Hq + qh) * Dv;
                const float *q = p->q + qoff;
                const float *go = dout + ooff;
                (void)attend_row(p, qh, q, keys, n, prob, o_row);
                double delta = 0.0, abs_delta = 0.0;
                for (int d = 0; d < Dv; d++) {
                    const double x = (double)go[d] * (o_used ? (double)o_used[ooff + d] : o_row[d]);
                    delta += x;
                    abs_delta += fabs(x);
                }
                for (int m = 0; m < n; m++) {
                    size_t koff = ((size_t)keys[m] * Hkv + h) * D, voff = ((size_t)keys[m] * Hkv + h) * Dv;
                    const float *kj = p->k + koff;
                    const float *vj = p->v + voff;
                    double ds = prob[m] * (dot_f(go, vj, Dv) - delta);
                    for (int d = 0; d < D; d++) {
                        dq[qoff + d] += p->scale * ds * (double)kj[d];
                        dk[koff + d] += p->scale * ds * (double)q[d];
                    }
                    for (int d = 0; d < Dv; d++) dv[voff + d] += prob[m] * (double)go[d];
                    if (terms)
                        fsa_ref_grad_terms_add(terms, (size_t)t * Hq + qh, (size_t)keys[m] * Hkv + h, p->scale, ds,
                                               prob[m], fsa_ref_abs_dot(go, vj, Dv) + abs_delta, q, kj, go, D, Dv);
                }
            }
        }
    }
    fsa_ref_grad_terms_finish(terms, (size_t)T * Hq, (size_t)T * Hkv);
    free(o_row);
    free(prob);
    free(keys);
}

static int row_contains(const int32_t *row, int n, int32_t value)
{
    for (int m = 0; m < n; m++)
        if (row[m] == value) return 1;
    return 0;
}

/* Appends value unless the row is full or already holds it. */
static void add_block(int32_t *row, int *n, int top_k, int32_t value)
{
    if (value < 0 || *n >= top_k || row_contains(row, *n, value)) return;
    row[(*n)++] = value;
}

void fsa_ref_make_selection(int32_t *topk, int64_t head_stride, int64_t token_stride,
                            int total_tokens, int batch, const int32_t *cu_seqlens,
                            int num_kv_heads, int block_size, int top_k, fsa_rng *rng)
{
    assert(cu_seqlens[0] == 0 && cu_seqlens[batch] == total_tokens);
    (void)batch;
    int32_t *row = xcalloc((size_t)top_k, sizeof *row);
    for (int h = 0; h < num_kv_heads; h++) {
        int b = 0;
        for (int t = 0; t < total_tokens; t++) {
            while (t >= cu_seqlens[b + 1]) b++;
            int c = (t - cu_seqlens[b]) / block_size;
            int n = 0;
            add_block(row, &n, top_k, c);
            add_block(row, &n, top_k, 0);
            add_block(row, &n, top_k, c - 1);
            int want = top_k < c + 1 ? top_k : c + 1;
            if (n < want) {
                /* Draws are needed only when 0, c-1 and c are all in, so the
                 * pool is blocks 1..c-2. Floyd's algorithm: a uniform subset
                 * of size m from 1..N in exactly m draws. */
                int N = c - 2, m = want - n;
                assert(n == 3 && m <= N);
                for (int j = N - m + 1; j <= N; j++) {
                    int32_t r = fsa_rng_int(rng, 1, j);
                    row[n] = row_contains(row, n, r) ? j : r;
                    n++;
                }
            }
            /* Insertion sort: rows are at most top_k long. */
            for (int a = 1; a < n; a++) {
                int32_t x = row[a];
                int z = a;
                for (; z > 0 && row[z - 1] > x; z--) row[z] = row[z - 1];
                row[z] = x;
            }
            int32_t *dst = topk + (int64_t)h * head_stride + (int64_t)t * token_stride;
            for (int s = 0; s < top_k; s++) dst[s] = s < n ? row[s] : -1;
        }
    }
    free(row);
}

int64_t fsa_ref_selected_entries(const int32_t *topk, int64_t head_stride, int64_t token_stride,
                                 int total_tokens, int num_kv_heads, int top_k)
{
    int64_t count = 0;
    for (int h = 0; h < num_kv_heads; h++)
        for (int t = 0; t < total_tokens; t++) {
            const int32_t *row = topk + (int64_t)h * head_stride + (int64_t)t * token_stride;
            for (int s = 0; s < top_k; s++) count += row[s] >= 0;
        }
    return count;
}

double fsa_ref_selected_flops(int64_t entries, int group, int block_size, int head_dim)
{
    return 4.0 * (double)entries * group * block_size * head_dim;
}

/* Difference of one element pair; 0 when a and b are the same infinity.
 * Returns 0 when the pair makes the error infinite. */
static int element_diff(double a, double b, double *diff)
{
    if (isfinite(a) && isfinite(b)) {
        *diff = a - b;
        return 1;
    }
    if (isinf(a) && a == b) {
        *diff = 0.0;
        return 1;
    }
    return 0;
}

static double rel_error_impl(const float *af, const double *ad, const double *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t e = 0; e < n; e++) {
        double a = af != NULL ? (double)af[e] : ad[e];
        double diff;
        if (!element_diff(a, b[e], &diff)) return INFINITY;
        num += diff * diff;
        if (isfinite(b[e])) den += b[e] * b[e];
    }
    double norm_b = sqrt(den);
    return sqrt(num) / (norm_b > 1e-30 ? norm_b : 1e-30);
}

double fsa_rel_error(const float *a, const double *b, size_t n)
{
    return rel_error_impl(a, NULL, b, n);
}

double fsa_rel_error_d(const double *a, const double *b, size_t n)
{
    return rel_error_impl(NULL, a, b, n);
}

double fsa_row_rel_error(const float *a, const double *b, size_t rows, size_t row_len, double floor_frac,
                         size_t *worst_row)
{
    return fsa_row_rel_error_floored(a, b, rows, row_len, floor_frac, 0.0, worst_row);
}

/* The worst row's ||a_r - b_r|| / max(||b_r||, terms[r] (terms may be NULL), floor). */
static double worst_row_error(const float *a, const double *b, const double *terms, size_t rows, size_t row_len,
                              double floor, size_t *worst_row)
{
    double worst = 0.0;
    if (worst_row != NULL) *worst_row = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *ar = a + r * row_len;
        const double *br = b + r * row_len;
        double num = 0.0, den = 0.0;
        for (size_t e = 0; e < row_len; e++) {
            double diff;
            if (!element_diff((double)ar[e], br[e], &diff)) {
                if (worst_row != NULL) *worst_row = r;
                return INFINITY;
            }
            num += diff * diff;
            if (isfinite(br[e])) den += br[e] * br[e];
        }
        const double err = sqrt(num) / fmax(fmax(sqrt(den), terms != NULL ? terms[r] : 0.0), floor);
        if (err > worst) {
            worst = err;
            if (worst_row != NULL) *worst_row = r;
        }
    }
    return worst;
}

/* The norm of row r of b (finite elements). */
static double row_norm(const double *b, size_t r, size_t row_len)
{
    double sq = 0.0;
    for (size_t e = 0; e < row_len; e++)
        if (isfinite(b[r * row_len + e])) sq += b[r * row_len + e] * b[r * row_len + e];
    return sqrt(sq);
}

double fsa_row_rel_error_floored(const float *a, const double *b, size_t rows, size_t row_len, double floor_frac,
                                 double abs_floor, size_t *worst_row)
{
    double sum_sq = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const double n = row_norm(b, r, row_len);
        sum_sq += n * n;
    }
    const double rms_row = rows > 0 ? sqrt(sum_sq / (double)rows) : 0.0;
    const double floor = fmax(fmax(floor_frac * rms_row, abs_floor), 1e-30);
    return worst_row_error(a, b, NULL, rows, row_len, floor, worst_row);
}

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

double fsa_row_rel_error_terms(const float *a, const double *b, const double *terms, size_t rows, size_t row_len,
                               double floor_frac, double abs_floor, size_t *worst_row)
{
    /* The median of the nonzero reference rows' norms. */
    double *norms = xcalloc(rows > 0 ? rows : 1, sizeof *norms);
    size_t nonzero = 0;
    for (size_t r = 0; r < rows; r++) {
        const double n = row_norm(b, r, row_len);
        if (n > 0.0) norms[nonzero++] = n;
    }
    qsort(norms, nonzero, sizeof *norms, cmp_double);
    const double median = nonzero > 0 ? norms[nonzero / 2] : 0.0;
    free(norms);
    const double floor = fmax(fmax(floor_frac * median, abs_floor), 1e-30);
    return worst_row_error(a, b, terms, rows, row_len, floor, worst_row);
}

double fsa_max_abs_error(const float *a, const double *b, size_t n)
{
    double worst = 0.0;
    for (size_t e = 0; e < n; e++) {
        double diff;
        if (!element_diff((double)a[e], b[e], &diff)) return INFINITY;
        if (fabs(diff) > worst) worst = fabs(diff);
    }
    return worst;
}
