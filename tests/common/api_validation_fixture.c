/* The API validation tests' offline contexts (api_validation_fixture.h). */
#include "api_validation_fixture.h"

fsa_context_options offline_options(const char *target)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    return o;
}

fsa_context *offline_context(const char *target)
{
    const fsa_context_options o = offline_options(target);
    fsa_context *ctx = NULL;
    fsa_status st = fsa_context_create(&ctx, &o);
    if (st != FSA_STATUS_OK) fail_msg("offline context: %s", fsa_last_error());
    return ctx;
}

fsa_context *checks_only_context(const char *target)
{
    fsa_context_options o = offline_options(target);
    o.jit = FSA_JIT_OFF;
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) fail_msg("checks-only context: %s", fsa_last_error());
    return ctx;
}

int setup_offline(void **state)
{
    const fsa_context_options o = offline_options("sm_90a");
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) return -1;
    *state = ctx;
    return 0;
}

int teardown_offline(void **state)
{
    fsa_context_destroy(*state);
    return 0;
}
