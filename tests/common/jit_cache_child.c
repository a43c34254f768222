/* The JIT cache tests' child processes (jit_cache_child.h). */
#include "jit_cache_child.h"

#include "attention/plan.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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
    /* and says what the loader tried (the parent sets FSA_NVRTC_PATH to a missing file): the whole record in
     * the error's log, whatever the message's fixed size leaves of it after a long cache path */
    const char *path = getenv("FSA_NVRTC_PATH"), *log = fsa_last_error_info()->log;
    CHILD_CHECK(path != NULL && log != NULL && strstr(log, path) != NULL && strstr(log, "FSA_NVRTC_PATH") != NULL,
                "error log does not name FSA_NVRTC_PATH: %s", log ? log : "(none)");
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

void *race_thread_main(void *p)
{
    race_thread *t = p;
    pthread_barrier_wait(t->barrier);
    t->st = get_fill(&t->m, t->ctx, t->unroll);
    return NULL;
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

int child_main(int argc, char **argv)
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
pid_t spawn_self(const char *const *args, const char *const *extra_env, const int *close_fds)
{
    const char *argv[16];
    size_t n = 0;
    argv[n++] = program_invocation_short_name;
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
int wait_child(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
    if (WIFSIGNALED(status)) fail_msg("child %d killed by signal %d", (int)pid, WTERMSIG(status));
    return WEXITSTATUS(status);
}

int run_self(const char *const *args, const char *const *extra_env)
{
    return wait_child(spawn_self(args, extra_env, NULL));
}
