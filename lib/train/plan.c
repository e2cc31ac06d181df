/* plan.c — the memory planner: what a training step of a classifier holds
 * on the device at its peak (the executor's own plan, run without a device),
 * the largest batch that fits a budget, a what-if for models of any size
 * from per-parameter accounting, and where a model that does not fit the
 * device trains (dlrt_plan_placement). */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/state_split.h"
#include "mem/caching_allocator.h"
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

/* ---------------------------------------------------------------- placement */

/* The device's usable share for a plan that spills or streams (the
 * trainer's 85%: the rest is slack for the allocator's segments), the plain
 * plan's (80%, automatic checkpointing's), and the host's (80%: the rest
 * for the system and the process). */
#define PLACE_SPILL_SHARE 85
#define PLACE_PLAIN_SHARE 80
#define PLACE_HOST_SHARE 80

static uint64_t share(uint64_t bytes, int percent) { return bytes / 100 * (uint64_t)percent; }

static void why_add(dlrt_placement *out, const char *fmt, double need, double have) {
  size_t used = strlen(out->why);
  if (used + 1 >= sizeof out->why) return;
  /* Both sizes in the unit of the larger, so that a small model reads
   * "1.72 MiB > 1.23 MiB", not "0.00 GiB > 0.00". */
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double larger = need > have ? need : have, scale = 1;
  int u = 0;
  while (u < 4 && larger >= 1024 * scale) scale *= 1024, u++;
  char a[32], b[32];
  snprintf(a, sizeof a, "%.2f %s", need / scale, units[u]);
  snprintf(b, sizeof b, "%.2f %s", have / scale, units[u]);
  snprintf(out->why + used, sizeof out->why - used, fmt, used ? "; " : "", a, b);
}

/* Host bytes of a part into pinned (while the pinned pool, half of the host
 * memory by default, has room) and pageable memory. */
static void host_part(dlrt_placement *out, dlrt_placement_part_id id, uint64_t bytes,
                      uint64_t *pinned_left) {
  uint64_t pinned = bytes < *pinned_left ? bytes : *pinned_left;
  out->part[id].pinned += pinned;
  out->part[id].pageable += bytes - pinned;
  *pinned_left -= pinned;
}

/* The most parameter and gradient bytes the streaming schedule of cfg holds
 * on the device at once (the replay's; its rates do not change them). */
static int streamed_peaks(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                          int64_t width, int classes, const dlrt_machine *on,
                          uint64_t *params, uint64_t *grads, double *step_s) {
  dlrt_machine m = {.matmul_flops = {1e12, 1e12, 1e12}, .vector_flops = 1e12,
                    .memory_bytes_per_s = 1e12, .link_bytes_per_s = 1e10,
                    .host_bytes_per_s = 1e10, .peak_matmul_flops_bf16 = 1e12};
  snprintf(m.name, sizeof m.name, "placement");
  dlrt_simulated_step st;
  dlrt_trainer_config c = *cfg;
  c.spill.policy = DLRT_OFFLOAD_PARAMS;
  c.spill.device_budget = 0;
  int rc = dlrt_simulate_step(&c, channels, height, width, classes, on ? on : &m, NULL, &st);
  *params = st.param_peak_bytes, *grads = st.grad_peak_bytes, *step_s = st.step_s;
  return rc;
}

/* The split of the streamed parameters' optimizer state of cfg's model
 * under `budget` bytes of host memory (dlrt_exec_param_state_limit's rule,
 * state_split.h). */
static int streamed_split(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                          int64_t width, int classes, uint64_t budget, dlrt__state_split *out) {
  dlrt_graph_t *g = NULL;
  dlrt_tensor_t *images, *labels, *logits, *loss;
  int n = 0, *id = NULL, *n_state = NULL;
  uint64_t *bytes = NULL;
  int rc = dlrt_graph_create(&g);
  if (rc == DLRT_OK)
    rc = dlrt__build_classifier(g, cfg, channels, height, width, classes, &images, &labels,
                                &logits, &loss);
  if (rc == DLRT_OK) rc = dlrt__streamed_states(g, &n, &id, &bytes, &n_state);
  if (rc == DLRT_OK) rc = dlrt__state_split_make(n, bytes, n_state, budget, NULL, out);
  free(id), free(bytes), free(n_state);
  dlrt_graph_destroy(g);
  return rc;
}

