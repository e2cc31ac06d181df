/* dltrain-simulate.c — dltrain --plan --simulate: a training step of the
 * model replayed on a machine's figures (dlrt_simulate_step), as a table or
 * JSON. */
#include <inttypes.h>
#include <stdio.h>

#include "dltrain.h"

static double ms(double s) { return s * 1e3; }

int run_simulate(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
                 dlrt_device_t *dev) {
  dlrt_machine m;
  int rc = dlrt_machine_get(o->simulate, dev, &m);
  if (rc < 0) {
    /* A name that is no preset, or a file that is not one: the command
     * line's fault. */
    fprintf(stderr, "dltrain: --simulate: %s\n", dlrt_last_error());
    return rc == DLRT_ERR_INVALID_ARG || rc == DLRT_ERR_IO ? STATUS_USAGE : STATUS_FAIL;
  }
  dlrt_memory_plan plan;
  rc = dlrt_plan_memory(cfg, d->channels, d->height, d->width, d->classes, &plan);
  if (rc < 0) return tool_fail("cannot plan", rc);
  dlrt_simulated_step p;
  rc = dlrt_simulate_step(cfg, d->channels, d->height, d->width, d->classes, &m, dev, &p);
  if (rc < 0) return tool_fail("cannot simulate the step", rc);
  /* What has to be on the device: the plan's peak, or with the optimizer
   * on the host its parameters' and gradients' share without the state. */
  int offload = cfg->spill.policy == DLRT_OFFLOAD_OPTIMIZER ||
                cfg->spill.policy == DLRT_OFFLOAD_ALL;
  /* Streamed parameters: the plan's peak with the parameters, gradients
   * and state off, plus the most the streaming schedule holds at once. */
  uint64_t states = plan.params + plan.grads + plan.optimizer_state;
  uint64_t streamed_need = (plan.peak > states ? plan.peak - states : 0) + p.param_peak_bytes +
                           p.grad_peak_bytes;
  uint64_t device_need = cfg->spill.policy == DLRT_OFFLOAD_PARAMS ? streamed_need
                         : cfg->spill.device_budget ? cfg->spill.device_budget
                         : offload ? plan.peak - plan.optimizer_state : plan.peak;
  int fits = device_need <= m.device_memory;
  /* Where it trains when it does not fit (or on --device-memory). */
  int place = o->device_memory > 0 || !fits;
  uint64_t place_device = o->device_memory ? o->device_memory : m.device_memory;
  uint64_t place_host = o->host_memory ? o->host_memory : m.host_memory;
  const char *place_from = o->host_memory ? "--host-memory" : "the machine's host memory";
  const char *precision = cfg->precision == DLRT_F16    ? "fp16"
                          : cfg->precision == DLRT_BF16 ? "bf16" : "fp32";
  if (o->json) {
    printf("{\"simulate\": {\"machine\": ");
    tool_json_string(stdout, m.name);
    printf(", \"about\": ");
    tool_json_string(stdout, m.about);
    printf(", \"model\": ");
    tool_json_string(stdout, o->model);
    printf(", \"batch\": %" PRId64 ", \"precision\": \"%s\", \"params\": %" PRId64
           ", \"planned_peak_bytes\": %" PRIu64 ", \"device_memory\": %" PRIu64
           ", \"fits_device_memory\": %s, \"copies_from\": ",
           cfg->batch, precision, plan.param_count, plan.peak, m.device_memory,
           fits ? "true" : "false");
    tool_json_string(stdout, p.copies_from);
    printf(", \"nodes_measured\": %s", p.nodes_measured ? "true" : "false");
    printf(", \"params_streamed\": %d, \"ahead\": %d, \"param_peak_bytes\": %" PRIu64
           ", \"grad_peak_bytes\": %" PRIu64, p.params_streamed, p.ahead, p.param_peak_bytes,
           p.grad_peak_bytes);
    printf(", \"step_s\": %.9g, \"compute_s\": %.9g, \"forward_s\": %.9g, \"backward_s\": "
           "%.9g, \"update_s\": %.9g, \"transfer_s\": %.9g, \"exposed_transfer_s\": %.9g, "
           "\"host_update_s\": %.9g, \"exposed_host_s\": %.9g, \"host_hidden_fraction\": "
           "%.6g, \"host_hidden_s\": %.9g, \"samples_per_s\": %.9g, \"tokens_per_s\": %.9g, "
           "\"flops\": %.9g, "
           "\"mfu\": %.6g, \"h2d_bytes\": %" PRIu64 ", \"d2h_bytes\": %" PRIu64
           ", \"copies\": %" PRIu64 ", \"nodes\": %d, \"launches\": %d, \"figures\": "
           "{\"matmul_fp32\": %.6g, \"matmul_fp16\": %.6g, \"matmul_bf16\": %.6g, "
           "\"matmul_overhead_s\": %.6g, \"vector_fp32\": %.6g, \"memory_bandwidth\": %.6g, "
           "\"launch_s\": %.6g, \"link\": %.6g, \"link_latency_s\": %.6g, "
           "\"host_bandwidth\": %.6g, \"host_memory\": %" PRIu64 ", \"attention\": %.6g, "
           "\"conv\": %.6g, \"reduce_bandwidth\": %.6g, \"device_memory\": %" PRIu64
           ", \"disk_read\": %.6g, \"disk_write\": %.6g}",
           p.step_s, p.compute_s, p.forward_s, p.backward_s, p.update_s, p.transfer_s,
           p.exposed_transfer_s, p.host_update_s, p.exposed_host_s, p.host_hidden_fraction,
           p.host_hidden_s,
           p.samples_per_s, p.tokens_per_s, p.flops, p.mfu, p.h2d_bytes, p.d2h_bytes,
           p.copies, p.nodes, p.launches, m.matmul_flops[DLRT_F32], m.matmul_flops[DLRT_F16],
           m.matmul_flops[DLRT_BF16], m.matmul_overhead_s, m.vector_flops,
           m.memory_bytes_per_s, m.launch_s, m.link_bytes_per_s, m.link_latency_s,
           m.host_bytes_per_s, m.host_memory, m.attention_flops, m.conv_flops,
           m.reduce_bytes_per_s, m.device_memory, m.disk_read_bytes_per_s,
           m.disk_write_bytes_per_s);
    printf(", \"params_on_disk\": %d, \"state_disk_bytes\": %" PRIu64 ", \"disk_read_bytes\": %"
           PRIu64 ", \"disk_written_bytes\": %" PRIu64 ", \"disk_s\": %.9g, \"disk_wait_s\": "
           "%.9g, \"exposed_disk_s\": %.9g, \"exchange_s\": %.9g}", p.params_on_disk,
           p.state_disk_bytes, p.disk_read_bytes, p.disk_written_bytes, p.disk_s, p.disk_wait_s,
           p.exposed_disk_s, p.exchange_s);
    if (place) {
      fputs(", \"placement\": ", stdout);
      if ((rc = dltrain_placement_print(stdout, o, cfg, d, place_device, place_host, place_from,
                                        &m, 1)) != 0)
        return rc;
    }
    puts("}");
    return 0;
  }
  printf("simulate %s on %s (%s), batch %" PRId64 ", %s, %" PRId64 " parameters\n", o->model,
         m.name, m.about, cfg->batch, precision, plan.param_count);
  printf("  machine: GEMM %.4g / %.4g / %.4g TFLOP/s (fp32 / fp16 / bf16), vector %.4g "
         "TFLOP/s, memory %.4g GB/s, link %.4g GB/s + %.3g us, launch %.3g us, host %.4g GB/s, "
         "disk %.4g / %.4g GB/s (read / write)\n",
         m.matmul_flops[DLRT_F32] / 1e12, m.matmul_flops[DLRT_F16] / 1e12,
         m.matmul_flops[DLRT_BF16] / 1e12, m.vector_flops / 1e12, m.memory_bytes_per_s / 1e9,
         m.link_bytes_per_s / 1e9, m.link_latency_s * 1e6, m.launch_s * 1e6,
         m.host_bytes_per_s / 1e9, m.disk_read_bytes_per_s / 1e9, m.disk_write_bytes_per_s / 1e9);
  if (m.attention_flops > 0 || m.conv_flops > 0 || m.reduce_bytes_per_s > 0)
    printf("  kernels: attention %.4g TFLOP/s, convolution %.4g TFLOP/s, reductions %.4g GB/s "
           "(0: the GEMM rate, the memory bandwidth)\n", m.attention_flops / 1e12,
           m.conv_flops / 1e12, m.reduce_bytes_per_s / 1e9);
  printf("  device memory: needs %.1f GiB of %.1f GiB (%s)\n", (double)device_need / 1073741824.0,
         (double)m.device_memory / 1073741824.0, fits ? "fits" : "does not fit");
  printf("  %-22s %12.3f ms\n", "step", ms(p.step_s));
  printf("  %-22s %12.3f ms  (forward %.3f, backward %.3f, update %.3f; %s)\n", "compute",
         ms(p.compute_s), ms(p.forward_s), ms(p.backward_s), ms(p.update_s),
         p.nodes_measured ? "each node as measured here at its own shapes" : "the roofline");
  printf("  %-22s %12.3f ms  (%.1f MiB in, %.1f MiB out, %" PRIu64 " copies; from %s)\n",
         "transfer", ms(p.transfer_s), (double)p.h2d_bytes / 1048576.0,
         (double)p.d2h_bytes / 1048576.0, p.copies, p.copies_from);
  printf("  %-22s %12.3f ms\n", "exposed transfer", ms(p.exposed_transfer_s));
  printf("  %-22s %12.3f ms  (the loss%s read back and the next inputs copied in, the device "
         "idle; %s)\n", "host exchange", ms(p.exchange_s),
         o->gpt_model ? "" : " and logits",
         p.nodes_measured ? "timed here beside the profile's steps" : "the link's latency a read");
  if (p.params_streamed)
    printf("  %-22s %12d      (%d nodes ahead; at most %.1f MiB of parameters and %.1f MiB of "
           "gradients on the device at once)\n", "parameters streamed", p.params_streamed,
           p.ahead, (double)p.param_peak_bytes / 1048576.0, (double)p.grad_peak_bytes / 1048576.0);
  if (p.host_update_s > 0)
    printf("  %-22s %12.3f ms  (exposed %.3f; %.1f%% of it during the backward pass, "
           "as long as %.1f%% of its compute time)\n", "host update", ms(p.host_update_s),
           ms(p.exposed_host_s), 100.0 * p.host_hidden_fraction,
           p.backward_s > 0 ? 100.0 * p.host_hidden_s / p.backward_s : 0.0);
  if (p.params_on_disk)
    printf("  %-22s %12.3f ms  (%d states, %.1f MiB on disk: %.1f MiB read ahead, %.1f MiB "
           "written back; the host updates waited %.3f ms for reads; exposed %.3f: the step "
           "beyond all the state in host memory%s)\n",
           "disk", ms(p.disk_s), p.params_on_disk, (double)p.state_disk_bytes / 1048576.0,
           (double)p.disk_read_bytes / 1048576.0, (double)p.disk_written_bytes / 1048576.0,
           ms(p.disk_wait_s), ms(p.exposed_disk_s),
           m.disk_read_bytes_per_s > 0 && m.disk_write_bytes_per_s > 0
               ? "" : "; no disk figures: not replayed");
  if (p.tokens_per_s > 0)
    printf("  %-22s %12.1f\n", "tokens per second", p.tokens_per_s);
  printf("  %-22s %12.1f\n", "samples per second", p.samples_per_s);
  printf("  %-22s %12.3g  (%.1f%% of the 16-bit tensor peak: MFU, recomputation counted)\n",
         "FLOPs per step", p.flops, 100.0 * p.mfu);
  if (place)
    return dltrain_placement_print(stdout, o, cfg, d, place_device, place_host, place_from, &m, 0);
  return 0;
}
