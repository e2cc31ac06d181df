/* op_costs.c — the cost model's measured half: each node of the training
 * schedule timed on the device by a short profiling pass (the median of
 * enough runs, each node between two events on the compute stream and
 * waited for), and beside each pass the step queued whole as training
 * runs it (its excess over the nodes: the dispatch per node), cached per
 * device, graph shape, chunked blocks and offload policy in the
 * process and, where DLRT_PROFILE_CACHE or XDG_CACHE_HOME names a folder,
 * in a file; and the host's memcpy rate, below which no copy on a device
 * that shares host memory goes, whatever its link model says. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/choose.h"
#include "exec/exec.h"
#include "exec/residency.h"
#include "util/clock.h"
#include "util/file.h"
#include "util/status.h"

/* ---------------------------------------------------------------- the key */

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/* The device (its spec and name) and the graph's shape: each node's op, and
 * its tensors' types and shapes, in order. Values do not enter it. */
static uint64_t costs_key(const dlrt_exec_t *e, int whole_steps, int exchange) {
  uint64_t h = 0xcbf29ce484222325ULL;
  dlrt_device_props props;
  const char *spec = dlrt_device_spec(e->dev);
  h = fnv(h, spec, strlen(spec));
  if (dlrt_device_props_get(e->dev, &props) == DLRT_OK) h = fnv(h, props.name, strlen(props.name));
  /* A profile with the whole steps (their dispatch) is not one without. */
  h = fnv(h, &whole_steps, sizeof whole_steps);
  /* Nor one with the caller's exchange around its steps one without. */
  h = fnv(h, &exchange, sizeof exchange);
  /* Updates offloaded to the host are timed there. */
  int policy = e->spill.pool ? (int)e->spill.cfg.policy : -1;
  h = fnv(h, &policy, sizeof policy);
  /* A chunked block (segments, or the slices a budget made) is timed
   * whole, its slice copies with it: the blocks enter the key, so a
   * profile under one budget is not another's. */
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  for (int b = 0; b < s->n_blocks; b++) {
    int64_t block[4] = {s->blocks[b].begin, s->blocks[b].end, s->blocks[b].batch,
                        s->blocks[b].chunk};
    h = fnv(h, block, sizeof block);
  }
  const dlrt_graph_t *g = e->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const dlrt__node *n = g->nodes[i];
    int head[4] = {(int)n->op, n->n_in, n->n_out, (int)n->phase};
    h = fnv(h, head, sizeof head);
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
      int dtype = (int)t->dtype;
      h = fnv(h, &dtype, sizeof dtype);
      h = fnv(h, t->shape, (size_t)t->ndim * sizeof *t->shape);
    }
  }
  return h;
}

/* ---------------------------------------------------------------- caches */

#define PROCESS_CACHE 16
static struct {
  uint64_t key;
  int n;
  double *ms;
  double memcpy_rate, copy_rate;
  int passes;
  double spread, handoff_ms, nodes_ms, step_ms, dispatch_ms, exchange_ms;
} cache[PROCESS_CACHE];
static int cache_used;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static int from_process(uint64_t key, dlrt__op_costs *c) {
  int found = 0;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < cache_used && !found; i++)
    if (cache[i].key == key && cache[i].n == c->n_nodes) {
      memcpy(c->node_ms, cache[i].ms, (size_t)c->n_nodes * sizeof *c->node_ms);
      c->memcpy_bytes_per_s = cache[i].memcpy_rate;
      c->copy_bytes_per_s = cache[i].copy_rate;
      c->passes = cache[i].passes, c->spread = cache[i].spread;
      c->handoff_ms = cache[i].handoff_ms;
      c->nodes_ms = cache[i].nodes_ms;
      c->step_ms = cache[i].step_ms, c->dispatch_ms = cache[i].dispatch_ms;
      c->exchange_ms = cache[i].exchange_ms;
      found = 1;
    }
  pthread_mutex_unlock(&cache_lock);
  return found;
}

static void to_process(uint64_t key, const dlrt__op_costs *c) {
  pthread_mutex_lock(&cache_lock);
  int slot = cache_used < PROCESS_CACHE ? cache_used++ : (int)(key % PROCESS_CACHE);
  double *ms = malloc((size_t)(c->n_nodes ? c->n_nodes : 1) * sizeof *ms);
  if (ms) {
    free(cache[slot].ms);
    memcpy(ms, c->node_ms, (size_t)c->n_nodes * sizeof *ms);
    cache[slot].key = key, cache[slot].n = c->n_nodes, cache[slot].ms = ms;
    cache[slot].memcpy_rate = c->memcpy_bytes_per_s;
    cache[slot].copy_rate = c->copy_bytes_per_s;
    cache[slot].passes = c->passes, cache[slot].spread = c->spread;
    cache[slot].handoff_ms = c->handoff_ms;
    cache[slot].nodes_ms = c->nodes_ms;
    cache[slot].step_ms = c->step_ms, cache[slot].dispatch_ms = c->dispatch_ms;
    cache[slot].exchange_ms = c->exchange_ms;
  }
  pthread_mutex_unlock(&cache_lock);
}

