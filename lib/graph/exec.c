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
#include <time.h>

#include "graph/exec.h"
#include "util/status.h"
#include "util/trace.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void print_profile(const dlrt_exec_t *e) {
  double total = 0;
  for (int i = 0; i < OP_COUNT_; i++) total += e->op_ms[i];
  fprintf(stderr, "dlrt graph profile on %s (each node waited for):\n", dlrt_device_spec(e->dev));
  for (int i = 0; i < OP_COUNT_; i++)
    if (e->op_calls[i])
      fprintf(stderr, "  %-16s %8lld calls %10.1f ms %5.1f%%\n", dlrt__op_name((op_kind)i),
              (long long)e->op_calls[i], e->op_ms[i], total > 0 ? 100.0 * e->op_ms[i] / total : 0);
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

static void buckets_free(dlrt_exec_t *e);
static int stream_gradients(dlrt_exec_t *e, int k);

void dlrt_exec_destroy(dlrt_exec_t *e) {
  if (!e) return;
  if (e->profile) print_profile(e);
  if (e->stream) dlrt_stream_synchronize(e->stream);
  buckets_free(e);
  dlrt__mpool_destroy(e->spill); /* host and disk copies; bufs[] are freed below */
  if (e->bufs) {
    for (int i = 0; i < e->g->n_tensors; i++)
      if (e->g->tensors[i]->owner == e->g->tensors[i]) dlrt_buffer_free(e->bufs[i]);
    free(e->bufs);
  }
  if (e->accum) {
    for (int i = 0; i < e->g->n_tensors; i++) dlrt_buffer_free(e->accum[i]);
    free(e->accum);
  }
  dlrt__schedule_free(&e->plans[0]);
  dlrt__schedule_free(&e->plans[1]);
  dlrt_stream_destroy(e->stream);
  free(e);
}

int dlrt_exec_create(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed, dlrt_exec_t **out) {
  DLRT__CHECK_ARG(g && dev && out, "graph, device or out is NULL");
  if (g->status) return dlrt_graph_status(g);
  dlrt_exec_t *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  e->g = g;
  e->dev = dev;
  e->lr = g->opt.lr;
  e->seed = seed;
  e->loss_scale = 1.0f;
  const char *profile = getenv("DLRT_GRAPH_PROFILE");
  e->profile = profile && *profile && strcmp(profile, "0") != 0;
  float *host = NULL;
  int rc = dlrt_stream_create(dev, &e->stream);
  if (rc < 0) goto fail;
  e->bufs = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e->bufs);
  if (!e->bufs) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto fail;
  }
  uint64_t forward_peak;
  if ((rc = dlrt__plan(g, PHASE_FORWARD, 0, &e->plans[DLRT_RUN_FORWARD], &forward_peak, NULL)) < 0 ||
      (rc = dlrt__plan(g, PHASE_UPDATE, 0, &e->plans[DLRT_RUN_TRAIN], &e->train_peak, NULL)) < 0)
    goto fail;
  e->forward_peak = forward_peak;
  e->planned_peak = e->train_peak > forward_peak ? e->train_peak : forward_peak;
  dlrt_mem_stats st;
  dlrt_mem_stats_get(dev, &st);
  e->peak_base = st.allocated.current;
  dlrt_mem_reset_peak(dev);
  /* Persistent storage now: inputs, parameters, state, kept tensors. */
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (t->owner != t || !dlrt__persistent(t)) continue;
    size_t bytes = dlrt__tensor_bytes(t);
    if ((rc = dlrt_buffer_alloc(dev, bytes ? bytes : 4, e->stream, &e->bufs[i])) < 0) goto fail;
    if (t->kind == TENSOR_PARAM) {
      e->param_bytes += bytes;
      e->params += t->numel;
    } else if (t->kind == TENSOR_STATE) {
      e->state_bytes += bytes;
    }
    if (t->kind != TENSOR_PARAM && t->kind != TENSOR_STATE) continue;
    free(host);
    host = malloc(bytes ? bytes : 4);
    if (!host) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      goto fail;
    }
    init_values(t, seed, host);
    if ((rc = dlrt_copy_h2d(e->bufs[i], 0, host, bytes, e->stream)) < 0) goto fail;
    /* The copy reads `host`: wait before reusing it. */
    if ((rc = dlrt_stream_synchronize(e->stream)) < 0) goto fail;
  }
  free(host);
  e->accum_steps = 1;
  *out = e;
  return DLRT_OK;
