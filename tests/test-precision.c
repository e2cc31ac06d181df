/*
 * test-precision.c — mixed precision (dlrt_graph_set_precision) and dynamic
 * loss scaling (dlrt_exec_set_loss_scaler), on every device present
 * (tap_for_each_device):
 * - a model that goes through every op with kernels in every storage type
 *   (convolutions with padding, stride and dilation, bias, ReLU, max pooling
 *   with disjoint and overlapping windows, the CNHW permute, linear, add,
 *   mul, scale) and through fp32 islands (tanh, the loss) gives, in fp16 and
 *   bf16, the loss and parameter gradients of the fp32 run within the
 *   rounding of its storage type, and not bit for bit the fp32 ones (so the
 *   16-bit kernels ran); the rewritten graph stores the activations in the
 *   compute type and keeps parameters, their gradients and the loss fp32;
 * - a planted overflow (a loss scale whose gradients overflow fp16) skips the
 *   update (parameters unchanged bit for bit) and halves the scale; clean
 *   steps then update and, after growth_interval of them, double it;
 * - slices, concat and transposed views of fp16 activations stay fp16 views
 *   and give the fp32 gradients within fp16's rounding;
 * - a power-of-two loss scale on an fp32 graph changes nothing, bit for bit
 *   (the scale is divided out exactly);
 * - the planned peak of the cnn at batch 256 in fp16 is at most 60% of fp32,
 *   and the mlp's at batch 64 (mostly model states) below fp32's;
 * - a convolution's weight gradient summed over 64 GEMMs (one per image) in
 *   fp16 and bf16 is within half a 16-bit ulp of the fp32 graph's: summed in
 *   fp32 (it was summed in the 16-bit gradient, rounded at every GEMM);
 * - misuse is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

enum { N = 8, C = 2, SIDE = 12, CLASSES = 5, PARAMS = 8 };

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *labels, *loss, *conv, *act;
  dlrt_tensor_t *params[PARAMS], *grads[PARAMS];
} net;

static void net_free(net *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
  memset(n, 0, sizeof *n);
}

static dlrt_tensor_t *param(net *n, int i, const char *name, int ndim, const int64_t *shape,
                            int64_t fan_in) {
  return n->params[i] = dlrt_param(n->g, name, ndim, shape, DLRT_INIT_FAN_IN_UNIFORM, fan_in, 0);
}

/* conv 3x3 pad 1 -> relu -> maxpool 2 -> conv 3x3 stride 2 pad 1 dilation
 * 1 -> relu -> maxpool 2 stride 1 (overlapping) -> conv 1x1 dilation 2 on a
 * padded map -> flatten -> linear -> relu -> h + h * (0.5 h) -> tanh ->
 * linear -> cross-entropy. `optimize`: with SGD updates. */
