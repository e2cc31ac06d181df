/* exec_shard.c — what an executor gives up under ZeRO sharding (the trainer
 * above keeps each replica's shard of the model states): its optimizer
 * state (stage 1), its gradient accumulators and each gradient once its
 * bucket is on its way to the host (stage 2), and its parameters between
 * uses (stage 3), brought in by the trainer's fetch before each run of uses
 * in a pass and freed after it; plus the optimizer's update over a range of
 * a parameter's elements, which the shards' owners run. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "device/launch.h"
#include "exec/exec.h"
#include "kernel_table.h"
#include "util/status.h"

static void free_lists(int **lists, int n) {
  if (!lists) return;
  for (int k = 0; k < n; k++) free(lists[k]);
  free(lists);
}

void dlrt__exec_shard_free(dlrt_exec_t *e) {
  if (e->shard.copy) dlrt_stream_synchronize(e->shard.copy);
  for (int m = 0; m < 2; m++) {
    free_lists(e->shard.fetch[m], e->shard.n_pos[m]);
    free_lists(e->shard.release[m], e->shard.n_pos[m]);
    free(e->shard.next_fetch[m]);
  }
  for (int i = 0; e->shard.ready && i < e->g->n_tensors; i++) dlrt_event_destroy(e->shard.ready[i]);
  free(e->shard.ready);
  free(e->shard.prefetched);
  dlrt_event_destroy(e->shard.queued);
  dlrt_stream_destroy(e->shard.copy);
  memset(&e->shard, 0, sizeof e->shard);
}

int dlrt__exec_shard_stage(const dlrt_exec_t *e) { return e->shard.stage; }

/* Whether tensor id is a parameter the executor gives up (stage 3). */
static int streamed(const dlrt_graph_t *g, int id) {
  const dlrt_tensor_t *t = g->tensors[id];
  return t->kind == DLRT__TENSOR_PARAM && t->owner == t && t->grad;
}

/* Appends id to the -1-ended list *l of at most cap entries. */
static void push(int *l, int id) {
  int n = 0;
  while (l[n] >= 0) n++;
  l[n] = id, l[n + 1] = -1;
}

/* For plan m: where each run of a streamed parameter's uses within one
 * phase begins (fetch) and ends (release). Update nodes do not count: the
 * trainer updates the shards. */
static int plan_lists(dlrt_exec_t *e, int m) {
  dlrt_graph_t *g = e->g;
  const dlrt__schedule *s = &e->plan.plans[m];
  int n = s->n;
  int **fetch = calloc((size_t)(n ? n : 1), sizeof *fetch);
  int **release = calloc((size_t)(n ? n : 1), sizeof *release);
  int *last = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *last);
  int *phase = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *phase);
  int *count_f = calloc((size_t)(n ? n : 1), sizeof *count_f);
  int *count_r = calloc((size_t)(n ? n : 1), sizeof *count_r);
  int rc = fetch && release && last && phase && count_f && count_r
               ? DLRT_OK
               : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* Two passes: count each position's entries, then fill them. */
  for (int pass = 0; pass < 2 && rc == DLRT_OK; pass++) {
    for (int i = 0; i < g->n_tensors; i++) last[i] = -1, phase[i] = -1;
    for (int k = 0; k < n; k++) {
      const dlrt__node *nd = g->nodes[s->order[k]];
      if (nd->phase == DLRT__PHASE_UPDATE) continue;
      int ph = nd->phase == DLRT__PHASE_FORWARD ? 0 : 1;
      for (int j = 0; j < nd->n_in; j++) {
        int id = nd->in[j]->owner->id;
        if (!streamed(g, id) || last[id] == k) continue;
        if (phase[id] != ph) { /* a new run of uses: the last one ends */
          if (last[id] >= 0) {
            if (pass == 0) count_r[last[id]]++;
            else push(release[last[id]], id);
          }
          if (pass == 0) count_f[k]++;
          else push(fetch[k], id);
          phase[id] = ph;
        }
        last[id] = k;
      }
    }
    for (int i = 0; i < g->n_tensors; i++) {
      if (last[i] < 0) continue;
      if (pass == 0) count_r[last[i]]++;
      else push(release[last[i]], i);
    }
    for (int k = 0; pass == 0 && k < n && rc == DLRT_OK; k++) {
      fetch[k] = malloc((size_t)(count_f[k] + 1) * sizeof(int));
      release[k] = malloc((size_t)(count_r[k] + 1) * sizeof(int));
      if (!fetch[k] || !release[k]) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      else fetch[k][0] = release[k][0] = -1;
    }
  }
  free(last), free(phase), free(count_f), free(count_r);
  /* Where each position's prefetch goes: the next position with a fetch. */
  int *next = rc == DLRT_OK ? malloc((size_t)(n ? n : 1) * sizeof *next) : NULL;
  if (rc == DLRT_OK && !next) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int k = n - 1, at = -1; next && k >= 0; k--) {
    next[k] = at;
    if (fetch[k][0] >= 0) at = k;
  }
  e->shard.next_fetch[m] = next;
  e->shard.fetch[m] = fetch;
  e->shard.release[m] = release;
  e->shard.n_pos[m] = fetch && release ? n : 0;
  if (!(fetch && release)) free(fetch), free(release);
  return rc;
}