fail:
  free(host);
  dlrt_exec_destroy(e);
  return rc;
}

int dlrt_exec_set_checkpointing(dlrt_exec_t *e, int every) {
  DLRT__CHECK_ARG(e && (every >= 0 || every == DLRT_CHECKPOINT_SQRT),
                  "dlrt_exec_set_checkpointing: executor is NULL or segment length %d (give 0, "
                  "N > 0 or DLRT_CHECKPOINT_SQRT)", every);
  int len = dlrt__checkpoint_segment(e->g, every);
  schedule fresh = {0};
  uint64_t peak;
  int rc = dlrt__plan(e->g, PHASE_UPDATE, len, &fresh, &peak, NULL);
  if (rc < 0) {
    dlrt__schedule_free(&fresh);
    return rc;
  }
  dlrt__schedule_free(&e->plans[DLRT_RUN_TRAIN]);
  e->plans[DLRT_RUN_TRAIN] = fresh;
  e->train_peak = peak;
  e->planned_peak = peak > e->forward_peak ? peak : e->forward_peak;
  e->checkpoint_every = len;
  /* Gradient buckets follow the schedule's positions: place them again. */
  return e->buckets.n ? dlrt__exec_stream_gradients(e, e->buckets.bytes) : DLRT_OK;
}

/* One running sum per gradient, for the executor's life: they count in its
 * planned peak. */
static int ensure_accumulators(dlrt_exec_t *e) {
  dlrt_graph_t *g = e->g;
  if (e->accum) return DLRT_OK;
  e->accum = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e->accum);
  if (!e->accum) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    int rc = dlrt_buffer_alloc(e->dev, dlrt__tensor_bytes(p), e->stream, &e->accum[i]);
    if (rc < 0) return rc;
    e->accum_bytes += (dlrt__tensor_bytes(p) + 511) & ~(uint64_t)511; /* allocator granules */
  }
  return DLRT_OK;
}

int dlrt_exec_set_accumulation(dlrt_exec_t *e, int steps) {
  DLRT__CHECK_ARG(e && steps >= 1, "dlrt_exec_set_accumulation: executor is NULL or %d "
                  "micro-batches per update (give 1 or more)", steps);
  if (e->micro != 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_set_accumulation: %d of %d micro-batches "
                           "of an update are still pending", e->micro, e->accum_steps);
  if (steps > 1) {
    int rc = ensure_accumulators(e);
    if (rc < 0) return rc;
  }
  e->accum_steps = steps;
  return DLRT_OK;
}

/* Folds this micro-batch's gradients into the running sums: the first
 * micro-batch of an update copies, later ones add; the last adds the sums
 * into the gradients, which the updates then scale by 1 / accum_steps (each
 * micro-batch's loss is a mean over its own samples, so the mean of the
 * micro-batch gradients is the gradient of the whole batch's mean loss). */
static int accumulate(dlrt_exec_t *e, int last) {
  dlrt_graph_t *g = e->g;
  int rc = DLRT_OK;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    if ((rc = dlrt__exec_use(e, p->grad, last)) < 0) break;
    dlrt_buffer_t *grad = dlrt__exec_buf(e, p->grad), *sum = e->accum[i];
    size_t bytes = dlrt__tensor_bytes(p);
    if (last)
      rc = dlrt_elementwise(e->stream, DLRT_EW_ADD, DLRT_F32, p->numel, 0, grad, 0, grad, 0,
                            sum, 0);
    else if (e->micro == 0)
      rc = dlrt_copy_d2d(sum, 0, grad, 0, bytes, e->stream);
    else
      rc = dlrt_elementwise(e->stream, DLRT_EW_ADD, DLRT_F32, p->numel, 0, sum, 0, sum, 0,
                            grad, 0);
    dlrt__exec_unuse(e, p->grad);
  }
  return rc;
}

