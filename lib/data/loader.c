/* loader.c — the data pipeline: a shuffled, sharded order per epoch; worker
 * threads that decode and augment samples straight into a ring of pinned
 * staging batches; an asynchronous copy of each finished batch to device
 * buffers on the loader's own stream, with an event the consumer's stream
 * waits for. While the device computes on batch k, the workers fill k+1 ..
 * k+prefetch and their copies travel.
 *
 * The unit of work is a chunk of one batch (ceil(batch / workers) samples),
 * so even a single batch is decoded by all the workers. Batch k lives in
 * slot k % slots. A slot goes FREE -> CLAIMED (one worker waits until the
 * device no longer reads the slot's previous batch) -> FILLING (workers
 * decode chunks into it) -> READY (the last chunk's worker queued the copy)
 * -> IN_USE (handed out) -> FREE (released, with an event on the consumer's
 * stream that the next copy into the slot waits for).
 *
 * Every sample's randomness is drawn from (seed, epoch, sample index) alone,
 * so the batches do not depend on the number of workers or on timing.
 *
 * A data set of token windows (dlrt_dataset_from_tokens) goes through the
 * same ring: its samples are T + 1 tokens of the stream, at an offset drawn
 * from (seed, epoch, index) when shuffling and at index x T otherwise, split
 * into T i32 inputs (the slot's images) and the T next tokens (its labels). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "data/sample_rng.h"
#include "dialect.h" /* the kernels' fp16 / bf16 rounding */
#include "mem/buffer.h" /* dlrt__host_alloc_staging */
#include "util/clock.h"
#include "util/status.h"

typedef enum { SLOT_FREE, SLOT_CLAIMED, SLOT_FILLING, SLOT_READY, SLOT_IN_USE } slot_state;

typedef struct {
  slot_state state;
  int64_t batch;            /* batch index it holds or is being filled with */
  int chunks_left;          /* chunks of it not yet decoded */
  void *host_images;        /* pinned: batch x C x H x W, in the config's image_type
                               (token windows: batch x T i32) */
  int32_t *host_labels;     /* pinned: batch (token windows: batch x T) */
  dlrt_buffer_t *images, *labels;
  dlrt_event_t *copied;     /* on the copy stream, after the copy to the device */
  dlrt_event_t *consumed;   /* on the consumer's stream, at release */
  int copied_recorded, consumed_recorded;
} slot;

struct dlrt_loader {
  dlrt_device_t *dev;
  const dlrt_dataset *data;
  dlrt_loader_config cfg;
  int64_t sample_floats;    /* C x H x W (token windows: T inputs) */
  int64_t sample_labels;    /* labels per sample: 1 (token windows: T) */
  size_t image_bytes;       /* of a batch of inputs, in the staging and on the device */
  size_t label_bytes;       /* of a batch of labels */
  int tokens;               /* the data set is token windows */
  int64_t shard;            /* samples of this rank per epoch */
  int64_t batches;          /* per epoch */
  int64_t chunk;            /* samples per unit of work */
  int chunks;               /* units per batch */
  int64_t *order;           /* this epoch's shard: dataset indices, `shard` of them
                               (NULL for token windows: sample_of computes them) */
  int epoch;
  int started;

  dlrt_stream_t *copy;      /* the loader's stream for copies to the device */
  pthread_mutex_t copy_lock; /* keeps one batch's wait, copies and record together */
  int n_slots;
  slot *slots;

  pthread_mutex_t lock;
  pthread_cond_t work_cv;   /* workers: a unit may be available */
  pthread_cond_t ready_cv;  /* consumer: a batch may be ready */
  pthread_cond_t idle_cv;   /* start: no unit in flight */
  int64_t next_batch;       /* next batch to hand out */
  int64_t next_unit;        /* next unit to assign: batch * chunks + chunk */
  int64_t wanted;           /* without prefetch, units of batches below this may start */
  int in_flight;            /* units being worked on */
  int quit;
  int failed;               /* a worker failed: its status and message below */
  int fail_rc;
  char fail_msg[1024];
  pthread_t *threads;
  int n_threads;

  dlrt_loader_stats stats;
};

/* ---------------------------------------------------------------- samples */

