/*
 * dlrt/parallel.h — a trainer over several devices and processes: data
 * parallelism (devices, MPI ranks), pipeline and tensor parallelism, ZeRO.
 * Included by dlrt.h, which programs include (lib/dlrt.h tells the
 * conventions).
 */
#ifndef DLRT_PARALLEL_H
#define DLRT_PARALLEL_H

#include "dlrt/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Data parallelism over `n` devices of any backends (the same device may be
 * named twice): a replica of the model on each takes `split[i]` rows of
 * every batch (NULL: even shares for the first 4 steps, timed, then shares
 * in proportion to each device's measured rows per second); each computes
 * the gradient of the mean loss over its rows, the host combines them
 * weighted by rows / batch, and every replica makes the same update, so
 * training equals the single-device run with the same batch (to fp32
 * rounding; batch-norm statistics and dropout masks are per replica).
 * The trainer's accumulation (each micro-batch a gradient run on every
 * replica, their sums combined once per update), checkpointing
 * (DLRT_CHECKPOINT_AUTO: segments chosen once, on the first replica, for
 * all), clipping and precision apply to the replicas; a budget is theirs
 * (dlrt_trainer_set_devices_memory, before this), not the trainer's own
 * spilling (DLRT_ERR_UNSUPPORTED). Across processes as well: set the
 * devices first, then dlrt_trainer_set_allreduce_async. */
DLRT_API int dlrt_trainer_set_devices(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                                      const int64_t *split);
/* Before dlrt_trainer_set_devices: every replica spills within
 * spill->device_budget on its own device (its executor's storages, with the
 * offload policy and host budget given; its gradient sums, one float per
 * parameter, and with clipping the squares' workspace beside them and
 * within the budget too), as one device's trainer does: the same losses
 * bit for bit on the CPU. device_budget 0: no budget. Not
 * DLRT_OFFLOAD_PARAMS in this version (streamed parameters make no
 * gradient runs). */
DLRT_API int dlrt_trainer_set_devices_memory(dlrt_trainer_t *t, const dlrt_spill_config *spill);
/* Replica i's budget under dlrt_trainer_set_devices_memory (its storages'
 * and its gradient sums'; 0: it does not spill) and its spilled storages'
 * peak on the device (0 without a budget). */
DLRT_API int dlrt_trainer_replica_memory(dlrt_trainer_t *t, int i, uint64_t *spill_budget,
                                         uint64_t *spill_peak);
/* Data parallelism across processes (and machines): each process trains on
 * its shard (config.rank of config.world) with its own batch; after each
 * step's backward pass the trainer hands `reduce` one vector of
 * count = parameter elements + 2 floats, [gradients / world, loss / world,
 * correct predictions], to be replaced in place by its sum over all the
 * processes (an MPI all-reduce, say); every process then makes the same
 * update. Equals one process with a batch of world x batch (to fp32
 * rounding). `reduce` returns 0, or a negative dlrt status with the reason
 * set (dlrt stops the epoch with it). NULL: off. */
typedef int (*dlrt_allreduce_fn)(void *user, float *values, int64_t count);
DLRT_API int dlrt_trainer_set_allreduce(dlrt_trainer_t *t, dlrt_allreduce_fn reduce,
                                        void *user);
/* The same, overlapped with the backward pass (as PyTorch DDP's buckets):
 * the gradients are handed over in buckets of about 1 MiB as the backward
 * pass finishes them, last layers first, each to `start`, which begins a
 * non-blocking sum over the processes (MPI_Iallreduce, say) of `values` in
 * place and sets *request; the loss and correct predictions follow as one
 * last vector of 2. `wait` then completes each request in turn. Both return
 * 0, or a negative dlrt status with the reason set. Gradients arrive
 * already divided by the world size. With accumulation (config.accum K)
 * each micro-batch is a gradient run whose buckets the host sums; only the
 * update's last one hands them over (one all-reduce an update, the loss
 * and correct count of the K micro-batches after them). Replicas in this
 * process (dlrt_trainer_set_devices, set first) combine theirs before they
 * go. On a pipelined trainer (set the pipeline first), each stage's
 * gradient sums go as one vector before each update, and each batch's loss
 * and correct count as a vector of 2. With DLRT_CHECKPOINT_AUTO the
 * processes agree on the shortest segments any chose (one all-gather,
 * made through `start` now). Not with streamed parameters
 * (DLRT_OFFLOAD_PARAMS). */
