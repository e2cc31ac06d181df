/* pipeline_tp.c — tensor x pipeline parallelism for GPT models: the blocks
 * cut into pipeline stages (pipeline.c: the GPipe schedule, the tied wte's
 * sum, the data-parallel sums), and every stage split Megatron-style over
 * tensor-parallel ranks (tensor_parallel.c's shards).
 *
 * Each rank holds shard `rank` of `ranks` of every stage: its heads and MLP
 * columns in each block, its vocabulary rows of wte on the first stage (the
 * embedding, tokens shifted to the shard) and on the last (the head through
 * dlrt_linear_cross_entropy_shard). A stage's graph meets the other ranks'
 * same stage in its collectives (f and g per sublayer, the head's row
 * statistics) through the caller's collective; every rank runs the same
 * schedule in the same order (waves of stages, micro-batches in turn), so
 * the collectives meet in order. The residual stream between stages and
 * the gradient passed back are whole (the same on every rank of a shard
 * group), so the pipeline passes them as without the split. The first and
 * last stages of a rank hold the same vocabulary rows of wte, so the tied
 * gradients' sum stays a sum of two pieces on the rank. Data-parallel
 * replicas (the trainer's all-reduce) sum each stage with the same stage
 * of the same shard on the other replicas.
 *
 * The trainer's own executor keeps no storage (as a split model's): the
 * whole model lives in the shards of the stages. Evaluation runs through
 * the stages, and checkpoints and the ranks' fingerprint gather whole
 * tensors from them over the ranks (a sum of zero-padded pieces). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/tensor_parallel_internal.h"
#include "train/train.h"
#include "util/status.h"

struct dlrt__ptp {
  dlrt_gpt_config gpt;
  dlrt_gpt_shard shard; /* this rank's, of every stage */
  int rank, ranks;
  dlrt_collective_fn fn; /* over the tensor-parallel ranks */
  void *user;
};

void dlrt__ptp_free(dlrt_trainer_t *t) {
  free(t->ptp);
  t->ptp = NULL;
}

const dlrt_gpt_shard *dlrt__ptp_shard(const dlrt_trainer_t *t) { return &t->ptp->shard; }

int dlrt__ptp_rank(const dlrt_trainer_t *t) { return t->ptp->rank; }

int dlrt_trainer_set_pipeline_tensor_parallel(dlrt_trainer_t *t, dlrt_device_t *const *devs,
                                              int n, int micro, int rank, int ranks,
                                              const double *weights, dlrt_collective_fn fn,
                                              void *user) {
  DLRT__CHECK_ARG(t && fn && ranks >= 2 && ranks <= DLRT_TP_MAX && rank >= 0 && rank < ranks,
                  "dlrt_trainer_set_pipeline_tensor_parallel: trainer or collective is NULL, "
                  "or rank %d of %d (2 to %d ranks)", rank, ranks, DLRT_TP_MAX);
  if (!t->lm)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "tensor x pipeline parallelism splits GPT "
                           "models (--model gpt-mini, gpt2, ...); for %s use --pipeline alone",
                           t->model);
  if (t->tp || t->ptp || t->n_stages || t->n_reps || t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_pipeline_tensor_parallel: the "
                           "trainer is split already (tensor or pipeline parallel, --devices "
                           "or ZeRO): call it once, on a trainer of one device");
  dlrt_gpt_config gpt;
  dlrt__gpt_model(&t->cfg, &gpt);
  int rc = dlrt__tp_check_split(t, &gpt, ranks, weights, "ranks");
  if (rc < 0) return rc;
  struct dlrt__ptp *p = calloc(1, sizeof *p);
  if (!p) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  dlrt_gpt_shard shards[DLRT_TP_MAX];
  dlrt__tp_make_shards(&gpt, ranks, weights, shards);
  *p = (struct dlrt__ptp){.gpt = gpt, .shard = shards[rank], .rank = rank, .ranks = ranks,
                          .fn = fn, .user = user};
  /* The stages are built for the shard (pipeline.c asks dlrt__ptp_shard). */
  t->ptp = p;
  rc = dlrt_trainer_set_pipeline(t, devs, n, micro);
  /* The whole model now lives in the stages' shards: the trainer's
   * executor is made again without storage (its plan and figures stay). */
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->e, &scale);
  dlrt_exec_t *bare = NULL;
  if (rc == DLRT_OK) rc = dlrt__exec_create_deferred(t->g, t->dev, t->cfg.seed, &bare);
  if (rc == DLRT_OK) {
    bare->steps = t->e->steps;
    dlrt__exec_restore_loss_scale(bare, &scale);
    dlrt_exec_destroy(t->e);
    t->e = bare;
    dlrt_loader_destroy(t->eval_loader); /* evaluation takes host batches now */
    t->eval_loader = NULL;
    t->eval_data = NULL;
  } else {
    dlrt__pipeline_free(t);
    dlrt__ptp_free(t);
  }
  return rc;
}

