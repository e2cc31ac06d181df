/*
 * test-grad-ops.c — the graph ops sub, div, tanh, sigmoid, GELU (exact and
 * its tanh form), softmax,
 * MSE, average pooling and dropout, on every device present
 * (tap_for_each_device): their gradients against central finite
 * differences (grad-check.c: every element, the same tolerance as
 * test-grad.c), the forward values of the activations and softmax against
 * host references in double, and dropout's masks: forward-only runs pass x
 * through, training runs zero about p of the elements and scale the rest by
 * 1 / (1 - p), the mask is the same in every training run without an
 * optimizer (so the finite differences are taken in training runs, with the
 * mask applied), changes with the step when there is one, differs between
 * dropout nodes, and is the same on every device as on the cpu for the same
 * seed. Also: the builders' refusals of bad shapes, windows and
 * probabilities.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "grad-check.h"
#include "tap.h"

/* ---------------------------------------------------------------- helpers */

enum { ACTIVATIONS = 4 };
static const char *const act_names[ACTIVATIONS] = {"tanh", "sigmoid", "gelu", "gelu_tanh"};

static dlrt_tensor_t *activation(dlrt_graph_t *g, int kind, dlrt_tensor_t *x) {
  return kind == 0   ? dlrt_tanh(g, x)
         : kind == 1 ? dlrt_sigmoid(g, x)
         : kind == 2 ? dlrt_gelu(g, x)
                     : dlrt_gelu_tanh(g, x);
}

/* GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
static double host_activation(int kind, double v) {
  return kind == 0   ? tanh(v)
         : kind == 1 ? 1.0 / (1.0 + exp(-v))
         : kind == 2 ? 0.5 * v * (1.0 + erf(v / sqrt(2.0)))
                     : 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

/* Softmax of each row of x (rows x cols) into y, in double. */
static void host_softmax(const float *x, double *y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    double m = xr[0], sum = 0;
    for (int64_t k = 1; k < cols; k++) m = fmax(m, xr[k]);
    for (int64_t k = 0; k < cols; k++) sum += y[r * cols + k] = exp(xr[k] - m);
    for (int64_t k = 0; k < cols; k++) y[r * cols + k] /= sum;
  }
}

/* Multiplies n values by f. */
static void scale_values(float *v, int64_t n, float f) {
  for (int64_t i = 0; i < n; i++) v[i] *= f;
}

/* The R of the last weighted() call, or NULL when the op failed to build. */
static const float *last_r(const gcase *c) {
  return c->ni ? (const float *)c->iv[c->ni - 1] : NULL;
}

/* ---------------------------------------------------------------- gradients */

/* sub and div with both operands parameters (|denominator| in [0.6, 1.5]),
 * and each with one parameter as both operands (gradients 0, summed from two
 * contributions). The loss is also checked against the host. */
static void test_sub_div(dlrt_device_t *dev) {
  int64_t s[2] = {3, 4};
  for (int k = 0; k < 4; k++) {
    int is_div = k & 1, same = k >= 2;
    gcase c;
    case_begin(&c, "%s%s", is_div ? "div" : "sub", same ? "(x, x)" : "");
    dlrt_tensor_t *a = cparam(&c, "x", 2, s, is_div && same ? VALUES_AWAY : VALUES_RANDOM);
    dlrt_tensor_t *b = same ? a : cparam(&c, "y", 2, s, is_div ? VALUES_AWAY : VALUES_RANDOM);
    float *av = c.pv[0], *bv = c.pv[c.np - 1];
    if (is_div)
      for (int i = 0; i < 12; i++) bv[i] = copysignf(fabsf(bv[i]) + 0.5f, bv[i]);
    dlrt_tensor_t *loss = weighted(&c, is_div ? dlrt_div(c.g, a, b) : dlrt_sub(c.g, a, b));
    const float *r = last_r(&c);
    if (r) {
      c.want_loss = 0;
      for (int i = 0; i < 12; i++)
        c.want_loss += (is_div ? (double)av[i] / bv[i] : (double)av[i] - bv[i]) * r[i];
    }
    case_check(&c, dev, loss);
  }
}

