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
 *    replayed on its rules (stream_replay below);
 *  - none of these: the loader's batch alone, overlapped. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/link_model.h"
#include "exec/choose.h"
#include "exec/exec.h"
#include "exec/state_split.h"
#include "graph/cost.h"
#include "train/train.h"
#include "util/status.h"
#include "util/trace.h"

/* A copy of the replay: before position `pos` on the compute stream
 * (on_compute), or issued when `pos` starts on the copy engine and needed
 * by position `need` (-1: by none in this step); pos = the schedule's
 * length: after its last node (the step ends when it does). */
typedef struct {
  int pos, need, dir, on_compute;
  double bytes;
} sim_copy;

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

/* Bytes the host optimizer streams for update node n: Adam reads the fp32
 * parameter, two moments and the gradient and writes three; SGD one state. */
static double host_update_bytes(const dlrt__node *n) {
  double count = (double)n->in[0]->numel;
  return n->op == DLRT__OP_ADAM ? 28.0 * count : 20.0 * count;
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

static int is_update(const dlrt__node *n) {
  return n->op == DLRT__OP_SGD || n->op == DLRT__OP_ADAM;
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
                            int *measured) {
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
  if (rc == DLRT_OK) rc = dlrt__op_costs_measure_steps(e, 3, 1, &costs);
  if (link_off && dlrt_link_set(dev, spec) < 0 && rc == DLRT_OK) rc = DLRT_ERR_STATE;
  int same = rc == DLRT_OK && g2->n_nodes == g->n_nodes && costs.n_nodes == g->n_nodes;
  for (int i = 0; same && i < g->n_nodes; i++)
    same = g2->nodes[i]->op == g->nodes[i]->op && g2->nodes[i]->phase == g->nodes[i]->phase;
  if (same) {
    /* Each node as timed on the stream, and the dispatch per node that
     * the whole step measured beyond them. */
    for (int k = 0; k < s->n; k++)
      seconds[k] = (costs.node_ms[s->order[k]] + costs.dispatch_ms) / 1e3;
    *measured = 1;
    const char *trace = getenv("DLRT_SIMULATE_TRACE");
    if (trace && *trace && strcmp(trace, "0") != 0)
      fprintf(stderr, "profile %s: %d passes, their spread (q3 - q1) / median %.1f%%, %.3f ms "
              "of stream hand-offs left out, updates timed on the %s; the step queued whole "
              "%.3f ms over its nodes' %.3f ms, %.3f us of dispatch per node\n",
              costs.cached ? "cached" : "measured now", costs.passes, 100 * costs.spread,
              costs.handoff_ms, offloaded(cfg) ? "host" : "device", costs.step_ms,
              costs.nodes_ms, costs.dispatch_ms * 1e3);
  }
  dlrt__op_costs_free(&costs);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g2);
  if (rc < 0 && rc != DLRT_ERR_OOM) return rc;
  dlrt_clear_error(); /* out of memory: the roofline */
  return DLRT_OK;
}

/* ---------------------------------------------------------------- replay */

typedef struct {
  const dlrt_machine *m;
  double t;             /* the compute stream's clock */
  double engine[2];     /* when each copy engine is free */
  double host_free;     /* the host optimizer's clock */
  dlrt_simulated_step *p;
  int counting;         /* the step that is counted */
} replay;

/* When copy c, issued at `issue`, ends on its engine, taking `seconds`. */
static double copy_end_taking(replay *r, double issue, const sim_copy *c, double seconds) {
  dlrt__link_engine e = {.free_at = r->engine[c->dir]};
  double end = dlrt__link_engine_take(&e, issue, seconds, (uint64_t)c->bytes);
  r->engine[c->dir] = end;
  if (r->counting) {
    r->p->transfer_s += seconds;
    r->p->copies++;
    if (c->dir == DLRT__LINK_H2D) r->p->h2d_bytes += (uint64_t)c->bytes;
    else r->p->d2h_bytes += (uint64_t)c->bytes;
  }
  return end;
}

