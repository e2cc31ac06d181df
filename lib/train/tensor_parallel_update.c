/* tensor_parallel_update.c — the update of a tensor-parallel GPT model's
 * peers where the host takes part (tensor_parallel.c's HOST_UPDATE): the
 * data-parallel sum over the replicas, one overflow verdict and one global
 * clipping norm for the whole split model, and ZeRO over the replicas
 * (each peer's shard of its model states, zero.c). The split, the peers
 * and their runs are tensor_parallel.c's. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "exec/exec.h"
#include "train/tensor_parallel_internal.h"
#include "train/train.h"
#include "util/status.h"

/* The data-parallel sum over the processes (the trainer's all-reduce, its
 * bucketed form or the plain one) of `n` vectors, in place, started in
 * the same order on every process. */
int dlrt__tp_replicas_sum(dlrt_trainer_t *t, float *const *values, const int64_t *count, int n) {
  if (!t->allreduce_start) {
    int rc = DLRT_OK;
    for (int i = 0; i < n && rc == DLRT_OK; i++)
      rc = t->allreduce(t->allreduce_user, values[i], count[i]);
    return rc;
  }
  void *requests[DLRT_TP_MAX + 1];
  int started = 0, rc = DLRT_OK;
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    if ((rc = t->allreduce_start(t->allreduce_user, values[i], count[i],
                                 &requests[started])) == DLRT_OK)
      started++;
  for (int i = 0; i < started; i++) { /* every started request is completed */
    int rc2 = t->allreduce_wait(t->allreduce_user, requests[i]);
    if (rc == DLRT_OK) rc = rc2;
  }
  return rc;
}

/* Over the tensor-parallel group: across processes the caller's collective
 * (tag -2), in this process the peers' values are at hand. */
static int group_combine(dlrt__tp *tp, float *v, dlrt_collective_op op) {
  return tp->fn ? tp->fn(tp->user, v, 1, op, -2) : DLRT_OK;
}

/* Peer p's share of the squared global norm of its gradients: its shard's
 * pieces, and the tensors every peer holds whole (LayerNorms, wpe, the
 * row-parallel biases) on the first peer only, so each counts once. */
static double peer_squares(const dlrt__tp *tp, const tp_peer *p, int first) {
  const dlrt_graph_t *g = p->g;
  double sq = 0;
  int64_t at = 0;
  for (int id = 0; id < g->n_tensors; id++) {
    const dlrt_tensor_t *w = g->tensors[id];
    if (w->kind != DLRT__TENSOR_PARAM || !w->grad) continue;
    tp_piece piece;
    int split = w->ndim <= 2 && dlrt__tp_piece_of(w->name, &tp->gpt, &p->shard, w->ndim, &piece);
    if (split || first)
      for (int64_t k = 0; k < w->numel; k++) sq += (double)p->grads[at + k] * p->grads[at + k];
    at += w->numel;
  }
  return sq;
}

static int all_finite(const float *v, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    if (!isfinite(v[k])) return 0;
  return 1;
}

/* Whether parameter `id` of a peer counts in the global norm: a piece of
 * its shard, or (on the first peer only) a tensor every peer holds whole. */
typedef struct {
  const dlrt__tp *tp;
  const tp_peer *p;
  int first;
} norm_share;

static int counts_in_norm(void *user, int id) {
  const norm_share *ns = user;
  const dlrt_tensor_t *w = ns->p->g->tensors[id];
  tp_piece piece;
  return ns->first ||
         (w->ndim <= 2 && dlrt__tp_piece_of(w->name, &ns->tp->gpt, &ns->p->shard, w->ndim, &piece));
}

/* Peer p's share of the squared global norm over the range of its ZeRO
 * layout this replica holds reduced (stages 2 and 3), with peer_squares'
 * rule for the tensors every peer holds whole. */
static double range_squares(const dlrt__tp *tp, const tp_peer *p, int first) {
  norm_share ns = {tp, p, first};
  double sq;
  dlrt__zero_peer_range_check(p->zero, p->grads, counts_in_norm, &ns, &sq, NULL);
  return sq;
}

/* Where a peer's reduced gradients are current: all of them, or (ZeRO
 * stages 2 and 3) this replica's range. */
static void reduced_range(const dlrt__tp *tp, const tp_peer *p, int64_t *from, int64_t *to) {
  *from = 0, *to = p->n_grads;
  if (p->zero && tp->zero_stage >= 2) {
    int n;
    const int *ids;
    const int64_t *at;
    dlrt__zero_peer_layout(p->zero, &n, &ids, &at, from, to);
  }
}

