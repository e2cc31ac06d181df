/*
 * dlrt/train.h — models, the trainer, data parallelism, memory planning,
 * traces and CPU threads.
 * Included by dlrt.h, which programs include (lib/dlrt.h tells the
 * conventions).
 */
#ifndef DLRT_TRAIN_H
#define DLRT_TRAIN_H

#include "dlrt/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Models and training                                                       */
/* ------------------------------------------------------------------------ */

/* Builds a sequential model on `input` (N x C x H x W) into `g` and returns
 * its logits (N x classes) in *logits. `spec` is a preset or a model file:
 *   "mlp": flatten, linear 512, relu, linear 512, relu, linear classes;
 *   "cnn": conv2d 32 3, relu, maxpool 2, conv2d 64 3 pad=1, relu, maxpool 2,
 *          flatten, linear 128, relu, linear classes;
 *   FILE: one layer per line ('#' starts a comment):
 *     conv2d OUT K [stride=S] [pad=P] [dilation=D]
 *     maxpool K [stride=S]        (stride defaults to K)
 *     avgpool K [stride=S]
 *     linear OUT                  (flattens its input when needed)
 *     relu | tanh | sigmoid | gelu | gelu_tanh   (GELU exact, or its tanh form)
 *     dropout P                   (drop probability in [0, 1))
 *     batchnorm                   (per channel or feature; momentum 0.1, eps 1e-5)
 *     flatten
 *   A final "linear classes" is appended when the file does not end in one.
 * A bad file gives DLRT_ERR_INVALID_ARG with "FILE:LINE: what is wrong". */
DLRT_API int dlrt_model_build(dlrt_graph_t *g, const char *spec, dlrt_tensor_t *input,
                              int64_t classes, dlrt_tensor_t **logits);

/* GPT-2's architecture (lib/train/gpt.c): token and learned position
 * embeddings, `layers` pre-LayerNorm blocks of causal self-attention over
 * `heads` heads and a GELU (tanh form) MLP of 4 x embd, a final LayerNorm
 * and an LM head tied to the token embedding. Initialised as GPT-2: normal
 * 0.02, the residual projections 0.02 / sqrt(2 layers), LayerNorms 1 and 0,
 * biases 0. Parameters carry Hugging Face's GPT-2 names and layouts
 * ("transformer.h.0.attn.c_attn.weight", Conv1D weights in x out), so a
 * checkpoint loads into transformers.GPT2LMHeadModel. Weight decay applies
 * to the four matrices of each block only (dlrt_param_set_decay). */
typedef struct {
  int64_t layers, heads, embd; /* embd: the width C, a multiple of heads */
  int64_t context;             /* the longest window, positions embedded */
  int64_t vocab;
  float dropout; /* after the embeddings and on both residual branches; 0: off */
  float attn_dropout; /* on the attention probabilities (GPT-2's attn_pdrop); 0: off */
} dlrt_gpt_config;

/* The preset NAME, case-insensitive: "gpt-mini" (4 layers, 4 heads, 128
 * wide, context 128, vocabulary 256: byte tokens), "gpt2" (124M: 12, 12,
 * 768, 1024, 50257), "gpt2-medium" (24, 16, 1024), "gpt2-large" (36, 20,
 * 1280), "gpt2-xl" (48, 25, 1600), "gpt3-175b" (96, 96, 12288, context
 * 2048). DLRT_ERR_NOT_FOUND for any other name. */
DLRT_API int dlrt_gpt_preset(const char *name, dlrt_gpt_config *out);
/* The name of preset `index` (0, 1, ...), NULL past the last. */
DLRT_API const char *dlrt_gpt_preset_name(int index);
/* cfg's fields replaced by `with`'s that are not 0. */
DLRT_API void dlrt_gpt_override(dlrt_gpt_config *cfg, const dlrt_gpt_config *with);
/* DLRT_OK, or DLRT_ERR_INVALID_ARG saying which size is wrong. */
DLRT_API int dlrt_gpt_check(const dlrt_gpt_config *cfg);
/* Its parameters (the tied head counted once): 124,439,808 for gpt2. */
DLRT_API int64_t dlrt_gpt_params(const dlrt_gpt_config *cfg);
/* Builds the model on `tokens` (batch x T, I32, T <= context) into g; its
 * logits ((batch T) x vocab, row b T + t for position t of sample b) in
 * *logits. */
DLRT_API int dlrt_gpt_build(dlrt_graph_t *g, const dlrt_gpt_config *cfg, dlrt_tensor_t *tokens,
                            dlrt_tensor_t **logits);
/* The same model with its head fused into the loss: the mean cross-entropy
 * of the next tokens `targets` ((batch T), I32) in *loss, through
 * dlrt_linear_cross_entropy, so the (batch T) x vocab logits are never
 * stored (what the trainer builds). The same parameters, names and values
 * as dlrt_gpt_build's. */
DLRT_API int dlrt_gpt_build_loss(dlrt_graph_t *g, const dlrt_gpt_config *cfg,
                                 dlrt_tensor_t *tokens, dlrt_tensor_t *targets, float smoothing,
                                 dlrt_tensor_t **loss);

/* One peer's shard of a GPT under tensor parallelism (Megatron-LM): its
 * attention heads [head_first, head_first + heads) with their columns of
 * c_attn (q, k and v alike) and rows of attn.c_proj, and the MLP's 4C / H
 * columns of c_fc and rows of mlp.c_proj per head; and, when vocab > 0, its
 * rows [vocab_first, vocab_first + vocab) of the token embedding and the
 * tied LM head (vocab 0: the whole table on every peer). LayerNorms,
 * position embeddings and the row-parallel biases are whole on every peer. */