/* The factor that brings the global L2 norm of the gradients down to
 * clip_norm (1 when already below), as torch.nn.utils.clip_grad_norm_:
 * max_norm / (norm + 1e-6). Squares go through a temporary, per-gradient sums
 * into a small vector, and one number comes back to the host. */
static int clip_factor(dlrt_exec_t *e, float prescale, float *factor) {
  dlrt_graph_t *g = e->g;
  int64_t largest = 0, count = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == TENSOR_PARAM && p->grad) {
      count++;
      if (p->numel > largest) largest = p->numel;
    }
  }
  *factor = 1.0f;
  if (count == 0) return DLRT_OK;
  dlrt_buffer_t *squares = NULL, *sums = NULL, *total = NULL;
  int rc = dlrt_buffer_alloc(e->dev, (size_t)largest * sizeof(float), e->stream, &squares);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, (size_t)count * sizeof(float), e->stream, &sums);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, sizeof(float), e->stream, &total);
  int64_t k = 0;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    if ((rc = dlrt__exec_use(e, p->grad, 0)) < 0) break;
    dlrt_buffer_t *gb = dlrt__exec_buf(e, p->grad);
    rc = dlrt_elementwise(e->stream, DLRT_EW_MUL, DLRT_F32, p->numel, 0, squares, 0, gb, 0, gb, 0);
    if (rc == DLRT_OK)
      rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p->numel, sums,
                       (size_t)k++ * sizeof(float), squares, 0);
    dlrt__exec_unuse(e, p->grad);
  }
  float sq = 0;
  if (rc == DLRT_OK) rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, count, total, 0, sums, 0);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(&sq, total, 0, sizeof sq, e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  dlrt_buffer_free(squares);
  dlrt_buffer_free(sums);
  dlrt_buffer_free(total);
  if (rc == DLRT_OK) {
    /* The gradients are applied times `prescale` (accumulation): clip that. */
    double norm = sqrt((double)sq) * prescale, coef = e->clip_norm / (norm + 1e-6);
    if (coef < 1.0) *factor = (float)coef;
  }
  return rc;
}

