/* param_stream.c — parameters on the host, streamed to the device by node
 * (dlrt_exec_offload_params; ZeRO-Offload / ZeRO-Infinity's residency).
 *
 * Each parameter that an optimizer update trains lives on the host: its
 * fp32 master, its optimizer state and a host copy of its gradient, in
 * pinned memory (pageable past DLRT_PINNED_LIMIT). The device holds a
 * parameter only around its uses: `ahead` nodes before a node that reads
 * it, its copy is queued on the executor's copy stream (an event orders the
 * kernel after it), and after a use whose next one is more than `ahead`
 * nodes away the device copy is freed. The forward pass and the backward
 * pass fetch each parameter again. A gradient goes to the host on the copy
 * stream as soon as the last node that touches it has been queued, and its
 * device buffer is freed then; at the parameter's update node the host
 * optimizer (dlrt_host_optimizer_update, the cpu backend's kernels) updates
 * master and state from it. The bits are the device run's: the same
 * kernels compute the same values, only where they are changes.
 *
 * It wraps the plain residency policy (resident.c), which still allocates
 * and frees every other storage; it does not go with spilling (the pool
 * would own the same buffers). Positions k are those of the schedule
 * running; the tables of each schedule are made when a run first meets it
 * (again after a replan). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/param_stream.h"
#include "exec/residency.h"
#include "mem/buffer.h"
#include "util/clock.h"
#include "util/status.h"

typedef struct {
  int id, grad;        /* storages: the parameter's and its gradient's (-1: none) */
  int state[2], n_state;
  const dlrt__node *update;
  size_t bytes;
  float *host, *host_state[2], *host_grad;
  dlrt_event_t *fetched, *grad_done;
  int in_flight;       /* a fetch is queued: the compute stream waits for `fetched` */
  int grad_on_host;    /* the gradient's copy to the host is queued (grad_done) */
  int queued;          /* its update is with the host thread (or done by it), this run */
  int updated;         /* the host thread has updated it this run */
} streamed;

/* One schedule's tables, CSR style: for position k the parameters its node
 * reads (use[use_at[k] .. use_at[k + 1]]) and those whose gradients are
 * complete after it (done[...]); for parameter i its use positions in order
 * (pos[pos_at[i] .. pos_at[i + 1]]). */
typedef struct {
  const int *order; /* the schedule these were made for; NULL: none yet */
  int n;
  int *use_at, *use, *done_at, *done, *pos_at, *pos;
  /* ready[ready_at[k] ..]: parameters whose gradient is complete and whose
   * last use has been queued after position k: their updates may start. */
  int *ready_at, *ready;
} tables;

/* The host thread that updates parameters while the device computes the
 * rest of the backward pass (overlap; DLRT_PARAM_OVERLAP=0 turns it off:
 * each update then runs at its update node). */
typedef struct {
  pthread_t thread;
  int started, stop;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  int *queue, head, tail; /* indices into p, in order (a ring of n) */
  int failed;             /* an update failed: its message in `error` */
  char error[512];
} updater;

struct dlrt__pstream {
  int ahead;
  int n;
  streamed *p;
  int *of_id;          /* tensor id -> index in p, or -1 */
  char *is_state;      /* tensor id -> 1 for the streamed parameters' optimizer state */
  tables t[2];         /* DLRT_RUN_FORWARD, DLRT_RUN_TRAIN */
  const tables *now;   /* the running schedule's */
  dlrt_stream_t *copy;
  dlrt_event_t *mark;
  dlrt_param_offload_stats st;
  uint64_t resident;   /* parameter bytes on the device now */
  dlrt_exec_t *e;      /* for the host thread: steps, lr, grad_scale (fixed during a run) */
  int overlap;
  updater up;
};

/* ---------------------------------------------------------------- tables */

static void tables_free(tables *t) {
  free(t->use_at), free(t->use), free(t->done_at), free(t->done), free(t->pos_at), free(t->pos);
  free(t->ready_at), free(t->ready);
  memset(t, 0, sizeof *t);
}

