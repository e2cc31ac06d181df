/*
 * grad-check.c — the finite-difference gradient check shared by the gradient
 * tests (see grad-check.h).
 */
#include "grad-check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

float uniform(uint32_t *s, float lo, float hi) {
  *s = *s * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(*s >> 8) * (1.0f / 16777216.0f);
}

double worse(double worst, double err) {
  return isnan(err) ? INFINITY : fmax(worst, err);
}

int64_t numel_of(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

static void shape_text(const dlrt_tensor_t *t, char *out, size_t size) {
  int64_t shape[DLRT_MAX_DIMS];
  int nd = dlrt_tensor_shape(t, shape);
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < nd && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", i ? "x" : "", (long long)shape[i]);
}

void fill_values(gcase *c, float *v, int64_t n, values_kind kind) {
  for (int64_t i = 0; i < n; i++) {
    if (kind == VALUES_RANDOM) {
      v[i] = uniform(&c->rng, -1.0f, 1.0f);
    } else if (kind == VALUES_AWAY) {
      float m = uniform(&c->rng, 0.1f, 1.0f);
      v[i] = uniform(&c->rng, -1.0f, 1.0f) < 0 ? -m : m;
    } else {
      v[i] = 0.1f * (float)(i - n / 2) + 0.05f;
    }
  }
  if (kind == VALUES_DISTINCT)
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
      c->rng = c->rng * 1664525u + 1013904223u;
      int64_t j = (int64_t)((c->rng >> 8) % (uint32_t)(i + 1));
      float t = v[i];
      v[i] = v[j], v[j] = t;
    }
}

dlrt_graph_t *new_graph(void) {
  dlrt_graph_t *g = NULL;
  if (dlrt_graph_create(&g) != DLRT_OK) bail_out("dlrt_graph_create: %s", dlrt_last_error());
  return g;
}

void case_begin(gcase *c, const char *fmt, ...) {
  memset(c, 0, sizeof *c);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->name, sizeof c->name, fmt, ap);
  va_end(ap);
  c->rng = 2024;
  for (const char *s = c->name; *s; s++) c->rng = c->rng * 31u + (unsigned char)*s;
  c->want_loss = NAN;
  c->fd_mode = DLRT_RUN_FORWARD;
  c->g = new_graph();
}

dlrt_tensor_t *cparam(gcase *c, const char *name, int ndim, const int64_t *shape,
                             values_kind kind) {
  int64_t n = numel_of(ndim, shape);
  if (c->np == CASE_MAX) bail_out("%s: too many parameters", c->name);
  dlrt_tensor_t *t = dlrt_param(c->g, name, ndim, shape, DLRT_INIT_FAN_IN_UNIFORM,
                                ndim > 1 ? n / shape[0] : n, 0);
  c->p[c->np] = t;
  if (kind != VALUES_INITIALISER) {
    c->pv[c->np] = malloc((size_t)n * sizeof(float));
    fill_values(c, c->pv[c->np], n, kind);
  }
  c->np++;
  return t;
}

dlrt_tensor_t *cinput(gcase *c, const char *name, int ndim, const int64_t *shape) {
  int64_t n = numel_of(ndim, shape);
  if (c->ni == CASE_MAX) bail_out("%s: too many inputs", c->name);
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) {
    float m = uniform(&c->rng, 0.25f, 1.25f);
    v[i] = uniform(&c->rng, -1.0f, 1.0f) < 0 ? -m : m;
  }
  c->iv[c->ni] = v;
  return c->in[c->ni++] = dlrt_input(c->g, name, DLRT_F32, ndim, shape);
}

dlrt_tensor_t *clabels(gcase *c, int64_t n, const int32_t *labels) {
  if (c->ni == CASE_MAX) bail_out("%s: too many inputs", c->name);
  c->iv[c->ni] = malloc((size_t)n * sizeof *labels);
  memcpy(c->iv[c->ni], labels, (size_t)n * sizeof *labels);
  return c->in[c->ni++] = dlrt_input(c->g, "labels", DLRT_I32, 1, &n);
}

