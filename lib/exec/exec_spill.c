/* exec_spill.c — the executor on top of lib/mem's managed storages: every
 * storage of the graph is declared to a pool whose device budget the
 * executor keeps; before a node runs its storages are acquired, after it
 * released, and the schedule tells the pool when each is needed next, so it
 * evicts the one needed last (Belady's rule, exact for a static graph) and
 * prefetches what the next nodes need. A chunked block (chunk.c) keeps the
 * whole-batch storages it touches acquired through all its chunks; each
 * chunk's own storages are acquired where they are made and discarded
 * after their last use, at one chunk's size. Where the budget cannot hold
 * a block's whole-batch storages, the block moves its image storages (its
 * input, pooled output, argmax, the gradients it reads and makes) a
 * chunk's images at a time through windows instead, in slices, and runs
 * fewer images per chunk if it must (dlrt__spill_fit). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/residency.h"
#include "optim.h" /* the update kernels, compiled as plain C for the host */
#include "util/status.h"

/* Nodes that write storages they take as inputs: the updates (parameters
 * and optimizer state), batch-norm's running statistics and the key / value
 * caches of attention_decode. */
static int writes_inputs(const dlrt__node *n) {
  return n->phase == DLRT__PHASE_UPDATE || n->op == DLRT__OP_BN_RUNNING ||
         n->op == DLRT__OP_ATTENTION_DECODE;
}

/* The clock value of the next use after position k for touch j of node k:
 * later in this run, else (persistent storage) in the next run. */
static int64_t next_use(const dlrt__schedule *s, int k, int j, const dlrt_tensor_t *t) {
  int at = s->next[k][j];
  if (at >= 0) return at;
  const dlrt_tensor_t *o = t->owner;
  if (dlrt__persistent(o) && s->first[o->id] >= 0) return (int64_t)s->n + s->first[o->id];
  return INT64_MAX;
}

void dlrt__spill_begin_run(dlrt_exec_t *e, const dlrt__schedule *s) {
  dlrt_graph_t *g = e->g;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    if (t->owner != t) continue;
    int64_t when = s->first[i] >= 0 ? s->first[i] : INT64_MAX;
    dlrt__mpool_next_use(e->spill.pool, i, when);
  }
}

/* Each storage a node touches, once (a node may read one twice). */
static int seen_before(const dlrt__node *n, int j) {
  const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
  for (int i = 0; i < j; i++) {
    const dlrt_tensor_t *u = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
    if (u->owner == t->owner) return 1;
  }
  return 0;
}

/* Optimizer state on the host (ZeRO-Offload): the update runs there, on
 * host copies of the parameter, its state and its gradient, through the CPU
 * backend's kernel and threads (dlrt_host_optimizer_update: the same bits
 * as on the cpu device); the device's parameter copy is dropped and fetched
 * again when the forward pass needs it. */
static int host_update(dlrt_exec_t *e, dlrt__node *n) {
  dlrt__mpool *p = e->spill.pool;
  const dlrt_optimizer *o = &e->g->opt;
  int states = n->op == DLRT__OP_SGD ? 1 : 2;
  void *param, *state[2] = {NULL, NULL}, *grad;
  int rc = dlrt__mpool_host_view(p, n->in[states + 1]->owner->id, 0, &grad);
  if (rc == DLRT_OK) rc = dlrt__mpool_host_view(p, n->in[0]->owner->id, 1, &param);
  for (int i = 0; i < states && rc == DLRT_OK; i++)
    rc = dlrt__mpool_host_view(p, n->in[1 + i]->owner->id, 1, &state[i]);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  if (rc < 0) return rc;
  dlrt_optimizer now = *o;
  now.lr = e->lr;
  rc = dlrt_host_optimizer_update(&now, e->steps, param, state[0], state[1], grad,
                                  n->in[0]->numel, !n->in[0]->no_decay, e->grads.grad_scale);
  /* The views end whatever the update said (their pins are released). */
  int rc2 = dlrt__mpool_host_view_end(p, n->in[states + 1]->owner->id, 0);
  if (rc2 == DLRT_OK) rc2 = dlrt__mpool_host_view_end(p, n->in[0]->owner->id, 1);
  for (int i = 0; i < states && rc2 == DLRT_OK; i++)
    rc2 = dlrt__mpool_host_view_end(p, n->in[1 + i]->owner->id, 1);
  return rc < 0 ? rc : rc2;
}

int dlrt__spill_begin_node(dlrt_exec_t *e, const dlrt__schedule *s, int k, int *done) {
  dlrt__node *n = e->g->nodes[s->order[k]];
  int rc = DLRT_OK, write = writes_inputs(n);
  dlrt_offload_policy policy = e->spill.cfg.policy;
  *done = 0;
  if ((n->op == DLRT__OP_SGD || n->op == DLRT__OP_ADAM) &&
      (policy == DLRT_OFFLOAD_OPTIMIZER || policy == DLRT_OFFLOAD_ALL)) {
    *done = 1;
    return host_update(e, n);
  }
  int taken = s->inplace[k];
  for (int j = 0; j < n->n_in && rc == DLRT_OK; j++)
    if (!seen_before(n, j)) rc = dlrt__mpool_acquire(e->spill.pool, n->in[j]->owner->id, write);
  int into = dlrt__inplace_output(n);
  if (rc == DLRT_OK && taken >= 0)
    rc = dlrt__mpool_take_over(e->spill.pool, n->out[into]->id, taken);
  for (int j = 0; j < n->n_out && rc == DLRT_OK; j++) {
    const dlrt_tensor_t *t = n->out[j];
    if (t->owner != t || (j == into && taken >= 0) || seen_before(n, n->n_in + j)) continue;
    rc = dlrt__mpool_acquire(e->spill.pool, t->id, 1);
  }
  return rc;
}

