#include "context.h"

#include "base/status_internal.h"
#include "base/struct_size.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static fsa_status parse_cache_mode(fsa_cache_mode *out, fsa_cache_mode requested)
{
    if (requested != FSA_CACHE_MODE_DEFAULT) {
        if (requested < FSA_CACHE_MODE_READ_WRITE || requested > FSA_CACHE_MODE_OFF)
            return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "context", "unknown cache mode %d",
                                 (int)requested);
        *out = requested;
        return FSA_STATUS_OK;
    }
    const char *v = getenv("FSA_CACHE_MODE");
    if (v == NULL || *v == '\0' || strcasecmp(v, "rw") == 0) {
        *out = FSA_CACHE_MODE_READ_WRITE;
    } else if (strcasecmp(v, "ro") == 0) {
        *out = FSA_CACHE_MODE_READ_ONLY;
    } else if (strcasecmp(v, "off") == 0) {
        *out = FSA_CACHE_MODE_OFF;
    } else {
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "context",
                             "FSA_CACHE_MODE=%s: expected rw, ro or off", v);
    }
    return FSA_STATUS_OK;
}

/* An on / off environment switch: unset or empty gives `fallback`; a value
 * that is neither (FSA_CHECK=enable) is refused rather than read as off. */
static fsa_status env_switch(int *out, const char *name, int fallback)
{
    const char *raw = getenv(name);
    const int v = fsa_env_flag(name, -1);
    if (v < 0 && raw && *raw)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "context", "%s=%s: expected on or off (1, true, yes / 0, "
                             "false, no)", name, raw);
    *out = v < 0 ? fallback : v;
    return FSA_STATUS_OK;
}

static fsa_status parse_jit(int *out, fsa_jit_mode requested)
{
    if (requested == FSA_JIT_ON || requested == FSA_JIT_OFF) {
        *out = requested == FSA_JIT_ON;
        return FSA_STATUS_OK;
    }
    if (requested != FSA_JIT_DEFAULT)
        return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "context", "unknown JIT mode %d",
                             (int)requested);
    return env_switch(out, "FSA_JIT", 1);
}

/* off, on, force: 0, 1, 2 (the attention layer's fsa_tune_level). */
static fsa_status parse_tune(int *out, fsa_tune_mode requested)
{
    static const char *const names[] = {"off", "on", "force"};
    if (requested != FSA_TUNE_DEFAULT) {
        if (requested < FSA_TUNE_OFF || requested > FSA_TUNE_FORCE)
            return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "context", "unknown tune mode %d", (int)requested);
        *out = (int)requested - FSA_TUNE_OFF;
        return FSA_STATUS_OK;
    }
    const char *v = getenv("FSA_TUNE");
    *out = 0;
    if (v == NULL || *v == '\0') return FSA_STATUS_OK;
    for (int i = 0; i < 3; i++)
        if (strcasecmp(v, names[i]) == 0) {
            *out = i;
            return FSA_STATUS_OK;
        }
    return fsa_error_set(FSA_STATUS_INVALID_ARGUMENT, "context", "FSA_TUNE=%s: expected off, on or force", v);
}

/* $FSA_CACHE_DIR, else $XDG_CACHE_HOME/fsa (an absolute path only, as the XDG
 * base directory rules ask), else $HOME/.cache/fsa. */
/* NULL when no variable names a directory (*named 0) or its path could not
 * be allocated (*named 1). */
static char *default_cache_dir(int *named)
{
    const char *d = getenv("FSA_CACHE_DIR");
    *named = 1;
    if (d && *d) return strdup(d);
    /* Whole, however long: a shortened path would name another directory. */
    fsa_strbuf b = {0};
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && xdg[0] == '/') fsa_strbuf_appendf(&b, "%s/fsa", xdg);
    else if (home && *home) fsa_strbuf_appendf(&b, "%s/.cache/fsa", home);
    else *named = 0;
    return *named ? fsa_strbuf_take(&b) : NULL;
}

