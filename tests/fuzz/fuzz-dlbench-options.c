/* fuzz-dlbench-options.c — dlbench's command line (dlbench_parse_options,
 * tools/dlbench-options.c).
 *
 * Input: the arguments after "dlbench", separated by newlines or NUL bytes
 * (fuzz_args_split), as in "gemm\n--quick\n-d\ncpu,cpu:0".
 *
 * The parser must return 0, 2 (a usage error, with its message, owning no
 * device spec) or TOOL_HELP / TOOL_VERSION, leave argv as it was, and answer
 * the same when called again on the same line. What it accepts is what
 * dlbench --help documents: --reps 1..2000, --warmup 0..1000, --min-time a
 * finite 0..3600 seconds, at most BENCH_MAX_SPECS device specs (none empty,
 * none with a comma), at most one output on stdout, and either compare with
 * two files or at least one suite.
 *
 * fuzz-sources: tools/dlbench-options.c tools/tool-common.c */
#include <math.h>
#include <string.h>

#include "dlbench.h"
#include "fuzz.h"

const char tool_name[] = "dlbench";

/* bench_suites' names in its order (dlbench-suites.c, which needs devices). */
static const char *const suite_names[] = {"copy", "gemm", "ops", "train", "spill", "loader"};
enum { N_SUITES = sizeof suite_names / sizeof *suite_names };

static int is_stdout(const char *file) { return file && strcmp(file, "-") == 0; }

static void check_accepted(const dlbench_options *o) {
  const bench_options *b = &o->bench;
  FUZZ_CHECK(b->reps >= 1 && b->reps <= BENCH_MAX_REPS, "accepted reps %d", b->reps);
  FUZZ_CHECK(b->warmup >= 0 && b->warmup <= 1000, "accepted warmup %d", b->warmup);
  FUZZ_CHECK(isfinite(b->min_time) && b->min_time >= 0 && b->min_time <= 3600,
             "accepted min-time %g", b->min_time);
  FUZZ_CHECK(o->n_specs >= 0 && o->n_specs <= BENCH_MAX_SPECS, "accepted %d specs",
             o->n_specs);
  for (int i = 0; i < o->n_specs; i++)
    FUZZ_CHECK(o->specs[i] && o->specs[i][0] && !strchr(o->specs[i], ','),
               "accepted device spec %d: '%s'", i, o->specs[i] ? o->specs[i] : "(null)");
  FUZZ_CHECK(is_stdout(o->json) + is_stdout(o->csv) + is_stdout(o->report) <= 1,
             "accepted two outputs on stdout");
  int suites = 0;
  for (int i = 0; i < BENCH_MAX_SUITES; i++) {
    FUZZ_CHECK(o->suites[i] == 0 || (o->suites[i] == 1 && i < N_SUITES), "suite %d set to %d",
               i, o->suites[i]);
    suites += o->suites[i];
  }
  FUZZ_CHECK(!o->compare[0] == !o->compare[1], "compare with one file");
  FUZZ_CHECK(o->compare[0] ? suites == 0 : suites > 0,
             "accepted %d suites %s compare", suites, o->compare[0] ? "with" : "without");
}

static void check_same(int rc, const dlbench_options *x, const dlbench_options *y) {
  FUZZ_CHECK(strcmp(x->error, y->error) == 0, "again: '%s', then '%s'", x->error, y->error);
  if (rc != 0) return;
  const bench_options *a = &x->bench, *b = &y->bench;
  FUZZ_CHECK(a->quick == b->quick && a->warmup == b->warmup && a->reps == b->reps &&
                 a->min_time == b->min_time && a->quiet == b->quiet &&
                 fuzz_same_string(a->filter, b->filter),
             "again: other measuring options");
  FUZZ_CHECK(x->n_specs == y->n_specs, "again: %d specs, then %d", x->n_specs, y->n_specs);
  for (int i = 0; i < x->n_specs; i++)
    FUZZ_CHECK(strcmp(x->specs[i], y->specs[i]) == 0, "again: spec '%s', then '%s'",
               x->specs[i], y->specs[i]);
  FUZZ_CHECK(memcmp(x->suites, y->suites, sizeof x->suites) == 0, "again: other suites");
  FUZZ_CHECK(fuzz_same_string(x->json, y->json) && fuzz_same_string(x->csv, y->csv) &&
                 fuzz_same_string(x->report, y->report) &&
                 fuzz_same_string(x->compare[0], y->compare[0]) &&
                 fuzz_same_string(x->compare[1], y->compare[1]),
             "again: other files");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_args a;
  if (fuzz_args_split(&a, "dlbench", data, size) < 0) return 0;
  dlbench_options o, again; /* the parser sets the defaults */
  int rc = dlbench_parse_options(a.argc, a.argv, suite_names, N_SUITES, &o);
  FUZZ_CHECK(rc == 0 || rc == TOOL_HELP || rc == TOOL_VERSION || rc == STATUS_USAGE,
             "dlbench_parse_options returned %d", rc);
  FUZZ_CHECK(rc != STATUS_USAGE || o.error[0], "a usage error without a message");
  FUZZ_CHECK(rc == 0 || o.n_specs == 0, "returned %d owning %d specs", rc, o.n_specs);
  FUZZ_CHECK(fuzz_args_intact(&a), "argv changed");
  if (rc == 0) check_accepted(&o);
  int rc_again = dlbench_parse_options(a.argc, a.argv, suite_names, N_SUITES, &again);
  FUZZ_CHECK(rc_again == rc, "returned %d, then %d", rc, rc_again);
  check_same(rc, &o, &again);
  dlbench_options_free(&o);
  dlbench_options_free(&o); /* may be called again */
  dlbench_options_free(&again);
  fuzz_args_free(&a);
  return 0;
}