/* Whether touch j of training position k is the last forward use of a
 * storage the planner swaps. */
static int chose_swap(const dlrt_exec_t *e, const dlrt__schedule *s, int k, int j,
                      const dlrt_tensor_t *o) {
  const dlrt__exec_choice *c = &e->choice;
  if (!c->swap_out || s != &e->plan.plans[DLRT_RUN_TRAIN] || !c->swap_out[o->id]) return 0;
  return k < c->first_backward && s->next[k][j] >= c->first_backward;
}

int dlrt__spill_end_node(dlrt_exec_t *e, const dlrt__schedule *s, int k) {
  dlrt__node *n = e->g->nodes[s->order[k]];
  dlrt__mpool *p = e->spill.pool;
  for (int j = 0; j < n->n_in + n->n_out; j++) {
    const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
    if (seen_before(n, j) || (j >= n->n_in && t->owner != t)) continue;
    if (j < n->n_in && t->owner->id == s->inplace[k]) continue; /* handed over */
    dlrt__mpool_release(p, t->owner->id);
    dlrt__mpool_next_use(p, t->owner->id, next_use(s, k, j, t));
  }
  if (s->inplace[k] >= 0) dlrt__mpool_handed_over(p, s->inplace[k]);
  for (int *f = s->frees[k]; *f >= 0; f++) dlrt__mpool_discard(p, *f);
  /* Ahead of need, by policy: activations from the forward pass wait for
   * the backward pass off the device (optimizer state never comes to the
   * device under its policy: host_update). */
  dlrt_offload_policy policy = e->spill.cfg.policy;
  int rc = DLRT_OK;
  int acts = policy == DLRT_OFFLOAD_ACTIVATIONS || policy == DLRT_OFFLOAD_ALL;
  for (int j = 0; j < n->n_in + n->n_out && rc == DLRT_OK; j++) {
    const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
    const dlrt_tensor_t *o = t->owner;
    if (seen_before(n, j)) continue;
    if (acts && k <= s->last_forward && !dlrt__persistent(o) && s->next[k][j] > s->last_forward)
      rc = dlrt__mpool_offload(p, o->id);
    /* The planner's swaps (choose.c): off after the last forward use. */
    else if (chose_swap(e, s, k, j, o))
      rc = dlrt__mpool_offload(p, o->id);
  }
  /* The planner's prefetches, placed to end in time for the backward pass. */
  if (e->choice.prefetch_at && s == &e->plan.plans[DLRT_RUN_TRAIN] && k < e->choice.n_positions &&
      e->choice.prefetch_at[k])
    for (int *q = e->choice.prefetch_at[k]; *q >= 0 && rc == DLRT_OK; q++)
      rc = dlrt__mpool_prefetch(p, *q);
  /* What the next nodes read, on the copy stream meanwhile. */
  for (int a = k + 1; a <= k + e->spill.cfg.prefetch && a < s->n && rc == DLRT_OK; a++) {
    dlrt__node *m = e->g->nodes[s->order[a]];
    for (int j = 0; j < m->n_in && rc == DLRT_OK; j++) rc = dlrt__mpool_prefetch(p, m->in[j]->owner->id);
  }
  return rc;
}

/* Whether touch j of position k (input j, or output j - n_in) is the
 * first of its storage in block b. */
static int first_touch(const dlrt_graph_t *g, const dlrt__schedule *s, const dlrt__chunk_block *b,
                       int k, int j) {
  const dlrt__node *n = g->nodes[s->order[k]];
  const dlrt_tensor_t *t = (j < n->n_in ? n->in[j] : n->out[j - n->n_in])->owner;
  for (int k2 = b->begin; k2 <= k; k2++) {
    const dlrt__node *m = g->nodes[s->order[k2]];
    int upto = k2 < k ? m->n_in + m->n_out : j;
    for (int i = 0; i < upto; i++)
      if ((i < m->n_in ? m->in[i] : m->out[i - m->n_in])->owner == t) return 0;
  }
  return 1;
}

/* Each touch of a storage that holds the whole batch (local 0) by the
 * positions of a block, in order: fn(e, s, k, j, id, write), write 1 or 0
 * at its first touch (a block node makes it, or reads it), -1 at later
 * ones. */
static int for_block_storages(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                              int (*fn)(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id,
                                        int write)) {
  int rc = DLRT_OK;
  for (int k = b->begin; k < b->end && rc == DLRT_OK; k++) {
    const dlrt__node *n = e->g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out && rc == DLRT_OK; j++) {
      const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
      int id = t->owner->id;
      if (s->local[id] || seen_before(n, j)) continue;
      rc = fn(e, s, k, j, id, first_touch(e->g, s, b, k, j) ? j >= n->n_in : -1);
    }
  }
  return rc;
}

