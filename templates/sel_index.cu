// Index inversion for the FSA path: from per-token top-k rows to per-(KV
// head, block) lists of (token, slot) pairs. No host sync and no dense
// blocks-by-tokens matrix: count with atomics, scan in the last block to
// finish, then scatter. When every lane of a warp with a pair in a slot hits
// the same block (block 0 and the own block, in sorted rows), the lanes share
// one atomic, so hot blocks do not serialize on one address; other pairs take
// an atomic each (their blocks are random picks: a warp match per slot seldom
// found lanes to share with). Blocks up to BINS past the first block of the
// (at most two) KV heads a CTA's rows belong to are counted in shared memory
// and added to global memory once per CTA: every token draws its other slots
// from the blocks before it, so the low blocks' counters (a few cache lines)
// get most of the atomics, which L2 would serialize whatever the number of
// heads.
#include "sel_common.cuh"
#include "sel_index_scan.cuh"

using namespace fsa;
constexpr int BK = {{BLOCK_SIZE}}, TOPK = {{TOP_K}};

static_assert(TOPK >= 1 && TOPK <= FSA_MAX_TOP_K, "top-k is 1..64");
constexpr int THREADS = FSA_INDEX_THREADS;
constexpr int BINS = 1024;  // shared-memory counters per KV head of a CTA's rows
// A row adds at most one pair to a block, so a bin of a CTA holds fewer than
// THREADS pairs: the scatter keeps each pair's rank in its bin in one byte.
static_assert(THREADS <= 256, "ranks in a bin fit a byte");

// One thread per (KV head, token of the chunk) row; the row lives in registers.
struct Row {
    long long seg0;  // counts index of block 0 of the token's sequence for this head
    int idx[TOPK];
    u64 mask;        // valid slots
};

__device__ __forceinline__ int first_head(const fsa_sel_params &p) {
    return (int)((long long)blockIdx.x * blockDim.x / p.tc);
}

// The token of row tl of (virtual) head h and the KV head whose top-k row it
// reads: with p.index_tchunks > 1, virtual head h is token chunk h %
// index_tchunks of KV head h / index_tchunks. May be past T (the last
// chunk's rows beyond the end: no pairs).
__device__ __forceinline__ long long row_token(const fsa_sel_params &p, int h, long long tl, int &kv_head) {
    if (p.index_tchunks <= 1) {
        kv_head = h;
        return p.t0 + tl;
    }
    kv_head = (int)(h / p.index_tchunks);
    return p.t0 + (h - (long long)kv_head * p.index_tchunks) * p.tc + tl;
}

// The row's slots and the first segment of its sequence; returns the token's
// own block. The scatter stops here: the count stored the mask (the slot rule
// below is most of a row's instructions).
__device__ __forceinline__ int load_slots(Row &row, const fsa_sel_params &p, long long r) {
    const int h = (int)(r / p.tc);
    int kv;
    const long long t = row_token(p, h, r - (long long)h * p.tc, kv);
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
    const int *src = view_row<const int>(p.topk, t, kv);
    row.seg0 = (long long)h * p.nb_total + first_block_id(sb.start, sb.seq, BK);
#pragma unroll
    for (int s = 0; s < TOPK; s++) row.idx[s] = __ldg(src + s);
    return (int)((t - sb.start) / BK);
}

// load_slots, then the row's valid slots (none past T).
__device__ __forceinline__ void load_row(Row &row, const fsa_sel_params &p, long long r) {
    row.mask = 0;
    if (p.index_tchunks > 1) {
        const int h = (int)(r / p.tc);
        int kv;
        if (row_token(p, h, r - (long long)h * p.tc, kv) >= p.total_tokens) {
            row.seg0 = 0;
#pragma unroll
            for (int s = 0; s < TOPK; s++) row.idx[s] = 0;  // no pairs; keys are still read
            return;
        }
    }
    const int own_block = load_slots(row, p, r);
#pragma unroll
    for (int s = 0; s < TOPK; s++)
        if (slot_valid(row.idx, s, own_block)) row.mask |= 1ull << s;
}