typedef int (*dlrt_allreduce_start_fn)(void *user, float *values, int64_t count,
                                       void **request);
typedef int (*dlrt_allreduce_wait_fn)(void *user, void *request);
DLRT_API int dlrt_trainer_set_allreduce_async(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                                              dlrt_allreduce_wait_fn wait, void *user);
/* The same with device pointers, for an MPI that reads device memory
 * (CUDA-aware): each parameter's summed gradient is handed over where it
 * lies on the training device, already divided by the world size, after
 * the backward pass (no copy through the host); the loss and correct
 * predictions follow in host memory as before. CUDA devices only
 * (DLRT_ERR_UNSUPPORTED elsewhere). */
DLRT_API int dlrt_trainer_set_allreduce_device(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                                               dlrt_allreduce_wait_fn wait, void *user);
/* An all-gather: every process's `bytes` bytes at `mine` to all of them,
 * rank by rank, into `all` (world x bytes), as MPI_Allgather does. Returns
 * 0, or a negative dlrt status with the reason set. */
typedef int (*dlrt_allgather_fn)(void *user, const void *mine, void *all, size_t bytes);
/* At the start of a job across processes (config.rank of config.world,
 * after dlrt_trainer_load when resuming), checks that every process trains
 * the same: a fingerprint of what changes the training (the model's layers
 * and shapes, batch, optimizer and its settings, seed, schedule, clipping,
 * accumulation, checkpointing, precision, loss scaling, augmentation, the
 * training data's size, shape, labels and a sample of its images, the
 * optimizer step, the ZeRO stage of dlrt_trainer_set_zero, called before, and
 * the parameters) is gathered from every rank through
 * `gather` and compared with rank 0's. Every rank then returns the same
 * verdict: DLRT_OK, or DLRT_ERR_INVALID_ARG naming the first rank and field
 * that differ ("rank 1 ... its seed (--seed) is 2, rank 0's 1"), so all can
 * stop together. The number of epochs is not compared (outside a cosine
 * schedule): a rank that stops early is the all-reduce's to notice. */
DLRT_API int dlrt_trainer_check_ranks(dlrt_trainer_t *t, const dlrt_dataset *train,
                                      dlrt_allgather_fn gather, void *user);
/* Pipeline parallelism: the model's layers cut into n stages on the given
 * devices (any backends), where activations are matrices (after a flatten
 * or linear layer), balancing their parameters; each batch goes through in
 * `micro` micro-batches on the GPipe schedule (all forward, then all
 * backward, each stage recomputing its forward), activations and gradients
 * passing between stages through the host, and every stage updates from
 * the mean over the micro-batches: equal to one device with the same batch
 * (to fp32 rounding). A GPT is cut at block boundaries (at most a stage
 * per block), the embeddings with the first stage and the final LayerNorm
 * and head with the last; those two hold a copy each of the tied token
 * embedding, whose two gradients are summed into both before every update
 * (the same update on both sides). The trainer's accumulation (each
 * stage's sums run on over its batches), clipping (one global norm, the
 * tied embedding once), checkpointing (inside each stage;
 * DLRT_CHECKPOINT_AUTO chooses each stage's segments for its own device's
 * budget) and precision (activations between stages in fp32;
 * under fp16 one loss scale and one overflow verdict for all stages) apply
 * to the stages. Not with the trainer's own spilling (give the stages a
 * budget with dlrt_trainer_set_pipeline_memory), --devices, MPI or a GPT's
 * dropout in this version. Each stage split over tensor-parallel ranks as
 * well: dlrt_trainer_set_pipeline_tensor_parallel. */
DLRT_API int dlrt_trainer_set_pipeline(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                                       int micro);
/* Before dlrt_trainer_set_pipeline: every stage spills within
 * spill->device_budget on its own device (its executor's storages, with
 * the offload policy and host budget given; its gradient sums, one float
 * per parameter, beside them and within the budget too), as one device's
 * trainer does (dlrt_exec_set_spill): the same losses bit for bit on the
 * CPU. device_budget 0: no budget. Not DLRT_OFFLOAD_PARAMS, nor with tensor
 * x pipeline parallelism, in this version. */
