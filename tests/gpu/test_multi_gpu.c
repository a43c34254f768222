/* More than one GPU: one process driving two devices (a context and a plan
 * per device, calls in flight on both at once on their own streams: the
 * selected forward, and a paged-cache batch as a server with a model split
 * over its GPUs runs it), and two processes (this binary run again, one per
 * device) sharing one cold cache directory. Every output is checked against
 * the CPU float64 reference. Exits 77 (skipped) with fewer than two GPUs
 * (need_two_gpus: FSA_TEST_REQUIRE_GPU turns a missing driver into a failure). */
#include "attention_problem.h"
#include "kvcache_fixture.h"

#include "jit/context.h"
#include "jit/cuda_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_DEV 2

static const attn_case g_case = {"bf16_d128_g4_bk64", BF, 128, 8, 2, 64, 8, {70, 300, 1, 129}, 4, 0, 0, A_AUTO, 0, 1, 0, 1};
/* Decode, speculative tokens, an empty cache and a long one, in one batch; shared pages of 64 tokens. */
static const kvc_case g_kvc_case = {"bf16_d128_g4_page64", BF, 128, 16, 4, 64, 16, 64,
                                    {{1, 3000}, {4, 500}, {1, 0}, {8, 64}, {1, 30000}, {3, 65}},
                                    6, KVC_TOPK_HTK, 0, 1, 1, 0};

/* Exits 77 (skipped) with fewer than two GPUs. Without a driver or a device
 * at all (the driver does not load, cuDeviceGetCount fails, or it counts
 * none) that is exit 1 instead under FSA_TEST_REQUIRE_GPU
 * (fsa_test_exit_without_gpu); one GPU is a skip either way. */
static void need_two_gpus(void)
{
    const fsa_cu_api *cu = NULL;
    int n = 0;
    const fsa_status st = fsa_cu_load(&cu);
    if (st != FSA_STATUS_OK)
        fsa_test_exit_without_gpu("fsa_cu_load returned %s; last error: %s", fsa_status_name(st), fsa_last_error());
    const CUresult r = cu->DeviceGetCount(&n);
    if (r != CUDA_SUCCESS) fsa_test_exit_without_gpu("cuDeviceGetCount failed with CUresult %d", (int)r);
    if (n < 1) fsa_test_exit_without_gpu("the driver counts no device");
    if (n < N_DEV) {
        fprintf(stderr, "skipping: needs %d GPUs (%d present)\n", N_DEV, n);
        exit(FSA_TEST_SKIP_CODE);
    }
    if (!cu->StreamCreate || !cu->StreamDestroy || !cu->StreamSynchronize) {
        fprintf(stderr, "the driver lacks the stream entry points this test uses\n");
        exit(1);
    }
}

static fsa_context *device_context(int device, const char *cache_dir)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = device;
    o.cache_dir = cache_dir;
    o.log = 1;
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) fail_msg("device %d: %s", device, fsa_last_error());
    return ctx;
}

/* One device's share: its context, plan, inputs and stream; the selected
 * forward's (plan) or the paged cache's (kplan). */
typedef struct lane {
    int device;
    fsa_context *ctx;
    fsa_plan *plan;
    problem p;
    device_problem dp;
    fsa_fwd_args a;
    fsa_kvcache_plan *kplan;
    kvc_problem kp;
    kvc_device kd;
    fsa_kvcache_args ka;
    CUstream stream;
    fsa_status st;
    CUresult sync;
} lane;