int dlrt__exec_set_shard(dlrt_exec_t *e, int stage, dlrt__param_fetch_fn fetch, void *user) {
  DLRT__CHECK_ARG(e && stage >= 1 && stage <= 3 && (stage < 3 || fetch),
                  "dlrt__exec_set_shard: executor is NULL, stage %d (1 to 3), or stage 3 without "
                  "a fetch", stage);
  dlrt_graph_t *g = e->g;
  if (e->shard.stage)
    return dlrt__set_error(DLRT_ERR_STATE, "the executor's model states are sharded already");
  if (e->spill.pool || !g->optimized)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "ZeRO sharding needs an optimized graph "
                           "and goes without spilling");
  for (int m = 0; m < 2 && stage == 3; m++) {
    const dlrt__schedule *s = &e->plan.plans[m];
    for (int k = 0; s->block_of && k < s->n; k++)
      if (s->block_of[k] >= 0)
        return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "ZeRO stage 3 goes without chunked "
                               "blocks (spilling in slices)");
  }
  /* Stage 1: the optimizer state goes. */
  for (int i = 0; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    if (n->phase != DLRT__PHASE_UPDATE) continue;
    for (int j = 1; j + 1 < n->n_in; j++) {
      int id = n->in[j]->owner->id;
      dlrt_buffer_free(e->bufs[id]);
      e->bufs[id] = NULL;
    }
  }
  /* Stage 2: the accumulators (the trainer keeps its shard's gradient). */
  if (stage >= 2 && e->grads.accum) {
    for (int i = 0; i < g->n_tensors; i++) {
      dlrt_buffer_free(e->grads.accum[i]);
      e->grads.accum[i] = NULL;
    }
    e->grads.accum_bytes = 0;
  }
  e->shard.stage = stage;
  e->shard.fetch_fn = fetch;
  e->shard.fetch_user = user;
  if (stage < 3) return DLRT_OK;
  int rc = DLRT_OK;
  for (int m = 0; m < 2 && rc == DLRT_OK; m++) rc = plan_lists(e, m);
  if (rc == DLRT_OK) rc = dlrt_stream_create(e->dev, &e->shard.copy);
  if (rc == DLRT_OK) rc = dlrt_event_create(e->dev, &e->shard.queued);
  if (rc == DLRT_OK && (!(e->shard.ready = calloc((size_t)g->n_tensors, sizeof(dlrt_event_t *))) ||
                        !(e->shard.prefetched = calloc((size_t)g->n_tensors, 1))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++)
    if (streamed(g, i)) rc = dlrt_event_create(e->dev, &e->shard.ready[i]);
  if (rc < 0) {
    dlrt__exec_shard_free(e);
    return rc;
  }
  /* Stage 3: the parameters go until their first use. */
  for (int i = 0; i < g->n_tensors; i++)
    if (streamed(g, i)) {
      dlrt_buffer_free(e->bufs[i]);
      e->bufs[i] = NULL;
    }
  return DLRT_OK;
}

