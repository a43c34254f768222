/* What the host library and the kernels agree on: tensor views, the list-entry
 * encoding, numeric constants, and each kernel's launch shape (threads, rows
 * per block, tile sizes) and shared-memory layout. Plain C that the host
 * compiler and NVRTC both compile: a plan sizes launches and shared memory
 * with the same functions the kernels carve their shared memory with, so the
 * two cannot disagree. Sizes are in bytes, pitches in elements (2 bytes). */
#ifndef FSA_LAYOUT_CUH
#define FSA_LAYOUT_CUH

#if defined(__CUDACC__)
#define FSA_LAYOUT_FN static constexpr __host__ __device__
#else
#define FSA_LAYOUT_FN static inline
#endif

/* The static shared memory of a kernel as the driver counts it beside the
 * dynamic: ptxas rounds each kernel's up to 16 bytes. */
FSA_LAYOUT_FN int fsa_static_smem_counted(int bytes) { return (bytes + 15) / 16 * 16; }

/* ---------------------------------------------------------------- tensors */
/* A [tokens, heads, dim] tensor with unit stride over dim; strides in elements. */
typedef struct fsa_kernel_view {
    long long ptr; /* device address */
    long long token_stride, head_stride;
} fsa_kernel_view;

/* ---------------------------------------------------------------- numbers */
/* The kernels get scale * FSA_LOG2E and work in base 2; lse goes out in base e. */
#define FSA_LOG2E 1.4426950408889634
#define FSA_LN2 0.69314718055994531

/* ---------------------------------------------------------------- list entries */
/* One (token, slot) pair of a (KV head, block) list, as an int32:
 * (token - t0) << FSA_SLOT_BITS | slot. Token-major, so sorting entries sorts
 * by token. The slot bits bound top-k (and the u64 slot masks); the other 25
 * bits bound the tokens of one chunk. */
#define FSA_SLOT_BITS 6
#define FSA_MAX_TOP_K (1 << FSA_SLOT_BITS)
#define FSA_MAX_CHUNK_TOKENS ((1 << (31 - FSA_SLOT_BITS)) - 1)
FSA_LAYOUT_FN int fsa_entry_pack(int token, int slot) { return token << FSA_SLOT_BITS | slot; }
FSA_LAYOUT_FN int fsa_entry_token(int entry) { return entry >> FSA_SLOT_BITS; }
FSA_LAYOUT_FN int fsa_entry_slot(int entry) { return entry & (FSA_MAX_TOP_K - 1); }

/* ---------------------------------------------------------------- tiles */
/* Shared-memory pitch of a row of d elements: +16 B keeps the 8 rows of an
 * ldmatrix on distinct banks. */
FSA_LAYOUT_FN int fsa_pitch(int d) { return d + 8; }
FSA_LAYOUT_FN int fsa_tile_bytes(int rows, int d) { return rows * fsa_pitch(d) * 2; }
/* A 128-byte swizzled tile (Hopper warpgroup operands, fsa_pipeline.cuh):
 * ceil(d / 64) panels of 64 columns, 128 bytes per row each, no padding. */
FSA_LAYOUT_FN int fsa_sw128_bytes(int rows, int d) { return (d + 63) / 64 * rows * 128; }

/* ---------------------------------------------------------------- row kernels */
/* Index inversion (count, scatter, sort): one thread per row or a block per list. */
#define FSA_INDEX_THREADS 256
/* The backward's sort: a long list takes one block per window of this many
 * chunk tokens (grid y), so its blocks run side by side. */
#define FSA_SORT_WINDOW 16384
/* Chunks of at most this many tokens sort every list by rank, one CTA per list (one window). */
#define FSA_SORT_RANK_TOKENS 65536
FSA_LAYOUT_FN int fsa_sort_windows(long long tc) {
    return tc <= FSA_SORT_RANK_TOKENS ? 1 : (int)((tc + FSA_SORT_WINDOW - 1) / FSA_SORT_WINDOW);
}
/* Reduction, prep and dq-sum kernels: a (token, head) row of d elements takes
 * 8, 16 or 32 lanes, each holding 16-byte pieces; dK/dV kernels a warp per row. */
#define FSA_ROW_THREADS 256
FSA_LAYOUT_FN int fsa_row_lanes(int d) { return d / 8 <= 8 ? 8 : d / 8 <= 16 ? 16 : 32; }
FSA_LAYOUT_FN int fsa_rows_per_block(int d) { return FSA_ROW_THREADS / fsa_row_lanes(d); }
FSA_LAYOUT_FN int fsa_warp_rows_per_block(void) { return FSA_ROW_THREADS / 32; }
/* CTAs of the backward's dK/dV sums (a warp per key row) over `key_rows` rows. */
FSA_LAYOUT_FN long long fsa_bwd_dkv_sum_blocks(long long key_rows)
{
    return (key_rows + FSA_ROW_THREADS / 32 - 1) / (FSA_ROW_THREADS / 32);
}

/* ---------------------------------------------------------------- selected attention: layouts */
/* The layout of the selected-attention mma.sync kernels where the target's
 * shared memory per block does not hold the default one (on the 99 KB
 * targets sm_86, sm_89, sm_12x: head dims from 176): bits over the
 * default, one per kernel, 0 keeping it. Each bit takes the kernel's ring
 * of tiles or stages in flight down to one buffer: its copies then start
 * once every warp is done with the previous item and are waited for in
 * full. The products, their order and the merges are the same: the same
 * bits.
 *  FSA_SEL_LAYOUT_FWD_ONE_STAGE: the FSA-order forward main kernel, one
 *      query tile instead of FSA_FWD_STAGES.
 *  FSA_SEL_LAYOUT_NSA_ONE_STAGE: the NSA-order forward, one K and one V
 *      stage instead of FSA_NSA_STAGES.
 *  FSA_SEL_LAYOUT_BWD_ONE_STAGE: the backward main kernel, one Q and one dO
 *      tile instead of FSA_BWD_STAGES.
 *  FSA_SEL_LAYOUT_DQ_ONE_STAGE: the NSA-order dq, one K and one V stage.
 * A plan takes them from fsa_sel_layout_fit; each kernel's template gets
 * its own bit (SEL_LAYOUT), in its name and key (_sl1, _sl2, _sl4, _sl8)
 * only when set, so the default kernels keep theirs. The warpgroup kernels
 * (sm_90a) keep their layout. */
#define FSA_SEL_LAYOUT_FWD_ONE_STAGE 1
#define FSA_SEL_LAYOUT_NSA_ONE_STAGE 2
#define FSA_SEL_LAYOUT_BWD_ONE_STAGE 4
#define FSA_SEL_LAYOUT_DQ_ONE_STAGE 8
#define FSA_SEL_LAYOUT_ALL 15

