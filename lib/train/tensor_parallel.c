/* tensor_parallel.c — tensor parallelism for GPT models (Megatron-LM,
 * Shoeybi et al. 2019): each peer holds its shard of every block (its
 * attention heads, the MLP's columns and rows for them) and of the
 * vocabulary (the tied embedding and LM head), and trains it on the whole
 * batch; the peers' partial sums meet mid-graph in the collectives of
 * lib/graph/collective.c (f and g: one sum per sublayer forward and one
 * backward; the head's row statistics, never its logits).
 *
 * Peers are devices of any backends in one process (a thread each runs its
 * graph; the sums go through host buffers, pinned where the device has
 * them, in peer order so that every peer gets the same bits), or processes
 * (one peer each, its sums through a caller's collective: MPI in dltrain).
 * The trainer's own executor holds no storage meanwhile: evaluation runs
 * on the peers, and checkpoints gather the shards into whole tensors under
 * the model's names, so a run saved with one split resumes with another or
 * on one device. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/tensor_parallel_internal.h"
#include "train/train.h"
#include "util/status.h"

/* ------------------------------------------------------------ collectives */

static int group_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                            int64_t tag) {
  tp_peer *p = user;
  tp_group *g = p->group;
  pthread_mutex_lock(&g->lock);
  if (g->broken) {
    pthread_mutex_unlock(&g->lock);
    return dlrt__set_error(DLRT_ERR_STATE, "tensor parallel: another peer failed (%s)", g->why);
  }
  int i = p->index;
  g->values[i] = values, g->count[i] = count, g->tag[i] = tag, g->op[i] = op;
  int64_t generation = g->generation;
  if (++g->arrived == g->n) {
    for (int k = 1; k < g->n && !g->broken; k++)
      if (g->count[k] != count || g->tag[k] != tag || g->op[k] != op) {
        g->broken = 1;
        snprintf(g->why, sizeof g->why, "peer %d reached collective %lld of %lld values, "
                 "peer 0 collective %lld of %lld: their graphs differ", k,
                 (long long)g->tag[k], (long long)g->count[k], (long long)g->tag[0],
                 (long long)g->count[0]);
      }
    for (int64_t j = 0; j < count && !g->broken; j++) {
      float v = g->values[0][j];
      for (int k = 1; k < g->n; k++)
        v = op == DLRT_COLLECTIVE_MAX ? fmaxf(v, g->values[k][j]) : v + g->values[k][j];
      for (int k = 0; k < g->n; k++) g->values[k][j] = v;
    }
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->done);
  } else {
    while (g->generation == generation && !g->broken) pthread_cond_wait(&g->done, &g->lock);
  }
  int broken = g->broken && g->generation == generation;
  pthread_mutex_unlock(&g->lock);
  if (broken)
    return dlrt__set_error(DLRT_ERR_STATE, "tensor parallel: %s", g->why);
  return DLRT_OK;
}

static void group_break(tp_group *g, const char *why) {
  pthread_mutex_lock(&g->lock);
  if (!g->broken) snprintf(g->why, sizeof g->why, "%s", why);
  g->broken = 1;
  pthread_cond_broadcast(&g->done);
  pthread_mutex_unlock(&g->lock);
}

/* ------------------------------------------------------------ the split */

/* Heads in proportion to the weights: each peer's share of them rounded
 * down (at least one), the rest to the largest remainders (the earlier
 * peer first), a head taken back from the peer with most where the
 * minimum of one overshot. */
static void split_heads(int heads, int n, const double *weights, int *out) {
  double sum = 0, left[DLRT_TP_MAX];
  for (int i = 0; i < n; i++) sum += weights ? weights[i] : 1.0;
  int given = 0;
  for (int i = 0; i < n; i++) {
    double want = (double)heads * (weights ? weights[i] : 1.0) / sum;
    out[i] = (int)floor(want);
    left[i] = want - floor(want);
    if (out[i] < 1) out[i] = 1, left[i] = -1;
    given += out[i];
  }
  while (given < heads) {
    int best = 0;
    for (int i = 1; i < n; i++)
      if (left[i] > left[best]) best = i;
    out[best]++;
    left[best] = -1;
    given++;
  }
  while (given > heads) {
    int most = 0;
    for (int i = 1; i < n; i++)
      if (out[i] > out[most]) most = i;
    out[most]--;
    given--;
  }
}

