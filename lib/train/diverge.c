/* diverge.c — stops a training run whose loss is no longer finite, before it
 * goes on making NaN updates that a later save would keep: a learning rate
 * too high, a huge weight decay, a schedule that raises the rate past a
 * float, or a corrupt checkpoint all end the same way, with DLRT_ERR_DIVERGED
 * and a message naming the update and the likely cause. The trainer reads
 * every loss back anyway (for its mean and the progress display), so the
 * checks cost no device sync of their own. A loss-scaled run may skip an
 * update whose gradients overflowed: that is the scaler's job, not
 * divergence, unless the loss itself stays inf or NaN (the forward pass
 * overflows, which no scale cures) or the scale can go no lower. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "train/train.h"
#include "util/status.h"

/* Appends "; WHAT" (the first without "; ") to buf[*at..size). */
static void add_cause(char *buf, size_t size, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_cause(char *buf, size_t size, size_t *at, const char *fmt, ...) {
  if (*at >= size) return;
  if (*at > 0) *at += (size_t)snprintf(buf + *at, size - *at, "; ");
  if (*at >= size) return;
  va_list ap;
  va_start(ap, fmt);
  *at += (size_t)vsnprintf(buf + *at, size - *at, fmt, ap);
  va_end(ap);
}

/* What in the configuration most likely made the run diverge, in words
 * (several, when several settings are suspect). The thresholds are far
 * beyond what trains: torch.optim's defaults are 0.01 (SGD) and 0.001
 * (Adam), weight decays 0 to 0.1. */
static void likely_causes(const dlrt_trainer_t *t, float lr, char *buf, size_t size) {
  const dlrt_optimizer *o = &t->cfg.opt;
  const dlrt_optimizer usual = dlrt_optimizer_defaults(o->kind);
  const char *name = dlrt_optimizer_name(o->kind);
  /* The steps this trainer did not make came from a checkpoint. */
  int64_t resumed_at = t->steps - t->updates;
  size_t at = 0;
  buf[0] = '\0';
  if (resumed_at < 0)
    add_cause(buf, size, &at, "the checkpoint resumed from says %lld steps were made: its "
              "optimizer.step is corrupt", (long long)resumed_at);
  else if (resumed_at > 0 && t->updates <= 1)
    add_cause(buf, size, &at, "this is the first update after resuming from a checkpoint at "
              "step %lld: its optimizer state may be corrupt", (long long)resumed_at);
  if (!isfinite(lr) || lr > o->lr * 1.001f)
    add_cause(buf, size, &at, "the schedule raised the learning rate from %g to %g (times "
              "%g every %lld steps)", o->lr, lr, t->cfg.gamma, (long long)t->cfg.step_size);
  else if (lr >= 10 * usual.lr)
    add_cause(buf, size, &at, "the learning rate %g is %.3gx %s's usual %g", lr,
              lr / usual.lr, name, usual.lr);
  if ((double)lr * o->weight_decay >= 1 || o->weight_decay >= 1000)
    add_cause(buf, size, &at, "the weight decay %g is far too large (times the learning "
              "rate: %g; keep that well below 1)", o->weight_decay,
              (double)lr * o->weight_decay);
  if (t->cfg.precision == DLRT_F16 && t->cfg.loss_scaler.enabled < 0)
    add_cause(buf, size, &at, "fp16 without loss scaling");
  if (at == 0)
    add_cause(buf, size, &at, "the learning rate %g may be too high for this model and data, "
              "or the data holds inf or NaN", lr);
}

/* DLRT_ERR_DIVERGED: WHAT at update `step` of the epoch, the likely causes
 * and what to do. */
static int diverged(const dlrt_trainer_t *t, float lr, int epoch, int64_t step, int64_t steps,
                    const char *what) {
  char causes[768];
  likely_causes(t, lr, causes, sizeof causes);
  return dlrt__set_error(DLRT_ERR_DIVERGED, "training diverged at update %lld (epoch %d, step "
                         "%lld of %lld): %s. Likely cause: %s. Lower the learning rate (--lr), "
                         "or add --warmup or --clip-norm, and go on from the last good "
                         "checkpoint", (long long)t->steps + 1, epoch + 1, (long long)step + 1,
                         (long long)steps, what, causes);
}

int dlrt__check_lr(const dlrt_trainer_t *t, float lr, int epoch, int64_t step, int64_t steps) {
  if (isfinite(lr)) return DLRT_OK;
  char what[96];
  snprintf(what, sizeof what, "its learning rate is %g, beyond a float", lr);
  return diverged(t, lr, epoch, step, steps, what);
}

int dlrt__check_update(dlrt_trainer_t *t, double loss, const dlrt_loss_scale_state *before,
                       int epoch, int64_t step, int64_t steps) {
  dlrt_loss_scale_state after = *before;
  dlrt_trainer_loss_scale(t, &after); /* the executor's host-side state: no sync */
  int skipped = after.skipped_steps > before->skipped_steps;
  float lr = dlrt_lr_at(&t->cfg, t->steps);
  char what[256];
  if (isfinite(loss)) {
    t->nonfinite_run = 0;
    if (!skipped || before->scale > DLRT_LOSS_SCALE_MIN) return DLRT_OK;
    snprintf(what, sizeof what, "the gradients overflow even at the smallest loss scale (%g), "
             "so every update is skipped", before->scale);
    return diverged(t, lr, epoch, step, steps, what);
  }
  if (skipped && ++t->nonfinite_run < DLRT_DIVERGED_SKIPS) return DLRT_OK;
  if (skipped)
    snprintf(what, sizeof what, "the loss has been %s on %d updates in a row, each skipped by "
             "the loss scaler: the forward pass overflows, which no loss scale cures", isnan(loss)
             ? "NaN" : "inf", t->nonfinite_run);
  else
    snprintf(what, sizeof what, "the loss is %s, and the update made with it leaves the "
             "parameters unusable", isnan(loss) ? "NaN" : "inf");
  return diverged(t, lr, epoch, step, steps, what);
}

int dlrt__check_test_loss(const dlrt_trainer_t *t, double loss) {
  if (isfinite(loss)) return DLRT_OK;
  char causes[768];
  likely_causes(t, dlrt_lr_at(&t->cfg, t->steps > 0 ? t->steps - 1 : 0), causes, sizeof causes);
  return dlrt__set_error(DLRT_ERR_DIVERGED, "training diverged: the test loss after %lld "
                         "updates is %s (the parameters, or activations in 16-bit compute, "
                         "hold inf or NaN). Likely cause: %s. Lower the learning rate (--lr), "
                         "or add --warmup or --clip-norm, and go on from the last good "
                         "checkpoint", (long long)t->steps, isnan(loss) ? "NaN" : "inf",
                         causes);
}