/* ---------------------------------------------------------------- FSA forward main */
/* A work item: one (KV head, block) and up to FSA_FWD_ITEM_ROWS rows of its
 * list, in tiles of fsa_fwd_rows; a tile packs (token, head-in-group) rows.
 * The warps of a CTA, 16 rows each, share the block's K and V. Up to head
 * dims of 128 a CTA has eight warps: two CTAs per SM at 128 registers hold
 * 16 warps where four-warp CTAs held 12 (the kernel is bound by latency:
 * bench/NOTES.md); wider heads keep four, whose query tiles fit beside the
 * larger blocks. */
#define FSA_FWD_ITEM_ROWS 512
#define FSA_FWD_MAX_GROUP 64
#define FSA_FWD_STAGES 2 /* query tiles in flight */
/* Query tiles in flight under `layout` (FSA_SEL_LAYOUT_*: only the kernel's own bit counts). */
FSA_LAYOUT_FN int fsa_fwd_stages(int layout) { return layout & FSA_SEL_LAYOUT_FWD_ONE_STAGE ? 1 : FSA_FWD_STAGES; }
/* Query/key head dim dk and value head dim dv may differ: K and the query
 * tiles are dk wide, V and the outputs dv wide. The query tiles take the
 * pitch of the wider of the two, because each warp stages its 16 output rows
 * in its own query rows. */
FSA_LAYOUT_FN int fsa_max_dim(int dk, int dv) { return dk > dv ? dk : dv; }
FSA_LAYOUT_FN int fsa_fwd_warps(int dk, int dv) { return fsa_max_dim(dk, dv) <= 128 ? 8 : 4; }
FSA_LAYOUT_FN int fsa_fwd_threads(int dk, int dv) { return 32 * fsa_fwd_warps(dk, dv); }
FSA_LAYOUT_FN int fsa_fwd_rows(int dk, int dv) { return 16 * fsa_fwd_warps(dk, dv); }
FSA_LAYOUT_FN int fsa_fwd_tiles(int dk, int dv) { return FSA_FWD_ITEM_ROWS / fsa_fwd_rows(dk, dv); }
/* 0: the group does not fit. */
FSA_LAYOUT_FN int fsa_fwd_tokens_per_tile(int g, int dk, int dv)
{
    return g <= FSA_FWD_MAX_GROUP ? fsa_fwd_rows(dk, dv) / g : 0;
}
FSA_LAYOUT_FN int fsa_fwd_item_entries(int g, int dk, int dv)
{
    return fsa_fwd_tokens_per_tile(g, dk, dv) * fsa_fwd_tiles(dk, dv);
}
FSA_LAYOUT_FN int fsa_fwd_q_pitch(int dk, int dv) { return fsa_pitch(fsa_max_dim(dk, dv)); }
FSA_LAYOUT_FN int fsa_fwd_q_tile_bytes(int dk, int dv) { return fsa_fwd_rows(dk, dv) * fsa_fwd_q_pitch(dk, dv) * 2; }
/* Row table (query offset, partial row and token of every row of the item)
 * | K | V of the block | the query tiles in flight. */
FSA_LAYOUT_FN int fsa_fwd_smem_k(void) { return (8 + 8 + 4) * FSA_FWD_ITEM_ROWS; }
FSA_LAYOUT_FN int fsa_fwd_smem_v(int dk, int bk) { return fsa_fwd_smem_k() + fsa_tile_bytes(bk, dk); }
FSA_LAYOUT_FN int fsa_fwd_smem_q(int dk, int dv, int bk) { return fsa_fwd_smem_v(dk, bk) + fsa_tile_bytes(bk, dv); }
/* `stages`: query tiles in flight (fsa_fwd_stages). */
FSA_LAYOUT_FN int fsa_fwd_smem_bytes(int dk, int dv, int bk, int stages)
{
    return fsa_fwd_smem_q(dk, dv, bk) + stages * fsa_fwd_q_tile_bytes(dk, dv);
}
/* The warpgroup main kernel (sm_90a, sel_fwd_main_wg.cu): FSA_FWD_WG_GROUPS
 * warpgroups share K and V of the block, held as 128-byte swizzled tiles of
 * fsa_fwd_wg_keys(bk) keys each (one per softmax step); each warpgroup takes
 * every FSA_FWD_WG_GROUPS-th 64-row tile of the item into its own ring of
 * swizzled query tiles, which also stage its output rows. Head dims are
 * multiples of 64, Dk up to 192 (whose 150 KB of shared memory leave one CTA
 * per SM, measured 14-17% faster than mma.sync all the same: bench/NOTES.md,
 * "wsel2") and Dv up to 128, blocks of 32 or 64 keys (one softmax step: a
 * second one's rescaling does not fit the 128 registers of two CTAs per SM).
 * Layout, from a 1024-byte aligned base (FSA_QT_WG_ALIGN bytes of slack):
 * row table | K tiles | V tiles | [group][stage] query tiles. */
#define FSA_FWD_WG_GROUPS 2
#define FSA_FWD_WG_ROWS 64
#define FSA_FWD_WG_SMEM_STATIC 8 /* static shared memory: the CTA's next chunk of items */
#define FSA_FWD_WG_ALIGN 1024
/* Its schedule (FSA_FWD_WG, sel_fwd_main_wg.cu): 2 the tile streams over
 * chunks of FSA_FWD_WG_CHUNK_ITEMS work items in order, a CTA's first chunk
 * by its index and every later one from a work counter, single items in the
 * last FSA_FWD_WG_TAIL_WAVES x grid x FSA_FWD_WG_CHUNK_ITEMS items (measured
 * 1-4% faster than 1 at T 8192, bench/NOTES.md "f8k"; tails of 4, 1 and 0
 * waves slower); 1 the streams over round-robin chunks, chunk c to CTA c % grid (2-6% faster
 * than 0, "mws"); 0 every gridDim.x-th work item with its row table. */
