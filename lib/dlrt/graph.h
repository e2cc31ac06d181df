/*
 * dlrt/graph.h — static graphs with automatic differentiation, and their
 * executors (planning, checkpointing, spilling, mixed precision).
 * Included by dlrt.h, which programs include (lib/dlrt.h tells the
 * conventions).
 */
#ifndef DLRT_GRAPH_H
#define DLRT_GRAPH_H

#include "dlrt/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Static graphs with automatic differentiation                               */
/* ------------------------------------------------------------------------ */

/* A graph is built once and run every step (as in ggml): build the forward
 * pass from inputs and parameters, call dlrt_graph_backward() to append the
 * gradient nodes and dlrt_graph_optimize() to append fused parameter
 * updates, then create an executor on a device and run it.
 *
 * Builders return a tensor, or NULL after an error; an error sticks to the
 * graph (later builders given NULL return NULL) and dlrt_graph_status()
 * reports the first one with its message. Tensors are fp32 (I32 for class
 * labels), row-major and contiguous; images are N x C x H x W. Tensors belong
 * to their graph. */
typedef struct dlrt_graph dlrt_graph_t;
typedef struct dlrt_tensor dlrt_tensor_t;
typedef struct dlrt_exec dlrt_exec_t;

/* Initial values of a parameter, drawn from the executor's seed. */
typedef enum {
  DLRT_INIT_ZEROS,
  DLRT_INIT_ONES,
  /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear and
   * Conv2d weights (kaiming_uniform with a = sqrt(5)) and biases. */
  DLRT_INIT_FAN_IN_UNIFORM,
  /* Kaiming (He) normal for ReLU: N(0, 2 / fan_in). */
  DLRT_INIT_KAIMING_NORMAL,
  /* Xavier (Glorot) uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)). */
  DLRT_INIT_XAVIER_UNIFORM,
  /* N(0, std^2) with the std given to dlrt_param_normal (GPT-2: 0.02). */
  DLRT_INIT_NORMAL,
} dlrt_init_kind;

DLRT_API int dlrt_graph_create(dlrt_graph_t **out);
DLRT_API void dlrt_graph_destroy(dlrt_graph_t *g);
/* DLRT_OK, or the first error met while building (its message is restored
 * as this thread's dlrt_last_error()). */
DLRT_API int dlrt_graph_status(dlrt_graph_t *g);

/* A tensor the caller fills before each run (dlrt_exec_write): f32 or i32,
 * or f16 / bf16 when it is the graph's compute type (dlrt_graph_set_precision
 * called first; ops take it as already cast). */
DLRT_API dlrt_tensor_t *dlrt_input(dlrt_graph_t *g, const char *name, dlrt_dtype dtype,
                                   int ndim, const int64_t *shape);
/* State the forward pass keeps from one run to the next (fp32): the key
 * and value caches of dlrt_attention_decode. The executor allocates it
 * once, zeroed, on its device; the ops that take it write it in place in
 * every run. It is not trained, not a parameter and not in checkpoints
 * (dlrt_exec_export leaves it out); dlrt_exec_read and dlrt_exec_write
 * reach it like an input. */
DLRT_API dlrt_tensor_t *dlrt_state(dlrt_graph_t *g, const char *name, dlrt_dtype dtype,
                                   int ndim, const int64_t *shape);
/* A trained parameter (fp32). fan_in / fan_out feed the initialiser. */
DLRT_API dlrt_tensor_t *dlrt_param(dlrt_graph_t *g, const char *name, int ndim,
                                   const int64_t *shape, dlrt_init_kind init, int64_t fan_in,
                                   int64_t fan_out);
/* A trained parameter (fp32) drawn from N(0, std^2), std > 0. */
DLRT_API dlrt_tensor_t *dlrt_param_normal(dlrt_graph_t *g, const char *name, int ndim,
                                          const int64_t *shape, float std);
/* Whether the optimizer's weight decay applies to parameter p (1, the
 * default) or not (0): AdamW recipes such as GPT-2's decay matrices only,
 * not biases, LayerNorm gains or embeddings. Returns p. */
DLRT_API dlrt_tensor_t *dlrt_param_set_decay(dlrt_graph_t *g, dlrt_tensor_t *p, int decay);
/* Keeps a tensor's value after a run so that dlrt_exec_read can return it
 * (other intermediates are freed after their last use). Returns t. */
DLRT_API dlrt_tensor_t *dlrt_keep(dlrt_graph_t *g, dlrt_tensor_t *t);
/* Marks t, made by an op of the forward pass, as the end of a checkpoint
 * segment for DLRT_CHECKPOINT_MARKS (dlrt_exec_set_checkpointing): the
 * natural cut of a transformer is each block's output, the residual stream
 * (dlrt_gpt_build marks them). Other settings ignore the marks. Returns t. */
DLRT_API dlrt_tensor_t *dlrt_checkpoint_mark(dlrt_graph_t *g, dlrt_tensor_t *t);

/* y = x W^T + b: x is N x in, W is out x in (PyTorch's layout), b is out or NULL. */
DLRT_API dlrt_tensor_t *dlrt_linear(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                                    dlrt_tensor_t *b);
/* op(A) op(B) for 2-D A, B; batched for 3-D A, B (batch x rows x cols, one
 * batch size); and a 3-D A (not transposed) times a 2-D B, as one GEMM. */
DLRT_API dlrt_tensor_t *dlrt_matmul(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                    int trans_a, int trans_b);
DLRT_API dlrt_tensor_t *dlrt_relu(dlrt_graph_t *g, dlrt_tensor_t *x);
/* Elementwise a (op) b of one shape, or with b broadcast over a's leading
 * dimensions when b's shape is a's trailing one (a N x D plus b D). */
