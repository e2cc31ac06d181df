/*
 * test-grad.c — the static graph's automatic differentiation checked against
 * central finite differences, op by op, on every device present
 * (tap_for_each_device). Each check is a tiny graph whose parameters are the
 * op's differentiable inputs and whose loss is sum(op(...) * R), R a fixed
 * random input (so every output element counts, each with its own weight),
 * or the cross-entropy itself. Every element of every gradient is compared,
 * with the device's memory cache filled with NaN beforehand so that a kernel
 * that reads stale memory shows. Also: kept images and their gradients read
 * back as N x C x H x W; the builders' refusals (shapes, state, NULL
 * propagation); three steps of SGD, Adam and AdamW against a host copy of
 * torch.optim's update rules. The check itself is in grad-check.c; the ops
 * added later (sub, div, activations, softmax, MSE, average pooling,
 * dropout) are checked in test-grad-ops.c.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "grad-check.h"
#include "tap.h"

/* ---------------------------------------------------------------- the ops */

static void test_linear(dlrt_device_t *dev) {
  int64_t xs[2] = {3, 4}, ws[2] = {5, 4}, bs[1] = {5};
  for (int with_bias = 1; with_bias >= 0; with_bias--) {
    gcase c;
    case_begin(&c, "linear %s", with_bias ? "with bias" : "without bias");
    /* With the bias: the initialiser's values; without: random ones. */
    values_kind k = with_bias ? VALUES_INITIALISER : VALUES_RANDOM;
    dlrt_tensor_t *x = cparam(&c, "x", 2, xs, k), *w = cparam(&c, "w", 2, ws, k);
    dlrt_tensor_t *b = with_bias ? cparam(&c, "b", 1, bs, k) : NULL;
    case_check(&c, dev, weighted(&c, dlrt_linear(c.g, x, w, b)));
  }
}

/* op(A) 2 x 3 times op(B) 3 x 4, stored transposed or not. */
static void test_matmul(dlrt_device_t *dev) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      gcase c;
      case_begin(&c, "matmul trans_a %d trans_b %d", ta, tb);
      int64_t as[2] = {ta ? 3 : 2, ta ? 2 : 3}, bs[2] = {tb ? 4 : 3, tb ? 3 : 4};
      dlrt_tensor_t *a = cparam(&c, "a", 2, as, VALUES_RANDOM);
      dlrt_tensor_t *b = cparam(&c, "b", 2, bs, VALUES_RANDOM);
      case_check(&c, dev, weighted(&c, dlrt_matmul(c.g, a, b, ta, tb)));
    }
}

/* relu, add, mul, scale, sum on 3 x 4, and one parameter used twice. */
static void test_elementwise(dlrt_device_t *dev) {
  static const char *const ops[] = {"relu", "add", "mul", "scale -1.7", "sum",
                                    "add(x, x)", "mul(x, x)"};
  int64_t s[2] = {3, 4};
  for (int k = 0; k < 7; k++) {
    gcase c;
    case_begin(&c, "%s", ops[k]);
    dlrt_tensor_t *a = cparam(&c, "x", 2, s, k == 0 ? VALUES_AWAY : VALUES_RANDOM);
    dlrt_tensor_t *b = k == 1 || k == 2 ? cparam(&c, "y", 2, s, VALUES_RANDOM) : NULL;
    dlrt_graph_t *g = c.g;
    dlrt_tensor_t *y = k == 0   ? dlrt_relu(g, a)
                       : k == 1 ? dlrt_add(g, a, b)
                       : k == 2 ? dlrt_mul(g, a, b)
                       : k == 3 ? dlrt_scale(g, a, -1.7f)
                       : k == 4 ? dlrt_sum(g, a)
                       : k == 5 ? dlrt_add(g, a, a)
                                : dlrt_mul(g, a, a);
    case_check(&c, dev, weighted(&c, y));
  }
}

typedef struct {
  int64_t n, c, h, w, o, kh, kw;
  int stride, pad, dil, bias;
} conv_config;

