/* dltrain-report.c — what a dltrain run says of itself: its --json object
 * (one line on stdout, rank 0 only) and the names and figures that object
 * shares with the text lines. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "dltrain.h"

/* A number, or null for NaN and infinities (which JSON lacks). The figures
 * are floats: the shortest text that reads back as the same float, so runs
 * compare exactly ("lr": 0.001, not 0.00100000005). */
static void json_number(double v) {
  char text[32];
  if (!isfinite(v)) {
    fputs("null", stdout);
    return;
  }
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, v);
    if ((float)strtod(text, NULL) == (float)v)
      break;
  }
  fputs(text, stdout);
}

const char *dltrain_checkpoint_name(int every) {
  static char text[32];
  if (every == 0) return "none";
  if (every == DLRT_CHECKPOINT_SQRT) return "sqrt";
  if (every == DLRT_CHECKPOINT_AUTO) return "auto";
  if (every == DLRT_CHECKPOINT_MARKS) return "blocks";
  snprintf(text, sizeof text, "every:%d", every);
  return text;
}


double dltrain_measured_step_ms(const options *o, const results *r) {
  if (r->lm) return r->lm->steps_run && r->lm->last.tokens_per_s > 0
                        ? 1e3 * (double)(o->batch * r->train->width) / r->lm->last.tokens_per_s
                        : 0;
  return r->epochs_run > 0 && r->last.images_per_s > 0
             ? 1e3 * (double)o->batch / r->last.images_per_s : 0;
}