// The counters of the CTA's rows: bin_seg[i] is the global counter of the
// first shared bin of head h_first + i (the first block of the first row of
// that head in the CTA; later rows' blocks are not before it).
__device__ __forceinline__ void cta_bins(long long *bin_seg, const fsa_sel_params &p, int h_first) {
    if (threadIdx.x >= 2) return;
    const long long r0 = (long long)blockIdx.x * blockDim.x;
    const int h = h_first + (int)threadIdx.x;
    int kv;
    long long t = row_token(p, h, threadIdx.x == 0 ? r0 - (long long)h_first * p.tc : 0, kv);
    if (t >= p.total_tokens) t = p.total_tokens - 1;  // a chunk's rows past T: no pairs, any bins
    const SeqBounds sb = seq_bounds((const int *)p.cu_seqlens, (int)p.batch, p.total_tokens, t);
    bin_seg[threadIdx.x] = (long long)h * p.nb_total + first_block_id(sb.start, sb.seq, BK);
}

// A pair's counter, from its 32-bit key (seg0 - bin_seg[0] + block id: keys
// of different (head, block) differ; the global counter is bin_seg[0] + key):
// a shared bin of the first head's range, else of the second's (d1 =
// bin_seg[1] - bin_seg[0]), else -1 for the global counter. A function of the
// key alone, so lanes that share an atomic agree on the counter.
__device__ __forceinline__ int bin_of(int key, int d1) {
    if ((unsigned)key < (unsigned)BINS) return key;
    return (unsigned)(key - d1) < (unsigned)BINS ? BINS + key - d1 : -1;
}

// f(slot, key, same) for each valid pair of the row, in slot order; `same`:
// every lane with a pair in that slot when all of them have the same key
// (they share one atomic), else this lane alone.
template <class F>
__device__ __forceinline__ void for_each_pair(const Row &row, int key0, F &&f) {
    const unsigned lane_bit = 1u << (threadIdx.x & 31);
#pragma unroll
    for (int s = 0; s < TOPK; s++) {
        const bool v = (row.mask >> s) & 1;
        const unsigned active = __ballot_sync(0xffffffffu, v);
        if (active == 0) continue;
        const int key = key0 + row.idx[s];
        const int k_lead = __shfl_sync(0xffffffffu, key, __ffs(active) - 1);
        const bool uniform = __ballot_sync(0xffffffffu, v && key == k_lead) == active;
        if (v) f(s, key, uniform ? active : lane_bit);
    }
}