int dlrt_exec_set_clip_norm(dlrt_exec_t *e, float max_norm) {
  DLRT__CHECK_ARG(e && max_norm >= 0, "executor is NULL or max norm %g < 0", max_norm);
  e->clip_norm = max_norm;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- loss scaling */

dlrt_loss_scaler dlrt_loss_scaler_defaults(void) {
  dlrt_loss_scaler s = {.enabled = 1, .init_scale = 65536.0f, .growth_factor = 2.0f,
                        .backoff_factor = 0.5f, .growth_interval = 2000};
  return s;
}

int dlrt_exec_set_loss_scaler(dlrt_exec_t *e, const dlrt_loss_scaler *scaler) {
  DLRT__CHECK_ARG(e, "dlrt_exec_set_loss_scaler: executor is NULL");
  if (!scaler || !scaler->enabled) {
    e->scaler.enabled = 0;
    e->loss_scale = 1.0f;
    return DLRT_OK;
  }
  DLRT__CHECK_ARG(scaler->init_scale > 0 && isfinite(scaler->init_scale) &&
                      scaler->growth_factor >= 1 && isfinite(scaler->growth_factor) &&
                      scaler->backoff_factor > 0 && scaler->backoff_factor <= 1 &&
                      scaler->growth_interval >= 1,
                  "dlrt_exec_set_loss_scaler: scale %g, growth %g, backoff %g, interval %d "
                  "(need a finite scale > 0, growth >= 1, backoff in (0, 1], interval >= 1)",
                  scaler->init_scale, scaler->growth_factor, scaler->backoff_factor,
                  scaler->growth_interval);
  if (e->micro != 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_set_loss_scaler: %d of %d micro-batches "
                           "of an update are still pending", e->micro, e->accum_steps);
  e->scaler = *scaler;
  e->loss_scale = scaler->init_scale;
  e->clean_steps = 0;
  return DLRT_OK;
}

int dlrt_exec_loss_scale(const dlrt_exec_t *e, dlrt_loss_scale_state *out) {
  DLRT__CHECK_ARG(e && out, "dlrt_exec_loss_scale: executor or out is NULL");
  out->scale = e->loss_scale;
  out->skipped_steps = e->skipped_steps;
  out->last_skipped = e->last_skipped;
  return DLRT_OK;
}

void dlrt__exec_save_loss_scale(const dlrt_exec_t *e, dlrt__loss_scale_saved *out) {
  out->scaler = e->scaler;
  out->scale = e->loss_scale;
  out->skipped_steps = e->skipped_steps;
  out->clean_steps = e->clean_steps;
  out->last_skipped = e->last_skipped;
}

void dlrt__exec_restore_loss_scale(dlrt_exec_t *e, const dlrt__loss_scale_saved *in) {
  e->scaler = in->scaler;
  e->loss_scale = in->scale;
  e->skipped_steps = in->skipped_steps;
  e->clean_steps = in->clean_steps;
  e->last_skipped = in->last_skipped;
}

/* Whether every parameter gradient is finite: a sum per gradient (inf or
 * NaN anywhere makes it inf or NaN; finite fp32 gradients cannot overflow a
 * sum in practice), their sum, and one number read back. */
static int gradients_finite(dlrt_exec_t *e, int *finite) {
  dlrt_graph_t *g = e->g;
  int64_t count = 0;
  for (int i = 0; i < g->n_tensors; i++)
    if (g->tensors[i]->kind == TENSOR_PARAM && g->tensors[i]->grad) count++;
  *finite = 1;
  if (count == 0) return DLRT_OK;
  dlrt_buffer_t *sums = NULL, *total = NULL;
  int rc = dlrt_buffer_alloc(e->dev, (size_t)count * sizeof(float), e->stream, &sums);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, sizeof(float), e->stream, &total);
  int64_t k = 0;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    if ((rc = dlrt__exec_use(e, p->grad, 0)) < 0) break;
    rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p->numel, sums,
                     (size_t)k++ * sizeof(float), dlrt__exec_buf(e, p->grad), 0);
    dlrt__exec_unuse(e, p->grad);
  }
  float sum = 0;
  if (rc == DLRT_OK) rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, count, total, 0, sums, 0);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(&sum, total, 0, sizeof sum, e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  dlrt_buffer_free(sums);
  dlrt_buffer_free(total);
  if (rc == DLRT_OK) *finite = isfinite(sum);
  return rc;
}

/* GradScaler's rule after an update (or a skipped one). */
static void update_loss_scale(dlrt_exec_t *e, int finite) {
  e->last_skipped = !finite;
  if (!finite) {
    e->skipped_steps++;
    e->clean_steps = 0;
    e->loss_scale *= e->scaler.backoff_factor;
  } else if (++e->clean_steps >= e->scaler.growth_interval) {
    e->clean_steps = 0;
    float grown = e->loss_scale * e->scaler.growth_factor;
    if (isfinite(grown)) e->loss_scale = grown;
  }
}

/* Tracing: the node's span (waited for) and the device memory after it. */
static void trace_node(dlrt_exec_t *e, const node *n, int on_host, double t0) {
  dlrt_stream_synchronize(e->stream);
  char name[160];
  snprintf(name, sizeof name, "%s %s%s", dlrt__op_name(n->op),
           n->n_out ? n->out[0]->name : "(update)", on_host ? " on the host" : "");
  dlrt__trace_span(name, n->phase == PHASE_FORWARD ? "forward"
                         : n->phase == PHASE_BACKWARD ? "backward" : "update",
                   on_host ? DLRT_TRACE_HOST : DLRT_TRACE_COMPUTE, t0, dlrt__trace_now_us());
  dlrt_mem_stats st;
  if (dlrt_mem_stats_get(e->dev, &st) == DLRT_OK)
    dlrt__trace_counter("device memory allocated", st.allocated.current);
  if (e->spill) dlrt__trace_counter("spill: resident", dlrt__mpool_resident(e->spill));
}

