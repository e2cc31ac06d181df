/* autodiff.c — reverse-mode differentiation of the forward pass, appended to
 * the graph as backward nodes, and the optimizer's fused update nodes. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

/* Whether `reader` is the only forward node that reads t's storage. */
static int only_reader(const dlrt_graph_t *g, const dlrt_tensor_t *t, const dlrt__node *reader) {
  for (int i = 0; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    if (n == reader || n->phase != DLRT__PHASE_FORWARD) continue;
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j]->owner == t->owner) return 0;
  }
  return 1;
}

/* A backward node whose one output (of the given shape) is a gradient
 * contribution for `of`: named after it, and of its type (mixed precision
 * keeps each gradient in its tensor's type). */
static dlrt_tensor_t *bnode(dlrt_graph_t *g, dlrt__op_kind op, int n_in, dlrt_tensor_t *const *in,
                            int ndim, const int64_t *shape, const dlrt_tensor_t *of) {
  char name[64];
  snprintf(name, sizeof name, "d%.40s.%s%d", of->name, dlrt__op_name(op), g->n_tensors);
  dlrt_tensor_t *d = dlrt__node1(g, op, DLRT__PHASE_BACKWARD, n_in, in, ndim, shape, name);
  if (d) d->dtype = of->dtype;
  return d;
}

/* out[b] = op(a[b]) op(b[b]) with the given sizes and batch strides. */
static dlrt_tensor_t *bmm(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b, int ta, int tb,
                          int64_t m, int64_t n, int64_t k, int64_t batch, int64_t sa,
                          int64_t sb, int64_t sc, int ndim, const int64_t *shape,
                          const dlrt_tensor_t *grad_of) {
  dlrt_tensor_t *in[2] = {a, b};
  dlrt_tensor_t *y = bnode(g, DLRT__OP_BMM, 2, in, ndim, shape, grad_of);
  if (!y) return NULL;
  y->producer->bmm = (struct dlrt__bmm_params){
      .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .batch = batch,
      .stride_a = sa, .stride_b = sb, .stride_c = sc};
  return y;
}

/* A normalisation gradient's parameters: the forward node's shape (its
 * batch_norm and eps are the forward's alone). */
static void norm_grad_params(dlrt__node *grad, const dlrt__node *norm) {
  grad->norm.rows = norm->norm.rows;
  grad->norm.cols = norm->norm.cols;
  grad->norm.per_row = norm->norm.per_row;
}

/* Adds a contribution to t's gradient: the first one is the gradient; later
 * ones are summed by add nodes. */
static int accumulate(dlrt_graph_t *g, dlrt_tensor_t *t, dlrt_tensor_t *contribution) {
  if (!contribution) return g->status ? g->status : DLRT_ERR_OOM;
  if (!t->needs_grad) return DLRT_OK;
  if (contribution->dtype != t->dtype) {
    /* A contribution in another type (mixed precision): cast to t's. */
    contribution = bnode(g, DLRT__OP_CAST, 1, &contribution, t->ndim, t->shape, t);
    if (!contribution) return g->status;
  }
  /* A gradient is stored like its tensor (NCHW or CNHW). */
  contribution->cnhw = t->cnhw;
  if (!t->grad) {
    t->grad = contribution;
    return DLRT_OK;
  }
  dlrt_tensor_t *in[2] = {t->grad, contribution};
  dlrt_tensor_t *sum = bnode(g, DLRT__OP_ADD, 2, in, t->ndim, t->shape, t);
  if (!sum) return g->status;
  sum->cnhw = t->cnhw;
  t->grad = sum;
  return DLRT_OK;
}

