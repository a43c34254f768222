/* What the tests of the public API's answers to bad arguments
 * (tests/unit/test_api_*.c, and the argument tests under tests/nvrtc)
 * share, on a machine without a GPU: the check that a call failed with its
 * documented status and left a matching, non-empty error record, offline
 * contexts that never touch the disk, and ones that compile nothing. */
#ifndef FSA_API_VALIDATION_FIXTURE_H
#define FSA_API_VALIDATION_FIXTURE_H

#include "testing.h"

#include <string.h> /* strstr, in EXPECT_REFUSED */

/* A refused call: EXPECT_STATUS (testing.h) of a failure status, and the
 * error message names that status. */
#define EXPECT_REFUSED(want, call)                                                                \
    do {                                                                                          \
        EXPECT_STATUS(want, call);                                                                \
        assert_non_null(strstr(fsa_last_error(), fsa_status_name(want)));                        \
    } while (0)

/* Options of an offline context for target (NULL: none given) with the cache off and no log. */
fsa_context_options offline_options(const char *target);
/* An offline context for target that never touches the disk, or the test fails. */
fsa_context *offline_context(const char *target);
/* One that also compiles nothing (JIT off): a plan whose descriptor passes every check stops where its
 * first kernel would be compiled (FSA_STATUS_JIT_DISABLED); or the test fails. */
fsa_context *checks_only_context(const char *target);

/* cmocka setup and teardown: *state is an offline sm_90a context with the cache off. */
int setup_offline(void **state);
int teardown_offline(void **state);

#endif
