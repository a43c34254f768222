/* JIT off and no NVRTC: with FSA_JIT=off a kernel missing from the cache is
 * JIT_DISABLED naming the kernel (also for a plan, and when the cache is
 * refused), while kernels on disk load, also ones another NVRTC built and ones
 * in a cache root baked into an image for another user; JIT off never loads
 * NVRTC, so a broken libnvrtc cannot harm it; and without NVRTC cached kernels
 * load and uncached ones fail with NO_NVRTC. */
#include "jit_cache_child.h"

#include "jit/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void test_jit_off_loads_a_kernel_that_is_on_disk(void **state)
{
    const char *dir = *state;
    const cached_fill c = cache_a_fresh_fill(dir);
    const char *args[] = {"disk-hit", dir, c.us, "0", "0", NULL};
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
    const cached_fill c = cache_a_fresh_fill(dir);
    const char *args[] = {"disk-hit", dir, c.us, "0", "0", NULL};
    const char *env[] = {"FSA_JIT=off", broken, NULL};
    assert_int_equal(run_self(args, env), 0);
    /* The stand-in does kill a process that loads it (under AddressSanitizer or ThreadSanitizer too:
     * their handlers would turn the bus error into an exit status). */
    const char *compile[] = {"build", dir, "999", "0", "0", NULL};
    int status = 0;
    pid_t pid = spawn_self(
        compile, (const char *const[]){broken, "ASAN_OPTIONS=handle_sigbus=0", "TSAN_OPTIONS=handle_sigbus=0", NULL},
        NULL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    free(broken);
}

/* The cached fill c's entry replaced by the same kernel as NVRTC `version`
 * would have keyed it. */
static void rekey_as_built_by(const char *dir, const cached_fill *c, const char *version)
{
    fill_req f;
    fill_req_init(&f, c->u);
    fsa_compile_options opts;
    assert_int_equal(fsa_compile_options_for(&opts, FILL_TARGET), FSA_STATUS_OK);
    fsa_key_inputs in = {"fill", f.params, 1, version, FILL_TARGET, opts.opts, opts.count};
    fsa_kernel_key other;
    assert_int_equal(fsa_key_build(&other, &in), FSA_STATUS_OK);
    assert_string_not_equal(other.hex, fsa_module_key_hex(c->m));
    size_t size = 0;
    const void *cubin = fsa_module_cubin(c->m, &size);
    fsa_disk_cache *dc = open_disk(dir);
    assert_int_equal(fsa_disk_cache_publish(dc, &other, FILL_TARGET, cubin, size, "fsa_fill_u32"), FSA_STATUS_OK);
    fsa_disk_cache_close(dc);
    assert_int_equal(unlink(c->path), 0);
    fsa_key_free(&other);
}

static void test_with_jit_off_an_entry_that_another_nvrtc_built_is_used(void **state)
{
    const char *dir = *state;
    cached_fill c = cache_a_fresh_fill(dir);
    rekey_as_built_by(dir, &c, "12.0");

    const char *args[] = {"disk-hit", dir, c.us, "0", "0", NULL};
    const char *env[] = {"FSA_JIT=off", NULL};
    assert_int_equal(run_self(args, env), 0);
}

/* An entry of an NVRTC newer than every driver: an offline context (no
 * driver) loads it, and then a context whose driver is older must still be
 * refused it, not given the copy the process already holds. */
static void test_a_kernel_an_offline_context_loaded_is_not_handed_to_an_older_driver(void **state)
{
    const char *dir = *state;
    cached_fill c = cache_a_fresh_fill(dir);
    rekey_as_built_by(dir, &c, "99.0");
    fill_req f;
    fill_req_init(&f, c.u);

    fsa_context *offline = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_READ_WRITE, FSA_JIT_OFF, -1);
    fsa_module *m = NULL;
    assert_int_equal(get_fill(&m, offline, c.u), FSA_STATUS_OK);
    fsa_jit_env older = offline->env;
    older.driver_major = 12;
    m = NULL;
    assert_int_equal(fsa_module_get(&m, &older, &f.req), FSA_STATUS_JIT_DISABLED);
    assert_null(m);
    fsa_context_destroy(offline);
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

static void test_jit_off_with_the_cache_mode_off_says_so(void **state)
{
    const char *dir = *state;
    fsa_context *ctx = context_or_fail(dir, FILL_TARGET, FSA_CACHE_MODE_OFF, FSA_JIT_OFF, -1);
    fsa_module *m = NULL;
    assert_int_equal(get_fill(&m, ctx, fresh_unroll()), FSA_STATUS_JIT_DISABLED);
    assert_non_null(strstr(fsa_last_error(), "no disk cache (the cache mode is off)"));
    fsa_context_destroy(ctx);
}

static void test_a_cache_root_baked_into_an_image_serves_another_user_with_jit_off(void **state)
{
    (void)state;
    if (geteuid() != 0) skip(); /* needs root to own the cache and to become another user */
    char dir[] = "/tmp/fsa_image_cache.XXXXXX";
    assert_non_null(mkdtemp(dir));
    const cached_fill c = cache_a_fresh_fill(dir);
    /* What an image build leaves: root's files, readable by all, writable by root only. */
    assert_int_equal(fsa_test_make_tree_readable(dir), 0);
    const char *args[] = {"disk-hit", dir, c.us, "0", "1", NULL};
    const char *env[] = {"FSA_TEST_AS_UID=65534", "FSA_CACHE_MODE=ro", "FSA_JIT=off", NULL};
    int rc = run_self(args, env);
    fsa_test_rmtree(dir);
    if (rc == FSA_TEST_SKIP_CODE) skip();
    assert_int_equal(rc, 0);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return child_main(argc - 2, argv + 2);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_jit_off_with_an_empty_cache_is_jit_disabled_and_names_the_kernel),
        T(test_jit_off_loads_a_kernel_that_is_on_disk),
        T(test_jit_off_plan_create_on_an_empty_cache_is_jit_disabled_naming_a_kernel),
        T(test_without_nvrtc_cached_kernels_load_and_uncached_ones_fail_with_no_nvrtc),
        T(test_jit_off_never_loads_nvrtc_so_a_broken_libnvrtc_cannot_harm_it),
        T(test_with_jit_off_an_entry_that_another_nvrtc_built_is_used),
        T(test_a_kernel_an_offline_context_loaded_is_not_handed_to_an_older_driver),
        T(test_jit_off_with_a_refused_cache_says_why_there_is_no_cache),
        T(test_jit_off_with_the_cache_mode_off_says_so),
        T(test_a_cache_root_baked_into_an_image_serves_another_user_with_jit_off),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
