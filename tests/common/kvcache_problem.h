/* Test problems for selected attention over a paged KV cache: logical
 * sequences (cached keys and new query tokens), their selection, a paged
 * image of the caches with shuffled pages and garbage in the unused parts of
 * the page table, the float64 reference assembled from the logical
 * sequences, and the device copies. */
#ifndef FSA_KVCACHE_PROBLEM_H
#define FSA_KVCACHE_PROBLEM_H

#include "attention_problem.h"

enum { KVC_MAX_SEQS = 64 };

/* Top-k layouts. */
enum { KVC_TOPK_HTK = 0, KVC_TOPK_THK = 1, KVC_TOPK_SHARED = 2 /* [Tq, K], head stride 0 */ };

typedef struct kvc_seq {
    int q_len;  /* new tokens */
    int cached; /* keys before them: seqused_k = cached + q_len */
} kvc_seq;

typedef struct kvc_case {
    const char *name;
    fsa_dtype dtype;
    int d, hq, hkv, bk, k, page;
    kvc_seq seqs[KVC_MAX_SEQS];
    int nseq;
    int topk_layout;
    int cache_hnd;   /* pages as [num_pages, Hkv, page_size, D], and o padded (kvc_problem.o_hs) */
    int with_length; /* a topk_length shorter than K on most rows */
    int junk;        /* -1 mid-row, future blocks, blocks past the cache, repeats, negatives */
    int quick;       /* part of the FSA_TEST_QUICK subset */
    int dv;          /* value head dim (value cache, o); 0 = d */
    int big_logit;   /* the first sequence's last new token, query head 0: its own key scores about 1e4 */
    float scale;     /* the plan's softmax scale; 0: the default 1/sqrt(d) */
} kvc_case;

typedef struct kvc_problem {
    int B, Tq, hq, hkv, d, bk, k, page;
    int dv;                                           /* value head dim */
    fsa_dtype dtype;
    int32_t cu_q[KVC_MAX_SEQS + 1];
    int32_t seqused[KVC_MAX_SEQS];
    float *k_seq[KVC_MAX_SEQS], *v_seq[KVC_MAX_SEQS]; /* logical [L_b, Hkv, D] and [L_b, Hkv, Dv], dtype-rounded */
    float *q;                                         /* [Tq, Hq, D] */
    int32_t *topk;
    size_t topk_elems;
    int64_t topk_hs, topk_ts;
    int32_t *topk_len; /* [Tq] or NULL */
    int32_t *table;    /* [B, table_stride]; entries past each sequence's pages are garbage */
    int max_pages, table_stride, num_pages;
    int64_t page_stride, token_stride, head_stride;       /* key cache layout, elements */
    int64_t v_page_stride, v_token_stride, v_head_stride; /* value cache layout */
    int64_t o_ts, o_hs; /* o strides, elements: [Tq, Hq, Dv], or on cache_hnd cases 8 elements after each
                         * head and 16 after each token (padding that must stay poisoned) */
    double scale;
    double *o_ref, *lse_ref; /* [Tq, Hq, Dv], [Hq, Tq] */
} kvc_problem;

fsa_kvcache_desc kvc_desc_of(const kvc_case *c, int max_batch, int64_t max_query_tokens);

/* Inputs, paging and selection (no reference yet). */
void kvc_problem_make(kvc_problem *p, const kvc_case *c, uint64_t seed);
/* The float64 reference of the current inputs (multi-threaded). */
void kvc_problem_reference(kvc_problem *p);
void kvc_problem_free(kvc_problem *p);

/* The sequence holding query token t, its position in that sequence. */
int kvc_sequence_of(const kvc_problem *p, int t);
int kvc_position_of(const kvc_problem *p, int t);

/* Host image of a cache (0: keys, 1: values) in dtype bits: every element not
 * backing a cached key holds NaN. Caller frees. */
uint16_t *kvc_cache_image(const kvc_problem *p, int which, size_t *elems_out);

/* Reads the keys (0) or values (1) of sequence b back out of an image. */
void kvc_gather(float *out, const kvc_problem *p, const uint16_t *img, int which, int b);

/* Shuffles the pages again (new block table and images); the logical data stays. */
void kvc_reshuffle_pages(kvc_problem *p, uint64_t seed);

typedef struct kvc_device {
    uint64_t q, k, v, o, lse, cu, seqused, table, topk, topk_len, ws;
    size_t ws_bytes, o_bytes, cache_bytes; /* o_bytes: o's logical [Tq, Hq, Dv] elements */
    size_t o_img_bytes;                    /* o's whole strided image, padding included */
    uint8_t poison;                        /* the byte kvc_poison writes: 0xff (NaN) unless a test sets another */
} kvc_device;

void kvc_device_make(kvc_device *dv, const kvc_problem *p, const fsa_kvcache_plan *plan);
/* Uploads the metadata (cu, seqused, table, topk, topk_len) and caches again, in place. */
void kvc_device_update(const kvc_device *dv, const kvc_problem *p);
void kvc_device_free(kvc_device *dv);
fsa_kvcache_args kvc_args_of(const kvc_device *dv, const kvc_problem *p);
/* o's whole image (padding included) and lse filled with dv->poison bytes. */
void kvc_poison(const kvc_device *dv, const kvc_problem *p);

typedef struct kvc_outputs {
    uint16_t *o_bits; /* [Tq, Hq, Dv], gathered from o's strides */
    float *o;
    float *lse;       /* [Hq, Tq] */
    uint16_t *o_img;  /* o as the device holds it, o_img_elems elements (p->o_ts, p->o_hs) */
    size_t o_img_elems;
    uint8_t poison;   /* the device's poison byte */
} kvc_outputs;

void kvc_download(kvc_outputs *out, const kvc_device *dv, const kvc_problem *p);
void kvc_outputs_free(kvc_outputs *out);
/* Fails unless every element of o's image outside the logical rows still holds the poison. */
void kvc_assert_o_padding_untouched(const kvc_outputs *out, const kvc_problem *p);
/* Fails unless every logical element of o and lse was written (none holds the poison any more); only
 * meaningful for a poison no correct output can hold. */
void kvc_assert_every_element_written(const kvc_outputs *out, const kvc_problem *p);

/* Sequence b of p alone, with the same data (a batch of one). */
void kvc_problem_single(kvc_problem *out, const kvc_problem *p, int b);

/* One checked call of a plan on a problem; the outputs kept in *keep. */
typedef void (*kvc_run_fn)(const fsa_kvcache_plan *plan, kvc_problem *p, const char *name, kvc_outputs *keep);

/* Batch invariance: runs the batch p, then each of the n sequences `seqs`
 * alone, and asserts the same o bits and lse for each. */
void kvc_assert_batch_invariant(const fsa_kvcache_plan *plan, kvc_problem *p, const int *seqs, int n, kvc_run_fn run);
/* New top-k rows (and lengths) for the current cached lengths. */
void kvc_reselect(kvc_problem *p, const kvc_case *c, uint64_t seed);
/* Every token of a sequence takes the top-k rows (every head's) and the top-k
 * length of the sequence's last token: one selection for its new tokens. */
void kvc_share_rows(kvc_problem *p);
/* Every token but the first of its sequence has the slots of its rows that
 * count (the first min(top-k length, K)) rotated by one: the same blocks in
 * another order. */
void kvc_rotate_rows(kvc_problem *p);

#endif
