/* zero_peer.c — ZeRO over the data-parallel ranks of one executor among
 * several a rank holds: a tensor-parallel peer's replicas
 * (tensor_parallel_update.c) and a pipeline stage's (pipeline_zero.c).
 * Each executor has its own dlrt__zero with one member, itself; the ranges,
 * their updates and gathers are zero.c's (zero_internal.h). What both
 * callers share is here once: the creation over the ranks, the
 * reduce-scatter, the bucketed gradients summed on the host, each rank's
 * range's squares and finiteness, the update, the state's gather and the
 * figures. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/zero_internal.h"
#include "util/status.h"

/* ZeRO over the data-parallel replicas of one executor (a tensor-parallel
 * peer, a pipeline stage): the executor is the one member, its owner index
 * the replica's (rank's), and the collectives go over the data
 * communicator (the ranks holding the same shard or stage). Stage 1 lays
 * out the gradient vector of dlrt_exec_gradients_read (tensor order: the
 * executor keeps its accumulators); stages 2 and 3 stream its gradients
 * in buckets, as a process of plain data parallel does, and lay out
 * their order. */
int dlrt__zero_peer_create(dlrt_exec_t *e, dlrt_device_t *dev, int stage, int replica,
                           int replicas, const dlrt_zero_collectives *coll, int sgd,
                           struct dlrt__zero **out) {
  *out = NULL;
  struct dlrt__zero *z = calloc(1, sizeof *z);
  if (!z) return dlrt__zero_oom();
  z->stage = stage, z->across = 1, z->coll = *coll, z->owners = replicas;
  z->tensor_order = stage == 1;
  z->n_members = 1;
  z->members = calloc(1, sizeof *z->members);
  z->requests = calloc((size_t)replicas + 1, sizeof *z->requests);
  int rc = z->members && z->requests ? DLRT_OK : dlrt__zero_oom();
  if (rc == DLRT_OK) z->members[0] = (zero_member){.e = e, .dev = dev, .rank = replica};
  const dlrt_graph_t *g = dlrt__exec_graph(e);
  int n = 0, *ids = NULL;
  int64_t *at = NULL;
  if (rc == DLRT_OK && z->tensor_order) {
    ids = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *ids);
    at = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *at);
    if (!ids || !at) rc = dlrt__zero_oom();
    int64_t off = 0;
    for (int i = 0; rc == DLRT_OK && i < g->n_tensors; i++)
      if (g->tensors[i]->kind == DLRT__TENSOR_PARAM && g->tensors[i]->grad)
        ids[n] = i, at[n++] = off, off += g->tensors[i]->numel;
    if (rc == DLRT_OK) rc = dlrt__zero_lay_out_params(z, e, n, ids, at);
  } else if (rc == DLRT_OK) {
    const int *bids;
    const int64_t *bat;
    rc = dlrt__exec_stream_gradients(e, DLRT_GRADIENT_BUCKET);
    if (rc == DLRT_OK) dlrt__exec_bucket_params(e, &n, &bids, &bat);
    if (rc == DLRT_OK) rc = dlrt__zero_lay_out_params(z, e, n, bids, bat);
  }
  free(ids), free(at);
  if (rc == DLRT_OK) rc = dlrt__zero_host_copies(z, dev, e, e, sgd);
  if (rc == DLRT_OK) rc = dlrt__exec_set_shard(e, stage, dlrt__zero_fetch_param, z);
  if (rc == DLRT_OK) rc = dlrt__zero_make_pieces(z, &z->members[0]);
  if (rc < 0) {
    dlrt__zero_peer_free(z);
    return rc;
  }
  *out = z;
  return DLRT_OK;
}

void dlrt__zero_peer_free(struct dlrt__zero *z) { dlrt__zero_destroy(z); }

int dlrt__zero_peer_apply(struct dlrt__zero *z, dlrt_exec_t *e, const float *grads,
                          float factor, int finite) {
  float mean = e->grads.grad_runs > 1 ? 1.0f / (float)e->grads.grad_runs : 1.0f;
  if (e->grads.scaler.enabled) mean /= e->grads.loss_scale;
  int rc = finite ? dlrt__zero_peer_update(z, grads, mean * factor) : DLRT_OK;
  if (rc == DLRT_OK && e->grads.scaler.enabled) dlrt__exec_update_loss_scale(e, finite);
  e->grads.grad_runs = 0; /* the next update's runs start again */
  return rc;
}

int dlrt__zero_across_ready(const dlrt_trainer_t *t, const dlrt_zero_collectives *across) {
  return across && across->reduce && across->broadcast && across->wait &&
         dlrt__across_processes(t) && t->cfg.world > 1 && t->allreduce_start;
}

int dlrt__zero_peers_create(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across,
                            const dlrt__zero_peer_spec *peers, int n, const char *whose) {
  int rc = DLRT_OK;
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    rc = dlrt__zero_peer_create(peers[i].e, peers[i].dev, stage, t->cfg.rank, t->cfg.world,
                                across, t->cfg.opt.kind == DLRT_OPT_SGD, peers[i].slot);
  if (rc == DLRT_OK) return DLRT_OK;
  for (int i = 0; i < n; i++) { /* half-sharded executors cannot train on */
    dlrt__zero_peer_free(*peers[i].slot);
    *peers[i].slot = NULL;
  }
  return dlrt__set_error(rc, "%s (%s gave up their model states: make the trainer again)",
                         dlrt_last_error(), whose);
}

