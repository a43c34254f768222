#include "kvcache_problem.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fsa_kvcache_desc kvc_desc_of(const kvc_case *c, int max_batch, int64_t max_query_tokens)
{
    fsa_kvcache_desc d = FSA_KVCACHE_DESC_INIT;
    d.dtype = c->dtype;
    d.head_dim = c->d;
    d.num_q_heads = c->hq;
    d.num_kv_heads = c->hkv;
    d.block_size = c->bk;
    d.top_k = c->k;
    d.page_size = c->page;
    d.max_batch = max_batch;
    d.max_query_tokens = max_query_tokens;
    d.value_dim = c->dv;
    d.scale = c->scale;
    return d;
}

int kvc_sequence_of(const kvc_problem *p, int t) { return fsa_ref_sequence_of(p->B, p->cu_q, t); }

int kvc_position_of(const kvc_problem *p, int t)
{
    const int b = kvc_sequence_of(p, t);
    return p->seqused[b] - (p->cu_q[b + 1] - p->cu_q[b]) + (t - p->cu_q[b]);
}

static void *xmalloc(size_t bytes)
{
    void *ptr = malloc(bytes ? bytes : 1);
    assert_non_null(ptr);
    return ptr;
}

/* Distinct blocks of 0..own in random order, the own block first; junk on request. */
/* A token's top-k row: its own block, other past blocks, and with junk one bad slot. `last`: the last
 * block of the token's sequence, so a junk row of a token before it also holds its next block, a future
 * block inside the cache (a later new token's), which only the causal mask hides. */
static void make_row(int32_t *row, const kvc_case *c, int pos, int last, fsa_rng *rng)
{
    for (int s = 0; s < c->k; s++) row[s] = -1;
    if (pos < 0) return;
    const int own = pos / c->bk, n = own + 1 < c->k ? own + 1 : c->k;
    for (int s = 0; s < n; s++) {
        int v = s == 0 ? own : fsa_rng_int(rng, 0, own);
        for (int s2 = 0; s2 < s; s2++)
            if (row[s2] == v) { /* taken: the next free block */
                v = (v + 1) % (own + 1);
                s2 = -1;
            }
        row[s] = v;
    }
    for (int s = c->k - 1; s > 0; s--) { /* the own block anywhere */
        const int o = fsa_rng_int(rng, 0, s);
        const int32_t x = row[s];
        row[s] = row[o];
        row[o] = x;
    }
    if (!c->junk) return;
    if (own < last && c->k > 1) /* the next block, in a slot other than the own block's */
        for (int s = 0; s < c->k; s++)
            if (row[s] != own) {
                row[s] = own + 1;
                break;
            }
    const int slot = fsa_rng_int(rng, 0, c->k - 1);
    switch (fsa_rng_int(rng, 0, 7)) {
    case 0: row[slot] = -1; break;
    case 1: row[slot] = own + 1 + fsa_rng_int(rng, 0, 2); break; /* future */
    case 2: row[slot] = own + 100000; break;                     /* past the cache */
    case 3: row[slot] = row[0]; break;                            /* a repeat */
    case 4: row[slot] = -7 - fsa_rng_int(rng, 0, 1000); break;
    case 5: row[slot] = 0x7fffffff; break;
    default: break;
    }
}

static int pages_of(int len, int page) { return (len + page - 1) / page; }

