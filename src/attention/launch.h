/* What the operations' calls share: the call frame (args read, checked,
 * launched in the plan's context); for selected attention also argument
 * checks, the parameter block's inputs, one kernel launch, and the index
 * inversion. */
#ifndef FSA_ATTENTION_LAUNCH_H
#define FSA_ATTENTION_LAUNCH_H

#include "plan.h"

/* The arguments the forward and backward structs share (same names in both). */
typedef struct fsa_call_inputs {
    int64_t total_tokens;
    int batch, max_seqlen;
    const fsa_tensor *q, *k, *v, *o, *topk;
    uint64_t cu_seqlens, lse;
} fsa_call_inputs;

#define FSA_CALL_INPUTS(a)                                                                                      \
    {                                                                                                           \
        (a)->total_tokens, (a)->batch, (a)->max_seqlen, &(a)->q, &(a)->k, &(a)->v, &(a)->o, &(a)->topk,        \
            (a)->cu_seqlens, (a)->lse                                                                           \
    }

/* A token count the kernels can index: 0 to INT32_MAX - 1. */
fsa_status fsa_check_token_count(const char *stage, int64_t total_tokens);

/* The token count, and with tokens a batch of 1 to total_tokens sequences:
 * what the calls and the workspace-size queries accept alike. */
fsa_status fsa_check_tokens(const char *stage, int64_t total_tokens, int batch);

/* A q/k/v-like tensor of `tokens` x `heads` rows: non-NULL, 16-byte aligned,
 * strides not negative (INVALID_ARGUMENT) and multiples of 8 elements
 * (MISALIGNED), every row starting below 2^63 bytes of address
 * (INVALID_ARGUMENT: the kernels add signed 64-bit offsets to the pointer).
 * The stride of a dimension of size 1 is not checked: it is never used. */
fsa_status fsa_check_tensor(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                            int64_t heads);

/* A float32 [tokens, heads] view (strides in floats): non-NULL, 4-byte
 * aligned, strides not negative, rows below 2^63 bytes; a stride of 0
 * repeats a value. */
fsa_status fsa_check_float_view(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                                int64_t heads);

/* A float array [heads][tokens] given by address (lse, dgate): when not NULL,
 * every element below 2^63 bytes of address (alignment is the caller's). */
fsa_status fsa_check_float_rows(const char *stage, const char *name, uint64_t ptr, int64_t tokens, int64_t heads);

/* A call's int32 and float arrays (offsets, tables, lse rows): `required`
 * ones not NULL (FSA_STATUS_NULL_POINTER naming the first that is), then
 * every one given 4-byte aligned (FSA_STATUS_MISALIGNED naming the first
 * that is not). */
typedef struct fsa_array_check {
    const char *name;
    uint64_t ptr;
    int required;
} fsa_array_check;
fsa_status fsa_check_arrays(const char *stage, const fsa_array_check *arrays, int n);

/* An int32 [tokens, heads] view of rows of indices (top-k rows; strides in
 * ints): the same rules as fsa_check_float_view. */
fsa_status fsa_check_index_view(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                                int64_t heads);

/* The element offset of a view's last row start: strides (already checked
 * not negative) times the counts less one, a dimension of one row adding
 * nothing; 128-bit, so no product overflows. */
unsigned __int128 fsa_view_last_row(const fsa_tensor *t, int64_t tokens, int64_t heads);

/* Whether element offsets up to `last_elem` (of elem_bytes each) from `ptr`
 * stay below 2^63 bytes of address; exact (128-bit). For views with a
 * dimension of their own (the pages of a paged cache). */
int fsa_within_reach(uint64_t ptr, unsigned __int128 last_elem, unsigned elem_bytes);

/* A view the call writes, already checked as above: its tokens x heads rows
 * of row_elems elements each are distinct memory (rows sharing bytes would
 * race, leaving whichever write landed last), else INVALID_ARGUMENT. The
 * rows must nest: the smaller stride spans a row, the larger all rows along
 * the other dimension (every dense layout and any padding pass; two equal
 * strides, a stride of 0 or rows interleaved into each other do not). */