/* Dataset index of row `row` of batch `k` (rows past the shard wrap around
 * to its start: padding). Token windows need no permutation (a shuffled
 * window's offset is drawn from its index): rank r takes indices r, r +
 * world, ..., as make_order's unshuffled order. */
static int64_t sample_of(const dlrt_loader_t *l, int64_t k, int64_t row) {
  int64_t at = (k * l->cfg.batch + row) % l->shard;
  if (!l->order) return (at * l->cfg.world + l->cfg.rank) % l->data->count;
  return l->order[at];
}

/* Rows [first, last) of batch k of token windows. */
static int decode_token_rows(dlrt_loader_t *l, slot *s, int64_t k, int64_t first,
                             int64_t last) {
  int64_t T = l->data->width;
  for (int64_t row = first; row < last; row++) {
    int64_t offset = dlrt__window_offset(l->data, &l->cfg, l->epoch, sample_of(l, k, row));
    int rc = dlrt__decode_window(l->data, offset, (int32_t *)s->host_images + row * T,
                                 s->host_labels + row * T);
    if (rc < 0) return rc;
  }
  return DLRT_OK;
}

/* Decodes rows of one chunk of batch k; a label outside the classes (a data
 * set built by hand) fails the run rather than indexing past the logits. */
static int decode_chunk(dlrt_loader_t *l, slot *s, int64_t k, int chunk) {
  int64_t first = chunk * l->chunk, last = first + l->chunk, n = l->sample_floats;
  if (last > l->cfg.batch) last = l->cfg.batch;
  if (l->tokens) return decode_token_rows(l, s, k, first, last);
  /* 16-bit images: each sample is decoded in fp32, then rounded. */
  dlrt_dtype type = l->cfg.image_type;
  float *row_f32 = NULL;
  if (type != DLRT_F32 && !(row_f32 = malloc((size_t)n * sizeof *row_f32)))
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int rc = DLRT_OK;
  for (int64_t row = first; row < last; row++) {
    int64_t index = sample_of(l, k, row);
    int32_t label = l->data->labels[index];
    if (label < 0 || label >= l->data->classes) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "loader: sample %lld of %s has label %d, "
                           "outside [0, %d): fix the labels or the class count",
                           (long long)index, l->data->source, (int)label, l->data->classes);
      break;
    }
    if (!row_f32) {
      dlrt__decode_image(l->data, &l->cfg, l->epoch, index, (float *)s->host_images + row * n);
    } else {
      dlrt__decode_image(l->data, &l->cfg, l->epoch, index, row_f32);
      uint16_t *dst = (uint16_t *)s->host_images + row * n;
      for (int64_t i = 0; i < n; i++)
        dst[i] = type == DLRT_F16 ? dlrt_float_to_half(row_f32[i]) : dlrt_float_to_bf16(row_f32[i]);
    }
    s->host_labels[row] = label;
  }
  free(row_f32);
  return rc;
}

/* Queues the slot's copy to the device after the consumer's last read of
 * the slot's previous batch. */
static int queue_copy(dlrt_loader_t *l, slot *s) {
  pthread_mutex_lock(&l->copy_lock);
  int rc = DLRT_OK;
  if (s->consumed_recorded) rc = dlrt_stream_wait_event(l->copy, s->consumed);
  if (rc == DLRT_OK) rc = dlrt_copy_h2d(s->images, 0, s->host_images, l->image_bytes, l->copy);
  if (rc == DLRT_OK) rc = dlrt_copy_h2d(s->labels, 0, s->host_labels, l->label_bytes, l->copy);
  if (rc == DLRT_OK) rc = dlrt_event_record(s->copied, l->copy);
  s->copied_recorded = rc == DLRT_OK;
  pthread_mutex_unlock(&l->copy_lock);
  return rc;
}

/* ---------------------------------------------------------------- workers */

/* Records the first failure (the caller holds the lock). */
static void fail_locked(dlrt_loader_t *l, int rc) {
  if (l->failed) return;
  l->failed = 1;
  l->fail_rc = rc;
  snprintf(l->fail_msg, sizeof l->fail_msg, "%s", dlrt_last_error());
  pthread_cond_broadcast(&l->ready_cv);
  pthread_cond_broadcast(&l->work_cv);
}

