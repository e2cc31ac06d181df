/*
 * test-options.c — the tools' option parsers as functions (what the fuzzers
 * call): dltrain_parse_options, dlbench_parse_options, dlinfo_parse_options
 * and dlrecord_parse_options fill their struct and return a status; they
 * print nothing, leave argv as it was (getopt permutes only a copy), start
 * from scratch on every call (a second parse in one process sees none of
 * the first, not even half a group of short options), own nothing after a
 * failure, and cope with no arguments at all. ASan checks that nothing
 * leaks.
 * Points: computed at run time (done_testing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlbench.h"
#include "dlinfo.h"
#include "dlrecord.h"
#include "dltrain.h"
#include "tap.h"

const char tool_name[] = "test-options";

/* stdout and stderr go to a file while a parser runs: it must stay empty. */
static char quiet_path[512];
static int saved_out = -1, saved_err = -1;

static void quiet_begin(void) {
  fflush(stdout);
  fflush(stderr);
  FILE *f = fopen(quiet_path, "a");
  if (!f) bail_out("cannot open %s", quiet_path);
  saved_out = dup(1), saved_err = dup(2);
  dup2(fileno(f), 1);
  dup2(fileno(f), 2);
  fclose(f);
}

static void quiet_end(void) {
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1), dup2(saved_err, 2);
  close(saved_out), close(saved_err);
}

#define ARGC(a) ((int)(sizeof(a) / sizeof *(a)) - 1)

