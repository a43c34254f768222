/* Calls on offline plans with arbitrary arguments: every host-side check of
 * the launch functions, the workspace sizes and the plan queries runs on
 * whatever the input decodes to. A call whose arguments pass every check
 * stops at the device (FSA_STATUS_NO_DEVICE), so no GPU is needed. Device
 * pointers are arbitrary integers: the host must never dereference them. */
#include "fuzz_input.h"

/* Small shapes, compiled once per cache directory (the first run pays the
 * NVRTC compiles; later runs find the kernels on disk). */
static fsa_context *g_ctx;
static fsa_plan *g_sel, *g_sel_uncapped;
static fsa_kvcache_plan *g_kvc;
static fsa_compressed_plan *g_cmp;
static fsa_window_plan *g_win;
static fsa_gate_plan *g_gate;

static void need(fsa_status st, const char *what)
{
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "fuzz_args setup: %s: %s\n", what, fsa_last_error());
        exit(1);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char *dir = fz_cache_dir("args");
    const char *target = getenv("FSA_FUZZ_TARGET");
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target && target[0] ? target : "sm_90a";
    o.cache_dir = dir;
    o.cache_mode = FSA_CACHE_MODE_READ_WRITE;
    o.jit = FSA_JIT_ON;
    o.log = -1;
    o.check = -1;
    o.tune = FSA_TUNE_OFF;
    need(fsa_context_create(&g_ctx, &o), "context");
    free(dir);

    fsa_selected_attention_desc sd = FSA_SELECTED_ATTENTION_DESC_INIT;
    sd.head_dim = 64;
    sd.num_q_heads = 4;
    sd.num_kv_heads = 2;
    sd.top_k = 4;
    sd.backward = 1;
    need(fsa_plan_create(&g_sel, g_ctx, &sd), "selected plan");
    sd.workspace_limit = FSA_WORKSPACE_UNLIMITED; /* same kernels, the one-chunk sizes */
    need(fsa_plan_create(&g_sel_uncapped, g_ctx, &sd), "uncapped selected plan");

    fsa_kvcache_desc kd = FSA_KVCACHE_DESC_INIT;
    kd.head_dim = 64;
    kd.num_q_heads = 4;
    kd.num_kv_heads = 2;
    kd.top_k = 4;
    kd.page_size = 16;
    kd.max_batch = 4;
    kd.max_query_tokens = 16;
    need(fsa_kvcache_plan_create(&g_kvc, g_ctx, &kd), "kvcache plan");

    fsa_compressed_attention_desc cd = FSA_COMPRESSED_ATTENTION_DESC_INIT;
    cd.head_dim = 64;
    cd.num_q_heads = 4;
    cd.num_kv_heads = 2;
    cd.top_k = 4;
    cd.backward = 1;
    need(fsa_compressed_plan_create(&g_cmp, g_ctx, &cd), "compressed plan");

    fsa_window_attention_desc wd = FSA_WINDOW_ATTENTION_DESC_INIT;
    wd.head_dim = 64;
    wd.num_q_heads = 4;
    wd.num_kv_heads = 2;
    wd.window = 64;
    wd.backward = 1;
    need(fsa_window_plan_create(&g_win, g_ctx, &wd), "window plan");

    fsa_gate_desc gd = FSA_GATE_DESC_INIT;
    gd.value_dim = 64;
    need(fsa_gate_plan_create(&g_gate, g_ctx, &gd), "gate plan");
    return 0;
}

#define FZ_PLAN(in, p) FZ_OR_NULL(in, p)

static void selected(fz_input *in, int backward)
{
    const fsa_plan *plan = FZ_PLAN(in, (fz_u8(in) & 1) ? g_sel_uncapped : g_sel);
    if (!backward) {
        fsa_fwd_args a;
        memset(&a, 0, sizeof a);
        a.total_tokens = fz_i64(in);
        a.batch = fz_int(in);
        a.max_seqlen = fz_int(in);
        a.q = fz_tensor(in);
        a.k = fz_tensor(in);
        a.v = fz_tensor(in);
        a.o = fz_tensor(in);
        a.topk = fz_tensor(in);
        a.cu_seqlens = fz_ptr(in);
        a.lse = fz_ptr(in);
        a.workspace = fz_ptr(in);
        a.workspace_bytes = (size_t)fz_i64(in);
        a.struct_size = fz_struct_size(in, sizeof a);
        FZ_CALL(fsa_selected_attention_fwd(plan, FZ_OR_NULL(in, &a), NULL));
        return;
    }
    fsa_bwd_args a;
    memset(&a, 0, sizeof a);
    a.total_tokens = fz_i64(in);
    a.batch = fz_int(in);
    a.max_seqlen = fz_int(in);
    a.q = fz_tensor(in);
    a.k = fz_tensor(in);
    a.v = fz_tensor(in);
    a.o = fz_tensor(in);
    a.dout = fz_tensor(in);
    a.dq = fz_tensor(in);
    a.dk = fz_tensor(in);
    a.dv = fz_tensor(in);
    a.topk = fz_tensor(in);
    a.cu_seqlens = fz_ptr(in);
    a.lse = fz_ptr(in);
    a.workspace = fz_ptr(in);
    a.workspace_bytes = (size_t)fz_i64(in);
    a.struct_size = fz_struct_size(in, sizeof a);
    FZ_CALL(fsa_selected_attention_bwd(plan, FZ_OR_NULL(in, &a), NULL));
}

