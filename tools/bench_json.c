/* fsa-bench's --json output (bench_json.h). */
#include "bench_json.h"

#include <math.h>
#include <stdlib.h>

/* The open document; static so that the exit handler reaches it. */
static FILE *g_json;

static void close_at_exit(void) { (void)bench_json_close(); }

FILE *bench_json_open(const char *path)
{
    static int registered;
    if (!registered && atexit(close_at_exit) != 0) return NULL;
    registered = 1;
    g_json = fopen(path, "w");
    return g_json;
}

int bench_json_close(void)
{
    if (g_json == NULL) return 0;
    FILE *f = g_json;
    g_json = NULL;
    const int wrote = fputs("\n]}\n", f) >= 0;
    return fclose(f) == 0 && wrote ? 0 : -1;
}

void bench_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void bench_json_field(FILE *f, const char *name, const char *fmt, double value, int valid)
{
    fprintf(f, ", \"%s\": ", name);
    if (valid && isfinite(value)) fprintf(f, fmt, value);
    else fputs("null", f);
}
