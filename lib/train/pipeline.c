/* pipeline.c — pipeline parallelism: the model's layers cut into one stage
 * per device, each batch going through in micro-batches on the GPipe
 * schedule (dlrt_trainer_set_pipeline).
 *
 * A GPT is cut at block boundaries: the embeddings go with the first stage,
 * the final LayerNorm and the head fused into its loss with the last, and
 * the residual stream ((rows T) x C) passes between stages. Its LM head is
 * tied to the token embedding wte, which both end stages then use: as
 * Megatron-LM does, each of them holds a copy, and before every update the
 * two copies' gradients are summed and written back to both, so that both
 * make the same update from the same state (from one device's sum of the
 * head's and the embedding's contributions). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "mem/buffer.h"
#include "train/train.h"
#include "util/clock.h"
#include "util/status.h"

static void stage_free(struct stage *s) {
  dlrt__zero_peer_free(s->zero); /* first: it waits for the executor's stream */
  dlrt_exec_destroy(s->e);
  dlrt_graph_destroy(s->g);
  memset(s, 0, sizeof *s);
}

void dlrt__pipeline_free(dlrt_trainer_t *t) {
  for (int i = 0; i < t->n_stages; i++) stage_free(&t->stages[i]);
  free(t->stages);
  free(t->acts);
  free(t->act_at);
  free(t->act_numel);
  free(t->upstream);
  free(t->tied_first);
  free(t->tied_last);
  free(t->stage_sums);
  t->stage_sums = NULL;
  t->stage_zero = 0;
  t->tied_first = t->tied_last = NULL;
  t->stages = NULL;
  t->acts = t->upstream = NULL;
  t->act_at = t->act_numel = NULL;
  t->n_stages = 0;
}

/* Parameters of layers [first, last) and whether they end in a matrix (a
 * cut there passes an N x F activation; image layouts stay inside a stage). */
static int probe_layers(const dlrt_trainer_t *t, int first, int last, int64_t *params,
                        int *flat) {
  dlrt_graph_t *g;
  int rc = dlrt_graph_create(&g);
  if (rc < 0) return rc;
  int64_t shape[4] = {1, t->channels, t->height, t->width}, out[DLRT_MAX_DIMS];
  dlrt_tensor_t *x, *y;
  rc = dlrt__model_stage(g, t->model, shape, t->classes, first, last, &x, &y);
  *params = 0;
  if (rc == DLRT_OK) {
    for (int i = 0; i < g->n_tensors; i++)
      if (g->tensors[i]->kind == DLRT__TENSOR_PARAM) *params += g->tensors[i]->numel;
    *flat = dlrt_tensor_shape(y, out) == 2;
  }
  dlrt_graph_destroy(g);
  return rc;
}

/* A GPT stage over blocks [st->first, st->last) on micro-batches of `rows`
 * windows: its input (tokens on the first stage, else the residual
 * stream), the last stage's targets and loss; st->tied is its wte. */
static int gpt_stage_graph(dlrt_trainer_t *t, struct stage *st, int last_stage, int64_t rows) {
  dlrt_gpt_config c;
  dlrt__gpt_model(&t->cfg, &c);
  int64_t T = t->width, tokens[2] = {rows, T}, stream[2] = {rows * T, c.embd};
  st->x = st->first == 0 ? dlrt_input(st->g, "tokens", DLRT_I32, 2, tokens)
                         : dlrt_input(st->g, "activations", DLRT_F32, 2, stream);
  /* A later stage's input gets a gradient: the earlier stage's upstream one. */
  if (st->x && st->first > 0) st->x->needs_grad = 1;
  if (last_stage) {
    int64_t ts[1] = {rows * T};
    st->labels = dlrt_input(st->g, "targets", DLRT_I32, 1, ts);
  }
  int rc = dlrt_graph_status(st->g);
  if (rc == DLRT_OK)
    rc = dlrt__gpt_build_stage(st->g, &c, t->ptp ? dlrt__ptp_shard(t) : NULL, st->x, rows, T,
                               st->first, st->last, st->labels, t->cfg.label_smoothing,
                               last_stage ? &st->loss : &st->y);
  for (int i = 0; rc == DLRT_OK && i < st->g->n_tensors; i++) {
    dlrt_tensor_t *p = st->g->tensors[i];
    if (p->kind == DLRT__TENSOR_PARAM && strcmp(p->name, "transformer.wte.weight") == 0)
      st->tied = p;
  }
  return rc;
}