fsa_status fsa_check_written(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens,
                             int64_t heads, int64_t row_elems);

/* A q/k/v-like tensor the call writes: fsa_check_tensor, then
 * fsa_check_written with rows of row_elems elements. */
fsa_status fsa_check_output(const char *stage, const char *name, const fsa_tensor *t, int64_t tokens, int64_t heads,
                            int64_t row_elems);

/* A backward's dq_add, already checked as a tensor: dq itself (the same
 * address and strides: each element is read before it is written, by the
 * same thread) or memory apart from dq's, else INVALID_ARGUMENT (a partial
 * overlap would read elements other threads have already written). rows of
 * row_elems 2-byte elements. */
fsa_status fsa_check_dq_add(const char *stage, const fsa_tensor *dq_add, const fsa_tensor *dq, int64_t tokens,
                            int64_t heads, int64_t row_elems);

/* A backward's optional gate (as fsa_check_float_view) and gate_grad (the
 * same, and written: fsa_check_written with rows of one float); ptr 0: none. */
fsa_status fsa_check_gate_views(const char *stage, const fsa_tensor *gate, const fsa_tensor *gate_grad,
                                int64_t tokens, int64_t heads);

/* Several tensors, each as fsa_check_tensor (or fsa_check_output when the
 * call writes it), in order. */
typedef struct fsa_tensor_check {
    const char *name;
    const fsa_tensor *t;
    int64_t tokens, heads;
    int64_t written_row; /* 0: read; else written, rows of this many elements */
} fsa_tensor_check;
fsa_status fsa_check_tensors(const char *stage, const fsa_tensor_check *list, size_t n);

/* Counts, max_seqlen, top-k, cu_seqlens and lse (required by the
 * backward); with tokens, also q, k, v and o (written by the forward). */
fsa_status fsa_check_inputs(const char *stage, const fsa_plan *plan, const fsa_call_inputs *in, int backward);

/* The workspace holds `needed` bytes and is 256-byte aligned. */
fsa_status fsa_check_workspace(const char *stage, uint64_t workspace, size_t bytes, size_t needed);

/* The backward of query-tile attention (compressed, window) keeps two
 * [Hq, T] float arrays in its workspace, delta then a gated backward's lse
 * words, each of fsa_qt_bwd_rows_bytes (rounded up to the workspace
 * alignment): fsa_qt_bwd_workspace_bytes in all. */
size_t fsa_qt_bwd_rows_bytes(int num_q_heads, int64_t total_tokens);
size_t fsa_qt_bwd_workspace_bytes(int num_q_heads, int64_t total_tokens);

/* Its workspace query: bytes_out and plan not NULL (*bytes_out 0 on any
 * failure), a plan made with backward, a token count and batch a call
 * accepts. */
fsa_status fsa_qt_bwd_workspace_query(size_t *bytes_out, const void *plan, int backward, int num_q_heads,
                                      int64_t total_tokens, int batch, const char *stage);

/* Its own arguments, after the inputs it shares with the forward: dout and
 * dq over the T query rows of hq heads, dk and dv over `keys` rows of hkv
 * heads, and the workspace. */
typedef struct fsa_qt_grads {
    const fsa_tensor *dout, *dq, *dk, *dv;
    const fsa_tensor *dq_add;          /* ptr 0: none */
    const fsa_tensor *gate, *gate_grad; /* float [T, Hq] views; ptr 0: none */
    uint64_t workspace;
    size_t workspace_bytes;
    int head_dim, value_dim; /* Dk of dq and dk, Dv of dv: the rows fsa_check_written sees */
} fsa_qt_grads;
/* The backward's fields of a query-tile parameter block (fsa_cmp_params,
 * fsa_swa_params) from its args struct: the gradients' views, dq_add, gate
 * and gate_grad (ptr 0: none), delta and the gated lse words in the
 * workspace (hq query heads). */
