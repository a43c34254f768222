/* fsa-bench --decode: the paged problem (bench_decode_problem.h). */
#include "bench_decode_problem.h"

#include "bench_check.h"
#include "bench_inputs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CU(call) BENCH_CU("--decode", call)

#define FSA(call) BENCH_FSA("--decode", call)

/* The own block c, 0, c - 1, then distinct random blocks of 0..c. */
static void select_row(int32_t *row, int k, int c, uint64_t *rng)
{
    int n = 0;
    const int want = c + 1 < k ? c + 1 : k;
    const int forced[3] = {c, 0, c - 1};
    for (int f = 0; f < 3 && n < want; f++) {
        int dup = forced[f] < 0;
        for (int s = 0; s < n; s++) dup |= row[s] == forced[f];
        if (!dup) row[n++] = forced[f];
    }
    while (n < want) {
        const int v = (int)(bench_splitmix(rng) % (uint64_t)(c + 1));
        int dup = 0;
        for (int s = 0; s < n; s++) dup |= row[s] == v;
        if (!dup) row[n++] = v;
    }
    for (int s = n; s < k; s++) row[s] = -1;
}

void dec_free(dec_problem *p)
{
    CUdeviceptr all[] = {p->q, p->o, p->lse, p->k_cache, p->v_cache, p->table, p->cu, p->seqused, p->topk, p->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) cu.MemFree(all[i]);
    memset(p, 0, sizeof *p);
}

static CUdeviceptr upload(const void *src, size_t bytes)
{
    CUdeviceptr d;
    CU(cu.MemAlloc(&d, bytes ? bytes : 4));
    if (bytes) CU(cu.MemcpyHtoD(d, src, bytes));
    return d;
}

#define ALLOC(bytes) bench_alloc("--decode", (bytes))

/* n bf16 standard-normal values at dst: a pattern of up to 2^23 made on the host, copied over the rest on the
 * device (random values rather than a constant; quick at any cache size). */
static void fill_random(CUdeviceptr dst, size_t n, uint64_t seed)
{
    const size_t pattern = n < ((size_t)1 << 23) ? n : (size_t)1 << 23;
    uint16_t *h = ALLOC(pattern * 2);
    bench_fill_normal(h, pattern, seed, FSA_DTYPE_BF16);
    CU(cu.MemcpyHtoD(dst, h, pattern * 2));
    free(h);
    for (size_t done = pattern; done < n;) {
        const size_t c = n - done < done ? n - done : done;
        CU(cu.MemcpyDtoD(dst + done * 2, dst, c * 2));
        done += c;
    }
    CU(cu.StreamSynchronize(NULL)); /* before any call on the timing's non-blocking stream */
}

