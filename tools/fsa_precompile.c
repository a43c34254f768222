/* fsa-precompile: fills the fsa-jit kernel cache ahead of time for a grid of
 * problem shapes, and lists, verifies or prunes that cache.
 *
 * It uses only the public API (fsa.h): a shape is "precompiled" by creating a
 * plan for it, so the cache ends up holding exactly the kernels a later
 * fsa_plan_create in an application will look up, under the same keys. */
#define _POSIX_C_SOURCE 200809L

#include "precompile_grid.h"
#include "tool_args.h"

#include <fsa.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { EXIT_FAILED = TOOL_EXIT_FAILED, EXIT_USAGE = TOOL_EXIT_USAGE };

/* --------------------------------------------------------------- helpers */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* "12.3 MiB": for people; exact byte counts are printed beside it. */
static const char *human_bytes(char *buf, size_t cap, uint64_t bytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%" PRIu64 " B", bytes);
    else snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

/* Opens a context for an offline target (arch != NULL) or the given device.
 * The environment's FSA_CACHE_MODE and FSA_JIT are for applications; this
 * tool exists to compile and to write (verify also deletes bad entries). */
static fsa_status open_context(fsa_context **out, const tool_options *o, const char *arch)
{
    fsa_context_options co = FSA_CONTEXT_OPTIONS_INIT;
    co.device = arch ? FSA_DEVICE_NONE : o->device;
    co.target = arch;
    co.cache_dir = o->cache_dir;
    co.cache_mode = FSA_CACHE_MODE_READ_WRITE;
    co.jit = FSA_JIT_ON;
    co.check = 1; /* the check-mode kernel too, for servers that run FSA_CHECK=1 with FSA_JIT=off */
    co.tune = FSA_TUNE_ON; /* the kernels tuning can measure too (FSA_TUNE=on with FSA_JIT=off); nothing
                            * is measured unless --tune asks (fsa_plan_tune) */
    co.log = 1; /* an unusable cache directory must not pass silently */
    return fsa_context_create(out, &co);
}

/* Reports a context that could not be created. An --arch the library
 * rejects parses fine: it is not a usage error but an unusable target, like
 * a missing GPU or driver (TOOL_EXIT_TARGET). */
static int context_error(fsa_status st, const char *arch, int device)
{
    if (arch) fprintf(stderr, PROG ": target %s: %s\n", arch, fsa_last_error());
    else fprintf(stderr, PROG ": device %d: %s\n", device, fsa_last_error());
    return tool_context_exit_code(st);
}

/* Precompiling or maintaining without a disk cache would do nothing. */
static int require_disk_cache(const fsa_context *ctx)
{
    if (fsa_context_cache_dir(ctx)[0] != '\0') return 0;
    fprintf(stderr, PROG ": no usable cache directory (see the warning above); nothing would be kept\n");
    return EXIT_FAILED;
}

/* ------------------------------------------------------------ precompile */

typedef struct target_state {
    fsa_context *ctx;
    fsa_cache_stats start; /* at the beginning, for the totals */
    /* Counters are per context and all workers share it, so a plan's delta
     * is its own only if no other plan on this context ran meanwhile. */
    pthread_mutex_t lock;
    int active;       /* plans being created now */
    uint64_t started; /* plans ever started */
} target_state;

typedef struct run_state {
    const tool_options *opts;
    target_state *targets;
    size_t n_targets;
    size_t n_jobs;
    atomic_size_t next_job;
    atomic_size_t failed, skipped;
    pthread_mutex_t print_lock; /* one combination's lines stay together */
    size_t done;                /* jobs reported, under print_lock */
    double start_ms;
} run_state;


typedef struct plan_window {
    uint64_t ticket;
    int alone_at_start;
    int stats_ok;
    fsa_cache_stats before;
} plan_window;

static void window_open(target_state *t, plan_window *w)
{
    w->before = (fsa_cache_stats)FSA_CACHE_STATS_INIT;
    pthread_mutex_lock(&t->lock);
    t->active++;
    w->ticket = ++t->started;
    w->alone_at_start = t->active == 1;
    w->stats_ok = fsa_context_cache_stats(&w->before, t->ctx) == FSA_STATUS_OK;
    pthread_mutex_unlock(&t->lock);
}

/* 1 with *delta filled when the plan had the context to itself: nobody was
 * active when it started and nobody started since. */
static int window_close(target_state *t, const plan_window *w, fsa_cache_stats *delta)
{
    fsa_cache_stats after = FSA_CACHE_STATS_INIT;
    pthread_mutex_lock(&t->lock);
    int ok = fsa_context_cache_stats(&after, t->ctx) == FSA_STATUS_OK;
    int solo = ok && w->stats_ok && w->alone_at_start && t->started == w->ticket;
    t->active--;
    pthread_mutex_unlock(&t->lock);
    if (!solo) return 0;
    delta->compiles = after.compiles - w->before.compiles;
    delta->compile_ms = after.compile_ms - w->before.compile_ms;
    delta->disk_hits = after.disk_hits - w->before.disk_hits;
    delta->memory_hits = after.memory_hits - w->before.memory_hits;
    return 1;
}

/* "compiled 3 (812.4 ms), cached 1, in memory 1"; when the plan shared its
 * context with concurrent plans its own share is unknown, so only its wall
 * time is given and the counts go to the target's total. */
static void describe_counts(char *buf, size_t cap, const fsa_cache_stats *own, double wall_ms)
{
    if (own == NULL) {
        snprintf(buf, cap, "ready in %.1f ms (alongside other plans: kernels counted in the total)", wall_ms);
        return;
    }
    size_t n = 0;
    buf[0] = '\0';
    if (own->compiles > 0)
        n += (size_t)snprintf(buf + n, cap - n, "compiled %" PRIu64 " (%.1f ms)", own->compiles, own->compile_ms);
    if (own->disk_hits > 0 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%scached %" PRIu64, n ? ", " : "", own->disk_hits);
    if (own->memory_hits > 0 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%sin memory %" PRIu64, n ? ", " : "", own->memory_hits);
    if (n == 0) snprintf(buf, cap, "no kernels needed");
}

/* "[n/N] ", with the time left at the pace so far once it is a second or more. */
static void progress(char *buf, size_t cap, const run_state *rs)
{
    double elapsed_s = (now_ms() - rs->start_ms) / 1e3;
    double left_s = elapsed_s / (double)rs->done * (double)(rs->n_jobs - rs->done);
    if (rs->done == rs->n_jobs || left_s < 1.0) snprintf(buf, cap, "[%zu/%zu] ", rs->done, rs->n_jobs);
    else if (left_s < 60.0) snprintf(buf, cap, "[%zu/%zu, about %.0f s left] ", rs->done, rs->n_jobs, left_s);
    else
        snprintf(buf, cap, "[%zu/%zu, about %d min %02d s left] ", rs->done, rs->n_jobs, (int)left_s / 60,
                 (int)left_s % 60);
}

static void job_label(char *buf, size_t cap, const run_state *rs, const grid_job *j)
{
    grid_job_label(buf, cap, j, fsa_context_target(rs->targets[j->target].ctx));
}

static void report_job(run_state *rs, const grid_job *j, fsa_status st, double wall_ms, const fsa_cache_stats *own)
{
    char label[128], counts[160], count[64];
    job_label(label, sizeof label, rs, j);
    pthread_mutex_lock(&rs->print_lock);
    rs->done++;
    progress(count, sizeof count, rs);
    if (st == FSA_STATUS_OK) {
        describe_counts(counts, sizeof counts, own, wall_ms);
        printf("%s%s: %s\n", count, label, counts);
    } else if (st == FSA_STATUS_UNSUPPORTED) {
        /* The message alone: "unsupported" already names the status. */
        const char *why = fsa_last_error_info()->message;
        printf("%s%s: skipped (unsupported: %s)\n", count, label, why[0] ? why : fsa_last_error());
        atomic_fetch_add(&rs->skipped, 1);
    } else {
        fflush(stdout);
        fprintf(stderr, "%s%s: FAILED after %.1f ms: %s\n", count, label, wall_ms, fsa_last_error());
        atomic_fetch_add(&rs->failed, 1);
    }
    fflush(stdout);
    pthread_mutex_unlock(&rs->print_lock);
}

/* --tune: measures every bucket 4^i of the plan, one plan at a time (timings
 * of plans sharing the GPU would mislead). */
static void tune_plan(run_state *rs, const grid_job *j, fsa_plan *plan)
{
    static pthread_mutex_t gpu = PTHREAD_MUTEX_INITIALIZER;
    char label[128];
    int measured = 0, n = 0;
    fsa_status st = FSA_STATUS_OK;
    job_label(label, sizeof label, rs, j);
    pthread_mutex_lock(&gpu);
    const double t0 = now_ms();
    for (int64_t T = 1; T <= 65536 && st == FSA_STATUS_OK; T *= 4)
        for (int op = 0; op <= j->desc.backward && st == FSA_STATUS_OK; op++) {
            st = fsa_plan_tune(&measured, plan, (fsa_operation)op, T);
            n += measured;
        }
    const double ms = now_ms() - t0;
    pthread_mutex_unlock(&gpu);
    pthread_mutex_lock(&rs->print_lock);
    if (st == FSA_STATUS_OK) printf("  %s: tuned %d buckets in %.1f ms\n", label, n, ms);
    else fprintf(stderr, "  %s: tuning FAILED: %s\n", label, fsa_last_error());
    pthread_mutex_unlock(&rs->print_lock);
    if (st != FSA_STATUS_OK) atomic_fetch_add(&rs->failed, 1);
}

static void run_job(run_state *rs, size_t index)
{
    grid_job j;
    plan_window w;
    fsa_cache_stats own = FSA_CACHE_STATS_INIT;
    grid_plans plans;
    grid_job_decode(&j, rs->opts, rs->n_targets, index);
    target_state *target = &rs->targets[j.target];
    window_open(target, &w);
    double t0 = now_ms();
    fsa_status st = grid_plans_create(&plans, &j, target->ctx);
    double wall_ms = now_ms() - t0;
    int solo = window_close(target, &w, &own);
    /* fsa_last_error() still describes the plan: nothing failed since. */
    report_job(rs, &j, st, wall_ms, solo ? &own : NULL);
    /* An offline plan cannot run; creating it was the whole point. Only
     * selected attention has variants to tune. */
    if (st == FSA_STATUS_OK && rs->opts->tune && plans.selected != NULL) tune_plan(rs, &j, plans.selected);
    grid_plans_destroy(&plans);
}

static void *worker(void *arg)
{
    run_state *rs = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&rs->next_job, 1);
        if (i >= rs->n_jobs) break;
        run_job(rs, i);
    }
    return NULL;
}

/* Runs the grid on up to `jobs` threads. If no thread can be started the
 * calling thread does the work: slower, never wrong. */
static void run_pool(run_state *rs, int jobs)
{
    size_t want = (size_t)jobs < rs->n_jobs ? (size_t)jobs : rs->n_jobs;
    pthread_t *threads = calloc(want, sizeof *threads);
    size_t started = 0;
    if (threads != NULL) {
        for (; started < want; started++)
            if (pthread_create(&threads[started], NULL, worker, rs) != 0) break;
        if (started < want)
            fprintf(stderr, PROG ": warning: started %zu of %zu threads\n", started, want);
    }
    if (started == 0) worker(rs);
    for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
    free(threads);
}

typedef struct totals {
    uint64_t compiles, disk_hits, memory_hits, corrupt, write_failures;
    double compile_ms;
} totals;

/* Prints one target's counts since the start and adds them to *sum. */
static void report_target(const target_state *t, totals *sum)
{
    fsa_cache_stats end = FSA_CACHE_STATS_INIT;
    if (fsa_context_cache_stats(&end, t->ctx) != FSA_STATUS_OK) {
        fprintf(stderr, PROG ": %s: no cache statistics: %s\n", fsa_context_target(t->ctx), fsa_last_error());
        return;
    }
    totals d = {end.compiles - t->start.compiles, end.disk_hits - t->start.disk_hits,
                end.memory_hits - t->start.memory_hits, end.corrupt_entries - t->start.corrupt_entries,
                end.write_failures - t->start.write_failures, end.compile_ms - t->start.compile_ms};
    printf("%s: %" PRIu64 " compiled (NVRTC %.1f ms), %" PRIu64 " already cached, %" PRIu64 " in memory",
           fsa_context_target(t->ctx), d.compiles, d.compile_ms, d.disk_hits, d.memory_hits);
    if (d.corrupt) printf(", %" PRIu64 " corrupt entries replaced", d.corrupt);
    if (d.write_failures) printf(", %" PRIu64 " NOT written to the cache", d.write_failures);
    printf("\n");
    sum->compiles += d.compiles;
    sum->disk_hits += d.disk_hits;
    sum->memory_hits += d.memory_hits;
    sum->corrupt += d.corrupt;
    sum->write_failures += d.write_failures;
    sum->compile_ms += d.compile_ms;
}

/* Creates one context per target; returns 0 or an exit status. */
static int open_targets(target_state *targets, size_t *n_open, const tool_options *o)
{
    size_t n = o->detect ? 1 : o->arches.n;
    for (*n_open = 0; *n_open < n; (*n_open)++) {
        target_state *t = &targets[*n_open];
        const char *arch = o->detect ? NULL : o->arches.v[*n_open];
        fsa_status st = open_context(&t->ctx, o, arch);
        if (st != FSA_STATUS_OK) return context_error(st, arch, o->device);
        t->start = (fsa_cache_stats)FSA_CACHE_STATS_INIT;
        if (fsa_context_cache_stats(&t->start, t->ctx) != FSA_STATUS_OK) {
            fprintf(stderr, PROG ": cache statistics: %s\n", fsa_last_error());
            fsa_context_destroy(t->ctx);
            return EXIT_FAILED;
        }
        if (pthread_mutex_init(&t->lock, NULL) != 0) {
            fprintf(stderr, PROG ": cannot create a mutex\n");
            fsa_context_destroy(t->ctx);
            return EXIT_FAILED;
        }
    }
    return require_disk_cache(targets[0].ctx);
}

static void close_targets(target_state *targets, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_destroy(&targets[i].lock);
        fsa_context_destroy(targets[i].ctx);
    }
}

