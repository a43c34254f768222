#include "check_calls.h"

#include <stdlib.h>
#include <string.h>

static fsa_status run(const check_call *c, int pass, int check)
{
    for (int i = 0; i < 3; i++) {
        const check_output *o = &c->out[pass][i];
        if (o->bytes) fsa_test_dfill(o->ptr, o->poison, o->bytes);
    }
    return c->run(c->self, pass, check);
}

void check_expect_the_bits_of_the_plain_plan(const check_call *c)
{
    unsigned char *plain[2][3] = {{NULL}}, *checked[2][3] = {{NULL}};
    for (int check = 0; check < 2; check++)
        for (int pass = 0; pass < 2; pass++) {
            if (run(c, pass, check) != FSA_STATUS_OK)
                fail_msg("%s with good offsets refused: %s", c->stage[pass], fsa_last_error());
            for (int i = 0; i < 3; i++)
                if (c->out[pass][i].bytes)
                    (check ? checked : plain)[pass][i] = fsa_test_image(c->out[pass][i].ptr, c->out[pass][i].bytes);
        }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 3; i++) {
            if (c->out[pass][i].bytes) assert_memory_equal(plain[pass][i], checked[pass][i], c->out[pass][i].bytes);
            free(plain[pass][i]);
            free(checked[pass][i]);
        }
}

/* A refused pass: its status, stage and message, and nothing written. */
static void expect_refused(const check_call *c, int pass, const char *what)
{
    assert_int_equal(run(c, pass, 1), FSA_STATUS_INVALID_ARGUMENT);
    fsa_test_expect_error(c->stage[pass], what);
    for (int i = 0; i < 3; i++) {
        const check_output *o = &c->out[pass][i];
        if (o->bytes) fsa_test_assert_untouched(o->ptr, o->bytes, o->poison);
    }
}

void check_expect_refused_only_in_check_mode(const check_call *c, const char *what)
{
    int32_t *bad = malloc(c->offsets_bytes);
    assert_non_null(bad);
    memcpy(bad, c->offsets, c->offsets_bytes);
    expect_refused(c, CHECK_FORWARD, what);
    memcpy(c->offsets, c->good, c->offsets_bytes); /* the backward's o and lse */
    assert_int_equal(run(c, CHECK_FORWARD, 0), FSA_STATUS_OK);
    memcpy(c->offsets, bad, c->offsets_bytes);
    expect_refused(c, CHECK_BACKWARD, what);
    assert_int_equal(run(c, CHECK_BACKWARD, 0), FSA_STATUS_OK);
    assert_int_equal(run(c, CHECK_FORWARD, 0), FSA_STATUS_OK);
    free(bad);
}