#define FSA_FWD_WG_VARIANT_MAX 2
#define FSA_FWD_WG_VARIANT_DEFAULT 2
#define FSA_FWD_WG_CHUNK_ITEMS 4
#define FSA_FWD_WG_TAIL_WAVES 2
FSA_LAYOUT_FN int fsa_fwd_wg_ok(int dk, int dv, int bk)
{
    return dk % 64 == 0 && dv % 64 == 0 && dk <= 192 && dv <= 128 && (bk == 32 || bk == 64);
}
FSA_LAYOUT_FN int fsa_fwd_wg_threads(void) { return 128 * FSA_FWD_WG_GROUPS; }
FSA_LAYOUT_FN int fsa_fwd_wg_keys(int bk) { return bk < 64 ? bk : 64; }
FSA_LAYOUT_FN int fsa_fwd_wg_tokens_per_tile(int g) { return g <= FSA_FWD_MAX_GROUP ? FSA_FWD_WG_ROWS / g : 0; }
FSA_LAYOUT_FN int fsa_fwd_wg_item_entries(int g)
{
    return fsa_fwd_wg_tokens_per_tile(g) * (FSA_FWD_ITEM_ROWS / FSA_FWD_WG_ROWS);
}
FSA_LAYOUT_FN int fsa_fwd_wg_q_tile_bytes(int dk, int dv) { return fsa_sw128_bytes(FSA_FWD_WG_ROWS, fsa_max_dim(dk, dv)); }
FSA_LAYOUT_FN int fsa_fwd_wg_smem_v(int dk, int bk) { return fsa_fwd_smem_k() + fsa_sw128_bytes(bk, dk); }
FSA_LAYOUT_FN int fsa_fwd_wg_smem_q(int dk, int dv, int bk) { return fsa_fwd_wg_smem_v(dk, bk) + fsa_sw128_bytes(bk, dv); }
FSA_LAYOUT_FN int fsa_fwd_wg_smem_bytes(int dk, int dv, int bk)
{
    return FSA_FWD_WG_ALIGN + fsa_fwd_wg_smem_q(dk, dv, bk) +
           FSA_FWD_WG_GROUPS * FSA_FWD_STAGES * fsa_fwd_wg_q_tile_bytes(dk, dv);
}

/* ---------------------------------------------------------------- NSA order */
/* A CTA: one query token, one KV head, up to FSA_NSA_ROWS heads of its group;
 * it streams the token's selected keys in stages, 16 keys per warp. */
#define FSA_NSA_WARPS 4
#define FSA_NSA_THREADS (32 * FSA_NSA_WARPS)
#define FSA_NSA_ROWS 16
#define FSA_NSA_STAGE_KEYS (16 * FSA_NSA_WARPS)
#define FSA_NSA_STAGES 2
/* Stages in flight of the forward and of dq under `layout`. */
FSA_LAYOUT_FN int fsa_nsa_fwd_stages(int layout) { return layout & FSA_SEL_LAYOUT_NSA_ONE_STAGE ? 1 : FSA_NSA_STAGES; }
FSA_LAYOUT_FN int fsa_nsa_dq_stages(int layout) { return layout & FSA_SEL_LAYOUT_DQ_ONE_STAGE ? 1 : FSA_NSA_STAGES; }
FSA_LAYOUT_FN int fsa_nsa_head_groups(int g) { return (g + FSA_NSA_ROWS - 1) / FSA_NSA_ROWS; } /* CTAs per (token, KV head) */
/* A stage of K (dk wide) or V (dv wide) rows. */
FSA_LAYOUT_FN int fsa_nsa_stage_bytes(int d) { return fsa_tile_bytes(FSA_NSA_STAGE_KEYS, d); }
/* Once the keys are done, the warps merge their rows in the stage buffers:
 * FSA_NSA_WARPS x 16 rows of w floats (the forward's dv, dq's dk). Two
 * stages always hold them; one stage may not (w over the other dim + 16),
 * and the dynamic shared memory then reaches to the merge area's end. */
FSA_LAYOUT_FN int fsa_nsa_merge_bytes(int w) { return FSA_NSA_WARPS * 16 * w * 4; }
FSA_LAYOUT_FN int fsa_nsa_max_bytes(int a, int b) { return a > b ? a : b; }
/* Forward: Q rows | the K stages | the V stages; `stages`: fsa_nsa_fwd_stages. */
FSA_LAYOUT_FN int fsa_nsa_fwd_smem_k(int dk) { return fsa_tile_bytes(FSA_NSA_ROWS, dk); }
FSA_LAYOUT_FN int fsa_nsa_fwd_smem_v(int dk, int stages)
{
    return fsa_nsa_fwd_smem_k(dk) + stages * fsa_nsa_stage_bytes(dk);
}
FSA_LAYOUT_FN int fsa_nsa_fwd_smem_bytes(int dk, int dv, int stages)
{
    return fsa_nsa_max_bytes(fsa_nsa_fwd_smem_v(dk, stages) + stages * fsa_nsa_stage_bytes(dv),
                             fsa_nsa_fwd_smem_k(dk) + fsa_nsa_merge_bytes(dv));
}
/* Static shared memory of the NSA-order kernels: NsaShared (sel_nsa.cuh:
 * three top-k lists and the stages' key indices) and the kernel's row values
 * (the forward's per-warp row max and sum; dq's lse, delta and gate rows).
 * The driver refuses a kernel whose dynamic and static shared memory
 * together pass the limit, so the plans count both; the kernels assert
 * these sizes. */
FSA_LAYOUT_FN int fsa_nsa_shared_bytes(int stages) { return (3 * FSA_MAX_TOP_K + stages * FSA_NSA_STAGE_KEYS) * 4; }
FSA_LAYOUT_FN int fsa_nsa_fwd_smem_static(int stages) { return fsa_nsa_shared_bytes(stages) + FSA_NSA_WARPS * 16 * 2 * 4; }
FSA_LAYOUT_FN int fsa_nsa_dq_smem_static(int stages) { return fsa_nsa_shared_bytes(stages) + 3 * FSA_NSA_ROWS * 4; }
/* Backward dq: Q rows | dO rows | the K stages | the V stages. */
FSA_LAYOUT_FN int fsa_nsa_dq_smem_do(int dk) { return fsa_tile_bytes(FSA_NSA_ROWS, dk); }
FSA_LAYOUT_FN int fsa_nsa_dq_smem_k(int dk, int dv)
{
    return fsa_nsa_dq_smem_do(dk) + fsa_tile_bytes(FSA_NSA_ROWS, dv);
}
FSA_LAYOUT_FN int fsa_nsa_dq_smem_v(int dk, int dv, int stages)
{
    return fsa_nsa_dq_smem_k(dk, dv) + stages * fsa_nsa_stage_bytes(dk);
}
FSA_LAYOUT_FN int fsa_nsa_dq_smem_bytes(int dk, int dv, int stages)
{
    return fsa_nsa_max_bytes(fsa_nsa_dq_smem_v(dk, dv, stages) + stages * fsa_nsa_stage_bytes(dv),
                             fsa_nsa_dq_smem_k(dk, dv) + fsa_nsa_merge_bytes(dk));
}

/* ---------------------------------------------------------------- FSA backward main */
/* A CTA: one work item (a run of one block's list) and one slice of `keys`
 * keys of the block, a warp per 16 keys; rounds of up to one row table of
 * FSA_BWD_TILES tiles of FSA_BWD_ROWS rows. Groups over FSA_BWD_ROWS heads
 * give a token several tiles. */
