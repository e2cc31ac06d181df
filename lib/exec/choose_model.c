/* choose_model.c — the spill pool on paper: a training step replayed on
 * the rules of lib/mem/managed.c and exec_spill.c (storages acquired and
 * locked around each node, the one needed furthest ahead evicted first;
 * write-backs on the write-back stream, their device blocks held as drains
 * until the budget needs them (the compute stream waiting for the copy) or
 * the storage is used again; prefetches on the copy stream; a copy engine
 * per direction that copies queue on), with each node taking its measured
 * time. The planner prices every choice with it. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/link_model.h"
#include "exec/choose.h"
#include "exec/exec.h"
#include "util/status.h"

typedef struct {
  char resident, dirty, on_host, in_flight, handed_over;
  char drain; /* written back, its block still held (counted in `resident`) */
  char win;   /* in slices in the block running: 1 read first, 2 written first */
  int locked;
  int64_t next_use, last_use, drain_seq;
  double ready_s;   /* a prefetch's end */
  double written_s; /* the last write-back's end: the host copy complete */
} store;

typedef struct {
  const dlrt__pool_model *m;
  store *st;
  uint64_t resident, peak, draining;
  int64_t clock, drain_clock;
  /* s: compute stream, copy stream, write-back stream, h2d / d2h engines */
  double now, copy_stream, wb_stream, engine[2];
  double exposed;
  uint64_t fetched, spilled;
  int feasible;
  int held; /* in a block whose profiled time holds its copies */
} sim;

static int writes_inputs(const dlrt__node *n) {
  return n->phase == DLRT__PHASE_UPDATE || n->op == DLRT__OP_BN_RUNNING ||
         n->op == DLRT__OP_ATTENTION_DECODE;
}

static int host_update(const sim *z, const dlrt__node *n) {
  dlrt_offload_policy p = z->m->policy;
  return (n->op == DLRT__OP_SGD || n->op == DLRT__OP_ADAM) &&
         (p == DLRT_OFFLOAD_OPTIMIZER || p == DLRT_OFFLOAD_ALL);
}

/* A copy's seconds: the link's, never under the floor's. */
static double copy_s(const sim *z, uint64_t bytes) {
  const dlrt__pool_model *m = z->m;
  double t = m->bytes_per_s > 0 ? m->latency_s + (double)bytes / m->bytes_per_s : 0;
  double floor = m->floor_bytes_per_s > 0 ? (double)bytes / m->floor_bytes_per_s : 0;
  return t > floor ? t : floor;
}

/* `copies` copies of `bytes` in all on the compute stream, back to back
 * (a block's slices): each pays the latency, the stream's hand-offs with
 * it; it waits. Inside a block whose profiled time holds its copies (made
 * with the link off), only the link's time past them and its gates. */
static void copies_on_compute(sim *z, int dir, uint64_t bytes, uint64_t copies) {
  const dlrt__pool_model *m = z->m;
  double start = z->now > z->engine[dir] ? z->now : z->engine[dir];
  double end = start + (z->held ? dlrt__link_seconds_past(m->bytes_per_s, m->link_latency_s,
                                                         m->held_bytes_per_s,
                                                         m->block_gate_s, bytes, copies)
                                : copy_s(z, bytes) + (double)(copies - 1) * m->latency_s);
  z->engine[dir] = end;
  z->exposed += end - z->now;
  z->now = end;
}

/* A copy on the compute stream (a fetch, a write-back): it waits. */
static void copy_on_compute(sim *z, int dir, uint64_t bytes) {
  copies_on_compute(z, dir, bytes, 1);
}

static uint64_t bytes_of(const sim *z, int id) { return z->m->bytes[id]; }
static uint64_t size_of(const sim *z, int id) { return z->m->size[id]; }

/* The compute stream waits until `t` (a copy's end). */
static void wait_until(sim *z, double t) {
  if (t > z->now) z->exposed += t - z->now, z->now = t;
}

/* A drain's block given back: the compute stream waits for its copy. */
static void release_drain(sim *z, int id) {
  store *s = &z->st[id];
  wait_until(z, s->written_s);
  s->drain = 0;
  z->resident -= bytes_of(z, id);
  z->draining -= bytes_of(z, id);
}

static int oldest_drain(const sim *z) {
  int best = -1;
  for (int i = 0; i < z->m->g->n_tensors; i++)
    if (z->st[i].drain && (best < 0 || z->st[i].drain_seq < z->st[best].drain_seq)) best = i;
  return best;
}

