/*
 * test-gradients.c — the host-side gradient I/O of data parallelism
 * (dlrt_exec_gradients_read / _write, dlrt_exec_apply_gradients) on a small
 * classifier with batch normalisation, on every device:
 * - the gradient vector holds each parameter's gradient in the order of
 *   dlrt_exec_export, whose list also has the batch-norm running statistics
 *   (no gradient, so not in the vector);
 * - a kept parameter gradient (dlrt_keep) stays readable after
 *   dlrt_exec_apply_gradients and then holds the gradient the update applied
 *   (what dlrt_exec_gradients_write gave), and round after round the
 *   allocator's bytes stay flat (the kept buffers used to be dropped without
 *   being freed, and made anew each round).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

enum { BATCH = 16, IN = 8, HIDDEN = 6, CLASSES = 3, ROUNDS = 5, PARAMS = 6 };

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *labels, *loss;
  dlrt_tensor_t *param[PARAMS], *grad[PARAMS]; /* in the order they were made */
} net;

/* linear HIDDEN, batch norm, relu, linear CLASSES; SGD; every parameter's
 * gradient kept. */
static int net_make(dlrt_device_t *dev, net *n) {
  memset(n, 0, sizeof *n);
  int rc = dlrt_graph_create(&n->g);
  if (rc < 0) return rc;
  dlrt_graph_t *g = n->g;
  int64_t xs[2] = {BATCH, IN}, ls[1] = {BATCH};
  int64_t w1s[2] = {HIDDEN, IN}, hs[1] = {HIDDEN}, w2s[2] = {CLASSES, HIDDEN}, cs[1] = {CLASSES};
  n->x = dlrt_input(g, "x", DLRT_F32, 2, xs);
  n->labels = dlrt_input(g, "labels", DLRT_I32, 1, ls);
  dlrt_tensor_t **p = n->param;
  p[0] = dlrt_param(g, "fc1.weight", 2, w1s, DLRT_INIT_FAN_IN_UNIFORM, IN, HIDDEN);
  p[1] = dlrt_param(g, "fc1.bias", 1, hs, DLRT_INIT_FAN_IN_UNIFORM, IN, HIDDEN);
  p[2] = dlrt_param(g, "bn.weight", 1, hs, DLRT_INIT_ONES, HIDDEN, HIDDEN);
  p[3] = dlrt_param(g, "bn.bias", 1, hs, DLRT_INIT_ZEROS, HIDDEN, HIDDEN);
  p[4] = dlrt_param(g, "fc2.weight", 2, w2s, DLRT_INIT_FAN_IN_UNIFORM, HIDDEN, CLASSES);
  p[5] = dlrt_param(g, "fc2.bias", 1, cs, DLRT_INIT_FAN_IN_UNIFORM, HIDDEN, CLASSES);
  dlrt_tensor_t *h = dlrt_linear(g, n->x, p[0], p[1]);
  h = dlrt_relu(g, dlrt_batch_norm(g, h, p[2], p[3], 0.1f, 1e-5f));
  dlrt_tensor_t *logits = dlrt_linear(g, h, p[4], p[5]);
  n->loss = dlrt_keep(g, dlrt_cross_entropy(g, logits, n->labels, 0.0f));
  if ((rc = dlrt_graph_backward(g, n->loss)) < 0) return rc;
  for (int i = 0; i < PARAMS; i++)
    if (!(n->grad[i] = dlrt_keep(g, dlrt_grad(g, p[i])))) return dlrt_graph_status(g);
  dlrt_optimizer opt = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  opt.momentum = 0.9f;
  if ((rc = dlrt_graph_optimize(g, &opt)) < 0) return rc;
  return dlrt_exec_create(g, dev, 3, &n->e);
}

static void net_free(net *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
  memset(n, 0, sizeof *n);
}

/* Writes round r's batch. */
static int write_batch(net *n, int r) {
  float x[BATCH * IN];
  int32_t y[BATCH];
  for (int i = 0; i < BATCH * IN; i++) x[i] = sinf(0.37f * (float)(i + 31 * r)) + 0.1f * (float)r;
  for (int i = 0; i < BATCH; i++) y[i] = (i + r) % CLASSES;
  int rc = dlrt_exec_write(n->e, n->x, x, sizeof x);
  return rc < 0 ? rc : dlrt_exec_write(n->e, n->labels, y, sizeof y);
}

