/* The JIT cache across processes: a fresh process gets a kernel from disk
 * without compiling it; processes and threads racing for one new kernel
 * publish exactly one valid entry (one compile, through the per-key lock); a
 * stopped process holding a kernel's lock does not keep others from compiling
 * it; and the same kernel compiled from two working directories has the same
 * bytes. */
#include "jit_cache_child.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void test_a_fresh_process_gets_the_kernel_from_disk_without_compiling(void **state)
{
    const char *dir = *state;
    const cached_fill c = cache_a_fresh_fill(dir);
    const char *args[] = {"disk-hit", dir, c.us, "1", "0", NULL};
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

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return child_main(argc - 2, argv + 2);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_a_fresh_process_gets_the_kernel_from_disk_without_compiling),
        T(test_processes_and_threads_racing_for_one_new_kernel_publish_exactly_one_valid_entry),
        T(test_a_stopped_process_holding_a_kernels_lock_does_not_keep_others_from_compiling_it),
        T(test_the_same_kernel_compiled_from_two_working_directories_has_the_same_bytes),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
