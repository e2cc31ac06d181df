/* pipeline_zero.c — ZeRO over the data-parallel ranks of a pipeline
 * (dlrt_trainer_set_zero on a pipeline trainer, under mpirun -np R): each
 * stage's executor shards its model states over the R ranks through
 * zero_peer.c's calls, a range of its gradient vector a rank.
 *
 * Stage 1 keeps the stages' gradient sums whole (pipeline.c's
 * reduce_stages all-reduces them; clipping and the overflow verdict read
 * them as without ZeRO). Stages 2 and 3 stream each stage's gradients to
 * the host in buckets during every backward run and sum the micro-batches
 * there (the devices keep no accumulator); before the update each stage's
 * sums are reduced to their owners only (a reduce-scatter), except a GPT's
 * tied wte, which both end stages need whole: it is all-reduced, as
 * without ZeRO, and its two copies summed on every rank. One overflow
 * verdict and one global clipping norm over all stages and ranks, each
 * rank's ranges first. Stage 3 also gathers each stage's parameters from
 * its host copy before their uses (zero.c's fetch). The schedule and the
 * stages are pipeline.c's.
 *
 * Under tensor x pipeline (pipeline_tp.c; N x R ranks) each stage executor
 * holds its shard of the stage, and "the ranks" above are the R replicas
 * of that shard: config.world and config.rank are the replica count and
 * index, and the all-reduce and ZeRO's collectives go over the shard's
 * data-parallel communicator. The norm and the verdict are summed over the
 * replicas, then over the shards (each shard's pieces, the tensors every
 * shard holds whole on its rank 0 only). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/train.h"
#include "util/status.h"

/* Stage s's gradient sums in t->stage_sums (every stage's, end to end,
 * st->grads floats each; under ZeRO stage >= 2 in its bucket order). */
static float *stage_sums(const dlrt_trainer_t *t, int s) {
  float *at = t->stage_sums;
  for (int i = 0; i < s; i++) at += t->stages[i].grads;
  return at;
}

/* Where tensor `id` starts in a stage's ZeRO layout (-1: not laid out). */
static int64_t laid_at(const struct dlrt__zero *z, int id) {
  int n;
  const int *ids;
  const int64_t *at;
  int64_t from, to;
  dlrt__zero_peer_layout(z, &n, &ids, &at, &from, &to);
  for (int j = 0; j < n; j++)
    if (ids[j] == id) return at[j];
  return -1;
}

int dlrt__pipeline_zero_gather(dlrt_trainer_t *t, int s) {
  return dlrt__zero_peer_gradients_add(t->stages[s].zero, stage_sums(t, s));
}

/* Which of a stage's parameters count in the global norm on this rank: all
 * but the last stage's copy of the tied wte (it counts once); under tensor
 * x pipeline only those pipeline_tp.c counts (the shard's pieces; the
 * tensors every rank holds whole, on its rank 0). */
typedef struct {
  const dlrt_trainer_t *t;
  const dlrt_graph_t *g; /* the stage's */
  int skip;              /* a tensor id left out, or -1 */
} norm_filter;

static int counted_in_norm(void *user, int id) {
  const norm_filter *f = user;
  return id != f->skip && (!f->t->ptp || dlrt__ptp_counted(f->t, f->g->tensors[id]));
}

/* The sum of `n` floats over the ranks, in place. */
static int ranks_sum(dlrt_trainer_t *t, float *v, int64_t n) {
  void *req = NULL;
  int rc = t->allreduce_start(t->allreduce_user, v, n, &req);
  return rc == DLRT_OK ? t->allreduce_wait(t->allreduce_user, req) : rc;
}

/* Stages 2 and 3: one update of every stage from its sums on the host
 * (dlrt__pipeline_zero_gather summed them over the micro-batches and the
 * --accum batches). The mean over the R ranks is taken as pipeline.c's
 * reduce_stages takes it (each rank's sums times 1 / R, then summed), but
 * each range only on its owner; clipping's norm and the overflow verdict
 * over each rank's ranges of every stage (the last stage's copy of the tied
 * wte left out of the norm: it counts once), then over the ranks; each
 * rank updates its ranges at the scale of dlrt_exec_apply_gradients and
 * the parameters are all-gathered. */
