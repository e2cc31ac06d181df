/* parallel.c — data parallelism: replicas of the trainer's model on several
 * devices of any backends in one process (dlrt_trainer_set_devices), and
 * across processes through a caller's all-reduce (dlrt_trainer_set_allreduce,
 * which dltrain backs with MPI). Pipeline parallelism is in pipeline.c. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "mem/buffer.h"
#include "train/train.h"
#include "util/clock.h"
#include "util/status.h"

/* The training loader is made again at the next epoch: whether it copies
 * batches to the device depends on replicas and stages. */
void dlrt__drop_train_loader(dlrt_trainer_t *t) {
  dlrt_loader_destroy(t->train_loader);
  t->train_loader = NULL;
  t->train_data = NULL;
}

void dlrt__replica_free(dlrt__replica *r) {
  dlrt_exec_destroy(r->e);
  dlrt_graph_destroy(r->g);
  free(r->host_logits);
  memset(r, 0, sizeof *r);
}

/* Copies parameters, optimizer state and step from one executor to another
 * (the same model, another batch or device). */
static int copy_state(dlrt_exec_t *from, dlrt_exec_t *to) {
  dlrt_host_tensor *tensors;
  int n;
  int rc = dlrt_exec_export(from, 1, &tensors, &n);
  if (rc < 0) return rc;
  rc = dlrt_exec_import(to, tensors, n);
  dlrt_host_tensors_free(tensors, n);
  return rc;
}

/* (Re)builds replica r for `batch` rows on its device, with `state` (from
 * dlrt_exec_export). */
static int replica_build(dlrt_trainer_t *t, dlrt__replica *r, int64_t batch,
                         const dlrt_host_tensor *state, int n_state) {
  dlrt_device_t *dev = r->dev;
  dlrt__replica_free(r);
  r->dev = dev;
  r->batch = batch;
  dlrt_trainer_config c = t->cfg;
  c.batch = batch;
  int rc = dlrt_graph_create(&r->g);
  if (rc == DLRT_OK)
    rc = dlrt__build_classifier(r->g, &c, t->channels, t->height, t->width, t->classes,
                                &r->images, &r->labels, &r->logits, &r->loss);
  if (rc == DLRT_OK) rc = dlrt_exec_create(r->g, dev, t->cfg.seed, &r->e);
  if (rc == DLRT_OK && t->cfg.clip_norm > 0) rc = dlrt_exec_set_clip_norm(r->e, t->cfg.clip_norm);
  if (rc == DLRT_OK) rc = dlrt__set_loss_scaling(r->e, &t->cfg);
  if (rc == DLRT_OK && !t->device_reduce)
    rc = dlrt__exec_stream_gradients(r->e, DLRT_GRADIENT_BUCKET);
  if (rc == DLRT_OK) rc = dlrt_exec_import(r->e, state, n_state);
  if (rc == DLRT_OK &&
      !(r->host_logits = malloc((size_t)(t->lm ? 1 : batch * t->classes) * sizeof(float))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  return rc;
}

static void set_offsets(dlrt_trainer_t *t) {
  int64_t at = 0;
  for (int i = 0; i < t->n_reps; i++) t->reps[i].offset = at, at += t->reps[i].batch;
}

/* Whether the devices (distinct, of one backend) sum gradients among
 * themselves, device to device: one tiny all-reduce tells (NCCL on CUDA;
 * elsewhere, or without the library, the host combines them). */
static int devices_reduce(dlrt_device_t *const *devs, int n) {
  if (n < 2 || !dlrt__devices_share_allreduce(devs, n)) return 0;
  dlrt_stream_t *streams[64] = {0};
  dlrt_buffer_t *bufs[64] = {0};
  int rc = DLRT_OK;
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    if ((rc = dlrt_stream_create(devs[i], &streams[i])) == DLRT_OK)
      rc = dlrt_buffer_alloc(devs[i], sizeof(float), streams[i], &bufs[i]);
  if (rc == DLRT_OK) rc = dlrt__allreduce_devices(streams, bufs, 1, n);
  for (int i = 0; i < n; i++) {
    if (streams[i]) dlrt_stream_synchronize(streams[i]);
    dlrt_buffer_free(bufs[i]);
    if (streams[i]) dlrt_stream_destroy(streams[i]);
  }
  dlrt_clear_error();
  return rc == DLRT_OK;
}

int dlrt_trainer_set_devices(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                             const int64_t *split) {
  DLRT__CHECK_ARG(t && devs && n >= 1 && n <= 64, "dlrt_trainer_set_devices: trainer or "
                  "devices is NULL, or %d devices (1 to 64)", n);
  DLRT__CHECK_ARG(t->accum == 1 && !t->spilling && t->cfg.checkpoint == 0,
                  "dlrt_trainer_set_devices: data parallelism goes without accumulation, "
                  "spilling and checkpointing in this version");
  if (t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_devices: the replicas' model "
                           "states are sharded (dlrt_trainer_set_zero): set the devices first");
  int64_t total = 0;
  for (int i = 0; split && i < n; i++) {
    DLRT__CHECK_ARG(split[i] >= 1, "dlrt_trainer_set_devices: device %d gets %lld rows",
                    i, (long long)split[i]);
    total += split[i];
  }
  if (split && total != t->batch)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_trainer_set_devices: the split adds up "
                           "to %lld rows, the batch is %lld", (long long)total,
                           (long long)t->batch);
  if (!split && t->batch < n)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a batch of %lld cannot be split between %d "
                           "devices", (long long)t->batch, n);
  for (int i = 0; i < t->n_reps; i++) dlrt__replica_free(&t->reps[i]);
  free(t->reps);
  t->reps = NULL;
  t->n_reps = 0;
  dlrt__drop_train_loader(t);
  if (n == 1 && devs[0] == t->dev) return DLRT_OK; /* plain again */
  t->reps = calloc((size_t)n, sizeof *t->reps);
  dlrt_exec_info info;
  int rc = t->reps ? dlrt_exec_info_get(t->e, &info)
                   : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc < 0) return rc;
  t->n_grads = info.params;
  free(t->grads);
  free(t->grad_sum);
  t->grads = malloc((size_t)t->n_grads * sizeof(float));
  t->grad_sum = malloc((size_t)t->n_grads * sizeof(float));
  if (!t->grads || !t->grad_sum) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  t->n_reps = n;
  dlrt_host_tensor *state;
  int n_state;
  if ((rc = dlrt_exec_export(t->e, 1, &state, &n_state)) < 0) return rc;
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->e, &scale);
  t->device_reduce = devices_reduce(devs, n);
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    t->reps[i].dev = devs[i];
    /* Even shares (the first ones a row more) until measured. */
    int64_t rows = split ? split[i] : t->batch / n + (i < t->batch % n);
    rc = replica_build(t, &t->reps[i], rows, state, n_state);
    if (rc == DLRT_OK) dlrt__exec_restore_loss_scale(t->reps[i].e, &scale);
  }
  dlrt_host_tensors_free(state, n_state);
  set_offsets(t);
  t->probe_steps = split ? 0 : 4;
  return rc;
}