DLRT_API int dlrt_trainer_set_pipeline_memory(dlrt_trainer_t *t, const dlrt_spill_config *spill);
/* Tensor parallelism for GPT models (Megatron-LM): the model's blocks split
 * over n devices of any backends in this process (2 to DLRT_TP_MAX), each
 * holding its shard (dlrt_gpt_shard: attention heads in proportion to
 * `weights`, NULL for even shares, at least one each, the MLP's columns
 * and rows with them, and as many rows of the vocabulary) and training it
 * on the whole batch; one thread per device runs its graph, and the peers'
 * partial sums meet through host buffers (pinned where the device has
 * them) in device order, so every peer gets the same bits. Equals one
 * device (to fp32 rounding: sums in another order). The trainer's whole
 * parameters move into the shards: evaluation runs on the peers and
 * checkpoints gather whole tensors (dlrt_trainer_save writes the same file
 * as one device; dlrt_trainer_load cuts one into the shards). Call after
 * dlrt_trainer_load when resuming. The trainer's device holds the whole
 * model until then: make the trainer on the host's CPU device for a model
 * larger than one accelerator (its initial values do not depend on the
 * device). Accumulation, clipping (the global norm over the whole model,
 * each tensor the peers hold whole counted once), checkpointing and fp16
 * loss scaling (one overflow verdict for
 * the peers) work as on one device. Data-parallel replicas of a split
 * model across processes: set the all-reduce (dlrt_trainer_set_allreduce
 * or _async, config.world the replicas) after the split; each shard's
 * gradients are then averaged over the replicas through the host. Each
 * peer spills within its own budget: dlrt_trainer_set_tensor_parallel_memory.
 * GPT models only, without --devices, --pipeline or ZeRO set before the
 * split (DLRT_ERR_UNSUPPORTED naming it). */
#define DLRT_TP_MAX 64
DLRT_API int dlrt_trainer_set_tensor_parallel(dlrt_trainer_t *t, dlrt_device_t *const *devs,
                                              int n, const double *weights);
/* The same across `ranks` processes, each holding shard `rank` on `dev`
 * (NULL: the trainer's device; every rank calls it, with the same weights): the
 * peers' sums go through `fn` (an MPI_Allreduce of MPI_SUM or MPI_MAX on
 * MPI_FLOAT, say; tag -1 marks the sums that gather a checkpoint's
 * tensors, -2 the overflow verdict and the clipping norm). The ranks of
 * one split train on the same batches: config.world and config.rank count
 * the data-parallel replicas, each of `ranks` ranks (1 without), and `fn`
 * sums over the ranks of this rank's replica only. Every rank of a replica
 * calls dlrt_trainer_save (the shards are gathered through `fn`; shard 0
 * writes the file, the others return 0). */
DLRT_API int dlrt_trainer_set_tensor_parallel_ranks(dlrt_trainer_t *t, dlrt_device_t *dev,
                                                    int rank, int ranks,
                                                    const double *weights,
                                                    dlrt_collective_fn fn, void *user);
/* The memory options of a split model's peers, set before the split
 * (dlrt_trainer_set_tensor_parallel or _ranks), as config.spill and
 * config.checkpoint set them for one device, each peer on its own device:
 * its executor spills within spill->device_budget bytes (or the device's
 * DLRT_MEM_LIMIT budget, as one device's trainer does), its parameters
 * stream from the host with DLRT_OFFLOAD_PARAMS (then the budget bounds its
 * device's allocator: peers sharing one device share a limit of the budget
 * times their count), and DLRT_CHECKPOINT_AUTO chooses the segments on the
 * first peer's graph and budget and gives every peer the same (their
 * collectives meet in the same order when a segment is run again). A
 * spilling peer may run an operation later, never in another order, so
 * the peers meet as without a budget; the results are the unlimited
 * split's bit for bit on the CPU and PoCL. Without this call the peers take
 * the trainer's config.spill and config.checkpoint; make the trainer
 * without them (its executor holds the whole model only until the split)
 * and give them here. --accum sums on each peer. Updates through the host
 * (clipping, fp16 loss scaling, data-parallel replicas) work: the peers'
 * gradient runs spill too, their sums (param_bytes) on each device beside
 * the pool and within the budget, which the split gives them when it knows
 * of the update (config.clip_norm, fp16, config.world > 1 for replicas
 * whose all-reduce comes after it; else DLRT_ERR_UNSUPPORTED at
 * dlrt_trainer_set_allreduce_async). Not with DLRT_OFFLOAD_PARAMS (no
 * gradient runs) nor ZeRO: DLRT_ERR_UNSUPPORTED. */
