/* exec_grads.c — what happens to the gradients between the backward pass
 * and the updates: accumulation over micro-batches, clipping by global
 * norm, dynamic loss scaling, gradient buckets streamed to the host while
 * the backward pass runs, and the host-side gradient I/O of data
 * parallelism (dlrt_exec_gradients_read/_write, dlrt_exec_apply_gradients). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/param_stream.h"
#include "mem/buffer.h" /* dlrt__host_alloc_staging */
#include "util/status.h"

/* One running sum per gradient, for the executor's life: they count in its
 * planned peak. */
int dlrt__exec_ensure_accumulators(dlrt_exec_t *e) {
  dlrt_graph_t *g = e->g;
  if (e->grads.accum) return DLRT_OK;
  e->grads.accum = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e->grads.accum);
  if (!e->grads.accum) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    int rc = dlrt_buffer_alloc(e->dev, dlrt__tensor_bytes(p), e->stream, &e->grads.accum[i]);
    if (rc < 0) return rc;
    e->grads.accum_bytes += dlrt__alloc_block_bytes(dlrt__tensor_bytes(p));
  }
  return DLRT_OK;
}

int dlrt_exec_set_accumulation(dlrt_exec_t *e, int steps) {
  DLRT__CHECK_ARG(e && steps >= 1, "dlrt_exec_set_accumulation: executor is NULL or %d "
                  "micro-batches per update (give 1 or more)", steps);
  if (e->grads.micro != 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_set_accumulation: %d of %d micro-batches "
                           "of an update are still pending", e->grads.micro, e->grads.accum_steps);
  if (steps > 1 && !e->pstream) { /* streamed gradients are summed on the host */
    int rc = dlrt__exec_ensure_accumulators(e);
    if (rc < 0) return rc;
  }
  e->grads.accum_steps = steps;
  return DLRT_OK;
}

/* Folds this micro-batch's gradients into the running sums: the first
 * micro-batch of an update copies, later ones add; the last adds the sums
 * into the gradients, which the updates then scale by 1 / accum_steps (each
 * micro-batch's loss is a mean over its own samples, so the mean of the
 * micro-batch gradients is the gradient of the whole batch's mean loss). */
int dlrt__exec_accumulate(dlrt_exec_t *e, int last) {
  /* Streamed gradients are summed on the host as they arrive. */
  if (e->pstream) return dlrt__pstream_accumulate(e);
  dlrt_graph_t *g = e->g;
  int rc = DLRT_OK;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    if ((rc = dlrt__exec_use(e, p->grad, last)) < 0) break;
    dlrt_buffer_t *grad = dlrt__exec_buf(e, p->grad), *sum = e->grads.accum[i];
    size_t bytes = dlrt__tensor_bytes(p);
    if (last)
      rc = dlrt_elementwise(e->stream, DLRT_EW_ADD, DLRT_F32, p->numel, 0, grad, 0, grad, 0,
                            sum, 0);
    else if (e->grads.micro == 0)
      rc = dlrt_copy_d2d(sum, 0, grad, 0, bytes, e->stream);
    else
      rc = dlrt_elementwise(e->stream, DLRT_EW_ADD, DLRT_F32, p->numel, 0, sum, 0, sum, 0,
                            grad, 0);
    dlrt__exec_unuse(e, p->grad);
  }
  return rc;
}

#define SQUARES_CHUNK DLRT__SQUARES_CHUNK

/* The sum over every parameter gradient of its elements (or of their
 * squares): per-gradient sums (squares: per chunk of SQUARES_CHUNK, through
 * a temporary of that size) into a small vector, their sum, and one number
 * read back to the host. */
