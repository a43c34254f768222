// include/fsa.h must compile on its own as C++ (this file is built with
// -std=c++11 -Wall -Wextra -pedantic -Werror), its INIT macros included.
#include "fsa.h"

#include "header_probe.h"

void fsa_header_cxx_probe(size_t out[FSA_PROBE_VALUES]) { FSA_PROBE_FILL(out); }
