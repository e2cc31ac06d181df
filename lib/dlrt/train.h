/*
 * dlrt/train.h — models, the trainer, traces and CPU threads (parallelism:
 * dlrt/parallel.h; planning and prediction: dlrt/plan.h).
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