static int gradients_total(dlrt_exec_t *e, int squared, int skip, float *out) {
  /* Streamed gradients are on the host: the same sums there. */
  if (e->pstream) return dlrt__pstream_gradients_total(e, squared, out);
  dlrt_graph_t *g = e->g;
  int64_t count = 0, largest = 0; /* partial sums; the largest chunk squared */
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == DLRT__TENSOR_PARAM && p->grad && i != skip) {
      count += squared ? (p->numel + SQUARES_CHUNK - 1) / SQUARES_CHUNK : 1;
      int64_t chunk = p->numel < SQUARES_CHUNK ? p->numel : SQUARES_CHUNK;
      if (chunk > largest) largest = chunk;
    }
  }
  *out = 0;
  if (count == 0) return DLRT_OK;
  dlrt_buffer_t *squares = NULL, *sums = NULL, *total = NULL;
  int rc = squared ? dlrt_buffer_alloc(e->dev, (size_t)largest * sizeof(float), e->stream,
                                       &squares)
                   : DLRT_OK;
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, (size_t)count * sizeof(float), e->stream, &sums);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, sizeof(float), e->stream, &total);
  int64_t k = 0;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad || i == skip) continue;
    if ((rc = dlrt__exec_use(e, p->grad, 0)) < 0) break;
    dlrt_buffer_t *gb = dlrt__exec_buf(e, p->grad);
    if (!squared) {
      rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p->numel, sums,
                       (size_t)k++ * sizeof(float), gb, 0);
    } else {
      for (int64_t at = 0; at < p->numel && rc == DLRT_OK; at += SQUARES_CHUNK) {
        int64_t n = p->numel - at < SQUARES_CHUNK ? p->numel - at : SQUARES_CHUNK;
        size_t from = (size_t)at * sizeof(float);
        rc = dlrt_elementwise(e->stream, DLRT_EW_MUL, DLRT_F32, n, 0, squares, 0, gb, from, gb,
                              from);
        if (rc == DLRT_OK)
          rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, n, sums,
                           (size_t)k++ * sizeof(float), squares, 0);
      }
    }
    dlrt__exec_unuse(e, p->grad);
  }
  if (rc == DLRT_OK) rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, count, total, 0, sums, 0);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(out, total, 0, sizeof *out, e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  dlrt_buffer_free(squares);
  dlrt_buffer_free(sums);
  dlrt_buffer_free(total);
  return rc;
}

/* The factor that brings the global L2 norm of the gradients down to
 * clip_norm (1 when already below), as torch.nn.utils.clip_grad_norm_:
 * max_norm / (norm + 1e-6). */
int dlrt__exec_clip_factor(dlrt_exec_t *e, float prescale, float *factor) {
  float sq = 0;
  int rc = gradients_total(e, 1, -1, &sq);
  *factor = 1.0f;
  if (rc == DLRT_OK) {
    /* The gradients are applied times `prescale` (accumulation): clip that. */
    double norm = sqrt((double)sq) * prescale, coef = e->grads.clip_norm / (norm + 1e-6);
    if (coef < 1.0) *factor = (float)coef;
  }
  return rc;
}

