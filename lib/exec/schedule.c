/* schedule.c — the executor's planning: the order of a run's nodes (with
 * the recomputation of checkpointed segments), each storage's lives and
 * where they end, in-place takeovers, the next uses spilling needs, and the
 * peak of live bytes with what is live there. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "util/status.h"

/* ---------------------------------------------------------------- planning */

void dlrt__schedule_free(dlrt__schedule *s) {
  for (int i = 0; s->next && i < s->n; i++) free(s->next[i]);
  free(s->next);
  free(s->first);
  for (int i = 0; s->frees && i < s->n; i++) free(s->frees[i]);
  free(s->frees);
  free(s->inplace);
  free(s->order);
  free(s->blocks);
  free(s->block_of);
  free(s->local);
  memset(s, 0, sizeof *s);
}

/* Bytes a storage takes in the allocator: its block (512-byte granules, or
 * a whole segment of its own, dlrt__alloc_block_bytes). */
static uint64_t granules(const dlrt_tensor_t *t) {
  return dlrt__alloc_block_bytes(dlrt__tensor_bytes(t));
}

uint64_t dlrt__schedule_bytes(const dlrt__schedule *s, const dlrt_tensor_t *t) {
  uint64_t bytes = dlrt__tensor_bytes(t);
  if (!s->local || !s->local[t->id] || s->first[t->id] < 0 || s->block_of[s->first[t->id]] < 0)
    return bytes;
  const dlrt__chunk_block *b = &s->blocks[s->block_of[s->first[t->id]]];
  if (s->local[t->id] == 1) return bytes / (uint64_t)b->batch * (uint64_t)b->chunk;
  /* A workspace: its convolution's own chunk of columns, or the block's
   * fewer images (dlrt__spill_fit). */
  const dlrt__node *n = t->producer;
  int64_t own = t->shape[1] / (n->conv.oh * n->conv.ow);
  return b->chunk < own ? bytes / (uint64_t)own * (uint64_t)b->chunk : bytes;
}

/* The same as the allocator's block holds it: the executor allocates each
 * intermediate exactly (resident.c), its granules and no more. */
static uint64_t planned_granules(const dlrt__schedule *s, const dlrt_tensor_t *t) {
  return dlrt__alloc_rounded(dlrt__schedule_bytes(s, t));
}

/* Inside a chunked block, storages of the whole batch whose life ends
 * there live until its last chunk is done: their frees move to the
 * block's last position. */
static int defer_block_frees(dlrt__schedule *s) {
  for (int b = 0; b < s->n_blocks; b++) {
    int last = s->blocks[b].end - 1, moved = 0, have = 0;
    for (int k = s->blocks[b].begin; k <= last; k++)
      for (int *f = s->frees[k]; *f >= 0; f++) moved += k < last && !s->local[*f];
    if (!moved) continue;
    while (s->frees[last][have] >= 0) have++;
    int *grown = realloc(s->frees[last], (size_t)(have + moved + 1) * sizeof *grown);
    if (!grown) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    s->frees[last] = grown;
    for (int k = s->blocks[b].begin; k < last; k++) {
      int kept = 0;
      for (int *f = s->frees[k]; *f >= 0; f++) {
        if (s->local[*f]) s->frees[k][kept++] = *f;
        else grown[have++] = *f;
      }
      s->frees[k][kept] = -1;
    }
    grown[have] = -1;
  }
  return DLRT_OK;
}

enum { MEM_PARAM, MEM_STATE, MEM_INPUT, MEM_GRAD, MEM_ACT, MEM_KINDS };

/* Marks t's storage a parameter's gradient, and what autodiff summed into
 * it (accumulate: the add nodes of its contributions, a 16-bit
 * contribution's cast, a dense copy of a view): a tied weight's gradient
 * from its second use (GPT-2's token embedding: the LM head's and the
 * embedding's, V x C each) is a gradient while it waits to be summed, not an
 * activation. */