typedef struct {
  int head_first, heads;
  int64_t vocab_first, vocab;
} dlrt_gpt_shard;
/* Whether `shard` is one of cfg's (DLRT_ERR_INVALID_ARG naming the bound). */
DLRT_API int dlrt_gpt_shard_check(const dlrt_gpt_config *cfg, const dlrt_gpt_shard *shard);
/* dlrt_gpt_build_loss for one peer of a tensor-parallel group: the shard's
 * parameters under the whole model's names, each block with a dlrt_tp_copy
 * before its column-parallel linears and a dlrt_tp_reduce after its
 * row-parallel ones; split by vocabulary, the lookup of the token embedding
 * is summed over the peers (tokens are then the ids minus vocab_first: the
 * other rows' ids embed as zeros) and the loss is
 * dlrt_linear_cross_entropy_shard (targets stay the vocabulary's ids). Run
 * by every peer with dlrt_exec_set_collective, the loss is the whole
 * model's. */
DLRT_API int dlrt_gpt_build_loss_shard(dlrt_graph_t *g, const dlrt_gpt_config *cfg,
                                       const dlrt_gpt_shard *shard, dlrt_tensor_t *tokens,
                                       dlrt_tensor_t *targets, float smoothing,
                                       dlrt_tensor_t **loss);
/* The same model for sampling, one new token per sequence and run:
 * `tokens` (batch x 1, I32) at positions `pos` (batch, I32, each from 0 to
 * context - 1), both inputs written before each run, give the next token's
 * logits (batch x vocab) in *logits. The parameters are dlrt_gpt_build's
 * (names, shapes), so a checkpoint loads into it (dlrt_exec_import); each
 * block keeps key and value caches, "transformer.h.N.attn.k_cache" and
 * ".v_cache" (dlrt_state, batch x context x embd each), which a run fills
 * at its positions (dlrt_attention_decode): run positions 0, 1, 2, ... of a
 * sequence in order, and each run attends to the keys and values the
 * earlier ones left instead of recomputing them. Position t's logits equal
 * row t of dlrt_gpt_build's over the same tokens (to fp32 rounding).
 * Forward runs only; no dropout. */
DLRT_API int dlrt_gpt_build_decode(dlrt_graph_t *g, const dlrt_gpt_config *cfg,
                                   dlrt_tensor_t *tokens, dlrt_tensor_t *pos,
                                   dlrt_tensor_t **logits);

typedef struct dlrt_trainer dlrt_trainer_t;

/* Learning-rate schedules, per step, after an optional linear warm-up. */
typedef enum {
  DLRT_LR_CONSTANT,
  DLRT_LR_STEP,   /* lr * gamma^(floor(step / step_size)) */
  DLRT_LR_COSINE, /* lr * (1 + cos(pi * step / total_steps)) / 2, 0 after the end */
} dlrt_lr_schedule;

typedef struct {
  /* "mlp", "cnn", a model file, or a GPT preset (dlrt_gpt_preset): then the
   * data is a token stream (dlrt_dataset_from_tokens), a sample is a window
   * of T tokens (the data's width) whose labels are the next T, and the
   * loss is the mean over every position. */
  const char *model;
  dlrt_gpt_config gpt;   /* a GPT preset's sizes replaced where not 0 */
  int64_t batch;         /* images per step */
  dlrt_optimizer opt;
  uint64_t seed;         /* parameters and shuffling */
  float label_smoothing; /* 0 for none */
  dlrt_lr_schedule schedule;
  int64_t warmup_steps;  /* lr rises linearly from lr / warmup_steps over these */
  int64_t step_size;     /* DLRT_LR_STEP */
  float gamma;           /* DLRT_LR_STEP */
  int64_t total_steps;   /* DLRT_LR_COSINE: the steps of the whole run */
  float clip_norm;       /* clip gradients to this global L2 norm (0: off) */
  int64_t channels;      /* image channels (0: 1) */
  /* The data pipeline (dlrt_loader_*): worker threads, batches prefetched
   * (both 0: each batch loaded in the calling thread when needed), the
   * augmentation of training batches (evaluation gets its normalisation
   * only) and this process's shard (rank of world; 0 and 0: the whole set). */
  int workers, prefetch;
  int augment;
  dlrt_augment aug;
  int rank, world;
  int accum;             /* micro-batches of `batch` per update (0 or 1: none) */
  /* Gradient checkpointing: 0 none, N forward nodes per segment,
   * DLRT_CHECKPOINT_SQRT, DLRT_CHECKPOINT_MARKS (a GPT's blocks, each a
   * segment), or DLRT_CHECKPOINT_AUTO: the longest segments
   * (least recompute) whose planned peak fits 80% of the device's budget
   * (dlrt_mem_get_limit, else its memory; the rest is slack for the
   * allocator's segments), those of the least planned peak where none
   * fits. */
  int checkpoint;
  /* Spilling (dlrt_exec_set_spill): spill.device_budget bounds all the
   * trainer's device memory (its loader and accumulators included). 0: off,
   * unless the device has a budget (dlrt_mem_get_limit, DLRT_MEM_LIMIT) that
   * the plan exceeds (over 80% of it) or a spill.policy or host_budget is
   * set; spilling then keeps to 85% of it. Either way the parameters and
   * optimizer state start on the host, so the budget holds from the start;
   * one that no operation fits fails dlrt_trainer_create with DLRT_ERR_OOM,
   * saying whether DLRT_CHECKPOINT_SQRT would fit (the planner's count). */
  dlrt_spill_config spill;
  /* Mixed precision (dlrt_graph_set_precision): DLRT_F32 (0, off), DLRT_F16
   * or DLRT_BF16. With fp16, loss scaling is on: loss_scaler's fields that
   * are 0 take dlrt_loss_scaler_defaults' values, and enabled < 0 turns it
   * off. bf16 needs none (enabled > 0 turns it on). */
  dlrt_dtype precision;
  dlrt_loss_scaler loss_scaler;
} dlrt_trainer_config;
#define DLRT_CHECKPOINT_AUTO (-2)