/* A GPT's cuts into n stages (cuts[s]: the first block of stage s + 1),
 * balancing the stages' parameters: the embeddings (wte and wpe) count on
 * the first, the final LayerNorm and the head's copy of wte on the last,
 * blocks between the cuts. Each stage takes a block at least (n <= layers).
 * split.c cuts its splits' stages with it too. */
void dlrt__gpt_stage_cuts(const dlrt_gpt_config *c, int n, int *cuts) {
  int64_t embeddings = (c->vocab + c->context) * c->embd, head = c->vocab * c->embd + 2 * c->embd;
  int64_t block = (dlrt_gpt_params(c) - embeddings - 2 * c->embd) / c->layers;
  int64_t total = embeddings + c->layers * block + head;
  for (int s = 1; s < n; s++) {
    int64_t target = total * s / n, best_gap = -1;
    int from = s > 1 ? cuts[s - 2] + 1 : 1;
    for (int cut = from; cut <= c->layers - (n - s); cut++) {
      int64_t before = embeddings + cut * block;
      int64_t gap = before > target ? before - target : target - before;
      if (best_gap < 0 || gap < best_gap) cuts[s - 1] = cut, best_gap = gap;
    }
  }
}

static int gpt_cuts(const dlrt_trainer_t *t, int n, int *cuts, int *layers) {
  dlrt_gpt_config c;
  dlrt__gpt_model(&t->cfg, &c);
  int rc = dlrt_gpt_check(&c);
  if (rc < 0) return rc;
  *layers = (int)c.layers;
  if (n > c.layers)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s has %lld blocks: it cuts into at most as "
                           "many pipeline stages, not %d", t->model, (long long)c.layers, n);
  dlrt__gpt_stage_cuts(&c, n, cuts);
  return DLRT_OK;
}

/* A stage before the last runs its forward pass as an evaluation
 * (DLRT_RUN_FORWARD), where dropout passes values through and batch norm
 * takes its running statistics, but the backward pass's recomputation
 * trains: the activations it passed on would not be those its gradients
 * are of. Such a stage is refused. */
static int check_stage_ops(const dlrt_trainer_t *t, const struct stage *st) {
  for (int i = 0; i < st->g->n_nodes; i++) {
    const dlrt__node *n = st->g->nodes[i];
    int dropout = (n->op == DLRT__OP_DROPOUT && n->dropout.prob > 0) ||
                  (n->op == DLRT__OP_ATTENTION && n->attention.dropout > 0);
    if (dropout || (n->op == DLRT__OP_NORM && n->norm.batch_norm))
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: a pipeline stage before the last "
                             "(%s %d-%d) has %s, which pipeline parallelism does not take "
                             "there in this version: train without it, or on one device", t->model, t->lm ? "blocks" : "layers",
                             st->first + !t->lm, st->last - t->lm,
                             dropout ? "dropout (--dropout, --attn-dropout)" : "batch norm");
  }
  return DLRT_OK;
}

/* --checkpoint auto in a stage: the segments chosen for its own device's
 * budget (DLRT_MEM_LIMIT, else its memory), as one device's trainer
 * chooses them, with the stage's gradient sums beside its plan. The stages
 * meet between their runs, never inside a segment, so each may choose its
 * own. */
static int stage_auto_segments(struct stage *st) {
  dlrt_exec_info info;
  int every, rc = dlrt_exec_info_get(st->e, &info);
  return rc < 0 ? rc : dlrt__choose_checkpoint_every(st->e, st->g, st->dev, 0,
                                                     info.param_bytes, &every);
}

/* Under the stages' budget (dlrt_trainer_set_pipeline_memory): the stage
 * spills within it on its device, as one device's trainer does
 * (dlrt__spill_budget). Its gradient runs' sums (one float per parameter
 * gradient, exec_grads.c) stay on the device beside its pool, so the pool
 * gets the budget less their bytes (and a granule per tensor's rounding). */
static int stage_spill(dlrt_trainer_t *t, struct stage *st) {
  uint64_t outside = (uint64_t)st->grads * sizeof(float) + 64 * 512;
  dlrt_spill_config c = {0};
  char note[160] = "";
  int rc = dlrt__spill_budget(st->e, st->dev, &t->stage_spill, outside, &c, note, sizeof note);
  if (rc == DLRT_OK && c.device_budget) {
    rc = dlrt_exec_set_spill(st->e, &c);
    st->spill_budget = c.device_budget + outside;
  }
  if (rc < 0)
    return dlrt__set_error(rc, "pipeline stage of layers %d-%d on %s: %s%s", st->first,
                           st->last - 1, dlrt_device_spec(st->dev), dlrt_last_error(), note);
  return DLRT_OK;
}

