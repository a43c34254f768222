/* The one source text NVRTC compiles: a rendered template with the template
 * headers it includes written in place. NVRTC records the directory of a
 * header given by name as the compiling process's working directory, so
 * cubins with line info would differ from one directory to the next and
 * carry local paths into shared caches; a single source whose #line
 * directives name files under FSA_COMPILE_SOURCE_DIR (a directory that does
 * not exist) gives the same bytes everywhere. */
#ifndef FSA_COMPILE_SOURCE_H
#define FSA_COMPILE_SOURCE_H

#include "fsa.h"

/* Where line info and profilers say the sources are. */
#define FSA_COMPILE_SOURCE_DIR "/fsa-jit/templates/"

/* *out (caller frees): `source` with each `#include "<name>.cuh"` of an
 * embedded template replaced by that header's text the first time it
 * appears (later ones become empty lines, as #pragma once and include guards
 * would have it), between #line directives, recursively. `#pragma once`
 * lines become empty lines. Other lines are kept as they are, so line
 * numbers stay those of the files. */
fsa_status fsa_compile_source(char **out, const char *source, const char *program_name);

#endif
