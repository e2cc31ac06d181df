/* shape.c — builders that move elements around: concat, sums over an axis,
 * embedding; and the views, which move nothing: slices, transposed axes,
 * reshape and flatten. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

/* outer x axis x inner around `axis` of t. */
static void around_axis(const dlrt_tensor_t *t, int axis, int64_t *outer, int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= t->shape[i];
  for (int i = axis + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

static int axis_ok(dlrt_graph_t *g, const char *op, const dlrt_tensor_t *x, int axis) {
  if (axis >= 0 && axis < x->ndim) return 1;
  dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: axis %d of a %d-D tensor %s", op, axis, x->ndim,
                   x->name);
  return 0;
}

dlrt_tensor_t *dlrt_concat(dlrt_graph_t *g, int n, dlrt_tensor_t *const *xs, int axis) {
  if (!g || g->status) return NULL;
  if (n < 1 || n > NODE_MAX_IN || !xs)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "concat: %d inputs (1 to %d)", n, NODE_MAX_IN);
  dlrt_tensor_t *in[NODE_MAX_IN];
  for (int i = 0; i < n; i++) in[i] = xs[i];
  if (!dlrt__graph_begin(g, "concat", n, in) || !axis_ok(g, "concat", in[0], axis)) return NULL;
  int64_t shape[DLRT_MAX_DIMS];
  memcpy(shape, in[0]->shape, sizeof shape);
  shape[axis] = 0;
  for (int i = 0; i < n; i++) {
    if (!dlrt__is_f32(g, "concat", in[i]) || !(in[i] = dlrt__to_nchw(g, in[i]))) return NULL;
    int same = in[i]->ndim == in[0]->ndim;
    for (int d = 0; same && d < in[0]->ndim; d++)
      same = d == axis || in[i]->shape[d] == in[0]->shape[d];
    if (!same) return dlrt__shape_error(g, "concat", "shapes differ off the axis", in[0], in[i]);
    shape[axis] += in[i]->shape[axis];
  }
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_CONCAT, DLRT__PHASE_FORWARD, n, in, in[0]->ndim, shape, NULL);
  if (y) {
    struct dlrt__concat_params *p = &y->producer->concat;
    around_axis(y, axis, &p->outer, &p->inner);
    p->axis_len = shape[axis];
    p->axis = axis;
  }
  return y;
}

dlrt_tensor_t *dlrt__slice_view(dlrt_graph_t *g, dlrt_tensor_t *x, int axis, int64_t start,
                               int64_t length, dlrt__node_phase phase, const char *name) {
  int64_t shape[DLRT_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[axis] = length;
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_SLICE, phase, 1, &x, x->ndim, shape, name);
  if (!y) return NULL;
  struct dlrt__slice_params *p = &y->producer->slice;
  around_axis(x, axis, &p->outer, &p->inner);
  p->x_axis_len = x->shape[axis], p->start = start, p->count = length;
  y->dtype = x->dtype;
  y->owner = x->owner;
  y->offset = x->offset + start * x->strides[axis];
  memcpy(y->strides, x->strides, sizeof y->strides);
  return y;
}

dlrt_tensor_t *dlrt_slice(dlrt_graph_t *g, dlrt_tensor_t *x, int axis, int64_t start,
                          int64_t length) {
  if (!dlrt__graph_begin(g, "slice", 1, &x) || !dlrt__is_f32(g, "slice", x) || !axis_ok(g, "slice", x, axis))
    return NULL;
  if (start < 0 || length < 1 || start + length > x->shape[axis])
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "slice: [%lld, %lld) of axis %d of %s, "
                            "which has %lld", (long long)start, (long long)(start + length),
                            axis, x->name, (long long)x->shape[axis]);
  if (!(x = dlrt__to_nchw(g, x))) return NULL;
  /* A view on any axis: x's strides at an offset. Ops that need dense
   * input get a copy (dlrt__graph_layout); a slice along the leading axis
   * of a dense tensor is dense already. */
  return dlrt__slice_view(g, x, axis, start, length, DLRT__PHASE_FORWARD, NULL);
}

static dlrt_tensor_t *axis_sum(dlrt_graph_t *g, dlrt_tensor_t *x, int axis, int mean) {
  const char *name = mean ? "mean_axis" : "sum_axis";
  if (!dlrt__graph_begin(g, name, 1, &x) || !dlrt__is_f32(g, name, x) || !axis_ok(g, name, x, axis)) return NULL;
  if (!(x = dlrt__to_nchw(g, x))) return NULL;
  int64_t shape[DLRT_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < x->ndim; i++)
    if (i != axis) shape[nd++] = x->shape[i];
  if (nd == 0) shape[nd++] = 1;
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_AXIS_SUM, DLRT__PHASE_FORWARD, 1, &x, nd, shape, NULL);
  if (y) {
    struct dlrt__axis_params *p = &y->producer->axis;
    around_axis(x, axis, &p->outer, &p->inner);
    p->axis_len = x->shape[axis];
    p->scale = mean && p->axis_len ? 1.0f / (float)p->axis_len : 1.0f;
  }
  return y;
}

