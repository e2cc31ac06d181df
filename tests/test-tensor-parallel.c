/*
 * test-tensor-parallel.c — tensor parallelism's graph ops on every device
 * present: dlrt_linear_cross_entropy_shard over two uneven vocabulary
 * shards (two executors in two threads, meeting in this test's own
 * collective) gives the whole head's loss (dlrt_linear_cross_entropy) on
 * both peers, its d w rows and, summed, its d x, with and without label
 * smoothing, over rows in three chunks; a forward-only run gives the same
 * loss; the collectives arrive with the same tags on both peers; a GPT
 * shard holding every head and the whole vocabulary (a group of one, no
 * collective) is dlrt_gpt_build_loss; bad shards are refused, and so is
 * tensor parallelism for what it does not split.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

/* 4M logits a chunk at most, chunks cut by the whole vocabulary: 41 rows,
 * so 200 rows come in 5 chunks on both peers (the last one short), though
 * their shards hold 30,000 and 70,000 classes. */
enum { N = 200, C = 8, V = 100000, FIRST = 30000 };

static float *x_host, *w_host;
static int32_t labels_host[N];

/* Two peers meeting at each collective: the second to arrive combines. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int arrived, mismatch;
  long generation;
  float *values[2];
  int64_t count[2], tag[2];
  int calls[2];
} pair;

typedef struct {
  pair *p;
  int index;
} peer_ctx;

static int pair_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                           int64_t tag) {
  peer_ctx *c = user;
  pair *p = c->p;
  pthread_mutex_lock(&p->lock);
  p->values[c->index] = values, p->count[c->index] = count, p->tag[c->index] = tag;
  p->calls[c->index]++;
  long gen = p->generation;
  if (++p->arrived == 2) {
    if (p->count[0] != p->count[1] || p->tag[0] != p->tag[1]) p->mismatch = 1;
    for (int64_t i = 0; i < count && !p->mismatch; i++) {
      float a = p->values[0][i], b = p->values[1][i];
      float v = op == DLRT_COLLECTIVE_MAX ? fmaxf(a, b) : a + b;
      p->values[0][i] = p->values[1][i] = v;
    }
    p->arrived = 0;
    p->generation++;
    pthread_cond_broadcast(&p->cv);
  } else {
    while (p->generation == gen) pthread_cond_wait(&p->cv, &p->lock);
  }
  int bad = p->mismatch;
  pthread_mutex_unlock(&p->lock);
  return bad ? DLRT_ERR_STATE : DLRT_OK;
}

typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *x, *w, *labels, *loss, *dx, *dw;
  dlrt_exec_t *e;
  int64_t classes;
  dlrt_run_mode mode;
  int rc;
} net;

/* The loss of x (N x C) and w's rows [first, first + classes), both
 * parameters; sharded: the shard op, else the whole fused head. */
static int build(dlrt_device_t *dev, int sharded, int64_t first, int64_t classes,
                 float smoothing, net *m) {
  memset(m, 0, sizeof *m);
  m->classes = classes;
  int64_t xs[2] = {N, C}, ws[2] = {classes, C}, ls[1] = {N};
  int rc = dlrt_graph_create(&m->g);
  if (rc < 0) return rc;
  m->x = dlrt_param(m->g, "x", 2, xs, DLRT_INIT_ZEROS, 0, 0);
  m->w = dlrt_param(m->g, "w", 2, ws, DLRT_INIT_ZEROS, 0, 0);
  m->labels = dlrt_input(m->g, "labels", DLRT_I32, 1, ls);
  m->loss = sharded ? dlrt_linear_cross_entropy_shard(m->g, m->x, m->w, m->labels, first, V,
                                                      smoothing)
                    : dlrt_linear_cross_entropy(m->g, m->x, m->w, m->labels, smoothing);
  dlrt_keep(m->g, m->loss);
  dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
  if ((rc = dlrt_graph_backward(m->g, m->loss)) < 0 || (rc = dlrt_graph_optimize(m->g, &sgd)) < 0)
    return rc;
  m->dx = dlrt_keep(m->g, dlrt_grad(m->g, m->x));
  m->dw = dlrt_keep(m->g, dlrt_grad(m->g, m->w));
  if ((rc = dlrt_graph_status(m->g)) < 0) return rc;
  if ((rc = dlrt_exec_create(m->g, dev, 1, &m->e)) < 0) return rc;
  if ((rc = dlrt_exec_write(m->e, m->x, x_host, sizeof(float) * N * C)) < 0 ||
      (rc = dlrt_exec_write(m->e, m->w, w_host + first * C, sizeof(float) * classes * C)) < 0)
    return rc;
  return dlrt_exec_write(m->e, m->labels, labels_host, sizeof labels_host);
}