int dlrt_exec_set_clip_norm(dlrt_exec_t *e, float max_norm) {
  DLRT__CHECK_ARG(e && max_norm >= 0, "executor is NULL or max norm %g < 0", max_norm);
  e->grads.clip_norm = max_norm;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- loss scaling */

dlrt_loss_scaler dlrt_loss_scaler_defaults(void) {
  dlrt_loss_scaler s = {.enabled = 1, .init_scale = 65536.0f, .growth_factor = 2.0f,
                        .backoff_factor = 0.5f, .growth_interval = 2000};
  return s;
}

int dlrt_exec_set_loss_scaler(dlrt_exec_t *e, const dlrt_loss_scaler *scaler) {
  DLRT__CHECK_ARG(e, "dlrt_exec_set_loss_scaler: executor is NULL");
  if (!scaler || !scaler->enabled) {
    e->grads.scaler.enabled = 0;
    e->grads.loss_scale = 1.0f;
    return DLRT_OK;
  }
  /* Written so that NaN fails every test. */
  DLRT__CHECK_ARG(scaler->init_scale >= DLRT_LOSS_SCALE_MIN &&
                      scaler->init_scale <= DLRT_LOSS_SCALE_MAX,
                  "dlrt_exec_set_loss_scaler: an initial scale of %g is outside [%g, %g] "
                  "(2^-64 to 2^64), where both the scale and 1 / scale are finite floats; "
                  "65536 is the usual start", scaler->init_scale, DLRT_LOSS_SCALE_MIN,
                  DLRT_LOSS_SCALE_MAX);
  DLRT__CHECK_ARG(scaler->growth_factor >= 1 && isfinite(scaler->growth_factor) &&
                      scaler->backoff_factor > 0 && scaler->backoff_factor <= 1 &&
                      scaler->growth_interval >= 1,
                  "dlrt_exec_set_loss_scaler: growth %g, backoff %g, interval %d (need a "
                  "finite growth >= 1, backoff in (0, 1], interval >= 1)",
                  scaler->growth_factor, scaler->backoff_factor, scaler->growth_interval);
  if (e->grads.micro != 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_set_loss_scaler: %d of %d micro-batches "
                           "of an update are still pending", e->grads.micro, e->grads.accum_steps);
  e->grads.scaler = *scaler;
  e->grads.loss_scale = scaler->init_scale;
  e->grads.clean_steps = 0;
  return DLRT_OK;
}

int dlrt_exec_loss_scale(const dlrt_exec_t *e, dlrt_loss_scale_state *out) {
  DLRT__CHECK_ARG(e && out, "dlrt_exec_loss_scale: executor or out is NULL");
  out->scale = e->grads.loss_scale;
  out->skipped_steps = e->grads.skipped_steps;
  out->last_skipped = e->grads.last_skipped;
  return DLRT_OK;
}

void dlrt__exec_save_loss_scale(const dlrt_exec_t *e, dlrt__loss_scale_saved *out) {
  out->scaler = e->grads.scaler;
  out->scale = e->grads.loss_scale;
  out->skipped_steps = e->grads.skipped_steps;
  out->clean_steps = e->grads.clean_steps;
  out->last_skipped = e->grads.last_skipped;
}

/* The scale kept within [DLRT_LOSS_SCALE_MIN, DLRT_LOSS_SCALE_MAX] (NaN:
 * the lower end, where a skip does least harm). */
static float clamp_scale(float scale) {
  return scale <= DLRT_LOSS_SCALE_MAX ? (scale >= DLRT_LOSS_SCALE_MIN ? scale
                                                                       : DLRT_LOSS_SCALE_MIN)
                                      : isnan(scale) ? DLRT_LOSS_SCALE_MIN : DLRT_LOSS_SCALE_MAX;
}

void dlrt__exec_restore_loss_scale(dlrt_exec_t *e, const dlrt__loss_scale_saved *in) {
  e->grads.scaler = in->scaler;
  e->grads.loss_scale = clamp_scale(in->scale);
  e->grads.skipped_steps = in->skipped_steps;
  e->grads.clean_steps = in->clean_steps;
  e->grads.last_skipped = in->last_skipped;
}

/* Whether every parameter gradient is finite: inf or NaN anywhere makes
 * the plain sum inf or NaN (finite fp32 gradients cannot overflow it in
 * practice; their squares, with a loss scale, could). */
int dlrt__exec_gradients_finite(dlrt_exec_t *e, int *finite) {
  float sum = 0;
  int rc = gradients_total(e, 0, -1, &sum);
  *finite = rc != DLRT_OK || isfinite(sum);
  return rc;
}

/* GradScaler's rule after an update (or a skipped one). */
void dlrt__exec_update_loss_scale(dlrt_exec_t *e, int finite) {
  e->grads.last_skipped = !finite;
  if (!finite) {
    e->grads.skipped_steps++;
    e->grads.clean_steps = 0;
    e->grads.loss_scale = clamp_scale(e->grads.loss_scale * e->grads.scaler.backoff_factor);
  } else if (++e->grads.clean_steps >= e->grads.scaler.growth_interval) {
    e->grads.clean_steps = 0;
    e->grads.loss_scale = clamp_scale(e->grads.loss_scale * e->grads.scaler.growth_factor);
  }
}

/* ---------------------------------------------------------------- gradients */

void dlrt__exec_buckets_free(dlrt_exec_t *e) {
  dlrt__grad_buckets *bk = &e->grads.buckets;
  for (int b = 0; b < bk->n_buckets; b++) dlrt_event_destroy(bk->events[b]);
  if (bk->host) dlrt_host_free(bk->host);
  free(bk->param), free(bk->pos), free(bk->at), free(bk->closes);
  free(bk->start), free(bk->count), free(bk->events);
  memset(bk, 0, sizeof *bk);
}

int dlrt__exec_stream_gradients(dlrt_exec_t *e, int64_t bucket_bytes) {
  dlrt__grad_buckets *bk = &e->grads.buckets;
  dlrt_graph_t *g = e->g;
  dlrt__exec_buckets_free(e);
  if (bucket_bytes <= 0) return DLRT_OK;
  if (!g->optimized)
    return dlrt__set_error(DLRT_ERR_STATE, "gradient buckets need an optimized graph");
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  /* pos_of[t]: where tensor t's producer runs in the training schedule. */
  int *pos_of = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *pos_of);
  int n = 0;
  for (int i = 0; i < g->n_tensors; i++)
    n += g->tensors[i]->kind == DLRT__TENSOR_PARAM && g->tensors[i]->grad;
  bk->param = calloc((size_t)n + 1, sizeof(int));
  bk->pos = calloc((size_t)n + 1, sizeof(int));
  bk->at = calloc((size_t)n + 1, sizeof(int64_t));
  bk->closes = calloc((size_t)n + 1, sizeof(int));
  bk->start = calloc((size_t)n + 1, sizeof(int64_t));
  bk->count = calloc((size_t)n + 1, sizeof(int64_t));
  bk->events = calloc((size_t)n + 1, sizeof(dlrt_event_t *));
  if (!pos_of || !bk->param || !bk->pos || !bk->at || !bk->closes ||
      !bk->start || !bk->count || !bk->events) {
    free(pos_of);
    dlrt__exec_buckets_free(e);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  for (int i = 0; i < g->n_tensors; i++) pos_of[i] = -1;
  for (int k = 0; k < s->n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    for (int j = 0; j < nd->n_out; j++) pos_of[nd->out[j]->id] = k;
  }
  /* Each gradient is final where the node that writes its storage runs (the
   * last contribution's sum); insertion sort by that position. */
  int m = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    const dlrt_tensor_t *storage = p->grad->owner;
    int at = storage->producer ? pos_of[storage->id] : 0;
    int k = m++;
    while (k > 0 && bk->pos[k - 1] > at) {
      bk->pos[k] = bk->pos[k - 1];
      bk->param[k] = bk->param[k - 1];
      k--;
    }
    bk->pos[k] = at;
    bk->param[k] = i;
  }
  free(pos_of);
  bk->n = m;
  bk->bytes = bucket_bytes;
  int64_t at = 0, open_from = 0;
  int rc = DLRT_OK;
  for (int k = 0; k < m; k++) {
    const dlrt_tensor_t *p = g->tensors[bk->param[k]];
    bk->at[k] = at;
    at += p->numel;
    bk->closes[k] = -1;
    if ((at - open_from) * (int64_t)sizeof(float) >= bucket_bytes || k == m - 1) {
      int b = bk->n_buckets++;
      bk->closes[k] = b;
      bk->start[b] = open_from;
      bk->count[b] = at - open_from;
      open_from = at;
      if ((rc = dlrt_event_create(e->dev, &bk->events[b])) < 0) break;
    }
  }
  bk->total = at;
  if (rc == DLRT_OK)
    rc = dlrt__host_alloc_staging(e->dev, (size_t)(at ? at : 1) * sizeof(float),
                                  (void **)&bk->host);
  if (rc < 0) dlrt__exec_buckets_free(e);
  return rc;
}

