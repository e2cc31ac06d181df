/* zero.c — ZeRO sharding of data-parallel replicas' model states
 * (dlrt_trainer_set_zero): stage 1 the optimizer state, 2 the gradients
 * too, 3 the parameters too. The replicas are the executors of
 * dlrt_trainer_set_devices in one process, or this process's executor of a
 * job across processes.
 *
 * The partition: the parameters with gradients end to end in gradient-bucket
 * order (the host vectors of parallel.c are in it already) form one flat
 * vector of `total` fp32 elements, cut into one range per owner with equal
 * element counts (each cut moved to a 64-element boundary within its
 * parameter, so every range's offsets stay 256-byte aligned). Flat ranges,
 * not whole tensors: a model's largest tensor is often more than half of it
 * (the mlp's first layer is 60% of its parameters), so whole tensors could
 * not shard two ways evenly; the update kernels are elementwise, so a range
 * of a tensor updates as the tensor would, element for element. A range is
 * held as pieces, one per parameter it touches.
 *
 * Everything between replicas goes through pinned host memory (devices of
 * different vendors have no other path): `params` holds every parameter,
 * written by the owners after each update and, across processes,
 * all-gathered (a broadcast from each owner); stage 3's devices gather a
 * parameter from it before each pass that uses it.
 *
 * zero_peer.c shards one executor among several a rank holds (a split
 * model's peer, a pipeline's stage) with the same pieces
 * (zero_internal.h). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/train.h"
#include "train/zero_internal.h"
#include "util/status.h"

int dlrt__zero_oom(void) { return dlrt__set_error(DLRT_ERR_OOM, "out of host memory"); }

static void pieces_free(zero_member *m) {
  for (int i = 0; i < m->n_pieces; i++) {
    zero_piece *p = &m->pieces[i];
    dlrt_buffer_free(p->state0), dlrt_buffer_free(p->state1);
    dlrt_buffer_free(p->grad), dlrt_buffer_free(p->param);
  }
  free(m->pieces);
  m->pieces = NULL;
  m->n_pieces = 0;
}

void dlrt__zero_destroy(struct dlrt__zero *z) {
  if (!z) return;
  for (int i = 0; i < z->n_members; i++) {
    if (z->members[i].e) dlrt_stream_synchronize(dlrt_exec_stream(z->members[i].e));
    pieces_free(&z->members[i]);
  }
  free(z->members);
  free(z->ids), free(z->at), free(z->numel), free(z->at_of), free(z->state_of);
  free(z->param_of), free(z->cut), free(z->requests);
  if (z->params) dlrt_host_free(z->params);
  free(z->state[0]), free(z->state[1]);
  free(z);
}

void dlrt__zero_free(dlrt_trainer_t *t) {
  dlrt__zero_destroy(t->zero);
  t->zero = NULL;
}

/* Stage 3's gather: the whole parameter from the host copy, on the
 * executor's stream (pinned: asynchronous; `params` changes only after
 * every stream has been waited for). */
int dlrt__zero_fetch_param(void *user, dlrt_exec_t *e, int id, dlrt_buffer_t *buf,
                       dlrt_stream_t *stream) {
  struct dlrt__zero *z = user;
  const dlrt_tensor_t *p = dlrt__exec_graph(e)->tensors[id];
  if (id >= z->n_tensors || z->at_of[id] < 0)
    return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: parameter %s is not laid out", p->name);
  return dlrt_copy_h2d(buf, 0, z->params + z->at_of[id], (size_t)p->numel * sizeof(float),
                       stream);
}

/* The layout of executor e's parameters (their tensor ids and flat
 * offsets in the gradient vector, n of them) and the owners' cuts; the
 * optimizer state of each parameter as e's update nodes name it. */