/* The 16-bit copies of the parameters a plan counts among its parameters
 * at the peak (the casts' outputs, kept for the backward pass). */
static uint64_t live_copies(const dlrt_trainer_config *cfg, const dlrt_memory_plan *p) {
  uint64_t master = 4 * (uint64_t)p->param_count;
  return cfg->precision != DLRT_F32 && p->params > master ? p->params - master : 0;
}

/* A size rounded down to what its flag says: whole MiB from a GiB on,
 * else whole KiB. */
static uint64_t size_round(uint64_t bytes) {
  return bytes >= ((uint64_t)1 << 30) ? bytes >> 20 << 20 : bytes >> 10 << 10;
}

static const char *size_flag(uint64_t bytes) {
  static _Thread_local char buf[32];
  if (bytes >= ((uint64_t)1 << 30)) snprintf(buf, sizeof buf, "%" PRIu64 "M", bytes >> 20);
  else snprintf(buf, sizeof buf, "%" PRIu64 "K", bytes >> 10);
  return buf;
}

/* Whether a streamed run of `need` bytes fits a device of `memory`: within
 * the usable share, and in whole segments of the caching allocator (its
 * blocks come from 2 MiB segments, and the budget bounds what it reserves). */
static int streaming_fits(uint64_t need, uint64_t memory, uint64_t usable) {
  uint64_t seg = DLRT__ALLOC_LARGE_ROUND;
  return need <= usable && (need + seg - 1) / seg * seg <= memory;
}

/* The flags of placement p, as dltrain takes them. */
static void placement_flags(dlrt_placement *p, int gpt) {
  char *f = p->flags;
  size_t n = sizeof p->flags, used = 0;
  f[0] = '\0';
  static const char *const policies[] = {"none", "activations", "optimizer", "all", "params"};
  if (p->policy != DLRT_OFFLOAD_NONE)
    used += (size_t)snprintf(f + used, n - used, "--offload %s ", policies[p->policy]);
  if (p->checkpoint == DLRT_CHECKPOINT_SQRT)
    used += (size_t)snprintf(f + used, n - used, "--checkpoint sqrt ");
  else if (p->checkpoint == DLRT_CHECKPOINT_MARKS)
    used += (size_t)snprintf(f + used, n - used, "--checkpoint %s ", gpt ? "blocks" : "marks");
  else if (p->checkpoint > 0)
    used += (size_t)snprintf(f + used, n - used, "--checkpoint every:%d ", p->checkpoint);
  if (p->mem_limit)
    used += (size_t)snprintf(f + used, n - used, "--mem-limit %s ", size_flag(p->mem_limit));
  if (p->host_limit)
    used += (size_t)snprintf(f + used, n - used, "--host-limit %s ", size_flag(p->host_limit));
  if (p->policy == DLRT_OFFLOAD_PARAMS)
    used += (size_t)snprintf(f + used, n - used, "--spill-prefetch %d ", p->ahead);
  if (used && used < n) f[used - 1] = '\0';
}

