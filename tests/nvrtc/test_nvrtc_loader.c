/* Loading NVRTC through the search order, each case in a fresh child
 * process (the library loads NVRTC once per process): a pip package's copy
 * is preferred to the toolkit's, a file that is not NVRTC is passed over,
 * an explicit FSA_NVRTC_PATH that does not load (or is too long to hold) is
 * an error naming it, and kernel keys name the loaded file's version and
 * build ID. */
#include "testing.h"

#include "base/util.h"
#include "jit/nvrtc_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct outcome {
    fsa_status status;
    char path[512];    /* the file loaded (api->path) */
    char real[512];    /* the file behind it, from dladdr */
    char message[512]; /* fsa_last_error() on failure */
    char version[16], key_version[sizeof ((fsa_nvrtc_api *)0)->key_version];
} outcome;

/* In the child: fsa_nvrtc_load with `name`=`value` set (arg: the pair; name NULL: nothing). */
static void load(void *out, const void *arg)
{
    outcome *o = out;
    memset(o, 0, sizeof *o);
    const char *const *setting = arg;
    const char *name = setting[0], *value = setting[1];
    unsetenv("FSA_NVRTC_PATH");
    unsetenv("FSA_PYTHON_SITE_DIRS");
    if (name) setenv(name, value, 1);
    const fsa_nvrtc_api *api = NULL;
    o->status = fsa_nvrtc_load(&api);
    if (o->status == FSA_STATUS_OK) {
        snprintf(o->path, sizeof o->path, "%s", api->path);
        snprintf(o->version, sizeof o->version, "%s", api->version);
        snprintf(o->key_version, sizeof o->key_version, "%s", api->key_version);
        Dl_info info;
        if (dladdr((void *)api->Version, &info) && info.dli_fname)
            snprintf(o->real, sizeof o->real, "%s", info.dli_fname);
    } else {
        snprintf(o->message, sizeof o->message, "%s", fsa_last_error());
    }
}

static outcome load_in_child(const char *name, const char *value)
{
    outcome o;
    const char *setting[2] = {name, value};
    fsa_test_in_child(&o, sizeof o, load, setting);
    return o;
}

static char *g_root;
static outcome g_default; /* where NVRTC comes from without any hint */

static int setup(void **state)
{
    (void)state;
    g_root = fsa_test_mkdtemp("nvrtc-loader");
    g_default = load_in_child(NULL, NULL);
    return g_root == NULL;
}

static int teardown(void **state)
{
    (void)state;
    fsa_test_rmtree(g_root);
    free(g_root);
    return 0;
}

static void make_dirs(char *path)
{
    for (char *p = path + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        (void)mkdir(path, 0700);
        *p = '/';
    }
}

static void skip_without_nvrtc(void)
{
    if (g_default.status != FSA_STATUS_OK) {
        print_message("no NVRTC on this machine: %s\n", g_default.message);
        skip();
    }
}

static void test_a_pip_package_copy_comes_before_the_toolkit(void **state)
{
    (void)state;
    skip_without_nvrtc();
    char site[600], lib[700];
    snprintf(site, sizeof site, "%s/site-packages", g_root);
    snprintf(lib, sizeof lib, "%s/nvidia/cu13/lib/libnvrtc.so.13", site);
    make_dirs(lib);
    assert_int_equal(symlink(g_default.real, lib), 0);
    outcome o = load_in_child("FSA_PYTHON_SITE_DIRS", site);
    assert_int_equal(o.status, FSA_STATUS_OK);
    assert_string_equal(o.path, lib);
}

static void test_a_file_that_is_not_nvrtc_is_passed_over(void **state)
{
    (void)state;
    skip_without_nvrtc();
    char home[600], lib[700];
    snprintf(home, sizeof home, "%s/broken-toolkit", g_root);
    snprintf(lib, sizeof lib, "%s/lib64/libnvrtc.so.13", home);
    make_dirs(lib);
    FILE *f = fopen(lib, "w");
    assert_non_null(f);
    fputs("not a shared object", f);
    fclose(f);
    outcome o = load_in_child("CUDA_HOME", home);
    assert_int_equal(o.status, FSA_STATUS_OK);
    assert_string_not_equal(o.path, lib);
}