void kvc_reshuffle_pages(kvc_problem *p, uint64_t seed)
{
    fsa_rng rng = {seed};
    int used = 0;
    for (int b = 0; b < p->B; b++) used += pages_of(p->seqused[b], p->page);
    p->num_pages = used + 3; /* spare pages nobody owns (NaN) */
    int *perm = xmalloc((size_t)p->num_pages * sizeof *perm);
    for (int i = 0; i < p->num_pages; i++) perm[i] = i;
    for (int i = p->num_pages - 1; i > 0; i--) {
        const int j = fsa_rng_int(&rng, 0, i), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    int next = 0;
    for (int b = 0; b < p->B; b++) {
        int32_t *row = p->table + (size_t)b * p->table_stride;
        const int n = pages_of(p->seqused[b], p->page);
        for (int s = 0; s < p->table_stride; s++) /* garbage, valid page numbers included */
            row[s] = s < n ? perm[next++] : fsa_rng_int(&rng, -1000, 2 * p->num_pages + 1000);
    }
    free(perm);
}

/* The first sequence's last new token, query head 0, against its own key
 * (KV head 0, in its own block, which its row always selects in a case
 * without junk and lengths): the key is q * 1e4 / (scale |q|^2), a logit of
 * about 1e4 far above every other. */
static void big_logit_key(kvc_problem *p, const kvc_case *c)
{
    for (int b = 0; b < p->B; b++) {
        if (c->seqs[b].q_len == 0) continue;
        const float *q = p->q + (size_t)(p->cu_q[b + 1] - 1) * c->hq * c->d;
        float *key = p->k_seq[b] + (size_t)(p->seqused[b] - 1) * c->hkv * c->d;
        double qq = 0;
        for (int d = 0; d < c->d; d++) qq += (double)q[d] * q[d];
        for (int d = 0; d < c->d; d++) key[d] = attn_round_to(c->dtype, (float)(1e4 / p->scale * q[d] / qq));
        return;
    }
}

void kvc_problem_make(kvc_problem *p, const kvc_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    fsa_rng rng = {seed};
    assert_true(c->nseq >= 1 && c->nseq <= KVC_MAX_SEQS);
    p->B = c->nseq;
    p->hq = c->hq;
    p->hkv = c->hkv;
    p->d = c->d;
    p->dv = c->dv > 0 ? c->dv : c->d;
    p->bk = c->bk;
    p->k = c->k;
    p->page = c->page;
    p->dtype = c->dtype;
    p->scale = c->scale > 0 ? (double)c->scale : 1.0 / sqrt((double)c->d);
    p->max_pages = 1;
    for (int b = 0; b < p->B; b++) {
        p->cu_q[b + 1] = p->cu_q[b] + c->seqs[b].q_len;
        p->seqused[b] = c->seqs[b].cached + c->seqs[b].q_len;
        const int n = pages_of(p->seqused[b], p->page);
        if (n > p->max_pages) p->max_pages = n;
        const size_t nkv = (size_t)p->seqused[b] * c->hkv * c->d, nv = (size_t)p->seqused[b] * c->hkv * p->dv;
        p->k_seq[b] = xmalloc(nkv * sizeof(float));
        p->v_seq[b] = xmalloc(nv * sizeof(float));
        for (size_t i = 0; i < nkv; i++) p->k_seq[b][i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
        for (size_t i = 0; i < nv; i++) p->v_seq[b][i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    }
    p->Tq = p->cu_q[p->B];
    const size_t nq = (size_t)p->Tq * c->hq * c->d;
    p->q = xmalloc(nq * sizeof(float));
    for (size_t i = 0; i < nq; i++) p->q[i] = attn_round_to(c->dtype, (float)fsa_rng_normal(&rng));
    if (c->big_logit) big_logit_key(p, c);

    const int heads = c->topk_layout == KVC_TOPK_SHARED ? 1 : c->hkv;
    p->topk_elems = (size_t)heads * p->Tq * c->k + 1;
    p->topk = xmalloc(p->topk_elems * sizeof(int32_t));
    p->topk_hs = c->topk_layout == KVC_TOPK_HTK ? (int64_t)p->Tq * c->k : c->topk_layout == KVC_TOPK_THK ? c->k : 0;
    p->topk_ts = c->topk_layout == KVC_TOPK_THK ? (int64_t)c->hkv * c->k : c->k;
    if (c->with_length) p->topk_len = xmalloc((size_t)(p->Tq + 1) * sizeof(int32_t));
    kvc_reselect(p, c, fsa_rng_next(&rng));

    /* Caches: padded page stride; NHD or HND inside a page; each its own head dim. */
    if (c->cache_hnd) {
        p->token_stride = c->d;
        p->head_stride = (int64_t)c->page * c->d;
        p->v_token_stride = p->dv;
        p->v_head_stride = (int64_t)c->page * p->dv;
    } else {
        p->head_stride = c->d;
        p->token_stride = (int64_t)c->hkv * c->d;
        p->v_head_stride = p->dv;
        p->v_token_stride = (int64_t)c->hkv * p->dv;
    }
    /* o: padded on the HND cases, so both o layouts run over the table. */
    p->o_hs = c->cache_hnd ? p->dv + 8 : p->dv;
    p->o_ts = c->cache_hnd ? (int64_t)c->hq * p->o_hs + 16 : (int64_t)c->hq * p->dv;
    p->page_stride = (int64_t)c->page * c->hkv * c->d + 8;
    p->v_page_stride = (int64_t)c->page * c->hkv * p->dv + 8;
    p->table_stride = p->max_pages + 3;
    p->table = xmalloc((size_t)p->B * p->table_stride * sizeof(int32_t));
    kvc_reshuffle_pages(p, seed ^ 0x9e3779b97f4a7c15ull);
    p->o_ref = xmalloc((size_t)p->Tq * c->hq * p->dv * sizeof(double) + 8);
    p->lse_ref = xmalloc((size_t)c->hq * p->Tq * sizeof(double) + 8);
}

void kvc_reselect(kvc_problem *p, const kvc_case *c, uint64_t seed)
{
    fsa_rng rng = {seed};
    const int heads = c->topk_layout == KVC_TOPK_SHARED ? 1 : c->hkv;
    for (int h = 0; h < heads; h++)
        for (int t = 0; t < p->Tq; t++)
            make_row(p->topk + h * p->topk_hs + t * p->topk_ts, c, kvc_position_of(p, t),
                     (p->seqused[kvc_sequence_of(p, t)] - 1) / c->bk, &rng);
    if (p->topk_len) {
        for (int t = 0; t < p->Tq; t++) p->topk_len[t] = fsa_rng_int(&rng, 0, c->k);
        if (p->Tq > 0) p->topk_len[0] = c->k + 5; /* longer than K: all K slots */
        if (p->Tq > 1) p->topk_len[1] = -3;        /* negative: no slot */
    }
}

static int topk_heads(const kvc_problem *p) { return p->topk_hs == 0 ? 1 : p->hkv; }

void kvc_share_rows(kvc_problem *p)
{
    for (int b = 0; b < p->B; b++) {
        const int last = p->cu_q[b + 1] - 1;
        for (int t = p->cu_q[b]; t < last; t++) {
            for (int h = 0; h < topk_heads(p); h++)
                memcpy(p->topk + h * p->topk_hs + t * p->topk_ts, p->topk + h * p->topk_hs + last * p->topk_ts,
                       (size_t)p->k * sizeof(int32_t));
            if (p->topk_len) p->topk_len[t] = p->topk_len[last];
        }
    }
}

void kvc_rotate_rows(kvc_problem *p)
{
    for (int b = 0; b < p->B; b++)
        for (int t = p->cu_q[b] + 1; t < p->cu_q[b + 1]; t++) {
            int n = p->topk_len ? p->topk_len[t] : p->k;
            n = n < 0 ? 0 : n > p->k ? p->k : n;
            for (int h = 0; h < topk_heads(p) && n > 1; h++) {
                int32_t *row = p->topk + h * p->topk_hs + t * p->topk_ts;
                const int32_t head = row[0];
                memmove(row, row + 1, (size_t)(n - 1) * sizeof(int32_t));
                row[n - 1] = head;
            }
        }
}

void kvc_problem_single(kvc_problem *out, const kvc_problem *p, int b)
{
    *out = *p;
    out->B = 1;
    const int t0 = p->cu_q[b], n = p->cu_q[b + 1] - t0;
    out->cu_q[0] = 0;
    out->cu_q[1] = n;
    out->Tq = n;
    out->seqused[0] = p->seqused[b];
    const size_t nkv = (size_t)p->seqused[b] * p->hkv * p->d, nq = (size_t)n * p->hq * p->d;
    const size_t nv = (size_t)p->seqused[b] * p->hkv * p->dv;
    out->k_seq[0] = xmalloc(nkv * sizeof(float));
    out->v_seq[0] = xmalloc(nv * sizeof(float));
    memcpy(out->k_seq[0], p->k_seq[b], nkv * sizeof(float));
    memcpy(out->v_seq[0], p->v_seq[b], nv * sizeof(float));
    out->q = xmalloc(nq * sizeof(float));
    memcpy(out->q, p->q + (size_t)t0 * p->hq * p->d, nq * sizeof(float));
    /* Same layout kind, n tokens. */
    const int heads = topk_heads(p);
    out->topk_ts = p->topk_ts;
    out->topk_hs = p->topk_hs == 0 ? 0 : p->topk_ts == p->k ? (int64_t)n * p->k : p->k;
    out->topk_elems = (size_t)heads * n * p->k + 1;
    out->topk = xmalloc(out->topk_elems * sizeof(int32_t));
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < n; i++)
            memcpy(out->topk + h * out->topk_hs + i * out->topk_ts, p->topk + h * p->topk_hs + (t0 + i) * p->topk_ts,
                   (size_t)p->k * sizeof(int32_t));
    out->topk_len = NULL;
    if (p->topk_len) {
        out->topk_len = xmalloc((size_t)(n + 1) * sizeof(int32_t));
        memcpy(out->topk_len, p->topk_len + t0, (size_t)n * sizeof(int32_t));
    }
    out->max_pages = (p->seqused[b] + p->page - 1) / p->page;
    if (out->max_pages < 1) out->max_pages = 1;
    out->table_stride = out->max_pages + 3;
    out->table = xmalloc((size_t)out->table_stride * sizeof(int32_t));
    kvc_reshuffle_pages(out, 4242);
    out->o_ref = xmalloc((size_t)n * p->hq * p->dv * sizeof(double) + 8);
    out->lse_ref = xmalloc((size_t)p->hq * n * sizeof(double) + 8);
}

void kvc_problem_free(kvc_problem *p)
{
    for (int b = 0; b < p->B; b++) {
        free(p->k_seq[b]);
        free(p->v_seq[b]);
    }
    free(p->q);
    free(p->topk);
    free(p->topk_len);
    free(p->table);
    free(p->o_ref);
    free(p->lse_ref);
}

/* ------------------------------------------------------------ reference */

typedef struct kvc_ref_job {
    kvc_problem *p;
    int first, step;
} kvc_ref_job;

static void reference_row(kvc_problem *p, int t, int qh)
{
    const int b = kvc_sequence_of(p, t), h = qh / (p->hq / p->hkv), L = p->seqused[b];
    const int32_t cu[2] = {0, L};
    const fsa_ref_problem rp = {L, 1, cu, p->hq, p->hkv, p->d, p->bk, p->k, p->scale,
                                NULL, p->k_seq[b], p->v_seq[b], NULL, 0, 0, p->dv};
    int32_t row[64];
    const int32_t *src = p->topk + h * p->topk_hs + t * p->topk_ts;
    const int len = p->topk_len ? p->topk_len[t] : p->k;
    for (int s = 0; s < p->k; s++) row[s] = s < len ? src[s] : -1; /* slots past the length are unused */
    double *o = p->o_ref + ((size_t)t * p->hq + qh) * p->dv;
    double lse = -INFINITY;
    if (L > 0)
        fsa_ref_attend_at(&rp, qh, kvc_position_of(p, t), p->q + ((size_t)t * p->hq + qh) * p->d, row, o, &lse);
    else
        memset(o, 0, (size_t)p->dv * sizeof *o);
    p->lse_ref[(size_t)qh * p->Tq + t] = lse;
}

static void *kvc_ref_worker(void *arg)
{
    kvc_ref_job *j = arg;
    for (int r = j->first; r < j->p->Tq * j->p->hq; r += j->step) reference_row(j->p, r / j->p->hq, r % j->p->hq);
    return NULL;
}

void kvc_problem_reference(kvc_problem *p)
{
    enum { MAX_THREADS = 32 };
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
    pthread_t th[MAX_THREADS];
    kvc_ref_job jobs[MAX_THREADS];
    for (int i = 0; i < nt; i++) {
        jobs[i] = (kvc_ref_job){p, i, nt};
        assert_int_equal(pthread_create(&th[i], NULL, kvc_ref_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
}

/* ------------------------------------------------------------ paged images */

/* Element of key j, head h of sequence b in the key (which 0) or value (1) cache. */
static size_t cache_offset(const kvc_problem *p, int which, int b, int j, int h)
{
    const int32_t page = p->table[(size_t)b * p->table_stride + j / p->page];
    if (which)
        return (size_t)page * p->v_page_stride + (size_t)(j % p->page) * p->v_token_stride +
               (size_t)h * p->v_head_stride;
    return (size_t)page * p->page_stride + (size_t)(j % p->page) * p->token_stride + (size_t)h * p->head_stride;
}

uint16_t *kvc_cache_image(const kvc_problem *p, int which, size_t *elems_out)
{
    const int dim = which ? p->dv : p->d;
    const size_t n = (size_t)p->num_pages * (which ? p->v_page_stride : p->page_stride);
    uint16_t *img = xmalloc(n * sizeof *img);
    memset(img, 0xff, n * sizeof *img); /* NaN: a read of anything but a cached key poisons the output */
    for (int b = 0; b < p->B; b++) {
        const float *src = which ? p->v_seq[b] : p->k_seq[b];
        for (int j = 0; j < p->seqused[b]; j++)
            for (int h = 0; h < p->hkv; h++)
                for (int d = 0; d < dim; d++)
                    img[cache_offset(p, which, b, j, h) + d] = attn_bits_of(p->dtype, src[((size_t)j * p->hkv + h) * dim + d]);
    }
    *elems_out = n;
    return img;
}

void kvc_gather(float *out, const kvc_problem *p, const uint16_t *img, int which, int b)
{
    const int dim = which ? p->dv : p->d;
    for (int j = 0; j < p->seqused[b]; j++)
        for (int h = 0; h < p->hkv; h++)
            for (int d = 0; d < dim; d++)
                out[((size_t)j * p->hkv + h) * dim + d] = attn_float_of(p->dtype, img[cache_offset(p, which, b, j, h) + d]);
}

/* ------------------------------------------------------------ device */

static uint64_t upload(const void *src, size_t bytes)
{
    uint64_t dev = fsa_test_dalloc(bytes ? bytes : 4);
    if (bytes) fsa_test_h2d(dev, src, bytes);
    return dev;
}

static void upload_caches(const kvc_device *dv, const kvc_problem *p)
{
    for (int which = 0; which < 2; which++) {
        size_t n;
        uint16_t *img = kvc_cache_image(p, which, &n);
        assert_true(n * 2 <= dv->cache_bytes);
        fsa_test_h2d(which ? dv->v : dv->k, img, n * 2);
        free(img);
    }
}

void kvc_device_make(kvc_device *dv, const kvc_problem *p, const fsa_kvcache_plan *plan)
{
    memset(dv, 0, sizeof *dv);
    const size_t nq = (size_t)p->Tq * p->hq * p->d;
    uint16_t *bits = xmalloc(nq * 2 + 2);
    for (size_t i = 0; i < nq; i++) bits[i] = attn_bits_of(p->dtype, p->q[i]);
    dv->q = upload(bits, nq * 2);
    free(bits);
    dv->o_bytes = (size_t)p->Tq * p->hq * p->dv * 2;
    dv->o_img_bytes = (size_t)p->Tq * p->o_ts * 2;
    dv->poison = 0xff;
    dv->o = fsa_test_dalloc(dv->o_img_bytes + 4);
    dv->lse = fsa_test_dalloc((size_t)p->hq * p->Tq * 4 + 4);
    const int64_t stride = p->page_stride > p->v_page_stride ? p->page_stride : p->v_page_stride;
    dv->cache_bytes = (size_t)p->num_pages * stride * 2;
    dv->k = fsa_test_dalloc(dv->cache_bytes);
    dv->v = fsa_test_dalloc(dv->cache_bytes);
    dv->cu = fsa_test_dalloc(sizeof p->cu_q);
    dv->seqused = fsa_test_dalloc(sizeof p->seqused);
    dv->table = fsa_test_dalloc((size_t)p->B * p->table_stride * 4);
    dv->topk = fsa_test_dalloc(p->topk_elems * 4);
    if (p->topk_len) dv->topk_len = fsa_test_dalloc((size_t)(p->Tq + 1) * 4);
    assert_int_equal(fsa_kvcache_plan_workspace_size(&dv->ws_bytes, plan), FSA_STATUS_OK);
    if (dv->ws_bytes) {
        dv->ws = fsa_test_dalloc(dv->ws_bytes);
        /* Only the counters zeroed, once (they stay zero between calls): the scratch after them poisoned. */
        size_t counters = 0;
        assert_int_equal(fsa_kvcache_plan_workspace_counter_size(&counters, plan), FSA_STATUS_OK);
        assert_true(counters > 0 && counters < dv->ws_bytes);
        fsa_test_dfill(dv->ws, 0xff, dv->ws_bytes);
        fsa_test_dfill(dv->ws, 0, counters);
    }
    kvc_device_update(dv, p);
}

void kvc_device_update(const kvc_device *dv, const kvc_problem *p)
{
    fsa_test_h2d(dv->cu, p->cu_q, sizeof p->cu_q);
    fsa_test_h2d(dv->seqused, p->seqused, sizeof p->seqused);
    fsa_test_h2d(dv->table, p->table, (size_t)p->B * p->table_stride * 4);
    fsa_test_h2d(dv->topk, p->topk, p->topk_elems * 4);
    if (p->topk_len) fsa_test_h2d(dv->topk_len, p->topk_len, (size_t)(p->Tq + 1) * 4);
    upload_caches(dv, p);
}

void kvc_device_free(kvc_device *dv)
{
    const uint64_t all[] = {dv->q, dv->k, dv->v, dv->o, dv->lse, dv->cu, dv->seqused, dv->table, dv->topk,
                            dv->topk_len, dv->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) fsa_test_dfree(all[i]);
}

fsa_kvcache_args kvc_args_of(const kvc_device *dv, const kvc_problem *p)
{
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    a.num_query_tokens = p->Tq;
    a.batch = p->B;
    a.q = (fsa_tensor){dv->q, (int64_t)p->hq * p->d, p->d};
    a.cu_seqlens_q = dv->cu;
    a.k_cache = (fsa_tensor){dv->k, p->token_stride, p->head_stride};
    a.v_cache = (fsa_tensor){dv->v, p->v_token_stride, p->v_head_stride};
    a.k_page_stride = p->page_stride;
    a.v_page_stride = p->v_page_stride;
    a.num_pages = p->num_pages;
    a.block_table = dv->table;
    a.block_table_stride = p->table_stride;
    a.max_pages_per_seq = p->max_pages;
    a.seqused_k = dv->seqused;
    a.topk = (fsa_tensor){dv->topk, p->topk_ts, p->topk_hs};
    a.topk_length = dv->topk_len;
    a.o = (fsa_tensor){dv->o, p->o_ts, p->o_hs};
    a.lse = dv->lse;
    a.workspace = dv->ws;
    a.workspace_bytes = dv->ws_bytes;
    return a;
}

void kvc_poison(const kvc_device *dv, const kvc_problem *p)
{
    fsa_test_dfill(dv->o, dv->poison, dv->o_img_bytes);
    fsa_test_dfill(dv->lse, dv->poison, (size_t)p->hq * p->Tq * 4);
}

void kvc_download(kvc_outputs *out, const kvc_device *dv, const kvc_problem *p)
{
    const size_t nq = (size_t)p->Tq * p->hq * p->dv, nl = (size_t)p->hq * p->Tq; /* o elements, lse */
    out->o_img_elems = dv->o_img_bytes / 2;
    out->o_img = xmalloc(dv->o_img_bytes);
    out->o_bits = xmalloc(nq * 2);
    out->o = xmalloc(nq * sizeof(float));
    out->lse = xmalloc(nl * sizeof(float));
    out->poison = dv->poison;
    fsa_test_d2h(out->o_img, dv->o, dv->o_img_bytes);
    fsa_test_d2h(out->lse, dv->lse, nl * 4);
    for (int t = 0; t < p->Tq; t++)
        for (int h = 0; h < p->hq; h++)
            memcpy(out->o_bits + ((size_t)t * p->hq + h) * p->dv, out->o_img + t * p->o_ts + h * p->o_hs,
                   (size_t)p->dv * 2);
    for (size_t i = 0; i < nq; i++) out->o[i] = attn_float_of(p->dtype, out->o_bits[i]);
}

void kvc_outputs_free(kvc_outputs *out)
{
    free(out->o_img);
    free(out->o_bits);
    free(out->o);
    free(out->lse);
}

void kvc_assert_o_padding_untouched(const kvc_outputs *out, const kvc_problem *p)
{
    fsa_test_assert_padding_untouched(out->o_img, out->o_img_elems, p->Tq, p->hq, p->dv, p->o_ts, p->o_hs,
                                      (uint16_t)(out->poison * 0x101u), "o");
}

void kvc_assert_every_element_written(const kvc_outputs *out, const kvc_problem *p)
{
    const uint16_t o_poison = (uint16_t)(out->poison * 0x101u);
    const uint32_t lse_poison = out->poison * 0x01010101u;
    for (size_t i = 0; i < (size_t)p->Tq * p->hq * p->dv; i++)
        if (out->o_bits[i] == o_poison)
            fail_msg("o of token %zu, head %zu, column %zu never written", i / ((size_t)p->hq * p->dv),
                     i / p->dv % p->hq, i % p->dv);
    for (size_t i = 0; i < (size_t)p->hq * p->Tq; i++) {
        uint32_t bits;
        memcpy(&bits, &out->lse[i], 4);
        if (bits == lse_poison) fail_msg("lse of head %zu, token %zu never written", i / p->Tq, i % p->Tq);
    }
}

void kvc_assert_batch_invariant(const fsa_kvcache_plan *plan, kvc_problem *p, const int *seqs, int n, kvc_run_fn run)
{
    kvc_outputs all;
    run(plan, p, "the batch", &all);
    for (int k = 0; k < n; k++) {
        const int b = seqs[k];
        kvc_problem one;
        kvc_problem_single(&one, p, b);
        kvc_problem_reference(&one);
        kvc_outputs alone;
        run(plan, &one, "the same sequence alone", &alone);
        const int t0 = p->cu_q[b], len = one.Tq;
        assert_memory_equal(alone.o_bits, all.o_bits + (size_t)t0 * p->hq * p->dv, (size_t)len * p->hq * p->dv * 2);
        for (int qh = 0; qh < p->hq; qh++)
            assert_memory_equal(alone.lse + (size_t)qh * len, all.lse + (size_t)qh * p->Tq + t0, (size_t)len * 4);
        kvc_outputs_free(&alone);
        kvc_problem_free(&one);
    }
    kvc_outputs_free(&all);
}
