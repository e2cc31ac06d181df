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
#include "train/train.h"
#include "util/status.h"

/* The peers of one process meeting at each collective: the last to arrive
 * combines every peer's values in peer order and writes the result back to
 * each (they wait meanwhile), so all get the same bits. A peer that fails
 * breaks the group, and the others' collectives fail instead of waiting. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  int n, arrived, broken;
  int64_t generation;
  float *values[DLRT_TP_MAX];
  int64_t count[DLRT_TP_MAX], tag[DLRT_TP_MAX];
  dlrt_collective_op op[DLRT_TP_MAX];
  char why[256];
} tp_group;

typedef struct {
  dlrt_device_t *dev;
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *tokens, *targets, *loss;
  dlrt_gpt_shard shard;
  int32_t *shifted; /* the batch's tokens minus the shard's first vocabulary row */
  tp_group *group;
  int index;
  pthread_t thread;
  dlrt_run_mode mode;
  int rc;
  char error[512];
  /* With updates made here (see host_update): the peer's gradients on the
   * host, its parameter elements (dlrt_exec_gradients_read's vector). */
  float *grads;
  int64_t n_grads;
  /* ZeRO over the data-parallel replicas (dlrt__tp_set_zero): this peer's
   * shard of its model states (zero.c), else NULL. */
  struct dlrt__zero *zero;
} tp_peer;

struct dlrt__tp {
  dlrt_gpt_config gpt;
  tp_peer peers[DLRT_TP_MAX];
  int n;          /* peers in this process */
  int rank, ranks; /* across processes: this process's shard of `ranks` (else 0 of n) */
  dlrt_collective_fn fn; /* across processes: the caller's collective */
  void *user;
  tp_group group;
  /* How the peers update: 0, each in its training run (DLRT_RUN_TRAIN);
   * else gradient runs (DLRT_RUN_GRADIENTS), one per micro-batch, then
   * GRADIENT_RUNS: each peer applies its own sum (accumulation alone), or
   * HOST_UPDATE: the sums go through the host, where data parallelism
   * averages them over the replicas, fp16 loss scaling agrees on the
   * overflow and clipping on the global norm, before each peer applies. */
  int update;
  int micro; /* micro-batches of the update under way */
  int zero_stage; /* ZeRO over the replicas (each peer's `zero`); 0: none */
};
enum { GRADIENT_RUNS = 1, HOST_UPDATE = 2 };

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

/* Where shard s's part of a whole tensor lies, viewed as rows x cols (a
 * vector as one row): along rows or columns, in up to three segments (the
 * q, k and v blocks of c_attn). 0 for a tensor every peer holds whole. */