static void test_conv2d(dlrt_device_t *dev) {
  /* Each of stride 1/2, padding 0/1, dilation 1/2, bias or none, batch 1/2,
   * and non-square images and kernels. */
  static const conv_config configs[] = {
      {2, 2, 5, 4, 3, 3, 3, 1, 0, 1, 1}, {1, 2, 6, 5, 2, 3, 3, 2, 1, 1, 0},
      {1, 2, 6, 6, 2, 3, 3, 1, 1, 2, 1}, {2, 1, 7, 6, 2, 3, 3, 2, 0, 2, 0},
      {1, 3, 5, 5, 2, 2, 3, 2, 1, 1, 1}, {1, 2, 5, 6, 2, 3, 2, 2, 1, 2, 0},
      {3, 2, 5, 4, 3, 3, 3, 1, 1, 1, 1},
  };
  /* Batches of several images again with a workspace of one image per
   * chunk (DLRT_CONV_WORKSPACE is read when the graph is built): the
   * chunked GEMMs, their offsets and dW's accumulation over chunks. */
  for (size_t i = 0; i < 2 * sizeof configs / sizeof configs[0]; i++) {
    const conv_config *k = &configs[i % (sizeof configs / sizeof configs[0])];
    int chunked = i >= sizeof configs / sizeof configs[0];
    if (chunked && k->n == 1) continue;
    if (chunked) setenv("DLRT_CONV_WORKSPACE", "1", 1);
    gcase c;
    case_begin(&c, "conv2d x %lldx%lldx%lldx%lld w %lldx%lldx%lldx%lld s%d p%d d%d %s%s",
               (long long)k->n, (long long)k->c, (long long)k->h, (long long)k->w,
               (long long)k->o, (long long)k->c, (long long)k->kh, (long long)k->kw,
               k->stride, k->pad, k->dil, k->bias ? "bias" : "no bias",
               chunked ? ", one image per chunk" : "");
    int64_t xs[4] = {k->n, k->c, k->h, k->w}, ws[4] = {k->o, k->c, k->kh, k->kw}, bs[1] = {k->o};
    dlrt_tensor_t *x = cparam(&c, "x", 4, xs, VALUES_RANDOM);
    dlrt_tensor_t *w = cparam(&c, "w", 4, ws, VALUES_INITIALISER);
    dlrt_tensor_t *b = k->bias ? cparam(&c, "b", 1, bs, VALUES_RANDOM) : NULL;
    case_check(&c, dev, weighted(&c, dlrt_conv2d(c.g, x, w, b, k->stride, k->pad, k->dil)));
    unsetenv("DLRT_CONV_WORKSPACE");
  }
}

/* A stack, batch 2: conv2d, conv2d on its output, plus a parameter of the
 * plain N x C x H x W layout (the graph may store conv outputs otherwise). */
static void test_conv_stack(dlrt_device_t *dev) {
  gcase c;
  case_begin(&c, "conv2d stack: conv2d, conv2d s2, add, one image per chunk");
  int64_t xs[4] = {2, 2, 5, 5}, w1s[4] = {3, 2, 3, 3}, b1s[1] = {3}, w2s[4] = {2, 3, 3, 3},
          qs[4] = {2, 2, 3, 3};
  dlrt_graph_t *g = c.g;
  dlrt_tensor_t *x = cparam(&c, "x", 4, xs, VALUES_RANDOM);
  dlrt_tensor_t *w1 = cparam(&c, "w1", 4, w1s, VALUES_INITIALISER);
  dlrt_tensor_t *b1 = cparam(&c, "b1", 1, b1s, VALUES_RANDOM);
  dlrt_tensor_t *w2 = cparam(&c, "w2", 4, w2s, VALUES_INITIALISER);
  dlrt_tensor_t *q = cparam(&c, "q", 4, qs, VALUES_RANDOM);
  setenv("DLRT_CONV_WORKSPACE", "1", 1); /* a chunk per image */
  dlrt_tensor_t *y = dlrt_conv2d(g, dlrt_conv2d(g, x, w1, b1, 1, 1, 1), w2, NULL, 2, 1, 1);
  unsetenv("DLRT_CONV_WORKSPACE");
  case_check(&c, dev, weighted(&c, dlrt_add(g, y, q)));
}

/* A kept conv2d output and the gradient of one read back as N x C x H x W
 * (the public layout), batch 2 so that a channel-major layout would show:
 * y = 1x1 conv of x by w, loss = sum(y * R), so dloss/dy = R. */
