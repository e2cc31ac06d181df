/* exec.h — the executor's state, shared by exec.c (planning, lifetime,
 * runs), exec_ops.c (what each node launches) and exec_io.c (host I/O,
 * checkpoints) (internal). */
#ifndef DLRT_EXEC_EXEC_H
#define DLRT_EXEC_EXEC_H

#include <math.h>

#include "device/launch.h"
#include "graph/graph.h"
#include "mem/caching_allocator.h" /* dlrt__alloc_rounded */
#include "mem/managed.h"

/* Positions [begin, end) of a schedule that run a chunk of `chunk` images
 * at a time over a batch of `batch` (chunk.c). `full` is the chunk it was
 * planned with (a whole number of its convolutions' own chunks); `unit`
 * what any chunk must be a whole number of (its weight gradients' pieces). */
typedef struct {
  int begin, end;
  int64_t batch, chunk, full, unit;
} dlrt__chunk_block;

typedef struct {
  int *order;     /* node indices */
  int n;
  /* frees[i]: storages (tensor ids) whose last use is order[i], -1 ended. */
  int **frees;
  /* inplace[i]: the input (tensor id) whose storage order[i]'s output takes
   * over, or -1. */
  int *inplace;
  /* For spilling: next[i][j], the next position that touches the storage of
   * order[i]'s input j (j < n_in) or output j - n_in, -1 if none in this
   * run; first[id], a storage's first position, -1 if none; last_forward,
   * the position of the last forward node. */
  int **next;
  int *first;
  int last_forward;
  /* Chunked blocks (checkpointed training only; NULL and 0 without):
   * block_of[k], position k's block or -1; local[id], 1 for a storage that
   * holds one chunk's images, 2 for a convolution's workspace in a block
   * (both made again for each chunk), 0 for the rest. A block's storages
   * of the whole batch that end inside it are freed after its last chunk
   * (the frees at its last position). */
  dlrt__chunk_block *blocks;
  int n_blocks;
  int *block_of;
  char *local;
} schedule;

/* The executor's state, in parts: each is owned by the file named on it,
 * which alone writes its fields; other files of lib/exec call that file's
 * functions (layers above lib/exec see none of it: dlrt__exec_graph and
 * the functions of dlrt/graph.h). */

/* Planning (exec.c, schedule.c): the two schedules and what they hold. */
typedef struct {
  schedule plans[2];         /* by dlrt_run_mode */
  uint64_t planned_peak;     /* the larger of the two */
  uint64_t train_peak, forward_peak;
  int checkpoint_every;      /* forward nodes per recomputed segment (0: none) */
  uint64_t peak_base;        /* allocator's allocated bytes before this executor */
  uint64_t param_bytes, state_bytes;
  int64_t params;
} dlrt__exec_plan;

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
  /* Gradient buckets (dlrt__exec_stream_gradients): in DLRT_RUN_GRADIENTS
   * runs each parameter's gradient is copied to `host` as soon as the node
   * that finishes it is queued, in the order they finish (param[], at[]),
   * and an event is recorded when a bucket is complete, so the caller can
   * combine late layers' gradients while early layers still compute. */
  struct {
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
  } buckets;
} dlrt__exec_grads;

/* Spilling (exec_spill.c): NULL pool when off. */
typedef struct {
  dlrt__mpool *pool;
  dlrt_spill_config cfg;
  /* Spilling in slices, when whole-batch storages do not fit the budget: a
   * chunked block moves its whole-batch image storages a chunk's images at
   * a time between their host copies and device windows (windows[id]
   * during the block, which kernels use for the storage), and its kernels
   * see them as the chunk's own (block_local[id] = 3; else s->local). */
  int slicing;
  dlrt_buffer_t **windows;
  char *block_local;
  struct dlrt__slice {
    int id, read, written;
    size_t rows, row_image_bytes, pitch; /* per channel row: one image's bytes */
  } *slices;
  int n_slices;
  const dlrt__chunk_block *slice_block; /* the block running in slices */
} dlrt__exec_spill;

/* DLRT_GRAPH_PROFILE=1 (exec.c): every node is waited for and timed; the
 * totals per op go to stderr when the executor is destroyed. */
typedef struct {
  int on;
  double op_ms[OP_COUNT_];
  int64_t op_calls[OP_COUNT_];
} dlrt__exec_profile;

struct dlrt_exec {
  /* The run (exec.c): what every part reads. */
  dlrt_graph_t *g;
  dlrt_device_t *dev;
  dlrt_stream_t *stream;
  dlrt_buffer_t **bufs; /* by tensor id; views use their owner's */
  dlrt_run_mode mode;   /* of the run in progress */
  float lr;
  int64_t steps;
  uint64_t seed;        /* for dropout masks */
  dlrt__exec_plan plan;
  dlrt__exec_grads grads;
  dlrt__exec_spill spill;
  dlrt__exec_profile prof;
};

