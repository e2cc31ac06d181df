/* test-shape-ops.c — gradients of the shape and broadcast ops (concat,
 * slice, sum / mean over an axis, transpose, broadcasting add / sub / mul /
 * div, embedding) against central differences, and their forward values
 * against host references, on every device present (tap_for_each_device). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"

typedef dlrt_tensor_t *(*build_fn)(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                   dlrt_tensor_t *ids);

static dlrt_tensor_t *op_concat(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                dlrt_tensor_t *ids) {
  (void)ids;
  dlrt_tensor_t *xs[3] = {a, b, a};
  return dlrt_concat(g, 3, xs, 1);
}
static dlrt_tensor_t *op_slice(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                               dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  return dlrt_slice(g, a, 1, 1, 2);
}
static dlrt_tensor_t *op_sum1(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                              dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  return dlrt_sum_axis(g, a, 1);
}
static dlrt_tensor_t *op_mean2(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                               dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  return dlrt_mean_axis(g, a, 2);
}
static dlrt_tensor_t *op_transpose(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                   dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  return dlrt_transpose2d(g, dlrt_reshape(g, a, 2, (int64_t[]){6, 4}));
}
static dlrt_tensor_t *op_transpose_axes(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                        dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  return dlrt_transpose_axes(g, a, 0, 2); /* 4 x 3 x 2 */
}
static dlrt_tensor_t *op_reshape_transposed(dlrt_graph_t *g, dlrt_tensor_t *a,
                                            dlrt_tensor_t *b, dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  /* A reshape of a strided view copies it dense first (a forward node of
   * its own, whose gradient is dy's), as multi-head attention written with
   * the older ops does: 2 x 4 x 3 -> 8 x 3. */
  return dlrt_reshape(g, dlrt_transpose_axes(g, a, 1, 2), 2, (int64_t[]){8, 3});
}
static dlrt_tensor_t *op_slice_last(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                    dlrt_tensor_t *ids) {
  (void)b, (void)ids;
  return dlrt_slice(g, a, 2, 1, 3);
}
static dlrt_tensor_t *op_slice_transposed(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                          dlrt_tensor_t *ids) {
  (void)ids;
  /* A slice of a transposed view, used twice (two gradient contributions
   * into one view) and added to a dense tensor. */
  dlrt_tensor_t *v = dlrt_slice(g, dlrt_transpose_axes(g, a, 1, 2), 2, 1, 2); /* 2 x 4 x 2 */
  dlrt_tensor_t *w = dlrt_slice(g, dlrt_transpose_axes(g, b, 1, 2), 2, 0, 2);
  return dlrt_mul(g, dlrt_add(g, v, w), v);
}
static dlrt_tensor_t *op_bmm_view(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                  dlrt_tensor_t *ids) {
  (void)ids;
  /* Batched A^T B and A B^T through transposed views (the flags flip). */
  dlrt_tensor_t *at = dlrt_transpose_axes(g, a, 1, 2), *bt = dlrt_transpose_axes(g, b, 1, 2);
  return dlrt_add(g, dlrt_matmul(g, at, b, 0, 0), dlrt_matmul(g, bt, a, 0, 0)); /* 2 x 4 x 4 */
}
static dlrt_tensor_t *op_badd(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                              dlrt_tensor_t *ids) {
  (void)ids;
  return dlrt_add(g, a, dlrt_slice(g, dlrt_reshape(g, b, 2, (int64_t[]){3, 8}), 1, 0, 4));
}
static dlrt_tensor_t *op_bmix(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                              dlrt_tensor_t *ids) {
  (void)ids;
  /* a (2 x 3 x 4) against b's first 4 values: sub, mul, div. */
  dlrt_tensor_t *v = dlrt_slice(g, dlrt_reshape(g, b, 1, (int64_t[]){24}), 0, 0, 4);
  dlrt_tensor_t *w = dlrt_add(g, dlrt_scale(g, v, 0.1f), v); /* still near v, away from 0 */
  return dlrt_div(g, dlrt_mul(g, dlrt_sub(g, a, v), w), w);
}
static dlrt_tensor_t *op_bmm_nt(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                dlrt_tensor_t *ids) {
  (void)ids;
  return dlrt_matmul(g, a, b, 0, 1); /* 2 x (3 x 4) (4 x 3) */
}
static dlrt_tensor_t *op_bmm_tn(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                dlrt_tensor_t *ids) {
  (void)ids;
  return dlrt_matmul(g, a, b, 1, 0); /* 2 x (4 x 3) (3 x 4) */
}
static dlrt_tensor_t *op_bmm_2d(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                dlrt_tensor_t *ids) {
  (void)ids;
  return dlrt_matmul(g, a, dlrt_reshape(g, b, 2, (int64_t[]){4, 6}), 0, 0); /* 2 x 3 x 6 */
}
static dlrt_tensor_t *op_embed(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                               dlrt_tensor_t *ids) {
  (void)b;
  return dlrt_embedding(g, ids, dlrt_reshape(g, a, 2, (int64_t[]){6, 4}));
}

