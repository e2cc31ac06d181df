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
 * The trainer's own executor keeps the whole model, as a pipeline's does:
 * at the end of each round the stages' pieces are gathered over the ranks
 * into it (a sum of zero-padded pieces), for evaluation and checkpoints. */
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
  if (t->tp || t->ptp || t->n_reps || t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_pipeline_tensor_parallel: the "
                           "trainer is split already (tensor parallel, --devices or ZeRO): "
                           "call it once, on a trainer of one device");
  dlrt_gpt_config gpt;
  dlrt__gpt_model(&t->cfg, &gpt);
  if (ranks > gpt.heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s has %lld heads: it splits over at most "
                           "%lld ranks (--tensor-parallel)", t->model, (long long)gpt.heads,
                           (long long)gpt.heads);
  for (int i = 0; weights && i < ranks; i++)
    if (!(weights[i] > 0) || !isfinite(weights[i]))
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "tensor parallel weight %g of rank %d: "
                             "weights must be positive", weights[i], i);
  struct dlrt__ptp *p = calloc(1, sizeof *p);
  if (!p) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  dlrt_gpt_shard shards[DLRT_TP_MAX];
  dlrt__tp_make_shards(&gpt, ranks, weights, shards);
  *p = (struct dlrt__ptp){.gpt = gpt, .shard = shards[rank], .rank = rank, .ranks = ranks,
                          .fn = fn, .user = user};
  /* The stages are built for the shard (pipeline.c asks dlrt__ptp_shard). */
  t->ptp = p;
  int rc = dlrt_trainer_set_pipeline(t, devs, n, micro);
  if (rc < 0) dlrt__ptp_free(t);
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
      tp_piece piece;
      int split = w->ndim <= 2 && dlrt__tp_piece_of(w->name, &p->gpt, &p->shard, w->ndim,
                                                    &piece);
      /* A piece of the shard on every rank, a tensor every rank holds whole
       * on rank 0 only; the last stage's wte is the first's (summed). */
      int counted = (split || p->rank == 0) && !(s == S - 1 && w == st->tied);
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

int dlrt_trainer_stage_info(dlrt_trainer_t *t, dlrt_stage_info *out, int max, int *n) {
  DLRT__CHECK_ARG(t && n && (out || max == 0), "dlrt_trainer_stage_info: trainer or n is NULL");
  *n = t->n_stages;
  for (int s = 0; s < t->n_stages && s < max; s++) {
    const struct stage *st = &t->stages[s];
    dlrt_exec_info info;
    int rc = dlrt_exec_info_get(st->e, &info);
    if (rc < 0) return rc;
    const dlrt_gpt_shard *shard = t->ptp ? &t->ptp->shard : NULL;
    out[s] = (dlrt_stage_info){.device = dlrt_device_spec(st->dev), .first = st->first,
                               .last = st->last, .rank = t->ptp ? t->ptp->rank : 0,
                               .ranks = t->ptp ? t->ptp->ranks : 0,
                               .head_first = shard ? shard->head_first : 0,
                               .heads = shard ? shard->heads : 0,
                               .vocab_first = shard ? shard->vocab_first : 0,
                               .vocab = shard ? shard->vocab : 0,
                               .param_bytes = info.param_bytes, .state_bytes = info.state_bytes,
                               .planned_peak_bytes = info.planned_peak_bytes};
  }
  return DLRT_OK;
}
