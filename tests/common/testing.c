#include "testing.h"

#include "base/util.h"
#include "jit/context.h"
#include "jit/elf_build_id.h"
#include "jit/target.h"

#include <ctype.h>
#include <elf.h>
#include <fcntl.h>

#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *fsa_test_mkdtemp(const char *prefix)
{
    const char *base = getenv("FSA_TEST_TMPDIR");
    if (base == NULL || *base == '\0') base = "/tmp";
    (void)mkdir(base, 0700);
    size_t n = strlen(base) + strlen(prefix) + 16;
    char *path = malloc(n);
    if (path == NULL) return NULL;
    snprintf(path, n, "%s/%s.XXXXXX", base, prefix);
    if (mkdtemp(path) == NULL) {
        free(path);
        return NULL;
    }
    return path;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    /* Make read-only test directories removable again. */
    (void)chmod(path, 0700);
    return remove(path);
}

static int chmod_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_D || flag == FTW_DNR || S_ISDIR(sb->st_mode)) (void)chmod(path, 0700);
    return 0;
}

static int make_readable(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    (void)flag;
    return chmod(path, S_ISDIR(sb->st_mode) ? 0755 : 0644);
}

int fsa_test_make_tree_readable(const char *path) { return nftw(path, make_readable, 16, FTW_PHYS); }

void fsa_test_rmtree(const char *path)
{
    if (path == NULL) return;
    (void)nftw(path, chmod_one, 16, FTW_PHYS);
    (void)nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#define RNG_STEP 0x9e3779b97f4a7c15ull /* splitmix64's increment of the state */

uint64_t fsa_rng_next(fsa_rng *r)
{
    uint64_t z = (r->state += RNG_STEP);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A whole number from an environment variable, at most max; unset or empty: fallback. */
static uint64_t env_whole_number(const char *name, uint64_t fallback, uint64_t max)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0') return fallback;
    const int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X'); /* else decimal: "010" is ten, not eight */
    const char *digits = s + (hex ? 2 : 0);
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
    if (!isxdigit((unsigned char)digits[0]) || *end != '\0' || errno == ERANGE || v > max) {
        fprintf(stderr, "%s=%s: want a whole number from 0 to %llu (decimal, or hexadecimal after 0x)\n", name, s,
                (unsigned long long)max);
        exit(1);
    }
    return v;
}

int fsa_test_env_switch(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return 0;
    const int on = fsa_env_flag(name, -1); /* the library's words */
    if (on >= 0) return on;
    fprintf(stderr, "%s=%s: expected 1, on, true, yes or 0, off, false, no\n", name, v);
    exit(1);
}

int fsa_test_quick(void) { return fsa_test_env_switch("FSA_TEST_QUICK"); }

int fsa_test_random_count(int fallback)
{
    const int dflt = fallback >= 0 ? fallback : fsa_test_quick() ? 1 : 4;
    return (int)env_whole_number("FSA_TEST_RANDOM", (uint64_t)dflt, 100000);
}

uint64_t fsa_test_random_seed(uint64_t fallback) { return env_whole_number("FSA_TEST_SEED", fallback, UINT64_MAX); }

/* fsa_rng steps its state by a constant: the base that draws case i first is i steps on. */
uint64_t fsa_test_random_rerun_seed(uint64_t base, int i) { return base + (uint64_t)i * RNG_STEP; }

uint64_t fsa_test_random_case_seed(uint64_t base, int i)
{
    fsa_rng r = {fsa_test_random_rerun_seed(base, i)};
    return fsa_rng_next(&r);
}

/* Whether `name` is one of the comma-separated names of `list`. */
static int name_in_list(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *at = strstr(list, name); at != NULL; at = strstr(at + 1, name))
        if ((at == list || at[-1] == ',') && (at[n] == ',' || at[n] == '\0')) return 1;
    return 0;
}

int fsa_test_case_listed(const char *name)
{
    const char *only = getenv("FSA_TEST_CASES");
    if (only == NULL) return -1;
    return name_in_list(only, name);
}

