/* graph.c — building the forward pass: tensors, nodes, shape checks. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

static const char *const op_names[DLRT__OP_COUNT_] = {
    [DLRT__OP_FILL] = "fill",           [DLRT__OP_BMM] = "matmul",         [DLRT__OP_BIAS_ROWS] = "bias",
    [DLRT__OP_BIAS_CHANNELS] = "bias",  [DLRT__OP_RELU] = "relu",          [DLRT__OP_RELU_GRAD] = "relu_grad",
    [DLRT__OP_ADD] = "add",             [DLRT__OP_MUL] = "mul",            [DLRT__OP_SCALE] = "scale",
    [DLRT__OP_SUM] = "sum",             [DLRT__OP_BROADCAST] = "broadcast", [DLRT__OP_SUM_COLS] = "sum_cols",
    [DLRT__OP_SUM_CHANNELS] = "sum_channels", [DLRT__OP_CONV] = "conv", [DLRT__OP_CONV_GRAD_W] = "conv_grad_w",
    [DLRT__OP_CONV_GRAD_X] = "conv_grad_x", [DLRT__OP_MAXPOOL] = "max_pool",   [DLRT__OP_MAXPOOL_GRAD] = "max_pool_grad",
    [DLRT__OP_XENT] = "cross_entropy", [DLRT__OP_LINEAR_XENT] = "linear_cross_entropy",  [DLRT__OP_VIEW] = "view",          [DLRT__OP_PERMUTE] = "permute",          [DLRT__OP_SGD] = "sgd",
    [DLRT__OP_ADAM] = "adam",           [DLRT__OP_SUB] = "sub",            [DLRT__OP_DIV] = "div",
    [DLRT__OP_DIV_GRAD_Z] = "div_grad", [DLRT__OP_ACT] = "activation",     [DLRT__OP_ACT_GRAD] = "activation_grad",
    [DLRT__OP_SOFTMAX] = "softmax",     [DLRT__OP_SOFTMAX_GRAD] = "softmax_grad", [DLRT__OP_AVGPOOL] = "avg_pool",
    [DLRT__OP_AVGPOOL_GRAD] = "avg_pool_grad", [DLRT__OP_DROPOUT] = "dropout", [DLRT__OP_NORM] = "norm",
    [DLRT__OP_NORM_GRAD] = "norm_grad", [DLRT__OP_NORM_AFFINE_GRAD] = "norm_affine_grad",
    [DLRT__OP_BN_RUNNING] = "bn_running", [DLRT__OP_CONCAT] = "concat", [DLRT__OP_SLICE] = "slice",
    [DLRT__OP_SLICE_GRAD] = "slice_grad", [DLRT__OP_AXIS_SUM] = "sum_axis", [DLRT__OP_AXIS_EXPAND] = "expand",
    [DLRT__OP_BCAST] = "broadcast_op", [DLRT__OP_BCAST_GRAD_B] = "broadcast_grad", [DLRT__OP_EMBED] = "embedding",
    [DLRT__OP_EMBED_GRAD] = "embedding_grad",
    [DLRT__OP_EMBED_GRAD_ACC] = "embedding_grad_acc", [DLRT__OP_CAST] = "cast", [DLRT__OP_CONTIGUOUS] = "contiguous",
    [DLRT__OP_ATTENTION] = "attention", [DLRT__OP_ATTENTION_GRAD] = "attention_grad",
    [DLRT__OP_ATTENTION_DECODE] = "attention_decode", [DLRT__OP_TP_COPY] = "tp_copy",
    [DLRT__OP_ALLREDUCE] = "allreduce", [DLRT__OP_LINEAR_XENT_SHARD] = "linear_cross_entropy_shard"};

const char *dlrt__op_name(dlrt__op_kind op) {
  return op >= 0 && op < DLRT__OP_COUNT_ && op_names[op] ? op_names[op] : "unknown";
}

void *dlrt__graph_fail(dlrt_graph_t *g, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g && g->status == DLRT_OK) {
    g->status = status;
    snprintf(g->error, sizeof g->error, "%s", msg);
  }
  dlrt__set_error(status, "%s", msg);
  return NULL;
}

int dlrt_graph_create(dlrt_graph_t **out) {
  DLRT__CHECK_ARG(out, "out is NULL");
  dlrt_graph_t *g = calloc(1, sizeof *g);
  if (!g) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  *out = g;
  return DLRT_OK;
}

void dlrt_graph_destroy(dlrt_graph_t *g) {
  if (!g) return;
  for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i]);
  for (int i = 0; i < g->n_nodes; i++) free(g->nodes[i]);
  free(g->tensors);
  free(g->nodes);
  free(g);
}

int dlrt_graph_status(dlrt_graph_t *g) {
  DLRT__CHECK_ARG(g, "graph is NULL");
  if (g->status != DLRT_OK) dlrt__set_error(g->status, "%s", g->error);
  return g->status;
}

static int grow(void **array, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int n = *cap ? *cap * 2 : 64;
  void *p = realloc(*array, (size_t)n * elem);
  if (!p) return -1;
  *array = p;
  *cap = n;
  return 0;
}

int dlrt__shape_elements(int ndim, const int64_t *shape, int64_t *numel) {
  int64_t n = 1;
  int negative = 0, over = 0;
  for (int i = 0; i < ndim; i++) {
    negative |= shape[i] < 0;
    over |= __builtin_mul_overflow(n, shape[i], &n) || n > INT64_MAX / 8;
  }
  *numel = negative ? -1 : over ? INT64_MAX : n;
  return !negative && !over;
}

dlrt_tensor_t *dlrt__tensor_new(dlrt_graph_t *g, const char *name, dlrt_dtype dtype, int ndim,
                                const int64_t *shape, dlrt__tensor_kind kind) {
  if (ndim < 0 || ndim > DLRT_MAX_DIMS)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "tensor %s: %d dimensions (at most %d)",
                            name ? name : "", ndim, DLRT_MAX_DIMS);
  int64_t numel;
  if (!dlrt__shape_elements(ndim, shape, &numel)) {
    char dims[200] = "";
    for (int i = 0; i < ndim; i++)
      snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", i ? " x " : "",
               (long long)shape[i]);
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "tensor %s: a shape of %s %s",
                            name ? name : "", dims,
                            numel < 0 ? "has a negative dimension"
                                      : "is more elements than a tensor can hold (2^60 - 1)");
  }
  if (grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1, sizeof *g->tensors) < 0)
    return dlrt__graph_fail(g, DLRT_ERR_OOM, "out of host memory");
  dlrt_tensor_t *t = calloc(1, sizeof *t);
  if (!t) return dlrt__graph_fail(g, DLRT_ERR_OOM, "out of host memory");
  t->id = g->n_tensors;
  if (name) snprintf(t->name, sizeof t->name, "%s", name);
  else snprintf(t->name, sizeof t->name, "t%d", t->id);
  t->dtype = dtype;
  t->ndim = ndim;
  memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  t->numel = numel;
  t->kind = kind;
  t->owner = t;
  dlrt__set_contiguous(t);
  g->tensors[g->n_tensors++] = t;
  return t;
}

void dlrt__set_contiguous(dlrt_tensor_t *t) {
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    t->strides[i] = stride;
    stride *= t->shape[i];
  }
}

int dlrt__contiguous(const dlrt_tensor_t *t) {
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != stride) return 0;
    stride *= t->shape[i];
  }
  return 1;
}

int dlrt__view_dims(const dlrt_tensor_t *t, int64_t *n, int64_t *strides) {
  int d = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 1) continue;
    if (d > 0 && strides[d - 1] == t->strides[i] * t->shape[i]) {
      n[d - 1] *= t->shape[i];
      strides[d - 1] = t->strides[i];
      continue;
    }
    n[d] = t->shape[i], strides[d] = t->strides[i], d++;
  }
  return d;
}

dlrt_tensor_t *dlrt__make_contiguous(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt__node_phase phase) {
  if (dlrt__contiguous(x)) return x;
  return dlrt__make_dense(g, x, phase);
}

dlrt_tensor_t *dlrt__make_dense(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt__node_phase phase) {
  if (dlrt__contiguous(x) && x->offset == 0) return x;
  char name[64];
  snprintf(name, sizeof name, "%.50s.dense", x->name);
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_CONTIGUOUS, phase, 1, &x, x->ndim, x->shape, name);
  if (y) y->dtype = x->dtype, y->cnhw = x->cnhw;
  return y;
}

dlrt__node *dlrt__node_new(dlrt_graph_t *g, dlrt__op_kind op, dlrt__node_phase phase) {
  if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes) < 0)
    return dlrt__graph_fail(g, DLRT_ERR_OOM, "out of host memory");
  dlrt__node *n = calloc(1, sizeof *n);
  if (!n) return dlrt__graph_fail(g, DLRT_ERR_OOM, "out of host memory");
  n->op = op;
  n->phase = phase;
  g->nodes[g->n_nodes++] = n;
  return n;
}

void dlrt__node_inputs(dlrt__node *n, int count, dlrt_tensor_t *const *in) {
  n->n_in = count;
  for (int i = 0; i < count; i++) n->in[i] = in[i];
}

dlrt_tensor_t *dlrt__node1(dlrt_graph_t *g, dlrt__op_kind op, dlrt__node_phase phase, int n_in,
                           dlrt_tensor_t *const *in, int ndim, const int64_t *shape,
                           const char *name) {
  char auto_name[64];
  if (!name) {
    snprintf(auto_name, sizeof auto_name, "%s%d", dlrt__op_name(op), g->n_tensors);
    name = auto_name;
  }
  dlrt_tensor_t *t = dlrt__tensor_new(g, name, DLRT_F32, ndim, shape, DLRT__TENSOR_INTERMEDIATE);
  if (!t) return NULL;
  dlrt__node *n = dlrt__node_new(g, op, phase);
  if (!n) return NULL;
  dlrt__node_inputs(n, n_in, in);
  n->n_out = 1;
  n->out[0] = t;
  t->producer = n;
  for (int i = 0; i < n_in; i++) t->needs_grad |= in[i]->needs_grad;
  return t;
}

int64_t dlrt__conv_chunk(int64_t ckk, int64_t ohw, int64_t n) {
  const char *env = getenv("DLRT_CONV_WORKSPACE");
  uint64_t bytes = 0; /* of fp32 cols per chunk */
  int64_t limit = env && *env && dlrt_parse_size(env, 0, &bytes) == DLRT_OK && bytes > 0
                      ? (int64_t)(bytes > INT64_MAX / 2 ? INT64_MAX / 2 : bytes)
                      : DLRT_CONV_WORKSPACE;
  int64_t per_image = ckk * ohw * 4, chunk = per_image > 0 ? limit / per_image : n;
  if (chunk > DLRT_CONV_CHUNK_IMAGES) chunk = DLRT_CONV_CHUNK_IMAGES;
  return chunk < 1 ? 1 : chunk > n ? n : chunk;
}