/* The learning rate of step `step` (0-based) under the config's schedule. */
DLRT_API float dlrt_lr_at(const dlrt_trainer_config *config, int64_t step);

/* What one epoch (or an evaluation) measured. */
typedef struct {
  float loss;           /* mean over the batches */
  float accuracy;       /* fraction of images classified right */
  double images_per_s;  /* steady state: the first 10% of steps are warm-up */
  double seconds;
  int64_t steps;
  int64_t images;
  double transfer_ms;         /* spilling: compute time spent waiting for copies */
  uint64_t spilled_bytes, fetched_bytes; /* spilling, during the epoch */
  uint64_t disk_bytes;        /* of spilled_bytes, those written to the disk tier */
  int64_t slice_images;       /* spilling in slices: images per chunk (dlrt_spill_stats) */
  double stall_s;             /* time the steps waited for data */
  double stall_fraction;      /* stall_s / seconds */
  double loader_images_per_s; /* what the loader's workers can deliver */
  float loss_scale;           /* loss scaling: the scale after the epoch (1: off) */
  int64_t skipped_steps;      /* updates skipped for inf / NaN gradients, this epoch */
  uint64_t disk_written_bytes; /* every write to the spill file, host copies past the
                                  host budget too (dlrt_spill_stats) */
  double tokens_per_s;        /* a GPT: images_per_s times the window (0 otherwise);
                                 its accuracy is NaN (not measured) */
  float step_loss;            /* the last update's loss (mean of its micro-batches;
                                 inf or NaN when the scaler skipped it) */
  float lr;                   /* the learning rate the last update used */
} dlrt_epoch_stats;

/* Called every few steps during an epoch with the running figures: every
 * twentieth of the epoch's updates, or every `every` updates after
 * dlrt_trainer_set_progress_every; always after its last. */
typedef void (*dlrt_progress_fn)(void *user, int64_t step, int64_t steps,
                                 const dlrt_epoch_stats *so_far);

/* A classifier for images of height x width (one channel) in `classes`
 * classes, trained on `dev`. */
DLRT_API int dlrt_trainer_create(dlrt_device_t *dev, const dlrt_trainer_config *config,
                                 int64_t height, int64_t width, int classes,
                                 dlrt_trainer_t **out);
DLRT_API void dlrt_trainer_destroy(dlrt_trainer_t *t);
/* Loss-scaled updates in a row whose loss may be inf or NaN (each one
 * skipped by the scaler) before an epoch stops as diverged. */
#define DLRT_DIVERGED_SKIPS 8
/* One pass over `data` (pixels scaled to [0, 1]) in an order shuffled from
 * (seed, epoch); the last partial batch is dropped, and with accumulation
 * the micro-batches that do not fill a last update. out->steps counts
 * updates, out->loss is the mean of the micro-batch losses. `progress` may be
 * NULL.
 * Divergence stops the epoch with DLRT_ERR_DIVERGED and a message naming the
 * update and the likely cause (learning rate, weight decay, schedule, the
 * checkpoint resumed from): a loss that is inf or NaN, a learning rate the
 * schedule took beyond a float, or a loss-scaled run whose gradients
 * overflow even at DLRT_LOSS_SCALE_MIN. The check reads nothing more from
 * the device than the loss the trainer reads anyway. With loss scaling, an
 * update whose loss overflowed is skipped (parameters untouched) and left
 * out of out->loss, up to DLRT_DIVERGED_SKIPS updates in a row. Without it,
 * the update was already made when its loss is seen: the trainer's
 * parameters are then unusable, so do not save them; go back to the last
 * checkpoint (dlrt_trainer_load) with a lower learning rate. */
DLRT_API int dlrt_trainer_epoch(dlrt_trainer_t *t, const dlrt_dataset *data, int epoch,
                                dlrt_progress_fn progress, void *user, dlrt_epoch_stats *out);
/* The same, stopping after max_steps updates (0: the whole epoch): training
 * by steps, as language models do, with an evaluation between. */
DLRT_API int dlrt_trainer_epoch_steps(dlrt_trainer_t *t, const dlrt_dataset *data, int epoch,
                                      int64_t max_steps, dlrt_progress_fn progress, void *user,
                                      dlrt_epoch_stats *out);
/* The same from update `first_step` of the epoch: its earlier batches (in
 * the epoch's order) are skipped, so an epoch run in parts trains as the
 * whole one (out->steps counts the updates of this part; progress's `step`
 * counts from the epoch's start). DLRT_ERR_INVALID_ARG when the epoch has
 * no update left at first_step. */
DLRT_API int dlrt_trainer_epoch_from(dlrt_trainer_t *t, const dlrt_dataset *data, int epoch,
                                     int64_t first_step, int64_t max_steps,
                                     dlrt_progress_fn progress, void *user,
                                     dlrt_epoch_stats *out);
/* The updates of one epoch over `data` (its batches / accumulation); a
 * negative status when the data does not suit the trainer. */
DLRT_API int64_t dlrt_trainer_epoch_updates(dlrt_trainer_t *t, const dlrt_dataset *data);
/* Progress every `every` updates (1: each one); 0 restores every twentieth
 * of an epoch. */
DLRT_API int dlrt_trainer_set_progress_every(dlrt_trainer_t *t, int64_t every);
/* Loss and accuracy over all of `data` (the last partial batch included).
 * DLRT_ERR_DIVERGED when the loss is inf or NaN: the parameters (or 16-bit
 * activations) overflowed, as after a last update that diverged. */
DLRT_API int dlrt_trainer_evaluate(dlrt_trainer_t *t, const dlrt_dataset *data,
                                   dlrt_epoch_stats *out);
