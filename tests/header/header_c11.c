/* include/fsa.h must compile on its own in strict C11 (this file is built
 * with -std=c11 -Wall -Wextra -pedantic -Werror). */
#include "fsa.h"

#include "header_probe.h"

void fsa_header_c11_probe(size_t out[FSA_PROBE_VALUES]) { FSA_PROBE_FILL(out); }
