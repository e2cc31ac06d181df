/* attention.c — the fused multi-head self-attention builders: training's
 * (autodiff.c appends its backward node; dropout on the probabilities
 * optional) and sampling's one token at a time over key / value caches. The kernels are kernels/attention.h. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "graph/graph.h"
#include "kernel_table.h" /* DLRT__ATTN_TILE: the largest head the kernels take */
#include "util/status.h"

/* The head size of qkv's last axis, 3 x heads x head size (at most the
 * kernels' tile), or 0 after failing the graph naming `op`. */
static int64_t qkv_head_dim(dlrt_graph_t *g, const char *op, dlrt_tensor_t *qkv, int heads) {
  if (heads < 1)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: %d heads (give 1 or more)", op,
                            heads),
           0;
  int64_t width = qkv->shape[2];
  if (width < 3 * (int64_t)heads || width % (3 * (int64_t)heads) != 0) {
    char what[160];
    snprintf(what, sizeof what, "the last axis, %lld, is not 3 x %d heads x a head size",
             (long long)width, heads);
    return dlrt__shape_error(g, op, what, qkv, NULL), 0;
  }
  int64_t head_dim = width / 3 / heads;
  if (head_dim > DLRT__ATTN_TILE)
    return dlrt__graph_fail(g, DLRT_ERR_UNSUPPORTED, "%s: a head of %lld (C %lld / %d heads); "
                            "heads of up to %d are supported (use more heads)", op,
                            (long long)head_dim, (long long)(width / 3), heads,
                            DLRT__ATTN_TILE),
           0;
  return head_dim;
}

dlrt_tensor_t *dlrt_attention(dlrt_graph_t *g, dlrt_tensor_t *qkv, int heads, int causal) {
  return dlrt_attention_dropout(g, qkv, heads, causal, 0.0f);
}

dlrt_tensor_t *dlrt_attention_dropout(dlrt_graph_t *g, dlrt_tensor_t *qkv, int heads,
                                      int causal, float p) {
  if (!dlrt__graph_begin(g, "attention", 1, &qkv) || !dlrt__is_f32(g, "attention", qkv))
    return NULL;
  if (!(p >= 0.0f && p < 1.0f))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "attention: dropout probability %g is "
                            "outside [0, 1)", (double)p);
  if (qkv->ndim != 3)
    return dlrt__shape_error(g, "attention", "qkv must be B x T x 3C: the queries, keys and "
                             "values of each position side by side", qkv, NULL);
  int64_t head_dim = qkv_head_dim(g, "attention", qkv, heads);
  if (!head_dim) return NULL;
  if (causal != 0 && causal != 1)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "attention: causal is %d (give 1 to "
                            "mask the keys after each query, 0 to attend to all)", causal);
  int64_t batch = qkv->shape[0], seq = qkv->shape[1], c = qkv->shape[2] / 3;
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
      .scale = (float)(1.0 / sqrt((double)head_dim)), .dropout = p,
      .salt = g->n_nodes}; /* differs per attention node */
  return y;
}

/* A key or value cache of dlrt_attention_decode: a state tensor of its
 * own storage, fp32, batch x capacity x c. */
static int is_cache(const dlrt_tensor_t *t, int64_t batch, int64_t c) {
  return t->kind == DLRT__TENSOR_CACHE && t->owner == t && t->dtype == DLRT_F32 &&
         t->ndim == 3 && t->shape[0] == batch && t->shape[1] >= 1 && t->shape[2] == c;
}

dlrt_tensor_t *dlrt_attention_decode(dlrt_graph_t *g, dlrt_tensor_t *qkv, dlrt_tensor_t *k_cache,
                                     dlrt_tensor_t *v_cache, dlrt_tensor_t *pos, int heads) {
  dlrt_tensor_t *in[4] = {qkv, k_cache, v_cache, pos};
  if (!dlrt__graph_begin(g, "attention_decode", 4, in) ||
      !dlrt__is_f32(g, "attention_decode", qkv))
    return NULL;
  if (qkv->ndim != 3 || qkv->shape[1] != 1)
    return dlrt__shape_error(g, "attention_decode", "qkv must be B x 1 x 3C: each sequence's "
                             "new token's queries, keys and values side by side", qkv, NULL);
  int64_t head_dim = qkv_head_dim(g, "attention_decode", qkv, heads);
  if (!head_dim) return NULL;
  int64_t batch = qkv->shape[0], c = qkv->shape[2] / 3;
  for (int i = 1; i <= 2; i++)
    if (!is_cache(in[i], batch, c))
      return dlrt__shape_error(g, "attention_decode", i == 1 ? "the key cache must be a "
                               "dlrt_state tensor of B x capacity x C (fp32)" : "the value "
                               "cache must be a dlrt_state tensor of B x capacity x C (fp32)",
                               in[i], qkv);
  if (k_cache == v_cache || k_cache->shape[1] != v_cache->shape[1])
    return dlrt__shape_error(g, "attention_decode", "the key and value caches must be two "
                             "state tensors of one shape", k_cache, v_cache);
  if (pos->dtype != DLRT_I32 || pos->ndim != 1 || pos->shape[0] != batch)
    return dlrt__shape_error(g, "attention_decode", "pos must be an I32 tensor of B elements "
                             "(each sequence's position)", pos, qkv);
  int64_t shape[3] = {batch, 1, c};
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_ATTENTION_DECODE, DLRT__PHASE_FORWARD, 4, in, 3,
                                 shape, NULL);
  if (!y) return NULL;
  y->producer->decode = (struct dlrt__decode_params){
      .batch = batch, .capacity = k_cache->shape[1], .heads = heads, .head_dim = head_dim,
      .scale = (float)(1.0 / sqrt((double)head_dim))};
  return y;
}
