/* The public API's answers to bad context arguments, on a machine without a
 * GPU: fsa_context_create refuses a NULL out, a wrong struct size, an
 * offline context without a target or for an unsupported or malformed one, a
 * negative device other than none, bad FSA_CACHE_MODE and FSA_JIT values and
 * unknown modes, each with its documented status and error record; a device
 * context without a driver fails with no driver or no device. Options of the
 * first version are read without what follows them, the init macros set the
 * documented defaults, and destroying NULL is fine. */
#include "api_validation_fixture.h"

#include "base/struct_size.h"

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void test_context_create_with_a_null_out_is_a_null_pointer(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_context_create(NULL, &o));
    EXPECT_REFUSED(FSA_STATUS_NULL_POINTER, fsa_context_create(NULL, NULL));
}

static void test_context_create_with_a_wrong_struct_size_is_struct_size(void **state)
{
    (void)state;
    const size_t sizes[] = {0, FSA_CONTEXT_OPTIONS_FIRST_SIZE - 1, sizeof(fsa_context_options) + 8, 4};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
        o.struct_size = sizes[i];
        o.device = FSA_DEVICE_NONE;
        o.target = "sm_80";
        fsa_context *ctx = (fsa_context *)&o; /* must be overwritten */
        EXPECT_REFUSED(FSA_STATUS_STRUCT_SIZE, fsa_context_create(&ctx, &o));
        assert_null(ctx);
    }
}

static void test_context_options_of_the_first_version_are_read_without_what_follows_them(void **state)
{
    (void)state;
    /* A caller compiled against the first header: what lies after its
     * struct in memory (poisoned here) is not its own. */
    _Alignas(16) unsigned char mem[sizeof(fsa_context_options) + 64];
    memset(mem, 0xa5, sizeof mem);
    fsa_context_options o = offline_options("sm_80");
    o.struct_size = FSA_CONTEXT_OPTIONS_FIRST_SIZE;
    memcpy(mem, &o, FSA_CONTEXT_OPTIONS_FIRST_SIZE);
    fsa_context *ctx = NULL;
    assert_int_equal(fsa_context_create(&ctx, (const fsa_context_options *)(void *)mem), FSA_STATUS_OK);
    assert_string_equal(fsa_context_target(ctx), "sm_80");
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fsa_context_destroy(ctx);
}

static void test_the_init_macros_set_struct_size_and_the_documented_defaults(void **state)
{
    (void)state;
    const fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    assert_int_equal(o.struct_size, sizeof o);
    assert_int_equal(o.device, 0);
    assert_null(o.target);
    assert_null(o.cache_dir);
    assert_int_equal(o.cache_mode, FSA_CACHE_MODE_DEFAULT);
    assert_int_equal(o.jit, FSA_JIT_DEFAULT);
    assert_int_equal(o.log, 0);
    const fsa_selected_attention_desc d = FSA_SELECTED_ATTENTION_DESC_INIT;
    assert_int_equal(d.struct_size, sizeof d);
    assert_int_equal(d.dtype, FSA_DTYPE_BF16);
    assert_int_equal(d.head_dim, 128);
    assert_int_equal(d.block_size, 64);
    assert_int_equal(d.top_k, 16);
    assert_int_equal(d.num_q_heads + d.num_kv_heads + d.backward, 0);
    assert_true(d.scale == 0.0f);
    assert_int_equal(d.algorithm, FSA_ALGORITHM_AUTO);
    assert_int_equal(d.workspace_limit, 0);
    assert_int_equal(d.value_dim, 0); /* = head_dim */
    /* Static storage works too (a constant initializer). */
    static const fsa_fwd_args f = FSA_FWD_ARGS_INIT;
    static const fsa_bwd_args b = FSA_BWD_ARGS_INIT;
    assert_int_equal(f.struct_size, sizeof f);
    assert_int_equal(b.struct_size, sizeof b);
    assert_int_equal(f.q.ptr + f.topk.ptr + (uint64_t)f.o.token_stride + f.workspace_bytes, 0);
    assert_int_equal(b.dv.ptr + (uint64_t)b.dq.head_stride + b.lse, 0);
}

static void test_an_offline_context_without_a_target_is_an_invalid_argument(void **state)
{
    (void)state;
    const fsa_context_options o = offline_options(NULL);
    fsa_context *ctx = NULL;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
}

