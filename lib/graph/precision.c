/* precision.c — mixed precision as a rewrite of the forward pass, before
 * autodiff sees it (torch.autocast's rule, decided once for a static graph).
 *
 * Every forward op falls in one of four classes:
 * - LOW: matmuls and convolutions take their floating
 *   operands in the compute type; parameters and inputs are cast to it
 *   (once per step each, by cast nodes placed before their first use).
 * - FOLLOW: ops with kernels in every storage type (typed.h, attention.h,
 *   the elementwise ops, the activations, dropout, broadcasting and the
 *   fused cross-entropy) run in the type of their inputs: the widest one
 *   when they differ (a bias or broadcast operand takes its input's type and
 *   is cast). Statistics stay fp32: attention's logsumexp, the losses (the
 *   cross-entropy's gradient takes the logits' type, its arithmetic is fp32).
 * - NORM: layer norm reads its input in its own type (the fp32 residual
 *   stream, or 16 bits) and writes the compute type when everything that
 *   reads its output is a LOW op (which would cast it there: so no fp32
 *   copy is made, nor kept for the backward pass), else its input's type;
 *   scale, shift, mean and rstd stay fp32, and so is the arithmetic.
 * - F32: everything else (softmax, batch norm, reductions, losses other
 *   than the fused one) computes and stores fp32; 16-bit inputs are cast
 *   up first.
 * Autodiff then differentiates the rewritten graph: each gradient has its
 * tensor's type, and a cast's gradient is the cast back, so parameter
 * gradients arrive in fp32 for the fp32 master weights and their optimizer.
 * Tensors the caller kept (logits, the loss) stay fp32 handles: a node whose
 * kept output would be 16-bit writes a new 16-bit tensor, and the kept one
 * becomes its fp32 cast. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

typedef enum { RUN_F32, RUN_LOW, RUN_FOLLOW, RUN_NORM } op_precision;

static op_precision precision_of(const dlrt__node *n) {
  switch (n->op) {
  case DLRT__OP_BMM:
  case DLRT__OP_CONV:
    return RUN_LOW;
  case DLRT__OP_NORM:
    return n->norm.batch_norm ? RUN_F32 : RUN_NORM;
  case DLRT__OP_VIEW:
  case DLRT__OP_PERMUTE:
  case DLRT__OP_CONTIGUOUS:
  case DLRT__OP_MAXPOOL:
  case DLRT__OP_RELU:
  case DLRT__OP_BIAS_ROWS:
  case DLRT__OP_BIAS_CHANNELS:
  case DLRT__OP_ADD:
  case DLRT__OP_MUL:
  case DLRT__OP_SCALE:
  case DLRT__OP_ATTENTION: /* its statistics stay fp32 (retype_outputs) */
  case DLRT__OP_ACT:
  case DLRT__OP_DROPOUT:
  case DLRT__OP_BCAST:
  case DLRT__OP_XENT: /* the losses stay fp32 (retype_outputs) */
    return RUN_FOLLOW;
  default:
    return RUN_F32;
  }
}

static int is_float(dlrt_dtype t) { return t == DLRT_F32 || t == DLRT_F16 || t == DLRT_BF16; }

/* The inputs that decide a FOLLOW node's type (the others are cast to it):
 * all, or the first alone where the second is a bias or a broadcast operand
 * (or the loss's labels, not floating). */
static int deciding_inputs(const dlrt__node *n) {
  switch (n->op) {
  case DLRT__OP_BIAS_ROWS:
  case DLRT__OP_BIAS_CHANNELS:
  case DLRT__OP_BCAST:
  case DLRT__OP_XENT:
    return 1;
  default:
    return n->n_in;
  }
}

/* Whether output j of node n takes the type n runs in: statistics do not
 * (attention's logsumexp, norm's mean and rstd, the cross-entropy's losses;
 * its gradient of the logits does). */
static int typed_output(const dlrt__node *n, int j) {
  switch (n->op) {
  case DLRT__OP_ATTENTION:
  case DLRT__OP_NORM:
    return j == 0;
  case DLRT__OP_XENT:
    return j == 2;
  default:
    return 1;
  }
}

/* Whether every forward node after position `from` of g that reads t's
 * storage (through views, the way a reshape hands it on) is a LOW op. */
