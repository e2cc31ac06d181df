/* exec.c — plans and runs a graph on a device.
 *
 * Two schedules: the forward nodes (evaluation) and every node (a training
 * step). For each, the planner finds every storage's last use; the executor
 * allocates a node's outputs from the device's caching allocator just before
 * the node runs and frees each storage right after its last use, all on one
 * stream, so the stream-ordered allocator recycles memory with no host
 * synchronization. Inputs, parameters, optimizer state and kept tensors live
 * as long as the executor. The planned peak is the same walk done on paper. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/residency.h"
#include "util/clock.h"
#include "util/status.h"
#include "util/trace.h"

static void print_profile(const dlrt_exec_t *e) {
  double total = 0;
  for (int i = 0; i < DLRT__OP_COUNT_; i++) total += e->prof.op_ms[i];
  fprintf(stderr, "dlrt graph profile on %s (each node waited for):\n", dlrt_device_spec(e->dev));
  for (int i = 0; i < DLRT__OP_COUNT_; i++)
    if (e->prof.op_calls[i])
      fprintf(stderr, "  %-16s %8lld calls %10.1f ms %5.1f%%\n", dlrt__op_name((dlrt__op_kind)i),
              (long long)e->prof.op_calls[i], e->prof.op_ms[i],
              total > 0 ? 100.0 * e->prof.op_ms[i] / total : 0);
}

/* ---------------------------------------------------------------- init */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) {
  return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Fills a parameter on the host from (seed, name): the same values whatever
 * the device, and whatever else the graph holds. */
static void init_values(const dlrt_tensor_t *t, uint64_t seed, float *v) {
  uint64_t state = seed;
  for (const char *c = t->name; *c; c++) state = (state ^ (unsigned char)*c) * 0x100000001b3ULL;
  double fan_in = (double)t->fan_in, fan_out = (double)(t->fan_out > 0 ? t->fan_out : t->fan_in);
  for (int64_t i = 0; i < t->numel; i++) {
    double x;
    switch (t->init) {
    case DLRT_INIT_ONES: x = 1.0; break;
    case DLRT_INIT_FAN_IN_UNIFORM: x = (2.0 * uniform01(&state) - 1.0) / sqrt(fan_in); break;
    case DLRT_INIT_XAVIER_UNIFORM:
      x = (2.0 * uniform01(&state) - 1.0) * sqrt(6.0 / (fan_in + fan_out));
      break;
    case DLRT_INIT_NORMAL: {
      double u1 = uniform01(&state), u2 = uniform01(&state);
      x = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(6.283185307179586 * u2) * t->init_std;
      break;
    }
    case DLRT_INIT_KAIMING_NORMAL: {
      double u1 = uniform01(&state), u2 = uniform01(&state);
      x = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(6.283185307179586 * u2) *
          sqrt(2.0 / fan_in);
      break;
    }
    default: x = 0.0; break;
    }
    v[i] = (float)x;
  }
}

/* ---------------------------------------------------------------- lifetime */

void dlrt_exec_destroy(dlrt_exec_t *e) {
  if (!e) return;
  if (e->prof.on) print_profile(e);
  if (e->stream) dlrt_stream_synchronize(e->stream);
  dlrt__exec_buckets_free(e);
  dlrt__exec_collective_free(e);
  dlrt__exec_shard_free(e);
  dlrt__pstream_destroy(e); /* host copies; a streamed parameter's device copy */
  dlrt__mpool_destroy(e->spill.pool); /* host and disk copies; bufs[] are freed below */
  free(e->spill.windows), free(e->spill.block_local), free(e->spill.slices);
  dlrt__exec_choice_free(&e->choice);
  if (e->bufs) {
    for (int i = 0; i < e->g->n_tensors; i++)
      if (e->g->tensors[i]->owner == e->g->tensors[i]) dlrt_buffer_free(e->bufs[i]);
    free(e->bufs);
  }
  if (e->grads.accum) {
    for (int i = 0; i < e->g->n_tensors; i++) dlrt_buffer_free(e->grads.accum[i]);
    free(e->grads.accum);
  }
  dlrt__schedule_free(&e->plan.plans[0]);
  dlrt__schedule_free(&e->plan.plans[1]);
  dlrt_stream_destroy(e->stream);
  free(e);
}

int dlrt__exec_create_deferred(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed,
                               dlrt_exec_t **out) {
  DLRT__CHECK_ARG(g && dev && out, "graph, device or out is NULL");
  if (g->status || dlrt__graph_layout(g) < 0) return dlrt_graph_status(g);
  dlrt_exec_t *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  e->g = g;
  e->dev = dev;
  e->lr = g->opt.lr;
  e->seed = seed;
  e->grads.loss_scale = 1.0f;
  e->grads.accum_steps = 1;
  const char *profile = getenv("DLRT_GRAPH_PROFILE");
  e->prof.on = profile && *profile && strcmp(profile, "0") != 0;
  int rc = dlrt_stream_create(dev, &e->stream);
  if (rc < 0) goto fail;
  e->bufs = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e->bufs);
  if (!e->bufs) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto fail;
  }
  uint64_t forward_peak;
  dlrt__schedule *plans = e->plan.plans;
  if ((rc = dlrt__plan(g, DLRT__PHASE_FORWARD, 0, &plans[DLRT_RUN_FORWARD], &forward_peak,
                       NULL)) < 0 ||
      (rc = dlrt__plan(g, DLRT__PHASE_UPDATE, 0, &plans[DLRT_RUN_TRAIN], &e->plan.train_peak,
                       NULL)) < 0)
    goto fail;
  e->plan.forward_peak = forward_peak;
  e->plan.planned_peak = e->plan.train_peak > forward_peak ? e->plan.train_peak : forward_peak;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    if (t->owner != t || !dlrt__persistent(t)) continue;
    if (t->kind == DLRT__TENSOR_PARAM) {
      e->plan.param_bytes += dlrt__tensor_bytes(t);
      e->plan.params += t->numel;
    } else if (t->kind == DLRT__TENSOR_STATE) {
      e->plan.state_bytes += dlrt__tensor_bytes(t);
    }
  }
  dlrt_mem_stats st;
  dlrt_mem_stats_get(dev, &st);
  e->plan.peak_base = st.allocated.current;
  dlrt_mem_reset_peak(dev);
  *out = e;
  return DLRT_OK;
