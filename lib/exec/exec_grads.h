/* exec_grads.h — the executor's gradients part, owned by exec_grads.c:
 * accumulation, loss scaling, clipping and buckets (internal). */
#ifndef DLRT_EXEC_GRADS_H
#define DLRT_EXEC_GRADS_H

#include "dlrt.h"

/* Gradient buckets (dlrt__exec_stream_gradients): in DLRT_RUN_GRADIENTS
 * runs each parameter's gradient is copied to `host` as soon as the node
 * that finishes it is queued, in the order they finish (param[], at[]),
 * and an event is recorded when a bucket is complete, so the caller can
 * combine late layers' gradients while early layers still compute. */
typedef struct {
  int n;              /* parameters with gradients; 0: off */
  int64_t bytes;      /* the bucket size asked for */
  int *param, *pos;   /* tensor id, TRAIN-schedule position it is final at */
  int64_t *at;        /* its offset in `host`, in floats */
  int *closes;        /* the bucket it completes, else -1 */
  int n_buckets;
  int64_t *start, *count; /* per bucket, in floats */
  dlrt_event_t **events;
  float *host;        /* pinned: all the gradients, in bucket order */
  int64_t total;
  int next;           /* during a run */
} dlrt__grad_buckets;

/* Clipping's squares are summed this many elements at a time (1 MiB of
 * fp32): a temporary the size of the largest gradient would be 147 MiB for
 * gpt2's token embedding, beside the planned peak. One partial sum per
 * chunk, then their sum: param_stream.c adds in the same order on the host. */
#define DLRT__SQUARES_CHUNK ((int64_t)1 << 18)

/* Gradients (exec_grads.c): the step's scale, loss scaling, accumulation
 * and buckets. */
typedef struct {
  float clip_norm;      /* 0: no clipping */
  float grad_scale;     /* applied by the updates of this step (accumulation, clipping,
                           1 / loss scale) */
  /* Dynamic loss scaling (mixed precision): the seed of the backward pass
   * is loss_scale; a step whose gradients hold inf or NaN is skipped. */
  float loss_scale;     /* 1 when off */
  dlrt_loss_scaler scaler;
  int64_t skipped_steps, clean_steps;
  int last_skipped;
  /* Gradient accumulation: accum_steps micro-batches per update; micro
   * counts those run since the last update; accum holds the running sums of
   * the parameters' gradients (by tensor id; only with accum_steps > 1). */
  int accum_steps, micro;
  int grad_runs;        /* DLRT_RUN_GRADIENTS runs summed since the last apply */
  dlrt_buffer_t **accum;
  uint64_t accum_bytes;
  dlrt__grad_buckets buckets;
} dlrt__exec_grads;

/* An executor's loss-scaling state, carried over when a trainer rebuilds an
 * executor (data-parallel replicas after rebalancing). */
typedef struct {
  dlrt_loss_scaler scaler;
  float scale;
  int64_t skipped_steps, clean_steps;
  int last_skipped;
} dlrt__loss_scale_saved;

void dlrt__exec_save_loss_scale(const dlrt_exec_t *e, dlrt__loss_scale_saved *out);
void dlrt__exec_restore_loss_scale(dlrt_exec_t *e, const dlrt__loss_scale_saved *in);

/* Gradient buckets for overlapping their reduction with the backward pass:
 * buckets of about `bucket_bytes` in the order the gradients become final
 * (the last layers' first). Needs an optimized graph. */
int dlrt__exec_stream_gradients(dlrt_exec_t *e, int64_t bucket_bytes);
/* Waits until bucket b of the last DLRT_RUN_GRADIENTS run is on the host
 * (e->grads.buckets.host + start[b], count[b] floats). */
int dlrt__exec_bucket_wait(dlrt_exec_t *e, int b);
/* For the layers above (lib/train), which read no field of the executor:
 * its graph; the number of gradient buckets; all the gradients on the host
 * in bucket order (pinned; bucket b is count floats from start); and the
 * running sum of parameter `id`'s gradient (DLRT_RUN_GRADIENTS, on the
 * device). */
dlrt_graph_t *dlrt__exec_graph(const dlrt_exec_t *e);
/* exec_io.c: what dlrt_exec_export lists, for a layer above that lists the
 * same tensors from elsewhere (ZeRO's host copies): whether tensor t is one
 * (parameters, buffers, with_state the optimizer state); how many entries
 * the export of g holds (with_state: one more, the step counter); and an
 * entry for t (name, fp32, shape, bytes, a malloc'd data buffer). */
