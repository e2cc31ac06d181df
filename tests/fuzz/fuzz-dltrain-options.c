/* fuzz-dltrain-options.c — dltrain's command line (dltrain_parse_options,
 * tools/dltrain-options.c).
 *
 * Input: the arguments after "dltrain", separated by newlines or NUL bytes
 * (fuzz_args_split), as in "--model\ncnn\n--lr\n0.1".
 *
 * The parser must return 0, 2 (a usage error, with its message) or
 * TOOL_HELP / TOOL_VERSION, leave argv as it was, answer the same when
 * called again on the same line, and what it accepts must be usable as it is
 * stored: every number a finite
 * float in the range the option documents (a double that passes the check
 * but becomes inf or 0 as a float is a finding).
 *
 * fuzz-sources: tools/dltrain-options.c tools/tool-common.c */
#include <math.h>
#include <string.h>

#include "dltrain.h"
#include "fuzz.h"

const char tool_name[] = "dltrain";

static void check_accepted(const options *o) {
  const dlrt_optimizer *opt = &o->opt;
  FUZZ_CHECK(isfinite(opt->lr) && opt->lr > 0, "accepted lr %g", opt->lr);
  FUZZ_CHECK(opt->momentum >= 0 && opt->momentum < 1, "accepted momentum %g", opt->momentum);
  FUZZ_CHECK(isfinite(opt->weight_decay) && opt->weight_decay >= 0, "accepted weight decay %g",
             opt->weight_decay);
  FUZZ_CHECK(o->label_smoothing >= 0 && o->label_smoothing < 1, "accepted label smoothing %g",
             o->label_smoothing);
  FUZZ_CHECK(isfinite(o->clip_norm) && o->clip_norm >= 0, "accepted clip norm %g",
             o->clip_norm);
  if (o->schedule == DLRT_LR_STEP)
    FUZZ_CHECK(o->step_size > 0 && isfinite(o->gamma) && o->gamma > 0,
               "accepted step schedule %lld:%g", (long long)o->step_size, o->gamma);
  FUZZ_CHECK(o->aug.erase_p >= 0 && o->aug.erase_p < 1, "accepted erase %g", o->aug.erase_p);
  FUZZ_CHECK(isfinite(o->aug.mean) && isfinite(o->aug.std) && o->aug.std >= 0,
             "accepted normalize %g,%g", o->aug.mean, o->aug.std);
  const dlrt_loss_scaler *ls = &o->loss_scaler;
  /* The loss is multiplied by the scale and the gradients by its reciprocal. */
  FUZZ_CHECK(ls->init_scale == 0 || (isfinite(ls->init_scale) && ls->init_scale > 0 &&
                                     isfinite(1.0f / ls->init_scale)),
             "accepted loss scale %g", ls->init_scale);
  FUZZ_CHECK(ls->growth_factor == 0 || (isfinite(ls->growth_factor) && ls->growth_factor >= 1),
             "accepted loss-scale growth %g", ls->growth_factor);
  FUZZ_CHECK(ls->backoff_factor >= 0 && ls->backoff_factor <= 1, "accepted loss-scale backoff %g",
             ls->backoff_factor);
  FUZZ_CHECK(isfinite(o->what_if) && o->what_if >= 0, "accepted what-if %g", o->what_if);
  FUZZ_CHECK(o->batch >= 1 && o->epochs >= 0 && o->accum >= 1 && o->micro >= 1,
             "accepted batch %lld, epochs %d, accum %d, micro-batches %d", (long long)o->batch,
             o->epochs, o->accum, o->micro);
}

/* A second parse of the same line: the same answer (getopt's state reset). */
static void check_same(int rc, const options *x, const options *y) {
  FUZZ_CHECK(strcmp(x->error, y->error) == 0, "again: '%s', then '%s'", x->error, y->error);
  if (rc != 0) return;
  FUZZ_CHECK(x->model == y->model && x->data == y->data && x->device == y->device &&
                 x->save == y->save && x->resume == y->resume,
             "again: other files or devices");
  FUZZ_CHECK(x->epochs == y->epochs && x->batch == y->batch && x->limit == y->limit &&
                 x->seed == y->seed && x->accum == y->accum && x->micro == y->micro,
             "again: other counts");
  FUZZ_CHECK(x->opt.kind == y->opt.kind && x->opt.lr == y->opt.lr &&
                 x->opt.momentum == y->opt.momentum &&
                 x->opt.weight_decay == y->opt.weight_decay && x->schedule == y->schedule &&
                 x->step_size == y->step_size && x->gamma == y->gamma &&
                 x->loss_scaler.init_scale == y->loss_scaler.init_scale,
             "again: other optimizer settings");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_args a;
  if (fuzz_args_split(&a, "dltrain", data, size) < 0) return 0;
  options o, again; /* the parser sets the defaults */
  int rc = dltrain_parse_options(a.argc, a.argv, &o);
  FUZZ_CHECK(rc == 0 || rc == TOOL_HELP || rc == TOOL_VERSION || rc == STATUS_USAGE,
             "dltrain_parse_options returned %d", rc);
  FUZZ_CHECK(rc != STATUS_USAGE || o.error[0], "a usage error without a message");
  FUZZ_CHECK(fuzz_args_intact(&a), "argv changed");
  if (rc == 0) check_accepted(&o);
  int rc_again = dltrain_parse_options(a.argc, a.argv, &again);
  FUZZ_CHECK(rc_again == rc, "returned %d, then %d", rc, rc_again);
  check_same(rc, &o, &again);
  fuzz_args_free(&a);
  return 0;
}