static void mark_gradient(const dlrt_graph_t *g, char *kinds, const dlrt_tensor_t *t) {
  for (int depth = 0; t && depth < g->n_tensors; depth++) {
    t = t->owner;
    if (kinds[t->id] != MEM_ACT) return;
    kinds[t->id] = MEM_GRAD;
    const dlrt__node *n = t->producer;
    if (!n || n->phase != DLRT__PHASE_BACKWARD) return;
    if (n->op == DLRT__OP_ADD) mark_gradient(g, kinds, n->in[1]); /* a contribution */
    if (n->op != DLRT__OP_ADD && n->op != DLRT__OP_CAST && n->op != DLRT__OP_CONTIGUOUS &&
        n->op != DLRT__OP_EMBED_GRAD_ACC)
      return;
    /* The running sum (an embedding's scatter adds into it: the fused LM
     * head's d w, made in the forward pass), or what was cast or copied. */
    t = n->in[0];
  }
}

/* What each storage is, for the breakdown (kinds[id]): a parameter's
 * gradient is found by its owner (gradients may be views of summed storage),
 * with what sums into it (mark_gradient); a parameter's 16-bit copy (mixed
 * precision's cast of it) counts with the parameters, not the activations:
 * it grows with the model, not the batch. */
static void mem_kinds(const dlrt_graph_t *g, char *kinds) {
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    kinds[i] = t->kind == DLRT__TENSOR_PARAM                 ? MEM_PARAM
               : t->kind == DLRT__TENSOR_STATE               ? MEM_STATE
               : t->kind == DLRT__TENSOR_INPUT || t->kept    ? MEM_INPUT
                                                       : MEM_ACT;
  }
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == DLRT__TENSOR_PARAM && p->grad) mark_gradient(g, kinds, p->grad);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    if (n->op == DLRT__OP_CAST && n->phase == DLRT__PHASE_FORWARD &&
        n->in[0]->kind == DLRT__TENSOR_PARAM && n->out[0]->owner == n->out[0])
      kinds[n->out[0]->id] = MEM_PARAM;
  }
}
/* Ops whose kernels read element i of their first input only to write
 * element i of their output, so the output may take over the input's storage. */
static int elementwise_op(dlrt__op_kind op) {
  switch (op) {
  case DLRT__OP_RELU: case DLRT__OP_SCALE: case DLRT__OP_ADD: case DLRT__OP_MUL:
  case DLRT__OP_SUB: case DLRT__OP_DIV: case DLRT__OP_BIAS_ROWS: case DLRT__OP_BIAS_CHANNELS:
  case DLRT__OP_ACT: case DLRT__OP_DROPOUT: case DLRT__OP_BCAST:
  case DLRT__OP_RELU_GRAD: /* dx[i] from dy[i] (its first input) and x[i] */
  case DLRT__OP_EMBED_GRAD_ACC: /* row v from the gradient so far's row v, read first */
    return 1;
  default:
    return 0;
  }
}

/* In place may be legal: the first input is an intermediate storage of the
 * output's size, not a view (the plan checks that its life ends here). */
static int takes_over(const dlrt__node *n) {
  if (!(elementwise_op(n->op) && n->n_out == 1) && n->op != DLRT__OP_XENT) return 0;
  if (n->n_in < 1) return 0;
  const dlrt_tensor_t *out = n->out[dlrt__inplace_output(n)], *in = n->in[0];
  /* Another input viewing in0's storage elsewhere would be overwritten
   * while it is read (the same tensor read at the same index is not). */
  for (int j = 1; j < n->n_in; j++)
    if (n->in[j] != in && n->in[j]->owner == in) return 0;
  return out->owner == out && !dlrt__persistent(out) && in->owner == in &&
         !dlrt__persistent(in) && in->dtype == out->dtype && in->numel == out->numel;
}

/* Ops that carry a convolution block on to its pooling: a segment is not
 * cut by length just before one. */
static int continues_block(dlrt__op_kind op) {
  return op == DLRT__OP_BIAS_CHANNELS || op == DLRT__OP_RELU || op == DLRT__OP_MAXPOOL;
}

/* Whether node n makes a tensor marked by dlrt_checkpoint_mark. */
static int ends_at_mark(const dlrt__node *n) {
  for (int j = 0; j < n->n_out; j++)
    if (n->out[j]->segment_end) return 1;
  return 0;
}

