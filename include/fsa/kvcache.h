/**
 * @file fsa/kvcache.h
 * Selected attention over a paged KV cache (serving). Part of fsa.h.
 */
#ifndef FSA_PUBLIC_KVCACHE_H
#define FSA_PUBLIC_KVCACHE_H

#include "common.h"
#include "status.h"
#include "context.h"
#include "selected.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Selected attention over a paged KV cache (serving)                       */
/* ------------------------------------------------------------------------ */

/* New query tokens (decode: 1 per sequence; speculative decoding: a few;
 * chunked prefill: thousands) attend to the selected blocks of their
 * sequence's cached keys, held in pages. One call per layer for a batch that
 * mixes these; no allocation, no host synchronization (but for check mode
 * and a first call that tunes: fsa_kvcache_attention), capturable in a CUDA
 * graph, with the page table, cached lengths and top-k rows read on the
 * device at every call (update them in place between graph replays).
 *
 * Semantics. Sequence b has q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b]
 * new tokens and L_b = seqused_k[b] cached keys (new tokens included: the
 * caller wrote them into the cache first). Its new token i sits at position
 * p = L_b - q_len_b + i. Slot s of the token's top-k row (logical block
 * numbers of the sequence) is valid when s < topk_length[token] (when given),
 * 0 <= idx <= p / block_size, and no earlier slot of the row holds the same
 * block. The token sees key j when j lies in a valid block and j <= p; key j
 * of the sequence is row j % page_size of page block_table[b][j / page_size].
 * o = softmax(scale * q k^T) v over the visible keys (fp32 accumulation),
 * lse = the natural log of the softmax denominator; no visible key: o = 0,
 * lse = -inf.
 *
 * Bounds: kernels clamp or skip every index read from device memory. A page
 * number outside [0, num_pages), a page-table slot at or past
 * max_pages_per_seq, or a position < 0 (seqused_k < q_len) makes the keys or
 * tokens concerned invisible; malformed cu_seqlens_q is clamped to
 * [0, num_query_tokens]. Nothing out of bounds is read or written. Tokens
 * that no sequence's range covers once clamped (at or past cu_seqlens_q[B],
 * or skipped where offsets fall) belong to no tile: their o and lse rows are
 * not written; tokens two sequences claim are written twice.
 *
 * Batch invariance: a sequence whose new tokens fit one tile (see
 * fsa_kvcache_plan_info) splits its selected blocks into `splits` contiguous
 * shares, each computed the same way whichever of the sequence's CTAs runs it
 * (the host gives a sequence fewer CTAs at larger batches), and merged by lse
 * in share order; a longer one never splits. The rule reads only the sequence's own query
 * length and plan constants (the split count is the plan's: forced, its
 * tuning record or the heuristic, never the batch's), so a sequence's o and
 * lse are bitwise the same alone or in any batch with the same plan state. */

typedef struct fsa_kvcache_plan fsa_kvcache_plan;

/** The problem shape of a paged-cache plan. */
typedef struct fsa_kvcache_desc {
    size_t struct_size;
    fsa_dtype dtype;          /**< of q, the caches and o; default bf16 */
    int head_dim;             /**< D (Dk) of q and the key cache: multiple of 16, 16..256; default 128 */
    int num_q_heads;          /**< Hq (required) */
    int num_kv_heads;         /**< Hkv (required), at most 65535; group G = Hq / Hkv, 1..64 */
    int block_size;           /**< keys per selectable block: 16, 32, 64 (default), 128, 256 */
    int top_k;                /**< slots per top-k row: 1..64; default 16 */
    int page_size;            /**< tokens per cache page: 1, 16, 32, 64 (default), 128, 256 */
    int max_batch;            /**< most sequences per call (required; 1 to INT_MAX - 1024) */
    int64_t max_query_tokens; /**< most new tokens per call, all sequences together (required), up to INT32_MAX */
    float scale;              /**< softmax scale; 0 = 1/sqrt(head_dim) */
    int splits;               /**< shares of a one-tile sequence, 1..64; 0 = chosen (fsa_kvcache_plan_choice_get):
                                   a tuning record, else the heuristic (ceil(top_k / 4), at most 16, or
                                   more shares of about two blocks for a small selection: docs/kvcache.md) */
    int value_dim;            /**< Dv of the value cache and o: multiple of 16, 16..256; 0 = head_dim */
    int reserved;             /**< unused, never read: fills what was tail padding, so that a field appended
                                   later starts past every earlier version's size (docs/versioning.md) */
} fsa_kvcache_desc;

