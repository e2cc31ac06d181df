/* dlgen.h — dlgen's command line (dlgen-options.c), apart from its main
 * (dlgen.c) so that tests and fuzzers can call the parser. */
#ifndef DLGEN_H
#define DLGEN_H

#include <stdint.h>
#include <stdio.h>

#include "tool-common.h" /* STATUS_*, TOOL_*, TOOL_ERROR_MAX */

/* The most positions --bench takes, and its rounds of each. */
enum { DLGEN_BENCH_MAX = 8, DLGEN_BENCH_ROUNDS = 21 };

typedef struct {
  const char *checkpoint;   /* a GPT's checkpoint (dltrain --save); points into argv */
  const char *prompt;       /* NULL: none (a newline, or GPT-2's <|endoftext|>) */
  long long tokens;         /* to sample (default 200) */
  float temperature;        /* logits divided by it; 0: the likeliest token (default 1) */
  long long top_k;          /* only the k likeliest tokens (0: all, the default) */
  float top_p;              /* only the likeliest tokens of this much probability (1: all) */
  uint64_t seed;            /* of the draws (default 1) */
  const char *device;       /* NULL: $DLRT_DEVICE, else auto */
  int threads;              /* CPU backend threads; -1: as they are */
  int timing;               /* each position's time, and tokens/s, on stderr */
  /* --bench P,Q,...: after sampling, steps at these positions timed again
   * in alternation (bench_rounds rounds); n_bench 0: none. */
  int64_t bench[DLGEN_BENCH_MAX];
  int n_bench;
  char error[TOOL_ERROR_MAX]; /* why the command line is wrong ("" when it is not) */
} dlgen_options;

/* Fills *o from the command line: 0; TOOL_HELP or TOOL_VERSION (print them
 * with dlgen_usage, dlgen_version); or STATUS_USAGE with the reason in
 * o->error. Prints nothing and never exits; argv is left as it was (o's
 * strings point into it). Callable again in the same process. */
int dlgen_parse_options(int argc, char *const argv[], dlgen_options *o);
void dlgen_usage(FILE *out);
void dlgen_version(FILE *out);

#endif