int dlrt__ptp_sync(dlrt_trainer_t *t) {
  /* The stages' step count to the trainer's executor (its loss scale goes
   * there after each update). Under ZeRO each stage's optimizer state is
   * gathered from its replicas into its host copy (a collective over the
   * data-parallel ranks of the shard: every rank syncs at the end of an
   * epoch), for the checkpoint's export. */
  t->e->steps = t->stages[0].e->steps;
  int rc = DLRT_OK;
  for (int s = 0; s < t->n_stages && rc == DLRT_OK; s++)
    if (t->stages[s].zero) rc = dlrt__zero_peer_sync(t->stages[s].zero);
  return rc;
}

int dlrt__ptp_evaluate(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                       float *loss) {
  /* The batch (t->batch rows of T tokens) in the training step's
   * micro-batches, each forward through the stages in turn (micro-batch 0's
   * slots of the host activations as scratch); the mean of their mean
   * losses is the batch's. Every rank evaluates the same batches in the
   * same order, so the stages' collectives meet. */
  int S = t->n_stages, M = t->micro, rc = DLRT_OK;
  int64_t per = t->act_numel[0]; /* tokens of a micro-batch */
  double sum = 0;
  for (int m = 0; m < M && rc == DLRT_OK; m++) {
    int32_t *in = (int32_t *)(t->acts + t->act_at[0]);
    memcpy(in, tokens + m * per, (size_t)per * sizeof(int32_t));
    dlrt__ptp_shift_tokens(t, in, per);
    for (int s = 0; s < S && rc == DLRT_OK; s++) {
      struct stage *st = &t->stages[s];
      rc = dlrt_exec_write(st->e, st->x, t->acts + t->act_at[s],
                           (size_t)t->act_numel[s] * sizeof(float));
      if (rc == DLRT_OK && s == S - 1)
        rc = dlrt_exec_write(st->e, st->labels, targets + m * per,
                             (size_t)per * sizeof(int32_t));
      if (rc == DLRT_OK) rc = dlrt_exec_run(st->e, DLRT_RUN_FORWARD);
      if (rc == DLRT_OK && s < S - 1)
        rc = dlrt_exec_read(st->e, st->y, t->acts + t->act_at[s + 1],
                            (size_t)t->act_numel[s + 1] * sizeof(float));
      float l = 0;
      if (rc == DLRT_OK && s == S - 1 &&
          (rc = dlrt_exec_read(st->e, st->loss, &l, sizeof l)) == DLRT_OK)
        sum += l;
    }
  }
  *loss = (float)(sum / M);
  return rc;
}

int dlrt__ptp_stage_import(dlrt_trainer_t *t, dlrt_exec_t *e, const dlrt_host_tensor *whole,
                           int n) {
  struct dlrt__ptp *p = t->ptp;
  dlrt_host_tensor *mine;
  int rc = dlrt_exec_set_collective(e, p->fn, p->user);
  if (rc == DLRT_OK) rc = dlrt__tp_scatter(&p->gpt, &p->shard, whole, n, &mine);
  if (rc < 0) return rc;
  rc = dlrt_exec_import(e, mine, n); /* a stage takes its layers' and skips the others */
  dlrt_host_tensors_free(mine, n);
  return rc;
}

void dlrt__ptp_shift_tokens(const dlrt_trainer_t *t, int32_t *tokens, int64_t n) {
  /* The shard's own ids from 0; the others' fall outside its rows and embed
   * as zeros (the embedding's sum over the ranks adds the owner's row). */
  int32_t first = (int32_t)t->ptp->shard.vocab_first;
  for (int64_t k = 0; first && k < n; k++) tokens[k] -= first;
}

int dlrt__ptp_counted(const dlrt_trainer_t *t, const dlrt_tensor_t *w) {
  /* A piece of the shard counts on every rank, a tensor every rank holds
   * whole (LayerNorms, wpe, the row-parallel biases) on rank 0 only. */
  const struct dlrt__ptp *p = t->ptp;
  tp_piece piece;
  int split = w->ndim <= 2 && dlrt__tp_piece_of(w->name, &p->gpt, &p->shard, w->ndim, &piece);
  return split || p->rank == 0;
}