/* The cache file's path, or 0 when no folder is named. */
static int cache_path(uint64_t key, char *path, size_t size) {
  char name[64];
  snprintf(name, sizeof name, "profile-%016" PRIx64 ".txt", key);
  return dlrt__cache_file(name, path, size);
}

static int from_file(uint64_t key, dlrt__op_costs *c) {
  char path[600];
  if (!cache_path(key, path, sizeof path)) return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  /* Version 5: version 4's (nodes timed on the stream over filled inputs,
   * the whole step as training runs it and its dispatch per node, the key
   * covering the schedule's chunked blocks) with the caller's exchange
   * around each step (an older file lacks it: measured again). */
  int n = -1, ok = fscanf(f, "dlrt-profile-5 %d %lf %lf %d %lf %lf %lf %lf %lf %lf", &n,
                          &c->memcpy_bytes_per_s, &c->copy_bytes_per_s, &c->passes, &c->spread,
                          &c->handoff_ms, &c->nodes_ms, &c->step_ms, &c->dispatch_ms,
                          &c->exchange_ms) == 10 &&
                   n == c->n_nodes;
  for (int i = 0; ok && i < n; i++) ok = fscanf(f, "%lf", &c->node_ms[i]) == 1;
  fclose(f);
  return ok;
}

/* Written to a temporary name and renamed, so a reader never sees half. */
static void to_file(uint64_t key, const dlrt__op_costs *c) {
  char path[600], tmp[640];
  if (!cache_path(key, path, sizeof path)) return;
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "dlrt-profile-5 %d %.6e %.6e %d %.6f %.6f %.6f %.6f %.9f %.9f\n", c->n_nodes,
          c->memcpy_bytes_per_s, c->copy_bytes_per_s, c->passes, c->spread, c->handoff_ms,
          c->nodes_ms, c->step_ms, c->dispatch_ms, c->exchange_ms);
  for (int i = 0; i < c->n_nodes; i++) fprintf(f, "%.6f\n", c->node_ms[i]);
  if (fclose(f) == 0 && rename(tmp, path) == 0) return;
  unlink(tmp);
}

/* ---------------------------------------------------------------- measuring */

/* The profiling pass's repetitions: the caller's minimum, then more while
 * the counted passes have run for less than PROFILE_EXTRA_MS, at most
 * PROFILE_MAX_PASSES (a 4 ms step: 25 passes, 0.1 s; a 200 ms one: the
 * minimum). */
enum { PROFILE_MAX_PASSES = 25 };
#define PROFILE_EXTRA_MS 250.0

/* The host's memcpy rate, B/s: 16 MiB copied, best of 3. */
static double memcpy_rate(void) {
  size_t bytes = (size_t)16 << 20;
  char *a = malloc(bytes), *b = malloc(bytes);
  double best = 0;
  if (a && b) {
    memset(a, 1, bytes), memset(b, 2, bytes);
    for (int r = 0; r < 3; r++) {
      double t0 = dlrt__now_s();
      memcpy(b, a, bytes);
      double dt = dlrt__now_s() - t0;
      if (dt > 0 && (double)bytes / dt > best) best = (double)bytes / dt;
    }
  }
  free(a), free(b);
  return best;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0 .. n) (sorted in place). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* (q3 - q1) / median of v[0 .. n) (sorted in place); 0 for fewer than 4. */
static double pass_spread(double *v, int n) {
  if (n < 4) return 0;
  double mid = median(v, n);
  double q1 = v[(n - 1) / 4], q3 = v[n - 1 - (n - 1) / 4];
  return mid > 0 ? (q3 - q1) / mid : 0;
}

/* The inputs filled as a batch of data would fill them: floating inputs
 * (images) with values spread over [0.5, 1) or [0, 1), so that the ReLUs'
 * signs and the max-pools' comparisons vary as they do in training (on
 * zeros every comparison goes the same way, and a max-pool ran 3-4x faster
 * than on a real batch); integer inputs (labels, token ids) zeroed, so
 * they index in range. The pattern is fixed (a linear congruence), so
 * every profile sees the same values. */