/* Checkpoint: parameters, optimizer state, optimizer.step (I32) and, in the
 * metadata, format "dlrt-checkpoint-1", model, optimizer, lr, batch, seed,
 * input, `epochs_done` (>= 0), for a GPT its sizes (gpt_layers, gpt_heads,
 * gpt_embd, gpt_context, gpt_vocab) and, with loss scaling, loss_scale and
 * loss_scale_clean_steps, in safetensors (replaced atomically, with the
 * CRC-32s of data and header: see dlrt_safetensors_save). A trainer whose
 * parameters or optimizer state hold NaN or inf (training diverged) is not
 * saved: DLRT_ERR_STATE naming the tensor, and the file at `path` is left
 * as it was. */
DLRT_API int dlrt_trainer_save(dlrt_trainer_t *t, const char *path, int epochs_done);
/* Restores a checkpoint of the same model; *epochs_done says where to go on.
 * Nothing in the file is trusted, and nothing changes unless all of it
 * passes: epochs_done and loss_scale_clean_steps must be integers from 0 to
 * INT_MAX, batch >= 1, seed from 0 to UINT64_MAX, lr finite and >= 0, a
 * GPT's sizes within dlrt_gpt_check's bounds (and its heads the model's),
 * loss_scale from FLT_MIN to FLT_MAX (its reciprocal finite too),
 * optimizer.step one I32 >= 0, and every fp32 tensor finite; a value out
 * of range or not a number fails with DLRT_ERR_IO naming the file, the key,
 * the value and the range expected. Checkpoints of dlrt before the header
 * CRC-32 load, their metadata checked by these ranges only. */
DLRT_API int dlrt_trainer_load(dlrt_trainer_t *t, const char *path, int *epochs_done);
/* A GPT's checkpoint (dlrt_trainer_save of a GPT model) for sampling: its
 * sizes in *cfg and all its tensors in *tensors (*n of them, to
 * dlrt_exec_import into dlrt_gpt_build_decode's graph; free them with
 * dlrt_host_tensors_free). The sizes come from the tensors' shapes
 * (layers, embd, context, vocab) and the metadata (gpt_layers, gpt_heads,
 * gpt_embd, gpt_context, gpt_vocab, which dlrt_trainer_save writes for
 * GPT models and which must agree with the shapes); a checkpoint saved
 * before those keys takes the heads of its preset ("model") when its sizes
 * are the preset's, and fails otherwise. Errors name the file: not a dlrt
 * checkpoint, not a GPT (no transformer.wte.weight), metadata out of range
 * or disagreeing with the tensors, or a tensor that is not finite
 * (DLRT_ERR_INVALID_ARG or DLRT_ERR_IO; a missing or corrupt file as
 * dlrt_safetensors_load says). */
DLRT_API int dlrt_gpt_checkpoint_load(const char *path, dlrt_gpt_config *cfg,
                                      dlrt_host_tensor **tensors, int *n);
/* The plan and figures of the trainer's executor (tensor parallel: the whole
 * model's parameter and state bytes, the largest peer's planned and measured
 * peaks). */
DLRT_API int dlrt_trainer_info(dlrt_trainer_t *t, dlrt_exec_info *out);
/* The trainer's executor (its graph, plan and spilling figures:
 * dlrt_exec_spill_plan), owned by the trainer; NULL for NULL. Under a
 * budget, DLRT_PLAN_STRATEGY=belady|swap|recompute|auto makes
 * dlrt_trainer_create plan the spilling (dlrt_exec_plan_spill). */
DLRT_API dlrt_exec_t *dlrt_trainer_executor(dlrt_trainer_t *t);
/* The loss scale of the executor that makes the updates (scale 1 when off). */
DLRT_API int dlrt_trainer_loss_scale(dlrt_trainer_t *t, dlrt_loss_scale_state *out);
/* Data parallelism over `n` devices of any backends (the same device may be
 * named twice): a replica of the model on each takes `split[i]` rows of
 * every batch (NULL: even shares for the first 4 steps, timed, then shares
 * in proportion to each device's measured rows per second); each computes
 * the gradient of the mean loss over its rows, the host combines them
 * weighted by rows / batch, and every replica makes the same update, so
 * training equals the single-device run with the same batch (to fp32
 * rounding; batch-norm statistics and dropout masks are per replica).
 * Without accumulation, spilling or checkpointing in this version. */
DLRT_API int dlrt_trainer_set_devices(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                                      const int64_t *split);
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
 * already divided by the world size. On a pipelined trainer (set the
 * pipeline first), each stage's gradient sums go as one vector before each
 * update, and each batch's loss and correct count as a vector of 2. */
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
 * device's); dlrt_trainer_load cuts one into the shards. Not with ZeRO,
 * spilling or --devices in this version. */
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
 * process. Stage 0 turns nothing on (DLRT_ERR_INVALID_ARG outside 0 to 3, or without
 * replicas). Once per trainer. */
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

/* ------------------------------------------------------------------------ */
/* Memory planning                                                           */
/* ------------------------------------------------------------------------ */

/* What a classifier (dlrt_trainer_create's model) holds on the device at
 * the peak of its training run, in the allocator's blocks: the executor's
 * own plan, made without a device, so it matches the measured peak. The
 * peak is a training step's, or an evaluation's when its forward pass with
 * its own loader beside the training one's holds more. */
typedef struct {
  int64_t batch;
  int64_t param_count;
  uint64_t params, grads, optimizer_state;
  uint64_t activations;   /* intermediates live at the peak */
  uint64_t activation_peak; /* the most intermediates live at any one time (the end
                               of the forward pass, or a recomputed segment's) */
  uint64_t inputs;        /* the batch in the graph, and kept outputs (logits) */
  uint64_t accumulators;  /* gradient accumulation's running sums */
  uint64_t loader;        /* the loaders' device slots (prefetch x a batch each) */
  uint64_t peak;          /* all of it */
  int evaluation_at_peak; /* the peak is an evaluation's (two loaders) */
  /* The least device memory training can do with spilling and the
   * optimizer on the host (--mem-limit --offload optimizer): what one
   * operation holds at once, plus the loaders. */
  uint64_t spill_least;
} dlrt_memory_plan;