/* A drain used again: its block is the storage's again, uncopied. */
static void reclaim_drain(sim *z, int id, int write) {
  store *s = &z->st[id];
  s->drain = 0;
  s->resident = 1;
  z->draining -= bytes_of(z, id);
  if (write) wait_until(z, s->written_s);
}

static void evict(sim *z, int id) {
  store *s = &z->st[id];
  s->resident = 0;
  s->in_flight = 0;
  if (s->dirty || !s->on_host) {
    /* On the write-back stream after the kernels queued so far (the
     * compute stream's now), on the device-to-host engine. */
    double start = z->now;
    if (z->wb_stream > start) start = z->wb_stream;
    if (z->engine[1] > start) start = z->engine[1];
    z->engine[1] = z->wb_stream = s->written_s = start + copy_s(z, size_of(z, id));
    z->spilled += size_of(z, id);
    s->on_host = 1;
    s->dirty = 0;
    s->drain = 1;
    s->drain_seq = ++z->drain_clock;
    z->draining += bytes_of(z, id);
    return;
  }
  s->dirty = 0;
  z->resident -= bytes_of(z, id);
}

static int victim(const sim *z, int64_t before) {
  int best = -1;
  for (int i = 0; i < z->m->g->n_tensors; i++) {
    const store *s = &z->st[i];
    if (!s->resident || s->locked || s->handed_over) continue;
    if (before >= 0 && s->next_use <= before) continue;
    if (best < 0 || s->next_use > z->st[best].next_use ||
        (s->next_use == z->st[best].next_use && s->last_use < z->st[best].last_use))
      best = i;
  }
  return best;
}

static int make_room(sim *z, uint64_t bytes, int64_t before) {
  uint64_t budget = z->m->budget;
  if (before >= 0 && z->resident + bytes > budget) {
    uint64_t can = z->draining;
    for (int i = 0; i < z->m->g->n_tensors; i++) {
      const store *s = &z->st[i];
      if (s->resident && !s->locked && !s->handed_over && s->next_use > before)
        can += bytes_of(z, i);
    }
    if (z->resident - can + bytes > budget) return 0;
  }
  while (z->resident + bytes > budget) {
    int d = oldest_drain(z);
    if (d >= 0) {
      release_drain(z, d);
      continue;
    }
    int v = victim(z, before);
    if (v < 0) return 0;
    evict(z, v);
  }
  return 1;
}

static void place(sim *z, int id) {
  z->st[id].resident = 1;
  z->resident += bytes_of(z, id);
  if (z->resident > z->peak) z->peak = z->resident;
}

static void acquire(sim *z, int id, int write) {
  store *s = &z->st[id];
  s->last_use = ++z->clock;
  if (s->resident) {
    if (s->in_flight) {
      if (s->ready_s > z->now) z->exposed += s->ready_s - z->now, z->now = s->ready_s;
      s->in_flight = 0;
    }
  } else if (s->drain) {
    reclaim_drain(z, id, write);
  } else {
    if (!make_room(z, bytes_of(z, id), -1)) z->feasible = 0;
    place(z, id);
    if (s->on_host) {
      wait_until(z, s->written_s);
      copy_on_compute(z, 0, size_of(z, id));
      z->fetched += size_of(z, id);
    }
  }
  s->locked++;
  if (write) s->dirty = 1, s->on_host = 0;
}

static void release(sim *z, int id) {
  if (z->st[id].locked > 0) z->st[id].locked--;
}

static void discard(sim *z, int id) {
  store *s = &z->st[id];
  if (s->drain) release_drain(z, id);
  if (s->resident) z->resident -= bytes_of(z, id);
  s->resident = 0, s->locked = 0, s->dirty = 0, s->on_host = 0, s->in_flight = 0;
  s->next_use = INT64_MAX;
}

static void take_over(sim *z, int id, int from) {
  store *s = &z->st[id], *f = &z->st[from];
  if (s->drain) release_drain(z, id);
  z->resident -= bytes_of(z, from);
  z->resident += bytes_of(z, id);
  f->locked = 0, f->dirty = f->on_host = f->in_flight = 0;
  f->next_use = INT64_MAX;
  f->handed_over = 1;
  s->resident = 1;
  s->last_use = ++z->clock;
  s->locked++;
  s->dirty = 1, s->on_host = 0;
}

