/* What the tests of the public API's answers to bad arguments
 * (tests/unit/test_api_*.c) share, on a machine without a GPU: the check
 * that a call failed with its documented status and left a matching,
 * non-empty error record, and offline contexts that never touch the disk. */
#ifndef FSA_API_VALIDATION_FIXTURE_H
#define FSA_API_VALIDATION_FIXTURE_H

#include "testing.h"

#include <string.h> /* strstr, in EXPECT_STATUS */

/* Runs `call`, expects `want`, and checks that the thread's error record
 * agrees and says something. */
#define EXPECT_STATUS(want, call)                                                                 \
    do {                                                                                          \
        fsa_status st_ = (call);                                                                  \
        if (st_ != (want))                                                                        \
            fail_msg("%s returned %s, expected %s (%s)", #call, fsa_status_name(st_),             \
                     fsa_status_name(want), fsa_last_error());                                   \
        const fsa_error_info *e_ = fsa_last_error_info();                                         \
        assert_int_equal(e_->status, (want));                                                     \
        assert_non_null(e_->message);                                                             \
        if (e_->message[0] == '\0') fail_msg("%s: empty error message", #call);                  \
        assert_non_null(strstr(fsa_last_error(), fsa_status_name(want)));                        \
    } while (0)

/* An offline context for target that never touches the disk, or the test fails. */
fsa_context *offline_context(const char *target);

/* cmocka setup and teardown: *state is an offline sm_90a context with the cache off. */
int setup_offline(void **state);
int teardown_offline(void **state);

#endif