typedef struct {
  int by_cols, n_seg;
  int64_t start[3], len[3];
} tp_piece;

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int piece_of(const char *tensor_name, const dlrt_gpt_config *c, const dlrt_gpt_shard *s,
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
    int split = w->dtype == DLRT_F32 && w->ndim <= 2 && piece_of(w->name, c, s, w->ndim, &p);
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

/* Peer p's host vector of its gradients. */
static int host_gradients(tp_peer *p) {
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
  if (rc == DLRT_OK) rc = dlrt_exec_create(p->g, p->dev, cfg->seed, &p->e);
  /* --checkpoint: the same segments on every peer (a recomputed segment
   * meets the others in its collectives again, in the same order). */
  if (rc == DLRT_OK && cfg->checkpoint != 0)
    rc = dlrt_exec_set_checkpointing(p->e, cfg->checkpoint);
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
  if (rc == DLRT_OK && t->tp->update == HOST_UPDATE) rc = host_gradients(p);
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
  if (t->spilling) return "tensor parallelism goes without spilling (--mem-limit, --offload, "
                          "DLRT_MEM_LIMIT) in this version";
  if (t->zero) return "ZeRO shards a split model's replicas once it is split: call "
                      "dlrt_trainer_set_zero after the tensor-parallel split, not before";
  if (t->reduce_on_device) return "tensor parallelism takes the host all-reduce "
                                  "(dlrt_trainer_set_allreduce_async), not the device one";
  if (t->cfg.checkpoint == DLRT_CHECKPOINT_AUTO)
    return "tensor parallelism takes --checkpoint blocks, sqrt or every:N, not auto, in this "
           "version";
  return NULL;
}

/* Sets up the peers from the trainer's executor, whose storage then goes. */
static int tp_setup(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n, int rank, int ranks,
                    const double *weights, dlrt_collective_fn fn, void *user) {
  const char *why = refused(t);
  if (why) return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s", why);
  dlrt_gpt_config gpt;
  dlrt__gpt_model(&t->cfg, &gpt);
  int peers = ranks ? ranks : n;
  if (peers > gpt.heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s has %lld heads: it splits over at most "
                           "%lld devices (--tensor-parallel)", t->model, (long long)gpt.heads,
                           (long long)gpt.heads);
  for (int i = 0; weights && i < peers; i++)
    if (!(weights[i] > 0) || !isfinite(weights[i]))
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "tensor parallel weight %g of device %d: "
                             "weights must be positive", weights[i], i);
  dlrt__tp *tp = calloc(1, sizeof *tp);
  if (!tp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  tp->gpt = gpt;
  tp->rank = rank, tp->ranks = ranks, tp->fn = fn, tp->user = user;
  tp->update = update_mode(t);
  pthread_mutex_init(&tp->group.lock, NULL);
  pthread_cond_init(&tp->group.done, NULL);
  tp->group.n = n;
  t->tp = tp;
  dlrt_gpt_shard shards[DLRT_TP_MAX];
  make_shards(&gpt, peers, weights, shards);
  dlrt_host_tensor *whole;
  int n_whole;
  int rc = dlrt_exec_export(t->e, 1, &whole, &n_whole);
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
                                 .planned_peak_bytes = info.planned_peak_bytes};
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

/* Every peer runs its graph on the batch (tokens B x T, targets B T) in
 * `mode` (a training run at learning rate lr), side by side; *loss is the
 * whole model's mean loss. */
static int tp_run(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
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

/* ------------------------------------------------------------ updates */

/* The data-parallel sum over the processes (the trainer's all-reduce, its
 * bucketed form or the plain one) of `n` vectors, in place, started in
 * the same order on every process. */
static int replicas_sum(dlrt_trainer_t *t, float *const *values, const int64_t *count, int n) {
  if (!t->allreduce_start) {
    int rc = DLRT_OK;
    for (int i = 0; i < n && rc == DLRT_OK; i++)
      rc = t->allreduce(t->allreduce_user, values[i], count[i]);
    return rc;
  }
  void *requests[DLRT_TP_MAX + 1];
  int started = 0, rc = DLRT_OK;
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    if ((rc = t->allreduce_start(t->allreduce_user, values[i], count[i],
                                 &requests[started])) == DLRT_OK)
      started++;
  for (int i = 0; i < started; i++) { /* every started request is completed */
    int rc2 = t->allreduce_wait(t->allreduce_user, requests[i]);
    if (rc == DLRT_OK) rc = rc2;
  }
  return rc;
}

/* Over the tensor-parallel group: across processes the caller's collective
 * (tag -2), in this process the peers' values are at hand. */
static int group_combine(dlrt__tp *tp, float *v, dlrt_collective_op op) {
  return tp->fn ? tp->fn(tp->user, v, 1, op, -2) : DLRT_OK;
}

/* Peer p's share of the squared global norm of its gradients: its shard's
 * pieces, and the tensors every peer holds whole (LayerNorms, wpe, the
 * row-parallel biases) on the first peer only, so each counts once. */
static double peer_squares(const dlrt__tp *tp, const tp_peer *p, int first) {
  const dlrt_graph_t *g = p->g;
  double sq = 0;
  int64_t at = 0;
  for (int id = 0; id < g->n_tensors; id++) {
    const dlrt_tensor_t *w = g->tensors[id];
    if (w->kind != DLRT__TENSOR_PARAM || !w->grad) continue;
    tp_piece piece;
    int split = w->ndim <= 2 && piece_of(w->name, &tp->gpt, &p->shard, w->ndim, &piece);
    if (split || first)
      for (int64_t k = 0; k < w->numel; k++) sq += (double)p->grads[at + k] * p->grads[at + k];
    at += w->numel;
  }
  return sq;
}

static int all_finite(const float *v, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    if (!isfinite(v[k])) return 0;
  return 1;
}

/* Peer p's share of the squared global norm over the range [from, to) of
 * its ZeRO layout (stages 2 and 3: the range this replica holds reduced),
 * with peer_squares' rule for the tensors every peer holds whole. */
static double range_squares(const dlrt__tp *tp, const tp_peer *p, int first) {
  int n;
  const int *ids;
  const int64_t *at;
  int64_t from, to;
  dlrt__zero_peer_layout(p->zero, &n, &ids, &at, &from, &to);
  double sq = 0;
  for (int j = 0; j < n; j++) {
    const dlrt_tensor_t *w = p->g->tensors[ids[j]];
    tp_piece piece;
    int split = w->ndim <= 2 && piece_of(w->name, &tp->gpt, &p->shard, w->ndim, &piece);
    int64_t lo = at[j] > from ? at[j] : from, hi = at[j] + w->numel < to ? at[j] + w->numel : to;
    for (int64_t k = lo; (split || first) && k < hi; k++)
      sq += (double)p->grads[k] * p->grads[k];
  }
  return sq;
}

/* Where a peer's reduced gradients are current: all of them, or (ZeRO
 * stages 2 and 3) this replica's range. */
static void reduced_range(const dlrt__tp *tp, const tp_peer *p, int64_t *from, int64_t *to) {
  *from = 0, *to = p->n_grads;
  if (p->zero && tp->zero_stage >= 2) {
    int n;
    const int *ids;
    const int64_t *at;
    dlrt__zero_peer_layout(p->zero, &n, &ids, &at, from, to);
  }
}

/* Under ZeRO: each peer's replica updates its range and the parameters are
 * all-gathered over the replicas, as dlrt_exec_apply_gradients would have
 * updated them whole (the same scale: the mean of its gradient runs, the
 * loss scale divided out; clipping is in the gradients already); or, where
 * the group overflowed, every peer skips the update and backs off its
 * scale. */
static int zero_apply(dlrt__tp *tp, int overflow) {
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    dlrt_exec_t *e = tp->peers[i].e;
    float mean = e->grads.grad_runs > 1 ? 1.0f / (float)e->grads.grad_runs : 1.0f;
    if (e->grads.scaler.enabled) mean /= e->grads.loss_scale;
    if (!overflow) rc = dlrt__zero_peer_update(tp->peers[i].zero, tp->peers[i].grads, mean);
    if (rc == DLRT_OK && e->grads.scaler.enabled) dlrt__exec_update_loss_scale(e, !overflow);
    e->grads.grad_runs = 0; /* the next update's runs start again */
  }
  return rc;
}

/* The peers' update after the last micro-batch's gradient run, made with
 * the host's help (HOST_UPDATE): each peer's gradient sum read, averaged
 * over the data-parallel replicas (ZeRO stages 2 and 3: each range reduced
 * to its owner only); with loss scaling, one verdict on overflow for the
 * group (a peer whose own gradients are finite takes a NaN, so its
 * executor skips the update and backs off the scale as the others do);
 * with clipping, one factor from the norm over the whole model (the mean
 * of the `runs` micro-batches, the loss scale divided out, as
 * dlrt_exec_apply_gradients would clip one device's); written back and
 * applied by every peer, or under ZeRO by each replica to its range. */
static int host_update(dlrt_trainer_t *t) {
  dlrt__tp *tp = t->tp;
  int rc = DLRT_OK, scatter = tp->zero_stage >= 2;
  float *values[DLRT_TP_MAX];
  int64_t counts[DLRT_TP_MAX];
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    values[i] = p->grads, counts[i] = p->n_grads;
    if (!scatter) rc = dlrt_exec_gradients_read(p->e, p->grads, p->n_grads); /* else summed */
  }
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  if (rc == DLRT_OK && dlrt__across_processes(t)) {
    float inv = 1.0f / (float)world;
    for (int i = 0; i < tp->n; i++)
      for (int64_t k = 0; k < counts[i]; k++) values[i][k] *= inv;
    if (scatter) {
      for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
        rc = dlrt__zero_peer_reduce_scatter(tp->peers[i].zero, values[i]);
    } else {
      rc = replicas_sum(t, values, counts, tp->n);
    }
  }
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(tp->peers[0].e, &scale);
  float overflow = 0;
  if (rc == DLRT_OK && scale.scaler.enabled) {
    for (int i = 0; i < tp->n; i++) {
      int64_t from, to;
      reduced_range(tp, &tp->peers[i], &from, &to);
      overflow += !all_finite(values[i] + from, to - from);
    }
    if (scatter) { /* each replica saw its own range */
      float *v = &overflow;
      int64_t one = 1;
      rc = replicas_sum(t, &v, &one, 1);
    }
    if (rc == DLRT_OK) rc = group_combine(tp, &overflow, DLRT_COLLECTIVE_MAX);
    for (int i = 0; i < tp->n && overflow > 0 && !tp->zero_stage; i++)
      if (counts[i] > 0 && all_finite(values[i], counts[i])) values[i][0] = NAN;
  }
  if (rc == DLRT_OK && t->cfg.clip_norm > 0 && overflow == 0) {
    double sq = 0;
    for (int i = 0; i < tp->n; i++) {
      int first = (tp->ranks ? tp->rank : i) == 0;
      sq += scatter ? range_squares(tp, &tp->peers[i], first)
                    : peer_squares(tp, &tp->peers[i], first);
    }
    float total = (float)sq;
    if (scatter) { /* each replica's ranges, then the shards */
      float *v = &total;
      int64_t one = 1;
      rc = replicas_sum(t, &v, &one, 1);
    }
    if (rc == DLRT_OK) rc = group_combine(tp, &total, DLRT_COLLECTIVE_SUM);
    double prescale = 1.0 / ((double)tp->micro * (scale.scaler.enabled ? scale.scale : 1.0));
    double norm = sqrt((double)total) * prescale, coef = t->cfg.clip_norm / (norm + 1e-6);
    for (int i = 0; i < tp->n && rc == DLRT_OK && coef < 1.0; i++)
      for (int64_t k = 0; k < counts[i]; k++) values[i][k] *= (float)coef;
  }
  if (rc == DLRT_OK && tp->zero_stage) return zero_apply(tp, overflow > 0);
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++)
    rc = dlrt_exec_gradients_write(tp->peers[i].e, values[i], counts[i]);
  return rc;
}

