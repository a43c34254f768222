/* The fill kernel through the whole JIT path on the GPU: render, compile,
 * publish to the disk cache, load from disk in a second process, launch, and
 * compare every word; verify on the device loads the entry. */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *g_cache_dir;
static fsa_context *g_ctx;

static void fill_and_check(fsa_context *ctx, size_t words, size_t offset_words, uint32_t value)
{
    const size_t total = words + offset_words + 16;
    uint64_t buf = fsa_test_dalloc(total * 4);
    fsa_test_dfill(buf, 0xab, total * 4);
    fsa_status st = fsa_fill_u32(ctx, buf + offset_words * 4, value, words, NULL);
    if (st != FSA_STATUS_OK) fail_msg("fill: %s", fsa_last_error());
    fsa_test_sync();
    uint32_t *host = malloc(total * 4);
    assert_non_null(host);
    fsa_test_d2h(host, buf, total * 4);
    for (size_t i = 0; i < total; i++) {
        uint32_t expect = (i >= offset_words && i < offset_words + words) ? value : 0xababababu;
        if (host[i] != expect) fail_msg("word %zu is %08x, expected %08x", i, host[i], expect);
    }
    free(host);
    fsa_test_dfree(buf);
}

static int count_entries(const fsa_cache_entry_info *e, void *user)
{
    if (strstr(e->name, "fill") == e->name) (*(int *)user)++;
    return 0;
}

static void test_fill_compiles_publishes_and_writes_exactly_its_words(void **state)
{
    (void)state;
    fsa_cache_stats s0 = FSA_CACHE_STATS_INIT, s1 = FSA_CACHE_STATS_INIT;
    assert_int_equal(fsa_context_cache_stats(&s0, g_ctx), FSA_STATUS_OK);
    fill_and_check(g_ctx, 1000003, 1, 0x12345678u); /* odd length, 4-byte but not 16-byte aligned */
    fill_and_check(g_ctx, 7, 0, 0xdeadbeefu);
    fill_and_check(g_ctx, 1u << 20, 4, 0u);
    assert_int_equal(fsa_context_cache_stats(&s1, g_ctx), FSA_STATUS_OK);
    assert_int_equal(s1.compiles - s0.compiles, 1);
    int entries = 0;
    assert_int_equal(fsa_cache_list(g_ctx, count_entries, &entries), FSA_STATUS_OK);
    assert_int_equal(entries, 1);
}

static void test_a_second_process_loads_the_fill_kernel_from_disk(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_fill", "--child", g_cache_dir, (char *)NULL);
        _exit(99);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static int count_loaded(const fsa_cache_entry_info *e, void *user)
{
    int *valid_loaded = user;
    valid_loaded[0] += e->valid;
    valid_loaded[1] += e->loaded;
    return 0;
}

static void test_verify_on_the_device_loads_the_fill_entry_and_an_offline_verify_does_not(void **state)
{
    (void)state;
    int on_device[2] = {0, 0}, offline[2] = {0, 0};
    uint64_t bad = 99;
    assert_int_equal(fsa_cache_verify(g_ctx, count_loaded, on_device, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 0);
    assert_int_equal(on_device[0], 1);
    assert_int_equal(on_device[1], 1); /* its image ran through the driver's loader on this GPU */
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.cache_dir = g_cache_dir;
    o.device = FSA_DEVICE_NONE;
    o.target = fsa_context_target(g_ctx);
    fsa_context *disk_only = NULL;
    assert_int_equal(fsa_context_create(&disk_only, &o), FSA_STATUS_OK);
    assert_int_equal(fsa_cache_verify(disk_only, count_loaded, offline, &bad), FSA_STATUS_OK);
    assert_int_equal(offline[0], 1);
    assert_int_equal(offline[1], 0);
    fsa_context_destroy(disk_only);
}

static void test_bad_fill_arguments_return_statuses(void **state)
{
    (void)state;
    assert_int_equal(fsa_fill_u32(NULL, 256, 0, 1, NULL), FSA_STATUS_NULL_POINTER);
    assert_int_equal(fsa_fill_u32(g_ctx, 0, 0, 1, NULL), FSA_STATUS_MISALIGNED);
    assert_int_equal(fsa_fill_u32(g_ctx, 258, 0, 1, NULL), FSA_STATUS_MISALIGNED);
    assert_int_equal(fsa_fill_u32(g_ctx, 0, 0, 0, NULL), FSA_STATUS_OK); /* nothing to do */
    /* Words past the top of the address space would wrap to low memory: refused before any launch. */
    assert_int_equal(fsa_fill_u32(g_ctx, UINT64_MAX & ~UINT64_C(3), 0, 2, NULL), FSA_STATUS_INVALID_ARGUMENT);
    assert_int_equal(fsa_fill_u32(g_ctx, 256, 0, (UINT64_C(1) << 62), NULL), FSA_STATUS_INVALID_ARGUMENT);
}

/* Runs in a fresh process: the kernel must come from the disk cache. */
static int child_main(const char *cache_dir)
{
    fsa_context *ctx = fsa_test_gpu_context_or_skip(cache_dir);
    fill_and_check(ctx, 4099, 3, 0x0badf00du);
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    if (fsa_context_cache_stats(&s, ctx) != FSA_STATUS_OK) return 2;
    fprintf(stderr, "child: disk hits %llu, compiles %llu\n", (unsigned long long)s.disk_hits,
            (unsigned long long)s.compiles);
    fsa_context_destroy(ctx);
    return (s.disk_hits == 1 && s.compiles == 0) ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);
    g_cache_dir = fsa_test_mkdtemp("fill-cache");
    g_ctx = fsa_test_gpu_context_or_skip(g_cache_dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_compiles_publishes_and_writes_exactly_its_words),
        cmocka_unit_test(test_a_second_process_loads_the_fill_kernel_from_disk),
        cmocka_unit_test(test_verify_on_the_device_loads_the_fill_entry_and_an_offline_verify_does_not),
        cmocka_unit_test(test_bad_fill_arguments_return_statuses),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_cache_dir);
    free(g_cache_dir);
    return rc;
}
