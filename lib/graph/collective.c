/* collective.c — tensor parallelism's graph ops (Megatron-LM, Shoeybi et
 * al. 2019): f (dlrt_tp_copy), the identity whose gradient is summed over
 * the peers; g (dlrt_tp_reduce), the sum over the peers whose gradient is
 * the identity; and the fused LM head and cross-entropy over a vocabulary
 * shard, whose row statistics (never its logits) are combined. lib/exec
 * runs the sums through a collective the layer above registers
 * (dlrt_exec_set_collective); autodiff.c differentiates f and g. */
#include "config.h"

#include "graph/graph.h"
#include "util/status.h"

/* Logits per chunk of the shard loss at most, as linear_xent.c's. */
#define CHUNK_LOGITS ((int64_t)1 << 22)

/* The tags the graph's collectives so far took: the next one's. */
static int64_t next_tag(const dlrt_graph_t *g) {
  int64_t tag = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    if (n->op == DLRT__OP_ALLREDUCE) tag = n->collective.tag + 1;
    if (n->op == DLRT__OP_LINEAR_XENT_SHARD) tag = n->linear_xent_shard.tag + 2;
  }
  return tag;
}

dlrt_tensor_t *dlrt__allreduce_node(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt__node_phase phase,
                                    const char *name) {
  if (!(x = dlrt__make_dense(g, x, phase))) return NULL;
  int64_t tag = next_tag(g);
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_ALLREDUCE, phase, 1, &x, x->ndim, x->shape, name);
  if (!y) return NULL;
  y->producer->collective = (struct dlrt__collective_params){
      .count = x->numel, .op = DLRT_COLLECTIVE_SUM, .tag = tag};
  return y;
}

dlrt_tensor_t *dlrt_tp_reduce(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, "tp_reduce", 1, &x) || !dlrt__is_f32(g, "tp_reduce", x)) return NULL;
  return dlrt__allreduce_node(g, x, DLRT__PHASE_FORWARD, NULL);
}

dlrt_tensor_t *dlrt_tp_copy(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, "tp_copy", 1, &x) || !dlrt__is_f32(g, "tp_copy", x)) return NULL;
  if (!(x = dlrt__make_dense(g, x, DLRT__PHASE_FORWARD))) return NULL;
  return dlrt__node1(g, DLRT__OP_TP_COPY, DLRT__PHASE_FORWARD, 1, &x, x->ndim, x->shape, NULL);
}

dlrt_tensor_t *dlrt_linear_cross_entropy_shard(dlrt_graph_t *g, dlrt_tensor_t *x,
                                               dlrt_tensor_t *w, dlrt_tensor_t *labels,
                                               int64_t first, int64_t vocab, float smoothing) {
  static const char op[] = "linear_cross_entropy_shard";
  dlrt_tensor_t *in[3] = {x, w, labels};
  if (!dlrt__graph_begin(g, op, 3, in) || !dlrt__is_f32(g, op, x) || !dlrt__is_f32(g, op, w))
    return NULL;
  if (x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1])
    return dlrt__shape_error(g, op, "x must be N x C and w classes x C (the logits are x w^T)",
                             x, w);
  if (labels->ndim != 1 || labels->shape[0] != x->shape[0] || labels->dtype != DLRT_I32)
    return dlrt__shape_error(g, op, "labels must be N of i32, one per row of x", x, labels);
  if (first < 0 || vocab < 1 || first + w->shape[0] > vocab)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: rows %lld .. %lld of a vocabulary "
                            "of %lld (the shard must lie within it)", op, (long long)first,
                            (long long)(first + w->shape[0]), (long long)vocab);
  if (!(smoothing >= 0.0f && smoothing < 1.0f))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: label smoothing %g is outside "
                            "[0, 1)", op, smoothing);
  int64_t rows = x->shape[0], width = x->shape[1], classes = w->shape[0];
  /* Chunks of the whole vocabulary's size: every peer, whatever its share,
   * cuts the rows alike, so their collectives pair up. */
  int64_t chunk = CHUNK_LOGITS / vocab;
  if (chunk < 1) chunk = 1;
  if (chunk > rows) chunk = rows;
  /* Per-row losses, N ones (the mean as a GEMM), a chunk's four row
   * statistics and its logits. */
  int64_t work = 2 * rows + 4 * chunk + chunk * classes, tag = next_tag(g);
  dlrt_tensor_t *loss = dlrt__linear_xent_node(g, DLRT__OP_LINEAR_XENT_SHARD, in, x, w, work);
  if (!loss) return NULL;
  dlrt__node *n = loss->producer;
  n->linear_xent_shard = (struct dlrt__linear_xent_shard_params){
      .rows = rows, .classes = classes, .width = width, .chunk = chunk, .first = first,
      .vocab = vocab, .tag = tag, .smoothing = smoothing};
  return loss;
}
