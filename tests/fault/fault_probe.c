/* fault_probe: one process of the fault matrix (fault_matrix.sh). Asks the
 * library for the fill kernel with one UNROLL value through the JIT and its
 * caches, from one or more threads (each with its own offline context), and
 * checks the bytes it got against what the stand-in NVRTC
 * (tests/fake/fake_nvrtc.c) compiles that source into: a corrupt load is a
 * cubin that is not exactly those bytes. Needs no NVRTC of its own.
 *
 *   fault_probe DIR UNROLL [--threads N] [--mode rw|ro|off] [--jit on|off]
 *               [--expect ok|jit-disabled|any] [--check-disk]
 *
 * --check-disk: afterwards, an entry for the kernel that the cache holds
 * must hold exactly those bytes too (a valid-looking wrong entry is as bad as
 * a wrong load).
 * Prints one line of counts. Exit status: 0 as expected, 1 another status,
 * 3 corrupt bytes, 2 usage. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fake_cubin.h"

#include "jit/compile.h"
#include "jit/compile_source.h"
#include "jit/context.h"
#include "jit/module_cache.h"
#include "jit/render.h"
#include "jit/templates.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET "sm_80"
#define MAX_THREADS 64

typedef struct probe {
    const char *dir;
    char unroll[16];
    fsa_cache_mode mode;
    fsa_jit_mode jit;
    int expect; /* 0 ok, 1 JIT_DISABLED, -1 any */
    int check_disk;
    uint8_t *want;
    size_t want_size;
} probe;

typedef struct worker {
    const probe *p;
    fsa_context *ctx;
    pthread_barrier_t *barrier;
    fsa_status st;
    int corrupt;
} worker;

static fsa_kernel_request request(const probe *p, fsa_param *param)
{
    *param = (fsa_param){"UNROLL", p->unroll, "u"};
    fsa_kernel_request r = {"fill", param, 1, "fsa_fill_u32"};
    return r;
}

/* The bytes the stand-in NVRTC gives for this kernel. */
static int expected_bytes(probe *p)
{
    fsa_param param;
    fsa_kernel_request r = request(p, &param);
    char *source = NULL, *inlined = NULL;
    fsa_compile_options opts;
    int rc = -1;
    const fsa_template *t = fsa_template_find("fill.cu");
    if (t && fsa_render(&source, "fill.cu", t->text, r.params, r.n_params) == FSA_STATUS_OK &&
        fsa_compile_source(&inlined, source, "fill.cu") == FSA_STATUS_OK &&
        fsa_compile_options_for(&opts, TARGET) == FSA_STATUS_OK) {
        p->want_size = fake_cubin_size();
        p->want = malloc(p->want_size);
        if (p->want) rc = fake_cubin_fill(p->want, p->want_size, inlined, opts.opts, (int)opts.count);
    }
    free(source);
    free(inlined);
    return rc;
}

static int same_bytes(const probe *p, const void *data, size_t size)
{
    return size == p->want_size && memcmp(data, p->want, size) == 0;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    fsa_param param;
    fsa_kernel_request r = request(w->p, &param);
    fsa_module *m = NULL;
    pthread_barrier_wait(w->barrier);
    w->st = fsa_module_get(&m, &w->ctx->env, &r);
    if (w->st == FSA_STATUS_OK) {
        size_t size = 0;
        const void *cubin = fsa_module_cubin(m, &size);
        w->corrupt = !same_bytes(w->p, cubin, size);
    }
    return NULL;
}

/* 0 when the cache holds no entry for the kernel or one with exactly the
 * expected bytes. */
static int disk_is_wrong(const probe *p, fsa_context *ctx)
{
    fsa_disk_cache *dc = NULL;
    if (fsa_disk_cache_open(&dc, p->dir, 1) != FSA_STATUS_OK) return 0; /* no cache: nothing to hold */
    fsa_param param;
    fsa_kernel_request r = request(p, &param);
    fsa_compile_options opts;
    fsa_kernel_key key = {0};
    fsa_disk_entry e = {0};
    uint64_t corrupt = 0;
    int wrong = 0;
    fsa_key_inputs in = {r.family, r.params, r.n_params, NULL, TARGET, NULL, 0};
    if (fsa_compile_options_for(&opts, TARGET) == FSA_STATUS_OK) {
        in.options = opts.opts;
        in.n_options = opts.count;
        if (fsa_key_build(&key, &in) == FSA_STATUS_OK &&
            fsa_disk_cache_lookup(&e, dc, &key, TARGET, 1, &corrupt) == FSA_STATUS_OK)
            wrong = !same_bytes(p, e.cubin, e.cubin_size);
    }
    (void)ctx;
    fsa_disk_entry_free(&e);
    fsa_key_free(&key);
    fsa_disk_cache_close(dc);
    return wrong;
}

