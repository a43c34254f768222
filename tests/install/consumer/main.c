#include <fsa.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    fsa_context *ctx = NULL;
    /* An offline context needs a target; without one the library must refuse. */
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_INVALID_ARGUMENT) return 1;
    printf("fsa %s: %s\n", fsa_version_string(), fsa_status_string(FSA_STATUS_OK));
    return strcmp(fsa_version_string(), FSA_VERSION_STRING) != 0 || fsa_version() != FSA_VERSION;
}
