/*
 * gpt-dump.c — what tests/test-gpt-torch.sh compares with PyTorch, in the
 * manner of llm.c's test_gpt2.c: a small GPT (dlrt_gpt_build) on DEVICE,
 * one batch of tokens, and in OUT (safetensors) its initial parameters
 * ("param.NAME"), the logits of the batch, every parameter's gradient
 * ("grad.NAME", after one DLRT_RUN_GRADIENTS pass) and the losses of 10
 * AdamW steps on the same batch ("losses"), with the tokens and targets.
 *
 * Usage: gpt-dump DEVICE OUT [fp32|fp16|bf16]
 * The model: 2 layers, 4 heads, width 32, context 16, vocabulary 64, on
 * windows of 12 tokens (fewer than the context: the position table is
 * sliced), batch 3; AdamW lr 1e-2, betas 0.9 0.999, eps 1e-8, weight decay
 * 0.1 on the blocks' matrices only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"

enum { B = 3, T = 12, STEPS = 10 };

static const dlrt_gpt_config model = {.layers = 2, .heads = 4, .embd = 32, .context = 16,
                                      .vocab = 64};

static int fail(const char *what, int rc) {
  fprintf(stderr, "gpt-dump: %s: %s (%s)\n", what, dlrt_last_error(), dlrt_err_name(rc));
  return 1;
}

#define TRY(what, call)                                                                  \
  do {                                                                                   \
    int rc_ = (call);                                                                    \
    if (rc_ < 0) return fail(what, rc_);                                                 \
  } while (0)

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *tokens, *targets, *logits, *loss;
} net;

static int make_net(dlrt_device_t *dev, dlrt_dtype precision, net *n) {
  memset(n, 0, sizeof *n);
  int64_t ts[2] = {B, T}, ys[1] = {B * T};
  TRY("dlrt_graph_create", dlrt_graph_create(&n->g));
  TRY("precision", dlrt_graph_set_precision(n->g, precision));
  n->tokens = dlrt_input(n->g, "tokens", DLRT_I32, 2, ts);
  n->targets = dlrt_input(n->g, "targets", DLRT_I32, 1, ys);
  TRY("inputs", dlrt_graph_status(n->g));
  TRY("dlrt_gpt_build", dlrt_gpt_build(n->g, &model, n->tokens, &n->logits));
  n->logits = dlrt_keep(n->g, n->logits);
  n->loss = dlrt_keep(n->g, dlrt_cross_entropy(n->g, n->logits, n->targets, 0));
  TRY("loss", dlrt_graph_status(n->g));
  TRY("dlrt_graph_backward", dlrt_graph_backward(n->g, n->loss));
  dlrt_optimizer opt = dlrt_optimizer_defaults(DLRT_OPT_ADAMW);
  opt.lr = 1e-2f;
  opt.weight_decay = 0.1f;
  TRY("dlrt_graph_optimize", dlrt_graph_optimize(n->g, &opt));
  TRY("dlrt_exec_create", dlrt_exec_create(n->g, dev, 7, &n->e));
  return 0;
}

static void free_net(net *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fputs("usage: gpt-dump DEVICE OUT [fp32|fp16|bf16]\n", stderr);
    return 2;
  }
  dlrt_dtype precision = argc > 3 && strcmp(argv[3], "fp16") == 0   ? DLRT_F16
                         : argc > 3 && strcmp(argv[3], "bf16") == 0 ? DLRT_BF16
                                                                    : DLRT_F32;
  dlrt_device_t *dev;
  TRY("dlrt_device_open", dlrt_device_open(argv[1], &dev));
  dlrt_set_cpu_threads(2);

  /* The batch: tokens and targets from a fixed LCG. */
  static int32_t tokens[B * T], targets[B * T];
  uint32_t state = 12345;
  for (int i = 0; i < B * T; i++) {
    state = state * 1664525u + 1013904223u;
    tokens[i] = (int32_t)((state >> 16) % (uint32_t)model.vocab);
    state = state * 1664525u + 1013904223u;
    targets[i] = (int32_t)((state >> 16) % (uint32_t)model.vocab);
  }

  net a;
  if (make_net(dev, precision, &a)) return 1;
  dlrt_host_tensor *params;
  int n_params;
  TRY("dlrt_exec_export", dlrt_exec_export(a.e, 0, &params, &n_params));
  int64_t n_grads = 0;
  for (int i = 0; i < n_params; i++) n_grads += (int64_t)(params[i].bytes / sizeof(float));
  float *grads = malloc((size_t)n_grads * sizeof *grads);
  float *logits = malloc((size_t)(B * T * model.vocab) * sizeof *logits);
  if (!grads || !logits) return fail("malloc", DLRT_ERR_OOM);
  TRY("write tokens", dlrt_exec_write(a.e, a.tokens, tokens, sizeof tokens));
  TRY("write targets", dlrt_exec_write(a.e, a.targets, targets, sizeof targets));
  TRY("run gradients", dlrt_exec_run(a.e, DLRT_RUN_GRADIENTS));
  TRY("read logits", dlrt_exec_read(a.e, a.logits, logits,
                                    (size_t)(B * T * model.vocab) * sizeof *logits));
  TRY("read gradients", dlrt_exec_gradients_read(a.e, grads, n_grads));

  /* A second executor from the same seed: the same initial parameters,
   * trained 10 steps on the batch. */
  net b;
  if (make_net(dev, precision, &b)) return 1;
  float losses[STEPS];
  TRY("write tokens", dlrt_exec_write(b.e, b.tokens, tokens, sizeof tokens));
  TRY("write targets", dlrt_exec_write(b.e, b.targets, targets, sizeof targets));
  for (int s = 0; s < STEPS; s++) {
    TRY("run train", dlrt_exec_run(b.e, DLRT_RUN_TRAIN));
    TRY("read loss", dlrt_exec_read(b.e, b.loss, &losses[s], sizeof losses[s]));
  }

  int n_out = 2 * n_params + 4;
  dlrt_host_tensor *out = calloc((size_t)n_out, sizeof *out);
  if (!out) return fail("calloc", DLRT_ERR_OOM);
  int64_t at = 0;
  for (int i = 0; i < n_params; i++) {
    out[i] = params[i];
    snprintf(out[i].name, sizeof out[i].name, "param.%s", params[i].name);
    out[n_params + i] = params[i];
    snprintf(out[n_params + i].name, sizeof out[n_params + i].name, "grad.%s", params[i].name);
    out[n_params + i].data = grads + at;
    at += (int64_t)(params[i].bytes / sizeof(float));
  }
  dlrt_host_tensor *extra = out + 2 * n_params;
  extra[0] = (dlrt_host_tensor){.name = "logits", .dtype = DLRT_F32, .ndim = 2,
                                .shape = {B * T, model.vocab}, .data = logits,
                                .bytes = (size_t)(B * T * model.vocab) * sizeof(float)};
  extra[1] = (dlrt_host_tensor){.name = "losses", .dtype = DLRT_F32, .ndim = 1,
                                .shape = {STEPS}, .data = losses, .bytes = sizeof losses};
  extra[2] = (dlrt_host_tensor){.name = "tokens", .dtype = DLRT_I32, .ndim = 2,
                                .shape = {B, T}, .data = tokens, .bytes = sizeof tokens};
  extra[3] = (dlrt_host_tensor){.name = "targets", .dtype = DLRT_I32, .ndim = 1,
                                .shape = {B * T}, .data = targets, .bytes = sizeof targets};
  TRY("dlrt_safetensors_save", dlrt_safetensors_save(argv[2], out, n_out, NULL));
  free(out);
  dlrt_host_tensors_free(params, n_params);
  free(grads);
  free(logits);
  free_net(&a);
  free_net(&b);
  dlrt_shutdown();
  return 0;
}