static int usage(void)
{
    fprintf(stderr, "usage: fault_probe DIR UNROLL [--threads N] [--mode rw|ro|off] [--jit on|off] "
                    "[--expect ok|jit-disabled|any] [--check-disk]\n");
    return 2;
}

static int parse(probe *p, int *threads, int argc, char **argv)
{
    if (argc < 3) return -1;
    p->dir = argv[1];
    snprintf(p->unroll, sizeof p->unroll, "%d", atoi(argv[2]));
    for (int i = 3; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(o, "--check-disk") == 0) {
            p->check_disk = 1;
            continue;
        }
        i++;
        if (strcmp(o, "--threads") == 0) *threads = atoi(v);
        else if (strcmp(o, "--mode") == 0)
            p->mode = strcmp(v, "ro") == 0 ? FSA_CACHE_MODE_READ_ONLY
                      : strcmp(v, "off") == 0 ? FSA_CACHE_MODE_OFF : FSA_CACHE_MODE_READ_WRITE;
        else if (strcmp(o, "--jit") == 0) p->jit = strcmp(v, "off") == 0 ? FSA_JIT_OFF : FSA_JIT_ON;
        else if (strcmp(o, "--expect") == 0)
            p->expect = strcmp(v, "ok") == 0 ? 0 : strcmp(v, "jit-disabled") == 0 ? 1 : -1;
        else return -1;
    }
    return *threads >= 1 && *threads <= MAX_THREADS ? 0 : -1;
}

int main(int argc, char **argv)
{
    probe p = {0};
    p.mode = FSA_CACHE_MODE_READ_WRITE;
    p.jit = FSA_JIT_ON;
    int n = 1;
    if (parse(&p, &n, argc, argv) != 0) return usage();
    if (expected_bytes(&p) != 0) {
        fprintf(stderr, "fault_probe: cannot compute the expected bytes\n");
        return 2;
    }
    worker w[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        fsa_context_options o = FSA_CONTEXT_OPTIONS_INIT;
        o.device = FSA_DEVICE_NONE;
        o.target = TARGET;
        o.cache_dir = p.dir;
        o.cache_mode = p.mode;
        o.jit = p.jit;
        o.log = -1;
        w[i] = (worker){&p, NULL, &barrier, FSA_STATUS_INTERNAL, 0};
        if (fsa_context_create(&w[i].ctx, &o) != FSA_STATUS_OK) {
            printf("context: %s\n", fsa_last_error());
            return 1;
        }
    }
    for (int i = 0; i < n; i++) pthread_create(&tid[i], NULL, run_worker, &w[i]);
    for (int i = 0; i < n; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);

    int rc = 0, corrupt = 0;
    fsa_cache_stats sum = FSA_CACHE_STATS_INIT;
    for (int i = 0; i < n; i++) {
        fsa_cache_stats s = FSA_CACHE_STATS_INIT;
        fsa_context_cache_stats(&s, w[i].ctx);
        sum.compiles += s.compiles;
        sum.disk_hits += s.disk_hits;
        sum.memory_hits += s.memory_hits;
        sum.corrupt_entries += s.corrupt_entries;
        sum.write_failures += s.write_failures;
        corrupt += w[i].corrupt;
        int want = p.expect == 1 ? FSA_STATUS_JIT_DISABLED : FSA_STATUS_OK;
        if (p.expect >= 0 && w[i].st != (fsa_status)want) {
            printf("thread %d: %s\n", i, fsa_status_name(w[i].st));
            rc = 1;
        }
    }
    if (p.check_disk && disk_is_wrong(&p, w[0].ctx)) corrupt++;
    printf("%s compiles=%llu disk=%llu memory=%llu corrupt_entries=%llu write_failures=%llu\n",
           corrupt ? "CORRUPT" : rc ? "UNEXPECTED" : "ok", (unsigned long long)sum.compiles,
           (unsigned long long)sum.disk_hits, (unsigned long long)sum.memory_hits,
           (unsigned long long)sum.corrupt_entries, (unsigned long long)sum.write_failures);
    for (int i = 0; i < n; i++) fsa_context_destroy(w[i].ctx);
    free(p.want);
    return corrupt ? 3 : rc;
}
