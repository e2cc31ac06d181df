/* chunk.c — chunked blocks of a checkpointed training schedule.
 *
 * Checkpointing drops what a segment makes inside it, but a convolution
 * stack's largest tensors are often not kept at all: they are the segment's
 * own transients (a convolution's output while its pooling runs, the
 * gradient that flows back into a convolution), one whole batch each. A
 * segment made only of per-image ops (convolution, its bias, ReLU, max
 * pooling) can run a chunk of images at a time instead: each chunk runs the
 * segment's forward nodes, then later each chunk runs the backward nodes
 * that start from its pooling's gradient, and only the segment's boundary
 * tensors (its pooled output and argmax, the gradient it hands back, its
 * parameters' gradients) hold the whole batch. The rest holds one chunk.
 *
 * Results are bit for bit those of the whole batch on the CPU and OpenCL
 * backends: a block's chunk is a whole number of each of its convolutions'
 * own image chunks, so the same GEMMs run in the same order (the weight
 * gradients accumulate with beta 1 after the batch's first chunk, as they
 * do unchunked), and a bias's gradient sums image by image in order either
 * way (run_bias_grad). cuBLAS may choose its kernel by leading dimension,
 * which a chunk's own tensors change: agreement to rounding there.
 *
 * Spilling runs blocks too: a block's whole-batch storages stay resident
 * through its chunks, or move a chunk's images at a time (slices), and the
 * pool holds a chunk's own at one chunk's size (exec_spill.c). Under a
 * tight budget a block may run fewer images per chunk than planned, down to
 * its `unit`: a whole number of its convolutions' pieces, the images each of
 * their GEMMs covers, so those run the same GEMMs and keep their bits
 * (exec_ops.c, run_conv). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "util/status.h"

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* Images per chunk of a convolution node's own loop (its workspace). */
static int64_t conv_chunk(const dlrt__node *n) {
  return n->out[1]->shape[1] / (n->conv.oh * n->conv.ow);
}

/* Images each GEMM of a convolution node covers (run_conv): chunks must be
 * a whole number of them. */
static int64_t conv_piece(const dlrt__node *n) {
  const struct dlrt__conv_params *p = &n->conv;
  const dlrt_tensor_t *w = n->op == DLRT__OP_CONV_GRAD_W ? n->out[0] : n->in[1];
  return dlrt__conv_weight_piece(w->shape[0], p->c * p->kh * p->kw, p->oh * p->ow,
                                 conv_chunk(n));
}

typedef struct {
  const dlrt_graph_t *g;
  const dlrt__schedule *s;
  int begin, end;   /* the positions of the block being checked */
} span;

/* Whether storage `id` is read at a position outside [begin, end). */
static int read_outside(const span *b, int id) {
  for (int k = 0; k < b->s->n; k++) {
    if (k >= b->begin && k < b->end) continue;
    const dlrt__node *n = b->g->nodes[b->s->order[k]];
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j]->owner->id == id) return 1;
  }
  return 0;
}

/* The forward positions [begin, end) of one segment: per-image ops on one
 * batch, starting from storage made outside (or the batch itself). Marks
 * local[] (1: holds a chunk; 2: a convolution's workspace, freed each
 * chunk) and returns the chunk's images (the least common multiple of the
 * convolutions' own chunks), or 0 when the segment cannot be chunked;
 * *unit becomes what its chunks must be a whole number of. */
