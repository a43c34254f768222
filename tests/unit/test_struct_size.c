/* Structs with a struct_size, as the library reads and writes them: a
 * caller's older, shorter version is read with the newer fields zero and
 * written without touching what lies past it; sizes below the first version
 * or above the current one are refused. Shown on a struct that grew from a
 * first version (v1) to a second (v2); then on the public structs, whose
 * every appended field is read whole or refused. */
#include "testing.h"

#include "base/struct_size.h"

#include <string.h>

typedef struct v1 {
    size_t struct_size;
    int a;
    double b;
} v1;

typedef struct v2 {
    size_t struct_size;
    int a;
    double b;
    uint64_t c; /* added in the second version: zero means the default */
    int d;
} v2;

#define V2_FIRST_SIZE FSA_FIRST_SIZE(v2, b)
FSA_APPENDED_FIELD(v2, c, V2_FIRST_SIZE);

static void test_the_first_size_is_what_sizeof_gave_the_first_version(void **state)
{
    (void)state;
    assert_int_equal(V2_FIRST_SIZE, sizeof(v1));
    assert_int_equal(FSA_FIRST_SIZE(v2, d), sizeof(v2));
    /* The public structs: their first version is never larger than the current one. */
    assert_true(FSA_CONTEXT_OPTIONS_FIRST_SIZE <= sizeof(fsa_context_options));
    assert_true(FSA_CACHE_STATS_FIRST_SIZE <= sizeof(fsa_cache_stats));
    assert_true(FSA_SELECTED_ATTENTION_DESC_FIRST_SIZE <= sizeof(fsa_selected_attention_desc));
    assert_true(FSA_FWD_ARGS_FIRST_SIZE <= sizeof(fsa_fwd_args));
    assert_true(FSA_BWD_ARGS_FIRST_SIZE <= sizeof(fsa_bwd_args));
    assert_true(FSA_CONTEXT_OPTIONS_FIRST_SIZE > sizeof(size_t));
}

/* fsa_window_attention_desc as 0.2.0 published it, before head_windows and
 * backward were appended. */
typedef struct window_desc_0_2 {
    size_t struct_size;
    fsa_dtype dtype;
    int head_dim, value_dim, num_q_heads, num_kv_heads, window;
    float scale;
} window_desc_0_2;

static void test_the_window_descriptor_grew_past_its_published_first_version(void **state)
{
    (void)state;
    assert_int_equal(FSA_WINDOW_ATTENTION_DESC_FIRST_SIZE, sizeof(window_desc_0_2));
    assert_true(offsetof(fsa_window_attention_desc, head_windows) >= sizeof(window_desc_0_2));
    assert_true(offsetof(fsa_window_attention_desc, backward) > offsetof(fsa_window_attention_desc, head_windows));
}

/* The window and compressed backward arguments as published up to 0.2.0,
 * before dq_add, gate and gate_grad were appended to each. */
typedef struct window_bwd_args_0_2 {
    size_t struct_size;
    int64_t total_tokens;
    int batch;
    fsa_tensor q, k, v, o, dout, dq, dk, dv;
    uint64_t lse, cu_seqlens, workspace;
    size_t workspace_bytes;
} window_bwd_args_0_2;

typedef struct compressed_bwd_args_0_2 {
    size_t struct_size;
    int64_t total_tokens, total_compressed;
    int batch;
    fsa_tensor q, k, v, o, dout, dq, dk, dv;
    uint64_t lse, cu_seqlens, cu_seqlens_c, workspace;
    size_t workspace_bytes;
} compressed_bwd_args_0_2;

static void test_the_branch_backward_arguments_grew_past_their_published_first_versions(void **state)
{
    (void)state;
    assert_int_equal(FSA_WINDOW_BWD_ARGS_FIRST_SIZE, sizeof(window_bwd_args_0_2));
    assert_int_equal(offsetof(fsa_window_bwd_args, workspace_bytes), offsetof(window_bwd_args_0_2, workspace_bytes));
    assert_true(offsetof(fsa_window_bwd_args, dq_add) >= sizeof(window_bwd_args_0_2));
    assert_int_equal(offsetof(fsa_window_bwd_args, gate), offsetof(fsa_window_bwd_args, dq_add) + sizeof(fsa_tensor));
    assert_int_equal(offsetof(fsa_window_bwd_args, gate_grad), offsetof(fsa_window_bwd_args, gate) + sizeof(fsa_tensor));
    assert_int_equal(sizeof(fsa_window_bwd_args), sizeof(window_bwd_args_0_2) + 3 * sizeof(fsa_tensor));
    assert_int_equal(FSA_COMPRESSED_BWD_ARGS_FIRST_SIZE, sizeof(compressed_bwd_args_0_2));
    assert_int_equal(offsetof(fsa_compressed_bwd_args, workspace_bytes),
                     offsetof(compressed_bwd_args_0_2, workspace_bytes));
    assert_true(offsetof(fsa_compressed_bwd_args, dq_add) >= sizeof(compressed_bwd_args_0_2));
    assert_int_equal(offsetof(fsa_compressed_bwd_args, gate), offsetof(fsa_compressed_bwd_args, dq_add) + sizeof(fsa_tensor));
    assert_int_equal(offsetof(fsa_compressed_bwd_args, gate_grad), offsetof(fsa_compressed_bwd_args, gate) + sizeof(fsa_tensor));
    assert_int_equal(sizeof(fsa_compressed_bwd_args), sizeof(compressed_bwd_args_0_2) + 3 * sizeof(fsa_tensor));
}