#define FSA_QT_PARAMS_GRADS(p, a, hq)                                                                       \
    ((p)->dout = fsa_view_of(&(a)->dout), (p)->dq = fsa_view_of(&(a)->dq), (p)->dk = fsa_view_of(&(a)->dk), \
     (p)->dv = fsa_view_of(&(a)->dv), (p)->dq_add = fsa_view_of(&(a)->dq_add),                              \
     (p)->gate = fsa_view_of(&(a)->gate), (p)->gate_grad = fsa_view_of(&(a)->gate_grad),                    \
     (p)->delta = (long long)(a)->workspace,                                                                \
     (p)->gated_lse = (long long)((a)->workspace + fsa_qt_bwd_rows_bytes((hq), (a)->total_tokens)))
fsa_status fsa_qt_bwd_check_grads(const char *stage, const fsa_qt_grads *g, int64_t total_tokens, int64_t keys,
                                  int hq, int hkv);

/* A tensor argument as the kernels see it. */
fsa_kernel_view fsa_view_of(const fsa_tensor *t);

/* Clears the parameter block, then fills the inputs every kernel reads:
 * tensors, top-k, cu_seqlens, lse, the problem and the scale. */
void fsa_params_inputs(fsa_sel_params *p, const fsa_plan *plan, const fsa_call_inputs *in);

/* The two ends of every call, whatever its operation and plan (arguments are
 * checked between them, so they can be checked offline):
 * fsa_call_read: plan and args not NULL, then the caller's args struct (any
 * version from first_size up; newer fields read as zero) read into `call`.
 * fsa_call_enter: with work to launch, the plan's context made current
 * (FSA_STATUS_NO_DEVICE for an offline one); fsa_context_leave after the
 * launches. */
fsa_status fsa_call_read(void *call, size_t call_size, const void *plan, const void *args, size_t first_size,
                         const char *stage, const char *args_type);
fsa_status fsa_call_enter(const fsa_context *ctx, const char *stage);

/* The softmax scale a descriptor asks for: `scale`, or 1/sqrt(head_dim) when it is 0. */
float fsa_softmax_scale(float scale, int head_dim);

/* The start of every plan constructor: out, context and descriptor not NULL,
 * then the caller's descriptor (any version from first_size up) read into
 * `desc`. The caller clears *out first. */
fsa_status fsa_plan_desc_read(void *desc, size_t desc_size, const void *out, const void *ctx,
                              const void *caller_desc, size_t first_size, const char *stage, const char *desc_type);

/* Whether the caller's fsa_plan_choice can be written: its struct_size one of
 * a version's (first up), not ending inside an appended field; else
 * FSA_STATUS_STRUCT_SIZE. A query checks it before anything else. */
fsa_status fsa_plan_choice_check(const fsa_plan_choice *out, const char *stage);

/* Writes a plan's choice into the caller's fsa_plan_choice (any version from
 * the first up): nothing written when fsa_plan_choice_check refuses it. */
fsa_status fsa_plan_choice_write(fsa_plan_choice *out, const fsa_plan_choice *choice, const char *stage);

/* How an operation with its own argument checks is called (compressed and
 * window attention): its args struct, its checks, its launch sequence. Its
 * plan struct starts with its `fsa_context *`. */
typedef struct fsa_call_frame {
    const char *stage, *args_type;
    size_t args_size, args_first_size;
    /* Every argument, on the host; *has_work = 0: nothing to launch. */
    fsa_status (*check)(const void *plan, const void *call, int *has_work);
    /* The launch sequence, inside the plan's context. */
    fsa_status (*launch)(const void *plan, const void *call, CUstream stream);
} fsa_call_frame;

/* One call framed by f: fsa_call_read into `call` (f->args_size bytes), the
 * checks, then with work fsa_call_enter, the launches, fsa_context_leave. */
fsa_status fsa_call_framed(const fsa_call_frame *f, void *call, const void *plan, const void *args, void *stream);

