/* dlinfo.h — dlinfo's command line (dlinfo-options.c), apart from its main
 * (dlinfo.c) so that tests and fuzzers can call the parser. */
#ifndef DLINFO_H
#define DLINFO_H

#include <stdio.h>

#include "tool-common.h" /* STATUS_*, TOOL_*, TOOL_ERROR_MAX */

typedef struct {
  int json;                   /* --json */
  double watch;               /* --watch seconds (0: once) */
  const char *spec;           /* --device (NULL: every device); points into argv */
  const char *link;           /* --link SPEC (checked; NULL: DLRT_LINK's, if any) */
  char error[TOOL_ERROR_MAX]; /* why the command line is wrong ("" when it is not) */
} dlinfo_options;

/* Fills *o from the command line: 0; TOOL_HELP or TOOL_VERSION (print them
 * with dlinfo_usage, dlinfo_version); or STATUS_USAGE with the reason in
 * o->error. Prints nothing and never exits; argv is left as it was.
 * Callable again in the same process. */
int dlinfo_parse_options(int argc, char *const argv[], dlinfo_options *o);
void dlinfo_usage(FILE *out);
void dlinfo_version(FILE *out);

#endif
