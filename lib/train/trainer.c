/* trainer.c — an image classifier trained on a data set: builds the model's
 * graph (forward, cross-entropy, backward, optimizer), feeds shuffled
 * batches through lib/data's loader (workers, pinned staging, copies that
 * overlap compute) and evaluates; checkpoint.c saves and restores it. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/train.h"
#include "util/clock.h"
#include "util/status.h"

void dlrt_trainer_destroy(dlrt_trainer_t *t) {
  if (!t) return;
  dlrt__zero_free(t); /* its shards first: they lie on the replicas' devices */
  for (int i = 0; i < t->n_reps; i++) dlrt__replica_free(&t->reps[i]);
  dlrt__pipeline_free(t);
  dlrt__ptp_free(t);
  dlrt__tp_free(t);
  free(t->reps);
  free(t->grads);
  free(t->requests);
  free(t->grad_sum);
  dlrt_loader_destroy(t->train_loader);
  dlrt_loader_destroy(t->eval_loader);
  dlrt_exec_destroy(t->e);
  dlrt_graph_destroy(t->g);
  free(t->host_labels);
  free(t->host_logits);
  free(t);
}

int dlrt__build_classifier(dlrt_graph_t *g, const dlrt_trainer_config *cfg, int64_t channels,
                           int64_t height, int64_t width, int64_t classes,
                           dlrt_tensor_t **images, dlrt_tensor_t **labels, dlrt_tensor_t **logits,
                           dlrt_tensor_t **loss) {
  dlrt_gpt_config gpt;
  if (dlrt__gpt_model(cfg, &gpt)) {
    /* Token windows of `width`; a label per position. */
    if (channels * height != 1)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s trains on token windows (a batch x T "
                             "stream, dlrt_dataset_from_tokens), not on %lld x %lld x %lld "
                             "images", cfg->model, (long long)channels, (long long)height,
                             (long long)width);
    if (classes > gpt.vocab)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the data has tokens up to %lld but %s's "
                             "vocabulary is %lld: use --vocab %lld", (long long)classes - 1,
                             cfg->model, (long long)gpt.vocab, (long long)classes);
    int64_t token_shape[2] = {cfg->batch, width}, target_shape[1] = {cfg->batch * width};
    int rc = dlrt_graph_set_precision(g, cfg->precision);
    if (rc < 0) return rc;
    *images = dlrt_input(g, "tokens", DLRT_I32, 2, token_shape);
    *labels = dlrt_input(g, "targets", DLRT_I32, 1, target_shape);
    if ((rc = dlrt_graph_status(g)) < 0) return rc;
    /* The head fused into the loss: the trainer reads only the loss, and the
     * B*T x V logits (196 MiB for gpt2 at batch 4, context 256) are never
     * stored. */
    *logits = NULL;
    if ((rc = dlrt_gpt_build_loss(g, &gpt, *images, *labels, cfg->label_smoothing, loss)) < 0)
      return rc;
    *loss = dlrt_keep(g, *loss);
    if ((rc = dlrt_graph_status(g)) < 0) return rc;
    if ((rc = dlrt_graph_backward(g, *loss)) < 0) return rc;
    return dlrt_graph_optimize(g, &cfg->opt);
  }
  int64_t image_shape[4] = {cfg->batch, channels, height, width}, label_shape[1] = {cfg->batch};
  /* In mixed precision the images enter in the compute type (the loaders
   * round them; replicas' host rows are rounded as they are written): no
   * fp32 copy on the device beside the 16-bit one. */
  dlrt_dtype image_type = dlrt__loader_image_type(cfg, 0);
  int rc = dlrt_graph_set_precision(g, cfg->precision);
  if (rc < 0) return rc;
  *images = dlrt_input(g, "images", image_type, 4, image_shape);
  *labels = dlrt_input(g, "labels", DLRT_I32, 1, label_shape);
  if ((rc = dlrt_graph_status(g)) < 0) return rc;
  if ((rc = dlrt_model_build(g, cfg->model, *images, classes, logits)) < 0) return rc;
  *logits = dlrt_keep(g, *logits);
  *loss = dlrt_cross_entropy(g, *logits, *labels, cfg->label_smoothing);
  if ((rc = dlrt_graph_status(g)) < 0) return rc;
  if ((rc = dlrt_graph_backward(g, *loss)) < 0) return rc;
  return dlrt_graph_optimize(g, &cfg->opt);
}

int dlrt__set_loss_scaling(dlrt_exec_t *e, const dlrt_trainer_config *cfg) {
  const dlrt_loss_scaler *c = &cfg->loss_scaler;
  if (c->enabled < 0 || (cfg->precision != DLRT_F16 && c->enabled <= 0)) return DLRT_OK;
  dlrt_loss_scaler s = dlrt_loss_scaler_defaults();
  if (c->init_scale != 0) s.init_scale = c->init_scale;
  if (c->growth_factor != 0) s.growth_factor = c->growth_factor;
  if (c->backoff_factor != 0) s.backoff_factor = c->backoff_factor;
  if (c->growth_interval != 0) s.growth_interval = c->growth_interval;
  return dlrt_exec_set_loss_scaler(e, &s);
}

void dlrt__spill_stats_add(dlrt_spill_stats *sum, const dlrt_spill_stats *s) {
  sum->spilled_bytes += s->spilled_bytes, sum->fetched_bytes += s->fetched_bytes;
  sum->spilled_to_disk_bytes += s->spilled_to_disk_bytes;
  sum->disk_written_bytes += s->disk_written_bytes;
  sum->disk_read_bytes += s->disk_read_bytes;
  sum->evictions += s->evictions, sum->transfer_ms += s->transfer_ms;
  if (s->peak_resident > sum->peak_resident) sum->peak_resident = s->peak_resident;
  if (s->slice_images > sum->slice_images) sum->slice_images = s->slice_images;
}

