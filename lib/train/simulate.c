/* simulate.c — a training step replayed on a model of a machine
 * (dlrt_simulate_step, dlrt/train.h). The schedule is the executor's own
 * (dlrt__plan, as dltrain --plan counts it); each node takes the roofline
 * time of its cost (lib/graph/cost.c) on one compute stream; copies take
 * the link on one engine per direction (lib/device/link_model.h's
 * arithmetic), and the compute waits only for those it needs.
 *
 * Where the copies come from:
 *  - a budget (spill.device_budget): the executor's own, from one step of
 *    a dry run on a real device under that budget, read through the trace
 *    (dlrt__trace_set_sink): its "fetch" and "write back" copies on the
 *    compute stream before a node, its "prefetch" copies on the copy
 *    stream after one, needed by the next node within the prefetch
 *    distance that reads a storage of that size; updates that ran on the
 *    host take the machine's host time; on "this" machine each copy takes
 *    the time the dry run measured for it (the pool's own copy, not the
 *    bare link's), and the copies after the last node end the step;
 *  - the optimizer offloaded without a budget: ZeRO-Offload's schedule,
 *    each gradient copied to the host once its last backward node made it,
 *    its update on the host (one at a time, at host memory speed), the
 *    parameter copied back before the next step's first use of it; three
 *    steps are replayed and the last one counted (the steady state);
 *  - parameters streamed (--offload params): param_stream.c's schedule,
 *    replayed on its rules (simulate_stream.c);
 *  - none of these: the loader's batch alone, overlapped. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/link_model.h"
#include "exec/choose.h"
#include "exec/exec.h"
#include "graph/cost.h"
#include "train/simulate_internal.h"
#include "train/train.h"
#include "util/status.h"
#include "util/trace.h"

/* Copies, and beside each the seconds it took on the device where a dry
 * run made it (measured_s; 0: not measured). */
typedef struct {
  sim_copy *v;
  double *measured_s;
  int n, cap;
} copy_list;

static int copies_add(copy_list *l, sim_copy c, double measured_s) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    sim_copy *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (v) l->v = v;
    double *t = v ? realloc(l->measured_s, (size_t)cap * sizeof *t) : NULL;
    if (!t) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    l->measured_s = t, l->cap = cap;
  }
  l->measured_s[l->n] = measured_s;
  l->v[l->n++] = c;
  return DLRT_OK;
}

/* Seconds node n takes on machine m: the roofline of its FLOPs and bytes,
 * plus its launches (a chunked block's node runs once per chunk). */
static double node_seconds(const dlrt_machine *m, const dlrt__node *n, int runs,
                           dlrt__op_cost *c) {
  dlrt__node_cost(n, c);
  if (!c->launches) return 0;
  double rate = m->matmul_flops[c->matmul_dtype <= DLRT_BF16 ? c->matmul_dtype : DLRT_F32];
  double overhead = runs * m->matmul_overhead_s, vector = c->vector_flops / m->vector_flops;
  /* A kernel class with a rate of its own was timed whole: its rate covers
   * its vector work too. */
  if (c->matmul_kind == DLRT__COST_ATTENTION && m->attention_flops > 0) {
    rate = m->attention_flops, overhead = 0, vector = 0;
  } else if (c->matmul_kind == DLRT__COST_CONV && m->conv_flops > 0) {
    rate = m->conv_flops, overhead = 0, vector = 0;
  }
  double compute = vector;
  if (c->matmul_flops > 0) compute += c->matmul_flops / rate + overhead;
  double bandwidth = c->reduction && m->reduce_bytes_per_s > 0 ? m->reduce_bytes_per_s
                                                               : m->memory_bytes_per_s;
  double memory = (c->bytes_read + c->bytes_written) / bandwidth;
  return (compute > memory ? compute : memory) + runs * c->launches * m->launch_s;
}

/* Seconds update node n (at position k) takes on the host: as the profile
 * timed it there (measured: the update run on the host, its host views'
 * copies with it, as the training run makes them), else its bytes at host
 * memory speed. */
static double host_seconds(const dlrt_machine *m, const dlrt__node *n, const double *measured,
                           int k) {
  return measured ? measured[k] : host_update_bytes(n) / m->host_bytes_per_s;
}

static int offloaded(const dlrt_trainer_config *cfg) {
  return cfg->spill.policy == DLRT_OFFLOAD_OPTIMIZER || cfg->spill.policy == DLRT_OFFLOAD_ALL;
}

/* ---------------------------------------------------------------- dry run */

