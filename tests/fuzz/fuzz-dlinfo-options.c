/* fuzz-dlinfo-options.c — dlinfo's command line (dlinfo_parse_options,
 * tools/dlinfo-options.c).
 *
 * Input: the arguments after "dlinfo", separated by newlines or NUL bytes
 * (fuzz_args_split), as in "--watch\n0.5\n--device\ncpu".
 *
 * The parser must return 0, 2 (a usage error, with its message) or
 * TOOL_HELP / TOOL_VERSION, leave argv as it was, and answer the same when
 * called again on the same line. What it accepts is what dlinfo --help
 * documents: --watch 0 (not given) or a finite 0.001 s up to a year, and a
 * --device spec that points into argv.
 *
 * fuzz-sources: tools/dlinfo-options.c tools/tool-common.c */
#include <math.h>
#include <string.h>

#include "dlinfo.h"
#include "fuzz.h"

const char tool_name[] = "dlinfo";

static void check_accepted(const fuzz_args *a, const dlinfo_options *o) {
  FUZZ_CHECK(o->json == 0 || o->json == 1, "accepted json %d", o->json);
  FUZZ_CHECK(o->watch == 0 ||
                 (isfinite(o->watch) && o->watch >= 0.001 && o->watch <= 86400.0 * 365),
             "accepted watch %g", o->watch);
  FUZZ_CHECK(!o->spec || fuzz_args_holds(a, o->spec), "a device spec outside argv");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_args a;
  if (fuzz_args_split(&a, "dlinfo", data, size) < 0) return 0;
  dlinfo_options o, again; /* the parser sets the defaults */
  int rc = dlinfo_parse_options(a.argc, a.argv, &o);
  FUZZ_CHECK(rc == 0 || rc == TOOL_HELP || rc == TOOL_VERSION || rc == STATUS_USAGE,
             "dlinfo_parse_options returned %d", rc);
  FUZZ_CHECK(rc != STATUS_USAGE || o.error[0], "a usage error without a message");
  FUZZ_CHECK(fuzz_args_intact(&a), "argv changed");
  if (rc == 0) check_accepted(&a, &o);
  int rc_again = dlinfo_parse_options(a.argc, a.argv, &again);
  FUZZ_CHECK(rc_again == rc, "returned %d, then %d", rc, rc_again);
  FUZZ_CHECK(strcmp(o.error, again.error) == 0, "again: '%s', then '%s'", o.error, again.error);
  if (rc == 0)
    FUZZ_CHECK(o.json == again.json && o.watch == again.watch && o.spec == again.spec,
               "again: other options (json %d/%d, watch %g/%g)", o.json, again.json, o.watch,
               again.watch);
  fuzz_args_free(&a);
  return 0;
}