/* Every comma-separated name of $var must be one `known` accepts, else this
 * prints why and exits 1, as does a list naming none: a list that selects
 * nothing would let the tests pass having checked nothing. Unset: nothing. */
static void check_name_list(const char *var, const char *what, int (*known)(const char *at, size_t n, const void *u),
                            const void *u)
{
    const char *only = getenv(var);
    if (only == NULL) return;
    int named = 0;
    for (const char *at = only;; at++) {
        const size_t n = strcspn(at, ",");
        if (n > 0) {
            if (!known(at, n, u)) {
                fprintf(stderr, "%s=%s: no %s is named \"%.*s\"\n", var, only, what, (int)n, at);
                exit(1);
            }
            named++;
        }
        at += n;
        if (*at == '\0') break;
    }
    if (named == 0) {
        fprintf(stderr, "%s is set but names no %s\n", var, what);
        exit(1);
    }
}

static int is_layout(const char *at, size_t n, const void *u)
{
    (void)u;
    return n == 1 && (at[0] == '1' || at[0] == '2');
}

int fsa_test_layout_listed(const char *layout)
{
    check_name_list("FSA_TEST_LAYOUTS", "layout (1 or 2)", is_layout, NULL);
    const char *only = getenv("FSA_TEST_LAYOUTS");
    return only == NULL || name_in_list(only, layout);
}

typedef struct case_names {
    const char *(*name_of)(size_t i);
    size_t n;
} case_names;

static int is_case(const char *at, size_t n, const void *u)
{
    const case_names *c = u;
    for (size_t i = 0; i < c->n; i++)
        if (strlen(c->name_of(i)) == n && strncmp(c->name_of(i), at, n) == 0) return 1;
    return 0;
}

void fsa_test_check_case_list(const char *(*name_of)(size_t i), size_t n_cases)
{
    const case_names c = {name_of, n_cases};
    check_name_list("FSA_TEST_CASES", "case", is_case, &c);
}

double fsa_rng_uniform(fsa_rng *r) { return (double)(fsa_rng_next(r) >> 11) * 0x1.0p-53; }

double fsa_rng_normal(fsa_rng *r)
{
    double u1 = fsa_rng_uniform(r);
    double u2 = fsa_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int fsa_rng_int(fsa_rng *r, int lo, int hi)
{
    uint64_t span = (uint64_t)((int64_t)hi - lo + 1);
    return lo + (int)(fsa_rng_next(r) % span);
}

uint16_t fsa_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float fsa_bf16_to_f32(uint16_t x)
{
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t fsa_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (absu < 0x38800000u) {                                   /* subnormal or zero */
        float f;
        memcpy(&f, &absu, 4);
        /* Scale into the subnormal grid (2^-24 steps) and round to nearest even. */
        float scaled = f * 16777216.0f;
        uint32_t m = (uint32_t)nearbyintf(scaled);
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((absu >> 23) - 112u) << 10;
    uint32_t m = (absu >> 13) & 0x3ffu;
    uint32_t h = e | m;
    uint32_t rest = absu & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float fsa_f16_to_f32(uint16_t x)
{
    uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
    uint32_t e = (x >> 10) & 0x1fu;
    uint32_t m = x & 0x3ffu;
    float f;
    if (e == 0) {
        f = ldexpf((float)m, -24);
        if (sign) f = -f;
        return f;
    }
    uint32_t u;
    if (e == 31)
        u = sign | 0x7f800000u | (m << 13);
    else
        u = sign | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &u, 4);
    return f;
}

int fsa_test_gpu_required(void) { return fsa_test_env_switch("FSA_TEST_REQUIRE_GPU"); }

void fsa_test_exit_without_gpu(const char *why, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, why);
    vsnprintf(text, sizeof text, why, ap);
    va_end(ap);
    if (fsa_test_gpu_required()) {
        fprintf(stderr, "FAILED: no usable GPU, and FSA_TEST_REQUIRE_GPU=%s says there is one: %s\n",
                getenv("FSA_TEST_REQUIRE_GPU"), text);
        exit(1);
    }
    fprintf(stderr, "skipping: no usable GPU (%s)\n", text);
    exit(FSA_TEST_SKIP_CODE);
}

fsa_context *fsa_test_gpu_context_or_skip(const char *cache_dir)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.cache_dir = cache_dir;
    fsa_context *ctx = NULL;
    fsa_status st = fsa_context_create(&ctx, &o);
    if (st == FSA_STATUS_NO_DRIVER || st == FSA_STATUS_NO_DEVICE || st == FSA_STATUS_UNSUPPORTED_DEVICE)
        fsa_test_exit_without_gpu("fsa_context_create returned %s; last error: %s", fsa_status_name(st),
                                  fsa_last_error());
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, "context creation failed: %s\n", fsa_last_error());
        exit(1);
    }
    /* Keep the device's primary context current for the test's own driver calls. */
    if (fsa_context_enter(ctx) != FSA_STATUS_OK) {
        fprintf(stderr, "cannot make the context current: %s\n", fsa_last_error());
        exit(1);
    }
    return ctx;
}

