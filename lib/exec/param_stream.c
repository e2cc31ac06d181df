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
#include "exec/param_stream_internal.h"
#include "exec/residency.h"
#include "mem/buffer.h"
#include "util/clock.h"
#include "util/status.h"

/* ---------------------------------------------------------------- tables */

static void tables_free(tables *t) {
  free(t->use_at), free(t->use), free(t->done_at), free(t->done), free(t->pos_at), free(t->pos);
  free(t->ready_at), free(t->ready);
  memset(t, 0, sizeof *t);
}

static int is_update(const dlrt__node *n) { return n->phase == DLRT__PHASE_UPDATE; }

/* Whether node n is the forward cast of a streamed parameter into its
 * 16-bit copy: the host makes that copy, the node does not run. */
static int is_host_cast(const dlrt__pstream *ps, const dlrt__node *n) {
  if (n->op != DLRT__OP_CAST || n->phase != DLRT__PHASE_FORWARD) return 0;
  int i = ps->param_of[n->in[0]->owner->id];
  return i >= 0 && ps->p[i].unit[1] >= 0 && ps->u[ps->p[i].unit[1]].id == n->out[0]->id;
}

/* The streamed unit node n reads as input j, or -1. */
static int unit_of(const dlrt__pstream *ps, const dlrt__node *n, int j) {
  return is_update(n) || is_host_cast(ps, n) ? -1 : ps->unit_of[n->in[j]->owner->id];
}

/* The same, counting a unit once per node: -1 also where an earlier input
 * of the node is the same unit (x * x reads it once). */
static int new_unit_of(const dlrt__pstream *ps, const dlrt__node *n, int j) {
  int i = unit_of(ps, n, j);
  for (int j2 = 0; j2 < j && i >= 0; j2++)
    if (unit_of(ps, n, j2) == i) i = -1;
  return i;
}