/* The same at the link model's time. */
static double copy_end(replay *r, double issue, const sim_copy *c) {
  return copy_end_taking(r, issue, c, dlrt__link_seconds(r->m->link_bytes_per_s,
                                                         r->m->link_latency_s,
                                                         (uint64_t)c->bytes));
}

/* Copy i of l issued at `issue`: on this machine (measured), as long as
 * its dry run's took (the pool's own copy, its staging and bookkeeping with
 * it, not the bare link's); elsewhere the link model's. */
static double list_copy_end(replay *r, double issue, const copy_list *l, int i, int measured) {
  if (measured && l->measured_s[i] > 0)
    return copy_end_taking(r, issue, &l->v[i], l->measured_s[i]);
  return copy_end(r, issue, &l->v[i]);
}

/* The compute stream waits until `until`. */
static void wait_until(replay *r, double until, double *exposed) {
  if (until > r->t) {
    if (r->counting) *exposed += until - r->t;
    r->t = until;
  }
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

/* ---------------------------------------------------------------- streaming */

/* --offload params (lib/exec/param_stream.c), replayed on its own rules:
 * each parameter an fp32 SGD or Adam update trains lives on the host; at
 * the start of position k the parameters of positions k .. k + ahead that
 * are not on the device are fetched on the host-to-device engine (issued
 * when the compute stream reaches k: the copy waits for what was queued
 * before it), and k waits for its own; after a use whose next use is more
 * than `ahead` positions away the copy is freed, so the forward and the
 * backward pass each fetch a block's weights. A gradient goes out on the
 * device-to-host engine when the last node that touches it ends; its
 * update runs on the host thread (one at a time, at host memory speed)
 * once the gradient is there and the parameter's last use has run; the
 * update nodes at the step's end wait for them. Steps do not overlap (the
 * update nodes join the host thread), so one step after a first is the
 * steady state. With the optimizer state of some on disk (a host budget:
 * stream_disk below) the disk's I/O runs on across steps, so two steps
 * after a first are. */
typedef struct {
  int id, grad;           /* storages */
  double bytes;           /* the fp32 parameter's (and its gradient's) */
  double host_s;          /* its update on the host */
  int grad_made, grad_last, ready; /* positions: the gradient's first write, its last
                                      touch, and when its update may start */
  int resident;           /* on the device now */
  double fetched, grad_out, host_begin, host_done;
  /* Its optimizer state on disk: the state's bytes (else 0), where it is
   * in the round's order of disk updates, whether its file slot holds
   * data yet, and when its update waited for its read. */
  double state_bytes;
  int seq_pos, written;
} streamed_param;

/* ---------------------------------------------------------- the state on disk */

/* param_disk.c's rules, replayed: one I/O thread takes reads and writes in
 * the order they are queued, at the machine's disk rates (a slot never
 * written reads as zeros: no disk time); DLRT__STATE_SLOTS host slots. At a
 * round's start (the forward pass) the first two states in update order
 * are read ahead into free slots; an update takes its state (read now if
 * it is in no slot: a miss, into the least recently used clean slot,
 * waiting for one if none is), reads the next two ahead into slots that
 * are free or hold a state handed out this round and clean by then, and
 * writes its state back behind it. */
typedef struct {
  int owner;        /* streamed parameter, -1: none */
  int in_use;       /* handed out to an update, not yet put back */
  double clean_at;  /* when its read or write ends */
  uint64_t last;    /* when it was last handed out (least recently used goes first) */
} disk_slot;

typedef struct {
  const dlrt_machine *m;
  streamed_param *p;
  int *slot_of;     /* per streamed parameter: its slot, -1: none */
  uint64_t *used;   /* per streamed parameter: the round it was last handed out in */
  int *seq, n_seq;  /* the round's order of updates with state on disk */
  disk_slot s[DLRT__STATE_SLOTS];
  double io_free;   /* when the I/O thread is free */
  uint64_t round, clock;
  dlrt_simulated_step *out;
  int counting;
} stream_disk;

/* One read or write of parameter i's state queued at `issue`: when it ends. */
static double disk_io(stream_disk *d, int i, double issue, int write) {
  double begin = issue > d->io_free ? issue : d->io_free, bytes = d->p[i].state_bytes;
  double seconds = write ? bytes / d->m->disk_write_bytes_per_s
                   : d->p[i].written ? bytes / d->m->disk_read_bytes_per_s : 0;
  d->io_free = begin + seconds;
  if (d->counting) {
    d->out->disk_s += seconds;
    if (write) d->out->disk_written_bytes += (uint64_t)bytes;
    else if (d->p[i].written) d->out->disk_read_bytes += (uint64_t)bytes;
  }
  if (write) d->p[i].written = 1;
  return d->io_free;
}

/* A slot at time t (param_disk.c's slot_for): a free one, else the least
 * recently used clean one (for a read ahead, only one whose state was
 * handed out this round); -1: none. */
static int disk_slot_for(stream_disk *d, double t, int ahead) {
  int best = -1;
  for (int k = 0; k < DLRT__STATE_SLOTS; k++) {
    const disk_slot *x = &d->s[k];
    if (x->owner < 0) return k;
    if (x->in_use || x->clean_at > t || (ahead && d->used[x->owner] != d->round)) continue;
    if (best < 0 || x->last < d->s[best].last) best = k;
  }
  return best;
}

static void disk_read_into(stream_disk *d, int i, int k, double t) {
  disk_slot *x = &d->s[k];
  if (x->owner >= 0) d->slot_of[x->owner] = -1;
  x->owner = i, d->slot_of[i] = k;
  x->clean_at = disk_io(d, i, t, 0);
}

static void disk_prefetch(stream_disk *d, int pos, double t) {
  if (pos >= d->n_seq || d->slot_of[d->seq[pos]] >= 0) return;
  int k = disk_slot_for(d, t, 1);
  if (k >= 0) disk_read_into(d, d->seq[pos], k, t);
}

static void disk_new_round(stream_disk *d, double t) {
  d->round++;
  /* The runtime's slots hold chunks, not whole states: nothing read in one
   * round is still there in the next, and every state on disk is read
   * again (behind its write-back, the I/O thread taking both in order). */
  for (int k = 0; k < DLRT__STATE_SLOTS; k++)
    if (d->s[k].owner >= 0 && !d->s[k].in_use) {
      d->slot_of[d->s[k].owner] = -1;
      d->s[k].owner = -1;
    }
  for (int pos = 0; pos < 2; pos++) disk_prefetch(d, pos, t);
}

/* Parameter i's update wants its state at `want`: when it has it. */
static double disk_get(stream_disk *d, int i, double want) {
  double t = want;
  for (;;) {
    int k = d->slot_of[i];
    if (k >= 0) {
      if (d->s[k].clean_at > t) t = d->s[k].clean_at;
      d->s[k].in_use = 1, d->s[k].last = ++d->clock;
      d->used[i] = d->round;
      break;
    }
    if ((k = disk_slot_for(d, t, 0)) >= 0) {
      disk_read_into(d, i, k, t);
      continue;
    }
    /* Every slot busy: until the first of them is clean. */
    double next = INFINITY;
    for (int j = 0; j < DLRT__STATE_SLOTS; j++)
      if (!d->s[j].in_use && d->s[j].clean_at < next) next = d->s[j].clean_at;
    if (!isfinite(next)) break; /* cannot happen: one update at a time */
    t = next;
  }
  for (int pos = d->p[i].seq_pos + 1; pos <= d->p[i].seq_pos + 2; pos++) disk_prefetch(d, pos, t);
  return t;
}

static void disk_put(stream_disk *d, int i, double t) {
  int k = d->slot_of[i];
  if (k < 0) return;
  d->s[k].in_use = 0;
  d->s[k].clean_at = disk_io(d, i, t, 1);
}

/* Parameter q's update on the host thread from `begin` on (its state read
 * first where it is on disk, written back behind it). */
static void host_update(stream_disk *d, streamed_param *q, double begin, double *host_free) {
  double start = begin;
  if (d && q->state_bytes > 0) {
    start = disk_get(d, (int)(q - d->p), begin);
    if (d->counting) d->out->disk_wait_s += start - begin;
  }
  q->host_begin = start, q->host_done = *host_free = start + q->host_s;
  if (d && q->state_bytes > 0) disk_put(d, (int)(q - d->p), q->host_done);
}

/* Whether node n is the forward cast of a streamed master into its 16-bit
 * copy, itself streamed (of_id >= 0 for both): param_stream.c makes that
 * copy on the host after each update, so the node does not run. */
static int is_host_cast(const int *of_id, const dlrt__node *n) {
  return n->op == DLRT__OP_CAST && n->phase == DLRT__PHASE_FORWARD &&
         of_id[n->in[0]->owner->id] >= 0 && of_id[n->out[0]->id] >= 0;
}

/* The streamed parameter that node n reads as input j (once per node), or -1. */
static int stream_param_of(const int *of_id, const dlrt__node *n, int j) {
  if (is_update(n) || is_host_cast(of_id, n)) return -1;
  int i = of_id[n->in[j]->owner->id];
  for (int j2 = 0; j2 < j && i >= 0; j2++)
    if (of_id[n->in[j2]->owner->id] == i) i = -1;
  return i;
}

static int stream_replay(const dlrt_graph_t *g, const dlrt__schedule *s, const double *seconds,
                         int ahead, double batch_bytes, uint64_t host_budget,
                         const dlrt_machine *m, dlrt_simulated_step *out) {
  int n = s->n, np = 0, rc = DLRT_OK;
  int *of_id = malloc(sizeof(int) * (size_t)(g->n_tensors ? g->n_tensors : 1));
  streamed_param *p = calloc((size_t)(n ? n : 1), sizeof *p);
  int *update_of = malloc(sizeof(int) * (size_t)(n ? n : 1));
  /* Uses, CSR style: position k reads use[use_at[k] .. use_at[k + 1]], and
   * use_next[u] is that parameter's next use after k (INT32_MAX: none). */
  int *use_at = calloc((size_t)n + 1, sizeof(int)), *use = NULL, *use_next = NULL, *seen = NULL;
  int *seen_grad = malloc(sizeof(int) * (size_t)(g->n_tensors ? g->n_tensors : 1));
  stream_disk disk = {.m = m, .p = p, .out = out}, *dk = NULL;
  if (!of_id || !p || !update_of || !use_at || !seen_grad) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    goto done;
  }
  for (int i = 0; i < g->n_tensors; i++) of_id[i] = -1;
  /* The streamed parameters, as dlrt_exec_offload_params picks them. */
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    update_of[k] = -1;
    if (!is_update(nd)) continue;
    const dlrt_tensor_t *param = nd->in[0];
    if (param->owner != param || param->dtype != DLRT_F32) continue;
    if (of_id[param->id] >= 0) continue; /* the executor streams it once */
    int states = nd->op == DLRT__OP_SGD ? 1 : 2;
    streamed_param *q = &p[np];
    q->id = param->id;
    q->grad = nd->in[states + 1]->owner->id;
    q->bytes = (double)dlrt__tensor_bytes(param);
    q->host_s = host_update_bytes(nd) / m->host_bytes_per_s;
    q->grad_made = q->grad_last = q->ready = -1;
    update_of[k] = np;
    of_id[q->id] = np++;
  }
  /* Mixed precision: a master's 16-bit copy (the first forward cast of it
   * into an f16 or bf16 tensor of its own) is streamed in its place to
   * every node that reads the copy, at 2 B a parameter; the master itself
   * only to fp32 readers (layer norms, a tied embedding's fp32 head). The
   * copy has no gradient; the host casts it after the update. */
  int masters = np;
  for (int i = 0; i < masters; i++) {
    for (int k = 0; k < n; k++) {
      const dlrt__node *nd = g->nodes[s->order[k]];
      if (nd->op != DLRT__OP_CAST || nd->phase != DLRT__PHASE_FORWARD ||
          nd->in[0]->id != p[i].id)
        continue;
      const dlrt_tensor_t *low = nd->out[0];
      if (low->owner != low || (low->dtype != DLRT_F16 && low->dtype != DLRT_BF16) ||
          of_id[low->id] >= 0)
        continue;
      streamed_param *q = &p[np];
      q->id = low->id;
      q->grad = -1;
      q->bytes = (double)dlrt__tensor_bytes(low);
      q->grad_made = q->grad_last = q->ready = -1;
      p[i].host_s += (p[i].bytes + q->bytes) / m->host_bytes_per_s;
      of_id[q->id] = np++;
      break;
    }
  }
  /* The optimizer state on disk under the host budget, split by the
   * runtime's rule; replayed where the machine has disk figures. */
  if (host_budget) {
    int ns = 0, *sid = NULL, *sstates = NULL;
    uint64_t *sbytes = NULL;
    char *on_disk = NULL;
    dlrt__state_split split;
    rc = dlrt__streamed_states(g, &ns, &sid, &sbytes, &sstates);
    if (rc == DLRT_OK && !(on_disk = malloc((size_t)(ns ? ns : 1))))
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    if (rc == DLRT_OK)
      rc = dlrt__state_split_make(ns, sbytes, sstates, host_budget, on_disk, &split);
    for (int j = 0; rc == DLRT_OK && j < ns; j++)
      if (on_disk[j] && of_id[sid[j]] >= 0) {
        p[of_id[sid[j]]].state_bytes = (double)sbytes[j];
        out->params_on_disk++;
        out->state_disk_bytes += sbytes[j];
      }
    free(sid), free(sbytes), free(sstates), free(on_disk);
    if (rc == DLRT_OK && !split.fits)
      rc = dlrt__set_error(DLRT_ERR_OOM, "a host budget of %.3f MiB is too small for the "
                           "optimizer state of the streamed parameters: give at least %.3f MiB "
                           "(its slots of the least chunks)",
                           (double)host_budget / 1048576.0,
                           (double)split.least_host_bytes / 1048576.0);
    if (rc < 0) goto done;
    if (out->params_on_disk && m->disk_read_bytes_per_s > 0 && m->disk_write_bytes_per_s > 0) {
      dk = &disk;
      disk.slot_of = malloc(sizeof(int) * (size_t)np);
      disk.used = calloc((size_t)np, sizeof(uint64_t));
      disk.seq = malloc(sizeof(int) * (size_t)np);
      if (!disk.slot_of || !disk.used || !disk.seq) {
        rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
        goto done;
      }
      for (int i = 0; i < np; i++) disk.slot_of[i] = -1;
      for (int k = 0; k < DLRT__STATE_SLOTS; k++) disk.s[k].owner = -1;
    }
  }
  /* The device runs the updates of what it does not stream only. */
  out->update_s = 0;
  for (int k = 0; k < n; k++)
    if (update_of[k] < 0 && is_update(g->nodes[s->order[k]])) out->update_s += seconds[k];
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    use_at[k + 1] = use_at[k];
    for (int j = 0; j < nd->n_in; j++) use_at[k + 1] += stream_param_of(of_id, nd, j) >= 0;
  }
  use = malloc(sizeof(int) * (size_t)(use_at[n] ? use_at[n] : 1));
  use_next = malloc(sizeof(int) * (size_t)(use_at[n] ? use_at[n] : 1));
  seen = malloc(sizeof(int) * (size_t)(np ? np : 1));
  if (!use || !use_next || !seen) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    goto done;
  }
  for (int i = 0; i < np; i++) seen[i] = INT32_MAX;
  for (int k = n - 1; k >= 0; k--) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    int u = use_at[k];
    for (int j = 0; j < nd->n_in; j++) {
      int i = stream_param_of(of_id, nd, j);
      if (i < 0) continue;
      use[u] = i, use_next[u++] = seen[i];
    }
    for (int u2 = use_at[k]; u2 < use_at[k + 1]; u2++) seen[use[u2]] = k;
  }
  /* Where each gradient is made and last touched, and each parameter's
   * update may start (after both its gradient and its last use). */
  for (int i = 0; i < g->n_tensors; i++) seen_grad[i] = -1;
  for (int i = 0; i < np; i++)
    if (p[i].grad >= 0) seen_grad[p[i].grad] = i;
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    if (is_update(nd)) continue;
    for (int j = 0; j < nd->n_in + nd->n_out; j++) {
      const dlrt_tensor_t *x = j < nd->n_in ? nd->in[j] : nd->out[j - nd->n_in];
      int i = seen_grad[x->owner->id];
      if (i < 0) continue;
      if (p[i].grad_made < 0 && j >= nd->n_in) p[i].grad_made = k;
      p[i].grad_last = k;
    }
    for (int j = 0; j < nd->n_in; j++) {
      int i = stream_param_of(of_id, nd, j);
      if (i >= 0 && k > p[i].ready) p[i].ready = k;
    }
  }
  for (int i = 0; i < np; i++)
    if (p[i].grad_last < 0) p[i].ready = -1; /* no gradient: updated at its node */
    else if (p[i].grad_last > p[i].ready) p[i].ready = p[i].grad_last;
  /* The round's order of updates with state on disk: as the host thread
   * takes them (by the position their update may start at), then those
   * without a gradient at their update nodes (param_stream.c's
   * plan_disk_reads). */
  for (int k = 0; dk && k < n; k++)
    for (int i = 0; i < np; i++)
      if (p[i].ready == k && p[i].state_bytes > 0) p[i].seq_pos = disk.n_seq, disk.seq[disk.n_seq++] = i;
  for (int k = 0; dk && k < n; k++) {
    int i = update_of[k];
    if (i >= 0 && p[i].ready < 0 && p[i].state_bytes > 0)
      p[i].seq_pos = disk.n_seq, disk.seq[disk.n_seq++] = i;
  }
  replay r = {.m = m, .p = out};
  double step_start = 0, batch_ready = 0, bw0 = -1, bw1 = 0;
  uint64_t resident = 0, grads_live = 0;
  int steps = dk ? 3 : 2;
  for (int step = 0; step < steps; step++) {
    r.counting = disk.counting = step == steps - 1;
    step_start = r.t;
    if (dk) disk_new_round(dk, r.t);
    wait_until(&r, batch_ready, &out->exposed_transfer_s);
    sim_copy next_batch = {0, -1, DLRT__LINK_H2D, 0, batch_bytes};
    batch_ready = copy_end(&r, r.t, &next_batch);
    for (int i = 0; i < np; i++) p[i].resident = 0, p[i].host_done = 0;
    resident = 0;
    for (int k = 0; k < n; k++) {
      const dlrt__node *nd = g->nodes[s->order[k]];
      if (update_of[k] >= 0) {
        /* The update node joins the host thread (or runs the update itself
         * when nothing queued it: a parameter without a gradient). */
        streamed_param *q = &p[update_of[k]];
        if (q->ready < 0) {
          host_update(dk, q, r.t > r.host_free ? r.t : r.host_free, &r.host_free);
          if (r.counting) out->host_update_s += q->host_s;
        }
        /* Waiting for its gradient's copy is the link's; after that, the
         * host's (the disk's delays of the host included). */
        if (q->ready >= 0) wait_until(&r, q->grad_out, &out->exposed_transfer_s);
        if (q->host_done > r.t) {
          if (r.counting) out->exposed_host_s += q->host_done - r.t;
          r.t = q->host_done;
        }
        continue;
      }
      /* The fetches of positions k .. k + ahead. */
      for (int a = k; a <= k + ahead && a < n; a++) {
        for (int u = use_at[a]; u < use_at[a + 1]; u++) {
          int i = use[u];
          if (p[i].resident) continue;
          sim_copy in = {k, a, DLRT__LINK_H2D, 0, p[i].bytes};
          p[i].fetched = copy_end(&r, r.t, &in);
          p[i].resident = 1;
          resident += (uint64_t)p[i].bytes;
          if (r.counting && resident > out->param_peak_bytes) out->param_peak_bytes = resident;
        }
      }
      for (int u = use_at[k]; u < use_at[k + 1]; u++)
        wait_until(&r, p[use[u]].fetched, &out->exposed_transfer_s);
      if (nd->phase == DLRT__PHASE_BACKWARD && bw0 < 0 && r.counting) bw0 = r.t;
      for (int i = 0; i < np; i++)
        if (p[i].grad_made == k) {
          grads_live += (uint64_t)p[i].bytes;
          if (r.counting && grads_live > out->grad_peak_bytes) out->grad_peak_bytes = grads_live;
        }
      if (!is_host_cast(of_id, nd)) r.t += seconds[k];
      if (nd->phase == DLRT__PHASE_BACKWARD && r.counting) bw1 = r.t;
      /* Gradients complete here go out; updates that may start, start. */
      for (int i = 0; i < np; i++) {
        if (p[i].grad_last == k) {
          sim_copy o = {k, -1, DLRT__LINK_D2H, 0, p[i].bytes};
          p[i].grad_out = copy_end(&r, r.t, &o);
          grads_live -= (uint64_t)p[i].bytes;
        }
        if (p[i].ready == k) {
          double begin = p[i].grad_out > r.host_free ? p[i].grad_out : r.host_free;
          if (r.t > begin) begin = r.t;
          host_update(dk, &p[i], begin, &r.host_free);
          if (r.counting) out->host_update_s += p[i].host_s;
        }
      }
      /* Copies whose next use is beyond the window go. */
      for (int u = use_at[k]; u < use_at[k + 1]; u++) {
        int i = use[u];
        if (p[i].resident && use_next[u] > k + ahead) {
          p[i].resident = 0;
          resident -= (uint64_t)p[i].bytes;
        }
      }
    }
  }
  out->step_s = r.t - step_start;
  /* The part of the host update that ran beside the backward pass. */
  double hidden = 0;
  for (int i = 0; i < np && bw0 >= 0; i++) {
    double lo = p[i].host_begin > bw0 ? p[i].host_begin : bw0;
    double hi = p[i].host_done < bw1 ? p[i].host_done : bw1;
    if (hi > lo) hidden += hi - lo;
  }
  out->host_hidden_s = hidden;
  out->host_hidden_fraction = out->host_update_s > 0 ? hidden / out->host_update_s : 0;
  out->params_streamed = masters;
done:
  free(of_id);
  free(p);
  free(update_of);
  free(use_at), free(use), free(use_next), free(seen), free(seen_grad);
  free(disk.slot_of), free(disk.used), free(disk.seq);
  return rc;
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
  /* This machine: the nodes as measured at their own shapes. */
  if (dev && strcmp(m->name, "this") == 0) {
    int measured;
    if ((rc = measured_seconds(cfg, channels, height, width, classes, dev, g, &s, seconds,
                               &measured)) < 0)
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
    if ((rc = stream_replay(g, &s, seconds, ahead, batch_bytes, cfg->spill.host_budget, m,
                            out)) < 0)
      goto done;
    /* The disk's cost to the step: beyond the same step with all the
     * state in host memory (a second replay; the disk's delays reach the
     * step through the host's updates, not only where the compute waits). */
    if (out->params_on_disk && m->disk_read_bytes_per_s > 0 && m->disk_write_bytes_per_s > 0) {
      dlrt_simulated_step in_host;
      memset(&in_host, 0, sizeof in_host);
      if ((rc = stream_replay(g, &s, seconds, ahead, batch_bytes, 0, m, &in_host)) < 0) goto done;
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