/* Whether storage id moves in slices in the block running now. */
static int sliced(const dlrt_exec_t *e, int id) {
  return e->spill.n_slices && e->spill.block_local[id] == 3;
}

static int lock_storage(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id, int write) {
  (void)s, (void)k, (void)j;
  if (write < 0 || sliced(e, id)) return DLRT_OK;
  return dlrt__mpool_acquire(e->spill.pool, id, write);
}

static int unlock_storage(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id, int write) {
  (void)s, (void)k, (void)j;
  if (write >= 0 && !sliced(e, id)) dlrt__mpool_release(e->spill.pool, id); /* locked once */
  return DLRT_OK;
}

/* Whether touch j of a block's node (input j, or output j - n_in) is on
 * its image side: not a convolution's weight or bias, nor their gradients
 * (whose shapes may look like a batch's). */
static int image_operand(const dlrt__node *n, int j) {
  switch (n->op) {
  case DLRT__OP_CONV:
  case DLRT__OP_CONV_GRAD_X:
  case DLRT__OP_BIAS_CHANNELS: return j != 1;
  case DLRT__OP_CONV_GRAD_W:
  case DLRT__OP_SUM_CHANNELS: return j != n->n_in;
  default: return 1;
  }
}

/* Whether a block's touch is of a whole-batch image storage (a slice
 * block's: of a storage that moves in slices of its items). */
static int whole_image(const dlrt__schedule *s, const dlrt__chunk_block *b, const dlrt__node *n, int j) {
  const dlrt_tensor_t *o = (j < n->n_in ? n->in[j] : n->out[j - n->n_in])->owner;
  if (b->one_node) return !s->local[o->id] && dlrt__slice_operand(n, j);
  return !s->local[o->id] && image_operand(n, j) && dlrt__batch_image(o, b->batch);
}

/* Whether block b can hold its whole-batch image storages in slices: each
 * is touched as itself (no view), and none is taken over in place. */
static int block_slices(const dlrt_graph_t *g, const dlrt__schedule *s, const dlrt__chunk_block *b) {
  if (b->one_node) return 1; /* its operands are dense views at 0 (dlrt__slice_items) */
  int any = 0;
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in], *o = t->owner;
      if (!whole_image(s, b, n, j)) continue;
      if (t != o || s->inplace[k] == o->id) return 0;
      any = 1;
    }
  }
  return any;
}

/* Notes a slice at the first touch of each whole-batch image storage. */
static int add_slice(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id, int write) {
  const dlrt_tensor_t *t = e->g->tensors[id];
  if (write < 0 || !whole_image(s, e->spill.slice_block, e->g->nodes[s->order[k]], j)) return DLRT_OK;
  const dlrt__chunk_block *b = e->spill.slice_block;
  struct dlrt__slice *sl = &e->spill.slices[e->spill.n_slices++];
  sl->id = id, sl->read = !write, sl->written = write, sl->last_read = -1, sl->overlap = 0;
  /* C x N x HW: a row per channel; a slice block's items lead. */
  sl->rows = t->cnhw && !b->one_node ? (size_t)t->shape[1] : 1;
  sl->row_image_bytes = dlrt__tensor_bytes(t) / (size_t)b->batch / sl->rows;
  sl->pitch = sl->row_image_bytes * (size_t)b->batch;
  e->spill.block_local[id] = 3;
  return DLRT_OK;
}

/* Marks the slices the block writes (at any touch, not only the first). */
static int note_written(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id, int write) {
  (void)write;
  const dlrt__node *n = e->g->nodes[s->order[k]];
  for (int i = 0; i < e->spill.n_slices && j >= n->n_in; i++)
    if (e->spill.slices[i].id == id) e->spill.slices[i].written = 1;
  return DLRT_OK;
}

/* Overlapped slices need copy streams that do not take the compute's
 * cores. On the development machine (2 cores, a load of 4-9 from other
 * jobs) the cnn at 25% measured slower with them than with its 141 copies
 * on the compute stream (medians of 14 alternated runs: 53.6 against 51.5
 * ms): each copy wakes the copy stream's thread, which takes a core. */
int dlrt__slice_overlap(int host_cores) {
  static int env = -2; /* -2: not read yet; -1 unset; else its 0 or 1 */
  int v = __atomic_load_n(&env, __ATOMIC_RELAXED);
  if (v == -2) {
    const char *s = getenv("DLRT_SLICE_OVERLAP");
    v = !s || !*s ? -1 : strcmp(s, "0") != 0;
    __atomic_store_n(&env, v, __ATOMIC_RELAXED);
  }
  return v >= 0 ? v : !host_cores;
}

/* Notes the last position of the block that reads each slice. */
static int note_read(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id, int write) {
  (void)s, (void)write;
  if (dlrt__block_skips(e->spill.slice_block, k)) return DLRT_OK; /* it does not run */
  const dlrt__node *n = e->g->nodes[s->order[k]];
  for (int i = 0; i < e->spill.n_slices && j < n->n_in; i++)
    if (e->spill.slices[i].id == id) e->spill.slices[i].last_read = k;
  return DLRT_OK;
}

