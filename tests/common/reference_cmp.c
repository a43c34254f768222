/* CPU float64 reference for compressed attention and block selection;
 * semantics in reference_cmp.h. Written for clarity, not speed: each row
 * recomputes its visible compressed tokens from the definitions. */
#include "reference_cmp.h"

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

int fsa_ref_cmp_count(int len, int kernel_size, int stride)
{
    return len < kernel_size ? 0 : (len - kernel_size) / stride + 1;
}

static int sequence_of(const fsa_ref_cmp_problem *p, int t)
{
    int b = 0;
    while (b + 1 < p->batch && p->cu_seqlens[b + 1] <= t) b++;
    return b;
}

/* Compressed tokens visible at position i of a sequence with `count` of them. */
static int visible_count(const fsa_ref_cmp_problem *p, int i, int count)
{
    int n = 0;
    while (n < count && n * p->stride + p->kernel_size - 1 <= i) n++;
    return n;
}

/* Softmax of query head qh at token t over its visible compressed tokens:
 * prob [n] (packed rows cs .. cs + n - 1), o_row [Dv] (or NULL); returns lse
 * and the count through *n_out. */
static double attend(const fsa_ref_cmp_problem *p, int qh, int t, double *prob, double *o_row, int *n_out, int *cs_out)
{
    const int b = sequence_of(p, t), i = t - p->cu_seqlens[b];
    const int cs = p->cu_seqlens_c[b], count = p->cu_seqlens_c[b + 1] - cs;
    const int G = p->num_q_heads / p->num_kv_heads, h = qh / G, Dk = p->head_dim, Dv = p->value_dim;
    const int n = visible_count(p, i, count);
    const float *q = p->q + ((size_t)t * p->num_q_heads + qh) * Dk;
    *n_out = n;
    *cs_out = cs;
    if (o_row != NULL)
        for (int e = 0; e < Dv; e++) o_row[e] = 0.0;
    if (n == 0) return -INFINITY;
    double mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        const float *k = p->k + ((size_t)(cs + j) * p->num_kv_heads + h) * Dk;
        double x = 0.0;
        for (int e = 0; e < Dk; e++) x += (double)q[e] * (double)k[e];
        prob[j] = p->scale * x;
        if (prob[j] > mx) mx = prob[j];
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        prob[j] = exp(prob[j] - mx);
        sum += prob[j];
    }
    for (int j = 0; j < n; j++) {
        prob[j] /= sum;
        if (o_row == NULL) continue;
        const float *v = p->v + ((size_t)(cs + j) * p->num_kv_heads + h) * Dv;
        for (int e = 0; e < Dv; e++) o_row[e] += prob[j] * (double)v[e];
    }
    return mx + log(sum);
}

static void check_problem(const fsa_ref_cmp_problem *p)
{
    assert(p->batch >= 1 && p->cu_seqlens[0] == 0 && p->cu_seqlens[p->batch] == p->total_tokens);
    assert(p->cu_seqlens_c[0] == 0 && p->cu_seqlens_c[p->batch] == p->total_cmp);
    assert(p->num_kv_heads >= 1 && p->num_q_heads % p->num_kv_heads == 0);
    assert(p->kernel_size >= 1 && p->stride >= 1);
    (void)p;
}

int fsa_ref_cmp_token_seen(const fsa_ref_cmp_problem *p, int jc)
{
    check_problem(p);
    int b = 0;
    while (b + 1 < p->batch && p->cu_seqlens_c[b + 1] <= jc) b++;
    const int len = p->cu_seqlens[b + 1] - p->cu_seqlens[b], j = jc - p->cu_seqlens_c[b];
    return len > 0 && visible_count(p, len - 1, j + 1) == j + 1; /* the sequence's last query sees the most */
}

void fsa_ref_cmp_forward(const fsa_ref_cmp_problem *p, double *o, double *lse)
{
    check_problem(p);
    const int T = p->total_tokens, Hq = p->num_q_heads;
    double *prob = xcalloc((size_t)p->total_cmp, sizeof *prob);
    for (int t = 0; t < T; t++)
        for (int qh = 0; qh < Hq; qh++) {
            int n, cs;
            const double l = attend(p, qh, t, prob, o + ((size_t)t * Hq + qh) * p->value_dim, &n, &cs);
            if (lse != NULL) lse[(size_t)qh * T + t] = l;
        }
    free(prob);
}

void fsa_ref_cmp_backward(const fsa_ref_cmp_problem *p, const float *dout, double *dq, double *dk, double *dv)
{
    fsa_ref_cmp_backward_given_o(p, dout, NULL, dq, dk, dv);
}