int dlrt_trainer_set_pipeline_memory(dlrt_trainer_t *t, const dlrt_spill_config *spill) {
  DLRT__CHECK_ARG(t && spill, "dlrt_trainer_set_pipeline_memory: trainer or spill is NULL");
  DLRT__CHECK_ARG(spill->policy != DLRT_OFFLOAD_PARAMS || !spill->device_budget,
                  "dlrt_trainer_set_pipeline_memory: the stages spill (--offload "
                  "activations, optimizer or all); streamed parameters (--offload params) "
                  "make no gradient runs, which the stages hand out, in this version");
  if (t->n_stages)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_pipeline_memory: the model is cut "
                           "into stages already; give their budget before the cut");
  t->stage_spill = *spill;
  return DLRT_OK;
}

int dlrt__pipeline_spills(const dlrt_trainer_t *t) {
  for (int s = 0; s < t->n_stages; s++)
    if (t->stages[s].spill_budget) return 1;
  return 0;
}

int dlrt__pipeline_spill_stats(dlrt_trainer_t *t, dlrt_spill_stats *out) {
  memset(out, 0, sizeof *out);
  int rc = DLRT_OK;
  for (int i = 0; i < t->n_stages && rc == DLRT_OK; i++) {
    dlrt_spill_stats s;
    if (!t->stages[i].spill_budget || (rc = dlrt_exec_spill_stats(t->stages[i].e, &s)) < 0)
      continue;
    dlrt__spill_stats_add(out, &s);
  }
  return rc;
}

/* Builds stage s over layers [first, last) for micro-batches of `rows`, on
 * the main executor's parameters and state. */
static int stage_build(dlrt_trainer_t *t, struct stage *st, int last_stage, int64_t rows,
                       const dlrt_host_tensor *state, int n_state) {
  int64_t shape[4] = {rows, t->channels, t->height, t->width}, ys[DLRT_MAX_DIMS];
  int rc = dlrt_graph_create(&st->g);
  /* Mixed precision: the activations passed between stages stay fp32 (an
   * input, and a kept output). */
  if (rc == DLRT_OK) rc = dlrt_graph_set_precision(st->g, t->cfg.precision);
  if (rc == DLRT_OK && t->lm)
    rc = gpt_stage_graph(t, st, last_stage, rows); /* the last stage's loss: the head's */
  else if (rc == DLRT_OK)
    rc = dlrt__model_stage(st->g, t->model, shape, t->classes, st->first, st->last, &st->x,
                           &st->y);
  if (rc == DLRT_OK && last_stage && !t->lm) {
    int64_t ls[1] = {rows};
    st->labels = dlrt_input(st->g, "labels", DLRT_I32, 1, ls);
    st->y = dlrt_keep(st->g, st->y);
    st->loss = dlrt_cross_entropy(st->g, st->y, st->labels, t->cfg.label_smoothing);
  } else if (rc == DLRT_OK && !last_stage) {
    /* The stage's loss is <y, upstream>: its gradient is the gradient the
     * next stage passes back. */
    int nd = dlrt_tensor_shape(st->y, ys);
    st->upstream = dlrt_input(st->g, "upstream", DLRT_F32, nd, ys);
    st->y = dlrt_keep(st->g, st->y);
    st->loss = dlrt_sum(st->g, dlrt_mul(st->g, st->y, st->upstream));
  }
  st->loss = st->loss ? dlrt_keep(st->g, st->loss) : NULL;
  if (rc == DLRT_OK) rc = dlrt_graph_status(st->g);
  if (rc == DLRT_OK && !last_stage) rc = check_stage_ops(t, st);
  if (rc == DLRT_OK) rc = dlrt_graph_backward(st->g, st->loss);
  /* Loss scaling: only the last stage's loss is scaled. A stage before it
   * seeds its backward pass with the upstream gradient, which carries the
   * scale already: its loss seed stays 1 (its updates still divide by the
   * scale). */
  for (int i = 0; rc == DLRT_OK && !last_stage && i < st->g->n_nodes; i++)
    if (st->g->nodes[i]->op == DLRT__OP_FILL) st->g->nodes[i]->fill.loss_seed = 0;
  if (rc == DLRT_OK && st->first > 0) st->dx = dlrt_keep(st->g, dlrt_grad(st->g, st->x));
  if (rc == DLRT_OK) rc = dlrt_graph_optimize(st->g, &t->cfg.opt);
  for (int i = 0; rc == DLRT_OK && i < st->g->n_tensors; i++) {
    const dlrt_tensor_t *p = st->g->tensors[i];
    if (p->kind == DLRT__TENSOR_PARAM && p->grad) st->grads += p->numel;
  }
  if (rc == DLRT_OK) rc = dlrt_exec_create(st->g, st->dev, t->cfg.seed, &st->e);
  /* Checkpointing inside a stage: its backward pass (which recomputes the
   * stage's forward, as GPipe does) keeps only the segments' inputs. */
  if (rc == DLRT_OK && t->cfg.checkpoint == DLRT_CHECKPOINT_AUTO)
    rc = stage_auto_segments(st);
  else if (rc == DLRT_OK && t->cfg.checkpoint != 0)
    rc = dlrt_exec_set_checkpointing(st->e, t->cfg.checkpoint);
  if (rc == DLRT_OK) /* tensor x pipeline: the shard's pieces (pipeline_tp.c) */
    rc = t->ptp ? dlrt__ptp_stage_import(t, st->e, state, n_state)
                : dlrt_exec_import(st->e, state, n_state);
  /* Every stage scales (or not) as the main executor does, from its state,
   * by scale / M: each micro-batch's loss is the mean of its rows, M times
   * the share of one row in the batch's mean, so the per-row gradients then
   * have the size they have on one device, and overflow where they would.
   * The updates divide by the same (gradient sums of M micro-batches times
   * 1 / (M x scale / M)). */
  if (rc == DLRT_OK) {
    dlrt__loss_scale_saved scale;
    dlrt__exec_save_loss_scale(t->e, &scale);
    if (scale.scaler.enabled) scale.scale /= (float)t->micro; /* else 1: the kernels read it */
    dlrt__exec_restore_loss_scale(st->e, &scale);
  }
  if (rc == DLRT_OK && t->stage_spill.device_budget) rc = stage_spill(t, st);
  return rc;
}