/* The next use after the block, from each storage's last touch in it. */
static int note_next_use(dlrt_exec_t *e, const dlrt__schedule *s, int k, int j, int id, int write) {
  (void)write;
  const dlrt__node *n = e->g->nodes[s->order[k]];
  const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
  dlrt__mpool_next_use(e->spill.pool, id, next_use(s, k, j, t));
  return DLRT_OK;
}

int dlrt__spill_begin_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b) {
  int rc = DLRT_OK;
  e->spill.n_slices = 0;
  if (e->spill.slicing && block_slices(e->g, s, b)) {
    /* Image storages in slices: each gets a window of one chunk's images. */
    memcpy(e->spill.block_local, s->local, (size_t)e->g->n_tensors);
    e->spill.slice_block = b;
    rc = for_block_storages(e, s, b, add_slice);
    if (rc == DLRT_OK) rc = for_block_storages(e, s, b, note_written);
    if (rc == DLRT_OK) rc = for_block_storages(e, s, b, note_read);
    for (int i = 0; i < e->spill.n_slices && rc == DLRT_OK; i++) {
      struct dlrt__slice *sl = &e->spill.slices[i];
      /* A slice read and then written needs its copy in after its copy
       * out, each chunk: those stay on the compute stream. */
      sl->overlap = e->spill.overlap && !b->one_node && (!sl->read || !sl->written);
      size_t window = sl->row_image_bytes * sl->rows * (size_t)b->chunk;
      rc = dlrt__mpool_slices_begin(e->spill.pool, sl->id, !sl->read, window, &e->spill.windows[sl->id]);
    }
  }
  /* Every other whole-batch storage the block touches stays resident
   * (locked) through all its chunks; the chunks' own come and go. */
  return rc < 0 ? rc : for_block_storages(e, s, b, lock_storage);
}

int dlrt__spill_slices(dlrt_exec_t *e, int out, int64_t b0, int64_t nb) {
  int rc = DLRT_OK;
  for (int i = 0; i < e->spill.n_slices && rc == DLRT_OK; i++) {
    const struct dlrt__slice *sl = &e->spill.slices[i];
    if (!(out ? sl->written : sl->read)) continue;
    /* Overlapping: the first chunk's come in on the compute stream, the
     * later ones came in while the chunk before ran (spill_chunk_done). */
    if (sl->overlap && !out && b0 > 0) continue;
    size_t at = (size_t)b0 * sl->row_image_bytes, width = (size_t)nb * sl->row_image_bytes;
    rc = sl->overlap && out
             ? dlrt__mpool_slice_async(e->spill.pool, sl->id, 1, at, sl->pitch, width, sl->rows)
             : dlrt__mpool_slice(e->spill.pool, sl->id, out, at, sl->pitch, width, sl->rows);
  }
  return rc;
}

/* Before position k of a chunk: the copies of the windows it touches are
 * done (the chunk's slice in, the last chunk's slice out). */
static int slices_wait(dlrt_exec_t *e, const dlrt__schedule *s, int k) {
  const dlrt__node *n = e->g->nodes[s->order[k]];
  int rc = DLRT_OK;
  for (int i = 0; i < e->spill.n_slices && rc == DLRT_OK; i++) {
    if (!e->spill.slices[i].overlap) continue;
    for (int j = 0; j < n->n_in + n->n_out && rc == DLRT_OK; j++)
      if ((j < n->n_in ? n->in[j] : n->out[j - n->n_in])->owner->id == e->spill.slices[i].id)
        rc = dlrt__mpool_slice_wait(e->spill.pool, e->spill.slices[i].id);
  }
  return rc;
}

/* After position k of a chunk: the next chunk's slices that k read last
 * come in on the copy stream while the rest of this chunk runs. */
static int slices_ahead(dlrt_exec_t *e, int k, const dlrt__chunk_block *b, const dlrt__chunk *c) {
  int64_t b0 = c->b0 + c->nb, nb = b->batch - b0 < b->chunk ? b->batch - b0 : b->chunk;
  int rc = DLRT_OK;
  for (int i = 0; i < e->spill.n_slices && rc == DLRT_OK && b0 < b->batch; i++) {
    const struct dlrt__slice *sl = &e->spill.slices[i];
    if (sl->overlap && sl->read && sl->last_read == k)
      rc = dlrt__mpool_slice_async(e->spill.pool, sl->id, 0, (size_t)b0 * sl->row_image_bytes,
                                   sl->pitch, (size_t)nb * sl->row_image_bytes, sl->rows);
  }
  return rc;
}

int dlrt__spill_chunk_outputs(dlrt_exec_t *e, const dlrt__schedule *s, int k) {
  dlrt__node *n = e->g->nodes[s->order[k]];
  int rc = DLRT_OK, taken = s->inplace[k], into = dlrt__inplace_output(n);
  if (taken >= 0) rc = dlrt__mpool_take_over(e->spill.pool, n->out[into]->id, taken);
  for (int j = 0; j < n->n_out && rc == DLRT_OK; j++) {
    const dlrt_tensor_t *t = n->out[j];
    if (t->owner != t || !s->local[t->id] || (j == into && taken >= 0) || e->bufs[t->id])
      continue;
    rc = dlrt__mpool_acquire(e->spill.pool, t->id, 1); /* locked until discarded */
  }
  return rc;
}