/* x is 2 x 3 x 4 and b 2 x 3 x 4, both parameters with values away from 0;
 * loss = sum(op(...) * r). */
static void check(const char *spec, dlrt_device_t *dev, const char *name, build_fn fn) {
  int64_t shape[3] = {2, 3, 4}, ids_shape[1] = {5};
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  dlrt_tensor_t *a = dlrt_param(g, "a", 3, shape, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *b = dlrt_param(g, "b", 3, shape, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *ids = dlrt_input(g, "ids", DLRT_I32, 1, ids_shape);
  dlrt_tensor_t *y = fn(g, a, b, ids);
  int64_t ys[DLRT_MAX_DIMS];
  int nd = y ? dlrt_tensor_shape(y, ys) : 0;
  dlrt_tensor_t *r = y ? dlrt_input(g, "r", DLRT_F32, nd, ys) : NULL;
  dlrt_tensor_t *loss = dlrt_sum(g, dlrt_mul(g, y, r));
  int rc = dlrt_graph_status(g);
  if (rc == DLRT_OK) rc = dlrt_graph_backward(g, loss);
  dlrt_tensor_t *grads[2] = {dlrt_keep(g, dlrt_grad(g, a)), dlrt_keep(g, dlrt_grad(g, b))};
  if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 1, &e);
  float av[24], bv[24], rv[256];
  int32_t idv[5] = {3, 0, 5, 3, 1};
  for (int i = 0; i < 24; i++) {
    av[i] = 0.6f + 0.05f * (float)((i * 7) % 24);
    bv[i] = (i % 2 ? 1.0f : -1.0f) * (0.7f + 0.03f * (float)i);
  }
  for (int i = 0; i < 256; i++) rv[i] = sinf(0.9f * (float)i + 0.3f);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, a, av, sizeof av);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, b, bv, sizeof bv);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, ids, idv, sizeof idv);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, r, rv, (size_t)dlrt_tensor_numel(r) * 4);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (!tap_check(rc, "%s: %s builds and runs", spec, name)) goto out;
  double worst = 0;
  int checked = 0;
  dlrt_tensor_t *params[2] = {a, b};
  float *values[2] = {av, bv};
  /* Every analytic gradient first: the finite-difference runs below
   * overwrite the kept gradients (the last one with a value perturbed). */
  float grad_of[2][24];
  for (int k = 0; k < 2; k++)
    if (grads[k]) dlrt_exec_read(e, grads[k], grad_of[k], sizeof grad_of[k]);
  for (int k = 0; k < 2; k++) {
    if (!grads[k]) continue;
    const float *grad = grad_of[k];
    for (int i = 0; i < 24; i++) {
      const float h = 1e-2f, orig = values[k][i];
      float up, down;
      values[k][i] = orig + h;
      dlrt_exec_write(e, params[k], values[k], sizeof av);
      dlrt_exec_run(e, DLRT_RUN_TRAIN);
      dlrt_exec_read(e, loss, &up, 4);
      values[k][i] = orig - h;
      dlrt_exec_write(e, params[k], values[k], sizeof av);
      dlrt_exec_run(e, DLRT_RUN_TRAIN);
      dlrt_exec_read(e, loss, &down, 4);
      values[k][i] = orig;
      dlrt_exec_write(e, params[k], values[k], sizeof av);
      double num = ((double)up - down) / (2.0 * h);
      double err = fabs(num - grad[i]) / fmax(1e-2, fmax(fabs(num), fabs(grad[i])));
      if (!(err <= worst)) worst = err;
      checked++;
    }
  }
  ok(checked > 0 && worst < 2e-2, "%s: %s: %d gradient elements match central differences "
     "(worst relative error %.2e)", spec, name, checked, worst);