int dlrt__checkpoint_segments(const dlrt_graph_t *g, const int *fwd, int n_fwd, int every,
                              int *seg) {
  int segment = 0, len = 0, at_marks = every == DLRT__SEGMENTS_AT_MARKS;
  for (int f = 0; f < n_fwd; f++) {
    seg[f] = segment;
    const dlrt__node *n = g->nodes[fwd[f]];
    int pool = n->op == DLRT__OP_MAXPOOL;
    len++;
    int cut = at_marks ? ends_at_mark(n)
                       : len >= every &&
                             (f + 1 == n_fwd || !continues_block(g->nodes[fwd[f + 1]]->op));
    if (pool || cut) segment++, len = 0;
  }
  return len ? segment + 1 : segment;
}

/* Whether storage `t` (an owner) can be dropped after the forward pass and
 * recomputed for the backward pass when the forward nodes are cut into
 * segments (seg[f]: forward node f's): an intermediate made in a segment
 * and read only there in the forward pass, not by the segment's last node
 * (its output is the checkpoint the next segment starts from), and made by
 * a node whose outputs are all droppable (re-running a node rewrites all of
 * them). */
static void find_droppable(dlrt_graph_t *g, const int *fwd, int n_fwd, const int *seg,
                           int *seg_of_tensor, char *droppable) {
  for (int i = 0; i < g->n_tensors; i++) seg_of_tensor[i] = -1, droppable[i] = 0;
  for (int f = 0; f < n_fwd; f++) {
    dlrt__node *n = g->nodes[fwd[f]];
    int last_of_segment = f == n_fwd - 1 || seg[f + 1] != seg[f];
    for (int j = 0; j < n->n_out; j++) {
      dlrt_tensor_t *t = n->out[j];
      if (t->owner != t || dlrt__persistent(t)) continue;
      seg_of_tensor[t->id] = seg[f];
      droppable[t->id] = !last_of_segment;
    }
  }
  /* Read by a forward node of another segment: kept. */
  for (int f = 0; f < n_fwd; f++) {
    dlrt__node *n = g->nodes[fwd[f]];
    for (int j = 0; j < n->n_in; j++) {
      int id = n->in[j]->owner->id;
      if (seg_of_tensor[id] >= 0 && seg_of_tensor[id] != seg[f]) droppable[id] = 0;
    }
  }
  /* A node with an output that must stay is not re-run: keep all of them. */
  for (int f = 0; f < n_fwd; f++) {
    dlrt__node *n = g->nodes[fwd[f]];
    int all = 1;
    for (int j = 0; j < n->n_out; j++) {
      dlrt_tensor_t *t = n->out[j];
      if (t->owner == t && !droppable[t->id]) all = 0;
    }
    if (!all)
      for (int j = 0; j < n->n_out; j++) droppable[n->out[j]->owner->id] = 0;
  }
}

/* The order of the nodes whose phase is <= max_phase: the graph's order,
 * except that with checkpointing (every > 0, training) the forward nodes of
 * a segment that made dropped storage run again just before the first
 * backward node that reads any of it (Chen et al. 2016). A node may so
 * appear twice. */
static int build_order(dlrt_graph_t *g, dlrt__node_phase max_phase, int every, dlrt__schedule *s) {
  int cap = 2 * (g->n_nodes ? g->n_nodes : 1);
  s->order = malloc((size_t)cap * sizeof *s->order);
  int *fwd = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *fwd);
  int *seg = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *seg);
  int *seg_of = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *seg_of);
  char *droppable = malloc((size_t)(g->n_tensors ? g->n_tensors : 1));
  int n_fwd = 0, rc = DLRT_OK;
  if (!s->order || !fwd || !seg || !seg_of || !droppable) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    goto done;
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->phase == DLRT__PHASE_FORWARD) fwd[n_fwd++] = i;
  int segments = every > 0 ? dlrt__checkpoint_segments(g, fwd, n_fwd, every, seg) : 1;
  if (max_phase == DLRT__PHASE_FORWARD || segments <= 1) {
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i]->phase <= max_phase) s->order[s->n++] = i;
    goto done;
  }
  find_droppable(g, fwd, n_fwd, seg, seg_of, droppable);
  char *recomputed = calloc((size_t)segments, 1);
  if (!recomputed) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    goto done;
  }
  for (int f = 0; f < n_fwd; f++) s->order[s->n++] = fwd[f];
  for (int i = 0; i < g->n_nodes; i++) {
    dlrt__node *n = g->nodes[i];
    if (n->phase == DLRT__PHASE_FORWARD || n->phase > max_phase) continue;
    for (int j = 0; j < n->n_in; j++) {
      int id = n->in[j]->owner->id, sg = seg_of[id];
      if (!droppable[id] || recomputed[sg]) continue;
      recomputed[sg] = 1;
      for (int f = 0; f < n_fwd; f++) {
        if (seg[f] != sg) continue;
        dlrt__node *m = g->nodes[fwd[f]];
        int makes_dropped = 0;
        for (int o = 0; o < m->n_out; o++) makes_dropped |= droppable[m->out[o]->owner->id];
        if (makes_dropped && s->n < cap) s->order[s->n++] = fwd[f];
      }
    }
    if (s->n < cap) s->order[s->n++] = i;
  }
  free(recomputed);