void dlrt__spill_chunk_done(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                           int k) {
  if (s->inplace[k] >= 0) dlrt__mpool_handed_over(e->spill.pool, s->inplace[k]);
  for (int *f = s->frees[k]; *f >= 0; f++)
    if (s->local[*f] && !dlrt__block_keeps(e->g, s, b, k, *f))
      dlrt__mpool_discard(e->spill.pool, *f);
}

int dlrt__spill_end_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b) {
  int rc = for_block_storages(e, s, b, unlock_storage);
  for (int i = 0; i < e->spill.n_slices; i++) {
    const struct dlrt__slice *sl = &e->spill.slices[i];
    int rc2 = dlrt__mpool_slices_end(e->spill.pool, sl->id, sl->written);
    e->spill.windows[sl->id] = NULL;
    if (rc == DLRT_OK) rc = rc2;
  }
  e->spill.n_slices = 0;
  if (rc == DLRT_OK) rc = for_block_storages(e, s, b, note_next_use);
  /* The whole-batch storages whose lives end in the block. */
  for (int k = b->begin; k < b->end; k++)
    for (int *f = s->frees[k]; *f >= 0; f++)
      if (!s->local[*f]) dlrt__mpool_discard(e->spill.pool, *f);
  /* What the next nodes read, on the copy stream meanwhile. */
  for (int a = b->end; a < b->end + e->spill.cfg.prefetch && a < s->n && rc == DLRT_OK; a++) {
    dlrt__node *m = e->g->nodes[s->order[a]];
    for (int j = 0; j < m->n_in && rc == DLRT_OK; j++)
      rc = dlrt__mpool_prefetch(e->spill.pool, m->in[j]->owner->id);
  }
  return rc;
}

int dlrt__exec_use(dlrt_exec_t *e, const dlrt_tensor_t *t, int write) {
  return e->spill.pool ? dlrt__mpool_acquire(e->spill.pool, t->owner->id, write) : DLRT_OK;
}

void dlrt__exec_unuse(dlrt_exec_t *e, const dlrt_tensor_t *t) {
  if (e->spill.pool) dlrt__mpool_release(e->spill.pool, t->owner->id);
}

/* ---------------------------------------------------------------- setup */

/* The most one node of the schedule holds on the device at once (its
 * storages, distinct, in allocator granules): no smaller budget can work.
 * Updates run on the host under the optimizer policies and need nothing. */
static uint64_t node_need(const dlrt__node *n, int in_place, dlrt_offload_policy policy) {
  if ((n->op == DLRT__OP_SGD || n->op == DLRT__OP_ADAM) &&
      (policy == DLRT_OFFLOAD_OPTIMIZER || policy == DLRT_OFFLOAD_ALL))
    return 0;
  uint64_t need = 0;
  for (int j = 0; j < n->n_in + n->n_out; j++) {
    const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
    if (seen_before(n, j) || (in_place && j == n->n_in + dlrt__inplace_output(n)))
      continue; /* in place: no new bytes */
    need += dlrt__alloc_rounded(dlrt__tensor_bytes(t->owner));
  }
  return need;
}

/* The bytes the pool holds a storage in: the most any schedule does (a
 * storage may be a chunk's own in one schedule's block, or in a block of
 * fewer images, and the whole batch's in another). */
static uint64_t pool_bytes(const dlrt__schedule *plans, int n_plans, const dlrt_tensor_t *t) {
  uint64_t bytes = 0;
  for (int m = 0; m < n_plans; m++)
    if (plans[m].first && plans[m].first[t->id] >= 0) {
      uint64_t b = dlrt__schedule_bytes(&plans[m], t);
      if (b > bytes) bytes = b;
    }
  return bytes ? bytes : dlrt__tensor_bytes(t);
}

/* A chunked block holds every whole-batch storage it touches through all
 * its chunks (or, in slices, a window of a chunk's images for each image
 * storage), and a chunk's own storages as they come and go (made at a
 * position, taken over in place, freed after their last use), each as the
 * pool holds it (pool_bytes over the schedules). */