/* A split GPT's plan (dltrain --plan --tensor-parallel): each peer's shard
 * (as dlrt_trainer_set_tensor_parallel makes them: heads in proportion to
 * `weights`, NULL for even shares) and what its training step holds on its
 * device, planned as its executor plans it (the peer takes the whole batch
 * from the host: no loader slots; --accum's running sums beside), so that
 * plan.peak is the peer's dlrt_tp_peer_info.planned_peak_bytes. `width`:
 * the windows' tokens. checkpoint_every: the forward nodes a segment on
 * every peer (DLRT_CHECKPOINT_MARKS for a GPT's blocks, 0 none);
 * config.checkpoint DLRT_CHECKPOINT_AUTO chooses it on the first peer's
 * graph for device_memory, as the split does. out: n entries. */
typedef struct {
  dlrt_gpt_shard shard;
  int checkpoint_every;
  dlrt_memory_plan plan;
} dlrt_tp_plan;
DLRT_API int dlrt_plan_tensor_parallel(const dlrt_trainer_config *cfg, int64_t width, int n,
                                       const double *weights, uint64_t device_memory,
                                       dlrt_tp_plan *out);
/* The largest batch (windows) whose every peer's planned peak fits
 * device_memory (0: not even one). */
DLRT_API int dlrt_plan_tensor_parallel_max_batch(const dlrt_trainer_config *cfg, int64_t width,
                                                 int n, const double *weights,
                                                 uint64_t device_memory, int64_t *batch);

/* Plans `cfg` (model, batch, optimizer, accum, prefetch) for images of
 * channels x height x width in `classes` classes. */
DLRT_API int dlrt_plan_memory(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                              int64_t width, int classes, dlrt_memory_plan *out);
/* The largest batch whose planned peak fits `budget` bytes, and its plan
 * (out->batch 0: not even a batch of 1 fits; out then plans a batch of 1).
 * With cfg->spill.policy DLRT_OFFLOAD_OPTIMIZER or _ALL the batch whose
 * spill_least fits instead. */
DLRT_API int dlrt_plan_max_batch(const dlrt_trainer_config *cfg, int64_t channels,
                                 int64_t height, int64_t width, int classes, uint64_t budget,
                                 dlrt_memory_plan *out);

/* What-if for a model of any size, from bytes per parameter of its states. */
typedef struct {
  const char *strategy;
  double device_bytes;  /* model states on the devices, in all */
  double host_bytes;    /* and on the host */
  double devices;       /* the fewest devices of the given size that hold the
                           device side split between them (pipeline stages,
                           ZeRO-3 shards) */
  int fits_one;         /* fits whole on one device (plain data parallelism) */
} dlrt_what_if;

/* Fills up to 8 rows for a model of `params` parameters and devices of
 * `device_bytes`; activations are not counted. */
DLRT_API int dlrt_plan_what_if(double params, uint64_t device_bytes, dlrt_what_if *out, int *n);

/* ------------------------------------------------------------------------ */
/* Predicting a step on a model of a machine (--simulate)                    */
/* ------------------------------------------------------------------------ */

/* The figures of a machine a step is replayed on: rates as the model uses
 * them (what large kernels reach, not the datasheets' peaks; README
 * "Predicting a step" lists the presets' published figures and sources). */
typedef struct {
  char name[64];            /* "h200-pcie5", "this", or the file's name= */
  char about[160];          /* "NVIDIA H200 SXM on PCIe 5.0 x16", how measured */
  /* GEMM rate by compute type, FLOP/s: [DLRT_F32], [DLRT_F16], [DLRT_BF16]. */
  double matmul_flops[3];
  double matmul_overhead_s; /* a fixed time per GEMM on top of FLOPs / rate */
  double vector_flops;      /* elementwise fp32 arithmetic, FLOP/s */
  double memory_bytes_per_s; /* device memory, read + write, B/s */
  /* Kernels of their own, where they reach another rate than a GEMM or a
   * stream (0: the GEMM rate, the memory bandwidth): the fused attention
   * kernel's FLOP/s, a convolution's (im2col and its GEMM), and the bytes
   * per second of reductions across rows (bias and norm gradients). */
  double attention_flops, conv_flops, reduce_bytes_per_s;
  double launch_s;          /* per kernel launch */
  double link_bytes_per_s;  /* host link per direction (one copy engine each) */
  double link_latency_s;    /* per copy */
  double host_bytes_per_s;  /* host memory as the host optimizer streams it */
  uint64_t device_memory, host_memory; /* bytes */
  /* Published peaks, for MFU (the dense 16-bit tensor peak) and display. */
  double peak_matmul_flops_bf16, peak_memory_bytes_per_s;
  /* Between devices (dlrt_split_predict): the peer rate of one device to
   * the others of its node, per direction (NVLink through NVSwitch, xGMI,
   * or PCIe peer copies), and its latency per message; the devices of a
   * node; the node's network to the other nodes, per direction, all its
   * adapters together, and its latency. 0: not known (a file without them;
   * a split across devices is then not predicted). */
  double peer_bytes_per_s, peer_latency_s;
  int devices_per_node;
  double network_bytes_per_s, network_latency_s;
  /* The disk behind host memory (the spill folder's): sequential reads and
   * writes of large blocks, B/s, as one thread's synchronous I/O reaches
   * them (the disk tier has one I/O thread). 0: not known (the disk's time
   * is then not replayed). */
  double disk_read_bytes_per_s, disk_write_bytes_per_s;
} dlrt_machine;

/* The presets: the host link presets' names (dlrt_link_preset_get), each
 * with its compute, memory and host figures. DLRT_ERR_INVALID_ARG naming
 * the presets for another name. */
