/* What a translation unit sees of include/fsa.h's ..._INIT macros: one
 * probe compiled as strict C11, one as C++ (when a C++ compiler exists). */
#ifndef FSA_HEADER_PROBE_H
#define FSA_HEADER_PROBE_H

#include <stddef.h>

#define FSA_PROBE_VALUES 12

#ifdef __cplusplus
extern "C" {
#endif
void fsa_header_c11_probe(size_t out[FSA_PROBE_VALUES]);
void fsa_header_cxx_probe(size_t out[FSA_PROBE_VALUES]);
#ifdef __cplusplus
}
#endif

/* The same list in both languages: struct_size of every INIT macro, the
 * descriptor's non-zero defaults, a few fields that must start at zero. */
#define FSA_PROBE_FILL(out)                                                            \
    do {                                                                               \
        fsa_context_options o_ = FSA_CONTEXT_OPTIONS_INIT;                             \
        fsa_cache_stats s_ = FSA_CACHE_STATS_INIT;                                     \
        fsa_selected_attention_desc d_ = FSA_SELECTED_ATTENTION_DESC_INIT;             \
        fsa_fwd_args f_ = FSA_FWD_ARGS_INIT;                                           \
        fsa_bwd_args b_ = FSA_BWD_ARGS_INIT;                                           \
        (out)[0] = o_.struct_size;                                                     \
        (out)[1] = s_.struct_size;                                                     \
        (out)[2] = d_.struct_size;                                                     \
        (out)[3] = f_.struct_size;                                                     \
        (out)[4] = b_.struct_size;                                                     \
        (out)[5] = (size_t)d_.head_dim;                                                \
        (out)[6] = (size_t)d_.block_size;                                              \
        (out)[7] = (size_t)d_.top_k;                                                   \
        (out)[8] = (size_t)d_.num_q_heads + (size_t)d_.backward + (size_t)o_.device;   \
        (out)[9] = (size_t)f_.q.ptr + (size_t)f_.topk.head_stride + f_.workspace_bytes; \
        (out)[10] = (size_t)b_.dv.token_stride + (size_t)b_.lse + (o_.target != 0);    \
        (out)[11] = sizeof(fsa_tensor);                                                \
    } while (0)

#endif
