/* train.h — what the trainer and the memory planner share (internal). */
#ifndef DLRT_TRAIN_TRAIN_H
#define DLRT_TRAIN_TRAIN_H

#include "dlrt.h"
#include "mem/caching_allocator.h" /* dlrt__alloc_block_bytes */

/* The trainer's state, shared by trainer.c (one device: create, epochs,
 * evaluation, checkpoints) and parallel.c (replicas on several devices, and
 * the all-reduce across processes). */
struct dlrt_trainer {
  dlrt_device_t *dev;
  dlrt_trainer_config cfg;
  char model[512];
  int64_t channels, height, width, classes, batch;
  int lm;              /* a GPT: token windows of `width`, a label per position */
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  /* One loader per data set in use (training: shuffled and augmented;
   * evaluation: in order, the last batch padded), made on first use. */
  dlrt_loader_t *train_loader, *eval_loader;
  const dlrt_dataset *train_data, *eval_data;
  int32_t *host_labels; /* the batch's labels, for accuracy */
  float *host_logits; /* batch x classes */
  int64_t steps;       /* updates made (the schedule's clock), restored on load */
  int64_t updates;     /* updates this trainer made (steps minus those resumed) */
  int nonfinite_run;   /* updates in a row whose loss was inf or NaN, each one skipped by
                          the loss scaler (diverge.c) */
  int accum;           /* micro-batches per update */
  int64_t progress_every; /* updates between progress calls; 0: a twentieth of an epoch */
  int spilling;        /* the executor spills under a budget */
  int streaming;       /* its parameters stream from the host (--offload params) */
  /* Data parallelism (dlrt_trainer_set_devices): a replica per device, each
   * with its own graph for its share of the batch; the main executor above
   * holds the parameters for evaluation and checkpoints. */
  struct dlrt__replica *reps;
  int n_reps;
  int probe_steps;     /* steps left to time the replicas before rebalancing */
  int device_reduce;   /* replicas combine gradients device to device (NCCL) */
  float *grads, *grad_sum; /* parameter elements each (+ 2 for the all-reduce) */
  /* --accum over replicas or processes: each micro-batch is a gradient
   * run; its gradients are summed on the host (grad_sum, bucket order) and
   * combined over the processes once, on the update's last micro-batch. */
  int dp_micro;        /* micro-batches of the update under way */
  double dp_loss, dp_correct; /* their loss (/ world) and correct predictions */
  /* The replicas' budget (dlrt_trainer_set_devices_memory): each spills
   * within it on its device; device_budget 0: none. */
  dlrt_spill_config rep_spill;
  int rep_every;       /* DLRT_CHECKPOINT_AUTO: the segments chosen once for all replicas */
  dlrt_spill_stats rep_retired; /* spilling figures of replicas rebuilt since (rebalance) */
  int64_t n_grads;
  dlrt_allreduce_fn allreduce; /* across processes, or NULL */
  dlrt_allreduce_start_fn allreduce_start; /* the same, bucket by bucket */
  dlrt_allreduce_wait_fn allreduce_wait;
  void *allreduce_user;
  void **requests;     /* one per gradient bucket (or parameter), and the loss's */
  int reduce_on_device; /* the all-reduce takes device pointers (CUDA-aware MPI) */
  /* Pipeline parallelism (dlrt_trainer_set_pipeline): the model's layers cut
   * into stages on several devices, each batch in micro-batches. */
  struct stage *stages;
  int n_stages, micro;
  int stage_batches;        /* batches in the stages' gradient sums (--accum: up to accum) */
  float *stage_sums;        /* across processes: every stage's gradient sums, end to end */
  int stage_zero;           /* ZeRO over the ranks: each stage's `zero` at this stage; 0: none */
  float *acts;              /* stage inputs per micro-batch (host) */
  int64_t *act_at;          /* offset of stage s, micro-batch m: act_at[s] + m * act_numel[s] */
  int64_t *act_numel;
  float *upstream;          /* the gradients passed back between stages, laid out as acts */
  /* Tensor x pipeline parallelism (pipeline_tp.c): every stage built for
   * this rank's shard, its collectives over the tensor-parallel ranks;
   * NULL without. */
  struct dlrt__ptp *ptp;
  /* Tensor parallelism (tensor_parallel.c): a GPT's shards on several
   * devices or processes; NULL without. */
  struct dlrt__tp *tp;
  /* The peers' memory options (dlrt_trainer_set_tensor_parallel_memory),
   * else the trainer's own config.spill and config.checkpoint. */
  int tp_memory_set;
  dlrt_spill_config tp_spill;
  int tp_checkpoint;
  /* The stages' budget (dlrt_trainer_set_pipeline_memory): each stage
   * spills within it on its device; device_budget 0: none. */
  dlrt_spill_config stage_spill;
  /* ZeRO sharding of the replicas' model states (zero.c), or NULL. */
  struct dlrt__zero *zero;
  /* A GPT's tied wte: a copy on the first and on the last stage, whose
   * gradients are summed on the host (two V x C buffers) before each update. */
  float *tied_first, *tied_last;
};