#define FSA_KVCACHE_DESC_INIT                                                                          \
    FSA_INIT_(fsa_kvcache_desc, FSA_INIT_FIELD_(head_dim, 128) FSA_INIT_FIELD_(block_size, 64)          \
                                    FSA_INIT_FIELD_(top_k, 16) FSA_INIT_FIELD_(page_size, 64))

/**
 * Creates a paged-cache plan: checks the descriptor, compiles or loads its
 * kernels (blocking; not during a stream capture).
 * @param[out] out  the new plan, or NULL on failure; the caller owns it
 *                  (fsa_kvcache_plan_destroy). It keeps using `ctx`, which
 *                  must outlive it.
 * @param      ctx  a context; an offline one only fills the cache
 * @param      desc read during the call only
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT or FSA_STATUS_UNSUPPORTED for a shape
 *         outside the ranges above; FSA_STATUS_UNSUPPORTED for one whose
 *         kernel needs more shared memory than the target allows in either
 *         layout (docs/kvcache.md); the JIT statuses of fsa_plan_create.
 */
FSA_API fsa_status fsa_kvcache_plan_create(fsa_kvcache_plan **out, fsa_context *ctx,
                                           const fsa_kvcache_desc *desc);
/** Destroys a plan; NULL is fine. No call of it may be in flight on the host. */
FSA_API void fsa_kvcache_plan_destroy(fsa_kvcache_plan *plan);

/**
 * Bytes of device workspace every call of the plan needs (sized for
 * max_batch and the largest split count the plan may choose; 0 when no
 * sequence can split). Zero it once when allocating it (cuMemsetD8,
 * torch.zeros): the last share of a split sequence to finish is found
 * through counters at its start, which every call leaves zero again. The
 * counters' extent is the plan's (fsa_kvcache_plan_workspace_counter_size):
 * a workspace shared by plans of different counter sizes holds one plan's
 * scratch where another's counters lie, so before a call of another plan
 * zero that plan's counter bytes (or give each plan its own workspace).
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER for a NULL output or plan.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_kvcache_plan_workspace_size(size_t *bytes_out, const fsa_kvcache_plan *plan);

/**
 * Bytes at the start of the workspace that must be zero before a call: the
 * counters (every call leaves them zero again); the rest is scratch. A
 * caller that takes its workspace from a pool for each call (as the Python
 * binding does) zeroes only these, not the whole workspace. At most the
 * workspace size; 0 when that is 0.
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER for a NULL output or plan.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_kvcache_plan_workspace_counter_size(size_t *bytes_out, const fsa_kvcache_plan *plan);

/**
 * The tiling the plan uses: query tokens per tile (a sequence with at most
 * this many new tokens splits) and the number of shares it splits into.
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER for a NULL output or plan.
 * Host-only and thread-safe.
 */
FSA_API fsa_status fsa_kvcache_plan_info(int *tile_tokens_out, int *splits_out, const fsa_kvcache_plan *plan);