static int net_make(dlrt_device_t *dev, dlrt_dtype precision, int optimize, net *n) {
  memset(n, 0, sizeof *n);
  int rc = dlrt_graph_create(&n->g);
  if (rc < 0) return rc;
  dlrt_graph_t *g = n->g;
  if ((rc = dlrt_graph_set_precision(g, precision)) < 0) return rc;
  int64_t xs[4] = {N, C, SIDE, SIDE}, ls[1] = {N};
  int64_t w1s[4] = {4, C, 3, 3}, b1s[1] = {4}, w2s[4] = {6, 4, 3, 3}, b2s[1] = {6};
  int64_t w3s[4] = {5, 6, 2, 2}, w4s[2] = {16, 5 * 3 * 3}, b4s[1] = {16};
  int64_t w5s[2] = {CLASSES, 16};
  n->x = dlrt_input(g, "x", DLRT_F32, 4, xs);
  n->labels = dlrt_input(g, "labels", DLRT_I32, 1, ls);
  dlrt_tensor_t *h = dlrt_conv2d(g, n->x, param(n, 0, "w1", 4, w1s, C * 9),
                                 param(n, 1, "b1", 1, b1s, C * 9), 1, 1, 1);
  n->conv = dlrt_keep(g, h); /* kept before the backward pass: read back as fp32 */
  n->act = dlrt_relu(g, h);
  h = dlrt_max_pool2d(g, n->act, 2, 2);                                     /* 6 x 6 */
  h = dlrt_conv2d(g, h, param(n, 2, "w2", 4, w2s, 36), param(n, 3, "b2", 1, b2s, 36), 2, 1, 1);
  h = dlrt_max_pool2d(g, dlrt_relu(g, h), 2, 1);                            /* 3x3 -> 2x2 */
  h = dlrt_conv2d(g, h, param(n, 4, "w3", 4, w3s, 24), NULL, 1, 2, 2);      /* 2x2 -> 4 x 4 */
  h = dlrt_max_pool2d(g, h, 2, 1);                                          /* -> 3 x 3 */
  h = dlrt_relu(g, dlrt_linear(g, dlrt_flatten(g, h), param(n, 5, "w4", 2, w4s, 45),
                               param(n, 6, "b4", 1, b4s, 45)));
  h = dlrt_tanh(g, dlrt_add(g, h, dlrt_mul(g, h, dlrt_scale(g, h, 0.5f))));
  dlrt_tensor_t *logits = dlrt_linear(g, h, param(n, 7, "w5", 2, w5s, 16), NULL);
  n->loss = dlrt_cross_entropy(g, logits, n->labels, 0.0f);
  if ((rc = dlrt_graph_status(g)) < 0) return rc;
  if ((rc = dlrt_graph_backward(g, n->loss)) < 0) return rc;
  for (int i = 0; i < PARAMS; i++) n->grads[i] = dlrt_keep(g, dlrt_grad(g, n->params[i]));
  if (optimize) {
    dlrt_optimizer o = dlrt_optimizer_defaults(DLRT_OPT_SGD);
    o.lr = 0.05f;
    if ((rc = dlrt_graph_optimize(g, &o)) < 0) return rc;
  }
  if ((rc = dlrt_graph_status(g)) < 0) return rc;
  if ((rc = dlrt_exec_create(g, dev, 11, &n->e)) < 0) return rc;
  /* Inputs: a fixed pattern, labels 0..CLASSES-1. */
  float x[N * C * SIDE * SIDE];
  int32_t labels[N];
  for (int i = 0; i < N * C * SIDE * SIDE; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < N; i++) labels[i] = i % CLASSES;
  if ((rc = dlrt_exec_write(n->e, n->x, x, sizeof x)) < 0) return rc;
  return dlrt_exec_write(n->e, n->labels, labels, sizeof labels);
}

static int64_t numel(const dlrt_tensor_t *t) { return dlrt_tensor_numel(t); }

/* Reads the loss and every parameter gradient (fp32) into *loss and g[]. */
static int read_grads(net *n, float *loss, float **g) {
  int rc = dlrt_exec_read(n->e, n->loss, loss, sizeof *loss);
  for (int i = 0; i < PARAMS && rc == DLRT_OK; i++) {
    g[i] = malloc((size_t)numel(n->params[i]) * sizeof(float));
    if (!g[i]) return DLRT_ERR_OOM;
    rc = dlrt_exec_read(n->e, n->grads[i], g[i], (size_t)numel(n->params[i]) * sizeof(float));
  }
  return rc;
}