static int backward_node(dlrt_graph_t *g, dlrt__node *n) {
  dlrt_tensor_t *y = n->out[0], *dy = y->grad;
  dlrt_tensor_t *a = n->in[0], *b = n->n_in > 1 ? n->in[1] : NULL;
  int rc = DLRT_OK;
  switch (n->op) {
  case DLRT__OP_BMM: {
    const struct dlrt__bmm_params *p = &n->bmm;
    int ta = (int)p->trans_a, tb = (int)p->trans_b;
    int64_t m = p->m, nn = p->n, k = p->k, batch = p->batch ? p->batch : 1;
    int64_t sa = p->stride_a, sb = p->stride_b, sc = p->stride_c;
    if (batch > 1 && (sa == 0 || sb == 0))
      return dlrt__graph_fail(g, DLRT_ERR_UNSUPPORTED, "backward of a matmul that broadcasts "
                              "one operand over the batch"), g->status;
    /* C = op(A) op(B), per batch: dA = dC op(B)^T (or its transpose when A is
     * transposed), dB = op(A)^T dC (likewise). Gradients are laid out as
     * their operands, so their batch strides are the operands'. */
    if (a->needs_grad)
      rc = accumulate(g, a, ta ? bmm(g, b, dy, tb, 1, k, m, nn, batch, sb, sc, sa, a->ndim,
                                     a->shape, a)
                               : bmm(g, dy, b, 0, !tb, m, k, nn, batch, sc, sb, sa, a->ndim,
                                     a->shape, a));
    if (rc == DLRT_OK && b->needs_grad)
      rc = accumulate(g, b, tb ? bmm(g, dy, a, 1, ta, nn, k, m, batch, sc, sa, sb, b->ndim,
                                     b->shape, b)
                               : bmm(g, a, dy, !ta, 0, k, nn, m, batch, sa, sc, sb, b->ndim,
                                     b->shape, b));
    return rc;
  }
  case DLRT__OP_BIAS_ROWS:
  case DLRT__OP_BIAS_CHANNELS:
    rc = accumulate(g, a, dy);
    if (rc == DLRT_OK && b->needs_grad) {
      dlrt__op_kind op = n->op == DLRT__OP_BIAS_ROWS ? DLRT__OP_SUM_COLS : DLRT__OP_SUM_CHANNELS;
      dlrt_tensor_t *db = bnode(g, op, 1, &dy, b->ndim, b->shape, b);
      if (db && op == DLRT__OP_SUM_COLS) db->producer->rows = n->rows;
      if (db && op == DLRT__OP_SUM_CHANNELS) db->producer->channels = n->channels;
      rc = accumulate(g, b, db);
    }
    return rc;
  case DLRT__OP_RELU: {
    dlrt_tensor_t *in[2] = {dy, y};
    return accumulate(g, a, bnode(g, DLRT__OP_RELU_GRAD, 2, in, a->ndim, a->shape, a));
  }
  case DLRT__OP_ADD:
    rc = accumulate(g, a, dy);
    return rc == DLRT_OK ? accumulate(g, b, dy) : rc;
  case DLRT__OP_MUL: {
    if (a->needs_grad) {
      dlrt_tensor_t *in[2] = {dy, b};
      rc = accumulate(g, a, bnode(g, DLRT__OP_MUL, 2, in, a->ndim, a->shape, a));
    }
    if (rc == DLRT_OK && b->needs_grad) {
      dlrt_tensor_t *in[2] = {dy, a};
      rc = accumulate(g, b, bnode(g, DLRT__OP_MUL, 2, in, b->ndim, b->shape, b));
    }
    return rc;
  }
  case DLRT__OP_SCALE: {
    dlrt_tensor_t *d = bnode(g, DLRT__OP_SCALE, 1, &dy, a->ndim, a->shape, a);
    if (d) d->producer->scale.alpha = n->scale.alpha;
    return accumulate(g, a, d);
  }
  case DLRT__OP_SUM: {
    dlrt_tensor_t *d = bnode(g, DLRT__OP_BROADCAST, 1, &dy, a->ndim, a->shape, a);
    if (d) d->producer->scale.alpha = 1.0f;
    return accumulate(g, a, d);
  }
  case DLRT__OP_VIEW: {
    /* A reshape's gradient is dy reshaped (dense first); a transpose's is
     * dy's view with the same axes transposed back. */
    int transpose = n->view.transpose == 1;
    if (!transpose && !(dy = dlrt__make_contiguous(g, dy, DLRT__PHASE_BACKWARD))) return g->status;
    dlrt_tensor_t *d = bnode(g, DLRT__OP_VIEW, 1, &dy, a->ndim, a->shape, a);
    if (!d) return g->status;
    d->producer->view = n->view;
    d->owner = dy->owner;
    d->offset = dy->offset;
    if (transpose) {
      int a0 = (int)n->view.axis0, a1 = (int)n->view.axis1;
      memcpy(d->strides, dy->strides, sizeof d->strides);
      d->strides[a0] = dy->strides[a1], d->strides[a1] = dy->strides[a0];
    }
    return accumulate(g, a, d);
  }
  case DLRT__OP_CONTIGUOUS:
    /* The dense copy a reshape makes of a strided view: the same elements,
     * so the same gradient (the view's own node then lays it out). */
    return accumulate(g, a, dy);
  case DLRT__OP_PERMUTE: {
    dlrt_tensor_t *d = bnode(g, DLRT__OP_PERMUTE, 1, &dy, a->ndim, a->shape, a);
    if (d)
      d->producer->permute = (struct dlrt__permute_params){
          .na = n->permute.nb, .nb = n->permute.na, .inner = n->permute.inner};
    return accumulate(g, a, d);
  }
  case DLRT__OP_CONV: {
    /* y = W cols(x), chunk by chunk: dW = sum of dy cols^T and dx =
     * col2im(W^T dy), each recomputing or holding one chunk's cols in its
     * own workspace (of the forward one's shape, in dy's type). */
    dlrt_tensor_t *ws = n->out[1];
    if (b->needs_grad) {
      dlrt_tensor_t *in[2] = {dy, a};
      dlrt_tensor_t *dw = bnode(g, DLRT__OP_CONV_GRAD_W, 2, in, b->ndim, b->shape, b);
      if (!dw || !dlrt__add_workspace(g, dw->producer, ws->ndim, ws->shape, dy->dtype))
        return g->status;
      dw->producer->conv = n->conv;
      rc = accumulate(g, b, dw);
    }
    if (rc == DLRT_OK && a->needs_grad) {
      dlrt_tensor_t *in[2] = {dy, b};
      dlrt_tensor_t *dx = bnode(g, DLRT__OP_CONV_GRAD_X, 2, in, a->ndim, a->shape, a);
      if (!dx || !dlrt__add_workspace(g, dx->producer, ws->ndim, ws->shape, dy->dtype))
        return g->status;
      dx->producer->conv = n->conv;
      rc = accumulate(g, a, dx);
    }
    return rc;
  }
  case DLRT__OP_MAXPOOL: {
    /* Pooling a ReLU's output that nothing else reads: one pass gives the
     * gradient of both, the maximum's sign serving as the ReLU's mask, so
     * the ReLU's output need not live until the backward pass. The values
     * are relu_grad(maxpool_grad(dy)) bit for bit. A kept output keeps its
     * own gradient (and the two passes). */
    dlrt__node *relu = a->producer;
    int fuse = relu && relu->op == DLRT__OP_RELU && a->owner == a && !a->kept &&
               relu->in[0]->dtype == a->dtype && only_reader(g, a, n);
    dlrt_tensor_t *target = fuse ? relu->in[0] : a;
    /* The mask is the maximum's sign: a bit of the argmax byte for windows
     * of up to 128 places, so the pooled output need not live on for it;
     * the pooled output itself for larger ones. */
    int mask_input = fuse && n->pool.k * n->pool.k > 128;
    dlrt_tensor_t *in[3] = {dy, n->out[1], n->out[0]};
    dlrt_tensor_t *d = bnode(g, DLRT__OP_MAXPOOL_GRAD, mask_input ? 3 : 2, in, a->ndim, a->shape, target);
    if (d) {
      d->producer->pool = n->pool;
      d->producer->pool.relu_fused = fuse;
    }
    return accumulate(g, target, d);
  }
  case DLRT__OP_SUB: {
    rc = accumulate(g, a, dy);
    if (rc == DLRT_OK && b->needs_grad) {
      dlrt_tensor_t *d = bnode(g, DLRT__OP_SCALE, 1, &dy, b->ndim, b->shape, b);
      if (d) d->producer->scale.alpha = -1.0f;
      rc = accumulate(g, b, d);
    }
    return rc;
  }
  case DLRT__OP_DIV: {
    if (a->needs_grad) {
      dlrt_tensor_t *in[2] = {dy, b};
      rc = accumulate(g, a, bnode(g, DLRT__OP_DIV, 2, in, a->ndim, a->shape, a));
    }
    if (rc == DLRT_OK && b->needs_grad) {
      dlrt_tensor_t *in[3] = {dy, a, b};
      rc = accumulate(g, b, bnode(g, DLRT__OP_DIV_GRAD_Z, 3, in, b->ndim, b->shape, b));
    }
    return rc;
  }
  case DLRT__OP_ACT: {
    /* tanh and sigmoid differentiate from their output, the GELUs from their input. */
    int from_x = n->act.kind == DLRT__ACT_GELU || n->act.kind == DLRT__ACT_GELU_TANH;
    dlrt_tensor_t *in[2] = {dy, from_x ? a : y};
    dlrt_tensor_t *d = bnode(g, DLRT__OP_ACT_GRAD, 2, in, a->ndim, a->shape, a);
    if (d) d->producer->act = n->act;
    return accumulate(g, a, d);
  }
  case DLRT__OP_SOFTMAX: {
    dlrt_tensor_t *in[2] = {dy, y};
    dlrt_tensor_t *d = bnode(g, DLRT__OP_SOFTMAX_GRAD, 2, in, a->ndim, a->shape, a);
    if (d) d->producer->rows = n->rows;
    return accumulate(g, a, d);
  }
  case DLRT__OP_AVGPOOL: {
    dlrt_tensor_t *d = bnode(g, DLRT__OP_AVGPOOL_GRAD, 1, &dy, a->ndim, a->shape, a);
    if (d) d->producer->pool = n->pool;
    return accumulate(g, a, d);
  }
  case DLRT__OP_DROPOUT: {
    /* The same mask (same salt, same step) applied to the gradient. */
    dlrt_tensor_t *d = bnode(g, DLRT__OP_DROPOUT, 1, &dy, a->ndim, a->shape, a);
    if (d) d->producer->dropout = n->dropout;
    return accumulate(g, a, d);
  }
  case DLRT__OP_NORM: {
    dlrt_tensor_t *mean = n->out[1], *rstd = n->out[2], *gamma = b, *beta = n->in[2];
    if (a->needs_grad) {
      dlrt_tensor_t *in[5] = {dy, a, mean, rstd, gamma};
      dlrt_tensor_t *d = bnode(g, DLRT__OP_NORM_GRAD, 5, in, a->ndim, a->shape, a);
      if (d) norm_grad_params(d->producer, n);
      rc = accumulate(g, a, d);
    }
    if (rc == DLRT_OK && (gamma->needs_grad || beta->needs_grad)) {
      dlrt_tensor_t *in[4] = {dy, a, mean, rstd};
      dlrt_tensor_t *dg = bnode(g, DLRT__OP_NORM_AFFINE_GRAD, 4, in, gamma->ndim, gamma->shape,
                                gamma);
      if (!dg) return g->status;
      char name[64];
      snprintf(name, sizeof name, "d%.50s", beta->name);
      dlrt_tensor_t *db = dlrt__tensor_new(g, name, DLRT_F32, beta->ndim, beta->shape,
                                           DLRT__TENSOR_INTERMEDIATE);
      if (!db) return g->status;
      dlrt__node *an = dg->producer;
      an->n_out = 2, an->out[1] = db, db->producer = an;
      db->needs_grad = 1;
      norm_grad_params(an, n);
      rc = accumulate(g, gamma, dg);
      if (rc == DLRT_OK) rc = accumulate(g, beta, db);
    }
    return rc;
  }
  case DLRT__OP_ATTENTION: {
    /* FlashAttention's backward pass: the probabilities are recomputed
     * from qkv and the saved logsumexp, and D = rowsum(dO * y) goes to a
     * workspace of B x heads x T floats (the node's second output). */
    dlrt_tensor_t *lse = n->out[1], *in[4] = {dy, a, y, lse};
    dlrt_tensor_t *d = bnode(g, DLRT__OP_ATTENTION_GRAD, 4, in, a->ndim, a->shape, a);
    if (!d || !dlrt__add_workspace(g, d->producer, lse->ndim, lse->shape, DLRT_F32))
      return g->status;
    d->producer->attention = n->attention;
    return accumulate(g, a, d);
  }
  case DLRT__OP_CONCAT: {
    int64_t start = 0;
    int axis = (int)n->concat.axis;
    for (int i = 0; i < n->n_in && rc == DLRT_OK; i++) {
      dlrt_tensor_t *x = n->in[i];
      if (x->needs_grad) {
        /* The input's part of dy: a view of it. */
        char name[64];
        snprintf(name, sizeof name, "d%.40s.slice%d", x->name, g->n_tensors);
        rc = accumulate(g, x, dlrt__slice_view(g, dy, axis, start, x->shape[axis],
                                               DLRT__PHASE_BACKWARD, name));
      }
      start += x->shape[axis];
    }
    return rc;
  }
  case DLRT__OP_SLICE: {
    /* dy placed into zeros, in fp32 (the kernel's type): a slice of a
     * 16-bit tensor sends a cast of dy, and its gradient is cast back. */
    if (dy->dtype != DLRT_F32) {
      dy = bnode(g, DLRT__OP_CAST, 1, &dy, dy->ndim, dy->shape, dy);
      if (!dy) return g->status;
      dy->dtype = DLRT_F32;
    }
    dlrt_tensor_t *d = bnode(g, DLRT__OP_SLICE_GRAD, 1, &dy, a->ndim, a->shape, a);
    if (!d) return g->status;
    d->dtype = DLRT_F32;
    d->producer->slice = n->slice;
    return accumulate(g, a, d);
  }
  case DLRT__OP_AXIS_SUM: {
    dlrt_tensor_t *d = bnode(g, DLRT__OP_AXIS_EXPAND, 1, &dy, a->ndim, a->shape, a);
    if (d) d->producer->axis = n->axis;
    return accumulate(g, a, d);
  }
  case DLRT__OP_EMBED: {
    if (!b->needs_grad) return DLRT_OK;
    dlrt_tensor_t *so_far = b->grad;
    if (so_far && so_far->dtype == DLRT_F32 && dy->dtype == DLRT_F32 && so_far->owner == so_far) {
      /* A tied table (a language model's head read it too): the scatter
       * adds into the gradient so far, in place, instead of a second
       * vocabulary x width tensor summed with it. */
      dlrt_tensor_t *in[3] = {so_far, dy, a};
      dlrt_tensor_t *d = bnode(g, DLRT__OP_EMBED_GRAD_ACC, 3, in, b->ndim, b->shape, b);
      if (!d) return g->status;
      d->producer->embed = n->embed;
      d->cnhw = b->cnhw;
      b->grad = d;
      return DLRT_OK;
    }
    dlrt_tensor_t *in[2] = {dy, a};
    dlrt_tensor_t *d = bnode(g, DLRT__OP_EMBED_GRAD, 2, in, b->ndim, b->shape, b);
    if (d) d->producer->embed = n->embed;
    return accumulate(g, b, d);
  }
  case DLRT__OP_BCAST: {
    int64_t count = n->bcast.count, m = n->bcast.m, op = n->bcast.op;
    if (a->needs_grad) {
      if (op == DLRT__BCAST_ADD || op == DLRT__BCAST_SUB) {
        rc = accumulate(g, a, dy);
      } else {
        dlrt_tensor_t *in[2] = {dy, b};
        dlrt_tensor_t *d = bnode(g, DLRT__OP_BCAST, 2, in, a->ndim, a->shape, a);
        if (d) d->producer->bcast = n->bcast;
        rc = accumulate(g, a, d);
      }
    }
    if (rc == DLRT_OK && b->needs_grad) {
      /* The per-element contribution, summed over the broadcast rows. */
      dlrt_tensor_t *per = dy;
      if (op == DLRT__BCAST_MUL || op == DLRT__BCAST_DIV) {
        dlrt_tensor_t *in[3] = {dy, a, b};
        per = bnode(g, DLRT__OP_BCAST_GRAD_B, 3, in, a->ndim, a->shape, b);
        if (per) per->producer->bcast = n->bcast;
      }
      dlrt_tensor_t *db = per ? bnode(g, DLRT__OP_SUM_COLS, 1, &per, b->ndim, b->shape, b) : NULL;
      if (db) db->producer->rows.rows = count / m, db->producer->rows.cols = m;
      if (db && op == DLRT__BCAST_SUB) {
        dlrt_tensor_t *neg = bnode(g, DLRT__OP_SCALE, 1, &db, b->ndim, b->shape, b);
        if (neg) neg->producer->scale.alpha = -1.0f;
        db = neg;
      }
      rc = accumulate(g, b, db);
    }
    return rc;
  }
  case DLRT__OP_CAST:
    /* The gradient goes back to the input's type. A 16-bit weight's
     * gradient made by one matmul or convolution (the mixed-precision cast
     * of an fp32 parameter) is made fp32 by that GEMM itself: its sums are
     * never rounded to 16 bits (a convolution's pieces sum in fp32), and no
     * 16-bit copy lives beside the fp32 one. */
    if (a->dtype == DLRT_F32 && dy->dtype != DLRT_F32 && dy->owner == dy && !dy->kept &&
        dy->producer &&
        (dy->producer->op == DLRT__OP_BMM || dy->producer->op == DLRT__OP_CONV_GRAD_W))
      dy->dtype = DLRT_F32;
    return accumulate(g, a, dy);
  case DLRT__OP_TP_COPY: {
    /* Megatron's f: each peer's gradient of x is partial (its columns of
     * the linear after it); their sum is the gradient. */
    char name[64];
    snprintf(name, sizeof name, "d%.40s.allreduce%d", a->name, g->n_tensors);
    return accumulate(g, a, dlrt__allreduce_node(g, dy, DLRT__PHASE_BACKWARD, name));
  }
  case DLRT__OP_ALLREDUCE:
    return accumulate(g, a, dy); /* g: every peer's output is the sum, so is its gradient */
  case DLRT__OP_XENT:
  case DLRT__OP_LINEAR_XENT:
  case DLRT__OP_LINEAR_XENT_SHARD:
    return dlrt__graph_fail(g, DLRT_ERR_UNSUPPORTED, "%s can only be the loss passed to "
                            "dlrt_graph_backward", dlrt__op_name(n->op)), g->status;
  default:
    return dlrt__graph_fail(g, DLRT_ERR_UNSUPPORTED, "no gradient for %s",
                            dlrt__op_name(n->op)), g->status;
  }
}