/* What the dry run's trace said, in order: nodes (and whether each ran on
 * the host) and the copies between them. */
typedef struct {
  int nodes;        /* node spans seen */
  char *on_host;    /* by position */
  int cap;
  copy_list copies;  /* pos: the node spans seen before each */
  int failed;
} dry_log;

static void dry_sink(void *ctx, const char *name, const char *cat, int tid, double start_us,
                     double end_us) {
  dry_log *l = ctx;
  if (l->failed) return;
  if (strcmp(cat, "copy") == 0) {
    /* "fetch 12.0 KiB", "write back ...", "prefetch ...", "slice in ...":
     * the size is the first word that starts with a digit. */
    const char *num = name;
    for (const char *p = name; *p; p++)
      if (*p >= '0' && *p <= '9' && (p == name || p[-1] == ' ')) {
        num = p;
        break;
      }
    double bytes = atof(num) * 1024.0;
    int out = strncmp(name, "write back", 10) == 0 || strncmp(name, "slice out", 9) == 0;
    sim_copy c = {l->nodes, -1, out ? DLRT__LINK_D2H : DLRT__LINK_H2D,
                  tid != DLRT_TRACE_COPY, bytes};
    if (copies_add(&l->copies, c, (end_us - start_us) / 1e6) < 0) l->failed = 1;
    return;
  }
  if (strcmp(cat, "forward") && strcmp(cat, "backward") && strcmp(cat, "update")) return;
  if (l->nodes == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    char *v = realloc(l->on_host, (size_t)cap);
    if (!v) {
      l->failed = 1;
      return;
    }
    l->on_host = v, l->cap = cap;
  }
  l->on_host[l->nodes++] = tid == DLRT_TRACE_HOST;
}

/* The executor's storage bytes as its pool declares them. */
static double storage_bytes(const dlrt__schedule *s, const dlrt_tensor_t *t) {
  return (double)dlrt__schedule_bytes(s, t->owner);
}

/* A prefetch issued at `pos` (after node pos - 1) is needed by the first
 * node within the distance that reads a storage of its size. */
static int prefetch_need(const dlrt_graph_t *g, const dlrt__schedule *s, int pos, int distance,
                         double bytes) {
  for (int a = pos; a < pos + distance && a < s->n; a++) {
    const dlrt__node *m = g->nodes[s->order[a]];
    for (int j = 0; j < m->n_in; j++)
      if (fabs(storage_bytes(s, m->in[j]) - bytes) < 0.06 * 1024.0) return a;
  }
  return pos < s->n ? pos : -1;
}

/* Runs the step of cfg on dev under its budget twice (the first moves the
 * storages to the host and warms up) and logs the second. */
static int dry_run(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                   int64_t width, int classes, dlrt_device_t *dev, dry_log *log) {
  dlrt_graph_t *g = NULL;
  dlrt_exec_t *e = NULL;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  int rc = dlrt_graph_create(&g);
  if (rc == DLRT_OK)
    rc = dlrt__build_classifier(g, cfg, channels, height, width, classes, &images, &labels,
                                &logits, &loss);
  if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, cfg->seed, &e);
  if (rc == DLRT_OK && cfg->checkpoint != 0 && cfg->checkpoint != DLRT_CHECKPOINT_AUTO)
    rc = dlrt_exec_set_checkpointing(e, cfg->checkpoint);
  /* The trainer's budget for the executor's storages: the loaders' slots
   * (two: an evaluation's beside training's) and accumulators come off. */
  dlrt_spill_config c = cfg->spill;
  uint64_t outside = 2 * dlrt__loader_device_bytes(cfg, cfg->batch, channels * height * width);
  dlrt_exec_info info;
  if (rc == DLRT_OK && (rc = dlrt_exec_info_get(e, &info)) == DLRT_OK && cfg->accum > 1)
    outside += info.param_bytes + 64 * 512;
  if (rc == DLRT_OK && c.device_budget <= outside)
    rc = dlrt__set_error(DLRT_ERR_OOM, "a device budget of %.1f MiB leaves nothing for the "
                         "model beside its loaders (%.1f MiB)",
                         (double)c.device_budget / 1048576.0, (double)outside / 1048576.0);
  if (rc == DLRT_OK) {
    c.device_budget -= outside;
    rc = dlrt_exec_set_spill(e, &c);
  }
  /* Labels 0 (a class, a token) and images 0: what the step computes does
   * not change what it copies. */
  for (int i = 0; rc == DLRT_OK && i < 2; i++) {
    dlrt_tensor_t *t = i ? labels : images;
    size_t bytes = (size_t)dlrt_tensor_numel(t) * dlrt_dtype_size(dlrt_tensor_dtype(t));
    void *zeros = calloc(1, bytes);
    rc = zeros ? dlrt_exec_write(e, t, zeros, bytes)
               : dlrt__set_error(DLRT_ERR_OOM, "out of host memory for a dry run");
    free(zeros);
  }
  dlrt_stream_t *stream = e ? dlrt_exec_stream(e) : NULL;
  if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(stream);
  if (rc == DLRT_OK) {
    dlrt__trace_set_sink(dry_sink, log);
    rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(stream);
    dlrt__trace_set_sink(NULL, NULL);
  }
  if (rc == DLRT_OK && log->failed)
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory logging a dry run");
  if (rc < 0)
    rc = dlrt__set_error(rc, "the dry run of %s under --mem-limit on %s: %s", cfg->model,
                         dlrt_device_spec(dev), dlrt_last_error());
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return rc;
}