static int fill_inputs(dlrt_exec_t *e) {
  int rc = DLRT_OK;
  uint32_t x = 12345;
  for (int i = 0; i < e->g->n_tensors && rc == DLRT_OK; i++) {
    const dlrt_tensor_t *t = e->g->tensors[i];
    if (t->owner != t || t->kind != DLRT__TENSOR_INPUT) continue;
    void *view;
    if ((rc = dlrt__mpool_host_view(e->spill.pool, i, 1, &view)) < 0) break;
    memset(view, 0, dlrt__tensor_bytes(t));
    for (int64_t j = 0; j < t->numel; j++) {
      x = x * 1664525u + 1013904223u;
      if (t->dtype == DLRT_F32) ((float *)view)[j] = (float)(x >> 8) / 16777216.0f;
      else if (t->dtype == DLRT_BF16) ((uint16_t *)view)[j] = (uint16_t)(0x3f00 | (x >> 25));
      else if (t->dtype == DLRT_F16) ((uint16_t *)view)[j] = (uint16_t)(0x3800 | (x >> 22));
    }
    rc = dlrt__mpool_host_view_end(e->spill.pool, i, 1);
  }
  return rc;
}

/* `reps` runs of the training schedule, node by node through the spilling
 * residency, each kernel waited for and timed apart from the copies that
 * made its storages resident; times[rep][position]; *residency_ms, the
 * time the residency took around the nodes (its copies, waited for).
 *
 * A node's time is the time between two events recorded on the compute
 * stream around its kernels, as a GPU profiler times one: the stream's
 * hand-offs (the worker woken for the first command, the caller woken
 * after the last) are not the node's, and a training run, which queues
 * node after node without waiting, pipelines them away (on the cpu
 * backend 8-15 us a node, 8% of a 4 ms mlp step); the time the host took
 * to queue the node's launches is its least (the stream cannot run ahead
 * of them). wall[rep][position]
 * holds the waited-for time too; a device whose events keep no time, and
 * an update run on the host, are timed on the host's clock. */
static int profile_runs(dlrt_exec_t *e, int reps, double *times, double *wall,
                        double *residency_ms) {
  *residency_ms = 0;
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  const dlrt__residency *res = dlrt__exec_residency(e);
  e->mode = DLRT_RUN_TRAIN;
  int rc = DLRT_OK;
  dlrt_event_t *marks[2] = {NULL, NULL};
  if (dlrt_event_create(e->dev, &marks[0]) < 0 || dlrt_event_create(e->dev, &marks[1]) < 0) {
    dlrt_event_destroy(marks[0]), marks[0] = NULL;
    dlrt_clear_error();
  }
  for (int r = 0; r < reps && rc == DLRT_OK; r++) {
    res->begin_run(e, s);
    for (int k = 0; k < s->n && rc == DLRT_OK; k++) {
      dlrt__node *n = e->g->nodes[s->order[k]];
      if (s->block_of && s->block_of[k] >= 0) {
        /* A chunked block (segments): timed whole, each position a share. */
        const dlrt__chunk_block *b = &s->blocks[s->block_of[k]];
        if ((rc = dlrt_stream_synchronize(e->stream)) < 0) break;
        double t0 = dlrt__now_ms();
        float on_stream = -1;
        if (marks[0]) rc = dlrt_event_record(marks[0], e->stream);
        if (rc == DLRT_OK) rc = dlrt__exec_run_block(e, res, s, b);
        if (rc == DLRT_OK && marks[0]) rc = dlrt_event_record(marks[1], e->stream);
        if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
        if (rc == DLRT_OK && marks[0] && dlrt_event_elapsed_ms(marks[0], marks[1], &on_stream) < 0)
          on_stream = -1, dlrt_clear_error();
        /* A fused split's max-pool gradients made again do not run: the
         * positions that run share the time (the model skips the same). */
        double whole = dlrt__now_ms() - t0,
               part = (double)(b->end - b->begin - (b->skip_end - b->skip_begin));
        for (int kk = b->begin; kk < b->end; kk++) {
          times[(size_t)r * (size_t)s->n + (size_t)kk] = (on_stream >= 0 ? on_stream : whole) / part;
          wall[(size_t)r * (size_t)s->n + (size_t)kk] = whole / part;
        }
        k = b->end - 1;
        continue;
      }
      int on_host = 0;
      double r0 = dlrt__now_ms();
      if ((rc = res->begin_node(e, s, k, &on_host)) < 0) break;
      /* begin_node ran an update on the host itself (its host views'
       * copies with it): that is the node's time. */
      double t0 = r0;
      if ((rc = dlrt_stream_synchronize(e->stream)) < 0) break;
      float on_stream = -1;
      double submit = 0;
      if (!on_host) {
        t0 = dlrt__now_ms();
        *residency_ms += t0 - r0;
        if (marks[0]) rc = dlrt_event_record(marks[0], e->stream);
        if (rc == DLRT_OK) rc = dlrt__exec_run_node(e, n);
        submit = dlrt__now_ms() - t0;
        if (rc == DLRT_OK && marks[0]) rc = dlrt_event_record(marks[1], e->stream);
        if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
        if (rc == DLRT_OK && marks[0] && dlrt_event_elapsed_ms(marks[0], marks[1], &on_stream) < 0)
          on_stream = -1, dlrt_clear_error();
      }
      double t1 = dlrt__now_ms();
      /* The host's own part (queueing the node's launches) bounds it from
       * below: a run of nodes shorter than their launches waits for them. */
      if (on_stream >= 0 && on_stream < submit) on_stream = (float)submit;
      times[(size_t)r * (size_t)s->n + (size_t)k] = on_stream >= 0 ? on_stream : t1 - t0;
      wall[(size_t)r * (size_t)s->n + (size_t)k] = t1 - t0;
      int rc2 = res->end_node(e, s, k);
      if (rc == DLRT_OK) rc2 = dlrt_stream_synchronize(e->stream);
      *residency_ms += dlrt__now_ms() - t1;
      if (rc == DLRT_OK) rc = rc2;
    }
  }
  if (rc < 0) {
    rc = dlrt__set_error(rc, "profiling the training step: %s", dlrt_last_error());
    for (int i = 0; i < e->g->n_tensors; i++) {
      const dlrt_tensor_t *t = e->g->tensors[i];
      if (t->owner == t && !dlrt__persistent(t)) res->discard(e, i);
    }
  }
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  dlrt_event_destroy(marks[0]), dlrt_event_destroy(marks[1]);
  return rc;
}