DLRT_API int dlrt_machine_preset(const char *name, dlrt_machine *out);
/* A file of "key = value" lines ('#' starts a comment): base = PRESET
 * first to start from one, then any of matmul_fp32, matmul_fp16,
 * matmul_bf16, vector_fp32 (FLOP/s: 7.9e14 or 791.5T), memory_bandwidth,
 * host_bandwidth, reduce_bandwidth (B/s: 4.3TB/s), attention, conv (FLOP/s),
 * link (a rate and latency as --link takes them: 55GB/s:10us), launch,
 * matmul_overhead (10us), disk_read, disk_write (B/s), device_memory,
 * host_memory (141G), name, about. Without a base every rate, the link and
 * device_memory are needed. DLRT_ERR_INVALID_ARG naming the file, the line
 * and the fault (an unknown key lists the keys). */
DLRT_API int dlrt_machine_load(const char *path, dlrt_machine *out);
/* This machine's figures, measured on `dev` (a few seconds): GEMM rates
 * per precision at two sizes (the rate and the overhead per GEMM), the
 * bandwidth of an elementwise kernel, the rate of GELU's arithmetic, a
 * small kernel's launch, the device's link model if it has one (else its
 * measured host-to-device copies), host memory through the host optimizer,
 * the spill folder's disk through the disk tier's own reads and writes
 * (whole 16 MiB slots, the page cache taking part as it does in a run). */
DLRT_API int dlrt_machine_measure(dlrt_device_t *dev, dlrt_machine *out);
/* A preset name, "this" or "local" (measured on dev), or a file. */
DLRT_API int dlrt_machine_get(const char *spec, dlrt_device_t *dev, dlrt_machine *out);

/* A step replayed on a machine: each node of the executor's training
 * schedule takes the roofline time of its FLOPs and bytes (lib/graph/cost.c)
 * plus its launches, one after another on one compute stream; copies take
 * the link, on one engine per direction, overlapping compute unless the
 * compute waits for them; the host optimizer's updates take host memory
 * time. Times are seconds per training step. */
typedef struct {
  double step_s;
  double compute_s;          /* the nodes' times (forward_s + backward_s + update_s) */
  double forward_s, backward_s, update_s;
  double transfer_s;         /* the link's busy time, both directions */
  double exposed_transfer_s; /* of it, time the compute stream waited */
  double host_update_s;      /* the host optimizer's time (0 on the device) */
  double exposed_host_s;     /* of it, time the compute stream waited (the step's
                                waits are split: a wait for a parameter updated on
                                the host is the host's until its update ends, the
                                link's after) */
  /* With the optimizer on the host: the fraction of the host update that
   * runs while the backward pass computes, when each parameter's update
   * starts as soon as its gradient is on the host (ZeRO-Offload's overlap). */
  double host_hidden_fraction;
  double host_hidden_s;      /* that time in seconds (of backward_s, it is the part
                                the host update runs beside) */
  double flops;              /* the step's FLOPs, matmul and vector */
  double mfu;                /* model FLOPs / step / the 16-bit tensor peak */
  double samples_per_s, tokens_per_s; /* tokens: GPT models (else 0) */
  uint64_t h2d_bytes, d2h_bytes, copies;
  int nodes, launches;
  /* Where the copies came from: "none" (everything on the device), "a dry
   * run of the executor on DEVICE" (--mem-limit), "the optimizer on the
   * host" (the offload model), or "parameters streamed from the host, N
   * nodes ahead" (--offload params). */
  char copies_from[96];
  /* Parameter streaming (spill.policy DLRT_OFFLOAD_PARAMS; else 0): the
   * parameters streamed, the look-ahead in nodes (spill.prefetch, default
   * 4), and the most parameter and gradient bytes on the device at once. */
  int params_streamed, ahead;
  uint64_t param_peak_bytes, grad_peak_bytes;
  /* 1: the nodes' times were measured on the device at the model's own
   * shapes (machine "this" with a device: the planner's profiling pass),
   * 0: the roofline of the machine's figures. */
  int nodes_measured;
  /* Streamed parameters' optimizer state on disk (spill.host_budget, the
   * split of dlrt_exec_param_state_limit): the parameters whose state is
   * there, its bytes, the bytes read ahead of their updates and written
   * back behind them in the step, the disk's busy time (one I/O thread,
   * at the machine's disk_read / disk_write rates), the time the host
   * updates waited for reads, and the disk's cost to the step: step_s
   * beyond the same step with all the state in host memory (a second
   * replay; the compute waits for it through the host's updates, so it is
   * part of exposed_host_s too). */
  int params_on_disk;
  uint64_t state_disk_bytes, disk_read_bytes, disk_written_bytes;
  double disk_s, disk_wait_s, exposed_disk_s;
  /* The trainer's exchange with the host between steps, the device idle
   * through it (part of step_s): the loss read back, and a classifier's
   * logits, and the next batch's inputs copied into the graph's. On "this"
   * machine as the profile timed it beside its steps; elsewhere a link
   * latency a read plus the inputs' bytes at memory bandwidth. */
  double exchange_s;
} dlrt_simulated_step;

/* Predicts cfg's training step (the classifier or GPT of dlrt_plan_memory)
 * on machine m. With cfg->spill.device_budget the copies are those the
 * executor makes under that budget in one step of a dry run on `dev` (the
 * model is built and run there: it must be small enough); with
 * spill.policy DLRT_OFFLOAD_OPTIMIZER and no budget, the updates run on
 * the host with each gradient copied out as it is made and each parameter
 * copied back in for the next forward pass (ZeRO-Offload); with
 * DLRT_OFFLOAD_PARAMS, parameter streaming's schedule (each fp32 parameter
 * fetched spill.prefetch nodes ahead of its forward and backward uses on
 * the host-to-device engine, its gradient out as soon as it is complete,
 * its update on the host thread beside the rest of the backward pass; the
 * budget, if any, is not replayed: it bounds the allocator). No device
 * memory is allocated otherwise: any model, gpt3-175b too, in well under
 * a second. */
