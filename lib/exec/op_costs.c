/* op_costs.c — the cost model's measured half: each node of the training
 * schedule timed on the device by a short profiling pass (the median of a
 * few runs, each node waited for), cached per device and graph shape in the
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
static uint64_t costs_key(const dlrt_exec_t *e) {
  uint64_t h = 0xcbf29ce484222325ULL;
  dlrt_device_props props;
  const char *spec = dlrt_device_spec(e->dev);
  h = fnv(h, spec, strlen(spec));
  if (dlrt_device_props_get(e->dev, &props) == DLRT_OK) h = fnv(h, props.name, strlen(props.name));
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
  int n = -1, ok = fscanf(f, "dlrt-profile-2 %d %lf %lf", &n, &c->memcpy_bytes_per_s,
                          &c->copy_bytes_per_s) == 3 &&
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
  fprintf(f, "dlrt-profile-2 %d %.6e %.6e\n", c->n_nodes, c->memcpy_bytes_per_s,
          c->copy_bytes_per_s);
  for (int i = 0; i < c->n_nodes; i++) fprintf(f, "%.6f\n", c->node_ms[i]);
  if (fclose(f) == 0 && rename(tmp, path) == 0) return;
  unlink(tmp);
}

/* ---------------------------------------------------------------- measuring */

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

/* The inputs zeroed, so labels and token ids index in range. */
static int zero_inputs(dlrt_exec_t *e) {
  int rc = DLRT_OK;
  for (int i = 0; i < e->g->n_tensors && rc == DLRT_OK; i++) {
    const dlrt_tensor_t *t = e->g->tensors[i];
    if (t->owner != t || t->kind != DLRT__TENSOR_INPUT) continue;
    void *view;
    if ((rc = dlrt__mpool_host_view(e->spill.pool, i, 1, &view)) < 0) break;
    memset(view, 0, dlrt__tensor_bytes(t));
    rc = dlrt__mpool_host_view_end(e->spill.pool, i, 1);
  }
  return rc;
}

/* `reps` runs of the training schedule, node by node through the spilling
 * residency, each kernel waited for and timed apart from the copies that
 * made its storages resident; times[rep][position]; *residency_ms, the
 * time the residency took around the nodes (its copies, waited for). */
static int profile_runs(dlrt_exec_t *e, int reps, double *times, double *residency_ms) {
  *residency_ms = 0;
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  const dlrt__residency *res = dlrt__exec_residency(e);
  e->mode = DLRT_RUN_TRAIN;
  int rc = DLRT_OK;
  for (int r = 0; r < reps && rc == DLRT_OK; r++) {
    res->begin_run(e, s);
    for (int k = 0; k < s->n && rc == DLRT_OK; k++) {
      dlrt__node *n = e->g->nodes[s->order[k]];
      if (s->block_of && s->block_of[k] >= 0) {
        /* A chunked block (segments): timed whole, each position a share. */
        const dlrt__chunk_block *b = &s->blocks[s->block_of[k]];
        if ((rc = dlrt_stream_synchronize(e->stream)) < 0) break;
        double t0 = dlrt__now_ms();
        rc = dlrt__exec_run_block(e, res, s, b);
        if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
        double share = (dlrt__now_ms() - t0) / (double)(b->end - b->begin);
        for (int kk = b->begin; kk < b->end; kk++)
          times[(size_t)r * (size_t)s->n + (size_t)kk] = share;
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
      if (!on_host) {
        t0 = dlrt__now_ms();
        *residency_ms += t0 - r0;
        rc = dlrt__exec_run_node(e, n);
        if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
      }
      double t1 = dlrt__now_ms();
      times[(size_t)r * (size_t)s->n + (size_t)k] = t1 - t0;
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
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

int dlrt__op_costs_measure(dlrt_exec_t *e, int reps, dlrt__op_costs *c) {
  memset(c, 0, sizeof *c);
  DLRT__CHECK_ARG(e->spill.pool, "profiling needs spilling on (a device budget)");
  const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
  c->n_nodes = e->g->n_nodes;
  c->node_ms = calloc((size_t)(c->n_nodes ? c->n_nodes : 1), sizeof *c->node_ms);
  if (!c->node_ms) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  uint64_t key = costs_key(e);
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
  reps = reps < 1 ? 1 : reps;
  double *times = calloc((size_t)reps * (size_t)(s->n ? s->n : 1), sizeof *times);
  double *one = calloc((size_t)reps, sizeof *one);
  int rc = times && one ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK) rc = zero_inputs(e);
  /* A first run warms the caches, the allocator and the host copies; it
   * is not counted. */
  double res_ms = 0;
  dlrt_spill_stats st0, st1;
  if (rc == DLRT_OK) rc = profile_runs(e, 1, times, &res_ms);
  if (rc == DLRT_OK) rc = dlrt__mpool_stats(e->spill.pool, &st0);
  if (rc == DLRT_OK) rc = profile_runs(e, reps, times, &res_ms);
  if (rc == DLRT_OK) rc = dlrt__mpool_stats(e->spill.pool, &st1);
  /* The device's own copies, as the step makes them (write-backs and
   * fetches on the compute stream, waited for), when there are enough. */
  uint64_t moved = rc == DLRT_OK ? st1.spilled_bytes - st0.spilled_bytes + st1.fetched_bytes -
                                       st0.fetched_bytes : 0;
  if (moved >= ((uint64_t)4 << 20) && res_ms > 1)
    c->copy_bytes_per_s = (double)moved / (res_ms / 1e3);
  for (int k = 0; rc == DLRT_OK && k < s->n; k++) {
    for (int r = 0; r < reps; r++) one[r] = times[(size_t)r * (size_t)s->n + (size_t)k];
    qsort(one, (size_t)reps, sizeof *one, cmp_double);
    c->node_ms[s->order[k]] = one[reps / 2];
  }
  free(times), free(one);
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