fail:
  dlrt_exec_destroy(e);
  return rc;
}

int dlrt__exec_materialize(dlrt_exec_t *e) {
  dlrt_graph_t *g = e->g;
  float *host = NULL;
  int rc = DLRT_OK;
  /* Persistent storage: inputs, parameters, state, kept tensors. With
   * spilling the pool owns them and the initial values go to their host
   * copies, so not even the first of them needs the device budget. */
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (t->owner != t || !dlrt__persistent(t)) continue;
    size_t bytes = dlrt__tensor_bytes(t);
    /* Parameters and optimizer state from their initialisers, caches zeroed. */
    int init = t->kind == DLRT__TENSOR_PARAM || t->kind == DLRT__TENSOR_STATE ||
               t->kind == DLRT__TENSOR_CACHE;
    float *streamed;
    if (dlrt__pstream_init_host(e, i, &streamed)) {
      /* Streamed parameters and their state start on the host (state on
       * disk: NULL, its slot reads as zeros until written). */
      if (init && streamed) init_values(t, e->seed, streamed);
      continue;
    }
    if (e->spill.pool) {
      void *view;
      if (!init) continue; /* made on the device when first used */
      if ((rc = dlrt__mpool_host_view(e->spill.pool, i, 1, &view)) < 0) break;
      init_values(t, e->seed, view);
      rc = dlrt__mpool_host_view_end(e->spill.pool, i, 1);
      continue;
    }
    if ((rc = dlrt_buffer_alloc(e->dev, bytes ? bytes : 4, e->stream, &e->bufs[i])) < 0) break;
    if (!init) continue;
    free(host);
    if (!(host = malloc(bytes ? bytes : 4))) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      break;
    }
    init_values(t, e->seed, host);
    if ((rc = dlrt_copy_h2d(e->bufs[i], 0, host, bytes, e->stream)) < 0) break;
    /* The copy reads `host`: wait before reusing it. */
    rc = dlrt_stream_synchronize(e->stream);
  }
  free(host);
  if (rc == DLRT_OK && e->spill.pool) dlrt__mpool_reset_stats(e->spill.pool);
  return rc;
}

