/* param_stream_host.c — the host half of parameter streaming
 * (param_stream.c is the device half; param_stream_internal.h their shared
 * state): each streamed gradient taken as it arrives on the host (summed
 * over micro-batches, its partial sums for clipping and loss scaling), the
 * optimizer's update on the host thread while the device runs the rest of
 * the backward pass, the 16-bit copies made from the masters, and the
 * optimizer state behind a host budget on disk (param_disk.c). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/param_stream.h"
#include "exec/param_stream_internal.h"
#include "util/clock.h"
#include "util/status.h"

/* The 16-bit copy of parameter i from its master (host_optim.c's cast: the
 * device's cast kernel, the same bits). */
int dlrt__pstream_make_low(dlrt__pstream *ps, int i) {
  streamed *p = &ps->p[i];
  if (p->unit[1] < 0 || !p->low_stale) return DLRT_OK;
  int rc = dlrt__host_cast_f32(ps->u[p->unit[1]].host, p->low_dtype, p->host,
                               (int64_t)(p->bytes / sizeof(float)));
  if (rc == DLRT_OK) p->low_stale = 0;
  return rc;
}

/* Parameter i's gradient of this run on the host: its queued copy waited
 * for (and its last fetches: the update may rewrite what they read), or
 * copied now where no node completed it before (on the executor's
 * thread), or zero where the run made none. */
static int gradient_in(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  streamed *p = &ps->p[i];
  int rc = DLRT_OK;
  for (int w = 0; w < 2 && rc == DLRT_OK; w++)
    if (p->unit[w] >= 0 && ps->u[p->unit[w]].recorded)
      rc = dlrt_event_synchronize(ps->u[p->unit[w]].fetched);
  if (rc < 0) return rc;
  if (p->grad_on_host) {
    rc = dlrt_event_synchronize(p->grad_done);
  } else if (p->grad >= 0 && e->bufs[p->grad]) {
    if ((rc = dlrt_copy_d2h(p->host_grad, e->bufs[p->grad], 0, p->bytes, e->stream)) == DLRT_OK)
      rc = dlrt_stream_synchronize(e->stream);
    ps->st.gradient_bytes += p->bytes;
  } else {
    memset(p->host_grad, 0, p->bytes);
  }
  p->grad_on_host = 0;
  return rc;
}

/* Parameter i's gradient has arrived: summed over the micro-batches (as
 * exec_grads.c's dlrt__exec_accumulate does on the device: the first copies,
 * later ones add, the last adds the sum into the gradient), and where the
 * updates need every gradient first, its partial sums made (plain: one;
 * squares: one per chunk, for the clip norm). */
static int fold(dlrt__pstream *ps, int i) {
  streamed *p = &ps->p[i];
  const run_kind *r = &ps->run;
  int64_t count = (int64_t)(p->bytes / sizeof(float));
  int rc = DLRT_OK;
  if (r->accum > 1) {
    if (r->last) rc = dlrt__host_add(p->host_grad, p->host_grad, p->host_sum, count);
    else if (r->micro == 0) memcpy(p->host_sum, p->host_grad, p->bytes);
    else rc = dlrt__host_add(p->host_sum, p->host_sum, p->host_grad, count);
  }
  if (rc < 0 || !r->last || !r->needs_all) return rc;
  if (ps->e->grads.scaler.enabled) rc = dlrt__host_sum(&ps->sums[p->sum_at], p->host_grad, count);
  if (rc == DLRT_OK && ps->e->grads.clip_norm > 0) {
    /* A chunk's squares at a time, as the device makes them. */
    float *squares = malloc(sizeof(float) * (size_t)(count < DLRT__SQUARES_CHUNK
                                                         ? (count ? count : 1)
                                                         : DLRT__SQUARES_CHUNK));
    if (!squares) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    int64_t k = p->sq_at;
    for (int64_t at = 0; at < count && rc == DLRT_OK; at += DLRT__SQUARES_CHUNK) {
      int64_t n = count - at < DLRT__SQUARES_CHUNK ? count - at : DLRT__SQUARES_CHUNK;
      rc = dlrt__host_square(squares, p->host_grad + at, n);
      if (rc == DLRT_OK) rc = dlrt__host_sum(&ps->squares[k++], squares, n);
    }
    free(squares);
  }
  return rc;
}