static void test_conv_layout(dlrt_device_t *dev) {
  enum { N = 2, C = 2, O = 3, P = 4 };
  const char *spec = dlrt_device_spec(dev);
  int64_t xs[4] = {N, C, 2, 2}, ws[4] = {O, C, 1, 1}, ys[4] = {N, O, 2, 2};
  float xv[N * C * P], wv[O * C], rv[N * O * P], yv[N * O * P], dyv[N * O * P], want[N * O * P];
  uint32_t rng = 5;
  for (int i = 0; i < N * C * P; i++) xv[i] = uniform(&rng, -1.0f, 1.0f);
  for (int i = 0; i < O * C; i++) wv[i] = uniform(&rng, -1.0f, 1.0f);
  for (int i = 0; i < N * O * P; i++) rv[i] = uniform(&rng, -1.0f, 1.0f);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++)
      for (int p = 0; p < P; p++) {
        float a = 0;
        for (int k = 0; k < C; k++) a += wv[o * C + k] * xv[(n * C + k) * P + p];
        want[(n * O + o) * P + p] = a;
      }
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 4, xs);
  dlrt_tensor_t *w = dlrt_param(g, "w", 4, ws, DLRT_INIT_FAN_IN_UNIFORM, C, 0);
  dlrt_tensor_t *r = dlrt_input(g, "R", DLRT_F32, 4, ys);
  dlrt_tensor_t *y = dlrt_keep(g, dlrt_conv2d(g, x, w, NULL, 1, 0, 1)), *dy = NULL;
  dlrt_exec_t *e = NULL;
  int st = dlrt_graph_backward(g, dlrt_sum(g, dlrt_mul(g, y, r)));
  if (st == DLRT_OK && !(dy = dlrt_keep(g, dlrt_grad(g, y)))) st = DLRT_ERR_NOT_FOUND;
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 3, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, sizeof xv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, w, wv, sizeof wv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, r, rv, sizeof rv);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, y, yv, sizeof yv);
  if (st == DLRT_OK) st = dlrt_exec_read(e, dy, dyv, sizeof dyv);
  if (tap_check(st, "%s: 1x1 conv2d of 2 images, its output and gradient kept", spec)) {
    double worst = 0;
    for (int i = 0; i < N * O * P; i++) worst = worse(worst, fabs(yv[i] - want[i]));
    ok(worst <= 1e-5, "%s: the kept conv2d output reads as N x C x H x W (worst error %.1e; "
       "y[1,0,0,0] %g, want %g)", spec, worst, yv[O * P], want[O * P]);
    ok(memcmp(dyv, rv, sizeof rv) == 0, "%s: its gradient reads as N x C x H x W, = R "
       "(dy[1,0,0,0] %g, want %g)", spec, dyv[O * P], rv[O * P]);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

static void test_max_pool2d(dlrt_device_t *dev) {
  /* n c h w k stride: tiling windows, overlapping ones (with a row or column
   * left over), and windows with gaps between them. */
  static const int64_t configs[][6] = {
      {1, 2, 4, 4, 2, 2}, {2, 1, 5, 5, 3, 2}, {1, 2, 5, 6, 3, 2}, {1, 1, 5, 7, 2, 3}};
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    const int64_t *k = configs[i];
    gcase c;
    case_begin(&c, "max_pool2d x %lldx%lldx%lldx%lld k%lld stride %lld", (long long)k[0],
               (long long)k[1], (long long)k[2], (long long)k[3], (long long)k[4],
               (long long)k[5]);
    dlrt_tensor_t *x = cparam(&c, "x", 4, k, VALUES_DISTINCT);
    case_check(&c, dev, weighted(&c, dlrt_max_pool2d(c.g, x, (int)k[4], (int)k[5])));
    /* After a ReLU (values of both signs): the fused gradient of the two. */
    case_begin(&c, "max_pool2d(relu(x)) x %lldx%lldx%lldx%lld k%lld stride %lld",
               (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3],
               (long long)k[4], (long long)k[5]);
    x = cparam(&c, "x", 4, k, VALUES_DISTINCT);
    case_check(&c, dev, weighted(&c, dlrt_max_pool2d(c.g, dlrt_relu(c.g, x), (int)k[4],
                                                     (int)k[5])));
  }
}

/* The fused gradient of relu then max-pool equals the two passes' bit for
 * bit: keeping the ReLU's output (which keeps its own gradient) turns the
 * fusion off. y = max_pool(relu(conv(x))) with values of both signs, windows
 * tiling, overlapping and with gaps. */