/* The unit a worker may take now, or -1 (the caller holds the lock). */
static int64_t available_unit(dlrt_loader_t *l) {
  if (!l->started || l->failed || l->quit) return -1;
  int64_t unit = l->next_unit, k = unit / l->chunks;
  if (k >= l->batches) return -1;
  if (l->cfg.prefetch == 0 && k >= l->wanted) return -1;
  slot *s = &l->slots[k % l->n_slots];
  if (unit % l->chunks == 0) return s->state == SLOT_FREE ? unit : -1;
  return s->state == SLOT_FILLING && s->batch == k ? unit : -1;
}

/* Works on one unit (the caller holds the lock; it is released meanwhile). */
static void work_unit(dlrt_loader_t *l, int64_t unit) {
  int64_t k = unit / l->chunks;
  int chunk = (int)(unit % l->chunks);
  slot *s = &l->slots[k % l->n_slots];
  l->next_unit++;
  l->in_flight++;
  int rc = DLRT_OK;
  if (chunk == 0) {
    /* The slot's pinned memory is written only after its previous batch's
     * copy has read it: the consumer's release follows that copy. */
    s->state = SLOT_CLAIMED;
    s->batch = k;
    s->chunks_left = l->chunks;
    int wait_copy = s->copied_recorded, wait_use = s->consumed_recorded;
    pthread_mutex_unlock(&l->lock);
    if (wait_copy) rc = dlrt_event_synchronize(s->copied);
    if (wait_use && rc == DLRT_OK) rc = dlrt_event_synchronize(s->consumed);
    pthread_mutex_lock(&l->lock);
    if (rc < 0) fail_locked(l, rc);
    s->state = SLOT_FILLING;
    pthread_cond_broadcast(&l->work_cv);
  }
  if (!l->failed) {
    pthread_mutex_unlock(&l->lock);
    double t0 = dlrt__now_s();
    rc = decode_chunk(l, s, k, chunk);
    double spent = dlrt__now_s() - t0;
    pthread_mutex_lock(&l->lock);
    l->stats.work_s += spent;
    if (rc < 0) fail_locked(l, rc);
    if (--s->chunks_left == 0 && !l->failed) {
      pthread_mutex_unlock(&l->lock);
      rc = l->cfg.host_only ? DLRT_OK : queue_copy(l, s);
      pthread_mutex_lock(&l->lock);
      if (rc < 0) fail_locked(l, rc);
      s->state = SLOT_READY;
      pthread_cond_broadcast(&l->ready_cv);
    }
  }
  if (--l->in_flight == 0) pthread_cond_broadcast(&l->idle_cv);
}

static void *worker_main(void *arg) {
  dlrt_loader_t *l = arg;
  pthread_mutex_lock(&l->lock);
  while (!l->quit) {
    int64_t unit = available_unit(l);
    if (unit < 0) {
      pthread_cond_wait(&l->work_cv, &l->lock);
      continue;
    }
    work_unit(l, unit);
  }
  pthread_mutex_unlock(&l->lock);
  return NULL;
}

/* ---------------------------------------------------------------- life */

static void stop_workers(dlrt_loader_t *l) {
  pthread_mutex_lock(&l->lock);
  l->quit = 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->lock);
  for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
  l->n_threads = 0;
}

void dlrt_loader_destroy(dlrt_loader_t *l) {
  if (!l) return;
  stop_workers(l);
  if (l->copy) dlrt_stream_synchronize(l->copy);
  for (int i = 0; l->slots && i < l->n_slots; i++) {
    slot *s = &l->slots[i];
    /* The consumer's stream may still read the device buffers. */
    if (s->consumed_recorded) dlrt_event_synchronize(s->consumed);
    dlrt_event_destroy(s->copied);
    dlrt_event_destroy(s->consumed);
    dlrt_buffer_free(s->images);
    dlrt_buffer_free(s->labels);
    dlrt_host_free(s->host_images);
    dlrt_host_free(s->host_labels);
  }
  free(l->slots);
  free(l->threads);
  free(l->order);
  dlrt_stream_destroy(l->copy);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_cond_destroy(&l->idle_cv);
  pthread_mutex_destroy(&l->lock);
  pthread_mutex_destroy(&l->copy_lock);
  free(l);
}

/* A data set of token windows as dlrt_dataset_from_tokens makes it, and a
 * config that asks nothing of it that only images have. */