out:
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

/* Forward values of concat, slice, sum over an axis and embedding. */
static void check_values(const char *spec, dlrt_device_t *dev) {
  int64_t shape[2] = {2, 3}, ids_shape[1] = {3};
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, shape);
  dlrt_tensor_t *ids = dlrt_input(g, "ids", DLRT_I32, 1, ids_shape);
  dlrt_tensor_t *xs[2] = {x, x};
  dlrt_tensor_t *cat = dlrt_keep(g, dlrt_concat(g, 2, xs, 0));
  dlrt_tensor_t *sl = dlrt_keep(g, dlrt_slice(g, x, 1, 1, 2));
  dlrt_tensor_t *sum = dlrt_keep(g, dlrt_sum_axis(g, x, 0));
  dlrt_tensor_t *emb = dlrt_keep(g, dlrt_embedding(g, ids, dlrt_transpose2d(g, x)));
  int rc = dlrt_exec_create(g, dev, 1, &e);
  float v[6] = {1, 2, 3, 4, 5, 6}, c[12], s[4], m[3], em[6];
  int32_t id[3] = {2, -1, 0};
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, v, sizeof v);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, ids, id, sizeof id);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, cat, c, sizeof c);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, sl, s, sizeof s);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, sum, m, sizeof m);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, emb, em, sizeof em);
  if (tap_check(rc, "%s: forward values run", spec)) {
    static const float want_c[12] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
    static const float want_s[4] = {2, 3, 5, 6}, want_m[3] = {5, 7, 9};
    static const float want_e[6] = {3, 6, 0, 0, 1, 4}; /* rows of x^T; id -1 gives zeros */
    is_mem(c, want_c, sizeof c, "%s: concat along axis 0", spec);
    is_mem(s, want_s, sizeof s, "%s: slice [1, 3) of axis 1", spec);
    is_mem(m, want_m, sizeof m, "%s: sum over axis 0", spec);
    is_mem(em, want_e, sizeof em, "%s: embedding rows (an out-of-range id gives zeros)", spec);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

/* Views: a 2-D transpose swaps the strides, a slice along the leading axis
 * moves the offset; neither copies. A matmul reads a transposed operand in
 * place, an elementwise op gets a dense copy; reads give the view's values. */
static void check_views(const char *spec, dlrt_device_t *dev) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  int64_t xs[2] = {3, 4}, ys[2] = {3, 2};
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, xs);
  dlrt_tensor_t *y = dlrt_input(g, "y", DLRT_F32, 2, ys);
  dlrt_tensor_t *xt = dlrt_keep(g, dlrt_transpose2d(g, x));             /* 4 x 3 */
  dlrt_tensor_t *rows = dlrt_keep(g, dlrt_slice(g, x, 0, 1, 2));        /* rows 1, 2 */
  dlrt_tensor_t *prod = dlrt_keep(g, dlrt_matmul(g, xt, y, 0, 0));      /* x^T y: 4 x 2 */
  dlrt_tensor_t *twice = dlrt_keep(g, dlrt_add(g, xt, xt));             /* a dense copy */
  int64_t st[DLRT_MAX_DIMS], at = -1;
  int view = dlrt_tensor_layout(xt, st, &at);
  ok(view == 1 && st[0] == 1 && st[1] == 4 && at == 0,
     "%s: transpose2d is a view with strides (1, 4) (%d: %lld %lld, offset %lld)", spec, view,
     (long long)st[0], (long long)st[1], (long long)at);
  view = dlrt_tensor_layout(rows, st, &at);
  ok(view == 1 && st[0] == 4 && st[1] == 1 && at == 4,
     "%s: a slice of rows is a view at offset 4 (%d: offset %lld)", spec, view, (long long)at);
  int rc = dlrt_exec_create(g, dev, 1, &e);
  float xv[12], yv[6], t[12], r[8], pv[8], tw[12];
  for (int i = 0; i < 12; i++) xv[i] = (float)(i + 1);
  for (int i = 0; i < 6; i++) yv[i] = (float)(i % 3) - 1.0f;
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, xv, sizeof xv);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, y, yv, sizeof yv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, xt, t, sizeof t);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, rows, r, sizeof r);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, prod, pv, sizeof pv);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, twice, tw, sizeof tw);
  if (tap_check(rc, "%s: views run", spec)) {
    float want_t[12], want_p[8] = {0}, want_tw[12];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++) want_t[i * 3 + j] = xv[j * 4 + i], want_tw[i * 3 + j] = 2 * xv[j * 4 + i];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 2; j++)
        for (int k = 0; k < 3; k++) want_p[i * 2 + j] += xv[k * 4 + i] * yv[k * 2 + j];
    is_mem(t, want_t, sizeof t, "%s: the transposed view reads as x^T", spec);
    is_mem(r, xv + 4, sizeof r, "%s: the slice view reads rows 1 and 2", spec);
    int close = 1;
    for (int i = 0; i < 8; i++) close &= fabsf(pv[i] - want_p[i]) <= 1e-5f;
    ok(close, "%s: matmul of the transposed view is x^T y", spec);
    is_mem(tw, want_tw, sizeof tw, "%s: add reads a dense copy of the view", spec);
  }
  float back[12];
  is_status(dlrt_exec_write(e, rows, back, sizeof r), DLRT_ERR_INVALID_ARG,
            "%s: writing a slice view is refused: %s", spec, dlrt_last_error());
  /* A second executor of the same graph reads the transposed view as the
   * first does (the layout pass flips a matmul's flag once). */
  dlrt_exec_t *e2 = NULL;
  float pv2[8] = {0};
  rc = dlrt_exec_create(g, dev, 1, &e2);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e2, x, xv, sizeof xv);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e2, y, yv, sizeof yv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e2, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e2, prod, pv2, sizeof pv2);
  if (tap_check(rc, "%s: a second executor of the graph runs", spec))
    is_mem(pv2, pv, sizeof pv, "%s: and its matmul of the transposed view is the first's", spec);
  dlrt_exec_destroy(e2);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