static uint64_t block_need(const dlrt_graph_t *g, const dlrt__schedule *plans, int n_plans,
                           const dlrt__schedule *s, const dlrt__chunk_block *b, int slices) {
  uint64_t whole = 0, own = 0, own_most = 0;
  slices = slices && block_slices(g, s, b);
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = g->nodes[s->order[k]];
    if (dlrt__block_skips(b, k)) continue; /* what it touches, the first half did */
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *t = (j < n->n_in ? n->in[j] : n->out[j - n->n_in])->owner;
      if (s->local[t->id] || !first_touch(g, s, b, k, j)) continue;
      uint64_t bytes = dlrt__tensor_bytes(t);
      if (slices && whole_image(s, b, n, j)) /* its window */
        bytes = bytes / (uint64_t)b->batch * (uint64_t)b->chunk;
      whole += dlrt__alloc_rounded(bytes);
    }
    for (int j = 0; j < n->n_out; j++) {
      const dlrt_tensor_t *t = n->out[j];
      if (t->owner != t || !s->local[t->id] ||
          (j == dlrt__inplace_output(n) && s->inplace[k] >= 0))
        continue;
      own += dlrt__alloc_rounded(pool_bytes(plans, n_plans, t));
    }
    if (own > own_most) own_most = own;
    for (int *f = s->frees[k]; *f >= 0; f++)
      if (s->local[*f] && !dlrt__block_keeps(g, s, b, k, *f))
        own -= dlrt__alloc_rounded(pool_bytes(plans, n_plans, g->tensors[*f]));
  }
  return whole + own_most;
}

/* What position k of schedule s needs at once: its node's storages, or a
 * block's at its first position (0 at the block's others). */
static uint64_t position_need(const dlrt_graph_t *g, const dlrt__schedule *plans, int n_plans,
                              const dlrt__schedule *s, int k, dlrt_offload_policy policy,
                              int slices) {
  const dlrt__chunk_block *b =
      s->block_of && s->block_of[k] >= 0 ? &s->blocks[s->block_of[k]] : NULL;
  if (b && k != b->begin) return 0;
  return b ? block_need(g, plans, n_plans, s, b, slices)
           : node_need(g->nodes[s->order[k]], s->inplace[k] >= 0, policy);
}

/* The most of needs[m][k] over the schedules' positions, the first that
 * needs it named in *worst (a block by its first node, as -2 - index). */
static uint64_t most_need(const dlrt__schedule *plans, int n_plans, uint64_t *const *needs,
                          int *worst) {
  uint64_t most = 0;
  *worst = -1;
  for (int m = 0; m < n_plans; m++)
    for (int k = 0; k < plans[m].n; k++)
      if (needs[m][k] > most) {
        const dlrt__schedule *s = &plans[m];
        int block = s->block_of && s->block_of[k] >= 0;
        most = needs[m][k], *worst = block ? -2 - s->order[k] : s->order[k];
      }
  return most;
}

uint64_t dlrt__least_spill_budget(const dlrt_graph_t *g, const dlrt__schedule *plans, int n_plans,
                                  dlrt_offload_policy policy, int slices, int *worst) {
  uint64_t most = 0;
  *worst = -1;
  for (int m = 0; m < n_plans; m++) {
    const dlrt__schedule *s = &plans[m];
    for (int k = 0; k < s->n; k++) {
      uint64_t need = position_need(g, plans, n_plans, s, k, policy, slices);
      if (need > most) {
        int block = s->block_of && s->block_of[k] >= 0;
        most = need, *worst = block ? -2 - s->order[k] : s->order[k];
      }
    }
  }
  return most;
}

/* needs[m][k] again for every position of graph node `node` (all of them
 * when node < 0). */
static void refresh_needs(const dlrt_graph_t *g, const dlrt__schedule *plans, int n_plans,
                          dlrt_offload_policy policy, int slices, int node, uint64_t **needs) {
  for (int m = 0; m < n_plans; m++)
    for (int k = 0; k < plans[m].n; k++)
      if (node < 0 || plans[m].order[k] == node)
        needs[m][k] = position_need(g, plans, n_plans, &plans[m], k, policy, slices);
}

/* DLRT_SPLIT_FUSE=0 keeps split backward blocks apart in slices too (for
 * comparison: the same bits either way). */
static int fuse_splits(void) {
  static int env = -1; /* -1: not read yet */
  int v = __atomic_load_n(&env, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *s = getenv("DLRT_SPLIT_FUSE");
    v = !s || !*s || strcmp(s, "0") != 0;
    __atomic_store_n(&env, v, __ATOMIC_RELAXED);
  }
  return v;
}

