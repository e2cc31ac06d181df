/* parallel.c — data parallelism: replicas of the trainer's model on several
 * devices of any backends in one process (dlrt_trainer_set_devices), with
 * accumulation, checkpointing and a budget each; across processes through
 * a caller's all-reduce in allreduce.c. Pipeline parallelism is in
 * pipeline.c. */
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

/* Under the replicas' budget (dlrt_trainer_set_devices_memory): replica r
 * spills within it on its device, as one device's trainer does
 * (dlrt__spill_budget). Its gradient runs' sums (one float per parameter
 * gradient, exec_grads.c) and, with clipping, the squares' workspace (as
 * much again, as trainer.c counts it) stay on the device beside its pool:
 * the pool gets the budget less their bytes (and a granule per tensor's
 * rounding). */
static uint64_t replica_outside(const dlrt_trainer_t *t, const dlrt_exec_info *info) {
  uint64_t sums = (uint64_t)info->params * sizeof(float) + 64 * 512;
  return t->cfg.clip_norm > 0 ? 2 * sums : sums;
}

static int replica_spill(dlrt_trainer_t *t, dlrt__replica *r) {
  dlrt_exec_info info;
  int rc = dlrt_exec_info_get(r->e, &info);
  if (rc < 0) return rc;
  uint64_t outside = replica_outside(t, &info);
  dlrt_spill_config c = {0};
  char note[160] = "";
  rc = dlrt__spill_budget(r->e, r->dev, &t->rep_spill, outside, &c, note, sizeof note);
  if (rc == DLRT_OK && c.device_budget) {
    rc = dlrt_exec_set_spill(r->e, &c);
    r->spill_budget = c.device_budget + outside;
  }
  if (rc < 0)
    return dlrt__set_error(rc, "data-parallel replica of %lld rows on %s: %s%s",
                           (long long)r->batch, dlrt_device_spec(r->dev), dlrt_last_error(),
                           note);
  return DLRT_OK;
}

/* The replica's checkpointing: the trainer's segments, or for
 * DLRT_CHECKPOINT_AUTO one choice for every replica (made on the first
 * built, for its device's budget with its gradient sums beside the plan;
 * the replicas then recompute alike whatever their devices). */
static int replica_checkpointing(dlrt_trainer_t *t, dlrt__replica *r) {
  if (t->cfg.checkpoint != DLRT_CHECKPOINT_AUTO)
    return dlrt_exec_set_checkpointing(r->e, t->cfg.checkpoint);
  if (t->rep_every >= 0) return dlrt_exec_set_checkpointing(r->e, t->rep_every);
  dlrt_exec_info info;
  int rc = dlrt_exec_info_get(r->e, &info);
  return rc < 0 ? rc : dlrt__choose_checkpoint_every(r->e, r->g, r->dev,
                                                     t->rep_spill.device_budget,
                                                     replica_outside(t, &info), &t->rep_every);
}

/* (Re)builds replica r for `batch` rows on its device, with `state` (from
 * dlrt_exec_export): checkpointed and spilling as the trainer's replicas
 * are, its storage made once both are decided (so a budget holds from the
 * first parameter on). No accumulation in the executor: each micro-batch
 * is a gradient run, whose sums the updates take (dlrt__dp_step). */
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
  if (rc == DLRT_OK) rc = dlrt__exec_create_deferred(r->g, dev, t->cfg.seed, &r->e);
  if (rc == DLRT_OK && t->cfg.clip_norm > 0) rc = dlrt_exec_set_clip_norm(r->e, t->cfg.clip_norm);
  if (rc == DLRT_OK) rc = dlrt__set_loss_scaling(r->e, &t->cfg);
  if (rc == DLRT_OK && t->cfg.checkpoint != 0) rc = replica_checkpointing(t, r);
  if (rc == DLRT_OK && t->rep_spill.device_budget) rc = replica_spill(t, r);
  if (rc == DLRT_OK) rc = dlrt__exec_materialize(r->e);
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
  /* The replicas spill under their own budget (dlrt_trainer_set_devices_memory);
   * the main executor only evaluates and checkpoints. */
  if (t->spilling || t->streaming)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_trainer_set_devices: the trainer "
                           "spills on its own device (config.spill): give the replicas their "
                           "budget with dlrt_trainer_set_devices_memory instead, and the "
                           "trainer none");
  if (dlrt__across_processes(t))
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_devices: set the devices before "
                           "the all-reduce across processes (dlrt_trainer_set_allreduce_async)");
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
  /* The NCCL all-reduce sums one gradient run's; accumulation and the
   * processes' all-reduce take the host's bucketed sums. */
  t->device_reduce = t->accum == 1 && !t->rep_spill.device_budget && devices_reduce(devs, n);
  t->rep_every = -1;
  t->dp_micro = 0;
  memset(&t->rep_retired, 0, sizeof t->rep_retired);
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