/* Queues the copies of the gradients that became final at position k, and
 * the events of the buckets they complete. */
int dlrt__exec_stream_ready(dlrt_exec_t *e, int k) {
  dlrt__grad_buckets *bk = &e->grads.buckets;
  int rc = DLRT_OK;
  while (rc == DLRT_OK && bk->next < bk->n && bk->pos[bk->next] <= k) {
    int j = bk->next++;
    const dlrt_tensor_t *p = e->g->tensors[bk->param[j]];
    /* Spilling: resident for the copy (after a chunked block its storages
     * are released, and may have been evicted). */
    if ((rc = dlrt__exec_use(e, p->grad, 0)) < 0) break;
    rc = dlrt_copy_d2h(bk->host + bk->at[j], dlrt__exec_buf(e, p->grad), 0,
                       (size_t)p->numel * sizeof(float), e->stream);
    dlrt__exec_unuse(e, p->grad);
    if (rc == DLRT_OK && bk->closes[j] >= 0)
      rc = dlrt_event_record(bk->events[bk->closes[j]], e->stream);
    /* ZeRO stage 2: the device's copy goes once its copy to the host is
     * queued (stream-ordered: the memory is reused after the copy). */
    const dlrt_tensor_t *grad = p->grad;
    if (rc == DLRT_OK && e->shard.stage >= 2 && grad->owner == grad && !dlrt__persistent(grad)) {
      dlrt_buffer_free(e->bufs[grad->id]);
      e->bufs[grad->id] = NULL;
    }
  }
  return rc;
}

