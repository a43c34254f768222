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
    a.dq_add = fz_tensor(in);
    a.gate = fz_tensor(in);
    a.gate_grad = fz_tensor(in);
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
    a.dq_add = fz_tensor(in);
    a.gate = fz_tensor(in);
    a.gate_grad = fz_tensor(in);
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
    a.dq_add = fz_tensor(in);
    a.gate = fz_tensor(in);
    a.gate_grad = fz_tensor(in);
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

/* Near-valid calls. Arbitrary arguments seldom get past a call's first
 * checks; here each call starts from arguments that pass every one (dense
 * views of the harness's shapes, each at an address of its own, the
 * workspace the plan asks for; the call then stops at the device) and the
 * input changes up to three fields: a new value, a small step, or another
 * field's value (views that alias, a pointer into another view). That
 * reaches the later checks: written views, dq_add against dq, gates,
 * workspace sizes. An input that changes nothing must get
 * FSA_STATUS_NO_DEVICE, so a baseline that stopped passing fails the run
 * instead of quietly testing less. */

#define NV_HQ 4 /* the plans' shape: D 64, 4 query and 2 KV heads, top-k 4 */
#define NV_HKV 2
#define NV_D 64
#define NV_K 4
#define NV_AT(n) (0x7f0000000000ull + ((uint64_t)(n) << 24)) /* 16 MiB apart: no two views meet */

_Static_assert(sizeof(size_t) == sizeof(int64_t), "size fields change as 64-bit integers");

typedef enum { NV_TENSOR, NV_PTR, NV_INT64, NV_INT } nv_kind;

typedef struct nv_field {
    size_t offset;
    nv_kind kind;
} nv_field;

#define NV_FIELD(type, name, kind) {offsetof(type, name), kind}
#define NV_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static fsa_tensor nv_rows(int n, int heads, int dim) { return (fsa_tensor){NV_AT(n), (int64_t)heads * dim, dim}; }

/* A float32 [T, H] view (gates, their gradients): strides in floats. */
static fsa_tensor nv_gate(int n) { return (fsa_tensor){NV_AT(n), NV_HQ, 1}; }

static int64_t nv_step(fz_input *in)
{
    static const int64_t steps[] = {1, -1, 2, -2, 4, 8, -8, 16, 64, -64, 256, -256, 4096};
    return steps[fz_u8(in) % NV_COUNT(steps)];
}

/* The start of another field's memory, or 0 for a field that is not a pointer. */
static uint64_t nv_address_of(const char *args, const nv_field *f)
{
    uint64_t p = 0;
    if (f->kind == NV_TENSOR) memcpy(&p, args + f->offset + offsetof(fsa_tensor, ptr), sizeof p);
    else if (f->kind == NV_PTR) memcpy(&p, args + f->offset, sizeof p);
    return p;
}

/* a + b, wrapping as a caller's arithmetic might (no undefined overflow in the harness). */
static int64_t nv_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

static void nv_change_tensor(fz_input *in, fsa_tensor *t, const char *args, const nv_field *other)
{
    switch (fz_u8(in) % 8) {
    case 0: *t = fz_tensor(in); break;
    case 1: t->ptr += (uint64_t)nv_step(in); break;
    case 2: t->token_stride = nv_add(t->token_stride, nv_step(in)); break;
    case 3: t->head_stride = nv_add(t->head_stride, nv_step(in)); break;
    case 4: { /* the other order of dimensions */
        const int64_t s = t->token_stride;
        t->token_stride = t->head_stride;
        t->head_stride = s;
        break;
    }
    case 5: *(fz_u8(in) & 1 ? &t->token_stride : &t->head_stride) = 0; break;
    case 6: /* another view's memory, with its strides or these */
        if (other->kind == NV_TENSOR && (fz_u8(in) & 1)) memcpy(t, args + other->offset, sizeof *t);
        else t->ptr = nv_address_of(args, other);
        break;
    default: t->ptr = nv_address_of(args, other) + (uint64_t)nv_step(in); break;
    }
}