static void test_relu_pool_fusion(dlrt_device_t *dev) {
  static const int64_t configs[][3] = {{6, 2, 2}, {7, 3, 2}, {7, 3, 1}, {7, 2, 3}};
  const char *spec = dlrt_device_spec(dev);
  for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
    int64_t side = configs[i][0], k = configs[i][1], stride = configs[i][2];
    int64_t xs[4] = {2, 2, side + 2, side + 2}, ws[4] = {3, 2, 3, 3};
    int64_t oside = (side - k) / stride + 1, rs[4] = {2, 3, oside, oside};
    float xv[2 * 2 * 9 * 9], wv[3 * 2 * 9], rv[2 * 3 * 7 * 7], grads[2][2 * 2 * 9 * 9],
        wgrads[2][3 * 2 * 9];
    uint32_t rng = 11 + (uint32_t)i;
    for (size_t j = 0; j < sizeof xv / sizeof xv[0]; j++) xv[j] = uniform(&rng, -1.0f, 1.0f);
    for (size_t j = 0; j < sizeof wv / sizeof wv[0]; j++) wv[j] = uniform(&rng, -0.5f, 0.5f);
    for (size_t j = 0; j < sizeof rv / sizeof rv[0]; j++) rv[j] = uniform(&rng, -1.0f, 1.0f);
    int st = DLRT_OK, fused[2] = {0, 0};
    for (int keep = 0; keep < 2 && st == DLRT_OK; keep++) {
      dlrt_graph_t *g = new_graph();
      dlrt_tensor_t *x = dlrt_param(g, "x", 4, xs, DLRT_INIT_ZEROS, 0, 0);
      dlrt_tensor_t *w = dlrt_param(g, "w", 4, ws, DLRT_INIT_ZEROS, 0, 0);
      dlrt_tensor_t *r = dlrt_input(g, "R", DLRT_F32, 4, rs);
      dlrt_tensor_t *act = dlrt_relu(g, dlrt_conv2d(g, x, w, NULL, 1, 0, 1));
      if (keep) dlrt_keep(g, act);
      dlrt_tensor_t *y = dlrt_max_pool2d(g, act, (int)k, (int)stride);
      dlrt_exec_t *e = NULL;
      st = dlrt_graph_backward(g, dlrt_sum(g, dlrt_mul(g, y, r)));
      dlrt_tensor_t *dx = dlrt_keep(g, dlrt_grad(g, x)), *dw = dlrt_keep(g, dlrt_grad(g, w));
      fused[keep] = dlrt_grad(g, act) == NULL; /* fused: the ReLU's output gets none */
      if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 3, &e);
      if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, bytes_of(x));
      if (st == DLRT_OK) st = dlrt_exec_write(e, w, wv, sizeof wv);
      if (st == DLRT_OK) st = dlrt_exec_write(e, r, rv, bytes_of(r));
      if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
      if (st == DLRT_OK) st = dlrt_exec_read(e, dx, grads[keep], bytes_of(x));
      if (st == DLRT_OK) st = dlrt_exec_read(e, dw, wgrads[keep], sizeof wv);
      dlrt_exec_destroy(e);
      dlrt_graph_destroy(g);
    }
    if (tap_check(st, "%s: relu + max_pool k%lld stride %lld, fused and not, run", spec,
                  (long long)k, (long long)stride)) {
      size_t xbytes = (size_t)numel_of(4, xs) * sizeof(float);
      ok(fused[0] && !fused[1], "%s: relu + max_pool k%lld stride %lld: fused, and not when "
         "the ReLU's output is kept", spec, (long long)k, (long long)stride);
      ok(memcmp(grads[0], grads[1], xbytes) == 0 && memcmp(wgrads[0], wgrads[1], sizeof wv) == 0,
         "%s: relu + max_pool k%lld stride %lld: the fused gradient is the two passes' bit "
         "for bit", spec, (long long)k, (long long)stride);
    }
  }
}

/* Views of a parameter, of an intermediate and of the output, and their
 * gradients (views of gradients): x 2x3x4 -> 4x6 -> *2 -> 2x2x6 -> flatten
 * 2x12 -> linear 2x3 -> 3x2. */
static void test_views(dlrt_device_t *dev) {
  gcase c;
  case_begin(&c, "reshape/flatten chain");
  int64_t xs[3] = {2, 3, 4}, ws[2] = {3, 12}, s46[2] = {4, 6}, s226[3] = {2, 2, 6},
          s32[2] = {3, 2};
  dlrt_graph_t *g = c.g;
  dlrt_tensor_t *x = cparam(&c, "x", 3, xs, VALUES_RANDOM);
  dlrt_tensor_t *w = cparam(&c, "w", 2, ws, VALUES_RANDOM);
  dlrt_tensor_t *v = dlrt_reshape(g, dlrt_scale(g, dlrt_reshape(g, x, 2, s46), 2.0f), 3, s226);
  dlrt_tensor_t *y = dlrt_reshape(g, dlrt_linear(g, dlrt_flatten(g, v), w, NULL), 2, s32);
  case_check(&c, dev, weighted(&c, y));
}

