/* tool-common.c — the helpers every tool shares (tool-common.h). */
#include "tool-common.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrt.h"

const char *tool_error_text(int rc) {
  const char *detail = dlrt_last_error();
  return detail && *detail ? detail : dlrt_strerror(rc);
}

int tool_fail(const char *what, int rc) {
  fprintf(stderr, "%s: %s%s%s\n", tool_name, what ? what : "", what ? ": " : "",
          tool_error_text(rc));
  return STATUS_FAIL;
}

/* ---------------------------------------------------------------- usage errors */

int tool_usage_error(char *err, const char *fmt, ...) {
  if (!err || *err) return 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, TOOL_ERROR_MAX, fmt, ap);
  va_end(ap);
  return 0;
}

int tool_usage_fail(const char *error) {
  fprintf(stderr, "%s: %s\nTry '%s --help' for more information.\n", tool_name,
          error && *error ? error : "bad usage", tool_name);
  return STATUS_USAGE;
}

/* ---------------------------------------------------------------- values */

int tool_parse_int(const char *name, const char *text, long long min, long long max,
                   long long *out, char *err) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || isspace((unsigned char)*text) || v < min || v > max)
    return tool_usage_error(err, "%s needs a whole number from %lld to %lld, not '%s'", name,
                            min, max, text);
  *out = v;
  return 1;
}

/* "> 0", ">= 0", "in [0, 1)" or "" (any finite number): range in words. */
static void range_text(tool_range r, char *buf, size_t size) {
  if (isinf(r.min) && isinf(r.max))
    snprintf(buf, size, "%s", "");
  else if (isinf(r.max))
    snprintf(buf, size, " %s %g", r.min_open ? ">" : ">=", r.min);
  else if (isinf(r.min))
    snprintf(buf, size, " %s %g", r.max_open ? "<" : "<=", r.max);
  else
    snprintf(buf, size, " in %c%g, %g%c", r.min_open ? '(' : '[', r.min, r.max,
             r.max_open ? ')' : ']');
}

static int in_range(double v, tool_range r) {
  return (r.min_open ? v > r.min : v >= r.min) && (r.max_open ? v < r.max : v <= r.max);
}

/* The value is checked as the tool will use it: a float option as the float
 * strtod's double rounds to, so that 1e39 (inf), 1e-50 (0), 1e-40 (a
 * subnormal, which GPUs flush to 0) and 0.999999999 (1) are caught here and
 * not as a NaN or a runtime error later. */
static int parse_real(const char *name, const char *text, tool_range r, int as_float,
                      double *out, char *err) {
  char words[96], *end;
  range_text(r, words, sizeof words);
  double v = strtod(text, &end);
  if (end == text || *end || isspace((unsigned char)*text) || isnan(v))
    return tool_usage_error(err, "%s needs a number%s, not '%s'", name, words, text);
  double used = as_float ? (double)(float)v : v;
  double largest = as_float ? FLT_MAX : DBL_MAX, smallest = as_float ? FLT_MIN : DBL_MIN;
  const char *type = as_float ? "float" : "double";
  if (!isfinite(used))
    return tool_usage_error(err, "%s needs a number%s, not '%s': beyond a %s's range (the "
                            "largest is %.2g)", name, words, text, type, largest);
  if (v != 0 && !(as_float ? isnormal((float)used) : isnormal(used)))
    return tool_usage_error(err, "%s needs a number%s, not '%s': too small for a %s (it "
                            "would be %g; the smallest is %.2g)", name, words, text, type,
                            used, smallest);
  if (!in_range(used, r)) {
    if (used != v && in_range(v, r)) /* only the rounding took it out */
      return tool_usage_error(err, "%s needs a number%s, not '%s' (%.9g as a %s)", name, words,
                              text, used, type);
    return tool_usage_error(err, "%s needs a number%s, not '%s'", name, words, text);
  }
  *out = used;
  return 1;
}

int tool_parse_float(const char *name, const char *text, tool_range range, float *out,
                     char *err) {
  double v;
  if (!parse_real(name, text, range, 1, &v, err)) return 0;
  *out = (float)v;
  return 1;
}

int tool_parse_double(const char *name, const char *text, tool_range range, double *out,
                      char *err) {
  return parse_real(name, text, range, 0, out, err);
}

int tool_split(const char *text, char sep, char *buf, size_t size, char *fields[], int max) {
  size_t len = strlen(text);
  if (len + 1 > size || max < 1) return 0;
  memcpy(buf, text, len + 1);
  int n = 0;
  for (char *p = buf;; p++) {
    char *next = strchr(p, sep);
    if (n == max) return 0;
    fields[n++] = p;
    if (!next) return n;
    *next = '\0';
    p = next;
  }
}

/* ---------------------------------------------------------------- getopt */

void tool_getopt_reset(void) {
#ifdef __GLIBC__
  optind = 0; /* glibc: also forgets a half-read group of short options */
#else
  optind = 1;
#endif
  opterr = 0;
  optopt = 0;
  optarg = NULL;
}

char **tool_argv_copy(int argc, char *const argv[]) {
  char **args = malloc(((size_t)(argc > 0 ? argc : 0) + 1) * sizeof *args);
  if (!args) return NULL;
  for (int i = 0; i < argc; i++) args[i] = argv[i];
  args[argc > 0 ? argc : 0] = NULL;
  return args;
}