/* sum(y * R), R a fresh random input of y's shape. */
dlrt_tensor_t *weighted(gcase *c, dlrt_tensor_t *y) {
  if (!y) return NULL;
  int64_t shape[DLRT_MAX_DIMS];
  int nd = dlrt_tensor_shape(y, shape);
  return dlrt_sum(c->g, dlrt_mul(c->g, y, cinput(c, "R", nd, shape)));
}

size_t bytes_of(const dlrt_tensor_t *t) {
  return (size_t)dlrt_tensor_numel(t) * sizeof(float);
}

/* The loss with parameter p set to v (the others as they are), from a run
 * of the given mode. */
static int loss_at(dlrt_exec_t *e, dlrt_run_mode mode, dlrt_tensor_t *p, const float *v,
                   dlrt_tensor_t *loss, float *out) {
  int st = dlrt_exec_write(e, p, v, bytes_of(p));
  if (st == DLRT_OK) st = dlrt_exec_run(e, mode);
  if (st == DLRT_OK) st = dlrt_exec_read(e, loss, out, sizeof *out);
  return st;
}

/* Kernels must not read what their outputs held before: the device's cache
 * is filled with NaN first, so that a read of stale memory shows. After the
 * cache is emptied, two 1 MiB buffers fill one fresh 2 MiB small-pool
 * segment; freed, they leave it whole and NaN, and the executor's buffers
 * are carved from it. */
void poison_cache(dlrt_device_t *dev) {
  dlrt_buffer_t *b[2] = {NULL, NULL};
  int st = dlrt_mem_empty_cache(dev);
  for (int i = 0; i < 2 && st == DLRT_OK; i++) {
    st = dlrt_buffer_alloc(dev, (size_t)1 << 20, NULL, &b[i]);
    if (st == DLRT_OK) st = dlrt_memset(b[i], 0, 0xff, (size_t)1 << 20, NULL);
  }
  if (st == DLRT_OK) st = dlrt_device_synchronize(dev);
  for (int i = 0; i < 2; i++) dlrt_buffer_free(b[i]);
  if (st != DLRT_OK) bail_out("filling the cache of %s with NaN: %s", dlrt_device_spec(dev),
                              dlrt_last_error());
}

/* Backward, one training run (no optimizer: nothing is updated), then each
 * gradient element against (f(p + h) - f(p - h)) / 2h. Frees the case. */