static int64_t check_forward(const span *b, char *local, int64_t *batch, int64_t *unit) {
  int64_t chunk = 1, n_images = 0;
  int convs = 0;
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = b->g->nodes[b->s->order[k]];
    if (n->op == DLRT__OP_CONV) {
      if (n_images && n->conv.n != n_images) return 0;
      n_images = n->conv.n;
      int64_t c = conv_chunk(n), piece = conv_piece(n);
      chunk = chunk / gcd64(chunk, c) * c;
      *unit = *unit / gcd64(*unit, piece) * piece;
      convs++;
    } else if (n->op != DLRT__OP_BIAS_CHANNELS && n->op != DLRT__OP_RELU && n->op != DLRT__OP_MAXPOOL) {
      return 0;
    }
    if (n->op == DLRT__OP_BIAS_CHANNELS && n->channels.images <= 0)
      return 0; /* not a convolution's bias */
  }
  if (!convs || chunk >= n_images) return 0;
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = b->g->nodes[b->s->order[k]];
    for (int j = 0; j < n->n_out; j++) {
      const dlrt_tensor_t *t = n->out[j];
      if (n->op == DLRT__OP_CONV && j == 1) {
        local[t->id] = 2;
        continue;
      }
      if (!dlrt__batch_image(t, n_images) || (j == 0 && !t->cnhw) || dlrt__persistent(t)) return 0;
      int outside = read_outside(b, t->id);
      /* Only a pooling's outputs and a convolution's output can be
       * written a chunk at a time into the whole batch's storage. */
      if (outside && n->op != DLRT__OP_MAXPOOL && n->op != DLRT__OP_CONV) return 0;
      /* A pooling's argmax is where its y is: the kernel maps both alike. */
      local[t->id] = n->op == DLRT__OP_MAXPOOL && j == 1 ? local[n->out[0]->id] : !outside;
    }
    /* The image side of bias, ReLU and pooling is one of the chunk's own;
     * a convolution reads its chunk of x in place, whoever made it. */
    if (n->op != DLRT__OP_CONV && local[n->in[0]->owner->id] != 1) return 0;
    if (n->op == DLRT__OP_CONV && n->in[0]->dtype != DLRT_F32) return 0;
    /* Run once, not again for the backward pass (nothing recomputed). */
    for (int k2 = b->end; k2 < b->s->n; k2++)
      if (b->s->order[k2] == b->s->order[k]) return 0;
  }
  *batch = n_images;
  return chunk;
}

/* The backward positions that start from the segment's poolings'
 * gradients: max-pool gradients reading an argmax the segment made, and
 * the nodes that read what they make, down to the convolutions' gradients.
 * Returns the block's positions in [*begin, *end) (they must follow each
 * other) or 0; *unit becomes what its chunks must be a whole number of. */
static int find_backward(const span *fw, char *local, int64_t batch, int64_t *chunk,
                         int64_t *unit, int *begin, int *end) {
  const dlrt__schedule *s = fw->s;
  int first = -1, last = -1;
  for (int k = fw->end; k < s->n; k++) {
    const dlrt__node *n = fw->g->nodes[s->order[k]];
    if (n->phase == DLRT__PHASE_FORWARD) continue;
    int in_block = 0;
    if (n->op == DLRT__OP_MAXPOOL_GRAD) {
      const dlrt__node *pool = n->in[1]->owner->producer;
      for (int f = fw->begin; f < fw->end; f++)
        if (fw->g->nodes[s->order[f]] == pool) in_block = 1;
    }
    /* Or it reads the chunk's storage a node of this block made. */
    for (int j = 0; j < n->n_in && !in_block; j++)
      if (local[n->in[j]->owner->id] == 1)
        for (int m = first; m >= 0 && m <= last; m++)
          if (fw->g->nodes[s->order[m]] == n->in[j]->owner->producer) in_block = 1;
    if (!in_block) continue;
    if (first < 0) first = k;
    if (last != k - 1 && last >= 0) return 0; /* not one run of positions */
    last = k;
    switch (n->op) {
    case DLRT__OP_MAXPOOL_GRAD:
      /* Its dy, argmax and mask are the whole batch's (the kernel maps
       * the chunk's planes onto theirs). */
      for (int j = 0; j < n->n_in; j++)
        if (local[n->in[j]->owner->id]) return 0;
      break;
    case DLRT__OP_SUM_CHANNELS:
      if (n->channels.images <= 0) return 0;
      break;
    case DLRT__OP_CONV_GRAD_W:
    case DLRT__OP_CONV_GRAD_X: {
      int64_t c = conv_chunk(n), piece = conv_piece(n);
      *chunk = *chunk / gcd64(*chunk, c) * c;
      *unit = *unit / gcd64(*unit, piece) * piece;
      local[n->out[1]->id] = 2;
      break;
    }
    default: return 0;
    }
    /* What it makes is the chunk's when it is an image tensor read only
     * inside the block; a gradient of the segment's input (conv_grad_x)
     * or of a parameter holds the whole batch, or all of it. */
    const dlrt_tensor_t *t = n->out[0];
    if (t->owner != t || dlrt__persistent(t)) return 0;
    if (n->op == DLRT__OP_MAXPOOL_GRAD) {
      if (!dlrt__batch_image(t, batch)) return 0;
      local[t->id] = 1;
    }
  }
  if (first < 0 || *chunk >= batch) return 0;
  *begin = first, *end = last + 1;
  span bw = {fw->g, s, first, last + 1};
  for (int k = first; k <= last; k++) {
    const dlrt__node *n = fw->g->nodes[s->order[k]];
    const dlrt_tensor_t *t = n->out[0];
    if (local[t->id] == 1 && read_outside(&bw, t->id)) return 0;
    if (n->op == DLRT__OP_CONV_GRAD_X && !local[t->id] && !dlrt__batch_image(t, batch)) return 0;
    /* The convolutions' gradients read the chunk's dy. */
    if ((n->op == DLRT__OP_CONV_GRAD_W || n->op == DLRT__OP_CONV_GRAD_X ||
         n->op == DLRT__OP_SUM_CHANNELS) &&
        local[n->in[0]->owner->id] != 1)
      return 0;
  }
  return 1;
}

