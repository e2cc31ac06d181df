/* norm.c — layer and batch normalisation builders (running statistics as
 * state tensors that checkpoints keep). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

/* The normalisation node over rows x cols of x (already laid out so). */
static dlrt_tensor_t *norm_node(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                                dlrt_tensor_t *beta, dlrt_tensor_t *rm, dlrt_tensor_t *rv,
                                int64_t rows, int64_t cols, int per_row, float eps) {
  dlrt_tensor_t *in[5] = {x, gamma, beta, rm, rv};
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_NORM, DLRT__PHASE_FORWARD, rm ? 5 : 3, in, x->ndim, x->shape, NULL);
  if (!y) return NULL;
  y->cnhw = x->cnhw;
  dlrt__node *n = y->producer;
  char name[64];
  snprintf(name, sizeof name, "%.50s.mean", y->name);
  dlrt_tensor_t *mean = dlrt__tensor_new(g, name, DLRT_F32, 1, &rows, DLRT__TENSOR_INTERMEDIATE);
  snprintf(name, sizeof name, "%.50s.rstd", y->name);
  dlrt_tensor_t *rstd = dlrt__tensor_new(g, name, DLRT_F32, 1, &rows, DLRT__TENSOR_INTERMEDIATE);
  if (!mean || !rstd) return NULL;
  n->n_out = 3;
  n->out[1] = mean, n->out[2] = rstd;
  mean->producer = rstd->producer = n;
  n->norm.rows = rows, n->norm.cols = cols, n->norm.per_row = per_row;
  n->norm.batch_norm = rm != NULL, n->norm.eps = eps;
  return y;
}

dlrt_tensor_t *dlrt_layer_norm(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                               dlrt_tensor_t *beta, float eps) {
  dlrt_tensor_t *in[3] = {x, gamma, beta};
  if (!dlrt__graph_begin(g, "layer_norm", 3, in) || !dlrt__is_f32(g, "layer_norm", x)) return NULL;
  int64_t d = x->ndim ? x->shape[x->ndim - 1] : 0;
  if (x->ndim < 1 || d < 1 || gamma->numel != d || beta->numel != d)
    return dlrt__shape_error(g, "layer_norm", "gamma and beta need one element per feature of the "
                       "last axis", x, gamma);
  if (!(eps > 0)) return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "layer_norm: eps %g <= 0", eps);
  if (!(x = dlrt__to_nchw(g, x))) return NULL;
  return norm_node(g, x, gamma, beta, NULL, NULL, x->numel / d, d, 0, eps);
}

dlrt_tensor_t *dlrt_batch_norm(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                               dlrt_tensor_t *beta, float momentum, float eps) {
  dlrt_tensor_t *in[3] = {x, gamma, beta};
  if (!dlrt__graph_begin(g, "batch_norm", 3, in) || !dlrt__is_f32(g, "batch_norm", x)) return NULL;
  if ((x->ndim != 2 && x->ndim != 4) || gamma->numel != x->shape[1] ||
      beta->numel != x->shape[1] || gamma->kind != DLRT__TENSOR_PARAM)
    return dlrt__shape_error(g, "batch_norm", "x must be N x C (x H x W) and gamma, beta parameters "
                       "of C elements", x, gamma);
  if (!(eps > 0) || !(momentum >= 0 && momentum <= 1))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "batch_norm: eps %g, momentum %g", eps,
                            momentum);
  /* Running statistics, named after gamma as PyTorch names them. */
  char name[64];
  int64_t c = x->shape[1];
  snprintf(name, sizeof name, "%.40s.running_mean", gamma->name);
  dlrt_tensor_t *rm = dlrt__tensor_new(g, name, DLRT_F32, 1, &c, DLRT__TENSOR_STATE);
  snprintf(name, sizeof name, "%.40s.running_var", gamma->name);
  dlrt_tensor_t *rv = dlrt__tensor_new(g, name, DLRT_F32, 1, &c, DLRT__TENSOR_STATE);
  if (!rm || !rv) return NULL;
  rm->init = DLRT_INIT_ZEROS, rv->init = DLRT_INIT_ONES;
  rm->kept = rv->kept = rm->buffer = rv->buffer = 1;
  /* Each channel's values in one row: CNHW for images, features x N for 2-D. */
  dlrt_tensor_t *rows_x = x, *y;
  int64_t m = x->numel / (c ? c : 1);
  if (x->ndim == 4 && !x->cnhw) {
    rows_x = dlrt__swap_axes(g, x, x->shape[0], c, x->shape[2] * x->shape[3], 4, x->shape);
    if (rows_x) rows_x->cnhw = 1;
  } else if (x->ndim == 2) {
    int64_t t_shape[2] = {c, x->shape[0]};
    rows_x = dlrt__swap_axes(g, x, x->shape[0], c, 1, 2, t_shape);
  }
  if (!rows_x || !(y = norm_node(g, rows_x, gamma, beta, rm, rv, c, m, 1, eps))) return NULL;
  dlrt_tensor_t *stats[4] = {y->producer->out[1], y->producer->out[2], rm, rv};
  dlrt__node *run = dlrt__node_new(g, DLRT__OP_BN_RUNNING, DLRT__PHASE_FORWARD);
  if (!run) return NULL;
  dlrt__node_inputs(run, 4, stats);
  run->bn_running.channels = c, run->bn_running.count = m;
  run->bn_running.eps = eps, run->bn_running.momentum = momentum;
  if (x->ndim == 2) {
    int64_t back[2] = {x->shape[0], c};
    y = dlrt__swap_axes(g, y, c, x->shape[0], 1, 2, back);
  }
  return y;
}