/* One field of `args` changed as the input says. */
static void nv_change(fz_input *in, char *args, const nv_field *fields, int n)
{
    const nv_field *f = &fields[fz_u8(in) % n], *other = &fields[fz_u8(in) % n];
    char *at = args + f->offset;
    switch (f->kind) {
    case NV_TENSOR: {
        fsa_tensor t;
        memcpy(&t, at, sizeof t);
        nv_change_tensor(in, &t, args, other);
        memcpy(at, &t, sizeof t);
        break;
    }
    case NV_PTR: {
        uint64_t p;
        memcpy(&p, at, sizeof p);
        switch (fz_u8(in) % 4) {
        case 0: p = fz_ptr(in); break;
        case 1: p += (uint64_t)nv_step(in); break;
        case 2: p = nv_address_of(args, other); break;
        default: p = 0; break;
        }
        memcpy(at, &p, sizeof p);
        break;
    }
    case NV_INT64: {
        int64_t v;
        memcpy(&v, at, sizeof v);
        v = (fz_u8(in) & 1) ? fz_i64(in) : nv_add(v, nv_step(in));
        memcpy(at, &v, sizeof v);
        break;
    }
    default: {
        int v;
        memcpy(&v, at, sizeof v);
        v = (fz_u8(in) & 1) ? fz_int(in) : (int)(unsigned)((unsigned)v + (unsigned)nv_step(in));
        memcpy(at, &v, sizeof v);
        break;
    }
    }
}

/* Up to three changes; returns how many. */
static int nv_changes(fz_input *in, void *args, const nv_field *fields, int n)
{
    const int count = fz_u8(in) % 4;
    for (int i = 0; i < count; i++) nv_change(in, (char *)args, fields, n);
    return count;
}

static void nv_check(fsa_status st, int changes, const char *what)
{
    fz_check_status(st, what);
    if (changes == 0 && st != FSA_STATUS_NO_DEVICE) {
        fprintf(stderr, "%s: the unchanged near-valid call returned %s (%s)\n", what, fsa_status_name(st),
                fsa_last_error());
        abort();
    }
}

/* st = expr, checked; FSA_STATUS_NO_DEVICE means the call passed every check. */
#define NV_CALL(st, changes, expr)               \
    do {                                         \
        fsa_error_clear();                       \
        (st) = (expr);                           \
        nv_check((st), (changes), #expr);        \
    } while (0)

/* What a call that passed every check must satisfy, whatever the checks look
 * like, tested by brute force over its rows (calls of up to NV_MAX_ROWS rows
 * a view): each row of a written view lies inside the address space and
 * apart from every other row of that view (else the kernels' writes race),
 * and dq_add is dq itself or shares no element with it. */
#define NV_MAX_ROWS 4096

typedef struct nv_view {
    const char *name;
    fsa_tensor t;
    int64_t rows, heads, row_elems, elem_bytes;
} nv_view;

typedef __int128 nv_addr; /* exact: no product of a stride wraps */

static nv_addr nv_starts[2][NV_MAX_ROWS];

static int nv_addr_order(const void *a, const void *b)
{
    const nv_addr x = *(const nv_addr *)a, y = *(const nv_addr *)b;
    return (x > y) - (x < y);
}

static nv_addr nv_row_bytes(const nv_view *v) { return (nv_addr)v->row_elems * v->elem_bytes; }

/* The view's row starts, sorted, in nv_starts[slot]; their count, or -1 when too many to test. */
static int64_t nv_rows_of(int slot, const nv_view *v, const char *what)
{
    if (v->rows < 0 || v->heads < 0 || v->rows > NV_MAX_ROWS || v->heads > NV_MAX_ROWS ||
        v->rows * v->heads > NV_MAX_ROWS)
        return -1;
    int64_t n = 0;
    for (int64_t t = 0; t < v->rows; t++)
        for (int64_t h = 0; h < v->heads; h++) {
            const nv_addr start =
                (nv_addr)v->t.ptr + ((nv_addr)t * v->t.token_stride + (nv_addr)h * v->t.head_stride) * v->elem_bytes;
            if (start < 0 || start + nv_row_bytes(v) > ((nv_addr)1 << 64)) {
                fprintf(stderr, "%s passed its checks with row (%lld, %lld) of %s outside the address space\n", what,
                        (long long)t, (long long)h, v->name);
                abort();
            }
            nv_starts[slot][n++] = start;
        }
    qsort(nv_starts[slot], (size_t)n, sizeof(nv_addr), nv_addr_order);
    return n;
}

static void nv_written_apart(const nv_view *views, int count, const char *what)
{
    for (int i = 0; i < count; i++) {
        const nv_view *v = &views[i];
        if (v->t.ptr == 0) continue; /* an optional output not asked for */
        const int64_t n = nv_rows_of(0, v, what);
        for (int64_t r = 1; r < n; r++)
            if (nv_starts[0][r] - nv_starts[0][r - 1] < nv_row_bytes(v)) {
                fprintf(stderr, "%s passed its checks with rows of the written view %s overlapping "
                                "(strides %lld, %lld)\n",
                        what, v->name, (long long)v->t.token_stride, (long long)v->t.head_stride);
                abort();
            }
    }
}

/* The same rows: the same start, and the same stride along each dimension of more than one row. */
static int nv_same_view(const nv_view *a, const nv_view *b)
{
    return a->t.ptr == b->t.ptr && (a->rows < 2 || a->t.token_stride == b->t.token_stride) &&
           (a->heads < 2 || a->t.head_stride == b->t.head_stride);
}

static void nv_dq_add_apart(const nv_view *dq_add, const nv_view *dq, const char *what)
{
    if (dq_add->t.ptr == 0 || nv_same_view(dq_add, dq)) return;
    const int64_t na = nv_rows_of(0, dq_add, what), nb = nv_rows_of(1, dq, what);
    const nv_addr bytes = nv_row_bytes(dq);
    for (int64_t i = 0, j = 0; i < na && j < nb;) { /* two sorted lists of rows of one length */
        const nv_addr a = nv_starts[0][i], b = nv_starts[1][j];
        if (a < b + bytes && b < a + bytes) {
            fprintf(stderr,
                    "%s passed its checks with dq_add (0x%llx, %lld, %lld) sharing elements with dq (0x%llx, %lld, "
                    "%lld) but not dq itself, %lld x %lld rows\n",
                    what, (unsigned long long)dq_add->t.ptr, (long long)dq_add->t.token_stride,
                    (long long)dq_add->t.head_stride, (unsigned long long)dq->t.ptr, (long long)dq->t.token_stride,
                    (long long)dq->t.head_stride, (long long)dq->rows, (long long)dq->heads);
            abort();
        }
        if (a < b) i++;
        else j++;
    }
}

static nv_view nv_view_of(const char *name, fsa_tensor t, int64_t rows, int64_t heads, int64_t row_elems,
                          int64_t elem_bytes)
{
    return (nv_view){name, t, rows, heads, row_elems, elem_bytes};
}

static void nv_need(fsa_status st, const char *what)
{
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "near-valid baseline: %s: %s\n", what, fsa_last_error());
        abort();
    }
}