int dlrt__zero_lay_out_params(struct dlrt__zero *z, const dlrt_exec_t *e, int n, const int *ids,
                          const int64_t *at) {
  const dlrt_graph_t *g = dlrt__exec_graph(e);
  if (n == 0)
    return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: the replicas stream no gradient buckets");
  z->n_params = n;
  z->n_tensors = g->n_tensors;
  z->ids = malloc((size_t)n * sizeof *z->ids);
  z->at = malloc((size_t)n * sizeof *z->at);
  z->numel = malloc((size_t)n * sizeof *z->numel);
  z->at_of = malloc((size_t)g->n_tensors * sizeof *z->at_of);
  z->state_of = calloc((size_t)g->n_tensors, sizeof *z->state_of);
  z->param_of = calloc((size_t)g->n_tensors, sizeof *z->param_of);
  z->cut = calloc((size_t)z->owners + 1, sizeof *z->cut);
  if (!z->ids || !z->at || !z->numel || !z->at_of || !z->state_of || !z->param_of || !z->cut)
    return dlrt__zero_oom();
  for (int i = 0; i < g->n_tensors; i++) z->at_of[i] = -1;
  z->total = 0;
  for (int j = 0; j < n; j++) {
    const dlrt_tensor_t *p = g->tensors[ids[j]];
    if (p->dtype != DLRT_F32 || p->cnhw)
      return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: parameter %s is not plain fp32", p->name);
    z->ids[j] = ids[j];
    z->at[j] = at[j];
    z->numel[j] = p->numel;
    z->at_of[ids[j]] = at[j];
    if (at[j] + p->numel > z->total) z->total = at[j] + p->numel;
    int s0, s1;
    dlrt__exec_optimizer_state(e, ids[j], &s0, &s1);
    if (s0 >= 0) z->state_of[s0] = 1, z->param_of[s0] = ids[j];
    if (s1 >= 0) z->state_of[s1] = 2, z->param_of[s1] = ids[j];
  }
  /* Even cuts, each moved to a ZERO_ALIGN boundary of the parameter it
   * falls in. */
  z->cut[z->owners] = z->total;
  for (int r = 1; r < z->owners; r++) {
    int64_t c = z->total * r / z->owners;
    for (int j = 0; j < n; j++)
      if (c >= z->at[j] && c < z->at[j] + z->numel[j]) {
        int64_t in = (c - z->at[j] + ZERO_ALIGN / 2) / ZERO_ALIGN * ZERO_ALIGN;
        c = z->at[j] + (in < z->numel[j] ? in : z->numel[j]);
        break;
      }
    z->cut[r] = c > z->cut[r - 1] ? c : z->cut[r - 1];
  }
  return DLRT_OK;
}

/* The layout from the first member's gradient buckets; every member and
 * the main executor must have the same tensors. */
static int lay_out(dlrt_trainer_t *t, struct dlrt__zero *z) {
  int n;
  const int *ids;
  const int64_t *at;
  dlrt_exec_t *first = z->members[0].e;
  dlrt__exec_bucket_params(first, &n, &ids, &at);
  const dlrt_graph_t *g = dlrt__exec_graph(first), *main = dlrt__exec_graph(t->e);
  for (int i = 1; i < z->n_members; i++) {
    int n2;
    const int *ids2;
    const int64_t *at2;
    dlrt__exec_bucket_params(z->members[i].e, &n2, &ids2, &at2);
    if (n2 != n || memcmp(ids, ids2, (size_t)n * sizeof *ids) != 0 ||
        memcmp(at, at2, (size_t)n * sizeof *at) != 0)
      return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: replica %d orders its gradients "
                             "differently from replica 0", i);
  }
  for (int j = 0; j < n; j++) {
    const dlrt_tensor_t *p = g->tensors[ids[j]];
    if (main->n_tensors != g->n_tensors || strcmp(main->tensors[ids[j]]->name, p->name) != 0 ||
        main->tensors[ids[j]]->numel != p->numel)
      return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: parameter %s differs between the "
                             "replicas and the main executor", p->name);
  }
  return dlrt__zero_lay_out_params(z, t->e, n, ids, at);
}

/* The host copies: every parameter (from executor `params_from`), and the
 * whole optimizer state (from `state_from`: the main executor, fresh or as
 * loaded), pinned for `dev`. */