static int is_update(const dlrt__node *n) { return n->phase == DLRT__PHASE_UPDATE; }

/* The streamed parameter node n reads as input j, or -1. */
static int param_of(const dlrt__pstream *ps, const dlrt__node *n, int j) {
  return is_update(n) ? -1 : ps->of_id[n->in[j]->owner->id];
}

/* The same, counting a parameter once per node: -1 also where an earlier
 * input of the node is the same parameter (x * x reads it once). */
static int new_param_of(const dlrt__pstream *ps, const dlrt__node *n, int j) {
  int i = param_of(ps, n, j);
  for (int j2 = 0; j2 < j && i >= 0; j2++)
    if (param_of(ps, n, j2) == i) i = -1;
  return i;
}

static int tables_make(dlrt__pstream *ps, const dlrt_graph_t *g, const dlrt__schedule *s,
                       tables *t) {
  tables_free(t);
  int np = ps->n, n = s->n;
  int *last = malloc(sizeof(int) * (size_t)(np ? np : 1));
  t->use_at = calloc((size_t)n + 1, sizeof(int));
  t->done_at = calloc((size_t)n + 1, sizeof(int));
  t->pos_at = calloc((size_t)np + 1, sizeof(int));
  if (!last || !t->use_at || !t->done_at || !t->pos_at) goto oom;
  /* Counts first: uses per position and per parameter, and where each
   * gradient is last touched before its update. */
  for (int i = 0; i < np; i++) last[i] = -1;
  int uses = 0;
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    for (int j = 0; j < nd->n_in; j++) {
      int i = new_param_of(ps, nd, j);
      if (i < 0) continue;
      t->use_at[k + 1]++, t->pos_at[i + 1]++, uses++;
    }
    if (is_update(nd)) continue;
    for (int i = 0; i < np; i++) {
      int gid = ps->p[i].grad;
      if (gid < 0) continue;
      for (int j = 0; j < nd->n_in + nd->n_out; j++) {
        const dlrt_tensor_t *x = j < nd->n_in ? nd->in[j] : nd->out[j - nd->n_in];
        if (x->owner->id == gid) last[i] = k;
      }
    }
  }
  for (int i = 0; i < np; i++)
    if (last[i] >= 0) t->done_at[last[i] + 1]++;
  for (int k = 0; k < n; k++) t->use_at[k + 1] += t->use_at[k], t->done_at[k + 1] += t->done_at[k];
  for (int i = 0; i < np; i++) t->pos_at[i + 1] += t->pos_at[i];
  t->use = malloc(sizeof(int) * (size_t)(uses ? uses : 1));
  t->pos = malloc(sizeof(int) * (size_t)(uses ? uses : 1));
  t->done = malloc(sizeof(int) * (size_t)(np ? np : 1));
  int *fill_use = calloc((size_t)n + 1, sizeof(int)), *fill_pos = calloc((size_t)np + 1, sizeof(int));
  int *fill_done = calloc((size_t)n + 1, sizeof(int));
  if (!t->use || !t->pos || !t->done || !fill_use || !fill_pos || !fill_done) {
    free(fill_use), free(fill_pos), free(fill_done);
    goto oom;
  }
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    for (int j = 0; j < nd->n_in; j++) {
      int i = new_param_of(ps, nd, j);
      if (i < 0) continue;
      t->use[t->use_at[k] + fill_use[k]++] = i;
      t->pos[t->pos_at[i] + fill_pos[i]++] = k;
    }
  }
  for (int i = 0; i < np; i++)
    if (last[i] >= 0) t->done[t->done_at[last[i]] + fill_done[last[i]]++] = i;
  /* Ready: after both the gradient's completion and the parameter's last
   * use (a later fetch would read a master the update is writing). */
  t->ready_at = calloc((size_t)n + 1, sizeof(int));
  t->ready = malloc(sizeof(int) * (size_t)(np ? np : 1));
  if (!t->ready_at || !t->ready) {
    free(fill_use), free(fill_pos), free(fill_done);
    goto oom;
  }
  for (int i = 0; i < np; i++) {
    int uses_end = t->pos_at[i + 1];
    int at = uses_end > t->pos_at[i] ? t->pos[uses_end - 1] : -1;
    last[i] = last[i] < 0 ? -1 : last[i] > at ? last[i] : at;
    if (last[i] >= 0) t->ready_at[last[i] + 1]++;
  }
  for (int k = 0; k < n; k++) t->ready_at[k + 1] += t->ready_at[k];
  memset(fill_done, 0, sizeof(int) * ((size_t)n + 1));
  for (int i = 0; i < np; i++)
    if (last[i] >= 0) t->ready[t->ready_at[last[i]] + fill_done[last[i]]++] = i;
  free(fill_use), free(fill_pos), free(fill_done), free(last);
  t->order = s->order;
  t->n = n;
  return DLRT_OK;