int64_t dlrt__conv_weight_piece(int64_t o, int64_t ckk, int64_t ohw, int64_t chunk) {
  int64_t per_image = (o + ckk) * ohw * 4, piece = chunk;
  while (piece > 1 && (chunk % piece || per_image > DLRT_CONV_PIECE / piece)) piece--;
  return piece;
}

dlrt_tensor_t *dlrt__add_workspace(dlrt_graph_t *g, dlrt__node *n, int ndim, const int64_t *shape,
                                   dlrt_dtype dtype) {
  char name[64];
  snprintf(name, sizeof name, "%.50s.workspace", n->out[0]->name);
  dlrt_tensor_t *ws = dlrt__tensor_new(g, name, dtype, ndim, shape, DLRT__TENSOR_INTERMEDIATE);
  if (!ws) return NULL;
  n->out[n->n_out++] = ws;
  ws->producer = n;
  return ws;
}

/* ---------------------------------------------------------------- marks */

dlrt_tensor_t *dlrt_checkpoint_mark(dlrt_graph_t *g, dlrt_tensor_t *t) {
  if (!g || g->status || !t) return NULL;
  if (!t->producer || t->producer->phase != DLRT__PHASE_FORWARD)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dlrt_checkpoint_mark: %s is not made by "
                            "an op of the forward pass (an input, a parameter or a gradient "
                            "ends no segment)", t->name);
  t->segment_end = 1;
  return t;
}