static uint64_t outside_bytes(const dlrt_trainer_t *t);

/* The segments for DLRT_CHECKPOINT_AUTO (tensor_parallel_memory.c chooses a
 * split model's on its first peer): the longest (least recompute) whose
 * planned peak, with `outside` bytes beside it, fits 80% of the budget (the
 * spilling budget when one is given, else the device's), none when
 * everything fits, and those of the least planned peak when nothing does.
 * *every: the forward nodes a segment, 0 none; e is left checkpointed so. */
int dlrt__choose_checkpoint_every(dlrt_exec_t *e, const dlrt_graph_t *g, dlrt_device_t *dev,
                                  uint64_t spill_budget, uint64_t outside, int *every) {
  dlrt_device_props props;
  int rc = dlrt_device_props_get(dev, &props);
  if (rc < 0) return rc;
  /* An explicit spilling budget (--mem-limit) first, else the device's. */
  uint64_t budget = spill_budget ? spill_budget : dlrt_mem_get_limit(dev);
  if (!budget) budget = props.total_memory;
  /* The plan counts bytes in buffers; the budget binds the allocator's
   * segments, which hold some slack (buffers of different sizes in turn,
   * such as convolution workspaces, fragment them): aim at 80% of it. */
  budget = budget / 100 * 80;
  budget = budget > outside ? budget - outside : 0;
  int forward = 0;
  for (int i = 0; i < g->n_nodes; i++) forward += g->nodes[i]->phase == DLRT__PHASE_FORWARD;
  dlrt_exec_info info;
  int least = 0;
  uint64_t least_peak = UINT64_MAX;
  for (int k = 0; k == 0 || k >= 1; k = k == 0 ? forward - 1 : k - 1) {
    *every = k;
    if ((rc = dlrt_exec_set_checkpointing(e, k)) < 0) return rc;
    if ((rc = dlrt_exec_info_get(e, &info)) < 0) return rc;
    if (info.planned_peak_bytes <= budget) return DLRT_OK;
    if (info.planned_peak_bytes < least_peak) least = k, least_peak = info.planned_peak_bytes;
    if (k == 1) break;
  }
  /* Nothing fits: the segments of the least planned peak, which need not
   * be the shortest (a gpt-mini peer at context 64, batch 4 plans 10.9 MB
   * unsegmented and with segments of one node, 8.4 MB with 8). */
  *every = least;
  return dlrt_exec_set_checkpointing(e, least);
}

/* Sets the trainer's checkpointing (DLRT_CHECKPOINT_AUTO: as chosen for its
 * budget, with the loaders' slots beside the plan). */
static int choose_checkpointing(dlrt_trainer_t *t) {
  if (t->cfg.checkpoint != DLRT_CHECKPOINT_AUTO)
    return dlrt_exec_set_checkpointing(t->e, t->cfg.checkpoint);
  return dlrt__choose_checkpoint_every(t->e, t->g, t->dev, t->cfg.spill.device_budget,
                                       outside_bytes(t), &t->rep_every);
}

/* Bytes of the trainer's device memory outside the executor's storages:
 * the loaders' slots, the accumulators and the clipping workspace. */
static uint64_t outside_bytes(const dlrt_trainer_t *t) {
  /* Twice: the evaluation loader lives beside the training one while it
   * evaluates. */
  uint64_t loader = 2 * dlrt__loader_device_bytes(&t->cfg, t->batch,
                                                  t->channels * t->height * t->width);
  dlrt_exec_info info;
  uint64_t accum = 0, clip = 0;
  /* Accumulation's sums; across processes (config.world) the gradient
   * runs' sums, which the all-reduce reads. */
  if (dlrt_exec_info_get(t->e, &info) == DLRT_OK && (t->accum > 1 || t->cfg.world > 1))
    accum = info.param_bytes + 64 * 512;
  if (t->cfg.clip_norm > 0) clip = info.param_bytes + 64 * 512; /* squares of the largest */
  return loader + accum + clip;
}

/* When spilling cannot meet the budget without checkpointing, whether the
 * planner finds that --checkpoint sqrt (with the same offload policy, or
 * with the optimizer offloaded as well) meets it: then the message says
 * so, with what that needs. Appends to the message in `msg`. */
static void checkpoint_hint(const dlrt_trainer_t *t, uint64_t model_budget, char *msg,
                            size_t size) {
  if (t->cfg.checkpoint != 0) return;
  dlrt_trainer_config c = t->cfg;
  c.checkpoint = DLRT_CHECKPOINT_SQRT;
  for (int offload = 0; offload < 2; offload++) {
    if (offload) {
      if (c.spill.policy == DLRT_OFFLOAD_OPTIMIZER || c.spill.policy == DLRT_OFFLOAD_ALL) return;
      c.spill.policy = c.spill.policy == DLRT_OFFLOAD_ACTIVATIONS ? DLRT_OFFLOAD_ALL
                                                                  : DLRT_OFFLOAD_OPTIMIZER;
    }
    uint64_t least;
    if (dlrt__plan_spill_least(&c, t->channels, t->height, t->width, t->classes, &least) < 0) {
      dlrt_clear_error();
      return;
    }
    if (least > model_budget) continue;
    size_t used = strlen(msg);
    snprintf(msg + used, size - used, "; --checkpoint sqrt%s would fit (its operations need "
             "%.1f MiB at once)", offload ? " --offload optimizer" : "",
             (double)least / 1048576.0);
    return;
  }
}