oom:
  free(last);
  tables_free(t);
  return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

/* The position of parameter i's next use after k in the running schedule,
 * or INT32_MAX. */
static int next_use(const tables *t, int i, int k) {
  for (int a = t->pos_at[i]; a < t->pos_at[i + 1]; a++)
    if (t->pos[a] > k) return t->pos[a];
  return INT32_MAX;
}

/* ---------------------------------------------------------------- moves */

/* Queues parameter i's copy to the device on the copy stream, after what
 * the compute stream has queued (the memory may be a block it just freed). */
static int fetch(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  streamed *p = &ps->p[i];
  if (e->bufs[p->id]) return DLRT_OK;
  int rc = dlrt__buffer_alloc_ex(e->dev, p->bytes, e->stream, 1, &e->bufs[p->id]);
  if (rc < 0) {
    e->bufs[p->id] = NULL;
    return rc;
  }
  if ((rc = dlrt_event_record(ps->mark, e->stream)) < 0 ||
      (rc = dlrt_stream_wait_event(ps->copy, ps->mark)) < 0 ||
      (rc = dlrt_copy_h2d(e->bufs[p->id], 0, p->host, p->bytes, ps->copy)) < 0 ||
      (rc = dlrt_event_record(p->fetched, ps->copy)) < 0 ||
      (rc = dlrt_buffer_record_stream(e->bufs[p->id], ps->copy)) < 0)
    return rc;
  p->in_flight = 1;
  ps->resident += p->bytes;
  if (ps->resident > ps->st.peak_param_bytes) ps->st.peak_param_bytes = ps->resident;
  ps->st.fetched_bytes += p->bytes;
  ps->st.fetches++;
  return DLRT_OK;
}

/* Frees parameter i's device copy (stream-ordered: after the kernels
 * queued that read it). */
static void release(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  streamed *p = &ps->p[i];
  if (!e->bufs[p->id]) return;
  dlrt_buffer_free(e->bufs[p->id]);
  e->bufs[p->id] = NULL;
  p->in_flight = 0;
  ps->resident -= p->bytes;
}

/* The gradient of parameter i is complete: to the host on the copy stream,
 * after the kernels that made it; its device buffer goes. */
static int gradient_out(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  streamed *p = &ps->p[i];
  dlrt_buffer_t *b = e->bufs[p->grad];
  if (!b) return DLRT_OK;
  int rc;
  if ((rc = dlrt_event_record(ps->mark, e->stream)) < 0 ||
      (rc = dlrt_stream_wait_event(ps->copy, ps->mark)) < 0 ||
      (rc = dlrt_copy_d2h(p->host_grad, b, 0, p->bytes, ps->copy)) < 0 ||
      (rc = dlrt_event_record(p->grad_done, ps->copy)) < 0 ||
      (rc = dlrt_buffer_record_stream(b, ps->copy)) < 0)
    return rc;
  dlrt_buffer_free(b);
  e->bufs[p->grad] = NULL;
  p->grad_on_host = 1;
  ps->st.gradient_bytes += p->bytes;
  return DLRT_OK;
}