static void expect_offline_context_status(fsa_status want, const char *target)
{
    const fsa_context_options o = offline_options(target);
    fsa_context *ctx = NULL;
    EXPECT_REFUSED(want, fsa_context_create(&ctx, &o));
    assert_null(ctx);
    assert_non_null(strstr(fsa_last_error_info()->message, target));
}

static void test_an_offline_context_for_an_unsupported_target_is_unsupported_device(void **state)
{
    (void)state;
    const char *unsupported[] = {"sm_75", "sm_70", "sm_88", "sm_80a"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        expect_offline_context_status(FSA_STATUS_UNSUPPORTED_DEVICE, unsupported[i]);
}

static void test_an_offline_context_for_a_malformed_target_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *malformed[] = {"sm_9x", "", "compute_90", "sm_80/../x"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
        expect_offline_context_status(FSA_STATUS_INVALID_ARGUMENT, malformed[i]);
}

static void test_an_offline_context_reports_its_target_and_no_cache_when_off(void **state)
{
    (void)state;
    fsa_context *ctx = offline_context("sm_86");
    assert_string_equal(fsa_context_target(ctx), "sm_86");
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fsa_context_destroy(ctx);
    /* NULL contexts give empty strings rather than crashing. */
    assert_string_equal(fsa_context_target(NULL), "");
    assert_string_equal(fsa_context_cache_dir(NULL), "");
}

static void test_a_device_context_without_a_driver_fails_with_no_driver_or_no_device(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT; /* device 0 */
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    fsa_status st = fsa_context_create(&ctx, &o);
    if (st == FSA_STATUS_OK) {
        /* A machine with a GPU: nothing to check here. */
        fsa_context_destroy(ctx);
        skip();
    }
    assert_null(ctx);
    if (st != FSA_STATUS_NO_DRIVER && st != FSA_STATUS_NO_DEVICE)
        fail_msg("device 0 gave %s: %s", fsa_status_name(st), fsa_last_error());
    assert_int_equal(fsa_last_error_info()->status, st);
    const char *text = fsa_last_error();
    assert_true(text[0] != '\0');
    if (strstr(text, "libcuda") == NULL && strstr(text, "device") == NULL)
        fail_msg("error does not mention libcuda or the device: %s", text);
    /* Asking again gives the same answer (the loader result is kept). */
    fsa_status again = fsa_context_create(&ctx, &o);
    assert_int_equal(again, st);
    assert_null(ctx);
}

static void test_a_negative_device_other_than_none_is_an_invalid_argument(void **state)
{
    (void)state;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = -2;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
}

/* A context of options o created with the environment variable `name` set to `value` (restored after). */
static fsa_status create_with_env(const fsa_context_options *o, const char *name, const char *value)
{
    fsa_context *ctx = NULL;
    char *saved = getenv(name) ? strdup(getenv(name)) : NULL;
    assert_int_equal(setenv(name, value, 1), 0);
    fsa_status st = fsa_context_create(&ctx, o);
    if (saved) {
        setenv(name, saved, 1);
        free(saved);
    } else {
        unsetenv(name);
    }
    if (st != FSA_STATUS_OK) assert_null(ctx);
    fsa_context_destroy(ctx);
    return st;
}

static fsa_status create_offline_with_env(const char *name, const char *value, fsa_cache_mode mode)
{
    fsa_context_options o = offline_options("sm_80");
    o.cache_mode = mode;
    return create_with_env(&o, name, value);
}

static void test_a_bad_fsa_cache_mode_value_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *bad[] = {"readwrite", "1", "on", "r"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT,
                      create_offline_with_env("FSA_CACHE_MODE", bad[i], FSA_CACHE_MODE_DEFAULT));
        assert_non_null(strstr(fsa_last_error_info()->message, "FSA_CACHE_MODE"));
    }
    /* The accepted spellings work (off: nothing is touched on disk). */
    assert_int_equal(create_offline_with_env("FSA_CACHE_MODE", "OFF", FSA_CACHE_MODE_DEFAULT), FSA_STATUS_OK);
    /* An explicit option overrides the variable. */
    assert_int_equal(create_offline_with_env("FSA_CACHE_MODE", "bogus", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
}

static void test_a_bad_fsa_jit_value_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *bad[] = {"maybe", "2", "enabled"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, create_offline_with_env("FSA_JIT", bad[i], FSA_CACHE_MODE_OFF));
        assert_non_null(strstr(fsa_last_error_info()->message, "FSA_JIT"));
    }
    assert_int_equal(create_offline_with_env("FSA_JIT", "off", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
    assert_int_equal(create_offline_with_env("FSA_JIT", "1", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
}

/* An offline context whose log and check options leave them to FSA_LOG and FSA_CHECK, created with `name`
 * set to `value`. */
static fsa_status create_reading_switch(const char *name, const char *value)
{
    fsa_context_options o = offline_options("sm_80");
    o.log = 0;
    o.check = 0;
    return create_with_env(&o, name, value);
}

/* FSA_CHECK=enable read as off would drop the validation its user asked for. */
static void test_a_bad_fsa_check_or_fsa_log_value_is_an_invalid_argument(void **state)
{
    (void)state;
    const char *names[] = {"FSA_CHECK", "FSA_LOG"}, *bad[] = {"enable", "2", "y"};
    for (size_t n = 0; n < 2; n++) {
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, create_reading_switch(names[n], bad[i]));
            assert_non_null(strstr(fsa_last_error_info()->message, names[n]));
        }
        assert_int_equal(create_reading_switch(names[n], "off"), FSA_STATUS_OK);
        assert_int_equal(create_reading_switch(names[n], "YES"), FSA_STATUS_OK);
        assert_int_equal(create_reading_switch(names[n], ""), FSA_STATUS_OK);
    }
    /* An explicit option overrides the variable, which is then not read. */
    assert_int_equal(create_offline_with_env("FSA_LOG", "bogus", FSA_CACHE_MODE_OFF), FSA_STATUS_OK);
}

static void test_unknown_cache_and_jit_mode_options_are_invalid_arguments(void **state)
{
    (void)state;
    fsa_context *ctx = NULL;
    fsa_context_options o = offline_options("sm_80");
    o.cache_mode = (fsa_cache_mode)7;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
    o.cache_mode = (fsa_cache_mode)-1;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.jit = (fsa_jit_mode)3;
    EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
    assert_null(ctx);
}

/* log and check take 1, -1 and 0 alone: 5 read as on and -7 as off would give a caller's mistake a meaning,
 * while the same values through FSA_LOG and FSA_CHECK are refused. */
static void test_log_and_check_options_other_than_one_minus_one_and_zero_are_invalid_arguments(void **state)
{
    (void)state;
    const int64_t bad[] = {2, 5, -2, -7, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fsa_context *ctx = NULL;
        fsa_context_options o = offline_options("sm_80");
        o.cache_mode = FSA_CACHE_MODE_OFF;
        o.log = (int)bad[i];
        EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
        assert_null(ctx);
        assert_non_null(strstr(fsa_last_error(), "log value"));
        o.log = -1;
        o.check = bad[i];
        EXPECT_REFUSED(FSA_STATUS_INVALID_ARGUMENT, fsa_context_create(&ctx, &o));
        assert_null(ctx);
        assert_non_null(strstr(fsa_last_error(), "check value"));
    }
    const int good[] = {-1, 0, 1};
    for (size_t i = 0; i < 3; i++) {
        fsa_context *ctx = NULL;
        fsa_context_options o = offline_options("sm_80");
        o.cache_mode = FSA_CACHE_MODE_OFF;
        o.log = good[i];
        o.check = good[i];
        assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
        fsa_context_destroy(ctx);
    }
}

/* A directory below `base` whose path is `len` bytes long (levels of at most
 * 200 bytes); the caller frees it. */
static char *long_directory(const char *base, size_t len)
{
    char *p = malloc(len + 1);
    assert_non_null(p);
    size_t n = (size_t)snprintf(p, len + 1, "%s", base);
    while (n < len) {
        size_t level = len - n - 1 < 200 ? len - n - 1 : 200;
        if (len - n - 1 - level > 0 && len - n - 1 - level < 2) level -= 2; /* no level of 0 bytes next */
        p[n++] = '/';
        memset(p + n, 'd', level);
        n += level;
        p[n] = '\0';
        assert_int_equal(mkdir(p, 0700), 0);
    }
    assert_int_equal(strlen(p), len);
    return p;
}

static int names_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* $HOME/.cache/fsa or $XDG_CACHE_HOME/fsa past the longest path is no cache
 * (the context works in memory), never a shortened path: the path was cut to
 * 4095 bytes, which created "<HOME>/.c" or "<XDG_CACHE_HOME>/fs", and the
 * warning named that directory. */
static void test_a_default_cache_directory_too_long_for_a_path_is_not_shortened(void **state)
{
    (void)state;
    char *base = fsa_test_mkdtemp("fsa_long_home");
    char *home = long_directory(base, 4092);
    const char *names[] = {"FSA_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
        unsetenv(names[i]);
    }
    for (int xdg = 0; xdg < 2; xdg++) {
        assert_int_equal(setenv(xdg ? "XDG_CACHE_HOME" : "HOME", home, 1), 0);
        fsa_context_options o = offline_options("sm_80");
        o.cache_mode = FSA_CACHE_MODE_READ_WRITE;
        fsa_context *ctx = NULL;
        assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
        assert_string_equal(fsa_context_cache_dir(ctx), "");
        assert_int_equal(names_in(home), 0);
        fsa_context_destroy(ctx);
    }
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
        free(saved[i]);
    }
    fsa_test_rmtree(base);
    free(home);
    free(base);
}