/* tanh, sigmoid and both GELUs of x in [-2.5, 2.5]. */
static void test_activations(dlrt_device_t *dev) {
  int64_t s[2] = {3, 4};
  for (int k = 0; k < ACTIVATIONS; k++) {
    gcase c;
    case_begin(&c, "%s", act_names[k]);
    dlrt_tensor_t *x = cparam(&c, "x", 2, s, VALUES_RANDOM);
    scale_values(c.pv[0], 12, 2.5f);
    case_check(&c, dev, weighted(&c, activation(c.g, k, x)));
  }
}

/* Softmax over rows of 5 and of 300 (more than a 256-wide work-group), and
 * of a 3-D tensor. Over 300 columns each output is about 1/300: R is
 * scaled by 20 so that the gradients stand well above the check's 1e-2
 * floor. */
static void test_softmax(dlrt_device_t *dev) {
  static const int64_t shapes[][3] = {{3, 5, 0}, {2, 300, 0}, {2, 3, 7}};
  for (int k = 0; k < 3; k++) {
    const int64_t *s = shapes[k];
    int nd = s[2] ? 3 : 2;
    gcase c;
    case_begin(&c, "softmax %lldx%lld%s", (long long)s[0], (long long)s[1],
               nd == 3 ? "x7" : "");
    dlrt_tensor_t *x = cparam(&c, "x", nd, s, VALUES_RANDOM);
    int64_t n = numel_of(nd, s);
    scale_values(c.pv[0], n, s[1] > 256 ? 3.0f : 2.0f);
    dlrt_tensor_t *loss = weighted(&c, dlrt_softmax(c.g, x));
    if (s[1] > 256 && last_r(&c)) scale_values(c.iv[c.ni - 1], n, 20.0f);
    case_check(&c, dev, loss);
  }
}

/* MSE as the loss itself, both operands parameters, against the host. */
static void test_mse(dlrt_device_t *dev) {
  static const int64_t shapes[][4] = {{3, 4}, {2, 3, 2, 2}};
  for (int k = 0; k < 2; k++) {
    int nd = k ? 4 : 2;
    int64_t n = numel_of(nd, shapes[k]);
    gcase c;
    case_begin(&c, "mse %s", k ? "2x3x2x2" : "3x4");
    dlrt_tensor_t *a = cparam(&c, "a", nd, shapes[k], VALUES_RANDOM);
    dlrt_tensor_t *b = cparam(&c, "b", nd, shapes[k], VALUES_RANDOM);
    c.want_loss = 0;
    for (int64_t i = 0; i < n; i++)
      c.want_loss += ((double)c.pv[0][i] - c.pv[1][i]) * ((double)c.pv[0][i] - c.pv[1][i]) / n;
    case_check(&c, dev, dlrt_mse(c.g, a, b));
  }
}

/* Tiling windows (k2 s2), overlapping ones (k3 s2, with a row or column left
 * over), and windows with gaps between them (k2 s3); the loss against the
 * host. */
static void test_avg_pool2d(dlrt_device_t *dev) {
  static const int64_t configs[][6] = {
      {1, 2, 4, 4, 2, 2}, {2, 1, 5, 5, 3, 2}, {1, 2, 5, 6, 3, 2}, {1, 1, 5, 7, 2, 3}};
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    const int64_t *k = configs[i];
    gcase c;
    case_begin(&c, "avg_pool2d x %lldx%lldx%lldx%lld k%lld stride %lld", (long long)k[0],
               (long long)k[1], (long long)k[2], (long long)k[3], (long long)k[4],
               (long long)k[5]);
    dlrt_tensor_t *x = cparam(&c, "x", 4, k, VALUES_RANDOM);
    dlrt_tensor_t *loss = weighted(&c, dlrt_avg_pool2d(c.g, x, (int)k[4], (int)k[5]));
    const float *xv = c.pv[0], *r = last_r(&c);
    int64_t planes = k[0] * k[1], h = k[2], w = k[3], kk = k[4], st = k[5];
    int64_t oh = (h - kk) / st + 1, ow = (w - kk) / st + 1;
    if (r) c.want_loss = 0;
    for (int64_t p = 0; r && p < planes; p++)
      for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
          double a = 0;
          for (int64_t ky = 0; ky < kk; ky++)
            for (int64_t kx = 0; kx < kk; kx++)
              a += xv[(p * h + oy * st + ky) * w + ox * st + kx];
          c.want_loss += a / (double)(kk * kk) * r[(p * oh + oy) * ow + ox];
        }
    case_check(&c, dev, loss);
  }
}