struct stage {
  dlrt_device_t *dev;
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *y, *upstream, *labels, *loss, *dx; /* upstream: NULL on the last */
  dlrt_tensor_t *tied;  /* a GPT's wte on the first and the last stage, else NULL */
  int first, last;      /* its layers (a GPT's blocks) */
  int64_t grads;        /* its parameters' gradient elements */
  uint64_t spill_budget; /* under dlrt_trainer_set_pipeline_memory: its own and its sums' */
  struct dlrt__zero *zero; /* ZeRO over the data ranks (dlrt__pipeline_set_zero), or NULL */
};

struct dlrt__replica {
  dlrt_device_t *dev;
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  int64_t batch, offset; /* its rows of each global batch */
  double seconds;        /* timed while probing */
  float *host_logits;
  uint64_t spill_budget; /* under dlrt_trainer_set_devices_memory: its own and its sums' */
};
typedef struct dlrt__replica dlrt__replica;

/* model.c: a model's layers for pipeline stages. The count includes the
 * final "linear classes" a model gets when it does not end in one. */
int dlrt__model_layer_count(const char *spec, int *count);
/* Layers [first, last) into g on a new input *x ("images" for the first
 * stage, else "activations", shaped as the earlier layers leave them for an
 * input of input_shape); *y the stage's output. Parameter names are the
 * whole model's. */
int dlrt__model_stage(dlrt_graph_t *g, const char *spec, const int64_t input_shape[4],
                      int64_t classes, int first, int last, dlrt_tensor_t **x,
                      dlrt_tensor_t **y);

/* parallel.c */
void dlrt__replica_free(dlrt__replica *r);
/* One data-parallel step over the replicas on a batch's pinned rows
 * (`inputs`: f32 images, or a language model's i32 token windows, B x T,
 * with B x T labels); *loss and *correct for the whole batch. */
int dlrt__dp_step(dlrt_trainer_t *t, const void *inputs, const int32_t *labels, float lr,
                  float *loss, int64_t *correct);
/* One step across processes after this one's DLRT_RUN_GRADIENTS run: *loss
 * and *correct in, global out. */
int dlrt__allreduce_step(dlrt_trainer_t *t, float *loss, int64_t *correct);
/* Correct predictions among the first `count` rows of the host logits. */
int64_t dlrt__count_correct(const dlrt_trainer_t *t, int64_t count);
/* Whether the trainer reduces over processes (either kind of all-reduce). */
static inline int dlrt__across_processes(const dlrt_trainer_t *t) {
  return t->allreduce || t->allreduce_start;
}
/* A step over processes with the all-reduce bucket by bucket, started while
 * the backward pass still runs; reads the loss and the logits itself. */
int dlrt__allreduce_overlapped(dlrt_trainer_t *t, float *loss, int64_t *correct);
/* Gradient buckets of this size (bytes) overlap combining with backward. */
#define DLRT_GRADIENT_BUCKET ((int64_t)1 << 20)
/* allreduce.c: the update's loss and correct count (t->dp_loss,
 * t->dp_correct) over the processes as one request (*started: whether it
 * was); the requests for the replicas' buckets sized again (the most any
 * replica has, and the loss's). */
