/* The JIT and its caches end to end, without a GPU: offline contexts
 * (FSA_DEVICE_NONE) compile the real "fill" template and the forward
 * kernels with NVRTC and publish them to a disk cache, and fresh processes
 * (this binary run again with "--child ...") read them back.
 *
 * The in-process kernel table is process-wide and never shrinks, so every
 * test that needs a new kernel asks for fill with an UNROLL value no other
 * test of this process used (fresh_unroll); a child process starts with an
 * empty table and may ask for the parent's kernel. */
#include "testing.h"

#include "jit/compile.h"
#include "jit/context.h"
#include "jit/disk_cache.h"
#include "jit/module_cache.h"
#include "attention/plan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

extern char **environ;

#define FILL_TARGET "sm_80"
#define PLAN_TARGET "sm_90a"

/* ======================================================================== */
/* Helpers shared by the tests and the child processes                      */
/* ======================================================================== */

static fsa_status create_context(fsa_context **out, const char *dir, const char *target, fsa_cache_mode mode,
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

/* A request for the fill kernel with one UNROLL value. */
typedef struct fill_req {
    char unroll[16];
    fsa_param params[1];
    fsa_kernel_request req;
} fill_req;

static void fill_req_init(fill_req *f, int unroll)
{
    snprintf(f->unroll, sizeof f->unroll, "%d", unroll);
    f->params[0] = (fsa_param){"UNROLL", f->unroll, "u"};
    f->req = (fsa_kernel_request){"fill", f->params, 1, "fsa_fill_u32"};
}

static fsa_status get_fill(fsa_module **out, fsa_context *ctx, int unroll)
{
    fill_req f;
    fill_req_init(&f, unroll);
    return fsa_module_get(out, &ctx->env, &f.req);
}

static fsa_cache_stats stats_of(const fsa_context *ctx)
{
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    if (fsa_context_cache_stats(&s, ctx) != FSA_STATUS_OK) memset(&s, 0xff, sizeof s);
    return s;
}

static fsa_selected_attention_desc small_desc(fsa_algorithm algorithm, uint64_t workspace_limit)
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
/* Child processes                                                          */
/* ======================================================================== */

#define CHILD_CHECK(cond, ...)                                                      \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "child %s: check failed: %s: ", mode, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, " [last error: %s]\n", fsa_last_error());               \
            return 1;                                                               \
        }                                                                           \
    } while (0)

#define CHILD_STATS(s)                                                                                   \
    "compiles %llu, disk hits %llu, memory hits %llu, corrupt %llu", (unsigned long long)(s).compiles,  \
        (unsigned long long)(s).disk_hits, (unsigned long long)(s).memory_hits,                        \
        (unsigned long long)(s).corrupt_entries

/* disk-hit <dir> <unroll> <jit> <read_only>: the kernel comes from disk with
 * no compile, under default options (so FSA_JIT / FSA_CACHE_MODE from the
 * environment apply; the parent says which settings it expects). */
static int child_disk_hit(const char *mode, char **argv)
{
    fsa_context *ctx = NULL;
    fsa_module *m = NULL, *again = NULL;
    int unroll = atoi(argv[1]), want_jit = atoi(argv[2]), want_ro = atoi(argv[3]);
    fsa_status st = create_context(&ctx, argv[0], FILL_TARGET, FSA_CACHE_MODE_DEFAULT, FSA_JIT_DEFAULT, -1);
    CHILD_CHECK(st == FSA_STATUS_OK, "context: %s", fsa_status_name(st));
    CHILD_CHECK(ctx->env.jit == want_jit, "jit %d, expected %d", ctx->env.jit, want_jit);
    CHILD_CHECK(ctx->disk != NULL, "no disk cache");
    CHILD_CHECK(fsa_disk_cache_read_only(ctx->disk) == want_ro, "read-only %d, expected %d",
                fsa_disk_cache_read_only(ctx->disk), want_ro);
    st = get_fill(&m, ctx, unroll);
    CHILD_CHECK(st == FSA_STATUS_OK, "get: %s", fsa_status_name(st));
    fsa_cache_stats s = stats_of(ctx);
    CHILD_CHECK(s.disk_hits == 1 && s.compiles == 0 && s.memory_hits == 0 && s.corrupt_entries == 0,
                CHILD_STATS(s));
    size_t size = 0;
    CHILD_CHECK(fsa_module_cubin(m, &size) != NULL && size > 0, "empty cubin");
    st = get_fill(&again, ctx, unroll);
    CHILD_CHECK(st == FSA_STATUS_OK && again == m, "second get: %s", fsa_status_name(st));
    s = stats_of(ctx);
    CHILD_CHECK(s.disk_hits == 1 && s.compiles == 0 && s.memory_hits == 1, CHILD_STATS(s));
    fsa_context_destroy(ctx);
    return 0;
}

/* build <dir> <unroll> <corrupt> <write failures>: the kernel is not
 * usable from the cache (absent, or damaged: counted once, also when it
 * cannot be deleted and the look under the lock meets it again): one
 * compile, no disk hit; the publish fails as often as the parent says (1: a
 * directory with files is in the way). An alarm ends a process that would
 * wait for ever. */