int dlrt_exec_run(dlrt_exec_t *e, dlrt_run_mode mode) {
  DLRT__CHECK_ARG(e, "executor is NULL");
  DLRT__CHECK_ARG(mode == DLRT_RUN_FORWARD || mode == DLRT_RUN_TRAIN ||
                      mode == DLRT_RUN_GRADIENTS,
                  "unknown run mode %d", (int)mode);
  if (mode != DLRT_RUN_FORWARD && !e->g->backward_done)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_run: a training run needs "
                           "dlrt_graph_backward first");
  int gradients_only = mode == DLRT_RUN_GRADIENTS;
  if (gradients_only) {
    if (e->accum_steps > 1 || e->spill || !e->g->optimized)
      return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_run: DLRT_RUN_GRADIENTS needs an "
                             "optimized graph, without accumulation or spilling");
    int rc = ensure_accumulators(e);
    if (rc < 0) return rc;
    mode = DLRT_RUN_TRAIN; /* the kernels train (dropout, batch statistics) */
  }
  dlrt_graph_t *g = e->g;
  schedule *s = &e->plans[mode];
  int rc = DLRT_OK, clipped = 0, skip_updates = 0, overflow = 0, checked = 0;
  int last_micro = e->micro + 1 >= e->accum_steps;
  e->mode = mode;
  e->grad_scale = 1.0f;
  e->buckets.next = 0;
  if (e->spill) dlrt__spill_begin_run(e, s);
  int tracing = dlrt__trace_on();
  for (int k = 0; k < s->n && rc == DLRT_OK; k++) {
    node *n = g->nodes[s->order[k]];
    if (n->phase == PHASE_UPDATE && !clipped && gradients_only) {
      /* The gradients go to the accumulators, for the caller to combine. */
      clipped = 1;
      skip_updates = 1;
      e->micro = e->grad_runs; /* the first run copies, later ones add */
      rc = accumulate(e, 0);
      e->micro = 0;
      if (rc < 0) break;
      e->grad_runs++;
    } else if (n->phase == PHASE_UPDATE && !clipped) {
      clipped = 1;
      if (e->accum_steps > 1) {
        if ((rc = accumulate(e, last_micro)) < 0) break;
        skip_updates = !last_micro;
        e->grad_scale = 1.0f / (float)e->accum_steps;
      }
      if (!skip_updates && e->scaler.enabled) {
        /* Loss scaling: skip an update whose gradients overflowed, and
         * divide the scale out of the others. */
        int finite;
        if ((rc = gradients_finite(e, &finite)) < 0) break;
        checked = 1, overflow = !finite, skip_updates = overflow;
        e->grad_scale /= e->loss_scale;
      }
      float clip = 1.0f;
      if (!skip_updates && e->clip_norm > 0 &&
          (rc = clip_factor(e, e->grad_scale, &clip)) < 0)
        break;
      e->grad_scale *= clip;
    }
    if (skip_updates && n->phase == PHASE_UPDATE) {
      /* A micro-batch before the last (its gradients went into the sums),
       * or an update skipped for overflowing gradients. */
      for (int *f = s->frees[k]; *f >= 0; f++) {
        if (e->spill) {
          dlrt__mpool_discard(e->spill, *f);
          continue;
        }
        dlrt_buffer_free(e->bufs[*f]);
        e->bufs[*f] = NULL;
      }
      continue;
    }
    int on_host = 0;
    if (e->spill) {
      if ((rc = dlrt__spill_begin_node(e, s, k, &on_host)) < 0) {
        rc = dlrt__set_error(rc, "graph node %d (%s -> %s): %s", s->order[k],
                             dlrt__op_name(n->op), n->n_out ? n->out[0]->name : "update",
                             dlrt_last_error());
        break;
      }
    } else {
      /* The output takes over its first input's storage (the input still
       * reads it during this node; it is handed over once the node is
       * queued). */
      if (s->inplace[k] >= 0) e->bufs[n->out[0]->id] = e->bufs[s->inplace[k]];
      for (int j = 0; j < n->n_out && rc == DLRT_OK; j++) {
        dlrt_tensor_t *t = n->out[j];
        if (t->owner != t || e->bufs[t->id]) continue;
        size_t bytes = dlrt__tensor_bytes(t);
        rc = dlrt_buffer_alloc(e->dev, bytes ? bytes : 4, e->stream, &e->bufs[t->id]);
      }
    }
    double t0 = e->profile ? now_ms() : 0;
    double trace_t0 = tracing && dlrt_stream_synchronize(e->stream) == DLRT_OK ? dlrt__trace_now_us() : 0;
    if (rc == DLRT_OK && !on_host) rc = dlrt__exec_run_node(e, n);
    if (rc == DLRT_OK && gradients_only && e->buckets.n) rc = stream_gradients(e, k);
    if (tracing && rc == DLRT_OK) trace_node(e, n, on_host, trace_t0);
    if (e->profile && rc == DLRT_OK) {
      rc = dlrt_stream_synchronize(e->stream);
      e->op_ms[n->op] += now_ms() - t0;
      e->op_calls[n->op]++;
    }
    if (rc < 0) {
      rc = dlrt__set_error(rc, "graph node %d (%s -> %s): %s", s->order[k],
                           dlrt__op_name(n->op), n->n_out ? n->out[0]->name : "update",
                           dlrt_last_error());
    }
    if (e->spill) {
      int rc2 = dlrt__spill_end_node(e, s, k);
      if (rc == DLRT_OK) rc = rc2;
      continue;
    }
    if (s->inplace[k] >= 0) e->bufs[s->inplace[k]] = NULL;
    for (int *f = s->frees[k]; *f >= 0; f++) {
      dlrt_buffer_free(e->bufs[*f]);
      e->bufs[*f] = NULL;
    }
  }
  /* After a failure, intermediates not yet freed are released. */
  if (rc < 0)
    for (int i = 0; i < g->n_tensors; i++) {
      dlrt_tensor_t *t = g->tensors[i];
      if (t->owner != t || dlrt__persistent(t)) continue;
      if (e->spill) {
        dlrt__mpool_discard(e->spill, i);
      } else if (e->bufs[i]) {
        dlrt_buffer_free(e->bufs[i]);
        e->bufs[i] = NULL;
      }
    }
  if (rc == DLRT_OK && checked) update_loss_scale(e, !overflow);
  if (rc == DLRT_OK && mode == DLRT_RUN_TRAIN && g->optimized && !gradients_only) {
    if (overflow) {
      e->micro = 0; /* the update and its micro-batches are dropped */
    } else if (skip_updates) {
      e->micro++;
    } else {
      e->micro = 0;
      e->steps++;
    }
  }
  return rc;
}

