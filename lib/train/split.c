/* split.c — how a GPT splits across devices (dlrt_split_eval,
 * dlrt_split_search, dlrt/train.h): tensor x pipeline x data degrees, ZeRO
 * and checkpointing, each split's bytes per device from the planner's own
 * plans of its shard's graphs, and its step predicted on a machine: the
 * executor's schedule of those graphs on the roofline of --simulate, plus
 * the collectives and copies the split adds and the bubble of dlrt's GPipe.
 *
 * Figures of a stage of k blocks at micro-batches of b windows: the graphs
 * of 1 and 2 blocks at 1 and 2 windows (the shard's heads and vocabulary
 * rows, its embeddings, head and optimizer; built and planned, never
 * allocated) give f(k, b) = base(b) + k block(b), base and block linear in
 * b. Each stage is counted with the embeddings and the head (the largest
 * stages are the end ones, which hold one each). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "graph/cost.h"
#include "train/train.h"
#include "util/status.h"

/* The figures of one graph (sums over its schedule), and of a split's
 * stage (the same, extended). */
enum {
  F_PARAMS, F_GRADS, F_STATE, F_ACTS, F_LARGEST, /* bytes at the training peak */
  F_NUMEL,                                       /* parameters */
  F_ACT_PEAK,                                    /* the most intermediates at any time */
  F_FWD, F_REC, F_BWD, F_UPD,                    /* seconds of the nodes on the machine */
  F_TP_FWD, F_TP_REC, F_TP_BWD,                  /* seconds of the tensor all-reduces */
  F_COUNT
};

typedef struct {
  double v[F_COUNT];
} figures;

/* A cache of the corners per (tensor degree, checkpointing). */
typedef struct {
  int tensor, checkpoint, ready;
  figures corner[4]; /* (blocks, windows): (1, 1), (2, 1), (1, 2), (2, 2) */
} corners;

typedef struct {
  const dlrt_trainer_config *cfg;
  dlrt_gpt_config gpt;
  int64_t context;
  const dlrt_machine *m;
  corners *cache;
  int n_cache, cap_cache;
} split_ctx;

/* ---------------------------------------------------------------- graphs */

/* The training graph of a shard of `tensor` of cfg's GPT with `blocks`
 * blocks, on micro-batches of `windows`: as the trainer (t = 1) or a
 * tensor-parallel peer (the first heads and vocabulary rows: the largest
 * shard when they do not divide evenly) builds it. */
static int build_shard(const split_ctx *x, int tensor, int64_t blocks, int64_t windows,
                       dlrt_graph_t **out) {
  dlrt_gpt_config c = x->gpt;
  c.layers = blocks;
  int64_t tokens_shape[2] = {windows, x->context}, targets_shape[1] = {windows * x->context};
  dlrt_graph_t *g = NULL;
  int rc = dlrt_graph_create(&g);
  if (rc == DLRT_OK) rc = dlrt_graph_set_precision(g, x->cfg->precision);
  dlrt_tensor_t *loss = NULL;
  if (rc == DLRT_OK) {
    dlrt_tensor_t *tokens = dlrt_input(g, "tokens", DLRT_I32, 2, tokens_shape);
    dlrt_tensor_t *targets = dlrt_input(g, "targets", DLRT_I32, 1, targets_shape);
    rc = dlrt_graph_status(g);
    dlrt_gpt_shard shard = {0, (int)(c.heads / tensor), 0, (c.vocab + tensor - 1) / tensor};
    if (rc == DLRT_OK && tensor == 1)
      rc = dlrt_gpt_build_loss(g, &c, tokens, targets, x->cfg->label_smoothing, &loss);
    else if (rc == DLRT_OK)
      rc = dlrt_gpt_build_loss_shard(g, &c, &shard, tokens, targets, x->cfg->label_smoothing,
                                     &loss);
  }
  if (rc == DLRT_OK) loss = dlrt_keep(g, loss);
  if (rc == DLRT_OK) rc = dlrt_graph_status(g);
  if (rc == DLRT_OK) rc = dlrt_graph_backward(g, loss);
  if (rc == DLRT_OK) rc = dlrt_graph_optimize(g, &x->cfg->opt);
  if (rc == DLRT_OK) rc = dlrt__graph_layout(g);
  if (rc < 0) {
    dlrt_graph_destroy(g);
    return rc;
  }
  *out = g;
  return DLRT_OK;
}

