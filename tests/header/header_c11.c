/* include/fsa.h must compile on its own in strict C11 (this file is built
 * with -std=c11 -Wall -Wextra -pedantic -Werror). */
#include "fsa.h"

int fsa_header_c11_probe(void);
int fsa_header_c11_probe(void)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    fsa_fwd_args a = FSA_FWD_ARGS_INIT;
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    return (int)(o.struct_size + d.struct_size + a.struct_size + s.struct_size) + FSA_STATUS_OK;
}