int dlrt_exec_create(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed, dlrt_exec_t **out) {
  dlrt_exec_t *e;
  int rc = dlrt__exec_create_deferred(g, dev, seed, &e);
  if (rc < 0) return rc;
  if ((rc = dlrt__exec_materialize(e)) < 0) {
    dlrt_exec_destroy(e);
    return rc;
  }
  *out = e;
  return DLRT_OK;
}

dlrt_graph_t *dlrt__exec_graph(const dlrt_exec_t *e) { return e->g; }

int dlrt__exec_replan(dlrt_exec_t *e, int every) { return dlrt__exec_replan_dropping(e, every, NULL); }

int dlrt__exec_replan_dropping(dlrt_exec_t *e, int every, const char *drop) {
  /* Both schedules: evaluation runs the same segments' chunked blocks (the
   * planner's dropped storages are the training schedule's alone). */
  dlrt__schedule fresh = {0}, fresh_forward = {0};
  uint64_t peak, forward_peak;
  int rc = drop ? dlrt__plan_dropping(e->g, drop, &fresh, &peak)
                : dlrt__plan(e->g, DLRT__PHASE_UPDATE, every, &fresh, &peak, NULL);
  if (rc == DLRT_OK) rc = dlrt__plan(e->g, DLRT__PHASE_FORWARD, every, &fresh_forward, &forward_peak, NULL);
  if (rc < 0) {
    dlrt__schedule_free(&fresh);
    dlrt__schedule_free(&fresh_forward);
    return rc;
  }
  dlrt__schedule_free(&e->plan.plans[DLRT_RUN_TRAIN]);
  dlrt__schedule_free(&e->plan.plans[DLRT_RUN_FORWARD]);
  e->plan.plans[DLRT_RUN_TRAIN] = fresh;
  e->plan.plans[DLRT_RUN_FORWARD] = fresh_forward;
  e->plan.train_peak = peak;
  e->plan.forward_peak = forward_peak;
  e->plan.planned_peak = peak > forward_peak ? peak : forward_peak;
  e->plan.checkpoint_every = every;
  /* Gradient buckets follow the schedule's positions: place them again. */
  return e->grads.buckets.n ? dlrt__exec_stream_gradients(e, e->grads.buckets.bytes) : DLRT_OK;
}

int dlrt_exec_set_checkpointing(dlrt_exec_t *e, int every) {
  DLRT__CHECK_ARG(e && (every >= 0 || every == DLRT_CHECKPOINT_SQRT ||
                        every == DLRT_CHECKPOINT_MARKS),
                  "dlrt_exec_set_checkpointing: executor is NULL or segment length %d (give 0, "
                  "N > 0, DLRT_CHECKPOINT_SQRT or DLRT_CHECKPOINT_MARKS)", every);
  if (every == DLRT_CHECKPOINT_MARKS && dlrt__checkpoint_marks(e->g) == 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_exec_set_checkpointing: the graph marks "
                           "no segment ends (dlrt_checkpoint_mark; a GPT's blocks are marked): "
                           "checkpoint in segments of N nodes or DLRT_CHECKPOINT_SQRT instead");
  if (!e->spill.pool) return dlrt__exec_replan(e, dlrt__checkpoint_segment(e->g, every));
  /* Spilling: the pool sizes a chunked block's storages from the schedule,
   * so it starts again on the new one. */
  dlrt_spill_config c = e->spill.cfg, off = c;
  off.device_budget = 0;
  int rc = dlrt_exec_set_spill(e, &off);
  if (rc == DLRT_OK) rc = dlrt__exec_replan(e, dlrt__checkpoint_segment(e->g, every));
  return rc == DLRT_OK ? dlrt_exec_set_spill(e, &c) : rc;
}