/* Mean over rows of -sum_c q log softmax(z), q = (1 - s) onehot + s / classes. */
static double host_xent(const float *z, const int32_t *labels, int rows, int classes,
                        double smoothing) {
  double total = 0;
  for (int r = 0; r < rows; r++) {
    const float *zr = z + r * classes;
    double m = zr[0], sum = 0;
    for (int k = 1; k < classes; k++) m = fmax(m, zr[k]);
    for (int k = 0; k < classes; k++) sum += exp(zr[k] - m);
    double lse = m + log(sum);
    for (int k = 0; k < classes; k++)
      total -= (smoothing / classes + (k == labels[r] ? 1 - smoothing : 0)) * (zr[k] - lse);
  }
  return total / rows;
}

static void test_cross_entropy(dlrt_device_t *dev) {
  const int32_t labels[3] = {1, 4, 0};
  int64_t zs[2] = {3, 5};
  for (int i = 0; i < 2; i++) {
    float smoothing = i ? 0.1f : 0.0f;
    gcase c;
    case_begin(&c, "cross_entropy N 3 classes 5 smoothing %.1f", smoothing);
    dlrt_tensor_t *z = cparam(&c, "logits", 2, zs, VALUES_RANDOM);
    for (int j = 0; j < 15; j++) c.pv[0][j] *= 2.0f;
    dlrt_tensor_t *lab = clabels(&c, 3, labels);
    c.want_loss = host_xent(c.pv[0], labels, 3, 5, smoothing);
    case_check(&c, dev, dlrt_cross_entropy(c.g, z, lab, smoothing));
  }
}

/* x 4x5 -> linear 6 -> relu -> linear 3 -> cross-entropy, end to end. */
static void test_mlp(dlrt_device_t *dev) {
  enum { N = 4, IN = 5, HID = 6, OUT = 3 };
  const int32_t labels[N] = {2, 0, 1, 2};
  int64_t xs[2] = {N, IN}, w1s[2] = {HID, IN}, b1s[1] = {HID}, w2s[2] = {OUT, HID},
          b2s[1] = {OUT};
  gcase c;
  case_begin(&c, "mlp linear-relu-linear-cross_entropy");
  dlrt_graph_t *g = c.g;
  dlrt_tensor_t *x = cinput(&c, "x", 2, xs);
  dlrt_tensor_t *w1 = cparam(&c, "w1", 2, w1s, VALUES_RANDOM);
  dlrt_tensor_t *b1 = cparam(&c, "b1", 1, b1s, VALUES_RANDOM);
  dlrt_tensor_t *w2 = cparam(&c, "w2", 2, w2s, VALUES_RANDOM);
  dlrt_tensor_t *b2 = cparam(&c, "b2", 1, b2s, VALUES_RANDOM);
  dlrt_tensor_t *lab = clabels(&c, N, labels);
  const float *xv = c.iv[0], *w1v = c.pv[0], *b1v = c.pv[1], *w2v = c.pv[2], *b2v = c.pv[3];
  /* Redraw the first layer until every hidden pre-activation is 0.05 or
   * more from ReLU's kink: perturbing W1 or b1 by h = 0.01 moves one by at
   * most 0.0125 (|x| <= 1.25). */
  float hid[N][HID], z[N * OUT];
  for (int tries = 0;; tries++) {
    float closest = INFINITY;
    for (int r = 0; r < N; r++)
      for (int j = 0; j < HID; j++) {
        float a = b1v[j];
        for (int k = 0; k < IN; k++) a += xv[r * IN + k] * w1v[j * IN + k];
        closest = fminf(closest, fabsf(a));
        hid[r][j] = a > 0 ? a : 0;
      }
    if (closest >= 0.05f) break;
    if (tries == 100) bail_out("no first layer clear of ReLU's kink");
    fill_values(&c, c.pv[0], HID * IN, VALUES_RANDOM);
    fill_values(&c, c.pv[1], HID, VALUES_RANDOM);
  }
  for (int r = 0; r < N; r++)
    for (int o = 0; o < OUT; o++) {
      float a = b2v[o];
      for (int j = 0; j < HID; j++) a += hid[r][j] * w2v[o * HID + j];
      z[r * OUT + o] = a;
    }
  c.want_loss = host_xent(z, labels, N, OUT, 0.0);
  dlrt_tensor_t *h = dlrt_relu(g, dlrt_linear(g, x, w1, b1));
  case_check(&c, dev, dlrt_cross_entropy(g, dlrt_linear(g, h, w2, b2), lab, 0.0f));
}

