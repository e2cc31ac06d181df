/* dltrain-plan-tp.c — dltrain --plan --tensor-parallel: each peer's shard
 * planned (dlrt_plan_tensor_parallel: its parameters, gradients, state and
 * activations at its peak, and the least budget spilling can do), against
 * its device's memory (or --device-memory) and --mem-limit, and the
 * largest batch every peer fits; with --simulate, the split's step on that
 * machine; as text or JSON. */
#include <inttypes.h>
#include <stdio.h>

#include "dltrain.h"

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

/* The memory peer i plans against: --device-memory, else its device's
 * budget (DLRT_MEM_LIMIT) or total memory. */
static uint64_t peer_memory(const options *o, dlrt_device_t *dev) {
  if (o->device_memory) return o->device_memory;
  uint64_t limit = dlrt_mem_get_limit(dev);
  dlrt_device_props props;
  if (limit) return limit;
  return dlrt_device_props_get(dev, &props) == DLRT_OK ? props.total_memory : 0;
}

/* --simulate MACHINE: the split's step on the machine's devices and peer
 * links, as --plan's splits predict it (dlrt_split_eval: tensor degree n,
 * no pipeline or replicas; checkpointing at the blocks). */
static int predict(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
                   dlrt_device_t *dev, int n, const double *weights, dlrt_machine *m,
                   dlrt_split *s) {
  int rc;
  for (int i = 1; weights && i < n; i++)
    if (weights[i] != weights[0]) {
      fputs("dltrain: --plan --simulate predicts even shares: give --tensor-parallel without "
            "@WEIGHT\n", stderr);
      return STATUS_USAGE;
    }
  if (cfg->checkpoint != 0 && cfg->checkpoint != DLRT_CHECKPOINT_MARKS) {
    fputs("dltrain: --plan --simulate --tensor-parallel predicts --checkpoint blocks or none\n",
          stderr);
    return STATUS_USAGE;
  }
  if ((rc = dlrt_machine_get(o->simulate, dev, m)) < 0) {
    fprintf(stderr, "dltrain: --simulate: %s\n", dlrt_last_error());
    return rc == DLRT_ERR_INVALID_ARG || rc == DLRT_ERR_IO ? STATUS_USAGE : STATUS_FAIL;
  }
  *s = (dlrt_split){.tensor = n, .pipeline = 1, .data = 1, .checkpoint = cfg->checkpoint != 0,
                    .micro_batch = cfg->batch};
  uint64_t memory = o->device_memory ? o->device_memory : m->device_memory;
  if ((rc = dlrt_split_eval(cfg, d->width, memory, m, s)) < 0)
    return tool_fail("cannot predict the split's step (--simulate)", rc);
  return 0;
}

