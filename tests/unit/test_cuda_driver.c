/* The driver loader against a stand-in libcuda.so.1 (tests/fake/fake_cuda.c)
 * that has only the entry points the library requires: the library loads,
 * the optional entry points are NULL, and device contexts work. Each case
 * runs in a fresh process (the loader runs once per process) with the fake
 * first on LD_LIBRARY_PATH. */
#include "testing.h"

#include "jit/context.h"
#include "jit/cuda_driver.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHILD_CHECK(cond)                                                                 \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "child: check failed: %s [last error: %s]\n", #cond, fsa_last_error()); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

static fsa_status device_context(fsa_context **out, int device)
{
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = device;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    return fsa_context_create(out, &o);
}

/* minimal: the fake has only the required entry points. */
static int child_minimal(void)
{
    const fsa_cu_api *cu = NULL;
    CHILD_CHECK(fsa_cu_load(&cu) == FSA_STATUS_OK);
    CHILD_CHECK(cu->driver_version == 12040);
    CHILD_CHECK(cu->LaunchKernel != NULL && cu->LibraryLoadData != NULL && cu->MemsetD32Async != NULL);
    CHILD_CHECK(cu->MemAlloc == NULL && cu->StreamCreate == NULL && cu->GraphLaunch == NULL);
    fsa_context *ctx = NULL;
    CHILD_CHECK(device_context(&ctx, 0) == FSA_STATUS_OK);
    CHILD_CHECK(strcmp(fsa_context_target(ctx), "sm_90a") == 0);
    fsa_context_destroy(ctx);
    return 0;
}

/* two-devices: one context per device; an ordinal past the last is NO_DEVICE. */
static int child_two_devices(void)
{
    fsa_context *a = NULL, *b = NULL, *c = (fsa_context *)&a;
    CHILD_CHECK(device_context(&a, 0) == FSA_STATUS_OK);
    CHILD_CHECK(device_context(&b, 1) == FSA_STATUS_OK);
    CHILD_CHECK(a->device == 0 && b->device == 1 && a->cu_context != b->cu_context);
    CHILD_CHECK(strcmp(fsa_context_target(b), "sm_80") == 0);
    CHILD_CHECK(device_context(&c, 2) == FSA_STATUS_NO_DEVICE && c == NULL);
    fsa_context_destroy(b);
    fsa_context_destroy(a);
    return 0;
}

/* fill-range: on a device context, a fill whose last word would lie past
 * 2^64 bytes of address (the kernel's addresses would wrap to low memory) is
 * refused before anything is compiled or launched; the last word just below
 * it passes the checks (and then fails to load: the fake runs nothing). */
static int child_fill_range(void)
{
    fsa_context *ctx = NULL;
    CHILD_CHECK(device_context(&ctx, 0) == FSA_STATUS_OK);
    const uint64_t top = UINT64_MAX - 3; /* the last 4-byte aligned word */
    CHILD_CHECK(fsa_fill_u32(ctx, top, 1u, 2, NULL) == FSA_STATUS_INVALID_ARGUMENT);
    CHILD_CHECK(strstr(fsa_last_error(), "2^64") != NULL);
    CHILD_CHECK(fsa_fill_u32(ctx, 0x10000, 1u, UINT64_MAX / 4, NULL) == FSA_STATUS_INVALID_ARGUMENT);
    CHILD_CHECK(fsa_fill_u32(ctx, 0x10000, 1u, UINT64_MAX, NULL) == FSA_STATUS_INVALID_ARGUMENT);
    const fsa_status edge = fsa_fill_u32(ctx, top, 1u, 1, NULL);
    CHILD_CHECK(edge != FSA_STATUS_INVALID_ARGUMENT && edge != FSA_STATUS_OK);
    fsa_context_destroy(ctx);
    return 0;
}

/* Runs this binary as "--child <mode>" with the fake driver and the extra
 * environment settings (NULL = none). */
static int run_child(const char *mode, const char *extra, const char *extra2)
{
    char *argv[] = {"test_cuda_driver", "--child", (char *)mode, NULL};
    const char *settings[] = {extra, extra ? extra2 : NULL, NULL};
    return fsa_test_run_on_fake_driver(argv, "FSA_FAKE_", NULL, settings);
}

static void test_a_driver_with_only_the_required_entry_points_loads_and_makes_contexts(void **state)
{
    (void)state;
    assert_int_equal(run_child("minimal", NULL, NULL), 0);
}

static void test_each_device_gets_its_own_context_and_its_own_target(void **state)
{
    (void)state;
    assert_int_equal(run_child("two-devices", "FSA_FAKE_CUDA_DEVICES=2", "FSA_FAKE_CUDA_CC=90,80"), 0);
}

static void test_a_fill_past_the_top_of_the_address_space_is_refused(void **state)
{
    (void)state;
    assert_int_equal(run_child("fill-range", NULL, NULL), 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "minimal") == 0) return child_minimal();
        if (strcmp(argv[2], "two-devices") == 0) return child_two_devices();
        if (strcmp(argv[2], "fill-range") == 0) return child_fill_range();
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_driver_with_only_the_required_entry_points_loads_and_makes_contexts),
        cmocka_unit_test(test_each_device_gets_its_own_context_and_its_own_target),
        cmocka_unit_test(test_a_fill_past_the_top_of_the_address_space_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