/* --offload params: the parameters, their optimizer state and gradient
 * copies on the host, streamed --spill-prefetch nodes ahead
 * (dlrt_exec_offload_params); the budget is the allocator's limit, which
 * bounds everything the run holds on the device. */
static int choose_param_streaming(dlrt_trainer_t *t) {
  const dlrt_spill_config *c = &t->cfg.spill;
  /* prefetch 0: the executor chooses the look-ahead after the first step. */
  int rc = dlrt_exec_offload_params(t->e, c->prefetch);
  /* --host-limit: the optimizer state beyond it on disk. */
  if (rc == DLRT_OK && c->host_budget) rc = dlrt_exec_param_state_limit(t->e, c->host_budget);
  if (rc < 0) return rc;
  t->streaming = 1;
  return c->device_budget ? dlrt_mem_set_limit(t->dev, c->device_budget) : DLRT_OK;
}

/* The spilling budget an executor on `dev` gets (tensor_parallel_memory.c
 * gives each peer its own): spill as configured, or on its own when the
 * plan does not fit 80% of the device's budget (the same slack as automatic
 * checkpointing: buffers of different sizes in turn fragment the
 * allocator's segments). *out's device_budget is 0 without spilling, else
 * what the executor's storages may hold (`outside` bytes taken off);
 * `note` says where a budget from the device came from, for messages. */
int dlrt__spill_budget(dlrt_exec_t *e, dlrt_device_t *dev, const dlrt_spill_config *spill,
                       uint64_t outside, dlrt_spill_config *out, char *note, size_t size) {
  dlrt_spill_config c = *spill;
  uint64_t limit = dlrt_mem_get_limit(dev);
  dlrt_exec_info info;
  note[0] = '\0';
  out->device_budget = 0;
  int rc = dlrt_exec_info_get(e, &info);
  if (rc < 0) return rc;
  int from_limit = c.device_budget == 0 && limit > 0;
  /* The device's budget (DLRT_MEM_LIMIT) is a hard bound of the allocator:
   * the plan must fit 80% of it, else the trainer spills, as --mem-limit
   * does, within 85% of it (the rest is slack for the allocator's
   * segments). --offload asks to spill within it anyway. */
  if (from_limit && (info.planned_peak_bytes + outside > limit / 100 * 80 ||
                     c.policy != DLRT_OFFLOAD_NONE || c.host_budget)) {
    c.device_budget = limit / 100 * 85;
    if (c.prefetch == 0) c.prefetch = 4;
  } else {
    from_limit = 0;
  }
  if (c.device_budget == 0) return DLRT_OK;
  if (from_limit)
    snprintf(note, size, " (85%% of the device's budget, DLRT_MEM_LIMIT or "
             "dlrt_mem_set_limit: %.1f MiB)", (double)limit / 1048576.0);
  if (c.device_budget <= outside)
    return dlrt__set_error(DLRT_ERR_OOM, "a device budget of %.1f MiB%s leaves nothing for "
                           "the model: the loader (--prefetch batches), accumulators and "
                           "clipping take %.1f MiB; raise the budget or lower --prefetch",
                           (double)c.device_budget / 1048576.0, note,
                           (double)outside / 1048576.0);
  c.device_budget -= outside;
  *out = c;
  return DLRT_OK;
}

/* Spilling as configured (dlrt__spill_budget), with the planner's hint
 * when the budget does not fit. */
static int choose_spilling(dlrt_trainer_t *t) {
  if (t->cfg.spill.policy == DLRT_OFFLOAD_PARAMS) return choose_param_streaming(t);
  dlrt_spill_config c;
  char budget[160];
  int rc = dlrt__spill_budget(t->e, t->dev, &t->cfg.spill, outside_bytes(t), &c, budget,
                              sizeof budget);
  if (rc < 0 || c.device_budget == 0) return rc;
  t->spilling = 1;
  if ((rc = dlrt_exec_set_spill(t->e, &c)) != DLRT_ERR_OOM) return rc;
  /* The planner's recompute strategy (DLRT_PLAN_STRATEGY=recompute or
   * auto) may fit where the plain schedule does not: segments of sqrt(n). */
  const char *strategy = getenv("DLRT_PLAN_STRATEGY");
  if (t->cfg.checkpoint == 0 && strategy &&
      (strcmp(strategy, "auto") == 0 || strcmp(strategy, "recompute") == 0)) {
    char plain[1024];
    snprintf(plain, sizeof plain, "%s", dlrt_last_error());
    if ((rc = dlrt_exec_set_checkpointing(t->e, DLRT_CHECKPOINT_SQRT)) == DLRT_OK &&
        (rc = dlrt_exec_set_spill(t->e, &c)) != DLRT_ERR_OOM)
      return rc;
    dlrt__set_error(DLRT_ERR_OOM, "%s; nor with checkpoint segments of sqrt(n) (%s)", plain,
                    dlrt_last_error());
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dlrt_last_error());
  checkpoint_hint(t, c.device_budget, msg, sizeof msg);
  return dlrt__set_error(rc, "%s%s", msg, budget);
}

/* The planner's keep / swap / recompute (dlrt_exec_plan_spill) when the
 * trainer spills and DLRT_PLAN_STRATEGY names a strategy (belady, swap,
 * recompute, auto); without it spilling is Belady's, unplanned. */