int dlrt_plan_placement(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                        int64_t width, int classes, uint64_t device_memory,
                        uint64_t host_memory, const dlrt_machine *m, dlrt_placement *out) {
  DLRT__CHECK_ARG(cfg && cfg->model && out && device_memory > 0,
                  "dlrt_plan_placement: config, model or out is NULL, or no device memory");
  memset(out, 0, sizeof *out);
  if (host_memory == 0) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    host_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  }
  DLRT__CHECK_ARG(host_memory > 0, "dlrt_plan_placement: this machine's RAM cannot be read: "
                  "give host_memory");
  int gpt = dlrt__gpt_model(cfg, NULL);
  out->device_memory = device_memory, out->host_memory = host_memory;
  out->device_usable = size_round(share(device_memory, PLACE_SPILL_SHARE));
  out->host_usable = size_round(share(host_memory, PLACE_HOST_SHARE));
  uint64_t plain_usable = share(device_memory, PLACE_PLAIN_SHARE);
  dlrt_memory_plan p0, pk;
  int rc = dlrt_plan_memory(cfg, channels, height, width, classes, &p0);
  if (rc < 0) return rc;
  out->param_count = p0.param_count;
  /* Whole model states, whatever is live at the peak: an fp32 master, its
   * gradient and state per parameter; 16-bit copies in mixed precision. */
  uint64_t master = 4 * (uint64_t)p0.param_count, grads = master, state = p0.optimizer_state;
  uint64_t copies = cfg->precision != DLRT_F32 ? 2 * (uint64_t)p0.param_count : 0;
  /* The checkpointing that keeps least: the config's, else a GPT's blocks
   * or sqrt(n) segments when they plan a lower peak. */
  int ck = cfg->checkpoint;
  pk = p0;
  if (ck == 0) {
    dlrt_trainer_config c = *cfg;
    c.checkpoint = gpt ? DLRT_CHECKPOINT_MARKS : DLRT_CHECKPOINT_SQRT;
    if ((rc = dlrt_plan_memory(&c, channels, height, width, classes, &pk)) < 0) return rc;
    if (pk.peak < p0.peak) ck = c.checkpoint;
    else pk = p0;
  }
  uint64_t acts0 = p0.peak - p0.params - p0.grads - p0.optimizer_state;
  uint64_t actsk = pk.peak - pk.params - pk.grads - pk.optimizer_state;
  out->checkpoint = cfg->checkpoint;
  out->ahead = cfg->spill.prefetch > 0 ? cfg->spill.prefetch : 4;
  uint64_t pinned_left = host_memory / 2; /* DLRT_PINNED_LIMIT's default */
  dlrt_placement_part *part = out->part;
  /* 0 and 1: all on the device. */
  for (int rung = 0; rung < 2; rung++) {
    const dlrt_memory_plan *p = rung ? &pk : &p0;
    if (rung == 1 && ck == cfg->checkpoint) continue; /* the same plan */
    if (p->peak > plain_usable) {
      why_add(out, rung ? "%scheckpointed, all on the device: %s > %s"
                        : "%sall on the device: %s > %s", (double)p->peak,
              (double)plain_usable);
      continue;
    }
    out->rung = rung;
    out->strategy = rung ? "all on the device, activations checkpointed"
                         : "all on the device";
    out->checkpoint = rung ? ck : cfg->checkpoint;
    part[DLRT_PART_MASTER].device = master;
    part[DLRT_PART_COMPUTE_COPY].device = live_copies(cfg, p);
    part[DLRT_PART_GRADIENTS].device = p->grads;
    part[DLRT_PART_OPTIMIZER].device = state;
    part[DLRT_PART_ACTIVATIONS].device = rung ? actsk : acts0;
    out->device_need = p->peak;
    goto found;
  }
  /* 2: the optimizer state on the host (ZeRO-Offload), spilling within the
   * budget; the rest of the plan on the device. */
  uint64_t need2 = pk.peak - pk.optimizer_state;
  if (need2 <= out->device_usable) {
    out->rung = 2;
    out->strategy = "optimizer state on the host, updates there";
    out->policy = DLRT_OFFLOAD_OPTIMIZER;
    out->checkpoint = ck;
    out->mem_limit = out->device_usable;
    part[DLRT_PART_MASTER].device = master;
    part[DLRT_PART_COMPUTE_COPY].device = live_copies(cfg, &pk);
    part[DLRT_PART_GRADIENTS].device = pk.grads;
    part[DLRT_PART_ACTIVATIONS].device = actsk;
    uint64_t on_host = state < out->host_usable ? state : out->host_usable;
    host_part(out, DLRT_PART_OPTIMIZER, on_host, &pinned_left);
    part[DLRT_PART_OPTIMIZER].disk = state - on_host;
    if (state > on_host) out->host_limit = out->host_usable;
    out->device_need = need2;
    goto found;
  }
  why_add(out, "%soptimizer state on the host: %s on the device > %s", (double)need2,
          (double)out->device_usable);
  /* 3, 4 and 5: parameters streamed (param_stream.c): masters, their
   * 16-bit copies, the gradients' host copies (and running sums under
   * --accum) on the host; the optimizer state there too (3), or beyond
   * --host-limit on disk (4, param_disk.c), or the masters on disk with it
   * (5); what streaming does not run with rules all out. All hold the same
   * on the device. */
  const char *refuses = cfg->world > 1 ? "data parallelism" : NULL;
  uint64_t sums = cfg->accum > 1 ? grads : 0;
  uint64_t host_rest = master + copies + grads + sums; /* all but the state */
  if (refuses) {
    size_t used = strlen(out->why);
    snprintf(out->why + used, sizeof out->why - used, "%sparameters streamed: not with %s",
             used ? "; " : "", refuses);
  } else {
    /* A GPT checkpoints its blocks; chunked convolution segments do not
     * stream, so a classifier keeps its own checkpointing unless it is
     * sqrt(n)'s. */
    dlrt_trainer_config c = *cfg;
    c.checkpoint = gpt && cfg->checkpoint == 0                  ? DLRT_CHECKPOINT_MARKS
                   : !gpt && cfg->checkpoint == DLRT_CHECKPOINT_SQRT ? 0
                                                                  : cfg->checkpoint;
    dlrt_memory_plan ps;
    if ((rc = dlrt_plan_memory(&c, channels, height, width, classes, &ps)) < 0) return rc;
    uint64_t acts = ps.peak - ps.params - ps.grads - ps.optimizer_state;
    /* The look-ahead, unless the config names one: on machine m the one
     * whose replayed step is shortest among those that fit (the shorter at
     * a tie), else the longest that fits (the further ahead, the more of
     * each fetch the compute hides). */
    static const int aheads[] = {32, 16, 8, 4, 2, 1};
    int tries = cfg->spill.prefetch > 0 ? 1 : (int)(sizeof aheads / sizeof *aheads);
    uint64_t need3 = UINT64_MAX, pp = 0, gp = 0;
    int best = 0;
    double best_s = INFINITY;
    for (int i = 0; i < tries; i++) {
      c.spill.prefetch = cfg->spill.prefetch > 0 ? cfg->spill.prefetch : aheads[i];
      uint64_t pp_i, gp_i;
      double step_s;
      if ((rc = streamed_peaks(&c, channels, height, width, classes, m, &pp_i, &gp_i,
                               &step_s)) < 0)
        return rc;
      uint64_t need = acts + live_copies(cfg, &ps) + pp_i + gp_i;
      if (!streaming_fits(need, device_memory, out->device_usable)) {
        if (!best && need < need3) need3 = need, pp = pp_i, gp = gp_i; /* the least, for why */
        continue;
      }
      if (best && (!m || step_s > best_s * (1 - 1e-9))) continue;
      best = c.spill.prefetch, best_s = step_s, need3 = need, pp = pp_i, gp = gp_i;
    }
    /* The state's split under the host's room beside the rest (rung 4),
     * and the masters' with it where even that is too little (rung 5), by
     * the runtime's own rule (state_split.h): --host-limit holds the fp32
     * masters and the optimizer state together. */
    uint64_t host_fixed = copies + grads + sums; /* on the host whatever the limit */
    dlrt__state_split split = {0};
    uint64_t state_budget = 0;
    if (best && host_rest + state > out->host_usable && host_fixed < out->host_usable) {
      state_budget = size_round(out->host_usable - host_fixed);
      if ((rc = streamed_split(&c, channels, height, width, classes, state_budget, &split)) < 0)
        return rc;
    }
    if (!best) {
      why_add(out, "%sparameters streamed: %s on the device > %s", (double)need3,
              (double)out->device_usable);
    } else if (host_rest + state <= out->host_usable || (state_budget && split.fits)) {
      int disk = host_rest + state > out->host_usable, on_disk = disk && split.masters;
      if (disk)
        why_add(out, "%sparameters streamed, all on the host: %s > %s",
                (double)(host_rest + state), (double)out->host_usable);
      if (on_disk)
        why_add(out, "%sparameters streamed, masters on the host: %s > %s",
                (double)host_rest, (double)out->host_usable);
      c.spill.prefetch = best;
      out->rung = on_disk ? 5 : disk ? 4 : 3;
      out->strategy = on_disk ? "16-bit copies and gradients on the host; fp32 masters and "
                                "optimizer state beyond --host-limit on disk, together, "
                                "parameters streamed to the device around each use"
                      : disk ? "parameters (with their 16-bit copies) and gradients on the "
                               "host, optimizer state beyond --host-limit on disk, parameters "
                               "streamed to the device around each use"
                             : "parameters, gradients and optimizer state on the host, "
                               "parameters streamed to the device around each use";
      out->policy = DLRT_OFFLOAD_PARAMS;
      out->checkpoint = c.checkpoint;
      out->ahead = c.spill.prefetch;
      /* Streaming's budget is the allocator's hard limit: the whole device,
       * the 15% above the need left to its segments. */
      out->mem_limit = size_round(device_memory);
      part[DLRT_PART_MASTER].device = pp;
      part[DLRT_PART_COMPUTE_COPY].device = live_copies(cfg, &ps);
      part[DLRT_PART_GRADIENTS].device = gp;
      part[DLRT_PART_ACTIVATIONS].device = acts;
      /* Staging memory (pinned while the pool has room): masters, copies,
       * gradients and sums, the state kept; the slots are plain malloc.
       * Masters on disk: those kept are among the split's host bytes. */
      host_part(out, DLRT_PART_COMPUTE_COPY, copies, &pinned_left);
      host_part(out, DLRT_PART_GRADIENTS, grads + sums, &pinned_left);
      if (on_disk) {
        uint64_t kept = master - split.master_disk_bytes;
        host_part(out, DLRT_PART_MASTER, kept, &pinned_left);
        part[DLRT_PART_MASTER].disk = split.master_disk_bytes;
        split.host_bytes -= kept, split.disk_bytes -= split.master_disk_bytes;
      } else {
        host_part(out, DLRT_PART_MASTER, master, &pinned_left);
      }
      if (disk) {
        out->host_limit = state_budget;
        host_part(out, DLRT_PART_OPTIMIZER, split.host_bytes, &pinned_left);
        part[DLRT_PART_OPTIMIZER].pageable += (uint64_t)split.n_slots * split.slot_bytes;
        /* The masters' fetches' staging (masters on disk), pinned while the pool has room. */
        host_part(out, DLRT_PART_OPTIMIZER, split.stage_bytes, &pinned_left);
        part[DLRT_PART_OPTIMIZER].disk = split.disk_bytes;
      } else {
        host_part(out, DLRT_PART_OPTIMIZER, state, &pinned_left);
      }
      out->device_need = need3;
      goto found;
    } else if (host_fixed >= out->host_usable) {
      why_add(out, "%sparameters streamed: %s of 16-bit copies and gradients on the host > %s "
              "(they have no disk tier yet)", (double)host_fixed, (double)out->host_usable);
    } else {
      why_add(out, "%sparameters streamed, masters and optimizer state on disk: %s on the host "
              "(the slots beside the rest) > %s",
              (double)(host_fixed + split.least_host_bytes), (double)out->host_usable);
    }
  }
  /* 6: everything through the spill pool: the device holds what one
   * operation needs at once; host copies beyond the host on disk. */
  dlrt_trainer_config c4 = *cfg;
  c4.checkpoint = ck;
  c4.spill.policy = DLRT_OFFLOAD_ALL;
  dlrt_memory_plan p4;
  if ((rc = dlrt_plan_memory(&c4, channels, height, width, classes, &p4)) < 0) return rc;
  if (p4.spill_least <= out->device_usable) {
    out->rung = 6;
    out->strategy = "everything spilled by the pool: the device holds each operation's "
                    "tensors, the host the rest, the disk what the host cannot";
    out->policy = DLRT_OFFLOAD_ALL;
    out->checkpoint = ck;
    out->mem_limit = out->device_usable;
    out->device_need = p4.spill_least;
    /* The host holds the states and the activations that do not stay; the
     * disk takes the optimizer state first (read once a step), then the
     * gradients, then the masters. */
    uint64_t acts_host = actsk > p4.spill_least ? actsk - p4.spill_least : 0;
    part[DLRT_PART_ACTIVATIONS].device = actsk - acts_host;
    uint64_t room = out->host_usable;
    struct { dlrt_placement_part_id id; uint64_t bytes; } order[] = {
        {DLRT_PART_ACTIVATIONS, acts_host}, {DLRT_PART_MASTER, master},
        {DLRT_PART_GRADIENTS, grads}, {DLRT_PART_OPTIMIZER, state}};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
      uint64_t on_host = order[i].bytes < room ? order[i].bytes : room;
      room -= on_host;
      host_part(out, order[i].id, on_host, &pinned_left);
      part[order[i].id].disk = order[i].bytes - on_host;
    }
    if (master + grads + state + acts_host > out->host_usable) out->host_limit = out->host_usable;
    goto found;
  }
  why_add(out, "%severything spilled: one operation needs %s > %s",
          (double)p4.spill_least, (double)out->device_usable);
  out->rung = -1;
  out->strategy = "none fits";
  out->checkpoint = ck;
  return DLRT_OK;
