/* Status names and messages (from FSA_STATUS_MAP) and the thread-local error
 * record behind fsa_last_error(). */
#include "status_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fsa_status_name(fsa_status status)
{
    switch (status) {
#define FSA_STATUS_NAME_(name, value, msg) \
    case FSA_STATUS_##name:                \
        return "FSA_STATUS_" #name;
        FSA_STATUS_MAP(FSA_STATUS_NAME_)
#undef FSA_STATUS_NAME_
    default:
        return "FSA_STATUS_UNKNOWN";
    }
}

const char *fsa_status_string(fsa_status status)
{
    switch (status) {
#define FSA_STATUS_MSG_(name, value, msg) \
    case FSA_STATUS_##name:               \
        return msg;
        FSA_STATUS_MAP(FSA_STATUS_MSG_)
#undef FSA_STATUS_MSG_
    default:
        return "unknown status";
    }
}

/* The VERSION file is the one source of the version; the build passes its
 * number here, so a header that disagrees with it does not compile. */
#if defined(FSA_BUILD_VERSION_NUMBER) && FSA_BUILD_VERSION_NUMBER != FSA_VERSION
#error "FSA_VERSION_MAJOR/MINOR/PATCH in include/fsa/version.h differ from the VERSION file"
#endif

const char *fsa_version_string(void) { return FSA_VERSION_STRING; }

int fsa_version(void) { return FSA_VERSION; }

/* Fixed-size fields keep the record allocation-free except for the log,
 * which can be long (NVRTC diagnostics). */
typedef struct error_record {
    fsa_error_info info;
    char stage[32];
    char kernel[96];
    char key[48];
    char target[16];
    char message[512];
    char *log;
    char *text; /* fsa_last_error(), built on demand */
    int text_valid;
} error_record;

static _Thread_local error_record tls_record;

/* The log and text buffers are heap memory; a key destructor frees them when
 * the thread exits. */
static pthread_key_t record_key;
static pthread_once_t record_key_once = PTHREAD_ONCE_INIT;

static void record_free(void *p)
{
    error_record *r = p;
    free(r->log);
    free(r->text);
    r->log = NULL;
    r->text = NULL;
    r->text_valid = 0;
}

static void record_key_init(void) { (void)pthread_key_create(&record_key, record_free); }

static void record_track_heap(error_record *r)
{
    (void)pthread_once(&record_key_once, record_key_init);
    if (pthread_getspecific(record_key) == NULL) (void)pthread_setspecific(record_key, r);
}

static void copy_field(char *dst, size_t cap, const char *src)
{
    if (src == NULL) src = "";
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void record_reset(error_record *r)
{
    free(r->log);
    r->log = NULL;
    r->stage[0] = r->kernel[0] = r->key[0] = r->target[0] = r->message[0] = '\0';
    r->text_valid = 0;
    r->info.status = FSA_STATUS_OK;
}

fsa_status fsa_error_set(fsa_status status, const char *stage, const char *fmt, ...)
{
    error_record *r = &tls_record;
    record_reset(r);
    r->info.status = status;
    copy_field(r->stage, sizeof r->stage, stage);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    return status;
}

void fsa_error_set_kernel(const char *kernel, const char *key, const char *target)
{
    error_record *r = &tls_record;
    if (kernel) copy_field(r->kernel, sizeof r->kernel, kernel);
    if (key) copy_field(r->key, sizeof r->key, key);
    if (target) copy_field(r->target, sizeof r->target, target);
    r->text_valid = 0;
}

void fsa_error_set_log(const char *log)
{
    error_record *r = &tls_record;
    free(r->log);
    r->log = log ? strdup(log) : NULL;
    r->text_valid = 0;
    record_track_heap(r);
}

void fsa_error_clear(void) { record_reset(&tls_record); }

const fsa_error_info *fsa_last_error_info(void)
{
    error_record *r = &tls_record;
    r->info.stage = r->stage;
    r->info.kernel = r->kernel;
    r->info.key = r->key;
    r->info.target = r->target;
    r->info.message = r->message;
    r->info.log = r->log ? r->log : "";
    return &r->info;
}

const char *fsa_last_error(void)
{
    error_record *r = &tls_record;
    if (r->info.status == FSA_STATUS_OK) return "";
    if (r->text_valid) return r->text;
    size_t cap = 1024 + (r->log ? strlen(r->log) : 0);
    char *text = realloc(r->text, cap);
    if (text == NULL) return r->message;
    r->text = text;
    record_track_heap(r);
    int n = snprintf(text, cap, "%s: %s [stage %s]", fsa_status_name(r->info.status), r->message,
                     r->stage[0] ? r->stage : "-");
    if (r->kernel[0] && n > 0 && (size_t)n < cap)
        n += snprintf(text + n, cap - (size_t)n, " [kernel %s]", r->kernel);
    if (r->target[0] && n > 0 && (size_t)n < cap)
        n += snprintf(text + n, cap - (size_t)n, " [target %s]", r->target);
    if (r->key[0] && n > 0 && (size_t)n < cap)
        n += snprintf(text + n, cap - (size_t)n, " [key %s]", r->key);
    if (r->log && r->log[0] && n > 0 && (size_t)n < cap)
        snprintf(text + n, cap - (size_t)n, "\n%s", r->log);
    r->text_valid = 1;
    return text;
}

void fsa_log_warn(int enabled, const char *fmt, ...)
{
    if (!enabled) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("fsa: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
