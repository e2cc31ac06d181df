/* test-norm.c — batch and layer normalisation: gradients against central
 * differences, running statistics and their use when evaluating, on every
 * device present (tap_for_each_device). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"

enum { BN_IMAGES, BN_FEATURES, LAYER };
static const char *const kind_names[] = {"batch_norm N x C x H x W", "batch_norm N x C",
                                         "layer_norm"};

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *gamma, *beta, *y, *loss, *grads[3];
} case_graph;

static int build(case_graph *c, int kind, dlrt_device_t *dev) {
  int64_t image[4] = {3, 2, 3, 3}, feats[2] = {4, 5}, ch[1] = {2}, f[1] = {5};
  memset(c, 0, sizeof *c);
  dlrt_graph_create(&c->g);
  dlrt_graph_t *g = c->g;
  c->x = dlrt_param(g, "x", kind == BN_IMAGES ? 4 : 2, kind == BN_IMAGES ? image : feats,
                    DLRT_INIT_FAN_IN_UNIFORM, 1, 1);
  const int64_t *ps = kind == BN_IMAGES ? ch : f;
  c->gamma = dlrt_param(g, "norm.weight", 1, ps, DLRT_INIT_FAN_IN_UNIFORM, 1, 1);
  c->beta = dlrt_param(g, "norm.bias", 1, ps, DLRT_INIT_FAN_IN_UNIFORM, 1, 1);
  c->y = kind == LAYER ? dlrt_layer_norm(g, c->x, c->gamma, c->beta, 1e-5f)
                       : dlrt_batch_norm(g, c->x, c->gamma, c->beta, 0.1f, 1e-5f);
  dlrt_keep(g, c->y);
  int64_t shape[DLRT_MAX_DIMS];
  int nd = c->y ? dlrt_tensor_shape(c->y, shape) : 0;
  dlrt_tensor_t *r = dlrt_input(g, "r", DLRT_F32, nd, shape);
  c->loss = dlrt_sum(g, dlrt_mul(g, c->y, r));
  int rc = dlrt_graph_backward(g, c->loss);
  dlrt_tensor_t *params[3] = {c->x, c->gamma, c->beta};
  for (int i = 0; i < 3 && rc == DLRT_OK; i++) c->grads[i] = dlrt_keep(g, dlrt_grad(g, params[i]));
  if (rc == DLRT_OK) rc = dlrt_graph_status(g);
  if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 3, &c->e);
  float rv[64];
  for (int i = 0; i < 64; i++) rv[i] = sinf(1.7f * (float)i);
  if (rc == DLRT_OK) rc = dlrt_exec_write(c->e, r, rv, (size_t)dlrt_tensor_numel(r) * 4);
  return rc;
}

static float loss_at(case_graph *c) {
  float l = NAN;
  if (dlrt_exec_run(c->e, DLRT_RUN_TRAIN) == DLRT_OK) dlrt_exec_read(c->e, c->loss, &l, 4);
  return l;
}

static void check_gradients(const char *spec, dlrt_device_t *dev, int kind) {
  case_graph c;
  if (!tap_check(build(&c, kind, dev), "%s: %s builds", spec, kind_names[kind])) goto out;
  dlrt_tensor_t *params[3] = {c.x, c.gamma, c.beta};
  double worst = 0;
  loss_at(&c);
  for (int k = 0; k < 3; k++) {
    int64_t m = dlrt_tensor_numel(params[k]);
    float v[64], grad[64];
    dlrt_exec_read(c.e, params[k], v, (size_t)m * 4);
    dlrt_exec_read(c.e, c.grads[k], grad, (size_t)m * 4);
    for (int64_t i = 0; i < m; i++) {
      /* fp32 central differences: h small enough for the curvature of a
       * normalisation over a handful of values, large enough for rounding. */
      const float h = 3e-3f, orig = v[i];
      v[i] = orig + h;
      dlrt_exec_write(c.e, params[k], v, (size_t)m * 4);
      float up = loss_at(&c);
      v[i] = orig - h;
      dlrt_exec_write(c.e, params[k], v, (size_t)m * 4);
      float down = loss_at(&c);
      v[i] = orig;
      dlrt_exec_write(c.e, params[k], v, (size_t)m * 4);
      double num = ((double)up - down) / (2.0 * h);
      double err = fabs(num - grad[i]) / fmax(1e-2, fmax(fabs(num), fabs(grad[i])));
      if (!(err <= worst)) worst = err;
    }
  }
  ok(worst < 2e-2, "%s: %s: gradients of x, gamma, beta match central differences "
     "(worst relative error %.2e)", spec, kind_names[kind], worst);
out:
  dlrt_exec_destroy(c.e);
  dlrt_graph_destroy(c.g);
}

/* One training run updates the running statistics by momentum 0.1 from
 * (0, 1); a forward-only run then normalises with them. */
static void check_running(const char *spec, dlrt_device_t *dev) {
  case_graph c;
  if (!tap_check(build(&c, BN_FEATURES, dev), "%s: batch_norm for running statistics", spec))
    goto out;
  float x[20], gamma[5], beta[5], y[20];
  dlrt_exec_read(c.e, c.x, x, sizeof x);
  dlrt_exec_read(c.e, c.gamma, gamma, sizeof gamma);
  dlrt_exec_read(c.e, c.beta, beta, sizeof beta);
  int rc = dlrt_exec_run(c.e, DLRT_RUN_TRAIN);
  if (rc == DLRT_OK) rc = dlrt_exec_run(c.e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(c.e, c.y, y, sizeof y);
  if (!tap_check(rc, "%s: train, then evaluate", spec)) goto out;
  double worst = 0;
  for (int f = 0; f < 5; f++) {
    double mean = 0, var = 0;
    for (int n = 0; n < 4; n++) mean += x[n * 5 + f] / 4.0;
    for (int n = 0; n < 4; n++) var += (x[n * 5 + f] - mean) * (x[n * 5 + f] - mean) / 3.0;
    double rm = 0.1 * mean, rv = 0.9 + 0.1 * var;
    for (int n = 0; n < 4; n++) {
      double want = (x[n * 5 + f] - rm) / sqrt(rv + 1e-5) * gamma[f] + beta[f];
      worst = fmax(worst, fabs(y[n * 5 + f] - want));
    }
  }
  ok(worst < 1e-5, "%s: evaluation uses running statistics updated with momentum 0.1 and "
     "the unbiased variance (max error %.2e)", spec, worst);
  dlrt_host_tensor *t = NULL;
  int n = 0, found = 0;
  if (dlrt_exec_export(c.e, 0, &t, &n) == DLRT_OK) {
    for (int i = 0; i < n; i++)
      found += strcmp(t[i].name, "norm.weight.running_mean") == 0 ||
               strcmp(t[i].name, "norm.weight.running_var") == 0;
    dlrt_safetensors_free(t, n, NULL);
  }
  is_int(found, 2, "%s: the running statistics are exported with the parameters", spec);
out:
  dlrt_exec_destroy(c.e);
  dlrt_graph_destroy(c.g);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  for (int k = BN_IMAGES; k <= LAYER; k++) check_gradients(spec, dev, k);
  check_running(spec, dev);
}

int main(void) {
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  return done_testing();
}