/* The three backwards write dq (T rows), dk and dv (Tk rows) and the gate's gradient, and read dq_add. */
static void nv_backward_oracles(const fsa_tensor *dq, const fsa_tensor *dk, const fsa_tensor *dv,
                                const fsa_tensor *dq_add, const fsa_tensor *gate_grad, int64_t T, int64_t Tk,
                                const char *what)
{
    const nv_view written[] = {
        nv_view_of("dq", *dq, T, NV_HQ, NV_D, 2),
        nv_view_of("dk", *dk, Tk, NV_HKV, NV_D, 2),
        nv_view_of("dv", *dv, Tk, NV_HKV, NV_D, 2),
        nv_view_of("gate_grad", *gate_grad, T, NV_HQ, 1, 4),
    };
    nv_written_apart(written, NV_COUNT(written), what);
    const nv_view add = nv_view_of("dq_add", *dq_add, T, NV_HQ, NV_D, 2);
    nv_dq_add_apart(&add, &written[0], what);
}

/* The backwards' optional views: none, or dq_add as dq itself or memory of its own, a gate, its gradient. */
static void nv_optional(fz_input *in, fsa_tensor *dq_add, fsa_tensor dq, fsa_tensor *gate, fsa_tensor *gate_grad)
{
    const uint8_t sel = fz_u8(in);
    if (sel & 1) *dq_add = (sel & 2) ? dq : nv_rows(20, NV_HQ, NV_D);
    if (sel & 4) *gate = nv_gate(21);
    if (sel & 8) *gate_grad = nv_gate(22);
}

static const nv_field nv_fwd_fields[] = {
    NV_FIELD(fsa_fwd_args, total_tokens, NV_INT64), NV_FIELD(fsa_fwd_args, batch, NV_INT),
    NV_FIELD(fsa_fwd_args, max_seqlen, NV_INT),     NV_FIELD(fsa_fwd_args, q, NV_TENSOR),
    NV_FIELD(fsa_fwd_args, k, NV_TENSOR),           NV_FIELD(fsa_fwd_args, v, NV_TENSOR),
    NV_FIELD(fsa_fwd_args, o, NV_TENSOR),           NV_FIELD(fsa_fwd_args, topk, NV_TENSOR),
    NV_FIELD(fsa_fwd_args, cu_seqlens, NV_PTR),     NV_FIELD(fsa_fwd_args, lse, NV_PTR),
    NV_FIELD(fsa_fwd_args, workspace, NV_PTR),      NV_FIELD(fsa_fwd_args, workspace_bytes, NV_INT64),
};

