/* The shared-memory check of every kernel load (src/jit/context.c,
 * fsa_context_check_function_smem, which fsa_context_get_function runs
 * before it sets the dynamic size) on a stand-in driver table: the driver's
 * count of a kernel's static bytes against the count its plan used, then
 * dynamic plus static bytes against the device's limit, each refused with a
 * message naming the kernel. */
#include "testing.h"

#include "jit/context.h"
#include "jit/cuda_driver.h"

#include <string.h>

static int g_static_bytes;
static int g_queries;
static int g_fail; /* the driver refuses the query */

static CUresult CUDAAPI func_get_attribute(int *value, CUfunction_attribute attribute, CUfunction fn)
{
    (void)fn;
    g_queries++;
    if (g_fail || attribute != CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
    *value = g_static_bytes;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI error_name(CUresult r, const char **out)
{
    (void)r;
    *out = "CUDA_ERROR_INVALID_VALUE";
    return CUDA_SUCCESS;
}

typedef struct fixture {
    fsa_cu_api cu;
    fsa_context ctx;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->cu.FuncGetAttribute = func_get_attribute;
    f->cu.GetErrorName = error_name;
    f->cu.GetErrorString = error_name;
    f->ctx.cu = &f->cu;
    f->ctx.max_smem_per_block = 232448;
    g_queries = 0;
    g_fail = 0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

static fsa_status check(fixture *f, int static_bytes, int dynamic, int counted)
{
    g_static_bytes = static_bytes;
    return fsa_context_check_function_smem(&f->ctx, (CUfunction)(uintptr_t)0x1000, "fsa_test_kernel", dynamic,
                                           counted);
}

static void test_a_kernel_within_its_count_and_the_limit_loads(void **state)
{
    fixture *f = *state;
    assert_int_equal(check(f, 3344, 200000, 3344), FSA_STATUS_OK);
    assert_int_equal(check(f, 0, 232448, 0), FSA_STATUS_OK); /* the limit itself */
    assert_int_equal(check(f, 16, 1024, 32), FSA_STATUS_OK); /* counted generously */
    assert_int_equal(g_queries, 3);
}

static void test_static_bytes_over_the_plans_count_are_an_internal_error_naming_the_kernel(void **state)
{
    fixture *f = *state;
    assert_int_equal(check(f, 3360, 1024, 3344), FSA_STATUS_INTERNAL);
    const char *msg = fsa_last_error();
    if (strstr(msg, "fsa_test_kernel uses 3360 bytes of static shared memory; its plan counted 3344") == NULL)
        fail_msg("message: %s", msg);
}

static void test_an_uncounted_kernel_is_checked_against_the_limit_only(void **state)
{
    fixture *f = *state;
    assert_int_equal(check(f, 4096, 1024, -1), FSA_STATUS_OK);
    assert_int_equal(check(f, 4096, 232448 - 4095, -1), FSA_STATUS_UNSUPPORTED);
}

static void test_dynamic_and_static_bytes_over_the_limit_are_unsupported_naming_both(void **state)
{
    fixture *f = *state;
    assert_int_equal(check(f, 16, 232448 - 15, 16), FSA_STATUS_UNSUPPORTED);
    const char *msg = fsa_last_error();
    if (strstr(msg, "fsa_test_kernel needs 232433 bytes of dynamic and 16 of static shared memory; the device "
                    "allows 232448") == NULL)
        fail_msg("message: %s", msg);
}

static void test_a_driver_that_refuses_the_query_is_a_driver_error(void **state)
{
    fixture *f = *state;
    g_fail = 1;
    assert_int_equal(check(f, 0, 1024, 0), FSA_STATUS_DRIVER_ERROR);
    if (strstr(fsa_last_error(), "FuncGetAttribute") == NULL) fail_msg("message: %s", fsa_last_error());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_kernel_within_its_count_and_the_limit_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_static_bytes_over_the_plans_count_are_an_internal_error_naming_the_kernel,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_uncounted_kernel_is_checked_against_the_limit_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dynamic_and_static_bytes_over_the_limit_are_unsupported_naming_both,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_driver_that_refuses_the_query_is_a_driver_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