void fsa_ref_cmp_backward_given_o(const fsa_ref_cmp_problem *p, const float *dout, const float *o_used, double *dq,
                                  double *dk, double *dv)
{
    fsa_ref_cmp_backward_terms(p, dout, o_used, dq, dk, dv, NULL);
}

void fsa_ref_cmp_backward_terms(const fsa_ref_cmp_problem *p, const float *dout, const float *o_used, double *dq,
                                double *dk, double *dv, const fsa_ref_grad_terms *terms)
{
    check_problem(p);
    const int T = p->total_tokens, Hq = p->num_q_heads, Hkv = p->num_kv_heads, Dk = p->head_dim, Dv = p->value_dim;
    const int G = Hq / Hkv;
    memset(dq, 0, sizeof *dq * (size_t)T * Hq * Dk);
    memset(dk, 0, sizeof *dk * (size_t)p->total_cmp * Hkv * Dk);
    memset(dv, 0, sizeof *dv * (size_t)p->total_cmp * Hkv * Dv);
    fsa_ref_grad_terms_zero(terms, (size_t)T * Hq, (size_t)p->total_cmp * Hkv);
    double *prob = xcalloc((size_t)p->total_cmp, sizeof *prob);
    double *o_row = xcalloc((size_t)Dv, sizeof *o_row);
    for (int t = 0; t < T; t++)
        for (int qh = 0; qh < Hq; qh++) {
            int n, cs;
            (void)attend(p, qh, t, prob, o_row, &n, &cs);
            const int h = qh / G;
            const float *q = p->q + ((size_t)t * Hq + qh) * Dk, *go = dout + ((size_t)t * Hq + qh) * Dv;
            const float *o_given = o_used != NULL ? o_used + ((size_t)t * Hq + qh) * Dv : NULL;
            double delta = 0.0, abs_delta = 0.0;
            for (int e = 0; e < Dv; e++) {
                const double x = (double)go[e] * (o_given != NULL ? (double)o_given[e] : o_row[e]);
                delta += x;
                abs_delta += fabs(x);
            }
            for (int j = 0; j < n; j++) {
                const size_t kj = ((size_t)(cs + j) * Hkv + h) * Dk, vj = ((size_t)(cs + j) * Hkv + h) * Dv;
                double dp = 0.0;
                for (int e = 0; e < Dv; e++) dp += (double)go[e] * p->v[vj + e];
                const double ds = prob[j] * (dp - delta);
                for (int e = 0; e < Dk; e++) {
                    dq[((size_t)t * Hq + qh) * Dk + e] += p->scale * ds * p->k[kj + e];
                    dk[kj + e] += p->scale * ds * q[e];
                }
                for (int e = 0; e < Dv; e++) dv[vj + e] += prob[j] * go[e];
                if (terms)
                    fsa_ref_grad_terms_add(terms, (size_t)t * Hq + qh, (size_t)(cs + j) * Hkv + h, p->scale, ds, prob[j],
                                           fsa_ref_abs_dot(go, p->v + vj, Dv) + abs_delta, q, p->k + kj, go, Dk, Dv);
            }
        }
    fsa_ref_grad_terms_finish(terms, (size_t)T * Hq, (size_t)p->total_cmp * Hkv);
    free(o_row);
    free(prob);
}

int fsa_ref_cmp_block_scores(const fsa_ref_cmp_problem *p, int block_size, int h, int t, double *scores)
{
    check_problem(p);
    const int G = p->num_q_heads / p->num_kv_heads, l = p->kernel_size, d = p->stride;
    const int b = sequence_of(p, t), n_blocks = (t - p->cu_seqlens[b]) / block_size + 1;
    double *prob = xcalloc((size_t)p->total_cmp, sizeof *prob);
    for (int c = 0; c < n_blocks; c++) scores[c] = 0.0;
    for (int g = 0; g < G; g++) {
        int n, cs;
        (void)attend(p, h * G + g, t, prob, NULL, &n, &cs);
        for (int c = 0; c < n_blocks; c++)
            for (int j = 0; j < n; j++)
                if (j * d <= c * block_size + block_size - 1 && j * d + l - 1 >= c * block_size) scores[c] += prob[j];
    }
    free(prob);
    return n_blocks;
}

static int is_forced(int c, int n, int init_blocks, int local_blocks)
{
    return c < init_blocks || c > n - 1 - local_blocks;
}

