/* tool-common.h — what the command-line tools share (tool-common.c): the exit
 * statuses, error messages for failed dlrt calls, the checks of option
 * values and of getopt's complaints that every option parser uses, JSON
 * strings and a monotonic clock. Public API only, like the tools. */
#ifndef TOOL_COMMON_H
#define TOOL_COMMON_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

/* Every tool's exit status: 0 success, 1 a dlrt call failed, 2 usage error. */
enum { STATUS_FAIL = 1, STATUS_USAGE = 2 };

/* The program's name, which starts its messages ("dltrain"); each tool
 * defines it beside its main. */
extern const char tool_name[];

/* Why the last dlrt call failed: its detail message, or the status's text
 * when it left none. */
const char *tool_error_text(int rc);
/* Prints "NAME: [WHAT: ]DETAIL" on stderr for a failed dlrt call (WHAT NULL:
 * the detail alone); returns STATUS_FAIL. */
int tool_fail(const char *what, int rc);

/* ---------------------------------------------------------------- option parsing
 *
 * Each tool's parser (dltrain_parse_options, dlbench_parse_options,
 * dlinfo_parse_options, dlrecord_parse_options) fills an options struct and
 * returns 0, TOOL_HELP or TOOL_VERSION (the caller prints them), or
 * STATUS_USAGE with the reason in the struct's `error`: it prints nothing,
 * exits never, leaves argv as it was and may be called again (fuzzers do). */

/* Room for a usage error's message (without the program's name). */
enum { TOOL_ERROR_MAX = 512 };
/* A parser's answers besides 0 and STATUS_USAGE. */
enum { TOOL_HELP = -1, TOOL_VERSION = -2 };

/* Writes a usage error into err (TOOL_ERROR_MAX bytes) unless it holds one
 * already (the first complaint is the one that matters); returns 0, so that
 * `ok = tool_usage_error(...)` reads as what it does. */
int tool_usage_error(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "NAME: ERROR" and one line pointing to --help on stderr; returns
 * STATUS_USAGE. */
int tool_usage_fail(const char *error);

/* A whole number in [min, max] for the option NAME ("--batch") into *out;
 * 1, or 0 with the reason in err. */
int tool_parse_int(const char *name, const char *text, long long min, long long max,
                   long long *out, char *err);

/* Bounds of a real-valued option: min and max (either may be infinite), and
 * whether each is itself excluded. */
typedef struct {
  double min, max;
  int min_open, max_open;
} tool_range;

/* A number for the option NAME, checked as the value the tool uses: for
 * tool_parse_float, the float it becomes, which must be finite, not rounded
 * to 0 or a subnormal (1e-50) and within `range` after the rounding
 * (0.999999999 is 1 as a float); tool_parse_double checks the double. 1, or
 * 0 with the reason in err. */
int tool_parse_float(const char *name, const char *text, tool_range range, float *out,
                     char *err);
int tool_parse_double(const char *name, const char *text, tool_range range, double *out,
                      char *err);

/* Splits a copy of text (at most size - 1 bytes, else 0) at each `sep` into
 * at most max fields pointing into buf; the number of fields, or 0 when
 * there are more than max or text is too long. "a::b" has an empty field. */
int tool_split(const char *text, char sep, char *buf, size_t size, char *fields[], int max);

/* Prepares getopt_long for a new parse: its messages off (the parsers make
 * their own) and its state reset (glibc's optind = 0), so that a second
 * parse in one process starts from the first argument. Use a short-option
 * string starting with ':' so that a missing value is told from an unknown
 * option. */
void tool_getopt_reset(void);
/* A copy of argv's pointers (argc + 1 of them, the last NULL) for getopt_long
 * to permute, so the caller's argv stays as it was; NULL when out of memory.
 * free() it. */
char **tool_argv_copy(int argc, char *const argv[]);
/* After getopt_long returned '?' or ':' on args: says in err what was wrong
 * (unknown option, ambiguous abbreviation, missing value, value not taken),
 * with the nearest long option for an unknown one ("did you mean --batch?"). */
void tool_getopt_error(int c, char *const args[], const char *shortopts,
                       const struct option *longopts, char *err);

/* The word of words[0..n) nearest to given (its first len bytes) by edit
 * distance (adjacent transpositions count one), or a word given starts with
 * ("--batch-size": batch); NULL when none is near enough to be meant. */
const char *tool_nearest_word(const char *given, size_t len, const char *const words[],
                              size_t n);
/* The same over the names of a getopt_long table (ending with a NULL name). */
const char *tool_nearest_option(const char *given, size_t len, const struct option *longopts);
/* "unknown WHAT 'GIVEN' (A, B or C)" plus "; did you mean B?" when one is
 * near, into err; returns 0. */
int tool_unknown_word(char *err, const char *what, const char *given, const char *const words[],
                      size_t n);

/* ---------------------------------------------------------------- output */

/* Writes s (NULL: "") as a JSON string on out: quote and backslash escaped
 * with a backslash, control characters and DEL as \u00XX, other bytes (UTF-8
 * included) as they are. */
void tool_json_string(FILE *out, const char *s);
/* Writes n string members as `"KEY": "VALUE", ` each (the comma and space
 * follow every one, the last included: more members come after). */
void tool_json_strings(FILE *out, const char *const keys[], const char *const vals[], size_t n);

/* Seconds on CLOCK_MONOTONIC (from an arbitrary start): for durations. */
double tool_now_s(void);

#endif
