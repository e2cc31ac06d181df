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
    printf("\"rows\": %" PRId64 ", \"peak_device_bytes\": %" PRIu64 "}", r->rows[i],
           mem.allocated.peak);
  }
  /* Tensor parallel: each peer's shard and bytes beside the whole model's
   * (the trainer's plan of one device). */
  fputs("], \"tensor_parallel\": [", stdout);
  for (int i = 0; i < r->n_tp; i++) {
    const dlrt_tp_peer_info *p = &r->tp[i];
    printf("%s{\"device\": \"%s\", \"rank\": %d, \"head_first\": %d, \"heads\": %d, "
           "\"vocab_first\": %" PRId64 ", \"vocab\": %" PRId64 ", \"param_bytes\": %" PRIu64
           ", \"state_bytes\": %" PRIu64 ", \"planned_peak_bytes\": %" PRIu64 "}",
           i ? ", " : "", p->device, p->rank, p->head_first, p->heads, p->vocab_first,
           p->vocab, p->param_bytes, p->state_bytes, p->planned_peak_bytes);
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
           ", \"disk_read_bytes\": %" PRIu64 ", \"disk_written_bytes\": %" PRIu64 "}",
           ps.params_streamed, ps.ahead, ps.fetched_bytes, ps.gradient_bytes,
           ps.peak_param_bytes, ps.state_host_bytes, ps.state_disk_bytes, ps.disk_read_bytes,
           ps.disk_written_bytes);
  else
    fputs("null", stdout);
  if (r->trainer) {
    fputs(", \"spill_plan\": ", stdout);
    if (!dltrain_spill_plan_json(stdout, r->trainer, dltrain_measured_step_ms(o, r), 0))
      fputs("null", stdout);
  }
  puts("}");
}

