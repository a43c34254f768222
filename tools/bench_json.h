/* fsa-bench's --json output (bench_json.c): escaped strings, null for the
 * numbers that do not exist, and a document that a run ended early by a
 * failure still leaves parseable. */
#ifndef FSA_BENCH_JSON_H
#define FSA_BENCH_JSON_H

#include <stdio.h>

/* Creates path for one mode's document; NULL when it cannot be written. The
 * mode writes its head up to the rows' "[" at once. Until bench_json_close,
 * an exit (a failed call ends fsa-bench with exit status 1) first closes the
 * rows array and the document, so that a failed run leaves valid JSON with
 * the rows written so far. */
FILE *bench_json_open(const char *path);
/* Ends the rows array and the document and closes the file of
 * bench_json_open; 0, or -1 when the file could not be written (0 when none
 * is open). */
int bench_json_close(void);

/* s as a JSON string: quotes, backslashes and control characters escaped. */
void bench_json_string(FILE *f, const char *s);
/* ", \"name\": value" with the value in fmt, or null when it is not a finite
 * number or valid is 0 (a part not run: JSON has no NaN or infinity). */
void bench_json_field(FILE *f, const char *name, const char *fmt, double value, int valid);

#endif