/* ---------------------------------------------------------------- gradients */

static void buckets_free(dlrt_exec_t *e) {
  for (int b = 0; b < e->buckets.n_buckets; b++) dlrt_event_destroy(e->buckets.events[b]);
  if (e->buckets.host) dlrt_host_free(e->buckets.host);
  free(e->buckets.param), free(e->buckets.pos), free(e->buckets.at), free(e->buckets.closes);
  free(e->buckets.start), free(e->buckets.count), free(e->buckets.events);
  memset(&e->buckets, 0, sizeof e->buckets);
}

int dlrt__exec_stream_gradients(dlrt_exec_t *e, int64_t bucket_bytes) {
  dlrt_graph_t *g = e->g;
  buckets_free(e);
  if (bucket_bytes <= 0) return DLRT_OK;
  if (!g->optimized)
    return dlrt__set_error(DLRT_ERR_STATE, "gradient buckets need an optimized graph");
  const schedule *s = &e->plans[DLRT_RUN_TRAIN];
  int *pos_of = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *pos_of);
  int n = 0;
  for (int i = 0; i < g->n_tensors; i++) n += g->tensors[i]->kind == TENSOR_PARAM && g->tensors[i]->grad;
  e->buckets.param = calloc((size_t)n + 1, sizeof(int));
  e->buckets.pos = calloc((size_t)n + 1, sizeof(int));
  e->buckets.at = calloc((size_t)n + 1, sizeof(int64_t));
  e->buckets.closes = calloc((size_t)n + 1, sizeof(int));
  e->buckets.start = calloc((size_t)n + 1, sizeof(int64_t));
  e->buckets.count = calloc((size_t)n + 1, sizeof(int64_t));
  e->buckets.events = calloc((size_t)n + 1, sizeof(dlrt_event_t *));
  if (!pos_of || !e->buckets.param || !e->buckets.pos || !e->buckets.at || !e->buckets.closes ||
      !e->buckets.start || !e->buckets.count || !e->buckets.events) {
    free(pos_of);
    buckets_free(e);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  for (int i = 0; i < g->n_nodes; i++) pos_of[i] = -1;
  for (int k = 0; k < s->n; k++) pos_of[s->order[k]] = k;
  /* Each gradient is final where the node that writes its storage runs (the
   * last contribution's sum); insertion sort by that position. */
  int m = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    const node *writer = p->grad->owner->producer;
    int at = 0;
    for (int j = 0; writer && j < g->n_nodes; j++)
      if (g->nodes[j] == writer) at = pos_of[j];
    int k = m++;
    while (k > 0 && e->buckets.pos[k - 1] > at) {
      e->buckets.pos[k] = e->buckets.pos[k - 1];
      e->buckets.param[k] = e->buckets.param[k - 1];
      k--;
    }
    e->buckets.pos[k] = at;
    e->buckets.param[k] = i;
  }
  free(pos_of);
  e->buckets.n = m;
  e->buckets.bytes = bucket_bytes;
  int64_t at = 0, open_from = 0;
  int rc = DLRT_OK;
  for (int k = 0; k < m; k++) {
    const dlrt_tensor_t *p = g->tensors[e->buckets.param[k]];
    e->buckets.at[k] = at;
    at += p->numel;
    e->buckets.closes[k] = -1;
    if ((at - open_from) * (int64_t)sizeof(float) >= bucket_bytes || k == m - 1) {
      int b = e->buckets.n_buckets++;
      e->buckets.closes[k] = b;
      e->buckets.start[b] = open_from;
      e->buckets.count[b] = at - open_from;
      open_from = at;
      if ((rc = dlrt_event_create(e->dev, &e->buckets.events[b])) < 0) break;
    }
  }
  e->buckets.total = at;
  if (rc == DLRT_OK)
    rc = dlrt_host_alloc(e->dev, (size_t)(at ? at : 1) * sizeof(float), (void **)&e->buckets.host);
  if (rc < 0) buckets_free(e);
  return rc;
}