int dlrt_trainer_split(const dlrt_trainer_t *t, int64_t *split, int *n) {
  DLRT__CHECK_ARG(t && n, "dlrt_trainer_split: trainer or n is NULL");
  *n = t->n_reps ? t->n_reps : 1;
  if (split) {
    if (!t->n_reps) split[0] = t->batch;
    for (int i = 0; i < t->n_reps; i++) split[i] = t->reps[i].batch;
  }
  return DLRT_OK;
}

/* After the probe: shares in proportion to each replica's rows per second
 * (at least a row each, adding up to the batch), replicas rebuilt. */
static int rebalance(dlrt_trainer_t *t) {
  double speed[64], sum = 0;
  for (int i = 0; i < t->n_reps; i++) {
    speed[i] = t->reps[i].seconds > 0 ? (double)t->reps[i].batch / t->reps[i].seconds : 1.0;
    sum += speed[i];
  }
  int64_t rows[64], given = 0;
  for (int i = 0; i < t->n_reps; i++) {
    rows[i] = (int64_t)((double)t->batch * speed[i] / sum);
    if (rows[i] < 1) rows[i] = 1;
    given += rows[i];
  }
  /* The rounding's rest goes to (or comes from) the fastest. */
  int fastest = 0;
  for (int i = 1; i < t->n_reps; i++)
    if (speed[i] > speed[fastest]) fastest = i;
  rows[fastest] += t->batch - given;
  if (rows[fastest] < 1) return DLRT_OK; /* too small a batch to move: keep */
  dlrt_host_tensor *state;
  int n_state;
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->reps[0].e, &scale);
  /* Under ZeRO the whole state comes from the shards' host copies, and the
   * replicas shard again once rebuilt. */
  int rc = t->zero ? dlrt__zero_rebuild_begin(t, &state, &n_state)
                   : dlrt_exec_export(t->reps[0].e, 1, &state, &n_state);
  int exported = rc == DLRT_OK;
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
    t->reps[i].seconds = 0;
    if (rows[i] == t->reps[i].batch) continue;
    rc = replica_build(t, &t->reps[i], rows[i], state, n_state);
    if (rc == DLRT_OK) dlrt__exec_restore_loss_scale(t->reps[i].e, &scale);
  }
  if (exported) dlrt_host_tensors_free(state, n_state);
  set_offsets(t);
  if (rc == DLRT_OK && t->zero) rc = dlrt__zero_rebuild_end(t);
  return rc;
}