/* Peer i's shard: heads by weight, vocabulary rows in the same proportion
 * (each peer at least one row). */
static void make_shards(const dlrt_gpt_config *c, int n, const double *weights,
                        dlrt_gpt_shard *out) {
  int heads[DLRT_TP_MAX];
  split_heads((int)c->heads, n, weights, heads);
  int first = 0;
  int64_t row = 0;
  for (int i = 0; i < n; i++) {
    out[i].head_first = first, out[i].heads = heads[i];
    first += heads[i];
    int64_t end = i == n - 1 ? c->vocab : c->vocab * first / c->heads;
    if (end <= row) end = row + 1;
    out[i].vocab_first = row, out[i].vocab = end - row;
    row = end;
  }
}

void dlrt__tp_make_shards(const dlrt_gpt_config *c, int n, const double *weights,
                          dlrt_gpt_shard *out) {
  make_shards(c, n, weights, out);
}


static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

int dlrt__tp_piece_of(const char *tensor_name, const dlrt_gpt_config *c, const dlrt_gpt_shard *s,
                      int ndim, tp_piece *out) {
  /* Optimizer state follows its parameter ("NAME.exp_avg", ...). */
  char name[128];
  snprintf(name, sizeof name, "%s", tensor_name);
  static const char *const states[] = {".exp_avg_sq", ".exp_avg", ".momentum"};
  for (int i = 0; i < 3; i++)
    if (ends_with(name, states[i])) name[strlen(name) - strlen(states[i])] = '\0';
  int64_t C = c->embd, d = c->embd / c->heads, h0 = s->head_first, h = s->heads;
  memset(out, 0, sizeof *out);
  out->n_seg = 1;
  int vector = ndim == 1;
  if (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_attn.bias")) {
    out->by_cols = 1, out->n_seg = 3;
    for (int k = 0; k < 3; k++) out->start[k] = k * C + h0 * d, out->len[k] = h * d;
  } else if (ends_with(name, ".attn.c_proj.weight")) {
    out->start[0] = h0 * d, out->len[0] = h * d;
  } else if (ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_fc.bias")) {
    out->by_cols = 1, out->start[0] = 4 * h0 * d, out->len[0] = 4 * h * d;
  } else if (ends_with(name, ".mlp.c_proj.weight")) {
    out->start[0] = 4 * h0 * d, out->len[0] = 4 * h * d;
  } else if (strcmp(name, "transformer.wte.weight") == 0 && s->vocab > 0) {
    out->start[0] = s->vocab_first, out->len[0] = s->vocab;
  } else {
    return 0;
  }
  if (vector) out->by_cols = 1; /* a bias: one row */
  return 1;
}

/* Copies between whole tensor `w` (rows x cols floats) and its piece `p`
 * (the shard's elements, dense): to_shard 1 scatters, 0 gathers. */
static void copy_piece(float *whole, int64_t rows, int64_t cols, float *part, const tp_piece *p,
                       int to_shard) {
  if (p->by_cols) {
    int64_t width = 0;
    for (int k = 0; k < p->n_seg; k++) width += p->len[k];
    for (int64_t r = 0; r < rows; r++)
      for (int k = 0, at = 0; k < p->n_seg; at += (int)p->len[k], k++) {
        float *w = whole + r * cols + p->start[k], *s = part + r * width + at;
        memcpy(to_shard ? s : w, to_shard ? w : s, (size_t)p->len[k] * sizeof(float));
      }
  } else {
    for (int k = 0, at = 0; k < p->n_seg; at += (int)p->len[k], k++) {
      float *w = whole + p->start[k] * cols, *s = part + (int64_t)at * cols;
      memcpy(to_shard ? s : w, to_shard ? w : s, (size_t)(p->len[k] * cols) * sizeof(float));
    }
  }
}