/* ||a - b|| / ||a|| */
static double rel_l2(const float *a, const float *b, int64_t count) {
  double d = 0, s = 0;
  for (int64_t i = 0; i < count; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    s += (double)a[i] * a[i];
  }
  return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* The parameters' bytes, for before/after comparisons. */
static unsigned char *params_bytes(net *n, size_t *bytes) {
  *bytes = 0;
  for (int i = 0; i < PARAMS; i++) *bytes += (size_t)numel(n->params[i]) * sizeof(float);
  unsigned char *out = malloc(*bytes), *at = out;
  for (int i = 0; i < PARAMS && out; i++) {
    size_t b = (size_t)numel(n->params[i]) * sizeof(float);
    if (dlrt_exec_read(n->e, n->params[i], at, b) < 0) {
      free(out);
      return NULL;
    }
    at += b;
  }
  return out;
}

static void free_grads(float **g) {
  for (int i = 0; i < PARAMS; i++) free(g[i]), g[i] = NULL;
}

static void compare_types(dlrt_device_t *dev, const char *spec) {
  net ref;
  float ref_loss, *ref_g[PARAMS] = {0};
  if (!tap_check(net_make(dev, DLRT_F32, 0, &ref), "%s: the fp32 model builds", spec)) {
    net_free(&ref);
    return;
  }
  int rc = dlrt_exec_run(ref.e, DLRT_RUN_TRAIN);
  if (rc == DLRT_OK) rc = read_grads(&ref, &ref_loss, ref_g);
  tap_check(rc, "%s: fp32 forward and backward", spec);
  net_free(&ref);
  if (rc < 0) {
    free_grads(ref_g);
    return;
  }
  /* Tolerances: a few roundings of the type's unit (2^-11, 2^-8) through
   * five layers. */
  const struct { dlrt_dtype t; double tol; } types[] = {{DLRT_F16, 1e-2}, {DLRT_BF16, 6e-2}};
  for (int k = 0; k < 2; k++) {
    const char *tn = dlrt_dtype_name(types[k].t);
    net n;
    float loss, *g[PARAMS] = {0};
    if (!tap_check(net_make(dev, types[k].t, 0, &n), "%s: the %s model builds", spec, tn)) {
      net_free(&n);
      continue;
    }
    is_int(dlrt_tensor_dtype(n.conv), DLRT_F32, "%s %s: the kept conv output stays an fp32 handle",
           spec, tn);
    is_int(dlrt_tensor_dtype(n.act), types[k].t, "%s %s: activations are stored in %s", spec,
           tn, tn);
    int params_f32 = 1;
    for (int i = 0; i < PARAMS; i++)
      params_f32 &= dlrt_tensor_dtype(n.params[i]) == DLRT_F32 &&
                    dlrt_tensor_dtype(n.grads[i]) == DLRT_F32;
    ok(params_f32, "%s %s: parameters and their gradients are fp32", spec, tn);
    is_int(dlrt_tensor_dtype(n.loss), DLRT_F32, "%s %s: the loss is fp32", spec, tn);
    dlrt_exec_info info;
    if (dlrt_exec_info_get(n.e, &info) == DLRT_OK) diag("%s %s: planned peak %llu bytes", spec,
                                                       tn, (unsigned long long)info.planned_peak_bytes);
    rc = dlrt_exec_run(n.e, DLRT_RUN_TRAIN);
    if (rc == DLRT_OK) rc = read_grads(&n, &loss, g);
    if (tap_check(rc, "%s %s: forward and backward", spec, tn)) {
      ok(fabs(loss - ref_loss) <= types[k].tol * fabs(ref_loss), "%s %s: loss %.6f vs fp32 %.6f",
         spec, tn, loss, ref_loss);
      double worst = 0;
      int differs = 0;
      for (int i = 0; i < PARAMS; i++) {
        double d = rel_l2(ref_g[i], g[i], numel(n.params[i]));
        diag("%s %s: d%s relative L2 error %.2e", spec, tn, dlrt_tensor_name(n.params[i]), d);
        if (d > worst) worst = d;
        differs |= memcmp(ref_g[i], g[i], (size_t)numel(n.params[i]) * sizeof(float)) != 0;
      }
      ok(worst <= types[k].tol, "%s %s: every parameter gradient within %.0e of fp32 "
         "(worst %.2e)", spec, tn, types[k].tol, worst);
      ok(differs, "%s %s: the gradients are not the fp32 ones bit for bit (16-bit storage ran)",
         spec, tn);
    }
    free_grads(g);
    net_free(&n);
  }
  free_grads(ref_g);
}

/* Views of 16-bit tensors: slices along the feature axis (joined again in
 * fp32 by concat, whose gradient is slices of dy) and transposed views. The
 * views stay in the compute type; their gradients come back right. */
static int views_run(dlrt_device_t *dev, dlrt_dtype precision, float *g1, float *g2,
                     dlrt_dtype *slice_type) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  int rc = dlrt_graph_create(&g);
  if (rc < 0) return rc;
  dlrt_graph_set_precision(g, precision);
  int64_t xs[2] = {N, 12}, ls[1] = {N}, w1s[2] = {16, 12}, w2s[2] = {CLASSES, 16};
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, xs);
  dlrt_tensor_t *labels = dlrt_input(g, "labels", DLRT_I32, 1, ls);
  dlrt_tensor_t *w1 = dlrt_param(g, "w1", 2, w1s, DLRT_INIT_FAN_IN_UNIFORM, 12, 16);
  dlrt_tensor_t *w2 = dlrt_param(g, "w2", 2, w2s, DLRT_INIT_FAN_IN_UNIFORM, 16, CLASSES);
  dlrt_tensor_t *h = dlrt_relu(g, dlrt_linear(g, x, w1, NULL));               /* N x 16 */
  dlrt_tensor_t *halves[2] = {dlrt_slice(g, h, 1, 8, 8), dlrt_slice(g, h, 1, 0, 8)};
  h = dlrt_add(g, h, dlrt_scale(g, dlrt_concat(g, 2, halves, 1), 0.5f));   /* rotated by 8 */
  h = dlrt_add(g, h, dlrt_transpose2d(g, dlrt_scale(g, dlrt_transpose2d(g, h), 0.25f)));
  dlrt_tensor_t *loss = dlrt_cross_entropy(g, dlrt_linear(g, h, w2, NULL), labels, 0.0f);
  if ((rc = dlrt_graph_status(g)) == DLRT_OK) rc = dlrt_graph_backward(g, loss);
  if (rc == DLRT_OK) *slice_type = dlrt_tensor_dtype(halves[0]); /* retyped by now */
  dlrt_tensor_t *d1 = dlrt_keep(g, dlrt_grad(g, w1)), *d2 = dlrt_keep(g, dlrt_grad(g, w2));
  if (rc == DLRT_OK) rc = dlrt_graph_status(g);
  if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 11, &e);
  float xv[N * 12];
  int32_t lv[N];
  for (int i = 0; i < N * 12; i++) xv[i] = (float)((i * 29) % 53) / 26.0f - 1.0f;
  for (int i = 0; i < N; i++) lv[i] = (i * 3) % CLASSES;
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, xv, sizeof xv);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, labels, lv, sizeof lv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, d1, g1, 16 * 12 * sizeof(float));
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, d2, g2, CLASSES * 16 * sizeof(float));
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return rc;
}