DLRT_API int dlrt_simulate_step(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                                int64_t width, int classes, const dlrt_machine *m,
                                dlrt_device_t *dev, dlrt_simulated_step *out);

/* Where a training run's memory lives when the model may not fit the
 * device (dlrt_plan_placement): parameters' fp32 masters, their 16-bit
 * compute copies (mixed precision), gradients, optimizer state and
 * activations, each in bytes per tier. */
typedef enum {
  DLRT_PART_MASTER,       /* fp32 parameters */
  DLRT_PART_COMPUTE_COPY, /* their 16-bit copies for compute (fp16/bf16; else 0) */
  DLRT_PART_GRADIENTS,
  DLRT_PART_OPTIMIZER,    /* momentum, Adam's moments */
  DLRT_PART_ACTIVATIONS,  /* intermediates, inputs, loader slots at the peak */
  DLRT_PARTS_
} dlrt_placement_part_id;

typedef struct {
  uint64_t device, pinned, pageable, disk; /* bytes in each tier */
  const char *how;        /* a phrase: "on the device", "on the host, fetched ..." */
} dlrt_placement_part;

typedef struct {
  int fits;               /* 1: the placement below fits device, host and disk */
  int rung;               /* 0 everything on the device, 1 checkpointed activations,
                             2 optimizer state on the host, 3 parameters streamed,
                             4 states spilled to host and disk; -1 none fits */
  const char *strategy;   /* the rung in words */
  /* What realises it (dlrt_placement_apply sets these in a config): */
  dlrt_offload_policy policy;
  int checkpoint;         /* cfg->checkpoint's value */
  uint64_t mem_limit;     /* spill.device_budget (0: none needed): spilling's 85% of
                             the device; streaming's the whole device (it bounds the
                             allocator, whose segments take the rest) */
  uint64_t host_limit;    /* spill.host_budget (0: none needed) */
  int ahead;              /* streaming's look-ahead, nodes (spill.prefetch) */
  char flags[256];        /* the same as dltrain flags: "--offload params --mem-limit 8G" */
  dlrt_placement_part part[DLRT_PARTS_];
  uint64_t device_need;   /* the placement's device bytes at the peak */
  uint64_t host_need, pinned_need, disk_need;
  uint64_t device_memory, host_memory; /* what was planned for */
  uint64_t device_usable, host_usable; /* 85% of the device, 80% of the host */
  int64_t param_count;
  char why[512];          /* why each cheaper rung does not fit */
} dlrt_placement;

/* Chooses where cfg's model trains on a device of `device_memory` bytes with
 * `host_memory` bytes of host memory (0: this machine's RAM): the first of
 * these that fits, in order of cost: everything on the device (the plan's
 * peak within 80% of it, the trainer's own slack); activations checkpointed
 * (a GPT's blocks, else segments of sqrt(n)); the optimizer state on the
 * host (--offload optimizer: parameters, gradients and activations within
 * 85% of the device); parameters, gradients and state on the host, the
 * parameters streamed to the device around each use (--offload params: its
 * device peak from the streaming schedule, dlrt_simulate_step's, within
 * 85% of the device and, rounded up to the allocator's 2 MiB segments,
 * within the device; its 16 B a
 * parameter with Adam within 80% of the host; one process (no data
 * parallelism); its look-ahead cfg->spill.prefetch, or where that is 0 the one
 * of 1 .. 32 nodes whose step replayed on machine m is shortest, without m
 * the longest that fits); everything spilled by the pool within the device (--offload
 * all), host copies beyond 80% of the host on disk (--host-limit). Pinned
 * host bytes are those within DLRT_PINNED_LIMIT's default, half of the host;
 * the rest is pageable. fits 0 and rung -1 when none fits; `why` says what
 * each rung needs. Nothing is allocated: any model, gpt3-175b too. */
DLRT_API int dlrt_plan_placement(const dlrt_trainer_config *cfg, int64_t channels,
                                 int64_t height, int64_t width, int classes,
                                 uint64_t device_memory, uint64_t host_memory,
                                 const dlrt_machine *m, dlrt_placement *out);
/* Sets cfg's spill policy, budget, host budget, look-ahead and
 * checkpointing to those of placement p. */
DLRT_API void dlrt_placement_apply(const dlrt_placement *p, dlrt_trainer_config *cfg);
/* ------------------------------------------------------------------------ */
/* Splitting a GPT across devices (--plan: tensor x pipeline x data)          */
/* ------------------------------------------------------------------------ */

/* One way to train a GPT on devices of one size (lib/train/split.c): the
 * degrees of tensor parallelism (Megatron: heads and the vocabulary split
 * over `tensor` devices of a node), pipeline parallelism (`pipeline` stages
 * cut at block boundaries as dlrt_trainer_set_pipeline cuts them, GPipe
 * over `micro` micro-batches of `micro_batch` windows) and data parallelism
 * (`data` replicas, ZeRO stage `zero`), with or without activation
 * checkpointing (a block per segment), on tensor x pipeline x data devices.
 * The bytes are one device's, of its largest stage, counted on the graph
 * of that stage's shard as the planner counts any graph (the executor's
 * own plan, in allocator blocks) and divided as dlrt divides them: ZeRO 1
 * the optimizer state over the replicas, 2 the gradients too, 3 the
 * parameters too (plus the two largest parameters, the one in use and the
 * one fetched ahead). dlrt's GPipe runs a micro-batch's forward pass as an
 * evaluation and keeps the stages' inputs on the host, recomputing in the
 * backward pass: a device holds one micro-batch's activations, and the
 * host the micro-batches in flight. */