/* The optimizer's update of parameter i on the host from its gradient's
 * host copy, scaled by grad_scale, and its 16-bit copy made anew (on the
 * host thread or the executor's). */
static int apply_update(dlrt__pstream *ps, int i, float grad_scale) {
  streamed *p = &ps->p[i];
  dlrt_exec_t *e = ps->e;
  dlrt_optimizer now = e->g->opt;
  now.lr = e->lr;
  const dlrt_tensor_t *param = e->g->tensors[p->id];
  float *state[2] = {p->host_state[0], p->host_state[1]};
  int rc = DLRT_OK;
  if (p->on_disk) {
    /* Its state from its slot; the next ones on disk read ahead meanwhile. */
    float *slot;
    rc = dlrt__pdisk_get(ps->disk, i, &slot);
    for (int k = ps->seq_pos[i] + 1; k < ps->n_seq && k <= ps->seq_pos[i] + 2; k++)
      dlrt__pdisk_prefetch(ps->disk, ps->seq[k]);
    if (rc < 0) return rc;
    state[0] = slot, state[1] = p->n_state > 1 ? slot + param->numel : NULL;
  }
  rc = dlrt_host_optimizer_update(&now, e->steps, p->host, state[0], state[1], p->host_grad,
                                  param->numel, !param->no_decay, grad_scale);
  if (p->on_disk) {
    int rc2 = dlrt__pdisk_put(ps->disk, i); /* written back behind the next updates */
    if (rc == DLRT_OK) rc = rc2;
  }
  p->low_stale = 1;
  if (rc == DLRT_OK) rc = dlrt__pstream_make_low(ps, i);
  p->applied = 1;
  return rc;
}

/* Parameter i's job when its gradient has arrived: fold it, and update it
 * where this run's update needs nothing else (the last micro-batch, no
 * clipping or loss scaling). */
static int take_gradient(dlrt__pstream *ps, int i, int may_update, double *wait_ms,
                         double *update_ms) {
  double t0 = dlrt__now_ms();
  int rc = gradient_in(ps->e, i);
  double t1 = dlrt__now_ms();
  if (rc == DLRT_OK) rc = fold(ps, i);
  ps->p[i].arrived = 1;
  if (rc == DLRT_OK && may_update && ps->run.last && !ps->run.needs_all)
    rc = apply_update(ps, i, ps->run.early_scale);
  *wait_ms += t1 - t0, *update_ms += dlrt__now_ms() - t1;
  return rc;
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
    double wait_ms = 0, update_ms = 0;
    int rc = take_gradient(ps, i, 1, &wait_ms, &update_ms);
    pthread_mutex_lock(&u->lock);
    ps->st.wait_ms += wait_ms, ps->st.update_ms += update_ms;
    if (rc < 0 && !u->failed) {
      u->failed = 1;
      snprintf(u->error, sizeof u->error, "%s", dlrt_last_error());
    }
    ps->p[i].finished = 1;
    u->head++;
    pthread_cond_broadcast(&u->done);
  }
  pthread_mutex_unlock(&u->lock);
  return NULL;
}

/* Hands parameter i's gradient to the host thread (its copy is queued). */
int dlrt__pstream_enqueue(dlrt__pstream *ps, int i) {
  updater *u = &ps->up;
  if (!u->started) {
    if (pthread_create(&u->thread, NULL, updater_main, ps) != 0)
      return dlrt__set_error(DLRT_ERR_OOM, "parameter streaming: cannot start its host "
                             "update thread");
    u->started = 1;
  }
  pthread_mutex_lock(&u->lock);
  ps->p[i].queued = 1;
  ps->p[i].finished = 0;
  u->queue[u->tail++ % ps->n] = i; /* at most n queued: one job each a run */
  pthread_cond_signal(&u->work);
  pthread_mutex_unlock(&u->lock);
  return DLRT_OK;
}

/* Parameter i's gradient of this run taken: its job waited for where the
 * host thread has it, else done here (without the update). */