static const nv_field nv_bwd_fields[] = {
    NV_FIELD(fsa_bwd_args, total_tokens, NV_INT64), NV_FIELD(fsa_bwd_args, batch, NV_INT),
    NV_FIELD(fsa_bwd_args, max_seqlen, NV_INT),     NV_FIELD(fsa_bwd_args, q, NV_TENSOR),
    NV_FIELD(fsa_bwd_args, k, NV_TENSOR),           NV_FIELD(fsa_bwd_args, v, NV_TENSOR),
    NV_FIELD(fsa_bwd_args, o, NV_TENSOR),           NV_FIELD(fsa_bwd_args, dout, NV_TENSOR),
    NV_FIELD(fsa_bwd_args, dq, NV_TENSOR),          NV_FIELD(fsa_bwd_args, dk, NV_TENSOR),
    NV_FIELD(fsa_bwd_args, dv, NV_TENSOR),          NV_FIELD(fsa_bwd_args, topk, NV_TENSOR),
    NV_FIELD(fsa_bwd_args, cu_seqlens, NV_PTR),     NV_FIELD(fsa_bwd_args, lse, NV_PTR),
    NV_FIELD(fsa_bwd_args, workspace, NV_PTR),      NV_FIELD(fsa_bwd_args, workspace_bytes, NV_INT64),
    NV_FIELD(fsa_bwd_args, dq_add, NV_TENSOR),      NV_FIELD(fsa_bwd_args, gate, NV_TENSOR),
    NV_FIELD(fsa_bwd_args, gate_grad, NV_TENSOR),
};

static void nv_selected(fz_input *in, int backward, int64_t T)
{
    const fsa_plan *plan = (fz_u8(in) & 1) ? g_sel_uncapped : g_sel;
    fsa_fwd_args f = FSA_FWD_ARGS_INIT;
    f.total_tokens = T, f.batch = 1, f.max_seqlen = (int)T;
    f.q = nv_rows(1, NV_HQ, NV_D), f.k = nv_rows(2, NV_HKV, NV_D), f.v = nv_rows(3, NV_HKV, NV_D);
    f.o = nv_rows(4, NV_HQ, NV_D);
    f.topk = (fsa_tensor){NV_AT(5), NV_K, T * NV_K};
    f.cu_seqlens = NV_AT(6), f.lse = NV_AT(7), f.workspace = NV_AT(8);
    if (!backward) {
        nv_need(fsa_plan_workspace_size(&f.workspace_bytes, plan, T, 1), "selected workspace");
        const int changes = nv_changes(in, &f, nv_fwd_fields, NV_COUNT(nv_fwd_fields));
        fsa_status st;
        NV_CALL(st, changes, fsa_selected_attention_fwd(plan, &f, NULL));
        if (st != FSA_STATUS_NO_DEVICE) return;
        const nv_view o = nv_view_of("o", f.o, f.total_tokens, NV_HQ, NV_D, 2);
        nv_written_apart(&o, 1, "selected forward");
        return;
    }
    fsa_bwd_args a = FSA_BWD_ARGS_INIT;
    a.total_tokens = T, a.batch = 1, a.max_seqlen = (int)T;
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.topk = f.topk;
    a.dout = nv_rows(9, NV_HQ, NV_D), a.dq = nv_rows(10, NV_HQ, NV_D);
    a.dk = nv_rows(11, NV_HKV, NV_D), a.dv = nv_rows(12, NV_HKV, NV_D);
    a.cu_seqlens = f.cu_seqlens, a.lse = f.lse, a.workspace = f.workspace;
    nv_optional(in, &a.dq_add, a.dq, &a.gate, &a.gate_grad);
    nv_need(fsa_plan_workspace_size_bwd(&a.workspace_bytes, plan, T, 1), "selected backward workspace");
    const int changes = nv_changes(in, &a, nv_bwd_fields, NV_COUNT(nv_bwd_fields));
    fsa_status st;
    NV_CALL(st, changes, fsa_selected_attention_bwd(plan, &a, NULL));
    if (st == FSA_STATUS_NO_DEVICE) nv_backward_oracles(&a.dq, &a.dk, &a.dv, &a.dq_add, &a.gate_grad, a.total_tokens,
                                                        a.total_tokens, "selected backward");
}

