#include "module_cache.h"

#include "compile.h"
#include "kernel_dump.h"
#include "kernel_key.h"
#include "base/status_internal.h"
#include "templates.h"
#include "base/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum module_state { MODULE_BUILDING, MODULE_READY } module_state;

struct fsa_module {
    uint8_t digest[16];
    char hex[33];
    char *name;
    char *target;
    uint8_t *cubin;
    size_t cubin_size;
    char *entry_names;
    module_state state;
    pthread_mutex_t load_lock; /* guards lib: loading happens once */
    CUlibrary lib;
    struct fsa_module *next;
};

#define TABLE_BUCKETS 256

static struct {
    pthread_mutex_t lock; /* guards the buckets and every module's state */
    pthread_cond_t changed;
    fsa_module *buckets[TABLE_BUCKETS];
    size_t count;
} g_table = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0};

static fsa_module *table_find(const uint8_t digest[16])
{
    for (fsa_module *m = g_table.buckets[digest[0]]; m; m = m->next)
        if (memcmp(m->digest, digest, 16) == 0) return m;
    return NULL;
}

static void table_remove(fsa_module *victim)
{
    fsa_module **p = &g_table.buckets[victim->digest[0]];
    while (*p && *p != victim) p = &(*p)->next;
    if (*p) {
        *p = victim->next;
        g_table.count--;
    }
}

static void module_free(fsa_module *m)
{
    if (m == NULL) return;
    free(m->name);
    free(m->target);
    free(m->cubin);
    free(m->entry_names);
    pthread_mutex_destroy(&m->load_lock);
    free(m);
}

static fsa_module *module_new(const fsa_kernel_key *key, const char *target)
{
    fsa_module *m = calloc(1, sizeof *m);
    if (m == NULL) return NULL;
    memcpy(m->digest, key->digest, 16);
    memcpy(m->hex, key->hex, sizeof m->hex);
    m->name = strdup(key->name);
    m->target = strdup(target);
    m->state = MODULE_BUILDING;
    pthread_mutex_init(&m->load_lock, NULL);
    if (m->name == NULL || m->target == NULL) {
        module_free(m);
        return NULL;
    }
    return m;
}

/* Renders and compiles the request; fills m->cubin. */
static fsa_status build_from_source(fsa_module *m, const fsa_jit_env *env,
                                    const fsa_kernel_request *req, const fsa_compile_options *opts)
{
    fsa_status st = FSA_STATUS_OK;
    char *source = NULL;
    char file[128];
    fsa_cubin cubin = {0};
    snprintf(file, sizeof file, "%s.cu", req->family);
    const fsa_template *tpl = fsa_template_find(file);
    if (tpl == NULL) FSA_FAIL(FSA_STATUS_RENDER_FAILED, "render", "no template %s", file);
    FSA_CHECK(fsa_render(&source, file, tpl->text, req->params, req->n_params));
    FSA_CHECK(fsa_compile(&cubin, env->nvrtc, source, file, opts));
    atomic_fetch_add(&env->counters->compiles, 1);
    atomic_fetch_add(&env->counters->compile_us, (uint64_t)(cubin.ms * 1000.0));
    m->cubin = cubin.data;
    m->cubin_size = cubin.size;
    cubin.data = NULL;
cleanup:
    fsa_cubin_free(&cubin);
    free(source);
    return st;
}

static void publish(const fsa_module *m, const fsa_jit_env *env, const fsa_kernel_key *key)
{
    if (env->disk == NULL || fsa_disk_cache_read_only(env->disk)) return;
    fsa_status st = fsa_disk_cache_publish(env->disk, key, env->target, m->cubin, m->cubin_size,
                                           m->entry_names);
    if (st == FSA_STATUS_OK) return;
    /* The kernel stays usable from memory; say so once per context. */
    atomic_fetch_add(&env->counters->write_failures, 1);
    if (atomic_exchange(&env->counters->warned, 1) == 0)
        fsa_log_warn(env->log, "kernel cache not writable, keeping kernels in memory: %s",
                     fsa_last_error());
    fsa_error_clear();
}

static fsa_status take_disk_entry(fsa_module *m, fsa_disk_entry *e)
{
    m->cubin = e->cubin;
    m->cubin_size = e->cubin_size;
    e->cubin = NULL;
    return FSA_STATUS_OK;
}