#define FSA_BWD_ROWS 32
#define FSA_BWD_TILES 32
#define FSA_BWD_STAGES 2     /* Q/dO tiles in flight */
#define FSA_BWD_MAX_KEYS 128 /* larger blocks run in slices */
#define FSA_BWD_MAX_HALVINGS 3
#define FSA_BWD_SMEM_STATIC 4 /* static shared memory: the work counter (fsa_static_smem_counted: 16) */
/* Q/dO tiles in flight under `layout`. */
FSA_LAYOUT_FN int fsa_bwd_stages(int layout) { return layout & FSA_SEL_LAYOUT_BWD_ONE_STAGE ? 1 : FSA_BWD_STAGES; }
FSA_LAYOUT_FN int fsa_bwd_threads(int keys) { return keys / 16 * 32; }
FSA_LAYOUT_FN int fsa_bwd_tokens_per_tile(int g) { return g <= FSA_BWD_ROWS ? FSA_BWD_ROWS / g : 1; }
FSA_LAYOUT_FN int fsa_bwd_tiles_per_token(int g) { return g <= FSA_BWD_ROWS ? 1 : (g + FSA_BWD_ROWS - 1) / FSA_BWD_ROWS; }
FSA_LAYOUT_FN int fsa_bwd_round_entries(int g) { return FSA_BWD_TILES / fsa_bwd_tiles_per_token(g) * fsa_bwd_tokens_per_tile(g); }
/* Entries per work item: a round halved 0..FSA_BWD_MAX_HALVINGS times. A round
 * is 32 tiles' tokens (or at least 8 tokens), so every choice is a whole
 * number of tiles' tokens and at least one entry. */
FSA_LAYOUT_FN int fsa_bwd_item_entries(int g, int halvings) { return fsa_bwd_round_entries(g) >> halvings; }
/* Entries per work item of one list of c entries, given the launch's item_entries e: e, or
 * up to max_rounds (at most FSA_BWD_MAX_ITEM_ROUNDS) times e while the list keeps at least
 * FSA_BWD_ITEMS_PER_LIST items. Long lists (the most selected blocks) then leave fewer
 * fp32 dK/dV partials to write and sum; short lists, which end the work order, keep
 * items of one round, so the kernel's tail stays short. max_rounds is the launch's
 * (fsa_bwd_layout.item_max_rounds): a launch of few items must not wait on one long item. */
#define FSA_BWD_MAX_ITEM_ROUNDS 4
#define FSA_BWD_ITEMS_PER_LIST 4
/* Every backward launch's items take this many times a round's entries where the launch still has
 * 2 waves of items (fewer fp32 dK/dV partials to write and sum; measured at T 65536: bench/NOTES.md,
 * dqcap and bitems), for groups up to FSA_BWD_ITEM_ROUNDS_MAX_GROUP and for token chunks; a launch of
 * every token at a larger group keeps one round (measured slower with 3 at T 8192, G 8 and 16, no
 * faster with 2 at T 65536, G 8: bench/NOTES.md, bitems). Host-side only (the layout's item_entries). */
#define FSA_BWD_ITEM_ROUNDS_DEFAULT 3
#define FSA_BWD_ITEM_ROUNDS_MAX_GROUP 4
/* Head chunks of every token (calls the workspace cap cuts into chunks of fewer KV heads) at those
 * groups take this many where their launch keeps 2 waves: a chunk's launch ends in its own tail, and
 * fewer, larger items shorten it (bench/NOTES.md, r4). */
#define FSA_BWD_HEAD_CHUNK_ITEM_ROUNDS 4
/* A launch's longest item takes at most 1 / FSA_BWD_ITEM_SHARE_PARTS of a CTA's share of the
 * launch's entries (item_max_rounds), so the items of the longest lists do not make its tail. */
#define FSA_BWD_ITEM_SHARE_PARTS 2
FSA_LAYOUT_FN int fsa_bwd_list_item_entries(long long c, int e, int max_rounds)
{
    const long long m = c / ((long long)FSA_BWD_ITEMS_PER_LIST * e);
    const int top = max_rounds < 1 ? 1 : max_rounds > FSA_BWD_MAX_ITEM_ROUNDS ? FSA_BWD_MAX_ITEM_ROUNDS : max_rounds;
    return e * (int)(m < 1 ? 1 : m > top ? top : m);
}
/* The backwards that accumulate dK and dV of a warp's 16 keys in registers
 * (this main kernel, the query-tile dK/dV blocks) do it in one pass while
 * the dK and dV columns together are at most FSA_BWD_ONE_PASS_COLS (160
 * fp32 accumulators per thread: NSA's Dk 192 / Dv 128); wider heads split
 * the columns into two parts, each recomputing S and dP. */
#define FSA_BWD_ONE_PASS_COLS 320
FSA_LAYOUT_FN int fsa_bwd_one_pass(int dk, int dv) { return dk + dv <= FSA_BWD_ONE_PASS_COLS; }
/* Wider heads run the main kernel twice, each on half of the dK and half of
 * the dV columns (dk and dv: the query/key and the value head dims). */
FSA_LAYOUT_FN int fsa_bwd_d_parts(int dk, int dv) { return fsa_bwd_one_pass(dk, dv) ? 1 : 2; }
FSA_LAYOUT_FN int fsa_bwd_ds_pitch(void) { return FSA_BWD_ROWS + 8; }
/* Row tables (token, pair, lse, delta of every row of a round) | K | V of the
 * slice | the Q tiles in flight | the dO tiles | dS^T (keys x rows) | the
 * round's list entries. K and Q are dk wide, V and dO dv wide; `stages`:
 * the Q/dO tiles in flight (fsa_bwd_stages). */
