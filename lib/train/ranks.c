/* ranks.c — every process of a data-parallel job trains the same thing:
 * a fingerprint of what changes the training (options, model, data,
 * parameters) is gathered from all ranks at the start and compared with
 * rank 0's, so that ranks started differently stop with a message instead
 * of training apart. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/train.h"
#include "util/status.h"

/* How a field is printed: its value, or only that it differs. */
typedef enum { FIELD_INT, FIELD_FLOAT, FIELD_HASH } field_kind;

#define RANK_FIELDS(X)                                                                    \
  X(world, FIELD_INT, "world size")                                                       \
  X(model, FIELD_HASH, "model (its layers and shapes)")                                   \
  X(batch, FIELD_INT, "batch (--batch)")                                                  \
  X(optimizer, FIELD_INT, "optimizer (--optimizer)")                                      \
  X(lr, FIELD_FLOAT, "learning rate (--lr)")                                              \
  X(momentum, FIELD_FLOAT, "momentum (--momentum)")                                       \
  X(nesterov, FIELD_INT, "nesterov")                                                      \
  X(weight_decay, FIELD_FLOAT, "weight decay (--weight-decay)")                           \
  X(betas, FIELD_HASH, "Adam betas and eps")                                              \
  X(seed, FIELD_INT, "seed (--seed)")                                                     \
  X(label_smoothing, FIELD_FLOAT, "label smoothing (--label-smoothing)")                  \
  X(schedule, FIELD_HASH, "learning-rate schedule (--schedule, --warmup, and the epochs " \
                          "of a cosine one)")                                             \
  X(clip_norm, FIELD_FLOAT, "clip norm (--clip-norm)")                                    \
  X(accum, FIELD_INT, "accumulation (--accum)")                                           \
  X(checkpoint, FIELD_INT, "checkpointing (--checkpoint)")                                \
  X(precision, FIELD_INT, "precision (--precision)")                                      \
  X(zero, FIELD_INT, "ZeRO stage (--zero)")                                               \
  X(loss_scaler, FIELD_HASH, "loss scaling (--loss-scale)")                               \
  X(augment, FIELD_HASH, "augmentation (--augment, --crop-pad, --flip, --erase, "         \
                         "--normalize)")                                                  \
  X(samples, FIELD_INT, "training samples (--data, --limit)")                             \
  X(image, FIELD_HASH, "image size and classes of the data")                              \
  X(data, FIELD_HASH, "training data (its labels and a sample of its images)")            \
  X(step, FIELD_INT, "optimizer step (--resume)")                                         \
  X(params, FIELD_HASH, "initial parameters (--resume, --seed)")

enum {
#define X(name, kind, text) FIELD_##name,
  RANK_FIELDS(X)
#undef X
  N_FIELDS
};

static const struct {
  field_kind kind;
  const char *text;
} fields[N_FIELDS] = {
#define X(name, kind, text) {kind, text},
    RANK_FIELDS(X)
#undef X
};

/* FNV-1a, 64 bits: a fingerprint, not a defence against forgery. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
#define FNV_START 0xcbf29ce484222325ULL
#define HASH_OF(h, x) fnv((h), &(x), sizeof(x))

static uint64_t float_bits(double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

static uint64_t model_hash(const dlrt_graph_t *g) {
  uint64_t h = FNV_START;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    int32_t head[3] = {(int32_t)t->kind, (int32_t)t->dtype, t->ndim};
    h = HASH_OF(h, head);
    h = fnv(h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
    h = fnv(h, t->name, strlen(t->name));
  }
  for (int i = 0; i < g->n_nodes; i++) {
    int32_t op = (int32_t)g->nodes[i]->op;
    h = HASH_OF(h, op);
  }
  return h;
}

/* The labels, and up to 256 images spread over the set (hashing every
 * image of a set larger than memory would read it all). */
static uint64_t data_hash(const dlrt_dataset *d) {
  if (d->tokens) /* a token stream: the whole of it (2 bytes a token) */
    return fnv(FNV_START, d->tokens, (size_t)d->token_count * sizeof *d->tokens);
  uint64_t h = fnv(FNV_START, d->labels, (size_t)d->count * sizeof *d->labels);
  size_t image = (size_t)(d->channels * d->height * d->width) * dlrt_dtype_size(d->image_dtype);
  int64_t samples = d->count < 256 ? d->count : 256;
  for (int64_t i = 0; i < samples; i++) {
    int64_t at = i * d->count / samples;
    h = fnv(h, d->images + (size_t)at * image, image);
  }
  return h;
}

static int params_hash(dlrt_trainer_t *t, uint64_t *out) {
  dlrt_host_tensor *tensors;
  int n, rc = dlrt__trainer_export(t, 0, &tensors, &n);
  if (rc < 0) return rc;
  uint64_t h = FNV_START;
  for (int i = 0; i < n; i++) {
    h = fnv(h, tensors[i].name, strlen(tensors[i].name));
    h = fnv(h, tensors[i].data, tensors[i].bytes);
  }
  dlrt_host_tensors_free(tensors, n);
  *out = h;
  return DLRT_OK;
}