/* One data-parallel step: each replica computes the gradient of the mean
 * loss over its rows; the mean over the whole batch is the combination
 * weighted by rows / batch (summed on the host in replica order, so the
 * result does not depend on timing); every replica applies the same
 * update. While probing, the replicas run one after the other and are
 * timed; then they run side by side. */
int dlrt__dp_step(dlrt_trainer_t *t, const void *inputs, const int32_t *labels, float lr,
                  float *loss, int64_t *correct) {
  /* Per row: C x H x W pixels and a label, or a window of T tokens and
   * their T next tokens. */
  int64_t pixels = t->channels * t->height * t->width, labels_per_row = t->lm ? t->width : 1;
  int probing = t->probe_steps > 0;
  int rc = DLRT_OK;
  double t0 = 0;
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
    dlrt__replica *r = &t->reps[i];
    if (probing) t0 = dlrt__now_s();
    if ((rc = dlrt_exec_set_lr(r->e, lr)) < 0 ||
        (rc = t->lm ? dlrt_exec_write(r->e, r->images,
                                      (const int32_t *)inputs + r->offset * pixels,
                                      (size_t)(r->batch * pixels) * sizeof(int32_t))
                    : dlrt__exec_write_f32(r->e, r->images,
                                           (const float *)inputs + r->offset * pixels,
                                           r->batch * pixels)) < 0 ||
        (rc = dlrt_exec_write(r->e, r->labels, labels + r->offset * labels_per_row,
                              (size_t)(r->batch * labels_per_row) * sizeof(int32_t))) < 0 ||
        (rc = dlrt_exec_run(r->e, DLRT_RUN_GRADIENTS)) < 0)
      break;
    if (probing && (rc = dlrt_stream_synchronize(dlrt_exec_stream(r->e))) == DLRT_OK)
      r->seconds += dlrt__now_s() - t0;
  }
  if (t->device_reduce) {
    /* Device to device: each replica weighs its gradients by its share of
     * the batch, then one all-reduce per parameter sums them in place on
     * every device, where the updates read them. */
    dlrt_graph_t *g = dlrt__exec_graph(t->reps[0].e);
    dlrt_stream_t *streams[64];
    dlrt_buffer_t *bufs[64];
    for (int i = 0; i < t->n_reps; i++) streams[i] = dlrt_exec_stream(t->reps[i].e);
    for (int id = 0; id < g->n_tensors && rc == DLRT_OK; id++) {
      const dlrt_tensor_t *p = g->tensors[id];
      if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
      for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
        bufs[i] = dlrt__exec_grad_sum(t->reps[i].e, id);
        rc = dlrt_elementwise(streams[i], DLRT_EW_SCALE, DLRT_F32, p->numel,
                              (float)t->reps[i].batch / (float)t->batch, bufs[i], 0, bufs[i], 0,
                              NULL, 0);
      }
      if (rc == DLRT_OK) rc = dlrt__allreduce_devices(streams, bufs, p->numel, t->n_reps);
    }
  }
  /* The gradients, bucket by bucket as the backward passes finish them
   * (last layers first): combining a bucket overlaps the backward pass of
   * the layers before it. In bucket order; per element in replica order,
   * so the sum does not depend on timing. */
  const dlrt_exec_t *first = t->reps[0].e;
  for (int b = 0; !t->device_reduce && b < dlrt__exec_bucket_count(first) && rc == DLRT_OK; b++) {
    int64_t from, count;
    dlrt__exec_bucket_range(first, b, &from, &count);
    int64_t to = from + count;
    for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
      dlrt__replica *r = &t->reps[i];
      if ((rc = dlrt__exec_bucket_wait(r->e, b)) < 0) break;
      const float *g = dlrt__exec_buckets_host(r->e), w = (float)r->batch / (float)t->batch;
      for (int64_t k = from; k < to; k++) t->grad_sum[k] = i ? t->grad_sum[k] + w * g[k] : w * g[k];
    }
  }
  *loss = 0;
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
    dlrt__replica *r = &t->reps[i];
    float l = 0;
    if ((rc = dlrt_exec_read(r->e, r->loss, &l, sizeof l)) < 0 ||
        (!t->lm && (rc = dlrt_exec_read(r->e, r->logits, r->host_logits,
                                        (size_t)(r->batch * t->classes) * sizeof(float))) < 0))
      break;
    /* Each row's loss is a mean over its positions: rows weigh alike. */
    float w = (float)r->batch / (float)t->batch;
    *loss += w * l;
    for (int64_t j = 0; !t->lm && j < r->batch; j++) {
      const float *row = r->host_logits + j * t->classes;
      int64_t best = 0;
      for (int64_t c = 1; c < t->classes; c++)
        if (row[c] > row[best]) best = c;
      *correct += best == labels[r->offset + j];
    }
  }
  /* ZeRO: each replica updates its range of the mean gradients. */
  if (rc == DLRT_OK && t->zero) rc = dlrt__zero_update(t, t->grad_sum);
  for (int i = 0; i < t->n_reps && rc == DLRT_OK && !t->zero; i++)
    if (t->device_reduce ||
        (rc = dlrt__exec_gradients_write_buckets(t->reps[i].e, t->grad_sum)) == DLRT_OK)
      rc = dlrt_exec_apply_gradients(t->reps[i].e);
  if (rc == DLRT_OK && probing && --t->probe_steps == 0) rc = rebalance(t);
  return rc;
}