/* A context without a cache directory says why in every "not cached" error: XDG_CACHE_HOME set but relative
 * (or HOME set but empty) was reported as unset. */
static void test_the_no_cache_directory_note_says_what_was_seen(void **state)
{
    (void)state;
    const char *names[] = {"FSA_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
        unsetenv(names[i]);
    }
    assert_int_equal(setenv("XDG_CACHE_HOME", "relative/cache", 1), 0);
    assert_int_equal(setenv("HOME", "", 1), 0);
    fsa_context_options o = offline_options("sm_80");
    o.cache_mode = FSA_CACHE_MODE_READ_WRITE;
    o.jit = FSA_JIT_OFF;
    fsa_context *ctx = NULL;
    assert_int_equal(fsa_context_create(&ctx, &o), FSA_STATUS_OK);
    assert_string_equal(fsa_context_cache_dir(ctx), "");
    fsa_gate_plan *plan = NULL;
    fsa_gate_desc d = FSA_GATE_DESC_INIT;
    EXPECT_REFUSED(FSA_STATUS_JIT_DISABLED, fsa_gate_plan_create(&plan, ctx, &d));
    if (!strstr(fsa_last_error(), "XDG_CACHE_HOME is not an absolute path") ||
        !strstr(fsa_last_error(), "HOME are unset or empty"))
        fail_msg("%s", fsa_last_error());
    fsa_context_destroy(ctx);
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
        free(saved[i]);
    }
}

