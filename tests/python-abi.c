/* python-abi — the layout of the public structures the Python package
 * mirrors with ctypes (python/dlrt/_structs.py), as this compiler makes
 * it: one JSON object {"dlrt_x": {"size": N, "fields": {"name": offset,
 * ...}}, ...}, which python/tests/test_abi.py compares with the mirrors, so
 * that a field added to a structure in C and not in Python fails a test
 * instead of shifting every later field. */
#include <stddef.h>
#include <stdio.h>

#include "dlrt.h"

static int first_struct = 1, first_field;

static void open_struct(const char *name, size_t size) {
  printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "" : ",", name, size);
  first_struct = 0;
  first_field = 1;
}

static void field(const char *name, size_t offset) {
  printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
  first_field = 0;
}

/* NAME(T) is the name T stands for (a bare #type would give "T"). */
#define NAME_(x) #x
#define NAME(x) NAME_(x)
#define STRUCT(type, FIELDS)                                                                  \
  do {                                                                                        \
    open_struct(NAME(type), sizeof(type));                                                         \
    FIELDS                                                                                    \
    fputs("}}", stdout);                                                                      \
  } while (0)
#define F(type, member) field(#member, offsetof(type, member));

int main(void) {
  putchar('{');
#define T dlrt_device_props
  STRUCT(T, F(T, name) F(T, vendor) F(T, backend) F(T, driver) F(T, spec) F(T, index)
                F(T, kind) F(T, total_memory) F(T, free_memory) F(T, alignment)
                    F(T, host_addressable) F(T, compute_units) F(T, threads));
#undef T
#define T dlrt_mem_counter
  STRUCT(T, F(T, current) F(T, peak));
#undef T
#define T dlrt_mem_stats
  STRUCT(T, F(T, allocated) F(T, requested) F(T, reserved) F(T, active) F(T, segments)
                F(T, alloc_count) F(T, free_count) F(T, cache_hits) F(T, driver_allocs)
                    F(T, driver_frees) F(T, retries) F(T, oom_count) F(T, cached_free)
                        F(T, largest_free) F(T, fragmentation) F(T, limit));
#undef T
#define T dlrt_optimizer
  STRUCT(T, F(T, kind) F(T, lr) F(T, momentum) F(T, nesterov) F(T, weight_decay) F(T, beta1)
                F(T, beta2) F(T, eps));
#undef T
#define T dlrt_gpt_config
  STRUCT(T, F(T, layers) F(T, heads) F(T, embd) F(T, context) F(T, vocab) F(T, dropout)
         F(T, attn_dropout));
#undef T
#define T dlrt_augment
  STRUCT(T, F(T, crop_padding) F(T, flip) F(T, mean) F(T, std) F(T, erase_p));
#undef T
#define T dlrt_spill_config
  STRUCT(T, F(T, device_budget) F(T, host_budget) F(T, prefetch) F(T, policy));
#undef T
#define T dlrt_loss_scaler
  STRUCT(T, F(T, enabled) F(T, init_scale) F(T, growth_factor) F(T, backoff_factor)
                F(T, growth_interval));
#undef T
#define T dlrt_trainer_config
  STRUCT(T, F(T, model) F(T, gpt) F(T, batch) F(T, opt) F(T, seed) F(T, label_smoothing)
                F(T, schedule) F(T, warmup_steps) F(T, step_size) F(T, gamma) F(T, total_steps)
                    F(T, clip_norm) F(T, channels) F(T, workers) F(T, prefetch) F(T, augment)
                        F(T, aug) F(T, rank) F(T, world) F(T, accum) F(T, checkpoint)
                            F(T, spill) F(T, precision) F(T, loss_scaler));
#undef T
#define T dlrt_epoch_stats
  STRUCT(T, F(T, loss) F(T, accuracy) F(T, images_per_s) F(T, seconds) F(T, steps)
                F(T, images) F(T, transfer_ms) F(T, spilled_bytes) F(T, fetched_bytes)
                    F(T, disk_bytes) F(T, slice_images) F(T, stall_s) F(T, stall_fraction)
                        F(T, loader_images_per_s) F(T, loss_scale) F(T, skipped_steps)
                            F(T, disk_written_bytes) F(T, tokens_per_s) F(T, step_loss) F(T, lr));
#undef T
#define T dlrt_memory_plan
  STRUCT(T, F(T, batch) F(T, param_count) F(T, params) F(T, grads) F(T, optimizer_state)
                F(T, activations) F(T, activation_peak) F(T, inputs) F(T, accumulators)
                    F(T, loader) F(T, peak) F(T, evaluation_at_peak) F(T, spill_least));
#undef T
#define T dlrt_what_if
  STRUCT(T, F(T, strategy) F(T, device_bytes) F(T, host_bytes) F(T, devices) F(T, fits_one));
#undef T
#define T dlrt_dataset
  STRUCT(T, F(T, count) F(T, channels) F(T, height) F(T, width) F(T, classes)
                F(T, image_dtype) F(T, images) F(T, labels) F(T, source) F(T, mapping)
                    F(T, mapping_bytes) F(T, tokens) F(T, token_count));
#undef T
#define T dlrt_tokens
  STRUCT(T, F(T, tokens) F(T, count) F(T, vocab) F(T, files) F(T, source));
#undef T
#define T dlrt_exec_info
  STRUCT(T, F(T, planned_peak_bytes) F(T, measured_peak_bytes) F(T, param_bytes)
                F(T, state_bytes) F(T, params) F(T, steps) F(T, nodes));
#undef T
#define T dlrt_loss_scale_state
  STRUCT(T, F(T, scale) F(T, skipped_steps) F(T, last_skipped));
#undef T
#define T dlrt_machine
  STRUCT(T, F(T, name) F(T, about) F(T, matmul_flops) F(T, matmul_overhead_s)
                F(T, vector_flops) F(T, memory_bytes_per_s) F(T, attention_flops)
                    F(T, conv_flops) F(T, reduce_bytes_per_s) F(T, launch_s)
                        F(T, link_bytes_per_s) F(T, link_latency_s) F(T, host_bytes_per_s)
                            F(T, device_memory) F(T, host_memory)
                                F(T, peak_matmul_flops_bf16) F(T, peak_memory_bytes_per_s)
                                    F(T, peer_bytes_per_s) F(T, peer_latency_s)
                                        F(T, devices_per_node) F(T, network_bytes_per_s)
                                            F(T, network_latency_s) F(T, disk_read_bytes_per_s)
                                                F(T, disk_write_bytes_per_s));
#undef T
#define T dlrt_simulated_step
  STRUCT(T, F(T, step_s) F(T, compute_s) F(T, forward_s) F(T, backward_s) F(T, update_s)
                F(T, transfer_s) F(T, exposed_transfer_s) F(T, host_update_s)
                    F(T, exposed_host_s) F(T, host_hidden_fraction) F(T, host_hidden_s)
                        F(T, flops) F(T, mfu) F(T, samples_per_s) F(T, tokens_per_s)
                            F(T, h2d_bytes) F(T, d2h_bytes) F(T, copies) F(T, nodes)
                                F(T, launches) F(T, copies_from) F(T, params_streamed)
                                    F(T, ahead) F(T, param_peak_bytes) F(T, grad_peak_bytes)
                                        F(T, nodes_measured) F(T, params_on_disk)
                                            F(T, state_disk_bytes) F(T, disk_read_bytes)
                                                F(T, disk_written_bytes) F(T, disk_s)
                                                    F(T, disk_wait_s) F(T, exposed_disk_s)
                                                        F(T, exchange_s));
#undef T
#define T dlrt_placement_part
  STRUCT(T, F(T, device) F(T, pinned) F(T, pageable) F(T, disk) F(T, how));
#undef T
#define T dlrt_placement
  STRUCT(T, F(T, fits) F(T, rung) F(T, strategy) F(T, policy) F(T, checkpoint) F(T, mem_limit)
                F(T, host_limit) F(T, ahead) F(T, flags) F(T, part) F(T, device_need)
                    F(T, host_need) F(T, pinned_need) F(T, disk_need) F(T, device_memory)
                        F(T, host_memory) F(T, device_usable) F(T, host_usable)
                            F(T, param_count) F(T, why));
#undef T
#define T dlrt_split
  STRUCT(T, F(T, tensor) F(T, pipeline) F(T, data) F(T, zero) F(T, checkpoint) F(T, micro)
                F(T, micro_batch) F(T, stage_blocks) F(T, stage_params) F(T, param_bytes)
                    F(T, grad_bytes) F(T, optimizer_bytes) F(T, activation_bytes)
                        F(T, device_bytes) F(T, host_bytes) F(T, devices) F(T, fits)
                            F(T, runs_now) F(T, flags) F(T, needs) F(T, step_s) F(T, compute_s)
                                F(T, tensor_s) F(T, pipeline_s) F(T, bubble_s) F(T, data_s)
                                    F(T, serial_step_s) F(T, tokens_per_s)
                                        F(T, model_tflops) F(T, mfu) F(T, host_fits)
                                            F(T, exchange_s));
#undef T
#define T dlrt_split_limits
  STRUCT(T, F(T, device_memory) F(T, max_devices) F(T, max_tensor) F(T, max_pipeline)
                F(T, max_zero) F(T, runs_now_only) F(T, by_total));
#undef T
  puts("\n}");
  return 0;
}