static void prefetch(sim *z, int id) {
  store *s = &z->st[id];
  if (s->resident || !s->on_host) return;
  if (s->drain) {
    reclaim_drain(z, id, 0);
    return;
  }
  if (!make_room(z, bytes_of(z, id), s->next_use)) return;
  place(z, id);
  double start = z->now;
  if (z->copy_stream > start) start = z->copy_stream;
  if (s->written_s > start) start = s->written_s;
  if (z->engine[0] > start) start = z->engine[0];
  double end = start + copy_s(z, size_of(z, id));
  z->engine[0] = z->copy_stream = end;
  s->in_flight = 1;
  s->ready_s = end;
  z->fetched += size_of(z, id);
}

static const dlrt_tensor_t *touch(const dlrt__node *n, int j) {
  return j < n->n_in ? n->in[j] : n->out[j - n->n_in];
}

static int seen_before(const dlrt__node *n, int j) {
  for (int i = 0; i < j; i++)
    if (touch(n, i)->owner == touch(n, j)->owner) return 1;
  return 0;
}

static int64_t next_use(const dlrt__schedule *s, int k, int j, const dlrt_tensor_t *t) {
  int at = s->next[k][j];
  if (at >= 0) return at;
  const dlrt_tensor_t *o = t->owner;
  if (dlrt__persistent(o) && s->first[o->id] >= 0) return (int64_t)s->n + s->first[o->id];
  return INT64_MAX;
}

/* One node, as dlrt__spill_begin_node and _end_node do it. */
static void run_position(sim *z, int k, double *compute, double *recompute) {
  const dlrt__pool_model *m = z->m;
  const dlrt__schedule *s = m->s;
  const dlrt__node *n = m->g->nodes[s->order[k]];
  double cost = m->node_ms[s->order[k]] / 1e3;
  int redo = n->phase == DLRT__PHASE_FORWARD && k > m->first_backward;
  if (host_update(z, n)) {
    /* The host reads the gradient and rewrites the parameter and state:
     * their device copies are written back (if changed) and dropped. */
    for (int j = 0; j < n->n_in; j++) {
      int id = n->in[j]->owner->id;
      store *st = &z->st[id];
      if (st->drain) release_drain(z, id); /* the host waits for the copy: the host copy serves */
      if (st->resident && st->dirty) {
        /* Priced whole, though op_costs.c times a host update with its host
         * views' copies: priced as held, the mlp's step at 16 GB/s under
         * --offload optimizer was predicted 0.73-0.78x measured, against
         * 0.79-0.87x priced whole (5 alternated runs each, a load of 3). */
        copy_on_compute(z, 1, size_of(z, id));
        z->spilled += size_of(z, id);
      }
      st->dirty = 0, st->on_host = 1;
      if (st->resident && j != n->n_in - 1) z->resident -= bytes_of(z, id), st->resident = 0;
    }
    z->now += cost;
    *compute += cost;
  } else {
    int w = writes_inputs(n);
    for (int j = 0; j < n->n_in; j++)
      if (!seen_before(n, j)) acquire(z, n->in[j]->owner->id, w);
    int into = dlrt__inplace_output(n), taken = s->inplace[k];
    if (taken >= 0) take_over(z, n->out[into]->id, taken);
    for (int j = 0; j < n->n_out; j++) {
      const dlrt_tensor_t *t = n->out[j];
      if (t->owner != t || (j == into && taken >= 0) || seen_before(n, n->n_in + j)) continue;
      acquire(z, t->id, 1);
    }
    z->now += cost;
    if (redo) *recompute += cost;
    else *compute += cost;
  }
  for (int j = 0; j < n->n_in + n->n_out; j++) {
    const dlrt_tensor_t *t = touch(n, j);
    if (seen_before(n, j) || (j >= n->n_in && t->owner != t)) continue;
    if (j < n->n_in && t->owner->id == s->inplace[k]) continue;
    if (host_update(z, n)) continue;
    release(z, t->owner->id);
    z->st[t->owner->id].next_use = next_use(s, k, j, t);
  }
  if (s->inplace[k] >= 0) {
    store *f = &z->st[s->inplace[k]];
    f->resident = 0, f->handed_over = 0;
  }
  for (int *f = s->frees[k]; *f >= 0; f++) discard(z, *f);
  int acts = m->policy == DLRT_OFFLOAD_ACTIVATIONS || m->policy == DLRT_OFFLOAD_ALL;
  for (int j = 0; j < n->n_in + n->n_out; j++) {
    const dlrt_tensor_t *o = touch(n, j)->owner;
    if (seen_before(n, j) || dlrt__persistent(o) || n->phase != DLRT__PHASE_FORWARD) continue;
    int later = s->next[k][j];
    int by_policy = acts && k <= s->last_forward && later > s->last_forward;
    int by_choice = m->swap_out && m->swap_out[o->id] && k < m->first_backward &&
                    later >= m->first_backward;
    if ((by_policy || by_choice) && z->st[o->id].resident && !z->st[o->id].locked)
      evict(z, o->id);
  }
  for (int a = k + 1; a <= k + m->lookahead && a < s->n; a++) {
    const dlrt__node *x = m->g->nodes[s->order[a]];
    for (int j = 0; j < x->n_in; j++) prefetch(z, x->in[j]->owner->id);
  }
  if (m->prefetch_at && m->prefetch_at[k])
    for (int *p = m->prefetch_at[k]; *p >= 0; p++) prefetch(z, *p);
}