fsa_context *fsa_test_check_context(const char *cache_dir)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.cache_dir = cache_dir;
    o.check = 1;
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) {
        fprintf(stderr, "check-mode context: %s\n", fsa_last_error());
        exit(1);
    }
    return ctx;
}

void fsa_test_contexts_make(fsa_test_contexts *c, const char *prefix)
{
    c->cache_dir = fsa_test_mkdtemp(prefix);
    c->plain = fsa_test_gpu_context_or_skip(c->cache_dir);
    c->check = fsa_test_check_context(c->cache_dir);
}

void fsa_test_contexts_free(fsa_test_contexts *c)
{
    fsa_context_destroy(c->check);
    fsa_context_destroy(c->plain);
    fsa_test_rmtree(c->cache_dir);
    free(c->cache_dir);
}

typedef struct named_count {
    const char *name;
    int n;
} named_count;

static int count_named(const fsa_cache_entry_info *info, void *user)
{
    named_count *c = user;
    c->n += strcmp(info->name, c->name) == 0;
    return 0;
}

int fsa_test_cache_count(fsa_context *ctx, const char *name)
{
    named_count c = {name, 0};
    if (fsa_cache_list(ctx, count_named, &c) != FSA_STATUS_OK) fail_msg("cache list: %s", fsa_last_error());
    return c.n;
}

unsigned char *fsa_test_image(uint64_t dev, size_t bytes)
{
    unsigned char *img = malloc(bytes ? bytes : 1);
    assert_non_null(img);
    fsa_test_d2h(img, dev, bytes);
    return img;
}

void fsa_test_assert_untouched(uint64_t dev, size_t bytes, uint8_t poison)
{
    unsigned char *img = fsa_test_image(dev, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (img[i] != poison) fail_msg("byte %zu of %zu was written", i, bytes);
    free(img);
}

void fsa_test_assert_padding_untouched(const uint16_t *img, size_t n_elems, int T, int H, int D, int64_t ts,
                                       int64_t hs, uint16_t poison, const char *what)
{
    unsigned char *logical = calloc(n_elems ? n_elems : 1, 1);
    assert_non_null(logical);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                const int64_t e = (int64_t)t * ts + (int64_t)h * hs + d;
                if (e >= 0 && (size_t)e < n_elems) logical[e] = 1;
            }
    size_t written = n_elems;
    for (size_t e = 0; e < n_elems && written == n_elems; e++)
        if (!logical[e] && img[e] != poison) written = e;
    free(logical);
    if (written < n_elems)
        fail_msg("%s: padding element %zu of %zu was written (0x%04x)", what, written, n_elems, img[written]);
}

void fsa_test_expect_error(const char *stage, const char *what)
{
    if (strstr(fsa_last_error(), what) == NULL) fail_msg("\"%s\" does not mention \"%s\"", fsa_last_error(), what);
    assert_string_equal(fsa_last_error_info()->stage, stage);
}