/* Seconds node n takes on machine m: --simulate's roofline
 * (lib/train/simulate.c's node_seconds, which is static there; the tests
 * hold the two equal on a whole GPT). */
static double node_seconds(const dlrt_machine *m, const dlrt__node *n, int runs) {
  dlrt__op_cost c;
  dlrt__node_cost(n, &c);
  if (!c.launches) return 0;
  double rate = m->matmul_flops[c.matmul_dtype <= DLRT_BF16 ? c.matmul_dtype : DLRT_F32];
  double overhead = runs * m->matmul_overhead_s, vector = c.vector_flops / m->vector_flops;
  if (c.matmul_kind == DLRT__COST_ATTENTION && m->attention_flops > 0) {
    rate = m->attention_flops, overhead = 0, vector = 0;
  } else if (c.matmul_kind == DLRT__COST_CONV && m->conv_flops > 0) {
    rate = m->conv_flops, overhead = 0, vector = 0;
  }
  double compute = vector;
  if (c.matmul_flops > 0) compute += c.matmul_flops / rate + overhead;
  double bandwidth = c.reduction && m->reduce_bytes_per_s > 0 ? m->reduce_bytes_per_s
                                                              : m->memory_bytes_per_s;
  double memory = (c.bytes_read + c.bytes_written) / bandwidth;
  return (compute > memory ? compute : memory) + runs * c.launches * m->launch_s;
}

/* A ring all-reduce of `bytes` over `peers` devices at `rate` B/s a
 * direction: each sends and receives 2 (peers - 1) / peers of it, in
 * 2 (peers - 1) messages. */
static double ring_allreduce_s(double bytes, int peers, double rate, double latency) {
  if (peers < 2) return 0;
  return 2.0 * (peers - 1) / peers * bytes / rate + 2.0 * (peers - 1) * latency;
}

/* The figures of the graph of (tensor, checkpoint, blocks, windows): its
 * plan's bytes, and with a machine its nodes' seconds by kind. The
 * all-reduces (dlrt_tp_reduce forward, the gradients of dlrt_tp_copy
 * backward) take the ring on the node's peer links instead; the sharded
 * head's row statistics (three values a row) go over them too. */
