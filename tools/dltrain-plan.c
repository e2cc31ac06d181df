/* dltrain-plan.c — dltrain --plan: the memory a training step needs, the
 * largest batch each strategy fits in a device, and the what-if for models
 * of any size; as a table or JSON. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "dltrain.h"

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

static dlrt_trainer_t *plan_trainer; /* --plan --mem-limit: the spill plan's (below) */

/* Bytes as "12.3 MiB" / "40.0 GiB" / "350.0 GB" (decimal for what-if sums). */
static const char *human(double bytes, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
  snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

/* A transformer's own lines: the activations of one block (the plans of
 * one and two layers apart, exactly), and the peak plain and checkpointed
 * (a block is the natural segment) in fp32 and in 16 bits, each against the
 * device. */
typedef struct {
  uint64_t block;      /* activations one block keeps for the backward pass */
  uint64_t peak[2][2]; /* [fp32, 16-bit][plain, checkpoint sqrt] */
} gpt_plan;

static int plan_gpt(const dlrt_trainer_config *cfg, const dlrt_dataset *d, gpt_plan *out) {
  dlrt_memory_plan p;
  uint64_t acts[2];
  for (int layers = 1; layers <= 2; layers++) {
    dlrt_trainer_config c = *cfg;
    c.gpt.layers = layers;
    c.checkpoint = 0;
    int rc = dlrt_plan_memory(&c, d->channels, d->height, d->width, d->classes, &p);
    if (rc < 0) return rc;
    acts[layers - 1] = p.activation_peak;
  }
  out->block = acts[1] > acts[0] ? acts[1] - acts[0] : 0;
  for (int ck = 0; ck < 2; ck++) {
    for (int low = 0; low < 2; low++) {
      dlrt_trainer_config c = *cfg;
      c.precision = low ? DLRT_BF16 : DLRT_F32;
      c.checkpoint = ck ? DLRT_CHECKPOINT_SQRT : 0;
      int rc = dlrt_plan_memory(&c, d->channels, d->height, d->width, d->classes, &p);
      if (rc < 0) return rc;
      out->peak[low][ck] = p.peak;
    }
  }
  return DLRT_OK;
}

/* --plan: the planner's breakdown for the batch asked for, the largest batch
 * that fits the device (or --device-memory), and the what-if table. */
int run_plan(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
                    const char *device, uint64_t memory, const char *memory_from) {
  dlrt_memory_plan p, fit, fit_accum, fit_ckpt, fit_spill, fit_mixed;
  int rc = dlrt_plan_memory(cfg, d->channels, d->height, d->width, d->classes, &p);
  if (rc < 0) return tool_fail("cannot plan", rc);
  /* Each row is one technique over the plain run: the run's own --accum,
   * --checkpoint and --offload left out (they had made "plain" the
   * checkpointed or offloaded figure). */
  dlrt_trainer_config one = *cfg;
  one.accum = 1;
  one.checkpoint = 0;
  one.spill.policy = DLRT_OFFLOAD_NONE;
  rc = dlrt_plan_max_batch(&one, d->channels, d->height, d->width, d->classes, memory, &fit);
  dlrt_trainer_config acc = one;
  acc.accum = 2; /* any K > 1 holds the same running sums */
  if (rc == DLRT_OK)
    rc = dlrt_plan_max_batch(&acc, d->channels, d->height, d->width, d->classes, memory,
                             &fit_accum);
  dlrt_trainer_config ckpt = one;
  ckpt.checkpoint = DLRT_CHECKPOINT_SQRT;
  if (rc == DLRT_OK)
    rc = dlrt_plan_max_batch(&ckpt, d->channels, d->height, d->width, d->classes, memory,
                             &fit_ckpt);
  dlrt_trainer_config spill = one;
  spill.spill.policy = DLRT_OFFLOAD_OPTIMIZER;
  if (rc == DLRT_OK)
    rc = dlrt_plan_max_batch(&spill, d->channels, d->height, d->width, d->classes, memory,
                             &fit_spill);
  dlrt_trainer_config mixed = one;
  mixed.precision = DLRT_F16; /* bf16 stores the same bytes */
  if (rc == DLRT_OK)
    rc = dlrt_plan_max_batch(&mixed, d->channels, d->height, d->width, d->classes, memory,
                             &fit_mixed);
  if (rc < 0) return tool_fail("cannot plan", rc);
  double folk = (double)memory / (4.0 * (double)p.param_count);
  dlrt_what_if rows[8];
  int n_rows = 0;
  /* A GPT's what-if is its own parameter count unless another is given. */
  double what_if = o->what_if > 0 ? o->what_if : o->gpt_model ? (double)p.param_count : 0;
  if (what_if > 0 && (rc = dlrt_plan_what_if(what_if, memory, rows, &n_rows)) < 0)
    return tool_fail("cannot plan", rc);
  gpt_plan gp = {0};
  if (o->gpt_model && (rc = plan_gpt(cfg, d, &gp)) < 0) return tool_fail("cannot plan", rc);
  if (o->json) {
    printf("{\"plan\": {\"model\": ");
    tool_json_string(stdout, o->model);
    printf(", \"device\": ");
    tool_json_string(stdout, device);
    printf(", \"device_memory\": %" PRIu64 ", \"batch\": %" PRId64 ", \"accum\": %d, "
           "\"params\": %" PRId64 ", \"param_bytes\": %" PRIu64 ", \"grad_bytes\": %" PRIu64
           ", \"optimizer_state_bytes\": %" PRIu64 ", \"activation_bytes\": %" PRIu64
           ", \"activation_peak_bytes\": %" PRIu64 ", \"input_bytes\": %" PRIu64
           ", \"accumulator_bytes\": %" PRIu64
           ", \"loader_bytes\": %" PRIu64 ", \"planned_peak_bytes\": %" PRIu64
           ", \"peak_is_evaluation\": %s}, "
           "\"max_batch\": {\"plain\": %" PRId64 ", \"accumulation\": %" PRId64
           ", \"checkpoint_sqrt\": %" PRId64 ", \"offload\": %" PRId64
           ", \"mixed_precision\": %" PRId64 "}, \"precision\": \"%s\", "
           "\"spill_least_bytes\": %" PRIu64 ", "
           "\"folk_rule_batch\": %.0f, \"what_if\": [",
           memory, p.batch, o->accum, p.param_count, p.params, p.grads, p.optimizer_state,
           p.activations, p.activation_peak, p.inputs, p.accumulators, p.loader, p.peak,
           p.evaluation_at_peak ? "true" : "false", fit.batch, fit_accum.batch,
           fit_ckpt.batch, fit_spill.batch, fit_mixed.batch,
           cfg->precision == DLRT_F16 ? "fp16" : cfg->precision == DLRT_BF16 ? "bf16" : "fp32",
           p.spill_least, folk);
    for (int i = 0; i < n_rows; i++)
      printf("%s{\"strategy\": \"%s\", \"device_bytes\": %.0f, \"host_bytes\": %.0f, "
             "\"devices\": %.0f, \"fits_one_device\": %s}", i ? ", " : "", rows[i].strategy,
             rows[i].device_bytes, rows[i].host_bytes, rows[i].devices,
             rows[i].fits_one ? "true" : "false");
    if (o->gpt_model)
      printf("], \"transformer\": {\"context\": %" PRId64 ", \"block_activation_bytes\": %"
             PRIu64 ", \"peak_fp32\": %" PRIu64 ", \"peak_fp32_checkpointed\": %" PRIu64
             ", \"peak_16bit\": %" PRIu64 ", \"peak_16bit_checkpointed\": %" PRIu64 "}",
             d->width, gp.block, gp.peak[0][0], gp.peak[0][1], gp.peak[1][0], gp.peak[1][1]);
    else
      fputs("]", stdout);
    fputs(", \"placement\": ", stdout);
    if (dltrain_placement_print(stdout, o, cfg, d, memory, o->host_memory, memory_from, NULL,
                                1) != 0)
      return STATUS_FAIL;
    if (plan_trainer) {
      fputs(", \"spill_plan\": ", stdout);
      if (!dltrain_spill_plan_json(stdout, plan_trainer, 0, 1)) fputs("null", stdout);
    }
    /* A GPT's splits over devices of this memory (dltrain-split.c). */
    if (o->gpt_model) {
      fputs(", ", stdout);
      if ((rc = run_split(o, cfg, d, NULL, memory, 1)) != 0) return rc;
    }
    puts("}");
    return 0;
  }
  char a[32], b[32];
  printf("plan     %s on %s, batch %" PRId64 "%s, %s%s; device memory %s (%s)\n", o->model,
         device, p.batch, o->accum > 1 ? " (accumulated)" : "", dlrt_optimizer_name(o->opt.kind),
         cfg->precision == DLRT_F16 ? ", fp16" : cfg->precision == DLRT_BF16 ? ", bf16" : "",
         human((double)memory, a, sizeof a), memory_from);
  const char *names[] = {"parameters", "gradients", "optimizer state", "activations",
                         "inputs and outputs", "accumulators", "loader buffers"};
  uint64_t vals[] = {p.params, p.grads, p.optimizer_state, p.activations, p.inputs,
                     p.accumulators, p.loader};
  for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
    printf("  %-20s %10.2f MiB\n", names[i], mib(vals[i]));
  printf("  %-20s %10.2f MiB  (%" PRId64 " parameters%s)\n", "peak", mib(p.peak), p.param_count,
         p.evaluation_at_peak ? "; an evaluation's: two loaders" : "");
  printf("  %-20s %10.2f MiB  (the most intermediates live at once, at the peak or not)\n",
         "activation peak", mib(p.activation_peak));
  printf("  %-20s %10.2f MiB  (the least --mem-limit with --offload optimizer)\n",
         "spilling can do", mib(p.spill_least));
  if (o->gpt_model) {
    printf("transformer, windows of %" PRId64 " tokens: each block keeps %.2f MiB of "
           "activations for the backward pass (%s)\n", d->width, mib(gp.block),
           cfg->precision == DLRT_F32 ? "fp32" : "16-bit compute");
    const char *labels[2] = {"fp32", "fp16 or bf16"};
    for (int low = 0; low < 2; low++)
      printf("  peak in %-13s %12.2f MiB plain (%s), %12.2f MiB --checkpoint sqrt (%s)\n",
             labels[low], mib(gp.peak[low][0]), gp.peak[low][0] <= memory ? "fits" : "too big",
             mib(gp.peak[low][1]), gp.peak[low][1] <= memory ? "fits" : "too big");
  }
  printf("largest batch that fits %s:\n", human((double)memory, a, sizeof a));
  printf("  %-34s %" PRId64 "\n", "plain", fit.batch);
  printf("  %-34s %" PRId64 " per micro-batch; --accum K makes K x that per update\n",
         "gradient accumulation", fit_accum.batch);
  printf("  %-34s %" PRId64 "\n", "mixed precision (fp16 or bf16)", fit_mixed.batch);
  printf("  %-34s %" PRId64 "\n", "checkpointing (--checkpoint sqrt)", fit_ckpt.batch);
  printf("  %-34s %" PRId64 "\n", "spilling, optimizer offloaded", fit_spill.batch);
  printf("  %-34s %.0f (the rule memory / (4 x parameters))\n", "folk rule, for comparison",
         folk);
  if (n_rows) {
    printf("what-if: %.3g parameters on devices of %s; model states only (activations come\n"
           "on top), in GB of 10^9 bytes; devices: the fewest that hold it split between them\n",
           what_if, human((double)memory, a, sizeof a));
    for (int i = 0; i < n_rows; i++) {
      snprintf(a, sizeof a, "%.1f GB", rows[i].device_bytes / 1e9);
      snprintf(b, sizeof b, "+ %.1f GB host", rows[i].host_bytes / 1e9);
      printf("  %-52s %10s %-18s %s, %.0f device%s\n", rows[i].strategy, a,
             rows[i].host_bytes > 0 ? b : "", rows[i].fits_one ? "fits one" : "too big for one",
             rows[i].devices, rows[i].devices == 1 ? "" : "s");
    }
  }
  if ((rc = dltrain_placement_print(stdout, o, cfg, d, memory, o->host_memory, memory_from, NULL,
                                    0)) != 0)
    return rc;
  if (plan_trainer) dltrain_spill_plan_text(stdout, plan_trainer, 1);
  if (o->gpt_model) return run_split(o, cfg, d, NULL, memory, 0);
  return 0;
}

/* ---------------------------------------------------------------- the spill plan */

/* The trainer whose spill plan --plan --mem-limit shows (dltrain.c makes it). */
void dltrain_plan_set_trainer(dlrt_trainer_t *t) { plan_trainer = t; }

static const char *choice_name(dlrt_spill_choice c) {
  return c == DLRT_SPILL_SWAP ? "swap" : c == DLRT_SPILL_RECOMPUTE ? "recompute" : "keep";
}

static void json_ms(FILE *out, double ms) {
  if (isfinite(ms)) fprintf(out, "%.4f", ms);
  else fputs("null", out);
}

static void prediction_json(FILE *out, const dlrt_step_prediction *p) {
  fprintf(out, "{\"feasible\": %s, \"step_ms\": ", p->feasible ? "true" : "false");
  json_ms(out, p->step_ms);
  fputs(", \"compute_ms\": ", out);
  json_ms(out, p->compute_ms);
  fputs(", \"recompute_ms\": ", out);
  json_ms(out, p->recompute_ms);
  fputs(", \"exposed_transfer_ms\": ", out);
  json_ms(out, p->exposed_ms);
  fputc('}', out);
}

int dltrain_spill_plan_json(FILE *out, dlrt_trainer_t *t, double measured_ms, int decisions) {
  dlrt_exec_t *e = dlrt_trainer_executor(t);
  dlrt_spill_plan p;
  if (!e || dlrt_exec_spill_plan(e, &p) < 0 || p.decisions == 0) return 0;
  fprintf(out, "{\"asked\": \"%s\", \"chosen\": \"%s\", \"link_bytes_per_s\": %.6g, "
          "\"link_latency_s\": %.6g, \"copy_floor_bytes_per_s\": %.6g, "
          "\"copy_overhead_s\": %.6g, "
          "\"unlimited_ms\": %.4f, \"profile_ms\": %.1f, "
          "\"profile_cached\": %d, \"kept\": %d, \"swapped\": %d, \"recomputed\": %d, "
          "\"swapped_bytes\": %" PRIu64 ", \"recomputed_bytes\": %" PRIu64 ", \"predicted\": ",
          dlrt_plan_strategy_name(p.asked), dlrt_plan_strategy_name(p.chosen),
          p.link_bytes_per_s, p.link_latency_s, p.copy_floor_bytes_per_s, p.copy_overhead_s,
          p.unlimited_ms, p.profile_ms, p.profile_cached,
          p.kept, p.swapped, p.recomputed, p.swapped_bytes, p.recomputed_bytes);
  prediction_json(out, &p.predicted);
  fputs(", \"measured_step_ms\": ", out);
  json_ms(out, measured_ms > 0 ? measured_ms : NAN);
  fputs(", \"strategies\": {", out);
  for (int i = 0; i < DLRT_PLAN_STRATEGIES_; i++) {
    fprintf(out, "%s\"%s\": ", i ? ", " : "", dlrt_plan_strategy_name((dlrt_plan_strategy)i));
    prediction_json(out, &p.strategies[i]);
  }
  fputc('}', out);
  if (decisions) {
    fputs(", \"decisions\": [", out);
    for (int i = 0; i < p.decisions; i++) {
      dlrt_spill_decision d;
      if (dlrt_exec_spill_decision(e, i, &d) < 0) break;
      fprintf(out, "%s{\"tensor\": ", i ? ", " : "");
      tool_json_string(out, d.tensor);
      fprintf(out, ", \"op\": \"%s\", \"bytes\": %" PRIu64 ", \"choice\": \"%s\", \"cost_ms\": ",
              d.op, d.bytes, choice_name(d.choice));
      json_ms(out, d.cost_ms);
      fputs(", \"swap_ms\": ", out);
      json_ms(out, d.swap_ms);
      fputs(", \"recompute_ms\": ", out);
      json_ms(out, d.recompute_ms);
      fputc('}', out);
    }
    fputc(']', out);
  }
  fputc('}', out);
  return 1;
}

static void prediction_text(FILE *out, const char *label, const dlrt_step_prediction *p) {
  if (!p->feasible) {
    fprintf(out, "  %-12s does not fit (a node finds no room)\n", label);
    return;
  }
  fprintf(out, "  %-12s %9.2f ms = compute %.2f + recompute %.2f + exposed transfer %.2f\n",
          label, p->step_ms, p->compute_ms, p->recompute_ms, p->exposed_ms);
}

int dltrain_spill_plan_text(FILE *out, dlrt_trainer_t *t, int decisions) {
  dlrt_exec_t *e = dlrt_trainer_executor(t);
  dlrt_spill_plan p;
  if (!e || dlrt_exec_spill_plan(e, &p) < 0 || p.decisions == 0) return 0;
  fprintf(out, "spill plan %s%s%s: %d kept, %d swapped (%.2f MiB), %d recomputed (%.2f MiB); "
          "link %.4g MB/s + %.3g us (copies no faster than %.4g MB/s), nodes %s%s\n",
          dlrt_plan_strategy_name(p.asked),
          p.asked != p.chosen ? " -> " : "",
          p.asked != p.chosen ? dlrt_plan_strategy_name(p.chosen) : "",
          p.kept, p.swapped, mib(p.swapped_bytes), p.recomputed, mib(p.recomputed_bytes),
          p.link_bytes_per_s / 1e6, p.link_latency_s * 1e6, p.copy_floor_bytes_per_s / 1e6,
          p.profile_cached ? "profiled before (cached)" : "profiled now",
          p.profile_cached == 2 ? " in a file" : "");
  prediction_text(out, "predicted", &p.predicted);
  fprintf(out, "  %-12s %9.2f ms (the profiled nodes alone)\n", "unlimited", p.unlimited_ms);
  for (int i = 0; i < DLRT_PLAN_STRATEGIES_; i++)
    if (i != DLRT_PLAN_AUTO || p.asked == DLRT_PLAN_AUTO)
      prediction_text(out, dlrt_plan_strategy_name((dlrt_plan_strategy)i), &p.strategies[i]);
  for (int i = 0; decisions && i < p.decisions; i++) {
    dlrt_spill_decision d;
    if (dlrt_exec_spill_decision(e, i, &d) < 0) break;
    fprintf(out, "  %-40s %-14s %9.3f MiB  %-9s %9.3f ms (swap %.3f, recompute ",
            d.tensor, d.op, mib(d.bytes), choice_name(d.choice), d.cost_ms, d.swap_ms);
    if (isfinite(d.recompute_ms)) fprintf(out, "%.3f)\n", d.recompute_ms);
    else fputs("-)\n", out);
  }
  return 1;
}

/* ---------------------------------------------------------------- the placement */

static const char *const part_names[DLRT_PARTS_] = {
    "fp32 parameters", "16-bit copies", "gradients", "optimizer state", "activations"};
static const char *const part_keys[DLRT_PARTS_] = {
    "master_params", "compute_copies", "gradients", "optimizer_state", "activations"};

int dltrain_placement_print(FILE *out, const options *o, const dlrt_trainer_config *cfg,
                            const dlrt_dataset *d, uint64_t device_memory,
                            uint64_t host_memory, const char *memory_from,
                            const dlrt_machine *m, int json) {
  dlrt_placement pl;
  /* The look-ahead is the placement's unless --spill-prefetch named one. */
  dlrt_trainer_config c = *cfg;
  if (!o->spill_prefetch_given) c.spill.prefetch = 0;
  int rc = dlrt_plan_placement(&c, d->channels, d->height, d->width, d->classes, device_memory,
                               host_memory, m, &pl);
  if (rc < 0) return tool_fail("cannot place the model", rc);
  /* The placed step on the machine: its offload replayed without the
   * budget (a budget's dry run would build the model on this device). */
  dlrt_simulated_step st;
  int simulated = 0;
  if (m && pl.fits) {
    dlrt_trainer_config placed = *cfg;
    dlrt_placement_apply(&pl, &placed);
    placed.spill.device_budget = 0; /* the host budget stays: the state's split on disk */
    if ((rc = dlrt_simulate_step(&placed, d->channels, d->height, d->width, d->classes, m, NULL,
                                 &st)) < 0)
      return tool_fail("cannot simulate the placed step", rc);
    simulated = 1;
  }
  if (json) {
    fprintf(out, "{\"fits\": %s, \"rung\": %d, \"strategy\": ", pl.fits ? "true" : "false",
            pl.rung);
    tool_json_string(out, pl.strategy);
    fprintf(out, ", \"flags\": ");
    tool_json_string(out, pl.flags);
    fprintf(out, ", \"device_memory\": %" PRIu64 ", \"host_memory\": %" PRIu64
            ", \"device_usable\": %" PRIu64 ", \"host_usable\": %" PRIu64
            ", \"device_need\": %" PRIu64 ", \"host_need\": %" PRIu64 ", \"pinned_need\": %"
            PRIu64 ", \"disk_need\": %" PRIu64 ", \"mem_limit\": %" PRIu64 ", \"host_limit\": %"
            PRIu64 ", \"ahead\": %d, \"params\": %" PRId64 ", \"why_not_cheaper\": ",
            pl.device_memory, pl.host_memory, pl.device_usable, pl.host_usable, pl.device_need,
            pl.host_need, pl.pinned_need, pl.disk_need, pl.mem_limit, pl.host_limit, pl.ahead,
            pl.param_count);
    tool_json_string(out, pl.why);
    fputs(", \"parts\": {", out);
    for (int i = 0; i < DLRT_PARTS_; i++) {
      const dlrt_placement_part *p = &pl.part[i];
      fprintf(out, "%s\"%s\": {\"device\": %" PRIu64 ", \"pinned_host\": %" PRIu64
              ", \"pageable_host\": %" PRIu64 ", \"disk\": %" PRIu64 ", \"how\": ", i ? ", " : "",
              part_keys[i], p->device, p->pinned, p->pageable, p->disk);
      tool_json_string(out, p->how ? p->how : "");
      fputc('}', out);
    }
    fputc('}', out);
    if (simulated) {
      fputs(", \"simulate\": {\"machine\": ", out);
      tool_json_string(out, m->name);
      fprintf(out, ", \"step_s\": %.9g, \"compute_s\": %.9g, \"exposed_transfer_s\": %.9g, "
              "\"host_update_s\": %.9g, \"exposed_host_s\": %.9g, \"host_hidden_fraction\": "
              "%.6g, \"tokens_per_s\": %.9g, \"samples_per_s\": %.9g, \"params_on_disk\": %d, "
              "\"state_disk_bytes\": %" PRIu64 ", \"disk_read_bytes\": %" PRIu64
              ", \"disk_written_bytes\": %" PRIu64 ", \"disk_s\": %.9g, \"disk_wait_s\": %.9g, "
              "\"exposed_disk_s\": %.9g, \"exchange_s\": %.9g}", st.step_s, st.compute_s,
              st.exposed_transfer_s, st.host_update_s, st.exposed_host_s,
              st.host_hidden_fraction, st.tokens_per_s, st.samples_per_s, st.params_on_disk,
              st.state_disk_bytes, st.disk_read_bytes, st.disk_written_bytes, st.disk_s,
              st.disk_wait_s, st.exposed_disk_s, st.exchange_s);
    }
    fputc('}', out);
    return 0;
  }
  char a[32], b[32], h[32], e[32], f[32], g[32];
  fprintf(out, "placement on a device of %s and a host of %s (%s): %s\n",
          human((double)device_memory, a, sizeof a), human((double)pl.host_memory, b, sizeof b),
          memory_from, pl.strategy);
  if (!pl.fits) {
    fprintf(out, "  nothing fits: %s\n", pl.why);
    return 0;
  }
  fprintf(out, "  %-16s %11s %11s %11s %11s\n", "", "device", "pinned host", "pageable", "disk");
  for (int i = 0; i < DLRT_PARTS_; i++) {
    const dlrt_placement_part *p = &pl.part[i];
    char dv[32], pn[32], pg[32], dk[32];
    fprintf(out, "  %-16s %11s %11s %11s %11s  %s\n", part_names[i],
            human((double)p->device, dv, sizeof dv), human((double)p->pinned, pn, sizeof pn),
            human((double)p->pageable, pg, sizeof pg), human((double)p->disk, dk, sizeof dk),
            p->how);
  }
  fprintf(out, "  needs: device %s of %s usable (85%%), host %s of %s usable (80%%; %s pinned), "
          "disk %s\n", human((double)pl.device_need, a, sizeof a),
          human((double)pl.device_usable, b, sizeof b), human((double)pl.host_need, h, sizeof h),
          human((double)pl.host_usable, e, sizeof e),
          human((double)pl.pinned_need, f, sizeof f), human((double)pl.disk_need, g, sizeof g));
  fprintf(out, "  flags: %s\n", *pl.flags ? pl.flags : "(none)");
  if (*pl.why) fprintf(out, "  not cheaper: %s\n", pl.why);
  if (simulated)
    fprintf(out, "  predicted step on %s: %.2f ms (compute %.2f, exposed transfer %.2f, host "
            "update %.2f of which %.1f%% beside the backward pass, exposed %.2f)%s\n", m->name,
            st.step_s * 1e3, st.compute_s * 1e3, st.exposed_transfer_s * 1e3,
            st.host_update_s * 1e3, 100 * st.host_hidden_fraction, st.exposed_host_s * 1e3,
            pl.rung == 6 ? "; a lower bound: the pool's own traffic of parameters and "
                           "gradients, and the disk, not replayed"
            : pl.mem_limit ? "; the budget itself not replayed" : "");
  if (simulated && st.params_on_disk)
    fprintf(out, "  predicted disk: %d states, %.1f GiB on disk; %.1f GiB read and %.1f GiB "
            "written a step in %.2f ms; the host updates waited %.2f ms for reads; the step "
            "%.2f ms longer than with all the state in host memory%s\n", st.params_on_disk, (double)st.state_disk_bytes / 1073741824.0,
            (double)st.disk_read_bytes / 1073741824.0,
            (double)st.disk_written_bytes / 1073741824.0, st.disk_s * 1e3, st.disk_wait_s * 1e3,
            st.exposed_disk_s * 1e3,
            m->disk_read_bytes_per_s > 0 ? "" : " (no disk figures: not replayed)");
  (void)o;
  return 0;
}

int dltrain_offload_auto(const options *o, dlrt_trainer_config *cfg, const dlrt_dataset *d,
                         uint64_t device_memory, FILE *log) {
  dlrt_placement pl;
  dlrt_trainer_config c = *cfg;
  if (!o->spill_prefetch_given) c.spill.prefetch = 0;
  int rc = dlrt_plan_placement(&c, d->channels, d->height, d->width, d->classes, device_memory,
                               o->host_memory, NULL, &pl);
  if (rc < 0) return tool_fail("--offload auto: cannot place the model", rc);
  if (!pl.fits) {
    fprintf(stderr, "dltrain: --offload auto: the model fits no placement on a device of "
            "%.1f MiB: %s\n", (double)device_memory / 1048576.0, pl.why);
    return STATUS_FAIL;
  }
  /* A budget the user gave stays theirs. */
  uint64_t given = cfg->spill.device_budget;
  dlrt_placement_apply(&pl, cfg);
  if (given) cfg->spill.device_budget = given;
  if (!o->quiet)
    fprintf(log, "offload auto: %s (%s)\n", pl.strategy, *pl.flags ? pl.flags : "no flags");
  return 0;
}
