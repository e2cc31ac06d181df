/* exec_shard.h — the executor's part for ZeRO sharding, owned by
 * exec_shard.c (internal): which of its model states an executor gives up
 * to a sharding trainer above it, and the hooks that bring a parameter in
 * for its uses when it holds none (stage 3). The trainer (lib/train) decides
 * who owns what and where the values come from; the executor only lets go
 * and asks. */
#ifndef DLRT_EXEC_SHARD_H
#define DLRT_EXEC_SHARD_H

#include "dlrt.h"

/* Queues on `stream` the filling of buffer `buf` (the whole of parameter
 * `id`, fp32) for its next uses. Returns 0 or a negative status. */
typedef int (*dlrt__param_fetch_fn)(void *user, dlrt_exec_t *e, int id, dlrt_buffer_t *buf,
                                    dlrt_stream_t *stream);

typedef struct {
  int stage;       /* 0: the executor holds everything */
  /* Stage 3: per plan (dlrt_run_mode), per schedule position, the
   * parameters (tensor ids, -1 ended) to bring in before the node runs and
   * those to let go after it: each run of uses within one phase (the
   * forward pass; the backward pass) is one fetch and one release. */
  int **fetch[2], **release[2];
  int n_pos[2];
  /* Prefetch: at the position before a fetch (next_fetch[m][k]: the next
   * position with one, or -1), the parameters not resident then are
   * allocated on the executor's stream and filled on `copy`, which first
   * waits for `queued` (the compute stream so far: the allocator's blocks
   * are safe in its order); the node waits for ready[id]. */
  int *next_fetch[2];
  dlrt_stream_t *copy;
  dlrt_event_t *queued, **ready; /* ready: by tensor id */
  char *prefetched;              /* by tensor id: filled on `copy` */
  dlrt__param_fetch_fn fetch_fn;
  void *fetch_user;
} dlrt__exec_shard;

/* Gives up model states, for a trainer that keeps their shards itself:
 * stage >= 1 frees the optimizer state (the update nodes' state inputs;
 * the executor then never runs its own updates: DLRT_RUN_TRAIN and
 * dlrt_exec_apply_gradients are refused); stage >= 2 also keeps no
 * gradient accumulators and lets each parameter gradient go as soon as its
 * bucket copy to the host is queued (DLRT_RUN_GRADIENTS with buckets);
 * stage 3 also frees the parameters that have gradients, which `fetch`
 * then fills before each run of uses (forward, backward) and which are
 * freed after it. Once, on a materialized executor without spilling or
 * chunked blocks. */
int dlrt__exec_set_shard(dlrt_exec_t *e, int stage, dlrt__param_fetch_fn fetch, void *user);
void dlrt__exec_shard_free(dlrt_exec_t *e);
/* The stage an executor was sharded at (0: not). */
int dlrt__exec_shard_stage(const dlrt_exec_t *e);
/* The run loop's hooks (exec.c): before and after position k of plan
 * `mode`'s schedule. */
int dlrt__exec_shard_before(dlrt_exec_t *e, int mode, int k);
void dlrt__exec_shard_after(dlrt_exec_t *e, int mode, int k);

/* For lib/train: the optimizer's update of `count` elements of parameter
 * `id` from element `first`, with the state and gradient given as buffers
 * holding exactly those elements from their byte offsets (the executor's
 * learning rate, step count and optimizer; gradients times grad_scale). */
typedef struct {
  dlrt_buffer_t *param, *state0, *state1, *grad; /* state1: Adam's only */
  size_t param_offset, state_offset, grad_offset; /* bytes */
} dlrt__update_operands;
int dlrt__exec_update_range(dlrt_exec_t *e, int id, const dlrt__update_operands *ops,
                            int64_t count, float grad_scale);
/* Counts an update made outside the executor (its step: Adam's bias
 * correction, checkpoints); the gradient runs since the last start again. */
void dlrt__exec_count_update(dlrt_exec_t *e);
/* The buffer holding tensor id's storage now (NULL when it holds none). */
dlrt_buffer_t *dlrt__exec_tensor_buffer(const dlrt_exec_t *e, int id);
/* The optimizer state tensors of parameter `id` (-1 where there is none):
 * SGD's momentum; Adam's exp_avg and exp_avg_sq. */
void dlrt__exec_optimizer_state(const dlrt_exec_t *e, int id, int *state0, int *state1);
/* The parameters in gradient-bucket order (ids[j], from float at[j] of the
 * host vector; n of them), or *n = 0 without buckets. */
void dlrt__exec_bucket_params(const dlrt_exec_t *e, int *n, const int **ids, const int64_t **at);
/* Bytes the executor holds now (tensor bytes, not allocator blocks) of
 * parameters, gradient accumulators and optimizer state. */
void dlrt__exec_held_bytes(const dlrt_exec_t *e, uint64_t *params, uint64_t *grads,
                           uint64_t *state);

#endif