dlrt_tensor_t *dlrt_sum_axis(dlrt_graph_t *g, dlrt_tensor_t *x, int axis) {
  return axis_sum(g, x, axis, 0);
}

dlrt_tensor_t *dlrt_mean_axis(dlrt_graph_t *g, dlrt_tensor_t *x, int axis) {
  return axis_sum(g, x, axis, 1);
}

dlrt_tensor_t *dlrt_transpose_axes(dlrt_graph_t *g, dlrt_tensor_t *x, int axis0, int axis1) {
  if (!dlrt__graph_begin(g, "transpose", 1, &x) || !dlrt__is_f32(g, "transpose", x) ||
      !axis_ok(g, "transpose", x, axis0) || !axis_ok(g, "transpose", x, axis1))
    return NULL;
  if (!(x = dlrt__to_nchw(g, x))) return NULL;
  /* A view: the same storage with two strides swapped. Matmuls read a 2-D
   * one through their transpose flags; other ops get a dense copy
   * (dlrt__graph_layout). */
  int64_t shape[DLRT_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[axis0] = x->shape[axis1], shape[axis1] = x->shape[axis0];
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_VIEW, DLRT__PHASE_FORWARD, 1, &x, x->ndim, shape, NULL);
  if (y) {
    struct dlrt__view_params *p = &y->producer->view;
    p->transpose = 1, p->axis0 = axis0, p->axis1 = axis1;
    y->dtype = x->dtype;
    y->owner = x->owner;
    y->offset = x->offset;
    memcpy(y->strides, x->strides, sizeof y->strides);
    y->strides[axis0] = x->strides[axis1], y->strides[axis1] = x->strides[axis0];
  }
  return y;
}

dlrt_tensor_t *dlrt_transpose2d(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, "transpose", 1, &x)) return NULL;
  if (x->ndim != 2) return dlrt__shape_error(g, "transpose", "needs a 2-D tensor", x, NULL);
  return dlrt_transpose_axes(g, x, 0, 1);
}

dlrt_tensor_t *dlrt_embedding(dlrt_graph_t *g, dlrt_tensor_t *ids, dlrt_tensor_t *table) {
  dlrt_tensor_t *in[2] = {ids, table};
  if (!dlrt__graph_begin(g, "embedding", 2, in) || !dlrt__is_f32(g, "embedding", table)) return NULL;
  if (ids->dtype != DLRT_I32 || table->ndim != 2 || ids->ndim + 1 > DLRT_MAX_DIMS)
    return dlrt__shape_error(g, "embedding", "ids must be i32 and the table vocab x dim", ids, table);
  int64_t shape[DLRT_MAX_DIMS];
  memcpy(shape, ids->shape, (size_t)ids->ndim * sizeof shape[0]);
  shape[ids->ndim] = table->shape[1];
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_EMBED, DLRT__PHASE_FORWARD, 2, in, ids->ndim + 1, shape, NULL);
  if (y) y->producer->embed = (struct dlrt__embed_params){
             .count = ids->numel, .vocab = table->shape[0], .dim = table->shape[1]};
  return y;
}

dlrt_tensor_t *dlrt_reshape(dlrt_graph_t *g, dlrt_tensor_t *x, int ndim, const int64_t *shape) {
  if (!dlrt__graph_begin(g, "reshape", 1, &x)) return NULL;
  int64_t numel;
  if (!shape || ndim < 1 || ndim > DLRT_MAX_DIMS)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "reshape: %d dimensions (1 to %d)", ndim,
                            DLRT_MAX_DIMS);
  if (!dlrt__shape_elements(ndim, shape, &numel) || numel != x->numel)
    return dlrt__shape_error(g, "reshape", "the new shape has another number of elements", x, NULL);
  /* A view of the same elements: dense ones (a transposed view is copied
   * dense first). */
  if (!(x = dlrt__to_nchw(g, x)) || !(x = dlrt__make_contiguous(g, x, DLRT__PHASE_FORWARD)))
    return NULL;
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_VIEW, DLRT__PHASE_FORWARD, 1, &x, ndim, shape, NULL);
  if (y) {
    y->dtype = x->dtype;
    y->owner = x->owner;
    y->offset = x->offset;
  }
  return y;
}

dlrt_tensor_t *dlrt_flatten(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, "flatten", 1, &x)) return NULL;
  if (x->ndim < 1) return dlrt__shape_error(g, "flatten", "needs at least one dimension", x, NULL);
  int64_t shape[2] = {x->shape[0], x->shape[0] ? x->numel / x->shape[0] : 0};
  return dlrt_reshape(g, x, 2, shape);
}