/* Dropout p = 0.3, alone and twice in a row (each node its own mask, the
 * gradient masked like the output). Finite differences are taken in
 * training runs: without an optimizer every one draws the same mask. */
static void test_dropout_grad(dlrt_device_t *dev) {
  int64_t s[2] = {4, 8};
  for (int twice = 0; twice < 2; twice++) {
    gcase c;
    case_begin(&c, twice ? "dropout(dropout(x, 0.3), 0.5)" : "dropout p 0.3");
    c.fd_mode = DLRT_RUN_TRAIN;
    dlrt_tensor_t *x = cparam(&c, "x", 2, s, VALUES_RANDOM);
    dlrt_tensor_t *y = dlrt_dropout(c.g, x, 0.3f);
    if (twice) y = dlrt_dropout(c.g, y, 0.5f);
    case_check(&c, dev, weighted(&c, y));
  }
}

/* The new ops inside a convolution stack, batch 2, where the graph stores
 * images channel-major: conv2d -> gelu -> dropout -> avg_pool2d k3 s2 ->
 * sub a plain N x C x H x W parameter -> tanh; and softmax of a conv2d
 * output (its last axis is the image width). */
static void test_conv_stack_ops(dlrt_device_t *dev) {
  int64_t xs[4] = {2, 2, 5, 5}, ws[4] = {3, 2, 3, 3}, qs[4] = {2, 3, 2, 2};
  gcase c;
  case_begin(&c, "conv2d -> gelu -> dropout -> avg_pool2d -> sub -> tanh");
  c.fd_mode = DLRT_RUN_TRAIN;
  dlrt_graph_t *g = c.g;
  dlrt_tensor_t *x = cparam(&c, "x", 4, xs, VALUES_RANDOM);
  dlrt_tensor_t *w = cparam(&c, "w", 4, ws, VALUES_INITIALISER);
  dlrt_tensor_t *q = cparam(&c, "q", 4, qs, VALUES_RANDOM);
  dlrt_tensor_t *y = dlrt_gelu(g, dlrt_conv2d(g, x, w, NULL, 1, 1, 1));
  y = dlrt_avg_pool2d(g, dlrt_dropout(g, y, 0.3f), 3, 2);
  case_check(&c, dev, weighted(&c, dlrt_tanh(g, dlrt_sub(g, y, q))));

  case_begin(&c, "conv2d -> softmax");
  g = c.g;
  x = cparam(&c, "x", 4, xs, VALUES_RANDOM);
  w = cparam(&c, "w", 4, ws, VALUES_INITIALISER);
  case_check(&c, dev, weighted(&c, dlrt_softmax(g, dlrt_conv2d(g, x, w, NULL, 1, 1, 1))));
}

/* ---------------------------------------------------------------- forward values */

/* tanh, sigmoid, both GELUs and softmax of 2 x 300 values in [-6, 6], and
 * softmax of 3 x 5, against double on the host: |got - want| <= 1e-5 |want|;
 * for the GELUs <= 1e-5 max(|want|, |x| / 10): for x below about -1.3
 * float's 1 + erf(x / sqrt 2) and 1 + tanh(u) cancel (as in PyTorch),
 * leaving an error of about |x| 1e-7 (at x = -6 the float result is 0, the
 * true one -6e-9, or -1e-10 for the tanh form). */
