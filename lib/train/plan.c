/* plan.c — the memory planner: what a training step of a classifier holds
 * on the device at its peak (the executor's own plan, run without a device),
 * the largest batch that fits a budget, and a what-if for models of any
 * size from per-parameter accounting. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "exec/exec.h"
#include "train/train.h"
#include "util/status.h"

/* Builds the classifier of cfg into a new *g (destroyed by the caller, also
 * on failure: NULL then when it could not be made) and plans its memory
 * (dlrt__graph_plan_memory: least_spill under `policy`, `beside_forward`
 * bytes beside an evaluation). */
static int plan_classifier(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                           int64_t width, int classes, dlrt_offload_policy policy,
                           uint64_t beside_forward, dlrt_graph_t **g,
                           dlrt__memory_breakdown *b) {
  *g = NULL;
  int rc = dlrt_graph_create(g);
  if (rc < 0) return rc;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  rc = dlrt__build_classifier(*g, cfg, channels, height, width, classes, &images, &labels,
                              &logits, &loss);
  if (rc == DLRT_OK)
    rc = dlrt__graph_plan_memory(*g, dlrt__checkpoint_segment(*g, cfg->checkpoint), policy,
                                 beside_forward, b);
  return rc;
}

int dlrt_plan_memory(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                     int64_t width, int classes, dlrt_memory_plan *out) {
  DLRT__CHECK_ARG(cfg && cfg->model && out, "dlrt_plan_memory: config, model or out is NULL");
  DLRT__CHECK_ARG(cfg->batch >= 1 && channels >= 1 && height >= 1 && width >= 1 && classes >= 2,
                  "dlrt_plan_memory: batch %lld, image %lld x %lld x %lld, %d classes",
                  (long long)cfg->batch, (long long)channels, (long long)height,
                  (long long)width, classes);
  memset(out, 0, sizeof *out);
  dlrt_graph_t *g;
  dlrt__memory_breakdown b;
  /* The loader's device slots: a batch of images and of labels each. An
   * evaluation runs with its own beside the training loader's. */
  uint64_t loader = dlrt__loader_device_bytes(cfg, cfg->batch, channels * height * width);
  int rc = plan_classifier(cfg, channels, height, width, classes, DLRT_OFFLOAD_OPTIMIZER, loader,
                           &g, &b);
  if (rc == DLRT_OK) {
    out->batch = cfg->batch;
    out->params = b.params;
    out->optimizer_state = b.state;
    out->inputs = b.inputs;
    out->grads = b.grads;
    out->activations = b.activations;
    out->activation_peak = b.activation_peak;
    /* Gradient accumulation keeps a running sum per parameter. */
    if (cfg->accum > 1) out->accumulators = b.params;
    out->evaluation_at_peak = b.forward_at_peak;
    out->loader = b.forward_at_peak ? 2 * loader : loader;
    out->peak = b.peak + out->accumulators + out->loader;
    /* Spilling counts the evaluation loader beside the training one. */
    out->spill_least = b.least_spill + out->accumulators + 2 * loader;
    for (int i = 0; i < g->n_tensors; i++)
      if (g->tensors[i]->kind == DLRT__TENSOR_PARAM) out->param_count += g->tensors[i]->numel;
  }
  dlrt_graph_destroy(g);
  return rc;
}

int dlrt__plan_spill_least(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                           int64_t width, int classes, uint64_t *least) {
  dlrt_graph_t *g;
  dlrt__memory_breakdown b;
  /* No loader bytes: only least_spill is read, and it does not count them. */
  int rc = plan_classifier(cfg, channels, height, width, classes, cfg->spill.policy, 0, &g, &b);
  if (rc == DLRT_OK) *least = b.least_spill;
  dlrt_graph_destroy(g);
  return rc;
}

/* What has to fit the budget: the peak, or with the optimizer offloaded the
 * least spilling can do; a run that fits without spilling does not spill
 * (the trainer spills only when the plan does not fit), so never more than
 * the peak. */
static uint64_t fit_measure(const dlrt_trainer_config *cfg, const dlrt_memory_plan *p) {
  int offload = cfg->spill.policy == DLRT_OFFLOAD_OPTIMIZER || cfg->spill.policy == DLRT_OFFLOAD_ALL;
  return offload && p->spill_least < p->peak ? p->spill_least : p->peak;
}

int dlrt_plan_max_batch(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                        int64_t width, int classes, uint64_t budget, dlrt_memory_plan *out) {
  DLRT__CHECK_ARG(cfg && out, "dlrt_plan_max_batch: config or out is NULL");
  dlrt_trainer_config c = *cfg;
  dlrt_memory_plan p;
  /* The peak grows with the batch: double until over, then bisect. */
  int64_t lo = 0, hi = 1;
  int rc;
  memset(out, 0, sizeof *out);
  for (;;) {
    c.batch = hi;
    if ((rc = dlrt_plan_memory(&c, channels, height, width, classes, &p)) < 0) return rc;
    if (fit_measure(cfg, &p) > budget) break;
    lo = hi;
    *out = p;
    if (hi >= ((int64_t)1 << 24)) return DLRT_OK; /* fits at any sensible batch */
    hi *= 2;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    c.batch = mid;
    if ((rc = dlrt_plan_memory(&c, channels, height, width, classes, &p)) < 0) return rc;
    if (fit_measure(cfg, &p) <= budget) {
      lo = mid;
      *out = p;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) {
    c.batch = 1;
    dlrt_plan_memory(&c, channels, height, width, classes, out);
    out->batch = 0;
  }
  return DLRT_OK;
}

/* Bytes per parameter of the model states (weights, gradients, optimizer
 * state), as counted by Rajbhandari et al. (ZeRO, 2020) for Adam: fp32
 * training 4 + 4 + 8; mixed precision 2 (fp16 weights) + 2 (fp16 gradients)
 * + 12 (fp32 master weights, momentum, variance); offload keeps the 12 on
 * the host (ZeRO-Offload). The devices counted are the fewest that hold the
 * states split between them (pipeline stages or ZeRO-3 shards); plain data
 * parallelism keeps a whole copy on each and needs fits_one. */
int dlrt_plan_what_if(double params, uint64_t device_bytes, dlrt_what_if *out, int *n) {
  DLRT__CHECK_ARG(params >= 1 && isfinite(params) && device_bytes > 0 && out && n,
                  "dlrt_plan_what_if: %g parameters, device of %llu bytes", params,
                  (unsigned long long)device_bytes);
  static const struct { const char *name; double device, host; } rows[] = {
      {"fp16 weights alone (inference)", 2, 0},
      {"fp32 training, Adam", 16, 0},
      {"mixed precision training, Adam", 16, 0},
      {"mixed precision, Adam, optimizer state on the host", 4, 12},
  };
  int count = (int)(sizeof rows / sizeof *rows);
  for (int i = 0; i < count; i++) {
    out[i].strategy = rows[i].name;
    out[i].device_bytes = rows[i].device * params;
    out[i].host_bytes = rows[i].host * params;
    out[i].devices = ceil(out[i].device_bytes / (double)device_bytes);
    out[i].fits_one = out[i].device_bytes <= (double)device_bytes;
  }
  *n = count;
  return DLRT_OK;
}
