/* The process-wide kernel table. A module is compiled or read from disk
 * once per process; each context then uses it only as its own settings
 * allow (see fsa_module_get in module_cache.h). */
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

#define MAX_KNOWN_CACHES 8

struct fsa_module {
    uint8_t digest[16];
    char hex[33];
    char *name;
    char *target;
    uint8_t *cubin;
    size_t cubin_size;
    char *entry_names;
    /* The key the cubin was built under: the request's key, or for an
     * any-NVRTC disk hit the entry's own (with the NVRTC that built it).
     * What a publish to another context's cache writes. */
    fsa_kernel_key origin;
    module_state state;
    pthread_mutex_t load_lock; /* guards lib (loading happens once) and known */
    CUlibrary lib;
    /* Disk caches known to hold the module (device and inode of their v1). */
    uint64_t known[MAX_KNOWN_CACHES][2];
    int n_known;
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
    fsa_key_free(&m->origin);
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

/* NVRTC, loaded the first time a context that may compile asks for a
 * kernel (the key names its version). Contexts with JIT off never load it,
 * so a broken libnvrtc cannot harm them. NULL when it cannot be loaded
 * (warned once per context): cached kernels then still work. */
static const fsa_nvrtc_api *env_nvrtc(const fsa_jit_env *env)
{
    const fsa_nvrtc_api *nvrtc = NULL;
    if (!env->jit) return NULL;
    if (fsa_nvrtc_load(&nvrtc) == FSA_STATUS_OK) return nvrtc;
    if (atomic_exchange(&env->counters->nvrtc_warned, 1) == 0) fsa_log_warn(env->log, "%s", fsa_last_error());
    fsa_error_clear();
    return NULL;
}

/* Sets the module's origin key from a key text (copied). */
static fsa_status set_origin(fsa_module *m, const char *text)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_key_free(&m->origin);
    m->origin.text = strdup(text);
    m->origin.name = strdup(m->name);
    FSA_CHECK_ALLOC(m->origin.text, "module-cache");
    FSA_CHECK_ALLOC(m->origin.name, "module-cache");
    fsa_digest128(m->origin.digest, text, strlen(text));
    fsa_hex(m->origin.hex, m->origin.digest, 16);
cleanup:
    return st;
}

/* Renders and compiles the request; fills m->cubin. */
static fsa_status build_from_source(fsa_module *m, const fsa_jit_env *env, const fsa_nvrtc_api *nvrtc,
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
    FSA_CHECK(fsa_compile(&cubin, nvrtc, source, file, opts));
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

void fsa_jit_counters_init(fsa_jit_counters *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->unwritten_lock, NULL);
}

void fsa_jit_counters_free(fsa_jit_counters *c)
{
    pthread_mutex_destroy(&c->unwritten_lock);
    free(c->unwritten);
    c->unwritten = NULL;
}

/* 1 the first time the module's publication to the context's cache failed
 * (then noted in its counters), 0 when it had failed there before. The
 * context keeps the note, not the module: however many contexts fail on a
 * module, each counts it once. Out of memory for the note: 1 (a count too
 * many rather than a failure untold). */
static int first_failure_in(const fsa_module *m, fsa_jit_counters *c)
{
    int first = 1;
    pthread_mutex_lock(&c->unwritten_lock);
    for (size_t i = 0; i < c->n_unwritten && first; i++) first = c->unwritten[i] != m;
    const fsa_module **room = first ? fsa_array_room((void *)c->unwritten, &c->cap_unwritten, c->n_unwritten,
                                                     sizeof *c->unwritten, 16)
                                    : NULL;
    if (room) {
        c->unwritten = room;
        c->unwritten[c->n_unwritten++] = m;
    }
    pthread_mutex_unlock(&c->unwritten_lock);
    return first;
}

/* Writes the module to the context's cache under its origin key; 1 when
 * it is there now. */
static int publish(const fsa_module *m, const fsa_jit_env *env)
{
    if (env->disk == NULL || fsa_disk_cache_read_only(env->disk)) return 0;
    fsa_status st = fsa_disk_cache_publish(env->disk, &m->origin, env->target, m->cubin, m->cubin_size,
                                           m->entry_names);
    if (st == FSA_STATUS_OK) return 1;
    /* The kernel stays usable from memory; say so once per context, and count the entry once. */
    if (first_failure_in(m, env->counters)) atomic_fetch_add(&env->counters->write_failures, 1);
    if (atomic_exchange(&env->counters->warned, 1) == 0)
        fsa_log_warn(env->log, "kernel cache not writable, keeping kernels in memory: %s",
                     fsa_last_error());
    fsa_error_clear();
    return 0;
}

static fsa_status take_disk_entry(fsa_module *m, fsa_disk_entry *e)
{
    m->cubin = e->cubin;
    m->cubin_size = e->cubin_size;
    e->cubin = NULL;
    return set_origin(m, e->key_text);
}