int dlrt__ptp_sum(dlrt_trainer_t *t, float *v, int64_t n) {
  /* Tag -2, as dlrt__ptp_check's (MPI orders the collectives itself). */
  return t->ptp->fn(t->ptp->user, v, n, DLRT_COLLECTIVE_SUM, -2);
}

int dlrt__ptp_check(dlrt_trainer_t *t, double *squares, int *finite) {
  struct dlrt__ptp *p = t->ptp;
  int S = t->n_stages, rc = DLRT_OK;
  double sq = 0;
  float bad = 0;
  for (int s = 0; s < S && rc == DLRT_OK; s++) {
    const struct stage *st = &t->stages[s];
    float *g = malloc((size_t)(st->grads ? st->grads : 1) * sizeof(float));
    if (!g) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    /* The stage's gradient sums, its parameters' in tensor order. */
    if ((rc = dlrt_exec_gradients_read(st->e, g, st->grads)) < 0) {
      free(g);
      break;
    }
    int64_t at = 0;
    for (int id = 0; id < st->g->n_tensors; id++) {
      const dlrt_tensor_t *w = st->g->tensors[id];
      if (w->kind != DLRT__TENSOR_PARAM || !w->grad) continue;
      /* The last stage's wte is the first's (summed). */
      int counted = dlrt__ptp_counted(t, w) && !(s == S - 1 && w == st->tied);
      for (int64_t k = 0; k < w->numel; k++) {
        float v = g[at + k];
        if (!isfinite(v)) bad = 1;
        if (counted) sq += (double)v * v;
      }
      at += w->numel;
    }
    free(g);
  }
  /* One norm and one verdict for the ranks (tag -2, as tensor_parallel's). */
  float total = (float)sq;
  if (rc == DLRT_OK) rc = p->fn(p->user, &total, 1, DLRT_COLLECTIVE_SUM, -2);
  if (rc == DLRT_OK) rc = p->fn(p->user, &bad, 1, DLRT_COLLECTIVE_MAX, -2);
  if (rc < 0) return rc;
  *squares = total;
  *finite = bad == 0;
  return DLRT_OK;
}

int dlrt__ptp_gather(dlrt_trainer_t *t, dlrt_host_tensor *part, int n) {
  struct dlrt__ptp *p = t->ptp;
  const dlrt_graph_t *g = t->g; /* the whole model's graph: the whole shapes */
  for (int k = 0; k < n; k++) {
    dlrt_host_tensor *h = &part[k];
    tp_piece piece;
    if (h->dtype != DLRT_F32 || h->ndim > 2 ||
        !dlrt__tp_piece_of(h->name, &p->gpt, &p->shard, h->ndim, &piece))
      continue; /* whole on every rank, the same */
    const dlrt_tensor_t *w = NULL;
    for (int id = 0; id < g->n_tensors && !w; id++)
      if (strcmp(g->tensors[id]->name, h->name) == 0) w = g->tensors[id];
    if (!w || w->ndim != h->ndim)
      return dlrt__set_error(DLRT_ERR_STATE, "tensor x pipeline: %s of a stage is not in the "
                             "whole model", h->name);
    size_t bytes = dlrt__tensor_bytes(w);
    float *whole = calloc(1, bytes ? bytes : 1);
    if (!whole) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    int64_t rows = w->ndim == 1 ? 1 : w->shape[0], cols = w->ndim == 1 ? w->shape[0] : w->shape[1];
    dlrt__tp_copy_piece(whole, rows, cols, h->data, &piece, 0);
    /* Each rank's piece, zeros elsewhere: the sum over the ranks is whole. */
    int rc = p->fn(p->user, whole, (int64_t)(bytes / sizeof(float)), DLRT_COLLECTIVE_SUM, -1);
    if (rc < 0) {
      free(whole);
      return rc;
    }
    free(h->data);
    h->data = whole;
    h->bytes = bytes;
    memcpy(h->shape, w->shape, sizeof h->shape);
  }
  return DLRT_OK;
}