static const nv_field nv_kvcache_fields[] = {
    NV_FIELD(fsa_kvcache_args, num_query_tokens, NV_INT64), NV_FIELD(fsa_kvcache_args, batch, NV_INT),
    NV_FIELD(fsa_kvcache_args, q, NV_TENSOR),               NV_FIELD(fsa_kvcache_args, cu_seqlens_q, NV_PTR),
    NV_FIELD(fsa_kvcache_args, k_cache, NV_TENSOR),         NV_FIELD(fsa_kvcache_args, k_page_stride, NV_INT64),
    NV_FIELD(fsa_kvcache_args, v_cache, NV_TENSOR),         NV_FIELD(fsa_kvcache_args, v_page_stride, NV_INT64),
    NV_FIELD(fsa_kvcache_args, num_pages, NV_INT64),        NV_FIELD(fsa_kvcache_args, block_table, NV_PTR),
    NV_FIELD(fsa_kvcache_args, block_table_stride, NV_INT64), NV_FIELD(fsa_kvcache_args, max_pages_per_seq, NV_INT),
    NV_FIELD(fsa_kvcache_args, seqused_k, NV_PTR),          NV_FIELD(fsa_kvcache_args, topk, NV_TENSOR),
    NV_FIELD(fsa_kvcache_args, topk_length, NV_PTR),        NV_FIELD(fsa_kvcache_args, o, NV_TENSOR),
    NV_FIELD(fsa_kvcache_args, lse, NV_PTR),                NV_FIELD(fsa_kvcache_args, workspace, NV_PTR),
    NV_FIELD(fsa_kvcache_args, workspace_bytes, NV_INT64),
};

/* The plan's limits: 4 sequences, 16 query tokens, pages of 16 tokens. */
static void nv_kvcache(fz_input *in)
{
    fsa_kvcache_args a = FSA_KVCACHE_ARGS_INIT;
    a.num_query_tokens = 1 + fz_u8(in) % 16;
    a.batch = 1 + fz_u8(in) % 4;
    a.q = nv_rows(1, NV_HQ, NV_D), a.o = nv_rows(2, NV_HQ, NV_D);
    a.k_cache = nv_rows(3, NV_HKV, NV_D), a.v_cache = nv_rows(4, NV_HKV, NV_D);
    a.k_page_stride = a.v_page_stride = 16 * NV_HKV * NV_D;
    a.num_pages = 64;
    a.block_table = NV_AT(5), a.block_table_stride = 16, a.max_pages_per_seq = 16;
    a.seqused_k = NV_AT(6), a.cu_seqlens_q = NV_AT(7);
    a.topk = (fsa_tensor){NV_AT(8), NV_HKV * NV_K, NV_K};
    if (fz_u8(in) & 1) a.topk_length = NV_AT(9);
    a.lse = NV_AT(10), a.workspace = NV_AT(11);
    nv_need(fsa_kvcache_plan_workspace_size(&a.workspace_bytes, g_kvc), "kvcache workspace");
    const int changes = nv_changes(in, &a, nv_kvcache_fields, NV_COUNT(nv_kvcache_fields));
    fsa_status st;
    NV_CALL(st, changes, fsa_kvcache_attention(g_kvc, &a, NULL));
    if (st != FSA_STATUS_NO_DEVICE) return;
    const nv_view o = nv_view_of("o", a.o, a.num_query_tokens, NV_HQ, NV_D, 2);
    nv_written_apart(&o, 1, "KV-cache attention");
}

static const nv_field nv_cmp_fwd_fields[] = {
    NV_FIELD(fsa_compressed_fwd_args, total_tokens, NV_INT64),
    NV_FIELD(fsa_compressed_fwd_args, total_compressed, NV_INT64),
    NV_FIELD(fsa_compressed_fwd_args, batch, NV_INT),        NV_FIELD(fsa_compressed_fwd_args, q, NV_TENSOR),
    NV_FIELD(fsa_compressed_fwd_args, k, NV_TENSOR),         NV_FIELD(fsa_compressed_fwd_args, v, NV_TENSOR),
    NV_FIELD(fsa_compressed_fwd_args, o, NV_TENSOR),         NV_FIELD(fsa_compressed_fwd_args, lse, NV_PTR),
    NV_FIELD(fsa_compressed_fwd_args, cu_seqlens, NV_PTR),   NV_FIELD(fsa_compressed_fwd_args, cu_seqlens_c, NV_PTR),
    NV_FIELD(fsa_compressed_fwd_args, topk, NV_TENSOR),      NV_FIELD(fsa_compressed_fwd_args, workspace, NV_PTR),
    NV_FIELD(fsa_compressed_fwd_args, workspace_bytes, NV_INT64),
};