/* An elementwise node may write over its first input where that input's
 * life ends, but not when another input views the same storage elsewhere:
 * y = 1 (x + x[1, :]) (broadcast over the rows), x = relu(p). */
static void check_inplace_views(const char *spec, dlrt_device_t *dev) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  dlrt_tensor_t *p = dlrt_input(g, "p", DLRT_F32, 2, (int64_t[]){4, 6});
  dlrt_tensor_t *x = dlrt_relu(g, p);
  dlrt_tensor_t *row = dlrt_reshape(g, dlrt_slice(g, x, 0, 1, 1), 1, (int64_t[]){6});
  /* (kept outputs are never written in place: the sum is scaled first) */
  dlrt_tensor_t *y = dlrt_keep(g, dlrt_scale(g, dlrt_add(g, x, row), 1.0f));
  int rc = dlrt_exec_create(g, dev, 1, &e);
  float pv[24], yv[24], want[24];
  for (int i = 0; i < 24; i++) pv[i] = (float)(i + 1);
  for (int i = 0; i < 24; i++) want[i] = pv[i] + pv[6 + i % 6];
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, p, pv, sizeof pv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, y, yv, sizeof yv);
  if (tap_check(rc, "%s: x + x[1, :] runs", spec))
    is_mem(yv, want, sizeof yv, "%s: x + x[1, :] reads row 1 before anything overwrites it",
           spec);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

/* x[i, j, k] = i * 12 + j * 4 + k + 1 (2 x 3 x 4). */
static float x3(int64_t i, int64_t j, int64_t k) { return (float)(i * 12 + j * 4 + k + 1); }

/* Views of a 3-D tensor that no single pair of transpose flags can read:
 * slices along inner axes, transposed outer axes, slices of those. They
 * move nothing; reads give their values, and an elementwise op reads a
 * dense copy (the gather kernel). */
