/*
 * test-host-optim.c — dlrt_host_optimizer_update, the optimizer over host
 * memory that offloaded optimizer state uses: for SGD (momentum, Nesterov,
 * weight decay), Adam and AdamW over 5 updates, the same bits as the
 * kernels/optim.h kernel it runs (the cpu backend's native version where
 * it has one), on 1 and 2 threads alike, and within 1e-6 relative of a
 * double-precision reference of torch.optim's formulas (bias correction,
 * decoupled decay, a gradient scale); a parameter left out of decay is not
 * decayed; bad arguments are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "optim.h"
#include "tap.h"

enum { N = 100003, STEPS = 5 };

static float *fill(uint32_t seed, float lo, float hi) {
  float *x = malloc(sizeof(float) * N);
  for (int i = 0; i < N; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
  }
  return x;
}

/* torch.optim's Adam / AdamW step in double. */
static void reference_adam(const dlrt_optimizer *o, int step, double *p, double *m, double *v,
                           const float *g, float scale, int decay) {
  double b1 = o->beta1, b2 = o->beta2, wd = decay ? o->weight_decay : 0;
  for (int i = 0; i < N; i++) {
    double grad = (double)g[i] * scale;
    if (o->kind == DLRT_OPT_ADAMW) p[i] *= 1 - o->lr * wd;
    else grad += wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * grad;
    v[i] = b2 * v[i] + (1 - b2) * grad * grad;
    double mh = m[i] / (1 - pow(b1, step + 1)), vh = v[i] / (1 - pow(b2, step + 1));
    p[i] -= o->lr * mh / (sqrt(vh) + o->eps);
  }
}

static double max_rel(const float *a, const double *b) {
  double top = 0, err = 0;
  for (int i = 0; i < N; i++) top = fmax(top, fabs(b[i])), err = fmax(err, fabs(a[i] - b[i]));
  return err / top;
}

static void check(dlrt_optimizer_kind kind, int decay) {
  dlrt_optimizer o = dlrt_optimizer_defaults(kind);
  o.lr = kind == DLRT_OPT_SGD ? 0.05f : 2e-3f;
  o.weight_decay = 0.1f;
  if (kind == DLRT_OPT_SGD) o.momentum = 0.9f, o.nesterov = 1;
  const char *name = dlrt_optimizer_name(kind);
  float *p[2] = {fill(1, -1, 1), fill(1, -1, 1)}, *s0[2] = {calloc(N, 4), calloc(N, 4)};
  float *s1[2] = {calloc(N, 4), calloc(N, 4)}, *q = fill(1, -1, 1), *q0 = calloc(N, 4);
  float *q1 = calloc(N, 4);
  double *rp = malloc(sizeof(double) * N), *rm = calloc(N, 8), *rv = calloc(N, 8);
  for (int i = 0; i < N; i++) rp[i] = p[0][i];
  const float scale = 0.5f;
  int rc = DLRT_OK;
  for (int step = 0; step < STEPS && rc == DLRT_OK; step++) {
    float *g = fill(100 + (uint32_t)step, -2, 2);
    for (int t = 0; t < 2 && rc == DLRT_OK; t++) {
      dlrt_set_cpu_threads(t + 1);
      rc = dlrt_host_optimizer_update(&o, step, p[t], s0[t], s1[t], g, N, decay, scale);
    }
    /* The kernel itself, on the test's thread. */
    float wd = decay ? o.weight_decay : 0.0f;
    if (kind == DLRT_OPT_SGD) {
      dlrt_k_sgd_update(0, N, q, q0, g, N, o.lr, o.momentum, wd, scale, o.nesterov, step == 0);
    } else {
      double t1 = step + 1;
      dlrt_k_adam_update(0, N, q, q0, q1, g, N, o.lr, o.beta1, o.beta2, o.eps, wd,
                         (float)(o.lr / (1.0 - pow(o.beta1, t1))),
                         (float)sqrt(1.0 - pow(o.beta2, t1)), scale, kind == DLRT_OPT_ADAMW);
      reference_adam(&o, step, rp, rm, rv, g, scale, decay);
    }
    free(g);
  }
  if (tap_check(rc, "%s%s: %d updates of %d parameters", name, decay ? "" : " (no decay)", STEPS,
                N)) {
    ok(memcmp(p[0], p[1], sizeof(float) * N) == 0 && memcmp(s0[0], s0[1], sizeof(float) * N) == 0,
       "%s%s: 1 and 2 threads give the same bits", name, decay ? "" : " (no decay)");
    ok(memcmp(p[0], q, sizeof(float) * N) == 0 && memcmp(s0[0], q0, sizeof(float) * N) == 0 &&
           (kind == DLRT_OPT_SGD || memcmp(s1[0], q1, sizeof(float) * N) == 0),
       "%s%s: the same bits as kernels/optim.h's kernel", name, decay ? "" : " (no decay)");
    if (kind != DLRT_OPT_SGD) {
      double err = max_rel(p[0], rp);
      ok(err <= 1e-6, "%s%s: within %.2g of torch.optim's formulas in double (bound 1e-6)",
         name, decay ? "" : " (no decay)", err);
    }
  }
  for (int t = 0; t < 2; t++) free(p[t]), free(s0[t]), free(s1[t]);
  free(q), free(q0), free(q1), free(rp), free(rm), free(rv);
}

int main(void) {
  if (dlrt_init() < 0) bail_out("%s", dlrt_last_error());
  check(DLRT_OPT_SGD, 1);
  check(DLRT_OPT_ADAM, 1);
  check(DLRT_OPT_ADAMW, 1);
  check(DLRT_OPT_ADAMW, 0);
  dlrt_optimizer adam = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
  float x[4] = {0}, y[4] = {0};
  is_status(dlrt_host_optimizer_update(&adam, 0, x, y, NULL, x, 4, 1, 1.0f), DLRT_ERR_INVALID_ARG,
            "Adam without its second moment is refused: %s", dlrt_last_error());
  is_status(dlrt_host_optimizer_update(&adam, -1, x, y, y, x, 4, 1, 1.0f), DLRT_ERR_INVALID_ARG,
            "a negative step is refused");
  adam.lr = NAN;
  is_status(dlrt_host_optimizer_update(&adam, 0, x, y, y, x, 4, 1, 1.0f), DLRT_ERR_INVALID_ARG,
            "a NaN learning rate is refused");
  dlrt_shutdown();
  return done_testing();
}