done:
  free(fwd);
  free(seg);
  free(seg_of);
  free(droppable);
  return rc;
}

/* The training order when the planner drops storages (drop[id] 1, choose.c)
 * instead of segments: the forward nodes, then the backward and update
 * nodes, each backward node preceded by the recomputation of the dropped
 * storages it reads: their producers, after those of the dropped storages
 * they read in turn (the nearest storages that were not dropped), each
 * forward node at most once more. */
static int emit_recompute(dlrt_graph_t *g, const char *drop, const int *producer, char *redone,
                          int m, dlrt__schedule *s, int cap, int depth) {
  dlrt__node *n = g->nodes[m];
  if (depth > g->n_nodes) return dlrt__set_error(DLRT_ERR_STATE, "recomputation loops");
  for (int j = 0; j < n->n_in; j++) {
    int id = n->in[j]->owner->id;
    if (!drop[id] || redone[id] || producer[id] < 0) continue;
    int rc = emit_recompute(g, drop, producer, redone, producer[id], s, cap, depth + 1);
    if (rc < 0) return rc;
  }
  int again = 0;
  for (int o = 0; o < n->n_out; o++) again |= !redone[n->out[o]->owner->id];
  if (!again) return DLRT_OK;
  for (int o = 0; o < n->n_out; o++) redone[n->out[o]->owner->id] = 1;
  if (s->n >= cap) return dlrt__set_error(DLRT_ERR_STATE, "recomputation overflows the order");
  s->order[s->n++] = m;
  return DLRT_OK;
}

static int build_order_dropping(dlrt_graph_t *g, const char *drop, dlrt__schedule *s) {
  int cap = 2 * (g->n_nodes ? g->n_nodes : 1), rc = DLRT_OK;
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  s->order = malloc((size_t)cap * sizeof *s->order);
  int *producer = malloc(nt * sizeof *producer);
  char *redone = calloc(nt, 1);
  if (!s->order || !producer || !redone) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    goto done;
  }
  for (size_t i = 0; i < nt; i++) producer[i] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    dlrt__node *n = g->nodes[i];
    if (n->phase != DLRT__PHASE_FORWARD) continue;
    s->order[s->n++] = i;
    for (int o = 0; o < n->n_out; o++)
      if (n->out[o]->owner == n->out[o]) producer[n->out[o]->id] = i;
  }
  for (int i = 0; i < g->n_nodes && rc == DLRT_OK; i++) {
    dlrt__node *n = g->nodes[i];
    if (n->phase == DLRT__PHASE_FORWARD) continue;
    for (int j = 0; j < n->n_in && rc == DLRT_OK; j++) {
      int id = n->in[j]->owner->id;
      if (drop[id] && !redone[id] && producer[id] >= 0)
        rc = emit_recompute(g, drop, producer, redone, producer[id], s, cap, 0);
    }
    if (rc == DLRT_OK && s->n < cap) s->order[s->n++] = i;
  }
done:
  free(producer);
  free(redone);
  return rc;
}

