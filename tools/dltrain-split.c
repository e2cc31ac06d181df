/* dltrain-split.c — dltrain --plan for a GPT: the best tensor x pipeline x
 * data splits over devices of --device-memory (dlrt_split_search), each
 * with its bytes per device, its device count and its dltrain command
 * line; with --simulate, each one's predicted step on that machine. As a
 * table, or JSON (an object the caller places). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "dltrain.h"

static double gib(uint64_t bytes) { return (double)bytes / 1073741824.0; }

/* "12.34G" or, below a GiB, "123.4M": 7 columns. */
static const char *size7(uint64_t bytes, char *buf, size_t n) {
  if (bytes >= 1073741824ull) snprintf(buf, n, "%6.2fG", gib(bytes));
  else snprintf(buf, n, "%6.1fM", (double)bytes / 1048576.0);
  return buf;
}

static void split_json(FILE *out, const dlrt_split *s, int predicted) {
  fprintf(out, "{\"devices\": %d, \"tensor\": %d, \"pipeline\": %d, \"data\": %d, \"zero\": %d, "
          "\"checkpoint\": %s, \"micro_batches\": %d, \"micro_batch\": %" PRId64
          ", \"stage_blocks\": %d, \"stage_params\": %" PRId64 ", \"param_bytes\": %" PRIu64
          ", \"grad_bytes\": %" PRIu64 ", \"optimizer_bytes\": %" PRIu64
          ", \"activation_bytes\": %" PRIu64 ", \"device_bytes\": %" PRIu64
          ", \"host_bytes\": %" PRIu64 ", \"fits\": %s, \"runs_now\": %s, \"flags\": ",
          s->devices, s->tensor, s->pipeline, s->data, s->zero, s->checkpoint ? "true" : "false",
          s->micro, s->micro_batch, s->stage_blocks, s->stage_params, s->param_bytes,
          s->grad_bytes, s->optimizer_bytes, s->activation_bytes, s->device_bytes,
          s->host_bytes, s->fits ? "true" : "false", s->runs_now ? "true" : "false");
  tool_json_string(out, s->flags);
  fputs(", \"needs\": ", out);
  tool_json_string(out, s->needs);
  if (predicted)
    fprintf(out, ", \"step_s\": %.9g, \"compute_s\": %.9g, \"tensor_s\": %.9g, "
            "\"pipeline_s\": %.9g, \"bubble_s\": %.9g, \"data_s\": %.9g, "
            "\"serial_step_s\": %.9g, \"tokens_per_s\": %.9g, \"model_tflops\": %.6g, "
            "\"mfu\": %.6g, \"host_fits\": %s, \"exchange_s\": %.9g",
            s->step_s, s->compute_s, s->tensor_s, s->pipeline_s, s->bubble_s, s->data_s,
            s->serial_step_s, s->tokens_per_s, s->model_tflops, s->mfu,
            s->host_fits ? "true" : "false", s->exchange_s);
  fputc('}', out);
}

