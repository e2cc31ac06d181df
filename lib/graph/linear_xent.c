/* linear_xent.c — the fused linear + cross-entropy loss (a language model's
 * head): the logits x w^T are made a chunk of rows at a time and never
 * stored whole; lib/exec/exec_ops.c runs it, autodiff.c takes its gradients
 * as the backward pass's seed. */
#include "config.h"

#include "graph/graph.h"
#include "util/status.h"

/* Logits per chunk at most: 4M floats, 16 MiB (the workspace holds a
 * chunk's logits, then their gradient over them). Whole rows: a vocabulary
 * above it runs a row at a time. */
#define CHUNK_LOGITS ((int64_t)1 << 22)

dlrt_tensor_t *dlrt__linear_xent_node(dlrt_graph_t *g, dlrt__op_kind op, dlrt_tensor_t *in[3],
                                      dlrt_tensor_t *x, dlrt_tensor_t *w, int64_t work) {
  int64_t one = 1;
  dlrt_tensor_t *loss = dlrt__node1(g, op, DLRT__PHASE_FORWARD, 3, in, 1, &one, "loss");
  if (!loss) return NULL;
  dlrt__node *n = loss->producer;
  dlrt_tensor_t *dx = dlrt__tensor_new(g, "loss.dx", DLRT_F32, 2, x->shape,
                                       DLRT__TENSOR_INTERMEDIATE);
  dlrt_tensor_t *dw = dlrt__tensor_new(g, "loss.dw", DLRT_F32, 2, w->shape,
                                       DLRT__TENSOR_INTERMEDIATE);
  dlrt_tensor_t *ws = dlrt__tensor_new(g, "loss.workspace", DLRT_F32, 1, &work,
                                       DLRT__TENSOR_INTERMEDIATE);
  if (!dx || !dw || !ws) return NULL;
  n->n_out = 4;
  n->out[1] = dx, n->out[2] = dw, n->out[3] = ws;
  dx->producer = dw->producer = ws->producer = n;
  return loss;
}

dlrt_tensor_t *dlrt_linear_cross_entropy(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                                         dlrt_tensor_t *labels, float smoothing) {
  dlrt_tensor_t *in[3] = {x, w, labels};
  if (!dlrt__graph_begin(g, "linear_cross_entropy", 3, in) ||
      !dlrt__is_f32(g, "linear_cross_entropy", x) || !dlrt__is_f32(g, "linear_cross_entropy", w))
    return NULL;
  if (x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1])
    return dlrt__shape_error(g, "linear_cross_entropy", "x must be N x C and w classes x C "
                             "(the logits are x w^T)", x, w);
  if (labels->ndim != 1 || labels->shape[0] != x->shape[0] || labels->dtype != DLRT_I32)
    return dlrt__shape_error(g, "linear_cross_entropy", "labels must be N of i32, one per row "
                             "of x", x, labels);
  if (!(smoothing >= 0.0f && smoothing < 1.0f))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "linear_cross_entropy: label smoothing %g "
                            "is outside [0, 1)", smoothing);
  int64_t rows = x->shape[0], width = x->shape[1], classes = w->shape[0];
  int64_t chunk = CHUNK_LOGITS / classes;
  if (chunk < 1) chunk = 1;
  if (chunk > rows) chunk = rows;
  /* Per-row losses, N ones (the mean as a GEMM), a chunk's logits. */
  int64_t work = 2 * rows + chunk * classes;
  dlrt_tensor_t *loss = dlrt__linear_xent_node(g, DLRT__OP_LINEAR_XENT, in, x, w, work);
  if (!loss) return NULL;
  dlrt__node *n = loss->producer;
  n->linear_xent = (struct dlrt__linear_xent_params){
      .rows = rows, .classes = classes, .width = width, .chunk = chunk, .smoothing = smoothing};
  return loss;
}