static int fetch_failed(const dlrt_tensor_t *p, int rc) {
  return dlrt__set_error(rc, "gathering parameter %s: %s", p->name, dlrt_last_error());
}

/* The prefetch of position j's parameters that are not resident now, on
 * the copy stream (see dlrt__exec_shard). Every buffer is allocated
 * before the one event the copies wait for: an allocation may order the
 * compute stream after another stream's last use of its block (another
 * executor's on the same device: --devices cpu,cpu, or a process's
 * tensor-parallel peers), and the copies must come after that too. */
enum { ALLOCATED = 2 }; /* prefetched[id]: its buffer taken, its copy not yet queued */
static int prefetch(dlrt_exec_t *e, int mode, int j) {
  const int *ids = e->shard.fetch[mode][j];
  int rc = DLRT_OK, any = 0;
  for (const int *id = ids; *id >= 0 && rc == DLRT_OK; id++) {
    if (e->bufs[*id]) continue; /* in use until its run ends: fetched at j itself */
    rc = dlrt_buffer_alloc(e->dev, dlrt__tensor_bytes(e->g->tensors[*id]), e->stream,
                           &e->bufs[*id]);
    if (rc == DLRT_OK) e->shard.prefetched[*id] = ALLOCATED, any = 1;
  }
  if (rc == DLRT_OK && any && (rc = dlrt_event_record(e->shard.queued, e->stream)) == DLRT_OK)
    rc = dlrt_stream_wait_event(e->shard.copy, e->shard.queued);
  for (const int *id = ids; *id >= 0; id++) {
    if (e->shard.prefetched[*id] != ALLOCATED) continue;
    e->shard.prefetched[*id] = 0; /* unless queued below: then fetched at j itself */
    if (rc < 0) continue;
    const dlrt_tensor_t *p = e->g->tensors[*id];
    if ((rc = dlrt_buffer_record_stream(e->bufs[*id], e->shard.copy)) < 0 ||
        (rc = e->shard.fetch_fn(e->shard.fetch_user, e, *id, e->bufs[*id], e->shard.copy)) < 0) {
      rc = fetch_failed(p, rc);
      continue;
    }
    if ((rc = dlrt_event_record(e->shard.ready[*id], e->shard.copy)) == DLRT_OK)
      e->shard.prefetched[*id] = 1;
  }
  return rc;
}

int dlrt__exec_shard_before(dlrt_exec_t *e, int mode, int k) {
  if (e->shard.stage < 3 || k >= e->shard.n_pos[mode]) return DLRT_OK;
  int rc = DLRT_OK;
  for (const int *id = e->shard.fetch[mode][k]; *id >= 0 && rc == DLRT_OK; id++) {
    const dlrt_tensor_t *p = e->g->tensors[*id];
    if (e->shard.prefetched[*id]) { /* on its way: the node waits for the copy */
      e->shard.prefetched[*id] = 0;
      rc = dlrt_stream_wait_event(e->stream, e->shard.ready[*id]);
      continue;
    }
    if (!e->bufs[*id] &&
        (rc = dlrt_buffer_alloc(e->dev, dlrt__tensor_bytes(p), e->stream, &e->bufs[*id])) < 0)
      break;
    if ((rc = e->shard.fetch_fn(e->shard.fetch_user, e, *id, e->bufs[*id], e->stream)) < 0)
      return fetch_failed(p, rc);
  }
  /* The next fetch's parameters come in while this node computes. */
  int next = e->shard.next_fetch[mode][k];
  if (rc == DLRT_OK && next >= 0) rc = prefetch(e, mode, next);
  return rc;
}

void dlrt__exec_shard_after(dlrt_exec_t *e, int mode, int k) {
  if (e->shard.stage < 3 || k >= e->shard.n_pos[mode]) return;
  /* Stream-ordered: the buffer is reused only after the node that read it. */
  for (const int *id = e->shard.release[mode][k]; *id >= 0; id++) {
    dlrt_buffer_free(e->bufs[*id]);
    e->bufs[*id] = NULL;
  }
}

