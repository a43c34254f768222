/* fsa-precompile's command-line values: number lists ("64,128", "1-8",
 * "16-256:16"), name lists, single numbers, byte counts and dtypes, each
 * parsed strictly with a usage message naming the option. */
#ifndef FSA_PRECOMPILE_LISTS_H
#define FSA_PRECOMPILE_LISTS_H

#include <fsa.h>

#include <stddef.h>
#include <stdint.h>

#define PROG "fsa-precompile"

/* Caps that keep a typo such as 1-1000000000 from allocating or running for
 * hours; real grids are far smaller. */
#define MAX_LIST_VALUES 4096
#define MAX_LIST_VALUE 1000000L

typedef struct int_list {
    int *v;
    size_t n, cap;
} int_list;

typedef struct str_list {
    char **v;
    size_t n, cap;
} str_list;

void int_list_free(int_list *l);
void str_list_free(str_list *l);
/* Appends x unless present (a repeated value would only plan a shape twice).
 * -1 when out of memory. */
int int_list_add(int_list *l, int x);

/* "fsa-precompile: <message>" and a pointer to --help, on stderr. */
void usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Each returns 0, or -1 after a usage_error naming `option`. */
/* "64,128", "1-8", "16-256:16" and comma-separated mixes of them, at most
 * MAX_LIST_VALUES values with repeats counted. Replaces
 * what an earlier occurrence of the option gave. */
int parse_int_list(int_list *out, const char *text, const char *option);
/* Comma-separated names, none empty, none with a blank around it. */
int parse_str_list(str_list *out, const char *text, const char *option);
/* A single number, min..max. */
int parse_one(long *out, const char *text, long min, long max, const char *option);
/* --max-bytes: a byte count with an optional K, M, G or T suffix (powers of 1024). */
int parse_bytes(uint64_t *out, const char *text);
/* --dtype: comma-separated dtype names into their fsa_dtype values. */
int parse_dtypes(int_list *out, const char *text);

#endif
