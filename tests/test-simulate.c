/*
 * test-simulate.c — machines (dlrt_machine_*) and the replay of a step on
 * one (dlrt_simulate_step), with answers worked out by hand:
 *  - the presets carry the link presets' figures (one table, not two);
 *  - machine files: every key, a base preset, and each fault named (an
 *    unknown key, a bad value, a missing figure, no such file);
 *  - a logistic regression (a model file "linear 10") of 8 images of 4 x 4
 *    on a machine whose only cost is its GEMM rate: the step is the
 *    forward x W^T and the weight gradient, 2 x 2 x 8 x 16 x 10 FLOPs at
 *    the rate; on one whose only cost is a launch, the step is its
 *    launches; with the optimizer on the host over a slow link, the
 *    gradients (170 floats) go out, the parameters come back, and each
 *    engine's time is its bytes at the rate;
 *  - a budget's copies come from a dry run on a device (the cpu device
 *    here), the step costing at least its transfers' exposed part;
 *  - streamed parameters (--offload params): with free compute every copy
 *    is exposed in a row (the parameters in, the gradients out); a slow
 *    host's update is the step; two layers hide part of the update in the
 *    backward pass; a longer look-ahead keeps more on the device and
 *    fetches less;
 *  - the optimizer state of streamed parameters on disk under a host
 *    budget: which states go there, the disk's time from the machine's
 *    disk_read and disk_write figures, and how much of it the step waits.
 * Points: done_testing.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"

static char dir[512];

static int near(double got, double want, double rel) {
  return fabs(got - want) <= rel * fabs(want);
}

static const char *machine_file(const char *name, const char *text) {
  const char *path = tap_join(dir, name);
  tap_write_text(path, text);
  return path;
}

static void check_presets(void) {
  int all = 1;
  for (int i = 0; i < dlrt_link_preset_count(); i++) {
    const dlrt_link_preset *l = dlrt_link_preset_get(i);
    dlrt_machine m;
    int rc = dlrt_machine_preset(l->name, &m);
    all &= rc == DLRT_OK && m.link_bytes_per_s == l->bytes_per_s &&
           m.link_latency_s == l->latency_s && m.matmul_flops[DLRT_BF16] == l->flops &&
           m.peak_matmul_flops_bf16 == l->peak_flops && m.memory_bytes_per_s > 0 &&
           m.device_memory > 0 && m.host_memory > 0 && m.matmul_flops[DLRT_F32] > 0 &&
           m.matmul_flops[DLRT_F32] < m.matmul_flops[DLRT_BF16];
  }
  ok(all && dlrt_link_preset_count() == 6, "every link preset is a machine with the link "
     "preset's own rate, latency and bf16 figures, and fp32 below bf16");
  dlrt_machine m;
  dlrt_machine_preset("h200-pcie5", &m);
  ok(m.device_memory == 141000000000ull && near(m.memory_bytes_per_s, 0.9 * 4.8e12, 1e-12),
     "h200-pcie5: 141 GB at 0.9 of 4.8 TB/s (%llu, %g)", (unsigned long long)m.device_memory,
     m.memory_bytes_per_s);
  int rc = dlrt_machine_preset("h300-pcie9", &m);
  ok(rc == DLRT_ERR_INVALID_ARG && strstr(dlrt_last_error(), "h200-pcie5") &&
         strstr(dlrt_last_error(), "h300-pcie9"),
     "an unknown preset is refused, naming it and the presets (%s)", dlrt_last_error());
}

static void check_files(void) {
  dlrt_machine m;
  const char *path = machine_file("full", "# a made-up machine\n"
                                          "name = toy\nmatmul_fp32 = 2T\nmatmul_bf16 = 8e12\n"
                                          "vector_fp32 = 1T   # FLOP/s\n"
                                          "memory_bandwidth = 1.5TB/s\nlink = 20GB/s:3us\n"
                                          "launch = 5us\nmatmul_overhead = 2us\n"
                                          "host_bandwidth = 100GB/s\ndevice_memory = 24G\n"
                                          "host_memory = 256G\n");
  int rc = dlrt_machine_load(path, &m);
  ok(rc == DLRT_OK && strcmp(m.name, "toy") == 0 && m.matmul_flops[DLRT_F32] == 2e12 &&
         m.matmul_flops[DLRT_BF16] == 8e12 && m.matmul_flops[DLRT_F16] == 2e12 &&
         m.vector_flops == 1e12 && m.memory_bytes_per_s == 1.5e12 &&
         m.link_bytes_per_s == 20e9 && near(m.link_latency_s, 3e-6, 1e-12) &&
         near(m.launch_s, 5e-6, 1e-12) && near(m.matmul_overhead_s, 2e-6, 1e-12) &&
         m.host_bytes_per_s == 100e9 && m.device_memory == 24ull << 30 &&
         m.host_memory == 256ull << 30,
     "a file sets every figure (fp16 defaults to the fp32 rate) (%s)",
     rc ? dlrt_last_error() : "ok");
  path = machine_file("based", "base = a100-pcie4\ndevice_memory = 40G\n");
  dlrt_machine a100;
  dlrt_machine_preset("a100-pcie4", &a100);
  rc = dlrt_machine_load(path, &m);
  ok(rc == DLRT_OK && m.device_memory == 40ull << 30 &&
         m.matmul_flops[DLRT_BF16] == a100.matmul_flops[DLRT_BF16] &&
         m.link_bytes_per_s == a100.link_bytes_per_s && strcmp(m.name, "based") == 0,
     "base = a100-pcie4 with 40G: the preset's rates, the file's memory (%s)",
     rc ? dlrt_last_error() : m.name);
  static const struct {
    const char *text, *word;
  } bad[] = {
      {"base = h200-pcie5\nflops = 1T\n", "unknown key \"flops\""},
      {"base = h200-pcie5\nmatmul_fp32 = fast\n", "line 2: matmul_fp32"},
      {"base = h200-pcie5\nmemory_bandwidth = -4TB/s\n", "memory_bandwidth"},
      {"base = h200-pcie5\nlink = 12Gb/s\n", "bits"},
      {"base = h200-pcie5\njust words\n", "not key = value"},
      {"matmul_fp32 = 1T\nvector_fp32 = 1T\nmemory_bandwidth = 1TB/s\nlink = 1GB/s\n",
       "no device_memory"},
      {"matmul_fp32 = 1T\nbase = h200-pcie5\n", "base = must come before"},
      {"base = nowhere\n", "not a machine preset"},
      {"base = h200-pcie5\nlaunch = 3 weeks\n", "launch"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char name[16];
    snprintf(name, sizeof name, "bad%zu", i);
    rc = dlrt_machine_load(machine_file(name, bad[i].text), &m);
    ok(rc == DLRT_ERR_INVALID_ARG && strstr(dlrt_last_error(), bad[i].word) &&
           strstr(dlrt_last_error(), name),
       "a bad file is refused, naming the file and \"%s\" (%s)", bad[i].word, dlrt_last_error());
  }
  rc = dlrt_machine_load(tap_join(dir, "absent"), &m);
  ok(rc == DLRT_ERR_IO && strstr(dlrt_last_error(), "absent"), "a missing file: %s",
     dlrt_last_error());
  rc = dlrt_machine_get(machine_file("x.machine", "base = gh200-c2c\n"), NULL, &m);
  ok(rc == DLRT_OK && m.link_bytes_per_s == 387e9, "dlrt_machine_get reads a path as a file");
}

/* A logistic regression of 8 images of 4 x 4 into 10 classes. */
static dlrt_trainer_config regression(const char *model) {
  dlrt_trainer_config c = {.model = model, .batch = 8, .opt = dlrt_optimizer_defaults(DLRT_OPT_SGD),
                           .seed = 1, .channels = 1};
  return c;
}