/* ---------------------------------------------------------------- this machine */

/* The trainer's exchange with the host around each step (trainer.c: feed,
 * then the reads after dlrt_exec_run), for the profile to time beside its
 * whole steps: the batch's inputs copied in on the stream from device
 * buffers (the loader's batch is on the device by then), and after the
 * step the loss read back, and a classifier's logits (a GPT's trainer
 * reads the loss only). The buffers hold the inputs the profile filled
 * (prepare), so the steps run on the values the nodes were timed on. */
typedef struct {
  dlrt_device_t *dev;
  dlrt_tensor_t *in[2];
  dlrt_buffer_t *from[2];
  dlrt_tensor_t *read[2];
  int n_read;
  void *host;
  size_t host_bytes;
} trainer_exchange;

static int exchange_prepare(void *user, dlrt_exec_t *e) {
  trainer_exchange *x = user;
  int rc = DLRT_OK;
  for (int i = 0; i < 2 && rc == DLRT_OK; i++) {
    size_t bytes = dlrt__tensor_bytes(x->in[i]);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    rc = dlrt_exec_read(e, x->in[i], tmp, bytes);
    if (rc == DLRT_OK) rc = dlrt_buffer_alloc(x->dev, bytes, NULL, &x->from[i]);
    if (rc == DLRT_OK) rc = dlrt_copy_h2d(x->from[i], 0, tmp, bytes, dlrt_exec_stream(e));
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(dlrt_exec_stream(e));
    free(tmp);
  }
  for (int i = 0; i < x->n_read; i++) {
    size_t bytes = dlrt__tensor_bytes(x->read[i]);
    if (bytes > x->host_bytes) x->host_bytes = bytes;
  }
  x->host = rc == DLRT_OK ? malloc(x->host_bytes ? x->host_bytes : 1) : NULL;
  if (rc == DLRT_OK && !x->host) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  return rc;
}

static int exchange_before(void *user, dlrt_exec_t *e) {
  trainer_exchange *x = user;
  int rc = DLRT_OK;
  for (int i = 0; i < 2 && rc == DLRT_OK; i++) rc = dlrt_exec_copy_in(e, x->in[i], x->from[i], 0, NULL);
  return rc;
}

static int exchange_after(void *user, dlrt_exec_t *e) {
  trainer_exchange *x = user;
  int rc = DLRT_OK;
  for (int i = 0; i < x->n_read && rc == DLRT_OK; i++)
    rc = dlrt_exec_read(e, x->read[i], x->host, dlrt__tensor_bytes(x->read[i]));
  return rc;
}

/* For "this" machine: each node's time measured on dev at the model's own
 * shapes, by the planner's profiling pass (op_costs.c: a warm-up, then the
 * median of at least three runs of each node, each timed on the stream,
 * cached per device, graph shape and offload policy), plus the dispatch
 * per node the profile measured (the step queued whole beyond its nodes),
 * in place of the roofline of figures measured on other shapes (a GEMM of 64 x 784 x 512
 * runs at its own rate, not a square's). The executor runs with spilling
 * on and a budget of the whole device (the profiler needs the pool;
 * nothing spills), the link model off (kernels only), and an offloaded
 * optimizer's updates on the host, as training runs them (their time is
 * the update's there: its kernel on the host's threads and its host
 * views' copies). *measured is 0, and seconds unchanged, where the model
 * cannot be built on dev or its graph is not the replay's. */