/* A backward block whose convolutions' input gradients (conv_grad_x)
 * would be made while their inputs x still live for the weight gradients:
 * the block runs as two, the weight gradients first (x dies after the last
 * chunk), then the max-pool gradients again and the input gradients. One
 * of x and dx, not both, then holds the whole batch at a time. Returns the
 * position where the second block starts (positions after it shift by the
 * max-pool gradients run again), b1 when there is nothing to split, or -1
 * when out of memory. */
static int split_backward(const dlrt_graph_t *g, dlrt__schedule *s, int b0, int b1) {
  int pools = 0, inputs = 0;
  span before_end = {g, s, 0, b1}; /* read outside it: read after the block */
  for (int k = b0; k < b1; k++) {
    const dlrt__node *n = g->nodes[s->order[k]];
    pools += n->op == DLRT__OP_MAXPOOL_GRAD;
    inputs += n->op == DLRT__OP_CONV_GRAD_X;
    /* x must die in the block for the split to pay. */
    if (n->op == DLRT__OP_CONV_GRAD_W && read_outside(&before_end, n->in[1]->owner->id)) return b1;
  }
  if (!inputs) return b1;
  /* Only when nothing in the block reads an input gradient it makes (a
   * chain through two convolutions): those could not wait for the end. */
  for (int k = b0; k < b1; k++) {
    const dlrt__node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in; j++) {
      const dlrt__node *maker = n->in[j]->owner->producer;
      for (int m = b0; m < b1 && maker; m++)
        if (g->nodes[s->order[m]] == maker && maker->op == DLRT__OP_CONV_GRAD_X) return b1;
    }
  }
  int len = b1 - b0, *moved = malloc((size_t)(len + pools) * sizeof *moved);
  int *grown = realloc(s->order, (size_t)(s->n + pools) * sizeof *grown);
  if (!moved || !grown) {
    free(moved);
    if (grown) s->order = grown;
    return -1;
  }
  s->order = grown;
  int m = 0;
  for (int k = b0; k < b1; k++)
    if (g->nodes[s->order[k]]->op != DLRT__OP_CONV_GRAD_X) moved[m++] = s->order[k];
  int second = b0 + m;
  for (int k = b0; k < b1; k++)
    if (g->nodes[s->order[k]]->op == DLRT__OP_MAXPOOL_GRAD) moved[m++] = s->order[k];
  for (int k = b0; k < b1; k++)
    if (g->nodes[s->order[k]]->op == DLRT__OP_CONV_GRAD_X) moved[m++] = s->order[k];
  memmove(s->order + b1 + pools, s->order + b1, (size_t)(s->n - b1) * sizeof *s->order);
  memcpy(s->order + b0, moved, (size_t)m * sizeof *moved);
  s->n += pools;
  free(moved);
  return second;
}