int dlrt_trainer_set_pipeline(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n, int micro) {
  DLRT__CHECK_ARG(t && devs && n >= 2 && n <= 16 && micro >= 1,
                  "dlrt_trainer_set_pipeline: trainer or devices is NULL, %d stages (2 to 16) "
                  "or %d micro-batches", n, micro);
  DLRT__CHECK_ARG(!t->spilling && !t->n_reps && !dlrt__across_processes(t),
                  "dlrt_trainer_set_pipeline: not with the trainer's own spilling (give the "
                  "stages their budget: dlrt_trainer_set_pipeline_memory) or --devices in this "
                  "version; across processes, set the pipeline before the all-reduce "
                  "(dlrt_trainer_set_allreduce_async)");
  if (t->ptp && t->stage_spill.device_budget)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "tensor x pipeline parallelism goes without "
                           "the stages' budget (dlrt_trainer_set_pipeline_memory, --mem-limit) "
                           "in this version");
  if (t->ptp && t->n_stages)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_pipeline: the trainer's stages "
                           "are split over tensor-parallel ranks already (once per trainer)");
  /* Each stage chooses automatic segments for its own budget; the ranks of
   * a split stage would choose apart, and their collectives must meet. */
  if (t->ptp && t->cfg.checkpoint == DLRT_CHECKPOINT_AUTO)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "tensor x pipeline parallelism takes "
                           "--checkpoint blocks, sqrt or every:N, not auto, in this version "
                           "(each rank's stage would choose its own segments)");
  if (t->batch % micro)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a batch of %lld does not split into %d "
                           "micro-batches", (long long)t->batch, micro);
  int layers, rc, cuts[16], n_cuts = 0;
  if (t->lm) {
    if ((rc = gpt_cuts(t, n, cuts, &layers)) < 0) return rc;
    n_cuts = n - 1;
  } else if ((rc = dlrt__model_layer_count(t->model, &layers)) < 0) {
    return rc;
  }
  /* A classifier's cuts: where an activation is a matrix, chosen to
   * balance parameters. */
  int64_t total = 0;
  int flat;
  if (!t->lm && (rc = probe_layers(t, 0, layers, &total, &flat)) < 0) return rc;
  for (int s = 1; s < n && !t->lm; s++) {
    int64_t target = total * s / n, best_gap = -1;
    int best = -1;
    for (int c = (n_cuts ? cuts[n_cuts - 1] : 0) + 1; c < layers; c++) {
      int64_t before;
      if ((rc = probe_layers(t, 0, c, &before, &flat)) < 0) return rc;
      int64_t gap = before > target ? before - target : target - before;
      if (flat && (best < 0 || gap < best_gap)) best = c, best_gap = gap;
    }
    if (best < 0)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "model %s: no place to cut it into %d "
                             "stages (stages meet where an activation is N x F: after a "
                             "flatten or linear layer)", t->model, n);
    cuts[n_cuts++] = best;
  }
  dlrt__pipeline_free(t);
  dlrt__drop_train_loader(t);
  t->stages = calloc((size_t)n, sizeof *t->stages);
  t->act_at = calloc((size_t)n, sizeof *t->act_at);
  t->act_numel = calloc((size_t)n, sizeof *t->act_numel);
  if (!t->stages || !t->act_at || !t->act_numel)
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  t->n_stages = n;
  t->micro = micro;
  t->stage_batches = 0;
  dlrt_host_tensor *state;
  int n_state;
  if ((rc = dlrt_exec_export(t->e, 1, &state, &n_state)) < 0) return rc;
  int64_t rows = t->batch / micro, at = 0;
  for (int s = 0; s < n && rc == DLRT_OK; s++) {
    struct stage *st = &t->stages[s];
    st->dev = devs[s];
    st->first = s ? cuts[s - 1] : 0;
    st->last = s < n - 1 ? cuts[s] : layers;
    rc = stage_build(t, st, s == n - 1, rows, state, n_state);
    if (rc == DLRT_OK) {
      int64_t xs[DLRT_MAX_DIMS], numel = 1;
      int nd = dlrt_tensor_shape(st->x, xs);
      for (int d = 0; d < nd; d++) numel *= xs[d];
      t->act_numel[s] = numel;
      t->act_at[s] = at;
      at += numel * micro;
    }
  }
  dlrt_host_tensors_free(state, n_state);
  if (rc == DLRT_OK) {
    /* A GPT's first stage input is its I32 tokens, kept in the same 4-byte
     * slots. */
    t->acts = malloc((size_t)at * sizeof(float));
    t->upstream = malloc((size_t)at * sizeof(float)); /* laid out as acts */
    if (!t->acts || !t->upstream) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  if (rc == DLRT_OK && t->lm) {
    const dlrt_tensor_t *a = t->stages[0].tied, *b = t->stages[n - 1].tied;
    if (!a || !b || a->numel != b->numel)
      rc = dlrt__set_error(DLRT_ERR_STATE, "%s: the first and last pipeline stages have no "
                           "tied wte of one shape", t->model);
    else if (!(t->tied_first = malloc((size_t)a->numel * sizeof(float))) ||
             !(t->tied_last = malloc((size_t)a->numel * sizeof(float))))
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  if (rc < 0) dlrt__pipeline_free(t);
  return rc;
}

/* The tied wte's gradient (the sums over the micro-batches) on the first
 * stage (the embedding's) and on the last (the head's): their sum written
 * back to both, as one device's d wte sums both contributions. */
static int sum_tied_gradients(dlrt_trainer_t *t) {
  struct stage *a = &t->stages[0], *b = &t->stages[t->n_stages - 1];
  int64_t count = a->tied->numel;
  size_t bytes = (size_t)count * sizeof(float);
  dlrt_buffer_t *ga = dlrt__exec_grad_sum(a->e, a->tied->id);
  dlrt_buffer_t *gb = dlrt__exec_grad_sum(b->e, b->tied->id);
  dlrt_stream_t *sa = dlrt_exec_stream(a->e), *sb = dlrt_exec_stream(b->e);
  if (!ga || !gb)
    return dlrt__set_error(DLRT_ERR_STATE, "the tied wte has no gradient on a pipeline stage");
  int rc = dlrt_copy_d2h(t->tied_first, ga, 0, bytes, sa);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(t->tied_last, gb, 0, bytes, sb);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(sa);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(sb);
  if (rc < 0) return rc;
  /* The head's contribution first, then the embedding's, as one device
   * adds them (embedding_grad_acc into the head's d wte). */
  for (int64_t i = 0; i < count; i++) t->tied_last[i] += t->tied_first[i];
  rc = dlrt_copy_h2d(ga, 0, t->tied_last, bytes, sa);
  if (rc == DLRT_OK) rc = dlrt_copy_h2d(gb, 0, t->tied_last, bytes, sb);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(sa);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(sb);
  return rc;
}

int dlrt_trainer_stages(const dlrt_trainer_t *t, int *first, int *last, int *n) {
  DLRT__CHECK_ARG(t && n, "dlrt_trainer_stages: trainer or n is NULL");
  *n = t->n_stages;
  for (int s = 0; s < t->n_stages; s++) {
    if (first) first[s] = t->stages[s].first;
    if (last) last[s] = t->stages[s].last;
  }
  return DLRT_OK;
}

/* The stages' loss scale (all alike) to the main executor, which reports
 * it (dlrt_trainer_loss_scale) and saves it in checkpoints: times M. */
static void scale_to_main(dlrt_trainer_t *t) {
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->stages[0].e, &scale);
  if (scale.scaler.enabled) scale.scale *= (float)t->micro;
  dlrt__exec_restore_loss_scale(t->e, &scale);
}