/* Under ZeRO: each peer's replica updates its range and the parameters are
 * all-gathered over the replicas, as dlrt_exec_apply_gradients would have
 * updated them whole (the same scale: the mean of its gradient runs, the
 * loss scale divided out; clipping is in the gradients already); or, where
 * the group overflowed, every peer skips the update and backs off its
 * scale. */
static int zero_apply(dlrt__tp *tp, int overflow) {
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
    rc = dlrt__zero_peer_apply(tp->peers[i].zero, tp->peers[i].e, tp->peers[i].grads, 1.0f,
                               !overflow);
  return rc;
}

/* The peers' update after the last micro-batch's gradient run, made with
 * the host's help (HOST_UPDATE): each peer's gradient sum read, averaged
 * over the data-parallel replicas (ZeRO stages 2 and 3: each range reduced
 * to its owner only); with loss scaling, one verdict on overflow for the
 * group (a peer whose own gradients are finite takes a NaN, so its
 * executor skips the update and backs off the scale as the others do);
 * with clipping, one factor from the norm over the whole model (the mean
 * of the `runs` micro-batches, the loss scale divided out, as
 * dlrt_exec_apply_gradients would clip one device's); written back and
 * applied by every peer, or under ZeRO by each replica to its range. */
static int host_update(dlrt_trainer_t *t) {
  dlrt__tp *tp = t->tp;
  int rc = DLRT_OK, scatter = tp->zero_stage >= 2;
  float *values[DLRT_TP_MAX];
  int64_t counts[DLRT_TP_MAX];
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    values[i] = p->grads, counts[i] = p->n_grads;
    if (!scatter) rc = dlrt_exec_gradients_read(p->e, p->grads, p->n_grads); /* else summed */
  }
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  if (rc == DLRT_OK && dlrt__across_processes(t)) {
    float inv = 1.0f / (float)world;
    for (int i = 0; i < tp->n; i++)
      for (int64_t k = 0; k < counts[i]; k++) values[i][k] *= inv;
    if (scatter) {
      for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
        rc = dlrt__zero_peer_reduce_scatter(tp->peers[i].zero, values[i], -1);
    } else {
      rc = dlrt__tp_replicas_sum(t, values, counts, tp->n);
    }
  }
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(tp->peers[0].e, &scale);
  float overflow = 0;
  if (rc == DLRT_OK && scale.scaler.enabled) {
    for (int i = 0; i < tp->n; i++) {
      int64_t from, to;
      reduced_range(tp, &tp->peers[i], &from, &to);
      overflow += !all_finite(values[i] + from, to - from);
    }
    if (scatter) { /* each replica saw its own range */
      float *v = &overflow;
      int64_t one = 1;
      rc = dlrt__tp_replicas_sum(t, &v, &one, 1);
    }
    if (rc == DLRT_OK) rc = group_combine(tp, &overflow, DLRT_COLLECTIVE_MAX);
    for (int i = 0; i < tp->n && overflow > 0 && !tp->zero_stage; i++)
      if (counts[i] > 0 && all_finite(values[i], counts[i])) values[i][0] = NAN;
  }
  if (rc == DLRT_OK && t->cfg.clip_norm > 0 && overflow == 0) {
    double sq = 0;
    for (int i = 0; i < tp->n; i++) {
      int first = (tp->ranks ? tp->rank : i) == 0;
      sq += scatter ? range_squares(tp, &tp->peers[i], first)
                    : peer_squares(tp, &tp->peers[i], first);
    }
    float total = (float)sq;
    if (scatter) { /* each replica's ranges, then the shards */
      float *v = &total;
      int64_t one = 1;
      rc = dlrt__tp_replicas_sum(t, &v, &one, 1);
    }
    if (rc == DLRT_OK) rc = group_combine(tp, &total, DLRT_COLLECTIVE_SUM);
    double prescale = 1.0 / ((double)tp->micro * (scale.scaler.enabled ? scale.scale : 1.0));
    double norm = sqrt((double)total) * prescale, coef = t->cfg.clip_norm / (norm + 1e-6);
    for (int i = 0; i < tp->n && rc == DLRT_OK && coef < 1.0; i++)
      for (int64_t k = 0; k < counts[i]; k++) values[i][k] *= (float)coef;
  }
  if (rc == DLRT_OK && tp->zero_stage) return zero_apply(tp, overflow > 0);
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
    rc = dlrt_exec_gradients_write(tp->peers[i].e, values[i], counts[i]);
  return rc;
}

/* ZeRO stages 2 and 3: the peers' gradients of the micro-batch just run,
 * from their buckets on the host into each peer's sum (zero.c). */