void dltrain_print_json(const options *o, const results *r) {
  const char *keys[] = {"device", "device_name", "model", "data", "data_source",
                        "optimizer"};
  const char *vals[] = {r->device, r->device_name, o->model, r->data, r->train->source,
                        dlrt_optimizer_name(o->opt.kind)};
  putchar('{');
  tool_json_strings(stdout, keys, vals, sizeof keys / sizeof *keys);
  printf("\"train_images\": %" PRId64 ", \"test_images\": %" PRId64 ", \"epochs\": %d, "
         "\"epochs_run\": %d, \"batch\": %" PRId64 ", \"seed\": %" PRIu64 ", \"threads\": ",
         r->train->count, r->test->count, o->epochs, r->epochs_run, o->batch, o->seed);
  if (o->threads >= 0)
    printf("%d", o->threads);
  else
    fputs("null", stdout);
  printf(", \"deterministic\": %s", o->deterministic ? "true" : "false");
  printf(", \"workers\": %d, \"prefetch\": %d, \"augment\": %s, \"accum\": %d, "
         "\"checkpoint\": \"%s\"", o->workers, o->prefetch, o->augment ? "true" : "false",
         o->accum, dltrain_checkpoint_name(o->checkpoint));
  printf(", \"precision\": \"%s\", \"loss_scale\": ",
         o->precision == DLRT_F32 ? "fp32" : o->precision == DLRT_F16 ? "fp16" : "bf16");
  json_number(r->epochs_run > 0 ? r->last.loss_scale : NAN);
  printf(", \"skipped_steps\": %" PRId64, r->skipped_steps);
  printf(", \"mem_limit\": ");
  if (o->spill.device_budget)
    printf("%" PRIu64, o->spill.device_budget);
  else
    fputs("null", stdout);
  printf(", \"spilled_bytes\": %" PRIu64 ", \"spilled_to_disk_bytes\": %" PRIu64
         ", \"disk_written_bytes\": %" PRIu64 ", \"fetched_bytes\": %" PRIu64
         ", \"spill_slice_images\": %" PRId64, r->last.spilled_bytes, r->last.disk_bytes,
         r->last.disk_written_bytes, r->last.fetched_bytes, r->last.slice_images);
  /* Staging past the pinned pool's limit (DLRT_PINNED_LIMIT). */
  uint64_t pageable_peak = 0;
  for (int i = 0; i < r->n_devices; i++) {
    dlrt_pageable_stats pg;
    if (dlrt_pageable_stats_get(r->devices[i], &pg) == DLRT_OK) pageable_peak += pg.peak;
  }
  printf(", \"pageable_staging_peak_bytes\": %" PRIu64, pageable_peak);
  const char *nums[] = {"lr", "momentum", "weight_decay", "label_smoothing", "final_loss",
                        "final_accuracy", "test_loss", "test_accuracy", "train_images_per_s",
                        "stall_fraction", "loader_images_per_s", "transfer_stall_fraction"};
  int ran = r->epochs_run > 0;
  double vals_n[] = {o->opt.lr, o->opt.momentum, o->opt.weight_decay, o->label_smoothing,
                     ran ? r->last.loss : NAN, ran ? r->last.accuracy : NAN, r->eval.loss,
                     r->eval.accuracy, ran ? r->last.images_per_s : NAN,
                     ran ? r->last.stall_fraction : NAN,
                     ran ? r->last.loader_images_per_s : NAN,
                     ran && r->last.seconds > 0 ? r->last.transfer_ms / (r->last.seconds * 1e3)
                                                : NAN};
  for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) {
    printf(", \"%s\": ", nums[k]);
    json_number(vals_n[k]);
  }
  printf(", \"planned_peak_bytes\": %" PRIu64 ", \"peak_device_bytes\": %" PRIu64
         ", \"params\": %" PRId64 ", \"epoch_losses\": [",
         r->info.planned_peak_bytes, r->info.measured_peak_bytes, r->info.params);
  for (int i = 0; i < r->epochs_run; i++) {
    fputs(i ? ", " : "", stdout);
    json_number(r->losses[i]);
  }
  fputs("], \"devices\": [", stdout);
  for (int i = 0; i < r->n_devices; i++) {
    dlrt_device_props p = {0};
    dlrt_mem_stats mem = {0};
    dlrt_device_props_get(r->devices[i], &p);
    dlrt_mem_stats_get(r->devices[i], &mem);
    const char *dk[] = {"device", "device_name"}, *dv[] = {dlrt_device_spec(r->devices[i]), p.name};
    fputs(i ? ", {" : "{", stdout);
    tool_json_strings(stdout, dk, dv, 2);
    /* --devices under --mem-limit: each replica's budget and spilled peak. */
    uint64_t budget = 0, spilled = 0;
    int n_split = 0;
    if (r->trainer && dlrt_trainer_split(r->trainer, NULL, &n_split) == DLRT_OK && n_split > 1 &&
        dlrt_trainer_replica_memory(r->trainer, i, &budget, &spilled) < 0)
      dlrt_clear_error();
    printf("\"rows\": %" PRId64 ", \"peak_device_bytes\": %" PRIu64
           ", \"spill_budget_bytes\": %" PRIu64 ", \"spill_peak_bytes\": %" PRIu64 "}",
           r->rows[i], mem.allocated.peak, budget, spilled);
  }
  /* Tensor parallel: each peer's shard and bytes beside the whole model's
   * (the trainer's plan of one device). */
  fputs("], \"tensor_parallel\": [", stdout);
  /* The peers' measured and spilling peaks, now that they have trained. */
  dlrt_tp_peer_info tp[DLRT_TP_MAX];
  int n_tp = r->n_tp;
  if (n_tp > 0 && dlrt_trainer_tensor_parallel(r->trainer, tp, DLRT_TP_MAX, &n_tp) < 0) {
    dlrt_clear_error();
    n_tp = 0;
  }
  for (int i = 0; i < n_tp; i++) {
    const dlrt_tp_peer_info *p = &tp[i];
    printf("%s{\"device\": \"%s\", \"rank\": %d, \"head_first\": %d, \"heads\": %d, "
           "\"vocab_first\": %" PRId64 ", \"vocab\": %" PRId64 ", \"param_bytes\": %" PRIu64
           ", \"state_bytes\": %" PRIu64 ", \"planned_peak_bytes\": %" PRIu64
           ", \"measured_peak_bytes\": %" PRIu64 ", \"spill_budget_bytes\": %" PRIu64
           ", \"spill_peak_bytes\": %" PRIu64 "}",
           i ? ", " : "", p->device, p->rank, p->head_first, p->heads, p->vocab_first,
           p->vocab, p->param_bytes, p->state_bytes, p->planned_peak_bytes,
           p->measured_peak_bytes, p->spill_budget_bytes, p->spill_peak_bytes);
  }
  /* Pipeline stages: each one's layers and bytes (with --tensor-parallel N:
   * this rank's shard of it). */
  fputs("], \"stages\": [", stdout);
  for (int i = 0; i < r->n_stages; i++) {
    const dlrt_stage_info *p = &r->stages[i];
    printf("%s{\"device\": \"%s\", \"first\": %d, \"last\": %d, \"rank\": %d, \"ranks\": %d, "
           "\"head_first\": %d, \"heads\": %d, \"vocab_first\": %" PRId64 ", \"vocab\": %"
           PRId64 ", \"param_bytes\": %" PRIu64 ", \"state_bytes\": %" PRIu64
           ", \"planned_peak_bytes\": %" PRIu64 ", \"spill_budget_bytes\": %" PRIu64
           ", \"spill_peak_bytes\": %" PRIu64 "}", i ? ", " : "", p->device, p->first,
           p->last, p->rank, p->ranks, p->head_first, p->heads, p->vocab_first, p->vocab,
           p->param_bytes, p->state_bytes, p->planned_peak_bytes, p->spill_budget_bytes,
           p->spill_peak_bytes);
  }
  printf("], \"tensor_parallel_ranks\": %d, \"param_bytes\": %" PRIu64
         ", \"state_bytes\": %" PRIu64, r->tp_ranks, r->info.param_bytes, r->info.state_bytes);
  const dlrt_zero_info *z = &r->zero;
  printf(", \"zero\": {\"stage\": %d, \"replicas\": %d, \"param_bytes\": %" PRIu64
         ", \"grad_bytes\": %" PRIu64 ", \"optimizer_bytes\": %" PRIu64
         ", \"full_param_bytes\": %" PRIu64 ", \"full_grad_bytes\": %" PRIu64
         ", \"full_optimizer_bytes\": %" PRIu64 "}", z->stage, z->replicas, z->param_bytes,
         z->grad_bytes, z->optimizer_bytes, z->full_param_bytes, z->full_grad_bytes,
         z->full_optimizer_bytes);
  if (r->lm) {
    fputs(", \"round_losses\": [", stdout);
    for (int i = 0; i < r->lm->rounds; i++) {
      fputs(i ? ", " : "", stdout);
      json_number(r->lm->round_loss[i]);
    }
    fputs("], \"round_val_losses\": [", stdout);
    for (int i = 0; i < r->lm->rounds; i++) {
      fputs(i ? ", " : "", stdout);
      json_number(r->lm->round_val_loss[i]);
    }
    printf("], \"steps\": %" PRId64 ", \"steps_run\": %" PRId64 ", \"tokens_per_s\": ",
           o->steps, r->lm->steps_run);
    json_number(r->lm->steps_run ? r->lm->last.tokens_per_s : NAN);
    fputs(", \"val_loss\": ", stdout);
    json_number(r->lm->val_loss);
    fputs(", \"val_perplexity\": ", stdout);
    json_number(exp(r->lm->val_loss));
    fputs(", \"val_bpb\": ", stdout);
    json_number(r->lm->val_bpb);
    printf(", \"context\": %" PRId64, r->train->width);
    fputs(", \"seconds\": ", stdout);
  } else {
    fputs(", \"seconds\": ", stdout);
  }
  printf("%.3f", r->seconds);
  /* Parameter streaming (--offload params): its look-ahead as run (the
   * one param_ahead.c chose from the first step's timings unless
   * --spill-prefetch named it) and its traffic over the run; null when
   * nothing streams. */
  dlrt_param_offload_stats ps = {0};
  if (r->trainer) dlrt_exec_param_offload_stats(dlrt_trainer_executor(r->trainer), &ps);
  fputs(", \"stream\": ", stdout);
  if (ps.params_streamed)
    printf("{\"params_streamed\": %d, \"ahead\": %d, \"fetched_bytes\": %" PRIu64
           ", \"gradient_bytes\": %" PRIu64 ", \"peak_param_bytes\": %" PRIu64
           ", \"state_host_bytes\": %" PRIu64 ", \"state_disk_bytes\": %" PRIu64
           ", \"disk_read_bytes\": %" PRIu64 ", \"disk_written_bytes\": %" PRIu64
           ", \"disk_fetch_read_bytes\": %" PRIu64 ", \"disk_fetch_wait_ms\": %.3f}",
           ps.params_streamed, ps.ahead, ps.fetched_bytes, ps.gradient_bytes,
           ps.peak_param_bytes, ps.state_host_bytes, ps.state_disk_bytes, ps.disk_read_bytes,
           ps.disk_written_bytes, ps.disk_fetch_read_bytes, ps.disk_fetch_wait_ms);
  else
    fputs("null", stdout);
  if (r->trainer) {
    fputs(", \"spill_plan\": ", stdout);
    if (!dltrain_spill_plan_json(stdout, r->trainer, dltrain_measured_step_ms(o, r), 0))
      fputs("null", stdout);
  }
  puts("}");
}