/* The optimizer's update of parameter i on the host, its gradient's host
 * copy there (on the host thread or the executor's). */
static int apply_update(dlrt__pstream *ps, int i) {
  streamed *p = &ps->p[i];
  dlrt_exec_t *e = ps->e;
  dlrt_optimizer now = e->g->opt;
  now.lr = e->lr;
  const dlrt_tensor_t *param = e->g->tensors[p->id];
  return dlrt_host_optimizer_update(&now, e->steps, p->host, p->host_state[0],
                                    p->host_state[1], p->host_grad, param->numel,
                                    !param->no_decay, e->grads.grad_scale);
}

static void *updater_main(void *arg) {
  dlrt__pstream *ps = arg;
  updater *u = &ps->up;
  pthread_mutex_lock(&u->lock);
  for (;;) {
    while (!u->stop && u->head == u->tail) pthread_cond_wait(&u->work, &u->lock);
    if (u->head == u->tail) break; /* stopping, nothing left */
    int i = u->queue[u->head % ps->n];
    pthread_mutex_unlock(&u->lock);
    double t0 = dlrt__now_ms();
    int rc = dlrt_event_synchronize(ps->p[i].grad_done);
    double t1 = dlrt__now_ms();
    if (rc == DLRT_OK) rc = apply_update(ps, i);
    double t2 = dlrt__now_ms();
    pthread_mutex_lock(&u->lock);
    ps->st.wait_ms += t1 - t0, ps->st.update_ms += t2 - t1;
    if (rc < 0 && !u->failed) {
      u->failed = 1;
      snprintf(u->error, sizeof u->error, "%s", dlrt_last_error());
    }
    ps->p[i].updated = 1;
    u->head++;
    pthread_cond_broadcast(&u->done);
  }
  pthread_mutex_unlock(&u->lock);
  return NULL;
}

/* Hands parameter i's update to the host thread (its gradient's copy is
 * queued). */
static int enqueue_update(dlrt__pstream *ps, int i) {
  updater *u = &ps->up;
  if (!u->started) {
    if (pthread_create(&u->thread, NULL, updater_main, ps) != 0)
      return dlrt__set_error(DLRT_ERR_OOM, "parameter streaming: cannot start its host "
                             "update thread");
    u->started = 1;
  }
  pthread_mutex_lock(&u->lock);
  ps->p[i].queued = 1;
  ps->p[i].updated = 0;
  u->queue[u->tail++ % ps->n] = i; /* at most n queued: one update each a run */
  pthread_cond_signal(&u->work);
  pthread_mutex_unlock(&u->lock);
  return DLRT_OK;
}

/* The update of parameter i on the host, from its gradient's host copy:
 * waited for where the host thread has it, else made here. */
static int host_update(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  streamed *p = &ps->p[i];
  int rc = DLRT_OK;
  if (p->queued) {
    updater *u = &ps->up;
    double t0 = dlrt__now_ms();
    pthread_mutex_lock(&u->lock);
    while (!p->updated) pthread_cond_wait(&u->done, &u->lock);
    int failed = u->failed;
    pthread_mutex_unlock(&u->lock);
    ps->st.join_ms += dlrt__now_ms() - t0;
    p->queued = p->grad_on_host = 0;
    ps->st.updates++;
    release(e, i); /* stale */
    if (failed) return dlrt__set_error(DLRT_ERR_STATE, "a host update failed: %s", u->error);
    return DLRT_OK;
  }
  double t0 = dlrt__now_ms();
  if (p->grad_on_host) {
    rc = dlrt_event_synchronize(p->grad_done);
  } else if (p->grad >= 0 && e->bufs[p->grad]) {
    /* Its gradient was never complete before the update (no node touched
     * it after its making): copied now. */
    if ((rc = dlrt_copy_d2h(p->host_grad, e->bufs[p->grad], 0, p->bytes, e->stream)) == DLRT_OK)
      rc = dlrt_stream_synchronize(e->stream);
    ps->st.gradient_bytes += p->bytes;
  } else {
    memset(p->host_grad, 0, p->bytes);
  }
  p->grad_on_host = 0;
  ps->st.wait_ms += dlrt__now_ms() - t0;
  if (rc < 0) return rc;
  /* The device copy is stale after the update: the next use fetches it. */
  release(e, i);
  t0 = dlrt__now_ms();
  rc = apply_update(ps, i);
  ps->st.update_ms += dlrt__now_ms() - t0;
  ps->st.updates++;
  return rc;
}