/* ---------------------------------------------------------------- refusals */

/* A refused builder: NULL, DLRT_ERR_INVALID_ARG kept by the graph, and a
 * message that names both tensors and gives their shapes. */
static void expect_shape_error(dlrt_graph_t *g, dlrt_tensor_t *y, const char *what,
                               const char *a, const char *a_shape, const char *b,
                               const char *b_shape) {
  ok(y == NULL, "%s: the builder returns NULL", what);
  is_status(dlrt_graph_status(g), DLRT_ERR_INVALID_ARG, "%s: the graph keeps the error", what);
  const char *msg = dlrt_last_error();
  ok(strstr(msg, a) && strstr(msg, a_shape) && strstr(msg, b) && strstr(msg, b_shape),
     "%s: the message names %s %s and %s %s: %s", what, a, a_shape, b, b_shape, msg);
}

static void test_refusals(dlrt_device_t *cpu) {
  int64_t s3[1] = {3}, s34[2] = {3, 4}, s35[2] = {3, 5}, s25[2] = {2, 5}, s23[2] = {2, 3},
          s42[2] = {4, 2}, x4[4] = {1, 3, 5, 5}, w4[4] = {2, 2, 3, 3};

  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 1, s3);
  dlrt_param(g, "unused", 1, s3, DLRT_INIT_ZEROS, 0, 0);
  is_status(dlrt_graph_backward(g, dlrt_sum(g, x)), DLRT_ERR_INVALID_ARG,
            "backward of a loss that no parameter feeds");
  dlrt_graph_destroy(g);

  g = new_graph();
  dlrt_tensor_t *z = dlrt_param(g, "z", 2, s35, DLRT_INIT_FAN_IN_UNIFORM, 5, 0);
  dlrt_tensor_t *ce = dlrt_cross_entropy(g, z, dlrt_input(g, "labels", DLRT_I32, 1, s3), 0.0f);
  is_status(dlrt_graph_backward(g, dlrt_scale(g, ce, 2.0f)), DLRT_ERR_UNSUPPORTED,
            "backward of 2 * cross_entropy: the cross-entropy must be the loss");
  dlrt_graph_destroy(g);

  g = new_graph();
  dlrt_tensor_t *a = dlrt_param(g, "a", 2, s34, DLRT_INIT_FAN_IN_UNIFORM, 4, 0);
  tap_check(dlrt_graph_backward(g, dlrt_sum(g, a)), "backward of sum(a)");
  ok(dlrt_relu(g, a) == NULL, "relu after backward returns NULL");
  is_status(dlrt_graph_status(g), DLRT_ERR_STATE, "building after backward: DLRT_ERR_STATE");
  ok(dlrt_param(g, "late", 1, s3, DLRT_INIT_ZEROS, 0, 0) == NULL,
     "a parameter after backward is refused");
  dlrt_graph_destroy(g);

  /* Shape mismatches; after the first error every builder returns NULL and
   * the first error stays, message included. */
  g = new_graph();
  dlrt_tensor_t *lx = dlrt_input(g, "lin_x", DLRT_F32, 2, s34);
  dlrt_tensor_t *lw = dlrt_param(g, "lin_w", 2, s25, DLRT_INIT_FAN_IN_UNIFORM, 5, 0);
  expect_shape_error(g, dlrt_linear(g, lx, lw, NULL), "linear 3x4 with W 2x5",
                     "lin_x", "[3, 4]", "lin_w", "[2, 5]");
  dlrt_tensor_t *mb = dlrt_param(g, "mm_b", 2, s42, DLRT_INIT_ZEROS, 0, 0);
  ok(mb == NULL && dlrt_relu(g, NULL) == NULL && dlrt_add(g, lx, lx) == NULL &&
         dlrt_sum(g, lw) == NULL && dlrt_matmul(g, lx, lw, 0, 1) == NULL,
     "after an error every builder returns NULL, valid inputs or not");
  is_status(dlrt_graph_status(g), DLRT_ERR_INVALID_ARG, "the status is the first error's");
  ok(strstr(dlrt_last_error(), "lin_x") != NULL, "and so is the message: %s",
     dlrt_last_error());
  is_status(dlrt_graph_backward(g, NULL), DLRT_ERR_INVALID_ARG, "backward reports it");
  dlrt_exec_t *e = NULL;
  is_status(dlrt_exec_create(g, cpu, 1, &e), DLRT_ERR_INVALID_ARG, "dlrt_exec_create reports it");
  dlrt_graph_destroy(g);

  g = new_graph();
  dlrt_tensor_t *ma = dlrt_param(g, "mm_a", 2, s23, DLRT_INIT_ZEROS, 0, 0);
  mb = dlrt_param(g, "mm_b", 2, s42, DLRT_INIT_ZEROS, 0, 0);
  expect_shape_error(g, dlrt_matmul(g, ma, mb, 0, 0), "matmul 2x3 by 4x2", "mm_a", "[2, 3]",
                     "mm_b", "[4, 2]");
  dlrt_graph_destroy(g);

  g = new_graph();
  dlrt_tensor_t *cx = dlrt_input(g, "conv_x", DLRT_F32, 4, x4);
  dlrt_tensor_t *cw = dlrt_param(g, "conv_w", 4, w4, DLRT_INIT_FAN_IN_UNIFORM, 18, 0);
  expect_shape_error(g, dlrt_conv2d(g, cx, cw, NULL, 1, 0, 1), "conv2d 3 channels, w for 2",
                     "conv_x", "[1, 3, 5, 5]", "conv_w", "[2, 2, 3, 3]");
  dlrt_graph_destroy(g);

  /* A NULL input first: that is the error that sticks. */
  g = new_graph();
  x = dlrt_input(g, "x", DLRT_F32, 2, s34);
  dlrt_tensor_t *y = dlrt_relu(g, NULL);
  ok(y == NULL && dlrt_scale(g, y, 2.0f) == NULL && dlrt_sum(g, dlrt_flatten(g, y)) == NULL,
     "relu(NULL) and what is built on it are NULL");
  ok(dlrt_matmul(g, x, x, 0, 0) == NULL, "a later mismatched matmul is NULL too");
  is_status(dlrt_graph_status(g), DLRT_ERR_INVALID_ARG, "relu(NULL): DLRT_ERR_INVALID_ARG");
  ok(strstr(dlrt_last_error(), "relu") != NULL && !strstr(dlrt_last_error(), "matmul"),
     "the message is relu's, not the matmul's: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
}