/* fsa_bwd_args as published up to 0.2.0, before dq_add, gate and gate_grad were appended. */
typedef struct bwd_args_0_2 {
    size_t struct_size;
    int64_t total_tokens;
    int batch, max_seqlen;
    fsa_tensor q, k, v, o, dout, dq, dk, dv, topk;
    uint64_t cu_seqlens, lse, workspace;
    size_t workspace_bytes;
} bwd_args_0_2;

static void test_the_backward_arguments_grew_past_their_published_first_version(void **state)
{
    (void)state;
    assert_int_equal(FSA_BWD_ARGS_FIRST_SIZE, sizeof(bwd_args_0_2));
    assert_int_equal(offsetof(fsa_bwd_args, workspace_bytes), offsetof(bwd_args_0_2, workspace_bytes));
    assert_true(offsetof(fsa_bwd_args, dq_add) >= sizeof(bwd_args_0_2));
    assert_int_equal(offsetof(fsa_bwd_args, gate), offsetof(fsa_bwd_args, dq_add) + sizeof(fsa_tensor));
    assert_int_equal(offsetof(fsa_bwd_args, gate_grad), offsetof(fsa_bwd_args, gate) + sizeof(fsa_tensor));
    assert_int_equal(sizeof(fsa_bwd_args), sizeof(bwd_args_0_2) + 3 * sizeof(fsa_tensor));
}

static void test_an_old_shorter_struct_is_read_with_the_new_fields_zero(void **state)
{
    (void)state;
    /* The old caller's struct, followed by memory that is not its own. */
    _Alignas(8) unsigned char mem[sizeof(v2) + 16];
    memset(mem, 0xa5, sizeof mem);
    const v1 old = {sizeof(v1), 7, 2.5};
    memcpy(mem, &old, sizeof old);
    v2 local;
    memset(&local, 0x5a, sizeof local);
    assert_int_equal(fsa_struct_read(&local, sizeof local, mem, V2_FIRST_SIZE, "test", "v2"), FSA_STATUS_OK);
    assert_int_equal(local.struct_size, sizeof(v1));
    assert_int_equal(local.a, 7);
    assert_true(local.b == 2.5);
    assert_int_equal(local.c, 0);
    assert_int_equal(local.d, 0);
}

static void test_a_current_struct_is_read_whole(void **state)
{
    (void)state;
    const v2 cur = {sizeof(v2), 1, 3.0, 99, -4};
    v2 local;
    assert_int_equal(fsa_struct_read(&local, sizeof local, &cur, V2_FIRST_SIZE, "test", "v2"), FSA_STATUS_OK);
    assert_int_equal(local.c, 99);
    assert_int_equal(local.d, -4);
}

static void test_an_old_shorter_output_struct_gets_only_its_own_fields(void **state)
{
    (void)state;
    _Alignas(8) unsigned char mem[sizeof(v2) + 16];
    memset(mem, 0xa5, sizeof mem);
    const size_t old_size = sizeof(v1);
    memcpy(mem, &old_size, sizeof old_size);
    const v2 result = {sizeof(v2), 11, 0.5, 12, 13};
    assert_int_equal(fsa_struct_write(mem, &result, sizeof result, V2_FIRST_SIZE, "test", "v2"), FSA_STATUS_OK);
    v1 got;
    memcpy(&got, mem, sizeof got);
    assert_int_equal(got.struct_size, sizeof(v1)); /* left as the caller set it */
    assert_int_equal(got.a, 11);
    assert_true(got.b == 0.5);
    for (size_t i = sizeof(v1); i < sizeof mem; i++) assert_int_equal(mem[i], 0xa5);
}