static int join(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  streamed *p = &ps->p[i];
  if (p->queued) {
    updater *u = &ps->up;
    double t0 = dlrt__now_ms();
    pthread_mutex_lock(&u->lock);
    while (!p->finished) pthread_cond_wait(&u->done, &u->lock);
    int failed = u->failed;
    pthread_mutex_unlock(&u->lock);
    ps->st.join_ms += dlrt__now_ms() - t0;
    p->queued = 0;
    if (failed) return dlrt__set_error(DLRT_ERR_STATE, "a host update failed: %s", u->error);
    return DLRT_OK;
  }
  if (p->arrived) return DLRT_OK;
  return take_gradient(ps, i, 0, &ps->st.wait_ms, &ps->st.update_ms);
}

/* Every job of the run done (its gradients taken). */
int dlrt__pstream_join_all(dlrt_exec_t *e) {
  int rc = DLRT_OK;
  for (int i = 0; i < e->pstream->n; i++) {
    int rc2 = e->pstream->run.train ? join(e, i) : DLRT_OK;
    if (rc == DLRT_OK) rc = rc2;
  }
  return rc;
}

/* The update of parameter i at its update node: its gradient taken, then
 * updated unless the host thread did. */
int dlrt__pstream_host_update(dlrt_exec_t *e, int i) {
  dlrt__pstream *ps = e->pstream;
  int rc = join(e, i);
  if (rc < 0) return rc;
  /* The device copies are stale after the update: the next uses fetch them. */
  dlrt__pstream_release_param(e, i);
  if (!ps->p[i].applied) {
    double t0 = dlrt__now_ms();
    rc = apply_update(ps, i, e->grads.grad_scale);
    ps->st.update_ms += dlrt__now_ms() - t0;
  }
  ps->st.updates++;
  return rc;
}

int dlrt__pstream_accumulate(dlrt_exec_t *e) { return dlrt__pstream_join_all(e); }

int dlrt__pstream_gradients_total(dlrt_exec_t *e, int squared, float *out) {
  dlrt__pstream *ps = e->pstream;
  *out = 0;
  int rc = dlrt__pstream_join_all(e);
  if (rc < 0) return rc;
  if (!ps->run.needs_all || !ps->run.last)
    return dlrt__set_error(DLRT_ERR_STATE, "parameter streaming: the gradients' sums were "
                           "not made in this run (clipping or loss scaling set during it?)");
  int64_t count = squared ? ps->n_squares : ps->n_sums;
  return count ? dlrt__host_sum(out, squared ? ps->squares : ps->sums, count) : DLRT_OK;
}

/* The order this run's updates of parameters with state on disk will come
 * in: the order their gradients get ready (updates on the host thread), or
 * of the update nodes (clipping, loss scaling, DLRT_PARAM_OVERLAP=0); the
 * first reads start now, during the forward pass. */
void dlrt__pstream_plan_disk_reads(dlrt__pstream *ps) {
  const tables *t = ps->now;
  int early = ps->overlap && !ps->run.needs_all;
  ps->n_seq = 0;
  for (int k = 0; k < ps->n; k++) {
    int i = early ? (k < t->ready_at[t->n] ? t->ready[k] : -1) : k;
    if (i >= 0 && ps->p[i].on_disk) ps->seq_pos[i] = ps->n_seq, ps->seq[ps->n_seq++] = i;
  }
  /* Parameters with no gradient this run, if any, come at their nodes. */
  for (int i = 0; early && i < ps->n; i++) {
    int listed = 0;
    for (int k = 0; k < ps->n_seq && !listed; k++) listed = ps->seq[k] == i;
    if (ps->p[i].on_disk && !listed) ps->seq_pos[i] = ps->n_seq, ps->seq[ps->n_seq++] = i;
  }
  dlrt__pdisk_new_round(ps->disk);
  for (int k = 0; k < ps->n_seq && k < 2; k++) dlrt__pdisk_prefetch(ps->disk, ps->seq[k]);
}

/* Parameter i's state j, and where it is in its state on disk. */
int dlrt__pstream_state_on_disk(const dlrt__pstream *ps, int id, int *i, size_t *at) {
  for (int k = 0; k < ps->n; k++)
    for (int j = 0; j < ps->p[k].n_state; j++)
      if (ps->p[k].state[j] == id && ps->p[k].on_disk) {
        *i = k, *at = (size_t)j * ps->p[k].bytes;
        return 1;
      }
  return 0;
}