uint64_t dlrt__spill_fit(const dlrt_graph_t *g, dlrt__schedule *plans, int n_plans,
                         dlrt_offload_policy policy, uint64_t budget, int *slices, int *worst) {
  for (int m = 0; m < n_plans; m++) dlrt__reset_chunks(&plans[m]);
  *slices = 0;
  uint64_t least = dlrt__least_spill_budget(g, plans, n_plans, policy, 0, worst);
  if (budget && least <= budget) return least;
  int w;
  uint64_t sliced_least = dlrt__least_spill_budget(g, plans, n_plans, policy, 1, &w);
  if (sliced_least < least) *slices = 1, least = sliced_least, *worst = w;
  /* Then, while it needs the most: halve the chunk of the block that does
   * (in each schedule that runs it: named by its first node), down to its
   * unit; or run the node that does in slices of its items (a slice
   * block), if it can. Each step changes the positions of one node: only
   * theirs are counted again. */
  uint64_t **needs = calloc((size_t)n_plans, sizeof *needs);
  int ok = needs != NULL;
  for (int m = 0; ok && m < n_plans; m++)
    ok = (needs[m] = malloc((size_t)(plans[m].n ? plans[m].n : 1) * sizeof **needs)) != NULL;
  if (ok) refresh_needs(g, plans, n_plans, policy, *slices, -1, needs);
  while (ok && (!budget || least > budget)) {
    int changed = 0, node = *worst <= -2 ? -2 - *worst : *worst, was = *slices;
    if (*worst <= -2 && *slices) {
      for (int m = 0; m < n_plans; m++)
        for (int i = 0; i < plans[m].n_blocks; i++) {
          dlrt__chunk_block *b = &plans[m].blocks[i];
          if (plans[m].order[b->begin] != node || b->chunk <= b->unit) continue;
          int64_t half = b->chunk / 2 / b->unit * b->unit;
          b->chunk = half > b->unit ? half : b->unit;
          changed = 1;
        }
    } else if (*worst >= 0) {
      for (int m = 0; m < n_plans; m++) {
        int made = dlrt__add_slice_blocks(g, &plans[m], node);
        if (made < 0) break; /* out of host memory: what fits so far */
        changed += made;
      }
      if (changed) *slices = 1;
    }
    if (!changed) break;
    /* Slicing newly on changes every segment's block. */
    refresh_needs(g, plans, n_plans, policy, *slices, was == *slices ? node : -1, needs);
    least = most_need(plans, n_plans, needs, worst);
  }
  /* Split backward blocks in slices run as one where the budget holds the
   * pair's windows at once (a chunk of the input gradient's besides the
   * first half's, and the chunk's pooled gradient kept): each chunk then
   * makes its pooled gradient once and brings its dy and argmax in once.
   * The cnn at a quarter of its peak: 26 of 141 slice copies and 13 of 30
   * max-pool gradient runs a step fewer. Fused, the pair runs the same
   * chunks, so the same GEMMs: the bits stay. */
  for (int m = 0; ok && *slices && budget && fuse_splits() && m < n_plans; m++)
    for (int i = 0; i + 1 < plans[m].n_blocks; i++) {
      dlrt__schedule *s = &plans[m];
      dlrt__chunk_block *a = &s->blocks[i], *b = &s->blocks[i + 1];
      if (!a->again || a->one_node || b->fused || a->chunk != b->chunk) continue;
      dlrt__fuse_split_blocks(s, i, 1);
      uint64_t need = block_need(g, plans, n_plans, s, a, 1);
      if (need > budget) {
        dlrt__fuse_split_blocks(s, i, 0);
      } else if (need > least) {
        least = need, *worst = -2 - s->order[a->begin];
      }
    }
  for (int m = 0; needs && m < n_plans; m++) free(needs[m]);
  free(needs);
  return least;
}

int dlrt_exec_set_spill(dlrt_exec_t *e, const dlrt_spill_config *c) {
  DLRT__CHECK_ARG(e && c, "dlrt_exec_set_spill: executor or config is NULL");
  DLRT__CHECK_ARG(c->prefetch >= 0 && c->policy >= DLRT_OFFLOAD_NONE &&
                      c->policy <= DLRT_OFFLOAD_ALL,
                  "dlrt_exec_set_spill: prefetch %d, policy %d", c->prefetch, (int)c->policy);
  dlrt_graph_t *g = e->g;
  int rc = dlrt_stream_synchronize(e->stream);
  if (rc < 0) return rc;
  if (e->spill.pool) {
    /* Back to plain: every persistent storage on the device again. */
    dlrt__mpool_set_budget(e->spill.pool, UINT64_MAX);
    for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
      const dlrt_tensor_t *t = g->tensors[i];
      if (t->owner != t || !dlrt__persistent(t)) continue;
      if ((rc = dlrt__mpool_acquire(e->spill.pool, i, 0)) == DLRT_OK) dlrt__mpool_release(e->spill.pool, i);
    }
    if (rc < 0) return rc;
    dlrt__mpool_destroy(e->spill.pool);
    e->spill.pool = NULL;
  }
  e->spill.slicing = 0;
  if (c->device_budget == 0) {
    dlrt__reset_chunks(&e->plan.plans[0]), dlrt__reset_chunks(&e->plan.plans[1]);
    return DLRT_OK;
  }
  int worst, slices;
  uint64_t least = dlrt__spill_fit(g, e->plan.plans, 2, c->policy, c->device_budget, &slices, &worst);
  if (c->device_budget < least) {
    dlrt__reset_chunks(&e->plan.plans[0]), dlrt__reset_chunks(&e->plan.plans[1]);
    int block = worst <= -2;
    const dlrt__node *n = g->nodes[block ? -2 - worst : worst];
    return dlrt__set_error(DLRT_ERR_OOM, "a device budget of %.1f MiB for the model is below "
                           "what one operation needs at once: %s%s (-> %s) holds %.1f MiB%s; "
                           "the smallest budget that fits is %.1f MiB%s",
                           (double)c->device_budget / 1048576.0,
                           block ? "the segment run in chunks of images from " : "",
                           dlrt__op_name(n->op), n->n_out ? n->out[0]->name : "update",
                           (double)least / 1048576.0,
                           block ? slices ? " (its parameters and a chunk of images of its tensors)"
                                          : " (its whole-batch tensors and one chunk's)"
                                 : " of inputs and outputs",
                           (double)least / 1048576.0,
                           (n->op == DLRT__OP_SGD || n->op == DLRT__OP_ADAM)
                               ? " (or offload the optimizer: its updates then run on the host)"
                               : "");
  }
  if (slices && !e->spill.windows) {
    size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
    e->spill.windows = calloc(nt, sizeof *e->spill.windows);
    e->spill.block_local = calloc(nt, 1);
    e->spill.slices = calloc(nt, sizeof *e->spill.slices);
    if (!e->spill.windows || !e->spill.block_local || !e->spill.slices) {
      free(e->spill.windows), free(e->spill.block_local), free(e->spill.slices);
      e->spill.windows = NULL, e->spill.block_local = NULL, e->spill.slices = NULL;
      dlrt__reset_chunks(&e->plan.plans[0]), dlrt__reset_chunks(&e->plan.plans[1]);
      return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    }
  }
  rc = dlrt__mpool_create(e->dev, e->stream, e->bufs, g->n_tensors, c->device_budget,
                          c->host_budget, &e->spill.pool);
  if (rc < 0) {
    dlrt__reset_chunks(&e->plan.plans[0]), dlrt__reset_chunks(&e->plan.plans[1]);
    return rc;
  }
  e->spill.slicing = slices;
  e->spill.cfg = *c;
  dlrt_device_props props;
  e->spill.overlap = dlrt_device_props_get(e->dev, &props) == DLRT_OK &&
                     dlrt__slice_overlap(props.kind == DLRT_DEVICE_CPU);
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    if (t->owner != t) continue;
    dlrt__mpool_declare(e->spill.pool, i, pool_bytes(e->plan.plans, 2, t));
    if (e->bufs[i]) dlrt__mpool_adopt_buffer(e->spill.pool, i);
  }
  /* Start with everything on the host: the budget holds from the first run. */
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++)
    if (e->bufs[i] && g->tensors[i]->owner == g->tensors[i])
      rc = dlrt__mpool_offload(e->spill.pool, i);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  if (rc < 0) {
    dlrt__mpool_destroy(e->spill.pool);
    e->spill.pool = NULL;
    e->spill.slicing = 0;
    dlrt__reset_chunks(&e->plan.plans[0]), dlrt__reset_chunks(&e->plan.plans[1]);
    return rc;
  }
  /* The figures start here, within the budget: what the executor held and
   * moved before it spilled does not count. */
  dlrt__mpool_reset_stats(e->spill.pool);
  return dlrt_mem_reset_peak(e->dev);
}