int dlrt__find_chunk_blocks(const dlrt_graph_t *g, dlrt__schedule *s, int every) {
  int n_fwd = 0;
  while (n_fwd < s->n && g->nodes[s->order[n_fwd]]->phase == DLRT__PHASE_FORWARD) n_fwd++;
  if (every <= 0 || n_fwd == 0) return DLRT_OK;
  int training = n_fwd < s->n;
  /* The forward positions are the forward nodes in order: the segments'
   * bounds in positions. */
  int *seg_of = malloc((size_t)n_fwd * sizeof *seg_of);
  if (!seg_of) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  int segments = dlrt__checkpoint_segments(g, s->order, n_fwd, every, seg_of);
  int *starts = malloc((size_t)(segments + 1) * sizeof *starts);
  if (!starts) {
    free(seg_of);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  }
  for (int f = 0; f < n_fwd; f++)
    if (f == 0 || seg_of[f] != seg_of[f - 1]) starts[seg_of[f]] = f;
  starts[segments] = n_fwd;
  free(seg_of);
  if (segments <= 1) {
    free(starts);
    return DLRT_OK;
  }
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  s->local = calloc(nt, 1);
  s->blocks = calloc((size_t)(3 * segments), sizeof *s->blocks);
  char *trial = malloc(nt);
  if (!s->local || !s->blocks || !trial) {
    free(trial);
    free(starts);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  }
  /* Last segment first: the backward blocks come in that order, so
   * splitting one moves only the positions of those not yet found. */
  for (int seg = segments - 1; seg >= 0; seg--) {
    span fw = {g, s, starts[seg], starts[seg + 1]};
    memcpy(trial, s->local, nt);
    int64_t batch = 0, unit = 1, chunk = check_forward(&fw, trial, &batch, &unit);
    int b0 = 0, b1 = 0, second = 0;
    /* An evaluation schedule has forward blocks only. */
    if (!chunk || (training && !find_backward(&fw, trial, batch, &chunk, &unit, &b0, &b1)))
      continue;
    if (training && (second = split_backward(g, s, b0, b1)) < 0) {
      free(trial);
      free(starts);
      return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    }
    memcpy(s->local, trial, nt);
    int spans[3][2] = {{fw.begin, fw.end}, {b0, second}, {second, b1}}, n_spans = 1 + training;
    if (training && second < b1) {
      /* Split: the max-pool gradients run again, and later positions
       * (blocks already found among them) move by as many. */
      int again = 0;
      for (int k = b0; k < second; k++) again += g->nodes[s->order[k]]->op == DLRT__OP_MAXPOOL_GRAD;
      for (int b = 0; b < s->n_blocks; b++)
        if (s->blocks[b].begin >= b1) s->blocks[b].begin += again, s->blocks[b].end += again;
      spans[2][1] = b1 + again;
      n_spans = 3;
    }
    for (int i = 0; i < n_spans; i++) {
      dlrt__chunk_block *blk = &s->blocks[s->n_blocks++];
      blk->begin = spans[i][0], blk->end = spans[i][1], blk->batch = batch;
      blk->chunk = blk->full = chunk, blk->unit = unit;
      /* The first half of a split: the second starts with its max-pool
       * gradients again (split_backward puts them first). */
      if (i == 1 && n_spans == 3)
        for (int k = spans[2][0];
             k < spans[2][1] && g->nodes[s->order[k]]->op == DLRT__OP_MAXPOOL_GRAD; k++)
          blk->again++;
    }
  }
  free(trial);
  free(starts);
  if (!s->n_blocks) {
    free(s->local), free(s->blocks);
    s->local = NULL, s->blocks = NULL;
    return DLRT_OK;
  }
  s->block_of = malloc((size_t)s->n * sizeof *s->block_of);
  if (!s->block_of) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  for (int k = 0; k < s->n; k++) s->block_of[k] = -1;
  for (int b = 0; b < s->n_blocks; b++)
    for (int k = s->blocks[b].begin; k < s->blocks[b].end; k++) s->block_of[k] = b;
  return DLRT_OK;
}

void dlrt__reset_chunks(dlrt__schedule *s) {
  /* Slice blocks come after the segments' blocks: spilling adds them. */
  while (s->n_blocks && s->blocks[s->n_blocks - 1].one_node) {
    const dlrt__chunk_block *b = &s->blocks[--s->n_blocks];
    for (int k = b->begin; k < b->end; k++) s->block_of[k] = -1;
  }
  for (int i = 0; i < s->n_blocks; i++) {
    dlrt__fuse_split_blocks(s, i, 0);
    s->blocks[i].chunk = s->blocks[i].full;
  }
}

void dlrt__fuse_split_blocks(dlrt__schedule *s, int i, int fuse) {
  dlrt__chunk_block *a = &s->blocks[i];
  if (!a->again || i + 1 >= s->n_blocks) return;
  dlrt__chunk_block *b = &s->blocks[i + 1];
  if (fuse == b->fused) return;
  if (fuse) {
    /* One chunk loop: the pair's chunks are the same (spilling halves the
     * blocks that start with one node together, dlrt__spill_fit). */
    a->skip_begin = b->begin, a->skip_end = b->begin + a->again, a->end = b->end;
    if (b->chunk < a->chunk) a->chunk = b->chunk;
    b->chunk = a->chunk;
  } else {
    a->end = a->skip_begin, a->skip_begin = a->skip_end = 0;
  }
  b->fused = fuse;
  for (int k = b->begin; k < b->end; k++) s->block_of[k] = fuse ? i : i + 1;
}