/* Queues the copies of the gradients that became final at position k, and
 * the events of the buckets they complete. */
static int stream_gradients(dlrt_exec_t *e, int k) {
  int rc = DLRT_OK;
  while (rc == DLRT_OK && e->buckets.next < e->buckets.n && e->buckets.pos[e->buckets.next] <= k) {
    int j = e->buckets.next++;
    const dlrt_tensor_t *p = e->g->tensors[e->buckets.param[j]];
    rc = dlrt_copy_d2h(e->buckets.host + e->buckets.at[j], dlrt__exec_buf(e, p->grad), 0,
                       (size_t)p->numel * sizeof(float), e->stream);
    if (rc == DLRT_OK && e->buckets.closes[j] >= 0)
      rc = dlrt_event_record(e->buckets.events[e->buckets.closes[j]], e->stream);
  }
  return rc;
}

int dlrt__exec_bucket_wait(dlrt_exec_t *e, int b) {
  DLRT__CHECK_ARG(b >= 0 && b < e->buckets.n_buckets, "gradient bucket %d of %d", b,
                  e->buckets.n_buckets);
  return dlrt_event_synchronize(e->buckets.events[b]);
}

int dlrt__exec_gradients_write_buckets(dlrt_exec_t *e, const float *src) {
  dlrt_graph_t *g = e->g;
  if (!e->accum || !e->buckets.n)
    return dlrt__set_error(DLRT_ERR_STATE, "run DLRT_RUN_GRADIENTS with gradient buckets first");
  int rc = DLRT_OK;
  for (int j = 0; j < e->buckets.n && rc == DLRT_OK; j++) {
    int id = e->buckets.param[j];
    rc = dlrt_copy_h2d(e->accum[id], 0, src + e->buckets.at[j],
                       (size_t)g->tensors[id]->numel * sizeof(float), e->stream);
  }
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

/* The parameters with gradients, in tensor order: what the gradient vector
 * of dlrt_exec_gradients_read holds, one after the other. */
static int gradient_io(dlrt_exec_t *e, float *host, int64_t count, int write) {
  dlrt_graph_t *g = e->g;
  DLRT__CHECK_ARG(e && host, "dlrt_exec_gradients: executor or buffer is NULL");
  if (!e->accum)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_gradients: run DLRT_RUN_GRADIENTS first");
  int64_t total = 0;
  for (int i = 0; i < g->n_tensors; i++)
    if (g->tensors[i]->kind == TENSOR_PARAM && g->tensors[i]->grad) total += g->tensors[i]->numel;
  if (count != total)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_exec_gradients: %lld floats given, the "
                           "gradients hold %lld", (long long)count, (long long)total);
  int rc = DLRT_OK;
  int64_t at = 0;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    size_t bytes = (size_t)p->numel * sizeof(float);
    rc = write ? dlrt_copy_h2d(e->accum[i], 0, host + at, bytes, e->stream)
               : dlrt_copy_d2h(host + at, e->accum[i], 0, bytes, e->stream);
    at += p->numel;
  }
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