found:
  out->fits = 1;
  static const char *const device = "on the device";
  for (int i = 0; i < DLRT_PARTS_; i++) part[i].how = device;
  if (!copies) part[DLRT_PART_COMPUTE_COPY].how = "none (fp32 compute)";
  else part[DLRT_PART_COMPUTE_COPY].how = "on the device: 2 B a parameter, cast from the fp32 "
                                          "master at its first use and kept for the backward "
                                          "pass (those live at the peak; fetches move fp32)";
  if (copies && out->rung >= 3 && out->rung <= 5)
    part[DLRT_PART_COMPUTE_COPY].how = "on the host: 2 B a parameter, cast there after each "
                                       "update and fetched in the master's place (device: "
                                       "those live at the peak)";
  if (out->rung == 2) {
    part[DLRT_PART_OPTIMIZER].how = part[DLRT_PART_OPTIMIZER].disk
                                        ? "on the host, beyond --host-limit on disk; updated there"
                                        : "on the host, updated there";
  } else if (out->rung >= 3 && out->rung <= 5) {
    part[DLRT_PART_MASTER].how =
        out->rung == 5 ? "the largest that fit with their state on the host, the rest on disk "
                         "with their state: updated in its slots, the 16-bit copy cast there; "
                         "fetched in fp32 chunk by chunk through the slots (device: the most "
                         "at once)"
                       : "on the host; each fetched to the device ahead of its forward "
                         "and backward uses, freed after (device: the most at once)";
    part[DLRT_PART_GRADIENTS].how = "to the host as soon as complete (device: the most at once)";
    part[DLRT_PART_OPTIMIZER].how =
        out->rung == 3 ? "on the host, updated there beside the backward pass"
                       : "beside the masters kept, the largest that fit on the host, the rest "
                         "on disk: read ahead of its update in chunks through 4 host slots, "
                         "written back behind it; updated on the host beside the backward pass";
  } else if (out->rung == 6) {
    for (int i = 0; i < DLRT_PARTS_; i++)
      if (i != DLRT_PART_COMPUTE_COPY)
        part[i].how = "spilled by the pool: on the device while used, else on the host, "
                      "beyond --host-limit on disk";
  }
  if (out->rung >= 1 && out->rung <= 5 && out->checkpoint)
    part[DLRT_PART_ACTIVATIONS].how = "on the device, checkpointed (recomputed in the backward "
                                      "pass)";
  for (int i = 0; i < DLRT_PARTS_; i++) {
    out->pinned_need += part[i].pinned;
    out->host_need += part[i].pinned + part[i].pageable;
    out->disk_need += part[i].disk;
  }
  placement_flags(out, gpt);
  return DLRT_OK;
}

void dlrt_placement_apply(const dlrt_placement *p, dlrt_trainer_config *cfg) {
  if (!p || !cfg || !p->fits) return;
  cfg->spill.policy = p->policy;
  cfg->checkpoint = p->checkpoint;
  cfg->spill.device_budget = p->mem_limit;
  cfg->spill.host_budget = p->host_limit;
  if (p->policy == DLRT_OFFLOAD_PARAMS) cfg->spill.prefetch = p->ahead;
}