/* Adam's bias corrections for the coming update (step t = steps + 1), as
 * torch.optim: step_size = lr / (1 - beta1^t), bias2 = sqrt(1 - beta2^t). */
static inline void dlrt__adam_factors(const struct dlrt_exec *e, float *step_size, float *bias2);

static inline size_t dlrt__tensor_bytes(const dlrt_tensor_t *t) {
  return (size_t)t->numel * dlrt_dtype_size(t->dtype);
}

/* Inputs, parameters, state and kept tensors live as long as the executor. */
static inline int dlrt__persistent(const dlrt_tensor_t *t) {
  return t->kind != TENSOR_INTERMEDIATE || t->kept;
}

/* The buffer holding a tensor (a view's is its owner's; in a block that
 * spills in slices, the window holding the chunk's images). */
static inline dlrt_buffer_t *dlrt__exec_buf(dlrt_exec_t *e, const dlrt_tensor_t *t) {
  int id = t->owner->id;
  return e->spill.windows && e->spill.windows[id] ? e->spill.windows[id] : e->bufs[id];
}

/* Whether t is one of a batch's image tensors: 4-D with `batch` images,
 * fp32 (the chunked accumulation reads sums back in their storage type, so
 * 16-bit graphs are not chunked) or the one-byte argmax. */
static inline int dlrt__batch_image(const dlrt_tensor_t *t, int64_t batch) {
  return t->ndim == 4 && t->shape[0] == batch && t->owner == t &&
         (t->dtype == DLRT_F32 || t->dtype == DLRT_U8);
}

/* What a training step of a graph holds at its planned peak, in allocator
 * bytes (512-byte granules): the executor's plan without a device. */
typedef struct {
  uint64_t params, state, inputs; /* inputs: the batch and kept tensors */
  uint64_t grads, activations;    /* activations: every other intermediate */
  uint64_t peak;                  /* their sum: the planned peak */
  uint64_t least_spill;           /* the least budget spilling can train in, with
                                     the optimizer on the host */
} dlrt__memory_breakdown;

int dlrt__graph_plan_memory(dlrt_graph_t *g, int checkpoint_every, dlrt__memory_breakdown *out);
/* Builds the schedule of the nodes whose phase is <= max_phase (every > 0:
 * checkpointed segments of that many forward nodes, run in chunked blocks
 * where they can be) and its peak of live bytes
 * (schedule.c). */
int dlrt__plan(dlrt_graph_t *g, node_phase max_phase, int every, schedule *s, uint64_t *peak,
               dlrt__memory_breakdown *at_peak);
/* The bytes a storage holds in schedule s: one chunk's images for a
 * chunked block's own (local 1), a workspace's columns for at most a
 * chunk (local 2), else all of it. */
uint64_t dlrt__schedule_bytes(const schedule *s, const dlrt_tensor_t *t);
/* Plans both of the executor's schedules again for checkpoint segments of
 * `every` (0: none) (exec.c). */
int dlrt__exec_replan(dlrt_exec_t *e, int every);
void dlrt__schedule_free(schedule *s);
/* Finds the chunked blocks of a checkpointed training schedule (segments
 * of `every` forward nodes) and fills s->blocks, block_of and local. */
int dlrt__find_chunk_blocks(const dlrt_graph_t *g, schedule *s, int every);
/* Runs each block in chunks as planned again (spilling may run fewer). */
void dlrt__reset_chunks(schedule *s);
/* The checkpoint segments of the forward nodes fwd[0..n_fwd) (graph node
 * indices, in order) for segments of `every` nodes: seg[f] is node f's.
 * A segment also ends at each max-pool, which closes a convolution block
 * (one that can run in chunks of images: chunk.c), and is not cut by
 * length just before a bias, ReLU or max-pool. Returns how many. */
int dlrt__checkpoint_segments(const dlrt_graph_t *g, const int *fwd, int n_fwd, int every,
                              int *seg);
/* Forward nodes per segment for a checkpointing setting (0, N or
 * DLRT_CHECKPOINT_SQRT: ceil(sqrt(forward nodes))). */
int dlrt__checkpoint_segment(const dlrt_graph_t *g, int every);

/* The most one node (or chunked block) of the schedules holds on the
 * device at once: no smaller spill budget can work (*worst: that node, or
 * -2 - the first node of that block). `slices`: blocks hold their
 * whole-batch image storages a chunk at a time. exec_spill.c. */
uint64_t dlrt__least_spill_budget(const dlrt_graph_t *g, const schedule *plans, int n_plans,
                                  dlrt_offload_policy policy, int slices, int *worst);