static void test_forward_values(dlrt_device_t *dev) {
  enum { R = 2, C = 300, R2 = 3, C2 = 5 };
  const char *spec = dlrt_device_spec(dev);
  int64_t xs[2] = {R, C}, x2s[2] = {R2, C2};
  float xv[R * C], x2v[R2 * C2], got[R * C];
  double want[R * C];
  uint32_t rng = 77;
  for (int i = 0; i < R * C; i++) xv[i] = uniform(&rng, -6.0f, 6.0f);
  xv[0] = 0.0f, xv[1] = 1e-3f, xv[2] = -1e-3f;
  for (int i = 0; i < R2 * C2; i++) x2v[i] = uniform(&rng, -3.0f, 3.0f);
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, xs);
  dlrt_tensor_t *x2 = dlrt_input(g, "x2", DLRT_F32, 2, x2s);
  enum { SOFTMAX = ACTIVATIONS, SOFTMAX2, OUTPUTS };
  dlrt_tensor_t *y[OUTPUTS];
  for (int k = 0; k < ACTIVATIONS; k++) y[k] = dlrt_keep(g, activation(g, k, x));
  y[SOFTMAX] = dlrt_keep(g, dlrt_softmax(g, x));
  y[SOFTMAX2] = dlrt_keep(g, dlrt_softmax(g, x2));
  dlrt_exec_t *e = NULL;
  int st = dlrt_graph_status(g);
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, sizeof xv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, x2, x2v, sizeof x2v);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (tap_check(st, "%s: a forward run of tanh, sigmoid, the gelus and softmax", spec)) {
    for (int k = 0; k < OUTPUTS; k++) {
      int64_t n = k < SOFTMAX2 ? R * C : R2 * C2;
      int gelu = k == 2 || k == 3;
      st = dlrt_exec_read(e, y[k], got, (size_t)n * sizeof *got);
      if (k < ACTIVATIONS)
        for (int64_t i = 0; i < n; i++) want[i] = host_activation(k, xv[i]);
      else
        host_softmax(k == SOFTMAX ? xv : x2v, want, k == SOFTMAX ? R : R2,
                     k == SOFTMAX ? C : C2);
      double worst = 0; /* error / bound */
      int64_t at = 0;
      for (int64_t i = 0; i < n && st == DLRT_OK; i++) {
        double err = fabs(got[i] - want[i]);
        double bound = 1e-5 * (gelu ? fmax(fabs(want[i]), 0.1 * fabs(xv[i])) : fabs(want[i]));
        double q = err > 0 ? err / bound : 0;
        if (!(q <= worst)) at = i;
        worst = worse(worst, q);
      }
      const char *name = k < ACTIVATIONS ? act_names[k] : "softmax";
      if (!ok(st == DLRT_OK && worst <= 1.0, "%s: %s %s matches the host in double: worst "
              "error %.1e %s", spec, name, k < SOFTMAX2 ? "2x300" : "3x5",
              worst * 1e-5,
              gelu ? "relative to max(|want|, |x| / 10)" : "relative"))
        diag("element %lld (x %.9g): got %.9g, want %.9g", (long long)at,
             (k == SOFTMAX2 ? x2v : xv)[at], got[at], want[at]);
    }
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

/* ---------------------------------------------------------------- dropout masks */

enum { DROP_ROWS = 64, DROP_COLS = 64, DROP_N = DROP_ROWS * DROP_COLS };
#define DROP_P 0.3f

/* +-[0.25, 1.25]: never 0, so that a 0 output is a dropped element. */
static void nonzero_values(float *v, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    float m = uniform(&seed, 0.25f, 1.25f);
    v[i] = uniform(&seed, -1.0f, 1.0f) < 0 ? -m : m;
  }
}

/* Elements dropped in one mask and kept in the other. */
static int64_t mask_differences(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += (a[i] == 0.0f) != (b[i] == 0.0f);
  return d;
}

/* |count - n q| within 3 standard deviations of a binomial(n, q). */
static int within_3_sigma(int64_t count, int64_t n, double q) {
  return fabs((double)count - (double)n * q) <= 3.0 * sqrt((double)n * q * (1.0 - q));
}

/* Two dropout nodes on one 64 x 64 parameter x, seed 7, no optimizer.
 * Leaves the first node's training output in train_y (for the comparison
 * between devices) and returns whether it is there. */