typedef struct {
  int tensor, pipeline, data, zero, checkpoint;
  int micro;              /* micro-batches per replica and step (1 without a pipeline) */
  int64_t micro_batch;    /* windows per micro-batch */
  int stage_blocks;       /* blocks of the largest stage */
  int64_t stage_params;   /* parameters of one device's shard of that stage */
  /* After ZeRO's division; the gradients those live at the step's peak, and
   * with micro-batches the stage's running sums of every gradient too. */
  uint64_t param_bytes, grad_bytes, optimizer_bytes;
  uint64_t activation_bytes; /* one micro-batch's, at the step's peak, with its inputs */
  uint64_t device_bytes;  /* all of it: what has to fit */
  uint64_t host_bytes;    /* pinned host memory per device: ZeRO's whole copy of the
                             stage's parameters, the pipeline's micro-batches in flight */
  int devices;            /* tensor x pipeline x data */
  int fits;               /* device_bytes <= the device's memory */
  int runs_now;           /* dltrain runs this split in this version */
  char flags[224];        /* the dltrain command line */
  char needs[384];        /* what this version lacks for it ("" when runs_now) */
  /* dlrt_split_predict, per training step: compute of the slowest stage
   * (forward, recomputation, backward, update; the executor's schedule
   * replayed on the machine's roofline), the tensor-parallel all-reduces
   * (on the node's peer links), the pipeline's boundary copies (dlrt passes
   * them through the host: out and in over the host link), the GPipe
   * bubble ((pipeline - 1) micro-batch slots of the slowest stage), the
   * data-parallel gradient all-reduce or ZeRO's reduce-scatter and gathers
   * (on the node's network, a device's share of it; staged through the
   * host as dlrt's collectives are; not overlapped), and the trainer's
   * exchange with the host between steps (exchange_s, below: the loss read
   * back, the next batch copied in). */
  double step_s, compute_s, tensor_s, pipeline_s, bubble_s, data_s;
  double serial_step_s;   /* the stages one after another, no micro-batch
                             overlapping another */
  double tokens_per_s;
  double model_tflops;    /* per device, FLOPs counted as Narayanan et al. (2021)
                             count them (their Equation 3: matmuls, recomputation
                             included) */
  double mfu;             /* model_tflops / the 16-bit tensor peak */
  int host_fits;          /* host_bytes x devices per node <= the host's memory */
  double exchange_s;      /* the trainer's exchange between steps (part of step_s) */
} dlrt_split;

/* What to search. */
typedef struct {
  uint64_t device_memory;  /* bytes per device (required) */
  int max_devices;         /* 0: 4096 */
  int max_tensor;          /* 0: the machine's devices per node, else 8 (tensor degrees
                              also divide the heads) */
  int max_pipeline;        /* 0: 16, dlrt_trainer_set_pipeline's bound */
  int max_zero;            /* the highest ZeRO stage tried, 0 to 3 */
  int runs_now_only;       /* only the splits this version of dltrain runs */
  /* With a machine: rank by tokens per second in all (for a target of
   * max_devices), not per device (the default: the most from each device,
   * fewer devices first among equals). */
  int by_total;
} dlrt_split_limits;

/* Fills split s of cfg's GPT (cfg->batch windows per step, all replicas
 * together, of `context` tokens; cfg->precision, cfg->opt), whose tensor,
 * pipeline, data, zero, checkpoint and micro_batch are set (micro is
 * computed: cfg->batch / data / micro_batch; without a pipeline
 * micro_batch is the replica's whole batch, whatever was set), for
 * devices of `device_memory`; and with machine m (NULL: memory only) its
 * predicted step. The memory figures come from the planner's plans of the
 * shard's graphs of one and two blocks at micro-batches of one and two
 * windows, which a stage of any size extends linearly (exactly, for the
 * blocks). DLRT_ERR_INVALID_ARG naming the fault: not a GPT, a degree that
 * does not divide (heads, batch), more stages than blocks, a machine
 * without the peer or network figures a split across devices needs. */
DLRT_API int dlrt_split_eval(const dlrt_trainer_config *cfg, int64_t context,
                             uint64_t device_memory, const dlrt_machine *m, dlrt_split *s);
/* Every split within `limits`: tensor degrees dividing the heads and
 * max_tensor (a node's devices: a group never spans nodes), pipeline
 * degrees up to max_pipeline and the blocks, data degrees dividing the
 * batch, ZeRO 0 to max_zero (with data > 1), checkpointing off and on,
 * micro-batches of 1, 2, 4 and 8 windows with a pipeline (the whole
 * replica's batch without); at most max_devices devices. The best `max` in
 * best (*n_best of them): those that fit first, then with machine m by
 * predicted tokens per second per device (or in all: by_total; highest
 * first), else by devices (fewest first), then by device bytes.
 * *enumerated and *fitting count all (either may be NULL). */
DLRT_API int dlrt_split_search(const dlrt_trainer_config *cfg, int64_t context,
                               const dlrt_split_limits *limits, const dlrt_machine *m,
                               dlrt_split *best, int max, int *n_best, int *enumerated,
                               int *fitting);

/* Tracing: writes a Chrome trace (JSON; open it in https://ui.perfetto.dev
 * or chrome://tracing) of every graph node the executors run, every spill
 * copy, and device memory over time. DLRT_TRACE=FILE starts one for the
 * whole process. While tracing, each node and copy is waited for to time
 * it: a traced run is slower. */
DLRT_API int dlrt_trace_start(const char *path);
DLRT_API void dlrt_trace_stop(void);

/* Threads the CPU backend uses for its kernels and its GEMM (0: all cores).
 * The backend keeps OpenBLAS at one thread and runs blocks of each GEMM on
 * its own pool: a program calling OpenBLAS itself sets its threads for its
 * calls (openblas_set_num_threads). */
DLRT_API int dlrt_set_cpu_threads(int threads);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_TRAIN_H */
