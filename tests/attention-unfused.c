/*
 * attention-unfused.c — see attention-unfused.h.
 */
#include "attention-unfused.h"

#include <math.h>

/* One third of qkv (0 queries, 1 keys, 2 values) as (B heads) x T x D. */
static dlrt_tensor_t *head_major(dlrt_graph_t *g, dlrt_tensor_t *qkv, int part, int64_t heads,
                                 int64_t head_dim) {
  int64_t shape[DLRT_MAX_DIMS];
  if (dlrt_tensor_shape(qkv, shape) != 3) return NULL;
  int64_t b = shape[0], t = shape[1], c = heads * head_dim;
  int64_t bthd[4] = {b, t, heads, head_dim}, rows[3] = {b * heads, t, head_dim};
  dlrt_tensor_t *x = dlrt_slice(g, qkv, 2, part * c, c);
  x = dlrt_transpose_axes(g, dlrt_reshape(g, x, 4, bthd), 1, 2);
  return dlrt_reshape(g, x, 3, rows);
}

dlrt_tensor_t *unfused_attention(dlrt_graph_t *g, dlrt_tensor_t *qkv, dlrt_tensor_t *mask,
                                 int64_t heads, int64_t head_dim) {
  int64_t shape[DLRT_MAX_DIMS];
  if (!qkv || dlrt_tensor_shape(qkv, shape) != 3) return NULL;
  int64_t b = shape[0], t = shape[1];
  dlrt_tensor_t *q = head_major(g, qkv, 0, heads, head_dim);
  dlrt_tensor_t *k = head_major(g, qkv, 1, heads, head_dim);
  dlrt_tensor_t *v = head_major(g, qkv, 2, heads, head_dim);
  dlrt_tensor_t *s = dlrt_scale(g, dlrt_matmul(g, q, k, 0, 1), 1.0f / sqrtf((float)head_dim));
  if (mask) s = dlrt_add(g, s, mask); /* broadcast over the (B heads) matrices */
  dlrt_tensor_t *o = dlrt_matmul(g, dlrt_softmax(g, s), v, 0, 0);
  int64_t bhtd[4] = {b, heads, t, head_dim}, btc[3] = {b, t, heads * head_dim};
  o = dlrt_transpose_axes(g, dlrt_reshape(g, o, 4, bhtd), 1, 2);
  return dlrt_reshape(g, o, 3, btc);
}

void causal_mask(float *mask, int64_t seq) {
  for (int64_t i = 0; i < seq; i++)
    for (int64_t j = 0; j < seq; j++) mask[i * seq + j] = j <= i ? 0.0f : -INFINITY;
}