void dlrt__zero_peer_layout(const struct dlrt__zero *z, int *n, const int **ids,
                            const int64_t **at, int64_t *from, int64_t *to) {
  *n = z->n_params, *ids = z->ids, *at = z->at;
  *from = z->cut[z->members[0].rank], *to = z->cut[z->members[0].rank + 1];
}

int dlrt__zero_peer_reduce_scatter(struct dlrt__zero *z, float *grads, int whole) {
  /* Each owner's range, around the elements of `whole` (the caller reduces
   * them to every rank): up to two reduces an owner. */
  int64_t hole = whole >= 0 && whole < z->n_tensors ? z->at_of[whole] : -1;
  int64_t hole_end = hole >= 0 ? hole + dlrt__exec_graph(z->members[0].e)->tensors[whole]->numel
                               : -1;
  void **requests = z->requests;
  int started = 0, rc = DLRT_OK;
  for (int r = 0; r < z->owners && rc == DLRT_OK; r++) {
    int64_t parts[2][2] = {{z->cut[r], z->cut[r + 1]}, {0, 0}};
    if (hole >= 0 && hole < z->cut[r + 1] && hole_end > z->cut[r]) {
      parts[0][1] = hole > z->cut[r] ? hole : z->cut[r];
      parts[1][0] = hole_end < z->cut[r + 1] ? hole_end : z->cut[r + 1];
      parts[1][1] = z->cut[r + 1];
    }
    for (int k = 0; k < 2 && rc == DLRT_OK; k++)
      if (parts[k][1] > parts[k][0] &&
          (rc = z->coll.reduce(z->coll.user, grads + parts[k][0], parts[k][1] - parts[k][0], r,
                               &requests[started])) == DLRT_OK)
        started++;
  }
  for (int r = 0; r < started; r++) { /* every started request is completed */
    int rc2 = z->coll.wait(z->coll.user, requests[r]);
    if (rc == DLRT_OK) rc = rc2;
  }
  return rc;
}

int dlrt__zero_peer_gradients_add(struct dlrt__zero *z, float *sums) {
  dlrt_exec_t *e = z->members[0].e;
  int nb = dlrt__exec_bucket_count(e), rc = DLRT_OK;
  for (int b = 0; b < nb && rc == DLRT_OK; b++) rc = dlrt__exec_bucket_wait(e, b);
  if (rc < 0) return rc;
  /* The first run since the last update copies, later ones add: the
   * device's accumulators' order (exec_grads.c's dlrt__exec_accumulate). */
  const float *host = dlrt__exec_buckets_host(e);
  if (dlrt__exec_grad_runs(e) <= 1) {
    memcpy(sums, host, (size_t)z->total * sizeof(float));
  } else {
    for (int64_t k = 0; k < z->total; k++) sums[k] = sums[k] + host[k];
  }
  return DLRT_OK;
}

void dlrt__zero_peer_range_check(const struct dlrt__zero *z, const float *grads,
                                 int (*counted)(void *user, int id), void *user,
                                 double *squares, int *finite) {
  int64_t from = z->cut[z->members[0].rank], to = z->cut[z->members[0].rank + 1];
  double sq = 0;
  int ok = 1;
  /* Parameter by parameter, each in element order (the split model's
   * clipping sums its ranges in this order). */
  for (int j = 0; j < z->n_params; j++) {
    int64_t lo = z->at[j] > from ? z->at[j] : from;
    int64_t hi = z->at[j] + z->numel[j] < to ? z->at[j] + z->numel[j] : to;
    if (lo >= hi) continue;
    if (squares && (!counted || counted(user, z->ids[j])))
      for (int64_t k = lo; k < hi; k++) sq += (double)grads[k] * grads[k];
    for (int64_t k = lo; finite && ok && k < hi; k++) ok = isfinite(grads[k]) != 0;
  }
  if (squares) *squares = sq;
  if (finite) *finite = ok;
}

int dlrt__zero_peer_update(struct dlrt__zero *z, const float *grads, float scale) {
  int rc = dlrt__zero_update_ranges(z, grads, scale);
  if (rc == DLRT_OK) rc = dlrt__zero_all_gather(z, z->params);
  if (rc < 0 || z->stage == 3) return rc; /* stage 3: gathered from the host copy at each use */
  return dlrt__zero_take_params(z);
}

int dlrt__zero_peer_sync(struct dlrt__zero *z) { return dlrt__zero_gather_state(z); }

int dlrt__zero_peer_export(struct dlrt__zero *z, dlrt_host_tensor **tensors, int *n) {
  return dlrt__zero_peer_export_as(z, 1, tensors, n);
}

int dlrt__zero_peer_export_as(struct dlrt__zero *z, int with_state, dlrt_host_tensor **tensors,
                              int *n) {
  dlrt_exec_t *e = z->members[0].e;
  return dlrt__zero_export_from(z, e, e, with_state, tensors, n);
}

void dlrt__zero_peer_figures(const dlrt_exec_t *e, const struct dlrt__zero *z,
                             dlrt_zero_info *out) {
  dlrt__zero_held_bytes(e, z ? &z->members[0] : NULL, &out->param_bytes, &out->grad_bytes,
             &out->optimizer_bytes);
  dlrt__zero_full_bytes(e, out);
}