static int graph_figures(const split_ctx *x, int tensor, int checkpoint, int64_t blocks,
                         int64_t windows, figures *f) {
  memset(f, 0, sizeof *f);
  dlrt_graph_t *g = NULL;
  int rc = build_shard(x, tensor, blocks, windows, &g);
  if (rc < 0) return rc;
  for (int i = 0; i < g->n_tensors; i++) {
    const dlrt_tensor_t *t = g->tensors[i];
    double bytes = (double)dlrt__tensor_bytes(t);
    if (t->kind != DLRT__TENSOR_PARAM) continue;
    f->v[F_NUMEL] += (double)t->numel;
    if (bytes > f->v[F_LARGEST]) f->v[F_LARGEST] = bytes;
  }
  int every = checkpoint ? dlrt__checkpoint_segment(g, DLRT_CHECKPOINT_MARKS) : 0;
  dlrt__schedule s = {0};
  uint64_t peak;
  dlrt__memory_breakdown b;
  rc = dlrt__plan(g, DLRT__PHASE_UPDATE, every, &s, &peak, &b);
  if (rc == DLRT_OK) {
    f->v[F_PARAMS] = (double)b.params;
    f->v[F_GRADS] = (double)b.grads;
    f->v[F_STATE] = (double)b.state;
    f->v[F_ACTS] = (double)(b.activations + b.inputs);
    f->v[F_ACT_PEAK] = (double)(b.activation_peak + b.inputs);
  }
  const dlrt_machine *m = x->m;
  for (int k = 0; rc == DLRT_OK && m && k < s.n; k++) {
    const dlrt__node *n = g->nodes[s.order[k]];
    int runs = 1;
    if (s.block_of && s.block_of[k] >= 0) {
      const dlrt__chunk_block *blk = &s.blocks[s.block_of[k]];
      runs = (int)((blk->batch + blk->chunk - 1) / blk->chunk);
    }
    int recompute = n->phase == DLRT__PHASE_FORWARD && k > s.last_forward;
    int slot = n->phase == DLRT__PHASE_UPDATE ? F_UPD : n->phase == DLRT__PHASE_BACKWARD ? F_BWD
               : recompute ? F_REC : F_FWD;
    if (n->op == DLRT__OP_ALLREDUCE) {
      double bytes = (double)dlrt__tensor_bytes(n->out[0]);
      f->v[slot - F_FWD + F_TP_FWD] +=
          ring_allreduce_s(bytes, tensor, m->peer_bytes_per_s, m->peer_latency_s);
      continue;
    }
    if (n->op == DLRT__OP_LINEAR_XENT_SHARD) {
      double rows = (double)n->in[0]->numel / (double)x->gpt.embd;
      f->v[slot - F_FWD + F_TP_FWD] +=
          ring_allreduce_s(4.0 * rows, tensor, m->peer_bytes_per_s, m->peer_latency_s) +
          ring_allreduce_s(12.0 * rows, tensor, m->peer_bytes_per_s, m->peer_latency_s);
    }
    f->v[slot] += node_seconds(m, n, runs);
  }
  dlrt__schedule_free(&s);
  dlrt_graph_destroy(g);
  return rc;
}

static int corners_get(split_ctx *x, int tensor, int checkpoint, const corners **out) {
  for (int i = 0; i < x->n_cache; i++)
    if (x->cache[i].tensor == tensor && x->cache[i].checkpoint == checkpoint) {
      *out = &x->cache[i];
      return DLRT_OK;
    }
  if (x->n_cache == x->cap_cache) {
    int cap = x->cap_cache ? 2 * x->cap_cache : 8;
    corners *v = realloc(x->cache, (size_t)cap * sizeof *v);
    if (!v) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning splits");
    x->cache = v, x->cap_cache = cap;
  }
  corners *c = &x->cache[x->n_cache];
  memset(c, 0, sizeof *c);
  c->tensor = tensor, c->checkpoint = checkpoint;
  for (int i = 0; i < 4; i++) {
    int rc = graph_figures(x, tensor, checkpoint, 1 + (i & 1), 1 + (i >> 1), &c->corner[i]);
    if (rc < 0) return rc;
  }
  x->n_cache++;
  *out = c;
  return DLRT_OK;
}

/* Figure j of a stage of `blocks` blocks at `windows` per micro-batch. */
static double extend(const corners *c, int j, double blocks, double windows) {
  double v[4];
  for (int i = 0; i < 4; i++) v[i] = c->corner[i].v[j];
  if (j == F_LARGEST) return v[0] > v[3] ? v[0] : v[3];
  double block1 = v[1] - v[0], block2 = v[3] - v[2];
  double base1 = v[0] - block1, base2 = v[2] - block2;
  double block = block1 + (windows - 1) * (block2 - block1);
  double base = base1 + (windows - 1) * (base2 - base1);
  double r = base + blocks * block;
  return r > 0 ? r : 0;
}

/* ---------------------------------------------------------------- stages */

/* The blocks of the largest of `stages` stages, cut as
 * dlrt_trainer_set_pipeline cuts a GPT. */
