/* The JIT cache tests' fixture and helpers (jit_cache_fixture.h). */
#include "jit_cache_fixture.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ======================================================================== */
/* Helpers shared by the tests and the child processes                      */
/* ======================================================================== */

fsa_status create_context(fsa_context **out, const char *dir, const char *target, fsa_cache_mode mode,
                          fsa_jit_mode jit, int log)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = target;
    o.cache_dir = dir;
    o.cache_mode = mode;
    o.jit = jit;
    o.log = log;
    return fsa_context_create(out, &o);
}

void fill_req_init(fill_req *f, int unroll)
{
    snprintf(f->unroll, sizeof f->unroll, "%d", unroll);
    f->params[0] = (fsa_param){"UNROLL", f->unroll, "u"};
    f->req = (fsa_kernel_request){"fill", f->params, 1, "fsa_fill_u32"};
}

fsa_status get_fill(fsa_module **out, fsa_context *ctx, int unroll)
{
    fill_req f;
    fill_req_init(&f, unroll);
    return fsa_module_get(out, &ctx->env, &f.req);
}

fsa_cache_stats stats_of(const fsa_context *ctx)
{
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    if (fsa_context_cache_stats(&s, ctx) != FSA_STATUS_OK) memset(&s, 0xff, sizeof s);
    return s;
}

fsa_selected_attention_desc small_desc(fsa_algorithm algorithm, uint64_t workspace_limit)
{
    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.dtype = FSA_DTYPE_BF16;
    d.head_dim = 64;
    d.num_q_heads = 2;
    d.num_kv_heads = 1;
    d.block_size = 64;
    d.top_k = 4;
    d.algorithm = algorithm;
    d.workspace_limit = workspace_limit;
    return d;
}

/* ======================================================================== */
/* Parent-side helpers                                                      */
/* ======================================================================== */

int fresh_unroll(void)
{
    /* Distinct per request within this process (children get theirs from argv). */
    static int next = 100;
    return next++;
}

fsa_context *context_or_fail(const char *dir, const char *target, fsa_cache_mode mode, fsa_jit_mode jit, int log)
{
    fsa_context *ctx = NULL;
    fsa_status st = create_context(&ctx, dir, target, mode, jit, log);
    if (st != FSA_STATUS_OK) fail_msg("context on %s: %s", dir ? dir : "(default)", fsa_last_error());
    return ctx;
}

fsa_module *fill_or_fail(fsa_context *ctx, int unroll)
{
    fsa_module *m = NULL;
    fsa_status st = get_fill(&m, ctx, unroll);
    if (st != FSA_STATUS_OK) fail_msg("fill u%d: %s", unroll, fsa_last_error());
    assert_non_null(m);
    return m;
}

int collect_entry(const fsa_cache_entry_info *info, void *user)
{
    entry_list *l = user;
    if (l->n < sizeof l->e / sizeof l->e[0]) {
        snprintf(l->e[l->n].name, sizeof l->e[l->n].name, "%s", info->name);
        snprintf(l->e[l->n].target, sizeof l->e[l->n].target, "%s", info->target);
        snprintf(l->e[l->n].path, sizeof l->e[l->n].path, "%s", info->path);
        l->e[l->n].bytes = info->bytes;
        l->e[l->n].valid = info->valid;
    }
    l->n++;
    return 0;
}

/* Lists (verify = 0) or verifies (verify = 1) the cache at dir through a
 * read-write context; *bad_out gets verify's count of bad entries. */
entry_list inspect_cache(const char *dir, int verify, uint64_t *bad_out)
{
    entry_list l;
    memset(&l, 0, sizeof l);
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_string_equal(fsa_context_cache_dir(ctx), dir);
    uint64_t bad = 99;
    fsa_status st = verify ? fsa_cache_verify(ctx, collect_entry, &l, &bad) : fsa_cache_list(ctx, collect_entry, &l);
    if (st != FSA_STATUS_OK) fail_msg("%s %s: %s", verify ? "verify" : "list", dir, fsa_last_error());
    if (bad_out) *bad_out = verify ? bad : 0;
    fsa_context_destroy(ctx);
    return l;
}

static int g_file_count;
static int count_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)sb;
    (void)flag;
    if (ftw->level > 0) g_file_count++;
    return 0;
}

/* Files and directories below dir (dir itself not counted). */
int count_below(const char *dir)
{
    g_file_count = 0;
    assert_int_equal(nftw(dir, count_one, 16, FTW_PHYS), 0);
    return g_file_count;
}

char *path_in(const char *dir, const char *leaf)
{
    size_t n = strlen(dir) + strlen(leaf) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, leaf);
    return p;
}

/* The single entry of a cache that holds one, checked to be where it
 * belongs: <dir>/v1/<target>/<name>.<hex>.cubin. */
void the_one_entry(char *path_out, size_t cap, const char *dir, const char *target, const char *name,
                   const char *hex)
{
    entry_list l = inspect_cache(dir, 0, NULL);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.e[0].name, name);
    assert_string_equal(l.e[0].target, target);
    char want[1024];
    snprintf(want, sizeof want, "%s/v1/%s/%s.%s.cubin", dir, target, name, hex);
    assert_string_equal(l.e[0].path, want);
    assert_true(l.e[0].bytes > 64);
    snprintf(path_out, cap, "%s", l.e[0].path);
}

cached_fill cache_a_fresh_fill(const char *dir)
{
    cached_fill c;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    c.u = fresh_unroll();
    c.m = fill_or_fail(ctx, c.u);
    snprintf(c.us, sizeof c.us, "%d", c.u);
    snprintf(c.name, sizeof c.name, "fill_u%d", c.u);
    the_one_entry(c.path, sizeof c.path, dir, FILL_TARGET, c.name, fsa_module_key_hex(c.m));
    fsa_context_destroy(ctx);
    return c;
}

fsa_disk_cache *open_disk(const char *dir)
{
    fsa_disk_cache *dc = NULL;
    if (fsa_disk_cache_open(&dc, dir, 0) != FSA_STATUS_OK) fail_msg("cache %s: %s", dir, fsa_last_error());
    return dc;
}

/* Per-test fixture: a fresh empty cache directory, removed afterwards (also
 * when the test fails). */
int setup_dir(void **state)
{
    char *dir = fsa_test_mkdtemp("fsa_jit");
    *state = dir;
    return dir ? 0 : -1;
}

int teardown_dir(void **state)
{
    fsa_test_rmtree(*state);
    free(*state);
    return 0;
}