int dlrt_graph_backward(dlrt_graph_t *g, dlrt_tensor_t *loss) {
  DLRT__CHECK_ARG(g, "graph is NULL");
  if (g->status) return dlrt_graph_status(g);
  DLRT__CHECK_ARG(loss, "dlrt_graph_backward: loss is NULL");
  if (g->backward_done)
    return dlrt__graph_fail(g, DLRT_ERR_STATE, "dlrt_graph_backward: already called"), g->status;
  if (loss->numel != 1 || loss->dtype != DLRT_F32)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dlrt_graph_backward: the loss %s must "
                            "be one f32 element", loss->name), g->status;
  if (!loss->needs_grad)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dlrt_graph_backward: the loss %s does "
                            "not depend on any parameter", loss->name), g->status;
  int rc = dlrt__graph_apply_precision(g);
  if (rc < 0) return rc;
  g->backward_done = 1;
  g->loss = dlrt_keep(g, loss);
  int forward_nodes = g->n_nodes;
  /* Seed: d loss / d loss = 1. The fused cross-entropies already computed
   * the gradient of their mean loss: with respect to the logits, or to the
   * linear head's input and weight. */
  dlrt__node *root = loss->producer;
  int fused = root->op == DLRT__OP_XENT || root->op == DLRT__OP_LINEAR_XENT ||
              root->op == DLRT__OP_LINEAR_XENT_SHARD;
  if (root->op == DLRT__OP_XENT) {
    rc = accumulate(g, root->in[0], root->out[2]);
    if (rc) return rc;
  } else if (root->op == DLRT__OP_LINEAR_XENT || root->op == DLRT__OP_LINEAR_XENT_SHARD) {
    if ((rc = accumulate(g, root->in[0], root->out[1]))) return rc; /* both skip what */
    if ((rc = accumulate(g, root->in[1], root->out[2]))) return rc; /* needs no gradient */
  } else {
    dlrt_tensor_t *one = dlrt__node1(g, DLRT__OP_FILL, DLRT__PHASE_BACKWARD, 0, NULL, 1, loss->shape, "dloss");
    if (!one) return g->status;
    one->producer->fill.value = 1.0f;
    one->producer->fill.loss_seed = 1; /* times the loss scale */
    loss->grad = one;
  }
  for (int i = forward_nodes - 1; i >= 0; i--) {
    dlrt__node *n = g->nodes[i];
    if (n == root && fused) continue;
    if (n->n_out == 0 || !n->out[0]->grad || !n->out[0]->needs_grad) continue;
    rc = backward_node(g, n);
    if (rc) return rc;
  }
  /* Parameter gradients are dense from the start of their storage: the
   * updates, accumulation and gradient I/O read them so. */
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == DLRT__TENSOR_PARAM && p->grad &&
        !(p->grad = dlrt__make_dense(g, p->grad, DLRT__PHASE_BACKWARD)))
      return g->status;
  }
  return g->status;
}