static int largest_stage(const dlrt_gpt_config *c, int stages) {
  if (stages <= 1 || stages > c->layers) return (int)c->layers;
  int cuts[64] = {0}, most = 0; /* split.c searches up to 64 stages */
  dlrt__gpt_stage_cuts(c, stages, cuts);
  for (int s = 0; s < stages; s++) {
    int first = s ? cuts[s - 1] : 0, last = s < stages - 1 ? cuts[s] : (int)c->layers;
    if (last - first > most) most = last - first;
  }
  return most;
}

/* ---------------------------------------------------------------- a split */

/* What this version of dltrain runs, and the command line. The rules are
 * tools/dltrain-options.c's check_combinations and the trainer's: keep
 * them in step. */
static void describe(const split_ctx *x, dlrt_split *s, int node) {
  const dlrt_trainer_config *cfg = x->cfg;
  char needs[384] = "";
  size_t n = 0;
#define NEED(text)                                                                    \
  do {                                                                                \
    n += (size_t)snprintf(needs + n, n < sizeof needs ? sizeof needs - n : 0, "%s%s", \
                          n ? "; " : "", text);                                       \
    if (n >= sizeof needs) n = sizeof needs - 1;                                      \
  } while (0)
  /* tensor_parallel.c composes with data-parallel ranks, ZeRO over them
   * (stages 1-3, fp16 loss scaling included), --checkpoint and fp16 loss
   * scaling. A pipeline composes with --checkpoint, --precision and
   * data-parallel ranks, each rank driving its stages, and ZeRO stages 1-3
   * over those ranks (pipeline_zero.c); with tensor-parallel ranks too, each
   * rank driving its shard of every stage (pipeline_tp.c), ZeRO over the
   * replicas included. Ranks that share a node would need device lists of
   * their own (dltrain gives every rank the same --pipeline). */
  if (s->pipeline > 1 && s->tensor * s->data > 1 && s->pipeline < node)
    NEED("--pipeline ranks sharing a node (a device list for each rank)");
  if (s->pipeline > node) NEED("--pipeline across processes (one process drives one node)");
  if (s->zero > 0 && s->tensor == 1 && s->pipeline == 1 && cfg->precision == DLRT_F16)
    NEED("--zero with fp16 loss scaling");
#undef NEED
  snprintf(s->needs, sizeof s->needs, "%s", needs);
  s->runs_now = needs[0] == '\0';
  /* Ranks: the tensor-parallel peers and the replicas, each of them a
   * process; a pipeline's stages are devices of one process. */
  int ranks = s->tensor * s->data;
  char pipe[96] = "";
  if (s->pipeline > 1)
    snprintf(pipe, sizeof pipe, " --pipeline cuda:0,%scuda:%d --micro-batches %d",
             s->pipeline > 2 ? "...," : "", s->pipeline - 1, s->micro);
  const char *precision = cfg->precision == DLRT_BF16 ? " --precision bf16"
                          : cfg->precision == DLRT_F16 ? " --precision fp16" : "";
  char prefix[32] = "", tp[32] = "", zero[16] = "";
  if (ranks > 1) snprintf(prefix, sizeof prefix, "mpirun -np %d ", ranks);
  if (s->tensor > 1) snprintf(tp, sizeof tp, " --tensor-parallel %d", s->tensor);
  if (s->zero) snprintf(zero, sizeof zero, " --zero %d", s->zero);
  snprintf(s->flags, sizeof s->flags, "%sdltrain --model %s --batch %lld --context %lld%s%s%s%s%s",
           prefix, cfg->model, (long long)(cfg->batch / s->data), (long long)x->context, tp,
           pipe, zero, s->checkpoint ? " --checkpoint blocks" : "", precision);
}

/* A replica's batch per step is cfg->batch / data (dltrain's --batch under
 * mpirun is each rank's). */