/* ---------------------------------------------------------------- residency */

static const tables *tables_for(dlrt_exec_t *e, const dlrt__schedule *s) {
  dlrt__pstream *ps = e->pstream;
  int m = s == &e->plan.plans[DLRT_RUN_TRAIN] ? 1 : 0;
  tables *t = &ps->t[m];
  if (t->order != s->order || t->n != s->n) {
    if (tables_make(ps, e->g, s, t) < 0) return NULL;
  }
  return t;
}

static void stream_begin_run(dlrt_exec_t *e, const dlrt__schedule *s) {
  dlrt__pstream *ps = e->pstream;
  dlrt__residency_plain.begin_run(e, s);
  ps->now = tables_for(e, s);
  /* Copies left from the last run that this one needs only later go. */
  for (int i = 0; ps->now && i < ps->n; i++)
    if (next_use(ps->now, i, -1) > ps->ahead) release(e, i);
}

static int stream_begin_node(dlrt_exec_t *e, const dlrt__schedule *s, int k, int *done) {
  dlrt__pstream *ps = e->pstream;
  const dlrt__node *n = e->g->nodes[s->order[k]];
  *done = 0;
  if (!ps->now) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory (parameter streaming)");
  if (is_update(n) && ps->of_id[n->in[0]->owner->id] >= 0) {
    *done = 1;
    return host_update(e, ps->of_id[n->in[0]->owner->id]);
  }
  const tables *t = ps->now;
  int rc = DLRT_OK;
  /* This node's parameters, then those of the next `ahead` nodes. */
  for (int a = k; a <= k + ps->ahead && a < t->n && rc == DLRT_OK; a++)
    for (int u = t->use_at[a]; u < t->use_at[a + 1] && rc == DLRT_OK; u++) rc = fetch(e, t->use[u]);
  for (int u = t->use_at[k]; u < t->use_at[k + 1] && rc == DLRT_OK; u++) {
    streamed *p = &ps->p[t->use[u]];
    if (p->in_flight) {
      rc = dlrt_stream_wait_event(e->stream, p->fetched);
      p->in_flight = 0;
    }
  }
  return rc < 0 ? rc : dlrt__residency_plain.begin_node(e, s, k, done);
}

static int stream_end_node(dlrt_exec_t *e, const dlrt__schedule *s, int k) {
  dlrt__pstream *ps = e->pstream;
  int rc = dlrt__residency_plain.end_node(e, s, k);
  const tables *t = ps->now;
  if (!t) return rc;
  for (int u = t->done_at[k]; u < t->done_at[k + 1] && rc == DLRT_OK; u++)
    rc = gradient_out(e, t->done[u]);
  /* Updates that may start now run on the host thread meanwhile (not in a
   * run whose updates the executor skips: accumulation, overflow). */
  for (int u = t->ready_at[k]; ps->overlap && u < t->ready_at[k + 1] && rc == DLRT_OK; u++)
    if (ps->p[t->ready[u]].grad_on_host) rc = enqueue_update(ps, t->ready[u]);
  for (int u = t->use_at[k]; u < t->use_at[k + 1]; u++)
    if (next_use(t, t->use[u], k) > k + ps->ahead) release(e, t->use[u]);
  return rc;
}

