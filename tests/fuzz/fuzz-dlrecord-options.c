/* fuzz-dlrecord-options.c — dlrecord's command line (dlrecord_parse_options,
 * tools/dlrecord-options.c).
 *
 * Input: the arguments after "dlrecord", separated by newlines or NUL bytes
 * (fuzz_args_split), as in "idx\nimages\nlabels\nout.dlrec".
 *
 * The parser must return 0, 2 (a usage error, with its message, owning
 * nothing) or TOOL_HELP / TOOL_VERSION, leave argv as it was, and answer the
 * same when called again on the same line. What it accepts is what dlrecord
 * --help documents: convert with 2 operands, idx with 3, info with 1 or
 * more, the command and the operands being arguments of argv.
 *
 * fuzz-sources: tools/dlrecord-options.c tools/tool-common.c */
#include <string.h>

#include "dlrecord.h"
#include "fuzz.h"

const char tool_name[] = "dlrecord";

static void check_accepted(const fuzz_args *a, const dlrecord_options *o) {
  FUZZ_CHECK(o->command && fuzz_args_holds(a, o->command), "a command outside argv");
  int n = o->n_operands;
  FUZZ_CHECK((strcmp(o->command, "convert") == 0 && n == 2) ||
                 (strcmp(o->command, "idx") == 0 && n == 3) ||
                 (strcmp(o->command, "tokens") == 0 && n == 2) ||
                 (strcmp(o->command, "info") == 0 && n >= 1),
             "accepted '%s' with %d operands", o->command, n);
  FUZZ_CHECK(n < a->argc - 1, "%d operands of %d arguments", n, a->argc - 1);
  FUZZ_CHECK(o->owned && o->operands, "accepted without operands");
  for (int i = 0; i < n; i++)
    FUZZ_CHECK(fuzz_args_holds(a, o->operands[i]), "operand %d outside argv", i);
}

static void check_refused(int rc, const dlrecord_options *o) {
  FUZZ_CHECK(!o->command && !o->operands && !o->owned && o->n_operands == 0,
             "returned %d owning its operands", rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_args a;
  if (fuzz_args_split(&a, "dlrecord", data, size) < 0) return 0;
  dlrecord_options o, again; /* the parser sets the defaults */
  int rc = dlrecord_parse_options(a.argc, a.argv, &o);
  FUZZ_CHECK(rc == 0 || rc == TOOL_HELP || rc == TOOL_VERSION || rc == STATUS_USAGE,
             "dlrecord_parse_options returned %d", rc);
  FUZZ_CHECK(rc != STATUS_USAGE || o.error[0], "a usage error without a message");
  FUZZ_CHECK(fuzz_args_intact(&a), "argv changed");
  if (rc == 0)
    check_accepted(&a, &o);
  else
    check_refused(rc, &o);
  int rc_again = dlrecord_parse_options(a.argc, a.argv, &again);
  FUZZ_CHECK(rc_again == rc, "returned %d, then %d", rc, rc_again);
  FUZZ_CHECK(strcmp(o.error, again.error) == 0, "again: '%s', then '%s'", o.error, again.error);
  if (rc == 0) {
    FUZZ_CHECK(strcmp(o.command, again.command) == 0 && o.n_operands == again.n_operands,
               "again: '%s' with %d operands, then '%s' with %d", o.command, o.n_operands,
               again.command, again.n_operands);
    for (int i = 0; i < o.n_operands; i++)
      FUZZ_CHECK(o.operands[i] == again.operands[i], "again: operand %d is another", i);
  }
  dlrecord_options_free(&o);
  dlrecord_options_free(&o); /* may be called again */
  FUZZ_CHECK(!o.owned && !o.operands && o.n_operands == 0, "freed, still owning operands");
  dlrecord_options_free(&again);
  fuzz_args_free(&a);
  return 0;
}