static int child_build(const char *mode, char **argv)
{
    fsa_context *ctx = NULL;
    fsa_module *m = NULL;
    uint64_t corrupt = strtoull(argv[2], NULL, 10), write_failures = strtoull(argv[3], NULL, 10);
    alarm(60);
    fsa_status st = create_context(&ctx, argv[0], FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    CHILD_CHECK(st == FSA_STATUS_OK, "context: %s", fsa_status_name(st));
    st = get_fill(&m, ctx, atoi(argv[1]));
    CHILD_CHECK(st == FSA_STATUS_OK, "get: %s", fsa_status_name(st));
    fsa_cache_stats s = stats_of(ctx);
    CHILD_CHECK(s.corrupt_entries == corrupt && s.compiles == 1 && s.disk_hits == 0 &&
                    s.write_failures == write_failures,
                CHILD_STATS(s));
    fsa_context_destroy(ctx);
    return 0;
}

/* no-nvrtc <dir> <cached unroll> <uncached unroll>, run with FSA_NVRTC_PATH
 * pointing nowhere. */
static int child_no_nvrtc(const char *mode, char **argv)
{
    fsa_context *ctx = NULL;
    fsa_module *m = NULL;
    int cached = atoi(argv[1]), uncached = atoi(argv[2]);
    fsa_status st = create_context(&ctx, argv[0], FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    CHILD_CHECK(st == FSA_STATUS_OK, "context without NVRTC: %s", fsa_status_name(st));
    st = get_fill(&m, ctx, cached);
    CHILD_CHECK(st == FSA_STATUS_OK, "cached kernel: %s", fsa_status_name(st));
    fsa_cache_stats s = stats_of(ctx);
    CHILD_CHECK(s.disk_hits == 1 && s.compiles == 0 && s.corrupt_entries == 0, CHILD_STATS(s));

    st = get_fill(&m, ctx, uncached);
    CHILD_CHECK(st == FSA_STATUS_NO_NVRTC, "uncached kernel gave %s", fsa_status_name(st));
    CHILD_CHECK(m == NULL, "module handed out on failure");
    CHILD_CHECK(fsa_last_error_info()->status == FSA_STATUS_NO_NVRTC, "error record %d",
                (int)fsa_last_error_info()->status);
    char name[32];
    snprintf(name, sizeof name, "fill_u%d", uncached);
    CHILD_CHECK(strstr(fsa_last_error(), name) != NULL, "error does not name %s", name);
    s = stats_of(ctx);
    CHILD_CHECK(s.compiles == 0 && s.disk_hits == 1, CHILD_STATS(s));
    fsa_context_destroy(ctx);
    return 0;
}

/* plan-disk <dir> <modules> <lookups>: the small plan's kernels all come
 * from disk: one disk hit per module, the other lookups hit memory. */
static int child_plan_disk(const char *mode, char **argv)
{
    fsa_context *ctx = NULL;
    fsa_plan *plan = NULL;
    unsigned long long modules = strtoull(argv[1], NULL, 10), lookups = strtoull(argv[2], NULL, 10);
    fsa_status st = create_context(&ctx, argv[0], PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    CHILD_CHECK(st == FSA_STATUS_OK, "context: %s", fsa_status_name(st));
    fsa_selected_attention_desc d = small_desc(FSA_ALGORITHM_AUTO, 0);
    st = fsa_plan_create(&plan, ctx, &d);
    CHILD_CHECK(st == FSA_STATUS_OK, "plan: %s", fsa_status_name(st));
    fsa_cache_stats s = stats_of(ctx);
    CHILD_CHECK(s.compiles == 0 && s.disk_hits == modules && s.memory_hits == lookups - modules &&
                    s.corrupt_entries == 0,
                "expected %llu disk hits and %llu memory hits, got %llu and %llu (compiles %llu, corrupt %llu)",
                modules, lookups - modules, (unsigned long long)s.disk_hits, (unsigned long long)s.memory_hits,
                (unsigned long long)s.compiles, (unsigned long long)s.corrupt_entries);
    fsa_plan_destroy(plan);
    fsa_context_destroy(ctx);
    return 0;
}

typedef struct race_thread {
    fsa_context *ctx;
    int unroll;
    pthread_barrier_t *barrier;
    fsa_status st;
    fsa_module *m;
} race_thread;

static void *race_thread_main(void *p)
{
    race_thread *t = p;
    pthread_barrier_wait(t->barrier);
    t->st = get_fill(&t->m, t->ctx, t->unroll);
    return NULL;
}

static int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        got += (size_t)r;
    }
    return 1;
}

/* race <dir> <unroll> <threads> <ready fd> <gate fd> <result fd>: says it
 * is ready, waits for the gate to open (EOF), then every thread asks for
 * the same kernel through its own context. Writes one line of counts. */
static int child_race(const char *mode, char **argv)
{
    enum { MAX_THREADS = 16 };
    int unroll = atoi(argv[1]), n = atoi(argv[2]);
    int ready_fd = atoi(argv[3]), gate_fd = atoi(argv[4]), result_fd = atoi(argv[5]);
    CHILD_CHECK(n >= 1 && n <= MAX_THREADS, "%d threads", n);
    fsa_context *ctx[MAX_THREADS] = {0};
    race_thread t[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        fsa_status st = create_context(&ctx[i], argv[0], FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
        CHILD_CHECK(st == FSA_STATUS_OK, "context: %s", fsa_status_name(st));
        t[i] = (race_thread){ctx[i], unroll, &barrier, FSA_STATUS_INTERNAL, NULL};
    }
    char c = 'r';
    CHILD_CHECK(write(ready_fd, &c, 1) == 1, "ready pipe");
    close(ready_fd);
    while (read(gate_fd, &c, 1) > 0) {
    }
    close(gate_fd);
    for (int i = 0; i < n; i++) CHILD_CHECK(pthread_create(&tid[i], NULL, race_thread_main, &t[i]) == 0, "thread");
    for (int i = 0; i < n; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);
    fsa_cache_stats sum = {0};
    for (int i = 0; i < n; i++) {
        CHILD_CHECK(t[i].st == FSA_STATUS_OK, "thread %d: %s", i, fsa_status_name(t[i].st));
        CHILD_CHECK(t[i].m == t[0].m, "thread %d got another module", i);
        fsa_cache_stats s = stats_of(ctx[i]);
        sum.compiles += s.compiles;
        sum.disk_hits += s.disk_hits;
        sum.memory_hits += s.memory_hits;
        sum.corrupt_entries += s.corrupt_entries;
        sum.write_failures += s.write_failures;
        fsa_context_destroy(ctx[i]);
    }
    CHILD_CHECK(sum.corrupt_entries == 0 && sum.write_failures == 0, CHILD_STATS(sum));
    CHILD_CHECK(sum.compiles + sum.disk_hits == 1 && sum.memory_hits == (uint64_t)n - 1, CHILD_STATS(sum));
    char line[128];
    int len = snprintf(line, sizeof line, "ok %llu %llu %llu\n", (unsigned long long)sum.compiles,
                       (unsigned long long)sum.disk_hits, (unsigned long long)sum.memory_hits);
    CHILD_CHECK(write(result_fd, line, (size_t)len) == len, "result pipe");
    close(result_fd);
    return 0;
}

static int child_main(int argc, char **argv)
{
    /* Run from another working directory: it must not show in what is built. */
    const char *cwd = getenv("FSA_TEST_CHDIR");
    if (cwd && *cwd && chdir(cwd) != 0) return 3;
    /* Run as another user: how a cache baked into an image by root is read. */
    const char *as_uid = getenv("FSA_TEST_AS_UID");
    if (as_uid && *as_uid) {
        uid_t uid = (uid_t)atoi(as_uid);
        if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0) return 3;
        if (argc >= 2 && access(argv[1], R_OK | X_OK) != 0) return FSA_TEST_SKIP_CODE;
    }
    static const struct {
        const char *mode;
        int args;
        int (*fn)(const char *, char **);
    } modes[] = {
        {"disk-hit", 4, child_disk_hit}, {"build", 4, child_build},     {"no-nvrtc", 3, child_no_nvrtc},
        {"plan-disk", 3, child_plan_disk}, {"race", 6, child_race},
    };
    if (argc < 1) return 2;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(argv[0], modes[i].mode) == 0) {
            if (argc - 1 != modes[i].args) return 2;
            return modes[i].fn(argv[0], argv + 1);
        }
    fprintf(stderr, "unknown child mode %s\n", argv[0]);
    return 2;
}

/* ======================================================================== */
/* Parent-side helpers                                                      */
/* ======================================================================== */

static int fresh_unroll(void)
{
    /* Distinct per request within this process (children get theirs from argv). */
    static int next = 100;
    return next++;
}

static fsa_context *context_or_fail(const char *dir, const char *target, fsa_cache_mode mode, fsa_jit_mode jit, int log)
{
    fsa_context *ctx = NULL;
    fsa_status st = create_context(&ctx, dir, target, mode, jit, log);
    if (st != FSA_STATUS_OK) fail_msg("context on %s: %s", dir ? dir : "(default)", fsa_last_error());
    return ctx;
}

static fsa_module *fill_or_fail(fsa_context *ctx, int unroll)
{
    fsa_module *m = NULL;
    fsa_status st = get_fill(&m, ctx, unroll);
    if (st != FSA_STATUS_OK) fail_msg("fill u%d: %s", unroll, fsa_last_error());
    assert_non_null(m);
    return m;
}

/* Builds the child's environment: ours without FSA_* settings (except the
 * test's own), plus `extra`. */
/* Whether "NAME=value" entry `a` sets the variable that entry `b` sets. */
static int same_variable(const char *a, const char *b)
{
    const size_t n = strcspn(a, "=");
    return strncmp(a, b, n) == 0 && b[n] == '=';
}

static char **child_env(const char *const *extra)
{
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    size_t n_extra = 0;
    while (extra && extra[n_extra]) n_extra++;
    char **env = calloc(n + n_extra + 1, sizeof *env);
    assert_non_null(env);
    for (size_t i = 0; i < n; i++) {
        int replaced = 0; /* an extra entry sets it instead */
        for (size_t j = 0; j < n_extra; j++) replaced |= same_variable(environ[i], extra[j]);
        if (!replaced && (strncmp(environ[i], "FSA_", 4) != 0 || strncmp(environ[i], "FSA_TEST_", 9) == 0))
            env[k++] = environ[i];
    }
    for (size_t i = 0; i < n_extra; i++) env[k++] = (char *)extra[i];
    env[k] = NULL;
    return env;
}

/* Starts this binary with "--child args...". `close_fds` (-1 terminated) are
 * closed in the child before exec. */
static pid_t spawn_self(const char *const *args, const char *const *extra_env, const int *close_fds)
{
    const char *argv[16];
    size_t n = 0;
    argv[n++] = "test_jit_cache";
    argv[n++] = "--child";
    while (args[n - 2] != NULL && n < 15) {
        argv[n] = args[n - 2];
        n++;
    }
    argv[n] = NULL;
    char **env = child_env(extra_env);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        for (const int *fd = close_fds; fd && *fd >= 0; fd++) close(*fd);
        execve("/proc/self/exe", (char *const *)argv, env);
        _exit(127);
    }
    free(env);
    assert_true(pid > 0);
    return pid;
}

/* The child's exit code; a signal fails the test. */
static int wait_child(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
    if (WIFSIGNALED(status)) fail_msg("child %d killed by signal %d", (int)pid, WTERMSIG(status));
    return WEXITSTATUS(status);
}

static int run_self(const char *const *args, const char *const *extra_env)
{
    return wait_child(spawn_self(args, extra_env, NULL));
}

/* Entries as fsa_cache_list or fsa_cache_verify report them. */
typedef struct entry_list {
    size_t n;
    struct {
        char name[160];
        char target[24];
        char path[1024];
        uint64_t bytes;
        int valid;
    } e[32];
} entry_list;

static int collect_entry(const fsa_cache_entry_info *info, void *user)
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
static entry_list inspect_cache(const char *dir, int verify, uint64_t *bad_out)
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
static int count_below(const char *dir)
{
    g_file_count = 0;
    assert_int_equal(nftw(dir, count_one, 16, FTW_PHYS), 0);
    return g_file_count;
}

static char *path_in(const char *dir, const char *leaf)
{
    size_t n = strlen(dir) + strlen(leaf) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, leaf);
    return p;
}

/* The single entry of a cache that holds one, checked to be where it
 * belongs: <dir>/v1/<target>/<name>.<hex>.cubin. */
