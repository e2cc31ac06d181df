/*
 * test-diverge.c — a run that diverges stops, and the loss scale stays where
 * it and its reciprocal are finite; on every device present
 * (tap_for_each_device):
 * - dlrt_exec_set_loss_scaler refuses an initial scale outside
 *   [DLRT_LOSS_SCALE_MIN, DLRT_LOSS_SCALE_MAX] (1e-45: 1 / scale is inf, and
 *   every update NaN; in bf16 too), takes the two ends, and growth and
 *   backoff stop at them (a clean step at the top, a skipped one at the
 *   bottom); a bf16 step at the smallest scale leaves finite parameters;
 * - dlrt_trainer_epoch returns DLRT_ERR_DIVERGED, naming the update and the
 *   likely cause, for a learning rate of 1e30 (Adam, SGD, bf16), a schedule
 *   that takes the rate beyond a float, a weight decay of 1e5, and fp16 whose
 *   forward pass overflows on DLRT_DIVERGED_SKIPS loss-scaled updates in a
 *   row; the evaluation after the NaN update is DLRT_ERR_DIVERGED too;
 * - an fp16 run whose first updates overflow at a scale of 2^24 (finite
 *   loss: the scaler's job) trains on, with a finite mean loss;
 * - a checkpoint whose optimizer.step is -1 never trains on silently: the
 *   load refuses it or the first epoch stops as diverged.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

enum { ROWS = 4, FEATURES = 8, CLASSES = 3, IMAGES = 640, BATCH = 32 };

/* ---------------------------------------------------------------- loss scaler */

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *labels, *w;
} tiny;

static void tiny_free(tiny *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
  memset(n, 0, sizeof *n);
}

/* x (ROWS x FEATURES) -> linear -> cross-entropy, SGD lr 0.1, in `precision`;
 * x holds `value` in its first element (inf: a planted overflow). */
static int tiny_make(dlrt_device_t *dev, dlrt_dtype precision, float value, tiny *n) {
  memset(n, 0, sizeof *n);
  int rc = dlrt_graph_create(&n->g);
  if (rc < 0) return rc;
  if ((rc = dlrt_graph_set_precision(n->g, precision)) < 0) return rc;
  int64_t xs[2] = {ROWS, FEATURES}, ls[1] = {ROWS}, ws[2] = {CLASSES, FEATURES};
  n->x = dlrt_input(n->g, "x", DLRT_F32, 2, xs);
  n->labels = dlrt_input(n->g, "labels", DLRT_I32, 1, ls);
  n->w = dlrt_param(n->g, "w", 2, ws, DLRT_INIT_FAN_IN_UNIFORM, FEATURES, 0);
  dlrt_tensor_t *loss = dlrt_cross_entropy(n->g, dlrt_linear(n->g, n->x, n->w, NULL),
                                           n->labels, 0.0f);
  dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  sgd.lr = 0.1f;
  if ((rc = dlrt_graph_status(n->g)) < 0 || (rc = dlrt_graph_backward(n->g, loss)) < 0 ||
      (rc = dlrt_graph_optimize(n->g, &sgd)) < 0 ||
      (rc = dlrt_exec_create(n->g, dev, 3, &n->e)) < 0)
    return rc;
  float x[ROWS * FEATURES];
  int32_t labels[ROWS];
  for (int i = 0; i < ROWS * FEATURES; i++) x[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < ROWS; i++) labels[i] = i % CLASSES;
  x[0] = value;
  if ((rc = dlrt_exec_write(n->e, n->x, x, sizeof x)) < 0) return rc;
  return dlrt_exec_write(n->e, n->labels, labels, sizeof labels);
}

/* The loss scaler with init_scale `scale` and the other settings given. */
static dlrt_loss_scaler scaler(float scale, float growth, int interval) {
  dlrt_loss_scaler s = dlrt_loss_scaler_defaults();
  s.init_scale = scale;
  s.growth_factor = growth;
  s.growth_interval = interval;
  return s;
}

/* 1 when every parameter element is finite. */
static int weights_finite(tiny *n) {
  float w[CLASSES * FEATURES];
  if (dlrt_exec_read(n->e, n->w, w, sizeof w) < 0) return 0;
  for (int i = 0; i < CLASSES * FEATURES; i++)
    if (!isfinite(w[i])) return 0;
  return 1;
}