static int test_dropout_values(dlrt_device_t *dev, float *train_y) {
  const char *spec = dlrt_device_spec(dev);
  const float p = DROP_P, scale = 1.0f / (1.0f - DROP_P);
  int64_t s[2] = {DROP_ROWS, DROP_COLS};
  float *xv = malloc(DROP_N * sizeof *xv), *y = malloc(DROP_N * sizeof *y),
        *y2 = malloc(DROP_N * sizeof *y2);
  nonzero_values(xv, DROP_N, 31);
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *x = dlrt_param(g, "x", 2, s, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *d1 = dlrt_keep(g, dlrt_dropout(g, x, p));
  dlrt_tensor_t *d2 = dlrt_keep(g, dlrt_dropout(g, x, p));
  dlrt_exec_t *e = NULL;
  dlrt_exec_info info = {0};
  int st = dlrt_graph_backward(g, dlrt_sum(g, dlrt_add(g, d1, d2))), have = 0;
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 7, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, DROP_N * sizeof *xv);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d1, y, DROP_N * sizeof *y);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d2, y2, DROP_N * sizeof *y2);
  if (!tap_check(st, "%s dropout 64x64 p 0.3: a forward-only run", spec)) goto done;
  ok(memcmp(y, xv, DROP_N * sizeof *y) == 0 && memcmp(y2, xv, DROP_N * sizeof *y2) == 0,
     "%s dropout: a forward-only run passes x through, bit for bit (y[0] %g, x[0] %g)", spec,
     y[0], xv[0]);

  st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d1, train_y, DROP_N * sizeof *train_y);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d2, y2, DROP_N * sizeof *y2);
  if (!tap_check(st, "%s dropout: a training run", spec)) goto done;
  have = 1;
  int64_t zeros = 0, exact = 0;
  double worst = 0;
  for (int i = 0; i < DROP_N; i++) {
    if (train_y[i] == 0.0f) {
      zeros++;
      continue;
    }
    exact += train_y[i] == xv[i] * scale;
    worst = worse(worst, fabs(train_y[i] - xv[i] / (1.0 - (double)p)) / fabs(xv[i] / (1.0 - p)));
  }
  ok(within_3_sigma(zeros, DROP_N, p), "%s dropout: %lld of %d outputs are 0 (expected %.0f "
     "+- %.0f, 3 sigma)", spec, (long long)zeros, DROP_N, DROP_N * (double)p,
     3.0 * sqrt(DROP_N * (double)p * (1 - p)));
  ok(worst <= 1e-6, "%s dropout: the kept outputs are x / (1 - p), worst relative error %.1e "
     "(%lld of %lld equal to x * (1 / (1 - p)) in float)", spec, worst, (long long)exact,
     (long long)(DROP_N - zeros));
  int64_t between = mask_differences(train_y, y2, DROP_N);
  ok(within_3_sigma(between, DROP_N, 2.0 * p * (1 - p)), "%s dropout: two dropout nodes draw "
     "independent masks: they differ at %lld of %d elements (expected %.0f)", spec,
     (long long)between, DROP_N, DROP_N * 2.0 * p * (1 - p));

  st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d1, y, DROP_N * sizeof *y);
  if (tap_check(st, "%s dropout: a second training run", spec))
    ok(memcmp(y, train_y, DROP_N * sizeof *y) == 0, "%s dropout: without an optimizer the "
       "second training run draws the same mask (%lld elements differ)", spec,
       (long long)mask_differences(y, train_y, DROP_N));
  st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d1, y, DROP_N * sizeof *y);
  if (st == DLRT_OK) st = dlrt_exec_info_get(e, &info);
  if (tap_check(st, "%s dropout: a forward-only run after the training runs", spec)) {
    ok(memcmp(y, xv, DROP_N * sizeof *y) == 0, "%s dropout: it passes x through again", spec);
    is_int(info.steps, 0, "%s dropout: no optimizer, no steps counted", spec);
  }
  /* Other executors of the graph, seeded 6 (7 with its lowest bit cleared)
   * and 8, draw other masks. */
  for (uint64_t seed = 6; seed <= 8; seed += 2) {
    dlrt_exec_t *other = NULL;
    st = dlrt_exec_create(g, dev, seed, &other);
    if (st == DLRT_OK) st = dlrt_exec_write(other, x, xv, DROP_N * sizeof *xv);
    if (st == DLRT_OK) st = dlrt_exec_run(other, DLRT_RUN_TRAIN);
    if (st == DLRT_OK) st = dlrt_exec_read(other, d1, y, DROP_N * sizeof *y);
    if (tap_check(st, "%s dropout: a training run of an executor seeded %d", spec, (int)seed)) {
      int64_t diff = mask_differences(y, train_y, DROP_N);
      ok(within_3_sigma(diff, DROP_N, 2.0 * p * (1 - p)), "%s dropout: seeds %d and 7 draw "
         "independent masks: they differ at %lld of %d elements (expected %.0f)", spec,
         (int)seed, (long long)diff, DROP_N, DROP_N * 2.0 * p * (1 - p));
    }
    dlrt_exec_destroy(other);
  }