static void print_header(const run_state *rs, int threads)
{
    size_t per_target = rs->n_jobs / rs->n_targets;
    printf(PROG " %s: %zu shape%s x %zu target%s (", fsa_version_string(), per_target,
           per_target == 1 ? "" : "s", rs->n_targets, rs->n_targets == 1 ? "" : "s");
    for (size_t i = 0; i < rs->n_targets; i++)
        printf("%s%s", i ? ", " : "", fsa_context_target(rs->targets[i].ctx));
    printf("), %d thread%s\ncache: %s\n", threads, threads == 1 ? "" : "s",
           fsa_context_cache_dir(rs->targets[0].ctx));
    fflush(stdout);
}

static int precompile(const tool_options *o)
{
    size_t n_targets = o->detect ? 1 : o->arches.n, n_open = 0;
    target_state *targets = calloc(n_targets, sizeof *targets);
    if (targets == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_FAILED;
    }
    run_state rs = {.opts = o, .targets = targets, .n_targets = n_targets};
    int rc = open_targets(targets, &n_open, o);
    if (rc == 0) {
        rs.n_jobs = grid_count(o, n_targets);
        if (rs.n_jobs == 0) rc = EXIT_USAGE;
    }
    if (rc == 0 && pthread_mutex_init(&rs.print_lock, NULL) != 0) {
        fprintf(stderr, PROG ": cannot create a mutex\n");
        rc = EXIT_FAILED;
    }
    if (rc == 0) {
        int threads = (size_t)o->jobs < rs.n_jobs ? o->jobs : (int)rs.n_jobs;
        atomic_init(&rs.next_job, 0);
        atomic_init(&rs.failed, 0);
        atomic_init(&rs.skipped, 0);
        print_header(&rs, threads);
        double t0 = now_ms();
        rs.start_ms = t0;
        run_pool(&rs, threads);
        double wall_s = (now_ms() - t0) / 1e3;
        totals sum = {0};
        for (size_t i = 0; i < n_targets; i++) report_target(&targets[i], &sum);
        size_t failed = atomic_load(&rs.failed), skipped = atomic_load(&rs.skipped);
        printf("%" PRIu64 " kernels compiled, %" PRIu64 " already cached, %zu failed, %zu skipped"
               " (%zu shape%s, %.1f s)\n",
               sum.compiles, sum.disk_hits, failed, skipped, rs.n_jobs, rs.n_jobs == 1 ? "" : "s", wall_s);
        if (sum.write_failures)
            fprintf(stderr, PROG ": %" PRIu64 " kernels could not be written to the cache (see the warning above)\n",
                    sum.write_failures);
        rc = failed || sum.write_failures ? EXIT_FAILED : 0;
        pthread_mutex_destroy(&rs.print_lock);
    }
    close_targets(targets, n_open);
    free(targets);
    return rc;
}