static int tables_make(dlrt__pstream *ps, const dlrt_graph_t *g, const dlrt__schedule *s,
                       tables *t) {
  tables_free(t);
  int np = ps->n, nu = ps->n_units, n = s->n;
  int *last = malloc(sizeof(int) * (size_t)(np ? np : 1));
  t->use_at = calloc((size_t)n + 1, sizeof(int));
  t->done_at = calloc((size_t)n + 1, sizeof(int));
  t->pos_at = calloc((size_t)nu + 1, sizeof(int));
  if (!last || !t->use_at || !t->done_at || !t->pos_at) goto oom;
  /* Counts first: uses per position and per unit, and where each
   * gradient is last touched before its update. */
  for (int i = 0; i < np; i++) last[i] = -1;
  int uses = 0;
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    for (int j = 0; j < nd->n_in; j++) {
      int i = new_unit_of(ps, nd, j);
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
  for (int i = 0; i < nu; i++) t->pos_at[i + 1] += t->pos_at[i];
  t->use = malloc(sizeof(int) * (size_t)(uses ? uses : 1));
  t->pos = malloc(sizeof(int) * (size_t)(uses ? uses : 1));
  t->done = malloc(sizeof(int) * (size_t)(np ? np : 1));
  int *fill_use = calloc((size_t)n + 1, sizeof(int)), *fill_pos = calloc((size_t)nu + 1, sizeof(int));
  int *fill_done = calloc((size_t)n + 1, sizeof(int));
  if (!t->use || !t->pos || !t->done || !fill_use || !fill_pos || !fill_done) {
    free(fill_use), free(fill_pos), free(fill_done);
    goto oom;
  }
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    for (int j = 0; j < nd->n_in; j++) {
      int i = new_unit_of(ps, nd, j);
      if (i < 0) continue;
      t->use[t->use_at[k] + fill_use[k]++] = i;
      t->pos[t->pos_at[i] + fill_pos[i]++] = k;
    }
  }
  for (int i = 0; i < np; i++)
    if (last[i] >= 0) t->done[t->done_at[last[i]] + fill_done[last[i]]++] = i;
  /* Ready: after both the gradient's completion and the last use of each
   * of the parameter's units (a later fetch would read a host copy the
   * update is writing). */
  t->ready_at = calloc((size_t)n + 1, sizeof(int));
  t->ready = malloc(sizeof(int) * (size_t)(np ? np : 1));
  if (!t->ready_at || !t->ready) {
    free(fill_use), free(fill_pos), free(fill_done);
    goto oom;
  }
  for (int i = 0; i < np; i++) {
    int at = -1;
    for (int w = 0; w < 2; w++) {
      int ui = ps->p[i].unit[w];
      if (ui < 0) continue;
      int uses_end = t->pos_at[ui + 1];
      if (uses_end > t->pos_at[ui] && t->pos[uses_end - 1] > at) at = t->pos[uses_end - 1];
    }
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

int dlrt__pstream_next_use(const tables *t, int i, int k) {
  for (int a = t->pos_at[i]; a < t->pos_at[i + 1]; a++)
    if (t->pos[a] > k) return t->pos[a];
  return INT32_MAX;
}

/* ---------------------------------------------------------------- moves */

/* A unit's device copy that the plain policy freed (a 16-bit copy's
 * planned life ended) or handed to an output (in place) is no longer
 * counted. */
static void forget_if_gone(dlrt_exec_t *e, unit *x) {
  if (!x->counted || e->bufs[x->id]) return;
  x->counted = x->in_flight = 0;
  e->pstream->resident -= x->bytes;
}

/* Queues unit i's copy to the device on the copy stream, after what the
 * compute stream has queued (the memory may be a block it just freed). */
static int fetch(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  unit *x = &ps->u[i];
  forget_if_gone(e, x);
  if (e->bufs[x->id]) return DLRT_OK;
  int rc = dlrt__buffer_alloc_ex(e->dev, x->bytes, e->stream, 1, &e->bufs[x->id]);
  if (rc < 0) {
    e->bufs[x->id] = NULL;
    return rc;
  }
  if ((rc = dlrt_event_record(ps->mark, e->stream)) < 0 ||
      (rc = dlrt_stream_wait_event(ps->copy, ps->mark)) < 0 ||
      (rc = x->host ? dlrt_copy_h2d(e->bufs[x->id], 0, x->host, x->bytes, ps->copy)
                    : dlrt__pmaster_fetch(ps, x->param, e->bufs[x->id])) < 0 ||
      (rc = dlrt_event_record(x->fetched, ps->copy)) < 0 ||
      (rc = dlrt_buffer_record_stream(e->bufs[x->id], ps->copy)) < 0)
    return rc;
  x->in_flight = x->counted = x->recorded = 1;
  ps->resident += x->bytes;
  if (ps->resident > ps->st.peak_param_bytes) ps->st.peak_param_bytes = ps->resident;
  ps->st.fetched_bytes += x->bytes;
  ps->st.fetches++;
  return DLRT_OK;
}

/* Frees unit i's device copy (stream-ordered: after the kernels queued
 * that read it). */
static void release(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  unit *x = &ps->u[i];
  forget_if_gone(e, x);
  if (!e->bufs[x->id]) return;
  dlrt_buffer_free(e->bufs[x->id]);
  e->bufs[x->id] = NULL;
  x->in_flight = x->counted = 0;
  ps->resident -= x->bytes;
}

/* Parameter i's units, stale after its update: the next uses fetch them. */
void dlrt__pstream_release_param(dlrt_exec_t *e, int i) {
  for (int w = 0; w < 2; w++)
    if (e->pstream->p[i].unit[w] >= 0) release(e, e->pstream->p[i].unit[w]);
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

/* The host's copy rate, for fetches without a link model (the cpu
 * backend's copies are memcpys): one copy of 16 MiB, timed. */
static double memcpy_ms_per_byte(void) {
  size_t bytes = (size_t)16 << 20;
  char *a = malloc(bytes), *b = malloc(bytes);
  double ms = 0;
  if (a && b) {
    memset(a, 1, bytes), memset(b, 0, bytes);
    double t0 = dlrt__now_ms();
    memcpy(b, a, bytes);
    ms = dlrt__now_ms() - t0 + (b[bytes - 1] == 2); /* b read: the copy is not elided */
  }
  free(a), free(b);
  return ms > 0 ? ms / (double)bytes : 1e-7;
}

/* After the profiling run: the look-ahead from its node times and the
 * link (param_ahead.c). A unit is fetched at a use whose previous use in
 * the run is more than the look-ahead before it (or that has none). */
enum { MAX_AHEAD = 16 };
static void choose_ahead(dlrt_exec_t *e) {
  dlrt__pstream *ps = e->pstream;
  const tables *t = &ps->t[1];
  int n = t->n;
  ps->profiling = 0;
  double *fetch_ms = calloc((size_t)MAX_AHEAD * (size_t)(n ? n : 1), sizeof(double));
  double *unit_ms = calloc((size_t)ps->n_units + 1, sizeof(double));
  uint64_t *reach = calloc(MAX_AHEAD, sizeof(uint64_t));
  uint64_t *at = calloc((size_t)(n ? n : 1), sizeof(uint64_t));
  if (!fetch_ms || !unit_ms || !reach || !at || !t->order) goto done;
  double rate = dlrt_link_seconds(e->dev, 1 << 20) > 0 ? 0 : memcpy_ms_per_byte();
  for (int i = 0; i < ps->n_units; i++)
    unit_ms[i] = rate > 0 ? rate * (double)ps->u[i].bytes
                          : dlrt_link_seconds(e->dev, ps->u[i].bytes) * 1e3;
  for (int k = 0; k < n; k++)
    for (int q = t->use_at[k]; q < t->use_at[k + 1]; q++) {
      int i = t->use[q], prev = -1;
      for (int a = t->pos_at[i]; a < t->pos_at[i + 1] && t->pos[a] < k; a++) prev = t->pos[a];
      at[k] += ps->u[i].bytes;
      for (int a = 1; a <= MAX_AHEAD; a++)
        if (prev < 0 || prev < k - a)
          fetch_ms[(size_t)(a - 1) * (size_t)n + (size_t)k] += unit_ms[i];
    }
  /* In reach with look-ahead a: the bytes read by a + 1 positions in a row, at most. */
  for (int a = 1; a <= MAX_AHEAD; a++)
    for (int k = 0; k < n; k++) {
      uint64_t sum = 0;
      for (int j = k; j <= k + a && j < n; j++) sum += at[j];
      if (sum > reach[a - 1]) reach[a - 1] = sum;
    }
  /* A quarter of the device's budget for the parameters in reach. */
  uint64_t cap = dlrt_mem_get_limit(e->dev) / 4;
  int chosen = dlrt__choose_ahead(n, ps->node_ms, fetch_ms, reach, cap, MAX_AHEAD,
                                  &ps->predicted_ms);
  if (chosen >= 1) ps->ahead = chosen;
done:
  free(fetch_ms), free(unit_ms), free(reach), free(at);
}

static void stream_begin_run(dlrt_exec_t *e, const dlrt__schedule *s) {
  dlrt__pstream *ps = e->pstream;
  dlrt__residency_plain.begin_run(e, s);
  /* The last run's jobs are done (a skipped update's too) before this one
   * changes what they read. */
  dlrt__pstream_join_all(e);
  ps->now = tables_for(e, s);
  const dlrt__exec_grads *gr = &e->grads;
  run_kind *r = &ps->run;
  r->train = s == &e->plan.plans[DLRT_RUN_TRAIN];
  r->accum = gr->accum_steps > 1 ? gr->accum_steps : 1;
  r->micro = gr->micro;
  r->last = r->micro + 1 >= r->accum;
  r->needs_all = gr->clip_norm > 0 || gr->scaler.enabled;
  /* exec_grads.c's scale of an update without clipping or loss scaling. */
  r->early_scale = r->accum > 1 ? 1.0f / (float)r->accum : 1.0f;
  /* A master on disk given its initial values last: written before any read. */
  if (dlrt__pstream_flush_init(ps) < 0) ps->now = NULL;
  for (int i = 0; i < ps->n; i++) {
    streamed *p = &ps->p[i];
    p->queued = p->finished = p->arrived = p->applied = p->grad_on_host = 0;
    /* Accumulation's running sums live beside the masters (in host memory:
     * on the device they would hold every gradient at once, what streaming
     * avoids). */
    if (r->train && r->accum > 1 && !p->host_sum &&
        dlrt__host_alloc_staging(e->dev, p->bytes ? p->bytes : 4, (void **)&p->host_sum) < 0)
      ps->now = NULL;
    /* 16-bit copies of masters written since (initial values, imports). */
    if (dlrt__pstream_make_low(ps, i) < 0) ps->now = NULL;
  }
  if (ps->profiling) choose_ahead(e);
  ps->profiling = ps->choose && !ps->node_ms && ps->now && r->train;
  if (ps->profiling && !(ps->node_ms = calloc((size_t)ps->now->n + 1, sizeof(double))))
    ps->profiling = 0;
  if (ps->disk && ps->now && r->train && r->last) dlrt__pstream_plan_disk_reads(ps);
  /* Copies left from the last run that this one needs only later go. */
  for (int i = 0; ps->now && i < ps->n_units; i++)
    if (dlrt__pstream_next_use(ps->now, i, -1) > ps->ahead) release(e, i);
  /* Masters on disk: this run's fetches of them planned, the first read. */
  if (dlrt__pmaster_plan(e) < 0) ps->now = NULL;
}

static int stream_begin_node(dlrt_exec_t *e, const dlrt__schedule *s, int k, int *done) {
  dlrt__pstream *ps = e->pstream;
  const dlrt__node *n = e->g->nodes[s->order[k]];
  *done = 0;
  if (!ps->now)
    return dlrt__set_error(DLRT_ERR_OOM, "parameter streaming: out of host memory, or a "
                           "16-bit copy failed: %s", dlrt_last_error());
  if (is_update(n) && ps->param_of[n->in[0]->owner->id] >= 0) {
    *done = 1;
    return dlrt__pstream_host_update(e, ps->param_of[n->in[0]->owner->id]);
  }
  const tables *t = ps->now;
  /* Masters on disk read ahead into the stages come free; this node's
   * units, then those of the next `ahead` nodes. */
  int rc = dlrt__pmaster_ahead(e);
  for (int a = k; a <= k + ps->ahead && a < t->n && rc == DLRT_OK; a++)
    for (int u = t->use_at[a]; u < t->use_at[a + 1] && rc == DLRT_OK; u++) rc = fetch(e, t->use[u]);
  if (rc == DLRT_OK && is_host_cast(ps, n)) {
    *done = 1; /* its output is the 16-bit copy the host made */
    return DLRT_OK;
  }
  for (int u = t->use_at[k]; u < t->use_at[k + 1] && rc == DLRT_OK; u++) {
    unit *x = &ps->u[t->use[u]];
    if (x->in_flight) {
      rc = dlrt_stream_wait_event(e->stream, x->fetched);
      x->in_flight = 0;
    }
  }
  if (rc == DLRT_OK) rc = dlrt__residency_plain.begin_node(e, s, k, done);
  /* Timing the node alone: what was queued before it (its fetches) done. */
  if (rc == DLRT_OK && ps->profiling && (rc = dlrt_stream_synchronize(e->stream)) == DLRT_OK)
    ps->t0 = dlrt__now_ms();
  return rc;
}

static int stream_end_node(dlrt_exec_t *e, const dlrt__schedule *s, int k) {
  dlrt__pstream *ps = e->pstream;
  if (ps->profiling && ps->now && k < ps->now->n && dlrt_stream_synchronize(e->stream) == DLRT_OK)
    ps->node_ms[k] = dlrt__now_ms() - ps->t0;
  int rc = dlrt__residency_plain.end_node(e, s, k);
  const tables *t = ps->now;
  if (!t) return rc;
  for (int u = t->done_at[k]; u < t->done_at[k + 1] && rc == DLRT_OK; u++)
    rc = gradient_out(e, t->done[u]);
  /* Gradients complete with their parameters' last uses queued go to the
   * host thread meanwhile (summed; updated where nothing else is needed). */
  for (int u = t->ready_at[k]; ps->overlap && u < t->ready_at[k + 1] && rc == DLRT_OK; u++)
    if (ps->p[t->ready[u]].grad_on_host) rc = dlrt__pstream_enqueue(ps, t->ready[u]);
  for (int u = t->use_at[k]; u < t->use_at[k + 1]; u++)
    if (dlrt__pstream_next_use(t, t->use[u], k) > k + ps->ahead) release(e, t->use[u]);
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
  if (ps->param_of[id] >= 0 || ps->is_state[id]) return; /* they live on the host */
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
  for (int i = 0; i < ps->n_units; i++) {
    release(e, i);
    dlrt_host_free(ps->u[i].host);
    dlrt_event_destroy(ps->u[i].fetched);
  }
  for (int i = 0; i < ps->n; i++) {
    streamed *p = &ps->p[i];
    dlrt_host_free(p->host_grad), dlrt_host_free(p->host_sum);
    for (int j = 0; j < p->n_state; j++) dlrt_host_free(p->host_state[j]);
    dlrt_event_destroy(p->grad_done);
  }
  tables_free(&ps->t[0]), tables_free(&ps->t[1]);
  dlrt_host_free(ps->init_buf);
  dlrt__pmaster_destroy(ps);
  dlrt__pdisk_destroy(ps->disk);
  free(ps->seq), free(ps->seq_pos);
  dlrt_event_destroy(ps->mark);
  dlrt_stream_destroy(ps->copy);
  free(ps->p), free(ps->u), free(ps->unit_of), free(ps->param_of), free(ps->is_state);
  free(ps->sums), free(ps->squares), free(ps->node_ms);
  free(ps);
  e->pstream = NULL;
}

/* What streaming does not do (yet): each is an error naming it. */
int dlrt__pstream_check(const dlrt_exec_t *e, int gradients_only) {
  const dlrt__exec_grads *gr = &e->grads;
  int needs_host_grads = gr->accum_steps > 1 || gr->clip_norm > 0 || gr->scaler.enabled;
  const char *what = e->spill.pool ? "spilling (dlrt_exec_set_spill; the device budget is the "
                                     "allocator's limit, dlrt_mem_set_limit)"
                     : gradients_only ? "DLRT_RUN_GRADIENTS (data parallelism)"
                     : needs_host_grads && e->pstream && !e->pstream->all_grads
                         ? "accumulation, clipping or loss scaling while some parameter with "
                           "a gradient is not streamed (not an fp32 tensor of its own "
                           "trained by SGD or Adam)"
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

/* A unit for storage id of parameter i (its host copy `host`, taken over). */
static int add_unit(dlrt_exec_t *e, int i, int id, void *host, size_t bytes) {
  dlrt__pstream *ps = e->pstream;
  unit *x = &ps->u[ps->n_units];
  *x = (unit){.id = id, .param = i, .host = host, .bytes = bytes};
  ps->unit_of[id] = ps->n_units;
  ps->p[i].unit[host == ps->p[i].host ? 0 : 1] = ps->n_units++;
  return dlrt_event_create(e->dev, &x->fetched);
}

/* Parameter i's 16-bit copy: the output of a forward cast of its master
 * into f16 or bf16 (mixed precision; the first such cast). */
static int add_low_copy(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  const dlrt_graph_t *g = e->g;
  streamed *p = &ps->p[i];
  for (int k = 0; k < g->n_nodes; k++) {
    const dlrt__node *n = g->nodes[k];
    if (n->op != DLRT__OP_CAST || n->phase != DLRT__PHASE_FORWARD || n->in[0] != g->tensors[p->id])
      continue;
    const dlrt_tensor_t *low = n->out[0];
    if (low->owner != low || (low->dtype != DLRT_F16 && low->dtype != DLRT_BF16) ||
        ps->unit_of[low->id] >= 0)
      continue;
    void *host;
    size_t bytes = dlrt__tensor_bytes(low);
    int rc = dlrt__host_alloc_staging(e->dev, bytes ? bytes : 4, &host);
    if (rc < 0) return rc;
    if ((rc = add_unit(e, i, low->id, host, bytes)) < 0) return rc;
    p->low_dtype = low->dtype;
    p->low_stale = 1; /* made before the first run, from the initial values */
    return DLRT_OK;
  }
  return DLRT_OK;
}

/* Where each streamed gradient's partial sums go among all gradients' (the
 * parameters with gradients in tensor order, as exec_grads.c adds them). */
static int place_partial_sums(dlrt_exec_t *e) {
  dlrt__pstream *ps = e->pstream;
  const dlrt_graph_t *g = e->g;
  ps->all_grads = 1;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    if (t->kind != DLRT__TENSOR_PARAM || !t->grad) continue;
    int k = ps->param_of[t->id];
    if (k < 0 || ps->p[k].grad != t->grad->owner->id) {
      ps->all_grads = 0;
      continue;
    }
    ps->p[k].sum_at = ps->n_sums++;
    ps->p[k].sq_at = ps->n_squares;
    ps->n_squares += (t->numel + DLRT__SQUARES_CHUNK - 1) / DLRT__SQUARES_CHUNK;
  }
  ps->sums = calloc((size_t)ps->n_sums + 1, sizeof(float));
  ps->squares = calloc((size_t)ps->n_squares + 1, sizeof(float));
  return ps->sums && ps->squares ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

int dlrt_exec_offload_params(dlrt_exec_t *e, int ahead) {
  DLRT__CHECK_ARG(e && ahead >= 0, "dlrt_exec_offload_params: executor is NULL or look-ahead "
                  "%d (give 1 or more nodes, or 0 to choose)", ahead);
  if (e->pstream) {
    e->pstream->ahead = ahead ? ahead : 4;
    e->pstream->choose = ahead == 0;
    free(e->pstream->node_ms), e->pstream->node_ms = NULL;
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
  size_t nn = (size_t)(g->n_nodes ? g->n_nodes : 1);
  if (!ps || !(ps->unit_of = malloc(nt * sizeof(int))) ||
      !(ps->param_of = malloc(nt * sizeof(int))) || !(ps->is_state = calloc(nt, 1)) ||
      !(ps->p = calloc(nn, sizeof *ps->p)) || !(ps->u = calloc(2 * nn, sizeof *ps->u))) {
    if (ps) free(ps->unit_of), free(ps->param_of), free(ps->is_state), free(ps->p);
    free(ps);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  e->pstream = ps;
  /* 0: 4 nodes until the first training run has been timed. */
  ps->ahead = ahead ? ahead : 4;
  ps->choose = ahead == 0;
  ps->e = e;
  ps->init_pending = -1;
  const char *overlap = getenv("DLRT_PARAM_OVERLAP");
  ps->overlap = !(overlap && strcmp(overlap, "0") == 0);
  pthread_mutex_init(&ps->up.lock, NULL);
  pthread_cond_init(&ps->up.work, NULL), pthread_cond_init(&ps->up.done, NULL);
  for (size_t i = 0; i < nt; i++) ps->unit_of[i] = ps->param_of[i] = -1;
  if ((rc = dlrt_stream_synchronize(e->stream)) < 0 ||
      (rc = dlrt_stream_create(e->dev, &ps->copy)) < 0 ||
      (rc = dlrt_event_create(e->dev, &ps->mark)) < 0)
    goto fail;
  for (int k = 0; k < g->n_nodes && rc == DLRT_OK; k++) {
    const dlrt__node *n = g->nodes[k];
    if (!is_update(n) || (n->op != DLRT__OP_SGD && n->op != DLRT__OP_ADAM)) continue;
    const dlrt_tensor_t *param = n->in[0];
    if (param->owner != param || param->dtype != DLRT_F32 || ps->param_of[param->id] >= 0)
      continue;
    int i = ps->n++;
    streamed *p = &ps->p[i];
    p->id = param->id;
    p->unit[0] = p->unit[1] = -1;
    p->n_state = n->op == DLRT__OP_SGD ? 1 : 2;
    p->grad = n->in[p->n_state + 1]->owner->id;
    p->update = n;
    p->bytes = dlrt__tensor_bytes(param);
    for (int j = 0; j < p->n_state; j++) p->state[j] = n->in[1 + j]->owner->id;
    ps->param_of[p->id] = i;
    if ((rc = to_host(e, p->id, &p->host)) < 0) break;
    if ((rc = add_unit(e, i, p->id, p->host, p->bytes)) < 0) break;
    for (int j = 0; j < p->n_state && rc == DLRT_OK; j++) {
      ps->is_state[p->state[j]] = 1;
      rc = to_host(e, p->state[j], &p->host_state[j]);
    }
    if (rc == DLRT_OK) rc = dlrt__host_alloc_staging(e->dev, p->bytes ? p->bytes : 4,
                                                     (void **)&p->host_grad);
    ps->state_host_bytes += p->bytes * (uint64_t)p->n_state;
    if (rc == DLRT_OK) rc = dlrt_event_create(e->dev, &p->grad_done);
    if (rc == DLRT_OK) rc = add_low_copy(e, i);
  }
  if (rc == DLRT_OK) rc = place_partial_sums(e);
  if (rc == DLRT_OK && !(ps->up.queue = malloc(sizeof(int) * (size_t)(ps->n ? ps->n : 1))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK) rc = dlrt__pstream_check(e, 0);
  if (rc == DLRT_OK && e->grads.accum) {
    /* Device accumulators made before streaming go: the sums are on the host. */
    for (int i = 0; i < g->n_tensors; i++) dlrt_buffer_free(e->grads.accum[i]);
    free(e->grads.accum);
    e->grads.accum = NULL;
    e->grads.accum_bytes = 0;
  }
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
    /* The host copies are freed with their units; a master without one yet
     * is freed here. */
    for (int i = 0; i < ps->n; i++)
      if (ps->p[i].unit[0] < 0) dlrt_host_free(ps->p[i].host);
    dlrt__pstream_destroy(e);
    return dlrt__set_error(rc, "%s", msg);
  }
}

int dlrt__pstream_init_host(dlrt_exec_t *e, int id, float **host) {
  dlrt__pstream *ps = e->pstream;
  *host = NULL;
  if (!ps) return 0;
  int i = ps->param_of[id];
  if (i >= 0 && ps->p[i].master_on_disk) {
    /* A master on disk: one buffer at a time, written to disk at the next
     * call, the next run or read (dlrt__pstream_flush_init). */
    if (dlrt__pstream_flush_init(ps) == DLRT_OK &&
        dlrt__host_alloc_staging(e->dev, ps->p[i].bytes ? ps->p[i].bytes : 4,
                                 (void **)&ps->init_buf) == DLRT_OK) {
      memset(ps->init_buf, 0, ps->p[i].bytes);
      ps->init_pending = i;
      *host = ps->init_buf;
    }
    return 1;
  }
  if (i >= 0) {
    *host = ps->p[i].host;
    return 1;
  }
  if (!ps->is_state[id]) return 0;
  /* State on disk: NULL (its slot reads as zeros, the initial state). */
  for (int k = 0; k < ps->n; k++)
    for (int j = 0; j < ps->p[k].n_state; j++)
      if (ps->p[k].state[j] == id) *host = ps->p[k].host_state[j];
  return 1;
}

int dlrt__pstream_io(dlrt_exec_t *e, dlrt_tensor_t *t, void *host, size_t bytes, int write,
                     int *handled) {
  float *mine = NULL;
  *handled = 0;
  if (!e->pstream || t->id < 0 || t->id >= e->g->n_tensors || e->g->tensors[t->id] != t)
    return DLRT_OK; /* check_io judges it */
  int master = e->pstream->param_of[t->owner->id];
  if (master >= 0 && !e->pstream->p[master].master_on_disk) mine = e->pstream->p[master].host;
  else if (master < 0 && !dlrt__pstream_init_host(e, t->owner->id, &mine))
    return DLRT_OK;
  *handled = 1;
  if (t != t->owner || bytes != dlrt__tensor_bytes(t))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s is streamed from the host "
                           "(dlrt_exec_offload_params): read or write all of its %zu bytes, "
                           "not %zu (and not a view of it)", write ? "dlrt_exec_write"
                           : "dlrt_exec_read", t->name, dlrt__tensor_bytes(t->owner), bytes);
  /* Queued fetches read the master; queued kernels may still use its copy;
   * the host thread may still be updating it. */
  int rc = dlrt_stream_synchronize(e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->pstream->copy);
  if (rc == DLRT_OK) rc = dlrt__pstream_join_all(e);
  if (rc < 0) return rc;
  int i = e->pstream->param_of[t->id], of;
  size_t at;
  if ((rc = dlrt__pstream_flush_init(e->pstream)) < 0) return rc;
  if (i >= 0 && e->pstream->p[i].master_on_disk) {
    /* The master after its state in its place on disk. */
    streamed *p = &e->pstream->p[i];
    if (write) rc = dlrt__pmaster_drop(e->pstream); /* staged reads of it are stale */
    if (rc == DLRT_OK)
      rc = dlrt__pdisk_io(e->pstream->disk, i, (size_t)p->n_state * p->bytes, host, bytes, write);
    if (rc == DLRT_OK && write) dlrt__pstream_release_param(e, i), p->low_stale = 1;
    return rc;
  }
  if (dlrt__pstream_state_on_disk(e->pstream, t->id, &of, &at))
    return dlrt__pdisk_io(e->pstream->disk, of, at, host, bytes, write);
  if (write) {
    memcpy(mine, host, bytes);
    if (i >= 0) {
      dlrt__pstream_release_param(e, i); /* stale, as is its 16-bit copy: made again before the next run */
      e->pstream->p[i].low_stale = 1;
    }
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
  dlrt__pdisk_stats ds;
  dlrt__pdisk_stats_get(e->pstream->disk, &ds);
  out->state_host_bytes = e->pstream->state_host_bytes;
  out->state_disk_bytes = ds.disk_bytes;
  out->disk_read_bytes = ds.read_bytes, out->disk_written_bytes = ds.written_bytes;
  out->disk_wait_ms = ds.wait_ms;
  out->disk_fetch_read_bytes = ds.part_read_bytes;
  return rc;
}
