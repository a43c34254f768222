/* Cache modes and cache directories: an empty cache_dir option means the
 * default directory; mode off compiles and writes nothing; read-only serves
 * what is on disk and keeps new kernels in memory; and a cache directory that
 * cannot be used (under a regular file, not writable, a target directory not
 * writable or refused, writable by others, owned by another user) keeps
 * kernels in memory, warns once and is left untouched. */
#include "jit_cache_child.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* v1/<target> below dir, writable by others: the cache opens, and every
 * lookup and publish in that directory is refused. */
static void make_target_directory_writable_by_others(const char *dir)
{
    char *v1 = path_in(dir, "v1");
    char *tdir = path_in(v1, FILL_TARGET);
    assert_int_equal(mkdir(v1, 0700), 0);
    assert_int_equal(mkdir(tdir, 0700), 0);
    assert_int_equal(chmod(tdir, 0777), 0);
    free(tdir);
    free(v1);
}

static void test_a_refused_target_directory_keeps_kernels_in_memory_and_warns_once(void **state)
{
    const char *dir = *state; /* the root is fine */
    make_target_directory_writable_by_others(dir);
    fsa_context *ctx = NULL;
    char *text = two_kernels_logged(&ctx, dir);
    assert_int_equal(count_below(dir), 2); /* nothing was written into it */
    expect_one_warning(text, NULL);
    free(text);
    fsa_context_destroy(ctx);
}

static void test_a_kernel_a_refused_cache_cannot_take_counts_once_per_context_among_many(void **state)
{
    /* Other contexts, live or destroyed, failing on the same kernel in refused
     * caches must not make this one count it again. */
    const char *dir = *state;
    make_target_directory_writable_by_others(dir);
    const int u = fresh_unroll();
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    fill_or_fail(ctx, u);
    fill_or_fail(ctx, u);
    assert_int_equal(stats_of(ctx).write_failures, 1);
    for (int i = 0; i < 12; i++) {
        fsa_context *other = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
        fill_or_fail(other, u);
        assert_int_equal(stats_of(other).write_failures, 1);
        fsa_context_destroy(other);
    }
    fill_or_fail(ctx, u);
    assert_int_equal(stats_of(ctx).write_failures, 1);
    fsa_context_destroy(ctx);
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

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return child_main(argc - 2, argv + 2);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_an_empty_cache_dir_option_means_the_default_directory),
        T(test_cache_mode_off_compiles_and_writes_nothing),
        T(test_read_only_mode_with_an_empty_directory_compiles_into_memory_and_writes_nothing),
        T(test_read_only_mode_serves_entries_that_are_already_on_disk),
        T(test_a_cache_directory_under_a_regular_file_keeps_kernels_in_memory_and_warns_once),
        T(test_a_cache_directory_without_write_permission_keeps_kernels_in_memory_and_warns_once),
        T(test_a_target_directory_without_write_permission_keeps_kernels_in_memory_and_warns_once),
        T(test_a_refused_target_directory_keeps_kernels_in_memory_and_warns_once),
        T(test_a_kernel_a_refused_cache_cannot_take_counts_once_per_context_among_many),
        T(test_a_cache_directory_writable_by_others_is_refused_and_left_untouched),
        T(test_a_cache_directory_owned_by_another_user_is_refused_and_left_untouched),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