done:
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  free(xv);
  free(y);
  free(y2);
  return have;
}

/* With an optimizer (SGD, lr 1e-3: x stays clear of 0) the step count
 * advances and each training step draws a new mask. */
static void test_dropout_steps(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  int64_t s[2] = {DROP_ROWS, DROP_COLS};
  float *xv = malloc(DROP_N * sizeof *xv), *y1 = malloc(DROP_N * sizeof *y1),
        *y2 = malloc(DROP_N * sizeof *y2);
  nonzero_values(xv, DROP_N, 32);
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *x = dlrt_param(g, "x", 2, s, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *d = dlrt_keep(g, dlrt_dropout(g, x, DROP_P));
  dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  sgd.lr = 1e-3f;
  dlrt_exec_t *e = NULL;
  dlrt_exec_info info = {0};
  int st = dlrt_graph_backward(g, dlrt_sum(g, d));
  if (st == DLRT_OK) st = dlrt_graph_optimize(g, &sgd);
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 7, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, DROP_N * sizeof *xv);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d, y1, DROP_N * sizeof *y1);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, d, y2, DROP_N * sizeof *y2);
  if (st == DLRT_OK) st = dlrt_exec_info_get(e, &info);
  if (tap_check(st, "%s dropout with sgd: two training steps", spec)) {
    int64_t between = mask_differences(y1, y2, DROP_N);
    double q = 2.0 * DROP_P * (1 - DROP_P);
    ok(within_3_sigma(between, DROP_N, q), "%s dropout with sgd: steps 1 and 2 draw "
       "independent masks: they differ at %lld of %d elements (expected %.0f)", spec,
       (long long)between, DROP_N, DROP_N * q);
    is_int(info.steps, 2, "%s dropout with sgd: the executor counted the steps", spec);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  free(xv);
  free(y1);
  free(y2);
}

/* ---------------------------------------------------------------- refusals */

static void expect_refusal(dlrt_graph_t *g, dlrt_tensor_t *y, const char *what,
                           const char *needle) {
  ok(y == NULL, "%s: the builder returns NULL", what);
  is_status(dlrt_graph_status(g), DLRT_ERR_INVALID_ARG, "%s: DLRT_ERR_INVALID_ARG", what);
  ok(strstr(dlrt_last_error(), needle) != NULL, "%s: the message mentions %s: %s", what,
     needle, dlrt_last_error());
}