/* ---------------------------------------------------------------- ops */

/* Common entry checks: graph usable, forward building still open, inputs set. */
int dlrt__graph_begin(dlrt_graph_t *g, const char *op, int n, dlrt_tensor_t *const *in) {
  if (!g || g->status) return 0;
  if (g->backward_done) {
    dlrt__graph_fail(g, DLRT_ERR_STATE, "%s: the forward pass is closed once "
                     "dlrt_graph_backward ran", op);
    return 0;
  }
  for (int i = 0; i < n; i++)
    if (!in[i]) {
      dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: input %d is NULL", op, i);
      return 0;
    }
  return 1;
}

static void shape_text(const dlrt_tensor_t *t, char *out, size_t n) {
  size_t used = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < t->ndim && used < n; i++)
    used += (size_t)snprintf(out + used, n - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (used < n) snprintf(out + used, n - used, "]");
}

void *dlrt__shape_error(dlrt_graph_t *g, const char *op, const char *what,
                         const dlrt_tensor_t *a, const dlrt_tensor_t *b) {
  char sa[96], sb[96] = "";
  shape_text(a, sa, sizeof sa);
  if (b) shape_text(b, sb, sizeof sb);
  return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: %s (%s %s%s%s%s%s)", op, what, a->name,
                          sa, b ? ", " : "", b ? b->name : "", b ? " " : "", b ? sb : "");
}