/* The host-only queries of a selected-attention plan. */
static void selected_queries(fz_input *in)
{
    const fsa_plan *plan = FZ_PLAN(in, (fz_u8(in) & 1) ? g_sel_uncapped : g_sel);
    const int64_t tokens = fz_i64(in);
    const int batch = fz_int(in);
    size_t bytes = 0;
    fsa_algorithm alg = FSA_ALGORITHM_AUTO;
    const char *reason = NULL;
    fsa_plan_choice choice;
    memset(&choice, 0, sizeof choice);
    switch (fz_u8(in) % 5) {
    case 0: FZ_CALL(fsa_plan_workspace_size(&bytes, plan, tokens, batch)); break;
    case 1: FZ_CALL(fsa_plan_workspace_size_bwd(&bytes, plan, tokens, batch)); break;
    case 2: FZ_CALL(fsa_plan_algorithm(&alg, &reason, plan, tokens)); break;
    case 3: FZ_CALL(fsa_plan_algorithm_bwd(&alg, &reason, plan, tokens)); break;
    default:
        choice.struct_size = fz_struct_size(in, sizeof choice);
        FZ_CALL(fsa_plan_choice_get(&choice, plan, (fsa_operation)fz_int(in), tokens));
        break;
    }
}

static void kvcache(fz_input *in)
{
    const fsa_kvcache_plan *plan = FZ_PLAN(in, g_kvc);
    if (fz_u8(in) % 4 == 0) { /* the queries */
        size_t bytes = 0;
        int tile = 0, splits = 0;
        fsa_plan_choice choice;
        memset(&choice, 0, sizeof choice);
        choice.struct_size = fz_struct_size(in, sizeof choice);
        FZ_CALL(fsa_kvcache_plan_workspace_size(&bytes, plan));
        FZ_CALL(fsa_kvcache_plan_info(&tile, &splits, plan));
        FZ_CALL(fsa_kvcache_plan_choice_get(&choice, plan));
        return;
    }
    fsa_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.num_query_tokens = fz_i64(in);
    a.batch = fz_int(in);
    a.q = fz_tensor(in);
    a.cu_seqlens_q = fz_ptr(in);
    a.k_cache = fz_tensor(in);
    a.k_page_stride = fz_i64(in);
    a.v_cache = fz_tensor(in);
    a.v_page_stride = fz_i64(in);
    a.num_pages = fz_i64(in);
    a.block_table = fz_ptr(in);
    a.block_table_stride = fz_i64(in);
    a.max_pages_per_seq = fz_int(in);
    a.seqused_k = fz_ptr(in);
    a.topk = fz_tensor(in);
    a.topk_length = fz_ptr(in);
    a.o = fz_tensor(in);
    a.lse = fz_ptr(in);
    a.workspace = fz_ptr(in);
    a.workspace_bytes = (size_t)fz_i64(in);
    a.struct_size = fz_struct_size(in, sizeof a);
    FZ_CALL(fsa_kvcache_attention(plan, FZ_OR_NULL(in, &a), NULL));
}

static void compressed(fz_input *in, int backward)
{
    const fsa_compressed_plan *plan = FZ_PLAN(in, g_cmp);
    if (!backward) {
        fsa_compressed_fwd_args a;
        memset(&a, 0, sizeof a);
        a.total_tokens = fz_i64(in);
        a.total_compressed = fz_i64(in);
        a.batch = fz_int(in);
        a.q = fz_tensor(in);
        a.k = fz_tensor(in);
        a.v = fz_tensor(in);
        a.o = fz_tensor(in);
        a.lse = fz_ptr(in);
        a.cu_seqlens = fz_ptr(in);
        a.cu_seqlens_c = fz_ptr(in);
        a.topk = fz_tensor(in);
        a.workspace = fz_ptr(in);
        a.workspace_bytes = (size_t)fz_i64(in);
        a.struct_size = fz_struct_size(in, sizeof a);
        FZ_CALL(fsa_compressed_attention_fwd(plan, FZ_OR_NULL(in, &a), NULL));
        return;
    }
    fsa_compressed_bwd_args a;
    memset(&a, 0, sizeof a);
    a.total_tokens = fz_i64(in);
    a.total_compressed = fz_i64(in);
    a.batch = fz_int(in);
    a.q = fz_tensor(in);
    a.k = fz_tensor(in);
    a.v = fz_tensor(in);
    a.o = fz_tensor(in);
    a.dout = fz_tensor(in);
    a.dq = fz_tensor(in);
    a.dk = fz_tensor(in);
    a.dv = fz_tensor(in);
    a.lse = fz_ptr(in);
    a.cu_seqlens = fz_ptr(in);
    a.cu_seqlens_c = fz_ptr(in);
    a.workspace = fz_ptr(in);
    a.workspace_bytes = (size_t)fz_i64(in);
    a.struct_size = fz_struct_size(in, sizeof a);
    FZ_CALL(fsa_compressed_attention_bwd(plan, FZ_OR_NULL(in, &a), NULL));
}