int run_plan_tp(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
                dlrt_device_t *const *devs, int n, const double *weights) {
  dlrt_machine machine;
  dlrt_split split;
  if (o->simulate) {
    int status = predict(o, cfg, d, devs[0], n, weights, &machine, &split);
    if (status != 0) return status;
  }
  dlrt_tp_plan plans[DLRT_TP_MAX];
  uint64_t memory[DLRT_TP_MAX], least_memory = 0;
  for (int i = 0; i < n; i++) {
    /* --simulate without --device-memory: the machine's devices. */
    memory[i] = o->simulate && !o->device_memory ? machine.device_memory
                                                 : peer_memory(o, devs[i]);
    if (i == 0 || memory[i] < least_memory) least_memory = memory[i];
  }
  /* --checkpoint auto chooses for the spilling budget, else the first
   * peer's device, as the split does. */
  uint64_t budget = o->spill.device_budget ? o->spill.device_budget : memory[0];
  int rc = dlrt_plan_tensor_parallel(cfg, d->width, n, weights, budget, plans);
  int64_t most = 0;
  if (rc == DLRT_OK)
    rc = dlrt_plan_tensor_parallel_max_batch(cfg, d->width, n, weights, least_memory, &most);
  if (rc < 0) return tool_fail("cannot plan the split", rc);
  uint64_t limit = o->spill.device_budget;
  const char *precision = cfg->precision == DLRT_F16 ? "fp16"
                          : cfg->precision == DLRT_BF16 ? "bf16" : "fp32";
  if (o->json) {
    printf("{\"plan\": {\"model\": ");
    tool_json_string(stdout, o->model);
    printf(", \"batch\": %" PRId64 ", \"context\": %" PRId64 ", \"accum\": %d, \"precision\": "
           "\"%s\", \"checkpoint_every\": %d, \"mem_limit\": %" PRIu64 ", \"tensor_parallel\": [",
           cfg->batch, d->width, o->accum, precision, plans[0].checkpoint_every, limit);
    for (int i = 0; i < n; i++) {
      const dlrt_memory_plan *p = &plans[i].plan;
      const dlrt_gpt_shard *s = &plans[i].shard;
      printf("%s{\"device\": ", i ? ", " : "");
      tool_json_string(stdout, dlrt_device_spec(devs[i]));
      printf(", \"rank\": %d, \"head_first\": %d, \"heads\": %d, \"vocab_first\": %" PRId64
             ", \"vocab\": %" PRId64 ", \"device_memory\": %" PRIu64 ", \"params\": %" PRId64
             ", \"param_bytes\": %" PRIu64 ", \"grad_bytes\": %" PRIu64
             ", \"optimizer_state_bytes\": %" PRIu64 ", \"activation_bytes\": %" PRIu64
             ", \"activation_peak_bytes\": %" PRIu64 ", \"input_bytes\": %" PRIu64
             ", \"accumulator_bytes\": %" PRIu64 ", \"planned_peak_bytes\": %" PRIu64
             ", \"spill_least_bytes\": %" PRIu64 ", \"fits\": %s, \"fits_mem_limit\": %s}",
             i, s->head_first, s->heads, s->vocab_first, s->vocab, memory[i], p->param_count,
             p->params, p->grads, p->optimizer_state, p->activations, p->activation_peak,
             p->inputs, p->accumulators, p->peak, p->spill_least,
             p->peak <= memory[i] ? "true" : "false",
             !limit ? "null" : p->spill_least <= limit ? "true" : "false");
    }
    printf("], \"max_batch\": %" PRId64 ", \"max_batch_memory\": %" PRIu64, most,
           least_memory);
    if (o->simulate) {
      printf(", \"simulate\": {\"machine\": ");
      tool_json_string(stdout, machine.name);
      printf(", \"step_s\": %.9g, \"compute_s\": %.9g, \"tensor_s\": %.9g, \"exchange_s\": "
             "%.9g, \"tokens_per_s\": %.9g, \"device_bytes\": %" PRIu64 ", \"fits\": %s}",
             split.step_s, split.compute_s, split.tensor_s, split.exchange_s,
             split.tokens_per_s, split.device_bytes, split.fits ? "true" : "false");
    }
    printf("}}\n");
    return 0;
  }
  printf("plan     %s split over %d peers, batch %" PRId64 " of %" PRId64 " tokens%s, %s, %s",
         o->model, n, cfg->batch, d->width, o->accum > 1 ? " (accumulated)" : "",
         dlrt_optimizer_name(o->opt.kind), precision);
  if (plans[0].checkpoint_every == DLRT_CHECKPOINT_MARKS)
    printf(", checkpoint segments at the blocks");
  else if (plans[0].checkpoint_every > 0)
    printf(", checkpoint segments of %d nodes", plans[0].checkpoint_every);
  printf("\n");
  for (int i = 0; i < n; i++) {
    const dlrt_memory_plan *p = &plans[i].plan;
    const dlrt_gpt_shard *s = &plans[i].shard;
    printf("  peer %d on %s: heads %d-%d, vocabulary %" PRId64 "-%" PRId64 ", %" PRId64
           " parameters\n", i, dlrt_device_spec(devs[i]), s->head_first,
           s->head_first + s->heads - 1, s->vocab_first, s->vocab_first + s->vocab - 1,
           p->param_count);
    printf("    parameters %.2f, gradients %.2f, optimizer state %.2f, activations %.2f, "
           "inputs %.2f, accumulators %.2f MiB\n", mib(p->params), mib(p->grads),
           mib(p->optimizer_state), mib(p->activations), mib(p->inputs), mib(p->accumulators));
    printf("    peak %.2f MiB: %s %.1f MiB (%s); spilling can do %.2f MiB (the least "
           "--mem-limit with --offload optimizer)", mib(p->peak),
           p->peak <= memory[i] ? "fits" : "too big for", mib(memory[i]),
           o->device_memory ? "--device-memory" : o->simulate ? machine.name : "the device",
           mib(p->spill_least));
    if (limit)
      printf("; --mem-limit %.2f MiB: %s", mib(limit),
             p->peak <= limit ? "fits unspilled"
             : p->spill_least <= limit ? "spills" : "too small");
    printf("\n");
  }
  printf("largest batch that fits every peer (%.1f MiB each): %" PRId64 "\n",
         mib(least_memory), most);
  if (o->simulate)
    printf("predicted step on %s (%d of its devices, on its peer links): %.3f ms = compute "
           "%.3f + tensor all-reduces %.3f + exchange %.3f; %.0f tokens/s\n", machine.name, n,
           split.step_s * 1e3, split.compute_s * 1e3, split.tensor_s * 1e3,
           split.exchange_s * 1e3, split.tokens_per_s);
  return 0;
}