int dlrt__exported(const dlrt_tensor_t *t, int with_state);
int dlrt__export_count(const dlrt_graph_t *g, int with_state);
int dlrt__host_tensor_like(dlrt_host_tensor *h, const dlrt_tensor_t *t);
/* dlrt_exec_create in two steps, for a caller that decides checkpointing,
 * accumulation and spilling from the plan before any storage exists (the
 * trainer): the first plans and counts the parameters (dlrt_exec_info) but
 * allocates no persistent storage; the second allocates it on the device,
 * or with spilling (dlrt_exec_set_spill in between) writes the initial
 * values to the pool's host copies, so a budget smaller than the
 * parameters and optimizer state holds from the start (exec.c). Nothing
 * else may run on the executor in between. */
int dlrt__exec_create_deferred(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed,
                               dlrt_exec_t **out);
int dlrt__exec_materialize(dlrt_exec_t *e);
int dlrt__exec_bucket_count(const dlrt_exec_t *e);
float *dlrt__exec_buckets_host(const dlrt_exec_t *e);
void dlrt__exec_bucket_range(const dlrt_exec_t *e, int b, int64_t *start, int64_t *count);
dlrt_buffer_t *dlrt__exec_grad_sum(const dlrt_exec_t *e, int id);
/* For executors whose gradients make one update together (pipeline
 * stages): the sum of the squares of the gradient sums since the last
 * update (DLRT_RUN_GRADIENTS runs) and whether all are finite (either
 * pointer may be NULL), leaving out tensor id `skip` (-1: none; a tied
 * tensor another executor also holds); how many runs they sum; then the
 * update with the caller's clipping factor (in [0, 1]) and overflow verdict
 * (finite 0: skipped, the loss scale backs off). dlrt_exec_apply_gradients
 * is the update with the executor's own. */
int dlrt__exec_grad_sums_check(dlrt_exec_t *e, int skip, float *squares, int *finite);
int dlrt__exec_grad_runs(const dlrt_exec_t *e);
int dlrt__exec_apply_gradients_as(dlrt_exec_t *e, float clip, int finite);
/* Sets the gradients the updates apply (dlrt_exec_apply_gradients) from a
 * vector in bucket order. */
int dlrt__exec_gradients_write_buckets(dlrt_exec_t *e, const float *src);

/* What a run does with its gradients (exec_grads.c), for dlrt_exec_run:
 * begin checks the mode (DLRT_RUN_GRADIENTS: optimized, no accumulation)
 * and resets the step's scale; before_update runs
 * at the first update node (accumulation, the overflow check of loss
 * scaling, clipping) and says whether the updates are skipped; ready
 * queues the bucket copies of gradients final at position k; end applies
 * GradScaler's rule and counts micro-batches and steps. */
typedef struct {
  int gradients_only;    /* DLRT_RUN_GRADIENTS */
  int last_micro;        /* the last micro-batch of an update */
  int decided;           /* before_update ran */
  int skip_updates;      /* the update nodes do not run */
  int checked, overflow; /* the loss-scaled gradients were checked; held inf or NaN */
} dlrt__grad_run;
int dlrt__grads_run_begin(dlrt_exec_t *e, dlrt_run_mode mode, dlrt__grad_run *r);
int dlrt__grads_before_update(dlrt_exec_t *e, dlrt__grad_run *r);
int dlrt__grads_ready(dlrt_exec_t *e, const dlrt__grad_run *r, int k);
void dlrt__grads_run_end(dlrt_exec_t *e, const dlrt__grad_run *r, int trained);

/* exec_grads.c, for the run loop of exec.c: */
/* One running sum per gradient (accumulation, DLRT_RUN_GRADIENTS). */
int dlrt__exec_ensure_accumulators(dlrt_exec_t *e);
/* Folds this micro-batch's gradients into the sums (last: into the gradients). */
int dlrt__exec_accumulate(dlrt_exec_t *e, int last);
/* The factor that clips the gradients (applied times `prescale`) to clip_norm. */
int dlrt__exec_clip_factor(dlrt_exec_t *e, float prescale, float *factor);
/* Whether every parameter gradient is finite (one read back). */
int dlrt__exec_gradients_finite(dlrt_exec_t *e, int *finite);
/* GradScaler's rule after an update, or a skipped one. */
void dlrt__exec_update_loss_scale(dlrt_exec_t *e, int finite);
/* Queues the bucket copies of the gradients final at schedule position k. */
int dlrt__exec_stream_ready(dlrt_exec_t *e, int k);
void dlrt__exec_buckets_free(dlrt_exec_t *e);

#endif