int run_split(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
              dlrt_device_t *dev, uint64_t memory, int json_member) {
  dlrt_machine machine, *m = NULL;
  if (o->simulate) {
    int rc = dlrt_machine_get(o->simulate, dev, &machine);
    if (rc < 0) {
      fprintf(stderr, "dltrain: --simulate: %s\n", dlrt_last_error());
      return rc == DLRT_ERR_INVALID_ARG || rc == DLRT_ERR_IO ? STATUS_USAGE : STATUS_FAIL;
    }
    m = &machine;
    if (!o->device_memory) memory = m->device_memory;
  }
  dlrt_split_limits limits = {.device_memory = memory, .max_devices = o->max_devices,
                              .max_zero = 3, .by_total = o->max_devices > 0};
  /* A machine without figures between its devices (this, a file without
   * them) predicts splits on one device only. */
  int alone = m && (m->peer_bytes_per_s <= 0 || m->devices_per_node < 1);
  if (alone) limits.max_devices = 1;
  int want = o->splits > 0 ? o->splits : 1, n = 0, enumerated = 0, fitting = 0;
  dlrt_split *best = calloc((size_t)want, sizeof *best);
  if (!best) return tool_fail("cannot plan the splits", DLRT_ERR_OOM);
  int rc = dlrt_split_search(cfg, d->width, &limits, m, best, want, &n, &enumerated, &fitting);
  if (rc < 0) {
    free(best);
    return tool_fail("cannot plan the splits", rc);
  }
  /* The best of those this version runs, when none of the best does. */
  dlrt_split runnable;
  int n_runnable = 0, shown_runs = 0;
  for (int i = 0; i < n && i < o->splits; i++) shown_runs |= best[i].runs_now && best[i].fits;
  dlrt_split_limits now = limits;
  now.runs_now_only = 1;
  if (!shown_runs && o->splits > 0 &&
      (rc = dlrt_split_search(cfg, d->width, &now, m, &runnable, 1, &n_runnable, NULL,
                              NULL)) < 0) {
    free(best);
    return tool_fail("cannot plan the splits", rc);
  }
  if (n_runnable && !runnable.fits) n_runnable = 0;
  const char *precision = cfg->precision == DLRT_F16    ? "fp16"
                          : cfg->precision == DLRT_BF16 ? "bf16" : "fp32";
  if (o->json) {
    printf("%s\"splits\": {\"model\": ", json_member ? "" : "{");
    tool_json_string(stdout, o->model);
    printf(", \"batch\": %" PRId64 ", \"context\": %" PRId64 ", \"precision\": \"%s\", "
           "\"device_memory\": %" PRIu64 ", \"max_devices\": %d, \"enumerated\": %d, "
           "\"fitting\": %d, \"ranked_by\": \"%s\", \"machine\": ",
           cfg->batch, d->width, precision, memory, limits.max_devices ? limits.max_devices : 4096,
           enumerated, fitting,
           !m ? "devices" : limits.by_total ? "tokens_per_s" : "tokens_per_s_per_device");
    if (m) tool_json_string(stdout, m->name);
    else fputs("null", stdout);
    fputs(", \"best\": [", stdout);
    for (int i = 0; i < n && o->splits > 0; i++) {
      if (i) fputs(", ", stdout);
      split_json(stdout, &best[i], m != NULL);
    }
    fputs("], \"best_runs_now\": ", stdout);
    if (n_runnable) split_json(stdout, &runnable, m != NULL);
    else if (shown_runs) fputs("\"above\"", stdout);
    else fputs("null", stdout);
    printf("}%s", json_member ? "" : "}\n");
    free(best);
    return 0;
  }
  printf("splits of %s over devices of %.1f GiB, batch %" PRId64 " of %" PRId64 " tokens, %s: "
         "%d of %d fit%s; the best %d by %s\n", o->model, gib(memory), cfg->batch, d->width,
         precision, fitting, enumerated,
         alone ? " (one device: the machine has no figures between devices)" : "",
         o->splits < n ? o->splits : n,
         !m                ? "devices"
         : limits.by_total ? "predicted tokens per second"
                           : "predicted tokens per second per device");
  printf("  %7s %3s %3s %4s %4s %4s %11s %8s %8s %8s %8s %9s %9s%s\n", "devices", "t", "p", "d",
         "zero", "ckpt", "micro", "params", "grads", "optim", "acts", "per dev", "host",
         m ? "    step s   tokens/s  TFLOP/s" : "");
  for (int i = 0; i < n && i < o->splits; i++) {
    const dlrt_split *s = &best[i];
    char micro[24];
    snprintf(micro, sizeof micro, "%d x %" PRId64, s->micro, s->micro_batch);
    char b[6][16];
    printf("  %7d %3d %3d %4d %4d %4s %11s %8s %8s %8s %8s %9s%s %8s", s->devices, s->tensor,
           s->pipeline, s->data, s->zero, s->checkpoint ? "yes" : "no", micro,
           size7(s->param_bytes, b[0], 16), size7(s->grad_bytes, b[1], 16),
           size7(s->optimizer_bytes, b[2], 16), size7(s->activation_bytes, b[3], 16),
           size7(s->device_bytes, b[4], 16), s->fits ? " " : "!", size7(s->host_bytes, b[5], 16));
    if (m)
      printf(" %9.3f %10.1f %8.1f", s->step_s, s->tokens_per_s, s->model_tflops);
    printf("\n      %s\n", s->flags);
    if (!s->runs_now) printf("      not in this version: %s\n", s->needs);
    if (m && s->pipeline > 1)
      printf("      step: compute %.3f s, tensor all-reduces %.3f, stage copies %.3f, bubble "
             "%.3f, data %.3f, exchange %.6f; the stages one after another %.3f s\n",
             s->compute_s, s->tensor_s, s->pipeline_s, s->bubble_s, s->data_s, s->exchange_s,
             s->serial_step_s);
    else if (m)
      printf("      step: compute %.3f s, tensor all-reduces %.3f, data %.3f, exchange %.6f\n",
             s->compute_s, s->tensor_s, s->data_s, s->exchange_s);
    if (m && !s->host_fits)
      printf("      host memory: %.1f GiB a device, %d a node: more than the host's %.0f GiB\n",
             gib(s->host_bytes), m->devices_per_node, gib(m->host_memory));
  }
  if (n_runnable)
    printf("  the best that this version runs: %d device%s (t=%d p=%d d=%d, zero %d, %.2f GiB "
           "each)\n      %s\n", runnable.devices, runnable.devices == 1 ? "" : "s",
           runnable.tensor, runnable.pipeline, runnable.data, runnable.zero,
           gib(runnable.device_bytes), runnable.flags);
  if (n_runnable && m)
    printf("      predicted step %.3f s, %.1f tokens/s, %.1f TFLOP/s a device%s\n",
           runnable.step_s, runnable.tokens_per_s, runnable.model_tflops,
           runnable.host_fits ? "" : "; more host memory than a node has");
  else if (!n_runnable && !shown_runs && fitting && o->splits > 0)
    printf("  none of the splits that fit runs in this version\n");
  if (!fitting)
    printf("  none fits: raise --max-devices (now %d), or give devices of more memory\n",
           limits.max_devices ? limits.max_devices : 4096);
  free(best);
  return 0;
}