/* ZeRO stages 2 and 3: the peers' gradients of the micro-batch just run,
 * from their buckets on the host into each peer's sum (the first run
 * copies, later ones add, as the accumulators would). */
static int bucket_sums(dlrt__tp *tp) {
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    int nb = dlrt__exec_bucket_count(p->e);
    for (int b = 0; b < nb && rc == DLRT_OK; b++) rc = dlrt__exec_bucket_wait(p->e, b);
    const float *host = dlrt__exec_buckets_host(p->e);
    for (int64_t k = 0; rc == DLRT_OK && k < p->n_grads; k++)
      p->grads[k] = tp->micro ? p->grads[k] + host[k] : host[k];
  }
  return rc;
}

int dlrt__tp_step(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets, float lr,
                  float *loss) {
  dlrt__tp *tp = t->tp;
  int rc = tp_run(t, tokens, targets, tp->update ? DLRT_RUN_GRADIENTS : DLRT_RUN_TRAIN, lr, loss);
  if (rc < 0 || !tp->update) return rc;
  if (tp->zero_stage >= 2 && (rc = bucket_sums(tp)) < 0) return rc;
  /* The batch's loss over the replicas. */
  if (dlrt__across_processes(t)) {
    float *v = loss;
    int64_t one = 1;
    *loss /= (float)(t->cfg.world > 1 ? t->cfg.world : 1);
    if ((rc = replicas_sum(t, &v, &one, 1)) < 0) return rc;
  }
  if (++tp->micro < t->accum) return DLRT_OK;
  if (tp->update == HOST_UPDATE) rc = host_update(t);
  tp->micro = 0;
  for (int i = 0; i < tp->n && rc == DLRT_OK && !tp->zero_stage; i++)
    rc = dlrt_exec_apply_gradients(tp->peers[i].e);
  if (rc < 0) return rc;
  /* The trainer's executor shows the peers' loss scale and step. */
  dlrt__loss_scale_saved scale;
  dlrt__exec_save_loss_scale(tp->peers[0].e, &scale);
  dlrt__exec_restore_loss_scale(t->e, &scale);
  t->e->steps = tp->peers[0].e->steps;
  return DLRT_OK;
}