/**
 * The split count the plan's calls take, and why: forced by the descriptor
 * (splits > 0), the plan's tuning record (measured), or the heuristic
 * (ceil(top_k / 4), at most 16; more shares of about two blocks each, at most 8,
 * where one token's selected K/V is small: docs/kvcache.md). algorithm is
 * FSA_ALGORITHM_AUTO (one loop order), bucket_tokens 0 (one record per
 * plan), variant e.g. "kvc.s4" (valid while the plan lives), splits the
 * share count.
 * @param[out] out  struct_size set by the caller (FSA_PLAN_CHOICE_INIT)
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE.
 * Host-only and thread-safe; never measures.
 */
FSA_API fsa_status fsa_kvcache_plan_choice_get(fsa_plan_choice *out, const fsa_kvcache_plan *plan);

/**
 * Measures the plan's split counts now, as its first call with tuning on
 * would: each candidate on scratch decode batches (one sequence, and about
 * four (sequence, KV head) pairs per SM, up to max_batch) the library
 * allocates and frees, on `stream`: one untimed and one timed run of each,
 * then more timed rounds while under about 300 ms; the winner (the
 * smallest geometric mean of the two times) becomes the plan's tuning record
 * in the cache directory. A plan that has a record, or one candidate, or a
 * stream being captured, is left alone (measured_out 0); so is one whose
 * measurement failed before (the heuristic for the plan's life: a serving
 * call does not retry it), and a driver without the memory or event
 * functions the measurement needs.
 * @param[out] measured_out 1 when it measured; may be NULL
 * @param      plan         a plan of a context with a device and tuning on
 * @param      stream       a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK; FSA_STATUS_NULL_POINTER; FSA_STATUS_INVALID_ARGUMENT
 *         (tuning off); FSA_STATUS_NO_DEVICE; FSA_STATUS_OUT_OF_MEMORY;
 *         driver errors.
 * Blocks (allocation, host synchronization).
 */
FSA_API fsa_status fsa_kvcache_plan_tune(int *measured_out, const fsa_kvcache_plan *plan, void *stream);

/** Arguments of fsa_kvcache_attention.
 *
 * q: [Tq, Hq, D] and o: [Tq, Hq, Dv] dtype tensors (D = head_dim, Dv =
 * value_dim), 16-byte aligned, strides multiples of 8.
 * k_cache and v_cache: pages [num_pages, page_size, Hkv, D] and
 * [num_pages, page_size, Hkv, Dv], each by its own strides: the row of token
 * slot s of page n and KV head h starts at element `ptr + n * page_stride +
 * s * token_stride + h * head_stride` (so [num_pages, Hkv, page_size, D]
 * works too); 16-byte aligned, strides multiples of 8, a page stride above 0
 * when there is more than one page (pages are memory of their own), every
 * row below 2^63 bytes of address.
 * block_table: int32, entry (b, i) at `block_table + b * block_table_stride
 * + i`, i < max_pages_per_seq, every entry below 2^63 bytes of address
 * (a row stride reaching further is FSA_STATUS_INVALID_ARGUMENT); with
 * batch > 1 the row stride is at least max_pages_per_seq (rows of their
 * own: a shorter stride is FSA_STATUS_INVALID_ARGUMENT). cu_seqlens_q: int32 [batch + 1]; seqused_k:
 * int32 [batch]. topk: int32 logical block numbers, slot s of token t and KV
 * head h at `topk.ptr + t * topk.token_stride + h * topk.head_stride + s`
 * ([Hkv, Tq, K] or [Tq, Hkv, K]; head stride 0 shares one selection across
 * the KV heads); -1 = unused. topk_length: optional int32 [Tq]. lse: optional
 * float [Hq, Tq]. All device data is read on the device at every call
 * (update it in place between graph replays) and stays the caller's. */
