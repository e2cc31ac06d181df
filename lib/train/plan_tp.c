/* plan_tp.c — the memory planner for a split GPT (dltrain --plan
 * --tensor-parallel): each peer's shard graph, built as the peer builds it
 * (tensor_parallel.c: its heads, MLP columns and vocabulary rows, the
 * whole batch) and planned as its executor plans it, without a device. A
 * peer takes its batches from the host (no loader slots on its device) and
 * with --accum keeps a running sum of its gradients beside them; so its
 * planned peak is the peer's dlrt_tp_peer_info.planned_peak_bytes. */
#include "config.h"

#include <string.h>

#include "exec/exec.h"
#include "train/tensor_parallel_internal.h"
#include "train/train.h"
#include "util/status.h"

/* Peer `shard`'s graph on cfg's batch of `width`-token windows, as the peer
 * builds it: its loss, and with `train` the backward pass and updates. */
static int build_peer(const dlrt_trainer_config *cfg, const dlrt_gpt_config *gpt,
                      const dlrt_gpt_shard *shard, int64_t width, int train, dlrt_graph_t **out) {
  int64_t token_shape[2] = {cfg->batch, width}, target_shape[1] = {cfg->batch * width};
  dlrt_graph_t *g = NULL;
  dlrt_tensor_t *loss = NULL;
  int rc = dlrt_graph_create(&g);
  if (rc == DLRT_OK) rc = dlrt_graph_set_precision(g, cfg->precision);
  if (rc == DLRT_OK) {
    dlrt_tensor_t *tokens = dlrt_input(g, "tokens", DLRT_I32, 2, token_shape);
    dlrt_tensor_t *targets = dlrt_input(g, "targets", DLRT_I32, 1, target_shape);
    rc = dlrt_gpt_build_loss_shard(g, gpt, shard, tokens, targets, cfg->label_smoothing, &loss);
  }
  if (rc == DLRT_OK && train) {
    loss = dlrt_keep(g, loss);
    if ((rc = dlrt_graph_status(g)) == DLRT_OK) rc = dlrt_graph_backward(g, loss);
    if (rc == DLRT_OK) rc = dlrt_graph_optimize(g, &cfg->opt);
  }
  if (rc < 0) {
    dlrt_graph_destroy(g);
    return rc;
  }
  *out = g;
  return DLRT_OK;
}

/* Peer `shard`'s training graph planned with `every` forward nodes a
 * checkpoint segment (dlrt__checkpoint_segment's count, or
 * DLRT_CHECKPOINT_MARKS). */
static int plan_peer(const dlrt_trainer_config *cfg, const dlrt_gpt_config *gpt,
                     const dlrt_gpt_shard *shard, int64_t width, int every,
                     dlrt_memory_plan *out) {
  dlrt_graph_t *g = NULL;
  int rc = build_peer(cfg, gpt, shard, width, 1, &g);
  if (rc < 0) return rc;
  dlrt__memory_breakdown b;
  int segment = every == DLRT_CHECKPOINT_MARKS ? dlrt__checkpoint_segment(g, every) : every;
  rc = dlrt__graph_plan_memory(g, segment, DLRT_OFFLOAD_OPTIMIZER, 0, &b);
  if (rc == DLRT_OK) {
    memset(out, 0, sizeof *out);
    out->batch = cfg->batch;
    out->params = b.params, out->grads = b.grads, out->optimizer_state = b.state;
    out->inputs = b.inputs, out->activations = b.activations;
    out->activation_peak = b.activation_peak;
    if (cfg->accum > 1) out->accumulators = b.params;
    out->evaluation_at_peak = b.forward_at_peak;
    out->peak = b.peak + out->accumulators;
    out->spill_least = b.least_spill + out->accumulators;
    for (int i = 0; i < g->n_tensors; i++)
      if (g->tensors[i]->kind == DLRT__TENSOR_PARAM) out->param_count += g->tensors[i]->numel;
  }
  dlrt_graph_destroy(g);
  return rc;
}

/* The forward nodes a segment for cfg's checkpointing, the same on every
 * peer: DLRT_CHECKPOINT_AUTO as the trainer chooses it on peer 0's graph
 * (the longest segments whose plan fits 80% of the budget, else those of
 * the least peak). */