FSA_LAYOUT_FN int fsa_bwd_smem_k(void) { return 4 * 4 * FSA_BWD_TILES * FSA_BWD_ROWS; }
FSA_LAYOUT_FN int fsa_bwd_smem_v(int dk, int keys) { return fsa_bwd_smem_k() + fsa_tile_bytes(keys, dk); }
FSA_LAYOUT_FN int fsa_bwd_smem_q(int dk, int dv, int keys)
{
    return fsa_bwd_smem_v(dk, keys) + fsa_tile_bytes(keys, dv);
}
FSA_LAYOUT_FN int fsa_bwd_smem_do(int dk, int dv, int keys, int stages)
{
    return fsa_bwd_smem_q(dk, dv, keys) + stages * fsa_tile_bytes(FSA_BWD_ROWS, dk);
}
FSA_LAYOUT_FN int fsa_bwd_smem_ds(int dk, int dv, int keys, int stages)
{
    return fsa_bwd_smem_do(dk, dv, keys, stages) + stages * fsa_tile_bytes(FSA_BWD_ROWS, dv);
}
FSA_LAYOUT_FN int fsa_bwd_smem_entries(int dk, int dv, int keys, int stages)
{
    return fsa_bwd_smem_ds(dk, dv, keys, stages) + keys * fsa_bwd_ds_pitch() * 2;
}
FSA_LAYOUT_FN int fsa_bwd_smem_bytes(int dk, int dv, int keys, int g, int stages)
{
    return fsa_bwd_smem_entries(dk, dv, keys, stages) + fsa_bwd_round_entries(g) * 4;
}
/* The layout a selected-attention plan takes (FSA_SEL_LAYOUT_* bits) for
 * head dims dk / dv, blocks of bk keys, group g and forward order `order`
 * (FSA_SEL_ORDER_*: fsa_algorithm's values) within max_smem bytes of shared
 * memory a block. A kernel whose default fits keeps it (every kernel of an
 * AUTO plan on sm_90a). One stage goes to
 *  - the FSA-order forward of every plan but a forced NSA one, where its
 *    default does not fit and one tile does (on the 99 KB targets at blocks
 *    of 64: 112 / 112, 128 / 128, 192 / 128 and equal head dims of 176 to
 *    224; the first three ran the NSA order alone before, which reads every
 *    selected block once per token and KV head where the FSA order reads it
 *    once per block: bench/NOTES.md "sel1");
 *  - the NSA-order forward where neither default forward fits (the shapes that
 *    were refused: "no forward path fits"), or where a plan forces it;
 *  - the backward main kernel where even its 16-key slice does not fit in
 *    the default (the plan then takes the largest slice one stage holds);
 *  - the NSA-order dq of a plan that forces the NSA order (AUTO plans take
 *    it only where it fits as it is: it is a tuning candidate, never the
 *    heuristic's choice);
 * and only where one stage fits (else 0: the plan refuses the path with the
 * default's bytes, as before). `forced` (nonzero: the bits a test's override
 * asks for, FSA_SEL_LAYOUT_ONE_STAGE) joins them where the default fits.
 * Bits of kernels a plan does not run (the warpgroup forward's place on
 * sm_90a) are the plan's to drop. */
#define FSA_SEL_ORDER_AUTO 0
#define FSA_SEL_ORDER_FSA 1
#define FSA_SEL_ORDER_NSA 2
/* `bit` where the target needs it: the default does not fit, one stage does. */
FSA_LAYOUT_FN int fsa_sel_layout_need(int dflt_bytes, int small_bytes, int max_smem, int bit)
{
    return dflt_bytes > max_smem && small_bytes <= max_smem ? bit : 0;
}
/* Each mma.sync kernel's dynamic and static shared memory together, as the plans check them, in `stages`
 * stages (the FSA-order forward has no static part; the backward's main kernel at its 16-key slice). */
FSA_LAYOUT_FN int fsa_sel_nsa_total(int dk, int dv, int stages)
{
    return fsa_nsa_fwd_smem_bytes(dk, dv, stages) + fsa_static_smem_counted(fsa_nsa_fwd_smem_static(stages));
}
FSA_LAYOUT_FN int fsa_sel_bwd16_total(int dk, int dv, int g, int stages)
{
    return fsa_bwd_smem_bytes(dk, dv, 16, g, stages) + fsa_static_smem_counted(FSA_BWD_SMEM_STATIC);
}
FSA_LAYOUT_FN int fsa_sel_dq_total(int dk, int dv, int stages)
{
    return fsa_nsa_dq_smem_bytes(dk, dv, stages) + fsa_static_smem_counted(fsa_nsa_dq_smem_static(stages));
}
FSA_LAYOUT_FN int fsa_sel_layout_fit(int dk, int dv, int bk, int g, int order, int max_smem, int forced)
{
    const int fsa = fsa_fwd_smem_bytes(dk, dv, bk, FSA_FWD_STAGES), fsa1 = fsa_fwd_smem_bytes(dk, dv, bk, 1);
    const int nsa = fsa_sel_nsa_total(dk, dv, FSA_NSA_STAGES), nsa1 = fsa_sel_nsa_total(dk, dv, 1);
    const int bwd = fsa_sel_bwd16_total(dk, dv, g, FSA_BWD_STAGES), bwd1 = fsa_sel_bwd16_total(dk, dv, g, 1);
    const int dq = fsa_sel_dq_total(dk, dv, FSA_NSA_STAGES), dq1 = fsa_sel_dq_total(dk, dv, 1);
    /* No forward order fits by default (the FSA order takes groups up to FSA_FWD_MAX_GROUP whatever its bytes). */
    const int refused = (fsa > max_smem || g > FSA_FWD_MAX_GROUP) && nsa > max_smem;
    const int nsa_order = order == FSA_SEL_ORDER_NSA;
    const int need = (nsa_order ? 0 : fsa_sel_layout_need(fsa, fsa1, max_smem, FSA_SEL_LAYOUT_FWD_ONE_STAGE)) |
                     (nsa_order || (order == FSA_SEL_ORDER_AUTO && refused)
                          ? fsa_sel_layout_need(nsa, nsa1, max_smem, FSA_SEL_LAYOUT_NSA_ONE_STAGE)
                          : 0) |
                     fsa_sel_layout_need(bwd, bwd1, max_smem, FSA_SEL_LAYOUT_BWD_ONE_STAGE) |
                     (nsa_order ? fsa_sel_layout_need(dq, dq1, max_smem, FSA_SEL_LAYOUT_DQ_ONE_STAGE) : 0);
    const int fits = (fsa <= max_smem ? FSA_SEL_LAYOUT_FWD_ONE_STAGE : 0) | (nsa <= max_smem ? FSA_SEL_LAYOUT_NSA_ONE_STAGE : 0) |
                     (bwd <= max_smem ? FSA_SEL_LAYOUT_BWD_ONE_STAGE : 0) | (dq <= max_smem ? FSA_SEL_LAYOUT_DQ_ONE_STAGE : 0);
    return need | (forced & fits);
}

/* The warpgroup main kernel (sm_90a, sel_bwd_main_wg.cu): the block's 64
 * keys are the rows of a warpgroup (blocks of 64 keys, head dims multiples
 * of 64, Dk up to 192 and Dv up to 128, one pass); the item's query rows
 * stream through in tiles of FSA_BWD_WG_ROWS rows, FSA_BWD_WG_STAGES tiles in
 * flight, each tile's row table written two tiles ahead. Up to Dk 128 one
 * warpgroup holds dK and dV, two CTAs per SM. Above, dK alone takes 96
 * registers a thread, so the work is split by output (fsa_bwd_wg_split): one
 * warpgroup accumulates dK, the other dV and writes dq, both forming the
 * tile's scores and their gradient; one CTA of two warpgroups per SM. The
 * work items are the mma.sync kernel's. Layout, from a 1024-byte aligned
 * base (FSA_BWD_WG_ALIGN bytes of slack): K | V (swizzled, 64 keys) | the Q
 * stages | the dO stages | dS^T (keys x rows) | the row tables (16-byte
 * entries) | each row's Q address | its dO address. */