int dlrt__is_f32(dlrt_graph_t *g, const char *op, const dlrt_tensor_t *t) {
  /* Or the compute type: a 16-bit input of a mixed-precision graph, which
   * the precision pass treats as already cast. */
  if (t->dtype == DLRT_F32 || (t->dtype != DLRT_I32 && t->dtype == g->precision)) return 1;
  dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: %s is %s, expected f32", op, t->name,
                   dlrt_dtype_name(t->dtype));
  return 0;
}

dlrt_tensor_t *dlrt_matmul(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b, int ta, int tb) {
  dlrt_tensor_t *in[2] = {a, b};
  if (!dlrt__graph_begin(g, "matmul", 2, in) || !dlrt__is_f32(g, "matmul", a) ||
      !dlrt__is_f32(g, "matmul", b))
    return NULL;
  if (a->ndim == 3 && b->ndim == 2 && !ta) {
    /* A batch against one matrix: one GEMM over the stacked rows. */
    int64_t rows[2] = {a->shape[0] * a->shape[1], a->shape[2]};
    dlrt_tensor_t *y = dlrt_matmul(g, dlrt_reshape(g, a, 2, rows), b, 0, tb);
    if (!y) return NULL;
    int64_t shape[3] = {a->shape[0], a->shape[1], y->shape[1]};
    return dlrt_reshape(g, y, 3, shape);
  }
  int batched = a->ndim == 3 && b->ndim == 3;
  if (!(a->ndim == 2 && b->ndim == 2) && !(batched && a->shape[0] == b->shape[0]))
    return dlrt__shape_error(g, "matmul", "needs 2-D operands, two 3-D ones with one batch, "
                             "or a 3-D one (not transposed) times a 2-D one", a, b);
  int o = batched; /* the matrix dimensions follow the batch one */
  int64_t m = ta ? a->shape[o + 1] : a->shape[o], k = ta ? a->shape[o] : a->shape[o + 1];
  int64_t kb = tb ? b->shape[o + 1] : b->shape[o], n = tb ? b->shape[o] : b->shape[o + 1];
  if (k != kb) return dlrt__shape_error(g, "matmul", "inner dimensions differ", a, b);
  int64_t batch = batched ? a->shape[0] : 1;
  int64_t shape[3] = {batch, m, n};
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_BMM, DLRT__PHASE_FORWARD, 2, in, batched ? 3 : 2,
                                 batched ? shape : shape + 1, NULL);
  if (!y) return NULL;
  struct dlrt__bmm_params *p = &y->producer->bmm;
  p->trans_a = ta ? 1 : 0, p->trans_b = tb ? 1 : 0, p->m = m, p->n = n, p->k = k;
  p->batch = batch;
  p->stride_a = batched ? m * k : 0, p->stride_b = batched ? k * n : 0;
  p->stride_c = batched ? m * n : 0;
  return y;
}

dlrt_tensor_t *dlrt_linear(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                           dlrt_tensor_t *b) {
  dlrt_tensor_t *in[2] = {x, w};
  if (!dlrt__graph_begin(g, "linear", 2, in)) return NULL;
  if (x->ndim != 2 || w->ndim != 2 || x->shape[1] != w->shape[1])
    return dlrt__shape_error(g, "linear", "x must be N x in and W out x in", x, w);
  dlrt_tensor_t *y = dlrt_matmul(g, x, w, 0, 1);
  if (!y || !b) return y;
  if (b->ndim != 1 || b->shape[0] != w->shape[0])
    return dlrt__shape_error(g, "linear", "the bias must have one element per output", b, w);
  dlrt_tensor_t *yb_in[2] = {y, b};
  dlrt_tensor_t *yb = dlrt__node1(g, DLRT__OP_BIAS_ROWS, DLRT__PHASE_FORWARD, 2, yb_in, 2, y->shape, NULL);
  if (yb) yb->producer->rows.rows = y->shape[0], yb->producer->rows.cols = y->shape[1];
  return yb;
}

static dlrt_tensor_t *unary(dlrt_graph_t *g, dlrt__op_kind op, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, dlrt__op_name(op), 1, &x) || !dlrt__is_f32(g, dlrt__op_name(op), x)) return NULL;
  dlrt_tensor_t *y = dlrt__node1(g, op, DLRT__PHASE_FORWARD, 1, &x, x->ndim, x->shape, NULL);
  if (y) y->cnhw = x->cnhw;
  return y;
}