static void rows_cols(const dlrt_host_tensor *h, int64_t *rows, int64_t *cols) {
  *rows = h->ndim == 1 ? 1 : h->shape[0];
  *cols = h->ndim == 1 ? h->shape[0] : h->shape[1];
}

/* Shard s's tensors from the whole ones (names kept, shapes the shard's);
 * free with dlrt_host_tensors_free. */
static int scatter(const dlrt_gpt_config *c, const dlrt_gpt_shard *s,
                   const dlrt_host_tensor *whole, int n, dlrt_host_tensor **out) {
  dlrt_host_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
  if (!t) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int k = 0;
  for (; k < n; k++) {
    const dlrt_host_tensor *w = &whole[k];
    t[k] = *w;
    tp_piece p;
    int split =
        w->dtype == DLRT_F32 && w->ndim <= 2 && dlrt__tp_piece_of(w->name, c, s, w->ndim, &p);
    int64_t rows, cols, part = 0;
    rows_cols(w, &rows, &cols);
    for (int j = 0; split && j < p.n_seg; j++) part += p.len[j];
    if (split && p.by_cols) t[k].shape[w->ndim - 1] = part;
    if (split && !p.by_cols) t[k].shape[0] = part;
    t[k].bytes = split ? (size_t)((p.by_cols ? rows : cols) * part) * sizeof(float) : w->bytes;
    if (!(t[k].data = malloc(t[k].bytes ? t[k].bytes : 1))) break;
    if (split) copy_piece(w->data, rows, cols, t[k].data, &p, 1);
    else memcpy(t[k].data, w->data, w->bytes);
  }
  if (k < n) {
    dlrt_host_tensors_free(t, k);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  *out = t;
  return DLRT_OK;
}

/* ------------------------------------------------------------ peers */

static void peer_free(tp_peer *p) {
  dlrt__zero_peer_free(p->zero); /* its shards first: they lie on the peer's device */
  dlrt_exec_destroy(p->e);
  dlrt_graph_destroy(p->g);
  free(p->shifted);
  free(p->grads);
  memset(p, 0, sizeof *p);
}

void dlrt__tp_free(dlrt_trainer_t *t) {
  if (!t->tp) return;
  for (int i = 0; i < t->tp->n; i++) peer_free(&t->tp->peers[i]);
  pthread_mutex_destroy(&t->tp->group.lock);
  pthread_cond_destroy(&t->tp->group.done);
  free(t->tp);
  t->tp = NULL;
}

/* How the peers update (see dlrt__tp.update). */
static int update_mode(const dlrt_trainer_t *t) {
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->e, &scale);
  if (dlrt__across_processes(t) || t->cfg.clip_norm > 0 || scale.scaler.enabled ||
      (t->tp && t->tp->zero_stage))
    return HOST_UPDATE;
  return t->accum > 1 ? GRADIENT_RUNS : 0;
}

int dlrt__tp_host_gradients(tp_peer *p) {
  if (p->grads) return DLRT_OK;
  dlrt_exec_info info;
  int rc = dlrt_exec_info_get(p->e, &info);
  if (rc < 0) return rc;
  p->n_grads = info.params;
  if (!(p->grads = malloc((size_t)(p->n_grads ? p->n_grads : 1) * sizeof(float))))
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  return DLRT_OK;
}

/* Builds peer p's graph for its shard and executor on its device, with the
 * whole model's tensors `whole` (parameters, state, step) cut to it. */
