/* The helpers that the CPU reference's own tests (tests/unit/test_reference_
 * backward, _forward and _semantics) share: a small selected-attention
 * problem that owns its arrays, with random normal q, k, v and top-k rows
 * that a test writes one by one or has the benchmark generator fill. */
#ifndef FSA_REFERENCE_PROBLEM_H
#define FSA_REFERENCE_PROBLEM_H

#include "reference.h"
#include "testing.h"

#include <stddef.h>
#include <stdint.h>

/* A problem that owns its arrays; topk is head-major [Hkv,T,K]. */
typedef struct owned_problem {
    fsa_ref_problem p;
    int32_t cu[8];
    float *q, *k, *v;
    int32_t *topk;
} owned_problem;

/* n seeded normal floats, n zeroed doubles; the caller frees them. */
float *normal_floats(fsa_rng *rng, size_t n);
double *new_doubles(size_t n);

/* Random normal q, k, v; every top-k entry -1. batch < 8 sequences of lens[b]
 * tokens; scale 1/sqrt(d). */
void make_problem(owned_problem *op, int batch, const int *lens, int hq, int hkv, int d, int bk, int top_k,
                  uint64_t seed);
void free_problem(owned_problem *op);

/* The top-k row of kv head h, token t. */
int32_t *row_of(owned_problem *op, int h, int t);
/* Row (h, t) = values[0..n-1], the rest -1. */
void set_row(owned_problem *op, int h, int t, const int32_t *values, int n);
/* Every row from the benchmark generator (fsa_ref_make_selection). */
void generate_selection(owned_problem *op, uint64_t seed);

/* Elements of o (and q): T x Hq x D. */
size_t o_size(const fsa_ref_problem *p);

#endif