int dlrt__start_update_tail(dlrt_trainer_t *t, float tail[2], void **request, int *started);
int dlrt__dp_size_requests(dlrt_trainer_t *t);
/* Whether a replica spills (dlrt_trainer_set_devices_memory); the replicas'
 * spilling figures summed (dlrt__spill_stats_add). */
int dlrt__dp_spills(const dlrt_trainer_t *t);
int dlrt__dp_spill_stats(dlrt_trainer_t *t, dlrt_spill_stats *out);
/* The main executor takes the replicas' (or the stages') parameters. */
int dlrt__dp_sync_main(dlrt_trainer_t *t);
/* One pipeline step over the stages on a batch's pinned rows (`inputs` as
 * dlrt__dp_step's); *loss and *correct for the batch. */
int dlrt__pipeline_step(dlrt_trainer_t *t, const void *inputs, const int32_t *labels, float lr,
                        float *loss, int64_t *correct);
void dlrt__pipeline_free(dlrt_trainer_t *t);
/* The main executor takes the stages' parameters; nothing without stages. */
int dlrt__pipeline_sync_main(dlrt_trainer_t *t);
/* A GPT's cuts into n pipeline stages, n <= its blocks: cuts[s] is the
 * first block of stage s + 1 (balancing parameters; pipeline.c). */
void dlrt__gpt_stage_cuts(const dlrt_gpt_config *c, int n, int *cuts);
/* A pipeline's replicas across processes (dlrt_trainer_set_allreduce_async
 * set on a pipelined trainer): each stage's gradients averaged with the
 * same stage's on the other ranks before every update. */
int dlrt__pipeline_set_ranks(dlrt_trainer_t *t);
/* pipeline_tp.c: tensor x pipeline parallelism (t->ptp; each hook is for
 * a trainer with t->ptp set). The shard every stage is built for (NULL
 * without); a stage's executor takes its collective and its shard's
 * tensors cut from the whole ones; the first stage's tokens shifted to the
 * shard's vocabulary; over every stage's gradient sums (after the tied
 * wte's sum) the squares of the global norm (each piece of a shard, the
 * tensors every rank holds whole on rank 0 only, the last stage's wte left
 * out) and whether all are finite, over the tensor-parallel ranks; a
 * stage's exported tensors made whole in place (a collective); the rank
 * among the tensor-parallel ranks; freed with the trainer. */
const dlrt_gpt_shard *dlrt__ptp_shard(const dlrt_trainer_t *t);
int dlrt__ptp_stage_import(dlrt_trainer_t *t, dlrt_exec_t *e, const dlrt_host_tensor *whole,
                           int n);
void dlrt__ptp_shift_tokens(const dlrt_trainer_t *t, int32_t *tokens, int64_t n);
int dlrt__ptp_check(dlrt_trainer_t *t, double *squares, int *finite);
/* Whether a stage's parameter w counts in the global norm on this rank (a
 * piece of the shard: yes; a tensor every rank holds whole: on rank 0), and
 * the sum of n floats over the tensor-parallel ranks, in place (ZeRO over
 * the composition's replicas, pipeline_zero.c). */
int dlrt__ptp_counted(const dlrt_trainer_t *t, const dlrt_tensor_t *w);
int dlrt__ptp_sum(dlrt_trainer_t *t, float *v, int64_t n);
int dlrt__ptp_gather(dlrt_trainer_t *t, dlrt_host_tensor *part, int n);
/* The whole model's tensors from the stages' shards, as dlrt_exec_export
 * lists them for one device (dlrt__trainer_export; a collective); an
 * evaluation batch (tokens B x T, targets B T) forward through the stages,
 * *loss its mean; the stages' step count to the trainer's executor, which
 * keeps no storage (dlrt__pipeline_sync_main, after a load). */
int dlrt__ptp_export(dlrt_trainer_t *t, int with_state, dlrt_host_tensor **out, int *n);
int dlrt__ptp_evaluate(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                       float *loss);
int dlrt__ptp_sync(dlrt_trainer_t *t);
/* dlrt_trainer_info: the whole model's parameter and state bytes, the
 * largest stage's planned and measured peaks. */