static const nv_field nv_cmp_bwd_fields[] = {
    NV_FIELD(fsa_compressed_bwd_args, total_tokens, NV_INT64),
    NV_FIELD(fsa_compressed_bwd_args, total_compressed, NV_INT64),
    NV_FIELD(fsa_compressed_bwd_args, batch, NV_INT),        NV_FIELD(fsa_compressed_bwd_args, q, NV_TENSOR),
    NV_FIELD(fsa_compressed_bwd_args, k, NV_TENSOR),         NV_FIELD(fsa_compressed_bwd_args, v, NV_TENSOR),
    NV_FIELD(fsa_compressed_bwd_args, o, NV_TENSOR),         NV_FIELD(fsa_compressed_bwd_args, dout, NV_TENSOR),
    NV_FIELD(fsa_compressed_bwd_args, dq, NV_TENSOR),        NV_FIELD(fsa_compressed_bwd_args, dk, NV_TENSOR),
    NV_FIELD(fsa_compressed_bwd_args, dv, NV_TENSOR),        NV_FIELD(fsa_compressed_bwd_args, lse, NV_PTR),
    NV_FIELD(fsa_compressed_bwd_args, cu_seqlens, NV_PTR),   NV_FIELD(fsa_compressed_bwd_args, cu_seqlens_c, NV_PTR),
    NV_FIELD(fsa_compressed_bwd_args, workspace, NV_PTR),    NV_FIELD(fsa_compressed_bwd_args, workspace_bytes, NV_INT64),
    NV_FIELD(fsa_compressed_bwd_args, dq_add, NV_TENSOR),    NV_FIELD(fsa_compressed_bwd_args, gate, NV_TENSOR),
    NV_FIELD(fsa_compressed_bwd_args, gate_grad, NV_TENSOR),
};

/* Compressed tokens of kernel 32, stride 16 over T tokens: (T - 32) / 16 + 1, 0 below 32. */
static void nv_compressed(fz_input *in, int backward, int64_t T)
{
    const int64_t Tc = T < 32 ? 0 : (T - 32) / 16 + 1;
    if (!backward) {
        fsa_compressed_fwd_args a = FSA_COMPRESSED_FWD_ARGS_INIT;
        a.total_tokens = T, a.total_compressed = Tc, a.batch = 1;
        a.q = nv_rows(1, NV_HQ, NV_D), a.k = nv_rows(2, NV_HKV, NV_D), a.v = nv_rows(3, NV_HKV, NV_D);
        a.o = nv_rows(4, NV_HQ, NV_D);
        a.lse = NV_AT(5), a.cu_seqlens = NV_AT(6), a.cu_seqlens_c = NV_AT(7);
        a.topk = (fsa_tensor){NV_AT(8), NV_K, T * NV_K};
        a.workspace = NV_AT(9);
        nv_need(fsa_compressed_plan_workspace_size(&a.workspace_bytes, g_cmp, T, 1), "compressed workspace");
        const int changes = nv_changes(in, &a, nv_cmp_fwd_fields, NV_COUNT(nv_cmp_fwd_fields));
        fsa_status st;
        NV_CALL(st, changes, fsa_compressed_attention_fwd(g_cmp, &a, NULL));
        if (st != FSA_STATUS_NO_DEVICE) return;
        const nv_view written[] = {
            nv_view_of("o", a.o, a.total_tokens, NV_HQ, NV_D, 2),
            nv_view_of("topk", a.topk, a.total_tokens, NV_HKV, NV_K, 4),
        };
        nv_written_apart(written, NV_COUNT(written), "compressed forward");
        return;
    }
    fsa_compressed_bwd_args a = FSA_COMPRESSED_BWD_ARGS_INIT;
    a.total_tokens = T, a.total_compressed = Tc, a.batch = 1;
    a.q = nv_rows(1, NV_HQ, NV_D), a.k = nv_rows(2, NV_HKV, NV_D), a.v = nv_rows(3, NV_HKV, NV_D);
    a.o = nv_rows(4, NV_HQ, NV_D), a.dout = nv_rows(5, NV_HQ, NV_D), a.dq = nv_rows(6, NV_HQ, NV_D);
    a.dk = nv_rows(7, NV_HKV, NV_D), a.dv = nv_rows(8, NV_HKV, NV_D);
    a.lse = NV_AT(9), a.cu_seqlens = NV_AT(10), a.cu_seqlens_c = NV_AT(11), a.workspace = NV_AT(12);
    nv_optional(in, &a.dq_add, a.dq, &a.gate, &a.gate_grad);
    nv_need(fsa_compressed_plan_workspace_size_bwd(&a.workspace_bytes, g_cmp, T, 1), "compressed backward workspace");
    const int changes = nv_changes(in, &a, nv_cmp_bwd_fields, NV_COUNT(nv_cmp_bwd_fields));
    fsa_status st;
    NV_CALL(st, changes, fsa_compressed_attention_bwd(g_cmp, &a, NULL));
    if (st == FSA_STATUS_NO_DEVICE) nv_backward_oracles(&a.dq, &a.dk, &a.dv, &a.dq_add, &a.gate_grad, a.total_tokens,
                                                        a.total_compressed, "compressed backward");
}

