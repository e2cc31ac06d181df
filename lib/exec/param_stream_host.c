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
  int64_t count = (int64_t)(p->bytes / sizeof(float));
  if (!p->master_on_disk) {
    int rc = dlrt__host_cast_f32(ps->u[p->unit[1]].host, p->low_dtype, p->host, count);
    if (rc == DLRT_OK) p->low_stale = 0;
    return rc;
  }
  /* A master on disk: read a chunk at a time and cast (elementwise: the
   * same bits as the whole tensor's cast). */
  int rc = dlrt__pstream_flush_init(ps);
  int64_t chunk = dlrt__pdisk_chunk(ps->disk);
  float *buf = rc == DLRT_OK ? malloc(sizeof(float) * (size_t)chunk) : NULL;
  if (rc == DLRT_OK && !buf) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int64_t at = 0; at < count && rc == DLRT_OK; at += chunk) {
    int64_t n = count - at < chunk ? count - at : chunk;
    rc = dlrt__pdisk_io(ps->disk, i, (size_t)p->n_state * p->bytes + (size_t)at * 4, buf,
                        (size_t)n * 4, 0);
    if (rc == DLRT_OK)
      rc = dlrt__host_cast_f32((char *)ps->u[p->unit[1]].host + at * 2, p->low_dtype, buf, n);
  }
  free(buf);
  if (rc == DLRT_OK) p->low_stale = 0;
  return rc;
}