void fsa_test_plan_choice_sizes(fsa_status (*get)(fsa_plan_choice *out, const void *query), const void *query)
{
    const size_t appended[] = {offsetof(fsa_plan_choice, splits), offsetof(fsa_plan_choice, reserved)};
    for (size_t f = 0; f < sizeof appended / sizeof *appended; f++)
        for (size_t k = 1; k < sizeof(int); k++) {
            fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
            c.struct_size = appended[f] + k;
            c.candidates = -7;
            assert_int_equal(get(&c, query), FSA_STATUS_STRUCT_SIZE);
            assert_int_equal(c.candidates, -7);
        }
    fsa_plan_choice c = FSA_PLAN_CHOICE_INIT;
    c.struct_size = offsetof(fsa_plan_choice, splits);
    assert_int_equal(get(&c, query), FSA_STATUS_OK);
    assert_true(c.candidates >= 1);
}

static const fsa_cu_api *test_cu(void)
{
    const fsa_cu_api *cu = NULL;
    if (fsa_cu_load(&cu) != FSA_STATUS_OK) {
        fprintf(stderr, "driver: %s\n", fsa_last_error());
        exit(1);
    }
    /* Optional for the library, needed here. */
    if (!cu->MemAlloc || !cu->MemFree || !cu->MemcpyHtoD || !cu->MemcpyDtoH || !cu->MemsetD8Async ||
        !cu->StreamSynchronize) {
        fprintf(stderr, "driver lacks a memory or stream entry point the tests use\n");
        exit(1);
    }
    return cu;
}

static void cu_ok(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        test_cu()->GetErrorName(r, &name);
        fail_msg("%s failed: %s (%d)", what, name, (int)r);
    }
}