int dlrt_exec_param_state_limit(dlrt_exec_t *e, uint64_t host_bytes) {
  DLRT__CHECK_ARG(e, "dlrt_exec_param_state_limit: executor is NULL");
  dlrt__pstream *ps = e->pstream;
  if (!ps)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_param_state_limit: the parameters are "
                           "not streamed (dlrt_exec_offload_params first)");
  if (ps->disk)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_param_state_limit: the state is on disk "
                           "already (call it once)");
  if (host_bytes == 0) return DLRT_OK;
  enum { SLOTS = 3 }; /* one updated, one read ahead, one written back */
  int n = ps->n, *by_size = malloc(sizeof(int) * (size_t)(n ? n : 1));
  size_t *disk_bytes = calloc((size_t)(n ? n : 1), sizeof(size_t));
  if (!by_size || !disk_bytes) {
    free(by_size), free(disk_bytes);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  /* Largest state first (insertion sort: a model's parameter count). */
  for (int i = 0; i < n; i++) {
    int k = i;
    size_t b = ps->p[i].bytes * (size_t)ps->p[i].n_state;
    while (k > 0 && ps->p[by_size[k - 1]].bytes * (size_t)ps->p[by_size[k - 1]].n_state < b)
      by_size[k] = by_size[k - 1], k--;
    by_size[k] = i;
  }
  /* Each stays in host memory while it fits beside the slots for what goes
   * to disk: those the size of the next one down until one goes, then of
   * the largest that went. */
  uint64_t host = 0, slot = 0;
  for (int r = 0; r < n; r++) {
    const streamed *p = &ps->p[by_size[r]];
    uint64_t b = p->bytes * (uint64_t)p->n_state;
    const streamed *q = r + 1 < n ? &ps->p[by_size[r + 1]] : NULL;
    uint64_t next = q ? q->bytes * (uint64_t)q->n_state : 0;
    uint64_t slots = SLOTS * (slot ? slot : next);
    if (host + b + slots <= host_bytes) {
      host += b;
    } else {
      disk_bytes[by_size[r]] = (size_t)b;
      if (!slot) slot = b;
    }
  }
  free(by_size);
  if (slot && host + SLOTS * slot > host_bytes) {
    free(disk_bytes);
    return dlrt__set_error(DLRT_ERR_OOM, "--host-limit of %.1f MiB (dlrt_exec_param_state_limit) "
                           "is too small for the optimizer state of the streamed parameters: "
                           "%.1f MiB stay in host memory beside %d slots of %.1f MiB for the "
                           "rest on disk; give at least %.1f MiB", (double)host_bytes / 1048576.0,
                           (double)host / 1048576.0, SLOTS, (double)slot / 1048576.0,
                           (double)(SLOTS * slot) / 1048576.0);
  }
  int rc = DLRT_OK;
  if (slot) rc = dlrt__pdisk_create(n, disk_bytes, SLOTS, &ps->disk);
  if (rc == DLRT_OK && slot &&
      (!(ps->seq = malloc(sizeof(int) * (size_t)n)) ||
       !(ps->seq_pos = calloc((size_t)n, sizeof(int)))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* The state moved there: what it holds now (from an earlier run or an
   * import) is written, and its host copies go. */
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    streamed *p = &ps->p[i];
    if (!disk_bytes[i]) continue;
    int nonzero = 0;
    for (int j = 0; j < p->n_state; j++)
      for (size_t k = 0; k < p->bytes / sizeof(float) && !nonzero; k++)
        nonzero = p->host_state[j][k] != 0.0f;
    for (int j = 0; j < p->n_state && rc == DLRT_OK && nonzero; j++)
      rc = dlrt__pdisk_io(ps->disk, i, (size_t)j * p->bytes, p->host_state[j], p->bytes, 1);
    p->on_disk = 1;
    for (int j = 0; j < p->n_state; j++) dlrt_host_free(p->host_state[j]), p->host_state[j] = NULL;
  }
  free(disk_bytes);
  ps->state_host_bytes = host + (slot ? SLOTS * slot : 0);
  return rc;
}
