/* op_params.h — what each op of a graph node is parameterised by (internal):
 * one struct per op family, read and written by name (n->conv.stride). A
 * node holds them in one union (graph.h), zeroed when the node is made;
 * the op says which member is live. Integers are int64_t because the
 * kernels take them so (lib/exec/exec_ops.c passes them in the order the
 * kernels' arguments list them); sizes are in elements. */
#ifndef DLRT_GRAPH_OP_PARAMS_H
#define DLRT_GRAPH_OP_PARAMS_H

#include <stdint.h>

/* DLRT__OP_FILL: out = value. */
struct dlrt__fill_params {
  int64_t loss_seed; /* 1: the backward pass's seed, times the loss scale */
  float value;
};

/* DLRT__OP_SCALE: out = alpha * in0; DLRT__OP_BROADCAST: out[i] = alpha * in0[0]. */
struct dlrt__scale_params {
  float alpha;
};

/* DLRT__OP_BMM: out[b] = op(in0[b]) op(in1[b]), m x k times k x n. */
struct dlrt__bmm_params {
  int64_t trans_a, trans_b; /* 1: the operand's storage is read transposed */
  int64_t m, n, k;
  int64_t batch;            /* matrices; 0 or 1: one */
  int64_t stride_a, stride_b, stride_c; /* between batch matrices (0: one) */
};

/* DLRT__OP_BIAS_ROWS, DLRT__OP_SUM_COLS (rows x cols), DLRT__OP_SOFTMAX, DLRT__OP_SOFTMAX_GRAD
 * (rows of the last axis, cols long). */
struct dlrt__rows_params {
  int64_t rows, cols;
};

/* DLRT__OP_BIAS_CHANNELS, DLRT__OP_SUM_CHANNELS: n x channels x spatial. A
 * convolution's bias is one CNHW "image" (n 1, spatial N x OHW) whose
 * gradient sums the N images one by one (images N; 0 otherwise). */
struct dlrt__channels_params {
  int64_t n, channels, spatial;
  int64_t images;
};

/* DLRT__OP_CONV, DLRT__OP_CONV_GRAD_W, DLRT__OP_CONV_GRAD_X: x N x C x H x W, W O x C x kh x
 * kw, y N x O x OH x OW (stored CNHW). The im2col and col2im kernels take
 * the twelve in this order. */
struct dlrt__conv_params {
  int64_t n, c, h, w;
  int64_t kh, kw;
  int64_t stride, pad, dilation;
  int64_t oh, ow;
  int64_t x_cnhw; /* 1: x is stored C x N x H x W */
};

/* DLRT__OP_MAXPOOL, DLRT__OP_MAXPOOL_GRAD, DLRT__OP_AVGPOOL, DLRT__OP_AVGPOOL_GRAD: planes
 * (N x C) of h x w, k x k windows every `stride`, oh x ow out. The kernels
 * take them in this order. */
struct dlrt__pool_params {
  int64_t planes, h, w, k, stride, oh, ow;
  /* DLRT__OP_MAXPOOL_GRAD, 1: the gradient of the ReLU before the pool too,
   * masked by the maximum's sign (the argmax byte's bit 7 for k <= 11, or
   * in2, the pooled output). */
  int64_t relu_fused;
};

/* DLRT__OP_XENT: rows x classes logits. */
struct dlrt__xent_params {
  int64_t rows, classes;
  float smoothing;
};

/* DLRT__OP_LINEAR_XENT: rows x width inputs, classes x width weights, the
 * logits made `chunk` rows at a time. */
struct dlrt__linear_xent_params {
  int64_t rows, classes, width, chunk;
  float smoothing;
};

/* DLRT__OP_VIEW: a reshape, or axes axis0 and axis1 transposed (their strides
 * swapped). */
struct dlrt__view_params {
  int64_t transpose; /* 0: a reshape */
  int64_t axis0, axis1;
};

/* DLRT__OP_PERMUTE: out[b, a, i] = in0[a, b, i], in0 na x nb x inner. */
struct dlrt__permute_params {
  int64_t na, nb, inner;
};

/* DLRT__OP_ACT, DLRT__OP_ACT_GRAD. The values are the kernels'. */
enum { DLRT__ACT_TANH = 0, DLRT__ACT_SIGMOID = 1, DLRT__ACT_GELU = 2, DLRT__ACT_GELU_TANH = 3 };
struct dlrt__act_params {
  int64_t kind; /* DLRT__ACT_* */
};

/* DLRT__OP_DROPOUT (forward and its gradient). */
struct dlrt__dropout_params {
  int64_t salt; /* the forward node's; its gradient draws the same mask */
  float prob;   /* of dropping */
};

