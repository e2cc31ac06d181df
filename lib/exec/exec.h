/* exec.h — the executor (internal): its state, in parts owned by the files
 * that use them (schedule.h, exec_grads.h, exec_spill.h, and the run's and
 * the profile's here, exec.c's), what each node launches (exec_ops.c) and
 * host I/O (exec_io.c). */
#ifndef DLRT_EXEC_EXEC_H
#define DLRT_EXEC_EXEC_H

#include <math.h>

#include "device/launch.h"
#include "exec/choose.h"
#include "exec/exec_grads.h"
#include "exec/exec_shard.h"
#include "exec/exec_spill.h"
#include "exec/param_stream.h"
#include "exec/schedule.h"
#include "graph/graph.h"

/* The executor's state, in parts: each is owned by the file named on it,
 * which alone writes its fields; other files of lib/exec call that file's
 * functions (layers above lib/exec see none of it: dlrt__exec_graph and
 * the functions of dlrt/graph.h). */

/* DLRT_GRAPH_PROFILE=1 (exec.c): every node is waited for and timed; the
 * totals per op go to stderr when the executor is destroyed. */
typedef struct {
  int on;
  double op_ms[DLRT__OP_COUNT_];
  int64_t op_calls[DLRT__OP_COUNT_];
} dlrt__exec_profile;

/* Tensor parallelism's collective (exec_collective.c): the caller's
 * function and its host buffer (pinned from the device's pool). */
typedef struct {
  dlrt_collective_fn fn; /* NULL: a group of one */
  void *user;
  float *host;
  size_t host_bytes;
} dlrt__exec_collective;

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
  dlrt__exec_shard shard; /* ZeRO: the model states given up (exec_shard.c) */
  dlrt__exec_choice choice; /* choose.c: the planner's keep / swap / recompute */
  dlrt__pstream *pstream; /* parameter streaming (param_stream.c); NULL: off */
  dlrt__exec_profile prof;
  dlrt__exec_collective coll;
};

/* Adam's bias corrections for the coming update (step t = steps + 1), as
 * torch.optim: step_size = lr / (1 - beta1^t), bias2 = sqrt(1 - beta2^t). */
static inline void dlrt__adam_factors(const struct dlrt_exec *e, float *step_size, float *bias2);

static inline size_t dlrt__tensor_bytes(const dlrt_tensor_t *t) {
  return (size_t)t->numel * dlrt_dtype_size(t->dtype);
}

/* Inputs, parameters, state and kept tensors live as long as the executor. */
static inline int dlrt__persistent(const dlrt_tensor_t *t) {
  return t->kind != DLRT__TENSOR_INTERMEDIATE || t->kept;
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

static inline void dlrt__adam_factors(const struct dlrt_exec *e, float *step_size, float *bias2) {
  const dlrt_optimizer *o = &e->g->opt;
  double t = (double)(e->steps + 1);
  *step_size = (float)(e->lr / (1.0 - pow(o->beta1, t)));
  *bias2 = (float)sqrt(1.0 - pow(o->beta2, t));
}


/* exec_collective.c: tensor parallelism's nodes (DLRT__OP_TP_COPY,
 * DLRT__OP_ALLREDUCE; DLRT__OP_LINEAR_XENT_SHARD), each waiting for the
 * stream; and the release of the collective's host buffer. */
int dlrt__exec_run_collective(dlrt_exec_t *e, dlrt__node *n);
int dlrt__exec_run_xent_shard(dlrt_exec_t *e, dlrt__node *n);
void dlrt__exec_collective_free(dlrt_exec_t *e);

/* A chunked block of schedule s, each chunk of images in turn, through
 * residency `res` (exec.c; the profiling pass times it whole). */
int dlrt__exec_run_block(dlrt_exec_t *e, const dlrt__residency *res, const dlrt__schedule *s,
                         const dlrt__chunk_block *b);
/* Queues what node `n` computes on the executor's stream (exec_ops.c). */
int dlrt__exec_run_node(dlrt_exec_t *e, dlrt__node *n);
/* The same for images [b0, b0 + nb) of a batch of n, in a chunked block of
 * the schedule: tensors whose owner is marked in `local` (by tensor id)
 * hold only those images, the others all n. Convolutions, their bias and
 * its gradient, ReLU and max pooling take chunks (schedule.c picks blocks
 * of those only). */
typedef struct {
  int64_t n, b0, nb;
  const char *local;
} dlrt__chunk;
int dlrt__exec_run_node_chunk(dlrt_exec_t *e, dlrt__node *n, const dlrt__chunk *c);
/* dlrt_exec_copy_in of src_dtype values (F32, F16 or BF16) into input t of
 * any floating type: copied, or converted on the executor's stream (nearest
 * even). */
int dlrt__exec_copy_in_from(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src,
                            size_t src_offset, dlrt_dtype src_dtype, dlrt_event_t *wait);
/* dlrt_exec_write of `count` fp32 values into t of any floating type,
 * converted on the host as the device's cast does. */
int dlrt__exec_write_f32(dlrt_exec_t *e, dlrt_tensor_t *t, const float *src, int64_t count);

#endif