static void check_replay(dlrt_device_t *dev) {
  const char *model = tap_join(dir, "linear.model");
  tap_write_text(model, "linear 10\n");
  dlrt_trainer_config cfg = regression(model);
  dlrt_machine m;
  /* Only GEMMs cost: everything else at 1e30 per second, no launches. */
  dlrt_machine_load(machine_file("gemm", "matmul_fp32 = 1e9\nvector_fp32 = 1e30\n"
                                         "memory_bandwidth = 1e30\nlink = 1000000TB/s\n"
                                         "launch = 0\ndevice_memory = 1G\n"), &m);
  dlrt_simulated_step p;
  int rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  double flops = 2.0 * 2 * 8 * 16 * 10;
  ok(rc == DLRT_OK && near(p.step_s, flops / 1e9, 1e-6) && near(p.compute_s, p.step_s, 1e-6) &&
         p.exposed_transfer_s < 1e-12 && p.host_update_s == 0 && strcmp(p.copies_from, "none") == 0,
     "GEMMs only: the step is x W^T and its weight gradient, %g FLOPs at 1 GFLOP/s = %g s "
     "(got %g s, %s)", flops, flops / 1e9, p.step_s, rc ? dlrt_last_error() : p.copies_from);
  ok(near(p.samples_per_s, 8 / p.step_s, 1e-12) && p.tokens_per_s == 0 && p.nodes > 2,
     "samples per second: the batch over the step (%d nodes)", p.nodes);
  /* Only launches cost: the step is its launches. */
  dlrt_machine_load(machine_file("launch", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                           "memory_bandwidth = 1e30\nlink = 1000000TB/s\n"
                                           "launch = 1ms\ndevice_memory = 1G\n"), &m);
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  ok(rc == DLRT_OK && p.launches > 0 && near(p.step_s, p.launches * 1e-3, 1e-6),
     "launches only: %d launches of 1 ms make the step (got %g s)", p.launches, p.step_s);
  /* The optimizer on the host over 1 MB/s, compute free: the gradients of
   * W (160 floats) and b (10) go out, and the parameters come back in. */
  dlrt_machine_load(machine_file("slow-link", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                              "memory_bandwidth = 1e30\nlink = 1MB/s\n"
                                              "launch = 0\nhost_bandwidth = 1e30\n"
                                              "device_memory = 1G\n"), &m);
  cfg.spill.policy = DLRT_OFFLOAD_OPTIMIZER;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  ok(rc == DLRT_OK && p.d2h_bytes == 170 * 4 && p.h2d_bytes >= 170 * 4 &&
         near(p.transfer_s, (double)(p.h2d_bytes + p.d2h_bytes) / 1e6, 1e-9) &&
         p.step_s >= 170 * 4 / 1e6 && p.update_s == 0 &&
         strcmp(p.copies_from, "the optimizer on the host") == 0,
     "optimizer on the host: 680 B of gradients out, %llu B in, each at 1 MB/s (transfer "
     "%g s, step %g s: %s)", (unsigned long long)p.h2d_bytes, p.transfer_s, p.step_s,
     rc ? dlrt_last_error() : p.copies_from);
  /* A slow host, a fast link: the host update is its bytes at the rate
   * (SGD: 20 B a parameter). */
  dlrt_machine_load(machine_file("slow-host", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                              "memory_bandwidth = 1e30\nlink = 1000000TB/s\n"
                                              "launch = 0\nhost_bandwidth = 1e6\n"
                                              "device_memory = 1G\n"), &m);
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  ok(rc == DLRT_OK && near(p.host_update_s, 170 * 20 / 1e6, 1e-9) &&
         near(p.step_s, p.host_update_s, 1e-3),
     "a slow host: the update's 3400 B at 1 MB/s is the step (%g s of %g)", p.host_update_s,
     p.step_s);
  /* A budget: copies from a dry run on the device. */
  cfg = regression(model);
  dlrt_memory_plan plan;
  dlrt_plan_memory(&cfg, 1, 4, 4, 10, &plan);
  /* The least it trains in, with the optimizer on the host: it spills, and
   * its updates run on the host in the executor's own order. */
  cfg.spill.policy = DLRT_OFFLOAD_OPTIMIZER;
  cfg.spill.device_budget = plan.spill_least;
  cfg.spill.prefetch = 2;
  dlrt_machine_load(machine_file("budget", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                           "memory_bandwidth = 1e30\nlink = 1MB/s\n"
                                           "launch = 0\ndevice_memory = 1G\n"), &m);
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  ok(rc == DLRT_ERR_INVALID_ARG, "a budget without a device for its dry run is refused");
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, dev, &p);
  ok(rc == DLRT_OK && strstr(p.copies_from, "dry run") && p.copies > 1 &&
         near(p.transfer_s, (double)(p.h2d_bytes + p.d2h_bytes) / 1e6, 1e-6) &&
         p.step_s >= p.exposed_transfer_s + p.exposed_host_s && p.host_update_s > 0 &&
         near(p.exposed_host_s, p.host_update_s, 1e-12),
     "a budget: %llu copies of a dry run on %s, %g s on the link, %g s exposed; the "
     "executor's host updates wait (%s)",
     (unsigned long long)p.copies, dlrt_device_spec(dev), p.transfer_s, p.exposed_transfer_s,
     rc ? dlrt_last_error() : p.copies_from);
}