DLRT_API dlrt_tensor_t *dlrt_add(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_mul(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_scale(dlrt_graph_t *g, dlrt_tensor_t *x, float alpha);
DLRT_API dlrt_tensor_t *dlrt_sub(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_div(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_tanh(dlrt_graph_t *g, dlrt_tensor_t *x);
DLRT_API dlrt_tensor_t *dlrt_sigmoid(dlrt_graph_t *g, dlrt_tensor_t *x);
/* The exact GELU, x * Phi(x) (PyTorch's default, with erf). */
DLRT_API dlrt_tensor_t *dlrt_gelu(dlrt_graph_t *g, dlrt_tensor_t *x);
/* GELU's tanh form, GPT-2's (PyTorch's gelu(x, approximate="tanh")):
 * 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
DLRT_API dlrt_tensor_t *dlrt_gelu_tanh(dlrt_graph_t *g, dlrt_tensor_t *x);
/* Softmax over the last axis. */
DLRT_API dlrt_tensor_t *dlrt_softmax(dlrt_graph_t *g, dlrt_tensor_t *x);
/* Fused multi-head self-attention, as in GPT-2 between c_attn and c_proj.
 * qkv is B x T x 3C: each position's queries, keys and values side by side
 * along the last axis, head h's query in columns [h D, h D + D), its key in
 * [C + h D, ...), its value in [2C + h D, ...), with D = C / heads (at most
 * 1024; 3C must be a multiple of 3 x heads). The result is B x T x C, head
 * h's softmax(q k^T / sqrt(D)) v in columns [h D, h D + D): the heads
 * concatenated, ready for the output projection. causal 1 lets each query
 * attend to the keys at its own position and before (a decoder), 0 to all T.
 * Computed as FlashAttention does, forward and backward: tiles of keys with
 * an online softmax, and in the backward pass the probabilities recomputed
 * from qkv. Besides qkv and its output, the backward pass keeps only each
 * row's logsumexp (B x heads x T floats); nothing of size T x T is ever
 * stored, so the memory it plans grows with T, not T^2. In a graph computing
 * in fp16 or bf16 (dlrt_graph_set_precision) it reads and writes that type
 * and sums in fp32. Deterministic on every device (no atomics); devices
 * differ only by their exp and log. */
DLRT_API dlrt_tensor_t *dlrt_attention(dlrt_graph_t *g, dlrt_tensor_t *qkv, int heads,
                                       int causal);
/* dlrt_attention with dropout on the probabilities, p in [0, 1) (GPT-2's
 * attn_pdrop): in training runs each probability is kept with chance 1 - p
 * and scaled by 1 / (1 - p), else zeroed, after the softmax's sums (which
 * the row's logsumexp keeps); evaluation runs drop nothing. The mask is
 * never stored: a counter-based hash of (the executor's seed, the step, the
 * op, the sequence and head, the query, the key) draws it in the forward
 * kernel and again in the backward ones, the same on every device. p = 0
 * is dlrt_attention, bit for bit. */
DLRT_API dlrt_tensor_t *dlrt_attention_dropout(dlrt_graph_t *g, dlrt_tensor_t *qkv, int heads,
                                               int causal, float p);
/* One step of causal self-attention with a key / value cache, for sampling
 * one token at a time (a decoder's inference). qkv is B x 1 x 3C, the
 * c_attn output of each sequence's new token, laid out as dlrt_attention's;
 * k_cache and v_cache are dlrt_state tensors of B x capacity x C (position
 * t's keys, resp. values, of every head in row t); pos is an I32 input of B
 * elements, each sequence's position, read on the device at run time, so
 * one graph serves every position. The op writes the token's key and
 * value into row pos[b] of the caches, then attends its query over rows 0
 * .. pos[b]: the result, B x 1 x C, equals row pos[b] of dlrt_attention(
 * causal) over the sequence's qkv rows 0 .. pos[b] (to fp32 rounding: the
 * dialect's kernels sum in the same order, bit for bit), at a cost that
 * grows with pos[b], not with capacity. Feed the positions in order from 0
 * (a row is read only after a run wrote it). A pos[b] outside [0,
 * capacity) writes nothing and gives zeros. fp32 only (in a 16-bit graph
 * qkv is cast up); no gradient. */
DLRT_API dlrt_tensor_t *dlrt_attention_decode(dlrt_graph_t *g, dlrt_tensor_t *qkv,
                                              dlrt_tensor_t *k_cache, dlrt_tensor_t *v_cache,
                                              dlrt_tensor_t *pos, int heads);
/* Mean squared error of two tensors of one shape: a tensor of shape [1]. */
DLRT_API dlrt_tensor_t *dlrt_mse(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
/* Inverted dropout with drop probability p in [0, 1): in training runs each
 * element is zeroed with probability p and the rest scaled by 1 / (1 - p);
 * forward-only runs pass x through. The mask is drawn from the executor's
 * seed, the step and the node, so it is the same on every device. */
DLRT_API dlrt_tensor_t *dlrt_dropout(dlrt_graph_t *g, dlrt_tensor_t *x, float p);
/* The sum of all elements, a tensor of shape [1]. */
DLRT_API dlrt_tensor_t *dlrt_sum(dlrt_graph_t *g, dlrt_tensor_t *x);
/* 2-D convolution: x is N x C x H x W, w is O x C x kh x kw, b is O or NULL. */
DLRT_API dlrt_tensor_t *dlrt_conv2d(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                                    dlrt_tensor_t *b, int stride, int padding, int dilation);
/* Layer normalisation over the last axis, with scale and shift parameters
 * gamma, beta of that axis's size (PyTorch's LayerNorm; eps 1e-5 there). */
DLRT_API dlrt_tensor_t *dlrt_layer_norm(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                                        dlrt_tensor_t *beta, float eps);
/* Batch normalisation of N x C or N x C x H x W per channel, with parameters
 * gamma, beta of C elements: training runs use the batch's statistics and
 * update running ones (momentum 0.1 in PyTorch, unbiased variance);
 * forward-only runs use the running ones. The running statistics are named
 * GAMMA.running_mean and GAMMA.running_var and saved in checkpoints. */
DLRT_API dlrt_tensor_t *dlrt_batch_norm(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                                        dlrt_tensor_t *beta, float momentum, float eps);
/* Max (or mean) over k x k windows moved by `stride`, no padding. */
DLRT_API dlrt_tensor_t *dlrt_max_pool2d(dlrt_graph_t *g, dlrt_tensor_t *x, int k, int stride);
DLRT_API dlrt_tensor_t *dlrt_avg_pool2d(dlrt_graph_t *g, dlrt_tensor_t *x, int k, int stride);
/* A view with another shape of the same number of elements. */
DLRT_API dlrt_tensor_t *dlrt_reshape(dlrt_graph_t *g, dlrt_tensor_t *x, int ndim,
                                     const int64_t *shape);
/* N x ... -> N x (product of the rest). */
DLRT_API dlrt_tensor_t *dlrt_flatten(dlrt_graph_t *g, dlrt_tensor_t *x);
/* x with axes axis0 and axis1 exchanged (torch.transpose): a view, the
 * same storage with their strides swapped. A matmul reads a transposed 2-D
 * view in place; other ops read a dense copy the executor makes once. */
DLRT_API dlrt_tensor_t *dlrt_transpose_axes(dlrt_graph_t *g, dlrt_tensor_t *x, int axis0,
                                            int axis1);
/* The transpose of a 2-D tensor: dlrt_transpose_axes(g, x, 0, 1). */
DLRT_API dlrt_tensor_t *dlrt_transpose2d(dlrt_graph_t *g, dlrt_tensor_t *x);
/* n (1 to 6) tensors joined along `axis`; other dimensions must agree. */
DLRT_API dlrt_tensor_t *dlrt_concat(dlrt_graph_t *g, int n, dlrt_tensor_t *const *xs,
                                    int axis);
/* Elements [start, start + length) of `axis`: a view at an offset with x's
 * strides, on any axis (nothing is copied; ops that need dense input read a
 * copy). */
DLRT_API dlrt_tensor_t *dlrt_slice(dlrt_graph_t *g, dlrt_tensor_t *x, int axis, int64_t start,
                                   int64_t length);
/* Sum or mean over one axis, which disappears from the shape. */
DLRT_API dlrt_tensor_t *dlrt_sum_axis(dlrt_graph_t *g, dlrt_tensor_t *x, int axis);
DLRT_API dlrt_tensor_t *dlrt_mean_axis(dlrt_graph_t *g, dlrt_tensor_t *x, int axis);
/* Rows of `table` (vocab x dim) picked by I32 ids: shape ids.shape + [dim];
 * an id outside [0, vocab) gives a row of zeros. */
DLRT_API dlrt_tensor_t *dlrt_embedding(dlrt_graph_t *g, dlrt_tensor_t *ids, dlrt_tensor_t *table);
/* Mean cross-entropy of logits (N x classes) against I32 labels (N), with
 * label smoothing in [0, 1): a tensor of shape [1]. Fused log-softmax; it
 * must be the loss given to dlrt_graph_backward. */
DLRT_API dlrt_tensor_t *dlrt_cross_entropy(dlrt_graph_t *g, dlrt_tensor_t *logits,
                                           dlrt_tensor_t *labels, float smoothing);
/* The mean cross-entropy of the logits x w^T (x N x C, w classes x C: a
 * language model's head, tied to its embedding) against I32 labels (N),
 * with label smoothing in [0, 1): a tensor of shape [1]. The N x classes
 * logits are never stored: they are made a chunk of rows at a time (at
 * most 4M logits; a workspace holds a chunk's logits, then their gradient
 * over them), and in a training run each chunk's gradient goes at once into
 * d x (N x C) and d w (classes x C), which the backward pass then takes as
 * theirs. For GPT-2 at batch 4, context 1024 that is 147 MiB of d w and
 * 16 MiB of workspace in place of 785 MiB of logits, for the same GEMMs
 * (forward-only runs skip the gradient's two). fp32 (in mixed
 * precision x is cast to it). Like dlrt_cross_entropy it must be the loss
 * given to dlrt_graph_backward. */
DLRT_API dlrt_tensor_t *dlrt_linear_cross_entropy(dlrt_graph_t *g, dlrt_tensor_t *x,
                                                  dlrt_tensor_t *w, dlrt_tensor_t *labels,
                                                  float smoothing);

/* Tensor parallelism (Megatron-LM): a group of peers (devices in one process,
 * or processes) each runs its own graph over its shard of the parameters, and
 * these ops combine their partial results mid-graph through the executor's
 * collective (dlrt_exec_set_collective). Every peer's graph must make the
 * same collectives in the same order (a tag numbers them; the collective
 * may check it). Without a collective an executor is a group of one. fp32
 * (in mixed precision the inputs are cast up).
 *
 * dlrt_tp_copy is Megatron's f: the identity (a copy of x) whose gradient is
 * summed over the peers; it goes before a column-parallel linear (each peer
 * reads the whole x and makes its columns; their gradients with respect to x
 * are partial). dlrt_tp_reduce is its conjugate g: the sum of x over the
 * peers, whose gradient is the identity; it goes after a row-parallel
 * linear (each peer's product over its rows is a partial sum). */
DLRT_API dlrt_tensor_t *dlrt_tp_copy(dlrt_graph_t *g, dlrt_tensor_t *x);
DLRT_API dlrt_tensor_t *dlrt_tp_reduce(dlrt_graph_t *g, dlrt_tensor_t *x);
/* dlrt_linear_cross_entropy over a vocabulary split between the peers: w is
 * this peer's rows [first, first + classes) of a head of `vocab` rows, the
 * labels the whole vocabulary's ids. Each peer makes its own logits x w^T a
 * chunk of rows at a time; each row's maximum, sum of exponentials, target
 * logit (and, with smoothing, sum of logits) are combined over the peers,
 * never the logits themselves, so every peer gets the same mean loss over the
 * whole vocabulary, its own d w, and its part of d x (put x through
 * dlrt_tp_copy first: the gradient of x is then summed). Must be the loss
 * given to dlrt_graph_backward. */
DLRT_API dlrt_tensor_t *dlrt_linear_cross_entropy_shard(dlrt_graph_t *g, dlrt_tensor_t *x,
                                                        dlrt_tensor_t *w, dlrt_tensor_t *labels,
                                                        int64_t first, int64_t vocab,
                                                        float smoothing);

/* Shape of a tensor: returns ndim (or <0) and fills shape[0..ndim). */
DLRT_API int dlrt_tensor_shape(const dlrt_tensor_t *t, int64_t shape[DLRT_MAX_DIMS]);
DLRT_API int64_t dlrt_tensor_numel(const dlrt_tensor_t *t);
/* Its storage type (after dlrt_graph_backward: the one mixed precision chose). */
DLRT_API dlrt_dtype dlrt_tensor_dtype(const dlrt_tensor_t *t);
/* Where t's elements lie in the storage it uses: element [i0, i1, ...] is at
 * offset + sum(i_k * strides[k]) (in elements). Returns 1 when t is a view
 * of another tensor's storage (a reshape, a 2-D transpose: strides
 * swapped, a slice along the leading axis: an offset), 0 when it owns its
 * storage (dense, offset 0), negative on a NULL argument. Matmuls read
 * transposed views in place; other ops read a dense copy made for them. */
DLRT_API int dlrt_tensor_layout(const dlrt_tensor_t *t, int64_t strides[DLRT_MAX_DIMS],
                                int64_t *offset);
DLRT_API const char *dlrt_tensor_name(const dlrt_tensor_t *t);

/* Mixed precision: `compute` is DLRT_F16, DLRT_BF16 or DLRT_F32 (off, the
 * default); call it before dlrt_graph_backward and dlrt_exec_create (a
 * graph without a backward pass is rewritten when its first executor is
 * made), and before making inputs of the compute type. Parameters and optimizer
 * state stay fp32 (the master weights); each step casts the weights to the
 * compute type for the matmuls and convolutions, which take both operands
 * in it and accumulate in fp32 (tensor cores on CUDA, fp32 math around
 * 16-bit storage where a device has no 16-bit GEMM). Activations and their
 * gradients are stored in the compute type through ops that have kernels
 * in every type (bias, ReLU, pooling, permutes, add, mul, scale); losses,
 * softmax, normalisation and the other ops compute and store fp32, with
 * casts around them, as torch.autocast does. Parameter gradients arrive in
 * fp32. With fp16, use dynamic loss scaling (dlrt_exec_set_loss_scaler). */
DLRT_API int dlrt_graph_set_precision(dlrt_graph_t *g, dlrt_dtype compute);
/* The compute type set by dlrt_graph_set_precision (DLRT_F32 when off). */
DLRT_API dlrt_dtype dlrt_graph_precision(const dlrt_graph_t *g);
/* Appends the nodes that compute the gradient of `loss` (shape [1]) with
 * respect to every parameter (and every tensor on the way). */
DLRT_API int dlrt_graph_backward(dlrt_graph_t *g, dlrt_tensor_t *loss);
/* The gradient tensor of t after dlrt_graph_backward, or NULL. Keep it with
 * dlrt_keep to read it after a run. A ReLU's output that only a max-pool
 * reads has none: the pool's backward pass gives the ReLU's input its
 * gradient directly (the output need not live until then); keep the ReLU's
 * output with dlrt_keep before the backward pass to have its gradient. */
DLRT_API dlrt_tensor_t *dlrt_grad(dlrt_graph_t *g, dlrt_tensor_t *t);

typedef enum { DLRT_OPT_SGD, DLRT_OPT_ADAM, DLRT_OPT_ADAMW } dlrt_optimizer_kind;

typedef struct {
  dlrt_optimizer_kind kind;
  float lr;
  float momentum;     /* SGD */
  int nesterov;       /* SGD */
  float weight_decay; /* L2 for SGD and Adam, decoupled for AdamW */
  float beta1, beta2, eps; /* Adam, AdamW */
} dlrt_optimizer;

/* torch.optim's defaults: SGD lr 0.01, momentum 0; Adam lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8; AdamW the same with weight decay 0.01. */
DLRT_API dlrt_optimizer dlrt_optimizer_defaults(dlrt_optimizer_kind kind);
DLRT_API const char *dlrt_optimizer_name(dlrt_optimizer_kind kind);
/* One update of `count` parameters in host memory: what an executor runs
 * for optimizer state offloaded to the host (DLRT_OFFLOAD_OPTIMIZER, as
 * ZeRO-Offload's CPU Adam), usable on its own. Adam and AdamW: state0 and
 * state1 are the first and second moments; SGD: state0 is the velocity
 * (state1 unused, may be NULL). `step` counts the updates made before this
 * one (Adam's bias correction; SGD's velocity starts as the gradient), the
 * learning rate is opt->lr, decay 0 leaves this parameter out of the
 * weight decay, and grad_scale multiplies the gradient first (1 / the loss
 * scale, or 1 / micro-batches). It runs the CPU backend's kernel,
 * vectorized for this CPU (AVX2, AVX-512) on its threads
 * (dlrt_set_cpu_threads): the same bits as the update on the cpu device. */
DLRT_API int dlrt_host_optimizer_update(const dlrt_optimizer *opt, int64_t step, float *param,
                                        float *state0, float *state1, const float *grad,
                                        int64_t count, int decay, float grad_scale);
/* Appends one fused update per parameter (after dlrt_graph_backward). */
DLRT_API int dlrt_graph_optimize(dlrt_graph_t *g, const dlrt_optimizer *opt);

/* Plans memory, allocates parameters and optimizer state on `dev`, and
 * initialises the parameters from `seed` (the same seed gives the same
 * values on every device). */
DLRT_API int dlrt_exec_create(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed,
                              dlrt_exec_t **out);
DLRT_API void dlrt_exec_destroy(dlrt_exec_t *e);

typedef enum {
  DLRT_RUN_FORWARD, /* the forward pass only (evaluation) */
  DLRT_RUN_TRAIN,   /* forward, backward and the parameter updates */
  DLRT_RUN_GRADIENTS, /* forward and backward; the gradients are kept for
                         dlrt_exec_gradients_read and no update is made
                         (data parallelism: combine, write back, apply) */
} dlrt_run_mode;

/* Queues one pass on the device's stream; returns once queued. */
DLRT_API int dlrt_exec_run(dlrt_exec_t *e, dlrt_run_mode mode);
/* Copies host data into an input or parameter (bytes must match). */
DLRT_API int dlrt_exec_write(dlrt_exec_t *e, dlrt_tensor_t *t, const void *src, size_t bytes);
/* Waits for queued work and copies out a kept tensor, an input or a parameter. */
DLRT_API int dlrt_exec_read(dlrt_exec_t *e, dlrt_tensor_t *t, void *dst, size_t bytes);
/* Queues, on the executor's stream, a copy of device buffer `src` (from
 * `src_offset`, the tensor's size, its shape's layout) into input `t` after
 * `wait` (NULL: nothing to wait for) has passed: how a loader's batch enters
 * the graph without a trip through the host. `src` must be on the
 * executor's device. */
DLRT_API int dlrt_exec_copy_in(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src,
                               size_t src_offset, dlrt_event_t *wait);
/* The stream the executor queues its work on. */
DLRT_API dlrt_stream_t *dlrt_exec_stream(dlrt_exec_t *e);
/* Gradient accumulation: each update follows `steps` training runs (micro-
 * batches) and applies the mean of their gradients, summed in fp32 in one
 * running sum per parameter (param_bytes more device memory). With a mean
 * loss per micro-batch of B samples, `steps` runs equal one run on steps x B
 * samples (batch-norm statistics follow each micro-batch, as in PyTorch).
 * 1: every run updates (the default). DLRT_ERR_STATE while an update is
 * half-way. */
DLRT_API int dlrt_exec_set_accumulation(dlrt_exec_t *e, int steps);
/* Gradient checkpointing: the forward nodes are cut into segments of
 * `every`; a segment's intermediates (all but its last node's output, and
 * those later segments read) are freed after the forward pass and computed
 * again just before the backward pass needs them: less memory for more
 * compute (Chen et al. 2016). A segment also ends at each max-pool and
 * is not cut just before a bias, ReLU or max-pool, so that a convolution
 * block stays in one segment. A segment made only of per-image ops
 * (convolution, its bias, ReLU, max pooling; fp32) also runs a chunk of
 * images at a time, in the forward pass, the evaluation pass and the
 * backward nodes that start from its pooling's gradient, so only its
 * boundary tensors hold the whole batch. 0: off; DLRT_CHECKPOINT_SQRT:
 * segments of ceil(sqrt(forward nodes)). The gradients are the same bit for
 * bit. */
#define DLRT_CHECKPOINT_SQRT (-1)
/* Segments that end at the tensors marked with dlrt_checkpoint_mark (and
 * nowhere else but at max-pools): a transformer's blocks, each recomputed
 * from the residual stream it started from. DLRT_ERR_INVALID_ARG for a
 * graph with no marks. */
#define DLRT_CHECKPOINT_MARKS (-3)
DLRT_API int dlrt_exec_set_checkpointing(dlrt_exec_t *e, int every);
/* Unified-memory emulation: the executor's storages (parameters, optimizer
 * state, activations, gradients) live on the device while its budget lasts
 * and spill to pinned host memory, past the host budget to a disk file
 * ($DLRT_SPILL_DIR, else $TMPDIR or /tmp; removed when the process ends;
 * a folder that fills up is DLRT_ERR_IO naming it, and the executor's pool
 * is then refused, DLRT_ERR_STATE, rather than run on with a lost copy).
 * Before a node runs its storages are made resident and locked; to make
 * room the executor evicts the storage whose next use in the schedule is
 * furthest away, writing back only what changed; `prefetch` nodes ahead it
 * copies what they need back on a copy stream, so transfers overlap
 * compute. The policies also move storages off ahead of need: saved
 * activations after their last forward use, optimizer state after its
 * update. Results are the same bit for bit as without a budget. */
typedef enum {
  DLRT_OFFLOAD_NONE,        /* only when the budget needs room */
  DLRT_OFFLOAD_ACTIVATIONS, /* also activations from the forward pass to the backward pass */
  DLRT_OFFLOAD_OPTIMIZER,   /* also optimizer state between updates (ZeRO-Offload) */
  DLRT_OFFLOAD_ALL,         /* both */
  /* Not a spilling policy (dlrt_exec_set_spill refuses it): the trainer's
   * --offload params, parameters streamed from the host
   * (dlrt_exec_offload_params) under the allocator's limit. */
  DLRT_OFFLOAD_PARAMS,
} dlrt_offload_policy;

typedef struct {
  uint64_t device_budget;   /* bytes of the executor's storages on the device; 0: off */
  uint64_t host_budget;     /* bytes of host copies; past it, disk; 0: no bound */
  int prefetch;             /* nodes of look-ahead for prefetching (0: on demand) */
  dlrt_offload_policy policy;
} dlrt_spill_config;

typedef struct {
  uint64_t spilled_bytes;       /* copies off the device (to host or disk) */
  uint64_t fetched_bytes;       /* host or disk -> device */
  /* Every write to and read from the spill file: the device's copies that
   * go there and host copies past the host budget (the offloaded
   * optimizer's parameters and state, updated on the host each step). */
  uint64_t disk_written_bytes, disk_read_bytes;
  uint64_t evictions;           /* storages moved off to make room */
  uint64_t dropped_clean;       /* of the moves, without a write-back (clean copy kept) */
  uint64_t offloads;            /* moved off ahead of need by the policy */
  uint64_t prefetch_hits;       /* needed when already copied (or on the way) */
  uint64_t prefetch_misses;     /* needed and copied at once, the compute waiting */
  double transfer_ms;           /* compute-stream time in those waiting copies */
  uint64_t peak_resident;       /* bytes on the device at most */
  uint64_t peak_host;           /* bytes of host copies at most (within host_budget) */
  uint64_t min_budget;          /* the smallest budget that would have fitted */
  /* Chunked convolution blocks that move their batch-sized tensors a chunk
   * of images at a time because whole ones do not fit the budget: the
   * most images per chunk (0: none do). */
  int64_t slice_images;
  /* Of spilled_bytes, those that went on to the disk tier (straight from
   * the device, or through a host copy past the host budget): never more
   * than spilled_bytes. */
  uint64_t spilled_to_disk_bytes;
  /* Write-backs to host copies queued on the pool's write-back stream (the
   * device-to-host copy engine), overlapping compute: the storage's device
   * block stays held (a "drain", counted resident) until the budget needs
   * it, when the compute stream waits for that copy (released), or until
   * the storage is used again and takes it back uncopied (reclaimed). */
  uint64_t async_writebacks, drains_released, drains_reclaimed;
} dlrt_spill_stats;

/* Turns spilling on (device_budget > 0) or off for the next runs. Storages
 * are moved to the host first; DLRT_ERR_OOM when one node alone needs more
 * than the budget, with the smallest budget that fits. With checkpointing,
 * a chunked convolution block that cannot hold its whole-batch tensors
 * moves them in slices (a chunk's images at a time, through the host) and
 * runs fewer images per chunk if it must: the same bits on PoCL (its GEMM
 * kernels sum each column alike in a GEMM of fewer columns), agreement to
 * rounding on the CPU (OpenBLAS sums a GEMM of fewer columns in another
 * order); GPUs are not measured. */
DLRT_API int dlrt_exec_set_spill(dlrt_exec_t *e, const dlrt_spill_config *config);
DLRT_API int dlrt_exec_spill_stats(dlrt_exec_t *e, dlrt_spill_stats *out);
/* The planner that chooses (issue 20): under a budget, each activation the
 * backward pass reads is kept, swapped (off the device after its last
 * forward use, prefetched on the copy stream in time for its backward
 * use) or recomputed (its producer, and what it is made from back to the
 * nearest storages that stay, run again just before the backward pass
 * needs it), with the prefetches placed to finish in time. Each node of
 * the training step is timed on the device first (a profiling pass of a
 * warm-up and at least three runs, more for a short step, each node timed
 * on the stream, cached per device and graph shape in the process
 * and in $DLRT_PROFILE_CACHE or $XDG_CACHE_HOME/dlrt when set;
 * DLRT_PROFILE_FRESH=1 measures again), and each choice is priced by
 * replaying the step on a model of the spill pool and the device's link
 * (dlrt_link_set; copies on a device that shares host memory go no faster
 * than its memcpy). The pure strategies are choices the planner can be
 * held to:
 *   BELADY     keep everything; the pool evicts by furthest next use
 *              (spilling as it was before the planner);
 *   SWAP       every such activation swapped;
 *   RECOMPUTE  checkpoint segments of sqrt(forward nodes)
 *              (dlrt_exec_set_checkpointing(DLRT_CHECKPOINT_SQRT));
 *   AUTO       the cheapest plan the planner finds, the pure ones among
 *              those it prices.
 * Results are the same bits as without a budget. */
typedef enum {
  DLRT_PLAN_BELADY,
  DLRT_PLAN_SWAP,
  DLRT_PLAN_RECOMPUTE,
  DLRT_PLAN_AUTO,
  DLRT_PLAN_STRATEGIES_ /* count */
} dlrt_plan_strategy;

/* "belady", "swap", "recompute", "auto"; NULL for others. */
DLRT_API const char *dlrt_plan_strategy_name(dlrt_plan_strategy s);
/* The reverse; DLRT_ERR_INVALID_ARG naming the four for any other text. */
DLRT_API int dlrt_plan_strategy_parse(const char *text, dlrt_plan_strategy *out);

/* A predicted training step: its parts add up to step_ms. */
typedef struct {
  int feasible;        /* 0: the model finds a node with no room */
  double step_ms;      /* compute + recompute + exposed transfer */
  double compute_ms;   /* the step's own nodes */
  double recompute_ms; /* forward nodes run again for the backward pass */
  double exposed_ms;   /* compute waiting for copies (fetches, write-backs) */
  uint64_t fetched_bytes, spilled_bytes; /* the step's traffic (as dlrt_spill_stats counts) */
} dlrt_step_prediction;

typedef struct {
  dlrt_plan_strategy asked, chosen; /* AUTO picks among the others, or its own mix */
  dlrt_step_prediction predicted;   /* of the plan that runs */
  dlrt_step_prediction strategies[DLRT_PLAN_STRATEGIES_]; /* each priced on its own */
  double unlimited_ms;              /* the measured nodes alone, no budget */
  int decisions;                    /* dlrt_exec_spill_decision's count */
  int kept, swapped, recomputed;
  uint64_t swapped_bytes, recomputed_bytes;
  double link_bytes_per_s, link_latency_s; /* what the model used, per direction */
  double copy_floor_bytes_per_s;    /* no copy faster: a host-memory device's memcpy
                                       (0: none) */
  double copy_overhead_s;           /* each copy's cost beyond the link's time, measured on
                                       the device (a host-memory device's stream hand-offs) */
  double profile_ms;                /* the profiling pass (0: cached) */
  int profile_cached;               /* 0 measured, 1 this process's, 2 the file's */
} dlrt_spill_plan;

typedef enum { DLRT_SPILL_KEEP, DLRT_SPILL_SWAP, DLRT_SPILL_RECOMPUTE } dlrt_spill_choice;

/* One activation (or the outputs of one node, taken together). */
typedef struct {
  const char *tensor;   /* the first output's name (the graph's storage) */
  const char *op;       /* its producer's op */
  uint64_t bytes;
  dlrt_spill_choice choice;
  double cost_ms;       /* the chosen option's own cost (keep: 0) */
  double swap_ms;       /* out and the part of in the backward pass waits for */
  double recompute_ms;  /* its producer and what must be made again with it */
} dlrt_spill_decision;

/* Profiles, chooses and sets the plan for the next runs; spilling must be
 * on (dlrt_exec_set_spill) and checkpointing off. Values of parameters and
 * state are those of a fresh executor afterwards (the profiling pass runs
 * the step): call it before training. DLRT_ERR_STATE without a budget or
 * with checkpointing; DLRT_ERR_OOM when no plan fits. The reverse of
 * DLRT_PLAN_BELADY's: spilling as before. */
DLRT_API int dlrt_exec_plan_spill(dlrt_exec_t *e, dlrt_plan_strategy strategy);
/* The plan in force (a zeroed one, asked = chosen = BELADY, if none was
 * made) and its decisions by index [0, decisions). */
DLRT_API int dlrt_exec_spill_plan(dlrt_exec_t *e, dlrt_spill_plan *out);
DLRT_API int dlrt_exec_spill_decision(dlrt_exec_t *e, int index, dlrt_spill_decision *out);
/* Parameter streaming (ZeRO-Offload's residency, by node): the parameters
 * that the optimizer updates (fp32), their optimizer state and a copy of
 * their gradients live on the host (pinned, pageable past
 * DLRT_PINNED_LIMIT). Each parameter is copied to the device on a copy
 * stream `ahead` nodes (of the schedule) before a node that reads it, and
 * freed after a use whose next one is further away, so the forward pass
 * and again the backward pass fetch it; a gradient goes to the host as
 * soon as the last node touching it is queued, its device buffer freed;
 * each update runs on the host (dlrt_host_optimizer_update), on a host
 * thread as soon as the gradient is there and the parameter's last use
 * queued, while the device computes the rest of the backward pass (the
 * update nodes wait for it; DLRT_PARAM_OVERLAP=0: at the nodes). The device
 * holds the activations, the gradients in the making and the parameters
 * within reach: bound it with dlrt_mem_set_limit (DLRT_MEM_LIMIT). Same
 * results bit for bit as the run on the device (the same kernels). Call
 * after dlrt_graph_optimize, before or after the executor's storage is
 * made; again to change `ahead` (>= 1; 0: chosen after the first training
 * run, which times its nodes, as the smallest look-ahead whose step on a
 * model of the copy engine and the link, dlrt_link_seconds, or the host's
 * memcpy rate without a link model, is within 1% of the best, from 1 to 16,
 * the parameters in reach within a quarter of the device budget; 4 until
 * then; dlrt_exec_param_offload_stats says it). Under mixed precision the host
 * keeps the fp32 master and writes its 16-bit copy after each update; the
 * device fetches that copy instead of running the forward cast.
 * Accumulation sums the gradients on the host; clipping and loss scaling
 * sum them (and their squares) on the host in the device's order, and the
 * updates then wait for every gradient (no overlap with the backward
 * pass). DLRT_ERR_STATE with spilling or DLRT_RUN_GRADIENTS (not done). */
DLRT_API int dlrt_exec_offload_params(dlrt_exec_t *e, int ahead);
/* With parameters streamed (dlrt_exec_offload_params): the optimizer state
 * in host memory bounded by `host_bytes`. The state of the largest
 * parameters stays there while it fits beside four slots; the rest lives
 * in the spill file ($DLRT_SPILL_DIR, else $TMPDIR or /tmp; all of it
 * reserved now, so a folder too small fails here naming it) and passes
 * through the slots a chunk at a time (a chunk of each of its states: at
 * most DLRT_PARAM_DISK_CHUNK bytes of one state, default 16 MiB, halved
 * until the slots fit, at least 64 elements): read ahead of its update by
 * an I/O thread, in the order the updates come, and written back behind
 * it. Where the budget cannot hold the fp32 masters beside the slots, a
 * master goes there with its state (updated in the slots; its fp32 fetches
 * read the master's part alone ahead of need, through a staging of four
 * chunks of one state counted in the budget). 16-bit copies and gradient
 * copies stay in host memory. The same results bit for bit. 0: all of it
 * in host memory. Call before the first run; DLRT_ERR_OOM naming the least
 * budget that would do when the slots of the least chunks do not fit. */
DLRT_API int dlrt_exec_param_state_limit(dlrt_exec_t *e, uint64_t host_bytes);
typedef struct {
  int params_streamed;        /* parameters on the host */
  int ahead;                  /* nodes of look-ahead */
  uint64_t fetches, fetched_bytes; /* host -> device copies of parameters */
  uint64_t gradient_bytes;    /* device -> host copies of gradients */
  uint64_t peak_param_bytes;  /* streamed parameters' bytes on the device at most */
  uint64_t updates;           /* host updates */
  double update_ms;           /* host time in the updates */
  double wait_ms;             /* host time waiting for gradients to arrive */
  /* With the updates overlapped (the default; DLRT_PARAM_OVERLAP=0: each
   * at its update node): the executor's time waiting at the update nodes
   * for the host thread, what the backward pass did not hide. */
  double join_ms;
  /* Optimizer state on disk (dlrt_exec_param_state_limit): its bytes in
   * host memory (the state kept there and the slots of the state on disk),
   * on disk, read and written back, and the updates' waiting for reads. */
  uint64_t state_host_bytes, state_disk_bytes, disk_read_bytes, disk_written_bytes;
  double disk_wait_ms;
  /* Masters on disk: of disk_read_bytes, those their fp32 fetches read
   * (the masters' bytes alone, ahead of need; a chunk still in a slot is
   * taken from it, not read), and the executor's time waiting for those
   * reads at the fetches. */
  uint64_t disk_fetch_read_bytes;
  double disk_fetch_wait_ms;
} dlrt_param_offload_stats;
DLRT_API int dlrt_exec_param_offload_stats(dlrt_exec_t *e, dlrt_param_offload_stats *out);
/* The gradients of the DLRT_RUN_GRADIENTS runs since the last update (their
 * sum: several runs are micro-batches) as one vector of `count` floats: each
 * parameter's, one after the other, in the order dlrt_exec_export lists the
 * parameters (count = the parameter elements, dlrt_exec_info.params); the
 * export's batch-norm running statistics have no gradient and are not in the
 * vector. Write replaces them (with a combination of replicas', say); apply
 * makes one update from their mean over those runs, as a training run would
 * have (clipping included). A kept parameter gradient (dlrt_keep) then holds
 * what the update applied, the sum these calls read and write. A spilling
 * executor (dlrt_exec_set_spill) does all of this too, with the same bits:
 * the sums (param_bytes) stay on the device beside its budget, and the
 * update makes each gradient storage resident with its sum. */
DLRT_API int dlrt_exec_gradients_read(dlrt_exec_t *e, float *dst, int64_t count);
DLRT_API int dlrt_exec_gradients_write(dlrt_exec_t *e, const float *src, int64_t count);
DLRT_API int dlrt_exec_apply_gradients(dlrt_exec_t *e);
/* Learning rate for the next updates (schedules call this every step). */
DLRT_API int dlrt_exec_set_lr(dlrt_exec_t *e, float lr);
/* The collective of a tensor-parallel group (dlrt_tp_copy, dlrt_tp_reduce):
 * `fn` replaces `count` fp32 values in host memory (pinned where the device
 * has it) in place by their sum (DLRT_COLLECTIVE_SUM) or maximum
 * (DLRT_COLLECTIVE_MAX) over the group's peers, each peer in turn passing
 * the same tag; it returns 0, or a negative dlrt status with the reason set,
 * which fails the run. The executor calls it from the thread running the
 * graph, its stream waited for. NULL: a group of one (values unchanged). */
typedef enum { DLRT_COLLECTIVE_SUM = 0, DLRT_COLLECTIVE_MAX = 1 } dlrt_collective_op;
typedef int (*dlrt_collective_fn)(void *user, float *values, int64_t count,
                                  dlrt_collective_op op, int64_t tag);
DLRT_API int dlrt_exec_set_collective(dlrt_exec_t *e, dlrt_collective_fn fn, void *user);
/* Clips the gradients of each training run to a global L2 norm of at most
 * `max_norm` before the updates (torch.nn.utils.clip_grad_norm_); 0: off.
 * Costs one device-to-host read of the norm per step. */
DLRT_API int dlrt_exec_set_clip_norm(dlrt_exec_t *e, float max_norm);

/* Dynamic loss scaling for fp16 training (torch.cuda.amp.GradScaler's
 * rule): the backward pass starts from `scale` instead of 1 so that small
 * gradients survive fp16; the updates divide it out. A step whose gradients
 * hold inf or NaN is skipped (parameters, optimizer state and step count
 * unchanged) and the scale multiplied by backoff_factor; after
 * growth_interval clean steps in a row it is multiplied by growth_factor.
 * The scale stays within [DLRT_LOSS_SCALE_MIN, DLRT_LOSS_SCALE_MAX], where
 * both it and the 1 / scale the updates apply are finite, normal floats
 * with room to spare (a scale of 1e-45 would make 1 / scale inf, and the
 * updates NaN): an init_scale outside is refused, and growth and backoff
 * stop at the ends. Checking costs one device-to-host read per update. */
#define DLRT_LOSS_SCALE_MIN 5.42101086242752217e-20f /* 2^-64 */
#define DLRT_LOSS_SCALE_MAX 1.8446744073709552e19f   /* 2^64 */
typedef struct {
  int enabled;
  float init_scale;      /* 65536 */
  float growth_factor;   /* 2 */
  float backoff_factor;  /* 0.5 */
  int growth_interval;   /* 2000 */
} dlrt_loss_scaler;

/* The defaults above, enabled. */
DLRT_API dlrt_loss_scaler dlrt_loss_scaler_defaults(void);
/* Turns loss scaling on (or off: NULL or enabled 0) for the executor's
 * training runs; the scale starts again from init_scale. DLRT_ERR_INVALID_ARG
 * for an init_scale outside [DLRT_LOSS_SCALE_MIN, DLRT_LOSS_SCALE_MAX], a
 * growth_factor below 1 or not finite, a backoff_factor outside (0, 1] or a
 * growth_interval below 1. */
DLRT_API int dlrt_exec_set_loss_scaler(dlrt_exec_t *e, const dlrt_loss_scaler *scaler);

typedef struct {
  float scale;            /* the scale of the next step (1 when off) */
  int64_t skipped_steps;  /* updates skipped for inf / NaN gradients */
  int last_skipped;       /* the last update was skipped */
} dlrt_loss_scale_state;

DLRT_API int dlrt_exec_loss_scale(const dlrt_exec_t *e, dlrt_loss_scale_state *out);

typedef struct {
  uint64_t planned_peak_bytes;  /* the planner's peak for a training step */
  uint64_t measured_peak_bytes; /* the allocator's peak since the executor began */
  uint64_t param_bytes;         /* parameters */
  uint64_t state_bytes;         /* optimizer state */
  int64_t params;               /* parameter elements */
  int64_t steps;                /* training steps run */
  int nodes;                    /* nodes in the graph */
} dlrt_exec_info;

DLRT_API int dlrt_exec_info_get(dlrt_exec_t *e, dlrt_exec_info *out);
/* Parameters and batch-norm running statistics (and, when `with_state`,
 * optimizer state, and the step count last) as named host tensors in the
 * order they were made, for checkpoints (free them with
 * dlrt_host_tensors_free); and back. */
DLRT_API int dlrt_exec_export(dlrt_exec_t *e, int with_state, dlrt_host_tensor **tensors,
                              int *n);
DLRT_API int dlrt_exec_import(dlrt_exec_t *e, const dlrt_host_tensor *tensors, int n);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_GRAPH_H */