static void scale_range(dlrt_device_t *dev, const char *spec) {
  tiny n;
  dlrt_loss_scale_state st;
  if (!tap_check(tiny_make(dev, DLRT_F32, 0.25f, &n), "%s: a small fp32 model builds", spec)) {
    tiny_free(&n);
    return;
  }
  const float refused[] = {1e-45f, DLRT_LOSS_SCALE_MIN / 2, DLRT_LOSS_SCALE_MAX * 2, NAN,
                           INFINITY};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    dlrt_loss_scaler s = scaler(refused[i], 2, 2000);
    int rc = dlrt_exec_set_loss_scaler(n.e, &s);
    is_status(rc, DLRT_ERR_INVALID_ARG, "%s: an initial scale of %g is refused", spec,
              refused[i]);
    ok(rc != DLRT_ERR_INVALID_ARG || strstr(dlrt_last_error(), "2^-64 to 2^64"),
       "%s: ... and the message gives the range: %s", spec, dlrt_last_error());
  }
  /* Growth stops at the top: a clean step at 2^64 with growth every step. */
  dlrt_loss_scaler top = scaler(DLRT_LOSS_SCALE_MAX, 2, 1);
  tap_check(dlrt_exec_set_loss_scaler(n.e, &top), "%s: the largest scale is taken", spec);
  tap_check(dlrt_exec_run(n.e, DLRT_RUN_TRAIN), "%s: a clean fp32 step at scale 2^64", spec);
  dlrt_exec_loss_scale(n.e, &st);
  ok(st.skipped_steps == 0 && st.scale == DLRT_LOSS_SCALE_MAX,
     "%s: growth stops at 2^64: scale %g, %lld skipped", spec, st.scale,
     (long long)st.skipped_steps);
  ok(weights_finite(&n), "%s: the update at scale 2^64 left finite weights", spec);
  tiny_free(&n);

  /* Backoff stops at the bottom: a planted inf skips the step. */
  if (!tap_check(tiny_make(dev, DLRT_F32, INFINITY, &n), "%s: a model fed an inf", spec)) {
    tiny_free(&n);
    return;
  }
  dlrt_loss_scaler bottom = scaler(DLRT_LOSS_SCALE_MIN, 2, 2000);
  tap_check(dlrt_exec_set_loss_scaler(n.e, &bottom), "%s: the smallest scale is taken", spec);
  tap_check(dlrt_exec_run(n.e, DLRT_RUN_TRAIN), "%s: a step with a planted inf", spec);
  dlrt_exec_loss_scale(n.e, &st);
  ok(st.skipped_steps == 1 && st.scale == DLRT_LOSS_SCALE_MIN,
     "%s: the step is skipped and backoff stops at 2^-64: scale %g, %lld skipped", spec,
     st.scale, (long long)st.skipped_steps);
  ok(weights_finite(&n), "%s: the skipped step left the weights finite", spec);
  tiny_free(&n);

  /* bf16: the smallest scale trains; 1e-45 (1 / scale = inf) is refused. */
  if (!tap_check(tiny_make(dev, DLRT_BF16, 0.25f, &n), "%s: a small bf16 model builds", spec)) {
    tiny_free(&n);
    return;
  }
  dlrt_loss_scaler tinyscale = scaler(1e-45f, 2, 2000);
  is_status(dlrt_exec_set_loss_scaler(n.e, &tinyscale), DLRT_ERR_INVALID_ARG,
            "%s: bf16: a scale of 1e-45 is refused", spec);
  tap_check(dlrt_exec_set_loss_scaler(n.e, &bottom), "%s: bf16: the smallest scale is taken",
            spec);
  tap_check(dlrt_exec_run(n.e, DLRT_RUN_TRAIN), "%s: bf16: a step at scale 2^-64", spec);
  dlrt_exec_loss_scale(n.e, &st);
  ok(st.skipped_steps == 0 && weights_finite(&n),
     "%s: bf16: the step at 2^-64 is made and the weights stay finite (%lld skipped)", spec,
     (long long)st.skipped_steps);
  tiny_free(&n);
}

/* ---------------------------------------------------------------- divergence */

static dlrt_dataset data;
static char dir[256];