/* Order of the selection: forced blocks first, ascending; then by score,
 * descending; then by block, ascending. Returns < 0 when a goes first. */
static int before(int a, int b, const double *scores, int n, int init_blocks, int local_blocks)
{
    const int fa = is_forced(a, n, init_blocks, local_blocks), fb = is_forced(b, n, init_blocks, local_blocks);
    if (fa != fb) return fa ? -1 : 1;
    if (!fa && scores[a] != scores[b]) return scores[a] > scores[b] ? -1 : 1;
    return a < b ? -1 : 1;
}

void fsa_ref_select_row(int32_t *row, const double *scores, int n, int top_k, int init_blocks, int local_blocks)
{
    int *order = xcalloc((size_t)n, sizeof *order);
    for (int c = 0; c < n; c++) order[c] = c;
    /* Insertion sort by the selection order. */
    for (int x = 1; x < n; x++)
        for (int y = x; y > 0 && before(order[y], order[y - 1], scores, n, init_blocks, local_blocks) < 0; y--) {
            const int tmp = order[y];
            order[y] = order[y - 1];
            order[y - 1] = tmp;
        }
    const int taken = n < top_k ? n : top_k;
    /* The first `taken`, ascending. */
    int w = 0;
    for (int c = 0; c < n; c++)
        for (int x = 0; x < taken; x++)
            if (order[x] == c) row[w++] = c;
    for (; w < top_k; w++) row[w] = -1;
    free(order);
}

void fsa_ref_cmp_select(const fsa_ref_cmp_problem *p, int block_size, int top_k, int init_blocks, int local_blocks,
                        int32_t *topk, int64_t head_stride, int64_t token_stride)
{
    double *scores = xcalloc((size_t)p->total_tokens / (size_t)block_size + 2, sizeof *scores);
    for (int h = 0; h < p->num_kv_heads; h++)
        for (int t = 0; t < p->total_tokens; t++) {
            const int n = fsa_ref_cmp_block_scores(p, block_size, h, t, scores);
            fsa_ref_select_row(topk + h * head_stride + t * token_stride, scores, n, top_k, init_blocks,
                               local_blocks);
        }
    free(scores);
}

#define WHY(...)                                               \
    do {                                                       \
        if (why != NULL) snprintf(why, why_size, __VA_ARGS__); \
        goto done;                                             \
    } while (0)

int fsa_ref_selection_ok(const int32_t *row, const double *scores, int n, int top_k, int init_blocks,
                         int local_blocks, double tol, double tol_rel, double *swap, char *why, size_t why_size)
{
    if (swap) *swap = 0.0;
    const int taken = n < top_k ? n : top_k;
    char *chosen = xcalloc((size_t)n, 1);
    int ok = 0;
    for (int s = 0; s < top_k; s++) {
        if (s >= taken) {
            if (row[s] != -1) WHY("slot %d holds %d, -1 expected after %d blocks", s, row[s], taken);
            continue;
        }
        if (row[s] < 0 || row[s] >= n) WHY("slot %d holds %d, outside 0..%d", s, row[s], n - 1);
        if (s > 0 && row[s] <= row[s - 1]) WHY("slot %d holds %d after %d: not ascending", s, row[s], row[s - 1]);
        chosen[row[s]] = 1;
    }
    /* The forced blocks the rule takes: the lowest `taken` of them. */
    int forced_taken = 0;
    for (int c = 0; c < n && forced_taken < taken; c++) {
        if (!is_forced(c, n, init_blocks, local_blocks)) continue;
        if (!chosen[c]) WHY("forced block %d is missing", c);
        forced_taken++;
    }
    double worst_taken = INFINITY, best_left = -INFINITY;
    int free_chosen = 0;
    for (int c = 0; c < n; c++) {
        if (is_forced(c, n, init_blocks, local_blocks)) continue;
        if (chosen[c]) {
            free_chosen++;
            if (scores[c] < worst_taken) worst_taken = scores[c];
        } else if (scores[c] > best_left) {
            best_left = scores[c];
        }
    }
    if (forced_taken + free_chosen != taken) WHY("%d forced and %d scored blocks, %d expected", forced_taken, free_chosen, taken);
    if (swap && free_chosen > 0 && worst_taken < best_left) *swap = (best_left - worst_taken) / best_left;
    if (free_chosen > 0 && worst_taken < best_left - (tol + tol_rel * fabs(best_left)))
        WHY("a block scoring %.9g was taken over one scoring %.9g", worst_taken, best_left);
    ok = 1;
done:
    free(chosen);
    return ok;
}