/* ----------------------------------------------------------- maintenance */

typedef struct entry_totals {
    uint64_t entries, bytes, deleted;
} entry_totals;

/* mtime in UTC, ISO 8601. */
static void iso_time(char *buf, size_t cap, int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "@%" PRId64, t);
}

static int list_visit(const fsa_cache_entry_info *e, void *user)
{
    entry_totals *sum = user;
    char when[32];
    iso_time(when, sizeof when, e->mtime);
    printf("%-8s %-44s %10" PRIu64 "  %s\n", e->target, e->name, e->bytes, when);
    sum->entries++;
    sum->bytes += e->bytes;
    return 0;
}

static int verify_visit(const fsa_cache_entry_info *e, void *user)
{
    entry_totals *sum = user;
    printf("%-3s %-8s %s%s\n", e->valid ? "OK" : "BAD", e->target, e->name,
           e->valid ? "" : e->deleted ? " (deleted)" : " (NOT deleted)");
    sum->entries++;
    sum->deleted += e->deleted != 0;
    sum->bytes += e->bytes;
    return 0;
}

static int cache_list(fsa_context *ctx)
{
    entry_totals sum = {0};
    char human[32];
    fsa_status st = fsa_cache_list(ctx, list_visit, &sum);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, PROG ": list: %s\n", fsa_last_error());
        return EXIT_FAILED;
    }
    printf("%" PRIu64 " entr%s, %" PRIu64 " bytes (%s)\n", sum.entries, sum.entries == 1 ? "y" : "ies",
           sum.bytes, human_bytes(human, sizeof human, sum.bytes));
    return 0;
}

