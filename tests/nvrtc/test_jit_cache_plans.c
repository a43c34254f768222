/* Offline plans and the JIT cache: a plan puts the forward kernels in the
 * cache, and a second context and a fresh process build the same plan without
 * compiling; check mode is off by default and its plans bring the check
 * kernel; and the workspace sizes of forward and backward plans (zero without
 * tokens, growing with tokens, bounded by a workspace limit, the dq order of a
 * backward plan). The plan tests share one cache directory, so that their
 * kernels compile once. */
#include "jit_cache_child.h"

#include "attention/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *g_plan_dir; /* shared by the plan tests: their kernels compile once */

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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_offline_plan_puts_the_forward_kernels_in_the_cache),
        cmocka_unit_test(test_a_second_context_and_a_fresh_process_build_the_same_plan_without_compiling),
        cmocka_unit_test(test_check_mode_is_off_by_default_and_its_plans_bring_the_check_kernel),
        cmocka_unit_test(test_workspace_size_is_zero_without_tokens_and_grows_with_tokens),
        cmocka_unit_test(test_a_backward_plan_chooses_the_dq_order_per_call_and_sizes_the_workspace_for_it),
        cmocka_unit_test(test_a_workspace_limit_bounds_the_workspace_size),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
