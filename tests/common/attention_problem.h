/* Selected-attention test problems shared by the GPU tests: case
 * descriptions, random inputs with the benchmark selection plus junk, the
 * float64 reference (multi-threaded), device images with padded strides,
 * poisoning and download helpers. */
#ifndef FSA_ATTENTION_PROBLEM_H
#define FSA_ATTENTION_PROBLEM_H

#include "reference.h"
#include "testing.h"

typedef struct attn_case {
    const char *name;
    fsa_dtype dtype;
    int d, hq, hkv, bk, k;
    int lens[6];
    int nseq;
    int layout_tkh;      /* 1: top-k as [T, Hkv, K]; 0: [Hkv, T, K] */
    int strided;         /* q/k/v/o with padded head and token strides */
    fsa_algorithm alg;
    uint64_t ws_limit;
    int junk;            /* -1 mid-row, future and out-of-range blocks, repeats, empty rows */
    int big_logit;       /* one key scores about 1e4 above the rest */
    int quick;           /* part of the FSA_TEST_QUICK subset */
    int dv;              /* value head dim (v, o, dout, dv); 0 = d */
    float scale;         /* the plan's softmax scale; 0: the default 1/sqrt(d) */
} attn_case;

#define BF FSA_DTYPE_BF16
#define HF FSA_DTYPE_F16
#define A_AUTO FSA_ALGORITHM_AUTO
#define A_FSA FSA_ALGORITHM_FSA
#define A_NSA FSA_ALGORITHM_NSA

int attn_group_of(const attn_case *c);
/* Dv of a case: dv, or d when it is 0. */
int attn_value_dim(const attn_case *c);
/* run(case, plan) over the cases with Dk != Dv (with_dv 1) or over the
 * others (0); under FSA_TEST_QUICK (quick 1) only the quick ones. */
void attn_run_cases(const attn_case *cases, fsa_plan *const *plans, size_t n, int quick, int with_dv,
                    void (*run)(const attn_case *c, fsa_plan *plan));

/* ------------------------------------------------------------ random cases */

/* Room for a drawn case's name. */
#define ATTN_RANDOM_NAME_MAX 192

/* Draws a case over what the selected attention supports on targets with 227 KB of shared memory per block
 * (sm_90a: the GPU tests' H100 and H200), for a plan with backward = `backward`: the rules are above its
 * definition. The name (written into name_buf, n bytes) spells out every field. */
void attn_random_case(fsa_rng *rng, attn_case *out, char *name_buf, size_t n, int backward);
/* One line with case `index` of FSA_TEST_SEED `base`: the seeds that draw it and every field. */
void attn_print_random_case(const attn_case *c, int index, uint64_t base);

/* Draws FSA_TEST_RANDOM cases from FSA_TEST_SEED (default_seed when unset; testing.h), creates their plans on ctx (a plan the library refuses fails the test with the
 * case's line and fsa_last_error()) and runs run(case, plan, its seed) on each, its line printed first. */
void attn_run_random_cases(fsa_context *ctx, int backward, uint64_t default_seed,
                           void (*run)(const attn_case *c, fsa_plan *plan, uint64_t seed));

/* Creates one plan per case (8 threads, so the kernels compile in parallel);
 * 0 on success, -1 (after printing why) if any fails. */
int attn_create_plans(fsa_plan **plans, fsa_context *ctx, const attn_case *cases, size_t n, int backward);
fsa_selected_attention_desc attn_desc_of(const attn_case *c, int backward);

/* The start of the names of case c's kernels of `family` (e.g. "sel_bwd_main"):
 * "<family>_<dtype>_d<D>_dv<Dv>_g<G>_bk<BK>", for fsa_test_expect_layout_kernel, so that a check of one case's
 * kernel never finds another shape's. Returns buf. */
const char *attn_kernel_prefix(char *buf, size_t n, const char *family, const attn_case *c);

/* The plan of case c (with its backward when `backward`) on the selected mma.sync kernels (FSA_WGMMA=0 and
 * FSA_WGMMA_SEL_BWD=0: no warpgroup kernel on sm_90a) with FSA_SEL_LAYOUT_ONE_STAGE as `one_stage` (NULL:
 * unset), all read at plan creation and put back after it; the test fails if the plan does. `*layout`
 * (NULL: not asked): the FSA_SEL_LAYOUT_* bits that plan takes on ctx's device (fsa_sel_layout_fit with
 * the override's bits as `forced`). */
fsa_plan *attn_mma_sync_plan(fsa_context *ctx, const attn_case *c, int backward, const char *one_stage, int *layout);

typedef struct problem {
    int T, B, G;
    int Dv;                 /* value head dim */
    int32_t cu[8];
    float *q, *k, *v;       /* logical, dtype-rounded; q and k [T, H, d], v [T, Hkv, Dv] */
    int32_t *topk;
    int64_t topk_hs, topk_ts;
    int64_t q_ts, q_hs, kv_ts, kv_hs, v_ts, v_hs, o_ts, o_hs; /* device layouts (elements); kv_*: k */
    double scale;
    double *o_ref, *lse_ref; /* o_ref [T, Hq, Dv] */
    int *empty_row;         /* [Hq, T]: 1 when the row has no visible key */
} problem;