static int peer_build(dlrt_trainer_t *t, tp_peer *p, const dlrt_host_tensor *whole, int n) {
  const dlrt_trainer_config *cfg = &t->cfg;
  int64_t token_shape[2] = {cfg->batch, t->width}, target_shape[1] = {cfg->batch * t->width};
  int rc = dlrt_graph_create(&p->g);
  if (rc == DLRT_OK) rc = dlrt_graph_set_precision(p->g, cfg->precision);
  if (rc == DLRT_OK) {
    p->tokens = dlrt_input(p->g, "tokens", DLRT_I32, 2, token_shape);
    p->targets = dlrt_input(p->g, "targets", DLRT_I32, 1, target_shape);
    rc = dlrt_gpt_build_loss_shard(p->g, &t->tp->gpt, &p->shard, p->tokens, p->targets,
                                   cfg->label_smoothing, &p->loss);
  }
  if (rc == DLRT_OK) {
    p->loss = dlrt_keep(p->g, p->loss);
    if ((rc = dlrt_graph_status(p->g)) == DLRT_OK) rc = dlrt_graph_backward(p->g, p->loss);
  }
  if (rc == DLRT_OK) rc = dlrt_graph_optimize(p->g, &cfg->opt);
  if (rc == DLRT_OK) rc = dlrt__exec_create_deferred(p->g, p->dev, cfg->seed, &p->e);
  /* --checkpoint: the same segments on every peer (a recomputed segment
   * meets the others in its collectives again, in the same order); then
   * spilling within the peer's budget, and the storage is made. */
  if (rc == DLRT_OK) rc = dlrt__tp_peer_memory(t, p);
  dlrt_host_tensor *mine = NULL;
  if (rc == DLRT_OK) rc = scatter(&t->tp->gpt, &p->shard, whole, n, &mine);
  if (rc == DLRT_OK) {
    rc = dlrt_exec_import(p->e, mine, n);
    dlrt_host_tensors_free(mine, n);
  }
  if (rc == DLRT_OK) {
    if (t->tp->fn) rc = dlrt_exec_set_collective(p->e, t->tp->fn, t->tp->user);
    else rc = dlrt_exec_set_collective(p->e, group_collective, p);
  }
  if (rc == DLRT_OK && p->shard.vocab > 0 &&
      !(p->shifted = malloc((size_t)(cfg->batch * t->width) * sizeof(int32_t))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK && t->tp->update == HOST_UPDATE) rc = dlrt__tp_host_gradients(p);
  return rc;
}

/* What keeps a trainer from tensor parallelism, or NULL. */
static const char *refused(const dlrt_trainer_t *t) {
  if (!t->lm) return "tensor parallelism splits GPT models (--model gpt-mini, gpt2, ...); "
                     "for other models use --devices (data parallel) or --pipeline";
  if (t->n_reps || t->n_stages) return "tensor parallelism goes without --devices and "
                                       "--pipeline in this version (data parallel replicas "
                                       "of a split model: run under mpirun, one replica per "
                                       "rank or per group of ranks)";
  if (t->zero) return "ZeRO shards a split model's replicas once it is split: call "
                      "dlrt_trainer_set_zero after the tensor-parallel split, not before";
  if (t->reduce_on_device) return "tensor parallelism takes the host all-reduce "
                                  "(dlrt_trainer_set_allreduce_async), not the device one";
  return NULL;
}

int dlrt__tp_check_split(const dlrt_trainer_t *t, const dlrt_gpt_config *c, int peers,
                         const double *weights, const char *what) {
  if (peers > c->heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s has %lld heads: it splits over at most "
                           "%lld %s (--tensor-parallel)", t->model, (long long)c->heads,
                           (long long)c->heads, what);
  for (int i = 0; weights && i < peers; i++)
    if (!(weights[i] > 0) || !isfinite(weights[i]))
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "tensor parallel weight %g of %s %d: "
                             "weights must be positive", weights[i],
                             strcmp(what, "ranks") == 0 ? "rank" : "device", i);
  return DLRT_OK;
}