/* --offload params: param_stream.c's schedule replayed. */
static void check_streaming(void) {
  const char *model = tap_join(dir, "linear.model");
  dlrt_trainer_config cfg = regression(model);
  dlrt_machine m;
  dlrt_simulated_step none, p;
  /* Compute and the host free, a link of 1 MB/s: W (160 floats) and b (10)
   * come in before the forward pass, after the next batch on the same
   * engine; their gradients go out after the backward pass and the update
   * nodes wait for them: every copy is exposed, one after another. */
  dlrt_machine_load(machine_file("stream", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                           "memory_bandwidth = 1e30\nlink = 1MB/s\n"
                                           "launch = 0\nhost_bandwidth = 1e30\n"
                                           "device_memory = 1G\n"), &m);
  int rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &none);
  cfg.spill.policy = DLRT_OFFLOAD_PARAMS;
  rc |= dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  ok(rc == DLRT_OK && p.params_streamed == 2 && p.ahead == 4 && p.d2h_bytes == 680 &&
         p.h2d_bytes == none.h2d_bytes + 680 && strstr(p.copies_from, "streamed") &&
         p.param_peak_bytes == 680 && p.grad_peak_bytes == 640 && p.update_s == 0,
     "streamed: 2 parameters, 680 B in beside the batch's %llu, 680 B of gradients out; on "
     "the device at most both parameters and W's gradient (b's left before it was made) "
     "(%s)", (unsigned long long)none.h2d_bytes,
     rc ? dlrt_last_error() : p.copies_from);
  ok(near(p.step_s, p.transfer_s, 1e-9) && near(p.transfer_s, (680.0 * 2 + none.h2d_bytes) / 1e6,
                                                1e-9) &&
         near(p.exposed_transfer_s, p.step_s, 1e-9) && p.exposed_host_s < 1e-12,
     "free compute: the step is its copies in a row, %g s, all exposed (got %g, exposed %g)",
     (680.0 * 2 + none.h2d_bytes) / 1e6, p.step_s, p.exposed_transfer_s);
  /* A slow host and a fast link: the update (SGD, 20 B a parameter) is the
   * step, and no backward pass hides it (it takes no time). */
  dlrt_machine_load(machine_file("stream-host", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                                "memory_bandwidth = 1e30\nlink = 1000000TB/s\n"
                                                "launch = 0\nhost_bandwidth = 1e6\n"
                                                "device_memory = 1G\n"), &m);
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  ok(rc == DLRT_OK && near(p.host_update_s, 170 * 20 / 1e6, 1e-9) &&
         near(p.step_s, p.host_update_s, 1e-6) && near(p.exposed_host_s, p.host_update_s, 1e-6) &&
         p.host_hidden_fraction == 0,
     "streamed, a slow host: its 3400 B at 1 MB/s are the step (%g s of %g), none hidden",
     p.host_update_s, p.step_s);
  /* Two layers, GEMMs at 1 GFLOP/s, the host at 1 GB/s: the second layer's
   * update runs beside the first layer's backward GEMMs. */
  const char *mlp = tap_join(dir, "mlp.model");
  tap_write_text(mlp, "linear 32\nrelu\nlinear 10\n");
  cfg = regression(mlp);
  cfg.spill.policy = DLRT_OFFLOAD_PARAMS;
  dlrt_machine_load(machine_file("stream-mlp", "matmul_fp32 = 1e9\nvector_fp32 = 1e30\n"
                                               "memory_bandwidth = 1e30\nlink = 1000000TB/s\n"
                                               "launch = 0\nhost_bandwidth = 1e9\n"
                                               "device_memory = 1G\n"), &m);
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  double host = ((16 * 32 + 32) + (32 * 10 + 10)) * 20 / 1e9;
  ok(rc == DLRT_OK && near(p.host_update_s, host, 1e-9) && p.host_hidden_fraction > 0 &&
         p.host_hidden_fraction < 1 && p.host_hidden_s <= p.backward_s * (1 + 1e-9) &&
         p.step_s < p.compute_s + p.host_update_s - 1e-9 &&
         p.step_s >= p.compute_s * (1 - 1e-9),
     "two layers: %.1f%% of the %g s host update runs beside the backward pass; the step %g s "
     "is under compute %g + host %g", 100 * p.host_hidden_fraction, p.host_update_s, p.step_s,
     p.compute_s, p.host_update_s);
  /* How far ahead: fetching the whole step ahead keeps every parameter
   * (fetched once); one node ahead frees them between the passes. */
  double params = ((16 * 32 + 32) + (32 * 10 + 10)) * 4.0;
  dlrt_simulated_step one, all;
  cfg.spill.prefetch = 1;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &one);
  cfg.spill.prefetch = 1000;
  rc |= dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &all);
  ok(rc == DLRT_OK && all.param_peak_bytes == (uint64_t)params &&
         one.param_peak_bytes < all.param_peak_bytes && one.h2d_bytes > all.h2d_bytes &&
         all.h2d_bytes == none.h2d_bytes + (uint64_t)params,
     "look-ahead 1000: all %g B on the device, fetched once; look-ahead 1: at most %llu B, "
     "%llu B fetched", params, (unsigned long long)one.param_peak_bytes,
     (unsigned long long)(one.h2d_bytes - none.h2d_bytes));
  /* Mixed precision: the matrices' bf16 copies (made on the host after each
   * update, the forward casts not run) stream in their place at 2 B a
   * weight, the masters only to fp32 readers; gradients go out in fp32. */
  dlrt_simulated_step low_none, low;
  cfg.precision = DLRT_BF16;
  cfg.spill.policy = DLRT_OFFLOAD_NONE;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &low_none);
  cfg.spill.policy = DLRT_OFFLOAD_PARAMS;
  rc |= dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &low);
  double matrices = (16 * 32 + 32 * 10) * 2.0, biases = (32 + 10) * 4.0;
  uint64_t low_in = low.h2d_bytes - low_none.h2d_bytes;
  ok(rc == DLRT_OK && low.params_streamed == 4 && low_in >= (uint64_t)matrices &&
         low_in <= (uint64_t)(matrices + biases) && low.d2h_bytes == (uint64_t)params,
     "bf16, look-ahead 1000: %llu B streamed in (the matrices' bf16 copies, %g B, and at most "
     "the fp32 biases, %g B; fp32 would be %g), %llu B of fp32 gradients out (%s)",
     (unsigned long long)low_in, matrices, biases, params, (unsigned long long)low.d2h_bytes,
     rc ? dlrt_last_error() : low.copies_from);
}