static void test_destroying_null_is_fine(void **state)
{
    (void)state;
    fsa_context_destroy(NULL);
    fsa_plan_destroy(NULL);
    /* And the library still answers afterwards. */
    fsa_context *ctx = offline_context("sm_80");
    fsa_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_create_with_a_null_out_is_a_null_pointer),
        cmocka_unit_test(test_context_create_with_a_wrong_struct_size_is_struct_size),
        cmocka_unit_test(test_context_options_of_the_first_version_are_read_without_what_follows_them),
        cmocka_unit_test(test_the_init_macros_set_struct_size_and_the_documented_defaults),
        cmocka_unit_test(test_an_offline_context_without_a_target_is_an_invalid_argument),
        cmocka_unit_test(test_an_offline_context_for_an_unsupported_target_is_unsupported_device),
        cmocka_unit_test(test_an_offline_context_for_a_malformed_target_is_an_invalid_argument),
        cmocka_unit_test(test_an_offline_context_reports_its_target_and_no_cache_when_off),
        cmocka_unit_test(test_a_device_context_without_a_driver_fails_with_no_driver_or_no_device),
        cmocka_unit_test(test_a_negative_device_other_than_none_is_an_invalid_argument),
        cmocka_unit_test(test_a_bad_fsa_cache_mode_value_is_an_invalid_argument),
        cmocka_unit_test(test_a_bad_fsa_jit_value_is_an_invalid_argument),
        cmocka_unit_test(test_a_bad_fsa_check_or_fsa_log_value_is_an_invalid_argument),
        cmocka_unit_test(test_unknown_cache_and_jit_mode_options_are_invalid_arguments),
        cmocka_unit_test(test_log_and_check_options_other_than_one_minus_one_and_zero_are_invalid_arguments),
        cmocka_unit_test(test_a_default_cache_directory_too_long_for_a_path_is_not_shortened),
        cmocka_unit_test(test_the_no_cache_directory_note_says_what_was_seen),
        cmocka_unit_test(test_destroying_null_is_fine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