static fsa_status open_device(fsa_context *ctx, const char *requested_target)
{
    fsa_status st = FSA_STATUS_OK;
    const fsa_cu_api *cu = NULL;
    FSA_CHECK(fsa_cu_load(&cu));
    int count = 0;
    FSA_CHECK_CU(cu, cu->DeviceGetCount(&count), "context");
    if (ctx->device < 0 || ctx->device >= count)
        FSA_FAIL(FSA_STATUS_NO_DEVICE, "context", "device %d requested, %d present", ctx->device, count);
    FSA_CHECK_CU(cu, cu->DeviceGet(&ctx->cu_device, ctx->device), "context");
    FSA_CHECK_CU(cu, cu->DeviceGetAttribute(&ctx->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->cu_device), "context");
    FSA_CHECK_CU(cu, cu->DeviceGetAttribute(&ctx->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->cu_device), "context");
    FSA_CHECK_CU(cu, cu->DeviceGetAttribute(&ctx->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->cu_device), "context");
    FSA_CHECK_CU(cu, cu->DeviceGetAttribute(&ctx->max_smem_per_block, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ctx->cu_device), "context");
    if (ctx->cc_major < 8)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED_DEVICE, "context",
                 "device %d has compute capability %d.%d; sm_80 or newer is required", ctx->device,
                 ctx->cc_major, ctx->cc_minor);
    if (requested_target) {
        FSA_CHECK(fsa_target_parse(&ctx->arch, requested_target));
        if (!fsa_target_runs_on(&ctx->arch, ctx->cc_major, ctx->cc_minor))
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "context",
                     "target %s does not run on device %d (compute capability %d.%d)",
                     requested_target, ctx->device, ctx->cc_major, ctx->cc_minor);
    } else {
        FSA_CHECK(fsa_target_for_capability(&ctx->arch, ctx->cc_major, ctx->cc_minor));
    }
    if (cu->DeviceGetName == NULL || cu->DeviceGetName(ctx->gpu_name, (int)sizeof ctx->gpu_name, ctx->cu_device) != CUDA_SUCCESS)
        snprintf(ctx->gpu_name, sizeof ctx->gpu_name, "unknown");
    FSA_CHECK_CU(cu, cu->DevicePrimaryCtxRetain(&ctx->cu_context, ctx->cu_device), "context");
    ctx->cu = cu;
cleanup:
    return st;
}

static void open_disk_cache(fsa_context *ctx, fsa_cache_mode mode, const char *requested_dir)
{
    /* The reasons go into every later "not cached" error too (cache_note). */
    if (mode == FSA_CACHE_MODE_OFF) {
        ctx->cache_note = strdup("the cache mode is off");
        return;
    }
    /* An empty directory means "not set", as for FSA_CACHE_DIR="". */
    int named = requested_dir && *requested_dir;
    ctx->cache_dir = named ? strdup(requested_dir) : default_cache_dir(&named);
    if (ctx->cache_dir == NULL) {
        fsa_log_warn(ctx->log, named ? "no memory for the cache directory's path; kernels stay in memory"
                                     : "no cache directory (set FSA_CACHE_DIR or HOME); kernels stay in memory");
        ctx->cache_note = strdup(named ? "no cache directory: out of memory for its path"
                                       : "no cache directory: FSA_CACHE_DIR and HOME are unset or empty and "
                                         "XDG_CACHE_HOME is not an absolute path");
        return;
    }
    fsa_status st = fsa_disk_cache_open(&ctx->disk, ctx->cache_dir, mode == FSA_CACHE_MODE_READ_ONLY);
    if (st != FSA_STATUS_OK) {
        /* A refused or unusable directory is not fatal: work from memory.
         * The reason goes into every later "not cached" error too. */
        fsa_log_warn(ctx->log, "kernel cache disabled: %s", fsa_last_error());
        ctx->cache_note = strdup(fsa_last_error_info()->message);
        if (mode == FSA_CACHE_MODE_READ_WRITE) {
            /* Nothing this context builds can be published: count that once. */
            atomic_fetch_add(&ctx->counters.write_failures, 1);
            atomic_store(&ctx->counters.warned, 1);
        }
        fsa_error_clear();
        ctx->disk = NULL;
    }
}