static void views_in_low_precision(dlrt_device_t *dev, const char *spec) {
  float r1[16 * 12], r2[CLASSES * 16], g1[16 * 12], g2[CLASSES * 16];
  dlrt_dtype ref_type = DLRT_F32, low_type = DLRT_F32;
  int rc = views_run(dev, DLRT_F32, r1, r2, &ref_type);
  if (!tap_check(rc, "%s: fp32 slices, concat and transposed views run", spec)) return;
  rc = views_run(dev, DLRT_F16, g1, g2, &low_type);
  if (!tap_check(rc, "%s: fp16 slices, concat and transposed views run", spec)) return;
  is_int(low_type, DLRT_F16, "%s: a slice of an fp16 activation is an fp16 view", spec);
  double e1 = rel_l2(r1, g1, 16 * 12), e2 = rel_l2(r2, g2, CLASSES * 16);
  ok(e1 <= 1e-2 && e2 <= 1e-2 && memcmp(r1, g1, sizeof r1) != 0,
     "%s: fp16 gradients through the views within 1e-2 of fp32 (%.2e, %.2e)", spec, e1, e2);
}

/* A forward-only graph with an f16 input (no backward pass, whose start
 * would rewrite it): the executor rewrites it; y = relu(a b) kept in fp32. */
static void f16_input_forward(dlrt_device_t *dev, const char *spec) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  dlrt_graph_set_precision(g, DLRT_F16);
  dlrt_tensor_t *a = dlrt_input(g, "a", DLRT_F16, 2, (int64_t[]){2, 3});
  dlrt_tensor_t *b = dlrt_input(g, "b", DLRT_F32, 2, (int64_t[]){3, 2});
  dlrt_tensor_t *y = dlrt_keep(g, dlrt_relu(g, dlrt_matmul(g, a, b, 0, 0)));
  int rc = dlrt_exec_create(g, dev, 1, &e);
  /* a = [[1, -2, 3], [0.5, 1, -1]] as fp16 bits; b = [[1, 2], [1, -1], [0.5, 1]] */
  uint16_t av[6] = {0x3c00, 0xc000, 0x4200, 0x3800, 0x3c00, 0xbc00};
  float bv[6] = {1, 2, 1, -1, 0.5f, 1}, yv[4], want[4] = {0.5f, 7, 1, 0};
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, a, av, sizeof av);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, b, bv, sizeof bv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, y, yv, sizeof yv);
  if (tap_check(rc, "%s: a forward-only graph with an f16 input runs", spec))
    is_mem(yv, want, sizeof yv, "%s: relu(a b) with a in f16 (%g %g %g %g)", spec, yv[0], yv[1],
           yv[2], yv[3]);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