int dlrt__zero_host_copies(struct dlrt__zero *z, dlrt_device_t *dev, dlrt_exec_t *params_from,
                       dlrt_exec_t *state_from, int sgd) {
  size_t bytes = (size_t)(z->total ? z->total : 1) * sizeof(float);
  int rc = dlrt_host_alloc(dev, bytes, (void **)&z->params);
  if (rc < 0) return rc;
  z->n_state = sgd ? 1 : 2;
  for (int s = 0; s < z->n_state; s++)
    if (!(z->state[s] = calloc(1, bytes))) return dlrt__zero_oom();
  dlrt_graph_t *g = dlrt__exec_graph(state_from), *gp = dlrt__exec_graph(params_from);
  for (int j = 0; j < z->n_params && rc == DLRT_OK; j++) {
    size_t b = (size_t)z->numel[j] * sizeof(float);
    rc = dlrt_exec_read(params_from, gp->tensors[z->ids[j]], z->params + z->at[j], b);
    int st[2];
    dlrt__exec_optimizer_state(state_from, z->ids[j], &st[0], &st[1]);
    for (int s = 0; s < z->n_state && rc == DLRT_OK; s++)
      if (st[s] >= 0)
        rc = dlrt_exec_read(state_from, g->tensors[st[s]], z->state[s] + z->at[j], b);
  }
  z->state_valid = rc == DLRT_OK;
  return rc;
}

static int buffer_from(dlrt_device_t *dev, dlrt_stream_t *stream, const float *host,
                       int64_t count, dlrt_buffer_t **out) {
  int rc = dlrt_buffer_alloc(dev, (size_t)count * sizeof(float), stream, out);
  return rc < 0 ? rc : dlrt_copy_h2d(*out, 0, host, (size_t)count * sizeof(float), stream);
}

/* A member's pieces of its range, with their state (and gradient and
 * parameter buffers) on its device. */
int dlrt__zero_make_pieces(struct dlrt__zero *z, zero_member *m) {
  int64_t from = z->cut[m->rank], to = z->cut[m->rank + 1];
  if (!(m->pieces = calloc((size_t)z->n_params + 1, sizeof *m->pieces))) return dlrt__zero_oom();
  dlrt_stream_t *stream = dlrt_exec_stream(m->e);
  int rc = DLRT_OK;
  for (int j = 0; j < z->n_params && rc == DLRT_OK; j++) {
    int64_t lo = z->at[j] > from ? z->at[j] : from;
    int64_t hi = z->at[j] + z->numel[j] < to ? z->at[j] + z->numel[j] : to;
    if (lo >= hi) continue;
    zero_piece *p = &m->pieces[m->n_pieces++];
    *p = (zero_piece){.id = z->ids[j], .flat = lo, .off = lo - z->at[j], .count = hi - lo};
    rc = buffer_from(m->dev, stream, z->state[0] + lo, p->count, &p->state0);
    if (rc == DLRT_OK && z->n_state > 1)
      rc = buffer_from(m->dev, stream, z->state[1] + lo, p->count, &p->state1);
    if (rc == DLRT_OK && z->stage >= 2)
      rc = dlrt_buffer_alloc(m->dev, (size_t)p->count * sizeof(float), stream, &p->grad);
    if (rc == DLRT_OK && z->stage == 3)
      rc = buffer_from(m->dev, stream, z->params + lo, p->count, &p->param);
  }
  return rc == DLRT_OK ? dlrt_stream_synchronize(stream) : rc;
}

static int loss_scaling_on(const dlrt_trainer_config *c) {
  return !(c->loss_scaler.enabled < 0 || (c->precision != DLRT_F16 && c->loss_scaler.enabled <= 0));
}

