/* A library that kills the process that loads it, as a truncated or
 * otherwise damaged libnvrtc can (a bus error inside dlopen). Tests point
 * FSA_NVRTC_PATH at it to show which paths never load NVRTC. */
#include <signal.h>
#include <stdlib.h>

__attribute__((constructor)) static void crash_on_load(void)
{
    raise(SIGBUS);
    abort();
}