int dlrt__pipeline_set_ranks(dlrt_trainer_t *t) {
  int64_t total = 0;
  for (int s = 0; s < t->n_stages; s++) total += t->stages[s].grads;
  free(t->stage_sums);
  t->stage_sums = malloc((size_t)(total ? total : 1) * sizeof(float));
  free(t->requests);
  t->requests = calloc((size_t)t->n_stages + 1, sizeof *t->requests);
  if (!t->stage_sums || !t->requests) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  return DLRT_OK;
}

/* Data parallel over processes: each stage's gradient sums averaged with
 * the same stage's on the other ranks (one all-reduce per stage, all
 * started before the first wait), before the update. */
static int reduce_stages(dlrt_trainer_t *t) {
  int world = t->cfg.world > 0 ? t->cfg.world : 1, started = 0, rc = DLRT_OK;
  float inv = 1.0f / (float)world, *at = t->stage_sums;
  for (int s = 0; s < t->n_stages && rc == DLRT_OK; s++) {
    struct stage *st = &t->stages[s];
    if ((rc = dlrt_exec_gradients_read(st->e, at, st->grads)) < 0) break;
    for (int64_t k = 0; k < st->grads; k++) at[k] *= inv;
    if ((rc = t->allreduce_start(t->allreduce_user, at, st->grads, &t->requests[s])) == DLRT_OK)
      started++;
    at += st->grads;
  }
  /* Every started request is completed, also after a failure. */
  for (int s = 0; s < started; s++) {
    int rc2 = t->allreduce_wait(t->allreduce_user, t->requests[s]);
    if (rc == DLRT_OK) rc = rc2;
  }
  at = t->stage_sums;
  for (int s = 0; s < t->n_stages && rc == DLRT_OK; s++) {
    rc = dlrt_exec_gradients_write(t->stages[s].e, at, t->stages[s].grads);
    at += t->stages[s].grads;
  }
  return rc;
}