static int same_argv(char *const a[], char *const b[], int n) {
  for (int i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static void dltrain_cases(void) {
  static options o;
  char *good[] = {"dltrain", "--lr", "0.5", "-b", "16", "--json", "--schedule", "step:10:0.5",
                  NULL};
  char *typo[] = {"dltrain", "--bach", "3", NULL};
  char *half[] = {"dltrain", "-xj", NULL};
  char *epochs[] = {"dltrain", "--epochs", "3", NULL};
  char *extra[] = {"dltrain", "extra", "--quiet", NULL};
  char *help[] = {"dltrain", "--help", "--bogus", NULL};
  char *lr[] = {"dltrain", "--lr", "1e39", NULL};
  char *copy[4];
  memcpy(copy, extra, sizeof copy);
  int rc[8];
  quiet_begin();
  rc[0] = dltrain_parse_options(ARGC(good), good, &o);
  options first = o;
  rc[1] = dltrain_parse_options(ARGC(typo), typo, &o);
  char typo_error[TOOL_ERROR_MAX];
  snprintf(typo_error, sizeof typo_error, "%s", o.error);
  rc[2] = dltrain_parse_options(ARGC(good), good, &o);
  int again = o.batch == 16 && o.opt.lr == 0.5f && o.json && !o.error[0];
  rc[3] = dltrain_parse_options(ARGC(half), half, &o);
  rc[4] = dltrain_parse_options(ARGC(epochs), epochs, &o);
  options after_half = o;
  rc[5] = dltrain_parse_options(ARGC(extra), extra, &o);
  char extra_error[TOOL_ERROR_MAX];
  snprintf(extra_error, sizeof extra_error, "%s", o.error);
  rc[6] = dltrain_parse_options(ARGC(help), help, &o);
  rc[7] = dltrain_parse_options(ARGC(lr), lr, &o);
  quiet_end();
  ok(rc[0] == 0 && first.batch == 16 && first.opt.lr == 0.5f && first.json &&
         first.schedule == DLRT_LR_STEP && first.step_size == 10 && first.gamma == 0.5f &&
         first.epochs == 1 && !first.error[0],
     "dltrain: --lr 0.5 -b 16 --json --schedule step:10:0.5 parse (rc %d, batch %lld, lr %g)",
     rc[0], (long long)first.batch, first.opt.lr);
  ok(rc[1] == STATUS_USAGE && strstr(typo_error, "did you mean --batch?"),
     "dltrain: --bach is a usage error with a suggestion: %s", typo_error);
  ok(rc[2] == 0 && again, "dltrain: the same line parses again after a failure (rc %d)",
     rc[2]);
  ok(rc[3] == STATUS_USAGE && rc[4] == 0 && after_half.epochs == 3 && !after_half.json &&
         after_half.batch == 64 && !after_half.error[0],
     "dltrain: after '-xj' failed at x, the next parse starts afresh (epochs %d, json %d, "
     "batch %lld)", after_half.epochs, after_half.json, (long long)after_half.batch);
  ok(rc[5] == STATUS_USAGE && strstr(extra_error, "unexpected argument 'extra'") &&
         same_argv(extra, copy, 4),
     "dltrain: 'extra --quiet' is refused (%s) and argv keeps its order", extra_error);
  ok(rc[6] == TOOL_HELP, "dltrain: --help is TOOL_HELP (%d), the caller prints it", rc[6]);
  ok(rc[7] == STATUS_USAGE && strstr(o.error, "--lr needs a number > 0, not '1e39'"),
     "dltrain: --lr 1e39 is refused as a float: %s", o.error);
}

static void dlbench_cases(void) {
  static const char *const suites[] = {"copy", "gemm", "ops"};
  static dlbench_options o;
  char *good[] = {"dlbench", "gemm", "--quick", "-r", "5", "-d", "cpu,cpu:0", NULL};
  char *bad[] = {"dlbench", "-d", "cpu", "gem", NULL};
  char *copy[8];
  memcpy(copy, good, sizeof copy);
  int rc[3];
  quiet_begin();
  rc[0] = dlbench_parse_options(ARGC(good), good, suites, 3, &o);
  int gemm = o.suites[1] && !o.suites[0] && !o.suites[2], reps = o.bench.reps,
      quick = o.bench.quick, specs = o.n_specs;
  dlbench_options_free(&o);
  dlbench_options_free(&o); /* twice is fine */
  rc[1] = dlbench_parse_options(ARGC(bad), bad, suites, 3, &o);
  int owned_after_failure = o.n_specs;
  char bad_error[TOOL_ERROR_MAX];
  snprintf(bad_error, sizeof bad_error, "%s", o.error);
  rc[2] = dlbench_parse_options(ARGC(good), good, suites, 3, &o);
  dlbench_options_free(&o);
  quiet_end();
  ok(rc[0] == 0 && gemm && reps == 5 && quick && specs == 2 && same_argv(good, copy, 8),
     "dlbench: gemm --quick -r 5 -d cpu,cpu:0 parses, argv unpermuted (rc %d, reps %d, %d "
     "specs)", rc[0], reps, specs);
  ok(rc[1] == STATUS_USAGE && owned_after_failure == 0 &&
         strstr(bad_error, "did you mean gemm?"),
     "dlbench: an unknown suite fails owning nothing: %s", bad_error);
  is_int(rc[2], 0, "dlbench: the first line parses again");
}

static void dlinfo_cases(void) {
  static dlinfo_options o;
  char *good[] = {"dlinfo", "-w", "0.5", "--device", "cpu", "-j", NULL};
  char *bad[] = {"dlinfo", "--watch", "0", NULL};
  int rc[3];
  quiet_begin();
  rc[0] = dlinfo_parse_options(ARGC(good), good, &o);
  dlinfo_options first = o;
  rc[1] = dlinfo_parse_options(ARGC(bad), bad, &o);
  dlinfo_options second = o;
  rc[2] = dlinfo_parse_options(ARGC(good), good, &o);
  quiet_end();
  ok(rc[0] == 0 && first.watch == 0.5 && first.json && first.spec && !strcmp(first.spec, "cpu"),
     "dlinfo: -w 0.5 --device cpu -j parses");
  ok(rc[1] == STATUS_USAGE && strstr(second.error, "--watch"), "dlinfo: --watch 0 is refused: %s",
     second.error);
  ok(rc[2] == 0 && o.watch == 0.5 && !o.error[0], "dlinfo: and the first line parses again");
}

static void dlrecord_cases(void) {
  static dlrecord_options o;
  char *good[] = {"dlrecord", "info", "a.dlrec", "--", "-b.dlrec", NULL};
  char *none[] = {"dlrecord", NULL};
  int rc[3];
  quiet_begin();
  rc[0] = dlrecord_parse_options(ARGC(good), good, &o);
  int files = o.n_operands;
  const char *second = files == 2 ? o.operands[1] : "";
  int command = o.command && !strcmp(o.command, "info");
  char second_copy[32];
  snprintf(second_copy, sizeof second_copy, "%s", second);
  dlrecord_options_free(&o);
  rc[1] = dlrecord_parse_options(ARGC(none), none, &o);
  rc[2] = dlrecord_parse_options(ARGC(good), good, &o);
  dlrecord_options_free(&o);
  quiet_end();
  ok(rc[0] == 0 && command && files == 2 && !strcmp(second_copy, "-b.dlrec"),
     "dlrecord: info a.dlrec -- -b.dlrec: two files, the second after --");
  ok(rc[1] == STATUS_USAGE && !o.owned, "dlrecord: no command is a usage error owning nothing");
  is_int(rc[2], 0, "dlrecord: the first line parses again");
}

/* No program name (argc 0), as a fuzzer may pass. */
static void empty_cases(void) {
  static options t;
  static dlbench_options b;
  static dlinfo_options i;
  static dlrecord_options r;
  char *argv[] = {NULL};
  quiet_begin();
  int rt = dltrain_parse_options(0, argv, &t), rb = dlbench_parse_options(0, argv, NULL, 0, &b);
  int ri = dlinfo_parse_options(0, NULL, &i), rr = dlrecord_parse_options(0, argv, &r);
  dlbench_options_free(&b);
  dlrecord_options_free(&r);
  quiet_end();
  ok(rt == 0 && t.batch == 64 && rb == 0 && ri == 0 && rr == STATUS_USAGE,
     "argc 0: defaults (dltrain %d, dlbench %d, dlinfo %d), dlrecord wants a command (%d)", rt,
     rb, ri, rr);
}

int main(void) {
  char dir[256];
  tap_tempdir("test-options", dir, sizeof dir);
  snprintf(quiet_path, sizeof quiet_path, "%s/printed", dir);
  fclose(fopen(quiet_path, "w"));
  dltrain_cases();
  dlbench_cases();
  dlinfo_cases();
  dlrecord_cases();
  empty_cases();
  FILE *f = fopen(quiet_path, "r");
  long printed = -1;
  if (f && fseek(f, 0, SEEK_END) == 0) printed = ftell(f);
  if (f) fclose(f);
  is_int(printed, 0, "the parsers printed nothing on stdout or stderr");
  tap_remove_tree(dir);
  return done_testing();
}