dlrt_tensor_t *dlrt_relu(dlrt_graph_t *g, dlrt_tensor_t *x) { return unary(g, DLRT__OP_RELU, x); }

dlrt_tensor_t *dlrt_scale(dlrt_graph_t *g, dlrt_tensor_t *x, float alpha) {
  dlrt_tensor_t *y = unary(g, DLRT__OP_SCALE, x);
  if (y) y->producer->scale.alpha = alpha;
  return y;
}

dlrt_tensor_t *dlrt_sum(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, "sum", 1, &x) || !dlrt__is_f32(g, "sum", x)) return NULL;
  int64_t one = 1;
  return dlrt__node1(g, DLRT__OP_SUM, DLRT__PHASE_FORWARD, 1, &x, 1, &one, NULL);
}

/* The same image in N x C x H x W storage (a permute node when it is CNHW). */
dlrt_tensor_t *dlrt__to_nchw(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!x->cnhw) return x;
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_PERMUTE, DLRT__PHASE_FORWARD, 1, &x, 4, x->shape, NULL);
  if (y) {
    y->producer->permute.na = x->shape[1];
    y->producer->permute.nb = x->shape[0];
    y->producer->permute.inner = x->shape[2] * x->shape[3];
  }
  return y;
}

static dlrt_tensor_t *binary(dlrt_graph_t *g, dlrt__op_kind op, dlrt_tensor_t *a, dlrt_tensor_t *b) {
  dlrt_tensor_t *in[2] = {a, b};
  const char *name = dlrt__op_name(op);
  if (!dlrt__graph_begin(g, name, 2, in) || !dlrt__is_f32(g, name, a) || !dlrt__is_f32(g, name, b)) return NULL;
  if (a->numel != b->numel || a->ndim != b->ndim ||
      memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) != 0) {
    /* b broadcast over a's leading dimensions: b's shape is a's trailing one. */
    int trailing = b->ndim >= 1 && b->ndim < a->ndim &&
                   memcmp(a->shape + (a->ndim - b->ndim), b->shape,
                          (size_t)b->ndim * sizeof b->shape[0]) == 0;
    if (!trailing)
      return dlrt__shape_error(g, name, "shapes differ (b may only have a's trailing shape)", a, b);
    if (!(a = dlrt__to_nchw(g, a))) return NULL;
    dlrt_tensor_t *bin[2] = {a, b};
    dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_BCAST, DLRT__PHASE_FORWARD, 2, bin, a->ndim, a->shape, NULL);
    if (y) {
      y->producer->bcast.count = a->numel, y->producer->bcast.m = b->numel;
      y->producer->bcast.op = op == DLRT__OP_ADD   ? DLRT__BCAST_ADD
                              : op == DLRT__OP_SUB ? DLRT__BCAST_SUB
                              : op == DLRT__OP_MUL ? DLRT__BCAST_MUL
                                             : DLRT__BCAST_DIV;
    }
    return y;
  }
  if (a->cnhw != b->cnhw) {
    in[0] = a = dlrt__to_nchw(g, a);
    in[1] = b = dlrt__to_nchw(g, b);
    if (!a || !b) return NULL;
  }
  dlrt_tensor_t *y = dlrt__node1(g, op, DLRT__PHASE_FORWARD, 2, in, a->ndim, a->shape, NULL);
  if (y) y->cnhw = a->cnhw;
  return y;
}

dlrt_tensor_t *dlrt_add(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b) {
  return binary(g, DLRT__OP_ADD, a, b);
}

dlrt_tensor_t *dlrt_mul(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b) {
  return binary(g, DLRT__OP_MUL, a, b);
}

dlrt_tensor_t *dlrt_sub(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b) {
  return binary(g, DLRT__OP_SUB, a, b);
}

dlrt_tensor_t *dlrt_div(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b) {
  return binary(g, DLRT__OP_DIV, a, b);
}

static dlrt_tensor_t *activation(dlrt_graph_t *g, dlrt_tensor_t *x, int kind) {
  dlrt_tensor_t *y = unary(g, DLRT__OP_ACT, x);
  if (y) y->producer->act.kind = kind;
  return y;
}