/* Whether touch j of position k is the first of its storage in block b. */
static int first_in_block(const dlrt_graph_t *g, const dlrt__schedule *s,
                          const dlrt__chunk_block *b, int k, int j) {
  const dlrt_tensor_t *o = touch(g->nodes[s->order[k]], j)->owner;
  for (int k2 = b->begin; k2 <= k; k2++) {
    const dlrt__node *n = g->nodes[s->order[k2]];
    for (int i = 0; i < (k2 < k ? n->n_in + n->n_out : j); i++)
      if (touch(n, i)->owner == o) return 0;
  }
  return 1;
}

/* Whether a block's touch moves in slices (exec_spill.c: whole_image). */
static int in_window(const dlrt__pool_model *m, const dlrt__chunk_block *b, const dlrt__node *n,
                     int j) {
  const dlrt_tensor_t *t = touch(n, j)->owner;
  if (!m->slicing || m->s->local[t->id]) return 0;
  return b->one_node ? dlrt__slice_operand(n, j) : dlrt__batch_image(t, b->batch);
}

/* The window of a storage in slices, as exec_spill.c sizes it (a chunk's
 * images, or a slice block's items), in the pool's granules. */
static uint64_t window_bytes(const dlrt__chunk_block *b, const dlrt_tensor_t *t) {
  uint64_t rows = t->cnhw && !b->one_node ? (uint64_t)t->shape[1] : 1;
  uint64_t per = dlrt__tensor_bytes(t) / (uint64_t)b->batch / rows;
  return dlrt__alloc_rounded(per * rows * (uint64_t)b->chunk);
}

/* A chunked block (a checkpointed segment of convolutions, or a slice
 * block): its whole-batch storages locked through it, its own made and
 * freed as it goes, its nodes' measured times (a whole batch's) once.
 * Storages in slices, as dlrt__mpool_slices_begin does it first: the host
 * copy made current (a dirty device copy written back on the compute
 * stream), the device copy dropped, a window of a chunk held; then each
 * is copied in (when the block reads it) and out (when it writes it), a
 * slice at a time: the whole storage each way, a copy a chunk, on the
 * compute stream or overlapping the chunks (exec_spill.c). */