/* DLRT__OP_NORM, DLRT__OP_NORM_GRAD, DLRT__OP_NORM_AFFINE_GRAD: rows of cols values each. */
struct dlrt__norm_params {
  int64_t rows, cols;
  int64_t per_row;    /* 1: gamma and beta per row (batch norm), else per column */
  int64_t batch_norm; /* 1: in3, in4 are the running statistics (DLRT__OP_NORM) */
  float eps;
};

/* DLRT__OP_BN_RUNNING: the running statistics of `channels` rows of `count`. */
struct dlrt__bn_running_params {
  int64_t channels, count;
  float eps, momentum;
};

/* DLRT__OP_CONCAT: outer x axis_len x inner out; each input's axis length is its
 * own shape's. */
struct dlrt__concat_params {
  int64_t outer, inner;
  int64_t axis_len; /* the output's */
  int64_t axis;
};

/* DLRT__OP_SLICE, DLRT__OP_SLICE_GRAD: [start, start + count) of x's axis of x_axis_len
 * (outer x x_axis_len x inner). */
struct dlrt__slice_params {
  int64_t outer, inner, x_axis_len, start, count;
};

/* DLRT__OP_AXIS_SUM, DLRT__OP_AXIS_EXPAND: outer x axis_len x inner, scale 1 (sum) or
 * 1 / axis_len (mean). */
struct dlrt__axis_params {
  int64_t outer, axis_len, inner;
  float scale;
};

/* DLRT__OP_BCAST, DLRT__OP_BCAST_GRAD_B: in0 (count) op in1 (m), repeated. The values
 * are the kernels'. */
enum { DLRT__BCAST_ADD = 0, DLRT__BCAST_SUB = 1, DLRT__BCAST_MUL = 2, DLRT__BCAST_DIV = 3 };
struct dlrt__bcast_params {
  int64_t count, m;
  int64_t op; /* DLRT__BCAST_* */
};

/* DLRT__OP_EMBED, DLRT__OP_EMBED_GRAD: count ids into a vocab x dim table. */
struct dlrt__embed_params {
  int64_t count, vocab, dim;
};

/* DLRT__OP_ATTENTION, DLRT__OP_ATTENTION_GRAD: qkv batch x seq x 3 heads head_dim. The
 * kernels take them in this order, then the tile rows and the scale. */
struct dlrt__attention_params {
  int64_t batch, seq, heads, head_dim;
  int64_t causal; /* 1: each query attends to the keys up to its own */
  float scale;    /* of the scores: 1 / sqrt(head_dim) */
  float dropout;  /* on the probabilities, in training runs (0: none) */
  int64_t salt;   /* the mask's, per attention op (as dropout's) */
};

/* DLRT__OP_ATTENTION_DECODE: qkv batch x 1 x 3 heads head_dim; the caches
 * batch x capacity x heads head_dim. The kernel takes them in this order,
 * then the tile rows and the scale. */
struct dlrt__decode_params {
  int64_t batch, capacity, heads, head_dim;
  float scale; /* of the scores: 1 / sqrt(head_dim) */
};

/* DLRT__OP_ALLREDUCE: `count` fp32 values combined (op: DLRT_COLLECTIVE_SUM or
 * _MAX) over the peers of a tensor-parallel group. tag: the collective's place
 * among the graph's (forward and backward in the order they run; the fused
 * shard loss takes tags tag and tag + 1): each peer's graph has the same ones. */
struct dlrt__collective_params {
  int64_t count, op, tag;
};

/* DLRT__OP_LINEAR_XENT_SHARD: rows x width inputs, this shard's classes x
 * width weights, which are rows [first, first + classes) of the whole
 * vocabulary of `vocab`; the logits made `chunk` rows at a time; tag as
 * the collective's (each chunk combines its maxima as tag, its sums as
 * tag + 1). */
struct dlrt__linear_xent_shard_params {
  int64_t rows, classes, width, chunk, first, vocab, tag;
  float smoothing;
};

/* The most int64_t a node's parameters take (the convolution's twelve). */
#define NODE_MAX_P 12

/* None is wider than the node's raw view (so a node is no larger). */
#define DLRT__PARAMS_FIT(s) _Static_assert(sizeof(struct s) <= NODE_MAX_P * sizeof(int64_t), #s)
DLRT__PARAMS_FIT(dlrt__conv_params);
DLRT__PARAMS_FIT(dlrt__pool_params);
DLRT__PARAMS_FIT(dlrt__bmm_params);
DLRT__PARAMS_FIT(dlrt__norm_params);
DLRT__PARAMS_FIT(dlrt__bn_running_params);
#undef DLRT__PARAMS_FIT

#endif