static void loss_scaling(dlrt_device_t *dev, const char *spec) {
  net n;
  if (!tap_check(net_make(dev, DLRT_F16, 1, &n), "%s: fp16 model with SGD builds", spec)) {
    net_free(&n);
    return;
  }
  dlrt_loss_scaler s = dlrt_loss_scaler_defaults();
  dlrt_loss_scale_state st;
  s.init_scale = DLRT_LOSS_SCALE_MAX; /* d logits x 2^64: inf once stored in fp16 */
  is_status(dlrt_exec_set_loss_scaler(n.e, &s), DLRT_OK, "%s: loss scaler set", spec);
  size_t bytes, after_bytes;
  unsigned char *before = params_bytes(&n, &bytes);
  tap_check(dlrt_exec_run(n.e, DLRT_RUN_TRAIN), "%s: a step with a planted overflow runs", spec);
  unsigned char *after = params_bytes(&n, &after_bytes);
  ok(before && after && bytes == after_bytes && memcmp(before, after, bytes) == 0,
     "%s: the overflowing step is skipped: parameters unchanged bit for bit", spec);
  dlrt_exec_loss_scale(n.e, &st);
  ok(st.scale == DLRT_LOSS_SCALE_MAX / 2 && st.skipped_steps == 1 && st.last_skipped,
     "%s: scale halved to %g, %lld skipped, last skipped %d", spec, st.scale,
     (long long)st.skipped_steps, st.last_skipped);
  free(after);

  s.init_scale = 256.0f;
  s.growth_interval = 2;
  dlrt_exec_set_loss_scaler(n.e, &s);
  tap_check(dlrt_exec_run(n.e, DLRT_RUN_TRAIN), "%s: a clean step", spec);
  dlrt_exec_loss_scale(n.e, &st);
  ok(st.scale == 256.0f && !st.last_skipped && st.skipped_steps == 1,
     "%s: after one clean step the scale stays %g (skipped %lld)", spec, st.scale,
     (long long)st.skipped_steps);
  after = params_bytes(&n, &after_bytes);
  ok(before && after && memcmp(before, after, bytes) != 0, "%s: the clean step updated the "
     "parameters", spec);
  tap_check(dlrt_exec_run(n.e, DLRT_RUN_TRAIN), "%s: a second clean step", spec);
  dlrt_exec_loss_scale(n.e, &st);
  ok(st.scale == 512.0f, "%s: after growth_interval (2) clean steps the scale doubles: %g",
     spec, st.scale);
  free(before);
  free(after);
  net_free(&n);

  /* fp32 with a power-of-two scale: the updates divide it out exactly. */
  net a, b;
  int rc = net_make(dev, DLRT_F32, 1, &a);
  if (rc == DLRT_OK) rc = net_make(dev, DLRT_F32, 1, &b);
  s = dlrt_loss_scaler_defaults();
  s.init_scale = 1024.0f;
  if (rc == DLRT_OK) rc = dlrt_exec_set_loss_scaler(b.e, &s);
  for (int step = 0; step < 3 && rc == DLRT_OK; step++) {
    rc = dlrt_exec_run(a.e, DLRT_RUN_TRAIN);
    if (rc == DLRT_OK) rc = dlrt_exec_run(b.e, DLRT_RUN_TRAIN);
  }
  if (tap_check(rc, "%s: fp32 with and without a loss scale of 1024, 3 steps", spec)) {
    unsigned char *pa = params_bytes(&a, &bytes), *pb = params_bytes(&b, &after_bytes);
    ok(pa && pb && memcmp(pa, pb, bytes) == 0, "%s: the same parameters bit for bit", spec);
    free(pa);
    free(pb);
  }
  net_free(&a);
  net_free(&b);
}