static int measured_seconds(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                            int64_t width, int classes, dlrt_device_t *dev,
                            const dlrt_graph_t *g, const dlrt__schedule *s, double *seconds,
                            double *exchange_s, int *measured) {
  *measured = 0;
  dlrt_device_props props;
  dlrt_memory_plan plan;
  if (dlrt_device_props_get(dev, &props) < 0 ||
      dlrt_plan_memory(cfg, channels, height, width, classes, &plan) < 0 ||
      plan.peak > props.total_memory / 2) {
    dlrt_clear_error();
    return DLRT_OK; /* too large to profile here: the roofline */
  }
  dlrt_graph_t *g2 = NULL;
  dlrt_exec_t *e = NULL;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  dlrt_link_info li;
  int link_off = 0;
  char spec[sizeof li.spec];
  int rc = dlrt_graph_create(&g2);
  if (rc == DLRT_OK)
    rc = dlrt__build_classifier(g2, cfg, channels, height, width, classes, &images, &labels,
                                &logits, &loss);
  if (rc == DLRT_OK) rc = dlrt_exec_create(g2, dev, cfg->seed, &e);
  if (rc == DLRT_OK && cfg->checkpoint != 0 && cfg->checkpoint != DLRT_CHECKPOINT_AUTO)
    rc = dlrt_exec_set_checkpointing(e, cfg->checkpoint);
  if (rc == DLRT_OK) {
    dlrt_spill_config c = {.device_budget = props.total_memory, .prefetch = 4,
                           .policy = offloaded(cfg) ? DLRT_OFFLOAD_OPTIMIZER : DLRT_OFFLOAD_NONE};
    rc = dlrt_exec_set_spill(e, &c);
  }
  if (rc == DLRT_OK && (rc = dlrt_link_get(dev, &li)) == DLRT_OK && li.active) {
    snprintf(spec, sizeof spec, "%s", li.spec);
    if ((rc = dlrt_link_set(dev, "none")) == DLRT_OK) link_off = 1;
  }
  dlrt__op_costs costs = {0};
  trainer_exchange tx = {.dev = dev, .in = {images, labels}, .read = {loss, logits},
                         .n_read = dlrt__gpt_model(cfg, NULL) ? 1 : 2};
  dlrt__step_exchange x = {exchange_prepare, exchange_before, exchange_after, &tx};
  if (rc == DLRT_OK) rc = dlrt__op_costs_measure_steps(e, 3, 1, &x, &costs);
  for (int i = 0; i < 2; i++) dlrt_buffer_free(tx.from[i]);
  free(tx.host);
  if (link_off && dlrt_link_set(dev, spec) < 0 && rc == DLRT_OK) rc = DLRT_ERR_STATE;
  int same = rc == DLRT_OK && g2->n_nodes == g->n_nodes && costs.n_nodes == g->n_nodes;
  for (int i = 0; same && i < g->n_nodes; i++)
    same = g2->nodes[i]->op == g->nodes[i]->op && g2->nodes[i]->phase == g->nodes[i]->phase;
  if (same) {
    /* Each node as timed on the stream, and the dispatch per node that
     * the whole step measured beyond them. */
    for (int k = 0; k < s->n; k++)
      seconds[k] = (costs.node_ms[s->order[k]] + costs.dispatch_ms) / 1e3;
    *exchange_s = costs.exchange_ms / 1e3;
    *measured = 1;
    const char *trace = getenv("DLRT_SIMULATE_TRACE");
    if (trace && *trace && strcmp(trace, "0") != 0)
      fprintf(stderr, "profile %s: %d passes, their spread (q3 - q1) / median %.1f%%, %.3f ms "
              "of stream hand-offs left out, updates timed on the %s; the step queued whole "
              "%.3f ms over its nodes' %.3f ms, %.3f us of dispatch per node; the trainer's "
              "exchange around it %.3f ms\n",
              costs.cached ? "cached" : "measured now", costs.passes, 100 * costs.spread,
              costs.handoff_ms, offloaded(cfg) ? "host" : "device", costs.step_ms,
              costs.nodes_ms, costs.dispatch_ms * 1e3, costs.exchange_ms);
  }
  dlrt__op_costs_free(&costs);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g2);
  if (rc < 0 && rc != DLRT_ERR_OOM) return rc;
  dlrt_clear_error(); /* out of memory: the roofline */
  return DLRT_OK;
}

/* ---------------------------------------------------------------- replay */

/* Copy i of l issued at `issue`: on this machine (measured), as long as
 * its dry run's took (the pool's own copy, its staging and bookkeeping with
 * it, not the bare link's); elsewhere the link model's. */