static void check_strided_views(const char *spec, dlrt_device_t *dev) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 3, (int64_t[]){2, 3, 4});
  dlrt_tensor_t *mid = dlrt_keep(g, dlrt_slice(g, x, 1, 1, 2));            /* 2 x 2 x 4 */
  dlrt_tensor_t *t = dlrt_keep(g, dlrt_transpose_axes(g, x, 0, 2));        /* 4 x 3 x 2 */
  dlrt_tensor_t *ts = dlrt_keep(g, dlrt_slice(g, t, 1, 2, 1));             /* 4 x 1 x 2 */
  dlrt_tensor_t *twice = dlrt_keep(g, dlrt_add(g, ts, ts));                /* dense */
  /* A batch of transposed matrices made dense (the batched tiled transpose). */
  dlrt_tensor_t *bt = dlrt_keep(g, dlrt_scale(g, dlrt_transpose_axes(g, x, 1, 2), 2.0f));
  int64_t st[DLRT_MAX_DIMS], at = -1;
  int view = dlrt_tensor_layout(mid, st, &at);
  ok(view == 1 && st[0] == 12 && st[1] == 4 && st[2] == 1 && at == 4,
     "%s: a slice along axis 1 is a view with x's strides at offset 4 (%d: %lld %lld %lld, "
     "offset %lld)", spec, view, (long long)st[0], (long long)st[1], (long long)st[2],
     (long long)at);
  view = dlrt_tensor_layout(ts, st, &at);
  ok(view == 1 && st[0] == 1 && st[1] == 4 && st[2] == 12 && at == 8,
     "%s: a slice of axes 0 and 2 transposed is a view with strides (1, 4, 12) at offset 8 "
     "(%d: %lld %lld %lld, offset %lld)", spec, view, (long long)st[0], (long long)st[1],
     (long long)st[2], (long long)at);
  view = dlrt_tensor_layout(twice, st, &at);
  ok(view == 0 && st[0] == 2 && st[1] == 2 && st[2] == 1 && at == 0,
     "%s: add's output is dense (%d)", spec, view);
  int rc = dlrt_exec_create(g, dev, 1, &e);
  float xv[24], mv[16], tv[24], tsv[8], tw[8], btv[24];
  for (int i = 0; i < 24; i++) xv[i] = (float)(i + 1);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, xv, sizeof xv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, mid, mv, sizeof mv);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, t, tv, sizeof tv);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, ts, tsv, sizeof tsv);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, twice, tw, sizeof tw);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, bt, btv, sizeof btv);
  if (tap_check(rc, "%s: strided views run", spec)) {
    float want_bt[24];
    for (int b = 0; b < 2; b++)
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) want_bt[(b * 4 + i) * 3 + j] = 2 * x3(b, j, i);
    is_mem(btv, want_bt, sizeof btv, "%s: 2 x (axes 1 and 2 of x transposed), dense", spec);
    float want_m[16], want_t[24], want_ts[8], want_tw[8];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        for (int k = 0; k < 4; k++) want_m[(i * 2 + j) * 4 + k] = x3(i, j + 1, k);
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++)
        for (int k = 0; k < 2; k++) want_t[(i * 3 + j) * 2 + k] = x3(k, j, i);
    for (int i = 0; i < 4; i++)
      for (int k = 0; k < 2; k++) {
        want_ts[i * 2 + k] = x3(k, 2, i);
        want_tw[i * 2 + k] = 2 * x3(k, 2, i);
      }
    is_mem(mv, want_m, sizeof mv, "%s: the axis-1 slice reads x[:, 1:3, :]", spec);
    is_mem(tv, want_t, sizeof tv, "%s: the transposed view reads x with axes 0 and 2 swapped",
           spec);
    is_mem(tsv, want_ts, sizeof tsv, "%s: the slice of it reads x[:, 2, :] transposed", spec);
    is_mem(tw, want_tw, sizeof tw, "%s: add reads a dense gather of the view", spec);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

/* In fp16 a view of a 16-bit tensor is gathered in 16 bits: relu of a
 * slice (along the last axis) of a matmul's output. */