/* The planned peak (the measured one, tests/test-plan.sh) of `model` at
 * `batch` in fp32 (peak[0]) and fp16 (peak[1]). */
static void plan_peaks(dlrt_device_t *dev, const char *spec, const char *model, int64_t batch,
                       uint64_t peak[2]) {
  peak[0] = peak[1] = 0;
  for (int k = 0; k < 2; k++) {
    dlrt_trainer_config c = {.model = model, .batch = batch,
                             .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM), .seed = 1,
                             .precision = k ? DLRT_F16 : DLRT_F32};
    dlrt_trainer_t *t;
    dlrt_exec_info info;
    if (tap_check(dlrt_trainer_create(dev, &c, 28, 28, 10, &t), "%s: %s batch %lld %s", spec,
                  model, (long long)batch, k ? "fp16" : "fp32") &&
        dlrt_trainer_info(t, &info) == DLRT_OK)
      peak[k] = info.planned_peak_bytes;
    dlrt_trainer_destroy(t);
  }
}

/* The mlp at batch 64 holds little but its model states, and mixed
 * precision adds 16-bit copies of the weights: it used to peak above fp32
 * (11.83 MB against 11.45) with the 16-bit gradient of fc1's weight beside
 * its fp32 cast; the matmul now writes the fp32 gradient itself. */
static void mlp_memory(dlrt_device_t *dev, const char *spec) {
  uint64_t peak[2];
  plan_peaks(dev, spec, "mlp", 64, peak);
  ok(peak[0] > 0 && peak[1] > 0 && peak[1] < peak[0],
     "%s: mlp batch 64 planned peak fp16 %llu bytes is below fp32's %llu", spec,
     (unsigned long long)peak[1], (unsigned long long)peak[0]);
}

static void cnn_memory(dlrt_device_t *dev, const char *spec) {
  uint64_t peak[2];
  plan_peaks(dev, spec, "cnn", 256, peak);
  ok(peak[0] > 0 && (double)peak[1] <= 0.6 * (double)peak[0],
     "%s: cnn batch 256 planned peak fp16 %.1f MiB is %.0f%% of fp32 %.1f MiB (bar 60%%)", spec,
     (double)peak[1] / 1048576.0, 100.0 * (double)peak[1] / (double)(peak[0] ? peak[0] : 1),
     (double)peak[0] / 1048576.0);
}