int dlrt__exec_bucket_wait(dlrt_exec_t *e, int b) {
  dlrt__grad_buckets *bk = &e->grads.buckets;
  DLRT__CHECK_ARG(b >= 0 && b < bk->n_buckets, "gradient bucket %d of %d", b,
                  bk->n_buckets);
  return dlrt_event_synchronize(bk->events[b]);
}

int dlrt__exec_gradients_write_buckets(dlrt_exec_t *e, const float *src) {
  dlrt__grad_buckets *bk = &e->grads.buckets;
  dlrt_graph_t *g = e->g;
  if (!e->grads.accum || !bk->n)
    return dlrt__set_error(DLRT_ERR_STATE, "run DLRT_RUN_GRADIENTS with gradient buckets first");
  int rc = DLRT_OK;
  for (int j = 0; j < bk->n && rc == DLRT_OK; j++) {
    int id = bk->param[j];
    rc = dlrt_copy_h2d(e->grads.accum[id], 0, src + bk->at[j],
                       (size_t)g->tensors[id]->numel * sizeof(float), e->stream);
  }
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

/* The parameters with gradients, in tensor order: what the gradient vector
 * of dlrt_exec_gradients_read holds, one after the other. */
static int gradient_io(dlrt_exec_t *e, float *host, int64_t count, int write) {
  dlrt_graph_t *g = e->g;
  DLRT__CHECK_ARG(e && host, "dlrt_exec_gradients: executor or buffer is NULL");
  if (!e->grads.accum)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_gradients: run DLRT_RUN_GRADIENTS first");
  int64_t total = 0;
  for (int i = 0; i < g->n_tensors; i++)
    if (g->tensors[i]->kind == DLRT__TENSOR_PARAM && g->tensors[i]->grad) total += g->tensors[i]->numel;
  if (count != total)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_exec_gradients: %lld floats given, the "
                           "gradients hold %lld", (long long)count, (long long)total);
  int rc = DLRT_OK;
  int64_t at = 0;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    size_t bytes = (size_t)p->numel * sizeof(float);
    rc = write ? dlrt_copy_h2d(e->grads.accum[i], 0, host + at, bytes, e->stream)
               : dlrt_copy_d2h(host + at, e->grads.accum[i], 0, bytes, e->stream);
    at += p->numel;
  }
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

int dlrt_exec_gradients_read(dlrt_exec_t *e, float *dst, int64_t count) {
  return gradient_io(e, dst, count, 0);
}

int dlrt_exec_gradients_write(dlrt_exec_t *e, const float *src, int64_t count) {
  return gradient_io(e, (float *)src, count, 1);
}

/* The updates read the gradients where the accumulators hold them. A kept
 * gradient has a buffer of its own, which lives on (readable, freed with the
 * executor): it takes a copy of what the update applies. A spilling
 * executor's gradient storages are the pool's (it may evict them to the
 * host or disk before the updates read them): each takes a copy of its sum,
 * made resident for it, and the pool then moves it like any other storage;
 * the accumulators themselves stay on the device, outside the pool's budget
 * (the trainer takes their bytes off it, as for --accum). */
static int lend_sums(dlrt_exec_t *e) {
  dlrt_graph_t *g = e->g;
  int rc = DLRT_OK;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    dlrt_buffer_t **storage = &e->bufs[p->grad->owner->id];
    if (e->spill.pool) {
      if ((rc = dlrt__exec_use(e, p->grad, 1)) < 0) break;
      rc = dlrt_copy_d2d(dlrt__exec_buf(e, p->grad), 0, e->grads.accum[i], 0,
                         dlrt__tensor_bytes(p), e->stream);
      dlrt__exec_unuse(e, p->grad);
    } else if (*storage) {
      rc = dlrt_copy_d2d(*storage, 0, e->grads.accum[i], 0, dlrt__tensor_bytes(p), e->stream);
    } else {
      *storage = e->grads.accum[i];
    }
  }
  return rc;
}

static void take_back_sums(dlrt_exec_t *e) {
  dlrt_graph_t *g = e->g;
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    dlrt_buffer_t **storage = &e->bufs[p->grad->owner->id];
    if (e->spill.pool) {
      /* The copies end here, on the device and off it (the updates'
       * positions discard them too); a kept gradient keeps its copy. */
      if (!dlrt__persistent(p->grad->owner)) dlrt__mpool_discard(e->spill.pool, p->grad->owner->id);
    } else if (*storage == e->grads.accum[i]) {
      *storage = NULL; /* lent for the updates */
    }
  }
}