static void destroy(net *m) {
  dlrt_exec_destroy(m->e);
  dlrt_graph_destroy(m->g);
}

static void *run_net(void *arg) {
  net *m = arg;
  m->rc = dlrt_exec_run(m->e, m->mode);
  return NULL;
}

/* max |a - b| / max |b|. */
static double rel_err(const float *a, const float *b, size_t n) {
  double top = 0, err = 0;
  for (size_t i = 0; i < n; i++) {
    top = fmax(top, fabs(b[i]));
    err = fmax(err, fabs((double)a[i] - b[i]));
  }
  return top > 0 ? err / top : err;
}

/* Runs both peers side by side in `mode`; their status. */
static int run_pair(net shard[2], dlrt_run_mode mode) {
  pthread_t th;
  shard[0].mode = shard[1].mode = mode;
  if (pthread_create(&th, NULL, run_net, &shard[1]) != 0) return DLRT_ERR_OOM;
  run_net(&shard[0]);
  pthread_join(th, NULL);
  return shard[0].rc < 0 ? shard[0].rc : shard[1].rc;
}

static void compare(dlrt_device_t *dev, const char *spec, float smoothing) {
  net whole, shard[2];
  pair p = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  peer_ctx ctx[2] = {{&p, 0}, {&p, 1}};
  int rc = build(dev, 0, 0, V, smoothing, &whole);
  if (rc == DLRT_OK) rc = build(dev, 1, 0, FIRST, smoothing, &shard[0]);
  if (rc == DLRT_OK) rc = build(dev, 1, FIRST, V - FIRST, smoothing, &shard[1]);
  for (int k = 0; k < 2 && rc == DLRT_OK; k++)
    rc = dlrt_exec_set_collective(shard[k].e, pair_collective, &ctx[k]);
  float *dx[3], *dw[2] = {malloc(sizeof(float) * V * C), malloc(sizeof(float) * V * C)};
  for (int k = 0; k < 3; k++) dx[k] = malloc(sizeof(float) * N * C);
  float loss[3] = {0, 0, 0}, eval_loss[2] = {0, 0};
  if (!(dx[0] && dx[1] && dx[2] && dw[0] && dw[1])) rc = DLRT_ERR_OOM;
  if (rc == DLRT_OK) rc = dlrt_exec_run(whole.e, DLRT_RUN_GRADIENTS);
  if (rc == DLRT_OK) rc = dlrt_exec_read(whole.e, whole.loss, &loss[2], sizeof(float));
  if (rc == DLRT_OK) rc = dlrt_exec_read(whole.e, whole.dx, dx[2], sizeof(float) * N * C);
  if (rc == DLRT_OK) rc = dlrt_exec_read(whole.e, whole.dw, dw[1], sizeof(float) * V * C);
  if (rc == DLRT_OK) rc = run_pair(shard, DLRT_RUN_GRADIENTS);
  for (int k = 0; k < 2 && rc == DLRT_OK; k++) {
    if ((rc = dlrt_exec_read(shard[k].e, shard[k].loss, &loss[k], sizeof(float))) < 0 ||
        (rc = dlrt_exec_read(shard[k].e, shard[k].dx, dx[k], sizeof(float) * N * C)) < 0)
      break;
    rc = dlrt_exec_read(shard[k].e, shard[k].dw, dw[0] + (k ? FIRST * C : 0),
                        sizeof(float) * (size_t)shard[k].classes * C);
  }
  int calls = p.calls[0], calls1 = p.calls[1];
  if (rc == DLRT_OK) rc = run_pair(shard, DLRT_RUN_FORWARD);
  for (int k = 0; k < 2 && rc == DLRT_OK; k++)
    rc = dlrt_exec_read(shard[k].e, shard[k].loss, &eval_loss[k], sizeof(float));
  if (tap_check(rc, "%s, smoothing %g: the whole head and two shards run", spec, smoothing)) {
    ok(loss[0] == loss[1] && fabs(loss[0] - loss[2]) <= 1e-6 * fabs(loss[2]),
       "%s, smoothing %g: both peers' loss %.7f (%.7f) is the whole head's %.7f", spec,
       smoothing, loss[0], loss[1], loss[2]);
    for (int i = 0; i < N * C; i++) dx[0][i] += dx[1][i];
    double ex = rel_err(dx[0], dx[2], (size_t)N * C), ew = rel_err(dw[0], dw[1], (size_t)V * C);
    ok(ex <= 5.3e-5, "%s, smoothing %g: the peers' d x summed within %.2g of its largest "
       "(bound 5.3e-5)", spec, smoothing, ex);
    ok(ew <= 1e-5, "%s, smoothing %g: their d w rows within %.2g of its largest (bound 1e-5)",
       spec, smoothing, ew);
    /* Five chunks, two collectives each. */
    ok(!p.mismatch && calls == calls1 && calls == 10,
       "%s, smoothing %g: %d collectives on each peer, the same tags and counts", spec,
       smoothing, calls);
    ok(eval_loss[0] == loss[0] && eval_loss[1] == loss[1],
       "%s, smoothing %g: a forward-only run gives the same loss", spec, smoothing);
  }
  for (int k = 0; k < 3; k++) free(dx[k]);
  free(dw[0]), free(dw[1]);
  destroy(&whole);
  destroy(&shard[0]);
  destroy(&shard[1]);
}