static void the_one_entry(char *path_out, size_t cap, const char *dir, const char *target, const char *name,
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

/* A fresh kernel that a context of this process compiled into the cache at
 * dir (which held nothing of it): its unroll and name, the path of its one
 * entry, and the module (which outlives the context). */
typedef struct cached_fill {
    int u;
    char us[16], name[32], path[1024];
    fsa_module *m;
} cached_fill;

static cached_fill cache_a_fresh_fill(const char *dir)
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

static fsa_disk_cache *open_disk(const char *dir)
{
    fsa_disk_cache *dc = NULL;
    if (fsa_disk_cache_open(&dc, dir, 0) != FSA_STATUS_OK) fail_msg("cache %s: %s", dir, fsa_last_error());
    return dc;
}

/* stderr (fd 2) into a temporary file between begin and end. */
typedef struct capture {
    int saved_fd;
    FILE *tmp;
} capture;

static void capture_begin(capture *c)
{
    fflush(stderr);
    c->tmp = tmpfile();
    assert_non_null(c->tmp);
    c->saved_fd = dup(2);
    assert_true(c->saved_fd >= 0);
    assert_true(dup2(fileno(c->tmp), 2) >= 0);
}

/* Restores stderr and returns what was written (caller frees). */
static char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    long n = ftell(c->tmp);
    if (fseek(c->tmp, 0, SEEK_END) == 0) n = ftell(c->tmp);
    rewind(c->tmp);
    char *text = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    assert_non_null(text);
    if (n > 0 && fread(text, 1, (size_t)n, c->tmp) != (size_t)n) text[0] = '\0';
    fclose(c->tmp);
    return text;
}

static int count_occurrences(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

static char *g_plan_dir; /* shared by the plan tests: their kernels compile once */

/* Per-test fixture: a fresh empty cache directory, removed afterwards (also
 * when the test fails). */
static int setup_dir(void **state)
{
    char *dir = fsa_test_mkdtemp("fsa_jit");
    *state = dir;
    return dir ? 0 : -1;
}

static int teardown_dir(void **state)
{
    fsa_test_rmtree(*state);
    free(*state);
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    g_plan_dir = fsa_test_mkdtemp("fsa_jit_plan");
    return g_plan_dir ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fsa_test_rmtree(g_plan_dir);
    free(g_plan_dir);
    return 0;
}

/* ======================================================================== */
/* Compile, publish, memory hit                                             */
/* ======================================================================== */

static void test_a_first_request_compiles_once_and_publishes_one_entry_under_v1_target(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_string_equal(fsa_context_cache_dir(ctx), dir);
    int u = fresh_unroll();
    size_t modules_before = fsa_module_count();

    fsa_module *m = fill_or_fail(ctx, u);
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(s.memory_hits, 0);
    assert_int_equal(s.write_failures, 0);
    assert_true(s.compile_ms > 0.0);
    assert_int_equal(fsa_module_count(), modules_before + 1);

    char name[32], path[1024];
    snprintf(name, sizeof name, "fill_u%d", u);
    assert_string_equal(fsa_module_name(m), name);
    size_t size = 0;
    const uint8_t *cubin = fsa_module_cubin(m, &size);
    assert_non_null(cubin);
    assert_memory_equal(cubin, "\x7f" "ELF", 4);
    the_one_entry(path, sizeof path, dir, FILL_TARGET, name, fsa_module_key_hex(m));

    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, 1);
    assert_true(v.e[0].valid);

    fsa_context_destroy(ctx);
}

static void test_a_second_request_in_the_same_process_is_a_memory_hit(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fsa_module *first = fill_or_fail(ctx, u);
    size_t modules = fsa_module_count();
    fsa_module *second = fill_or_fail(ctx, u);
    fsa_module *third = fill_or_fail(ctx, u);
    assert_ptr_equal(first, second);
    assert_ptr_equal(first, third);
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.memory_hits, 2);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(fsa_module_count(), modules);

    /* Another context of the process shares the table: a hit, no compile. */
    fsa_context *other = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_ptr_equal(fill_or_fail(other, u), first);
    s = stats_of(other);
    assert_int_equal(s.compiles, 0);
    assert_int_equal(s.memory_hits, 1);
    assert_int_equal(s.disk_hits, 0);
    /* Still one entry on disk. */
    assert_int_equal(inspect_cache(dir, 0, NULL).n, 1);

    fsa_context_destroy(other);
    fsa_context_destroy(ctx);
}

/* ======================================================================== */
/* Single flight                                                            */
/* ======================================================================== */

static void test_sixteen_threads_asking_for_one_new_kernel_compile_it_once(void **state)
{
    enum { N = 16 };
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    size_t modules_before = fsa_module_count();
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, N);
    race_thread t[N];
    pthread_t tid[N];
    for (int i = 0; i < N; i++) t[i] = (race_thread){ctx, u, &barrier, FSA_STATUS_INTERNAL, NULL};
    for (int i = 0; i < N; i++) assert_int_equal(pthread_create(&tid[i], NULL, race_thread_main, &t[i]), 0);
    for (int i = 0; i < N; i++) assert_int_equal(pthread_join(tid[i], NULL), 0);
    pthread_barrier_destroy(&barrier);

    for (int i = 0; i < N; i++) {
        if (t[i].st != FSA_STATUS_OK) fail_msg("thread %d: %s", i, fsa_status_name(t[i].st));
        assert_ptr_equal(t[i].m, t[0].m);
    }
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.memory_hits, N - 1);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(s.corrupt_entries, 0);
    assert_int_equal(fsa_module_count(), modules_before + 1);

    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, 1);

    fsa_context_destroy(ctx);
}

/* ======================================================================== */
/* Fresh processes                                                          */
/* ======================================================================== */

static void test_a_fresh_process_gets_the_kernel_from_disk_without_compiling(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fill_or_fail(ctx, u);
    fsa_context_destroy(ctx);

    char us[16];
    snprintf(us, sizeof us, "%d", u);
    const char *args[] = {"disk-hit", dir, us, "1", "0", NULL};
    assert_int_equal(run_self(args, NULL), 0);
    /* Reading changed nothing. */
    uint64_t bad = 99;
    assert_int_equal(inspect_cache(dir, 1, &bad).n, 1);
    assert_int_equal(bad, 0);

}

static void test_processes_and_threads_racing_for_one_new_kernel_publish_exactly_one_valid_entry(void **state)
{
    enum { PROCS = 4, THREADS = 4 };
    const char *dir = *state;
    int u = fresh_unroll();
    int ready[2], gate[2], result[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(gate), 0);
    assert_int_equal(pipe(result), 0);
    char us[16], threads[16], ready_fd[16], gate_fd[16], result_fd[16];
    snprintf(us, sizeof us, "%d", u);
    snprintf(threads, sizeof threads, "%d", THREADS);
    snprintf(ready_fd, sizeof ready_fd, "%d", ready[1]);
    snprintf(gate_fd, sizeof gate_fd, "%d", gate[0]);
    snprintf(result_fd, sizeof result_fd, "%d", result[1]);
    const char *args[] = {"race", dir, us, threads, ready_fd, gate_fd, result_fd, NULL};
    const int close_in_child[] = {ready[0], gate[1], result[0], -1};

    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) pids[i] = spawn_self(args, NULL, close_in_child);
    close(ready[1]);
    close(gate[0]);
    close(result[1]);
    /* Every child has its contexts and waits at the gate; then open it. */
    int all_ready = 1;
    for (int i = 0; i < PROCS && all_ready; i++) {
        char c;
        all_ready = read_full(ready[0], &c, 1);
    }
    close(ready[0]);
    close(gate[1]);

    char out[4096] = {0};
    size_t got = 0;
    for (ssize_t r; got < sizeof out - 1 && (r = read(result[0], out + got, sizeof out - 1 - got)) != 0;) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        got += (size_t)r;
    }
    close(result[0]);
    int failed = 0;
    for (int i = 0; i < PROCS; i++) failed += wait_child(pids[i]) != 0;
    assert_true(all_ready);
    assert_int_equal(failed, 0);

    unsigned long long compiles = 0, disk_hits = 0, memory_hits = 0;
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned long long c, d, m;
        if (sscanf(line, "ok %llu %llu %llu", &c, &d, &m) != 3) fail_msg("bad child line \"%s\"", line);
        compiles += c;
        disk_hits += d;
        memory_hits += m;
        lines++;
    }
    assert_int_equal(lines, PROCS);
    /* The per-key lock: one process compiles, the others read its entry. */
    assert_int_equal(compiles, 1);
    assert_int_equal(disk_hits, PROCS - 1);
    assert_int_equal(memory_hits, PROCS * (THREADS - 1));

    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, 1);
    assert_true(v.e[0].valid);
    char name[32];
    snprintf(name, sizeof name, "fill_u%d", u);
    assert_string_equal(v.e[0].name, name);
    /* No temporary file was left behind. */
    char *tdir = path_in(dir, "v1/" FILL_TARGET);
    DIR *d = opendir(tdir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (strstr(de->d_name, ".tmp.") != NULL) fail_msg("temporary file %s left", de->d_name);
    closedir(d);
    free(tdir);

}