/* Whether e's gradient sums may be read (`reading`) or applied by fn: no
 * update of a sharded optimizer state here (the trainer updates the
 * shards), though ZeRO stage 1 keeps the sums whole to read. */
static int check_sums(const dlrt_exec_t *e, const char *fn, int reading) {
  if (e->shard.stage && !(reading && e->shard.stage == 1))
    return dlrt__set_error(DLRT_ERR_STATE, "%s: the optimizer state is sharded (ZeRO): the "
                           "trainer updates the shards", fn);
  if (!e->grads.accum || !e->g->optimized)
    return dlrt__set_error(DLRT_ERR_STATE, "%s: run DLRT_RUN_GRADIENTS on an optimized graph "
                           "first", fn);
  return DLRT_OK;
}

int dlrt__exec_grad_sums_check(dlrt_exec_t *e, int skip, float *squares, int *finite) {
  int rc = check_sums(e, "dlrt__exec_grad_sums_check", 1);
  if (rc == DLRT_OK) rc = lend_sums(e);
  if (rc == DLRT_OK && squares) rc = gradients_total(e, 1, skip, squares);
  /* Finite from the plain sum, as dlrt__exec_gradients_finite: squares of
   * finite scaled gradients can overflow. */
  float sum = 0;
  if (rc == DLRT_OK && finite) rc = gradients_total(e, 0, skip, &sum);
  take_back_sums(e);
  if (rc == DLRT_OK && finite) *finite = isfinite(sum);
  return rc;
}

int dlrt__exec_grad_runs(const dlrt_exec_t *e) { return e->grads.grad_runs; }

/* The update from the sums of the runs since the last one. clip < 0: this
 * executor's own clipping (and loss-scale verdict); else the caller's factor
 * and verdict, for executors whose gradients make one update together. */
static int apply_sums(dlrt_exec_t *e, float clip, int finite) {
  dlrt_graph_t *g = e->g;
  int rc = lend_sums(e);
  e->mode = DLRT_RUN_TRAIN;
  /* The mean of the runs since the last update (one, unless several
   * micro-batches were run: pipeline stages). */
  float mean = e->grads.grad_runs > 1 ? 1.0f / (float)e->grads.grad_runs : 1.0f;
  int own = clip < 0;
  if (own) clip = 1.0f, finite = 1;
  if (rc == DLRT_OK && own && e->grads.scaler.enabled) rc = dlrt__exec_gradients_finite(e, &finite);
  if (e->grads.scaler.enabled) mean /= e->grads.loss_scale;
  if (rc == DLRT_OK && own && finite && e->grads.clip_norm > 0)
    rc = dlrt__exec_clip_factor(e, mean, &clip);
  e->grads.grad_scale = mean * clip;
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  for (int k = 0; k < s->n && rc == DLRT_OK && finite; k++) {
    dlrt__node *n = g->nodes[s->order[k]];
    if (n->phase != DLRT__PHASE_UPDATE) continue;
    if (!e->spill.pool) {
      rc = dlrt__exec_run_node(e, n);
      continue;
    }
    /* Spilling: the parameter, its state and its gradient made resident
     * (or, with the optimizer offloaded, the update on their host copies)
     * as a training run's update position does. */
    int on_host = 0;
    rc = dlrt__spill_begin_node(e, s, k, &on_host);
    if (rc == DLRT_OK && !on_host) rc = dlrt__exec_run_node(e, n);
    int rc2 = dlrt__spill_end_node(e, s, k);
    if (rc == DLRT_OK) rc = rc2;
  }
  take_back_sums(e);
  if (rc == DLRT_OK && e->grads.scaler.enabled) dlrt__exec_update_loss_scale(e, finite);
  if (rc == DLRT_OK && finite) e->steps++;
  e->grads.grad_runs = 0;
  return rc;
}

int dlrt_exec_apply_gradients(dlrt_exec_t *e) {
  DLRT__CHECK_ARG(e, "dlrt_exec_apply_gradients: executor is NULL");
  int rc = check_sums(e, "dlrt_exec_apply_gradients", 0);
  return rc < 0 ? rc : apply_sums(e, -1.0f, 1);
}