/* How one operation of selected attention is called: its args struct, its
 * checks, its launch sequence. The op's call struct starts with its args
 * struct. */
typedef struct fsa_op {
    const char *stage;     /* error stage, e.g. "forward" */
    const char *args_type; /* e.g. "fsa_fwd_args" */
    size_t args_size, args_first_size;
    int backward;          /* needs a plan made with backward = 1, and lse */
    /* The fields appended after the args' first version, whole or not at
     * all (FSA_STRUCT_FIELD_WHOLE), whatever the token count; NULL: none. */
    fsa_status (*check_fields)(const void *call);
    /* The inputs every operation shares, from the args read into `call`. */
    fsa_call_inputs (*inputs)(const void *call);
    /* With tokens, once the shared inputs are checked: the op's own checks,
     * recording in `call` what the launch reuses. */
    fsa_status (*prepare)(void *call, const fsa_plan *plan);
    /* The launch sequence, inside the plan's context. */
    fsa_status (*launch)(const void *call, const fsa_plan *plan, CUstream stream);
} fsa_op;

/* One call of an operation: reads the caller's args struct (any version from
 * the first size up; newer fields read as zero) to the start of `call`,
 * prepares, and with work and a device launches inside the plan's context.
 * Arguments are checked before the device is required, so they can be
 * checked offline. */
fsa_status fsa_call(const fsa_op *op, void *call, const fsa_plan *plan, const void *args, void *stream);

/* fsa_kernel_launch with the plan's context and the selected-attention
 * parameter block. */
fsa_status fsa_launch(const fsa_plan *plan, const fsa_kernel *k, uint64_t gx, unsigned gy, CUstream stream,
                      fsa_sel_params *p);

/* Grid of a kernel with `per_block` rows per block over `rows` rows. */
static inline uint64_t fsa_blocks_for(uint64_t rows, int per_block)
{
    return (rows + (uint64_t)per_block - 1) / (uint64_t)per_block;
}

/* Index inversion of the chunk in p: clear the counters, count (with the
 * last-block scan), scatter. */
fsa_status fsa_launch_index(const fsa_plan *plan, const fsa_kernel *count, const fsa_kernel *scatter,
                            const fsa_index_layout *l, uint64_t workspace, CUstream stream, fsa_sel_params *p);

/* The parameters of KV heads h0 .. h0 + heads - 1 and their query heads: the
 * tensors, top-k rows and lse start at those heads, so the kernels see a
 * problem of `heads` KV heads (every workspace array they index is per head):
 * how a call runs in chunks of heads without the kernels knowing. */
void fsa_params_heads(fsa_sel_params *p, const fsa_sel_params *all, int group, long long h0, int heads);

/* The index arrays of a workspace laid out by l, as its inversion sees them. */
void fsa_params_index(fsa_sel_params *p, const fsa_index_layout *l, uint64_t workspace);

/* p (index arrays as fsa_params_index set them, with work_seg, mask and, in
 * the backward, part_offsets; tc the chunk's tokens) moved to head chunk
 * `chunk` of an inversion that covers several (0 when it covers one): the
 * chunk's launches see an index of their own heads. */
void fsa_params_index_chunk(fsa_sel_params *p, const fsa_index_layout *l, long long chunk);

/* A call's KV heads go in groups of l->index_heads (one index inversion
 * each, shared by the group's chunks when it holds several), each group in
 * chunks of l->chunk_heads. fsa_params_index_group: the parameters of the
 * group from KV head g0 on, as its inversion (and the backward's prep) sees
 * them: with a shared index every token. fsa_params_group_chunk: those of the
 * group's chunk from its head h on (0, chunk_heads, ...), its part of the
 * group's arrays. `all`: every head, arrays as fsa_params_index set them. */
void fsa_params_index_group(fsa_sel_params *gp, const fsa_sel_params *all, int group, const fsa_index_layout *l,
                            int g0);
void fsa_params_group_chunk(fsa_sel_params *p, const fsa_sel_params *gp, int group, const fsa_index_layout *l, int h);

#endif