typedef struct fsa_kvcache_args {
    size_t struct_size;
    int64_t num_query_tokens;   /**< Tq (host), 0..max_query_tokens */
    int batch;                  /**< B (host), 0..max_batch; 0 only without query tokens */
    fsa_tensor q;               /**< [Tq, Hq, D], read */
    uint64_t cu_seqlens_q;      /**< int32 [batch + 1], read */
    fsa_tensor k_cache;         /**< token and head strides of the key pages, read */
    int64_t k_page_stride;      /**< elements from one key page to the next */
    fsa_tensor v_cache;         /**< token and head strides of the value pages, read */
    int64_t v_page_stride;      /**< elements from one value page to the next */
    int64_t num_pages;          /**< pages in each cache; other page numbers are skipped */
    uint64_t block_table;       /**< int32 [batch, max_pages_per_seq] by rows, read */
    int64_t block_table_stride; /**< elements from one sequence's row to the next */
    int max_pages_per_seq;      /**< entries per row; slots past it are skipped */
    uint64_t seqused_k;         /**< int32 [batch]: cached keys, new tokens included, read */
    fsa_tensor topk;            /**< int32 top-k rows through their strides, read */
    uint64_t topk_length;       /**< optional int32 [Tq], read; 0 = every row uses all K slots */
    fsa_tensor o;               /**< [Tq, Hq, Dv], written */
    uint64_t lse;               /**< optional float [Hq, Tq] (natural log), written; 0 = not wanted */
    uint64_t workspace;         /**< 256-byte aligned, fsa_kvcache_plan_workspace_size bytes, filled with
                                     zeros once before its first call: it starts with counters that every
                                     call leaves zero; the rest is scratch, undefined after a call (one
                                     workspace per stream at a time; before a call of another plan than
                                     the last, the caller zeroes that plan's
                                     fsa_kvcache_plan_workspace_counter_size bytes) */
    size_t workspace_bytes;
} fsa_kvcache_args;

#define FSA_KVCACHE_ARGS_INIT FSA_INIT_(fsa_kvcache_args, )

/**
 * Enqueues the attention on `stream` and returns: no allocation, no host
 * synchronization; can be captured in a CUDA graph. Host-checkable problems
 * are refused before anything is enqueued. Bad device metadata is clamped or
 * skipped on the device; in check mode (fsa_context_options.check) a small
 * kernel validates it first and the call waits for the verdict (docs/kvcache.md).
 * With tuning on (fsa_context_options.tune), the plan's first uncaptured call
 * also measures its split counts on scratch batches it allocates, and waits
 * for the timings (fsa_kvcache_plan_choice_get): cuMemAlloc and cuMemFree of
 * the scratch, a copy of its metadata on `stream`, event waits and a
 * synchronization of `stream`, in relaxed capture mode (another thread may
 * be capturing meanwhile).
 * @param plan   the plan
 * @param args   read during the call only
 * @param stream a CUstream of the plan's device, or NULL
 * @return FSA_STATUS_OK (also for an empty call: no query tokens);
 *         FSA_STATUS_NULL_POINTER; FSA_STATUS_STRUCT_SIZE;
 *         FSA_STATUS_INVALID_ARGUMENT for counts beyond the plan, query tokens
 *         with batch 0, num_pages or max_pages_per_seq below 1, negative
 *         strides, a page stride of 0 or below over several pages, a table row stride
 *         below max_pages_per_seq with batch > 1, o rows that share elements,
 *         views past 2^63 bytes, more tiles (query tokens / tile
 *         tokens + batch) than a grid's 2^31 - 1 CTAs, or in check mode for bad device
 *         metadata; FSA_STATUS_MISALIGNED; FSA_STATUS_WORKSPACE_TOO_SMALL;
 *         FSA_STATUS_NO_DEVICE for an offline plan; FSA_STATUS_DRIVER_ERROR,
 *         also for a cache layout the driver cannot describe as a tensor map
 *         (sm_90a page copies; refused before anything is enqueued).
 * Thread-safe for calls with different workspaces and outputs.
 */
FSA_API fsa_status fsa_kvcache_attention(const fsa_kvcache_plan *plan, const fsa_kvcache_args *args,
                                         void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FSA_PUBLIC_KVCACHE_H */
