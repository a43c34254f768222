/* Where NVRTC is looked for, in order: FSA_NVRTC_PATH alone when set; else
 * the pip package under FSA_PYTHON_SITE_DIRS, CUDA_HOME, CUDA_PATH, the
 * toolkit found at build time, the dynamic loader's path, /usr/local/cuda.
 * Checked on fake directories holding empty files named like NVRTC. */
#include "testing.h"

#include "jit/nvrtc_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fake environment: the variables the search reads. */
static const char *g_env[8][2];

static const char *fake_env(const char *name)
{
    for (size_t i = 0; i < sizeof g_env / sizeof g_env[0] && g_env[i][0]; i++)
        if (strcmp(g_env[i][0], name) == 0) return g_env[i][1];
    return NULL;
}

static void set_env(size_t i, const char *name, const char *value)
{
    g_env[i][0] = name;
    g_env[i][1] = value;
    g_env[i + 1][0] = NULL;
}

static char *g_root;

/* root/<rel>, the directories on the way created; an empty file. */
static char *touch(const char *rel)
{
    char *path = malloc(strlen(g_root) + strlen(rel) + 2);
    sprintf(path, "%s/%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        (void)mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    return path;
}

static char *under_root(const char *rel)
{
    char *path = malloc(strlen(g_root) + strlen(rel) + 2);
    sprintf(path, "%s/%s", g_root, rel);
    return path;
}

static int setup(void **state)
{
    (void)state;
    g_root = fsa_test_mkdtemp("nvrtc-search");
    g_env[0][0] = NULL;
    return g_root == NULL;
}

static int teardown(void **state)
{
    (void)state;
    fsa_test_rmtree(g_root);
    free(g_root);
    return 0;
}

static fsa_nvrtc_candidate g_list[FSA_NVRTC_MAX_CANDIDATES];

static void test_an_explicit_path_is_the_only_candidate(void **state)
{
    (void)state;
    char *site = under_root("site");
    free(touch("site/nvidia/cu13/lib/libnvrtc.so.13"));
    set_env(0, "FSA_NVRTC_PATH", "/nowhere/libnvrtc.so.12");
    set_env(1, "FSA_PYTHON_SITE_DIRS", site);
    size_t n = fsa_nvrtc_search_list(g_list, FSA_NVRTC_MAX_CANDIDATES, fake_env, NULL);
    assert_int_equal(n, 1);
    assert_string_equal(g_list[0].path, "/nowhere/libnvrtc.so.12");
    assert_string_equal(g_list[0].source, "FSA_NVRTC_PATH");
    free(site);
}

/* Cut to the candidate's capacity, the path would name another file: here
 * a real one, the first 511 bytes of what was asked for. */
static void test_an_explicit_path_too_long_to_hold_is_not_tried_shortened(void **state)
{
    (void)state;
    size_t cap = sizeof g_list[0].path - 1;
    char rel[600] = "";
    size_t prefix = strlen(g_root) + 1;
    while (prefix + strlen(rel) + 100 < cap) strcat(rel, "padding-directory-name-0123456789/");
    size_t name_len = cap - prefix - strlen(rel);
    size_t at = strlen(rel);
    memset(rel + at, 'n', name_len);
    rel[at + name_len] = '\0';
    char *shortened = touch(rel);
    assert_int_equal(strlen(shortened), cap);
    char *asked = malloc(cap + 16);
    sprintf(asked, "%s.so.13", shortened);
    set_env(0, "FSA_NVRTC_PATH", asked);
    assert_int_equal(fsa_nvrtc_search_list(g_list, FSA_NVRTC_MAX_CANDIDATES, fake_env, NULL), 0);
    free(asked);
    free(shortened);
}

static void test_the_documented_order(void **state)
{
    (void)state;
    char *expect[] = {
        touch("site1/nvidia/cu13/lib/libnvrtc.so.13"),
        touch("site2/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"),
        touch("home/lib64/libnvrtc.so.13"),
        touch("home/lib/libnvrtc.so"),
        touch("path/lib64/libnvrtc.so.12"),
        touch("build/libnvrtc.so.13"),
    };
    const char *sources[] = {"Python package", "Python package", "CUDA_HOME", "CUDA_HOME", "CUDA_PATH",
                             "toolkit found at build time"};
    char *site1 = under_root("site1"), *site2 = under_root("site2"), *home = under_root("home"),
         *path = under_root("path"), *build = under_root("build");
    char sites[1024];
    snprintf(sites, sizeof sites, "%s:%s/missing:%s", site1, g_root, site2);
    set_env(0, "FSA_PYTHON_SITE_DIRS", sites);
    set_env(1, "CUDA_HOME", home);
    set_env(2, "CUDA_PATH", path);
    size_t n = fsa_nvrtc_search_list(g_list, FSA_NVRTC_MAX_CANDIDATES, fake_env, build);
    const size_t n_files = sizeof expect / sizeof expect[0];
    assert_true(n >= n_files + 3);
    for (size_t i = 0; i < n_files; i++) {
        assert_string_equal(g_list[i].path, expect[i]);
        assert_string_equal(g_list[i].source, sources[i]);
        free(expect[i]);
    }
    /* Then the loader's own search, by name, newest major first. */
    assert_string_equal(g_list[n_files].path, "libnvrtc.so.13");
    assert_string_equal(g_list[n_files + 1].path, "libnvrtc.so.12");
    assert_string_equal(g_list[n_files + 2].path, "libnvrtc.so");
    /* Then /usr/local/cuda's files, each one this machine has (a loop over none proves nothing: count them). */
    size_t local = 0;
    const char *dirs[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"}, *names[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                                                                      "libnvrtc.so"};
    for (size_t d = 0; d < 2; d++)
        for (size_t v = 0; v < 3; v++) {
            char file[256];
            snprintf(file, sizeof file, "%s/%s", dirs[d], names[v]);
            local += access(file, F_OK) == 0;
        }
    assert_int_equal(n, n_files + 3 + local);
    for (size_t i = n_files + 3; i < n; i++) assert_string_equal(g_list[i].source, "/usr/local/cuda");
    free(site1), free(site2), free(home), free(path), free(build);
}

static void test_newest_major_first_within_a_directory(void **state)
{
    (void)state;
    char *so = touch("kit/lib64/libnvrtc.so"), *v12 = touch("kit/lib64/libnvrtc.so.12"),
         *v13 = touch("kit/lib64/libnvrtc.so.13");
    char *kit = under_root("kit");
    set_env(0, "CUDA_HOME", kit);
    size_t n = fsa_nvrtc_search_list(g_list, FSA_NVRTC_MAX_CANDIDATES, fake_env, NULL);
    assert_true(n >= 3);
    assert_string_equal(g_list[0].path, v13);
    assert_string_equal(g_list[1].path, v12);
    assert_string_equal(g_list[2].path, so);
    free(so), free(v12), free(v13), free(kit);
}

static void test_missing_directories_and_files_are_left_out(void **state)
{
    (void)state;
    char *empty = under_root("nothing-here");
    set_env(0, "FSA_PYTHON_SITE_DIRS", empty);
    set_env(1, "CUDA_HOME", empty);
    set_env(2, "CUDA_PATH", "");
    size_t n = fsa_nvrtc_search_list(g_list, FSA_NVRTC_MAX_CANDIDATES, fake_env, empty);
    assert_true(n >= 3);
    assert_string_equal(g_list[0].path, "libnvrtc.so.13");
    assert_string_equal(g_list[0].source, "dynamic loader path");
    free(empty);
}

static void test_a_file_reached_twice_is_listed_once_under_the_first_rule(void **state)
{
    (void)state;
    char *file = touch("same/lib64/libnvrtc.so.13");
    char *same = under_root("same");
    set_env(0, "CUDA_HOME", same);
    set_env(1, "CUDA_PATH", same);
    size_t n = fsa_nvrtc_search_list(g_list, FSA_NVRTC_MAX_CANDIDATES, fake_env, NULL);
    size_t seen = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(g_list[i].path, file) == 0) {
            seen++;
            assert_string_equal(g_list[i].source, "CUDA_HOME");
        }
    assert_int_equal(seen, 1);
    free(file), free(same);
}

static void test_the_list_stops_at_its_capacity(void **state)
{
    (void)state;
    free(touch("cap/lib64/libnvrtc.so.13"));
    char *cap = under_root("cap");
    set_env(0, "CUDA_HOME", cap);
    fsa_nvrtc_candidate two[2];
    assert_int_equal(fsa_nvrtc_search_list(two, 2, fake_env, NULL), 2);
    assert_string_equal(two[1].path, "libnvrtc.so.13");
    free(cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_an_explicit_path_is_the_only_candidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_explicit_path_too_long_to_hold_is_not_tried_shortened, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_documented_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newest_major_first_within_a_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_directories_and_files_are_left_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_file_reached_twice_is_listed_once_under_the_first_rule, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_list_stops_at_its_capacity, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