/* Builds the schedule of the nodes whose phase is <= max_phase (with
 * recomputation when every > 0, or of the storages in `drop`), and returns
 * its peak of live bytes
 * (512-byte blocks, as the allocator rounds) and what was live at the peak.
 * Each storage lives from each time it is made to its last use before it is
 * made again (or the end), and is freed there; an elementwise node's output
 * takes over its first input's storage where that storage's life ends at
 * the node. */
static int plan_order(dlrt_graph_t *g, dlrt__node_phase max_phase, int every, const char *drop,
                      dlrt__schedule *s, uint64_t *peak, dlrt__memory_breakdown *at_peak);

int dlrt__plan(dlrt_graph_t *g, dlrt__node_phase max_phase, int every, dlrt__schedule *s,
               uint64_t *peak, dlrt__memory_breakdown *at_peak) {
  return plan_order(g, max_phase, every, NULL, s, peak, at_peak);
}

int dlrt__plan_dropping(dlrt_graph_t *g, const char *drop, dlrt__schedule *s, uint64_t *peak) {
  return plan_order(g, DLRT__PHASE_UPDATE, 0, drop, s, peak, NULL);
}

static int plan_order(dlrt_graph_t *g, dlrt__node_phase max_phase, int every, const char *drop,
                      dlrt__schedule *s, uint64_t *peak, dlrt__memory_breakdown *at_peak) {
  memset(s, 0, sizeof *s);
  int rc = drop ? build_order_dropping(g, drop, s) : build_order(g, max_phase, every, s);
  if (rc == DLRT_OK && every > 0) rc = dlrt__find_chunk_blocks(g, s, every);
  if (rc < 0) return rc;
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1), nk = (size_t)(s->n ? s->n : 1);
  int *born = malloc(nt * sizeof *born), *last = malloc(nt * sizeof *last);
  int n_ends = 0, cap_ends = (int)(2 * nk); /* lives that end, in (position, tensor) pairs */
  int *end_at = malloc((size_t)cap_ends * 2 * sizeof *end_at);
  int *count = calloc(nk, sizeof *count);
  s->frees = calloc(nk, sizeof *s->frees);
  s->inplace = malloc(nk * sizeof *s->inplace);
  if (!born || !last || !end_at || !count || !s->frees || !s->inplace) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    goto done;
  }
