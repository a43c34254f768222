/* Check-mode tests of an operation with a forward and a backward (compressed
 * and sliding-window attention): one call, made on a plain plan and on a
 * check-mode plan, with the offsets it holds now. The test describes its
 * call; these functions say what must happen. */
#ifndef FSA_CHECK_CALLS_H
#define FSA_CHECK_CALLS_H

#include "testing.h"

enum { CHECK_FORWARD = 0, CHECK_BACKWARD = 1 };

/* A device buffer a call writes, poisoned with `poison` before each run. */
typedef struct check_output {
    uint64_t ptr;
    size_t bytes;
    uint8_t poison;
} check_output;

typedef struct check_call {
    void *self; /* the test's call, for run */
    /* Uploads the offsets, poisons the outputs of `pass` (CHECK_FORWARD,
     * CHECK_BACKWARD), runs it on the check-mode plan (check = 1) or the
     * plain one and waits for the device (a fault fails the test). The
     * backward reads the o and lse the last forward wrote. */
    fsa_status (*run)(void *self, int pass, int check);
    const char *stage[2];   /* the error stage of each pass */
    check_output out[2][3]; /* what each pass writes (bytes 0: none) */
    int32_t *offsets;       /* what the call passes, which a test changes */
    const int32_t *good;    /* offsets that keep the contract */
    size_t offsets_bytes;
} check_call;

/* Good offsets: the forward and the backward pass on both plans, and the
 * check-mode plan writes the very bits of the plain one. */
void check_expect_the_bits_of_the_plain_plan(const check_call *c);

/* The offsets now in c: both passes are FSA_STATUS_INVALID_ARGUMENT on the
 * check-mode plan, from their stage with a message holding `what`, and
 * write nothing (the backward after a plain forward with the good offsets);
 * the plain plan runs both passes with them (its outputs are left from a
 * last plain forward). */
void check_expect_refused_only_in_check_mode(const check_call *c, const char *what);

#endif