static int check_tokens(const dlrt_dataset *d, const dlrt_loader_config *c) {
  DLRT__CHECK_ARG(d->image_dtype == DLRT_I32 && d->channels == 1 && d->height == 1 &&
                      d->width >= 1 && d->token_count >= d->width + 1 && d->count >= 1 &&
                      d->classes >= 1,
                  "dlrt_loader_create: %s is not a data set of token windows as "
                  "dlrt_dataset_from_tokens makes one (%lld tokens, %lld windows of %lld x "
                  "%lld x %lld %s, vocabulary %d)", d->source, (long long)d->token_count,
                  (long long)d->count, (long long)d->channels, (long long)d->height,
                  (long long)d->width, dlrt_dtype_name(d->image_dtype), d->classes);
  /* Evaluation reads the consecutive windows: there are (n - 1) / T of them.
   * Training draws its offsets at random: an epoch may hold any number. */
  if (!c->shuffle && d->count > (d->token_count - 1) / d->width)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_loader_create: %s has %lld consecutive "
                           "windows of %lld tokens, not the %lld an evaluation in order asks "
                           "for: lower the data set's count", d->source,
                           (long long)((d->token_count - 1) / d->width), (long long)d->width,
                           (long long)d->count);
  DLRT__CHECK_ARG(c->image_type == DLRT_F32 || c->image_type == DLRT_I32,
                  "dlrt_loader_create: %s inputs asked of token windows, whose inputs are "
                  "i32 token ids: give image_type DLRT_I32 (or leave it 0)",
                  dlrt_dtype_name(c->image_type));
  const dlrt_augment *a = &c->aug;
  DLRT__CHECK_ARG(a->crop_padding == 0 && !a->flip && a->std == 0 && a->erase_p == 0,
                  "dlrt_loader_create: augmentation (crop padding %d, flip %d, std %g, erase "
                  "probability %g) is for images; token windows take none: leave aug zero",
                  a->crop_padding, a->flip, a->std, a->erase_p);
  return DLRT_OK;
}

static int check_config(const dlrt_dataset *d, const dlrt_loader_config *c) {
  DLRT__CHECK_ARG(d && (d->tokens || (d->images && d->labels)) && d->count > 0,
                  "dlrt_loader_create: the data set is NULL or empty");
  DLRT__CHECK_ARG(c->batch >= 1, "dlrt_loader_create: batch %lld; give 1 or more",
                  (long long)c->batch);
  int rc = d->tokens ? check_tokens(d, c) : DLRT_OK;
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(d->tokens || d->image_dtype == DLRT_U8 || d->image_dtype == DLRT_F32,
                  "dlrt_loader_create: images of %s; u8 or f32 expected",
                  dlrt_dtype_name(d->image_dtype));
  DLRT__CHECK_ARG(d->tokens ||
                      ((c->image_type == DLRT_F32 || c->image_type == DLRT_F16 ||
                        c->image_type == DLRT_BF16) &&
                       !(c->host_only && c->image_type != DLRT_F32)),
                  "dlrt_loader_create: images of %s%s; give f32, f16 or bf16 (host-only "
                  "loaders give f32)", dlrt_dtype_name(c->image_type),
                  c->host_only ? " from a host-only loader" : "");
  DLRT__CHECK_ARG(c->workers >= 0 && c->workers <= 256 && c->prefetch >= 0 &&
                      c->prefetch <= 64,
                  "dlrt_loader_create: %d workers, prefetch %d; give 0-256 workers and a "
                  "prefetch of 0-64 batches", c->workers, c->prefetch);
  DLRT__CHECK_ARG(c->world >= 1 && c->rank >= 0 && c->rank < c->world,
                  "dlrt_loader_create: rank %d of %d; give 0 <= rank < world", c->rank,
                  c->world);
  /* The data set's fields and the batch are the caller's: the bytes of a
   * batch (multiplied out below) must not overflow. */
  int64_t sample = 0, bytes = 0;
  DLRT__CHECK_ARG(d->channels >= 1 && d->height >= 1 && d->width >= 1 &&
                      !__builtin_mul_overflow(d->channels, d->height, &sample) &&
                      !__builtin_mul_overflow(sample, d->width, &sample) &&
                      !__builtin_mul_overflow(sample, c->batch, &bytes) &&
                      !__builtin_mul_overflow(bytes, (int64_t)sizeof(float), &bytes),
                  "dlrt_loader_create: a batch of %lld images of %lld x %lld x %lld is more "
                  "bytes than memory can address; check the data set's sizes and the batch",
                  (long long)c->batch, (long long)d->channels, (long long)d->height,
                  (long long)d->width);
  const dlrt_augment *a = &c->aug;
  DLRT__CHECK_ARG(d->tokens || (a->crop_padding >= 0 && a->crop_padding < d->height &&
                      a->crop_padding < d->width && a->std >= 0 && a->erase_p >= 0 &&
                      a->erase_p <= 1),
                  "dlrt_loader_create: augmentation: crop padding %d (0 to below the image "
                  "side), std %g (>= 0), erase probability %g (0-1)", a->crop_padding,
                  a->std, a->erase_p);
  int64_t shard = d->count / c->world + (c->pad_last && d->count % c->world ? 1 : 0);
  if (shard < 1 || (!c->pad_last && shard < c->batch))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the data set (%s) has %lld %s, %lld "
                           "per shard of %d: fewer than one batch of %lld (keep the last "
                           "partial batch, or use a smaller batch%s)", d->source,
                           (long long)d->count, d->tokens ? "windows" : "samples",
                           (long long)shard, c->world, (long long)c->batch,
                           d->tokens ? " or context" : "");
  return DLRT_OK;
}