DLRT_API int dlrt_trainer_set_tensor_parallel_memory(dlrt_trainer_t *t,
                                                     const dlrt_spill_config *spill,
                                                     int checkpoint);
/* One peer of this process: its device, rank, shard and executor's bytes:
 * the planned peak, its device allocator's measured peak (peers on one
 * device share it) and, where it spills, its budget and the most its
 * storages held on the device (spill_peak_bytes: its own, shared device or
 * not). */
typedef struct {
  const char *device;
  int rank;
  int head_first, heads;
  int64_t vocab_first, vocab;
  uint64_t param_bytes, state_bytes, planned_peak_bytes;
  uint64_t measured_peak_bytes, spill_budget_bytes, spill_peak_bytes;
} dlrt_tp_peer_info;
/* The peers of this process (*n; 0 without tensor parallelism), the first
 * `max` of them in out. */
DLRT_API int dlrt_trainer_tensor_parallel(const dlrt_trainer_t *t, dlrt_tp_peer_info *out,
                                          int max, int *n);
/* The layers [first[s], last[s]) of each stage s (*n stages; 0: none); a
 * GPT's blocks, numbered as its parameter names number them (h.0 ..). */
DLRT_API int dlrt_trainer_stages(const dlrt_trainer_t *t, int *first, int *last, int *n);
/* Tensor x pipeline parallelism for GPT models: the blocks cut into n
 * pipeline stages on `devs` in this process (as dlrt_trainer_set_pipeline,
 * `micro` micro-batches on the GPipe schedule) and every stage split over
 * `ranks` processes Megatron-style, this one holding shard `rank` of each
 * (dlrt_gpt_shard: heads by `weights`, NULL for even shares, the MLP's
 * columns and rows with them, as many vocabulary rows of the tied wte on
 * the first and the last stage); the stages' collectives go through `fn`
 * (tags as dlrt_trainer_set_tensor_parallel_ranks's). Every rank must run
 * the same steps. config.world and config.rank count the data-parallel
 * replicas, each of `ranks` ranks; their all-reduce
 * (dlrt_trainer_set_allreduce_async) is set after this call, and sums each
 * stage with the same stage of the same shard. Accumulation, clipping (one
 * global norm over the stages and shards), in-stage checkpointing and
 * precision as the pipeline takes them. The trainer's executor keeps no
 * storage after it (the model lives in the stages' shards): evaluation
 * runs through the stages, and dlrt_trainer_save (and the ranks'
 * dlrt_trainer_check_ranks) gathers whole tensors from them over the ranks,
 * so every rank of a replica calls it (rank 0 writes; the file is one
 * device's); dlrt_trainer_load cuts one into the shards. ZeRO
 * (dlrt_trainer_set_zero, after the all-reduce) shards each stage's shard
 * over its replicas. Not with spilling or --devices in this version. */
DLRT_API int dlrt_trainer_set_pipeline_tensor_parallel(dlrt_trainer_t *t,
                                                       dlrt_device_t *const *devs, int n,
                                                       int micro, int rank, int ranks,
                                                       const double *weights,
                                                       dlrt_collective_fn fn, void *user);
/* One pipeline stage of this process: its device and layers (a GPT's
 * blocks), and under tensor x pipeline parallelism this rank's shard of it
 * (rank of ranks; heads 0 and ranks 0 without); its executor's bytes; under
 * dlrt_trainer_set_pipeline_memory its budget and the most its own
 * storages held on the device (0 without). */
typedef struct {
  const char *device;
  int first, last;
  int rank, ranks;
  int head_first, heads;
  int64_t vocab_first, vocab;
  uint64_t param_bytes, state_bytes, planned_peak_bytes;
  uint64_t spill_budget_bytes, spill_peak_bytes;
} dlrt_stage_info;
/* The stages (*n; 0 without a pipeline), the first `max` of them in out. */
DLRT_API int dlrt_trainer_stage_info(dlrt_trainer_t *t, dlrt_stage_info *out, int max, int *n);
/* The rows of each batch each device takes now (*n devices). */
DLRT_API int dlrt_trainer_split(const dlrt_trainer_t *t, int64_t *split, int *n);