/* One 16-bit ulp at |x| (normal numbers: 11 significant bits for fp16, 8
 * for bf16). */
static double ulp16(dlrt_dtype t, double x) {
  int e;
  frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
  return ldexp(1.0, e - 1 - (t == DLRT_F16 ? 10 : 7));
}

/* The weight gradient of y = conv2d(x, w) for the loss sum(y * r), i.e.
 * dW = sum over images and pixels of r x im2col(x)^T, from a graph of
 * compute type t (ckk 144 x 784 pixels per image, 64 images). With
 * DLRT_CONV_WORKSPACE at 64K each image is one GEMM of the sum, so a sum
 * kept in 16 bits would be rounded 64 times. x and r are multiples of 1/8
 * in [0, 1] that every type holds: the sums grow to some 10^4 and stay
 * exact in fp32 (multiples of 1/64 below 2^18). */
enum { WG_N = 64, WG_C = 16, WG_O = 16, WG_SIDE = 28 };
static int weight_gradient(dlrt_device_t *dev, dlrt_dtype t, float *dw) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  int rc = dlrt_graph_create(&g);
  if (rc < 0) return rc;
  if (t != DLRT_F32) dlrt_graph_set_precision(g, t);
  int64_t xs[4] = {WG_N, WG_C, WG_SIDE, WG_SIDE}, rs[4] = {WG_N, WG_O, WG_SIDE, WG_SIDE};
  int64_t ws[4] = {WG_O, WG_C, 3, 3};
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 4, xs), *r = dlrt_input(g, "r", DLRT_F32, 4, rs);
  dlrt_tensor_t *w = dlrt_param(g, "w", 4, ws, DLRT_INIT_FAN_IN_UNIFORM, WG_C * 9, WG_O * 9);
  dlrt_tensor_t *loss = dlrt_sum(g, dlrt_mul(g, dlrt_conv2d(g, x, w, NULL, 1, 1, 1), r));
  dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  dlrt_tensor_t *grad = NULL;
  if ((rc = dlrt_graph_backward(g, loss)) == DLRT_OK &&
      (grad = dlrt_keep(g, dlrt_grad(g, w))) != NULL &&
      (rc = dlrt_graph_optimize(g, &sgd)) == DLRT_OK)
    rc = dlrt_exec_create(g, dev, 1, &e);
  if (rc == DLRT_OK && !grad) rc = dlrt_graph_status(g);
  size_t nx = (size_t)(WG_N * WG_C * WG_SIDE * WG_SIDE);
  size_t nr = (size_t)(WG_N * WG_O * WG_SIDE * WG_SIDE);
  float *hx = malloc(nx * sizeof *hx), *hr = malloc(nr * sizeof *hr);
  if (!hx || !hr) bail_out("out of host memory");
  for (size_t i = 0; i < nx; i++) hx[i] = (float)(i * 7 % 9) / 8.0f;
  for (size_t i = 0; i < nr; i++) hr[i] = (float)(i * 5 % 7 + 1) / 8.0f;
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, hx, nx * sizeof *hx);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, r, hr, nr * sizeof *hr);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, grad, dw, (size_t)(WG_O * WG_C * 9) * sizeof *dw);
  free(hx);
  free(hr);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return rc;
}

/* A convolution's weight gradient in fp16 / bf16 sums its GEMMs in fp32
 * and is rounded once at most: every element within half a 16-bit ulp of
 * the fp32 graph's (it was summed into the 16-bit gradient, rounded once
 * per GEMM: several ulps off). */