/* Fills m from disk or by compiling. Runs without the table lock. */
static fsa_status build(fsa_module *m, const fsa_jit_env *env, const fsa_kernel_request *req,
                        const fsa_kernel_key *key, const fsa_compile_options *opts)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_disk_entry entry = {0};
    int lock_fd = -1;
    uint64_t corrupt = 0;
    int any_nvrtc = env->nvrtc == NULL;

    m->entry_names = strdup(req->entry_names ? req->entry_names : "");
    FSA_CHECK_ALLOC(m->entry_names, "module-cache");
    if (env->disk) {
        st = fsa_disk_cache_lookup(&entry, env->disk, key, env->target, any_nvrtc, &corrupt);
        if (st == FSA_STATUS_OK) {
            atomic_fetch_add(&env->counters->disk_hits, 1);
            st = take_disk_entry(m, &entry);
            goto cleanup;
        }
        if (st != FSA_STATUS_NOT_FOUND) {
            if (atomic_exchange(&env->counters->warned, 1) == 0)
                fsa_log_warn(env->log, "kernel cache lookup failed, compiling instead: %s", fsa_last_error());
            fsa_error_clear();
        }
        st = FSA_STATUS_OK;
    }
    if (!env->jit)
        FSA_FAIL(FSA_STATUS_JIT_DISABLED, "module-cache",
                 "%s is not in the kernel cache and FSA_JIT is off", key->name);
    if (env->nvrtc == NULL)
        FSA_FAIL(FSA_STATUS_NO_NVRTC, "module-cache",
                 "%s is not in the kernel cache and NVRTC is not available", key->name);
    if (env->disk && !fsa_disk_cache_read_only(env->disk)) {
        /* Another process may be compiling this key: wait for it, then look again. */
        lock_fd = fsa_disk_cache_lock(env->disk, key, env->target);
        if (lock_fd >= 0) {
            st = fsa_disk_cache_lookup(&entry, env->disk, key, env->target, 0, &corrupt);
            if (st == FSA_STATUS_OK) {
                atomic_fetch_add(&env->counters->disk_hits, 1);
                st = take_disk_entry(m, &entry);
                goto cleanup;
            }
            st = FSA_STATUS_OK;
            fsa_error_clear();
        }
    }
    FSA_CHECK(build_from_source(m, env, req, opts));
    publish(m, env, key);
cleanup:
    fsa_disk_cache_unlock(lock_fd);
    fsa_disk_entry_free(&entry);
    if (corrupt) atomic_fetch_add(&env->counters->corrupt_entries, corrupt);
    if (st != FSA_STATUS_OK) fsa_error_set_kernel(key->name, key->hex, env->target);
    return st;
}

/* A dump that fails leaves the kernel usable: it is only reported. */
static void dump(const fsa_jit_env *env, const fsa_kernel_request *req, const fsa_kernel_key *key,
                 const fsa_compile_options *opts)
{
    if (fsa_kernel_dump(env->dump_dir, env->nvrtc, req, key, env->target, opts) == FSA_STATUS_OK) return;
    fsa_log_warn(1, "FSA_JIT_DUMP: %s", fsa_last_error());
    fsa_error_clear();
}

fsa_status fsa_module_get(fsa_module **out, const fsa_jit_env *env, const fsa_kernel_request *req)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_kernel_key key = {0};
    fsa_compile_options opts;
    fsa_module *m = NULL;
    *out = NULL;
    FSA_CHECK(fsa_compile_options_for(&opts, env->target));
    fsa_key_inputs in = {req->family, req->params, req->n_params,
                         env->nvrtc ? env->nvrtc->version : NULL, env->target, opts.opts, opts.count};
    FSA_CHECK(fsa_key_build(&key, &in));

    pthread_mutex_lock(&g_table.lock);
    for (;;) {
        m = table_find(key.digest);
        if (m == NULL || m->state == MODULE_READY) break;
        pthread_cond_wait(&g_table.changed, &g_table.lock);
    }
    if (m != NULL) {
        pthread_mutex_unlock(&g_table.lock);
        atomic_fetch_add(&env->counters->memory_hits, 1);
        *out = m;
        goto cleanup;
    }
    m = module_new(&key, env->target);
    if (m == NULL) {
        pthread_mutex_unlock(&g_table.lock);
        FSA_FAIL(FSA_STATUS_OUT_OF_MEMORY, "module-cache", "out of host memory");
    }
    m->next = g_table.buckets[key.digest[0]];
    g_table.buckets[key.digest[0]] = m;
    g_table.count++;
    pthread_mutex_unlock(&g_table.lock);

    st = build(m, env, req, &key, &opts);

    pthread_mutex_lock(&g_table.lock);
    if (st == FSA_STATUS_OK) {
        m->state = MODULE_READY;
        *out = m;
    } else {
        /* Waiters retry the build themselves and see the failure first-hand. */
        table_remove(m);
        module_free(m);
    }
    pthread_cond_broadcast(&g_table.changed);
    pthread_mutex_unlock(&g_table.lock);
    if (st == FSA_STATUS_OK && env->dump_dir) dump(env, req, &key, &opts);
cleanup:
    fsa_key_free(&key);
    return st;
}

const char *fsa_module_name(const fsa_module *m) { return m->name; }
const char *fsa_module_key_hex(const fsa_module *m) { return m->hex; }

const void *fsa_module_cubin(const fsa_module *m, size_t *size_out)
{
    *size_out = m->cubin_size;
    return m->cubin;
}

fsa_status fsa_module_kernel(CUkernel *out, fsa_module *m, const fsa_cu_api *cu, const char *entry)
{
    fsa_status st = FSA_STATUS_OK;
    pthread_mutex_lock(&m->load_lock);
    if (m->lib == NULL)
        FSA_CHECK_CU(cu, cu->LibraryLoadData(&m->lib, m->cubin, NULL, NULL, 0, NULL, NULL, 0), "load");
    FSA_CHECK_CU(cu, cu->LibraryGetKernel(out, m->lib, entry), "load");
cleanup:
    pthread_mutex_unlock(&m->load_lock);
    if (st != FSA_STATUS_OK) fsa_error_set_kernel(m->name, m->hex, m->target);
    return st;
}

size_t fsa_module_count(void)
{
    pthread_mutex_lock(&g_table.lock);
    size_t n = g_table.count;
    pthread_mutex_unlock(&g_table.lock);
    return n;
}