int dlrt_trainer_set_zero(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across) {
  DLRT__CHECK_ARG(t && stage >= 0 && stage <= 3, "dlrt_trainer_set_zero: trainer is NULL or "
                  "stage %d (give 0 to 3)", stage);
  if (t->zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: the trainer is sharded "
                           "already (once per trainer)");
  if (stage == 0) return DLRT_OK;
  /* A split model: each peer's model states sharded over its replicas; a
   * pipeline: each stage's over the ranks. */
  if (t->tp) return dlrt__tp_set_zero(t, stage, across);
  if (t->n_stages) return dlrt__pipeline_set_zero(t, stage, across);
  if (t->spilling || t->rep_spill.device_budget)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "ZeRO over plain data-parallel replicas goes "
                           "without spilling (--mem-limit) in this version");
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  if (across) {
    DLRT__CHECK_ARG(across->reduce && across->broadcast && across->wait,
                    "dlrt_trainer_set_zero: the reduce, broadcast or wait of the collectives "
                    "is NULL");
    if (!t->allreduce_start || t->reduce_on_device || t->n_reps || world < 2)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO across processes needs %d > 1 "
                             "processes (config.world), dlrt_trainer_set_allreduce_async "
                             "first (not the device-pointer form) and no --devices", world);
  } else if (t->n_reps < 2) {
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO shards the model states of "
                           "data-parallel replicas: give two devices or more (--devices; "
                           "dlrt_trainer_set_devices first), or run across processes "
                           "(mpirun)");
  }
  if (loss_scaling_on(&t->cfg))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO goes without loss scaling (fp16) in "
                           "this version: use --precision bf16, or fp32");
  /* The host combines the replicas' gradients (the NCCL all-reduce would
   * give every replica every gradient). */
  int rc = DLRT_OK;
  if (t->device_reduce) {
    t->device_reduce = 0;
    for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++)
      rc = dlrt__exec_stream_gradients(t->reps[i].e, DLRT_GRADIENT_BUCKET);
    if (rc < 0) return rc;
  }
  struct dlrt__zero *z = calloc(1, sizeof *z);
  if (!z) return dlrt__zero_oom();
  t->zero = z;
  z->stage = stage;
  z->across = across != NULL;
  if (across) z->coll = *across;
  z->owners = across ? world : t->n_reps;
  z->n_members = across ? 1 : t->n_reps;
  z->members = calloc((size_t)z->n_members, sizeof *z->members);
  z->requests = calloc((size_t)z->owners + 1, sizeof *z->requests);
  if (!z->members || !z->requests) rc = dlrt__zero_oom();
  for (int i = 0; rc == DLRT_OK && i < z->n_members; i++) {
    zero_member *m = &z->members[i];
    m->e = across ? t->e : t->reps[i].e;
    m->dev = across ? t->dev : t->reps[i].dev;
    m->rank = across ? t->cfg.rank : i;
  }
  /* Across processes a bucket is reduced to each owner it touches. */
  if (rc == DLRT_OK && across) {
    free(t->requests);
    size_t slots = (size_t)(dlrt__exec_bucket_count(t->e) + 1) * (size_t)world + 1;
    if (!(t->requests = calloc(slots, sizeof *t->requests))) rc = dlrt__zero_oom();
  }
  if (rc == DLRT_OK) rc = lay_out(t, z);
  if (rc == DLRT_OK)
    rc = dlrt__zero_host_copies(z, t->dev, z->members[0].e, t->e, t->cfg.opt.kind == DLRT_OPT_SGD);
  /* The executors let go of what the shards will hold (the replicas, and
   * in one process the main executor for evaluation and checkpoints), and
   * only then are the shards made from the host copies: no device holds
   * both at once. */
  for (int i = 0; rc == DLRT_OK && i < z->n_members; i++)
    rc = dlrt__exec_set_shard(z->members[i].e, stage, dlrt__zero_fetch_param, z);
  if (rc == DLRT_OK && !across) rc = dlrt__exec_set_shard(t->e, stage, dlrt__zero_fetch_param, z);
  for (int i = 0; rc == DLRT_OK && i < z->n_members; i++)
    rc = dlrt__zero_make_pieces(z, &z->members[i]);
  if (rc < 0) dlrt__zero_free(t);
  return rc;
}

int dlrt__zero_rebuild_begin(dlrt_trainer_t *t, dlrt_host_tensor **state, int *n) {
  struct dlrt__zero *z = t->zero;
  int rc = dlrt__trainer_export(t, 1, state, n);
  for (int i = 0; i < z->n_members; i++) {
    dlrt_stream_synchronize(dlrt_exec_stream(z->members[i].e));
    pieces_free(&z->members[i]); /* made again from the host copies */
  }
  return rc;
}