static int alloc_slot(dlrt_loader_t *l, slot *s) {
  size_t image_bytes = l->image_bytes, label_bytes = l->label_bytes;
  int rc;
  void *hi = NULL, *hl = NULL;
  /* Pinned, or pageable past the pinned pool's limit (DLRT_PINNED_LIMIT). */
  if ((rc = dlrt__host_alloc_staging(l->dev, image_bytes, &hi)) < 0) return rc;
  s->host_images = hi;
  if ((rc = dlrt__host_alloc_staging(l->dev, label_bytes, &hl)) < 0) return rc;
  s->host_labels = hl;
  if (l->cfg.host_only) return DLRT_OK; /* no device side */
  if ((rc = dlrt_buffer_alloc(l->dev, image_bytes, l->copy, &s->images)) < 0) return rc;
  if ((rc = dlrt_buffer_alloc(l->dev, label_bytes, l->copy, &s->labels)) < 0) return rc;
  if ((rc = dlrt_event_create(l->dev, &s->copied)) < 0) return rc;
  return dlrt_event_create(l->dev, &s->consumed);
}

int dlrt_loader_create(dlrt_device_t *dev, const dlrt_dataset *d, const dlrt_loader_config *c,
                       dlrt_loader_t **out) {
  DLRT__CHECK_ARG(dev && c && out, "dlrt_loader_create: device, config or out is NULL");
  *out = NULL;
  int rc = check_config(d, c);
  if (rc < 0) return rc;
  dlrt_loader_t *l = calloc(1, sizeof *l);
  if (!l) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  pthread_mutex_init(&l->lock, NULL);
  pthread_mutex_init(&l->copy_lock, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  pthread_cond_init(&l->idle_cv, NULL);
  l->dev = dev;
  l->data = d;
  l->cfg = *c;
  l->tokens = d->tokens != NULL;
  l->sample_floats = d->channels * d->height * d->width;
  l->sample_labels = l->tokens ? d->width : 1;
  /* Token windows are i32 whatever the consumer's precision (check_tokens). */
  if (l->tokens) l->cfg.image_type = DLRT_I32;
  l->image_bytes = (size_t)(c->batch * l->sample_floats) * dlrt_dtype_size(l->cfg.image_type);
  l->label_bytes = (size_t)(c->batch * l->sample_labels) * sizeof(int32_t);
  l->shard = d->count / c->world + (c->pad_last && d->count % c->world ? 1 : 0);
  l->batches = c->pad_last ? (l->shard + c->batch - 1) / c->batch : l->shard / c->batch;
  int split = c->workers > 1 ? c->workers : 1;
  l->chunk = (c->batch + split - 1) / split;
  l->chunks = (int)((c->batch + l->chunk - 1) / l->chunk);
  l->n_slots = c->prefetch > 0 ? c->prefetch : 1;
  /* Token windows: no order to keep (a pass over a large corpus has
   * millions of windows). */
  if (!l->tokens) l->order = malloc((size_t)l->shard * sizeof *l->order);
  l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
  l->threads = calloc((size_t)(c->workers > 0 ? c->workers : 1), sizeof *l->threads);
  if ((!l->tokens && !l->order) || !l->slots || !l->threads) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto fail;
  }
  if ((rc = dlrt_stream_create(dev, &l->copy)) < 0) goto fail;
  for (int i = 0; i < l->n_slots; i++)
    if ((rc = alloc_slot(l, &l->slots[i])) < 0) goto fail;
  for (int i = 0; i < c->workers; i++) {
    if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
      rc = dlrt__set_error(DLRT_ERR_SYSTEM, "dlrt_loader_create: cannot start worker thread "
                           "%d of %d", i + 1, c->workers);
      goto fail;
    }
    l->n_threads++;
  }
  *out = l;
  return DLRT_OK;