int dlrt_trainer_set_allreduce(dlrt_trainer_t *t, dlrt_allreduce_fn reduce, void *user) {
  DLRT__CHECK_ARG(t, "dlrt_trainer_set_allreduce: trainer is NULL");
  if (t->tp) { /* a split model's replicas: tensor_parallel.c sums each shard's gradients */
    t->allreduce = reduce, t->allreduce_start = NULL, t->allreduce_wait = NULL;
    t->allreduce_user = user;
    return dlrt__tp_set_replicas(t);
  }
  DLRT__CHECK_ARG(!reduce || (t->accum == 1 && !t->spilling && !t->n_reps && !t->n_stages),
                  "dlrt_trainer_set_allreduce: not with accumulation, spilling, --devices or "
                  "--pipeline in this version (a pipeline takes "
                  "dlrt_trainer_set_allreduce_async)");
  if (t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_allreduce: the model states are "
                           "sharded (dlrt_trainer_set_zero), which takes the bucketed form "
                           "(dlrt_trainer_set_allreduce_async)");
  t->allreduce = reduce;
  t->allreduce_user = user;
  if (!reduce) return DLRT_OK;
  dlrt_exec_info info;
  int rc = dlrt_exec_info_get(t->e, &info);
  if (rc < 0) return rc;
  t->n_grads = info.params;
  free(t->grads);
  t->grads = malloc((size_t)(t->n_grads + 2) * sizeof(float));
  return t->grads ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

/* One step across processes: this process's gradients, loss and correct
 * count are summed over all of them (its own scaled by 1 / world first),
 * then applied. *loss and *correct come back global. */
int dlrt_trainer_set_allreduce_async(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                                     dlrt_allreduce_wait_fn wait, void *user) {
  DLRT__CHECK_ARG(t && (!start) == (!wait), "dlrt_trainer_set_allreduce_async: trainer is "
                  "NULL, or only one of start and wait is given");
  if (t->tp) { /* a split model's replicas: tensor_parallel.c sums each shard's gradients */
    t->allreduce = NULL, t->allreduce_start = start, t->allreduce_wait = wait;
    t->allreduce_user = user;
    return dlrt__tp_set_replicas(t);
  }
  if (t->n_stages && start) { /* a pipeline's replicas: pipeline.c sums each stage's */
    t->allreduce = NULL, t->allreduce_start = start, t->allreduce_wait = wait;
    t->allreduce_user = user;
    t->reduce_on_device = 0;
    return dlrt__pipeline_set_ranks(t);
  }
  DLRT__CHECK_ARG(!start || (t->accum == 1 && !t->spilling && !t->n_reps),
                  "dlrt_trainer_set_allreduce_async: not with accumulation, spilling or "
                  "--devices in this version");
  if (t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_allreduce_async: the model states "
                           "are sharded (dlrt_trainer_set_zero): set the all-reduce first");
  int rc = dlrt__exec_stream_gradients(t->e, start ? DLRT_GRADIENT_BUCKET : 0);
  if (rc < 0) return rc;
  free(t->requests);
  t->requests = NULL;
  t->allreduce = NULL;
  t->reduce_on_device = 0;
  t->allreduce_start = start;
  t->allreduce_wait = wait;
  t->allreduce_user = user;
  if (!start) return DLRT_OK;
  t->requests = calloc((size_t)dlrt__exec_bucket_count(t->e) + 1, sizeof *t->requests);
  return t->requests ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

int dlrt_trainer_set_allreduce_device(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                                      dlrt_allreduce_wait_fn wait, void *user) {
  DLRT__CHECK_ARG(t && start && wait, "dlrt_trainer_set_allreduce_device: trainer, start or "
                  "wait is NULL");
  if (t->tp || t->n_stages)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_trainer_set_allreduce_device: a split "
                           "model's replicas (tensor or pipeline parallel) sum their parts' "
                           "gradients through the host: use dlrt_trainer_set_allreduce_async");
  if (!dlrt__device_has_addresses(t->dev))
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_trainer_set_allreduce_device: %s has "
                           "no device addresses (not a CUDA device); use "
                           "dlrt_trainer_set_allreduce_async",
                           dlrt_device_spec(t->dev));
  int rc = dlrt_trainer_set_allreduce_async(t, start, wait, user);
  if (rc < 0) return rc;
  /* No host buckets: a request per parameter instead. */
  if ((rc = dlrt__exec_stream_gradients(t->e, 0)) < 0) return rc;
  dlrt_exec_info info;
  if ((rc = dlrt_exec_info_get(t->e, &info)) < 0) return rc;
  free(t->requests);
  t->requests = calloc((size_t)dlrt__exec_graph(t->e)->n_tensors + 1, sizeof *t->requests);
  if (!t->requests) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  t->reduce_on_device = 1;
  return DLRT_OK;
}

