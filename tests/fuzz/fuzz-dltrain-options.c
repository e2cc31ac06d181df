/* fuzz-dltrain-options.c — dltrain's command line (parse_options,
 * tools/dltrain-options.c).
 *
 * Input: the arguments after "dltrain", separated by newlines or NUL bytes
 * (fuzz_args_split), as in "--model\ncnn\n--lr\n0.1".
 *
 * The parser must return 0, 2 (a usage error) or -1 (--help, --version),
 * and what it accepts must be usable as it is stored: every number a finite
 * float in the range the option documents (a double that passes the check
 * but becomes inf or 0 as a float is a finding).
 *
 * fuzz-sources: tools/dltrain-options.c tools/tool-common.c */
#include <math.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_args a;
  if (fuzz_args_split(&a, "dltrain", data, size) < 0) return 0;
  /* main()'s defaults (tools/dltrain.c). */
  options o = {.model = "mlp", .data = "fashion-mnist", .epochs = 1, .threads = -1,
               .batch = 64, .seed = 1, .workers = 2, .prefetch = 2, .accum = 1,
               .spill = {.prefetch = 4}, .micro = 4};
  int rc = parse_options(a.argc, a.argv, &o);
  FUZZ_CHECK(rc == 0 || rc == -1 || rc == STATUS_USAGE, "parse_options returned %d", rc);
  if (rc == 0) check_accepted(&o);
  fuzz_args_free(&a);
  return 0;
}