static const nv_field nv_win_fwd_fields[] = {
    NV_FIELD(fsa_window_fwd_args, total_tokens, NV_INT64), NV_FIELD(fsa_window_fwd_args, batch, NV_INT),
    NV_FIELD(fsa_window_fwd_args, q, NV_TENSOR),           NV_FIELD(fsa_window_fwd_args, k, NV_TENSOR),
    NV_FIELD(fsa_window_fwd_args, v, NV_TENSOR),           NV_FIELD(fsa_window_fwd_args, o, NV_TENSOR),
    NV_FIELD(fsa_window_fwd_args, cu_seqlens, NV_PTR),     NV_FIELD(fsa_window_fwd_args, lse, NV_PTR),
};

static const nv_field nv_win_bwd_fields[] = {
    NV_FIELD(fsa_window_bwd_args, total_tokens, NV_INT64), NV_FIELD(fsa_window_bwd_args, batch, NV_INT),
    NV_FIELD(fsa_window_bwd_args, q, NV_TENSOR),           NV_FIELD(fsa_window_bwd_args, k, NV_TENSOR),
    NV_FIELD(fsa_window_bwd_args, v, NV_TENSOR),           NV_FIELD(fsa_window_bwd_args, o, NV_TENSOR),
    NV_FIELD(fsa_window_bwd_args, dout, NV_TENSOR),        NV_FIELD(fsa_window_bwd_args, dq, NV_TENSOR),
    NV_FIELD(fsa_window_bwd_args, dk, NV_TENSOR),          NV_FIELD(fsa_window_bwd_args, dv, NV_TENSOR),
    NV_FIELD(fsa_window_bwd_args, lse, NV_PTR),            NV_FIELD(fsa_window_bwd_args, cu_seqlens, NV_PTR),
    NV_FIELD(fsa_window_bwd_args, workspace, NV_PTR),      NV_FIELD(fsa_window_bwd_args, workspace_bytes, NV_INT64),
    NV_FIELD(fsa_window_bwd_args, dq_add, NV_TENSOR),      NV_FIELD(fsa_window_bwd_args, gate, NV_TENSOR),
    NV_FIELD(fsa_window_bwd_args, gate_grad, NV_TENSOR),
};

static void nv_window(fz_input *in, int backward, int64_t T)
{
    if (!backward) {
        fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
        a.total_tokens = T, a.batch = 1, a.cu_seqlens = NV_AT(1);
        a.q = nv_rows(2, NV_HQ, NV_D), a.k = nv_rows(3, NV_HKV, NV_D), a.v = nv_rows(4, NV_HKV, NV_D);
        a.o = nv_rows(5, NV_HQ, NV_D);
        if (fz_u8(in) & 1) a.lse = NV_AT(6);
        const int changes = nv_changes(in, &a, nv_win_fwd_fields, NV_COUNT(nv_win_fwd_fields));
        fsa_status st;
        NV_CALL(st, changes, fsa_window_attention_fwd(g_win, &a, NULL));
        if (st != FSA_STATUS_NO_DEVICE) return;
        const nv_view o = nv_view_of("o", a.o, a.total_tokens, NV_HQ, NV_D, 2);
        nv_written_apart(&o, 1, "window forward");
        return;
    }
    fsa_window_bwd_args a = FSA_WINDOW_BWD_ARGS_INIT;
    a.total_tokens = T, a.batch = 1, a.cu_seqlens = NV_AT(1), a.lse = NV_AT(6);
    a.q = nv_rows(2, NV_HQ, NV_D), a.k = nv_rows(3, NV_HKV, NV_D), a.v = nv_rows(4, NV_HKV, NV_D);
    a.o = nv_rows(5, NV_HQ, NV_D), a.dout = nv_rows(7, NV_HQ, NV_D), a.dq = nv_rows(8, NV_HQ, NV_D);
    a.dk = nv_rows(9, NV_HKV, NV_D), a.dv = nv_rows(10, NV_HKV, NV_D);
    a.workspace = NV_AT(11);
    nv_optional(in, &a.dq_add, a.dq, &a.gate, &a.gate_grad);
    nv_need(fsa_window_plan_workspace_size_bwd(&a.workspace_bytes, g_win, T, 1), "window backward workspace");
    const int changes = nv_changes(in, &a, nv_win_bwd_fields, NV_COUNT(nv_win_bwd_fields));
    fsa_status st;
    NV_CALL(st, changes, fsa_window_attention_bwd(g_win, &a, NULL));
    if (st == FSA_STATUS_NO_DEVICE) nv_backward_oracles(&a.dq, &a.dk, &a.dv, &a.dq_add, &a.gate_grad, a.total_tokens,
                                                        a.total_tokens, "window backward");
}