int dlrt__pipeline_zero_update(dlrt_trainer_t *t) {
  int S = t->n_stages, world = t->cfg.world > 1 ? t->cfg.world : 1, rc = DLRT_OK;
  float inv = 1.0f / (float)world;
  for (int s = 0; s < S; s++) {
    float *v = stage_sums(t, s);
    for (int64_t k = 0; k < t->stages[s].grads; k++) v[k] *= inv;
  }
  /* A GPT's tied wte, V x C on each end stage: reduced whole to every rank
   * (both stages' sums need both copies), the rest to the owners. */
  struct stage *a = &t->stages[0], *b = &t->stages[S - 1];
  float *tied[2] = {NULL, NULL};
  int64_t tied_n = 0;
  if (t->lm) {
    int64_t at_a = laid_at(a->zero, a->tied->id), at_b = laid_at(b->zero, b->tied->id);
    if (at_a < 0 || at_b < 0)
      return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: the tied wte has no gradient on a "
                             "pipeline stage");
    tied[0] = stage_sums(t, 0) + at_a, tied[1] = stage_sums(t, S - 1) + at_b;
    tied_n = a->tied->numel;
  }
  void *requests[2];
  int started = 0;
  for (int i = 0; i < 2 && tied_n && rc == DLRT_OK; i++)
    if ((rc = t->allreduce_start(t->allreduce_user, tied[i], tied_n, &requests[started])) ==
        DLRT_OK)
      started++;
  for (int s = 0; s < S && rc == DLRT_OK; s++) {
    struct stage *st = &t->stages[s];
    rc = dlrt__zero_peer_reduce_scatter(st->zero, stage_sums(t, s), st->tied ? st->tied->id : -1);
  }
  for (int i = 0; i < started; i++) { /* every started request is completed */
    int rc2 = t->allreduce_wait(t->allreduce_user, requests[i]);
    if (rc == DLRT_OK) rc = rc2;
  }
  if (rc < 0) return rc;
  /* The head's contribution first, then the embedding's, as one device
   * adds them (pipeline.c's sum_tied_gradients). */
  for (int64_t k = 0; k < tied_n; k++) tied[1][k] += tied[0][k];
  if (tied_n) memcpy(tied[0], tied[1], (size_t)tied_n * sizeof(float));

  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(a->e, &scale);
  int scaled = scale.scaler.enabled, clipped = t->cfg.clip_norm > 0, finite = 1;
  /* This rank's ranges: [0] how many stages hold a value that is not
   * finite, [1] the squares; then their sums over the ranks. */
  float verdict[2] = {0, 0};
  if (scaled || clipped) {
    double squares = 0;
    for (int s = 0; s < S; s++) {
      norm_filter f = {t, t->stages[s].g, t->lm && s == S - 1 ? b->tied->id : -1};
      int ok = 1;
      double sq = 0;
      dlrt__zero_peer_range_check(t->stages[s].zero, stage_sums(t, s),
                                  f.skip >= 0 || t->ptp ? counted_in_norm : NULL, &f,
                                  clipped ? &sq : NULL, scaled ? &ok : NULL);
      squares += sq;
      verdict[0] += !ok;
    }
    verdict[1] = (float)squares;
    /* Over the replicas (the ranks of this shard), then the shards. */
    if ((rc = ranks_sum(t, verdict, 2)) < 0) return rc;
    if (t->ptp && (rc = dlrt__ptp_sum(t, verdict, 2)) < 0) return rc;
    finite = verdict[0] == 0;
  }
  float clip = 1.0f;
  if (clipped && finite) {
    /* As pipeline.c's update_stages: the sums times 1 / (runs x loss
     * scale) clipped, as torch.nn.utils.clip_grad_norm_. */
    int runs = dlrt__exec_grad_runs(a->e);
    double norm = sqrt((double)verdict[1]) / (runs > 1 ? runs : 1) /
                  (scaled ? scale.scale : 1.0f);
    double coef = t->cfg.clip_norm / (norm + 1e-6);
    if (coef < 1.0) clip = (float)coef;
  }
  for (int s = 0; s < S && rc == DLRT_OK; s++)
    rc = dlrt__zero_peer_apply(t->stages[s].zero, t->stages[s].e, stage_sums(t, s), clip,
                               finite);
  return rc;
}