/* A shard of every head and the whole vocabulary, with no collective (a
 * group of one): dlrt_gpt_build_loss's loss from the same parameters. */
static void compare_gpt(dlrt_device_t *dev, const char *spec) {
  static const dlrt_gpt_config cfg = {.layers = 2, .heads = 2, .embd = 16, .context = 8,
                                      .vocab = 40};
  enum { B = 3, T = 8 };
  int32_t tokens[B * T], targets[B * T];
  for (int i = 0; i < B * T; i++) tokens[i] = (i * 11) % 40, targets[i] = (i * 7 + 3) % 40;
  float loss[2] = {0, 0};
  dlrt_host_tensor *params = NULL;
  int n_params = 0, rc = DLRT_OK;
  for (int sharded = 0; sharded < 2 && rc == DLRT_OK; sharded++) {
    dlrt_graph_t *g = NULL;
    dlrt_exec_t *e = NULL;
    int64_t ts[2] = {B, T}, ls[1] = {B * T};
    rc = dlrt_graph_create(&g);
    dlrt_tensor_t *x = rc == DLRT_OK ? dlrt_input(g, "tokens", DLRT_I32, 2, ts) : NULL;
    dlrt_tensor_t *y = rc == DLRT_OK ? dlrt_input(g, "targets", DLRT_I32, 1, ls) : NULL;
    dlrt_tensor_t *l = NULL;
    dlrt_gpt_shard all = {.head_first = 0, .heads = 2, .vocab_first = 0, .vocab = 40};
    if (rc == DLRT_OK)
      rc = sharded ? dlrt_gpt_build_loss_shard(g, &cfg, &all, x, y, 0.0f, &l)
                   : dlrt_gpt_build_loss(g, &cfg, x, y, 0.0f, &l);
    if (rc == DLRT_OK) dlrt_keep(g, l);
    dlrt_optimizer sgd = dlrt_optimizer_defaults(DLRT_OPT_SGD);
    if (rc == DLRT_OK) rc = dlrt_graph_backward(g, l);
    if (rc == DLRT_OK) rc = dlrt_graph_optimize(g, &sgd);
    if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 5, &e);
    if (rc == DLRT_OK && sharded) rc = dlrt_exec_import(e, params, n_params);
    if (rc == DLRT_OK && !sharded) rc = dlrt_exec_export(e, 0, &params, &n_params);
    if (rc == DLRT_OK) rc = dlrt_exec_write(e, x, tokens, sizeof tokens);
    if (rc == DLRT_OK) rc = dlrt_exec_write(e, y, targets, sizeof targets);
    if (rc == DLRT_OK) rc = dlrt_exec_run(e, DLRT_RUN_GRADIENTS);
    if (rc == DLRT_OK) rc = dlrt_exec_read(e, l, &loss[sharded], sizeof loss[sharded]);
    dlrt_exec_destroy(e);
    dlrt_graph_destroy(g);
  }
  if (params) dlrt_host_tensors_free(params, n_params);
  if (tap_check(rc, "%s: a GPT whole and as one shard of everything", spec))
    ok(fabs(loss[1] - loss[0]) <= 1e-6 * fabs(loss[0]), "%s: the shard's loss %.7f is "
       "dlrt_gpt_build_loss's %.7f", spec, loss[1], loss[0]);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  compare(dev, spec, 0.0f);
  compare(dev, spec, 0.1f);
  compare_gpt(dev, spec);
}