static int stream_begin_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                              const char **local) {
  (void)e, (void)s, (void)b, (void)local;
  return dlrt__set_error(DLRT_ERR_STATE, "parameter streaming does not run chunked "
                         "convolution blocks: checkpoint without them (a GPT's blocks, "
                         "DLRT_CHECKPOINT_MARKS) or stream no parameters");
}

static int stream_chunk_in(dlrt_exec_t *e, int64_t b0, int64_t nb) {
  return dlrt__residency_plain.chunk_in(e, b0, nb);
}

static int stream_chunk_outputs(dlrt_exec_t *e, const dlrt__schedule *s, int k,
                                const dlrt__chunk *c) {
  return dlrt__residency_plain.chunk_outputs(e, s, k, c);
}

static int stream_chunk_done(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                             int k, const dlrt__chunk *c) {
  return dlrt__residency_plain.chunk_done(e, s, b, k, c);
}

static int stream_end_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b) {
  return dlrt__residency_plain.end_block(e, s, b);
}

static void stream_discard(dlrt_exec_t *e, int id) {
  dlrt__pstream *ps = e->pstream;
  if (ps->of_id[id] >= 0 || ps->is_state[id]) return; /* they live on the host */
  dlrt__residency_plain.discard(e, id);
}

const dlrt__residency dlrt__residency_params = {
    .begin_run = stream_begin_run,
    .begin_node = stream_begin_node,
    .end_node = stream_end_node,
    .begin_block = stream_begin_block,
    .chunk_in = stream_chunk_in,
    .chunk_outputs = stream_chunk_outputs,
    .chunk_done = stream_chunk_done,
    .end_block = stream_end_block,
    .discard = stream_discard,
};

/* ---------------------------------------------------------------- setup */

void dlrt__pstream_destroy(dlrt_exec_t *e) {
  dlrt__pstream *ps = e->pstream;
  if (!ps) return;
  if (ps->up.started) {
    pthread_mutex_lock(&ps->up.lock);
    ps->up.stop = 1;
    pthread_cond_signal(&ps->up.work);
    pthread_mutex_unlock(&ps->up.lock);
    pthread_join(ps->up.thread, NULL);
  }
  pthread_mutex_destroy(&ps->up.lock);
  pthread_cond_destroy(&ps->up.work), pthread_cond_destroy(&ps->up.done);
  free(ps->up.queue);
  if (ps->copy) dlrt_stream_synchronize(ps->copy);
  if (e->stream) dlrt_stream_synchronize(e->stream);
  for (int i = 0; i < ps->n; i++) {
    streamed *p = &ps->p[i];
    release(e, i);
    dlrt_host_free(p->host), dlrt_host_free(p->host_grad);
    for (int j = 0; j < p->n_state; j++) dlrt_host_free(p->host_state[j]);
    dlrt_event_destroy(p->fetched), dlrt_event_destroy(p->grad_done);
  }
  tables_free(&ps->t[0]), tables_free(&ps->t[1]);
  dlrt_event_destroy(ps->mark);
  dlrt_stream_destroy(ps->copy);
  free(ps->p), free(ps->of_id), free(ps->is_state);
  free(ps);
  e->pstream = NULL;
}

/* What streaming does not do (yet): each is an error naming it. */
int dlrt__pstream_check(const dlrt_exec_t *e, int gradients_only) {
  const char *what = e->spill.pool ? "spilling (dlrt_exec_set_spill; the device budget is the "
                                     "allocator's limit, dlrt_mem_set_limit)"
                     : e->grads.accum_steps > 1 ? "gradient accumulation"
                     : e->grads.clip_norm > 0   ? "gradient clipping"
                     : e->grads.scaler.enabled  ? "loss scaling (fp16)"
                     : gradients_only           ? "DLRT_RUN_GRADIENTS (data parallelism)"
                                                : NULL;
  if (!what) return DLRT_OK;
  return dlrt__set_error(DLRT_ERR_STATE, "parameter streaming (dlrt_exec_offload_params, "
                         "--offload params) does not go with %s: turn one of them off", what);
}