/* "Say what was chosen, defaults included": the lines before training (the
 * devices, model, data, loader ...); 0, or 1 with s->status set. */
int dltrain_describe(run *s) {
  options *o = &s->o;
  dlrt_trainer_t *trainer = s->trainer;
  dlrt_dataset *data = s->data;
  FILE *log = s->log;
  results *r = &s->r;
  int rc;
  const char *env = getenv("DLRT_DEVICE");
  if ((rc = dlrt_trainer_tensor_parallel(trainer, r->tp, DLRT_TP_MAX, &r->n_tp)) < 0) {
    s->status = tool_fail("cannot read the tensor-parallel split", rc);
    return 1;
  }
  r->tp_ranks = s->tp_ranks;
  if ((rc = dlrt_trainer_stage_info(trainer, r->stages, 16, &r->n_stages)) < 0) {
    s->status = tool_fail("cannot read the pipeline's stages", rc);
    return 1;
  }
  if (r->n_tp > 0) {
    fputs("tensor parallel", log);
    for (int i = 0; i < r->n_tp; i++) {
      const dlrt_tp_peer_info *p = &r->tp[i];
      fprintf(log, "%s %s%s heads %d-%d, vocabulary %" PRId64 "-%" PRId64 " (%.1f KiB of "
              "parameters)", i ? "," : "", p->device, s->tp_ranks ? " of this rank" : "",
              p->head_first, p->head_first + p->heads - 1, p->vocab_first,
              p->vocab_first + p->vocab - 1, (double)p->param_bytes / 1024.0);
    }
    if (s->tp_ranks) fprintf(log, "; rank %d of %d", s->rank % s->tp_ranks, s->tp_ranks);
    fputc('\n', log);
  }
  if (s->n_replicas > 0 && o->devices) {
    /* Devices that are CPUs share the host's cores (the cpu backend, PoCL):
     * data parallelism between them only divides those cores. */
    int cpus = 0;
    fputs("devices ", log);
    for (int i = 0; i < s->n_replicas; i++) {
      dlrt_device_props p = {0};
      dlrt_device_props_get(s->replicas[i], &p);
      cpus += p.kind == DLRT_DEVICE_CPU;
      fprintf(log, "%s %s (%s)", i ? "," : "", dlrt_device_spec(s->replicas[i]), p.name);
    }
    fputs(", from --devices\n", log);
    /* Under --mem-limit each replica spills within it on its device. */
    uint64_t budget = 0, peak = 0;
    if (s->trainer && dlrt_trainer_replica_memory(s->trainer, 0, &budget, &peak) < 0)
      dlrt_clear_error();
    if (budget)
      fprintf(log, "spill    budget %.1f MiB a replica, each on its device (its gradient "
              "sums within it)\n", (double)budget / 1048576.0);
    if (cpus > 1)
      fprintf(log, "note     %d of them are CPU devices sharing this host's cores: together "
              "they can train slower than one alone\n", cpus);
  } else {
    fprintf(log, "device   %s (%s), %s\n", dlrt_device_spec(s->dev), s->props.name,
            o->device && *o->device ? "from --device" : env && *env ? "from $DLRT_DEVICE" : "auto");
  }
  fprintf(log, "model    %s, %" PRId64 " parameters; %s lr %g, batch %" PRId64, o->model,
          r->info.params, dlrt_optimizer_name(o->opt.kind), o->opt.lr, o->batch);
  if (o->accum > 1)
    fprintf(log, " x %d accumulated (%" PRId64 " per update)", o->accum, o->batch * o->accum);
  fprintf(log, ", seed %" PRIu64 "\n", o->seed);
  if (o->precision != DLRT_F32) {
    dlrt_loss_scale_state ls = {0};
    dlrt_trainer_loss_scale(trainer, &ls);
    fprintf(log, "precision %s compute, fp32 master weights; ", dlrt_dtype_name(o->precision));
    if (ls.scale != 1.0f)
      fprintf(log, "dynamic loss scale from %g\n", ls.scale);
    else
      fputs("no loss scaling\n", log);
  }
  if (o->gpt_model)
    fprintf(log, "data     %s: windows of %" PRId64 " tokens, vocabulary %d%s; %" PRId64
            " validation windows\n", data[0].source, data[0].width, data[0].classes,
            dltrain_lm_byte_tokens() ? " (bytes)" : "", data[1].count);
  else
    fprintf(log, "data     %s: %" PRId64 " training and %" PRId64 " test images, %" PRId64
            " x %" PRId64 " x %" PRId64 ", %d classes%s\n", data[0].source, data[0].count,
            data[1].count, data[0].channels, data[0].height, data[0].width, data[0].classes,
            data[0].mapping ? ", mapped" : "");
  fprintf(log, "loader   %d worker%s, prefetch %d", o->workers, o->workers == 1 ? "" : "s",
          o->prefetch);
  if (o->aug.crop_padding) fprintf(log, ", crop pad %d", o->aug.crop_padding);
  if (o->aug.flip) fputs(", flip", log);
  if (o->aug.erase_p > 0) fprintf(log, ", erase %g", o->aug.erase_p);
  if (o->aug.std > 0) fprintf(log, ", normalize %g,%g", o->aug.mean, o->aug.std);
  fputc('\n', log);
  if (o->resume)
    fprintf(log, "resumed  %s after %d %s%s\n", o->resume, s->done, o->gpt_model ? "step" : "epoch",
            s->done == 1 ? "" : "s");
  if (o->deterministic && o->threads >= 0)
    fprintf(log, "deterministic: %d CPU thread%s%s\n", o->threads, o->threads == 1 ? "" : "s",
            strcmp(s->props.backend, "cpu") ? " (bit for bit on the CPU backend only)" : "");
  else if (o->deterministic)
    fputs("deterministic: CPU threads left as they are; give --threads N as well to repeat "
          "the run on another machine\n", log);

  return 0;
}