static void test_sizes_outside_the_known_versions_are_struct_size(void **state)
{
    (void)state;
    const size_t bad[] = {0, 4, sizeof(size_t), V2_FIRST_SIZE - 1, sizeof(v2) + 1, sizeof(v2) + 8, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        _Alignas(8) unsigned char mem[sizeof(v2) + 16];
        memset(mem, 0, sizeof mem);
        memcpy(mem, &bad[i], sizeof bad[i]);
        v2 local;
        memset(&local, 0x5a, sizeof local);
        assert_int_equal(fsa_struct_read(&local, sizeof local, mem, V2_FIRST_SIZE, "test", "v2"),
                         FSA_STATUS_STRUCT_SIZE);
        assert_int_equal(fsa_last_error_info()->status, FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error_info()->message, "v2.struct_size"));
        assert_int_equal(local.a, 0x5a5a5a5a); /* untouched */
        assert_int_equal(fsa_struct_write(mem, &local, sizeof local, V2_FIRST_SIZE, "test", "v2"),
                         FSA_STATUS_STRUCT_SIZE);
        for (size_t j = sizeof(size_t); j < sizeof mem; j++) assert_int_equal(mem[j], 0);
    }
    /* Every size in between is a version the library can read. */
    for (size_t n = V2_FIRST_SIZE; n <= sizeof(v2); n++) {
        _Alignas(8) unsigned char mem[sizeof(v2)];
        memset(mem, 0, sizeof mem);
        memcpy(mem, &n, sizeof n);
        v2 local;
        assert_int_equal(fsa_struct_read(&local, sizeof local, mem, V2_FIRST_SIZE, "test", "v2"), FSA_STATUS_OK);
    }
}

/* A pointer field appended later, cut short by the caller's struct_size,
 * would be read as an address made of its first bytes: refused, while sizes
 * at either end of it are versions as before. */
typedef struct v3 {
    size_t struct_size;
    int a;
    const int *p; /* added in the second version */
} v3;

static void test_a_size_that_ends_inside_a_pointer_field_is_struct_size(void **state)
{
    (void)state;
    const size_t at = offsetof(v3, p);
    for (size_t n = at + 1; n < at + sizeof(void *); n++) {
        const v3 caller = {n, 1, &caller.a};
        assert_int_equal(FSA_STRUCT_FIELD_WHOLE(&caller, v3, p, "test"), FSA_STATUS_STRUCT_SIZE);
        assert_int_equal(fsa_last_error_info()->status, FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error_info()->message, "v3.struct_size"));
        assert_non_null(strstr(fsa_last_error_info()->message, "inside p"));
    }
    const size_t whole[] = {at, at + sizeof(void *), sizeof(v3)};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        const v3 caller = {whole[i], 1, NULL};
        assert_int_equal(FSA_STRUCT_FIELD_WHOLE(&caller, v3, p, "test"), FSA_STATUS_OK);
    }
}

/* A size ending inside an appended number would read its leading bytes: check
 * mode on where -1 asked it off, or a value dim of 256 read as 0 (the head
 * dim's). Each public struct refuses such sizes before anything else. */