static int eval_split(split_ctx *x, uint64_t device_memory, dlrt_split *s) {
  const dlrt_gpt_config *c = &x->gpt;
  const dlrt_trainer_config *cfg = x->cfg;
  const dlrt_machine *m = x->m;
  if (s->tensor < 1 || c->heads % s->tensor)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a tensor degree of %d does not divide %s's "
                           "%lld heads", s->tensor, cfg->model, (long long)c->heads);
  if (s->pipeline < 1 || s->pipeline > c->layers || s->pipeline > 64)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s has %lld blocks: a pipeline of 1 to %lld "
                           "stages (at most 64), not %d", cfg->model, (long long)c->layers,
                           (long long)(c->layers < 64 ? c->layers : 64), s->pipeline);
  if (s->data < 1 || cfg->batch % s->data)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a batch of %lld windows does not split "
                           "over %d data-parallel replicas", (long long)cfg->batch, s->data);
  int64_t replica = cfg->batch / s->data;
  if (s->pipeline == 1) s->micro_batch = replica;
  if (s->micro_batch < 1 || replica % s->micro_batch)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a replica's batch of %lld windows does not "
                           "split into micro-batches of %lld", (long long)replica,
                           (long long)s->micro_batch);
  if (s->zero < 0 || s->zero > 3 || (s->zero && s->data < 2))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "ZeRO stage %d: 0 to 3, and above 0 only "
                           "with data-parallel replicas (data %d)", s->zero, s->data);
  s->micro = (int)(replica / s->micro_batch);
  s->checkpoint = s->checkpoint != 0;
  s->devices = s->tensor * s->pipeline * s->data;
  int node = m && m->devices_per_node > 0 ? m->devices_per_node : 8;
  if (m && s->devices > 1 && (m->peer_bytes_per_s <= 0 || m->devices_per_node < 1 ||
                              (s->devices > node && m->network_bytes_per_s <= 0)))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine %s has no figures between devices "
                           "(peer %g B/s, %d devices per node, network %g B/s): give a file "
                           "with base = PRESET, or peer, devices_per_node and network",
                           m->name, m->peer_bytes_per_s, m->devices_per_node,
                           m->network_bytes_per_s);
  const corners *k = NULL;
  int rc = corners_get(x, s->tensor, s->checkpoint, &k);
  if (rc < 0) return rc;
  double blocks = largest_stage(c, s->pipeline), b = (double)s->micro_batch;
  s->stage_blocks = (int)blocks;
  double params = extend(k, F_PARAMS, blocks, b), grads = extend(k, F_GRADS, blocks, b);
  double state = extend(k, F_STATE, blocks, b), acts = extend(k, F_ACTS, blocks, b);
  double act_peak = extend(k, F_ACT_PEAK, blocks, b);
  s->stage_params = (int64_t)llround(extend(k, F_NUMEL, blocks, b));
  /* A stage after the first takes the residual stream in and its gradient
   * back ((b T) x C, fp32), beside what its graph holds. */
  double stream = b * (double)x->context * (double)c->embd * 4.0;
  if (s->pipeline > 1) acts += 2 * stream, act_peak += 2 * stream;
  double d = s->data;
  s->param_bytes = (uint64_t)(s->zero >= 3 ? params / d + 2 * extend(k, F_LARGEST, 1, 1)
                                           : params);
  /* The parameters, state and running sums stay the step through; the
   * gradients and intermediates come and go. Their sum at the plan's peak
   * (exact without ZeRO 2), or, where ZeRO 2 divides the gradients, that
   * sum with them divided but at least the intermediates' own peak (the
   * time of few gradients): an estimate. Over micro-batches each stage
   * sums its gradients in accumulators of its own (dlrt__exec_grad_sum), a
   * whole fp32 gradient set beside the step's. */
  double accumulators = s->micro > 1 ? 4.0 * (double)s->stage_params : 0;
  double shard_grads = s->zero >= 2 ? grads / d : grads;
  double transient = shard_grads + acts;
  if (s->zero >= 2 && act_peak > transient) transient = act_peak;
  s->grad_bytes = (uint64_t)(shard_grads + (s->zero >= 2 ? accumulators / d : accumulators));
  s->optimizer_bytes = (uint64_t)(s->zero >= 1 ? state / d : state);
  s->activation_bytes = (uint64_t)(transient - shard_grads);
  s->device_bytes = s->param_bytes + s->grad_bytes + s->optimizer_bytes + s->activation_bytes;
  s->fits = s->device_bytes <= device_memory;
  /* ZeRO's gathers go through a pinned whole copy of the parameters in each
   * process; a pipeline keeps each stage's inputs of every micro-batch. */
  s->host_bytes = (uint64_t)((s->zero ? params : 0) + (s->pipeline > 1 ? s->micro * stream : 0));
  describe(x, s, node);
  if (!m) return DLRT_OK;

  /* The step. A micro-batch on a stage: with a pipeline, its forward pass
   * as an evaluation, then the training run (forward, recomputation,
   * backward), each with its all-reduces; without one, the training run. */
  double fwd = extend(k, F_FWD, blocks, b) + extend(k, F_TP_FWD, blocks, b);
  double train = fwd + extend(k, F_REC, blocks, b) + extend(k, F_TP_REC, blocks, b) +
                 extend(k, F_BWD, blocks, b) + extend(k, F_TP_BWD, blocks, b);
  double update = extend(k, F_UPD, blocks, b) / (s->zero ? d : 1);
  double tp_s = extend(k, F_TP_FWD, blocks, b) * (s->pipeline > 1 ? 2 : 1) +
                extend(k, F_TP_REC, blocks, b) + extend(k, F_TP_BWD, blocks, b);
  s->compute_s = 0;
  double slot, M = s->micro, P = s->pipeline;
  if (s->pipeline > 1) {
    /* dlrt passes a stage's output through the host: out over the host link
     * and in again, forward and (its gradient) backward. */
    double hop = 2.0 * (stream / m->link_bytes_per_s + m->link_latency_s);
    slot = fwd + train + 2 * hop;
    s->pipeline_s = M * 2 * hop; /* the bubble's slots hold the rest */
    s->bubble_s = (P - 1) * slot;
    s->compute_s = M * (fwd + train - tp_s) + update;
    s->tensor_s = M * tp_s;
    s->serial_step_s = M * P * slot + update;
    s->step_s = (M + P - 1) * slot + update;
  } else {
    slot = train;
    s->pipeline_s = s->bubble_s = 0;
    s->compute_s = train - tp_s + update;
    s->tensor_s = tp_s;
    s->step_s = train + update;
    s->serial_step_s = s->step_s;
  }
  /* Data parallelism: the gradients of the stage's shard (fp32) summed over
   * the replicas, on the node's peer links when they all share a node, else
   * on a device's share of the node's network; dlrt's collectives go
   * through the host (out and in over the host link). ZeRO 1 and 2 then
   * gather the updated parameters; 2 reduce-scatters instead of summing
   * everywhere; 3 also copies each parameter in from its pinned whole copy
   * before its forward and its backward use, a fetch ahead of the compute. */
  s->data_s = 0;
  if (s->data > 1) {
    int one_node = s->devices <= node;
    double rate = one_node ? m->peer_bytes_per_s : m->network_bytes_per_s / node;
    double latency = one_node ? m->peer_latency_s : m->network_latency_s;
    double link = m->link_bytes_per_s, share = (d - 1) / d;
    double sums = 4.0 * (double)s->stage_params; /* every fp32 gradient of the shard */
    if (s->zero < 2)
      s->data_s = ring_allreduce_s(sums, s->data, rate, latency) + 2 * sums / link;
    else
      s->data_s = share * sums / rate + sums / link;
    if (s->zero >= 1) s->data_s += share * params / rate + params / link;
    if (s->zero >= 3) {
      double fetch = 2 * M * params / link, hidden = M * slot;
      if (fetch > hidden) s->data_s += fetch - hidden;
    }
    s->step_s += s->data_s;
    s->serial_step_s += s->data_s;
  }
  /* The trainer's exchange between steps: the loss read back, and the
   * replica's batch of tokens and targets (int32) copied into the first
   * stage's inputs (dlrt_simulate_step's, so one device's steps agree). */
  s->exchange_s = dlrt__exchange_s(m, 1, 8.0 * (double)replica * (double)x->context);
  s->step_s += s->exchange_s;
  s->serial_step_s += s->exchange_s;
  s->tokens_per_s = (double)cfg->batch * (double)x->context / s->step_s;
  /* Narayanan et al.'s count: 96 B s l h^2 (1 + s / 6h + V / 16 l h), with
   * the recomputation of activation checkpointing (or of dlrt's GPipe). */
  double B = (double)cfg->batch, S = (double)x->context, l = (double)c->layers;
  double h = (double)c->embd, V = (double)c->vocab;
  double recompute = s->checkpoint || s->pipeline > 1 ? 1.0 : 0.75;
  double flops = recompute * 96.0 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h));
  s->model_tflops = flops / s->step_s / s->devices / 1e12;
  s->mfu = s->model_tflops * 1e12 / m->peak_matmul_flops_bf16;
  s->host_fits = m->host_memory == 0 || (double)s->host_bytes * node <= (double)m->host_memory;
  return DLRT_OK;
}

