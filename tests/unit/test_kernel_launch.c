/* Kernel launches (src/attention/kernels.c) on a stand-in driver table: the
 * grid the driver gets, and a grid too large for it refused rather than cut
 * short (not every kernel strides over its work, so a clamped grid would
 * leave rows unwritten). */
#include "testing.h"

#include "attention/kernels.h"
#include "jit/context.h"
#include "jit/cuda_driver.h"

#include <stdint.h>
#include <string.h>

static int g_launches;
static unsigned g_grid_x;

static CUresult CUDAAPI launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                      unsigned bz, unsigned smem, CUstream stream, void **params, void **extra)
{
    (void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)stream, (void)params, (void)extra;
    g_launches++;
    g_grid_x = gx;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    (void)f, (void)params, (void)extra;
    g_launches++;
    g_grid_x = config->gridDimX;
    return CUDA_SUCCESS;
}

typedef struct fixture {
    fsa_cu_api cu;
    fsa_context ctx;
    fsa_kernel k;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->cu.LaunchKernel = launch_kernel;
    f->cu.LaunchKernelEx = launch_kernel_ex;
    f->ctx.cu = &f->cu;
    f->k = (fsa_kernel){.threads = 128, .name = "fsa_test_kernel"};
    g_launches = 0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

static void test_a_grid_the_driver_takes_is_launched_as_it_is(void **state)
{
    fixture *f = *state;
    assert_int_equal(fsa_kernel_launch_3d(&f->k, &f->ctx, 0x7fffffffu, 2, 1, NULL, NULL), FSA_STATUS_OK);
    assert_int_equal(g_launches, 1);
    assert_int_equal(g_grid_x, 0x7fffffffu);
    assert_int_equal(fsa_kernel_launch_clusters(&f->k, &f->ctx, 1000, 4, 2, NULL, NULL), FSA_STATUS_OK);
    assert_int_equal(g_launches, 2);
    assert_int_equal(g_grid_x, 1000);
}

static void test_an_empty_grid_launches_nothing(void **state)
{
    fixture *f = *state;
    assert_int_equal(fsa_kernel_launch_3d(&f->k, &f->ctx, 0, 1, 1, NULL, NULL), FSA_STATUS_OK);
    assert_int_equal(fsa_kernel_launch_clusters(&f->k, &f->ctx, 5, 0, 1, NULL, NULL), FSA_STATUS_OK);
    assert_int_equal(g_launches, 0);
}

static void test_a_grid_past_two_to_the_31_ctas_is_refused_not_cut_short(void **state)
{
    fixture *f = *state;
    const uint64_t too_many = (uint64_t)1 << 31;
    assert_int_equal(fsa_kernel_launch_3d(&f->k, &f->ctx, too_many, 1, 1, NULL, NULL), FSA_STATUS_UNSUPPORTED);
    assert_non_null(strstr(fsa_last_error(), "fsa_test_kernel"));
    assert_non_null(strstr(fsa_last_error(), "2147483648 CTAs"));
    assert_int_equal(fsa_kernel_launch_clusters(&f->k, &f->ctx, UINT64_MAX, 2, 2, NULL, NULL),
                     FSA_STATUS_UNSUPPORTED);
    assert_int_equal(g_launches, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_grid_the_driver_takes_is_launched_as_it_is, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_empty_grid_launches_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_grid_past_two_to_the_31_ctas_is_refused_not_cut_short, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