static int cache_verify(fsa_context *ctx)
{
    entry_totals sum = {0};
    uint64_t bad = 0;
    fsa_status st = fsa_cache_verify(ctx, verify_visit, &sum, &bad);
    if (st != FSA_STATUS_OK) {
        fprintf(stderr, PROG ": verify: %s\n", fsa_last_error());
        return EXIT_FAILED;
    }
    printf("%" PRIu64 " entr%s checked, %" PRIu64 " bad, %" PRIu64 " deleted\n", sum.entries,
           sum.entries == 1 ? "y" : "ies", bad, sum.deleted);
    return bad ? EXIT_FAILED : 0;
}

static int cache_prune(fsa_context *ctx, uint64_t max_bytes)
{
    uint64_t removed = 0, left = 0;
    char human[32];
    fsa_status st = fsa_cache_prune(ctx, max_bytes, &removed, &left);
    printf("removed %" PRIu64 " file%s; %" PRIu64 " bytes (%s) left\n", removed, removed == 1 ? "" : "s", left,
           human_bytes(human, sizeof human, left));
    if (st != FSA_STATUS_OK) {
        fflush(stdout);
        fprintf(stderr, PROG ": prune: %s\n", fsa_last_error());
        return EXIT_FAILED;
    }
    return 0;
}