int dlrt__ptp_info(dlrt_trainer_t *t, dlrt_exec_info *out);
int dlrt__ptp_rank(const dlrt_trainer_t *t);
void dlrt__ptp_free(dlrt_trainer_t *t);
/* parallel.c: the training loader is made again at the next epoch (whether it
 * copies batches to the device depends on replicas and stages). */
void dlrt__drop_train_loader(dlrt_trainer_t *t);

/* tensor_parallel.c: tensor parallelism's peers, each on the whole batch
 * (tokens B x T, targets B T). A training step (*loss the batch's mean);
 * an evaluation batch's forward pass; the whole model's tensors gathered
 * from the shards (under the model's names and shapes, as dlrt_exec_export
 * lists them) and cut back into them. */
typedef struct dlrt__tp dlrt__tp;
void dlrt__tp_free(dlrt_trainer_t *t);
int dlrt__tp_step(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets, float lr,
                  float *loss);
int dlrt__tp_evaluate(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                      float *loss);
int dlrt__tp_export(dlrt_trainer_t *t, dlrt_host_tensor **tensors, int *n);
int dlrt__tp_import(dlrt_trainer_t *t, const dlrt_host_tensor *tensors, int n);
/* This process's rank among tensor parallel ranks (0 in one process). */
int dlrt__tp_rank(const dlrt_trainer_t *t);
/* After the trainer's all-reduce was set (or cleared) on a split model: its
 * updates go through the host when there are replicas to average over. */
int dlrt__tp_set_replicas(dlrt_trainer_t *t);
/* dlrt_trainer_info: the whole model's parameter and state bytes, the
 * largest peer's planned and measured peaks. */
int dlrt__tp_info(dlrt_trainer_t *t, dlrt_exec_info *out);
/* tensor_parallel_memory.c: the split model's peers under memory options.
 * Their spilling figures summed (*spill, *stream; both zero where no peer
 * spills or streams); whether any spills, streams. */
int dlrt__tp_memory_stats(dlrt_trainer_t *t, dlrt_spill_stats *spill,
                          dlrt_param_offload_stats *stream);
int dlrt__tp_spills(const dlrt_trainer_t *t);
/* pipeline.c: whether a pipeline's stages spill, and their figures summed
 * (peaks the largest). */
int dlrt__pipeline_spills(const dlrt_trainer_t *t);
int dlrt__pipeline_spill_stats(dlrt_trainer_t *t, dlrt_spill_stats *out);
/* Adds one executor's spill figures to a sum over several (a split model's
 * peers, a pipeline's stages): counts summed, peaks the largest. */
void dlrt__spill_stats_add(dlrt_spill_stats *sum, const dlrt_spill_stats *s);
int dlrt__tp_streams(const dlrt_trainer_t *t);
/* trainer.c, for the peers too: the segments DLRT_CHECKPOINT_AUTO chooses
 * for e's budget (*every forward nodes a segment, 0 none), and the spilling
 * budget of an executor on dev (device_budget 0: none). */
int dlrt__choose_checkpoint_every(dlrt_exec_t *e, const dlrt_graph_t *g, dlrt_device_t *dev,
                                  uint64_t spill_budget, uint64_t outside, int *every);
int dlrt__spill_budget(dlrt_exec_t *e, dlrt_device_t *dev, const dlrt_spill_config *spill,
                       uint64_t outside, dlrt_spill_config *out, char *note, size_t size);
/* zero.c: ZeRO sharding (dlrt_trainer_set_zero). The update after the
 * gradients of a step: `grads` (host, bucket order, the mean over the
 * replicas in at least each of this process's ranges; in stage 1 every
 * element) go to their owners, which update their ranges; the parameters
 * are all-gathered. */
int dlrt__zero_update(dlrt_trainer_t *t, const float *grads);
/* The ZeRO stage (0: none). */
int dlrt__zero_stage(const dlrt_trainer_t *t);
/* Across processes, stage >= 2: starts the reduce of bucket b's ranges to
 * their owners (requests from *started on; *started counts them). */