static void test_refusals(void) {
  int64_t s34[2] = {3, 4}, s35[2] = {3, 5}, s43[2] = {4, 3}, x4[4] = {1, 1, 5, 5},
          s3[3] = {1, 5, 5};
  static const char *const what[] = {"sub 3x4 - 3x5", "div 3x4 / 3x5", "mse 3x4 with 4x3"};
  for (int k = 0; k < 3; k++) {
    dlrt_graph_t *g = new_graph();
    dlrt_tensor_t *a = dlrt_input(g, "ref_a", DLRT_F32, 2, s34);
    dlrt_tensor_t *b = dlrt_input(g, "ref_b", DLRT_F32, 2, k == 2 ? s43 : s35);
    dlrt_tensor_t *y = k == 0 ? dlrt_sub(g, a, b) : k == 1 ? dlrt_div(g, a, b) : dlrt_mse(g, a, b);
    expect_refusal(g, y, what[k], k == 2 ? "[4, 3]" : "[3, 5]");
    dlrt_graph_destroy(g);
  }
  static const int pools[][2] = {{6, 1}, {2, 0}, {0, 1}};
  for (int k = 0; k < 3; k++) {
    char label[64];
    snprintf(label, sizeof label, "avg_pool2d k%d stride %d on 5x5", pools[k][0], pools[k][1]);
    dlrt_graph_t *g = new_graph();
    dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 4, x4);
    expect_refusal(g, dlrt_avg_pool2d(g, x, pools[k][0], pools[k][1]), label, "avg_pool2d");
    dlrt_graph_destroy(g);
  }
  dlrt_graph_t *g = new_graph();
  expect_refusal(g, dlrt_avg_pool2d(g, dlrt_input(g, "x3", DLRT_F32, 3, s3), 2, 2),
                 "avg_pool2d of a 3-D tensor", "x3");
  dlrt_graph_destroy(g);
  static const float probs[] = {1.0f, -0.1f, NAN};
  for (int k = 0; k < 3; k++) {
    char label[64];
    snprintf(label, sizeof label, "dropout p %g", probs[k]);
    g = new_graph();
    expect_refusal(g, dlrt_dropout(g, dlrt_input(g, "x", DLRT_F32, 2, s34), probs[k]), label,
                   "dropout");
    dlrt_graph_destroy(g);
  }
  /* After an error the builders return NULL and the first error stays,
   * message included (as test-grad.c requires of the older builders). */
  g = new_graph();
  dlrt_tensor_t *a = dlrt_input(g, "first_a", DLRT_F32, 2, s34);
  dlrt_tensor_t *b = dlrt_input(g, "first_b", DLRT_F32, 2, s35);
  ok(dlrt_sub(g, a, b) == NULL, "sub 3x4 - 3x5 fails first");
  ok(dlrt_tanh(g, a) == NULL && dlrt_sigmoid(g, a) == NULL && dlrt_gelu(g, a) == NULL &&
         dlrt_gelu_tanh(g, a) == NULL &&
         dlrt_softmax(g, a) == NULL && dlrt_mse(g, a, a) == NULL && dlrt_div(g, a, a) == NULL &&
         dlrt_dropout(g, a, 0.5f) == NULL && dlrt_avg_pool2d(g, NULL, 2, 2) == NULL,
     "after it every new builder returns NULL, valid inputs or not");
  ok(dlrt_dropout(g, a, 1.5f) == NULL, "dropout p 1.5 after it returns NULL");
  ok(strstr(dlrt_last_error(), "first_a") != NULL, "and the message is still the first "
     "error's: %s", dlrt_last_error());
  is_status(dlrt_graph_status(g), DLRT_ERR_INVALID_ARG, "the status is the first error's");
  ok(strstr(dlrt_last_error(), "first_a") != NULL, "dlrt_graph_status restores its message: %s",
     dlrt_last_error());
  dlrt_graph_destroy(g);
}

/* The cpu's training-run output of test_dropout_values, which every other
 * device must match bit for bit (the cpu is visited first). */
typedef struct {
  float *cpu_y, *y;
  int have_cpu; /* the cpu's run gave cpu_y */
  int compared; /* devices compared with it, or skipped for lack of a mask */
} dropout_masks;

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  dropout_masks *m = ctx;
  int cpu = tap_device_is_cpu(dev);
  double start = now_s();
  test_sub_div(dev);
  test_activations(dev);
  test_softmax(dev);
  test_mse(dev);
  test_avg_pool2d(dev);
  test_dropout_grad(dev);
  test_conv_stack_ops(dev);
  test_forward_values(dev);
  int have = test_dropout_values(dev, cpu ? m->cpu_y : m->y);
  test_dropout_steps(dev);
  diag("%s: %.2f s", spec, now_s() - start);
  if (cpu) {
    m->have_cpu = have;
    return;
  }
  m->compared++;
  if (m->have_cpu && have)
    ok(memcmp(m->cpu_y, m->y, DROP_N * sizeof(float)) == 0, "cpu and %s draw the same dropout "
       "mask for seed 7: %lld of %d masks differ, kept outputs equal bit for bit: %s", spec,
       (long long)mask_differences(m->cpu_y, m->y, DROP_N), DROP_N,
       memcmp(m->cpu_y, m->y, DROP_N * sizeof(float)) == 0 ? "yes" : "no");
  else
    skip(1, "dropout masks on cpu and %s: not both ran", spec);
}

int main(void) {
  dropout_masks m = {malloc(DROP_N * sizeof(float)), malloc(DROP_N * sizeof(float)), 0, 0};
  if (!m.cpu_y || !m.y) bail_out("out of host memory");
  test_refusals();
  tap_for_each_device(run_device, &m);
  if (m.compared == 0)
    skip(1, "dropout masks across devices: no device besides the cpu");
  free(m.cpu_y);
  free(m.y);
  dlrt_shutdown();
  return done_testing();
}
