/* attention.c — the fused multi-head self-attention builder (the kernels
 * are kernels/attention.h; autodiff.c appends its backward node). */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "graph/graph.h"
#include "kernel_table.h" /* DLRT__ATTN_TILE: the largest head the kernels take */
#include "util/status.h"

dlrt_tensor_t *dlrt_attention(dlrt_graph_t *g, dlrt_tensor_t *qkv, int heads, int causal) {
  if (!dlrt__graph_begin(g, "attention", 1, &qkv) || !dlrt__is_f32(g, "attention", qkv))
    return NULL;
  if (qkv->ndim != 3)
    return dlrt__shape_error(g, "attention", "qkv must be B x T x 3C: the queries, keys and "
                             "values of each position side by side", qkv, NULL);
  if (heads < 1)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "attention: %d heads (give 1 or more)",
                            heads);
  if (causal != 0 && causal != 1)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "attention: causal is %d (give 1 to "
                            "mask the keys after each query, 0 to attend to all)", causal);
  int64_t batch = qkv->shape[0], seq = qkv->shape[1], width = qkv->shape[2];
  if (width < 3 * (int64_t)heads || width % (3 * (int64_t)heads) != 0) {
    char what[160];
    snprintf(what, sizeof what, "the last axis, %lld, is not 3 x %d heads x a head size",
             (long long)width, heads);
    return dlrt__shape_error(g, "attention", what, qkv, NULL);
  }
  int64_t head_dim = width / 3 / heads, c = width / 3;
  if (head_dim > DLRT__ATTN_TILE)
    return dlrt__graph_fail(g, DLRT_ERR_UNSUPPORTED, "attention: a head of %lld (C %lld / %d "
                            "heads); heads of up to %d are supported (use more heads)",
                            (long long)head_dim, (long long)c, heads, DLRT__ATTN_TILE);
  int64_t shape[3] = {batch, seq, c}, lse_shape[3] = {batch, heads, seq};
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_ATTENTION, DLRT__PHASE_FORWARD, 1, &qkv, 3, shape,
                                 NULL);
  if (!y) return NULL;
  /* Each row's logsumexp, the one thing the backward pass keeps besides qkv
   * and y: B x heads x T floats, nothing of T x T. */
  char name[64];
  snprintf(name, sizeof name, "%.50s.lse", y->name);
  dlrt_tensor_t *lse = dlrt__tensor_new(g, name, DLRT_F32, 3, lse_shape,
                                        DLRT__TENSOR_INTERMEDIATE);
  if (!lse) return NULL;
  dlrt__node *n = y->producer;
  n->n_out = 2;
  n->out[1] = lse;
  lse->producer = n;
  n->attention = (struct dlrt__attention_params){
      .batch = batch, .seq = seq, .heads = heads, .head_dim = head_dim, .causal = causal,
      .scale = (float)(1.0 / sqrt((double)head_dim))};
  return y;
}