static int read_by_low_only(const dlrt_graph_t *g, const dlrt_tensor_t *t, int from) {
  int readers = 0;
  for (int i = from + 1; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    if (n->phase != DLRT__PHASE_FORWARD) continue;
    for (int j = 0; j < n->n_in; j++) {
      if (n->in[j]->owner != t->owner) continue;
      readers++;
      if (n->op == DLRT__OP_VIEW) break; /* its readers are counted as t's */
      if (precision_of(n) != RUN_LOW || n->in[j]->kept) return 0;
    }
  }
  return readers > 0 && !t->kept;
}

int dlrt_graph_set_precision(dlrt_graph_t *g, dlrt_dtype compute) {
  DLRT__CHECK_ARG(g, "dlrt_graph_set_precision: graph is NULL");
  if (compute != DLRT_F32 && compute != DLRT_F16 && compute != DLRT_BF16)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dlrt_graph_set_precision: %s is not a "
                            "compute type (give f32, f16 or bf16)", dlrt_dtype_name(compute)),
           g->status;
  if (g->backward_done || g->precision_done)
    return dlrt__graph_fail(g, DLRT_ERR_STATE, "dlrt_graph_set_precision: call it before "
                            "dlrt_graph_backward and dlrt_exec_create"), g->status;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    if (t->kind == DLRT__TENSOR_INPUT && (t->dtype == DLRT_F16 || t->dtype == DLRT_BF16) &&
        t->dtype != compute)
      return dlrt__graph_fail(g, DLRT_ERR_STATE, "dlrt_graph_set_precision: input %s is %s, "
                              "so the graph computes in %s; make it f32 to compute in %s",
                              t->name, dlrt_dtype_name(t->dtype), dlrt_dtype_name(t->dtype),
                              dlrt_dtype_name(compute)),
             g->status;
  }
  g->precision = compute;
  return DLRT_OK;
}

dlrt_dtype dlrt_graph_precision(const dlrt_graph_t *g) { return g ? g->precision : DLRT_F32; }

typedef struct {
  dlrt_graph_t *g;
  dlrt__node **nodes; /* the rewritten order */
  int n, cap;
  /* Casts made so far, by original tensor id: its copy in the compute type
   * and in fp32. */
  dlrt_tensor_t **low, **wide;
  char *twin; /* by id: a kept fp32 handle whose value was made in the compute type */
  int n_known;
} rewrite;

static int push(rewrite *r, dlrt__node *n) {
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 64;
    dlrt__node **p = realloc(r->nodes, (size_t)cap * sizeof *p);
    if (!p) return dlrt__graph_fail(r->g, DLRT_ERR_OOM, "out of host memory"), -1;
    r->nodes = p;
    r->cap = cap;
  }
  r->nodes[r->n++] = n;
  return 0;
}

/* A forward cast node x -> a new tensor of `dtype` (not yet in the order). */
static dlrt__node *cast_node(rewrite *r, dlrt_tensor_t *x, dlrt_dtype dtype, dlrt_tensor_t **out) {
  dlrt_graph_t *g = r->g;
  char name[64];
  snprintf(name, sizeof name, "%.50s.%s", x->name, dlrt_dtype_name(dtype));
  dlrt_tensor_t *y = dlrt__tensor_new(g, name, dtype, x->ndim, x->shape, DLRT__TENSOR_INTERMEDIATE);
  dlrt__node *n = calloc(1, sizeof *n);
  if (!y || !n) {
    free(n);
    return dlrt__graph_fail(g, DLRT_ERR_OOM, "out of host memory");
  }
  n->op = DLRT__OP_CAST;
  n->phase = DLRT__PHASE_FORWARD;
  n->n_in = 1, n->in[0] = x;
  n->n_out = 1, n->out[0] = y;
  y->producer = n;
  y->cnhw = x->cnhw;
  y->needs_grad = x->needs_grad;
  *out = y;
  return n;
}

/* x in `dtype`: x itself, or its cast (made once, placed before the node
 * being rewritten). */
static dlrt_tensor_t *as_type(rewrite *r, dlrt_tensor_t *x, dlrt_dtype dtype) {
  if (x->dtype == dtype || !is_float(x->dtype)) return x;
  dlrt_tensor_t **cache = NULL;
  if (x->id < r->n_known) cache = dtype == DLRT_F32 ? &r->wide[x->id] : &r->low[x->id];
  if (cache && *cache) return *cache;
  dlrt_tensor_t *y = NULL;
  dlrt__node *n = cast_node(r, x, dtype, &y);
  if (!n) return NULL;
  if (push(r, n) < 0) {
    free(n);
    return NULL;
  }
  if (cache) *cache = y;
  return y;
}