fail:
  dlrt_loader_destroy(l);
  return rc;
}

int64_t dlrt_loader_batches(const dlrt_loader_t *l) { return l ? l->batches : 0; }

/* This epoch's shard of the order: a permutation of the whole set from
 * (seed, epoch), the same on every rank; rank r takes positions r, r + world,
 * ...; with pad_last the last rank's shortfall wraps to the start. */
static void make_order(dlrt_loader_t *l, int epoch) {
  const dlrt_loader_config *c = &l->cfg;
  int64_t n = l->data->count;
  int64_t *all = malloc((size_t)n * sizeof *all);
  int64_t *perm = all ? all : l->order; /* no memory: no shuffle beats no epoch */
  if (all) {
    for (int64_t i = 0; i < n; i++) all[i] = i;
    if (c->shuffle) {
      uint64_t state = dlrt__mix64(c->seed ^ dlrt__mix64((uint64_t)epoch + 0x5851f42d4c957f2dull));
      for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(dlrt__mix64(state++) % (uint64_t)(i + 1));
        int64_t t = all[i];
        all[i] = all[j];
        all[j] = t;
      }
    }
  }
  for (int64_t i = 0; i < l->shard; i++) {
    int64_t pos = (i * c->world + c->rank) % n;
    l->order[i] = all ? perm[pos] : pos;
  }
  free(all);
}

int dlrt_loader_start(dlrt_loader_t *l, int epoch) { return dlrt_loader_start_at(l, epoch, 0); }

int dlrt_loader_start_at(dlrt_loader_t *l, int epoch, int64_t first) {
  DLRT__CHECK_ARG(l && epoch >= 0, "dlrt_loader_start: loader is NULL or epoch %d < 0", epoch);
  DLRT__CHECK_ARG(first >= 0 && first <= l->batches,
                  "dlrt_loader_start_at: batch %lld is outside the epoch's %lld batches",
                  (long long)first, (long long)l->batches);
  pthread_mutex_lock(&l->lock);
  for (int i = 0; i < l->n_slots; i++)
    if (l->slots[i].state == SLOT_IN_USE) {
      pthread_mutex_unlock(&l->lock);
      return dlrt__set_error(DLRT_ERR_STATE, "dlrt_loader_start: batch %lld was not released",
                             (long long)l->slots[i].batch);
    }
  /* Abandon the rest of the last epoch: let the units in flight finish. */
  l->started = 0;
  while (l->in_flight > 0) pthread_cond_wait(&l->idle_cv, &l->lock);
  int rc = l->failed ? l->fail_rc : DLRT_OK;
  if (rc < 0) {
    dlrt__set_error(rc, "%s", l->fail_msg);
    pthread_mutex_unlock(&l->lock);
    return rc;
  }
  for (int i = 0; i < l->n_slots; i++) l->slots[i].state = SLOT_FREE;
  l->epoch = epoch;
  if (l->order) make_order(l, epoch);
  /* Slots are taken by batch modulo their count, so any first batch works. */
  l->next_batch = first;
  l->next_unit = first * l->chunks;
  l->wanted = first;
  l->started = 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->lock);
  return DLRT_OK;
}