uint64_t fsa_test_dalloc(size_t bytes)
{
    CUdeviceptr p = 0;
    cu_ok(test_cu()->MemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
    return (uint64_t)p;
}

void fsa_test_dfree(uint64_t ptr)
{
    if (ptr) cu_ok(test_cu()->MemFree((CUdeviceptr)ptr), "cuMemFree");
}

void fsa_test_h2d(uint64_t dst, const void *src, size_t bytes)
{
    if (bytes) cu_ok(test_cu()->MemcpyHtoD((CUdeviceptr)dst, src, bytes), "cuMemcpyHtoD");
}

void fsa_test_d2h(void *dst, uint64_t src, size_t bytes)
{
    if (bytes) cu_ok(test_cu()->MemcpyDtoH(dst, (CUdeviceptr)src, bytes), "cuMemcpyDtoH");
}

void fsa_test_dfill(uint64_t dst, uint8_t byte, size_t bytes)
{
    if (bytes) cu_ok(test_cu()->MemsetD8Async((CUdeviceptr)dst, byte, bytes, NULL), "cuMemsetD8Async");
    fsa_test_sync();
}

void fsa_test_sync(void) { cu_ok(test_cu()->StreamSynchronize(NULL), "cuStreamSynchronize"); }

int fsa_test_refused_for_shared_memory(const fsa_context *ctx, fsa_status st, const char *message)
{
    fsa_target sm90;
    /* Below sm_90's shared memory: sm_80's and the 99 KB GPUs take the smaller query-tile layouts and refuse
     * only the widest backwards (docs/semantics.md); the unit tests check which shapes each target fits. */
    return st == FSA_STATUS_UNSUPPORTED && message && strstr(message, "shared memory") &&
           fsa_target_parse(&sm90, "sm_90a") == FSA_STATUS_OK && ctx->max_smem_per_block < sm90.smem_per_block;
}

static const char *const small_layout_vars[4] = {"FSA_WGMMA", "FSA_WGMMA_BWD", "FSA_QT_SMALL_FWD", "FSA_QT_SMALL_BWD"};

void fsa_test_small_layouts_begin(fsa_test_small_layouts *s, const char *fwd, const char *bwd)
{
    const char *values[4] = {"0", "0", fwd, bwd};
    for (int i = 0; i < 4; i++) /* NULL keeps the value (set to itself, put back alike) */
        s->saved[i] = fsa_test_env_swap(small_layout_vars[i], values[i] ? values[i] : getenv(small_layout_vars[i]));
}

void fsa_test_small_layouts_end(fsa_test_small_layouts *s)
{
    for (int i = 3; i >= 0; i--) fsa_test_env_restore(small_layout_vars[i], s->saved[i]);
}

typedef struct kernel_lookup {
    const char *target, *prefix, *part;
    int found;
} kernel_lookup;

static int find_kernel(const fsa_cache_entry_info *e, void *user)
{
    kernel_lookup *l = user;
    if (e->record || strcmp(e->target, l->target) != 0 || strncmp(e->name, l->prefix, strlen(l->prefix)) != 0)
        return 0;
    /* `part` as a whole field: "_qb1" must not match "_qb11" */
    for (const char *at = strstr(e->name, l->part); at != NULL && !l->found; at = strstr(at + 1, l->part)) {
        const char next = at[strlen(l->part)];
        l->found = next == '\0' || next == '_';
    }
    return l->found;
}

int fsa_test_cache_has_kernel(fsa_context *ctx, const char *prefix, const char *part)
{
    kernel_lookup l = {ctx->target, prefix, part, 0};
    if (fsa_cache_list(ctx, find_kernel, &l) != FSA_STATUS_OK) fail_msg("fsa_cache_list: %s", fsa_last_error());
    return l.found;
}

void fsa_test_expect_layout_kernel(fsa_context *ctx, const char *prefix, const char *tag, int layout)
{
    char part[32];
    snprintf(part, sizeof part, "_%s%d", tag, layout);
    if (layout != 0 && !fsa_test_cache_has_kernel(ctx, prefix, part))
        fail_msg("no %s kernel of layout %d (%s) in the cache", prefix, layout, part);
}

int fsa_test_max_smem(const fsa_context *ctx) { return ctx->max_smem_per_block; }

char *fsa_test_env_swap(const char *name, const char *value)
{
    const char *old = getenv(name);
    char *saved = old ? strdup(old) : NULL;
    if (old && !saved) fail_msg("out of memory");
    if ((value ? setenv(name, value, 1) : unsetenv(name)) != 0) fail_msg("setenv %s: %s", name, strerror(errno));
    return saved;
}

void fsa_test_env_restore(const char *name, char *saved)
{
    if ((saved ? setenv(name, saved, 1) : unsetenv(name)) != 0) fail_msg("setenv %s: %s", name, strerror(errno));
    free(saved);
}

void fsa_test_stream_sync(void *stream)
{
    cu_ok(test_cu()->StreamSynchronize((CUstream)stream), "cuStreamSynchronize");
}

void fsa_test_capture_begin(fsa_test_graph *g)
{
    const fsa_cu_api *cu = test_cu();
    if (!cu->StreamCreate || !cu->StreamDestroy || !cu->StreamBeginCapture || !cu->StreamEndCapture ||
        !cu->GraphInstantiateWithFlags || !cu->GraphLaunch || !cu->GraphExecDestroy || !cu->GraphDestroy)
        fail_msg("the driver lacks a graph entry point the tests use");
    memset(g, 0, sizeof *g);
    CUstream s = NULL;
    cu_ok(cu->StreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    g->stream = s;
    cu_ok(cu->StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
}

void fsa_test_capture_end(fsa_test_graph *g)
{
    const fsa_cu_api *cu = test_cu();
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    cu_ok(cu->StreamEndCapture((CUstream)g->stream, &graph), "cuStreamEndCapture");
    g->graph = graph;
    cu_ok(cu->GraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    g->exec = exec;
}

void fsa_test_graph_replay(const fsa_test_graph *g)
{
    const fsa_cu_api *cu = test_cu();
    cu_ok(cu->GraphLaunch((CUgraphExec)g->exec, (CUstream)g->stream), "cuGraphLaunch");
    cu_ok(cu->StreamSynchronize((CUstream)g->stream), "cuStreamSynchronize");
}

void fsa_test_graph_free(fsa_test_graph *g)
{
    const fsa_cu_api *cu = test_cu();
    if (g->exec) cu->GraphExecDestroy((CUgraphExec)g->exec);
    if (g->graph) cu->GraphDestroy((CUgraph)g->graph);
    if (g->stream) cu->StreamDestroy((CUstream)g->stream);
    memset(g, 0, sizeof *g);
}

typedef struct other_thread {
    fsa_test_call_fn fn;
    void *arg, *stream;
    fsa_status st;
    char message[512];
} other_thread;

static void *other_thread_main(void *arg)
{
    other_thread *o = arg;
    o->st = o->fn(o->arg, o->stream);
    snprintf(o->message, sizeof o->message, "%s", fsa_last_error());
    return NULL;
}

fsa_status fsa_test_call_on_another_thread(fsa_test_call_fn fn, void *arg, void *stream, char *message,
                                           size_t message_size)
{
    other_thread o = {fn, arg, stream, FSA_STATUS_OK, ""};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread_main, &o), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    snprintf(message, message_size, "%s", o.message);
    return o.st;
}

void fsa_test_damage_file(const char *path, long from_end)
{
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, -from_end, SEEK_END), 0);
    const int ch = fgetc(fp);
    assert_int_equal(fseek(fp, -from_end, SEEK_END), 0);
    fputc(ch ^ 0x5a, fp);
    fclose(fp);
}

extern char **environ;

static int starts_with(const char *s, const char *prefix) { return prefix && strncmp(s, prefix, strlen(prefix)) == 0; }

int fsa_test_run_on_fake_driver(char *const argv[], const char *drop_prefix, const char *keep_prefix,
                                const char *const extra[])
{
    const char *bin = getenv("FSA_TEST_BINARY_DIR");
    if (bin == NULL) fail_msg("FSA_TEST_BINARY_DIR is not set (run through ctest)");
    char lib_path[4096];
    snprintf(lib_path, sizeof lib_path, "LD_LIBRARY_PATH=%s/fake_cuda", bin);
    size_t n = 0, n_extra = 0;
    while (environ[n]) n++;
    while (extra && extra[n_extra]) n_extra++;
    char **env = calloc(n + n_extra + 2, sizeof *env);
    assert_non_null(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!starts_with(environ[i], "LD_LIBRARY_PATH=") &&
            (!starts_with(environ[i], drop_prefix) || starts_with(environ[i], keep_prefix)))
            env[k++] = environ[i];
    env[k++] = lib_path;
    for (size_t i = 0; i < n_extra; i++) env[k++] = (char *)extra[i];
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    free(env);
    assert_true(pid > 0);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
    if (WIFSIGNALED(status)) fail_msg("child killed by signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

size_t fsa_test_build_id_of_file(uint8_t *out, size_t cap, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    Elf64_Ehdr eh;
    assert_int_equal(pread(fd, &eh, sizeof eh, 0), (ssize_t)sizeof eh);
    assert_memory_equal(eh.e_ident, ELFMAG, SELFMAG);
    assert_int_equal(eh.e_ident[EI_CLASS], ELFCLASS64);
    size_t found = 0;
    for (size_t i = 0; i < eh.e_phnum && found == 0; i++) {
        Elf64_Phdr ph;
        off_t at = (off_t)(eh.e_phoff + i * (uint64_t)eh.e_phentsize);
        assert_int_equal(pread(fd, &ph, sizeof ph, at), (ssize_t)sizeof ph);
        if (ph.p_type != PT_NOTE) continue;
        uint8_t *notes = malloc(ph.p_filesz);
        assert_non_null(notes);
        assert_int_equal(pread(fd, notes, ph.p_filesz, (off_t)ph.p_offset), (ssize_t)ph.p_filesz);
        found = fsa_elf_build_id_in_notes(out, cap, notes, ph.p_filesz, ph.p_align);
        free(notes);
    }
    close(fd);
    return found;
}

void fsa_test_in_child(void *out, size_t size, void (*body)(void *out, const void *arg), const void *arg)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const int w = fcntl(fds[1], F_DUPFD, 10);
        body(out, arg);
        _exit(w >= 0 && write(w, out, size) == (ssize_t)size ? 0 : 1);
    }
    close(fds[1]);
    assert_int_equal(read(fds[0], out, size), (ssize_t)size);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
