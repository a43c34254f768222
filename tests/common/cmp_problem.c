#include "cmp_problem.h"

#include "attention_problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

fsa_compressed_attention_desc cmp_desc_of(const cmp_case *c)
{
    fsa_compressed_attention_desc d = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    d.dtype = c->dtype;
    d.head_dim = c->dk;
    d.value_dim = c->dv;
    d.num_q_heads = c->hq;
    d.num_kv_heads = c->hkv;
    d.kernel_size = c->l;
    d.stride = c->d;
    d.block_size = c->bk;
    d.top_k = c->k;
    d.scale = c->scale;
    d.init_blocks = c->init;
    d.local_blocks = c->local;
    return d;
}

static float *random_rows(fsa_rng *rng, size_t n, fsa_dtype dt, int zero)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = zero ? 0.0f : attn_round_to(dt, (float)fsa_rng_normal(rng));
    return x;
}

void cmp_problem_make(cmp_problem *p, const cmp_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    assert_true(c->nseq >= 1 && c->nseq <= 6);
    fsa_rng rng = {seed};
    p->B = c->nseq;
    p->G = c->hq / c->hkv;
    for (int b = 0; b < c->nseq; b++) {
        p->cu[b + 1] = p->cu[b] + c->lens[b];
        p->cu_c[b + 1] = p->cu_c[b] + fsa_ref_cmp_count(c->lens[b], c->l, c->d) + c->hidden;
    }
    p->T = p->cu[p->B];
    p->Tc = p->cu_c[p->B];
    const double scale = c->scale > 0 ? (double)c->scale : 1.0 / sqrt((double)c->dk);
    p->q = random_rows(&rng, (size_t)p->T * c->hq * c->dk, c->dtype, c->zero_q);
    p->k = random_rows(&rng, (size_t)p->Tc * c->hkv * c->dk, c->dtype, 0);
    p->v = random_rows(&rng, (size_t)p->Tc * c->hkv * c->dv, c->dtype, 0);
    if (c->big_logit) {
        /* Compressed token 0 (KV head 0; seen by the first sequence's last token when it is at least l
         * long) is q * 1e4 / (scale |q|^2) for that token's query head 0: a logit of about 1e4. */
        const float *q = p->q + (size_t)(p->cu[1] - 1) * c->hq * c->dk;
        double qq = 0;
        for (int d = 0; d < c->dk; d++) qq += (double)q[d] * q[d];
        for (int d = 0; d < c->dk; d++)
            p->k[d] = attn_round_to(c->dtype, (float)(1e4 / scale * q[d] / qq));
    }
    /* Padded strides when asked, to prove strides are honoured. */
    const int pad = c->strided ? 8 : 0;
    p->q_hs = c->dk + pad;
    p->q_ts = (int64_t)c->hq * p->q_hs + pad;
    p->k_hs = c->dk + 2 * pad;
    p->k_ts = (int64_t)c->hkv * p->k_hs + pad;
    p->v_hs = c->dv + pad;
    p->v_ts = (int64_t)c->hkv * p->v_hs + 3 * pad;
    p->o_hs = c->dv + pad;
    p->o_ts = (int64_t)c->hq * p->o_hs + 3 * pad;
    if (c->layout_tkh) {
        p->topk_ts = (int64_t)c->hkv * c->k;
        p->topk_hs = c->k;
    } else {
        p->topk_hs = (int64_t)p->T * c->k;
        p->topk_ts = c->k;
    }
    p->ref = (fsa_ref_cmp_problem){
        .total_tokens = p->T,
        .batch = p->B,
        .cu_seqlens = p->cu,
        .total_cmp = p->Tc,
        .cu_seqlens_c = p->cu_c,
        .num_q_heads = c->hq,
        .num_kv_heads = c->hkv,
        .head_dim = c->dk,
        .value_dim = c->dv,
        .kernel_size = c->l,
        .stride = c->d,
        .scale = scale,
        .q = p->q,
        .k = p->k,
        .v = p->v,
    };
    p->o_ref = malloc(((size_t)p->T * c->hq * c->dv + 1) * sizeof(double));
    p->lse_ref = malloc(((size_t)c->hq * p->T + 1) * sizeof(double));
    assert_true(p->o_ref && p->lse_ref);
    fsa_ref_cmp_forward(&p->ref, p->o_ref, p->lse_ref);
}

void cmp_problem_free(cmp_problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o_ref);
    free(p->lse_ref);
}
