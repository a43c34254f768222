/* fsa-precompile's compile run (precompile_run.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "precompile_run.h"

#include "precompile_context.h"
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

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

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

/* --tune: measures every bucket 4^i of the job's selected plan at each
 * --kv-heads count (a record holds for its KV head count only), one plan at a
 * time (timings of plans sharing the GPU would mislead). */
static void tune_plan(run_state *rs, const grid_job *j, fsa_context *ctx)
{
    static pthread_mutex_t gpu = PTHREAD_MUTEX_INITIALIZER;
    char label[128];
    int measured = 0, n = 0;
    fsa_status st = FSA_STATUS_OK;
    job_label(label, sizeof label, rs, j);
    pthread_mutex_lock(&gpu);
    const double t0 = now_ms();
    const int_list *heads = &rs->opts->kv_heads;
    for (size_t h = 0; h < heads->n && st == FSA_STATUS_OK; h++) {
        fsa_selected_attention_desc d = j->desc;
        fsa_plan *plan = NULL;
        d.num_kv_heads = heads->v[h];
        d.num_q_heads = j->desc.num_q_heads * heads->v[h]; /* the group times the KV heads */
        st = fsa_plan_create(&plan, ctx, &d);
        for (int64_t T = 1; T <= 65536 && st == FSA_STATUS_OK; T *= 4)
            for (int op = 0; op <= j->desc.backward && st == FSA_STATUS_OK; op++) {
                st = fsa_plan_tune(&measured, plan, (fsa_operation)op, T);
                n += measured;
            }
        fsa_plan_destroy(plan);
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
    if (st == FSA_STATUS_OK && rs->opts->tune && plans.selected != NULL) tune_plan(rs, &j, target->ctx);
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
    /* Found: a damaged kernel is rewritten unless counted as NOT written; a damaged record is deleted. */
    if (d.corrupt) printf(", %" PRIu64 " corrupt entries found", d.corrupt);
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
            return TOOL_EXIT_FAILED;
        }
        if (pthread_mutex_init(&t->lock, NULL) != 0) {
            fprintf(stderr, PROG ": cannot create a mutex\n");
            fsa_context_destroy(t->ctx);
            return TOOL_EXIT_FAILED;
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

int precompile(const tool_options *o)
{
    size_t n_targets = o->detect ? 1 : o->arches.n, n_open = 0;
    target_state *targets = calloc(n_targets, sizeof *targets);
    if (targets == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return TOOL_EXIT_FAILED;
    }
    run_state rs = {.opts = o, .targets = targets, .n_targets = n_targets};
    int rc = open_targets(targets, &n_open, o);
    if (rc == 0) {
        rs.n_jobs = grid_count(o, n_targets); /* not 0: options_parse counted it */
        if (rs.n_jobs == 0) rc = TOOL_EXIT_USAGE;
    }
    if (rc == 0 && pthread_mutex_init(&rs.print_lock, NULL) != 0) {
        fprintf(stderr, PROG ": cannot create a mutex\n");
        rc = TOOL_EXIT_FAILED;
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
        rc = failed || sum.write_failures ? TOOL_EXIT_FAILED : 0;
        /* Nothing the library takes was asked for: that is no success. */
        if (skipped == rs.n_jobs) {
            fprintf(stderr, PROG ": every shape was skipped as unsupported: nothing precompiled\n");
            rc = TOOL_EXIT_FAILED;
        }
        pthread_mutex_destroy(&rs.print_lock);
    }
    close_targets(targets, n_open);
    free(targets);
    return rc;
}