static int ctx_init(split_ctx *x, const dlrt_trainer_config *cfg, int64_t context,
                    const dlrt_machine *m) {
  memset(x, 0, sizeof *x);
  DLRT__CHECK_ARG(cfg && cfg->model, "dlrt_split: config or model is NULL");
  if (!dlrt__gpt_model(cfg, &x->gpt))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s is not a GPT: splits are of GPT models "
                           "(--model gpt-mini, gpt2, gpt3-175b, ...)", cfg->model);
  int rc = dlrt_gpt_check(&x->gpt);
  if (rc < 0) return rc;
  if (context < 1 || context > x->gpt.context)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a context of %lld tokens: 1 to %s's %lld",
                           (long long)context, cfg->model, (long long)x->gpt.context);
  if (cfg->batch < 1)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a batch of %lld windows: at least 1",
                           (long long)cfg->batch);
  if (m && !(m->matmul_flops[DLRT_F32] > 0 && m->vector_flops > 0 &&
             m->memory_bytes_per_s > 0 && m->link_bytes_per_s > 0 &&
             m->peak_matmul_flops_bf16 > 0))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine %s lacks a rate (GEMM, vector, "
                           "memory, link, peak)", m->name);
  x->cfg = cfg, x->context = context, x->m = m;
  return DLRT_OK;
}