static double list_copy_end(replay *r, double issue, const copy_list *l, int i, int measured) {
  if (measured && l->measured_s[i] > 0)
    return copy_end_taking(r, issue, &l->v[i], l->measured_s[i]);
  return copy_end(r, issue, &l->v[i]);
}

/* Runs the host optimizer of the offload model from position k on: each
 * update's gradient goes out once it is complete (ready[] holds when),
 * taken in that order; the updates run one at a time on the host; each
 * parameter comes back in after its update (ready[] then holds when). The
 * time the updates run inside the backward pass [bw0, bw1) is added to
 * *hidden. */
typedef struct {
  const dlrt__node *node;
  double made_at;
  int pos;
} pending_update;

static int by_made_at(const void *a, const void *b) {
  double x = ((const pending_update *)a)->made_at, y = ((const pending_update *)b)->made_at;
  return x < y ? -1 : x > y;
}

static int offload_updates(replay *r, const dlrt_graph_t *g, const dlrt__schedule *s, int k,
                           const int *grad_done, double *ready, double *host_done, double bw0,
                           double bw1, const double *host_measured, double *hidden) {
  int count = 0;
  for (int a = k; a < s->n; a++) count += is_update(g->nodes[s->order[a]]);
  pending_update *u = malloc((size_t)(count ? count : 1) * sizeof *u);
  if (!u) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
  count = 0;
  for (int a = k; a < s->n; a++) {
    const dlrt__node *node = g->nodes[s->order[a]];
    if (!is_update(node)) continue;
    const dlrt_tensor_t *gr = node->in[node->n_in - 1]->owner;
    u[count].node = node, u[count].pos = a;
    u[count++].made_at = grad_done[gr->id] >= 0 ? ready[gr->id] : r->t;
  }
  qsort(u, (size_t)count, sizeof *u, by_made_at);
  for (int i = 0; i < count; i++) {
    const dlrt__node *node = u[i].node;
    const dlrt_tensor_t *p = node->in[0]->owner, *gr = node->in[node->n_in - 1]->owner;
    double host_s = host_seconds(r->m, node, host_measured, u[i].pos);
    sim_copy out_grad = {k, -1, DLRT__LINK_D2H, 0, (double)dlrt__tensor_bytes(gr)};
    double on_host = copy_end(r, u[i].made_at, &out_grad);
    double begin = on_host > r->host_free ? on_host : r->host_free;
    r->host_free = begin + host_s;
    host_done[p->id] = r->host_free;
    if (r->counting) {
      r->p->host_update_s += host_s;
      double lo = begin > bw0 ? begin : bw0, hi = r->host_free < bw1 ? r->host_free : bw1;
      if (hi > lo) *hidden += hi - lo;
    }
    sim_copy in_param = {k, -1, DLRT__LINK_H2D, 0, (double)dlrt__tensor_bytes(p)};
    ready[p->id] = copy_end(r, r->host_free, &in_param);
  }
  free(u);
  return DLRT_OK;
}