static int plan_spilling(dlrt_trainer_t *t) {
  const char *env = getenv("DLRT_PLAN_STRATEGY");
  if (!env || !*env) return DLRT_OK;
  dlrt_plan_strategy s;
  int rc = dlrt_plan_strategy_parse(env, &s);
  if (rc < 0) return dlrt__set_error(rc, "DLRT_PLAN_STRATEGY: %s", dlrt_last_error());
  if (!t->spilling) return DLRT_OK; /* no budget: nothing to plan */
  if (t->cfg.checkpoint != 0 && t->cfg.checkpoint != DLRT_CHECKPOINT_SQRT)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_PLAN_STRATEGY=%s goes without "
                           "checkpointing (its recompute strategy checkpoints)", env);
  return dlrt_exec_plan_spill(t->e, s);
}

int dlrt_trainer_create(dlrt_device_t *dev, const dlrt_trainer_config *cfg, int64_t height,
                        int64_t width, int classes, dlrt_trainer_t **out) {
  DLRT__CHECK_ARG(dev && cfg && out && cfg->model, "device, config, model or out is NULL");
  DLRT__CHECK_ARG(cfg->schedule >= DLRT_LR_CONSTANT && cfg->schedule <= DLRT_LR_COSINE &&
                      cfg->warmup_steps >= 0 && cfg->clip_norm >= 0 && isfinite(cfg->clip_norm) &&
                      (cfg->schedule != DLRT_LR_STEP ||
                       (cfg->step_size > 0 && cfg->gamma > 0 && isfinite(cfg->gamma))) &&
                      (cfg->schedule != DLRT_LR_COSINE || cfg->total_steps > 0),
                  "dlrt_trainer_create: invalid schedule (kind %d, warm-up %lld, step size %lld, "
                  "gamma %g, total steps %lld) or clip norm %g", (int)cfg->schedule,
                  (long long)cfg->warmup_steps, (long long)cfg->step_size, cfg->gamma,
                  (long long)cfg->total_steps, cfg->clip_norm);
  DLRT__CHECK_ARG(cfg->batch >= 1 && height >= 1 && width >= 1 && classes >= 2 &&
                      cfg->channels >= 0 && cfg->accum >= 0 &&
                      (cfg->checkpoint >= DLRT_CHECKPOINT_AUTO ||
                       cfg->checkpoint == DLRT_CHECKPOINT_MARKS),
                  "dlrt_trainer_create: batch %lld, image %lld x %lld x %lld, %d classes, "
                  "checkpointing %d", (long long)cfg->batch, (long long)cfg->channels,
                  (long long)height, (long long)width, classes, cfg->checkpoint);
  dlrt_trainer_t *t = calloc(1, sizeof *t);
  if (!t) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  t->dev = dev;
  t->cfg = *cfg;
  snprintf(t->model, sizeof t->model, "%s", cfg->model);
  t->cfg.model = t->model;
  t->channels = cfg->channels > 0 ? cfg->channels : 1;
  t->height = height, t->width = width, t->classes = classes, t->batch = cfg->batch;
  t->lm = dlrt__gpt_model(cfg, NULL);
  int rc = dlrt_graph_create(&t->g);
  if (rc < 0) goto fail;
  if ((rc = dlrt__build_classifier(t->g, cfg, t->channels, height, width, classes, &t->images,
                                    &t->labels, &t->logits, &t->loss)) < 0)
    goto fail;
  /* The executor's storage is made once checkpointing, accumulation and
   * spilling are decided, so that a budget (--mem-limit or the device's,
   * DLRT_MEM_LIMIT) holds from the first parameter on. */
  if ((rc = dlrt__exec_create_deferred(t->g, dev, cfg->seed, &t->e)) < 0) goto fail;
  if (cfg->clip_norm > 0 && (rc = dlrt_exec_set_clip_norm(t->e, cfg->clip_norm)) < 0) goto fail;
  if ((rc = dlrt__set_loss_scaling(t->e, cfg)) < 0) goto fail;
  if (cfg->checkpoint != 0 && (rc = choose_checkpointing(t)) < 0) goto fail;
  t->accum = cfg->accum > 1 ? cfg->accum : 1;
  if (t->accum > 1 && (rc = dlrt_exec_set_accumulation(t->e, t->accum)) < 0) goto fail;
  if ((rc = choose_spilling(t)) < 0) goto fail;
  if ((rc = dlrt__exec_materialize(t->e)) < 0) goto fail;
  if ((rc = plan_spilling(t)) < 0) goto fail;
  /* A GPT's loss is read from the device: no (batch T) x vocab logits on
   * the host every step. */
  t->host_labels = malloc((size_t)(t->batch * (t->lm ? width : 1)) * sizeof(int32_t));
  t->host_logits = malloc((size_t)(t->lm ? 1 : t->batch * classes) * sizeof(float));
  if (!t->host_labels || !t->host_logits) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto fail;
  }
  *out = t;
  return DLRT_OK;
fail:
  dlrt_trainer_destroy(t);
  return rc;
}