/* Publishes a fresh kernel in dir, damages its entry with `damage`, and has
 * a fresh process rebuild it. */
static void corrupt_and_rebuild(const char *dir, void (*damage)(const char *path, uint64_t size))
{
    cached_fill c = cache_a_fresh_fill(dir);
    const char *path = c.path, *us = c.us;
    struct stat before;
    assert_int_equal(stat(path, &before), 0);
    damage(path, (uint64_t)before.st_size);

    const char *args[] = {"build", dir, us, "1", "0", NULL};
    assert_int_equal(run_self(args, NULL), 0);

    /* The rebuilt entry is whole and in the same place. */
    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, 1);
    assert_true(v.e[0].valid);
    assert_string_equal(v.e[0].path, path);
    struct stat after;
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_size, before.st_size);

    /* And a further fresh process reads it without compiling. */
    const char *hit[] = {"disk-hit", dir, us, "1", "0", NULL};
    assert_int_equal(run_self(hit, NULL), 0);

}

static void truncate_to_half(const char *path, uint64_t size)
{
    assert_int_equal(truncate(path, (off_t)(size / 2)), 0);
}

static void flip_last_byte(const char *path, uint64_t size)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, (off_t)(size - 1)), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)(size - 1)), 1);
    close(fd);
}

static void flip_key_text_byte(const char *path, uint64_t size)
{
    (void)size;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    /* Just past the header: the stored key text. */
    const off_t at = FSA_CACHE_HEADER_SIZE + 6;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x01;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void test_a_truncated_entry_is_counted_corrupt_and_rebuilt_once_in_a_fresh_process(void **state)
{
    corrupt_and_rebuild(*state, truncate_to_half);
}

static void test_an_entry_with_a_flipped_payload_byte_is_counted_corrupt_and_rebuilt_once(void **state)
{
    corrupt_and_rebuild(*state, flip_last_byte);
}

static void test_an_entry_with_a_flipped_key_byte_is_counted_corrupt_and_rebuilt_once(void **state)
{
    corrupt_and_rebuild(*state, flip_key_text_byte);
}

static void test_a_directory_in_place_of_an_entry_is_counted_once_and_reported_as_a_write_failure(void **state)
{
    const char *dir = *state;
    cached_fill c = cache_a_fresh_fill(dir);
    const char *path = c.path;
    char inside[1100];
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inside, sizeof inside, "%s/file", path);
    int fd = open(inside, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);

    const char *args[] = {"build", dir, c.us, "1", "1", NULL};
    assert_int_equal(run_self(args, NULL), 0);
    struct stat sb;
    assert_int_equal(stat(inside, &sb), 0); /* not ours to delete */
}

static void test_an_empty_cache_dir_option_means_the_default_directory(void **state)
{
    const char *dir = *state;
    const char *saved = getenv("FSA_CACHE_DIR");
    char *keep = saved ? strdup(saved) : NULL;
    assert_int_equal(setenv("FSA_CACHE_DIR", dir, 1), 0);
    fsa_context *ctx = context_or_fail("", FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_string_equal(fsa_context_cache_dir(ctx), dir);
    fsa_context_destroy(ctx);
    /* FSA_CACHE_DIR="" is unset too: the next rule applies. */
    assert_int_equal(setenv("FSA_CACHE_DIR", "", 1), 0);
    assert_int_equal(setenv("XDG_CACHE_HOME", dir, 1), 0);
    ctx = context_or_fail("", FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    char want[1024];
    snprintf(want, sizeof want, "%s/fsa", dir);
    assert_string_equal(fsa_context_cache_dir(ctx), want);
    fsa_context_destroy(ctx);
    unsetenv("XDG_CACHE_HOME");
    if (keep) setenv("FSA_CACHE_DIR", keep, 1);
    else unsetenv("FSA_CACHE_DIR");
    free(keep);
}

static void test_a_stopped_process_holding_a_kernels_lock_does_not_keep_others_from_compiling_it(void **state)
{
    const char *dir = *state;
    cached_fill c = cache_a_fresh_fill(dir);
    assert_int_equal(unlink(c.path), 0); /* cold again */

    /* A process that took the kernel's lock, as a compiling process does, and was stopped. */
    fsa_kernel_key key = {0};
    key.name = c.name;
    snprintf(key.hex, sizeof key.hex, "%s", fsa_module_key_hex(c.m));
    fsa_disk_cache *dc = open_disk(dir);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        if (fsa_disk_cache_lock(dc, &key, FILL_TARGET) < 0 || write(ready[1], "x", 1) != 1) _exit(2);
        raise(SIGSTOP);
        _exit(0);
    }
    char byte;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    close(ready[1]);
    int ws = 0;
    assert_int_equal(waitpid(holder, &ws, WUNTRACED), holder);
    assert_true(WIFSTOPPED(ws));

    const char *args[] = {"build", dir, c.us, "0", "0", NULL};
    int rc = run_self(args, NULL);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    assert_int_equal(rc, 0);
    uint64_t bad = 99;
    assert_int_equal(inspect_cache(dir, 1, &bad).n, 1);
    assert_int_equal(bad, 0);
    fsa_disk_cache_close(dc);
}

/* ======================================================================== */
/* Cache modes                                                              */
/* ======================================================================== */

static void test_cache_mode_off_compiles_and_writes_nothing(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_OFF, FSA_JIT_ON, -1);
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fill_or_fail(ctx, fresh_unroll());
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(s.write_failures, 0);
    assert_int_equal(count_below(dir), 0);
    fsa_context_destroy(ctx);

    /* The same through FSA_CACHE_MODE=off. */
    char *saved = getenv("FSA_CACHE_MODE") ? strdup(getenv("FSA_CACHE_MODE")) : NULL;
    assert_int_equal(setenv("FSA_CACHE_MODE", "off", 1), 0);
    fsa_status st = create_context(&ctx, dir, FILL_TARGET, FSA_CACHE_MODE_DEFAULT, FSA_JIT_ON, -1);
    if (saved) {
        setenv("FSA_CACHE_MODE", saved, 1);
        free(saved);
    } else {
        unsetenv("FSA_CACHE_MODE");
    }
    assert_int_equal(st, FSA_STATUS_OK);
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fill_or_fail(ctx, fresh_unroll());
    s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.write_failures, 0);
    assert_int_equal(count_below(dir), 0);
    fsa_context_destroy(ctx);

}

static void test_read_only_mode_with_an_empty_directory_compiles_into_memory_and_writes_nothing(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = NULL;
    fsa_status st = create_context(&ctx, dir, FILL_TARGET, FSA_CACHE_MODE_READ_ONLY, FSA_JIT_ON, -1);
    if (st != FSA_STATUS_OK) fail_msg("read-only context on an empty directory: %s", fsa_last_error());
    int u = fresh_unroll();
    fsa_module *m = fill_or_fail(ctx, u);
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.disk_hits, 0);
    /* Read-only is a choice, not a failure. */
    assert_int_equal(s.write_failures, 0);
    assert_int_equal(count_below(dir), 0);
    /* The kernel is kept in memory. */
    assert_ptr_equal(fill_or_fail(ctx, u), m);
    s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.memory_hits, 1);
    assert_int_equal(count_below(dir), 0);
    fsa_context_destroy(ctx);
}

static void test_read_only_mode_serves_entries_that_are_already_on_disk(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fill_or_fail(ctx, u);
    fsa_context_destroy(ctx);
    int files = count_below(dir);

    char us[16];
    snprintf(us, sizeof us, "%d", u);
    const char *args[] = {"disk-hit", dir, us, "1", "1", NULL};
    const char *env[] = {"FSA_CACHE_MODE=ro", NULL};
    assert_int_equal(run_self(args, env), 0);
    /* A read-only reader creates nothing (no lock file either). */
    assert_int_equal(count_below(dir), files);

}

/* Creates a read-write context with logging on and asks for two new
 * kernels, all with stderr captured. Returns the captured text. */
static char *two_kernels_logged(fsa_context **ctx_out, const char *cache_dir)
{
    enum { N = 2 };
    fsa_status st_ctx, st[N];
    int u[N];
    for (int i = 0; i < N; i++) u[i] = fresh_unroll();
    fsa_module *m = NULL;
    capture c;
    capture_begin(&c);
    st_ctx = create_context(ctx_out, cache_dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, 1);
    for (int i = 0; i < N; i++) st[i] = st_ctx == FSA_STATUS_OK ? get_fill(&m, *ctx_out, u[i]) : st_ctx;
    char *text = capture_end(&c);
    if (st_ctx != FSA_STATUS_OK) fail_msg("context on %s: %s", cache_dir, fsa_status_name(st_ctx));
    for (int i = 0; i < N; i++)
        if (st[i] != FSA_STATUS_OK) fail_msg("kernel %d: %s", i, fsa_status_name(st[i]));
    fsa_cache_stats s = stats_of(*ctx_out);
    assert_int_equal(s.compiles, N);
    assert_true(s.write_failures >= 1);
    return text;
}