/* ---------------------------------------------------------------- optimizers */

/* One step t (from 1) of torch.optim's rules (kernels/nn.h), in double. */
static void host_step(const dlrt_optimizer *o, int t, int64_t n, double *p, double *m,
                      double *v, const float *grad) {
  for (int64_t i = 0; i < n; i++) {
    double g = grad[i];
    if (o->kind == DLRT_OPT_SGD) {
      g += o->weight_decay * p[i];
      m[i] = t == 1 ? g : o->momentum * m[i] + g;
      p[i] -= o->lr * (o->nesterov ? g + o->momentum * m[i] : m[i]);
      continue;
    }
    if (o->kind == DLRT_OPT_ADAMW) p[i] *= 1.0 - (double)o->lr * o->weight_decay;
    else g += o->weight_decay * p[i];
    m[i] = o->beta1 * m[i] + (1.0 - o->beta1) * g;
    v[i] = o->beta2 * v[i] + (1.0 - o->beta2) * g * g;
    double denom = sqrt(v[i]) / sqrt(1.0 - pow(o->beta2, t)) + o->eps;
    p[i] -= o->lr / (1.0 - pow(o->beta1, t)) * m[i] / denom;
  }
}

/* Three steps of a linear 3 -> 3 classifier with cross-entropy; the host
 * applies the same rule to the gradients the device computed. */