/* The long name of the option whose val is `val`, or NULL. */
static const char *long_name_of(int val, const struct option *longopts) {
  for (const struct option *o = longopts; o && o->name; o++)
    if (!o->flag && o->val == val) return o->name;
  return NULL;
}

void tool_getopt_error(int c, char *const args[], const char *shortopts,
                       const struct option *longopts, char *err) {
  const char *arg = optind > 0 && args[optind - 1] ? args[optind - 1] : "";
  int typed_long = strncmp(arg, "--", 2) == 0;
  const char *long_name = optopt ? long_name_of(optopt, longopts) : NULL;
  int known = optopt > 0 && ((optopt != ':' && optopt < 256 && strchr(shortopts, optopt)) ||
                             long_name);
  if (c == ':') {
    if (typed_long && long_name)
      tool_usage_error(err, "option '--%s' needs a value", long_name);
    else
      tool_usage_error(err, "option '-%c' needs a value", optopt);
  } else if (optopt == 0 && typed_long) {
    const char *given = arg + 2;
    int len = (int)strcspn(given, "=");
    char list[TOOL_ERROR_MAX / 2] = "";
    int matches = 0;
    size_t at = 0;
    for (const struct option *o = longopts; o && o->name; o++) {
      if (strncmp(o->name, given, (size_t)len) != 0) continue;
      matches++;
      if (at < sizeof list)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s--%s", at ? ", " : "", o->name);
    }
    if (matches > 1) {
      tool_usage_error(err, "option '--%.*s' is ambiguous: %s", len, given, list);
    } else {
      const char *near = tool_nearest_option(given, (size_t)len, longopts);
      tool_usage_error(err, "unknown option '--%.*s'%s%s%s", len, given,
                       near ? "; did you mean --" : "", near ? near : "", near ? "?" : "");
    }
  } else if (known) {
    tool_usage_error(err, "option '--%s' takes no value", long_name ? long_name : arg + 2);
  } else if (optopt > 0 && isprint(optopt)) {
    tool_usage_error(err, "unknown option '-%c'", optopt);
  } else {
    tool_usage_error(err, "unknown option '%s'", arg);
  }
}

/* ---------------------------------------------------------------- near misses */

enum { NEAR_MAX_LEN = 64 };

/* Edit distance between a[0..m) and b[0..n): insertions, deletions,
 * substitutions and swaps of two neighbours each count one (the optimal
 * string alignment distance). */
static int edit_distance(const char *a, size_t m, const char *b, size_t n) {
  int d[NEAR_MAX_LEN + 1][NEAR_MAX_LEN + 1];
  for (size_t i = 0; i <= m; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= n; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= m; i++)
    for (size_t j = 1; j <= n; j++) {
      int cost = a[i - 1] != b[j - 1];
      int best = d[i - 1][j - 1] + cost;
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[m][n];
}

/* How far `given` may be from a word of `n` letters and still be a near
 * miss: one slip in a short word, up to three in a long one. */
static int tolerance(size_t n) { return n <= 3 ? 1 : n <= 6 ? 2 : 3; }

/* The distance of given to word, or a large one when it is no near miss. */
static int miss_distance(const char *given, size_t len, const char *word) {
  size_t n = strlen(word);
  if (len == 0 || len > NEAR_MAX_LEN || n > NEAR_MAX_LEN) return INT_MAX;
  if (n >= 4 && len > n && strncmp(given, word, n) == 0) return 1; /* --batch-size */
  int d = edit_distance(given, len, word, n);
  return d <= tolerance(n) && (size_t)d < len ? d : INT_MAX;
}

const char *tool_nearest_word(const char *given, size_t len, const char *const words[],
                              size_t n) {
  const char *best = NULL;
  int best_d = INT_MAX;
  for (size_t i = 0; i < n; i++) {
    int d = words[i] ? miss_distance(given, len, words[i]) : INT_MAX;
    if (d < best_d) best = words[i], best_d = d;
  }
  return best;
}

const char *tool_nearest_option(const char *given, size_t len, const struct option *longopts) {
  const char *best = NULL;
  int best_d = INT_MAX;
  for (const struct option *o = longopts; o && o->name; o++) {
    int d = miss_distance(given, len, o->name);
    if (d < best_d) best = o->name, best_d = d;
  }
  return best;
}

int tool_unknown_word(char *err, const char *what, const char *given, const char *const words[],
                      size_t n) {
  char list[TOOL_ERROR_MAX / 2] = "";
  size_t at = 0;
  for (size_t i = 0; i < n && at < sizeof list; i++)
    at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i == 0 ? "" : i + 1 == n ? " or "
                           : ", ", words[i]);
  const char *near = tool_nearest_word(given, strlen(given), words, n);
  return tool_usage_error(err, "unknown %s '%s' (%s)%s%s%s", what, given, list,
                          near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
}

/* ---------------------------------------------------------------- output */

void tool_json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) /* controls, newline and tab included */
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

void tool_json_strings(FILE *out, const char *const keys[], const char *const vals[], size_t n) {
  for (size_t k = 0; k < n; k++) {
    tool_json_string(out, keys[k]);
    fputs(": ", out);
    tool_json_string(out, vals[k]);
    fputs(", ", out);
  }
}

double tool_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