static void run_block(sim *z, const dlrt__chunk_block *b, double *compute, double *recompute) {
  const dlrt__pool_model *m = z->m;
  const dlrt__schedule *s = m->s;
  uint64_t windows = 0, read_in = 0;
  /* The profile timed this block whole, its copies in it at the host's
   * rate (op_costs.c): the cnn at a quarter of its peak, 23.7 MB in 115
   * copies, 2.4 ms of memcpy and 0.8 ms of hand-offs a step that the model
   * counted a second time on the link. */
  z->held = m->blocks_held && m->held_bytes_per_s > 0;
  /* Each chunk copies each of its windows on its own (dlrt__spill_slices):
   * the cnn's at 25% of its peak, 141 copies a step. */
  uint64_t chunks = b->chunk > 0 ? (uint64_t)((b->batch + b->chunk - 1) / b->chunk) : 1;
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = m->g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *t = touch(n, j)->owner;
      if (seen_before(n, j) || !in_window(m, b, n, j)) continue;
      if (!first_in_block(m->g, s, b, k, j)) {
        if (j >= n->n_in) z->st[t->id].dirty = 2; /* written in the block: copied out */
        continue;
      }
      store *st = &z->st[t->id];
      if (st->in_flight) wait_until(z, st->ready_s), st->in_flight = 0;
      if (st->drain) release_drain(z, t->id); /* the host copy serves */
      if (st->resident) {
        if (st->dirty || !st->on_host) {
          copy_on_compute(z, 1, size_of(z, t->id));
          z->spilled += size_of(z, t->id);
        }
        st->resident = 0;
        z->resident -= bytes_of(z, t->id);
      }
      st->on_host = 1;
      st->dirty = j >= n->n_in ? 2 : 0;
      st->win = j < n->n_in ? 1 : 2;
      if (j < n->n_in) read_in += size_of(z, t->id);
      uint64_t w = window_bytes(b, t);
      if (!make_room(z, w, -1)) z->feasible = 0;
      z->resident += w, windows += w;
      if (z->resident > z->peak) z->peak = z->resident;
    }
  }
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = m->g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *t = touch(n, j)->owner;
      if (seen_before(n, j) || (j >= n->n_in && touch(n, j) != t)) continue;
      if (s->inplace[k] >= 0 && j == n->n_in + dlrt__inplace_output(n)) {
        take_over(z, t->id, s->inplace[k]);
        continue;
      }
      if (in_window(m, b, n, j)) continue;
      if (z->st[t->id].locked && z->st[t->id].resident) continue;
      if (!z->st[t->id].resident && !z->st[t->id].drain && !s->local[t->id] &&
          !make_room(z, bytes_of(z, t->id), -1)) {
        if (z->st[t->id].drain) release_drain(z, t->id); /* slices: through the host view */
        /* No room for it whole: it moves in slices, a chunk's images at a
         * time through the host, in (when read) and out (when written). */
        if (j < n->n_in && z->st[t->id].on_host) copy_on_compute(z, 0, size_of(z, t->id));
        if (j >= n->n_in) {
          copy_on_compute(z, 1, size_of(z, t->id));
          z->st[t->id].on_host = 1, z->st[t->id].dirty = 0;
        }
        continue;
      }
      acquire(z, t->id, j >= n->n_in);
    }
    /* A chunk's own storages end where the executor discards them after
     * each chunk (exec_spill.c: dlrt__spill_chunk_done): a convolution's
     * workspace is gone before the next one's is made. */
    for (int *f = s->frees[k]; *f >= 0; f++)
      if (s->local[*f] && !dlrt__block_keeps(m->g, s, b, k, *f)) discard(z, *f);
  }
  /* In: a slice read and also written, each chunk on the compute stream
   * (all of them priced first); one only read, the first chunk's there and
   * the others on the copy stream while the chunk before runs. */
  int overlap = m->overlap && !b->one_node;
  uint64_t sync_in = 0, n_sync_in = 0, ahead = 0, n_ahead = 0;
  for (int i = 0; i < m->g->n_tensors && windows; i++) {
    if (z->st[i].win != 1) continue;
    if (overlap && z->st[i].dirty != 2) ahead += size_of(z, i), n_ahead++;
    else sync_in += size_of(z, i), n_sync_in++;
  }
  if (sync_in) copies_on_compute(z, 0, sync_in, n_sync_in * chunks);
  if (ahead) copies_on_compute(z, 0, ahead / chunks, n_ahead);
  z->fetched += read_in;
  double began = z->now;
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = m->g->nodes[s->order[k]];
    if (dlrt__block_skips(b, k)) continue; /* a fused split's: made once */
    double cost = m->node_ms[s->order[k]] / 1e3;
    z->now += cost;
    if (n->phase == DLRT__PHASE_FORWARD && k > m->first_backward) *recompute += cost;
    else *compute += cost;
    if (s->inplace[k] >= 0) z->st[s->inplace[k]].resident = 0, z->st[s->inplace[k]].handed_over = 0;
  }
  /* Out: a slice written first goes on the write-back stream after its
   * chunk, the last chunk's waited for; the rest on the compute stream. */
  uint64_t sync_out = 0, n_sync_out = 0, behind = 0, n_behind = 0;
  for (int i = 0; i < m->g->n_tensors && windows; i++) {
    store *st = &z->st[i];
    if (st->dirty == 2 && !st->resident) {
      if (overlap && st->win == 2) behind += size_of(z, i), n_behind++;
      else sync_out += size_of(z, i), n_sync_out++;
      st->dirty = 0, st->on_host = 1;
    }
    st->win = 0;
  }
  /* The chunks' copies on the copy engines each have a chunk's compute
   * to hide behind; what they take past it is exposed. */
  double per_chunk = (z->now - began) / (double)chunks;
  for (int dir = 0; dir < 2 && chunks > 1; dir++) {
    uint64_t bytes = dir ? behind : ahead, n_copies = dir ? n_behind : n_ahead;
    if (!bytes) continue;
    double one = copy_s(z, bytes / chunks) + (double)(n_copies - 1) * m->latency_s, past;
    if (z->held) /* the profiled chunks waited for them as far as they were not hidden */
      past = (double)(chunks - 1) *
             dlrt__link_seconds_past(m->bytes_per_s, m->link_latency_s, m->held_bytes_per_s,
                                     m->block_gate_s, bytes / chunks, n_copies);
    else
      past = (double)(chunks - 1) * (one > per_chunk ? one - per_chunk : 0);
    z->now += past, z->exposed += past;
    double busy = began + (double)(chunks - 1) * one;
    if (busy > z->engine[dir]) z->engine[dir] = busy;
  }
  if (sync_out) copies_on_compute(z, 1, sync_out, n_sync_out * chunks);
  if (behind) copies_on_compute(z, 1, behind / chunks, n_behind);
  z->spilled += sync_out + behind;
  z->held = 0;
  z->resident -= windows;
  for (int k = b->begin; k < b->end; k++) {
    const dlrt__node *n = m->g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *t = touch(n, j);
      if (seen_before(n, j)) continue;
      z->st[t->owner->id].locked = 0;
      z->st[t->owner->id].next_use = next_use(s, k, j, t);
    }
    for (int *f = s->frees[k]; *f >= 0; f++) discard(z, *f);
  }
  for (int a = b->end; a < b->end + m->lookahead && a < s->n; a++) {
    const dlrt__node *x = m->g->nodes[s->order[a]];
    for (int j = 0; j < x->n_in; j++) prefetch(z, x->in[j]->owner->id);
  }
}

