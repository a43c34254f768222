#include "kernel_dump.h"

#include "base/status_internal.h"
#include "base/util.h"
#include "resource_usage.h"
#include "templates.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STAGE "dump"

/* Written under a new name of its own (pid and a random suffix, created exclusively), then renamed:
 * processes that dump the same kernel into one directory (ranks sharing an environment, in any pid
 * namespace) each leave a whole file, never a mix of two. */
static fsa_status write_file(const char *dir, const char *name, const char *target, const char *ext,
                             const char *text)
{
    char path[4096], tmp[4200];
    int n = snprintf(path, sizeof path, "%s/%s.%s.%s", dir, name, target, ext);
    if (n < 0 || (size_t)n >= sizeof path)
        return fsa_error_set(FSA_STATUS_CACHE_IO, STAGE, "path too long under %s", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%016llx", path, (long)getpid(), (unsigned long long)fsa_temp_suffix());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        const int err = errno;
        if (fd >= 0) close(fd), remove(tmp);
        return fsa_error_set(FSA_STATUS_CACHE_IO, STAGE, "cannot write %s: %s", tmp, strerror(err));
    }
    size_t len = strlen(text);
    int ok = fwrite(text, 1, len, f) == len;
    ok &= fclose(f) == 0;
    if (ok && rename(tmp, path) == 0) return FSA_STATUS_OK;
    const int err = errno;
    remove(tmp);
    return fsa_error_set(FSA_STATUS_CACHE_IO, STAGE, "cannot write %s: %s", path, ok ? strerror(err) : "short write");
}

/* The header, the table and the raw log of the resources file. */
static char *resources_text(const fsa_nvrtc_api *nvrtc, const fsa_kernel_key *key, const char *target,
                            const fsa_compile_options *options, const fsa_resource_usage *usage, const char *log)
{
    fsa_strbuf b = {0};
    fsa_strbuf_appendf(&b, "kernel %s\ntarget %s\nkey %s\nnvrtc %s\noptions", key->name, target, key->hex,
                       nvrtc->key_version);
    for (size_t i = 0; i < options->count; i++) fsa_strbuf_appendf(&b, " %s", options->opts[i]);
    fsa_strbuf_appendf(&b, " (and %s for this report)\n\n", FSA_PTXAS_VERBOSE);
    fsa_resource_usage_format(&b, usage);
    fsa_strbuf_appendf(&b, "\nptxas log:\n%s", log);
    return fsa_strbuf_take(&b);
}

fsa_status fsa_kernel_dump(const char *dir, const fsa_nvrtc_api *nvrtc, const fsa_kernel_request *req,
                           const fsa_kernel_key *key, const char *target, const fsa_compile_options *options)
{
    fsa_status st = FSA_STATUS_OK;
    char *source = NULL, *resources = NULL;
    fsa_cubin cubin = {0};
    fsa_resource_usage usage = {0};
    char file[128];
    if (nvrtc == NULL)
        FSA_FAIL(FSA_STATUS_NO_NVRTC, STAGE, "dumping %s needs NVRTC, which is not available", key->name);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot create %s: %s", dir, strerror(errno));
    snprintf(file, sizeof file, "%s.cu", req->family);
    const fsa_template *tpl = fsa_template_find(file);
    if (tpl == NULL) FSA_FAIL(FSA_STATUS_RENDER_FAILED, STAGE, "no template %s", file);
    FSA_CHECK(fsa_render(&source, file, tpl->text, req->params, req->n_params));
    fsa_compile_options verbose = *options;
    verbose.verbose = 1;
    FSA_CHECK(fsa_compile(&cubin, nvrtc, source, file, &verbose));
    FSA_CHECK(fsa_resource_usage_parse(&usage, cubin.log));
    resources = resources_text(nvrtc, key, target, options, &usage, cubin.log);
    FSA_CHECK_ALLOC(resources, STAGE);
    FSA_CHECK(write_file(dir, key->name, target, "cu", source));
    FSA_CHECK(write_file(dir, key->name, target, "ptx", cubin.ptx));
    FSA_CHECK(write_file(dir, key->name, target, "resources.txt", resources));
cleanup:
    fsa_resource_usage_free(&usage);
    fsa_cubin_free(&cubin);
    free(resources);
    free(source);
    return st;
}
