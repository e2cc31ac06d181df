/*
 * attention-unfused.h — multi-head self-attention as a graph of the older
 * ops (slice, reshape, transpose, batched matmul, scale, a mask added,
 * softmax, matmul), the T x T scores and probabilities materialised as
 * tensors: the peer that tests/test-attention.c sets dlrt_attention's
 * planned memory against, and bench/attention-vs-unfused.c its speed.
 */
#ifndef DLRT_TESTS_ATTENTION_UNFUSED_H
#define DLRT_TESTS_ATTENTION_UNFUSED_H

#include <stdint.h>

#include "dlrt.h"

/* qkv B x T x 3C (as dlrt_attention takes it, C = heads x head_dim) to
 * B x T x C. mask: a T x T input added to the scores (causal_mask's), or
 * NULL for none. NULL after an error (dlrt_graph_status says which). */
dlrt_tensor_t *unfused_attention(dlrt_graph_t *g, dlrt_tensor_t *qkv, dlrt_tensor_t *mask,
                                 int64_t heads, int64_t head_dim);
/* mask[i * seq + j] = 0 for keys j <= i, -inf after: a causal mask. */
void causal_mask(float *mask, int64_t seq);

#endif
