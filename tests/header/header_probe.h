/* What a translation unit sees of include/fsa.h's ..._INIT macros: one
 * probe compiled as strict C11, one as C++ (when a C++ compiler exists). */
#ifndef FSA_HEADER_PROBE_H
#define FSA_HEADER_PROBE_H

#include <stddef.h>

#define FSA_PROBE_VALUES 23

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
        fsa_compressed_attention_desc cd_ = FSA_COMPRESSED_ATTENTION_DESC_INIT;        \
        fsa_compressed_fwd_args cf_ = FSA_COMPRESSED_FWD_ARGS_INIT;                    \
        fsa_compressed_bwd_args cb_ = FSA_COMPRESSED_BWD_ARGS_INIT;                    \
        fsa_window_attention_desc wd_ = FSA_WINDOW_ATTENTION_DESC_INIT;                \
        fsa_window_fwd_args wf_ = FSA_WINDOW_FWD_ARGS_INIT;                            \
        fsa_gate_desc gd_ = FSA_GATE_DESC_INIT;                                        \
        fsa_gate_args ga_ = FSA_GATE_ARGS_INIT;                                        \
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
        (out)[12] = cd_.struct_size;                                                   \
        (out)[13] = cf_.struct_size;                                                   \
        (out)[14] = (size_t)cd_.head_dim + (size_t)cd_.value_dim;                      \
        (out)[15] = (size_t)cd_.kernel_size * 100 + (size_t)cd_.stride;                \
        (out)[16] = (size_t)cd_.top_k * 1000 + (size_t)cd_.block_size * 10 + (size_t)cd_.init_blocks; \
        (out)[17] = (size_t)cd_.local_blocks + (size_t)cd_.num_q_heads + (size_t)cf_.topk.ptr + cf_.workspace_bytes; \
        (out)[18] = cb_.struct_size + (size_t)cb_.dk.ptr + (size_t)cd_.backward;      \
        (out)[19] = wd_.struct_size + (size_t)wd_.head_dim * 1000 + (size_t)wd_.window + (size_t)wd_.value_dim; \
        (out)[20] = wf_.struct_size + (size_t)wf_.lse;                                \
        (out)[21] = gd_.struct_size + (size_t)gd_.value_dim * 1000 + (size_t)gd_.dtype; \
        (out)[22] = ga_.struct_size + (size_t)ga_.dgate + (size_t)ga_.gate[2].ptr;    \
    } while (0)

#endif