static int param_index(const net *n, const char *name) {
  for (int i = 0; i < PARAMS; i++)
    if (strcmp(dlrt_tensor_name(n->param[i]), name) == 0) return i;
  return -1;
}

/* The kept gradients, in dlrt_exec_export's order (its running statistics
 * skipped), one after the other, into out (count floats); -1 on failure. */
static int kept_in_export_order(net *n, float *out, int64_t count, int *buffers) {
  dlrt_host_tensor *t;
  int nt;
  if (dlrt_exec_export(n->e, 0, &t, &nt) < 0) return -1;
  int64_t at = 0;
  int rc = 0;
  *buffers = 0;
  for (int k = 0; k < nt && rc == 0; k++) {
    int i = param_index(n, t[k].name);
    if (i < 0) {
      ++*buffers; /* a running statistic: no gradient */
      continue;
    }
    int64_t numel = dlrt_tensor_numel(n->param[i]);
    if (at + numel > count ||
        dlrt_exec_read(n->e, n->grad[i], out + at, (size_t)numel * sizeof(float)) < 0)
      rc = -1;
    at += numel;
  }
  dlrt_host_tensors_free(t, nt);
  return rc == 0 && at == count ? 0 : -1;
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  net n;
  if (!tap_check(net_make(dev, &n), "%s: the classifier with batch norm builds", spec)) {
    net_free(&n);
    return;
  }
  dlrt_exec_info info;
  dlrt_exec_info_get(n.e, &info);
  int64_t count = info.params;
  float *vec = calloc((size_t)count, sizeof *vec), *kept = calloc((size_t)count, sizeof *kept);
  float *applied = calloc((size_t)count, sizeof *applied);
  if (!vec || !kept || !applied) bail_out("out of host memory");
  uint64_t first_round = 0;
  int order_ok = 1, kept_ok = 1, applied_ok = 1, flat = 1, buffers = 0, rc = DLRT_OK;
  for (int r = 0; r < ROUNDS && rc == DLRT_OK; r++) {
    if ((rc = write_batch(&n, r)) < 0 || (rc = dlrt_exec_run(n.e, DLRT_RUN_GRADIENTS)) < 0 ||
        (rc = dlrt_exec_gradients_read(n.e, vec, count)) < 0)
      break;
    /* Before the update: the kept gradients are the vector, in export order. */
    if (kept_in_export_order(&n, kept, count, &buffers) < 0) kept_ok = 0;
    else if (memcmp(kept, vec, (size_t)count * sizeof *vec) != 0) order_ok = 0;
    /* A combination of replicas, say: half of it. */
    for (int64_t i = 0; i < count; i++) applied[i] = 0.5f * vec[i];
    if ((rc = dlrt_exec_gradients_write(n.e, applied, count)) < 0 ||
        (rc = dlrt_exec_apply_gradients(n.e)) < 0)
      break;
    /* After it: still readable, and what the update applied. */
    if (kept_in_export_order(&n, kept, count, &buffers) < 0) kept_ok = 0;
    else if (memcmp(kept, applied, (size_t)count * sizeof *vec) != 0) applied_ok = 0;
    dlrt_mem_stats st;
    if ((rc = dlrt_mem_stats_get(dev, &st)) < 0) break;
    if (r == 0) first_round = st.allocated.current;
    else if (st.allocated.current != first_round) flat = 0;
    diag("%s: round %d: %llu bytes allocated", spec, r + 1,
         (unsigned long long)st.allocated.current);
  }
  tap_check(rc, "%s: %d rounds of gradients read, written and applied", spec, ROUNDS);
  ok(buffers == 2, "%s: the export lists the %d running statistics besides the parameters",
     spec, buffers);
  ok(kept_ok, "%s: the kept gradients read back before and after each update "
     "(dlrt_exec_read: %s)", spec, kept_ok ? "ok" : dlrt_last_error());
  ok(order_ok, "%s: the gradient vector holds the parameters' gradients in export order, "
     "the running statistics left out", spec);
  ok(applied_ok, "%s: after dlrt_exec_apply_gradients a kept gradient holds the applied one",
     spec);
  ok(flat, "%s: the allocator's bytes stay at %llu round after round", spec,
     (unsigned long long)first_round);
  free(vec);
  free(kept);
  free(applied);
  net_free(&n);
}

int main(void) {
  tap_for_each_device(run_device, NULL);
  return done_testing();
}
