/* test-schedule.c — learning-rate schedules (dlrt_lr_at) and gradient
 * clipping by global norm (dlrt_exec_set_clip_norm) against host references,
 * the clipping on every device present (tap_for_each_device). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

static int near(double got, double want) { return fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want)); }

static void check_schedules(void) {
  dlrt_trainer_config c = {.opt = dlrt_optimizer_defaults(DLRT_OPT_SGD)};
  c.opt.lr = 0.5f;
  int good = 1;
  for (int64_t s = 0; s < 100; s++) good &= near(dlrt_lr_at(&c, s), 0.5);
  ok(good, "constant: 0.5 at every step");

  c.schedule = DLRT_LR_STEP, c.step_size = 10, c.gamma = 0.1f;
  ok(near(dlrt_lr_at(&c, 0), 0.5) && near(dlrt_lr_at(&c, 9), 0.5) &&
         near(dlrt_lr_at(&c, 10), 0.05) && near(dlrt_lr_at(&c, 25), 0.005),
     "step: times 0.1 every 10 steps (%g %g %g %g)", dlrt_lr_at(&c, 0), dlrt_lr_at(&c, 9),
     dlrt_lr_at(&c, 10), dlrt_lr_at(&c, 25));

  c.schedule = DLRT_LR_COSINE, c.total_steps = 100;
  ok(near(dlrt_lr_at(&c, 0), 0.5) && near(dlrt_lr_at(&c, 50), 0.25) &&
         near(dlrt_lr_at(&c, 25), 0.25 * (1 + cos(M_PI / 4))) && dlrt_lr_at(&c, 100) == 0.0f &&
         dlrt_lr_at(&c, 500) == 0.0f,
     "cosine: 0.5 -> 0.25 at the middle -> 0 at the end (%g %g %g)", dlrt_lr_at(&c, 0),
     dlrt_lr_at(&c, 50), dlrt_lr_at(&c, 100));

  c.warmup_steps = 10;
  ok(near(dlrt_lr_at(&c, 0), 0.05) && near(dlrt_lr_at(&c, 4), 0.25) &&
         near(dlrt_lr_at(&c, 9), 0.5) && near(dlrt_lr_at(&c, 10), 0.5) &&
         near(dlrt_lr_at(&c, 55), 0.25),
     "warm-up: linear over 10 steps, then cosine over the other 90 (%g %g %g)",
     dlrt_lr_at(&c, 0), dlrt_lr_at(&c, 9), dlrt_lr_at(&c, 55));
  ok(dlrt_lr_at(NULL, 3) == 0.0f, "NULL config gives 0");
}

/* One SGD step on loss = sum(w * r) (so dL/dw = r) with clipping: the step
 * must be lr * r * min(1, max_norm / (|r| + 1e-6)). A gradient of 600,001
 * elements has its squares summed in three chunks (the executor's 1 MiB
 * temporary). */