/* The lines after training (memory, streaming, spilling, ZeRO, MPI) and
 * --json's object; 0, or 1 with s->status set. */
int dltrain_summarize(run *s) {
  options *o = &s->o;
  dlrt_trainer_t *trainer = s->trainer;
  dlrt_dataset *data = s->data;
  FILE *log = s->log;
  results *r = &s->r;
  int rc;
  TRY(dlrt_trainer_info(trainer, &r->info), "cannot read the trainer's figures");
  fprintf(log, "memory   planned peak %.1f MiB, measured peak %.1f MiB%s%s\n",
          (double)r->info.planned_peak_bytes / 1048576.0,
          (double)r->info.measured_peak_bytes / 1048576.0, o->checkpoint ? ", checkpointing " : "",
          o->checkpoint ? dltrain_checkpoint_name(o->checkpoint) : "");
  /* Spilling within --mem-limit, or on its own within 85% of the device's
   * budget (DLRT_MEM_LIMIT), which the copies show. */
  uint64_t env_limit = dlrt_mem_get_limit(s->dev);
  int spilled = o->spill.device_budget ||
                (env_limit && (r->last.spilled_bytes || r->last.fetched_bytes));
  /* Streamed parameters: their traffic is the stream's, not spilling's.
   * (A GPT trains in steps, not epochs.) */
  int trained = r->epochs_run > 0 || s->lm.steps_run > 0;
  dlrt_param_offload_stats streamed = {0};
  dlrt_exec_param_offload_stats(dlrt_trainer_executor(trainer), &streamed);
  if (streamed.params_streamed && trained) {
    fprintf(log, "stream   %d parameters, %d nodes ahead: %.1f MiB of parameters in, %.1f MiB "
            "of gradients out (the last round)", streamed.params_streamed, streamed.ahead,
            (double)r->last.fetched_bytes / 1048576.0, (double)r->last.spilled_bytes / 1048576.0);
    if (streamed.state_disk_bytes)
      fprintf(log, "; optimizer state %.1f MiB in host memory, %.1f MiB on disk, %.1f MiB read "
              "and %.1f MiB written in all", (double)streamed.state_host_bytes / 1048576.0,
              (double)streamed.state_disk_bytes / 1048576.0,
              (double)streamed.disk_read_bytes / 1048576.0,
              (double)streamed.disk_written_bytes / 1048576.0);
    fputc('\n', log);
    spilled = 0;
  }
  if (spilled && trained)
    fprintf(log, "spill    budget %.1f MiB%s: %.1f MiB off the device (%.1f of it to disk), "
            "%.1f MiB back; %.1f MiB written to disk in all%s",
            (double)(o->spill.device_budget ? o->spill.device_budget : env_limit / 100 * 85) /
                1048576.0,
            o->spill.device_budget ? "" : " (85% of DLRT_MEM_LIMIT)",
            (double)r->last.spilled_bytes / 1048576.0, (double)r->last.disk_bytes / 1048576.0,
            (double)r->last.fetched_bytes / 1048576.0,
            (double)r->last.disk_written_bytes / 1048576.0, r->last.slice_images ? "" : "\n");
  if (spilled && trained && r->last.slice_images) /* the end of the spill line */
    fprintf(log, "; convolution blocks in slices of %" PRId64 " images\n", r->last.slice_images);
  dlrt_spill_plan sp;
  if (dlrt_exec_spill_plan(dlrt_trainer_executor(trainer), &sp) == DLRT_OK && sp.decisions) {
    r->train = &data[0];
    r->lm = o->gpt_model ? &s->lm : NULL;
    fprintf(log, "step     predicted %.1f ms (%s), measured %.1f ms\n", sp.predicted.step_ms,
            dlrt_plan_strategy_name(sp.chosen), dltrain_measured_step_ms(o, r));
  }
  TRY(dlrt_trainer_zero_info(trainer, &r->zero), "cannot read the replicas' model states");
  /* (A pipeline's figures are its stages' sum.) */
  if (r->zero.replicas > 1) {
    const dlrt_zero_info *z = &r->zero;
    uint64_t held = z->param_bytes + z->grad_bytes + z->optimizer_bytes;
    uint64_t full = z->full_param_bytes + z->full_grad_bytes + z->full_optimizer_bytes;
    fprintf(log, "zero     stage %d, %d replicas: each holds parameters %.2f MiB, gradients "
            "%.2f MiB, optimizer state %.2f MiB = %.2f MiB (%.3fx of unsharded %.2f MiB)\n",
            z->stage, z->replicas, (double)z->param_bytes / 1048576.0,
            (double)z->grad_bytes / 1048576.0, (double)z->optimizer_bytes / 1048576.0,
            (double)held / 1048576.0, full ? (double)held / (double)full : 0.0,
            (double)full / 1048576.0);
  }
  if (s->world > 1 && s->tp_ranks && s->data_world == 1)
    fprintf(log, "mpi      %d ranks, one shard of the model each, on the same %" PRId64
            " windows per step\n", s->world, o->batch);
  else if (s->world > 1 && s->tp_ranks)
    fprintf(log, "mpi      %d ranks: %d data-parallel replicas of %d shards (one a rank), "
            "%" PRId64 " windows per replica per step (%" PRId64 " per update)\n", s->world,
            s->data_world, s->tp_ranks, o->batch, o->batch * s->data_world);
  else if (s->world > 1)
    fprintf(log, "mpi      %d ranks, %" PRId64 " %s per rank per step (%" PRId64
            " per update)\n", s->world, o->batch, o->gpt_model ? "windows" : "images",
            o->batch * s->world);
  if (o->json && s->rank == 0) {
    r->device = dlrt_device_spec(s->dev);
    r->device_name = s->props.name;
    r->devices = s->n_tp > 0 ? s->tp_devs : s->n_replicas > 0 ? s->replicas : &s->dev;
    r->n_devices = s->n_tp > 0 ? s->n_tp : s->n_replicas > 0 ? s->n_replicas : 1;
    int n_split = 0;
    dlrt_trainer_split(trainer, r->rows, &n_split);
    for (int i = 0; i < r->n_devices; i++)
      if (!o->devices || i >= n_split) r->rows[i] = o->batch; /* a stage, or the one device */
    r->data = s->generated ? "generated" : o->data;
    r->train = &data[0];
    r->test = &data[1];
    r->losses = s->losses;
    r->trainer = trainer;
    r->seconds = tool_now_s() - s->start;
    dltrain_print_json(o, r);
  }
  return 0;
}