/* Returns 0 when the row would pass max_gb (nothing allocated). */
int dec_make(dec_problem *p, const dec_opts *o, int B, int L, int hkv, int q_len, int shared, int k, int bk,
             const fsa_kvcache_plan *plan, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->B = B, p->L = L, p->hkv = hkv, p->q_len = q_len, p->k = k, p->bk = bk, p->dv = o->dv;
    p->tq = (int64_t)B * q_len;
    const int nblk = (L + bk - 1) / bk, pages_per_block = bk / PAGE;
    p->max_pages = (L + PAGE - 1) / PAGE;
    /* Everything but the pages, whose count the selections give: checked
     * before any allocation, since the page table alone (B x L / PAGE
     * entries, on the host and the device) can pass --max-gb. */
    size_t ws = 0;
    FSA(fsa_kvcache_plan_workspace_size(&ws, plan));
    const double max_bytes = o->max_gb * 1e9, sel = (double)p->tq * hkv * k * 4.0;
    const double table_bytes = (double)B * p->max_pages * 4.0, seqs = (double)(2 * B + 1) * 4.0;
    const double host = sel + table_bytes + nblk + seqs;
    const double device = (double)p->tq * HQ * (D * 2.0 + o->dv * 2.0 + 4.0) + sel + table_bytes + seqs + (double)ws;
    if (host > max_bytes || device > max_bytes) return 0;
    int32_t *topk = ALLOC((size_t)p->tq * hkv * k * sizeof(int32_t));
    int32_t *table = ALLOC((size_t)B * p->max_pages * sizeof(int32_t));
    char *touched = ALLOC((size_t)nblk);
    uint64_t rng = seed;
    int64_t pages = 1; /* page 0: the stand-in for pages never read */
    for (int b = 0; b < B; b++) {
        memset(touched, 0, (size_t)nblk);
        for (int i = 0; i < q_len; i++) {
            const int pos = L - q_len + i;
            for (int h = 0; h < hkv; h++) {
                int32_t *row = topk + (((int64_t)b * q_len + i) * hkv + h) * k;
                if (shared && i > 0) memcpy(row, row - (int64_t)hkv * k, (size_t)k * sizeof(int32_t));
                else select_row(row, k, pos / bk, &rng);
                for (int s = 0; s < k; s++) {
                    if (row[s] < 0) continue;
                    touched[row[s]] = 1;
                    /* a block's keys up to the token's own (the own block may be partial) */
                    const int keys = pos + 1 - row[s] * bk < bk ? pos + 1 - row[s] * bk : bk;
                    if (!shared || i == 0) p->keys_read += keys;
                }
            }
        }
        int32_t *trow = table + (size_t)b * p->max_pages;
        for (int j = 0; j < p->max_pages; j++) trow[j] = 0;
        for (int c = 0; c < nblk; c++)
            if (touched[c])
                for (int j = c * pages_per_block; j < (c + 1) * pages_per_block && j < p->max_pages; j++) trow[j] = (int32_t)pages++;
    }
    free(touched);
    p->num_pages = pages;
    const size_t page_bytes = (size_t)PAGE * hkv * D * 2, v_page_bytes = (size_t)PAGE * hkv * p->dv * 2;
    p->bytes = (size_t)pages * (page_bytes + v_page_bytes);
    if ((double)p->bytes + device > max_bytes) {
        free(topk);
        free(table);
        return 0;
    }
    /* Shuffle the physical pages (page 0 stays put). */
    int32_t *perm = ALLOC((size_t)pages * sizeof(int32_t));
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = pages - 1; i > 1; i--) {
        const int64_t j = 1 + (int64_t)(bench_splitmix(&rng) % (uint64_t)i);
        const int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (size_t i = 0; i < (size_t)B * p->max_pages; i++) table[i] = perm[table[i]];
    free(perm);
    CU(cu.MemAlloc(&p->k_cache, (size_t)pages * page_bytes));
    CU(cu.MemAlloc(&p->v_cache, (size_t)pages * v_page_bytes));
    fill_random(p->k_cache, (size_t)pages * page_bytes / 2, seed + 1);
    fill_random(p->v_cache, (size_t)pages * v_page_bytes / 2, seed + 2);
    const size_t nq = (size_t)p->tq * HQ * D;
    CU(cu.MemAlloc(&p->q, nq * 2));
    fill_random(p->q, nq, seed + 3);
    CU(cu.MemAlloc(&p->o, (size_t)p->tq * HQ * p->dv * 2));
    CU(cu.MemAlloc(&p->lse, (size_t)p->tq * HQ * 4));
    p->topk = upload(topk, (size_t)p->tq * hkv * k * sizeof(int32_t));
    p->table = upload(table, (size_t)B * p->max_pages * sizeof(int32_t));
    int32_t *starts = ALLOC((size_t)(B + 1) * sizeof(int32_t)), *used = ALLOC((size_t)B * sizeof(int32_t));
    for (int b = 0; b <= B; b++) starts[b] = b * q_len;
    for (int b = 0; b < B; b++) used[b] = L;
    p->cu = upload(starts, (size_t)(B + 1) * 4);
    p->seqused = upload(used, (size_t)B * 4);
    if (ws) {
        CU(cu.MemAlloc(&p->ws, ws));
        CU(cu.MemsetD8(p->ws, 0, ws)); /* once: its counters stay zero between calls */
    }
    free(starts);
    free(used);
    free(topk);
    free(table);
    return 1;
}

int dec_output_finite(const dec_problem *p)
{
    if (!bench_device_finite(p->o, (size_t)p->tq * HQ * p->dv, FSA_DTYPE_BF16)) return 0;
    const size_t rows = (size_t)p->tq * HQ;
    float *lse = ALLOC(rows * sizeof(float));
    CU(cu.MemcpyDtoH(lse, p->lse, rows * sizeof(float)));
    int finite = 1;
    for (size_t i = 0; i < rows && finite; i++) finite = isfinite(lse[i]);
    free(lse);
    return finite;
}

fsa_kvcache_args dec_args(const dec_problem *p, const fsa_kvcache_plan *plan)
{
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    a.num_query_tokens = p->tq;
    a.batch = p->B;
    a.q = (fsa_tensor){p->q, HQ * D, D};
    a.o = (fsa_tensor){p->o, (int64_t)HQ * p->dv, p->dv};
    a.cu_seqlens_q = p->cu;
    /* NHD: token stride Hkv x D, head stride D; HND: token stride D, head stride page x D (Dv for v). */
    const int64_t ts = p->hnd ? D : (int64_t)p->hkv * D, hs = p->hnd ? (int64_t)PAGE * D : D;
    const int64_t vts = p->hnd ? p->dv : (int64_t)p->hkv * p->dv, vhs = p->hnd ? (int64_t)PAGE * p->dv : p->dv;
    a.k_cache = (fsa_tensor){p->k_cache, ts, hs};
    a.v_cache = (fsa_tensor){p->v_cache, vts, vhs};
    a.k_page_stride = (int64_t)PAGE * p->hkv * D;
    a.v_page_stride = (int64_t)PAGE * p->hkv * p->dv;
    a.num_pages = p->num_pages;
    a.block_table = p->table;
    a.block_table_stride = p->max_pages;
    a.max_pages_per_seq = p->max_pages;
    a.seqused_k = p->seqused;
    a.topk = (fsa_tensor){p->topk, (int64_t)p->hkv * p->k, p->k};
    a.lse = p->lse;
    a.workspace = p->ws;
    FSA(fsa_kvcache_plan_workspace_size(&a.workspace_bytes, plan));
    return a;
}
