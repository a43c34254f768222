#define _POSIX_C_SOURCE 200809L
#include "tool_args.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int tool_parse_dtype(fsa_dtype *out, const char *text)
{
    static const struct {
        const char *name;
        fsa_dtype dtype;
    } spellings[] = {{"bf16", FSA_DTYPE_BF16}, {"bfloat16", FSA_DTYPE_BF16}, {"fp16", FSA_DTYPE_F16},
                     {"f16", FSA_DTYPE_F16},   {"float16", FSA_DTYPE_F16},   {"half", FSA_DTYPE_F16}};
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++)
        if (strcasecmp(text, spellings[i].name) == 0) {
            *out = spellings[i].dtype;
            return 0;
        }
    return -1;
}

const char *tool_dtype_name(fsa_dtype dtype) { return dtype == FSA_DTYPE_F16 ? "f16" : "bf16"; }

int tool_parse_bytes(uint64_t *out, const char *text)
{
    const char *p = text;
    uint64_t v = 0;
    if (!isdigit((unsigned char)*p)) return -1;
    for (; isdigit((unsigned char)*p); p++) {
        const uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1; /* exact: UINT64_MAX itself is taken */
        v = v * 10 + d;
    }
    if (*p != '\0') {
        static const char units[] = "KMGT";
        int shift = 0;
        for (int i = 0; units[i]; i++)
            if (toupper((unsigned char)*p) == units[i]) shift = 10 * (i + 1);
        if (shift == 0 || p[1] != '\0' || v > (UINT64_MAX >> shift)) return -1;
        v <<= shift;
    }
    *out = v;
    return 0;
}

int tool_parse_long(long *out, const char *text, long min, long max)
{
    char *end;
    /* strtol would also take spaces and a sign before the digits. */
    if (!isdigit((unsigned char)*text)) return -1;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || errno != 0 || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int tool_parse_list(int *out, int *n_out, int cap, const char *text, long min, long max)
{
    int n = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        char item[32];
        long v;
        if (len == 0 || len >= sizeof item) return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (tool_parse_long(&v, item, min, max) != 0) return -1;
        int seen = 0; /* a repeated value would time its rows again */
        for (int i = 0; i < n && !seen; i++) seen = out[i] == (int)v;
        if (!seen) {
            if (n == cap) return -2;
            out[n++] = (int)v;
        }
        if (p[len] == '\0') break;
        p += len + 1;
    }
    *n_out = n;
    return 0;
}

int tool_parse_double(double *out, const char *text, double min, double max)
{
    char *end;
    /* strtod would also take spaces, a sign, hex, inf and nan. */
    const int digit_first = isdigit((unsigned char)text[0]) || (text[0] == '.' && isdigit((unsigned char)text[1]));
    if (!digit_first || strpbrk(text, "xX") != NULL) return -1;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

const char *tool_bad_option(char *buf, int refused_opt, char *const *argv, int next_index)
{
    if (refused_opt > 0 && refused_opt < 256) {
        buf[0] = '-', buf[1] = (char)refused_opt, buf[2] = '\0';
        return buf;
    }
    return argv[next_index - 1];
}

const char *tool_refused_option_reason(const struct option *longs, const char *word)
{
    if (strncmp(word, "--", 2) != 0 || word[2] == '\0') return "unknown option";
    const char *name = word + 2;
    const size_t n = strcspn(name, "=");
    int prefix_of = 0;
    const struct option *only = NULL;
    for (const struct option *o = longs; o->name != NULL; o++) {
        if (strncmp(o->name, name, n) != 0) continue;
        if (o->name[n] == '\0') { /* exact: refused only for a value it does not take */
            only = o, prefix_of = 1;
            break;
        }
        only = o, prefix_of++;
    }
    if (prefix_of > 1) return "ambiguous option";
    /* The one option the word names (in full or by a unique prefix), given a value it does not take. */
    if (prefix_of == 1 && name[n] == '=' && only->has_arg == no_argument) return "no value taken by option";
    return "unknown option";
}

int tool_print_version(const char *prog)
{
    printf("%s %s\n", prog, fsa_version_string());
    return TOOL_EXIT_OK;
}

int tool_context_exit_code(fsa_status status)
{
    switch (status) {
    case FSA_STATUS_INVALID_ARGUMENT:
    case FSA_STATUS_UNSUPPORTED_DEVICE:
    case FSA_STATUS_NO_DRIVER:
    case FSA_STATUS_NO_DEVICE: return TOOL_EXIT_TARGET;
    default: return TOOL_EXIT_FAILED;
    }
}

int tool_open_standard_streams(void)
{
    int closed = 0;
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        const int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY); /* the lowest free number: fd */
        if (got != fd) {
            if (got >= 0) close(got);
            return -1;
        }
        closed |= 1 << fd;
    }
    return closed;
}