int dlrt__block_keeps(const dlrt_graph_t *g, const dlrt__schedule *s, const dlrt__chunk_block *b,
                      int k, int id) {
  if (k >= b->skip_begin) return 0;
  for (int m = b->skip_begin; m < b->skip_end; m++) {
    const dlrt__node *n = g->nodes[s->order[m]];
    for (int j = 0; j < n->n_out; j++)
      if (n->out[j]->owner->id == id) return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------- slice blocks
 *
 * A node whose operands hold more than the spilling budget whole, say a
 * GELU's gradient over a GPT's 4C-wide rows (dy, x and dx: 24 MiB for
 * gpt-mini), runs over its items a slice at a time: each item (a row of an
 * elementwise node, a sequence of an attention node: every head of it) is
 * computed from its own inputs alone, by the same kernel code whichever
 * slice it is in, so the results are the same bits as the node's whole
 * run. Nothing sums over items. Its operands move a slice at a time through
 * windows (exec_spill.c); a broadcast bias stays whole. */

static int dense_items(const dlrt_tensor_t *t, int64_t items, int64_t numel) {
  const dlrt_tensor_t *o = t->owner;
  return t->numel == numel && o->numel == numel && t->offset == 0 && dlrt__contiguous(t) &&
         !dlrt__persistent(o) && numel % items == 0;
}

int64_t dlrt__slice_items(const dlrt__node *n) {
  if (n->n_out < 1) return 0;
  const dlrt_tensor_t *y = n->out[0];
  int64_t items = 0, numel = y->numel;
  switch (n->op) {
  case DLRT__OP_ACT:
  case DLRT__OP_ACT_GRAD:
  case DLRT__OP_ADD:
  case DLRT__OP_MUL:
    items = y->ndim >= 2 ? numel / y->shape[y->ndim - 1] : 0;
    break;
  case DLRT__OP_BCAST:
    if (n->bcast.count != numel || n->bcast.m <= 0 || numel % n->bcast.m) return 0;
    items = numel / n->bcast.m;
    break;
  case DLRT__OP_ATTENTION:
  case DLRT__OP_ATTENTION_GRAD:
    /* Dropout's mask hashes the position in the whole batch. */
    if (n->attention.dropout > 0.0f) return 0;
    items = n->attention.batch;
    break;
  default: return 0;
  }
  if (items < 2) return 0;
  for (int j = 0; j < n->n_in + n->n_out; j++) {
    const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
    if (!dlrt__slice_operand(n, j)) continue;
    /* An attention's operands are B x ...: qkv, o, dO, lse, D. */
    int attention = n->op == DLRT__OP_ATTENTION || n->op == DLRT__OP_ATTENTION_GRAD;
    if (!dense_items(t, items, attention ? t->numel : numel) ||
        (attention && t->shape[0] != items))
      return 0;
    /* Two touches of one storage would need one window for both. */
    for (int i = 0; i < j; i++)
      if ((i < n->n_in ? n->in[i] : n->out[i - n->n_in])->owner == t->owner) return 0;
  }
  return items;
}

int dlrt__slice_operand(const dlrt__node *n, int j) {
  return !(n->op == DLRT__OP_BCAST && j == 1);
}

int dlrt__add_slice_blocks(const dlrt_graph_t *g, dlrt__schedule *s, int node) {
  int64_t items = dlrt__slice_items(g->nodes[node]);
  if (!items) return 0;
  int want = 0;
  for (int k = 0; k < s->n; k++)
    want += s->order[k] == node && (!s->block_of || s->block_of[k] < 0) && s->inplace[k] < 0;
  if (!want) return 0;
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  if (!s->local && !(s->local = calloc(nt, 1)))
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  if (!s->block_of) {
    if (!(s->block_of = malloc((size_t)(s->n ? s->n : 1) * sizeof *s->block_of)))
      return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    for (int k = 0; k < s->n; k++) s->block_of[k] = -1;
  }
  dlrt__chunk_block *grown = realloc(s->blocks, (size_t)(s->n_blocks + want) * sizeof *grown);
  if (!grown) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  s->blocks = grown;
  for (int k = 0; k < s->n; k++) {
    if (s->order[k] != node || s->block_of[k] >= 0 || s->inplace[k] >= 0) continue;
    dlrt__chunk_block *b = &s->blocks[s->n_blocks];
    *b = (dlrt__chunk_block){.begin = k, .end = k + 1, .batch = items, .chunk = items,
                             .full = items, .unit = 1, .one_node = 1};
    s->block_of[k] = s->n_blocks++;
  }
  return want;
}