int dlrt__zero_rebuild_end(dlrt_trainer_t *t) {
  struct dlrt__zero *z = t->zero;
  int rc = DLRT_OK;
  for (int i = 0; i < z->n_members && rc == DLRT_OK; i++) {
    zero_member *m = &z->members[i];
    m->e = t->reps[i].e;
    int n;
    const int *ids;
    const int64_t *at;
    dlrt__exec_bucket_params(m->e, &n, &ids, &at);
    if (n != z->n_params || memcmp(ids, z->ids, (size_t)n * sizeof *ids) != 0 ||
        memcmp(at, z->at, (size_t)n * sizeof *at) != 0)
      return dlrt__set_error(DLRT_ERR_STATE, "ZeRO: replica %d, rebuilt for its new rows, "
                             "orders its gradients differently", i);
    if (!dlrt__exec_shard_stage(m->e))
      rc = dlrt__exec_set_shard(m->e, z->stage, dlrt__zero_fetch_param, z);
    if (rc == DLRT_OK) rc = dlrt__zero_make_pieces(z, m);
  }
  return rc;
}

/* The clipping factor from the global norm of the mean gradients: each
 * owner's range squared and summed (in double, on the host), summed over
 * the processes, as torch.nn.utils.clip_grad_norm_: max / (norm + 1e-6). */
static int clip_scale(dlrt_trainer_t *t, const float *grads, float *scale) {
  struct dlrt__zero *z = t->zero;
  *scale = 1.0f;
  if (!(t->cfg.clip_norm > 0)) return DLRT_OK;
  double sq = 0;
  for (int i = 0; i < z->n_members; i++) {
    const zero_member *m = &z->members[i];
    for (int64_t k = z->cut[m->rank]; k < z->cut[m->rank + 1]; k++)
      sq += (double)grads[k] * grads[k];
  }
  if (z->across) {
    float v = (float)sq;
    void *req = NULL;
    int rc = t->allreduce_start(t->allreduce_user, &v, 1, &req);
    if (rc == DLRT_OK) rc = t->allreduce_wait(t->allreduce_user, req);
    if (rc < 0) return rc;
    sq = v;
  }
  double coef = t->cfg.clip_norm / (sqrt(sq) + 1e-6);
  if (coef < 1.0) *scale = (float)coef;
  return DLRT_OK;
}

/* Each owner's range of `values` to every process. */
int dlrt__zero_all_gather(struct dlrt__zero *z, float *values) {
  int started = 0, rc = DLRT_OK;
  for (int r = 0; r < z->owners && rc == DLRT_OK; r++)
    if ((rc = z->coll.broadcast(z->coll.user, values + z->cut[r], z->cut[r + 1] - z->cut[r], r,
                                &z->requests[r])) == DLRT_OK)
      started++;
  for (int r = 0; r < started; r++) {
    int rc2 = z->coll.wait(z->coll.user, z->requests[r]);
    if (rc == DLRT_OK) rc = rc2;
  }
  return rc;
}

/* Each member's update of its range from the mean gradients `grads` (times
 * `scale`), the updated values into the host copy; the streams waited for. */
int dlrt__zero_update_ranges(struct dlrt__zero *z, const float *grads, float scale) {
  int rc = DLRT_OK;
  z->state_valid = 0;
  for (int i = 0; i < z->n_members && rc == DLRT_OK; i++) {
    zero_member *m = &z->members[i];
    dlrt_stream_t *stream = dlrt_exec_stream(m->e);
    /* Stage 1: every replica gets every mean gradient (the all-reduce's
     * result), as in plain data parallel; its update reads its range (none
     * given: the executor's sums hold them already, a pipeline stage's). */
    if (z->stage == 1 && grads)
      rc = z->tensor_order ? dlrt_exec_gradients_write(m->e, grads, z->total)
                           : dlrt__exec_gradients_write_buckets(m->e, grads);
    for (int k = 0; k < m->n_pieces && rc == DLRT_OK; k++) {
      const zero_piece *p = &m->pieces[k];
      size_t bytes = (size_t)p->count * sizeof(float), at = (size_t)p->off * sizeof(float);
      dlrt__update_operands ops = {.state0 = p->state0, .state1 = p->state1};
      if (z->stage == 1) {
        ops.grad = dlrt__exec_grad_sum(m->e, p->id), ops.grad_offset = at;
      } else {
        ops.grad = p->grad;
        rc = dlrt_copy_h2d(p->grad, 0, grads + p->flat, bytes, stream);
      }
      if (z->stage == 3) ops.param = p->param;
      else ops.param = dlrt__exec_tensor_buffer(m->e, p->id), ops.param_offset = at;
      if (rc == DLRT_OK) rc = dlrt__exec_update_range(m->e, p->id, &ops, p->count, scale);
      if (rc == DLRT_OK)
        rc = dlrt_copy_d2h(z->params + p->flat, ops.param, ops.param_offset, bytes, stream);
    }
    dlrt__exec_count_update(m->e);
  }
  for (int i = 0; i < z->n_members && rc == DLRT_OK; i++)
    rc = dlrt_stream_synchronize(dlrt_exec_stream(z->members[i].e));
  return rc;
}