#define FSA_BWD_WG_ROWS 64
#define FSA_BWD_WG_STAGES 2
#define FSA_BWD_WG_KEYS 64
#define FSA_BWD_WG_ALIGN 1024
FSA_LAYOUT_FN int fsa_bwd_wg_ok(int dk, int dv, int bk)
{
    return dk % 64 == 0 && dv % 64 == 0 && dk <= 192 && dv <= 128 && bk == FSA_BWD_WG_KEYS;
}
/* Whether dK and dV go to warpgroups of their own (dK over 128 columns). */
FSA_LAYOUT_FN int fsa_bwd_wg_split(int dk, int dv)
{
    (void)dv;
    return dk > 128;
}
/* The FSA_WGMMA_SEL_BWD variable's value v as granted for the head dims (0:
 * mma.sync; 1 and 2: the warpgroup kernel, whose row-table loads run one or
 * two tiles ahead), and the choice without it. */
FSA_LAYOUT_FN int fsa_bwd_wg_pick(int v, int dk, int dv) { return fsa_bwd_wg_ok(dk, dv, FSA_BWD_WG_KEYS) ? v : 0; }
FSA_LAYOUT_FN int fsa_bwd_wg_default(int dk, int dv) { return fsa_bwd_wg_pick(2, dk, dv); }
FSA_LAYOUT_FN int fsa_bwd_wg_threads(int dk, int dv) { return fsa_bwd_wg_split(dk, dv) ? 256 : 128; }
FSA_LAYOUT_FN int fsa_bwd_wg_ctas_per_sm(int dk, int dv) { return fsa_bwd_wg_split(dk, dv) ? 1 : 2; }
FSA_LAYOUT_FN int fsa_bwd_wg_row_slots(void) { return FSA_BWD_WG_STAGES + 1; }
FSA_LAYOUT_FN int fsa_bwd_wg_smem_v(int dk) { return fsa_sw128_bytes(FSA_BWD_WG_KEYS, dk); }
FSA_LAYOUT_FN int fsa_bwd_wg_smem_q(int dk, int dv) { return fsa_bwd_wg_smem_v(dk) + fsa_sw128_bytes(FSA_BWD_WG_KEYS, dv); }
FSA_LAYOUT_FN int fsa_bwd_wg_smem_do(int dk, int dv)
{
    return fsa_bwd_wg_smem_q(dk, dv) + FSA_BWD_WG_STAGES * fsa_sw128_bytes(FSA_BWD_WG_ROWS, dk);
}
FSA_LAYOUT_FN int fsa_bwd_wg_smem_ds(int dk, int dv)
{
    return fsa_bwd_wg_smem_do(dk, dv) + FSA_BWD_WG_STAGES * fsa_sw128_bytes(FSA_BWD_WG_ROWS, dv);
}
FSA_LAYOUT_FN int fsa_bwd_wg_smem_rows(int dk, int dv)
{
    return fsa_bwd_wg_smem_ds(dk, dv) + fsa_sw128_bytes(FSA_BWD_WG_KEYS, FSA_BWD_WG_ROWS);
}
FSA_LAYOUT_FN int fsa_bwd_wg_smem_bytes(int dk, int dv)
{
    return FSA_BWD_WG_ALIGN + fsa_bwd_wg_smem_rows(dk, dv) + (16 + 8 + 8) * fsa_bwd_wg_row_slots() * FSA_BWD_WG_ROWS;
}
/* The fp32 dK/dV accumulator holds dk + dv floats per (key token, KV head):
 * dK, then dV. A partial of one work item holds BK rows of dK, then BK rows
 * of dV. */
FSA_LAYOUT_FN int fsa_bwd_dkv_row(int dk, int dv) { return dk + dv; }

/* ---------------------------------------------------------------- paged KV cache */
/* A CTA of the attention kernel: (sequence, tile of its new query tokens, KV
 * head, run of shares of the tile's selected blocks). Its rows are the tile's
 * tokens x the G heads of the KV head, in 16-row tiles; it streams
 * FSA_KVC_STAGE_KEYS keys per stage, FSA_KVC_STAGES stages in flight. The last
 * CTA of a split (sequence, KV head) merges its shares. */
#define FSA_KVC_WARPS 4
#define FSA_KVC_THREADS (32 * FSA_KVC_WARPS)
#define FSA_KVC_STAGE_KEYS 64
#define FSA_KVC_STAGES 2
/* The deep variant (tensor-map copies only): FSA_KVC_DEEP_STAGES stage buffers,
 * so a CTA of a small batch (one CTA per SM, its share of up to that many
 * stages) has all its stages in flight at once instead of two. Its bit in the
 * kernel's mode (the TMA template value, kvc_params.cuh, whose bit 0 is the
 * tensor-map copies): FSA_KVC_KERNEL_DEEP. The same math in the same order:
 * the same bits as the two-stage kernel. */
#define FSA_KVC_DEEP_STAGES 4
#define FSA_KVC_KERNEL_DEEP 4
FSA_LAYOUT_FN int fsa_kvc_mode_stages(int mode)
{
    return (mode & 1) && (mode & FSA_KVC_KERNEL_DEEP) ? FSA_KVC_DEEP_STAGES : FSA_KVC_STAGES;
}
/* The layout on targets whose shared memory per block does not hold the
 * default one (the 99 KB targets sm_86, sm_89, sm_12x: 192 / 128 from G 5
 * (G 1 and 2 at large top-k), and head dims of 256; sm_80: the widest heads above G 8, e.g. 256 / 256):
 * bits over the default, 0 keeping it.
 *  FSA_KVC_LAYOUT_ONE_STAGE: one K and one V stage buffer instead of
 *      FSA_KVC_STAGES (cp.async only: the tensor-map kernels take Dk <= 128,
 *      which fits everywhere). A stage's copies then start when every warp
 *      is done with the previous stage and are waited for in full; only the
 *      next stage's page-table reads overlap the math. It frees a K and a V
 *      stage (43008 bytes at 192 / 128, 67584 at 256 / 256): fewer copies in
 *      flight cost less than a refused shape. The products, the shares and
 *      their merge are the same, in the same order: the same bits.
 * The plan renders the value as the kernel's template parameter KVC_LAYOUT,
 * part of its name (_kl1) and key only when nonzero, so the default kernels
 * keep theirs. */