float dlrt_lr_at(const dlrt_trainer_config *c, int64_t step) {
  if (!c) return 0.0f;
  double lr = c->opt.lr;
  if (c->warmup_steps > 0 && step < c->warmup_steps)
    return (float)(lr * (double)(step + 1) / (double)c->warmup_steps);
  int64_t t = step - (c->warmup_steps > 0 ? c->warmup_steps : 0);
  switch (c->schedule) {
  case DLRT_LR_STEP:
    if (c->step_size > 0) lr *= pow(c->gamma, (double)(t / c->step_size));
    break;
  case DLRT_LR_COSINE: {
    int64_t span = c->total_steps - (c->warmup_steps > 0 ? c->warmup_steps : 0);
    lr = span > 0 && t < span ? lr * 0.5 * (1.0 + cos(3.141592653589793 * (double)t / (double)span))
                              : 0.0;
    break;
  }
  default: break;
  }
  return (float)lr;
}

static int check_data(const dlrt_trainer_t *t, const dlrt_dataset *d) {
  DLRT__CHECK_ARG(d && ((d->images && d->labels) || d->tokens), "data set is NULL or empty");
  if (t->lm != (d->tokens != NULL))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s trains on %s, but the data set (%s) "
                           "holds %s", t->model, t->lm ? "token windows" : "images", d->source,
                           d->tokens ? "token windows" : "images");
  if (d->channels != t->channels || d->height != t->height || d->width != t->width)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the data set (%s) has %lld x %lld x %lld "
                           "images, the model was built for %lld x %lld x %lld", d->source,
                           (long long)d->channels, (long long)d->height, (long long)d->width,
                           (long long)t->channels, (long long)t->height, (long long)t->width);
  if (d->classes > t->classes)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the data set (%s) has %d classes, the model "
                           "was built for %lld", d->source, d->classes, (long long)t->classes);
  return DLRT_OK;
}

/* The loader of `d` for training (shuffled, augmented, last partial batch
 * dropped) or evaluation (in order, padded), made when `d` is new. */
static int loader_for(dlrt_trainer_t *t, const dlrt_dataset *d, int train, dlrt_loader_t **out) {
  dlrt_loader_t **slot = train ? &t->train_loader : &t->eval_loader;
  const dlrt_dataset **seen = train ? &t->train_data : &t->eval_data;
  if (!*slot || *seen != d) {
    dlrt_loader_destroy(*slot);
    *slot = NULL;
    *seen = NULL;
    dlrt_loader_config c = {
        .batch = t->batch, .workers = t->cfg.workers, .prefetch = t->cfg.prefetch,
        .seed = t->cfg.seed, .shuffle = train, .pad_last = !train,
        .rank = train ? t->cfg.rank : 0, .world = train && t->cfg.world > 0 ? t->cfg.world : 1,
        .augment = train && t->cfg.augment && !t->lm, .aug = t->lm ? (dlrt_augment){0} : t->cfg.aug,
        /* Replicas and stages copy their rows from the pinned batch, tensor
         * parallel peers the whole batch (evaluating too). */
        .host_only = (train && (t->n_reps || t->n_stages)) || t->tp || t->ptp,
        /* In mixed precision the batches come in the compute type. */
        .image_type = dlrt__loader_image_type(&t->cfg, train && (t->n_reps || t->n_stages))};
    int rc = dlrt_loader_create(t->dev, d, &c, slot);
    if (rc < 0) return rc;
    *seen = d;
  }
  *out = *slot;
  return DLRT_OK;
}

/* Feeds a batch into the graph's inputs (queued on the executor's stream
 * after the batch's copy) and hands it back to the loader. */
static int feed(dlrt_trainer_t *t, dlrt_loader_t *l, dlrt_batch *b) {
  memcpy(t->host_labels, b->host_labels,
         (size_t)(t->batch * (t->lm ? t->width : 1)) * sizeof(int32_t));
  int rc = dlrt__exec_copy_in_from(t->e, t->images, b->images, 0, b->image_type, b->ready);
  if (rc == DLRT_OK) rc = dlrt_exec_copy_in(t->e, t->labels, b->labels, 0, NULL);
  int rc2 = dlrt_loader_release(l, b, dlrt_exec_stream(t->e));
  return rc < 0 ? rc : rc2;
}

static void loader_figures(dlrt_loader_t *l, dlrt_epoch_stats *out) {
  dlrt_loader_stats ls;
  if (dlrt_loader_stats_get(l, &ls) < 0) return;
  out->stall_s = ls.stall_s;
  out->stall_fraction = out->seconds > 0 ? ls.stall_s / out->seconds : 0;
  out->loader_images_per_s = ls.images_per_s;
}

int64_t dlrt__count_correct(const dlrt_trainer_t *t, int64_t count) {
  int64_t correct = 0;
  for (int64_t i = 0; i < count; i++) {
    const float *row = t->host_logits + i * t->classes;
    int64_t best = 0;
    for (int64_t c = 1; c < t->classes; c++)
      if (row[c] > row[best]) best = c;
    correct += best == t->host_labels[i];
  }
  return correct;
}


int dlrt_trainer_epoch(dlrt_trainer_t *t, const dlrt_dataset *d, int epoch,
                       dlrt_progress_fn progress, void *user, dlrt_epoch_stats *out) {
  return dlrt_trainer_epoch_steps(t, d, epoch, 0, progress, user, out);
}

int64_t dlrt_trainer_epoch_updates(dlrt_trainer_t *t, const dlrt_dataset *d) {
  DLRT__CHECK_ARG(t, "trainer is NULL");
  int rc = check_data(t, d);
  dlrt_loader_t *l = NULL;
  if (rc == DLRT_OK) rc = loader_for(t, d, 1, &l);
  return rc < 0 ? rc : dlrt_loader_batches(l) / t->accum;
}