static int fingerprint(dlrt_trainer_t *t, const dlrt_dataset *d, uint64_t f[N_FIELDS]) {
  const dlrt_trainer_config *c = &t->cfg;
  const dlrt_optimizer *o = &c->opt;
  f[FIELD_world] = (uint64_t)c->world;
  f[FIELD_model] = model_hash(t->g);
  f[FIELD_batch] = (uint64_t)c->batch;
  f[FIELD_optimizer] = (uint64_t)o->kind;
  f[FIELD_lr] = float_bits(o->lr);
  f[FIELD_momentum] = float_bits(o->momentum);
  f[FIELD_nesterov] = (uint64_t)o->nesterov;
  f[FIELD_weight_decay] = float_bits(o->weight_decay);
  float betas[3] = {o->beta1, o->beta2, o->eps};
  f[FIELD_betas] = HASH_OF(FNV_START, betas);
  f[FIELD_seed] = c->seed;
  f[FIELD_label_smoothing] = float_bits(c->label_smoothing);
  /* The total steps (the epochs) shape only a cosine schedule: ranks that
   * stop at different epochs are caught by the all-reduce's own timeout. */
  int64_t schedule[5] = {c->schedule, c->warmup_steps, c->step_size, 0,
                         c->schedule == DLRT_LR_COSINE ? c->total_steps : 0};
  memcpy(&schedule[3], &c->gamma, sizeof c->gamma);
  f[FIELD_schedule] = HASH_OF(FNV_START, schedule);
  f[FIELD_clip_norm] = float_bits(c->clip_norm);
  f[FIELD_accum] = (uint64_t)t->accum;
  f[FIELD_checkpoint] = (uint64_t)(int64_t)c->checkpoint;
  f[FIELD_precision] = (uint64_t)c->precision;
  f[FIELD_zero] = (uint64_t)dlrt__zero_stage(t); /* the collectives differ by stage */
  const dlrt_loss_scaler *s = &c->loss_scaler;
  float scaler[4] = {s->init_scale, s->growth_factor, s->backoff_factor,
                     (float)s->growth_interval};
  f[FIELD_loss_scaler] = fnv(HASH_OF(FNV_START, s->enabled), scaler, sizeof scaler);
  const dlrt_augment *a = &c->aug;
  float aug[7] = {(float)c->augment, (float)a->crop_padding, (float)a->flip, a->mean, a->std,
                  a->erase_p, 0};
  f[FIELD_augment] = HASH_OF(FNV_START, aug);
  f[FIELD_samples] = (uint64_t)d->count;
  int64_t image[5] = {d->channels, d->height, d->width, d->classes, d->image_dtype};
  f[FIELD_image] = HASH_OF(FNV_START, image);
  f[FIELD_data] = data_hash(d);
  f[FIELD_step] = (uint64_t)t->steps;
  return params_hash(t, &f[FIELD_params]);
}

static void describe(int field, uint64_t v, char *out, size_t size) {
  if (fields[field].kind == FIELD_INT) {
    snprintf(out, size, "%lld", (long long)(int64_t)v);
  } else {
    double x;
    memcpy(&x, &v, sizeof x);
    snprintf(out, size, "%g", x);
  }
}

int dlrt_trainer_check_ranks(dlrt_trainer_t *t, const dlrt_dataset *train,
                             dlrt_allgather_fn gather, void *user) {
  DLRT__CHECK_ARG(t && train && (train->tokens || (train->labels && train->images)) && gather,
                  "dlrt_trainer_check_ranks: trainer, data set or gather is NULL");
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  uint64_t mine[N_FIELDS];
  int rc = fingerprint(t, train, mine);
  if (rc < 0) return rc;
  uint64_t *all = calloc((size_t)world * N_FIELDS, sizeof *all);
  if (!all) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if ((rc = gather(user, mine, all, sizeof mine)) < 0) {
    free(all);
    return rc;
  }
  /* Every rank sees every fingerprint, so all reach the same verdict and
   * stop together. The first rank and field that differ are named. */
  for (int r = 1; r < world && rc == DLRT_OK; r++)
    for (int f = 0; f < N_FIELDS && rc == DLRT_OK; f++) {
      uint64_t theirs = all[(size_t)r * N_FIELDS + f], first = all[f];
      if (theirs == first) continue;
      if (fields[f].kind == FIELD_HASH) {
        rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "rank %d does not train what rank 0 "
                             "trains: its %s differs; start every rank with the same "
                             "options, model file, data and checkpoint", r, fields[f].text);
      } else {
        char a[32], b[32];
        describe(f, theirs, a, sizeof a);
        describe(f, first, b, sizeof b);
        rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "rank %d does not train what rank 0 "
                             "trains: its %s is %s, rank 0's %s; start every rank with the "
                             "same options, model file, data and checkpoint", r,
                             fields[f].text, a, b);
      }
    }
  free(all);
  return rc;
}