/* After the gradients: this process's loss (times `inv`, 1 / the world
 * size) and its correct predictions go to the others as one more request,
 * the tail (*started: whether it was). */
static int start_tail(dlrt_trainer_t *t, float *loss, float inv, float tail[2], void **request,
                      int *started) {
  int rc;
  /* A language model counts no correct predictions (its logits, B x T x
   * vocabulary, stay on the device). */
  if ((rc = dlrt_exec_read(t->e, t->loss, loss, sizeof *loss)) < 0 ||
      (!t->lm && (rc = dlrt_exec_read(t->e, t->logits, t->host_logits,
                                      (size_t)(t->batch * t->classes) * sizeof(float))) < 0))
    return rc;
  tail[0] = *loss * inv;
  tail[1] = t->lm ? 0.0f : (float)dlrt__count_correct(t, t->batch);
  rc = t->allreduce_start(t->allreduce_user, tail, 2, request);
  *started = rc == DLRT_OK;
  return rc;
}

/* The device-pointer form: each parameter's gradient (in the executor's
 * accumulator) divided by the world size on the device, the stream waited
 * for, then one request per parameter on device memory. */
static int allreduce_on_device(dlrt_trainer_t *t, float *loss, int64_t *correct) {
  dlrt_exec_t *e = t->e;
  dlrt_graph_t *g = dlrt__exec_graph(e);
  dlrt_stream_t *stream = dlrt_exec_stream(e);
  int world = t->cfg.world > 0 ? t->cfg.world : 1, started = 0;
  float inv = 1.0f / (float)world, tail[2];
  int rc = DLRT_OK;
  for (int id = 0; id < g->n_tensors && rc == DLRT_OK; id++) {
    const dlrt_tensor_t *p = g->tensors[id];
    if (p->kind == DLRT__TENSOR_PARAM && p->grad)
      rc = dlrt_elementwise(stream, DLRT_EW_SCALE, DLRT_F32, p->numel, inv,
                            dlrt__exec_grad_sum(e, id), 0, dlrt__exec_grad_sum(e, id), 0, NULL, 0);
  }
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(stream);
  for (int id = 0; id < g->n_tensors && rc == DLRT_OK; id++) {
    const dlrt_tensor_t *p = g->tensors[id];
    if (p->kind != DLRT__TENSOR_PARAM || !p->grad) continue;
    float *on_device = dlrt__buffer_device_address(dlrt__exec_grad_sum(e, id));
    if ((rc = t->allreduce_start(t->allreduce_user, on_device, p->numel,
                                 &t->requests[started])) == DLRT_OK)
      started++;
  }
  int tail_started = 0;
  if (rc == DLRT_OK) rc = start_tail(t, loss, inv, tail, &t->requests[started], &tail_started);
  for (int k = 0; k < started + tail_started; k++) {
    int rc2 = t->allreduce_wait(t->allreduce_user, t->requests[k]);
    if (rc == DLRT_OK) rc = rc2;
  }
  if (rc < 0) return rc;
  *loss = tail[0];
  *correct = (int64_t)(tail[1] + 0.5f);
  return dlrt_exec_apply_gradients(e);
}