/* Sets up the peers from the trainer's executor, whose storage then goes. */
static int tp_setup(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n, int rank, int ranks,
                    const double *weights, dlrt_collective_fn fn, void *user) {
  const char *why = refused(t);
  if (why) return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s", why);
  dlrt_gpt_config gpt;
  dlrt__gpt_model(&t->cfg, &gpt);
  int peers = ranks ? ranks : n;
  int rc = dlrt__tp_check_split(t, &gpt, peers, weights, "devices");
  if (rc < 0) return rc;
  dlrt__tp *tp = calloc(1, sizeof *tp);
  if (!tp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  tp->gpt = gpt;
  tp->rank = rank, tp->ranks = ranks, tp->fn = fn, tp->user = user;
  tp->update = update_mode(t);
  pthread_mutex_init(&tp->group.lock, NULL);
  pthread_cond_init(&tp->group.done, NULL);
  tp->group.n = n;
  t->tp = tp;
  rc = dlrt__tp_memory_update(t);
  if (rc < 0) {
    dlrt__tp_free(t);
    return rc;
  }
  dlrt_gpt_shard shards[DLRT_TP_MAX];
  make_shards(&gpt, peers, weights, shards);
  dlrt_host_tensor *whole;
  int n_whole;
  rc = dlrt_exec_export(t->e, 1, &whole, &n_whole);
  if (rc < 0) {
    dlrt__tp_free(t);
    return rc;
  }
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(t->e, &scale);
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    p->dev = devs[i], p->group = &tp->group, p->index = i;
    p->shard = shards[ranks ? rank : i];
    tp->n = i + 1;
    rc = peer_build(t, p, whole, n_whole);
    if (rc == DLRT_OK) dlrt__exec_restore_loss_scale(p->e, &scale);
  }
  dlrt_host_tensors_free(whole, n_whole);
  /* The whole model now lives in the shards: the trainer's executor is
   * made again without storage (its plan and figures stay). */
  dlrt_exec_t *bare = NULL;
  if (rc == DLRT_OK) rc = dlrt__exec_create_deferred(t->g, t->dev, t->cfg.seed, &bare);
  if (rc == DLRT_OK) {
    bare->steps = t->e->steps;
    dlrt__exec_restore_loss_scale(bare, &scale);
    dlrt_exec_destroy(t->e);
    t->e = bare;
    rc = dlrt__tp_memory_limits(t);
  }
  if (rc < 0) dlrt__tp_free(t);
  dlrt__drop_train_loader(t);
  dlrt_loader_destroy(t->eval_loader);
  t->eval_loader = NULL;
  t->eval_data = NULL;
  return rc;
}

int dlrt_trainer_set_tensor_parallel(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                                     const double *weights) {
  DLRT__CHECK_ARG(t && devs && n >= 2 && n <= DLRT_TP_MAX, "dlrt_trainer_set_tensor_parallel: "
                  "trainer or devices is NULL, or %d devices (2 to %d)", n, DLRT_TP_MAX);
  if (t->tp)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_tensor_parallel: already split");
  return tp_setup(t, devs, n, 0, 0, weights, NULL, NULL);
}

int dlrt_trainer_set_tensor_parallel_ranks(dlrt_trainer_t *t, dlrt_device_t *dev, int rank,
                                           int ranks, const double *weights,
                                           dlrt_collective_fn fn, void *user) {
  DLRT__CHECK_ARG(t && fn && ranks >= 2 && ranks <= DLRT_TP_MAX && rank >= 0 && rank < ranks,
                  "dlrt_trainer_set_tensor_parallel_ranks: trainer or collective is NULL, or "
                  "rank %d of %d (2 to %d ranks)", rank, ranks, DLRT_TP_MAX);
  if (t->tp)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_tensor_parallel_ranks: already "
                           "split");
  return tp_setup(t, dev ? &dev : &t->dev, 1, rank, ranks, weights, fn, user);
}