dlrt_tensor_t *dlrt_tanh(dlrt_graph_t *g, dlrt_tensor_t *x) {
  return activation(g, x, DLRT__ACT_TANH);
}
dlrt_tensor_t *dlrt_sigmoid(dlrt_graph_t *g, dlrt_tensor_t *x) {
  return activation(g, x, DLRT__ACT_SIGMOID);
}
dlrt_tensor_t *dlrt_gelu(dlrt_graph_t *g, dlrt_tensor_t *x) {
  return activation(g, x, DLRT__ACT_GELU);
}

dlrt_tensor_t *dlrt_gelu_tanh(dlrt_graph_t *g, dlrt_tensor_t *x) {
  return activation(g, x, DLRT__ACT_GELU_TANH);
}

dlrt_tensor_t *dlrt_softmax(dlrt_graph_t *g, dlrt_tensor_t *x) {
  if (!dlrt__graph_begin(g, "softmax", 1, &x) || !dlrt__is_f32(g, "softmax", x)) return NULL;
  if (x->ndim < 1) return dlrt__shape_error(g, "softmax", "needs rows of a last axis", x, NULL);
  if (!(x = dlrt__to_nchw(g, x))) return NULL;
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_SOFTMAX, DLRT__PHASE_FORWARD, 1, &x, x->ndim, x->shape, NULL);
  if (y) {
    struct dlrt__rows_params *p = &y->producer->rows;
    p->cols = x->shape[x->ndim - 1];
    p->rows = p->cols ? x->numel / p->cols : 0;
  }
  return y;
}

dlrt_tensor_t *dlrt_mse(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b) {
  dlrt_tensor_t *in[2] = {a, b};
  if (!dlrt__graph_begin(g, "mse", 2, in)) return NULL;
  if (a->numel != b->numel || a->ndim != b->ndim ||
      memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) != 0)
    return dlrt__shape_error(g, "mse", "shapes differ", a, b);
  dlrt_tensor_t *d = dlrt_sub(g, a, b);
  if (!d) return NULL;
  dlrt_tensor_t *sq = dlrt_sum(g, dlrt_mul(g, d, d));
  return sq ? dlrt_scale(g, sq, 1.0f / (float)(d->numel ? d->numel : 1)) : NULL;
}

dlrt_tensor_t *dlrt_dropout(dlrt_graph_t *g, dlrt_tensor_t *x, float p) {
  if (!dlrt__graph_begin(g, "dropout", 1, &x)) return NULL;
  if (!(p >= 0.0f && p < 1.0f))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dropout: probability %g is outside [0, 1)", p);
  dlrt_tensor_t *y = unary(g, DLRT__OP_DROPOUT, x);
  if (y) {
    y->producer->dropout.prob = p;
    y->producer->dropout.salt = g->n_nodes; /* differs per dropout node */
  }
  return y;
}

/* A permute node swapping the two leading axes of x viewed as na x nb x inner. */
dlrt_tensor_t *dlrt__swap_axes(dlrt_graph_t *g, dlrt_tensor_t *x, int64_t na, int64_t nb,
                                int64_t inner, int ndim, const int64_t *shape) {
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_PERMUTE, DLRT__PHASE_FORWARD, 1, &x, ndim, shape, NULL);
  if (y) y->producer->permute.na = na, y->producer->permute.nb = nb,
         y->producer->permute.inner = inner;
  return y;
}

