/* Plan creation with arbitrary descriptors, of every kind, and context
 * creation with arbitrary options. The context compiles nothing (run-time
 * compilation off, no disk cache), so a descriptor that passes every check
 * stops where the first kernel would be compiled (FSA_STATUS_JIT_DISABLED):
 * only the validation runs, quickly. */
#include "fuzz_input.h"

static fsa_context *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Options left at their default (or cut off by a short struct_size) read
     * the environment: keep those contexts off the disk and the compiler too. */
    setenv("FSA_CACHE_MODE", "off", 1);
    setenv("FSA_JIT", "off", 1);
    const char *target = getenv("FSA_FUZZ_TARGET");
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target && target[0] ? target : "sm_90a";
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.jit = FSA_JIT_OFF;
    o.log = -1;
    o.check = -1;
    o.tune = FSA_TUNE_OFF;
    if (fsa_context_create(&g_ctx, &o) != FSA_STATUS_OK) {
        fprintf(stderr, "fuzz_desc setup: %s\n", fsa_last_error());
        exit(1);
    }
    return 0;
}

static fsa_context *ctx_of(fz_input *in) { return FZ_OR_NULL(in, g_ctx); }

/* Shapes mostly near the valid ones: a dim from a table of multiples of 16
 * (and a few that are not), or any value. */
static int fz_dim(fz_input *in)
{
    static const int dims[] = {0, 16, 32, 48, 64, 96, 128, 192, 256, 272, 8, 24, -16};
    const uint8_t sel = fz_u8(in);
    return sel < 0xc0 ? dims[sel % (sizeof dims / sizeof dims[0])] : fz_int(in);
}

static float fz_scale(fz_input *in)
{
    uint32_t bits = 0;
    for (int i = 0; i < 4; i++) bits |= (uint32_t)fz_u8(in) << (8 * i);
    float f;
    memcpy(&f, &bits, sizeof f); /* NaN, infinities and negatives included */
    return f;
}

static void selected(fz_input *in)
{
    fsa_selected_attention_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = (fsa_dtype)fz_int(in);
    d.head_dim = fz_dim(in);
    d.num_q_heads = fz_int(in);
    d.num_kv_heads = fz_int(in);
    d.block_size = fz_int(in);
    d.top_k = fz_int(in);
    d.scale = fz_scale(in);
    d.algorithm = (fsa_algorithm)fz_int(in);
    d.workspace_limit = (uint64_t)fz_i64(in);
    d.backward = fz_int(in);
    d.value_dim = fz_u8(in) & 1 ? fz_i64(in) : fz_dim(in);
    d.struct_size = fz_struct_size(in, sizeof d);
    fsa_plan *plan = NULL;
    fsa_context *ctx = ctx_of(in);
    FZ_CALL(fsa_plan_create(&plan, ctx, &d));
    fsa_plan_destroy(plan);
}

static void kvcache(fz_input *in)
{
    fsa_kvcache_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = (fsa_dtype)fz_int(in);
    d.head_dim = fz_dim(in);
    d.num_q_heads = fz_int(in);
    d.num_kv_heads = fz_int(in);
    d.block_size = fz_int(in);
    d.top_k = fz_int(in);
    d.page_size = fz_int(in);
    d.max_batch = fz_int(in);
    d.max_query_tokens = fz_i64(in);
    d.scale = fz_scale(in);
    d.splits = fz_int(in);
    d.value_dim = fz_dim(in);
    d.struct_size = fz_struct_size(in, sizeof d);
    fsa_kvcache_plan *plan = NULL;
    fsa_context *ctx = ctx_of(in);
    FZ_CALL(fsa_kvcache_plan_create(&plan, ctx, &d));
    fsa_kvcache_plan_destroy(plan);
}