static void check_clip_size(dlrt_device_t *dev, const char *spec, int64_t n) {
  int64_t shape[1] = {n};
  float *w0 = malloc((size_t)n * sizeof *w0), *r = malloc((size_t)n * sizeof *r);
  float *w1 = malloc((size_t)n * sizeof *w1);
  double norm = 0;
  for (int64_t i = 0; i < n; i++) {
    w0[i] = 0.01f * (float)(i % 17) - 0.08f;
    r[i] = 0.5f * sinf((float)i);
    norm += (double)r[i] * r[i];
  }
  norm = sqrt(norm);
  size_t bytes = (size_t)n * sizeof(float);
  for (int pass = 0; pass < 2; pass++) {
    float max_norm = pass == 0 ? 1.0f : 1000.0f; /* clipped, then not */
    dlrt_graph_t *g;
    dlrt_exec_t *e = NULL;
    dlrt_graph_create(&g);
    dlrt_tensor_t *w = dlrt_param(g, "w", 1, shape, DLRT_INIT_ZEROS, 0, 0);
    dlrt_tensor_t *ri = dlrt_input(g, "r", DLRT_F32, 1, shape);
    dlrt_tensor_t *loss = dlrt_sum(g, dlrt_mul(g, w, ri));
    dlrt_optimizer o = dlrt_optimizer_defaults(DLRT_OPT_SGD);
    o.lr = 0.1f;
    int rc = dlrt_graph_backward(g, loss);
    if (rc == DLRT_OK) rc = dlrt_graph_optimize(g, &o);
    if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 1, &e);
    if (rc == DLRT_OK) rc = dlrt_exec_set_clip_norm(e, max_norm);
    if (rc == DLRT_OK) rc = dlrt_exec_write(e, w, w0, bytes);
    if (rc == DLRT_OK) rc = dlrt_exec_write(e, ri, r, bytes);
    if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
    if (rc == DLRT_OK) rc = dlrt_exec_read(e, w, w1, bytes);
    if (!tap_check(rc, "%s: one clipped SGD step, %lld weights", spec, (long long)n)) {
      dlrt_exec_destroy(e);
      dlrt_graph_destroy(g);
      continue;
    }
    double coef = max_norm / (norm + 1e-6), worst = 0;
    if (coef > 1) coef = 1;
    for (int64_t i = 0; i < n; i++) {
      double want = w0[i] - 0.1 * r[i] * coef;
      worst = fmax(worst, fabs(w1[i] - want));
    }
    ok(worst < 1e-6, "%s: %lld weights, max norm %g (gradient norm %.3f): max |w - reference| "
       "= %.2e", spec, (long long)n, max_norm, norm, worst);
    dlrt_exec_destroy(e);
    dlrt_graph_destroy(g);
  }
  free(w0);
  free(r);
  free(w1);
}

static void check_clip(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  check_clip_size(dev, spec, 300);
  check_clip_size(dev, spec, 600001);
}

/* A chain of elementwise ops runs in place: each output takes over the
 * storage of the intermediate it reads, so the planned peak holds one
 * intermediate, not two; the measured peak agrees; the values are right. */
static void check_in_place(void) {
  enum { N = 4096 }; /* 16 KiB, a multiple of the allocator's 512-byte blocks */
  int64_t shape[1] = {N};
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_device_t *dev;
  dlrt_device_open("cpu", &dev);
  dlrt_graph_create(&g);
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 1, shape);
  dlrt_tensor_t *y = dlrt_scale(g, x, 2.0f);   /* x is an input: not taken over */
  y = dlrt_relu(g, dlrt_scale(g, y, -1.0f));   /* these three run in place */
  y = dlrt_keep(g, dlrt_scale(g, dlrt_tanh(g, y), 3.0f));
  int rc = dlrt_exec_create(g, dev, 1, &e);
  float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)(i % 7) - 3.0f;
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, in, sizeof in);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, y, out, sizeof out);
  dlrt_exec_info info;
  if (rc == DLRT_OK) rc = dlrt_exec_info_get(e, &info);
  if (tap_check(rc, "in place: a chain of elementwise ops runs")) {
    double worst = 0;
    for (int i = 0; i < N; i++) {
      double v = -2.0 * in[i];
      worst = fmax(worst, fabs(out[i] - 3.0 * tanh(v > 0 ? v : 0)));
    }
    ok(worst < 1e-5, "in place: values right (max error %.2e)", worst);
    /* x and the kept output persist (32 KiB); one 16 KiB intermediate at a time. */
    is_u64(info.planned_peak_bytes, 3 * N * sizeof(float), "in place: planned peak is x, the "
           "result and one intermediate");
    is_u64(info.measured_peak_bytes, info.planned_peak_bytes, "in place: measured peak equals "
           "the planned one");
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

int main(void) {
  check_schedules();
  check_in_place();
  tap_for_each_device(check_clip, NULL);
  dlrt_shutdown();
  return done_testing();
}