/* A batch's loss and correct count, summed over the processes (the loss
 * divided by their number first). */
static int reduce_loss(dlrt_trainer_t *t, float *loss, int64_t *correct) {
  int world = t->cfg.world > 0 ? t->cfg.world : 1;
  float v[2] = {*loss / (float)world, (float)*correct};
  void *req = NULL;
  int rc = t->allreduce_start(t->allreduce_user, v, 2, &req);
  if (rc == DLRT_OK) rc = t->allreduce_wait(t->allreduce_user, req);
  if (rc < 0) return rc;
  *loss = v[0];
  *correct = (int64_t)(v[1] + 0.5f);
  return DLRT_OK;
}

/* One update of every stage from the mean of its gradient sums. Clipping
 * takes the global norm over the stages, counting the tied wte once (after
 * sum_tied_gradients both stages hold the same sum): the last stage leaves
 * its copy out. Loss scaling takes one overflow verdict for all stages, so
 * that they skip together and their scales stay the same. */
static int update_stages(dlrt_trainer_t *t) {
  if (t->stage_zero >= 2) { /* the sums are on the host, each range's on its owner */
    int rc = dlrt__pipeline_zero_update(t);
    if (rc == DLRT_OK) scale_to_main(t);
    return rc;
  }
  int S = t->n_stages, rc = dlrt__across_processes(t) ? reduce_stages(t) : DLRT_OK;
  if (rc == DLRT_OK && t->lm) rc = sum_tied_gradients(t);
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->stages[0].e, &scale);
  int scaled = scale.scaler.enabled, clipped = t->cfg.clip_norm > 0, finite = 1;
  double squares = 0;
  /* Tensor x pipeline: over the shards too (pipeline_tp.c). */
  if (rc == DLRT_OK && t->ptp && (scaled || clipped)) rc = dlrt__ptp_check(t, &squares, &finite);
  for (int s = 0; s < S && rc == DLRT_OK && (scaled || clipped) && !t->ptp; s++) {
    const struct stage *st = &t->stages[s];
    int skip = t->lm && s == S - 1 ? st->tied->id : -1, ok = 1;
    float sq = 0;
    rc = dlrt__exec_grad_sums_check(st->e, skip, clipped ? &sq : NULL, scaled ? &ok : NULL);
    squares += sq;
    finite &= ok;
  }
  float clip = 1.0f;
  if (rc == DLRT_OK && clipped && finite) {
    /* The update applies the sums times 1 / (runs x loss scale) (every
     * stage ran as many micro-batches): clip that, as
     * torch.nn.utils.clip_grad_norm_. */
    int runs = dlrt__exec_grad_runs(t->stages[0].e);
    double norm = sqrt(squares) / (runs > 1 ? runs : 1) / (scaled ? scale.scale : 1.0f);
    double coef = t->cfg.clip_norm / (norm + 1e-6);
    if (coef < 1.0) clip = (float)coef;
  }
  for (int s = 0; s < S && rc == DLRT_OK; s++)
    /* Under ZeRO stage 1 each rank's range from the sums its executor
     * holds (every rank's mean, as reduce_stages left them). */
    rc = t->stages[s].zero
             ? dlrt__zero_peer_apply(t->stages[s].zero, t->stages[s].e, NULL, clip, finite)
             : dlrt__exec_apply_gradients_as(t->stages[s].e, clip, finite);
  if (rc == DLRT_OK) scale_to_main(t);
  return rc;
}