#define END_LIFE(pos, id)                                                                   \
  do {                                                                                      \
    if (n_ends == cap_ends) {                                                               \
      int *grown = realloc(end_at, (size_t)cap_ends * 4 * sizeof *end_at);                  \
      if (!grown) {                                                                         \
        rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");        \
        goto done;                                                                          \
      }                                                                                     \
      end_at = grown, cap_ends *= 2;                                                        \
    }                                                                                       \
    end_at[2 * n_ends] = (pos), end_at[2 * n_ends + 1] = (id), n_ends++;                    \
  } while (0)
  for (size_t i = 0; i < nt; i++) born[i] = -1, last[i] = -1;
  for (int k = 0; k < s->n; k++) {
    dlrt__node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_out; j++) {
      dlrt_tensor_t *t = n->out[j];
      if (t->owner != t || dlrt__persistent(t)) continue;
      if (born[t->id] >= 0) END_LIFE(last[t->id], t->id); /* made again: the old life ends */
      born[t->id] = k, last[t->id] = k;
    }
    for (int j = 0; j < n->n_in; j++) last[n->in[j]->owner->id] = k;
  }
  for (int i = 0; i < g->n_tensors; i++)
    if (born[i] >= 0) END_LIFE(last[i], i);
#undef END_LIFE
  /* In place: the first input's life ends here (it is then not freed: it
   * lives on as the output). */
  for (int k = 0; k < s->n; k++) {
    dlrt__node *n = g->nodes[s->order[k]];
    s->inplace[k] = -1;
    if (!takes_over(n)) continue;
    for (int e = 0; e < n_ends; e++)
      if (end_at[2 * e] == k && end_at[2 * e + 1] == n->in[0]->id) {
        s->inplace[k] = n->in[0]->id;
        end_at[2 * e] = -1;
        break;
      }
  }
  for (int e = 0; e < n_ends; e++)
    if (end_at[2 * e] >= 0) count[end_at[2 * e]]++;
  for (int k = 0; k < s->n; k++) {
    s->frees[k] = malloc((size_t)(count[k] + 1) * sizeof **s->frees);
    if (!s->frees[k]) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
      goto done;
    }
    s->frees[k][0] = -1;
    count[k] = 0;
  }
  for (int e = 0; e < n_ends; e++) {
    int k = end_at[2 * e];
    if (k < 0) continue;
    s->frees[k][count[k]++] = end_at[2 * e + 1];
    s->frees[k][count[k]] = -1;
  }
  /* Next uses, walking back from the end. */
  s->next = calloc(nk, sizeof *s->next);
  s->first = malloc(nt * sizeof *s->first);
  if (!s->next || !s->first) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    goto done;
  }
  for (size_t i = 0; i < nt; i++) s->first[i] = -1;
  /* The forward pass ends before the first node of another phase: the
   * forward nodes after it are recomputations (checkpointing). */
  s->last_forward = s->n - 1;
  for (int k = 0; k < s->n; k++)
    if (g->nodes[s->order[k]]->phase != DLRT__PHASE_FORWARD) {
      s->last_forward = k - 1;
      break;
    }
  for (int k = s->n - 1; k >= 0; k--) {
    dlrt__node *n = g->nodes[s->order[k]];
    int touches = n->n_in + n->n_out;
    s->next[k] = malloc((size_t)(touches ? touches : 1) * sizeof **s->next);
    if (!s->next[k]) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
      goto done;
    }
    for (int j = 0; j < touches; j++) {
      const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
      s->next[k][j] = s->first[t->owner->id];
    }
    for (int j = 0; j < touches; j++) {
      const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
      s->first[t->owner->id] = k;
    }
  }
  /* next[k][j] holds the first use after k only if it is not k itself
   * (a storage read twice by one node): fix up such entries. */
  for (int k = 0; k < s->n; k++) {
    dlrt__node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out; j++)
      if (s->next[k][j] == k) s->next[k][j] = -1;
  }
  if (s->blocks && (rc = defer_block_frees(s)) < 0) goto done;
  /* The walk: persistent storage, plus what each node allocates, minus what
   * it frees; by kind of storage, kept at the peak. A chunked block is
   * walked twice: as its first chunk, and as the later ones, which start
   * with the whole-batch storages the first made (made once, freed after
   * the last chunk) and allocate only their own. */
  uint64_t live[MEM_KINDS] = {0}, top = 0, act_top = 0;
  dlrt__memory_breakdown snap = {0};
  /* DLRT_PLAN_TRACE=1: each position of the schedule and the bytes live
   * after it, on stderr (where a peak comes from). */
  const char *trace_env = getenv("DLRT_PLAN_TRACE");
  int trace = trace_env && *trace_env && strcmp(trace_env, "0") != 0;
  char *kinds = malloc(nt);
  if (!kinds) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    goto done;
  }
  mem_kinds(g, kinds);
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (t->owner == t && dlrt__persistent(t)) live[(int)kinds[i]] += granules(t);
  }
  int chunk_pass = 0; /* in a block: 1 its first chunk, 2 the later ones */
  for (int k = -1; k < s->n; k++) {
    const dlrt__chunk_block *b = k >= 0 && s->block_of && s->block_of[k] >= 0
                                     ? &s->blocks[s->block_of[k]] : NULL;
    if (b && k == b->begin && !chunk_pass) chunk_pass = 1;
    if (k >= 0) {
      dlrt__node *n = g->nodes[s->order[k]];
      for (int j = 0; j < n->n_out; j++) {
        dlrt_tensor_t *t = n->out[j];
        if (t->owner != t || dlrt__persistent(t)) continue;
        if (chunk_pass == 2 && !s->local[t->id]) continue; /* made by the first chunk */
        uint64_t bytes = planned_granules(s, t);
        if (j == dlrt__inplace_output(n) && s->inplace[k] >= 0) {
          /* Taken over in place: the bytes change kind (a gradient summed
           * over an activation), not amount. */
          live[(int)kinds[s->inplace[k]]] -= bytes;
          live[(int)kinds[t->id]] += bytes;
        } else {
          live[(int)kinds[t->id]] += bytes;
        }
      }
    }
    uint64_t total = 0;
    for (int c = 0; c < MEM_KINDS; c++) total += live[c];
    if (trace && k >= 0) {
      dlrt__node *n = g->nodes[s->order[k]];
      fprintf(stderr, "plan %3d %-14s %-32s live %8.2f MiB%s\n", k, dlrt__op_name(n->op),
              n->n_out ? n->out[0]->name : "(update)", (double)total / 1048576.0,
              chunk_pass == 1 ? " (first chunk)" : chunk_pass == 2 ? " (later chunks)" : "");
    }
    if (live[MEM_ACT] > act_top) act_top = live[MEM_ACT];
    if (total > top || k < 0) {
      top = total;
      snap.params = live[MEM_PARAM], snap.state = live[MEM_STATE];
      snap.inputs = live[MEM_INPUT], snap.grads = live[MEM_GRAD];
      snap.activations = live[MEM_ACT];
    }
    if (k < 0) continue;
    for (int *f = s->frees[k]; *f >= 0; f++)
      if (chunk_pass != 1 || s->local[*f]) /* whole-batch ones after the last chunk */
        live[(int)kinds[*f]] -= planned_granules(s, g->tensors[*f]);
    if (b && k == b->end - 1) {
      if (chunk_pass == 1) {
        chunk_pass = 2;
        k = b->begin - 1; /* the later chunks */
      } else {
        chunk_pass = 0;
      }
    }
  }
  free(kinds);
  *peak = top;
  snap.activation_peak = act_top;
  if (at_peak) *at_peak = snap;