int dlrt_trainer_set_progress_every(dlrt_trainer_t *t, int64_t every) {
  DLRT__CHECK_ARG(t && every >= 0, "trainer is NULL or progress every %lld updates < 0",
                  (long long)(t ? every : 0));
  t->progress_every = every;
  return DLRT_OK;
}

int dlrt_trainer_epoch_steps(dlrt_trainer_t *t, const dlrt_dataset *d, int epoch,
                             int64_t max_steps, dlrt_progress_fn progress, void *user,
                             dlrt_epoch_stats *out) {
  return dlrt_trainer_epoch_from(t, d, epoch, 0, max_steps, progress, user, out);
}

int dlrt_trainer_epoch_from(dlrt_trainer_t *t, const dlrt_dataset *d, int epoch,
                            int64_t first_step, int64_t max_steps, dlrt_progress_fn progress,
                            void *user, dlrt_epoch_stats *out) {
  DLRT__CHECK_ARG(t && out && max_steps >= 0 && first_step >= 0,
                  "trainer or out is NULL, or max_steps or first_step < 0");
  int rc = check_data(t, d);
  dlrt_loader_t *l = NULL;
  if (rc == DLRT_OK) rc = loader_for(t, d, 1, &l);
  if (rc < 0) return rc;
  int64_t epoch_steps = dlrt_loader_batches(l) / t->accum; /* updates */
  if (epoch_steps == 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the data set (%s) holds %lld batches of %lld, "
                           "fewer than the %d micro-batches of one update", d->source,
                           (long long)dlrt_loader_batches(l), (long long)t->batch, t->accum);
  if (first_step >= epoch_steps)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "epoch %d has %lld updates: none is left from "
                           "update %lld (start the next epoch at 0)", epoch,
                           (long long)epoch_steps, (long long)first_step);
  if ((rc = dlrt_loader_start_at(l, epoch, first_step * t->accum)) < 0 ||
      (rc = dlrt_loader_stats_reset(l)) < 0)
    return rc;
  dlrt_spill_stats spill0 = {0}, spill1;
  dlrt_param_offload_stats stream0 = {0}, stream1;
  /* A split model's peers spill each on its device: their figures summed. */
  int spilling = t->spilling || (t->tp && dlrt__tp_spills(t)) || dlrt__pipeline_spills(t) ||
                 dlrt__dp_spills(t);
  int streaming = t->streaming || (t->tp && dlrt__tp_streams(t));
  if (t->tp && (spilling || streaming) && (rc = dlrt__tp_memory_stats(t, &spill0, &stream0)) < 0)
    return rc;
  if (t->spilling && (rc = dlrt_exec_spill_stats(t->e, &spill0)) < 0) return rc;
  if (!t->spilling && dlrt__pipeline_spills(t) && (rc = dlrt__pipeline_spill_stats(t, &spill0)) < 0)
    return rc;
  if (dlrt__dp_spills(t) && (rc = dlrt__dp_spill_stats(t, &spill0)) < 0) return rc;
  if (t->streaming && (rc = dlrt_exec_param_offload_stats(t->e, &stream0)) < 0) return rc;
  /* s runs over the epoch's updates from first_step; out counts this part. */
  int64_t steps = epoch_steps - first_step;
  if (max_steps > 0 && steps > max_steps) steps = max_steps;
  memset(out, 0, sizeof *out);
  /* Loss scaling, as the executor that makes the updates has it (replicas
   * may be rebuilt during the epoch: ask each time). */
  dlrt_loss_scale_state scale0, scale1;
  if ((rc = dlrt_trainer_loss_scale(t, &scale0)) < 0) return rc;
  double loss_sum = 0, start = dlrt__now_s(), warm_start = start;
  /* The first step is not timed once there is another: it pays what a
   * run pays once (a spilling run fetches its parameters and optimizer
   * state, which start on the host: 10 MB for gpt-mini, 1.6 s at an
   * H200's balance on this CPU), not what each step costs. */
  int64_t correct = 0, warmup = steps / 10 > 0 ? steps / 10 : steps > 1;
  int64_t span = first_step + steps; /* a GPT's round: its steps; else the epoch's */
  int64_t report = t->progress_every > 0 ? t->progress_every : (span / 20 > 0 ? span / 20 : 1);
  int64_t micro = 0;   /* micro-batches run */
  int64_t counted = 0; /* of them, those whose loss is in the mean (finite ones) */
  for (int64_t s = 0; s < steps && rc == DLRT_OK; s++) {
    if (s == warmup) warm_start = dlrt__now_s();
    float lr = dlrt_lr_at(&t->cfg, t->steps);
    if ((rc = dlrt__check_lr(t, lr, epoch, s, steps)) < 0 ||
        (rc = dlrt_exec_set_lr(t->e, lr)) < 0)
      break;
    /* The update's loss (its micro-batches' sum) and the loss scale before
     * it: divergence is checked once the update has run. */
    double update_loss = 0;
    dlrt_loss_scale_state before;
    if ((rc = dlrt_trainer_loss_scale(t, &before)) < 0) break;
    for (int m = 0; m < t->accum && rc == DLRT_OK; m++, micro++) {
      dlrt_batch b;
      rc = dlrt_loader_next(l, &b);
      if (rc == 0)
        rc = dlrt__set_error(DLRT_ERR_STATE, "the loader ended the epoch after %lld batches",
                             (long long)micro);
      if (rc > 0 && t->tp) { /* tensor parallel: every peer takes the whole batch */
        float loss = 0;
        rc = dlrt__tp_step(t, b.host_tokens, b.host_labels, lr, &loss);
        int rc2 = dlrt_loader_release(l, &b, NULL);
        if (rc == DLRT_OK) rc = rc2;
        update_loss += loss;
        continue;
      }
      if (rc > 0 && (t->n_reps || t->n_stages)) {
        /* Data or pipeline parallel: the replicas or the first stage take
         * their rows from the pinned batch. */
        float loss = 0;
        const void *rows = t->lm ? (const void *)b.host_tokens : (const void *)b.host_images;
        rc = t->n_reps ? dlrt__dp_step(t, rows, b.host_labels, lr, &loss, &correct)
                       : dlrt__pipeline_step(t, rows, b.host_labels, lr, &loss, &correct);
        int rc2 = dlrt_loader_release(l, &b, NULL);
        if (rc == DLRT_OK) rc = rc2;
        update_loss += loss;
        continue;
      }
      if (rc < 0 || (rc = feed(t, l, &b)) < 0) break;
      float loss = 0;
      if (t->allreduce_start) { /* across processes, overlapped with the backward pass */
        int64_t right = 0;
        if ((rc = dlrt_exec_run(t->e, DLRT_RUN_GRADIENTS)) < 0 ||
            (rc = dlrt__allreduce_overlapped(t, &loss, &right)) < 0)
          break;
        update_loss += loss;
        correct += right;
        continue;
      }
      if ((rc = dlrt_exec_run(t->e, t->allreduce ? DLRT_RUN_GRADIENTS : DLRT_RUN_TRAIN)) < 0 ||
          (rc = dlrt_exec_read(t->e, t->loss, &loss, sizeof loss)) < 0 ||
          (!t->lm && (rc = dlrt_exec_read(t->e, t->logits, t->host_logits,
                                          (size_t)(t->batch * t->classes) * sizeof(float))) < 0))
        break;
      int64_t right = t->lm ? 0 : dlrt__count_correct(t, t->batch);
      if (t->allreduce && (rc = dlrt__allreduce_step(t, &loss, &right)) < 0) break;
      update_loss += loss;
      correct += right;
    }
    if (rc < 0 || (rc = dlrt__check_update(t, update_loss, &before, epoch, s, steps)) < 0) break;
    if (isfinite(update_loss)) { /* a skipped update's inf or NaN stays out of the mean */
      loss_sum += update_loss;
      counted += t->accum;
    }
    t->steps++;
    t->updates++;
    out->steps = s + 1;
    out->step_loss = (float)(update_loss / t->accum);
    out->lr = lr;
    out->images = micro * t->batch * (dlrt__across_processes(t) && t->cfg.world > 1 ? t->cfg.world : 1);
    out->loss = counted > 0 ? (float)(loss_sum / (double)counted) : NAN;
    out->accuracy = t->lm ? NAN : (float)correct / (float)out->images;
    double now = dlrt__now_s();
    out->seconds = now - start;
    int64_t timed = s + 1 - warmup;
    out->images_per_s = timed > 0 && now > warm_start
                            ? (double)(timed * t->accum * t->batch) *
                                  (double)(dlrt__across_processes(t) && t->cfg.world > 1 ? t->cfg.world : 1) /
                                  (now - warm_start)
                            : (double)out->images / out->seconds;
    out->tokens_per_s = t->lm ? out->images_per_s * (double)t->width : 0;
    loader_figures(l, out);
    if (dlrt_trainer_loss_scale(t, &scale1) == DLRT_OK) {
      out->loss_scale = scale1.scale;
      out->skipped_steps = scale1.skipped_steps - scale0.skipped_steps;
    }
    int64_t at = first_step + s + 1; /* the update's place in the epoch, from 1 */
    if (progress && (at % report == 0 || s + 1 == steps))
      progress(user, at, span, out);
  }
  if (rc == DLRT_OK) rc = dlrt__dp_sync_main(t);
  if (rc == DLRT_OK && t->tp && (spilling || streaming))
    rc = dlrt__tp_memory_stats(t, &spill1, &stream1);
  else if (rc == DLRT_OK && t->spilling)
    rc = dlrt_exec_spill_stats(t->e, &spill1);
  else if (rc == DLRT_OK && dlrt__dp_spills(t)) /* data-parallel replicas */
    rc = dlrt__dp_spill_stats(t, &spill1);
  else if (rc == DLRT_OK && spilling) /* a pipeline's stages */
    rc = dlrt__pipeline_spill_stats(t, &spill1);
  else if (rc == DLRT_OK && t->streaming)
    rc = dlrt_exec_param_offload_stats(t->e, &stream1);
  if (rc == DLRT_OK && spilling) {
    out->spilled_bytes = spill1.spilled_bytes - spill0.spilled_bytes;
    out->disk_bytes = spill1.spilled_to_disk_bytes - spill0.spilled_to_disk_bytes;
    out->disk_written_bytes = spill1.disk_written_bytes - spill0.disk_written_bytes;
    out->fetched_bytes = spill1.fetched_bytes - spill0.fetched_bytes;
    out->transfer_ms = spill1.transfer_ms - spill0.transfer_ms;
    out->slice_images = spill1.slice_images;
  }
  if (rc == DLRT_OK && streaming) {
    /* Streaming's traffic: gradients off the device, parameters onto it. */
    out->spilled_bytes = stream1.gradient_bytes - stream0.gradient_bytes;
    out->fetched_bytes = stream1.fetched_bytes - stream0.fetched_bytes;
    /* The optimizer state's disk traffic (--host-limit). */
    out->disk_bytes = stream1.disk_written_bytes - stream0.disk_written_bytes;
    out->disk_written_bytes = stream1.disk_written_bytes - stream0.disk_written_bytes;
  }
  return rc;
}