static void expect_one_warning(const char *text, const char *mentions)
{
    int n = count_occurrences(text, "fsa: warning:");
    if (n != 1) fail_msg("expected one warning, got %d:\n%s", n, text);
    if (mentions && strstr(text, mentions) == NULL) fail_msg("warning does not mention %s:\n%s", mentions, text);
}

static void test_a_cache_directory_under_a_regular_file_keeps_kernels_in_memory_and_warns_once(void **state)
{
    const char *dir = *state;
    char *file = path_in(dir, "file");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("not a directory\n", f);
    fclose(f);
    char *cache = path_in(file, "cache"); /* mkdir fails with ENOTDIR */

    fsa_context *ctx = NULL;
    char *text = two_kernels_logged(&ctx, cache);
    expect_one_warning(text, cache);
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    assert_int_equal(count_below(dir), 1); /* just the file */
    free(text);
    fsa_context_destroy(ctx);
    free(cache);
    free(file);
}

static void test_a_cache_directory_without_write_permission_keeps_kernels_in_memory_and_warns_once(void **state)
{
    if (geteuid() == 0) {
        print_message("root ignores directory permissions; see the ENOTDIR and refused-directory tests\n");
        skip();
    }
    const char *dir = *state;
    assert_int_equal(chmod(dir, 0500), 0);
    fsa_context *ctx = NULL;
    char *text = two_kernels_logged(&ctx, dir);
    expect_one_warning(text, dir);
    assert_int_equal(count_below(dir), 0);
    free(text);
    fsa_context_destroy(ctx);
}

static void test_a_target_directory_without_write_permission_keeps_kernels_in_memory_and_warns_once(void **state)
{
    if (geteuid() == 0) {
        print_message("root ignores directory permissions\n");
        skip();
    }
    /* The cache opens; only publishing fails. */
    const char *dir = *state;
    char *v1 = path_in(dir, "v1");
    char *tdir = path_in(v1, FILL_TARGET);
    assert_int_equal(mkdir(v1, 0700), 0);
    assert_int_equal(mkdir(tdir, 0500), 0);
    fsa_context *ctx = NULL;
    char *text = two_kernels_logged(&ctx, dir);
    expect_one_warning(text, NULL);
    assert_string_equal(fsa_context_cache_dir(ctx), dir);
    assert_int_equal(stats_of(ctx).write_failures, 2);
    assert_int_equal(count_below(dir), 2);
    free(text);
    fsa_context_destroy(ctx);
    free(tdir);
    free(v1);
}

static void test_a_refused_target_directory_keeps_kernels_in_memory_and_warns_once(void **state)
{
    /* The root is fine, but v1/<target> is writable by others: the cache
     * opens, and every lookup and publish in that directory is refused. */
    const char *dir = *state;
    char *v1 = path_in(dir, "v1");
    char *tdir = path_in(v1, FILL_TARGET);
    assert_int_equal(mkdir(v1, 0700), 0);
    assert_int_equal(mkdir(tdir, 0700), 0);
    assert_int_equal(chmod(tdir, 0777), 0);
    fsa_context *ctx = NULL;
    char *text = two_kernels_logged(&ctx, dir);
    assert_int_equal(count_below(dir), 2); /* nothing was written into it */
    expect_one_warning(text, NULL);
    free(text);
    fsa_context_destroy(ctx);
    free(tdir);
    free(v1);
}

static void test_a_cache_directory_writable_by_others_is_refused_and_left_untouched(void **state)
{
    const char *dir = *state;
    assert_int_equal(chmod(dir, 0777), 0);
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    int u = fresh_unroll();
    fsa_module *m = fill_or_fail(ctx, u);
    assert_ptr_equal(fill_or_fail(ctx, u), m);
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.memory_hits, 1);
    assert_int_equal(s.disk_hits, 0);
    assert_true(s.write_failures >= 1);
    assert_int_equal(count_below(dir), 0);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0777);
    /* Maintenance calls say there is no disk cache. */
    entry_list l = {0};
    assert_int_equal(fsa_cache_list(ctx, collect_entry, &l), FSA_STATUS_CACHE_IO);
    fsa_context_destroy(ctx);
}

static void test_a_cache_directory_owned_by_another_user_is_refused_and_left_untouched(void **state)
{
    if (geteuid() != 0) {
        print_message("only root can give a directory to another user\n");
        skip();
    }
    const char *dir = *state;
    assert_int_equal(chown(dir, 65534, 65534), 0);
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fill_or_fail(ctx, fresh_unroll());
    assert_int_equal(stats_of(ctx).compiles, 1);
    assert_int_equal(count_below(dir), 0);
    fsa_context_destroy(ctx);
}

/* ======================================================================== */
/* JIT off, no NVRTC                                                        */
/* ======================================================================== */

static void test_jit_off_with_an_empty_cache_is_jit_disabled_and_names_the_kernel(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_OFF, -1);
    int u = fresh_unroll();
    size_t modules = fsa_module_count();
    fsa_module *m = (fsa_module *)ctx;
    assert_int_equal(get_fill(&m, ctx, u), FSA_STATUS_JIT_DISABLED);
    assert_null(m);
    char name[32];
    snprintf(name, sizeof name, "fill_u%d", u);
    const fsa_error_info *e = fsa_last_error_info();
    assert_int_equal(e->status, FSA_STATUS_JIT_DISABLED);
    assert_string_equal(e->kernel, name);
    assert_string_equal(e->target, FILL_TARGET);
    assert_int_equal(strlen(e->key), 32);
    assert_non_null(strstr(fsa_last_error(), name));
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 0);
    assert_int_equal(s.disk_hits, 0);
    /* The failure leaves nothing behind: not in the table, not on disk. */
    assert_int_equal(fsa_module_count(), modules);
    assert_int_equal(inspect_cache(dir, 0, NULL).n, 0);
    /* Asking again fails again (the failure is not cached as a kernel). */
    assert_int_equal(get_fill(&m, ctx, u), FSA_STATUS_JIT_DISABLED);

    /* Another context of the process compiling it (into another cache) does
     * not make it this context's: a process of its own would fail too. */
    char *elsewhere_dir = fsa_test_mkdtemp("fsa_jit_elsewhere");
    assert_non_null(elsewhere_dir);
    fsa_context *elsewhere = context_or_fail(elsewhere_dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fill_or_fail(elsewhere, u);
    assert_int_equal(stats_of(elsewhere).compiles, 1);
    assert_int_equal(get_fill(&m, ctx, u), FSA_STATUS_JIT_DISABLED);
    assert_non_null(strstr(fsa_last_error(), dir));

    /* A context with JIT on and this cache takes it from memory and publishes
     * it here; from then on the JIT-off context loads it from its cache. */
    fsa_context *jit = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fill_or_fail(jit, u);
    s = stats_of(jit);
    assert_int_equal(s.compiles, 0);
    assert_int_equal(s.memory_hits, 1);
    assert_int_equal(inspect_cache(dir, 0, NULL).n, 1);
    assert_int_equal(get_fill(&m, ctx, u), FSA_STATUS_OK);
    assert_int_equal(stats_of(ctx).disk_hits, 1);

    /* And a second JIT-off context, with an empty cache, still may not use it. */
    char *empty_dir = fsa_test_mkdtemp("fsa_jit_empty");
    assert_non_null(empty_dir);
    fsa_context *off = context_or_fail(empty_dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_OFF, -1);
    assert_int_equal(get_fill(&m, off, u), FSA_STATUS_JIT_DISABLED);
    assert_int_equal(stats_of(off).memory_hits, 0);
    fsa_context_destroy(off);
    fsa_context_destroy(jit);
    fsa_context_destroy(elsewhere);
    fsa_context_destroy(ctx);
    fsa_test_rmtree(elsewhere_dir);
    fsa_test_rmtree(empty_dir);
    free(elsewhere_dir);
    free(empty_dir);
}