dlrt_tensor_t *dlrt_conv2d(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                           dlrt_tensor_t *b, int stride, int pad, int dil) {
  dlrt_tensor_t *in[2] = {x, w};
  if (!dlrt__graph_begin(g, "conv2d", 2, in) || !dlrt__is_f32(g, "conv2d", x) || !dlrt__is_f32(g, "conv2d", w))
    return NULL;
  if (x->ndim != 4 || w->ndim != 4 || x->shape[1] != w->shape[1])
    return dlrt__shape_error(g, "conv2d", "x must be N x C x H x W and w O x C x kh x kw", x, w);
  if (stride < 1 || pad < 0 || dil < 1)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "conv2d: stride %d, padding %d, "
                            "dilation %d (need stride >= 1, padding >= 0, dilation >= 1)",
                            stride, pad, dil);
  int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], wd = x->shape[3];
  int64_t o = w->shape[0], kh = w->shape[2], kw = w->shape[3];
  /* In int64_t, checked: padding and dilation come from model files. The
   * dilated kernel spans dil * (k - 1) + 1 pixels of the padded image. */
  int64_t span_h, span_w;
  if (__builtin_mul_overflow((int64_t)dil, kh - 1, &span_h) ||
      __builtin_mul_overflow((int64_t)dil, kw - 1, &span_w))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "conv2d: dilation %d of a %lld x %lld "
                            "kernel spans more pixels than int64_t counts", dil,
                            (long long)kh, (long long)kw);
  int64_t oh = (h + 2 * (int64_t)pad - span_h - 1) / stride + 1;
  int64_t ow = (wd + 2 * (int64_t)pad - span_w - 1) / stride + 1;
  if (oh < 1 || ow < 1) return dlrt__shape_error(g, "conv2d", "the kernel is larger than the image", x, w);
  /* The output's and the workspace's sizes, multiplied further below. */
  int64_t ohw, y_elements, ws_elements;
  int64_t y_dims[4] = {n, o, oh, ow}, ws_dims[3] = {c * kh * kw, oh, ow};
  if (!dlrt__shape_elements(2, y_dims + 2, &ohw) || !dlrt__shape_elements(4, y_dims, &y_elements) ||
      !dlrt__shape_elements(3, ws_dims, &ws_elements))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "conv2d: an output of %lld x %lld pixels "
                            "(padding %d, stride %d, %lld channels, %lld images) is more than a "
                            "tensor can hold; use less padding", (long long)oh, (long long)ow,
                            pad, stride, (long long)o, (long long)n);
  /* The output is stored CNHW (channel-major), which the next conv2d reads
   * directly: y (O x N*OHW) = W (O x CKK) x cols (CKK x N*OHW), one GEMM per
   * chunk of images whose cols fit the workspace (an output of the node, so
   * the plan counts it and frees it after the node), not one cols of the
   * whole batch: the backward pass recomputes cols from x, chunk by chunk,
   * and holds x (9x smaller for 3x3 kernels) instead of cols. */
  int64_t ckk = c * kh * kw;
  int64_t chunk = dlrt__conv_chunk(ckk, ohw, n);
  int64_t y_shape[4] = {n, o, oh, ow}, ws_shape[2] = {ckk, chunk * ohw};
  dlrt_tensor_t *y = dlrt__node1(g, DLRT__OP_CONV, DLRT__PHASE_FORWARD, 2, in, 4, y_shape, NULL);
  if (!y) return NULL;
  y->cnhw = 1;
  y->producer->conv = (struct dlrt__conv_params){
      .n = n, .c = c, .h = h, .w = wd, .kh = kh, .kw = kw, .stride = stride, .pad = pad,
      .dilation = dil, .oh = oh, .ow = ow, .x_cnhw = x->cnhw};
  if (!dlrt__add_workspace(g, y->producer, 2, ws_shape, DLRT_F32)) return NULL;
  if (!b) return y;
  if (b->ndim != 1 || b->shape[0] != o)
    return dlrt__shape_error(g, "conv2d", "the bias must have one element per output channel", b, w);
  dlrt_tensor_t *bin[2] = {y, b};
  dlrt_tensor_t *yb = dlrt__node1(g, DLRT__OP_BIAS_CHANNELS, DLRT__PHASE_FORWARD, 2, bin, 4, y_shape, NULL);
  if (yb) {
    /* CNHW: one "image" whose channels each span N * OHW values, of N
     * images (the gradient sums them one by one, see run_bias_grad). */
    yb->cnhw = 1;
    yb->producer->channels = (struct dlrt__channels_params){
        .n = 1, .channels = o, .spatial = n * ohw, .images = n};
  }
  return yb;
}

static dlrt_tensor_t *pool2d(dlrt_graph_t *g, dlrt__op_kind op, dlrt_tensor_t *x, int k, int stride) {
  const char *name = op == DLRT__OP_MAXPOOL ? "max_pool2d" : "avg_pool2d";
  if (!dlrt__graph_begin(g, name, 1, &x) || !dlrt__is_f32(g, name, x)) return NULL;
  if (x->ndim != 4) return dlrt__shape_error(g, name, "x must be N x C x H x W", x, NULL);
  if (k < 1 || stride < 1 || k > x->shape[2] || k > x->shape[3])
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "%s: window %d, stride %d on a "
                            "%lld x %lld image", name, k, stride, (long long)x->shape[2],
                            (long long)x->shape[3]);
  if (op == DLRT__OP_MAXPOOL && k > 16) /* the maximum's place in its window is one byte */
    return dlrt__graph_fail(g, DLRT_ERR_UNSUPPORTED, "max_pool2d: window %d x %d; windows "
                            "up to 16 x 16 are supported (use avg_pool2d, or pool twice)",
                            k, k);
  int64_t oh = (x->shape[2] - k) / stride + 1, ow = (x->shape[3] - k) / stride + 1;
  int64_t shape[4] = {x->shape[0], x->shape[1], oh, ow};
  dlrt_tensor_t *y = dlrt__node1(g, op, DLRT__PHASE_FORWARD, 1, &x, 4, shape, NULL);
  if (!y) return NULL;
  y->cnhw = x->cnhw; /* planes are planes in either layout */
  y->producer->pool = (struct dlrt__pool_params){
      .planes = x->shape[0] * x->shape[1], .h = x->shape[2], .w = x->shape[3], .k = k,
      .stride = stride, .oh = oh, .ow = ow};
  if (op == DLRT__OP_AVGPOOL) return y;
  char argmax_name[64];
  snprintf(argmax_name, sizeof argmax_name, "%.50s.argmax", y->name);
  /* Where in its window each maximum is: ky * k + kx, one byte (4x less to
   * hold until the backward pass than a flat int32 index). */
  dlrt_tensor_t *argmax = dlrt__tensor_new(g, argmax_name, DLRT_U8, 4, shape, DLRT__TENSOR_INTERMEDIATE);
  if (!argmax) return NULL;
  dlrt__node *n = y->producer;
  n->n_out = 2;
  n->out[1] = argmax;
  argmax->producer = n;
  argmax->cnhw = y->cnhw; /* the kernels place it as they place y */
  return y;
}