static void check_strided_views_fp16(const char *spec, dlrt_device_t *dev) {
  dlrt_graph_t *g;
  dlrt_exec_t *e = NULL;
  dlrt_graph_create(&g);
  dlrt_tensor_t *a = dlrt_input(g, "a", DLRT_F32, 2, (int64_t[]){3, 4});
  dlrt_tensor_t *b = dlrt_input(g, "b", DLRT_F32, 2, (int64_t[]){4, 5});
  dlrt_tensor_t *y = dlrt_keep(g, dlrt_relu(g, dlrt_slice(g, dlrt_matmul(g, a, b, 0, 0), 1, 1, 3)));
  int rc = dlrt_graph_set_precision(g, DLRT_F16);
  if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 1, &e);
  float av[12], bv[20], yv[9];
  for (int i = 0; i < 12; i++) av[i] = 0.25f * (float)(i % 5) - 0.5f;
  for (int i = 0; i < 20; i++) bv[i] = 0.125f * (float)(i % 7) - 0.375f;
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, a, av, sizeof av);
  if (rc == DLRT_OK) rc = dlrt_exec_write(e, b, bv, sizeof bv);
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, y, yv, sizeof yv);
  if (tap_check(rc, "%s: fp16 relu of a slice of a matmul runs", spec)) {
    /* Every operand is a multiple of 1/8 below 1: exact in fp16. */
    float want[9];
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) {
        float acc = 0;
        for (int k = 0; k < 4; k++) acc += av[i * 4 + k] * bv[k * 5 + j + 1];
        want[i * 3 + j] = acc > 0 ? acc : 0;
      }
    is_mem(yv, want, sizeof yv, "%s: fp16 relu(slice(a b, axis 1, [1, 4)))", spec);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
}

static const struct {
  const char *name;
  build_fn fn;
} ops[] = {
    {"concat along axis 1", op_concat}, {"slice", op_slice},
    {"sum over axis 1", op_sum1},       {"mean over axis 2", op_mean2},
    {"transpose", op_transpose},        {"broadcast add (3 x 4 over 2 x 3 x 4)", op_badd},
    {"broadcast sub, mul, div", op_bmix}, {"embedding", op_embed},
    {"batched matmul A B^T", op_bmm_nt},  {"batched matmul A^T B", op_bmm_tn},
    {"3-D times 2-D matmul", op_bmm_2d}, {"transpose of axes 0 and 2", op_transpose_axes},
    {"slice along the last axis", op_slice_last},
    {"reshape of a transposed view", op_reshape_transposed},
    {"slices of transposed views", op_slice_transposed},
    {"batched matmul of transposed views", op_bmm_view}};

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    check(spec, dev, ops[i].name, ops[i].fn);
  check_values(spec, dev);
  check_views(spec, dev);
  check_strided_views(spec, dev);
  check_inplace_views(spec, dev);
  check_strided_views_fp16(spec, dev);
}

int main(void) {
  tap_for_each_device(run_device, NULL);
  /* A view of five strided dimensions (axes 0, 1 and 2, 3 of a 5-D tensor
   * swapped) is refused when an executor lays the graph out. */
  {
    dlrt_graph_t *g5;
    dlrt_graph_create(&g5);
    dlrt_tensor_t *x5 = dlrt_input(g5, "x5", DLRT_F32, 5, (int64_t[]){2, 2, 2, 2, 2});
    dlrt_tensor_t *v = dlrt_transpose_axes(g5, dlrt_transpose_axes(g5, x5, 0, 1), 2, 3);
    dlrt_keep(g5, dlrt_add(g5, v, v));
    dlrt_device_t *cpu;
    dlrt_exec_t *e5 = NULL;
    dlrt_device_open("cpu", &cpu);
    int rc5 = dlrt_exec_create(g5, cpu, 1, &e5);
    ok(rc5 == DLRT_ERR_UNSUPPORTED && strstr(dlrt_last_error(), "strided dimensions"),
       "a view of 5 strided dimensions is refused at dlrt_exec_create: %s", dlrt_last_error());
    dlrt_exec_destroy(e5);
    dlrt_graph_destroy(g5);
  }
  /* Shapes that cannot broadcast are refused with both shapes named. */
  dlrt_graph_t *g;
  dlrt_graph_create(&g);
  dlrt_tensor_t *a = dlrt_input(g, "a", DLRT_F32, 2, (int64_t[]){3, 4});
  dlrt_tensor_t *b = dlrt_input(g, "b", DLRT_F32, 1, (int64_t[]){3});
  ok(dlrt_add(g, a, b) == NULL && dlrt_graph_status(g) == DLRT_ERR_INVALID_ARG &&
         strstr(dlrt_last_error(), "trailing"),
     "add of [3, 4] and [3] is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
  dlrt_shutdown();
  return done_testing();
}