static dlrt_trainer_config config(dlrt_optimizer_kind kind, float lr) {
  dlrt_trainer_config c = {.model = "mlp", .batch = BATCH, .seed = 5,
                           .opt = dlrt_optimizer_defaults(kind)};
  c.opt.lr = lr;
  return c;
}

/* One epoch of config c: its status, and the trainer's message in msg. */
static int epoch(dlrt_device_t *dev, const dlrt_trainer_config *c, const char *resume,
                 char *msg, size_t size, dlrt_epoch_stats *st, int *evaluated) {
  dlrt_trainer_t *t;
  msg[0] = '\0';
  int rc = dlrt_trainer_create(dev, c, 28, 28, 10, &t);
  if (rc == DLRT_OK && resume) rc = dlrt_trainer_load(t, resume, NULL);
  if (rc == DLRT_OK) {
    rc = dlrt_trainer_epoch(t, &data, 0, NULL, NULL, st);
    snprintf(msg, size, "%s", dlrt_last_error());
    if (evaluated) {
      dlrt_epoch_stats ev;
      *evaluated = dlrt_trainer_evaluate(t, &data, &ev);
    }
  } else {
    snprintf(msg, size, "%s", dlrt_last_error());
  }
  dlrt_trainer_destroy(t);
  return rc;
}

/* A run that must stop as diverged, with `cause` in its message. */
static void must_diverge(dlrt_device_t *dev, const char *spec, const char *what,
                         const dlrt_trainer_config *c, const char *cause) {
  char msg[2048];
  dlrt_epoch_stats st;
  int evaluated = DLRT_OK;
  int rc = epoch(dev, c, NULL, msg, sizeof msg, &st, &evaluated);
  is_status(rc, DLRT_ERR_DIVERGED, "%s: %s: the epoch stops as diverged", spec, what);
  ok(strstr(msg, "diverged at update") && strstr(msg, cause),
     "%s: %s: the message names the update and '%s': %s", spec, what, cause, msg);
  if (c->precision != DLRT_F16)
    is_status(evaluated, DLRT_ERR_DIVERGED, "%s: %s: the evaluation after it is diverged too",
              spec, what);
}

static void divergence(dlrt_device_t *dev, const char *spec) {
  dlrt_trainer_config c = config(DLRT_OPT_ADAM, 1e30f);
  must_diverge(dev, spec, "adam lr 1e30", &c, "the learning rate 1e+30");
  c = config(DLRT_OPT_SGD, 1e30f);
  must_diverge(dev, spec, "sgd lr 1e30", &c, "the learning rate 1e+30");
  c = config(DLRT_OPT_ADAM, 1e30f);
  c.precision = DLRT_BF16;
  must_diverge(dev, spec, "bf16 adam lr 1e30", &c, "the learning rate 1e+30");
  c = config(DLRT_OPT_ADAM, 1e-3f);
  c.schedule = DLRT_LR_STEP, c.step_size = 1, c.gamma = 1e30f;
  must_diverge(dev, spec, "schedule step:1:1e30", &c, "the schedule raised the learning rate");
  c = config(DLRT_OPT_SGD, 0.01f);
  c.opt.weight_decay = 1e5f;
  must_diverge(dev, spec, "sgd weight decay 1e5", &c, "the weight decay 100000");

  /* fp16: the forward pass overflows after the first update; the scaler
   * skips what follows until DLRT_DIVERGED_SKIPS in a row. */
  c = config(DLRT_OPT_ADAM, 1e30f);
  c.precision = DLRT_F16;
  must_diverge(dev, spec, "fp16 adam lr 1e30", &c, "updates in a row, each skipped");

  /* The scaler's own skips are no divergence: a scale of 2^24 overflows the
   * first gradients, the loss stays finite, and training goes on. */
  c = config(DLRT_OPT_ADAM, 1e-3f);
  c.precision = DLRT_F16;
  c.loss_scaler = scaler(16777216.0f, 0, 0);
  char msg[2048];
  dlrt_epoch_stats st;
  int rc = epoch(dev, &c, NULL, msg, sizeof msg, &st, NULL);
  is_status(rc, DLRT_OK, "%s: fp16 from a scale of 2^24 trains the epoch", spec);
  ok(rc != DLRT_OK || (st.skipped_steps > 0 && st.skipped_steps < st.steps &&
                       isfinite(st.loss) && st.loss > 0),
     "%s: ... skipping %lld of %lld updates (overflowed gradients), mean loss %g", spec,
     (long long)st.skipped_steps, (long long)st.steps, st.loss);
}