static void window(fz_input *in, int backward)
{
    const fsa_window_plan *plan = FZ_PLAN(in, g_win);
    if (!backward) {
        fsa_window_fwd_args a;
        memset(&a, 0, sizeof a);
        a.total_tokens = fz_i64(in);
        a.batch = fz_int(in);
        a.q = fz_tensor(in);
        a.k = fz_tensor(in);
        a.v = fz_tensor(in);
        a.o = fz_tensor(in);
        a.cu_seqlens = fz_ptr(in);
        a.lse = fz_ptr(in);
        a.struct_size = fz_struct_size(in, sizeof a);
        FZ_CALL(fsa_window_attention_fwd(plan, FZ_OR_NULL(in, &a), NULL));
        return;
    }
    fsa_window_bwd_args a;
    memset(&a, 0, sizeof a);
    a.total_tokens = fz_i64(in);
    a.batch = fz_int(in);
    a.q = fz_tensor(in);
    a.k = fz_tensor(in);
    a.v = fz_tensor(in);
    a.o = fz_tensor(in);
    a.dout = fz_tensor(in);
    a.dq = fz_tensor(in);
    a.dk = fz_tensor(in);
    a.dv = fz_tensor(in);
    a.lse = fz_ptr(in);
    a.cu_seqlens = fz_ptr(in);
    a.workspace = fz_ptr(in);
    a.workspace_bytes = (size_t)fz_i64(in);
    a.struct_size = fz_struct_size(in, sizeof a);
    FZ_CALL(fsa_window_attention_bwd(plan, FZ_OR_NULL(in, &a), NULL));
}

static void gate(fz_input *in, int backward)
{
    const fsa_gate_plan *plan = FZ_PLAN(in, g_gate);
    fsa_gate_args a;
    memset(&a, 0, sizeof a);
    a.total_tokens = fz_i64(in);
    a.num_heads = fz_int(in);
    for (int x = 0; x < 3; x++) {
        a.out[x] = fz_tensor(in);
        a.gate[x] = fz_tensor(in);
        a.dout_branch[x] = fz_tensor(in);
    }
    a.o = fz_tensor(in);
    a.dout = fz_tensor(in);
    a.dgate = fz_ptr(in);
    a.struct_size = fz_struct_size(in, sizeof a);
    const fsa_gate_args *args = FZ_OR_NULL(in, &a);
    if (backward)
        FZ_CALL(fsa_gate_bwd(plan, args, NULL));
    else
        FZ_CALL(fsa_gate_fwd(plan, args, NULL));
}

/* The workspace queries of the other plans with arbitrary counts. */
static void workspace_queries(fz_input *in)
{
    const int64_t tokens = fz_i64(in);
    const int batch = fz_int(in);
    size_t bytes = 0;
    switch (fz_u8(in) % 3) {
    case 0: FZ_CALL(fsa_compressed_plan_workspace_size(&bytes, FZ_PLAN(in, g_cmp), tokens, batch)); break;
    case 1: FZ_CALL(fsa_compressed_plan_workspace_size_bwd(&bytes, FZ_PLAN(in, g_cmp), tokens, batch)); break;
    default: FZ_CALL(fsa_window_plan_workspace_size_bwd(&bytes, FZ_PLAN(in, g_win), tokens, batch)); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size};
    switch (fz_u8(&in) % 12) {
    case 0: selected(&in, 0); break;
    case 1: selected(&in, 1); break;
    case 2: selected_queries(&in); break;
    case 3: kvcache(&in); break;
    case 4: compressed(&in, 0); break;
    case 5: compressed(&in, 1); break;
    case 6: window(&in, 0); break;
    case 7: window(&in, 1); break;
    case 8: gate(&in, 0); break;
    case 9: gate(&in, 1); break;
    case 10: workspace_queries(&in); break;
    default: kvcache(&in); break; /* the call with the most fields gets a second share */
    }
    return 0;
}