int dlrt__exec_apply_gradients_as(dlrt_exec_t *e, float clip, int finite) {
  DLRT__CHECK_ARG(e && clip >= 0 && clip <= 1, "dlrt__exec_apply_gradients_as: executor is "
                  "NULL or a clipping factor of %g outside [0, 1]", clip);
  int rc = check_sums(e, "dlrt__exec_apply_gradients_as", 0);
  return rc < 0 ? rc : apply_sums(e, clip, finite);
}

/* ---------------------------------------------------------------- for lib/train */

int dlrt__exec_bucket_count(const dlrt_exec_t *e) { return e->grads.buckets.n_buckets; }

float *dlrt__exec_buckets_host(const dlrt_exec_t *e) { return e->grads.buckets.host; }

void dlrt__exec_bucket_range(const dlrt_exec_t *e, int b, int64_t *start, int64_t *count) {
  *start = e->grads.buckets.start[b];
  *count = e->grads.buckets.count[b];
}

dlrt_buffer_t *dlrt__exec_grad_sum(const dlrt_exec_t *e, int id) {
  return e->grads.accum ? e->grads.accum[id] : NULL;
}

/* ---------------------------------------------------------------- a run */

int dlrt__grads_run_begin(dlrt_exec_t *e, dlrt_run_mode mode, dlrt__grad_run *r) {
  *r = (dlrt__grad_run){.gradients_only = mode == DLRT_RUN_GRADIENTS};
  if (r->gradients_only) {
    /* Spilling too: the sums are made from the gradients' storages
     * wherever the pool holds them (dlrt__exec_accumulate acquires each). */
    if (e->grads.accum_steps > 1 || !e->g->optimized)
      return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_run: DLRT_RUN_GRADIENTS needs an "
                             "optimized graph, without accumulation");
    /* Under ZeRO stage 2 the trainer keeps its shard of the gradients. */
    int rc = e->shard.stage >= 2 ? DLRT_OK : dlrt__exec_ensure_accumulators(e);
    if (rc < 0) return rc;
  }
  r->last_micro = e->grads.micro + 1 >= e->grads.accum_steps;
  e->grads.grad_scale = 1.0f;
  e->grads.buckets.next = 0;
  return DLRT_OK;
}

int dlrt__grads_before_update(dlrt_exec_t *e, dlrt__grad_run *r) {
  r->decided = 1;
  int rc;
  if (r->gradients_only) {
    /* The gradients go to the accumulators, for the caller to combine. */
    r->skip_updates = 1;
    e->grads.micro = e->grads.grad_runs; /* the first run copies, later ones add */
    rc = e->shard.stage >= 2 ? DLRT_OK : dlrt__exec_accumulate(e, 0);
    e->grads.micro = 0;
    if (rc == DLRT_OK) e->grads.grad_runs++;
    return rc;
  }
  if (e->grads.accum_steps > 1) {
    if ((rc = dlrt__exec_accumulate(e, r->last_micro)) < 0) return rc;
    r->skip_updates = !r->last_micro;
    e->grads.grad_scale = 1.0f / (float)e->grads.accum_steps;
  }
  if (!r->skip_updates && e->grads.scaler.enabled) {
    /* Loss scaling: skip an update whose gradients overflowed, and divide
     * the scale out of the others. */
    int finite;
    if ((rc = dlrt__exec_gradients_finite(e, &finite)) < 0) return rc;
    r->checked = 1, r->overflow = !finite, r->skip_updates = r->overflow;
    e->grads.grad_scale /= e->grads.loss_scale;
  }
  float clip = 1.0f;
  if (!r->skip_updates && e->grads.clip_norm > 0 &&
      (rc = dlrt__exec_clip_factor(e, e->grads.grad_scale, &clip)) < 0)
    return rc;
  e->grads.grad_scale *= clip;
  return DLRT_OK;
}

int dlrt__grads_ready(dlrt_exec_t *e, const dlrt__grad_run *r, int k) {
  return r->gradients_only && e->grads.buckets.n ? dlrt__exec_stream_ready(e, k) : DLRT_OK;
}

void dlrt__grads_run_end(dlrt_exec_t *e, const dlrt__grad_run *r, int trained) {
  if (r->checked) dlrt__exec_update_loss_scale(e, !r->overflow);
  if (!trained || r->gradients_only) return;
  if (r->overflow) {
    e->grads.micro = 0; /* the update and its micro-batches are dropped */
  } else if (r->skip_updates) {
    e->grads.micro++;
  } else {
    e->grads.micro = 0;
    e->steps++;
  }
}
