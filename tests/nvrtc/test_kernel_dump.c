/* FSA_JIT_DUMP=dir end to end, without a GPU: each kernel a context builds
 * leaves its rendered source, PTX and resource usage in dir; the cubin that
 * is kept is the one a plain compile gives; the variable is read when the
 * context is created; a dump that cannot be written costs only a warning.
 *
 * The in-process kernel table is process-wide, so every test asks for the
 * fill kernel with an UNROLL value no other test here uses. */
#include "testing.h"

#include "jit/compile.h"
#include "jit/context.h"
#include "jit/module_cache.h"
#include "jit/render.h"
#include "jit/resource_usage.h"
#include "jit/templates.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TARGET "sm_80"

typedef struct fill_req {
    char unroll[16];
    fsa_param params[1];
    fsa_kernel_request req;
} fill_req;

static void fill_req_init(fill_req *f, int unroll)
{
    snprintf(f->unroll, sizeof f->unroll, "%d", unroll);
    f->params[0] = (fsa_param){"UNROLL", f->unroll, "u"};
    f->req = (fsa_kernel_request){"fill", f->params, 1, "fsa_fill_u32"};
}

/* An offline context without a disk cache, made while FSA_JIT_DUMP is
 * `dump_dir` (unset when NULL). */
static fsa_context *context_dumping_to(const char *dump_dir)
{
    if (dump_dir) setenv("FSA_JIT_DUMP", dump_dir, 1);
    else unsetenv("FSA_JIT_DUMP");
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    o.device = FSA_DEVICE_NONE;
    o.target = TARGET;
    o.cache_mode = FSA_CACHE_MODE_OFF;
    o.log = -1;
    fsa_context *ctx = NULL;
    if (fsa_context_create(&ctx, &o) != FSA_STATUS_OK) fail_msg("context: %s", fsa_last_error());
    unsetenv("FSA_JIT_DUMP");
    return ctx;
}

static fsa_module *get_fill(fsa_context *ctx, int unroll)
{
    fill_req f;
    fill_req_init(&f, unroll);
    fsa_module *m = NULL;
    if (fsa_module_get(&m, &ctx->env, &f.req) != FSA_STATUS_OK) fail_msg("fill u%d: %s", unroll, fsa_last_error());
    return m;
}

/* The contents of <dir>/<name>.<target>.<ext>, or NULL when it does not exist. */
static char *dumped(const char *dir, const char *name, const char *ext)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s.%s", dir, name, TARGET, ext);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

static void test_each_built_kernel_leaves_its_source_ptx_and_resources_in_the_dump_directory(void **state)
{
    (void)state;
    char *tmp = fsa_test_mkdtemp("dump");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/not-yet-there", tmp); /* the last level is created */
    fsa_context *ctx = context_dumping_to(dir);
    fsa_module *m = get_fill(ctx, 3);
    const char *name = fsa_module_name(m);

    char *source = dumped(dir, name, "cu");
    assert_non_null(source);
    assert_non_null(strstr(source, "fsa_fill_u32"));
    assert_null(strstr(source, "{{")); /* rendered, not the template */

    char *ptx = dumped(dir, name, "ptx");
    assert_non_null(ptx);
    assert_non_null(strstr(ptx, ".target " TARGET));
    assert_non_null(strstr(ptx, ".entry fsa_fill_u32"));

    char *resources = dumped(dir, name, "resources.txt");
    assert_non_null(resources);
    assert_non_null(strstr(resources, fsa_module_key_hex(m)));
    assert_non_null(strstr(resources, "spill_stores"));
    /* The ptxas log it carries reports the entry point. */
    fsa_resource_usage u;
    assert_int_equal(fsa_resource_usage_parse(&u, resources), FSA_STATUS_OK);
    assert_int_equal(u.count, 1);
    assert_string_equal(u.functions[0].name, "fsa_fill_u32");
    assert_true(u.functions[0].entry);
    assert_true(u.functions[0].registers > 0);
    fsa_resource_usage_free(&u);

    free(source);
    free(ptx);
    free(resources);
    fsa_context_destroy(ctx);
    fsa_test_rmtree(tmp);
    free(tmp);
}

