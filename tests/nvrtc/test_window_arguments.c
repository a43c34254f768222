/* Sliding-window plans and calls answer bad descriptors and arguments with
 * their documented status, on an offline sm_90a plan (no GPU needed); a call
 * whose arguments pass every check ends with FSA_STATUS_NO_DEVICE. */
#include "testing.h"

#include "base/struct_size.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HQ 4
#define HKV 2
#define DK 64
#define DV 32

static char *g_dir;
static fsa_context *g_ctx;
static fsa_window_plan *g_plan;

#define EXPECT_STATUS(want, call)                                                                         \
    do {                                                                                                  \
        fsa_status st_ = (call);                                                                          \
        if (st_ != (want))                                                                                \
            fail_msg("line %d: %s returned %s, expected %s (%s)", __LINE__, #call, fsa_status_name(st_), \
                     fsa_status_name(want), fsa_last_error());                                           \
        if ((want) != FSA_STATUS_OK) assert_int_equal(fsa_last_error_info()->status, (want));           \
    } while (0)

static fsa_window_attention_desc small_desc(void)
{
    fsa_window_attention_desc d = FSA_WINDOW_ATTENTION_DESC_INIT;
    d.head_dim = DK;
    d.value_dim = DV;
    d.num_q_heads = HQ;
    d.num_kv_heads = HKV;
    d.window = 64;
    return d;
}

static int group_setup(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    g_dir = fsa_test_mkdtemp("fsa_window_arguments");
    o.device = FSA_DEVICE_NONE;
    o.target = "sm_90a";
    o.cache_dir = g_dir;
    o.log = -1;
    if (g_dir == NULL || fsa_context_create(&g_ctx, &o) != FSA_STATUS_OK) return -1;
    const fsa_window_attention_desc d = small_desc();
    if (fsa_window_plan_create(&g_plan, g_ctx, &d) != FSA_STATUS_OK) {
        fprintf(stderr, "plan: %s\n", fsa_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fsa_window_plan_destroy(g_plan);
    fsa_context_destroy(g_ctx);
    fsa_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static fsa_status create_with(fsa_window_attention_desc d)
{
    fsa_window_plan *plan = NULL;
    const fsa_status st = fsa_window_plan_create(&plan, g_ctx, &d);
    if (st != FSA_STATUS_OK) assert_null(plan);
    fsa_window_plan_destroy(plan);
    return st;
}

static void test_descriptors_outside_the_supported_shapes_are_refused(void **state)
{
    (void)state;
    fsa_window_attention_desc d = small_desc();
    fsa_window_plan *plan = NULL;
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_plan_create(&plan, g_ctx, NULL));
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_plan_create(NULL, g_ctx, &d));
    d.struct_size = 3;
    EXPECT_STATUS(FSA_STATUS_STRUCT_SIZE, create_with(d));
    d = small_desc(), d.window = 0;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.value_dim = 24;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.num_q_heads = 34, d.num_kv_heads = 2;
    EXPECT_STATUS(FSA_STATUS_UNSUPPORTED, create_with(d));
    d = small_desc(), d.num_q_heads = 3;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.scale = -2.0f;
    EXPECT_STATUS(FSA_STATUS_INVALID_ARGUMENT, create_with(d));
    d = small_desc(), d.value_dim = 0; /* = head_dim */
    EXPECT_STATUS(FSA_STATUS_OK, create_with(d));
}

static fsa_window_fwd_args good_args(int64_t T)
{
    fsa_window_fwd_args a = FSA_WINDOW_FWD_ARGS_INIT;
    a.total_tokens = T;
    a.batch = 1;
    a.q = (fsa_tensor){0x7f0000100000ull, HQ * DK, DK};
    a.k = (fsa_tensor){0x7f0000200000ull, HKV * DK, DK};
    a.v = (fsa_tensor){0x7f0000300000ull, HKV * DV, DV};
    a.o = (fsa_tensor){0x7f0000400000ull, HQ * DV, DV};
    a.cu_seqlens = 0x7f0000500000ull;
    return a;
}

#define EXPECT_FWD(want, args) EXPECT_STATUS(want, fsa_window_attention_fwd(g_plan, (args), NULL))

static void test_forward_argument_checks_come_before_the_device_check(void **state)
{
    (void)state;
    fsa_window_fwd_args a = good_args(100);
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, &a);
    a.lse = 0x7f0000600000ull;
    EXPECT_FWD(FSA_STATUS_NO_DEVICE, &a);
    EXPECT_STATUS(FSA_STATUS_NULL_POINTER, fsa_window_attention_fwd(NULL, &a, NULL));
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, NULL);
    a.struct_size = FSA_WINDOW_FWD_ARGS_FIRST_SIZE - 8;
    EXPECT_FWD(FSA_STATUS_STRUCT_SIZE, &a);
    a = good_args(100), a.lse = 2;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, &a);
    a = good_args(100), a.cu_seqlens = 0;
    EXPECT_FWD(FSA_STATUS_NULL_POINTER, &a);
    a = good_args(100), a.batch = 0;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_args(100), a.v.token_stride = -HKV * DV;
    EXPECT_FWD(FSA_STATUS_INVALID_ARGUMENT, &a);
    a = good_args(100), a.k.ptr += 4;
    EXPECT_FWD(FSA_STATUS_MISALIGNED, &a);
    a = good_args(0), a.batch = 0;
    EXPECT_FWD(FSA_STATUS_OK, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptors_outside_the_supported_shapes_are_refused),
        cmocka_unit_test(test_forward_argument_checks_come_before_the_device_check),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