/* Host memory for a streamed tensor: its values (from the device copy,
 * when it has one, else its initial values come later: materialize). */
static int to_host(dlrt_exec_t *e, int id, float **host) {
  size_t bytes = dlrt__tensor_bytes(e->g->tensors[id]);
  int rc = dlrt__host_alloc_staging(e->dev, bytes ? bytes : 4, (void **)host);
  if (rc < 0) return rc;
  if (!e->bufs[id]) {
    memset(*host, 0, bytes);
    return DLRT_OK;
  }
  if ((rc = dlrt_copy_d2h(*host, e->bufs[id], 0, bytes, e->stream)) < 0 ||
      (rc = dlrt_stream_synchronize(e->stream)) < 0)
    return rc;
  dlrt_buffer_free(e->bufs[id]);
  e->bufs[id] = NULL;
  return DLRT_OK;
}

int dlrt_exec_offload_params(dlrt_exec_t *e, int ahead) {
  DLRT__CHECK_ARG(e && ahead >= 1, "dlrt_exec_offload_params: executor is NULL or look-ahead "
                  "%d (give 1 or more nodes)", ahead);
  if (e->pstream) {
    e->pstream->ahead = ahead;
    return DLRT_OK;
  }
  dlrt_graph_t *g = e->g;
  if (!g->optimized)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_offload_params: the graph has no "
                           "optimizer updates (dlrt_graph_optimize): nothing would update the "
                           "parameters on the host");
  int rc = dlrt__pstream_check(e, 0);
  if (rc < 0) return rc;
  dlrt__pstream *ps = calloc(1, sizeof *ps);
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  if (!ps || !(ps->of_id = malloc(nt * sizeof(int))) || !(ps->is_state = calloc(nt, 1)) ||
      !(ps->p = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *ps->p))) {
    if (ps) free(ps->of_id), free(ps->is_state);
    free(ps);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  e->pstream = ps;
  ps->ahead = ahead;
  ps->e = e;
  const char *overlap = getenv("DLRT_PARAM_OVERLAP");
  ps->overlap = !(overlap && strcmp(overlap, "0") == 0);
  pthread_mutex_init(&ps->up.lock, NULL);
  pthread_cond_init(&ps->up.work, NULL), pthread_cond_init(&ps->up.done, NULL);
  for (size_t i = 0; i < nt; i++) ps->of_id[i] = -1;
  if ((rc = dlrt_stream_synchronize(e->stream)) < 0 ||
      (rc = dlrt_stream_create(e->dev, &ps->copy)) < 0 ||
      (rc = dlrt_event_create(e->dev, &ps->mark)) < 0)
    goto fail;
  for (int k = 0; k < g->n_nodes && rc == DLRT_OK; k++) {
    const dlrt__node *n = g->nodes[k];
    if (!is_update(n) || (n->op != DLRT__OP_SGD && n->op != DLRT__OP_ADAM)) continue;
    const dlrt_tensor_t *param = n->in[0];
    if (param->owner != param || param->dtype != DLRT_F32 || ps->of_id[param->id] >= 0) continue;
    streamed *p = &ps->p[ps->n];
    p->id = param->id;
    p->n_state = n->op == DLRT__OP_SGD ? 1 : 2;
    p->grad = n->in[p->n_state + 1]->owner->id;
    p->update = n;
    p->bytes = dlrt__tensor_bytes(param);
    for (int j = 0; j < p->n_state; j++) p->state[j] = n->in[1 + j]->owner->id;
    ps->of_id[p->id] = ps->n++;
    if ((rc = to_host(e, p->id, &p->host)) < 0) break;
    for (int j = 0; j < p->n_state && rc == DLRT_OK; j++) {
      ps->is_state[p->state[j]] = 1;
      rc = to_host(e, p->state[j], &p->host_state[j]);
    }
    if (rc == DLRT_OK) rc = dlrt__host_alloc_staging(e->dev, p->bytes ? p->bytes : 4,
                                                     (void **)&p->host_grad);
    if (rc == DLRT_OK) rc = dlrt_event_create(e->dev, &p->fetched);
    if (rc == DLRT_OK) rc = dlrt_event_create(e->dev, &p->grad_done);
  }
  if (rc == DLRT_OK && !(ps->up.queue = malloc(sizeof(int) * (size_t)(ps->n ? ps->n : 1))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK) return dlrt_mem_reset_peak(e->dev);
fail:
  /* The values already moved go back to the device: the executor is as it was. */
  for (int i = 0; i < ps->n; i++) {
    streamed *p = &ps->p[i];
    int ids[3] = {p->id, p->state[0], p->state[1]};
    float *hosts[3] = {p->host, p->host_state[0], p->host_state[1]};
    for (int j = 0; j < 1 + p->n_state; j++) {
      size_t bytes = dlrt__tensor_bytes(g->tensors[ids[j]]);
      if (!hosts[j] || e->bufs[ids[j]] ||
          dlrt_buffer_alloc(e->dev, bytes ? bytes : 4, e->stream, &e->bufs[ids[j]]) < 0 ||
          dlrt_copy_h2d(e->bufs[ids[j]], 0, hosts[j], bytes, e->stream) < 0)
        continue;
    }
  }
  dlrt_stream_synchronize(e->stream);
  {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlrt_last_error());
    dlrt__pstream_destroy(e);
    return dlrt__set_error(rc, "%s", msg);
  }
}

