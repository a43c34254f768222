/* The JIT cache within one process: a first request compiles the kernel
 * once and publishes one entry under v1/<target>; later requests, from this
 * context or another, are memory hits, and a kernel compiled for one cache is
 * published to the next cache that asks for it; sixteen threads asking for one
 * new kernel at once compile it once, and threads asking for several new
 * kernels at once compile each once, NVRTC running in several of them at once
 * (what a ThreadSanitizer build, -DFSA_SANITIZE=thread, checks for races);
 * threads of one new cache asking for a kernel at once leave the module room
 * to remember the next cache. */
#include "jit_cache_child.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

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

/* ======================================================================== */
/* Single flight                                                            */
/* ======================================================================== */

/* Thread i asks ctx for fill with unroll[i % kinds]; all start at once. */
static void race(race_thread *t, int n, fsa_context *ctx, const int *unroll, int kinds)
{
    pthread_barrier_t barrier;
    pthread_t tid[16];
    assert_true(n <= 16);
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) t[i] = (race_thread){ctx, unroll[i % kinds], &barrier, FSA_STATUS_INTERNAL, NULL};
    for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&tid[i], NULL, race_thread_main, &t[i]), 0);
    for (int i = 0; i < n; i++) assert_int_equal(pthread_join(tid[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < n; i++)
        if (t[i].st != FSA_STATUS_OK) fail_msg("thread %d: %s", i, fsa_status_name(t[i].st));
}

static void test_sixteen_threads_asking_for_one_new_kernel_compile_it_once(void **state)
{
    enum { N = 16 };
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    size_t modules_before = fsa_module_count();
    race_thread t[N];
    race(t, N, ctx, &u, 1);

    for (int i = 0; i < N; i++) assert_ptr_equal(t[i].m, t[0].m);
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

static void test_eight_threads_asking_for_four_new_kernels_at_once_compile_each_once(void **state)
{
    enum { KINDS = 4, N = 2 * KINDS };
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u[KINDS];
    for (int k = 0; k < KINDS; k++) u[k] = fresh_unroll();
    size_t modules_before = fsa_module_count();
    race_thread t[N];
    race(t, N, ctx, u, KINDS);

    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "fill_u%d", u[i % KINDS]);
        assert_string_equal(fsa_module_name(t[i].m), name);
        assert_ptr_equal(t[i].m, t[i % KINDS].m);
    }
    fsa_cache_stats s = stats_of(ctx);
    assert_int_equal(s.compiles, KINDS);
    assert_int_equal(s.memory_hits, N - KINDS);
    assert_int_equal(s.disk_hits, 0);
    assert_int_equal(s.corrupt_entries, 0);
    assert_int_equal(s.write_failures, 0);
    assert_int_equal(fsa_module_count(), modules_before + KINDS);

    uint64_t bad = 99;
    entry_list v = inspect_cache(dir, 1, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(v.n, KINDS);

    fsa_context_destroy(ctx);
}

static void test_threads_of_one_new_cache_asking_at_once_leave_room_to_remember_the_next_cache(void **state)
{
    /* A module remembers the caches that hold it (8 of them), so that asking
     * again costs no look at the disk. Sixteen contexts on one new cache that
     * ask at once all find it unknown; it must still take one place only. */
    enum { N = 16 };
    const char *dir = *state;
    char *second = fsa_test_mkdtemp("fsa_jit_second"), *third = fsa_test_mkdtemp("fsa_jit_third");
    assert_non_null(second);
    assert_non_null(third);
    fsa_context *a = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    int u = fresh_unroll();
    fsa_module *m = fill_or_fail(a, u);
    fsa_context *b[N];
    race_thread t[N];
    pthread_barrier_t barrier;
    pthread_t tid[N];
    pthread_barrier_init(&barrier, NULL, N);
    for (int i = 0; i < N; i++) {
        b[i] = context_or_fail(second, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
        t[i] = (race_thread){b[i], u, &barrier, FSA_STATUS_INTERNAL, NULL};
    }
    for (int i = 0; i < N; i++) assert_int_equal(pthread_create(&tid[i], NULL, race_thread_main, &t[i]), 0);
    for (int i = 0; i < N; i++) assert_int_equal(pthread_join(tid[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < N; i++) {
        if (t[i].st != FSA_STATUS_OK) fail_msg("thread %d: %s", i, fsa_status_name(t[i].st));
        assert_ptr_equal(t[i].m, m);
    }
    assert_int_equal(inspect_cache(second, 0, NULL).n, 1);

    /* The next cache is published to and remembered: asking again after
     * its entry is gone costs no further look at the disk. */
    fsa_context *c = context_or_fail(third, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_ON, -1);
    assert_ptr_equal(fill_or_fail(c, u), m);
    char name[32], path[1024];
    snprintf(name, sizeof name, "fill_u%d", u);
    the_one_entry(path, sizeof path, third, FILL_TARGET, name, fsa_module_key_hex(m));
    assert_int_equal(unlink(path), 0);
    fill_or_fail(c, u);
    assert_int_equal(inspect_cache(third, 0, NULL).n, 0);

    fsa_context_destroy(c);
    for (int i = 0; i < N; i++) fsa_context_destroy(b[i]);
    fsa_context_destroy(a);
    fsa_test_rmtree(third);
    fsa_test_rmtree(second);
    free(third);
    free(second);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_a_first_request_compiles_once_and_publishes_one_entry_under_v1_target),
        T(test_a_second_request_in_the_same_process_is_a_memory_hit),
        T(test_a_kernel_compiled_for_one_cache_is_published_to_the_next_cache_that_asks),
        T(test_sixteen_threads_asking_for_one_new_kernel_compile_it_once),
        T(test_eight_threads_asking_for_four_new_kernels_at_once_compile_each_once),
        T(test_threads_of_one_new_cache_asking_at_once_leave_room_to_remember_the_next_cache),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