fsa_status fsa_context_create(fsa_context **out, const fsa_context_options *options)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_context *ctx = NULL;
    fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
    if (out == NULL) return fsa_error_set(FSA_STATUS_NULL_POINTER, "context", "out is NULL");
    *out = NULL;
    if (options) {
        st = fsa_struct_read(&o, sizeof o, options, FSA_CONTEXT_OPTIONS_FIRST_SIZE, "context",
                             "fsa_context_options");
        if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(&o, fsa_context_options, check, "context");
        if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(&o, fsa_context_options, tune, "context");
        if (st == FSA_STATUS_OK) st = FSA_STRUCT_FIELD_WHOLE(&o, fsa_context_options, reserved, "context");
        if (st != FSA_STATUS_OK) return st;
    }
    ctx = calloc(1, sizeof *ctx);
    FSA_CHECK_ALLOC(ctx, "context");
    pthread_mutex_init(&ctx->fill_lock, NULL);
    fsa_jit_counters_init(&ctx->counters);
    ctx->target = ctx->arch.name;
    ctx->device = o.device;
    /* Only 1, -1 and 0 mean something: any other value is a caller's mistake,
     * as the same value through FSA_LOG or FSA_CHECK is. */
    if (o.log < -1 || o.log > 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "context", "unknown log value %d (1 = on, -1 = off, 0 = $FSA_LOG)",
                 o.log);
    ctx->log = o.log > 0 ? 1 : 0;
    if (o.log == 0) FSA_CHECK(env_switch(&ctx->log, "FSA_LOG", 0));
    FSA_APPENDED_FIELD(fsa_context_options, check, FSA_CONTEXT_OPTIONS_FIRST_SIZE);
    if (o.check < -1 || o.check > 1)
        FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "context",
                 "unknown check value %lld (1 = on, -1 = off, 0 = $FSA_CHECK)", (long long)o.check);
    ctx->check = o.check > 0 ? 1 : 0;
    if (o.check == 0) FSA_CHECK(env_switch(&ctx->check, "FSA_CHECK", 0));
    FSA_APPENDED_FIELD(fsa_context_options, tune, FSA_CONTEXT_OPTIONS_FIRST_SIZE);
    FSA_APPENDED_FIELD(fsa_context_options, reserved, FSA_CONTEXT_OPTIONS_FIRST_SIZE);
    FSA_CHECK(parse_tune(&ctx->tune, o.tune));

    fsa_cache_mode mode = FSA_CACHE_MODE_READ_WRITE;
    int jit = 1;
    FSA_CHECK(parse_cache_mode(&mode, o.cache_mode));
    FSA_CHECK(parse_jit(&jit, o.jit));

    if (o.device == FSA_DEVICE_NONE) {
        if (o.target == NULL)
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "context", "an offline context needs a target");
        FSA_CHECK(fsa_target_parse(&ctx->arch, o.target));
        /* Without a device, the target's own limit stands in for the device's. */
        ctx->max_smem_per_block = ctx->arch.smem_per_block;
    } else {
        if (o.device < 0)
            FSA_FAIL(FSA_STATUS_INVALID_ARGUMENT, "context", "device %d is not an ordinal", o.device);
        FSA_CHECK(open_device(ctx, o.target));
    }

    /* NVRTC is loaded only when a kernel has to be compiled (module_cache.c). */
    open_disk_cache(ctx, mode, o.cache_dir);
    const char *dump_dir = getenv("FSA_JIT_DUMP");
    if (dump_dir && *dump_dir) {
        /* Relative: fixed to the working directory of now, as the cache
         * directory is; a later chdir must not move the dumps. */
        char *cwd = dump_dir[0] == '/' ? NULL : getcwd(NULL, 0);
        if (dump_dir[0] != '/' && cwd == NULL) {
            /* (Reported whatever the log setting: a dump asked for reports its failures.) */
            fsa_log_warn(1, "FSA_JIT_DUMP=%s is relative and the working directory is unknown (%s): no dumps",
                         dump_dir, strerror(errno));
        } else {
            fsa_strbuf b = {0};
            if (cwd) fsa_strbuf_appendf(&b, "%s/%s", cwd, dump_dir);
            else fsa_strbuf_appendf(&b, "%s", dump_dir);
            ctx->dump_dir = fsa_strbuf_take(&b);
            free(cwd);
            FSA_CHECK_ALLOC(ctx->dump_dir, "context");
        }
    }
    ctx->env.target = ctx->target;
    ctx->env.disk = ctx->disk;
    ctx->env.cache_note = ctx->cache_note ? ctx->cache_note : "";
    ctx->env.jit = jit;
    ctx->env.driver_major = ctx->cu ? ctx->cu->driver_version / 1000 : 0;
    ctx->env.log = ctx->log;
    ctx->env.dump_dir = ctx->dump_dir;
    ctx->env.counters = &ctx->counters;
    *out = ctx;
    ctx = NULL;
cleanup:
    fsa_context_destroy(ctx);
    return st;
}

void fsa_context_destroy(fsa_context *ctx)
{
    if (ctx == NULL) return;
    if (ctx->cu && ctx->cu_context) ctx->cu->DevicePrimaryCtxRelease(ctx->cu_device);
    fsa_disk_cache_close(ctx->disk);
    free(ctx->cache_dir);
    free(ctx->cache_note);
    free(ctx->dump_dir);
    pthread_mutex_destroy(&ctx->fill_lock);
    fsa_jit_counters_free(&ctx->counters);
    free(ctx);
}

