/* layout.c — strided views meet kernels that read dense memory.
 *
 * Transposed axes and slices are views: the same storage with strides
 * swapped or an offset moved. A matmul reads a 2-D transposed view in place
 * (or a batch of them) by flipping its transpose flag (the storage is the
 * operand's transpose, row-major); every other op that would read a strided view gets a dense
 * copy first (DLRT__OP_CONTIGUOUS), made once per tensor and phase and placed just
 * before its first reader. Dense views at an offset (slices along the
 * leading axis) need nothing: every launch adds the offset. The pass runs before an executor or the planner plans the graph
 * (so the plan counts the copies); it is idempotent: a second run finds
 * nothing left to do. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

/* A 2-D view whose storage is its transpose, dense: strides (1, rows). */
static int transposed_2d(const dlrt_tensor_t *t) {
  return t->ndim == 2 && t->strides[0] == 1 && t->strides[1] == t->shape[0] &&
         t->shape[0] != 1 && t->shape[1] != 1;
}

/* A 3-D view whose storage is a dense batch of its matrices' transposes:
 * strides (rows cols, 1, rows), as dlrt_transpose_axes(x, 1, 2) of a dense
 * x gives. */
static int transposed_batch(const dlrt_tensor_t *t) {
  return t->ndim == 3 && t->strides[1] == 1 && t->strides[2] == t->shape[1] &&
         (t->shape[0] == 1 || t->strides[0] == t->shape[1] * t->shape[2]) &&
         t->shape[1] != 1 && t->shape[2] != 1;
}

/* Whether input j of a matmul reads x in place with its transpose flag
 * flipped: a 2-D transposed view, or a batch of them at the batch stride
 * the node expects. */
static int matmul_reads_transposed(const dlrt__node *nd, int j, const dlrt_tensor_t *x) {
  if (nd->op != DLRT__OP_BMM || j >= 2) return 0;
  if (nd->bmm.batch <= 1 && transposed_2d(x)) return 1;
  int64_t stride = j == 0 ? nd->bmm.stride_a : nd->bmm.stride_b;
  return transposed_batch(x) && stride == x->shape[1] * x->shape[2];
}

/* Whether the gather kernel can copy view t dense. */
static int gatherable(const dlrt_tensor_t *t) {
  int64_t n[DLRT_MAX_DIMS], strides[DLRT_MAX_DIMS];
  size_t es = dlrt_dtype_size(t->dtype);
  return (transposed_2d(t) || dlrt__view_dims(t, n, strides) <= DLRT__GATHER_DIMS) &&
         (es == 4 || es == 2);
}

/* Nodes that read their input's layout themselves: views of it, and the
 * dense copies this pass makes. */
static int reads_layout(const dlrt__node *n) {
  return n->op == DLRT__OP_VIEW || n->op == DLRT__OP_CONTIGUOUS || n->op == DLRT__OP_SLICE;
}

/* Appends nd to the new order out[0..n), growing it. */
static int push(dlrt__node ***out, int *n, int *cap, dlrt__node *nd) {
  if (*n >= *cap) {
    dlrt__node **grown = realloc(*out, (size_t)(*cap *= 2) * sizeof **out);
    if (!grown) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    *out = grown;
  }
  (*out)[(*n)++] = nd;
  return DLRT_OK;
}

int dlrt__graph_layout(dlrt_graph_t *g) {
  if (!g || g->status) return g ? g->status : DLRT_OK;
  /* A graph without a backward pass gets its precision rewrite here (its
   * 16-bit inputs and ops need it before anything is laid out). */
  int rc = dlrt__graph_apply_precision(g);
  if (rc < 0) return rc;
  int n_old = g->n_nodes, n_known = g->n_tensors, n = 0, cap = n_old + 16;
  dlrt__node **out = malloc((size_t)cap * sizeof *out);
  /* The dense copy of a tensor, per phase (a forward copy would otherwise
   * live until the backward pass). */
  dlrt_tensor_t **dense = calloc((size_t)n_known * 3 + 1, sizeof *dense);
  if (!out || !dense) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < n_old && rc == DLRT_OK; i++) {
    dlrt__node *nd = g->nodes[i];
    for (int j = 0; j < nd->n_in && rc == DLRT_OK && !reads_layout(nd); j++) {
      dlrt_tensor_t *x = nd->in[j];
      if (dlrt__contiguous(x)) continue;
      if (matmul_reads_transposed(nd, j, x)) {
        if (!(nd->flipped & (1u << j))) {
          /* Read the storage as the operand's transpose. */
          int64_t *trans = j == 0 ? &nd->bmm.trans_a : &nd->bmm.trans_b;
          *trans = !*trans;
          nd->flipped |= 1u << j;
        }
        continue;
      }
      dlrt_tensor_t **slot = x->id < n_known ? &dense[x->id * 3 + nd->phase] : NULL;
      if ((!slot || !*slot) && !gatherable(x)) {
        rc = dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s reads %s, a view of more than %d "
                             "strided dimensions, which dlrt cannot copy dense; transpose "
                             "fewer axes at once (an op between two transposes makes a dense "
                             "copy)", dlrt__op_name(nd->op), x->name, DLRT__GATHER_DIMS);
        break;
      }
      if (!slot || !*slot) {
        /* A copy node now appended to g->nodes; it moves into place below. */
        int before = g->n_nodes;
        dlrt_tensor_t *c = dlrt__make_contiguous(g, x, nd->phase);
        if (!c) {
          rc = g->status ? g->status : DLRT_ERR_OOM;
          break;
        }
        for (int k = before; k < g->n_nodes && rc == DLRT_OK; k++)
          rc = push(&out, &n, &cap, g->nodes[k]);
        if (rc != DLRT_OK) break; /* the copy stays in g->nodes, which frees it */
        g->n_nodes = before;
        if (slot) *slot = c;
        nd->in[j] = c;
      } else {
        nd->in[j] = *slot;
      }
    }
    if (rc == DLRT_OK) rc = push(&out, &n, &cap, nd);
  }
  free(dense);
  if (rc != DLRT_OK) {
    free(out);
    return dlrt__graph_fail(g, rc, "laying out the graph: %s", dlrt_last_error()), rc;
  }
  free(g->nodes);
  g->nodes = out;
  g->n_nodes = n;
  g->cap_nodes = cap;
  return DLRT_OK;
}