static int segments(const dlrt_trainer_config *cfg, const dlrt_gpt_config *gpt,
                    const dlrt_gpt_shard *shard, int64_t width, uint64_t budget, int *every) {
  *every = cfg->checkpoint == DLRT_CHECKPOINT_MARKS ? DLRT_CHECKPOINT_MARKS : 0;
  if (cfg->checkpoint == 0 || cfg->checkpoint == DLRT_CHECKPOINT_MARKS) return DLRT_OK;
  /* The training graph: its forward nodes include the casts that mixed
   * precision adds with the backward pass and the updates. */
  dlrt_graph_t *g = NULL;
  int rc = build_peer(cfg, gpt, shard, width, 1, &g);
  if (rc < 0) return rc;
  int forward = 0;
  for (int i = 0; i < g->n_nodes; i++) forward += g->nodes[i]->phase == DLRT__PHASE_FORWARD;
  if (cfg->checkpoint != DLRT_CHECKPOINT_AUTO)
    *every = dlrt__checkpoint_segment(g, cfg->checkpoint);
  dlrt_graph_destroy(g);
  if (cfg->checkpoint != DLRT_CHECKPOINT_AUTO) return DLRT_OK;
  dlrt_memory_plan p;
  uint64_t aim = budget / 100 * 80, least_peak = UINT64_MAX;
  int least = 0;
  for (int k = 0; k == 0 || k >= 1; k = k == 0 ? forward - 1 : k - 1) {
    if ((rc = plan_peer(cfg, gpt, shard, width, k, &p)) < 0) return rc;
    if (p.peak <= aim) {
      *every = k;
      return DLRT_OK;
    }
    if (p.peak < least_peak) least = k, least_peak = p.peak;
    if (k == 1) break;
  }
  *every = least;
  return DLRT_OK;
}

int dlrt_plan_tensor_parallel(const dlrt_trainer_config *cfg, int64_t width, int n,
                              const double *weights, uint64_t device_memory,
                              dlrt_tp_plan *out) {
  DLRT__CHECK_ARG(cfg && cfg->model && out && n >= 2 && n <= DLRT_TP_MAX && cfg->batch >= 1 &&
                      width >= 1,
                  "dlrt_plan_tensor_parallel: config, model or out is NULL, %d peers (2 to "
                  "%d), batch %lld or windows of %lld", n, DLRT_TP_MAX,
                  (long long)(cfg ? cfg->batch : 0), (long long)width);
  dlrt_gpt_config gpt;
  if (!dlrt__gpt_model(cfg, &gpt))
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "tensor parallelism splits GPT models "
                           "(gpt-mini, gpt2, ...), not %s", cfg->model);
  if (n > gpt.heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s has %lld heads: it splits over at most "
                           "%lld devices (--tensor-parallel)", cfg->model, (long long)gpt.heads,
                           (long long)gpt.heads);
  if (width > gpt.context)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "windows of %lld tokens exceed %s's context "
                           "of %lld", (long long)width, cfg->model, (long long)gpt.context);
  for (int i = 0; weights && i < n; i++)
    if (!(weights[i] > 0))
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "tensor parallel weight %g of device %d: "
                             "weights must be positive", weights[i], i);
  dlrt_gpt_shard shards[DLRT_TP_MAX];
  dlrt__tp_make_shards(&gpt, n, weights, shards);
  int every = 0;
  int rc = segments(cfg, &gpt, &shards[0], width, device_memory, &every);
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    out[i].shard = shards[i];
    out[i].checkpoint_every = every;
    rc = plan_peer(cfg, &gpt, &shards[i], width, every, &out[i].plan);
  }
  return rc;
}

int dlrt_plan_tensor_parallel_max_batch(const dlrt_trainer_config *cfg, int64_t width, int n,
                                        const double *weights, uint64_t device_memory,
                                        int64_t *batch) {
  DLRT__CHECK_ARG(cfg && batch && device_memory > 0, "dlrt_plan_tensor_parallel_max_batch: "
                  "config or batch is NULL, or no device memory");
  dlrt_tp_plan plans[DLRT_TP_MAX];
  dlrt_trainer_config c = *cfg;
  /* The largest batch whose every peer's peak fits: doubling, then
   * halving the gap (a peak grows with the batch). */
  int64_t lo = 0, hi = 1;
  for (;;) {
    c.batch = hi;
    int rc = dlrt_plan_tensor_parallel(&c, width, n, weights, device_memory, plans);
    if (rc < 0) return rc;
    int fits = 1;
    for (int i = 0; i < n; i++) fits &= plans[i].plan.peak <= device_memory;
    if (!fits) break;
    lo = hi;
    if (hi >= ((int64_t)1 << 30)) break;
    hi *= 2;
  }
  while (hi - lo > 1 && lo < ((int64_t)1 << 30)) {
    c.batch = lo + (hi - lo) / 2;
    int rc = dlrt_plan_tensor_parallel(&c, width, n, weights, device_memory, plans);
    if (rc < 0) return rc;
    int fits = 1;
    for (int i = 0; i < n; i++) fits &= plans[i].plan.peak <= device_memory;
    if (fits) lo = c.batch;
    else hi = c.batch;
  }
  *batch = lo;
  return DLRT_OK;
}