int dlrt__tp_evaluate(dlrt_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                      float *loss) {
  return tp_run(t, tokens, targets, DLRT_RUN_FORWARD, 0, loss);
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
                piece_of(h->name, &tp->gpt, &tp->peers[0].shard, h->ndim, &p);
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
      piece_of(h->name, &tp->gpt, &tp->peers[i].shard, h->ndim, &p);
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
  int rc = replicas_sum(t, &v, &count, 1);
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
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK && tp->update == HOST_UPDATE; i++)
    rc = host_gradients(&tp->peers[i]);
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

/* ------------------------------------------------------------ ZeRO over the replicas */

int dlrt__tp_set_zero(dlrt_trainer_t *t, int stage, const dlrt_zero_collectives *across) {
  dlrt__tp *tp = t->tp;
  int world = t->cfg.world > 1 ? t->cfg.world : 1;
  if (tp->zero_stage)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: the split model's replicas "
                           "are sharded already (once per trainer)");
  if (!across || !across->reduce || !across->broadcast || !across->wait ||
      !dlrt__across_processes(t) || world < 2 || !t->allreduce_start)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO shards a split model's model states "
                           "over its data-parallel replicas across processes: run N x R ranks "
                           "with --tensor-parallel N (R > 1 replicas; config.world %d), set "
                           "the replicas' all-reduce (dlrt_trainer_set_allreduce_async) first "
                           "and give the data ranks' reduce, broadcast and wait", world);
  if (tp->micro > 0)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_zero: %d micro-batches of an "
                           "update are under way", tp->micro);
  int rc = DLRT_OK;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    rc = dlrt__zero_peer_create(p->e, p->dev, stage, t->cfg.rank, world, across,
                                t->cfg.opt.kind == DLRT_OPT_SGD, &p->zero);
  }
  if (rc < 0) { /* a half-sharded split cannot train on */
    for (int i = 0; i < tp->n; i++) dlrt__zero_peer_free(tp->peers[i].zero);
    for (int i = 0; i < tp->n; i++) tp->peers[i].zero = NULL;
    return dlrt__set_error(rc, "%s (the split model's executors gave up their model states: "
                           "make the trainer again)", dlrt_last_error());
  }
  tp->zero_stage = stage;
  tp->update = HOST_UPDATE;
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) rc = host_gradients(&tp->peers[i]);
  return rc;
}