int dlrt_exec_spill_stats(dlrt_exec_t *e, dlrt_spill_stats *out) {
  DLRT__CHECK_ARG(e && out, "dlrt_exec_spill_stats: executor or out is NULL");
  memset(out, 0, sizeof *out);
  if (!e->spill.pool) return DLRT_OK;
  int rc = dlrt_stream_synchronize(e->stream);
  if (rc == DLRT_OK) rc = dlrt__mpool_stats(e->spill.pool, out);
  for (int m = 0; m < 2 && e->spill.slicing; m++)
    for (int i = 0; i < e->plan.plans[m].n_blocks; i++)
      if (!e->plan.plans[m].blocks[i].one_node && /* images: the segments' */
          e->plan.plans[m].blocks[i].chunk > out->slice_images)
        out->slice_images = e->plan.plans[m].blocks[i].chunk;
  return rc;
}


/* ---------------------------------------------------------------- residency */

static int spill_begin_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                             const char **local) {
  int rc = dlrt__spill_begin_block(e, s, b);
  *local = e->spill.n_slices ? e->spill.block_local : s->local;
  return rc;
}

static int spill_chunk_in(dlrt_exec_t *e, int64_t b0, int64_t nb) {
  return dlrt__spill_slices(e, 0, b0, nb);
}

static int spill_chunk_outputs(dlrt_exec_t *e, const dlrt__schedule *s, int k, const dlrt__chunk *c) {
  (void)c;
  int rc = slices_wait(e, s, k);
  return rc < 0 ? rc : dlrt__spill_chunk_outputs(e, s, k);
}

static int spill_chunk_done(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b, int k,
                            const dlrt__chunk *c) {
  dlrt__spill_chunk_done(e, s, b, k);
  int rc = slices_ahead(e, k, b, c);
  if (rc < 0) return rc;
  return k == b->end - 1 ? dlrt__spill_slices(e, 1, c->b0, c->nb) : DLRT_OK;
}

static void spill_discard(dlrt_exec_t *e, int id) { dlrt__mpool_discard(e->spill.pool, id); }

const dlrt__residency dlrt__residency_spill = {
    .begin_run = dlrt__spill_begin_run,
    .begin_node = dlrt__spill_begin_node,
    .end_node = dlrt__spill_end_node,
    .begin_block = spill_begin_block,
    .chunk_in = spill_chunk_in,
    .chunk_outputs = spill_chunk_outputs,
    .chunk_done = spill_chunk_done,
    .end_block = dlrt__spill_end_block,
    .discard = spill_discard,
};

const dlrt__residency *dlrt__exec_residency(const dlrt_exec_t *e) {
  return e->spill.pool ? &dlrt__residency_spill : &dlrt__residency_plain;
}