const char *fsa_context_target(const fsa_context *ctx) { return ctx ? ctx->target : ""; }

const char *fsa_context_cache_dir(const fsa_context *ctx)
{
    return ctx && ctx->disk ? fsa_disk_cache_root(ctx->disk) : "";
}

fsa_status fsa_context_cache_stats(fsa_cache_stats *out, const fsa_context *ctx)
{
    if (out == NULL || ctx == NULL)
        return fsa_error_set(FSA_STATUS_NULL_POINTER, "context", "NULL stats or context");
    fsa_jit_counters *c = (fsa_jit_counters *)&ctx->counters;
    fsa_cache_stats s = FSA_CACHE_STATS_INIT;
    s.memory_hits = atomic_load(&c->memory_hits);
    s.disk_hits = atomic_load(&c->disk_hits);
    s.compiles = atomic_load(&c->compiles);
    s.compile_ms = (double)atomic_load(&c->compile_us) / 1000.0;
    s.corrupt_entries = atomic_load(&c->corrupt_entries);
    s.write_failures = atomic_load(&c->write_failures);
    return fsa_struct_write(out, &s, sizeof s, FSA_CACHE_STATS_FIRST_SIZE, "context", "fsa_cache_stats");
}

fsa_status fsa_context_enter(const fsa_context *ctx)
{
    fsa_status st = FSA_STATUS_OK;
    if (ctx->cu == NULL) return FSA_STATUS_OK;
    FSA_CHECK_CU(ctx->cu, ctx->cu->CtxPushCurrent(ctx->cu_context), "context");
cleanup:
    return st;
}

void fsa_context_leave(const fsa_context *ctx)
{
    if (ctx->cu == NULL) return;
    CUcontext popped;
    ctx->cu->CtxPopCurrent(&popped);
}

/* The plans fit dynamic shared memory to the target's limit with each
 * kernel's static bytes as the kernel table counts them; a kernel holding
 * more than counted would pass a plan's check and fail at load on a shape
 * planned near the limit. So every load compares, and says which count is
 * short rather than leaving the driver's invalid-value error. */
fsa_status fsa_context_check_function_smem(const fsa_context *ctx, CUfunction fn, const char *entry, int dynamic,
                                           int counted)
{
    fsa_status st = FSA_STATUS_OK;
    int used = 0;
    FSA_CHECK_CU(ctx->cu, ctx->cu->FuncGetAttribute(&used, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "load");
    if (counted >= 0 && used > counted)
        FSA_FAIL(FSA_STATUS_INTERNAL, "load",
                 "%s uses %d bytes of static shared memory; its plan counted %d (the kernel table is short)",
                 entry, used, counted);
    if (dynamic > ctx->max_smem_per_block - used)
        FSA_FAIL(FSA_STATUS_UNSUPPORTED, "load",
                 "%s needs %d bytes of dynamic and %d of static shared memory; the device allows %d", entry,
                 dynamic, used, ctx->max_smem_per_block);
cleanup:
    return st;
}

fsa_status fsa_context_get_function(CUfunction *fn_out, fsa_context *ctx,
                                    const fsa_kernel_request *req, const char *entry, int smem_bytes,
                                    int static_counted)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_module *m = NULL;
    CUkernel kernel = NULL;
    int entered = 0;
    *fn_out = NULL;
    FSA_CHECK(fsa_module_get(&m, &ctx->env, req));
    if (ctx->cu == NULL) goto cleanup;
    FSA_CHECK(fsa_module_kernel(&kernel, m, ctx->cu, entry));
    FSA_CHECK(fsa_context_enter(ctx));
    entered = 1;
    FSA_CHECK_CU(ctx->cu, ctx->cu->KernelGetFunction(fn_out, kernel), "load");
    if (smem_bytes > 0) {
        FSA_CHECK(fsa_context_check_function_smem(ctx, *fn_out, entry, smem_bytes, static_counted));
        FSA_CHECK_CU(ctx->cu,
                     ctx->cu->FuncSetAttribute(*fn_out, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               smem_bytes),
                     "load");
    }
cleanup:
    if (entered) fsa_context_leave(ctx);
    if (st != FSA_STATUS_OK) {
        *fn_out = NULL;
        if (m) fsa_error_set_kernel(fsa_module_name(m), fsa_module_key_hex(m), ctx->target);
    }
    return st;
}