int dlrt__allreduce_overlapped(dlrt_trainer_t *t, float *loss, int64_t *correct) {
  if (t->reduce_on_device) return allreduce_on_device(t, loss, correct);
  dlrt_exec_t *e = t->e;
  int world = t->cfg.world > 0 ? t->cfg.world : 1, nb = dlrt__exec_bucket_count(e), started = 0;
  int tail_started = 0;
  float inv = 1.0f / (float)world, tail[2];
  int rc = DLRT_OK;
  /* ZeRO stages 2 and 3 reduce each range of a bucket to its owner only. */
  int scatter = t->zero && dlrt__zero_stage(t) >= 2;
  /* Each bucket to the processes as soon as the backward pass has it. */
  for (int b = 0; b < nb && rc == DLRT_OK; b++) {
    if ((rc = dlrt__exec_bucket_wait(e, b)) < 0) break;
    int64_t start, count;
    dlrt__exec_bucket_range(e, b, &start, &count);
    float *v = dlrt__exec_buckets_host(e) + start;
    for (int64_t k = 0; k < count; k++) v[k] *= inv;
    if (scatter) {
      rc = dlrt__zero_reduce_bucket(t, dlrt__exec_buckets_host(e), start, count, t->requests,
                                    &started);
    } else if ((rc = t->allreduce_start(t->allreduce_user, v, count,
                                        &t->requests[started])) == DLRT_OK) {
      started++;
    }
  }
  if (rc == DLRT_OK) rc = start_tail(t, loss, inv, tail, &t->requests[started], &tail_started);
  /* Every started request is completed, also after a failure. */
  for (int b = 0; b < started + tail_started; b++) {
    int rc2 = t->allreduce_wait(t->allreduce_user, t->requests[b]);
    if (rc == DLRT_OK) rc = rc2;
  }
  if (rc < 0) return rc;
  *loss = tail[0];
  *correct = (int64_t)(tail[1] + 0.5f);
  if (t->zero) return dlrt__zero_update(t, dlrt__exec_buckets_host(e));
  if ((rc = dlrt__exec_gradients_write_buckets(e, dlrt__exec_buckets_host(e))) < 0) return rc;
  return dlrt_exec_apply_gradients(e);
}

int dlrt__allreduce_step(dlrt_trainer_t *t, float *loss, int64_t *correct) {
  int world = t->cfg.world > 0 ? t->cfg.world : 1;
  int64_t n = t->n_grads;
  int rc = dlrt_exec_gradients_read(t->e, t->grads, n);
  if (rc < 0) return rc;
  float inv = 1.0f / (float)world;
  for (int64_t k = 0; k < n; k++) t->grads[k] *= inv;
  t->grads[n] = *loss * inv;
  t->grads[n + 1] = (float)*correct;
  if ((rc = t->allreduce(t->allreduce_user, t->grads, n + 2)) < 0) return rc;
  *loss = t->grads[n];
  *correct = (int64_t)(t->grads[n + 1] + 0.5f);
  if ((rc = dlrt_exec_gradients_write(t->e, t->grads, n)) < 0) return rc;
  return dlrt_exec_apply_gradients(t->e);
}

/* The main executor takes the replicas' parameters (for evaluation and
 * checkpoints). */
int dlrt__dp_sync_main(dlrt_trainer_t *t) {
  if (t->tp) return dlrt__tp_sync(t); /* ZeRO over a split model's replicas: the state */
  if (t->zero) return dlrt__zero_sync_main(t);
  if (t->n_reps) return copy_state(t->reps[0].e, t->e);
  return dlrt__pipeline_sync_main(t);
}