int dlrt__ptp_info(dlrt_trainer_t *t, dlrt_exec_info *out) {
  int rc = dlrt_exec_info_get(t->e, out); /* the whole model's parameters and state */
  out->planned_peak_bytes = out->measured_peak_bytes = 0;
  for (int s = 0; s < t->n_stages && rc == DLRT_OK; s++) {
    dlrt_exec_info stage;
    if ((rc = dlrt_exec_info_get(t->stages[s].e, &stage)) < 0) break;
    if (stage.planned_peak_bytes > out->planned_peak_bytes)
      out->planned_peak_bytes = stage.planned_peak_bytes;
    if (stage.measured_peak_bytes > out->measured_peak_bytes)
      out->measured_peak_bytes = stage.measured_peak_bytes;
  }
  return rc;
}

/* The position of `name` among the whole model's tensors (its export
 * order), or n_tensors for those it has not (the step count: last). */
static int whole_order(const dlrt_graph_t *g, const char *name) {
  for (int id = 0; id < g->n_tensors; id++)
    if (strcmp(g->tensors[id]->name, name) == 0) return id;
  return g->n_tensors;
}

int dlrt__ptp_export(dlrt_trainer_t *t, int with_state, dlrt_host_tensor **out, int *n_out) {
  dlrt_host_tensor *all = NULL;
  int n_all = 0, rc = DLRT_OK;
  for (int s = 0; s < t->n_stages && rc == DLRT_OK; s++) {
    dlrt_host_tensor *part;
    int n;
    /* Under ZeRO from the stage's host copies (its parameters current, its
     * optimizer state as of the last sync), whole for the shard. */
    struct dlrt__zero *z = t->stages[s].zero;
    if ((rc = z ? dlrt__zero_peer_export_as(z, with_state, &part, &n)
                : dlrt_exec_export(t->stages[s].e, with_state, &part, &n)) < 0)
      break;
    /* Every rank takes part in each gather, in the same order. */
    rc = dlrt__ptp_gather(t, part, n);
    dlrt_host_tensor *grown = rc == DLRT_OK ? realloc(all, (size_t)(n_all + n) * sizeof *all)
                                            : NULL;
    if (rc == DLRT_OK && !grown) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    if (rc < 0) {
      dlrt_host_tensors_free(part, n);
      break;
    }
    all = grown;
    /* A GPT's wte (and its state, the step count) on two stages, alike:
     * the first stage's. */
    for (int k = 0; k < n; k++) {
      int seen = 0;
      for (int j = 0; j < n_all && !seen; j++) seen = strcmp(all[j].name, part[k].name) == 0;
      if (seen) free(part[k].data);
      else all[n_all++] = part[k];
    }
    free(part); /* the tensors' data now belong to `all` */
  }
  if (rc < 0) {
    dlrt_host_tensors_free(all, n_all);
    return rc;
  }
  /* In the whole model's order, as one device exports it (stable). */
  for (int i = 1; i < n_all; i++) {
    dlrt_host_tensor h = all[i];
    int key = whole_order(t->g, h.name), j = i;
    for (; j > 0 && whole_order(t->g, all[j - 1].name) > key; j--) all[j] = all[j - 1];
    all[j] = h;
  }
  *out = all;
  *n_out = n_all;
  return DLRT_OK;
}

int dlrt_trainer_stage_info(dlrt_trainer_t *t, dlrt_stage_info *out, int max, int *n) {
  DLRT__CHECK_ARG(t && n && (out || max == 0), "dlrt_trainer_stage_info: trainer or n is NULL");
  *n = t->n_stages;
  for (int s = 0; s < t->n_stages && s < max; s++) {
    const struct stage *st = &t->stages[s];
    dlrt_exec_info info;
    int rc = dlrt_exec_info_get(st->e, &info);
    if (rc < 0) return rc;
    dlrt_spill_stats sp = {0};
    if (st->spill_budget && (rc = dlrt_exec_spill_stats(st->e, &sp)) < 0) return rc;
    const dlrt_gpt_shard *shard = t->ptp ? &t->ptp->shard : NULL;
    out[s] = (dlrt_stage_info){.device = dlrt_device_spec(st->dev), .first = st->first,
                               .last = st->last, .rank = t->ptp ? t->ptp->rank : 0,
                               .ranks = t->ptp ? t->ptp->ranks : 0,
                               .head_first = shard ? shard->head_first : 0,
                               .heads = shard ? shard->heads : 0,
                               .vocab_first = shard ? shard->vocab_first : 0,
                               .vocab = shard ? shard->vocab : 0,
                               .param_bytes = info.param_bytes, .state_bytes = info.state_bytes,
                               .planned_peak_bytes = info.planned_peak_bytes,
                               .spill_budget_bytes = st->spill_budget,
                               .spill_peak_bytes = sp.peak_resident};
  }
  return DLRT_OK;
}
