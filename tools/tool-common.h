/* tool-common.h — what the command-line tools share (tool-common.c): the exit
 * statuses, error messages for failed dlrt calls, option integers, JSON
 * strings and a monotonic clock. Public API only, like the tools. */
#ifndef TOOL_COMMON_H
#define TOOL_COMMON_H

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

/* A whole number in [min, max] for the option --NAME into *out; 1, or 0
 * after saying why not on stderr. */
int tool_parse_int(const char *name, const char *text, long long min, long long max,
                   long long *out);

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