int dlrt_trainer_set_devices_memory(dlrt_trainer_t *t, const dlrt_spill_config *spill) {
  DLRT__CHECK_ARG(t && spill, "dlrt_trainer_set_devices_memory: trainer or spill is NULL");
  /* Streamed parameters make no gradient runs, which the replicas hand out. */
  if (spill->policy == DLRT_OFFLOAD_PARAMS && spill->device_budget)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_trainer_set_devices_memory: the "
                           "replicas spill (--offload activations, optimizer or all); streamed "
                           "parameters (--offload params) make no gradient runs, which data "
                           "parallelism combines, in this version");
  if (t->n_reps)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_devices_memory: the replicas are "
                           "built already; give their budget before dlrt_trainer_set_devices");
  t->rep_spill = *spill;
  return DLRT_OK;
}

int dlrt__dp_spills(const dlrt_trainer_t *t) {
  for (int i = 0; i < t->n_reps; i++)
    if (t->reps[i].spill_budget) return 1;
  return 0;
}

int dlrt__dp_spill_stats(dlrt_trainer_t *t, dlrt_spill_stats *out) {
  *out = t->rep_retired;
  int rc = DLRT_OK;
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
    dlrt_spill_stats s;
    if (!t->reps[i].spill_budget || (rc = dlrt_exec_spill_stats(t->reps[i].e, &s)) < 0)
      continue;
    dlrt__spill_stats_add(out, &s);
  }
  return rc;
}

int dlrt_trainer_replica_memory(dlrt_trainer_t *t, int i, uint64_t *spill_budget,
                                uint64_t *spill_peak) {
  DLRT__CHECK_ARG(t && spill_budget && spill_peak, "dlrt_trainer_replica_memory: trainer, "
                  "spill_budget or spill_peak is NULL");
  DLRT__CHECK_ARG(i >= 0 && i < t->n_reps, "dlrt_trainer_replica_memory: replica %d of %d "
                  "(dlrt_trainer_set_devices)", i, t->n_reps);
  const dlrt__replica *r = &t->reps[i];
  *spill_budget = r->spill_budget, *spill_peak = 0;
  dlrt_spill_stats s;
  int rc = r->spill_budget ? dlrt_exec_spill_stats(r->e, &s) : DLRT_OK;
  if (rc == DLRT_OK && r->spill_budget) *spill_peak = s.peak_resident;
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
    /* Its spilling figures outlive it: the epoch's are differences. */
    dlrt_spill_stats gone;
    if (t->reps[i].spill_budget && (rc = dlrt_exec_spill_stats(t->reps[i].e, &gone)) == DLRT_OK)
      dlrt__spill_stats_add(&t->rep_retired, &gone);
    if (rc == DLRT_OK) rc = replica_build(t, &t->reps[i], rows[i], state, n_state);
    if (rc == DLRT_OK) dlrt__exec_restore_loss_scale(t->reps[i].e, &scale);
  }
  if (exported) dlrt_host_tensors_free(state, n_state);
  set_offsets(t);
  if (rc == DLRT_OK && t->zero) rc = dlrt__zero_rebuild_end(t);
  if (rc == DLRT_OK && t->allreduce_start) rc = dlrt__dp_size_requests(t);
  return rc;
}

/* The replicas' gradients of a micro-batch, bucket by bucket as the
 * backward passes finish them (last layers first), into t->grad_sum (bucket
 * order), each weighed by its rows / batch: combining a bucket overlaps the
 * backward pass of the layers before it. Per element in replica order, and
 * micro-batch after micro-batch, so the sum does not depend on timing. On
 * the update's last micro-batch across processes, each bucket goes to the
 * processes (divided by the world size) as soon as it is summed here; the
 * requests started are counted in *started. */
static int combine_buckets(dlrt_trainer_t *t, int last, int *started) {
  const dlrt_exec_t *first = t->reps[0].e;
  int across = last && dlrt__across_processes(t) && t->allreduce_start;
  float inv = 1.0f / (float)(t->cfg.world > 1 ? t->cfg.world : 1);
  int rc = DLRT_OK;
  for (int b = 0; b < dlrt__exec_bucket_count(first) && rc == DLRT_OK; b++) {
    int64_t from, count;
    dlrt__exec_bucket_range(first, b, &from, &count);
    int64_t to = from + count;
    for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
      dlrt__replica *r = &t->reps[i];
      if ((rc = dlrt__exec_bucket_wait(r->e, b)) < 0) break;
      const float *g = dlrt__exec_buckets_host(r->e), w = (float)r->batch / (float)t->batch;
      int fresh = i == 0 && t->dp_micro == 0; /* the update's first term */
      for (int64_t k = from; k < to; k++)
        t->grad_sum[k] = fresh ? w * g[k] : t->grad_sum[k] + w * g[k];
    }
    if (rc < 0 || !across) continue;
    for (int64_t k = from; k < to; k++) t->grad_sum[k] *= inv;
    if ((rc = t->allreduce_start(t->allreduce_user, t->grad_sum + from, count,
                                 &t->requests[*started])) == DLRT_OK)
      (*started)++;
  }
  return rc;
}

/* Device to device (NCCL): each replica weighs its gradients by its share
 * of the batch, then one all-reduce per parameter sums them in place on
 * every device, where the updates read them. */