int dlrt_simulate_step(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                       int64_t width, int classes, const dlrt_machine *m, dlrt_device_t *dev,
                       dlrt_simulated_step *out) {
  DLRT__CHECK_ARG(cfg && cfg->model && m && out, "dlrt_simulate_step: config, machine or out "
                  "is NULL");
  DLRT__CHECK_ARG(m->matmul_flops[DLRT_F32] > 0 && m->vector_flops > 0 &&
                      m->memory_bytes_per_s > 0 && m->link_bytes_per_s > 0,
                  "dlrt_simulate_step: machine %s lacks a rate (GEMM %g, vector %g FLOP/s, "
                  "memory %g, link %g B/s)", m->name, m->matmul_flops[DLRT_F32], m->vector_flops,
                  m->memory_bytes_per_s, m->link_bytes_per_s);
  memset(out, 0, sizeof *out);
  /* Streamed parameters (--offload params) make their own copies; their
   * budget bounds the allocator, it does not spill. */
  int streaming = cfg->spill.policy == DLRT_OFFLOAD_PARAMS;
  int budget = cfg->spill.device_budget > 0 && !streaming;
  DLRT__CHECK_ARG(!budget || dev, "dlrt_simulate_step: a budget needs a device for its dry run");
  dlrt_graph_t *g = NULL;
  dlrt__schedule s = {0};
  dry_log log = {0};
  copy_list copies = {0};
  double *seconds = NULL, *ready = NULL, *wait_at = NULL, *host_done = NULL;
  int *grad_done = NULL, *first_use = NULL;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  int rc = dlrt_graph_create(&g);
  if (rc == DLRT_OK)
    rc = dlrt__build_classifier(g, cfg, channels, height, width, classes, &images, &labels,
                                &logits, &loss);
  int every = 0;
  if (rc == DLRT_OK && cfg->checkpoint != DLRT_CHECKPOINT_AUTO)
    every = dlrt__checkpoint_segment(g, cfg->checkpoint);
  uint64_t peak;
  dlrt__memory_breakdown at_peak;
  if (rc == DLRT_OK) rc = dlrt__graph_layout(g);
  if (rc == DLRT_OK) rc = dlrt__plan(g, DLRT__PHASE_UPDATE, every, &s, &peak, &at_peak);
  if (rc < 0) goto done;
  int n = s.n;
  seconds = calloc((size_t)(n ? n : 1), sizeof *seconds);
  wait_at = calloc((size_t)(n ? n : 1), sizeof *wait_at);
  ready = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *ready);
  host_done = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *host_done);
  grad_done = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *grad_done);
  first_use = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *first_use);
  if (!seconds || !wait_at || !ready || !host_done || !grad_done || !first_use) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    goto done;
  }
  /* Each node's time, and the step's FLOPs; DLRT_SIMULATE_TRACE=1 prints
   * them (stderr). */
  const char *trace_env = getenv("DLRT_SIMULATE_TRACE");
  int trace = trace_env && *trace_env && strcmp(trace_env, "0") != 0;
  for (int k = 0; k < n; k++) {
    const dlrt__node *node = g->nodes[s.order[k]];
    int runs = 1;
    if (s.block_of && s.block_of[k] >= 0) {
      const dlrt__chunk_block *b = &s.blocks[s.block_of[k]];
      runs = (int)((b->batch + b->chunk - 1) / b->chunk);
    }
    dlrt__op_cost c;
    seconds[k] = node_seconds(m, node, runs, &c);
    if (trace)
      fprintf(stderr, "simulate %5d %-9s %-22s %-10s %4s %12.4g %12.4g %12.4g B %10.3f us\n", k,
              node->phase == DLRT__PHASE_FORWARD ? "forward"
              : node->phase == DLRT__PHASE_BACKWARD ? "backward" : "update",
              dlrt__op_name(node->op), node->n_out ? node->out[0]->name : "(update)",
              dlrt_dtype_name(c.matmul_dtype), c.matmul_flops, c.vector_flops,
              c.bytes_read + c.bytes_written, seconds[k] * 1e6);
    out->flops += c.matmul_flops + c.vector_flops;
    out->launches += runs * c.launches;
    if (node->phase == DLRT__PHASE_FORWARD) out->forward_s += seconds[k];
    else if (node->phase == DLRT__PHASE_BACKWARD) out->backward_s += seconds[k];
    else out->update_s += seconds[k];
  }
  out->nodes = n;
  /* The trainer's exchange between steps, the device idle through it: the
   * loss read back (and a classifier's logits), the next inputs copied in. */
  out->exchange_s = dlrt__exchange_s(m, dlrt__gpt_model(cfg, NULL) ? 1 : 2,
                                     (double)(dlrt__tensor_bytes(images) +
                                              dlrt__tensor_bytes(labels)));
  /* This machine: the nodes as measured at their own shapes, and the
   * exchange as the profile timed it. */
  if (dev && strcmp(m->name, "this") == 0) {
    int measured;
    if ((rc = measured_seconds(cfg, channels, height, width, classes, dev, g, &s, seconds,
                               &out->exchange_s, &measured)) < 0)
      goto done;
    if (measured) {
      out->forward_s = out->backward_s = out->update_s = 0;
      for (int k = 0; k < n; k++) {
        const dlrt__node *node = g->nodes[s.order[k]];
        if (node->phase == DLRT__PHASE_FORWARD) out->forward_s += seconds[k];
        else if (node->phase == DLRT__PHASE_BACKWARD) out->backward_s += seconds[k];
        else out->update_s += seconds[k];
      }
      out->nodes_measured = 1;
      for (int k = 0; trace && k < n; k++)
        fprintf(stderr, "measured %5d %-22s %-22s %10.3f us\n", k,
                dlrt__op_name(g->nodes[s.order[k]]->op),
                g->nodes[s.order[k]]->n_out ? g->nodes[s.order[k]]->out[0]->name : "(update)",
                seconds[k] * 1e6);
    }
  }
  /* The copies. */
  int host_updates = 0; /* the offload model: updates on the host, overlapped */
  /* The updates' host time, where the profile ran them on the host. */
  const double *host_measured = out->nodes_measured && offloaded(cfg) ? seconds : NULL;
  if (budget) {
    if ((rc = dry_run(cfg, channels, height, width, classes, dev, &log)) < 0) goto done;
    if (log.nodes != n) {
      rc = dlrt__set_error(DLRT_ERR_STATE, "the dry run ran %d nodes where the schedule has "
                           "%d: its copies cannot be placed", log.nodes, n);
      goto done;
    }
    for (int i = 0; i < log.copies.n; i++) {
      sim_copy c = log.copies.v[i];
      if (c.pos > n) c.pos = n;
      if (!c.on_compute && c.pos < n)
        c.need = prefetch_need(g, &s, c.pos, cfg->spill.prefetch, c.bytes);
      if ((rc = copies_add(&copies, c, log.copies.measured_s[i])) < 0) goto done;
      if (trace)
        fprintf(stderr, "copy %5d %s %-7s %12.0f B %10.3f us (the dry run's)\n", c.pos,
                c.dir == DLRT__LINK_H2D ? "in " : "out", c.on_compute ? "compute" : "engine",
                c.bytes, log.copies.measured_s[i] * 1e6);
    }
    snprintf(out->copies_from, sizeof out->copies_from, "a dry run of the executor on %s",
             dlrt_device_spec(dev));
  } else if (offloaded(cfg)) {
    host_updates = 1;
    snprintf(out->copies_from, sizeof out->copies_from, "the optimizer on the host");
  } else {
    snprintf(out->copies_from, sizeof out->copies_from, "none");
  }
  /* The loader's next batch, queued at the step's start and needed by the
   * next step. */
  double batch_bytes = (double)(dlrt__loader_device_bytes(cfg, cfg->batch,
                                                          channels * height * width) /
                                (uint64_t)(cfg->prefetch > 0 ? cfg->prefetch : 1));
  if (streaming) {
    int ahead = cfg->spill.prefetch > 0 ? cfg->spill.prefetch : 4; /* the trainer's */
    if ((rc = dlrt__sim_stream_replay(g, &s, seconds, ahead, batch_bytes,
                                      cfg->spill.host_budget, m, out)) < 0)
      goto done;
    /* The disk's cost to the step: beyond the same step with all the
     * state in host memory (a second replay; the disk's delays reach the
     * step through the host's updates, not only where the compute waits). */
    if (out->params_on_disk && m->disk_read_bytes_per_s > 0 && m->disk_write_bytes_per_s > 0) {
      dlrt_simulated_step in_host;
      memset(&in_host, 0, sizeof in_host);
      if ((rc = dlrt__sim_stream_replay(g, &s, seconds, ahead, batch_bytes, 0, m, &in_host)) < 0)
        goto done;
      out->exposed_disk_s = out->step_s > in_host.step_s ? out->step_s - in_host.step_s : 0;
    }
    out->ahead = ahead;
    snprintf(out->copies_from, sizeof out->copies_from, "parameters streamed from the host, "
             "%d nodes ahead%s", ahead, !out->params_on_disk ? ""
             : m->disk_read_bytes_per_s > 0 && m->disk_write_bytes_per_s > 0
                 ? "; state on disk" : "; state on disk, no disk figures");
    goto summary;
  }
  /* The offload model's dependencies: where each gradient is complete
   * (its storage last written before the updates), each parameter's first
   * use. */
  for (int i = 0; i < g->n_tensors; i++) grad_done[i] = -1, first_use[i] = s.first[i];
  if (host_updates)
    for (int k = 0; k < n; k++) {
      const dlrt__node *node = g->nodes[s.order[k]];
      if (node->phase != DLRT__PHASE_BACKWARD) continue;
      for (int j = 0; j < node->n_out; j++) grad_done[node->out[j]->owner->id] = k;
    }
  replay r = {.m = m, .p = out};
  int measured_copies = budget && strcmp(m->name, "this") == 0;
  double step_start = 0, backward_start = 0, backward_end = 0, batch_ready = 0;
  double host_in_backward = 0;
  int steps = host_updates ? 3 : 1;
  for (int step = 0; step < steps; step++) {
    r.counting = step == steps - 1;
    step_start = r.t;
    for (int k = 0; k < n; k++) wait_at[k] = 0;
    wait_until(&r, batch_ready, &out->exposed_transfer_s);
    sim_copy next_batch = {0, -1, DLRT__LINK_H2D, 0, batch_bytes};
    batch_ready = copy_end(&r, r.t, &next_batch);
    int ci = 0, updates_done = 0;
    for (int k = 0; k < n; k++) {
      const dlrt__node *node = g->nodes[s.order[k]];
      /* Copies placed at k: those on the compute stream first (the node
       * waits for them), then those on the copy engine, issued now and
       * waited for by the node that needs them. */
      double start = r.t;
      for (int i = ci; i < copies.n && copies.v[i].pos == k; i++)
        if (copies.v[i].on_compute)
          wait_until(&r, list_copy_end(&r, r.t, &copies, i, measured_copies),
                     &out->exposed_transfer_s);
      for (; ci < copies.n && copies.v[ci].pos == k; ci++) {
        const sim_copy *c = &copies.v[ci];
        if (c->on_compute) continue;
        double end = list_copy_end(&r, start, &copies, ci, measured_copies);
        if (c->need >= k && end > wait_at[c->need]) wait_at[c->need] = end;
      }
      wait_until(&r, wait_at[k], &out->exposed_transfer_s);
      if (host_updates)
        for (int j = 0; j < node->n_in; j++) {
          const dlrt_tensor_t *t = node->in[j]->owner;
          if (t->kind == DLRT__TENSOR_PARAM && first_use[t->id] == k && ready[t->id] > r.t) {
            /* Waiting for a parameter: for its update on the host until
             * that ends, then for its copy in. */
            double host = host_done[t->id] > r.t ? host_done[t->id] - r.t : 0;
            if (host > ready[t->id] - r.t) host = ready[t->id] - r.t;
            if (r.counting) {
              out->exposed_host_s += host;
              out->exposed_transfer_s += ready[t->id] - r.t - host;
            }
            r.t = ready[t->id];
          }
        }
      if (node->phase == DLRT__PHASE_BACKWARD &&
          (k == 0 || g->nodes[s.order[k - 1]]->phase == DLRT__PHASE_FORWARD))
        backward_start = r.t;
      if (is_update(node) && host_updates) {
        if (!updates_done) {
          if ((rc = offload_updates(&r, g, &s, k, grad_done, ready, host_done, backward_start,
                                    backward_end, host_measured, &host_in_backward)) < 0)
            goto done;
          updates_done = 1;
        }
        continue;
      }
      if (is_update(node) && log.on_host && log.on_host[k]) {
        /* The executor's own host update: the compute stream waits. */
        double host_s = host_seconds(m, node, host_measured, k);
        r.t += host_s;
        out->host_update_s += host_s;
        out->exposed_host_s += host_s;
        out->update_s -= seconds[k]; /* not on the device */
        continue;
      }
      r.t += seconds[k];
      if (node->phase == DLRT__PHASE_BACKWARD) backward_end = r.t;
      if (host_updates)
        for (int j = 0; j < node->n_out; j++)
          if (grad_done[node->out[j]->owner->id] == k) ready[node->out[j]->owner->id] = r.t;
    }
    /* The copies the pool made after the last node (write-backs of what
     * the updates wrote, room for the next step's first nodes): the next
     * step starts once they are done (a dry run's trace shows its steps
     * that far apart). */
    for (; ci < copies.n; ci++)
      wait_until(&r, list_copy_end(&r, r.t, &copies, ci, measured_copies),
                 &out->exposed_transfer_s);
  }
  /* The last step, from its start (its first nodes waited for the previous
   * step's parameters: the steady state) to its last node. */
  out->step_s = r.t - step_start;
  if (host_updates) {
    out->host_hidden_fraction = out->host_update_s > 0 ? host_in_backward / out->host_update_s
                                                       : 0;
    out->host_hidden_s = host_in_backward;
    out->update_s = 0; /* the device runs no update */
  }
summary:
  out->step_s += out->exchange_s;
  out->compute_s = out->forward_s + out->backward_s + out->update_s;
  out->samples_per_s = cfg->batch / out->step_s;
  if (dlrt__gpt_model(cfg, NULL)) out->tokens_per_s = out->samples_per_s * (double)width;
  out->mfu = out->flops / out->step_s / m->peak_matmul_flops_bf16;
done:
  free(seconds);
  free(wait_at);
  free(ready);
  free(host_done);
  free(grad_done);
  free(first_use);
  free(copies.v), free(copies.measured_s);
  free(log.copies.v), free(log.copies.measured_s);
  free(log.on_host);
  dlrt__schedule_free(&s);
  dlrt_graph_destroy(g);
  return rc;
}