void case_check(gcase *c, dlrt_device_t *dev, dlrt_tensor_t *loss) {
  const char *spec = dlrt_device_spec(dev);
  dlrt_exec_t *e = NULL;
  int st = dlrt_graph_backward(c->g, loss);
  for (int i = 0; st == DLRT_OK && i < c->np; i++) {
    c->grad[i] = dlrt_keep(c->g, dlrt_grad(c->g, c->p[i]));
    if (!c->grad[i]) {
      ok(0, "%s %s: %s has a gradient", spec, c->name, dlrt_tensor_name(c->p[i]));
      goto done;
    }
  }
  if (st == DLRT_OK) {
    poison_cache(dev);
    st = dlrt_exec_create(c->g, dev, 7, &e);
  }
  for (int i = 0; st == DLRT_OK && i < c->ni; i++)
    st = dlrt_exec_write(e, c->in[i], c->iv[i], bytes_of(c->in[i]));
  for (int i = 0; st == DLRT_OK && i < c->np; i++) {
    if (!c->pv[i]) {
      c->pv[i] = malloc(bytes_of(c->p[i]));
      st = dlrt_exec_read(e, c->p[i], c->pv[i], bytes_of(c->p[i]));
    } else {
      st = dlrt_exec_write(e, c->p[i], c->pv[i], bytes_of(c->p[i]));
    }
  }
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st != DLRT_OK) {
    tap_check(st, "%s %s: backward, executor and a training run", spec, c->name);
    goto done;
  }

  /* Without dlrt_graph_optimize a training run updates nothing. */
  int unchanged = 1;
  for (int i = 0; i < c->np && st == DLRT_OK; i++) {
    float *now = malloc(bytes_of(c->p[i]));
    st = dlrt_exec_read(e, c->p[i], now, bytes_of(c->p[i]));
    unchanged &= st == DLRT_OK && memcmp(now, c->pv[i], bytes_of(c->p[i])) == 0;
    free(now);
  }
  ok(unchanged, "%s %s: the training run left the parameters as they were", spec, c->name);
  if (!isnan(c->want_loss)) {
    float got = NAN;
    st = dlrt_exec_read(e, loss, &got, sizeof got);
    ok(st == DLRT_OK && fabs(got - c->want_loss) <= 1e-5 * fmax(1.0, fabs(c->want_loss)),
       "%s %s: loss %.7g, host reference %.7g", spec, c->name, got, c->want_loss);
  }

  /* Every analytic gradient is read before the finite differences: those
   * taken in training runs overwrite the gradients. */
  float *analytic[CASE_MAX] = {NULL};
  for (int i = 0; i < c->np; i++) {
    analytic[i] = malloc(bytes_of(c->p[i]));
    if (st == DLRT_OK) st = dlrt_exec_read(e, c->grad[i], analytic[i], bytes_of(c->p[i]));
  }
  double worst = 0;
  int64_t total = 0;
  for (int i = 0; i < c->np; i++) {
    dlrt_tensor_t *p = c->p[i];
    int64_t n = dlrt_tensor_numel(p), bad = 0, first = -1;
    float *a = analytic[i], *v = malloc(bytes_of(p));
    double first_a = 0, first_n = 0, param_worst = 0;
    memcpy(v, c->pv[i], bytes_of(p));
    for (int64_t j = 0; j < n && st == DLRT_OK; j++) {
      float x = v[j], h = 1e-2f * fmaxf(1.0f, fabsf(x)), up = x + h, down = x - h, fu, fd;
      v[j] = up;
      st = loss_at(e, c->fd_mode, p, v, loss, &fu);
      v[j] = down;
      if (st == DLRT_OK) st = loss_at(e, c->fd_mode, p, v, loss, &fd);
      v[j] = x;
      double num = ((double)fu - fd) / ((double)up - down), an = a[j];
      double scale = fmax(1e-2, fmax(fabs(an), fabs(num))), err = fabs(an - num);
      param_worst = worse(param_worst, err / scale);
      if (!(err <= 2e-2 * scale + 1e-3) && bad++ == 0) first = j, first_a = an, first_n = num;
    }
    if (st == DLRT_OK) st = dlrt_exec_write(e, p, v, bytes_of(p)); /* restore */
    char shape[64];
    shape_text(p, shape, sizeof shape);
    if (!ok(st == DLRT_OK && bad == 0, "%s %s: d%s (%s) matches central differences, worst "
            "relative error %.1e", spec, c->name, dlrt_tensor_name(p), shape, param_worst)) {
      if (st != DLRT_OK) diag("%s", dlrt_last_error());
      else diag("%lld of %lld elements off; first: element %lld (value %g): analytic %.6g, "
                "central difference %.6g", (long long)bad, (long long)n, (long long)first,
                c->pv[i][first], first_a, first_n);
    }
    worst = worse(worst, param_worst);
    total += n;
    free(a);
    free(v);
  }
  diag("%s %s: worst relative error %.2e over %lld gradient elements", spec, c->name, worst,
       (long long)total);
done:
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(c->g);
  for (int i = 0; i < c->np; i++) free(c->pv[i]);
  for (int i = 0; i < c->ni; i++) free(c->iv[i]);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