static int bucket_sums(dlrt__tp *tp) {
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
    rc = dlrt__zero_peer_gradients_add(tp->peers[i].zero, tp->peers[i].grads);
  return rc;
}

int dlrt__tp_step(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets, float lr,
                  float *loss) {
  dlrt__tp *tp = t->tp;
  dlrt_run_mode mode = tp->update ? DLRT_RUN_GRADIENTS : DLRT_RUN_TRAIN;
  int rc = dlrt__tp_run(t, tokens, targets, mode, lr, loss);
  if (rc < 0 || !tp->update) return rc;
  if (tp->zero_stage >= 2 && (rc = bucket_sums(tp)) < 0) return rc;
  /* The batch's loss over the replicas. */
  if (dlrt__across_processes(t)) {
    float *v = loss;
    int64_t one = 1;
    *loss /= (float)(t->cfg.world > 1 ? t->cfg.world : 1);
    if ((rc = dlrt__tp_replicas_sum(t, &v, &one, 1)) < 0) return rc;
  }
  if (++tp->micro < t->accum) return DLRT_OK;
  if (tp->update == HOST_UPDATE) rc = host_update(t);
  tp->micro = 0;
  for (int i = 0; i < tp->n && rc == DLRT_OK && !tp->zero_stage; i++)
    rc = dlrt_exec_apply_gradients(tp->peers[i].e);
  if (rc < 0) return rc;
  /* The trainer's executor shows the peers' loss scale and step. */
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(tp->peers[0].e, &scale);
  dlrt__exec_restore_loss_scale(t->e, &scale);
  t->e->steps = tp->peers[0].e->steps;
  return DLRT_OK;
}

/* ------------------------------------------------------------ ZeRO over the replicas */

int dlrt__tp_set_zero(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across) {
  dlrt__tp *tp = t->tp;
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  if (tp->zero_stage)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: the split model's replicas "
                           "are sharded already (once per trainer)");
  if (!dlrt__zero_across_ready(t, across))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO shards a split model's model states "
                           "over its data-parallel replicas across processes: run N x R ranks "
                           "with --tensor-parallel N (R > 1 replicas; config.world %d), set "
                           "the replicas' all-reduce (dlrt_trainer_set_allreduce_async) first "
                           "and give the data ranks' reduce, broadcast and wait", world);
  if (tp->micro > 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: %d micro-batches of an "
                           "update are under way", tp->micro);
  if (tp->memory || tp->device_accum)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "ZeRO goes without the split model's memory "
                           "options (--mem-limit, --offload) in this version: its update goes "
                           "through the host, where a spilling peer does not hand its "
                           "gradients");
  dlrt__zero_peer_spec peers[DLRT_TP_MAX];
  for (int i = 0; i < tp->n; i++)
    peers[i] = (dlrt__zero_peer_spec){tp->peers[i].e, tp->peers[i].dev, &tp->peers[i].zero};
  int rc = dlrt__zero_peers_create(t, stage, across, peers, tp->n, "the split model's executors");
  if (rc < 0) return rc;
  tp->zero_stage = stage;
  tp->update = HOST_UPDATE;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) rc = dlrt__tp_host_gradients(&tp->peers[i]);
  return rc;
}

int dlrt__tp_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out) {
  dlrt__tp *tp = t->tp;
  out->stage = tp->zero_stage;
  out->replicas = dlrt__across_processes(t) && t->cfg.world > 1 ? t->cfg.world : 1;
  /* The largest peer's, what it holds and what its shard holds unsharded. */
  uint64_t best = 0;
  for (int i = 0; i < tp->n; i++) {
    dlrt_zero_info peer = {0};
    dlrt__zero_peer_figures(tp->peers[i].e, tp->peers[i].zero, &peer);
    uint64_t held = peer.param_bytes + peer.grad_bytes + peer.optimizer_bytes;
    if (i == 0 || held > best) {
      best = held;
      out->param_bytes = peer.param_bytes, out->grad_bytes = peer.grad_bytes;
      out->optimizer_bytes = peer.optimizer_bytes;
      out->full_param_bytes = peer.full_param_bytes, out->full_grad_bytes = peer.full_grad_bytes;
      out->full_optimizer_bytes = peer.full_optimizer_bytes;
    }
  }
  return DLRT_OK;
}

int dlrt__tp_sync(dlrt_trainer_t *t) {
  int rc = DLRT_OK;
  for (int i = 0; i < t->tp->n && rc == DLRT_OK; i++)
    if (t->tp->peers[i].zero) rc = dlrt__zero_peer_sync(t->tp->peers[i].zero);
  return rc;
}