/* How the schedules spill within `budget` (0: in as little as they can):
 * whole-batch storages whole and chunks as planned if that fits, else in
 * slices, halving the chunk of the block that needs the most (left set)
 * until it fits. Returns the least budget of the choice (*slices). */
uint64_t dlrt__spill_fit(const dlrt_graph_t *g, schedule *plans, int n_plans,
                         dlrt_offload_policy policy, uint64_t budget, int *slices, int *worst);

/* The residency policy of the executor's runs (residency.h): spilling's
 * while a budget is set, else the plain one. */
typedef struct dlrt__residency dlrt__residency;
const dlrt__residency *dlrt__exec_residency(const dlrt_exec_t *e);

/* Spilling around the nodes of a run (exec_spill.c). begin makes the
 * node's storages resident (taking over in place), end releases them,
 * frees what ends there, offloads by policy and prefetches ahead. */
void dlrt__spill_begin_run(dlrt_exec_t *e, const schedule *s);
int dlrt__spill_begin_node(dlrt_exec_t *e, const schedule *s, int k, int *done_on_host);
int dlrt__spill_end_node(dlrt_exec_t *e, const schedule *s, int k);
/* Chunked blocks while spilling: begin locks the whole-batch storages the
 * block touches for all its chunks; chunk_outputs acquires a position's
 * own (chunk) outputs, chunk_done frees the chunk's storages that end
 * there; end unlocks, tells the pool their next uses, frees those whose
 * lives end in the block and prefetches ahead. */
int dlrt__spill_begin_block(dlrt_exec_t *e, const schedule *s, const dlrt__chunk_block *b);
/* In slices: before a chunk's positions (out = 0) the slices of images
 * [b0, b0 + nb) it reads come in; after them (out = 1) those it wrote go
 * back to the host copies. */
int dlrt__spill_slices(dlrt_exec_t *e, int out, int64_t b0, int64_t nb);
int dlrt__spill_chunk_outputs(dlrt_exec_t *e, const schedule *s, int k);
void dlrt__spill_chunk_done(dlrt_exec_t *e, const schedule *s, int k);
int dlrt__spill_end_block(dlrt_exec_t *e, const schedule *s, const dlrt__chunk_block *b);
/* A tensor's storage made resident (and locked) for host I/O or the
 * executor's own kernels; a no-op without spilling. */
int dlrt__exec_use(dlrt_exec_t *e, const dlrt_tensor_t *t, int write);
void dlrt__exec_unuse(dlrt_exec_t *e, const dlrt_tensor_t *t);

static inline void dlrt__adam_factors(const struct dlrt_exec *e, float *step_size, float *bias2) {
  const dlrt_optimizer *o = &e->g->opt;
  double t = (double)(e->steps + 1);
  *step_size = (float)(e->lr / (1.0 - pow(o->beta1, t)));
  *bias2 = (float)sqrt(1.0 - pow(o->beta2, t));
}

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
int dlrt__exec_bucket_count(const dlrt_exec_t *e);
float *dlrt__exec_buckets_host(const dlrt_exec_t *e);
void dlrt__exec_bucket_range(const dlrt_exec_t *e, int b, int64_t *start, int64_t *count);
dlrt_buffer_t *dlrt__exec_grad_sum(const dlrt_exec_t *e, int id);
/* Sets the gradients the updates apply (dlrt_exec_apply_gradients) from a
 * vector in bucket order. */
int dlrt__exec_gradients_write_buckets(dlrt_exec_t *e, const float *src);

/* What a run does with its gradients (exec_grads.c), for dlrt_exec_run:
 * begin checks the mode and resets the step's scale; before_update runs
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

/* Queues what node `n` computes on the executor's stream (exec_ops.c). */
int dlrt__exec_run_node(dlrt_exec_t *e, node *n);
/* The same for images [b0, b0 + nb) of a batch of n, in a chunked block of
 * the schedule: tensors whose owner is marked in `local` (by tensor id)
 * hold only those images, the others all n. Convolutions, their bias and
 * its gradient, ReLU and max pooling take chunks (schedule.c picks blocks
 * of those only). */
typedef struct {
  int64_t n, b0, nb;
  const char *local;
} dlrt__chunk;
int dlrt__exec_run_node_chunk(dlrt_exec_t *e, node *n, const dlrt__chunk *c);
/* dlrt_exec_copy_in of src_dtype values (F32, F16 or BF16) into input t of
 * any floating type: copied, or converted on the executor's stream (nearest
 * even). */
int dlrt__exec_copy_in_from(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src,
                            size_t src_offset, dlrt_dtype src_dtype, dlrt_event_t *wait);
/* dlrt_exec_write of `count` fp32 values into t of any floating type,
 * converted on the host as the device's cast does. */
int dlrt__exec_write_f32(dlrt_exec_t *e, dlrt_tensor_t *t, const float *src, int64_t count);

#endif