// Counts pairs per (KV head, block) and records each row's valid slots; the
// last block to finish scans the counts into list offsets and work-item
// offsets, and zeroes the counts so the scatter can use them as cursors.
extern "C" __global__ void __launch_bounds__(THREADS) fsa_sel_count(const fsa_sel_params p) {
    __shared__ u64 scratch[32];
    __shared__ long long bin_seg[2];
    __shared__ int is_last;
    __shared__ union {
        int bins[2 * BINS];
        struct {
            u32 cnt[SCAN_WORDS], work[SCAN_WORDS], part[SCAN_WORDS];
        } scan;
    } sm;
    int *bins = sm.bins;
    const long long rows = p.num_kv_heads * p.tc;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int h_first = first_head(p);
    const int lane = threadIdx.x & 31;
    int *counts = (int *)p.counts;
    for (int i = threadIdx.x; i < 2 * BINS; i += blockDim.x) bins[i] = 0;
    cta_bins(bin_seg, p, h_first);
    Row row;
    row.mask = 0;
    row.seg0 = 0;
    if (r < rows) {
        load_row(row, p, r);
        ((u64 *)p.mask)[r] = row.mask;
    } else {
#pragma unroll
        for (int s = 0; s < TOPK; s++) row.idx[s] = 0;  // no pairs; keys are still read
    }
    __syncthreads();  // bins zeroed, bin_seg set
    const long long seg_base = bin_seg[0];
    const int d1 = (int)(bin_seg[1] - seg_base), key0 = (int)(row.seg0 - seg_base);  // per row, not per pair
    for_each_pair(row, key0, [&](int, int key, unsigned same) {
        if (lane != __ffs(same) - 1) return;
        const int b = bin_of(key, d1);
        if (b >= 0) atomicAdd(bins + b, __popc(same));
        else atomicAdd(counts + seg_base + key, __popc(same));
    });
    __syncthreads();  // bins complete
    for (int b = threadIdx.x; b < 2 * BINS; b += blockDim.x)
        if (bins[b]) atomicAdd(counts + bin_seg[b / BINS] + b % BINS, bins[b]);  // the inverse of bin_of
    __threadfence();
    __syncthreads();
    const long long n = p.num_kv_heads * p.nb_total;
    if (threadIdx.x == 0) is_last = atomicAdd(counts + n, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();

    // List offsets run over every segment; work items and partial slots restart with each chunk of
    // heads (p.index_heads), whose launches see only their own part (index_chunk).
    const IndexChunks ic = index_chunks(p);
    u64 carry = 0;
    for (long long c0 = 0; c0 < n; c0 += ic.segs)
        scan_chunk(p, c0, ic.segs, carry, sm.scan.cnt, sm.scan.work, sm.scan.part, scratch);
    if (threadIdx.x == 0) ((int *)p.offsets)[n] = (int)(unsigned)carry;
}

// Writes each valid pair into its (KV head, block) list, and the segment of
// every work item, so the main kernel needs no search. Order inside a list is
// not fixed; with valid metadata nothing downstream depends on it (with a
// cu_seqlens that starts past 0, a forward item's keys follow its first entry).
extern "C" __global__ void __launch_bounds__(THREADS) fsa_sel_scatter(const fsa_sel_params p) {
    {
        // Each head chunk's work items name their segments as the chunk's launches see them.
        const long long n = p.num_kv_heads * p.nb_total;
        const IndexChunks ic = index_chunks(p);
        for (long long seg = (long long)blockIdx.x * blockDim.x + threadIdx.x; seg < n;
             seg += (long long)gridDim.x * blockDim.x) {
            const long long c = seg / ic.segs, li = seg - c * ic.segs;
            const int *work = (const int *)p.work_offsets + c * (ic.segs + 1);
            int *work_seg = (int *)p.work_seg + c * ic.seg_stride;
            for (int w = work[li]; w < work[li + 1]; w++) work_seg[w] = (int)li;
        }
    }
    // As in the count, pairs with a shared-memory bin are counted per CTA,
    // each taking its rank in the bin from the atomic, and the bins' ranges
    // are reserved with one global atomic per bin; then each pair is written
    // at its bin's start plus its rank, with no second atomic. Pairs without
    // a bin are placed from their global cursor at once.
    __shared__ long long bin_seg[2];
    __shared__ int bins[2 * BINS];  // counts, then each bin's reserved start
    __shared__ unsigned char rank[TOPK * THREADS];
    const long long rows = p.num_kv_heads * p.tc;
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    const int h_first = first_head(p);
    int *cursors = (int *)p.counts;
    const int *offsets = (const int *)p.offsets;
    int *list = (int *)p.list;
    for (int i = threadIdx.x; i < 2 * BINS; i += blockDim.x) bins[i] = 0;
    cta_bins(bin_seg, p, h_first);
    Row row;
    row.mask = 0;
    row.seg0 = 0;
    int tl = 0;
    if (r < rows) {
        row.mask = ((const u64 *)p.mask)[r];
        tl = (int)(r - (r / p.tc) * p.tc);
    }
    if (row.mask) load_slots(row, p, r);
    else {
#pragma unroll
        for (int s = 0; s < TOPK; s++) row.idx[s] = 0;  // no pairs; keys are still read
    }
    __syncthreads();  // bins zeroed, bin_seg set
    const long long seg_base = bin_seg[0];
    const int d1 = (int)(bin_seg[1] - seg_base), key0 = (int)(row.seg0 - seg_base);  // per row, not per pair
    const unsigned below = (1u << lane) - 1;
    for_each_pair(row, key0, [&](int s, int key, unsigned same) {
        const int b = bin_of(key, d1);
        const bool binned = b >= 0;
        int at;
        if (__popc(same) > 1) {  // the same for every lane of `same`
            const int leader = __ffs(same) - 1;
            at = 0;
            if (lane == leader)
                at = binned ? atomicAdd(bins + b, __popc(same))
                            : offsets[seg_base + key] + atomicAdd(cursors + seg_base + key, __popc(same));
            at = __shfl_sync(same, at, leader) + __popc(same & below);
        } else {
            at = binned ? atomicAdd(bins + b, 1) : offsets[seg_base + key] + atomicAdd(cursors + seg_base + key, 1);
        }
        if (binned) rank[s * THREADS + threadIdx.x] = (unsigned char)at;
        else list[at] = fsa_entry_pack(tl, s);
    });
    __syncthreads();  // bins complete
    for (int b = threadIdx.x; b < 2 * BINS; b += blockDim.x)
        if (bins[b]) {
            const long long seg = bin_seg[b / BINS] + b % BINS;
            bins[b] = offsets[seg] + atomicAdd(cursors + seg, bins[b]);
        }
    __syncthreads();  // ranges reserved
#pragma unroll
    for (int s = 0; s < TOPK; s++) {
        const int b = bin_of(key0 + row.idx[s], d1);
        if ((row.mask >> s) & 1 && b >= 0) list[bins[b] + rank[s * THREADS + threadIdx.x]] = fsa_entry_pack(tl, s);
    }
}

// Backward only: sorts each (KV head, block) list by token (entries are
// token-major, so sorting entries sorts tokens) into list_sorted,
// so the work split and the summation order do not depend on the order the
// scatter's atomics happened to take. A list is sorted in shared memory when
// short; a long one (block 0 is in every token's row) by CTAs of their own,
// one per window of SORT_WINDOW chunk tokens (blockIdx.y: fsa_sort_windows): each marks its
// window's tokens in a bitmap (tokens are unique within a list), counts the
// entries before the window, and writes its marks, compacted in order, from
// there. Every CTA reads the whole list, SORT_ILP entries per thread in
// flight, so a long list costs one pass of latency rather than one per window.
// Chunks of at most FSA_SORT_RANK_TOKENS tokens (one window) sort every list,
// short or long, by rank instead: a bitmap of the chunk's tokens, a prefix
// count of its words, and each entry written at its rank; a few passes of
// the list and no bitonic network of log^2 n synchronized steps.
constexpr int SORT_SMALL = 2048;
constexpr int SORT_WINDOW = FSA_SORT_WINDOW;
constexpr int SORT_ILP = 16;
constexpr int RANK_WORDS = FSA_SORT_RANK_TOKENS / 32;
constexpr int RANK_WORDS_PER_THREAD = RANK_WORDS / THREADS;
static_assert(RANK_WORDS % THREADS == 0, "whole words per thread");

// This thread's WORDS consecutive words of a bitmap into w, and the block's
// exclusive prefix of their set bits (a block scan: it synchronizes).
template <int WORDS>
__device__ __forceinline__ int own_words(u32 (&w)[WORDS], const u32 *bits, u64 *scratch) {
    int count = 0;
#pragma unroll
    for (int k = 0; k < WORDS; k++) {
        w[k] = bits[threadIdx.x * WORDS + k];
        count += __popc(w[k]);
    }
    u64 total;
    return (int)block_exclusive_scan((u64)count, scratch, &total);
}

__device__ __forceinline__ void sort_rank(u32 *bits, int *prefix, u64 *scratch, const int *src, int *dst, int n) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int k = 0; k < RANK_WORDS_PER_THREAD; k++) bits[tid * RANK_WORDS_PER_THREAD + k] = 0;
    __syncthreads();
    for (int i0 = tid; i0 < n; i0 += SORT_ILP * THREADS) {
        int e[SORT_ILP];
#pragma unroll
        for (int k = 0; k < SORT_ILP; k++) e[k] = i0 + k * THREADS < n ? __ldg(src + i0 + k * THREADS) : -1;
#pragma unroll
        for (int k = 0; k < SORT_ILP; k++)
            if (e[k] >= 0) atomicOr(&bits[fsa_entry_token(e[k]) >> 5], 1u << (fsa_entry_token(e[k]) & 31));
    }
    __syncthreads();  // the bitmap is complete
    u32 w[RANK_WORDS_PER_THREAD];
    int at = own_words(w, bits, scratch);