static void test_a_kernel_compiled_for_one_cache_is_published_to_the_next_cache_that_asks(void **state)
{
    /* Precompiling into one directory, then another, in one process fills both. */
    const char *dir = *state;
    char *second = fsa_test_mkdtemp("fsa_jit_second");
    assert_non_null(second);
    fsa_context *a = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_context *b = context_or_fail(second, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fsa_module *m = fill_or_fail(a, u);
    assert_ptr_equal(fill_or_fail(b, u), m);
    fsa_cache_stats s = stats_of(b);
    assert_int_equal(s.compiles, 0);
    assert_int_equal(s.memory_hits, 1);
    assert_int_equal(s.write_failures, 0);
    char name[32], path[1024];
    snprintf(name, sizeof name, "fill_u%d", u);
    the_one_entry(path, sizeof path, second, FILL_TARGET, name, fsa_module_key_hex(m));
    uint64_t bad = 99;
    assert_int_equal(inspect_cache(second, 1, &bad).n, 1);
    assert_int_equal(bad, 0);
    /* Asking again costs no further look at the disk. */
    assert_int_equal(unlink(path), 0);
    fill_or_fail(b, u);
    assert_int_equal(inspect_cache(second, 0, NULL).n, 0);
    fsa_context_destroy(b);
    fsa_context_destroy(a);
    fsa_test_rmtree(second);
    free(second);
}

static void test_jit_off_loads_a_kernel_that_is_on_disk(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fill_or_fail(ctx, u);
    fsa_context_destroy(ctx);
    char us[16];
    snprintf(us, sizeof us, "%d", u);
    const char *args[] = {"disk-hit", dir, us, "0", "0", NULL};
    const char *env[] = {"FSA_JIT=off", NULL};
    assert_int_equal(run_self(args, env), 0);
}

static void test_jit_off_plan_create_on_an_empty_cache_is_jit_disabled_naming_a_kernel(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_OFF, -1);
    /* A block size no other test of this process uses: nothing is in memory. */
    fsa_selected_attention_desc d = small_desc(FSA_ALGORITHM_AUTO, 0);
    d.block_size = 128;
    fsa_plan *plan = (fsa_plan *)ctx;
    assert_int_equal(fsa_plan_create(&plan, ctx, &d), FSA_STATUS_JIT_DISABLED);
    assert_null(plan);
    const fsa_error_info *e = fsa_last_error_info();
    assert_int_equal(e->status, FSA_STATUS_JIT_DISABLED);
    assert_true(strncmp(e->kernel, "sel_", 4) == 0);
    assert_non_null(strstr(fsa_last_error(), e->kernel));
    assert_int_equal(stats_of(ctx).compiles, 0);
    fsa_context_destroy(ctx);
}

static void test_without_nvrtc_cached_kernels_load_and_uncached_ones_fail_with_no_nvrtc(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int cached = fresh_unroll(), uncached = fresh_unroll();
    fill_or_fail(ctx, cached);
    fsa_context_destroy(ctx);
    int files = count_below(dir);

    char c[16], n[16];
    snprintf(c, sizeof c, "%d", cached);
    snprintf(n, sizeof n, "%d", uncached);
    const char *args[] = {"no-nvrtc", dir, c, n, NULL};
    const char *env[] = {"FSA_NVRTC_PATH=/nonexistent/libnvrtc.so", NULL};
    assert_int_equal(run_self(args, env), 0);
    /* The entry built with NVRTC is still the only one, and intact. */
    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, 1);
    assert_int_equal(count_below(dir), files);
}

/* Where ctest put the stand-in for a damaged libnvrtc; NULL outside ctest. */
static char *crashing_nvrtc_env(void)
{
    const char *bin = getenv("FSA_TEST_BINARY_DIR");
    if (bin == NULL) return NULL;
    size_t n = strlen(bin) + 64;
    char *env = malloc(n);
    assert_non_null(env);
    snprintf(env, n, "FSA_NVRTC_PATH=%s/fake_nvrtc/libcrash_on_load.so", bin);
    return env;
}

static void test_jit_off_never_loads_nvrtc_so_a_broken_libnvrtc_cannot_harm_it(void **state)
{
    const char *dir = *state;
    char *broken = crashing_nvrtc_env();
    if (broken == NULL) skip();
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fill_or_fail(ctx, u);
    fsa_context_destroy(ctx);
    char us[16];
    snprintf(us, sizeof us, "%d", u);
    const char *args[] = {"disk-hit", dir, us, "0", "0", NULL};
    const char *env[] = {"FSA_JIT=off", broken, NULL};
    assert_int_equal(run_self(args, env), 0);
    /* The stand-in does kill a process that loads it (under AddressSanitizer too: its handler would
     * turn the bus error into an exit status). */
    const char *compile[] = {"build", dir, "999", "0", "0", NULL};
    int status = 0;
    pid_t pid = spawn_self(compile, (const char *const[]){broken, "ASAN_OPTIONS=handle_sigbus=0", NULL}, NULL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    free(broken);
}

static void test_with_jit_off_an_entry_that_another_nvrtc_built_is_used(void **state)
{
    const char *dir = *state;
    cached_fill c = cache_a_fresh_fill(dir);

    /* The same kernel as another NVRTC version would have keyed it. */
    fill_req f;
    fill_req_init(&f, c.u);
    fsa_compile_options opts;
    assert_int_equal(fsa_compile_options_for(&opts, FILL_TARGET), FSA_STATUS_OK);
    fsa_key_inputs in = {"fill", f.params, 1, "12.0", FILL_TARGET, opts.opts, opts.count};
    fsa_kernel_key other;
    assert_int_equal(fsa_key_build(&other, &in), FSA_STATUS_OK);
    assert_string_not_equal(other.hex, fsa_module_key_hex(c.m));
    size_t size = 0;
    const void *cubin = fsa_module_cubin(c.m, &size);
    fsa_disk_cache *dc = open_disk(dir);
    assert_int_equal(fsa_disk_cache_publish(dc, &other, FILL_TARGET, cubin, size, "fsa_fill_u32"), FSA_STATUS_OK);
    fsa_disk_cache_close(dc);
    assert_int_equal(unlink(c.path), 0);
    fsa_key_free(&other);

    const char *args[] = {"disk-hit", dir, c.us, "0", "0", NULL};
    const char *env[] = {"FSA_JIT=off", NULL};
    assert_int_equal(run_self(args, env), 0);
}

static void test_jit_off_with_a_refused_cache_says_why_there_is_no_cache(void **state)
{
    const char *dir = *state;
    assert_int_equal(chmod(dir, 0777), 0);
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_ONLY, FSA_JIT_OFF, -1);
    fsa_module *m = NULL;
    assert_int_equal(get_fill(&m, ctx, fresh_unroll()), FSA_STATUS_JIT_DISABLED);
    assert_non_null(strstr(fsa_last_error(), "no disk cache"));
    assert_non_null(strstr(fsa_last_error(), "writable by other users"));
    fsa_context_destroy(ctx);
    assert_int_equal(chmod(dir, 0700), 0);
}

static int make_readable(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    (void)flag;
    return chmod(path, S_ISDIR(sb->st_mode) ? 0755 : 0644);
}

static void test_a_cache_root_baked_into_an_image_serves_another_user_with_jit_off(void **state)
{
    (void)state;
    if (geteuid() != 0) skip(); /* needs root to own the cache and to become another user */
    char dir[] = "/tmp/fsa_image_cache.XXXXXX";
    assert_non_null(mkdtemp(dir));
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fill_or_fail(ctx, u);
    fsa_context_destroy(ctx);
    /* What an image build leaves: root's files, readable by all, writable by root only. */
    assert_int_equal(nftw(dir, make_readable, 16, FTW_PHYS), 0);

    char us[16];
    snprintf(us, sizeof us, "%d", u);
    const char *args[] = {"disk-hit", dir, us, "0", "1", NULL};
    const char *env[] = {"FSA_TEST_AS_UID=65534", "FSA_CACHE_MODE=ro", "FSA_JIT=off", NULL};
    int rc = run_self(args, env);
    fsa_test_rmtree(dir);
    if (rc == FSA_TEST_SKIP_CODE) skip();
    assert_int_equal(rc, 0);
}

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    data[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return data;
}