static void refusals(void) {
  dlrt_gpt_config cfg = {.layers = 2, .heads = 4, .embd = 32, .context = 8, .vocab = 50};
  dlrt_gpt_shard s = {.head_first = 2, .heads = 3};
  is_status(dlrt_gpt_shard_check(&cfg, &s), DLRT_ERR_INVALID_ARG,
            "heads 2 .. 4 of 4 are refused: %s", dlrt_last_error());
  s = (dlrt_gpt_shard){.head_first = 0, .heads = 2, .vocab_first = 40, .vocab = 20};
  is_status(dlrt_gpt_shard_check(&cfg, &s), DLRT_ERR_INVALID_ARG,
            "vocabulary rows 40 .. 60 of 50 are refused: %s", dlrt_last_error());
  dlrt_graph_t *g;
  if (dlrt_graph_create(&g) < 0) bail_out("%s", dlrt_last_error());
  int64_t xs[2] = {4, 3}, ws[2] = {6, 3}, ls[1] = {4};
  dlrt_tensor_t *x = dlrt_param(g, "x", 2, xs, DLRT_INIT_ONES, 0, 0);
  dlrt_tensor_t *w = dlrt_param(g, "w", 2, ws, DLRT_INIT_ONES, 0, 0);
  dlrt_tensor_t *y = dlrt_input(g, "y", DLRT_I32, 1, ls);
  ok(dlrt_linear_cross_entropy_shard(g, x, w, y, 5, 10, 0.0f) == NULL &&
         dlrt_graph_status(g) == DLRT_ERR_INVALID_ARG,
     "a shard of rows 5 .. 11 of a vocabulary of 10 is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);

  /* The trainer refuses what it does not split. */
  dlrt_device_t *cpu;
  if (dlrt_device_open("cpu", &cpu) < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *two[2] = {cpu, cpu};
  dlrt_trainer_config c = {.model = "mlp", .batch = 8, .seed = 1,
                           .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM)};
  dlrt_trainer_t *t = NULL;
  if (dlrt_trainer_create(cpu, &c, 28, 28, 10, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_ERR_UNSUPPORTED,
            "an MLP is refused: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
  c.model = "gpt-mini";
  c.gpt = (dlrt_gpt_config){.layers = 1, .heads = 2, .embd = 16, .context = 8};
  c.accum = 2; /* accumulation splits (test-tensor-parallel-compose.sh trains it) */
  if (dlrt_trainer_create(cpu, &c, 1, 8, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_OK,
            "a GPT with accumulation splits");
  dlrt_trainer_destroy(t);
  c.accum = 1;
  c.checkpoint = DLRT_CHECKPOINT_AUTO; /* chosen again on the first peer, given to all */
  if (dlrt_trainer_create(cpu, &c, 1, 8, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_OK,
            "a GPT with --checkpoint auto splits");
  dlrt_trainer_destroy(t);
  c.checkpoint = 0;
  /* The peers' memory options: before the split only; an update through
   * the host (clipping reads the gradients there) with spilling peers, not
   * with streamed parameters (which make no gradient runs). */
  dlrt_spill_config budget = {.device_budget = 64 << 20};
  dlrt_spill_config streamed = {.device_budget = 64 << 20, .policy = DLRT_OFFLOAD_PARAMS};
  c.clip_norm = 1.0f;
  if (dlrt_trainer_create(cpu, &c, 1, 8, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel_memory(t, &streamed, 0), DLRT_OK,
            "the peers' budget is given before the split");
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_ERR_UNSUPPORTED,
            "streaming peers with clipping are refused: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
  if (dlrt_trainer_create(cpu, &c, 1, 8, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel_memory(t, &budget, 0), DLRT_OK,
            "the peers' budget is given before the split, with clipping");
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_OK,
            "spilling peers with clipping (their sums beside the budget) split");
  dlrt_tp_peer_info clipped[2];
  int n_clipped = 0;
  if (tap_check(dlrt_trainer_tensor_parallel(t, clipped, 2, &n_clipped), "the peers are listed"))
    ok(n_clipped == 2 && clipped[0].spill_budget_bytes == 64 << 20 &&
           clipped[1].spill_budget_bytes == 64 << 20,
       "each clipping peer spills within its own budget of 64 MiB, its sums included");
  dlrt_trainer_destroy(t);
  c.clip_norm = 0;
  if (dlrt_trainer_create(cpu, &c, 1, 8, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel_memory(t, &budget, 0), DLRT_OK,
            "the peers' budget is given");
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_OK,
            "peers that spill within 64 MiB each split");
  is_status(dlrt_trainer_set_tensor_parallel_memory(t, &budget, 0), DLRT_ERR_STATE,
            "the peers' budget after the split is refused: %s", dlrt_last_error());
  dlrt_tp_peer_info spilled[2];
  int n_spilled = 0;
  if (tap_check(dlrt_trainer_tensor_parallel(t, spilled, 2, &n_spilled), "the peers are listed"))
    ok(n_spilled == 2 && spilled[0].spill_budget_bytes == 64 << 20 &&
           spilled[1].spill_budget_bytes == 64 << 20,
       "each peer spills within its own budget of 64 MiB");
  dlrt_trainer_destroy(t);
  if (dlrt_trainer_create(cpu, &c, 1, 8, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *three[3] = {cpu, cpu, cpu};
  is_status(dlrt_trainer_set_tensor_parallel(t, three, 3, NULL), DLRT_ERR_INVALID_ARG,
            "a GPT of 2 heads over 3 devices is refused: %s", dlrt_last_error());
  double bad[2] = {1, -1};
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, bad), DLRT_ERR_INVALID_ARG,
            "a negative weight is refused: %s", dlrt_last_error());
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_OK,
            "two peers of one head each are made");
  dlrt_tp_peer_info info[2];
  int n = 0;
  if (tap_check(dlrt_trainer_tensor_parallel(t, info, 2, &n), "the peers are listed"))
    ok(n == 2 && info[0].heads == 1 && info[1].head_first == 1 && info[0].vocab == 128 &&
           info[1].vocab_first == 128 && info[0].param_bytes == info[1].param_bytes,
       "each holds one head and half the vocabulary, the same bytes (%llu)",
       (unsigned long long)info[0].param_bytes);
  is_status(dlrt_trainer_set_tensor_parallel(t, two, 2, NULL), DLRT_ERR_STATE,
            "splitting twice is refused: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
}

int main(void) {
  x_host = malloc(sizeof(float) * N * C);
  w_host = malloc(sizeof(float) * V * C);
  if (!x_host || !w_host) bail_out("no memory");
  uint32_t s = 2025;
  for (int i = 0; i < N * C; i++)
    s = s * 1664525u + 1013904223u, x_host[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
  for (int i = 0; i < V * C; i++)
    s = s * 1664525u + 1013904223u, w_host[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
  /* Labels in both shards, some at their edges. */
  for (int i = 0; i < N; i++) labels_host[i] = (int32_t)((i * 7919) % V);
  labels_host[0] = FIRST - 1, labels_host[1] = FIRST, labels_host[2] = V - 1;
  if (dlrt_init() < 0) bail_out("%s", dlrt_last_error());
  refusals();
  tap_for_each_device(run_device, NULL);
  free(x_host);
  free(w_host);
  dlrt_shutdown();
  return done_testing();
}