/* paged: the paged-cache batch instead of the selected forward. */
static void lane_make(lane *l, int device, const char *cache_dir, int paged)
{
    const fsa_cu_api *cu = NULL;
    assert_int_equal(fsa_cu_load(&cu), FSA_STATUS_OK);
    l->device = device;
    l->ctx = device_context(device, cache_dir);
    if (paged) {
        const fsa_kvcache_desc d = kvc_desc_of(&g_kvc_case, g_kvc_case.nseq, 64);
        if (fsa_kvcache_plan_create(&l->kplan, l->ctx, &d) != FSA_STATUS_OK)
            fail_msg("paged-cache plan on device %d: %s", device, fsa_last_error());
    } else {
        fsa_selected_attention_desc d = attn_desc_of(&g_case, 0);
        if (fsa_plan_create(&l->plan, l->ctx, &d) != FSA_STATUS_OK)
            fail_msg("plan on device %d: %s", device, fsa_last_error());
    }
    /* Memory and streams belong to the device whose context is current. */
    assert_int_equal(fsa_context_enter(l->ctx), FSA_STATUS_OK);
    if (paged) {
        kvc_problem_make(&l->kp, &g_kvc_case, 0xd1d1);
        kvc_problem_reference(&l->kp);
        kvc_device_make(&l->kd, &l->kp, l->kplan);
        l->ka = kvc_args_of(&l->kd, &l->kp);
        kvc_poison(&l->kd, &l->kp);
    } else {
        problem_make(&l->p, &g_case, 0xd0d0);
        device_make(&l->dp, &l->p, &g_case, l->plan);
        l->a = fwd_args_of(&l->dp, &l->p);
        poison_fwd(&l->dp, &l->p, &g_case);
    }
    assert_int_equal(cu->StreamCreate(&l->stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    fsa_context_leave(l->ctx);
}

static void lane_free(lane *l)
{
    const fsa_cu_api *cu = NULL;
    assert_int_equal(fsa_cu_load(&cu), FSA_STATUS_OK);
    assert_int_equal(fsa_context_enter(l->ctx), FSA_STATUS_OK);
    cu->StreamDestroy(l->stream);
    if (l->kplan) kvc_device_free(&l->kd);
    else device_free(&l->dp);
    fsa_context_leave(l->ctx);
    if (l->kplan) kvc_problem_free(&l->kp);
    else problem_free(&l->p);
    fsa_kvcache_plan_destroy(l->kplan);
    fsa_plan_destroy(l->plan);
    fsa_context_destroy(l->ctx);
}

/* No cmocka assertions here: a thread of its own. Three calls back to back
 * on the lane's stream, then one wait. */
static void *lane_run(void *arg)
{
    lane *l = arg;
    const fsa_cu_api *cu = NULL;
    l->sync = CUDA_ERROR_UNKNOWN;
    if (fsa_cu_load(&cu) != FSA_STATUS_OK) return NULL;
    for (int i = 0; i < 3 && l->st == FSA_STATUS_OK; i++)
        l->st = l->kplan ? fsa_kvcache_attention(l->kplan, &l->ka, l->stream)
                         : fsa_selected_attention_fwd(l->plan, &l->a, l->stream);
    if (fsa_context_enter(l->ctx) == FSA_STATUS_OK) {
        l->sync = cu->StreamSynchronize(l->stream);
        fsa_context_leave(l->ctx);
    }
    return NULL;
}

static void lane_download_and_check(lane *l, outputs *out)
{
    char what[32];
    snprintf(what, sizeof what, "device %d", l->device);
    assert_int_equal(fsa_context_enter(l->ctx), FSA_STATUS_OK);
    download_fwd(out, &l->dp, &l->p, &g_case);
    fsa_context_leave(l->ctx);
    attn_check_o_and_lse(out, &l->p, g_case.hq, 1e-2, what);
}

static void lane_download_and_check_paged(lane *l, kvc_outputs *out)
{
    char what[32];
    snprintf(what, sizeof what, "device %d", l->device);
    assert_int_equal(fsa_context_enter(l->ctx), FSA_STATUS_OK);
    kvc_download(out, &l->kd, &l->kp);
    fsa_context_leave(l->ctx);
    kvc_check_against_reference(out, &l->kp, what);
}

/* A lane per device made, run from a thread each at once, and its outputs
 * checked; with the same target on both devices, the same bits. */
static void run_on_each_device_at_once(int paged)
{
    char *dir = fsa_test_mkdtemp("multi-gpu");
    lane lanes[N_DEV];
    memset(lanes, 0, sizeof lanes);
    for (int i = 0; i < N_DEV; i++) lane_make(&lanes[i], i, dir, paged);
    assert_ptr_not_equal(lanes[0].ctx->cu_context, lanes[1].ctx->cu_context);

    pthread_t t[N_DEV];
    for (int i = 0; i < N_DEV; i++) assert_int_equal(pthread_create(&t[i], NULL, lane_run, &lanes[i]), 0);
    for (int i = 0; i < N_DEV; i++) assert_int_equal(pthread_join(t[i], NULL), 0);

    outputs out[N_DEV];
    kvc_outputs kout[N_DEV];
    for (int i = 0; i < N_DEV; i++) {
        if (lanes[i].st != FSA_STATUS_OK) fail_msg("device %d: %s", i, fsa_status_name(lanes[i].st));
        assert_int_equal(lanes[i].sync, CUDA_SUCCESS);
        if (paged) lane_download_and_check_paged(&lanes[i], &kout[i]);
        else lane_download_and_check(&lanes[i], &out[i]);
    }
    /* The same kernel on two devices of one target gives the same bits. */
    if (strcmp(fsa_context_target(lanes[0].ctx), fsa_context_target(lanes[1].ctx)) == 0) {
        if (paged) {
            const size_t lse_bytes = (size_t)lanes[0].kp.hq * lanes[0].kp.Tq * 4;
            assert_memory_equal(kout[0].o_bits, kout[1].o_bits, lanes[0].kd.o_bytes);
            assert_memory_equal(kout[0].lse, kout[1].lse, lse_bytes);
        } else {
            assert_memory_equal(out[0].o_img, out[1].o_img, lanes[0].dp.o_bytes);
            assert_memory_equal(out[0].lse, out[1].lse, (size_t)g_case.hq * lanes[0].p.T * 4);
        }
    }
    for (int i = 0; i < N_DEV; i++) {
        if (paged) kvc_outputs_free(&kout[i]);
        else outputs_free(&out[i]);
        lane_free(&lanes[i]);
    }
    fsa_test_rmtree(dir);
    free(dir);
}

static void test_one_process_runs_a_plan_on_each_device_at_once(void **state)
{
    (void)state;
    run_on_each_device_at_once(0);
}

static void test_one_process_runs_a_paged_cache_batch_on_each_device_at_once(void **state)
{
    (void)state;
    run_on_each_device_at_once(1);
}

/* ------------------------------------------------------------ two processes */

/* child <device> <cache dir> <result fd>: plan, forward and check on one
 * device through the shared cache; writes "compiles disk_hits corrupt". */
static int child_main(int device, const char *dir, int result_fd)
{
    lane l;
    memset(&l, 0, sizeof l);
    lane_make(&l, device, dir, 0);
    lane_run(&l);
    if (l.st != FSA_STATUS_OK || l.sync != CUDA_SUCCESS) {
        fprintf(stderr, "device %d: %s\n", device, fsa_last_error());
        return 1;
    }
    outputs out;
    lane_download_and_check(&l, &out);
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    assert_int_equal(fsa_context_cache_stats(&s, l.ctx), FSA_STATUS_OK);
    char line[128];
    int n = snprintf(line, sizeof line, "%s %llu %llu %llu\n", fsa_context_target(l.ctx),
                     (unsigned long long)s.compiles, (unsigned long long)s.disk_hits,
                     (unsigned long long)s.corrupt_entries);
    if (write(result_fd, line, (size_t)n) != n) return 1;
    outputs_free(&out);
    lane_free(&l);
    return 0;
}

/* Valid kernels (a tuning record, from FSA_TUNE=on in the environment, is no compile). */
static int count_entries(const fsa_cache_entry_info *e, void *user)
{
    (*(int *)user) += e->valid && !e->record;
    return 0;
}

static void test_two_processes_share_one_cold_cache_directory(void **state)
{
    (void)state;
    char *dir = fsa_test_mkdtemp("multi-gpu-shared");
    int result[2];
    assert_int_equal(pipe(result), 0);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", result[1]);
    pid_t pids[N_DEV];
    fflush(NULL);
    for (int i = 0; i < N_DEV; i++) {
        char dev[16];
        snprintf(dev, sizeof dev, "%d", i);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(result[0]);
            char *argv[] = {"test_multi_gpu", "--child", dev, dir, fd, NULL};
            execv("/proc/self/exe", argv);
            _exit(127);
        }
    }
    close(result[1]);
    char text[512] = {0};
    size_t got = 0;
    for (ssize_t r; got < sizeof text - 1 && (r = read(result[0], text + got, sizeof text - 1 - got)) != 0;) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        got += (size_t)r;
    }
    close(result[0]);
    for (int i = 0; i < N_DEV; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("the process on device %d failed", i);
    }
    /* Both ran; each kernel was compiled once per target (the per-key lock),
     * and the cache holds exactly those entries, all intact. */
    char targets[N_DEV][16];
    unsigned long long compiles = 0, corrupt = 0;
    char *line = strtok(text, "\n");
    for (int i = 0; i < N_DEV; i++, line = strtok(NULL, "\n")) {
        unsigned long long c = 0, d = 0, k = 0;
        if (line == NULL || sscanf(line, "%15s %llu %llu %llu", targets[i], &c, &d, &k) != 4)
            fail_msg("missing or bad report from a process: \"%s\"", line ? line : "");
        compiles += c;
        corrupt += k;
    }
    assert_int_equal(corrupt, 0);
    fsa_context *ctx = device_context(0, dir);
    int entries = 0;
    uint64_t bad = 99;
    assert_int_equal(fsa_cache_verify(ctx, count_entries, &entries, &bad), FSA_STATUS_OK);
    assert_int_equal(bad, 0);
    print_message("  targets %s and %s: %llu compiles, %d entries\n", targets[0], targets[1], compiles, entries);
    assert_int_equal(compiles, (unsigned long long)entries);
    fsa_context_destroy(ctx);
    fsa_test_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    need_two_gpus();
    if (argc == 5 && strcmp(argv[1], "--child") == 0) return child_main(atoi(argv[2]), argv[3], atoi(argv[4]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_process_runs_a_plan_on_each_device_at_once),
        cmocka_unit_test(test_one_process_runs_a_paged_cache_batch_on_each_device_at_once),
        cmocka_unit_test(test_two_processes_share_one_cold_cache_directory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