int dlrt_loader_next(dlrt_loader_t *l, dlrt_batch *out) {
  DLRT__CHECK_ARG(l && out, "dlrt_loader_next: loader or out is NULL");
  double t0 = dlrt__now_s();
  pthread_mutex_lock(&l->lock);
  if (!l->started) {
    pthread_mutex_unlock(&l->lock);
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_loader_next: call dlrt_loader_start first");
  }
  int64_t k = l->next_batch;
  if (k >= l->batches) {
    pthread_mutex_unlock(&l->lock);
    return 0;
  }
  slot *s = &l->slots[k % l->n_slots];
  if (s->state == SLOT_IN_USE) {
    pthread_mutex_unlock(&l->lock);
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_loader_next: release batch %lld first (the "
                           "ring holds %d batches)", (long long)s->batch, l->n_slots);
  }
  if (l->wanted < k + 1) {
    l->wanted = k + 1;
    pthread_cond_broadcast(&l->work_cv);
  }
  while (!l->failed && !(s->state == SLOT_READY && s->batch == k)) {
    if (l->n_threads == 0) {
      /* No workers: decode here. */
      int64_t unit = available_unit(l);
      if (unit >= 0) {
        work_unit(l, unit);
        continue;
      }
    }
    pthread_cond_wait(&l->ready_cv, &l->lock);
  }
  if (l->failed) {
    int rc = l->fail_rc;
    dlrt__set_error(rc, "%s", l->fail_msg);
    pthread_mutex_unlock(&l->lock);
    return rc;
  }
  s->state = SLOT_IN_USE;
  l->next_batch++;
  double t1 = dlrt__now_s();
  if (l->stats.batches == 0) l->stats.first_s = t0;
  l->stats.last_s = t1;
  l->stats.stall_s += t1 - t0;
  l->stats.batches++;
  int64_t count = l->shard - k * l->cfg.batch;
  count = count < l->cfg.batch ? count : l->cfg.batch;
  l->stats.images += count;
  pthread_mutex_unlock(&l->lock);

  out->images = s->images;
  out->labels = s->labels;
  out->host_images = l->cfg.image_type == DLRT_F32 ? s->host_images : NULL;
  out->host_tokens = l->tokens ? s->host_images : NULL;
  out->image_type = l->cfg.image_type;
  out->host_labels = s->host_labels;
  out->ready = s->copied;
  out->count = count;
  out->index = k;
  out->slot = (int)(s - l->slots);
  return 1;
}

int dlrt_loader_release(dlrt_loader_t *l, dlrt_batch *b, dlrt_stream_t *consumer) {
  DLRT__CHECK_ARG(l && b && b->slot >= 0 && b->slot < l->n_slots,
                  "dlrt_loader_release: loader or batch is NULL or not of this loader");
  slot *s = &l->slots[b->slot];
  pthread_mutex_lock(&l->lock);
  if (s->state != SLOT_IN_USE || s->batch != b->index) {
    pthread_mutex_unlock(&l->lock);
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_loader_release: batch %lld is not handed out",
                           (long long)b->index);
  }
  int rc = DLRT_OK;
  if (consumer) {
    rc = dlrt_event_record(s->consumed, consumer);
    s->consumed_recorded = rc == DLRT_OK;
  } else {
    /* Released at once: the copy must still be done before the slot is reused. */
    rc = s->copied_recorded ? dlrt_event_synchronize(s->copied) : DLRT_OK;
    s->consumed_recorded = 0;
  }
  s->state = SLOT_FREE;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->lock);
  b->slot = -1;
  return rc;
}

int dlrt_loader_stats_get(const dlrt_loader_t *l, dlrt_loader_stats *out) {
  DLRT__CHECK_ARG(l && out, "dlrt_loader_stats_get: loader or out is NULL");
  pthread_mutex_lock((pthread_mutex_t *)&l->lock);
  *out = l->stats;
  pthread_mutex_unlock((pthread_mutex_t *)&l->lock);
  /* What the workers can deliver: images per second of decoding, times the
   * workers that decode side by side. */
  int parallel = l->cfg.workers > 0 ? l->cfg.workers : 1;
  out->images_per_s = out->work_s > 0 ? (double)out->images * parallel / out->work_s : 0;
  return DLRT_OK;
}

int dlrt_loader_stats_reset(dlrt_loader_t *l) {
  DLRT__CHECK_ARG(l, "dlrt_loader_stats_reset: loader is NULL");
  pthread_mutex_lock(&l->lock);
  memset(&l->stats, 0, sizeof l->stats);
  pthread_mutex_unlock(&l->lock);
  return DLRT_OK;
}