static void test_the_kept_cubin_is_the_one_a_plain_compile_gives(void **state)
{
    (void)state;
    char *tmp = fsa_test_mkdtemp("dump");
    fsa_context *ctx = context_dumping_to(tmp);
    fsa_module *m = get_fill(ctx, 5);
    size_t kept_size = 0;
    const void *kept = fsa_module_cubin(m, &kept_size);

    /* The dump compiled once more with the verbose option; the table and the
     * disk cache still get the cubin of the key's options alone. */
    fill_req f;
    fill_req_init(&f, 5);
    char *source = NULL;
    assert_int_equal(fsa_render(&source, "fill.cu", fsa_template_find("fill.cu")->text, f.params, 1), FSA_STATUS_OK);
    fsa_compile_options opts;
    assert_int_equal(fsa_compile_options_for(&opts, TARGET), FSA_STATUS_OK);
    fsa_cubin plain;
    const fsa_nvrtc_api *nvrtc = NULL;
    assert_int_equal(fsa_nvrtc_load(&nvrtc), FSA_STATUS_OK);
    assert_int_equal(fsa_compile(&plain, nvrtc, source, "fill.cu", &opts), FSA_STATUS_OK);
    assert_int_equal(kept_size, plain.size);
    assert_memory_equal(kept, plain.data, plain.size);
    assert_null(plain.ptx); /* only a verbose compile keeps the PTX */

    fsa_cubin_free(&plain);
    free(source);
    fsa_context_destroy(ctx);
    fsa_test_rmtree(tmp);
    free(tmp);
}

static void test_the_variable_is_read_once_when_the_context_is_created(void **state)
{
    (void)state;
    char *tmp = fsa_test_mkdtemp("dump");
    fsa_context *dumping = context_dumping_to(tmp); /* FSA_JIT_DUMP is unset again after this */
    fsa_context *quiet = context_dumping_to(NULL);

    fsa_module *not_dumped = get_fill(quiet, 6);
    char *none = dumped(tmp, fsa_module_name(not_dumped), "cu");
    assert_null(none);

    /* The dumping context keeps its directory after the variable is gone. */
    fsa_module *m = get_fill(dumping, 7);
    char *source = dumped(tmp, fsa_module_name(m), "cu");
    assert_non_null(source);

    free(source);
    fsa_context_destroy(dumping);
    fsa_context_destroy(quiet);
    fsa_test_rmtree(tmp);
    free(tmp);
}

/* A relative FSA_JIT_DUMP is taken from the working directory when the context is created: a later chdir
 * moved the dumps (the path was resolved at each dump). */
static void test_a_relative_dump_directory_is_fixed_when_the_context_is_created(void **state)
{
    (void)state;
    char *here = getcwd(NULL, 0), *first = fsa_test_mkdtemp("dumprel"), *second = fsa_test_mkdtemp("dumpcd");
    assert_non_null(here);
    assert_int_equal(chdir(first), 0);
    fsa_context *ctx = context_dumping_to("dumps");
    assert_int_equal(chdir(second), 0);
    fsa_module *m = get_fill(ctx, 11); /* an unroll no other test builds: compiled (and dumped) here */
    assert_int_equal(chdir(here), 0);
    char dir[1024], moved[1024];
    snprintf(dir, sizeof dir, "%s/dumps", first);
    snprintf(moved, sizeof moved, "%s/dumps", second);
    char *source = dumped(dir, fsa_module_name(m), "cu");
    assert_non_null(source);
    struct stat sb;
    assert_int_equal(stat(moved, &sb), -1);
    free(source);
    fsa_context_destroy(ctx);
    fsa_test_rmtree(first);
    fsa_test_rmtree(second);
    free(first);
    free(second);
    free(here);
}

static void test_a_dump_directory_that_cannot_be_made_costs_a_warning_not_the_kernel(void **state)
{
    (void)state;
    char *tmp = fsa_test_mkdtemp("dump");
    char file[1024], dir[1100], log[1024];
    snprintf(file, sizeof file, "%s/a-file", tmp);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/below", file); /* below a regular file */
    snprintf(log, sizeof log, "%s/stderr", tmp);
    fsa_context *ctx = context_dumping_to(dir);

    /* Warnings go to stderr: catch them in a file. */
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    fill_req r;
    fill_req_init(&r, 9);
    fsa_module *m = NULL;
    fsa_status st = fsa_module_get(&m, &ctx->env, &r.req);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);

    assert_int_equal(st, FSA_STATUS_OK);
    assert_non_null(m);
    assert_int_equal(fsa_last_error_info()->status, FSA_STATUS_OK);
    FILE *lf = fopen(log, "r");
    assert_non_null(lf);
    char line[2048] = {0};
    assert_non_null(fgets(line, sizeof line, lf));
    fclose(lf);
    assert_non_null(strstr(line, "FSA_JIT_DUMP"));
    assert_non_null(strstr(line, dir));

    fsa_context_destroy(ctx);
    fsa_test_rmtree(tmp);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_built_kernel_leaves_its_source_ptx_and_resources_in_the_dump_directory),
        cmocka_unit_test(test_the_kept_cubin_is_the_one_a_plain_compile_gives),
        cmocka_unit_test(test_the_variable_is_read_once_when_the_context_is_created),
        cmocka_unit_test(test_a_relative_dump_directory_is_fixed_when_the_context_is_created),
        cmocka_unit_test(test_a_dump_directory_that_cannot_be_made_costs_a_warning_not_the_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