/* ZeRO sharding of the model states across data-parallel replicas
 * (Rajbhandari et al. 2020), for replicas in one process
 * (dlrt_trainer_set_devices first) or one replica per process (across: the
 * collectives below, after dlrt_trainer_set_allreduce_async, whose
 * all-reduce still sums the loss, and in stage 1 the gradients). The
 * parameters with gradients are laid end to end in gradient-bucket order
 * and cut into one flat range per replica (equal element counts, each cut
 * on a 64-element boundary of a parameter), so the shards are even whatever
 * the tensors' sizes. Stage 1: each replica keeps the optimizer state of
 * its range only, updates only it (the same update kernels, over the
 * range) and the updated values go to every replica (an all-gather through
 * the host); stage 2: the gradients too: each range is reduced to its
 * owner only (a reduce-scatter), and each device lets a gradient go as soon
 * as its bucket is on its way to the host; stage 3: the parameters too:
 * each device holds its range between steps, and the whole of a parameter
 * is gathered (from pinned host memory, where the all-gather leaves every
 * parameter) just before its first use in the forward pass and again in
 * the backward pass, and freed after the last use of each. Training equals
 * plain data parallel (the same sums and update kernels per element, to
 * fp32 rounding); checkpoints stay whole (dlrt_trainer_save writes every
 * full tensor) and resume with or without sharding. Not with fp16 loss
 * scaling, CUDA-aware device all-reduces (dlrt_trainer_set_allreduce_device)
 * or the device-to-device all-reduce of replicas (NCCL: the host combines
 * them instead) in this version. Rebalancing the split after the first
 * steps (dlrt_trainer_set_devices without a split) rebuilds the replicas,
 * which shard again from the host copies. On a tensor-parallel trainer
 * (after dlrt_trainer_set_tensor_parallel* and, across processes, the
 * replicas' dlrt_trainer_set_allreduce_async) each peer's shard is sharded
 * over the replicas that hold the same shard, with `across` the data
 * ranks' collectives (root: a rank among them): the same three stages,
 * with accumulation, clipping (one global norm) and fp16 loss scaling (one
 * overflow verdict); load a checkpoint before, not after (DLRT_ERR_STATE).
 * On a pipeline trainer across processes (after dlrt_trainer_set_pipeline
 * and dlrt_trainer_set_allreduce_async) each stage's executor is sharded
 * over the ranks, with `across` their collectives: the same three stages
 * (from 2 on, each stage's gradients summed on the host and reduce-scattered;
 * a GPT's tied wte all-reduced whole), with accumulation, clipping and fp16
 * loss scaling, one norm and one verdict over every stage; refused in one
 * process. Under tensor x pipeline parallelism
 * (dlrt_trainer_set_pipeline_tensor_parallel) the same, each stage's shard
 * over its replicas (config.world of them), the norm and the verdict over
 * the shards too. Stage 0 turns nothing on (DLRT_ERR_INVALID_ARG outside 0
 * to 3, or without replicas). Once per trainer. */
typedef int (*dlrt_collective_start_fn)(void *user, float *values, int64_t count, int root,
                                        void **request);
typedef struct {
  /* Sums `values` over the processes into rank `root`'s `values`, in place
   * (MPI_Ireduce; the others' are left as they were). */
  dlrt_collective_start_fn reduce;
  /* Copies rank `root`'s `values` to every process's (MPI_Ibcast). */
  dlrt_collective_start_fn broadcast;
  dlrt_allreduce_wait_fn wait; /* completes a request of either */
  void *user;
} dlrt_zero_collectives;
DLRT_API int dlrt_trainer_set_zero(dlrt_trainer_t *t, int stage,
                                   const dlrt_zero_collectives *across);
/* The model states a data-parallel replica holds between steps, in tensor
 * bytes: the largest replica's (this process's across processes), and what
 * an unsharded replica holds (stage 0: the same). Gathered parameters
 * during a pass and each step's own gradients until their buckets leave
 * are transient and not counted (the devices' measured peaks hold them). */
typedef struct {
  int stage;    /* 0: not sharded */
  int replicas; /* devices in one process, or processes; 1 without data parallelism.
                   A tensor-parallel trainer: its replicas across processes, and
                   its largest peer's bytes (of its shard; full_*: the shard's
                   unsharded) */
  uint64_t param_bytes, grad_bytes, optimizer_bytes;
  uint64_t full_param_bytes, full_grad_bytes, full_optimizer_bytes;
} dlrt_zero_info;
DLRT_API int dlrt_trainer_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_PARALLEL_H */
