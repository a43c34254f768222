/* The public API's answers to bad arguments of the calls that take an
 * offline context (sm_90a, cache off, no GPU): the cache counters check their
 * struct's size and pointers (one of the first version is written without
 * what follows it), cache maintenance without a disk cache is a cache I/O
 * error, and a fill is no device, with nothing compiled for it. */
#include "api_validation_fixture.h"

#include "base/struct_size.h"

#include <stddef.h>
#include <string.h>

static void test_cache_stats_checks_its_arguments(void **state)
{
    fsa_context *ctx = *state;
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    s.struct_size = FSA_CACHE_STATS_FIRST_SIZE - 8;
    EXPECT_REFUSED(FSA_STATUS_STRUCT_SIZE, fsa_context_cache_stats(&s, ctx));
    s.struct_size = 0;
    EXPECT_REFUSED(FSA_STATUS_STRUCT_SIZE, fsa_context_cache_stats(&s, ctx));
    s.struct_size = sizeof s + 8;
    EXPECT_REFUSED(FSA_STATUS_STRUCT_SIZE, fsa_context_cache_stats(&s, ctx));
    s.struct_size = sizeof s;
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_context_cache_stats(NULL, ctx));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_context_cache_stats(&s, NULL));
    /* A fresh context has counted nothing. */
    assert_int_equal(fsa_context_cache_stats(&s, ctx), FSA_STATUS_OK);
    assert_int_equal(s.compiles + s.memory_hits + s.disk_hits + s.corrupt_entries + s.write_failures, 0);
}

static void test_cache_stats_of_the_first_version_are_written_without_what_follows_them(void **state)
{
    fsa_context *ctx = *state;
    _Alignas(16) unsigned char mem[sizeof(fsa_cache_stats) + 64];
    memset(mem, 0xa5, sizeof mem);
    const size_t first = FSA_CACHE_STATS_FIRST_SIZE;
    memcpy(mem, &first, sizeof first);
    assert_int_equal(fsa_context_cache_stats((fsa_cache_stats *)(void *)mem, ctx), FSA_STATUS_OK);
    fsa_cache_stats s;
    memcpy(&s, mem, sizeof s);
    assert_int_equal(s.struct_size, first);
    assert_int_equal(s.compiles + s.memory_hits + s.disk_hits, 0); /* written: a fresh context counted nothing */
    for (size_t i = first; i < sizeof mem; i++) assert_int_equal(mem[i], 0xa5);
}

static int count_visit(const fsa_cache_entry_info *e, void *user)
{
    (void)e;
    ++*(int *)user;
    return 0;
}

static void test_cache_maintenance_without_a_disk_cache_is_cache_io(void **state)
{
    fsa_context *ctx = *state; /* cache off */
    int n = 0;
    uint64_t bad = 7, removed = 7, left = 7;
    EXPECT_REFUSED(FSA_STATUS_CACHE_IO, fsa_cache_list(ctx, count_visit, &n));
    EXPECT_REFUSED(FSA_STATUS_CACHE_IO, fsa_cache_verify(ctx, count_visit, &n, &bad));
    EXPECT_REFUSED(FSA_STATUS_CACHE_IO, fsa_cache_prune(ctx, 0, &removed, &left));
    assert_int_equal(n, 0);
    /* The refusals leave the outputs as they were (include/fsa/cache.h). */
    assert_int_equal(bad, 7);
    assert_int_equal(removed, 7);
    assert_int_equal(left, 7);
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_cache_list(NULL, count_visit, &n));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_cache_list(ctx, NULL, &n)); /* the callback before the cache */
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_cache_verify(NULL, NULL, NULL, &bad));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_cache_prune(NULL, 0, NULL, NULL));
}

static void test_fill_on_an_offline_context_is_no_device(void **state)
{
    fsa_context *ctx = *state;
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_fill_u32(ctx, 0x10000, 1u, 64, NULL));
    /* Even a zero-length fill: the context cannot run anything. */
    EXPECT_REFUSED(FSA_STATUS_NO_DEVICE, fsa_fill_u32(ctx, 0x10000, 1u, 0, NULL));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_fill_u32(NULL, 0x10000, 1u, 64, NULL));
    /* Nothing was compiled for it. */
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    assert_int_equal(fsa_context_cache_stats(&s, ctx), FSA_STATUS_OK);
    assert_int_equal(s.compiles, 0);
}

int main(void)
{
#define OFF(fn) cmocka_unit_test_setup_teardown(fn, setup_offline, teardown_offline)
    const struct CMUnitTest tests[] = {
        OFF(test_cache_stats_checks_its_arguments),
        OFF(test_cache_stats_of_the_first_version_are_written_without_what_follows_them),
        OFF(test_cache_maintenance_without_a_disk_cache_is_cache_io),
        OFF(test_fill_on_an_offline_context_is_no_device),
    };
#undef OFF
    return cmocka_run_group_tests(tests, NULL, NULL);
}