int dlrt_trainer_tensor_parallel(const dlrt_trainer_t *t, dlrt_tp_peer_info *out, int max,
                                 int *n) {
  DLRT__CHECK_ARG(t && n && (out || max == 0), "dlrt_trainer_tensor_parallel: trainer or n is "
                  "NULL");
  *n = t->tp ? t->tp->n : 0;
  for (int i = 0; t->tp && i < t->tp->n && i < max; i++) {
    const tp_peer *p = &t->tp->peers[i];
    dlrt_exec_info info;
    int rc = dlrt_exec_info_get(p->e, &info);
    if (rc < 0) return rc;
    out[i] = (dlrt_tp_peer_info){.device = dlrt_device_spec(p->dev),
                                 .rank = t->tp->ranks ? t->tp->rank : i,
                                 .head_first = p->shard.head_first, .heads = p->shard.heads,
                                 .vocab_first = p->shard.vocab_first, .vocab = p->shard.vocab,
                                 .param_bytes = info.param_bytes,
                                 .state_bytes = info.state_bytes,
                                 .planned_peak_bytes = info.planned_peak_bytes,
                                 .measured_peak_bytes = info.measured_peak_bytes,
                                 .spill_budget_bytes = p->spill_budget};
    dlrt_spill_stats spill;
    if (p->spill_budget && !p->streams && dlrt_exec_spill_stats(p->e, &spill) == DLRT_OK)
      out[i].spill_peak_bytes = spill.peak_resident;
  }
  return DLRT_OK;
}

/* ------------------------------------------------------------ running */

static void *peer_main(void *arg) {
  tp_peer *p = arg;
  p->rc = dlrt_exec_run(p->e, p->mode);
  if (p->rc < 0) {
    snprintf(p->error, sizeof p->error, "%s", dlrt_last_error());
    char why[200];
    snprintf(why, sizeof why, "%s on %s", dlrt_strerror(p->rc), dlrt_device_spec(p->dev));
    group_break(p->group, why);
  }
  return NULL;
}

/* Side by side, one thread a peer (dlrt__tp_run's contract:
 * tensor_parallel_internal.h). */
int dlrt__tp_run(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                 dlrt_run_mode mode, float lr, float *loss) {
  dlrt__tp *tp = t->tp;
  int64_t count = t->batch * t->width;
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    const int32_t *mine = tokens;
    if (p->shifted) { /* the shard's own ids from 0; the others' fall outside it */
      for (int64_t k = 0; k < count; k++)
        p->shifted[k] = (int32_t)(tokens[k] - p->shard.vocab_first);
      mine = p->shifted;
    }
    if ((mode != DLRT_RUN_FORWARD && (rc = dlrt_exec_set_lr(p->e, lr)) < 0) ||
        (rc = dlrt_exec_write(p->e, p->tokens, mine, (size_t)count * sizeof(int32_t))) < 0 ||
        (rc = dlrt_exec_write(p->e, p->targets, targets, (size_t)count * sizeof(int32_t))) < 0)
      return rc;
  }
  tp->group.broken = 0;
  tp->group.arrived = 0;
  int started = 0;
  for (int i = 1; i < tp->n; i++) {
    tp_peer *p = &tp->peers[i];
    p->mode = mode;
    p->rc = DLRT_OK;
    if (pthread_create(&p->thread, NULL, peer_main, p) != 0) {
      group_break(&tp->group, "a peer's thread could not start");
      rc = dlrt__set_error(DLRT_ERR_OOM, "tensor parallel: cannot start a thread for %s",
                           dlrt_device_spec(p->dev));
      break;
    }
    started = i;
  }
  tp->peers[0].mode = mode;
  if (rc == DLRT_OK) peer_main(&tp->peers[0]);
  for (int i = 1; i <= started; i++) pthread_join(tp->peers[i].thread, NULL);
  if (rc < 0) return rc;
  /* The first peer that failed for its own reason (not a broken group). */
  int failed = -1;
  for (int i = 0; i < tp->n; i++)
    if (tp->peers[i].rc < 0 && (failed < 0 || tp->peers[failed].rc == DLRT_ERR_STATE))
      failed = i;
  if (failed >= 0)
    return dlrt__set_error(tp->peers[failed].rc, "tensor parallel, %s: %s",
                           dlrt_device_spec(tp->peers[failed].dev), tp->peers[failed].error);
  return dlrt_exec_read(tp->peers[0].e, tp->peers[0].loss, loss, sizeof *loss);
}


int dlrt__tp_evaluate(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                      float *loss) {
  return dlrt__tp_run(t, tokens, targets, DLRT_RUN_FORWARD, 0, loss);
}

/* ------------------------------------------------------------ whole tensors */

