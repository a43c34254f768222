/* Public structs that carry struct_size: reading a caller's struct, which may
 * be an older and shorter version, and writing one back. */
#ifndef FSA_BASE_STRUCT_SIZE_H
#define FSA_BASE_STRUCT_SIZE_H

#include "fsa.h"

#include <stddef.h>

/* The size of a struct's first published version: the end of its last field
 * then, rounded up to the struct's alignment, as sizeof gave it to callers
 * compiled against that header. */
#define FSA_FIRST_SIZE(type, last_field)                                                    \
    ((offsetof(type, last_field) + sizeof(((type *)0)->last_field) + _Alignof(type) - 1) / \
     _Alignof(type) * _Alignof(type))

/* The last field of each struct's first version. These never change: a field
 * added later goes after them, starting at or after the first size, so that it
 * never lies in the tail padding of an older caller's struct. */
#define FSA_CONTEXT_OPTIONS_FIRST_SIZE FSA_FIRST_SIZE(fsa_context_options, log)
#define FSA_CACHE_STATS_FIRST_SIZE FSA_FIRST_SIZE(fsa_cache_stats, write_failures)
#define FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE FSA_FIRST_SIZE(fsa_selected_attention_desc, backward)
#define FSA_FWD_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_fwd_args, workspace_bytes)
#define FSA_BWD_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_bwd_args, workspace_bytes)
#define FSA_PLAN_CHOICE_FIRST_SIZE FSA_FIRST_SIZE(fsa_plan_choice, will_measure)
#define FSA_KVCACHE_DESC_FIRST_SIZE FSA_FIRST_SIZE(fsa_kvcache_desc, splits)
#define FSA_KVCACHE_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_kvcache_args, workspace_bytes)
#define FSA_COMPRESSED_ATTENTION_DESC_FIRST_SIZE FSA_FIRST_SIZE(fsa_compressed_attention_desc, backward)
#define FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_compressed_bwd_args, workspace_bytes)
#define FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE FSA_FIRST_SIZE(fsa_window_attention_desc, scale)
#define FSA_WINDOW_FWD_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_window_fwd_args, lse)
#define FSA_WINDOW_BWD_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_window_bwd_args, workspace_bytes)
#define FSA_COMPRESSED_FWD_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_compressed_fwd_args, workspace_bytes)
#define FSA_GATE_DESC_FIRST_SIZE FSA_FIRST_SIZE(fsa_gate_desc, value_dim)
#define FSA_GATE_ARGS_FIRST_SIZE FSA_FIRST_SIZE(fsa_gate_args, dgate)

/* For every field added after a struct's first version, next to the code
 * that reads it: a compile-time check that it starts at or after the first
 * size. (A field in an older caller's tail padding would read as garbage.) */
#define FSA_APPENDED_FIELD(type, field, first_size)      \
    _Static_assert(offsetof(type, field) >= (first_size), \
                   #type "." #field " must start at or after the end of the struct's first version")

/* FSA_STATUS_STRUCT_SIZE (with the error record) unless the caller's
 * struct_size is in first_size..size: what fsa_struct_read and
 * fsa_struct_write check, for a call that checks before its other work. */
fsa_status fsa_struct_size_check(const void *caller, size_t size, size_t first_size, const char *stage,
                                 const char *type_name);

/* Reads the caller's struct into `local`, the current version of `size`
 * bytes: the bytes its struct_size covers, zeros after them. Returns
 * FSA_STATUS_STRUCT_SIZE (with the error record) unless
 * first_size <= struct_size <= size. */
fsa_status fsa_struct_read(void *local, size_t size, const void *caller, size_t first_size, const char *stage,
                           const char *type_name);

/* A field added after the first version, whole or not at all: checked after
 * fsa_struct_read (or before fsa_struct_write), FSA_STATUS_STRUCT_SIZE (with
 * the error record) when the caller's struct_size ends inside it, whose
 * leading bytes would otherwise make a value no caller passed: an address, or
 * a number (check mode on where -1 asked it off, a value dim of 0 = the head
 * dim's) from a size no published version has. Every appended field is
 * checked so. */
#define FSA_STRUCT_FIELD_WHOLE(local, type, field, stage)                                                   \
    fsa_struct_field_whole((local)->struct_size, offsetof(type, field), sizeof(((type *)0)->field), stage, \
                           #type, #field)
fsa_status fsa_struct_field_whole(size_t struct_size, size_t offset, size_t field_size, const char *stage,
                                  const char *type_name, const char *field_name);

/* Writes `local` (the current version, `size` bytes) into the caller's output
 * struct: only the bytes its struct_size covers, and never struct_size itself.
 * Same sizes accepted as fsa_struct_read. */
fsa_status fsa_struct_write(void *caller, const void *local, size_t size, size_t first_size, const char *stage,
                            const char *type_name);

#endif