int dlrt__tp_zero_info(dlrt_trainer_t *t, dlrt_zero_info *out) {
  dlrt__tp *tp = t->tp;
  out->stage = tp->zero_stage;
  out->replicas = dlrt__across_processes(t) && t->cfg.world > 1 ? t->cfg.world : 1;
  /* The largest peer's, what it holds and what its shard holds unsharded. */
  uint64_t best = 0;
  for (int i = 0; i < tp->n; i++) {
    dlrt_zero_info peer = {0};
    dlrt__zero_peer_figures(tp->peers[i].e, tp->peers[i].zero, &peer);
    uint64_t held = peer.param_bytes + peer.grad_bytes + peer.optimizer_bytes;
    if (i == 0 || held > best) {
      best = held;
      out->param_bytes = peer.param_bytes, out->grad_bytes = peer.grad_bytes;
      out->optimizer_bytes = peer.optimizer_bytes;
      out->full_param_bytes = peer.full_param_bytes, out->full_grad_bytes = peer.full_grad_bytes;
      out->full_optimizer_bytes = peer.full_optimizer_bytes;
    }
  }
  return DLRT_OK;
}

int dlrt__tp_sync(dlrt_trainer_t *t) {
  int rc = DLRT_OK;
  for (int i = 0; i < t->tp->n && rc == DLRT_OK; i++)
    if (t->tp->peers[i].zero) rc = dlrt__zero_peer_sync(t->tp->peers[i].zero);
  return rc;
}