/* GPipe: every micro-batch forward through the stages (their inputs kept on
 * the host), then backward through them in reverse, each stage recomputing
 * its forward (as GPipe does) and summing its gradients over the
 * micro-batches; then one update per stage from their mean.
 *
 * Both passes go in waves: in wave w stage s takes micro-batch w - s (the
 * backward pass: w - (S - 1 - s)), whose input the stage before it (after
 * it) made in wave w - 1. Every stage's run of a wave is queued on its own
 * stream before any is waited for, so stages on different devices compute
 * at once, as GPipe's schedule has them; each stage still takes its
 * micro-batches in order, so the sums (and the bits) do not change. */
static int forward_wave(dlrt_trainer_t *t, int w) {
  int S = t->n_stages, M = t->micro, rc = DLRT_OK;
  for (int s = 0; s < S - 1 && rc == DLRT_OK; s++) {
    int m = w - s;
    if (m < 0 || m >= M) continue;
    struct stage *st = &t->stages[s];
    float *in = t->acts + t->act_at[s] + m * t->act_numel[s];
    if ((rc = dlrt_exec_write(st->e, st->x, in, (size_t)t->act_numel[s] * sizeof(float))) ==
        DLRT_OK)
      rc = dlrt_exec_run(st->e, DLRT_RUN_FORWARD);
  }
  for (int s = 0; s < S - 1 && rc == DLRT_OK; s++) {
    int m = w - s;
    if (m < 0 || m >= M) continue;
    float *out = t->acts + t->act_at[s + 1] + m * t->act_numel[s + 1];
    rc = dlrt_exec_read(t->stages[s].e, t->stages[s].y, out,
                        (size_t)t->act_numel[s + 1] * sizeof(float));
  }
  return rc;
}

static int backward_wave(dlrt_trainer_t *t, int w, const int32_t *labels, float lr, float *loss,
                         int64_t *correct) {
  int S = t->n_stages, M = t->micro, rc = DLRT_OK;
  /* A GPT has a label per position of each row. */
  int64_t rows = t->batch / M, labels_per_row = t->lm ? t->width : 1;
  for (int s = S - 1; s >= 0 && rc == DLRT_OK; s--) {
    int m = w - (S - 1 - s);
    if (m < 0 || m >= M) continue;
    struct stage *st = &t->stages[s];
    float *in = t->acts + t->act_at[s] + m * t->act_numel[s];
    if ((rc = dlrt_exec_set_lr(st->e, lr)) < 0 ||
        (rc = dlrt_exec_write(st->e, st->x, in, (size_t)t->act_numel[s] * sizeof(float))) < 0)
      break;
    if (s == S - 1)
      rc = dlrt_exec_write(st->e, st->labels, labels + m * rows * labels_per_row,
                           (size_t)(rows * labels_per_row) * sizeof(int32_t));
    else /* the gradient the next stage passed back for this micro-batch */
      rc = dlrt_exec_write(st->e, st->upstream,
                           t->upstream + t->act_at[s + 1] + m * t->act_numel[s + 1],
                           (size_t)t->act_numel[s + 1] * sizeof(float));
    if (rc == DLRT_OK) rc = dlrt_exec_run(st->e, DLRT_RUN_GRADIENTS);
  }
  for (int s = S - 1; s >= 0 && rc == DLRT_OK; s--) {
    int m = w - (S - 1 - s);
    if (m < 0 || m >= M) continue;
    struct stage *st = &t->stages[s];
    /* ZeRO stages 2 and 3: the run's gradients, from its buckets into the
     * stage's sums on the host (the device keeps none). */
    if (t->stage_zero >= 2 && (rc = dlrt__pipeline_zero_gather(t, s)) < 0) break;
    if (s == S - 1) {
      float l = 0;
      rc = dlrt_exec_read(st->e, st->loss, &l, sizeof l);
      if (rc == DLRT_OK && !t->lm) /* a GPT's head makes no logits to count */
        rc = dlrt_exec_read(st->e, st->y, t->host_logits,
                            (size_t)(rows * t->classes) * sizeof(float));
      *loss += l / (float)M;
      for (int64_t j = 0; j < rows && rc == DLRT_OK && !t->lm; j++) {
        const float *row = t->host_logits + j * t->classes;
        int64_t best = 0;
        for (int64_t c = 1; c < t->classes; c++)
          if (row[c] > row[best]) best = c;
        *correct += best == labels[m * rows + j];
      }
    }
    if (rc == DLRT_OK && s > 0)
      rc = dlrt_exec_read(st->e, st->dx, t->upstream + t->act_at[s] + m * t->act_numel[s],
                          (size_t)t->act_numel[s] * sizeof(float));
  }
  return rc;
}