/* The context's lookup: the exact key when it has NVRTC, else any entry
 * that differs only in the NVRTC version and that its driver can load. */
static fsa_status disk_lookup(fsa_disk_entry *e, const fsa_jit_env *env, const fsa_kernel_key *key,
                              int exact, uint64_t *corrupt)
{
    if (exact) return fsa_disk_cache_lookup(e, env->disk, key, env->target, 0, corrupt);
    return fsa_disk_cache_lookup_compatible(e, env->disk, key, env->target, env->driver_major, corrupt);
}

/* The error for a kernel that this context may not build: JIT_DISABLED,
 * or NO_NVRTC. With no disk cache it says why there is none. */
static fsa_status not_cached(const fsa_jit_env *env, const char *name)
{
    fsa_strbuf b = {0};
    if (env->disk) fsa_strbuf_appendf(&b, "%s is not in the kernel cache %s", name, fsa_disk_cache_root(env->disk));
    else fsa_strbuf_appendf(&b, "%s is not cached: the context has no disk cache", name);
    if (env->disk == NULL && env->cache_note && *env->cache_note) fsa_strbuf_appendf(&b, " (%s)", env->cache_note);
    /* Without NVRTC, what the loader tried and why each failed (its record,
     * kept from the one load attempt per process). */
    const char *failure = env->jit ? fsa_nvrtc_load_failure() : "";
    char *tried = *failure ? strdup(failure) : NULL;
    char *what = fsa_strbuf_take(&b);
    fsa_status st = env->jit ? FSA_STATUS_NO_NVRTC : FSA_STATUS_JIT_DISABLED;
    st = fsa_error_set(st, "module-cache", "%s and %s%s%s", what ? what : name,
                       env->jit ? "NVRTC is not available" : "FSA_JIT is off", tried ? ": " : "", tried ? tried : "");
    /* The message has a fixed size (a long cache path leaves little of it):
     * the whole record goes into the error's log as well. */
    if (tried) fsa_error_set_log(tried);
    free(what);
    free(tried);
    return st;
}