int dlrt_trainer_evaluate(dlrt_trainer_t *t, const dlrt_dataset *d, dlrt_epoch_stats *out) {
  DLRT__CHECK_ARG(t && out, "trainer or out is NULL");
  int rc = check_data(t, d);
  dlrt_loader_t *l = NULL;
  if (rc == DLRT_OK) rc = loader_for(t, d, 0, &l);
  if (rc == DLRT_OK) rc = dlrt_loader_start(l, 0);
  if (rc == DLRT_OK) rc = dlrt_loader_stats_reset(l);
  if (rc < 0) return rc;
  memset(out, 0, sizeof *out);
  double start = dlrt__now_s(), loss_sum = 0;
  int64_t correct = 0;
  for (;;) {
    dlrt_batch b;
    if ((rc = dlrt_loader_next(l, &b)) <= 0) break;
    int64_t count = b.count;
    if (t->tp || t->ptp) { /* tensor parallel: the peers' (or the stages') forward passes */
      float loss = 0;
      rc = t->tp ? dlrt__tp_evaluate(t, b.host_tokens, b.host_labels, &loss)
                 : dlrt__ptp_evaluate(t, b.host_tokens, b.host_labels, &loss);
      int rc2 = dlrt_loader_release(l, &b, NULL);
      if (rc < 0 || (rc = rc2) < 0) break;
      loss_sum += (double)loss * (double)count;
      out->images += count;
      out->steps++;
      continue;
    }
    if (t->lm) {
      /* The loss on the device, a mean over the batch's positions; the
       * rows of a padded last batch repeat earlier windows, so that batch
       * counts as its real rows. */
      float loss = 0;
      if ((rc = feed(t, l, &b)) < 0 || (rc = dlrt_exec_run(t->e, DLRT_RUN_FORWARD)) < 0 ||
          (rc = dlrt_exec_read(t->e, t->loss, &loss, sizeof loss)) < 0)
        break;
      loss_sum += (double)loss * (double)count;
      out->images += count;
      out->steps++;
      continue;
    }
    if ((rc = feed(t, l, &b)) < 0 || (rc = dlrt_exec_run(t->e, DLRT_RUN_FORWARD)) < 0 ||
        (rc = dlrt_exec_read(t->e, t->logits, t->host_logits,
                             (size_t)(t->batch * t->classes) * sizeof(float))) < 0)
      break;
    /* The loss from the logits on the host: exact for a partial last batch. */
    for (int64_t i = 0; i < count; i++) {
      const float *z = t->host_logits + i * t->classes;
      double m = z[0], sum = 0;
      for (int64_t c = 1; c < t->classes; c++) m = z[c] > m ? z[c] : m;
      for (int64_t c = 0; c < t->classes; c++) sum += exp(z[c] - m);
      loss_sum += m + log(sum) - z[t->host_labels[i]];
    }
    correct += dlrt__count_correct(t, count);
    out->images += count;
    out->steps++;
  }
  out->seconds = dlrt__now_s() - start;
  loader_figures(l, out);
  /* Its buffers go back until the next evaluation (see dlrt_trainer_info). */
  dlrt_loader_destroy(t->eval_loader);
  t->eval_loader = NULL;
  t->eval_data = NULL;
  if (rc < 0) return rc;
  out->loss = (float)(loss_sum / (double)(out->images ? out->images : 1));
  if ((rc = dlrt__check_test_loss(t, out->loss)) < 0) return rc;
  out->accuracy = t->lm ? NAN : (float)correct / (float)(out->images ? out->images : 1);
  out->images_per_s = out->seconds > 0 ? (double)out->images / out->seconds : 0;
  out->tokens_per_s = t->lm ? out->images_per_s * (double)t->width : 0;
  return DLRT_OK;
}