dlrt_tensor_t *dlrt_grad(dlrt_graph_t *g, dlrt_tensor_t *t) {
  (void)g;
  return t ? t->grad : NULL;
}

/* ---------------------------------------------------------------- optimizer */

dlrt_optimizer dlrt_optimizer_defaults(dlrt_optimizer_kind kind) {
  dlrt_optimizer o = {.kind = kind, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  o.lr = kind == DLRT_OPT_SGD ? 0.01f : 1e-3f;
  o.weight_decay = kind == DLRT_OPT_ADAMW ? 0.01f : 0.0f;
  return o;
}

const char *dlrt_optimizer_name(dlrt_optimizer_kind kind) {
  return kind == DLRT_OPT_SGD ? "sgd" : kind == DLRT_OPT_ADAM ? "adam"
                                      : kind == DLRT_OPT_ADAMW ? "adamw" : "unknown";
}

static dlrt_tensor_t *state_like(dlrt_graph_t *g, const dlrt_tensor_t *p, const char *what) {
  char name[64];
  snprintf(name, sizeof name, "%.40s.%s", p->name, what);
  dlrt_tensor_t *s = dlrt__tensor_new(g, name, DLRT_F32, p->ndim, p->shape, DLRT__TENSOR_STATE);
  if (s) {
    s->init = DLRT_INIT_ZEROS;
    s->kept = 1;
  }
  return s;
}

int dlrt_graph_optimize(dlrt_graph_t *g, const dlrt_optimizer *opt) {
  DLRT__CHECK_ARG(g && opt, "graph or optimizer is NULL");
  if (g->status) return dlrt_graph_status(g);
  if (!g->backward_done || g->optimized)
    return dlrt__graph_fail(g, DLRT_ERR_STATE, "dlrt_graph_optimize: call it once, after "
                            "dlrt_graph_backward"), g->status;
  /* Written so that NaN fails: an inf or NaN setting would make every update NaN. */
  if (opt->kind < DLRT_OPT_SGD || opt->kind > DLRT_OPT_ADAMW || !(opt->lr > 0) ||
      !isfinite(opt->lr) || !(opt->momentum >= 0) || !isfinite(opt->momentum) ||
      !(opt->weight_decay >= 0) || !isfinite(opt->weight_decay) ||
      !(opt->beta1 >= 0 && opt->beta1 < 1) ||
      !(opt->beta2 >= 0 && opt->beta2 < 1) || !(opt->eps > 0 || opt->kind == DLRT_OPT_SGD))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dlrt_graph_optimize: invalid %s settings "
                            "(lr %g, momentum %g, weight decay %g, betas %g %g, eps %g)",
                            dlrt_optimizer_name(opt->kind), opt->lr, opt->momentum,
                            opt->weight_decay, opt->beta1, opt->beta2, opt->eps), g->status;
  g->opt = *opt;
  int n_tensors = g->n_tensors;
  for (int i = 0; i < n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    dlrt__node *n = dlrt__node_new(g, opt->kind == DLRT_OPT_SGD ? DLRT__OP_SGD : DLRT__OP_ADAM, DLRT__PHASE_UPDATE);
    if (!n) return g->status;
    if (opt->kind == DLRT_OPT_SGD) {
      dlrt_tensor_t *v = state_like(g, p, "momentum");
      dlrt_tensor_t *in[3] = {p, v, p->grad};
      if (!v) return g->status;
      dlrt__node_inputs(n, 3, in);
    } else {
      dlrt_tensor_t *m = state_like(g, p, "exp_avg"), *v = state_like(g, p, "exp_avg_sq");
      dlrt_tensor_t *in[4] = {p, m, v, p->grad};
      if (!m || !v) return g->status;
      dlrt__node_inputs(n, 4, in);
    }
  }
  g->optimized = 1;
  return g->status;
}