/* Fills m from disk or by compiling. Runs without the table lock. */
static fsa_status build(fsa_module *m, const fsa_jit_env *env, const fsa_nvrtc_api *nvrtc,
                        const fsa_kernel_request *req, const fsa_kernel_key *key, const fsa_compile_options *opts)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_disk_entry entry = {0};
    int lock_fd = -1, on_disk = 0;
    uint64_t corrupt = 0;

    m->entry_names = strdup(req->entry_names ? req->entry_names : "");
    FSA_CHECK_ALLOC(m->entry_names, "module-cache");
    if (env->disk) {
        st = disk_lookup(&entry, env, key, nvrtc != NULL, &corrupt);
        if (st == FSA_STATUS_OK) {
            atomic_fetch_add(&env->counters->disk_hits, 1);
            on_disk = 1;
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
    if (!env->jit || nvrtc == NULL) FSA_CHECK(not_cached(env, key->name));
    if (env->disk && !fsa_disk_cache_read_only(env->disk)) {
        /* Another process may be compiling this key: wait for it, then look again. */
        lock_fd = fsa_disk_cache_lock(env->disk, key, env->target);
        if (lock_fd >= 0) {
            /* A bad file the first lookup counted (and could not delete) is
             * not counted again. */
            uint64_t again = 0;
            st = fsa_disk_cache_lookup(&entry, env->disk, key, env->target, 0, &again);
            if (corrupt == 0) corrupt = again;
            if (st == FSA_STATUS_OK) {
                atomic_fetch_add(&env->counters->disk_hits, 1);
                on_disk = 1;
                st = take_disk_entry(m, &entry);
                goto cleanup;
            }
            st = FSA_STATUS_OK;
            fsa_error_clear();
        } else {
            /* A duplicate compile is harmless: publishing is atomic. */
            if (lock_fd == FSA_DISK_LOCK_GAVE_UP)
                fsa_log_warn(env->log, "compiling %s without the cache lock: %s", key->name, fsa_last_error());
            fsa_error_clear();
        }
    }
    FSA_CHECK(build_from_source(m, env, nvrtc, req, opts));
    FSA_CHECK(set_origin(m, key->text));
    on_disk = publish(m, env);
cleanup:
    /* Only a cache that holds the kernel is known to: a JIT-off context on
     * it may then use the module (use_from_memory). */
    if (st == FSA_STATUS_OK && on_disk) {
        uint64_t id[2];
        fsa_disk_cache_identity(env->disk, id);
        memcpy(m->known[0], id, sizeof id);
        m->n_known = 1;
    }
    fsa_disk_cache_unlock(lock_fd);
    fsa_disk_entry_free(&entry);
    if (corrupt) atomic_fetch_add(&env->counters->corrupt_entries, corrupt);
    if (st != FSA_STATUS_OK) fsa_error_set_kernel(key->name, key->hex, env->target);
    return st;
}

/* Under m->load_lock. */
static int known_locked(const fsa_module *m, const uint64_t id[2])
{
    for (int i = 0; i < m->n_known; i++)
        if (memcmp(m->known[i], id, 2 * sizeof id[0]) == 0) return 1;
    return 0;
}

static int known_in(fsa_module *m, const uint64_t id[2])
{
    pthread_mutex_lock(&m->load_lock);
    const int known = known_locked(m, id);
    pthread_mutex_unlock(&m->load_lock);
    return known;
}

/* Several threads may find one cache unknown at once and all add it: it
 * takes one slot, else the slots fill with one cache and no other is kept. */
static void add_known(fsa_module *m, const uint64_t id[2])
{
    pthread_mutex_lock(&m->load_lock);
    if (!known_locked(m, id) && m->n_known < MAX_KNOWN_CACHES) memcpy(m->known[m->n_known++], id, 2 * sizeof id[0]);
    pthread_mutex_unlock(&m->load_lock);
}

/* A module another context of the process built, used under this
 * context's settings: with JIT off only when its own disk cache holds the
 * kernel (it must not succeed where a process of its own would fail); with
 * a writable disk cache that lacks it, after publishing it there (so
 * precompiling into one directory, then another, fills both). */
static fsa_status use_from_memory(fsa_module *m, const fsa_jit_env *env, const fsa_nvrtc_api *nvrtc,
                                  const fsa_kernel_key *key)
{
    fsa_status st = FSA_STATUS_OK;
    fsa_disk_entry e = {0};
    uint64_t id[2], corrupt = 0;
    if (env->disk == NULL) {
        if (!env->jit) FSA_CHECK(not_cached(env, key->name));
        goto cleanup;
    }
    fsa_disk_cache_identity(env->disk, id);
    if (known_in(m, id)) goto cleanup;
    int present = fsa_disk_cache_lookup(&e, env->disk, &m->origin, env->target, 0, &corrupt) == FSA_STATUS_OK;
    fsa_disk_entry_free(&e);
    if (!present && strcmp(m->origin.hex, key->hex) != 0)
        present = disk_lookup(&e, env, key, nvrtc != NULL, &corrupt) == FSA_STATUS_OK;
    fsa_disk_entry_free(&e);
    fsa_error_clear();
    if (corrupt) atomic_fetch_add(&env->counters->corrupt_entries, corrupt);
    if (!present && !env->jit) FSA_CHECK(not_cached(env, key->name));
    if (present || publish(m, env)) add_known(m, id);
cleanup:
    if (st != FSA_STATUS_OK) fsa_error_set_kernel(key->name, key->hex, env->target);
    return st;
}

/* A dump that fails leaves the kernel usable: it is only reported. */
static void dump(const fsa_jit_env *env, const fsa_nvrtc_api *nvrtc, const fsa_kernel_request *req,
                 const fsa_kernel_key *key, const fsa_compile_options *opts)
{
    /* A dump compiles again: asked for explicitly, it loads NVRTC even
     * where the context itself never would (JIT off). */
    if (nvrtc == NULL && fsa_nvrtc_load(&nvrtc) != FSA_STATUS_OK) nvrtc = NULL;
    if (fsa_kernel_dump(env->dump_dir, nvrtc, req, key, env->target, opts) == FSA_STATUS_OK) return;
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
    const fsa_nvrtc_api *nvrtc = env_nvrtc(env);
    FSA_CHECK(fsa_compile_options_for(&opts, env->target));
    /* Without NVRTC the lookup takes the entry of any NVRTC that the driver
     * can load: that limit belongs to the key of the process-wide table (an
     * offline context, with no limit, must not hand a device context a cubin
     * its driver refuses); the disk comparison ignores the nvrtc line. */
    char none[32] = "none";
    if (nvrtc == NULL && env->driver_major > 0) snprintf(none, sizeof none, "none cuda%d", env->driver_major);
    fsa_key_inputs in = {req->family, req->params, req->n_params, nvrtc ? nvrtc->key_version : none, env->target,
                         opts.opts, opts.count};
    FSA_CHECK(fsa_key_build(&key, &in));

    pthread_mutex_lock(&g_table.lock);
    for (;;) {
        m = table_find(key.digest);
        if (m == NULL || m->state == MODULE_READY) break;
        pthread_cond_wait(&g_table.changed, &g_table.lock);
    }
    if (m != NULL) {
        pthread_mutex_unlock(&g_table.lock);
        FSA_CHECK(use_from_memory(m, env, nvrtc, &key));
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

    st = build(m, env, nvrtc, req, &key, &opts);

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
    if (st == FSA_STATUS_OK && env->dump_dir) dump(env, nvrtc, req, &key, &opts);
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