int dlrt_split_eval(const dlrt_trainer_config *cfg, int64_t context, uint64_t device_memory,
                    const dlrt_machine *m, dlrt_split *s) {
  DLRT__CHECK_ARG(s, "dlrt_split_eval: split is NULL");
  split_ctx x;
  int rc = ctx_init(&x, cfg, context, m);
  if (rc == DLRT_OK) {
    dlrt_split in = *s;
    memset(s, 0, sizeof *s);
    s->tensor = in.tensor, s->pipeline = in.pipeline, s->data = in.data, s->zero = in.zero;
    s->checkpoint = in.checkpoint, s->micro_batch = in.micro_batch;
    rc = eval_split(&x, device_memory, s);
  }
  free(x.cache);
  return rc;
}

/* ---------------------------------------------------------------- search */

/* Whether a ranks before b (by_speed 0: by devices; 1: tokens per second per
 * device; 2: in all). */
static int better(const dlrt_split *a, const dlrt_split *b, int by_speed) {
  if (a->fits != b->fits) return a->fits;
  double ra = by_speed == 2 ? a->tokens_per_s : a->tokens_per_s / a->devices;
  double rb = by_speed == 2 ? b->tokens_per_s : b->tokens_per_s / b->devices;
  if (by_speed && ra != rb) return ra > rb;
  if (a->devices != b->devices) return a->devices < b->devices;
  if (a->runs_now != b->runs_now) return a->runs_now;
  return a->device_bytes < b->device_bytes;
}