#define FSA_KVC_LAYOUT_ONE_STAGE 1
/* Stage buffers of a kernel of mode `mode` (its TMA template value) under `layout`. */
FSA_LAYOUT_FN int fsa_kvc_stages(int mode, int layout)
{
    return layout & FSA_KVC_LAYOUT_ONE_STAGE ? 1 : fsa_kvc_mode_stages(mode);
}
#define FSA_KVC_MAX_GROUP 64
/* 16-row tiles per CTA for group size g: room for 4 query tokens of the
 * group (speculative decoding), at most 64 rows. */
FSA_LAYOUT_FN int fsa_kvc_row_tiles(int g) { return g <= 4 ? 1 : g <= 8 ? 2 : 4; }
FSA_LAYOUT_FN int fsa_kvc_rows(int g) { return 16 * fsa_kvc_row_tiles(g); }
/* Query tokens per tile: the rows are tokens x the g heads of a KV head. */
FSA_LAYOUT_FN int fsa_kvc_tile_tokens(int g) { return fsa_kvc_rows(g) >= g ? fsa_kvc_rows(g) / g : 1; }
/* Top-k entries of a tile: every slot of every token. */
FSA_LAYOUT_FN int fsa_kvc_tile_entries(int g, int k) { return fsa_kvc_tile_tokens(g) * k; }
/* Tile ids (grid x): sequence b, whose new tokens start at packed row start,
 * owns ids fsa_kvc_first_tile(start, b) .. + ceil(len_b / tile_tokens) - 1.
 * The ids grow with b and never overlap, and all stay below
 * fsa_kvc_tile_grid(tq, batch): a grid of that size covers every tile of any
 * batch without a host sync. */
FSA_LAYOUT_FN long long fsa_kvc_first_tile(long long start, int b, int tile_tokens) { return start / tile_tokens + b; }
FSA_LAYOUT_FN long long fsa_kvc_tile_grid(long long tq, int batch, int tile_tokens) { return tq / tile_tokens + batch; }
/* The split rule (batch invariance): a sequence whose new tokens fit one tile
 * splits its selected blocks over `splits` CTAs per KV head; a longer one never
 * splits. It reads only the sequence's own query length and plan constants. */
FSA_LAYOUT_FN int fsa_kvc_seq_splits(int q_len, int tile_tokens, int splits)
{
    return q_len > 0 && q_len <= tile_tokens ? splits : 1;
}
/* Query/key head dims up to 128 keep the query fragments in registers: the
 * query rows land in the last K stage buffer and need no shared memory of
 * their own (3 CTAs per SM instead of 2 on sm_90 at D 128). */
FSA_LAYOUT_FN int fsa_kvc_q_in_registers(int dk) { return dk <= 128; }
/* Where a tile's rows go in the mma. A tile of one 16-row tile (g <= 4) with
 * the query fragments in registers puts the keys on the 16-row side (S^T = K
 * Q^T, O^T = V^T P^T) and the rows on the 8-wide side: a warp with at most 8
 * live rows (decode) computes one n8 tile, half the mma of a 16-row tile and
 * none of its padding rows past 8; larger groups keep the rows on the 16-row
 * side. */
FSA_LAYOUT_FN int fsa_kvc_keys_major(int g, int dk) { return fsa_kvc_row_tiles(g) <= 1 && fsa_kvc_q_in_registers(dk); }
/* Tensor-map copies (sm_90a, `tma` below): a stage is whole boxes of one page
 * (64 columns x 64 keys of one head each), so block and page sizes are
 * multiples of the stage and the head dims of 64 columns; the query fragments
 * stay in registers. The K and V stages are then 128-byte swizzled tiles
 * (fsa_sw128_bytes, no padding) from a 1024-byte aligned base. */
FSA_LAYOUT_FN int fsa_kvc_tma_fits(int dk, int dv, int bk, int page)
{
    return dk % 64 == 0 && dv % 64 == 0 && fsa_kvc_q_in_registers(dk) && bk % FSA_KVC_STAGE_KEYS == 0 &&
           page % FSA_KVC_STAGE_KEYS == 0;
}
/* A stage of K (dk wide) or V (dv wide) rows. */
FSA_LAYOUT_FN int fsa_kvc_stage_bytes(int d, int tma)
{
    return tma ? fsa_sw128_bytes(FSA_KVC_STAGE_KEYS, d) : fsa_tile_bytes(FSA_KVC_STAGE_KEYS, d);
}
/* Row pitch (floats) of the warps' merge area (after the key stream, 16 rows
 * of dv floats per warp, in the stage buffers): dv + 8 spreads the row-major
 * fragment stores over all 32 banks, dv + 4 the key-major ones. */
FSA_LAYOUT_FN int fsa_kvc_merge_pitch(int dk, int dv, int g) { return dv + (fsa_kvc_keys_major(g, dk) ? 4 : 8); }
FSA_LAYOUT_FN int fsa_kvc_merge_bytes(int dk, int dv, int g)
{
    return FSA_KVC_WARPS * 16 * fsa_kvc_merge_pitch(dk, dv, g) * 4;
}
/* Stage buffers. cp.async: the K stages, then the V stages. Tensor maps: a
 * buffer holds a stage's K and V side by side, and the buffers sit between two
 * margins sized so that the merge area fits against either end buffer alone
 * (a share's epilogue merges next to its last stage while the CTA's next share's
 * first stage lands in the other buffer). Strides between buffers: */
FSA_LAYOUT_FN int fsa_kvc_k_stride(int dk, int dv, int tma)
{
    return tma ? fsa_kvc_stage_bytes(dk, 1) + fsa_kvc_stage_bytes(dv, 1) : fsa_kvc_stage_bytes(dk, 0);
}
FSA_LAYOUT_FN int fsa_kvc_v_stride(int dk, int dv, int tma)
{
    return tma ? fsa_kvc_k_stride(dk, dv, 1) : fsa_kvc_stage_bytes(dv, 0);
}
FSA_LAYOUT_FN int fsa_kvc_margin(int dk, int dv, int g, int tma)
{
    const int over = fsa_kvc_merge_bytes(dk, dv, g) - fsa_kvc_k_stride(dk, dv, 1);
    return tma && over > 0 ? (over + 1023) / 1024 * 1024 : 0;
}
/* Dynamic shared memory: [the query rows | a margin] | the K and V stages
 * [| a margin], from a base aligned up to 1024 bytes with tensor maps (1024
 * bytes more). `layout`: FSA_KVC_LAYOUT_* bits (cp.async only). */