/* Stages 1 and 2: every member takes every updated parameter from the host
 * copy. */
int dlrt__zero_take_params(struct dlrt__zero *z) {
  int rc = DLRT_OK;
  for (int i = 0; i < z->n_members && rc == DLRT_OK; i++) {
    zero_member *m = &z->members[i];
    dlrt_stream_t *stream = dlrt_exec_stream(m->e);
    for (int j = 0; j < z->n_params && rc == DLRT_OK; j++)
      rc = dlrt_copy_h2d(dlrt__exec_tensor_buffer(m->e, z->ids[j]), 0, z->params + z->at[j],
                         (size_t)z->numel[j] * sizeof(float), stream);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(stream);
  }
  return rc;
}

int dlrt__zero_update(dlrt_trainer_t *t, const float *grads) {
  struct dlrt__zero *z = t->zero;
  float scale;
  int rc = clip_scale(t, grads, &scale);
  if (rc == DLRT_OK) rc = dlrt__zero_update_ranges(z, grads, scale);
  if (rc < 0) return rc;
  if (!z->across) dlrt__exec_count_update(t->e); /* the main executor's step, for checkpoints */
  if (z->across && (rc = dlrt__zero_all_gather(z, z->params)) < 0) return rc;
  if (z->stage == 3) return DLRT_OK; /* gathered from the host copy at each use */
  return dlrt__zero_take_params(z);
}

int dlrt__zero_reduce_bucket(dlrt_trainer_t *t, float *host, int64_t from, int64_t count,
                             void **requests, int *started) {
  struct dlrt__zero *z = t->zero;
  int rc = DLRT_OK;
  for (int r = 0; r < z->owners && rc == DLRT_OK; r++) {
    int64_t lo = from > z->cut[r] ? from : z->cut[r];
    int64_t hi = from + count < z->cut[r + 1] ? from + count : z->cut[r + 1];
    if (lo >= hi) continue;
    if ((rc = z->coll.reduce(z->coll.user, host + lo, hi - lo, r, &requests[*started])) == DLRT_OK)
      (*started)++;
  }
  return rc;
}

/* The whole optimizer state into the host copies: each member's pieces,
 * then (across processes) each owner's range to every process. */
int dlrt__zero_gather_state(struct dlrt__zero *z) {
  int rc = DLRT_OK;
  for (int i = 0; i < z->n_members && rc == DLRT_OK; i++) {
    zero_member *m = &z->members[i];
    dlrt_stream_t *stream = dlrt_exec_stream(m->e);
    for (int k = 0; k < m->n_pieces && rc == DLRT_OK; k++) {
      const zero_piece *p = &m->pieces[k];
      size_t bytes = (size_t)p->count * sizeof(float);
      rc = dlrt_copy_d2h(z->state[0] + p->flat, p->state0, 0, bytes, stream);
      if (rc == DLRT_OK && p->state1)
        rc = dlrt_copy_d2h(z->state[1] + p->flat, p->state1, 0, bytes, stream);
    }
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(stream);
  }
  for (int s = 0; z->across && s < z->n_state && rc == DLRT_OK; s++)
    rc = dlrt__zero_all_gather(z, z->state[s]);
  z->state_valid = rc == DLRT_OK;
  return rc;
}