/* Keeps the best `max` in best[0 .. *n) in order. */
static void keep_best(dlrt_split *best, int max, int *n, const dlrt_split *s, int by_speed) {
  int at = *n;
  while (at > 0 && better(s, &best[at - 1], by_speed)) at--;
  if (at >= max) return;
  int last = *n < max ? *n : max - 1;
  memmove(&best[at + 1], &best[at], (size_t)(last - at) * sizeof *best);
  best[at] = *s;
  if (*n < max) (*n)++;
}

int dlrt_split_search(const dlrt_trainer_config *cfg, int64_t context,
                      const dlrt_split_limits *limits, const dlrt_machine *m, dlrt_split *best,
                      int max, int *n_best, int *enumerated, int *fitting) {
  DLRT__CHECK_ARG(limits && best && max >= 1 && n_best, "dlrt_split_search: limits, best or "
                  "n_best is NULL, or max %d below 1", max);
  DLRT__CHECK_ARG(limits->device_memory > 0, "dlrt_split_search: no device memory to fit");
  DLRT__CHECK_ARG(limits->max_devices >= 0 && limits->max_tensor >= 0 &&
                      limits->max_pipeline >= 0 && limits->max_zero >= 0 &&
                      limits->max_zero <= 3,
                  "dlrt_split_search: limits below 0 (devices %d, tensor %d, pipeline %d) or "
                  "ZeRO %d outside 0 to 3", limits->max_devices, limits->max_tensor,
                  limits->max_pipeline, limits->max_zero);
  *n_best = 0;
  split_ctx x;
  int rc = ctx_init(&x, cfg, context, m);
  int max_devices = limits->max_devices ? limits->max_devices : 4096;
  int max_tensor = limits->max_tensor ? limits->max_tensor
                   : m && m->devices_per_node > 0 ? m->devices_per_node : 8;
  int max_pipeline = limits->max_pipeline ? limits->max_pipeline : 16;
  if (max_pipeline > x.gpt.layers) max_pipeline = (int)x.gpt.layers;
  if (max_pipeline > 64) max_pipeline = 64;
  int count = 0, fit = 0;
  static const int64_t micro_sizes[] = {1, 2, 4, 8};
  for (int t = 1; rc == DLRT_OK && t <= max_tensor; t++) {
    if (x.gpt.heads % t || max_tensor % t) continue; /* a group within a node */
    for (int p = 1; rc == DLRT_OK && p <= max_pipeline && t * p <= max_devices; p++)
      for (int64_t d = 1; rc == DLRT_OK && d <= cfg->batch && t * p * d <= max_devices; d++) {
        if (cfg->batch % d) continue;
        for (int z = 0; rc == DLRT_OK && z <= (d > 1 ? limits->max_zero : 0); z++)
          for (int ck = 0; rc == DLRT_OK && ck < 2; ck++)
            for (int mb = 0; rc == DLRT_OK && mb < (p > 1 ? 4 : 1); mb++) {
              dlrt_split s;
              memset(&s, 0, sizeof s);
              s.tensor = t, s.pipeline = p, s.data = (int)d, s.zero = z, s.checkpoint = ck;
              s.micro_batch = micro_sizes[mb];
              if (p > 1 && (cfg->batch / d) % s.micro_batch) continue;
              if ((rc = eval_split(&x, limits->device_memory, &s)) < 0) break;
              if (limits->runs_now_only && !s.runs_now) continue;
              count++;
              fit += s.fits;
              keep_best(best, max, n_best, &s, !m ? 0 : limits->by_total ? 2 : 1);
            }
      }
  }
  free(x.cache);
  if (enumerated) *enumerated = count;
  if (fitting) *fitting = fit;
  return rc;
}