int dlrt__model_step_run(const dlrt__pool_model *m, dlrt__model_step *out) {
  memset(out, 0, sizeof *out);
  const dlrt_graph_t *g = m->g;
  const dlrt__schedule *s = m->s;
  sim z = {.m = m, .feasible = 1};
  z.st = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *z.st);
  if (!z.st) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* Spilling starts with every persistent storage on the host. */
  for (int i = 0; i < g->n_tensors; i++) {
    z.st[i].next_use = INT64_MAX;
    z.st[i].on_host = dlrt__persistent(g->tensors[i]) && g->tensors[i]->owner == g->tensors[i];
  }
  for (int step = 0; step < 2; step++) {
    double t0 = z.now, exposed0 = z.exposed, compute = 0, recompute = 0;
    uint64_t fetched0 = z.fetched, spilled0 = z.spilled;
    /* The batch is copied in first (acquired for writing). */
    for (const int *in = m->inputs; in && *in >= 0; in++) {
      acquire(&z, *in, 1);
      release(&z, *in);
    }
    for (int i = 0; i < g->n_tensors; i++)
      if (g->tensors[i]->owner == g->tensors[i])
        z.st[i].next_use = s->first[i] >= 0 ? s->first[i] : INT64_MAX;
    for (int k = 0; k < s->n; k++) {
      if (s->block_of && s->block_of[k] >= 0) {
        const dlrt__chunk_block *b = &s->blocks[s->block_of[k]];
        run_block(&z, b, &compute, &recompute);
        k = b->end - 1;
        continue;
      }
      run_position(&z, k, &compute, &recompute);
    }
    out->step_ms = (z.now - t0) * 1e3;
    out->compute_ms = compute * 1e3;
    out->recompute_ms = recompute * 1e3;
    out->exposed_ms = (z.exposed - exposed0) * 1e3;
    out->fetched_bytes = z.fetched - fetched0;
    out->spilled_bytes = z.spilled - spilled0;
  }
  out->feasible = z.feasible;
  out->peak_resident = z.peak;
  free(z.st);
  return DLRT_OK;
}