/* Tracing: the node's span (waited for) and the device memory after it. */
static void trace_node(dlrt_exec_t *e, const dlrt__node *n, int on_host, double t0) {
  dlrt_stream_synchronize(e->stream);
  char name[160];
  snprintf(name, sizeof name, "%s %s%s", dlrt__op_name(n->op),
           n->n_out ? n->out[0]->name : "(update)", on_host ? " on the host" : "");
  dlrt__trace_span(name, n->phase == DLRT__PHASE_FORWARD ? "forward"
                         : n->phase == DLRT__PHASE_BACKWARD ? "backward" : "update",
                   on_host ? DLRT_TRACE_HOST : DLRT_TRACE_COMPUTE, t0, dlrt__trace_now_us());
  /* Counters are named per device: with several executors (data or tensor
   * parallel) one name would draw every device's bytes as one line. */
  char counter[96];
  dlrt_mem_stats st;
  if (dlrt_mem_stats_get(e->dev, &st) == DLRT_OK) {
    snprintf(counter, sizeof counter, "device memory allocated (%s)", dlrt_device_spec(e->dev));
    dlrt__trace_counter(counter, st.allocated.current);
  }
  if (e->spill.pool) {
    snprintf(counter, sizeof counter, "spill: resident (%s)", dlrt_device_spec(e->dev));
    dlrt__trace_counter(counter, dlrt__mpool_resident(e->spill.pool));
  }
}

/* A chunked block of the schedule (chunk.c): its positions run for each
 * chunk of images in turn. Storages that hold one chunk are allocated and
 * freed each time; those of the whole batch are made by the first chunk
 * and freed after the last. */
int dlrt__exec_run_block(dlrt_exec_t *e, const dlrt__residency *res, const dlrt__schedule *s,
                         const dlrt__chunk_block *b) {
  const char *local = NULL;
  int rc = res->begin_block(e, s, b, &local);
  for (int64_t b0 = 0; b0 < b->batch && rc == DLRT_OK; b0 += b->chunk) {
    dlrt__chunk c = {b->batch, b0, b->batch - b0 < b->chunk ? b->batch - b0 : b->chunk, local};
    if ((rc = res->chunk_in(e, b0, c.nb)) < 0) break;
    for (int k = b->begin; k < b->end && rc == DLRT_OK; k++) {
      if (dlrt__block_skips(b, k)) continue; /* made in the first half (fused) */
      dlrt__node *n = e->g->nodes[s->order[k]];
      rc = res->chunk_outputs(e, s, k, &c);
      double t0 = e->prof.on ? dlrt__now_ms() : 0;
      if (rc == DLRT_OK) rc = dlrt__exec_run_node_chunk(e, n, &c);
      if (e->prof.on && rc == DLRT_OK) {
        rc = dlrt_stream_synchronize(e->stream);
        e->prof.op_ms[n->op] += dlrt__now_ms() - t0;
        e->prof.op_calls[n->op]++;
      }
      if (rc < 0) {
        rc = dlrt__set_error(rc, "graph node %d (%s -> %s), images %lld to %lld: %s",
                             s->order[k], dlrt__op_name(n->op), n->out[0]->name,
                             (long long)b0, (long long)(b0 + c.nb - 1), dlrt_last_error());
        break;
      }
      rc = res->chunk_done(e, s, b, k, &c);
    }
  }
  /* After a failure too: a spilling block's windows go and its locks end. */
  int rc2 = res->end_block(e, s, b);
  return rc == DLRT_OK ? rc2 : rc;
}