/* ------------------------------------------------------------ the stages' shards */

/* Each stage's executor shards its model states over the R data-parallel
 * ranks (dlrt__zero_peer_create: a range of its gradient vector a rank,
 * over the ranks' collectives `across`): stage 1 its optimizer state,
 * stage 2 its gradients too (streamed in buckets, its sums on the host),
 * stage 3 its parameters too. */
int dlrt__pipeline_set_zero(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across) {
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  if (t->stage_zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: the pipeline's stages are "
                           "sharded already (once per trainer)");
  if (!dlrt__zero_across_ready(t, across))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO shards each pipeline stage's model "
                           "states over the data-parallel ranks: run mpirun -np R (R > 1; "
                           "config.world %d) with --pipeline (N x R with --tensor-parallel N: "
                           "each stage's shard over its R replicas), set the ranks' all-reduce "
                           "(dlrt_trainer_set_allreduce_async) first and give their reduce, "
                           "broadcast and wait", world);
  if (t->stage_batches > 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: %d batches of an update are "
                           "under way", t->stage_batches);
  dlrt__zero_peer_spec *peers = calloc((size_t)t->n_stages, sizeof *peers);
  if (!peers) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int s = 0; s < t->n_stages; s++)
    peers[s] = (dlrt__zero_peer_spec){t->stages[s].e, t->stages[s].dev, &t->stages[s].zero};
  int rc = dlrt__zero_peers_create(t, stage, across, peers, t->n_stages, "the pipeline's stages");
  free(peers);
  /* Stages 2 and 3 sum each stage's gradients in t->stage_sums, in the
   * order of its buckets: as many as the stage has. */
  for (int s = 0; s < t->n_stages && rc == DLRT_OK && stage >= 2; s++) {
    int n;
    const int *ids;
    const int64_t *at;
    int64_t from, to;
    dlrt__zero_peer_layout(t->stages[s].zero, &n, &ids, &at, &from, &to);
    int64_t total = 0;
    for (int j = 0; j < n; j++) total += t->stages[s].g->tensors[ids[j]]->numel;
    if (total != t->stages[s].grads)
      rc = dlrt__set_error(DLRT_ERR_STATE, "ZeRO: pipeline stage %d streams %lld gradient "
                           "elements, not its %lld", s, (long long)total,
                           (long long)t->stages[s].grads);
  }
  if (rc < 0) {
    for (int s = 0; s < t->n_stages; s++) {
      dlrt__zero_peer_free(t->stages[s].zero);
      t->stages[s].zero = NULL;
    }
    return rc;
  }
  t->stage_zero = stage;
  return DLRT_OK;
}

/* What this rank's stages hold together (each stage's executor, with its
 * ZeRO pieces), and would unsharded. A GPT's tied wte counts on both end
 * stages: each holds a copy. The main executor (evaluation, checkpoints)
 * holds no gradients and is not counted. */
int dlrt__pipeline_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out) {
  out->stage = t->stage_zero;
  out->replicas = dlrt__across_processes(t) && t->cfg.world > 1 ? t->cfg.world : 1;
  for (int s = 0; s < t->n_stages; s++) {
    dlrt_zero_info part = {0};
    dlrt__zero_peer_figures(t->stages[s].e, t->stages[s].zero, &part);
    out->param_bytes += part.param_bytes, out->grad_bytes += part.grad_bytes;
    out->optimizer_bytes += part.optimizer_bytes;
    out->full_param_bytes += part.full_param_bytes, out->full_grad_bytes += part.full_grad_bytes;
    out->full_optimizer_bytes += part.full_optimizer_bytes;
  }
  return DLRT_OK;
}
