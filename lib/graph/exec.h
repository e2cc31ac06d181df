/* exec.h — the executor's state, shared by exec.c (planning, lifetime,
 * runs), exec_ops.c (what each node launches) and exec_io.c (host I/O,
 * checkpoints) (internal). */
#ifndef DLRT_GRAPH_EXEC_H
#define DLRT_GRAPH_EXEC_H

#include "device/launch.h"
#include "graph/graph.h"

typedef struct {
  int *order;     /* node indices */
  int n;
  /* frees[i]: storages (tensor ids) whose last use is order[i], -1 ended. */
  int **frees;
  /* inplace[i]: the input (tensor id) whose storage order[i]'s output takes
   * over, or -1. */
  int *inplace;
} schedule;

struct dlrt_exec {
  dlrt_graph_t *g;
  dlrt_device_t *dev;
  dlrt_stream_t *stream;
  dlrt_buffer_t **bufs; /* by tensor id; views use their owner's */
  schedule plans[2];    /* by dlrt_run_mode */
  float lr;
  int64_t steps;
  uint64_t planned_peak;     /* the larger of the two */
  uint64_t train_peak, forward_peak;
  int checkpoint_every;      /* forward nodes per recomputed segment (0: none) */
  uint64_t peak_base;   /* allocator's allocated bytes before this executor */
  uint64_t param_bytes, state_bytes;
  int64_t params;
  /* DLRT_GRAPH_PROFILE=1: every node is waited for and timed; the totals per
   * op go to stderr when the executor is destroyed. */
  int profile;
  uint64_t seed;        /* for dropout masks */
  float clip_norm;      /* 0: no clipping */
  float grad_scale;     /* applied by the updates of this step (accumulation, clipping) */
  /* Gradient accumulation: accum_steps micro-batches per update; micro
   * counts those run since the last update; accum holds the running sums of
   * the parameters' gradients (by tensor id; only with accum_steps > 1). */
  int accum_steps, micro;
  dlrt_buffer_t **accum;
  uint64_t accum_bytes;
  dlrt_run_mode mode;   /* of the run in progress */
  double op_ms[OP_COUNT_];
  int64_t op_calls[OP_COUNT_];
};

static inline size_t dlrt__tensor_bytes(const dlrt_tensor_t *t) {
  return (size_t)t->numel * dlrt_dtype_size(t->dtype);
}

/* Inputs, parameters, state and kept tensors live as long as the executor. */
static inline int dlrt__persistent(const dlrt_tensor_t *t) {
  return t->kind != TENSOR_INTERMEDIATE || t->kept;
}

/* The buffer holding a tensor (a view's is its owner's). */
static inline dlrt_buffer_t *dlrt__exec_buf(dlrt_exec_t *e, const dlrt_tensor_t *t) {
  return e->bufs[t->owner->id];
}

/* What a training step of a graph holds at its planned peak, in allocator
 * bytes (512-byte granules): the executor's plan without a device. */
typedef struct {
  uint64_t params, state, inputs; /* inputs: the batch and kept tensors */
  uint64_t grads, activations;    /* activations: every other intermediate */
  uint64_t peak;                  /* their sum: the planned peak */
} dlrt__memory_breakdown;

int dlrt__graph_plan_memory(dlrt_graph_t *g, int checkpoint_every, dlrt__memory_breakdown *out);
/* Forward nodes per segment for a checkpointing setting (0, N or
 * DLRT_CHECKPOINT_SQRT: ceil(sqrt(forward nodes))). */
int dlrt__checkpoint_segment(const dlrt_graph_t *g, int every);

/* Queues what node `n` computes on the executor's stream (exec_ops.c). */
int dlrt__exec_run_node(dlrt_exec_t *e, node *n);

#endif