/* --offload params with a host budget: the optimizer state of some
 * parameters on disk, read ahead of each update and written back behind
 * it at the machine's disk figures (param_disk.c's rules replayed). */
static void check_disk(void) {
  /* Four 16 x 16 layers and a head: SGD's momentum of each square weight
   * is 1024 B, the head's 640 B, the biases' 64 B (40 B the head's), 5032 B
   * in all, and the fp32 masters as much. Under 8032 B (the masters'
   * 5032 B and 3000 B for the state: --host-limit holds both) the
   * runtime's rule (dlrt__param_disk_fit_masters) takes chunks of 128
   * elements, four slots of 512 B (2048 B): no square fits beside them, so
   * the four go to disk, and the rest (936 B) stays. */
  const char *model = tap_join(dir, "deep.model");
  tap_write_text(model, "linear 16\nrelu\nlinear 16\nrelu\nlinear 16\nrelu\nlinear 16\n"
                        "relu\nlinear 10\n");
  dlrt_trainer_config cfg = regression(model);
  cfg.spill.policy = DLRT_OFFLOAD_PARAMS;
  cfg.spill.host_budget = 8032;
  dlrt_machine m;
  /* Only the disk costs: 1 MB/s to read, 0.5 MB/s to write. */
  dlrt_machine_load(machine_file("disk", "matmul_fp32 = 1e30\nvector_fp32 = 1e30\n"
                                         "memory_bandwidth = 1e30\nlink = 1000000TB/s\n"
                                         "launch = 0\nhost_bandwidth = 1e30\n"
                                         "disk_read = 1MB/s\ndisk_write = 0.5MB/s\n"
                                         "device_memory = 1G\n"), &m);
  ok(m.disk_read_bytes_per_s == 1e6 && m.disk_write_bytes_per_s == 0.5e6,
     "a machine file's disk_read and disk_write (%g, %g B/s)", m.disk_read_bytes_per_s,
     m.disk_write_bytes_per_s);
  dlrt_simulated_step p;
  int rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &p);
  double disk_s = (double)p.disk_read_bytes / 1e6 + (double)p.disk_written_bytes / 0.5e6;
  ok(rc == DLRT_OK && p.params_on_disk == 4 && p.state_disk_bytes == 4096 &&
         p.disk_written_bytes == 4096 && p.disk_read_bytes % 1024 == 0 &&
         p.disk_read_bytes > 0 && p.disk_read_bytes <= 4096 && near(p.disk_s, disk_s, 1e-9) &&
         strstr(p.copies_from, "state on disk"),
     "8032 B of host budget: the 4 square layers' 4096 B of state on disk, each written back "
     "once a step (4096 B at 0.5 MB/s) and %llu B read ahead (at 1 MB/s): %g s of disk, "
     "got %g (%s)", (unsigned long long)p.disk_read_bytes, disk_s, p.disk_s,
     rc ? dlrt_last_error() : p.copies_from);
  /* Nothing else costs: the step is the updates' waiting for the disk
   * (the reads they need behind the last step's writes), all exposed. */
  ok(rc == DLRT_OK && p.disk_wait_s > 0 && near(p.exposed_disk_s, p.step_s, 1e-6) &&
         near(p.exposed_host_s, p.step_s, 1e-6) && p.step_s <= p.disk_s * (1 + 1e-9) &&
         p.step_s >= (double)p.disk_read_bytes / 1e6 * (1 - 1e-9),
     "free compute and host: the step (%g s) is the disk's waiting, all exposed (%g), at "
     "least its reads (%g s) and at most its I/O (%g s)", p.step_s, p.exposed_disk_s,
     (double)p.disk_read_bytes / 1e6, p.disk_s);
  /* A disk ten times as fast: ten times less disk time. */
  dlrt_machine fast = m;
  fast.disk_read_bytes_per_s *= 10, fast.disk_write_bytes_per_s *= 10;
  dlrt_simulated_step q;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &fast, NULL, &q);
  ok(rc == DLRT_OK && near(q.disk_s, p.disk_s / 10, 1e-9) && near(q.step_s, p.step_s / 10, 1e-6),
     "a disk 10x faster: %g s of disk, a %g s step (10x less)", q.disk_s, q.step_s);
  /* No disk figures: the split is known, the disk's time is not. */
  fast.disk_read_bytes_per_s = fast.disk_write_bytes_per_s = 0;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &fast, NULL, &q);
  ok(rc == DLRT_OK && q.params_on_disk == 4 && q.disk_s == 0 && q.step_s < 1e-9 &&
         strstr(q.copies_from, "no disk figures"),
     "no disk figures: 4 states on disk, their time not replayed (%s)",
     rc ? dlrt_last_error() : q.copies_from);
  /* 3700 B, below the masters: each goes to disk with its state. Two
   * parts a parameter: slots of 64 elements of each (2048 B) and the
   * masters' staging of four chunks of one (1024 B); beside them only the
   * five biases (592 B), so the four squares and the head (4736 B of
   * momentum, as much of masters) are on disk. Each is written once a
   * step with its update; the fp32 fetches (the forward and the backward
   * pass) read the masters there again, their bytes alone (4736 B each
   * time, not the 9472 B of master and momentum), so more is read than
   * written, and at most the file and the masters twice. */
  cfg.spill.host_budget = 3700;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &q);
  ok(rc == DLRT_OK && q.params_on_disk == 5 && q.state_disk_bytes == 2 * 4736 &&
         q.disk_written_bytes == q.state_disk_bytes &&
         q.disk_read_bytes > q.disk_written_bytes &&
         q.disk_read_bytes <= q.state_disk_bytes + 2 * 4736 &&
         near(q.disk_s, (double)q.disk_read_bytes / 1e6 + (double)q.disk_written_bytes / 0.5e6,
              1e-9) && q.step_s > p.step_s,
     "3700 B, below the masters: 5 parameters' masters and state on disk (%llu B), %llu B "
     "written, %llu B read (the fetches' masters alone besides the updates), a %g s step (%g "
     "with the masters on the host) (%s)", (unsigned long long)q.state_disk_bytes,
     (unsigned long long)q.disk_written_bytes, (unsigned long long)q.disk_read_bytes, q.step_s,
     p.step_s, rc ? dlrt_last_error() : q.copies_from);
  /* A budget below the least chunks' slots and staging (4 of 64 elements
   * of each of the master and the momentum, 2048 B, and 4 of the master,
   * 1024 B) is refused, as the runtime refuses it. */
  cfg.spill.host_budget = 1000;
  rc = dlrt_simulate_step(&cfg, 1, 4, 4, 10, &m, NULL, &q);
  ok(rc == DLRT_ERR_OOM && strstr(dlrt_last_error(), "give at least 0.003 MiB"),
     "a host budget of 1000 B, under four slots of 64 elements of two parts and the masters' "
     "four (3072 B), is refused: %s", dlrt_last_error());
}

int main(void) {
  tap_tempdir("test-simulate", dir, sizeof dir);
  if (dlrt_init() != DLRT_OK) bail_out("dlrt_init: %s", dlrt_last_error());
  check_presets();
  check_files();
  dlrt_device_t *dev = NULL;
  if (dlrt_device_open("cpu", &dev) != DLRT_OK) bail_out("no cpu device: %s", dlrt_last_error());
  check_replay(dev);
  check_streaming();
  check_disk();
  tap_remove_tree(dir);
  return done_testing();
}