float attn_round_to(fsa_dtype dt, float x);
uint16_t attn_bits_of(fsa_dtype dt, float x);
float attn_float_of(fsa_dtype dt, uint16_t x);

/* Inputs, selection and the forward reference for a case. */
void problem_make(problem *p, const attn_case *c, uint64_t seed);
void problem_free(problem *p);
fsa_ref_problem problem_ref(const problem *p, const attn_case *c);

/* Logical [T, H, D] floats into a strided device image (gaps hold NaN). */
uint64_t upload_strided(const float *src, int T, int H, int D, int64_t ts, int64_t hs, fsa_dtype dt);
/* A strided device image back to logical floats; `img` (optional) keeps the raw image. */
void download_strided(float *dst, uint16_t *img, uint64_t dev, int T, int H, int D, int64_t ts, int64_t hs,
                      fsa_dtype dt);

typedef struct device_problem {
    uint64_t q, k, v, o, topk, cu, lse, ws;
    size_t o_bytes, ws_bytes;
} device_problem;

void device_make(device_problem *dp, const problem *p, const attn_case *c, const fsa_plan *plan);
void device_free(device_problem *dp);
fsa_fwd_args fwd_args_of(const device_problem *dp, const problem *p);
void poison_fwd(const device_problem *dp, const problem *p, const attn_case *c);

typedef struct outputs {
    uint16_t *o_img; /* device image of o */
    float *o;        /* logical [T, Hq, Dv] */
    float *lse;
} outputs;

/* Relative 2-norm error of a against the float64 reference b, with a floor
 * on the reference norm (exactly-zero gradients come out as fp32 noise). */
double attn_grad_error(const float *a, const double *b, size_t n);
/* attn_grad_error between the reference given the o a call read and the exact one: the error that o's rounding to
 * its dtype forces on any backward reading o (delta = rowsum(dout * o)). Small, except where one logit dominates a
 * row without taking all of it: there dq and dk come from a cancellation that o's rounding moves. */
double attn_grad_gap(const double *given, const double *exact, size_t n);

void download_fwd(outputs *out, const device_problem *dp, const problem *p, const attn_case *c);
void outputs_free(outputs *o);

/* What a 0xff byte fill (poison_fwd, the backward's gradients, upload_strided's gaps) leaves in each 16-bit
 * element of an image: the value its padding must still hold after a call. */
#define ATTN_POISON16 0xffff

/* Per-row checks next to the whole-tensor ones. One norm over a tensor lets a wrong row whose values are
 * small (a long context averages them toward zero) pass; the worst row against its own norm does not. */
#define ATTN_ROW_FLOOR 0.1 /* a row's norm floor: this fraction of the reference's rms row norm (the median
                            * row's for gradients measured against their terms) */
#define ATTN_ROW_TOL 3.0   /* the per-row bound: this many times the whole-tensor tolerance */

typedef struct attn_row_err {
    double err; /* fsa_row_rel_error of the worst row */
    int t, h;   /* that row's token and head */
} attn_row_err;

/* The worst row of a logical [T, H, len] output against its float64 reference. */
attn_row_err attn_row_error(const float *a, const double *b, int T, int H, int len);
/* The same for a gradient, with attn_grad_error's floor per row (1e-3 per element): a problem where every
 * query sees one key has dq and dk rows that are zero but for rounding. */
attn_row_err attn_grad_row_error(const float *a, const double *b, int T, int H, int len);
/* A gradient's worst row against the larger of its own norm and its terms' (fsa_row_rel_error_terms: the
 * floor from the median row, at least attn_grad_row_error's per-element floor). */
attn_row_err attn_grad_row_error_terms(const float *a, const double *b, const double *terms, int T, int H, int len);

/* The gradients of a backward given the o it reads (the documented contract: gradients given dout, o and
 * lse), for the per-row bounds. delta = rowsum(dout * o) enters dq and dk as -scale x P x delta; a call given
 * the forward's rounded o computes with that o's delta, and where a query sees few keys, its dq and the dk of
 * keys that only such queries see are small differences that this shift moves by far more than their own
 * rounding. o_used [T, Hq, Dv]; writes out->dq [T, Hq, D] and out->dk [T, Hkv, D] (dv does not depend on
 * delta: the plain reference's). */
typedef struct {
    double *dq, *dk;
    fsa_ref_grad_terms terms; /* each gradient row's term norm (dq [T, Hq], dk and dv [T, Hkv]) */
} attn_grads_given;
void attn_grads_given_o(attn_grads_given *out, const problem *p, const attn_case *c, const float *dout,
                        const float *o_used);
void attn_grads_given_free(attn_grads_given *g);

/* The worst lse row as |g - r| / (2e-3 + 1e-5 |r|) (a pass is < 1): +INFINITY when a row that sees nothing
 * (reference -inf) is not -inf, or one that sees keys is not finite. lse and ref [H, T] (or any n rows);
 * *worst (may be NULL) gets that row's index. */
double attn_lse_error(const float *lse, const double *ref, size_t n, size_t *worst);

/* A forward's o against p's reference as a whole (< tol) and row by row (< ATTN_ROW_TOL x tol), and every
 * lse row (attn_lse_error < 1); prints the three next to `what`. */
void attn_check_o_and_lse(const outputs *out, const problem *p, int hq, double tol, const char *what);

#endif