int dlrt__pstream_flush_init(dlrt__pstream *ps) {
  if (ps->init_pending < 0) return DLRT_OK;
  streamed *p = &ps->p[ps->init_pending];
  int rc = dlrt__pmaster_drop(ps); /* staged reads of it are stale */
  if (rc == DLRT_OK)
    rc = dlrt__pdisk_io(ps->disk, ps->init_pending, (size_t)p->n_state * p->bytes, ps->init_buf,
                        p->bytes, 1);
  if (rc < 0) return rc; /* kept pending: the next flush tries again and reports */
  p->low_stale = 1;
  dlrt_host_free(ps->init_buf);
  ps->init_buf = NULL, ps->init_pending = -1;
  return DLRT_OK;
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

/* Starts reading `count` chunks of state on disk ahead: from chunk c of
 * the k-th parameter in this run's order of updates on (its later chunks,
 * then the next parameters'). */
static void read_ahead(dlrt__pstream *ps, int k, int c, int count) {
  for (; count > 0 && k < ps->n_seq; k++, c = 0) {
    int i = ps->seq[k], chunks = dlrt__pdisk_chunks(ps->disk, i);
    for (; c < chunks && count > 0; c++, count--) dlrt__pdisk_prefetch(ps->disk, i, c);
  }
}

/* The optimizer's update of parameter i on the host from its gradient's
 * host copy, scaled by grad_scale, and its 16-bit copy made anew (on the
 * host thread or the executor's). A state on disk is updated chunk by
 * chunk from its slots (the update is elementwise: the same bits), the
 * next chunks read ahead meanwhile, each written back behind. */
static int apply_update(dlrt__pstream *ps, int i, float grad_scale) {
  streamed *p = &ps->p[i];
  dlrt_exec_t *e = ps->e;
  dlrt_optimizer now = e->g->opt;
  now.lr = e->lr;
  const dlrt_tensor_t *param = e->g->tensors[p->id];
  int decay = !param->no_decay, rc = DLRT_OK;
  if (!p->on_disk) {
    rc = dlrt_host_optimizer_update(&now, e->steps, p->host, p->host_state[0], p->host_state[1],
                                    p->host_grad, param->numel, decay, grad_scale);
  } else {
    int chunks = dlrt__pdisk_chunks(ps->disk, i);
    int64_t chunk = dlrt__pdisk_chunk(ps->disk);
    for (int c = 0; c < chunks && rc == DLRT_OK; c++) {
      float *slot;
      int64_t count, at = (int64_t)c * chunk;
      rc = dlrt__pdisk_get(ps->disk, i, c, &slot, &count);
      /* One slot is updated, one written back: the others read ahead. */
      read_ahead(ps, ps->seq_pos[i], c + 1, DLRT__PDISK_SLOTS - 2);
      if (rc < 0) break;
      /* The slot: the states' parts, then a master on disk's. */
      float *master = p->master_on_disk ? slot + (int64_t)p->n_state * chunk : p->host + at;
      rc = dlrt_host_optimizer_update(&now, e->steps, master, slot,
                                      p->n_state > 1 ? slot + chunk : NULL, p->host_grad + at,
                                      count, decay, grad_scale);
      /* Its 16-bit copy cast from the slot, for the next fetch. */
      if (rc == DLRT_OK && p->master_on_disk && p->unit[1] >= 0)
        rc = dlrt__host_cast_f32((char *)ps->u[p->unit[1]].host + at * 2, p->low_dtype, master,
                                 count);
      int rc2 = dlrt__pdisk_put(ps->disk, i, c); /* written back behind the next chunks */
      if (rc == DLRT_OK) rc = rc2;
    }
  }
  p->low_stale = !p->master_on_disk || rc < 0;
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
  read_ahead(ps, 0, 0, DLRT__PDISK_SLOTS - 1);
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

/* A size for messages: KiB below a MiB, else MiB. */
static const char *size_text(uint64_t bytes, char *buf, size_t n) {
  if (bytes < (1u << 20)) snprintf(buf, n, "%.1f KiB", (double)bytes / 1024.0);
  else snprintf(buf, n, "%.1f MiB", (double)bytes / 1048576.0);
  return buf;
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
  int n = ps->n, *n_state = malloc(sizeof(int) * (size_t)(n ? n : 1));
  int64_t *numel = calloc((size_t)(n ? n : 1), sizeof(int64_t));
  char *on_disk = calloc((size_t)(n ? n : 1), 1);
  if (!n_state || !numel || !on_disk) {
    free(n_state), free(numel), free(on_disk);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  for (int i = 0; i < n; i++)
    numel[i] = (int64_t)(ps->p[i].bytes / sizeof(float)), n_state[i] = ps->p[i].n_state;
  dlrt__param_disk_fit_t fit;
  int masters = 0;
  int rc = dlrt__param_disk_fit_masters(n, numel, n_state, host_bytes, 0, &fit, on_disk,
                                        &masters);
  if (rc == DLRT_OK && !fit.fits) {
    char a[32], b[32], c[32];
    rc = dlrt__set_error(DLRT_ERR_OOM, "--host-limit of %s (dlrt_exec_param_state_limit) is "
                         "too small for the optimizer state%s of the streamed parameters (%s): "
                         "its slots alone, %d chunks of %d elements of each state%s, take %s; "
                         "give at least %s (%llu bytes)", size_text(host_bytes, a, sizeof a),
                         masters ? " and masters" : "",
                         size_text(fit.state_bytes, b, sizeof b), DLRT__PDISK_SLOTS,
                         (int)DLRT__PDISK_CHUNK_LEAST,
                         masters ? " and the masters' staging beside them" : "",
                         size_text(fit.least_host_bytes, c, sizeof c),
                         c, (unsigned long long)fit.least_host_bytes);
  }
  /* Only the state on disk in the file: numel 0 for the rest; a master
   * on disk is one state more. */
  for (int i = 0; i < n; i++)
    if (!on_disk[i]) numel[i] = 0;
    else n_state[i] += masters;
  if (rc == DLRT_OK && fit.n_on_disk)
    rc = dlrt__pdisk_create(n, numel, n_state, fit.chunk, DLRT__PDISK_SLOTS, &ps->disk);
  if (rc == DLRT_OK && fit.n_on_disk &&
      (!(ps->seq = malloc(sizeof(int) * (size_t)n)) ||
       !(ps->seq_pos = calloc((size_t)n, sizeof(int)))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* The state moved there: what it holds now (from an earlier run or an
   * import) is written, and its host copies go. */
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    streamed *p = &ps->p[i];
    if (!on_disk[i]) continue;
    int nonzero = 0;
    for (int j = 0; j < p->n_state; j++)
      for (size_t k = 0; k < p->bytes / sizeof(float) && !nonzero; k++)
        nonzero = p->host_state[j][k] != 0.0f;
    for (int j = 0; j < p->n_state && rc == DLRT_OK && nonzero; j++)
      rc = dlrt__pdisk_io(ps->disk, i, (size_t)j * p->bytes, p->host_state[j], p->bytes, 1);
    p->on_disk = 1;
    for (int j = 0; j < p->n_state; j++) dlrt_host_free(p->host_state[j]), p->host_state[j] = NULL;
    if (!masters || rc < 0) continue;
    /* The master after the state (zeros need no write: a place never
     * written reads as zeros); its host copy goes, with its unit's. */
    nonzero = 0;
    for (size_t k = 0; k < p->bytes / sizeof(float) && !nonzero; k++) nonzero = p->host[k] != 0.0f;
    if (nonzero)
      rc = dlrt__pdisk_io(ps->disk, i, (size_t)p->n_state * p->bytes, p->host, p->bytes, 1);
    if (rc < 0) break;
    p->master_on_disk = 1;
    dlrt_host_free(p->host);
    p->host = NULL;
    ps->u[p->unit[0]].host = NULL;
  }
  free(n_state), free(numel), free(on_disk);
  /* The masters' fetches read ahead through a staging of their own. */
  if (rc == DLRT_OK && masters && fit.n_on_disk) rc = dlrt__pmaster_create(e);
  if (rc == DLRT_OK) ps->state_host_bytes = fit.host_bytes;
  return rc;
}