static int reduce_on_devices(dlrt_trainer_t *t) {
  dlrt_graph_t *g = dlrt__exec_graph(t->reps[0].e);
  dlrt_stream_t *streams[64];
  dlrt_buffer_t *bufs[64];
  int rc = DLRT_OK;
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
  return rc;
}

/* One data-parallel micro-batch: each replica computes the gradient of the
 * mean loss over its rows (a gradient run, summed in its executor over the
 * update's micro-batches); the mean over the whole batch is the combination
 * weighted by rows / batch (summed on the host in replica order, so the
 * result does not depend on timing); after the update's last micro-batch
 * (--accum), the sums go once over the processes and every replica applies
 * the same update (the mean of the micro-batches: its executor divides by
 * its gradient runs). While probing, the replicas run one after the other
 * and are timed; then they run side by side. *loss and *correct: this
 * micro-batch's, or across processes the whole update's on its last one
 * (0 before). */
int dlrt__dp_step(dlrt_trainer_t *t, const void *inputs, const int32_t *labels, float lr,
                  float *loss, int64_t *correct) {
  /* Per row: C x H x W pixels and a label, or a window of T tokens and
   * their T next tokens. */
  int64_t pixels = t->channels * t->height * t->width, labels_per_row = t->lm ? t->width : 1;
  int probing = t->probe_steps > 0, last = t->dp_micro + 1 >= t->accum;
  int across = dlrt__across_processes(t);
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
  if (rc == DLRT_OK && t->device_reduce && last) rc = reduce_on_devices(t);
  int started = 0, tail_started = 0;
  float tail[2] = {0, 0};
  if (rc == DLRT_OK && !t->device_reduce) rc = combine_buckets(t, last, &started);
  float micro_loss = 0;
  int64_t right = 0;
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++) {
    dlrt__replica *r = &t->reps[i];
    float l = 0;
    if ((rc = dlrt_exec_read(r->e, r->loss, &l, sizeof l)) < 0 ||
        (!t->lm && (rc = dlrt_exec_read(r->e, r->logits, r->host_logits,
                                        (size_t)(r->batch * t->classes) * sizeof(float))) < 0))
      break;
    /* Each row's loss is a mean over its positions: rows weigh alike. */
    float w = (float)r->batch / (float)t->batch;
    micro_loss += w * l;
    for (int64_t j = 0; !t->lm && j < r->batch; j++) {
      const float *row = r->host_logits + j * t->classes;
      int64_t best = 0;
      for (int64_t c = 1; c < t->classes; c++)
        if (row[c] > row[best]) best = c;
      right += best == labels[r->offset + j];
    }
  }
  if (across) {
    /* The update's loss and correct count go with its gradients. */
    t->dp_loss += (double)(micro_loss / (float)(t->cfg.world > 1 ? t->cfg.world : 1));
    t->dp_correct += (double)right;
    *loss = 0;
    if (rc == DLRT_OK && last)
      rc = dlrt__start_update_tail(t, tail, &t->requests[started], &tail_started);
    /* Every started request is completed, also after a failure. */
    for (int k = 0; k < started + tail_started; k++) {
      int rc2 = t->allreduce_wait(t->allreduce_user, t->requests[k]);
      if (rc == DLRT_OK) rc = rc2;
    }
    if (rc == DLRT_OK && last) {
      *loss = tail[0];
      *correct += (int64_t)(tail[1] + 0.5f);
    }
  } else {
    *loss = micro_loss;
    *correct += right;
  }
  if (rc < 0 || !last) {
    t->dp_micro = rc < 0 ? 0 : t->dp_micro + 1;
    if (rc < 0) t->dp_loss = t->dp_correct = 0;
    return rc;
  }
  t->dp_micro = 0;
  t->dp_loss = t->dp_correct = 0;
  /* ZeRO: each replica updates its range of the mean gradients, the mean
   * of the update's micro-batches too (the shards' updates count no
   * gradient runs). */
  if (t->zero && t->accum > 1)
    for (int64_t k = 0; k < t->n_grads; k++) t->grad_sum[k] *= 1.0f / (float)t->accum;
  if (t->zero) rc = dlrt__zero_update(t, t->grad_sum);
  for (int i = 0; i < t->n_reps && rc == DLRT_OK && !t->zero; i++)
    if (t->device_reduce ||
        (rc = dlrt__exec_gradients_write_buckets(t->reps[i].e, t->grad_sum)) == DLRT_OK)
      rc = dlrt_exec_apply_gradients(t->reps[i].e);
  if (rc == DLRT_OK && probing && --t->probe_steps == 0) rc = rebalance(t);
  return rc;
}

/* The main executor takes the replicas' parameters (for evaluation and
 * checkpoints). */
int dlrt__dp_sync_main(dlrt_trainer_t *t) {
  if (t->tp) return dlrt__tp_sync(t); /* ZeRO over a split model's replicas: the state */
  if (t->zero) return dlrt__zero_sync_main(t);
  if (t->n_reps) return copy_state(t->reps[0].e, t->e);
  return dlrt__pipeline_sync_main(t);
}