static void compressed(fz_input *in)
{
    fsa_compressed_attention_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = (fsa_dtype)fz_int(in);
    d.head_dim = fz_dim(in);
    d.value_dim = fz_dim(in);
    d.num_q_heads = fz_int(in);
    d.num_kv_heads = fz_int(in);
    d.kernel_size = fz_int(in);
    d.stride = fz_int(in);
    d.scale = fz_scale(in);
    d.top_k = fz_int(in);
    d.block_size = fz_int(in);
    d.init_blocks = fz_int(in);
    d.local_blocks = fz_int(in);
    d.backward = fz_int(in);
    d.struct_size = fz_struct_size(in, sizeof d);
    fsa_compressed_plan *plan = NULL;
    fsa_context *ctx = ctx_of(in);
    FZ_CALL(fsa_compressed_plan_create(&plan, ctx, &d));
    fsa_compressed_plan_destroy(plan);
}

static void window(fz_input *in)
{
    fsa_window_attention_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = (fsa_dtype)fz_int(in);
    d.head_dim = fz_dim(in);
    d.value_dim = fz_dim(in);
    d.num_q_heads = fz_int(in);
    d.num_kv_heads = fz_int(in);
    d.window = fz_int(in);
    d.scale = fz_scale(in);
    d.backward = fz_int(in);
    /* Per-head windows: an array as long as the input says, which may be
     * shorter than num_q_heads; the library may read num_q_heads entries
     * (up to its limit), so the array always has room for them. */
    int32_t windows[FSA_WINDOW_MAX_HEAD_WINDOWS + 1];
    const int given = fz_u8(in) % 4;
    for (int i = 0; i < FSA_WINDOW_MAX_HEAD_WINDOWS + 1; i++) windows[i] = given ? fz_int(in) : 1;
    d.head_windows = given == 1 ? windows : NULL;
    d.struct_size = fz_struct_size(in, sizeof d);
    fsa_window_plan *plan = NULL;
    fsa_context *ctx = ctx_of(in);
    FZ_CALL(fsa_window_plan_create(&plan, ctx, &d));
    fsa_window_plan_destroy(plan);
}

static void gate(fz_input *in)
{
    fsa_gate_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = (fsa_dtype)fz_int(in);
    d.value_dim = fz_dim(in);
    d.struct_size = fz_struct_size(in, sizeof d);
    fsa_gate_plan *plan = NULL;
    fsa_context *ctx = ctx_of(in);
    FZ_CALL(fsa_gate_plan_create(&plan, ctx, &d));
    fsa_gate_plan_destroy(plan);
}

/* Context options: any target text and modes, but never a device (that would
 * open a GPU where there is one) and never a disk cache (no directories made). */
static void context(fz_input *in)
{
    char target[24];
    const size_t n = fz_u8(in) % sizeof target;
    for (size_t i = 0; i < n; i++) target[i] = (char)fz_u8(in);
    target[n] = '\0';
    static const char *const known[] = {"sm_80", "sm_86", "sm_90", "sm_90a", "sm_100a", "sm_70", "compute_90a", ""};
    const uint8_t pick = fz_u8(in);
    fsa_context_options o;
    memset(&o, 0, sizeof o);
    o.device = fz_u8(in) & 1 ? FSA_DEVICE_NONE : -2 - (fz_u8(in) & 7);
    o.target = pick < 0x80 ? known[pick % 8] : pick < 0xf0 ? target : NULL;
    o.cache_mode = (fsa_cache_mode)fz_int(in);
    if (o.cache_mode >= FSA_CACHE_MODE_DEFAULT && o.cache_mode <= FSA_CACHE_MODE_READ_ONLY)
        o.cache_mode = FSA_CACHE_MODE_OFF;
    o.jit = (fsa_jit_mode)fz_int(in);
    o.log = -1;
    o.check = fz_i64(in);
    o.tune = (fsa_tune_mode)fz_int(in);
    o.struct_size = fz_struct_size(in, sizeof o);
    fsa_context *ctx = NULL;
    FZ_CALL(fsa_context_create(&ctx, &o));
    fsa_context_destroy(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size};
    switch (fz_u8(&in) % 6) {
    case 0: selected(&in); break;
    case 1: kvcache(&in); break;
    case 2: compressed(&in); break;
    case 3: window(&in); break;
    case 4: gate(&in); break;
    default: context(&in); break;
    }
    return 0;
}