int dlrt_exec_gradients_read(dlrt_exec_t *e, float *dst, int64_t count) {
  return gradient_io(e, dst, count, 0);
}

int dlrt_exec_gradients_write(dlrt_exec_t *e, const float *src, int64_t count) {
  return gradient_io(e, (float *)src, count, 1);
}

int dlrt_exec_apply_gradients(dlrt_exec_t *e) {
  DLRT__CHECK_ARG(e, "dlrt_exec_apply_gradients: executor is NULL");
  dlrt_graph_t *g = e->g;
  if (!e->accum || !g->optimized || e->spill)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_apply_gradients: run DLRT_RUN_GRADIENTS "
                           "on an optimized graph first (no spilling)");
  /* The updates read the gradients where the accumulators hold them. */
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == TENSOR_PARAM && p->grad) e->bufs[p->grad->owner->id] = e->accum[i];
  }
  e->mode = DLRT_RUN_TRAIN;
  /* The mean of the runs since the last update (one, unless several
   * micro-batches were run: pipeline stages). */
  float mean = e->grad_runs > 1 ? 1.0f / (float)e->grad_runs : 1.0f;
  float clip = 1.0f;
  int finite = 1, rc = DLRT_OK;
  if (e->scaler.enabled) {
    rc = gradients_finite(e, &finite);
    mean /= e->loss_scale;
  }
  if (rc == DLRT_OK && finite && e->clip_norm > 0) rc = clip_factor(e, mean, &clip);
  e->grad_scale = mean * clip;
  const schedule *s = &e->plans[DLRT_RUN_TRAIN];
  for (int k = 0; k < s->n && rc == DLRT_OK && finite; k++) {
    node *n = g->nodes[s->order[k]];
    if (n->phase == PHASE_UPDATE) rc = dlrt__exec_run_node(e, n);
  }
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == TENSOR_PARAM && p->grad) e->bufs[p->grad->owner->id] = NULL;
  }
  if (rc == DLRT_OK && e->scaler.enabled) update_loss_scale(e, finite);
  if (rc == DLRT_OK && finite) e->steps++;
  e->grad_runs = 0;
  return rc;
}