static void test_an_explicit_path_that_does_not_load_is_an_error_naming_it(void **state)
{
    (void)state;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/absent/libnvrtc.so.13", g_root);
    outcome o = load_in_child("FSA_NVRTC_PATH", missing);
    assert_int_equal(o.status, FSA_STATUS_NO_NVRTC);
    assert_non_null(strstr(o.message, missing));
    assert_non_null(strstr(o.message, "FSA_NVRTC_PATH"));
    /* and it says the variable stopped the search, not that the other locations were looked at */
    assert_non_null(strstr(o.message, "no other location is searched"));
    assert_null(strstr(o.message, "CUDA_HOME"));
}

static void test_an_explicit_bare_name_that_does_not_load_is_named_with_the_reason(void **state)
{
    (void)state;
    /* The loader's own search passes over bare names it does not know; the user's own is news. */
    outcome o = load_in_child("FSA_NVRTC_PATH", "libfsa-test-absent-nvrtc.so");
    assert_int_equal(o.status, FSA_STATUS_NO_NVRTC);
    assert_non_null(strstr(o.message, "tried libfsa-test-absent-nvrtc.so (FSA_NVRTC_PATH): "));
}

static void test_an_explicit_path_too_long_to_hold_is_an_error_saying_so(void **state)
{
    (void)state;
    char too_long[700];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[0] = '/';
    too_long[sizeof too_long - 1] = '\0';
    outcome o = load_in_child("FSA_NVRTC_PATH", too_long);
    assert_int_equal(o.status, FSA_STATUS_NO_NVRTC);
    assert_non_null(strstr(o.message, "FSA_NVRTC_PATH is 699 bytes long"));
}

/* NVRTC 11 cannot compile the kernels: the loader refuses it by its
 * version (the stand-in NVRTC, told which major to report). */
static void test_an_nvrtc_older_than_12_is_refused_with_its_version_named(void **state)
{
    (void)state;
    char fake[600];
    snprintf(fake, sizeof fake, "%s/fake_nvrtc/libnvrtc_fake.so", getenv("FSA_TEST_BINARY_DIR"));
    assert_int_equal(setenv("FSA_FAKE_NVRTC_MAJOR", "11", 1), 0);
    outcome o = load_in_child("FSA_NVRTC_PATH", fake);
    assert_int_equal(o.status, FSA_STATUS_NO_NVRTC);
    assert_non_null(strstr(o.message, "is NVRTC 11.8; version 12 or newer is required"));
    assert_int_equal(setenv("FSA_FAKE_NVRTC_MAJOR", "12", 1), 0);
    o = load_in_child("FSA_NVRTC_PATH", fake);
    unsetenv("FSA_FAKE_NVRTC_MAJOR");
    assert_int_equal(o.status, FSA_STATUS_OK);
    assert_string_equal(o.version, "12.8");
}

static void test_kernel_keys_name_the_version_and_the_files_build_id(void **state)
{
    (void)state;
    skip_without_nvrtc();
    uint8_t id[FSA_BUILD_ID_MAX];
    size_t n = fsa_test_build_id_of_file(id, sizeof id, g_default.real);
    char want[sizeof g_default.key_version], hex[2 * FSA_BUILD_ID_MAX + 1];
    fsa_hex(hex, id, n);
    snprintf(want, sizeof want, "%s%s%s", g_default.version, n ? " " : "", hex);
    print_message("%s: key names NVRTC \"%s\"\n", g_default.real, g_default.key_version);
    assert_string_equal(g_default.key_version, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_pip_package_copy_comes_before_the_toolkit),
        cmocka_unit_test(test_a_file_that_is_not_nvrtc_is_passed_over),
        cmocka_unit_test(test_an_explicit_path_that_does_not_load_is_an_error_naming_it),
        cmocka_unit_test(test_an_explicit_bare_name_that_does_not_load_is_named_with_the_reason),
        cmocka_unit_test(test_an_explicit_path_too_long_to_hold_is_an_error_saying_so),
        cmocka_unit_test(test_an_nvrtc_older_than_12_is_refused_with_its_version_named),
        cmocka_unit_test(test_kernel_keys_name_the_version_and_the_files_build_id),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