int dlrt__zero_sync_main(dlrt_trainer_t *t) {
  struct dlrt__zero *z = t->zero;
  int rc = DLRT_OK;
  if (!z->across) {
    /* Batch-norm statistics (buffers, not trained) from the first replica,
     * as plain data parallel takes them; the parameters from the host
     * copy unless the main executor gathers them at each use. */
    dlrt_exec_t *from = t->reps[0].e;
    dlrt_graph_t *gf = dlrt__exec_graph(from), *gm = dlrt__exec_graph(t->e);
    for (int i = 0; i < gf->n_tensors && rc == DLRT_OK; i++) {
      dlrt_tensor_t *x = gf->tensors[i];
      if (!x->buffer || x->kind == DLRT__TENSOR_PARAM) continue;
      size_t bytes = dlrt__tensor_bytes(x);
      float *tmp = malloc(bytes ? bytes : 1);
      if (!tmp) return dlrt__zero_oom();
      rc = dlrt_exec_read(from, x, tmp, bytes);
      if (rc == DLRT_OK) rc = dlrt_exec_write(t->e, gm->tensors[i], tmp, bytes);
      free(tmp);
    }
    for (int j = 0; z->stage < 3 && j < z->n_params && rc == DLRT_OK; j++)
      rc = dlrt_exec_write(t->e, gm->tensors[z->ids[j]], z->params + z->at[j],
                           (size_t)z->numel[j] * sizeof(float));
  }
  return rc == DLRT_OK ? dlrt__zero_gather_state(z) : rc;
}

/* What dlrt_exec_export of executor `main` gives, in its order, from z's
 * host copies where the executor holds a shard or nothing; the buffers
 * (batch-norm statistics) from `stats_from` where it has them. */
int dlrt__zero_export_from(struct dlrt__zero *z, dlrt_exec_t *main, dlrt_exec_t *stats_from,
                       int with_state, dlrt_host_tensor **tensors, int *n) {
  if (with_state && !z->state_valid) {
    if (z->across)
      return dlrt__set_error(DLRT_ERR_STATE, "the sharded optimizer state is gathered at the "
                             "end of each epoch (on every process): save after an epoch");
    int rc = dlrt__zero_gather_state(z);
    if (rc < 0) return rc;
  }
  dlrt_graph_t *g = dlrt__exec_graph(main);
  int count = dlrt__export_count(g, with_state);
  dlrt_host_tensor *out = calloc((size_t)(count ? count : 1), sizeof *out);
  if (!out) return dlrt__zero_oom();
  int k = 0, rc = DLRT_OK;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *x = g->tensors[i];
    if (!dlrt__exported(x, with_state)) continue;
    dlrt_host_tensor *h = &out[k++];
    if ((rc = dlrt__host_tensor_like(h, x)) < 0) {
      break;
    } else if (x->kind == DLRT__TENSOR_PARAM && z->at_of[i] >= 0) {
      memcpy(h->data, z->params + z->at_of[i], h->bytes);
    } else if (z->state_of[i]) {
      memcpy(h->data, z->state[z->state_of[i] - 1] + z->at_of[z->param_of[i]], h->bytes);
    } else {
      /* In one process the first replica's statistics are the current ones
       * (the main executor takes them at the end of an epoch). */
      dlrt_exec_t *from = stats_from;
      dlrt_graph_t *gf = dlrt__exec_graph(from);
      if (i >= gf->n_tensors || strcmp(gf->tensors[i]->name, x->name) != 0) from = main;
      rc = dlrt_exec_read(from, dlrt__exec_graph(from)->tensors[i], h->data, h->bytes);
    }
  }
  dlrt_exec_info info;
  if (rc == DLRT_OK && with_state && (rc = dlrt_exec_info_get(main, &info)) == DLRT_OK) {
    dlrt_host_tensor *h = &out[k++];
    snprintf(h->name, sizeof h->name, "optimizer.step");
    h->dtype = DLRT_I32;
    h->ndim = 1;
    h->shape[0] = 1;
    h->bytes = 4;
    int32_t *step = malloc(4);
    if (step) *step = (int32_t)(info.steps < INT32_MAX ? info.steps : INT32_MAX);
    h->data = step;
    if (!step) rc = dlrt__zero_oom();
  }
  if (rc < 0) {
    dlrt_host_tensors_free(out, k);
    return rc;
  }
  *tensors = out;
  *n = k;
  return DLRT_OK;
}