int dlrt__zero_reduce_bucket(dlrt_trainer_t *t, float *bucket, int64_t from, int64_t count,
                             void **requests, int *started);
/* The main executor takes what the replicas hold (batch-norm statistics,
 * the parameters) and the optimizer state is gathered for checkpoints. */
int dlrt__zero_sync_main(dlrt_trainer_t *t);
/* The trainer's tensors as dlrt_exec_export gives them, whole, for
 * checkpoints and the ranks' fingerprint (with or without sharding). */
int dlrt__trainer_export(dlrt_trainer_t *t, int with_state, dlrt_host_tensor **tensors, int *n);
void dlrt__zero_free(dlrt_trainer_t *t);
/* Rebalancing replicas under ZeRO: the whole state for replica_build (the
 * shards let go), then every replica sharded again. */
int dlrt__zero_rebuild_begin(dlrt_trainer_t *t, dlrt_host_tensor **state, int *n);
int dlrt__zero_rebuild_end(dlrt_trainer_t *t);
/* zero_peer.c: ZeRO over the data-parallel replicas of one executor among
 * a rank's (a tensor-parallel peer, a pipeline stage): the executor `e`
 * lets go of its model states (dlrt__exec_set_shard) and keeps replica
 * `replica`'s range of `replicas` of its gradient vector, over the data
 * collectives `coll`. Stage 1's vector is dlrt_exec_gradients_read's
 * (tensor order); stages 2 and 3 stream the gradients in buckets
 * (dlrt__exec_buckets_host, bucket order). layout: the parameters (ids,
 * flat offsets, n) and this replica's range [from, to). reduce_scatter:
 * each range of `grads` summed into its owner's. update: this replica's
 * range updated from `grads` (the mean gradients, times `scale`; at stage
 * 1 NULL where the executor's gradient sums hold them already), the
 * parameters all-gathered into every replica's peer (stage 3: into the
 * host copy its uses are gathered from). sync: the optimizer state gathered
 * on every replica (collective), for export: the peer's tensors whole, as
 * dlrt_exec_export lists them. figures: the model-state bytes `e` (with z's
 * pieces; z NULL: none) holds, and would unsharded. */
int dlrt__zero_peer_create(dlrt_exec_t *e, dlrt_device_t *dev, int stage, int replica,
                           int replicas, const dlrt_zero_collectives *coll, int sgd,
                           struct dlrt__zero **out);
void dlrt__zero_peer_free(struct dlrt__zero *z);
/* Executor e's update under ZeRO (z its peer object): this replica's
 * range from `grads` (NULL: e's own sums, stage 1) at the scale
 * dlrt_exec_apply_gradients would use (the mean of its gradient runs, the
 * loss scale divided out) times `factor` (clipping's), the parameters
 * all-gathered; where the group's verdict is not `finite`, no update and
 * the loss scale backs off. Either way its gradient runs start again. */
int dlrt__zero_peer_apply(struct dlrt__zero *z, dlrt_exec_t *e, const float *grads,
                          float factor, int finite);
/* Whether ZeRO can shard over the data ranks: the ranks' reduce,
 * broadcast and wait in `across`, more than one process, and the
 * replicas' asynchronous all-reduce set. */
int dlrt__zero_across_ready(const dlrt_trainer_t *t, const dlrt_zero_collectives *across);
/* An executor to shard, its device, and where its ZeRO object goes. */
typedef struct {
  dlrt_exec_t *e;
  dlrt_device_t *dev;
  struct dlrt__zero **slot;
} dlrt__zero_peer_spec;
/* One ZeRO object per peer of `peers` (n), sharded over the data ranks:
 * all or none (on failure those made are freed, the slots NULL, and the
 * error names `whose` executors). */
int dlrt__zero_peers_create(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across,
                            const dlrt__zero_peer_spec *peers, int n, const char *whose);
void dlrt__zero_peer_layout(const struct dlrt__zero *z, int *n, const int **ids,
                            const int64_t **at, int64_t *from, int64_t *to);
/* reduce_scatter: each owner's range of `grads` summed into its owner's,
 * leaving out the elements of tensor `whole` (-1: none), which the caller
 * reduces to every rank itself (a pipeline's tied wte, which two stages sum
 * with each other after the reduction). */