/* Maintenance works on the directory, but a context is the only way to
 * reach it: use the first --arch target, the device, or any valid target. */
static int maintain(const tool_options *o)
{
    const char *arch = o->detect ? NULL : o->arches.n ? o->arches.v[0] : "sm_80";
    fsa_context *ctx = NULL;
    fsa_status st = open_context(&ctx, o, arch);
    if (st != FSA_STATUS_OK) return context_error(st, arch, o->device);
    int rc = require_disk_cache(ctx);
    if (rc == 0) {
        printf("cache: %s\n", fsa_context_cache_dir(ctx));
        if (o->mode == MODE_LIST) rc = cache_list(ctx);
        else if (o->mode == MODE_VERIFY) rc = cache_verify(ctx);
        else rc = cache_prune(ctx, o->max_bytes);
    }
    fsa_context_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    tool_options o;
    int rc = options_parse(&o, argc, argv);
    if (rc == 0 && o.help) options_print_usage(stdout);
    else if (rc == 0 && o.version) printf(PROG " %s\n", fsa_version_string());
    else if (rc == 0) rc = o.mode == MODE_COMPILE ? precompile(&o) : maintain(&o);
    options_free(&o);
    /* A full disk or closed pipe on stdout is a failure, not a success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, PROG ": cannot write the output\n");
        if (rc == 0) rc = EXIT_FAILED;
    }
    return rc;
}