/* After node n ran in `dtype`: its floating outputs take that type. A kept
 * output stays an fp32 handle, fed by a cast from a new 16-bit output. */
static int retype_outputs(rewrite *r, dlrt__node *n, dlrt_dtype dtype) {
  for (int j = 0; j < n->n_out; j++) {
    dlrt_tensor_t *t = n->out[j];
    if (!is_float(t->dtype) || t->dtype == dtype) continue;
    if (!typed_output(n, j)) continue; /* statistics, fp32 in any type */
    if (!t->kept || t->owner != t) { /* a view keeps its storage's type */
      t->dtype = dtype;
      continue;
    }
    char name[64];
    snprintf(name, sizeof name, "%.50s.%s", t->name, dlrt_dtype_name(dtype));
    dlrt_tensor_t *low = dlrt__tensor_new(r->g, name, dtype, t->ndim, t->shape,
                                          DLRT__TENSOR_INTERMEDIATE);
    if (!low) return -1;
    low->producer = n, low->cnhw = t->cnhw, low->needs_grad = t->needs_grad;
    n->out[j] = low;
    dlrt__node *c = calloc(1, sizeof *c);
    if (!c) return dlrt__graph_fail(r->g, DLRT_ERR_OOM, "out of host memory"), -1;
    c->op = DLRT__OP_CAST, c->phase = DLRT__PHASE_FORWARD;
    c->n_in = 1, c->in[0] = low;
    c->n_out = 1, c->out[0] = t;
    t->producer = c;
    if (push(r, c) < 0) {
      free(c);
      return -1;
    }
    if (t->id < r->n_known) { /* later readers take the 16-bit value */
      r->low[t->id] = low;
      r->twin[t->id] = 1;
    }
  }
  return 0;
}

int dlrt__graph_apply_precision(dlrt_graph_t *g) {
  if (g->precision == DLRT_F32 || g->precision_done) return DLRT_OK;
  g->precision_done = 1;
  const dlrt_dtype low = g->precision;
  rewrite r = {.g = g, .n_known = g->n_tensors};
  r.low = calloc((size_t)g->n_tensors + 1, sizeof *r.low);
  r.wide = calloc((size_t)g->n_tensors + 1, sizeof *r.wide);
  r.twin = calloc((size_t)g->n_tensors + 1, 1);
  int rc = r.low && r.wide && r.twin ? 0 : (dlrt__graph_fail(g, DLRT_ERR_OOM, "out of host memory"), -1);
  for (int i = 0; i < g->n_nodes && rc == 0; i++) {
    dlrt__node *n = g->nodes[i];
    op_precision kind = precision_of(n);
    dlrt_dtype want = DLRT_F32;
    if (kind == RUN_LOW) {
      want = low;
    } else if (kind == RUN_FOLLOW || kind == RUN_NORM) {
      /* The widest deciding input (a norm's x alone: gamma and beta stay fp32). */
      int inputs = kind == RUN_NORM ? 1 : deciding_inputs(n);
      want = low;
      for (int j = 0; j < inputs; j++)
        if (n->in[j]->dtype == DLRT_F32 && !(n->in[j]->id < r.n_known && r.twin[n->in[j]->id]))
          want = DLRT_F32;
    }
    int view = n->op == DLRT__OP_VIEW || n->op == DLRT__OP_SLICE;
    for (int j = 0; j < n->n_in && rc == 0; j++) {
      if (view || (kind == RUN_NORM && j > 0)) break; /* shares its input's storage, and type */
      dlrt_tensor_t *x = as_type(&r, n->in[j], want);
      if (!x) rc = -1;
      else n->in[j] = x;
    }
    if (view) want = n->in[0]->dtype;
    /* A layer norm whose output only matmuls read writes it in their type. */
    if (kind == RUN_NORM && read_by_low_only(g, n->out[0], i)) want = low;
    if (rc == 0) rc = push(&r, n);
    if (rc == 0) rc = retype_outputs(&r, n, want);
  }
  free(r.low);
  free(r.wide);
  free(r.twin);
  if (rc < 0) {
    for (int k = 0; k < r.n; k++)
      if (r.nodes[k]->op == DLRT__OP_CAST) free(r.nodes[k]); /* only the pass makes casts */
    free(r.nodes);
    return g->status ? g->status : DLRT_ERR_OOM;
  }
  free(g->nodes);
  g->nodes = r.nodes;
  g->n_nodes = r.n;
  g->cap_nodes = r.cap;
  return DLRT_OK;
}
