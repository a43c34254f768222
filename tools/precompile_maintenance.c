/* fsa-precompile's cache maintenance (precompile_maintenance.h). */
#define _POSIX_C_SOURCE 200809L /* gmtime_r */
#include "precompile_maintenance.h"

#include "precompile_context.h"
#include "tool_args.h"

#include <fsa.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

typedef struct entry_totals {
    uint64_t entries, bytes, deleted, loaded;
    const char *device_target; /* verify on a device: its target, whose valid entries should load; else NULL */
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
    /* A valid kernel of the device's own target that did not load was checked on disk only (the log says why);
     * a record is never loaded. */
    const int disk_only = e->valid && !e->loaded && !e->record && sum->device_target != NULL &&
                          strcmp(e->target, sum->device_target) == 0;
    printf("%-3s %-8s %s%s\n", e->valid ? "OK" : "BAD", e->target, e->name,
           !e->valid ? (e->deleted ? " (deleted)" : " (NOT deleted)") : disk_only ? " (not loaded)" : "");
    sum->entries++;
    sum->deleted += e->deleted != 0;
    sum->loaded += e->loaded != 0;
    sum->bytes += e->bytes;
    return 0;
}

static int cache_list(fsa_context *ctx)
{
    entry_totals sum = {0};
    char human[32];
    fsa_status st = fsa_cache_list(ctx, list_visit, &sum);
    if (st != FSA_STATUS_OK) {
        fflush(stdout); /* the lines so far, then why the walk stopped */
        fprintf(stderr, PROG ": list: %s\n", fsa_last_error());
        return TOOL_EXIT_FAILED;
    }
    printf("%" PRIu64 " entr%s, %" PRIu64 " bytes (%s)\n", sum.entries, sum.entries == 1 ? "y" : "ies",
           sum.bytes, human_bytes(human, sizeof human, sum.bytes));
    return 0;
}

static int cache_verify(fsa_context *ctx, int on_device)
{
    entry_totals sum = {0};
    sum.device_target = on_device ? fsa_context_target(ctx) : NULL;
    uint64_t bad = 0;
    fsa_status st = fsa_cache_verify(ctx, verify_visit, &sum, &bad);
    if (st != FSA_STATUS_OK) {
        fflush(stdout);
        fprintf(stderr, PROG ": verify: %s\n", fsa_last_error());
        return TOOL_EXIT_FAILED;
    }
    printf("%" PRIu64 " entr%s checked, %" PRIu64 " bad, %" PRIu64 " deleted", sum.entries,
           sum.entries == 1 ? "y" : "ies", bad, sum.deleted);
    if (on_device) printf(", %" PRIu64 " loaded on the device", sum.loaded); /* --detect only: offline, none can */
    printf("\n");
    return bad ? TOOL_EXIT_FAILED : 0;
}

static int cache_prune(fsa_context *ctx, uint64_t max_bytes)
{
    uint64_t removed = 0, left = 0;
    char human[32];
    fsa_status st = fsa_cache_prune(ctx, max_bytes, &removed, &left);
    if (left == UINT64_MAX) /* the scan stopped: what is left is unknown */
        printf("removed %" PRIu64 " file%s; the cache was not fully read\n", removed, removed == 1 ? "" : "s");
    else
        printf("removed %" PRIu64 " file%s; %" PRIu64 " bytes (%s) left\n", removed, removed == 1 ? "" : "s", left,
               human_bytes(human, sizeof human, left));
    if (st != FSA_STATUS_OK) {
        fflush(stdout);
        fprintf(stderr, PROG ": prune: %s\n", fsa_last_error());
        return TOOL_EXIT_FAILED;
    }
    return 0;
}

/* Maintenance works on the directory, but a context is the only way to
 * reach it: use the --arch target (one: options_parse), the device, or any
 * valid target. */
int maintain(const tool_options *o)
{
    const char *arch = o->detect ? NULL : o->arches.n ? o->arches.v[0] : "sm_80";
    fsa_context *ctx = NULL;
    /* A context creates its cache directory: a mistyped --cache-dir would become an empty cache. */
    struct stat sb;
    if (o->cache_dir != NULL) {
        const int found = stat(o->cache_dir, &sb) == 0;
        if (!found || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, PROG ": --cache-dir %s: %s\n", o->cache_dir, found ? "not a directory" : strerror(errno));
            return TOOL_EXIT_FAILED;
        }
    }
    fsa_status st = open_context(&ctx, o, arch);
    if (st != FSA_STATUS_OK) return context_error(st, arch, o->device);
    int rc = require_disk_cache(ctx);
    if (rc == 0) {
        printf("cache: %s\n", fsa_context_cache_dir(ctx));
        if (o->mode == MODE_LIST) rc = cache_list(ctx);
        else if (o->mode == MODE_VERIFY) rc = cache_verify(ctx, o->detect);
        else rc = cache_prune(ctx, o->max_bytes);
    }
    fsa_context_destroy(ctx);
    return rc;
}
