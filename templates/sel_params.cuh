/* Parameters of the selected-attention kernels, passed by value as the one
 * kernel argument. Plain C read by both the host library and NVRTC, so the
 * two always agree on the layout. Every field is 8 bytes: no padding. */
#ifndef FSA_SEL_PARAMS_CUH
#define FSA_SEL_PARAMS_CUH

#include "fsa_layout.cuh"

/* Work counters of one chunk (work_next): a main launch each, two for the backward's wide heads
 * (d_part 0 and 1). The host places FSA_WORK_COUNTERS ints per chunk right after the index's counts
 * and zeroes them with the counts before each inversion. */
#define FSA_WORK_COUNTERS 2

typedef struct fsa_sel_params {
    /* Tensors [tokens, heads, dim] (q, k, dq, dk: the query/key head dim D;
     * v, o, dout, dv: the value head dim Dv); topk is int32 [KV heads,
     * tokens, K] viewed as (token, head) rows of K slots. */
    fsa_kernel_view q, k, v, o;
    fsa_kernel_view topk;
    long long cu_seqlens;
    long long lse;          /* float [Hq, T] or 0 */
    /* Problem. */
    long long total_tokens; /* T */
    long long batch;
    long long num_kv_heads;
    long long num_q_heads;
    long long top_k;
    double scale_log2;      /* softmax scale * FSA_LOG2E */
    /* Token chunk [t0, t0 + tc) of this launch sequence. */
    long long t0, tc;
    /* Index inversion and partials (FSA path). */
    long long nb_total;     /* block ids per KV head: T / BK + batch + 1 */
    long long item_entries; /* list entries per main-kernel work item */
    long long counts;       /* int [Hkv * nb_total + 1]: counts, then cursors; last = ticket */
    long long offsets;      /* int [Hkv * nb_total + 1]: exclusive scan of counts */
    long long work_offsets; /* int [Hkv * nb_total + 1]: exclusive scan of work items */
    long long work_seg;     /* int [work items]: the (head, block) segment of each work item */
    long long mask;         /* u64 [Hkv, tc]: valid slots of each row */
    long long list;         /* int [pairs]: fsa_entry_pack(token - t0, slot), grouped by (h, block) */
    long long lse_part;     /* float [Hkv, tc, K, G]: log2-sum-exp of each partial */
    long long o_part;       /* dtype [Hkv, tc, K, G, Dv]: normalized partial outputs */
    /* Backward. */
    fsa_kernel_view dout, dq, dk, dv;
    fsa_kernel_view dq_add; /* [T, Hq, D] added to dq before its rounding; ptr 0: none */
    fsa_kernel_view gate;      /* float [T, Hq]: each row's gate (dout is that of gate * o); ptr 0: none */
    fsa_kernel_view gate_grad; /* float [T, Hq], written: rowsum(dout * o); ptr 0: not wanted */
    long long part_offsets; /* int [Hkv * nb_total + 1]: partial dK/dV slots, segments with several items */
    long long list_sorted;  /* int [pairs]: each (h, block) list in token order */
    long long delta;        /* float [Hq, tc]: rowsum(dout * o); rows delta_stride apart when set */
    long long dq_part;      /* dtype [Hkv, tc, K, slices, G, D]: dq contribution of each pair and key slice */
    long long dkv_part;     /* float [parts, BK * (D + Dv)]: BK rows of dK, then BK of dV, of one work item */
    long long dkv_acc;      /* float [T, Hkv, D + Dv]: dK then dV over all token chunks */
    long long d_part;       /* wide heads: which half of the dK and dV columns this launch accumulates */
    long long key_slices;   /* CTAs per backward work item: slices of the key block */
    long long work_next;    /* int [FSA_WORK_COUNTERS]: next work item, one counter per main launch of a
                               chunk (the backward's two, the forward's dynamic schedule the first) */
    /* Index of several head chunks at once (the count and scatter of every KV head, then each chunk's
     * launches on its part): work_offsets (and part_offsets) restart at 0 for every chunk of
     * index_heads KV heads, as index_heads * nb_total + 1 entries per chunk, and work_seg holds
     * work_seg_stride entries per chunk with the chunk's own segment numbers. 0: one chunk. */
    long long index_heads;
    long long work_seg_stride;
    /* Backward token chunks of one inversion (0 or 1: none): the count and scatter see
     * num_kv_heads * index_tchunks virtual heads of tc rows, virtual head v holding tokens
     * (v % index_tchunks) * tc .. of KV head v / index_tchunks (rows past T have no pairs), so
     * that every token chunk's lists come from one inversion; each chunk is then a head chunk of
     * that index (index_heads 1). */
    long long index_tchunks;
    /* Floats between delta's query-head rows (0: tc). Token chunks of one inversion read the
     * delta of every token, computed once ([Hq, T]), from their first token on. */
    long long delta_stride;
    /* Backward: the most rounds of item_entries one list's items take (fsa_bwd_list_item_entries). */
    long long item_max_rounds;
} fsa_sel_params;

#endif
