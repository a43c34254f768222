/* Check mode (fsa_context_options.check, FSA_CHECK=1): before a call's
 * kernels, a small kernel (templates/sel_check.cu for selected attention,
 * templates/kvc_check.cu for the paged KV cache, templates/offsets_check.cu
 * for compressed and sliding-window attention) validates the call's
 * metadata against the plan, the call waits for its verdict, and bad
 * metadata becomes FSA_STATUS_INVALID_ARGUMENT with what is wrong where.
 * Without check mode nothing here runs: no kernel, no synchronization. */
#ifndef FSA_ATTENTION_METADATA_CHECK_H
#define FSA_ATTENTION_METADATA_CHECK_H

#include "launch.h"

#include "../../templates/fsa_check.cuh"

typedef struct fsa_metadata_checker fsa_metadata_checker;

/* Which check kernel a checker runs. */
typedef enum fsa_check_kind { FSA_CHECK_SELECTED = 0, FSA_CHECK_KVCACHE = 1, FSA_CHECK_OFFSETS = 2 } fsa_check_kind;

/* With check mode on in the plan's context: loads (compiles) the check
 * kernel of `kind` and, with a device, allocates its result word. *out
 * stays NULL when check mode is off. */
fsa_status fsa_metadata_checker_create(fsa_metadata_checker **out, fsa_context *ctx, fsa_check_kind kind);
void fsa_metadata_checker_destroy(fsa_metadata_checker *c, fsa_context *ctx); /* NULL is fine */

/* The device address of the checker's result, for the kernel's parameters
 * (0 without a checker or a device). */
uint64_t fsa_metadata_checker_result(const fsa_metadata_checker *c);

/* Runs the checker's kernel over `work` items with `params` (a pointer to
 * the kernel's parameter struct, its result field set from
 * fsa_metadata_checker_result) on `stream` and waits for *r. Without a
 * checker, without work, or while the stream is being captured it runs
 * nothing and *r reports no problem. The context must be current
 * (fsa_context_enter). */
fsa_status fsa_metadata_checker_run(fsa_check_result *r, fsa_metadata_checker *c, const fsa_context *ctx,
                                    void *params, uint64_t work, CUstream stream);

/* The selected-attention check of a call (fsa_sel_check). */
fsa_status fsa_metadata_check(const fsa_plan *plan, const char *stage, const fsa_call_inputs *in, CUstream stream);

/* The offsets check of a compressed-attention or sliding-window call
 * (fsa_offsets_check; p's result is set here): OK when the offsets keep the
 * contract or nothing ran (no checker, a stream being captured), else
 * INVALID_ARGUMENT naming each problem. The context must be current. */
fsa_status fsa_offsets_check(fsa_metadata_checker *checker, const fsa_context *ctx, const char *stage,
                             fsa_offsets_check_params p, CUstream stream);

/* The INVALID_ARGUMENT error for what a check found: each problem, and
 * where the first of its kind is (sequence; token and KV head). cu_name
 * names the query offsets ("cu_seqlens", "cu_seqlens_q"), total_name the
 * token count they must end at; problems of cu_seqlens_c name it and
 * total_compressed. */
fsa_status fsa_metadata_verdict(const char *stage, const fsa_check_result *r, int64_t num_kv_heads,
                                const char *cu_name, const char *total_name);

#endif