int dlrt__tp_export(dlrt_trainer_t *t, dlrt_host_tensor **out, int *n_out) {
  dlrt__tp *tp = t->tp;
  dlrt_host_tensor *mine[DLRT_TP_MAX] = {0};
  int n_mine = 0, rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
    rc = tp->peers[i].zero ? dlrt__zero_peer_export(tp->peers[i].zero, &mine[i], &n_mine)
                           : dlrt_exec_export(tp->peers[i].e, 1, &mine[i], &n_mine);
  /* The whole tensors' shapes: the trainer's graph has them. */
  dlrt_graph_t *g = t->g;
  dlrt_host_tensor *whole = rc == DLRT_OK ? calloc((size_t)n_mine, sizeof *whole) : NULL;
  if (rc == DLRT_OK && !whole) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int k = 0;
  for (; rc == DLRT_OK && k < n_mine; k++) {
    const dlrt_host_tensor *h = &mine[0][k];
    dlrt_host_tensor *w = &whole[k];
    *w = *h;
    w->data = NULL;
    for (int id = 0; id < g->n_tensors; id++)
      if (strcmp(g->tensors[id]->name, h->name) == 0) {
        memcpy(w->shape, g->tensors[id]->shape, sizeof w->shape);
        w->bytes = dlrt__tensor_bytes(g->tensors[id]);
      }
    tp_piece p;
    int split = h->dtype == DLRT_F32 && h->ndim <= 2 &&
                dlrt__tp_piece_of(h->name, &tp->gpt, &tp->peers[0].shard, h->ndim, &p);
    if (!(w->data = calloc(1, w->bytes ? w->bytes : 1))) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      break;
    }
    if (!split) {
      memcpy(w->data, h->data, h->bytes); /* whole on every peer: the first's */
      continue;
    }
    int64_t rows, cols;
    rows_cols(w, &rows, &cols);
    for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
      if (strcmp(mine[i][k].name, h->name) != 0) {
        rc = dlrt__set_error(DLRT_ERR_STATE, "tensor parallel: peer %d lists %s where peer 0 "
                             "lists %s: their graphs differ", i, mine[i][k].name, h->name);
        break;
      }
      dlrt__tp_piece_of(h->name, &tp->gpt, &tp->peers[i].shard, h->ndim, &p);
      copy_piece(w->data, rows, cols, mine[i][k].data, &p, 0);
    }
    if (rc < 0) break;
    /* Across processes: each holds its piece, zeros elsewhere; the sum over
     * the ranks is the whole tensor. */
    if (tp->fn && (rc = tp->fn(tp->user, w->data, (int64_t)(w->bytes / sizeof(float)),
                               DLRT_COLLECTIVE_SUM, -1)) < 0)
      break;
  }
  for (int i = 0; i < tp->n; i++)
    if (mine[i]) dlrt_host_tensors_free(mine[i], n_mine);
  if (rc < 0) {
    if (whole) dlrt_host_tensors_free(whole, n_mine); /* the rest are zeros */
    return rc;
  }
  *out = whole;
  *n_out = n_mine;
  return DLRT_OK;
}

int dlrt__tp_import(dlrt_trainer_t *t, const dlrt_host_tensor *tensors, int n) {
  dlrt__tp *tp = t->tp;
  if (tp->zero_stage)
    return dlrt__set_error(DLRT_ERR_STATE, "a split model's model states are sharded over its "
                           "replicas (ZeRO): load the checkpoint before dlrt_trainer_set_zero "
                           "(dltrain --resume does)");
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    dlrt_host_tensor *mine;
    if ((rc = scatter(&tp->gpt, &tp->peers[i].shard, tensors, n, &mine)) < 0) break;
    rc = dlrt_exec_import(tp->peers[i].e, mine, n);
    dlrt_host_tensors_free(mine, n);
  }
  if (rc == DLRT_OK) t->e->steps = tp->peers[0].e->steps;
  return rc;
}

/* Whether every replica is split as this one is (its peers' shards, in
 * order): the replicas sum each shard with the others' same shard, so
 * their vectors must line up. The sum over the replicas of this layout
 * must be `world` times it; a replica split otherwise makes it differ on
 * it (with two replicas, on both), which then stops the job. */