#pragma unroll
    for (int k = 0; k < RANK_WORDS_PER_THREAD; k++) {
        prefix[tid * RANK_WORDS_PER_THREAD + k] = at;
        at += __popc(w[k]);
    }
    __syncthreads();  // prefixes written
    for (int i0 = tid; i0 < n; i0 += SORT_ILP * THREADS) {
        int e[SORT_ILP];
#pragma unroll
        for (int k = 0; k < SORT_ILP; k++) e[k] = i0 + k * THREADS < n ? __ldg(src + i0 + k * THREADS) : -1;
#pragma unroll
        for (int k = 0; k < SORT_ILP; k++) {
            if (e[k] < 0) continue;
            const int x = fsa_entry_token(e[k]);
            dst[prefix[x >> 5] + __popc(bits[x >> 5] & ((1u << (x & 31)) - 1))] = e[k];
        }
    }
}

__device__ __forceinline__ void sort_small(int *keys, const int *src, int *dst, int n) {
    const int tid = threadIdx.x;
    int size = 1;
    while (size < n) size <<= 1;
    for (int i = tid; i < size; i += blockDim.x) keys[i] = i < n ? src[i] : 0x7fffffff;
    __syncthreads();
    for (int k = 2; k <= size; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < size; i += blockDim.x) {
                const int partner = i ^ j;
                if (partner > i) {
                    const int a = keys[i], b = keys[partner];
                    if ((a > b) == ((i & k) == 0)) {
                        keys[i] = b;
                        keys[partner] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int i = tid; i < n; i += blockDim.x) dst[i] = keys[i];
}

extern "C" __global__ void __launch_bounds__(THREADS) fsa_sel_sort(const fsa_sel_params p) {
    __shared__ union {
        struct {
            int keys[SORT_SMALL];
            u32 bits[SORT_WINDOW / 32];
            unsigned char slots[SORT_WINDOW];
        } win;
        struct {
            u32 bits[RANK_WORDS];
            int prefix[RANK_WORDS];
        } rank;
    } sm;
    int *keys = sm.win.keys;
    u32 *bits = sm.win.bits;
    unsigned char *slots = sm.win.slots;
    __shared__ u64 scratch[32];
    const int tid = threadIdx.x;
    const int w0 = (int)blockIdx.y * SORT_WINDOW;  // this CTA's window of chunk tokens
    const bool by_rank = p.tc <= FSA_SORT_RANK_TOKENS;  // then gridDim.y == 1
    const long long n_seg = p.num_kv_heads * p.nb_total;
    const int *offsets = (const int *)p.offsets;
    for (long long seg = blockIdx.x; seg < n_seg; seg += gridDim.x) {
        const int off = offsets[seg], n = offsets[seg + 1] - off;
        if (n == 0 || (n <= SORT_SMALL && blockIdx.y != 0)) continue;
        const int *src = (const int *)p.list + off;
        int *dst = (int *)p.list_sorted + off;
        __syncthreads();  // shared memory is free again
        if (by_rank) {
            sort_rank(sm.rank.bits, sm.rank.prefix, scratch, src, dst, n);
            continue;
        }
        if (n <= SORT_SMALL) {
            sort_small(keys, src, dst, n);
            continue;
        }
        for (int i = tid; i < SORT_WINDOW / 32; i += blockDim.x) bits[i] = 0;
        __syncthreads();
        int before = 0;  // entries of this thread before the window
        for (int i0 = tid; i0 < n; i0 += SORT_ILP * THREADS) {
            int e[SORT_ILP];
#pragma unroll
            for (int k = 0; k < SORT_ILP; k++) {
                const int i = i0 + k * THREADS;
                e[k] = i < n ? __ldg(src + i) : -1;
            }
#pragma unroll
            for (int k = 0; k < SORT_ILP; k++) {
                if (e[k] < 0) continue;
                const int x = fsa_entry_token(e[k]) - w0;
                if (x < 0) before++;
                else if (x < SORT_WINDOW) {
                    atomicOr(&bits[x >> 5], 1u << (x & 31));
                    slots[x] = (unsigned char)fsa_entry_slot(e[k]);
                }
            }
        }
        u64 total_before;
        block_exclusive_scan((u64)before, scratch, &total_before);  // syncs: the bitmap is complete
        // Each thread owns SORT_WINDOW / 32 / THREADS = 2 consecutive words.
        constexpr int WORDS = SORT_WINDOW / 32 / THREADS;
        u32 mine[WORDS];
        int at = (int)total_before + own_words(mine, bits, scratch);
#pragma unroll
        for (int k = 0; k < WORDS; k++) {
            for (u32 m = mine[k]; m; m &= m - 1) {
                const int x = (tid * WORDS + k) * 32 + __ffs(m) - 1;
                dst[at++] = fsa_entry_pack(w0 + x, slots[x]);
            }
        }
    }
}