static void test_a_size_that_ends_inside_an_appended_number_is_refused_by_the_public_calls(void **state)
{
    (void)state;
    for (size_t n = offsetof(fsa_context_options, check) + 1; n < sizeof(fsa_context_options); n++) {
        /* a version's end: check whole, tune absent; tune whole, reserved absent */
        if (n == offsetof(fsa_context_options, tune) || n == offsetof(fsa_context_options, reserved)) continue;
        fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
        o.struct_size = n, o.device = FSA_DEVICE_NONE, o.target = "sm_90a", o.check = -1;
        fsa_context *ctx = NULL;
        assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_STRUCT_SIZE);
        assert_null(ctx);
    }
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE, o.target = "sm_90a", o.cache_dir = "", o.jit = FSA_JIT_OFF;
    fsa_context *ctx = NULL;
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);

    fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    d.num_q_heads = 8, d.num_kv_heads = 2, d.value_dim = 256;
    fsa_kvcache_desc kd = FSA_KVCACHE_DESC_INIT;
    kd.num_q_heads = 8, kd.num_kv_heads = 2, kd.max_batch = 4, kd.max_query_tokens = 16, kd.value_dim = 256;
    const size_t d_at = offsetof(fsa_selected_attention_desc, value_dim), kd_at = offsetof(fsa_kvcache_desc, value_dim);
    for (size_t k = 1; k < sizeof d.value_dim; k++) {
        fsa_plan *plan = NULL;
        d.struct_size = d_at + k;
        assert_int_equal(fsa_plan_create(&plan, ctx, &d), FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error(), "inside value_dim"));
    }
    for (size_t k = 1; k < sizeof kd.value_dim; k++) {
        fsa_kvcache_plan *kplan = NULL;
        kd.struct_size = kd_at + k;
        assert_int_equal(fsa_kvcache_plan_create(&kplan, ctx, &kd), FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error(), "inside value_dim"));
    }
    fsa_window_attention_desc w = FSA_WINDOW_ATTENTION_DESC_INIT;
    w.num_q_heads = 8, w.num_kv_heads = 2, w.backward = 1;
    for (size_t k = 1; k < sizeof(int); k++) {
        fsa_window_plan *plan = NULL;
        w.struct_size = offsetof(fsa_window_attention_desc, backward) + k;
        assert_int_equal(fsa_window_plan_create(&plan, ctx, &w), FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error(), "inside backward"));
    }
    /* The int that fills what was tail padding is appended too: a size inside it is no version's. */
    for (size_t k = 1; k < sizeof(int); k++) {
        fsa_window_plan *plan = NULL;
        w.struct_size = offsetof(fsa_window_attention_desc, reserved) + k;
        assert_int_equal(fsa_window_plan_create(&plan, ctx, &w), FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error(), "inside reserved"));
        fsa_kvcache_plan *kplan = NULL;
        kd.struct_size = offsetof(fsa_kvcache_desc, reserved) + k;
        assert_int_equal(fsa_kvcache_plan_create(&kplan, ctx, &kd), FSA_STATUS_STRUCT_SIZE);
        assert_non_null(strstr(fsa_last_error(), "inside reserved"));
    }
    fsa_context_destroy(ctx);
}

/* A public struct ends with its last field, no tail padding after it: a field appended in a later version
 * then starts at or after this version's size, never in bytes that callers built against this header leave
 * unset (their struct_size covers them). Where the fields would leave padding, an int `reserved` fills it.
 * Appending a field: update its line here. */
#define FSA_ENDS_WITH(type, last) \
    assert_int_equal(offsetof(type, last) + sizeof(((type *)0)->last), sizeof(type))

static void test_every_public_struct_ends_without_tail_padding(void **state)
{
    (void)state;
    FSA_ENDS_WITH(fsa_context_options, reserved);
    FSA_ENDS_WITH(fsa_cache_stats, write_failures);
    FSA_ENDS_WITH(fsa_selected_attention_desc, value_dim);
    FSA_ENDS_WITH(fsa_fwd_args, workspace_bytes);
    FSA_ENDS_WITH(fsa_bwd_args, gate_grad);
    FSA_ENDS_WITH(fsa_plan_choice, reserved);
    FSA_ENDS_WITH(fsa_kvcache_desc, reserved);
    FSA_ENDS_WITH(fsa_kvcache_args, workspace_bytes);
    FSA_ENDS_WITH(fsa_compressed_attention_desc, reserved);
    FSA_ENDS_WITH(fsa_compressed_fwd_args, workspace_bytes);
    FSA_ENDS_WITH(fsa_compressed_bwd_args, gate_grad);
    FSA_ENDS_WITH(fsa_window_attention_desc, reserved);
    FSA_ENDS_WITH(fsa_window_fwd_args, lse);
    FSA_ENDS_WITH(fsa_window_bwd_args, gate_grad);
    FSA_ENDS_WITH(fsa_gate_desc, value_dim);
    FSA_ENDS_WITH(fsa_gate_args, dgate);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_first_size_is_what_sizeof_gave_the_first_version),
        cmocka_unit_test(test_a_size_that_ends_inside_a_pointer_field_is_struct_size),
        cmocka_unit_test(test_the_window_descriptor_grew_past_its_published_first_version),
        cmocka_unit_test(test_the_backward_arguments_grew_past_their_published_first_version),
        cmocka_unit_test(test_the_branch_backward_arguments_grew_past_their_published_first_versions),
        cmocka_unit_test(test_an_old_shorter_struct_is_read_with_the_new_fields_zero),
        cmocka_unit_test(test_a_current_struct_is_read_whole),
        cmocka_unit_test(test_an_old_shorter_output_struct_gets_only_its_own_fields),
        cmocka_unit_test(test_sizes_outside_the_known_versions_are_struct_size),
        cmocka_unit_test(test_a_size_that_ends_inside_an_appended_number_is_refused_by_the_public_calls),
        cmocka_unit_test(test_every_public_struct_ends_without_tail_padding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