int dlrt__zero_peer_reduce_scatter(struct dlrt__zero *z, float *grads, int whole);
/* Stages 2 and 3: the gradients of the executor's DLRT_RUN_GRADIENTS run
 * just queued, from its buckets on the host (waited for) into `sums` (the
 * layout's vector, bucket order): the first run since the last update
 * copies, later ones add, as the device's accumulators would. */
int dlrt__zero_peer_gradients_add(struct dlrt__zero *z, float *sums);
/* Over this replica's range of `grads` (the layout's vector): the sum of
 * the squares (in double) of the elements of the parameters that
 * `counted(user, tensor id)` keeps (NULL: all), and whether every element
 * is finite; either output may be NULL. */
void dlrt__zero_peer_range_check(const struct dlrt__zero *z, const float *grads,
                                 int (*counted)(void *user, int id), void *user,
                                 double *squares, int *finite);
int dlrt__zero_peer_update(struct dlrt__zero *z, const float *grads, float scale);
int dlrt__zero_peer_sync(struct dlrt__zero *z);
int dlrt__zero_peer_export(struct dlrt__zero *z, dlrt_host_tensor **tensors, int *n);
/* As dlrt__zero_peer_export, with the optimizer state or without it. */
int dlrt__zero_peer_export_as(struct dlrt__zero *z, int with_state, dlrt_host_tensor **tensors,
                              int *n);
void dlrt__zero_peer_figures(const dlrt_exec_t *e, const struct dlrt__zero *z,
                             dlrt_zero_info *out);
/* pipeline_zero.c: ZeRO over the data-parallel ranks of a pipeline
 * (dlrt_trainer_set_zero on a pipeline trainer: each stage's model states
 * in ranges, one per rank) and its figures (dlrt_trainer_zero_info: the
 * sum over the stages). Stages 2 and 3: gather adds stage s's gradients of
 * the run just queued into its sums on the host (after each of its
 * DLRT_RUN_GRADIENTS runs); update is the stages' update from those sums
 * (reduce-scattered, one overflow verdict and clipping norm). */
int dlrt__pipeline_set_zero(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across);
int dlrt__pipeline_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out);
int dlrt__pipeline_zero_gather(dlrt_trainer_t *t, int s);
int dlrt__pipeline_zero_update(dlrt_trainer_t *t);
/* tensor_parallel.c: ZeRO over the replicas of a split model
 * (dlrt_trainer_set_zero on a tensor-parallel trainer), its figures
 * (dlrt_trainer_zero_info: the largest peer's) and the optimizer state
 * gathered at the end of an epoch (for checkpoints). */
int dlrt__tp_set_zero(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across);
int dlrt__tp_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out);
int dlrt__tp_sync(dlrt_trainer_t *t);

/* diverge.c: a run that diverges stops with DLRT_ERR_DIVERGED and a message
 * naming the update and the likely cause. The learning rate of update
 * `step` (0-based within the epoch's `steps`) before it runs; the loss of
 * an update (the sum of its micro-batches' losses, all read back already:
 * no extra device sync) with the loss scale before it, after it ran; the
 * mean test loss of an evaluation. */
int dlrt__check_lr(const dlrt_trainer_t *t, float lr, int epoch, int64_t step, int64_t steps);
int dlrt__check_update(dlrt_trainer_t *t, double loss, const dlrt_loss_scale_state *before,
                       int epoch, int64_t step, int64_t steps);
int dlrt__check_test_loss(const dlrt_trainer_t *t, double loss);

/* Builds a classifier's training graph into g: inputs "images" (batch x
 * channels x height x width) and "labels", the model, a kept logits tensor,
 * the cross-entropy loss, the backward pass and the optimizer's updates. */
/* Loss scaling on an executor as the config asks (fp16: on by default). */
int dlrt__set_loss_scaling(dlrt_exec_t *e, const dlrt_trainer_config *cfg);
int dlrt__build_classifier(dlrt_graph_t *g, const dlrt_trainer_config *cfg, int64_t channels,
                           int64_t height, int64_t width, int64_t classes,
                           dlrt_tensor_t **images, dlrt_tensor_t **labels, dlrt_tensor_t **logits,
                           dlrt_tensor_t **loss);
