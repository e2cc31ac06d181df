/* tensor_parallel_internal.h — what tensor_parallel.c (the split, the
 * peers, their runs, whole tensors) and tensor_parallel_update.c (the
 * host's part of an update, ZeRO over the replicas) share. Private to
 * lib/train. */
#ifndef DLRT_TRAIN_TENSOR_PARALLEL_INTERNAL_H
#define DLRT_TRAIN_TENSOR_PARALLEL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "train/train.h"

/* The peers of one process meeting at each collective: the last to arrive
 * combines every peer's values in peer order and writes the result back to
 * each (they wait meanwhile), so all get the same bits. A peer that fails
 * breaks the group, and the others' collectives fail instead of waiting. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  int n, arrived, broken;
  int64_t generation;
  float *values[DLRT_TP_MAX];
  int64_t count[DLRT_TP_MAX], tag[DLRT_TP_MAX];
  dlrt_collective_op op[DLRT_TP_MAX];
  char why[256];
} tp_group;

typedef struct {
  dlrt_device_t *dev;
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *tokens, *targets, *loss;
  dlrt_gpt_shard shard;
  int32_t *shifted; /* the batch's tokens minus the shard's first vocabulary row */
  tp_group *group;
  int index;
  pthread_t thread;
  dlrt_run_mode mode;
  int rc;
  char error[512];
  /* With updates made here (see host_update): the peer's gradients on the
   * host, its parameter elements (dlrt_exec_gradients_read's vector). */
  float *grads;
  int64_t n_grads;
  /* ZeRO over the data-parallel replicas (dlrt__tp_set_zero): this peer's
   * shard of its model states (zero.c), else NULL. */
  struct dlrt__zero *zero;
  /* Under the memory options (tensor_parallel_memory.c): the budget its
   * executor spills within (0: none), whether its parameters stream. */
  uint64_t spill_budget;
  int streams;
} tp_peer;

struct dlrt__tp {
  dlrt_gpt_config gpt;
  tp_peer peers[DLRT_TP_MAX];
  int n;          /* peers in this process */
  int rank, ranks; /* across processes: this process's shard of `ranks` (else 0 of n) */
  dlrt_collective_fn fn; /* across processes: the caller's collective */
  void *user;
  tp_group group;
  /* How the peers update: 0, each in its training run (DLRT_RUN_TRAIN);
   * else gradient runs (DLRT_RUN_GRADIENTS), one per micro-batch, then
   * GRADIENT_RUNS: each peer applies its own sum (accumulation alone), or
   * HOST_UPDATE: the sums go through the host, where data parallelism
   * averages them over the replicas, fp16 loss scaling agrees on the
   * overflow and clipping on the global norm, before each peer applies. */
  int update;
  int micro; /* micro-batches of the update under way */
  int zero_stage; /* ZeRO over the replicas (each peer's `zero`); 0: none */
  /* The memory options (tensor_parallel_memory.c): whether the peers spill
   * or stream (memory), sum micro-batches on their devices (device_accum),
   * whether their budgets left room for the gradient sums of a host update
   * (host_sums: it was decided at the split), and the segments that
   * DLRT_CHECKPOINT_AUTO chose (forward nodes a segment, once chosen). */
  int memory, device_accum, host_sums, chosen, checkpoint;
};
enum { GRADIENT_RUNS = 1, HOST_UPDATE = 2 };


/* Where shard s's part of a whole tensor lies, viewed as rows x cols (a
 * vector as one row): along rows or columns, in up to three segments (the
 * q, k and v blocks of c_attn). 0 for a tensor every peer holds whole. */
typedef struct {
  int by_cols, n_seg;
  int64_t start[3], len[3];
} tp_piece;

/* Whether model c splits over `peers` shards (at most one a head) with
 * these weights (NULL: even; each positive and finite); `what` ("ranks" or
 * "devices") names the peers in the message. */
int dlrt__tp_check_split(const dlrt_trainer_t *t, const dlrt_gpt_config *c, int peers,
                         const double *weights, const char *what);

/* The shards of c over n peers as the split makes them: heads in
 * proportion to `weights` (NULL: even), vocabulary rows likewise
 * (plan_tp.c plans them; pipeline_tp.c cuts every stage by them). */
void dlrt__tp_make_shards(const dlrt_gpt_config *c, int n, const double *weights,
                          dlrt_gpt_shard *out);

/* Whether `tensor_name` (a parameter or its optimizer state) is split by
 * shard s of model c, and where its piece lies (*out); 0 for a tensor every
 * peer holds whole. */
int dlrt__tp_piece_of(const char *tensor_name, const dlrt_gpt_config *c, const dlrt_gpt_shard *s,
                      int ndim, tp_piece *out);

/* Every peer runs its graph on the batch (tokens B x T, targets B T) in
 * `mode` (a training run at learning rate lr); *loss is the whole model's
 * mean loss. */
int dlrt__tp_run(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                 dlrt_run_mode mode, float lr, float *loss);

/* Peer p's host vector of its gradients (p->grads, p->n_grads), made once. */
int dlrt__tp_host_gradients(tp_peer *p);

/* tensor_parallel_memory.c. Fits tp->update to the memory options (made
 * once t->tp is; again after the update's mode changes): accumulation on
 * the peers' devices, an update through the host refused. */
int dlrt__tp_memory_update(dlrt_trainer_t *t);
/* Peer p's executor (made deferred on its graph) checkpointed, summing its
 * micro-batches and spilling or streaming as the options say; then its
 * storage is made. */
int dlrt__tp_peer_memory(dlrt_trainer_t *t, tp_peer *p);
/* Once every peer is built and the trainer's executor holds no storage:
 * the peers' devices' peaks counted from here, and the allocators' limits
 * of streaming peers. */
int dlrt__tp_memory_limits(dlrt_trainer_t *t);

/* The data-parallel sum over the processes of `n` vectors, in place,
 * started in the same order on every process. */
int dlrt__tp_replicas_sum(dlrt_trainer_t *t, float *const *values, const int64_t *count, int n);

/* For tensor x pipeline parallelism (pipeline_tp.c, with
 * dlrt__tp_make_shards above): shard s's tensors cut from the whole ones
 * (names kept; free with dlrt_host_tensors_free); the copy between a whole
 * tensor (rows x cols floats) and its piece p (dense): to_shard 1
 * scatters, 0 gathers. */
int dlrt__tp_scatter(const dlrt_gpt_config *c, const dlrt_gpt_shard *s,
                     const dlrt_host_tensor *whole, int n, dlrt_host_tensor **out);
void dlrt__tp_copy_piece(float *whole, int64_t rows, int64_t cols, float *part,
                         const tp_piece *p, int to_shard);

#endif