int dlrt__exec_update_range(dlrt_exec_t *e, int id, const dlrt__update_operands *ops,
                            int64_t count, float grad_scale) {
  const dlrt_graph_t *g = e->g;
  const dlrt_tensor_t *p = g->tensors[id];
  const dlrt_optimizer *o = &g->opt;
  float decay = p->no_decay ? 0.0f : o->weight_decay;
  dlrt__launcher lb;
  int rc = dlrt__launch_start(&lb, e->stream, "ZeRO shard update");
  if (rc < 0) return rc;
  lb.launch.items = count;
  lb.launch.groups = 0;
  dlrt__launch_buffer_arg(&lb, ops->param, ops->param_offset, sizeof(float));
  dlrt__launch_buffer_arg(&lb, ops->state0, ops->state_offset, sizeof(float));
  if (o->kind == DLRT_OPT_SGD) {
    /* The same arguments as exec_ops.c's SGD node, over the range. */
    lb.launch.kernel = DLRT__K_sgd_update;
    dlrt__launch_buffer_arg(&lb, ops->grad, ops->grad_offset, sizeof(float));
    dlrt__launch_i64(&lb, count), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->momentum), dlrt__launch_f32(&lb, decay);
    dlrt__launch_f32(&lb, grad_scale), dlrt__launch_i64(&lb, o->nesterov);
    dlrt__launch_i64(&lb, e->steps == 0);
  } else {
    float step_size, bias2;
    dlrt__adam_factors(e, &step_size, &bias2);
    lb.launch.kernel = DLRT__K_adam_update;
    dlrt__launch_buffer_arg(&lb, ops->state1, ops->state_offset, sizeof(float));
    dlrt__launch_buffer_arg(&lb, ops->grad, ops->grad_offset, sizeof(float));
    dlrt__launch_i64(&lb, count), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->beta1), dlrt__launch_f32(&lb, o->beta2);
    dlrt__launch_f32(&lb, o->eps), dlrt__launch_f32(&lb, decay);
    dlrt__launch_f32(&lb, step_size), dlrt__launch_f32(&lb, bias2);
    dlrt__launch_f32(&lb, grad_scale), dlrt__launch_i64(&lb, o->kind == DLRT_OPT_ADAMW);
  }
  return dlrt__launch_submit(e->stream, &lb);
}

void dlrt__exec_count_update(dlrt_exec_t *e) {
  e->steps++;
  e->grads.grad_runs = 0;
}

dlrt_buffer_t *dlrt__exec_tensor_buffer(const dlrt_exec_t *e, int id) {
  return e->bufs[e->g->tensors[id]->owner->id];
}

void dlrt__exec_optimizer_state(const dlrt_exec_t *e, int id, int *state0, int *state1) {
  *state0 = *state1 = -1;
  for (int i = 0; i < e->g->n_nodes; i++) {
    const dlrt__node *n = e->g->nodes[i];
    if (n->phase != DLRT__PHASE_UPDATE || n->in[0]->id != id) continue;
    *state0 = n->in[1]->id;
    if (n->n_in == 4) *state1 = n->in[2]->id;
  }
}

void dlrt__exec_bucket_params(const dlrt_exec_t *e, int *n, const int **ids, const int64_t **at) {
  *n = e->grads.buckets.n;
  *ids = e->grads.buckets.param;
  *at = e->grads.buckets.at;
}

void dlrt__exec_held_bytes(const dlrt_exec_t *e, uint64_t *params, uint64_t *grads,
                           uint64_t *state) {
  const dlrt_graph_t *g = e->g;
  *params = *grads = *state = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    if (t->kind == DLRT__TENSOR_PARAM && t->owner == t && e->bufs[i])
      *params += dlrt__tensor_bytes(t);
    if (e->grads.accum && e->grads.accum[i]) *grads += dlrt__tensor_bytes(t);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    if (n->phase != DLRT__PHASE_UPDATE) continue;
    for (int j = 1; j + 1 < n->n_in; j++)
      if (e->bufs[n->in[j]->owner->id]) *state += dlrt__tensor_bytes(n->in[j]);
  }
}
