/* What the command-line tools share: exit codes, the one set of dtype
 * spellings (the Python package takes the same), byte counts with K/M/G/T
 * suffixes and strict numbers. Only fsa.h is used. */
#ifndef FSA_TOOL_ARGS_H
#define FSA_TOOL_ARGS_H

#include <fsa.h>

#include <stdint.h>

struct option; /* getopt.h */

/* Exit codes of fsa-precompile and fsa-bench. */
enum {
    TOOL_EXIT_OK = 0,
    TOOL_EXIT_FAILED = 1, /* a compile, a benchmark or the cache failed */
    TOOL_EXIT_USAGE = 2,  /* bad option syntax; usage on stderr */
    TOOL_EXIT_TARGET = 3  /* the target or device cannot be used: an --arch the library
                             rejects, no driver, no GPU */
};

/* Standard streams the tool was started without (fd 0, 1 or 2 closed): each
 * is opened onto /dev/null, so that no file the tool opens later takes its
 * number and receives its output. Returns a mask (1 << fd) of those that were
 * closed (a closed stdout then fails the run as a full one does), or -1
 * where /dev/null cannot be opened (the tool must stop before opening any
 * file). */
int tool_open_standard_streams(void);

/* bf16, bfloat16 -> FSA_DTYPE_BF16; fp16, f16, float16, half -> FSA_DTYPE_F16
 * (case-insensitive). 0 on success, -1 for anything else. */
int tool_parse_dtype(fsa_dtype *out, const char *text);
/* "bf16" or "f16". */
const char *tool_dtype_name(fsa_dtype dtype);
/* The accepted spellings, for messages. */
#define TOOL_DTYPE_SPELLINGS "bf16, bfloat16, fp16, f16, float16, half"

/* A byte count: digits with an optional K, M, G or T suffix (powers of
 * 1024, case-insensitive). 0 on success, -1 on bad syntax or overflow. */
int tool_parse_bytes(uint64_t *out, const char *text);

/* A whole decimal number in [min, max], nothing else in the text: digits
 * only (no sign, space or base prefix). */
int tool_parse_long(long *out, const char *text, long min, long max);
/* Comma-separated whole numbers, each in [min, max], at most `cap` distinct
 * ones kept in the order given (a repeat is dropped). 0 on success; -1 on
 * bad syntax or a value out of range; -2 past `cap`. */
int tool_parse_list(int *out, int *n_out, int cap, const char *text, long min, long max);
/* A finite decimal number in [min, max]: digits with an optional fraction
 * and exponent, or a fraction alone (".5"); no sign, space, hex or inf. */
int tool_parse_double(double *out, const char *text, double min, double max);

/* The option getopt_long just refused ('?' or ':'), for a message, given
 * getopt's optopt and optind: "-z" for a short option, from optopt
 * (argv[optind - 1] is not its word inside a cluster such as -zq), else the
 * word itself. optopt is a letter only for short options when every long
 * option's value is 256 or more (as here: no long option returns its short
 * letter). buf holds at least 3 chars. */
const char *tool_bad_option(char *buf, int refused_opt, char *const *argv, int next_index);

/* Why getopt_long refused the word `word` with '?', for a message, given the tool's long options:
 * "ambiguous option" where the word abbreviates several of them (getopt takes a unique prefix),
 * "no value taken by option" for an option (its name or a unique prefix) given "=value" that takes none,
 * else "unknown option". */
const char *tool_refused_option_reason(const struct option *longs, const char *word);

/* The exit code for a context that could not be created. */
int tool_context_exit_code(fsa_status status);

/* Prints "PROG VERSION" (the library's) on stdout for --version; TOOL_EXIT_OK. */
int tool_print_version(const char *prog);

#endif
