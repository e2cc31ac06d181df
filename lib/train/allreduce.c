/* allreduce.c — data parallelism across processes (and machines): the
 * caller's all-reduce (dlrt_trainer_set_allreduce, its bucketed form
 * dlrt_trainer_set_allreduce_async, which dltrain backs with MPI, and the
 * device-pointer form), one replica per process or several (--devices,
 * parallel.c's dlrt__dp_step), with accumulation (one all-reduce an
 * update), spilling and DLRT_CHECKPOINT_AUTO's segments agreed over the
 * ranks. Split from parallel.c. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "mem/buffer.h"
#include "train/train.h"
#include "util/status.h"

/* The update's loss and correct count over the processes, one request
 * after the gradients' (*started: whether it was): this process's sums
 * over the update's micro-batches, its loss times 1 / world. */
int dlrt__start_update_tail(dlrt_trainer_t *t, float tail[2], void **request, int *started) {
  tail[0] = (float)t->dp_loss, tail[1] = (float)t->dp_correct;
  int rc = t->allreduce_start(t->allreduce_user, tail, 2, request);
  *started = rc == DLRT_OK;
  return rc;
}

int dlrt__dp_size_requests(dlrt_trainer_t *t) {
  /* Replicas of other batches may close their buckets elsewhere: room for
   * the most. */
  int buckets = 0;
  for (int i = 0; i < t->n_reps; i++)
    if (dlrt__exec_bucket_count(t->reps[i].e) > buckets)
      buckets = dlrt__exec_bucket_count(t->reps[i].e);
  free(t->requests);
  t->requests = calloc((size_t)buckets + 1, sizeof *t->requests);
  return t->requests ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

int dlrt_trainer_set_allreduce(dlrt_trainer_t *t, dlrt_allreduce_fn reduce, void *user) {
  DLRT__CHECK_ARG(t, "dlrt_trainer_set_allreduce: trainer is NULL");
  if (t->tp) { /* a split model's replicas: tensor_parallel.c sums each shard's gradients */
    t->allreduce = reduce, t->allreduce_start = NULL, t->allreduce_wait = NULL;
    t->allreduce_user = user;
    return dlrt__tp_set_replicas(t);
  }
  DLRT__CHECK_ARG(!reduce || (!t->n_reps && !t->n_stages && !t->streaming),
                  "dlrt_trainer_set_allreduce: not with --devices, --pipeline or streamed "
                  "parameters (--offload params) in this version (replicas and a pipeline "
                  "take dlrt_trainer_set_allreduce_async)");
  if (t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_allreduce: the model states are "
                           "sharded (dlrt_trainer_set_zero), which takes the bucketed form "
                           "(dlrt_trainer_set_allreduce_async)");
  /* --accum: each micro-batch a gradient run, summed in the executor. */
  int rc = dlrt_exec_set_accumulation(t->e, reduce ? 1 : t->accum);
  if (rc < 0) return rc;
  t->allreduce = reduce;
  t->allreduce_user = user;
  t->dp_micro = 0, t->dp_loss = t->dp_correct = 0;
  if (!reduce) return DLRT_OK;
  dlrt_exec_info info;
  rc = dlrt_exec_info_get(t->e, &info);
  if (rc < 0) return rc;
  t->n_grads = info.params;
  free(t->grads);
  t->grads = malloc((size_t)(t->n_grads + 2) * sizeof(float));
  return t->grads ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

/* The host's sum of the gradients, in bucket order (t->grad_sum). */
static int alloc_grad_sum(dlrt_trainer_t *t) {
  dlrt_exec_info info;
  int rc = dlrt_exec_info_get(t->e, &info);
  if (rc < 0) return rc;
  t->n_grads = info.params;
  free(t->grad_sum);
  t->grad_sum = malloc((size_t)(t->n_grads ? t->n_grads : 1) * sizeof(float));
  return t->grad_sum ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

/* DLRT_CHECKPOINT_AUTO across processes: every process chose its segments
 * for its own devices' budgets (t->rep_every), and a rank's choice may
 * differ where its devices do. One all-gather (a sum of vectors, each rank
 * its own entry) shows all of them; every rank takes the shortest segments
 * any chose (the least memory; none only where none needed them), so the
 * ranks recompute alike. */
static int agree_segments(dlrt_trainer_t *t) {
  int world = t->cfg.world > 1 ? t->cfg.world : 1, rank = t->cfg.rank;
  if (t->cfg.checkpoint != DLRT_CHECKPOINT_AUTO || world < 2 || rank < 0 || rank >= world ||
      t->rep_every < 0)
    return DLRT_OK;
  float *all = calloc((size_t)world, sizeof *all);
  if (!all) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  all[rank] = (float)t->rep_every;
  void *request;
  int rc = t->allreduce_start(t->allreduce_user, all, world, &request);
  if (rc == DLRT_OK) rc = t->allreduce_wait(t->allreduce_user, request);
  int pick = 0;
  for (int r = 0; r < world && rc == DLRT_OK; r++) {
    int every = (int)(all[r] + 0.5f);
    if (every > 0 && (pick == 0 || every < pick)) pick = every;
  }
  free(all);
  if (rc < 0 || pick == t->rep_every) return rc;
  t->rep_every = pick;
  if (!t->n_reps) return dlrt_exec_set_checkpointing(t->e, pick);
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++)
    rc = dlrt_exec_set_checkpointing(t->reps[i].e, pick);
  return rc;
}

/* Replicas in this process and across processes: the replicas' gradients
 * are combined on the host bucket by bucket (dlrt__dp_step), so the NCCL
 * all-reduce among them gives way to buckets on every replica; a request
 * per bucket, and the loss's. */
static int replicas_across(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                           dlrt_allreduce_wait_fn wait, void *user) {
  int rc = DLRT_OK;
  if (start && t->device_reduce) {
    t->device_reduce = 0;
    for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++)
      rc = dlrt__exec_stream_gradients(t->reps[i].e, DLRT_GRADIENT_BUCKET);
    if (rc < 0) return rc;
  }
  free(t->requests);
  t->requests = NULL;
  t->allreduce = NULL;
  t->reduce_on_device = 0;
  t->allreduce_start = start;
  t->allreduce_wait = wait;
  t->allreduce_user = user;
  t->dp_micro = 0, t->dp_loss = t->dp_correct = 0;
  if (!start) return DLRT_OK;
  if ((rc = agree_segments(t)) < 0) return rc;
  return dlrt__dp_size_requests(t);
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
  DLRT__CHECK_ARG(!start || !t->streaming, "dlrt_trainer_set_allreduce_async: not with "
                  "streamed parameters (--offload params), which make no gradient runs, in "
                  "this version (--offload activations, optimizer or all work)");
  if (t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_allreduce_async: the model states "
                           "are sharded (dlrt_trainer_set_zero): set the all-reduce first");
  if (t->n_reps) return replicas_across(t, start, wait, user);
  /* --accum: each micro-batch a gradient run, its buckets summed on the
   * host (grad_sum) and sent on the last one. */
  int rc = dlrt__exec_stream_gradients(t->e, start ? DLRT_GRADIENT_BUCKET : 0);
  if (rc == DLRT_OK) rc = dlrt_exec_set_accumulation(t->e, start ? 1 : t->accum);
  if (rc == DLRT_OK && start && t->accum > 1) rc = alloc_grad_sum(t);
  if (rc < 0) return rc;
  free(t->requests);
  t->requests = NULL;
  t->allreduce = NULL;
  t->reduce_on_device = 0;
  t->allreduce_start = start;
  t->allreduce_wait = wait;
  t->allreduce_user = user;
  t->dp_micro = 0, t->dp_loss = t->dp_correct = 0;
  if (!start) return DLRT_OK;
  /* The segments agreed before the buckets are counted (a new plan may
   * close them elsewhere). */
  if ((rc = agree_segments(t)) < 0) return rc;
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
  if (t->n_reps || t->accum > 1 || t->spilling)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_trainer_set_allreduce_device: not with "
                           "--devices, accumulation or spilling in this version (their "
                           "gradients are summed on the host): use "
                           "dlrt_trainer_set_allreduce_async");
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

/* --accum across processes: each micro-batch's gradients, bucket by bucket
 * as its backward pass finishes them, summed into t->grad_sum (bucket
 * order); on the update's last micro-batch each bucket of the sum goes to
 * the processes (divided by the world size) as soon as it is complete, and
 * the update's loss and correct count after them (under ZeRO each range of
 * the mean to its owner, which updates it). *loss and *correct: the
 * update's, global, on its last micro-batch, else 0. The executor divides
 * the sums by its gradient runs (the micro-batches) as it applies them. */
static int overlapped_accum(dlrt_trainer_t *t, float *loss, int64_t *correct) {
  dlrt_exec_t *e = t->e;
  int world = t->cfg.world > 0 ? t->cfg.world : 1, nb = dlrt__exec_bucket_count(e);
  int last = t->dp_micro + 1 >= t->accum, started = 0, tail_started = 0;
  float inv = 1.0f / (float)world, tail[2] = {0, 0}, l = 0;
  float *sum = t->grad_sum;
  /* ZeRO: the mean of the micro-batches here (the shards' updates count no
   * gradient runs); stages 2 and 3 reduce each range to its owner only. */
  float scale = t->zero ? inv / (float)t->accum : inv;
  int scatter = t->zero && dlrt__zero_stage(t) >= 2, rc = DLRT_OK;
  for (int b = 0; b < nb && rc == DLRT_OK; b++) {
    if ((rc = dlrt__exec_bucket_wait(e, b)) < 0) break;
    int64_t from, count;
    dlrt__exec_bucket_range(e, b, &from, &count);
    const float *v = dlrt__exec_buckets_host(e);
    for (int64_t k = from; k < from + count; k++) sum[k] = t->dp_micro ? sum[k] + v[k] : v[k];
    if (!last) continue;
    for (int64_t k = from; k < from + count; k++) sum[k] *= scale;
    if (scatter)
      rc = dlrt__zero_reduce_bucket(t, sum, from, count, t->requests, &started);
    else if ((rc = t->allreduce_start(t->allreduce_user, sum + from, count,
                                      &t->requests[started])) == DLRT_OK)
      started++;
  }
  /* (After a failure the requests started are still completed below.) */
  if (rc == DLRT_OK) rc = dlrt_exec_read(e, t->loss, &l, sizeof l);
  if (rc == DLRT_OK && !t->lm)
    rc = dlrt_exec_read(e, t->logits, t->host_logits,
                        (size_t)(t->batch * t->classes) * sizeof(float));
  if (rc == DLRT_OK) {
    t->dp_loss += (double)(l * inv);
    t->dp_correct += t->lm ? 0.0 : (double)dlrt__count_correct(t, t->batch);
  }
  if (rc == DLRT_OK && last)
    rc = dlrt__start_update_tail(t, tail, &t->requests[started], &tail_started);
  for (int b = 0; b < started + tail_started; b++) {
    int rc2 = t->allreduce_wait(t->allreduce_user, t->requests[b]);
    if (rc == DLRT_OK) rc = rc2;
  }
  *loss = 0, *correct = 0;
  if (rc < 0 || !last) {
    t->dp_micro = rc < 0 ? 0 : t->dp_micro + 1;
    if (rc < 0) t->dp_loss = t->dp_correct = 0;
    return rc;
  }
  t->dp_micro = 0, t->dp_loss = t->dp_correct = 0;
  *loss = tail[0];
  *correct = (int64_t)(tail[1] + 0.5f);
  if (t->zero) return dlrt__zero_update(t, sum);
  if ((rc = dlrt__exec_gradients_write_buckets(e, sum)) < 0) return rc;
  return dlrt_exec_apply_gradients(e);
}

int dlrt__allreduce_overlapped(dlrt_trainer_t *t, float *loss, int64_t *correct) {
  if (t->reduce_on_device) return allreduce_on_device(t, loss, correct);
  if (t->accum > 1) return overlapped_accum(t, loss, correct);
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
  float inv = 1.0f / (float)world;
  /* --accum: the executor sums the update's gradient runs; one all-reduce
   * after the last, with the update's loss and correct count. */
  t->dp_loss += (double)(*loss * inv);
  t->dp_correct += (double)*correct;
  if (++t->dp_micro < t->accum) {
    *loss = 0, *correct = 0;
    return DLRT_OK;
  }
  t->dp_micro = 0;
  int rc = dlrt_exec_gradients_read(t->e, t->grads, n);
  if (rc < 0) return rc;
  for (int64_t k = 0; k < n; k++) t->grads[k] *= inv;
  t->grads[n] = (float)t->dp_loss;
  t->grads[n + 1] = (float)t->dp_correct;
  t->dp_loss = t->dp_correct = 0;
  if ((rc = t->allreduce(t->allreduce_user, t->grads, n + 2)) < 0) return rc;
  *loss = t->grads[n];
  *correct = (int64_t)(t->grads[n + 1] + 0.5f);
  if ((rc = dlrt_exec_gradients_write(t->e, t->grads, n)) < 0) return rc;
  return dlrt_exec_apply_gradients(t->e);
}