static void test_the_same_kernel_compiled_from_two_working_directories_has_the_same_bytes(void **state)
{
    const char *dir = *state;
    int u = fresh_unroll();
    char us[16], cache[2][1024], cwd[2][1024], env[2][1100], path[2][1024], name[32];
    snprintf(us, sizeof us, "%d", u);
    snprintf(name, sizeof name, "fill_u%d", u);
    for (int i = 0; i < 2; i++) {
        snprintf(cache[i], sizeof cache[i], "%s/cache%d", dir, i);
        snprintf(cwd[i], sizeof cwd[i], "%s/%s", dir, i ? "a/much/longer/working/directory" : "here");
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", cwd[i]);
        assert_int_equal(system(cmd), 0);
        snprintf(env[i], sizeof env[i], "FSA_TEST_CHDIR=%s", cwd[i]);
        const char *args[] = {"build", cache[i], us, "0", "0", NULL};
        const char *extra[] = {env[i], NULL};
        assert_int_equal(run_self(args, extra), 0);
        entry_list l = inspect_cache(cache[i], 0, NULL);
        assert_int_equal(l.n, 1);
        assert_string_equal(l.e[0].name, name);
        snprintf(path[i], sizeof path[i], "%s", l.e[0].path);
    }
    size_t n0 = 0, n1 = 0;
    char *a = read_file(path[0], &n0), *b = read_file(path[1], &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(a, b, n0);
    /* No trace of either directory (nor of the test's own). */
    assert_null(memmem(a, n0, dir, strlen(dir)));
    free(a);
    free(b);
}

/* ======================================================================== */
/* Plans                                                                    */
/* ======================================================================== */

static fsa_plan *plan_or_fail(fsa_context *ctx, fsa_algorithm algorithm, uint64_t limit)
{
    fsa_selected_attention_desc d = small_desc(algorithm, limit);
    fsa_plan *plan = NULL;
    fsa_status st = fsa_plan_create(&plan, ctx, &d);
    if (st != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    assert_non_null(plan);
    return plan;
}

/* What the first plan of the small shape cost: modules compiled and kernel
 * lookups made (a module can serve several kernels). */
static uint64_t g_plan_modules, g_plan_lookups;

static void test_an_offline_plan_puts_the_forward_kernels_in_the_cache(void **state)
{
    (void)state;
    /* Must be the first plan of this shape in the process. */
    fsa_context *ctx = context_or_fail(g_plan_dir, PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_plan *plan = plan_or_fail(ctx, FSA_ALGORITHM_AUTO, 0);
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(s.write_failures, 0);
    assert_int_equal(s.corrupt_entries, 0);
    /* index, main, reduce and nsa at least; the index module serves two kernels. */
    assert_true(s.compiles >= 4);
    assert_true(s.memory_hits >= 1);

    uint64_t bad = 99;
    entry_list v = inspect_cache(g_plan_dir, 1, &bad);
    assert_int_equal(bad, 0);
    /* Every compiled module was published once. */
    assert_int_equal(v.n, s.compiles);
    static const char *const prefixes[] = {"sel_index", "sel_fwd_main", "sel_fwd_reduce", "sel_fwd_nsa"};
    size_t found[4] = {0};
    for (size_t j = 0; j < v.n; j++) {
        assert_string_equal(v.e[j].target, PLAN_TARGET);
        assert_true(v.e[j].valid);
        int known = 0;
        for (size_t i = 0; i < 4; i++)
            if (strncmp(v.e[j].name, prefixes[i], strlen(prefixes[i])) == 0) {
                found[i]++;
                known = 1;
            }
        if (!known) fail_msg("unexpected entry %s", v.e[j].name);
        /* Kernels that depend on the shape say so in their names. */
        if (strncmp(v.e[j].name, "sel_fwd_", 8) == 0 &&
            (strstr(v.e[j].name, "_bf16_") == NULL || strstr(v.e[j].name, "dv64_g2") == NULL))
            fail_msg("entry %s does not name the shape", v.e[j].name);
    }
    for (size_t i = 0; i < 4; i++)
        if (found[i] == 0) fail_msg("no entry named %s*", prefixes[i]);
    g_plan_modules = s.compiles;
    g_plan_lookups = s.compiles + s.memory_hits;

    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    const char *why = NULL;
    assert_int_equal(fsa_plan_algorithm(&a, &why, plan, 1000), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_FSA); /* G = 2 */
    assert_non_null(why);
    assert_true(why[0] != '\0');

    fsa_plan_destroy(plan);
    fsa_context_destroy(ctx);
}

static void test_a_second_context_and_a_fresh_process_build_the_same_plan_without_compiling(void **state)
{
    (void)state;
    if (g_plan_modules == 0) skip(); /* the first plan test did not run or failed */
    fsa_context *ctx = context_or_fail(g_plan_dir, PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_plan *plan = plan_or_fail(ctx, FSA_ALGORITHM_AUTO, 0);
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, 0);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(s.memory_hits, g_plan_lookups);
    fsa_plan_destroy(plan);
    fsa_context_destroy(ctx);

    char modules[24], lookups[24];
    snprintf(modules, sizeof modules, "%llu", (unsigned long long)g_plan_modules);
    snprintf(lookups, sizeof lookups, "%llu", (unsigned long long)g_plan_lookups);
    const char *args[] = {"plan-disk", g_plan_dir, modules, lookups, NULL};
    assert_int_equal(run_self(args, NULL), 0);
    assert_int_equal(inspect_cache(g_plan_dir, 0, NULL).n, g_plan_modules);
}

static int count_named(const fsa_cache_entry_info *info, void *user)
{
    if (strcmp(info->name, "sel_check") == 0) (*(int *)user)++;
    return 0;
}

static void test_check_mode_is_off_by_default_and_its_plans_bring_the_check_kernel(void **state)
{
    (void)state;
    char *dir = fsa_test_mkdtemp("fsa_jit_check");
    assert_non_null(dir);
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = PLAN_TARGET;
    o.cache_dir = dir;
    o.log = -1;
    fsa_context *plain = NULL, *checking = NULL, *from_env = NULL;
    assert_int_equal(fsa_context_create(&plain, &o), FSA_STATUS_OK);
    assert_int_equal(plain->check, 0);
    fsa_plan *plan = plan_or_fail(plain, FSA_ALGORITHM_AUTO, 0);
    assert_null(plan->checker);
    fsa_plan_destroy(plan);
    int n = 0;
    assert_int_equal(fsa_cache_list(plain, count_named, &n), FSA_STATUS_OK);
    assert_int_equal(n, 0);

    o.check = 1;
    assert_int_equal(fsa_context_create(&checking, &o), FSA_STATUS_OK);
    plan = plan_or_fail(checking, FSA_ALGORITHM_AUTO, 0);
    assert_non_null(plan->checker);
    fsa_plan_destroy(plan);
    assert_int_equal(fsa_cache_list(checking, count_named, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);

    o.check = 0;
    assert_int_equal(setenv("FSA_CHECK", "1", 1), 0);
    assert_int_equal(fsa_context_create(&from_env, &o), FSA_STATUS_OK);
    unsetenv("FSA_CHECK");
    assert_int_equal(from_env->check, 1);
    fsa_context_destroy(from_env);
    fsa_context_destroy(checking);
    fsa_context_destroy(plain);
    fsa_test_rmtree(dir);
    free(dir);
}

static void test_workspace_size_is_zero_without_tokens_and_grows_with_tokens(void **state)
{
    (void)state;
    fsa_context *ctx = context_or_fail(g_plan_dir, PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_plan *fsa = plan_or_fail(ctx, FSA_ALGORITHM_FSA, 0);
    fsa_plan *nsa = plan_or_fail(ctx, FSA_ALGORITHM_NSA, 0);
    assert_int_equal(stats_of(ctx).compiles, 0);

    size_t w0 = 99, w1000 = 0, w2000 = 0, w1000b4 = 0, w_nsa = 99;
    assert_int_equal(fsa_plan_workspace_size(&w0, fsa, 0, 0), FSA_STATUS_OK);
    assert_int_equal(w0, 0);
    w0 = 99;
    assert_int_equal(fsa_plan_workspace_size(&w0, fsa, 0, 1), FSA_STATUS_OK);
    assert_int_equal(w0, 0);
    assert_int_equal(fsa_plan_workspace_size(&w1000, fsa, 1000, 1), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size(&w2000, fsa, 2000, 1), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size(&w1000b4, fsa, 1000, 4), FSA_STATUS_OK);
    assert_true(w1000 > 0);
    assert_true(w2000 > w1000);
    assert_true(w1000b4 >= w1000);
    /* The NSA path needs no workspace. */
    assert_int_equal(fsa_plan_workspace_size(&w_nsa, nsa, 1000, 1), FSA_STATUS_OK);
    assert_int_equal(w_nsa, 0);

    size_t w = 0;
    assert_int_equal(fsa_plan_workspace_size(&w, fsa, -1, 1), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fsa_plan_workspace_size(&w, fsa, 10, 0), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fsa_plan_workspace_size(&w, fsa, 10, -1), FSA_STATUS_INVALID_ARGUMENT);

    fsa_algorithm a;
    assert_int_equal(fsa_plan_algorithm(&a, NULL, nsa, 1000), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_NSA);
    fsa_plan_destroy(fsa);
    fsa_plan_destroy(nsa);
    fsa_context_destroy(ctx);
}

/* A backward plan with a group of 16: AUTO takes the FSA-order dq (measured
 * never slower), a forced order is kept, and only the FSA order needs the
 * per-pair dq rows in its workspace. */
static void test_a_backward_plan_chooses_the_dq_order_per_call_and_sizes_the_workspace_for_it(void **state)
{
    (void)state;
    fsa_context *ctx = context_or_fail(g_plan_dir, PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_selected_attention_desc d = small_desc(FSA_ALGORITHM_AUTO, 0);
    d.num_q_heads = 16;
    d.backward = 1;
    fsa_plan *autop = NULL, *fsa = NULL, *nsa = NULL, *fwd_only = NULL;
    if (fsa_plan_create(&autop, ctx, &d) != FSA_STATUS_OK) fail_msg("plan: %s", fsa_last_error());
    d.algorithm = FSA_ALGORITHM_FSA;
    assert_int_equal(fsa_plan_create(&fsa, ctx, &d), FSA_STATUS_OK);
    d.algorithm = FSA_ALGORITHM_NSA;
    assert_int_equal(fsa_plan_create(&nsa, ctx, &d), FSA_STATUS_OK);
    d.backward = 0;
    assert_int_equal(fsa_plan_create(&fwd_only, ctx, &d), FSA_STATUS_OK);

    fsa_algorithm a = FSA_ALGORITHM_AUTO;
    const char *why = NULL;
    assert_int_equal(fsa_plan_algorithm_bwd(&a, &why, autop, 64), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_FSA);
    assert_non_null(strstr(why, "heuristic"));
    assert_int_equal(fsa_plan_algorithm_bwd(&a, &why, autop, 65536), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_FSA);
    assert_int_equal(fsa_plan_algorithm_bwd(&a, &why, fsa, 256), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_FSA);
    assert_non_null(strstr(why, "forced"));
    assert_int_equal(fsa_plan_algorithm_bwd(&a, NULL, nsa, 65536), FSA_STATUS_OK);
    assert_int_equal(a, FSA_ALGORITHM_NSA);
    assert_int_equal(fsa_plan_algorithm_bwd(&a, NULL, fwd_only, 256), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fsa_plan_algorithm_bwd(NULL, NULL, autop, 256), FSA_STATUS_NULL_POINTER);

    /* dq rows: Hkv * T * K * G * D * 2 bytes on the FSA order only (whose unsorted lists, Hkv * T * K
     * entries, share their bytes). */
    const int64_t T = 4096;
    size_t w_fsa = 0, w_nsa = 0;
    assert_int_equal(fsa_plan_workspace_size_bwd(&w_fsa, fsa, T, 1), FSA_STATUS_OK);
    assert_int_equal(fsa_plan_workspace_size_bwd(&w_nsa, nsa, T, 1), FSA_STATUS_OK);
    assert_true(w_nsa > 0);
    assert_true(w_fsa + (size_t)T * 4 * 4 >= w_nsa + (size_t)T * 4 * 16 * 64 * 2);
    size_t w = 0;
    assert_int_equal(fsa_plan_workspace_size_bwd(&w, fwd_only, T, 1), FSA_STATUS_INVALID_ARGUMENT);

    fsa_plan_destroy(autop);
    fsa_plan_destroy(fsa);
    fsa_plan_destroy(nsa);
    fsa_plan_destroy(fwd_only);
    fsa_context_destroy(ctx);
}

static void test_a_workspace_limit_bounds_the_workspace_size(void **state)
{
    (void)state;
    const uint64_t limit = 64 * 1024;
    fsa_context *ctx = context_or_fail(g_plan_dir, PLAN_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fsa_plan *limited = plan_or_fail(ctx, FSA_ALGORITHM_FSA, limit);
    fsa_plan *free_plan = plan_or_fail(ctx, FSA_ALGORITHM_FSA, FSA_WORKSPACE_UNLIMITED);
    fsa_plan *default_plan = plan_or_fail(ctx, FSA_ALGORITHM_FSA, 0); /* 0: the default cap */
    const int64_t tokens[] = {1, 100, 1000, 10000, 100000, 4000000};
    int over_default = 0;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        size_t w = 0, unlimited = 0, by_default = 0;
        assert_int_equal(fsa_plan_workspace_size(&w, limited, tokens[i], 1), FSA_STATUS_OK);
        assert_int_equal(fsa_plan_workspace_size(&unlimited, free_plan, tokens[i], 1), FSA_STATUS_OK);
        assert_int_equal(fsa_plan_workspace_size(&by_default, default_plan, tokens[i], 1), FSA_STATUS_OK);
        if (tokens[i] <= 100000 && (w == 0 || w > limit))
            fail_msg("T %lld: %zu bytes with a limit of %llu", (long long)tokens[i], w, (unsigned long long)limit);
        assert_true(w <= unlimited);
        if (unlimited > limit) assert_true(w < unlimited);
        /* The default cap: the uncapped size while that fits, else at most the cap. */
        const uint64_t cap = fsa_call_workspace_cap(default_plan, FSA_OP_FWD, tokens[i]);
        assert_true(by_default <= cap);
        if (unlimited <= cap) assert_int_equal(by_default, unlimited);
        else over_default = 1;
    }
    assert_true(over_default); /* the largest problem needs the cap */
    /* With a million tokens the per-block arrays alone exceed the limit:
     * then the size is that of a one-head, one-token chunk. */
    size_t w = 0;
    assert_int_equal(fsa_plan_workspace_size(&w, limited, 1000000, 1), FSA_STATUS_OK);
    fsa_fsa_layout one;
    fsa_fsa_layout_for(&one, limited, 1000000, 1, 1, 1);
    assert_true(one.total > limit);
    assert_int_equal(w, one.total);
    fsa_plan_destroy(limited);
    fsa_plan_destroy(free_plan);
    fsa_plan_destroy(default_plan);
    fsa_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return child_main(argc - 2, argv + 2);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_a_first_request_compiles_once_and_publishes_one_entry_under_v1_target),
        T(test_a_second_request_in_the_same_process_is_a_memory_hit),
        T(test_sixteen_threads_asking_for_one_new_kernel_compile_it_once),
        T(test_a_fresh_process_gets_the_kernel_from_disk_without_compiling),
        T(test_processes_and_threads_racing_for_one_new_kernel_publish_exactly_one_valid_entry),
        T(test_a_truncated_entry_is_counted_corrupt_and_rebuilt_once_in_a_fresh_process),
        T(test_an_entry_with_a_flipped_payload_byte_is_counted_corrupt_and_rebuilt_once),
        T(test_an_entry_with_a_flipped_key_byte_is_counted_corrupt_and_rebuilt_once),
        T(test_a_directory_in_place_of_an_entry_is_counted_once_and_reported_as_a_write_failure),
        T(test_an_empty_cache_dir_option_means_the_default_directory),
        T(test_a_stopped_process_holding_a_kernels_lock_does_not_keep_others_from_compiling_it),
        T(test_cache_mode_off_compiles_and_writes_nothing),
        T(test_read_only_mode_with_an_empty_directory_compiles_into_memory_and_writes_nothing),
        T(test_read_only_mode_serves_entries_that_are_already_on_disk),
        T(test_a_cache_directory_under_a_regular_file_keeps_kernels_in_memory_and_warns_once),
        T(test_a_cache_directory_without_write_permission_keeps_kernels_in_memory_and_warns_once),
        T(test_a_target_directory_without_write_permission_keeps_kernels_in_memory_and_warns_once),
        T(test_a_refused_target_directory_keeps_kernels_in_memory_and_warns_once),
        T(test_a_cache_directory_writable_by_others_is_refused_and_left_untouched),
        T(test_a_cache_directory_owned_by_another_user_is_refused_and_left_untouched),
        T(test_jit_off_with_an_empty_cache_is_jit_disabled_and_names_the_kernel),
        T(test_jit_off_loads_a_kernel_that_is_on_disk),
        T(test_a_kernel_compiled_for_one_cache_is_published_to_the_next_cache_that_asks),
        T(test_jit_off_plan_create_on_an_empty_cache_is_jit_disabled_naming_a_kernel),
        T(test_without_nvrtc_cached_kernels_load_and_uncached_ones_fail_with_no_nvrtc),
        T(test_jit_off_never_loads_nvrtc_so_a_broken_libnvrtc_cannot_harm_it),
        T(test_the_same_kernel_compiled_from_two_working_directories_has_the_same_bytes),
        T(test_with_jit_off_an_entry_that_another_nvrtc_built_is_used),
        T(test_jit_off_with_a_refused_cache_says_why_there_is_no_cache),
        T(test_a_cache_root_baked_into_an_image_serves_another_user_with_jit_off),
        cmocka_unit_test(test_an_offline_plan_puts_the_forward_kernels_in_the_cache),
        cmocka_unit_test(test_a_second_context_and_a_fresh_process_build_the_same_plan_without_compiling),
        cmocka_unit_test(test_check_mode_is_off_by_default_and_its_plans_bring_the_check_kernel),
        cmocka_unit_test(test_workspace_size_is_zero_without_tokens_and_grows_with_tokens),
        cmocka_unit_test(test_a_backward_plan_chooses_the_dq_order_per_call_and_sizes_the_workspace_for_it),
        cmocka_unit_test(test_a_workspace_limit_bounds_the_workspace_size),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