static int same_split(dlrt_trainer_t *t) {
  dlrt__tp *tp = t->tp;
  enum { PER_PEER = 5, LAYOUT = 2 + PER_PEER * DLRT_TP_MAX };
  float mine[LAYOUT] = {(float)tp->n, (float)tp->ranks}, all[LAYOUT];
  for (int i = 0; i < tp->n; i++) {
    const tp_peer *p = &tp->peers[i];
    float *v = mine + 2 + PER_PEER * i;
    v[0] = (float)p->shard.head_first, v[1] = (float)p->shard.heads;
    v[2] = (float)p->shard.vocab_first, v[3] = (float)p->shard.vocab, v[4] = (float)p->n_grads;
  }
  memcpy(all, mine, sizeof all);
  float *v = all;
  int64_t count = LAYOUT;
  int rc = dlrt__tp_replicas_sum(t, &v, &count, 1);
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  for (int k = 0; k < LAYOUT && rc == DLRT_OK; k++)
    if (all[k] != (float)world * mine[k])
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "the data-parallel replicas of the split model "
                           "are split differently (this one: %d peers, heads %d-%d first): "
                           "give every rank the same --tensor-parallel devices and weights",
                           tp->n, tp->peers[0].shard.head_first,
                           tp->peers[0].shard.head_first + tp->peers[0].shard.heads - 1);
  return rc;
}

int dlrt__tp_set_replicas(dlrt_trainer_t *t) {
  dlrt__tp *tp = t->tp;
  if (tp->zero_stage)
    return dlrt__set_error(DLRT_ERR_STATE, "the all-reduce of a split model's replicas is set "
                           "before ZeRO shards them (dlrt_trainer_set_zero), not after");
  if (tp->micro > 0)
    return dlrt__set_error(DLRT_ERR_STATE, "the all-reduce of a split model changes half-way "
                           "through an update (%d micro-batches run)", tp->micro);
  tp->update = update_mode(t);
  int rc = dlrt__tp_memory_update(t);
  for (int i = 0; i < tp->n && rc == DLRT_OK && tp->update == HOST_UPDATE; i++)
    rc = dlrt__tp_host_gradients(&tp->peers[i]);
  if (rc == DLRT_OK && dlrt__across_processes(t)) rc = same_split(t);
  return rc;
}

int dlrt__tp_rank(const dlrt_trainer_t *t) { return t->tp->ranks ? t->tp->rank : 0; }

int dlrt__tp_info(dlrt_trainer_t *t, dlrt_exec_info *out) {
  int rc = dlrt_exec_info_get(t->e, out); /* the whole model's parameters and state */
  out->planned_peak_bytes = out->measured_peak_bytes = 0;
  for (int i = 0; i < t->tp->n && rc == DLRT_OK; i++) {
    dlrt_exec_info peer;
    if ((rc = dlrt_exec_info_get(t->tp->peers[i].e, &peer)) < 0) break;
    if (peer.planned_peak_bytes > out->planned_peak_bytes)
      out->planned_peak_bytes = peer.planned_peak_bytes;
    if (peer.measured_peak_bytes > out->measured_peak_bytes)
      out->measured_peak_bytes = peer.measured_peak_bytes;
  }
  return rc;
}

/* ------------------------------------------------------------ for pipeline_tp.c */

/* Tensor x pipeline parallelism cuts every stage by the same shards
 * (dlrt__tp_make_shards, above), from the same whole tensors
 * (tensor_parallel_internal.h). */
int dlrt__tp_scatter(const dlrt_gpt_config *c, const dlrt_gpt_shard *s,
                     const dlrt_host_tensor *whole, int n, dlrt_host_tensor **out) {
  return scatter(c, s, whole, n, out);
}

void dlrt__tp_copy_piece(float *whole, int64_t rows, int64_t cols, float *part,
                         const tp_piece *p, int to_shard) {
  copy_piece(whole, rows, cols, part, p, to_shard);
}