static const nv_field nv_gate_fields[] = {
    NV_FIELD(fsa_gate_args, total_tokens, NV_INT64),     NV_FIELD(fsa_gate_args, num_heads, NV_INT),
    NV_FIELD(fsa_gate_args, out[0], NV_TENSOR),          NV_FIELD(fsa_gate_args, out[1], NV_TENSOR),
    NV_FIELD(fsa_gate_args, out[2], NV_TENSOR),          NV_FIELD(fsa_gate_args, gate[0], NV_TENSOR),
    NV_FIELD(fsa_gate_args, gate[1], NV_TENSOR),         NV_FIELD(fsa_gate_args, gate[2], NV_TENSOR),
    NV_FIELD(fsa_gate_args, o, NV_TENSOR),               NV_FIELD(fsa_gate_args, dout, NV_TENSOR),
    NV_FIELD(fsa_gate_args, dout_branch[0], NV_TENSOR),  NV_FIELD(fsa_gate_args, dout_branch[1], NV_TENSOR),
    NV_FIELD(fsa_gate_args, dout_branch[2], NV_TENSOR),  NV_FIELD(fsa_gate_args, dgate, NV_PTR),
};

static void nv_gate_call(fz_input *in, int backward, int64_t T)
{
    fsa_gate_args a = FSA_GATE_ARGS_INIT;
    a.total_tokens = T, a.num_heads = NV_HQ;
    for (int x = 0; x < 3; x++) {
        a.out[x] = nv_rows(1 + x, NV_HQ, NV_D);
        a.gate[x] = nv_gate(4 + x);
        a.dout_branch[x] = nv_rows(7 + x, NV_HQ, NV_D);
    }
    a.o = nv_rows(10, NV_HQ, NV_D), a.dout = nv_rows(11, NV_HQ, NV_D), a.dgate = NV_AT(12);
    const int changes = nv_changes(in, &a, nv_gate_fields, NV_COUNT(nv_gate_fields));
    fsa_status st;
    if (backward)
        NV_CALL(st, changes, fsa_gate_bwd(g_gate, &a, NULL));
    else
        NV_CALL(st, changes, fsa_gate_fwd(g_gate, &a, NULL));
    if (st != FSA_STATUS_NO_DEVICE) return;
    const int64_t T2 = a.total_tokens, H = a.num_heads;
    const nv_view fwd_written = nv_view_of("o", a.o, T2, H, NV_D, 2);
    const nv_view bwd_written[] = {
        nv_view_of("dout_branch[0]", a.dout_branch[0], T2, H, NV_D, 2),
        nv_view_of("dout_branch[1]", a.dout_branch[1], T2, H, NV_D, 2),
        nv_view_of("dout_branch[2]", a.dout_branch[2], T2, H, NV_D, 2),
    };
    if (backward)
        nv_written_apart(bwd_written, NV_COUNT(bwd_written), "gate backward");
    else
        nv_written_apart(&fwd_written, 1, "gate forward");
}

static void near_valid(fz_input *in)
{
    const int op = fz_u8(in) % 9;
    const int64_t T = 1 + fz_u8(in) % 200;
    switch (op) {
    case 0: nv_selected(in, 0, T); break;
    case 1: nv_selected(in, 1, T); break;
    case 2: nv_kvcache(in); break;
    case 3: nv_compressed(in, 0, T); break;
    case 4: nv_compressed(in, 1, T); break;
    case 5: nv_window(in, 0, T); break;
    case 6: nv_window(in, 1, T); break;
    case 7: nv_gate_call(in, 0, T); break;
    default: nv_gate_call(in, 1, T); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size};
    switch (fz_u8(&in) % 16) {
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
    case 11: kvcache(&in); break; /* the call with the most fields gets a second share */
    default: near_valid(&in); break; /* a quarter of the inputs: the checks behind the first ones */
    }
    return 0;
}