int dlrt_trainer_loss_scale(dlrt_trainer_t *t, dlrt_loss_scale_state *out) {
  DLRT__CHECK_ARG(t && out, "dlrt_trainer_loss_scale: trainer or out is NULL");
  return dlrt_exec_loss_scale(t->n_reps ? t->reps[0].e : t->e, out);
}

int dlrt_trainer_info(dlrt_trainer_t *t, dlrt_exec_info *out) {
  DLRT__CHECK_ARG(t, "trainer is NULL");
  if (t->tp) return dlrt__tp_info(t, out);
  if (t->ptp) return dlrt__ptp_info(t, out);
  int rc = dlrt_exec_info_get(t->e, out);
  if (rc < 0) return rc;
  /* The training loader's device buffers (images and labels per slot, in
   * the allocator's blocks) count in the measured peak: plan them too. An
   * evaluation's loader lives beside them during its forward passes, whose
   * peak can come near a training step's (the cnn's at batch 256 does). */
  if (t->train_loader && !t->n_reps && !t->n_stages && !t->tp) {
    uint64_t loader =
        dlrt__loader_device_bytes(&t->cfg, t->batch, t->channels * t->height * t->width);
    const dlrt__exec_plan *p = &t->e->plan;
    uint64_t step = p->train_peak + loader, eval = p->forward_peak + 2 * loader;
    out->planned_peak_bytes += (step > eval ? step : eval) - p->planned_peak;
  }
  return DLRT_OK;
}

dlrt_exec_t *dlrt_trainer_executor(dlrt_trainer_t *t) { return t ? t->e : NULL; }