int dlrt_exec_run(dlrt_exec_t *e, dlrt_run_mode mode) {
  DLRT__CHECK_ARG(e, "executor is NULL");
  DLRT__CHECK_ARG(mode == DLRT_RUN_FORWARD || mode == DLRT_RUN_TRAIN ||
                      mode == DLRT_RUN_GRADIENTS,
                  "unknown run mode %d", (int)mode);
  if (mode != DLRT_RUN_FORWARD && !e->g->backward_done)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_run: a training run needs "
                           "dlrt_graph_backward first");
  if (mode == DLRT_RUN_TRAIN && e->shard.stage)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_run: the executor's optimizer state is "
                           "sharded (ZeRO): the trainer makes the updates; run "
                           "DLRT_RUN_GRADIENTS");
  dlrt__grad_run gr;
  int rc = dlrt__grads_run_begin(e, mode, &gr);
  if (rc < 0) return rc;
  if (e->pstream && (rc = dlrt__pstream_check(e, gr.gradients_only)) < 0) return rc;
  if (gr.gradients_only) mode = DLRT_RUN_TRAIN; /* the kernels train (dropout, batch statistics) */
  dlrt_graph_t *g = e->g;
  dlrt__schedule *s = &e->plan.plans[mode];
  e->mode = mode;
  const dlrt__residency *res = e->pstream ? &dlrt__residency_params : dlrt__exec_residency(e);
  res->begin_run(e, s);
  int tracing = dlrt__trace_on();
  for (int k = 0; k < s->n && rc == DLRT_OK; k++) {
    dlrt__node *n = g->nodes[s->order[k]];
    if (n->phase == DLRT__PHASE_UPDATE && !gr.decided && (rc = dlrt__grads_before_update(e, &gr)) < 0)
      break;
    if (gr.skip_updates && n->phase == DLRT__PHASE_UPDATE) {
      /* A micro-batch before the last (its gradients went into the sums),
       * or an update skipped for overflowing gradients. */
      for (int *f = s->frees[k]; *f >= 0; f++) res->discard(e, *f);
      continue;
    }
    if (s->block_of && s->block_of[k] >= 0) {
      /* A chunked block: its positions for each chunk of images in turn. */
      const dlrt__chunk_block *b = &s->blocks[s->block_of[k]];
      double trace_t0 = tracing && dlrt_stream_synchronize(e->stream) == DLRT_OK ? dlrt__trace_now_us() : 0;
      rc = dlrt__exec_run_block(e, res, s, b);
      for (int kk = b->begin; kk < b->end && rc == DLRT_OK; kk++) {
        rc = dlrt__grads_ready(e, &gr, kk);
        if (tracing && rc == DLRT_OK && !dlrt__block_skips(b, kk))
          trace_node(e, g->nodes[s->order[kk]], 0, trace_t0);
      }
      k = b->end - 1;
      continue;
    }
    int on_host = 0;
    if ((rc = dlrt__exec_shard_before(e, mode, k)) < 0 ||
        (rc = res->begin_node(e, s, k, &on_host)) < 0) {
      rc = dlrt__set_error(rc, "graph node %d (%s -> %s): %s", s->order[k],
                           dlrt__op_name(n->op), n->n_out ? n->out[0]->name : "update",
                           dlrt_last_error());
      break;
    }
    double t0 = e->prof.on ? dlrt__now_ms() : 0;
    double trace_t0 = tracing && dlrt_stream_synchronize(e->stream) == DLRT_OK ? dlrt__trace_now_us() : 0;
    if (rc == DLRT_OK && !on_host) rc = dlrt__exec_run_node(e, n);
    if (rc == DLRT_OK) rc = dlrt__grads_ready(e, &gr, k);
    if (tracing && rc == DLRT_OK) trace_node(e, n, on_host, trace_t0);
    if (e->prof.on && rc == DLRT_OK) {
      rc = dlrt_stream_synchronize(e->stream);
      e->prof.op_ms[n->op] += dlrt__now_ms() - t0;
      e->prof.op_calls[n->op]++;
    }
    if (rc < 0) {
      rc = dlrt__set_error(rc, "graph node %d (%s -> %s): %s", s->order[k],
                           dlrt__op_name(n->op), n->n_out ? n->out[0]->name : "update",
                           dlrt_last_error());
    }
    int rc2 = res->end_node(e, s, k);
    dlrt__exec_shard_after(e, mode, k);
    if (rc == DLRT_OK) rc = rc2;
  }
  /* After a failure, intermediates not yet freed are released. */
  if (rc < 0)
    for (int i = 0; i < g->n_tensors; i++) {
      dlrt_tensor_t *t = g->tensors[i];
      if (t->owner != t || dlrt__persistent(t)) continue;
      res->discard(e, i);
    }
  if (rc == DLRT_OK) dlrt__grads_run_end(e, &gr, mode == DLRT_RUN_TRAIN && g->optimized);
  return rc;
}