int dlrt__pipeline_step(dlrt_trainer_t *t, const void *inputs, const int32_t *labels, float lr,
                        float *loss, int64_t *correct) {
  int S = t->n_stages, M = t->micro, rc = DLRT_OK;
  int64_t correct_before = *correct;
  _Static_assert(sizeof(float) == sizeof(int32_t), "a token takes an activation's slot");
  memcpy(t->acts + t->act_at[0], inputs, (size_t)(t->act_numel[0] * M) * sizeof(float));
  if (t->ptp) dlrt__ptp_shift_tokens(t, (int32_t *)(t->acts + t->act_at[0]), t->act_numel[0] * M);
  for (int w = 0; w < M + S - 2 && rc == DLRT_OK; w++) rc = forward_wave(t, w);
  *loss = 0;
  for (int w = 0; w < M + S - 1 && rc == DLRT_OK; w++)
    rc = backward_wave(t, w, labels, lr, loss, correct);
  if (rc == DLRT_OK && dlrt__across_processes(t)) {
    int64_t right = *correct - correct_before;
    rc = reduce_loss(t, loss, &right);
    *correct = correct_before + right;
  }
  /* Accumulation: the stages' sums run on over the update's batches. */
  if (rc < 0 || ++t->stage_batches < t->accum) return rc;
  t->stage_batches = 0;
  return update_stages(t);
}

/* The main executor takes the stages' parameters (for evaluation and
 * checkpoints). */
int dlrt__pipeline_sync_main(dlrt_trainer_t *t) {
  if (!t->n_stages) return DLRT_OK;
  if (t->ptp) return dlrt__ptp_sync(t); /* no whole model to sync: pipeline_tp.c */
  /* Each stage holds its layers' parameters and state: all of them together
   * are the model's. A GPT's wte and its state are on two stages, alike:
   * the import takes the first stage's. */
  dlrt_host_tensor *all = NULL;
  int n_all = 0, rc = DLRT_OK;
  for (int s = 0; s < t->n_stages && rc == DLRT_OK; s++) {
    dlrt_host_tensor *part;
    int n;
    /* Under ZeRO its optimizer state is gathered from the ranks first
     * (every rank syncs at the end of an epoch). */
    struct dlrt__zero *z = t->stages[s].zero;
    if (z && (rc = dlrt__zero_peer_sync(z)) < 0) break;
    if ((rc = z ? dlrt__zero_peer_export(z, &part, &n)
                : dlrt_exec_export(t->stages[s].e, 1, &part, &n)) < 0)
      break;
    dlrt_host_tensor *grown = realloc(all, (size_t)(n_all + n) * sizeof *all);
    if (!grown) {
      dlrt_host_tensors_free(part, n);
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      break;
    }
    all = grown;
    memcpy(all + n_all, part, (size_t)n * sizeof *all);
    n_all += n;
    free(part); /* the tensors' data now belong to `all` */
  }
  if (rc == DLRT_OK) rc = dlrt_exec_import(t->e, all, n_all);
  dlrt_host_tensors_free(all, n_all);
  if (rc == DLRT_OK) scale_to_main(t);
  return rc;
}