static void conv_weight_gradient_sum(dlrt_device_t *dev, const char *spec) {
  enum { COUNT = WG_O * WG_C * 9 };
  static float want[COUNT], got[COUNT];
  if (!tap_check(weight_gradient(dev, DLRT_F32, want), "%s: fp32 convolution weight gradient "
                 "over %d images", spec, WG_N))
    return;
  const dlrt_dtype types[] = {DLRT_F16, DLRT_BF16};
  for (int k = 0; k < 2; k++) {
    const char *name = dlrt_dtype_name(types[k]);
    if (!tap_check(weight_gradient(dev, types[k], got), "%s: %s convolution weight gradient",
                   spec, name))
      continue;
    double worst = 0; /* in 16-bit ulps */
    for (int i = 0; i < COUNT; i++) {
      double err = fabs((double)got[i] - (double)want[i]);
      double ulps = want[i] != 0 ? err / ulp16(types[k], want[i]) : err > 0 ? INFINITY : 0;
      if (!(ulps <= worst)) worst = ulps;
    }
    ok(worst <= 0.5, "%s: %s: the weight gradient of 64 summed GEMMs is within half a %s ulp "
       "of fp32's (worst %.2f ulp): summed in fp32, not in 16 bits", spec, name, name, worst);
  }
}

static void misuse(void) {
  dlrt_graph_t *g;
  if (dlrt_graph_create(&g) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_graph_set_precision(g, DLRT_I32), DLRT_ERR_INVALID_ARG,
            "an integer compute type is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
  dlrt_graph_create(&g);
  int64_t s[2] = {2, 3};
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, s);
  dlrt_tensor_t *w = dlrt_param(g, "w", 2, s, DLRT_INIT_ZEROS, 0, 0);
  dlrt_graph_backward(g, dlrt_sum(g, dlrt_mul(g, x, w)));
  is_status(dlrt_graph_set_precision(g, DLRT_F16), DLRT_ERR_STATE,
            "setting the precision after dlrt_graph_backward is refused");
  dlrt_graph_destroy(g);
  /* 16-bit inputs: only of the graph's compute type, which then stays. */
  dlrt_graph_create(&g);
  ok(dlrt_input(g, "h", DLRT_F16, 2, s) == NULL && dlrt_graph_status(g) == DLRT_ERR_INVALID_ARG,
     "an f16 input of an fp32 graph is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
  dlrt_graph_create(&g);
  dlrt_graph_set_precision(g, DLRT_BF16);
  ok(dlrt_input(g, "h", DLRT_BF16, 2, s) != NULL, "a bf16 input of a bf16 graph is made");
  is_status(dlrt_graph_set_precision(g, DLRT_F32), DLRT_ERR_STATE,
            "then the precision cannot change: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
  dlrt_loss_scaler bad = dlrt_loss_scaler_defaults();
  bad.backoff_factor = 2.0f;
  dlrt_device_t *dev;
  net n;
  if (dlrt_device_open("cpu", &dev) == DLRT_OK && net_make(dev, DLRT_F16, 1, &n) == DLRT_OK) {
    is_status(dlrt_exec_set_loss_scaler(n.e, &bad), DLRT_ERR_INVALID_ARG,
              "a backoff factor above 1 is refused: %s", dlrt_last_error());
  } else {
    ok(0, "cpu model for the misuse checks: %s", dlrt_last_error());
  }
  net_free(&n);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  compare_types(dev, spec);
  views_in_low_precision(dev, spec);
  f16_input_forward(dev, spec);
  loss_scaling(dev, spec);
  cnn_memory(dev, spec);
  mlp_memory(dev, spec);
  conv_weight_gradient_sum(dev, spec);
}

int main(void) {
  /* One image per GEMM of a convolution's weight gradient (read when a
   * graph is built; the other checks do not depend on it). */
  setenv("DLRT_CONV_WORKSPACE", "64K", 1);
  if (dlrt_init() < 0 || dlrt_set_cpu_threads(2) < 0) bail_out("%s", dlrt_last_error());
  tap_for_each_device(run_device, NULL);
  misuse();
  dlrt_shutdown();
  return done_testing();
}