dlrt_tensor_t *dlrt_max_pool2d(dlrt_graph_t *g, dlrt_tensor_t *x, int k, int stride) {
  return pool2d(g, DLRT__OP_MAXPOOL, x, k, stride);
}

dlrt_tensor_t *dlrt_avg_pool2d(dlrt_graph_t *g, dlrt_tensor_t *x, int k, int stride) {
  return pool2d(g, DLRT__OP_AVGPOOL, x, k, stride);
}

dlrt_tensor_t *dlrt_cross_entropy(dlrt_graph_t *g, dlrt_tensor_t *logits, dlrt_tensor_t *labels,
                                  float smoothing) {
  dlrt_tensor_t *in[2] = {logits, labels};
  if (!dlrt__graph_begin(g, "cross_entropy", 2, in) || !dlrt__is_f32(g, "cross_entropy", logits)) return NULL;
  if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0] ||
      labels->dtype != DLRT_I32)
    return dlrt__shape_error(g, "cross_entropy", "logits must be N x classes and labels N of i32",
                       logits, labels);
  if (!(smoothing >= 0.0f && smoothing < 1.0f))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "cross_entropy: label smoothing %g is "
                            "outside [0, 1)", smoothing);
  int64_t one = 1;
  dlrt_tensor_t *loss = dlrt__node1(g, DLRT__OP_XENT, DLRT__PHASE_FORWARD, 2, in, 1, &one, "loss");
  if (!loss) return NULL;
  dlrt__node *n = loss->producer;
  dlrt_tensor_t *rows = dlrt__tensor_new(g, "loss.rows", DLRT_F32, 1, logits->shape,
                                         DLRT__TENSOR_INTERMEDIATE);
  dlrt_tensor_t *dz = dlrt__tensor_new(g, "loss.dlogits", DLRT_F32, 2, logits->shape,
                                       DLRT__TENSOR_INTERMEDIATE);
  if (!rows || !dz) return NULL;
  n->n_out = 3;
  n->out[1] = rows;
  n->out[2] = dz;
  rows->producer = dz->producer = n;
  n->xent.rows = logits->shape[0];
  n->xent.classes = logits->shape[1];
  n->xent.smoothing = smoothing;
  return loss;
}

/* ---------------------------------------------------------------- queries */

int dlrt_tensor_shape(const dlrt_tensor_t *t, int64_t shape[DLRT_MAX_DIMS]) {
  DLRT__CHECK_ARG(t && shape, "tensor or shape is NULL");
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
  return t->ndim;
}

int64_t dlrt_tensor_numel(const dlrt_tensor_t *t) { return t ? t->numel : 0; }

dlrt_dtype dlrt_tensor_dtype(const dlrt_tensor_t *t) { return t ? t->dtype : DLRT_F32; }

int dlrt_tensor_layout(const dlrt_tensor_t *t, int64_t strides[DLRT_MAX_DIMS], int64_t *offset) {
  DLRT__CHECK_ARG(t && strides && offset, "dlrt_tensor_layout: tensor, strides or offset is NULL");
  memcpy(strides, t->strides, (size_t)t->ndim * sizeof *strides);
  *offset = t->offset;
  return t->owner != t;
}

const char *dlrt_tensor_name(const dlrt_tensor_t *t) { return t ? t->name : NULL; }