done:
  free(born);
  free(last);
  free(end_at);
  free(count);
  return rc;
}

int dlrt__graph_plan_memory(dlrt_graph_t *g, int checkpoint_every, dlrt_offload_policy policy,
                            uint64_t beside_forward,
                            dlrt__memory_breakdown *out) {
  dlrt__schedule train = {0}, forward = {0};
  uint64_t train_peak = 0, forward_peak = 0;
  dlrt__memory_breakdown fw;
  int rc = dlrt__graph_layout(g);
  if (rc == DLRT_OK) rc = dlrt__plan(g, DLRT__PHASE_UPDATE, checkpoint_every, &train, &train_peak, out);
  if (rc == DLRT_OK)
    rc = dlrt__plan(g, DLRT__PHASE_FORWARD, checkpoint_every, &forward, &forward_peak, &fw);
  int evaluation = forward_peak + beside_forward > train_peak;
  uint64_t act_peak = out->activation_peak > fw.activation_peak ? out->activation_peak
                                                                 : fw.activation_peak;
  if (rc == DLRT_OK && evaluation) *out = fw;
  if (rc == DLRT_OK) out->activation_peak = act_peak;
  if (rc == DLRT_OK) out->peak = evaluation ? forward_peak : train_peak;
  if (rc == DLRT_OK) out->forward_at_peak = evaluation;
  dlrt__schedule both[2] = {forward, train};
  if (rc == DLRT_OK) {
    /* The least with every node that can run in slices of its items so
     * (dlrt__add_slice_blocks adds their blocks to `both`). */
    int worst, slices;
    out->least_spill = dlrt__spill_fit(g, both, 2, policy, 0, &slices, &worst);
  }
  dlrt__schedule_free(&both[1]);
  dlrt__schedule_free(&both[0]);
  return rc;
}

/* The number of forward nodes, for the sqrt(n) segment length. */
static int forward_nodes(const dlrt_graph_t *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->phase == DLRT__PHASE_FORWARD;
  return n;
}

int dlrt__checkpoint_marks(const dlrt_graph_t *g) {
  int marks = 0;
  for (int i = 0; i < g->n_nodes; i++)
    marks += g->nodes[i]->phase == DLRT__PHASE_FORWARD && ends_at_mark(g->nodes[i]);
  return marks;
}

int dlrt__checkpoint_segment(const dlrt_graph_t *g, int every) {
  if (every == DLRT_CHECKPOINT_MARKS) return DLRT__SEGMENTS_AT_MARKS;
  if (every == DLRT_CHECKPOINT_SQRT) {
    int n = forward_nodes(g), len = (int)ceil(sqrt((double)n));
    return len > 0 ? len : 1;
  }
  return every > 0 ? every : 0;
}

