#include "compile.h"

#include "base/status_internal.h"
#include "target.h"
#include "compile_source.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fsa_status fsa_compile_options_for(fsa_compile_options *out, const char *target)
{
    memset(out, 0, sizeof *out);
    fsa_target t;
    fsa_status st = fsa_target_parse(&t, target);
    if (st != FSA_STATUS_OK) return st;
    snprintf(out->arch, sizeof out->arch, "--gpu-architecture=%s", t.name);
    out->opts[out->count++] = out->arch;
    out->opts[out->count++] = "--std=c++17";
    out->opts[out->count++] = "--extra-device-vectorization";
    /* Source lines in profiles; no effect on the generated code. */
    out->opts[out->count++] = "--generate-line-info";
    return FSA_STATUS_OK;
}

void fsa_cubin_free(fsa_cubin *c)
{
    if (c == NULL) return;
    free(c->data);
    free(c->log);
    free(c->ptx);
    memset(c, 0, sizeof *c);
}

static fsa_status keep_ptx(fsa_cubin *out, const fsa_nvrtc_api *nvrtc, nvrtcProgram prog, const char *program_name)
{
    size_t size = 0;
    nvrtcResult r = nvrtc->GetPTXSize(prog, &size);
    if (r != NVRTC_SUCCESS || size == 0)
        return fsa_error_set(FSA_STATUS_COMPILE_FAILED, "compile", "%s: no PTX (%s)", program_name,
                             nvrtc->GetErrorString(r));
    out->ptx = malloc(size + 1);
    if (out->ptx == NULL) return fsa_error_set(FSA_STATUS_OUT_OF_MEMORY, "compile", "out of host memory");
    r = nvrtc->GetPTX(prog, out->ptx);
    out->ptx[size] = '\0';
    if (r != NVRTC_SUCCESS)
        return fsa_error_set(FSA_STATUS_COMPILE_FAILED, "compile", "nvrtcGetPTX(%s): %s", program_name,
                             nvrtc->GetErrorString(r));
    return FSA_STATUS_OK;
}

fsa_status fsa_compile(fsa_cubin *out, const fsa_nvrtc_api *nvrtc, const char *source,
                       const char *program_name, const fsa_compile_options *options)
{
    fsa_status st = FSA_STATUS_OK;
    nvrtcProgram prog = NULL;
    char *inlined = NULL;
    memset(out, 0, sizeof *out);

    /* One source with the headers written in, under a fixed absolute name:
     * the cubin's line info then names no directory of this process. */
    FSA_CHECK(fsa_compile_source(&inlined, source, program_name));
    char virtual_name[256];
    snprintf(virtual_name, sizeof virtual_name, "%s%s", FSA_COMPILE_SOURCE_DIR, program_name);
    double t0 = fsa_now_ms();
    nvrtcResult r = nvrtc->CreateProgram(&prog, inlined, virtual_name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        FSA_FAIL(FSA_STATUS_COMPILE_FAILED, "compile", "nvrtcCreateProgram(%s): %s", program_name,
                 nvrtc->GetErrorString(r));
    const char *opts[FSA_MAX_COMPILE_OPTIONS + 1];
    size_t n_opts = options->count;
    memcpy(opts, options->opts, n_opts * sizeof opts[0]);
    if (options->verbose) opts[n_opts++] = FSA_PTXAS_VERBOSE;
    nvrtcResult cr = nvrtc->CompileProgram(prog, (int)n_opts, opts);
    size_t log_size = 0;
    if (nvrtc->GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 0) {
        out->log = malloc(log_size + 1);
        FSA_CHECK_ALLOC(out->log, "compile");
        if (nvrtc->GetProgramLog(prog, out->log) != NVRTC_SUCCESS) out->log[0] = '\0';
        out->log[log_size] = '\0';
    }
    if (cr != NVRTC_SUCCESS) {
        st = fsa_error_set(FSA_STATUS_COMPILE_FAILED, "compile", "%s: %s", program_name,
                           nvrtc->GetErrorString(cr));
        fsa_error_set_log(out->log);
        goto cleanup;
    }
    r = nvrtc->GetCUBINSize(prog, &out->size);
    if (r != NVRTC_SUCCESS || out->size == 0)
        FSA_FAIL(FSA_STATUS_COMPILE_FAILED, "compile", "%s: no cubin (%s)", program_name,
                 nvrtc->GetErrorString(r));
    out->data = malloc(out->size);
    FSA_CHECK_ALLOC(out->data, "compile");
    r = nvrtc->GetCUBIN(prog, (char *)out->data);
    if (r != NVRTC_SUCCESS)
        FSA_FAIL(FSA_STATUS_COMPILE_FAILED, "compile", "nvrtcGetCUBIN(%s): %s", program_name,
                 nvrtc->GetErrorString(r));
    if (options->verbose) FSA_CHECK(keep_ptx(out, nvrtc, prog, program_name));
    out->ms = fsa_now_ms() - t0;
    if (out->log == NULL) {
        out->log = calloc(1, 1);
        FSA_CHECK_ALLOC(out->log, "compile");
    }
cleanup:
    if (prog) nvrtc->DestroyProgram(&prog);
    free(inlined);
    if (st != FSA_STATUS_OK) fsa_cubin_free(out);
    return st;
}