FSA_LAYOUT_FN int fsa_kvc_smem_k(int dk, int dv, int g, int tma)
{
    return fsa_kvc_q_in_registers(dk) ? fsa_kvc_margin(dk, dv, g, tma) : fsa_tile_bytes(fsa_kvc_rows(g), dk);
}
FSA_LAYOUT_FN int fsa_kvc_smem_v(int dk, int dv, int g, int tma, int layout)
{
    return fsa_kvc_smem_k(dk, dv, g, tma) + (tma ? 1 : fsa_kvc_stages(0, layout)) * fsa_kvc_stage_bytes(dk, tma);
}
FSA_LAYOUT_FN int fsa_kvc_stages_end(int dk, int dv, int g, int tma, int layout)
{
    return tma ? fsa_kvc_smem_k(dk, dv, g, 1) + fsa_kvc_mode_stages(tma) * fsa_kvc_k_stride(dk, dv, 1) +
                     fsa_kvc_margin(dk, dv, g, 1)
               : fsa_kvc_smem_v(dk, dv, g, 0, layout) + fsa_kvc_stages(0, layout) * fsa_kvc_stage_bytes(dv, 0);
}
/* Where the merge area starts: after the query rows (cp.async), or with
 * tensor maps at the base (against buffer 0) or against the last buffer. */
FSA_LAYOUT_FN int fsa_kvc_merge_at(int dk, int dv, int g, int tma, int last_buffer)
{
    return tma && last_buffer ? fsa_kvc_stages_end(dk, dv, g, 1, 0) - fsa_kvc_margin(dk, dv, g, 1) -
                                    fsa_kvc_k_stride(dk, dv, 1)
                              : fsa_kvc_smem_k(dk, dv, g, 0);
}
/* When a split sequence's CTAs form a cluster (at most FSA_KVC_MAX_CLUSTER,
 * one share each), the merge area is the first one and after it the CTA's
 * share: its partial rows (dv floats each) then their lse, for the cluster
 * to merge from shared memory. fsa_kvc_cluster_fits: that fits in the
 * dynamic shared memory. */
#define FSA_KVC_MAX_CLUSTER 8
FSA_LAYOUT_FN int fsa_kvc_cluster_part(int dk, int dv, int g)
{
    return fsa_kvc_smem_k(dk, dv, g, 0) + fsa_kvc_merge_bytes(dk, dv, g);
}
FSA_LAYOUT_FN int fsa_kvc_cluster_end(int dk, int dv, int g)
{
    return fsa_kvc_cluster_part(dk, dv, g) + fsa_kvc_rows(g) * (dv + 1) * 4;
}
/* Dynamic shared memory: the stages; with tensor-map copies (unpadded
 * stages) at least the cluster's share too (it only adds bytes at 64 rows,
 * whose kernels run 2 CTAs per SM either way) and 1024 bytes for the
 * alignment; with one stage (FSA_KVC_LAYOUT_ONE_STAGE) at least the merge
 * area (a V stage wider than the K stage: Dv > Dk; two stages always hold it). */
FSA_LAYOUT_FN int fsa_kvc_smem_bytes(int dk, int dv, int g, int tma, int layout)
{
    const int stages = fsa_kvc_stages_end(dk, dv, g, tma, layout), cluster = fsa_kvc_cluster_end(dk, dv, g);
    const int merge = fsa_kvc_smem_k(dk, dv, g, 0) + fsa_kvc_merge_bytes(dk, dv, g);
    return tma ? (stages > cluster ? stages : cluster) + 1024 : stages > merge ? stages : merge;
}
FSA_LAYOUT_FN int fsa_kvc_cluster_fits(int dk, int dv, int g, int tma, int layout)
{
    return fsa_kvc_cluster_end(dk, dv, g) <= fsa_kvc_smem_bytes(dk, dv, g, tma, layout) - (tma ? 1024 : 0);
}
/* Tensor-map copies: the pages of a CTA's next stages, read ahead in a ring (paged_kv.cuh). */
#define FSA_KVC_RUN_PAGES 128
/* Static shared memory (4-byte words, rounded up to 8 bytes): the key stream
 * (per stage buffer the K and V row offsets of its page lookups, four words a
 * row (one row with tensor-map copies), each row's position and token mask,
 * and an mbarrier of two words; the ring of pages with tensor-map copies, else
 * two words), the tile's selection (its
 * top-k entries, their first-occurrence bits, the union of blocks and each
 * block's token mask, the tokens' positions), each warp's row max and sum, each
 * row's merge factors (one per warp, 1 / sum, log2-sum-exp), the share loop's
 * six words, a counter. */
FSA_LAYOUT_FN int fsa_kvc_static_smem_bytes(int g, int k, int tma, int layout)
{
    const int stream = (4 * (tma ? 1 : FSA_KVC_STAGE_KEYS) + 2 * FSA_KVC_STAGE_KEYS + 2) * fsa_kvc_stages(tma, layout) +
                       (tma ? FSA_KVC_RUN_PAGES : 2);
    const int words = stream + 3 * fsa_kvc_tile_entries(g, k) +
                      (fsa_kvc_tile_entries(g, k) + 31) / 32 + fsa_kvc_tile_tokens(g) + FSA_KVC_WARPS * 16 * 2 +
                      fsa_kvc_rows(g) * (FSA_KVC_WARPS + 2) + 6 + 1;
    return (4 * words + 7) / 8 * 8;
}

/* The kernel's shared memory, dynamic and static together (what a block may hold). */
FSA_LAYOUT_FN int fsa_kvc_smem_all(int dk, int dv, int g, int k, int mode, int layout)
{
    return fsa_kvc_smem_bytes(dk, dv, g, mode, layout) + fsa_static_smem_counted(fsa_kvc_static_smem_bytes(g, k, mode, layout));
}
/* The layout a plan takes for a kernel of mode `mode` (top-k k) within
 * max_smem bytes a block: the default where it fits (every shape on sm_90a;
 * on the 99 KB targets head dims up to 128 / 128, and 192 / 128 up to G 4
 * at top-k 16), else one stage (FSA_KVC_LAYOUT_ONE_STAGE: every shape left on
 * sm_80; on the 99 KB targets every 192 / 128, 256 / 128 and 128 / 256
 * shape, and 256 / 256 up to G 8); 0 where neither fits (the plan refuses
 * the shape with the default's bytes, as before, also under an override).
 * `forced` (nonzero: bits a test's override asks for, FSA_KVC_SMALL) is
 * added to what the target needs, never taken instead of it. Tensor-map
 * kernels keep 0. */
FSA_LAYOUT_FN int fsa_kvc_layout_fit(int dk, int dv, int g, int k, int mode, int max_smem, int forced)
{
    const int one = FSA_KVC_LAYOUT_ONE_STAGE;
    if (mode & 1) return 0;
    if (fsa_kvc_smem_all(dk, dv, g, k, mode, 0) <= max_smem) return forced & one;
    return fsa_kvc_smem_all(dk, dv, g, k, mode, one) <= max_smem ? one : 0;
}

#endif