/* A checkpoint whose optimizer.step reads -1 (Adam's bias correction then
 * divides by 1 - beta^0 = 0). */
static int corrupt_checkpoint(dlrt_device_t *dev, const char *good, const char *bad) {
  dlrt_trainer_config c = config(DLRT_OPT_ADAM, 1e-3f);
  dlrt_trainer_t *t;
  dlrt_epoch_stats st;
  int rc = dlrt_trainer_create(dev, &c, 28, 28, 10, &t);
  if (rc == DLRT_OK) rc = dlrt_trainer_epoch(t, &data, 0, NULL, NULL, &st);
  if (rc == DLRT_OK) rc = dlrt_trainer_save(t, good, 1);
  dlrt_trainer_destroy(t);
  dlrt_host_tensor *tensors;
  char **meta;
  int n, found = 0;
  if (rc == DLRT_OK) rc = dlrt_safetensors_load(good, &tensors, &n, &meta);
  if (rc < 0) return rc;
  for (int i = 0; i < n; i++)
    if (strcmp(tensors[i].name, "optimizer.step") == 0 && tensors[i].bytes == 4) {
      int32_t minus_one = -1;
      memcpy(tensors[i].data, &minus_one, 4);
      found = 1;
    }
  rc = found ? dlrt_safetensors_save(bad, tensors, n, (const char *const *)meta)
             : DLRT_ERR_NOT_FOUND;
  dlrt_safetensors_free(tensors, n, meta);
  return rc;
}

static void corrupt_step(dlrt_device_t *dev, const char *spec) {
  char good[512], bad[512], msg[2048];
  snprintf(good, sizeof good, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/step-minus-one.safetensors", dir);
  if (!tap_check(corrupt_checkpoint(dev, good, bad), "%s: a checkpoint with optimizer.step -1 "
                 "is written", spec))
    return;
  dlrt_trainer_config c = config(DLRT_OPT_ADAM, 1e-3f);
  dlrt_trainer_t *t;
  dlrt_epoch_stats st;
  int load = DLRT_ERR_STATE, trained = DLRT_ERR_STATE;
  if (dlrt_trainer_create(dev, &c, 28, 28, 10, &t) == DLRT_OK) {
    load = dlrt_trainer_load(t, bad, NULL);
    snprintf(msg, sizeof msg, "%s", dlrt_last_error());
    if (load == DLRT_OK) {
      trained = dlrt_trainer_epoch(t, &data, 1, NULL, NULL, &st);
      snprintf(msg, sizeof msg, "%s", dlrt_last_error());
    }
    dlrt_trainer_destroy(t);
  }
  ok((load < 0 && load != DLRT_ERR_STATE) || trained == DLRT_ERR_DIVERGED,
     "%s: resuming from it is refused or stops as diverged (load %s, epoch %s): %s", spec,
     dlrt_err_name(load), load == DLRT_OK ? dlrt_err_name(trained) : "not run", msg);
  ok(load < 0 || strstr(msg, "optimizer.step is corrupt"),
     "%s: ... and the message blames the checkpoint's optimizer.step", spec);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  scale_range(dev, spec);
  divergence(dev, spec);
  corrupt_step(dev, spec);
}

int main(void) {
  if (dlrt_init() < 0 || dlrt_set_cpu_threads(2) < 0) bail_out("%s", dlrt_last_error());
  is_str(dlrt_err_name(DLRT_ERR_DIVERGED), "DLRT_ERR_DIVERGED", "the status has its name");
  ok(strstr(dlrt_strerror(DLRT_ERR_DIVERGED), "diverged") != NULL, "and its message: %s",
     dlrt_strerror(DLRT_ERR_DIVERGED));
  if (dlrt_dataset_generate(IMAGES, 10, 9, &data) < 0) bail_out("%s", dlrt_last_error());
  tap_tempdir("test-diverge", dir, sizeof dir);
  tap_for_each_device(run_device, NULL);
  tap_remove_tree(dir);
  dlrt_dataset_free(&data);
  dlrt_shutdown();
  return done_testing();
}
