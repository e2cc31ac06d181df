/* dlrecord.h — dlrecord's command line (dlrecord-options.c), apart from its
 * main (dlrecord.c) so that tests and fuzzers can call the parser. */
#ifndef DLRECORD_H
#define DLRECORD_H

#include <stdio.h>

#include "tool-common.h" /* STATUS_*, TOOL_*, TOOL_ERROR_MAX */

typedef struct {
  const char *command;        /* "convert", "idx", "tokens" or "info"; points into argv */
  char *const *operands;      /* the command's operands, n_operands of them */
  int n_operands;
  char **owned;               /* what operands points into (dlrecord_options_free) */
  char error[TOOL_ERROR_MAX]; /* why the command line is wrong ("" when it is not) */
} dlrecord_options;

/* Fills *o from the command line: 0; TOOL_HELP or TOOL_VERSION (print them
 * with dlrecord_usage, dlrecord_version); or STATUS_USAGE with the reason in
 * o->error. Prints nothing and never exits; argv is left as it was. After a
 * failure *o owns nothing; after success release it with
 * dlrecord_options_free (which may be called again). Callable again in the
 * same process. */
int dlrecord_parse_options(int argc, char *const argv[], dlrecord_options *o);
void dlrecord_options_free(dlrecord_options *o);
void dlrecord_usage(FILE *out);
void dlrecord_version(FILE *out);

#endif