static void test_optimizer(dlrt_device_t *dev, const dlrt_optimizer *o, const char *label) {
  enum { N = 4, IN = 3, OUT = 3, STEPS = 3 };
  const char *spec = dlrt_device_spec(dev);
  int64_t xs[2] = {N, IN}, ws[2] = {OUT, IN}, bs[1] = {OUT};
  const int32_t labels[N] = {0, 2, 1, 2};
  float xv[N * IN];
  uint32_t rng = 99;
  for (int i = 0; i < N * IN; i++) xv[i] = uniform(&rng, -1.0f, 1.0f);
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, xs);
  dlrt_tensor_t *lab = dlrt_input(g, "labels", DLRT_I32, 1, &xs[0]);
  dlrt_tensor_t *p[2] = {dlrt_param(g, "w", 2, ws, DLRT_INIT_FAN_IN_UNIFORM, IN, OUT),
                         dlrt_param(g, "b", 1, bs, DLRT_INIT_FAN_IN_UNIFORM, IN, OUT)};
  dlrt_tensor_t *loss = dlrt_cross_entropy(g, dlrt_linear(g, x, p[0], p[1]), lab, 0.0f);
  dlrt_tensor_t *grad[2] = {NULL, NULL};
  dlrt_exec_t *e = NULL;
  int st = dlrt_graph_backward(g, loss);
  if (st == DLRT_OK) {
    grad[0] = dlrt_keep(g, dlrt_grad(g, p[0]));
    grad[1] = dlrt_keep(g, dlrt_grad(g, p[1]));
    st = dlrt_graph_optimize(g, o);
  }
  if (st == DLRT_OK) {
    poison_cache(dev);
    st = dlrt_exec_create(g, dev, 11, &e);
  }
  if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, sizeof xv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, lab, labels, sizeof labels);
  double hp[2][OUT * IN], hm[2][OUT * IN] = {{0}}, hv[2][OUT * IN] = {{0}}, worst = 0;
  float dp[OUT * IN], dg[OUT * IN];
  for (int k = 0; k < 2 && st == DLRT_OK; k++) {
    st = dlrt_exec_read(e, p[k], dp, bytes_of(p[k]));
    for (int64_t i = 0; i < dlrt_tensor_numel(p[k]); i++) hp[k][i] = dp[i];
  }
  for (int t = 1; t <= STEPS && st == DLRT_OK; t++) {
    st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
    for (int k = 0; k < 2 && st == DLRT_OK; k++) {
      int64_t n = dlrt_tensor_numel(p[k]);
      st = dlrt_exec_read(e, grad[k], dg, bytes_of(p[k]));
      if (st == DLRT_OK) st = dlrt_exec_read(e, p[k], dp, bytes_of(p[k]));
      host_step(o, t, n, hp[k], hm[k], hv[k], dg);
      for (int64_t i = 0; i < n; i++)
        worst = worse(worst, fabs(dp[i] - hp[k][i]) / fmax(fabs(hp[k][i]), 1e-2));
    }
  }
  dlrt_exec_info info = {0};
  if (st == DLRT_OK) st = dlrt_exec_info_get(e, &info);
  if (tap_check(st, "%s %s: %d training steps", spec, label, STEPS)) {
    ok(worst <= 1e-5, "%s %s: parameters match torch.optim's rule on the host, worst "
       "relative difference %.1e", spec, label, worst);
    is_int(info.steps, STEPS, "%s %s: the executor counted the steps", spec, label);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

static void test_optimizers(dlrt_device_t *dev) {
  dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  sgd.lr = 0.1f, sgd.momentum = 0.9f, sgd.weight_decay = 0.01f;
  test_optimizer(dev, &sgd, "sgd momentum 0.9 weight decay 0.01");
  sgd.nesterov = 1;
  test_optimizer(dev, &sgd, "sgd nesterov momentum 0.9 weight decay 0.01");
  dlrt_optimizer adam = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
  adam.lr = 0.01f;
  test_optimizer(dev, &adam, "adam lr 0.01");
  adam.weight_decay = 0.01f;
  test_optimizer(dev, &adam, "adam lr 0.01 L2 weight decay 0.01");
  dlrt_optimizer adamw = dlrt_optimizer_defaults(DLRT_OPT_ADAMW);
  adamw.lr = 0.01f;
  test_optimizer(dev, &adamw, "adamw lr 0.01");
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  double start = now_s();
  test_linear(dev);
  test_matmul(dev);
  test_elementwise(dev);
  test_conv2d(dev);
  test_conv_stack(dev);
  test_conv_layout(dev);
  test_max_pool2d(dev);
  test_relu_pool_fusion(dev);
  test_views(dev);
  test_cross_entropy(dev);
  test_mlp(dev);
  test_optimizers(dev);
  diag("%s: %.2f s", spec, now_s() - start);
}

int main(void) {
  dlrt_device_t *cpu = NULL;
  if (dlrt_device_open("cpu", &cpu) != DLRT_OK) bail_out("no cpu device: %s", dlrt_last_error());
  test_refusals(cpu);
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  return done_testing();
}