/* plan.c: the least device budget spilling can train cfg's model in, with
 * cfg's checkpointing and offload policy: what dlrt_exec_set_spill needs
 * for the executor's storages (the loaders and accumulators not counted). */
int dlrt__plan_spill_least(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                           int64_t width, int classes, uint64_t *least);

/* gpt.c: 1 when cfg's model is a GPT preset, with its sizes (the preset's
 * replaced by cfg->gpt's) in *out when out is not NULL. */
int dlrt__gpt_model(const dlrt_trainer_config *cfg, dlrt_gpt_config *out);
/* gpt.c: blocks [first, last) of c's model, a pipeline stage, on `batch`
 * windows of T tokens. The first stage (first 0) takes `in` = the tokens
 * (batch x T, I32) and has the embeddings; the others take `in` = the
 * residual stream ((batch T) x C, F32). *out is the residual stream after
 * block last - 1, except on the last stage (last = c->layers, targets given:
 * batch T, I32), which ends in the final LayerNorm and the head fused into
 * its loss with a copy of its own of the tied wte: *out is the loss. With
 * `shard` (not NULL), the stage of one tensor-parallel peer, built as
 * dlrt_gpt_build_loss_shard builds the whole model's: its heads and MLP
 * columns in every block, its vocabulary rows of wte on both end stages
 * (tokens shifted by vocab_first), the head through
 * dlrt_linear_cross_entropy_shard; its collectives need the executor's. */
int dlrt__gpt_build_stage(dlrt_graph_t *g, const dlrt_gpt_config *c,
                          const dlrt_gpt_shard *shard, dlrt_tensor_t *in, int64_t batch,
                          int64_t T, int first, int last, dlrt_tensor_t *targets,
                          float smoothing, dlrt_tensor_t **out);

/* The images' type of the trainer's loaders: I32 token windows for a GPT;
 * else the compute type in mixed precision (the graph's input has it), f32
 * for host-only loaders. */
static inline dlrt_dtype dlrt__loader_image_type(const dlrt_trainer_config *cfg, int host_only) {
  if (dlrt__gpt_model(cfg, NULL)) return DLRT_I32;
  int low = cfg->precision == DLRT_F16 || cfg->precision == DLRT_BF16;
  return low && !host_only ? cfg->precision : DLRT_F32;
}

/* Device bytes of one loader of cfg's model: per prefetch slot (at least
 * one) a batch of `pixels` values per sample (of the image type) and of i32
 * labels (one per sample, one per position for a GPT), each in the
 * allocator's block. */
static inline uint64_t dlrt__loader_device_bytes(const dlrt_trainer_config *cfg, int64_t batch,
                                                 int64_t pixels) {
  uint64_t slots = (uint64_t)(cfg->prefetch > 0 ? cfg->prefetch : 1);
  dlrt_dtype image_type = dlrt__loader_image_type(cfg, 0);
  uint64_t images =
      dlrt__alloc_block_bytes((uint64_t)(batch * pixels) * dlrt_dtype_size(image_type));
  int64_t labels_per_sample = dlrt__gpt_model(cfg, NULL) ? pixels : 1;
  uint64_t labels = dlrt__alloc_block_bytes((uint64_t)(batch * labels_per_sample) * 4);
  return slots * (images + labels);
}

/* The trainer's exchange with the host between two steps on machine m,
 * where it is not timed (dlrt_simulate_step on a named machine,
 * dlrt_split_predict): `reads` values read back after the step (the loss,
 * and a classifier's logits), each a round trip of the link's latency
 * (their few bytes aside), and `input_bytes` of the next batch copied into
 * the graph's inputs on the device (read and written at its memory
 * bandwidth); the device waits through it. Seconds. */
static inline double dlrt__exchange_s(const dlrt_machine *m, int reads, double input_bytes) {
  return reads * m->link_latency_s + 2.0 * input_bytes / m->memory_bytes_per_s;
}

#endif