int dlrt__op_costs_measure(dlrt_exec_t *e, int reps, dlrt__op_costs *c) {
  return dlrt__op_costs_measure_steps(e, reps, 0, NULL, c);
}

int dlrt__op_costs_measure_steps(dlrt_exec_t *e, int reps, int whole_steps,
                                const dlrt__step_exchange *x, dlrt__op_costs *c) {
  memset(c, 0, sizeof *c);
  DLRT__CHECK_ARG(e->spill.pool, "profiling needs spilling on (a device budget)");
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  c->n_nodes = e->g->n_nodes;
  c->node_ms = calloc((size_t)(c->n_nodes ? c->n_nodes : 1), sizeof *c->node_ms);
  if (!c->node_ms) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (!whole_steps) x = NULL; /* it goes around whole steps */
  uint64_t key = costs_key(e, whole_steps, x != NULL);
  const char *off = getenv("DLRT_PROFILE_FRESH");
  int fresh = off && *off && strcmp(off, "0") != 0;
  if (!fresh && from_process(key, c)) {
    c->cached = 1;
    return DLRT_OK;
  }
  if (!fresh && from_file(key, c)) {
    c->cached = 2;
    to_process(key, c);
    return DLRT_OK;
  }
  double t0 = dlrt__now_ms();
  reps = reps < 1 ? 1 : reps > PROFILE_MAX_PASSES ? PROFILE_MAX_PASSES : reps;
  size_t n = (size_t)(s->n ? s->n : 1);
  double *times = calloc(PROFILE_MAX_PASSES * n, sizeof *times);
  double *wall = calloc(PROFILE_MAX_PASSES * n, sizeof *wall);
  double *one = calloc(PROFILE_MAX_PASSES, sizeof *one);
  double *whole = calloc(PROFILE_MAX_PASSES, sizeof *whole);
  double *traded = calloc(PROFILE_MAX_PASSES, sizeof *traded);
  int rc = times && wall && one && whole && traded ? DLRT_OK
                                          : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK) rc = fill_inputs(e);
  if (rc == DLRT_OK && x && x->prepare) rc = x->prepare(x->user, e);
  /* A first run warms the caches, the allocator and the host copies; it
   * is not counted. */
  double res_ms = 0, pass_res_ms;
  dlrt_spill_stats st0, st1;
  if (rc == DLRT_OK) rc = profile_runs(e, 1, times, wall, &pass_res_ms);
  if (rc == DLRT_OK) rc = dlrt__mpool_stats(e->spill.pool, &st0);
  /* At least `reps` passes, and more while the passes have taken less than
   * PROFILE_EXTRA_MS: a short step (a 4 ms mlp) gets enough of them for
   * its medians to stand against a time slice lost to another process. */
  /* With whole_steps, after each pass, the step as training runs it (on
   * an executor of the caller's own: it trains a step, which moves the
   * step count, the loss scale and the optimizer state): the schedule queued
   * node after node and waited for once at its end. Its excess over the
   * pass's node times (whole[pass]) is the dispatch that a replay of the
   * nodes alone leaves out: the residency's bookkeeping, the launches'
   * hand-off to the stream thread, the final wait. Each beside its own
   * pass, so that a time slice lost to another process moves both. The
   * caller's exchange (x) around it is timed apart: before, the host
   * queueing the next inputs (their copies run on the stream, so the step
   * is timed from its run); after, the reads that wait for the step and
   * then for their own round trips. */
  int passes = 0;
  double m0 = dlrt__now_ms();
  while (rc == DLRT_OK && passes < PROFILE_MAX_PASSES &&
         (passes < reps || dlrt__now_ms() - m0 < PROFILE_EXTRA_MS)) {
    rc = profile_runs(e, 1, times + (size_t)passes * n, wall + (size_t)passes * n, &pass_res_ms);
    double x0 = dlrt__now_ms();
    if (rc == DLRT_OK && x && x->before) rc = x->before(x->user, e);
    double w0 = dlrt__now_ms();
    if (rc == DLRT_OK && whole_steps) rc = dlrt_exec_run(e, DLRT_RUN_TRAIN);
    if (rc == DLRT_OK && whole_steps) rc = dlrt_stream_synchronize(e->stream);
    double w1 = dlrt__now_ms();
    whole[passes] = whole_steps ? w1 - w0 : 0;
    if (rc == DLRT_OK && x && x->after) rc = x->after(x->user, e);
    traded[passes] = x ? w0 - x0 + dlrt__now_ms() - w1 : 0;
    res_ms += pass_res_ms, passes++;
  }
  if (rc == DLRT_OK) rc = dlrt__mpool_stats(e->spill.pool, &st1);

  /* The device's own copies, as the step makes them (write-backs and
   * fetches on the compute stream, waited for), when there are enough. */
  uint64_t moved = rc == DLRT_OK ? st1.spilled_bytes - st0.spilled_bytes + st1.fetched_bytes -
                                       st0.fetched_bytes : 0;
  if (moved >= ((uint64_t)4 << 20) && res_ms > 1)
    c->copy_bytes_per_s = (double)moved / (res_ms / 1e3);
  /* Each node: the median of its passes; the hand-offs the stream timing
   * left out, the median wall time's excess over it. */
  for (int k = 0; rc == DLRT_OK && k < s->n; k++) {
    for (int r = 0; r < passes; r++) one[r] = times[(size_t)r * n + (size_t)k];
    double on_stream = median(one, passes);
    for (int r = 0; r < passes; r++) one[r] = wall[(size_t)r * n + (size_t)k];
    c->node_ms[s->order[k]] = on_stream;
    c->handoff_ms += median(one, passes) - on_stream;
  }
  /* The spread of whole passes: their interquartile range over their
   * median; the dispatch per position, the median excess of the step as
   * training runs it over its pass's nodes (none where the queued step is
   * the faster: the stream timing's hand-offs pipelined away). */
  for (int r = 0; rc == DLRT_OK && r < passes; r++) {
    one[r] = 0;
    for (int k = 0; k < s->n; k++) one[r] += times[(size_t)r * n + (size_t)k];
    whole[r] -= one[r];
  }
  if (rc == DLRT_OK) {
    c->passes = passes;
    double excess = whole_steps ? median(whole, passes) : 0;
    c->spread = pass_spread(one, passes);
    c->nodes_ms = median(one, passes);
    c->step_ms = c->nodes_ms + excess;
    c->dispatch_ms = s->n && excess > 0 ? excess / s->n : 0;
    c->exchange_ms = x ? median(traded, passes) : 0;
  }
  free(times), free(wall), free(one), free(whole), free(traded);
  if (rc < 0) {
    dlrt__op_costs_free(c);
    return rc;
  }
  c->memcpy_bytes_per_s = memcpy_rate();
  c->profile_ms = dlrt__now_ms() - t0;
  to_process(key, c);
  to_file(key, c);
  return DLRT_OK;
}

void dlrt__op_costs_free(dlrt__op_costs *c) {
  free(c->node_ms);
  memset(c, 0, sizeof *c);
}