int dlrt__pstream_init_host(dlrt_exec_t *e, int id, float **host) {
  dlrt__pstream *ps = e->pstream;
  *host = NULL;
  if (!ps) return 0;
  int i = ps->of_id[id];
  if (i >= 0) {
    *host = ps->p[i].host;
    return 1;
  }
  if (!ps->is_state[id]) return 0;
  for (int k = 0; k < ps->n; k++)
    for (int j = 0; j < ps->p[k].n_state; j++)
      if (ps->p[k].state[j] == id) *host = ps->p[k].host_state[j];
  return 1;
}

int dlrt__pstream_io(dlrt_exec_t *e, dlrt_tensor_t *t, void *host, size_t bytes, int write,
                     int *handled) {
  float *mine;
  *handled = 0;
  if (!e->pstream || t->id < 0 || t->id >= e->g->n_tensors || e->g->tensors[t->id] != t ||
      !dlrt__pstream_init_host(e, t->owner->id, &mine))
    return DLRT_OK; /* check_io judges it */
  *handled = 1;
  if (t != t->owner || bytes != dlrt__tensor_bytes(t))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s is streamed from the host "
                           "(dlrt_exec_offload_params): read or write all of its %zu bytes, "
                           "not %zu (and not a view of it)", write ? "dlrt_exec_write"
                           : "dlrt_exec_read", t->name, dlrt__tensor_bytes(t->owner), bytes);
  /* Queued fetches read the master; queued kernels may still use its copy. */
  int rc = dlrt_stream_synchronize(e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->pstream->copy);
  if (rc < 0) return rc;
  if (write) {
    memcpy(mine, host, bytes);
    int i = e->pstream->of_id[t->id];
    if (i >= 0) release(e, i); /* stale */
  } else {
    memcpy(host, mine, bytes);
  }
  return DLRT_OK;
}

int dlrt_exec_param_offload_stats(dlrt_exec_t *e, dlrt_param_offload_stats *out) {
  DLRT__CHECK_ARG(e && out, "dlrt_exec_param_offload_stats: executor or out is NULL");
  memset(out, 0, sizeof *out);
  if (!e->pstream) return DLRT_OK;
  int rc = dlrt_stream_synchronize(e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->pstream->copy);
  *out = e->pstream->st;
  out->params_streamed = e->pstream->n;
  out->ahead = e->pstream->ahead;
  return rc;
}