int dlrt__trainer_export(dlrt_trainer_t *t, int with_state, dlrt_host_tensor **tensors, int *n) {
  /* Tensor x pipeline: gathered from the stages' shards (a collective). */
  if (t->ptp) return dlrt__ptp_export(t, with_state, tensors, n);
  struct dlrt__zero *z = t->zero;
  if (!z) return dlrt_exec_export(t->e, with_state, tensors, n);
  /* In one process the first replica's statistics are the current ones. */
  return dlrt__zero_export_from(z, t->e, t->n_reps ? t->reps[0].e : t->e, with_state, tensors, n);
}

/* The model-state bytes executor e holds now, with member m's pieces (m
 * NULL: none). */
void dlrt__zero_held_bytes(const dlrt_exec_t *e, const zero_member *m, uint64_t *params,
                       uint64_t *grads, uint64_t *state) {
  dlrt__exec_held_bytes(e, params, grads, state);
  for (int k = 0; m && k < m->n_pieces; k++) {
    uint64_t bytes = (uint64_t)m->pieces[k].count * sizeof(float);
    *state += bytes * (uint64_t)(m->pieces[k].state1 ? 2 : 1);
    if (m->pieces[k].grad) *grads += bytes;
    if (m->pieces[k].param) *params += bytes;
  }
}

/* An unsharded replica's (of executor e's graph): every parameter, a
 * gradient per trained one (the accumulator the combined gradients go to),
 * and its optimizer state. */
void dlrt__zero_full_bytes(const dlrt_exec_t *e, dlrt_zero_info *out) {
  const dlrt_graph_t *g = dlrt__exec_graph(e);
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *x = g->tensors[i];
    if (x->kind != DLRT__TENSOR_PARAM || x->owner != x) continue;
    out->full_param_bytes += dlrt__tensor_bytes(x);
    if (!x->grad) continue;
    out->full_grad_bytes += dlrt__tensor_bytes(x);
    int s0, s1;
    dlrt__exec_optimizer_state(e, i, &s0, &s1);
    out->full_optimizer_bytes += (uint64_t)((s0 >= 0) + (s1 >= 0)) * dlrt__tensor_bytes(x);
  }
}

int dlrt_trainer_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out) {
  DLRT__CHECK_ARG(t && out, "dlrt_trainer_zero_info: trainer or out is NULL");
  memset(out, 0, sizeof *out);
  /* A split model keeps its bytes in its peers (tensor_parallel.c). */
  if (t->tp) return dlrt__tp_zero_info(t, out);
  if (t->n_stages) return dlrt__pipeline_zero_info(t, out); /* in its stages */
  struct dlrt__zero *z = t->zero;
  int world = t->cfg.world > 1 && dlrt__across_processes(t) ? t->cfg.world : 1;
  out->stage = z ? z->stage : 0;
  out->replicas = t->n_reps ? t->n_reps : world;
  /* The largest replica's holdings: the executor's, and its pieces. */
  int n = t->n_reps ? t->n_reps : 1;
  uint64_t best = 0;
  for (int i = 0; i < n; i++) {
    dlrt_exec_t *e = t->n_reps ? t->reps[i].e : t->e;
    uint64_t p, g, s;
    dlrt__zero_held_bytes(e, z ? &z->members[z->n_members > 1 ? i : 0] : NULL, &p, &g, &s);
    if (p + g + s >= best) {
      best = p + g + s;
      out->param_bytes = p, out->grad_bytes = g, out->optimizer_bytes = s;
    }
  }
  dlrt__zero_full_bytes(t->e, out);
  return DLRT_OK;
}

int dlrt__zero_stage(const dlrt_trainer_t *t) { return t->zero ? t->zero->stage : 0; }
